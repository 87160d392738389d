/* sandbox: one kernel's gVisor sandbox (or, with mode "none", a plain
 * process) — its OCI bundle, connection file, start, signals and removal.
 *
 * Layout under the state directory:
 *   sandbox/etc/          generated read-only /etc shared by all sandboxes
 *   sandbox/rootfs/       empty read-only root: mount points + merged-usr links
 *   runsc/                runsc's own state (--root), ours alone
 *   kernels/<id>/         one kernel: bundle/config.json, conn/ (0700, the
 *                         kernel's ipc sockets and connection file), kernel.log
 * Inside the sandbox: / read-only, /usr and /etc read-only binds, the
 * workspace read-write at /home/user (the kernel's cwd), /conn read-write,
 * /sandgate-init (PID 1: reaps orphans, forwards signals to the kernel),
 * /sandgate-preload.so (LD_PRELOAD; works around runsc's statx, see
 * guest/preload.c; not with --rootfs),
 * /tmp a size-limited tmpfs; a dedicated uid (64123), no capabilities, noNewPrivileges,
 * network namespace with loopback only.
 */
#ifndef SG_SANDBOX_H
#define SG_SANDBOX_H

#include "common/loop.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "kernelmgr/kspec/kspec.h"
#include "proto/proto.h"
/* The launcher's operations, as the link speaks them: for the launcher,
 * which serves them (kernelmgr/launcher/). */
#include "kernelmgr/sandbox/link.h"

/* The sandbox user: a uid no host account should have (the kernel's files
 * and sockets on the host belong to it; a host user sharing it could reach
 * them).  Its group is also sandgate's unprivileged half's (launcher.h). */
#define SANDBOX_UID 64123
#define SANDBOX_GID 64123

typedef enum { SANDBOX_RUNSC, SANDBOX_NONE } sandbox_mode_t;

/* A template (--template NAME=SPEC): a named environment for new sessions.
 * The sandbox layer uses its root; the manager (manager/manager.h) its kernelspec,
 * preload and pool.  With neither root nor image, sandboxes get the host's
 * /usr as any other. */
typedef struct {
    const char *name;       /* 1-63 of A-Za-z0-9._- */
    const char *root;       /* a root directory used as it is (its mount points there) */
    const char *image;      /* an OCI image layout directory or archive, "PATH[:TAG]":
                               unpacked once under STATE/templates/NAME (template.c) */
    const char *kernelspec; /* NULL: "python3" */
    const char *preload;    /* code each new kernel runs before it is used; NULL: none */
    int pool_size;          /* warm kernels of it kept ready (--pool-size NAME=N) */
} sandbox_template_t;

typedef struct {
    sandbox_mode_t mode;
    const char *runsc;          /* runsc binary (default /usr/local/bin/runsc) */
    const char *platform;       /* runsc --platform (default systrap) */
    const char *rootfs;         /* image directory to use as /; NULL: minimal host /usr */
    uint64_t memory_bytes;      /* linux.resources.memory.limit */
    uint64_t cpu_quota_us;      /* CPU time per 100 ms period */
    int64_t pids;               /* linux.resources.pids.limit (counts runsc's own tasks) */
    uint64_t nproc;             /* RLIMIT_NPROC: processes inside the sandbox */
    uint64_t nofile;            /* RLIMIT_NOFILE */
    uint64_t workspace_bytes;   /* size of each workspace filesystem; 0: no limit */
    uint64_t tmp_bytes;         /* size of the /tmp tmpfs */
    const char *init;           /* sandgate-init binary; NULL: the installed one */
    const char *egress_allow;   /* --egress-allow (egress.h); NULL or "": no network for anyone */
    const char *egress_dns;     /* --egress-dns: resolvers for /etc/resolv.conf and port 53 */
    const char *egress_ca_file; /* --egress-ca-file: what the egress proxy trusts; NULL: the
                                   system's */
    unsigned egress_max_conns;  /* --egress-max-conns: open connections per sandbox; 0: any */
    uint64_t egress_rate;       /* --egress-rate: bytes/s per sandbox, each way; 0: no limit */
    bool tenant_cgroups;        /* --tenant-cgroups: each tenant's sandboxes in a cgroup of its
                                   own with an equal CPU weight (cgroup.h); default true */
    const sandbox_template_t *templates; /* borrowed; roots prepared by sandbox_env_new */
    size_t ntemplates;
} sandbox_config_t;

