/* jmsg: one Jupyter message (messaging spec v5.3).
 *
 * A message is a header, a parent header, metadata and content (all JSON
 * objects), optional binary buffers, and the ZeroMQ routing identities it
 * arrived with (ROUTER sockets) or must be sent to.  jmsg knows nothing about
 * signatures or sockets; jsession encodes and decodes the wire form.
 *
 * Ownership: accessors return borrowed references, valid until the message is
 * changed or destroyed.  Setters whose argument is json_t * steal it.
 */
#ifndef SG_JMSG_H
#define SG_JMSG_H

#include <czmq.h>
#include <jansson.h>

#define JMSG_PROTOCOL_VERSION "5.3"

typedef struct jmsg jmsg_t;

/* A new message with a fresh header: random msg_id, date = now, version 5.3.
 * Content, metadata and parent header start as empty objects. */
jmsg_t *jmsg_new(const char *msg_type, const char *session, const char *username);
/* A message from its parts, all stolen; each must be a JSON object (the
 * caller checks: this asserts).  Identities and buffers start empty. */
jmsg_t *jmsg_from_parts(json_t *header, json_t *parent, json_t *metadata, json_t *content);
/* Destroys *self_p and sets it to NULL; safe on NULL and twice. */
void jmsg_destroy(jmsg_t **self_p);

json_t *jmsg_header(const jmsg_t *self);
json_t *jmsg_parent(const jmsg_t *self);
json_t *jmsg_metadata(const jmsg_t *self);
json_t *jmsg_content(const jmsg_t *self);
/* header.msg_type, header.msg_id; "" if absent (never NULL). */
const char *jmsg_type(const jmsg_t *self);
const char *jmsg_id(const jmsg_t *self);
/* parent_header.msg_id, or "" when the message has no parent. */
const char *jmsg_parent_id(const jmsg_t *self);
/* A string field of content, or NULL when absent or not a string. */
const char *jmsg_content_str(const jmsg_t *self, const char *key);

void jmsg_set_content(jmsg_t *self, json_t *content);
void jmsg_set_metadata(jmsg_t *self, json_t *metadata);
/* Makes this a reply to (or output of) parent: copies its header into
 * parent_header and its routing identities into ours. */
void jmsg_set_parent(jmsg_t *self, const jmsg_t *parent);

/* Routing identities and binary buffers, as frames; borrowed, never NULL.
 * Add to them with zmsg_append/zmsg_addmem. */
zmsg_t *jmsg_identities(const jmsg_t *self);
zmsg_t *jmsg_buffers(const jmsg_t *self);

/* Writes a random UUID (version 4, 36 chars + NUL) to out. */
void jmsg_uuid(char out[37]);
/* Writes the current UTC time as ISO-8601 with microseconds
 * ("2026-11-22T05:42:14.123456Z") to out. */
void jmsg_now(char out[32]);

#endif
