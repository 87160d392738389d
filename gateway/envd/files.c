/* files: envd's plain HTTP file bodies (internal.h), streamed
 * both ways through sbfs: a download is pulled from the sandbox as the
 * client takes it, an upload pushed as it arrives, reading from the client
 * paused while the sandbox has not taken what came (so neither is ever
 * whole in memory).  An upload may come gzipped (Content-Encoding: gzip,
 * as E2B's SDKs send one when asked): inflated as it arrives, a chunk of
 * output at a time, under the same backpressure.  Errors are envd's
 * {"code": STATUS, "message"}. */
#include <ctype.h>
#include <string.h>
#include <zlib.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/envd/internal.h"
#include "gateway/files/files.h"
#include "gateway/http/http.h"
#include "gateway/observe/observe.h"

static enum MHD_Result reply_files_error(struct MHD_Connection *conn, unsigned status,
                                         const char *msg)
{
    return http_reply_json(conn, status,
                           json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

/* --- GET /files --------------------------------------------------------------------- */

typedef struct {
    envd_call_t base;
    envd_t *envd;
    struct MHD_Connection *conn;
    resp_t *wait; /* until the file is open */
    sbfs_op_t *op;
    bool opened, suspended;
    long long size;
    unsigned status; /* an error's, or 0 */
    char *msg;
} download_t;

static void download_end(envd_call_t *call, bool completed)
{
    download_t *d = (download_t *)call;
    sbfs_op_free(&d->op);
    resp_set_gone(d->wait);
    resp_free(&d->wait);
    free(d->msg);
    free(d);
}

static void download_open(sbfs_op_t *op, const json_t *entry, const sg_error_t *err, void *arg)
{
    download_t *d = arg;
    d->opened = true;
    if (err) {
        d->status = envd_files_status(sbfs_error_code(err), err->kind);
        d->msg = xstrdup(err->msg);
    } else {
        d->size = json_integer_value(json_object_get(entry, "size"));
    }
    resp_ready(d->wait);
}

static void download_ready(sbfs_op_t *op, void *arg)
{
    download_t *d = arg;
    if (d->suspended) {
        d->suspended = false;
        http_resume(d->conn);
        d->envd->wake(d->envd->wake_arg);
    }
}

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    download_t *d = cls;
    sg_error_t *err = NULL;
    ssize_t n = sbfs_read_pull(d->op, buf, max, &err);
    if (n > 0)
        return n;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == SBFS_AGAIN) {
        if (!http_suspend(d->conn)) /* its key was revoked */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        d->suspended = true;
        return 0;
    }
    log_warn("envd: a download broke off: %s", err->msg);
    sg_error_free(&err);
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void free_nothing(void *cls)
{
    /* the download is freed when its request ends */
}

static enum MHD_Result download_answer(download_t *d)
{
    if (d->status)
        return reply_files_error(d->conn, d->status, d->msg);
    struct MHD_Response *r =
        d->size == 0 ? MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT)
                     : MHD_create_response_from_callback((uint64_t)d->size, 64 * 1024,
                                                         download_read, d, free_nothing);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    enum MHD_Result ret = http_queue(d->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result files_get(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    if (req->resumed)
        return download_answer(req->state);
    const char *path = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "path");
    if (path == NULL)
        return reply_files_error(req->conn, 400, "'path' is missing");
    enum MHD_Result ret;
    kernel_t *k = envd_kernel_or_reply(self, req, &ret);
    if (k == NULL)
        return ret;
    download_t *d = xzalloc(sizeof *d);
    d->base.end = download_end;
    d->envd = self;
    d->conn = req->conn;
    d->wait = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
    cleanup_free char *abs = envd_abspath(path);
    sg_error_t *err = NULL;
    d->op = sbfs_read(self->loop, k, abs,
                      &(sbfs_cb_t){.done = download_open, .ready = download_ready, .arg = d}, &err);
    if (d->op == NULL) {
        ret = reply_files_error(req->conn, envd_files_status(sbfs_error_code(err), err->kind),
                                err->msg);
        sg_error_free(&err);
        download_end(&d->base, false);
        return ret;
    }
    req->state = d;
    return d->opened ? download_answer(d) : resp_wait(d->wait);
}

/* --- POST /files -------------------------------------------------------------------- */

typedef struct upload upload_t;

/* One file of an upload. */
typedef struct {
    upload_t *up;
    sbfs_op_t *op; /* NULL once done */
    char *path;
    char *filename;  /* the multipart part's */
    uint64_t got;    /* bytes of it so far */
    char *pend;      /* bytes the sandbox has not taken yet */
    json_int_t size; /* once written */
    size_t plen, poff;
    bool ended, end_sent, done;
    json_t *entry;
} part_t;

struct upload {
    envd_t *envd;
    struct MHD_Connection *conn;
    audit_who_t who;
    char *kid;                    /* the context */
    char *qpath;                  /* ?path=, or NULL */
    struct MHD_PostProcessor *pp; /* multipart; NULL: the body is the file */
    part_t **parts;
    size_t nparts;
    bool suspended; /* reading paused (a part has bytes pending), or finish waiting */
    bool gzip;      /* Content-Encoding: gzip (z inflates it) */
    bool gzip_end;  /* the gzip stream ended */
    z_stream z;
    bool finishing;  /* the body is in; finish waits for the parts */
    unsigned status; /* the first error's, or 0 */
    char *msg;
    json_t *metadata; /* X-Metadata-KEY headers: {key, lowercased: value}; NULL: none */
};

static void upload_fail(upload_t *up, unsigned status, const char *msg)
{
    if (up->status)
        return;
    up->status = status;
    up->msg = xstrdup(msg);
}

static void upload_resume(upload_t *up)
{
    if (up->suspended) {
        up->suspended = false;
        http_resume(up->conn);
        up->envd->wake(up->envd->wake_arg);
    }
}

static bool all_drained(const upload_t *up)
{
    for (size_t i = 0; i < up->nparts; i++)
        if (up->parts[i]->poff < up->parts[i]->plen)
            return false;
    return true;
}

static bool all_done(const upload_t *up)
{
    for (size_t i = 0; i < up->nparts; i++)
        if (!up->parts[i]->done)
            return false;
    return true;
}

/* Gives the sandbox what it takes of p's pending bytes; ends the file once
 * they are all in and no more come. */
static void part_flush(part_t *p)
{
    while (p->op && p->poff < p->plen) {
        sg_error_t *err = NULL;
        ssize_t n = sbfs_write_push(p->op, p->pend + p->poff, p->plen - p->poff, &err);
        if (n < 0) { /* done follows with the error */
            sg_error_free(&err);
            p->poff = p->plen;
        } else if (n == 0) {
            return;
        } else {
            p->poff += (size_t)n;
        }
    }
    p->poff = p->plen = 0;
    if (p->op && p->ended && !p->end_sent) {
        p->end_sent = true;
        sbfs_write_end(p->op);
    }
}

static void part_push(part_t *p, const char *data, size_t n)
{
    if (p->op == NULL || n == 0)
        return;
    p->pend = xrealloc(p->pend, p->plen + n);
    memcpy(p->pend + p->plen, data, n);
    p->plen += n;
    part_flush(p);
}

static void part_ready(sbfs_op_t *op, void *arg)
{
    part_t *p = arg;
    part_flush(p);
    if (p->up->suspended && !p->up->finishing && all_drained(p->up))
        upload_resume(p->up);
}

static void part_done(sbfs_op_t *op, const json_t *entry, const sg_error_t *err, void *arg)
{
    part_t *p = arg;
    upload_t *up = p->up;
    p->done = true;
    p->poff = p->plen = 0;
    if (err)
        upload_fail(up, envd_files_status(sbfs_error_code(err), err->kind), err->msg);
    else
        p->size = json_integer_value(json_object_get(entry, "size"));
    if (!err)
        p->entry =
            json_pack("{s:s, s:s, s:s, s:O?}", "name",
                      json_string_value(json_object_get(entry, "name")) ?: "", "type", "file",
                      "path", p->path, "metadata", json_object_get(entry, "metadata"));
    sbfs_op_free(&p->op); /* after entry and err, which are op's */
    if (up->finishing ? all_done(up) || up->status : all_drained(up))
        upload_resume(up);
}

/* A new file at path: the one before it is complete. */
static part_t *part_start(upload_t *up, const char *path)
{
    if (up->nparts) {
        part_t *last = up->parts[up->nparts - 1];
        last->ended = true;
        part_flush(last);
    }
    part_t *p = xzalloc(sizeof *p);
    p->up = up;
    p->path = envd_abspath(path);
    up->parts = xrealloc(up->parts, (up->nparts + 1) * sizeof *up->parts);
    up->parts[up->nparts++] = p;
    kernel_t *k = kmgr_get(up->envd->kmgr, up->kid);
    sg_error_t *err = NULL;
    if (k == NULL) {
        upload_fail(up, 503, "the context is gone");
        p->done = true;
        return p;
    }
    /* in place, as E2B's envd writes: a directory watch sees its events */
    p->op =
        sbfs_write_meta(up->envd->loop, k, p->path, up->envd->cfg.max_upload, up->metadata, true,
                        &(sbfs_cb_t){.done = part_done, .ready = part_ready, .arg = p}, &err);
    if (p->op == NULL) {
        upload_fail(up, envd_files_status(sbfs_error_code(err), err->kind), err->msg);
        sg_error_free(&err);
        p->done = true;
    }
    return p;
}

/* A multipart body's values: each "file" part is a file, named by ?path=
 * (one file) or its filename. */
static enum MHD_Result multipart_value(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *filename, const char *content_type,
                                       const char *transfer_encoding, const char *data,
                                       uint64_t off, size_t size)
{
    upload_t *up = cls;
    if (key == NULL || strcmp(key, "file") != 0 || up->status)
        return MHD_YES;
    part_t *cur = up->nparts ? up->parts[up->nparts - 1] : NULL;
    /* libmicrohttpd may call more than once at offset 0 for one part */
    if (off == 0 && (cur == NULL || cur->got > 0 || !cur->filename || !filename ||
                     strcmp(cur->filename, filename) != 0)) {
        const char *path = up->qpath && up->nparts == 0 ? up->qpath : filename;
        if (path == NULL || *path == 0) {
            upload_fail(up, 400, "a file part without a path (no filename, no ?path=)");
            return MHD_YES;
        }
        cur = part_start(up, path);
        cur->filename = filename ? xstrdup(filename) : NULL;
    }
    if (cur) {
        cur->got += size;
        part_push(cur, data, size);
    }
    return MHD_YES;
}

static void upload_free(upload_t *up)
{
    if (up->pp)
        MHD_destroy_post_processor(up->pp);
    if (up->gzip)
        inflateEnd(&up->z);
    for (size_t i = 0; i < up->nparts; i++) {
        sbfs_op_free(&up->parts[i]->op);
        json_decref(up->parts[i]->entry);
        free(up->parts[i]->pend);
        free(up->parts[i]->path);
        free(up->parts[i]->filename);
        free(up->parts[i]);
    }
    free(up->parts);
    free(up->kid);
    free(up->qpath);
    free(up->msg);
    json_decref(up->metadata);
    free(up);
}

/* E2B's file metadata: each X-Metadata-KEY header (the first of a KEY
 * sent twice), its KEY lowercased. */
static enum MHD_Result metadata_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    upload_t *up = cls;
    static const char prefix[] = "X-Metadata-";
    (void)kind;
    if (strncasecmp(key, prefix, sizeof prefix - 1) != 0)
        return MHD_YES;
    cleanup_free char *name = xstrdup(key + sizeof prefix - 1);
    for (char *c = name; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (!up->metadata)
        up->metadata = json_object();
    if (!json_object_get(up->metadata, name))
        json_object_set_new(up->metadata, name, json_string_nocheck(value ? value : ""));
    return MHD_YES;
}

static void *upload_open(void *ctx, const http_req_t *req)
{
    envd_t *self = ctx;
    const char *unknown;
    sg_error_t *err = NULL;
    kernel_t *k = envd_kernel(self, req, &unknown, &err);
    if (k == NULL) { /* the handler answers, as for any body in memory */
        sg_error_free(&err);
        return NULL;
    }
    upload_t *up = xzalloc(sizeof *up);
    up->envd = self;
    up->conn = req->conn;
    up->kid = xstrdup(kernel_id(k));
    http_who(req, "envd", &up->who);
    const char *q = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "path");
    up->qpath = q && *q ? xstrdup(q) : NULL;
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, metadata_header, up);
    if (up->metadata && sbfs_metadata_check(up->metadata, &err) < 0) {
        upload_fail(up, 400, err->msg);
        sg_error_free(&err);
    }
    const char *type = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type");
    const char *enc = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Encoding");
    if (enc && strcasecmp(enc, "gzip") == 0) {
        up->gzip = inflateInit2(&up->z, 16 + MAX_WBITS) == Z_OK; /* 16: a gzip header */
        if (!up->gzip)
            upload_fail(up, 500, "cannot inflate a gzip body (out of memory)");
    } else if (enc && strcmp(enc, "identity") != 0) {
        upload_fail(up, 400, "a Content-Encoding other than gzip or identity");
    }
    if (up->status) {
        /* answered at the end; nothing is written */
    } else if (type && strncasecmp(type, "multipart/form-data", 19) == 0) {
        up->pp = MHD_create_post_processor(req->conn, 64 * 1024, multipart_value, up);
        if (up->pp == NULL)
            upload_fail(up, 400, "a multipart body without its boundary");
    } else if (up->qpath == NULL) {
        upload_fail(up, 400, "'path' is missing");
    } else {
        part_start(up, up->qpath);
    }
    return up;
}