/* Documented defaults (see sandgate --help). */
void sandbox_config_defaults(sandbox_config_t *cfg);
/* The configured template called name; NULL when there is none. */
const sandbox_template_t *sandbox_template_find(const sandbox_config_t *cfg, const char *name);

typedef struct sandbox_env sandbox_env_t;
typedef struct sandbox sandbox_t;

/* Prepares the shared parts under state_dir (etc, rootfs, runsc root).
 * Blocking; call at start-up. cfg is copied. */
sandbox_env_t *sandbox_env_new(const sandbox_config_t *cfg, const char *state_dir,
                               sg_error_t **err);
void sandbox_env_destroy(sandbox_env_t **self_p);
const sandbox_config_t *sandbox_env_config(const sandbox_env_t *env);
const char *sandbox_env_state_dir(const sandbox_env_t *env);
/* The version runsc reports (`runsc --version`); NULL in mode none or when
 * runsc did not answer.  Checkpoints and snapshots record it. */
const char *sandbox_env_runsc_version(const sandbox_env_t *env);

/* Creates (or, if it exists, mounts) a workspace at path: a directory owned
 * by the sandbox user, on its own size-limited filesystem when
 * workspace_bytes > 0.  Blocking (mkfs + mount, tens of ms; through the
 * launcher, until it answers): for start-up (re-adopting sessions) and for
 * the launcher itself; a serving daemon uses sandbox_workspace_open_async. */
int sandbox_workspace_open(const sandbox_env_t *env, const char *path, sg_error_t **err);
/* The same without blocking: cb gets NULL, or why it failed (borrowed) —
 * at once without a launcher, else when the launcher answers or the link's
 * timeout passes.  Returns a request to sandbox_cancel (0: already done). */
typedef void(sandbox_opened_fn)(const sg_error_t *err, void *arg);
uint64_t sandbox_workspace_open_async(const sandbox_env_t *env, const char *path,
                                      sandbox_opened_fn *cb, void *arg);
/* No callback for request (from any of the *_async, give or log_tail
 * calls) any more; the work itself goes on.  0 is no request. */
void sandbox_cancel(uint64_t request);
/* A volume (STATE/volumes/<uuid>): storage that outlives sandboxes and is
 * bind-mounted into any number of them (sandbox_opts_t.mounts).  As a
 * workspace, on a file system of its own of bytes (> 0: its size limit),
 * made once (mkfs) and mounted by each open; the sandbox group may read and
 * write it.  Blocking, for start-up; the _async form as
 * sandbox_workspace_open_async.  sandbox_workspace_close unmounts or
 * deletes one. */
int sandbox_volume_open(const sandbox_env_t *env, const char *path, uint64_t bytes,
                        sg_error_t **err);
uint64_t sandbox_volume_open_async(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                   sandbox_opened_fn *cb, void *arg);
/* Whether mounts is a list sandbox_opts_t.mounts takes: at most
 * SANDBOX_MOUNTS of {"source": STATE/volumes/<uuid> (env's), "path": an
 * absolute path inside, "read_only": bool}, the paths distinct, none of
 * them or under them the sandbox's own (/, /proc, /dev, /sys, /usr, /etc,
 * /tmp, /conn, /home/user itself, /sandgate-*). */
#define SANDBOX_MOUNTS 16
int sandbox_check_mounts(const sandbox_env_t *env, const json_t *mounts, sg_error_t **err);
/* Unmounts it; with remove, deletes its files too (in the background when
 * through the launcher). */
void sandbox_workspace_close(const sandbox_env_t *env, const char *path, bool remove);

/* What one sandbox gets beyond the server's configuration. */
typedef struct {
    bool internet;         /* a network of its own (egress.h) */
    const char *tenant;    /* whose it is: with tenant_cgroups, its cgroup is
                              /sandgate/t-TENANT/ID (cgroup.h); NULL: /sandgate/ID */
    uint64_t memory_bytes; /* its tenant's ceiling: the lower of this and the server's
                              memory_bytes is its limit; 0: the server's */
    uint64_t cpu_quota_us; /* the same for cpu_quota_us */
    const char *snapshot;  /* a snapshot's id (sandbox_snapshot_save): the sandbox starts as
                              the snapshot's kernel, restored from its image; NULL: fresh */
    const char *template;  /* a configured template's name: its root is the sandbox's /;
                              NULL: the server's */
    const char *egress_allow, *egress_deny; /* with internet: its own rules, in place before it
                                               runs (egress.h's egress_sandbox_rules); NULL: none */
    const char *egress_transforms;          /* with them, headers its requests get (egress.h's
                                               egress_own_t); NULL: none */
    const json_t *mounts; /* volumes bind-mounted into it (sandbox_check_mounts); NULL: none.
                             A pause, restore or snapshot keeps them: its image names them */
} sandbox_opts_t;

