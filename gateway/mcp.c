#include "gateway/mcp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/records.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/audit.h"
#include "gateway/exec.h"
#include "gateway/files.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/resp.h"
#include "proto/jmsg.h"

#define MAX_BATCH 64       /* messages in one JSON-RPC batch */
#define TICK_MS 1000       /* idle culling */
#define PROGRESS_TEXT 4096 /* output bytes carried by one progress notification */
#define HOME "/home/user"

/* JSON-RPC 2.0 error codes, and the two the MCP transport adds. */
enum {
    RPC_PARSE = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_NO_METHOD = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_SERVER = -32000,
    RPC_NO_SESSION = -32001,
};

/* Newest first: initialize answers with the client's version when it is
 * here, else with the first. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

typedef struct {
    char id[37];
    char *kernel_id;  /* NULL until a tool needs the kernel */
    bool kernel_lost; /* it had one that is gone (deleted, culled, lost in a crash) */
    bool internet;    /* its kernels have a network (/mcp?internet=true at initialize) */
    char version[16]; /* negotiated protocol version */
    int64_t last_seen;
    int calls; /* executions in flight */
} session_t;

/* One POST: its JSON-RPC answers, given at once or when the last execution
 * it started ends.  Freed when both the HTTP request and every call are
 * gone. */
typedef struct {
    mcp_t *mcp;
    int refs; /* the HTTP request, and each call in flight */
    struct MHD_Connection *conn;
    resp_t *out; /* the event stream, or the wait for the answers */
    char session[37];
    bool batch, accept_json, streaming;
    int pending;     /* calls not answered yet */
    json_t *replies; /* answers not sent yet (JSON mode) */
} post_t;

/* One execute_python call in flight. */
typedef struct {
    mcp_t *mcp;
    post_t *post;
    json_t *id;       /* the request's id */
    json_t *progress; /* the client's progressToken, or NULL */
    char session[37];
    exec_t *exec;    /* NULL once over */
    json_t *content; /* content blocks so far */
    char *run;       /* stream text not yet made a block */
    size_t run_len;
    int run_kind; /* 0 none, 1 stdout, 2 stderr */
    bool error;
    int progress_n;
} call_t;

struct mcp {
    loop_t *loop;
    kmgr_t *kmgr;
    mcp_config_t cfg;
    records_t *records; /* STATE/mcp; NULL: none */
    zhashx_t *sessions; /* id -> session_t */
    zlistx_t *calls;    /* call_t in flight */
    json_t *tools[2];   /* tools/list's answer without and with a network */
    int tick;
    void (*wake)(void *);
    void *wake_arg;
    /* Who sent the request being handled (or "mcp" and no client for the
     * idle timer), for the audit log: set before each dispatch, so the tools
     * need no extra parameter. */
    audit_who_t who;
};

void mcp_config_defaults(mcp_config_t *cfg)
{
    *cfg = (mcp_config_t){.state_dir = NULL,
                          .kernelspec = "python3",
                          .idle_ms = 3600 * 1000,
                          .exec = NULL,
                          .max_file = 8 << 20,
                          .max_upload = (size_t)256 << 20,
                          .max_sessions = 1024,
                          .loopback_origins = false};
}

/* --- JSON-RPC and HTTP answers ------------------------------------------------ */

static json_t *rpc_result(const json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static json_t *rpc_error(const json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static json_t *rpc_error(const json_t *id, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    utf8_scrub(msg); /* it may quote a header */
    json_t *e = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                          "error", "code", code, "message", msg);
    free(msg);
    return e;
}

static enum MHD_Result send_body(struct MHD_Connection *conn, unsigned status, const char *type,
                                 char *text, const char *session)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (session && *session)
        MHD_add_response_header(r, "Mcp-Session-Id", session);
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A transport-level refusal: an HTTP status with a JSON-RPC error body. */
static enum MHD_Result refuse(struct MHD_Connection *conn, unsigned status, int code,
                              const char *msg)
{
    json_t *e = rpc_error(NULL, code, "%s", msg);
    char *text = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return send_body(conn, status, "application/json", text, NULL);
}

/* One message as a server-sent event. */
static char *sse_event(const json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    char *ev = xasprintf("event: message\ndata: %s\n\n", text);
    free(text);
    return ev;
}

/* --- sessions ----------------------------------------------------------------- */

static void record_write(mcp_t *self, const session_t *s)
{
    if (!self->records)
        return;
    json_t *rec = json_pack("{s:s, s:s, s:s?, s:b}", "id", s->id, "protocol", s->version,
                            "kernel_id", s->kernel_id, "internet", s->internet);
    records_put(self->records, s->id, rec);
    json_decref(rec);
}

static void session_free(void **item)
{
    session_t *s = *item;
    if (s) {
        free(s->kernel_id);
        free(s);
    }
    *item = NULL;
}

static session_t *session_add(mcp_t *self, const char *id, const char *version)
{
    session_t *s = xzalloc(sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->version, sizeof s->version, "%s", version);
    s->last_seen = zclock_mono();
    zhashx_insert(self->sessions, s->id, s);
    return s;
}

/* Ends a session: its kernel and workspace go, and its record. */
static void session_end(mcp_t *self, session_t *s, const char *why)
{
    char *kid = s->kernel_id;
    s->kernel_id = NULL;
    log_info("mcp: session %s ended (%s)", s->id, why);
    audit_event(&self->who, "session.delete",
                json_pack("{s:s, s:s?, s:s}", "session", s->id, "context", kid, "reason", why));
    if (self->records)
        records_remove(self->records, s->id);
    /* Removed before the kernel: its shutdown ends the calls in flight,
     * whose completion looks the session up. */
    zhashx_delete(self->sessions, s->id);
    if (kid && kmgr_get(self->kmgr, kid))
        kmgr_shutdown(self->kmgr, kid, NULL);
    free(kid);
}

/* The session's kernel, started when there is none.  *note says so when a
 * kernel it had is gone (variables lost). */
static kernel_t *session_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err)
{
    *note = NULL;
    kernel_t *k = s->kernel_id ? kmgr_get(self->kmgr, s->kernel_id) : NULL;
    if (k)
        return k;
    if (s->kernel_id) {
        s->kernel_lost = true;
        free(s->kernel_id);
        s->kernel_id = NULL;
    }
    k = kmgr_start_with(self->kmgr, self->cfg.kernelspec, s->internet, NULL, NULL, err);
    if (!k)
        return NULL;
    kernel_add_connections(k, 1); /* culled with the MCP session, not on its own */
    s->kernel_id = xstrdup(kernel_id(k));
    record_write(self, s);
    audit_event(&self->who, "kernel.create",
                json_pack("{s:s, s:s, s:s, s:s, s:b}", "session", s->id, "context", s->kernel_id,
                          "language", kernel_spec(k)->language, "kernelspec", kernel_spec(k)->name,
                          "internet", s->internet));
    log_info("mcp: session %s has kernel %s", s->id, s->kernel_id);
    if (s->kernel_lost)
        *note = "[sandgate: this session's previous kernel is gone (removed, or idle past the "
                "timeout); this is a fresh one: earlier variables and workspace files are lost]";
    s->kernel_lost = false;
    return k;
}

