#include "kernelmgr/launcher.h"

#include <ctype.h>
#include <czmq.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/xalloc.h"
#include "kernelmgr/kspec.h"
#include "kernelmgr/proc.h"

#define PACKET_MAX (256 * 1024) /* one request or reply */

typedef struct {
    const launcher_config_t *cfg;
    loop_t *loop;
    int fd;
    sandbox_env_t *env;
    sg_error_t *env_err; /* why the state directory could not be prepared */
    kspecs_t *kspecs;
    zhashx_t *sandboxes; /* id -> sandbox_t */
    char *workspaces;    /* STATE/workspaces */
} launcher_t;

bool launcher_valid_uuid(const char *s)
{
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        if (shape[i] == '-' ? s[i] != '-' : !isxdigit((unsigned char)s[i]) || isupper(s[i]))
            return false;
    }
    return s[sizeof shape - 1] == 0;
}

bool launcher_valid_sandbox_id(const char *s)
{
    if (strlen(s) < 38 || s[36] != '-' || strlen(s) > 36 + 1 + 6)
        return false;
    char uuid[37];
    memcpy(uuid, s, 36);
    uuid[36] = 0;
    for (const char *p = s + 37; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return launcher_valid_uuid(uuid);
}

/* --- replies -------------------------------------------------------------------------- */

static void send_reply(launcher_t *L, json_t *reply)
{
    char *text = json_dumps(reply, JSON_COMPACT);
    json_decref(reply);
    if (!text)
        log_warn("launcher: cannot answer: unencodable");
    else if (send(L->fd, text, strlen(text), MSG_NOSIGNAL) < 0 && errno != EPIPE &&
             errno != ECONNRESET)
        log_warn("launcher: cannot answer: %s", strerror(errno));
    /* EPIPE, ECONNRESET: the daemon closed the link.  A stopping daemon sends its last
     * requests (forget a sandbox, remove the pool's) without waiting for the
     * answers, and closes the link; they are carried out all the same, and
     * the hang-up, read after them, ends this loop. */
    free(text);
}

static void reply_ok(launcher_t *L, json_int_t seq, json_t *fields)
{
    json_t *r = fields ? fields : json_object();
    json_object_set_new(r, "seq", json_integer(seq));
    send_reply(L, r);
}

static void reply_err(launcher_t *L, json_int_t seq, const sg_error_t *err)
{
    char *msg = xstrdup(err->msg);
    utf8_scrub(msg);
    send_reply(L, json_pack("{s:I, s:{s:i, s:s}}", "seq", seq, "error", "kind", (int)err->kind,
                            "message", msg));
    free(msg);
}

/* Answers *err and frees it. */
static void fail(launcher_t *L, json_int_t seq, sg_error_t **err)
{
    reply_err(L, seq, *err);
    sg_error_free(err);
}

static void refuse(launcher_t *L, json_int_t seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(launcher_t *L, json_int_t seq, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sg_error_t e = {.kind = SG_E_INVALID, .msg = xvasprintf(fmt, ap)};
    va_end(ap);
    log_warn("launcher: refused a request: %s", e.msg);
    reply_err(L, seq, &e);
    free(e.msg);
}

static json_t *conn_json(const jconn_t *c)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s}", "transport",
                     c->transport, "ip", c->ip, "shell_port", c->ports[JCHAN_SHELL], "iopub_port",
                     c->ports[JCHAN_IOPUB], "stdin_port", c->ports[JCHAN_STDIN], "control_port",
                     c->ports[JCHAN_CONTROL], "hb_port", c->ports[JCHAN_HB], "key", c->key,
                     "signature_scheme", c->signature_scheme, "kernel_name", c->kernel_name);
}

/* --- requests --------------------------------------------------------------------------- */

/* A workspace path: exactly STATE/workspaces/<uuid>.  *uuid points at it. */
static bool valid_workspace(launcher_t *L, const char *path, const char **uuid)
{
    size_t n = strlen(L->workspaces);
    if (!path || strncmp(path, L->workspaces, n) != 0 || path[n] != '/' ||
        !launcher_valid_uuid(path + n + 1))
        return false;
    *uuid = path + n + 1;
    return true;
}

typedef struct {
    launcher_t *L;
    json_int_t seq;
} start_t;

static void on_started(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg)
{
    start_t *st = arg;
    if (pid > 0)
        reply_ok(st->L, st->seq, json_pack("{s:i}", "pid", (int)pid));
    else
        reply_err(st->L, st->seq, err);
    sg_error_free(&err);
    free(st);
}

