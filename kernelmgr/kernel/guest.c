/* guest: kernels in another kernel's sandbox (kernel_start_guest) — a
 * sandbox holds its first kernel (the host) and up to SANDBOX_GUESTS more,
 * all seeing its files and processes.  A guest starts while its host runs,
 * through sandbox_guest_start; it has no sandbox of its own (k->sb NULL),
 * so what the kernel room does to a sandbox it does to none; it ends when
 * its host's sandbox ends, restarts or goes away.
 *
 * A sandbox pauses whole: its host's pause (or a snapshot's checkpoint)
 * waits for every guest to be idle, each lets go of its connections and
 * pauses with it (guests_suspend), and once the host answers again each
 * reconnects to its kernel, which the image kept (guest_reattach).  A
 * guest's own pause is its host's; its resume wakes its host.  A sandbox
 * restored from a snapshot (a new one, or a roll-back) ends the kernels the
 * image holds beside the first: they are no context's.
 */
#include "kernelmgr/kernel/internal.h"

#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"

static void guest_reattach(kernel_t *k);

static void on_host_event(kernel_t *host, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    kernel_t *k = arg;
    if (k->freed)
        return;
    if (ev == KERNEL_EV_PAUSED && k->state == KERNEL_PAUSING) {
        if (err == NULL && host->state == KERNEL_PAUSED) {
            k->state = KERNEL_PAUSED;
            k->published[0] = 0;
            k->last_pause_ms = zclock_mono() - k->pause_began;
            emit(k, KERNEL_EV_PAUSED, NULL);
        } else if (err) { /* it runs on: back once the host answers */
            k->state = KERNEL_STARTING;
            k->resuming = k->reattaching = true;
            emit(k, KERNEL_EV_PAUSED, err);
        }
        return;
    }
    if (ev == KERNEL_EV_READY && !k->guest_waiting && !k->guest &&
        (k->state == KERNEL_PAUSING || k->state == KERNEL_PAUSED ||
         (k->state == KERNEL_STARTING && k->resuming))) {
        guest_reattach(k);
        return;
    }
    if (ev == KERNEL_EV_READY && k->guest_waiting && !k->freed && k->state == KERNEL_STARTING) {
        /* The start that waited for its sandbox goes on. */
        k->guest_waiting = false;
        sg_error_t *lerr = NULL;
        if (launch_guest(k, &lerr) < 0) {
            die(k, lerr);
            sg_error_free(&lerr);
        }
        return;
    }
    if (ev != KERNEL_EV_DEAD && ev != KERNEL_EV_RESTARTED && ev != KERNEL_EV_GONE)
        return;
    const char *what = ev == KERNEL_EV_DEAD        ? "ended"
                       : ev == KERNEL_EV_RESTARTED ? "was restarted"
                                                   : "was shut down";
    if (ev == KERNEL_EV_GONE)
        guest_unlink(k);
    if (!k->freed && k->state != KERNEL_DEAD)
        die_msg(k, SG_E_UNAVAILABLE, "its sandbox (context %s's) %s", host->id, what);
}

void guest_unlink(kernel_t *k)
{
    kernel_t *h = k->host;
    if (!h)
        return;
    kernel_unobserve(h, on_host_event, k);
    for (kernel_t **pp = &h->guests; *pp; pp = &(*pp)->guest_next)
        if (*pp == k) {
            *pp = k->guest_next;
            break;
        }
    k->host = k->guest_next = NULL;
}

kernel_t *kernel_start_guest(kernel_t *host, const kspec_t *spec, const char *id,
                             const kernel_opts_t *opts, const json_t *env, kernel_event_fn *ev,
                             void *ev_arg, sg_error_t **err)
{
    if (host->host) {
        sg_error_set(err, SG_E_INVALID, "context %s is itself in context %s's sandbox", host->id,
                     host->host->id);
        return NULL;
    }
    kernel_opts_t o = opts ? *opts : host->opts;
    o.internet = host->opts.internet;
    o.template = host->opts.template;
    o.mounts = host->opts.mounts; /* its host's sandbox's (snapshots record them) */
    o.snapshot = NULL;
    o.hold = false;
    kernel_t *k = kernel_alloc(host->loop, host->env, spec, id, host->workspace, &o, ev, ev_arg);
    k->host = host;
    k->guest_env = env ? json_deep_copy(env) : NULL;
    k->guest_next = host->guests;
    host->guests = k;
    kernel_observe(host, on_host_event, k);
    if (launch(k, err) < 0) {
        sg_error_prefix(err, "starting kernel %s", id);
        kernel_t *dead = k;
        kernel_shutdown(&dead, false);
        return NULL;
    }
    return k;
}