/* The session's kernel for a file tool: its workspace must exist (a kernel
 * started through the launcher gets it a moment after it is made). */
static kernel_t *files_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err)
{
    kernel_t *k = session_kernel(self, s, note, err);
    if (k && !kernel_prepared(k)) {
        sg_error_set(err, SG_E_CONFLICT,
                     "this session's kernel is still starting (its workspace is being "
                     "prepared); retry shortly");
        return NULL;
    }
    return k;
}

/* A session a previous sandgate left in STATE/mcp. */
static void record_load(const char *id, const json_t *rec, void *arg)
{
    mcp_t *self = arg;
    const char *version = json_string_value(json_object_get(rec, "protocol"));
    const char *kid = json_string_value(json_object_get(rec, "kernel_id"));
    if (!version || strlen(id) != 36) {
        log_warn("mcp: ignoring the malformed session record %s", id);
        records_remove(self->records, id);
        return;
    }
    session_t *s = session_add(self, id, version);
    s->internet = json_is_true(json_object_get(rec, "internet"));
    kernel_t *k = kid ? kmgr_get(self->kmgr, kid) : NULL;
    if (k) {
        s->kernel_id = xstrdup(kid);
        kernel_add_connections(k, 1);
    } else if (kid) {
        s->kernel_lost = true;
    }
    log_info("mcp: session %s carried over%s", id,
             k ? " with its kernel" : (kid ? " (its kernel is gone)" : ""));
}

static void on_tick(loop_t *loop, int timer_id, void *arg)
{
    mcp_t *self = arg;
    if (self->cfg.idle_ms <= 0)
        return;
    int64_t now = zclock_mono();
    zlistx_t *idle = zlistx_new();
    for (session_t *s = zhashx_first(self->sessions); s; s = zhashx_next(self->sessions))
        if (s->calls == 0 && now - s->last_seen >= self->cfg.idle_ms)
            zlistx_add_end(idle, s);
    audit_who_conn(&self->who, "mcp", NULL);
    for (session_t *s = zlistx_first(idle); s; s = zlistx_next(idle))
        session_end(self, s, "idle past the timeout");
    zlistx_destroy(&idle);
}

/* --- one POST ------------------------------------------------------------------ */

static void post_unref(post_t *p)
{
    if (--p->refs > 0)
        return;
    resp_free(&p->out);
    json_decref(p->replies);
    free(p);
}

/* An answer (or a notification, while streaming) for the client; steals msg. */
static void post_send(post_t *p, json_t *msg)
{
    if (p->streaming) {
        char *ev = sse_event(msg);
        resp_write(p->out, ev, strlen(ev));
        free(ev);
        json_decref(msg);
    } else {
        json_array_append_new(p->replies, msg);
    }
}

/* A call of this POST is over (answered or cancelled). */
static void post_call_over(post_t *p)
{
    if (--p->pending == 0) {
        if (p->streaming)
            resp_end(p->out);
        else
            resp_ready(p->out);
    }
    post_unref(p);
}

/* Every answer of a POST whose calls are over. */
static enum MHD_Result post_answer(post_t *p)
{
    size_t n = json_array_size(p->replies);
    if (n == 0) /* notifications and responses only, or every call cancelled */
        return send_body(p->conn, 202, NULL, xstrdup(""), p->session);
    if (p->accept_json) {
        char *text =
            json_dumps(p->batch ? p->replies : json_array_get(p->replies, 0), JSON_COMPACT);
        return send_body(p->conn, 200, "application/json", text, p->session);
    }
    char *text = xstrdup("");
    size_t i;
    json_t *m;
    json_array_foreach (p->replies, i, m) {
        char *ev = sse_event(m), *joined = xasprintf("%s%s", text, ev);
        free(ev);
        free(text);
        text = joined;
    }
    return send_body(p->conn, 200, "text/event-stream", text, p->session);
}

/* --- execute_python --------------------------------------------------------------- */

/* A traceback without the terminal colours ipykernel puts in. */
static char *strip_ansi(const char *s)
{
    char *out = xmalloc(strlen(s) + 1), *o = out;
    while (*s) {
        if (s[0] == '\x1b' && s[1] == '[') {
            s += 2;
            while (*s && !(*s >= 0x40 && *s <= 0x7e))
                s++;
            if (*s)
                s++;
            continue;
        }
        *o++ = *s++;
    }
    *o = 0;
    return out;
}

static void add_text(json_t *content, const char *text)
{
    json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text));
}

/* Base64 without the line breaks Jupyter kernels may put in. */
static char *squeeze_base64(const char *b64)
{
    char *out = xmalloc(strlen(b64) + 1), *o = out;
    for (; *b64; b64++)
        if (*b64 != '\n' && *b64 != '\r' && *b64 != ' ')
            *o++ = *b64;
    *o = 0;
    return out;
}

static void add_image(json_t *content, const char *b64, const char *mime)
{
    char *data = squeeze_base64(b64);
    json_array_append_new(
        content, json_pack("{s:s, s:s, s:s}", "type", "image", "data", data, "mimeType", mime));
    free(data);
}

