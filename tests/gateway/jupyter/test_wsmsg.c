/* wsmsg: both WebSocket wire formats of Jupyter messages, byte for byte.
 *
 * The golden vectors are built by hand from jupyter_server's
 * docs/source/developers/websocket-protocols.rst (the "Default WebSocket
 * protocol" and "v1.kernel.websocket.jupyter.org protocol" sections), each
 * offset worked out from the lengths of the parts written beside it; for
 * both v1 vectors, jupyter_server 2.21.1's serialize_msg_to_ws_v1 given the
 * same channel and parts gives the same bytes (checked when written).  Every
 * refusal is checked for its reason, and starts from a message that decodes,
 * so a codec that refused everything fails too. */
#include "gateway/jupyter/wsmsg.h"

#include <stdlib.h>

#include "tests/lib/tap.h"

/* --- building messages ------------------------------------------------------------ */

typedef struct {
    uint8_t b[1 << 16];
    size_t n;
} bytes_t;

static bytes_t B; /* the message a test builds */

static bytes_t *fresh(void)
{
    B.n = 0;
    return &B;
}

static bytes_t *add(bytes_t *w, const void *p, size_t n)
{
    memcpy(w->b + w->n, p, n);
    w->n += n;
    return w;
}

static bytes_t *add_str(bytes_t *w, const char *s)
{
    return add(w, s, strlen(s));
}

static void set_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void set_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static bytes_t *add_le64(bytes_t *w, uint64_t v)
{
    set_le64(w->b + w->n, v);
    w->n += 8;
    return w;
}

static bytes_t *add_be32(bytes_t *w, uint32_t v)
{
    set_be32(w->b + w->n, v);
    w->n += 4;
    return w;
}

#define HEADER "{\"msg_id\":\"m1\",\"msg_type\":\"t\"}"

/* A v1 message: channel, four parts and nbuf buffers (strings), its offsets
 * computed as the spec lays them out. */
static bytes_t *v1_msg(const char *channel, const char *header, const char *parent,
                       const char *metadata, const char *content, int nbuf, const char *const *bufs)
{
    bytes_t *w = fresh();
    const char *parts[5 + 8] = {channel, header, parent, metadata, content};
    for (int i = 0; i < nbuf; i++)
        parts[5 + i] = bufs[i];
    size_t n = 5 + (size_t)nbuf + 1;
    add_le64(w, n);
    uint64_t at = 8 * (1 + n);
    for (size_t i = 0; i < n; i++) {
        add_le64(w, at);
        if (i + 1 < n)
            at += strlen(parts[i]);
    }
    for (size_t i = 0; i + 1 < n; i++)
        add_str(w, parts[i]);
    return w;
}

/* A default-format binary message: the JSON text, then nbuf buffers. */
static bytes_t *default_msg(const char *json, int nbuf, const char *const *bufs)
{
    bytes_t *w = fresh();
    uint32_t n = 1 + (uint32_t)nbuf;
    add_be32(w, n);
    uint32_t at = 4 * (1 + n);
    add_be32(w, at);
    at += (uint32_t)strlen(json);
    for (int i = 0; i < nbuf; i++) {
        add_be32(w, at);
        at += (uint32_t)strlen(bufs[i]);
    }
    add_str(w, json);
    for (int i = 0; i < nbuf; i++)
        add_str(w, bufs[i]);
    return w;
}

/* --- checking --------------------------------------------------------------------- */

static jmsg_t *decode(wsmsg_format_t f, ws_opcode_t op, const void *data, size_t len, jchan_t *chan)
{
    sg_error_t *err = NULL;
    jmsg_t *m = wsmsg_decode(f, op, data, len, chan, &err);
    if (m == NULL)
        diag("refused: %s", err ? err->msg : "(no error)");
    sg_error_free(&err);
    return m;
}

/* Decodes and checks the channel and msg_id; the message when both hold. */
static jmsg_t *decodes(wsmsg_format_t f, ws_opcode_t op, const void *data, size_t len, jchan_t want,
                       const char *want_id, const char *what)
{
    jchan_t chan = JCHAN_HB;
    jmsg_t *m = decode(f, op, data, len, &chan);
    bool good = m && chan == want && strcmp(jmsg_id(m), want_id) == 0;
    if (!ok(good, "decodes: %s", what) && m)
        diag("channel %s, msg_id '%s'", jchan_name(chan), jmsg_id(m));
    if (!good)
        jmsg_destroy(&m);
    return m;
}

/* Must be refused, with an error of kind whose message contains why, and
 * *chan left alone. */
