#include "gateway/session/handover.h"

#include <string.h>
#include <strings.h>

#include "common/xalloc.h"

bool handover_valid(const char *tmpl)
{
    size_t scheme = strncasecmp(tmpl, "https://", 8) == 0  ? 8
                    : strncasecmp(tmpl, "http://", 7) == 0 ? 7
                                                           : 0;
    if (scheme == 0 || strchr("/?#:", tmpl[scheme]) || !strstr(tmpl, HANDOVER_PLACEHOLDER))
        return false;
    for (const unsigned char *p = (const unsigned char *)tmpl; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

char *handover_url(const char *tmpl, const char *id)
{
    if (!tmpl)
        return NULL;
    size_t plen = strlen(HANDOVER_PLACEHOLDER), idlen = strlen(id), n = 0;
    for (const char *p = tmpl; (p = strstr(p, HANDOVER_PLACEHOLDER)); p += plen)
        n++;
    char *out = xmalloc(strlen(tmpl) + n * idlen + 1), *o = out;
    for (const char *p = tmpl, *hit;; p = hit + plen) {
        hit = strstr(p, HANDOVER_PLACEHOLDER);
        size_t k = hit ? (size_t)(hit - p) : strlen(p);
        memcpy(o, p, k);
        o += k;
        if (!hit)
            break;
        memcpy(o, id, idlen);
        o += idlen;
    }
    *o = 0;
    return out;
}
