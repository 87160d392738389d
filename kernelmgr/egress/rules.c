/* rules: a sandbox's own egress rules (E2B's allowOut and denyOut) — the
 * chain sbN for addresses, the proxy for host names (egress.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/xalloc.h"
#include "kernelmgr/egress/internal.h"

/* A host name, or "*." and one (any name under it): letters, digits and
 * '-' in labels of 1..63, 253 at most. */
bool egress_name_ok(const char *s, const char *e)
{
    if (e - s > 2 && s[0] == '*' && s[1] == '.')
        s += 2;
    if (e - s > 253 || s == e)
        return false;
    size_t label = 0;
    bool letter = false;
    for (const char *p = s; p < e; p++) {
        if (*p == '.') {
            if (label == 0 || p[-1] == '-')
                return false;
            label = 0;
        } else if (isalnum((unsigned char)*p) || (*p == '-' && label > 0)) {
            letter |= isalpha((unsigned char)*p) != 0;
            if (++label > 63)
                return false;
        } else {
            return false;
        }
    }
    return label > 0 && e[-1] != '-' && letter;
}

/* A list of a sandbox's rules: addresses, CIDR ranges and host names (no
 * ports); *names counts the names. */
static int parse_list(const char *what, const char *list, egress_rule_t *out, size_t *n,
                      size_t *names, sg_error_t **err)
{
    *n = 0;
    const char *rest = list ? list : "", *s, *e;
    while (egress_next_item(&rest, &s, &e)) {
        if (*n + *names == EGRESS_MAX_RULES)
            return sg_error_set(err, SG_E_INVALID, "%s: more than %d entries", what,
                                EGRESS_MAX_RULES);
        if (!memchr(s, ':', (size_t)(e - s)) && egress_parse_rule(s, e, &out[*n]) == 0)
            (*n)++;
        else if (egress_name_ok(s, e))
            (*names)++;
        else
            return sg_error_set(err, SG_E_INVALID,
                                "%s: '%.*s' is not an IPv4 address, a CIDR range or a host name "
                                "(e.g. 8.8.8.8, 203.0.113.0/24, 0.0.0.0/0, api.example.com, "
                                "*.example.com)",
                                what, (int)(e - s), s);
    }
    return 0;
}

/* The number of host names in allow and deny, or -1 with *err. */
static int names_in(const char *allow, const char *deny, sg_error_t **err)
{
    egress_rule_t r[EGRESS_MAX_RULES];
    size_t n, names = 0;
    if (parse_list("allowOut", allow, r, &n, &names, err) < 0)
        return -1;
    size_t in_allow = names;
    names = 0;
    if (parse_list("denyOut", deny, r, &n, &names, err) < 0)
        return -1;
    return (int)(in_allow + names);
}

int egress_check_rules(const char *allow, const char *deny, sg_error_t **err)
{
    return names_in(allow, deny, err);
}

static void put_list(FILE *f, const char *list, const char *verdict)
{
    egress_rule_t r[EGRESS_MAX_RULES];
    size_t n = 0, names = 0;
    parse_list("", list, r, &n, &names, NULL);
    for (size_t i = 0; i < n; i++) {
        fputs("\t\tip daddr ", f);
        egress_put_addr(f, r[i].net);
        fprintf(f, "/%d %s\n", r[i].prefix, verdict);
    }
}

/* The rule that refuses what lies outside a tenant's limit (its addresses;
 * its names are the proxy's, which the set "named" sends ports 80 and 443
 * to): everything, when it has no addresses. */
static void put_limit(FILE *f, const char *limit)
{
    egress_rule_t r[EGRESS_MAX_RULES];
    size_t n = 0, names = 0;
    parse_list("", limit, r, &n, &names, NULL);
    if (n == 0) { /* no address: nothing but what the proxy allows by name */
        fputs("\t\tjump refuse\n", f);
        return;
    }
    fputs("\t\tip daddr != { ", f);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ", " : "", f);
        egress_put_addr(f, r[i].net);
        fprintf(f, "/%d", r[i].prefix);
    }
    fputs(" } jump refuse\n", f);
}

/* Adds or deletes sghN in the set "named" (whose TCP to ports 80 and 443
 * goes to the proxy). */
static int named(int n, bool add, sg_error_t **err)
{
    char elem[48];
    snprintf(elem, sizeof elem, "{ sgh%d }", n);
    const char *nft = egress_tool("nft");
    if (!nft)
        return sg_error_set(err, SG_E_UNAVAILABLE, "nft not found (apt-get install nftables)");
    cleanup_free char *nft_path = xstrdup(nft);
    const char *args[] = {
        add ? "add" : "delete", "element", "inet", "sandgate", "named", elem, NULL};
    return egress_run(add ? err : NULL, nft_path, args);
}