static void on_paused(sandbox_t *sb, uint64_t bytes, sg_error_t *err, bool alive, void *arg)
{
    start_t *st = arg;
    if (err) {
        char *msg = xstrdup(err->msg);
        utf8_scrub(msg);
        send_reply(st->L, json_pack("{s:I, s:{s:i, s:s}, s:b}", "seq", st->seq, "error", "kind",
                                    (int)err->kind, "message", msg, "alive", alive));
        free(msg);
    } else {
        reply_ok(st->L, st->seq, json_pack("{s:I}", "bytes", (json_int_t)bytes));
    }
    sg_error_free(&err);
    free(st);
}

static void on_refused(const json_t *counts, const sg_error_t *err, void *arg)
{
    start_t *st = arg;
    if (counts)
        reply_ok(st->L, st->seq, json_pack("{s:O}", "counts", counts));
    else
        reply_err(st->L, st->seq, err);
    free(st);
}

static void handle(launcher_t *L, json_t *req)
{
    json_int_t seq = json_integer_value(json_object_get(req, "seq"));
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *id = json_string_value(json_object_get(req, "id"));
    const char *path = json_string_value(json_object_get(req, "path"));
    sg_error_t *err = NULL;
    if (!op) {
        refuse(L, seq, "no op");
        return;
    }
    if (strcmp(op, "env") == 0) {
        if (L->env_err)
            reply_err(L, seq, L->env_err);
        else
            reply_ok(L, seq, NULL);
        return;
    }
    if (!L->env) {
        reply_err(L, seq, L->env_err);
        return;
    }
    if (strcmp(op, "list") == 0) {
        json_t *ids = sandbox_list(L->env, &err);
        if (!ids) {
            fail(L, seq, &err);
            return;
        }
        reply_ok(L, seq, json_pack("{s:o}", "ids", ids));
        return;
    }
    if (strcmp(op, "egress_refused") == 0) {
        start_t *st = xzalloc(sizeof *st);
        *st = (start_t){L, seq};
        sandbox_egress_refused(L->env, on_refused, st);
        return; /* answered by on_refused */
    }
    const char *uuid;
    if (strcmp(op, "workspace_open") == 0 || strcmp(op, "workspace_close") == 0) {
        if (!valid_workspace(L, path, &uuid)) {
            refuse(L, seq, "%s: not a workspace path", op);
            return;
        }
        if (op[10] == 'o') {
            if (sandbox_workspace_open(L->env, path, &err) < 0) {
                fail(L, seq, &err);
                return;
            }
        } else {
            sandbox_workspace_close(L->env, path, json_is_true(json_object_get(req, "remove")));
        }
        reply_ok(L, seq, NULL);
        return;
    }
    if (!id || !launcher_valid_sandbox_id(id)) {
        refuse(L, seq, "%s: not a sandbox id", op);
        return;
    }
    sandbox_t *sb = zhashx_lookup(L->sandboxes, id);
    if (strcmp(op, "new") == 0 || strcmp(op, "adopt") == 0) {
        if (sb) {
            refuse(L, seq, "%s: sandbox %s is already known", op, id);
            return;
        }
        if (op[0] == 'n') {
            const char *name = json_string_value(json_object_get(req, "kernelspec"));
            const kspec_t *spec = name ? kspecs_get(L->kspecs, name) : NULL;
            const char *ws = json_string_value(json_object_get(req, "workspace"));
            if (!spec) {
                refuse(L, seq, "new: no kernelspec '%.64s'", name ? name : "");
                return;
            }
            if (!valid_workspace(L, ws, &uuid) || strncmp(uuid, id, 36) != 0) {
                refuse(L, seq, "new: the workspace is not the sandbox's own");
                return;
            }
            sb = sandbox_new(L->env, id, spec, json_is_true(json_object_get(req, "internet")), ws,
                             &err);
        } else {
            json_int_t pid = json_integer_value(json_object_get(req, "pid"));
            if ((pid <= 1 && pid != 0) || pid > 1 << 22) { /* 0: paused */
                refuse(L, seq, "adopt: not a pid");
                return;
            }
            sb = sandbox_adopt(L->env, id, (pid_t)pid, &err);
        }
        if (!sb) {
            fail(L, seq, &err);
            return;
        }
        zhashx_insert(L->sandboxes, id, sb);
        reply_ok(L, seq, json_pack("{s:o}", "conn", conn_json(sandbox_conn(sb))));
        return;
    }
    if (strcmp(op, "remove") == 0) {
        bool wait = json_is_true(json_object_get(req, "wait"));
        if (sb) {
            sandbox_remove(sb, wait);
            zhashx_delete(L->sandboxes, id);
        } else {
            sandbox_remove_id(L->env, id, wait);
        }
        reply_ok(L, seq, NULL);
        return;
    }
    if (strcmp(op, "log") == 0) {
        json_int_t max = json_integer_value(json_object_get(req, "max"));
        if (max <= 0 || max > 65536) {
            refuse(L, seq, "log: max must be in (0, 65536]");
            return;
        }
        char *tail = sb ? sandbox_log_tail(sb, (size_t)max) : xstrdup("");
        utf8_scrub(tail);
        reply_ok(L, seq, json_pack("{s:s}", "text", tail));
        free(tail);
        return;
    }
    if (strcmp(op, "free") == 0) { /* also after remove, which forgot it already */
        zhashx_delete(L->sandboxes, id);
        reply_ok(L, seq, NULL);
        return;
    }
    if (!sb) {
        refuse(L, seq, "%s: no sandbox %s", op, id);
        return;
    }
    if (strcmp(op, "start") == 0) {
        start_t *st = xzalloc(sizeof *st);
        *st = (start_t){L, seq};
        if (sandbox_start(sb, on_started, st, &err) < 0) {
            free(st);
            fail(L, seq, &err);
            return;
        }
        return; /* answered by on_started */
    }
    if (strcmp(op, "pause") == 0 || strcmp(op, "resume") == 0) {
        start_t *st = xzalloc(sizeof *st);
        *st = (start_t){L, seq};
        int rc = op[0] == 'p' ? sandbox_pause(sb, on_paused, st, &err)
                              : sandbox_resume(sb, on_started, st, &err);
        if (rc < 0) {
            free(st);
            fail(L, seq, &err);
        }
        return; /* answered by on_paused or on_started */
    }
    if (strcmp(op, "signal") == 0) {
        json_int_t sig = json_integer_value(json_object_get(req, "sig"));
        if (sig != SIGINT && sig != SIGTERM && sig != SIGKILL) {
            refuse(L, seq, "signal: only INT, TERM and KILL");
            return;
        }
        if (sandbox_signal(sb, (int)sig, &err) < 0) {
            fail(L, seq, &err);
            return;
        }
        reply_ok(L, seq, NULL);
        return;
    }
    refuse(L, seq, "unknown op '%.32s'", op);
}

