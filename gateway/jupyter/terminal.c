/* terminal: a shell on a terminal in a context's sandbox, over a WebSocket
 * (GET /contexts/{context}/terminal?name=N&rows=R&cols=C), for xterm.js and
 * the like.  The messages are terminado's (Jupyter's terminals), JSON arrays:
 *   client: ["stdin", TEXT]  ["set_size", ROWS, COLS]
 *   server: ["stdout", TEXT] ["disconnect", 1] (the shell ended; then 1000)
 * The shell (`/bin/bash -i -l`, TERM xterm-256color) is a command on a
 * pseudo-terminal (commands.h's pty: kernelmgr/guest/pty.c), named N per
 * context ("1" by default): a connection to a name that has a shell running
 * attaches to it — what it wrote meanwhile first (commands.h keeps it) — so a
 * shell survives a reconnect, and ends with its exit, its context, or
 * DELETE of the command.  It is one of the context's commands (listed,
 * counted in max-queued).  Output is sent as valid UTF-8 (a character cut
 * between reads waits for its rest; invalid bytes become U+FFFD), no faster
 * than the client reads it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/commands/commands.h"
#include "gateway/jupyter/internal.h"
#include "gateway/jupyter/ws.h"

#define TERM_MAX_MESSAGE (1 << 20)
#define TERM_HIGH_WATER (1 << 20) /* bytes not yet written to the client */

typedef struct term term_t;
struct term {
    jupyter_t *j;
    char cmd_id[16]; /* the shell's command, in kid */
    char kid[64];
    char name[64];
    term_t *next;
};

typedef struct {
    jupyter_t *j;
    command_t *cmd; /* while attached */
    int fd;
    struct MHD_UpgradeResponseHandle *urh;
    loop_io_t *io;
    ws_parser_t *parser;
    uint8_t *out;
    size_t out_len, out_off;
    char carry[4]; /* a UTF-8 character's start, its rest to come */
    size_t ncarry;
    bool closed, closing, held; /* held: the command waits for the client */
    unsigned close_code;
} tconn_t;

/* A WebSocket upgrade's request (http_req_t.state) until the upgrade. */
typedef struct {
    jupyter_t *j;
    char kid[64], cmd_id[16];
} treq_t;

static const command_reader_t reader;

/* --- the connection ------------------------------------------------------------------ */

static void tconn_close(tconn_t *c);

static void tconn_flush(tconn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            tconn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        if (c->closing) {
            tconn_close(c);
            return;
        }
        if (c->held && c->cmd) {
            c->held = false;
            command_reader_ready(c->cmd, &reader, c);
        }
    }
    if (!c->closed)
        loop_fd_set_events(c->j->loop, c->io,
                           LOOP_READ | (c->out_off < c->out_len ? LOOP_WRITE : 0), NULL);
}

static void tconn_send(tconn_t *c, ws_opcode_t op, const void *data, size_t len)
{
    if (c->closed || (c->closing && op != WS_CLOSE))
        return;
    c->out = xrealloc(c->out, c->out_len + 10 + len);
    c->out_len += ws_frame_header(c->out + c->out_len, op, len);
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    tconn_flush(c);
}

static void tconn_send_json(tconn_t *c, json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (text)
        tconn_send(c, WS_TEXT, text, strlen(text));
    free(text);
}

static void tconn_end(tconn_t *c, unsigned code, const char *reason)
{
    if (c->closing || c->closed)
        return;
    uint8_t payload[125];
    size_t n = ws_close_payload(payload, code, reason);
    tconn_send(c, WS_CLOSE, payload, n);
    c->closing = true;
    if (!c->closed && c->out_off == c->out_len)
        tconn_close(c);
}

static void tconn_free(void *arg)
{
    tconn_t *c = arg;
    ws_parser_destroy(&c->parser);
    free(c->out);
    free(c);
}

static void tconn_close(tconn_t *c)
{
    if (c->closed)
        return;
    c->closed = true;
    if (c->cmd) /* the shell runs on: a reconnect attaches to it */
        command_detach(c->cmd, &reader, c);
    c->cmd = NULL;
    loop_io_remove(c->j->loop, &c->io);
    MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE);
    if (c->j->wake)
        c->j->wake(c->j->wake_arg);
    loop_defer(c->j->loop, tconn_free, c);
}

/* --- the shell's output, the client's input ------------------------------------------ */

