/* pause: the manager's own pauses (manager.h): sessions idle past
 * --pause-after, and every session at a stop with --pause-on-stop
 * (kmgr_pause_all), each checked again by the manager's tick. */
#include "kernelmgr/manager/internal.h"

#include "common/log.h"

#define STOPPING_MSG                                                                               \
    "sandgate is stopping: this session is being paused to disk and resumes when its "             \
    "replica is back; try again shortly"

/* A session with a network, where runsc cannot save one (kernel_pause), or
 * in another's sandbox. */
static bool unsaveable(const kmgr_t *m, const entry_t *e)
{
    /* A kernel in another's sandbox pauses with that one's (kernel_start_guest). */
    return (kernel_internet(e->k) && !sandbox_env_can_save_live(m->env)) || e->host_id;
}

/* Pauses e for the stop if it can now (idle, nothing queued); otherwise it
 * keeps waiting (stop_pause) for the next tick.  One that has ended, or
 * cannot pause, no longer holds the stop up. */
static void pause_for_stop(kmgr_t *m, entry_t *e)
{
    kernel_state_t st = kernel_state(e->k);
    if (st == KERNEL_DEAD || st == KERNEL_PAUSED) {
        e->stop_pause = false;
        drained_one(m, e);
        return;
    }
    if (st != KERNEL_IDLE || kernel_pending(e->k) > 0)
        return; /* its running and queued executions end first (the next tick) */
    e->stop_pause = false;
    sg_error_t *err = NULL;
    e->auto_pause = "sandgate is stopping (--pause-on-stop)";
    if (kernel_pause(e->k, &err) < 0) {
        e->auto_pause = NULL;
        log_warn("kmgr: session %s: %s", kernel_id(e->k), err->msg);
        sg_error_free(&err);
        drained_one(m, e);
    }
}

bool kmgr_stopping(const kmgr_t *m)
{
    return m->stopping;
}

void kmgr_set_stopping(kmgr_t *m)
{
    m->stopping = true;
}

bool kmgr_draining(const kmgr_t *m)
{
    return m->moving_away;
}

void kmgr_set_draining(kmgr_t *m, bool on)
{
    m->stopping = true;
    m->moving_away = on;
}

/* Every session that can pause (not the pool, not one with a network) stops
 * taking work and pauses: an idle one now, a busy one once its running and
 * queued executions end (a tick checks), one resuming once it is up. */
size_t kmgr_pause_all(kmgr_t *m, void (*drained)(void *arg), void *arg)
{
    m->stopping = true;
    if (!sandbox_env_can_pause(m->env))
        return 0;
    m->drained = drained;
    m->drained_arg = arg;
    for (size_t i = 0; i < m->n; i++) {
        entry_t *e = m->entries[i];
        kernel_state_t st = kernel_state(e->k);
        if (e->pool || e->draining || unsaveable(m, e) || st == KERNEL_DEAD ||
            st == KERNEL_PAUSED || st == KERNEL_PAUSING)
            continue;
        kernel_close(e->k, STOPPING_MSG);
        e->draining = e->stop_pause = true;
        m->draining++;
    }
    /* Counted first: a pause that reports at once must not find 0 to go. */
    size_t n = m->draining;
    for (size_t i = 0; i < m->n; i++)
        if (m->entries[i]->stop_pause)
            pause_for_stop(m, m->entries[i]);
    return n;
}

/* Sessions idle for pause_after_ms pause: not one with a frontend connected
 * (a notebook open in a browser), not a pool kernel (claiming one should
 * cost nothing), not one with a network (kernel_pause says why).  A failed pause (say, a full disk)
 * waits as long again. */
static void pause_idle(kmgr_t *m, int64_t now)
{
    if (m->cfg.pause_after_ms <= 0 || !sandbox_env_can_pause(m->env))
        return;
    for (size_t i = 0; i < m->n; i++) {
        entry_t *e = m->entries[i];
        int64_t last; /* of its sandbox's kernels, all of them */
        if (e->pool || unsaveable(m, e) || kernel_state(e->k) != KERNEL_IDLE ||
            kernel_pending(e->k) > 0 || kernel_connections(e->k) > 0 || now < e->pause_retry_at ||
            !kernel_sandbox_idle(e->k, &last) || now - last < m->cfg.pause_after_ms)
            continue;
        log_info("kmgr: pausing session %s, idle for %lld ms", kernel_id(e->k),
                 (long long)(now - last));
        e->pause_retry_at = now + m->cfg.pause_after_ms;
        sg_error_t *err = NULL;
        e->auto_pause = "idle (--pause-after)"; /* set first: the end may be reported at once */
        if (kernel_pause(e->k, &err) < 0) {
            e->auto_pause = NULL;
            log_warn("kmgr: session %s: %s", kernel_id(e->k), err->msg);
            sg_error_free(&err);
            continue;
        }
        m->stats.auto_pauses++;
    }
}

void pause_tick(kmgr_t *m, int64_t now)
{
    for (size_t i = 0; m->stopping && i < m->n; i++)
        if (m->entries[i]->stop_pause)
            pause_for_stop(m, m->entries[i]);
    pause_idle(m, now);
}
