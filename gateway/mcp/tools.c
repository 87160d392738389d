/* tools: the MCP endpoint's tools (internal.h): what each does
 * with its session's kernel and workspace, and how it answers. */
#include <errno.h>
#include <sodium.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/files/files.h"
#include "gateway/mcp/internal.h"
#include "gateway/observe/observe.h"
#include "gateway/session/session.h"

#define PROGRESS_TEXT 4096 /* output bytes carried by one progress notification */

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
    mcp_post_send(c->post, json_pack("{s:s, s:s, s:{s:O, s:i, s:o}}", "jsonrpc", "2.0", "method",
                                     "notifications/progress", "params", "progressToken",
                                     c->progress, "progress", ++c->progress_n, "message", m));
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
    /* A figure's data (e2b/chart, docs/api.md), for a model to read beside its image. */
    const json_t *chart = json_object_get(data, "e2b/chart");
    if (json_is_object(chart)) {
        char *js = json_dumps(chart, JSON_COMPACT);
        char *text = js ? xasprintf("[chart] %s", js) : NULL;
        if (text)
            add_text(c->content, text);
        free(text);
        free(js);
    }
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

void mcp_call_free(call_t *c)
{
    json_decref(c->id);
    json_decref(c->progress);
    json_decref(c->content);
    free(c->run);
    free(c->notebook_url);
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

/* Stops a call's code and drops its answer (the caller gave it up). */
void mcp_call_cancel(call_t *c, const char *why)
{
    char *msg = xasprintf("mcp: session %s %s", c->session, why);
    exec_cancel(&c->exec, msg);
    free(msg);
    post_t *p = c->post;
    call_unlist(c);
    mcp_call_free(c);
    mcp_post_call_over(p);
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
    json_t *result = json_pack("{s:O, s:b}", "content", c->content, "isError", c->error);
    if (c->notebook_url) { /* for the model to pass on, and for clients that read _meta */
        char *t = xasprintf("Open this session in JupyterLab: %s", c->notebook_url);
        add_text(json_object_get(result, "content"), t);
        free(t);
        json_object_set_new(result, "_meta", json_pack("{s:s}", "notebook_url", c->notebook_url));
    }
    call_unlist(c);
    post_t *p = c->post;
    mcp_post_send(p, mcp_rpc_result(c->id, result));
    mcp_call_free(c);
    mcp_post_call_over(p);
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

/* Starts an execution in the session's kernel for language lang: NULL
 * when it is under way (its answer comes later), else the tool result (an
 * error). */
static json_t *tool_execute(mcp_t *self, post_t *p, session_t *s, const json_t *id, json_t *args,
                            json_t *meta, int lang)
{
    const char *code = json_string_value(json_object_get(args, "code"));
    if (!code)
        return tool_text(true, "'code' (a string of %s) is required",
                         lang == LANG_PYTHON ? "Python" : "source");
    double t;
    json_t *bad = NULL;
    if (!timeout_arg(self, args, &t, &bad))
        return bad;
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = mcp_lang_kernel(self, s, lang, &note, &err);
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
    c->notebook_url = handover_url(self->cfg.notebook_url, kernel_id(k));
    exec_opts_t o = {.policy = self->cfg.exec,
                     .timeout_ms = (int)(t * 1000),
                     .rich_formats = self->cfg.exec->rich_formats,
                     .who = self->who};
    c->exec = exec_start(k, code, &o, &exec_events, c, &err);
    if (c->exec == NULL) {
        json_t *r = err->kind == SG_E_CONFLICT || err->kind == SG_E_QUOTA
                        ? tool_text(true, "%s", err->msg)
                        : tool_text(true,
                                    "the kernel cannot run code: %s (restart_kernel gives a "
                                    "fresh one)",
                                    err->msg);
        sg_error_free(&err);
        mcp_call_free(c);
        return r;
    }
    zlistx_add_end(self->calls, c);
    s->calls++;
    p->pending++;
    p->refs++;
    return NULL;
}

/* --- execute_code ----------------------------------------------------------------- */

/* The languages execute_code offers (those with a kernel), as "a, b, c". */
static char *offered(const mcp_t *self)
{
    char *list = xstrdup("");
    for (int i = 0; i < MCP_LANGS; i++) {
        if (!self->specs[i])
            continue;
        char *l = xasprintf("%s%s%s", list, *list ? ", " : "", mcp_langs[i]);
        free(list);
        list = l;
    }
    return list;
}

/* execute_python's execution in the language its 'language' argument
 * names (case aside; js and ts stand for javascript and typescript, as in
 * the REST API).  A language without a kernel here is a tool error that
 * lists those there are. */
static json_t *tool_execute_code(mcp_t *self, post_t *p, session_t *s, const json_t *id,
                                 json_t *args, json_t *meta)
{
    const char *language = json_string_value(json_object_get(args, "language"));
    int lang = -1;
    for (int i = 0; language && i < MCP_LANGS; i++)
        if (self->specs[i] && strcasecmp(kspec_language_name(language), mcp_langs[i]) == 0)
            lang = i;
    if (lang >= 0)
        return tool_execute(self, p, s, id, args, meta, lang);
    cleanup_free char *list = offered(self);
    if (!language)
        return tool_text(true, "'language' (a string: one of %s) is required", list);
    int n = (int)utf8_cut(language, strlen(language), 64); /* whole characters */
    return tool_text(true, "unknown language '%.*s': execute_code runs %s", n, language, list);
}

/* execute_code's description: its language enum holds the languages with a
 * kernel.  where: the sandbox's network. */
static json_t *execute_code_json(const mcp_t *self, const char *where)
{
    json_t *langs = json_array();
    for (int i = 0; i < MCP_LANGS; i++)
        if (self->specs[i])
            json_array_append_new(langs, json_string(mcp_langs[i]));
    cleanup_free char *list = offered(self);
    cleanup_free char *desc = xasprintf(
        "Runs code in one of %s, inside a gVisor sandbox %s. Each language has this session's "
        "own Jupyter kernel (and workspace): variables, functions and imports persist between "
        "calls of the same language; python is the kernel execute_python and the file tools "
        "use. typescript runs typed code as it is (Deno, as does javascript); bash runs shell "
        "commands. Returns stdout, stderr (marked [stderr]), the value of the last expression, "
        "the error with its traceback, and images. Files the code writes under output/ are "
        "returned as well. The working directory is " HOME ".",
        list, where);
    cleanup_free char *tdesc =
        xasprintf("seconds before the execution is interrupted (default %d); variables survive "
                  "an interrupt",
                  exec_policy_timeout(self->cfg.exec) / 1000);
    return json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:o, s:s}, s:{s:s, s:i, s:i, s:s}}, "
        "s:[s, s], s:b}}",
        "name", "execute_code", "title", "Run code", "description", desc, "inputSchema", "type",
        "object", "properties", "code", "type", "string", "description", "the source to run",
        "language", "type", "string", "enum", langs, "description",
        "the language of the code; each has its own kernel", "timeout", "type", "number",
        "exclusiveMinimum", 0, "maximum", self->cfg.exec->max_timeout_ms / 1000, "description",
        tdesc, "required", "code", "language", "additionalProperties", 0);
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
    kernel_t *k = mcp_files_kernel(self, s, &note, &err);
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
    kernel_t *k = mcp_files_kernel(self, s, &note, &err);
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
    kernel_t *k = mcp_files_kernel(self, s, &note, &err);
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
    const char *kid = s->kernels[LANG_PYTHON].id;
    kernel_t *k = kid ? kmgr_get(self->kmgr, kid) : NULL;
    sg_error_t *err = NULL;
    if (!k) {
        const char *note;
        if (!mcp_session_kernel(self, s, &note, &err))
            return tool_error(&err);
        return tool_text(false, "started a fresh kernel (there was none running)");
    }
    tenant_quota_t quota; /* a paused or dead kernel runs again: max-live */
    if (tenant_admit_wake(k, &quota, &err) < 0 || kernel_restart(k, &err) < 0)
        return tool_error(&err);
    audit_event(&self->who, "kernel.restart",
                json_pack("{s:s, s:s}", "session", s->id, "context", kernel_id(k)));
    log_info("mcp: session %s restarted its kernel", s->id);
    return tool_text(false, "the kernel was restarted: variables and imports are gone; files in "
                            "the workspace are kept");
}

