/* input: what goes into a command — its stdin, bounded, and
 * signals, retried while the command has no pid inside yet (commands.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/commands/internal.h"

/* --- stdin ------------------------------------------------------------------------- */

/* Writes what waits; false when the pipe is full.  A broken pipe (the
 * command stopped reading) drops what waits and all that comes. */
static bool flush_stdin(command_t *c)
{
    while (c->in_off < c->in_len && c->in_fd >= 0) {
        ssize_t n = write(c->in_fd, c->in_buf + c->in_off, c->in_len - c->in_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return false;
        if (n < 0) {
            c->in_broken = true;
            loop_io_remove(c->reg->loop, &c->in_io);
            close(c->in_fd);
            c->in_fd = -1;
            break;
        }
        c->in_off += (size_t)n;
    }
    c->in_off = c->in_len = 0;
    if (c->in_closing && c->in_fd >= 0) {
        loop_io_remove(c->reg->loop, &c->in_io);
        close(c->in_fd);
        c->in_fd = -1;
    }
    return true;
}

void commands_stdin_writable(loop_t *loop, int fd, unsigned events, void *arg)
{
    command_t *c = arg;
    if (!flush_stdin(c))
        return;
    loop_io_remove(loop, &c->in_io);
    if (c->in_wanted && c->writer) {
        c->in_wanted = false;
        c->writer(c->writer_arg, c, false);
    }
}

static ssize_t stdin_write(command_t *c, const char *data, size_t n, sg_error_t **err);

ssize_t command_stdin_write(command_t *c, const char *data, size_t n, sg_error_t **err)
{
    if (c->pty_rows) /* its stdin carries frames (command_pty_input) */
        return sg_error_set(err, SG_E_CONFLICT,
                            "command %s runs on a terminal: send it input as the terminal's",
                            c->id);
    return stdin_write(c, data, n, err);
}

static ssize_t stdin_write(command_t *c, const char *data, size_t n, sg_error_t **err)
{
    if (!c->in_accepting && c->state != COMMAND_EXITED) {
        sg_error_set(err, SG_E_CONFLICT, "command %s has no standard input open%s", c->id,
                     c->stdin_open ? " any more (it was closed)" : " (start it with stdin)");
        return -1;
    }
    if (c->state == COMMAND_EXITED || c->in_broken)
        return (ssize_t)n; /* nobody reads it */
    size_t waiting = c->in_len - c->in_off;
    size_t room = COMMANDS_STDIN_BUFFER - waiting;
    size_t take = n < room ? n : room;
    if (c->in_off > 0) {
        memmove(c->in_buf, c->in_buf + c->in_off, waiting);
        c->in_len = waiting;
        c->in_off = 0;
    }
    c->in_buf = xrealloc(c->in_buf, c->in_len + take + 1);
    memcpy(c->in_buf + c->in_len, data, take);
    c->in_len += take;
    if (c->state == COMMAND_RUNNING && c->in_fd >= 0 && !c->in_io && !flush_stdin(c))
        c->in_io =
            loop_fd_add(c->reg->loop, c->in_fd, LOOP_WRITE, commands_stdin_writable, c, NULL);
    if (take < n)
        c->in_wanted = true;
    return (ssize_t)take;
}

int command_stdin_writer(command_t *c, command_stdin_fn *fn, void *arg, sg_error_t **err)
{
    if (fn && c->writer && (c->writer != fn || c->writer_arg != arg))
        return sg_error_set(err, SG_E_CONFLICT, "command %s's stdin is being written already",
                            c->id);
    if (fn && c->state == COMMAND_EXITED)
        return sg_error_set(err, SG_E_CONFLICT, "command %s has ended", c->id);
    c->writer = fn;
    c->writer_arg = arg;
    return 0;
}

void command_stdin_close(command_t *c)
{
    if (!c->in_accepting)
        return;
    c->in_accepting = false;
    c->in_closing = true;
    if (c->state == COMMAND_RUNNING && c->in_len == c->in_off && c->in_fd >= 0) {
        loop_io_remove(c->reg->loop, &c->in_io);
        close(c->in_fd);
        c->in_fd = -1;
    }
}

size_t command_stdin_pending(const command_t *c)
{
    return c->in_len - c->in_off;
}

/* --- signals ----------------------------------------------------------------------- */

static void on_signal_retry(loop_t *loop, int timer_id, void *arg)
{
    command_t *c = arg;
    c->signal_timer = -1;
    int sig = c->pending_signal;
    c->pending_signal = 0;
    if (sig && c->state == COMMAND_RUNNING)
        command_signal(c, sig, NULL);
}

int command_signal_parse(const char *name)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"INT", SIGINT}, {"TERM", SIGTERM}, {"HUP", SIGHUP}, {"KILL", SIGKILL}};
    if (!name)
        return 0;
    if (strncasecmp(name, "SIG", 3) == 0)
        name += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char num[4];
        snprintf(num, sizeof num, "%d", names[i].sig);
        if (strcasecmp(name, names[i].name) == 0 || strcmp(name, num) == 0)
            return names[i].sig;
    }
    return 0;
}

