/* ws: the WebSocket framing rules, one by one.
 *
 * Every stream here goes through feed(), which parses it whole and again in
 * chunks of 1, 2, 3, 5 and 13 bytes: all splits must deliver the same
 * messages and end with the same verdict, and a parser that refused input
 * must keep refusing it and deliver nothing more. */
#include "gateway/jupyter/ws.h"

#include <stdlib.h>

#include "tests/lib/tap.h"

/* --- what a parser delivered --------------------------------------------------- */

#define GOT_MAX 64
#define GOT_DATA 512

typedef struct {
    int n;
    ws_opcode_t op[GOT_MAX];
    size_t len[GOT_MAX];
    uint64_t hash[GOT_MAX]; /* of the whole payload */
    uint8_t data[GOT_MAX][GOT_DATA];
} got_t;

static uint64_t fnv(const uint8_t *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void collect(ws_opcode_t op, const uint8_t *data, size_t len, void *arg)
{
    got_t *g = arg;
    if (g->n < GOT_MAX) {
        g->op[g->n] = op;
        g->len[g->n] = len;
        g->hash[g->n] = fnv(data, len);
        memcpy(g->data[g->n], data, len < GOT_DATA ? len : GOT_DATA);
    }
    g->n++;
}

static bool same(const got_t *a, const got_t *b)
{
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n && i < GOT_MAX; i++)
        if (a->op[i] != b->op[i] || a->len[i] != b->len[i] || a->hash[i] != b->hash[i])
            return false;
    return true;
}

/* Message i is op with exactly these bytes. */
static bool got_is(const got_t *g, int i, ws_opcode_t op, const void *data, size_t len)
{
    return i < g->n && g->op[i] == op && g->len[i] == len && g->hash[i] == fnv(data, len);
}

/* --- client streams --------------------------------------------------------------- */

typedef struct {
    uint8_t b[1 << 18];
    size_t n;
} wire_t;

static wire_t W; /* the stream a test builds */

static const uint8_t K[4] = {0x37, 0xfa, 0x21, 0x3d};  /* the RFC's example key */
static const uint8_t K2[4] = {0x00, 0xff, 0x5a, 0xa5}; /* a zero and an all-ones byte */
static const uint8_t KEYS[3][4] = {
    {0x01, 0x02, 0x03, 0x04}, {0x80, 0x40, 0x20, 0x10}, {0xde, 0xad, 0xbe, 0xef}};

/* Appends a client frame with first byte b0 to w and returns w: masked with
 * key (unmasked when NULL), its length in the minimal encoding or in a 16 or
 * 64-bit one (enc), and only the header when payload is NULL. */
static wire_t *frame_enc(wire_t *w, int b0, const void *payload, uint64_t len, const uint8_t *key,
                         int enc)
{
    uint8_t *out = w->b + w->n;
    size_t n = 0;
    out[n++] = (uint8_t)b0;
    uint8_t m = key ? 0x80 : 0;
    if (enc == 0)
        enc = len < 126 ? 7 : len < 65536 ? 16 : 64;
    if (enc == 7) {
        out[n++] = m | (uint8_t)len;
    } else if (enc == 16) {
        out[n++] = m | 126;
        out[n++] = (uint8_t)(len >> 8);
        out[n++] = (uint8_t)len;
    } else {
        out[n++] = m | 127;
        for (int i = 0; i < 8; i++)
            out[n++] = (uint8_t)(len >> (56 - 8 * i));
    }
    if (key) {
        memcpy(out + n, key, 4);
        n += 4;
    }
    const uint8_t *p = payload;
    for (uint64_t i = 0; p && i < len; i++)
        out[n + i] = key ? p[i] ^ key[i & 3] : p[i];
    w->n += n + (p ? (size_t)len : 0);
    return w;
}

static wire_t *frame(wire_t *w, int b0, const void *payload, size_t len)
{
    return frame_enc(w, b0, payload, len, K, 0);
}

static wire_t *frame_str(wire_t *w, int b0, const char *s)
{
    return frame(w, b0, s, strlen(s));
}

static wire_t *fresh(void)
{
    W.n = 0;
    return &W;
}

/* --- feeding ---------------------------------------------------------------------- */

/* Feeds in chunks of chunk bytes (0: all at once).  Returns the verdict, or
 * -1 when a refusing parser accepts more input or delivers after its error. */
