/* Unit tests for kernelmgr/egress/egress: the refusal counters in the ruleset, and
 * reading them back from nft's JSON (per sandbox, through the net files). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "kernelmgr/egress/egress.h"
#include "tests/lib/tap.h"

/* What nft 1.0.6 prints for `nft -j list set inet sandgate refused_by \; list
 * counter inet sandgate refused` after sgh5 refused three packets and sgh9
 * one. */
static const char listed[] =
    "{\"nftables\": [{\"metainfo\": {\"version\": \"1.0.6\", \"release_name\": \"Lester Gooch "
    "#5\", \"json_schema_version\": 1}}, {\"set\": {\"family\": \"inet\", \"name\": "
    "\"refused_by\", \"table\": \"sandgate\", \"type\": \"ifname\", \"handle\": 4, \"size\": "
    "65535, \"elem\": [{\"elem\": {\"val\": \"sgh5\", \"counter\": {\"packets\": 3, \"bytes\": "
    "180}}}, {\"elem\": {\"val\": \"sgh9\", \"counter\": {\"packets\": 1, \"bytes\": 60}}}], "
    "\"stmt\": [{\"counter\": null}]}}]}\n"
    "{\"nftables\": [{\"metainfo\": {\"version\": \"1.0.6\", \"release_name\": \"Lester Gooch "
    "#5\", \"json_schema_version\": 1}}, {\"counter\": {\"family\": \"inet\", \"name\": "
    "\"refused\", \"table\": \"sandgate\", \"handle\": 3, \"packets\": 11, \"bytes\": 660}}]}\n";

static void sandbox_dir(const char *kernels, const char *id, const char *net)
{
    char *dir = xasprintf("%s/%s", kernels, id);
    mkdir(dir, 0700);
    if (net) {
        char *path = xasprintf("%s/net", dir);
        FILE *f = fopen(path, "w");
        fputs(net, f);
        fclose(f);
        free(path);
    }
    free(dir);
}

