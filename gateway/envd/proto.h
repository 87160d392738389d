/* proto: the wire format of E2B's in-sandbox daemon (envd), as the E2B
 * SDKs speak it, pure (bytes and JSON in, bytes and JSON out; no I/O).
 *
 * Both SDKs use Connect RPC with its JSON codec (the JS SDK's connect-web
 * transport with useBinaryFormat false, the Python SDK's own JSON codec), so
 * no protobuf decoder is needed: a message is its proto3 JSON form.
 *   unary:     POST /pkg.Service/Method, Content-Type application/json,
 *              the request message as the body; the answer 200 with the
 *              response message, or an error status with
 *              {"code": "not_found", "message": ...}.
 *   streaming: Content-Type application/connect+json; the request body and
 *              the answer are envelopes: 1 byte of flags, 4 of big-endian
 *              length, the message.  The answer ends with an envelope of
 *              flags 0x02 holding {} or {"error": {"code", "message"}}.
 */
#ifndef SG_ENVD_PROTO_H
#define SG_ENVD_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ENVD_FLAG_END 0x02
#define ENVD_ENVELOPE 5
/* The largest message a streaming request may carry. */
#define ENVD_MAX_MESSAGE (1u << 20)

/* The one message of a streaming request's body (len bytes): its JSON
 * object (the caller's), or NULL with SG_E_INVALID saying what is wrong
 * (no envelope, a length that is not the body's, flags set, not a JSON
 * object). */
json_t *envd_unwrap(const char *body, size_t len, sg_error_t **err);

/* An envelope of flags around the n bytes of msg; *out (the caller's,
 * n + ENVD_ENVELOPE bytes) and its length. */
void envd_frame(uint8_t flags, const char *msg, size_t n, char **out, size_t *outlen);

/* The Connect code for an error: sbfs's stable names (sbfs_error_code)
 * first, else the error's kind: "not_found", "already_exists",
 * "permission_denied", "invalid_argument", "failed_precondition",
 * "resource_exhausted", "unavailable", "deadline_exceeded",
 * "unauthenticated", "unimplemented", "internal". */
const char *envd_code(const char *sbfs_code, sg_errkind_t kind);
/* The HTTP status Connect gives a code (500 for one it does not know). */
unsigned envd_code_status(const char *code);
/* The HTTP status of envd's plain /files answer for an error. */
unsigned envd_files_status(const char *sbfs_code, sg_errkind_t kind);

/* {"code": code, "message": msg} (new reference). */
json_t *envd_error_json(const char *code, const char *msg);

/* An sbfs entry (sbfs.h) as filesystem.EntryInfo's JSON (new reference). */
json_t *envd_entry(const json_t *entry);

/* path made absolute as envd makes it: a relative path is the user's home's
 * (/home/user); "" is the home itself.  The caller's. */
char *envd_abspath(const char *path);

/* A string field of a message, by its JSON name or its proto name (the
 * parser takes both); NULL when absent or not a string. */
const char *envd_str(const json_t *msg, const char *json_name, const char *proto_name);

/* Standard base64 (what proto3 JSON gives bytes) of n bytes; the caller's. */
char *envd_b64(const void *data, size_t n);
/* Decodes proto3 JSON bytes (standard or URL-safe base64, padding
 * optional): *out (the caller's) and its length, or -1. */
int envd_unb64(const char *s, unsigned char **out, size_t *outlen);

#endif
