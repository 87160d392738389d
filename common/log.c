#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static sg_loglevel_t min_level = SG_LOG_INFO;
static sg_log_tap_fn tap;
static void *tap_arg;

void sg_log_set_tap(sg_log_tap_fn fn, void *arg)
{
    tap = fn;
    tap_arg = arg;
}

void sg_log_set_level(sg_loglevel_t level)
{
    min_level = level;
}

void sg_log(sg_loglevel_t level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < min_level)
        return;
    struct timespec ts;
    struct tm tm;
    char when[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);

    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ %-5s %s\n", when, ts.tv_nsec / 1000000, names[level], line);
    static int tapping; /* a line the tap logs is not heard again */
    if (tap && !tapping) {
        tapping = 1;
        tap(tap_arg, level, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, line);
        tapping = 0;
    }
}
