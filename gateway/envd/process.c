/* process: envd's Process service (internal.h) over commands.h; a
 * terminal (Start's pty: E2B's pty.create) is a command on a pseudo-terminal
 * (commands.h's pty_rows): its output comes as data.pty, SendInput's
 * input.pty types into it, Update resizes it.
 *
 * Start and Connect are server streams: a start event with the command's
 * pid (commands.h's number, 1, 2, ... per context), its output as data
 * events (bytes, base64 in JSON) as it comes, an end event with its exit
 * code, then the end of the stream; a keepalive event after
 * KEEPALIVE_MS of silence.  A client that leaves only detaches: the command
 * runs on (the SDK's background commands, disconnect()).  The Connect
 * deadline (Connect-Timeout-Ms, the SDKs' timeoutMs / timeout) is the
 * command's timeout: commands.h kills its whole group then, and the stream
 * ends with deadline_exceeded. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/commands/commands.h"
#include "gateway/envd/internal.h"
#include "gateway/http/http.h"

#define KEEPALIVE_MS 5000
#define HIGH_WATER (1 << 20) /* bytes not yet sent to the client */

static const command_reader_t reader;
static void kill_exited(void *arg, command_t *c);
static const command_reader_t kill_reader = {.on_exit = kill_exited};

/* --- the streams: Start and Connect ------------------------------------------------- */

typedef struct {
    envd_call_t base;
    envd_t *envd;
    resp_t *out;
    command_t *cmd; /* while attached */
    int keepalive;  /* timer */
    bool wrote;     /* since the last keepalive tick */
    bool started;   /* the start event went out */
    /* Output that came before the pid was known (a terminal's prompt): held,
     * the command's pipes not read meanwhile, until the start event has the
     * pid a client then names the process by. */
    char *held;
    size_t held_n;
    command_stream_t held_which;
} stream_t;

/* The pid envd gives a command: its process's inside the sandbox, as E2B's
 * envd does (so `kill -0 PID` in the sandbox means it), or, when that could
 * not be learnt, sandgate's number past gVisor's largest pid: never another
 * process's (a small number would be a kernel's, or init's, 1). */
#define UNKNOWN_PID_BASE (1L << 22) /* gVisor's pid_max */
static long envd_pid(const command_t *c)
{
    return command_inner_pid(c) ? command_inner_pid(c) : UNKNOWN_PID_BASE + (long)command_pid(c);
}

static void frame(stream_t *s, uint8_t flags, json_t *msg)
{
    cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    char *buf;
    size_t n;
    envd_frame(flags, text, strlen(text), &buf, &n);
    resp_write(s->out, buf, n);
    free(buf);
    s->wrote = true;
}

static void event(stream_t *s, const char *kind, json_t *value)
{
    frame(s, 0, json_pack("{s:{s:o}}", "event", kind, value));
}

/* The end of the stream: {} or {"error": {"code", "message"}}. */
static void finish(stream_t *s, const char *code, const char *msg)
{
    frame(s, ENVD_FLAG_END,
          code ? json_pack("{s:o}", "error", envd_error_json(code, msg)) : json_object());
    loop_timer_end(s->envd->loop, s->keepalive);
    s->keepalive = -1;
    resp_end(s->out);
}

static void on_keepalive(loop_t *loop, int timer_id, void *arg)
{
    stream_t *s = arg;
    if (!s->wrote)
        event(s, "keepalive", json_object());
    s->wrote = false;
}

static void data_event(stream_t *s, command_t *c, command_stream_t which, const char *data,
                       size_t n)
{
    cleanup_free char *b64 = envd_b64(data, n);
    const char *key = which == COMMAND_STDERR ? "stderr" : command_pty(c) ? "pty" : "stdout";
    event(s, "data", json_pack("{s:s}", key, b64));
}

/* The stream's first event, once the command's pid is known (or its end
 * came first), then what output was held for it. */
static void start_event(stream_t *s, command_t *c)
{
    if (s->started)
        return;
    s->started = true;
    event(s, "start", json_pack("{s:I}", "pid", (json_int_t)envd_pid(c)));
    if (s->held) {
        data_event(s, c, s->held_which, s->held, s->held_n);
        free(s->held);
        s->held = NULL;
        if (s->cmd)
            command_reader_ready(s->cmd, &reader, s);
    }
}

