#include "gateway/options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/cluster/cluster.h"
#include "gateway/session/session.h"
#include "kernelmgr/egress/egress.h"
#include "kernelmgr/launcher/launcher.h"

typedef struct opt opt_t;

/* Stores one option's value in s; -1 (after saying why, through bad())
 * when the value is not acceptable. */
typedef int(opt_set_fn)(settings_t *s, const opt_t *o, const char *v);

enum {
    OPT_CLI = 1,    /* the command line only: not in the environment or a config file */
    OPT_NO_ENV = 2, /* not from the environment (--config has its own variable) */
    OPT_VALUED = 4, /* a flag on the command line, a value elsewhere (no-auth = true) */
    OPT_SECRET = 8, /* never echoed in an error (--token) */
    OPT_SIZE = 16,  /* set_uint: a size, with a K, M, G or T suffix if wanted */
};

struct opt {
    const char *name;
    int key;         /* a short option's letter, or 0 */
    const char *arg; /* the argument's name in --help; NULL: a flag */
    opt_set_fn *set;
    size_t off;                         /* where in settings_t the value goes (set_uint, set_str) */
    size_t width;                       /* that field's size */
    unsigned long long min, max, scale; /* set_uint: accepted range, then value * scale */
    const char *want;                   /* set_uint: what a value below min should be */
    unsigned flags;                     /* OPT_* */
    const char *help;                   /* one paragraph; --help wraps it */
};

/* Where the value being applied came from (SANDGATE_X, FILE:LINE), for bad();
 * "" for the command line. */
static const char *origin = "";

static int bad(const opt_t *o, const char *value, const char *want)
{
    fprintf(stderr, "sandgate: %s%s--%s wants %s, got '%s'\nTry 'sandgate --help'.\n", origin,
            *origin ? ": " : "", o->name, want, o->flags & OPT_SECRET ? "(hidden)" : value);
    return -1;
}

static void *field(settings_t *s, const opt_t *o)
{
    return (char *)s + o->off;
}

static int set_str(settings_t *s, const opt_t *o, const char *v)
{
    *(const char **)field(s, o) = v;
    return 0;
}

/* An integer in [min, max], stored times scale in a field of o->width bytes
 * (int, unsigned, size_t, uint64_t: the range is chosen so it fits). */
static int set_uint(settings_t *s, const opt_t *o, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    /* OPT_SIZE: K, M, G or T after the number (KiB, MiB...: "100M", "1GiB") */
    static const char units[] = "KMGT";
    const char *u =
        o->flags & OPT_SIZE && *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u && (strcmp(end + 1, "") == 0 || strcasecmp(end + 1, "iB") == 0 ||
              strcasecmp(end + 1, "B") == 0)) {
        unsigned shift = 10 * (unsigned)(u - units + 1);
        if (n > (o->max >> shift))
            return bad(o, v, "a smaller size");
        n <<= shift;
        end += strlen(end);
    }
    if (*v == 0 || *end != 0 || *v == '-' || errno || n > o->max)
        return bad(o, v,
                   o->flags & OPT_SIZE ? "a size in bytes, K, M or G (such as 100M)"
                                       : "a non-negative integer");
    if (n < o->min)
        return bad(o, v, o->want ? o->want : "a positive integer");
    n *= o->scale ? o->scale : 1;
    if (o->width == sizeof(uint32_t))
        *(uint32_t *)field(s, o) = (uint32_t)n;
    else
        *(uint64_t *)field(s, o) = (uint64_t)n;
    return 0;
}

static int set_bool(settings_t *s, const opt_t *o, const char *v)
{
    static const char *const yes[] = {"1", "true", "yes"}, *const no[] = {"0", "false", "no"};
    for (int i = 0; i < 3; i++)
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *(bool *)field(s, o) = strcasecmp(v, yes[i]) == 0;
            return 0;
        }
    return bad(o, v, "true, false, yes, no, 1 or 0");
}

static int set_listen(settings_t *s, const opt_t *o, const char *v)
{
    const char *colon = strrchr(v, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof s->host || colon[1] == 0 ||
        *end != 0 || p < 0 || p > 65535)
        return bad(o, v, "HOST:PORT");
    memcpy(s->host, v, colon - v);
    s->host[colon - v] = 0;
    s->http.port = (int)p;
    return 0;
}

static int set_replica(settings_t *s, const opt_t *o, const char *v)
{
    if (!replica_valid_id(v))
        return bad(o, v, "1-63 characters of A-Z, a-z, 0-9, '.', '_', '-'");
    s->replica = v;
    return 0;
}

static int set_token(settings_t *s, const opt_t *o, const char *v)
{
    if (strlen(v) < 16)
        return bad(o, v, "at least 16 characters");
    s->http.token = v;
    return 0;
}

static int set_sandbox(settings_t *s, const opt_t *o, const char *v)
{
    if (strcmp(v, "runsc") == 0)
        s->k.sandbox.mode = SANDBOX_RUNSC;
    else if (strcmp(v, "none") == 0)
        s->k.sandbox.mode = SANDBOX_NONE;
    else
        return bad(o, v, "runsc or none");
    return 0;
}

/* --egress-allow, --egress-dns, --egress-ca-file: checked now, parsed again
 * where used. */
