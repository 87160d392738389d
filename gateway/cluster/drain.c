/* drain: every context of this replica moved to its peers, one at a time
 * (cluster.h): POST /cluster/drain, and SIGTERM with --drain-on-stop.
 * First each peer is asked how many contexts it holds (GET /cluster/routes);
 * one that does not answer is left out.  Each context then goes to the
 * peer holding fewest, counting those it was sent; a peer that refuses it
 * is not asked for it again.  One running code is tried again every half
 * second for DRAIN_BUSY_MS; one that cannot move (its volumes, a shared
 * sandbox, every peer refusing) stays, and says why.  The drain ends
 * MOVED_GRACE_MS after its last move, once the proxies have learnt where
 * that context is. */
#include "gateway/cluster/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/replica.h"
#include "common/xalloc.h"

#define DRAIN_BUSY_MS 30000
#define DRAIN_RETRY_MS 500

struct drain {
    cluster_t *self;
    json_t *ids;    /* the contexts to move, in order */
    json_t *peers;  /* {name: contexts it holds}: those that answered */
    json_t *tried;  /* {name: true}: the peers that refused this context */
    size_t i;       /* the context being moved */
    size_t asking;  /* peers not yet answered how many they hold */
    char to[64];    /* where it is being moved */
    int waited_ms;  /* for the busy one */
    json_t *moved;  /* [{id, replica, ms}] */
    json_t *stayed; /* [{id, why}] */
    cluster_drained_fn *done;
    void *arg;
    bool busy;     /* in pump(): a move answering at once does not recurse */
    bool answered; /* moved() came for the move pump() began */
};

static void pump(drain_t *d);

static void next_context(drain_t *d)
{
    d->i++;
    d->waited_ms = 0;
    json_object_clear(d->tried);
}

static void stay(drain_t *d, const char *id, const char *why)
{
    json_array_append_new(d->stayed, json_pack("{s:s, s:s}", "id", id, "why", why));
    log_warn("cluster: drain: context %s stays: %s", id, why);
    next_context(d);
}

static void retry(loop_t *loop, int timer, void *arg)
{
    (void)loop, (void)timer;
    pump(arg);
}

/* The peer holding fewest, of those not tried for this context; NULL: none. */
static const char *least_loaded(const drain_t *d)
{
    const char *best = NULL, *name;
    json_int_t least = 0;
    json_t *n;
    json_object_foreach (d->peers, name, n)
        if (!json_object_get(d->tried, name) && (!best || json_integer_value(n) < least)) {
            best = name;
            least = json_integer_value(n);
        }
    return best;
}

static void moved(const sg_error_t *err, unsigned status, int64_t ms, void *arg)
{
    drain_t *d = arg;
    d->answered = true;
    const char *id = json_string_value(json_array_get(d->ids, d->i));
    (void)status;
    if (!err) {
        json_array_append_new(d->moved,
                              json_pack("{s:s, s:s, s:I}", "id", id, "replica", d->to, "ms", ms));
        json_object_set_new(d->peers, d->to,
                            json_integer(json_integer_value(json_object_get(d->peers, d->to)) + 1));
        next_context(d);
    } else {
        json_object_set_new(d->tried, d->to, json_true());
        if (!least_loaded(d))
            stay(d, id, err->msg);
    }
    if (!d->busy)
        pump(d);
}

static void drain_free(drain_t *d)
{
    json_decref(d->ids);
    json_decref(d->peers);
    json_decref(d->tried);
    json_decref(d->moved);
    json_decref(d->stayed);
    free(d);
}

static void ended(loop_t *loop, int timer, void *arg)
{
    drain_t *d = arg;
    (void)loop, (void)timer;
    log_info("cluster: drained: %zu contexts moved, %zu stayed", json_array_size(d->moved),
             json_array_size(d->stayed));
    json_t *summary = json_pack("{s:O, s:O}", "moved", d->moved, "stayed", d->stayed);
    d->done(summary, d->arg);
    json_decref(summary);
    drain_free(d);
}

static void pump(drain_t *d)
{
    cluster_t *self = d->self;
    d->busy = true;
    while (d->i < json_array_size(d->ids)) {
        const char *id = json_string_value(json_array_get(d->ids, d->i));
        kernel_t *k = kmgr_get(self->kmgr, id);
        if (!k) { /* gone meanwhile */
            next_context(d);
            continue;
        }
        if (kernel_state(k) == KERNEL_BUSY || kernel_state(k) == KERNEL_STARTING) {
            if ((d->waited_ms += DRAIN_RETRY_MS) > DRAIN_BUSY_MS) {
                stay(d, id, "it ran code for the whole drain");
                continue;
            }
            loop_timer(self->loop, DRAIN_RETRY_MS, 1, retry, d);
            d->busy = false;
            return;
        }
        const char *to = least_loaded(d);
        if (!to) {
            stay(d, id, "no peer answered");
            continue;
        }
        snprintf(d->to, sizeof d->to, "%s", to);
        cleanup_error sg_error_t *err = NULL;
        d->answered = false;
        if (cluster_move(self, k, d->to, moved, d, &err) < 0) {
            stay(d, id, err->msg);
            continue;
        }
        if (!d->answered) { /* under way: moved() pumps on */
            d->busy = false;
            return;
        }
    }
    d->busy = false;
    loop_timer(self->loop, json_array_size(d->moved) ? MOVED_GRACE_MS : 0, 1, ended, d);
}

