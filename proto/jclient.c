#include "proto/jclient.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/xalloc.h"

struct jclient {
    jsession_t *session;
    zsock_t *socks[JCHAN_COUNT];
    zsock_t *monitor; /* stdin's handshake events, until the first one */
    bool stdin_up;
};

void jclient_destroy(jclient_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    jclient_t *self = *self_p;
    jclient_monitor_end(self);
    for (int c = 0; c < JCHAN_COUNT; c++)
        zsock_destroy(&self->socks[c]);
    jsession_destroy(&self->session);
    free(self);
    *self_p = NULL;
}

/* Watches the stdin socket for its first completed handshake, before it
 * connects: an event that comes before the monitor's reader connects is lost. */
static int watch_stdin(jclient_t *self, sg_error_t **err)
{
    static unsigned serial;
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "inproc://sg-jclient-stdin-%u", serial++);
    if (zmq_socket_monitor(zsock_resolve(self->socks[JCHAN_STDIN]), endpoint,
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED) < 0)
        return sg_error_set(err, SG_E_INTERNAL, "cannot monitor stdin: %s",
                            zmq_strerror(zmq_errno()));
    self->monitor = zsock_new(ZMQ_PAIR);
    if (self->monitor == NULL || zsock_connect(self->monitor, "%s", endpoint) < 0)
        return sg_error_set(err, SG_E_INTERNAL, "cannot read stdin's monitor: %s",
                            zmq_strerror(zmq_errno()));
    return 0;
}

jclient_t *jclient_new(const jconn_t *conn, sg_error_t **err)
{
    jsession_t *session = jsession_new(conn->key, strlen(conn->key), err);
    if (session == NULL)
        return NULL;
    jclient_t *self = xzalloc(sizeof *self);
    self->session = session;
    static const int types[JCHAN_COUNT] = {ZMQ_DEALER, ZMQ_SUB, ZMQ_DEALER, ZMQ_DEALER, ZMQ_REQ};
    for (int c = 0; c < JCHAN_COUNT; c++) {
        char endpoint[300];
        if (jconn_endpoint(conn, c, endpoint, sizeof endpoint) < 0) {
            sg_error_set(err, SG_E_INVALID, "%s endpoint is too long", jchan_name(c));
            goto fail;
        }
        zsock_t *s = zsock_new(types[c]);
        if (s == NULL) {
            sg_error_set(err, SG_E_INTERNAL, "cannot create a ZeroMQ socket");
            goto fail;
        }
        self->socks[c] = s;
        zsock_set_linger(s, 0);
        zsock_set_maxmsgsize(s, JSESSION_DEFAULT_MAX_BYTES);
        /* The kernel's sockets come (back) within milliseconds of the
         * connect — a start, a resume, a snapshot that let it run on — and
         * ZeroMQ's default first retry, 100 ms, was most of the wait: retry
         * after 10 ms, backing off to 200 ms for a kernel that is gone. */
        zsock_set_reconnect_ivl(s, 10);
        zsock_set_reconnect_ivl_max(s, 200);
        if (c == JCHAN_SHELL || c == JCHAN_STDIN || c == JCHAN_CONTROL)
            zsock_set_identity(s, jsession_id(session));
        if (c == JCHAN_IOPUB)
            zsock_set_subscribe(s, "");
        if (c == JCHAN_STDIN && watch_stdin(self, err) < 0)
            goto fail;
        if (zsock_connect(s, "%s", endpoint) < 0) {
            sg_error_set(err, SG_E_UNAVAILABLE, "cannot connect %s to %s: %s", jchan_name(c),
                         endpoint, zmq_strerror(zmq_errno()));
            goto fail;
        }
    }
    return self;
fail:
    jclient_destroy(&self);
    return NULL;
}

zsock_t *jclient_socket(const jclient_t *self, jchan_t chan)
{
    return self->socks[chan];
}

zsock_t *jclient_monitor(const jclient_t *self)
{
    return self->monitor;
}