/* Takes every chunk (a multipart parser cannot give bytes back), keeping
 * what the sandbox has not taken yet, and stops reading from the client
 * until it has: never more than a chunk in memory. */
static void upload_take(upload_t *up, const char *data, size_t len)
{
    if (up->pp)
        MHD_post_process(up->pp, data, len);
    else if (up->nparts)
        part_push(up->parts[0], data, len);
}

/* Inflates what it can of a gzipped chunk, a buffer of output at a time,
 * until the sandbox has bytes pending: how much of the chunk it took (the
 * rest is offered again once the connection is resumed). */
static size_t upload_gunzip(upload_t *up, const char *data, size_t len)
{
    up->z.next_in = (Bytef *)data;
    up->z.avail_in = (uInt)len;
    while (up->z.avail_in > 0 && !up->status && !up->gzip_end) {
        char out[64 * 1024];
        up->z.next_out = (Bytef *)out;
        up->z.avail_out = sizeof out;
        int r = inflate(&up->z, Z_NO_FLUSH);
        size_t n = sizeof out - up->z.avail_out;
        if (r == Z_STREAM_END)
            up->gzip_end = true;
        else if (r != Z_OK && !(r == Z_BUF_ERROR && n))
            upload_fail(up, 400, "the body is not valid gzip (Content-Encoding: gzip)");
        if (n && !up->status)
            upload_take(up, out, n);
        if (!up->status && !all_drained(up) && up->z.avail_in > 0) {
            up->suspended = true;
            http_suspend(up->conn);
            return len - up->z.avail_in;
        }
    }
    return len; /* all of it, or what is dropped after an error or the end */
}

