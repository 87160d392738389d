/* mini_kernel: a small kernel-side responder built on proto/, so that
 * jupyter_client's BlockingKernelClient can test sandgate's wire protocol from
 * the other direction.  It "evaluates" code by echoing it:
 *
 *   code "error"       -> an error (ename "EchoError")
 *   any other code     -> stream stdout "<code>\n" and execute_result "<code>"
 *
 * usage: mini_kernel CONNECTION_FILE
 * On exit it prints "mini_kernel: accepted N refused M" to stderr.
 */
#include <stdio.h>

#include "common/xalloc.h"
#include "proto/jconn.h"
#include "proto/jsession.h"

typedef struct {
    jsession_t *session;
    zsock_t *shell, *control, *iopub, *hb;
    int execution_count;
    bool done;
} kernel_t;

static void publish(kernel_t *k, const jmsg_t *parent, const char *type, json_t *content)
{
    jmsg_t *m = jsession_msg(k->session, type, content);
    jmsg_set_parent(m, parent);
    zmsg_t *ids = jmsg_identities(m);
    while (zmsg_size(ids)) { /* iopub carries a topic, not routing identities */
        zframe_t *f = zmsg_pop(ids);
        zframe_destroy(&f);
    }
    zmsg_addstrf(ids, "kernel.mini.%s", type);
    zmsg_t *wire = jsession_encode(k->session, m);
    zmsg_send(&wire, k->iopub);
    jmsg_destroy(&m);
}

static void reply(kernel_t *k, zsock_t *sock, const jmsg_t *req, const char *type, json_t *content)
{
    jmsg_t *m = jsession_msg(k->session, type, content);
    jmsg_set_parent(m, req);
    zmsg_t *wire = jsession_encode(k->session, m);
    zmsg_send(&wire, sock);
    jmsg_destroy(&m);
}

static void handle(kernel_t *k, zsock_t *sock, jmsg_t *req)
{
    const char *type = jmsg_type(req);
    publish(k, req, "status", json_pack("{s:s}", "execution_state", "busy"));
    if (strcmp(type, "kernel_info_request") == 0) {
        reply(k, sock, req, "kernel_info_reply",
              json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:s, s:[]}", "status", "ok",
                        "protocol_version", JMSG_PROTOCOL_VERSION, "implementation",
                        "sandgate-mini", "implementation_version", "0.1", "language_info", "name",
                        "echo", "version", "1.0", "mimetype", "text/plain", "file_extension",
                        ".txt", "banner", "sandgate mini kernel", "help_links"));
    } else if (strcmp(type, "execute_request") == 0) {
        const char *code = jmsg_content_str(req, "code");
        code = code ? code : "";
        int n = ++k->execution_count;
        publish(k, req, "execute_input",
                json_pack("{s:s, s:i}", "code", code, "execution_count", n));
        if (strcmp(code, "error") == 0) {
            json_t *err =
                json_pack("{s:s, s:s, s:[s]}", "ename", "EchoError", "evalue", "asked for an error",
                          "traceback", "EchoError: asked for an error");
            publish(k, req, "error", json_deep_copy(err));
            json_object_set_new(err, "status", json_string("error"));
            json_object_set_new(err, "execution_count", json_integer(n));
            reply(k, sock, req, "execute_reply", err);
        } else {
            char *text = xasprintf("%s\n", code);
            publish(k, req, "stream", json_pack("{s:s, s:s}", "name", "stdout", "text", text));
            free(text);
            publish(k, req, "execute_result",
                    json_pack("{s:i, s:{s:s}, s:{}}", "execution_count", n, "data", "text/plain",
                              code, "metadata"));
            reply(k, sock, req, "execute_reply",
                  json_pack("{s:s, s:i, s:{}, s:[]}", "status", "ok", "execution_count", n,
                            "user_expressions", "payload"));
        }
    } else if (strcmp(type, "shutdown_request") == 0) {
        json_t *restart = json_object_get(jmsg_content(req), "restart");
        reply(k, sock, req, "shutdown_reply",
              json_pack("{s:s, s:b}", "status", "ok", "restart", json_is_true(restart)));
        k->done = true;
    }
    publish(k, req, "status", json_pack("{s:s}", "execution_state", "idle"));
}

static zsock_t *bind_chan(const jconn_t *conn, jchan_t chan, int type)
{
    char ep[300];
    zsock_t *s = zsock_new(type);
    zsock_set_linger(s, 1000);
    if (jconn_endpoint(conn, chan, ep, sizeof ep) < 0 || zsock_bind(s, "%s", ep) < 0) {
        fprintf(stderr, "mini_kernel: cannot bind %s\n", ep);
        exit(1);
    }
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mini_kernel CONNECTION_FILE\n");
        return 2;
    }
    sg_error_t *err = NULL;
    jconn_t conn;
    kernel_t k = {0};
    if (jconn_read(&conn, argv[1], &err) < 0 ||
        !(k.session = jsession_new(conn.key, strlen(conn.key), &err))) {
        fprintf(stderr, "mini_kernel: %s\n", err->msg);
        return 1;
    }
    k.shell = bind_chan(&conn, JCHAN_SHELL, ZMQ_ROUTER);
    k.control = bind_chan(&conn, JCHAN_CONTROL, ZMQ_ROUTER);
    k.iopub = bind_chan(&conn, JCHAN_IOPUB, ZMQ_PUB);
    k.hb = bind_chan(&conn, JCHAN_HB, ZMQ_REP);
    zsock_t *stdin_sock = bind_chan(&conn, JCHAN_STDIN, ZMQ_ROUTER);

    zpoller_t *p = zpoller_new(k.shell, k.control, k.hb, NULL);
    while (!k.done) {
        zsock_t *which = zpoller_wait(p, -1);
        if (which == NULL)
            break; /* interrupted */
        zmsg_t *wire = zmsg_recv(which);
        if (which == k.hb) {
            zmsg_send(&wire, k.hb);
            continue;
        }
        jmsg_t *req = jsession_decode(k.session, &wire, &err);
        if (req == NULL) {
            fprintf(stderr, "mini_kernel: refused: %s\n", err->msg);
            sg_error_free(&err);
            continue;
        }
        handle(&k, which, req);
        jmsg_destroy(&req);
    }
    jsession_stats_t st;
    jsession_stats(k.session, &st);
    fprintf(stderr, "mini_kernel: accepted %llu refused %llu\n", (unsigned long long)st.accepted,
            (unsigned long long)(st.bad_signature + st.unsigned_msgs + st.malformed + st.replayed +
                                 st.oversized));
    zpoller_destroy(&p);
    zsock_destroy(&k.shell);
    zsock_destroy(&k.control);
    zsock_destroy(&k.iopub);
    zsock_destroy(&k.hb);
    zsock_destroy(&stdin_sock);
    jsession_destroy(&k.session);
    return 0;
}