bool jclient_stdin_connected(jclient_t *self)
{
    void *handle = self->monitor ? zsock_resolve(self->monitor) : NULL;
    while (!self->stdin_up && handle) {
        /* An event is two frames: 16-bit event and 32-bit value, then the endpoint. */
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, handle, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            break;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&part) >= sizeof event)
            memcpy(&event, zmq_msg_data(&part), sizeof event);
        bool more = zmq_msg_more(&part);
        zmq_msg_close(&part);
        while (more) {
            zmq_msg_init(&part);
            more = zmq_msg_recv(&part, handle, 0) >= 0 && zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        self->stdin_up = event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    }
    return self->stdin_up;
}

void jclient_monitor_end(jclient_t *self)
{
    if (self->monitor == NULL)
        return;
    zmq_socket_monitor(zsock_resolve(self->socks[JCHAN_STDIN]), NULL, 0);
    zsock_destroy(&self->monitor);
}

jsession_t *jclient_session(const jclient_t *self)
{
    return self->session;
}

int jclient_send(jclient_t *self, jchan_t chan, const jmsg_t *msg, sg_error_t **err)
{
    zmsg_t *wire = jsession_encode(self->session, msg);
    if (zmsg_send(&wire, self->socks[chan]) < 0) {
        zmsg_destroy(&wire);
        return sg_error_set(err, SG_E_UNAVAILABLE, "cannot send on %s: %s", jchan_name(chan),
                            zmq_strerror(zmq_errno()));
    }
    return 0;
}

jmsg_t *jclient_recv(jclient_t *self, jchan_t chan, sg_error_t **err)
{
    zmsg_t *wire = zmsg_recv(self->socks[chan]);
    if (wire == NULL) {
        sg_error_set(err, SG_E_UNAVAILABLE, "receive on %s interrupted", jchan_name(chan));
        return NULL;
    }
    jmsg_t *msg = jsession_decode(self->session, &wire, err);
    if (msg == NULL)
        sg_error_prefix(err, "%s", jchan_name(chan));
    return msg;
}

int jclient_try_recv(jclient_t *self, jchan_t chan, jmsg_t **msg, sg_error_t **err)
{
    *msg = NULL;
    void *handle = zsock_resolve(self->socks[chan]);
    zmsg_t *wire = NULL;
    for (bool more = true; more;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        /* The first frame decides; the rest of a message arrives with it. */
        if (zmq_msg_recv(&part, handle, wire ? 0 : ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&part);
            if (wire == NULL && e == EAGAIN)
                return 0;
            zmsg_destroy(&wire);
            return sg_error_set(err, SG_E_UNAVAILABLE, "receive on %s: %s", jchan_name(chan),
                                zmq_strerror(e));
        }
        if (wire == NULL)
            wire = zmsg_new();
        zmsg_addmem(wire, zmq_msg_data(&part), zmq_msg_size(&part));
        more = zmq_msg_more(&part);
        zmq_msg_close(&part);
    }
    *msg = jsession_decode(self->session, &wire, err);
    if (*msg == NULL) {
        sg_error_prefix(err, "%s", jchan_name(chan));
        return -1;
    }
    return 1;
}

jmsg_t *jclient_request(jclient_t *self, jchan_t chan, jmsg_t **request_p, int timeout_ms,
                        sg_error_t **err)
{
    jmsg_t *request = *request_p;
    *request_p = NULL;
    if (jclient_send(self, chan, request, err) < 0) {
        jmsg_destroy(&request);
        return NULL;
    }
    int64_t deadline = zclock_mono() + timeout_ms;
    jmsg_t *reply = NULL;
    zpoller_t *poller = zpoller_new(self->socks[chan], NULL);
    while (reply == NULL) {
        int64_t left = deadline - zclock_mono();
        if (left <= 0 || zpoller_wait(poller, (int)left) == NULL) {
            sg_error_set(err, SG_E_TIMEOUT, "no %s reply to %s within %d ms", jchan_name(chan),
                         jmsg_type(request), timeout_ms);
            break;
        }
        sg_error_t *drop = NULL;
        jmsg_t *m = jclient_recv(self, chan, &drop);
        sg_error_free(&drop); /* refused messages are not the reply we wait for */
        if (m && strcmp(jmsg_parent_id(m), jmsg_id(request)) == 0)
            reply = m;
        else
            jmsg_destroy(&m);
    }
    zpoller_destroy(&poller);
    jmsg_destroy(&request);
    return reply;
}