static void flush_run(call_t *c)
{
    if (c->run_len == 0)
        return;
    static const char mark[] = "[stderr]\n";
    size_t skip = c->run_kind == 2 ? 0 : sizeof mark - 1;
    char *t = xmalloc(sizeof mark + c->run_len);
    memcpy(t, mark, sizeof mark - 1);
    memcpy(t + sizeof mark - 1, c->run, c->run_len);
    json_array_append_new(c->content, json_pack("{s:s, s:s%}", "type", "text", "text", t + skip,
                                                sizeof mark - 1 + c->run_len - skip));
    free(t);
    free(c->run);
    c->run = NULL;
    c->run_len = 0;
    c->run_kind = 0;
}

static void on_limit(void *arg, const char *note)
{
    call_t *c = arg;
    flush_run(c);
    size_t n = strlen(note);
    json_array_append_new(c->content, json_pack("{s:s, s:s%}", "type", "text", "text", note,
                                                n && note[n - 1] == '\n' ? n - 1 : n));
}

static void progress(call_t *c, const char *text, size_t n)
{
    if (!c->progress || !c->post || !c->post->streaming)
        return;
    json_t *m = json_stringn(text, utf8_cut(text, n, PROGRESS_TEXT));
    if (!m)
        m = json_string("(output)");
    post_send(c->post, json_pack("{s:s, s:s, s:{s:O, s:i, s:o}}", "jsonrpc", "2.0", "method",
                                 "notifications/progress", "params", "progressToken", c->progress,
                                 "progress", ++c->progress_n, "message", m));
}

static void on_stream(void *arg, bool is_stderr, const char *text, size_t n, const char *date)
{
    call_t *c = arg;
    int kind = is_stderr ? 2 : 1;
    if (kind != c->run_kind)
        flush_run(c);
    c->run = xrealloc(c->run, c->run_len + n + 1);
    memcpy(c->run + c->run_len, text, n);
    c->run_len += n;
    c->run[c->run_len] = 0;
    c->run_kind = kind;
    progress(c, text, n);
}

static void on_result(void *arg, const json_t *data, bool main)
{
    call_t *c = arg;
    const char *png = json_string_value(json_object_get(data, "image/png"));
    const char *jpeg = json_string_value(json_object_get(data, "image/jpeg"));
    const char *plain = json_string_value(json_object_get(data, "text/plain"));
    flush_run(c);
    if (png)
        add_image(c->content, png, "image/png");
    else if (jpeg)
        add_image(c->content, jpeg, "image/jpeg");
    else if (plain) /* "<Figure size 640x480 with 1 Axes>" only when there is no image */
        add_text(c->content, plain);
}

static void on_error(void *arg, const char *ename, const char *evalue, const json_t *tb)
{
    call_t *c = arg;
    flush_run(c);
    c->error = true;
    /* The traceback ends with "ename: evalue"; without one, that line alone. */
    char *text = NULL;
    size_t i;
    json_t *t;
    json_array_foreach (tb, i, t) {
        char *line = strip_ansi(json_string_value(t) ? json_string_value(t) : "");
        char *joined = text ? xasprintf("%s\n%s", text, line) : xstrdup(line);
        free(line);
        free(text);
        text = joined;
    }
    if (!text)
        text = xasprintf("%s: %s", ename, evalue);
    add_text(c->content, text);
    free(text);
}

static bool is_image(const char *mime)
{
    return strcmp(mime, "image/png") == 0 || strcmp(mime, "image/jpeg") == 0 ||
           strcmp(mime, "image/gif") == 0 || strcmp(mime, "image/webp") == 0;
}

static char *base64(const unsigned char *p, size_t n)
{
    size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = xmalloc(cap);
    sodium_bin2base64(out, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

/* Reads a whole regular file (at most max bytes) of the workspace. */
static unsigned char *read_whole(const char *workspace, const char *path, size_t max, size_t *len,
                                 sg_error_t **err)
{
    struct stat st;
    int fd = files_open(workspace, path, &st, err);
    if (fd < 0)
        return NULL;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        sg_error_set(err, SG_E_CONFLICT, "%s is a directory (list_files shows what is in it)",
                     path);
        return NULL;
    }
    if ((size_t)st.st_size > max) {
        close(fd);
        sg_error_set(err, SG_E_LIMIT,
                     "%s has %lld bytes, more than the %zu returned inline; read a part of it "
                     "with execute_python",
                     path, (long long)st.st_size, max);
        return NULL;
    }
    unsigned char *buf = xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *len = got;
    return buf;
}

/* A workspace file as a content block: an image, text, or a resource
 * carrying its bytes.  NULL with *err when it cannot be read. */
static json_t *file_block(mcp_t *self, const char *workspace, const char *path, bool as_resource,
                          sg_error_t **err)
{
    size_t n;
    unsigned char *buf = read_whole(workspace, path, self->cfg.max_file, &n, err);
    if (!buf)
        return NULL;
    const char *mime = files_mime(path);
    char *uri = xasprintf("file://" HOME "/%s", path);
    json_t *block;
    json_t *text = is_image(mime) ? NULL : json_stringn((const char *)buf, n);
    if (is_image(mime)) {
        char *b64 = base64(buf, n);
        block = json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", mime);
        free(b64);
    } else if (text && !as_resource) {
        block = json_pack("{s:s, s:O}", "type", "text", "text", text);
    } else if (text) {
        block = json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "resource", "resource", "uri", uri,
                          "mimeType", mime, "text", text);
    } else {
        char *b64 = base64(buf, n);
        block = json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "resource", "resource", "uri", uri,
                          "mimeType", mime, "blob", b64);
        free(b64);
    }
    json_decref(text);
    free(uri);
    free(buf);
    return block;
}

/* The files the execution wrote under output/: listed, and each returned
 * inline when it is small enough. */
