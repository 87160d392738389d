/* watch: envd's directory watches (internal.h) — WatchDir, a server stream,
 * and CreateWatcher / GetWatcherEvents / RemoveWatcher, polled — over
 * `sandgate-init --fs watch` (kernelmgr/guest/watch.c: inotify inside the
 * sandbox) run as an internal command (commands.h): it counts against the
 * context's commands and the tenant's max-queued, and is neither listed nor
 * found by pid.
 *
 * A watcher begins once the helper says {"ok":true}: CreateWatcher answers
 * then with its id, WatchDir with its start event; a path that is missing
 * or not a directory ends it first (not_found, invalid_argument).  Events
 * are E2B's FilesystemEvent {name, type, entry?}.  GetWatcherEvents asks the
 * helper to sync — every event inotify holds when it asks is out before the
 * answer — so a write the client saw complete is in the events it then
 * gets.  A watcher's id is good only for requests on its own sandbox (the
 * tenant's key or that sandbox's token): another is not_found.  Its events
 * wait at most WATCH_MAX_EVENTS; past that the oldest go.  A WatchDir ends
 * with its client; a polled watcher with RemoveWatcher or its sandbox.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/commands/commands.h"
#include "gateway/envd/internal.h"
#include "gateway/http/http.h"

#define WATCH_MAX_EVENTS 10000
#define WATCH_LINE_MAX 65536
#define KEEPALIVE_MS 5000

typedef struct watcher watcher_t;
typedef struct wcall wcall_t;

/* A unary call waiting on a watcher: CreateWatcher for its start,
 * GetWatcherEvents for its sync. */
struct wcall {
    envd_call_t base;
    bool removal; /* RemoveWatcher's: answered {} once the helper has ended */
    watcher_t *w; /* NULL once answered or the watcher gone */
    resp_t *out;
    json_t *answer; /* the message, or NULL */
    char *code, *msg;
    wcall_t *next;
};

struct watcher {
    envd_t *envd;
    char id[40];
    char *kid; /* the context it was made on */
    command_t *cmd;
    bool ok, ended;
    char *buf; /* stdout, up to its next newline */
    size_t len;
    char err[512]; /* the helper's stderr line */
    size_t errlen;
    json_t *events;   /* polled: since the last GetWatcherEvents */
    wcall_t *waiting; /* FIFO: the create call, then the gets, each for the next line */
    /* WatchDir: its stream */
    resp_t *stream;
    int keepalive;
    bool wrote;
    watcher_t *next;
};

static const command_reader_t reader;
static void watcher_free(watcher_t *w);

/* --- the helper's lines ---------------------------------------------------------------- */

static json_t *event_json(const json_t *line)
{
    static const char *const types[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE",
                                        "EVENT_TYPE_WRITE",       "EVENT_TYPE_REMOVE",
                                        "EVENT_TYPE_RENAME",      "EVENT_TYPE_CHMOD"};
    json_int_t t = json_integer_value(json_object_get(line, "type"));
    json_t *ev = json_pack("{s:s, s:s}", "name", json_string_value(json_object_get(line, "name")),
                           "type", types[t >= 1 && t <= 5 ? t : 0]);
    json_t *entry = json_object_get(line, "entry");
    if (json_is_object(entry))
        json_object_set_new(ev, "entry", envd_entry(entry));
    return ev;
}

static void stream_msg(watcher_t *w, uint8_t flags, json_t *msg)
{
    cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    char *buf;
    size_t n;
    envd_frame(flags, text, strlen(text), &buf, &n);
    resp_write(w->stream, buf, n);
    free(buf);
    w->wrote = true;
}

static void call_answer(wcall_t *c, json_t *answer, const char *code, const char *msg)
{
    c->answer = answer;
    c->code = code ? xstrdup(code) : NULL;
    c->msg = msg ? xstrdup(msg) : NULL;
    c->w = NULL;
    resp_ready(c->out);
}

/* The first waiting call, taken off the queue. */
static wcall_t *first_waiting(watcher_t *w)
{
    wcall_t *c = w->waiting;
    if (c)
        w->waiting = c->next;
    return c;
}

