#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

static int error_new(sg_error_t **err, sg_errkind_t kind, int errnum, const char *fmt, va_list ap)
{
    if (err == NULL)
        return -1;
    sg_error_t *e = xmalloc(sizeof *e);
    e->kind = kind;
    e->errnum = errnum;
    e->quota = NULL;
    e->limit = 0;
    if (vasprintf(&e->msg, fmt, ap) < 0)
        abort();
    if (errnum != 0) {
        char *full = xasprintf("%s: %s", e->msg, strerror(errnum));
        free(e->msg);
        e->msg = full;
    }
    sg_error_free(err); /* a caller that forgot to clear loses the old one, not memory */
    *err = e;
    return -1;
}

int sg_error_set(sg_error_t **err, sg_errkind_t kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_new(err, kind, 0, fmt, ap);
    va_end(ap);
    return -1;
}

int sg_error_errno(sg_error_t **err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_new(err, SG_E_IO, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int sg_error_quota(sg_error_t **err, const char *quota, long long limit, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_new(err, SG_E_QUOTA, 0, fmt, ap);
    va_end(ap);
    if (err) {
        (*err)->quota = quota;
        (*err)->limit = limit;
    }
    return -1;
}

int sg_error_prefix(sg_error_t **err, const char *fmt, ...)
{
    if (err == NULL || *err == NULL)
        return -1;
    char *ctx;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&ctx, fmt, ap) < 0)
        abort();
    va_end(ap);
    char *full = xasprintf("%s: %s", ctx, (*err)->msg);
    free(ctx);
    free((*err)->msg);
    (*err)->msg = full;
    return -1;
}

void sg_error_free(sg_error_t **err)
{
    if (err == NULL || *err == NULL)
        return;
    free((*err)->msg);
    free(*err);
    *err = NULL;
}

static const struct {
    int status;
    const char *name;
} kinds[] = {
    [SG_E_INTERNAL] = {500, "internal"},
    [SG_E_INVALID] = {400, "invalid"},
    [SG_E_AUTH] = {401, "unauthorized"},
    [SG_E_NOTFOUND] = {404, "not_found"},
    [SG_E_CONFLICT] = {409, "conflict"},
    [SG_E_LIMIT] = {413, "limit_exceeded"},
    [SG_E_TIMEOUT] = {504, "timeout"},
    [SG_E_UNAVAILABLE] = {503, "unavailable"},
    [SG_E_IO] = {500, "io"},
    [SG_E_FORBIDDEN] = {403, "forbidden"},
    [SG_E_NOSPACE] = {507, "insufficient_storage"},
    [SG_E_METHOD] = {405, "method_not_allowed"},
    [SG_E_TOO_MANY] = {429, "too_many_requests"},
    [SG_E_QUOTA] = {429, "quota_exceeded"},
};

int sg_error_http_status(sg_errkind_t kind)
{
    if ((unsigned)kind >= sizeof kinds / sizeof kinds[0])
        return 500;
    return kinds[kind].status;
}

const char *sg_error_kind_name(sg_errkind_t kind)
{
    if ((unsigned)kind >= sizeof kinds / sizeof kinds[0])
        return "internal";
    return kinds[kind].name;
}
