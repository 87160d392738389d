/* proxy: the egress proxy that lets a sandbox's rules name hosts.
 *
 * Debian's HAProxy, run by the launcher in STATE/egress-proxy: it takes
 * the TCP to ports 80 and 443 of the sandboxes whose rules name hosts (the
 * table redirects it, egress.c) and decides each connection by the name it
 * asks for — the TLS ClientHello's SNI, the HTTP Host — with proxy.lua,
 * which holds every such sandbox's rules (pushed over a unix socket only
 * root opens).  An allowed name is resolved with the sandboxes' own DNS
 * servers (--egress-dns) and the connection goes there, whatever address
 * the sandbox chose; nftables applies the operator's policy to everything
 * the proxy's uid (PROXY_UID) sends.  HAProxy drops to that uid and
 * chroots into an empty directory once its sockets are open. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "kernelmgr/egress/internal.h"

extern const char egress_proxy_lua[]; /* proxy.lua, compiled in (egress_proxy_lua.c) */

static struct {
    char *state;       /* STATE */
    char *dir;         /* STATE/egress-proxy */
    pid_t pid;         /* 0: not running */
    char why[256];     /* why not, for a rule that names a host */
    sg_errkind_t whyk; /* SG_E_INVALID: this server's configuration */
} proxy_;

static int write_file(const char *path, const char *text, sg_error_t **err)
{
    FILE *f = fopen(path, "we");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0)
        return sg_error_errno(err, errno, "cannot write %s", path);
    return 0;
}

/* The pid in the pid file, if that process is an haproxy; else 0. */
static pid_t running(const char *dir)
{
    cleanup_free char *pidfile = xasprintf("%s/pid", dir);
    FILE *f = fopen(pidfile, "re");
    long pid = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld", &pid) != 1 || pid <= 1)
        pid = 0;
    fclose(f);
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    f = pid ? fopen(path, "re") : NULL;
    if (f) {
        if (!fgets(comm, sizeof comm, f))
            comm[0] = 0;
        fclose(f);
    }
    return strncmp(comm, "haproxy", 7) == 0 ? (pid_t)pid : 0;
}

/* SIGUSR1 lets go of the ports at once (HAProxy's soft stop); the
 * connections still open are cut 0.5 s later.  (Not SIGTERM: a launcher's
 * child inherits it ignored.) */
/* HAProxy's -D process is the launcher's child (a subreaper,
 * common/proc.c): reaped here, or kill would find its zombie alive. */
