/* sandbox_cgroup: the cgroups of runsc's sandboxes.
 *
 * runsc makes each sandbox's cgroup (cgroupsPath /sandgate/ID, in every
 * mounted hierarchy, v1 or v2) and leaves it behind when the sandbox is
 * deleted, one per start and per resume; sandgate removes them.  Used by
 * sandbox_runsc.c and sandbox_pause.c only.
 */
#ifndef SG_SANDBOX_CGROUP_H
#define SG_SANDBOX_CGROUP_H

#include "common/error.h"

/* Removes sandbox id's cgroups; one that still has processes stays (rmdir
 * refuses it), so a live sandbox's is never taken. */
void cgroup_remove(const char *id);

/* At start: removes what deleted sandboxes and a crash left under
 * /sandgate, made a minute ago or more (another sandgate may be starting a
 * sandbox in a new, still empty one). */
void cgroup_sweep(void);

/* Puts sandbox id's CPU quota in place (runsc restore runs without it). */
int cgroup_set_cpu(const char *id, long long quota, long long period, sg_error_t **err);

#endif