static void on_line(watcher_t *w, const char *text)
{
    json_t *line = json_loads(text, 0, NULL);
    if (json_is_true(json_object_get(line, "ok"))) {
        w->ok = true;
        if (w->stream) {
            stream_msg(w, 0, json_pack("{s:{}}", "start"));
        } else {
            wcall_t *c = first_waiting(w);
            if (c)
                call_answer(c, json_pack("{s:s}", "watcherId", w->id), NULL, NULL);
        }
    } else if (json_is_true(json_object_get(line, "synced"))) {
        wcall_t *c = first_waiting(w);
        if (c) {
            call_answer(c, json_pack("{s:o}", "events", w->events), NULL, NULL);
            w->events = json_array();
        }
    } else if (json_object_get(line, "type")) {
        json_t *ev = event_json(line);
        if (w->stream) {
            stream_msg(w, 0, json_pack("{s:o}", "filesystem", ev));
        } else {
            if (json_array_size(w->events) >= WATCH_MAX_EVENTS)
                json_array_remove(w->events, 0);
            json_array_append_new(w->events, ev);
        }
    }
    json_decref(line);
}

static bool on_output(void *arg, command_t *c, command_stream_t which, const char *data, size_t n)
{
    watcher_t *w = arg;
    if (which == COMMAND_STDERR) {
        size_t take = n < sizeof w->err - 1 - w->errlen ? n : sizeof w->err - 1 - w->errlen;
        memcpy(w->err + w->errlen, data, take);
        w->errlen += take;
        w->err[w->errlen] = '\0';
        return true;
    }
    w->buf = xrealloc(w->buf, w->len + n + 1);
    memcpy(w->buf + w->len, data, n);
    w->len += n;
    w->buf[w->len] = '\0';
    char *start = w->buf, *nl;
    while ((nl = memchr(start, '\n', w->len - (size_t)(start - w->buf)))) {
        *nl = '\0';
        on_line(w, start);
        start = nl + 1;
    }
    w->len -= (size_t)(start - w->buf);
    memmove(w->buf, start, w->len);
    if (w->len > WATCH_LINE_MAX)
        w->len = 0; /* not the helper's: dropped */
    return true;
}

/* Why the helper ended before it watched: its errno as a Connect code. */
static const char *failure(watcher_t *w, const char **msg)
{
    json_t *e = json_loads(w->err, 0, NULL);
    json_int_t no = json_integer_value(json_object_get(e, "errno"));
    static char text[512];
    snprintf(text, sizeof text, "%s",
             json_string_value(json_object_get(e, "message"))
                 ?: "the directory watch ended (its sandbox went, or stopped it)");
    json_decref(e);
    *msg = text;
    return no == 2                ? "not_found"
           : no == 20 || no == 22 ? "invalid_argument"
           : no == 13             ? "permission_denied"
           : no                   ? "internal"
                                  : "unavailable";
}

static void on_exit_(void *arg, command_t *c)
{
    watcher_t *w = arg;
    w->cmd = NULL;
    w->ended = true;
    const char *msg = NULL, *code = failure(w, &msg);
    if (w->ok && !command_error(c))
        msg = "the watched directory is gone, or its sandbox stopped";
    bool removed = false;
    for (wcall_t *call; (call = first_waiting(w));) {
        removed |= call->removal;
        if (call->removal)
            call_answer(call, json_object(), NULL, NULL);
        else
            call_answer(call, NULL, w->ok ? "unavailable" : code, msg);
    }
    if (removed) { /* no longer counted anywhere: gone */
        watcher_free(w);
        return;
    }
    if (w->stream) {
        stream_msg(w, ENVD_FLAG_END,
                   w->ok ? json_object() : json_pack("{s:o}", "error", envd_error_json(code, msg)));
        resp_end(w->stream);
        loop_timer_end(w->envd->loop, w->keepalive);
        w->keepalive = -1;
    }
}

static const command_reader_t reader = {.on_output = on_output, .on_exit = on_exit_};

/* --- watchers ------------------------------------------------------------------------- */

