/* pause: pausing a kernel to disk and resuming it (kernel.h), over
 * sandbox_pause / sandbox_resume. */
#include "kernelmgr/kernel/internal.h"

#include "common/log.h"
#include "common/proc.h"

static void on_resumed(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg);

static void on_paused(sandbox_t *sb, uint64_t bytes, sg_error_t *err, bool alive, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->sb != sb || k->state != KERNEL_PAUSING)
        return;
    int64_t took = zclock_mono() - k->pause_began;
    if (err == NULL && snapshot_is_live(k)) {
        /* Checkpointed, and running on with its relay detached: the
         * snapshot is saved, then the kernel's clients reconnect. */
        disconnect(k);
        log_info("kernel %s checkpointed in %lld ms, running on (image %llu KiB)", k->id,
                 (long long)took, (unsigned long long)(bytes >> 10));
        snapshot_paused(k);
        return;
    }
    if (err == NULL) {
        disconnect(k);
        k->state = KERNEL_PAUSED;
        k->checkpoint_bytes = bytes;
        k->last_pause_ms = took;
        k->published[0] = 0;
        log_info("kernel %s paused in %lld ms (checkpoint %llu KiB)", k->id, (long long)took,
                 (unsigned long long)(bytes >> 10));
        if (k->snap) { /* paused for a snapshot: saved, then resumed, not reported */
            snapshot_paused(k);
            return;
        }
        emit(k, KERNEL_EV_PAUSED, NULL);
        if (!k->freed && k->state == KERNEL_PAUSED && (k->resume_wanted || k->queue)) {
            sg_error_t *rerr = NULL;
            if (resume_now(k, &rerr) < 0) {
                log_warn("kernel %s: %s", k->id, rerr->msg);
                if (k->closed)
                    fail_all(k, rerr); /* queued while it paused: it stays paused */
                sg_error_free(&rerr);
            }
        }
        return;
    }
    bool live = snapshot_is_live(k);
    if (live && alive) {
        /* A snapshot's checkpoint: the kernel runs on; failed, it is back. */
        snapshot_failed(k, err);
        sandbox_reattach(k->sb);
        reattach(k, NULL);
        sg_error_free(&err);
        return;
    }
    k->resume_wanted = false;
    if (k->snap)
        snapshot_failed(k, err);
    if (alive) {
        log_warn("kernel %s: pause failed, it runs on: %s", k->id, err->msg);
        reattach(k, err);
        sg_error_free(&err);
        return;
    }
    sg_error_t *lost = NULL;
    sg_error_set(&lost, err->kind,
                 "%s; the sandbox did not survive the attempt: the kernel was restarted and its "
                 "variables are lost",
                 err->msg);
    sg_error_free(&err);
    log_error("kernel %s: %s", k->id, lost->msg);
    k->state = KERNEL_IDLE;
    emit(k, KERNEL_EV_PAUSED, lost);
    sg_error_t *rerr = NULL;
    if (!k->freed && restart_now(k, &rerr) < 0) {
        log_error("kernel %s: restart failed: %s", k->id, rerr->msg);
        sg_error_free(&rerr);
    }
    sg_error_free(&lost);
}

void reattach(kernel_t *k, const sg_error_t *paused_err)
{
    /* Nothing was lost, but the relay dropped every connection: fresh
     * sockets, and the kernel is ready again when it answers (a message
     * sent into a connection being dropped would be lost). */
    disconnect(k);
    k->state = KERNEL_STARTING;
    k->resuming = k->reattaching = true;
    k->info_replied = k->iopub_seen = false;
    k->hb_sent = 0;
    if (paused_err) {
        emit(k, KERNEL_EV_PAUSED, paused_err);
        if (k->freed)
            return;
    }
    k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    sg_error_t *cerr = NULL;
    if (connect_kernel(k, sandbox_pid(k->sb), &cerr) < 0) {
        die(k, cerr);
        sg_error_free(&cerr);
    }
}

