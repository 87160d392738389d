/* exec: commands run in a running sandbox (sandbox.h's
 * sandbox_exec), and the runsc and none tables' way of running them here;
 * and kernels beside the first (sandbox_guest_*), asked of sandgate-init.
 *
 * With runsc a command is `runsc exec --user SANDBOX --cwd C --env ...
 * --internal-pid-file F ID /sandgate-init --group ARGV...`: gVisor starts
 * it beside the kernel, so every path it opens is resolved in the
 * sandbox's own file system.  sandgate-init --group gives it a process
 * group and forwards signals to all of it; runsc exec forwards none, so a
 * signal is `runsc kill --pid P ID SIG` to that init (P from F), and a kill
 * is SIGUSR2, which init turns into SIGKILL for the group.  Under ptrace a
 * `runsc exec` of /bin/true takes ~45 ms.  Through the launcher, the daemon
 * sends the three fds with the request (link.c) and the launcher
 * runs this file's runsc_exec.
 */
#include "kernelmgr/sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

#define EXEC_MAX_ARGS 1024
#define EXEC_MAX_BYTES (256 * 1024)

static bool env_name_ok(const char *e)
{
    const char *eq = strchr(e, '=');
    if (!eq || eq == e || (e[0] >= '0' && e[0] <= '9'))
        return false;
    for (const char *c = e; c < eq; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_'))
            return false;
    return true;
}

int sandbox_exec_check(const sandbox_exec_t *x, sg_error_t **err)
{
    size_t n = 0, bytes = 0;
    for (; x->argv && x->argv[n]; n++)
        bytes += strlen(x->argv[n]) + 1;
    if (n == 0 || n > EXEC_MAX_ARGS || !*x->argv[0])
        return sg_error_set(err, SG_E_INVALID,
                            "a command needs 1 to %d arguments, the first "
                            "not empty",
                            EXEC_MAX_ARGS);
    for (size_t i = 0; x->env && x->env[i]; i++) {
        if (!env_name_ok(x->env[i]))
            return sg_error_set(err, SG_E_INVALID,
                                "environment entry %zu is not NAME=VALUE with a name of letters, "
                                "digits and '_'",
                                i);
        bytes += strlen(x->env[i]) + 1;
    }
    if (x->cwd && x->cwd[0] != '/')
        return sg_error_set(err, SG_E_INVALID, "a command's cwd must be an absolute path");
    if (x->cwd)
        bytes += strlen(x->cwd);
    if (bytes > EXEC_MAX_BYTES)
        return sg_error_set(err, SG_E_INVALID, "a command and its environment over %d bytes",
                            EXEC_MAX_BYTES);
    return 0;
}

/* --- the public API: counting, and callbacks that outlive no sandbox ------------- */

typedef struct run {
    sandbox_t *sb; /* NULL once freed (sandbox_exec_forget) */
    sandbox_exec_done_fn *cb;
    void *arg;
    struct run *next;
} run_t;
static run_t *runs;

static void run_done(int status, const sg_error_t *err, void *arg)
{
    run_t *r = arg;
    for (run_t **p = &runs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    if (r->sb && r->sb->execs > 0)
        r->sb->execs--;
    r->cb(status, err, r->arg);
    free(r);
}

uint64_t sandbox_exec(sandbox_t *self, const sandbox_exec_t *x, const int fds[3],
                      sandbox_exec_done_fn *cb, void *arg, sg_error_t **err)
{
    if (sandbox_exec_check(x, err) < 0)
        return 0;
    if (self->pid <= 0) {
        sg_error_set(err, SG_E_CONFLICT, "the sandbox is not running");
        return 0;
    }
    run_t *r = xzalloc(sizeof *r);
    *r = (run_t){.sb = self, .cb = cb, .arg = arg};
    uint64_t h = self->env->ops->exec(self, x, fds, run_done, r, err);
    if (h == 0) {
        free(r);
        return 0;
    }
    r->next = runs;
    runs = r;
    self->execs++;
    return h;
}

int sandbox_exec_signal(sandbox_t *self, uint64_t exec, int sig, sg_error_t **err)
{
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGKILL)
        return sg_error_set(err, SG_E_INVALID, "a command takes INT, TERM, HUP or KILL");
    return self->env->ops->exec_signal(self, exec, sig, err);
}

void sandbox_exec_pid(sandbox_t *self, uint64_t exec, sandbox_pid_fn *cb, void *arg)
{
    self->env->ops->exec_pid(self, exec, cb, arg);
}

unsigned sandbox_exec_count(const sandbox_t *self)
{
    return self->execs;
}

void sandbox_exec_forget(sandbox_t *sb)
{
    for (run_t *r = runs; r; r = r->next)
        if (r->sb == sb)
            r->sb = NULL;
}

/* --- here: a process per command ---------------------------------------------------- */

/* A command this process runs: the handle is its pid (runsc exec's, or in
 * mode none init's). */
typedef struct local {
    pid_t pid;
    char *pidfile; /* runsc: where runsc exec writes init's pid inside */
    sandbox_exec_done_fn *cb;
    void *arg;
    bool killed; /* a KILL was sent (SIGUSR2 to init) */
    struct local *next;
} local_t;
static local_t *locals;

static local_t *local_find(pid_t pid)
{
    for (local_t *l = locals; l; l = l->next)
        if (l->pid == pid)
            return l;
    return NULL;
}

static void local_exited(pid_t pid, int status, void *arg)
{
    local_t *l = arg;
    for (local_t **p = &locals; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    if (l->pidfile)
        unlink(l->pidfile);
    /* init exits with the command's code, or 128 + the signal that ended it. */
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* A KILL that reached init before it took its signals (it was still
     * starting, nothing of the command ran) ended it by SIGUSR2 itself. */
    if (l->killed && code == 128 + SIGUSR2)
        code = 128 + SIGKILL;
    l->cb(code, NULL, l->arg);
    free(l->pidfile);
    free(l);
}

static uint64_t local_spawn(const char *const *argv, const char *const *env, const char *cwd,
                            const int fds[3], char *pidfile, sandbox_exec_done_fn *cb, void *arg,
                            sg_error_t **err)
{
    proc_spec_t spec = {.argv = argv, .env = env, .cwd = cwd, .stdio = fds, .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0) {
        free(pidfile);
        return 0;
    }
    local_t *l = xzalloc(sizeof *l);
    *l = (local_t){.pid = pid, .pidfile = pidfile, .cb = cb, .arg = arg, .next = locals};
    if (proc_watch(pid, local_exited, l, err) < 0) {
        kill(pid, SIGKILL);
        free(pidfile);
        free(l);
        return 0;
    }
    locals = l;
    return (uint64_t)pid;
}

uint64_t runsc_exec(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                    sandbox_exec_done_fn *cb, void *arg, sg_error_t **err)
{
    static unsigned counter;
    char *pidfile = xasprintf("%s/exec-%u.pid", sb->dir, ++counter);
    size_t nargs = 0, nenv = 0;
    while (x->argv[nargs])
        nargs++;
    while (x->env && x->env[nenv])
        nenv++;
    const char **cmd = xzalloc((nargs + 2 * nenv + 16) * sizeof *cmd);
    size_t n = 0;
    cmd[n++] = "exec";
    cmd[n++] = "--user";
    char user[32];
    snprintf(user, sizeof user, "%d:%d", SANDBOX_UID, SANDBOX_GID);
    cmd[n++] = user;
    cmd[n++] = "--cwd";
    cmd[n++] = x->cwd ? x->cwd : "/home/user";
    cmd[n++] = "--internal-pid-file";
    cmd[n++] = pidfile;
    for (size_t i = 0; i < nenv; i++) {
        cmd[n++] = "--env";
        cmd[n++] = x->env[i];
    }
    cmd[n++] = sb->id;
    cmd[n++] = "/sandgate-init";
    cmd[n++] = "--group";
    for (size_t i = 0; i < nargs; i++)
        cmd[n++] = x->argv[i];
    /* runsc_argv's array is bounded; this one is not. */
    const char **argv = xzalloc((n + 4) * sizeof *argv);
    argv[0] = sb->env->cfg.runsc;
    argv[1] = "--root";
    argv[2] = sb->env->runsc_root;
    memcpy(argv + 3, cmd, n * sizeof *cmd);
    uint64_t h = local_spawn(argv, NULL, NULL, fds, pidfile, cb, arg, err);
    free(cmd);
    free(argv);
    return h;
}

/* The pid inside the sandbox runsc exec wrote for l, or 0 before it has. */
static long inner_pid(const local_t *l)
{
    FILE *f = fopen(l->pidfile, "re");
    long inner = 0;
    if (f && (fscanf(f, "%ld", &inner) != 1 || inner <= 0))
        inner = 0;
    if (f)
        fclose(f);
    return inner;
}

void runsc_exec_pid(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg)
{
    (void)sb;
    local_t *l = local_find((pid_t)exec);
    cb(l ? inner_pid(l) : -1, arg);
}

void none_exec_pid(sandbox_t *sb, uint64_t exec, sandbox_pid_fn *cb, void *arg)
{
    (void)sb;
    cb(local_find((pid_t)exec) ? (long)exec : -1, arg);
}

int runsc_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err)
{
    local_t *l = local_find((pid_t)exec);
    if (!l)
        return 0; /* it has ended */
    long inner = inner_pid(l);
    if (inner == 0)
        return sg_error_set(err, SG_E_CONFLICT, "the command has not started yet");
    l->killed = l->killed || sig == SIGKILL;
    char pid[24], signame[8];
    snprintf(pid, sizeof pid, "%ld", inner);
    snprintf(signame, sizeof signame, "%d", sig == SIGKILL ? SIGUSR2 : sig);
    const char *cmd[] = {"kill", "--pid", pid, sb->id, signame, NULL};
    return proc_exec_async(runsc_argv(sb->env, cmd), runsc_ignore_done,
                           (void *)"runsc kill (a command)", err) < 0
               ? -1
               : 0;
}

/* Mode none: no sandbox, so the host's files; cwd /home/user... is the
 * workspace. */
uint64_t none_exec(sandbox_t *sb, const sandbox_exec_t *x, const int fds[3],
                   sandbox_exec_done_fn *cb, void *arg, sg_error_t **err)
{
    extern char **environ;
    size_t nargs = 0, nenv = 0, nown = 0;
    while (x->argv[nargs])
        nargs++;
    while (x->env && x->env[nenv])
        nenv++;
    while (environ[nown])
        nown++;
    const char **argv = xzalloc((nargs + 3) * sizeof *argv);
    argv[0] = sb->env->init;
    argv[1] = "--group";
    memcpy(argv + 2, x->argv, nargs * sizeof *argv);
    const char **env = xzalloc((nown + nenv + 1) * sizeof *env);
    if (nenv) /* first: the first of a name counts */
        memcpy(env, x->env, nenv * sizeof *env);
    memcpy(env + nenv, environ, nown * sizeof *env);
    const char *home = "/home/user";
    cleanup_free char *cwd = NULL;
    if (!x->cwd)
        cwd = xstrdup(sb->workspace);
    else if (strncmp(x->cwd, home, strlen(home)) == 0 &&
             (x->cwd[strlen(home)] == 0 || x->cwd[strlen(home)] == '/'))
        cwd = xasprintf("%s%s", sb->workspace, x->cwd + strlen(home));
    else
        cwd = xstrdup(x->cwd);
    uint64_t h = local_spawn(argv, env, cwd, fds, NULL, cb, arg, err);
    free(argv);
    free(env);
    return h;
}

int none_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err)
{
    local_t *l = local_find((pid_t)exec);
    if (l)
        l->killed = l->killed || sig == SIGKILL;
    if (l && kill((pid_t)exec, sig == SIGKILL ? SIGUSR2 : sig) < 0 && errno != ESRCH)
        return sg_error_errno(err, errno, "kill %d", (int)exec);
    return 0;
}

