/* api_internal: what the REST API's files share (not for other modules).
 *
 *   api.c          contexts and POST /execute; the parameter kind
 *                  {context}; the front end's done and registration
 *   api_files.c    /contexts/{context}/files: downloads, listings, deletes,
 *                  streamed uploads
 *   api_metrics.c  GET /health and GET /metrics
 *   api_commands.c /contexts/{context}/commands: commands beside the kernel
 *                  (commands.h); the parameter kind {command}
 */
#ifndef SG_API_INTERNAL_H
#define SG_API_INTERNAL_H

#include "common/records.h"
#include "gateway/api.h"
#include "gateway/commands.h"
#include "gateway/exec.h"
#include "gateway/http.h"
#include "gateway/resp.h"

struct api {
    loop_t *loop;
    kmgr_t *kmgr;
    api_config_t cfg;
    json_t *contexts;   /* id -> {language, cwd}: what the API adds to a session */
    json_t *defaults;   /* language -> id of its default context */
    records_t *records; /* STATE/contexts: both of the above, over a restart */
    commands_t *commands;
    void (*wake)(void *);
    void *wake_arg;
};

/* --- one request that answers later: an execution's stream, or a wait ---------------- */

/* Lives while the HTTP request does, or while its execution or wait runs:
 * freed when both are over. */
typedef struct {
    api_t *api;
    int refs; /* the execution (or the kernel observer), and the HTTP request */
    resp_t *out;
    kernel_t *k;
    exec_t *exec; /* NULL once it ended */
    bool json_mode, done;
    json_t *agg;     /* JSON mode: the whole answer */
    unsigned status; /* JSON mode: the reply's status */
    bool command;
    bool context_wait;       /* not an execution: a wait for a kernel event (wait_for) */
    kernel_event_t wait_for; /* PREPARED (POST /contexts), PAUSED or READY (pause, resume) */
    bool metrics;            /* not an execution: GET /metrics waits for the refusal counts */
    int metrics_timer;       /* metrics: answers without them after METRICS_WAIT_MS; -1: none */
} stream_t;

/* A stream with two references, the caller's and the HTTP request's (which
 * the front end's done drops). */
stream_t *api_stream_new(api_t *self, struct MHD_Connection *conn, kernel_t *k);
void api_stream_unref(stream_t *s);

/* Each file registers its own routes, with the front end's shared parts. */
int api_files_register(api_t *self, http_server_t *http, const http_front_t *front,
                       sg_error_t **err);
int api_metrics_register(api_t *self, http_server_t *http, const http_front_t *front,
                         sg_error_t **err);
/* Commands have their own per-request objects: their own front end (its done). */
int api_commands_register(api_t *self, http_server_t *http, sg_error_t **err);

/* Reads a JSON object body; NULL after answering 400 (*ret). */
json_t *api_parse_body(struct MHD_Connection *conn, const char *body, size_t len,
                       enum MHD_Result *ret);
/* req's field name, if there, of type (JSON_REAL: any number; JSON_TRUE:
 * a boolean); false after answering 400 (*ret). */
bool api_field(json_t *req, const char *name, json_type type, json_t **out,
               struct MHD_Connection *conn, enum MHD_Result *ret);
/* The cwd a context was created with ("/home/user" when it has none). */
const char *api_context_cwd(api_t *self, const kernel_t *k);

static inline enum MHD_Result reply_status(struct MHD_Connection *conn, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Answers *err and frees it. */
static inline enum MHD_Result reply_failed(struct MHD_Connection *conn, sg_error_t **err)
{
    enum MHD_Result ret = http_reply_error(conn, *err);
    sg_error_free(err);
    return ret;
}

#endif
