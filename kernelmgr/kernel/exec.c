/* exec: a kernel's executions (kernel.h) — the queue, sent one at
 * a time, each finished by execute_reply plus status idle, and its timeout:
 * an interrupt, then a restart after the grace period. */
#include "kernelmgr/kernel/internal.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"

void exec_free(exec_t *e)
{
    if (e == NULL)
        return;
    free(e->code);
    json_decref(e->reply);
    free(e);
}

/* Ends every execution with err (kernel died or restarted). Callbacks last. */
void fail_all(kernel_t *k, const sg_error_t *err)
{
    exec_t *list = k->queue, **tail = &list;
    while (*tail)
        tail = &(*tail)->next;
    *tail = k->tracked;
    k->queue = k->tracked = k->overdue = NULL;
    end_timer(k, &k->grace_timer);
    for (exec_t *e = list; e; e = e->next)
        if (e->timer >= 0) {
            loop_timer_end(k->loop, e->timer);
            e->timer = -1;
        }
    while (list) {
        exec_t *e = list;
        list = e->next;
        if (e->cb.on_done)
            e->cb.on_done(e->reply, err, e->cb.arg);
        exec_free(e);
    }
}

static void on_exec_timeout(loop_t *loop, int timer_id, void *arg);

/* Sends the head of the queue when the kernel is idle.  stop_on_error is
 * false: sandgate queues executions itself, so the kernel never holds a
 * second one to abort — and ipykernel would otherwise answer "aborted" to a
 * request that arrives just after an error. */
void pump(kernel_t *k)
{
    exec_t *e = k->queue;
    if (k->state != KERNEL_IDLE || e == NULL || e->msg_id[0])
        return;
    jmsg_t *req = jsession_msg(jclient_session(k->client), "execute_request",
                               json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", e->code,
                                         "silent", e->opts.silent, "store_history",
                                         e->opts.store_history, "user_expressions", "allow_stdin",
                                         e->opts.allow_stdin, "stop_on_error", 0));
    if (e->opts.rich_formats)
        jmsg_set_metadata(req, json_pack("{s:{s:b}}", "sandgate", "rich_formats", 1));
    snprintf(e->msg_id, sizeof e->msg_id, "%s", jmsg_id(req));
    e->sent_at = zclock_mono();
    sg_error_t *err = NULL;
    if (send_msg(k, JCHAN_SHELL, req, &err) < 0) {
        log_warn("kernel %s: %s", k->id, err->msg);
        sg_error_free(&err);
    }
    jmsg_destroy(&req);
    k->state = KERNEL_BUSY;
    k->last_activity = zclock_mono();
    int timeout = e->opts.timeout_ms > 0 ? e->opts.timeout_ms : k->opts.exec_timeout_ms;
    if (timeout > 0)
        e->timer = loop_timer(k->loop, timeout, 1, on_exec_timeout, e);
}

/* Why a timed-out execution ended: interrupted, or (restarted) not even that. */
static sg_error_t *timeout_error(const kernel_t *k, const exec_t *e, bool restarted)
{
    int t = e->opts.timeout_ms > 0 ? e->opts.timeout_ms : k->opts.exec_timeout_ms;
    sg_error_t *err = NULL;
    if (restarted)
        sg_error_set(&err, SG_E_TIMEOUT,
                     "execution exceeded its %d ms timeout and did not stop when interrupted; the "
                     "kernel was restarted and its variables are lost",
                     t);
    else
        sg_error_set(&err, SG_E_TIMEOUT, "execution exceeded its %d ms timeout and was interrupted",
                     t);
    return err;
}

/* e ends: its timer, and the grace period if it is the one overdue, stop. */
static void settle(kernel_t *k, exec_t *e)
{
    end_timer(k, &e->timer);
    if (k->overdue == e) {
        end_timer(k, &k->grace_timer);
        k->overdue = NULL;
    }
    k->last_activity = zclock_mono();
    json_int_t n = json_integer_value(json_object_get(e->reply, "execution_count"));
    if (n > 0)
        k->execution_count = (int)n;
}

