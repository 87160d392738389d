/* files: the REST API's files routes (internal.h): downloads and
 * listings, deletes, and uploads streamed to disk. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "gateway/files/files.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/internal.h"

/* --- GET and DELETE ----------------------------------------------------------------- */

/* A file.delete's fields: the path and what it was, read before it goes
 * (the size of a file; a directory's is not summed). */
static json_t *file_audit(kernel_t *k, const char *path)
{
    json_t *f = json_pack("{s:s, s:s}", "context", kernel_id(k), "path", *path ? path + 1 : "");
    struct stat st;
    int fd = files_open(kernel_workspace(k), path, &st, NULL);
    if (fd >= 0) {
        close(fd);
        json_object_set_new(f, "type", json_string(S_ISDIR(st.st_mode) ? "dir" : "file"));
        if (!S_ISDIR(st.st_mode))
            json_object_set_new(f, "size", json_integer((json_int_t)st.st_size));
    }
    return f;
}

/* The request's context, once its workspace exists (a default context
 * made by POST /execute can be seen before); NULL after answering 409. */
static kernel_t *workspace_of(const http_req_t *call, enum MHD_Result *ret)
{
    kernel_t *k = http_arg(call, "context");
    if (kernel_prepared(k))
        return k;
    *ret = http_reply_errorf(call->conn, SG_E_CONFLICT,
                             "context %s is still being prepared; retry shortly", kernel_id(k));
    return NULL;
}

/* A request with ?path=: 1 with *path, 0 without, -1 after answering a
 * bad one. */
static int anywhere(const http_req_t *call, const char **path, enum MHD_Result *ret)
{
    sg_error_t *err = NULL;
    int r = api_sbfs_query_path(call->conn, path, &err);
    if (r > 0 && *call->rest && strcmp(call->rest, "/") != 0) {
        r = -1;
        sg_error_set(&err, SG_E_INVALID,
                     "a path in the URL (workspace-relative) or ?path= (absolute), not both");
        err->errnum = EINVAL;
    }
    if (r < 0) {
        *ret = api_sbfs_reply_error(call->conn, err);
        sg_error_free(&err);
    }
    return r;
}

/* DELETE /contexts/{context}/files/{path}: a file or a whole directory;
 * with ?path=, inside the sandbox. */
static enum MHD_Result files_delete(void *arg, http_req_t *call)
{
    struct MHD_Connection *conn = call->conn;
    const char *path = call->rest;
    enum MHD_Result ret;
    const char *abspath;
    if (call->state)
        return api_sbfs_resumed(call);
    int abs = anywhere(call, &abspath, &ret);
    if (abs)
        return abs < 0 ? ret : api_sbfs_delete(arg, call, abspath);
    kernel_t *k = workspace_of(call, &ret);
    if (!k)
        return ret;
    sg_error_t *err = NULL;
    json_t *f = audit_enabled() ? file_audit(k, path) : NULL;
    if (files_remove(kernel_workspace(k), path, &err) < 0) {
        json_decref(f);
        return reply_failed(conn, &err);
    }
    audit_who_t who;
    http_who(call, "rest", &who);
    audit_event(&who, "file.delete", f);
    return reply_status(conn, 204);
}

/* GET /contexts/{context}/files[/{path}]: a file, or a directory's
 * listing; with ?path=, inside the sandbox. */
static enum MHD_Result files_get(void *arg, http_req_t *call)
{
    struct MHD_Connection *conn = call->conn;
    const char *path = call->rest;
    enum MHD_Result ret;
    const char *abspath;
    if (call->state)
        return api_sbfs_resumed(call);
    int abs = anywhere(call, &abspath, &ret);
    if (abs)
        return abs < 0 ? ret : api_sbfs_get(arg, call, abspath);
    kernel_t *k = workspace_of(call, &ret);
    if (!k)
        return ret;
    sg_error_t *err = NULL;
    struct stat st;
    int fd = files_open(kernel_workspace(k), path, &st, &err);
    if (fd < 0)
        return reply_failed(conn, &err);
    if (S_ISDIR(st.st_mode)) {
        json_t *list = files_list(fd, path, &err);
        close(fd);
        return list ? http_reply_json(conn, 200, list) : reply_failed(conn, &err);
    }
    metrics.downloads++;
    metrics.download_bytes += (uint64_t)st.st_size;
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, files_mime(path));
    ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- PUT --------------------------------------------------------------------------- */