static void on_pid(void *arg, command_t *c)
{
    start_event(arg, c);
}

static bool on_output(void *arg, command_t *c, command_stream_t which, const char *data, size_t n)
{
    stream_t *s = arg;
    if (!s->started && !command_pid_settled(c) && (!s->held || which == s->held_which)) {
        s->held = xrealloc(s->held, s->held_n + n + 1);
        memcpy(s->held + s->held_n, data, n);
        s->held_n += n;
        s->held_which = which;
        return false; /* on_pid goes on */
    }
    start_event(s, c);
    data_event(s, c, which, data, n);
    return resp_pending(s->out) < HIGH_WATER; /* else the command waits for the client */
}

static void on_drained(void *arg)
{
    stream_t *s = arg;
    if (s->cmd && !s->held)
        command_reader_ready(s->cmd, &reader, s);
}

static void on_exit_(void *arg, command_t *c)
{
    stream_t *s = arg;
    s->cmd = NULL;
    start_event(s, c);
    const sg_error_t *err = command_error(c);
    if (command_timed_out(c)) {
        finish(s, "deadline_exceeded", "the command ran past its timeout and was killed");
        return;
    }
    kernel_t *k = command_kernel(c);
    if (!k || kernel_shut_down(k)) {
        /* Its sandbox was killed meanwhile: what runsc said about it is no
         * exit of the command's.  UNAVAILABLE, as E2B's envd ends such a
         * stream, and the SDK asks /health, which says it was not found. */
        finish(s, "unavailable", "the sandbox was killed while the command ran");
        return;
    }
    int code = command_exit_code(c);
    cleanup_free char *status = err ? xstrdup("error") : xasprintf("exit status %d", code);
    json_t *end =
        json_pack("{s:i, s:b, s:s}", "exitCode", code, "exited", err == NULL, "status", status);
    if (err)
        json_object_set_new(end, "error", json_string(err->msg));
    event(s, "end", end);
    finish(s, NULL, NULL);
}

static const command_reader_t reader = {
    .on_output = on_output, .on_exit = on_exit_, .on_pid = on_pid};

static void stream_end(envd_call_t *call, bool completed)
{
    stream_t *s = (stream_t *)call;
    free(s->held);
    if (s->cmd)
        command_detach(s->cmd, &reader, s);
    loop_timer_end(s->envd->loop, s->keepalive);
    resp_set_gone(s->out);
    resp_free(&s->out);
    free(s);
}

