/* move: a context moved to another replica with its memory, files, tenant
 * and lineage, under the same id (cluster.h):
 *
 *   POST /contexts/{context}/move {"to": REPLICA}   (an admin's)
 *     0. it is listed as moving (GET /cluster/routes) until every proxy
 *        asking has asked twice more (ANNOUNCE_MAX_MS at most), so that
 *        from then on the proxies hold its requests; what they sent before
 *        is served here, and the move waits for it (and for an execution
 *        under way) to end, BUSY_MAX_MS at most;
 *     1. the context is closed to new work (503, "moving") and paused
 *        (runsc checkpoint);
 *     2. it is saved as a snapshot and that snapshot's files archived;
 *     3. the peer is sent the archive (PUT /cluster/snapshots/ID) and asked
 *        to start the context from it under the same id (POST
 *        /cluster/contexts), as this replica's admin (the replicas share
 *        --token), with curl;
 *     4. here the context and the snapshot go; 200 {"id", "replica", "ms"}.
 *   A failure at any step leaves the context here, open again (paused: the
 *   next request wakes it), and answers why (502 for the peer's refusal).
 *   GET /cluster/routes (public): the SHA-256 of each context here that
 *   another replica made, for the proxy, which routes their ids here
 *   (docker/sandgate-lists.lua); the id itself is never shown.
 *
 * Not moved: a context with volumes (a volume stays on its replica), one
 * holding or held in another's sandbox, E2B's timeout of a sandbox (the
 * moved one keeps its record, not its timer). */
#include "gateway/cluster/internal.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/tenants/tenants.h"

static const char MOVING[] = "this context is moving to another replica; retry in a moment";

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A proxy that asked GET /cluster/routes?poller=NAME within this is
 * waited for by a move's announcement, for at most ANNOUNCE_MAX_MS; a
 * request the proxies sent before they knew is waited for BUSY_MAX_MS. */
#define POLLER_QUIET_MS 2000
#define ANNOUNCE_MAX_MS 1500
#define ANNOUNCE_TICK_MS 20
#define BUSY_MAX_MS 30000

typedef enum { M_ANNOUNCE, M_PAUSE, M_SNAPSHOT, M_EXPORT, M_SEND, M_START, M_DONE } step_t;

typedef struct {
    cluster_t *self;
    cluster_moved_fn *cb;
    void *arg;
    kernel_t *k;
    char cid[37], sid[37], to[64], addr[128];
    json_t *record;
    step_t step;
    sg_error_t *err;
    unsigned status; /* the answer's, on an error */
    int64_t t0;
    json_t *polls; /* M_ANNOUNCE: {poller: its count when the move began} */
    int timer;     /* M_ANNOUNCE's tick */
    pid_t curl;
    bool observing;
    bool pending; /* a snapshot, an archive or a curl under way: its callback steps on */
} move_t;

static void step(move_t *mv);
static void announced(loop_t *loop, int timer, void *arg);

static void fail(move_t *mv, unsigned status, sg_errkind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(move_t *mv, unsigned status, sg_errkind_t kind, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!mv->err)
        sg_error_set(&mv->err, kind, "%s", msg);
    mv->status = status;
    mv->step = M_DONE;
}

static void on_kernel(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    move_t *mv = arg;
    (void)k;
    if (ev == KERNEL_EV_GONE) { /* its handle goes: no more of it */
        mv->k = NULL;
        mv->observing = false;
    }
    if (mv->step == M_DONE)
        return;
    if (ev == KERNEL_EV_GONE || ev == KERNEL_EV_DEAD)
        fail(mv, 409, SG_E_CONFLICT, "context %s ended while it was being moved", mv->cid);
    else if (ev != KERNEL_EV_PAUSED || mv->step != M_PAUSE)
        return;
    else if (err)
        fail(mv, 409, SG_E_CONFLICT, "the context could not be paused: %s", err->msg);
    else
        mv->step = M_SNAPSHOT;
    if (!mv->pending) /* else what is under way reports, and finds the failure */
        step(mv);
}

static void on_snapshot(const kmgr_snapshot_t *snap, const sg_error_t *err, void *arg)
{
    move_t *mv = arg;
    mv->pending = false;
    if (err) {
        fail(mv, 500, err->kind, "the context could not be saved: %s", err->msg);
    } else if (mv->step == M_DONE) { /* it ended meanwhile: the snapshot goes in finish() */
        snprintf(mv->sid, sizeof mv->sid, "%s", snap->id);
    } else {
        snprintf(mv->sid, sizeof mv->sid, "%s", snap->id);
        mv->step = M_EXPORT;
    }
    step(mv);
}