/* --- kernels beside the first (sandbox_guest_*) ------------------------------ */

struct sandbox_guest {
    sandbox_t *sb; /* borrowed: the guest ends before it */
    int n;
    jconn_t conn;
    pid_t pid;      /* mode none: the process; runsc: none here (init's child) */
    int fd;         /* runsc: the connection to init that reports its end; -1 */
    loop_io_t *io;  /* on fd */
    char line[128]; /* what init said, up to a newline */
    size_t len;
    sandbox_guest_fn *cb;
    void *arg;
};

/* The relay's prefix for connections, RELAY_INNER in runsc.c. */
#define GUEST_INNER "@sandgate-kernel"

static void guest_report(sandbox_guest_t *g, int status, const char *why)
{
    sandbox_guest_fn *cb = g->cb;
    g->cb = NULL;
    if (g->io)
        loop_io_remove(proc_loop(), &g->io);
    if (g->fd >= 0)
        close(g->fd);
    g->fd = -1;
    if (g->pid > 0)
        proc_unwatch(g->pid);
    g->pid = 0;
    if (cb)
        cb(g, status, why, g->arg);
}

static void on_guest_exit(pid_t pid, int status, void *arg)
{
    sandbox_guest_t *g = arg;
    g->pid = 0;
    guest_report(g, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), NULL);
}

