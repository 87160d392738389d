#include "gateway/api.h"

#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/http.h"

#define KEEPALIVE_MS 5000

struct api {
    zloop_t *loop;
    kmgr_t *kmgr;
    api_config_t cfg;
    json_t *contexts; /* id -> {language, cwd}: what the API adds to a session */
    json_t *defaults; /* language -> id of its default context */
    api_wake_fn *waker;
    void *waker_arg;
};

void api_set_waker(api_t *self, api_wake_fn *fn, void *arg)
{
    self->waker = fn;
    self->waker_arg = arg;
}

void api_config_defaults(api_config_t *cfg)
{
    *cfg = (api_config_t){
        .default_timeout_s = 300, .max_timeout_s = 3600, .max_output = 16 << 20, .max_queue = 8};
}

api_t *api_new(zloop_t *loop, kmgr_t *kmgr, const api_config_t *cfg)
{
    api_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->cfg = *cfg;
    self->contexts = json_object();
    self->defaults = json_object();
    return self;
}

void api_destroy(api_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    json_decref((*self_p)->contexts);
    json_decref((*self_p)->defaults);
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

static json_t *context_json(api_t *self, kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    const char *lang = json_string_value(json_object_get(meta, "language"));
    const char *cwd = json_string_value(json_object_get(meta, "cwd"));
    return json_pack("{s:s, s:s, s:s}", "id", kernel_id(k), "language",
                     lang ? lang : kernel_spec(k)->language, "cwd", cwd ? cwd : "/home/user");
}

static kernel_t *create_context(api_t *self, const char *language, const char *cwd,
                                sg_error_t **err)
{
    const kspec_t *spec = spec_for(self, language);
    if (spec == NULL) {
        sg_error_set(err, SG_E_INVALID, "no kernel for language '%s'", language);
        return NULL;
    }
    kernel_t *k = kmgr_start(self->kmgr, spec->name, NULL, NULL, err);
    if (k == NULL)
        return NULL;
    json_object_set_new(self->contexts, kernel_id(k),
                        json_pack("{s:s, s:s}", "language", language, "cwd", cwd));
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

static kernel_t *default_context(api_t *self, const char *language, sg_error_t **err)
{
    const char *id = json_string_value(json_object_get(self->defaults, language));
    kernel_t *k = id ? kmgr_get(self->kmgr, id) : NULL;
    if (k)
        return k;
    k = create_context(self, language, "/home/user", err);
    if (k)
        json_object_set_new(self->defaults, language, json_string(kernel_id(k)));
    return k;
}

/* --- one execution's stream -------------------------------------------------------- */

typedef struct {
    api_t *api;
    int refs; /* the kernel's callbacks, and the HTTP request */
    struct MHD_Connection *conn;
    kernel_t *k;
    uint64_t exec_id;
    bool json_mode, suspended, done, gone;
    char *buf; /* NDJSON not yet sent */
    size_t len, off;
    size_t out_bytes;
    bool truncated;
    bool wrote_since_tick;
    int keepalive;
    int64_t started;
    json_t *agg; /* JSON mode */
    char *env_restore;
} stream_t;

static void stream_unref(stream_t *s)
{
    if (--s->refs > 0)
        return;
    if (s->keepalive >= 0)
        zloop_timer_end(s->api->loop, s->keepalive);
    free(s->buf);
    free(s->env_restore);
    json_decref(s->agg);
    free(s);
}

static void wake(stream_t *s)
{
    if (s->suspended && !s->gone) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
        if (s->api->waker)
            s->api->waker(s->api->waker_arg);
    }
}

static void emit(stream_t *s, json_t *line)
{
    if (s->json_mode) {
        json_decref(line);
        return;
    }
    char *text = json_dumps(line, JSON_COMPACT);
    json_decref(line);
    size_t n = strlen(text);
    if (s->off > 0 && s->off == s->len)
        s->off = s->len = 0;
    s->buf = xrealloc(s->buf, s->len + n + 2);
    memcpy(s->buf + s->len, text, n);
    s->buf[s->len + n] = '\n';
    s->len += n + 1;
    free(text);
    s->wrote_since_tick = true;
    wake(s);
}

/* JSON mode only: a stream's client gets each line as it comes. */
static void append_text(json_t *agg, const char *key, const char *text)
{
    if (agg == NULL)
        return;
    const char *old = json_string_value(json_object_get(agg, key));
    char *joined = xasprintf("%s%s", old ? old : "", text);
    json_object_set_new(agg, key, json_string(joined));
    free(joined);
}

/* Counts output against the limit; false once it is exhausted. */
static bool output_allowed(stream_t *s, size_t n)
{
    if (s->truncated)
        return false;
    s->out_bytes += n;
    if (s->out_bytes <= s->api->cfg.max_output)
        return true;
    s->truncated = true;
    char note[160];
    snprintf(note, sizeof note,
             "[sandgate: output limit of %zu bytes reached; further output of this execution "
             "is dropped]\n",
             s->api->cfg.max_output);
    emit(s, json_pack("{s:s, s:s}", "type", "stderr", "text", note));
    append_text(s->agg, "stderr", note);
    return false;
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
static json_t *result_line(json_t *data, bool main)
{
    json_t *r = json_pack("{s:s, s:b}", "type", "result", "is_main_result", main);
    json_t *extra = json_object();
    const char *mime;
    json_t *v;
    json_object_foreach (data, mime, v) {
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

static void on_output(const jmsg_t *m, void *arg)
{
    stream_t *s = arg;
    const char *type = jmsg_type(m);
    json_t *c = jmsg_content(m);
    if (strcmp(type, "stream") == 0) {
        const char *name = jmsg_content_str(m, "name");
        const char *text = jmsg_content_str(m, "text");
        if (!text || !output_allowed(s, strlen(text)))
            return;
        const char *which = name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout";
        const char *date = json_string_value(json_object_get(jmsg_header(m), "date"));
        append_text(s->agg, which, text);
        emit(s, json_pack("{s:s, s:s, s:s}", "type", which, "text", text, "timestamp",
                          date ? date : ""));
    } else if (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0) {
        json_t *data = json_object_get(c, "data");
        char *dumped = json_dumps(data, JSON_COMPACT);
        size_t n = dumped ? strlen(dumped) : 0;
        free(dumped);
        if (!json_is_object(data) || !output_allowed(s, n))
            return;
        json_t *line = result_line(data, strcmp(type, "execute_result") == 0);
        if (s->agg) {
            json_t *copy = json_deep_copy(line);
            json_object_del(copy, "type");
            json_array_append_new(json_object_get(s->agg, "results"), copy);
        }
        emit(s, line);
    } else if (strcmp(type, "error") == 0) {
        json_t *tb = json_object_get(c, "traceback");
        char *joined = xstrdup("");
        size_t i;
        json_t *t;
        json_array_foreach (tb, i, t) {
            char *n = xasprintf("%s%s%s", joined, i ? "\n" : "", json_string_value(t) ?: "");
            free(joined);
            joined = n;
        }
        const char *ename = jmsg_content_str(m, "ename");
        const char *evalue = jmsg_content_str(m, "evalue");
        json_object_set_new(s->agg, "error",
                            json_pack("{s:s, s:s, s:s}", "name", ename ? ename : "Error", "value",
                                      evalue ? evalue : "", "traceback", joined));
        emit(s, error_line(ename ? ename : "Error", evalue ? evalue : "", joined));
        free(joined);
    } else if (strcmp(type, "execute_input") == 0) {
        json_int_t n = json_integer_value(json_object_get(c, "execution_count"));
        json_object_set_new(s->agg, "execution_count", json_integer(n));
        emit(s, json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count", n));
    }
}

static void on_done(const json_t *reply, const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    if (err) {
        const char *name = err->kind == SG_E_TIMEOUT ? "TimeoutError" : "KernelError";
        json_object_set_new(
            s->agg, "error",
            json_pack("{s:s, s:s, s:s}", "name", name, "value", err->msg, "traceback", ""));
        emit(s, error_line(name, err->msg, ""));
    }
    if (s->env_restore) {
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(s->k, s->env_restore, &o, &(kernel_exec_cb_t){0}, NULL);
    }
    json_object_set_new(s->agg, "duration_ms",
                        json_integer((json_int_t)(zclock_mono() - s->started)));
    emit(s, json_pack("{s:s}", "type", "end_of_execution"));
    s->done = true;
    wake(s);
    stream_unref(s);
}

static int on_keepalive(zloop_t *loop, int timer_id, void *arg)
{
    stream_t *s = arg;
    if (!s->done && !s->wrote_since_tick)
        emit(s, json_pack("{s:s}", "type", "keepalive"));
    s->wrote_since_tick = false;
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    stream_t *s = cls;
    if (s->off < s->len) {
        size_t n = s->len - s->off < max ? s->len - s->off : max;
        memcpy(out, s->buf + s->off, n);
        s->off += n;
        return (ssize_t)n;
    }
    if (s->done)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s->suspended = true;
    MHD_suspend_connection(s->conn);
    return 0;
}

static void stream_free_noop(void *cls)
{
    /* The stream's lifetime is its references (kernel callbacks, request). */
}

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
    bool good = json_typeof(v) == type || (type == JSON_REAL && json_is_integer(v));
    if (!good) {
        static const char *names[] = {"an object", "an array",  "a string",  "an integer",
                                      "a number",  "a boolean", "a boolean", "null"};
        *ret = http_reply_errorf(conn, SG_E_INVALID, "'%s' must be %s", key, names[type]);
        return false;
    }
    *out = v;
    return true;
}

static char *env_code(json_t *env, bool restore)
{
    /* env_vars apply to this execution only: set them, and restore after. */
    char *lit = json_dumps(env, JSON_COMPACT);
    char *code = restore ? xasprintf("import os as _os\n"
                                     "for _k, _v in _sandgate_env_saved.items():\n"
                                     "    if _v is None: _os.environ.pop(_k, None)\n"
                                     "    else: _os.environ[_k] = _v\n"
                                     "del _os, _k, _v, _sandgate_env_saved")
                         : xasprintf("import os as _os\n_sandgate_env_new = %s\n"
                                     "_sandgate_env_saved = {k: _os.environ.get(k) for k in "
                                     "_sandgate_env_new}\n"
                                     "_os.environ.update(_sandgate_env_new)\n"
                                     "del _os, _sandgate_env_new",
                                     lit);
    free(lit);
    return code;
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
    if (code == NULL) {
        ret = command ? http_reply_errorf(conn, SG_E_INVALID,
                                          "'command' executions are not supported yet; send "
                                          "'code'")
                      : http_reply_errorf(conn, SG_E_INVALID, "'code' is required");
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
    if (ctx) {
        k = kmgr_get(self->kmgr, json_string_value(ctx));
        if (!k) {
            ret = http_reply_errorf(conn, SG_E_NOTFOUND, "no context '%s'", json_string_value(ctx));
            goto out;
        }
    } else {
        k = default_context(self, lang ? json_string_value(lang) : "python", &err);
        if (!k) {
            ret = http_reply_error(conn, err);
            sg_error_free(&err);
            goto out;
        }
    }
    if (kernel_pending(k) >= (size_t)self->cfg.max_queue) {
        ret = http_reply_errorf(conn, SG_E_CONFLICT,
                                "context %s already has %d executions waiting; try again later",
                                kernel_id(k), self->cfg.max_queue);
        goto out;
    }

    stream_t *s = xzalloc(sizeof *s);
    s->api = self;
    s->refs = 2;
    s->conn = conn;
    s->k = k;
    s->keepalive = -1;
    s->started = zclock_mono();
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    s->json_mode = accept && strstr(accept, "application/json") && !strstr(accept, "ndjson");
    if (s->json_mode) /* a stream's client gets each line as it comes: nothing to gather */
        s->agg = json_pack("{s:s, s:s, s:[], s:n, s:n}", "stdout", "", "stderr", "", "results",
                           "error", "execution_count");
    if (json_object_size(env) && strcmp(kernel_spec(k)->language, "python") == 0) {
        char *set = env_code(env, false);
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, set, &o, &(kernel_exec_cb_t){0}, NULL);
        free(set);
        s->env_restore = env_code(env, true);
    }
    kernel_exec_opts_t o = {.timeout_ms = (int)(t * 1000), .store_history = true};
    s->exec_id = kernel_execute(k, json_string_value(code), &o,
                                &(kernel_exec_cb_t){on_output, on_done, s}, &err);
    if (s->exec_id == 0) {
        ret = http_reply_error(conn, err);
        sg_error_free(&err);
        s->refs = 1;
        stream_unref(s);
        goto out;
    }
    *req_state = s;
    if (s->json_mode) {
        s->suspended = true;
        MHD_suspend_connection(conn);
        ret = MHD_YES;
    } else {
        s->keepalive = zloop_timer(self->loop, KEEPALIVE_MS, 0, on_keepalive, s);
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free_noop);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
        ret = MHD_queue_response(conn, 200, r);
        MHD_destroy_response(r);
    }
out:
    json_decref(req);
    return ret;
}

static enum MHD_Result contexts(api_t *self, struct MHD_Connection *conn, const char *method,
                                const char *rest, const char *body, size_t len)
{
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    if (*rest == 0 && strcmp(method, "GET") == 0) {
        json_t *list = json_array();
        for (size_t i = 0; i < kmgr_count(self->kmgr); i++)
            json_array_append_new(list, context_json(self, kmgr_at(self->kmgr, i)));
        return http_reply_json(conn, 200, list);
    }
    if (*rest == 0 && strcmp(method, "POST") == 0) {
        json_t *req = parse_body(conn, body, len, &ret);
        json_t *lang, *cwd;
        if (!req)
            return ret;
        if (field(req, "language", JSON_STRING, &lang, conn, &ret) &&
            field(req, "cwd", JSON_STRING, &cwd, conn, &ret)) {
            kernel_t *k = create_context(self, lang ? json_string_value(lang) : "python",
                                         cwd ? json_string_value(cwd) : "/home/user", &err);
            ret =
                k ? http_reply_json(conn, 201, context_json(self, k)) : http_reply_error(conn, err);
        }
        sg_error_free(&err);
        json_decref(req);
        return ret;
    }
    if (*rest != '/')
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s /contexts%s", method, rest);
    char id[128];
    const char *slash = strchr(rest + 1, '/');
    size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    if (n == 0 || n >= sizeof id)
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no such context");
    memcpy(id, rest + 1, n);
    id[n] = 0;
    kernel_t *k = kmgr_get(self->kmgr, id);
    if (!k)
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no context '%s'", id);
    const char *action = slash ? slash : "";
    if (*action == 0 && strcmp(method, "GET") == 0)
        return http_reply_json(conn, 200, context_json(self, k));
    if (*action == 0 && strcmp(method, "DELETE") == 0) {
        kmgr_shutdown(self->kmgr, id, NULL);
        json_object_del(self->contexts, id);
        const char *lang;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(self->defaults, tmp, lang,
                                 v) if (strcmp(json_string_value(v), id) == 0)
            json_object_del(self->defaults, lang);
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(conn, 204, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (strcmp(action, "/restart") == 0 && strcmp(method, "POST") == 0) {
        if (kernel_restart(k, &err) < 0) {
            ret = http_reply_error(conn, err);
            sg_error_free(&err);
            return ret;
        }
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(conn, 204, r);
        MHD_destroy_response(r);
        return ret;
    }
    return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s /contexts%s", method, rest);
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
                           json_pack("{s:s, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "status", "ok",
                                     "version", PACKAGE_VERSION, "kernels", "sessions",
                                     (json_int_t)st.sessions, "starting", (json_int_t)st.starting,
                                     "idle", (json_int_t)st.idle, "busy", (json_int_t)st.busy,
                                     "pool_ready", (json_int_t)st.pool_ready, "pool_starting",
                                     (json_int_t)st.pool_starting));
}

enum MHD_Result api_handle(api_t *self, struct MHD_Connection *conn, const char *method,
                           const char *url, const char *body, size_t len, void **req_state)
{
    stream_t *s = *req_state;
    if (s) { /* a JSON-mode execution resumed: answer with the aggregate */
        if (!s->done) {
            s->suspended = true;
            MHD_suspend_connection(conn);
            return MHD_YES;
        }
        return http_reply_json(conn, 200, json_incref(s->agg));
    }
    if (strcmp(url, "/health") == 0)
        return health(self, conn, method);
    if (strcmp(url, "/execute") == 0) {
        if (strcmp(method, "POST") != 0)
            return http_reply_json(conn, 405,
                                   json_pack("{s:s, s:s}", "error", "method_not_allowed", "message",
                                             "use POST /execute"));
        return execute(self, conn, body, len, req_state);
    }
    if (strncmp(url, "/contexts", 9) == 0)
        return contexts(self, conn, method, url + 9, body, len);
    return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s %s", method, url);
}

void api_request_done(api_t *self, void *req_state, bool completed)
{
    stream_t *s = req_state;
    s->gone = true;
    if (!s->done) {
        /* The client went away mid-execution: stop the code, drop the output. */
        log_info("api: client left during an execution on %s; interrupting it", kernel_id(s->k));
        kernel_forget(s->k, s->exec_id);
        kernel_interrupt(s->k, NULL);
        s->done = true;
        stream_unref(s); /* the kernel's reference: it will not call back */
    }
    stream_unref(s);
}
