/* internal: what the REST API's files share (not for other rooms).
 *
 *   rest.c          contexts and POST /execute; the parameter kind
 *                  {context}; the front end's done and registration
 *   files.c    /contexts/{context}/files: downloads, listings, deletes,
 *                  streamed uploads
 *   sbfs.c     the same for an absolute path (?path=), inside the
 *                  sandbox (sbfs.h); .../files/mkdir and .../files/move
 *   metrics.c  GET /health, GET /metrics and GET /openapi.json
 *   commands.c /contexts/{context}/commands: commands beside the kernel
 *                  (commands.h); the parameter kind {command}
 *   snapshots.c snapshots, fork and roll-back; the parameter kind
 *                  {snapshot}
 *   e2b.c      E2B's sandbox API (/sandboxes, /v2/sandboxes) over contexts;
 *                  the parameter kind {sandbox}
 *   e2bauth.c  each E2B sandbox's own token, and the file URLs signed with it
 *   e2bnet.c   an E2B sandbox's network rules, onto its sandbox's egress rules
 *   sbmetrics.c, sblogs.c  E2B's sandbox metrics and logs
 */
#ifndef SG_API_INTERNAL_H
#define SG_API_INTERNAL_H

#include "common/records.h"
#include "gateway/commands/commands.h"
#include "gateway/http/http.h"
#include "gateway/rest/rest.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"

struct api {
    loop_t *loop;
    kmgr_t *kmgr;
    api_config_t cfg;
    json_t *contexts;   /* id -> {language, cwd}: what the API adds to a session */
    json_t *defaults;   /* language -> id of its default context */
    records_t *records; /* STATE/contexts: both of the above, over a restart */
    commands_t *commands;
    volumes_t *volumes; /* api_set_volumes's; NULL: none */
    void (*wake)(void *);
    void *wake_arg;
    int e2b_timer;                   /* e2b.c's clock of sandboxes' ends; -1: none runs */
    json_t *e2b_metrics;             /* sbmetrics.c: sandbox id -> {samples, at, cpu_ns} */
    int e2b_sample_timer;            /* sbmetrics.c's; -1: none */
    json_t *e2b_logs;                /* sblogs.c: id -> [[ms, level, message], ...] */
    struct refusals *refusals;       /* metrics.c: egress refusals into the audit log */
    unsigned char e2b_token_key[32]; /* e2bauth.c: sandboxes' tokens are its HMACs */
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
    bool e2b_text;     /* E2B's code interpreter asked: a text result loses one pair of quotes */
    bool context_wait; /* not an execution: a wait for a kernel event (wait_for) */
    kernel_event_t wait_for; /* PREPARED (POST /contexts), PAUSED or READY (pause, resume) */
    bool restoring;          /* a wait for READY after a roll-back: RESTARTED is expected */
    bool snapshot_wait;      /* not an execution: a snapshot's callback answers (snapshots) */
    bool metrics;            /* not an execution: GET /metrics waits for the refusal counts */
    int metrics_timer;       /* metrics: answers without them after METRICS_WAIT_MS; -1: none */
} stream_t;

/* A stream with two references, the caller's and the HTTP request's (which
 * the front end's done drops). */
stream_t *api_stream_new(api_t *self, struct MHD_Connection *conn, kernel_t *k);
void api_stream_unref(stream_t *s);

/* The stream answers once k reports ev (PREPARED: with agg as it is;
 * READY, PAUSED: with k's context; a failure with its error): it takes the
 * caller's reference.  api_stream_answer answers at once (answer stolen)
 * and drops the caller's reference. */
void api_stream_wait(stream_t *s, kernel_t *k, kernel_event_t ev);
void api_stream_answer(stream_t *s, unsigned status, json_t *answer);

/* Tenant t's default context of language (made when it has none): POST
 * /execute without a context_id.  NULL with *err (and *quota for a refused
 * quota). */
kernel_t *api_tenant_context(api_t *self, const tenant_t *t, const char *language,
                             const audit_who_t *who, tenant_quota_t *quota, sg_error_t **err);

/* execute.c: POST /execute (the route is rest.c's, with the others). */
enum MHD_Result api_execute(api_t *self, http_req_t *call, const char *body, size_t len,
                            void **req_state);

/* What the contexts' routes share with the snapshots' (snapshots.c). */
json_t *api_context_json(api_t *self, kernel_t *k);
/* The mounts a new context's (or E2B sandbox's) body asks for with
 * volumeMounts (volumes.h's volumes_mounts): a new list, or NULL — *none
 * when it asks for none, else with *err (fixed: the context's volumes are
 * not its own to choose, a snapshot's or a host sandbox's). */
json_t *api_volume_mounts(api_t *self, const http_req_t *call, const json_t *spec, bool fixed,
                          bool *none, sg_error_t **err);
