/* execute: POST /execute (internal.h) — the request checked, its context
 * found or made, the execution started through gateway/session/exec.h,
 * and what it says streamed back as E2B's NDJSON lines (stdout, stderr,
 * result, error, number_of_executions, end_of_execution), or gathered into
 * one JSON answer. */
#include "gateway/rest/internal.h"

#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"

/* --- the lines ------------------------------------------------------------------- */

/* An NDJSON line for a stream's client (JSON mode gathers into agg instead). */
static void emit(stream_t *s, json_t *line)
{
    if (s->json_mode) {
        json_decref(line);
        return;
    }
    char *text = json_dumps(line, JSON_COMPACT);
    json_decref(line);
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the line's end */
    resp_write(s->out, text, n + 1);
    free(text);
}

/* JSON mode only: a stream's client gets each line as it comes.  Lengths,
 * not NULs, end the texts: kernels print NULs too. */
static void append_text(json_t *agg, const char *key, const char *text, size_t n)
{
    if (agg == NULL)
        return;
    json_t *old = json_object_get(agg, key);
    size_t had = json_string_length(old);
    char *joined = xmalloc(had + n + 1);
    memcpy(joined, json_string_value(old) ? json_string_value(old) : "", had);
    memcpy(joined + had, text, n);
    json_object_set_new(agg, key, json_stringn_nocheck(joined, had + n));
    free(joined);
}

static const struct {
    const char *mime, *key;
} mime_keys[] = {{"text/plain", "text"},        {"text/html", "html"},
                 {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
                 {"image/png", "png"},          {"image/jpeg", "jpeg"},
                 {"application/pdf", "pdf"},    {"text/latex", "latex"},
                 {"application/json", "json"},  {"application/javascript", "javascript"},
                 {"e2b/data", "data"},          {"e2b/chart", "chart"}};

/* A text/plain as E2B's code interpreter gives it: one pair of quotes
 * around it removed ('hi' is hi), as its server's Result does. */
static json_t *e2b_text(json_t *v)
{
    const char *t = json_string_value(v);
    size_t n = json_string_length(v);
    if (t && n >= 1 && ((t[0] == '\'' && t[n - 1] == '\'') || (t[0] == '"' && t[n - 1] == '"')))
        return json_stringn_nocheck(t + 1, n >= 2 ? n - 2 : 0);
    return json_incref(v);
}

/* A MIME bundle as an E2B result line (e2b: text as E2B's server gives it). */
static json_t *result_line(const json_t *data, bool main, bool e2b)
{
    json_t *r = json_pack("{s:s, s:b}", "type", "result", "is_main_result", main);
    json_t *extra = json_object();
    const char *mime;
    json_t *v;
    json_object_foreach ((json_t *)data, mime, v) {
        const char *key = NULL;
        for (size_t i = 0; i < sizeof mime_keys / sizeof mime_keys[0]; i++)
            if (strcmp(mime, mime_keys[i].mime) == 0)
                key = mime_keys[i].key;
        if (e2b && key && strcmp(key, "text") == 0)
            json_object_set_new(r, key, e2b_text(v));
        else
            json_object_set(key ? r : extra, key ? key : mime, v);
    }
    if (json_object_size(extra))
        json_object_set_new(r, "extra", extra);
    else
        json_decref(extra);
    return r;
}

static json_t *error_line(const char *name, const char *value, const char *traceback)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value", value,
                     "traceback", traceback);
}

/* --- what the execution says, as E2B lines ------------------------------------------- */

static void on_stream(void *arg, bool is_stderr, const char *text, size_t n, const char *date)
{
    stream_t *s = arg;
    const char *which = is_stderr ? "stderr" : "stdout";
    append_text(s->agg, which, text, n);
    emit(s, json_pack("{s:s, s:s%, s:s}", "type", which, "text", text, n, "timestamp", date));
}

static void on_limit(void *arg, const char *note)
{
    stream_t *s = arg;
    emit(s, json_pack("{s:s, s:s}", "type", "stderr", "text", note));
    append_text(s->agg, "stderr", note, strlen(note));
}

static void on_result(void *arg, const json_t *data, bool main)
{
    stream_t *s = arg;
    json_t *line = result_line(data, main, s->e2b_text);
    if (s->agg) {
        json_t *copy = json_deep_copy(line);
        json_object_del(copy, "type");
        json_array_append_new(json_object_get(s->agg, "results"), copy);
    }
    emit(s, line);
}

