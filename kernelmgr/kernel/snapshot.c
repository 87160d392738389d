/* snapshot: a kernel's snapshots and roll-backs (kernel.h), over
 * sandbox_snapshot_save and sandbox_workspace_restore_async.
 *
 * A running kernel's snapshot is a checkpoint that leaves its sandbox
 * running (sandbox_save_live: pause_kernel with live), the save, and a
 * reattach of its clients; where runsc cannot (2022-12-19), a pause
 * (pause.c, which hands the paused kernel back here instead of
 * reporting it), the save, and a resume.  Either way an execution sent
 * meanwhile waits for the save. */
#include "kernelmgr/kernel/internal.h"

#include "common/log.h"
#include "common/xalloc.h"

struct snap {
    kernel_t *k; /* NULL once the kernel went away: the save's answer is dropped */
    char *id;
    kernel_snapshot_fn *cb;
    void *arg;
    bool resume;   /* the kernel was paused for it */
    bool live;     /* ... or checkpointed and left running (sandbox_save_live) */
    bool deferred; /* asked for while the kernel resumed: starts once it answers */
    int64_t began;
};

static void snap_free(struct snap *s)
{
    free(s->id);
    free(s);
}

static void on_saved(uint64_t bytes, const sg_error_t *err, void *arg)
{
    struct snap *s = arg;
    kernel_t *k = s->k;
    if (k == NULL) {
        snap_free(s);
        return;
    }
    k->snap = NULL;
    bool resume = s->resume || k->resume_wanted || k->queue;
    if (err == NULL)
        log_info("kernel %s: snapshot %s taken in %lld ms", k->id, s->id,
                 (long long)(zclock_mono() - s->began));
    if (resume && k->state == KERNEL_PAUSED) {
        k->resume_wanted = false;
        sg_error_t *rerr = NULL;
        if (resume_now(k, &rerr) < 0) {
            log_warn("kernel %s: resuming after its snapshot: %s", k->id, rerr->msg);
            sg_error_free(&rerr);
        }
    }
    s->cb(k, bytes, err, s->arg);
    snap_free(s);
}

/* A live snapshot saved (or not): the kernel's relay listens again and
 * its clients reconnect (queued executions go once it answers). */
static void on_saved_live(uint64_t bytes, const sg_error_t *err, void *arg)
{
    struct snap *s = arg;
    kernel_t *k = s->k;
    if (k == NULL) {
        snap_free(s);
        return;
    }
    k->snap = NULL;
    if (err == NULL)
        log_info("kernel %s: snapshot %s taken in %lld ms, the kernel running on", k->id, s->id,
                 (long long)(zclock_mono() - s->began));
    if (k->state == KERNEL_PAUSING && k->sb) {
        sandbox_reattach(k->sb);
        reattach(k, NULL);
    }
    s->cb(k, bytes, err, s->arg);
    snap_free(s);
}

bool snapshot_is_live(const kernel_t *k)
{
    return k->snap && k->snap->live;
}

void snapshot_paused(kernel_t *k)
{
    sandbox_snapshot_save(k->sb, k->snap->id, k->snap->live ? on_saved_live : on_saved, k->snap);
}

void snapshot_failed(kernel_t *k, const sg_error_t *err)
{
    struct snap *s = k->snap;
    k->snap = NULL;
    s->cb(k, 0, err, s->arg);
    snap_free(s);
}

void snapshot_ready(kernel_t *k, const sg_error_t *why)
{
    struct snap *s = k->snap;
    if (s == NULL || !s->deferred)
        return;
    s->deferred = false;
    sg_error_t *err = NULL;
    if (why) {
        snapshot_failed(k, why);
    } else if (k->state != KERNEL_IDLE || k->queue || k->tracked) {
        sg_error_set(&err, SG_E_CONFLICT,
                     "kernel %s is busy; a snapshot is taken of an idle or paused kernel "
                     "(retry once its execution has ended)",
                     k->id);
        snapshot_failed(k, err);
    } else if (pause_kernel(k, k->snap->live, &err) < 0) {
        snapshot_failed(k, err);
    }
    sg_error_free(&err);
}

