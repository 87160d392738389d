/* sandbox_internal: what sandbox.c shares with its two implementations
 * (after crun's cgroup managers: one table of operations, one file each).
 *
 *   sandbox_local.c  does the work in this process: OCI bundles, runsc
 *                    through proc.c, loop-mounted workspaces.  The launcher
 *                    uses it, and so does a daemon that has no launcher
 *                    (--sandbox=none, or not started as root).
 *   sandbox_link.c   asks the privileged launcher for each step instead
 *                    (launcher.h has the requests), and holds the link.
 *
 * sandbox.c keeps the public API (sandbox.h): it allocates and frees the
 * handles, keeps the accessors, and calls env->ops for everything else.
 * Not for use outside sandbox*.c.
 */
#ifndef SG_SANDBOX_INTERNAL_H
#define SG_SANDBOX_INTERNAL_H

#include "kernelmgr/egress.h"
#include "kernelmgr/sandbox.h"

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
    egress_policy_t *egress; /* --egress-allow given; NULL: no network at all */
};

struct sandbox {
    sandbox_env_t *env;
    char *id, *dir, *workspace;
    bool internet; /* has a network (egress.h): asked for at new, found on disk at adopt */
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
    /* Local, pause and resume under way: */
    struct pausing *pausing;
};

/* The operations that differ between doing the work here and asking the
 * launcher.  Errors follow sandbox.h: <0 (or NULL) with *err set. */
struct sandbox_ops {
    /* Prepares env's shared parts (the fields marked local above), or checks
     * that the launcher prepared them.  On failure sandbox.c destroys env. */
    int (*env_init)(sandbox_env_t *env, sg_error_t **err);

    /* sandbox_workspace_open: blocks until the workspace exists. */
    int (*workspace_open)(const sandbox_env_t *env, const char *path, sg_error_t **err);
    /* sandbox_workspace_open_async: cb is called exactly once unless the
     * returned request is cancelled; 0 means cb was already called. */
    uint64_t (*workspace_open_async)(const sandbox_env_t *env, const char *path,
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
    /* sandbox_pause: calls sb->paused_cb exactly once if it returns 0. */
    int (*pause)(sandbox_t *sb, sg_error_t **err);
    /* sandbox_resume: calls sb->started_cb exactly once if it returns 0. */
    int (*resume)(sandbox_t *sb, sg_error_t **err);
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
    uint64_t (*give)(int fd, sandbox_given_fn *cb, void *arg);
};

extern const sandbox_ops_t sandbox_local_ops;
extern const sandbox_ops_t sandbox_link_ops;

/* Whether sandbox_set_launcher was called: then this process's privileged
 * steps are sandbox_link_ops'. */
bool sandbox_link_up(void);

#endif
