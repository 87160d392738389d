/* egress: network namespaces, veths and nftables rules for sandboxes whose
 * context opted in to the network (egress.h says what and why). */
#include "kernelmgr/egress/internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

#define POOL_PREFIX 16
#define POOL_SIZE (1u << (32 - POOL_PREFIX - 2))
#define NETNS_DIR "/var/run/netns"

static const struct {
    const char *cidr;
    uint32_t net;
    int prefix;
} blocked[] = {
    {"0.0.0.0/8", 0x00000000u, 8},       {"10.0.0.0/8", 0x0a000000u, 8},
    {"100.64.0.0/10", 0x64400000u, 10},  {"127.0.0.0/8", 0x7f000000u, 8},
    {"169.254.0.0/16", 0xa9fe0000u, 16}, {"172.16.0.0/12", 0xac100000u, 12},
    {"192.168.0.0/16", 0xc0a80000u, 16}, {"224.0.0.0/4", 0xe0000000u, 4},
    {"240.0.0.0/4", 0xf0000000u, 4},
};

static uint32_t mask_of(int prefix)
{
    return prefix == 0 ? 0 : ~0u << (32 - prefix);
}

static int parse_addr(const char *s, size_t n, uint32_t *out)
{
    char buf[INET_ADDRSTRLEN];
    struct in_addr a;
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (inet_pton(AF_INET, buf, &a) != 1)
        return -1;
    *out = ntohl(a.s_addr);
    return 0;
}