static void refused(wsmsg_format_t f, ws_opcode_t op, const void *data, size_t len,
                    sg_errkind_t kind, const char *why, const char *what)
{
    jchan_t chan = JCHAN_HB;
    sg_error_t *err = NULL;
    jmsg_t *m = wsmsg_decode(f, op, data, len, &chan, &err);
    bool good = m == NULL && err && err->msg && err->kind == kind && strstr(err->msg, why) &&
                chan == JCHAN_HB;
    if (!ok(good, "refused: %s", what))
        diag("got %s (want '%s')", m ? "a message" : err ? err->msg : "no error", why);
    jmsg_destroy(&m);
    sg_error_free(&err);
}

static bool json_is(const json_t *j, const char *text)
{
    json_t *want = json_loads(text, 0, NULL);
    bool same = want && json_equal(j, want);
    if (!same) {
        char *got = json_dumps(j, JSON_COMPACT);
        diag("JSON %s, want %s", got ? got : "(null)", text);
        free(got);
    }
    json_decref(want);
    return same;
}

/* The message's buffers are exactly these (n of them, lens[i] bytes each). */
static bool buffers_are(const jmsg_t *m, int n, const char *const *data, const size_t *lens)
{
    zmsg_t *b = jmsg_buffers(m);
    if ((int)zmsg_size(b) != n) {
        diag("%zu buffers, want %d", zmsg_size(b), n);
        return false;
    }
    int i = 0;
    for (zframe_t *f = zmsg_first(b); f; f = zmsg_next(b), i++)
        if (zframe_size(f) != lens[i] || memcmp(zframe_data(f), data[i], lens[i]) != 0) {
            diag("buffer %d differs", i);
            return false;
        }
    return true;
}

static bool same_msg(const jmsg_t *a, const jmsg_t *b)
{
    if (!json_equal(jmsg_header(a), jmsg_header(b)) ||
        !json_equal(jmsg_parent(a), jmsg_parent(b)) ||
        !json_equal(jmsg_metadata(a), jmsg_metadata(b)) ||
        !json_equal(jmsg_content(a), jmsg_content(b)))
        return false;
    zmsg_t *ba = jmsg_buffers(a), *bb = jmsg_buffers(b);
    if (zmsg_size(ba) != zmsg_size(bb))
        return false;
    for (zframe_t *fa = zmsg_first(ba), *fb = zmsg_first(bb); fa;
         fa = zmsg_next(ba), fb = zmsg_next(bb))
        if (!zframe_eq(fa, fb))
            return false;
    return true;
}

static bool bytes_are(const uint8_t *got, size_t got_len, const void *want, size_t want_len)
{
    if (got && got_len == want_len && memcmp(got, want, want_len) == 0)
        return true;
    diag("%zu bytes, want %zu", got_len, want_len);
    for (size_t i = 0; got && i < got_len && i < want_len; i++)
        if (got[i] != ((const uint8_t *)want)[i]) {
            diag("first difference at byte %zu: %02x, want %02x", i, got[i],
                 ((const uint8_t *)want)[i]);
            break;
        }
    return false;
}

/* The message the encoding tests send: HEADER, content {"a":1}, and the
 * buffers given. */
static jmsg_t *sample(const char *parent, const char *content, int nbuf, const char *const *bufs,
                      const size_t *lens)
{
    jmsg_t *m = jmsg_from_parts(json_loads(HEADER, 0, NULL), json_loads(parent, 0, NULL),
                                json_object(), json_loads(content, 0, NULL));
    for (int i = 0; i < nbuf; i++)
        zmsg_addmem(jmsg_buffers(m), bufs[i], lens[i]);
    return m;
}

/* --- golden vectors --------------------------------------------------------------- */

/* v1, from the spec's table: offset_number (u64 LE), offset_0..offset_n (u64
 * LE; offset_n is the message's length), channel, header, parent_header,
 * metadata, content, buffer_0.  7 offsets: the table is 8 * (1 + 7) = 64
 * bytes; "shell" 5 bytes, HEADER 30, "{}" 2, "{}" 2, {"a":1} 7, the buffer 2. */
static const uint8_t GOLDEN_V1[] = {
    7,   0,   0,   0,   0,   0,   0,   0, /* offset_number */
    64,  0,   0,   0,   0,   0,   0,   0, /* channel */
    69,  0,   0,   0,   0,   0,   0,   0, /* header */
    99,  0,   0,   0,   0,   0,   0,   0, /* parent_header */
    101, 0,   0,   0,   0,   0,   0,   0, /* metadata */
    103, 0,   0,   0,   0,   0,   0,   0, /* content */
    110, 0,   0,   0,   0,   0,   0,   0, /* buffer_0 */
    112, 0,   0,   0,   0,   0,   0,   0, /* the end */
    's', 'h', 'e', 'l', 'l', '{', '"', 'm', 's', 'g', '_', 'i', 'd', '"', ':',  '"',
    'm', '1', '"', ',', '"', 'm', 's', 'g', '_', 't', 'y', 'p', 'e', '"', ':',  '"',
    't', '"', '}', '{', '}', '{', '}', '{', '"', 'a', '"', ':', '1', '}', 0x00, 0xff,
};

