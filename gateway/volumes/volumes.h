/* volumes: a tenant's named storage that outlives sandboxes, mounted into
 * any number of them at creation — sandgate's and E2B's Volume API
 * (POST/GET/DELETE /volumes, GET /volumes/{id}) and E2B's volume content
 * API (/volumecontent/{id}/path|dir|file), which reads and writes a
 * volume's files with no sandbox running.
 *
 * A volume is STATE/volumes/<id>: an ext4 image of its size (the limit of
 * what it holds) loop-mounted there by the sandbox layer
 * (sandbox_volume_open), owned by the sandbox user, the sandbox group (this
 * daemon) reading and writing it.  STATE/secrets/volumes.json keeps the list: id
 * (a replica's UUID), name (unique per tenant), owner, size, token.  A
 * sandbox mounts it by name (volumes_mounts): a bind mount at the path
 * asked for, read-write or read-only; gVisor revalidates shared mounts, so
 * two sandboxes writing one volume see each other's files.
 *
 * What the rest of a sandbox's life does with it: a pause, and a restart
 * of sandgate, keep it mounted (the files stay where they are); a snapshot
 * records the mounts, not the volume's files — a fork or a sandbox made
 * from the snapshot mounts the same volumes as they are then (refused,
 * 409, if one has been deleted since).  A volume mounted by a session,
 * live or paused, is not deleted (409 naming them).
 *
 * Quotas: the sizes of a tenant's volumes together, max-volume-mib
 * (tenants.h).  Every id is its tenant's: another tenant's volume is an
 * unknown one.  The content API takes the tenant's key or the volume's
 * own token (E2B's VolumeAndToken.token), good for that volume only.
 */
#ifndef SG_VOLUMES_H
#define SG_VOLUMES_H

#include <jansson.h>

#include "gateway/http/http.h"
#include "kernelmgr/manager/manager.h"

#define VOLUMES_PER_TENANT 100

typedef struct volumes volumes_t;

/* The volumes in STATE/secrets/volumes.json, each mounted again (blocking: at
 * start-up).  default_mib: a new volume's size when it names none. */
volumes_t *volumes_new(loop_t *loop, kmgr_t *kmgr, const char *state_dir, int default_mib,
                       void (*wake)(void *), void *wake_arg, sg_error_t **err);
void volumes_destroy(volumes_t **self_p);
int volumes_register(volumes_t *self, http_server_t *http, sg_error_t **err);

/* The mounts for a new sandbox of owner's from spec, E2B's volumeMounts:
 * [{"name", "path", "readOnly"?}] (NULL or empty: none).  A new array for
 * kmgr_start_opts_t.mounts, or NULL with *err: SG_E_NOTFOUND for a name
 * owner has no volume of, SG_E_INVALID for a malformed list or path.
 * *none: there are none (NULL is then no error). */
json_t *volumes_mounts(volumes_t *self, const char *owner, const json_t *spec, bool *none,
                       sg_error_t **err);
/* Whether every volume mounts names (kmgr_start_opts_t.mounts, a
 * snapshot's) still exists: 0, or -1 with *err (SG_E_CONFLICT naming its
 * mount path). */
int volumes_check(const volumes_t *self, const json_t *mounts, sg_error_t **err);

#endif