static void finish_head(kernel_t *k, const sg_error_t *err)
{
    exec_t *e = k->queue;
    k->queue = e->next;
    settle(k, e);
    log_debug("kernel %s: execution %llu answered in %lld ms", k->id, (unsigned long long)e->id,
              (long long)(k->last_activity - e->sent_at));
    k->state = KERNEL_IDLE;
    sg_error_t *timeout_err = err == NULL && e->timed_out ? timeout_error(k, e, false) : NULL;
    if (timeout_err)
        err = timeout_err;
    bool was_preload = e->is_preload;
    pump(k);
    /* Callbacks last: they may queue, restart or shut the kernel down. */
    if (e->cb.on_done)
        e->cb.on_done(e->reply, err, e->cb.arg);
    exec_free(e);
    sg_error_free(&timeout_err);
    if (was_preload)
        emit(k, KERNEL_EV_READY, NULL);
}

static void on_lingered(loop_t *loop, int timer_id, void *arg)
{
    exec_t *e = arg;
    e->timer = -1;
    if (!e->k->freed && e->k->queue == e)
        finish_head(e->k, NULL);
}

/* The head execution ends once it has its reply and its idle status; for
 * a kernel that may publish output after both (kspec.h's iopub_linger_ms),
 * that long after the last of its output (at most 8 times that). */
void maybe_finish(kernel_t *k)
{
    exec_t *e = k->queue;
    if (!(e && e->msg_id[0] && e->got_reply && e->got_idle) || e->lingering)
        return;
    if (k->spec->iopub_linger_ms > 0) {
        e->lingering = true;
        e->idle_at = zclock_mono();
        end_timer(k, &e->timer);
        e->timer = loop_timer(k->loop, k->spec->iopub_linger_ms, 1, on_lingered, e);
        return;
    }
    finish_head(k, NULL);
}

void linger_more(kernel_t *k, exec_t *e)
{
    if (!e->lingering || e->lingered_more >= 7)
        return;
    log_debug("kernel %s: output %lld ms after the answer", k->id,
              (long long)(zclock_mono() - e->idle_at));
    e->lingered_more++;
    end_timer(k, &e->timer);
    e->timer = loop_timer(k->loop, k->spec->iopub_linger_ms, 1, on_lingered, e);
}

