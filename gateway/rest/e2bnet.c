/* e2bnet: an E2B sandbox's network rules — create's allow_internet_access
 * and network {allowOut, denyOut}, and PUT /sandboxes/{id}/network —
 * onto sandgate's egress (kernelmgr/egress): a sandbox with a network gets
 * rules of its own inside the operator's --egress-allow policy.  A
 * destination in denyOut and not in allowOut is refused; the rest goes on
 * to the operator's policy, which still refuses what it refuses (a
 * sandbox's rules never allow more).  allow_internet_access false is
 * E2B's denyOut 0.0.0.0/0.  Addresses and CIDR ranges only: host names,
 * per-domain transforms and egress proxies are refused with 400.  The
 * rules are the context's record ("e2b" "network"), the session's record
 * (a restart keeps them) and the sandbox's nftables chain.  Also
 * network.allowPublicTraffic: whether its ports (gateway/ports/) need a
 * credential, and network.maskRequestHost: the Host header their servers
 * get ("${PORT}" the port asked). */
#include <ctype.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/rest/internal.h"

/* What E2B's SandboxNetworkConfig holds that sandgate does not do. */
static const char *const unsupported[] = {"egressProxy", "httpsPorts"};

static bool (*secret_known)(void *ctx, const char *tenant, const char *name);
static void *secret_ctx;

void api_network_secrets(bool (*known)(void *ctx, const char *tenant, const char *name), void *ctx)
{
    secret_known = known;
    secret_ctx = ctx;
}

static void reapplied(const sg_error_t *err, void *arg)
{
    char *id = arg;
    if (err)
        log_warn("e2b: context %s: its network rules with a changed secret: %s", id, err->msg);
    free(id);
}

void api_network_secret_changed(void *api, const char *tenant)
{
    api_t *self = api;
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        const kernel_opts_t *o = kernel_opts(k);
        if (!o->egress_transforms || !strstr(o->egress_transforms, "${e2b.secrets.") ||
            strcmp(kernel_owner(k), tenant) != 0)
            continue;
        /* copies: setting them frees the kernel's own */
        cleanup_free char *allow = xstrdup(o->egress_allow ?: "");
        cleanup_free char *deny = xstrdup(o->egress_deny ?: "");
        cleanup_free char *transforms = xstrdup(o->egress_transforms);
        kmgr_set_egress(self->kmgr, k, allow, deny, transforms, reapplied, xstrdup(kernel_id(k)));
    }
}

/* The first ${e2b.secrets.NAME} in transforms that is not tenant's: a new
 * string saying so, or NULL. */
static char *unknown_secret(const char *transforms, const char *tenant)
{
    static const char mark[] = "${e2b.secrets.";
    for (const char *p = transforms; secret_known && p && (p = strstr(p, mark)); p++) {
        const char *name = p + sizeof mark - 1;
        size_t n = strcspn(name, "}\"");
        cleanup_free char *copy = xstrndup(name, n);
        if (name[n] == '}' && !secret_known(secret_ctx, tenant, copy))
            return xasprintf("network.rules: no secret '%s' (POST /secrets makes one)", copy);
    }
    return NULL;
}

/* network.rules, E2B's {"HOST": [{"transform": {"headers": {NAME: VALUE}}}]},
 * into *transforms: {"HOST": {NAME: VALUE}} as JSON text (a host's rules'
 * headers merged, the later winning); NULL when none.  false with *why. */
static bool take_rules(json_t *network, char **transforms, char **why)
{
    json_t *rules = json_object_get(network, "rules"), *list, *rule;
    const char *host;
    size_t i;
    *transforms = NULL;
    if (rules == NULL || json_is_null(rules) || json_object_size(rules) == 0)
        return true;
    if (!json_is_object(rules)) {
        *why = xstrdup("network.rules must be an object: {\"HOST\": [{\"transform\": "
                       "{\"headers\": {...}}}]}");
        return false;
    }
    json_t *out = json_object();
    json_object_foreach (rules, host, list) {
        json_t *headers = json_object();
        json_object_set_new(out, host, headers);
        json_array_foreach (list, i, rule) {
            json_t *h = json_object_get(json_object_get(rule, "transform"), "headers");
            if (!json_is_object(rule) || (h && !json_is_object(h))) {
                *why = xasprintf("network.rules.%s: each rule is {\"transform\": {\"headers\": "
                                 "{NAME: VALUE}}}",
                                 host);
                break;
            }
            json_object_update(headers, h);
        }
        if (!json_is_array(list) && !*why)
            *why = xasprintf("network.rules.%s must be a list of rules", host);
        if (*why)
            break;
    }
    if (!*why)
        *transforms = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(out);
    return *why == NULL;
}

