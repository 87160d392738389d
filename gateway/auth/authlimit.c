#include "gateway/auth/authlimit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "common/xalloc.h"

typedef struct {
    unsigned char addr[16]; /* IPv4 as IPv4-mapped IPv6 */
    bool used;
    unsigned failures;
    int64_t window_start;
    int64_t blocked_until; /* 0: not blocked */
} entry_t;

struct authlimit {
    unsigned max_failures;
    int64_t window_ms, block_ms;
    entry_t *entries; /* a small table scanned linearly: it holds only
                         addresses that failed recently */
    unsigned capacity;
    uint64_t blocks;
};

authlimit_t *authlimit_new(unsigned max_failures, int64_t window_ms, int64_t block_ms,
                           unsigned capacity)
{
    authlimit_t *self = xzalloc(sizeof *self);
    *self = (authlimit_t){.max_failures = max_failures,
                          .window_ms = window_ms,
                          .block_ms = block_ms,
                          .capacity = capacity ? capacity : 1,
                          .entries = xzalloc((capacity ? capacity : 1) * sizeof(entry_t))};
    return self;
}

void authlimit_destroy(authlimit_t **self_p)
{
    if (!*self_p)
        return;
    free((*self_p)->entries);
    free(*self_p);
    *self_p = NULL;
}

/* addr as 16 bytes; false for a family that has no address (Unix sockets:
 * never limited). */
static bool key_of(const struct sockaddr *addr, unsigned char key[16])
{
    if (addr && addr->sa_family == AF_INET) {
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return true;
    }
    if (addr && addr->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
        return true;
    }
    return false;
}

static entry_t *find(authlimit_t *self, const unsigned char key[16])
{
    for (unsigned i = 0; i < self->capacity; i++)
        if (self->entries[i].used && memcmp(self->entries[i].addr, key, 16) == 0)
            return &self->entries[i];
    return NULL;
}

static bool is_blocked(const entry_t *e, int64_t now)
{
    return e->blocked_until && now < e->blocked_until;
}

bool authlimit_blocked(authlimit_t *self, const struct sockaddr *addr, int64_t now)
{
    unsigned char key[16];
    if (!self || !self->max_failures || !key_of(addr, key))
        return false;
    entry_t *e = find(self, key);
    return e && is_blocked(e, now);
}

/* A slot for a new address: a free one, else the one least worth keeping
 * (unblocked before blocked, then the oldest window). */
static entry_t *make_room(authlimit_t *self, int64_t now)
{
    entry_t *best = NULL;
    for (unsigned i = 0; i < self->capacity; i++) {
        entry_t *e = &self->entries[i];
        if (!e->used)
            return e;
        if (!best || (is_blocked(best, now) && !is_blocked(e, now)) ||
            (is_blocked(best, now) == is_blocked(e, now) && e->window_start < best->window_start))
            best = e;
    }
    return best;
}

bool authlimit_fail(authlimit_t *self, const struct sockaddr *addr, int64_t now)
{
    unsigned char key[16];
    if (!self || !self->max_failures || !key_of(addr, key))
        return false;
    entry_t *e = find(self, key);
    if (!e) {
        e = make_room(self, now);
        *e = (entry_t){.used = true, .window_start = now};
        memcpy(e->addr, key, 16);
    }
    if (is_blocked(e, now))
        return false;
    if (now - e->window_start >= self->window_ms || e->blocked_until) {
        e->window_start = now; /* a new window, or the first after a block */
        e->failures = 0;
        e->blocked_until = 0;
    }
    if (++e->failures <= self->max_failures)
        return false;
    e->blocked_until = now + self->block_ms;
    self->blocks++;
    return true;
}

unsigned authlimit_blocked_now(const authlimit_t *self, int64_t now)
{
    unsigned n = 0;
    for (unsigned i = 0; self && i < self->capacity; i++)
        n += self->entries[i].used && is_blocked(&self->entries[i], now);
    return n;
}

uint64_t authlimit_blocks_total(const authlimit_t *self)
{
    return self ? self->blocks : 0;
}

const char *authlimit_addr_text(const struct sockaddr *addr, char *buf, size_t size)
{
    unsigned char key[16];
    if (!key_of(addr, key))
        return strncpy(buf, "local", size);
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(key, mapped, 12) == 0)
        return inet_ntop(AF_INET, key + 12, buf, (socklen_t)size);
    return inet_ntop(AF_INET6, key, buf, (socklen_t)size);
}