static void add_artifacts(call_t *c, const json_t *list, const char *workspace)
{
    if (json_array_size(list) == 0)
        return;
    char *summary = xstrdup("[files written under output/:");
    size_t i;
    json_t *a;
    json_array_foreach (list, i, a) {
        const char *path = json_string_value(json_object_get(a, "path"));
        json_int_t size = json_integer_value(json_object_get(a, "size"));
        char *s = xasprintf("%s %s (%lld bytes)%s", summary, path, (long long)size,
                            i + 1 < json_array_size(list) ? "," : "]");
        free(summary);
        summary = s;
    }
    add_text(c->content, summary);
    free(summary);
    json_array_foreach (list, i, a) {
        sg_error_t *err = NULL;
        const char *path = json_string_value(json_object_get(a, "path"));
        json_t *block = file_block(c->mcp, workspace, path, true, &err);
        if (block) {
            json_array_append_new(c->content, block);
        } else {
            char *t = xasprintf("[sandgate: %s]", err->msg);
            add_text(c->content, t);
            free(t);
            sg_error_free(&err);
        }
    }
}

static void call_free(call_t *c)
{
    json_decref(c->id);
    json_decref(c->progress);
    json_decref(c->content);
    free(c->run);
    free(c);
}

/* Takes c off the list of calls in flight and out of its session's count. */
static void call_unlist(call_t *c)
{
    mcp_t *self = c->mcp;
    void *h = zlistx_find(self->calls, c);
    if (h)
        zlistx_delete(self->calls, h);
    session_t *s = zhashx_lookup(self->sessions, c->session);
    if (s) {
        s->calls--;
        s->last_seen = zclock_mono();
    }
}

static void on_done(void *arg, const exec_end_t *end)
{
    call_t *c = arg;
    c->exec = NULL;
    flush_run(c);
    if (end->err) {
        char *t = xasprintf("%s: %s", end->error_name, end->err->msg);
        add_text(c->content, t);
        free(t);
    }
    c->error |= end->outcome != OUTCOME_OK;
    add_artifacts(c, end->artifacts, end->workspace);
    if (json_array_size(c->content) == 0)
        add_text(c->content, "[no output]");
    call_unlist(c);
    post_t *p = c->post;
    post_send(
        p, rpc_result(c->id, json_pack("{s:O, s:b}", "content", c->content, "isError", c->error)));
    call_free(c);
    post_call_over(p);
}

static const exec_sink_t exec_events = {.on_stream = on_stream,
                                        .on_result = on_result,
                                        .on_error = on_error,
                                        .on_limit = on_limit,
                                        .on_done = on_done};

/* A tool's answer: content blocks, isError. */
static json_t *tool_result(json_t *content, bool error)
{
    return json_pack("{s:o, s:b}", "content", content, "isError", error);
}

static json_t *tool_text(bool error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *tool_text(bool error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    json_t *content = json_array();
    add_text(content, msg);
    free(msg);
    return tool_result(content, error);
}

/* A timeout argument: absent (the default) or a number of seconds. */
static bool timeout_arg(mcp_t *self, json_t *args, double *t, json_t **bad)
{
    json_t *v = json_object_get(args, "timeout");
    *t = exec_policy_timeout(self->cfg.exec) / 1000.0;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v) || json_number_value(v) <= 0 ||
        json_number_value(v) > self->cfg.exec->max_timeout_ms / 1000) {
        *bad = tool_text(true, "'timeout' must be a number of seconds in (0, %d]",
                         self->cfg.exec->max_timeout_ms / 1000);
        return false;
    }
    *t = json_number_value(v);
    return true;
}

/* Starts an execution: NULL when it is under way (its answer comes later),
 * else the tool result (an error). */
static json_t *tool_execute(mcp_t *self, post_t *p, session_t *s, const json_t *id, json_t *args,
                            json_t *meta)
{
    const char *code = json_string_value(json_object_get(args, "code"));
    if (!code)
        return tool_text(true, "'code' (a string of Python) is required");
    double t;
    json_t *bad = NULL;
    if (!timeout_arg(self, args, &t, &bad))
        return bad;
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = session_kernel(self, s, &note, &err);
    if (!k) {
        json_t *r = tool_text(true, "cannot start a kernel: %s", err->msg);
        sg_error_free(&err);
        return r;
    }
    call_t *c = xzalloc(sizeof *c);
    c->mcp = self;
    c->post = p;
    c->id = json_deep_copy(id);
    json_t *token = json_object_get(meta, "progressToken");
    c->progress = json_is_string(token) || json_is_integer(token) ? json_incref(token) : NULL;
    snprintf(c->session, sizeof c->session, "%s", s->id);
    c->content = json_array();
    if (note)
        add_text(c->content, note);
    exec_opts_t o = {.policy = self->cfg.exec, .timeout_ms = (int)(t * 1000), .who = self->who};
    c->exec = exec_start(k, code, &o, &exec_events, c, &err);
    if (c->exec == NULL) {
        json_t *r = err->kind == SG_E_CONFLICT
                        ? tool_text(true, "%s", err->msg)
                        : tool_text(true,
                                    "the kernel cannot run code: %s (restart_kernel gives a "
                                    "fresh one)",
                                    err->msg);
        sg_error_free(&err);
        call_free(c);
        return r;
    }
    zlistx_add_end(self->calls, c);
    s->calls++;
    p->pending++;
    p->refs++;
    return NULL;
}

/* --- workspace tools ------------------------------------------------------------- */

/* A path as the tools take it: relative to the workspace, or absolute
 * under /home/user. */
static const char *workspace_path(const char *path)
{
    if (strcmp(path, HOME) == 0)
        return "";
    if (strncmp(path, HOME "/", strlen(HOME) + 1) == 0)
        return path + strlen(HOME) + 1;
    return path;
}

static json_t *tool_error(sg_error_t **err)
{
    json_t *r = tool_text(true, "%s", (*err)->msg);
    sg_error_free(err);
    return r;
}

