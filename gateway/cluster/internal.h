/* The cluster room's own: what transfer.c (snapshots in and out) and
 * move.c (a context moved to a peer) share. */
#ifndef SG_CLUSTER_INTERNAL_H
#define SG_CLUSTER_INTERNAL_H

#include "gateway/cluster/cluster.h"

#define CLUSTER_RECORD_HEADER "Sandgate-Snapshot"

/* How long a context that moved away is still listed (GET /cluster/routes,
 * "moved", with where to), and how long a drain waits after its last move
 * before it ends: the proxies learn its new place meanwhile. */
#define MOVED_LISTED_MS 10000
#define MOVED_GRACE_MS 1500

struct cluster {
    loop_t *loop;
    kmgr_t *kmgr;
    api_t *api;
    char *transfers;  /* STATE/transfers */
    char *auth;       /* STATE/secrets/peer-auth: the header a peer is asked with; NULL: none */
    json_t *peers;    /* --peers: {ID: "HOST:PORT"} */
    char *peers_file; /* --peers @FILE: read into peers at each move; NULL: none */
    json_t *moving;   /* contexts moving away: {id: true} while they move, then
                         [monotonic ms until which they are listed, the replica
                         they went to] (move.c) */
    json_t *pollers;  /* the proxies asking GET /cluster/routes?poller=NAME:
                         {NAME: [times asked, monotonic ms of the last]} */
    void (*wake)(void *);
    void *wake_arg;
};

/* The record's Sandgate-Snapshot header value (base64url of its JSON; a
 * new string). */
char *cluster_record_header(const json_t *record);

/* Moves k to peer to (move.c): cb once when it ends — err NULL (status
 * 200) or why not (status the HTTP one; k stays here, open again) — and ms
 * it took.  -1 with *err, nothing started: to is no peer, or k cannot move
 * (busy, starting, sharing its sandbox, with volumes). */
typedef void(cluster_moved_fn)(const sg_error_t *err, unsigned status, int64_t ms, void *arg);
int cluster_move(cluster_t *self, kernel_t *k, const char *to, cluster_moved_fn *cb, void *arg,
                 sg_error_t **err);

/* A proxy named poller asked GET /cluster/routes (move.c waits for the
 * proxies to know of a move before it closes the context). */
void cluster_polled(cluster_t *self, const char *poller);

/* --peers @FILE read again into self->peers (a no-op without a file). */
int cluster_load_peers(cluster_t *self, sg_error_t **err);

/* POST /cluster/drain (drain.c), and its request's end (state freed, or
 * left to the drain under way). */
enum MHD_Result cluster_drain_route(void *ctx, http_req_t *req);
void cluster_drain_done(void *ctx, void *state, bool completed);

/* POST /contexts/{context}/move, POST /cluster/contexts, GET /cluster/routes. */
int cluster_move_register(cluster_t *self, http_server_t *http, const http_front_t *front,
                          sg_error_t **err);

#endif