/* "give": a file or directory the daemon created in a workspace (the fd it
 * sent) becomes the sandbox user's.  Only its own files, only under the
 * workspaces: anything else is refused. */
static void give(launcher_t *L, json_int_t seq, int fd)
{
    struct stat st;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    size_t w = strlen(L->workspaces);
    if (fd < 0 || fstat(fd, &st) < 0 || n <= 0) {
        refuse(L, seq, "give: no file");
        return;
    }
    path[n] = 0;
    if (!(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || st.st_uid != L->cfg->uid ||
        strncmp(path, L->workspaces, w) != 0 || path[w] != '/') {
        refuse(L, seq, "give: not a file of the daemon's in a workspace");
        return;
    }
    if (fchown(fd, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_t *err = NULL;
        sg_error_errno(&err, errno, "give: fchown");
        fail(L, seq, &err);
        return;
    }
    reply_ok(L, seq, NULL);
}

static void on_request(loop_t *loop, int fd, unsigned events, void *arg)
{
    launcher_t *L = arg;
    static char buf[PACKET_MAX + 1];
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    ssize_t n = recvmsg(L->fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) { /* the daemon is gone: so are we (the sandboxes stay) */
        loop_stop(loop);
        return;
    }
    int fds[4], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < 4; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    json_t *req = n <= PACKET_MAX ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
    json_int_t seq = json_integer_value(json_object_get(req, "seq"));
    const char *op = json_string_value(json_object_get(req, "op"));
    if (n > PACKET_MAX)
        refuse(L, 0, "a request of %zd bytes", n);
    else if (!json_is_object(req))
        refuse(L, seq, "not a JSON object");
    else if (op && strcmp(op, "give") == 0)
        give(L, seq, nfds == 1 ? fds[0] : -1);
    else if (nfds > 0)
        refuse(L, seq, "%s: file descriptors are only taken by give", op ? op : "?");
    else
        handle(L, req);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    json_decref(req);
}

/* The state directory as the two halves share it: the daemon owns its
 * records; the workspaces' parent lets the sandbox group list it. */
static int prepare(launcher_t *L, sg_error_t **err)
{
    L->env = sandbox_env_new(&L->cfg->sandbox, L->cfg->state_dir, err);
    if (!L->env)
        return -1;
    static const struct {
        const char *name;
        mode_t mode;
        bool daemons;
    } dirs[] = {{"sessions", 0700, true},
                {"mcp", 0700, true},
                {"contexts", 0700, true},
                {"workspaces", 0750, false}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        cleanup_free char *p = xasprintf("%s/%s", L->cfg->state_dir, dirs[i].name);
        if ((mkdir(p, dirs[i].mode) < 0 && errno != EEXIST) ||
            chown(p, dirs[i].daemons ? L->cfg->uid : 0, L->cfg->gid) < 0 ||
            chmod(p, dirs[i].mode) < 0)
            return sg_error_errno(err, errno, "preparing %s", p);
        if (dirs[i].daemons) { /* records an earlier, unseparated sandgate wrote */
            const char *argv[] = {"/bin/chown", "-R", NULL, p, NULL};
            cleanup_free char *owner = xasprintf("%u:%u", L->cfg->uid, L->cfg->gid);
            argv[2] = owner;
            proc_run_sync(argv, NULL, NULL);
        }
    }
    return 0;
}

static void sandbox_free_fn(void **item)
{
    sandbox_free((sandbox_t **)item);
}

int launcher_serve(const launcher_config_t *cfg, int fd)
{
    launcher_t L = {.cfg = cfg, .fd = fd};
    L.loop = loop_new();
    L.sandboxes = zhashx_new();
    zhashx_set_destructor(L.sandboxes, sandbox_free_fn);
    L.workspaces = xasprintf("%s/workspaces", cfg->state_dir);
    sg_error_t *err = NULL;
    if (proc_init(L.loop, &err) < 0 || prepare(&L, &err) < 0) {
        log_error("launcher: %s", err->msg);
        L.env_err = err;
        err = NULL;
        sandbox_env_destroy(&L.env);
    }
    L.kspecs = kspecs_discover(cfg->kernelspec_path);
    /* A hang-up reaches on_request, which ends the loop: the daemon, not a
     * signal, ends us. */
    if (!loop_fd_add(L.loop, fd, LOOP_READ, on_request, &L, &err) || loop_run(L.loop, &err) < 0)
        log_error("launcher: %s", err->msg);
    sg_error_free(&err);
    zhashx_destroy(&L.sandboxes); /* handles only: the sandboxes keep running */
    kspecs_destroy(&L.kspecs);
    sandbox_env_destroy(&L.env);
    sg_error_free(&L.env_err);
    proc_fini();
    loop_destroy(&L.loop);
    free(L.workspaces);
    return 0;
}

int launcher_fork(const launcher_config_t *cfg, pid_t *pid, sg_error_t **err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return sg_error_errno(err, errno, "socketpair");
    int size = 4 * PACKET_MAX;
    for (int i = 0; i < 2; i++) {
        setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    pid_t child = fork();
    if (child < 0)
        return sg_error_errno(err, errno, "fork");
    if (child == 0) {
        close(sv[0]);
        /* Ctrl-C reaches the whole process group: the daemon decides. */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN); /* the daemon's (the audit log's rotation) */
        prctl(PR_SET_NAME, "sandgate-priv");
        zsys_init();
        zsys_handler_set(NULL);
        launcher_serve(cfg, sv[1]);
        _exit(0);
    }
    close(sv[1]);
    *pid = child;
    return sv[0];
}

int launcher_drop_privileges(const launcher_config_t *cfg, sg_error_t **err)
{
    gid_t groups[] = {cfg->gid};
    if (setgroups(1, groups) < 0 || setresgid(cfg->gid, cfg->gid, cfg->gid) < 0 ||
        setresuid(cfg->uid, cfg->uid, cfg->uid) < 0)
        return sg_error_errno(err, errno, "dropping privileges to %u:%u", cfg->uid, cfg->gid);
    if (setuid(0) == 0 || seteuid(0) == 0)
        return sg_error_set(err, SG_E_INTERNAL, "root could be regained after dropping it");
#if defined(__SANITIZE_ADDRESS__)
    /* Changing uid made us undumpable; LeakSanitizer's exit check ptraces us. */
    prctl(PR_SET_DUMPABLE, 1);
#endif
    umask(007); /* the sandbox group reads and writes what the API writes */
    return 0;
}
