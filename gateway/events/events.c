/* events: sandboxes' lifecycle events, kept and read back (events.h). */
#include "gateway/events/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "gateway/observe/observe.h"

struct events {
    webhooks_t *hooks;
    kmgr_t *kmgr;
    int64_t keep_ms;
    json_t *list;       /* the events, oldest first */
    json_t *owners;     /* sandbox id -> tenant ("" for the admin's), once seen */
    json_int_t next_id; /* the next event's id */
};

/* The audit log's event names, and the lifecycle event each is. */
static const struct {
    const char *audit, *type;
} kinds[] = {
    {"context.create", "sandbox.lifecycle.created"},
    {"context.delete", "sandbox.lifecycle.killed"},
    {"context.pause", "sandbox.lifecycle.paused"},
    {"context.wake", "sandbox.lifecycle.resumed"}, /* any resume: the API's, an execution's */
    {"snapshot.create", "sandbox.lifecycle.checkpointed"},
    {"context.fork", "sandbox.lifecycle.forked"},
    {"context.network", "sandbox.lifecycle.updated"},
    {"sandbox.timeout", "sandbox.lifecycle.timed_out"},
    {"context.dead", "sandbox.lifecycle.oom"}, /* only with "oom" (out of memory) */
};

int64_t events_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void expire(events_t *self)
{
    int64_t oldest = events_now_ms() - self->keep_ms;
    size_t drop = 0, n = json_array_size(self->list);
    while (drop < n &&
           (n - drop > EVENTS_MAX ||
            json_integer_value(json_object_get(json_array_get(self->list, drop), "_ms")) < oldest))
        drop++;
    for (size_t i = 0; i < drop; i++)
        json_array_remove(self->list, 0);
}

/* The tenant a sandbox's event belongs to: who acted, else its owner. */
static const char *tenant_of(events_t *self, const char *sid, const audit_who_t *who)
{
    const char *known = json_string_value(json_object_get(self->owners, sid));
    if (known)
        return known;
    kernel_t *k = kmgr_get(self->kmgr, sid);
    const char *owner = k && !kernel_host(k) ? kernel_owner(k) : NULL;
    if (!owner && !k && who && who->tenant[0])
        owner = who->tenant;
    if (!owner && !k)
        return NULL; /* a context inside a sandbox, or one never seen */
    json_object_set_new(self->owners, sid, json_string(owner ? owner : ""));
    return json_string_value(json_object_get(self->owners, sid));
}

static void on_audit(const audit_who_t *who, const char *event, const json_t *fields, void *arg)
{
    events_t *self = arg;
    const char *type = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds && !type; i++)
        if (strcmp(event, kinds[i].audit) == 0)
            type = kinds[i].type;
    const char *sid = json_string_value(json_object_get(fields, "context"));
    const char *host = json_string_value(json_object_get(fields, "sandbox"));
    const char *outcome = json_string_value(json_object_get(fields, "outcome"));
    if (!type || !sid || (host && strcmp(host, sid) != 0) || (outcome && strcmp(outcome, "ok")) ||
        (strcmp(event, "context.dead") == 0 && !json_is_true(json_object_get(fields, "oom"))))
        return; /* not a sandbox's (a context in one), a pause that failed, a death not OOM's */
    if (strcmp(event, "context.create") == 0 && who && who->tenant[0])
        json_object_set_new(self->owners, sid, json_string(who->tenant));
    const char *tenant = tenant_of(self, sid, who);
    if (!tenant)
        return;
    int64_t ms = events_now_ms();
    const char *tpl = json_string_value(json_object_get(fields, "template"));
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)self->next_id++);
    json_t *e = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:s, s:{s:{}}, s:I}", "version",
                          "v2", "id", id, "type", type, "timestamp", resp_iso_time(ms), "sandboxId",
                          sid, "sandboxTeamId", tenant, "sandboxTemplateId", tpl ? tpl : "",
                          "sandboxBuildId", "", "sandboxExecutionId", "", "eventData",
                          "sandbox_metadata", "_ms", (json_int_t)ms);
    json_array_append_new(self->list, e);
    webhooks_push(self->hooks, e);
    if (strcmp(event, "context.delete") == 0)
        json_object_del(self->owners, sid);
    expire(self);
}

events_t *events_new(loop_t *loop, kmgr_t *kmgr, int64_t keep_ms, const char *state_dir,
                     const char *webhook_url, const char *webhook_secret, sg_error_t **err)
{
    webhooks_t *hooks = webhooks_new(loop, state_dir, webhook_url, webhook_secret, err);
    if (!hooks)
        return NULL;
    events_t *self = xzalloc(sizeof *self);
    *self = (events_t){.kmgr = kmgr,
                       .keep_ms = keep_ms,
                       .list = json_array(),
                       .owners = json_object(),
                       .next_id = 1,
                       .hooks = hooks};
    audit_set_tap(on_audit, self);
    return self;
}

void events_destroy(events_t **self_p)
{
    events_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    audit_set_tap(NULL, NULL);
    webhooks_destroy(&self->hooks);
    json_decref(self->list);
    json_decref(self->owners);
    free(self);
}

/* --- reading them back ---------------------------------------------------------------- */

/* Whether req may see e: its tenant's (an admin's: all), a sandbox token
 * its sandbox's only, and of the types asked (all when none). */