static void on_exported(uint64_t bytes, const sg_error_t *err, void *arg)
{
    move_t *mv = arg;
    (void)bytes;
    mv->pending = false;
    if (err)
        fail(mv, 500, err->kind, "the snapshot could not be archived: %s", err->msg);
    else if (mv->step != M_DONE)
        mv->step = M_SEND;
    step(mv);
}

/* curl's output ends with "\n" and the HTTP status (-w). */
static void on_curl(int status, const char *out, void *arg)
{
    move_t *mv = arg;
    mv->curl = 0;
    mv->pending = false;
    const char *nl = strrchr(out, '\n');
    int code = nl ? atoi(nl + 1) : 0;
    if (status != 0 || code != 201) {
        cleanup_free char *body = xstrndup(out, nl ? (size_t)(nl - out) : strlen(out));
        fail(mv, 502, SG_E_UNAVAILABLE, "the peer refused it: %s", body[0] ? body : "no answer");
    } else if (mv->step != M_DONE) {
        mv->step = mv->step == M_SEND ? M_START : M_DONE;
    }
    step(mv);
}

static void curl(move_t *mv, const char *method, const char *path, const char *const *more)
{
    cleanup_free char *url = xasprintf("http://%s%s", mv->addr, path);
    const char *argv[24] = {"/usr/bin/curl",  "-sS", "--max-time", "600", "-w",
                            "\n%{http_code}", "-X",  method,       "-H",  NULL};
    cleanup_free char *auth = xasprintf("@%s", mv->self->auth);
    argv[9] = auth;
    size_t n = 10;
    for (; more && *more && n < 22; more++)
        argv[n++] = *more;
    argv[n++] = url;
    argv[n] = NULL;
    cleanup_error sg_error_t *err = NULL;
    mv->pending = true;
    mv->curl = proc_exec_async(argv, on_curl, mv, &err);
    if (mv->curl < 0) {
        mv->curl = 0;
        mv->pending = false;
        fail(mv, 500, err->kind, "cannot run curl: %s", err->msg);
        step(mv);
    }
}

static void send_archive(move_t *mv)
{
    cleanup_free char *path = xasprintf("/cluster/snapshots/%s", mv->sid);
    cleanup_free char *file = xasprintf("%s/%s.tar", mv->self->transfers, mv->sid);
    cleanup_free char *b64 = cluster_record_header(mv->record);
    cleanup_free char *hdr = xasprintf(CLUSTER_RECORD_HEADER ": %s", b64);
    const char *more[] = {"-H", hdr, "-H", "Content-Type: application/x-tar", "-T", file, NULL};
    curl(mv, "PUT", path, more);
}

static void start_there(move_t *mv)
{
    cleanup_free char *tar = xasprintf("%s/%s.tar", mv->self->transfers, mv->sid);
    unlink(tar);
    const json_t *meta = api_context_meta(mv->self->api, mv->cid);
    json_t *body = json_pack("{s:s, s:O?}", "snapshot", mv->sid, "meta", (json_t *)meta);
    cleanup_free char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    const char *more[] = {"-H", "Content-Type: application/json", "--data-binary", text, NULL};
    curl(mv, "POST", "/cluster/contexts", more);
}

static void finish(move_t *mv)
{
    cluster_t *self = mv->self;
    loop_timer_end(self->loop, mv->timer);
    json_decref(mv->polls);
    if (mv->observing && mv->k)
        kernel_unobserve(mv->k, on_kernel, mv);
    mv->observing = false;
    if (*mv->sid) /* its copy here goes, moved or not */
        kmgr_snapshot_delete(self->kmgr, mv->sid, NULL);
    cleanup_free char *tar = xasprintf("%s/%s.tar", self->transfers, mv->sid);
    unlink(tar);
    audit_who_t who = {0};
    audit_who_set_tenant(&who, "admin");
    if (mv->err) {
        log_warn("cluster: context %s stays here: %s", mv->cid, mv->err->msg);
        if (mv->k)
            kernel_close(mv->k, NULL); /* open again; it wakes on the next request */
        json_object_del(self->moving, mv->cid);
    } else {
        log_info("cluster: context %s moved to %s in %lld ms", mv->cid, mv->to,
                 (long long)(mono_ms() - mv->t0));
        audit_event(&who, "context.move",
                    json_pack("{s:s, s:s}", "context", mv->cid, "replica", mv->to));
        /* Gone here at once (a restart of this replica cannot bring back a
         * second copy); listed as moved, with where to, for MOVED_LISTED_MS,
         * so that a proxy that has not yet heard it from the peer sends
         * its requests there. */
        kmgr_shutdown(self->kmgr, mv->cid, NULL);
        mv->k = NULL;
        json_object_set_new(self->moving, mv->cid,
                            json_pack("[I, s]", (json_int_t)(mono_ms() + MOVED_LISTED_MS), mv->to));
    }
    mv->cb(mv->err, mv->err ? (mv->status ? mv->status : 500) : 200, mono_ms() - mv->t0, mv->arg);
    json_decref(mv->record);
    sg_error_free(&mv->err);
    free(mv);
}