/* --- snapshots ------------------------------------------------------------------ */

/* A snapshot call: answered from kmgr's callback, or at once when that
 * comes before kmgr_snapshot returns (then `now` holds the result). */
typedef struct {
    post_t *post;
    json_t *id;
    char session[37];
    bool calling;
    json_t *now;
} taking_t;

static void on_taken(const kmgr_snapshot_t *snap, const sg_error_t *err, void *arg)
{
    taking_t *t = arg;
    json_t *r =
        err ? tool_text(true, "no snapshot was taken: %s", err->msg)
            : tool_text(false,
                        "snapshot %s taken (%llu bytes): the restore tool with this id brings "
                        "back this session's variables and workspace files as they are now",
                        snap->id, (unsigned long long)snap->bytes);
    if (t->calling) {
        t->now = r;
        return;
    }
    post_t *p = t->post;
    session_t *s = zhashx_lookup(p->mcp->sessions, t->session);
    if (s) {
        s->calls--;
        s->last_seen = zclock_mono();
    }
    mcp_post_send(p, mcp_rpc_result(t->id, r));
    json_decref(t->id);
    free(t);
    mcp_post_call_over(p);
}

static json_t *tool_snapshot(mcp_t *self, post_t *p, session_t *s, const json_t *id, json_t *args)
{
    json_t *name = json_object_get(args, "name");
    if (name && !json_is_string(name))
        return tool_text(true, "'name' must be a string");
    const char *note;
    sg_error_t *err = NULL;
    kernel_t *k = mcp_files_kernel(self, s, &note, &err);
    if (!k)
        return tool_error(&err);
    taking_t *t = xzalloc(sizeof *t);
    *t = (taking_t){.post = p, .id = json_deep_copy(id), .calling = true};
    snprintf(t->session, sizeof t->session, "%s", s->id);
    int r = kmgr_snapshot(self->kmgr, k, json_string_value(name), on_taken, t, &err);
    t->calling = false;
    json_t *now = t->now;
    if (r < 0 || now) {
        json_decref(t->id);
        free(t);
        return r < 0 ? tool_error(&err) : now;
    }
    audit_event(&self->who, "snapshot.create",
                json_pack("{s:s, s:s}", "session", s->id, "context", kernel_id(k)));
    s->calls++;
    p->pending++;
    p->refs++;
    return NULL;
}