/* Prepares kernel id's directory, connection file and bundle for spec, with
 * workspace as its home; with opts->internet, its network too (egress.h;
 * an error when the operator allows none).  Does not start anything. */
sandbox_t *sandbox_new(sandbox_env_t *env, const char *id, const kspec_t *spec,
                       const sandbox_opts_t *opts, const char *workspace, sg_error_t **err);
/* Its tenant is tenant from now on (a pool kernel claimed): with tenant
 * cgroups, a running sandbox's processes move to the tenant's cgroup with
 * their limits (cgroup.h's cgroup_move), and a paused one is
 * restored there.  In the background; problems are logged (it stays where
 * it was). */
void sandbox_set_tenant(sandbox_t *sb, const char *tenant);
/* A sandbox with a network gets allow and deny as its own rules, and
 * transforms as its headers, from now on (egress.h's egress_sandbox_rules:
 * lists of addresses, CIDR ranges and host names, all empty for none),
 * running or paused.  cb exactly once, perhaps
 * before this returns: NULL, or why not (borrowed) — a sandbox without a
 * network, a list that is not one, the launcher silent. */
typedef void(sandbox_rules_fn)(const sg_error_t *err, void *arg);
void sandbox_set_egress(sandbox_t *sb, const char *allow, const char *deny, const char *transforms,
                        sandbox_rules_fn *cb, void *arg);
/* Whether allow, deny and transforms are what sandbox_set_egress takes:
 * the number of host names in them, or -1. */
int sandbox_check_egress(const char *allow, const char *deny, const char *transforms,
                         sg_error_t **err);
/* Re-opens the sandbox of a kernel that outlived a previous sandgate; pid 0:
 * a paused one (its checkpoint must exist), for sandbox_resume.  Blocking:
 * for start-up. */
sandbox_t *sandbox_adopt(sandbox_env_t *env, const char *id, pid_t pid, sg_error_t **err);
/* Frees the handle only: the sandbox keeps running. */
void sandbox_free(sandbox_t **self_p);

const char *sandbox_id(const sandbox_t *self);
const char *sandbox_dir(const sandbox_t *self);
/* Its cgroup under each hierarchy's mount point, runsc's cgroupsPath:
 * /sandgate/t-TENANT/ID with tenant_cgroups and a tenant, else
 * /sandgate/ID (cgroup.h); NULL in mode none. */
const char *sandbox_cgroup(sandbox_t *self);
/* What a running sandbox uses, from its cgroup's counters: CPU time since
 * it started (its restores' too), memory (page cache included), of which
 * page cache, and its memory limit (0: none).  false when they cannot be
 * read (mode none, a paused sandbox, a cgroup not there). */
typedef struct {
    uint64_t cpu_ns, mem_bytes, mem_cache, mem_limit;
    bool known;
} sandbox_usage_t;
bool sandbox_usage(sandbox_t *self, sandbox_usage_t *u);
/* Host-side connection info (ip = host path of the ipc sockets). */
const jconn_t *sandbox_conn(const sandbox_t *self);
/* The process whose exit means the kernel is gone (runsc's sandbox process,
 * or the kernel itself in mode none); 0 before started. */
pid_t sandbox_pid(const sandbox_t *self);

/* Starts the sandbox without blocking; calls cb once: with pid > 0 when it
 * runs, or pid -1 and err (owned by the callee) when it failed. */
typedef void(sandbox_started_fn)(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg);
int sandbox_start(sandbox_t *self, sandbox_started_fn *cb, void *arg, sg_error_t **err);

/* Pause and resume (runsc checkpoint / restore; not in mode none).
 * sandbox_pause saves the running sandbox to kernels/<id>/checkpoint/ and
 * ends it: no process is left (its workspace stays mounted).  cb is called
 * once: err NULL and the image's size in bytes, or err with alive telling
 * whether the sandbox still runs (SG_E_NOSPACE: the disk would not hold the
 * image, nothing was changed) or was lost in the attempt (runsc kills a
 * sandbox whose checkpoint fails part-way).
 * sandbox_resume restores a paused sandbox (also one paused by a previous
 * sandgate: sandbox_adopt with pid 0) and calls cb like sandbox_start. */