static size_t upload_write(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                           size_t len)
{
    upload_t *up = sink;
    if (up->status)
        return len; /* read and dropped: the error is answered at the end */
    if (up->gzip) {
        size_t took = upload_gunzip(up, data, len);
        if (took < len)
            return took;
    } else {
        upload_take(up, data, len);
    }
    if (!up->status && !all_drained(up) && !up->suspended) {
        up->suspended = true;
        http_suspend(up->conn);
    }
    return len;
}

static enum MHD_Result upload_answer(upload_t *up, struct MHD_Connection *conn)
{
    if (up->status)
        return reply_files_error(conn, up->status, up->msg);
    if (up->nparts == 0)
        return reply_files_error(conn, 400, "no file in the request");
    json_t *list = json_array();
    for (size_t i = 0; i < up->nparts; i++) {
        json_array_append(list, up->parts[i]->entry);
        audit_event(&up->who, "file.write",
                    json_pack("{s:s, s:s, s:I}", "context", up->kid, "path", up->parts[i]->path,
                              "size", up->parts[i]->size));
    }
    return http_reply_json(conn, 200, list);
}

static enum MHD_Result upload_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    upload_t *up = *sink;
    if (!up->finishing) {
        up->finishing = true;
        if (up->gzip && !up->gzip_end && !up->status)
            upload_fail(up, 400, "the gzip body ends before its end (Content-Encoding: gzip)");
        if (up->pp) { /* the last part's last bytes */
            MHD_destroy_post_processor(up->pp);
            up->pp = NULL;
        }
        if (up->nparts) {
            part_t *last = up->parts[up->nparts - 1];
            last->ended = true;
            part_flush(last);
        }
    }
    if (!up->status && !all_done(up)) {
        up->suspended = true;
        http_suspend(conn);
        return MHD_YES;
    }
    enum MHD_Result ret = upload_answer(up, conn);
    upload_free(up);
    *sink = NULL;
    return ret;
}

