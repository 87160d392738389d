/* ports: the routes to a sandbox's own servers, and who may take them
 * (ports.h); forward.c carries each request. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "gateway/ports/internal.h"
#include "gateway/tenants/tenants.h"

ports_t *ports_new(loop_t *loop, kmgr_t *kmgr, ports_public_fn *is_public, void *public_ctx,
                   void (*wake)(void *), void *wake_arg)
{
    ports_t *self = xzalloc(sizeof *self);
    *self = (ports_t){.loop = loop,
                      .kmgr = kmgr,
                      .is_public = is_public,
                      .public_ctx = public_ctx,
                      .wake = wake,
                      .wake_arg = wake_arg};
    tenants_count_source(TENANT_QUEUED, fwd_count_owner, self);
    return self;
}

void ports_destroy(ports_t **self_p)
{
    ports_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    tenants_uncount_source(TENANT_QUEUED, fwd_count_owner, self);
    free(self); /* forwards left end with their requests (http_server_destroy first) */
}

/* {exposed}: a context whose sandbox's ports the caller may reach — its
 * tenant's (or an admin's), or anyone's when the sandbox is public.  The
 * owner check is this resolver's, not the route layer's: a caller without a
 * key gets through for an E2B sandbox only (forward refuses a private one
 * with 403). */
static void *resolve_exposed(void *ctx, const char *id, const http_req_t *req)
{
    ports_t *self = ctx;
    kernel_t *k = kmgr_get(self->kmgr, id);
    if (!k)
        return NULL;
    kernel_t *host = kernel_host(k) ? kernel_host(k) : k;
    if (req->tenant)
        return http_may_see(req, kernel_owner(host)) ? k : NULL;
    return self->is_public && self->is_public(self->public_ctx, host, NULL) != PORTS_HIDDEN ? k
                                                                                            : NULL;
}

/* A port number of 1..65535 at s, its digits only up to end; 0 if not. */
static int port_at(const char *s, const char *end)
{
    if (s == end || end - s > 5 || *s == '0')
        return 0;
    int port = 0;
    for (const char *p = s; p < end; p++) {
        if (!isdigit((unsigned char)*p))
            return 0;
        port = port * 10 + (*p - '0');
    }
    return port <= 65535 ? port : 0;
}

/* E2B's forms: E2b-Sandbox-Id with E2b-Sandbox-Port (docker/'s proxy sets
 * both from the host), or Host: PORT-ID.DOMAIN itself.  The ports of envd
 * and the code interpreter stay sandgate's own routes. */
static char *rewrite(void *ctx, struct MHD_Connection *conn, const char *path)
{
    ports_t *self = ctx;
    const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    const char *ps = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Port");
    int port = 0;
    size_t idlen = 0;
    if (id && ps) {
        port = port_at(ps, ps + strlen(ps));
        idlen = strlen(id);
    } else if (!id) {
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
        const char *dash = host ? strchr(host, '-') : NULL;
        const char *dot = dash ? strchr(dash, '.') : NULL;
        port = dot ? port_at(host, dash) : 0;
        id = dash + 1;
        idlen = port ? (size_t)(dot - id) : 0;
    }
    if (!port || port == PORTS_ENVD || port == PORTS_CODE_INTERPRETER || idlen == 0 ||
        idlen > 128 || strcspn(id, "/?#%") < idlen)
        return NULL;
    /* A host that only looks like one (a gateway named 8080-api.example)
     * keeps its own routes: the id must be a context's. */
    char *sid = xstrndup(id, idlen);
    bool known = kmgr_get(self->kmgr, sid) != NULL;
    free(sid);
    return known ? xasprintf("/contexts/%.*s/ports/%d%s", (int)idlen, id, port, path) : NULL;
}

/* ANY /contexts/{exposed}/ports/{port}/PATH: the target the server gets is
 * the client's own (escaped as sent) after the port, or all of it when the
 * Host named the port. */
static enum MHD_Result forward(void *ctx, http_req_t *req)
{
    ports_t *self = ctx;
    if (req->state)
        return fwd_handle(req->state, req);
    kernel_t *k = http_arg(req, "exposed");
    const char *rest = req->rest && req->rest[0] == '/' ? req->rest + 1 : "";
    const char *slash = strchr(rest, '/');
    int port = port_at(rest, slash ? slash : rest + strlen(rest));
    if (!port)
        return http_reply_errorf(req->conn, SG_E_INVALID,
                                 "want /contexts/ID/ports/PORT/PATH, PORT 1..65535");
    const char *target = req->target;
    if (!req->rewritten) { /* past /contexts/ID/ports/PORT in what the client sent */
        for (int seg = 0; seg < 4 && target[0] == '/'; seg++)
            target += 1 + strcspn(target + 1, "/?");
    }
    char *owned = target[0] == '/' ? NULL : xasprintf("/%s", target);
    sg_error_t *err = NULL;
    kernel_t *host = kernel_host(k) ? kernel_host(k) : k;
    if (!req->tenant && self->is_public(self->public_ctx, host, NULL) != PORTS_PUBLIC) {
        free(owned);
        return http_reply_errorf(req->conn, SG_E_FORBIDDEN,
                                 "sandbox %s was made with allowPublicTraffic false: its ports "
                                 "need its traffic access token (E2B-Traffic-Access-Token) or "
                                 "its tenant's key",
                                 kernel_id(host));
    }
    if (fwd_count_sandbox(self, host) >= PORTS_MAX_PER_SANDBOX)
        sg_error_set(&err, SG_E_TOO_MANY,
                     "sandbox %s has %d requests to its ports under way already; retry when "
                     "one ends",
                     kernel_id(host), PORTS_MAX_PER_SANDBOX);
    else
        tenant_admit_work(kernel_owner(host), &err);
    if (err) {
        free(owned);
        enum MHD_Result ret = http_reply_error(req->conn, err);
        sg_error_free(&err);
        return ret;
    }
    req->state = fwd_new(self, req, k, port, owned ? owned : target);
    free(owned);
    return fwd_handle(req->state, req);
}

static void done(void *ctx, void *state, bool completed)
{
    (void)ctx;
    (void)completed;
    fwd_free(state);
}

int ports_register(ports_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"GET", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
        {"POST", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
        {"PUT", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
        {"PATCH", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
        {"DELETE", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
        {"OPTIONS", "/contexts/{exposed}/ports/*", forward, HTTP_ROUTE_PUBLIC, NULL},
    };
    const http_front_t front = {.name = "ports", .ctx = self, .done = done};
    if (http_param(http, "exposed", resolve_exposed, NULL, self, "no context '%s'", err) < 0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof *routes, err) < 0)
        return -1;
    http_server_set_rewrite(http, rewrite, self);
    return 0;
}