typedef void(sandbox_paused_fn)(sandbox_t *sb, uint64_t bytes, sg_error_t *err, bool alive,
                                void *arg);
int sandbox_pause(sandbox_t *self, sandbox_paused_fn *cb, void *arg, sg_error_t **err);
int sandbox_resume(sandbox_t *self, sandbox_started_fn *cb, void *arg, sg_error_t **err);
/* A checkpoint that leaves the sandbox running (runsc checkpoint
 * --leave-running), for a snapshot of a running session: as sandbox_pause,
 * but cb's alive is true and, on success, the sandbox runs on with its
 * relay detached (nothing reaches the kernel) and its image in
 * kernels/<id>/checkpoint/ until sandbox_reattach, after
 * sandbox_snapshot_save took it.  Only where sandbox_env_can_save_live. */
int sandbox_save_live(sandbox_t *self, sandbox_paused_fn *cb, void *arg, sg_error_t **err);
/* After sandbox_save_live, whatever came of it: the relay listens again
 * (the kernel's clients reconnect) and the image is dropped. */
void sandbox_reattach(sandbox_t *self);
/* Whether env's runsc checkpoints a sandbox and lets it run on, and saves
 * and restores a sandbox's network stack (listening sockets come back): a
 * runsc of 2024-04 or later.  Debian 12's (2022-12-19) does neither. */
bool sandbox_env_can_save_live(const sandbox_env_t *env);
/* Snapshots (runsc only): STATE/snapshot-images/<sid>/ holds a paused
 * sandbox's runsc image in image/ (hard-linked: taking it copies nothing), its
 * connection.json (the kernel's ports and key live in its memory) and a
 * copy of its workspace: workspace.img, sparse (reflinked where the file
 * system can), or workspace/ when workspaces have no size limit.  sid is a
 * UUID.  sandbox_snapshot_save saves paused sb (its checkpoint exists) as
 * sid: cb gets the snapshot's bytes on disk or why not, exactly once,
 * perhaps before this returns (the copy is made while the caller, or the
 * launcher, waits: as mkfs for a new workspace).  A sandbox made with
 * sandbox_opts_t.snapshot starts from one; its workspace comes from
 * sandbox_workspace_restore_async. */
typedef void(sandbox_saved_fn)(uint64_t bytes, const sg_error_t *err, void *arg);
void sandbox_snapshot_save(sandbox_t *self, const char *sid, sandbox_saved_fn *cb, void *arg);
/* Removes snapshot sid's files (in the background through the launcher). */
void sandbox_snapshot_delete(sandbox_env_t *env, const char *sid);
/* A snapshot's files as one archive, to move it to another sandgate:
 * STATE/transfers/<sid>.tar (sparse files kept sparse), owned as that
 * directory is (by this daemon), which reads and writes it.  Export makes
 * the archive of snapshot sid's files; import makes snapshot sid's files
 * from it (sid must have none here; a failed import leaves none) and
 * removes it.  cb as sandbox_snapshot_save's: the archive's bytes. */
void sandbox_snapshot_transfer(sandbox_env_t *env, const char *sid, bool import,
                               sandbox_saved_fn *cb, void *arg);
/* The workspace at path becomes a copy of snapshot sid's (unmounted first
 * if mounted; what it held is gone) and is opened: as
 * sandbox_workspace_open_async otherwise. */
uint64_t sandbox_workspace_restore_async(const sandbox_env_t *env, const char *path,
                                         const char *sid, sandbox_opened_fn *cb, void *arg);
/* Whether sandboxes of env can be paused (runsc, not mode none). */
bool sandbox_env_can_pause(const sandbox_env_t *env);
/* Whether env's sandboxes are gVisor's (runsc): mode none's are plain
 * processes, whose files are the host's. */
bool sandbox_env_isolated(const sandbox_env_t *env);

/* Delivers sig to the kernel process (runsc kill, or kill(2)); async. */
int sandbox_signal(sandbox_t *self, int sig, sg_error_t **err);

/* A command run in a running sandbox, as the sandbox user: `runsc exec`
 * (through the launcher when there is one), or in mode none a plain process
 * in the workspace.  It runs under `sandgate-init --group` in a process
 * group of its own, with the sandbox's environment plus env, its stdin,
 * stdout and stderr the three fds given (the caller keeps its own, and may
 * close them once this returns).  Paths are resolved inside the sandbox
 * (gVisor's view of its files), never on the host. */