static int set_egress(settings_t *s, const opt_t *o, const char *v)
{
    egress_policy_t p;
    sg_error_t *err = NULL;
    bool allow = o->off == offsetof(settings_t, k.sandbox.egress_allow);
    if (o->off == offsetof(settings_t, k.sandbox.egress_ca_file))
        return access(v, R_OK) == 0 ? set_str(s, o, v) : bad(o, v, "a readable file");
    if ((allow ? egress_parse_allow(&p, v, &err) : egress_parse_dns(&p, v, &err)) < 0) {
        fprintf(stderr, "sandgate: %s%s%s\nTry 'sandgate --help'.\n", origin, *origin ? ": " : "",
                err->msg);
        sg_error_free(&err);
        return -1;
    }
    return set_str(s, o, v);
}

static int set_notebook_url(settings_t *s, const opt_t *o, const char *v)
{
    if (!handover_valid(v))
        return bad(o, v, "an http:// or https:// URL holding {kernel_id}");
    s->api.notebook_url = v;
    return 0;
}

static int set_cpus(settings_t *s, const opt_t *o, const char *v)
{
    char *end;
    double c = strtod(v, &end);
    if (*v == 0 || *end != 0 || !(c >= 0.01 && c <= 1024))
        return bad(o, v, "a number of CPUs such as 0.5 or 2");
    s->k.sandbox.cpu_quota_us = (uint64_t)(c * 100000);
    return 0;
}

static int set_nonempty(settings_t *s, const opt_t *o, const char *v)
{
    if (*v == 0)
        return bad(o, v, "a file name, or '-' for stderr");
    return set_str(s, o, v);
}

/* --peers: ID=HOST:PORT, space- or comma-separated, or @FILE. */
static int set_peers(settings_t *s, const opt_t *o, const char *v)
{
    json_t *peers = json_object();
    bool good = v[0] == '@' ? v[1] != 0
                            : cluster_parse_peers(v, peers, NULL) == 0 && json_object_size(peers);
    json_decref(peers);
    return good ? set_str(s, o, v)
                : bad(o, v, "ID=HOST:PORT entries (space- or comma-separated), or @FILE");
}

static int set_audit_code(settings_t *s, const opt_t *o, const char *v)
{
    if (strcmp(v, "full") == 0)
        s->audit_code = AUDIT_CODE_FULL;
    else if (strcmp(v, "hash") == 0)
        s->audit_code = AUDIT_CODE_HASH;
    else
        return bad(o, v, "full or hash");
    return 0;
}

static int set_log_level(settings_t *s, const opt_t *o, const char *v)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            s->level = (sg_loglevel_t)i;
            return 0;
        }
    return bad(o, v, "debug, info, warn or error");
}

/* --template NAME=SPEC, SPEC being KEY=VALUE pairs split at commas:
 * root=DIR, image=PATH[:TAG], kernelspec=NAME, preload-file=FILE, and
 * preload=CODE, which takes the rest of SPEC, commas and all (so it comes
 * last).  A name given again replaces what it said before (the command
 * line overrides the config file). */
static bool valid_name(const char *v, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr("._-", v[i]))
            return false;
    return true;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, 0, f);
    fclose(f);
    if (n < 0) {
        free(text);
        return NULL;
    }
    return text;
}

static int template_key(settings_t *s, const opt_t *o, const char *v, sandbox_template_t *t,
                        const char *key, size_t klen, const char *val)
{
    char **own = &s->template_text[s->ntemplate_text++];
    *own = xstrdup(val);
    if (klen == 4 && strncmp(key, "root", 4) == 0 && **own == '/')
        t->root = *own;
    else if (klen == 5 && strncmp(key, "image", 5) == 0 && **own == '/')
        t->image = *own;
    else if (klen == 10 && strncmp(key, "kernelspec", 10) == 0 && **own)
        t->kernelspec = *own;
    else if (klen == 7 && strncmp(key, "preload", 7) == 0)
        t->preload = *own;
    else if (klen == 12 && strncmp(key, "preload-file", 12) == 0) {
        char *text = read_text(*own);
        if (!text) {
            fprintf(stderr, "sandgate: %s%s--template: cannot read preload-file %s: %s\n", origin,
                    *origin ? ": " : "", *own, strerror(errno));
            return -1;
        }
        free(*own);
        t->preload = *own = text;
    } else
        return bad(o, v,
                   "NAME=KEY=VALUE,...: root=/DIR, image=/PATH[:TAG], kernelspec=NAME, "
                   "preload-file=/FILE, preload=CODE (last)");
    return 0;
}

