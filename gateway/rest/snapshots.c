/* snapshots: snapshots, fork, roll-back and templates over REST
 * (internal.h):
 *
 *   POST   /contexts/{context}/snapshots   {"name"?} -> 201 the snapshot
 *   GET    /contexts/{context}/snapshots   the context's snapshots
 *   GET    /snapshots                      the caller's snapshots
 *   GET    /snapshots/{snapshot}           one
 *   DELETE /snapshots/{snapshot}           204
 *   POST   /contexts/{context}/fork        {"keep_snapshot"?, "name"?} -> 201 a new context
 *   POST   /contexts/{context}/restore     {"snapshot"} -> 200 the context, rolled back
 *   GET    /templates                      the configured templates (--template)
 * (and POST /contexts {"snapshot"} or {"template"}: rest.c).  A snapshot is its tenant's:
 * {snapshot} resolves only the caller's (kernelmgr/manager/manager.h's kmgr_snapshot_t.owner). */
#include "gateway/rest/internal.h"

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"

/* A snapshot; snapshotID and names are E2B's names for id and name (its
 * SDKs' listSnapshots reads this list: e2b.c). */
json_t *api_snapshot_json(const kmgr_snapshot_t *s)
{
    return json_pack("{s:s, s:s, s:s*, s:o, s:I, s:s, s:s, s:o}", "id", s->id, "context_id",
                     s->context_id, "name", s->name, "created", resp_iso_time(s->created_ms),
                     "bytes", (json_int_t)s->bytes, "tenant", s->owner, "snapshotID", s->id,
                     "names", s->name ? json_pack("[s]", s->name) : json_array());
}

static void *resolve_snapshot(void *kmgr, const char *id, const http_req_t *req)
{
    (void)req; /* the owner check is the route layer's */
    return (void *)kmgr_snapshot_get(kmgr, id);
}

static const char *snapshot_owner(void *kmgr, void *snap)
{
    (void)kmgr;
    return ((const kmgr_snapshot_t *)snap)->owner;
}

static void audit_snapshot(const http_req_t *call, const char *event, const char *ctx,
                           const char *sid)
{
    audit_who_t who;
    http_who(call, "rest", &who);
    audit_event(&who, event, json_pack("{s:s?, s:s?}", "context", ctx, "snapshot", sid));
}

/* A snapshot or fork under way: the request waits on s for kmgr's callback. */
typedef struct {
    stream_t *s;
    const tenant_t *tenant; /* the caller's (fork) */
    audit_who_t who;
    bool fork, keep;
} taking_t;

/* The forked context from the snapshot just taken: answered when its
 * workspace exists, as POST /contexts is. */
static void fork_from(taking_t *t, const kmgr_snapshot_t *snap)
{
    api_t *self = t->s->api;
    tenant_quota_t quota;
    sg_error_t *err = NULL;
    kernel_t *k = api_create_context(self, t->tenant, "python", "/home/user", NULL, false, snap,
                                     NULL, NULL, NULL, &t->who, &quota, &err);
    cleanup_free char *sid = xstrdup(snap->id);
    if (!t->keep) /* its files stay until the new context runs (kernelmgr/manager/manager.h) */
        kmgr_snapshot_delete(self->kmgr, sid, NULL);
    if (!k) {
        json_t *e = http_error_body(err);
        api_stream_answer(t->s, err->kind == SG_E_QUOTA ? 429 : sg_error_http_status(err->kind), e);
        sg_error_free(&err);
        return;
    }
    json_t *answer = api_context_json(self, k);
    json_object_set_new(answer, "snapshot_id", t->keep ? json_string(sid) : json_null());
    json_decref(t->s->agg);
    t->s->agg = answer;
    t->s->status = 201;
    if (kernel_prepared(k)) {
        api_stream_answer(t->s, 201, json_incref(answer));
        return;
    }
    api_stream_wait(t->s, k, KERNEL_EV_PREPARED);
}

static void on_taken(const kmgr_snapshot_t *snap, const sg_error_t *err, void *arg)
{
    taking_t *t = arg;
    stream_t *s = t->s;
    if (err) {
        log_info("api: snapshot failed: %s", err->msg);
        api_stream_answer(s, sg_error_http_status(err->kind), http_error_body(err));
    } else if (s->done) { /* the client left: nobody to answer, nothing to fork */
        if (t->fork && !t->keep)
            kmgr_snapshot_delete(s->api->kmgr, snap->id, NULL);
        api_stream_unref(s);
    } else if (t->fork) {
        fork_from(t, snap);
    } else {
        api_stream_answer(s, 201, api_snapshot_json(snap));
    }
    free(t);
}

