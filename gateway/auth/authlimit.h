/* authlimit: failed authentications counted per client address, and the
 * addresses that failed too often refused for a while (brute force).
 *
 * A failure starts a window of window_ms for its address; the max_failures
 * + 1st failure within it blocks the address for block_ms, during which
 * every request from it is refused (429) before its key is even looked at.
 * Addresses are IPv4 or IPv6 (an IPv4-mapped IPv6 address counts as its
 * IPv4 one).  The table is bounded: when full, the entry whose window
 * started longest ago makes room, blocked addresses last.
 */
#ifndef SG_AUTHLIMIT_H
#define SG_AUTHLIMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct authlimit authlimit_t;

/* max_failures 0: nothing is ever blocked. */
authlimit_t *authlimit_new(unsigned max_failures, int64_t window_ms, int64_t block_ms,
                           unsigned capacity);
void authlimit_destroy(authlimit_t **self_p);

/* Whether addr is blocked at now (ms, any monotonic clock). */
bool authlimit_blocked(authlimit_t *self, const struct sockaddr *addr, int64_t now);

/* Counts a failure of addr at now; true when this one blocked it (once per
 * block: the caller logs it). */
bool authlimit_fail(authlimit_t *self, const struct sockaddr *addr, int64_t now);

/* Addresses blocked now, and blocks since the start (for /metrics). */
unsigned authlimit_blocked_now(const authlimit_t *self, int64_t now);
uint64_t authlimit_blocks_total(const authlimit_t *self);

/* addr as text ("127.0.0.1", "::1") into buf. */
const char *authlimit_addr_text(const struct sockaddr *addr, char *buf, size_t size);

#endif
