/* rest: sandgate's REST API (api_), wire-compatible with the E2B code interpreter.
 *
 *   POST   /execute                 run code; NDJSON stream (or one JSON
 *                                   document with Accept: application/json)
 *   POST   /contexts                create a context (a session: kernel +
 *   GET    /contexts                workspace)
 *   DELETE /contexts/{id}
 *   POST   /contexts/{id}/restart
 *   GET    /contexts/{id}/files[/{path}]   a file, or a directory's listing
 *   PUT    /contexts/{id}/files/{path}     upload (streamed to disk)
 *   DELETE /contexts/{id}/files/{path}
 *   GET|PUT|DELETE /contexts/{id}/files?path=/abs   anywhere in the sandbox
 *   POST   /contexts/{id}/files/mkdir, /move        (sbfs.c, sbfs.h)
 *   POST   /contexts/{id}/commands         start a command beside the kernel:
 *   GET    /contexts/{id}/commands         NDJSON, JSON, or 201 in the
 *   GET    /contexts/{id}/commands/{cmd}   background; stdin streamed from
 *   DELETE /contexts/{id}/commands/{cmd}   the body; output, stdin, signal
 *   GET    /contexts/{id}/commands/{cmd}/output, POST .../stdin, .../signal
 *   GET    /health (no token), GET /metrics
 *
 * See docs/api.md for the wire format and the errors.
 */
#ifndef SG_API_H
#define SG_API_H

#include <microhttpd.h>

#include "gateway/commands/commands.h"
#include "gateway/http/http.h"
#include "gateway/ports/ports.h"
#include "gateway/session/session.h"
#include "gateway/volumes/volumes.h"
#include "kernelmgr/manager/manager.h"

typedef struct api api_t;

typedef struct {
    const exec_policy_t *exec; /* executions' limits (borrowed; set it) */
    size_t max_upload;         /* bytes per uploaded file */
    const char *state_dir;     /* contexts are recorded in STATE/contexts; NULL: not kept */
    const char *notebook_url;  /* --notebook-url (handover.h); NULL: contexts carry none */
} api_config_t;

void api_config_defaults(api_config_t *cfg);
/* wake(wake_arg) is called after a suspended connection is resumed, so the
 * HTTP server runs soon (http_server_wake). */
api_t *api_new(loop_t *loop, kmgr_t *kmgr, const api_config_t *cfg, void (*wake)(void *),
               void *wake_arg);
/* Call after the HTTP server is gone: its last completion callbacks still
 * reach the API. */
void api_destroy(api_t **self_p);

/* The commands of every context (commands.h), for other front ends that
 * run processes (borrowed; it lives as long as the API). */
commands_t *api_commands(api_t *self);
/* A context's record here (its language, cwd, E2B's record; borrowed), or
 * NULL; and a context moved here from another replica (gateway/cluster/):
 * started from snap (its own id, its tenant's quotas), its record meta as
 * it was there. */
const json_t *api_context_meta(api_t *self, const char *id);
kernel_t *api_context_move_in(api_t *self, const kmgr_snapshot_t *snap, const json_t *meta,
                              const audit_who_t *who, sg_error_t **err);
/* The volumes new contexts and E2B sandboxes mount (volumeMounts). */
void api_set_volumes(api_t *self, volumes_t *volumes);
/* Whether a tenant has a secret (secrets.h's secrets_known), for the
 * ${e2b.secrets.NAME} of network rules; unset: any name goes (the launcher
 * still checks it when the rules are applied). */
void api_network_secrets(bool (*known)(void *ctx, const char *tenant, const char *name), void *ctx);
/* tenant's secrets changed: each of its contexts whose rules name one
 * (${e2b.secrets.}) has them applied again, so the proxy holds the new
 * values (api is the api_t; for secrets_on_change). */
void api_network_secret_changed(void *api, const char *tenant);

/* Registers the routes above with http (self borrowed: it must outlive
 * http).  File uploads are streamed to disk as they arrive (http.h's
 * sinks), so --max-body does not limit them; --max-upload does. */
int api_register(api_t *self, http_server_t *http, sg_error_t **err);

/* The tenant of req's default context for language, the one POST /execute
 * without context_id uses, made (and admitted against the tenant's quotas)
 * if there is none yet: borrowed, or NULL with *err.  frontend names the
 * caller in the audit log. */
/* The environment E2B's Sandbox.create gave k's sandbox (envVars: an
 * object of strings, borrowed), which its commands and every kernel in it
 * get; NULL when none was given. */
/* Who may reach sandbox k's ports without a credential (gateway/ports/'s
 * ports_public_fn; api is the api_t): anyone for an E2B sandbox, unless
 * made with network.allowPublicTraffic false (PORTS_PRIVATE); nobody for a
 * context sandgate's own API made (PORTS_HIDDEN).  *mask_host (when asked):
 * its network.maskRequestHost, or NULL. */
ports_access_t api_ports_public(void *api, const kernel_t *k, const char **mask_host);
const json_t *api_sandbox_envs(api_t *self, kernel_t *k);
kernel_t *api_default_context(api_t *self, const http_req_t *req, const char *language,
                              const char *frontend, sg_error_t **err);

#endif