static void watcher_free(watcher_t *w)
{
    for (watcher_t **pp = &w->envd->watchers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    for (wcall_t *c; (c = first_waiting(w));)
        call_answer(c, NULL, "unavailable", "the watcher was removed");
    if (w->cmd) {
        command_detach(w->cmd, &reader, w);
        command_stdin_close(w->cmd); /* the helper ends at its end of input */
    }
    loop_timer_end(w->envd->loop, w->keepalive);
    json_decref(w->events);
    free(w->buf);
    free(w->kid);
    free(w);
}

static void on_keepalive(loop_t *loop, int timer_id, void *arg)
{
    watcher_t *w = arg;
    if (!w->wrote && w->ok && !w->ended)
        stream_msg(w, 0, json_pack("{s:{}}", "keepalive"));
    w->wrote = false;
}

/* A new watcher of msg's path in k, its helper started; NULL after answering. */
static watcher_t *watcher_start(envd_t *self, http_req_t *req, kernel_t *k, const json_t *msg,
                                enum MHD_Result *ret)
{
    const char *path = envd_str(msg, "path", NULL);
    if (!path || !*path) {
        *ret = envd_reply_code(req->conn, "invalid_argument", "'path' is missing");
        return NULL;
    }
    for (watcher_t *w = self->watchers, *next; w; w = next) { /* those nobody can ask again */
        next = w->next;
        if (w->ended && !w->stream && !kmgr_get(self->kmgr, w->kid))
            watcher_free(w);
    }
    cleanup_free char *abs = envd_abspath(path);
    const char *rec = json_is_true(json_object_get(msg, "recursive")) ? "1" : "0";
    const char *entries = json_is_true(json_object_get(msg, "includeEntry")) ||
                                  json_is_true(json_object_get(msg, "include_entry"))
                              ? "1"
                              : "0";
    const char *argv[] = {"--fs", "watch", abs, rec, entries, NULL};
    command_opts_t o = {.argv = argv, .stdin_open = true, .internal = true, .background = true};
    http_who(req, "envd", &o.who);
    sg_error_t *err = NULL;
    command_t *c = commands_start(self->commands, k, &o, &err);
    if (c == NULL) {
        *ret = envd_reply_error(req->conn, NULL, err);
        sg_error_free(&err);
        return NULL;
    }
    watcher_t *w = xzalloc(sizeof *w);
    w->envd = self;
    w->kid = xstrdup(kernel_id(k));
    w->events = json_array();
    w->keepalive = -1;
    w->cmd = c;
    unsigned char raw[16];
    randombytes_buf(raw, sizeof raw);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(w->id + 2 * i, 3, "%02x", raw[i]);
    w->next = self->watchers;
    self->watchers = w;
    if (command_attach(c, &reader, w, &err) < 0) { /* never: a new command has no reader */
        *ret = envd_reply_error(req->conn, NULL, err);
        sg_error_free(&err);
        watcher_free(w);
        return NULL;
    }
    return w;
}

/* The watcher msg names, made on req's sandbox; NULL after answering. */
static watcher_t *watcher_named(envd_t *self, http_req_t *req, const json_t *msg,
                                enum MHD_Result *ret)
{
    kernel_t *k = envd_kernel_or_reply(self, req, ret);
    if (!k)
        return NULL;
    const char *id = envd_str(msg, "watcherId", "watcher_id");
    for (watcher_t *w = self->watchers; w && id; w = w->next)
        if (strcmp(w->id, id) == 0 && strcmp(w->kid, kernel_id(k)) == 0 && !w->stream)
            return w;
    *ret = envd_reply_code(req->conn, "not_found", "watcher not found");
    return NULL;
}

/* --- the calls ------------------------------------------------------------------------ */

static void wcall_end(envd_call_t *call, bool completed)
{
    wcall_t *c = (wcall_t *)call;
    if (c->w) /* still queued: its watcher answers nobody */
        for (wcall_t **pp = &c->w->waiting; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
    resp_set_gone(c->out);
    resp_free(&c->out);
    json_decref(c->answer);
    free(c->code);
    free(c->msg);
    free(c);
}

/* Queues a call on w, answered by its next line (or its end). */
static enum MHD_Result wait_on(envd_t *self, http_req_t *req, watcher_t *w)
{
    wcall_t *c = xzalloc(sizeof *c);
    c->base.end = wcall_end;
    c->w = w;
    c->out = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
    wcall_t **tail = &w->waiting;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    req->state = c;
    return resp_wait(c->out);
}

static enum MHD_Result answered(http_req_t *req)
{
    wcall_t *c = req->state;
    if (c->answer) {
        json_t *a = c->answer;
        c->answer = NULL;
        return envd_reply_msg(req->conn, a);
    }
    return envd_reply_code(req->conn, c->code ? c->code : "internal", c->msg ? c->msg : "");
}

static enum MHD_Result create_watcher(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    if (req->resumed)
        return answered(req);
    enum MHD_Result ret;
    json_t *msg = envd_request(req, &ret);
    kernel_t *k = msg ? envd_kernel_or_reply(self, req, &ret) : NULL;
    watcher_t *w = k ? watcher_start(self, req, k, msg, &ret) : NULL;
    json_decref(msg);
    return w ? wait_on(self, req, w) : ret;
}

static enum MHD_Result get_events(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    if (req->resumed)
        return answered(req);
    enum MHD_Result ret;
    json_t *msg = envd_request(req, &ret);
    watcher_t *w = msg ? watcher_named(self, req, msg, &ret) : NULL;
    json_decref(msg);
    if (!w)
        return ret;
    if (w->ended) {
        json_t *a = json_pack("{s:o}", "events", w->events);
        w->events = json_array();
        return envd_reply_msg(req->conn, a);
    }
    sg_error_t *err = NULL;
    if (command_stdin_write(w->cmd, "sync\n", 5, &err) != 5) {
        ret = envd_reply_code(req->conn, "unavailable", err ? err->msg : "the watcher is busy");
        sg_error_free(&err);
        return ret;
    }
    return wait_on(self, req, w);
}

static enum MHD_Result remove_watcher(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    if (req->resumed)
        return answered(req);
    enum MHD_Result ret;
    json_t *msg = envd_request(req, &ret);
    watcher_t *w = msg ? watcher_named(self, req, msg, &ret) : NULL;
    json_decref(msg);
    if (!w)
        return ret;
    if (w->ended) {
        watcher_free(w);
        return envd_reply_msg(req->conn, json_object());
    }
    /* Answered once the helper has ended (its end of input): from then on
     * the watch counts against nothing. */
    command_stdin_close(w->cmd);
    ret = wait_on(self, req, w);
    ((wcall_t *)req->state)->removal = true;
    return ret;
}

/* WatchDir: the stream lives as long as its client, and the watcher with it. */
typedef struct {
    envd_call_t base;
    watcher_t *w;
} wstream_t;

static void wstream_end(envd_call_t *call, bool completed)
{
    wstream_t *s = (wstream_t *)call;
    resp_t *out = s->w->stream;
    watcher_free(s->w);
    resp_set_gone(out);
    resp_free(&out);
    free(s);
}

static enum MHD_Result watch_dir(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    enum MHD_Result ret;
    json_t *msg = envd_stream_request(req, &ret);
    kernel_t *k = msg ? envd_kernel_or_reply(self, req, &ret) : NULL;
    watcher_t *w = k ? watcher_start(self, req, k, msg, &ret) : NULL;
    json_decref(msg);
    if (!w)
        return ret;
    wstream_t *s = xzalloc(sizeof *s);
    s->base.end = wstream_end;
    s->w = w;
    w->stream = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
    w->keepalive = loop_timer(self->loop, KEEPALIVE_MS, 0, on_keepalive, w);
    req->state = s;
    struct MHD_Response *r = resp_stream(w->stream, NULL);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
    ret = http_queue(req->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int envd_watch_register(envd_t *self, http_server_t *http, const http_front_t *front,
                        sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/filesystem.Filesystem/WatchDir", watch_dir, 0, NULL},
        {"POST", "/filesystem.Filesystem/CreateWatcher", create_watcher, 0, NULL},
        {"POST", "/filesystem.Filesystem/GetWatcherEvents", get_events, 0, NULL},
        {"POST", "/filesystem.Filesystem/RemoveWatcher", remove_watcher, 0, NULL},
    };
    return http_routes(http, front, routes, sizeof routes / sizeof *routes, err);
}

void envd_watch_destroy(envd_t *self)
{
    while (self->watchers)
        watcher_free(self->watchers);
}