static enum MHD_Result net_reply(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    return http_reply_json(conn, status, json_pack("{s:i, s:s}", "code", status, "message", msg));
}

/* A list of strings at network[key] joined with ',' into *out (NULL when
 * absent or empty); false with *why. */
static bool join_list(json_t *network, const char *key, char **out, char **why)
{
    json_t *v = json_object_get(network, key), *item;
    size_t i;
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    if (!json_is_array(v)) {
        *why = xasprintf("network.%s must be an array of strings", key);
        return false;
    }
    size_t len = 0;
    json_array_foreach (v, i, item) {
        if (!json_is_string(item) || strchr(json_string_value(item), ',')) {
            *why = xasprintf(
                "network.%s must be an array of strings (addresses, CIDR ranges, host names)", key);
            free(*out);
            *out = NULL;
            return false;
        }
        const char *s = json_string_value(item);
        *out = xrealloc(*out, len + strlen(s) + 2);
        len += (size_t)sprintf(*out + len, "%s%s", len ? "," : "", s);
    }
    return true;
}

/* maskRequestHost: a Host header's value, ${PORT} standing for a port. */
static bool mask_ok(const json_t *mask)
{
    if (!json_is_string(mask) || json_string_length(mask) > 255)
        return false;
    for (const char *p = json_string_value(mask); *p; p++) {
        if (strncmp(p, "${PORT}", 7) == 0)
            p += 6;
        else if (!isalnum((unsigned char)*p) && !strchr("-.:", *p))
            return false;
    }
    return true;
}

bool api_network_parse(json_t *body, const char *tenant, e2b_net_t *net, char **why_p)
{
    *net = (e2b_net_t){0};
    json_t *ai = json_object_get(body, "allow_internet_access");
    json_t *network = json_object_get(body, "network");
    cleanup_free char *why = NULL;
    if (ai && !json_is_null(ai) && !json_is_boolean(ai))
        why = xstrdup("'allow_internet_access' must be a boolean");
    else if (network && !json_is_null(network) && !json_is_object(network))
        why = xstrdup("'network' must be an object");
    for (size_t i = 0;
         !why && json_is_object(network) && i < sizeof unsupported / sizeof *unsupported; i++) {
        json_t *v = json_object_get(network, unsupported[i]);
        if (v && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0) &&
            !(json_is_array(v) && json_array_size(v) == 0))
            why = xasprintf("network.%s is not supported by sandgate (its sandboxes' rules are "
                            "addresses, CIDR ranges and host names: allowOut, denyOut)",
                            unsupported[i]);
    }
    json_t *pub = json_object_get(network, "allowPublicTraffic");
    if (!why && pub && !json_is_null(pub) && !json_is_boolean(pub))
        why = xstrdup("network.allowPublicTraffic must be a boolean");
    json_t *mask = json_object_get(network, "maskRequestHost");
    if (!why && mask && !json_is_null(mask) && !mask_ok(mask))
        why = xstrdup("network.maskRequestHost must be a host[:port] of up to 255 characters "
                      "(letters, digits, '-', '.', ':', and ${PORT} for the port asked)");
    if (!why && join_list(network, "allowOut", &net->allow, &why) &&
        join_list(network, "denyOut", &net->deny, &why) &&
        join_list(network, "dnsServers", &net->dns, &why))
        take_rules(network, &net->transforms, &why);
    sg_error_t *dns_err = NULL;
    if (!why && net->dns &&
        (kmgr_check_egress(net->dns, NULL, NULL, &dns_err) != 0 || strchr(net->dns, '/') ||
         json_array_size(json_object_get(network, "dnsServers")) > 10))
        why = xasprintf("network.dnsServers: up to 10 IPv4 addresses%s%s", dns_err ? ": " : "",
                        dns_err ? dns_err->msg : "");
    sg_error_free(&dns_err);
    sg_error_t *err = NULL;
    if (!why && kmgr_check_egress(net->allow, net->deny, net->transforms, &err) < 0) {
        why = xstrdup(err->msg);
        sg_error_free(&err);
    }
    if (!why && net->transforms)
        why = unknown_secret(net->transforms, tenant);
    if (why) {
        api_e2b_network_free(net);
        *why_p = why;
        why = NULL;
        return false;
    }
    net->private_ports = json_is_false(pub);
    if (json_is_string(mask) && json_string_length(mask) > 0)
        net->mask_host = xstrdup(json_string_value(mask));
    if (net->transforms)
        net->rules = json_deep_copy(json_object_get(network, "rules"));
    net->asked = ai && json_is_boolean(ai);
    net->internet_access = json_is_true(ai);
    if (net->asked && !net->internet_access) /* E2B's denyOut 0.0.0.0/0, before the rest */
        net->rules_deny = xasprintf("0.0.0.0/0%s%s", net->deny ? "," : "", net->deny ?: "");
    else if (net->deny)
        net->rules_deny = xstrdup(net->deny);
    /* E2B's dnsServers: servers a sandbox that allows a host by name may
     * reach (its resolvers are --egress-dns, reachable anyway). */
    if (net->dns && net->allow && kmgr_check_egress(net->allow, NULL, NULL, NULL) > 0)
        net->rules_allow = xasprintf("%s,%s", net->allow, net->dns);
    else if (net->allow)
        net->rules_allow = xstrdup(net->allow);
    /* A network when asked for, or when rules were given without saying
     * (E2B's default is the internet); not when refused and nothing is
     * let through. */
    net->internet = net->asked ? net->internet_access || net->allow || net->transforms
                               : net->allow || net->deny || net->transforms;
    return true;
}

