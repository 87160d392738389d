/* jupyter: the Jupyter Server REST API for kernels, so that JupyterLab,
 * Notebook (--gateway-url) and @jupyterlab/services use sandgate's sandboxed
 * kernels unchanged.
 *
 *   GET    /api                          version
 *   GET    /api/status
 *   GET    /api/kernelspecs[/{name}]     kernelspecs (resources under
 *   GET    /kernelspecs/{name}/{file}    /kernelspecs: logos)
 *   GET    /api/kernels                  kernel models
 *   POST   /api/kernels {name, env?, path?}   201 + Location, once ready
 *   GET    /api/kernels/{id}
 *   DELETE /api/kernels/{id}
 *   POST   /api/kernels/{id}/interrupt
 *   POST   /api/kernels/{id}/restart     200 once the new kernel is ready
 *   GET    /api/kernels/{id}/channels    WebSocket (channels.h)
 *   GET, POST /api/sessions; GET, PATCH, DELETE /api/sessions/{id}
 *
 * A kernel here is a sandgate session: the same one /contexts lists, with
 * the same workspace, limits and culling.  Errors are {"message", "reason"}
 * as jupyter_server sends them (plus sandgate's "error" kind).
 */
#ifndef SG_JUPYTER_H
#define SG_JUPYTER_H

#include <microhttpd.h>

#include "gateway/commands/commands.h"
#include "gateway/http/http.h"
#include "gateway/jupyter/channels.h"
#include "kernelmgr/manager/manager.h"

typedef struct jupyter jupyter_t;

jupyter_t *jupyter_new(loop_t *loop, kmgr_t *kmgr, const channels_config_t *cfg,
                       void (*wake)(void *), void *wake_arg);
/* Shutdown: jupyter_close() closes every WebSocket (libmicrohttpd must
 * still run); jupyter_destroy() frees the rest, after the HTTP server, whose
 * last completion callbacks still reach this API's requests. */
void jupyter_close(jupyter_t *self);
void jupyter_destroy(jupyter_t **self_p);

/* Registers the routes above with http: /api, /api/... and /kernelspecs/...,
 * and a context's terminal, GET /contexts/{context}/terminal (a WebSocket:
 * terminal.c) (self borrowed: it must outlive http). */
int jupyter_register(jupyter_t *self, http_server_t *http, sg_error_t **err);
/* The commands terminals run as (borrowed), before jupyter_register. */
void jupyter_set_commands(jupyter_t *self, commands_t *commands);

#endif
