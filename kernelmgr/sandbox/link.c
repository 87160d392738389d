/* link: the sandbox operations as requests to the privileged launcher
 * (internal.h; the operations and their wire: link.h).  With a launcher this process
 * holds no privilege: each operation that needs one sends the launcher a
 * request on the link, a SOCK_SEQPACKET socket, named from launcher_ops.
 * While the daemon serves, every answer goes to a callback from the loop
 * (link_async, after OpenBSD's imsg): nothing waits for the launcher.  Only
 * start-up (and shutdown) may wait for an answer, link_startup_wait, and
 * only for the operations launcher_ops marks LOP_STARTUP. */
#include "kernelmgr/sandbox/internal.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "kernelmgr/sandbox/link.h"

/* --- the operations ----------------------------------------------------------- */

#define ENV LOP_NEEDS_ENV
#define SB (LOP_NEEDS_ENV | LOP_TAKES_ID | LOP_TAKES_SANDBOX)
#define ID (LOP_NEEDS_ENV | LOP_TAKES_ID)
const launcher_op_desc_t launcher_ops[LOP_COUNT] = {
    [LOP_ENV] = {"env", LOP_STARTUP},
    [LOP_WORKSPACE_OPEN] = {"workspace_open",
                            ENV | LOP_TAKES_PATH | LOP_STARTUP | LOP_ASYNC | LOP_TIMED},
    [LOP_WORKSPACE_CLOSE] = {"workspace_close", ENV | LOP_TAKES_PATH | LOP_ASYNC | LOP_TIMED},
    [LOP_NEW] = {"new", ID | LOP_ASYNC | LOP_TIMED},
    [LOP_ADOPT] = {"adopt", ID | LOP_STARTUP},
    [LOP_START] = {"start", SB | LOP_ASYNC},
    [LOP_PAUSE] = {"pause", SB | LOP_ASYNC},
    [LOP_REATTACH] = {"reattach", SB | LOP_ASYNC | LOP_TIMED},
    [LOP_RESUME] = {"resume", SB | LOP_ASYNC},
    [LOP_SIGNAL] = {"signal", SB | LOP_ASYNC},
    [LOP_REMOVE] = {"remove", ID | LOP_STARTUP | LOP_ASYNC},
    [LOP_FREE] = {"free", ID | LOP_ASYNC},
    [LOP_LIST] = {"list", ENV | LOP_STARTUP},
    [LOP_LOG] = {"log", ID | LOP_ASYNC | LOP_TIMED},
    [LOP_EGRESS_REFUSED] = {"egress_refused", ENV | LOP_ASYNC | LOP_TIMED},
    [LOP_GIVE] = {"give", LOP_TAKES_FD | LOP_ASYNC | LOP_TIMED},
    [LOP_KEYS] = {"keys", LOP_ASYNC | LOP_TIMED},
    [LOP_TENANT] = {"tenant", SB | LOP_ASYNC | LOP_TIMED},
    [LOP_EGRESS_RULES] = {"egress_rules", SB | LOP_ASYNC | LOP_TIMED},
    [LOP_EXEC] = {"exec", SB | LOP_TAKES_STDIO | LOP_ASYNC},
    [LOP_EXEC_SIGNAL] = {"exec_signal", SB | LOP_ASYNC | LOP_TIMED},
    [LOP_EXEC_PID] = {"exec_pid", SB | LOP_ASYNC | LOP_TIMED},
    /* Copies take as long as the workspace's data: not timed, like pause. */
    [LOP_SNAPSHOT_SAVE] = {"snapshot_save", SB | LOP_ASYNC},
    [LOP_SNAPSHOT_DELETE] = {"snapshot_delete", ENV | LOP_ASYNC},
    [LOP_WORKSPACE_RESTORE] = {"workspace_restore", ENV | LOP_TAKES_PATH | LOP_ASYNC},
    [LOP_SNAPSHOT_TRANSFER] = {"snapshot_transfer", ENV | LOP_ASYNC},
};
#undef ENV
#undef SB
#undef ID

