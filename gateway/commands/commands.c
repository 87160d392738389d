/* commands: processes in a context's sandbox beside its kernel (commands.h).
 *
 * Each context that has had a command has a record (ctx_t) observing its
 * kernel: READY starts the commands that waited for a resume or a start,
 * DEAD fails them, GONE kills the running ones and forgets the context (its
 * commands are freed once their process has ended).  A command holds one
 * of the kernel's connections while it is not finished, so kmgr neither
 * culls nor pauses the context under it.
 */
#include "gateway/commands/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/commands/internal.h"
#include "gateway/http/http.h"
#include "gateway/tenants/tenants.h"
#include "kernelmgr/sandbox/sandbox.h"

#define READ_CHUNK 65536

static void launch(command_t *c);
static void finish(command_t *c);
static void watch_output(command_t *c);

static long long work_of(void *arg, const char *owner);
static size_t running_count(const struct ctx *x);

commands_t *commands_new(loop_t *loop, const commands_config_t *cfg)
{
    commands_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    if (cfg)
        self->cfg = *cfg;
    if (self->cfg.max_backlog == 0)
        self->cfg.max_backlog = COMMANDS_BACKLOG;
    tenants_count_source(TENANT_QUEUED, work_of, self);
    return self;
}

/* The commands of owner's not ended yet: the tenant's max-queued counts
 * them with its executions (tenants.h). */
static long long work_of(void *arg, const char *owner)
{
    commands_t *self = arg;
    long long n = 0;
    for (ctx_t *x = self->ctxs; x; x = x->next)
        if (strcmp(kernel_owner(x->k), owner) == 0)
            n += (long long)running_count(x);
    return n;
}

