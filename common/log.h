/* Logging to stderr: one line per event, "<time> <level> <message>".
 * Log an error once, where it is handled, not at every level it passes. */
#ifndef SG_LOG_H
#define SG_LOG_H

typedef enum { SG_LOG_DEBUG, SG_LOG_INFO, SG_LOG_WARN, SG_LOG_ERROR } sg_loglevel_t;

void sg_log_set_level(sg_loglevel_t level);
/* fn(arg, level, ms, message) hears every line logged from now on (at the
 * level set or above; ms: Unix time in milliseconds), after it is written;
 * what it logs itself is written but not heard.  NULL: none. */
typedef void (*sg_log_tap_fn)(void *arg, sg_loglevel_t level, long long ms, const char *msg);
void sg_log_set_tap(sg_log_tap_fn fn, void *arg);
void sg_log(sg_loglevel_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) sg_log(SG_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) sg_log(SG_LOG_INFO, __VA_ARGS__)
#define log_warn(...) sg_log(SG_LOG_WARN, __VA_ARGS__)
#define log_error(...) sg_log(SG_LOG_ERROR, __VA_ARGS__)

#endif
