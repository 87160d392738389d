/* launcher: sandgate's privileged half (privilege separation, after OpenBSD
 * httpd's proc.c and bubblewrap).
 *
 * Started as root with runsc sandboxes, sandgate forks before it reads a
 * single byte from the network.  The child, the launcher, keeps root and
 * does only what needs it: prepare the state directory, create, mount and
 * remove workspaces, write OCI bundles and connection files, and run runsc
 * (run, state, kill, delete, list).  The parent drops to an unprivileged
 * uid whose group is the sandbox group (which owns the workspaces and the
 * kernels' sockets) and does everything else: HTTP, JSON, WebSockets, MCP,
 * the Jupyter wire protocol, the kernels' state machines.
 *
 * The two talk over a SOCK_SEQPACKET socket pair: one JSON object per
 * packet, {"seq": N, "op": ..., ...} one way and {"seq": N, ...} or
 * {"seq": N, "error": {"kind": K, "message": M}} back.  The launcher trusts
 * nothing in a request: ids must be sandgate's own (a UUID, with
 * "-<generation>" for a sandbox), paths must be the state directory's own
 * workspace paths for those ids, kernelspecs are looked up in the
 * launcher's own list (the argv never comes from the daemon), signals are
 * INT, TERM or KILL, tenant names are keys-file names, and every sandbox
 * limit comes from the launcher's configuration (a tenant's ceilings can
 * only lower it).  The operations are one table, launcher_ops below: the
 * daemon names a request's op from it (sandbox_link.c) and the launcher
 * finds its checks and its handler in it (launcher.c); docs/architecture.md
 * lists them.
 */
#ifndef SG_LAUNCHER_H
#define SG_LAUNCHER_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"
#include "kernelmgr/sandbox/sandbox.h"

typedef struct {
    sandbox_config_t sandbox;
    const char *state_dir;
    const char *kernelspec_path; /* NULL: the Jupyter defaults */
    uid_t uid;                   /* the unprivileged daemon's */
    gid_t gid;                   /* the sandbox group */
    const char *keys_file;       /* --keys-file, read for the daemon (LOP_KEYS); or NULL */
} launcher_config_t;

/* The launcher's operations (the "op" of a request). */
typedef enum {
    LOP_ENV,               /* is the state directory ready? */
    LOP_WORKSPACE_OPEN,    /* {path}: create/mount a workspace */
    LOP_WORKSPACE_CLOSE,   /* {path, remove} */
    LOP_NEW,               /* {id, kernelspec, workspace, internet, tenant, memory, cpu_quota,
                              snapshot}: bundle + connection -> {conn} (the snapshot's) */
    LOP_ADOPT,             /* {id, pid}: a sandbox left by a previous sandgate -> {conn}
                              (pid 0: a paused one, whose checkpoint exists) */
    LOP_START,             /* {id}: runsc run -> {pid} when it runs */
    LOP_PAUSE,             /* {id, leave_running}: runsc checkpoint -> {bytes}, or an error
                              with "alive" (leave_running: sandbox_save_live) */
    LOP_REATTACH,          /* {id}: after a leave_running pause (sandbox_reattach) */
    LOP_RESUME,            /* {id}: runsc restore -> {pid} when it runs */
    LOP_SIGNAL,            /* {id, sig}: INT, TERM or KILL */
    LOP_REMOVE,            /* {id, wait}: kill and delete (a known or listed id) */
    LOP_FREE,              /* {id}: forget the handle; the sandbox keeps running */
    LOP_LIST,              /* -> {ids}: runsc's containers */
    LOP_LOG,               /* {id, max} -> {text}: the tail of kernel.log */
    LOP_EGRESS_REFUSED,    /* -> {counts: {total, sandboxes: {id: N}}} (sandbox.h) */
    LOP_GIVE,              /* one fd: a file of a workspace becomes the sandbox user's */
    LOP_KEYS,              /* -> {text, mode, uid}: the keys file named at the fork (SIGHUP) */
    LOP_TENANT,            /* {id, tenant}: a claimed pool kernel's sandbox moves to the
                              tenant's cgroup */
    LOP_EXEC,              /* {id, argv, env, cwd} + three fds (stdin, stdout, stderr): a
                              command in the sandbox as its user -> {status} when it ends */
    LOP_EXEC_SIGNAL,       /* {id, exec: the seq of its exec, sig}: INT, TERM, HUP or KILL
                              to the command's process group */
    LOP_SNAPSHOT_SAVE,     /* {id, snapshot}: a paused sandbox saved as snapshot (a UUID)
                              -> {bytes} */
    LOP_SNAPSHOT_DELETE,   /* {snapshot}: its files removed */
    LOP_WORKSPACE_RESTORE, /* {path, snapshot}: the workspace becomes a copy of the
                              snapshot's, then opened */
    LOP_COUNT
} launcher_op_t;

