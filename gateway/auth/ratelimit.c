#include "gateway/auth/ratelimit.h"

#include <czmq.h>

#include "common/xalloc.h"

/* What one second's worth is: the burst a tenant may send at once, and how
 * long a request may be kept waiting. */
#define RATELIMIT_TOLERANCE_MS 1000

struct ratelimit {
    zhashx_t *tat; /* tenant name -> its theoretical arrival time (int64_t *, in µs) */
};

static void tat_free(void **item)
{
    free(*item);
    *item = NULL;
}

ratelimit_t *ratelimit_new(void)
{
    ratelimit_t *self = xzalloc(sizeof *self);
    self->tat = zhashx_new();
    zhashx_set_destructor(self->tat, tat_free);
    return self;
}

void ratelimit_destroy(ratelimit_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    zhashx_destroy(&(*self_p)->tat);
    free(*self_p);
    *self_p = NULL;
}

int64_t ratelimit_take(ratelimit_t *self, const char *name, unsigned rate, int64_t now_ms)
{
    int64_t now = now_ms * 1000, interval = 1000000 / (int64_t)rate;
    int64_t second = (int64_t)RATELIMIT_TOLERANCE_MS * 1000;
    int64_t burst = second - interval; /* GCRA's tolerance: `rate` requests at once */
    int64_t *tat = zhashx_lookup(self->tat, name);
    if (tat == NULL) { /* a tenant's first request: its whole burst ahead */
        tat = xmalloc(sizeof *tat);
        *tat = now;
        zhashx_insert(self->tat, name, tat);
    }
    int64_t start = *tat > now ? *tat : now;
    int64_t wait = start - burst - now; /* past the burst: its turn comes later */
    if (wait > second)
        return -1;
    *tat = start + interval;
    return wait > 0 ? (wait + 999) / 1000 : 0;
}
