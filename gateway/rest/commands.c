/* commands: the REST API's commands, processes beside a context's kernel
 * (commands.h; docs/api.md "Commands").
 *
 *   POST   /contexts/{context}/commands            JSON body: start one —
 *          foreground (NDJSON, or one JSON document), or background (201)
 *   POST   /contexts/{context}/commands?cmd=...     the body is its stdin,
 *          streamed into it as it arrives; the answer once it is read
 *   GET    /contexts/{context}/commands            list
 *   GET    /contexts/{context}/commands/{command}  status (?wait=1: at its end)
 *   DELETE /contexts/{context}/commands/{command}  kill
 *   GET    .../commands/{command}/output           its output from here on
 *   POST   .../commands/{command}/stdin            the body to its stdin
 *   POST   .../commands/{command}/signal           {"signal": "TERM"}
 *
 * One request is one creq_t, with two references: the HTTP request's
 * (dropped when it ends: the front end's done, or a sink's abort) and the
 * command's (dropped when the reader hears the end, or is detached).
 */
#include <czmq.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/rest/internal.h"

/* Bytes a stream holds unsent before its command waits for the client. */
#define STREAM_HIGH_WATER (1 << 20)

typedef struct {
    api_t *api;
    int refs;
    resp_t *out;
    struct MHD_Connection *conn;
    command_t *c;                   /* while attached, or writing its stdin */
    const command_reader_t *reader; /* attached as */
    bool foreground;                /* this request started it: its client leaving kills it */
    bool json_mode, done, attached, writing, suspended, answered_later, ended;
    bool close_stdin;
    json_t *agg;      /* JSON mode: the whole answer; a wait: the status */
    size_t kept[2];   /* JSON mode: bytes of stdout and stderr kept */
    char carry[2][4]; /* the start of a UTF-8 character a chunk ended in */
    size_t ncarry[2];
    int64_t started;
    sg_error_t *err; /* a streamed body's request refused: answered once it is read */
} creq_t;

static const command_reader_t stream_reader;
static const command_reader_t wait_reader;

static creq_t *creq_new(api_t *api, struct MHD_Connection *conn)
{
    creq_t *cr = xzalloc(sizeof *cr);
    cr->api = api;
    cr->refs = 1; /* the HTTP request's */
    cr->conn = conn;
    cr->out = resp_new(api->loop, conn, api->wake, api->wake_arg);
    cr->started = zclock_mono();
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    cr->json_mode = accept && strstr(accept, "application/json") && !strstr(accept, "ndjson");
    return cr;
}

static void creq_unref(creq_t *cr)
{
    if (--cr->refs > 0)
        return;
    resp_free(&cr->out);
    json_decref(cr->agg);
    sg_error_free(&cr->err);
    free(cr);
}

/* --- output as text ---------------------------------------------------------------- */

/* The bytes of a chunk as JSON text: a UTF-8 character split between two
 * chunks is joined (its start carried), and bytes that are not UTF-8
 * become '?'.  *len: the text's length. */
static char *chunk_text(creq_t *cr, int which, const char *data, size_t n, bool last, size_t *len)
{
    size_t total = cr->ncarry[which] + n;
    char *buf = xmalloc(total + 1);
    memcpy(buf, cr->carry[which], cr->ncarry[which]);
    memcpy(buf + cr->ncarry[which], data, n);
    size_t cut = last ? total : utf8_cut(buf, total, total > 0 ? total - 1 : 0);
    /* utf8_cut keeps whole characters; keep the last byte too when it
     * ends one (an ASCII byte, or the last of a sequence). */
    if (!last && total > 0) {
        size_t start = cut;
        unsigned char lead = (unsigned char)buf[start];
        size_t need = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
        if (start + need <= total)
            cut = total;
    }
    cr->ncarry[which] = total - cut > 3 ? 0 : total - cut;
    memcpy(cr->carry[which], buf + cut, cr->ncarry[which]);
    json_t *probe = json_stringn(buf, cut);
    if (!probe)
        for (size_t i = 0; i < cut; i++)
            if ((unsigned char)buf[i] >= 0x80)
                buf[i] = '?';
    json_decref(probe);
    buf[cut] = 0;
    *len = cut;
    return buf;
}

