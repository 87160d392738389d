/* sandgate: the daemon's entry point — options, the event loop, shutdown. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include <sodium.h>

#include "config.h"
#include "gateway/api.h"
#include "gateway/audit.h"
#include "gateway/http.h"
#include "gateway/jupyter.h"
#include "gateway/mcp.h"
#include "gateway/pyscript.h"
#include "kernelmgr/egress.h"
#include "kernelmgr/kmgr.h"
#include "kernelmgr/launcher.h"
#include "kernelmgr/proc.h"

static const char usage[] =
    "usage: sandgate [OPTIONS]\n"
    "\n"
    "Runs untrusted code statefully in per-session Jupyter kernels inside gVisor\n"
    "sandboxes, and serves it over HTTP.\n"
    "\n"
    "Options (each also read from the environment variable shown):\n"
    "  -c, --config FILE         read options from FILE (default   [SANDGATE_CONFIG]\n"
    "                            /etc/sandgate/sandgate.conf, if it exists)\n"
    "  -l, --listen HOST:PORT    address to serve HTTP on          [SANDGATE_LISTEN]\n"
    "                            (default 127.0.0.1:49999)\n"
    "  -t, --token TOKEN         API token (default: generated and [SANDGATE_TOKEN]\n"
    "                            printed at start); prefer the environment\n"
    "                            or a mode 0600 config file: other users see\n"
    "                            a command line until sandgate blanks it\n"
    "      --no-auth             no token (only with a loopback    [SANDGATE_NO_AUTH=1]\n"
    "                            --listen address)\n"
    "      --replica-id ID       this sandgate's name among        [SANDGATE_REPLICA_ID]\n"
    "                            replicas behind one proxy (default: the\n"
    "                            host name); the ids it hands out carry\n"
    "                            it (docs/deploy-cluster.md)\n"
    "      --max-body BYTES      request body limit (1048576)      [SANDGATE_MAX_BODY]\n"
    "      --max-output BYTES    output kept per execution         [SANDGATE_MAX_OUTPUT]\n"
    "                            (16777216; the rest is dropped with a marker)\n"
    "      --max-upload BYTES    size of one uploaded file         [SANDGATE_MAX_UPLOAD]\n"
    "                            (268435456)\n"
    "      --max-ws-message BYTES  one WebSocket message from a  [SANDGATE_MAX_WS_MESSAGE]\n"
    "                            frontend (16777216)\n"
    "      --max-timeout SEC     the longest timeout a request may [SANDGATE_MAX_TIMEOUT]\n"
    "                            ask for (3600)\n"
    "      --max-connections N   HTTP connections (1024)           [SANDGATE_MAX_CONNECTIONS]\n"
    "      --max-connections-per-ip N                          [SANDGATE_MAX_CONNECTIONS_PER_IP]\n"
    "                            from one client address (--max-connections / 4)\n"
    "      --connection-timeout SEC  close connections idle    [SANDGATE_CONNECTION_TIMEOUT]\n"
    "                            this long (300)\n"
    "  -s, --state-dir DIR       sessions, workspaces, sandboxes   [SANDGATE_STATE_DIR]\n"
    "                            (default /var/lib/sandgate)\n"
    "      --sandbox MODE        runsc (default) or none: plain    [SANDGATE_SANDBOX]\n"
    "                            processes, NO isolation, for development\n"
    "      --runsc PATH          the runsc binary (/usr/bin/runsc) [SANDGATE_RUNSC]\n"
    "      --platform NAME       runsc platform (default ptrace)   [SANDGATE_PLATFORM]\n"
    "      --rootfs DIR          image directory to use as the     [SANDGATE_ROOTFS]\n"
    "                            sandbox's / (default: host /usr, generated /etc)\n"
    "      --egress-allow LIST   what sandboxes that ask for the   [SANDGATE_EGRESS_ALLOW]\n"
    "                            network ({\"internet\": true}) may\n"
    "                            reach: CIDR[:PORT[-PORT]],... (default\n"
    "                            empty: no network for anyone); private,\n"
    "                            loopback, link-local (metadata) and\n"
    "                            multicast ranges, the host and other\n"
    "                            sandboxes stay blocked unless an entry\n"
    "                            lies inside one (docs/security.md)\n"
    "      --egress-dns IP[,IP]  resolvers those sandboxes use     [SANDGATE_EGRESS_DNS]\n"
    "                            (port 53; their /etc/resolv.conf)\n"
    "      --egress-max-conns N  open connections per sandbox with [SANDGATE_EGRESS_MAX_CONNS]\n"
    "                            a network (256; 0: no limit)\n"
    "      --egress-rate KIB     bandwidth per sandbox with a      [SANDGATE_EGRESS_RATE]\n"
    "                            network, KiB/s each way (0: no limit,\n"
    "                            the default)\n"
    "      --memory MIB          memory per sandbox (1024)         [SANDGATE_MEMORY]\n"
    "      --cpus N              CPUs per sandbox (1.0)            [SANDGATE_CPUS]\n"
    "      --processes N         processes per sandbox (64)        [SANDGATE_PROCESSES]\n"
    "      --open-files N        open files per process (1024)     [SANDGATE_OPEN_FILES]\n"
    "      --workspace-size MIB  workspace filesystem size (1024;  [SANDGATE_WORKSPACE_SIZE]\n"
    "                            0: a plain directory, no limit)\n"
    "      --tmp-size MIB        /tmp size (256)                   [SANDGATE_TMP_SIZE]\n"
    "      --exec-timeout SEC    default execution timeout (300;   [SANDGATE_EXEC_TIMEOUT]\n"
    "                            0: none)\n"
    "      --start-timeout SEC   how long a new kernel may take to [SANDGATE_START_TIMEOUT]\n"
    "                            answer (120); past it the session is dead\n"
    "                            with a timeout error\n"
    "      --idle-timeout SEC    shut down sessions idle this long [SANDGATE_IDLE_TIMEOUT]\n"
    "                            (3600; 0: never), paused or not\n"
    "      --pause-after SEC     pause sessions idle this long to  [SANDGATE_PAUSE_AFTER]\n"
    "                            disk (600; 0: never); using one\n"
    "                            resumes it\n"
    "      --pause-on-stop SEC   at SIGTERM, pause every idle      [SANDGATE_PAUSE_ON_STOP]\n"
    "                            session first, waiting up to SEC (0,\n"
    "                            the default: sessions keep running for\n"
    "                            the next start); for containers, whose\n"
    "                            processes end with them\n"
    "      --max-kernels N       running session kernels at once   [SANDGATE_MAX_KERNELS]\n"
    "                            (64; paused ones not counted)\n"
    "      --pool-size N         warm python3 kernels kept ready   [SANDGATE_POOL_SIZE]\n"
    "                            (1)\n"
    "      --preload CODE        code pool kernels run before use  [SANDGATE_PRELOAD]\n"
    "                            (e.g. 'import pandas, matplotlib')\n"
    "      --user UID            the unprivileged uid HTTP is served [SANDGATE_USER]\n"
    "                            as when started as root (64122); a small launcher\n"
    "                            keeps root for runsc and workspaces only\n"
    "      --launcher-timeout SEC  how long a request to the launcher [SANDGATE_LAUNCHER_TIMEOUT]\n"
    "                            may wait for its answer (10); past it the request\n"
    "                            that needed it fails with 504\n"
    "      --log-level LEVEL     debug, info, warn or error (info) [SANDGATE_LOG_LEVEL]\n"
    "      --audit-log PATH      append one JSON line per event    [SANDGATE_AUDIT_LOG]\n"
    "                            (executions and their outcomes, commands,\n"
    "                            file writes and deletes, context, kernel\n"
    "                            and session changes, refused requests) to\n"
    "                            PATH, or '-' for stderr; never the token,\n"
    "                            file contents or output; SIGHUP reopens it\n"
    "                            (logrotate: docs/operations.md)\n"
    "      --audit-code MODE     full: code and commands as sent,  [SANDGATE_AUDIT_CODE]\n"
    "                            the first 64 KiB of each (the default);\n"
    "                            hash: their SHA-256 only\n"
    "  -h, --help                show this help and exit\n"
    "  -V, --version             show the version and exit\n"
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

enum {
    O_CONFIG = 'c',
    O_LISTEN = 'l',
    O_STATE = 's',
    O_HELP = 'h',
    O_VERSION = 'V',
    O_SANDBOX = 256,
    O_RUNSC,
    O_PLATFORM,
    O_ROOTFS,
    O_EGRESS_ALLOW,
    O_EGRESS_DNS,
    O_EGRESS_MAX_CONNS,
    O_EGRESS_RATE,
    O_REPLICA_ID,
    O_MEMORY,
    O_CPUS,
    O_PROCESSES,
    O_OPEN_FILES,
    O_WORKSPACE,
    O_TMP,
    O_EXEC_TIMEOUT,
    O_START_TIMEOUT,
    O_IDLE_TIMEOUT,
    O_PAUSE_AFTER,
    O_PAUSE_ON_STOP,
    O_MAX_KERNELS,
    O_POOL,
    O_PRELOAD,
    O_LOG_LEVEL,
    O_TOKEN = 't',
    O_NO_AUTH = 400,
    O_MAX_BODY,
    O_MAX_OUTPUT,
    O_MAX_UPLOAD,
    O_MAX_TIMEOUT,
    O_MAX_CONNS,
    O_MAX_CONNS_IP,
    O_CONN_TIMEOUT,
    O_MAX_WS_MESSAGE,
    O_USER,
    O_LAUNCHER_TIMEOUT,
    O_AUDIT_LOG,
    O_AUDIT_CODE,
};

static const char shortopts[] = "c:l:s:t:hV";
static const struct option opts[] = {
    {"config", required_argument, NULL, O_CONFIG},
    {"listen", required_argument, NULL, O_LISTEN},
    {"replica-id", required_argument, NULL, O_REPLICA_ID},
    {"state-dir", required_argument, NULL, O_STATE},
    {"token", required_argument, NULL, O_TOKEN},
    {"no-auth", no_argument, NULL, O_NO_AUTH},
    {"max-body", required_argument, NULL, O_MAX_BODY},
    {"max-output", required_argument, NULL, O_MAX_OUTPUT},
    {"max-upload", required_argument, NULL, O_MAX_UPLOAD},
    {"max-ws-message", required_argument, NULL, O_MAX_WS_MESSAGE},
    {"max-timeout", required_argument, NULL, O_MAX_TIMEOUT},
    {"max-connections", required_argument, NULL, O_MAX_CONNS},
    {"max-connections-per-ip", required_argument, NULL, O_MAX_CONNS_IP},
    {"connection-timeout", required_argument, NULL, O_CONN_TIMEOUT},
    {"sandbox", required_argument, NULL, O_SANDBOX},
    {"runsc", required_argument, NULL, O_RUNSC},
    {"platform", required_argument, NULL, O_PLATFORM},
    {"rootfs", required_argument, NULL, O_ROOTFS},
    {"egress-allow", required_argument, NULL, O_EGRESS_ALLOW},
    {"egress-dns", required_argument, NULL, O_EGRESS_DNS},
    {"egress-max-conns", required_argument, NULL, O_EGRESS_MAX_CONNS},
    {"egress-rate", required_argument, NULL, O_EGRESS_RATE},
    {"memory", required_argument, NULL, O_MEMORY},
    {"cpus", required_argument, NULL, O_CPUS},
    {"processes", required_argument, NULL, O_PROCESSES},
    {"open-files", required_argument, NULL, O_OPEN_FILES},
    {"workspace-size", required_argument, NULL, O_WORKSPACE},
    {"tmp-size", required_argument, NULL, O_TMP},
    {"exec-timeout", required_argument, NULL, O_EXEC_TIMEOUT},
    {"start-timeout", required_argument, NULL, O_START_TIMEOUT},
    {"idle-timeout", required_argument, NULL, O_IDLE_TIMEOUT},
    {"pause-after", required_argument, NULL, O_PAUSE_AFTER},
    {"pause-on-stop", required_argument, NULL, O_PAUSE_ON_STOP},
    {"max-kernels", required_argument, NULL, O_MAX_KERNELS},
    {"pool-size", required_argument, NULL, O_POOL},
    {"preload", required_argument, NULL, O_PRELOAD},
    {"log-level", required_argument, NULL, O_LOG_LEVEL},
    {"user", required_argument, NULL, O_USER},
    {"launcher-timeout", required_argument, NULL, O_LAUNCHER_TIMEOUT},
    {"audit-log", required_argument, NULL, O_AUDIT_LOG},
    {"audit-code", required_argument, NULL, O_AUDIT_CODE},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

typedef struct {
    char host[256];
    sg_loglevel_t level;
    bool no_auth;
    http_config_t http;
    api_config_t api;
    exec_policy_t exec; /* every front end's executions' limits */
    channels_config_t channels;
    kmgr_config_t k;
    unsigned uid; /* of the unprivileged half, when started as root */
    int launcher_timeout_ms;
    char *state_abs;       /* --state-dir made absolute, when it was not */
    char *config_text;     /* the config file's text; values point into it */
    char *token_arg;       /* --token's value, copied before argv is blanked */
    const char *replica;   /* --replica-id; NULL: the host name */
    int pause_on_stop_ms;  /* --pause-on-stop; 0: sessions are left running */
    const char *audit_log; /* --audit-log; NULL: none */
    audit_code_t audit_code;
} settings_t;