static void stop(pid_t pid)
{
    if (pid <= 0 || kill(pid, SIGUSR1) < 0)
        return;
    for (int i = 0; i < 200 && waitpid(pid, NULL, WNOHANG) != pid && kill(pid, 0) == 0;
         i++) { /* at most 2 s */
        if (i == 50)
            kill(pid, SIGKILL);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static char *config(const egress_policy_t *p, const char *dir)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        abort();
    fprintf(f,
            "global\n\tlua-load %s/proxy.lua\n\tuid %d\n\tgid %d\n\tchroot %s/empty\n"
            "\tpidfile %s/pid\n\tnoreuseport\n\tlog stderr format short local0 warning\n"
            "\tstats socket %s/admin.sock mode 600 level admin\n"
            "defaults\n\tlog global\n\ttimeout connect 10s\n\ttimeout client 1h\n"
            "\ttimeout server 1h\n\ttimeout http-request 30s\n\ttimeout tunnel 1h\n"
            "resolvers sandboxes\n",
            dir, PROXY_UID, PROXY_UID, dir, dir, dir);
    for (size_t i = 0; i < p->ndns; i++) {
        fprintf(f, "\tnameserver dns%zu ", i);
        egress_put_addr(f, p->dns[i]);
        fputs(":53\n", f);
    }
    fputs("\taccepted_payload_size 8192\n\thold valid 10s\n\thold nx 1s\n"
          "\tresolve_retries 2\n\ttimeout resolve 1s\n\ttimeout retry 1s\n",
          f);
    fprintf(f,
            "frontend rules\n\tmode http\n\tbind unix@%s/rules.sock mode 600\n"
            "\thttp-request use-service lua.sg_rules\n",
            dir);
    /* Per sandbox, --egress-max-conns at once, as the table counts them. */
    const char *limit =
        p->max_conns ? "\ttcp-request connection track-sc0 src table per_source\n" : "";
    if (p->max_conns)
        fprintf(f, "backend per_source\n\tstick-table type ip size 64k store conn_cur\n");
#define NAME "{ var(txn.sg_verdict) -m str name }"
#define REFUSE "{ var(txn.sg_verdict) -m str refuse }"
#define RESOLVED "{ var(txn.sg_ip) -m found }"
    fprintf(f, "frontend tls\n\tmode tcp\n\tbind 0.0.0.0:%d\n%s", PROXY_TLS_PORT, limit);
    if (p->max_conns)
        fprintf(f, "\ttcp-request connection reject if { sc0_conn_cur gt %u }\n", p->max_conns);
    static const char tls[] =
        "\ttcp-request inspect-delay 10s\n"
        "\ttcp-request content reject unless { req.ssl_hello_type 1 }\n"
        "\ttcp-request content lua.sg_check tls\n"
        "\ttcp-request content reject if " REFUSE "\n"
        "\ttcp-request content do-resolve(txn.sg_ip,sandboxes,ipv4) var(txn.sg_name) if " NAME "\n"
        "\ttcp-request content lua.sg_unresolved if " NAME " !" RESOLVED "\n"
        "\ttcp-request content reject if " NAME " !" RESOLVED "\n"
        "\ttcp-request content set-dst var(txn.sg_ip) if " NAME "\n"
        /* A name with headers to set: opened (below), then encrypted again. */
        "\tuse_backend opened if { var(txn.sg_open) -m str 1 }\n"
        "\tdefault_backend out\n";
    fputs(tls, f);
    fprintf(f,
            "backend opened\n\tmode tcp\n\tserver o abns@sandgate-egress-opened send-proxy-v2\n"
            "frontend opened\n\tmode http\n\tbind abns@sandgate-egress-opened accept-proxy ssl "
            "crt-list %s/certs.list\n"
            "\thttp-request lua.sg_headers\n\tdefault_backend out_tls\n"
            "backend out_tls\n\tmode http\n\tserver s 0.0.0.0:0 ssl verify required ca-file %s "
            "sni ssl_fc_sni\n",
            dir, p->ca_file ? p->ca_file : "/etc/ssl/certs/ca-certificates.crt");
    fprintf(f, "frontend http\n\tmode http\n\tbind 0.0.0.0:%d\n%s", PROXY_HTTP_PORT, limit);
    if (p->max_conns)
        fprintf(f, "\ttcp-request connection reject if { sc0_conn_cur gt %u }\n", p->max_conns);
    static const char http[] =
        "\thttp-request lua.sg_check http\n"
        "\thttp-request return status 403 content-type text/plain lf-string \"sandgate: egress "
        "to %[var(txn.sg_name)] refused by %[var(txn.sg_rule)]\\n\" if " REFUSE "\n"
        "\thttp-request do-resolve(txn.sg_ip,sandboxes,ipv4) var(txn.sg_name) if " NAME "\n"
        "\thttp-request lua.sg_unresolved if " NAME " !" RESOLVED "\n"
        "\thttp-request return status 502 content-type text/plain lf-string \"sandgate: "
        "%[var(txn.sg_name)] does not resolve\\n\" if " NAME " !" RESOLVED "\n"
        "\thttp-request set-dst var(txn.sg_ip) if " NAME "\n"
        "\tdefault_backend out_http\n"
        /* 0.0.0.0:0: where the connection was going (SO_ORIGINAL_DST), or
         * set-dst's address, on the same port. */
        "backend out\n\tmode tcp\n\tserver s 0.0.0.0:0\n"
        "backend out_http\n\tmode http\n\tserver s 0.0.0.0:0\n";
    fputs(http, f);
#undef NAME
#undef REFUSE
#undef RESOLVED
    fclose(f);
    return buf;
}

int egress_proxy_start(const egress_policy_t *p, const char *state_dir, sg_error_t **err)
{
    free(proxy_.dir);
    free(proxy_.state);
    proxy_.state = xstrdup(state_dir);
    proxy_.dir = xasprintf("%s/egress-proxy", state_dir);
    stop(running(proxy_.dir)); /* an earlier start's */
    proxy_.pid = 0;
    const char *hap = egress_tool("haproxy");
    if (hap == NULL) {
        proxy_.whyk = SG_E_INVALID;
        snprintf(proxy_.why, sizeof proxy_.why,
                 "host names in egress rules need haproxy on this server (apt-get install "
                 "haproxy)");
        log_warn("egress: %s", proxy_.why);
        return 0;
    }
    if (p->ndns == 0) {
        proxy_.whyk = SG_E_INVALID;
        snprintf(proxy_.why, sizeof proxy_.why,
                 "host names in egress rules need --egress-dns (the resolvers both the "
                 "sandboxes and the egress proxy ask)");
        return 0;
    }
    cleanup_free char *hap_path = xstrdup(hap);
    cleanup_free char *empty = xasprintf("%s/empty", proxy_.dir);
    cleanup_free char *lua = xasprintf("%s/proxy.lua", proxy_.dir);
    cleanup_free char *cfg_path = xasprintf("%s/haproxy.cfg", proxy_.dir);
    cleanup_free char *cfg = config(p, proxy_.dir);
    if ((mkdir(proxy_.dir, 0700) < 0 && errno != EEXIST) || chmod(proxy_.dir, 0700) < 0 ||
        (mkdir(empty, 0755) < 0 && errno != EEXIST))
        return sg_error_errno(err, errno, "cannot create %s", proxy_.dir);
    if (write_file(lua, egress_proxy_lua, err) < 0 || write_file(cfg_path, cfg, err) < 0 ||
        egress_make_ca(proxy_.dir, err) < 0)
        return -1;
    const char *args[] = {"-D", "-f", cfg_path, NULL};
    cleanup_error sg_error_t *e = NULL;
    if (egress_run(&e, hap_path, args) < 0 || (proxy_.pid = running(proxy_.dir)) == 0) {
        proxy_.whyk = SG_E_UNAVAILABLE;
        snprintf(proxy_.why, sizeof proxy_.why, "the egress proxy did not start: %s",
                 e ? e->msg : "no pid file");
        log_warn("egress: %s", proxy_.why);
        return 0;
    }
    log_info("egress: the proxy for host names runs (haproxy, pid %d, ports %d and %d)",
             (int)proxy_.pid, PROXY_HTTP_PORT, PROXY_TLS_PORT);
    return 0;
}

void egress_proxy_stop(void)
{
    stop(proxy_.pid);
    proxy_.pid = 0;
    proxy_.whyk = SG_E_UNAVAILABLE;
    snprintf(proxy_.why, sizeof proxy_.why, "the egress proxy has stopped");
}

bool egress_proxy_up(sg_error_t **err)
{
    if (proxy_.pid > 0)
        return true;
    sg_error_set(err, proxy_.why[0] ? proxy_.whyk : SG_E_INVALID, "%s",
                 proxy_.why[0] ? proxy_.why : "this server runs no egress proxy");
    return false;
}

/* One request to the rules socket; its answer's status, or -1. */
int egress_proxy_say(const char *socket_name, const char *request, char *answer, size_t size)
{
    cleanup_free char *path = xasprintf("%s/%s", proxy_.dir, socket_name);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {2, 0};
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    size_t got = 0;
    int rc = -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        write(fd, request, strlen(request)) == (ssize_t)strlen(request)) {
        ssize_t r;
        while (got + 1 < size && (r = read(fd, answer + got, size - 1 - got)) > 0)
            got += (size_t)r;
        rc = 0;
    }
    close(fd);
    answer[got] = 0;
    return rc;
}

