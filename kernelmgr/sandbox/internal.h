/* internal: what sandbox.c shares with its implementations (after crun's
 * cgroup managers: one table of operations, one file each).
 *
 *   runsc.c  runsc sandboxes made in this process: OCI bundles, runsc
 *            through proc.c (pause and resume: pause.c; snapshots:
 *            snapshot.c; template roots: template.c; cgroups: cgroup.c).
 *            The launcher uses it, and so does a daemon not started as root.
 *   link.c   the same sandboxes, each step a request to the privileged
 *            launcher (kernelmgr/launcher/), which holds the link (link.h).
 *   none.c   --sandbox=none: plain kernel processes, no isolation.
 *   host.c   what runsc and none share on this host: directories,
 *            loop-mounted workspaces, connection records, logs.
 *   exec.c   commands in a running sandbox, for all three.
 *
 * sandbox.c keeps the public API (sandbox.h): it allocates and frees the
 * handles, keeps the accessors, and calls env->ops for everything else.
 * Not for use outside sandbox*.c.
 */
#ifndef SG_SANDBOX_INTERNAL_H
#define SG_SANDBOX_INTERNAL_H

#include "kernelmgr/egress/egress.h"
#include "kernelmgr/sandbox/sandbox.h"

typedef struct sandbox_ops sandbox_ops_t;

struct sandbox_env {
    sandbox_config_t cfg;
    const sandbox_ops_t *ops; /* chosen once, in sandbox_env_new */
    char *state_dir;
    /* Local only (NULL through the launcher, which has its own): */
    char *etc_dir, *rootfs_dir, *runsc_root, *init;
    char *preload;     /* sandgate-preload.so beside init; NULL: none */
    char *launcher_py; /* sandgate-kernel.py beside init; NULL: none */
    bool mask_debugpy;
    bool trusts_proxy;       /* the sandboxes' /etc trusts the egress proxy's CA (runsc.c) */
    char **template_roots;   /* local: each template's root directory (cfg.templates' order),
                                NULL where it has none (template.c) */
    egress_policy_t *egress; /* --egress-allow given; NULL: no network at all */
    char *runsc_version;     /* what `runsc --version` says (mode runsc); NULL: unknown */
    char *runsc_path;        /* cfg.runsc resolved at start (owned), or NULL */
};

struct sandbox {
    sandbox_env_t *env;
    char *id, *dir, *workspace;
    bool internet;  /* has a network (egress.h): asked for at new, found on disk at adopt */
    char *tenant;   /* sandbox_opts_t's (NULL: none); sent to the launcher with "new" */
    char *snapshot; /* sandbox_opts_t's: started from it (NULL: fresh); sent with "new" */
    char *template; /* sandbox_opts_t's: its root is the template's (NULL: the server's) */
    char *egress_allow, *egress_deny;    /* sandbox_opts_t's, then sandbox_set_egress's */
    char *egress_transforms;             /* the same */
    json_t *mounts;                      /* sandbox_opts_t's (checked, a copy); NULL: none */
    uint64_t memory_bytes, cpu_quota_us; /* its limits: the server's, or its tenant's if lower */
    char *cgroup; /* runsc's cgroupsPath (/sandgate/[t-TENANT/]ID): set by sandbox_new; for
                     an adopted one, read from its bundle or sent by the launcher */
    jconn_t conn;
    pid_t pid;
    sandbox_started_fn *started_cb; /* set by sandbox_start/resume before ops->start/resume */
    void *started_arg;
    sandbox_paused_fn *paused_cb; /* set by sandbox_pause before ops->pause */
    void *paused_arg;
    /* Local: */
    pid_t pending;                  /* runsc run or state still running for us; 0: none */
    char **plain_argv, **plain_env; /* mode none only */
    /* Through the launcher: */
    char *kernelspec; /* what "new" prepares */
    uint64_t
        start_seq; /* the launcher's answer to "new", "start", "pause" or "resume" is awaited */
    bool leave_running; /* the pause asked for is sandbox_save_live's */
    /* Local, pause and resume under way: */
    struct pausing *pausing;
    bool live_saved; /* sandbox_save_live's image is in checkpoint/ (until reattach) */
    unsigned execs;  /* commands of sandbox_exec still running (exec.c) */
};

/* The operations that differ between doing the work here and asking the
 * launcher.  Errors follow sandbox.h: <0 (or NULL) with *err set. */