bool api_e2b_network(json_t *body, const char *tenant, e2b_net_t *net, struct MHD_Connection *conn,
                     enum MHD_Result *ret)
{
    cleanup_free char *why = NULL;
    if (api_network_parse(body, tenant, net, &why))
        return true;
    *ret = net_reply(conn, 400, why);
    return false;
}

void api_e2b_network_free(e2b_net_t *net)
{
    free(net->allow);
    free(net->deny);
    free(net->rules_deny);
    free(net->rules_allow);
    free(net->dns);
    free(net->transforms);
    free(net->mask_host);
    json_decref(net->rules);
    *net = (e2b_net_t){0};
}

/* A list as E2B gives it back: an array of its entries. */
static json_t *split_list(const char *list)
{
    json_t *a = json_array();
    while (list && *list) {
        size_t n = strcspn(list, ",");
        json_array_append_new(a, json_stringn(list, n));
        list += n + (list[n] == ',');
    }
    return a;
}

void api_e2b_network_record(json_t *e2b, const e2b_net_t *net)
{
    if (net->asked)
        json_object_set_new(e2b, "allowInternetAccess", json_boolean(net->internet_access));
    if (net->private_ports) /* public unless made private (gateway/ports/) */
        json_object_set_new(e2b, "allowPublicTraffic", json_false());
    if (net->mask_host)
        json_object_set_new(e2b, "maskRequestHost", json_string(net->mask_host));
    if (net->allow || net->deny || net->rules || net->dns)
        json_object_set_new(e2b, "network",
                            json_pack("{s:o, s:o, s:O*, s:o*}", "allowOut", split_list(net->allow),
                                      "denyOut", split_list(net->deny), "rules", net->rules,
                                      "dnsServers", net->dns ? split_list(net->dns) : NULL));
    else
        json_object_del(e2b, "network");
}

/* --- PUT /sandboxes/{id}/network ------------------------------------------------ */

static void rules_set(const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    if (s->done) { /* the client left: nobody to answer */
        api_stream_unref(s);
        return;
    }
    api_stream_answer(s, err ? sg_error_http_status(err->kind) : 204,
                      err ? json_pack("{s:s}", "message", err->msg) : json_object());
}

/* Why not, in E2B's shape for its route, else sandgate's. */
static enum MHD_Result refuse(http_req_t *call, unsigned status, const char *msg)
{
    if (strncmp(call->path, "/contexts/", 10) != 0)
        return net_reply(call->conn, status, msg);
    sg_errkind_t kind = status == 400   ? SG_E_INVALID
                        : status == 404 ? SG_E_NOTFOUND
                        : status == 409 ? SG_E_CONFLICT
                        : status == 503 ? SG_E_UNAVAILABLE
                                        : SG_E_INTERNAL;
    return http_reply_errorf(call->conn, kind, "%s", msg);
}

/* The update's answer: 204, or why not; later when the launcher has not answered yet. */
static enum MHD_Result rules_answer(http_req_t *call)
{
    stream_t *s = call->state;
    if (!s->done)
        return resp_wait(s->out);
    if (s->status >= 300)
        return refuse(call, s->status, json_string_value(json_object_get(s->agg, "message")));
    return reply_status(call->conn, 204);
}

/* PUT /sandboxes/{sandbox}/network (E2B's) and PUT /contexts/{context}/network
 * (sandgate's): the same body, {allowOut, denyOut}, in their own shapes. */