/* v1 without buffers, as a kernel's status reaches a frontend: 6 offsets, a
 * 56-byte table; "iopub" 5 bytes, the header 35, the parent 15, "{}" 2, the
 * content 26. */
static const uint8_t GOLDEN_V1_STATUS_HEAD[] = {
    6,   0, 0, 0, 0, 0, 0, 0, /* offset_number */
    56,  0, 0, 0, 0, 0, 0, 0, /* channel */
    61,  0, 0, 0, 0, 0, 0, 0, /* header */
    96,  0, 0, 0, 0, 0, 0, 0, /* parent_header */
    111, 0, 0, 0, 0, 0, 0, 0, /* metadata */
    113, 0, 0, 0, 0, 0, 0, 0, /* content */
    139, 0, 0, 0, 0, 0, 0, 0, /* the end */
};
#define GOLDEN_V1_STATUS_TAIL                                                                      \
    "iopub{\"msg_id\":\"m2\",\"msg_type\":\"status\"}{\"msg_id\":\"m1\"}{}"                        \
    "{\"execution_state\":\"idle\"}"

/* Default format, binary, from the spec's table: the count of offsets (u32
 * BE), offset_0 (the JSON), offset_1 (buffer_0), the JSON, buffer_0.  The
 * table is 4 * (1 + 2) = 12 bytes, the JSON 61. */
static const uint8_t GOLDEN_DEFAULT_HEAD[] = {0, 0, 0, 2, 0, 0, 0, 12, 0, 0, 0, 73};
#define GOLDEN_DEFAULT_JSON "{\"header\":" HEADER ",\"channel\":\"control\"}"

static void test_golden(void)
{
    jmsg_t *m = decodes(WSMSG_V1, WS_BINARY, GOLDEN_V1, sizeof GOLDEN_V1, JCHAN_SHELL, "m1",
                        "the hand-built v1 vector");
    static const char *const buf[] = {"\x00\xff"};
    static const size_t buf_len[] = {2};
    ok(m && json_is(jmsg_header(m), HEADER) && json_is(jmsg_parent(m), "{}") &&
           json_is(jmsg_metadata(m), "{}") && json_is(jmsg_content(m), "{\"a\":1}") &&
           buffers_are(m, 1, buf, buf_len),
       "v1 vector: its parts and its buffer");
    jmsg_destroy(&m);

    m = sample("{}", "{\"a\":1}", 1, buf, buf_len);
    ws_opcode_t op = WS_CONT;
    size_t len = 0;
    sg_error_t *err = NULL;
    uint8_t *out = wsmsg_encode(WSMSG_V1, JCHAN_SHELL, m, &op, &len, &err);
    ok(op == WS_BINARY && bytes_are(out, len, GOLDEN_V1, sizeof GOLDEN_V1),
       "v1: encoding the same message gives the vector, byte for byte");
    free(out);
    jmsg_destroy(&m);

    bytes_t *w = fresh();
    add(w, GOLDEN_V1_STATUS_HEAD, sizeof GOLDEN_V1_STATUS_HEAD);
    add_str(w, GOLDEN_V1_STATUS_TAIL);
    m = jmsg_from_parts(json_loads("{\"msg_id\":\"m2\",\"msg_type\":\"status\"}", 0, NULL),
                        json_loads("{\"msg_id\":\"m1\"}", 0, NULL), json_object(),
                        json_loads("{\"execution_state\":\"idle\"}", 0, NULL));
    out = wsmsg_encode(WSMSG_V1, JCHAN_IOPUB, m, &op, &len, &err);
    ok(op == WS_BINARY && bytes_are(out, len, w->b, w->n),
       "v1: an iopub status without buffers, byte for byte");
    free(out);
    jmsg_destroy(&m);

    w = fresh();
    add(w, GOLDEN_DEFAULT_HEAD, sizeof GOLDEN_DEFAULT_HEAD);
    add_str(w, GOLDEN_DEFAULT_JSON "xyz");
    m = decodes(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, JCHAN_CONTROL, "m1",
                "the hand-built default-format binary vector");
    static const char *const xyz[] = {"xyz"};
    static const size_t xyz_len[] = {3};
    ok(m && json_is(jmsg_parent(m), "{}") && json_is(jmsg_metadata(m), "{}") &&
           json_is(jmsg_content(m), "{}") && buffers_are(m, 1, xyz, xyz_len),
       "default vector: missing parts are empty objects, the buffer runs to the end");
    jmsg_destroy(&m);

    /* What sandgate sends in the default format, as it always has: the four
     * parts, the channel, then msg_id and msg_type copied from the header;
     * "buffers": [] only in a text frame. */
    m = sample("{}", "{\"a\":1}", 0, NULL, NULL);
    out = wsmsg_encode(WSMSG_DEFAULT, JCHAN_IOPUB, m, &op, &len, &err);
    static const char text[] = "{\"header\":" HEADER ",\"parent_header\":{},\"metadata\":{},"
                               "\"content\":{\"a\":1},\"channel\":\"iopub\",\"buffers\":[],"
                               "\"msg_id\":\"m1\",\"msg_type\":\"t\"}";
    ok(op == WS_TEXT && bytes_are(out, len, text, sizeof text - 1),
       "default format without buffers: one text frame, byte for byte");
    free(out);
    jmsg_destroy(&m);

    m = sample("{}", "{\"a\":1}", 1, buf, buf_len);
    out = wsmsg_encode(WSMSG_DEFAULT, JCHAN_IOPUB, m, &op, &len, &err);
    /* JSON of 139 bytes at 12, the buffer at 151. */
    w = fresh();
    add(w, (const uint8_t[]){0, 0, 0, 2, 0, 0, 0, 12, 0, 0, 0, 151}, 12);
    add_str(w, "{\"header\":" HEADER ",\"parent_header\":{},\"metadata\":{},\"content\":{\"a\":1},"
               "\"channel\":\"iopub\",\"msg_id\":\"m1\",\"msg_type\":\"t\"}");
    add(w, "\x00\xff", 2);
    ok(op == WS_BINARY && bytes_are(out, len, w->b, w->n),
       "default format with a buffer: the big-endian table, the JSON, the buffer");
    free(out);
    jmsg_destroy(&m);
    ok(err == NULL, "no encoding failed");
    sg_error_free(&err);
}