/* The longest prefix of s[0..n) that is whole UTF-8 characters, invalid
 * bytes replaced in place by '?' (one each); the rest is a character's
 * start. */
static size_t utf8_whole(char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (len && i + len > n && n - i < 4) { /* cut: wait for the rest, if it can be one */
            bool prefix = true;
            for (size_t k = i + 1; k < n; k++)
                prefix &= ((unsigned char)s[k] & 0xc0) == 0x80;
            if (prefix)
                return i;
        }
        if (len == 0 || i + len > n || !ws_utf8_valid((const uint8_t *)s + i, len)) {
            s[i++] = '?';
            continue;
        }
        i += len;
    }
    return i;
}

static bool on_output(void *arg, command_t *cmd, command_stream_t which, const char *data, size_t n)
{
    tconn_t *c = arg;
    char *buf = xmalloc(c->ncarry + n);
    memcpy(buf, c->carry, c->ncarry);
    memcpy(buf + c->ncarry, data, n);
    size_t all = c->ncarry + n, whole = utf8_whole(buf, all);
    c->ncarry = all - whole;
    memcpy(c->carry, buf + whole, c->ncarry);
    if (whole)
        tconn_send_json(c, json_pack("[s, s%]", "stdout", buf, whole));
    free(buf);
    if (c->out_len - c->out_off < TERM_HIGH_WATER)
        return true;
    c->held = true; /* the client reads slowly: the shell waits for it */
    return false;
}

static void on_exit_(void *arg, command_t *cmd)
{
    tconn_t *c = arg;
    c->cmd = NULL;
    tconn_send_json(c, json_pack("[s, i]", "disconnect", 1));
    tconn_end(c, WS_CLOSE_NORMAL, "the shell ended");
}

static const command_reader_t reader = {.on_output = on_output, .on_exit = on_exit_};

static void from_client(tconn_t *c, const uint8_t *data, size_t len)
{
    json_t *m = json_loadb((const char *)data, len, 0, NULL);
    const char *kind = json_string_value(json_array_get(m, 0));
    sg_error_t *err = NULL;
    if (kind && strcmp(kind, "stdin") == 0 && json_is_string(json_array_get(m, 1)) && c->cmd)
        command_pty_input(c->cmd, json_string_value(json_array_get(m, 1)),
                          json_string_length(json_array_get(m, 1)), &err);
    else if (kind && strcmp(kind, "set_size") == 0 && c->cmd)
        command_pty_resize(c->cmd, (unsigned)json_integer_value(json_array_get(m, 1)),
                           (unsigned)json_integer_value(json_array_get(m, 2)), &err);
    if (err)
        log_info("terminal: %s", err->msg);
    sg_error_free(&err);
    json_decref(m);
}

static void on_message(ws_opcode_t op, const uint8_t *data, size_t len, void *arg)
{
    tconn_t *c = arg;
    if (c->closing || c->close_code)
        return;
    if (op == WS_TEXT || op == WS_BINARY)
        from_client(c, data, len);
    else if (op == WS_PING)
        tconn_send(c, WS_PONG, data, len);
    else if (op == WS_CLOSE)
        c->close_code = len >= 2 ? (unsigned)(data[0] << 8 | data[1]) : WS_CLOSE_NORMAL;
}

static void tconn_feed(tconn_t *c, const uint8_t *data, size_t len)
{
    int code = ws_parser_feed(c->parser, data, len, on_message, c);
    if (c->closed)
        return;
    if (code)
        tconn_end(c, (unsigned)code, "protocol error");
    else if (c->close_code)
        tconn_end(c, c->close_code == WS_CLOSE_NO_STATUS ? WS_CLOSE_NORMAL : c->close_code, "");
}