enum MHD_Result api_e2b_network_put(void *arg, http_req_t *call)
{
    api_t *self = arg;
    if (call->resumed)
        return rules_answer(call);
    bool mine = strncmp(call->path, "/contexts/", 10) == 0;
    kernel_t *k = http_arg(call, mine ? "context" : "sandbox");
    json_error_t jerr;
    json_t *body = call->len ? json_loadb(call->body, call->len, 0, &jerr) : NULL;
    if (!json_is_object(body)) {
        json_decref(body);
        return refuse(call, 400, "the body must be a JSON object: {\"allowOut\", \"denyOut\"}");
    }
    /* The update's fields are the network's own (allowOut, denyOut, ...)
     * beside allow_internet_access: read as create's body. */
    json_t *as_create = json_pack("{s:O}", "network", body);
    json_t *ai = json_object_get(body, "allow_internet_access");
    if (ai)
        json_object_set(as_create, "allow_internet_access", ai);
    json_object_del(json_object_get(as_create, "network"), "allow_internet_access");
    e2b_net_t net;
    cleanup_free char *why = NULL;
    bool good = api_network_parse(as_create, call->tenant ? call->tenant->name : NULL, &net, &why);
    json_decref(as_create);
    json_decref(body);
    if (!good)
        return refuse(call, 400, why);
    if (!kernel_internet(kernel_host(k) ? kernel_host(k) : k)) {
        bool allows = net.allow != NULL || net.transforms != NULL;
        api_e2b_network_free(&net);
        if (!allows) /* it reaches nothing, as asked */
            return reply_status(call->conn, 204);
        return refuse(call, 409,
                      "the sandbox has no network (made without internet access, or this "
                      "server gives none): allowOut cannot give it one");
    }
    audit_who_t who;
    http_who(call, mine ? "rest" : "e2b", &who);
    json_t *hosts = json_array(); /* the hosts that get headers, not the headers */
    const char *host;
    json_t *v;
    json_object_foreach (net.rules, host, v)
        json_array_append_new(hosts, json_string(host));
    audit_event(&who, "context.network",
                json_pack("{s:s, s:s?, s:s?, s:o}", "context", kernel_id(k), "allow", net.allow,
                          "deny", net.rules_deny, "headers_for", hosts));
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    json_t *e2b = json_object_get(meta, "e2b");
    if (e2b) {
        json_object_del(e2b, "allowInternetAccess");
        api_e2b_network_record(e2b, &net);
        api_record_write(self, kernel_id(k));
    }
    stream_t *s = api_stream_new(self, call->conn, k); /* refs: the callback's, the request's */
    s->json_mode = s->snapshot_wait = true;
    kmgr_set_egress(self->kmgr, k, net.rules_allow ?: "", net.rules_deny ?: "",
                    net.transforms ?: "", rules_set, s);
    api_e2b_network_free(&net);
    call->state = s; /* the front end's done drops the request's reference */
    return rules_answer(call);
}

void api_network_json(json_t *context, const char *allow, const char *deny, const char *transforms)
{
    json_t *t = transforms ? json_loads(transforms, 0, NULL) : NULL, *headers;
    json_t *rules = t ? json_object() : NULL;
    const char *host;
    json_object_foreach (t, host, headers) /* E2B's shape again: one rule a host */
        json_object_set_new(rules, host, json_pack("[{s:{s:O}}]", "transform", "headers", headers));
    json_decref(t);
    if ((allow && *allow) || (deny && *deny) || rules)
        json_object_set_new(context, "network",
                            json_pack("{s:o, s:o, s:o*}", "allowOut", split_list(allow), "denyOut",
                                      split_list(deny), "rules", rules));
}

void api_e2b_network_json(json_t *sandbox, const json_t *e2b)
{
    json_t *ai = json_object_get(e2b, "allowInternetAccess");
    json_object_set(sandbox, "allowInternetAccess", ai ? ai : json_null());
    json_t *net = json_object_get(e2b, "network");
    if (net)
        json_object_set_new(sandbox, "network", json_deep_copy(net));
    json_t *pub = json_object_get(e2b, "allowPublicTraffic");
    json_t *mask = json_object_get(e2b, "maskRequestHost");
    if ((json_is_false(pub) || mask) && !net)
        json_object_set_new(sandbox, "network", json_object());
    if (json_is_false(pub))
        json_object_set_new(json_object_get(sandbox, "network"), "allowPublicTraffic",
                            json_false());
    if (mask)
        json_object_set(json_object_get(sandbox, "network"), "maskRequestHost", mask);
}

ports_access_t api_ports_public(void *api, const kernel_t *k, const char **mask_host)
{
    api_t *self = api;
    json_t *e2b = json_object_get(json_object_get(self->contexts, kernel_id(k)), "e2b");
    if (mask_host)
        *mask_host = json_string_value(json_object_get(e2b, "maskRequestHost"));
    return !e2b                                                        ? PORTS_HIDDEN
           : json_is_false(json_object_get(e2b, "allowPublicTraffic")) ? PORTS_PRIVATE
                                                                       : PORTS_PUBLIC;
}