/* Answers req with a stream of c's events (a start event first). */
static enum MHD_Result stream_attach(envd_t *self, http_req_t *req, command_t *c)
{
    stream_t *s = xzalloc(sizeof *s);
    s->base.end = stream_end;
    s->envd = self;
    s->out = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
    s->keepalive = loop_timer(self->loop, KEEPALIVE_MS, 0, on_keepalive, s);
    resp_on_drained(s->out, on_drained, s);
    req->state = s;
    if (command_pid_settled(c)) /* else on_pid sends it */
        start_event(s, c);
    s->cmd = c;
    sg_error_t *err = NULL;
    if (command_attach(c, &reader, s, &err) < 0) {
        s->cmd = NULL;
        finish(s, envd_code(NULL, err->kind), err->msg);
        sg_error_free(&err);
    }
    struct MHD_Response *r = resp_stream(s->out, NULL);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
    enum MHD_Result ret = http_queue(req->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ProcessConfig's cmd and args as an argv (the caller's; its strings
 * borrowed from config), or NULL. */
static const char **config_argv(const json_t *config)
{
    const char *cmd = envd_str(config, "cmd", NULL);
    const json_t *args = json_object_get(config, "args");
    if (cmd == NULL || *cmd == 0 || (args && !json_is_array(args)))
        return NULL;
    size_t n = json_array_size(args);
    const char **argv = xzalloc((n + 2) * sizeof *argv);
    argv[0] = cmd;
    for (size_t i = 0; i < n; i++)
        if (!(argv[i + 1] = json_string_value(json_array_get(args, i)))) {
            free(argv);
            return NULL;
        }
    return argv;
}

static enum MHD_Result proc_start(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    enum MHD_Result ret;
    json_t *msg = envd_stream_request(req, &ret);
    if (msg == NULL)
        return ret;
    kernel_t *k = envd_kernel_or_reply(self, req, &ret);
    json_t *config = json_object_get(msg, "process");
    const char **argv = k ? config_argv(config) : NULL;
    const json_t *envs = json_object_get(config, "envs");
    json_t *pty = json_object_get(msg, "pty");
    const json_t *size = json_object_get(pty, "size");
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    if (k == NULL) {
        /* answered */
    } else if (pty && !json_is_null(pty) && (rows < 1 || cols < 1 || rows > 1000 || cols > 1000)) {
        ret = envd_reply_code(req->conn, "invalid_argument",
                              "pty.size needs rows and cols, 1..1000 each");
    } else if (argv == NULL || (envs && !json_is_object(envs))) {
        ret = envd_reply_code(req->conn, "invalid_argument",
                              "process.cmd, a string, and process.args, strings, are needed");
    } else {
        const char *tmo =
            MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Connect-Timeout-Ms");
        long long t = tmo ? atoll(tmo) : 0;
        /* The sandbox's own (Sandbox.create's envs), then the command's. */
        const json_t *base = api_sandbox_envs(self->api, k);
        json_t *merged = base ? json_deep_copy(base) : NULL;
        if (merged && envs)
            json_object_update(merged, (json_t *)envs);
        command_opts_t o = {.argv = argv,
                            .cwd = envd_str(config, "cwd", NULL),
                            .envs = merged ? merged : envs,
                            .timeout_ms = t > 0 && t < INT32_MAX ? (int)t : 0,
                            .stdin_open = json_is_true(json_object_get(msg, "stdin")),
                            .background = true,
                            .pty_rows = (unsigned)rows,
                            .pty_cols = (unsigned)cols};
        http_who(req, "envd", &o.who);
        sg_error_t *err = NULL;
        command_t *c = commands_start(self->commands, k, &o, &err);
        json_decref(merged);
        if (c == NULL) {
            ret = envd_reply_error(req->conn, NULL, err);
            sg_error_free(&err);
        } else {
            ret = stream_attach(self, req, c);
        }
    }
    free(argv);
    json_decref(msg);
    return ret;
}

/* The command a ProcessSelector names in k, or NULL after answering. */
static command_t *selected(envd_t *self, const http_req_t *req, const json_t *msg,
                           enum MHD_Result *ret)
{
    kernel_t *k = envd_kernel_or_reply(self, req, ret);
    if (k == NULL)
        return NULL;
    const json_t *pid = json_object_get(json_object_get(msg, "process"), "pid");
    json_int_t n = json_is_integer(pid) ? json_integer_value(pid) : 0;
    command_t *c = n > 0 ? commands_find_inner_pid(self->commands, k, (long)n) : NULL;
    if (!c && n > UNKNOWN_PID_BASE && n - UNKNOWN_PID_BASE <= UINT32_MAX) {
        c = commands_find_pid(self->commands, k, (uint32_t)(n - UNKNOWN_PID_BASE));
        c = c && !command_inner_pid(c) ? c : NULL; /* given before the pid was known */
    }
    if (c == NULL)
        *ret = envd_reply_code(req->conn, "not_found",
                               json_is_integer(pid) ? "no such process" : "process.pid is needed");
    return c;
}

/* What a call on one command does once its message is read and the
 * command found. */
typedef enum MHD_Result (*on_command_fn)(envd_t *self, http_req_t *req, const json_t *msg,
                                         command_t *c);

/* The calls that name a command (Connect, SendInput, SendSignal,
 * CloseStdin): the message (enveloped for a stream), the command, then fn. */
static enum MHD_Result on_selected(envd_t *self, http_req_t *req, bool stream, on_command_fn fn)
{
    enum MHD_Result ret;
    json_t *msg = stream ? envd_stream_request(req, &ret) : envd_request(req, &ret);
    if (msg == NULL)
        return ret;
    command_t *c = selected(self, req, msg, &ret);
    if (c)
        ret = fn(self, req, msg, c);
    json_decref(msg);
    return ret;
}

static enum MHD_Result connect_to(envd_t *self, http_req_t *req, const json_t *msg, command_t *c)
{
    return stream_attach(self, req, c);
}

static enum MHD_Result proc_connect(void *ctx, http_req_t *req)
{
    return on_selected(ctx, req, true, connect_to);
}

/* --- the unary calls ---------------------------------------------------------------- */

/* command_json as ProcessInfo. */
static json_t *process_info(const json_t *cj)
{
    json_t *argv = json_object_get(cj, "argv");
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(argv); i++)
        json_array_append(args, json_array_get(argv, i));
    json_t *config =
        json_pack("{s:s, s:o, s:{}}", "cmd", json_string_value(json_array_get(argv, 0)) ?: "",
                  "args", args, "envs");
    if (json_is_string(json_object_get(cj, "cwd")))
        json_object_set(config, "cwd", json_object_get(cj, "cwd"));
    return json_pack("{s:o, s:O}", "config", config, "pid", json_object_get(cj, "pid"));
}

