#include "gateway/tenants.h"

#include <string.h>

#include "common/log.h"
#include "gateway/http.h"
#include "gateway/metrics.h"

static tenants_config_t defaults;
static const keys_t *current;
static const char *current_tenant; /* tenant_admit's, for refuse() */

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

static bool is_live(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    return st != KERNEL_PAUSED && st != KERNEL_DEAD;
}

/* t's least recently used session that can pause now, or NULL. */
static kernel_t *lru_idle(kmgr_t *kmgr, const tenant_t *t)
{
    kernel_t *best = NULL;
    for (size_t i = 0; i < kmgr_count(kmgr); i++) {
        kernel_t *k = kmgr_at(kmgr, i);
        if (strcmp(kernel_owner(k), t->name) != 0 || kernel_state(k) != KERNEL_IDLE ||
            kernel_pending(k) || kernel_internet(k) || kernel_connections(k) > 0)
            continue;
        if (!best || kernel_last_activity(k) < kernel_last_activity(best))
            best = k;
    }
    return best;
}

static int refuse(tenant_quota_t *quota, const char *name, long long limit, sg_error_t **err,
                  const char *why)
{
    quota->name = name;
    quota->limit = limit;
    char what[32];
    snprintf(what, sizeof what, "quota:%s", name);
    metrics_tenant(current_tenant, what);
    return sg_error_set(err, SG_E_QUOTA, "quota %s (%lld) of tenant reached: %s", name, limit, why);
}

int tenant_admit(kmgr_t *kmgr, const tenant_t *t, bool internet, tenant_quota_t *quota,
                 sg_error_t **err)
{
    current_tenant = t->name;
    if (t->admin)
        return 0;
    if (internet && !t->internet)
        return refuse(quota, "internet", 0, err, "this key may not create sessions with a network");
    int max_contexts = t->max_contexts ? t->max_contexts : defaults.max_contexts;
    int max_live = t->max_live ? t->max_live : defaults.max_live;
    int contexts = 0, live = 0;
    for (size_t i = 0; i < kmgr_count(kmgr); i++) {
        const kernel_t *k = kmgr_at(kmgr, i);
        if (strcmp(kernel_owner(k), t->name) != 0)
            continue;
        contexts++;
        live += is_live(k);
    }
    if (max_contexts && contexts >= max_contexts)
        return refuse(quota, "max-contexts", max_contexts, err, "delete one of its sessions first");
    if (max_live && live >= max_live) {
        kernel_t *k = lru_idle(kmgr, t);
        sg_error_t *perr = NULL;
        if (!k || kernel_pause(k, &perr) < 0) {
            sg_error_free(&perr);
            return refuse(quota, "max-live", max_live, err,
                          "none of its live sessions is idle and can be paused");
        }
        log_info("tenant %s: session %s paused to stay within max-live (%d)", t->name, kernel_id(k),
                 max_live);
    }
    return 0;
}

enum MHD_Result tenant_reply_quota(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                   const sg_error_t *err)
{
    return http_reply_json(conn, 429,
                           json_pack("{s:s, s:s, s:I, s:s}", "error", "quota_exceeded", "quota",
                                     quota->name, "limit", (json_int_t)quota->limit, "message",
                                     err->msg));
}
