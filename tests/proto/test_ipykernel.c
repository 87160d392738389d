/* sandgate's C client (proto/) against a real ipykernel (Debian's
 * python3-ipykernel, a plain process) over both ipc and tcp. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "proto/jclient.h"
#include "tests/lib/tap.h"

static pid_t spawn_kernel(const char *dir, const char *conn_path)
{
    const char *py = getenv("PYTHON3") ? getenv("PYTHON3") : "/usr/bin/python3";
    pid_t pid = fork();
    if (pid == 0) {
        char *log = xasprintf("%s/kernel.log", dir);
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0)
            _exit(127);
        setenv("IPYTHONDIR", dir, 1);
        setenv("JUPYTER_RUNTIME_DIR", dir, 1);
        execl(py, py, "-m", "ipykernel_launcher", "-f", conn_path, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Sends kernel_info_request until one is answered and its status appears on
 * iopub, so the SUB socket is known to be connected (ZeroMQ's slow joiner). */
static jmsg_t *wait_ready(jclient_t *c)
{
    zpoller_t *iopub = zpoller_new(jclient_socket(c, JCHAN_IOPUB), NULL);
    jmsg_t *info = NULL;
    for (int tries = 0; tries < 60 && info == NULL; tries++) {
        sg_error_t *err = NULL;
        jmsg_t *req = jsession_msg(jclient_session(c), "kernel_info_request", NULL);
        char id[64];
        snprintf(id, sizeof id, "%s", jmsg_id(req));
        jmsg_t *reply = jclient_request(c, JCHAN_SHELL, &req, 1000, &err);
        sg_error_free(&err);
        if (!reply)
            continue;
        int64_t deadline = zclock_mono() + 500;
        bool seen = false;
        while (!seen && zclock_mono() < deadline && zpoller_wait(iopub, 100)) {
            jmsg_t *m = jclient_recv(c, JCHAN_IOPUB, &err);
            sg_error_free(&err);
            seen = m && strcmp(jmsg_parent_id(m), id) == 0;
            jmsg_destroy(&m);
        }
        if (seen)
            info = reply;
        else
            jmsg_destroy(&reply);
    }
    zpoller_destroy(&iopub);
    return info;
}

/* Runs code; returns the iopub messages for it (up to and including status
 * idle) as a JSON array of {msg_type, content, parent_ok} and stores the
 * execute_reply content in *reply. */
static json_t *execute(jclient_t *c, const char *code, json_t **reply)
{
    sg_error_t *err = NULL;
    jmsg_t *req = jsession_msg(jclient_session(c), "execute_request",
                               json_pack("{s:s, s:b, s:b, s:{}, s:b}", "code", code, "silent", 0,
                                         "store_history", 1, "user_expressions", "allow_stdin", 0));
    jclient_send(c, JCHAN_SHELL, req, &err);
    json_t *out = json_array();
    *reply = NULL;
    bool idle = false;
    zpoller_t *p =
        zpoller_new(jclient_socket(c, JCHAN_SHELL), jclient_socket(c, JCHAN_IOPUB), NULL);
    int64_t deadline = zclock_mono() + 30000;
    while ((!idle || *reply == NULL) && zclock_mono() < deadline) {
        void *which = zpoller_wait(p, 1000);
        if (!which)
            continue;
        jchan_t chan = which == jclient_socket(c, JCHAN_SHELL) ? JCHAN_SHELL : JCHAN_IOPUB;
        jmsg_t *m = jclient_recv(c, chan, &err);
        if (!m) {
            diag("refused: %s", err->msg);
            sg_error_free(&err);
            continue;
        }
        bool mine = strcmp(jmsg_parent_id(m), jmsg_id(req)) == 0;
        if (chan == JCHAN_SHELL && mine) {
            *reply = json_incref(jmsg_content(m));
        } else if (chan == JCHAN_IOPUB && mine) {
            json_array_append_new(
                out, json_pack("{s:s, s:O}", "msg_type", jmsg_type(m), "content", jmsg_content(m)));
            if (strcmp(jmsg_type(m), "status") == 0 &&
                strcmp(json_string_value(json_object_get(jmsg_content(m), "execution_state")),
                       "idle") == 0)
                idle = true;
        }
        jmsg_destroy(&m);
    }
    zpoller_destroy(&p);
    jmsg_destroy(&req);
    return out;
}

static json_t *find(json_t *msgs, const char *type)
{
    size_t i;
    json_t *m;
    json_array_foreach (msgs, i, m)
        if (strcmp(json_string_value(json_object_get(m, "msg_type")), type) == 0)
            return m;
    return NULL;
}

