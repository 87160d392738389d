#include "gateway/jupyter/channels.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/xalloc.h"
#include "gateway/jupyter/ws.h"
#include "gateway/jupyter/wsmsg.h"
#include "gateway/observe/observe.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"

#define ROUTES_MAX 65536 /* requests awaiting a reply, per kernel */
#define EARLY_MAX 256    /* messages held while a kernel (re)starts */

typedef struct hub hub_t;

typedef struct conn {
    channels_t *ch;
    hub_t *hub;
    struct conn *next;
    char session[129];
    wsmsg_format_t format;
    bool closing, closed, polling_out;
    bool anonymous; /* no session_id: nothing is kept for it when it leaves */
    MHD_socket fd;
    struct MHD_UpgradeResponseHandle *urh;
    loop_io_t *io;
    ws_parser_t *parser;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    unsigned close_code; /* set by the parser callback; acted on after the feed */
    audit_who_t who;     /* the client, for the audit log */
    const void *owner;   /* channels_attach's, for channels_revoke */
} conn_t;

/* A message kept for replay, or held until the kernel is ready (then who
 * sent it: its execute_request is followed once it is sent). */
typedef struct stored {
    jchan_t chan;
    jmsg_t *msg;
    size_t bytes;
    audit_who_t who;
    struct stored *next;
} stored_t;

/* A frontend's execute_request, sent to the kernel as the frontend made it
 * and followed by exec.c (exec_track) to its end. */
typedef struct relayed {
    hub_t *hub;      /* NULL once the hub is gone: the execution ends unheard */
    exec_t *exec;    /* NULL once it ended */
    jmsg_t *request; /* its header only: the parent of what sandgate tells the frontend */
    struct relayed *next;
} relayed_t;

typedef struct waiter {
    channels_ready_fn *fn;
    void *arg;
    struct waiter *next;
} waiter_t;

struct hub {
    channels_t *ch;
    kernel_t *k;
    hub_t *next;
    conn_t *conns;
    zhashx_t *routes; /* request msg_id -> session of the connection that sent it */
    stored_t *replay, **replay_tail;
    size_t replay_bytes, replay_dropped;
    char replay_session[129]; /* empty: not keeping */
    stored_t *early, **early_tail;
    size_t early_n;
    waiter_t *waiters;
    relayed_t *relayed; /* frontends' executions not ended yet */
    size_t nrelayed;
};

struct channels {
    loop_t *loop;
    channels_config_t cfg;
    hub_t *hubs;
    void (*wake)(void *);
    void *wake_arg;
    uint64_t next_anon;
};

void channels_config_defaults(channels_config_t *cfg)
{
    *cfg = (channels_config_t){
        .max_message = 16 << 20, .max_pending = 64 << 20, .replay_max = 16 << 20, .exec = NULL};
}

channels_t *channels_new(loop_t *loop, const channels_config_t *cfg, void (*wake)(void *),
                         void *wake_arg)
{
    channels_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    return self;
}

/* --- stored messages -------------------------------------------------------------- */

static void stored_free_list(stored_t *s)
{
    while (s) {
        stored_t *next = s->next;
        jmsg_destroy(&s->msg);
        free(s);
        s = next;
    }
}

static jmsg_t *msg_copy(const jmsg_t *m)
{
    jmsg_t *c = jmsg_from_parts(json_deep_copy(jmsg_header(m)), json_deep_copy(jmsg_parent(m)),
                                json_deep_copy(jmsg_metadata(m)), json_deep_copy(jmsg_content(m)));
    zmsg_t *b = jmsg_buffers(m);
    for (zframe_t *f = zmsg_first(b); f; f = zmsg_next(b))
        zmsg_addmem(jmsg_buffers(c), zframe_data(f), zframe_size(f));
    return c;
}

static size_t msg_bytes(const jmsg_t *m)
{
    size_t n = json_dumpb(jmsg_content(m), NULL, 0, JSON_COMPACT) + 512;
    zmsg_t *b = jmsg_buffers(m);
    return n + zmsg_content_size(b);
}

/* --- output to a frontend --------------------------------------------------------- */