static int feed_chunked(size_t max, const uint8_t *buf, size_t len, size_t chunk, got_t *g)
{
    ws_parser_t *p = ws_parser_new(max);
    int rc = 0;
    if (chunk == 0)
        chunk = len ? len : 1;
    for (size_t i = 0; i < len && rc == 0; i += chunk)
        rc = ws_parser_feed(p, buf + i, len - i < chunk ? len - i : chunk, collect, g);
    if (rc == 0)
        rc = ws_parser_feed(p, buf, 0, collect, g); /* an empty feed changes nothing */
    if (rc) {
        int n = g->n;
        static const uint8_t ping[] = {0x89, 0x80, 0, 0, 0, 0};
        if (ws_parser_feed(p, ping, sizeof ping, collect, g) != rc || g->n != n)
            rc = -1;
    }
    ws_parser_destroy(&p);
    ws_parser_destroy(&p); /* safe twice */
    return rc;
}

/* The verdict for w fed whole (its messages in *g), or -2 when another split
 * gives other messages or another verdict. */
static int feed(size_t max, const wire_t *w, got_t *g)
{
    static const size_t chunks[] = {1, 2, 3, 5, 13};
    *g = (got_t){0};
    int rc = feed_chunked(max, w->b, w->n, 0, g);
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        static got_t other;
        other = (got_t){0};
        int rc2 = feed_chunked(max, w->b, w->n, chunks[i], &other);
        if (rc2 != rc || !same(g, &other)) {
            diag("fed in %zu-byte chunks: verdict %d, %d messages; fed whole: %d, %d", chunks[i],
                 rc2, other.n, rc, g->n);
            return -2;
        }
    }
    return rc;
}

/* bad (a stream of frames) between two good messages must give code: the
 * first message is delivered, nothing after. */
static void expect_error(const wire_t *bad, size_t max, int code, const char *what)
{
    static wire_t w;
    static got_t g;
    w.n = 0;
    frame_str(&w, 0x81, "before");
    memcpy(w.b + w.n, bad->b, bad->n);
    w.n += bad->n;
    frame_str(&w, 0x81, "after");
    int rc = feed(max, &w, &g);
    if (!ok(rc == code && g.n == 1 && got_is(&g, 0, WS_TEXT, "before", 6), "%s -> %d", what, code))
        diag("got %d with %d messages", rc, g.n);
}

/* --- the tests -------------------------------------------------------------------- */

static void test_accept_key(void)
{
    /* The first from RFC 6455 1.3, the third from MDN; the others computed
     * with python3: base64.b64encode(hashlib.sha1(key + GUID).digest()). */
    static const char *vectors[][2] = {
        {"dGhlIHNhbXBsZSBub25jZQ==", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="},
        {"AQIDBAUGBwgJCgsMDQ4PEA==", "C/0nmHhBztSRGR1CwL6Tf4ZjwpY="},
        {"x3JJHMbDL1EzLkh9GBhXDw==", "HSmrc0sMlYUkAGmm5OPpG2HaGWk="},
        {"/////////////////////w==", "XXpj4jYzLM2yUE0C7TIgMwTQh2g="},
    };
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        char acc[29];
        memset(acc, '?', sizeof acc);
        int rc = ws_accept_key(vectors[i][0], acc);
        is_int(rc, 0, "key %s is accepted", vectors[i][0]);
        is_str(rc == 0 ? acc : NULL, vectors[i][1], "its Sec-WebSocket-Accept");
    }
    static const char *bad[] = {
        "",
        "c2hvcnQ=",                  /* 5 bytes */
        "dGhlIHNhbXBsZSBub25jZQ",    /* no padding */
        "dGhlIHNhbXBsZSBub25jZQ===", /* 25 characters */
        "AAAAAAAAAAAAAAAAAAAAAAAA",  /* 18 bytes */
        "!!!!!!!!!!!!!!!!!!!!!!!!",  /* not base64 */
        "dGhlIHNhbXBsZSBub25jZQ= ",  /* a space for padding */
        "dGhlIHNhbXBsZS-ub25jZQ==",  /* the URL-safe alphabet */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char acc[29];
        is_int(ws_accept_key(bad[i], acc), -1, "key '%s' is refused", bad[i]);
    }
}

