/* manager: the kernel manager (kmgr_) — every session's kernel, the warm pool, idle
 * culling, the kernel limit, and the state directory that lets a new sandgate
 * re-adopt the sandboxes of the previous one.
 *
 * A session is a kernel plus its workspace; the session id is the kernel id
 * (a UUID).  A session idle for pause_after_ms is paused (kernel_pause): its
 * sandbox is saved to disk and ends; using it resumes it.  State directory:
 *   sessions/<id>.json   one record per kernel (written when it is ready and
 *                        when it pauses; a paused one is re-adopted paused):
 *                        its kernelspec, sandbox, tenant, username...
 *   workspaces/<id>/     the session's files (its own filesystem if limited)
 *   kernels/, runsc/, sandbox/   see sandbox.h
 */
#ifndef SG_KMGR_H
#define SG_KMGR_H

#include "kernelmgr/kernel/kernel.h"

/* What the manager did on its own, for the audit log (fields: stolen, with
 * "context" and "reason"):
 *   context.pause   an idle session paused (pause_after_ms) or a stop's
 *                   kmgr_pause_all, once the pause ended: "outcome" ok or
 *                   error (then "error", the kind)
 *   context.wake    a paused session runs again, whatever woke it (an API
 *                   resume, an execution, a command, a file): "resume_ms"
 *   context.delete  an idle session culled (cull_idle_ms)
 *   context.adopt   a previous sandgate's session taken over ("paused")
 *   context.restart a recorded session whose sandbox was gone: a new kernel
 *   context.dead    a session's kernel died ("error": the kind only; the
 *                   message can hold the kernel's stderr, which is output;
 *                   "oom": true when its sandbox ran out of memory) */
typedef void(kmgr_notice_fn)(const char *event, json_t *fields, void *arg);

/* --pool-size NAME=N for a language or kernelspec (not a template). */
typedef struct {
    const char *name;
    int size;
} kmgr_pool_t;

typedef struct {
    const char *state_dir;
    sandbox_config_t sandbox;
    const char *kernelspec_path; /* NULL: the Jupyter defaults */
    kernel_opts_t kernel;        /* timeouts; preload is ignored (see pool_preload) */
    int pool_size;               /* warm kernels per pooled kernelspec, and as many with a
                                    network (the operator's policy, no rules of their own) when
                                    sandboxes may have one (templates: their own,
                                    sandbox.templates' pool_size) */
    const char *pool_kernelspec; /* which kernelspec is pooled ("python3") */
    const char *pool_preload;    /* code a pool kernel runs before it is claimable */
    const kmgr_pool_t *pools;    /* warm kernels of other languages (kspecs_for_language's
                                    name), without preload code; a name that is the pooled
                                    kernelspec's sets pool_size */
    size_t npools;
    int cull_idle_ms;        /* shut down sessions idle this long (paused or not); 0: never */
    int pause_after_ms;      /* pause sessions idle this long; 0: never */
    int max_kernels;         /* running session kernels at once (not the pool, not paused) */
    int64_t snapshot_ttl_ms; /* snapshots older than this are deleted; 0: kept until deleted */
    int max_snapshots;       /* snapshots of one context at once; 0: no limit */
    /* Asked before any snapshot of a session (kmgr_snapshot: REST, MCP, a
     * fork): 0 to go ahead, or -1 with *err, which kmgr_snapshot returns
     * (the gateway's tenants: max-snapshots, max-snapshot-mib,
     * max-disk-mib).  NULL: always. */
    int (*snapshot_gate)(kernel_t *k, sg_error_t **err);
    kmgr_notice_fn *notice; /* NULL: none */
    void *notice_arg;
} kmgr_config_t;

typedef struct kmgr kmgr_t;

/* Its configuration (the copy it keeps). */
const kmgr_config_t *kmgr_config(const kmgr_t *self);
/* The configured template called name (sandbox.h); NULL: none. */
const sandbox_template_t *kmgr_template(const kmgr_t *self, const char *name);
/* Warm kernels of template name (NULL: the server's own pool) ready now. */
size_t kmgr_pool_ready(const kmgr_t *self, const char *template);
/* Template name's own snapshot, taken after its preload ran (templates.c):
 * its bytes, 0 while there is none. */