static void conn_close(conn_t *c);
static void on_io(loop_t *loop, int fd, unsigned events, void *arg);

/* Asks the loop for writability only while output waits. */
static void conn_poll(conn_t *c, bool want_out)
{
    if (c->closed || want_out == c->polling_out)
        return;
    sg_error_t *err = NULL;
    if (loop_fd_set_events(c->ch->loop, c->io, LOOP_READ | (want_out ? LOOP_WRITE : 0), &err) < 0) {
        log_warn("channels: %s", err->msg);
        sg_error_free(&err);
        conn_close(c);
        return;
    }
    c->polling_out = want_out;
}

static void flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            log_debug("channels: write to a frontend failed: %s", strerror(errno));
            conn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        if (c->out_cap > (1 << 20)) { /* a large output went out: give the memory back */
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
        if (c->closing) {
            conn_close(c);
            return;
        }
    }
}

static void conn_send(conn_t *c, ws_opcode_t op, const void *data, size_t len)
{
    if (c->closed || (c->closing && op != WS_CLOSE))
        return;
    size_t pending = c->out_len - c->out_off;
    if (pending + len > c->ch->cfg.max_pending) {
        log_warn("channels: kernel %s: a frontend reads too slowly (%zu bytes waiting); "
                 "dropping its connection",
                 kernel_id(c->hub->k), pending);
        conn_close(c);
        return;
    }
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    size_t need = c->out_len + 10 + len;
    if (need > c->out_cap) {
        if (c->out_off > 0) { /* compact first */
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
            need = c->out_len + 10 + len;
        }
        if (need > c->out_cap) {
            c->out_cap = need > 2 * c->out_cap ? need : 2 * c->out_cap;
            c->out = xrealloc(c->out, c->out_cap);
        }
    }
    c->out_len += ws_frame_header(c->out + c->out_len, op, len);
    if (len)
        memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    bool was_pending = pending > 0;
    if (!was_pending)
        flush(c);
    if (!c->closed)
        conn_poll(c, c->out_off < c->out_len);
}

static void conn_begin_close(conn_t *c, unsigned code, const char *reason)
{
    if (c->closing || c->closed)
        return;
    uint8_t payload[125];
    size_t n = ws_close_payload(payload, code, reason);
    conn_send(c, WS_CLOSE, payload, n);
    c->closing = true;
    if (!c->closed && c->out_off == c->out_len)
        conn_close(c);
}

static void conn_deliver(conn_t *c, jchan_t chan, const jmsg_t *m)
{
    ws_opcode_t op;
    size_t len;
    sg_error_t *err = NULL;
    uint8_t *out = wsmsg_encode(c->format, chan, m, &op, &len, &err);
    if (out == NULL) {
        log_warn("channels: kernel %s: message for a frontend dropped: %s", kernel_id(c->hub->k),
                 err->msg);
        sg_error_free(&err);
        return;
    }
    conn_send(c, op, out, len);
    free(out);
}

/* --- the hub: kernel -> frontends ---------------------------------------------- */

static void keep_for_replay(hub_t *h, jchan_t chan, const jmsg_t *m)
{
    size_t bytes = msg_bytes(m);
    if (h->replay_bytes + bytes > h->ch->cfg.replay_max) {
        h->replay_dropped++;
        return;
    }
    stored_t *s = xzalloc(sizeof *s);
    *s = (stored_t){.chan = chan, .msg = msg_copy(m), .bytes = bytes};
    *h->replay_tail = s;
    h->replay_tail = &s->next;
    h->replay_bytes += bytes;
}

static void replay_clear(hub_t *h)
{
    stored_free_list(h->replay);
    h->replay = NULL;
    h->replay_tail = &h->replay;
    h->replay_bytes = h->replay_dropped = 0;
    h->replay_session[0] = 0;
}

