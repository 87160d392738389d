/* sandbox: the public API (sandbox.h) over the implementations of its
 * operations (internal.h): runsc.c makes sandboxes here,
 * link.c asks the privileged launcher, none.c runs plain
 * kernels. */
#include "kernelmgr/sandbox/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "kernelmgr/egress/egress.h"
#include "kernelmgr/sandbox/cgroup.h"

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

void sandbox_config_defaults(sandbox_config_t *cfg)
{
    *cfg = (sandbox_config_t){
        .mode = SANDBOX_RUNSC,
        .runsc = "/usr/local/bin/runsc", /* scripts/runsc.sh: the pinned build */
        .platform = "systrap",
        .rootfs = NULL,
        .memory_bytes = 1024ull << 20,
        .cpu_quota_us = 100000, /* one CPU */
        .pids = 4096,           /* host tasks: a backstop; nproc is the real limit */
        .nproc = 64,
        .nofile = 1024,
        .init = getenv("SANDGATE_INIT"),
        .workspace_bytes = 1024ull << 20,
        .tmp_bytes = 256ull << 20,
        .egress_max_conns = 256,
        .tenant_cgroups = true,
    };
}

/* This process's own privileged steps (gives, cancels): through the
 * launcher when it has one, else its own. */
static const sandbox_ops_t *process_ops(void)
{
    return sandbox_link_up() ? &sandbox_link_ops : &sandbox_runsc_ops;
}

/* The one place a mode picks its table. */
static const sandbox_ops_t *mode_ops(sandbox_mode_t mode)
{
    switch (mode) {
    case SANDBOX_RUNSC: return process_ops();
    case SANDBOX_NONE: return &sandbox_none_ops;
    }
    return &sandbox_none_ops;
}

/* "runsc version X" of `runsc --version`: X (a new string), or NULL. */
static char *runsc_version_of(const char *runsc)
{
    const char *argv[] = {runsc, "--version", NULL};
    cleanup_free char *out = NULL;
    sg_error_t *err = NULL;
    int status = proc_run_sync(argv, &out, &err);
    sg_error_free(&err);
    const char *v = status == 0 && out ? strstr(out, "runsc version ") : NULL;
    if (v == NULL)
        return NULL;
    v += strlen("runsc version ");
    return xstrndup(v, strcspn(v, " \n"));
}

/* Whether --egress-dns names resolvers: host names in rules need one
 * (sandbox_check_egress, in the daemon as in the launcher). */
static bool egress_dns_set;

sandbox_env_t *sandbox_env_new(const sandbox_config_t *cfg, const char *state_dir, sg_error_t **err)
{
    sandbox_env_t *self = xzalloc(sizeof *self);
    self->cfg = *cfg;
    egress_dns_set = cfg->egress_dns && *cfg->egress_dns;
    self->state_dir = xstrdup(state_dir);
    /* Mode none runs plain processes: nothing to ask the launcher for. */
    self->ops = mode_ops(cfg->mode);
    for (size_t i = 0; i < cfg->ntemplates && cfg->mode == SANDBOX_NONE; i++)
        if (cfg->templates[i].root || cfg->templates[i].image) {
            sg_error_set(err, SG_E_INVALID,
                         "template '%s' has a root of its own: that needs sandboxes (not "
                         "--sandbox none)",
                         cfg->templates[i].name);
            sandbox_env_destroy(&self);
            return NULL;
        }
    if (cfg->mode == SANDBOX_RUNSC && access(cfg->runsc, X_OK) == 0) {
        /* The binary it names now, for this sandgate's whole life: a runsc
         * installed meanwhile (scripts/runsc.sh points the link at a new
         * version's directory and keeps the old one) takes over at the next
         * start, where the images' version stamps meet it.  Following the
         * link on every call would resume a checkpoint with a runsc that
         * cannot read it, and a failed restore starts a fresh kernel. */
        if (strchr(cfg->runsc, '/') && (self->runsc_path = realpath(cfg->runsc, NULL)))
            self->cfg.runsc = self->runsc_path;
        self->runsc_version = runsc_version_of(self->cfg.runsc);
        log_info("runsc: %s, version %s", self->cfg.runsc,
                 self->runsc_version ? self->runsc_version : "unknown");
    }
    if (self->ops->env_init(self, err) < 0)
        sandbox_env_destroy(&self);
    return self;
}