/* One HTTP request to the rules socket; its answer's status, or -1. */
static int ask(const char *method, const char *body, char *answer, size_t size)
{
    cleanup_free char *req =
        xasprintf("%s / HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s", method, strlen(body), body);
    int status;
    return egress_proxy_say("rules.sock", req, answer, size) == 0 &&
                   sscanf(answer, "HTTP/1.%*d %d", &status) == 1
               ? status
               : -1;
}

const char *egress_state_dir(void)
{
    return proxy_.state;
}

const char *egress_proxy_dir(void)
{
    return proxy_.dir;
}

int egress_proxy_rules(int n, const char *allow, const char *deny, const char *limit,
                       const char *headers, sg_error_t **err)
{
    if (!egress_proxy_up(err))
        return -1;
    uint32_t a = POOL_NET + (uint32_t)n * 4 + 2; /* the sandbox's end of its veth */
    char *body = xasprintf("%u.%u.%u.%u\nallow %s\ndeny %s\n%s%s%s", a >> 24, (a >> 16) & 255,
                           (a >> 8) & 255, a & 255, allow ? allow : "", deny ? deny : "",
                           limit ? "limit " : "", limit ? limit : "", limit ? "\n" : "");
    for (char *c = strchr(body, '\n'); c && *c; c++) /* the lists' commas: spaces */
        if (*c == ',')
            *c = ' ';
    if (headers && *headers) { /* secrets' values among them: wiped after */
        char *all = xasprintf("%s%s", body, headers);
        free(body);
        body = all;
    }
    char answer[512];
    int status = ask("POST", body, answer, sizeof answer);
    sodium_memzero(body, strlen(body));
    free(body);
    if (status != 204)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "the egress proxy did not take sandbox %d's rules (%d)", n, status);
    return 0;
}

