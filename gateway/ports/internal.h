/* The ports room's own: what ports.c (routes, access) and forward.c (one
 * request forwarded) share. */
#ifndef SG_PORTS_INTERNAL_H
#define SG_PORTS_INTERNAL_H

#include "gateway/ports/ports.h"

typedef struct fwd fwd_t;

struct ports {
    loop_t *loop;
    kmgr_t *kmgr;
    ports_public_fn *is_public;
    void *public_ctx;
    void (*wake)(void *);
    void *wake_arg;
    fwd_t *fwds; /* in flight, linked by fwd_t.next */
};

/* One request on its way to a sandbox's server and its answer on its way
 * back.  Made by the route's first call, freed when libmicrohttpd is done
 * with the request (ports.c's done). */
fwd_t *fwd_new(ports_t *ports, http_req_t *req, kernel_t *k, int port, const char *target);
/* The handler's every call: the answer once it is known, or a suspension
 * until it is. */
enum MHD_Result fwd_handle(fwd_t *f, http_req_t *req);
void fwd_free(fwd_t *f);
/* Forwards in flight to k's sandbox, and of tenant owner's sandboxes. */
unsigned fwd_count_sandbox(const ports_t *ports, const kernel_t *k);
long long fwd_count_owner(void *ports, const char *owner);

#endif