static void on_kernel_message(kernel_t *k, jchan_t chan, const jmsg_t *m, void *arg)
{
    hub_t *h = arg;
    if (chan == JCHAN_IOPUB) {
        if (h->replay_session[0])
            keep_for_replay(h, chan, m);
        for (conn_t *c = h->conns; c; c = c->next)
            conn_deliver(c, chan, m);
        return;
    }
    const char *parent = jmsg_parent_id(m);
    const char *session = zhashx_lookup(h->routes, parent);
    if (session == NULL) {
        log_debug("channels: kernel %s: %s reply to no known request; dropped", kernel_id(k),
                  jchan_name(chan));
        return;
    }
    bool delivered = false;
    for (conn_t *c = h->conns; c; c = c->next)
        if (strcmp(c->session, session) == 0) {
            conn_deliver(c, chan, m);
            delivered = true;
        }
    if (!delivered && h->replay_session[0] && strcmp(h->replay_session, session) == 0)
        keep_for_replay(h, chan, m);
    if (chan != JCHAN_STDIN) /* a request's one reply; input_requests may repeat */
        zhashx_delete(h->routes, parent);
}

static jmsg_t *status_msg(const char *state)
{
    jmsg_t *m = jmsg_new("status", "sandgate", "sandgate");
    jmsg_set_content(m, json_pack("{s:s}", "execution_state", state));
    return m;
}

static void broadcast_status(hub_t *h, const char *state)
{
    jmsg_t *m = status_msg(state);
    on_kernel_message(h->k, JCHAN_IOPUB, m, h);
    jmsg_destroy(&m);
}

/* --- a frontend's executions ------------------------------------------------------ */

static void relayed_free(relayed_t *r)
{
    jmsg_destroy(&r->request);
    free(r);
}

/* What sandgate says about a frontend's execution, as the kernel would: on
 * iopub, or as the request's reply on shell (to the frontend that sent it). */
static void tell(relayed_t *r, jchan_t chan, const char *type, json_t *content)
{
    jmsg_t *m = jmsg_new(type, "sandgate", "sandgate");
    jmsg_set_parent(m, r->request);
    jmsg_set_content(m, content);
    on_kernel_message(r->hub->k, chan, m, r->hub);
    jmsg_destroy(&m);
}

static void tell_error(relayed_t *r, const char *name, const sg_error_t *err)
{
    char *text = xasprintf("%s: %s\n", name, err->msg);
    tell(r, JCHAN_IOPUB, "stream", json_pack("{s:s, s:s}", "name", "stderr", "text", text));
    free(text);
}

/* Its timeout passed: the frontend sees it on stderr, as the interrupt's
 * KeyboardInterrupt follows. */
static void relayed_timeout(void *arg, const sg_error_t *err)
{
    relayed_t *r = arg;
    if (r->hub)
        tell_error(r, "TimeoutError", err);
}

/* sandgate answers a request for the kernel: err on the frontend's stderr,
 * then the execute_reply (ename name) and the idle status every request
 * gets. */
static void answer_error(relayed_t *r, const char *name, const sg_error_t *err)
{
    tell_error(r, name, err);
    tell(r, JCHAN_SHELL, "execute_reply",
         json_pack("{s:s, s:s, s:s, s:[], s:i}", "status", "error", "ename", name, "evalue",
                   err->msg, "traceback", "execution_count", kernel_execution_count(r->hub->k)));
    tell(r, JCHAN_IOPUB, "status", json_pack("{s:s}", "execution_state", "idle"));
}

/* Its end.  When the kernel gave no reply (restarted after a timeout's
 * interrupt failed, died), sandgate answers for it. */
static void relayed_done(void *arg, const exec_end_t *end)
{
    relayed_t *r = arg;
    hub_t *h = r->hub;
    r->exec = NULL;
    if (h) {
        for (relayed_t **p = &h->relayed; *p; p = &(*p)->next)
            if (*p == r) {
                *p = r->next;
                h->nrelayed--;
                break;
            }
    }
    if (h && end->reply == NULL && end->err)
        answer_error(r, end->error_name, end->err);
    relayed_free(r);
}

static const exec_sink_t relayed_sink = {.on_timeout = relayed_timeout, .on_done = relayed_done};

static relayed_t *relayed_new(hub_t *h, const jmsg_t *m)
{
    relayed_t *r = xzalloc(sizeof *r);
    r->hub = h;
    r->request = jmsg_from_parts(json_deep_copy(jmsg_header(m)), json_object(), json_object(),
                                 json_object());
    return r;
}