json_t *egress_proxy_refused(void)
{
    char answer[65536];
    if (proxy_.pid <= 0 || ask("GET", "", answer, sizeof answer) != 200)
        return NULL;
    json_t *by_if = json_object();
    const char *body = strstr(answer, "\r\n\r\n");
    for (char *line = body ? (char *)body + 4 : NULL, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        /* "SRC RULE COUNT": the rule holds spaces, the others none */
        char *sp = strchr(line, ' '), *last = strrchr(line, ' ');
        unsigned a, b, c, d;
        if (!sp || last == sp || sscanf(line, "%u.%u.%u.%u ", &a, &b, &c, &d) != 4)
            continue;
        uint32_t addr = a << 24 | b << 16 | c << 8 | d;
        char ifname[32];
        snprintf(ifname, sizeof ifname, "sgh%u", (addr - POOL_NET) / 4);
        json_t *rules = json_object_get(by_if, ifname);
        if (!rules)
            json_object_set_new(by_if, ifname, rules = json_object());
        *last = 0;
        if (!strpbrk(sp + 1, "\"\\")) /* a metric's label: rules are checked entries */
            json_object_set_new(rules, sp + 1, json_integer(strtoll(last + 1, NULL, 10)));
    }
    return by_if;
}

char *egress_proxy_ca(void)
{
    if (proxy_.pid <= 0)
        return NULL;
    cleanup_free char *path = xasprintf("%s/ca.crt", proxy_.dir);
    FILE *f = fopen(path, "re");
    char *text = NULL;
    size_t len = 0;
    if (f && getdelim(&text, &len, 0, f) < 0) {
        free(text);
        text = NULL;
    }
    if (f)
        fclose(f);
    return text;
}