/* init's lines: "ok PID", then "exit STATUS"; or "error WHY". */
static void on_guest_line(loop_t *loop, int fd, unsigned events, void *arg)
{
    sandbox_guest_t *g = arg;
    ssize_t n = recv(fd, g->line + g->len, sizeof g->line - 1 - g->len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        guest_report(g, -1, SANDBOX_GUEST_LOST);
        return;
    }
    g->len += (size_t)n;
    g->line[g->len] = 0;
    char *nl;
    while ((nl = strchr(g->line, '\n'))) {
        *nl = 0;
        int status;
        if (strncmp(g->line, "error ", 6) == 0) {
            guest_report(g, -1, g->line + 6);
            return;
        }
        if (sscanf(g->line, "exit %d", &status) == 1) {
            guest_report(g, status, NULL);
            return;
        }
        g->len -= (size_t)(nl + 1 - g->line);
        memmove(g->line, nl + 1, g->len + 1);
    }
    if (g->len == sizeof g->line - 1)
        guest_report(g, -1, "sandgate-init answered more than a line");
}

/* Connects to init's HOST-ctl and sends fields (NULL-terminated), each
 * with its NUL, then the empty one; the connection, or -1 with *err. */
static int guest_request(const sandbox_t *sb, const char *const *fields, sg_error_t **err)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(a.sun_path, sizeof a.sun_path, "%s-ctl", sb->conn.ip) >= sizeof a.sun_path)
        return sg_error_set(err, SG_E_INVALID, "socket path %s-ctl is too long", sb->conn.ip);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = 5};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sg_error_errno(err, e, "cannot reach sandbox %s's init at %s", sb->id, a.sun_path);
    }
    size_t len = 1;
    for (size_t i = 0; fields[i]; i++)
        len += strlen(fields[i]) + 1;
    cleanup_free char *req = xzalloc(len);
    char *p = req;
    for (size_t i = 0; fields[i]; i++)
        p = stpcpy(p, fields[i]) + 1;
    if (write(fd, req, len) != (ssize_t)len) {
        int e = errno;
        close(fd);
        return sg_error_errno(err, e, "cannot ask sandbox %s's init", sb->id);
    }
    return fd;
}