static int set_template(settings_t *s, const opt_t *o, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || !valid_name(v, (size_t)(eq - v)))
        return bad(o, v, "NAME=SPEC, NAME 1-63 of A-Z, a-z, 0-9, '.', '_', '-'");
    if (s->ntemplates == SETTINGS_MAX_TEMPLATES ||
        s->ntemplate_text + 6 > sizeof s->template_text / sizeof *s->template_text)
        return bad(o, v, "at most 32 templates of 5 keys each");
    sandbox_template_t t = {.name = xstrndup(v, (size_t)(eq - v))};
    s->template_text[s->ntemplate_text++] = (char *)t.name;
    int keys = 0;
    for (const char *p = eq + 1; *p;) {
        size_t n = strcspn(p, ",");
        if (++keys > 5)
            return bad(o, v, "at most 5 keys");
        const char *keq = memchr(p, '=', n);
        if (!keq)
            return bad(o, v, "KEY=VALUE pairs after NAME=");
        size_t klen = (size_t)(keq - p);
        bool rest = klen == 7 && strncmp(p, "preload", 7) == 0;
        cleanup_free char *val = rest ? xstrdup(keq + 1) : xstrndup(keq + 1, n - klen - 1);
        if (template_key(s, o, v, &t, p, klen, val) < 0)
            return -1;
        p = rest ? p + strlen(p) : p + n + (p[n] == ',');
    }
    if (t.root && t.image)
        return bad(o, v, "root= or image=, not both");
    size_t i = 0;
    while (i < s->ntemplates && strcmp(s->templates[i].name, t.name) != 0)
        i++;
    t.pool_size = i < s->ntemplates ? s->templates[i].pool_size : 0;
    s->templates[i] = t;
    s->ntemplates += i == s->ntemplates;
    return 0;
}

/* --pool-size N (the server's python3 pool) or NAME=N (a template's, else a
 * language's or kernelspec's). */
static int set_pool_size(settings_t *s, const opt_t *o, const char *v)
{
    const char *eq = strchr(v, '=');
    const char *num = eq ? eq + 1 : v;
    char *end;
    errno = 0;
    unsigned long n = strtoul(num, &end, 10);
    if (*num == 0 || *end || *num == '-' || errno || n > 1000 ||
        (eq && !valid_name(v, (size_t)(eq - v))))
        return bad(o, v, "N or NAME=N, N from 0 to 1000");
    if (!eq) {
        s->k.pool_size = (int)n;
        return 0;
    }
    if (s->npools == SETTINGS_MAX_TEMPLATES)
        return bad(o, v, "at most 32 templates");
    s->pools[s->npools].name = xstrndup(v, (size_t)(eq - v));
    s->pools[s->npools++].size = (int)n;
    return 0;
}

/* The field a row sets, for set_str, set_uint and set_bool. */
#define AT(f) .off = offsetof(settings_t, f), .width = sizeof(((settings_t *)0)->f)
#define UINT(f, lo, hi, mul) .set = set_uint, AT(f), .min = (lo), .max = (hi), .scale = (mul)
#define SECONDS_MS(f, lo, hi) UINT(f, lo, hi, 1000)
#define BYTES(f, lo, hi) UINT(f, lo, hi, 1), .flags = OPT_SIZE
#define DAY 86400ull

