#include "gateway/jupyter/ws.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* --- SHA-1 (FIPS 180-4), for the handshake only -------------------------------- */

static uint32_t rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)
            f = (b & c) | (~b & d), k = 0x5A827999;
        else if (i < 40)
            f = b ^ c ^ d, k = 0x6ED9EBA1;
        else if (i < 60)
            f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
        else
            f = b ^ c ^ d, k = 0xCA62C1D6;
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

static void sha1(const uint8_t *data, size_t len, uint8_t out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t full = len / 64 * 64;
    for (size_t i = 0; i < full; i += 64)
        sha1_block(h, data + i);
    uint8_t tail[128] = {0};
    size_t rest = len - full;
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t n = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[n - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < n; i += 64)
        sha1_block(h, tail + i);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h[i] >> (24 - 8 * j));
}

int ws_accept_key(const char *client_key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    uint8_t raw[16];
    size_t raw_len = 0;
    const char *end = NULL;
    if (strlen(client_key) != 24 ||
        sodium_base642bin(raw, sizeof raw, client_key, 24, NULL, &raw_len, &end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        raw_len != 16 || *end != 0)
        return -1;
    uint8_t buf[24 + sizeof guid - 1], digest[20];
    memcpy(buf, client_key, 24);
    memcpy(buf + 24, guid, sizeof guid - 1);
    sha1(buf, sizeof buf, digest);
    sodium_bin2base64(out, 29, digest, sizeof digest, sodium_base64_VARIANT_ORIGINAL);
    return 0;
}

/* --- UTF-8 ----------------------------------------------------------------------- */

/* Length of the valid sequence at s (1-4), 0 if invalid, -1 if s ends inside
 * a sequence that could still be valid. */
static int utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    int n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        if (c == 0xF4)
            hi = 0x8F; /* > U+10FFFF */
    } else
        return 0;
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len)
            return -1;
        uint8_t b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF))
            return 0;
    }
    return n;
}

bool ws_utf8_valid(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        int n = utf8_seq(s + i, len - i);
        if (n <= 0)
            return false;
        i += (size_t)n;
    }
    return true;
}

/* --- the parser ------------------------------------------------------------------ */

/* A buffer kept between messages up to this size; a larger one (a rare big
 * message) is given back once the message is delivered. */
#define WS_KEEP_BUFFER (64 * 1024)

struct ws_parser {
    size_t max_message;
    int error; /* once set, the parser refuses input */
    /* the frame being read */
    uint8_t head[14]; /* 2 + 8 (length) + 4 (mask) */
    size_t head_len, head_need;
    ws_opcode_t op;
    bool fin;
    uint8_t mask[4];
    uint64_t payload_len, payload_got;
    /* the message being assembled from data frames */
    bool in_message;
    ws_opcode_t msg_op;
    uint8_t *msg;
    size_t msg_len, msg_cap;
    size_t utf8_ok; /* a text message's bytes known to be valid UTF-8 */
    /* a control frame's payload */
    uint8_t ctl[125];
};

ws_parser_t *ws_parser_new(size_t max_message)
{
    ws_parser_t *self = xzalloc(sizeof *self);
    self->max_message = max_message;
    self->head_need = 2;
    return self;
}

void ws_parser_destroy(ws_parser_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    free((*self_p)->msg);
    free(*self_p);
    *self_p = NULL;
}

static bool is_control(ws_opcode_t op)
{
    return op >= 8;
}

/* The first two bytes are in: everything they decide is checked here, so a
 * bad frame fails without waiting for the rest of its header.  0 or a close
 * code. */
static int head_start(ws_parser_t *p)
{
    const uint8_t *h = p->head;
    p->fin = h[0] & 0x80;
    p->op = (ws_opcode_t)(h[0] & 0x0F);
    if (h[0] & 0x70)
        return WS_CLOSE_PROTOCOL; /* RSV bits: no extension is ever negotiated */
    if (!(h[1] & 0x80))
        return WS_CLOSE_PROTOCOL; /* client frames must be masked */
    switch (p->op) {
    case WS_CLOSE:
    case WS_PING:
    case WS_PONG:
        if (!p->fin)
            return WS_CLOSE_PROTOCOL;
        break;
    case WS_CONT:
        if (!p->in_message)
            return WS_CLOSE_PROTOCOL;
        break;
    case WS_TEXT:
    case WS_BINARY:
        if (p->in_message)
            return WS_CLOSE_PROTOCOL;
        p->in_message = true;
        p->msg_op = p->op;
        p->msg_len = p->utf8_ok = 0;
        break;
    default: return WS_CLOSE_PROTOCOL;
    }
    uint8_t n = h[1] & 0x7F;
    p->head_need = 2 + (n == 126 ? 2 : n == 127 ? 8 : 0) + 4;
    return 0;
}

/* The whole header is in: check the length.  Non-minimal encodings are
 * accepted (RFC 6455 only asks senders for the minimal one). */
static int head_done(ws_parser_t *p)
{
    const uint8_t *h = p->head;
    uint64_t n = h[1] & 0x7F;
    if (n == 126) {
        n = (uint64_t)h[2] << 8 | h[3];
    } else if (n == 127) {
        n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | h[2 + i];
        if (n >> 63)
            return WS_CLOSE_PROTOCOL;
    }
    memcpy(p->mask, h + p->head_need - 4, 4);
    p->payload_len = n;
    p->payload_got = 0;
    if (is_control(p->op))
        return n > sizeof p->ctl ? WS_CLOSE_PROTOCOL : 0;
    /* Decided now, before any of the payload is buffered.  Nothing is
     * allocated for the claimed length either: the buffer grows as bytes
     * arrive. */
    return n > p->max_message - p->msg_len ? WS_CLOSE_TOO_BIG : 0;
}