static void emit(creq_t *cr, json_t *line)
{
    char *text = json_dumps(line, JSON_COMPACT);
    json_decref(line);
    size_t n = strlen(text);
    text[n] = '\n';
    resp_write(cr->out, text, n + 1);
    free(text);
}

/* JSON mode: text joins its stream, up to --max-output bytes, then one
 * marker. */
static void gather(creq_t *cr, int which, const char *text, size_t n)
{
    const char *key = which ? "stderr" : "stdout";
    size_t max = cr->api->cfg.exec->max_output;
    if (cr->kept[which] >= max)
        return;
    size_t room = max - cr->kept[which];
    size_t take = n <= room ? n : utf8_cut(text, n, room);
    json_t *old = json_object_get(cr->agg, key);
    size_t had = json_string_length(old);
    char *joined = xmalloc(had + take + 128);
    memcpy(joined, json_string_value(old), had);
    memcpy(joined + had, text, take);
    size_t len = had + take;
    cr->kept[which] += take;
    if (take < n) {
        cr->kept[which] = max;
        len += (size_t)snprintf(joined + len, 128, "\n[sandgate: output past %zu bytes dropped]\n",
                                max);
    }
    json_object_set_new(cr->agg, key, json_stringn_nocheck(joined, len));
    free(joined);
}

static void put_text(creq_t *cr, int which, const char *data, size_t n, bool last)
{
    size_t len;
    char *text = chunk_text(cr, which, data, n, last, &len);
    if (len == 0) {
        free(text);
        return;
    }
    if (cr->json_mode)
        gather(cr, which, text, len);
    else
        emit(cr, json_pack("{s:s, s:s%}", "type", which ? "stderr" : "stdout", "text", text, len));
    free(text);
}

/* --- the reader ------------------------------------------------------------------- */

static bool on_output(void *arg, command_t *c, command_stream_t which, const char *data, size_t n)
{
    creq_t *cr = arg;
    put_text(cr, which == COMMAND_STDERR, data, n, false);
    return cr->json_mode || resp_pending(cr->out) < STREAM_HIGH_WATER;
}

static void on_drained(void *arg)
{
    creq_t *cr = arg;
    if (cr->attached && cr->c)
        command_reader_ready(cr->c, &stream_reader, cr);
}

static void on_dropped(void *arg, command_t *c, uint64_t bytes)
{
    creq_t *cr = arg;
    if (cr->json_mode)
        json_object_set_new(cr->agg, "dropped_bytes", json_integer((json_int_t)bytes));
    else
        emit(cr, json_pack("{s:s, s:I}", "type", "dropped", "bytes", (json_int_t)bytes));
}

/* How it ended, as the exit line or the JSON answer has it. */
static json_t *exit_fields(creq_t *cr, command_t *c)
{
    json_t *j =
        json_pack("{s:i, s:b, s:I}", "exit_code", command_exit_code(c), "timed_out",
                  command_timed_out(c), "duration_ms", (json_int_t)(zclock_mono() - cr->started));
    if (command_error(c))
        json_object_set_new(j, "error", json_string(command_error(c)->msg));
    else if (command_timed_out(c))
        json_object_set_new(j, "error",
                            json_string("the command passed its timeout and was killed"));
    return j;
}

static void on_exit_(void *arg, command_t *c)
{
    creq_t *cr = arg;
    put_text(cr, 0, "", 0, true);
    put_text(cr, 1, "", 0, true);
    json_t *f = exit_fields(cr, c);
    if (cr->json_mode) {
        json_object_update(cr->agg, f);
        json_decref(f);
        resp_ready(cr->out);
    } else {
        json_t *line = json_pack("{s:s}", "type", "exit");
        json_object_update(line, f);
        json_decref(f);
        emit(cr, line);
        resp_end(cr->out);
    }
    cr->done = true;
    cr->attached = false;
    cr->c = NULL;
    creq_unref(cr); /* the command's */
}

static const command_reader_t stream_reader = {
    .on_output = on_output, .on_dropped = on_dropped, .on_exit = on_exit_};

static void on_wait_exit(void *arg, command_t *c)
{
    creq_t *cr = arg;
    json_decref(cr->agg);
    cr->agg = command_json(c);
    cr->done = true;
    cr->attached = false;
    cr->c = NULL;
    resp_ready(cr->out);
    creq_unref(cr);
}

