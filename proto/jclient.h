/* jclient: the client side of a kernel's five channels.
 *
 * Connects DEALER sockets to shell, control and stdin (one routing identity,
 * so the kernel's input_request reaches our stdin socket), a SUB socket to
 * iopub (all topics) and a REQ socket to heartbeat, and signs and verifies
 * messages with one jsession.  jclient never blocks on its own: callers poll
 * jclient_socket() (an event loop or zpoller) and call jclient_recv() when a
 * socket is readable.
 */
#ifndef SG_JCLIENT_H
#define SG_JCLIENT_H

#include "proto/jconn.h"
#include "proto/jsession.h"

typedef struct jclient jclient_t;

jclient_t *jclient_new(const jconn_t *conn, sg_error_t **err);
void jclient_destroy(jclient_t **self_p);

/* Borrowed; valid for the client's lifetime. */
zsock_t *jclient_socket(const jclient_t *self, jchan_t chan);
jsession_t *jclient_session(const jclient_t *self);

/* Whether the stdin socket has connected to the kernel (a completed
 * handshake).  The kernel sends input_request on its own, on a ROUTER
 * socket that drops a message for a peer not yet connected; shell and
 * iopub prove themselves by answering, stdin cannot.  So a kernel is ready
 * only once this is true.  jclient_monitor() is the socket that says so,
 * readable when an event waits (borrowed; NULL after jclient_monitor_end());
 * jclient_stdin_connected() reads what waits and never blocks.
 * jclient_monitor_end() stops watching (jclient_destroy does too). */
zsock_t *jclient_monitor(const jclient_t *self);
bool jclient_stdin_connected(jclient_t *self);
void jclient_monitor_end(jclient_t *self);

/* Signs and sends msg on chan (not hb); msg is not consumed. */
int jclient_send(jclient_t *self, jchan_t chan, const jmsg_t *msg, sg_error_t **err);
/* Receives one message from chan, verified and decoded; blocks if nothing is
 * waiting, so call it when the socket is readable.  NULL with *err set when
 * the message was refused (it is dropped; the channel stays usable). */
jmsg_t *jclient_recv(jclient_t *self, jchan_t chan, sg_error_t **err);

/* Receives one message from chan without waiting: 1 with *msg set (owned
 * by the caller), 0 when nothing waits, -1 with *err when a message came
 * and was refused (it is dropped).  An event loop drains a socket with it
 * until it returns 0, which leaves ZMQ_FD armed for the next message. */
int jclient_try_recv(jclient_t *self, jchan_t chan, jmsg_t **msg, sg_error_t **err);

/* Sends a request and waits up to timeout_ms for the reply on the same
 * channel whose parent is the request, dropping other messages.  Blocking:
 * for tests, tools and start-up, never for the daemon's event loop. */
jmsg_t *jclient_request(jclient_t *self, jchan_t chan, jmsg_t **request_p, int timeout_ms,
                        sg_error_t **err);

#endif