static enum MHD_Result proc_list(void *ctx, http_req_t *req)
{
    envd_t *self = ctx;
    enum MHD_Result ret;
    kernel_t *k = envd_kernel_or_reply(self, req, &ret);
    if (k == NULL)
        return ret;
    json_t *procs = json_array();
    for (command_t *c = commands_next(self->commands, k, NULL); c;
         c = commands_next(self->commands, k, c)) {
        if (command_state(c) == COMMAND_EXITED)
            continue;
        json_t *cj = command_json(c);
        json_object_set_new(cj, "pid", json_integer((json_int_t)envd_pid(c)));
        json_array_append_new(procs, process_info(cj));
        json_decref(cj);
    }
    return envd_reply_msg(req->conn, json_pack("{s:o}", "processes", procs));
}

static enum MHD_Result input(envd_t *self, http_req_t *req, const json_t *msg, command_t *c)
{
    const json_t *in = json_object_get(msg, "input");
    const char *pty = envd_str(in, "pty", NULL);
    const char *b64 = pty ? pty : envd_str(in, "stdin", NULL);
    unsigned char *data = NULL;
    size_t n = 0;
    if (b64 == NULL || envd_unb64(b64, &data, &n) < 0)
        return envd_reply_code(req->conn, "invalid_argument",
                               "input.stdin or input.pty must be base64 bytes");
    sg_error_t *err = NULL;
    ssize_t took = pty ? (command_pty_input(c, (const char *)data, n, &err) < 0 ? -1 : (ssize_t)n)
                       : command_stdin_write(c, (const char *)data, n, &err);
    free(data);
    enum MHD_Result ret;
    if (took < 0) {
        ret = envd_reply_code(req->conn, "failed_precondition", err->msg);
        sg_error_free(&err);
    } else if ((size_t)took < n) {
        ret = envd_reply_code(req->conn, "resource_exhausted",
                              "the command's stdin buffer is full; send again later");
    } else {
        ret = envd_reply_msg(req->conn, json_object());
    }
    return ret;
}

static enum MHD_Result proc_input(void *ctx, http_req_t *req)
{
    return on_selected(ctx, req, false, input);
}

static int signal_of(const json_t *v)
{
    if (json_is_integer(v))
        return (int)json_integer_value(v);
    const char *name = json_string_value(v);
    if (name && strncmp(name, "SIGNAL_", 7) == 0)
        return command_signal_parse(name + 7);
    return 0;
}

/* A SIGKILL's answer, once the command has ended (envd's kill returns with
 * the process gone: `kill -0 PID` right after says so), or after
 * KILL_WAIT_MS. */
#define KILL_WAIT_MS 5000
typedef struct {
    envd_call_t base;
    envd_t *envd;
    command_t *cmd; /* while watched */
    resp_t *out;
    int timer;
} kill_t;

static void kill_over(kill_t *k)
{
    if (k->cmd)
        command_detach(k->cmd, &kill_reader, k);
    k->cmd = NULL;
    loop_timer_end(k->envd->loop, k->timer);
    k->timer = -1;
    resp_ready(k->out);
}

static void kill_exited(void *arg, command_t *c)
{
    kill_t *k = arg;
    k->cmd = NULL; /* detached after this returns */
    kill_over(k);
}