/* --- round trips ------------------------------------------------------------------ */

static void round_trip(wsmsg_format_t f, jchan_t chan, int nbuf, const char *what)
{
    static const char *const bufs[] = {"\x00\x01\xff binary", "", "third\n"};
    static const size_t lens[] = {10, 0, 6};
    jmsg_t *m = jmsg_new("execute_request", "sess", "user");
    jmsg_set_content(m, json_pack("{s:s, s:b, s:[i, f, n], s:s}", "code", "print('é\\n')", "silent",
                                  0, "list", 1, 2.5, "unicode", "\xe2\x9c\x93"));
    jmsg_set_metadata(m, json_pack("{s:{s:i}}", "nested", "x", -7));
    jmsg_t *parent = jmsg_new("kernel_info_request", "sess", "user");
    jmsg_set_parent(m, parent);
    jmsg_destroy(&parent);
    for (int i = 0; i < nbuf; i++)
        zmsg_addmem(jmsg_buffers(m), bufs[i], lens[i]);

    ws_opcode_t op = WS_CONT;
    size_t len = 0;
    sg_error_t *err = NULL;
    uint8_t *out = wsmsg_encode(f, chan, m, &op, &len, &err);
    ws_opcode_t want_op = f == WSMSG_DEFAULT && nbuf == 0 ? WS_TEXT : WS_BINARY;
    ok(out && op == want_op, "%s: encoded as a %s frame", what,
       want_op == WS_TEXT ? "text" : "binary");
    jchan_t got = JCHAN_HB;
    jmsg_t *back = out ? decode(f, op, out, len, &got) : NULL;
    ok(back && got == chan && same_msg(m, back) && buffers_are(back, nbuf, bufs, lens),
       "%s: decodes to the same message", what);
    jmsg_destroy(&back);
    free(out);
    sg_error_free(&err);
    jmsg_destroy(&m);
}