int launcher_op_find(const char *name)
{
    for (int op = 0; name && op < LOP_COUNT; op++)
        if (strcmp(launcher_ops[op].name, name) == 0)
            return op;
    return -1;
}

/* --- the link ---------------------------------------------------------------- */

static struct {
    int fd; /* -1: no launcher, everything is done here */
    loop_t *loop;
    uint64_t seq;
    zlistx_t *waiting; /* async_t: requests whose answer has a callback */
    zlistx_t *early;   /* answers that came while a synchronous call waited */
    zlistx_t *resends; /* exec_sig_t: signals to send again (the loop's timers hold them) */
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
typedef void(reply_fn)(json_t *reply, void *arg);
typedef struct {
    uint64_t seq;
    launcher_op_t op;
    reply_fn *cb; /* NULL once cancelled */
    void *arg;
    bool owns_arg; /* arg is freed after the answer (or the cancelled request's end) */
    int timer;     /* -1: none */
} async_t;

static void async_free(async_t *a)
{
    if (a->owns_arg)
        free(a->arg);
    free(a);
}

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

/* A request for op with fields (stolen; NULL: none). */
static json_t *request(launcher_op_t op, json_t *fields)
{
    json_t *req = fields ? fields : json_object();
    json_object_set_new(req, "op", json_string(launcher_ops[op].name));
    return req;
}

/* Sends req (stolen), with nfds file descriptors (at most 3); returns its seq. */
static uint64_t link_send(json_t *req, const int *fds, int nfds)
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
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        assert(nfds <= 3);
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
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
        async_free(a);
        break;
    }
    /* No one waits for it: cancelled, or it came after its timeout. */
    json_decref(reply);
}

static json_t *timeout_reply(launcher_op_t op)
{
    /* alive: a pause under way did not end the sandbox; the launcher did. */
    if (link_.lost)
        return json_pack("{s:{s:i, s:s}, s:b}", "error", "kind", SG_E_UNAVAILABLE, "message",
                         LOST_MSG, "alive", 1);
    return json_pack("{s:{s:i, s:s++}}", "error", "kind", SG_E_TIMEOUT, "message",
                     "the privileged launcher did not answer '", launcher_ops[op].name,
                     "' in time; it may be stopped or overloaded");
}