static void run(const char *transport)
{
    char dir[] = "/tmp/sg-ipyk-XXXXXX";
    if (!mkdtemp(dir))
        abort();
    sg_error_t *err = NULL;
    jconn_t conn;
    cleanup_free char *prefix = xasprintf("%s/k", dir);
    cleanup_free char *path = xasprintf("%s/kernel.json", dir);
    jconn_init(&conn, transport, strcmp(transport, "ipc") == 0 ? prefix : "127.0.0.1", &err);
    jconn_write(&conn, path, &err);
    pid_t pid = spawn_kernel(dir, path);
    jclient_t *c = jclient_new(&conn, &err);
    ok(c != NULL, "%s: client connects", transport);
    if (!c)
        return;

    jmsg_t *info = wait_ready(c);
    ok(info != NULL, "%s: kernel_info_request answered", transport);
    if (info) {
        json_t *ct = jmsg_content(info);
        is_str(jmsg_type(info), "kernel_info_reply", "%s: reply type", transport);
        is_str(json_string_value(json_object_get(ct, "implementation")), "ipython",
               "%s: implementation ipython", transport);
        is_str(json_string_value(json_object_get(json_object_get(ct, "language_info"), "name")),
               "python", "%s: language python", transport);
        ok(strncmp(json_string_value(json_object_get(ct, "protocol_version")), "5.", 2) == 0,
           "%s: protocol 5.x", transport);
    }
    jmsg_destroy(&info);

    json_t *reply;
    json_t *msgs = execute(c, "x = 6*7", &reply);
    is_str(json_string_value(json_object_get(reply, "status")), "ok", "%s: x = 6*7 ok", transport);
    json_decref(reply);
    json_decref(msgs);

    msgs = execute(c, "x", &reply);
    json_t *res = find(msgs, "execute_result");
    is_str(json_string_value(json_object_get(
               json_object_get(json_object_get(res, "content"), "data"), "text/plain")),
           "42", "%s: x gives execute_result text/plain 42", transport);
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    ok(last && strcmp(json_string_value(json_object_get(last, "msg_type")), "status") == 0 &&
           strcmp(json_string_value(
                      json_object_get(json_object_get(last, "content"), "execution_state")),
                  "idle") == 0,
       "%s: then status idle, last", transport);
    size_t ri = 0, n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++)
        if (json_array_get(msgs, i) == res)
            ri = i;
    ok(res && ri < n - 1, "%s: result comes before idle", transport);
    is_int(json_integer_value(json_object_get(reply, "execution_count")), 2,
           "%s: execution_count 2", transport);
    json_decref(reply);
    json_decref(msgs);

    /* A message signed with the wrong key is ignored; the kernel keeps serving. */
    jsession_t *evil = jsession_new("not-the-key", 11, &err);
    jmsg_t *bad = jsession_msg(evil, "kernel_info_request", NULL);
    zmsg_t *wire = jsession_encode(evil, bad);
    zmsg_send(&wire, jclient_socket(c, JCHAN_SHELL));
    zpoller_t *p = zpoller_new(jclient_socket(c, JCHAN_SHELL), NULL);
    ok(zpoller_wait(p, 1500) == NULL, "%s: wrongly signed request gets no reply", transport);
    zpoller_destroy(&p);
    jmsg_destroy(&bad);
    jsession_destroy(&evil);
    msgs = execute(c, "x + 1", &reply);
    res = find(msgs, "execute_result");
    is_str(json_string_value(json_object_get(
               json_object_get(json_object_get(res, "content"), "data"), "text/plain")),
           "43", "%s: kernel still serves correctly signed requests", transport);
    json_decref(reply);
    json_decref(msgs);

    jmsg_t *sd =
        jsession_msg(jclient_session(c), "shutdown_request", json_pack("{s:b}", "restart", 0));
    jmsg_t *sdr = jclient_request(c, JCHAN_CONTROL, &sd, 10000, &err);
    ok(sdr && strcmp(jmsg_type(sdr), "shutdown_reply") == 0, "%s: shutdown_reply on control",
       transport);
    sg_error_free(&err);
    jmsg_destroy(&sdr);
    int status = -1;
    for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; i++)
        usleep(100000);
    ok(WIFEXITED(status), "%s: kernel process exited after shutdown", transport);
    if (!WIFEXITED(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    jclient_destroy(&c);
    cleanup_free char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
}

int main(void)
{
    run("ipc");
    run("tcp");
    return tap_done();
}