static json_t *tool_list(mcp_t *self, session_t *s, json_t *args)
{
    json_t *v = json_object_get(args, "path");
    if (v && !json_is_string(v))
        return tool_text(true, "'path' must be a string");
    const char *path = workspace_path(v ? json_string_value(v) : "");
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = files_kernel(self, s, &note, &err);
    if (!k)
        return tool_error(&err);
    struct stat st;
    int fd = files_open(kernel_workspace(k), path, &st, &err);
    if (fd < 0)
        return tool_error(&err);
    if (!S_ISDIR(st.st_mode)) {
        close(fd);
        return tool_text(false, "file  %lld  %s", (long long)st.st_size, path);
    }
    json_t *list = files_list(fd, *path ? path : ".", &err);
    close(fd);
    if (!list)
        return tool_error(&err);
    char *text = xasprintf("%s%s%s:\n", note ? note : "", note ? "\n" : "", *path ? path : HOME);
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(list, "entries"), i, e) {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *name = json_string_value(json_object_get(e, "name"));
        char *line =
            strcmp(type, "dir") == 0
                ? xasprintf("%sdir         -  %s/\n", text, name)
                : xasprintf("%s%-5s %10lld  %s\n", text, type,
                            (long long)json_integer_value(json_object_get(e, "size")), name);
        free(text);
        text = line;
    }
    if (json_array_size(json_object_get(list, "entries")) == 0) {
        char *t = xasprintf("%s(empty)\n", text);
        free(text);
        text = t;
    }
    if (json_is_true(json_object_get(list, "truncated"))) {
        char *t = xasprintf("%s[sandgate: the listing was cut short]\n", text);
        free(text);
        text = t;
    }
    json_decref(list);
    json_t *r = tool_text(false, "%s", text);
    free(text);
    return r;
}

static json_t *tool_read(mcp_t *self, session_t *s, json_t *args)
{
    const char *path = json_string_value(json_object_get(args, "path"));
    if (!path)
        return tool_text(true, "'path' (a string) is required");
    path = workspace_path(path);
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = files_kernel(self, s, &note, &err);
    if (!k)
        return tool_error(&err);
    json_t *block = file_block(self, kernel_workspace(k), path, false, &err);
    if (!block)
        return tool_error(&err);
    json_t *content = json_array();
    if (note)
        add_text(content, note);
    json_array_append_new(content, block);
    return tool_result(content, false);
}

static json_t *tool_write(mcp_t *self, session_t *s, json_t *args)
{
    const char *path = json_string_value(json_object_get(args, "path"));
    json_t *text = json_object_get(args, "content");
    const char *encoding = json_string_value(json_object_get(args, "encoding"));
    if (!path || !json_is_string(text))
        return tool_text(true, "'path' and 'content' (strings) are required");
    if (encoding && strcmp(encoding, "utf-8") != 0 && strcmp(encoding, "base64") != 0)
        return tool_text(true, "'encoding' must be \"utf-8\" or \"base64\"");
    path = workspace_path(path);
    const char *data = json_string_value(text);
    size_t n = json_string_length(text);
    unsigned char *bin = NULL;
    if (encoding && strcmp(encoding, "base64") == 0) {
        bin = xmalloc(n + 1);
        size_t got;
        if (sodium_base642bin(bin, n + 1, data, n, " \r\n", &got, NULL,
                              sodium_base64_VARIANT_ORIGINAL) < 0) {
            free(bin);
            return tool_text(true, "'content' is not valid base64");
        }
        data = (const char *)bin;
        n = got;
    }
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = files_kernel(self, s, &note, &err);
    files_upload_t *up =
        k ? files_upload_begin(kernel_workspace(k), path, self->cfg.max_upload, &err) : NULL;
    json_t *info = NULL;
    if (up && files_upload_write(up, data, n, &err) == 0)
        info = files_upload_commit(&up, &err);
    files_upload_abort(&up);
    free(bin);
    if (!info)
        return tool_error(&err);
    audit_event(&self->who, "file.write",
                json_pack("{s:s, s:s, s:O, s:O}", "session", s->id, "context", kernel_id(k), "path",
                          json_object_get(info, "path"), "size", json_object_get(info, "size")));
    json_t *r = tool_text(false, "%s%swrote %lld bytes to %s", note ? note : "", note ? "\n" : "",
                          (long long)json_integer_value(json_object_get(info, "size")),
                          json_string_value(json_object_get(info, "path")));
    json_decref(info);
    metrics.uploads++;
    return r;
}

static json_t *tool_restart(mcp_t *self, session_t *s)
{
    kernel_t *k = s->kernel_id ? kmgr_get(self->kmgr, s->kernel_id) : NULL;
    sg_error_t *err = NULL;
    if (!k) {
        const char *note;
        if (!session_kernel(self, s, &note, &err))
            return tool_error(&err);
        return tool_text(false, "started a fresh kernel (there was none running)");
    }
    if (kernel_restart(k, &err) < 0)
        return tool_error(&err);
    audit_event(&self->who, "kernel.restart",
                json_pack("{s:s, s:s}", "session", s->id, "context", kernel_id(k)));
    log_info("mcp: session %s restarted its kernel", s->id);
    return tool_text(false, "the kernel was restarted: variables and imports are gone; files in "
                            "the workspace are kept");
}

/* --- the tools' descriptions ---------------------------------------------------- */

