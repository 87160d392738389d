/* libFuzzer harness for envd's wire format (gateway/envd/proto.c): what a
 * client sends is a streaming request's body and base64 bytes.
 *
 * Properties beyond "no crash, no leak, no UB": a body that unwraps is
 * exactly one envelope holding a JSON object, and framing that object
 * again unwraps to an equal one; bytes that decode from base64 encode back
 * to base64 that decodes to the same bytes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/envd/proto.h"

static void unwrap(const uint8_t *data, size_t size)
{
    sg_error_t *err = NULL;
    json_t *msg = envd_unwrap((const char *)data, size, &err);
    if (msg == NULL) {
        if (err == NULL)
            abort();
        sg_error_free(&err);
        return;
    }
    if (err || !json_is_object(msg) || size < ENVD_ENVELOPE || data[0] != 0)
        abort();
    char *text = json_dumps(msg, JSON_COMPACT);
    char *framed;
    size_t n;
    envd_frame(0, text, strlen(text), &framed, &n);
    json_t *again = envd_unwrap(framed, n, &err);
    if (again == NULL || !json_equal(msg, again))
        abort();
    json_decref(again);
    free(framed);
    free(text);
    json_decref(msg);
}

static void base64(const uint8_t *data, size_t size)
{
    char *s = strndup((const char *)data, size);
    unsigned char *bytes;
    size_t n;
    if (envd_unb64(s, &bytes, &n) == 0) {
        char *b = envd_b64(bytes, n);
        unsigned char *back;
        size_t m;
        if (envd_unb64(b, &back, &m) < 0 || m != n || memcmp(back, bytes, n) != 0)
            abort();
        free(back);
        free(b);
        free(bytes);
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        unwrap(data + 1, size - 1);
    else
        base64(data + 1, size - 1);
    return 0;
}