static int parse_port(const char *s, const char *end, uint16_t *out)
{
    if (s == end || end - s > 5)
        return -1;
    unsigned v = 0;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (v == 0 || v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

/* One entry: ADDR[/PREFIX][:PORT[-PORT]] in [s, end). */
int egress_parse_rule(const char *s, const char *end, egress_rule_t *r)
{
    *r = (egress_rule_t){.prefix = 32};
    const char *colon = memchr(s, ':', (size_t)(end - s));
    const char *addr_end = colon ? colon : end;
    const char *slash = memchr(s, '/', (size_t)(addr_end - s));
    if (parse_addr(s, (size_t)((slash ? slash : addr_end) - s), &r->net) < 0)
        return -1;
    if (slash) {
        char *e;
        long p = strtol(slash + 1, &e, 10);
        if (e != addr_end || slash + 1 == addr_end || p < 0 || p > 32)
            return -1;
        r->prefix = (int)p;
    }
    if ((r->net & ~mask_of(r->prefix)) != 0)
        return -1; /* host bits set: say 10.0.0.0/8, not 10.1.2.3/8 */
    if (colon) {
        const char *dash = memchr(colon + 1, '-', (size_t)(end - colon - 1));
        if (parse_port(colon + 1, dash ? dash : end, &r->lo) < 0 ||
            (dash ? parse_port(dash + 1, end, &r->hi) : (r->hi = r->lo, 0)) < 0 || r->hi < r->lo)
            return -1;
    }
    for (size_t i = 0; i < sizeof blocked / sizeof *blocked; i++)
        if (r->prefix >= blocked[i].prefix &&
            (r->net & mask_of(blocked[i].prefix)) == blocked[i].net)
            r->inside_blocked = true;
    return 0;
}

/* The next item of a comma-separated list, spaces trimmed: [*s, *e); false
 * at the end.  *rest moves past it. */
bool egress_next_item(const char **rest, const char **s, const char **e)
{
    while (**rest == ',' || **rest == ' ')
        (*rest)++;
    if (**rest == 0)
        return false;
    const char *end = strchr(*rest, ',');
    *s = *rest;
    *e = end ? end : *rest + strlen(*rest);
    *rest = *e;
    while (*e > *s && (*e)[-1] == ' ')
        (*e)--;
    return true;
}

int egress_parse_allow(egress_policy_t *p, const char *list, sg_error_t **err)
{
    p->nallow = 0;
    const char *rest = list ? list : "", *s, *e;
    while (egress_next_item(&rest, &s, &e)) {
        if (p->nallow == EGRESS_MAX_RULES)
            return sg_error_set(err, SG_E_INVALID, "--egress-allow: more than %d entries",
                                EGRESS_MAX_RULES);
        size_t colons = 0;
        for (const char *c = s; c < e; c++)
            colons += *c == ':';
        if (colons > 1 || memchr(s, '[', (size_t)(e - s)))
            return sg_error_set(err, SG_E_INVALID,
                                "--egress-allow: '%.*s': IPv6 is not supported (sandboxes get "
                                "IPv4 only)",
                                (int)(e - s), s);
        if (egress_parse_rule(s, e, &p->allow[p->nallow]) < 0)
            return sg_error_set(err, SG_E_INVALID,
                                "--egress-allow: '%.*s' is not CIDR[:PORT[-PORT]] (e.g. "
                                "0.0.0.0/0, 203.0.113.0/24:443, 10.1.0.0/16:8000-8100)",
                                (int)(e - s), s);
        p->nallow++;
    }
    return 0;
}

int egress_parse_dns(egress_policy_t *p, const char *list, sg_error_t **err)
{
    p->ndns = 0;
    const char *rest = list ? list : "", *s, *e;
    while (egress_next_item(&rest, &s, &e)) {
        if (p->ndns == EGRESS_MAX_DNS)
            return sg_error_set(err, SG_E_INVALID, "--egress-dns: more than %d resolvers",
                                EGRESS_MAX_DNS);
        if (parse_addr(s, (size_t)(e - s), &p->dns[p->ndns]) < 0)
            return sg_error_set(err, SG_E_INVALID, "--egress-dns: '%.*s' is not an IPv4 address",
                                (int)(e - s), s);
        p->ndns++;
    }
    return 0;
}

void egress_put_addr(FILE *f, uint32_t a)
{
    fprintf(f, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

static void put_rule(FILE *f, const egress_rule_t *r, const char *verdict)
{
    fputs("\t\tip daddr ", f);
    egress_put_addr(f, r->net);
    fprintf(f, "/%d", r->prefix);
    if (r->lo && r->lo == r->hi)
        fprintf(f, " meta l4proto { tcp, udp } th dport %u", r->lo);
    else if (r->lo)
        fprintf(f, " meta l4proto { tcp, udp } th dport %u-%u", r->lo, r->hi);
    fprintf(f, " %s\n", verdict);
}

/* The operator's policy, after what comes before it: the always-blocked
 * ranges refused (refuse: a chain) except the allow entries inside them,
 * then the other allow entries (allowed: a verdict), then refuse. */
static void put_policy(FILE *f, const egress_policy_t *p, const char *allowed, const char *refuse)
{
    for (size_t i = 0; i < p->nallow; i++)
        if (p->allow[i].inside_blocked)
            put_rule(f, &p->allow[i], allowed);
    fputs("\t\tip daddr { ", f);
    for (size_t i = 0; i < sizeof blocked / sizeof *blocked; i++)
        fprintf(f, "%s%s", i ? ", " : "", blocked[i].cidr);
    fprintf(f, " } jump %s\n", refuse);
    for (size_t i = 0; i < p->nallow; i++)
        if (!p->allow[i].inside_blocked)
            put_rule(f, &p->allow[i], allowed);
    fprintf(f, "\t\tjump %s\n\t}\n", refuse);
}

static void put_dns(FILE *f, const egress_policy_t *p, const char *verdict)
{
    for (size_t i = 0; i < p->ndns; i++) {
        fputs("\t\tip daddr ", f);
        egress_put_addr(f, p->dns[i]);
        fprintf(f, " meta l4proto { tcp, udp } th dport 53 %s\n", verdict);
    }
}

char *egress_ruleset(const egress_policy_t *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        abort();
    fputs("table inet sandgate\ndelete table inet sandgate\n"
          "table inet sandgate {\n"
          "\tcounter refused {\n\t}\n"
          /* Per sandbox address: the connections it has open. */
          "\tset conns {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic\n\t}\n"
          /* Refusals per host veth (sghN), besides the total above: an
           * element appears with a sandbox's first refusal and goes with
           * its veth (egress_sandbox_down), so a later sandbox on index N
           * starts at 0. */
          "\tset refused_by {\n\t\ttype ifname\n\t\tflags dynamic\n\t\tcounter\n\t}\n"
          /* Sandboxes with rules of their own (egress_sandbox_rules): host
           * veth -> jump to its chain sbN. */
          "\tmap sandboxes {\n\t\ttype ifname : verdict\n\t}\n"
          /* A refusal is quick and plain: a TCP reset, or ICMP "prohibited". */
          "\tchain refuse {\n\t\tcounter name \"refused\"\n"
          "\t\tadd @refused_by { iifname }\n"
          "\t\tmeta l4proto tcp reject with tcp reset\n"
          "\t\treject with icmpx type admin-prohibited\n\t}\n",
          f);
    /* Sandboxes whose rules name hosts or set headers: their TCP to ports
     * 80 and 443 goes to the egress proxy (proxy.c), on the host.  Nothing
     * from a sandbox reaches the host otherwise: none of its addresses,
     * none of its ports (sandgate's API included); and the proxy's ports
     * take redirected connections only. */
    fprintf(f,
            "\tset named {\n\t\ttype ifname\n\t}\n"
            "\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
            "\t\tiifname @named tcp dport 80 redirect to :%d\n"
            "\t\tiifname @named tcp dport 443 redirect to :%d\n\t}\n"
            "\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n"
            "\t\tiifname @named ct status dnat tcp dport { %d, %d } accept\n"
            "\t\tiifname \"sgh*\" jump refuse\n"
            "\t\ttcp dport { %d, %d } drop\n\t}\n",
            PROXY_HTTP_PORT, PROXY_TLS_PORT, PROXY_HTTP_PORT, PROXY_TLS_PORT, PROXY_HTTP_PORT,
            PROXY_TLS_PORT);
    fputs("\tchain forward {\n\t\ttype filter hook forward priority filter - 10; policy accept;\n"
          "\t\tiifname \"sgh*\" jump egress\n"
          "\t\toifname \"sgh*\" ct state established,related accept\n"
          "\t\toifname \"sgh*\" drop\n\t}\n"
          "\tchain egress {\n"
          "\t\tct state established,related accept\n"
          "\t\tmeta nfproto ipv6 drop\n"
          "\t\tip daddr 100.127.0.0/16 jump refuse\n",
          f);
    put_dns(f, p, "goto allowed");
    /* A sandbox's own rules come before the operator's: they may refuse
     * more, never allow more (a sandbox's chain returns here). */
    fputs("\t\tiifname vmap @sandboxes\n", f);
    put_policy(f, p, "goto allowed", "refuse");
    /* The egress proxy's own connections (proxy.c), for the sandboxes it
     * serves: the operator's policy too (its per-sandbox limit is its own). */
    fprintf(f,
            "\tchain output {\n\t\ttype filter hook output priority filter - 10; policy accept;\n"
            "\t\tmeta skuid %d ct state new jump proxied\n\t}\n"
            "\tchain refuse_proxied {\n\t\tcounter name \"refused\"\n"
            "\t\tmeta l4proto tcp reject with tcp reset\n"
            "\t\treject with icmpx type admin-prohibited\n\t}\n"
            "\tchain proxied {\n\t\tip daddr 100.127.0.0/16 jump refuse_proxied\n",
            PROXY_UID);
    put_dns(f, p, "accept");
    put_policy(f, p, "accept", "refuse_proxied");
    /* What the policy lets through, within the connection limit. */
    fputs("\tchain allowed {\n", f);
    if (p->max_conns) /* counted by conntrack: closed connections leave the count */
        fprintf(f, "\t\tct state new add @conns { ip saddr ct count over %u } jump refuse\n",
                p->max_conns);
    fputs("\t\taccept\n\t}\n"
          "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
          "\t\tip saddr 100.127.0.0/16 oifname != \"sgh*\" masquerade\n\t}\n}\n",
          f);
    fclose(f);
    return buf;
}

/* --- the launcher's side ---------------------------------------------------- */

const char *egress_tool(const char *name)
{
    static char path[64];
    const char *dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s/%s", dirs[i], name);
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

int egress_run(sg_error_t **err, const char *a0, const char *const *args)
{
    const char *argv[16];
    size_t n = 0;
    argv[n++] = a0;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    cleanup_free char *out = NULL;
    sg_error_t *e = NULL;
    int st = proc_run_sync(argv, &out, &e);
    if (st == 0)
        return 0;
    const char *msg = e ? e->msg : out ? out : "";
    size_t len = strcspn(msg, "\n");
    sg_error_set(err, SG_E_UNAVAILABLE, "%s %s: %.*s", a0, args[0], (int)len, msg);
    sg_error_free(&e);
    return -1;
}

static int ip(sg_error_t **err, const char *const *args)
{
    const char *p = egress_tool("ip");
    if (!p)
        return sg_error_set(err, SG_E_UNAVAILABLE, "ip not found (apt-get install iproute2)");
    cleanup_free char *path = xstrdup(p);
    return egress_run(err, path, args);
}

/* Runs nft with script (a file: nft -f). */
int egress_nft(const char *script, sg_error_t **err)
{
    const char *nft = egress_tool("nft");
    if (nft == NULL)
        return sg_error_set(err, SG_E_UNAVAILABLE, "nft not found (apt-get install nftables)");
    cleanup_free char *nft_path = xstrdup(nft);
    char path[] = "/tmp/sandgate-nft-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return sg_error_errno(err, errno, "mkstemp");
    ssize_t w = write(fd, script, strlen(script));
    close(fd);
    const char *args[] = {"-f", path, NULL};
    int r = w == (ssize_t)strlen(script) ? egress_run(err, nft_path, args) : -1;
    unlink(path);
    return r;
}

int egress_index_of(const char *dir)
{
    cleanup_free char *path = xasprintf("%s/net", dir);
    FILE *f = fopen(path, "re");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1 || n < 0 || n >= (int)POOL_SIZE)
            n = -1;
        fclose(f);
    }
    return n;
}

bool egress_sandbox_has(const char *dir)
{
    return egress_index_of(dir) >= 0;
}

bool egress_link_exists(int n)
{
    char path[64];
    snprintf(path, sizeof path, "/sys/class/net/sgh%d", n);
    return access(path, F_OK) == 0;
}

void egress_each_index(const char *kernels_dir, index_fn *fn, void *arg)
{
    DIR *d = opendir(kernels_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        cleanup_free char *dir = xasprintf("%s/%s", kernels_dir, e->d_name);
        int n = egress_index_of(dir);
        if (n >= 0)
            fn(e->d_name, n, arg);
    }
    if (d)
        closedir(d);
}

static void mark_used(const char *id, int n, void *arg)
{
    ((bool *)arg)[n] = true;
}

/* The indices the sandbox directories in kernels_dir hold (paused ones
 * have no veth while the machine was rebooted, but keep theirs). */
static void claimed(const char *kernels_dir, bool *used)
{
    egress_each_index(kernels_dir, mark_used, used);
}

#define RULES_FILE "egress-rules"
int egress_apply_rules(const char *dir, int n, sg_error_t **err);
static int own_rules(const char *dir, int n, sg_error_t **err);

/* A re-adopted sandbox's own rules, into a new table. */
static void rules_again(const char *id, int n, void *arg)
{
    cleanup_free char *dir = xasprintf("%s/%s", (const char *)arg, id);
    cleanup_error sg_error_t *err = NULL;
    if (egress_link_exists(n) && own_rules(dir, n, &err) < 0)
        log_warn("egress: the rules of sandbox %s: %s", id, err->msg);
}

int egress_setup(const egress_policy_t *p, const char *kernels_dir, sg_error_t **err)
{
    const char *nft = egress_tool("nft");
    if (nft == NULL)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "--egress-allow needs nft (apt-get install nftables)");
    if (egress_tool("ip") == NULL)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "--egress-allow needs ip (apt-get install iproute2)");
    int fd = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "1", 1) != 1) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sg_error_errno(err, e, "cannot turn on net.ipv4.ip_forward");
    }
    close(fd);
    cleanup_free char *rules = egress_ruleset(p);
    if (egress_nft(rules, err) < 0)
        return sg_error_prefix(err, "installing the egress rules");

    /* A crash's leftovers: namespaces of sandboxes without a directory, and
     * host veths no directory claims. */
    bool used[POOL_SIZE] = {false};
    claimed(kernels_dir, used);
    DIR *d = opendir(NETNS_DIR);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "sandgate-", 9) != 0)
            continue;
        cleanup_free char *dir = xasprintf("%s/%s", kernels_dir, e->d_name + 9);
        if (access(dir, F_OK) == 0)
            continue;
        const char *del[] = {"netns", "delete", e->d_name, NULL};
        if (ip(NULL, del) == 0)
            log_info("egress: removed the leftover namespace %s", e->d_name);
    }
    if (d)
        closedir(d);
    d = opendir("/sys/class/net");
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        long n = strncmp(e->d_name, "sgh", 3) == 0 ? strtol(e->d_name + 3, &end, 10) : -1;
        if (n < 0 || *end || n >= (long)POOL_SIZE || used[n])
            continue;
        const char *del[] = {"link", "delete", e->d_name, NULL};
        if (ip(NULL, del) == 0)
            log_info("egress: removed the leftover veth %s", e->d_name);
    }
    if (d)
        closedir(d);
    cleanup_free char *state_dir = xstrdup(kernels_dir);
    char *slash = strrchr(state_dir, '/');
    if (slash)
        *slash = 0;
    if (egress_proxy_start(p, state_dir, err) < 0)
        return -1;
    egress_each_index(kernels_dir, rules_again, (void *)kernels_dir); /* the table was new */
    return 0;
}

