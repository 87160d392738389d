/* libFuzzer harness for the Jupyter wire decoder (proto/jsession.c).
 *
 * Input: one flag byte, then frames separated by the two bytes 00 FF.
 * Flag bit 0 asks the harness to replace the signature frame with the right
 * HMAC, so the fuzzer gets past verification and exercises JSON parsing and
 * header checks; without it, the signature path itself is fuzzed.
 *
 * Properties checked beyond "no crash, no leak, no UB": a message that
 * decodes re-encodes and decodes again to the same header and content.
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/jsession.h"

static const char KEY[] = "fuzz-key";

static zmsg_t *split(const uint8_t *data, size_t size)
{
    zmsg_t *z = zmsg_new();
    size_t start = 0;
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] == 0x00 && data[i + 1] == 0xff) {
            zmsg_addmem(z, data + start, i - start);
            start = i + 2;
            i++;
        }
    }
    zmsg_addmem(z, data + start, size - start);
    return z;
}

static void resign(jsession_t *s, zmsg_t *z)
{
    zframe_t *f = zmsg_first(z);
    while (f && !(zframe_size(f) == 9 && memcmp(zframe_data(f), JSESSION_DELIM, 9) == 0))
        f = zmsg_next(z);
    if (!f)
        return;
    zframe_t *sig = zmsg_next(z);
    const void *parts[4];
    size_t lens[4];
    for (int i = 0; i < 4; i++) {
        zframe_t *p = zmsg_next(z);
        if (!sig || !p)
            return;
        parts[i] = zframe_data(p);
        lens[i] = zframe_size(p);
    }
    char hex[65];
    jsession_sign(s, parts, lens, 4, hex);
    zframe_reset(sig, hex, 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static jsession_t *s;
    if (!s) {
        s = jsession_new(KEY, strlen(KEY), NULL);
        jsession_set_max_bytes(s, 1 << 20);
        jsession_set_replay_window(s, 256);
    }
    if (size < 1)
        return 0;
    zmsg_t *z = split(data + 1, size - 1);
    if (data[0] & 1)
        resign(s, z);
    sg_error_t *err = NULL;
    jmsg_t *m = jsession_decode(s, &z, &err);
    if (z != NULL)
        abort(); /* decode must always take the frames */
    if (m == NULL) {
        if (err == NULL || err->msg == NULL)
            abort(); /* every refusal says why */
        sg_error_free(&err);
        return 0;
    }
    /* Round trip through a fresh session (no replay history). */
    jsession_t *s2 = jsession_new(KEY, strlen(KEY), NULL);
    zmsg_t *wire = jsession_encode(s2, m);
    jmsg_t *m2 = jsession_decode(s2, &wire, &err);
    if (m2 == NULL || !json_equal(jmsg_header(m), jmsg_header(m2)) ||
        !json_equal(jmsg_content(m), jmsg_content(m2)))
        abort();
    jmsg_destroy(&m2);
    jsession_destroy(&s2);
    jmsg_destroy(&m);
    return 0;
}
