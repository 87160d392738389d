/* http: sandgate's HTTP server, libmicrohttpd driven by the daemon's loop.
 *
 * libmicrohttpd runs in external-epoll mode: its epoll fd is watched by the
 * loop, and MHD_run runs from a loop hook, before the wait, when that fd was
 * readable, a connection was resumed, or one of libmicrohttpd's timeouts
 * came.  No thread of its own: every handler runs on the loop thread and
 * must not block; long responses suspend their connection.
 *
 * This layer reads the request body (bounded), checks the token, and hands
 * each request to the route its URL matches.  It knows no front end by
 * name: each one registers its paths with a table of functions,
 * http_handler_t, and main.c has them do so.
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

/* What a front end does with the requests of its routes.  ctx is the
 * pointer given to http_route_add (the front end's object, borrowed).
 * Every function runs on the loop thread and must not block. */
typedef struct {
    /* One complete request: its token checked (unless the route is public)
     * and its body, NUL-terminated, no larger than max_body.  *state starts
     * NULL; a handler that suspends the connection keeps what it needs there
     * and is called again, with body "" and len 0 and the same *state, each
     * time the connection is resumed. */
    enum MHD_Result (*handle)(void *ctx, struct MHD_Connection *conn, const char *method,
                              const char *url, const char *body, size_t len, void **state);
    /* The request has ended, answered or broken off (completed: the whole
     * response went out); called once, and only when *state is not NULL.
     * May be NULL for a handler that never keeps state. */
    void (*done)(void *ctx, void *state, bool completed);
    /* Optional (all NULL, or none): request bodies taken as they arrive
     * instead of in memory, so max_body does not apply (uploads).  sink_open
     * runs when the headers of an authorised request have come, and returns
     * the handler's sink, or NULL to have the body read into memory and
     * handed to handle as usual.  sink_write gets each chunk; sink_finish,
     * after the last one, answers, frees the sink and sets *sink to NULL (so
     * errors found on the way are answered once the body has been read) —
     * or, to answer later, suspends the connection and leaves *sink, and is
     * called again when the connection is resumed; sink_abort frees one
     * whose request broke off. */
    void *(*sink_open)(void *ctx, const char *method, const char *url);
    void (*sink_write)(void *ctx, void *sink, const char *data, size_t len);
    enum MHD_Result (*sink_finish)(void *ctx, struct MHD_Connection *conn, void **sink);
    void (*sink_abort)(void *ctx, void *sink);
} http_handler_t;

/* Route flags. */
enum {
    HTTP_ROUTE_PREFIX = 1, /* every path under the pattern, which ends in '/' */
    HTTP_ROUTE_PUBLIC = 2, /* no token needed (a health check for probes) */
};

/* Routes requests whose path is pattern (or, with HTTP_ROUTE_PREFIX, starts
 * with pattern) to h (borrowed: a static table) with ctx.  The path is the
 * URL without its query string.  Routes are tried in the order they were
 * registered, and the first that matches owns the request for its whole
 * life: its handle is called again when the connection resumes, its done
 * when the request ends.  A route that an earlier one covers (the same
 * exact path, or anything under an earlier prefix) could never match and is
 * refused, as is a pattern that does not start with '/': register specific
 * routes first.  So a fallback is the prefix "/", registered last, and
 * there can be one at most.  A request that no route takes is answered 404
 * once its token is checked.  Register before the loop runs. */
int http_route_add(http_server_t *self, const char *pattern, unsigned flags,
                   const http_handler_t *h, void *ctx, sg_error_t **err);

/* Runs libmicrohttpd before the loop next waits: front ends call it after
 * they resume a suspended connection or hand back an upgraded one.  arg is
 * the http_server_t. */
void http_server_wake(void *arg);

/* The port actually bound (useful when port 0 was asked for). */
int http_server_port(const http_server_t *self);

/* Queues a JSON response (body is stolen) on a connection. */
/* MHD_queue_response, with the headers every response carries
 * (X-Sandgate-Replica). */
enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r);
enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body);
/* Queues {"error": kind, "message": msg} with the status the kind maps to. */
enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err);
/* Same from a kind and a message. */
enum MHD_Result http_reply_errorf(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));

#endif
