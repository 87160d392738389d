/* http: sandgate's HTTP server, libmicrohttpd driven by the daemon's loop.
 *
 * libmicrohttpd runs in external-epoll mode: its epoll fd is watched by the
 * loop, and MHD_run runs from a loop hook, before the wait, when that fd was
 * readable, a connection was resumed, or one of libmicrohttpd's timeouts
 * came.  No thread of its own: every handler runs on the loop thread and
 * must not block; long responses suspend their connection.
 *
 * This layer reads the request body (bounded), checks the token, and hands
 * complete requests to the API (api.h).
 */
#ifndef SG_HTTP_H
#define SG_HTTP_H

#include "common/loop.h"
#include <jansson.h>
#include <microhttpd.h>

#include "common/error.h"
#include "kernelmgr/kmgr.h"

typedef struct {
    const char *host;
    int port;
    const char *token;       /* NULL: no authentication (loopback only) */
    size_t max_body;         /* bytes */
    unsigned max_conns;      /* connections at once */
    unsigned max_conns_ip;   /* per client address; 0: max_conns / 4 */
    unsigned conn_timeout_s; /* idle connection timeout */
} http_config_t;

typedef struct http_server http_server_t;

void http_config_defaults(http_config_t *cfg);

/* Starts listening and registers with loop.  NULL with *err set when the
 * address cannot be used. */
http_server_t *http_server_new(loop_t *loop, const http_config_t *cfg, sg_error_t **err);
void http_server_destroy(http_server_t **self_p);

/* The API requests are handed to (borrowed); set before the loop runs. */
struct api;
void http_server_set_api(http_server_t *self, struct api *api);

/* The Jupyter Server API (jupyter.h), served under /api and /kernelspecs. */
struct jupyter;
void http_server_set_jupyter(http_server_t *self, struct jupyter *jupyter);

/* The MCP endpoint (mcp.h), served at /mcp. */
struct mcp;
void http_server_set_mcp(http_server_t *self, struct mcp *mcp);

/* Runs libmicrohttpd before the loop next waits: after a suspended
 * connection is resumed or an upgraded one handed back.  arg is the
 * http_server_t. */
void http_server_wake(void *arg);

/* The port actually bound (useful when port 0 was asked for). */
int http_server_port(const http_server_t *self);

/* Queues a JSON response (body is stolen) on a connection. */
enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body);
/* Queues {"error": kind, "message": msg} with the status the kind maps to. */
enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err);
/* Same from a kind and a message. */
enum MHD_Result http_reply_errorf(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));

#endif
