/* resp: a response that is not ready when its request is handled.
 *
 * Two shapes, the same for every front end:
 *  - a stream: the body is written over time (NDJSON lines of an execution,
 *    MCP's server-sent events).  libmicrohttpd's content reader takes what
 *    was written; with nothing to send it suspends the connection, and the
 *    next write resumes it.  A keepalive text goes out after KEEPALIVE_MS of
 *    silence, so proxies and clients see the stream alive;
 *  - a wait: the request is suspended until its answer is ready
 *    (resp_ready), and its handler is called again to give it.
 *
 * The owner (the front end's per-request object) frees it, never before
 * libmicrohttpd is done with the request (resp_gone after that).
 */
#ifndef SG_RESP_H
#define SG_RESP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>

#include "common/loop.h"

#define RESP_KEEPALIVE_MS 5000

typedef struct resp resp_t;

/* wake: tells the HTTP server to run (http_server_wake) after a resume. */
resp_t *resp_new(loop_t *loop, struct MHD_Connection *conn, void (*wake)(void *), void *wake_arg);
void resp_free(resp_t **self_p);

/* A streamed body: the response to queue (the caller adds its headers,
 * queues and destroys it).  keepalive: text written after RESP_KEEPALIVE_MS
 * without a write, or NULL. */
struct MHD_Response *resp_stream(resp_t *self, const char *keepalive);
/* Appends n bytes to the body and resumes the connection. */
void resp_write(resp_t *self, const char *data, size_t n);
/* Bytes written and not yet handed to libmicrohttpd: a writer with a
 * producer it can slow down (a command's output) stops past a mark... */
size_t resp_pending(const resp_t *self);
/* ...and fn(arg) tells it, each time all that was written has gone out,
 * to go on.  From libmicrohttpd's content reader: fn must not write. */
void resp_on_drained(resp_t *self, void (*fn)(void *arg), void *arg);
/* The body is complete: the stream ends once it is sent. */
void resp_end(resp_t *self);
/* The stream is cut once what was written is sent: the connection closes
 * without the body's end, as when a server goes away. */
void resp_abort(resp_t *self);

/* Suspends the request until resp_ready(); returns what the handler returns. */
enum MHD_Result resp_wait(resp_t *self);
/* The answer is ready: the request's handler runs again. */
void resp_ready(resp_t *self);

/* libmicrohttpd finished the request (completed, or the client left):
 * nothing is resumed any more. */
void resp_set_gone(resp_t *self);
bool resp_gone(const resp_t *self);

/* Unix time ms as an ISO-8601 UTC string with milliseconds ("...T12:00:00.000Z"). */
json_t *resp_iso_time(int64_t ms);

#endif
