#include "gateway/http.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/api.h"
#include "gateway/jupyter.h"
#include "gateway/mcp.h"
#include "gateway/metrics.h"

struct http_server {
    struct MHD_Daemon *mhd;
    loop_t *loop;
    int timer_id; /* libmicrohttpd's next timeout; -1: none */
    int port;
    loop_io_t *io;
    bool pending; /* libmicrohttpd has work: run it before the next wait */
    http_config_t cfg;
    unsigned char token_hash[crypto_generichash_BYTES]; /* compared, never the token */
    api_t *api;
    jupyter_t *jupyter;
    mcp_t *mcp;
};

/* Per-request state between libmicrohttpd's calls. */
typedef struct {
    char *body;
    size_t len;
    bool too_big;
    void *api_state;
    enum { OWNER_API, OWNER_JUPYTER, OWNER_MCP } owner; /* whose api_state it is */
    api_sink_t *sink; /* a body the API takes as it arrives (uploads) */
    int64_t started;
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
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
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

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls)
{
    http_server_t *self = cls;
    request_t *req = *req_cls;
    if (req == NULL) { /* headers only so far */
        req = xzalloc(sizeof(request_t));
        req->started = zclock_mono();
        *req_cls = req;
        if (strcmp(method, "PUT") == 0 && authorized(self, conn))
            req->sink = api_sink_open(self->api, url);
        return MHD_YES;
    }
    if (*upload_size && req->sink) {
        api_sink_write(req->sink, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->sink) {
        api_sink_t *sink = req->sink;
        req->sink = NULL;
        return api_sink_finish(self->api, conn, sink);
    }
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
    if (req->api_state) { /* a suspended request resumed */
        switch (req->owner) {
        case OWNER_JUPYTER:
            return jupyter_handle(self->jupyter, conn, method, url, "", 0, &req->api_state);
        case OWNER_MCP: return mcp_handle(self->mcp, conn, method, url, "", 0, &req->api_state);
        case OWNER_API: break;
        }
        return api_handle(self->api, conn, method, url, "", 0, &req->api_state);
    }
    bool public_route = strcmp(url, "/health") == 0;
    if (!public_route && !authorized(self, conn)) {
        metrics.auth_failures++;
        return http_reply_errorf(conn, SG_E_AUTH,
                                 "missing or wrong token (send 'Authorization: Bearer <token>')");
    }
    if (req->too_big)
        return http_reply_errorf(conn, SG_E_LIMIT, "request body larger than %zu bytes",
                                 self->cfg.max_body);
    if (self->mcp && mcp_route(url)) {
        req->owner = OWNER_MCP;
        return mcp_handle(self->mcp, conn, method, url, req->body ? req->body : "", req->len,
                          &req->api_state);
    }
    if (self->jupyter && jupyter_route(url)) {
        req->owner = OWNER_JUPYTER;
        return jupyter_handle(self->jupyter, conn, method, url, req->body ? req->body : "",
                              req->len, &req->api_state);
    }
    return api_handle(self->api, conn, method, url, req->body ? req->body : "", req->len,
                      &req->api_state);
}

static void completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                      enum MHD_RequestTerminationCode code)
{
    http_server_t *self = cls;
    request_t *req = *req_cls;
    if (req == NULL)
        return;
    if (req->api_state && req->owner == OWNER_JUPYTER)
        jupyter_request_done(self->jupyter, req->api_state);
    else if (req->api_state && req->owner == OWNER_MCP)
        mcp_request_done(self->mcp, req->api_state);
    else if (req->api_state)
        api_request_done(self->api, req->api_state, code == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (req->sink)
        api_sink_abort(req->sink);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    if (info && info->http_status >= 100 && info->http_status < 600)
        metrics.http_status[info->http_status]++;
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
    free(req);
    *req_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    log_warn("http: %s", line);
}

/* libmicrohttpd runs from the loop's hook, before each wait, when there is
 * something for it: its epoll fd was readable, a connection was resumed
 * (http_server_wake), or one of its timeouts came.  It runs again at once
 * while it says it has more (MHD_get_timeout 0): with edge-triggered
 * sockets it will not make its own fd readable for work it already knows
 * about.  Several wake-ups in one pass cost one run. */
#define MHD_RUNS_PER_PASS 8

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
    self->timer_id = -1;
    if (timeout && to > 0)
        self->timer_id =
            loop_timer(loop, to < 86400000 ? (int64_t)to : 86400000, 1, on_mhd_timeout, self);
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

void http_server_set_api(http_server_t *self, api_t *api)
{
    self->api = api;
    api_set_waker(api, http_server_wake, self);
}

void http_server_set_jupyter(http_server_t *self, struct jupyter *jupyter)
{
    self->jupyter = jupyter;
}

void http_server_set_mcp(http_server_t *self, struct mcp *mcp)
{
    self->mcp = mcp;
}

void http_server_destroy(http_server_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    http_server_t *self = *self_p;
    loop_io_remove(self->loop, &self->io);
    loop_hook_remove(self->loop, run_mhd, self);
    loop_timer_end(self->loop, self->timer_id);
    MHD_stop_daemon(self->mhd);
    free(self);
    *self_p = NULL;
}

int http_server_port(const http_server_t *self)
{
    return self->port;
}
