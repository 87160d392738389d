/* sandbox_link: the sandbox operations as requests to the privileged
 * launcher (sandbox_internal.h, launcher.h).  With a launcher this process
 * holds no privilege: each operation that needs one sends the launcher a
 * request on the link, a SOCK_SEQPACKET socket, and nothing on the path of
 * an HTTP request waits for the answer on the loop. */
#include "kernelmgr/sandbox_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/xalloc.h"

/* --- the link ---------------------------------------------------------------- */

static struct {
    int fd; /* -1: no launcher, everything is done here */
    loop_t *loop;
    uint64_t seq;
    zlistx_t *waiting; /* async_t: requests whose answer has a callback */
    zlistx_t *early;   /* answers that came while a synchronous call waited */
    int early_timer;
    loop_io_t *io;
    int timeout_ms; /* how long a request waits for its answer */
    bool lost;      /* the launcher is gone: every request fails */
    sandbox_lost_fn *on_lost;
    void *lost_arg;
} link_ = {.fd = -1, .early_timer = -1, .timeout_ms = 10000};

/* A request whose answer goes to a callback.  The answer is a JSON object,
 * {"error": {kind, message}} when the launcher refused or failed — or when
 * it did not answer in time (timer), which is reported the same way. */
typedef struct {
    uint64_t seq;
    void (*cb)(json_t *reply, void *arg); /* NULL once cancelled */
    void *arg;
    int timer; /* -1: none */
    char op[32];
} async_t;

#define LOST_MSG                                                                                   \
    "the privileged launcher is gone: sandboxes cannot be made or changed until sandgate "         \
    "restarts"

static void on_request_timeout(loop_t *loop, int timer_id, void *arg);

/* The launcher died (killed, or crashed) or its link broke.  Nothing
 * privileged can be done any more, and this process, without root, cannot
 * start another launcher: every request waiting for an answer, and every
 * later one, fails with SG_E_UNAVAILABLE, and the daemon is told so that it
 * stops for its supervisor to restart it.  The sandboxes keep running and
 * the next sandgate adopts them. */
static void link_down(void)
{
    if (link_.lost)
        return;
    link_.lost = true;
    log_error("sandbox: " LOST_MSG);
    loop_io_remove(link_.loop, &link_.io);
    /* From the loop, as their timeouts would: not inside whoever noticed. */
    for (async_t *a = zlistx_first(link_.waiting); a; a = zlistx_next(link_.waiting)) {
        loop_timer_end(link_.loop, a->timer);
        a->timer = loop_timer(link_.loop, 0, 1, on_request_timeout, a);
    }
    if (link_.on_lost)
        link_.on_lost(link_.lost_arg);
}

