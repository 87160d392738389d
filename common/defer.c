#include "common/defer.h"

#include "common/xalloc.h"

typedef struct deferred {
    void (*fn)(void *);
    void *arg;
    zloop_t *loop;
    int timer_id;
    struct deferred *prev, *next;
} deferred_t;

static deferred_t *pending;

static void unlink_deferred(deferred_t *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        pending = d->next;
    if (d->next)
        d->next->prev = d->prev;
}

static int run(zloop_t *loop, int timer_id, void *arg)
{
    deferred_t *d = arg;
    unlink_deferred(d);
    d->fn(d->arg);
    free(d);
    return 0;
}

void defer_call(zloop_t *loop, void (*fn)(void *), void *arg)
{
    if (loop == NULL) {
        fn(arg); /* no loop: nothing can still refer to it */
        return;
    }
    deferred_t *d = xzalloc(sizeof *d);
    *d = (deferred_t){.fn = fn, .arg = arg, .loop = loop, .next = pending};
    /* 1 ms: later than "now" of the current pass, so never in this batch. */
    d->timer_id = zloop_timer(loop, 1, 1, run, d);
    if (pending)
        pending->prev = d;
    pending = d;
}

void defer_flush(void)
{
    while (pending) {
        deferred_t *d = pending;
        unlink_deferred(d);
        zloop_timer_end(d->loop, d->timer_id);
        d->fn(d->arg);
        free(d);
    }
}
