/* internal: what the envd front end's files share (not for other
 * modules).
 *
 *   envd.c          registration, which context a request acts on, replies,
 *                   the Filesystem service's unary calls
 *   files.c    GET and POST /files: file bodies, streamed both ways
 *   process.c  the Process service (commands.h)
 *   watch.c    the Filesystem service's directory watches
 */
#ifndef SG_ENVD_INTERNAL_H
#define SG_ENVD_INTERNAL_H

#include <stdbool.h>

#include "gateway/envd/envd.h"
#include "gateway/envd/proto.h"
#include "kernelmgr/kernel/kernel.h"

struct envd {
    loop_t *loop;
    kmgr_t *kmgr;
    api_t *api;
    commands_t *commands;
    envd_config_t cfg;
    void (*wake)(void *);
    void *wake_arg;
    struct watcher *watchers; /* watch.c's */
};

/* What every request that keeps state (http_req_t.state) starts with: the
 * front end's done calls end, which frees it (completed: the whole
 * response went out). */
typedef struct envd_call envd_call_t;
struct envd_call {
    void (*end)(envd_call_t *call, bool completed);
};

/* The context req acts on (envd.h): the one its E2b-Sandbox-Id names, else
 * the tenant's default.  NULL with *unknown set to the id when the header
 * names no context of the caller's (answer with http_reply_unknown), or
 * with *err (a quota, a failed start). */
kernel_t *envd_kernel(envd_t *self, const http_req_t *req, const char **unknown, sg_error_t **err);
/* The same, answering when there is none: NULL after answering. */
kernel_t *envd_kernel_or_reply(envd_t *self, const http_req_t *req, enum MHD_Result *ret);

/* A unary call's answer: 200 and msg (stolen). */
enum MHD_Result envd_reply_msg(struct MHD_Connection *conn, json_t *msg);
/* A unary call's error: the status of code and {"code", "message"}. */
enum MHD_Result envd_reply_code(struct MHD_Connection *conn, const char *code, const char *msg);
/* The same for err (sbfs_code, as sbfs_error_code gives it, or NULL). */
enum MHD_Result envd_reply_error(struct MHD_Connection *conn, const char *sbfs_code,
                                 const sg_error_t *err);

/* A unary request's message: its body as a JSON object ("" is {}), or NULL
 * after answering invalid_argument. */
json_t *envd_request(const http_req_t *req, enum MHD_Result *ret);

/* A streaming request's one message (enveloped; plain JSON taken too), or
 * NULL after answering. */
json_t *envd_stream_request(const http_req_t *req, enum MHD_Result *ret);

int envd_files_register(envd_t *self, http_server_t *http, const http_front_t *front,
                        sg_error_t **err);
int envd_watch_register(envd_t *self, http_server_t *http, const http_front_t *front,
                        sg_error_t **err);
/* Ends every watch (envd_destroy). */
void envd_watch_destroy(envd_t *self);
int envd_process_register(envd_t *self, http_server_t *http, const http_front_t *front,
                          sg_error_t **err);

#endif