struct sandbox_ops {
    /* Prepares env's shared parts (the fields marked local above), or checks
     * that the launcher prepared them.  On failure sandbox.c destroys env. */
    int (*env_init)(sandbox_env_t *env, sg_error_t **err);

    /* sandbox_workspace_open: blocks until the workspace exists. */
    int (*workspace_open)(const sandbox_env_t *env, const char *path, uint64_t bytes,
                          sg_error_t **err);
    /* sandbox_workspace_open_async: cb is called exactly once unless the
     * returned request is cancelled; 0 means cb was already called. */
    uint64_t (*workspace_open_async)(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                     sandbox_opened_fn *cb, void *arg);
    /* sandbox_cancel: request is non-zero and came from workspace_open_async,
     * log_tail or give. */
    void (*cancel)(uint64_t request);
    /* sandbox_workspace_close: never fails (problems are logged). */
    void (*workspace_close)(const sandbox_env_t *env, const char *path, bool remove);

    /* sandbox_new: sb has env, id, dir and workspace; prepares what start
     * needs (or records what to ask for).  On failure it has undone its own
     * work on disk; sandbox.c frees sb. */
    int (*prepare)(sandbox_t *sb, const kspec_t *spec, sg_error_t **err);
    /* sandbox_adopt: fills sb->conn for a running sandbox (sandbox.c sets
     * the pid).  On failure sandbox.c frees sb. */
    int (*adopt)(sandbox_t *sb, pid_t pid, sg_error_t **err);
    /* sandbox_free: lets go of what sb's implementation holds (callbacks,
     * the launcher's handle) before sandbox.c frees the struct; the sandbox
     * keeps running. */
    void (*release)(sandbox_t *sb);
    /* sandbox_start: calls sb->started_cb exactly once if it returns 0
     * (perhaps before returning), never if it returns -1. */
    int (*start)(sandbox_t *sb, sg_error_t **err);
    /* sandbox_pause and sandbox_save_live (sb->leave_running): calls
     * sb->paused_cb exactly once if it returns 0.  pause, resume and
     * reattach are NULL where sandboxes cannot be saved. */
    int (*pause)(sandbox_t *sb, sg_error_t **err);
    /* sandbox_reattach: no answer. */
    void (*reattach)(sandbox_t *sb);
    /* sandbox_resume: calls sb->started_cb exactly once if it returns 0. */
    int (*resume)(sandbox_t *sb, sg_error_t **err);
    /* sandbox_set_tenant: sb->tenant and sb->cgroup are the new ones when it
     * returns; the move may still be under way.  NULL in mode none. */
    void (*set_tenant)(sandbox_t *sb, const char *tenant);
    /* sandbox_set_egress (the lists checked): the same contract; a
     * sandbox without a network is refused.  NULL in mode none. */
    void (*set_egress)(sandbox_t *sb, const char *allow, const char *deny, const char *transforms,
                       sandbox_rules_fn *cb, void *arg);
    /* sandbox_signal: delivery is asynchronous. */
    int (*signal)(sandbox_t *sb, int sig, sg_error_t **err);
    /* sandbox_remove, before remove_id: no start under way may create the
     * container after the removal found none, and a plain process (mode
     * none) is killed. */
    void (*stop)(sandbox_t *sb);
    /* sandbox_remove_id: never fails (problems are logged). */
    void (*remove_id)(sandbox_env_t *env, const char *id, bool wait);
    /* sandbox_list: a new JSON array of strings. */
    json_t *(*list)(sandbox_env_t *env, sg_error_t **err);
    /* sandbox_egress_refused: cb exactly once, perhaps before returning. */
    void (*egress_refused)(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg);
    /* sandbox_log_tail: cb exactly once unless the returned request is
     * cancelled; 0 means cb was already called. */
    uint64_t (*log_tail)(const sandbox_t *sb, size_t max, sandbox_tail_fn *cb, void *arg);
    /* sandbox_give: the same contract. */
    uint64_t (*give)(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg);
    /* sandbox_snapshot_save (sb paused), sandbox_snapshot_delete and
     * sandbox_workspace_restore_async (sid a UUID): the same contracts.
     * NULL where sandboxes cannot be saved (pause is NULL). */
    void (*snapshot_save)(sandbox_t *sb, const char *sid, sandbox_saved_fn *cb, void *arg);
    void (*snapshot_delete)(sandbox_env_t *env, const char *sid);
    /* sandbox_snapshot_transfer: the same contract as snapshot_save's cb. */
    void (*snapshot_transfer)(sandbox_env_t *env, const char *sid, bool import,
                              sandbox_saved_fn *cb, void *arg);
    uint64_t (*workspace_restore)(const sandbox_env_t *env, const char *path, const char *sid,
                                  sandbox_opened_fn *cb, void *arg);
    /* sandbox_exec: x is checked (sandbox_exec_check); calls cb exactly once
     * if it returns a handle (> 0), from the loop, never if 0. */
    uint64_t (*exec)(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                     sandbox_exec_done_fn *cb, void *arg, sg_error_t **err);
    /* sandbox_exec_signal: sig is INT, TERM, HUP or KILL. */
    int (*exec_signal)(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err);
    /* sandbox_exec_pid: the same contract. */
    void (*exec_pid)(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg);
};

