#include "gateway/http.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/audit.h"
#include "gateway/metrics.h"

typedef struct {
    char *pattern;
    size_t len;
    unsigned flags; /* HTTP_ROUTE_* */
    const http_handler_t *h;
    void *ctx;
} route_t;

struct http_server {
    struct MHD_Daemon *mhd;
    loop_t *loop;
    int timer_id; /* libmicrohttpd's next run: its next timeout, 1 s at most */
    int port;
    loop_io_t *io;
    bool pending; /* libmicrohttpd has work: run it before the next wait */
    http_config_t cfg;
    unsigned char token_hash[crypto_generichash_BYTES]; /* compared, never the token */
    route_t **routes; /* in registration order; each its own allocation, so
                         a request's pointer survives the array growing */
    size_t nroutes;
};

/* Per-request state between libmicrohttpd's calls. */
typedef struct {
    char *body;
    size_t len;
    bool too_big;
    const route_t *route; /* NULL: no route takes the URL */
    void *state;          /* the route's handler's, between its calls */
    void *sink;           /* a body the handler takes as it arrives (uploads) */
    int64_t started;
    char *method, *path; /* for the audit log's refusals; NULL without one */
} request_t;

void http_config_defaults(http_config_t *cfg)
{
    *cfg = (http_config_t){.host = "127.0.0.1",
                           .port = 49999,
                           .token = NULL,
                           .max_body = 1 << 20,
                           .max_conns = 1024,
                           .max_conns_ip = 0,
                           .conn_timeout_s = 300};
}

enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r)
{
    if (*replica_id())
        MHD_add_response_header(r, "X-Sandgate-Replica", replica_id());
    return MHD_queue_response(conn, status, r);
}

enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text == NULL) { /* a programmer's error: a string that is not UTF-8 */
        log_error("http: a %u response could not be encoded as JSON", status);
        status = 500;
        text =
            xstrdup("{\"error\":\"internal\",\"message\":\"the response could not be encoded\"}");
    }
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len] = '\n';
    struct MHD_Response *r = MHD_create_response_from_buffer(len + 1, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err)
{
    char *msg = xstrdup(err->msg); /* it may quote a URL or header: bytes, not text */
    utf8_scrub(msg);
    enum MHD_Result r = http_reply_json(
        conn, sg_error_http_status(err->kind),
        json_pack("{s:s, s:s}", "error", sg_error_kind_name(err->kind), "message", msg));
    free(msg);
    return r;
}

enum MHD_Result http_reply_errorf(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt,
                                  ...)
{
    sg_error_t e = {.kind = kind};
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&e.msg, fmt, ap) < 0)
        abort();
    va_end(ap);
    enum MHD_Result r = http_reply_error(conn, &e);
    free(e.msg);
    return r;
}

/* The token may come as "Authorization: Bearer T" or "token T", in the
 * headers the E2B SDK sends, or as ?token=T (browsers cannot set headers on
 * a WebSocket; Jupyter clients send it so). */
static bool authorized(http_server_t *self, struct MHD_Connection *conn)
{
    if (self->cfg.token == NULL)
        return true;
    const char *given = NULL;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
        given = auth + 7;
    else if (auth && strncasecmp(auth, "token ", 6) == 0)
        given = auth + 6;
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token");
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    if (!given)
        return false;
    /* Hash first: the comparison then takes the same time whatever the length. */
    unsigned char h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof h, (const unsigned char *)given, strlen(given), NULL, 0);
    return sodium_memcmp(h, self->token_hash, sizeof h) == 0;
}

static bool route_matches(const route_t *r, const char *path)
{
    return r->flags & HTTP_ROUTE_PREFIX ? strncmp(path, r->pattern, r->len) == 0
                                        : strcmp(path, r->pattern) == 0;
}

static const route_t *route_find(const http_server_t *self, const char *path)
{
    for (size_t i = 0; i < self->nroutes; i++)
        if (route_matches(self->routes[i], path))
            return self->routes[i];
    return NULL;
}

