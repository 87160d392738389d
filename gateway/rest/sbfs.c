/* sbfs: the files routes for an absolute path (?path=/tmp/a.csv),
 * served inside the context's sandbox by sbfs.h; POST .../files/mkdir and
 * .../files/move.  Each request runs one sbfs operation and suspends its
 * connection until the operation answers; a download is then streamed from
 * the operation straight into libmicrohttpd's buffer, an upload from
 * libmicrohttpd's buffer into the operation, with backpressure both ways
 * (a full pipe suspends the connection, and the operation's ready resumes
 * it). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/files/files.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/internal.h"

typedef enum { Q_GET, Q_STAT, Q_DELETE, Q_MKDIR, Q_MOVE } q_what_t;

/* One request's state (http_req_t.state), freed when the request ends. */
struct api_sbfs_req {
    api_t *api;
    struct MHD_Connection *conn;
    q_what_t what;
    char *path;
    unsigned depth;
    kernel_t *k; /* the first call's: a listing that follows a read looks it up by id */
    sbfs_op_t *op;
    bool suspended; /* by this module: a wait for the operation, or for bytes */
    bool answered;  /* the operation's done came */
    bool streaming; /* the download's response is queued */
    json_t *result;
    sg_error_t *err;
    audit_who_t who;
    char id[128];
};

enum MHD_Result api_sbfs_reply_error(struct MHD_Connection *conn, const sg_error_t *err)
{
    json_t *body = json_pack("{s:s, s:s, s:s}", "error", sg_error_kind_name(err->kind), "code",
                             sbfs_error_code(err), "message", err->msg);
    return http_reply_json(conn, (unsigned)sg_error_http_status(err->kind), body);
}

static void copy_error(sg_error_t **to, const sg_error_t *err)
{
    sg_error_free(to);
    if (err) {
        sg_error_set(to, err->kind, "%s", err->msg);
        (*to)->errnum = err->errnum;
    }
}

/* False when the request's key was revoked (http_suspend). */
static bool suspend(api_sbfs_req_t *q)
{
    q->suspended = http_suspend(q->conn);
    return q->suspended;
}

static void resume(api_sbfs_req_t *q)
{
    if (!q->suspended)
        return;
    q->suspended = false;
    http_resume(q->conn);
    q->api->wake(q->api->wake_arg);
}

int api_sbfs_query_path(struct MHD_Connection *conn, const char **path, sg_error_t **err)
{
    size_t len = 0;
    *path = NULL;
    if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, "path", 4, path, &len) !=
        MHD_YES) {
        *path = NULL;
        return 0;
    }
    if (!*path)
        *path = "";
    return sbfs_path_check(*path, len, err) < 0 ? -1 : 1;
}

static void on_ready(sbfs_op_t *op, void *arg)
{
    resume(arg);
}

static void start_list(api_sbfs_req_t *q);

static void on_done(sbfs_op_t *op, const json_t *result, const sg_error_t *err, void *arg)
{
    api_sbfs_req_t *q = arg;
    const char *code = sbfs_error_code(err);
    if (q->what == Q_GET && !q->result && code && strcmp(code, "is_directory") == 0) {
        start_list(q); /* a directory: its listing instead */
        return;
    }
    q->answered = true;
    q->result = json_incref((json_t *)result);
    copy_error(&q->err, err);
    resume(q);
}

static const sbfs_cb_t callbacks = {.done = on_done, .ready = on_ready};

static void start_list(api_sbfs_req_t *q)
{
    sbfs_op_free(&q->op);
    q->what = Q_STAT; /* answered with JSON from here on */
    sbfs_cb_t cb = callbacks;
    cb.arg = q;
    sg_error_t *err = NULL;
    kernel_t *k = kmgr_get(q->api->kmgr, q->id); /* the context may have gone meanwhile */
    if (k)
        q->op = sbfs_list(q->api->loop, k, q->path, q->depth, &cb, &err);
    else
        sg_error_set(&err, SG_E_NOTFOUND, "context %s went away", q->id);
    if (!q->op) {
        q->answered = true;
        q->err = err;
        resume(q);
    }
}

void api_sbfs_req_free(api_sbfs_req_t *q)
{
    sbfs_op_free(&q->op);
    json_decref(q->result);
    sg_error_free(&q->err);
    free(q->path);
    free(q);
}

/* The query's depth (1 by default). */
static int query_depth(struct MHD_Connection *conn, unsigned *depth, sg_error_t **err)
{
    const char *d = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "depth");
    char *end = NULL;
    unsigned long v = d ? strtoul(d, &end, 10) : 1;
    if ((d && (!*d || *end)) || v < 1 || v > 64)
        return sg_error_set(err, SG_E_INVALID, "depth must be 1 to 64");
    *depth = (unsigned)v;
    return 0;
}