/* In --help's order.  help, version and config are handled before the rest. */
static const opt_t table[] = {
    {"config", 'c', "FILE", NULL, .flags = OPT_CLI,
     .help = "read options from FILE (default /etc/sandgate/sandgate.conf, if it exists) "
             "[SANDGATE_CONFIG]"},
    {"listen", 'l', "HOST:PORT", set_listen,
     .help = "address to serve HTTP on "
             "(default 127.0.0.1:49999)"},
    {"token", 't', "TOKEN", set_token, .flags = OPT_SECRET,
     .help = "API token (default: generated and printed at start); prefer the environment or a "
             "mode 0600 config file: other users see a command line until sandgate blanks it"},
    {"keys-file", 0, "FILE", set_str, AT(keys_file),
     .help = "tenants and the hashes of their keys (`sandgate keys add NAME --keys-file FILE`); "
             "each key sees only its tenant's sessions, within its quotas (docs/security.md). "
             "SIGHUP reads it again. With --token too, the token is an admin key"},
    {"auth-fail-limit", 0, "N", UINT(auth_fail_limit, 0, 1000000, 1),
     .help = "failed authentications a minute from one client address before it is refused "
             "with 429 for --auth-block (20; 0: no limit)"},
    {"auth-block", 0, "SEC", SECONDS_MS(auth_block_ms, 1, DAY),
     .want = "a positive number of seconds",
     .help = "how long an address past --auth-fail-limit is refused (300)"},
    {"tenant-max-contexts", 0, "N", UINT(tenants.max_contexts, 0, 1000000, 1),
     .help = "contexts (live and paused) a tenant of --keys-file may have when its line names "
             "no max-contexts (0, the default: no limit); past it, 429 naming the quota"},
    {"tenant-max-live", 0, "N", UINT(tenants.max_live, 0, 1000000, 1),
     .help = "live kernels a tenant may have at once when its line names no max-live (0, the "
             "default: no limit); past it, its least recently used idle session is paused, or "
             "429 when none can be (so too when one is resumed or restarted)"},
    {"tenant-max-queued", 0, "N", UINT(tenants.max_queued, 0, 1000000, 1),
     .help = "executions, commands, envd processes and MCP calls a tenant may have waiting or "
             "running at once, all its sessions together, when its line names no max-queued (0, "
             "the default: no limit); past it, 429 naming the quota"},
    {"tenant-max-jupyter-sessions", 0, "N", UINT(tenants.max_jupyter_sessions, 0, 1000000, 1),
     .help = "Jupyter sessions (/api/sessions) a tenant may have when its line names no "
             "max-jupyter-sessions (100; 0: no limit)"},
    {"tenant-max-mcp-sessions", 0, "N", UINT(tenants.max_mcp_sessions, 0, 1000000, 1),
     .help = "MCP sessions a tenant may have open when its line names no max-mcp-sessions (64; "
             "0: no limit; 1,024 are open at most in all)"},
    {"tenant-max-snapshots", 0, "N", UINT(tenants.max_snapshots, 0, 1000000, 1),
     .help = "snapshots a tenant may keep, whether their context lives or not, when its line "
             "names no max-snapshots (64; 0: no limit)"},
    {"tenant-max-snapshot-mib", 0, "MIB", UINT(tenants.max_snapshot_mib, 0, 1000000000, 1),
     .help = "MiB those snapshots may take when its line names no max-snapshot-mib (0, the "
             "default: no limit)"},
    {"tenant-max-rps", 0, "N", UINT(tenants.max_rps, 0, 1000000, 1),
     .help = "requests a second a tenant may send when its line names no max-rps: a second's "
             "worth at once, then each waits its turn (suspended, costing the loop nothing), "
             "and past another second's worth, 429 (200; 0: no limit; admins have none)"},
    {"tenant-max-volume-mib", 0, "MIB", UINT(tenants.max_volume_mib, 0, 1000000000, 1),
     .help = "MiB a tenant's volumes may take together (the sizes they were made with) when "
             "its line names no max-volume-mib (10240; 0: no limit)"},
    {"tenant-max-disk-mib", 0, "MIB", UINT(tenants.max_disk_mib, 0, 1000000000, 1),
     .help = "MiB of disk a tenant's workspaces (with --workspace-size), checkpoints and "
             "snapshots may take before its new contexts and snapshots are refused, when its "
             "line names no max-disk-mib (0, the default: no limit)"},
    {"no-auth", 0, NULL, set_bool, AT(no_auth), .flags = OPT_VALUED,
     .help = "no token (only with a loopback --listen address)"},
    {"replica-id", 0, "ID", set_replica,
     .help = "this sandgate's name among replicas behind one proxy (default: the host name); the "
             "ids it hands out carry it (docs/deploy-cluster.md)"},
    {"notebook-url", 0, "TEMPLATE", set_notebook_url,
     .help = "a JupyterLab that opens a session's kernel, {kernel_id} its id (e.g. https://hub"
             ".example.org/user/alice/lab?kernel={kernel_id}): contexts and MCP's executions "
             "carry it as notebook_url, for an agent to hand its session to a person (api.md)"},
    {"rich-formats", 0, "yes|no", set_bool, AT(exec.rich_formats),
     .help = "Python results of the REST API, E2B's /execute and MCP carry E2B's chart and "
             "DataFrame data (chart, data) when the request does not say (\"rich_formats\"; "
             "yes, the default); no saves their cost (a plot ~60 ms). Jupyter frontends get "
             "them only when an execute_request's metadata asks (docs/api.md)"},
    {"max-body", 0, "BYTES", BYTES(http.max_body, 0, 1ull << 32),
     .help = "request body limit (1048576)"},
    {"max-output", 0, "BYTES", BYTES(exec.max_output, 0, 1ull << 34),
     .help = "output kept per execution (16777216; the rest is dropped with a marker)"},
    {"max-upload", 0, "BYTES", BYTES(api.max_upload, 0, 1ull << 40),
     .help = "size of one uploaded file (268435456)"},
    {"max-ws-message", 0, "BYTES", BYTES(channels.max_message, 1024, 1ull << 32),
     .want = "at least 1024 bytes", .help = "one WebSocket message from a frontend (16777216)"},
    {"max-timeout", 0, "SEC", SECONDS_MS(exec.max_timeout_ms, 1, 7 * DAY),
     .want = "a positive number of seconds",
     .help = "the longest timeout a request may ask for (3600)"},
    {"max-connections", 0, "N", UINT(http.max_conns, 1, 1 << 20, 1),
     .help = "HTTP connections (1024)"},
    {"max-connections-per-ip", 0, "N", UINT(http.max_conns_ip, 1, 1 << 20, 1),
     .help = "from one client address (--max-connections / 4)"},
    {"connection-timeout", 0, "SEC", UINT(http.conn_timeout_s, 1, DAY, 1),
     .want = "a positive number of seconds", .help = "close connections idle this long (300)"},
    {"state-dir", 's', "DIR", set_str, AT(k.state_dir),
     .help = "sessions, workspaces, sandboxes (default /var/lib/sandgate)"},
    {"sandbox", 0, "MODE", set_sandbox,
     .help = "runsc (default) or none: plain processes, NO isolation, for development"},
    {"runsc", 0, "PATH", set_str, AT(k.sandbox.runsc),
     .help = "the runsc binary (/usr/local/bin/runsc: scripts/runsc.sh)"},
    {"platform", 0, "NAME", set_str, AT(k.sandbox.platform),
     .help = "runsc platform: systrap (default), ptrace or kvm"},
    {"rootfs", 0, "DIR", set_str, AT(k.sandbox.rootfs),
     .help = "image directory to use as the sandbox's / (default: host /usr, generated /etc)"},
    {"egress-allow", 0, "LIST", set_egress, AT(k.sandbox.egress_allow),
     .help = "what sandboxes that ask for the network ({\"internet\": true}) may reach: "
             "CIDR[:PORT[-PORT]],... (default empty: none); private, loopback, link-local, "
             "multicast ranges, the host, other sandboxes stay blocked unless named (security.md)"},
    {"egress-dns", 0, "IP[,IP]", set_egress, AT(k.sandbox.egress_dns),
     .help = "resolvers those sandboxes use (port 53; their /etc/resolv.conf)"},
    {"egress-ca-file", 0, "FILE", set_egress, AT(k.sandbox.egress_ca_file),
     .help = "the CA certificates the egress proxy trusts when it opens a sandbox's TLS to set "
             "a rule's headers (default: the system's, /etc/ssl/certs/ca-certificates.crt)"},
    {"egress-max-conns", 0, "N", UINT(k.sandbox.egress_max_conns, 0, 1 << 20, 1),
     .help = "open connections per sandbox with a network (256; 0: no limit)"},
    {"egress-rate", 0, "KIB", UINT(k.sandbox.egress_rate, 0, 1ull << 30, 1024),
     .help = "bandwidth per sandbox with a network, KiB/s each way (0: no limit, the default)"},
    {"memory", 0, "MIB", UINT(k.sandbox.memory_bytes, 64, 1 << 24, 1 << 20),
     .want = "at least 64 (MiB)", .help = "memory per sandbox (1024)"},
    {"cpus", 0, "N", set_cpus, .help = "CPUs per sandbox (1.0)"},
    {"tenant-cgroups", 0, "yes|no", set_bool, AT(k.sandbox.tenant_cgroups),
     .help = "each tenant's sandboxes in a cgroup of its own, all with the same CPU weight, "
             "so the CPU is shared between tenants first (yes, the default); no: a cgroup per "
             "sandbox, more busy sandboxes get more CPU (docs/operations.md)"},
    {"processes", 0, "N", UINT(k.sandbox.nproc, 0, 1 << 20, 1),
     .help = "processes per sandbox (64)"},
    {"open-files", 0, "N", UINT(k.sandbox.nofile, 0, 1 << 20, 1),
     .help = "open files per process (1024)"},
    {"workspace-size", 0, "MIB", UINT(k.sandbox.workspace_bytes, 0, 1 << 24, 1 << 20),
     .help = "workspace filesystem size (1024; 0: a plain directory, no limit)"},
    {"tmp-size", 0, "MIB", UINT(k.sandbox.tmp_bytes, 0, 1 << 24, 1 << 20),
     .help = "/tmp size (256)"},
    {"exec-timeout", 0, "SEC", SECONDS_MS(exec.timeout_ms, 0, 7 * DAY),
     .help = "default execution timeout (300; 0: --max-timeout)"},
    {"start-timeout", 0, "SEC", SECONDS_MS(k.kernel.start_timeout_ms, 1, 3600),
     .want = "a positive number of seconds",
     .help = "how long a new kernel may take to answer (120); past it the session is dead with "
             "a timeout error"},
    {"idle-timeout", 0, "SEC", SECONDS_MS(k.cull_idle_ms, 0, 7 * DAY),
     .help = "shut down sessions idle this long (3600; 0: never), paused or not"},
    {"pause-after", 0, "SEC", SECONDS_MS(k.pause_after_ms, 0, 7 * DAY),
     .help = "pause sessions idle this long to disk (600; 0: never); using one resumes it"},
    {"pause-on-stop", 0, "SEC", SECONDS_MS(pause_on_stop_ms, 0, 3600),
     .help = "at SIGTERM, pause every session first (a busy one once its executions end; new "
             "ones get 503), waiting up to SEC (0, the default: sessions keep running for the "
             "next start); for containers, whose processes end with them"},
    {"snapshot-ttl", 0, "SEC", SECONDS_MS(k.snapshot_ttl_ms, 0, 3650 * DAY),
     .help = "delete snapshots this old (0, the default: kept until deleted)"},
    {"max-snapshots", 0, "N", UINT(k.max_snapshots, 0, 100000, 1),
     .help = "snapshots one context may keep at once (32; 0: no limit); past it 429"},
    {"max-kernels", 0, "N", UINT(k.max_kernels, 0, 100000, 1),
     .help = "running session kernels at once (64; paused ones not counted)"},
    {"pool-size", 0, "N|NAME=N", set_pool_size,
     .help = "warm python3 kernels kept ready (1); NAME=N: warm kernels of template NAME, "
             "else of language or kernelspec NAME (javascript, bash, ir...) (0), repeatable"},
    {"template", 0, "NAME=SPEC", set_template,
     .help = "a template for new sessions (POST /contexts {\"template\": NAME}; a kernelspec "
             "NAME in the Jupyter API), repeatable; SPEC is KEY=VALUE pairs split at commas: "
             "root=/DIR (a root file system), image=/PATH[:TAG] (an OCI image layout, unpacked "
             "once with umoci), kernelspec=NAME (python3), preload-file=/FILE, preload=CODE "
             "(run by each new kernel before use; the rest of SPEC, so last). operations.md"},
    {"preload", 0, "CODE", set_str, AT(k.pool_preload),
     .help = "code pool kernels run before use (e.g. 'import pandas, matplotlib')"},
    {"user", 0, "UID", UINT(uid, 1, 0xfffffffe, 1), .want = "a uid other than 0",
     .help = "the unprivileged uid HTTP is served as when started as root (64122); a small "
             "launcher keeps root for runsc and workspaces only"},
    {"launcher-timeout", 0, "SEC", SECONDS_MS(launcher_timeout_ms, 1, 3600),
     .want = "a positive number of seconds",
     .help = "how long a request to the launcher may wait for its answer (10), then 504"},
    {"log-level", 0, "LEVEL", set_log_level, .help = "debug, info, warn or error (info)"},
    {"audit-log", 0, "PATH", set_nonempty, AT(audit_log),
     .help = "append one JSON line per event (executions and outcomes, commands, file writes "
             "and deletes, context, kernel, session changes, refused requests) to PATH, or '-': "
             "stderr; never the token, contents or output; SIGHUP reopens it (operations.md)"},
    {"audit-code", 0, "MODE", set_audit_code,
     .help = "full: code and commands as sent, the first 64 KiB of each (the default); hash: "
             "their SHA-256 only"},
    {"audit-max-size", 0, "BYTES", BYTES(audit_max_size, 0, 1ull << 50),
     .help = "rotate the audit log when it would grow past BYTES (K, M, G: 100M): PATH becomes "
             "PATH.1 and a new PATH is started, beside SIGHUP's reopen; the serving uid needs "
             "to be able to write the directory (0, the default: no rotation)"},
    {"audit-keep", 0, "N", UINT(audit_keep, 1, 1000, 1),
     .help = "rotated audit logs kept, PATH.1 to PATH.N, the oldest removed (1)"},
    {"events-keep", 0, "SEC", SECONDS_MS(events_keep_ms, 1, 30 * DAY),
     .want = "a positive number of seconds, 30 days at most",
     .help = "how long sandboxes' lifecycle events are kept for GET /events and E2B's "
             "/events/sandboxes, in memory (604800: 7 days)"},
    {"webhook", 0, "URL", set_nonempty, AT(webhook),
     .help = "POST every tenant's sandbox lifecycle events to URL (http://), one at a time, "
             "retried with backoff until it answers 2xx (docs/api.md); tenants add their own "
             "with E2B's /events/webhooks"},
    {"webhook-secret", 0, "SECRET", set_nonempty, AT(webhook_secret),
     .help = "what --webhook's deliveries are signed with (e2b-signature, X-Sandgate-Signature)"},
    {"peers", 0, "ID=HOST:PORT...", set_peers, AT(peers),
     .help = "the other replicas (ID=HOST:PORT, spaces or commas between; @FILE: read at "
             "each move), where contexts move (docs/deploy-cluster.md)"},
    {"drain-on-stop", 0, "yes|no", set_bool, AT(drain_on_stop),
     .help = "at SIGTERM, move every context to --peers first (then --pause-on-stop; no)"},
    {"volume-size", 0, "MIB", UINT(volume_mib, 16, 1048576, 1), .want = "16 to 1048576 (MiB)",
     .help = "the size of a new volume that names none, its file system's limit (1024); "
             "docs/api.md#volumes-volumes"},
    {"help", 'h', NULL, NULL, .flags = OPT_CLI, .help = "show this help and exit"},
    {"version", 'V', NULL, NULL, .flags = OPT_CLI, .help = "show the version and exit"},
};
#define NOPTS (sizeof table / sizeof table[0])