/* The session back at one of its tenant's snapshots (an admin's: any
 * tenant's): its kernel rolled back, or (without one) started from it.
 * Another tenant's is an unknown id, as the route layer answers one. */
static json_t *tool_restore(mcp_t *self, session_t *s, json_t *args)
{
    const char *sid = json_string_value(json_object_get(args, "snapshot_id"));
    if (!sid)
        return tool_text(true, "'snapshot_id' (a string: the snapshot tool's id) is required");
    const kmgr_snapshot_t *snap = kmgr_snapshot_get(self->kmgr, sid);
    tenant_t t; /* the session's tenant sees its own, an admin every tenant's */
    if (!snap || !tenant_by_name(s->owner, &t) || !tenant_sees(&t, snap->owner))
        return tool_text(true, "no snapshot '%s'", sid);
    const char *kid = s->kernels[LANG_PYTHON].id;
    kernel_t *k = kid ? kmgr_get(self->kmgr, kid) : NULL;
    sg_error_t *err = NULL;
    const char *note;
    tenant_quota_t quota; /* a paused or dead kernel runs again: max-live */
    if (!k) {
        if (!mcp_session_kernel_from(self, s, snap, &note, &err))
            return tool_error(&err);
    } else if (tenant_admit_wake(k, &quota, &err) < 0 ||
               kmgr_restore(self->kmgr, k, snap->id, &err) < 0) {
        return tool_error(&err);
    }
    audit_event(&self->who, "context.restore",
                json_pack("{s:s, s:s, s:s}", "session", s->id, "context",
                          s->kernels[LANG_PYTHON].id, "snapshot", sid));
    log_info("mcp: session %s restored snapshot %s", s->id, sid);
    return tool_text(false,
                     "this session is back at snapshot %s: its variables and workspace files "
                     "are as they were then",
                     sid);
}

