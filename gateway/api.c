#include "gateway/api.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

struct api {
    loop_t *loop;
    kmgr_t *kmgr;
    api_config_t cfg;
    json_t *contexts;   /* id -> {language, cwd}: what the API adds to a session */
    json_t *defaults;   /* language -> id of its default context */
    records_t *records; /* STATE/contexts: both of the above, over a restart */
    void (*wake)(void *);
    void *wake_arg;
};

void api_config_defaults(api_config_t *cfg)
{
    *cfg = (api_config_t){.default_timeout_s = 300,
                          .max_timeout_s = 3600,
                          .max_output = 16 << 20,
                          .max_queue = 8,
                          .max_upload = (size_t)256 << 20};
}

/* A context's record: what the API adds to the kmgr session (language,
 * cwd) and whether it is its language's default, so that POST /execute
 * without context_id finds the same kernel after a restart. */
static void record_write(api_t *self, const char *id)
{
    if (!self->records)
        return;
    json_t *meta = json_object_get(self->contexts, id);
    const char *lang = json_string_value(json_object_get(meta, "language"));
    bool is_default =
        lang && json_equal(json_object_get(self->defaults, lang), json_object_get(meta, "id"));
    json_t *rec = json_pack("{s:s, s:O, s:b}", "id", id, "context", meta, "default", is_default);
    records_put(self->records, id, rec);
    json_decref(rec);
}

/* A context a previous sandgate recorded: kept when kmgr re-adopted its
 * kernel, forgotten otherwise. */
static void record_load(const char *id, const json_t *rec, void *arg)
{
    api_t *self = arg;
    json_t *meta = json_object_get(rec, "context");
    const char *lang = json_string_value(json_object_get(meta, "language"));
    if (kmgr_get(self->kmgr, id) == NULL || !lang ||
        !json_is_string(json_object_get(meta, "cwd"))) {
        records_remove(self->records, id);
        return;
    }
    json_object_set_new(self->contexts, id, json_deep_copy(meta));
    if (json_is_true(json_object_get(rec, "default"))) {
        json_object_set_new(self->defaults, lang, json_string(id));
        log_info("api: context %s is again the default for %s", id, lang);
    }
}

api_t *api_new(loop_t *loop, kmgr_t *kmgr, const api_config_t *cfg, void (*wake)(void *),
               void *wake_arg)
{
    api_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->contexts = json_object();
    self->defaults = json_object();
    if (cfg->state_dir) {
        cleanup_free char *dir = xasprintf("%s/contexts", cfg->state_dir);
        sg_error_t *err = NULL;
        self->records = records_open(dir, "context", &err);
        if (self->records) {
            records_each(self->records, record_load, self);
        } else {
            log_warn("api: %s; default contexts will not survive a restart", err->msg);
            sg_error_free(&err);
        }
    }
    return self;
}

void api_destroy(api_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    json_decref((*self_p)->contexts);
    json_decref((*self_p)->defaults);
    records_close(&(*self_p)->records);
    free(*self_p);
    *self_p = NULL;
}

/* --- contexts ------------------------------------------------------------------ */

/* The kernelspec for a language: one named so, else the first whose language
 * matches (python3 for "python"). */
static const kspec_t *spec_for(api_t *self, const char *language)
{
    const kspecs_t *ks = kmgr_kspecs(self->kmgr);
    const kspec_t *by_name = kspecs_get(ks, language);
    if (by_name)
        return by_name;
    const kspec_t *best = NULL;
    for (size_t i = 0; i < kspecs_count(ks); i++) {
        const kspec_t *k = kspecs_at(ks, i);
        if (strcasecmp(k->language, language) == 0 && (!best || strcmp(k->name, "python3") == 0))
            best = k;
    }
    return best;
}

