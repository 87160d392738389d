/* sandgate error objects.
 *
 * Convention (after crun's libcrun_error_t): a function that can fail returns
 * an int (< 0 on failure) or a pointer (NULL on failure) and takes
 * `sg_error_t **err` as its last argument.  On failure it stores a new error
 * in *err (which must be NULL on entry) and the caller owns it: either handle
 * it (log it once, map it to a reply) and sg_error_free() it, or add context
 * with sg_error_prefix() and pass it up.
 */
#ifndef SG_ERROR_H
#define SG_ERROR_H

#include <stdarg.h>

/* What went wrong, coarse enough to pick an HTTP status from (see
 * sg_error_http_status()). */
typedef enum {
    SG_E_INTERNAL = 0, /* a bug or an unexpected system failure */
    SG_E_INVALID,      /* malformed input from a peer or caller */
    SG_E_AUTH,         /* bad or missing credentials or signatures */
    SG_E_NOTFOUND,     /* unknown object */
    SG_E_CONFLICT,     /* object in the wrong state for the operation */
    SG_E_LIMIT,        /* a size or resource limit was exceeded */
    SG_E_TIMEOUT,      /* a deadline passed */
    SG_E_UNAVAILABLE,  /* a dependency (kernel, sandbox) is not usable */
    SG_E_IO,           /* a system call on a file or socket failed */
    SG_E_FORBIDDEN,    /* understood, and refused (a path leaving its workspace) */
    SG_E_NOSPACE,      /* not enough disk for the operation (nothing was changed) */
    SG_E_METHOD,       /* a method the resource does not take (HTTP 405) */
    SG_E_TOO_MANY,     /* a client asked too often (HTTP 429) */
    SG_E_QUOTA,        /* a tenant's quota is reached (HTTP 429) */
} sg_errkind_t;

typedef struct sg_error {
    sg_errkind_t kind;
    int errnum; /* errno when the cause was a system call, else 0 */
    char *msg;  /* owned, human-readable, no trailing newline */
    /* SG_E_QUOTA: which quota refused, as the keys file spells it (a static
     * string), and its value; NULL and 0 otherwise (sg_error_quota). */
    const char *quota;
    long long limit;
} sg_error_t;

/* Stores a new error in *err (if err is not NULL) and returns -1. */
int sg_error_set(sg_error_t **err, sg_errkind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, appending ": strerror(errnum)" and recording errnum. */
int sg_error_errno(sg_error_t **err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Stores a new SG_E_QUOTA error naming quota (a static string) and its
 * limit; returns -1. */
int sg_error_quota(sg_error_t **err, const char *quota, long long limit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prepends "context: " to the message of *err (no-op if err or *err is NULL).
 * Returns -1 so it can end a failure path. */
int sg_error_prefix(sg_error_t **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees *err and sets it to NULL; safe on NULL and twice. */
void sg_error_free(sg_error_t **err);

/* The one table that maps error kinds to HTTP status codes. */
int sg_error_http_status(sg_errkind_t kind);
/* A short stable name for the kind ("invalid", "not_found", ...). */
const char *sg_error_kind_name(sg_errkind_t kind);

#define cleanup_error __attribute__((cleanup(sg_error_free)))

#endif