/* Whether k is busy in any way a pause must wait for (with why in *err). */
static bool not_idle(kernel_t *k, sg_error_t **err)
{
    if (k->state != KERNEL_IDLE || k->queue || k->tracked || k->held || k->sb == NULL)
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is %s; only an idle kernel can pause",
                            k->id, kernel_status(k)) < 0;
    if (sandbox_exec_count(k->sb) > 0)
        return sg_error_set(err, SG_E_CONFLICT,
                            "kernel %s has %u command(s) running; it can pause once they end",
                            k->id, sandbox_exec_count(k->sb)) < 0;
    return false;
}

int kernel_pause(kernel_t *k, sg_error_t **err)
{
    return pause_kernel(k, false, err);
}

int kernel_pause_cold(kernel_t *k, sg_error_t **err)
{
    if (k->host)
        return kernel_pause_cold(k->host, err);
    if (!sandbox_env_can_pause(k->env))
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions cannot be paused without a sandbox (--sandbox none)");
    if (k->guests)
        return sg_error_set(err, SG_E_CONFLICT,
                            "kernel %s's sandbox holds other kernels: it pauses with its memory",
                            k->id);
    if (not_idle(k, err))
        return -1;
    log_info("kernel %s: pausing without its memory (a fresh kernel, then paused)", k->id);
    if (restart_now(k, err) < 0)
        return -1;
    k->pause_when_ready = true;
    return 0;
}

bool kernel_pause_pending(const kernel_t *k)
{
    return k->host ? k->host->pause_when_ready : k->pause_when_ready;
}

void pause_if_wanted(kernel_t *k, kernel_event_t ev)
{
    if (ev == KERNEL_EV_DEAD || ev == KERNEL_EV_GONE)
        k->pause_when_ready = false;
    if (ev != KERNEL_EV_READY || !k->pause_when_ready || k->freed)
        return;
    k->pause_when_ready = false;
    sg_error_t *err = NULL;
    if (pause_kernel(k, false, &err) < 0) { /* work came first: it runs on */
        log_warn("kernel %s: the pause without memory: %s", k->id, err->msg);
        emit(k, KERNEL_EV_PAUSED, err);
        sg_error_free(&err);
    }
}

int pause_kernel(kernel_t *k, bool live, sg_error_t **err)
{
    if (k->host && !live) /* a guest pauses with its sandbox (guest.c) */
        return pause_kernel(k->host, false, err);
    if (k->state == KERNEL_PAUSED || k->state == KERNEL_PAUSING)
        return 0;
    if (!sandbox_env_can_pause(k->env))
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions cannot be paused without a sandbox (--sandbox none)");
    if (k->opts.internet && !sandbox_env_can_save_live(k->env))
        /* runsc (2022-12-19) cannot save its network stack with a TCP
         * connection in it, closed ones in TIME_WAIT included, and a failed
         * checkpoint ends the sandbox: not worth a session's variables. */
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions with a network (\"internet\": true) cannot be paused: "
                            "runsc cannot save their TCP connections");
    if (guests_refuse(k, "paused", err))
        return -1;
    if (not_idle(k, err))
        return -1;
    if (guests_suspend(k, err) < 0)
        return -1;
    k->pause_began = zclock_mono();
    k->state = KERNEL_PAUSING;
    k->resume_wanted = false;
    /* Its process is about to end on purpose; the heartbeat would miss it. */
    end_timer(k, &k->hb_timer);
    if (k->watched > 0)
        proc_unwatch(k->watched);
    k->watched = 0;
    if ((live ? sandbox_save_live : sandbox_pause)(k->sb, on_paused, k, err) < 0) {
        k->state = KERNEL_IDLE;
        sg_error_t *werr = NULL;
        if (proc_watch(sandbox_pid(k->sb), on_exit_, k, &werr) == 0)
            k->watched = sandbox_pid(k->sb);
        sg_error_free(&werr);
        k->hb_timer = loop_timer(k->loop, HB_INTERVAL_MS, 0, on_heartbeat, k);
        guests_resume(k);
        return -1;
    }
    log_info("kernel %s: pausing", k->id);
    return 0;
}

