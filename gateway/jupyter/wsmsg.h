/* wsmsg: a Jupyter message in a WebSocket message, both wire formats
 * jupyter_server speaks (its docs/source/developers/websocket-protocols.rst).
 * Pure: bytes in, a message out, and back; no I/O, no connection state.
 *
 * Default format: a text frame holding one JSON object {header,
 * parent_header, metadata, content, channel, ...}; with buffers, a binary
 * frame: a big-endian u32 count n, n u32 offsets (the JSON's, then each
 * buffer's start), the JSON, the buffers.  Frontends may send either.
 *
 * v1.kernel.websocket.jupyter.org: binary frames only: a little-endian u64
 * count n, n u64 offsets (the channel name's start, then each of header,
 * parent_header, metadata and content, then each buffer's, then the end),
 * and the parts they delimit.  A v1 connection still takes text frames in
 * the default format, as sandgate always has.
 *
 * Decoding takes bytes from anyone who reaches a kernel's WebSocket: every
 * count and offset is checked before it is used (at least one, at most
 * WSMSG_MAX_OFFSETS, inside the message, past the table, never going back),
 * JSON is parsed strictly (no duplicate keys, no NUL in strings), and a
 * refusal is an error value, never an abort.
 *
 * Ownership: wsmsg_decode returns a new message and wsmsg_encode a new
 * buffer (free()), both the caller's; their inputs are borrowed and not
 * changed.  Errors follow common/error.h: NULL and a new *err the caller
 * frees.
 */
#ifndef SG_WSMSG_H
#define SG_WSMSG_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "gateway/jupyter/ws.h"
#include "proto/proto.h"

/* Offsets in one binary message, parts and buffers together. */
#define WSMSG_MAX_OFFSETS 4096
/* Longest header.msg_id taken from a frontend (replies are routed by it). */
#define WSMSG_MAX_MSG_ID 256

typedef enum {
    WSMSG_DEFAULT, /* jupyter_server's default (no subprotocol) */
    WSMSG_V1,      /* v1.kernel.websocket.jupyter.org */
} wsmsg_format_t;

/* Decodes a frontend's WebSocket message: op WS_TEXT (the default format's
 * JSON, in either format) or WS_BINARY (the format's binary layout).  The
 * channel must be shell (the default when a text message names none),
 * control or stdin; the header needs a non-empty msg_id of at most
 * WSMSG_MAX_MSG_ID bytes and a non-empty msg_type; null or missing parts
 * of a default-format message are empty objects.  Returns a new message
 * (with its buffers) and sets *chan; NULL with *err set (SG_E_LIMIT for too
 * many offsets, SG_E_INVALID for the rest) and *chan untouched when the
 * bytes are not such a message. */
jmsg_t *wsmsg_decode(wsmsg_format_t format, ws_opcode_t op, const uint8_t *data, size_t len,
                     jchan_t *chan, sg_error_t **err);

/* Encodes msg for a frontend as coming from chan (any channel but an
 * unknown one).  Returns a new buffer of *len bytes, the payload of one
 * frame of type *op: v1 always binary; the default format text without
 * buffers, binary with them.  NULL with *err set when chan has no name
 * (SG_E_INVALID) or a buffer would start past the default format's 32-bit
 * offsets (SG_E_LIMIT). */
uint8_t *wsmsg_encode(wsmsg_format_t format, jchan_t chan, const jmsg_t *msg, ws_opcode_t *op,
                      size_t *len, sg_error_t **err);

#endif