static void step(move_t *mv)
{
    cleanup_error sg_error_t *err = NULL;
    switch (mv->step) {
    case M_ANNOUNCE:
        if (!mv->timer)
            mv->timer = loop_timer(mv->self->loop, ANNOUNCE_TICK_MS, 0, announced, mv);
        return;
    case M_PAUSE:
        if (kernel_state(mv->k) == KERNEL_PAUSED)
            mv->step = M_SNAPSHOT;
        else if (kernel_state(mv->k) != KERNEL_PAUSING && kernel_pause(mv->k, &err) < 0)
            fail(mv, 409, SG_E_CONFLICT, "the context could not be paused: %s", err->msg);
        if (mv->step != M_PAUSE)
            step(mv);
        return;
    case M_SNAPSHOT:
        mv->pending = true;
        if (kmgr_snapshot(mv->self->kmgr, mv->k, NULL, on_snapshot, mv, &err) < 0) {
            mv->pending = false;
            fail(mv, 409, err->kind, "the context could not be saved: %s", err->msg);
            step(mv);
        }
        return;
    case M_EXPORT:
        mv->pending = true;
        if (kmgr_snapshot_export(mv->self->kmgr, mv->sid, &mv->record, on_exported, mv, &err) < 0) {
            mv->pending = false;
            fail(mv, 500, err->kind, "the snapshot could not be archived: %s", err->msg);
            step(mv);
        }
        return;
    case M_SEND: send_archive(mv); return;
    case M_START: start_there(mv); return;
    case M_DONE: finish(mv); return;
    }
}

/* Whether every proxy that was asking when the move began has asked twice
 * since (the first answer may have crossed a request it was sending), or
 * gone quiet. */
static bool proxies_know(const move_t *mv, int64_t now)
{
    const char *name;
    json_t *then;
    json_object_foreach (mv->polls, name, then) {
        json_t *p = json_object_get(mv->self->pollers, name);
        if (json_integer_value(json_array_get(p, 0)) < json_integer_value(then) + 2 &&
            json_integer_value(json_array_get(p, 1)) > now - POLLER_QUIET_MS)
            return false;
    }
    return true;
}

/* M_ANNOUNCE's tick: on to M_PAUSE once the proxies know and what they
 * sent before has ended. */
static void announced(loop_t *loop, int timer, void *arg)
{
    move_t *mv = arg;
    int64_t now = mono_ms();
    (void)loop, (void)timer;
    if (!proxies_know(mv, now) && now - mv->t0 < ANNOUNCE_MAX_MS)
        return;
    kernel_state_t st = kernel_state(mv->k);
    if ((st == KERNEL_BUSY || st == KERNEL_STARTING) && now - mv->t0 < BUSY_MAX_MS)
        return;
    loop_timer_end(mv->self->loop, mv->timer);
    mv->timer = 0;
    if (st == KERNEL_BUSY || st == KERNEL_STARTING) {
        fail(mv, 409, SG_E_CONFLICT, "context %s ran code for %d s: it stays where it is", mv->cid,
             BUSY_MAX_MS / 1000);
    } else {
        kernel_close(mv->k, MOVING);
        mv->step = M_PAUSE;
    }
    step(mv);
}

void cluster_polled(cluster_t *self, const char *poller)
{
    json_t *p = json_object_get(self->pollers, poller);
    if (!p && json_object_size(self->pollers) >= 64) /* a bound: stale ones go first */
        json_object_clear(self->pollers);
    json_object_set_new(
        self->pollers, poller,
        json_pack("[I, I]", json_integer_value(json_array_get(p, 0)) + 1, (json_int_t)mono_ms()));
}

int cluster_load_peers(cluster_t *self, sg_error_t **err)
{
    if (!self->peers_file)
        return 0;
    cleanup_free char *text = NULL;
    size_t n = 0;
    FILE *f = fopen(self->peers_file, "re");
    int r = f && getdelim(&text, &n, 0, f) >= 0 ? cluster_parse_peers(text, self->peers, err) : 0;
    if (f)
        fclose(f);
    return r;
}

