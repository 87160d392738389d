/* ports: servers that a sandbox's own code runs, reached from outside.
 *
 * A web app, an API or a notebook server started in a sandbox (`python3 -m
 * http.server 8001` through a command) listens on the sandbox's loopback,
 * which nothing outside can reach: the sandbox has no network address of
 * its own, or only an egress one.  sandgate forwards HTTP requests to it:
 *
 *   ANY /contexts/{id}/ports/{port}/PATH   sandgate's own form
 *   ANY PATH, Host: PORT-ID.DOMAIN        E2B's (Sandbox.get_host(port)),
 *                                          straight or through docker/'s
 *                                          proxy (E2b-Sandbox-Id and
 *                                          E2b-Sandbox-Port headers)
 *
 * The request goes to the server as HTTP/1.0 with Connection: close (one
 * request a connection), its answer comes back streamed, as the server
 * sends it.  The connection is made by sandgate-init inside the sandbox
 * (guest/init.c's "connect"), through the socket its kernels' relay uses:
 * nothing of the host is opened to the sandbox.  A paused sandbox is
 * resumed first, as any use resumes it.  WebSocket upgrades are not
 * forwarded (501).
 *
 * Who may: the sandbox's tenant (its key, or the sandbox's own token: E2B's
 * trafficAccessToken), or anyone when the sandbox's front end says its
 * ports are public (E2B's network.allowPublicTraffic, true unless the
 * sandbox was made with false).  Another tenant's sandbox is an unknown id
 * (404), and so is one of sandgate's own contexts asked without a
 * credential; an E2B sandbox made private, asked without one, is a 403
 * naming what it needs, as E2B answers.  The key sandgate
 * checked is not passed on: the server never sees Authorization, X-API-Key
 * or the sandbox token headers of a request that presented one.  The
 * Host it gets is the client's, or the sandbox's maskRequestHost.
 * Each forward in flight counts as work of the sandbox's tenant
 * (max-queued), and a sandbox has at most PORTS_MAX_PER_SANDBOX at once.
 */
#ifndef SG_PORTS_H
#define SG_PORTS_H

#include <stdbool.h>

#include "common/loop.h"
#include "gateway/http/http.h"
#include "kernelmgr/manager/manager.h"

#define PORTS_MAX_PER_SANDBOX 32
#define PORTS_HEAD_TIMEOUT_MS 120000 /* the server's answer must begin within */
#define PORTS_HEAD_MAX 65536         /* the most bytes of an answer's status and headers */
/* The ports of E2B's envd and code interpreter: never forwarded, their
 * requests are served by sandgate itself (gateway/envd, gateway/rest). */
#define PORTS_ENVD 49983
#define PORTS_CODE_INTERPRETER 49999

typedef struct ports ports_t;

/* Who may reach k's ports without a credential (k is a sandbox, not a
 * context within one): */
typedef enum {
    PORTS_HIDDEN,  /* nobody: such a caller is told of no such context (404) */
    PORTS_PRIVATE, /* nobody, told it needs a credential (403, as E2B tells) */
    PORTS_PUBLIC,  /* anyone */
} ports_access_t;
/* ... and *mask_host, when asked: the Host header its servers get instead
 * of the client's (E2B's maskRequestHost, "${PORT}" the port asked), or
 * NULL (borrowed until the sandbox changes). */
typedef ports_access_t(ports_public_fn)(void *ctx, const kernel_t *k, const char **mask_host);

/* wake: tells the HTTP server to run after a resume (http_server_wake). */
ports_t *ports_new(loop_t *loop, kmgr_t *kmgr, ports_public_fn *is_public, void *public_ctx,
                   void (*wake)(void *), void *wake_arg);
/* Registers the routes, the {exposed} parameter kind and the host rewrite. */
int ports_register(ports_t *self, http_server_t *http, sg_error_t **err);
/* Ends every forward (their clients see the connection end). */
void ports_destroy(ports_t **self_p);

#endif