extern const sandbox_ops_t sandbox_runsc_ops;
extern const sandbox_ops_t sandbox_link_ops;
extern const sandbox_ops_t sandbox_none_ops;

/* Whether sandbox_set_launcher was called: then this process's privileged
 * steps are sandbox_link_ops'. */
bool sandbox_link_up(void);

/* The cgroupsPath of sandbox id of tenant (NULL: none) in env: with
 * tenant_cgroups /sandgate/t-TENANT/ID, else /sandgate/ID; NULL in mode
 * none.  A new string. */
char *sandbox_cgroup_name(const sandbox_env_t *env, const char *tenant, const char *id);

/* --- exec.c ------------------------------------------------------------ */

/* Whether x is a command sandbox_exec may run: 1 to 1024 arguments, each
 * without a NUL; env entries NAME=VALUE with a portable NAME; cwd absolute;
 * at most 256 KiB in all (the launcher checks the same).  -1 with *err
 * (SG_E_INVALID) if not. */
int sandbox_exec_check(const sandbox_exec_t *x, sg_error_t **err);
/* sandbox_free: sb's commands may outlive its handle; their ends no longer
 * count on it. */
void sandbox_exec_forget(sandbox_t *sb);
/* The runsc and none tables' exec and exec_signal, done in this process. */
uint64_t runsc_exec(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                    sandbox_exec_done_fn *cb, void *arg, sg_error_t **err);
int runsc_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err);
void runsc_exec_pid(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg);
uint64_t none_exec(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                   sandbox_exec_done_fn *cb, void *arg, sg_error_t **err);
int none_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err);
void none_exec_pid(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg);

/* --- host.c: shared by the runsc and none tables -------------------- */

/* mkdir -p, then chmod (mkdir obeys umask). */
int host_make_dir(const char *path, mode_t mode, sg_error_t **err);
/* Writes text to path (created or truncated). */
int host_write_file(const char *path, const char *text, sg_error_t **err);
/* rm -rf, never crossing into another filesystem or through a symlink. */
void host_remove_tree(const char *path);
/* What the tree at dir takes on disk (allocated blocks). */
uint64_t host_disk_bytes(const char *dir);
/* Hard links in to of every regular file in from (to is made). */
int host_link_files(const char *from, const char *to, sg_error_t **err);
/* A runsc image directory (checkpoint/, a snapshot's image/): the runsc
 * version that wrote it is recorded beside runsc's files; reading it back,
 * another version is a conflict naming both (runsc restores only its own). */
#define IMAGE_VERSION_FILE "runsc.version"
int image_stamp(const sandbox_env_t *env, const char *dir, sg_error_t **err);
int image_check(const sandbox_env_t *env, const char *dir, sg_error_t **err);
/* The init program's path, absolute; sandgate-kernel.py beside it, or
 * NULL (warned).  New strings. */
char *host_init_path(const sandbox_config_t *cfg);
char *host_launcher_py(const char *init);
/* The kernel's argv for spec ({connection_file} filled in), through
 * launcher when not NULL (kspec_argv_free). */
char **host_kernel_argv(const kspec_t *spec, const char *connfile, const char *launcher);
/* sb's directory, conn/ and connection record (connection.json). */
int host_prepare_conn(sandbox_t *sb, const kspec_t *spec, sg_error_t **err);
/* Writes the connection file the kernel reads to path: sb's, with ip
 * (the prefix its sockets have where the kernel runs); for a kernel that
 * speaks TCP only, on 127.0.0.1 with the same ports, and *tcp_as_ipc the
 * environment string that makes sandgate-preload.so bind them at ip
 * (kspec.h's tcp_only; a new string, else NULL; tcp_as_ipc may be NULL). */