static void test_lengths_and_masking(void)
{
    got_t *g = &(got_t){0};
    /* RFC 6455 5.7: a masked "Hello", the key's four bytes all in use. */
    static const uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                    0x7f, 0x9f, 0x4d, 0x51, 0x58};
    wire_t *w = fresh();
    memcpy(w->b, hello, sizeof hello);
    w->n = sizeof hello;
    ok(feed(100, w, g) == 0 && g->n == 1 && got_is(g, 0, WS_TEXT, "Hello", 5),
       "the RFC's masked \"Hello\" is unmasked");

    static uint8_t big[70000];
    for (size_t j = 0; j < sizeof big; j++)
        big[j] = (uint8_t)(j * 7 + j / 251);
    static const size_t sizes[] = {0, 1, 4, 5, 125, 126, 127, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        w = fresh();
        frame_enc(w, 0x82, big, sizes[i], K2, 0);
        ok(feed(1 << 20, w, g) == 0 && g->n == 1 && got_is(g, 0, WS_BINARY, big, sizes[i]),
           "a %zu-byte binary frame (%s length) is unmasked", sizes[i],
           sizes[i] < 126     ? "7-bit"
           : sizes[i] < 65536 ? "16-bit"
                              : "64-bit");
    }
    w = fresh();
    frame_enc(w, 0x81, "12345", 5, K, 16);
    frame_enc(w, 0x81, "67890", 5, K, 64);
    frame_enc(w, 0x89, "ping", 4, K, 64);
    ok(feed(100, w, g) == 0 && g->n == 3 && got_is(g, 0, WS_TEXT, "12345", 5) &&
           got_is(g, 1, WS_TEXT, "67890", 5) && got_is(g, 2, WS_PING, "ping", 4),
       "non-minimal 16 and 64-bit lengths are accepted");

    /* A big message, then small ones, then a big one again: the buffer is
     * given back and grown again. */
    w = fresh();
    frame_enc(w, 0x82, big, 70000, K, 0);
    frame_str(w, 0x81, "small");
    frame_enc(w, 0x02, big, 30000, KEYS[0], 0);
    frame_enc(w, 0x80, big + 30000, 40000, KEYS[1], 0);
    ok(feed(1 << 20, w, g) == 0 && g->n == 3 && got_is(g, 0, WS_BINARY, big, 70000) &&
           got_is(g, 1, WS_TEXT, "small", 5) && got_is(g, 2, WS_BINARY, big, 70000),
       "big, small, big (fragmented) messages in a row");
}

static void test_fragmentation(void)
{
    got_t *g = &(got_t){0};
    /* Text with 2, 3 and 4-byte characters, cut into 40 fragments of 0 to 12
     * bytes (so characters are split), each with its own key, a ping after
     * every 4th and a pong after every 9th (none after the last). */
    char text[400] = "";
    while (strlen(text) < 300)
        strcat(text, "Grüße — ☃ 𝄞 ok; ");
    size_t len = strlen(text), at = 0;
    wire_t *w = fresh();
    int pings = 0, pongs = 0;
    for (int i = 0; i < 40; i++) {
        size_t n = i == 39 ? len - at : (size_t)(i * 5 % 13);
        if (at + n > len)
            n = len - at;
        frame_enc(w, (i == 0 ? 0x01 : 0x00) | (i == 39 ? 0x80 : 0), text + at, n, KEYS[i % 3], 0);
        at += n;
        if (i % 4 == 1) {
            char ping[16];
            snprintf(ping, sizeof ping, "p%d", pings++);
            frame_str(w, 0x89, ping);
        }
        if (i % 9 == 8) {
            frame(w, 0x8a, NULL, 0);
            pongs++;
        }
    }
    int rc = feed(1000, w, g);
    bool order = rc == 0 && g->n == pings + pongs + 1;
    for (int i = 0, p = 0; order && i < g->n - 1; i++) {
        if (g->op[i] == WS_PING) {
            char want[16];
            snprintf(want, sizeof want, "p%d", p++);
            order = got_is(g, i, WS_PING, want, strlen(want));
        } else {
            order = g->op[i] == WS_PONG && g->len[i] == 0;
        }
    }
    ok(order && got_is(g, g->n - 1, WS_TEXT, text, len),
       "40 fragments with %d pings and %d pongs between them: the controls at once, then the text",
       pings, pongs);

    w = fresh();
    frame_str(w, 0x02, "ab");
    frame(w, 0x88, "\x03\xe9", 2);
    frame_str(w, 0x80, "cd");
    ok(feed(100, w, g) == 0 && g->n == 2 && got_is(g, 0, WS_CLOSE, "\x03\xe9", 2) &&
           got_is(g, 1, WS_BINARY, "abcd", 4),
       "a close between fragments is delivered at once");

    w = fresh();
    frame(w, 0x01, NULL, 0);
    frame(w, 0x00, NULL, 0);
    frame(w, 0x80, NULL, 0);
    frame_str(w, 0x01, "x");
    frame_str(w, 0x80, "y");
    ok(feed(100, w, g) == 0 && g->n == 2 && got_is(g, 0, WS_TEXT, "", 0) &&
           got_is(g, 1, WS_TEXT, "xy", 2),
       "empty fragments, then a second fragmented message");

    w = fresh();
    frame_str(w, 0x01, "\xc3");
    frame_str(w, 0x80, "\xa9");
    ok(feed(100, w, g) == 0 && got_is(g, 0, WS_TEXT, "é", 2),
       "a character split across fragments is fine");
}