/* --- freeing ------------------------------------------------------------------------- */

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void close_pipes(command_t *c)
{
    loop_t *loop = c->reg->loop;
    loop_io_remove(loop, &c->in_io);
    loop_io_remove(loop, &c->out_io);
    loop_io_remove(loop, &c->err_io);
    int *fds[] = {&c->in_fd, &c->out_fd, &c->err_fd};
    for (size_t i = 0; i < 3; i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

static void command_free(command_t *c)
{
    loop_t *loop = c->reg->loop;
    if (c->ticket)
        c->ticket->c = NULL;
    commands_pid_forget(c);
    close_pipes(c);
    loop_timer_end(loop, c->timeout_timer);
    loop_timer_end(loop, c->grace_timer);
    loop_timer_end(loop, c->signal_timer);
    for (chunk_t *ch = c->backlog, *next; ch; ch = next) {
        next = ch->next;
        free(ch);
    }
    free_strv(c->argv);
    free_strv(c->env);
    free(c->shell);
    free(c->cwd);
    free(c->in_buf);
    sg_error_free(&c->err);
    free(c);
}

static void unlink_command(ctx_t *x, command_t *c)
{
    for (command_t **p = &x->list; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

static void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg);

/* A command that never launched ends with why. */
static void fail(command_t *c, sg_errkind_t kind, const char *msg)
{
    sg_error_set(&c->err, kind, "%s", msg);
    c->proc_ended = true;
    c->status = -1;
    finish(c);
}

/* Forgets x: its finished commands are freed, its running ones killed and
 * freed when their process has ended (finish frees a command without a
 * context).  x->k is still valid. */
static void ctx_free(commands_t *self, ctx_t *x, bool destroying)
{
    for (ctx_t **p = &self->ctxs; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    kernel_unobserve(x->k, on_kernel_event, x);
    command_t *c = x->list;
    x->list = NULL;
    while (c) {
        command_t *next = c->next;
        c->ctx = NULL;
        c->next = NULL;
        if (c->state == COMMAND_EXITED) {
            command_free(c);
        } else if (destroying) { /* killed; its end will find nobody */
            if (c->handle)
                kernel_exec_signal(c->k, c->handle, SIGKILL, NULL);
            if (c->holds_connection)
                kernel_add_connections(c->k, -1);
            command_free(c);
        } else {
            if (c->handle)
                kernel_exec_signal(c->k, c->handle, SIGKILL, NULL);
            if (c->holds_connection)
                kernel_add_connections(c->k, -1);
            c->holds_connection = false;
            c->k = NULL;
            if (!c->handle) /* never launched: it ends here */
                fail(c, SG_E_UNAVAILABLE, "the context was deleted");
        }
        c = next;
    }
    free(x);
}

void commands_destroy(commands_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    commands_t *self = *self_p;
    tenants_uncount_source(TENANT_QUEUED, work_of, self);
    while (self->ctxs)
        ctx_free(self, self->ctxs, true);
    free(self);
    *self_p = NULL;
}

/* --- contexts -------------------------------------------------------------------- */

static ctx_t *ctx_of(commands_t *self, const kernel_t *k, bool create)
{
    for (ctx_t *x = self->ctxs; x; x = x->next)
        if (x->k == k)
            return x;
    if (!create)
        return NULL;
    ctx_t *x = xzalloc(sizeof *x);
    x->reg = self;
    x->k = (kernel_t *)k;
    x->next = self->ctxs;
    self->ctxs = x;
    kernel_observe(x->k, on_kernel_event, x);
    return x;
}

static bool kernel_runs(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    return (st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k);
}

static void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    ctx_t *x = arg;
    if (ev == KERNEL_EV_GONE) {
        ctx_free(x->reg, x, false);
        return;
    }
    if (ev != KERNEL_EV_READY && ev != KERNEL_EV_DEAD)
        return;
    /* Those waiting for the kernel: each may end (and be freed) as it goes. */
    command_t *waiting[COMMANDS_MAX_RUNNING];
    size_t n = 0;
    for (command_t *c = x->list; c && n < COMMANDS_MAX_RUNNING; c = c->next)
        if (c->state == COMMAND_STARTING && !c->handle)
            waiting[n++] = c;
    for (size_t i = 0; i < n; i++) {
        if (ev == KERNEL_EV_READY && kernel_runs(k))
            launch(waiting[i]);
        else if (ev == KERNEL_EV_DEAD)
            fail(waiting[i], SG_E_UNAVAILABLE,
                 err ? err->msg : "the context's kernel died before the command started");
    }
}

/* --- starting -------------------------------------------------------------------- */

static bool env_name_ok(const char *name)
{
    if (!*name || (*name >= '0' && *name <= '9'))
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    return true;
}

static char **strv_dup(const char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **out = xzalloc((n + 1) * sizeof *out);
    for (size_t i = 0; i < n; i++)
        out[i] = xstrdup(v[i]);
    return out;
}

/* The command's own copy of what to run, checked. */
static int take_opts(command_t *c, const command_opts_t *o, sg_error_t **err)
{
    if ((o->argv == NULL) == (o->shell == NULL))
        return sg_error_set(err, SG_E_INVALID, "give a command line or an argument list");
    if (o->argv && (!o->argv[0] || !*o->argv[0]))
        return sg_error_set(err, SG_E_INVALID, "an argument list needs a first, not empty");
    if (o->shell && !*o->shell)
        return sg_error_set(err, SG_E_INVALID, "the command line is empty");
    if (o->timeout_ms < 0)
        return sg_error_set(err, SG_E_INVALID, "a timeout cannot be negative");
    const char *cwd = o->cwd && *o->cwd ? o->cwd : "/home/user";
    c->cwd = cwd[0] == '/' ? xstrdup(cwd) : xasprintf("/home/user/%s", cwd);
    c->env = xzalloc((json_object_size(o->envs) + 1) * sizeof *c->env);
    size_t i = 0;
    const char *name;
    json_t *v;
    json_object_foreach ((json_t *)o->envs, name, v) {
        if (!env_name_ok(name))
            return sg_error_set(err, SG_E_INVALID,
                                "environment variable '%.64s': a name is letters, digits and '_', "
                                "not starting with a digit",
                                name);
        if (!json_is_string(v))
            return sg_error_set(err, SG_E_INVALID, "environment variable '%.64s' must be a string",
                                name);
        c->env[i++] = xasprintf("%s=%s", name, json_string_value(v));
    }
    if (o->shell) {
        c->shell = xstrdup(o->shell);
        const char *sh[] = {"/bin/sh", "-c", o->shell, NULL};
        c->argv = strv_dup(sh);
    } else {
        c->argv = strv_dup(o->argv);
    }
    c->timeout_ms = o->timeout_ms;
    c->stdin_open = c->in_accepting = o->stdin_open;
    c->background = o->background;
    c->internal = o->internal;
    if ((o->pty_rows == 0) != (o->pty_cols == 0) || o->pty_rows > 1000 || o->pty_cols > 1000)
        return sg_error_set(err, SG_E_INVALID, "a terminal's size is 1..1000 rows and columns");
    c->pty_rows = o->pty_rows;
    c->pty_cols = o->pty_cols;
    if (c->pty_rows)
        c->stdin_open = c->in_accepting = true;
    c->who = o->who;
    return 0;
}

static size_t running_count(const ctx_t *x)
{
    size_t n = 0;
    for (const command_t *c = x->list; c; c = c->next)
        n += c->state != COMMAND_EXITED;
    return n;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *audit_fields(const command_t *c)
{
    return json_pack("{s:s, s:s, s:I}", "context", c->context, "command",
                     c->shell ? c->shell : c->argv[0], "pid", (json_int_t)c->pid);
}

static command_t *command_new(commands_t *self, kernel_t *k)
{
    command_t *c = xzalloc(sizeof *c);
    c->reg = self;
    c->k = k;
    c->in_fd = c->out_fd = c->err_fd = -1;
    c->timeout_timer = c->grace_timer = c->signal_timer = c->pid_timer = -1;
    c->backlog_tail = &c->backlog;
    return c;
}

command_t *commands_start(commands_t *self, kernel_t *k, const command_opts_t *opts,
                          sg_error_t **err)
{
    if (kernel_state(k) == KERNEL_DEAD) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "the context's kernel is dead (POST /contexts/%s/restart gives it a new one)",
                     kernel_id(k));
        return NULL;
    }
    /* The tenant's quotas before anything is made: max-queued, and max-live
     * when the command wakes a paused context (kernel_resume asks). */
    if (tenant_admit_work(kernel_owner(k), err) < 0)
        return NULL;
    ctx_t *x = ctx_of(self, k, false);
    if (x && running_count(x) >= COMMANDS_MAX_RUNNING) {
        sg_error_set(err, SG_E_CONFLICT, "the context has %d commands running already",
                     COMMANDS_MAX_RUNNING);
        return NULL;
    }
    command_t *c = command_new(self, k);
    if (take_opts(c, opts, err) < 0) {
        command_free(c);
        return NULL;
    }
    kernel_state_t st = kernel_state(k);
    if ((st == KERNEL_PAUSED || st == KERNEL_PAUSING) && kernel_resume(k, err) < 0) {
        command_free(c); /* using it resumes it, as executions do; or nothing is made */
        return NULL;
    }
    x = ctx_of(self, k, true);
    c->ctx = x;
    snprintf(c->context, sizeof c->context, "%s", kernel_id(k));
    c->pid = ++x->next_pid;
    snprintf(c->id, sizeof c->id, "%u", c->pid);
    c->state = COMMAND_STARTING;
    c->started_at = wall_ms();
    command_t **tail = &x->list;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    kernel_add_connections(k, 1);
    c->holds_connection = true;
    audit_event(&c->who, "command.start", audit_fields(c));
    if (kernel_runs(k))
        launch(c); /* else it starts at READY (on_kernel_event) */
    return c;
}

/* --- the process ------------------------------------------------------------------- */

static void on_exec_done(int status, const sg_error_t *err, void *arg)
{
    ticket_t *t = arg;
    command_t *c = t->c;
    free(t);
    if (!c)
        return;
    c->ticket = NULL;
    c->proc_ended = true;
    c->status = status;
    if (err && !c->err)
        sg_error_set(&c->err, err->kind, "%s", err->msg);
    loop_timer_end(c->reg->loop, c->signal_timer);
    c->signal_timer = -1;
    if (c->out_fd < 0 && c->err_fd < 0)
        finish(c);
    else
        watch_output(c); /* the grace period starts when it may read */
}

static void on_timeout(loop_t *loop, int timer_id, void *arg)
{
    command_t *c = arg;
    c->timeout_timer = -1;
    c->timed_out = true;
    command_signal(c, SIGKILL, NULL);
}

static void on_grace(loop_t *loop, int timer_id, void *arg)
{
    command_t *c = arg;
    c->grace_timer = -1;
    /* Something it left running holds its output open: it has ended. */
    close_pipes(c);
    finish(c);
}

static void on_output(loop_t *loop, int fd, unsigned events, void *arg);

static int pipes(int in[2], int out[2], int err_[2], sg_error_t **err)
{
    in[0] = in[1] = out[0] = out[1] = err_[0] = err_[1] = -1;
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err_, O_CLOEXEC) < 0) {
        int e = errno;
        int *all[] = {in, out, err_};
        for (size_t i = 0; i < 3; i++)
            for (size_t j = 0; j < 2; j++)
                if (all[i][j] >= 0)
                    close(all[i][j]);
        return sg_error_errno(err, e, "pipe for a command");
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err_[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Runs c in its kernel's sandbox; a failure ends it. */
static void launch(command_t *c)
{
    sg_error_t *err = NULL;
    int in[2], out[2], er[2];
    if (pipes(in, out, er, &err) < 0) {
        fail(c, err->kind, err->msg);
        sg_error_free(&err);
        return;
    }
    ticket_t *t = xzalloc(sizeof *t);
    t->c = c;
    /* A terminal's: sandgate-init --group --pty ROWS COLS ARGV (pty.c) */
    size_t n = 0;
    while (c->argv[n])
        n++;
    char rows[16], cols[16];
    snprintf(rows, sizeof rows, "%u", c->pty_rows);
    snprintf(cols, sizeof cols, "%u", c->pty_cols);
    const char **argv = xzalloc((n + 4) * sizeof *argv);
    size_t at = 0;
    if (c->pty_rows) {
        argv[at++] = "--pty";
        argv[at++] = rows;
        argv[at++] = cols;
    }
    for (size_t i = 0; i < n; i++)
        argv[at++] = c->argv[i];
    sandbox_exec_t x = {.argv = argv, .env = (const char *const *)c->env, .cwd = c->cwd};
    int fds[3] = {in[0], out[1], er[1]};
    c->handle = kernel_exec(c->k, &x, fds, on_exec_done, t, &err);
    free(argv);
    close(in[0]);
    close(out[1]);
    close(er[1]);
    c->in_fd = in[1];
    c->out_fd = out[0];
    c->err_fd = er[0];
    if (c->handle == 0) {
        free(t);
        close_pipes(c);
        fail(c, err->kind, err->msg);
        sg_error_free(&err);
        return;
    }
    c->ticket = t;
    c->state = COMMAND_RUNNING;
    commands_ask_pid(c);
    if (!c->stdin_open && c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    } else if (c->in_len > c->in_off || (c->in_closing && c->in_len == c->in_off)) {
        c->in_io =
            loop_fd_add(c->reg->loop, c->in_fd, LOOP_WRITE, commands_stdin_writable, c, NULL);
    }
    watch_output(c);
    if (c->timeout_ms > 0)
        c->timeout_timer = loop_timer(c->reg->loop, c->timeout_ms, 1, on_timeout, c);
    if (c->pending_signal) {
        int sig = c->pending_signal;
        c->pending_signal = 0;
        command_signal(c, sig, NULL);
    }
}

/* --- output ------------------------------------------------------------------------ */

static bool held(const command_t *c)
{
    for (size_t i = 0; i < c->nreaders; i++)
        if (c->readers[i].full)
            return true;
    return false;
}

/* Reads while no reader holds the output back; stops watching while one
 * does (the command then blocks on a full pipe).  After the process ended,
 * the grace period runs only while output may be read. */
static void watch_output(command_t *c)
{
    loop_t *loop = c->reg->loop;
    bool hold = held(c);
    int *fds[] = {&c->out_fd, &c->err_fd};
    loop_io_t **ios[] = {&c->out_io, &c->err_io};
    for (size_t i = 0; i < 2; i++) {
        if (hold || *fds[i] < 0)
            loop_io_remove(loop, ios[i]);
        else if (!*ios[i])
            *ios[i] = loop_fd_add(loop, *fds[i], LOOP_READ, on_output, c, NULL);
    }
    if (c->proc_ended && hold) {
        loop_timer_end(loop, c->grace_timer);
        c->grace_timer = -1;
    } else if (c->proc_ended && c->grace_timer < 0) {
        c->grace_timer = loop_timer(loop, COMMANDS_EXIT_GRACE_MS, 1, on_grace, c);
    }
}

static void backlog_add(command_t *c, command_stream_t which, const char *data, size_t n)
{
    size_t room = c->reg->cfg.max_backlog - c->backlog_bytes;
    size_t keep = n < room ? n : room;
    c->dropped += n - keep;
    c->dropped_unreported += n - keep;
    if (keep == 0)
        return;
    chunk_t *ch = xmalloc(sizeof *ch + keep);
    ch->next = NULL;
    ch->which = which;
    ch->n = keep;
    memcpy(ch->data, data, keep);
    *c->backlog_tail = ch;
    c->backlog_tail = &ch->next;
    c->backlog_bytes += keep;
}

static void deliver(command_t *c, command_stream_t which, const char *data, size_t n)
{
    bool heard = false;
    for (size_t i = 0; i < c->nreaders; i++) {
        reader_t *r = &c->readers[i];
        if (!r->r->on_output) /* an exit watcher */
            continue;
        heard = true;
        if (!r->r->on_output(r->arg, c, which, data, n))
            r->full = true;
    }
    if (!heard)
        backlog_add(c, which, data, n);
}

static void on_output(loop_t *loop, int fd, unsigned events, void *arg)
{
    command_t *c = arg;
    bool is_err = fd == c->err_fd;
    static char buf[READ_CHUNK];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) {
        deliver(c, is_err ? COMMAND_STDERR : COMMAND_STDOUT, buf, (size_t)n);
        watch_output(c);
        return;
    }
    loop_io_remove(loop, is_err ? &c->err_io : &c->out_io);
    close(fd);
    *(is_err ? &c->err_fd : &c->out_fd) = -1;
    if (c->proc_ended && c->out_fd < 0 && c->err_fd < 0)
        finish(c);
}

/* The chunks kept while no reader took them, to the reader r. */
static void give_backlog(command_t *c, reader_t *r)
{
    if (!r->r->on_output)
        return;
    chunk_t *ch = c->backlog;
    c->backlog = NULL;
    c->backlog_tail = &c->backlog;
    c->backlog_bytes = 0;
    while (ch) {
        chunk_t *next = ch->next;
        if (!r->r->on_output(r->arg, c, ch->which, ch->data, ch->n))
            r->full = true;
        free(ch);
        ch = next;
    }
    if (c->dropped_unreported && r->r->on_dropped)
        r->r->on_dropped(r->arg, c, c->dropped_unreported);
    c->dropped_unreported = 0;
}

/* --- the end ------------------------------------------------------------------------- */

/* Finished ones of x beyond COMMANDS_KEEP_EXITED go, oldest first. */
static void evict(ctx_t *x, command_t *keep)
{
    size_t exited = 0;
    for (command_t *c = x->list; c; c = c->next)
        exited += c->state == COMMAND_EXITED;
    for (command_t *c = x->list, *next; c && exited > COMMANDS_KEEP_EXITED; c = next) {
        next = c->next;
        if (c->state != COMMAND_EXITED || c == keep)
            continue;
        unlink_command(x, c);
        command_free(c);
        exited--;
    }
}

static void finish(command_t *c)
{
    loop_t *loop = c->reg->loop;
    if (c->state == COMMAND_EXITED)
        return;
    c->state = COMMAND_EXITED;
    c->ended_at = wall_ms();
    loop_timer_end(loop, c->timeout_timer);
    loop_timer_end(loop, c->grace_timer);
    loop_timer_end(loop, c->signal_timer);
    c->timeout_timer = c->grace_timer = c->signal_timer = -1;
    close_pipes(c);
    c->in_accepting = false;
    free(c->in_buf);
    c->in_buf = NULL;
    c->in_len = c->in_off = 0;
    if (c->holds_connection && c->k)
        kernel_add_connections(c->k, -1);
    c->holds_connection = false;
    json_t *f = audit_fields(c);
    json_object_set_new(f, "exit_code", json_integer(command_exit_code(c)));
    json_object_set_new(f, "timed_out", json_boolean(c->timed_out));
    audit_event(&c->who, "command.end", f);
    if (c->writer) {
        command_stdin_fn *w = c->writer;
        c->writer = NULL;
        w(c->writer_arg, c, true);
    }
    reader_t readers[COMMANDS_MAX_READERS];
    size_t n = c->nreaders;
    memcpy(readers, c->readers, n * sizeof *readers);
    c->nreaders = 0;
    for (size_t i = 0; i < n; i++)
        readers[i].r->on_exit(readers[i].arg, c);
    if (c->ctx)
        evict(c->ctx, c);
    else
        command_free(c);
}

/* --- readers --------------------------------------------------------------------- */

int command_attach(command_t *c, const command_reader_t *r, void *arg, sg_error_t **err)
{
    if (c->nreaders == COMMANDS_MAX_READERS)
        return sg_error_set(err, SG_E_CONFLICT, "command %s has %d readers already", c->id,
                            COMMANDS_MAX_READERS);
    reader_t one = {.r = r, .arg = arg};
    give_backlog(c, &one);
    if (c->state == COMMAND_EXITED) {
        r->on_exit(arg, c);
        return 0;
    }
    c->readers[c->nreaders++] = one;
    watch_output(c);
    return 0;
}

void command_detach(command_t *c, const command_reader_t *r, void *arg)
{
    for (size_t i = 0; i < c->nreaders; i++)
        if (c->readers[i].r == r && c->readers[i].arg == arg) {
            c->readers[i] = c->readers[--c->nreaders];
            if (c->state != COMMAND_EXITED)
                watch_output(c);
            return;
        }
}

void command_reader_ready(command_t *c, const command_reader_t *r, void *arg)
{
    for (size_t i = 0; i < c->nreaders; i++)
        if (c->readers[i].r == r && c->readers[i].arg == arg)
            c->readers[i].full = false;
    if (c->state != COMMAND_EXITED)
        watch_output(c);
}

/* --- looking up ------------------------------------------------------------------ */

command_t *commands_find_pid(commands_t *self, const kernel_t *k, uint32_t pid)
{
    ctx_t *x = ctx_of(self, k, false);
    for (command_t *c = x ? x->list : NULL; c; c = c->next)
        if (c->pid == pid && !c->internal)
            return c;
    return NULL;
}

command_t *commands_find_inner_pid(commands_t *self, const kernel_t *k, long pid)
{
    ctx_t *x = ctx_of(self, k, false);
    for (command_t *c = x ? x->list : NULL; c; c = c->next)
        if (c->inner_pid == pid && !c->internal)
            return c;
    return NULL;
}

command_t *commands_find(commands_t *self, const kernel_t *k, const char *id)
{
    char *end;
    errno = 0;
    unsigned long n = id && *id >= '1' && *id <= '9' ? strtoul(id, &end, 10) : 0;
    if (n == 0 || *end || errno || n > UINT32_MAX)
        return NULL;
    return commands_find_pid(self, k, (uint32_t)n);
}

command_t *commands_next(commands_t *self, const kernel_t *k, const command_t *prev)
{
    ctx_t *x = prev ? NULL : ctx_of(self, k, false);
    command_t *c = prev ? prev->next : x ? x->list : NULL;
    while (c && c->internal)
        c = c->next;
    return c;
}

json_t *commands_list(commands_t *self, const kernel_t *k, bool exited)
{
    json_t *list = json_array();
    ctx_t *x = ctx_of(self, k, false);
    for (command_t *c = x ? x->list : NULL; c; c = c->next)
        if ((exited || c->state != COMMAND_EXITED) && !c->internal)
            json_array_append_new(list, command_json(c));
    return list;
}

const char *command_id(const command_t *c)
{
    return c->id;
}

uint32_t command_pid(const command_t *c)
{
    return c->pid;
}

long command_inner_pid(const command_t *c)
{
    return c->inner_pid;
}

bool command_pid_settled(const command_t *c)
{
    return c->pid_settled || c->state == COMMAND_EXITED;
}

kernel_t *command_kernel(const command_t *c)
{
    return c->k;
}

command_state_t command_state(const command_t *c)
{
    return c->state;
}

int command_exit_code(const command_t *c)
{
    if (c->state != COMMAND_EXITED)
        return -1;
    return c->timed_out ? 124 : c->status;
}

bool command_timed_out(const command_t *c)
{
    return c->timed_out;
}

const sg_error_t *command_error(const command_t *c)
{
    return c->err;
}

uint64_t command_dropped(const command_t *c)
{
    return c->dropped;
}

json_t *command_json(const command_t *c)
{
    static const char *states[] = {"starting", "running", "exited"};
    json_t *argv = json_array();
    for (size_t i = 0; c->argv[i]; i++)
        json_array_append_new(argv, json_string(c->argv[i]));
    char *line = NULL;
    if (!c->shell)
        for (size_t i = 0; c->argv[i]; i++) {
            char *l = xasprintf("%s%s%s", line ? line : "", i ? " " : "", c->argv[i]);
            free(line);
            line = l;
        }
    json_t *j = json_pack("{s:s, s:I, s:s, s:o, s:s, s:s, s:b, s:b, s:o}", "id", c->id, "pid",
                          (json_int_t)c->pid, "cmd", c->shell ? c->shell : line, "argv", argv,
                          "cwd", c->cwd, "state", states[c->state], "background", c->background,
                          "stdin", c->in_accepting, "started_at", resp_iso_time(c->started_at));
    free(line);
    if (c->state == COMMAND_EXITED) {
        json_object_set_new(j, "exit_code", json_integer(command_exit_code(c)));
        json_object_set_new(j, "timed_out", json_boolean(c->timed_out));
        json_object_set_new(j, "ended_at", resp_iso_time(c->ended_at));
        if (c->err)
            json_object_set_new(j, "error", json_string(c->err->msg));
    }
    if (c->dropped)
        json_object_set_new(j, "dropped_bytes", json_integer((json_int_t)c->dropped));
    return j;
}
