/* sandbox_exec (kernelmgr/sandbox/exec.c): commands in a running sandbox,
 * their stdio, exit status, environment and cwd, signals to their whole
 * process group, and what is refused.  With runsc (SG_SANDBOX unset) the
 * command runs inside gVisor as the sandbox user, and what it writes to
 * /tmp is the sandbox's, not the host's; with SG_SANDBOX=none, a plain
 * process.  Needs root and runsc for the first. */
#include "tests/lib/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>

#include "kernelmgr/sandbox/sandbox.h"

typedef struct {
    bool done;
    int status;
} ran_t;

static void on_done(int status, const sg_error_t *err, void *arg)
{
    ran_t *r = arg;
    r->done = true;
    r->status = status;
    if (err)
        diag("exec failed: %s", err->msg);
}

static bool is_done(void *arg)
{
    return ((ran_t *)arg)->done;
}

static char *drain(int fd)
{
    char *buf = xzalloc(65537);
    size_t n = 0;
    ssize_t r;
    while (n < 65536 && (r = read(fd, buf + n, 65536 - n)) > 0)
        n += (size_t)r;
    close(fd);
    return buf;
}

typedef struct {
    int in, out, err; /* our ends */
    ran_t ran;
    uint64_t h;
} cmd_t;

/* Starts argv; c gets our ends of its pipes. */
static bool start(sandbox_t *sb, cmd_t *c, const char *const *argv, const char *const *env,
                  const char *cwd, sg_error_t **err)
{
    int in[2], out[2], er[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0)
        return false;
    int fds[3] = {in[0], out[1], er[1]};
    *c = (cmd_t){.in = in[1], .out = out[0], .err = er[0]};
    sandbox_exec_t x = {.argv = argv, .env = env, .cwd = cwd};
    c->h = sandbox_exec(sb, &x, fds, on_done, &c->ran, err);
    close(in[0]);
    close(out[1]);
    close(er[1]);
    if (c->h == 0) {
        close(c->in);
        close(c->out);
        close(c->err);
    }
    return c->h != 0;
}

/* Runs argv to its end with input; its status (-1000: not run), output in
 * *out and *errout (small: what fits a pipe). */
static int run(sandbox_t *sb, const char *const *argv, const char *const *env, const char *cwd,
               const char *input, char **out, char **errout)
{
    cmd_t c;
    cleanup_error sg_error_t *err = NULL;
    *out = *errout = NULL;
    if (!start(sb, &c, argv, env, cwd, &err)) {
        diag("not run: %s", err ? err->msg : "?");
        return -1000;
    }
    if (input && write(c.in, input, strlen(input)) < 0)
        diag("write: %s", strerror(errno));
    close(c.in);
    run_until(is_done, &c.ran, 30000);
    *out = drain(c.out);
    *errout = drain(c.err);
    return c.ran.done ? c.ran.status : -999;
}

static void started(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg)
{
    *(int *)arg = pid > 0 ? 1 : -1;
    if (err)
        diag("start: %s", err->msg);
    sg_error_free(&err);
}

static bool nonzero(void *arg)
{
    return *(int *)arg != 0;
}

/* Sends sig until it is delivered (the command's pid file may not exist
 * yet), then waits for the command's end. */
static int signal_and_wait(sandbox_t *sb, cmd_t *c, int sig)
{
    for (int i = 0; i < 100 && !c->ran.done; i++) {
        cleanup_error sg_error_t *err = NULL;
        if (sandbox_exec_signal(sb, c->h, sig, &err) == 0)
            break;
        spin(50);
    }
    run_until(is_done, &c->ran, 30000);
    close(c->in);
    close(c->out);
    close(c->err);
    return c->ran.done ? c->ran.status : -999;
}