static void test_round_trips(void)
{
    round_trip(WSMSG_DEFAULT, JCHAN_SHELL, 0, "default, shell, no buffers");
    round_trip(WSMSG_DEFAULT, JCHAN_CONTROL, 1, "default, control, one buffer");
    round_trip(WSMSG_DEFAULT, JCHAN_STDIN, 3, "default, stdin, three buffers (one empty)");
    round_trip(WSMSG_V1, JCHAN_SHELL, 0, "v1, shell, no buffers");
    round_trip(WSMSG_V1, JCHAN_CONTROL, 1, "v1, control, one buffer");
    round_trip(WSMSG_V1, JCHAN_STDIN, 3, "v1, stdin, three buffers (one empty)");

    /* Only what a frontend may send decodes: iopub goes out, never in. */
    jmsg_t *m = sample("{}", "{}", 0, NULL, NULL);
    for (int v1 = 0; v1 < 2; v1++) {
        wsmsg_format_t f = v1 ? WSMSG_V1 : WSMSG_DEFAULT;
        ws_opcode_t op;
        size_t len;
        sg_error_t *err = NULL;
        uint8_t *out = wsmsg_encode(f, JCHAN_IOPUB, m, &op, &len, &err);
        refused(f, op, out, len, SG_E_INVALID, "channel must be shell, control or stdin",
                v1 ? "v1: an iopub message from a frontend" : "an iopub message from a frontend");
        free(out);
        out = wsmsg_encode(f, JCHAN_COUNT, m, &op, &len, &err);
        ok(out == NULL && err && err->kind == SG_E_INVALID,
           "%s: no encoding for an unknown channel", v1 ? "v1" : "default");
        sg_error_free(&err);
    }
    jmsg_destroy(&m);
}

/* --- text and binary frames ------------------------------------------------------- */

static void test_frames(void)
{
    const char *msg = "{\"header\":" HEADER ",\"channel\":\"stdin\"}";
    jmsg_t *m = decodes(WSMSG_DEFAULT, WS_TEXT, msg, strlen(msg), JCHAN_STDIN, "m1",
                        "default: a text frame");
    jmsg_destroy(&m);
    m = decodes(WSMSG_V1, WS_TEXT, msg, strlen(msg), JCHAN_STDIN, "m1",
                "v1: a text frame is read in the default format");
    jmsg_destroy(&m);

    /* One offset: the JSON runs to the end and there are no buffers. */
    bytes_t *w = default_msg(msg, 0, NULL);
    m = decodes(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, JCHAN_STDIN, "m1",
                "default: a binary frame with one offset");
    ok(m && zmsg_size(jmsg_buffers(m)) == 0, "with no buffers");
    jmsg_destroy(&m);

    /* Each binary layout is only read on its own kind of connection. */
    w = v1_msg("shell", HEADER, "{}", "{}", "{}", 0, NULL);
    m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1", "v1: a binary frame");
    jmsg_destroy(&m);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_LIMIT, "100663296 offsets",
            "a v1 message on a default connection (its count read big-endian)");
    refused(WSMSG_V1, WS_TEXT, w->b, w->n, SG_E_INVALID, "the message is not valid JSON",
            "a v1 message in a text frame");
    w = default_msg(msg, 0, NULL);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_LIMIT, "offsets (1 to 4096 allowed)",
            "a default-format binary message on a v1 connection");
    refused(WSMSG_DEFAULT, WS_PING, msg, strlen(msg), SG_E_INVALID, "not a data frame",
            "a control frame");
}

/* --- refusals --------------------------------------------------------------------- */