static const command_reader_t wait_reader = {.on_exit = on_wait_exit};

/* Attaches cr as c's reader (cr->json_mode says how it answers). */
static int attach(creq_t *cr, command_t *c, const command_reader_t *r, sg_error_t **err)
{
    if (cr->json_mode && !cr->agg)
        cr->agg = json_pack("{s:s, s:I, s:s, s:s}", "id", command_id(c), "pid",
                            (json_int_t)command_pid(c), "stdout", "", "stderr", "");
    cr->refs++; /* the command's */
    cr->c = c;
    cr->attached = true;
    cr->reader = r;
    resp_on_drained(cr->out, on_drained, cr);
    if (command_attach(c, r, cr, err) < 0) {
        cr->attached = false;
        cr->c = NULL;
        cr->refs--;
        return -1;
    }
    return 0;
}

/* The answer of a reader's request: the stream at once, or the document
 * when the command has ended (now, or when it is resumed). */
static enum MHD_Result respond(creq_t *cr)
{
    if (cr->json_mode) {
        if (cr->done)
            return http_reply_json(cr->conn, 200, json_incref(cr->agg));
        cr->answered_later = true;
        return resp_wait(cr->out);
    }
    struct MHD_Response *r = resp_stream(cr->out, "{\"type\":\"keepalive\"}\n");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
    enum MHD_Result ret = http_queue(cr->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The request ended (answered, or its client left). */
static void creq_end(creq_t *cr)
{
    resp_set_gone(cr->out);
    if (cr->writing && cr->c) {
        command_stdin_writer(cr->c, NULL, NULL, NULL);
        cr->writing = false;
        if (!cr->attached)
            creq_unref(cr); /* the writer's */
    }
    if (cr->attached && !cr->done) {
        command_t *c = cr->c;
        command_detach(c, cr->reader, cr);
        if (cr->foreground) /* as an execution is interrupted when its client leaves */
            command_signal(c, SIGKILL, NULL);
        cr->attached = false;
        cr->c = NULL;
        creq_unref(cr); /* the command's: no callback follows */
    }
    creq_unref(cr);
}

static void request_done(void *ctx, void *state, bool completed)
{
    creq_end(state);
}

/* --- starting ---------------------------------------------------------------------- */

typedef struct {
    const char *shell;
    const char **argv;
    const char *cwd;
    json_t *envs;
    double timeout_s; /* 0: none given */
    bool background, stdin_open;
} start_t;

/* Starts what s says in the request's context. */
static command_t *start(api_t *self, http_req_t *call, kernel_t *k, const start_t *s,
                        sg_error_t **err)
{
    const exec_policy_t *policy = self->cfg.exec;
    /* Written so that a NaN (?timeout=nan, which strtod takes) is refused. */
    if (!(s->timeout_s >= 0 && s->timeout_s <= policy->max_timeout_ms / 1000)) {
        sg_error_set(err, SG_E_INVALID, "'timeout' must be in (0, %d] seconds",
                     policy->max_timeout_ms / 1000);
        return NULL;
    }
    /* A timeout under a millisecond is one: 0 would mean none at all. */
    int timeout_ms = s->timeout_s * 1000 < 1 ? 1 : (int)(s->timeout_s * 1000);
    command_opts_t o = {.argv = s->argv,
                        .shell = s->shell,
                        .cwd = s->cwd ? s->cwd : api_context_cwd(self, k),
                        .envs = s->envs,
                        .timeout_ms = s->timeout_s > 0 ? timeout_ms
                                      : s->background  ? 0
                                                       : exec_policy_timeout(policy),
                        .stdin_open = s->stdin_open,
                        .background = s->background};
    http_who(call, "rest", &o.who);
    return commands_start(self->commands, k, &o, err);
}

static void emit_start(creq_t *cr, command_t *c)
{
    if (!cr->json_mode)
        emit(cr, json_pack("{s:s, s:s, s:I}", "type", "start", "id", command_id(c), "pid",
                           (json_int_t)command_pid(c)));
}

/* The JSON body's fields; false after answering 400. */
static bool start_fields(json_t *req, start_t *s, struct MHD_Connection *conn, enum MHD_Result *ret)
{
    json_t *cmd, *argv, *cwd, *envs, *timeout, *bg, *in;
    if (!api_field(req, "cmd", JSON_STRING, &cmd, conn, ret) ||
        !api_field(req, "argv", JSON_ARRAY, &argv, conn, ret) ||
        !api_field(req, "cwd", JSON_STRING, &cwd, conn, ret) ||
        !api_field(req, "envs", JSON_OBJECT, &envs, conn, ret) ||
        !api_field(req, "timeout", JSON_REAL, &timeout, conn, ret) ||
        !api_field(req, "background", JSON_TRUE, &bg, conn, ret) ||
        !api_field(req, "stdin", JSON_TRUE, &in, conn, ret))
        return false;
    if ((cmd == NULL) == (argv == NULL)) {
        *ret = http_reply_errorf(conn, SG_E_INVALID, "give either 'cmd' or 'argv'");
        return false;
    }
    size_t i;
    json_t *a;
    if (argv) {
        s->argv = xzalloc((json_array_size(argv) + 1) * sizeof *s->argv);
        json_array_foreach (argv, i, a) {
            if (!json_is_string(a)) {
                *ret = http_reply_errorf(conn, SG_E_INVALID, "'argv' must be strings");
                return false;
            }
            s->argv[i] = json_string_value(a);
        }
    }
    if (timeout && json_number_value(timeout) <= 0) {
        *ret = http_reply_errorf(conn, SG_E_INVALID, "'timeout' must be in seconds, above 0");
        return false;
    }
    s->shell = json_string_value(cmd);
    s->cwd = json_string_value(cwd);
    s->envs = envs;
    s->timeout_s = timeout ? json_number_value(timeout) : 0;
    s->background = json_is_true(bg);
    s->stdin_open = json_is_true(in);
    return true;
}

/* POST /contexts/{context}/commands with a JSON body. */
static enum MHD_Result commands_post(void *arg, http_req_t *call)
{
    api_t *self = arg;
    creq_t *cr = call->state;
    if (call->resumed)
        return http_reply_json(call->conn, 200, json_incref(cr->agg));
    enum MHD_Result ret = MHD_NO;
    json_t *req = api_parse_body(call->conn, call->body, call->len, &ret);
    if (!req)
        return ret;
    start_t s = {0};
    sg_error_t *err = NULL;
    command_t *c = NULL;
    if (!start_fields(req, &s, call->conn, &ret))
        goto out;
    c = start(self, call, http_arg(call, "context"), &s, &err);
    if (!c) {
        ret = reply_failed(call->conn, &err);
        goto out;
    }
    if (s.background) {
        ret = http_reply_json(call->conn, 201, command_json(c));
        goto out;
    }
    cr = creq_new(self, call->conn);
    cr->foreground = true;
    call->state = cr;
    emit_start(cr, c);
    attach(cr, c, &stream_reader, NULL); /* a new command has no reader yet */
    ret = respond(cr);
out:
    free(s.argv);
    json_decref(req);
    return ret;
}

/* --- the body as stdin: POST /contexts/{context}/commands?cmd=... ---------------- */

static enum MHD_Result env_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    json_t *envs = cls;
    const char *eq = value ? strchr(value, '=') : NULL;
    if (key && strcmp(key, "env") == 0 && eq) {
        char *name = xstrndup(value, (size_t)(eq - value));
        json_object_set_new(envs, name, json_string(eq + 1));
        free(name);
    } else if (key && strcmp(key, "env") == 0) {
        json_object_set_new(envs, "", json_string("")); /* refused by commands_start */
    }
    return MHD_YES;
}

static void on_stdin_room(void *arg, command_t *c, bool ended);

static void resume_upload(creq_t *cr)
{
    if (cr->suspended) {
        cr->suspended = false;
        http_resume(cr->conn);
        cr->api->wake(cr->api->wake_arg);
    }
}

/* The command's stdin has room again, or it has ended: a start request
 * then reads its output and end at once (kept while the body came). */
static void on_stdin_room(void *arg, command_t *c, bool ended)
{
    creq_t *cr = arg;
    if (ended) {
        cr->writing = false;
        cr->ended = true;
        if (!cr->foreground)
            cr->c = NULL;
        if (cr->foreground) /* the writer's reference becomes the reader's */
            attach(cr, c, &stream_reader, NULL);
        creq_unref(cr);
    }
    resume_upload(cr);
}

static void *start_open(void *ctx, const http_req_t *req)
{
    api_t *self = ctx;
    struct MHD_Connection *conn = req->conn;
    const char *cmd = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cmd");
    if (!cmd)
        return NULL; /* a JSON body: commands_post */
    creq_t *cr = creq_new(self, conn);
    cr->foreground = true;
    const char *timeout = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "timeout");
    char *end = NULL;
    start_t s = {.shell = cmd,
                 .cwd = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cwd"),
                 .envs = json_object(),
                 .timeout_s = timeout ? strtod(timeout, &end) : 0,
                 .stdin_open = true};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, env_arg, s.envs);
    if (timeout && (!*timeout || *end || !(s.timeout_s > 0))) { /* NaN too */
        sg_error_set(&cr->err, SG_E_INVALID, "'timeout' must be in seconds, above 0");
    } else {
        command_t *c = start(self, (http_req_t *)req, http_arg(req, "context"), &s, &cr->err);
        if (c) {
            emit_start(cr, c);
            cr->c = c;
            cr->writing = true;
            cr->refs++; /* the writer's */
            command_stdin_writer(c, on_stdin_room, cr, NULL);
        }
    }
    json_decref(s.envs);
    return cr;
}

