/* messages: a kernel's connection and what it says (internal.h) — the
 * client's sockets, readiness (kernel_info, the iopub probe), and the
 * messages of iopub, shell and stdin, each to the execution it answers or
 * to the tap.  Start, death and restart are kernel.c's. */
#include "kernelmgr/kernel/internal.h"

#include <string.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "proto/proto.h"

/* --- connection to the kernel ---------------------------------------------- */

static void client_free(void *arg)
{
    jclient_t *c = arg;
    jclient_destroy(&c);
}

/* Every send goes through here: a send may consume the edge of a message
 * that arrived meanwhile (loop.h), so the socket is looked at again. */
int send_msg(kernel_t *k, jchan_t chan, const jmsg_t *msg, sg_error_t **err)
{
    int r = jclient_send(k->client, chan, msg, err);
    loop_zsock_sent(k->loop, k->io[chan]);
    return r;
}

void disconnect(kernel_t *k)
{
    release_slot(k);
    end_timer(k, &k->probe_timer);
    end_timer(k, &k->hb_timer);
    end_timer(k, &k->start_timer);
    if (k->watched > 0)
        proc_unwatch(k->watched);
    k->watched = 0;
    sandbox_cancel(k->tail_req);
    k->tail_req = 0;
    free(k->dying_msg);
    k->dying_msg = NULL;
    if (k->client) {
        for (int c = 0; c < JCHAN_COUNT; c++)
            loop_io_remove(k->loop, &k->io[c]);
        loop_io_remove(k->loop, &k->io_monitor);
        loop_defer(k->loop, client_free, k->client);
        k->client = NULL;
    }
}

/* --- messages from the kernel ------------------------------------------------- */

static void become_ready(kernel_t *k)
{
    release_slot(k);
    end_timer(k, &k->probe_timer);
    end_timer(k, &k->start_timer);
    k->state = KERNEL_IDLE;
    k->last_activity = zclock_mono();
    log_debug("kernel %s: answered %lld ms after its sandbox ran (%d kernel_info probes)", k->id,
              (long long)(k->last_activity - k->connected_at), k->probes);
    if (k->resuming) {
        k->resuming = false;
        if (k->reattaching) {
            log_info("kernel %s answers again (its sandbox ran on: a snapshot, or a failed pause)",
                     k->id);
        } else {
            k->last_resume_ms = k->last_activity - k->pause_began;
            k->resumes++;
            log_info("kernel %s resumed in %lld ms (sandbox %s)", k->id,
                     (long long)k->last_resume_ms, kernel_sandbox_id(k));
        }
        k->reattaching = false;
        pump(k);
        emit(k, KERNEL_EV_READY, NULL);
        if (!k->freed)
            snapshot_ready(k, NULL); /* one asked for while it resumed */
        return;
    }
    snapshot_ready(k, &(sg_error_t){.kind = SG_E_UNAVAILABLE,
                                    .msg = "the context has a fresh kernel (it could not be "
                                           "resumed): nothing to snapshot"});
    if (k->from_snapshot) {
        log_info("kernel %s ready (%s, sandbox %s), restored from snapshot %s", k->id,
                 k->spec->name, kernel_sandbox_id(k), k->from_snapshot);
        free(k->from_snapshot);
        k->from_snapshot = NULL;
        guests_restored(k);
        pump(k);
        emit(k, KERNEL_EV_READY, NULL);
        return;
    }
    log_info("kernel %s ready (%s, sandbox %s)", k->id, k->spec->name, kernel_sandbox_id(k));
    if (k->opts.preload && *k->opts.preload) {
        /* First in line, ahead of anything queued during a restart. */
        exec_t *e = exec_new(k, k->opts.preload, &(kernel_exec_opts_t){.silent = true},
                             &(kernel_exec_cb_t){0});
        e->is_preload = true;
        e->next = k->queue;
        k->queue = e;
        pump(k);
        return; /* READY once the preload has run */
    }
    pump(k);
    emit(k, KERNEL_EV_READY, NULL);
}

/* A starting kernel is ready once it answered kernel_info, its iopub
 * reaches us, and our stdin socket is connected (jclient.h: an input_request
 * sent before would be dropped by the kernel and its execution would hang). */
void maybe_ready(kernel_t *k)
{
    if (k->info_replied && k->iopub_seen && jclient_stdin_connected(k->client))
        become_ready(k);
}

/* Whether m answers a request sandgate itself sent (its executions, and the
 * kernel_info / interrupt / shutdown requests of its own session). */
static bool own_request(const kernel_t *k, const jmsg_t *m)
{
    for (const exec_t *e = k->queue; e; e = e->next)
        if (e->msg_id[0] && strcmp(jmsg_parent_id(m), e->msg_id) == 0)
            return true;
    const char *session = json_string_value(json_object_get(jmsg_parent(m), "session"));
    return session && k->client && strcmp(session, jsession_id(jclient_session(k->client))) == 0;
}

