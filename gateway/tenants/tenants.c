#include "gateway/tenants/tenants.h"

#include <string.h>
#include <sys/statvfs.h>

#include "common/log.h"
#include "gateway/http/http.h"
#include "gateway/observe/observe.h"

static tenants_config_t defaults;
static const keys_t *current;
static kmgr_t *sessions; /* what the quotas count */
static struct {
    tenant_count_fn count;
    void *ctx;
} sources[TENANT_NSOURCES][4];

void tenants_count_source(tenant_source_t source, tenant_count_fn count, void *ctx)
{
    for (size_t i = 0; i < sizeof sources[0] / sizeof sources[0][0]; i++)
        if (!sources[source][i].count) {
            sources[source][i].count = count;
            sources[source][i].ctx = ctx;
            return;
        }
    abort(); /* a programmer's error: more sources than room */
}

static long long count_of(tenant_source_t source, const char *tenant);

void tenants_uncount_source(tenant_source_t source, tenant_count_fn count, void *ctx)
{
    for (size_t i = 0; i < sizeof sources[0] / sizeof sources[0][0]; i++)
        if (sources[source][i].count == count && sources[source][i].ctx == ctx)
            sources[source][i].count = NULL;
}

long long tenant_counted(const char *owner, tenant_source_t source)
{
    return count_of(source, owner);
}

static long long count_of(tenant_source_t source, const char *tenant)
{
    long long n = 0;
    for (size_t i = 0; i < sizeof sources[0] / sizeof sources[0][0]; i++)
        if (sources[source][i].count)
            n += sources[source][i].count(sources[source][i].ctx, tenant);
    return n;
}

/* --token's tenant (http.c has the same): sees and manages everything. */
static const tenant_t admin = {.name = "admin", .admin = true, .internet = true};

void tenants_set_keys(const keys_t *keys)
{
    current = keys;
}

bool tenant_by_name(const char *name, tenant_t *out)
{
    const tenant_t *t = strcmp(name, "admin") == 0 ? &admin : keys_find(current, name);
    if (t)
        *out = *t;
    return t != NULL;
}

void tenants_configure(const tenants_config_t *cfg)
{
    defaults = *cfg;
}

void tenants_attach(kmgr_t *kmgr)
{
    sessions = kmgr;
}

bool tenant_sees(const tenant_t *t, const char *owner)
{
    return t && (t->admin || (owner && strcmp(owner, t->name) == 0));
}

void *tenants_resolve_session(void *kmgr, const char *id, const http_req_t *req)
{
    (void)req; /* the owner check is the route layer's (tenants_session_owner) */
    return kmgr_get(kmgr, id);
}

const char *tenants_session_owner(void *kmgr, void *kernel)
{
    (void)kmgr;
    return kernel_owner(kernel);
}

kmgr_start_opts_t tenant_start_opts(const tenant_t *t, bool internet)
{
    return (kmgr_start_opts_t){.internet = internet,
                               .owner = t->name,
                               .memory_bytes = t->memory_mib << 20,
                               .cpu_quota_us = (uint64_t)(t->cpus * 100000),
                               .egress_limited = t->egress[0] != 0};
}

/* Live: its sandbox runs, or is starting.  A session being paused is on
 * its way out, so a session paused to make room no longer counts. */
static bool is_live(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    return st != KERNEL_PAUSED && st != KERNEL_PAUSING && st != KERNEL_DEAD;
}

/* t's least recently used session that can pause now, or NULL. */
static kernel_t *lru_idle(const tenant_t *t)
{
    kernel_t *best = NULL;
    for (size_t i = 0; i < kmgr_count(sessions); i++) {
        kernel_t *k = kmgr_at(sessions, i);
        if (strcmp(kernel_owner(k), t->name) != 0 || kernel_state(k) != KERNEL_IDLE ||
            kernel_pending(k) || (kernel_internet(k) && !kmgr_saves_network(sessions)) ||
            kernel_connections(k) > 0)
            continue;
        if (!best || kernel_last_activity(k) < kernel_last_activity(best))
            best = k;
    }
    return best;
}