bool kernel_usage(const kernel_t *k, sandbox_usage_t *u)
{
    sandbox_t *sb = k->host ? k->host->sb : k->sb;
    if (!sb) {
        *u = (sandbox_usage_t){0};
        return false;
    }
    return sandbox_usage(sb, u);
}

kernel_t *kernel_host(const kernel_t *k)
{
    return k->host;
}

unsigned kernel_guests(const kernel_t *k)
{
    unsigned n = 0;
    for (const kernel_t *g = k->guests; g; g = g->guest_next)
        n += g->state != KERNEL_DEAD;
    return n;
}

/* Before the host's sandbox goes (die, restart, shutdown, detach): its
 * guests' processes end with it, and their handles stop using it. */
void end_guests(kernel_t *host)
{
    for (kernel_t *g = host->guests; g; g = g->guest_next)
        end_guest(g);
}

static void on_guest_end(sandbox_guest_t *g, int status, const char *why, void *arg)
{
    kernel_t *k = arg;
    if (k->guest != g)
        return;
    sandbox_guest_end(&k->guest, false);
    if (k->freed || k->state == KERNEL_DEAD)
        return;
    /* Its report ended without its end: the kernel may run on (a dropped
     * connection): asked again, a few times, before it is called dead. */
    if (status < 0 && why && strcmp(why, SANDBOX_GUEST_LOST) == 0 && k->host && k->host->sb &&
        (k->host->state == KERNEL_IDLE || k->host->state == KERNEL_BUSY) &&
        ++k->guest_rewatches <= 3) {
        sg_error_t *werr = NULL;
        k->guest = sandbox_guest_watch(k->host->sb, k->guest_no, k->spec, on_guest_end, k, &werr);
        if (k->guest) {
            log_info("kernel %s: its report ended; watching kernel %d again", k->id, k->guest_no);
            return;
        }
        sg_error_free(&werr);
    }
    /* A number the sandbox's init still holds (a restored image's kernel,
     * being ended): another one. */
    int n;
    if (status < 0 && why && k->state == KERNEL_STARTING && !k->resuming &&
        sscanf(why, "kernel %d runs", &n) == 1 && ++k->guest_retries < SANDBOX_GUESTS) {
        disconnect(k);
        sg_error_t *lerr = NULL;
        if (launch_guest(k, &lerr) < 0) {
            die(k, lerr);
            sg_error_free(&lerr);
        }
        return;
    }
    if (status >= 0)
        die_msg(k, SG_E_UNAVAILABLE, "the kernel exited with status %d%s", status,
                status > 128 ? " (killed by a signal)" : "");
    else
        die_msg(k, SG_E_UNAVAILABLE, "%s", why ? why : "its sandbox ended");
}

/* A number no running guest of h holds, from h->next_guest on (one just
 * killed may still be ending: taken last). */
static int free_number(kernel_t *h)
{
    for (int i = 0; i < SANDBOX_GUESTS; i++) {
        int n = 2 + (h->next_guest + i) % SANDBOX_GUESTS;
        bool used = false;
        for (const kernel_t *g = h->guests; g; g = g->guest_next)
            used |= g->guest && g->guest_no == n;
        if (!used) {
            h->next_guest = (n - 2 + 1) % SANDBOX_GUESTS;
            return n;
        }
    }
    return 0;
}

int launch_guest(kernel_t *k, sg_error_t **err)
{
    kernel_t *h = k->host;
    if (!h)
        return sg_error_set(err, SG_E_UNAVAILABLE, "its sandbox is gone");
    if (h->state == KERNEL_DEAD)
        return sg_error_set(err, SG_E_CONFLICT, "context %s is dead: its sandbox is gone%s%s",
                            h->id, h->death ? ": " : "", h->death ? h->death : "");
    if (h->state != KERNEL_IDLE && h->state != KERNEL_BUSY) {
        /* Starting, pausing or paused: this start waits for it to run
         * (READY, on_host_event), waking a paused one as a client would. */
        if ((h->state == KERNEL_PAUSED || h->state == KERNEL_PAUSING) && kernel_resume(h, err) < 0)
            return -1;
        k->guest_waiting = true;
        if (k->start_timer < 0)
            k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
        return 0;
    }
    int n = free_number(h);
    if (!n)
        return sg_error_set(err, SG_E_LIMIT,
                            "context %s's sandbox holds its maximum of %d kernels beside its own",
                            h->id, SANDBOX_GUESTS);
    k->guest_no = n;
    k->guest_rewatches = 0;
    k->guest = sandbox_guest_start(h->sb, n, k->spec, k->guest_env, on_guest_end, k, err);
    if (!k->guest)
        return -1;
    log_info("kernel %s: starting as kernel %d in context %s's sandbox", k->id, n, h->id);
    end_timer(k, &k->start_timer); /* a wait's, if it waited */
    k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    if (connect_kernel(k, 0, err) < 0) {
        end_guest(k);
        return -1;
    }
    return 0;
}