static int guest_start_runsc(sandbox_guest_t *g, const kspec_t *spec, const json_t *extra,
                             sg_error_t **err)
{
    const sandbox_env_t *env = g->sb->env;
    jconn_t inner = g->conn;
    snprintf(inner.ip, sizeof inner.ip, "%s", GUEST_INNER);
    if (spec->tcp_only) {
        strcpy(inner.transport, "tcp");
        strcpy(inner.ip, "127.0.0.1");
    }
    cleanup_free char *conn = jconn_json(&inner);
    char connfile[64], num[16];
    snprintf(connfile, sizeof connfile, "/tmp/.sandgate-kernel-%d.json", g->n);
    snprintf(num, sizeof num, "%d", g->n);
    /* The launcher's environment knows whether sandgate-kernel.py is
     * there; this process looks beside sandgate-init itself. */
    cleanup_free char *init = env->init ? NULL : host_init_path(&env->cfg);
    cleanup_free char *py =
        env->launcher_py ? NULL : host_launcher_py(env->init ? env->init : init);
    const char *launcher = env->launcher_py ? env->launcher_py : py;
    char **argv = host_kernel_argv(spec, connfile, launcher ? "/sandgate-kernel.py" : NULL);
    size_t nargs = 0;
    while (argv[nargs])
        nargs++;
    size_t nenv = json_object_size(spec->env) + json_object_size(extra);
    const char **fields = xzalloc((nargs + nenv + 8) * sizeof *fields);
    char **owned = xzalloc((nenv + 2) * sizeof *owned);
    size_t n = 0, o = 0;
    fields[n++] = "spawn";
    fields[n++] = num;
    fields[n++] = conn;
    /* What the first kernel's environment says of its own sockets is not
     * this one's. */
    fields[n++] = spec->tcp_only ? "SANDGATE_TCP_AS_IPC=" GUEST_INNER : "SANDGATE_TCP_AS_IPC=";
    const char *k;
    json_t *v;
    json_object_foreach (spec->env, k, v)
        if (json_is_string(v))
            fields[n++] = owned[o++] = xasprintf("%s=%s", k, json_string_value(v));
    json_object_foreach ((json_t *)extra, k, v)
        if (json_is_string(v))
            fields[n++] = owned[o++] = xasprintf("%s=%s", k, json_string_value(v));
    fields[n++] = "--";
    for (size_t i = 0; i < nargs; i++)
        fields[n++] = argv[i];
    g->fd = guest_request(g->sb, fields, err);
    for (size_t i = 0; i < o; i++)
        free(owned[i]);
    free(owned);
    free(fields);
    kspec_argv_free(argv);
    if (g->fd < 0)
        return -1;
    g->io = loop_fd_add(proc_loop(), g->fd, LOOP_READ, on_guest_line, g, err);
    return g->io ? 0 : -1;
}

