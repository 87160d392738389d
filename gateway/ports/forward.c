/* forward: one HTTP request to a server in a sandbox, and its answer back.
 *
 *   wait for the sandbox to run (resuming it) -> connect (sandgate-init's
 *   "ok" line first) -> send the request -> read the answer's head ->
 *   answer the client with its status and headers -> stream the body
 *   until the server closes.
 *
 * Errors before the head came are answered 502 (nothing listens, the
 * sandbox went), 504 (no head within PORTS_HEAD_TIMEOUT_MS) or 501 (an
 * upgrade); after it, the stream is cut, as the server cut it.  The body
 * is read from the server no faster than the client takes it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/ports/internal.h"

#define READ_CHUNK 65536
#define PENDING_MAX (1u << 20) /* body bytes the client has not taken before reading stops */

typedef enum { F_WAIT, F_ACK, F_SEND, F_HEAD, F_BODY, F_END } phase_t;

struct fwd {
    ports_t *ports;
    fwd_t *next;
    char *sandbox, *owner; /* the sandbox's id and tenant, for the counts */
    char *kid;             /* the kernel observed while it is not running */
    bool observing;
    int port;
    phase_t phase;
    int fd;
    loop_io_t *io;
    bool ack; /* sandgate-init's line comes before the server's bytes */
    int timer;
    resp_t *resp;
    char *out; /* the request: head and body */
    size_t out_len, out_off;
    char *in; /* the answer's bytes until its head is complete */
    size_t in_len;
    int status;
    json_t *headers; /* [[name, value]...] of the answer */
    size_t body_at;  /* where the body starts in `in` */
    sg_error_t *err; /* the answer is this error */
    bool upgrade;    /* the server asked to upgrade the connection (501) */
    bool answered;   /* the response is queued */
};

static void on_io(loop_t *loop, int fd, unsigned events, void *arg);
static void on_kernel(kernel_t *k, kernel_event_t ev, const sg_error_t *kerr, void *arg);

/* The client should hear now: err (taken), or the head that came. */
static void settle(fwd_t *f, sg_error_t *err)
{
    if (err && !f->err)
        f->err = err;
    else
        sg_error_free(&err);
    loop_timer_end(f->ports->loop, f->timer);
    f->timer = -1;
    if (f->err) {
        loop_io_remove(f->ports->loop, &f->io);
        if (f->fd >= 0)
            close(f->fd);
        f->fd = -1;
        f->phase = F_END;
    }
    resp_ready(f->resp);
}

static void fail(fwd_t *f, sg_errkind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(fwd_t *f, sg_errkind_t kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    sg_error_t *err = NULL;
    sg_error_set(&err, kind, "%s", msg);
    free(msg);
    settle(f, err);
}

static void on_timeout(loop_t *loop, int timer_id, void *arg)
{
    fwd_t *f = arg;
    f->timer = -1;
    fail(f, SG_E_TIMEOUT, "the server on port %d of sandbox %s did not answer within %d s", f->port,
         f->sandbox, PORTS_HEAD_TIMEOUT_MS / 1000);
}

/* Headers the client sent that are the connection's, or sandgate's own
 * credentials: never passed on. */
static bool hop_header(const char *name, bool keyed)
{
    static const char *const hop[] = {"Connection",
                                      "Keep-Alive",
                                      "Proxy-Connection",
                                      "Proxy-Authorization",
                                      "TE",
                                      "Trailer",
                                      "Transfer-Encoding",
                                      "Upgrade",
                                      "Content-Length",
                                      "Expect",
                                      "X-API-Key",
                                      "X-Access-Token",
                                      "E2B-Traffic-Access-Token",
                                      "E2b-Sandbox-Id",
                                      "E2b-Sandbox-Port"};
    for (size_t i = 0; i < sizeof hop / sizeof *hop; i++)
        if (strcasecmp(name, hop[i]) == 0)
            return true;
    return keyed && strcasecmp(name, "Authorization") == 0;
}

typedef struct {
    char *buf;
    size_t len;
    bool keyed;
    char *host; /* the Host to send instead of the client's; NULL: the client's */
} head_t;

static void add_line(head_t *h, const char *name, const char *value)
{
    char *line = xasprintf("%s: %s\r\n", name, value);
    size_t n = strlen(line);
    h->buf = xrealloc(h->buf, h->len + n + 1);
    memcpy(h->buf + h->len, line, n + 1);
    h->len += n;
    free(line);
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                  const char *value)
{
    head_t *h = cls;
    if (hop_header(name, h->keyed) || strpbrk(name, "\r\n") || (value && strpbrk(value, "\r\n")) ||
        (h->host && strcasecmp(name, "Host") == 0))
        return MHD_YES;
    add_line(h, name, value ? value : "");
    return MHD_YES;
}

/* mask with each ${PORT} the port asked: a new string. */
static char *masked_host(const char *mask, int port)
{
    char *out = xstrdup("");
    for (const char *p = mask; *p;) {
        const char *at = strstr(p, "${PORT}");
        size_t n = at ? (size_t)(at - p) : strlen(p);
        char *next = at ? xasprintf("%s%.*s%d", out, (int)n, p, port) : xasprintf("%s%s", out, p);
        free(out);
        out = next;
        p += n + (at ? 7 : 0);
    }
    return out;
}

/* The request as the server gets it: HTTP/1.0, one request a connection. */
static void build_request(fwd_t *f, const http_req_t *req, const char *target)
{
    head_t h = {.buf = xasprintf("%s %s HTTP/1.0\r\n", req->method, target)};
    h.len = strlen(h.buf);
    /* A key sandgate checked is not the server's to see. */
    h.keyed = req->tenant != NULL &&
              MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Authorization") != NULL;
    const char *mask = NULL;
    kernel_t *k = kmgr_get(f->ports->kmgr, f->sandbox);
    if (k && f->ports->is_public)
        f->ports->is_public(f->ports->public_ctx, k, &mask);
    if (mask) {
        h.host = masked_host(mask, f->port);
        add_line(&h, "Host", h.host);
    }
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, add_header, &h);
    free(h.host);
    char tail[96];
    int n =
        snprintf(tail, sizeof tail, "Content-Length: %zu\r\nConnection: close\r\n\r\n", req->len);
    f->out_len = h.len + (size_t)n + req->len;
    f->out = xrealloc(h.buf, f->out_len);
    memcpy(f->out + h.len, tail, (size_t)n);
    memcpy(f->out + h.len + n, req->body, req->len);
}