void end_guest(kernel_t *k)
{
    if (k->guest)
        sandbox_guest_end(&k->guest, true);
}

bool guests_refuse(kernel_t *k, const char *what, sg_error_t **err)
{
    if (k->host || k->guest_no) {
        sg_error_set(err, SG_E_CONFLICT,
                     "kernel %s runs in context %s's sandbox: a kernel in another's sandbox "
                     "is not %s on its own (its sandbox's first context is)",
                     k->id, k->host ? k->host->id : "(gone)", what);
        return true;
    }
    return false;
}

int guests_suspend(kernel_t *host, sg_error_t **err)
{
    for (kernel_t *g = host->guests; g; g = g->guest_next)
        if (g->state != KERNEL_DEAD && (g->state != KERNEL_IDLE || g->queue || g->tracked))
            return sg_error_set(err, SG_E_CONFLICT,
                                "kernel %s in context %s's sandbox is %s; a sandbox pauses (or is "
                                "snapshotted) when all its kernels are idle",
                                g->id, host->id, kernel_status(g));
    for (kernel_t *g = host->guests; g; g = g->guest_next) {
        if (g->state == KERNEL_DEAD)
            continue;
        disconnect(g);
        if (g->guest)
            sandbox_guest_end(&g->guest, false);
        g->state = KERNEL_PAUSING;
        g->pause_began = zclock_mono();
    }
    return 0;
}

void guests_resume(kernel_t *host)
{
    for (kernel_t *g = host->guests; g; g = g->guest_next)
        if (g->state == KERNEL_PAUSING || g->state == KERNEL_PAUSED)
            guest_reattach(g);
}

/* Its kernel runs on in its host's sandbox (kept by a pause, or by a
 * checkpoint that let it run): its end watched again, its sockets
 * reconnected; READY once it answers. */
static void guest_reattach(kernel_t *k)
{
    kernel_t *h = k->host;
    /* Its sandbox ran on (a snapshot's checkpoint, a failed pause), or it
     * was paused and resumes. */
    bool ran_on = k->state == KERNEL_PAUSING || (k->state == KERNEL_STARTING && k->reattaching);
    k->state = KERNEL_STARTING;
    k->resuming = true;
    k->reattaching = ran_on;
    k->info_replied = k->iopub_seen = false;
    k->hb_sent = 0;
    sg_error_t *err = NULL;
    k->guest =
        h && h->sb ? sandbox_guest_watch(h->sb, k->guest_no, k->spec, on_guest_end, k, &err) : NULL;
    if (!k->guest) {
        if (!err)
            sg_error_set(&err, SG_E_UNAVAILABLE, "its sandbox is gone");
        die(k, err);
        sg_error_free(&err);
        return;
    }
    end_timer(k, &k->start_timer);
    k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    if (connect_kernel(k, 0, &err) < 0) {
        die(k, err);
        sg_error_free(&err);
    }
}

int guest_resume(kernel_t *k, sg_error_t **err)
{
    kernel_t *h = k->host;
    if (k->state != KERNEL_PAUSED && k->state != KERNEL_PAUSING)
        return 0;
    if (!h)
        return sg_error_set(err, SG_E_UNAVAILABLE, "its sandbox is gone");
    if (kernel_resume(h, err) < 0)
        return -1;
    if (k->state == KERNEL_PAUSED) { /* "resuming" until its host answers */
        k->state = KERNEL_STARTING;
        k->resuming = true;
        k->pause_began = zclock_mono();
    }
    if (h->state == KERNEL_IDLE || h->state == KERNEL_BUSY)
        guest_reattach(k);
    return 0;
}

void guests_restored(kernel_t *host)
{
    int keep[SANDBOX_GUESTS];
    size_t n = 0;
    for (const kernel_t *g = host->guests; g && n < SANDBOX_GUESTS; g = g->guest_next)
        if (g->guest)
            keep[n++] = g->guest_no;
    if (host->sb)
        sandbox_guests_kill(host->sb, keep, n);
}

bool kernel_sandbox_idle(const kernel_t *k, int64_t *last_activity)
{
    int64_t last = k->last_activity;
    bool idle = true;
    for (const kernel_t *g = k->guests; g; g = g->guest_next) {
        if (g->state == KERNEL_DEAD)
            continue;
        idle &= g->state == KERNEL_IDLE && !g->queue && !g->tracked && g->connections == 0;
        if (g->last_activity > last)
            last = g->last_activity;
    }
    *last_activity = last;
    return idle;
}
