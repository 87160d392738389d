/* Allocation helpers: out of memory aborts (there is no sane recovery in a
 * daemon whose every request allocates), so callers never check for NULL. */
#ifndef SG_XALLOC_H
#define SG_XALLOC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

void *xmalloc(size_t n);
void *xzalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
void *xmemdup(const void *p, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* Makes s valid UTF-8 in place (if it is not, every non-ASCII byte becomes
 * '?'), so text that came from a peer (a URL, a header) can go into JSON. */
void utf8_scrub(char *s);
/* The longest prefix of s (n bytes) no longer than max that does not end
 * inside a UTF-8 character. */
size_t utf8_cut(const char *s, size_t n, size_t max);

static inline void cleanup_free_fn(void *p)
{
    free(*(void **)p);
}
static inline void cleanup_close_fn(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}
#define cleanup_free __attribute__((cleanup(cleanup_free_fn)))
#define cleanup_close __attribute__((cleanup(cleanup_close_fn)))

#endif