static json_t *tools_json(const mcp_config_t *cfg, bool internet)
{
    cleanup_free char *text = xasprintf(
        "["
        "{\"name\": \"execute_python\", \"title\": \"Run Python\","
        " \"description\": \"Runs Python code in this session's own Jupyter kernel, inside a "
        "gVisor sandbox %s. Variables, imports and files persist between "
        "calls of the same session. Returns stdout, stderr (marked [stderr]), the value of the "
        "last expression, the exception with its traceback, and images (matplotlib figures, "
        "PNG/JPEG display output). Files the code writes under output/ are returned as well. "
        "The working directory is " HOME ", the session's workspace.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"code\": {\"type\": \"string\", \"description\": \"the Python source to run\"},"
        "  \"timeout\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": %d,"
        "   \"description\": \"seconds before the execution is interrupted (default %d); "
        "variables survive an interrupt\"}},"
        "  \"required\": [\"code\"], \"additionalProperties\": false}},"
        "{\"name\": \"list_files\", \"title\": \"List workspace files\","
        " \"description\": \"Lists a directory of the session's workspace (" HOME "; paths are "
        "relative to it, or absolute under it).\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"path\": {\"type\": \"string\", \"description\": \"a directory; default: the "
        "workspace itself\"}}, \"additionalProperties\": false},"
        " \"annotations\": {\"readOnlyHint\": true}},"
        "{\"name\": \"read_file\", \"title\": \"Read a workspace file\","
        " \"description\": \"Returns a file of the session's workspace: text as text, images "
        "as images, anything else as an embedded resource (base64). At most %zu bytes.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"path\": {\"type\": \"string\", \"description\": \"the file, relative to " HOME
        "\"}}, \"required\": [\"path\"], \"additionalProperties\": false},"
        " \"annotations\": {\"readOnlyHint\": true}},"
        "{\"name\": \"write_file\", \"title\": \"Write a workspace file\","
        " \"description\": \"Creates or replaces a file of the session's workspace (missing "
        "directories are created), for the code to use.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"path\": {\"type\": \"string\", \"description\": \"the file, relative to " HOME "\"},"
        "  \"content\": {\"type\": \"string\", \"description\": \"the file's content\"},"
        "  \"encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"],"
        "   \"description\": \"how content is encoded (default utf-8)\"}},"
        "  \"required\": [\"path\", \"content\"], \"additionalProperties\": false}},"
        "{\"name\": \"restart_kernel\", \"title\": \"Restart the kernel\","
        " \"description\": \"Replaces the session's kernel with a fresh one: every variable and "
        "import is lost, workspace files are kept. Use it when the kernel is stuck or dead.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {},"
        "  \"additionalProperties\": false},"
        " \"annotations\": {\"destructiveHint\": true}}"
        "]",
        internet ? "whose network reaches what the server allows (the internet; never private "
                   "networks, cloud metadata or the host)"
                 : "with no network access",
        cfg->exec->max_timeout_ms / 1000, exec_policy_timeout(cfg->exec) / 1000, cfg->max_file);
    json_error_t jerr;
    json_t *tools = json_loads(text, 0, &jerr);
    if (!tools) { /* a programmer's error in the literal above */
        log_error("mcp: the tool list does not parse: %s (column %d)", jerr.text, jerr.column);
        abort();
    }
    return tools;
}

/* --- dispatch ------------------------------------------------------------------ */

static bool supported_version(const char *v)
{
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

static json_t *initialize(mcp_t *self, post_t *p, const json_t *id, json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked)
        return rpc_error(id, RPC_INVALID_PARAMS, "initialize needs params.protocolVersion");
    const char *version = supported_version(asked) ? asked : versions[0];
    /* A network is asked for in the server's URL (/mcp?internet=true), the
     * one setting every MCP client lets its user write. */
    const char *net = MHD_lookup_connection_value(p->conn, MHD_GET_ARGUMENT_KIND, "internet");
    bool internet = net && (strcmp(net, "true") == 0 || strcmp(net, "1") == 0);
    if (net && !internet && strcmp(net, "false") != 0 && strcmp(net, "0") != 0)
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "the URL's internet= must be true or false, not '%.32s'", net);
    if (internet && !kmgr_has_egress(self->kmgr))
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "internet=true: this server gives sandboxes no network (its operator "
                         "has not set --egress-allow)");
    char sid[37];
    replica_uuid(sid);
    session_t *s = session_add(self, sid, version);
    s->internet = internet;
    record_write(self, s);
    snprintf(p->session, sizeof p->session, "%s", sid);
    audit_event(
        &self->who, "session.create",
        json_pack("{s:s, s:s, s:b}", "session", sid, "protocol", version, "internet", internet));
    json_t *client = json_object_get(params, "clientInfo");
    const char *cname = json_string_value(json_object_get(client, "name"));
    const char *cver = json_string_value(json_object_get(client, "version"));
    log_info("mcp: session %s started (client %s %s, protocol %s%s)", sid, cname ? cname : "?",
             cver ? cver : "?", version, internet ? ", with a network" : "");
    cleanup_free char *instructions = xasprintf(
        "execute_python runs Python in a stateful, sandboxed Jupyter kernel that belongs to this "
        "session (%s). State persists between calls; files live in " HOME "; files written "
        "under output/ come back with the result. Use list_files, read_file and write_file for "
        "the workspace, and restart_kernel for a fresh kernel.",
        internet ? "with a network: the internet, as the server allows" : "no network");
    return rpc_result(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
                                    version, "capabilities", "tools", "listChanged", 0,
                                    "serverInfo", "name", "sandgate", "title", "sandgate",
                                    "version", PACKAGE_VERSION, "instructions", instructions));
}

/* A request (it has an id).  Returns its answer, or NULL when a call is
 * under way and answers later. */
static json_t *request(mcp_t *self, post_t *p, session_t *s, const char *method, const json_t *id,
                       json_t *params)
{
    if (strcmp(method, "initialize") == 0)
        return initialize(self, p, id, params);
    if (strcmp(method, "ping") == 0)
        return rpc_result(id, json_object());
    if (strcmp(method, "tools/list") == 0)
        return rpc_result(id, json_pack("{s:O}", "tools", self->tools[s && s->internet]));
    if (strcmp(method, "tools/call") != 0)
        return rpc_error(id, RPC_NO_METHOD, "Method not found: %s", method);
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    if (!name)
        return rpc_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name (a string)");
    if (args && !json_is_object(args) && !json_is_null(args))
        return rpc_error(id, RPC_INVALID_PARAMS, "params.arguments must be an object");
    json_t *empty = json_object();
    if (!json_is_object(args))
        args = empty;
    json_t *result;
    if (strcmp(name, "execute_python") == 0)
        result = tool_execute(self, p, s, id, args, json_object_get(params, "_meta"));
    else if (strcmp(name, "list_files") == 0)
        result = tool_list(self, s, args);
    else if (strcmp(name, "read_file") == 0)
        result = tool_read(self, s, args);
    else if (strcmp(name, "write_file") == 0)
        result = tool_write(self, s, args);
    else if (strcmp(name, "restart_kernel") == 0)
        result = tool_restart(self, s);
    else {
        json_decref(empty);
        return rpc_error(id, RPC_INVALID_PARAMS, "Unknown tool: %s", name);
    }
    json_decref(empty);
    return result ? rpc_result(id, result) : NULL;
}

