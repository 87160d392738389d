/* internal: what the Jupyter front end's files share — jupyter.c (the
 * server, kernels, kernelspecs, the WebSocket upgrade), sessions.c
 * (/api/sessions) and terminal.c (a context's shell over a WebSocket).  Not
 * for use outside gateway/jupyter/. */
#ifndef SG_JUPYTER_INTERNAL_H
#define SG_JUPYTER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/commands/commands.h"
#include "gateway/jupyter/jupyter.h"
#include "gateway/observe/observe.h"
#include "gateway/tenants/tenants.h"

struct jupyter {
    loop_t *loop;
    kmgr_t *kmgr;
    channels_t *ch;
    json_t *sessions; /* id -> {id, path, name, type, kernel_id} */
    void (*wake)(void *);
    void *wake_arg;
    int64_t started;      /* wall clock ms */
    commands_t *commands; /* terminal.c's shells (jupyter_set_commands) */
    struct term *terms;   /* terminal.c's: the shells by context and name */
};

/* A request that waits (for a kernel to be ready) or upgrades to a WebSocket. */
typedef struct {
    jupyter_t *j;
    struct MHD_Connection *conn;
    char kernel_id[64];
    char session_id[40]; /* /api/sessions request: the session to answer with */
    unsigned status;     /* to answer with once ready */
    resp_t *out;         /* the wait */
    bool ready;
    sg_error_t *err;
    /* WebSocket upgrade */
    char ws_session[129];
    bool ws_v1;
    bool upgraded;   /* channels has the socket: channels_revoke closes it */
    char tenant[64]; /* who opens it, for the audit log */
} jreq_t;

/* --- jupyter.c ---------------------------------------------------------------- */

/* jupyter_server's error body: {"message", "reason"}; sandgate adds its kind. */
enum MHD_Result jupyter_fail(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Answers with *err (a quota's name and limit too) and frees it. */
enum MHD_Result jupyter_fail_err(struct MHD_Connection *conn, sg_error_t **err);
enum MHD_Result jupyter_no_content(struct MHD_Connection *conn);
/* The request body as a JSON object ({} when empty); NULL after answering 400 (*ret). */
json_t *jupyter_parse(struct MHD_Connection *conn, const char *body, size_t len,
                      enum MHD_Result *ret);
/* A kernel's model, as jupyter_server gives it. */
json_t *jupyter_kernel_model(kernel_t *k);
/* A new kernel for tenant t as req ({name, env?, path?}) asks. */
kernel_t *jupyter_start_kernel(jupyter_t *self, const tenant_t *t, json_t *req,
                               const audit_who_t *who, sg_error_t **err);
/* Answers status with k's model (or session_id's) once k is ready: the
 * request waits (*req_state) until then. */
enum MHD_Result jupyter_when_ready(jupyter_t *self, struct MHD_Connection *conn, kernel_t *k,
                                   unsigned status, const char *session_id, void **req_state);
/* A request that waited for a kernel resumed: its answer. */
enum MHD_Result jupyter_resumed(jupyter_t *self, http_req_t *call);

/* --- terminal.c -------------------------------------------------------------- */

int jupyter_terminal_register(jupyter_t *self, http_server_t *http, sg_error_t **err);
void jupyter_terminal_forget(jupyter_t *self);

/* --- sessions.c -------------------------------------------------------------- */

/* A session's model, its kernel's within. */
json_t *jupyter_session_model(jupyter_t *self, json_t *s);
/* Sessions whose kernel is gone (shut down, culled) go too. */
void jupyter_prune_sessions(jupyter_t *self);
/* How many sessions owner has (tenants_count_source's count; arg: the jupyter_t). */
long long jupyter_sessions_of(void *arg, const char *owner);
/* The "session" parameter kind and the /api/sessions routes, with front's shared parts. */
int jupyter_sessions_register(jupyter_t *self, http_server_t *http, const http_front_t *front,
                              sg_error_t **err);

#endif