int egress_apply_rules(const char *dir, int n, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/" RULES_FILE, dir);
    cleanup_free char *text = NULL;
    size_t len = 0;
    FILE *in = fopen(path, "re");
    if (in == NULL) { /* none (any more): all go, if they were there */
        char chain[32], elem[48];
        snprintf(chain, sizeof chain, "sb%d", n);
        snprintf(elem, sizeof elem, "{ sgh%d }", n);
        const char *nft = egress_tool("nft");
        cleanup_free char *nft_path = nft ? xstrdup(nft) : NULL;
        const char *del_elem[] = {"delete", "element", "inet", "sandgate", "sandboxes", elem, NULL};
        const char *del_chain[] = {"delete", "chain", "inet", "sandgate", chain, NULL};
        if (nft_path) {
            egress_run(NULL, nft_path, del_elem);
            egress_run(NULL, nft_path, del_chain);
            named(n, false, NULL);
        }
        if (egress_proxy_up(NULL))
            egress_proxy_rules(n, "", "", NULL, "", NULL);
        return 0;
    }
    cleanup_free char *allow = NULL, *deny = NULL, *transforms = NULL, *tenant = NULL;
    cleanup_free char *line = NULL;
    size_t cap = 0;
    char **fields[] = {&allow, &deny, &transforms, &tenant};
    const char *keys[] = {"allow ", "deny ", "transforms ", "tenant "};
    while (getline(&line, &cap, in) > 0) {
        line[strcspn(line, "\n")] = 0;
        for (size_t i = 0; i < 4; i++)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0 && !*fields[i])
                *fields[i] = xstrdup(line + strlen(keys[i]));
    }
    fclose(in);
    /* Its tenant's limit, when it has one: what it reaches at most. */
    const char *limit = egress_tenant_limit(tenant && *tenant ? tenant : NULL);
    int names = names_in(allow, deny, err), hosts = egress_check_transforms(transforms, err);
    if (names < 0 || hosts < 0)
        return -1;
    names += limit ? egress_check_rules(limit, NULL, NULL) : 0;
    /* Names first: the proxy knows them before the redirect sends it
     * anything; without any, it forgets the sandbox after.  A secret
     * deleted since leaves its header out (strict: false). */
    if (names + hosts > 0) {
        if (egress_transform_certs(transforms, err) < 0)
            return -1;
        char *headers = egress_transform_lines(transforms, tenant, false, NULL);
        int rc = egress_proxy_rules(n, allow, deny, limit, headers, err);
        if (headers)
            sodium_memzero(headers, strlen(headers));
        free(headers);
        if (rc < 0 || named(n, true, err) < 0)
            return -1;
    } else {
        named(n, false, NULL);
        if (egress_proxy_up(NULL))
            egress_proxy_rules(n, "", "", NULL, "", NULL);
    }
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        abort();
    /* Made if missing, then emptied and filled in one transaction. */
    fprintf(f,
            "table inet sandgate {\n\tchain sb%d {\n\t}\n}\n"
            "flush chain inet sandgate sb%d\n"
            "table inet sandgate {\n\tchain sb%d {\n",
            n, n, n);
    if (limit) /* outside the tenant's limit: refused, whatever the sandbox says */
        put_limit(f, limit);
    put_list(f, allow, "return"); /* allowOut wins over denyOut */
    put_list(f, deny, "jump refuse");
    fprintf(f, "\t}\n}\nadd element inet sandgate sandboxes { \"sgh%d\" : jump sb%d }\n", n, n);
    fclose(f);
    return egress_nft(text, err);
}

int egress_sandbox_rules(const char *dir, const egress_own_t *own, sg_error_t **err)
{
    const char *allow = own->allow, *deny = own->deny, *transforms = own->transforms;
    int names = names_in(allow, deny, err), hosts = egress_check_transforms(transforms, err);
    if (names < 0 || hosts < 0 || (names + hosts > 0 && !egress_proxy_up(err)))
        return -1;
    if (hosts > 0) { /* each secret named is the tenant's */
        char *headers = egress_transform_lines(transforms, own->tenant, true, err);
        if (headers == NULL)
            return -1;
        sodium_memzero(headers, strlen(headers));
        free(headers);
    }
    cleanup_free char *path = xasprintf("%s/" RULES_FILE, dir);
    /* Kept while there are rules, or a tenant (whose limit may come). */
    if ((!allow || !*allow) && (!deny || !*deny) && hosts == 0 && !own->tenant) {
        if (unlink(path) < 0 && errno != ENOENT)
            return sg_error_errno(err, errno, "cannot remove %s", path);
    } else {
        cleanup_free char *tmp = xasprintf("%s.new", path);
        FILE *f = fopen(tmp, "we");
        if (f == NULL ||
            fprintf(f, "allow %s\ndeny %s\ntransforms %s\ntenant %s\n", allow ? allow : "",
                    deny ? deny : "", hosts ? transforms : "",
                    own->tenant ? own->tenant : "") < 0 ||
            fclose(f) != 0 || rename(tmp, path) < 0)
            return sg_error_errno(err, errno, "cannot write %s", path);
    }
    int n = egress_index_of(dir);
    if (n < 0 || !egress_link_exists(n)) /* applied when its network comes up */
        return 0;
    return egress_apply_rules(dir, n, err);
}