/* Takes what the command's stdin has room for; the rest waits, the
 * connection suspended, until on_stdin_room. */
/* http_sink_t.write: takes what the command's stdin has room for; when
 * that is less, the connection is suspended here until it drains. */
static size_t stdin_take(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                         size_t len)
{
    creq_t *cr = sink;
    if (cr->err || !cr->writing)
        return len; /* refused, or nobody reads it: dropped */
    ssize_t n = command_stdin_write(cr->c, data, len, NULL);
    if (n < 0)
        return len;
    if ((size_t)n < len) {
        cr->suspended = true;
        http_suspend(conn);
    }
    return (size_t)n;
}

static enum MHD_Result start_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    creq_t *cr = *sink;
    if (cr->answered_later)
        return http_reply_json(conn, 200, json_incref(cr->agg));
    if (cr->err) {
        enum MHD_Result ret = reply_failed(conn, &cr->err);
        *sink = NULL;
        creq_end(cr);
        return ret;
    }
    if (cr->writing) { /* the body is in: EOF, then the output */
        command_t *c = cr->c;
        command_stdin_writer(c, NULL, NULL, NULL);
        cr->writing = false;
        command_stdin_close(c);
        cr->refs--; /* the writer's becomes the reader's (attach) */
        attach(cr, c, &stream_reader, NULL);
    }
    return respond(cr); /* *sink stays: its abort is the request's end */
}

