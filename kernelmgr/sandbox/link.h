/* link: the wire between the daemon and its privileged launcher — the
 * launcher's operations as both ends name and check them.
 *
 * This process's end of the link is link.c (a table of sandbox operations,
 * internal.h); the other end is the launcher (kernelmgr/launcher/), which
 * serves these operations with root and includes them through sandbox.h.
 * The protocol is the sandbox room's, so that the launcher room depends on
 * this one and never the reverse.
 *
 * A SOCK_SEQPACKET socket pair: one JSON object per packet, {"seq": N,
 * "op": ..., ...} one way and {"seq": N, ...} or {"seq": N, "error":
 * {"kind": K, "message": M}} back; file descriptors ride along as
 * SCM_RIGHTS where an operation's flags say so.
 */
#ifndef SG_SANDBOX_LINK_H
#define SG_SANDBOX_LINK_H

/* The launcher's operations (the "op" of a request). */
typedef enum {
    LOP_ENV,            /* is the state directory ready? */
    LOP_WORKSPACE_OPEN, /* {path, bytes}: create/mount a workspace (bytes 0), a volume (its size) */
    LOP_WORKSPACE_CLOSE,   /* {path, remove} */
    LOP_NEW,               /* {id, kernelspec, workspace, internet, tenant, memory, cpu_quota,
                              snapshot, template, allow, deny}: bundle + connection -> {conn}
                              (the snapshot's) */
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
    LOP_EGRESS_RULES,      /* {id, allow, deny}: the sandbox's own egress rules (egress.h) */
    LOP_TENANT,            /* {id, tenant}: a claimed pool kernel's sandbox moves to the
                              tenant's cgroup */
    LOP_EXEC,              /* {id, argv, env, cwd} + three fds (stdin, stdout, stderr): a
                              command in the sandbox as its user -> {status} when it ends */
    LOP_EXEC_PID,          /* {id, exec: the seq of its exec} -> {pid}: inside (sandbox.h) */
    LOP_EXEC_SIGNAL,       /* {id, exec: the seq of its exec, sig}: INT, TERM, HUP or KILL
                              to the command's process group */
    LOP_SNAPSHOT_SAVE,     /* {id, snapshot}: a paused sandbox saved as snapshot (a UUID)
                              -> {bytes} */
    LOP_SNAPSHOT_DELETE,   /* {snapshot}: its files removed */
    LOP_WORKSPACE_RESTORE, /* {path, snapshot}: the workspace becomes a copy of the
                              snapshot's, then opened */
    LOP_SNAPSHOT_TRANSFER, /* {snapshot, import}: its files to or from STATE/transfers/<sid>.tar
                              -> {bytes} (sandbox_snapshot_transfer) */
    LOP_COUNT
} launcher_op_t;

/* What the launcher checks before an operation's handler runs, and how the
 * daemon may call it (launcher_op_desc_t.flags). */
enum {
    LOP_NEEDS_ENV = 1 << 0,     /* refused while the state directory is not ready */
    LOP_TAKES_PATH = 1 << 1,    /* "path" is exactly STATE/workspaces/<uuid> or volumes/<uuid> */
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

/* One operation: its name on the wire and its flags. */
typedef struct {
    const char *name; /* on the wire */
    unsigned flags;
} launcher_op_desc_t;

/* Indexed by launcher_op_t; every entry is filled. */
extern const launcher_op_desc_t launcher_ops[LOP_COUNT];
/* The operation named name; -1 when there is none. */
int launcher_op_find(const char *name);

#endif