static bool visible(const http_req_t *req, const json_t *e, const char *sandbox,
                    const char *const *types, size_t ntypes)
{
    const char *tenant = json_string_value(json_object_get(e, "sandboxTeamId"));
    const char *sid = json_string_value(json_object_get(e, "sandboxId"));
    if (!http_may_see(req, *tenant ? tenant : NULL) || (req->scope && strcmp(req->scope, sid)) ||
        (sandbox && strcmp(sandbox, sid)))
        return false;
    const char *type = json_string_value(json_object_get(e, "type"));
    for (size_t i = 0; i < ntypes; i++)
        if (strcmp(types[i], type) == 0 ||
            (strncmp(type, "sandbox.lifecycle.", 18) == 0 && strcmp(types[i], type + 18) == 0))
            return true;
    return ntypes == 0;
}

static json_t *public_copy(const json_t *e)
{
    json_t *c = json_deep_copy(e);
    json_object_del(c, "_ms");
    return c;
}

typedef struct {
    const char *types[16];
    size_t ntypes;
} types_t;

static enum MHD_Result add_type(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    types_t *t = cls;
    if (strcmp(key, "types") != 0 && strcmp(key, "type") != 0)
        return MHD_YES;
    if (value && *value && t->ntypes < sizeof t->types / sizeof *t->types)
        t->types[t->ntypes++] = value;
    return MHD_YES;
}

static long query_long(const http_req_t *req, const char *name, long dflt, long lo, long hi,
                       bool *bad)
{
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
    if (!v)
        return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < lo || n > hi)
        *bad = true;
    return n;
}

/* GET /events?after=ID&limit=N&types=T&sandbox=ID: {"events", "next"}. */
static enum MHD_Result get_events(void *ctx, http_req_t *req)
{
    events_t *self = ctx;
    expire(self);
    bool bad = false;
    long after = query_long(req, "after", 0, 0, 1L << 62, &bad);
    long limit = query_long(req, "limit", 100, 1, EVENTS_PAGE_MAX, &bad);
    if (bad)
        return http_reply_errorf(req->conn, SG_E_INVALID,
                                 "after is an event's id (0: the oldest kept), limit 1..%d",
                                 EVENTS_PAGE_MAX);
    types_t t = {0};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, add_type, &t);
    const char *sandbox = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "sandbox");
    json_t *out = json_array();
    const char *next = NULL;
    size_t i;
    json_t *e;
    json_array_foreach (self->list, i, e) {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (atol(id) <= after || !visible(req, e, sandbox, t.types, t.ntypes))
            continue;
        if ((long)json_array_size(out) == limit)
            break;
        json_array_append_new(out, public_copy(e));
        next = id;
    }
    char cursor[32];
    snprintf(cursor, sizeof cursor, "%ld", next ? atol(next) : after);
    return http_reply_json(req->conn, 200, json_pack("{s:o, s:s}", "events", out, "next", cursor));
}

/* E2B's GET /events/sandboxes[/{id}]?offset&limit&orderAsc&types: an array,
 * newest first unless orderAsc=true. */
static enum MHD_Result e2b_events(void *ctx, http_req_t *req)
{
    events_t *self = ctx;
    expire(self);
    bool bad = false;
    long offset = query_long(req, "offset", 0, 0, EVENTS_MAX, &bad);
    long limit = query_long(req, "limit", 10, 1, 100, &bad);
    if (bad)
        return http_reply_json(
            req->conn, 400,
            json_pack("{s:i, s:s}", "code", 400, "message", "offset is 0 or more, limit 1..100"));
    const char *asc = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "orderAsc");
    bool ascending = asc && strcmp(asc, "true") == 0;
    const char *rest = req->rest && req->rest[0] == '/' ? req->rest + 1 : "";
    types_t t = {0};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, add_type, &t);
    json_t *out = json_array();
    size_t n = json_array_size(self->list);
    long skipped = 0;
    bool seen = !*rest; /* a sandbox of which the caller sees no event is unknown */
    for (size_t k = 0; k < n && !seen; k++)
        seen = visible(req, json_array_get(self->list, k), rest, NULL, 0);
    if (!seen) {
        json_decref(out);
        cleanup_free char *msg = xasprintf("sandbox \"%s\" not found", rest);
        return http_reply_json(req->conn, 404,
                               json_pack("{s:i, s:s}", "code", 404, "message", msg));
    }
    for (size_t k = 0; k < n && (long)json_array_size(out) < limit; k++) {
        const json_t *e = json_array_get(self->list, ascending ? k : n - 1 - k);
        if (!visible(req, e, *rest ? rest : NULL, t.types, t.ntypes) || skipped++ < offset)
            continue;
        json_array_append_new(out, public_copy(e));
    }
    return http_reply_json(req->conn, 200, out);
}

static enum MHD_Result webhooks(void *ctx, http_req_t *req)
{
    events_t *self = ctx;
    return webhooks_route(self->hooks, req);
}

int events_register(events_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"GET", "/events", get_events, 0, NULL},
        {"GET", "/events/sandboxes/*", e2b_events, 0, NULL},
        {"GET", "/events/webhooks/*", webhooks, 0, NULL},
        {"POST", "/events/webhooks/*", webhooks, 0, NULL},
        {"PATCH", "/events/webhooks/*", webhooks, 0, NULL},
        {"DELETE", "/events/webhooks/*", webhooks, 0, NULL},
    };
    const http_front_t front = {.name = "events", .ctx = self};
    return http_routes(http, &front, routes, sizeof routes / sizeof *routes, err);
}
