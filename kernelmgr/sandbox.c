#include "kernelmgr/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "kernelmgr/proc.h"

#define SANDBOX_IDS "64123:64123" /* SANDBOX_UID:SANDBOX_GID, for mkfs */

struct sandbox_env {
    sandbox_config_t cfg;
    bool remote; /* every privileged step goes through the launcher */
    char *state_dir, *etc_dir, *rootfs_dir, *runsc_root, *init;
    char *preload; /* sandgate-preload.so beside init; NULL: none */
    bool mask_debugpy;
};

struct sandbox {
    sandbox_env_t *env;
    char *id, *dir, *workspace;
    jconn_t conn;
    pid_t pid;
    pid_t pending;                  /* runsc run or state still running for us; 0: none */
    char **plain_argv, **plain_env; /* mode none only */
    char *kernelspec;               /* remote: what "new" prepares */
    sandbox_started_fn *started_cb;
    void *started_arg;
    uint64_t start_seq; /* remote: the launcher's answer to "start" is awaited */
};

/* --- through the launcher (privilege separation) -------------------------------
 * With a launcher (launcher.h), this process holds no privilege: each public
 * function below that needs one sends the launcher a request instead. */

static struct {
    int fd; /* -1: no launcher, everything is done here */
    loop_t *loop;
    uint64_t seq;
    zlistx_t *waiting; /* async_t: requests whose answer has a callback */
    zlistx_t *early;   /* answers that came while a synchronous call waited */
    int early_timer;
    loop_io_t *io;
    int timeout_ms; /* how long a request waits for its answer */
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

static void link_down(void)
{
    /* Nothing privileged can be done any more; the sandboxes keep running
     * and the next sandgate adopts them. */
    log_error("sandbox: the privileged launcher is gone; exiting");
    exit(70);
}

/* Sends req (stolen), with a file descriptor when fd >= 0; returns its seq. */
static uint64_t link_send(json_t *req, int fd)
{
    uint64_t seq = ++link_.seq;
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

static json_t *link_recv(bool wait)
{
    static char buf[256 * 1024 + 1];
    ssize_t n = recv(link_.fd, buf, sizeof buf - 1, wait ? 0 : MSG_DONTWAIT);
    if (n < 0 && !wait && (errno == EAGAIN || errno == EINTR))
        return NULL;
    if (n <= 0) {
        if (n < 0 && errno == EINTR)
            return link_recv(wait);
        link_down();
    }
    return json_loadb(buf, (size_t)n, 0, NULL);
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
    return json_pack("{s:{s:i, s:s+}}", "error", "kind", SG_E_TIMEOUT, "message",
                     "the privileged launcher did not answer '", op,
                     "' in time; it may be stopped or overloaded");
}

static void on_request_timeout(loop_t *loop, int timer_id, void *arg)
{
    async_t *a = arg;
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
        if (timed)
            a->timer = loop_timer(link_.loop, link_.timeout_ms, 1, on_request_timeout, a);
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

void sandbox_set_launcher(loop_t *loop, int fd, int timeout_ms)
{
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

int sandbox_give(int fd)
{
    if (link_.fd < 0)
        return fchown(fd, SANDBOX_UID, SANDBOX_GID);
    sg_error_t *err = NULL;
    json_t *r = link_call_fd(json_pack("{s:s}", "op", "give"), fd, &err);
    json_decref(r);
    if (err)
        log_warn("sandbox: giving a file to the sandbox user: %s", err->msg);
    sg_error_free(&err);
    return r ? 0 : -1;
}

static int conn_from(jconn_t *conn, json_t *reply, sg_error_t **err)
{
    char *text = json_dumps(json_object_get(reply, "conn"), JSON_COMPACT);
    int rc = text ? jconn_parse(conn, text, strlen(text), err)
                  : sg_error_set(err, SG_E_INTERNAL, "the launcher sent no connection");
    free(text);
    return rc;
}

void sandbox_config_defaults(sandbox_config_t *cfg)
{
    *cfg = (sandbox_config_t){
        .mode = SANDBOX_RUNSC,
        .runsc = "/usr/bin/runsc",
        .platform = "ptrace",
        .rootfs = NULL,
        .memory_bytes = 1024ull << 20,
        .cpu_quota_us = 100000, /* one CPU */
        .pids = 4096,           /* host tasks: a backstop; nproc is the real limit */
        .nproc = 64,
        .nofile = 1024,
        .init = getenv("SANDGATE_INIT"),
        .workspace_bytes = 1024ull << 20,
        .tmp_bytes = 256ull << 20,
    };
}

/* mkdir -p, then chmod (mkdir obeys umask). */
static int make_dir(const char *path, mode_t mode, sg_error_t **err)
{
    cleanup_free char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return sg_error_errno(err, errno, "mkdir %s", p);
        *s = '/';
    }
    if (mkdir(p, mode) < 0 && errno != EEXIST)
        return sg_error_errno(err, errno, "mkdir %s", p);
    if (chmod(p, mode) < 0)
        return sg_error_errno(err, errno, "chmod %s", p);
    return 0;
}

static int write_file(const char *path, const char *text, sg_error_t **err)
{
    FILE *f = fopen(path, "we");
    if (f == NULL)
        return sg_error_errno(err, errno, "cannot create %s", path);
    fputs(text, f);
    if (fclose(f) != 0)
        return sg_error_errno(err, errno, "cannot write %s", path);
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void remove_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* The /etc every sandbox sees: generated identity files plus the few host
 * files Python, fontconfig and matplotlib read.  Built once, in place, so
 * that sandboxes that outlived a previous sandgate keep a valid /etc. */
static int build_etc(const char *dir, sg_error_t **err)
{
    cleanup_free char *done = xasprintf("%s/.complete", dir);
    if (access(done, F_OK) == 0)
        return 0;
    if (make_dir(dir, 0755, err) < 0)
        return -1;
    static const struct {
        const char *name, *text;
    } files[] = {
        {"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                   "user:x:64123:64123:user:/home/user:/bin/sh\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
        {"group", "root:x:0:\nuser:x:64123:\nnogroup:x:65534:\n"},
        {"hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                  "127.0.1.1\tsandbox\n"},
        {"hostname", "sandbox\n"},
        {"resolv.conf", ""},
        {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                          "networks: files\nprotocols: files\nservices: files\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        cleanup_free char *p = xasprintf("%s/%s", dir, files[i].name);
        if (write_file(p, files[i].text, err) < 0)
            return -1;
    }
    /* Host files the runtime reads, each optional: the loader cache, Debian's
     * Python config (sitecustomize.py links into it), fonts, alternatives
     * (numpy finds libblas through them), MIME types, public certificates.
     * Symlinks are kept: they point into /usr, which the sandbox has. */
    static const char *copies[] = {"/etc/ld.so.cache", "/etc/localtime", "/etc/python3",
                                   "/etc/python3.11",  "/etc/fonts",     "/etc/alternatives",
                                   "/etc/mime.types",  "/etc/ssl"};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        if (access(copies[i], F_OK) != 0)
            continue;
        const char *argv[] = {"/bin/cp", "-a", copies[i], dir, NULL};
        cleanup_free char *out = NULL;
        if (proc_run_sync(argv, &out, NULL) != 0)
            log_warn("sandbox: could not copy %s into the sandbox /etc: %s", copies[i],
                     out ? out : "");
    }
    cleanup_free char *private_keys = xasprintf("%s/ssl/private", dir);
    remove_tree(private_keys);
    if (access("/etc/matplotlibrc", R_OK) == 0) {
        /* Debian's says TkAgg; there is no display in a sandbox. */
        cleanup_free char *p = xasprintf("%s/matplotlibrc", dir);
        if (write_file(p, "backend: Agg\n", err) < 0)
            return -1;
    }
    const char *chmod_argv[] = {"/bin/chmod", "-R", "a+rX,go-w", dir, NULL};
    proc_run_sync(chmod_argv, NULL, NULL);
    return write_file(done, "", err);
}

static int build_rootfs(const char *dir, sg_error_t **err)
{
    static const char *dirs[] = {"usr", "etc", "proc", "dev", "sys", "tmp", "home/user", "conn"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        cleanup_free char *p = xasprintf("%s/%s", dir, dirs[i]);
        if (make_dir(p, 0755, err) < 0)
            return -1;
    }
    cleanup_free char *init = xasprintf("%s/sandgate-init", dir);
    int fd = open(init, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
    if (fd < 0)
        return sg_error_errno(err, errno, "cannot create %s", init);
    close(fd);
    static const char *links[] = {"bin", "lib", "lib64", "sbin", "lib32", "libx32"};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        cleanup_free char *host = xasprintf("/usr/%s", links[i]);
        cleanup_free char *p = xasprintf("%s/%s", dir, links[i]);
        cleanup_free char *target = xasprintf("usr/%s", links[i]);
        if (access(host, F_OK) == 0 && symlink(target, p) < 0 && errno != EEXIST)
            return sg_error_errno(err, errno, "symlink %s", p);
    }
    return 0;
}

/* sandgate-init beside the running binary (a build tree), else installed. */
static char *default_init(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n > 0) {
        path[n] = 0;
        char *slash = strrchr(path, '/');
        if (slash) {
            strcpy(slash + 1, "sandgate-init");
            if (access(path, X_OK) == 0)
                return path;
        }
    }
    return (char *)SG_INIT_PATH;
}

sandbox_env_t *sandbox_env_new(const sandbox_config_t *cfg, const char *state_dir, sg_error_t **err)
{
    sandbox_env_t *self = xzalloc(sizeof *self);
    self->cfg = *cfg;
    self->state_dir = xstrdup(state_dir);
    if (link_.fd >= 0 && cfg->mode == SANDBOX_RUNSC) { /* the launcher prepared it */
        self->remote = true;
        json_t *ok = link_call(json_pack("{s:s}", "op", "env"), err);
        if (!ok)
            sandbox_env_destroy(&self);
        json_decref(ok);
        return self;
    }
    self->etc_dir = xasprintf("%s/sandbox/etc", state_dir);
    self->rootfs_dir =
        cfg->rootfs ? xstrdup(cfg->rootfs) : xasprintf("%s/sandbox/rootfs", state_dir);
    self->runsc_root = xasprintf("%s/runsc", state_dir);
    cleanup_free char *kernels = xasprintf("%s/kernels", state_dir);
    if (make_dir(state_dir, 0711, err) < 0 || make_dir(kernels, 0711, err) < 0 ||
        make_dir(self->runsc_root, 0700, err) < 0)
        goto fail;
    if (cfg->mode == SANDBOX_RUNSC) {
        if (access(cfg->runsc, X_OK) != 0) {
            sg_error_set(err, SG_E_UNAVAILABLE,
                         "runsc not found at %s (install it with 'apt-get install runsc', or "
                         "use --sandbox=none for development)",
                         cfg->runsc);
            goto fail;
        }
        if (build_etc(self->etc_dir, err) < 0 ||
            (!cfg->rootfs && build_rootfs(self->rootfs_dir, err) < 0))
            goto fail;
        self->mask_debugpy = access("/usr/lib/python3/dist-packages/debugpy", F_OK) == 0;
        self->init = xstrdup(cfg->init ? cfg->init : default_init());
        if (access(self->init, X_OK) != 0) {
            sg_error_set(err, SG_E_UNAVAILABLE,
                         "sandbox init %s is missing (run make install, "
                         "or set SANDGATE_INIT)",
                         self->init);
            goto fail;
        }
        /* The host's glibc runs in the sandbox unless --rootfs says otherwise. */
        char *dir = xstrdup(self->init);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        self->preload = xasprintf("%s/sandgate-preload.so", slash ? dir : ".");
        free(dir);
        if (cfg->rootfs || access(self->preload, R_OK) != 0) {
            if (!cfg->rootfs)
                log_warn("sandbox: %s is missing; 'ls -l' and 'stat' will fail in sandboxes",
                         self->preload);
            free(self->preload);
            self->preload = NULL;
        }
    }
    return self;
fail:
    sg_error_prefix(err, "preparing sandboxes in %s", state_dir);
    sandbox_env_destroy(&self);
    return NULL;
}

void sandbox_env_destroy(sandbox_env_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    sandbox_env_t *self = *self_p;
    free(self->state_dir);
    free(self->etc_dir);
    free(self->rootfs_dir);
    free(self->runsc_root);
    free(self->init);
    free(self->preload);
    free(self);
    *self_p = NULL;
}

const sandbox_config_t *sandbox_env_config(const sandbox_env_t *env)
{
    return &env->cfg;
}

bool sandbox_env_remote(const sandbox_env_t *env)
{
    return env->remote;
}

const char *sandbox_env_state_dir(const sandbox_env_t *env)
{
    return env->state_dir;
}

/* --- workspaces ------------------------------------------------------------ */

static bool is_mountpoint(const char *path)
{
    struct stat a, b;
    cleanup_free char *parent = xasprintf("%s/..", path);
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

int sandbox_workspace_open(const sandbox_env_t *env, const char *path, sg_error_t **err)
{
    if (env->remote) {
        json_t *ok = link_call(json_pack("{s:s, s:s}", "op", "workspace_open", "path", path), err);
        json_decref(ok);
        return ok ? 0 : -1;
    }
    if (make_dir(path, 0755, err) < 0)
        return -1;
    if (env->cfg.workspace_bytes > 0 && !is_mountpoint(path)) {
        /* A sparse ext4 image per workspace: the size limit is the filesystem's. */
        cleanup_free char *img = xasprintf("%s.img", path);
        if (access(img, F_OK) != 0) {
            int fd = open(img, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd < 0)
                return sg_error_errno(err, errno, "cannot create %s", img);
            int r = ftruncate(fd, (off_t)env->cfg.workspace_bytes);
            close(fd);
            if (r < 0)
                return sg_error_errno(err, errno, "cannot size %s", img);
            const char *mkfs[] = {
                "/sbin/mkfs.ext4",         "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
                "root_owner=" SANDBOX_IDS, img,  NULL};
            cleanup_free char *out = NULL;
            if (proc_run_sync(mkfs, &out, err) != 0) {
                unlink(img);
                return sg_error_set(err, SG_E_IO, "mkfs.ext4 %s failed: %s", img, out ? out : "");
            }
        }
        const char *mnt[] = {"/bin/mount", "-o", "loop,nosuid,nodev", img, path, NULL};
        cleanup_free char *out = NULL;
        if (proc_run_sync(mnt, &out, err) != 0)
            return sg_error_set(err, SG_E_IO, "cannot mount workspace %s: %s", path,
                                out ? out : "");
        cleanup_free char *lost = xasprintf("%s/lost+found", path);
        rmdir(lost);
    }
    /* Owned by the sandbox user; the sandbox group (sandgate's unprivileged
     * half) may read and write, and what it creates stays in the group. */
    if (chown(path, SANDBOX_UID, SANDBOX_GID) < 0 || chmod(path, 02770) < 0)
        return sg_error_errno(err, errno, "chown/chmod %s", path);
    /* Where executions leave artifacts (gateway/files.h).  *at() calls, as
     * sandboxed code may have put a symlink there in an existing workspace. */
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (mkdirat(dfd, "output", 02770) == 0) {
            (void)fchownat(dfd, "output", SANDBOX_UID, SANDBOX_GID, AT_SYMLINK_NOFOLLOW);
            (void)fchmodat(dfd, "output", 02770, 0);
        }
        close(dfd);
    }
    return 0;
}

typedef struct {
    sandbox_opened_fn *cb;
    void *arg;
} opening_t;

static sg_error_t *reply_error(json_t *reply);

static void workspace_opened(json_t *reply, void *arg)
{
    opening_t *o = arg;
    sg_error_t *err = reply_error(reply);
    if (o->cb)
        o->cb(err, o->arg);
    sg_error_free(&err);
    free(o);
}

uint64_t sandbox_workspace_open_async(const sandbox_env_t *env, const char *path,
                                      sandbox_opened_fn *cb, void *arg)
{
    if (!env->remote) {
        sg_error_t *err = NULL;
        sandbox_workspace_open(env, path, &err);
        cb(err, arg);
        sg_error_free(&err);
        return 0;
    }
    opening_t *o = xzalloc(sizeof *o);
    *o = (opening_t){cb, arg};
    return link_async(json_pack("{s:s, s:s}", "op", "workspace_open", "path", path), true,
                      workspace_opened, o);
}

void sandbox_cancel(uint64_t request)
{
    if (request == 0)
        return;
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

void sandbox_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
    if (env->remote) { /* answered in the background; nothing waits for it */
        link_async(
            json_pack("{s:s, s:s, s:b}", "op", "workspace_close", "path", path, "remove", remove),
            true, workspace_closed, xstrdup(path));
        return;
    }
    if (is_mountpoint(path) && umount2(path, MNT_DETACH) < 0)
        log_warn("sandbox: cannot unmount %s: %s", path, strerror(errno));
    if (remove) {
        remove_tree(path);
        cleanup_free char *img = xasprintf("%s.img", path);
        unlink(img);
    }
}

/* --- one sandbox ------------------------------------------------------------- */

static json_t *oci_mount(const char *dest, const char *type, const char *source, json_t *options)
{
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type, "source", source,
                     "options", options);
}

static json_t *oci_config(const sandbox_t *sb, const kspec_t *spec)
{
    const sandbox_config_t *cfg = &sb->env->cfg;
    char **argv = kspec_argv(spec, "/conn/kernel.json");
    json_t *args = json_pack("[s]", "/sandgate-init");
    for (char **a = argv; *a; a++)
        json_array_append_new(args, json_string(*a));
    kspec_argv_free(argv);

    json_t *env = json_pack(
        "[s, s, s, s, s, s, s, s]", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user",
        "USER=user", "LANG=C.UTF-8", "MPLCONFIGDIR=/tmp/matplotlib", "IPYTHONDIR=/tmp/ipython",
        "JUPYTER_RUNTIME_DIR=/tmp/jupyter-runtime", "PYDEVD_DISABLE_FILE_VALIDATION=1");
    if (sb->env->preload)
        json_array_append_new(env, json_string("SANDGATE_PRELOAD=/sandgate-preload.so"));
    const char *k;
    json_t *v;
    json_object_foreach (spec->env, k, v)
        if (json_is_string(v))
            json_array_append_new(env, json_sprintf("%s=%s", k, json_string_value(v)));

    char tmpopt[64], memopt[64];
    snprintf(tmpopt, sizeof tmpopt, "size=%llu", (unsigned long long)cfg->tmp_bytes);
    snprintf(memopt, sizeof memopt, "size=%llu", (unsigned long long)(64ull << 20));
    json_t *mounts = json_array();
    json_array_append_new(mounts, oci_mount("/proc", "proc", "proc", json_array()));
    json_array_append_new(mounts,
                          oci_mount("/dev", "tmpfs", "tmpfs",
                                    json_pack("[s, s, s]", "nosuid", "mode=755", "size=65536k")));
    json_array_append_new(mounts, oci_mount("/dev/shm", "tmpfs", "shm",
                                            json_pack("[s, s, s, s, s]", "nosuid", "nodev",
                                                      "noexec", "mode=1777", memopt)));
    json_array_append_new(
        mounts, oci_mount("/tmp", "tmpfs", "tmpfs",
                          json_pack("[s, s, s, s]", "nosuid", "nodev", "mode=1777", tmpopt)));
    if (!cfg->rootfs) {
        json_array_append_new(
            mounts, oci_mount("/usr", "bind", "/usr",
                              json_pack("[s, s, s, s]", "rbind", "ro", "nosuid", "nodev")));
        json_array_append_new(
            mounts, oci_mount("/etc", "bind", sb->env->etc_dir,
                              json_pack("[s, s, s, s]", "rbind", "ro", "nosuid", "nodev")));
        if (sb->env->mask_debugpy) /* the debugger costs 1.4 s of every start */
            json_array_append_new(
                mounts, oci_mount("/usr/lib/python3/dist-packages/debugpy", "tmpfs", "tmpfs",
                                  json_pack("[s, s, s]", "ro", "size=4k", "mode=555")));
    }
    json_array_append_new(mounts, oci_mount("/sandgate-init", "bind", sb->env->init,
                                            json_pack("[s, s, s]", "bind", "ro", "nodev")));
    if (sb->env->preload)
        json_array_append_new(mounts, oci_mount("/sandgate-preload.so", "bind", sb->env->preload,
                                                json_pack("[s, s, s]", "bind", "ro", "nodev")));
    json_array_append_new(mounts,
                          oci_mount("/home/user", "bind", sb->workspace,
                                    json_pack("[s, s, s, s]", "rbind", "rw", "nosuid", "nodev")));
    cleanup_free char *conndir = xasprintf("%s/conn", sb->dir);
    json_array_append_new(mounts, oci_mount("/conn", "bind", conndir,
                                            json_pack("[s, s, s, s, s]", "rbind", "rw", "nosuid",
                                                      "nodev", "noexec")));

    json_t *caps = json_pack("{s:[], s:[], s:[], s:[], s:[]}", "bounding", "effective",
                             "inheritable", "permitted", "ambient");
    json_t *process = json_pack(
        "{s:b, s:{s:i, s:i}, s:o, s:o, s:s, s:o, s:[{s:s, s:I, s:I}, {s:s, s:I, s:I}, {s:s, s:I, "
        "s:I}], s:b}",
        "terminal", 0, "user", "uid", SANDBOX_UID, "gid", SANDBOX_GID, "args", args, "env", env,
        "cwd", "/home/user", "capabilities", caps, "rlimits", "type", "RLIMIT_NOFILE", "hard",
        (json_int_t)cfg->nofile, "soft", (json_int_t)cfg->nofile, "type", "RLIMIT_NPROC", "hard",
        (json_int_t)cfg->nproc, "soft", (json_int_t)cfg->nproc, "type", "RLIMIT_CORE", "hard",
        (json_int_t)0, "soft", (json_int_t)0, "noNewPrivileges", 1);
    cleanup_free char *cgroup = xasprintf("/sandgate/%s", sb->id);
    json_t *linux_ = json_pack(
        "{s:s, s:{s:{s:I}, s:{s:I, s:I}, s:{s:I}}, s:[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}],"
        " s:[s, s, s, s], s:[s, s]}",
        "cgroupsPath", cgroup, "resources", "memory", "limit", (json_int_t)cfg->memory_bytes, "cpu",
        "quota", (json_int_t)cfg->cpu_quota_us, "period", (json_int_t)100000, "pids", "limit",
        (json_int_t)cfg->pids, "namespaces", "type", "pid", "type", "ipc", "type", "uts", "type",
        "mount", "type", "network", "maskedPaths", "/proc/kcore", "/proc/keys", "/proc/timer_list",
        "/sys/firmware", "readonlyPaths", "/proc/sys", "/proc/sysrq-trigger");
    return json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o}", "ociVersion", "1.0.2", "process",
                     process, "root", "path", sb->env->rootfs_dir, "readonly", 1, "hostname",
                     "sandbox", "mounts", mounts, "linux", linux_);
}

/* Mode none: our environment plus the kernelspec's, with private IPython and
 * matplotlib directories. */
static char **plain_env(const kspec_t *spec, const char *dir)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = xzalloc((n + json_object_size(spec->env) + 3) * sizeof(char *));
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        env[m++] = xstrdup(environ[i]);
    const char *k;
    json_t *v;
    json_object_foreach (spec->env, k, v)
        if (json_is_string(v))
            env[m++] = xasprintf("%s=%s", k, json_string_value(v));
    env[m++] = xasprintf("IPYTHONDIR=%s/ipython", dir);
    env[m++] = xasprintf("MPLCONFIGDIR=%s/matplotlib", dir);
    return env;
}

static int write_bundle(const sandbox_t *sb, const kspec_t *spec, const char *bundle,
                        sg_error_t **err)
{
    json_t *config = oci_config(sb, spec);
    cleanup_free char *path = xasprintf("%s/config.json", bundle);
    int r = json_dump_file(config, path, JSON_INDENT(2));
    json_decref(config);
    return r < 0 ? sg_error_set(err, SG_E_IO, "cannot write %s", path) : 0;
}

static sandbox_t *alloc(sandbox_env_t *env, const char *id)
{
    sandbox_t *self = xzalloc(sizeof *self);
    self->env = env;
    self->id = xstrdup(id);
    self->dir = xasprintf("%s/kernels/%s", env->state_dir, id);
    return self;
}

sandbox_t *sandbox_new(sandbox_env_t *env, const char *id, const kspec_t *spec,
                       const char *workspace, sg_error_t **err)
{
    sandbox_t *self = alloc(env, id);
    self->workspace = xstrdup(workspace);
    if (env->remote) { /* the launcher prepares it when it starts (sandbox_start) */
        self->kernelspec = xstrdup(spec->name);
        return self;
    }
    cleanup_free char *conndir = xasprintf("%s/conn", self->dir);
    cleanup_free char *bundle = xasprintf("%s/bundle", self->dir);
    cleanup_free char *prefix = xasprintf("%s/kernel", conndir);
    cleanup_free char *connfile = xasprintf("%s/kernel.json", conndir);
    cleanup_free char *record = xasprintf("%s/connection.json", self->dir);
    /* The daemon's unprivileged half reaches the sockets in conn/ through the
     * sandbox group; everything else here is root's. */
    if (make_dir(self->dir, 0711, err) < 0 || make_dir(conndir, 0750, err) < 0 ||
        jconn_init(&self->conn, "ipc", prefix, err) < 0)
        goto fail;
    strncpy(self->conn.kernel_name, spec->name, sizeof self->conn.kernel_name - 1);
    if (strlen(prefix) + 3 > 107) { /* "-N" suffix and NUL: sun_path holds 108 bytes */
        sg_error_set(err, SG_E_INVALID,
                     "socket path %s-N is too long for a Unix socket; use a "
                     "shorter --state-dir",
                     prefix);
        goto fail;
    }
    /* sandgate's own copy, outside what the kernel can write: adoption reads
     * this one, never the file in conn/ (the kernel rewrites that one, and
     * code in the sandbox can too). */
    if (jconn_write(&self->conn, record, err) < 0)
        goto fail;

    if (env->cfg.mode == SANDBOX_NONE) {
        if (jconn_write(&self->conn, connfile, err) < 0)
            goto fail;
        self->plain_argv = kspec_argv(spec, connfile);
        self->plain_env = plain_env(spec, self->dir);
        return self;
    }
    /* The kernel runs as the sandbox user and rewrites its connection file. */
    if (chown(conndir, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", conndir);
        goto fail;
    }
    jconn_t inside = self->conn;
    strcpy(inside.ip, "/conn/kernel");
    if (jconn_write(&inside, connfile, err) < 0)
        goto fail;
    if (chown(connfile, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", connfile);
        goto fail;
    }
    if (make_dir(bundle, 0700, err) < 0 || write_bundle(self, spec, bundle, err) < 0)
        goto fail;
    return self;
fail:
    sg_error_prefix(err, "preparing sandbox %s", id);
    remove_tree(self->dir);
    sandbox_free(&self);
    return NULL;
}

sandbox_t *sandbox_adopt(sandbox_env_t *env, const char *id, pid_t pid, sg_error_t **err)
{
    sandbox_t *self = alloc(env, id);
    if (env->remote) {
        json_t *r =
            link_call(json_pack("{s:s, s:s, s:i}", "op", "adopt", "id", id, "pid", (int)pid), err);
        if (!r || conn_from(&self->conn, r, err) < 0) {
            json_decref(r);
            sandbox_free(&self);
            return NULL;
        }
        json_decref(r);
        self->pid = pid;
        return self;
    }
    /* sandgate's copy: the one in conn/ is the sandbox's to change. */
    cleanup_free char *record = xasprintf("%s/connection.json", self->dir);
    if (jconn_read(&self->conn, record, err) < 0) {
        sandbox_free(&self);
        return NULL;
    }
    if (strcmp(self->conn.transport, "ipc") != 0) {
        sg_error_set(err, SG_E_INVALID, "%s: not an ipc connection", record);
        sandbox_free(&self);
        return NULL;
    }
    snprintf(self->conn.ip, sizeof self->conn.ip, "%s/conn/kernel", self->dir);
    self->pid = pid;
    return self;
}

void sandbox_free(sandbox_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    sandbox_t *self = *self_p;
    if (self->pending > 0)
        proc_unwatch(self->pending); /* no callback into freed memory */
    if (self->env->remote) {
        link_cancel(self->start_seq);
        link_async(json_pack("{s:s, s:s}", "op", "free", "id", self->id), false, NULL, NULL);
    }
    free(self->id);
    free(self->dir);
    free(self->workspace);
    free(self->kernelspec);
    kspec_argv_free(self->plain_argv);
    kspec_argv_free(self->plain_env);
    free(self);
    *self_p = NULL;
}

const char *sandbox_id(const sandbox_t *self)
{
    return self->id;
}

const char *sandbox_dir(const sandbox_t *self)
{
    return self->dir;
}

const jconn_t *sandbox_conn(const sandbox_t *self)
{
    return &self->conn;
}

pid_t sandbox_pid(const sandbox_t *self)
{
    return self->pid;
}

char *sandbox_log_tail(const sandbox_t *self, size_t max)
{
    if (self->env->remote) {
        json_t *r = link_call(
            json_pack("{s:s, s:s, s:I}", "op", "log", "id", self->id, "max", (json_int_t)max),
            NULL);
        char *tail = xstrdup(json_string_value(json_object_get(r, "text")) ?: "");
        json_decref(r);
        return tail;
    }
    cleanup_free char *path = xasprintf("%s/kernel.log", self->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return xstrdup("");
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)max ? size - (off_t)max : 0;
    char *buf = xmalloc(max + 1);
    ssize_t n = pread(fd, buf, max, from);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* runsc's global flags, then the command's. */
static const char **runsc_argv(const sandbox_env_t *env, const char *const *cmd)
{
    static const char *argv[32];
    size_t n = 0;
    argv[n++] = env->cfg.runsc;
    argv[n++] = "--root";
    argv[n++] = env->runsc_root;
    for (; *cmd && n < 31; cmd++)
        argv[n++] = *cmd;
    argv[n] = NULL;
    return argv;
}

static sg_error_t *start_error(sandbox_t *sb, const char *what, const char *output)
{
    sg_error_t *err = NULL;
    cleanup_free char *tail = sandbox_log_tail(sb, 2000);
    sg_error_set(&err, SG_E_UNAVAILABLE, "sandbox %s: %s: %s%s%s", sb->id, what, output,
                 *tail ? "\nkernel log:\n" : "", tail);
    return err;
}

static void state_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pending = 0;
    json_t *state = json_loads(output, JSON_DISABLE_EOF_CHECK, NULL);
    json_int_t pid = json_integer_value(json_object_get(state, "pid"));
    const char *st = json_string_value(json_object_get(state, "status"));
    if (status == 0 && pid > 0 && st && strcmp(st, "running") == 0) {
        sb->pid = (pid_t)pid;
        sb->started_cb(sb, sb->pid, NULL, sb->started_arg);
    } else {
        sb->started_cb(sb, -1, start_error(sb, "not running after start", output), sb->started_arg);
    }
    json_decref(state);
}

static void run_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pending = 0;
    if (status != 0) {
        char why[64];
        cleanup_free char *what =
            xasprintf("runsc run %s", proc_status_str(status, why, sizeof why));
        sb->started_cb(sb, -1, start_error(sb, what, output), sb->started_arg);
        return;
    }
    const char *cmd[] = {"state", sb->id, NULL};
    sg_error_t *err = NULL;
    sb->pending = proc_exec_async(runsc_argv(sb->env, cmd), state_done, sb, &err);
    if (sb->pending < 0) {
        sb->pending = 0;
        sb->started_cb(sb, -1, err, sb->started_arg);
    }
}

static void run_exited(pid_t pid, int status, void *arg)
{
    run_done(status, "", arg);
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

static void remote_started(json_t *reply, void *arg);

/* The launcher prepared the bundle: start it. */
static void remote_created(json_t *reply, void *arg)
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
        link_async(json_pack("{s:s, s:s}", "op", "start", "id", sb->id), false, remote_started, sb);
}

static void remote_started(json_t *reply, void *arg)
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

int sandbox_start(sandbox_t *self, sandbox_started_fn *cb, void *arg, sg_error_t **err)
{
    self->started_cb = cb;
    self->started_arg = arg;
    if (self->env->remote) {
        self->start_seq =
            link_async(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", self->id, "kernelspec",
                                 self->kernelspec, "workspace", self->workspace),
                       true, remote_created, self);
        return 0;
    }
    cleanup_free char *log = xasprintf("%s/kernel.log", self->dir);
    if (self->env->cfg.mode == SANDBOX_NONE) {
        proc_spec_t spec = {.argv = (const char *const *)self->plain_argv,
                            .env = (const char *const *)self->plain_env,
                            .cwd = self->workspace,
                            .output = log,
                            .new_session = true};
        pid_t pid = proc_spawn(&spec, err);
        if (pid < 0)
            return -1;
        self->pid = pid;
        cb(self, pid, NULL, arg);
        return 0;
    }
    cleanup_free char *bundle = xasprintf("%s/bundle", self->dir);
    const char *cmd[] = {"--platform",
                         self->env->cfg.platform,
                         "--network=none",
                         "--host-uds=create",
                         "run",
                         "-detach",
                         "-bundle",
                         bundle,
                         self->id,
                         NULL};
    /* runsc's stdout/stderr become the kernel's: both go to kernel.log. */
    proc_spec_t spec = {.argv = runsc_argv(self->env, cmd), .output = log, .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0)
        return -1;
    if (proc_watch(pid, run_exited, self, err) < 0)
        return -1;
    self->pending = pid;
    return 0;
}

static void ignore_done(int status, const char *output, void *arg)
{
    if (status != 0)
        log_debug("sandbox: %s: %s", (const char *)arg, output);
}

int sandbox_signal(sandbox_t *self, int sig, sg_error_t **err)
{
    if (self->env->remote) {
        link_async(json_pack("{s:s, s:s, s:i}", "op", "signal", "id", self->id, "sig", sig), false,
                   NULL, NULL);
        return 0;
    }
    if (self->env->cfg.mode == SANDBOX_NONE) {
        if (self->pid > 0 && kill(self->pid, sig) < 0)
            return sg_error_errno(err, errno, "kill %d", (int)self->pid);
        return 0;
    }
    char signame[16];
    snprintf(signame, sizeof signame, "%d", sig);
    const char *cmd[] = {"kill", self->id, signame, NULL};
    return proc_exec_async(runsc_argv(self->env, cmd), ignore_done, (void *)"runsc kill", err) < 0
               ? -1
               : 0;
}

typedef struct {
    char *dir;
} removal_t;

static void delete_done(int status, const char *output, void *arg)
{
    removal_t *r = arg;
    if (status != 0)
        log_warn("sandbox: runsc delete failed: %s", output);
    remove_tree(r->dir);
    free(r->dir);
    free(r);
}

void sandbox_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    if (env->remote) {
        json_t *req = json_pack("{s:s, s:s, s:b}", "op", "remove", "id", id, "wait", wait);
        if (wait)
            json_decref(link_call(req, NULL));
        else
            link_async(req, false, NULL, NULL);
        return;
    }
    cleanup_free char *dir = xasprintf("%s/kernels/%s", env->state_dir, id);
    const char *cmd[] = {"delete", "-force", id, NULL};
    if (env->cfg.mode == SANDBOX_NONE) {
        remove_tree(dir);
        return;
    }
    if (wait) {
        cleanup_free char *out = NULL;
        sg_error_t *err = NULL;
        int st = proc_run_sync(runsc_argv(env, cmd), &out, &err);
        if (st != 0 && !strstr(out ? out : "", "does not exist"))
            log_warn("sandbox: runsc delete %s: %s", id, err ? err->msg : out);
        sg_error_free(&err);
        remove_tree(dir);
        return;
    }
    removal_t *r = xzalloc(sizeof *r);
    r->dir = xstrdup(dir);
    sg_error_t *err = NULL;
    if (proc_exec_async(runsc_argv(env, cmd), delete_done, r, &err) < 0) {
        log_warn("sandbox: cannot remove %s: %s", id, err->msg);
        sg_error_free(&err);
        free(r->dir);
        free(r);
    }
}