/* Room for need bytes of message (need <= max_message). */
static void reserve(ws_parser_t *p, size_t need)
{
    if (need <= p->msg_cap)
        return;
    size_t cap = p->msg_cap < 128                  ? 256
                 : p->msg_cap > p->max_message / 2 ? p->max_message
                                                   : 2 * p->msg_cap;
    if (cap < need)
        cap = need;
    p->msg = xrealloc(p->msg, cap);
    p->msg_cap = cap;
}

/* Checks a text message's new bytes.  Until its last byte has arrived
 * (complete false) it may end inside a character that later bytes finish. */
static bool text_valid_so_far(ws_parser_t *p, bool complete)
{
    while (p->utf8_ok < p->msg_len) {
        int n = utf8_seq(p->msg + p->utf8_ok, p->msg_len - p->utf8_ok);
        if (n == 0 || (n < 0 && complete))
            return false;
        if (n < 0)
            break;
        p->utf8_ok += (size_t)n;
    }
    return true;
}

static bool valid_close_code(unsigned c)
{
    /* RFC 6455 7.4 and the IANA registry: 1004-1006 and 1015 are never sent,
     * 3000-4999 belong to libraries and applications. */
    return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

unsigned ws_close_code(const uint8_t *payload, size_t len)
{
    return len >= 2 ? (unsigned)(payload[0] << 8 | payload[1]) : WS_CLOSE_NO_STATUS;
}

/* The frame's payload is complete: deliver what it ends.  0 or a close code. */
static int frame_done(ws_parser_t *p, ws_message_fn *fn, void *arg)
{
    if (is_control(p->op)) {
        size_t n = (size_t)p->payload_len;
        if (p->op == WS_CLOSE) {
            if (n == 1 || (n >= 2 && !valid_close_code(ws_close_code(p->ctl, n))))
                return WS_CLOSE_PROTOCOL;
            if (n > 2 && !ws_utf8_valid(p->ctl + 2, n - 2))
                return WS_CLOSE_INVALID_DATA;
        }
        fn(p->op, p->ctl, n, arg);
        return 0;
    }
    if (!p->fin)
        return 0;
    if (p->msg_op == WS_TEXT && !text_valid_so_far(p, true))
        return WS_CLOSE_INVALID_DATA;
    p->in_message = false;
    fn(p->msg_op, p->msg ? p->msg : (const uint8_t *)"", p->msg_len, arg);
    p->msg_len = 0;
    if (p->msg_cap > WS_KEEP_BUFFER) {
        free(p->msg);
        p->msg = NULL;
        p->msg_cap = 0;
    }
    return 0;
}

/* Unmasks up to the rest of the current frame's payload from data.  Returns
 * how many bytes it took, or sets *err. */
static size_t take_payload(ws_parser_t *p, const uint8_t *data, size_t len, int *err)
{
    uint64_t want = p->payload_len - p->payload_got;
    size_t take = want < len ? (size_t)want : len;
    if (take == 0)
        return 0;
    uint8_t *dst;
    if (is_control(p->op)) {
        dst = p->ctl + p->payload_got;
    } else {
        reserve(p, p->msg_len + take);
        dst = p->msg + p->msg_len;
    }
    for (size_t j = 0; j < take; j++)
        dst[j] = data[j] ^ p->mask[(p->payload_got + j) & 3];
    p->payload_got += take;
    if (!is_control(p->op)) {
        p->msg_len += take;
        /* Fail fast: bad text is refused as it arrives, not once the whole
         * message has been buffered. */
        if (p->msg_op == WS_TEXT && !text_valid_so_far(p, false))
            *err = WS_CLOSE_INVALID_DATA;
    }
    return take;
}

int ws_parser_feed(ws_parser_t *p, const uint8_t *data, size_t len, ws_message_fn *fn, void *arg)
{
    if (p->error)
        return p->error;
    size_t i = 0;
    for (;;) {
        if (p->head_len < p->head_need) {
            size_t take = p->head_need - p->head_len;
            if (take > len - i)
                take = len - i;
            memcpy(p->head + p->head_len, data + i, take);
            p->head_len += take;
            i += take;
            if (p->head_len < p->head_need)
                return 0;
            int err = p->head_need == 2 ? head_start(p) : head_done(p);
            if (err)
                return p->error = err;
            if (p->head_len < p->head_need) /* head_start: now the length's size is known */
                continue;
        }
        int err = 0;
        i += take_payload(p, data + i, len - i, &err);
        if (err)
            return p->error = err;
        if (p->payload_got < p->payload_len)
            return 0;
        err = frame_done(p, fn, arg);
        if (err)
            return p->error = err;
        p->head_len = 0;
        p->head_need = 2;
        if (i == len)
            return 0;
    }
}

size_t ws_frame_header(uint8_t out[10], ws_opcode_t op, uint64_t len)
{
    out[0] = (uint8_t)(0x80 | op);
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    if (len < 65536) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++)
        out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}

size_t ws_close_payload(uint8_t out[125], unsigned code, const char *reason)
{
    out[0] = (uint8_t)(code >> 8);
    out[1] = (uint8_t)code;
    size_t n = reason ? strlen(reason) : 0;
    if (n > 123)
        n = 123;
    while (n > 0 && ((uint8_t)reason[n] & 0xC0) == 0x80) /* not mid-character */
        n--;
    if (n)
        memcpy(out + 2, reason, n);
    return 2 + n;
}