/* getopt_long's value for row i: its letter, or 256 + i. */
static int opt_key(size_t i)
{
    return table[i].key ? table[i].key : 256 + (int)i;
}

static const opt_t *opt_by_key(int key)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opt_key(i) == key)
            return &table[i];
    return NULL;
}

static const opt_t *opt_by_name(const char *name)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

/* SANDGATE_ and the name upper-cased, '-' as '_'. */
static void env_name(const opt_t *o, char *out, size_t size)
{
    int n = snprintf(out, size, "SANDGATE_%s", o->name);
    for (int i = 9; i < n && (size_t)i < size; i++)
        out[i] = out[i] == '-' ? '_' : (char)toupper((unsigned char)out[i]);
}

static const char help_tail[] =
    "\n"
    "The config file has one 'name = value' a line, name being a long option\n"
    "without its dashes ('listen = 127.0.0.1:8080', 'no-auth = true'); lines that\n"
    "start with '#' are comments. The command line wins over the environment, and\n"
    "the environment over the config file.\n"
    "\n"
    "Endpoints (docs/api.md): POST /execute; POST, GET /contexts;\n"
    "  GET, DELETE /contexts/ID; POST /contexts/ID/restart;\n"
    "  GET, PUT, DELETE /contexts/ID/files/PATH; GET /health; GET /metrics\n"
    "Jupyter Server API (docs/jupyter.md): /api/kernelspecs, /api/kernels,\n"
    "  /api/sessions, WebSocket /api/kernels/ID/channels\n"
    "MCP (docs/mcp.md): POST, DELETE /mcp (Streamable HTTP; tools execute_python,\n"
    "  list_files, read_file, write_file, restart_kernel)\n";