typedef struct {
    const char *const *argv; /* argv[0]: a path, or a name found in the sandbox's PATH */
    const char *const *env;  /* "NAME=VALUE" added; NULL: none */
    const char *cwd;         /* absolute, inside; NULL: /home/user (the workspace) */
} sandbox_exec_t;
/* Called once, from the loop, when the command has ended: status is its
 * wait status as sandgate-init reports it (exit code, 128 + signal), or -1
 * with err when it could not be run (borrowed). */
typedef void(sandbox_exec_done_fn)(int status, const sg_error_t *err, void *arg);
/* Starts x; returns a handle for sandbox_exec_signal (> 0), or 0 with *err
 * (SG_E_INVALID: a malformed command; SG_E_CONFLICT: the sandbox is not
 * running). */
uint64_t sandbox_exec(sandbox_t *self, const sandbox_exec_t *x, const int fds[3],
                      sandbox_exec_done_fn *cb, void *arg, sg_error_t **err);
/* Delivers sig (INT, TERM, HUP or KILL) to the whole process group of the
 * command exec started; asynchronous, and nothing when it has ended. */
int sandbox_exec_signal(sandbox_t *self, uint64_t exec, int sig, sg_error_t **err);
/* The process id, inside the sandbox, of the command exec started (its
 * sandgate-init --group, the leader of its process group; in mode none the
 * host's): cb gets it (> 0), 0 while it has none yet (runsc exec writes it
 * within the command's first ~50 ms: ask again), or -1 once the command
 * has ended or is unknown.  cb exactly once, perhaps before this returns. */
typedef void(sandbox_pid_fn)(long pid, void *arg);
void sandbox_exec_pid(sandbox_t *self, uint64_t exec, sandbox_pid_fn *cb, void *arg);
/* How many commands sandbox_exec started on it are still running (a
 * sandbox with commands cannot be paused: runsc could not save their host
 * pipes). */
unsigned sandbox_exec_count(const sandbox_t *self);

/* A stream to a server the sandbox's code runs on port (1..65535) of its
 * own loopback: a non-blocking socket, or -1 with *err.  In a runsc
 * sandbox, sandgate-init connects (guest/init.c's HOST-ctl "connect") and
 * its answer comes first on the stream: "ok\n", or "error WHY\n" and the
 * end (*ack true: the reader takes that line before the server's bytes).
 * In mode none (no isolation) a connection to the host's own 127.0.0.1,
 * perhaps still under way (*ack false: writable once made). */
int sandbox_port_open(sandbox_t *sb, int port, bool *ack, sg_error_t **err);

/* Kernels beside the first: a sandbox holds up to SANDBOX_GUESTS more,
 * numbered 2.., sharing its files and processes.  In a runsc sandbox
 * sandgate-init starts them on request (guest/init.c, HOST-ctl) and relays
 * their sockets; in mode none each is a plain process.  Kernel n's ports
 * are n*10 + the first's, its key the first's (one sandbox, one trust).
 * cb is called at most once, from the loop: the kernel ended (status its
 * exit code, 128 + signal), or -1 with why (borrowed) when its start was
 * refused or the sandbox stopped reporting on it (it ended, or was paused).
 * env: NAME -> string, added to the kernel's environment (NULL: none).
 * sb must be running, and outlive the guest. */
#define SANDBOX_GUESTS 16
/* The why of a guest whose report ended without its end (cb's). */
#define SANDBOX_GUEST_LOST "its sandbox stopped reporting on it (ended or paused)"
typedef struct sandbox_guest sandbox_guest_t;
typedef void(sandbox_guest_fn)(sandbox_guest_t *g, int status, const char *why, void *arg);
sandbox_guest_t *sandbox_guest_start(sandbox_t *sb, int n, const kspec_t *spec, const json_t *env,
                                     sandbox_guest_fn *cb, void *arg, sg_error_t **err);
/* The same for kernel n, started before in this sandbox (before it paused,
 * or in the sandbox a snapshot saved): its end is reported as above. */
sandbox_guest_t *sandbox_guest_watch(sandbox_t *sb, int n, const kspec_t *spec,
                                     sandbox_guest_fn *cb, void *arg, sg_error_t **err);
/* Kills every kernel beside the first but those numbered in keep (a
 * restored image's that nothing will use); best effort, no answer. */