static void sink_abort(void *ctx, void *sink)
{
    creq_end(sink);
}

static const http_sink_t start_sink = {
    .open = start_open, .write = stdin_take, .finish = start_finish, .abort = sink_abort};

/* --- one command --------------------------------------------------------------------- */

static void *resolve_command(void *ctx, const char *id, const http_req_t *req)
{
    api_t *self = ctx;
    kernel_t *k = http_arg(req, "context"); /* resolved first, its tenant checked */
    return k ? commands_find(self->commands, k, id) : NULL;
}

static const char *command_owner(void *ctx, void *obj)
{
    kernel_t *k = command_kernel(obj);
    return k ? kernel_owner(k) : NULL;
}

static enum MHD_Result commands_get(void *arg, http_req_t *call)
{
    api_t *self = arg;
    return http_reply_json(call->conn, 200,
                           commands_list(self->commands, http_arg(call, "context"), true));
}

/* A request that reads c's output (stream_reader) or waits for its end
 * (wait_reader: the status, as JSON). */
static enum MHD_Result read_command(api_t *self, http_req_t *call, command_t *c,
                                    const command_reader_t *r)
{
    creq_t *cr = creq_new(self, call->conn);
    if (r == &wait_reader) {
        cr->json_mode = true;
        cr->agg = json_object();
    }
    call->state = cr;
    sg_error_t *err = NULL;
    if (attach(cr, c, r, &err) < 0)
        return reply_failed(call->conn, &err);
    return respond(cr);
}

