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
 * The two talk over a SOCK_SEQPACKET socket pair (kernelmgr/sandbox/link.h
 * says how).  The launcher trusts
 * nothing in a request: ids must be sandgate's own (a UUID, with
 * "-<generation>" for a sandbox), paths must be the state directory's own
 * workspace paths for those ids, kernelspecs are looked up in the
 * launcher's own list (the argv never comes from the daemon), signals are
 * INT, TERM or KILL, tenant names are keys-file names, and every sandbox
 * limit comes from the launcher's configuration (a tenant's ceilings can
 * only lower it).  The operations are one table, launcher_ops (the sandbox room's
 * kernelmgr/sandbox/link.h, the daemon's end of the link, which names a
 * request's op from it): its name on the wire and what the launcher checks
 * before the handler runs; the launcher's handlers are launcher_handlers,
 * indexed the same way (launcher.c).  docs/architecture.md lists them.
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

/* The launcher's handler of each operation of launcher_ops (sandbox/link.h),
 * indexed by launcher_op_t; every entry is filled. */
extern launcher_handler_fn *const launcher_handlers[LOP_COUNT];

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