static void on_grace_expired(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    k->grace_timer = -1;
    exec_t *e = k->overdue;
    k->overdue = NULL;
    if (k->freed || e == NULL)
        return;
    log_warn("kernel %s: no answer %d ms after the interrupt; restarting it", k->id,
             k->opts.interrupt_grace_ms);
    sg_error_t *err = timeout_error(k, e, true);
    /* The running execution gets the timeout; the queued ones are kept for the new kernel. */
    for (exec_t **p = e->tracked ? &k->tracked : &k->queue; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    e->next = NULL;
    end_timer(k, &e->timer);
    sg_error_t *rerr = NULL;
    if (restart_now(k, &rerr) < 0) {
        log_error("kernel %s: restart failed: %s", k->id, rerr->msg);
        sg_error_free(&rerr);
    }
    if (e->cb.on_done)
        e->cb.on_done(NULL, err, e->cb.arg);
    exec_free(e);
    sg_error_free(&err);
}

/* arg: the execution (its timer ends whenever it does).  The kernel is
 * interrupted; if it has not answered within the grace period, restarted. */
static void on_exec_timeout(loop_t *loop, int timer_id, void *arg)
{
    exec_t *e = arg;
    kernel_t *k = e->k;
    e->timer = -1;
    if (k->freed)
        return;
    e->timed_out = true;
    log_info("kernel %s: execution timed out; interrupting", k->id);
    sg_error_t *err = NULL;
    if (kernel_interrupt(k, &err) < 0) {
        log_warn("kernel %s: interrupt failed: %s", k->id, err->msg);
        sg_error_free(&err);
    }
    end_timer(k, &k->grace_timer);
    k->overdue = e;
    k->grace_timer = loop_timer(k->loop, k->opts.interrupt_grace_ms, 1, on_grace_expired, k);
    if (e->cb.on_timeout) {
        err = timeout_error(k, e, false);
        e->cb.on_timeout(err, e->cb.arg);
        sg_error_free(&err);
    }
}

exec_t *exec_new(kernel_t *k, const char *code, const kernel_exec_opts_t *opts,
                 const kernel_exec_cb_t *cb)
{
    exec_t *e = xzalloc(sizeof *e);
    e->id = ++k->next_exec;
    e->code = xstrdup(code);
    if (opts)
        e->opts = *opts;
    else
        e->opts.store_history = true;
    e->cb = *cb;
    e->timer = -1;
    e->k = k;
    return e;
}

uint64_t kernel_execute(kernel_t *k, const char *code, const kernel_exec_opts_t *opts,
                        const kernel_exec_cb_t *cb, sg_error_t **err)
{
    if (k->state == KERNEL_DEAD) {
        sg_error_set(err, SG_E_UNAVAILABLE, "kernel %s is dead (restart it for a new one): %s",
                     k->id, k->death ? k->death : "shut down");
        return 0;
    }
    if (k->closed) {
        sg_error_set(err, SG_E_UNAVAILABLE, "%s", k->closed);
        return 0;
    }
    if (k->state != KERNEL_DEAD && kernel_wake_refused(k, err))
        return 0;
    exec_t *e = exec_new(k, code, opts, cb);
    exec_t **tail = &k->queue;
    while (*tail)
        tail = &(*tail)->next;
    *tail = e;
    k->last_activity = zclock_mono();
    if (k->state == KERNEL_PAUSED || k->state == KERNEL_PAUSING) {
        sg_error_t *rerr = NULL;
        if (resume_now(k, &rerr) < 0) {
            log_warn("kernel %s: %s", k->id, rerr->msg);
            sg_error_free(&rerr);
        }
    }
    pump(k);
    return e->id;
}

void kernel_forget(kernel_t *k, uint64_t exec_id)
{
    for (exec_t *e = k->queue; e; e = e->next)
        if (e->id == exec_id)
            e->cb = (kernel_exec_cb_t){0};
    for (exec_t *e = k->tracked; e; e = e->next)
        if (e->id == exec_id)
            e->cb = (kernel_exec_cb_t){0};
}

uint64_t kernel_track(kernel_t *k, const char *msg_id, const kernel_exec_opts_t *opts,
                      const kernel_exec_cb_t *cb, sg_error_t **err)
{
    if (k->state == KERNEL_DEAD || strlen(msg_id) >= sizeof k->tracked->msg_id) {
        sg_error_set(err, k->state == KERNEL_DEAD ? SG_E_UNAVAILABLE : SG_E_INVALID,
                     "kernel %s: execution %.64s cannot be followed", k->id, msg_id);
        return 0;
    }
    exec_t *e = exec_new(k, "", opts, cb);
    e->tracked = true;
    strcpy(e->msg_id, msg_id);
    e->next = k->tracked;
    k->tracked = e;
    return e->id;
}

/* What the kernel says about a frontend's execution: the clock starts when
 * it is busy with it; its output is passed on; its reply and idle end it. */
void on_tracked(kernel_t *k, jchan_t chan, const jmsg_t *m)
{
    exec_t *e = k->tracked;
    while (e && strcmp(e->msg_id, jmsg_parent_id(m)) != 0)
        e = e->next;
    if (e == NULL)
        return;
    const char *type = jmsg_type(m);
    const char *st = jmsg_content_str(m, "execution_state");
    int timeout = e->opts.timeout_ms > 0 ? e->opts.timeout_ms : k->opts.exec_timeout_ms;
    if (chan == JCHAN_SHELL && strcmp(type, "execute_reply") == 0) {
        e->got_reply = true;
        json_decref(e->reply);
        e->reply = json_incref(jmsg_content(m));
    } else if (chan != JCHAN_IOPUB) {
        return;
    } else if (strcmp(type, "status") != 0) {
        if (e->cb.on_output)
            e->cb.on_output(m, e->cb.arg);
    } else if (st && strcmp(st, "busy") == 0 && timeout > 0 && e->timer < 0 && !e->timed_out) {
        e->timer = loop_timer(k->loop, timeout, 1, on_exec_timeout, e);
    } else if (st && strcmp(st, "idle") == 0) {
        e->got_idle = true;
    }
    if (!e->got_reply || !e->got_idle)
        return;
    for (exec_t **p = &k->tracked; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    settle(k, e);
    sg_error_t *err = e->timed_out ? timeout_error(k, e, false) : NULL;
    if (e->cb.on_done)
        e->cb.on_done(e->reply, err, e->cb.arg);
    sg_error_free(&err);
    exec_free(e);
}

size_t kernel_pending(const kernel_t *k)
{
    size_t n = 0;
    for (exec_t *e = k->queue; e; e = e->next)
        n++;
    return n;
}
