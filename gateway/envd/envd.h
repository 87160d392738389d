/* envd: E2B's in-sandbox daemon's protocol, so that the E2B SDKs'
 * `files.*` and `commands.*` work against sandgate unchanged.
 *
 *   GET  /files?path=P               a file's bytes (streamed)
 *   POST /files?path=P               upload: multipart (a part per file,
 *                                    its filename the path when no path=)
 *                                    or application/octet-stream
 *   POST /filesystem.Filesystem/{Stat,MakeDir,Move,ListDir,Remove}
 *   POST /process.Process/{Start,Connect}          server-streaming
 *   POST /process.Process/{List,SendInput,SendSignal,CloseStdin}
 *
 * Connect RPC with the JSON codec (proto.h).  Which sandbox: the
 * context the request's E2b-Sandbox-Id header names (a context id of the
 * caller's tenant), else — no header, or the SDK's debug-mode id
 * "debug_sandbox_id" — the tenant's default Python context, the one
 * POST /execute without context_id uses (made if there is none yet).
 * Paths are the sandbox's (sbfs.h); a relative one is /home/user's, as in
 * envd.  Everything runs as the sandbox's one user.  See docs/clients.md.
 */
#ifndef SG_ENVD_H
#define SG_ENVD_H

#include "common/loop.h"
#include "gateway/commands/commands.h"
#include "gateway/http/http.h"
#include "gateway/rest/rest.h"
#include "kernelmgr/manager/manager.h"

typedef struct envd envd_t;

typedef struct {
    size_t max_upload; /* bytes per uploaded file; 0: none */
} envd_config_t;

/* kmgr, api (which finds the default context) and commands borrowed: they
 * must outlive the envd; wake(wake_arg) after a suspended connection is
 * resumed. */
envd_t *envd_new(loop_t *loop, kmgr_t *kmgr, api_t *api, commands_t *commands,
                 const envd_config_t *cfg, void (*wake)(void *), void *wake_arg);
/* Call after the HTTP server is gone. */
void envd_destroy(envd_t **self_p);

/* Registers the routes above (self borrowed: it must outlive http). */
int envd_register(envd_t *self, http_server_t *http, sg_error_t **err);

#endif
