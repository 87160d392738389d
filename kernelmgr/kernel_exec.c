/* kernel_exec: a kernel's executions (kernel.h) — the queue, sent one at
 * a time, each finished by execute_reply plus status idle, and its timeout:
 * an interrupt, then a restart after the grace period. */
#include "kernelmgr/kernel_internal.h"

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
    exec_t *list = k->queue;
    k->queue = NULL;
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
    snprintf(e->msg_id, sizeof e->msg_id, "%s", jmsg_id(req));
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
        e->timer = loop_timer(k->loop, timeout, 1, on_exec_timeout, k);
}

static void finish_head(kernel_t *k, const sg_error_t *err)
{
    exec_t *e = k->queue;
    k->queue = e->next;
    end_timer(k, &e->timer);
    end_timer(k, &k->grace_timer);
    k->state = KERNEL_IDLE;
    k->last_activity = zclock_mono();
    json_int_t n = json_integer_value(json_object_get(e->reply, "execution_count"));
    if (n > 0)
        k->execution_count = (int)n;

    sg_error_t *timeout_err = NULL;
    if (err == NULL && e->timed_out) {
        int t = e->opts.timeout_ms > 0 ? e->opts.timeout_ms : k->opts.exec_timeout_ms;
        sg_error_set(&timeout_err, SG_E_TIMEOUT,
                     "execution exceeded its %d ms timeout and was interrupted", t);
        err = timeout_err;
    }
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

void maybe_finish(kernel_t *k)
{
    exec_t *e = k->queue;
    if (e && e->msg_id[0] && e->got_reply && e->got_idle)
        finish_head(k, NULL);
}

static void on_grace_expired(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    k->grace_timer = -1;
    if (k->freed || k->queue == NULL)
        return;
    log_warn("kernel %s: no answer %d ms after the interrupt; restarting it", k->id,
             k->opts.interrupt_grace_ms);
    exec_t *e = k->queue;
    int t = e->opts.timeout_ms > 0 ? e->opts.timeout_ms : k->opts.exec_timeout_ms;
    sg_error_t *err = NULL;
    sg_error_set(&err, SG_E_TIMEOUT,
                 "execution exceeded its %d ms timeout and did not stop when interrupted; the "
                 "kernel was restarted and its variables are lost",
                 t);
    /* The running execution gets the timeout; the queued ones are kept for the new kernel. */
    k->queue = e->next;
    e->next = NULL;
    end_timer(k, &e->timer);
    sg_error_t *rerr = NULL;
    if (kernel_restart(k, &rerr) < 0) {
        log_error("kernel %s: restart failed: %s", k->id, rerr->msg);
        sg_error_free(&rerr);
    }
    if (e->cb.on_done)
        e->cb.on_done(NULL, err, e->cb.arg);
    exec_free(e);
    sg_error_free(&err);
}

static void on_exec_timeout(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->queue == NULL)
        return;
    exec_t *e = k->queue;
    e->timer = -1;
    e->timed_out = true;
    log_info("kernel %s: execution timed out; interrupting", k->id);
    sg_error_t *err = NULL;
    if (kernel_interrupt(k, &err) < 0) {
        log_warn("kernel %s: interrupt failed: %s", k->id, err->msg);
        sg_error_free(&err);
    }
    k->grace_timer = loop_timer(k->loop, k->opts.interrupt_grace_ms, 1, on_grace_expired, k);
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
    exec_t *e = exec_new(k, code, opts, cb);
    exec_t **tail = &k->queue;
    while (*tail)
        tail = &(*tail)->next;
    *tail = e;
    k->last_activity = zclock_mono();
    if (k->state == KERNEL_PAUSED || k->state == KERNEL_PAUSING) {
        sg_error_t *rerr = NULL;
        if (kernel_resume(k, &rerr) < 0) {
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
}

size_t kernel_pending(const kernel_t *k)
{
    size_t n = 0;
    for (exec_t *e = k->queue; e; e = e->next)
        n++;
    return n;
}