int cluster_move(cluster_t *self, kernel_t *k, const char *to, cluster_moved_fn *cb, void *arg,
                 sg_error_t **err)
{
    if (cluster_load_peers(self, err) < 0)
        return -1;
    const char *addr = to ? json_string_value(json_object_get(self->peers, to)) : NULL;
    if (to && strcmp(to, replica_id()) == 0)
        return sg_error_set(err, SG_E_INVALID, "context %s is on replica %s already", kernel_id(k),
                            to);
    if (!addr)
        return sg_error_set(err, SG_E_INVALID,
                            "'to': one of this replica's peers (--peers), not '%.64s'",
                            to ? to : "");
    if (!self->auth)
        return sg_error_set(err, SG_E_CONFLICT,
                            "moves need --token, the admin key the replicas share");
    if (kernel_host(k) || kernel_guests(k) || kernel_opts(k)->mounts)
        return sg_error_set(err, SG_E_CONFLICT,
                            "context %s shares a sandbox with other contexts or mounts volumes: "
                            "it stays where it is",
                            kernel_id(k));
    if (kernel_state(k) == KERNEL_STARTING || kernel_state(k) == KERNEL_DEAD)
        return sg_error_set(err, SG_E_CONFLICT,
                            "context %s is %s: a context moves when running or paused",
                            kernel_id(k), kernel_status(k));
    move_t *mv = xzalloc(sizeof *mv);
    *mv = (move_t){.self = self, .k = k, .t0 = mono_ms(), .cb = cb, .arg = arg};
    snprintf(mv->cid, sizeof mv->cid, "%s", kernel_id(k));
    snprintf(mv->to, sizeof mv->to, "%s", to);
    snprintf(mv->addr, sizeof mv->addr, "%s", addr);
    mv->polls = json_object();
    const char *name;
    json_t *p;
    json_object_foreach (self->pollers, name, p)
        if (json_integer_value(json_array_get(p, 1)) > mv->t0 - POLLER_QUIET_MS)
            json_object_set(mv->polls, name, json_array_get(p, 0));
    json_object_set_new(self->moving, mv->cid, json_true());
    kernel_observe(k, on_kernel, mv);
    mv->observing = true;
    step(mv);
    return 0;
}

/* POST /contexts/{context}/move: answered when the move ends. */
typedef struct {
    cluster_t *self;
    struct MHD_Connection *conn; /* suspended; NULL: the client went */
    bool done, suspended;
    sg_error_t *err;
    unsigned status;
    int64_t ms;
    char id[37], to[64];
} asked_t;

static void asked_moved(const sg_error_t *err, unsigned status, int64_t ms, void *arg)
{
    asked_t *q = arg;
    q->done = true;
    q->status = status;
    q->ms = ms;
    if (err)
        sg_error_set(&q->err, err->kind, "%s", err->msg);
    if (q->conn && q->suspended) {
        http_resume(q->conn);
        q->conn = NULL;
        q->self->wake(q->self->wake_arg);
    } else if (!q->conn) { /* the client went */
        sg_error_free(&q->err);
        free(q);
    }
}

static enum MHD_Result asked_answer(const asked_t *q, struct MHD_Connection *conn)
{
    return q->err ? http_reply_json(conn, q->status, http_error_body(q->err))
                  : http_reply_json(conn, 200,
                                    json_pack("{s:s, s:s, s:I}", "id", q->id, "replica", q->to,
                                              "ms", (json_int_t)q->ms));
}

static enum MHD_Result context_move(void *ctx, http_req_t *req)
{
    cluster_t *self = ctx;
    asked_t *q = req->state;
    if (req->resumed)
        return asked_answer(q, req->conn);
    if (!req->tenant || !req->tenant->admin)
        return http_reply_errorf(req->conn, SG_E_FORBIDDEN,
                                 "moving a context is the operator's (an admin key's)");
    kernel_t *k = http_arg(req, "context");
    json_error_t jerr;
    json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    const char *to = json_string_value(json_object_get(body, "to"));
    q = xzalloc(sizeof *q);
    *q = (asked_t){.self = self, .conn = req->conn};
    snprintf(q->id, sizeof q->id, "%s", kernel_id(k));
    snprintf(q->to, sizeof q->to, "%s", to ? to : "");
    json_decref(body);
    cleanup_error sg_error_t *err = NULL;
    if (cluster_move(self, k, q->to, asked_moved, q, &err) < 0) {
        free(q);
        return http_reply_error(req->conn, err);
    }
    req->state = q;
    if (q->done) /* refused at once (asked_moved found conn not suspended) */
        return asked_answer(q, req->conn);
    http_suspend(req->conn);
    q->suspended = true;
    return MHD_YES;
}

