#include "gateway/http.h"

#include <arpa/inet.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "config.h"

struct http_server {
    struct MHD_Daemon *mhd;
    zloop_t *loop;
    int timer_id;
    int port;
    zmq_pollitem_t item;
    kmgr_t *kmgr;
};

void http_server_set_kmgr(http_server_t *self, kmgr_t *kmgr)
{
    self->kmgr = kmgr;
}

enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    size_t len = strlen(text);
    text[len] = '\n';
    struct MHD_Response *r = MHD_create_response_from_buffer(len + 1, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err)
{
    return http_reply_json(
        conn, sg_error_http_status(err->kind),
        json_pack("{s:s, s:s}", "error", sg_error_kind_name(err->kind), "message", err->msg));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls)
{
    /* The first call only announces the request; answer on the second. */
    if (*req_cls == NULL) {
        *req_cls = conn;
        return MHD_YES;
    }
    if (*upload_size) { /* no route takes a body yet: discard it */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/health") == 0) {
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
            return http_reply_json(conn, 405,
                                   json_pack("{s:s, s:s}", "error", "method_not_allowed", "message",
                                             "use GET /health"));
        http_server_t *self = cls;
        json_t *body = json_pack("{s:s, s:s}", "status", "ok", "version", PACKAGE_VERSION);
        if (self->kmgr) {
            kmgr_stats_t st;
            kmgr_stats(self->kmgr, &st);
            json_object_set_new(
                body, "kernels",
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "sessions", (json_int_t)st.sessions,
                          "starting", (json_int_t)st.starting, "idle", (json_int_t)st.idle, "busy",
                          (json_int_t)st.busy, "pool_ready", (json_int_t)st.pool_ready,
                          "pool_starting", (json_int_t)st.pool_starting));
        }
        return http_reply_json(conn, 200, body);
    }
    sg_error_t e = {SG_E_NOTFOUND, 0, NULL};
    e.msg = xasprintf("no route for %s %s", method, url);
    enum MHD_Result r = http_reply_error(conn, &e);
    free(e.msg);
    return r;
}

static void log_request(void *cls, struct MHD_Connection *conn, void **req_cls,
                        enum MHD_RequestTerminationCode code)
{
    if (code != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_debug("http: request ended early (code %d)", (int)code);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    log_warn("http: %s", line);
}

static int on_readable(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    http_server_t *self = arg;
    MHD_run(self->mhd);
    return 0;
}

static int on_tick(zloop_t *loop, int timer_id, void *arg)
{
    http_server_t *self = arg;
    MHD_run(self->mhd);
    return 0;
}

http_server_t *http_server_new(zloop_t *loop, const char *host, int port, sg_error_t **err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        sg_error_set(err, SG_E_INVALID, "listen address '%s' is not an IPv4 address", host);
        return NULL;
    }
    http_server_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                                 (uint16_t)port, NULL, NULL, handle, self,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, self, MHD_OPTION_SOCK_ADDR,
                                 &sa, MHD_OPTION_NOTIFY_COMPLETED, log_request, self,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
    if (self->mhd == NULL) {
        sg_error_set(err, SG_E_UNAVAILABLE, "cannot listen on %s:%d (in use or not permitted)",
                     host, port);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    self->item = (zmq_pollitem_t){.fd = info->epoll_fd, .events = ZMQ_POLLIN};
    zloop_poller(loop, &self->item, on_readable, self);
    self->timer_id = zloop_timer(loop, 1000, 0, on_tick, self);
    info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : port;
    return self;
}

void http_server_destroy(http_server_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    http_server_t *self = *self_p;
    zloop_poller_end(self->loop, &self->item);
    zloop_timer_end(self->loop, self->timer_id);
    MHD_stop_daemon(self->mhd);
    free(self);
    *self_p = NULL;
}

int http_server_port(const http_server_t *self)
{
    return self->port;
}