/* Mode none: a plain process, as the first kernel is one. */
static int guest_start_none(sandbox_guest_t *g, const kspec_t *spec, const json_t *extra,
                            sg_error_t **err)
{
    sandbox_t *sb = g->sb;
    cleanup_free char *connfile = xasprintf("%s/conn/kernel-%d.json", sb->dir, g->n);
    cleanup_free char *log = xasprintf("%s/kernel-%d.log", sb->dir, g->n);
    jconn_t c = g->conn;
    if (spec->tcp_only) {
        if (sb->env->preload == NULL)
            return sg_error_set(err, SG_E_UNAVAILABLE,
                                "kernel '%s' speaks TCP only and needs sandgate-preload.so",
                                spec->name);
        strcpy(c.transport, "tcp");
        strcpy(c.ip, "127.0.0.1");
    }
    if (jconn_write(&c, connfile, err) < 0)
        return -1;
    extern char **environ;
    size_t nown = 0;
    while (environ[nown])
        nown++;
    char **envp =
        xzalloc((nown + json_object_size(spec->env) + json_object_size(extra) + 4) * sizeof *envp);
    size_t m = 0;
    const char *k;
    json_t *v;
    json_object_foreach ((json_t *)extra, k, v) /* first: the first of a name counts */
        if (json_is_string(v))
            envp[m++] = xasprintf("%s=%s", k, json_string_value(v));
    json_object_foreach (spec->env, k, v)
        if (json_is_string(v))
            envp[m++] = xasprintf("%s=%s", k, json_string_value(v));
    if (spec->tcp_only) {
        envp[m++] = xasprintf("SANDGATE_TCP_AS_IPC=%s", g->conn.ip);
        envp[m++] = xasprintf("LD_PRELOAD=%s", sb->env->preload);
    }
    for (size_t i = 0; i < nown; i++)
        envp[m++] = xstrdup(environ[i]);
    char **argv = host_kernel_argv(spec, connfile, sb->env->launcher_py);
    proc_spec_t ps = {.argv = (const char *const *)argv,
                      .env = (const char *const *)envp,
                      .cwd = sb->workspace,
                      .output = log,
                      .new_session = true};
    g->pid = proc_spawn(&ps, err);
    kspec_argv_free(argv);
    for (size_t i = 0; i < m; i++)
        free(envp[i]);
    free(envp);
    if (g->pid < 0) {
        g->pid = 0;
        return -1;
    }
    if (proc_watch(g->pid, on_guest_exit, g, err) < 0) {
        kill(-g->pid, SIGKILL);
        g->pid = 0;
        return -1;
    }
    return 0;
}

/* watch: kernel n runs already (a resumed sandbox's): only its end is
 * asked for. */
static sandbox_guest_t *guest_begin(sandbox_t *sb, int n, const kspec_t *spec, const json_t *env,
                                    bool watch, sandbox_guest_fn *cb, void *arg, sg_error_t **err)
{
    if (n < 2 || n > SANDBOX_GUESTS + 1) {
        sg_error_set(err, SG_E_INVALID, "a sandbox's kernels are numbered 2..%d",
                     SANDBOX_GUESTS + 1);
        return NULL;
    }
    if (sb->pid <= 0) {
        sg_error_set(err, SG_E_CONFLICT, "sandbox %s is not running", sb->id);
        return NULL;
    }
    sandbox_guest_t *g = xzalloc(sizeof *g);
    *g = (sandbox_guest_t){.sb = sb, .n = n, .conn = sb->conn, .fd = -1, .cb = cb, .arg = arg};
    for (int c = 0; c < JCHAN_COUNT; c++)
        g->conn.ports[c] = n * 10 + sb->conn.ports[c];
    strncpy(g->conn.kernel_name, spec->name, sizeof g->conn.kernel_name - 1);
    int r;
    if (watch && sb->env->cfg.mode == SANDBOX_NONE) {
        r = sg_error_set(err, SG_E_CONFLICT, "plain kernels are never paused");
    } else if (watch) {
        char num[16];
        snprintf(num, sizeof num, "%d", n);
        const char *fields[] = {"watch", num, NULL};
        g->fd = guest_request(sb, fields, err);
        g->io =
            g->fd < 0 ? NULL : loop_fd_add(proc_loop(), g->fd, LOOP_READ, on_guest_line, g, err);
        r = g->io ? 0 : -1;
    } else {
        r = sb->env->cfg.mode == SANDBOX_NONE ? guest_start_none(g, spec, env, err)
                                              : guest_start_runsc(g, spec, env, err);
    }
    if (r < 0) {
        g->cb = NULL;
        sandbox_guest_end(&g, false);
        sg_error_prefix(err, "%s kernel %d of sandbox %s", watch ? "reaching" : "starting", n,
                        sb->id);
        return NULL;
    }
    return g;
}