/* A request's time is up, or (lost) the launcher will never answer it. */
static void on_request_timeout(loop_t *loop, int timer_id, void *arg)
{
    async_t *a = arg;
    if (!link_.lost)
        log_error("sandbox: the launcher did not answer '%s' (request %llu) within %d ms",
                  launcher_ops[a->op].name, (unsigned long long)a->seq, link_.timeout_ms);
    for (async_t *w = zlistx_first(link_.waiting); w; w = zlistx_next(link_.waiting))
        if (w == a) {
            zlistx_delete(link_.waiting, zlistx_cursor(link_.waiting));
            break;
        }
    json_t *reply = timeout_reply(a->op);
    if (a->cb)
        a->cb(reply, a->arg);
    json_decref(reply);
    async_free(a);
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

/* A request answered before returning, for start-up and shutdown, when the
 * loop serves no one: the reply (NULL with *err when the launcher refused,
 * failed, or did not answer within the timeout — then the late answer is
 * dropped when it comes).  Other answers arriving meanwhile are dispatched
 * on the next loop pass.  op must be one launcher_ops marks LOP_STARTUP.
 * wait_ms: how long to wait, when longer than the link's timeout. */
static json_t *link_startup_wait(launcher_op_t op, json_t *fields, int wait_ms, sg_error_t **err)
{
    assert(launcher_ops[op].flags & LOP_STARTUP);
    uint64_t seq = link_send(request(op, fields), NULL, 0);
    if (wait_ms < link_.timeout_ms)
        wait_ms = link_.timeout_ms;
    int64_t deadline = zclock_mono() + wait_ms;
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
            json_t *late = timeout_reply(op);
            sg_error_set(
                err, SG_E_TIMEOUT, "%s",
                json_string_value(json_object_get(json_object_get(late, "error"), "message")));
            json_decref(late);
            log_error("sandbox: the launcher did not answer '%s' (request %llu) within %d ms",
                      launcher_ops[op].name, (unsigned long long)seq, wait_ms);
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

/* Flags of link_async. */
enum {
    ASYNC_OWNS_ARG = 1, /* arg is the link's to free (after cb, or when cancelled) */
};

/* A request for op (fields stolen; with nfds fds) whose answer goes to cb
 * (or nowhere), from the loop; returns its seq, the request to cancel.
 * When launcher_ops marks op LOP_TIMED, cb gets a timeout error if no
 * answer comes within the link's timeout. */
static uint64_t link_async_fds(launcher_op_t op, json_t *fields, const int *fds, int nfds,
                               reply_fn *cb, void *arg, unsigned flags)
{
    assert(launcher_ops[op].flags & LOP_ASYNC);
    uint64_t seq = link_send(request(op, fields), fds, nfds);
    if (!cb) {
        if (flags & ASYNC_OWNS_ARG)
            free(arg);
        return seq;
    }
    async_t *a = xzalloc(sizeof *a);
    *a = (async_t){.seq = seq,
                   .op = op,
                   .cb = cb,
                   .arg = arg,
                   .owns_arg = flags & ASYNC_OWNS_ARG,
                   .timer = -1};
    if ((launcher_ops[op].flags & LOP_TIMED) || link_.lost)
        a->timer =
            loop_timer(link_.loop, link_.lost ? 0 : link_.timeout_ms, 1, on_request_timeout, a);
    zlistx_add_end(link_.waiting, a);
    return seq;
}

/* link_async_fds with one fd when fd >= 0, else none. */
static uint64_t link_async(launcher_op_t op, json_t *fields, int fd, reply_fn *cb, void *arg,
                           unsigned flags)
{
    return link_async_fds(op, fields, &fd, fd >= 0 ? 1 : 0, cb, arg, flags);
}

/* No callback for seq: its arg, when the link owns it, goes with its end. */
static void link_cancel(uint64_t seq)
{
    for (async_t *a = zlistx_first(link_.waiting); a; a = zlistx_next(link_.waiting))
        if (a->seq == seq)
            a->cb = NULL;
}

bool sandbox_has_launcher(void)
{
    return link_.loop != NULL;
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
    link_.resends = zlistx_new();
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

/* A start-up request whose answer says only "done". */
static int link_startup_do(launcher_op_t op, json_t *fields, sg_error_t **err)
{
    json_t *ok = link_startup_wait(op, fields, 0, err);
    json_decref(ok);
    return ok ? 0 : -1;
}

/* The launcher prepares the state directory when it starts; "env" asks
 * whether that worked.  That includes unpacking templates' images the
 * first time (template.c): with any, the answer may take minutes. */
static int link_env_init(sandbox_env_t *env, sg_error_t **err)
{
    int wait_ms = 0;
    for (size_t i = 0; i < env->cfg.ntemplates; i++)
        if (env->cfg.templates[i].image)
            wait_ms = 30 * 60 * 1000;
    json_t *ok = link_startup_wait(LOP_ENV, NULL, wait_ms, err);
    json_decref(ok);
    return ok ? 0 : -1;
}

/* Re-adopted sessions' workspaces and the volumes, at start-up (bytes: a
 * volume's size; 0 for a workspace). */
static int link_workspace_open_startup(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                       sg_error_t **err)
{
    return link_startup_do(LOP_WORKSPACE_OPEN,
                           json_pack("{s:s, s:I}", "path", path, "bytes", (json_int_t)bytes), err);
}

/* A caller's callback and its argument (the link owns the pair). */
typedef struct {
    void (*fn)(void);
    void *arg;
} callback_t;

static callback_t *callback(void (*fn)(void), void *arg)
{
    callback_t *c = xzalloc(sizeof *c);
    *c = (callback_t){fn, arg};
    return c;
}

static void workspace_opened(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    ((sandbox_opened_fn *)c->fn)(err, c->arg);
}

static uint64_t link_workspace_open_async(const sandbox_env_t *env, const char *path,
                                          uint64_t bytes, sandbox_opened_fn *cb, void *arg)
{
    return link_async(LOP_WORKSPACE_OPEN,
                      json_pack("{s:s, s:I}", "path", path, "bytes", (json_int_t)bytes), -1,
                      workspace_opened, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void workspace_closed(json_t *reply, void *arg)
{
    cleanup_error sg_error_t *err = reply_error(reply);
    if (err)
        log_warn("sandbox: closing workspace %s: %s", (char *)arg, err->msg);
}

/* Answered in the background; nothing waits for it. */
static void link_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
    link_async(LOP_WORKSPACE_CLOSE, json_pack("{s:s, s:b}", "path", path, "remove", remove), -1,
               workspace_closed, xstrdup(path), ASYNC_OWNS_ARG);
}

/* The launcher prepares it when it starts (link_start). */
static int link_prepare(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    sb->kernelspec = xstrdup(spec->name);
    return 0;
}

static int link_adopt_startup(sandbox_t *sb, pid_t pid, sg_error_t **err)
{
    json_t *r = link_startup_wait(LOP_ADOPT, json_pack("{s:s, s:i}", "id", sb->id, "pid", (int)pid),
                                  0, err);
    int rc = !r || conn_from(&sb->conn, r, err) < 0 ? -1 : 0;
    /* Where its bundle put it: the daemon cannot read the bundle. */
    const char *cgroup = json_string_value(json_object_get(r, "cgroup"));
    if (rc == 0 && cgroup && strncmp(cgroup, "/sandgate/", 10) == 0)
        sb->cgroup = xstrdup(cgroup);
    json_decref(r);
    return rc;
}

static void link_release(sandbox_t *sb)
{
    link_cancel(sb->start_seq);
    link_async(LOP_FREE, json_pack("{s:s}", "id", sb->id), -1, NULL, NULL, 0);
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
        link_async(LOP_START, json_pack("{s:s}", "id", sb->id), -1, start_answered, sb, 0);
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
    sb->start_seq = link_async(
        LOP_NEW,
        json_pack("{s:s, s:s, s:s, s:b, s:s?, s:I, s:I, s:s?, s:s?, s:s?, s:s?, s:s?, s:O?}", "id",
                  sb->id, "kernelspec", sb->kernelspec, "workspace", sb->workspace, "internet",
                  sb->internet, "tenant", sb->tenant, "memory", (json_int_t)sb->memory_bytes,
                  "cpu_quota", (json_int_t)sb->cpu_quota_us, "snapshot", sb->snapshot, "template",
                  sb->template, "allow", sb->egress_allow, "deny", sb->egress_deny, "transforms",
                  sb->egress_transforms, "mounts", sb->mounts),
        -1, new_answered, sb, 0);
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
    if (!sb->leave_running) /* else it runs on */
        sb->pid = 0;
    sb->paused_cb(sb, (uint64_t)json_integer_value(json_object_get(reply, "bytes")), NULL,
                  sb->leave_running, sb->paused_arg);
}

/* Checkpoints take as long as the sandbox's memory takes to write: the
 * kernel bounds them, not the link's timeout (like start). */
static int link_pause(sandbox_t *sb, sg_error_t **err)
{
    sb->start_seq = link_async(
        LOP_PAUSE, json_pack("{s:s, s:b}", "id", sb->id, "leave_running", sb->leave_running), -1,
        pause_answered, sb, 0);
    return 0;
}

/* An answer nothing waits for: an error is logged, arg saying what failed
 * (a static string). */
static void logged(json_t *reply, void *arg)
{
    cleanup_error sg_error_t *err = reply_error(reply);
    if (err)
        log_warn("sandbox: %s: %s", (const char *)arg, err->msg);
}

static void link_reattach(sandbox_t *sb)
{
    link_async(LOP_REATTACH, json_pack("{s:s}", "id", sb->id), -1, logged, "reattaching", 0);
}

static int link_resume(sandbox_t *sb, sg_error_t **err)
{
    sb->start_seq =
        link_async(LOP_RESUME, json_pack("{s:s}", "id", sb->id), -1, start_answered, sb, 0);
    return 0;
}

static void saved_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    uint64_t bytes = (uint64_t)json_integer_value(json_object_get(reply, "bytes"));
    ((sandbox_saved_fn *)c->fn)(err ? 0 : bytes, err, c->arg);
}

static void link_snapshot_save(sandbox_t *sb, const char *sid, sandbox_saved_fn *cb, void *arg)
{
    link_async(LOP_SNAPSHOT_SAVE, json_pack("{s:s, s:s}", "id", sb->id, "snapshot", sid), -1,
               saved_answered, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void link_snapshot_transfer(sandbox_env_t *env, const char *sid, bool import,
                                   sandbox_saved_fn *cb, void *arg)
{
    link_async(LOP_SNAPSHOT_TRANSFER, json_pack("{s:s, s:b}", "snapshot", sid, "import", import),
               -1, saved_answered, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void link_snapshot_delete(sandbox_env_t *env, const char *sid)
{
    link_async(LOP_SNAPSHOT_DELETE, json_pack("{s:s}", "snapshot", sid), -1, logged,
               "deleting a snapshot", 0);
}

static uint64_t link_workspace_restore(const sandbox_env_t *env, const char *path, const char *sid,
                                       sandbox_opened_fn *cb, void *arg)
{
    return link_async(LOP_WORKSPACE_RESTORE, json_pack("{s:s, s:s}", "path", path, "snapshot", sid),
                      -1, workspace_opened, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

/* The launcher moves it; the cgroup's name here is for the OOM report. */
static void link_set_tenant(sandbox_t *sb, const char *tenant)
{
    free(sb->tenant);
    sb->tenant = xstrdup(tenant);
    free(sb->cgroup);
    sb->cgroup = sandbox_cgroup_name(sb->env, tenant, sb->id);
    link_async(LOP_TENANT, json_pack("{s:s, s:s}", "id", sb->id, "tenant", tenant), -1, logged,
               "moving a sandbox to its tenant's cgroup", 0);
}

static int link_signal(sandbox_t *sb, int sig, sg_error_t **err)
{
    link_async(LOP_SIGNAL, json_pack("{s:s, s:i}", "id", sb->id, "sig", sig), -1, NULL, NULL, 0);
    return 0;
}

static void link_stop(sandbox_t *sb)
{
    link_cancel(sb->start_seq); /* the launcher stops a start under way */
    sb->start_seq = 0;
}

/* With wait, at start-up and shutdown only; else in the background. */
static void link_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    json_t *fields = json_pack("{s:s, s:b}", "id", id, "wait", wait);
    if (wait)
        json_decref(link_startup_wait(LOP_REMOVE, fields, 0, NULL));
    else
        link_async(LOP_REMOVE, fields, -1, NULL, NULL, 0);
}

static json_t *link_list_startup(sandbox_env_t *env, sg_error_t **err)
{
    json_t *r = link_startup_wait(LOP_LIST, NULL, 0, err);
    json_t *ids = r ? json_incref(json_object_get(r, "ids")) : NULL;
    json_decref(r);
    if (r && !json_is_array(ids)) {
        json_decref(ids);
        ids = json_array();
    }
    return ids;
}

static void refused_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    json_t *counts = json_object_get(reply, "counts");
    if (!err && !json_is_object(counts))
        sg_error_set(&err, SG_E_INTERNAL, "the launcher sent no refusal counts");
    ((sandbox_refused_fn *)c->fn)(err ? NULL : counts, err, c->arg);
}

/* Answered on the loop; a silent launcher is a timeout error. */
static void link_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    link_async(LOP_EGRESS_REFUSED, NULL, -1, refused_answered, callback((void (*)(void))cb, arg),
               ASYNC_OWNS_ARG);
}

static void keys_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    const char *text = json_string_value(json_object_get(reply, "text"));
    if (!err && !text)
        sg_error_set(&err, SG_E_INTERNAL, "the launcher sent no keys file");
    ((sandbox_keys_fn *)c->fn)(
        err ? NULL : text, (unsigned)json_integer_value(json_object_get(reply, "mode")),
        (unsigned)json_integer_value(json_object_get(reply, "uid")), err, c->arg);
}

void sandbox_read_keys(sandbox_keys_fn *cb, void *arg)
{
    link_async(LOP_KEYS, NULL, -1, keys_answered, callback((void (*)(void))cb, arg),
               ASYNC_OWNS_ARG);
}

static void rules_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    ((sandbox_rules_fn *)c->fn)(err, c->arg);
}

static void link_set_egress(sandbox_t *sb, const char *allow, const char *deny,
                            const char *transforms, sandbox_rules_fn *cb, void *arg)
{
    link_async(LOP_EGRESS_RULES,
               json_pack("{s:s, s:s, s:s, s:s}", "id", sb->id, "allow", allow ?: "", "deny",
                         deny ?: "", "transforms", transforms ?: ""),
               -1, rules_answered, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void tail_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    ((sandbox_tail_fn *)c->fn)(json_string_value(json_object_get(reply, "text")) ?: "", c->arg);
}

/* A launcher that does not answer in time gives "" (its timeout is logged). */
static uint64_t link_log_tail(const sandbox_t *sb, size_t max, sandbox_tail_fn *cb, void *arg)
{
    return link_async(LOP_LOG, json_pack("{s:s, s:I}", "id", sb->id, "max", (json_int_t)max), -1,
                      tail_answered, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void given(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    if (err)
        log_warn("sandbox: giving a file to the sandbox user: %s", err->msg);
    ((sandbox_given_fn *)c->fn)(err, c->arg);
}

/* The launcher checks that fd is a regular file or directory of a workspace
 * owned by this process's uid.  The request carries fd (SCM_RIGHTS): the
 * caller may close its own at once. */
static uint64_t link_give(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg)
{
    json_t *body = as ? json_pack("{s:I, s:I, s:i, s:b}", "uid", (json_int_t)as->uid, "gid",
                                  (json_int_t)as->gid, "mode", as->mode, "volume", 1)
                      : NULL;
    return link_async(LOP_GIVE, body, fd, given, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

static void exec_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    json_t *status = json_object_get(reply, "status");
    if (!err && !json_is_integer(status))
        sg_error_set(&err, SG_E_INTERNAL, "the launcher sent no exit status");
    ((sandbox_exec_done_fn *)c->fn)(err ? -1 : (int)json_integer_value(status), err, c->arg);
}

static json_t *strings_json(const char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; v && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

/* Answered when the command ends: no timeout (its caller has one).  The
 * handle is the request's seq, which exec_signal names. */
static uint64_t link_exec(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                          sandbox_exec_done_fn *cb, void *arg, sg_error_t **err)
{
    json_t *fields = json_pack("{s:s, s:o, s:o}", "id", sb->id, "argv", strings_json(x->argv),
                               "env", strings_json(x->env));
    if (!fields) { /* a string that is not UTF-8 */
        sg_error_set(err, SG_E_INVALID, "a command's arguments and environment must be UTF-8");
        return 0;
    }
    if (x->cwd)
        json_object_set_new(fields, "cwd", json_string(x->cwd));
    return link_async_fds(LOP_EXEC, fields, fds, 3, exec_answered,
                          callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

/* A signal asked for before runsc exec wrote the command's pid inside
 * (its first ~50 ms) is refused with SG_E_CONFLICT: it is sent again until
 * it is delivered, the command has ended, or EXEC_SIGNAL_TRIES passed. */
#define EXEC_SIGNAL_RETRY_MS 50
#define EXEC_SIGNAL_TRIES 200

typedef struct {
    char *id;
    uint64_t exec;
    int sig, tries;
    void *resend; /* its handle in link_.resends while a timer holds it */
} exec_sig_t;

static void exec_signal_send(exec_sig_t *s);

static void exec_signal_again(loop_t *loop, int timer_id, void *arg)
{
    exec_sig_t *s = arg;
    zlistx_delete(link_.resends, s->resend);
    exec_signal_send(s);
}

static void exec_signalled(json_t *reply, void *arg)
{
    exec_sig_t *s = arg;
    cleanup_error sg_error_t *err = reply_error(reply);
    if (err && err->kind == SG_E_CONFLICT && ++s->tries < EXEC_SIGNAL_TRIES && !link_.lost) {
        loop_timer(link_.loop, EXEC_SIGNAL_RETRY_MS, 1, exec_signal_again, s);
        s->resend = zlistx_add_end(link_.resends, s);
        return;
    }
    if (err)
        log_warn("sandbox: signalling a command: %s", err->msg);
    free(s->id);
    free(s);
}

static void exec_signal_send(exec_sig_t *s)
{
    link_async(
        LOP_EXEC_SIGNAL,
        json_pack("{s:s, s:I, s:i}", "id", s->id, "exec", (json_int_t)s->exec, "sig", s->sig), -1,
        exec_signalled, s, 0);
}

static int link_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err)
{
    exec_sig_t *s = xzalloc(sizeof *s);
    *s = (exec_sig_t){.id = xstrdup(sb->id), .exec = exec, .sig = sig};
    exec_signal_send(s);
    return 0;
}

static void pid_answered(json_t *reply, void *arg)
{
    callback_t *c = arg;
    json_t *pid = json_object_get(reply, "pid");
    ((sandbox_pid_fn *)c->fn)(json_is_integer(pid) ? (long)json_integer_value(pid) : -1, c->arg);
}

static void link_exec_pid(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg)
{
    link_async(LOP_EXEC_PID, json_pack("{s:s, s:I}", "id", sb->id, "exec", (json_int_t)exec), -1,
               pid_answered, callback((void (*)(void))cb, arg), ASYNC_OWNS_ARG);
}

const sandbox_ops_t sandbox_link_ops = {
    .env_init = link_env_init,
    .workspace_open = link_workspace_open_startup,
    .workspace_open_async = link_workspace_open_async,
    .cancel = link_cancel,
    .workspace_close = link_workspace_close,
    .prepare = link_prepare,
    .adopt = link_adopt_startup,
    .release = link_release,
    .start = link_start,
    .pause = link_pause,
    .reattach = link_reattach,
    .resume = link_resume,
    .set_tenant = link_set_tenant,
    .signal = link_signal,
    .stop = link_stop,
    .remove_id = link_remove_id,
    .list = link_list_startup,
    .egress_refused = link_egress_refused,
    .log_tail = link_log_tail,
    .set_egress = link_set_egress,
    .give = link_give,
    .exec = link_exec,
    .exec_signal = link_exec_signal,
    .exec_pid = link_exec_pid,
    .snapshot_save = link_snapshot_save,
    .snapshot_delete = link_snapshot_delete,
    .snapshot_transfer = link_snapshot_transfer,
    .workspace_restore = link_workspace_restore,
};
