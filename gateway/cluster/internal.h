/* The cluster room's own: what transfer.c (snapshots in and out) and
 * move.c (a context moved to a peer) share. */
#ifndef SG_CLUSTER_INTERNAL_H
#define SG_CLUSTER_INTERNAL_H

#include "gateway/cluster/cluster.h"

#define CLUSTER_RECORD_HEADER "Sandgate-Snapshot"

struct cluster {
    loop_t *loop;
    kmgr_t *kmgr;
    api_t *api;
    char *transfers;  /* STATE/transfers */
    char *auth;       /* STATE/secrets/peer-auth: the header a peer is asked with; NULL: none */
    json_t *peers;    /* --peers: {ID: "HOST:PORT"} */
    char *peers_file; /* --peers @FILE: read into peers at each move; NULL: none */
    void (*wake)(void *);
    void *wake_arg;
};

/* The record's Sandgate-Snapshot header value (base64url of its JSON; a
 * new string). */
char *cluster_record_header(const json_t *record);

/* POST /contexts/{context}/move, POST /cluster/contexts, GET /cluster/routes. */
int cluster_move_register(cluster_t *self, http_server_t *http, const http_front_t *front,
                          sg_error_t **err);

#endif