/* Stops a call's code and drops its answer (the caller gave it up). */
static void call_cancel(call_t *c, const char *why)
{
    char *msg = xasprintf("mcp: session %s %s", c->session, why);
    exec_cancel(&c->exec, msg);
    free(msg);
    post_t *p = c->post;
    call_unlist(c);
    call_free(c);
    post_call_over(p);
}

/* notifications/cancelled: the client gave up a request.  The spec says a
 * cancelled request gets no answer. */
static void cancel(mcp_t *self, session_t *s, json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls))
        if (strcmp(c->session, s->id) == 0 && json_equal(c->id, rid)) {
            call_cancel(c, "cancelled a call");
            return;
        }
}

static void dispatch(mcp_t *self, post_t *p, session_t *s, json_t *msg)
{
    if (!json_is_object(msg)) {
        post_send(p, rpc_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: not a JSON object"));
        return;
    }
    json_t *id = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    json_t *params = json_object_get(msg, "params");
    const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));
    bool id_ok = json_is_string(id) || json_is_integer(id);
    if (!jsonrpc || strcmp(jsonrpc, "2.0") != 0) {
        post_send(p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
                               "Invalid Request: 'jsonrpc' must be \"2.0\""));
        return;
    }
    if (!method) {
        if (id_ok && (json_object_get(msg, "result") || json_object_get(msg, "error")))
            return; /* a response; sandgate sends no requests, so there is nothing to match */
        post_send(
            p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST, "Invalid Request: no 'method'"));
        return;
    }
    if (!json_is_string(method)) {
        post_send(p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
                               "Invalid Request: 'method' must be a string"));
        return;
    }
    if (id && !id_ok) {
        post_send(p, rpc_error(NULL, RPC_INVALID_REQUEST,
                               "Invalid Request: 'id' must be a string or an integer"));
        return;
    }
    const char *name = json_string_value(method);
    if (!id) { /* a notification: never answered */
        if (strcmp(name, "notifications/cancelled") == 0 && s && json_is_object(params))
            cancel(self, s, params);
        return;
    }
    if (params && !json_is_object(params)) {
        post_send(p, rpc_error(id, RPC_INVALID_PARAMS, "'params' must be an object"));
        return;
    }
    json_t *answer = request(self, p, s, name, id, params);
    if (answer)
        post_send(p, answer);
}

/* Which answers the client takes (Accept); false when neither. */
static bool acceptable(struct MHD_Connection *conn, bool *json, bool *sse)
{
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    if (!accept || !*accept) {
        *json = true;
        *sse = false;
        return true;
    }
    *json = strcasestr(accept, "application/json") || strstr(accept, "*/*") ||
            strcasestr(accept, "application/*");
    *sse = strcasestr(accept, "text/event-stream") != NULL;
    return *json || *sse;
}

/* DNS rebinding: with no token, a browser page of another origin must not
 * drive the kernels through a user's loopback sandgate. */
static bool origin_allowed(mcp_t *self, struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!self->cfg.loopback_origins || !origin)
        return true;
    const char *host = strstr(origin, "://");
    host = host ? host + 3 : origin;
    static const char *const loopback[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(loopback[i]);
        if (strncasecmp(host, loopback[i], n) == 0 && (host[n] == 0 || host[n] == ':'))
            return true;
    }
    return false;
}

static enum MHD_Result handle_post(mcp_t *self, struct MHD_Connection *conn, const char *body,
                                   size_t len, void **req_state)
{
    audit_who_conn(&self->who, "mcp", conn);
    const char *ctype = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (!ctype || strncasecmp(ctype, "application/json", 16) != 0 ||
        (ctype[16] != 0 && ctype[16] != ';' && ctype[16] != ' '))
        return refuse(conn, 415, RPC_SERVER,
                      "Unsupported Media Type: Content-Type must be application/json");
    bool accept_json, accept_sse;
    if (!acceptable(conn, &accept_json, &accept_sse))
        return refuse(conn, 406, RPC_SERVER,
                      "Not Acceptable: accept application/json or text/event-stream");
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!doc) {
        char msg[256];
        snprintf(msg, sizeof msg, "Parse error: %s (line %d, column %d)", jerr.text, jerr.line,
                 jerr.column);
        return refuse(conn, 400, RPC_PARSE, msg);
    }
    bool batch = json_is_array(doc);
    size_t n = batch ? json_array_size(doc) : 1;
    enum MHD_Result ret;
    if (batch && n == 0) {
        ret = refuse(conn, 400, RPC_INVALID_REQUEST, "Invalid Request: an empty batch");
        goto out;
    }
    if (n > MAX_BATCH) {
        char msg[96];
        snprintf(msg, sizeof msg, "Invalid Request: a batch of more than %d messages", MAX_BATCH);
        ret = refuse(conn, 400, RPC_INVALID_REQUEST, msg);
        goto out;
    }
    bool init = false;
    for (size_t i = 0; i < n; i++) {
        json_t *m = batch ? json_array_get(doc, i) : doc;
        const char *method = json_string_value(json_object_get(m, "method"));
        init |= method && strcmp(method, "initialize") == 0;
    }
    session_t *s = NULL;
    const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (init && n > 1) {
        ret = refuse(conn, 400, RPC_INVALID_REQUEST,
                     "Invalid Request: initialize must be sent alone, not in a batch");
        goto out;
    }
    if (init && zhashx_size(self->sessions) >= (size_t)self->cfg.max_sessions) {
        char msg[96];
        snprintf(msg, sizeof msg, "the maximum of %d MCP sessions is open; try again later",
                 self->cfg.max_sessions);
        ret = refuse(conn, 503, RPC_SERVER, msg);
        goto out;
    }
    if (!init) {
        if (!sid) {
            ret = refuse(conn, 400, RPC_SERVER,
                         "Bad Request: no Mcp-Session-Id header (send initialize first)");
            goto out;
        }
        if (!(s = zhashx_lookup(self->sessions, sid))) {
            ret = refuse(conn, 404, RPC_NO_SESSION,
                         "Session not found: it was deleted or expired; initialize a new one");
            goto out;
        }
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (v && !supported_version(v)) {
            char msg[160];
            snprintf(msg, sizeof msg, "Bad Request: unsupported MCP-Protocol-Version '%.40s'", v);
            ret = refuse(conn, 400, RPC_SERVER, msg);
            goto out;
        }
        s->last_seen = zclock_mono();
    }
    post_t *p = xzalloc(sizeof *p);
    p->mcp = self;
    p->refs = 1;
    p->conn = conn;
    p->out = resp_new(self->loop, conn, self->wake, self->wake_arg);
    p->batch = batch;
    p->accept_json = accept_json;
    p->replies = json_array();
    if (s)
        snprintf(p->session, sizeof p->session, "%s", s->id);
    for (size_t i = 0; i < n; i++)
        dispatch(self, p, s, batch ? json_array_get(doc, i) : doc);
    if (p->pending == 0) {
        ret = post_answer(p);
        post_unref(p);
        goto out;
    }
    *req_state = p;
    if (accept_sse) { /* stream: progress now, answers as they come */
        p->streaming = true;
        size_t i;
        json_t *m;
        json_array_foreach (p->replies, i, m) {
            char *ev = sse_event(m);
            resp_write(p->out, ev, strlen(ev));
            free(ev);
        }
        json_array_clear(p->replies);
        struct MHD_Response *r = resp_stream(p->out, ": keepalive\n\n");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "Mcp-Session-Id", p->session);
        ret = http_queue(conn, 200, r);
        MHD_destroy_response(r);
    } else { /* JSON: answer when every call is over */
        ret = resp_wait(p->out);
    }