/* Where the value being applied came from (SANDGATE_X, FILE:LINE), for bad();
 * "" for the command line. */
static const char *origin = "";

static int bad(const char *name, const char *value, const char *want)
{
    fprintf(stderr, "sandgate: %s%s--%s wants %s, got '%s'\nTry 'sandgate --help'.\n", origin,
            *origin ? ": " : "", name, want, value);
    return -1;
}

static int parse_uint(const char *name, const char *v, unsigned long long max,
                      unsigned long long *out)
{
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v == 0 || *end != 0 || *v == '-' || n > max)
        return bad(name, v, "a non-negative integer");
    *out = n;
    return 0;
}

/* Applies one option (from the command line or the environment). */
static int apply(settings_t *s, int opt, const char *name, const char *v)
{
    unsigned long long n;
    switch (opt) {
    case O_LISTEN: {
        const char *colon = strrchr(v, ':');
        char *end;
        long p = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == v || (size_t)(colon - v) >= sizeof s->host || colon[1] == 0 ||
            *end != 0 || p < 0 || p > 65535)
            return bad(name, v, "HOST:PORT");
        memcpy(s->host, v, colon - v);
        s->host[colon - v] = 0;
        s->http.port = (int)p;
        return 0;
    }
    case O_REPLICA_ID:
        if (!replica_valid_id(v))
            return bad(name, v, "1-63 characters of A-Z, a-z, 0-9, '.', '_', '-'");
        s->replica = v;
        return 0;
    case O_TOKEN:
        if (strlen(v) < 16)
            return bad(name, "(hidden)", "at least 16 characters");
        s->http.token = v;
        return 0;
    case O_NO_AUTH:
        if (strcasecmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0)
            s->no_auth = true;
        else if (strcasecmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0)
            s->no_auth = false;
        else
            return bad(name, v, "true, false, yes, no, 1 or 0");
        return 0;
    case O_MAX_BODY:
        if (parse_uint(name, v, 1ull << 32, &n) < 0)
            return -1;
        s->http.max_body = n;
        return 0;
    case O_MAX_OUTPUT:
        if (parse_uint(name, v, 1ull << 34, &n) < 0)
            return -1;
        s->exec.max_output = n;
        return 0;
    case O_MAX_UPLOAD:
        if (parse_uint(name, v, 1ull << 40, &n) < 0)
            return -1;
        s->api.max_upload = n;
        return 0;
    case O_MAX_WS_MESSAGE:
        if (parse_uint(name, v, 1ull << 32, &n) < 0 || n < 1024)
            return n < 1024 ? bad(name, v, "at least 1024 bytes") : -1;
        s->channels.max_message = n;
        return 0;
    case O_MAX_TIMEOUT:
        if (parse_uint(name, v, 86400 * 7, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive number of seconds") : -1;
        s->exec.max_timeout_ms = (int)(n * 1000);
        return 0;
    case O_MAX_CONNS:
        if (parse_uint(name, v, 1 << 20, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive integer") : -1;
        s->http.max_conns = (unsigned)n;
        return 0;
    case O_MAX_CONNS_IP:
        if (parse_uint(name, v, 1 << 20, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive integer") : -1;
        s->http.max_conns_ip = (unsigned)n;
        return 0;
    case O_CONN_TIMEOUT:
        if (parse_uint(name, v, 86400, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive number of seconds") : -1;
        s->http.conn_timeout_s = (unsigned)n;
        return 0;
    case O_STATE: s->k.state_dir = v; return 0;
    case O_SANDBOX:
        if (strcmp(v, "runsc") == 0)
            s->k.sandbox.mode = SANDBOX_RUNSC;
        else if (strcmp(v, "none") == 0)
            s->k.sandbox.mode = SANDBOX_NONE;
        else
            return bad(name, v, "runsc or none");
        return 0;
    case O_RUNSC: s->k.sandbox.runsc = v; return 0;
    case O_PLATFORM: s->k.sandbox.platform = v; return 0;
    case O_ROOTFS: s->k.sandbox.rootfs = v; return 0;
    case O_EGRESS_ALLOW:
    case O_EGRESS_DNS: {
        egress_policy_t p;
        sg_error_t *err = NULL;
        if ((opt == O_EGRESS_ALLOW ? egress_parse_allow(&p, v, &err)
                                   : egress_parse_dns(&p, v, &err)) < 0) {
            fprintf(stderr, "sandgate: %s%s%s\nTry 'sandgate --help'.\n", origin,
                    *origin ? ": " : "", err->msg);
            sg_error_free(&err);
            return -1;
        }
        *(opt == O_EGRESS_ALLOW ? &s->k.sandbox.egress_allow : &s->k.sandbox.egress_dns) = v;
        return 0;
    }
    case O_EGRESS_MAX_CONNS:
        if (parse_uint(name, v, 1 << 20, &n) < 0)
            return -1;
        s->k.sandbox.egress_max_conns = (unsigned)n;
        return 0;
    case O_EGRESS_RATE:
        if (parse_uint(name, v, 1ull << 30, &n) < 0)
            return -1;
        s->k.sandbox.egress_rate = n << 10;
        return 0;
    case O_MEMORY:
        if (parse_uint(name, v, 1 << 24, &n) < 0 || n < 64)
            return n < 64 ? bad(name, v, "at least 64 (MiB)") : -1;
        s->k.sandbox.memory_bytes = n << 20;
        return 0;
    case O_CPUS: {
        char *end;
        double c = strtod(v, &end);
        if (*end != 0 || !(c >= 0.01 && c <= 1024))
            return bad(name, v, "a number of CPUs such as 0.5 or 2");
        s->k.sandbox.cpu_quota_us = (uint64_t)(c * 100000);
        return 0;
    }
    case O_PROCESSES:
        if (parse_uint(name, v, 1 << 20, &n) < 0)
            return -1;
        s->k.sandbox.nproc = n;
        return 0;
    case O_OPEN_FILES:
        if (parse_uint(name, v, 1 << 20, &n) < 0)
            return -1;
        s->k.sandbox.nofile = n;
        return 0;
    case O_WORKSPACE:
        if (parse_uint(name, v, 1 << 24, &n) < 0)
            return -1;
        s->k.sandbox.workspace_bytes = n << 20;
        return 0;
    case O_TMP:
        if (parse_uint(name, v, 1 << 24, &n) < 0)
            return -1;
        s->k.sandbox.tmp_bytes = n << 20;
        return 0;
    case O_EXEC_TIMEOUT:
        if (parse_uint(name, v, 86400 * 7, &n) < 0)
            return -1;
        s->exec.timeout_ms = (int)(n * 1000);
        return 0;
    case O_START_TIMEOUT:
        if (parse_uint(name, v, 3600, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive number of seconds") : -1;
        s->k.kernel.start_timeout_ms = (int)(n * 1000);
        return 0;
    case O_IDLE_TIMEOUT:
        if (parse_uint(name, v, 86400 * 7, &n) < 0)
            return -1;
        s->k.cull_idle_ms = (int)(n * 1000);
        return 0;
    case O_PAUSE_AFTER:
        if (parse_uint(name, v, 86400 * 7, &n) < 0)
            return -1;
        s->k.pause_after_ms = (int)(n * 1000);
        return 0;
    case O_PAUSE_ON_STOP:
        if (parse_uint(name, v, 3600, &n) < 0)
            return -1;
        s->pause_on_stop_ms = (int)(n * 1000);
        return 0;
    case O_MAX_KERNELS:
        if (parse_uint(name, v, 100000, &n) < 0)
            return -1;
        s->k.max_kernels = (int)n;
        return 0;
    case O_POOL:
        if (parse_uint(name, v, 1000, &n) < 0)
            return -1;
        s->k.pool_size = (int)n;
        return 0;
    case O_PRELOAD: s->k.pool_preload = v; return 0;
    case O_USER:
        if (parse_uint(name, v, 0xfffffffe, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a uid other than 0") : -1;
        s->uid = (unsigned)n;
        return 0;
    case O_LAUNCHER_TIMEOUT:
        if (parse_uint(name, v, 3600, &n) < 0 || n == 0)
            return n == 0 ? bad(name, v, "a positive number of seconds") : -1;
        s->launcher_timeout_ms = (int)(n * 1000);
        return 0;
    case O_AUDIT_LOG:
        if (*v == 0)
            return bad(name, v, "a file name, or '-' for stderr");
        s->audit_log = v;
        return 0;
    case O_AUDIT_CODE:
        if (strcmp(v, "full") == 0)
            s->audit_code = AUDIT_CODE_FULL;
        else if (strcmp(v, "hash") == 0)
            s->audit_code = AUDIT_CODE_HASH;
        else
            return bad(name, v, "full or hash");
        return 0;
    case O_LOG_LEVEL: {
        static const char *names[] = {"debug", "info", "warn", "error"};
        for (int i = 0; i < 4; i++)
            if (strcmp(v, names[i]) == 0) {
                s->level = (sg_loglevel_t)i;
                return 0;
            }
        return bad(name, v, "debug, info, warn or error");
    }
    }
    return -1;
}

/* apply() for a value from the environment or the config file: its errors
 * name where. */
static int apply_from(settings_t *s, const struct option *o, const char *v, const char *where)
{
    origin = where;
    int rc = apply(s, o->val, o->name, v);
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
    const struct option *o = opts;
    while (o->name && strcmp(o->name, name) != 0)
        o++;
    if (!o->name) {
        fprintf(stderr, "sandgate: %s:%d: unknown option '%s'\n", path, lineno, name);
        return -1;
    }
    if (o->val == O_CONFIG || o->val == O_HELP || o->val == O_VERSION) {
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
    return apply_from(s, o, value, where);
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
    s->config_text = text; /* apply() may keep pointers into it */
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

/* What parse() allocated. */
static void settings_free(settings_t *s)
{
    free(s->config_text);
    free(s->token_arg);
    free(s->state_abs);
}

/* What the kernel manager did on its own (an idle pause, a cull, a
 * re-adoption...): an audit event of no front end and no client. */
static void on_kmgr_notice(const char *event, json_t *fields, void *arg)
{
    (void)arg;
    audit_event(NULL, event, fields);
}

static int parse(settings_t *s, int argc, char **argv)
{
    strcpy(s->host, "127.0.0.1");
    s->level = SG_LOG_INFO;
    s->no_auth = false;
    http_config_defaults(&s->http);
    api_config_defaults(&s->api);
    exec_policy_defaults(&s->exec);
    channels_config_defaults(&s->channels);
    kmgr_config_defaults(&s->k);
    s->k.notice = on_kmgr_notice;
    s->config_text = NULL;
    s->token_arg = NULL;
    s->state_abs = NULL;
    s->replica = NULL;
    s->pause_on_stop_ms = 0;
    s->audit_log = NULL;
    s->audit_code = AUDIT_CODE_FULL;
    s->uid = LAUNCHER_DEFAULT_UID;
    s->launcher_timeout_ms = 10000;
    /* A first pass for what decides the rest: --help, --version, --config. */
    const char *config = getenv("SANDGATE_CONFIG");
    int c, idx;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, opts, &idx)) != -1) {
        if (c == O_HELP) {
            fputs(usage, stdout);
            return 0;
        }
        if (c == O_VERSION) {
            printf("sandgate %s\n", PACKAGE_VERSION);
            return 0;
        }
        if (c == O_CONFIG)
            config = optarg;
    }
    opterr = 1;
    optind = 0;
    /* The config file, then the environment, then the command line: each
     * overrides what came before. */
    if (read_config(s, config ? config : "/etc/sandgate/sandgate.conf", config != NULL) < 0)
        return 2;
    for (const struct option *o = opts; o->name; o++) {
        if ((o->has_arg == no_argument && o->val != O_NO_AUTH) || o->val == O_CONFIG)
            continue;
        char env[64] = "SANDGATE_";
        for (size_t i = 0; o->name[i] && i < 50; i++)
            env[9 + i] = o->name[i] == '-' ? '_' : (char)(o->name[i] & ~0x20);
        const char *v = getenv(env);
        if (v && apply_from(s, o, v, env) < 0)
            return 2;
    }
    while ((c = getopt_long(argc, argv, shortopts, opts, &idx)) != -1) {
        if (c == O_CONFIG)
            continue;
        if (c == '?') {
            fputs("Try 'sandgate --help'.\n", stderr);
            return 2;
        }
        const char *name = opts[0].name;
        for (const struct option *o = opts; o->name; o++)
            if (o->val == c)
                name = o->name;
        if (c == O_TOKEN) {
            /* /proc/PID/cmdline is every local user's to read, and shows this
             * memory: keep a copy and blank the original (optarg points into
             * it whichever way the option was spelt).  The launcher is forked
             * later, from this memory, so it never shows the token either. */
            free(s->token_arg);
            s->token_arg = xstrdup(optarg);
            memset(optarg, 'x', strlen(optarg));
            optarg = s->token_arg;
        }
        if (apply(s, c, name, optarg ? optarg : "1") < 0)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "sandgate: unexpected argument '%s'\nTry 'sandgate --help'.\n",
                argv[optind]);
        return 2;
    }
    s->http.host = s->host;
    if (s->k.state_dir[0] != '/') { /* both halves, and the paths they compare, agree */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "sandgate: cannot resolve --state-dir %s: %s\n", s->k.state_dir,
                    strerror(errno));
            return 2;
        }
        s->state_abs = xasprintf("%s/%s", cwd, s->k.state_dir);
        s->k.state_dir = s->state_abs;
    }
    bool loopback = strncmp(s->host, "127.", 4) == 0;
    if (s->no_auth && !loopback) {
        fprintf(stderr, "sandgate: --no-auth is refused on a non-loopback address (%s)\n", s->host);
        return 2;
    }
    return -1; /* go on */
}

/* A stop: at once, or (--pause-on-stop) once every idle session is paused
 * to disk, a second signal or the time limit cutting that short. */
typedef struct {
    kmgr_t *kmgr;
    int pause_ms;
    bool draining;
    loop_t *loop;
    bool launcher_lost; /* stopping for the supervisor: exit status 70 */
    int lost_grace_ms;  /* --launcher-timeout */
    int64_t lost_deadline;
} stop_t;

static void on_drained(void *arg)
{
    stop_t *st = arg;
    log_info("every session that could pause is paused; stopping");
    loop_stop(st->loop);
}

static void on_drain_timeout(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    (void)arg;
    log_warn("--pause-on-stop: time is up; stopping with pauses still under way");
    loop_stop(loop);
}

static void on_stop_signal(loop_t *loop, int signo, void *arg)
{
    stop_t *st = arg;
    log_info("%s received", strsignal(signo));
    if (st->pause_ms <= 0 || st->kmgr == NULL || st->draining) {
        loop_stop(loop);
        return;
    }
    st->draining = true;
    st->loop = loop;
    size_t n = kmgr_pause_all(st->kmgr, on_drained, st);
    if (n == 0) {
        loop_stop(loop);
        return;
    }
    log_info("pausing %zu sessions before stopping (at most %d s; a second signal stops now)", n,
             st->pause_ms / 1000);
    loop_timer(loop, st->pause_ms, 1, on_drain_timeout, NULL);
}

/* SIGHUP: the audit log was rotated; write to a new file of the same name. */
static void on_hangup(loop_t *loop, int signo, void *arg)
{
    sg_error_t *err = NULL;
    if (audit_reopen(&err) < 0) {
        log_warn("SIGHUP: %s", err->msg);
        sg_error_free(&err);
    } else if (audit_enabled()) {
        log_info("SIGHUP: the audit log was reopened");
    }
}

/* Stops once no execution runs, or at the deadline. */
static void on_lost_tick(loop_t *loop, int timer_id, void *arg)
{
    stop_t *st = arg;
    kmgr_stats_t ks;
    if (st->kmgr)
        kmgr_stats(st->kmgr, &ks);
    if (st->kmgr && ks.busy > 0 && zclock_mono() < st->lost_deadline)
        return;
    loop_timer_end(loop, timer_id);
    log_error("stopping with status 70 for the supervisor to restart sandgate (the launcher is "
              "gone); sessions keep running and are re-adopted");
    loop_stop(loop);
}

/* The launcher is gone and this process, without root, cannot start
 * another: stop, for the supervisor to restart sandgate, once the
 * executions under way have ended (at most the launcher timeout more).
 * Meanwhile what needs the launcher fails with 503 naming it. */
static void on_launcher_lost(void *arg)
{
    stop_t *st = arg;
    if (st->launcher_lost)
        return;
    st->launcher_lost = true;
    st->lost_deadline = zclock_mono() + st->lost_grace_ms;
    loop_timer(st->loop, 100, 0, on_lost_tick, st);
}

int main(int argc, char **argv)
{
    settings_t s;
    int rc = parse(&s, argc, argv);
    if (rc >= 0) {
        settings_free(&s);
        return rc;
    }
    sg_log_set_level(s.level);
    signal(SIGPIPE, SIG_IGN);
    if (s.k.sandbox.mode == SANDBOX_NONE)
        log_warn("*** --sandbox=none: kernels run as plain processes with sandgate's privileges. "
                 "Code can read and change this machine. For development only. ***");

    char generated[65];
    bool show_token = false;
    if (s.no_auth) {
        s.http.token = NULL;
        log_warn("--no-auth: anyone who can reach %s can run code here", s.host);
    } else if (s.http.token == NULL) {
        unsigned char raw[24];
        randombytes_buf(raw, sizeof raw);
        sodium_bin2hex(generated, sizeof generated, raw, sizeof raw);
        s.http.token = generated;
        show_token = true;
    }

    /* Privilege separation (kernelmgr/launcher.h): started as root with runsc,
     * fork the launcher now — before any socket or thread exists — and serve
     * HTTP without root. */
    sg_error_t *err = NULL;
    if (replica_init(s.replica, &err) < 0) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        settings_free(&s);
        return 1;
    }
    launcher_config_t lc = {.sandbox = s.k.sandbox,
                            .state_dir = s.k.state_dir,
                            .kernelspec_path = s.k.kernelspec_path,
                            .uid = s.uid,
                            .gid = SANDBOX_GID};
    int link = -1;
    pid_t launcher_pid = 0;
    /* The audit log is opened before privileges go, so its directory may be
     * root's; after the launcher's fork, so only the serving half holds it.
     * A reopen (SIGHUP) happens as the serving uid: docs/operations.md. */
    bool privsep = geteuid() == 0 && s.k.sandbox.mode == SANDBOX_RUNSC;
    if ((privsep && (link = launcher_fork(&lc, &launcher_pid, &err)) < 0) ||
        (s.audit_log && audit_open(s.audit_log, s.audit_code, &err) < 0) ||
        (privsep && launcher_drop_privileges(&lc, &err) < 0)) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        if (link >= 0) /* the launcher ends when its link closes */
            close(link);
        settings_free(&s);
        return 1;
    }
    if (privsep) {
        log_info("serving as uid %u, gid %u; the launcher (pid %d) keeps root for runsc and "
                 "workspaces",
                 lc.uid, lc.gid, (int)launcher_pid);
    }

    /* SIGINT and SIGTERM end the loop through its signalfd; they are blocked
     * before ZeroMQ starts its threads, which inherit the mask (czmq's own
     * handler is off). */
    loop_t *loop = loop_new();
    static stop_t stop;
    stop = (stop_t){.pause_ms = s.pause_on_stop_ms};
    if (loop_signal(loop, SIGINT, on_stop_signal, &stop, &err) < 0 ||
        loop_signal(loop, SIGTERM, on_stop_signal, &stop, &err) < 0 ||
        loop_signal(loop, SIGHUP, on_hangup, NULL, &err) < 0 || proc_init(loop, &err) < 0) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        loop_destroy(&loop);
        settings_free(&s);
        return 1;
    }
    zsys_handler_set(NULL);
    zsys_init();
    audit_attach(loop);
    if (link >= 0) {
        stop.loop = loop;
        stop.lost_grace_ms = s.launcher_timeout_ms;
        sandbox_set_launcher(loop, link, s.launcher_timeout_ms, on_launcher_lost, &stop);
    }
    kmgr_t *kmgr = NULL;
    http_server_t *http = NULL;
    api_t *api = NULL;
    jupyter_t *jupyter = NULL;
    mcp_t *mcp = NULL;
    rc = 1;
    /* The kernels' own defaults, for what sandgate runs in them itself. */
    s.k.kernel.exec_timeout_ms = s.exec.timeout_ms;
    s.k.kernel.interrupt_grace_ms = s.exec.interrupt_grace_ms;
    if (pyscript_load(&err) < 0 || !(kmgr = kmgr_new(loop, &s.k, &err)) ||
        !(http = http_server_new(loop, &s.http, &err))) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        goto out;
    }
    stop.kmgr = kmgr;
    s.api.state_dir = s.k.state_dir;
    s.api.exec = &s.exec;
    api = api_new(loop, kmgr, &s.api, http_server_wake, http);
    s.channels.exec = &s.exec;
    jupyter = jupyter_new(loop, kmgr, &s.channels, http_server_wake, http);
    mcp_config_t mc;
    mcp_config_defaults(&mc);
    mc.state_dir = s.k.state_dir;
    mc.kernelspec = s.k.pool_kernelspec;
    mc.idle_ms = s.k.cull_idle_ms;
    mc.exec = &s.exec;
    mc.max_upload = s.api.max_upload;
    mc.loopback_origins = s.http.token == NULL;
    mcp = mcp_new(loop, kmgr, &mc, http_server_wake, http);
    /* The three front ends' URLs are disjoint, so the order is free. */
    if (api_register(api, http, &err) < 0 || jupyter_register(jupyter, http, &err) < 0 ||
        mcp_register(mcp, http, &err) < 0) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        goto out;
    }
    log_info("sandgate %s listening on http://%s:%d (state in %s, sandbox %s, replica %s: ids "
             "begin %s)",
             PACKAGE_VERSION, s.host, http_server_port(http), s.k.state_dir,
             s.k.sandbox.mode == SANDBOX_RUNSC ? "runsc" : "none", replica_id(), replica_tag());
    if (show_token) {
        /* The token goes to stdout for the operator, never to the log. */
        printf("sandgate is ready. Token (generated; SANDGATE_TOKEN or a config file's token "
               "chooses one):\n  %s\n"
               "Try:\n  curl -sN http://%s:%d/execute -H 'Authorization: Bearer %s' "
               "-H 'Content-Type: application/json' -d '{\"code\": \"print(6*7)\"}'\n",
               generated, s.host, http_server_port(http), generated);
        fflush(stdout);
    }
    if (loop_run(loop, &err) < 0) {
        log_error("%s", err->msg);
        sg_error_free(&err);
    }
    log_info("shutting down; sandboxes keep running and are re-adopted at the next start");
    rc = stop.launcher_lost ? 70 : 0;
out:
    jupyter_close(jupyter);
    http_server_destroy(&http);
    mcp_destroy(&mcp);
    jupyter_destroy(&jupyter);
    api_destroy(&api);
    kmgr_destroy(&kmgr, false);
    if (link >= 0) { /* the launcher ends when its link closes */
        close(link);
        int i = 0;
        while (i++ < 100 && waitpid(launcher_pid, NULL, WNOHANG) == 0)
            usleep(100 * 1000);
        if (i > 100)
            log_warn("the launcher (pid %d) did not exit within 10 s", (int)launcher_pid);
    }
    audit_close();
    proc_fini();
    loop_destroy(&loop);
    settings_free(&s);
    return rc;
}