/* An upload: PUT /contexts/{context}/files/{path}, streamed to disk
 * (http.h's sinks). */
typedef struct {
    api_t *api;
    files_upload_t *up;
    api_sbfs_sink_t *sb; /* ?path=: the upload goes into the sandbox (sbfs.c) */
    bool sbfs_error;     /* err is answered in sbfs's shape */
    sg_error_t *err;     /* the first failure; the rest of the body is discarded */
    size_t unchecked;    /* bytes written since the state disk's room was checked */
    char id[128];        /* the context's, for the audit log */
    char tenant[64];     /* who uploads, for the audit log */
    /* Once the body is in, the upload is stored when its files are the
     * sandbox user's (files_upload_store: the launcher answers later). */
    struct MHD_Connection *conn; /* suspended until then; NULL: not */
    bool storing, stored;
    json_t *info; /* stored: {path, size} */
} sink_t;

/* Room kept free on the state directory's disk by uploads: a workspace is a
 * sparse image there, so a write the image accepts can still find no block
 * beneath it, and the loop device then loses it with an I/O error instead
 * of ENOSPC.  Checked at the start and every UPLOAD_CHECK_BYTES. */
#define UPLOAD_DISK_RESERVE (16u << 20)
#define UPLOAD_CHECK_BYTES (1u << 20)

static int state_disk_room(const api_t *self, sg_error_t **err)
{
    struct statvfs vfs;
    if (!self->cfg.state_dir || statvfs(self->cfg.state_dir, &vfs) < 0)
        return 0;
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (free_bytes >= UPLOAD_DISK_RESERVE)
        return 0;
    return sg_error_set(err, SG_E_NOSPACE,
                        "the state directory's disk has %llu MiB free (uploads keep %u MiB "
                        "free); nothing was written",
                        (unsigned long long)(free_bytes >> 20), UPLOAD_DISK_RESERVE >> 20);
}

static void sink_free(sink_t *sink)
{
    files_upload_abort(&sink->up);
    if (sink->sb)
        api_sbfs_sink_free(sink->sb);
    sg_error_free(&sink->err);
    json_decref(sink->info);
    free(sink);
}

static void *sink_open(void *arg, const http_req_t *call)
{
    api_t *self = arg;
    kernel_t *k = http_arg(call, "context");
    sink_t *sink = xzalloc(sizeof *sink);
    snprintf(sink->id, sizeof sink->id, "%s", kernel_id(k));
    snprintf(sink->tenant, sizeof sink->tenant, "%s", call->tenant ? call->tenant->name : "");
    sink->api = self;
    const char *path = NULL;
    int abs = api_sbfs_query_path(call->conn, &path, &sink->err);
    if (abs > 0 && *call->rest && strcmp(call->rest, "/") != 0) {
        abs = -1;
        sg_error_set(&sink->err, SG_E_INVALID,
                     "a path in the URL (workspace-relative) or ?path= (absolute), not both");
    }
    sink->sbfs_error = abs != 0;
    if (abs > 0)
        sink->sb = api_sbfs_sink_open(self, call, path);
    else if (abs < 0)
        ; /* answered by finish */
    else if (!kernel_prepared(k))
        sg_error_set(&sink->err, SG_E_CONFLICT, "context %s is still being prepared; retry shortly",
                     kernel_id(k));
    else if (state_disk_room(self, &sink->err) == 0)
        sink->up =
            files_upload_begin(kernel_workspace(k), call->rest, self->cfg.max_upload, &sink->err);
    return sink;
}

