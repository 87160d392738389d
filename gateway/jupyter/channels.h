/* channels: Jupyter kernel channels over WebSocket, as jupyter_server serves
 * them at /api/kernels/{id}/channels.
 *
 * Each kernel with frontends attached has a hub.  The hub taps the kernel
 * (kernel_set_tap): iopub goes to every connection of the kernel; replies on
 * shell and control, and input_requests on stdin, go to the connection whose
 * request they answer (routed by the parent's msg_id, since all frontends
 * share sandgate's one set of sockets to the kernel).  When the last
 * connection closes, what the kernel publishes is kept (bounded) and replayed
 * to the next connection with the same session_id; another session_id
 * discards it.  Messages a frontend sends while the kernel is (re)starting
 * wait in the hub until it is ready.
 *
 * Wire formats (chosen per connection by the subprotocol it offers, as
 * jupyter_server chooses): the default JSON format (text frames; binary
 * frames with a big-endian offset table when buffers are present) and
 * v1.kernel.websocket.jupyter.org (binary frames, little-endian offsets, the
 * channel name and the four JSON parts kept apart).  gateway/jupyter/wsmsg.c
 * encodes and decodes them.
 */
#ifndef SG_CHANNELS_H
#define SG_CHANNELS_H

#include <microhttpd.h>

#include "gateway/observe/observe.h"
#include "gateway/session/session.h"
#include "kernelmgr/kernel/kernel.h"

#define CHANNELS_V1_PROTOCOL "v1.kernel.websocket.jupyter.org"

typedef struct channels channels_t;

typedef struct {
    size_t max_message;        /* bytes of one WebSocket message from a frontend */
    size_t max_pending;        /* bytes queued for a slow frontend before it is dropped */
    size_t replay_max;         /* bytes kept for a disconnected session */
    const exec_policy_t *exec; /* the limits of frontends' executions (borrowed; set it) */
} channels_config_t;

void channels_config_defaults(channels_config_t *cfg);

/* wake: called after a connection is handed back to libmicrohttpd (closed),
 * so the HTTP server runs soon. */
channels_t *channels_new(loop_t *loop, const channels_config_t *cfg, void (*wake)(void *),
                         void *wake_arg);
/* Closes every connection (going away) and releases the kernels' taps. */
void channels_destroy(channels_t **self_p);

/* Takes over an upgraded socket as a frontend of k.  session: the client's
 * session_id (may be empty: then the connection is its own session).  who:
 * the client, for the audit log (copied).  owner: what channels_revoke
 * names the connection by (the upgraded request's state; borrowed, never
 * dereferenced).  A frontend's execute_requests go
 * to the kernel as it sent them, and exec.c follows each to its end
 * (exec_track): the policy's timeout (interrupt, then restart; the frontend
 * reads on stderr which happened, and gets an execute_reply and an idle
 * status from sandgate when the kernel gave none), the audit log and the
 * metrics, as for every front end. */
void channels_attach(channels_t *self, kernel_t *k, const char *session, bool v1, MHD_socket fd,
                     struct MHD_UpgradeResponseHandle *urh, const char *extra, size_t extra_len,
                     const audit_who_t *who, const void *owner);

/* Closes owner's connections at once, with 1008 (policy violation) and
 * reason: the key they were opened with was revoked.  A frontend that does
 * not read, its output still pending, is cut without the close frame.
 * What they started in the kernel runs on. */
void channels_revoke(channels_t *self, const void *owner, const char *reason);

/* Calls fn once when k is ready (err NULL), or fails to be (err set);
 * at once if it already is.  The token identifies the wait for
 * channels_cancel_wait(). */
typedef void(channels_ready_fn)(const sg_error_t *err, void *arg);
void channels_when_ready(channels_t *self, kernel_t *k, channels_ready_fn *fn, void *arg);
void channels_cancel_wait(channels_t *self, void *arg);

#endif