/* A new context of tenant t's (from snap when not NULL: its language, cwd,
 * kernelspec, template and network; else of template, when not NULL), with
 * a network when net is not NULL, its own rules net's (e2bnet.c; applied
 * before its code runs, a pool kernel's too); NULL with *err, SG_E_QUOTA
 * with *quota (tenants.h). */
typedef struct e2b_net e2b_net_t;
kernel_t *api_create_context(api_t *self, const tenant_t *t, const char *language, const char *cwd,
                             const e2b_net_t *net, bool implicit, const kmgr_snapshot_t *snap,
                             const char *template, kernel_t *sandbox, const json_t *mounts,
                             const audit_who_t *who, tenant_quota_t *quota, sg_error_t **err);
/* The sandbox E2B's SDKs name in the E2b-Sandbox-Id header; NULL when
 * none is named (absent, empty, or the SDKs' debug placeholders). */
const char *e2b_sandbox_header(struct MHD_Connection *conn);
/* Tenant t's context of language in sandbox's sandbox (sandbox's own
 * kernel when it speaks language, else the one made there for it before,
 * else a new one): E2B's run_code(language=...) in a sandbox. */
kernel_t *api_sandbox_context(api_t *self, const tenant_t *t, kernel_t *sandbox,
                              const char *language, const audit_who_t *who, tenant_quota_t *quota,
                              sg_error_t **err);
/* Answers 201 once k runs (E2B's Sandbox.create: a sandbox is ready when
 * it answers), with the context, or with why it did not start. */
enum MHD_Result api_context_ready(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                  void **req_state);
/* Answers POST /contexts: 201 once k's workspace exists. */
enum MHD_Result api_context_created(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                    void **req_state);
/* Answers *err, a quota's 429 (with *quota) or another error; frees it. */
enum MHD_Result api_reply_refused(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                  sg_error_t **err);
int api_snapshots_register(api_t *self, http_server_t *http, const http_front_t *front,
                           sg_error_t **err);
/* A snapshot's JSON (snapshots.c; e2b.c's answers too). */
json_t *api_snapshot_json(const kmgr_snapshot_t *s);
/* e2bauth.c: each E2B sandbox's own token (envdAccessToken), good for that
 * sandbox's envd and code interpreter only, and the file URLs signed with
 * it; its key kept in STATE/secrets/e2b-token-key (0600), so tokens outlive a
 * restart.  Registers the credentials with http (http_server_set_scoped). */
#define E2B_TOKEN_SIZE 64
void api_e2b_auth_start(api_t *self, http_server_t *http);
/* Sandbox id's token, NUL-terminated, into out. */
void api_e2b_token(const api_t *self, const char *id, char out[E2B_TOKEN_SIZE]);
/* e2b.c: E2B's sandbox API; its own front end (E2B's error shape), done the REST one's. */
int api_e2b_register(api_t *self, http_server_t *http, void (*done)(void *, void *, bool),
                     sg_error_t **err);
/* e2bnet.c: an E2B sandbox's network rules (allowOut, denyOut) onto its
 * sandbox's own egress rules.  api_e2b_network reads create's
 * allow_internet_access and network: false after answering 400. */
struct e2b_net {
    bool internet;        /* the sandbox gets a network */
    bool asked;           /* allow_internet_access was given ... */
    bool internet_access; /* ... and was true */
    char *allow, *deny;   /* allowOut, denyOut as given: "CIDR,..." or NULL */
    char *dns;            /* dnsServers as given: "IP,..." or NULL */
    char *rules_allow;    /* what the sandbox may reach: allowOut, and dnsServers when it
                             names a host (E2B's firewall opening); NULL: nothing */
    char *rules_deny;     /* what the sandbox refuses: denyOut, after 0.0.0.0/0 when
                             allow_internet_access is false; NULL: nothing */
    bool private_ports;   /* allowPublicTraffic false: its ports need a credential */
    char *mask_host;      /* maskRequestHost: the Host its ports' servers get; NULL */
    char *transforms;     /* rules' headers, {"HOST": {"HEADER": "VALUE"}} as JSON text; NULL */
    json_t *rules;        /* rules as given (E2B's shape, for GET); NULL: none */
};
/* body's allow_internet_access and network ({allowOut, denyOut, rules,
 * ...}) into *net; false with *why (a new string) when they cannot be — a
 * rule's ${e2b.secrets.NAME} that is not one of tenant's among them. */
bool api_network_parse(json_t *body, const char *tenant, e2b_net_t *net, char **why);
bool api_e2b_network(json_t *body, const char *tenant, e2b_net_t *net, struct MHD_Connection *conn,
                     enum MHD_Result *ret);