/* "running" (idle or busy), "starting", "pausing", "paused", "resuming", "dead". */
static const char *context_state(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    if ((st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        return "running";
    return kernel_status(k);
}

static json_t *context_json(api_t *self, kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    const char *lang = json_string_value(json_object_get(meta, "language"));
    const char *cwd = json_string_value(json_object_get(meta, "cwd"));
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b}", "id", kernel_id(k), "language",
                          lang ? lang : kernel_spec(k)->language, "cwd", cwd ? cwd : "/home/user",
                          "state", context_state(k), "internet", kernel_internet(k));
    if (kernel_state(k) == KERNEL_PAUSED)
        json_object_set_new(j, "checkpoint_bytes",
                            json_integer((json_int_t)kernel_pause_info(k).checkpoint_bytes));
    return j;
}

/* A context event for the audit log: name ("context.delete", ...) on id. */
static void audit_context(const audit_who_t *who, const char *name, const char *id)
{
    audit_event(who, name, json_pack("{s:s}", "context", id));
}

static kernel_t *create_context(api_t *self, const char *language, const char *cwd, bool internet,
                                bool implicit, const audit_who_t *who, sg_error_t **err)
{
    const kspec_t *spec = spec_for(self, language);
    if (spec == NULL) {
        sg_error_set(err, SG_E_INVALID, "no kernel for language '%s'", language);
        return NULL;
    }
    if (internet && !kmgr_has_egress(self->kmgr)) {
        sg_error_set(err, SG_E_INVALID,
                     "'internet': this server gives sandboxes no network (its operator has not "
                     "set --egress-allow)");
        return NULL;
    }
    kernel_t *k = kmgr_start_with(self->kmgr, spec->name, internet, NULL, NULL, err);
    if (k == NULL)
        return NULL;
    json_object_set_new(
        self->contexts, kernel_id(k),
        json_pack("{s:s, s:s, s:s}", "id", kernel_id(k), "language", language, "cwd", cwd));
    record_write(self, kernel_id(k));
    audit_event(who, "context.create",
                json_pack("{s:s, s:s, s:s, s:s, s:b, s:b}", "context", kernel_id(k), "language",
                          language, "kernelspec", spec->name, "cwd", cwd, "internet", internet,
                          "implicit", implicit));
    if (strcmp(cwd, "/home/user") != 0 && strcmp(spec->language, "python") == 0) {
        /* Queued: runs first, once the kernel is ready. */
        json_t *path = json_string(cwd);
        char *lit = json_dumps(path, JSON_ENCODE_ANY);
        char *code = xasprintf("import os as _os; _os.makedirs(%s, exist_ok=True); "
                               "_os.chdir(%s); del _os",
                               lit, lit);
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, code, &o, &(kernel_exec_cb_t){0}, NULL);
        free(code);
        free(lit);
        json_decref(path);
    }
    return k;
}

static kernel_t *default_context(api_t *self, const char *language, const audit_who_t *who,
                                 sg_error_t **err)
{
    const char *id = json_string_value(json_object_get(self->defaults, language));
    kernel_t *k = id ? kmgr_get(self->kmgr, id) : NULL;
    if (k)
        return k;
    k = create_context(self, language, "/home/user", false, true, who, err);
    if (k) {
        json_object_set_new(self->defaults, language, json_string(kernel_id(k)));
        record_write(self, kernel_id(k));
    }
    return k;
}

/* --- one request that answers later: an execution's stream, or a wait ---------------- */

/* Lives while the HTTP request does, or while its execution or wait runs:
 * freed when both are over. */
typedef struct {
    api_t *api;
    int refs; /* the execution (or the kernel observer), and the HTTP request */
    resp_t *out;
    kernel_t *k;
    exec_t *exec; /* NULL once it ended */
    bool json_mode, done;
    json_t *agg;     /* JSON mode: the whole answer */
    unsigned status; /* JSON mode: the reply's status */
    bool command;
    bool context_wait;       /* not an execution: a wait for a kernel event (wait_for) */
    kernel_event_t wait_for; /* PREPARED (POST /contexts), PAUSED or READY (pause, resume) */
    bool metrics;            /* not an execution: GET /metrics waits for the refusal counts */
    int metrics_timer;       /* metrics: answers without them after METRICS_WAIT_MS; -1: none */
} stream_t;