static void test_limits(void)
{
    got_t *g = &(got_t){0};
    static uint8_t zeros[200];
    wire_t *w = fresh();
    frame(w, 0x82, zeros, 100);
    ok(feed(100, w, g) == 0 && g->n == 1 && g->len[0] == 100, "a message of exactly max_message");
    expect_error(frame(fresh(), 0x82, zeros, 101), 100, 1009, "max_message + 1");
    expect_error(frame(fresh(), 0x82, NULL, 101), 100, 1009,
                 "max_message + 1, from the header alone");
    w = fresh();
    frame(w, 0x01, zeros, 60);
    frame(w, 0x80, zeros, 40);
    ok(feed(100, w, g) == 0 && g->n == 1 && got_is(g, 0, WS_TEXT, zeros, 100),
       "fragments adding up to exactly max_message");
    w = fresh();
    frame(w, 0x02, zeros, 60);
    frame(w, 0x80, NULL, 41);
    expect_error(w, 100, 1009, "fragments adding up to max_message + 1, from the header");
    expect_error(frame_enc(fresh(), 0x82, NULL, 1ull << 40, K, 0), 1 << 20, 1009,
                 "a 1 TiB frame, from its header");
    w = fresh();
    frame(w, 0x81, NULL, 0);
    ok(feed(0, w, g) == 0 && g->n == 1, "max_message 0: an empty message is fine");
    is_int(feed(0, frame_str(fresh(), 0x81, "x"), g), 1009, "max_message 0: one byte -> 1009");
    w = fresh();
    frame(w, 0x89, zeros, 125);
    ok(feed(10, w, g) == 0 && g->n == 1 && g->len[0] == 125,
       "control frames are bounded by 125 bytes, not max_message");

    /* The claimed length is not allocated up front: with a huge limit, a
     * header claiming 512 GiB and a few bytes of payload cost a few bytes. */
    if (sizeof(size_t) >= 8) {
        w = fresh();
        frame_enc(w, 0x82, NULL, 1ull << 39, K, 0);
        memset(w->b + w->n, 0, 1000);
        w->n += 1000;
        ws_parser_t *p = ws_parser_new((size_t)1 << 40);
        is_int(ws_parser_feed(p, w->b, w->n, collect, g), 0,
               "a 512 GiB frame's first bytes under a 1 TiB limit");
        ws_parser_destroy(&p);
    }
}