void sandbox_env_destroy(sandbox_env_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    sandbox_env_t *self = *self_p;
    if (self->runsc_root) {
        /* runsc pins an empty network namespace for its file proxies at
         * ROOT/null-netns, a bind mount (stacked when runs race): let go of
         * it, so the state directory can be removed.  Running sandboxes
         * keep theirs; the next runsc run pins a new one. */
        cleanup_free char *pin = xasprintf("%s/null-netns", self->runsc_root);
        while (umount2(pin, MNT_DETACH) == 0)
            ;
    }
    free(self->state_dir);
    free(self->etc_dir);
    free(self->rootfs_dir);
    free(self->runsc_root);
    free(self->init);
    free(self->preload);
    free(self->launcher_py);
    free(self->runsc_version);
    free(self->runsc_path);
    template_roots_free(self);
    if (self->egress) {
        egress_teardown();
        free(self->egress);
    }
    free(self);
    *self_p = NULL;
}

const sandbox_config_t *sandbox_env_config(const sandbox_env_t *env)
{
    return &env->cfg;
}

const char *sandbox_env_runsc_version(const sandbox_env_t *env)
{
    return env->runsc_version;
}

const char *sandbox_env_state_dir(const sandbox_env_t *env)
{
    return env->state_dir;
}

/* --- workspaces ------------------------------------------------------------ */

int sandbox_workspace_open(const sandbox_env_t *env, const char *path, sg_error_t **err)
{
    return env->ops->workspace_open(env, path, 0, err);
}

uint64_t sandbox_workspace_open_async(const sandbox_env_t *env, const char *path,
                                      sandbox_opened_fn *cb, void *arg)
{
    return env->ops->workspace_open_async(env, path, 0, cb, arg);
}

int sandbox_volume_open(const sandbox_env_t *env, const char *path, uint64_t bytes,
                        sg_error_t **err)
{
    if (bytes == 0)
        return sg_error_set(err, SG_E_INVALID, "a volume has a size");
    return env->ops->workspace_open(env, path, bytes, err);
}

uint64_t sandbox_volume_open_async(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                   sandbox_opened_fn *cb, void *arg)
{
    return env->ops->workspace_open_async(env, path, bytes, cb, arg);
}

/* A path inside a sandbox that a volume may be mounted at: absolute,
 * canonical (no empty, "." or ".." component), not the sandbox's own. */
static bool mount_path_ok(const char *p)
{
    static const char *const own[] = {"/proc", "/dev", "/sys", "/usr",   "/etc", "/tmp",
                                      "/conn", "/bin", "/lib", "/lib64", "/sbin"};
    size_t n = strlen(p);
    if (p[0] != '/' || n < 2 || n > 255 || p[n - 1] == '/' || strstr(p, "//") || strstr(p, "/./") ||
        strstr(p, "/../") || (n >= 2 && strcmp(p + n - 2, "/.") == 0) ||
        (n >= 3 && strcmp(p + n - 3, "/..") == 0) || strncmp(p, "/sandgate", 9) == 0 ||
        strcmp(p, "/home/user") == 0 || strcmp(p, "/home") == 0)
        return false;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        size_t k = strlen(own[i]);
        if (strncmp(p, own[i], k) == 0 && (p[k] == 0 || p[k] == '/'))
            return false;
    }
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == ',' || *c == ':')
            return false;
    return true;
}

