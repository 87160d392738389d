/* guest: kernels in another kernel's sandbox (kernel_start_guest) — a
 * sandbox holds its first kernel (the host) and up to SANDBOX_GUESTS more,
 * all seeing its files and processes.  A guest starts while its host runs,
 * through sandbox_guest_start; it has no sandbox of its own (k->sb NULL),
 * so what the kernel room does to a sandbox it does to none; it ends when
 * its host's sandbox ends, restarts or goes away, and does not pause or
 * snapshot alone.  Its host does not pause or snapshot while a guest runs.
 */
#include "kernelmgr/kernel/internal.h"

#include "common/log.h"
#include "common/xalloc.h"

static void on_host_event(kernel_t *host, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    kernel_t *k = arg;
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
                             const kernel_opts_t *opts, kernel_event_fn *ev, void *ev_arg,
                             sg_error_t **err)
{
    if (host->host) {
        sg_error_set(err, SG_E_INVALID, "context %s is itself in context %s's sandbox", host->id,
                     host->host->id);
        return NULL;
    }
    kernel_opts_t o = opts ? *opts : host->opts;
    o.internet = host->opts.internet;
    o.template = host->opts.template;
    o.snapshot = NULL;
    o.hold = false;
    kernel_t *k = kernel_alloc(host->loop, host->env, spec, id, host->workspace, &o, ev, ev_arg);
    k->host = host;
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
    k->guest = sandbox_guest_start(h->sb, n, k->spec, on_guest_end, k, err);
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
                     "is not %s on its own",
                     k->id, k->host ? k->host->id : "(gone)", what);
        return true;
    }
    unsigned n = kernel_guests(k);
    if (n > 0) {
        sg_error_set(err, SG_E_CONFLICT,
                     "context %s's sandbox holds %u more kernel(s): a sandbox of several "
                     "kernels is not %s yet (delete them first)",
                     k->id, n, what);
        return true;
    }
    return false;
}