static void test_offset_tables(void)
{
    static const char *const one[] = {"buf"};
    /* default format */
    bytes_t *w = default_msg("{\"header\":" HEADER "}", 1, one);
    jmsg_t *m = decodes(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1",
                        "default: the base of the offset table tests");
    jmsg_destroy(&m);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, 3, SG_E_INVALID, "3 bytes, too short for its count",
            "default: 3 bytes");
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, 0, SG_E_INVALID, "0 bytes, too short for its count",
            "default: nothing");
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, 8, SG_E_INVALID, "2 offsets need 12 bytes",
            "default: a table cut short");
    static const uint8_t zero[] = {0, 0, 0, 0, 0, 0, 0, 4};
    refused(WSMSG_DEFAULT, WS_BINARY, zero, sizeof zero, SG_E_INVALID, "0 offsets",
            "default: a count of 0");
    static const uint8_t big[] = {0, 0, 0x10, 0x01, 0, 0, 0, 4};
    refused(WSMSG_DEFAULT, WS_BINARY, big, sizeof big, SG_E_LIMIT, "4097 offsets",
            "default: a count of 4097");
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4};
    refused(WSMSG_DEFAULT, WS_BINARY, huge, sizeof huge, SG_E_LIMIT, "4294967295 offsets",
            "default: a count of 2^32 - 1");
    set_be32(w->b + 8, 11); /* buffer_0 before the JSON */
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID, "offset 1 is 11, inside the table",
            "default: an offset inside the table");
    set_be32(w->b + 4, 20); /* the JSON at 20, buffer_0 at 15 */
    set_be32(w->b + 8, 15);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID,
            "offset 1 is 15, before offset 0 (20)", "default: offsets going back");
    w = default_msg("{\"header\":" HEADER "}", 1, one);
    set_be32(w->b + 8, (uint32_t)w->n + 1);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID, "past the end",
            "default: an offset past the end");
    set_be32(w->b + 8, 0xffffffff);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID, "offset 1 is 4294967295, past",
            "default: an offset of 2^32 - 1");
    static const char *const empty[] = {""};
    w = default_msg("{\"header\":" HEADER "}", 1, empty); /* buffer_0 starts at the end */
    m = decodes(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1",
                "default: an offset at the very end");
    ok(m && zmsg_size(jmsg_buffers(m)) == 1 && zframe_size(zmsg_first(jmsg_buffers(m))) == 0,
       "default: it is an empty buffer");
    jmsg_destroy(&m);

    /* the most offsets allowed: the JSON and 4095 empty buffers */
    w = fresh();
    add_be32(w, 4096);
    uint32_t end = 4 * 4097 + (uint32_t)strlen("{\"header\":" HEADER "}");
    add_be32(w, 4 * 4097);
    for (int i = 1; i < 4096; i++)
        add_be32(w, end);
    add_str(w, "{\"header\":" HEADER "}");
    m = decodes(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1",
                "default: 4096 offsets (the most)");
    ok(m && zmsg_size(jmsg_buffers(m)) == 4095, "default: 4095 buffers");
    jmsg_destroy(&m);

    /* v1 */
    w = v1_msg("shell", HEADER, "{}", "{}", "{}", 1, one);
    m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1",
                "v1: the base of the offset table tests");
    jmsg_destroy(&m);
    refused(WSMSG_V1, WS_BINARY, w->b, 7, SG_E_INVALID, "7 bytes, too short for its count",
            "v1: 7 bytes");
    refused(WSMSG_V1, WS_BINARY, w->b, 40, SG_E_INVALID, "7 offsets need 64 bytes",
            "v1: a table cut short");
    static bytes_t saved;
    saved = *w;
    set_le64(w->b, 0);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "0 offsets", "v1: a count of 0");
    set_le64(w->b, 4097);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_LIMIT, "4097 offsets", "v1: a count of 4097");
    /* Counts for which (1 + n) * 8, the table's size, wraps around 64 bits. */
    set_le64(w->b, UINT64_C(0x2000000000000000));
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_LIMIT, "2305843009213693952 offsets",
            "v1: a count of 2^61 (the table size wraps to 8)");
    set_le64(w->b, UINT64_MAX);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_LIMIT, "18446744073709551615 offsets",
            "v1: a count of 2^64 - 1 (1 + n wraps to 0)");
    set_le64(w->b, 5);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "5 offsets (a channel and four parts",
            "v1: 5 offsets");
    *w = saved;
    set_le64(w->b + 8 * 3, 68); /* parent_header's start before the header's */
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "offset 2 is 68, before offset 1 (69)",
            "v1: offsets going back");
    *w = saved;
    set_le64(w->b + 8, 8);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "offset 0 is 8, inside the table",
            "v1: the channel inside the table");
    *w = saved;
    set_le64(w->b + 8 * 7, w->n + 1);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "offset 6 is",
            "v1: the end past the end");
    set_le64(w->b + 8 * 7, UINT64_MAX);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID,
            "offset 6 is 18446744073709551615, past the end", "v1: an offset of 2^64 - 1");
    *w = saved;
    w->n += 5; /* bytes after the last offset are not part of the message */
    m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1", "v1: trailing bytes");
    static const size_t buf_len[] = {3};
    ok(m && buffers_are(m, 1, one, buf_len), "v1: the last buffer ends at the last offset");
    jmsg_destroy(&m);

    /* the most offsets allowed: 6 for the parts and 4090 empty buffers */
    w = fresh();
    add_le64(w, 4096);
    uint64_t at = 8 * 4097;
    static const char *const p[5] = {"shell", HEADER, "{}", "{}", "{}"};
    for (int i = 0; i < 5; i++) {
        add_le64(w, at);
        at += strlen(p[i]);
    }
    for (int i = 5; i < 4096; i++)
        add_le64(w, at);
    for (int i = 0; i < 5; i++)
        add_str(w, p[i]);
    m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_SHELL, "m1", "v1: 4096 offsets (the most)");
    ok(m && zmsg_size(jmsg_buffers(m)) == 4090, "v1: 4090 buffers");
    jmsg_destroy(&m);
}

static void text_refused(wsmsg_format_t f, const char *json, const char *why, const char *what)
{
    refused(f, WS_TEXT, json, strlen(json), SG_E_INVALID, why, what);
}