/* --help, from the table: each option's spelling and variable on one line,
 * its help below, wrapped at 78 columns. */
static void print_help(FILE *f)
{
    fputs("usage: sandgate [OPTIONS]\n\n"
          "Runs untrusted code statefully in per-session Jupyter kernels inside gVisor\n"
          "sandboxes, and serves it over HTTP.\n\n"
          "Options (each also read from the environment variable shown):\n",
          f);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt_t *o = &table[i];
        char env[80] = "";
        if (!(o->flags & (OPT_CLI | OPT_NO_ENV)) && (o->arg || o->flags & OPT_VALUED)) {
            env_name(o, env + 2, sizeof env - 4);
            env[0] = ' ', env[1] = '[';
            strcat(env, o->flags & OPT_VALUED ? "=1]" : "]");
        }
        if (o->key)
            fprintf(f, "  -%c, --%s%s%s%s\n", o->key, o->name, o->arg ? " " : "",
                    o->arg ? o->arg : "", env);
        else
            fprintf(f, "      --%s%s%s%s\n", o->name, o->arg ? " " : "", o->arg ? o->arg : "", env);
        const char *p = o->help;
        while (*p) { /* words onto lines of at most 78 - 10 characters */
            size_t n = strlen(p);
            if (n > 68) {
                n = 68;
                while (n > 0 && p[n] != ' ')
                    n--;
                if (n == 0)
                    n = strcspn(p, " ");
            }
            fprintf(f, "          %.*s\n", (int)n, p);
            p += n;
            while (*p == ' ')
                p++;
        }
    }
    fputs(help_tail, f);
}

