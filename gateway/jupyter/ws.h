/* ws: RFC 6455 framing, server side.  Pure: bytes in, messages out; no I/O.
 *
 * The parser takes client bytes in any split, unmasks them, reassembles
 * fragmented messages, and checks every rule a server must (masking, RSV
 * bits, opcodes, control frame limits, fragmentation order, UTF-8 of text and
 * close reasons, the size of a message before its payload is buffered).  The
 * first violation ends the parser with the close code to send.  Splitting the
 * same bytes differently never changes what is delivered or the verdict.
 */
#ifndef SG_WS_H
#define SG_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    WS_CONT = 0,
    WS_TEXT = 1,
    WS_BINARY = 2,
    WS_CLOSE = 8,
    WS_PING = 9,
    WS_PONG = 10
} ws_opcode_t;

enum {
    WS_CLOSE_NORMAL = 1000,
    WS_CLOSE_GOING_AWAY = 1001,
    WS_CLOSE_PROTOCOL = 1002,
    WS_CLOSE_UNSUPPORTED = 1003,
    WS_CLOSE_NO_STATUS = 1005, /* never sent: "the close frame had no code" */
    WS_CLOSE_INVALID_DATA = 1007,
    WS_CLOSE_POLICY = 1008,
    WS_CLOSE_TOO_BIG = 1009,
    WS_CLOSE_INTERNAL = 1011,
};

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key:
 * base64(SHA-1(key + the RFC's GUID)).  -1 when the key is not the base64 of
 * 16 bytes. */
int ws_accept_key(const char *client_key, char out[29]);

typedef struct ws_parser ws_parser_t;

/* max_message: bytes of one whole message after reassembly. */
ws_parser_t *ws_parser_new(size_t max_message);
void ws_parser_destroy(ws_parser_t **self_p);

/* A complete data message (reassembled, unmasked) or a control frame with
 * its payload, borrowed for the call.  Control frames may come between the
 * fragments of a message.  A close frame's payload is already checked: empty,
 * or a valid code then a UTF-8 reason (ws_close_code reads the code). */
typedef void(ws_message_fn)(ws_opcode_t op, const uint8_t *data, size_t len, void *arg);

/* Feeds bytes as they arrive; fn may be called several times.  Returns 0, or
 * the close code to send before dropping the connection, after which the
 * parser delivers nothing and refuses all input with the same code:
 * 1002 a protocol error (unmasked frame, RSV bits, unknown opcode, fragmented
 * or > 125-byte control frame, fragments out of order, a 64-bit length with
 * the top bit set, a 1-byte close payload or an invalid close code),
 * 1007 text or a close reason that is not UTF-8 (refused as soon as a byte
 * shows it), 1009 a message over max_message (decided from a frame's header,
 * before its payload is buffered). */
int ws_parser_feed(ws_parser_t *self, const uint8_t *data, size_t len, ws_message_fn *fn,
                   void *arg);

/* A server frame's header (FIN set, unmasked) for len payload bytes: 2, 4 or
 * 10 bytes written to out; returns how many. */
size_t ws_frame_header(uint8_t out[10], ws_opcode_t op, uint64_t len);

/* A close frame's payload: the code and as much of reason (UTF-8, may be
 * NULL) as fits in 125 bytes, cut on a character boundary.  Returns its
 * length. */
size_t ws_close_payload(uint8_t out[125], unsigned code, const char *reason);

/* The code in a close frame's payload; WS_CLOSE_NO_STATUS when it has none.
 * The reason, if any, is the payload after the first two bytes. */
unsigned ws_close_code(const uint8_t *payload, size_t len);

/* Strict UTF-8: no overlong forms, surrogates or code points over U+10FFFF. */
bool ws_utf8_valid(const uint8_t *s, size_t len);

#endif
