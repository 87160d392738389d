/* exec: commands run in a running sandbox (sandbox.h's
 * sandbox_exec), and the runsc and none tables' way of running them here.
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int runsc_exec_signal(sandbox_t *sb, uint64_t exec, int sig, sg_error_t **err)
{
    local_t *l = local_find((pid_t)exec);
    if (!l)
        return 0; /* it has ended */
    FILE *f = fopen(l->pidfile, "r");
    long inner = 0;
    if (!f || fscanf(f, "%ld", &inner) != 1 || inner <= 0) {
        if (f)
            fclose(f);
        return sg_error_set(err, SG_E_CONFLICT, "the command has not started yet");
    }
    fclose(f);
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