static enum MHD_Result command_get(void *arg, http_req_t *call)
{
    creq_t *cr = call->state;
    if (call->resumed)
        return http_reply_json(call->conn, 200, json_incref(cr->agg));
    command_t *c = http_arg(call, "command");
    const char *wait = MHD_lookup_connection_value(call->conn, MHD_GET_ARGUMENT_KIND, "wait");
    if (!wait || strcmp(wait, "0") == 0 || strcmp(wait, "false") == 0 ||
        command_state(c) == COMMAND_EXITED)
        return http_reply_json(call->conn, 200, command_json(c));
    return read_command(arg, call, c, &wait_reader);
}

static enum MHD_Result command_output(void *arg, http_req_t *call)
{
    creq_t *cr = call->state;
    if (call->resumed)
        return http_reply_json(call->conn, 200, json_incref(cr->agg));
    return read_command(arg, call, http_arg(call, "command"), &stream_reader);
}

static enum MHD_Result command_signal_post(void *arg, http_req_t *call)
{
    enum MHD_Result ret = MHD_NO;
    json_t *req = api_parse_body(call->conn, call->body, call->len, &ret);
    json_t *sig;
    if (!req)
        return ret;
    if (api_field(req, "signal", JSON_STRING, &sig, call->conn, &ret)) {
        int n = command_signal_parse(json_string_value(sig));
        sg_error_t *err = NULL;
        if (n == 0)
            ret = http_reply_errorf(call->conn, SG_E_INVALID,
                                    "'signal' must be INT, TERM, HUP or KILL");
        else if (command_signal(http_arg(call, "command"), n, &err) < 0)
            ret = reply_failed(call->conn, &err);
        else
            ret = reply_status(call->conn, 204);
    }
    json_decref(req);
    return ret;
}

static enum MHD_Result command_delete(void *arg, http_req_t *call)
{
    sg_error_t *err = NULL;
    if (command_signal(http_arg(call, "command"), SIGKILL, &err) < 0)
        return reply_failed(call->conn, &err);
    return reply_status(call->conn, 204);
}

/* --- POST .../commands/{command}/stdin: the body to its stdin ------------------------ */

static void *stdin_open(void *ctx, const http_req_t *req)
{
    creq_t *cr = creq_new(ctx, req->conn);
    command_t *c = http_arg(req, "command");
    const char *close = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "close");
    cr->close_stdin = close && strcmp(close, "0") != 0 && strcmp(close, "false") != 0;
    /* Refused unless its stdin is open (a write of nothing says so). */
    if (command_stdin_write(c, "", 0, &cr->err) >= 0 &&
        command_stdin_writer(c, on_stdin_room, cr, &cr->err) == 0) {
        cr->c = c;
        cr->writing = true;
        cr->refs++; /* the writer's */
    }
    return cr;
}

static enum MHD_Result stdin_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    creq_t *cr = *sink;
    enum MHD_Result ret;
    if (!cr->err && cr->ended)
        sg_error_set(&cr->err, SG_E_CONFLICT, "the command ended before its input was read");
    if (cr->err) {
        ret = reply_failed(conn, &cr->err);
    } else {
        if (cr->close_stdin)
            command_stdin_close(cr->c);
        ret = reply_status(conn, 204);
    }
    *sink = NULL;
    creq_end(cr);
    return ret;
}

static const http_sink_t stdin_sink = {
    .open = stdin_open, .write = stdin_take, .finish = stdin_finish, .abort = sink_abort};

int api_commands_register(api_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/contexts/{context}/commands", commands_post, 0, &start_sink},
        {"GET", "/contexts/{context}/commands", commands_get, 0, NULL},
        {"GET", "/contexts/{context}/commands/{command}", command_get, 0, NULL},
        {"DELETE", "/contexts/{context}/commands/{command}", command_delete, 0, NULL},
        {"GET", "/contexts/{context}/commands/{command}/output", command_output, 0, NULL},
        {"POST", "/contexts/{context}/commands/{command}/stdin", NULL, 0, &stdin_sink},
        {"POST", "/contexts/{context}/commands/{command}/signal", command_signal_post, 0, NULL},
    };
    const http_front_t front = {.name = "rest", .ctx = self, .done = request_done};
    if (http_param(http, "command", resolve_command, command_owner, self, "no command '%s'", err) <
        0)
        return -1;
    return http_routes(http, &front, routes, sizeof routes / sizeof routes[0], err);
}