/* Sends req (stolen), with a file descriptor when fd >= 0; returns its seq. */
static uint64_t link_send(json_t *req, int fd)
{
    uint64_t seq = ++link_.seq;
    if (link_.lost) {
        json_decref(req);
        return seq;
    }
    json_object_set_new(req, "seq", json_integer((json_int_t)seq));
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    struct iovec iov = {.iov_base = text, .iov_len = strlen(text)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof cm.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    if (sendmsg(link_.fd, &mh, MSG_NOSIGNAL) < 0)
        link_down();
    free(text);
    return seq;
}

/* The next answer; NULL when none is there (!wait) or the link is down. */
static json_t *link_recv(bool wait)
{
    static char buf[256 * 1024 + 1];
    if (link_.lost)
        return NULL;
    ssize_t n = recv(link_.fd, buf, sizeof buf - 1, wait ? 0 : MSG_DONTWAIT);
    if (n < 0 && !wait && (errno == EAGAIN || errno == EINTR))
        return NULL;
    if (n <= 0) {
        if (n < 0 && errno == EINTR)
            return link_recv(wait);
        link_down();
        return NULL;
    }
    /* A packet that is not JSON is an object without a seq: no one's. */
    return json_loadb(buf, (size_t)n, 0, NULL) ?: json_object();
}

static void dispatch(json_t *reply)
{
    uint64_t seq = (uint64_t)json_integer_value(json_object_get(reply, "seq"));
    for (async_t *a = zlistx_first(link_.waiting); a; a = zlistx_next(link_.waiting)) {
        if (a->seq != seq)
            continue;
        zlistx_delete(link_.waiting, zlistx_cursor(link_.waiting));
        loop_timer_end(link_.loop, a->timer);
        if (a->cb)
            a->cb(reply, a->arg);
        free(a);
        break;
    }
    /* No one waits for it: cancelled, or it came after its timeout. */
    json_decref(reply);
}

static json_t *timeout_reply(const char *op)
{
    /* alive: a pause under way did not end the sandbox; the launcher did. */
    if (link_.lost)
        return json_pack("{s:{s:i, s:s}, s:b}", "error", "kind", SG_E_UNAVAILABLE, "message",
                         LOST_MSG, "alive", 1);
    return json_pack("{s:{s:i, s:s+}}", "error", "kind", SG_E_TIMEOUT, "message",
                     "the privileged launcher did not answer '", op,
                     "' in time; it may be stopped or overloaded");
}

/* A request's time is up, or (lost) the launcher will never answer it. */
static void on_request_timeout(loop_t *loop, int timer_id, void *arg)
{
    async_t *a = arg;
    if (!link_.lost)
        log_error("sandbox: the launcher did not answer '%s' (request %llu) within %d ms", a->op,
                  (unsigned long long)a->seq, link_.timeout_ms);
    for (async_t *w = zlistx_first(link_.waiting); w; w = zlistx_next(link_.waiting))
        if (w == a) {
            zlistx_delete(link_.waiting, zlistx_cursor(link_.waiting));
            break;
        }
    json_t *reply = timeout_reply(a->op);
    if (a->cb)
        a->cb(reply, a->arg);
    json_decref(reply);
    free(a);
}

static void on_early(loop_t *loop, int timer_id, void *arg)
{
    link_.early_timer = -1;
    json_t *reply;
    while ((reply = zlistx_detach(link_.early, NULL)))
        dispatch(reply);
}

static void on_link(loop_t *loop, int fd, unsigned events, void *arg)
{
    json_t *reply;
    while ((reply = link_recv(false)))
        dispatch(reply);
}

/* A request answered before returning: the reply (NULL with *err when the
 * launcher refused, failed, or did not answer within the timeout — then the
 * late answer is dropped when it comes).  Other answers arriving meanwhile
 * are dispatched on the next loop pass.  Blocks the loop: only for start-up
 * and for the few steps that cannot wait (see the callers). */
static json_t *link_call_fd(json_t *req, int fd, sg_error_t **err)
{
    char op[32];
    snprintf(op, sizeof op, "%s", json_string_value(json_object_get(req, "op")) ?: "?");
    uint64_t seq = link_send(req, fd);
    int64_t deadline = zclock_mono() + link_.timeout_ms;
    for (;;) {
        if (link_.lost) {
            sg_error_set(err, SG_E_UNAVAILABLE, LOST_MSG);
            return NULL;
        }
        struct pollfd p = {.fd = link_.fd, .events = POLLIN};
        int64_t left = deadline - zclock_mono();
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            log_error("sandbox: the launcher did not answer '%s' (request %llu) within %d ms", op,
                      (unsigned long long)seq, link_.timeout_ms);
            sg_error_set(err, SG_E_TIMEOUT,
                         "the privileged launcher did not answer '%s' in time; it may be stopped "
                         "or overloaded",
                         op);
            return NULL;
        }
        json_t *reply = link_recv(true);
        if (!reply)
            continue; /* the link went down */
        if ((uint64_t)json_integer_value(json_object_get(reply, "seq")) != seq) {
            zlistx_add_end(link_.early, reply);
            if (link_.early_timer < 0)
                link_.early_timer = loop_timer(link_.loop, 0, 1, on_early, NULL);
            continue;
        }
        json_t *e = json_object_get(reply, "error");
        if (e) {
            sg_error_set(err, (sg_errkind_t)json_integer_value(json_object_get(e, "kind")), "%s",
                         json_string_value(json_object_get(e, "message")) ?: "launcher error");
            json_decref(reply);
            return NULL;
        }
        return reply;
    }
}