/* o's value v, from where (NULL: the command line). */
static int apply(settings_t *s, const opt_t *o, const char *v, const char *where)
{
    origin = where ? where : "";
    int rc = o->set(s, o, v);
    origin = "";
    return rc;
}

static char *trim(char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    char *end = p + strlen(p);
    while (end > p && isspace((unsigned char)end[-1]))
        *--end = 0;
    return p;
}

/* Applies one line of the config file at path. */
static int config_line(settings_t *s, const char *path, int lineno, char *line)
{
    char *name = trim(line), *eq = strchr(name, '=');
    if (*name == 0 || *name == '#')
        return 0;
    if (eq)
        *eq = 0;
    if (!eq || *trim(name) == 0) {
        fprintf(stderr, "sandgate: %s:%d: expected 'name = value'\n", path, lineno);
        return -1;
    }
    const opt_t *o = opt_by_name(name);
    if (!o) {
        fprintf(stderr, "sandgate: %s:%d: unknown option '%s'\n", path, lineno, name);
        return -1;
    }
    if (o->flags & OPT_CLI) {
        fprintf(stderr, "sandgate: %s:%d: '%s' is not allowed in a config file\n", path, lineno,
                name);
        return -1;
    }
    char *value = trim(eq + 1), where[PATH_MAX + 16];
    size_t n = strlen(value);
    if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
        value[n - 1] = 0;
        value++;
    }
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    return apply(s, o, value, where);
}

/* Reads the config file at path into s; a missing file is an error only when
 * it was named. */
static int read_config(settings_t *s, const char *path, bool named)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !named)
            return 0;
        fprintf(stderr, "sandgate: cannot open config file %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t len = 0, cap = 4096, got;
    char *text = xmalloc(cap);
    while ((got = fread(text + len, 1, cap - 1 - len, f)) > 0)
        if ((len += got) == cap - 1)
            text = xrealloc(text, cap *= 2);
    text[len] = 0;
    s->config_text = text; /* the values set point into it */
    int err = ferror(f) ? errno : 0;
    struct stat st;
    bool shared = fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH);
    fclose(f);
    if (err || memchr(text, 0, len)) {
        fprintf(stderr, "sandgate: cannot read config file %s: %s\n", path,
                err ? strerror(err) : "not a text file");
        return -1;
    }
    int lineno = 0;
    for (char *next = text, *line; (line = strsep(&next, "\n"));)
        if (config_line(s, path, ++lineno, line) < 0)
            return -1;
    if (s->http.token && shared) /* the environment and command line come later */
        log_warn("%s holds the API token and every user can read it; make it mode 0600", path);
    return 0;
}

static int read_env(settings_t *s)
{
    for (size_t i = 0; i < NOPTS; i++) {
        const opt_t *o = &table[i];
        if (o->flags & (OPT_CLI | OPT_NO_ENV) || !(o->arg || o->flags & OPT_VALUED))
            continue;
        char env[80];
        env_name(o, env, sizeof env);
        const char *v = getenv(env);
        if (v && apply(s, o, v, env) < 0)
            return -1;
    }
    return 0;
}

/* getopt_long's tables, from the table. */
static void getopt_tables(struct option *longopts, char *shortopts)
{
    char *p = shortopts;
    for (size_t i = 0; i < NOPTS; i++) {
        longopts[i] = (struct option){table[i].name, table[i].arg ? required_argument : no_argument,
                                      NULL, opt_key(i)};
        if (table[i].key) {
            *p++ = (char)table[i].key;
            if (table[i].arg)
                *p++ = ':';
        }
    }
    longopts[NOPTS] = (struct option){0};
    *p = 0;
}