static void on_error(void *arg, const char *ename, const char *evalue, const json_t *tb)
{
    stream_t *s = arg;
    char *joined = xstrdup("");
    size_t i;
    json_t *t;
    json_array_foreach (tb, i, t) {
        char *n = xasprintf("%s%s%s", joined, i ? "\n" : "", json_string_value(t) ?: "");
        free(joined);
        joined = n;
    }
    json_object_set_new(
        s->agg, "error",
        json_pack("{s:s, s:s, s:s}", "name", ename, "value", evalue, "traceback", joined));
    emit(s, error_line(ename, evalue, joined));
    free(joined);
}

static void on_count(void *arg, json_int_t n)
{
    stream_t *s = arg;
    json_object_set_new(s->agg, "execution_count", json_integer(n));
    emit(s, json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count", n));
}

/* The command runner's report becomes the reply. */
static void command_done(stream_t *s, const exec_end_t *end)
{
    json_t *doc = end->report ? json_deep_copy(end->report) : NULL;
    if (end->err && end->err->kind == SG_E_TIMEOUT) {
        json_decref(doc);
        doc = json_pack("{s:s, s:s, s:i, s:{s:s, s:s}}", "stdout", "", "stderr", end->err->msg,
                        "exit_code", 124, "error", "name", "TimeoutError", "value", end->err->msg);
    } else if (end->err || !doc) {
        const char *why =
            end->err ? end->err->msg : json_string_value(json_object_get(end->reply, "evalue"));
        json_decref(doc);
        s->status = 503;
        doc = json_pack("{s:s, s:s}", "error", "unavailable", "message",
                        why ? why : "the command runner gave no report");
    }
    json_decref(s->agg);
    s->agg = doc;
}

static void on_done(void *arg, const exec_end_t *end)
{
    stream_t *s = arg;
    s->exec = NULL;
    if (end->err && s->e2b_text && !s->json_mode && kernel_shut_down(s->k)) {
        /* E2B's code interpreter, whose sandbox was killed meanwhile: the
         * stream is cut, as E2B's is, and the SDK raises its own "killed" */
        s->done = true;
        resp_abort(s->out);
        api_stream_unref(s); /* the execution's reference */
        return;
    }
    if (s->command) {
        command_done(s, end);
    } else if (end->err && end->err->kind == SG_E_CONFLICT && s->json_mode) {
        /* Nothing ran: the context could not take it (a resume refused). */
        json_decref(s->agg);
        s->agg = http_error_body(end->err);
        s->status = sg_error_http_status(end->err->kind);
        emit(s, error_line(end->error_name, end->err->msg, ""));
    } else if (end->err) {
        const char *name = end->error_name;
        json_object_set_new(
            s->agg, "error",
            json_pack("{s:s, s:s, s:s}", "name", name, "value", end->err->msg, "traceback", ""));
        emit(s, error_line(name, end->err->msg, ""));
    }
    /* The files written under output/, announced with where to get them. */
    size_t i;
    json_t *a;
    json_array_foreach (end->artifacts, i, a) {
        char *url = xasprintf("/contexts/%s/files/%s", kernel_id(s->k),
                              json_string_value(json_object_get(a, "path")));
        json_object_set_new(a, "url", json_string(url));
        free(url);
        json_t *line = json_deep_copy(a);
        json_object_set_new(line, "type", json_string("artifact"));
        emit(s, line);
    }
    if (s->agg && (!s->command || json_array_size(end->artifacts)))
        json_object_set(s->agg, "artifacts", end->artifacts);
    if (s->status == 0)
        json_object_set_new(s->agg, "duration_ms", json_integer((json_int_t)end->duration_ms));
    emit(s, json_pack("{s:s}", "type", "end_of_execution"));
    s->done = true;
    if (s->json_mode)
        resp_ready(s->out);
    else
        resp_end(s->out);
    api_stream_unref(s); /* the execution's reference */
}

static const exec_sink_t exec_events = {.on_stream = on_stream,
                                        .on_result = on_result,
                                        .on_error = on_error,
                                        .on_count = on_count,
                                        .on_limit = on_limit,
                                        .on_done = on_done};

/* --- the request ---------------------------------------------------------------- */

/* env_vars: strings under variable names, as every kernel's language takes
 * them (envscript.h); false after a 400. */
static bool env_vars_ok(const json_t *env, struct MHD_Connection *conn, enum MHD_Result *ret)
{
    static const char name_chars[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789";
    const char *k;
    json_t *v;
    json_object_foreach ((json_t *)env, k, v) {
        if (!json_is_string(v)) {
            *ret = http_reply_errorf(conn, SG_E_INVALID, "env_vars['%s'] must be a string", k);
            return false;
        }
        if (!*k || strspn(k, name_chars) != strlen(k) || (*k >= '0' && *k <= '9')) {
            *ret = http_reply_errorf(conn, SG_E_INVALID,
                                     "env_vars: '%s' is not a variable name (letters, digits and "
                                     "'_', not first a digit)",
                                     k);
            return false;
        }
    }
    return true;
}

enum MHD_Result api_execute(api_t *self, http_req_t *call, const char *body, size_t len,
                            void **req_state)
{
    struct MHD_Connection *conn = call->conn;
    enum MHD_Result ret = MHD_NO;
    json_t *req = api_parse_body(conn, body, len, &ret);
    if (!req)
        return ret;
    json_t *code, *ctx, *lang, *env, *timeout, *command, *rich;
    if (!api_field(req, "code", JSON_STRING, &code, conn, &ret) ||
        !api_field(req, "context_id", JSON_STRING, &ctx, conn, &ret) ||
        !api_field(req, "language", JSON_STRING, &lang, conn, &ret) ||
        !api_field(req, "env_vars", JSON_OBJECT, &env, conn, &ret) ||
        !api_field(req, "timeout", JSON_REAL, &timeout, conn, &ret) ||
        !api_field(req, "command", JSON_STRING, &command, conn, &ret) ||
        !api_field(req, "rich_formats", JSON_TRUE, &rich, conn, &ret))
        goto out;
    if ((code == NULL) == (command == NULL)) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "give either 'code' or 'command'");
        goto out;
    }
    if (ctx && lang) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "give 'context_id' or 'language', not both");
        goto out;
    }
    if (!env_vars_ok(env, conn, &ret))
        goto out;
    const exec_policy_t *policy = self->cfg.exec;
    double t = timeout ? json_number_value(timeout) : exec_policy_timeout(policy) / 1000.0;
    if (t <= 0 || t > policy->max_timeout_ms / 1000) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "'timeout' must be in (0, %d] seconds",
                                policy->max_timeout_ms / 1000);
        goto out;
    }
    sg_error_t *err = NULL;
    kernel_t *k;
    audit_who_t who;
    tenant_quota_t quota;
    http_who(call, "rest", &who);
    /* E2B's code interpreter names its sandbox in a header, its context (if
     * any) in the body: a sandbox is a context here (e2b.c). */
    const char *sandbox = e2b_sandbox_header(conn);
    if (!ctx && sandbox) { /* the sandbox's context of the language asked for */
        kernel_t *host = http_resolve(call, "context", sandbox);
        if (!host) {
            ret = http_reply_unknown(call, "sandbox", sandbox);
            goto out;
        }
        k = lang ? api_sandbox_context(self, call->tenant, host, json_string_value(lang), &who,
                                       &quota, &err)
                 : host;
        if (!k) {
            ret = api_reply_refused(conn, &quota, &err);
            goto out;
        }
    } else if (ctx) {
        k = http_resolve(call, "context", json_string_value(ctx));
        if (!k) {
            ret = http_reply_unknown(call, "context", json_string_value(ctx));
            goto out;
        }
    } else {
        k = api_tenant_context(self, call->tenant, lang ? json_string_value(lang) : "python", &who,
                               &quota, &err);
        if (!k) {
            ret = api_reply_refused(conn, &quota, &err);
            goto out;
        }
    }
    if (command && strcmp(kernel_spec(k)->language, "python") != 0) {
        ret = http_reply_errorf(conn, SG_E_INVALID,
                                "'command' needs a Python context (this one runs %s)",
                                kernel_spec(k)->language);
        goto out;
    }
    stream_t *s = api_stream_new(self, conn, k);
    s->command = command != NULL;
    /* E2B's code interpreter names its sandbox in this header, always. */
    s->e2b_text = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id") != NULL;
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    s->json_mode =
        s->command || (accept && strstr(accept, "application/json") && !strstr(accept, "ndjson"));
    if (s->json_mode) /* a stream's client gets each line as it comes: nothing to gather */
        s->agg = json_pack("{s:s, s:s, s:[], s:n, s:n, s:[]}", "stdout", "", "stderr", "",
                           "results", "error", "execution_count", "artifacts");
    exec_opts_t o = {.policy = policy,
                     .timeout_ms = (int)(t * 1000),
                     .env = env,
                     .rich_formats = rich ? json_is_true(rich) : policy->rich_formats,
                     .command = s->command,
                     .who = who,
                     .quota = &quota};
    s->exec =
        exec_start(k, json_string_value(s->command ? command : code), &o, &exec_events, s, &err);
    if (s->exec == NULL) {
        ret = api_reply_refused(conn, &quota, &err);
        s->refs = 1;
        api_stream_unref(s);
        goto out;
    }
    *req_state = s;
    if (s->json_mode) {
        ret = resp_wait(s->out);
    } else {
        struct MHD_Response *r = resp_stream(s->out, "{\"type\":\"keepalive\"}\n");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
        ret = http_queue(conn, 200, r);
        MHD_destroy_response(r);
    }
out:
    json_decref(req);
    return ret;
}