static json_t *link_call(json_t *req, sg_error_t **err)
{
    return link_call_fd(req, -1, err);
}

/* A request whose answer goes to cb (or nowhere); returns its seq.  With
 * timed, cb gets a timeout error if no answer comes within the link's
 * timeout. */
static uint64_t link_async(json_t *req, bool timed, void (*cb)(json_t *reply, void *arg), void *arg)
{
    char op[32];
    snprintf(op, sizeof op, "%s", json_string_value(json_object_get(req, "op")) ?: "?");
    uint64_t seq = link_send(req, -1);
    if (cb) {
        async_t *a = xzalloc(sizeof *a);
        *a = (async_t){.seq = seq, .cb = cb, .arg = arg, .timer = -1};
        memcpy(a->op, op, sizeof a->op);
        if (timed || link_.lost)
            a->timer =
                loop_timer(link_.loop, link_.lost ? 0 : link_.timeout_ms, 1, on_request_timeout, a);
        zlistx_add_end(link_.waiting, a);
    }
    return seq;
}

static void link_cancel(uint64_t seq)
{
    for (async_t *a = zlistx_first(link_.waiting); a; a = zlistx_next(link_.waiting))
        if (a->seq == seq)
            a->cb = NULL;
}

void sandbox_set_launcher(loop_t *loop, int fd, int timeout_ms, sandbox_lost_fn *on_lost, void *arg)
{
    link_.on_lost = on_lost;
    link_.lost_arg = arg;
    if (timeout_ms > 0)
        link_.timeout_ms = timeout_ms;
    link_.fd = fd;
    link_.loop = loop;
    link_.waiting = zlistx_new();
    link_.early = zlistx_new();
    /* A hang-up reaches on_link too (errors are always reported). */
    link_.io = loop_fd_add(loop, fd, LOOP_READ, on_link, NULL, NULL);
    if (link_.io == NULL)
        link_down();
}

bool sandbox_link_up(void)
{
    return link_.fd >= 0;
}

static int conn_from(jconn_t *conn, json_t *reply, sg_error_t **err)
{
    char *text = json_dumps(json_object_get(reply, "conn"), JSON_COMPACT);
    int rc = text ? jconn_parse(conn, text, strlen(text), err)
                  : sg_error_set(err, SG_E_INTERNAL, "the launcher sent no connection");
    free(text);
    return rc;
}

static sg_error_t *reply_error(json_t *reply)
{
    json_t *e = json_object_get(reply, "error");
    if (!e)
        return NULL;
    sg_error_t *err = NULL;
    json_int_t kind = json_integer_value(json_object_get(e, "kind"));
    sg_error_set(&err, kind > 0 ? (sg_errkind_t)kind : SG_E_UNAVAILABLE, "%s",
                 json_string_value(json_object_get(e, "message")) ?: "launcher error");
    return err;
}

/* --- the operations ------------------------------------------------------------ */

/* A request answered before returning whose answer says only "done". */
static int link_do(json_t *req, int fd, sg_error_t **err)
{
    json_t *ok = link_call_fd(req, fd, err);
    json_decref(ok);
    return ok ? 0 : -1;
}

/* The launcher prepares the state directory when it starts; "env" asks
 * whether that worked. */
static int link_env_init(sandbox_env_t *env, sg_error_t **err)
{
    return link_do(json_pack("{s:s}", "op", "env"), -1, err);
}

static int link_workspace_open(const sandbox_env_t *env, const char *path, sg_error_t **err)
{
    return link_do(json_pack("{s:s, s:s}", "op", "workspace_open", "path", path), -1, err);
}

typedef struct {
    sandbox_opened_fn *cb;
    void *arg;
} opening_t;

static void workspace_opened(json_t *reply, void *arg)
{
    opening_t *o = arg;
    sg_error_t *err = reply_error(reply);
    if (o->cb)
        o->cb(err, o->arg);
    sg_error_free(&err);
    free(o);
}

