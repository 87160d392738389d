/* replica: which of several sandgates behind one proxy this is, and the ids
 * it hands out.
 *
 * --replica-id names the replica (default: the host name, so a StatefulSet
 * pod sandgate-2 is replica sandgate-2).  Its tag is the first 8 hex digits
 * of SHA-256(id), and every id the replica makes for a client — contexts
 * (kernels), Jupyter sessions, MCP sessions — is a version-4 UUID whose
 * first group is that tag.  A proxy that knows the replicas routes any
 * request by the id in it, with no state of its own; the ids stay
 * UUID-shaped for clients that check (jupyter_server's URL patterns). */
#ifndef SG_REPLICA_H
#define SG_REPLICA_H

#include <stdbool.h>

#include "common/error.h"

#define REPLICA_ID_MAX 63

/* id: [A-Za-z0-9._-]{1,63}; NULL or "": the host name (up to its first
 * dot, cut to 63 characters). */
int replica_init(const char *id, sg_error_t **err);
bool replica_valid_id(const char *id);
const char *replica_id(void);  /* "" until replica_init */
const char *replica_tag(void); /* 8 lowercase hex digits; "" until replica_init */
/* A version-4 UUID, its first group the tag (random until replica_init). */
void replica_uuid(char out[37]);
/* A random version-4 UUID. */
void uuid_v4(char out[37]);

#endif