int sandbox_check_mounts(const sandbox_env_t *env, const json_t *mounts, sg_error_t **err)
{
    if (mounts == NULL)
        return 0;
    if (!json_is_array(mounts) || json_array_size(mounts) > SANDBOX_MOUNTS)
        return sg_error_set(err, SG_E_INVALID, "mounts: a list of at most %d volumes",
                            SANDBOX_MOUNTS);
    cleanup_free char *dir = xasprintf("%s/volumes/", env->state_dir);
    size_t n = strlen(dir), i, j;
    json_t *m, *o;
    json_array_foreach (mounts, i, m) {
        const char *src = json_string_value(json_object_get(m, "source"));
        const char *path = json_string_value(json_object_get(m, "path"));
        json_t *ro = json_object_get(m, "read_only");
        if (!json_is_object(m) || !src || strncmp(src, dir, n) != 0 || strlen(src) != n + 36 ||
            strspn(src + n, "0123456789abcdef-") != 36 || (ro && !json_is_boolean(ro)))
            return sg_error_set(err, SG_E_INVALID, "mounts: not a volume");
        if (!path || !mount_path_ok(path))
            return sg_error_set(err, SG_E_INVALID,
                                "mount path '%.255s': an absolute path (no '.', '..', ',' "
                                "or ':'), not /home/user itself nor a system directory "
                                "(/usr, /etc, /tmp, /proc, /dev, /sys, /conn)",
                                path ? path : "");
        json_array_foreach (mounts, j, o) {
            const char *other = json_string_value(json_object_get(o, "path"));
            if (j < i && other && strcmp(other, path) == 0)
                return sg_error_set(err, SG_E_INVALID, "mount path '%s' given twice", path);
        }
    }
    return 0;
}

void sandbox_cancel(uint64_t request)
{
    if (request != 0)
        process_ops()->cancel(request);
}

void sandbox_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
    env->ops->workspace_close(env, path, remove);
}

uint64_t sandbox_give(int fd, sandbox_given_fn *cb, void *arg)
{
    return process_ops()->give(fd, NULL, cb, arg);
}

uint64_t sandbox_give_as(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg)
{
    return process_ops()->give(fd, as, cb, arg);
}

/* --- one sandbox ------------------------------------------------------------- */

static sandbox_t *alloc(sandbox_env_t *env, const char *id)
{
    sandbox_t *self = xzalloc(sizeof *self);
    self->env = env;
    self->id = xstrdup(id);
    self->dir = xasprintf("%s/kernels/%s", env->state_dir, id);
    return self;
}

/* runsc's cgroupsPath for a sandbox (cgroup.h); NULL in mode none. */
char *sandbox_cgroup_name(const sandbox_env_t *env, const char *tenant, const char *id)
{
    if (env->cfg.mode != SANDBOX_RUNSC)
        return NULL;
    if (env->cfg.tenant_cgroups && tenant)
        return xasprintf("/" CGROUP_TOP "/" CGROUP_TENANT_PREFIX "%s/%s", tenant, id);
    return xasprintf("/" CGROUP_TOP "/%s", id);
}

/* A tenant's ceiling, or the server's when it names none or a higher one. */
static uint64_t ceiling(uint64_t tenant, uint64_t server)
{
    return tenant > 0 && tenant < server ? tenant : server;
}

const sandbox_template_t *sandbox_template_find(const sandbox_config_t *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->ntemplates; i++)
        if (strcmp(cfg->templates[i].name, name) == 0)
            return &cfg->templates[i];
    return NULL;
}

sandbox_t *sandbox_new(sandbox_env_t *env, const char *id, const kspec_t *spec,
                       const sandbox_opts_t *opts, const char *workspace, sg_error_t **err)
{
    sandbox_t *self = alloc(env, id);
    self->workspace = xstrdup(workspace);
    self->internet = opts && opts->internet;
    self->tenant = opts && opts->tenant ? xstrdup(opts->tenant) : NULL;
    self->snapshot = opts && opts->snapshot ? xstrdup(opts->snapshot) : NULL;
    self->template = opts && opts->template ? xstrdup(opts->template) : NULL;
    self->egress_allow = opts && opts->egress_allow ? xstrdup(opts->egress_allow) : NULL;
    self->egress_deny = opts && opts->egress_deny ? xstrdup(opts->egress_deny) : NULL;
    self->egress_transforms =
        opts && opts->egress_transforms ? xstrdup(opts->egress_transforms) : NULL;
    if (opts && opts->mounts) {
        if (sandbox_check_mounts(env, opts->mounts, err) < 0) {
            sandbox_free(&self);
            return NULL;
        }
        self->mounts = json_deep_copy(opts->mounts);
    }
    if (self->template && !sandbox_template_find(&env->cfg, self->template)) {
        sg_error_set(err, SG_E_NOTFOUND, "no template '%s'", self->template);
        sandbox_free(&self);
        return NULL;
    }
    if (self->snapshot && !sandbox_env_can_pause(env)) {
        sg_error_set(err, SG_E_CONFLICT, "snapshots need sandboxes (not --sandbox none)");
        sandbox_free(&self);
        return NULL;
    }
    self->memory_bytes = ceiling(opts ? opts->memory_bytes : 0, env->cfg.memory_bytes);
    self->cpu_quota_us = ceiling(opts ? opts->cpu_quota_us : 0, env->cfg.cpu_quota_us);
    self->cgroup = sandbox_cgroup_name(env, self->tenant, id);
    if (env->ops->prepare(self, spec, err) < 0)
        sandbox_free(&self);
    return self;
}