static bool query_flag(struct MHD_Connection *conn, const char *name)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    return v && strcmp(v, "0") != 0 && strcmp(v, "false") != 0;
}

/* Starts what q asks for, with its own two arguments; suspends. */
static enum MHD_Result begin(api_sbfs_req_t *q, http_req_t *call, const char *a, const char *b)
{
    sbfs_cb_t cb = callbacks;
    cb.arg = q;
    sg_error_t *err = NULL;
    loop_t *loop = q->api->loop;
    switch (q->what) {
    case Q_GET: q->op = sbfs_read(loop, q->k, a, &cb, &err); break;
    case Q_STAT: q->op = sbfs_stat(loop, q->k, a, &cb, &err); break;
    case Q_DELETE: q->op = sbfs_remove(loop, q->k, a, &cb, &err); break;
    case Q_MKDIR: q->op = sbfs_mkdir(loop, q->k, a, false, &cb, &err); break;
    case Q_MOVE: q->op = sbfs_move(loop, q->k, a, b, &cb, &err); break;
    }
    if (!q->op) {
        enum MHD_Result ret = api_sbfs_reply_error(q->conn, err);
        sg_error_free(&err);
        api_sbfs_req_free(q);
        return ret;
    }
    call->state = q;
    if (!q->answered) /* nothing answers before this returns: sbfs never calls back at once */
        suspend(q);
    return MHD_YES;
}

static api_sbfs_req_t *req_new(api_t *self, http_req_t *call, q_what_t what, const char *path)
{
    api_sbfs_req_t *q = xzalloc(sizeof *q);
    q->api = self;
    q->conn = call->conn;
    q->what = what;
    q->path = xstrdup(path ? path : "");
    q->depth = 1;
    q->k = http_arg(call, "context");
    snprintf(q->id, sizeof q->id, "%s", kernel_id(q->k));
    http_who(call, "rest", &q->who);
    return q;
}

enum MHD_Result api_sbfs_get(api_t *self, http_req_t *call, const char *path)
{
    api_sbfs_req_t *q = req_new(self, call, query_flag(call->conn, "stat") ? Q_STAT : Q_GET, path);
    sg_error_t *err = NULL;
    if (query_depth(call->conn, &q->depth, &err) < 0) {
        api_sbfs_req_free(q);
        enum MHD_Result ret = api_sbfs_reply_error(call->conn, err);
        sg_error_free(&err);
        return ret;
    }
    return begin(q, call, path, NULL);
}

enum MHD_Result api_sbfs_delete(api_t *self, http_req_t *call, const char *path)
{
    return begin(req_new(self, call, Q_DELETE, path), call, path, NULL);
}