static void upload_abort(void *ctx, void *sink)
{
    upload_free(sink);
}

/* POST /files when the sink declined: no context for the request. */
static enum MHD_Result files_post(void *ctx, http_req_t *req)
{
    enum MHD_Result ret;
    if (envd_kernel_or_reply(ctx, req, &ret) == NULL)
        return ret;
    return reply_files_error(req->conn, 503, "the context could not take the upload; retry");
}

static const http_sink_t upload_sink = {
    .open = upload_open, .write = upload_write, .finish = upload_finish, .abort = upload_abort};

static const http_route_t routes[] = {
    {"GET", "/files", files_get, 0, NULL},
    {"POST", "/files", files_post, 0, &upload_sink},
};

/* The route layer's refusals (an unknown sandbox, a bad signature) in the
 * same shape. */
static struct MHD_Response *files_error_response(void *ctx, const sg_error_t *err)
{
    (void)ctx;
    int status = sg_error_http_status(err->kind);
    return http_json_response(
        json_pack("{s:i, s:s}", "code", status, "message", err->msg ? err->msg : ""));
}

int envd_files_register(envd_t *self, http_server_t *http, const http_front_t *front,
                        sg_error_t **err)
{
    (void)self;
    http_front_t files_front = *front;
    files_front.error_response = files_error_response;
    return http_routes(http, &files_front, routes, sizeof routes / sizeof *routes, err);
}
