#include "gateway/tenants.h"

#include <string.h>

#include "common/log.h"
#include "gateway/http.h"
#include "gateway/metrics.h"

static tenants_config_t defaults;
static const keys_t *current;
static kmgr_t *sessions; /* what the quotas count */

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
                               .cpu_quota_us = (uint64_t)(t->cpus * 100000)};
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
            kernel_pending(k) || kernel_internet(k) || kernel_connections(k) > 0)
            continue;
        if (!best || kernel_last_activity(k) < kernel_last_activity(best))
            best = k;
    }
    return best;
}

static int refuse(const tenant_t *t, tenant_quota_t *quota, const char *name, long long limit,
                  sg_error_t **err, const char *why)
{
    quota->name = name;
    quota->limit = limit;
    char what[32];
    snprintf(what, sizeof what, "quota:%s", name);
    metrics_tenant(t->name, what);
    return sg_error_set(err, SG_E_QUOTA, "quota %s (%lld) of tenant reached: %s", name, limit, why);
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
    int max_live = t->max_live ? t->max_live : defaults.max_live;
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

int tenant_admit(const tenant_t *t, bool internet, tenant_quota_t *quota, sg_error_t **err)
{
    if (t->admin || !sessions)
        return 0;
    if (internet && !t->internet)
        return refuse(t, quota, "internet", 0, err,
                      "this key may not create sessions with a network");
    int max_contexts = t->max_contexts ? t->max_contexts : defaults.max_contexts;
    int contexts, live;
    count_sessions(t, &contexts, &live);
    if (max_contexts && contexts >= max_contexts)
        return refuse(t, quota, "max-contexts", max_contexts, err,
                      "delete one of its sessions first");
    return make_room(t, quota, err);
}

/* k's owner as quotas see it, into *t: false when it has none (an admin's
 * session).  A tenant the keys file no longer names has the defaults. */
static bool owner_quotas(const kernel_t *k, tenant_t *t)
{
    if (!tenant_by_name(kernel_owner(k), t)) {
        *t = (tenant_t){0};
        snprintf(t->name, sizeof t->name, "%s", kernel_owner(k));
    }
    return !t->admin && sessions != NULL;
}

int tenant_admit_wake(kernel_t *k, tenant_quota_t *quota, sg_error_t **err)
{
    tenant_t t;
    if (is_live(k) || !owner_quotas(k, &t))
        return 0;
    return make_room(&t, quota, err);
}

int tenant_admit_execution(const kernel_t *k, int queued, tenant_quota_t *quota, sg_error_t **err)
{
    tenant_t t;
    if (!owner_quotas(k, &t))
        return 0;
    int max_queued = t.max_queued ? t.max_queued : defaults.max_queued;
    if (!max_queued || queued < max_queued)
        return 0;
    return refuse(&t, quota, "max-queued", max_queued, err,
                  "its sessions have that many executions waiting or running; try again when one "
                  "ends");
}

enum MHD_Result tenant_reply_quota(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                   const sg_error_t *err)
{
    return http_reply_json(conn, 429,
                           json_pack("{s:s, s:s, s:I, s:s}", "error", "quota_exceeded", "quota",
                                     quota->name, "limit", (json_int_t)quota->limit, "message",
                                     err->msg));
}