void egress_teardown(void)
{
    /* The table stays: sandboxes outlive sandgate (a stop leaves sessions
     * running, a crash leaves everything), and without it their packets
     * would be forwarded unfiltered — to private ranges, to the metadata
     * address.  The next start replaces it as a whole. */
    egress_proxy_stop();
    DIR *d = opendir(NETNS_DIR);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "sandgate-", 9) != 0)
            continue;
        const char *del[] = {"netns", "delete", e->d_name, NULL};
        ip(NULL, del);
    }
    if (d)
        closedir(d);
}

static void addr_of(int n, int host, char *buf, size_t len)
{
    uint32_t a = POOL_NET + (uint32_t)n * 4 + (host ? 1 : 2);
    snprintf(buf, len, "%u.%u.%u.%u/30", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

/* --egress-rate: a token bucket on each end of the veth, the host's (what
 * the sandbox receives) and the sandbox's (what it sends).  A queue, not a
 * policer: TCP sees a slower link, not losses. */
static int shape(const egress_policy_t *p, const char *ns, const char *host, const char *peer,
                 sg_error_t **err)
{
    const char *tc = egress_tool("tc");
    if (!tc)
        return sg_error_set(err, SG_E_UNAVAILABLE, "tc not found (apt-get install iproute2)");
    cleanup_free char *path = xstrdup(tc);
    char rate[32], burst[32];
    snprintf(rate, sizeof rate, "%llubps", (unsigned long long)p->rate); /* bytes/s */
    snprintf(burst, sizeof burst, "%llu",
             (unsigned long long)(p->rate / 8 > 65536 ? p->rate / 8 : 65536));
    const char *in[] = {"qdisc", "replace", "dev", host,      "root",  "tbf", "rate",
                        rate,    "burst",   burst, "latency", "200ms", NULL};
    const char *out[] = {"-n",   ns,   "qdisc", "replace", "dev",     peer,    "root", "tbf",
                         "rate", rate, "burst", burst,     "latency", "200ms", NULL};
    const char *in_off[] = {"qdisc", "del", "dev", host, "root", NULL};
    if (p->rate == 0) { /* a limit an earlier start set goes */
        egress_run(NULL, path, in_off);
        const char *out_off[] = {"-n", ns, "qdisc", "del", "dev", peer, "root", NULL};
        egress_run(NULL, path, out_off);
        return 0;
    }
    return egress_run(err, path, in) < 0 || egress_run(err, path, out) < 0 ? -1 : 0;
}

/* Its own rules, when it has some (DIR/egress-rules). */
static int own_rules(const char *dir, int n, sg_error_t **err)
{
    cleanup_free char *file = xasprintf("%s/" RULES_FILE, dir);
    return access(file, F_OK) == 0 ? egress_apply_rules(dir, n, err) : 0;
}

char *egress_sandbox_up(const egress_policy_t *p, const char *id, const char *dir, bool restoring,
                        sg_error_t **err)
{
    if (p == NULL) {
        sg_error_set(err, SG_E_INVALID,
                     "this server gives sandboxes no network (start it with --egress-allow)");
        return NULL;
    }
    int n = egress_index_of(dir);
    if (n < 0) {
        static bool used[POOL_SIZE];
        memset(used, 0, sizeof used);
        cleanup_free char *parent = xstrdup(dir);
        char *slash = strrchr(parent, '/');
        if (slash)
            *slash = 0;
        claimed(parent, used);
        uint32_t h = 2166136261u; /* FNV-1a of the id: where to start looking */
        for (const char *c = id; *c; c++)
            h = (h ^ (uint8_t)*c) * 16777619u;
        for (uint32_t i = 0; i < POOL_SIZE && n < 0; i++) {
            int m = (int)((h + i) % POOL_SIZE);
            if (!used[m] && !egress_link_exists(m))
                n = m;
        }
        if (n < 0) {
            sg_error_set(err, SG_E_LIMIT, "no free sandbox network (%u in use)", POOL_SIZE);
            return NULL;
        }
        cleanup_free char *path = xasprintf("%s/net", dir);
        FILE *f = fopen(path, "we");
        if (f == NULL || fprintf(f, "%d\n", n) < 0 || fclose(f) != 0) {
            sg_error_errno(err, errno, "cannot write %s", path);
            return NULL;
        }
    }
    char ns[128], host[32], peer[32], haddr[24], saddr[24], gw[20];
    snprintf(ns, sizeof ns, "sandgate-%s", id);
    snprintf(host, sizeof host, "sgh%d", n);
    snprintf(peer, sizeof peer, "sgs%d", n);
    addr_of(n, 1, haddr, sizeof haddr);
    addr_of(n, 0, saddr, sizeof saddr);
    snprintf(gw, sizeof gw, "%.*s", (int)strcspn(haddr, "/"), haddr);
    char *path = xasprintf("%s/%s", NETNS_DIR, ns);
    if (access(path, F_OK) == 0 &&
        egress_link_exists(n)) { /* a resume, or a restart that re-adopts */
        const char *again[][12] = {
            {"-n", ns, "addr", "replace", saddr, "dev", peer, NULL},
            {"-n", ns, "route", "replace", "default", "via", gw, NULL},
        };
        if ((restoring && (ip(err, again[0]) < 0 || ip(err, again[1]) < 0)) ||
            shape(p, ns, host, peer, err) < 0 || own_rules(dir, n, err) < 0) {
            sg_error_prefix(err, "the network of sandbox %s", id);
            free(path);
            return NULL;
        }
        return path;
    }
    const char *del_ns[] = {"netns", "delete", ns, NULL};
    const char *del_link[] = {"link", "delete", host, NULL};
    ip(NULL, del_ns);
    if (egress_link_exists(n))
        ip(NULL, del_link);
    const char *steps[][12] = {
        {"netns", "add", ns, NULL},
        {"link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns, NULL},
        {"addr", "add", haddr, "dev", host, NULL},
        {"link", "set", host, "up", NULL},
        {"-n", ns, "link", "set", "lo", "up", NULL},
        {"-n", ns, "addr", "add", saddr, "dev", peer, NULL},
        {"-n", ns, "link", "set", peer, "up", NULL},
        {"-n", ns, "route", "add", "default", "via", gw, NULL},
    };
    for (size_t i = 0; i <= sizeof steps / sizeof *steps; i++)
        if (i < sizeof steps / sizeof *steps
                ? ip(err, steps[i]) < 0
                : shape(p, ns, host, peer, err) < 0 || own_rules(dir, n, err) < 0) {
            ip(NULL, del_ns);
            if (egress_link_exists(n))
                ip(NULL, del_link);
            sg_error_prefix(err, "the network of sandbox %s", id);
            free(path);
            return NULL;
        }
    return path;
}

void egress_sandbox_down(const char *id, const char *dir)
{
    int n = egress_index_of(dir);
    if (n < 0)
        return;
    char ns[128], host[32];
    snprintf(ns, sizeof ns, "sandgate-%s", id);
    snprintf(host, sizeof host, "sgh%d", n);
    const char *del_ns[] = {"netns", "delete", ns, NULL};
    const char *del_link[] = {"link", "delete", host, NULL};
    cleanup_free char *path = xasprintf("%s/%s", NETNS_DIR, ns);
    if (access(path, F_OK) == 0)
        ip(NULL, del_ns);
    if (egress_link_exists(n))
        ip(NULL, del_link);
    /* Its refusal count goes too, after the veth (no packet can add it
     * back), so a later sandbox on index N starts at 0.  A sandbox that
     * refused nothing has no element: nft says so, and that is all. */
    const char *nft = egress_tool("nft");
    if (nft) {
        char elem[48];
        snprintf(elem, sizeof elem, "{ %s }", host);
        cleanup_free char *nft_path = xstrdup(nft);
        const char *del_elem[] = {"delete",     "element", "inet", "sandgate",
                                  "refused_by", elem,      NULL};
        egress_run(NULL, nft_path, del_elem);
    }
    cleanup_free char *file = xasprintf("%s/" RULES_FILE, dir);
    if (access(file, F_OK) == 0 && unlink(file) == 0)
        egress_apply_rules(dir, n, NULL); /* without the file: its chain and entry go */
}

/* --- refusals per sandbox ------------------------------------------------------ */

/* The packets of nft's counter object c ({"packets": N, ...}), -1 if none. */
static json_int_t packets_of(const json_t *c)
{
    json_t *p = json_object_get(c, "packets");
    return json_is_integer(p) ? json_integer_value(p) : -1;
}

/* What one document of nft -j says: the counter "refused" into *total, the
 * elements of set refused_by (ifname -> packets) into by_if. */
static void refused_from(const json_t *doc, json_int_t *total, json_t *by_if)
{
    size_t i, j;
    json_t *item, *e;
    json_array_foreach (json_object_get(doc, "nftables"), i, item) {
        json_t *c = json_object_get(item, "counter");
        const char *name = json_string_value(json_object_get(c, "name"));
        if (name && strcmp(name, "refused") == 0 && packets_of(c) >= 0)
            *total = packets_of(c);
        json_t *set = json_object_get(item, "set");
        name = json_string_value(json_object_get(set, "name"));
        if (!name || strcmp(name, "refused_by") != 0)
            continue;
        json_array_foreach (json_object_get(set, "elem"), j, e) {
            json_t *elem = json_object_get(e, "elem");
            const char *ifname = json_string_value(json_object_get(elem, "val"));
            json_int_t n = packets_of(json_object_get(elem, "counter"));
            if (ifname && n >= 0)
                json_object_set_new(by_if, ifname, json_integer(n));
        }
    }
}

/* both: {ifname -> packets, sandbox id -> packets (what this adds)}. */
static void name_sandbox(const char *id, int n, void *arg)
{
    json_t **both = arg;
    char ifname[32];
    snprintf(ifname, sizeof ifname, "sgh%d", n);
    json_t *count = json_object_get(both[0], ifname);
    if (count)
        json_object_set(both[1], id, count);
}

json_t *egress_refused_parse(const char *out, const char *kernels_dir, sg_error_t **err)
{
    json_int_t total = -1;
    json_t *by_if = json_object();
    size_t len = strlen(out), off = 0;
    /* One JSON document per command: the set's, then the counter's. */
    while (off < len) {
        if (strchr(" \t\r\n", out[off])) {
            off++;
            continue;
        }
        json_error_t je;
        json_t *doc = json_loadb(out + off, len - off, JSON_DISABLE_EOF_CHECK, &je);
        if (doc == NULL) {
            sg_error_set(err, SG_E_UNAVAILABLE, "nft -j: not JSON%s: %s: %.*s",
                         len >= 65536 ? " (cut at 64 KiB)" : "", je.text,
                         (int)strcspn(out + off, "\n"), out + off);
            json_decref(by_if);
            return NULL;
        }
        off += je.position;
        refused_from(doc, &total, by_if);
        json_decref(doc);
    }
    if (total < 0) {
        sg_error_set(err, SG_E_UNAVAILABLE, "nft -j: no counter 'refused'");
        json_decref(by_if);
        return NULL;
    }
    /* Interface sghN is the sandbox whose directory's net file holds N. */
    json_t *both[2] = {by_if, json_object()};
    if (json_object_size(by_if) > 0)
        egress_each_index(kernels_dir, name_sandbox, both);
    json_decref(by_if);
    /* The proxy's refusals (host names' sandboxes), per rule. */
    json_t *rules[2] = {egress_proxy_refused(), json_object()};
    if (json_object_size(rules[0]) > 0)
        egress_each_index(kernels_dir, name_sandbox, rules);
    json_decref(rules[0]);
    return json_pack("{s:I, s:o, s:o}", "total", total, "sandboxes", both[1], "rules", rules[1]);
}

/* Two commands, not one with two lists: nft 1.0.6 then loads only part of
 * its cache and complains on stderr (which proc.c merges into the output)
 * about the rules' anonymous sets. */
typedef struct {
    char *kernels_dir;
    char *nft;
    char *set; /* the first command's output */
    egress_refused_fn *cb;
    void *arg;
} refusing_t;

static int list(refusing_t *r, const char *what, const char *name, proc_done_fn *done,
                sg_error_t **err)
{
    const char *argv[] = {r->nft, "-j", "list", what, "inet", "sandgate", name, NULL};
    return proc_exec_async(argv, done, r, err) < 0 ? -1 : 0;
}

static void refusing_free(refusing_t *r)
{
    free(r->kernels_dir);
    free(r->nft);
    free(r->set);
    free(r);
}

static void counter_listed(int status, const char *output, void *arg)
{
    refusing_t *r = arg;
    sg_error_t *err = NULL;
    json_t *counts = NULL;
    if (status != 0) {
        sg_error_set(&err, SG_E_UNAVAILABLE, "nft list counter inet sandgate refused: %.*s",
                     (int)strcspn(output, "\n"), output);
    } else {
        cleanup_free char *both = xasprintf("%s\n%s", r->set, output);
        counts = egress_refused_parse(both, r->kernels_dir, &err);
    }
    r->cb(counts, err, r->arg);
    json_decref(counts);
    sg_error_free(&err);
    refusing_free(r);
}

static void set_listed(int status, const char *output, void *arg)
{
    refusing_t *r = arg;
    sg_error_t *err = NULL;
    if (status != 0)
        sg_error_set(&err, SG_E_UNAVAILABLE, "nft list set inet sandgate refused_by: %.*s",
                     (int)strcspn(output, "\n"), output);
    else
        r->set = xstrdup(output);
    if (err || list(r, "counter", "refused", counter_listed, &err) < 0) {
        r->cb(NULL, err, r->arg);
        sg_error_free(&err);
        refusing_free(r);
    }
}

int egress_refused(const char *kernels_dir, egress_refused_fn *cb, void *arg, sg_error_t **err)
{
    const char *nft = egress_tool("nft");
    if (nft == NULL)
        return sg_error_set(err, SG_E_UNAVAILABLE, "nft not found (apt-get install nftables)");
    refusing_t *r = xzalloc(sizeof *r);
    *r = (refusing_t){
        .kernels_dir = xstrdup(kernels_dir), .nft = xstrdup(nft), .cb = cb, .arg = arg};
    if (list(r, "set", "refused_by", set_listed, err) < 0) {
        refusing_free(r);
        return -1;
    }
    return 0;
}