uint64_t kmgr_template_snapshot_bytes(const kmgr_t *self, const char *name);

typedef struct {
    size_t sessions, starting, idle, busy, dead, pausing, paused, pool_ready, pool_starting;
    uint64_t started, claimed_from_pool, culled, adopted, restarted_after_restart;
    uint64_t pauses, pause_failures, resumes, auto_pauses;
    uint64_t pause_ms_total, resume_ms_total; /* sums over pauses and resumes */
    uint64_t checkpoint_bytes;                /* of the sessions paused now */
} kmgr_stats_t;

void kmgr_config_defaults(kmgr_config_t *cfg);

/* Prepares the state directory, re-adopts live sandboxes recorded there,
 * starts fresh kernels for recorded sessions whose sandbox is gone, removes
 * sandboxes nobody recorded, and begins filling the pool. */
kmgr_t *kmgr_new(loop_t *loop, const kmgr_config_t *cfg, sg_error_t **err);
/* With shutdown, every kernel is shut down and its workspace removed;
 * without, sandboxes keep running for the next sandgate to adopt. */
void kmgr_destroy(kmgr_t **self_p, bool shutdown);

/* A new session with a kernel of kernelspec name: a warm pool kernel when one
 * is ready (then it is already idle), else a fresh start.  ev gets the
 * kernel's lifecycle events.  Fails with SG_E_NOTFOUND for an unknown
 * kernelspec and SG_E_LIMIT at max_kernels. */
kernel_t *kmgr_start(kmgr_t *self, const char *name, kernel_event_fn *ev, void *ev_arg,
                     sg_error_t **err);
/* Who a session is for, recorded with it so a restart keeps it. */
typedef struct {
    bool internet;         /* a kernel whose sandbox has a network (egress.h): one of the
                              pool's networked ones when one is ready and it would reach what
                              they do, the operator's policy (no rules of its own below, no
                              egress_limited), else a new one */
    const char *owner;     /* the tenant it belongs to (NULL: the admin's); with tenant
                              cgroups (sandbox.h), its sandboxes go in the tenant's */
    uint64_t memory_bytes; /* the tenant's ceilings (kernel_opts_t; 0: the server's) */
    uint64_t cpu_quota_us;
    const char *snapshot; /* the session starts as this snapshot's (kmgr_snapshot_get): its
                             kernelspec, template, variables and files; never from the pool */
    const char *template; /* a configured template's (sandbox_template_t): its kernelspec
                             (the name given is not used), root and preload; from its pool
                             when one is ready */
    const char *sandbox;  /* a session whose sandbox the kernel starts in, beside that
                             session's kernel (kernel_start_guest): its files, template,
                             network; no record of its own, so it does not outlive a
                             restart of sandgate.  NULL: a sandbox of its own */
    const json_t *env;    /* with sandbox: NAME -> string, added to the kernel's environment */
    const char *egress_allow, *egress_deny; /* with internet: the sandbox's own rules
                                               (kmgr_set_egress); NULL: none */
    const char *egress_transforms;          /* and headers (the same) */
    bool egress_limited;                    /* its tenant's egress is limited (keys file) */
    const json_t *mounts; /* volumes in its sandbox (sandbox_opts_t.mounts); never from the
                             pool.  With snapshot: the snapshot's, whatever is given */
    const char *id;       /* the session's id (a session moved here from another replica,
                             with the snapshot it was saved as): SG_E_CONFLICT if one has it;
                             NULL: a new one (replica_uuid) */
} kmgr_start_opts_t;

/* The same for o's tenant.  A pool kernel is claimed only when its sandbox
 * has the limits the tenant's would (the tenant names no lower ceiling);
 * pool kernels start as the admin's, and a claimed one's sandbox moves to
 * its tenant's cgroup (kernel_set_owner, sandbox_set_tenant). */