static int refuse(const tenant_t *t, tenant_quota_t *quota, const char *name, long long limit,
                  sg_error_t **err, const char *why)
{
    if (quota) {
        quota->name = name;
        quota->limit = limit;
    }
    char what[40];
    snprintf(what, sizeof what, "quota:%s", name);
    metrics_tenant(t->name, what);
    return sg_error_quota(err, name, limit, "quota %s (%lld) of tenant reached: %s", name, limit,
                          why);
}

/* t's limit for the count option called name (keys.h's tenant_count_options), or
 * the server's default; 0: no limit. */
static long long limit_of(const tenant_t *t, const char *name)
{
    for (size_t i = 0; i < tenant_ncount_options; i++)
        if (strcmp(tenant_count_options[i].name, name) == 0) {
            int n = tenant_count(t, &tenant_count_options[i]);
            return n ? n : tenant_count(&defaults, &tenant_count_options[i]);
        }
    abort(); /* a programmer's error: a quota the keys file does not have */
}

/* The bytes a workspace's own file system uses (--workspace-size gives each
 * one); 0 for a plain directory on the state's file system, which that
 * file system's free space bounds. */
static uint64_t workspace_used(const kernel_t *k)
{
    struct statvfs v;
    const kmgr_config_t *c = kmgr_config(sessions);
    if (!c->sandbox.workspace_bytes || statvfs(kernel_workspace(k), &v) < 0)
        return 0;
    return (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
}

void tenant_usage(const char *owner, tenant_usage_t *out)
{
    *out = (tenant_usage_t){0};
    if (!sessions)
        return;
    for (size_t i = 0; i < kmgr_count(sessions); i++) {
        const kernel_t *k = kmgr_at(sessions, i);
        if (strcmp(kernel_owner(k), owner) == 0)
            out->disk_bytes += workspace_used(k) + kernel_pause_info(k).checkpoint_bytes;
    }
    for (size_t i = 0; i < kmgr_snapshot_count(sessions); i++) {
        const kmgr_snapshot_t *s = kmgr_snapshot_at(sessions, i);
        /* a deleted one still in use keeps its files, but no longer counts:
         * they go when the starts restoring it have their own */
        if (s->deleted || s->template_of || strcmp(s->owner, owner) != 0)
            continue;
        out->snapshots++;
        out->snapshot_bytes += s->bytes;
    }
    out->disk_bytes += out->snapshot_bytes;
}

/* t's disk within max-disk-mib: 0, else -1 (what is refused: what). */
static int check_disk(const tenant_t *t, tenant_quota_t *quota, const char *what, sg_error_t **err)
{
    long long mib = limit_of(t, "max-disk-mib");
    if (!mib)
        return 0;
    tenant_usage_t u;
    tenant_usage(t->name, &u);
    if (u.disk_bytes < (uint64_t)mib << 20)
        return 0;
    char why[128];
    snprintf(why, sizeof why, "its workspaces, checkpoints and snapshots use %llu MiB; %s",
             (unsigned long long)(u.disk_bytes >> 20), what);
    return refuse(t, quota, "max-disk-mib", mib, err, why);
}

/* t's sessions (live and paused), and how many of them are live. */
static void count_sessions(const tenant_t *t, int *contexts, int *live)
{
    *contexts = *live = 0;
    for (size_t i = 0; i < kmgr_count(sessions); i++) {
        const kernel_t *k = kmgr_at(sessions, i);
        if (strcmp(kernel_owner(k), t->name) != 0)
            continue;
        (*contexts)++;
        *live += is_live(k);
    }
}

/* Room for one more live session of t's: 0, perhaps after pausing its least
 * recently used idle session (the pause is started, not waited for); else
 * -1 (max-live). */
static int make_room(const tenant_t *t, tenant_quota_t *quota, sg_error_t **err)
{
    int max_live = (int)limit_of(t, "max-live");
    int contexts, live;
    count_sessions(t, &contexts, &live);
    if (!max_live || live < max_live)
        return 0;
    kernel_t *k = lru_idle(t);
    sg_error_t *perr = NULL;
    if (!k || kernel_pause(k, &perr) < 0) {
        sg_error_free(&perr);
        return refuse(t, quota, "max-live", max_live, err,
                      "none of its live sessions is idle and can be paused");
    }
    log_info("tenant %s: session %s paused to stay within max-live (%d)", t->name, kernel_id(k),
             max_live);
    return 0;
}

/* Room for one more session of t's by count: max-contexts and max-disk-mib. */
static int check_contexts(const tenant_t *t, tenant_quota_t *quota, sg_error_t **err)
{
    int max_contexts = (int)limit_of(t, "max-contexts");
    int contexts, live;
    count_sessions(t, &contexts, &live);
    if (max_contexts && contexts >= max_contexts)
        return refuse(t, quota, "max-contexts", max_contexts, err,
                      "delete one of its sessions first");
    return check_disk(t, quota, "delete a session or a snapshot first", err);
}

int tenant_admit(const tenant_t *t, bool internet, tenant_quota_t *quota, sg_error_t **err)
{
    if (t->admin || !sessions)
        return 0;
    if (internet && !t->internet)
        return refuse(t, quota, "internet", 0, err,
                      "this key may not create sessions with a network");
    if (check_contexts(t, quota, err) < 0)
        return -1;
    return make_room(t, quota, err);
}

int tenant_check_contexts(const tenant_t *t, sg_error_t **err)
{
    return t->admin || !sessions ? 0 : check_contexts(t, NULL, err);
}

/* owner's quotas into *t: false for an admin's (no quotas), or before
 * anything is counted. */
static bool quotas_of(const char *owner, tenant_t *t)
{
    if (!tenant_by_name(owner, t)) {
        *t = (tenant_t){0};
        snprintf(t->name, sizeof t->name, "%s", owner);
    }
    return !t->admin && sessions != NULL;
}

/* k's owner as quotas see it, into *t (quotas_of). */
static bool owner_quotas(const kernel_t *k, tenant_t *t)
{
    return quotas_of(kernel_owner(k), t);
}

int tenant_admit_wake(kernel_t *k, tenant_quota_t *quota, sg_error_t **err)
{
    tenant_t t;
    if (is_live(k) || !owner_quotas(k, &t))
        return 0;
    return make_room(&t, quota, err);
}

int tenant_wake_gate(kernel_t *k, sg_error_t **err)
{
    return tenant_admit_wake(k, NULL, err);
}

int tenant_admit_work(const char *owner, sg_error_t **err)
{
    tenant_t t;
    if (!quotas_of(owner, &t))
        return 0;
    long long max = limit_of(&t, "max-queued");
    if (!max || count_of(TENANT_QUEUED, owner) < max)
        return 0;
    return refuse(&t, NULL, "max-queued", max, err,
                  "its sessions have that many executions, commands, envd processes and MCP "
                  "calls waiting or running; try again when one ends");
}

int tenant_admit_more(const char *owner, tenant_source_t source, long long add, sg_error_t **err)
{
    tenant_t t;
    if (source != TENANT_VOLUME_MIB || !quotas_of(owner, &t))
        return 0;
    long long max = limit_of(&t, "max-volume-mib"), have = count_of(source, owner);
    if (!max || have + add <= max)
        return 0;
    char why[128];
    snprintf(why, sizeof why, "its volumes take %lld MiB and this one %lld more; delete one first",
             have, add);
    return refuse(&t, NULL, "max-volume-mib", max, err, why);
}

int tenant_admit_new(const char *owner, tenant_source_t source, sg_error_t **err)
{
    static const char *const quota[] = {[TENANT_JUPYTER_SESSIONS] = "max-jupyter-sessions",
                                        [TENANT_MCP_SESSIONS] = "max-mcp-sessions"};
    static const char *const what[] = {
        [TENANT_JUPYTER_SESSIONS] = "Jupyter sessions", [TENANT_MCP_SESSIONS] = "MCP sessions"};
    tenant_t t;
    if (source == TENANT_QUEUED)
        return tenant_admit_work(owner, err);
    if (!quotas_of(owner, &t))
        return 0;
    long long max = limit_of(&t, quota[source]);
    if (!max || count_of(source, owner) < max)
        return 0;
    char why[96];
    snprintf(why, sizeof why, "it has that many %s; delete one first", what[source]);
    return refuse(&t, NULL, quota[source], max, err, why);
}

int tenant_admit_snapshot(kernel_t *k, sg_error_t **err)
{
    tenant_t t;
    if (!owner_quotas(k, &t))
        return 0;
    tenant_usage_t u;
    tenant_usage(t.name, &u);
    long long max = limit_of(&t, "max-snapshots"), mib = limit_of(&t, "max-snapshot-mib");
    if (max && u.snapshots >= max)
        return refuse(&t, NULL, "max-snapshots", max, err,
                      "it has that many snapshots (deleted contexts' included); delete one first");
    if (mib && u.snapshot_bytes >= (uint64_t)mib << 20)
        return refuse(&t, NULL, "max-snapshot-mib", mib, err,
                      "its snapshots use that much disk; delete one first");
    return check_disk(&t, NULL, "delete a snapshot first", err);
}

enum MHD_Result tenant_reply_quota(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                   const sg_error_t *err)
{
    (void)quota; /* err names it (sg_error_quota) */
    return http_reply_error(conn, err);
}

/* --- GET /metrics: the tenants' families ------------------------------------- */

/* What each tenant with sessions or snapshots holds now of what its quotas
 * count (tenants.h). */
static void usage(FILE *f, const kmgr_t *kmgr, json_t *live, json_t *paused)
{
    json_t *names = json_object();
    json_object_update(names, live);
    json_object_update(names, paused);
    for (size_t i = 0; i < kmgr_snapshot_count(kmgr); i++) {
        const kmgr_snapshot_t *s = kmgr_snapshot_at(kmgr, i);
        if (!s->deleted && !s->template_of)
            json_object_set_new(names, s->owner, json_true());
    }
    metrics_family(f, "sandgate_tenant_usage", "gauge",
                   "What a tenant holds now of what its quotas count, by tenant and resource.");
    const char *name;
    json_t *v;
    json_object_foreach (names, name, v) {
        tenant_usage_t u;
        tenant_usage(name, &u);
        const struct {
            const char *what;
            long long n;
        } rows[] = {{"queued", tenant_counted(name, TENANT_QUEUED)},
                    {"jupyter_sessions", tenant_counted(name, TENANT_JUPYTER_SESSIONS)},
                    {"mcp_sessions", tenant_counted(name, TENANT_MCP_SESSIONS)},
                    {"snapshots", u.snapshots},
                    {"snapshot_bytes", (long long)u.snapshot_bytes},
                    {"disk_bytes", (long long)u.disk_bytes}};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
            fprintf(f, "sandgate_tenant_usage{tenant=\"%s\",resource=\"%s\"} %lld\n", name,
                    rows[r].what, rows[r].n);
    }
    json_decref(names);
}

void tenants_metrics(FILE *f, const kmgr_t *kmgr)
{
    json_t *live = json_object(), *paused = json_object();
    for (size_t i = 0; i < kmgr_count(kmgr); i++) {
        const kernel_t *k = kmgr_at((kmgr_t *)kmgr, i);
        json_t *m = kernel_state(k) == KERNEL_PAUSED ? paused : live;
        const char *o = kernel_owner(k);
        json_object_set_new(m, o, json_integer(json_integer_value(json_object_get(m, o)) + 1));
    }
    const char *name;
    json_t *v;
    metrics_family(f, "sandgate_tenant_sessions", "gauge", "Sessions by tenant and state.");
    json_object_foreach (live, name, v)
        fprintf(f, "sandgate_tenant_sessions{tenant=\"%s\",state=\"live\"} %lld\n", name,
                (long long)json_integer_value(v));
    json_object_foreach (paused, name, v)
        fprintf(f, "sandgate_tenant_sessions{tenant=\"%s\",state=\"paused\"} %lld\n", name,
                (long long)json_integer_value(v));
    metrics_write_tenants(f);
    usage(f, kmgr, live, paused);
    json_decref(live);
    json_decref(paused);
}
