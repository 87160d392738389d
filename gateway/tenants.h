/* tenants: what a tenant may start and run, checked the same way by every front end.
 *
 * A session belongs to the tenant whose key created it (kernel_owner); the
 * route layer answers another tenant's ids as unknown (http.h's owner
 * functions).  This module holds the quotas of the keys file (keys.h) and
 * the server-wide defaults for tenants whose line names none:
 *
 *   max-contexts  sessions, live and paused            429 past it
 *   max-live      live (not paused) kernels at once,   the tenant's least
 *                 checked when a session starts and    recently used idle
 *                 when one is resumed or restarted     session is paused to
 *                 (tenant_admit_wake)                  make room; 429 when
 *                                                      none can be
 *   max-queued    executions waiting or running in     429 past it (MCP: a
 *                 its sessions at once, whichever      tool error; the
 *                 front end asked (exec.c)             WebSocket: an error
 *                                                      execute_reply)
 *   internet      whether its sessions may have a network
 *   memory, cpus  its sandboxes' memory limit and CPU quota, when below the
 *                 server's --memory and --cpus (tenant_start_opts)
 *
 * Quotas belong to the sessions' owner: an admin's sessions (--token's, or
 * a key marked admin) have none, and an admin acting on a tenant's session
 * is held to that tenant's quotas.
 */
#ifndef SG_TENANTS_H
#define SG_TENANTS_H

#include <jansson.h>
#include <microhttpd.h>

#include "gateway/http.h"
#include "gateway/keys.h"
#include "kernelmgr/kmgr.h"

typedef struct {
    int max_contexts; /* per tenant, when its line names none; 0: no limit */
    int max_live;
    int max_queued;
} tenants_config_t;

/* The server-wide defaults (main.c sets them once). */
void tenants_configure(const tenants_config_t *cfg);
/* The sessions the quotas count (borrowed; main.c, once kmgr exists; NULL
 * when it goes: then nothing is counted and everything is admitted). */
void tenants_attach(kmgr_t *kmgr);

/* What a new session of t's gets (kmgr_start_with): t as its owner, and
 * the memory= and cpus= of t's line as its sandboxes' ceilings (the lower
 * of each and the server's --memory and --cpus applies). */
kmgr_start_opts_t tenant_start_opts(const tenant_t *t, bool internet);

/* A quota that refused: its name as the keys file spells it, and its value. */
typedef struct {
    const char *name;
    long long limit;
} tenant_quota_t;

/* Whether t may start one more session (internet: with a network).  0,
 * perhaps after pausing one of t's idle sessions for max-live; else -1 with
 * *err (SG_E_QUOTA) and *quota saying which. */
int tenant_admit(const tenant_t *t, bool internet, tenant_quota_t *quota, sg_error_t **err);

/* Whether k, paused or dead, may run again (resumed, explicitly or by what
 * is sent to it, or restarted) within its owner's max-live: 0 (at once for
 * a k that is live already), perhaps after pausing another of the owner's
 * idle sessions; else -1 with *err (SG_E_QUOTA) and *quota. */
int tenant_admit_wake(kernel_t *k, tenant_quota_t *quota, sg_error_t **err);

/* Whether k may take one more execution when its owner's sessions have
 * queued executions waiting or running (exec.c counts them): 0, or -1 with
 * *err (SG_E_QUOTA) and *quota (max-queued). */
int tenant_admit_execution(const kernel_t *k, int queued, tenant_quota_t *quota, sg_error_t **err);

/* The 429 for a refused quota: {"error": "quota_exceeded", "quota", "limit",
 * "message"}. */
enum MHD_Result tenant_reply_quota(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                   const sg_error_t *err);

/* The keys in use (main.c, at start and each SIGHUP; borrowed), for
 * tenant_by_name. */
void tenants_set_keys(const keys_t *keys);
/* The tenant named name now, into *out: "admin" is --token's; false for a
 * name the keys file no longer has. */
bool tenant_by_name(const char *name, tenant_t *out);

/* A parameter kind for kmgr sessions (the REST API's {context}, Jupyter's
 * {kernel}): resolve and owner functions for http_param, whose ctx is the
 * kmgr_t. */
void *tenants_resolve_session(void *kmgr, const char *id, const http_req_t *req);
const char *tenants_session_owner(void *kmgr, void *kernel);

/* Whether t may see a session of owner's (an admin sees all). */
bool tenant_sees(const tenant_t *t, const char *owner);

#endif