/* Connects once the kernel runs; resumes a paused one and waits. */
static void start(fwd_t *f)
{
    kernel_t *k = kmgr_get(f->ports->kmgr, f->kid);
    sg_error_t *err = NULL;
    kernel_state_t st = k ? kernel_state(k) : KERNEL_DEAD;
    if (!k || st == KERNEL_DEAD) {
        fail(f, SG_E_UNAVAILABLE, "sandbox %s is not running (its kernel is %s)", f->sandbox,
             k ? "dead" : "gone");
        return;
    }
    if (st == KERNEL_PAUSED && kernel_resume(k, &err) < 0) {
        settle(f, err);
        return;
    }
    if (st != KERNEL_IDLE && st != KERNEL_BUSY) {
        if (!f->observing)
            kernel_observe(k, on_kernel, f);
        f->observing = true;
        return;
    }
    if (f->observing)
        kernel_unobserve(k, on_kernel, f);
    f->observing = false;
    f->fd = kernel_port_open(k, f->port, &f->ack, &err);
    if (f->fd < 0) {
        settle(f, err);
        return;
    }
    f->phase = f->ack ? F_ACK : F_SEND;
    f->io = loop_fd_add(f->ports->loop, f->fd, f->ack ? LOOP_READ : LOOP_WRITE, on_io, f, &err);
    if (!f->io)
        settle(f, err);
}

static void on_kernel(kernel_t *k, kernel_event_t ev, const sg_error_t *kerr, void *arg)
{
    fwd_t *f = arg;
    if (ev == KERNEL_EV_GONE || ev == KERNEL_EV_DEAD || ev == KERNEL_EV_NOT_RESUMED) {
        kernel_unobserve(k, on_kernel, f);
        f->observing = false;
        if (ev == KERNEL_EV_NOT_RESUMED)
            fail(f, kerr->kind, "%s", kerr->msg);
        else
            fail(f, SG_E_UNAVAILABLE, "sandbox %s ended before its port %d was reached", f->sandbox,
                 f->port);
    } else if (ev == KERNEL_EV_READY || ev == KERNEL_EV_PAUSED) {
        start(f);
    }
}