static void test_protocol_errors(void)
{
    expect_error(frame_enc(fresh(), 0x81, "x", 1, NULL, 0), 100, 1002, "an unmasked frame");
    expect_error(frame_str(fresh(), 0xc1, "x"), 100, 1002, "RSV1 set");
    expect_error(frame_str(fresh(), 0xa1, "x"), 100, 1002, "RSV2 set");
    expect_error(frame_str(fresh(), 0x91, "x"), 100, 1002, "RSV3 set");
    for (int op = 3; op < 16; op++) {
        if (op == 8 || op == 9 || op == 10)
            continue;
        char what[32];
        snprintf(what, sizeof what, "opcode %d", op);
        expect_error(frame_str(fresh(), 0x80 | op, "x"), 100, 1002, what);
    }
    expect_error(frame_str(fresh(), 0x09, "x"), 100, 1002, "a fragmented ping");
    expect_error(frame_str(fresh(), 0x0a, "x"), 100, 1002, "a fragmented pong");
    expect_error(frame(fresh(), 0x08, "\x03\xe8", 2), 100, 1002, "a fragmented close");
    static uint8_t zeros[200];
    expect_error(frame(fresh(), 0x89, zeros, 126), 1000, 1002, "a 126-byte ping");
    expect_error(frame(fresh(), 0x8a, zeros, 126), 1000, 1002, "a 126-byte pong");
    expect_error(frame(fresh(), 0x88, zeros, 126), 1000, 1002, "a 126-byte close");
    expect_error(frame_enc(fresh(), 0x89, zeros, 200, K, 64), 1000, 1002,
                 "a 200-byte ping with a 64-bit length");
    got_t *g = &(got_t){0};
    ok(feed(100, frame_str(fresh(), 0x80, "x"), g) == 1002 && g->n == 0,
       "a continuation first -> 1002");
    /* expect_error puts a finished message first */
    expect_error(frame_str(fresh(), 0x80, "x"), 100, 1002, "a continuation after a message");
    wire_t *w;
    w = fresh();
    frame_str(w, 0x01, "a");
    frame_str(w, 0x81, "b");
    expect_error(w, 100, 1002, "a text frame inside a fragmented message");
    w = fresh();
    frame_str(w, 0x01, "a");
    frame_str(w, 0x02, "b");
    expect_error(w, 100, 1002, "a binary fragment inside a fragmented message");
    w = fresh();
    w->b[w->n++] = 0x82;
    w->b[w->n++] = 0xff;
    memset(w->b + w->n, 0x80, 8);
    w->n += 8;
    memcpy(w->b + w->n, K, 4);
    w->n += 4;
    expect_error(w, SIZE_MAX, 1002, "a 64-bit length with the top bit set (not 1009)");

    /* What the first two bytes decide is refused from them. */
    static const uint8_t two[][2] = {
        {0x81, 0x01}, {0xc1, 0x81}, {0x83, 0x81}, {0x09, 0x81}, {0x80, 0x81}};
    static const char *two_what[] = {"unmasked", "RSV1", "opcode 3", "a fragmented ping",
                                     "a continuation first"};
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++) {
        is_int(feed_chunked(100, two[i], 2, 0, g), 1002, "%s: refused from 2 bytes", two_what[i]);
    }
}

static void test_close(void)
{
    got_t *g = &(got_t){0};
    wire_t *w = fresh();
    frame(w, 0x88, NULL, 0);
    ok(feed(100, w, g) == 0 && got_is(g, 0, WS_CLOSE, "", 0), "an empty close is delivered");
    is_int(ws_close_code(g->data[0], g->len[0]), WS_CLOSE_NO_STATUS, "its code reads as 1005");
    w = fresh();
    frame_str(w, 0x88,
              "\x03\xe8"
              "bye ☃");
    ok(feed(100, w, g) == 0 && got_is(g, 0, WS_CLOSE,
                                      "\x03\xe8"
                                      "bye ☃",
                                      9),
       "a close with a code and a UTF-8 reason is delivered as sent");
    is_int(ws_close_code(g->data[0], g->len[0]), 1000, "its code reads as 1000");
    expect_error(frame(fresh(), 0x88, "\x03", 1), 100, 1002, "a 1-byte close payload");
    expect_error(frame(fresh(), 0x88, "\x03\xe8\xff", 3), 100, 1007,
                 "a close reason that is not UTF-8");
    expect_error(frame(fresh(), 0x88, "\x03\xe8\xed\xa0\x80", 5), 100, 1007,
                 "a close reason with a surrogate");

    static const unsigned valid[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                                     1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        uint8_t c[2] = {(uint8_t)(valid[i] >> 8), (uint8_t)valid[i]};
        w = fresh();
        frame(w, 0x88, c, 2);
        ok(feed(100, w, g) == 0 && g->n == 1 && ws_close_code(g->data[0], g->len[0]) == valid[i],
           "close code %u is accepted", valid[i]);
    }
    static const unsigned invalid[] = {0,    999,  1004, 1005, 1006, 1015,
                                       1016, 1100, 2000, 2999, 5000, 65535};
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        uint8_t c[2] = {(uint8_t)(invalid[i] >> 8), (uint8_t)invalid[i]};
        char what[32];
        snprintf(what, sizeof what, "close code %u", invalid[i]);
        expect_error(frame(fresh(), 0x88, c, 2), 100, 1002, what);
    }
}