static void kill_timeout(loop_t *loop, int id, void *arg)
{
    kill_t *k = arg;
    k->timer = -1;
    kill_over(k);
}

static void kill_end(envd_call_t *call, bool completed)
{
    kill_t *k = (kill_t *)call;
    if (k->cmd)
        command_detach(k->cmd, &kill_reader, k);
    loop_timer_end(k->envd->loop, k->timer);
    resp_set_gone(k->out);
    resp_free(&k->out);
    free(k);
}

static enum MHD_Result signal_(envd_t *self, http_req_t *req, const json_t *msg, command_t *c)
{
    sg_error_t *err = NULL;
    int sig = signal_of(json_object_get(msg, "signal"));
    if (command_signal(c, sig, &err) == 0 && sig == SIGKILL && command_state(c) != COMMAND_EXITED) {
        kill_t *k = xzalloc(sizeof *k);
        *k = (kill_t){.base.end = kill_end, .envd = self, .cmd = c, .timer = -1};
        k->out = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
        req->state = k;
        if (command_attach(c, &kill_reader, k, NULL) < 0) { /* its readers are full: no wait */
            k->cmd = NULL;
            return envd_reply_msg(req->conn, json_object());
        }
        if (k->cmd) /* not ended within the attach */
            k->timer = loop_timer(self->loop, KILL_WAIT_MS, 1, kill_timeout, k);
        return k->cmd ? resp_wait(k->out) : envd_reply_msg(req->conn, json_object());
    }
    if (!err)
        return envd_reply_msg(req->conn, json_object());
    /* a command that has ended is, to envd, a process not found */
    enum MHD_Result ret = envd_reply_code(
        req->conn, err->kind == SG_E_CONFLICT ? "not_found" : "invalid_argument", err->msg);
    sg_error_free(&err);
    return ret;
}

static enum MHD_Result proc_signal(void *ctx, http_req_t *req)
{
    if (req->resumed) /* a SIGKILL's, its command gone */
        return envd_reply_msg(req->conn, json_object());
    return on_selected(ctx, req, false, signal_);
}

/* Update: a terminal's new size. */
static enum MHD_Result update(envd_t *self, http_req_t *req, const json_t *msg, command_t *c)
{
    const json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    sg_error_t *err = NULL;
    if (!size)
        return envd_reply_msg(req->conn, json_object()); /* nothing to change */
    if (rows < 1 || cols < 1 || rows > 1000 || cols > 1000 ||
        command_pty_resize(c, (unsigned)rows, (unsigned)cols, &err) < 0) {
        enum MHD_Result ret = envd_reply_code(
            req->conn,
            err && err->kind == SG_E_CONFLICT ? "failed_precondition" : "invalid_argument",
            err ? err->msg : "pty.size needs rows and cols, 1..1000 each");
        sg_error_free(&err);
        return ret;
    }
    return envd_reply_msg(req->conn, json_object());
}

static enum MHD_Result proc_update(void *ctx, http_req_t *req)
{
    return on_selected(ctx, req, false, update);
}

static enum MHD_Result close_stdin(envd_t *self, http_req_t *req, const json_t *msg, command_t *c)
{
    command_stdin_close(c);
    return envd_reply_msg(req->conn, json_object());
}

static enum MHD_Result proc_close_stdin(void *ctx, http_req_t *req)
{
    return on_selected(ctx, req, false, close_stdin);
}

static const http_route_t routes[] = {
    {"POST", "/process.Process/Start", proc_start, 0, NULL},
    {"POST", "/process.Process/Connect", proc_connect, 0, NULL},
    {"POST", "/process.Process/List", proc_list, 0, NULL},
    {"POST", "/process.Process/SendInput", proc_input, 0, NULL},
    {"POST", "/process.Process/SendSignal", proc_signal, 0, NULL},
    {"POST", "/process.Process/CloseStdin", proc_close_stdin, 0, NULL},
    {"POST", "/process.Process/Update", proc_update, 0, NULL},
};

int envd_process_register(envd_t *self, http_server_t *http, const http_front_t *front,
                          sg_error_t **err)
{
    return http_routes(http, front, routes, sizeof routes / sizeof *routes, err);
}