/* --- the peer's side ------------------------------------------------------------------ */

static enum MHD_Result contexts_in(void *ctx, http_req_t *req)
{
    cluster_t *self = ctx;
    json_error_t jerr;
    json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    const char *sid = json_string_value(json_object_get(body, "snapshot"));
    const kmgr_snapshot_t *snap = sid ? kmgr_snapshot_get(self->kmgr, sid) : NULL;
    cleanup_error sg_error_t *err = NULL;
    enum MHD_Result ret;
    audit_who_t who;
    http_who(req, "cluster", &who);
    if (!req->tenant || !req->tenant->admin) {
        ret = http_reply_errorf(req->conn, SG_E_FORBIDDEN,
                                "moving a context is the operator's (an admin key's)");
    } else if (!snap) {
        ret =
            http_reply_errorf(req->conn, SG_E_NOTFOUND, "no snapshot '%.64s' here", sid ? sid : "");
    } else {
        kernel_t *k =
            api_context_move_in(self->api, snap, json_object_get(body, "meta"), &who, &err);
        if (k) { /* its files are the session's from now on */
            kmgr_snapshot_delete(self->kmgr, sid, NULL);
            log_info("cluster: context %s moved here", kernel_id(k));
        }
        ret = k ? http_reply_json(req->conn, 201, json_pack("{s:s}", "id", kernel_id(k)))
                : http_reply_error(req->conn, err);
    }
    json_decref(body);
    return ret;
}

/* The contexts here that another replica made: their ids' SHA-256. */
static json_t *hashed(const char *id)
{
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * sizeof h + 1];
    crypto_hash_sha256(h, (const unsigned char *)id, strlen(id));
    return json_string(sodium_bin2hex(hex, sizeof hex, h, sizeof h));
}

/* here: the contexts here that another replica made; moving: those
 * leaving (the proxy holds their requests until they are somewhere);
 * moved: {SHA-256: replica} of those that left lately; contexts: how many
 * are here (a drain's measure of load).
 * ?poller=NAME: a proxy's name, for a move to know that it has asked. */
static enum MHD_Result routes(void *ctx, http_req_t *req)
{
    cluster_t *self = ctx;
    const char *poller = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "poller");
    if (poller && poller[0] && strlen(poller) <= 64)
        cluster_polled(self, poller);
    json_t *here = json_array(), *moving = json_array(), *moved = json_object();
    const char *tag = replica_tag(), *id;
    json_t *v, *tmp;
    json_object_foreach_safe(self->moving, tmp, id, v) /* listed long enough, or back */
        if (json_is_array(v) && (json_integer_value(json_array_get(v, 0)) < mono_ms() ||
                                 kmgr_get(self->kmgr, id)))
            json_object_del(self->moving, id);
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        id = kernel_id(kmgr_at(self->kmgr, i));
        if (strncmp(id, tag, strlen(tag)) != 0 && !json_object_get(self->moving, id))
            json_array_append_new(here, hashed(id));
    }
    json_object_foreach (self->moving, id, v) {
        json_t *h = hashed(id);
        if (json_is_array(v))
            json_object_set(moved, json_string_value(h), json_array_get(v, 1));
        else
            json_array_append(moving, h);
        json_decref(h);
    }
    return http_reply_json(req->conn, 200,
                           json_pack("{s:s, s:o, s:o, s:o, s:I}", "replica", replica_id(), "here",
                                     here, "moving", moving, "moved", moved, "contexts",
                                     (json_int_t)kmgr_count(self->kmgr)));
}

static void move_done(void *ctx, void *state, bool completed)
{
    (void)ctx, (void)completed;
    asked_t *q = state;
    if (q->done) {
        sg_error_free(&q->err);
        free(q);
    } else {
        q->conn = NULL; /* the move goes on; asked_moved frees it */
    }
}

int cluster_move_register(cluster_t *self, http_server_t *http, const http_front_t *front,
                          sg_error_t **err)
{
    static const http_route_t table[] = {
        {"POST", "/contexts/{context}/move", context_move, 0, NULL},
        {"POST", "/cluster/contexts", contexts_in, 0, NULL},
        {"GET", "/cluster/routes", routes, HTTP_ROUTE_PUBLIC, NULL},
    };
    static const http_route_t drain[] = {
        {"POST", "/cluster/drain", cluster_drain_route, 0, NULL},
    };
    http_front_t f = *front, g = *front;
    f.done = move_done;
    g.done = cluster_drain_done;
    return http_routes(http, &f, table, sizeof table / sizeof *table, err) < 0 ||
                   http_routes(http, &g, drain, 1, err) < 0
               ? -1
               : 0;
}