int http_route_add(http_server_t *self, const char *pattern, unsigned flags,
                   const http_handler_t *h, void *ctx, sg_error_t **err)
{
    size_t len = strlen(pattern);
    bool prefix = flags & HTTP_ROUTE_PREFIX;
    if (pattern[0] != '/' || (prefix && pattern[len - 1] != '/')) {
        sg_error_set(err, SG_E_INVALID, "route '%s': a path starts with '/'; a prefix ends with it",
                     pattern);
        return -1;
    }
    if (h->handle == NULL ||
        (h->sink_open && !(h->sink_write && h->sink_finish && h->sink_abort))) {
        sg_error_set(err, SG_E_INVALID, "route '%s': incomplete handler", pattern);
        return -1;
    }
    for (size_t i = 0; i < self->nroutes; i++) {
        const route_t *r = self->routes[i];
        /* Every path the new route matches starts with pattern, which is one
         * of them: an earlier prefix that takes pattern takes them all; an
         * earlier exact route that takes it takes all an exact one would. */
        if (((r->flags & HTTP_ROUTE_PREFIX) || !prefix) && route_matches(r, pattern)) {
            sg_error_set(err, SG_E_INVALID, "route '%s%s' is covered by route '%s%s'", pattern,
                         prefix ? "*" : "", r->pattern, r->flags & HTTP_ROUTE_PREFIX ? "*" : "");
            return -1;
        }
    }
    route_t *r = xmalloc(sizeof *r);
    *r = (route_t){.pattern = xstrdup(pattern), .len = len, .flags = flags, .h = h, .ctx = ctx};
    self->routes = xrealloc(self->routes, (self->nroutes + 1) * sizeof *self->routes);
    self->routes[self->nroutes++] = r;
    return 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls)
{
    http_server_t *self = cls;
    request_t *req = *req_cls;
    if (req == NULL) { /* headers only so far */
        req = xzalloc(sizeof(request_t));
        req->started = zclock_mono();
        req->route = route_find(self, url);
        if (audit_enabled()) {
            req->method = xstrdup(method);
            /* libmicrohttpd gives the path without its query; cut anyway:
             * a ?token= must never reach the audit log. */
            req->path = xstrndup(url, strcspn(url, "?"));
            utf8_scrub(req->method);
            utf8_scrub(req->path);
        }
        *req_cls = req;
        const route_t *r = req->route;
        if (r && r->h->sink_open && ((r->flags & HTTP_ROUTE_PUBLIC) || authorized(self, conn)))
            req->sink = r->h->sink_open(r->ctx, method, url);
        return MHD_YES;
    }
    const route_t *r = req->route;
    if (*upload_size && req->sink) {
        r->h->sink_write(r->ctx, req->sink, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->sink) /* the body is in (or, suspended by sink_finish, resumed) */
        return r->h->sink_finish(r->ctx, conn, &req->sink);
    if (*upload_size) {
        if (!req->too_big && req->len + *upload_size <= self->cfg.max_body) {
            req->body = xrealloc(req->body, req->len + *upload_size + 1);
            memcpy(req->body + req->len, upload_data, *upload_size);
            req->len += *upload_size;
            req->body[req->len] = 0;
        } else {
            req->too_big = true; /* keep reading, discard, answer 413 at the end */
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->state) /* a suspended request resumed */
        return r->h->handle(r->ctx, conn, method, url, "", 0, &req->state);
    bool public_route = r && (r->flags & HTTP_ROUTE_PUBLIC);
    if (!public_route && !authorized(self, conn)) {
        metrics.auth_failures++;
        return http_reply_errorf(conn, SG_E_AUTH,
                                 "missing or wrong token (send 'Authorization: Bearer <token>')");
    }
    if (req->too_big)
        return http_reply_errorf(conn, SG_E_LIMIT, "request body larger than %zu bytes",
                                 self->cfg.max_body);
    if (r == NULL)
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s %s", method, url);
    return r->h->handle(r->ctx, conn, method, url, req->body ? req->body : "", req->len,
                        &req->state);
}

static void completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                      enum MHD_RequestTerminationCode code)
{
    request_t *req = *req_cls;
    if (req == NULL)
        return;
    const route_t *r = req->route;
    if (req->state && r->h->done)
        r->h->done(r->ctx, req->state, code == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (req->sink)
        r->h->sink_abort(r->ctx, req->sink);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    if (info && info->http_status >= 100 && info->http_status < 600)
        metrics.http_status[info->http_status]++;
    if (info && req->path) {
        unsigned st = info->http_status;
        if (st == 401 || st == 403 || st == 413 || st == 429) {
            /* Refused: who and where, never a header or the query. */
            audit_who_t who;
            audit_who_conn(&who, NULL, conn);
            audit_event(&who, "refused",
                        json_pack("{s:i, s:s, s:s}", "status", (int)st, "method", req->method,
                                  "path", req->path));
        }
    }
    histogram_observe(&metrics.http_seconds, (double)(zclock_mono() - req->started) / 1000.0);
    if (code != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_debug("http: request ended early (code %d)", (int)code);
    /* A client that half-closed after its request (its FIN came with the
     * request's bytes) gets no further event under edge-triggered epoll, and
     * libmicrohttpd would keep the connection until --connection-timeout.
     * Shutting it down here wakes libmicrohttpd to close it. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char peek;
    if (code == MHD_REQUEST_TERMINATED_COMPLETED_OK && ci &&
        recv(ci->connect_fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        shutdown(ci->connect_fd, SHUT_RDWR);
    free(req->body);
    free(req->method);
    free(req->path);
    free(req);
    *req_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    /* A client that leaves mid-response (a stream it stopped reading) is
     * the normal course, and the execution's end says what became of it. */
    if (strstr(line, "no longer available") || strstr(line, "reset by peer") ||
        strstr(line, "Broken pipe"))
        log_info("http: %s", line);
    else
        log_warn("http: %s", line);
}

/* libmicrohttpd runs from the loop's hook, before each wait, when there is
 * something for it: its epoll fd was readable, a connection was resumed
 * (http_server_wake), or one of its timeouts came.  It runs again at once
 * while it says it has more (MHD_get_timeout 0): with edge-triggered
 * sockets it will not make its own fd readable for work it already knows
 * about.  Several wake-ups in one pass cost one run.  It also runs at
 * least once a second: a connection it closed (its timeout, a per-address
 * limit) is only released — and stops counting against the limits — on a
 * later run, which nothing else would cause. */
#define MHD_RUNS_PER_PASS 8
#define MHD_MAX_IDLE_MS 1000

static void on_mhd_timeout(loop_t *loop, int timer_id, void *arg)
{
    http_server_t *self = arg;
    self->timer_id = -1;
    self->pending = true;
}

static bool run_mhd(loop_t *loop, void *arg)
{
    http_server_t *self = arg;
    if (!self->pending)
        return false;
    MHD_UNSIGNED_LONG_LONG to = 0;
    bool timeout = false;
    for (int i = 0; i < MHD_RUNS_PER_PASS && self->pending; i++) {
        self->pending = false;
        MHD_run(self->mhd);
        timeout = MHD_get_timeout(self->mhd, &to) == MHD_YES;
        if (timeout && to == 0)
            self->pending = true;
    }
    loop_timer_end(loop, self->timer_id);
    int64_t next = timeout && to < MHD_MAX_IDLE_MS ? (int64_t)to : MHD_MAX_IDLE_MS;
    self->timer_id = loop_timer(loop, next, 1, on_mhd_timeout, self);
    return self->pending;
}

static void on_readable(loop_t *loop, int fd, unsigned events, void *arg)
{
    http_server_t *self = arg;
    self->pending = true;
}

http_server_t *http_server_new(loop_t *loop, const http_config_t *cfg, sg_error_t **err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        sg_error_set(err, SG_E_INVALID, "listen address '%s' is not an IPv4 address", cfg->host);
        return NULL;
    }
    http_server_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->cfg = *cfg;
    self->timer_id = -1;
    if (cfg->token)
        crypto_generichash(self->token_hash, sizeof self->token_hash,
                           (const unsigned char *)cfg->token, strlen(cfg->token), NULL, 0);
    self->mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG,
        (uint16_t)cfg->port, NULL, NULL, handle, self, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, self,
        MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, completed, self,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        cfg->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        cfg->max_conns_ip ? cfg->max_conns_ip : (cfg->max_conns + 3) / 4, MHD_OPTION_END);
    if (self->mhd == NULL) {
        sg_error_set(err, SG_E_UNAVAILABLE, "cannot listen on %s:%d (in use or not permitted)",
                     cfg->host, cfg->port);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    self->io = loop_fd_add(loop, info->epoll_fd, LOOP_READ, on_readable, self, err);
    if (self->io == NULL) {
        MHD_stop_daemon(self->mhd);
        free(self);
        return NULL;
    }
    loop_hook_add(loop, run_mhd, self);
    self->pending = true;
    info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : cfg->port;
    return self;
}

void http_server_wake(void *arg)
{
    http_server_t *self = arg;
    self->pending = true;
}

void http_server_destroy(http_server_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    http_server_t *self = *self_p;
    loop_io_remove(self->loop, &self->io);
    loop_hook_remove(self->loop, run_mhd, self);
    loop_timer_end(self->loop, self->timer_id);
    MHD_stop_daemon(self->mhd); /* its last completion callbacks use the routes */
    for (size_t i = 0; i < self->nroutes; i++) {
        free(self->routes[i]->pattern);
        free(self->routes[i]);
    }
    free(self->routes);
    free(self);
    *self_p = NULL;
}

int http_server_port(const http_server_t *self)
{
    return self->port;
}