/* A peer's GET /cluster/routes: how many contexts it holds. */
typedef struct {
    drain_t *d;
    char name[64];
} asked_load_t;

static void on_load(int status, const char *out, void *arg)
{
    asked_load_t *a = arg;
    drain_t *d = a->d;
    json_t *answer = status == 0 ? json_loads(out, 0, NULL) : NULL;
    json_t *n = json_object_get(answer, "contexts");
    if (json_is_integer(n))
        json_object_set(d->peers, a->name, n);
    else
        log_warn("cluster: drain: peer %s did not answer GET /cluster/routes: it is left out",
                 a->name);
    json_decref(answer);
    free(a);
    if (--d->asking == 0) {
        log_info("cluster: draining %zu contexts to %zu peers", json_array_size(d->ids),
                 json_object_size(d->peers));
        pump(d);
    }
}

static void ask_load(drain_t *d, const char *name, const char *addr)
{
    cleanup_free char *url = xasprintf("http://%s/cluster/routes", addr);
    const char *argv[] = {"/usr/bin/curl", "-sSf", "--max-time", "2", url, NULL};
    asked_load_t *a = xzalloc(sizeof *a);
    *a = (asked_load_t){.d = d};
    snprintf(a->name, sizeof a->name, "%s", name);
    cleanup_error sg_error_t *err = NULL;
    d->asking++;
    if (proc_exec_async(argv, on_load, a, &err) < 0) {
        d->asking--;
        log_warn("cluster: drain: cannot run curl: %s", err->msg);
        free(a);
    }
}

size_t cluster_drain(cluster_t *self, cluster_drained_fn *done, void *arg)
{
    cluster_load_peers(self, NULL);
    json_t *ids = json_array();
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        if (!kernel_host(k))
            json_array_append_new(ids, json_string(kernel_id(k)));
    }
    size_t n = json_array_size(ids);
    size_t others = json_object_size(self->peers) -
                    (json_object_get(self->peers, replica_id()) ? 1 : 0); /* a file lists all */
    if (!n || !others || !self->auth) {
        if (n)
            log_warn("cluster: drain: no peers (--peers) or no --token: %zu contexts stay", n);
        json_decref(ids);
        return 0;
    }
    drain_t *d = xzalloc(sizeof *d);
    *d = (drain_t){.self = self,
                   .ids = ids,
                   .peers = json_object(),
                   .tried = json_object(),
                   .moved = json_array(),
                   .stayed = json_array(),
                   .done = done,
                   .arg = arg};
    const char *name;
    json_t *v;
    json_object_foreach (self->peers, name, v)
        if (strcmp(name, replica_id()) != 0)
            ask_load(d, name, json_string_value(v));
    if (d->asking == 0) /* not one curl ran: every context stays, said by pump() */
        pump(d);
    return n;
}

/* POST /cluster/drain: answered when every context has moved or stayed. */
typedef struct {
    cluster_t *self;
    struct MHD_Connection *conn; /* NULL: the client went */
    json_t *summary;
    bool suspended;
} draining_t;

static void drain_answered(const json_t *summary, void *arg)
{
    draining_t *q = arg;
    q->summary = json_deep_copy(summary);
    if (q->conn && q->suspended) {
        http_resume(q->conn);
        q->self->wake(q->self->wake_arg);
    } else if (!q->conn) {
        json_decref(q->summary);
        free(q);
    }
}

enum MHD_Result cluster_drain_route(void *ctx, http_req_t *req)
{
    cluster_t *self = ctx;
    draining_t *q = req->state;
    if (req->resumed || (q && q->summary))
        return http_reply_json(req->conn, 200, json_incref(q->summary));
    if (!req->tenant || !req->tenant->admin)
        return http_reply_errorf(req->conn, SG_E_FORBIDDEN,
                                 "draining a replica is the operator's (an admin key's)");
    q = xzalloc(sizeof *q);
    *q = (draining_t){.self = self, .conn = req->conn};
    req->state = q;
    kmgr_set_draining(self->kmgr, true); /* no new contexts here: GET /health says 503 */
    if (cluster_drain(self, drain_answered, q) == 0)
        q->summary = json_pack("{s:[], s:[]}", "moved", "stayed");
    if (q->summary)
        return http_reply_json(req->conn, 200, json_incref(q->summary));
    http_suspend(req->conn);
    q->suspended = true;
    return MHD_YES;
}

void cluster_drain_done(void *ctx, void *state, bool completed)
{
    (void)ctx, (void)completed;
    draining_t *q = state;
    if (q->summary) {
        json_decref(q->summary);
        free(q);
    } else {
        q->conn = NULL; /* the drain goes on; drain_answered frees it */
    }
}