static void test_utf8(void)
{
    got_t *g = &(got_t){0};
    static const struct {
        const char *s;
        bool valid;
        const char *what;
    } u[] = {
        {"", true, "nothing"},
        {"plain", true, "ASCII"},
        {"\xc2\x80", true, "U+0080"},
        {"\xdf\xbf", true, "U+07FF"},
        {"\xe0\xa0\x80", true, "U+0800"},
        {"\xed\x9f\xbf", true, "U+D7FF"},
        {"\xee\x80\x80", true, "U+E000"},
        {"\xef\xbf\xbf", true, "U+FFFF"},
        {"\xf0\x90\x80\x80", true, "U+10000"},
        {"\xf4\x8f\xbf\xbf", true, "U+10FFFF"},
        {"é€😀 and ASCII", true, "2, 3 and 4-byte characters"},
        {"\xc0\xaf", false, "overlong 2-byte (C0)"},
        {"\xc1\xbf", false, "overlong 2-byte (C1)"},
        {"\xe0\x80\xaf", false, "overlong 3-byte"},
        {"\xe0\x9f\xbf", false, "overlong 3-byte U+07FF"},
        {"\xf0\x80\x80\xaf", false, "overlong 4-byte"},
        {"\xf0\x8f\xbf\xbf", false, "overlong 4-byte U+FFFF"},
        {"\xed\xa0\x80", false, "a surrogate (U+D800)"},
        {"\xed\xbf\xbf", false, "a surrogate (U+DFFF)"},
        {"\xed\xa0\xbd\xed\xb8\x80", false, "a surrogate pair"},
        {"\xf4\x90\x80\x80", false, "U+110000"},
        {"\xf5\x80\x80\x80", false, "lead byte F5"},
        {"\xf8\x88\x80\x80\x80", false, "a 5-byte form"},
        {"\x80", false, "a lone continuation byte"},
        {"a\xbf", false, "a stray continuation byte"},
        {"\xc3\x28", false, "a lead byte without its continuation"},
        {"\xe2\x28\xa1", false, "a 3-byte form broken in the middle"},
        {"\xc3", false, "a 2-byte character cut at the end"},
        {"ab\xe2\x82", false, "a 3-byte character cut at the end"},
        {"\xf0\x9f\x98", false, "a 4-byte character cut at the end"},
        {"\xfe", false, "byte FE"},
        {"\xff", false, "byte FF"},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        size_t len = strlen(u[i].s);
        ok(ws_utf8_valid((const uint8_t *)u[i].s, len) == u[i].valid, "UTF-8: %s is %s", u[i].what,
           u[i].valid ? "valid" : "invalid");
        wire_t *w = fresh();
        frame(w, 0x81, u[i].s, len);
        int rc = feed(100, w, g);
        ok(rc == (u[i].valid ? 0 : 1007) && g->n == (u[i].valid ? 1 : 0),
           "a text frame with %s -> %d", u[i].what, u[i].valid ? 0 : 1007);
        /* one fragment per byte */
        w = fresh();
        for (size_t j = 0; j < len || j == 0; j++)
            frame(w, (j == 0 ? 0x01 : 0x00) | (j + 1 >= len ? 0x80 : 0), u[i].s + j, len ? 1 : 0);
        rc = feed(100, w, g);
        ok(rc == (u[i].valid ? 0 : 1007) && (!u[i].valid || got_is(g, 0, WS_TEXT, u[i].s, len)),
           "%s one byte per fragment -> %d", u[i].what, u[i].valid ? 0 : 1007);
    }

    wire_t *w = fresh();
    frame_str(w, 0x01, "ab\xe2\x82");
    ok(feed(100, w, g) == 0 && g->n == 0, "a first fragment ending inside a character waits");
    frame(w, 0x80, NULL, 0);
    is_int(feed(100, w, g), 1007, "... and its message ending there is refused");
    expect_error(frame_str(fresh(), 0x01, "ok \xff"), 100, 1007,
                 "bad text in a first fragment, before the message ends");
    w = fresh();
    frame_enc(w, 0x81, NULL, 1000, K, 0);
    w->b[w->n++] = 'a' ^ K[0];
    w->b[w->n++] = 0xc0 ^ K[1];
    is_int(feed(2000, w, g), 1007, "bad text within a frame, before the frame ends");
    w = fresh();
    frame(w, 0x82, "\xff\xfe", 2);
    ok(feed(100, w, g) == 0 && got_is(g, 0, WS_BINARY, "\xff\xfe", 2),
       "binary frames are not checked for UTF-8");
}

