/* none: --sandbox=none, plain kernel processes on the host with
 * no isolation (development), as a table of sandbox operations
 * (internal.h); what they share with sandboxes is host.c's. */
#include "kernelmgr/sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

static char **plain_env(const sandbox_t *sb, const kspec_t *spec, char *tcp_as_ipc)
{
    const char *dir = sb->dir;
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = xzalloc((n + json_object_size(spec->env) + 5) * sizeof(char *));
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
    if (tcp_as_ipc) { /* kspec.h's tcp_only (none_prepare checked the preload) */
        env[m++] = tcp_as_ipc;
        env[m++] = xasprintf("LD_PRELOAD=%s", sb->env->preload);
    }
    return env;
}

/* No runsc, no shared /etc or root: only the kernels' directory, and the
 * init program's path for sandgate-kernel.py beside it. */
static int none_env_init(sandbox_env_t *env, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    if (cfg->egress_allow && *cfg->egress_allow)
        return sg_error_set(err, SG_E_INVALID,
                            "--egress-allow needs sandboxes (--sandbox runsc): plain kernels "
                            "have the host's network");
    cleanup_free char *kernels = xasprintf("%s/kernels", env->state_dir);
    if (host_make_dir(env->state_dir, 0711, err) < 0 || host_make_dir(kernels, 0711, err) < 0)
        return sg_error_prefix(err, "preparing kernels in %s", env->state_dir);
    env->init = host_init_path(cfg);
    env->launcher_py = host_launcher_py(env->init);
    env->preload = host_find_preload(env);
    return 0;
}

static int none_prepare(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    cleanup_free char *connfile = xasprintf("%s/conn/kernel.json", sb->dir);
    if (spec->tcp_only && sb->env->preload == NULL)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "kernel '%s' speaks TCP only and needs sandgate-preload.so beside %s",
                            spec->name, sb->env->init);
    char *tcp_as_ipc = NULL;
    if (host_prepare_conn(sb, spec, err) < 0 ||
        host_write_kernel_conn(sb, spec, sb->conn.ip, connfile, &tcp_as_ipc, err) < 0) {
        sg_error_prefix(err, "preparing kernel %s", sb->id);
        host_remove_tree(sb->dir);
        return -1;
    }
    sb->plain_argv = host_kernel_argv(spec, connfile, sb->env->launcher_py);
    sb->plain_env = plain_env(sb, spec, tcp_as_ipc);
    return 0;
}

/* Nothing runs for it but the kernel. */
static void none_release(sandbox_t *sb)
{
}

/* In its own session (the kernel's children die with it), in its
 * workspace, its output in kernel.log; it runs when spawned. */
static int none_start(sandbox_t *sb, sg_error_t **err)
{
    cleanup_free char *log = xasprintf("%s/kernel.log", sb->dir);
    proc_spec_t spec = {.argv = (const char *const *)sb->plain_argv,
                        .env = (const char *const *)sb->plain_env,
                        .cwd = sb->workspace,
                        .output = log,
                        .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0)
        return -1;
    sb->pid = pid;
    sb->started_cb(sb, pid, NULL, sb->started_arg);
    return 0;
}

static int none_signal(sandbox_t *sb, int sig, sg_error_t **err)
{
    if (sb->pid > 0 && kill(sb->pid, sig) < 0)
        return sg_error_errno(err, errno, "kill %d", (int)sb->pid);
    return 0;
}

static void none_stop(sandbox_t *sb)
{
    if (sb->pid > 0) {
        kill(-sb->pid, SIGKILL); /* its own session and process group */
        kill(sb->pid, SIGKILL);
    }
}

static void none_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    cleanup_free char *dir = xasprintf("%s/kernels/%s", env->state_dir, id);
    host_remove_tree(dir);
}

/* No container manager: nothing can be left over. */
static json_t *none_list(sandbox_env_t *env, sg_error_t **err)
{
    return json_array();
}

static void none_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    sg_error_set(&err, SG_E_INVALID,
                 "this server gives sandboxes no network (start it with --egress-allow)");
    cb(NULL, err, arg);
}

/* pause and resume NULL: plain processes cannot be saved. */
const sandbox_ops_t sandbox_none_ops = {
    .env_init = none_env_init,
    .workspace_open = host_workspace_open,
    .workspace_open_async = host_workspace_open_async,
    .cancel = host_cancel,
    .workspace_close = host_workspace_close,
    .prepare = none_prepare,
    .adopt = host_adopt,
    .release = none_release,
    .start = none_start,
    .signal = none_signal,
    .exec = none_exec,
    .exec_signal = none_exec_signal,
    .exec_pid = none_exec_pid,
    .stop = none_stop,
    .remove_id = none_remove_id,
    .list = none_list,
    .egress_refused = none_egress_refused,
    .log_tail = host_log_tail,
    .give = host_give,
};
