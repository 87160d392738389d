/* api: sandgate's REST API, wire-compatible with the E2B code interpreter.
 *
 *   POST   /execute                 run code; NDJSON stream (or one JSON
 *                                   document with Accept: application/json)
 *   POST   /contexts                create a context (a session: kernel +
 *   GET    /contexts                workspace)
 *   DELETE /contexts/{id}
 *   POST   /contexts/{id}/restart
 *   GET    /contexts/{id}/files[/{path}]   a file, or a directory's listing
 *   PUT    /contexts/{id}/files/{path}     upload (streamed to disk)
 *   DELETE /contexts/{id}/files/{path}
 *   GET    /health, GET /metrics
 *
 * See docs/api.md for the wire format and the errors.
 */
#ifndef SG_API_H
#define SG_API_H

#include <microhttpd.h>

#include "kernelmgr/kmgr.h"

typedef struct api api_t;

typedef struct {
    int default_timeout_s; /* per execution when the request gives none */
    int max_timeout_s;     /* the most a request may ask for */
    size_t max_output;     /* output bytes kept per execution */
    int max_queue;         /* executions waiting per context */
    size_t max_upload;     /* bytes per uploaded file */
    const char *state_dir; /* contexts are recorded in STATE/contexts; NULL: not kept */
} api_config_t;

void api_config_defaults(api_config_t *cfg);
/* Called after a suspended connection is resumed, so the HTTP server runs
 * soon (libmicrohttpd does not wake an external event loop by itself). */
typedef void(api_wake_fn)(void *arg);
api_t *api_new(loop_t *loop, kmgr_t *kmgr, const api_config_t *cfg);
void api_destroy(api_t **self_p);
void api_set_waker(api_t *self, api_wake_fn *fn, void *arg);

/* One complete request (body read, token checked).  req_cls is the
 * connection's slot for per-request state: api_request_done() is called
 * with it when the request ends, normally or not. */
enum MHD_Result api_handle(api_t *self, struct MHD_Connection *conn, const char *method,
                           const char *url, const char *body, size_t len, void **req_state);
void api_request_done(api_t *self, void *req_state, bool completed);

/* Request bodies the API takes as they arrive instead of in memory (file
 * uploads).  api_sink_open() returns NULL when url is not such a route;
 * errors found on the way are kept and answered by api_sink_finish(), which
 * also frees the sink.  api_sink_abort() frees one whose request broke off. */
typedef struct api_sink api_sink_t;
api_sink_t *api_sink_open(api_t *self, const char *url);
void api_sink_write(api_sink_t *sink, const char *data, size_t len);
enum MHD_Result api_sink_finish(api_t *self, struct MHD_Connection *conn, api_sink_t *sink);
void api_sink_abort(api_sink_t *sink);

#endif