/* --- the tools' descriptions ---------------------------------------------------- */

json_t *mcp_tools_json(const mcp_t *self, bool internet)
{
    const mcp_config_t *cfg = &self->cfg;
    const char *where = internet ? "whose network reaches what the server allows (the internet; "
                                   "never private networks, cloud metadata or the host)"
                                 : "with no network access";
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
        " \"annotations\": {\"destructiveHint\": true}},"
        "{\"name\": \"snapshot\", \"title\": \"Save the session's state\","
        " \"description\": \"Saves this session's variables, imports and workspace files as "
        "a snapshot and returns its id: the restore tool brings that state back later (say, "
        "before trying something risky). The kernel must be idle.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"name\": {\"type\": \"string\", \"description\": \"a label for it\"}},"
        "  \"additionalProperties\": false}},"
        "{\"name\": \"restore\", \"title\": \"Go back to a snapshot\","
        " \"description\": \"Rolls this session back to a snapshot the snapshot tool took of "
        "it: variables, imports and workspace files become the snapshot's; what changed since "
        "is lost.\","
        " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
        "  \"snapshot_id\": {\"type\": \"string\", \"description\": \"the id the snapshot "
        "tool returned\"}}, \"required\": [\"snapshot_id\"], \"additionalProperties\": false},"
        " \"annotations\": {\"destructiveHint\": true}}"
        "]",
        where, cfg->exec->max_timeout_ms / 1000, exec_policy_timeout(cfg->exec) / 1000,
        cfg->max_file);
    json_error_t jerr;
    json_t *tools = json_loads(text, 0, &jerr);
    if (!tools) { /* a programmer's error in the literal above */
        log_error("mcp: the tool list does not parse: %s (column %d)", jerr.text, jerr.column);
        abort();
    }
    json_array_insert_new(tools, 1, execute_code_json(self, where));
    return tools;
}

/* --- tools/call ------------------------------------------------------------------ */

json_t *mcp_tools_call(mcp_t *self, post_t *p, session_t *s, const json_t *id, const char *name,
                       json_t *args, json_t *meta, bool *unknown)
{
    *unknown = false;
    if (strcmp(name, "execute_python") == 0)
        return tool_execute(self, p, s, id, args, meta, LANG_PYTHON);
    if (strcmp(name, "execute_code") == 0)
        return tool_execute_code(self, p, s, id, args, meta);
    if (strcmp(name, "list_files") == 0)
        return tool_list(self, s, args);
    if (strcmp(name, "read_file") == 0)
        return tool_read(self, s, args);
    if (strcmp(name, "write_file") == 0)
        return tool_write(self, s, args);
    if (strcmp(name, "restart_kernel") == 0)
        return tool_restart(self, s);
    if (strcmp(name, "snapshot") == 0)
        return tool_snapshot(self, p, s, id, args);
    if (strcmp(name, "restore") == 0)
        return tool_restore(self, s, args);
    *unknown = true;
    return NULL;
}