static void on_io(loop_t *loop, int fd, unsigned events, void *arg)
{
    tconn_t *c = arg;
    if (c->closed)
        return;
    if (events & LOOP_WRITE)
        tconn_flush(c);
    if (c->closed || !(events & (LOOP_READ | LOOP_ERROR)))
        return;
    uint8_t buf[65536];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0)
        tconn_close(c);
    else
        tconn_feed(c, buf, (size_t)n);
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra,
                       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    treq_t *r = cls;
    jupyter_t *j = r->j;
    kernel_t *k = kmgr_get(j->kmgr, r->kid);
    command_t *cmd = k ? commands_find(j->commands, k, r->cmd_id) : NULL;
    tconn_t *c = xzalloc(sizeof *c);
    *c = (tconn_t){.j = j, .fd = sock, .urh = urh, .parser = ws_parser_new(TERM_MAX_MESSAGE)};
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
    c->io = loop_fd_add(j->loop, sock, LOOP_READ, on_io, c, NULL);
    if (!c->io) {
        c->closed = true;
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        tconn_free(c);
        return;
    }
    sg_error_t *err = NULL;
    if (!cmd || command_attach(cmd, &reader, c, &err) < 0) {
        tconn_end(c, WS_CLOSE_INTERNAL, err ? err->msg : "the shell is gone");
        sg_error_free(&err);
        return;
    }
    c->cmd = command_state(cmd) == COMMAND_EXITED ? NULL : cmd; /* on_exit came inside */
    if (extra_len && !c->closed)
        tconn_feed(c, (const uint8_t *)extra, extra_len);
    (void)conn, (void)req_cls;
}

/* --- the route ----------------------------------------------------------------------- */

static term_t *term_find(jupyter_t *j, const char *kid, const char *name)
{
    for (term_t *t = j->terms; t; t = t->next)
        if (strcmp(t->kid, kid) == 0 && strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

/* The shell named name in k: the running one, or a new one; NULL with *err. */
static command_t *shell(jupyter_t *j, http_req_t *req, kernel_t *k, const char *name,
                        sg_error_t **err)
{
    term_t *t = term_find(j, kernel_id(k), name);
    command_t *c = t ? commands_find(j->commands, k, t->cmd_id) : NULL;
    if (c && command_state(c) != COMMAND_EXITED)
        return c;
    const char *rows = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "rows");
    const char *cols = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "cols");
    static const char *const argv[] = {"/bin/bash", "-i", "-l", NULL};
    json_t *envs = json_pack("{s:s, s:s}", "TERM", "xterm-256color", "LANG", "C.UTF-8");
    command_opts_t o = {.argv = argv,
                        .envs = envs,
                        .background = true,
                        .pty_rows = rows ? (unsigned)atoi(rows) : 24,
                        .pty_cols = cols ? (unsigned)atoi(cols) : 80};
    http_who(req, "jupyter", &o.who);
    c = commands_start(j->commands, k, &o, err);
    json_decref(envs);
    if (!c)
        return NULL;
    if (!t) {
        t = xzalloc(sizeof *t);
        snprintf(t->kid, sizeof t->kid, "%s", kernel_id(k));
        snprintf(t->name, sizeof t->name, "%s", name);
        t->next = j->terms;
        j->terms = t;
    }
    snprintf(t->cmd_id, sizeof t->cmd_id, "%s", command_id(c));
    return c;
}

static enum MHD_Result get_terminal(void *ctx, http_req_t *req)
{
    jupyter_t *j = ctx;
    kernel_t *k = http_arg(req, "context");
    const char *key = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    const char *up = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Upgrade");
    const char *name = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "name");
    char accept[29];
    if (!up || strcasecmp(up, "websocket") != 0 || !key || ws_accept_key(key, accept) < 0)
        return jupyter_fail(req->conn, SG_E_INVALID,
                            "a terminal is a WebSocket (Upgrade: websocket, Sec-WebSocket-Key)");
    name = name && *name ? name : "1";
    if (strlen(name) >= sizeof((term_t *)0)->name || strcspn(name, "/\"\\") != strlen(name))
        return jupyter_fail(req->conn, SG_E_INVALID, "a terminal's name: up to 63 characters");
    sg_error_t *err = NULL;
    command_t *c = shell(j, req, k, name, &err);
    if (!c)
        return jupyter_fail_err(req->conn, &err);
    treq_t *r = xzalloc(sizeof *r);
    r->j = j;
    snprintf(r->kid, sizeof r->kid, "%s", kernel_id(k));
    snprintf(r->cmd_id, sizeof r->cmd_id, "%s", command_id(c));
    req->state = r;
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, r);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
    enum MHD_Result ret = http_queue(req->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void done(void *ctx, void *state, bool completed)
{
    free(state);
}

int jupyter_terminal_register(jupyter_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"GET", "/contexts/{context}/terminal", get_terminal, 0, NULL}};
    const http_front_t front = {.name = "terminal", .ctx = self, .done = done};
    return http_routes(http, &front, routes, 1, err);
}

void jupyter_terminal_forget(jupyter_t *self)
{
    while (self->terms) {
        term_t *t = self->terms;
        self->terms = t->next;
        free(t);
    }
}