/* A frontend's message the kernel will not get for a quota of its
 * tenant's: an execute_request is answered with the error (as the kernel's
 * own errors are); anything else is dropped. */
static void refuse_message(hub_t *h, jchan_t chan, const jmsg_t *m, const sg_error_t *err)
{
    log_warn("channels: kernel %s: %s refused: %s", kernel_id(h->k), jmsg_type(m), err->msg);
    if (chan != JCHAN_SHELL || strcmp(jmsg_type(m), "execute_request") != 0)
        return;
    relayed_t *r = relayed_new(h, m);
    answer_error(r, "QuotaExceeded", err);
    relayed_free(r);
}

/* Sends a frontend's message to the kernel; an execute_request is followed
 * to its end (exec.c: the timeout, the quotas, the audit log, the metrics). */
static void relay(hub_t *h, jchan_t chan, const jmsg_t *m, const audit_who_t *who)
{
    sg_error_t *err = NULL;
    relayed_t *r = NULL;
    if (chan == JCHAN_SHELL && strcmp(jmsg_type(m), "execute_request") == 0) {
        r = relayed_new(h, m);
        exec_opts_t o = {.policy = h->ch->cfg.exec, .who = *who};
        r->exec = exec_track(h->k, m, &o, &relayed_sink, r, &err);
        if (r->exec == NULL) {
            relayed_free(r);
            r = NULL;
            if (err->kind == SG_E_QUOTA) {
                refuse_message(h, chan, m, err);
                sg_error_free(&err);
                return;
            }
            /* Not followed (a dead kernel, a msg_id too long to keep): sent
             * all the same, and kernel_send says why when it cannot be. */
            log_warn("channels: kernel %s: %s", kernel_id(h->k), err->msg);
            sg_error_free(&err);
        } else {
            r->next = h->relayed;
            h->relayed = r;
            h->nrelayed++;
        }
    }
    if (kernel_send(h->k, chan, m, &err) < 0) {
        log_warn("channels: kernel %s: %s", kernel_id(h->k), err->msg);
        /* Its end answers the frontend.  (A send fails only when the
         * kernel's sockets do: its restart or death clears what it keeps
         * of the request.) */
        if (r)
            exec_fail(&r->exec, err);
        sg_error_free(&err);
    }
}

static void send_early(hub_t *h)
{
    stored_t *list = h->early;
    h->early = NULL;
    h->early_tail = &h->early;
    h->early_n = 0;
    for (stored_t *s = list; s; s = s->next)
        relay(h, s->chan, s->msg, &s->who);
    stored_free_list(list);
}

static void fire_waiters(hub_t *h, const sg_error_t *err)
{
    waiter_t *w = h->waiters;
    h->waiters = NULL;
    while (w) {
        waiter_t *next = w->next;
        w->fn(err, w->arg);
        free(w);
        w = next;
    }
}

static void hub_free(hub_t *h, bool stopping);

static void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    hub_t *h = arg;
    switch (ev) {
    case KERNEL_EV_PREPARED:
    case KERNEL_EV_PAUSED:
    case KERNEL_EV_NOT_RESUMED: break;
    case KERNEL_EV_READY:
        send_early(h);
        fire_waiters(h, NULL);
        break;
    case KERNEL_EV_RESTARTED: broadcast_status(h, "restarting"); break;
    case KERNEL_EV_DEAD:
        broadcast_status(h, "dead");
        stored_free_list(h->early);
        h->early = NULL;
        h->early_tail = &h->early;
        h->early_n = 0;
        fire_waiters(h, err);
        break;
    case KERNEL_EV_GONE: {
        sg_error_t *gone = NULL;
        sg_error_set(&gone, SG_E_NOTFOUND, "kernel %s was shut down", kernel_id(k));
        fire_waiters(h, gone);
        sg_error_free(&gone);
        hub_free(h, false); /* its executions end as the kernel goes */
        break;
    }
    }
}