static uint64_t link_workspace_open_async(const sandbox_env_t *env, const char *path,
                                          sandbox_opened_fn *cb, void *arg)
{
    opening_t *o = xzalloc(sizeof *o);
    *o = (opening_t){cb, arg};
    return link_async(json_pack("{s:s, s:s}", "op", "workspace_open", "path", path), true,
                      workspace_opened, o);
}

static void link_cancel_open(uint64_t request)
{
    for (async_t *a = zlistx_first(link_.waiting); a; a = zlistx_next(link_.waiting))
        if (a->seq == request && a->cb == workspace_opened)
            ((opening_t *)a->arg)->cb = NULL; /* opening_t is freed when the answer comes */
}

static void workspace_closed(json_t *reply, void *arg)
{
    sg_error_t *err = reply_error(reply);
    if (err)
        log_warn("sandbox: closing workspace %s: %s", (char *)arg, err->msg);
    sg_error_free(&err);
    free(arg);
}

/* Answered in the background; nothing waits for it. */
static void link_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
    link_async(
        json_pack("{s:s, s:s, s:b}", "op", "workspace_close", "path", path, "remove", remove), true,
        workspace_closed, xstrdup(path));
}

/* The launcher prepares it when it starts (link_start). */
static int link_prepare(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    sb->kernelspec = xstrdup(spec->name);
    return 0;
}

static int link_adopt(sandbox_t *sb, pid_t pid, sg_error_t **err)
{
    json_t *r =
        link_call(json_pack("{s:s, s:s, s:i}", "op", "adopt", "id", sb->id, "pid", (int)pid), err);
    int rc = !r || conn_from(&sb->conn, r, err) < 0 ? -1 : 0;
    json_decref(r);
    return rc;
}

static void link_release(sandbox_t *sb)
{
    link_cancel(sb->start_seq);
    link_async(json_pack("{s:s, s:s}", "op", "free", "id", sb->id), false, NULL, NULL);
}

static void start_answered(json_t *reply, void *arg);

/* The launcher prepared the bundle: start it. */
static void new_answered(json_t *reply, void *arg)
{
    sandbox_t *sb = arg;
    sb->start_seq = 0;
    sg_error_t *err = reply_error(reply);
    if (err || conn_from(&sb->conn, reply, &err) < 0) {
        sg_error_prefix(&err, "preparing sandbox %s", sb->id);
        sb->started_cb(sb, -1, err, sb->started_arg);
        return;
    }
    /* runsc run may take long on a loaded machine: the kernel's start
     * timeout bounds it, not the link's. */
    sb->start_seq =
        link_async(json_pack("{s:s, s:s}", "op", "start", "id", sb->id), false, start_answered, sb);
}

static void start_answered(json_t *reply, void *arg)
{
    sandbox_t *sb = arg;
    sb->start_seq = 0;
    sg_error_t *err = reply_error(reply);
    json_int_t pid = json_integer_value(json_object_get(reply, "pid"));
    if (err || pid <= 0) {
        if (!err)
            sg_error_set(&err, SG_E_UNAVAILABLE, "the launcher started sandbox %s without a pid",
                         sb->id);
        sb->started_cb(sb, -1, err, sb->started_arg);
        return;
    }
    sb->pid = (pid_t)pid;
    sb->started_cb(sb, sb->pid, NULL, sb->started_arg);
}

/* "new", then "start" from its answer (new_answered, start_answered). */
static int link_start(sandbox_t *sb, sg_error_t **err)
{
    sb->start_seq =
        link_async(json_pack("{s:s, s:s, s:s, s:s, s:b}", "op", "new", "id", sb->id, "kernelspec",
                             sb->kernelspec, "workspace", sb->workspace, "internet", sb->internet),
                   true, new_answered, sb);
    return 0;
}

static void pause_answered(json_t *reply, void *arg)
{
    sandbox_t *sb = arg;
    sb->start_seq = 0;
    sg_error_t *err = reply_error(reply);
    if (err) {
        bool alive = json_is_true(json_object_get(reply, "alive"));
        sb->paused_cb(sb, 0, err, alive, sb->paused_arg);
        return;
    }
    sb->pid = 0;
    sb->paused_cb(sb, (uint64_t)json_integer_value(json_object_get(reply, "bytes")), NULL, false,
                  sb->paused_arg);
}

