/* cgroup: the cgroups of runsc's sandboxes.
 *
 * runsc makes each sandbox's cgroup (its bundle's cgroupsPath, in every
 * mounted hierarchy, v1 or v2) and leaves it behind when the sandbox is
 * deleted, one per start and per resume; sandgate removes them.
 *
 * With --tenant-cgroups (the default) a tenant's sandboxes share a parent,
 * /sandgate/t-TENANT/ID, whose CPU weight is every tenant's (cgroup v1
 * cpu.shares 1024, v2 cpu.weight 100): the kernel's scheduler divides the
 * CPU between tenants first, then between each tenant's sandboxes, so a
 * tenant with many busy sandboxes gets no more than one with a single one.
 * Without it (or without a tenant: pool kernels of another mode), a
 * sandbox's cgroup is /sandgate/ID, each sandbox one share.  A tenant's
 * cgroup outlives its sandboxes while sandgate runs (the next one reuses
 * it); the start-up sweep removes empty ones.
 *
 * Used by sandbox.c, runsc.c and pause.c only.
 */
#ifndef SG_SANDBOX_CGROUP_H
#define SG_SANDBOX_CGROUP_H

#include "common/error.h"
#include "kernelmgr/sandbox/sandbox.h"

#define CGROUP_TOP "sandgate"
#define CGROUP_TENANT_PREFIX "t-"
#define CGROUP_TENANT_SHARES 1024 /* v1 cpu.shares of every tenant (the kernel's default) */
#define CGROUP_TENANT_WEIGHT 100  /* v2 cpu.weight (the same) */

/* Removes cgroup path (a cgroupsPath under /sandgate) in every hierarchy;
 * one that still has processes stays (rmdir refuses it), so a live
 * sandbox's is never taken.  Its tenant's cgroup stays. */
void cgroup_remove(const char *path);

/* At start: removes what deleted sandboxes and a crash left under
 * /sandgate, and tenants' cgroups left empty, made a minute ago or more
 * (another sandgate may be starting a sandbox in a new, still empty one). */
void cgroup_sweep(void);

/* For a sandbox whose cgroup is path, /sandgate/t-TENANT/ID, before runsc
 * run or restore makes it: makes its tenant's, /sandgate/t-TENANT, in every
 * hierarchy with a CPU controller and gives it the tenants' CPU weight.
 * Nothing for any other path.  Problems are logged: runsc makes the
 * directory anyway, with the kernel's default weight, which is the same. */
void cgroup_prepare(const char *path);

/* Puts the CPU quota of the sandbox whose cgroup is path in place (restore
 * runs without it). */
int cgroup_set_cpu(const char *path, long long quota, long long period, sg_error_t **err);

/* Moves a running sandbox from cgroup from to cgroup to (both cgroupsPaths
 * under /sandgate; to's tenant prepared with cgroup_prepare first): in
 * every hierarchy that has from, to is made with from's limits (cpuset,
 * memory, CPU, pids), every process of from is moved into it, and from is
 * removed.  The memory it had already used stays charged to /sandgate (v1
 * moves no charges): until it frees that, it can use that much more. */
int cgroup_move(const char *from, const char *to, sg_error_t **err);

/* The cgroupsPath of the OCI bundle config at config_path, when it is
 * under /sandgate; NULL otherwise.  A new string. */
char *cgroup_of_bundle(const char *config_path);

/* The counters of cgroup path now (sandbox_usage): false when none could
 * be read. */
bool cgroup_usage(const char *path, sandbox_usage_t *u);

#endif
