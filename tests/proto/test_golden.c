/* Golden vectors from jupyter_client (tests/proto/golden/gen_golden.py):
 * sandgate must compute the same signatures and decode the same messages. */
#include <sodium.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "proto/jsession.h"
#include "tests/lib/tap.h"

static zframe_t *b64_frame(const char *b64)
{
    size_t cap = strlen(b64), len = 0;
    unsigned char *bin = xmalloc(cap + 1);
    if (sodium_base642bin(bin, cap, b64, strlen(b64), NULL, &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        len = 0;
    zframe_t *f = zframe_new(bin, len);
    free(bin);
    return f;
}

static void check_vector(json_t *v)
{
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *key = json_string_value(json_object_get(v, "key"));
    sg_error_t *err = NULL;
    jsession_t *s = jsession_new(key, strlen(key), &err);

    zmsg_t *wire = zmsg_new();
    size_t i;
    json_t *f;
    json_array_foreach (json_object_get(v, "frames"), i, f) {
        zframe_t *fr = b64_frame(json_string_value(f));
        zmsg_append(wire, &fr);
    }
    size_t nident = json_array_size(json_object_get(v, "identities"));

    /* Signature over the JSON frames exactly as jupyter_client produced them. */
    const void *parts[4];
    size_t lens[4];
    zframe_t *fr = zmsg_first(wire);
    for (i = 0; i < nident + 1; i++)
        fr = zmsg_next(wire);
    for (i = 0; i < 4; i++) {
        fr = zmsg_next(wire);
        parts[i] = zframe_data(fr);
        lens[i] = zframe_size(fr);
    }
    char hex[65];
    jsession_sign(s, parts, lens, 4, hex);
    is_str(hex, json_string_value(json_object_get(v, "signature")), "%s: same signature", name);

    zmsg_t *tampered = zmsg_dup(wire);
    jmsg_t *m = jsession_decode(s, &wire, &err);
    ok(m != NULL, "%s: decodes (%s)", name, err ? err->msg : "ok");
    sg_error_free(&err);
    if (m) {
        ok(json_equal(jmsg_header(m), json_object_get(v, "header")), "%s: header", name);
        ok(json_equal(jmsg_parent(m), json_object_get(v, "parent_header")), "%s: parent", name);
        ok(json_equal(jmsg_metadata(m), json_object_get(v, "metadata")), "%s: metadata", name);
        ok(json_equal(jmsg_content(m), json_object_get(v, "content")), "%s: content", name);
        int same = zmsg_size(jmsg_identities(m)) == nident;
        json_t *id;
        zframe_t *got = zmsg_first(jmsg_identities(m));
        json_array_foreach (json_object_get(v, "identities"), i, id) {
            same = same && got && zframe_streq(got, json_string_value(id));
            got = zmsg_next(jmsg_identities(m));
        }
        ok(same, "%s: identities", name);
        json_t *b;
        same = zmsg_size(jmsg_buffers(m)) == json_array_size(json_object_get(v, "buffers"));
        got = zmsg_first(jmsg_buffers(m));
        json_array_foreach (json_object_get(v, "buffers"), i, b) {
            zframe_t *want = b64_frame(json_string_value(b));
            same = same && got && zframe_eq(got, want);
            zframe_destroy(&want);
            got = zmsg_next(jmsg_buffers(m));
        }
        ok(same, "%s: buffers", name);
    }
    jmsg_destroy(&m);

    /* Flip one byte of the content frame: the signature no longer matches. */
    zframe_t *content = zmsg_first(tampered);
    for (i = 0; i < nident + 5; i++)
        content = zmsg_next(tampered);
    zframe_data(content)[0] ^= 0x01;
    jsession_t *fresh = jsession_new(key, strlen(key), &err);
    m = jsession_decode(fresh, &tampered, &err);
    ok(m == NULL && err && err->kind == SG_E_AUTH, "%s: one flipped byte is refused", name);
    sg_error_free(&err);
    jsession_destroy(&fresh);
    jsession_destroy(&s);
}

int main(void)
{
    const char *srcdir = getenv("SG_SRCDIR");
    cleanup_free char *path =
        xasprintf("%s/tests/proto/golden/vectors.json", srcdir ? srcdir : ".");
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!ok(root != NULL, "load %s", path)) {
        diag("%s", jerr.text);
        return tap_done();
    }
    json_t *vectors = json_object_get(root, "vectors");
    ok(json_array_size(vectors) >= 8, "at least 8 vectors");
    size_t i;
    json_t *v;
    json_array_foreach (vectors, i, v)
        check_vector(v);
    json_decref(root);
    return tap_done();
}