void api_e2b_network_free(e2b_net_t *net);
/* Into a sandbox's "e2b" record. */
void api_e2b_network_record(json_t *e2b, const e2b_net_t *net);
/* A context's own rules (kernel_opts' egress lists and transforms) as GET
 * /contexts/{id} shows them: "network": {allowOut, denyOut, rules?}, when
 * it has any. */
void api_network_json(json_t *context, const char *allow, const char *deny, const char *transforms);
/* SandboxDetail's allowInternetAccess and network, from the record. */
void api_e2b_network_json(json_t *sandbox, const json_t *e2b);
/* PUT /sandboxes/{sandbox}/network (E2B's front end, e2b.c, registers it). */
enum MHD_Result api_e2b_network_put(void *arg, http_req_t *call);
/* sbmetrics.c: E2B's sandbox metrics, sampled from start to stop; its
 * routes (E2B's front end, e2b.c, registers them). */
void api_sbmetrics_start(api_t *self);
void api_sbmetrics_stop(api_t *self);
/* metrics.c: egress refusals into the audit log, with --egress-allow. */
void api_refusals_start(api_t *self);
void api_refusals_stop(api_t *self);
enum MHD_Result api_sandbox_metrics(void *arg, http_req_t *call);
/* sblogs.c: E2B's sandbox logs, what sandgate's log says about each id,
 * kept from start to stop; an id's forgotten with it; the routes (e2b.c
 * registers them). */
void api_sblogs_start(api_t *self);
void api_sblogs_stop(api_t *self);
void api_sblogs_forget(api_t *self, const char *id);
enum MHD_Result api_sandbox_logs(void *arg, http_req_t *call);
enum MHD_Result api_sandbox_logs_v2(void *arg, http_req_t *call);
/* A context's record written again (its "e2b" changed), and one forgotten (deleted). */
void api_record_write(api_t *self, const char *id);
void api_forget_context(api_t *self, const char *id); /* and those in its sandbox, gone with it */
/* Suspends the request until k reports ev (PAUSED, READY...): answered
 * then with status and the context, or with the failure. */
enum MHD_Result api_wait_event(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                               kernel_event_t ev, unsigned status, void **req_state);
/* POST .../pause and .../resume: answered once k is paused (or runs), now or later
 * (*req_state), with the context or why not. */
enum MHD_Result api_pause_resume(api_t *self, struct MHD_Connection *conn, kernel_t *k, bool pause,
                                 void **req_state);

/* docs/openapi.yaml as JSON (NUL-terminated; the length without it), for
 * GET /openapi.json: made at build time by scripts/openapi-json.py, so the
 * daemon parses no YAML. */
extern const unsigned char api_openapi_json[];
extern const size_t api_openapi_json_len;

/* Each file registers its own routes, with the front end's shared parts. */
int api_files_register(api_t *self, http_server_t *http, const http_front_t *front,
                       sg_error_t **err);
int api_sbfs_register(api_t *self, http_server_t *http, const http_front_t *front,
                      sg_error_t **err);

/* sbfs.c, for files.c.  A request on an absolute path keeps an
 * api_sbfs_req_t as its state (freed by api_sbfs_req_free when it ends);
 * its handler, called again on resume, hands over to api_sbfs_resumed. */
typedef struct api_sbfs_req api_sbfs_req_t;
/* The ?path= the request gives: 1 and *path (borrowed), 0 when it gives
 * none, -1 with *err when it is not one sbfs takes. */
int api_sbfs_query_path(struct MHD_Connection *conn, const char **path, sg_error_t **err);
enum MHD_Result api_sbfs_get(api_t *self, http_req_t *call, const char *path);
enum MHD_Result api_sbfs_delete(api_t *self, http_req_t *call, const char *path);
enum MHD_Result api_sbfs_resumed(http_req_t *call);
void api_sbfs_req_free(api_sbfs_req_t *q);
/* {"error", "code", "message"}: the error's kind and sbfs_error_code. */
enum MHD_Result api_sbfs_reply_error(struct MHD_Connection *conn, const sg_error_t *err);
/* An upload to an absolute path (the PUT route's sink hands over): open
 * never fails (an error is answered by finish); write takes what it can
 * (less after suspending the connection); finish answers, or suspends and
 * returns with waiting true, to be called again on resume. */
typedef struct api_sbfs_sink api_sbfs_sink_t;
api_sbfs_sink_t *api_sbfs_sink_open(api_t *self, const http_req_t *call, const char *path);
size_t api_sbfs_sink_write(api_sbfs_sink_t *s, const char *data, size_t len);
enum MHD_Result api_sbfs_sink_finish(api_sbfs_sink_t *s, const char *tenant, const char *id);
bool api_sbfs_sink_waiting(const api_sbfs_sink_t *s);
void api_sbfs_sink_free(api_sbfs_sink_t *s);

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