int host_write_kernel_conn(const sandbox_t *sb, const kspec_t *spec, const char *ip,
                           const char *path, char **tcp_as_ipc, sg_error_t **err);
/* sandgate-preload.so beside init, unless --rootfs says otherwise (the
 * host's glibc runs in the sandbox only without it); NULL: none, warned
 * once (a new string). */
char *host_find_preload(const sandbox_env_t *env);
/* The last max bytes of sb's kernel.log, "" without one (a new string). */
char *host_read_log_tail(const sandbox_t *sb, size_t max);
/* The table entries of that name (sandbox_internal's contracts). */
int host_workspace_open(const sandbox_env_t *env, const char *path, uint64_t bytes,
                        sg_error_t **err);
/* Mounts a workspace's ext4 image img at path (nosuid, nodev) through a
 * free loop device, which goes away with the last unmount (autoclear):
 * what `mount -o loop` does, in ~0.6 ms instead of ~10 ms for its process. */
int host_mount_image(const char *img, const char *path, sg_error_t **err);
uint64_t host_workspace_open_async(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                   sandbox_opened_fn *cb, void *arg);
void host_cancel(uint64_t request);
void host_workspace_close(const sandbox_env_t *env, const char *path, bool remove);
int host_adopt(sandbox_t *sb, pid_t pid, sg_error_t **err);
uint64_t host_log_tail(const sandbox_t *sb, size_t max, sandbox_tail_fn *cb, void *arg);
uint64_t host_give(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg);

/* --- template.c: the runsc table's template roots -------------------------- */

/* env->template_roots: each template's root ready (images unpacked once).
 * Blocking: at start-up. */
int template_roots_init(sandbox_env_t *env, sg_error_t **err);
void template_roots_free(sandbox_env_t *env);
/* Template name's root directory; NULL: it has none (the server's root). */
const char *template_root_dir(const sandbox_env_t *env, const char *name);

/* --- snapshot.c: the runsc table's snapshots ------------------------------- */

/* STATE/snapshot-images/<sid> (a new string). */
char *host_snapshot_dir(const sandbox_env_t *env, const char *sid);
/* runsc_prepare for a sandbox with a snapshot: its connection record
 * becomes the snapshot's (sb->conn's ports and key; the host path stays
 * sb's) and the snapshot's image is linked in as its checkpoint, so that
 * starting it is a restore. */
int snapshot_attach(sandbox_t *sb, sg_error_t **err);
void runsc_snapshot_save(sandbox_t *sb, const char *sid, sandbox_saved_fn *cb, void *arg);
void host_snapshot_delete(sandbox_env_t *env, const char *sid);
void host_snapshot_transfer(sandbox_env_t *env, const char *sid, bool import, sandbox_saved_fn *cb,
                            void *arg);
/* At start-up: snapshot files without a record in STATE/snapshots (a save
 * cut short) are removed. */
void host_snapshot_sweep(sandbox_env_t *env);
/* The copy and the mount run without blocking the loop: cb is called
 * from it; returns the request (0: cb was called already). */
uint64_t host_workspace_restore(const sandbox_env_t *env, const char *path, const char *sid,
                                sandbox_opened_fn *cb, void *arg);
void host_workspace_restore_cancel(uint64_t request);

/* --- runsc.c and pause.c ------------------------------------------- */

/* runsc's argv: its global flags, then cmd's (a static array: use it at
 * once).  With internet, in a mount namespace where runsc accepts the
 * sandbox's own network namespace (runsc.c says why). */
const char **runsc_argv(const sandbox_env_t *env, const char *const *cmd);
const char **runsc_net_argv(const sandbox_env_t *env, bool internet, const char *const *cmd);
/* A proc_done_fn that logs a failure (arg: what ran, a literal). */
void runsc_ignore_done(int status, const char *output, void *arg);
/* The runsc table's pause and resume, and the end of either under way
 * (timers and runsc commands stopped, no callback). */
int runsc_pause(sandbox_t *sb, sg_error_t **err);
void runsc_reattach(sandbox_t *sb);
int runsc_resume(sandbox_t *sb, sg_error_t **err);
void runsc_pausing_end(sandbox_t *sb);

#endif