static hub_t *hub_get(channels_t *ch, kernel_t *k)
{
    for (hub_t *h = ch->hubs; h; h = h->next)
        if (h->k == k)
            return h;
    hub_t *h = xzalloc(sizeof *h);
    h->ch = ch;
    h->k = k;
    h->routes = zhashx_new();
    zhashx_set_destructor(h->routes, (zhashx_destructor_fn *)zstr_free);
    zhashx_set_duplicator(h->routes, (zhashx_duplicator_fn *)strdup);
    h->replay_tail = &h->replay;
    h->early_tail = &h->early;
    h->next = ch->hubs;
    ch->hubs = h;
    kernel_set_tap(k, &(kernel_tap_t){.on_message = on_kernel_message, .arg = h});
    kernel_observe(k, on_kernel_event, h);
    return h;
}

/* stopping: sandgate stops, and the executions under way are detached
 * (the code runs on); else the kernel goes, and ends them itself. */
static void hub_free(hub_t *h, bool stopping)
{
    channels_t *ch = h->ch;
    while (h->conns) {
        conn_t *c = h->conns;
        conn_begin_close(c, WS_CLOSE_NORMAL, "kernel shut down");
        if (h->conns == c) /* still flushing: detach it, it closes on its own */
            conn_close(c);
    }
    for (hub_t **p = &ch->hubs; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            break;
        }
    kernel_set_tap(h->k, NULL);
    kernel_unobserve(h->k, on_kernel_event, h);
    while (h->relayed) {
        relayed_t *r = h->relayed;
        h->relayed = r->next;
        r->hub = NULL;
        if (stopping) {
            exec_detach(&r->exec);
            relayed_free(r);
        }
    }
    zhashx_destroy(&h->routes);
    replay_clear(h);
    stored_free_list(h->early);
    if (h->waiters) {
        sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_UNAVAILABLE, "sandgate is shutting down");
        fire_waiters(h, err);
        sg_error_free(&err);
    }
    free(h);
}

/* --- a frontend -> the kernel ---------------------------------------------------- */

static void from_frontend(conn_t *c, ws_opcode_t op, const uint8_t *data, size_t len)
{
    hub_t *h = c->hub;
    jchan_t chan = JCHAN_SHELL;
    sg_error_t *err = NULL;
    jmsg_t *m = wsmsg_decode(c->format, op, data, len, &chan, &err);
    if (m == NULL) {
        log_warn("channels: kernel %s: message from a frontend dropped: %s", kernel_id(h->k),
                 err->msg);
        sg_error_free(&err);
        return;
    }
    if (chan != JCHAN_STDIN) {
        if (zhashx_size(h->routes) >= ROUTES_MAX)
            zhashx_purge(h->routes); /* requests that never got a reply */
        zhashx_update(h->routes, jmsg_id(m), c->session);
    }
    if (h->nrelayed >= ROUTES_MAX) {
        log_warn("channels: kernel %s: %zu executions from frontends under way; a message dropped",
                 kernel_id(h->k), h->nrelayed);
        jmsg_destroy(&m);
        return;
    }
    kernel_state_t st = kernel_state(h->k);
    if (st == KERNEL_PAUSED || st == KERNEL_PAUSING) {
        /* A paused kernel wakes up for its frontends, within its tenant's
         * max-live; the message waits. */
        tenant_quota_t quota;
        if (tenant_admit_wake(h->k, &quota, &err) < 0) {
            refuse_message(h, chan, m, err);
            sg_error_free(&err);
            jmsg_destroy(&m);
            return;
        }
        if (kernel_resume(h->k, &err) < 0) {
            log_warn("channels: kernel %s: %s", kernel_id(h->k), err->msg);
            sg_error_free(&err);
        }
        st = KERNEL_STARTING;
    }
    if (st == KERNEL_STARTING) {
        if (h->early_n >= EARLY_MAX) {
            log_warn("channels: kernel %s is starting; too many messages waiting, one dropped",
                     kernel_id(h->k));
            jmsg_destroy(&m);
            return;
        }
        stored_t *s = xzalloc(sizeof *s);
        *s = (stored_t){.chan = chan, .msg = m, .who = c->who};
        *h->early_tail = s;
        h->early_tail = &s->next;
        h->early_n++;
        return;
    }
    relay(h, chan, m, &c->who);
    jmsg_destroy(&m);
}