/* What the launcher checks before an operation's handler runs, and how the
 * daemon may call it (launcher_op_desc_t.flags). */
enum {
    LOP_NEEDS_ENV = 1 << 0,     /* refused while the state directory is not ready */
    LOP_TAKES_PATH = 1 << 1,    /* "path" is exactly STATE/workspaces/<uuid> */
    LOP_TAKES_ID = 1 << 2,      /* "id" is a sandbox id (UUID-N) */
    LOP_TAKES_SANDBOX = 1 << 3, /* ... of a sandbox the launcher holds (new/adopt made it) */
    LOP_TAKES_FD = 1 << 4,      /* exactly one file descriptor (give) */
    LOP_STARTUP = 1 << 5, /* the daemon may wait for the answer: at start-up and shutdown only */
    LOP_ASYNC = 1 << 6,   /* the daemon may send it while serving; the answer goes to a callback */
    LOP_TIMED = 1 << 7,   /* an async answer is awaited --launcher-timeout at most (otherwise
                             the kernel's own timeouts bound it: start, pause, resume; a
                             command's, its caller's) */
    LOP_TAKES_STDIO = 1 << 8, /* exactly three file descriptors (exec); no other op takes any */
};

typedef struct launcher launcher_t;
/* One request as the launcher's handler gets it, checked as its flags say
 * (borrowed, for the call). */
typedef struct {
    json_int_t seq;
    json_t *body;
    const char *id;   /* LOP_TAKES_ID */
    sandbox_t *sb;    /* the held sandbox of id, or NULL (LOP_TAKES_SANDBOX: never NULL) */
    const char *path; /* LOP_TAKES_PATH */
    const char *uuid; /* LOP_TAKES_PATH: the workspace's session id, within path */
    int fd;           /* LOP_TAKES_FD; else -1 */
    int fds[3];       /* LOP_TAKES_STDIO */
} launcher_req_t;
/* Answers the request (at once or later, through reply functions of launcher.c). */
typedef void(launcher_handler_fn)(launcher_t *L, const launcher_req_t *req);

typedef struct {
    const char *name; /* on the wire */
    unsigned flags;
    launcher_handler_fn *handle;
} launcher_op_desc_t;

/* Indexed by launcher_op_t; every entry is filled. */
extern const launcher_op_desc_t launcher_ops[LOP_COUNT];
/* The operation named name; -1 when there is none. */
int launcher_op_find(const char *name);

/* The uid the unprivileged half runs as unless --user says otherwise: no
 * host account should have it. */
#define LAUNCHER_DEFAULT_UID 64122

/* Forks the launcher.  In the calling process, returns the link's fd (the
 * launcher's pid in *pid); the launcher itself never returns from here.  Call
 * before any thread or ZeroMQ context exists. */
int launcher_fork(const launcher_config_t *cfg, pid_t *pid, sg_error_t **err);

/* Serves requests on fd until it closes (exported for tests).  Prepares the
 * state directory first; a failure is answered to every "env". */
int launcher_serve(const launcher_config_t *cfg, int fd);

/* Drops the calling process to cfg's uid and gid, no supplementary groups
 * but the sandbox group, umask 007.  Fails if root could be regained. */
int launcher_drop_privileges(const launcher_config_t *cfg, sg_error_t **err);

/* Id checks, shared with the tests: a UUID, and a sandbox id (UUID-N). */
bool launcher_valid_uuid(const char *s);
bool launcher_valid_sandbox_id(const char *s);
/* A tenant's name as the keys file has them (gateway/auth/keys.h's
 * keys_valid_name), or "admin": 1-63 of A-Z a-z 0-9 . _ - */
bool launcher_valid_tenant(const char *s);

#endif