/* A reply to sandgate's own bookkeeping (start-up kernel_info probes), not
 * to an execution: it says nothing about the kernel being busy with work. */
static bool own_probe(const kernel_t *k, const jmsg_t *m)
{
    for (const exec_t *e = k->queue; e; e = e->next)
        if (e->msg_id[0] && strcmp(jmsg_parent_id(m), e->msg_id) == 0)
            return false;
    return own_request(k, m);
}

static void on_iopub(kernel_t *k, jmsg_t *m)
{
    if (k->state == KERNEL_STARTING) {
        k->iopub_seen = true;
        maybe_ready(k);
        return;
    }
    const char *type = jmsg_type(m);
    if (strcmp(type, "status") == 0 && !own_probe(k, m)) {
        const char *st = jmsg_content_str(m, "execution_state");
        if (st && strlen(st) < sizeof k->published)
            strcpy(k->published, st);
    }
    if (k->tap.on_message)
        k->tap.on_message(k, JCHAN_IOPUB, m, k->tap.arg);
    if (k->tracked)
        on_tracked(k, JCHAN_IOPUB, m);
    exec_t *e = k->queue;
    if (e == NULL || !e->msg_id[0] || strcmp(jmsg_parent_id(m), e->msg_id) != 0)
        return;
    if (strcmp(type, "status") == 0) {
        const char *st = jmsg_content_str(m, "execution_state");
        if (st && strcmp(st, "idle") == 0) {
            e->got_idle = true;
            maybe_finish(k);
        }
        return;
    }
    linger_more(k, e); /* late output: more may follow */
    if (e->cb.on_output)
        e->cb.on_output(m, e->cb.arg);
}

static void on_shell(kernel_t *k, jmsg_t *m)
{
    const char *type = jmsg_type(m);
    if (strcmp(type, "kernel_info_reply") == 0 && k->state == KERNEL_STARTING) {
        k->info_replied = true;
        k->probe_sent = 0;
        maybe_ready(k);
        if (!k->iopub_seen) /* still starting: its iopub waits for the next answer */
            on_probe(k->loop, -1, k);
        return;
    }
    exec_t *e = k->queue;
    if (strcmp(type, "execute_reply") == 0 && e && e->msg_id[0] &&
        strcmp(jmsg_parent_id(m), e->msg_id) == 0) {
        e->got_reply = true;
        json_decref(e->reply);
        e->reply = json_incref(jmsg_content(m));
        maybe_finish(k);
        return;
    }
    if (k->tap.on_message && !own_request(k, m))
        k->tap.on_message(k, JCHAN_SHELL, m, k->tap.arg);
    if (k->tracked) /* after the tap: its frontend has the reply first */
        on_tracked(k, JCHAN_SHELL, m);
}

static void on_stdin(kernel_t *k, jmsg_t *m)
{
    if (strcmp(jmsg_type(m), "input_request") != 0)
        return;
    if (k->tap.on_message && !own_request(k, m)) {
        k->tap.on_message(k, JCHAN_STDIN, m, k->tap.arg);
        return;
    }
    /* No caller here can type: answer EOF, which ipykernel raises as EOFError. */
    jmsg_t *reply = jsession_msg(jclient_session(k->client), "input_reply",
                                 json_pack("{s:s}", "value", "\x04"));
    jmsg_set_parent(reply, m);
    zmsg_t *ids = jmsg_identities(reply);
    while (zmsg_size(ids)) {
        zframe_t *f = zmsg_pop(ids);
        zframe_destroy(&f);
    }
    send_msg(k, JCHAN_STDIN, reply, NULL);
    jmsg_destroy(&reply);
}

bool on_socket(loop_t *loop, zsock_t *sock, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->client == NULL)
        return false;
    jchan_t chan = JCHAN_SHELL;
    for (int c = 0; c < JCHAN_COUNT; c++)
        if (jclient_socket(k->client, c) == sock)
            chan = c;
    if (chan == JCHAN_HB) {
        char pong[64];
        if (zmq_recv(zsock_resolve(sock), pong, sizeof pong, ZMQ_DONTWAIT) < 0)
            return false;
        k->hb_sent = 0;
        return true;
    }
    sg_error_t *err = NULL;
    jmsg_t *m = NULL;
    int got = jclient_try_recv(k->client, chan, &m, &err);
    if (got == 0)
        return false;
    if (got < 0) {
        log_warn("kernel %s: message refused: %s", k->id, err->msg);
        sg_error_free(&err);
        return true; /* there may be more behind it */
    }
    switch (chan) {
    case JCHAN_IOPUB: on_iopub(k, m); break;
    case JCHAN_SHELL: on_shell(k, m); break;
    case JCHAN_STDIN: on_stdin(k, m); break;
    default: /* control: sandgate's own replies (interrupt, shutdown) need no action */
        if (k->tap.on_message && !own_request(k, m))
            k->tap.on_message(k, chan, m, k->tap.arg);
        break;
    }
    jmsg_destroy(&m);
    return true;
}