static void text_decodes(const char *json, jchan_t chan, const char *what)
{
    jmsg_t *m = decodes(WSMSG_DEFAULT, WS_TEXT, json, strlen(json), chan, "m1", what);
    jmsg_destroy(&m);
}

/* A v1 message without buffers from these parts must be refused as why
 * says. */
static void v1_refused(const char *channel, const char *header, const char *parent,
                       const char *metadata, const char *content, const char *why, const char *what)
{
    bytes_t *w = v1_msg(channel, header, parent, metadata, content, 0, NULL);
    char name[128];
    snprintf(name, sizeof name, "v1: %s", what);
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, why, name);
}

static void test_json(void)
{
    /* default format */
    text_refused(WSMSG_DEFAULT, "not json at all", "the message is not valid JSON", "not JSON");
    text_refused(WSMSG_DEFAULT, "", "the message is not valid JSON", "an empty text frame");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER "}x", "not valid JSON",
                 "trailing bytes after the JSON");
    text_refused(WSMSG_DEFAULT, "[{\"header\":" HEADER "}]", "the message is not a JSON object",
                 "a JSON array");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"header\":" HEADER "}", "not valid JSON",
                 "a duplicate key");
    text_refused(WSMSG_DEFAULT,
                 "{\"header\":{\"msg_id\":\"m1\",\"msg_type\":\"t\",\"x\":\"a\\u0000b\"}}",
                 "not valid JSON", "a NUL in a string");
    text_refused(WSMSG_DEFAULT, "{\"header\":\"nope\",\"channel\":\"shell\"}",
                 "header is not a JSON object", "a header that is a string");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"parent_header\":[]}",
                 "parent_header is not a JSON object", "a parent_header that is an array");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"metadata\":0}",
                 "metadata is not a JSON object", "metadata that is a number");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"content\":\"c\"}",
                 "content is not a JSON object", "content that is a string");
    text_decodes("{\"header\":" HEADER
                 ",\"parent_header\":null,\"metadata\":null,\"content\":null}",
                 JCHAN_SHELL, "null parts are empty objects");
    text_decodes("{\"header\":" HEADER ",\"channel\":\"control\",\"buffers\":[1]}", JCHAN_CONTROL,
                 "a \"buffers\" member is ignored");

    /* v1: each part on its own */
    v1_refused("shell", HEADER, "{}", "{}", "[]", "content is not a JSON object",
               "content that is an array");
    v1_refused("shell", "\"m1\"", "{}", "{}", "{}", "header is not valid JSON",
               "a header that is a string (a part must be an object or an array)");
    v1_refused("shell", HEADER, "null", "{}", "{}", "parent_header is not valid JSON",
               "a null parent_header (only the default format allows it)");
    v1_refused("shell", HEADER, "{}", "{", "{}", "metadata is not valid JSON",
               "metadata cut short");
    v1_refused("shell", HEADER, "{}", "{}", "", "content is not valid JSON", "empty content");
    v1_refused("shell", HEADER, "{}", "{}", "{\"a\":1,\"a\":2}", "content is not valid JSON",
               "a duplicate key");
    v1_refused("shell", HEADER, "{}", "{}", "{\"a\":\"\xff\"}", "content is not valid JSON",
               "invalid UTF-8 in a part");

    /* the default format's binary layout */
    bytes_t *w = default_msg("[]", 0, NULL);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID, "the message is not a JSON object",
            "default binary: a JSON array");
    static const char *const one[] = {"buf"};
    w = default_msg("{\"header\":" HEADER, 1, one);
    refused(WSMSG_DEFAULT, WS_BINARY, w->b, w->n, SG_E_INVALID, "the message is not valid JSON",
            "default binary: the JSON ends at buffer_0");
}