/* POST /contexts/{context}/snapshots and /fork: both take a snapshot first. */
static enum MHD_Result take(api_t *self, http_req_t *call, bool fork)
{
    if (call->resumed) {
        stream_t *s = call->state;
        if (!s->done)
            return resp_wait(s->out);
        return http_reply_json(call->conn, s->status, json_incref(s->agg));
    }
    kernel_t *k = http_arg(call, "context");
    enum MHD_Result ret = MHD_NO;
    json_t *req =
        call->len ? api_parse_body(call->conn, call->body, call->len, &ret) : json_object();
    json_t *name = NULL, *keep = NULL;
    if (!req)
        return ret;
    if (!api_field(req, "name", JSON_STRING, &name, call->conn, &ret) ||
        (fork && !api_field(req, "keep_snapshot", JSON_TRUE, &keep, call->conn, &ret))) {
        json_decref(req);
        return ret;
    }
    sg_error_t *err = NULL;
    if (fork && tenant_check_contexts(call->tenant, &err) < 0) {
        json_decref(req); /* the new context would be refused: no snapshot for it either */
        return reply_failed(call->conn, &err);
    }
    stream_t *s = api_stream_new(self, call->conn, k); /* refs: the callback's, the request's */
    s->json_mode = s->snapshot_wait = true;
    taking_t *t = xzalloc(sizeof *t);
    *t = (taking_t){.s = s, .tenant = call->tenant, .fork = fork, .keep = json_is_true(keep)};
    http_who(call, "rest", &t->who);
    int r = kmgr_snapshot(self->kmgr, k, json_string_value(name), on_taken, t, &err);
    json_decref(req);
    if (r < 0) {
        free(t);
        s->done = true;
        api_stream_unref(s); /* the callback's: none comes */
        api_stream_unref(s); /* the request's: no state is kept */
        return reply_failed(call->conn, &err);
    }
    audit_snapshot(call, fork ? "context.fork" : "snapshot.create", kernel_id(k), NULL);
    call->state = s;
    if (s->done) /* answered already (no launcher) */
        return http_reply_json(call->conn, s->status, json_incref(s->agg));
    return resp_wait(s->out);
}

static enum MHD_Result snapshot_create(void *arg, http_req_t *call)
{
    return take(arg, call, false);
}

static enum MHD_Result context_fork(void *arg, http_req_t *call)
{
    return take(arg, call, true);
}

/* The caller's snapshots; of one context when ctx is not NULL (or
 * ?sandboxID=, E2B's name for it); ?name= keeps those of that name. */
static enum MHD_Result list(api_t *self, http_req_t *call, const char *ctx)
{
    const char *q_ctx = MHD_lookup_connection_value(call->conn, MHD_GET_ARGUMENT_KIND, "sandboxID");
    const char *q_name = MHD_lookup_connection_value(call->conn, MHD_GET_ARGUMENT_KIND, "name");
    ctx = ctx ? ctx : q_ctx;
    json_t *out = json_array();
    for (size_t i = 0; i < kmgr_snapshot_count(self->kmgr); i++) {
        const kmgr_snapshot_t *s = kmgr_snapshot_at(self->kmgr, i);
        if (!s->deleted && !s->template_of && http_may_see(call, s->owner) &&
            (!ctx || strcmp(ctx, s->context_id) == 0) &&
            (!q_name || (s->name && strcmp(q_name, s->name) == 0)))
            json_array_append_new(out, api_snapshot_json(s));
    }
    return http_reply_json(call->conn, 200, out);
}

static enum MHD_Result context_snapshots(void *arg, http_req_t *call)
{
    return list(arg, call, kernel_id(http_arg(call, "context")));
}

static enum MHD_Result snapshots_list(void *arg, http_req_t *call)
{
    return list(arg, call, NULL);
}

static enum MHD_Result snapshot_get(void *arg, http_req_t *call)
{
    return http_reply_json(call->conn, 200, api_snapshot_json(http_arg(call, "snapshot")));
}

static enum MHD_Result snapshot_delete(void *arg, http_req_t *call)
{
    api_t *self = arg;
    const kmgr_snapshot_t *snap = http_arg(call, "snapshot");
    cleanup_free char *sid = xstrdup(snap->id);
    cleanup_free char *ctx = xstrdup(snap->context_id);
    sg_error_t *err = NULL;
    if (kmgr_snapshot_delete(self->kmgr, sid, &err) < 0)
        return reply_failed(call->conn, &err);
    audit_snapshot(call, "snapshot.delete", ctx, sid);
    return reply_status(call->conn, 204);
}

