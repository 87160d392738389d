/* tenants: what a tenant may make, wake and run — the one place that decides,
 * for every front end.
 *
 * A session belongs to the tenant whose key created it (kernel_owner); the
 * route layer answers another tenant's ids as unknown (http.h's owner
 * functions).  This module holds the quotas of the keys file (keys.h) and
 * the server-wide defaults (--tenant-max-...) for tenants whose line names
 * none, and every admission asks it:
 *
 *   quota                 counts                          asked by
 *   max-contexts          sessions, live and paused       tenant_admit: REST, Jupyter,
 *                                                         MCP, envd, fork, snapshots
 *   max-live              live (not paused) kernels;      tenant_admit, and the kernel
 *                         the least recently used idle    layer before any paused or dead
 *                         session is paused to make room  kernel runs again (tenant_admit_wake
 *                                                         as kernel_opts_t.wake_gate): every
 *                                                         execute, command, file, envd call
 *   max-queued            executions, commands, envd      tenant_admit_work: exec.c (REST,
 *                         processes and MCP calls          WebSocket, MCP), commands.c (REST
 *                         waiting or running              commands, envd Process), mcp.c
 *   max-jupyter-sessions  Jupyter sessions                tenant_admit_new: jupyter.c
 *   max-mcp-sessions      MCP sessions                    tenant_admit_new: mcp.c
 *   max-snapshots         snapshots, their context        kmgr before any snapshot
 *   max-snapshot-mib      alive or not; their bytes       (tenant_admit_snapshot as
 *                                                         kmgr_config_t.snapshot_gate)
 *   max-volume-mib        the sizes its volumes were     tenant_admit_more: volumes.c
 *                         made with (reserved, not used)
 *   max-disk-mib          workspaces (their file system's tenant_admit, the snapshot gate
 *                         use, with --workspace-size),
 *                         checkpoints and snapshots
 *   internet              whether its sessions may have a network
 *   memory, cpus          its sandboxes' memory limit and CPU quota, when below the
 *                         server's --memory and --cpus (tenant_start_opts)
 *
 * A refusal is an SG_E_QUOTA error naming the quota and its value
 * (sg_error_quota): REST answers 429 {"error": "quota_exceeded", "quota",
 * "limit", "message"}, MCP a tool error, envd resource_exhausted, the
 * WebSocket an error execute_reply.  What is counted is read from where it
 * lives (tenants_count_source), never kept twice.
 *
 * Quotas belong to the sessions' owner: an admin's sessions (--token's, or
 * a key marked admin) have none, and an admin acting on a tenant's session
 * is held to that tenant's quotas.
 */
#ifndef SG_TENANTS_H
#define SG_TENANTS_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>

#include "gateway/auth/auth.h"
#include "gateway/http/http.h"
#include "kernelmgr/manager/manager.h"

/* The server-wide defaults: the count fields of a tenant_t (keys.h), each
 * the value for a tenant whose line names none; 0: no limit. */
typedef tenant_t tenants_config_t;

/* What a tenant has of a counted resource, read from its owner. */
typedef enum {
    TENANT_QUEUED,           /* max-queued: work waiting or running */
    TENANT_JUPYTER_SESSIONS, /* max-jupyter-sessions */
    TENANT_MCP_SESSIONS,     /* max-mcp-sessions */
    TENANT_VOLUME_MIB,       /* max-volume-mib: the sizes of its volumes, in MiB */
    TENANT_NSOURCES
} tenant_source_t;
/* count(ctx, tenant): how many tenant has now.  Registered once by the
 * module that keeps them (exec.c, commands.c, jupyter.c, mcp.c); counts of
 * one source add up. */
typedef long long (*tenant_count_fn)(void *ctx, const char *tenant);
void tenants_count_source(tenant_source_t source, tenant_count_fn count, void *ctx);
/* How many owner has of source now, all its sources together. */
long long tenant_counted(const char *owner, tenant_source_t source);
/* Forgets a source registered with these arguments (its owner goes). */
void tenants_uncount_source(tenant_source_t source, tenant_count_fn count, void *ctx);

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

/* Whether owner (a tenant's name; its quotas) may have one more piece of
 * work waiting or running (an execution, a command, an envd process, an
 * MCP call): 0, or -1 with *err (SG_E_QUOTA, max-queued). */
int tenant_admit_work(const char *owner, sg_error_t **err);
/* Whether owner may have one more of source (Jupyter or MCP sessions): 0,
 * or -1 with *err (SG_E_QUOTA naming the quota). */
int tenant_admit_new(const char *owner, tenant_source_t source, sg_error_t **err);
/* Whether owner may have add more of source (MiB of volumes): 0, or -1
 * with *err (SG_E_QUOTA naming the quota). */
int tenant_admit_more(const char *owner, tenant_source_t source, long long add, sg_error_t **err);
/* Whether the owner of k may have one more snapshot (count, bytes, disk):
 * kmgr asks before any snapshot of k (kmgr_config_t.snapshot_gate). */
int tenant_admit_snapshot(kernel_t *k, sg_error_t **err);
/* Whether t may make one more session, by count only (max-contexts,
 * max-disk-mib), nothing paused to make room: a fork asks before its
 * snapshot is taken. */
int tenant_check_contexts(const tenant_t *t, sg_error_t **err);
/* The kernel layer's wake gate (kernel_opts_t.wake_gate): tenant_admit_wake
 * without the quota out-parameter. */
int tenant_wake_gate(kernel_t *k, sg_error_t **err);
/* What owner uses now, for /metrics and the tests: bytes on disk
 * (workspaces, checkpoints, snapshots), snapshots and their bytes. */
typedef struct {
    uint64_t disk_bytes, snapshot_bytes;
    long long snapshots;
} tenant_usage_t;
void tenant_usage(const char *owner, tenant_usage_t *out);

/* The 429 for a refused quota: {"error": "quota_exceeded", "quota", "limit",
 * "message"} (http_reply_error of err, which names them). */
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

/* GET /metrics' families per tenant: sessions live and paused now,
 * executions and quota refusals since the start (observe's
 * metrics_write_tenants), and what each holds of what its quotas count. */
void tenants_metrics(FILE *f, const kmgr_t *kmgr);

/* Whether t may see a session of owner's (an admin sees all). */
bool tenant_sees(const tenant_t *t, const char *owner);

#endif