/* Checkpoints take as long as the sandbox's memory takes to write: the
 * kernel bounds them, not the link's timeout (like start). */
static int link_pause(sandbox_t *sb, sg_error_t **err)
{
    sb->start_seq =
        link_async(json_pack("{s:s, s:s}", "op", "pause", "id", sb->id), false, pause_answered, sb);
    return 0;
}

static int link_resume(sandbox_t *sb, sg_error_t **err)
{
    sb->start_seq = link_async(json_pack("{s:s, s:s}", "op", "resume", "id", sb->id), false,
                               start_answered, sb);
    return 0;
}

static int link_signal(sandbox_t *sb, int sig, sg_error_t **err)
{
    link_async(json_pack("{s:s, s:s, s:i}", "op", "signal", "id", sb->id, "sig", sig), false, NULL,
               NULL);
    return 0;
}

static void link_stop(sandbox_t *sb)
{
    link_cancel(sb->start_seq); /* the launcher stops a start under way */
    sb->start_seq = 0;
}

static void link_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    json_t *req = json_pack("{s:s, s:s, s:b}", "op", "remove", "id", id, "wait", wait);
    if (wait)
        json_decref(link_call(req, NULL));
    else
        link_async(req, false, NULL, NULL);
}

static json_t *link_list(sandbox_env_t *env, sg_error_t **err)
{
    json_t *r = link_call(json_pack("{s:s}", "op", "list"), err);
    json_t *ids = r ? json_incref(json_object_get(r, "ids")) : NULL;
    json_decref(r);
    if (r && !json_is_array(ids)) {
        json_decref(ids);
        ids = json_array();
    }
    return ids;
}

typedef struct {
    sandbox_refused_fn *cb;
    void *arg;
} refusing_t;

static void refused_answered(json_t *reply, void *arg)
{
    refusing_t *r = arg;
    sg_error_t *err = reply_error(reply);
    json_t *counts = json_object_get(reply, "counts");
    if (!err && !json_is_object(counts))
        sg_error_set(&err, SG_E_INTERNAL, "the launcher sent no refusal counts");
    r->cb(err ? NULL : counts, err, r->arg);
    sg_error_free(&err);
    free(r);
}

/* Answered on the loop; a silent launcher is a timeout error. */
static void link_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    refusing_t *r = xzalloc(sizeof *r);
    *r = (refusing_t){cb, arg};
    link_async(json_pack("{s:s}", "op", "egress_refused"), true, refused_answered, r);
}

static char *link_log_tail(const sandbox_t *sb, size_t max)
{
    json_t *r = link_call(
        json_pack("{s:s, s:s, s:I}", "op", "log", "id", sb->id, "max", (json_int_t)max), NULL);
    char *tail = xstrdup(json_string_value(json_object_get(r, "text")) ?: "");
    json_decref(r);
    return tail;
}

/* The launcher checks that fd is a regular file or directory of a workspace
 * owned by this process's uid. */
static int link_give(int fd)
{
    sg_error_t *err = NULL;
    int rc = link_do(json_pack("{s:s}", "op", "give"), fd, &err);
    if (err)
        log_warn("sandbox: giving a file to the sandbox user: %s", err->msg);
    sg_error_free(&err);
    return rc;
}

const sandbox_ops_t sandbox_link_ops = {
    .env_init = link_env_init,
    .workspace_open = link_workspace_open,
    .workspace_open_async = link_workspace_open_async,
    .cancel = link_cancel_open,
    .workspace_close = link_workspace_close,
    .prepare = link_prepare,
    .adopt = link_adopt,
    .release = link_release,
    .start = link_start,
    .pause = link_pause,
    .resume = link_resume,
    .signal = link_signal,
    .stop = link_stop,
    .remove_id = link_remove_id,
    .list = link_list,
    .egress_refused = link_egress_refused,
    .log_tail = link_log_tail,
    .give = link_give,
};