int main(void)
{
    const char *mode = getenv("SG_SANDBOX") ? getenv("SG_SANDBOX") : "runsc";
    bool sandboxed = strcmp(mode, "none") != 0;
    if (sandboxed && (geteuid() != 0 || access("/usr/local/bin/runsc", X_OK) != 0)) {
        printf("1..0 # SKIP needs root and runsc\n");
        return 0;
    }
    char dir[] = "/tmp/sg-exec-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    chmod(dir, 0711);
    loop = loop_new();
    proc_init(loop, NULL);
    sg_error_t *err = NULL;
    sandbox_config_t cfg;
    sandbox_config_defaults(&cfg);
    cfg.mode = sandboxed ? SANDBOX_RUNSC : SANDBOX_NONE;
    cfg.workspace_bytes = 16 << 20;
    cfg.tmp_bytes = 16 << 20;
    cleanup_free char *state = xasprintf("%s/state", dir);
    sandbox_env_t *env = sandbox_env_new(&cfg, state, &err);
    if (!ok(env != NULL, "environment (%s)", mode)) {
        diag("%s", err->msg);
        return tap_done();
    }
    kspecs_t *specs = kspecs_discover(NULL);
    cleanup_free char *ws = xasprintf("%s/workspaces/%s", state, "ws");
    sandbox_workspace_open(env, ws, &err);
    cleanup_free char *id = xasprintf("ex%d-1", (int)getpid());
    sandbox_t *sb =
        sandbox_new(env, id, kspecs_get(specs, "python3"), &(sandbox_opts_t){0}, ws, &err);
    int up = 0;
    if (!ok(sb && sandbox_start(sb, started, &up, &err) == 0, "sandbox made")) {
        diag("%s", err ? err->msg : "?");
        return tap_done();
    }
    run_until(nonzero, &up, 60000);
    ok(up == 1, "and running");

    char *out, *errout;
    const char *sh1[] = {"/bin/sh", "-c", "echo out; echo err >&2; exit 3", NULL};
    int st = run(sb, sh1, NULL, NULL, NULL, &out, &errout);
    ok(st == 3 && strcmp(out, "out\n") == 0 && strcmp(errout, "err\n") == 0,
       "a command's stdout, stderr and exit status come apart (%d, '%s', '%s')", st, out, errout);
    free(out), free(errout);

    const char *cat[] = {"cat", NULL};
    st = run(sb, cat, NULL, NULL, "hello\nworld\n", &out, &errout);
    ok(st == 0 && strcmp(out, "hello\nworld\n") == 0,
       "its stdin is the fd given; a program is found by PATH ('%s')", out);
    free(out), free(errout);

    const char *envsh[] = {"sh", "-c", "echo $FOO; pwd; echo $HOME", NULL};
    const char *vars[] = {"FOO=bar baz", NULL};
    st = run(sb, envsh, vars, "/tmp", NULL, &out, &errout);
    /* HOME is the sandbox's (mode none: the host's own). */
    ok(st == 0 && strncmp(out, "bar baz\n/tmp\n", 13) == 0 &&
           (!sandboxed || strcmp(out + 13, "/home/user\n") == 0),
       "env is added to the sandbox's, cwd is where it runs ('%s')", out);
    free(out), free(errout);

    const char *pwd[] = {"pwd", NULL};
    st = run(sb, pwd, NULL, NULL, NULL, &out, &errout);
    ok(st == 0 && (sandboxed ? strcmp(out, "/home/user\n") == 0 : strstr(out, "/ws\n") != NULL),
       "without cwd it runs in the workspace ('%s')", out);
    free(out), free(errout);

    if (sandboxed) {
        const char *idu[] = {"id", "-u", NULL};
        st = run(sb, idu, NULL, NULL, NULL, &out, &errout);
        ok(st == 0 && strcmp(out, "64123\n") == 0, "as the sandbox user ('%s')", out);
        free(out), free(errout);
        cleanup_free char *marker = xasprintf("/tmp/sg-exec-marker-%d", (int)getpid());
        cleanup_free char *script = xasprintf("echo inside > %s && cat %s", marker, marker);
        const char *w[] = {"sh", "-c", script, NULL};
        st = run(sb, w, NULL, NULL, NULL, &out, &errout);
        ok(st == 0 && strcmp(out, "inside\n") == 0 && access(marker, F_OK) != 0,
           "a file it writes to /tmp is the sandbox's, not the host's");
        free(out), free(errout);
    }

    const char *missing[] = {"/no/such/program", NULL};
    st = run(sb, missing, NULL, NULL, NULL, &out, &errout);
    ok(st == 127 && strstr(errout, "sandgate-init: exec") != NULL,
       "a program that does not exist: 127 and why on stderr (%d, '%s')", st, errout);
    free(out), free(errout);

    /* Signals reach the whole group: the shell and both sleeps. */
    cmd_t c;
    const char *group[] = {"sh", "-c", "sleep 97 & sleep 98", NULL};
    ok(start(sb, &c, group, NULL, NULL, &err), "a command of two processes starts");
    ok(sandbox_exec_count(sb) == 1, "the sandbox counts it as running");
    spin(300);
    st = signal_and_wait(sb, &c, SIGTERM);
    ok(st == 128 + SIGTERM, "TERM ends it: 128 + 15 (%d)", st);
    ok(sandbox_exec_count(sb) == 0, "and it is no longer counted");
    /* The shell's end is seen first; its sleeps end once they are run
     * (a loaded machine's scheduler): asked again for 10 s at most. */
    const char *ps[] = {"sh", "-c",
                        "for i in $(seq 100); do n=$(ps -eo args | grep -c '^sleep 9[78]'); "
                        "[ \"$n\" = 0 ] && break; sleep 0.1; done; echo $n",
                        NULL};
    st = run(sb, ps, NULL, NULL, NULL, &out, &errout);
    ok(strcmp(out, "0\n") == 0, "no process of its group is left ('%s')", out);
    free(out), free(errout);

    const char *stubborn[] = {"sh", "-c", "trap '' TERM INT; sleep 99", NULL};
    ok(start(sb, &c, stubborn, NULL, NULL, &err), "a command that ignores TERM starts");
    spin(300);
    st = signal_and_wait(sb, &c, SIGKILL);
    ok(st == 128 + SIGKILL, "KILL ends it anyway: 128 + 9 (%d)", st);

    cleanup_error sg_error_t *e1 = NULL, *e2 = NULL, *e3 = NULL, *e4 = NULL;
    const char *none[] = {NULL};
    const char *bad_env[] = {"1X=y", NULL};
    ok(!start(sb, &c, cat, NULL, "tmp", &e1) && e1->kind == SG_E_INVALID,
       "a relative cwd is refused");
    ok(!start(sb, &c, none, NULL, NULL, &e2) && e2->kind == SG_E_INVALID,
       "an empty command is refused");
    ok(!start(sb, &c, cat, bad_env, NULL, &e3) && e3->kind == SG_E_INVALID,
       "an environment name that is not a name is refused");
    ok(sandbox_exec_signal(sb, 1, SIGSTOP, &e4) < 0 && e4->kind == SG_E_INVALID,
       "a signal other than INT, TERM, HUP and KILL is refused");

    sandbox_remove(sb, true);
    sandbox_free(&sb);
    sandbox_workspace_close(env, ws, true);
    kspecs_destroy(&specs);
    sandbox_env_destroy(&env);
    proc_fini();
    loop_destroy(&loop);
    cleanup_free char *rm = xasprintf("rm -rf '%s'", dir);
    ok(system(rm) == 0, "cleaned up");
    return tap_done();
}