static void on_ws_message(ws_opcode_t op, const uint8_t *data, size_t len, void *arg)
{
    conn_t *c = arg;
    if (c->closed || c->close_code)
        return;
    switch (op) {
    case WS_TEXT:
    case WS_BINARY:
        if (!c->closing)
            from_frontend(c, op, data, len);
        break;
    case WS_PING: conn_send(c, WS_PONG, data, len); break;
    case WS_CLOSE:
        /* Echo the code, then close once it is written. */
        c->close_code = len >= 2 ? (unsigned)(data[0] << 8 | data[1]) : WS_CLOSE_NORMAL;
        break;
    default: break;
    }
}

static void on_io(loop_t *loop, int fd, unsigned events, void *arg)
{
    conn_t *c = arg;
    if (c->closed)
        return;
    if (events & LOOP_WRITE) {
        flush(c);
        if (c->closed)
            return;
        conn_poll(c, c->out_off < c->out_len);
    }
    if (!(events & (LOOP_READ | LOOP_ERROR)))
        return;
    uint8_t buf[65536];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        log_debug("channels: kernel %s: a frontend disconnected", kernel_id(c->hub->k));
        conn_close(c);
        return;
    }
    int code = ws_parser_feed(c->parser, buf, (size_t)n, on_ws_message, c);
    if (c->closed)
        return;
    if (code) {
        log_warn("channels: kernel %s: closing a frontend's connection: WebSocket error %d",
                 kernel_id(c->hub->k), code);
        metrics.ws_protocol_errors++;
        conn_begin_close(c, (unsigned)code,
                         code == WS_CLOSE_TOO_BIG        ? "message too big"
                         : code == WS_CLOSE_INVALID_DATA ? "invalid UTF-8"
                                                         : "protocol error");
    } else if (c->close_code) {
        unsigned echo = c->close_code == 1005 ? WS_CLOSE_NORMAL : c->close_code;
        conn_begin_close(c, echo, "");
    }
}

static void conn_free(void *arg)
{
    conn_t *c = arg;
    ws_parser_destroy(&c->parser);
    free(c->out);
    free(c);
}

static void conn_close(conn_t *c)
{
    if (c->closed)
        return;
    c->closed = true;
    loop_io_remove(c->ch->loop, &c->io);
    MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE);
    if (c->ch->wake)
        c->ch->wake(c->ch->wake_arg);
    hub_t *h = c->hub;
    for (conn_t **p = &h->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    kernel_add_connections(h->k, -1);
    metrics.ws_connections--;
    /* Keep what comes for this session until it reconnects (one session per
     * kernel, as jupyter_server keeps one buffer per kernel). */
    bool same_session_left = false;
    for (conn_t *o = h->conns; o; o = o->next)
        same_session_left |= strcmp(o->session, c->session) == 0;
    if (!same_session_left && !c->anonymous) {
        replay_clear(h);
        snprintf(h->replay_session, sizeof h->replay_session, "%s", c->session);
    }
    log_info("channels: kernel %s: frontend %s disconnected", kernel_id(h->k), c->session);
    loop_defer(c->ch->loop, conn_free, c);
}

/* --- public --------------------------------------------------------------------- */