void sandbox_guests_kill(sandbox_t *sb, const int *keep, size_t nkeep);
const jconn_t *sandbox_guest_conn(const sandbox_guest_t *g);
int sandbox_guest_signal(sandbox_guest_t *g, int sig, sg_error_t **err);
/* No more callbacks; the kernel is killed when kill_it.  Frees it. */
void sandbox_guest_end(sandbox_guest_t **g_p, bool kill_it);

/* Kills and removes the sandbox and its directory (not the workspace).
 * Blocking when wait is true (start-up, shutdown, tests), else in the
 * background. */
void sandbox_remove(sandbox_t *self, bool wait);
/* Same for a container id found in runsc's state but in no record. */
void sandbox_remove_id(sandbox_env_t *env, const char *id, bool wait);
/* Container ids runsc knows under our root (JSON array of strings).
 * Blocking: for start-up. */
json_t *sandbox_list(sandbox_env_t *env, sg_error_t **err);

/* Packets the egress rules refused (egress.h), without blocking: cb is
 * called exactly once, perhaps before this returns, with counts (borrowed)
 * {"total": N, "sandboxes": {sandbox id: N}} — the total over every sandbox
 * since the rules were installed, and each sandbox whose veth is up and
 * refused something — or with why not (no --egress-allow; the launcher did
 * not answer within its timeout). */
typedef void(sandbox_refused_fn)(const json_t *counts, const sg_error_t *err, void *arg);
void sandbox_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg);

/* From now on, every privileged step of environments made after this call
 * is a request to the launcher on fd (launcher.h); its answers are read on
 * loop.  A request not answered within timeout_ms (0: 10 s) fails with
 * SG_E_TIMEOUT; the steps on a request's path (workspace, bundle, start,
 * removal) never wait for it on the loop.  When the launcher is gone (the
 * link reads end-of-file or fails), on_lost(arg) is called once, on the
 * loop, and every request from then on fails with SG_E_UNAVAILABLE.  Call
 * once, before sandbox_env_new. */
typedef void(sandbox_lost_fn)(void *arg);
void sandbox_set_launcher(loop_t *loop, int fd, int timeout_ms, sandbox_lost_fn *on_lost,
                          void *arg);
/* Whether there is a launcher (sandbox_set_launcher was called). */
bool sandbox_has_launcher(void);

/* The keys file, read by the launcher (it keeps root; the daemon may not
 * read it any more): cb gets its text, mode and owner, or why not (a
 * silent launcher: a timeout).  Called back on the loop. */
typedef void(sandbox_keys_fn)(const char *text, unsigned mode, unsigned uid, const sg_error_t *err,
                              void *arg);
void sandbox_read_keys(sandbox_keys_fn *cb, void *arg);

/* Gives a file or directory that this process created in a workspace (fd
 * open on it; it may be closed as soon as this returns) to the sandbox
 * user, so the code owns what the API uploads.  Through the launcher when
 * there is one, which checks that fd is a regular file or directory of a
 * workspace owned by this process's uid.  Never blocks: cb gets NULL, or
 * why not (borrowed: the launcher refused, or did not answer within its
 * timeout, SG_E_TIMEOUT) — at once without a launcher (where a failed chown
 * is only logged: the file stays this process's), else from the loop.
 * Returns a request for sandbox_cancel (0: cb was called already). */
typedef void(sandbox_given_fn)(const sg_error_t *err, void *arg);
uint64_t sandbox_give(int fd, sandbox_given_fn *cb, void *arg);
/* The same for a file or directory of a volume (any file there, whoever
 * made it), to the owner and mode given: uid and gid 1 to 2^31-1 (-1: the
 * sandbox user's), mode its permission bits and the setgid bit of a
 * directory (-1: unchanged). */
typedef struct {
    int64_t uid, gid;
    int mode;
} sandbox_owner_t;
uint64_t sandbox_give_as(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg);

/* The last max bytes of the kernel's log (stdout+stderr), for errors,
 * without blocking: cb gets them (borrowed; "" when there is no log or the
 * launcher did not answer within its timeout) — at once without a launcher,
 * else from the loop.  Returns a request for sandbox_cancel (0: cb was
 * called already). */
typedef void(sandbox_tail_fn)(const char *tail, void *arg);
uint64_t sandbox_log_tail(const sandbox_t *self, size_t max, sandbox_tail_fn *cb, void *arg);

#endif