static size_t sink_write(void *ctx, void *sink_, struct MHD_Connection *conn, const char *data,
                         size_t len)
{
    sink_t *sink = sink_;
    if (sink->sb)
        return api_sbfs_sink_write(sink->sb, data, len);
    if (sink->up && (sink->unchecked += len) >= UPLOAD_CHECK_BYTES) {
        sink->unchecked = 0;
        if (state_disk_room(sink->api, &sink->err) < 0)
            files_upload_abort(&sink->up); /* the temporary file goes: nothing was written */
    }
    if (sink->up && files_upload_write(sink->up, data, len, &sink->err) < 0)
        files_upload_abort(&sink->up);
    return len;
}

static void sink_stored(const json_t *info, const sg_error_t *err, void *arg)
{
    sink_t *sink = arg;
    sink->stored = true;
    sink->info = json_incref((json_t *)info);
    if (err)
        sg_error_set(&sink->err, err->kind, "%s", err->msg);
    if (sink->conn) {
        http_resume(sink->conn); /* sink_finish answers */
        sink->conn = NULL;
        sink->api->wake(sink->api->wake_arg);
    }
}

/* Called again when the connection resumes (http.h). */
static enum MHD_Result sink_finish(void *ctx, struct MHD_Connection *conn, void **sink_p)
{
    sink_t *sink = *sink_p;
    if (sink->sb || sink->sbfs_error) {
        enum MHD_Result ret = sink->sb ? api_sbfs_sink_finish(sink->sb, sink->tenant, sink->id)
                                       : api_sbfs_reply_error(conn, sink->err);
        if (sink->sb && api_sbfs_sink_waiting(sink->sb))
            return ret;
        *sink_p = NULL;
        sink_free(sink);
        return ret;
    }
    if (sink->up && !sink->storing) {
        sink->storing = true;
        files_upload_store(sink->up, sink_stored, sink);
        if (!sink->stored) {
            sink->conn = conn;
            http_suspend(conn);
            return MHD_YES;
        }
    }
    json_t *info = sink->info;
    enum MHD_Result ret;
    if (info) {
        metrics.uploads++;
        metrics.upload_bytes += (uint64_t)json_integer_value(json_object_get(info, "size"));
        audit_who_t who;
        audit_who_conn(&who, "rest", conn);
        audit_who_set_tenant(&who, sink->tenant);
        audit_event(&who, "file.write",
                    json_pack("{s:s, s:O, s:O}", "context", sink->id, "path",
                              json_object_get(info, "path"), "size",
                              json_object_get(info, "size")));
        ret = http_reply_json(conn, 201, json_incref(info));
    } else {
        ret = reply_failed(conn, &sink->err);
    }
    *sink_p = NULL;
    sink_free(sink);
    return ret;
}

static void sink_abort(void *ctx, void *sink)
{
    sink_free(sink);
}

static void files_done(void *ctx, void *state, bool completed)
{
    api_sbfs_req_free(state);
}

static const http_sink_t upload = {
    .open = sink_open, .write = sink_write, .finish = sink_finish, .abort = sink_abort};

int api_files_register(api_t *self, http_server_t *http, const http_front_t *front,
                       sg_error_t **err)
{
    /* The path's '*' is the file's path in the workspace: "" or "/" for
     * its root, "/a/b.txt". */
    static const http_route_t routes[] = {
        {"GET", "/contexts/{context}/files/*", files_get, 0, NULL},
        {"PUT", "/contexts/{context}/files/*", NULL, 0, &upload},
        {"DELETE", "/contexts/{context}/files/*", files_delete, 0, NULL},
    };
    /* Their state is sbfs.c's (absolute paths), never a stream_t. */
    const http_front_t files_front = {.name = front->name,
                                      .ctx = front->ctx,
                                      .done = files_done,
                                      .error_response = front->error_response};
    if (http_routes(http, &files_front, routes, sizeof routes / sizeof routes[0], err) < 0)
        return -1;
    return api_sbfs_register(self, http, &files_front, err);
}
