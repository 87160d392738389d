/* libFuzzer harness for everything sandgate parses from an HTTP client: the
 * request line, headers and paths (libmicrohttpd and http.c), the token
 * check, routing, and the JSON bodies of the E2B API (gateway/rest/rest.c), the Jupyter
 * API (jupyter.c) and MCP's JSON-RPC (mcp.c).
 *
 * The real stack runs in-process on its event loop, listening on loopback;
 * each input is sent over a fresh TCP connection and the loop runs until the
 * server has answered and closed (or a deadline passes).  The kernel manager
 * runs in --sandbox=none mode with --max-kernels 0: no kernel can start, so
 * inputs exercise parsing and error paths, never Python.
 *
 * Input: one byte choosing a template, then the rest.
 *   0        the rest is the raw request bytes
 *   1..N     the rest is the body of a well-formed request to a route
 *            (POST /mcp in an MCP session, POST /execute, POST /contexts,
 *            POST /api/kernels, POST /api/sessions, PUT a file, PATCH a
 *            Jupyter session), with the token, so the fuzzer spends its
 *            time on the JSON the route decodes
 * Properties beyond "no crash, no leak, no UB": every request gets an HTTP
 * response that starts with "HTTP/1.1 " and a status 200-599.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "gateway/http/http.h"
#include "gateway/jupyter/jupyter.h"
#include "gateway/mcp/mcp.h"
#include "gateway/rest/rest.h"
#include "gateway/session/pyscript.h"
#include "kernelmgr/manager/manager.h"

#define TOKEN "fuzz-token-0123456789abcdef"
#define DEADLINE_MS 10000  /* a well-formed request's answer (generous: a loaded machine) */
#define RAW_DEADLINE_MS 10 /* raw bytes are mostly not a whole request: do not wait long */

static loop_t *loop;
static http_server_t *http;
static int port;
static char session[37]; /* an MCP session made at start-up */

typedef struct {
    int fd;
    char *got;
    size_t len;
    bool closed;
} client_t;

/* Runs the loop for ms, or until *done. */
static void run_for(int ms, const bool *done)
{
    int64_t end = zclock_mono() + ms;
    for (int64_t left = ms; left > 0 && !(done && *done); left = end - zclock_mono())
        loop_once(loop, (int)left, NULL);
}

static void on_client(loop_t *l, int fd, unsigned events, void *arg)
{
    client_t *c = arg;
    char buf[65536];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n > 0) {
        if (c->len < 4096) { /* the status line is all the check needs */
            size_t keep = c->len + (size_t)n > 4096 ? 4096 - c->len : (size_t)n;
            c->got = xrealloc(c->got, c->len + keep + 1);
            memcpy(c->got + c->len, buf, keep);
            c->len += keep;
            c->got[c->len] = 0;
        }
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    c->closed = true; /* by the server */
}

/* Sends bytes and runs the loop until the server closed the connection or
 * the deadline passed; half_close ends our side once everything is sent.
 * Returns what came back (NUL-terminated, owned). */