static void on_resumed(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->sb != sb)
        return;
    if (pid < 0 && err && err->kind == SG_E_CONFLICT) {
        /* Another runsc's image (sandbox/internal.h's image_check): kept,
         * and the session stays paused until it is restarted or deleted —
         * never a fresh kernel in its place unasked. */
        sg_error_prefix(&err, "the session cannot be resumed");
        log_error("kernel %s: %s", k->id, err->msg);
        k->resuming = false;
        end_timer(k, &k->start_timer);
        k->state = KERNEL_PAUSED;
        fail_all(k, err);
        emit(k, KERNEL_EV_NOT_RESUMED, err);
        sg_error_free(&err);
        return;
    }
    if (pid < 0) {
        /* The checkpoint is unusable: a fresh kernel on the same workspace. */
        sg_error_prefix(&err, "the session could not be resumed; it has a fresh kernel and its "
                              "variables are lost");
        log_error("kernel %s: %s", k->id, err->msg);
        k->resuming = false;
        end_timer(k, &k->start_timer);
        fail_all(k, err);
        sg_error_free(&err);
        end_guests(k);
        sandbox_remove(k->sb, false);
        sandbox_free(&k->sb);
        sg_error_t *lerr = NULL;
        if (launch(k, &lerr) < 0) {
            die(k, lerr);
            sg_error_free(&lerr);
            return;
        }
        emit(k, KERNEL_EV_RESTARTED, NULL);
        return;
    }
    sg_error_t *cerr = NULL;
    if (connect_kernel(k, pid, &cerr) < 0) {
        die(k, cerr);
        sg_error_free(&cerr);
    }
}

void kernel_close(kernel_t *k, const char *why)
{
    k->closed = why;
}

bool kernel_wake_refused(kernel_t *k, sg_error_t **err)
{
    bool asleep =
        k->state == KERNEL_PAUSED || k->state == KERNEL_PAUSING || k->state == KERNEL_DEAD;
    return asleep && k->opts.wake_gate && k->opts.wake_gate(k, err) < 0;
}

int kernel_resume(kernel_t *k, sg_error_t **err)
{
    if (kernel_wake_refused(k, err))
        return -1;
    return resume_now(k, err);
}

int resume_now(kernel_t *k, sg_error_t **err)
{
    if (k->host || k->guest_no)
        return guest_resume(k, err);
    if (k->closed && (k->state == KERNEL_PAUSING || k->state == KERNEL_PAUSED))
        return sg_error_set(err, SG_E_UNAVAILABLE, "%s", k->closed);
    if (k->state == KERNEL_PAUSING) {
        k->resume_wanted = true;
        return 0;
    }
    if (k->state != KERNEL_PAUSED)
        return 0;
    if (k->snap) { /* after the snapshot is saved (snapshot.c) */
        k->resume_wanted = true;
        return 0;
    }
    k->pause_began = zclock_mono();
    k->state = KERNEL_STARTING;
    k->resuming = true;
    k->info_replied = k->iopub_seen = false;
    k->hb_sent = 0;
    k->checkpoint_bytes = 0;
    k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    if (sandbox_resume(k->sb, on_resumed, k, err) < 0) {
        end_timer(k, &k->start_timer);
        k->state = KERNEL_PAUSED;
        k->resuming = false;
        return -1;
    }
    log_info("kernel %s: resuming", k->id);
    return 0;
}

const char *kernel_status(const kernel_t *k)
{
    if (k->state == KERNEL_STARTING && k->resuming)
        return k->reattaching ? "running" : "resuming";
    if (k->state == KERNEL_PAUSING && snapshot_is_live(k))
        return "running"; /* a snapshot's checkpoint: it runs on */
    if (k->held)
        return "starting";
    return kernel_state_name(k->state);
}

kernel_pause_info_t kernel_pause_info(const kernel_t *k)
{
    return (kernel_pause_info_t){
        .checkpoint_bytes = k->state == KERNEL_PAUSED ? k->checkpoint_bytes : 0,
        .last_pause_ms = k->last_pause_ms,
        .last_resume_ms = k->last_resume_ms,
        .resumes = k->resumes,
    };
}