void snapshot_abort(kernel_t *k)
{
    sandbox_cancel(k->ws_restore);
    k->ws_restore = 0;
    struct snap *s = k->snap;
    if (s == NULL)
        return;
    k->snap = NULL;
    s->k = NULL; /* the save's answer, if one is awaited, frees it */
    s->cb(k, 0, &(sg_error_t){.kind = SG_E_UNAVAILABLE, .msg = "the kernel was shut down"}, s->arg);
    s->cb = NULL;
}

int kernel_snapshot(kernel_t *k, const char *sid, kernel_snapshot_fn *cb, void *arg,
                    sg_error_t **err)
{
    if (k->snap)
        return sg_error_set(err, SG_E_CONFLICT, "a snapshot of kernel %s is under way", k->id);
    if (!sandbox_env_can_pause(k->env))
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions cannot be snapshotted without a sandbox (--sandbox none)");
    if (k->opts.internet && !sandbox_env_can_save_live(k->env))
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions with a network (\"internet\": true) cannot be snapshotted: "
                            "runsc cannot save their TCP connections");
    if (guests_refuse(k, "snapshotted", err))
        return -1;
    bool paused = k->state == KERNEL_PAUSED;
    /* A running kernel's snapshot leaves it running where runsc can. */
    bool live = !paused && sandbox_env_can_save_live(k->env);
    /* Resuming (after a snapshot, say): the snapshot waits for it. */
    /* ... or answering again after a snapshot that left it running. */
    bool resuming = k->state == KERNEL_STARTING && k->resuming && k->sb;
    if (!paused && !resuming &&
        (k->state != KERNEL_IDLE || k->queue || k->tracked || k->held || !k->sb))
        return sg_error_set(err, SG_E_CONFLICT,
                            "kernel %s is %s; a snapshot is taken of an idle or paused kernel "
                            "(retry once its execution has ended)",
                            k->id, kernel_status(k));
    struct snap *s = xzalloc(sizeof *s);
    *s = (struct snap){.k = k,
                       .id = xstrdup(sid),
                       .cb = cb,
                       .arg = arg,
                       .resume = !paused && !live,
                       .live = live,
                       .deferred = resuming,
                       .began = zclock_mono()};
    k->snap = s;
    if (resuming) /* snapshot_ready starts it */
        return 0;
    if (paused) {
        snapshot_paused(k);
        return 0;
    }
    if (pause_kernel(k, live, err) < 0) {
        k->snap = NULL;
        snap_free(s);
        return -1;
    }
    return 0;
}

static void on_workspace_restored(const sg_error_t *err, void *arg)
{
    kernel_t *k = arg;
    k->ws_restore = 0;
    if (k->freed)
        return;
    sg_error_t *lerr = NULL;
    if (err) {
        sg_error_set(&lerr, err->kind, "rolling back to snapshot %s: %s",
                     k->from_snapshot ? k->from_snapshot : "?", err->msg);
        die(k, lerr);
        sg_error_free(&lerr);
        return;
    }
    if (launch(k, &lerr) < 0) {
        die_msg(k, SG_E_UNAVAILABLE, "rolling back failed: %s", lerr ? lerr->msg : "?");
        sg_error_free(&lerr);
        return;
    }
    emit(k, KERNEL_EV_RESTARTED, NULL);
}

int kernel_restore_snapshot(kernel_t *k, const char *sid, sg_error_t **err)
{
    if (!sandbox_env_can_pause(k->env))
        return sg_error_set(err, SG_E_CONFLICT, "snapshots need sandboxes (not --sandbox none)");
    if (guests_refuse(k, "rolled back", err))
        return -1;
    if (k->held || k->snap || k->ws_restore || k->state == KERNEL_PAUSING)
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is %s; retry once that has ended", k->id,
                            k->snap ? "being snapshotted" : kernel_status(k));
    log_info("kernel %s: rolling back to snapshot %s", k->id, sid);
    restart_reset(k, "the context was rolled back to a snapshot; the execution's state is gone");
    free(k->from_snapshot);
    k->from_snapshot = xstrdup(sid);
    /* The sandbox above is being removed: the launcher unmounts the
     * workspace it used and puts the snapshot's copy in its place. */
    k->ws_restore =
        sandbox_workspace_restore_async(k->env, k->workspace, sid, on_workspace_restored, k);
    return 0;
}