int command_signal(command_t *c, int sig, sg_error_t **err)
{
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGKILL)
        return sg_error_set(err, SG_E_INVALID, "a command takes INT, TERM, HUP or KILL");
    if (c->state == COMMAND_EXITED)
        return sg_error_set(err, SG_E_CONFLICT, "command %s has ended", c->id);
    if (c->state == COMMAND_STARTING || c->proc_ended) {
        c->pending_signal = sig; /* launch delivers it */
        return 0;
    }
    sg_error_t *e = NULL;
    if (c->k && kernel_exec_signal(c->k, c->handle, sig, &e) < 0) {
        /* Not started inside yet (no pid): again shortly. */
        bool again = e->kind == SG_E_CONFLICT && ++c->signal_tries < SIGNAL_RETRIES;
        if (!again) {
            log_warn("commands: signal to command %s: %s", c->id, e->msg);
            sg_error_free(&e);
            return sg_error_set(err, SG_E_UNAVAILABLE, "the signal could not be sent");
        }
        sg_error_free(&e);
        c->pending_signal = sig;
        loop_timer_end(c->reg->loop, c->signal_timer);
        c->signal_timer = loop_timer(c->reg->loop, SIGNAL_RETRY_MS, 1, on_signal_retry, c);
    }
    return 0;
}

/* --- its process id inside ----------------------------------------------------- */

/* runsc exec writes it within ~50 ms, seconds when the machine is busy
 * starting sandboxes: asked again after 10 ms, twice as long each time up to
 * 250 ms, for 15 s in all. */
#define PID_RETRY_MS 10
#define PID_RETRY_MAX_MS 250
#define PID_WAIT_MS 15000

static void pid_settled(command_t *c)
{
    c->pid_settled = true;
    reader_t readers[COMMANDS_MAX_READERS];
    size_t n = c->nreaders;
    memcpy(readers, c->readers, n * sizeof *readers);
    for (size_t i = 0; i < n; i++)
        if (readers[i].r->on_pid)
            readers[i].r->on_pid(readers[i].arg, c);
}

static void pid_again(loop_t *loop, int timer_id, void *arg)
{
    command_t *c = arg;
    c->pid_timer = -1;
    commands_ask_pid(c);
}

static void on_pid(long pid, void *arg)
{
    ticket_t *t = arg;
    command_t *c = t->c;
    free(t);
    if (!c)
        return;
    c->pid_asked = NULL;
    if (pid > 0) {
        c->inner_pid = pid;
        pid_settled(c);
    } else if (pid == 0 && c->state == COMMAND_RUNNING && c->pid_waited < PID_WAIT_MS) {
        int64_t wait = PID_RETRY_MS << (c->pid_tries < 5 ? c->pid_tries : 5);
        wait = wait < PID_RETRY_MAX_MS ? wait : PID_RETRY_MAX_MS;
        c->pid_tries++;
        c->pid_waited += wait;
        c->pid_timer = loop_timer(c->reg->loop, wait, 1, pid_again, c);
    } else {
        pid_settled(c); /* it ended first: the number is all it has */
    }
}

void commands_ask_pid(command_t *c)
{
    if (!c->k || c->handle == 0) {
        pid_settled(c);
        return;
    }
    ticket_t *t = xzalloc(sizeof *t);
    t->c = c;
    c->pid_asked = t;
    kernel_exec_pid(c->k, c->handle, on_pid, t);
}

void commands_pid_forget(command_t *c)
{
    if (c->pid_asked)
        c->pid_asked->c = NULL;
    c->pid_asked = NULL;
    loop_timer_end(c->reg->loop, c->pid_timer);
    c->pid_timer = -1;
}

/* --- a terminal's input: frames for sandgate-init --pty ------------------------------ */

bool command_pty(const command_t *c)
{
    return c->pty_rows != 0;
}

/* One frame (type, 4-byte little-endian length, data) onto the terminal's
 * stdin, whole or not at all. */
static int pty_frame(command_t *c, char type, const char *data, size_t n, sg_error_t **err)
{
    if (!c->pty_rows)
        return sg_error_set(err, SG_E_CONFLICT, "command %s has no terminal", c->id);
    if (n > (1u << 20) || command_stdin_pending(c) + n + 5 > COMMANDS_STDIN_BUFFER)
        return sg_error_set(err, SG_E_TOO_MANY,
                            "the terminal's input waits already (%zu bytes); send again later",
                            command_stdin_pending(c));
    char *f = xmalloc(n + 5);
    f[0] = type;
    for (int i = 0; i < 4; i++)
        f[1 + i] = (char)((n >> (8 * i)) & 0xff);
    memcpy(f + 5, data, n);
    ssize_t took = stdin_write(c, f, n + 5, err);
    free(f);
    return took < 0 ? -1 : 0;
}

int command_pty_input(command_t *c, const char *data, size_t n, sg_error_t **err)
{
    return pty_frame(c, 'd', data, n, err);
}

int command_pty_resize(command_t *c, unsigned rows, unsigned cols, sg_error_t **err)
{
    if (rows == 0 || cols == 0 || rows > 1000 || cols > 1000)
        return sg_error_set(err, SG_E_INVALID, "a terminal's size is 1..1000 rows and columns");
    char size[32];
    int n = snprintf(size, sizeof size, "%u %u", rows, cols);
    return pty_frame(c, 'r', size, (size_t)n, err);
}
