/* A minimal TAP producer for sandgate's C tests (automake's tap-driver reads
 * it).  Each check prints "ok N - name" or "not ok N - name"; tap_done()
 * prints the plan and returns the exit status. */
#ifndef SG_TAP_H
#define SG_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

static inline __attribute__((format(printf, 2, 3))) int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    if (!cond)
        tap_failed++;
    return cond;
}

#define is_int(got, want, ...)                                                                     \
    do {                                                                                           \
        long long g_ = (got), w_ = (want);                                                         \
        if (!ok(g_ == w_, __VA_ARGS__))                                                            \
            printf("#   got %lld, want %lld\n", g_, w_);                                           \
    } while (0)

#define is_str(got, want, ...)                                                                     \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                                     \
            printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)");           \
    } while (0)

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    va_list ap;
    fputs("# ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static inline int tap_done(void)
{
    printf("1..%d\n", tap_n);
    fflush(stdout);
    return tap_failed ? 1 : 0;
}

#endif
