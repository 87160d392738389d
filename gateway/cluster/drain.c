/* drain: every context of this replica moved to its peers, one at a time
 * (cluster.h): POST /cluster/drain, and SIGTERM with --drain-on-stop.
 * Each goes to the next peer in turn (by name); one running code is tried
 * again every half second for DRAIN_BUSY_MS; one that cannot move (its
 * volumes, a shared sandbox, every peer refusing) stays, and says why. */
#include "gateway/cluster/internal.h"

#include <string.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"

#define DRAIN_BUSY_MS 30000
#define DRAIN_RETRY_MS 500

struct drain {
    cluster_t *self;
    json_t *ids;    /* the contexts to move, in order */
    json_t *peers;  /* their names */
    size_t i, next; /* the context being moved; the next peer */
    int waited_ms;  /* for the busy one */
    int tries;      /* peers tried for this one */
    json_t *moved;  /* [{id, replica, ms}] */
    json_t *stayed; /* [{id, why}] */
    cluster_drained_fn *done;
    void *arg;
    bool busy;     /* in pump(): a move answering at once does not recurse */
    bool answered; /* moved() came for the move pump() began */
};

static void pump(drain_t *d);

static void stay(drain_t *d, const char *id, const char *why)
{
    json_array_append_new(d->stayed, json_pack("{s:s, s:s}", "id", id, "why", why));
    log_warn("cluster: drain: context %s stays: %s", id, why);
    d->i++;
    d->tries = d->waited_ms = 0;
}

static void retry(loop_t *loop, int timer, void *arg)
{
    (void)loop, (void)timer;
    pump(arg);
}

static void moved(const sg_error_t *err, unsigned status, int64_t ms, void *arg)
{
    drain_t *d = arg;
    d->answered = true;
    const char *id = json_string_value(json_array_get(d->ids, d->i));
    const char *to =
        json_string_value(json_array_get(d->peers, (d->next - 1) % json_array_size(d->peers)));
    (void)status;
    if (!err) {
        json_array_append_new(d->moved,
                              json_pack("{s:s, s:s, s:I}", "id", id, "replica", to, "ms", ms));
        d->i++;
        d->tries = d->waited_ms = 0;
    } else if (++d->tries >= (int)json_array_size(d->peers)) {
        stay(d, id, err->msg);
    }
    if (!d->busy)
        pump(d);
}

static void pump(drain_t *d)
{
    cluster_t *self = d->self;
    d->busy = true;
    while (d->i < json_array_size(d->ids)) {
        const char *id = json_string_value(json_array_get(d->ids, d->i));
        kernel_t *k = kmgr_get(self->kmgr, id);
        if (!k) { /* gone meanwhile */
            d->i++;
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
        const char *to =
            json_string_value(json_array_get(d->peers, d->next++ % json_array_size(d->peers)));
        cleanup_error sg_error_t *err = NULL;
        d->answered = false;
        if (cluster_move(self, k, to, moved, d, &err) < 0) {
            stay(d, id, err->msg);
            continue;
        }
        if (!d->answered) { /* under way: moved() pumps on */
            d->busy = false;
            return;
        }
    }
    log_info("cluster: drained: %zu contexts moved, %zu stayed", json_array_size(d->moved),
             json_array_size(d->stayed));
    json_t *summary = json_pack("{s:O, s:O}", "moved", d->moved, "stayed", d->stayed);
    d->done(summary, d->arg);
    json_decref(summary);
    json_decref(d->ids);
    json_decref(d->peers);
    json_decref(d->moved);
    json_decref(d->stayed);
    free(d);
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
    if (!json_array_size(ids) || !json_object_size(self->peers) || !self->auth) {
        if (json_array_size(ids))
            log_warn("cluster: drain: no peers (--peers) or no --token: %zu contexts stay",
                     json_array_size(ids));
        json_decref(ids);
        return 0;
    }
    drain_t *d = xzalloc(sizeof *d);
    *d = (drain_t){.self = self,
                   .ids = ids,
                   .peers = json_array(),
                   .moved = json_array(),
                   .stayed = json_array(),
                   .done = done,
                   .arg = arg};
    const char *name;
    json_t *v;
    json_object_foreach (self->peers, name, v)
        if (strcmp(name, replica_id()) != 0) /* a peers file lists every replica */
            json_array_append_new(d->peers, json_string(name));
    if (!json_array_size(d->peers)) {
        log_warn("cluster: drain: no peer but this replica: %zu contexts stay",
                 json_array_size(ids));
        json_decref(d->peers);
        json_decref(d->moved);
        json_decref(d->stayed);
        json_decref(ids);
        free(d);
        return 0;
    }
    log_info("cluster: draining %zu contexts to %zu peers", json_array_size(ids),
             json_array_size(d->peers));
    pump(d);
    return json_array_size(ids);
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
    kmgr_set_stopping(self->kmgr); /* no new contexts here: GET /health says 503 */
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