int main(void)
{
    egress_policy_t p = {0};
    egress_parse_allow(&p, "0.0.0.0/0", NULL);
    char *rules = egress_ruleset(&p);
    ok(strstr(rules, "\tcounter refused {") != NULL, "the ruleset keeps the total counter");
    ok(strstr(rules, "\tset refused_by {\n\t\ttype ifname\n\t\tflags dynamic\n\t\tcounter\n") !=
           NULL,
       "and declares a dynamic set of interfaces with a counter each");
    const char *refuse = strstr(rules, "\tchain refuse {");
    const char *add = strstr(rules, "\t\tadd @refused_by { iifname }\n");
    const char *reject = refuse ? strstr(refuse, "reject") : NULL;
    ok(refuse && add && add > refuse && add < reject,
       "the refuse chain counts each refusal under its interface before rejecting");
    const char *vmap = strstr(rules, "\t\tiifname vmap @sandboxes\n");
    const char *blocked = strstr(rules, "ip daddr { 0.0.0.0/8");
    ok(strstr(rules, "\tmap sandboxes {\n\t\ttype ifname : verdict\n") && vmap && blocked &&
           vmap < blocked && vmap > strstr(rules, "ip daddr 100.127.0.0/16 jump refuse"),
       "a sandbox's own rules are looked up by its veth before the operator's policy");
    sg_error_t *err = NULL;
    ok(egress_check_rules("8.8.8.8, 203.0.113.0/24", "0.0.0.0/0", NULL) == 0,
       "a sandbox's rules are addresses and CIDR ranges");
    ok(egress_check_rules("api.example.com, *.example.org", "evil.example.com, 0.0.0.0/0", NULL) ==
           3,
       "host names, exact and *.NAME, may be in both lists (3 counted)");
    ok(egress_check_transforms("{\"api.example.com\": {\"Authorization\": \"Bearer "
                               "${e2b.secrets.api-key}\"}, \"*.example.org\": {}}",
                               NULL) == 2,
       "transforms: headers per host, a secret's placeholder in a value");
    const char *bad_t[] = {"[]",
                           "{\"a b\": {}}",
                           "{\"h.example\": {\"bad header\": \"v\"}}",
                           "{\"h.example\": {\"X\": 1}}",
                           "{\"h.example\": {\"X\": \"a\\nb\"}}",
                           "{\"h.example\": {\"X\": \"${e2b.identity.tokens.aws}\"}}",
                           "{\"h.example\": {\"X\": \"${e2b.secrets.}\"}}"};
    for (size_t i = 0; i < sizeof bad_t / sizeof *bad_t; i++) {
        int rc = egress_check_transforms(bad_t[i], &err);
        ok(rc < 0 && err, "transforms %s refused: %s", bad_t[i], err ? err->msg : "");
        sg_error_free(&err);
    }
    const char *bad[] = {
        "exa mple.com",    "*.",    "-a.example.com", "a..b", "a-.example.com", "example.com.*",
        "*.*.example.com", "1.2.3", "ex_ample.com"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ok(egress_check_rules(bad[i], NULL, &err) < 0 && strstr(err->msg, "allowOut") &&
               strstr(err->msg, bad[i]),
           "'%s' is refused, naming the list and the entry", bad[i]);
        sg_error_free(&err);
    }
    const char *named = strstr(rules, "\tset named {\n\t\ttype ifname\n");
    const char *pre = strstr(rules, "type nat hook prerouting");
    ok(named && pre && strstr(pre, "iifname @named tcp dport 80 redirect to :49080") &&
           strstr(pre, "iifname @named tcp dport 443 redirect to :49443"),
       "a sandbox whose rules name hosts has its ports 80 and 443 sent to the proxy");
    const char *input = strstr(rules, "\tchain input {");
    const char *take =
        input ? strstr(input, "ct status dnat tcp dport { 49080, 49443 } accept") : NULL;
    const char *drop = input ? strstr(input, "tcp dport { 49080, 49443 } drop") : NULL;
    ok(take && take < strstr(input, "iifname \"sgh*\" jump refuse") && drop && drop > take &&
           drop < strstr(input, "\n\t}"),
       "the proxy's ports take redirected connections only, before the host is refused");
    const char *proxied = strstr(rules, "\tchain proxied {");
    ok(strstr(rules, "meta skuid 64731 ct state new jump proxied") && proxied &&
           strstr(proxied, "ip daddr 100.127.0.0/16 jump refuse_proxied") &&
           strstr(proxied, "ip daddr { 0.0.0.0/8") && strstr(proxied, "ip daddr 0.0.0.0/0 accept"),
       "the proxy's connections meet the operator's policy (blocked ranges, allow list)");
    ok(egress_check_rules(NULL, "10.1.2.3/8", &err) < 0 && strstr(err->msg, "denyOut"),
       "a range with host bits set is refused");
    sg_error_free(&err);
    ok(egress_check_rules(NULL, "198.51.100.1:443", &err) < 0, "ports are not a sandbox's rules");
    sg_error_free(&err);
    if (geteuid() == 0 && access("/usr/sbin/nft", X_OK) == 0 &&
        access("/usr/bin/unshare", X_OK) == 0) {
        char path[] = "/tmp/sg-egress-nft-XXXXXX";
        int fd = mkstemp(path);
        ssize_t w = write(fd, rules, strlen(rules));
        close(fd);
        /* In a network namespace of its own: the host's rules are untouched. */
        char *cmd = xasprintf("/usr/bin/unshare -n /usr/sbin/nft -f %s", path);
        ok(w == (ssize_t)strlen(rules) && system(cmd) == 0, "nft accepts the ruleset");
        unlink(path);
        free(cmd);
    } else {
        ok(1, "# SKIP nft accepts the ruleset (needs root and nft)");
    }
    free(rules);

    char kernels[] = "/tmp/sg-egress-XXXXXX";
    if (!mkdtemp(kernels))
        return 1;
    const char *a = "11111111-1111-4111-8111-111111111111-1";
    const char *b = "22222222-2222-4222-8222-222222222222-1";
    const char *c = "33333333-3333-4333-8333-333333333333-2";
    sandbox_dir(kernels, a, "5\n");
    sandbox_dir(kernels, b, "7\n"); /* has a network, refused nothing */
    sandbox_dir(kernels, c, NULL);  /* has none */
    err = NULL;
    json_t *counts = egress_refused_parse(listed, kernels, &err);
    json_t *by = json_object_get(counts, "sandboxes");
    ok(counts && !err, "nft's two documents parse");
    is_int(json_integer_value(json_object_get(counts, "total")), 11,
           "the total is the counter's (sandboxes gone since included)");
    is_int(json_integer_value(json_object_get(by, a)), 3, "sgh5 is the sandbox whose net says 5");
    ok(json_object_size(by) == 1,
       "sandboxes that refused nothing, and an interface no sandbox claims (sgh9), are absent");
    json_decref(counts);

    counts = egress_refused_parse("{\"nftables\": [{\"set\": {\"name\": \"refused_by\"}}]}\n{\"nf",
                                  kernels, &err);
    ok(!counts && err && strstr(err->msg, "not JSON"), "a cut answer is an error (%s)",
       err ? err->msg : "none");
    sg_error_free(&err);
    counts = egress_refused_parse("{\"nftables\": []}", kernels, &err);
    ok(!counts && err && strstr(err->msg, "refused"), "no total counter is an error");
    sg_error_free(&err);

    char *cmd = xasprintf("rm -rf '%s'", kernels);
    if (system(cmd) != 0)
        return 1;
    free(cmd);
    return tap_done();
}