kernel_t *kmgr_start_with(kmgr_t *self, const char *name, const kmgr_start_opts_t *o,
                          kernel_event_fn *ev, void *ev_arg, sg_error_t **err);
/* Who the session's client says uses it (Jupyter's KERNEL_USERNAME;
 * kernel_username), recorded with the session so a restart keeps it. */
void kmgr_set_username(kmgr_t *self, kernel_t *k, const char *username);
/* The session's sandbox's own egress rules from now on, recorded with it so
 * a restart keeps them: kernel_set_egress's lists and contract (cb once,
 * perhaps before this returns). */
void kmgr_set_egress(kmgr_t *self, kernel_t *k, const char *allow, const char *deny,
                     const char *transforms, sandbox_rules_fn *cb, void *arg);
/* Whether allow, deny and transforms are what kmgr_set_egress takes: the
 * number of host names in them, or -1 (the error names the one that is
 * not, and its entry). */
int kmgr_check_egress(const char *allow, const char *deny, const char *transforms,
                      sg_error_t **err);
kernel_t *kmgr_get(kmgr_t *self, const char *id);
/* Whether sandboxes may have a network here (--egress-allow was given). */
bool kmgr_has_egress(const kmgr_t *self);
/* Whether sessions with a network can pause and be snapshotted (runsc
 * saves their network stack: sandbox_env_can_save_live). */
bool kmgr_saves_network(const kmgr_t *self);
/* Packets the egress rules refused, asked of the launcher (or nft, without
 * one): cb is called exactly once, perhaps before this returns, with
 * counts (borrowed) {"total": N, "sessions": {session id: N}} — total over
 * every sandbox since the rules were installed, and one entry per live
 * session with a network (its current sandbox's, 0 when it refused
 * nothing) — or with why not: no --egress-allow (kmgr_has_egress), the
 * launcher silent past its timeout. */
typedef void(kmgr_refused_fn)(const json_t *counts, const sg_error_t *err, void *arg);
void kmgr_egress_refused(kmgr_t *self, kmgr_refused_fn *cb, void *arg);
/* Shuts the session down and removes its workspace. */
int kmgr_shutdown(kmgr_t *self, const char *id, sg_error_t **err);

size_t kmgr_count(const kmgr_t *self);
kernel_t *kmgr_at(const kmgr_t *self, size_t i);
const kspecs_t *kmgr_kspecs(const kmgr_t *self);
/* The sandboxes' environment (sandbox.h), for what the gateway keeps
 * beside sessions (volumes). */
sandbox_env_t *kmgr_sandbox_env(const kmgr_t *self);
void kmgr_stats(const kmgr_t *self, kmgr_stats_t *out);
/* --- snapshots of sessions (kernel.h's kernel_snapshot) ----------------------------
 * STATE/snapshots/<sid>.json records each (its files are the sandbox
 * layer's, STATE/snapshot-images/<sid>/): it outlives its session, and a
 * restart, until deleted or older than snapshot_ttl_ms. */
typedef struct {
    char id[37], context_id[37]; /* its id (a UUID) and the session it was taken of */
    char *name;                  /* given by its client; NULL: none */
    char *owner;                 /* the tenant's */
    char *kernelspec;
    char *template;     /* the session's template; NULL: none */
    int64_t created_ms; /* Unix time */
    uint64_t bytes;     /* on disk: the memory image and the workspace's data */
    json_t *lineage;    /* the session's own ancestors when it was taken */
    int users;          /* starts and roll-backs restoring it now */
    bool deleted;       /* gone from the list; its files go when users reach 0 */
    char *template_of;  /* a template's own (templates.c): not the API's to list, use or
                           delete; NULL for the sessions' snapshots */
    char *key;          /* template_of's: what it was taken of (template_key) */
    char *runsc;        /* the runsc version that made its image; NULL: not recorded (older) */
    bool internet;      /* taken of a context with a network: those made from it have one */
    json_t *mounts;     /* the volumes its sandbox had (kernel_opts_t.mounts): those made
                           from it mount the same ones, as they are now; NULL: none */
} kmgr_snapshot_t;
/* cb: the new snapshot (borrowed), or why not; once, from the loop (or
 * before kmgr_snapshot returns without a launcher). */
