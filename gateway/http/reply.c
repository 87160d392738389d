/* reply: answers as the HTTP server gives them, for every front end (http.h):
 * JSON bodies, errors as {"error", "message"} with the status of their
 * kind (common/error.h's one table), and the replica's header on each. */
#include "gateway/http/http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"

enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r)
{
    if (*replica_id())
        MHD_add_response_header(r, "X-Sandgate-Replica", replica_id());
    return MHD_queue_response(conn, status, r);
}

/* NULL when body cannot be encoded: a programmer's error (a string that
 * is not UTF-8). */
static struct MHD_Response *json_response(json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text == NULL)
        return NULL;
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len] = '\n';
    struct MHD_Response *r = MHD_create_response_from_buffer(len + 1, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return r;
}

static struct MHD_Response *unencodable(void)
{
    log_error("http: a response could not be encoded as JSON");
    return json_response(json_pack("{s:s, s:s}", "error", "internal", "message",
                                   "the response could not be encoded"));
}

struct MHD_Response *http_json_response(json_t *body)
{
    struct MHD_Response *r = json_response(body);
    return r ? r : unencodable();
}

enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    struct MHD_Response *r = json_response(body);
    if (r == NULL) {
        r = unencodable();
        status = 500;
    }
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

json_t *http_error_body(const sg_error_t *err)
{
    char *msg = xstrdup(err->msg); /* it may quote a URL or header: bytes, not text */
    utf8_scrub(msg);
    json_t *body = json_pack("{s:s, s:s}", "error", sg_error_kind_name(err->kind), "message", msg);
    free(msg);
    if (err->kind == SG_E_QUOTA && err->quota) {
        json_object_set_new(body, "quota", json_string(err->quota));
        json_object_set_new(body, "limit", json_integer(err->limit));
    }
    return body;
}

enum MHD_Result http_reply_code_error(struct MHD_Connection *conn, const sg_error_t *err)
{
    unsigned status = sg_error_http_status(err->kind);
    json_t *body = http_error_body(err);
    json_object_del(body, "error");
    json_object_set_new(body, "code", json_integer(status));
    return http_reply_json(conn, status, body);
}

struct MHD_Response *http_code_error_response(void *ctx, const sg_error_t *err)
{
    (void)ctx;
    json_t *j =
        json_pack("{s:i, s:s}", "code", sg_error_http_status(err->kind), "message", err->msg);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    return r;
}

enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err)
{
    return http_reply_json(conn, sg_error_http_status(err->kind), http_error_body(err));
}

/* An error of kind, its message formatted, answered by reply. */
static enum MHD_Result reply_vf(struct MHD_Connection *conn, sg_errkind_t kind,
                                enum MHD_Result (*reply)(struct MHD_Connection *,
                                                         const sg_error_t *),
                                const char *fmt, va_list ap)
{
    sg_error_t e = {.kind = kind};
    if (vasprintf(&e.msg, fmt, ap) < 0)
        abort();
    enum MHD_Result r = reply(conn, &e);
    free(e.msg);
    return r;
}

enum MHD_Result http_reply_code_errorf(struct MHD_Connection *conn, sg_errkind_t kind,
                                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = reply_vf(conn, kind, http_reply_code_error, fmt, ap);
    va_end(ap);
    return r;
}

enum MHD_Result http_reply_empty(struct MHD_Connection *conn, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_reply_errorf(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt,
                                  ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = reply_vf(conn, kind, http_reply_error, fmt, ap);
    va_end(ap);
    return r;
}
