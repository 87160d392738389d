/* ws: the WebSocket framing rules, one by one. */
#include "gateway/ws.h"

#include <stdlib.h>

#include "tests/tap.h"

typedef struct {
    int n;
    ws_opcode_t op[16];
    size_t len[16];
    uint8_t data[16][256];
} got_t;

static void collect(ws_opcode_t op, const uint8_t *data, size_t len, void *arg)
{
    got_t *g = arg;
    if (g->n < 16) {
        g->op[g->n] = op;
        g->len[g->n] = len;
        memcpy(g->data[g->n], data, len < 256 ? len : 256);
    }
    g->n++;
}

/* A client frame: masked with key, or unmasked when key is NULL. */
static size_t cframe(uint8_t *out, int b0, const void *payload, uint64_t len, const uint8_t *key)
{
    size_t n = 0;
    out[n++] = (uint8_t)b0;
    uint8_t m = key ? 0x80 : 0;
    if (len < 126)
        out[n++] = m | (uint8_t)len;
    else if (len < 65536) {
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
    for (uint64_t i = 0; payload && i < len; i++)
        out[n + i] = key ? p[i] ^ key[i & 3] : p[i];
    return n + (payload ? (size_t)len : 0);
}

static const uint8_t K[4] = {0x37, 0xfa, 0x21, 0x3d};

static int feed_all(size_t max, const uint8_t *buf, size_t len, got_t *g, bool bytewise)
{
    ws_parser_t *p = ws_parser_new(max);
    int rc = 0;
    if (bytewise) {
        for (size_t i = 0; i < len && rc == 0; i++)
            rc = ws_parser_feed(p, buf + i, 1, collect, g);
    } else {
        rc = ws_parser_feed(p, buf, len, collect, g);
    }
    int again = ws_parser_feed(p, (const uint8_t *)"\x81\x80", 2, collect, g);
    if (rc && again != rc)
        rc = -1; /* an ended parser must keep refusing */
    ws_parser_destroy(&p);
    return rc;
}

static void expect_error(const uint8_t *buf, size_t len, size_t max, int code, const char *what)
{
    got_t g = {0};
    int rc = feed_all(max, buf, len, &g, false);
    is_int(rc, code, "%s -> %d", what, code);
    got_t g2 = {0};
    int rc2 = feed_all(max, buf, len, &g2, true);
    is_int(rc2, code, "%s -> %d (fed byte by byte)", what, code);
}

int main(void)
{
    char acc[29];
    is_int(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", acc), 0, "the RFC's example key");
    is_str(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "its accept value (RFC 6455 1.3)");
    /* python3: base64(sha1(b"AQIDBAUGBwgJCgsMDQ4PEA==" + GUID)) */
    is_int(ws_accept_key("AQIDBAUGBwgJCgsMDQ4PEA==", acc), 0, "another key");
    is_str(acc, "C/0nmHhBztSRGR1CwL6Tf4ZjwpY=", "its accept value");
    is_int(ws_accept_key("c2hvcnQ=", acc), -1, "a key that is not 16 bytes is refused");
    is_int(ws_accept_key("!!!!!!!!!!!!!!!!!!!!!!!!", acc), -1, "a key that is not base64");
    is_int(ws_accept_key("", acc), -1, "an empty key");

    /* masked text, all four key bytes, each length encoding */
    static uint8_t buf[1 << 18], big[70000];
    size_t sizes[] = {0, 5, 125, 126, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t j = 0; j < sizes[i]; j++)
            big[j] = (uint8_t)('a' + j % 26);
        size_t n = cframe(buf, 0x82, big, sizes[i], K);
        got_t g = {0};
        int rc = feed_all(1 << 20, buf, n, &g, sizes[i] < 200);
        ok(rc == 0 && g.n == 1 && g.op[0] == WS_BINARY && g.len[0] == sizes[i] &&
               memcmp(g.data[0], big, sizes[i] < 256 ? sizes[i] : 256) == 0,
           "a %zu-byte binary frame is unmasked and delivered", sizes[i]);
    }

    /* fragmentation with a ping in the middle */
    size_t n = 0;
    n += cframe(buf + n, 0x01, "he", 2, K);
    n += cframe(buf + n, 0x89, "ping!", 5, K);
    n += cframe(buf + n, 0x00, "ll", 2, K);
    n += cframe(buf + n, 0x80, "o", 1, K);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        got_t g = {0};
        int rc = feed_all(100, buf, n, &g, bytewise);
        ok(rc == 0 && g.n == 2 && g.op[0] == WS_PING && g.len[0] == 5 && g.op[1] == WS_TEXT &&
               g.len[1] == 5 && memcmp(g.data[1], "hello", 5) == 0,
           "fragments reassemble around a ping%s", bytewise ? " (byte by byte)" : "");
    }
    /* a character split across fragments is fine */
    n = cframe(buf, 0x01, "\xc3", 1, K);
    n += cframe(buf + n, 0x80, "\xa9", 1, K);
    got_t g = {0};
    ok(feed_all(100, buf, n, &g, false) == 0 && g.n == 1 && g.len[0] == 2,
       "a UTF-8 character split across fragments");
    /* close, pong, empty frames */
    n = cframe(buf, 0x88,
               "\x03\xe8"
               "bye",
               5, K);
    g = (got_t){0};
    ok(feed_all(100, buf, n, &g, false) == 0 && g.n == 1 && g.op[0] == WS_CLOSE && g.len[0] == 5,
       "a close frame with code 1000 and a reason");
    n = cframe(buf, 0x88, NULL, 0, K);
    n += cframe(buf + n, 0x8a, NULL, 0, K);
    n += cframe(buf + n, 0x81, NULL, 0, K);
    g = (got_t){0};
    ok(feed_all(100, buf, n, &g, true) == 0 && g.n == 3 && g.op[0] == WS_CLOSE &&
           g.op[1] == WS_PONG && g.op[2] == WS_TEXT && g.len[2] == 0,
       "empty close, pong and text frames");

    /* size limits */
    n = cframe(buf, 0x82, big, 100, K);
    g = (got_t){0};
    is_int(feed_all(100, buf, n, &g, false), 0, "a message of exactly max_message");
    expect_error(buf, cframe(buf, 0x82, big, 101, K), 100, 1009, "max_message + 1");
    n = cframe(buf, 0x02, big, 60, K);
    n += cframe(buf + n, 0x80, big, 41, K);
    expect_error(buf, n, 100, 1009, "fragments over max_message");
    n = cframe(buf, 0x82, NULL, 1ull << 40, K);
    g = (got_t){0};
    is_int(feed_all(1 << 20, buf, n, &g, false), 1009,
           "a 1 TiB frame is refused from its header alone");
    buf[1] = 0xff;
    memset(buf + 2, 0x80, 8);
    expect_error(buf, 14, 1 << 20, 1002, "a 64-bit length with the top bit set");

    /* protocol errors */
    expect_error(buf, cframe(buf, 0x81, "x", 1, NULL), 100, 1002, "an unmasked frame");
    expect_error(buf, cframe(buf, 0xc1, "x", 1, K), 100, 1002, "RSV1 set");
    expect_error(buf, cframe(buf, 0xa1, "x", 1, K), 100, 1002, "RSV2 set");
    expect_error(buf, cframe(buf, 0x83, "x", 1, K), 100, 1002, "opcode 3");
    expect_error(buf, cframe(buf, 0x8b, "x", 1, K), 100, 1002, "opcode 11");
    expect_error(buf, cframe(buf, 0x09, "x", 1, K), 100, 1002, "a fragmented ping");
    expect_error(buf, cframe(buf, 0x89, big, 126, K), 1000, 1002, "a 126-byte ping");
    expect_error(buf, cframe(buf, 0x80, "x", 1, K), 100, 1002, "a continuation first");
    n = cframe(buf, 0x01, "a", 1, K);
    n += cframe(buf + n, 0x81, "b", 1, K);
    expect_error(buf, n, 100, 1002, "a new message inside a fragmented one");
    expect_error(buf, cframe(buf, 0x88, "\x03", 1, K), 100, 1002, "a 1-byte close payload");
    expect_error(buf, cframe(buf, 0x88, "\x03\xed", 2, K), 100, 1002, "close code 1005");
    expect_error(buf, cframe(buf, 0x88, "\x00\x10", 2, K), 100, 1002, "close code 16");
    expect_error(buf, cframe(buf, 0x88, "\x03\xe8\xff", 3, K), 100, 1007,
                 "a close reason that is not UTF-8");
    n = cframe(buf, 0x81, "ok", 2, K);
    n += cframe(buf + n, 0x81, "x", 1, NULL);
    g = (got_t){0};
    int rc = feed_all(100, buf, n, &g, false);
    ok(rc == 1002 && g.n == 1, "messages before an error are delivered, none after");

    /* UTF-8 */
    struct {
        const char *s;
        bool valid;
        const char *what;
    } u[] = {
        {"plain", true, "ASCII"},
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", true, "2, 3 and 4-byte characters"},
        {"\xf4\x8f\xbf\xbf", true, "U+10FFFF"},
        {"\xc0\xaf", false, "overlong 2-byte"},
        {"\xe0\x80\xaf", false, "overlong 3-byte"},
        {"\xf0\x80\x80\xaf", false, "overlong 4-byte"},
        {"\xed\xa0\x80", false, "a surrogate (U+D800)"},
        {"\xf4\x90\x80\x80", false, "beyond U+10FFFF"},
        {"\xf5\x80\x80\x80", false, "lead byte F5"},
        {"\x80", false, "a lone continuation byte"},
        {"ab\xe2\x82", false, "a character cut at the end"},
        {"\xff", false, "byte FF"},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        ok(ws_utf8_valid((const uint8_t *)u[i].s, strlen(u[i].s)) == u[i].valid, "UTF-8: %s",
           u[i].what);
        n = cframe(buf, 0x81, u[i].s, strlen(u[i].s), K);
        g = (got_t){0};
        is_int(feed_all(100, buf, n, &g, false), u[i].valid ? 0 : 1007, "a text frame with %s",
               u[i].what);
    }
    n = cframe(buf, 0x82, "\xff\xfe", 2, K);
    g = (got_t){0};
    is_int(feed_all(100, buf, n, &g, false), 0, "binary frames are not checked for UTF-8");

    /* server side */
    uint8_t h[10];
    ok(ws_frame_header(h, WS_TEXT, 5) == 2 && h[0] == 0x81 && h[1] == 5, "a short text header");
    ok(ws_frame_header(h, WS_BINARY, 300) == 4 && h[0] == 0x82 && h[1] == 126 && h[2] == 1 &&
           h[3] == 44,
       "a 16-bit length header");
    ok(ws_frame_header(h, WS_BINARY, 1ull << 32) == 10 && h[1] == 127 && h[5] == 1 && h[9] == 0,
       "a 64-bit length header");
    uint8_t cp[125];
    size_t cl = ws_close_payload(cp, 1009, "too big");
    ok(cl == 9 && cp[0] == 0x03 && cp[1] == 0xf1 && memcmp(cp + 2, "too big", 7) == 0,
       "a close payload: code then reason");
    char longr[300];
    memset(longr, 'x', sizeof longr);
    strcpy(longr + 122, "\xc3\xa9 and more");
    cl = ws_close_payload(cp, 1000, longr);
    ok(cl <= 125 && ws_utf8_valid(cp + 2, cl - 2), "a long reason is cut on a character");
    return tap_done();
}