sandbox_t *sandbox_adopt(sandbox_env_t *env, const char *id, pid_t pid, sg_error_t **err)
{
    sandbox_t *self = alloc(env, id);
    if (env->ops->adopt(self, pid, err) < 0) {
        sandbox_free(&self);
        return NULL;
    }
    self->pid = pid;
    return self;
}

void sandbox_free(sandbox_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    sandbox_t *self = *self_p;
    sandbox_exec_forget(self);
    self->env->ops->release(self);
    free(self->id);
    free(self->dir);
    free(self->workspace);
    free(self->tenant);
    free(self->egress_allow);
    free(self->egress_deny);
    free(self->egress_transforms);
    free(self->snapshot);
    free(self->template);
    json_decref(self->mounts);
    free(self->cgroup);
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

bool sandbox_usage(sandbox_t *self, sandbox_usage_t *u)
{
    const char *cgroup = self->pid > 0 ? sandbox_cgroup(self) : NULL;
    if (!cgroup) {
        *u = (sandbox_usage_t){0};
        return false;
    }
    return cgroup_usage(cgroup, u);
}

const char *sandbox_cgroup(sandbox_t *self)
{
    if (self->env->cfg.mode != SANDBOX_RUNSC)
        return NULL;
    if (!self->cgroup && !sandbox_link_up()) { /* adopted here: its bundle says */
        cleanup_free char *config = xasprintf("%s/bundle/config.json", self->dir);
        self->cgroup = cgroup_of_bundle(config);
    }
    if (!self->cgroup)
        self->cgroup = sandbox_cgroup_name(self->env, NULL, self->id);
    return self->cgroup;
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

uint64_t sandbox_log_tail(const sandbox_t *self, size_t max, sandbox_tail_fn *cb, void *arg)
{
    return self->env->ops->log_tail(self, max, cb, arg);
}

int sandbox_start(sandbox_t *self, sandbox_started_fn *cb, void *arg, sg_error_t **err)
{
    self->started_cb = cb;
    self->started_arg = arg;
    return self->env->ops->start(self, err);
}

bool sandbox_env_can_pause(const sandbox_env_t *env)
{
    return env->ops->pause != NULL;
}

bool sandbox_env_isolated(const sandbox_env_t *env)
{
    return env->cfg.mode == SANDBOX_RUNSC;
}

int sandbox_pause(sandbox_t *self, sandbox_paused_fn *cb, void *arg, sg_error_t **err)
{
    if (!sandbox_env_can_pause(self->env))
        return sg_error_set(err, SG_E_CONFLICT,
                            "sessions cannot be paused without a sandbox (--sandbox none)");
    self->paused_cb = cb;
    self->paused_arg = arg;
    self->leave_running = false;
    return self->env->ops->pause(self, err);
}

/* The date (YYYYMMDD) in a runsc version: Debian's 0.0~20221219.0, a
 * release's release-20240401.0, a Go module build's
 * v0.0.0-20260905035102-160fafc42237; 0 when it has none. */
static long runsc_date(const char *v)
{
    for (; v && *v; v++) {
        int n = 0;
        while (v[n] >= '0' && v[n] <= '9')
            n++;
        if (n >= 8 && v[0] == '2' && v[1] == '0') {
            char date[9];
            memcpy(date, v, 8);
            date[8] = '\0';
            return strtol(date, NULL, 10);
        }
        v += n ? n - 1 : 0;
    }
    return 0;
}

bool sandbox_env_can_save_live(const sandbox_env_t *env)
{
    return env->ops->pause != NULL && runsc_date(env->runsc_version) >= 20240401;
}

int sandbox_save_live(sandbox_t *self, sandbox_paused_fn *cb, void *arg, sg_error_t **err)
{
    if (!sandbox_env_can_save_live(self->env))
        return sg_error_set(err, SG_E_CONFLICT, "this runsc (%s) cannot checkpoint and run on",
                            self->env->runsc_version ? self->env->runsc_version : "?");
    self->paused_cb = cb;
    self->paused_arg = arg;
    self->leave_running = true;
    return self->env->ops->pause(self, err);
}

void sandbox_reattach(sandbox_t *self)
{
    if (self->env->ops->reattach)
        self->env->ops->reattach(self);
}

int sandbox_resume(sandbox_t *self, sandbox_started_fn *cb, void *arg, sg_error_t **err)
{
    if (!sandbox_env_can_pause(self->env))
        return sg_error_set(err, SG_E_CONFLICT, "nothing to resume without a sandbox");
    self->started_cb = cb;
    self->started_arg = arg;
    return self->env->ops->resume(self, err);
}

void sandbox_snapshot_save(sandbox_t *self, const char *sid, sandbox_saved_fn *cb, void *arg)
{
    if (!self->env->ops->snapshot_save) {
        cb(0,
           &(sg_error_t){.kind = SG_E_CONFLICT,
                         .msg = "snapshots need sandboxes (not --sandbox none)"},
           arg);
        return;
    }
    self->env->ops->snapshot_save(self, sid, cb, arg);
}

void sandbox_snapshot_delete(sandbox_env_t *env, const char *sid)
{
    if (env->ops->snapshot_delete)
        env->ops->snapshot_delete(env, sid);
}

void sandbox_snapshot_transfer(sandbox_env_t *env, const char *sid, bool import,
                               sandbox_saved_fn *cb, void *arg)
{
    if (!env->ops->snapshot_transfer) {
        cleanup_error sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_CONFLICT, "snapshots need sandboxes (not --sandbox none)");
        cb(0, err, arg);
        return;
    }
    env->ops->snapshot_transfer(env, sid, import, cb, arg);
}

uint64_t sandbox_workspace_restore_async(const sandbox_env_t *env, const char *path,
                                         const char *sid, sandbox_opened_fn *cb, void *arg)
{
    if (!env->ops->workspace_restore) {
        cb(&(sg_error_t){.kind = SG_E_CONFLICT,
                         .msg = "snapshots need sandboxes (not --sandbox none)"},
           arg);
        return 0;
    }
    return env->ops->workspace_restore(env, path, sid, cb, arg);
}

int sandbox_check_egress(const char *allow, const char *deny, const char *transforms,
                         sg_error_t **err)
{
    int hosts = egress_check_transforms(transforms, err);
    int names = hosts < 0 ? -1 : egress_check_rules(allow, deny, err);
    if (names < 0)
        return -1;
    if (names + hosts > 0 && !egress_dns_set)
        return sg_error_set(err, SG_E_INVALID,
                            "host names in egress rules need --egress-dns (the resolvers both "
                            "the sandboxes and the egress proxy ask)");
    return names + hosts;
}

void sandbox_set_egress(sandbox_t *self, const char *allow, const char *deny,
                        const char *transforms, sandbox_rules_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    if (!self->env->ops->set_egress)
        sg_error_set(&err, SG_E_CONFLICT, "sandboxes have no network with --sandbox none");
    else if (sandbox_check_egress(allow, deny, transforms, &err) >= 0) {
        self->env->ops->set_egress(self, allow, deny, transforms, cb, arg);
        return;
    }
    cb(err, arg);
}

void sandbox_set_tenant(sandbox_t *self, const char *tenant)
{
    if (self->env->ops->set_tenant && tenant &&
        (!self->tenant || strcmp(self->tenant, tenant) != 0))
        self->env->ops->set_tenant(self, tenant);
}

int sandbox_signal(sandbox_t *self, int sig, sg_error_t **err)
{
    return self->env->ops->signal(self, sig, err);
}

void sandbox_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    env->ops->remove_id(env, id, wait);
}

void sandbox_remove(sandbox_t *self, bool wait)
{
    self->env->ops->stop(self);
    sandbox_remove_id(self->env, self->id, wait);
}

json_t *sandbox_list(sandbox_env_t *env, sg_error_t **err)
{
    return env->ops->list(env, err);
}

void sandbox_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    env->ops->egress_refused(env, cb, arg);
}
