#include "common/xalloc.h"

#include <jansson.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void *check(void *p)
{
    if (p == NULL) {
        fputs("sandgate: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *xmalloc(size_t n)
{
    return check(malloc(n ? n : 1));
}

void *xzalloc(size_t n)
{
    return check(calloc(1, n ? n : 1));
}

void *xrealloc(void *p, size_t n)
{
    return check(realloc(p, n ? n : 1));
}

char *xstrdup(const char *s)
{
    return check(strdup(s));
}

char *xstrndup(const char *s, size_t n)
{
    return check(strndup(s, n));
}

void *xmemdup(const void *p, size_t n)
{
    void *q = xmalloc(n);
    if (n)
        memcpy(q, p, n);
    return q;
}

char *xvasprintf(const char *fmt, va_list ap)
{
    char *s;
    if (vasprintf(&s, fmt, ap) < 0)
        check(NULL);
    return s;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

void utf8_scrub(char *s)
{
    json_t *probe = json_string(s);
    if (probe) {
        json_decref(probe);
        return;
    }
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p >= 0x80)
            *p = '?';
}

size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}