/* sandgate-init's answer: "ok\n", or "error WHY\n". */
static void read_ack(fwd_t *f)
{
    char line[256];
    ssize_t n = recv(f->fd, line, sizeof line - 1, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    char *nl = n > 0 ? memchr(line, '\n', (size_t)n) : NULL, taken[sizeof line];
    /* init's line is one send, before anything of the server's */
    if (!nl || recv(f->fd, taken, (size_t)(nl - line) + 1, 0) != nl - line + 1) {
        fail(f, SG_E_UNAVAILABLE, "sandbox %s did not answer for its port %d", f->sandbox, f->port);
        return;
    }
    *nl = '\0';
    if (strcmp(line, "ok") != 0) {
        bool refused = strstr(line, "refused") != NULL;
        fail(f, SG_E_UNAVAILABLE, "%s port %d of sandbox %s (%s)",
             refused ? "nothing listens on" : "cannot reach", f->port, f->sandbox,
             strncmp(line, "error ", 6) == 0 ? line + 6 : line);
        return;
    }
    f->phase = F_SEND;
    loop_fd_set_events(f->ports->loop, f->io, LOOP_READ | LOOP_WRITE, NULL);
}

static void send_request(fwd_t *f)
{
    ssize_t n = send(f->fd, f->out + f->out_off, f->out_len - f->out_off, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0) {
        fail(f, SG_E_UNAVAILABLE, "nothing listens on port %d of sandbox %s (%s)", f->port,
             f->sandbox, strerror(errno));
        return;
    }
    f->out_off += (size_t)n;
    if (f->out_off == f->out_len) {
        f->phase = F_HEAD;
        loop_fd_set_events(f->ports->loop, f->io, LOOP_READ, NULL);
    }
}

/* The head is in f->in: its status and headers, or false. */
static bool parse_head(fwd_t *f)
{
    char *line = f->in, *end = strstr(f->in, "\r\n");
    int minor;
    if (!end || sscanf(line, "HTTP/1.%d %3d", &minor, &f->status) != 2 || f->status < 200 ||
        f->status > 599)
        return false;
    f->headers = json_array();
    for (line = end + 2; (end = strstr(line, "\r\n")) && end != line; line = end + 2) {
        *end = '\0';
        char *colon = strchr(line, ':');
        if (!colon)
            return false;
        *colon = '\0';
        const char *value = colon + 1 + strspn(colon + 1, " \t");
        if (!hop_header(line, false))
            json_array_append_new(f->headers, json_pack("[ss]", line, value));
    }
    return true;
}

static void read_head(fwd_t *f)
{
    f->in = xrealloc(f->in, f->in_len + READ_CHUNK + 1);
    ssize_t n = recv(f->fd, f->in + f->in_len, READ_CHUNK, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        fail(f, SG_E_UNAVAILABLE,
             "the server on port %d of sandbox %s closed the connection "
             "without an answer",
             f->port, f->sandbox);
        return;
    }
    f->in_len += (size_t)n;
    f->in[f->in_len] = '\0';
    char *end = strstr(f->in, "\r\n\r\n");
    if (!end && f->in_len < PORTS_HEAD_MAX)
        return;
    if (!end) {
        fail(f, SG_E_UNAVAILABLE,
             "the server on port %d of sandbox %s sent a head of more "
             "than %d bytes",
             f->port, f->sandbox, PORTS_HEAD_MAX);
        return;
    }
    f->body_at = (size_t)(end + 4 - f->in);
    end[2] = '\0';
    if (strncmp(f->in, "HTTP/1.1 101", 12) == 0) {
        f->upgrade = true;
        fail(f, SG_E_CONFLICT,
             "the server on port %d of sandbox %s upgrades the connection "
             "(a WebSocket), which sandgate does not forward",
             f->port, f->sandbox);
        return;
    }
    if (!parse_head(f)) {
        fail(f, SG_E_UNAVAILABLE, "the server on port %d of sandbox %s did not answer HTTP",
             f->port, f->sandbox);
        return;
    }
    f->phase = F_BODY;
    loop_fd_set_events(f->ports->loop, f->io, 0, NULL); /* until the response is queued */
    settle(f, NULL);
}

static void drained(void *arg)
{
    fwd_t *f = arg;
    if (f->phase == F_BODY && f->io)
        loop_fd_set_events(f->ports->loop, f->io, LOOP_READ, NULL);
}

static void read_body(fwd_t *f)
{
    char buf[READ_CHUNK];
    ssize_t n = recv(f->fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) {
        resp_write(f->resp, buf, (size_t)n);
        if (resp_pending(f->resp) > PENDING_MAX) {
            loop_fd_set_events(f->ports->loop, f->io, 0, NULL);
            resp_on_drained(f->resp, drained, f);
        }
        return;
    }
    loop_io_remove(f->ports->loop, &f->io);
    close(f->fd);
    f->fd = -1;
    f->phase = F_END;
    if (n == 0)
        resp_end(f->resp);
    else
        resp_abort(f->resp);
}

static void on_io(loop_t *loop, int fd, unsigned events, void *arg)
{
    fwd_t *f = arg;
    if (f->phase == F_ACK)
        read_ack(f);
    else if (f->phase == F_SEND && (events & LOOP_WRITE))
        send_request(f);
    else if (f->phase == F_SEND || f->phase == F_HEAD)
        read_head(f); /* the server may answer before the whole body is sent */
    else if (f->phase == F_BODY)
        read_body(f);
}

fwd_t *fwd_new(ports_t *ports, http_req_t *req, kernel_t *k, int port, const char *target)
{
    fwd_t *f = xzalloc(sizeof *f);
    kernel_t *host = kernel_host(k) ? kernel_host(k) : k;
    f->ports = ports;
    f->sandbox = xstrdup(kernel_id(host));
    f->owner = xstrdup(kernel_owner(host) ? kernel_owner(host) : "");
    f->kid = xstrdup(kernel_id(k));
    f->port = port;
    f->fd = f->timer = -1;
    f->resp = resp_new(ports->loop, req->conn, ports->wake, ports->wake_arg);
    build_request(f, req, target);
    f->next = ports->fwds;
    ports->fwds = f;
    return f;
}

/* The answer's head, and its body as it comes. */
static enum MHD_Result answer(fwd_t *f, http_req_t *req)
{
    struct MHD_Response *r = resp_stream(f->resp, NULL);
    size_t i;
    json_t *h;
    json_array_foreach (f->headers, i, h)
        MHD_add_response_header(r, json_string_value(json_array_get(h, 0)),
                                json_string_value(json_array_get(h, 1)));
    enum MHD_Result ret = http_queue(req->conn, (unsigned)f->status, r);
    MHD_destroy_response(r);
    f->answered = true;
    if (f->in_len > f->body_at)
        resp_write(f->resp, f->in + f->body_at, f->in_len - f->body_at);
    free(f->in);
    f->in = NULL;
    f->in_len = 0;
    if (f->phase == F_BODY)
        loop_fd_set_events(f->ports->loop, f->io, LOOP_READ, NULL);
    return ret;
}

/* What went wrong, as a gateway says it: 502 (the server cannot be
 * reached), 504 (it did not answer in time), 501 (an upgrade), else the
 * error's own status (a quota that refused the sandbox's resume). */
static enum MHD_Result answer_error(fwd_t *f, http_req_t *req)
{
    sg_errkind_t kind = f->err->kind;
    unsigned st = f->upgrade ? 501 : kind == SG_E_TIMEOUT ? 504 : 502;
    enum MHD_Result ret =
        f->upgrade || kind == SG_E_TIMEOUT || kind == SG_E_UNAVAILABLE
            ? http_reply_json(req->conn, st,
                              json_pack("{s:i, s:s, s:s, s:i}", "code", st, "message", f->err->msg,
                                        "sandboxId", f->sandbox, "port", f->port))
            : http_reply_error(req->conn, f->err);
    sg_error_free(&f->err);
    f->answered = true;
    return ret;
}

enum MHD_Result fwd_handle(fwd_t *f, http_req_t *req)
{
    if (!f->err && f->headers && !f->answered)
        return answer(f, req);
    if (!f->err && f->phase == F_WAIT && f->timer < 0) {
        f->timer = loop_timer(f->ports->loop, PORTS_HEAD_TIMEOUT_MS, 1, on_timeout, f);
        start(f); /* may fail at once */
    }
    return f->err ? answer_error(f, req) : resp_wait(f->resp);
}

void fwd_free(fwd_t *f)
{
    if (!f)
        return;
    for (fwd_t **pp = &f->ports->fwds; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    kernel_t *k = f->observing ? kmgr_get(f->ports->kmgr, f->kid) : NULL;
    if (k)
        kernel_unobserve(k, on_kernel, f);
    loop_timer_end(f->ports->loop, f->timer);
    loop_io_remove(f->ports->loop, &f->io);
    if (f->fd >= 0)
        close(f->fd);
    resp_set_gone(f->resp);
    resp_free(&f->resp);
    sg_error_free(&f->err);
    json_decref(f->headers);
    free(f->in);
    free(f->out);
    free(f->sandbox);
    free(f->owner);
    free(f->kid);
    free(f);
}

unsigned fwd_count_sandbox(const ports_t *ports, const kernel_t *k)
{
    const kernel_t *host = kernel_host(k) ? kernel_host(k) : k;
    unsigned n = 0;
    for (const fwd_t *f = ports->fwds; f; f = f->next)
        n += f->phase != F_END && strcmp(f->sandbox, kernel_id(host)) == 0;
    return n;
}

long long fwd_count_owner(void *ports, const char *owner)
{
    long long n = 0;
    for (const fwd_t *f = ((ports_t *)ports)->fwds; f; f = f->next)
        n += f->phase != F_END && strcmp(f->owner, owner) == 0;
    return n;
}