static char *exchange(const void *data, size_t size, bool half_close, size_t *got_len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Non-blocking: libFuzzer's timer signals would interrupt a blocking one. */
    int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t len = sizeof soerr;
        while ((rc = poll(&p, 1, DEADLINE_MS)) < 0 && errno == EINTR)
            ;
        if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
            rc = 0;
        else {
            errno = soerr ? soerr : ETIMEDOUT;
            rc = -1;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "fuzz_http: cannot connect: %s\n", strerror(errno));
        abort();
    }
    client_t c = {.fd = fd};
    loop_io_t *io = loop_fd_add(loop, fd, LOOP_READ, on_client, &c, NULL);
    size_t off = 0;
    int64_t end = zclock_mono() + DEADLINE_MS;
    while (off < size && zclock_mono() < end) { /* the server reads as the loop runs */
        ssize_t w = write(fd, (const char *)data + off, size - off);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            break; /* the server closed early */
        if (w > 0)
            off += (size_t)w;
        if (off < size)
            run_for(5, &c.closed);
    }
    if (half_close)
        shutdown(fd, SHUT_WR);
    /* Until the server closes (on_client) or the deadline. */
    run_for(half_close ? RAW_DEADLINE_MS : DEADLINE_MS, &c.closed);
    loop_io_remove(loop, &io);
    close(fd);
    /* Let libmicrohttpd notice the close and run the completion callbacks. */
    run_for(2, NULL);
    *got_len = c.len;
    return c.got ? c.got : xstrdup("");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    zsys_init();
    zsys_handler_set(NULL);
    sg_log_set_level(SG_LOG_ERROR);
    loop = loop_new();
    char tmpl[] = "/tmp/sg-fuzz-http-XXXXXX";
    char *dir = mkdtemp(tmpl);
    static kmgr_config_t kc;
    kmgr_config_defaults(&kc);
    kc.state_dir = xstrdup(dir);
    kc.sandbox.mode = SANDBOX_NONE;
    kc.pool_size = 0;
    kc.max_kernels = 0;
    sg_error_t *err = NULL;
    kmgr_t *kmgr;
    http_config_t hc;
    http_config_defaults(&hc);
    hc.port = 0;
    hc.token = TOKEN;
    hc.max_body = 65536;
    hc.max_conns_ip = 1000;
    /* A request cut short and then half-closed is not noticed by libmicrohttpd
     * under edge-triggered epoll until the connection times out (like an idle
     * client; docs/security.md): reap those quickly, or the harness runs out
     * of connections after ~10 000 inputs. */
    hc.conn_timeout_s = 2;
    if (proc_init(loop, &err) < 0 || pyscript_load(&err) < 0 ||
        !(kmgr = kmgr_new(loop, &kc, &err)) || !(http = http_server_new(loop, &hc, &err))) {
        fprintf(stderr, "fuzz_http: %s\n", err->msg);
        abort();
    }
    port = http_server_port(http);
    static exec_policy_t policy;
    exec_policy_defaults(&policy);
    api_config_t ac;
    api_config_defaults(&ac);
    ac.exec = &policy;
    channels_config_t cc;
    channels_config_defaults(&cc);
    cc.exec = &policy;
    mcp_config_t mc;
    mcp_config_defaults(&mc);
    mc.exec = &policy;
    mc.state_dir = kc.state_dir;
    mc.max_sessions = 64;
    if (api_register(api_new(loop, kmgr, &ac, http_server_wake, http), http, &err) < 0 ||
        jupyter_register(jupyter_new(loop, kmgr, &cc, http_server_wake, http), http, &err) < 0 ||
        mcp_register(mcp_new(loop, kmgr, &mc, http_server_wake, http), http, &err) < 0) {
        fprintf(stderr, "fuzz_http: %s\n", err->msg);
        abort();
    }
    /* One MCP session, so template 1 reaches the methods. */
    static const char body[] =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
        "\"x\"}}";
    char *init = xasprintf("POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                           "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                           sizeof body - 1, body);
    size_t n;
    char *got = exchange(init, strlen(init), false, &n);
    free(init);
    char *h = strcasestr(got, "Mcp-Session-Id: ");
    if (!h) {
        fprintf(stderr, "fuzz_http: no MCP session: %.300s\n", got);
        abort();
    }
    memcpy(session, h + 16, 36);
    free(got);
    return 0;
}

static const char *const routes[] = {
    "POST /mcp HTTP/1.1\r\nMcp-Session-Id: %s\r\nAccept: application/json, text/event-stream",
    "POST /mcp HTTP/1.1\r\nMcp-Session-Id: %s\r\nAccept: application/json",
    "POST /execute HTTP/1.1\r\nX-Session: %s",
    "POST /contexts HTTP/1.1\r\nX-Session: %s",
    "POST /api/kernels HTTP/1.1\r\nX-Session: %s",
    "POST /api/sessions HTTP/1.1\r\nX-Session: %s",
    "PATCH /api/sessions/%s HTTP/1.1",
    "PUT /contexts/%s/files/a/b.txt HTTP/1.1",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned pick = data[0] % (1 + sizeof routes / sizeof routes[0]);
    data++;
    size--;
    char *req;
    size_t len;
    if (pick == 0) {
        req = xmemdup(data, size);
        len = size;
    } else {
        char line[256];
        snprintf(line, sizeof line, routes[pick - 1], session);
        char *head = xasprintf("%s\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                               "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                               "Content-Length: %zu\r\n\r\n",
                               line, size);
        len = strlen(head) + size;
        req = xmalloc(len);
        memcpy(req, head, strlen(head));
        memcpy(req + strlen(head), data, size);
        free(head);
    }
    size_t n;
    char *got = exchange(req, len, pick == 0, &n);
    /* Every well-formed request gets an answer. */
    if (pick != 0) {
        int status = 0;
        if (strncmp(got, "HTTP/1.1 ", 9) != 0 || sscanf(got + 9, "%d", &status) != 1 ||
            status < 200 || status > 599) {
            fprintf(stderr, "fuzz_http: %s: %.200s\n", n ? "bad answer" : "no answer in 10 s", got);
            abort();
        }
    }
    free(got);
    free(req);
    return 0;
}
