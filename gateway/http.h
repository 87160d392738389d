/* http: sandgate's HTTP server, libmicrohttpd driven by the daemon's zloop.
 *
 * libmicrohttpd runs in external-epoll mode: its epoll fd is one poller of the
 * loop, and the loop calls MHD_run when it is readable (and once a second for
 * connection timeouts).  No thread of its own: every request handler runs on
 * the loop thread and must not block.
 */
#ifndef SG_HTTP_H
#define SG_HTTP_H

#include <czmq.h>
#include <jansson.h>
#include <microhttpd.h>

#include "common/error.h"
#include "kernelmgr/kmgr.h"

typedef struct http_server http_server_t;

/* Starts listening on host:port and registers with loop.  NULL with *err set
 * when the address cannot be used. */
http_server_t *http_server_new(zloop_t *loop, const char *host, int port, sg_error_t **err);
void http_server_destroy(http_server_t **self_p);

/* The kernel manager the API serves (borrowed). */
void http_server_set_kmgr(http_server_t *self, kmgr_t *kmgr);

/* The port actually bound (useful when port 0 was asked for). */
int http_server_port(const http_server_t *self);

/* Queues a JSON response (body is stolen) on a connection. */
enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body);
/* Queues {"error": kind, "message": msg} with the status the kind maps to. */
enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err);

#endif