/* Answered once the context runs again from the snapshot. */
static enum MHD_Result context_restore(void *arg, http_req_t *call)
{
    api_t *self = arg;
    if (call->resumed) {
        stream_t *s = call->state;
        if (!s->done)
            return resp_wait(s->out);
        return http_reply_json(call->conn, s->status ? s->status : 200, json_incref(s->agg));
    }
    kernel_t *k = http_arg(call, "context");
    enum MHD_Result ret = MHD_NO;
    json_t *req = api_parse_body(call->conn, call->body, call->len, &ret);
    json_t *sid = NULL;
    if (!req)
        return ret;
    const kmgr_snapshot_t *snap = NULL;
    sg_error_t *err = NULL;
    tenant_quota_t quota;
    if (!api_field(req, "snapshot", JSON_STRING, &sid, call->conn, &ret)) {
    } else if (!sid) {
        ret = http_reply_errorf(call->conn, SG_E_INVALID, "'snapshot': required (a snapshot's id)");
    } else if (!(snap = http_resolve(call, "snapshot", json_string_value(sid)))) {
        ret = http_reply_unknown(call, "snapshot", json_string_value(sid));
    } else if (tenant_admit_wake(k, &quota, &err) < 0 ||
               kmgr_restore(self->kmgr, k, snap->id, &err) < 0) {
        ret = api_reply_refused(call->conn, &quota, &err);
    } else {
        audit_snapshot(call, "context.restore", kernel_id(k), snap->id);
        stream_t *s = api_stream_new(self, call->conn, k);
        s->json_mode = s->restoring = true;
        s->agg = api_context_json(self, k);
        s->status = 200;
        call->state = s;
        api_stream_wait(s, k, KERNEL_EV_READY);
        ret = resp_wait(s->out);
    }
    json_decref(req);
    return ret;
}

/* Templates are the server's, the same for every tenant; where their roots
 * live on the host is the operator's business, not a tenant's. */
static enum MHD_Result templates_list(void *arg, http_req_t *call)
{
    api_t *self = arg;
    const sandbox_config_t *sc = &kmgr_config(self->kmgr)->sandbox;
    json_t *list = json_array();
    for (size_t i = 0; i < sc->ntemplates; i++) {
        const sandbox_template_t *t = &sc->templates[i];
        const char *specname = t->kernelspec ? t->kernelspec : "python3";
        const kspec_t *ks = kspecs_get(kmgr_kspecs(self->kmgr), specname);
        const char *root = t->image ? "image" : t->root ? "directory" : "host";
        json_array_append_new(
            list,
            json_pack("{s:s, s:s, s:s, s:s, s:b, s:i, s:I, s:I}", "name", t->name, "kernelspec",
                      specname, "language", ks ? ks->language : "", "root", root, "preload",
                      t->preload != NULL, "pool_size", t->pool_size, "pool_ready",
                      (json_int_t)kmgr_pool_ready(self->kmgr, t->name), "snapshot_bytes",
                      (json_int_t)kmgr_template_snapshot_bytes(self->kmgr, t->name)));
    }
    return http_reply_json(call->conn, 200, list);
}

int api_snapshots_register(api_t *self, http_server_t *http, const http_front_t *front,
                           sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/contexts/{context}/snapshots", snapshot_create, 0, NULL},
        {"GET", "/contexts/{context}/snapshots", context_snapshots, 0, NULL},
        {"POST", "/contexts/{context}/fork", context_fork, 0, NULL},
        {"POST", "/contexts/{context}/restore", context_restore, 0, NULL},
        {"GET", "/snapshots", snapshots_list, 0, NULL},
        {"GET", "/snapshots/{snapshot}", snapshot_get, 0, NULL},
        {"DELETE", "/snapshots/{snapshot}", snapshot_delete, 0, NULL},
        {"GET", "/templates", templates_list, 0, NULL},
    };
    if (http_param(http, "snapshot", resolve_snapshot, snapshot_owner, self->kmgr,
                   "no snapshot '%s'", err) < 0)
        return -1;
    return http_routes(http, front, routes, sizeof routes / sizeof routes[0], err);
}

/* --- contexts moving between replicas (gateway/cluster/) ------------------------------ */

const json_t *api_context_meta(api_t *self, const char *id)
{
    return json_object_get(self->contexts, id);
}

kernel_t *api_context_move_in(api_t *self, const kmgr_snapshot_t *snap, const json_t *meta,
                              const audit_who_t *who, sg_error_t **err)
{
    tenant_t t;
    tenant_quota_t quota;
    if (!tenant_by_name(snap->owner, &t)) {
        sg_error_set(err, SG_E_NOTFOUND, "tenant '%s' has no key here", snap->owner);
        return NULL;
    }
    if (tenant_admit(&t, snap->internet, &quota, err) < 0)
        return NULL;
    kmgr_start_opts_t so = tenant_start_opts(&t, snap->internet);
    so.snapshot = snap->id;
    so.id = snap->context_id;
    kernel_t *k = kmgr_start_with(self->kmgr, snap->kernelspec, &so, NULL, NULL, err);
    if (k == NULL)
        return NULL;
    json_t *m = json_is_object(meta)
                    ? json_deep_copy(meta)
                    : json_pack("{s:s, s:s}", "language", "python", "cwd", "/home/user");
    json_object_set_new(m, "id", json_string(kernel_id(k)));
    json_object_del(m, "sandbox"); /* a context with its own sandbox, here too */
    json_object_set_new(self->contexts, kernel_id(k), m);
    api_record_write(self, kernel_id(k));
    audit_event(who, "context.move_in",
                json_pack("{s:s, s:s, s:s}", "context", kernel_id(k), "snapshot", snap->id,
                          "tenant", snap->owner));
    return k;
}