sandbox_guest_t *sandbox_guest_start(sandbox_t *sb, int n, const kspec_t *spec, const json_t *env,
                                     sandbox_guest_fn *cb, void *arg, sg_error_t **err)
{
    return guest_begin(sb, n, spec, env, false, cb, arg, err);
}

sandbox_guest_t *sandbox_guest_watch(sandbox_t *sb, int n, const kspec_t *spec,
                                     sandbox_guest_fn *cb, void *arg, sg_error_t **err)
{
    return guest_begin(sb, n, spec, NULL, true, cb, arg, err);
}

void sandbox_guests_kill(sandbox_t *sb, const int *keep, size_t nkeep)
{
    if (sb->env->cfg.mode == SANDBOX_NONE)
        return;
    for (int n = 2; n <= SANDBOX_GUESTS + 1; n++) {
        bool kept = false;
        for (size_t i = 0; i < nkeep; i++)
            kept |= keep[i] == n;
        char num[16], sig[8];
        snprintf(num, sizeof num, "%d", n);
        snprintf(sig, sizeof sig, "%d", SIGKILL);
        const char *fields[] = {"signal", num, sig, NULL};
        int fd = kept ? -1 : guest_request(sb, fields, NULL);
        if (fd >= 0)
            close(fd);
    }
}

const jconn_t *sandbox_guest_conn(const sandbox_guest_t *g)
{
    return &g->conn;
}

int sandbox_guest_signal(sandbox_guest_t *g, int sig, sg_error_t **err)
{
    if (g->sb->env->cfg.mode == SANDBOX_NONE) {
        if (g->pid > 0 && kill(-g->pid, sig) < 0 && errno != ESRCH)
            return sg_error_errno(err, errno, "kill %d", (int)g->pid);
        return 0;
    }
    char num[16], signo[16];
    snprintf(num, sizeof num, "%d", g->n);
    snprintf(signo, sizeof signo, "%d", sig);
    const char *fields[] = {"signal", num, signo, NULL};
    int fd = guest_request(g->sb, fields, err);
    if (fd < 0)
        return -1;
    close(fd); /* init answers "ok"; nothing waits for it */
    return 0;
}

int sandbox_port_open(sandbox_t *sb, int port, bool *ack, sg_error_t **err)
{
    if (port < 1 || port > 65535)
        return sg_error_set(err, SG_E_INVALID, "port %d is not 1..65535", port);
    *ack = sb->env->cfg.mode != SANDBOX_NONE;
    int fd;
    if (*ack) {
        char num[16];
        snprintf(num, sizeof num, "%d", port);
        const char *fields[] = {"connect", num, NULL};
        fd = guest_request(sb, fields, err);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return sg_error_errno(err, e, "nothing answers on port %d", port);
        }
    }
    if (fd >= 0 && *ack && fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
        close(fd);
        return sg_error_errno(err, errno, "cannot make sandbox %s's stream non-blocking", sb->id);
    }
    return fd;
}

void sandbox_guest_end(sandbox_guest_t **g_p, bool kill_it)
{
    sandbox_guest_t *g = *g_p;
    if (!g)
        return;
    *g_p = NULL;
    g->cb = NULL;
    if (kill_it) {
        if (g->pid > 0)
            kill(-g->pid, SIGKILL);
        else if (g->fd >= 0 || g->sb->env->cfg.mode != SANDBOX_NONE)
            sandbox_guest_signal(g, SIGKILL, NULL);
    }
    guest_report(g, -1, NULL);
    free(g);
}