out:
    json_decref(doc);
    return ret;
}

static enum MHD_Result handle_request(void *ctx, struct MHD_Connection *conn, const char *method,
                                      const char *url, const char *body, size_t len,
                                      void **req_state)
{
    mcp_t *self = ctx;
    post_t *p = *req_state;
    if (p) { /* a JSON-mode POST resumed */
        if (p->pending > 0)
            return resp_wait(p->out);
        return post_answer(p);
    }
    if (!origin_allowed(self, conn))
        return refuse(conn, 403, RPC_SERVER,
                      "Forbidden: this Origin may not use a sandgate that has no token");
    if (strcmp(method, "POST") == 0)
        return handle_post(self, conn, body, len, req_state);
    if (strcmp(method, "DELETE") == 0) {
        const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Mcp-Session-Id");
        session_t *s = sid ? zhashx_lookup(self->sessions, sid) : NULL;
        if (!sid)
            return refuse(conn, 400, RPC_SERVER, "Bad Request: no Mcp-Session-Id header");
        if (!s)
            return refuse(conn, 404, RPC_NO_SESSION, "Session not found");
        audit_who_conn(&self->who, "mcp", conn);
        session_end(self, s, "deleted by the client");
        return send_body(conn, 200, NULL, xstrdup(""), NULL);
    }
    json_t *e = rpc_error(NULL, RPC_SERVER,
                          "Method Not Allowed: POST JSON-RPC to /mcp, DELETE ends a session "
                          "(sandgate opens no server-initiated stream)");
    char *text = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, DELETE");
    enum MHD_Result ret = http_queue(conn, 405, r);
    MHD_destroy_response(r);
    return ret;
}

/* The request whose state this is has ended (answered or broken off):
 * executions still running for it are interrupted. */
static void request_done(void *ctx, void *req_state, bool completed)
{
    mcp_t *self = ctx;
    post_t *p = req_state;
    resp_set_gone(p->out);
    /* The client left with calls running: stop their code, drop their output. */
    zlistx_t *mine = zlistx_new();
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls))
        if (c->post == p)
            zlistx_add_end(mine, c);
    for (call_t *c = zlistx_first(mine); c; c = zlistx_next(mine))
        call_cancel(c, "lost its client during a call");
    zlistx_destroy(&mine);
    post_unref(p);
}

static const http_handler_t handler = {.handle = handle_request, .done = request_done};

int mcp_register(mcp_t *self, http_server_t *http, sg_error_t **err)
{
    if (http_route_add(http, "/mcp", 0, &handler, self, err) < 0 ||
        http_route_add(http, "/mcp/", 0, &handler, self, err) < 0)
        return -1;
    return 0;
}

/* --- lifecycle ------------------------------------------------------------------ */

mcp_t *mcp_new(loop_t *loop, kmgr_t *kmgr, const mcp_config_t *cfg, void (*wake)(void *),
               void *wake_arg)
{
    mcp_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->sessions = zhashx_new();
    zhashx_set_destructor(self->sessions, session_free);
    self->calls = zlistx_new();
    self->tools[0] = tools_json(cfg, false);
    self->tools[1] = tools_json(cfg, true);
    if (cfg->state_dir) {
        cleanup_free char *dir = xasprintf("%s/mcp", cfg->state_dir);
        sg_error_t *err = NULL;
        self->records = records_open(dir, "mcp session", &err);
        if (self->records) {
            records_each(self->records, record_load, self);
        } else {
            log_warn("mcp: %s; sessions will not survive a restart", err->msg);
            sg_error_free(&err);
        }
    }
    self->tick = loop_timer(loop, TICK_MS, 0, on_tick, self);
    return self;
}

void mcp_destroy(mcp_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    mcp_t *self = *self_p;
    loop_timer_end(self->loop, self->tick);
    /* Calls still listed belong to no request (the HTTP server is gone). */
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls)) {
        exec_detach(&c->exec);
        call_free(c);
    }
    zlistx_destroy(&self->calls);
    zhashx_destroy(&self->sessions);
    json_decref(self->tools[0]);
    json_decref(self->tools[1]);
    records_close(&self->records);
    free(self);
    *self_p = NULL;
}