typedef void(kmgr_snapshot_fn)(const kmgr_snapshot_t *snap, const sg_error_t *err, void *arg);
/* Takes a snapshot of session k (kernel_snapshot: an idle one is paused and
 * resumed, a paused one stays paused).  SG_E_QUOTA: the session has
 * max_snapshots, or snapshot_gate refused; SG_E_CONFLICT: as
 * kernel_snapshot. */
int kmgr_snapshot(kmgr_t *self, kernel_t *k, const char *name, kmgr_snapshot_fn *cb, void *arg,
                  sg_error_t **err);
/* NULL for an unknown or deleted id, and a template's own. */
const kmgr_snapshot_t *kmgr_snapshot_get(const kmgr_t *self, const char *sid);
size_t kmgr_snapshot_count(const kmgr_t *self);
/* Deleted ones and templates' own too. */
const kmgr_snapshot_t *kmgr_snapshot_at(const kmgr_t *self, size_t i);
/* Deletes it: gone at once for every caller; its files once the starts
 * restoring it have their own.  SG_E_NOTFOUND. */
int kmgr_snapshot_delete(kmgr_t *self, const char *sid, sg_error_t **err);
/* Moving a snapshot to another sandgate: export gives its record (a new
 * object, STATE/snapshots/<sid>.json's) and makes STATE/transfers/<sid>.tar
 * of its files (sandbox_snapshot_transfer); import takes such a record and
 * that archive (placed there by the caller) and keeps the snapshot here
 * as if taken here.  cb once: the archive's bytes, or why not.  SG_E_NOTFOUND
 * (export: no such snapshot), SG_E_INVALID (import: not a record),
 * SG_E_CONFLICT (import: it exists here, or it mounts volumes, which stay
 * on their replica). */
typedef void(kmgr_moved_fn)(uint64_t bytes, const sg_error_t *err, void *arg);
int kmgr_snapshot_export(kmgr_t *self, const char *sid, json_t **record, kmgr_moved_fn *cb,
                         void *arg, sg_error_t **err);
int kmgr_snapshot_import(kmgr_t *self, const json_t *record, kmgr_moved_fn *cb, void *arg,
                         sg_error_t **err);
/* Session k goes back to snapshot sid (kernel_restore_snapshot): only a
 * snapshot of k itself or of a session k descends from (SG_E_INVALID). */
int kmgr_restore(kmgr_t *self, kernel_t *k, const char *sid, sg_error_t **err);
/* The sessions k descends from through snapshots, nearest first (borrowed;
 * NULL: none). */
const json_t *kmgr_lineage(const kmgr_t *self, const kernel_t *k);

/* Before a stop (--pause-on-stop): pauses every session that can pause —
 * idle, not a pool kernel, no network — so the next start, even on another
 * machine with the same state directory, resumes it; the pool stops
 * refilling.  Returns how many began to pause; drained(arg) is called once
 * the last of them is paused or has failed to (never when 0 is returned). */
size_t kmgr_pause_all(kmgr_t *self, void (*drained)(void *arg), void *arg);
/* Whether kmgr_pause_all (or kmgr_set_stopping) was called: sandgate is
 * stopping.  kmgr_set_stopping says so without pausing (a drain that moves
 * the sessions away first: GET /health answers 503, the pool stops).
 * Draining (on: also stopping) says that this replica still serves the
 * sessions it holds while they move away (GET /health: "draining"). */
bool kmgr_stopping(const kmgr_t *self);
void kmgr_set_stopping(kmgr_t *self);
bool kmgr_draining(const kmgr_t *self);
void kmgr_set_draining(kmgr_t *self, bool on);

#endif