static stream_t *stream_new(api_t *self, struct MHD_Connection *conn, kernel_t *k)
{
    stream_t *s = xzalloc(sizeof *s);
    s->api = self;
    s->refs = 2;
    s->out = resp_new(self->loop, conn, self->wake, self->wake_arg);
    s->k = k;
    return s;
}

static void stream_unref(stream_t *s)
{
    if (--s->refs > 0)
        return;
    resp_free(&s->out);
    json_decref(s->agg);
    free(s);
}

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

/* A MIME bundle as an E2B result line. */
static json_t *result_line(const json_t *data, bool main)
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
    json_t *line = result_line(data, main);
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
    if (s->command)
        command_done(s, end);
    else if (end->err) {
        const char *name = end->err->kind == SG_E_TIMEOUT ? "TimeoutError" : "KernelError";
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
    stream_unref(s); /* the execution's reference */
}

static const exec_sink_t exec_events = {.on_stream = on_stream,
                                        .on_result = on_result,
                                        .on_error = on_error,
                                        .on_count = on_count,
                                        .on_limit = on_limit,
                                        .on_done = on_done};

/* --- requests ---------------------------------------------------------------------- */

static json_t *parse_body(struct MHD_Connection *conn, const char *body, size_t len,
                          enum MHD_Result *ret)
{
    json_error_t jerr;
    json_t *j = len ? json_loadb(body, len, 0, &jerr) : json_object();
    if (j == NULL) {
        *ret = http_reply_errorf(conn, SG_E_INVALID, "malformed JSON body: %s (line %d)", jerr.text,
                                 jerr.line);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = http_reply_errorf(conn, SG_E_INVALID, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* A field of the wrong type is an error; an absent one is NULL. */
static bool field(json_t *obj, const char *key, json_type type, json_t **out,
                  struct MHD_Connection *conn, enum MHD_Result *ret)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    bool good = json_typeof(v) == type || (type == JSON_REAL && json_is_integer(v)) ||
                (type == JSON_TRUE && json_is_boolean(v)); /* JSON_TRUE: any boolean */
    if (!good) {
        static const char *names[] = {"an object", "an array",  "a string",  "an integer",
                                      "a number",  "a boolean", "a boolean", "null"};
        *ret = http_reply_errorf(conn, SG_E_INVALID, "'%s' must be %s", key, names[type]);
        return false;
    }
    *out = v;
    return true;
}

static enum MHD_Result execute(api_t *self, struct MHD_Connection *conn, const char *body,
                               size_t len, void **req_state)
{
    enum MHD_Result ret = MHD_NO;
    json_t *req = parse_body(conn, body, len, &ret);
    if (!req)
        return ret;
    json_t *code, *ctx, *lang, *env, *timeout, *command;
    if (!field(req, "code", JSON_STRING, &code, conn, &ret) ||
        !field(req, "context_id", JSON_STRING, &ctx, conn, &ret) ||
        !field(req, "language", JSON_STRING, &lang, conn, &ret) ||
        !field(req, "env_vars", JSON_OBJECT, &env, conn, &ret) ||
        !field(req, "timeout", JSON_REAL, &timeout, conn, &ret) ||
        !field(req, "command", JSON_STRING, &command, conn, &ret))
        goto out;
    if ((code == NULL) == (command == NULL)) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "give either 'code' or 'command'");
        goto out;
    }
    if (ctx && lang) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "give 'context_id' or 'language', not both");
        goto out;
    }
    const char *k_;
    json_t *v_;
    json_object_foreach (env, k_, v_)
        if (!json_is_string(v_)) {
            ret = http_reply_errorf(conn, SG_E_INVALID, "env_vars['%s'] must be a string", k_);
            goto out;
        }
    double t = timeout ? json_number_value(timeout) : self->cfg.default_timeout_s;
    if (t <= 0 || t > self->cfg.max_timeout_s) {
        ret = http_reply_errorf(conn, SG_E_INVALID, "'timeout' must be in (0, %d] seconds",
                                self->cfg.max_timeout_s);
        goto out;
    }
    sg_error_t *err = NULL;
    kernel_t *k;
    audit_who_t who;
    audit_who_conn(&who, "rest", conn);
    if (ctx) {
        k = kmgr_get(self->kmgr, json_string_value(ctx));
        if (!k) {
            ret = http_reply_errorf(conn, SG_E_NOTFOUND, "no context '%s'", json_string_value(ctx));
            goto out;
        }
    } else {
        k = default_context(self, lang ? json_string_value(lang) : "python", &who, &err);
        if (!k) {
            ret = http_reply_error(conn, err);
            sg_error_free(&err);
            goto out;
        }
    }
    if (command && strcmp(kernel_spec(k)->language, "python") != 0) {
        ret = http_reply_errorf(conn, SG_E_INVALID,
                                "'command' needs a Python context (this one runs %s)",
                                kernel_spec(k)->language);
        goto out;
    }
    stream_t *s = stream_new(self, conn, k);
    s->command = command != NULL;
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    s->json_mode =
        s->command || (accept && strstr(accept, "application/json") && !strstr(accept, "ndjson"));
    if (s->json_mode) /* a stream's client gets each line as it comes: nothing to gather */
        s->agg = json_pack("{s:s, s:s, s:[], s:n, s:n, s:[]}", "stdout", "", "stderr", "",
                           "results", "error", "execution_count", "artifacts");
    exec_opts_t o = {.timeout_ms = (int)(t * 1000),
                     .env = env,
                     .command = s->command,
                     .max_output = self->cfg.max_output,
                     .max_queue = self->cfg.max_queue,
                     .who = who};
    s->exec =
        exec_start(k, json_string_value(s->command ? command : code), &o, &exec_events, s, &err);
    if (s->exec == NULL) {
        ret = http_reply_error(conn, err);
        sg_error_free(&err);
        s->refs = 1;
        stream_unref(s);
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

/* "/{id}/rest..." of a /contexts URL: the id, and *action at the rest. */
static bool split_context_url(const char *rest, char id[128], const char **action)
{
    const char *slash = strchr(rest + 1, '/');
    size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    if (n == 0 || n >= 128)
        return false;
    memcpy(id, rest + 1, n);
    id[n] = 0;
    *action = slash ? slash : "";
    return true;
}

static enum MHD_Result reply_status(struct MHD_Connection *conn, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_failed(struct MHD_Connection *conn, sg_error_t **err)
{
    enum MHD_Result ret = http_reply_error(conn, *err);
    sg_error_free(err);
    return ret;
}

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

/* GET and DELETE on a context's files (PUT arrives as a sink). */
static enum MHD_Result files_route(api_t *self, struct MHD_Connection *conn, const char *method,
                                   kernel_t *k, const char *path)
{
    sg_error_t *err = NULL;
    if (strcmp(method, "DELETE") == 0) {
        json_t *f = audit_enabled() ? file_audit(k, path) : NULL;
        if (files_remove(kernel_workspace(k), path, &err) < 0) {
            json_decref(f);
            return reply_failed(conn, &err);
        }
        audit_who_t who;
        audit_who_conn(&who, "rest", conn);
        audit_event(&who, "file.delete", f);
        return reply_status(conn, 204);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return http_reply_json(conn, 405,
                               json_pack("{s:s, s:s}", "error", "method_not_allowed", "message",
                                         "use GET, PUT or DELETE on /contexts/ID/files/PATH"));
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
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* An upload: PUT /contexts/{id}/files/{path}, streamed to disk (http.h's
 * sinks). */
typedef struct {
    api_t *api;
    files_upload_t *up;
    sg_error_t *err;  /* the first failure; the rest of the body is discarded */
    size_t unchecked; /* bytes written since the state disk's room was checked */
    char id[128];     /* the context's, for the audit log */
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
    sg_error_free(&sink->err);
    json_decref(sink->info);
    free(sink);
}

static void *sink_open(void *ctx, const char *method, const char *url)
{
    api_t *self = ctx;
    char id[128];
    const char *action;
    if (strcmp(method, "PUT") != 0 || strncmp(url, "/contexts/", 10) != 0 ||
        !split_context_url(url + 9, id, &action) || strncmp(action, "/files", 6) != 0 ||
        (action[6] != 0 && action[6] != '/'))
        return NULL;
    sink_t *sink = xzalloc(sizeof *sink);
    snprintf(sink->id, sizeof sink->id, "%s", id);
    sink->api = self;
    kernel_t *k = kmgr_get(self->kmgr, id);
    if (!k)
        sg_error_set(&sink->err, SG_E_NOTFOUND, "no context '%s'", id);
    else if (!kernel_prepared(k))
        sg_error_set(&sink->err, SG_E_CONFLICT, "context %s is still being prepared; retry shortly",
                     id);
    else if (state_disk_room(self, &sink->err) == 0)
        sink->up =
            files_upload_begin(kernel_workspace(k), action + 6, self->cfg.max_upload, &sink->err);
    return sink;
}

static void sink_write(void *ctx, void *sink_, const char *data, size_t len)
{
    sink_t *sink = sink_;
    if (sink->up && (sink->unchecked += len) >= UPLOAD_CHECK_BYTES) {
        sink->unchecked = 0;
        if (state_disk_room(sink->api, &sink->err) < 0)
            files_upload_abort(&sink->up); /* the temporary file goes: nothing was written */
    }
    if (sink->up && files_upload_write(sink->up, data, len, &sink->err) < 0)
        files_upload_abort(&sink->up);
}

static void sink_stored(const json_t *info, const sg_error_t *err, void *arg)
{
    sink_t *sink = arg;
    sink->stored = true;
    sink->info = json_incref((json_t *)info);
    if (err)
        sg_error_set(&sink->err, err->kind, "%s", err->msg);
    if (sink->conn) {
        MHD_resume_connection(sink->conn); /* sink_finish answers */
        sink->conn = NULL;
        sink->api->wake(sink->api->wake_arg);
    }
}

/* Called again when the connection resumes (http.h). */
static enum MHD_Result sink_finish(void *ctx, struct MHD_Connection *conn, void **sink_p)
{
    sink_t *sink = *sink_p;
    if (sink->up && !sink->storing) {
        sink->storing = true;
        files_upload_store(sink->up, sink_stored, sink);
        if (!sink->stored) {
            sink->conn = conn;
            MHD_suspend_connection(conn);
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

static void forget_context(api_t *self, const char *id)
{
    json_object_del(self->contexts, id);
    if (self->records)
        records_remove(self->records, id);
    const char *lang;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(self->defaults, tmp, lang, v)
    {
        if (strcmp(json_string_value(v), id) == 0)
            json_object_del(self->defaults, lang);
    }
}

typedef struct {
    api_t *api;
    char id[64];
} failed_t;

static void remove_failed(void *arg)
{
    failed_t *f = arg;
    kmgr_shutdown(f->api->kmgr, f->id, NULL);
    forget_context(f->api, f->id);
    free(f);
}

/* A context's workspace is ready (POST /contexts answers 201 with it), or
 * the context failed before (the error, and the context is removed); a
 * pause or a resume ended (200 with the context, or the error). */
static void on_context_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    /* A resume that could not restore gives a fresh kernel: RESTARTED. */
    bool failed = ev == KERNEL_EV_DEAD || ev == KERNEL_EV_GONE ||
                  (s->wait_for == KERNEL_EV_READY && ev == KERNEL_EV_RESTARTED);
    if (ev != s->wait_for && !failed)
        return;
    kernel_unobserve(k, on_context_event, s);
    if (!failed && err) { /* a pause that failed: the kernel runs on, or was restarted */
        json_decref(s->agg);
        s->agg =
            json_pack("{s:s, s:s}", "error", sg_error_kind_name(err->kind), "message", err->msg);
        s->status = sg_error_http_status(err->kind);
    } else if (!failed && s->wait_for != KERNEL_EV_PREPARED) {
        json_decref(s->agg);
        s->agg = context_json(s->api, k);
    }
    if (failed && s->wait_for != KERNEL_EV_PREPARED) {
        sg_error_t *why = NULL;
        sg_error_set(&why, SG_E_UNAVAILABLE, "%s",
                     ev == KERNEL_EV_RESTARTED
                         ? "the context could not be resumed: it has a fresh kernel and its "
                           "variables are lost (the log says why)"
                     : err ? err->msg
                           : "the context was deleted");
        json_decref(s->agg);
        s->agg =
            json_pack("{s:s, s:s}", "error", sg_error_kind_name(why->kind), "message", why->msg);
        s->status = sg_error_http_status(why->kind);
        sg_error_free(&why);
    } else if (failed) {
        sg_error_t *gone = NULL;
        if (!err)
            sg_error_set(&gone, SG_E_NOTFOUND, "context %s was deleted before it was ready",
                         kernel_id(k));
        const sg_error_t *why = err ? err : gone;
        json_decref(s->agg);
        s->agg =
            json_pack("{s:s, s:s}", "error", sg_error_kind_name(why->kind), "message", why->msg);
        s->status = sg_error_http_status(why->kind);
        if (ev == KERNEL_EV_DEAD) { /* not from inside the kernel's own callback */
            failed_t *f = xzalloc(sizeof *f);
            f->api = s->api;
            snprintf(f->id, sizeof f->id, "%s", kernel_id(k));
            loop_defer(s->api->loop, remove_failed, f);
        }
        sg_error_free(&gone);
    }
    s->done = true;
    resp_ready(s->out);
    stream_unref(s); /* the observer's reference */
}

/* Suspends the request until k reports ev (on_context_event answers it). */
static enum MHD_Result wait_event(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                  kernel_event_t ev, unsigned status, void **req_state)
{
    stream_t *s = stream_new(self, conn, k); /* refs: the observer, and the HTTP request */
    s->context_wait = s->json_mode = true;
    s->wait_for = ev;
    s->agg = context_json(self, k);
    s->status = status;
    kernel_observe(k, on_context_event, s);
    *req_state = s;
    return resp_wait(s->out);
}

/* Answers POST /contexts once k's workspace exists: at once without a
 * launcher, else when the launcher has made it (or failed, or timed out). */
static enum MHD_Result context_created(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                       void **req_state)
{
    if (kernel_prepared(k))
        return http_reply_json(conn, 201, context_json(self, k));
    return wait_event(self, conn, k, KERNEL_EV_PREPARED, 201, req_state);
}

/* POST /contexts/{id}/pause and /resume: answered when the kernel is paused
 * (or resumed), with the context, or with why not. */
static enum MHD_Result pause_resume(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                    bool pause, void **req_state)
{
    sg_error_t *err = NULL;
    kernel_state_t st = kernel_state(k);
    if (pause ? st == KERNEL_PAUSED
              : (st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        return http_reply_json(conn, 200, context_json(self, k));
    if (pause && st == KERNEL_PAUSING)
        return wait_event(self, conn, k, KERNEL_EV_PAUSED, 200, req_state);
    if (pause ? kernel_pause(k, &err) < 0 : kernel_resume(k, &err) < 0)
        return reply_failed(conn, &err);
    return wait_event(self, conn, k, pause ? KERNEL_EV_PAUSED : KERNEL_EV_READY, 200, req_state);
}

static enum MHD_Result contexts(api_t *self, struct MHD_Connection *conn, const char *method,
                                const char *rest, const char *body, size_t len, void **req_state)
{
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    audit_who_t who;
    audit_who_conn(&who, "rest", conn);
    if (*rest == 0 && strcmp(method, "GET") == 0) {
        json_t *list = json_array();
        for (size_t i = 0; i < kmgr_count(self->kmgr); i++)
            json_array_append_new(list, context_json(self, kmgr_at(self->kmgr, i)));
        return http_reply_json(conn, 200, list);
    }
    if (*rest == 0 && strcmp(method, "POST") == 0) {
        json_t *req = parse_body(conn, body, len, &ret);
        json_t *lang, *cwd, *internet;
        if (!req)
            return ret;
        if (field(req, "language", JSON_STRING, &lang, conn, &ret) &&
            field(req, "cwd", JSON_STRING, &cwd, conn, &ret) &&
            field(req, "internet", JSON_TRUE, &internet, conn, &ret)) {
            kernel_t *k = create_context(self, lang ? json_string_value(lang) : "python",
                                         cwd ? json_string_value(cwd) : "/home/user",
                                         json_is_true(internet), false, &who, &err);
            ret = k ? context_created(self, conn, k, req_state) : http_reply_error(conn, err);
        }
        sg_error_free(&err);
        json_decref(req);
        return ret;
    }
    if (*rest != '/')
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s /contexts%s", method, rest);
    char id[128];
    const char *action;
    if (!split_context_url(rest, id, &action))
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no such context");
    kernel_t *k = kmgr_get(self->kmgr, id);
    if (!k)
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no context '%s'", id);
    if (strncmp(action, "/files", 6) == 0 && (action[6] == 0 || action[6] == '/')) {
        if (!kernel_prepared(k))
            return http_reply_errorf(conn, SG_E_CONFLICT,
                                     "context %s is still being prepared; retry shortly", id);
        return files_route(self, conn, method, k, action + 6);
    }
    if (*action == 0 && strcmp(method, "GET") == 0)
        return http_reply_json(conn, 200, context_json(self, k));
    if (*action == 0 && strcmp(method, "DELETE") == 0) {
        kmgr_shutdown(self->kmgr, id, NULL);
        forget_context(self, id);
        audit_context(&who, "context.delete", id);
        return reply_status(conn, 204);
    }
    if ((strcmp(action, "/pause") == 0 || strcmp(action, "/resume") == 0) &&
        strcmp(method, "POST") == 0) {
        audit_context(&who, action[2] == 'a' ? "context.pause" : "context.resume", id);
        return pause_resume(self, conn, k, action[2] == 'a', req_state);
    }
    if (strcmp(action, "/restart") == 0 && strcmp(method, "POST") == 0) {
        if (kernel_restart(k, &err) < 0)
            return reply_failed(conn, &err);
        audit_context(&who, "context.restart", id);
        return reply_status(conn, 204);
    }
    return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s /contexts%s", method, rest);
}

/* --- GET /metrics ---------------------------------------------------------------- */

/* How long a scrape waits for the launcher's refusal counts (Prometheus'
 * default scrape timeout is 10 s, as is the launcher link's). */
#define METRICS_WAIT_MS 2000

/* The page; egress_counts as metrics_render takes them. */
static enum MHD_Result metrics_reply(api_t *self, struct MHD_Connection *conn,
                                     const json_t *egress_counts)
{
    char *page = metrics_render(self->kmgr, egress_counts);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(page), page, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The answer is ready, with or without counts: the handler gives the page. */
static void metrics_ready(stream_t *s)
{
    s->done = true;
    loop_timer_end(s->api->loop, s->metrics_timer);
    s->metrics_timer = -1;
    resp_ready(s->out);
}

static void on_metrics_timeout(loop_t *loop, int timer_id, void *arg)
{
    stream_t *s = arg;
    s->metrics_timer = -1; /* a one-shot timer ends by itself */
    log_warn("api: GET /metrics without the egress refusals: the launcher did not answer within "
             "%d ms",
             METRICS_WAIT_MS);
    metrics_ready(s);
}

static void on_refused(const json_t *counts, const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    if (!s->done) { /* not answered by the timeout, the client still there */
        if (err)
            log_warn("api: GET /metrics without the egress refusals: %s", err->msg);
        s->agg = json_deep_copy(counts);
        metrics_ready(s);
    }
    stream_unref(s); /* the request's reference */
}

/* With egress, each scrape asks for fresh refusal counts (the launcher runs
 * nft) and the request waits for them, at most METRICS_WAIT_MS. */
static enum MHD_Result metrics_wait(api_t *self, struct MHD_Connection *conn, void **req_state)
{
    stream_t *s = stream_new(self, conn, NULL); /* refs: the counts' request, the HTTP request */
    s->metrics = true;
    s->metrics_timer = loop_timer(self->loop, METRICS_WAIT_MS, 1, on_metrics_timeout, s);
    *req_state = s;
    kmgr_egress_refused(self->kmgr, on_refused, s);
    if (s->done) /* answered before returning (no launcher) */
        return metrics_reply(self, conn, s->agg);
    return resp_wait(s->out);
}

static enum MHD_Result health(api_t *self, struct MHD_Connection *conn, const char *method)
{
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return http_reply_json(
            conn, 405,
            json_pack("{s:s, s:s}", "error", "method_not_allowed", "message", "use GET /health"));
    kmgr_stats_t st;
    kmgr_stats(self->kmgr, &st);
    return http_reply_json(conn, 200,
                           json_pack("{s:s, s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
                                     "status", "ok", "version", PACKAGE_VERSION, "replica",
                                     replica_id(), "replica_tag", replica_tag(), "kernels",
                                     "sessions", (json_int_t)st.sessions, "starting",
                                     (json_int_t)st.starting, "idle", (json_int_t)st.idle, "busy",
                                     (json_int_t)st.busy, "pool_ready", (json_int_t)st.pool_ready,
                                     "pool_starting", (json_int_t)st.pool_starting));
}

static enum MHD_Result handle_request(void *ctx, struct MHD_Connection *conn, const char *method,
                                      const char *url, const char *body, size_t len,
                                      void **req_state)
{
    api_t *self = ctx;
    stream_t *s = *req_state;
    if (s) { /* a JSON-mode execution (or a wait) resumed: answer with the aggregate */
        if (!s->done)
            return resp_wait(s->out);
        if (s->metrics)
            return metrics_reply(self, conn, s->agg);
        return http_reply_json(conn, s->status ? s->status : 200, json_incref(s->agg));
    }
    if (strcmp(url, "/health") == 0)
        return health(self, conn, method);
    if (strcmp(url, "/metrics") == 0) {
        if (strcmp(method, "GET") != 0)
            return http_reply_errorf(conn, SG_E_INVALID, "use GET /metrics");
        if (!kmgr_has_egress(self->kmgr))
            return metrics_reply(self, conn, NULL);
        return metrics_wait(self, conn, req_state);
    }
    if (strcmp(url, "/execute") == 0) {
        if (strcmp(method, "POST") != 0)
            return http_reply_json(conn, 405,
                                   json_pack("{s:s, s:s}", "error", "method_not_allowed", "message",
                                             "use POST /execute"));
        return execute(self, conn, body, len, req_state);
    }
    if (strncmp(url, "/contexts", 9) == 0)
        return contexts(self, conn, method, url + 9, body, len, req_state);
    return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s %s", method, url);
}

static void request_done(void *ctx, void *req_state, bool completed)
{
    stream_t *s = req_state;
    resp_set_gone(s->out);
    if (!s->done && s->metrics) {
        /* The client left first: the counts still come, and drop the
         * request's reference then. */
        loop_timer_end(s->api->loop, s->metrics_timer);
        s->metrics_timer = -1;
        s->done = true;
    } else if (!s->done) {
        /* The client went away first: the execution is interrupted, a
         * context goes on starting with nobody waiting for it.  No callback
         * follows, so the execution's (or observer's) reference goes too. */
        if (s->context_wait)
            kernel_unobserve(s->k, on_context_event, s);
        else
            exec_cancel(&s->exec, "api: the client left");
        s->done = true;
        s->refs--;
    }
    stream_unref(s);
}

static const http_handler_t handler = {.handle = handle_request,
                                       .done = request_done,
                                       .sink_open = sink_open,
                                       .sink_write = sink_write,
                                       .sink_finish = sink_finish,
                                       .sink_abort = sink_abort};

int api_register(api_t *self, http_server_t *http, sg_error_t **err)
{
    /* /health answers without the token: load balancers' and orchestrators'
     * probes carry none.  What no route takes, http.c answers 404. */
    if (http_route_add(http, "/health", HTTP_ROUTE_PUBLIC, &handler, self, err) < 0 ||
        http_route_add(http, "/metrics", 0, &handler, self, err) < 0 ||
        http_route_add(http, "/execute", 0, &handler, self, err) < 0 ||
        http_route_add(http, "/contexts", 0, &handler, self, err) < 0 ||
        http_route_add(http, "/contexts/", HTTP_ROUTE_PREFIX, &handler, self, err) < 0)
        return -1;
    return 0;
}