/* libmicrohttpd's content reader for a download: the operation's bytes. */
static ssize_t download_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    api_sbfs_req_t *q = cls;
    sg_error_t *err = NULL;
    ssize_t n = sbfs_read_pull(q->op, buf, max, &err);
    if (n == SBFS_AGAIN) /* on_ready resumes it; a revoked key ends it */
        return suspend(q) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
    if (n > 0) {
        metrics.download_bytes += (uint64_t)n;
        return n;
    }
    if (n < 0) {
        log_warn("api: download of %s from context %s broke off: %s", q->path, q->id, err->msg);
        sg_error_free(&err);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static enum MHD_Result answer(api_sbfs_req_t *q)
{
    struct MHD_Connection *conn = q->conn;
    if (q->err)
        return api_sbfs_reply_error(conn, q->err);
    if (q->what == Q_GET) {
        uint64_t size = (uint64_t)json_integer_value(json_object_get(q->result, "size"));
        metrics.downloads++;
        q->streaming = true;
        struct MHD_Response *r =
            MHD_create_response_from_callback(size, 1 << 20, download_reader, q, NULL);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, files_mime(q->path));
        enum MHD_Result ret = http_queue(conn, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (q->what == Q_DELETE) {
        audit_event(&q->who, "file.delete",
                    json_pack("{s:s, s:s}", "context", q->id, "path", q->path));
        return reply_status(conn, 204);
    }
    return http_reply_json(conn, q->what == Q_MKDIR ? 201 : 200, json_incref(q->result));
}

/* The request again, its connection resumed: the operation has answered,
 * or a download's bytes have come (libmicrohttpd then reads on by itself). */
enum MHD_Result api_sbfs_resumed(http_req_t *call)
{
    api_sbfs_req_t *q = call->state;
    if (q->streaming || !q->answered)
        return MHD_YES;
    return answer(q);
}

/* POST /contexts/{context}/files/mkdir {"path"} and .../files/move
 * {"from", "to"}: absolute paths in the sandbox. */
static enum MHD_Result post_op(void *arg, http_req_t *call, q_what_t what)
{
    if (call->state)
        return api_sbfs_resumed(call);
    json_error_t jerr;
    json_t *body = json_loadb(call->body, call->len, 0, &jerr);
    const char *keys[2] = {what == Q_MKDIR ? "path" : "from", what == Q_MKDIR ? NULL : "to"};
    const char *val[2] = {NULL, NULL};
    sg_error_t *err = NULL;
    for (int i = 0; i < 2 && keys[i]; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (!json_is_string(v)) {
            sg_error_set(&err, SG_E_INVALID, "the body must be a JSON object with '%s' a string",
                         keys[i]);
            break;
        }
        val[i] = json_string_value(v);
        if (sbfs_path_check(val[i], json_string_length(v), &err) < 0) {
            sg_error_prefix(&err, "%s", keys[i]);
            break;
        }
    }
    enum MHD_Result ret;
    if (err) {
        ret = api_sbfs_reply_error(call->conn, err);
        sg_error_free(&err);
    } else {
        ret = begin(req_new(arg, call, what, val[what == Q_MOVE]), call, val[0], val[1]);
    }
    json_decref(body);
    return ret;
}

static enum MHD_Result files_mkdir(void *arg, http_req_t *call)
{
    return post_op(arg, call, Q_MKDIR);
}

static enum MHD_Result files_move(void *arg, http_req_t *call)
{
    return post_op(arg, call, Q_MOVE);
}

int api_sbfs_register(api_t *self, http_server_t *http, const http_front_t *front, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/contexts/{context}/files/mkdir", files_mkdir, 0, NULL},
        {"POST", "/contexts/{context}/files/move", files_move, 0, NULL},
    };
    return http_routes(http, front, routes, sizeof routes / sizeof routes[0], err);
}

/* --- uploads: PUT /contexts/{context}/files?path=... -------------------------------- */

struct api_sbfs_sink {
    api_t *api;
    struct MHD_Connection *conn;
    sbfs_op_t *op;
    bool suspended, ended, answered;
    json_t *entry;
    sg_error_t *err;
    char path[SBFS_PATH_MAX + 1];
};

static void sink_resume(api_sbfs_sink_t *s)
{
    if (!s->suspended)
        return;
    s->suspended = false;
    http_resume(s->conn);
    s->api->wake(s->api->wake_arg);
}

static void sink_ready(sbfs_op_t *op, void *arg)
{
    sink_resume(arg);
}

static void sink_done(sbfs_op_t *op, const json_t *result, const sg_error_t *err, void *arg)
{
    api_sbfs_sink_t *s = arg;
    s->answered = true;
    s->entry = json_incref((json_t *)result);
    copy_error(&s->err, err); /* the operation's reason beats a failed push's */
    sink_resume(s);
}

api_sbfs_sink_t *api_sbfs_sink_open(api_t *self, const http_req_t *call, const char *path)
{
    api_sbfs_sink_t *s = xzalloc(sizeof *s);
    s->api = self;
    s->conn = call->conn;
    snprintf(s->path, sizeof s->path, "%s", path);
    sbfs_cb_t cb = {.done = sink_done, .ready = sink_ready, .arg = s};
    s->op =
        sbfs_write(self->loop, http_arg(call, "context"), path, self->cfg.max_upload, &cb, &s->err);
    return s;
}

size_t api_sbfs_sink_write(api_sbfs_sink_t *s, const char *data, size_t len)
{
    if (!s->op || s->answered || s->err)
        return len; /* failed: the rest of the body is read and dropped */
    ssize_t n = sbfs_write_push(s->op, data, len, &s->err);
    if (n < 0)
        return len; /* done follows with the reason */
    if ((size_t)n < len) {
        s->suspended = true;
        http_suspend(s->conn);
    }
    return (size_t)n;
}

enum MHD_Result api_sbfs_sink_finish(api_sbfs_sink_t *s, const char *tenant, const char *id)
{
    if (s->op && !s->ended) {
        s->ended = true;
        sbfs_write_end(s->op);
    }
    if (s->op && !s->answered) {
        s->suspended = true;
        http_suspend(s->conn);
        return MHD_YES;
    }
    if (s->err)
        return api_sbfs_reply_error(s->conn, s->err);
    metrics.uploads++;
    metrics.upload_bytes += (uint64_t)json_integer_value(json_object_get(s->entry, "size"));
    audit_who_t who;
    audit_who_conn(&who, "rest", s->conn);
    audit_who_set_tenant(&who, tenant);
    audit_event(&who, "file.write",
                json_pack("{s:s, s:s, s:O}", "context", id, "path", s->path, "size",
                          json_object_get(s->entry, "size")));
    return http_reply_json(s->conn, 201, json_incref(s->entry));
}

bool api_sbfs_sink_waiting(const api_sbfs_sink_t *s)
{
    return s->op && !s->answered;
}

void api_sbfs_sink_free(api_sbfs_sink_t *s)
{
    sbfs_op_free(&s->op); /* not ended: nothing is stored */
    json_decref(s->entry);
    sg_error_free(&s->err);
    free(s);
}