static void test_channels(void)
{
    text_decodes("{\"header\":" HEADER "}", JCHAN_SHELL, "no channel: shell");
    text_decodes("{\"header\":" HEADER ",\"channel\":\"shell\"}", JCHAN_SHELL, "shell");
    text_decodes("{\"header\":" HEADER ",\"channel\":\"control\"}", JCHAN_CONTROL, "control");
    text_decodes("{\"header\":" HEADER ",\"channel\":\"stdin\"}", JCHAN_STDIN, "stdin");
    static const char *const refused_names[] = {"iopub", "hb", "Shell", "shell ", ""};
    for (size_t i = 0; i < sizeof refused_names / sizeof refused_names[0]; i++) {
        char json[128];
        snprintf(json, sizeof json, "{\"header\":" HEADER ",\"channel\":\"%s\"}", refused_names[i]);
        char what[64];
        snprintf(what, sizeof what, "the channel '%s'", refused_names[i]);
        text_refused(WSMSG_DEFAULT, json, "channel must be shell, control or stdin", what);
    }
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"channel\":\"shellshellshellshell\"}",
                 "bad channel: 20 bytes", "a 20-byte channel");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"channel\":\"0123456789abcdef\"}",
                 "bad channel: 16 bytes", "a 16-byte channel (the longest name is 15)");
    text_refused(WSMSG_DEFAULT, "{\"header\":" HEADER ",\"channel\":\"0123456789abcde\"}",
                 "channel must be shell, control or stdin", "an unknown 15-byte channel");

    bytes_t *w = v1_msg("control", HEADER, "{}", "{}", "{}", 0, NULL);
    jmsg_t *m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_CONTROL, "m1", "v1: control");
    jmsg_destroy(&m);
    w = v1_msg("stdin", HEADER, "{}", "{}", "{}", 0, NULL);
    m = decodes(WSMSG_V1, WS_BINARY, w->b, w->n, JCHAN_STDIN, "m1", "v1: stdin");
    jmsg_destroy(&m);
    static const char *const v1_names[] = {"iopub", "hb", "SHELL", "shel", "foo"};
    for (size_t i = 0; i < sizeof v1_names / sizeof v1_names[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "the channel '%s'", v1_names[i]);
        v1_refused(v1_names[i], HEADER, "{}", "{}", "{}", "channel must be shell, control or stdin",
                   what);
    }
    v1_refused("", HEADER, "{}", "{}", "{}", "bad channel: 0 bytes", "an empty channel");
    /* "shell" then a NUL and junk: a C string would read "shell"; jupyter_server
     * reads the whole name, which is no channel. */
    w = v1_msg("shellXjk", HEADER, "{}", "{}", "{}", 0, NULL);
    uint8_t *x = memmem(w->b, w->n, "shellXjk", 8);
    ok(x != NULL, "v1: the channel name is in the message");
    if (x)
        x[5] = 0;
    refused(WSMSG_V1, WS_BINARY, w->b, w->n, SG_E_INVALID, "a NUL byte in its name",
            "v1: a NUL inside the channel name");
    v1_refused("0123456789abcdef", HEADER, "{}", "{}", "{}", "bad channel: 16 bytes",
               "a 16-byte channel");
}

static void test_header(void)
{
    static const struct {
        const char *header;
        const char *what;
    } bad[] = {
        {"{\"msg_type\":\"t\"}", "no msg_id"},
        {"{\"msg_id\":\"\",\"msg_type\":\"t\"}", "an empty msg_id"},
        {"{\"msg_id\":7,\"msg_type\":\"t\"}", "a msg_id that is a number"},
        {"{\"msg_id\":\"m1\"}", "no msg_type"},
        {"{\"msg_id\":\"m1\",\"msg_type\":\"\"}", "an empty msg_type"},
        {"{\"msg_id\":\"m1\",\"msg_type\":null}", "a null msg_type"},
        {"{}", "an empty header"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[256];
        snprintf(json, sizeof json, "{\"header\":%s}", bad[i].header);
        text_refused(WSMSG_DEFAULT, json, "the header needs msg_id", bad[i].what);
        v1_refused("shell", bad[i].header, "{}", "{}", "{}", "the header needs msg_id",
                   bad[i].what);
    }
    text_refused(WSMSG_DEFAULT, "{\"channel\":\"shell\"}", "the header needs msg_id",
                 "no header at all");

    /* msg_id: at most 256 bytes (the routing table's and the timer's limit) */
    char id[WSMSG_MAX_MSG_ID + 2];
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = 0;
    char json[512];
    snprintf(json, sizeof json, "{\"header\":{\"msg_id\":\"%s\",\"msg_type\":\"t\"}}", id);
    text_refused(WSMSG_DEFAULT, json, "the header needs msg_id", "a 257-byte msg_id");
    id[WSMSG_MAX_MSG_ID] = 0;
    snprintf(json, sizeof json, "{\"header\":{\"msg_id\":\"%s\",\"msg_type\":\"t\"}}", id);
    jchan_t chan = JCHAN_HB;
    jmsg_t *m = decode(WSMSG_DEFAULT, WS_TEXT, json, strlen(json), &chan);
    ok(m && strlen(jmsg_id(m)) == WSMSG_MAX_MSG_ID, "a 256-byte msg_id is taken");
    jmsg_destroy(&m);
}

int main(void)
{
    test_golden();
    test_round_trips();
    test_frames();
    test_offset_tables();
    test_json();
    test_channels();
    test_header();
    return tap_done();
}
