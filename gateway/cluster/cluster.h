/* cluster: what replicas do for each other — a snapshot moved from one
 * sandgate to another, the first part of moving a session between
 * replicas (docs/deploy-cluster.md):
 *
 *   GET /cluster/snapshots/{snapshot}   its files as one tar (sparse files
 *                                       kept sparse), its record in the
 *                                       Sandgate-Snapshot header (base64url JSON)
 *   PUT /cluster/snapshots/{id}         the same, taken in: the snapshot is
 *                                       this sandgate's from now on (201)
 *
 * An admin's only (the replicas share --token): a checkpoint image is
 * restored by runsc as it is, so only the operator may bring one in.  A
 * tenant's snapshot keeps its tenant, lineage and name; a context is made
 * from it as from any snapshot (POST /contexts {"snapshot"}).  Snapshots
 * of sessions with volumes are refused (a volume stays on its replica).
 */
#ifndef SG_CLUSTER_H
#define SG_CLUSTER_H

#include "gateway/http/http.h"
#include "gateway/rest/rest.h"
#include "kernelmgr/manager/manager.h"

typedef struct cluster cluster_t;

/* "ID=HOST:PORT ..." (spaces, commas or lines between) into peers
 * ({ID: "HOST:PORT"}; cleared first): --peers, checked by options.c. */
int cluster_parse_peers(const char *text, json_t *peers, sg_error_t **err);

/* peers: --peers, "ID=HOST:PORT ..." (the other replicas); token: --token,
 * the admin key the replicas share, which a peer is asked with. */
cluster_t *cluster_new(loop_t *loop, kmgr_t *kmgr, api_t *api, const char *state_dir,
                       const char *token, const char *peers, void (*wake)(void *), void *wake_arg,
                       sg_error_t **err);
void cluster_destroy(cluster_t **self_p);
int cluster_register(cluster_t *self, http_server_t *http, sg_error_t **err);

/* Moves every context of this replica to its peers, one at a time, each to
 * the next peer in turn (POST /cluster/drain; --drain-on-stop's SIGTERM):
 * done(summary, arg) once all have moved or stayed — {"moved": [{id,
 * replica, ms}], "stayed": [{id, why}]} (borrowed).  Returns how many it
 * began with; 0 (none, or no peers or --token): done is not called. */
typedef struct drain drain_t;
typedef void(cluster_drained_fn)(const json_t *summary, void *arg);
size_t cluster_drain(cluster_t *self, cluster_drained_fn *done, void *arg);

#endif