static void test_server_side(void)
{
    static const struct {
        ws_opcode_t op;
        uint64_t len;
        size_t n;
        uint8_t want[10];
    } h[] = {
        {WS_TEXT, 0, 2, {0x81, 0}},
        {WS_TEXT, 125, 2, {0x81, 125}},
        {WS_BINARY, 126, 4, {0x82, 126, 0, 126}},
        {WS_BINARY, 300, 4, {0x82, 126, 1, 44}},
        {WS_BINARY, 65535, 4, {0x82, 126, 0xff, 0xff}},
        {WS_BINARY, 65536, 10, {0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
        {WS_BINARY, 1ull << 32, 10, {0x82, 127, 0, 0, 0, 1, 0, 0, 0, 0}},
        {WS_CLOSE, 2, 2, {0x88, 2}},
        {WS_PING, 0, 2, {0x89, 0}},
        {WS_PONG, 5, 2, {0x8a, 5}},
    };
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) {
        uint8_t out[10];
        size_t n = ws_frame_header(out, h[i].op, h[i].len);
        ok(n == h[i].n && memcmp(out, h[i].want, n) == 0, "header: opcode %d, %llu bytes", h[i].op,
           (unsigned long long)h[i].len);
    }
    /* The parser reads our headers back (with the mask bit and a zero key). */
    static uint8_t payload[70000];
    static const size_t sizes[] = {0, 125, 126, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        wire_t *w = fresh();
        w->n = ws_frame_header(w->b, WS_BINARY, sizes[i]);
        w->b[1] |= 0x80;
        memset(w->b + w->n, 0, 4);
        w->n += 4;
        memcpy(w->b + w->n, payload, sizes[i]);
        w->n += sizes[i];
        got_t *g = &(got_t){0};
        ok(feed(1 << 20, w, g) == 0 && got_is(g, 0, WS_BINARY, payload, sizes[i]),
           "a %zu-byte header reads back", sizes[i]);
    }

    uint8_t cp[125];
    size_t cl = ws_close_payload(cp, 1009, "too big");
    ok(cl == 9 && memcmp(cp, "\x03\xf1too big", 9) == 0, "a close payload: code then reason");
    ok(ws_close_payload(cp, 1000, NULL) == 2 && cp[0] == 0x03 && cp[1] == 0xe8,
       "a close payload without a reason");
    char r[300];
    memset(r, 'x', sizeof r);
    r[123] = 0;
    ok(ws_close_payload(cp, 1000, r) == 125, "a 123-byte reason fits exactly");
    r[123] = 'x';
    r[124] = 0;
    ok(ws_close_payload(cp, 1000, r) == 125, "a 124-byte reason is cut to 123");
    memset(r, 'x', sizeof r);
    strcpy(r + 122, "é and more");
    cl = ws_close_payload(cp, 1000, r);
    ok(cl == 124 && ws_utf8_valid(cp + 2, cl - 2), "a 2-byte character at the cut is left out");
    memset(r, 'x', sizeof r);
    strcpy(r + 121, "😀 and more");
    cl = ws_close_payload(cp, 1000, r);
    ok(cl == 123 && ws_utf8_valid(cp + 2, cl - 2), "a 4-byte character at the cut is left out");
    cl = ws_close_payload(cp, WS_CLOSE_GOING_AWAY, "bye ☃");
    wire_t *w = fresh();
    frame(w, 0x88, cp, cl);
    got_t *g = &(got_t){0};
    ok(feed(100, w, g) == 0 && got_is(g, 0, WS_CLOSE, cp, cl) &&
           ws_close_code(g->data[0], g->len[0]) == 1001,
       "a close payload we make is one the parser accepts");

    ws_parser_t *p = NULL;
    ws_parser_destroy(&p);
    ws_parser_destroy(NULL);
    ok(1, "destroying a NULL parser is a no-op");
}

int main(void)
{
    test_accept_key();
    test_lengths_and_masking();
    test_fragmentation();
    test_limits();
    test_protocol_errors();
    test_close();
    test_utf8();
    test_server_side();
    return tap_done();
}
