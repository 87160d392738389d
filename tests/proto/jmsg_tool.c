/* jmsg_tool: sandgate's encoder and decoder on the command line, so tests in
 * other languages can exchange wire messages with it.
 *
 *   jmsg_tool encode   stdin: {"key", "identities", "header", "parent_header",
 *                      "metadata", "content", "buffers"(base64)}
 *                      stdout: JSON array of base64 frames
 *   jmsg_tool decode   stdin: {"key", "frames": [base64...]}
 *                      stdout: the decoded message, or {"error": "..."}
 */
#include <sodium.h>
#include <stdio.h>

#include "common/xalloc.h"
#include "proto/jsession.h"

static json_t *b64(const void *data, size_t len)
{
    size_t cap = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    char *s = xmalloc(cap);
    sodium_bin2base64(s, cap, data, len, sodium_base64_VARIANT_ORIGINAL);
    json_t *j = json_string(s);
    free(s);
    return j;
}

static zframe_t *unb64(const char *s)
{
    size_t cap = strlen(s), len = 0;
    unsigned char *bin = xmalloc(cap + 1);
    if (sodium_base642bin(bin, cap, s, cap, NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL))
        len = 0;
    zframe_t *f = zframe_new(bin, len);
    free(bin);
    return f;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: jmsg_tool encode|decode < spec.json\n");
        return 2;
    }
    json_error_t jerr;
    json_t *in = json_loadf(stdin, JSON_ALLOW_NUL, &jerr);
    if (!in) {
        fprintf(stderr, "jmsg_tool: bad input: %s\n", jerr.text);
        return 2;
    }
    const char *key = json_string_value(json_object_get(in, "key"));
    sg_error_t *err = NULL;
    jsession_t *s = jsession_new(key, key ? strlen(key) : 0, &err);
    if (!s) {
        fprintf(stderr, "jmsg_tool: %s\n", err->msg);
        return 2;
    }
    json_t *out;
    size_t i;
    json_t *v;
    if (strcmp(argv[1], "encode") == 0) {
        jmsg_t *m = jmsg_from_parts(json_incref(json_object_get(in, "header")),
                                    json_incref(json_object_get(in, "parent_header")),
                                    json_incref(json_object_get(in, "metadata")),
                                    json_incref(json_object_get(in, "content")));
        json_array_foreach (json_object_get(in, "identities"), i, v)
            zmsg_addstr(jmsg_identities(m), json_string_value(v));
        json_array_foreach (json_object_get(in, "buffers"), i, v) {
            zframe_t *f = unb64(json_string_value(v));
            zmsg_append(jmsg_buffers(m), &f);
        }
        zmsg_t *wire = jsession_encode(s, m);
        out = json_array();
        for (zframe_t *f = zmsg_first(wire); f; f = zmsg_next(wire))
            json_array_append_new(out, b64(zframe_data(f), zframe_size(f)));
        zmsg_destroy(&wire);
        jmsg_destroy(&m);
    } else {
        zmsg_t *wire = zmsg_new();
        json_array_foreach (json_object_get(in, "frames"), i, v) {
            zframe_t *f = unb64(json_string_value(v));
            zmsg_append(wire, &f);
        }
        jmsg_t *m = jsession_decode(s, &wire, &err);
        if (m) {
            out =
                json_pack("{s:O, s:O, s:O, s:O}", "header", jmsg_header(m), "parent_header",
                          jmsg_parent(m), "metadata", jmsg_metadata(m), "content", jmsg_content(m));
        } else {
            out = json_pack("{s:s, s:s}", "error", err->msg, "kind", sg_error_kind_name(err->kind));
            sg_error_free(&err);
        }
        jmsg_destroy(&m);
    }
    json_dumpf(out, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(out);
    json_decref(in);
    jsession_destroy(&s);
    return 0;
}
