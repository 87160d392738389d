/* ratelimit: each tenant's share of the daemon's loop — requests a second.
 *
 * One event loop answers every tenant's requests in turn, so a tenant that
 * sends them as fast as they are answered takes the loop from everyone
 * else, within every quota it has.  Each tenant may have --tenant-max-rps
 * requests a second (or its keys file line's max-rps), and one second's
 * worth at once; a request past that waits, its connection suspended (it
 * costs the loop nothing meanwhile), for its turn; one that would wait more
 * than another second is refused (429, quota max-rps).
 *
 * The generic cell rate algorithm (ATM's GCRA, as in rate limiters
 * everywhere): one "theoretical arrival time" per tenant, no timers, no
 * queue: a request's turn is the later of now and that time less the
 * tolerance, and it moves the time on by one interval.
 */
#ifndef SG_RATELIMIT_H
#define SG_RATELIMIT_H

#include <stdint.h>

typedef struct ratelimit ratelimit_t;

ratelimit_t *ratelimit_new(void);
/* Safe on NULL and twice. */
void ratelimit_destroy(ratelimit_t **self_p);

/* A request of tenant name (copied), whose rate is rate a second (> 0), at
 * now_ms (monotonic): how long it must wait before it is served, in ms — 0:
 * at once; -1: refused, more than a second's worth waits already (nothing
 * is counted then).  A request told to wait has its turn: it is counted. */
int64_t ratelimit_take(ratelimit_t *self, const char *name, unsigned rate, int64_t now_ms);

#endif
