/* jsession: the signed wire form of Jupyter messages (what jupyter_client
 * calls a Session).
 *
 * Wire form: [identities..., "<IDS|MSG>", hmac, header, parent_header,
 * metadata, content, buffers...], where hmac is the lowercase hex
 * HMAC-SHA256 of the four JSON frames under the connection key.
 *
 * Decoding checks, in order and before any JSON is parsed: the delimiter,
 * the frame count, the size limit, the signature (constant-time compare) and
 * that the signature was not seen before (replay).  Only then are the JSON
 * frames parsed and the header checked.  Every rejection is counted.
 */
#ifndef SG_JSESSION_H
#define SG_JSESSION_H

#include <stdint.h>

#include "common/error.h"
#include "proto/jmsg.h"

#define JSESSION_DELIM "<IDS|MSG>"
/* Default bound on the bytes of one decoded message (all frames). */
#define JSESSION_DEFAULT_MAX_BYTES (64u << 20)
/* Default number of recent signatures remembered to refuse replays
 * (jupyter_client keeps 2^16). */
#define JSESSION_DEFAULT_REPLAY_WINDOW 65536u

typedef struct jsession jsession_t;

typedef struct {
    uint64_t accepted;
    uint64_t malformed;     /* framing or JSON errors */
    uint64_t unsigned_msgs; /* empty signature frame */
    uint64_t bad_signature;
    uint64_t replayed;
    uint64_t oversized;
    uint64_t replay_bytes; /* memory of the replay window's signatures */
} jsession_stats_t;

/* A session signing with key (copied).  An empty key is refused: unsigned
 * messages would let anyone who reaches a socket drive the kernel. */
jsession_t *jsession_new(const void *key, size_t key_len, sg_error_t **err);
void jsession_destroy(jsession_t **self_p);

/* The session id put in headers of messages made by jsession_msg. */
const char *jsession_id(const jsession_t *self);
void jsession_set_username(jsession_t *self, const char *username);
void jsession_set_max_bytes(jsession_t *self, size_t max_bytes);
/* Changes the replay window; forgets the signatures seen so far. */
void jsession_set_replay_window(jsession_t *self, size_t entries);

/* A new message from this session (its session id and username); content is
 * stolen and may be NULL for {}. */
jmsg_t *jsession_msg(const jsession_t *self, const char *msg_type, json_t *content);

/* The wire form of msg, signed.  Returns a new zmsg owned by the caller;
 * msg is not changed. */
zmsg_t *jsession_encode(const jsession_t *self, const jmsg_t *msg);

/* Decodes and verifies a wire message.  Takes ownership of *frames_p (and
 * nulls it) whatever the outcome.  Returns a new message or NULL with *err
 * set (SG_E_AUTH for signature problems, SG_E_LIMIT for size, SG_E_INVALID
 * for the rest). */
jmsg_t *jsession_decode(jsession_t *self, zmsg_t **frames_p, sg_error_t **err);

/* Lowercase hex HMAC-SHA256 of n frames (n is 4 on the wire). */
void jsession_sign(const jsession_t *self, const void *const parts[], const size_t lens[], size_t n,
                   char hex[65]);

void jsession_stats(const jsession_t *self, jsession_stats_t *out);

#endif