void sandbox_remove(sandbox_t *self, bool wait)
{
    if (self->env->remote) {
        link_cancel(self->start_seq); /* the launcher stops a start under way */
        self->start_seq = 0;
        sandbox_remove_id(self->env, self->id, wait);
        return;
    }
    if (self->pending > 0) {
        /* Still starting: stop runsc run first, or it creates the container
         * after the delete below has found none. */
        proc_unwatch(self->pending);
        kill(-self->pending, SIGKILL);
        self->pending = 0;
    }
    if (self->env->cfg.mode == SANDBOX_NONE && self->pid > 0) {
        kill(-self->pid, SIGKILL); /* its own session and process group */
        kill(self->pid, SIGKILL);
    }
    sandbox_remove_id(self->env, self->id, wait);
}

json_t *sandbox_list(sandbox_env_t *env, sg_error_t **err)
{
    if (env->remote) {
        json_t *r = link_call(json_pack("{s:s}", "op", "list"), err);
        json_t *ids = r ? json_incref(json_object_get(r, "ids")) : NULL;
        json_decref(r);
        if (r && !json_is_array(ids)) {
            json_decref(ids);
            ids = json_array();
        }
        return ids;
    }
    json_t *ids = json_array();
    if (env->cfg.mode == SANDBOX_NONE)
        return ids;
    const char *cmd[] = {"list", "-quiet", NULL};
    cleanup_free char *out = NULL;
    if (proc_run_sync(runsc_argv(env, cmd), &out, err) != 0) {
        sg_error_set(err, SG_E_UNAVAILABLE, "runsc list failed: %s", out ? out : "");
        json_decref(ids);
        return NULL;
    }
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (*line)
            json_array_append_new(ids, json_string(line));
    return ids;
}