/* The command line's options, after the config file and the environment. */
static int read_argv(settings_t *s, int argc, char **argv, const struct option *longopts,
                     const char *shortopts)
{
    int c, idx;
    while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
        const opt_t *o = c == '?' ? NULL : opt_by_key(c);
        if (!o) {
            fputs("Try 'sandgate --help'.\n", stderr);
            return -1;
        }
        if (o->flags & OPT_CLI)
            continue;
        if (o->flags & OPT_SECRET) {
            /* /proc/PID/cmdline is every local user's to read, and shows this
             * memory: keep a copy and blank the original (optarg points into
             * it whichever way the option was spelt).  The launcher is forked
             * later, from this memory, so it never shows the token either. */
            free(s->token_arg);
            s->token_arg = xstrdup(optarg);
            memset(optarg, 'x', strlen(optarg));
            optarg = s->token_arg;
        }
        if (apply(s, o, optarg ? optarg : "1", NULL) < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "sandgate: unexpected argument '%s'\nTry 'sandgate --help'.\n",
                argv[optind]);
        return -1;
    }
    return 0;
}

static void defaults(settings_t *s)
{
    *s = (settings_t){.level = SG_LOG_INFO,
                      .uid = LAUNCHER_DEFAULT_UID,
                      .launcher_timeout_ms = 10000,
                      .auth_fail_limit = 20,
                      .auth_block_ms = 300 * 1000,
                      .audit_code = AUDIT_CODE_FULL,
                      .audit_keep = 1,
                      .events_keep_ms = 7 * 86400 * 1000,
                      .volume_mib = 1024,
                      .tenants = {.max_jupyter_sessions = 100,
                                  .max_volume_mib = 10240,
                                  .max_mcp_sessions = 64,
                                  .max_snapshots = 64,
                                  .max_rps = 200}};
    strcpy(s->host, "127.0.0.1");
    http_config_defaults(&s->http);
    api_config_defaults(&s->api);
    exec_policy_defaults(&s->exec);
    channels_config_defaults(&s->channels);
    kmgr_config_defaults(&s->k);
}

/* What follows from the options once all are read. */
static int derive(settings_t *s)
{
    s->http.host = s->host;
    s->http.tenant_max_rps = (unsigned)s->tenants.max_rps; /* ratelimit.h: the HTTP layer paces */
    if (s->k.state_dir[0] != '/') { /* both halves, and the paths they compare, agree */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "sandgate: cannot resolve --state-dir %s: %s\n", s->k.state_dir,
                    strerror(errno));
            return -1;
        }
        s->state_abs = xasprintf("%s/%s", cwd, s->k.state_dir);
        s->k.state_dir = s->state_abs;
    }
    for (size_t i = 0; i < s->npools; i++) {
        size_t j = 0;
        while (j < s->ntemplates && strcmp(s->templates[j].name, s->pools[i].name) != 0)
            j++;
        if (j < s->ntemplates)
            s->templates[j].pool_size = s->pools[i].size;
        else /* a language or kernelspec: kmgr resolves it */
            s->lang_pools[s->nlang_pools++] = (kmgr_pool_t){s->pools[i].name, s->pools[i].size};
    }
    s->k.pools = s->lang_pools;
    s->k.npools = s->nlang_pools;
    s->k.sandbox.templates = s->templates;
    s->k.sandbox.ntemplates = s->ntemplates;
    if (s->no_auth && s->keys_file) {
        fprintf(stderr, "sandgate: --no-auth and --keys-file exclude each other\n");
        return -1;
    }
    if (s->no_auth && strncmp(s->host, "127.", 4) != 0) {
        fprintf(stderr, "sandgate: --no-auth is refused on a non-loopback address (%s)\n", s->host);
        return -1;
    }
    return 0;
}

int options_parse(settings_t *s, int argc, char **argv)
{
    defaults(s);
    struct option longopts[NOPTS + 1];
    char shortopts[2 * NOPTS + 1];
    getopt_tables(longopts, shortopts);
    /* A first pass for what decides the rest: --help, --version, --config. */
    const char *config = getenv("SANDGATE_CONFIG");
    int c, idx;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
        if (c == 'h') {
            print_help(stdout);
            return 0;
        }
        if (c == 'V') {
            printf("sandgate %s\n", PACKAGE_VERSION);
            return 0;
        }
        if (c == 'c')
            config = optarg;
    }
    opterr = 1;
    optind = 0;
    /* The config file, then the environment, then the command line: each
     * overrides what came before. */
    if (read_config(s, config ? config : "/etc/sandgate/sandgate.conf", config != NULL) < 0 ||
        read_env(s) < 0 || read_argv(s, argc, argv, longopts, shortopts) < 0 || derive(s) < 0)
        return 2;
    return -1; /* go on */
}

void settings_free(settings_t *s)
{
    free(s->config_text);
    free(s->token_arg);
    free(s->state_abs);
    for (size_t i = 0; i < s->ntemplate_text; i++)
        free(s->template_text[i]);
    for (size_t i = 0; i < s->npools; i++)
        free(s->pools[i].name);
}
