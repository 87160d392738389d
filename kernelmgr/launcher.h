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
 * INT, TERM or KILL, and every sandbox limit comes from the launcher's
 * configuration.  Operations:
 *
 *   env                                 is the state directory ready?
 *   workspace_open  {path}              create/mount a workspace
 *   workspace_close {path, remove}
 *   new     {id, kernelspec, workspace} bundle + connection file -> {conn}
 *   adopt   {id, pid}                   a sandbox left by a previous sandgate -> {conn}
 *                                       (pid 0: a paused one, whose checkpoint exists)
 *   start   {id}                        runsc run -> {pid} when it runs
 *   pause   {id}                        runsc checkpoint -> {bytes}, or an error with
 *                                       "alive": whether the sandbox still runs
 *   resume  {id}                        runsc restore -> {pid} when it runs
 *   signal  {id, sig}
 *   remove  {id, wait}                  kill and delete (a known or listed id)
 *   free    {id}                        forget the handle; the sandbox keeps running
 *   list                                -> {ids}: runsc's containers
 *   log     {id, max}                   -> {text}: the tail of kernel.log
 *   egress_refused                      -> {counts: {total, sandboxes: {id: N}}}: packets
 *                                       the egress rules refused (nft -j; sandbox.h)
 */
#ifndef SG_LAUNCHER_H
#define SG_LAUNCHER_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"
#include "kernelmgr/sandbox.h"

typedef struct {
    sandbox_config_t sandbox;
    const char *state_dir;
    const char *kernelspec_path; /* NULL: the Jupyter defaults */
    uid_t uid;                   /* the unprivileged daemon's */
    gid_t gid;                   /* the sandbox group */
} launcher_config_t;

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

#endif