void channels_attach(channels_t *self, kernel_t *k, const char *session, bool v1, MHD_socket fd,
                     struct MHD_UpgradeResponseHandle *urh, const char *extra, size_t extra_len,
                     const audit_who_t *who, const void *owner)
{
    hub_t *h = hub_get(self, k);
    conn_t *c = xzalloc(sizeof *c);
    c->ch = self;
    c->who = *who;
    c->owner = owner;
    c->hub = h;
    c->format = v1 ? WSMSG_V1 : WSMSG_DEFAULT;
    c->fd = fd;
    c->urh = urh;
    c->parser = ws_parser_new(self->cfg.max_message);
    if (session && *session)
        snprintf(c->session, sizeof c->session, "%s", session);
    else {
        c->anonymous = true;
        snprintf(c->session, sizeof c->session, "anonymous-%llu",
                 (unsigned long long)++self->next_anon);
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    /* A reply is several small messages written one by one: without this,
     * Nagle holds each after the first until the client's delayed ACK
     * (~40 ms a round trip). */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
    c->io = loop_fd_add(self->loop, fd, LOOP_READ, on_io, c, NULL);
    if (c->io == NULL) { /* out of memory for epoll: nothing else can be done with it */
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        if (self->wake)
            self->wake(self->wake_arg);
        ws_parser_destroy(&c->parser);
        free(c);
        return;
    }
    c->next = h->conns;
    h->conns = c;
    kernel_add_connections(k, 1);
    metrics.ws_connections++;
    metrics.ws_accepted++;
    log_info("channels: kernel %s: frontend %s connected (%s protocol)", kernel_id(k), c->session,
             v1 ? CHANNELS_V1_PROTOCOL : "default");

    if (h->replay_session[0]) {
        if (strcmp(h->replay_session, c->session) == 0) {
            size_t n = 0;
            for (stored_t *s = h->replay; s && !c->closed; s = s->next, n++)
                conn_deliver(c, s->chan, s->msg);
            if (n)
                log_info("channels: kernel %s: replayed %zu messages to %s%s", kernel_id(k), n,
                         c->session,
                         h->replay_dropped ? " (some were dropped: over the limit)" : "");
        } else if (h->replay) {
            log_info("channels: kernel %s: discarding output kept for session %s", kernel_id(k),
                     h->replay_session);
        }
        replay_clear(h);
    }
    if (extra_len && !c->closed) {
        int code = ws_parser_feed(c->parser, (const uint8_t *)extra, extra_len, on_ws_message, c);
        if (code && !c->closed)
            conn_begin_close(c, (unsigned)code, "protocol error");
    }
}

void channels_revoke(channels_t *self, const void *owner, const char *reason)
{
    for (hub_t *h = self->hubs; h; h = h->next) {
        conn_t *c = h->conns;
        while (c) {
            if (c->owner != owner || c->closed) {
                c = c->next;
                continue;
            }
            log_info("channels: kernel %s: frontend %s closed: %s", kernel_id(h->k), c->session,
                     reason);
            conn_begin_close(c, WS_CLOSE_POLICY, reason);
            if (!c->closed)
                conn_close(c); /* it does not read: no time to wait for it */
            c = h->conns;      /* c left the list */
        }
    }
}

void channels_when_ready(channels_t *self, kernel_t *k, channels_ready_fn *fn, void *arg)
{
    kernel_state_t st = kernel_state(k);
    if (st == KERNEL_IDLE || st == KERNEL_BUSY) {
        fn(NULL, arg);
        return;
    }
    if (st == KERNEL_DEAD) {
        sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_UNAVAILABLE, "kernel %s is dead", kernel_id(k));
        fn(err, arg);
        sg_error_free(&err);
        return;
    }
    if (st == KERNEL_PAUSED || st == KERNEL_PAUSING) {
        sg_error_t *err = NULL;
        tenant_quota_t quota;
        if (tenant_admit_wake(k, &quota, &err) < 0 || kernel_resume(k, &err) < 0) {
            fn(err, arg);
            sg_error_free(&err);
            return;
        }
    }
    hub_t *h = hub_get(self, k);
    waiter_t *w = xzalloc(sizeof *w);
    *w = (waiter_t){.fn = fn, .arg = arg, .next = h->waiters};
    h->waiters = w;
}

void channels_cancel_wait(channels_t *self, void *arg)
{
    for (hub_t *h = self->hubs; h; h = h->next)
        for (waiter_t **p = &h->waiters; *p;) {
            waiter_t *w = *p;
            if (w->arg == arg) {
                *p = w->next;
                free(w);
            } else {
                p = &w->next;
            }
        }
}

void channels_destroy(channels_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    channels_t *self = *self_p;
    while (self->hubs)
        hub_free(self->hubs, true);
    free(self);
    *self_p = NULL;
}
