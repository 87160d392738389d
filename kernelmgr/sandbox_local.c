/* sandbox_local: the sandbox operations done in this process
 * (sandbox_internal.h) — the shared /etc and root, OCI bundles, runsc
 * through proc.c, loop-mounted workspaces.  The launcher's table, and that
 * of a daemon without one (--sandbox=none, or not started as root). */
#include "kernelmgr/sandbox_internal.h"

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
#include "common/xalloc.h"
#include "kernelmgr/proc.h"

#define SANDBOX_IDS "64123:64123" /* SANDBOX_UID:SANDBOX_GID, for mkfs */
/* What a new workspace needs free on the state directory's disk: mkfs
 * writes a few MiB of metadata into its sparse image, the kernel's first
 * files some more. */
#define WORKSPACE_MIN_FREE (32u << 20)

/* The kernel's socket prefix inside the sandbox: the abstract namespace,
 * which is the Sentry's own (per sandbox) and which runsc can checkpoint,
 * unlike host sockets.  sandgate-init relays /conn/kernel-N to it. */
#define RELAY_INNER "@sandgate-kernel"

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
     * (numpy finds libblas through them), MIME types, public certificates, R's
     * configuration (/usr/lib/R/etc links into it).
     * Symlinks are kept: they point into /usr, which the sandbox has. */
    static const char *copies[] = {"/etc/ld.so.cache", "/etc/localtime", "/etc/python3",
                                   "/etc/python3.11",  "/etc/fonts",     "/etc/alternatives",
                                   "/etc/mime.types",  "/etc/ssl",       "/etc/R"};
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

/* --- cgroups --------------------------------------------------------------
 * runsc makes each sandbox's cgroup (cgroupsPath /sandgate/ID, in every
 * hierarchy) and leaves it behind when the sandbox is deleted, one per
 * start and per resume; sandgate removes it.  rmdir(2) refuses a cgroup
 * that still has processes, so a removal can never take a live one. */

typedef void cgroup_fn(const char *mnt, bool v2, const char *opts, void *arg);

static void each_cgroup_mount(cgroup_fn *fn, void *arg)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        const char *sep = strstr(line, " - ");
        char fstype[32], opts[512], mnt[PATH_MAX];
        if (sep == NULL || sscanf(sep + 3, "%31s %*s %511s", fstype, opts) != 2 ||
            sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        bool v2 = strcmp(fstype, "cgroup2") == 0;
        if (v2 || strcmp(fstype, "cgroup") == 0)
            fn(mnt, v2, opts, arg);
    }
    free(line);
    fclose(f);
}

static void remove_cgroup_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts;
    cleanup_free char *dir = xasprintf("%s/sandgate/%s", mnt, (const char *)arg);
    rmdir(dir);
}

static void cgroup_remove(const char *id)
{
    each_cgroup_mount(remove_cgroup_in, (void *)id);
}

/* At start: what deleted sandboxes and a crash left.  Only cgroups made a
 * minute ago or more: another sandgate on the machine may be starting a
 * sandbox in a new, still empty one. */
static void sweep_cgroups_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts, (void)arg;
    cleanup_free char *top = xasprintf("%s/sandgate", mnt);
    DIR *d = opendir(top);
    if (d == NULL)
        return;
    struct dirent *e;
    time_t old = time(NULL) - 60;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0 ||
            !S_ISDIR(st.st_mode) || st.st_mtime > old)
            continue;
        unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

struct cpu_limit {
    const char *id;
    long long quota, period;
    int written, failed;
};

static void set_cpu_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    struct cpu_limit *c = arg;
    char buf[64];
    cleanup_free char *dir = xasprintf("%s/sandgate/%s", mnt, c->id);
    if (v2) {
        cleanup_free char *max = xasprintf("%s/cpu.max", dir);
        if (access(max, F_OK) < 0)
            return; /* no cpu controller here */
        snprintf(buf, sizeof buf, "%lld %lld", c->quota, c->period);
        write_file(max, buf, NULL) < 0 ? c->failed++ : c->written++;
        return;
    }
    if (!has_word(opts, "cpu"))
        return;
    cleanup_free char *period = xasprintf("%s/cpu.cfs_period_us", dir);
    cleanup_free char *quota = xasprintf("%s/cpu.cfs_quota_us", dir);
    snprintf(buf, sizeof buf, "%lld", c->period);
    int r = write_file(period, buf, NULL);
    snprintf(buf, sizeof buf, "%lld", c->quota);
    r |= write_file(quota, buf, NULL);
    r < 0 ? c->failed++ : c->written++;
}

/* Puts the sandbox's CPU quota in place (restore runs without it). */
static int cgroup_set_cpu(const char *id, long long quota, long long period, sg_error_t **err)
{
    struct cpu_limit c = {.id = id, .quota = quota, .period = period};
    each_cgroup_mount(set_cpu_in, &c);
    if (c.written == 0 || c.failed > 0)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "cannot set the CPU limit of sandbox %s in its cgroup", id);
    return 0;
}

/* sandgate-kernel.py, beside sandgate-init; NULL (and a warning) if missing. */
/* The init program's path, made absolute: it is a bind mount's source,
 * which runsc would resolve against the bundle, and a plain kernel's
 * program, which runs in its workspace. */
static char *init_path(const sandbox_config_t *cfg)
{
    const char *init = cfg->init ? cfg->init : default_init();
    char *path = realpath(init, NULL);
    return path ? path : xstrdup(init);
}

static char *launcher_py(const char *init)
{
    cleanup_free char *dir = xstrdup(init);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    char *path = xasprintf("%s/sandgate-kernel.py", slash ? dir : ".");
    if (access(path, R_OK) == 0)
        return path;
    log_warn("sandbox: %s is missing; IPython kernels run slower, and sandboxed ones with "
             "forked subprocesses cannot pause",
             path);
    free(path);
    return NULL;
}

/* --egress-allow: the policy, and the host's side of it (egress.h). */
static int egress_init(sandbox_env_t *env, const char *kernels, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    if (cfg->egress_allow == NULL || !*cfg->egress_allow)
        return 0;
    egress_policy_t *p = xzalloc(sizeof *p);
    if (egress_parse_allow(p, cfg->egress_allow, err) < 0 ||
        egress_parse_dns(p, cfg->egress_dns, err) < 0) {
        free(p);
        return -1;
    }
    p->max_conns = cfg->egress_max_conns;
    p->rate = cfg->egress_rate;
    if (egress_setup(p, kernels, err) < 0) {
        free(p);
        return -1;
    }
    env->egress = p;
    log_info("egress: sandboxes that ask for it reach %s (DNS: %s)", cfg->egress_allow,
             cfg->egress_dns && *cfg->egress_dns ? cfg->egress_dns : "none");
    return 0;
}

/* The sandboxes' /etc/resolv.conf and the hosts line of nsswitch.conf:
 * --egress-dns's resolvers, or none. */
static int write_resolver(const sandbox_env_t *env, sg_error_t **err)
{
    const char *dns = env->cfg.egress_dns && env->egress ? env->cfg.egress_dns : "";
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (const char *s = dns; *s;) {
        size_t n = strcspn(s, ",");
        if (n)
            fprintf(f, "nameserver %.*s\n", (int)n, s);
        s += n + (s[n] == ',');
    }
    fclose(f);
    cleanup_free char *resolv = xasprintf("%s/resolv.conf", env->etc_dir);
    cleanup_free char *nss = xasprintf("%s/nsswitch.conf", env->etc_dir);
    int r = write_file(resolv, text, err);
    if (r == 0)
        r = write_file(nss,
                       *text ? "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                               "networks: files\nprotocols: files\nservices: files\n"
                             : "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                               "networks: files\nprotocols: files\nservices: files\n",
                       err);
    free(text);
    return r;
}

static int local_env_init(sandbox_env_t *env, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    if (cfg->mode == SANDBOX_NONE && cfg->egress_allow && *cfg->egress_allow)
        return sg_error_set(err, SG_E_INVALID,
                            "--egress-allow needs sandboxes (--sandbox runsc): plain kernels "
                            "have the host's network");
    const char *state_dir = env->state_dir;
    env->etc_dir = xasprintf("%s/sandbox/etc", state_dir);
    env->rootfs_dir =
        cfg->rootfs ? xstrdup(cfg->rootfs) : xasprintf("%s/sandbox/rootfs", state_dir);
    env->runsc_root = xasprintf("%s/runsc", state_dir);
    cleanup_free char *kernels = xasprintf("%s/kernels", state_dir);
    if (make_dir(state_dir, 0711, err) < 0 || make_dir(kernels, 0711, err) < 0 ||
        make_dir(env->runsc_root, 0700, err) < 0)
        goto fail;
    env->init = init_path(cfg);
    env->launcher_py = launcher_py(env->init);
    if (cfg->mode == SANDBOX_RUNSC) {
        if (access(cfg->runsc, X_OK) != 0) {
            sg_error_set(err, SG_E_UNAVAILABLE,
                         "runsc not found at %s (install it with 'apt-get install runsc', or "
                         "use --sandbox=none for development)",
                         cfg->runsc);
            goto fail;
        }
        each_cgroup_mount(sweep_cgroups_in, NULL);
        if (egress_init(env, kernels, err) < 0)
            goto fail;
        if (build_etc(env->etc_dir, err) < 0 || write_resolver(env, err) < 0 ||
            (!cfg->rootfs && build_rootfs(env->rootfs_dir, err) < 0))
            goto fail;
        env->mask_debugpy = access("/usr/lib/python3/dist-packages/debugpy", F_OK) == 0;
        if (access(env->init, X_OK) != 0) {
            sg_error_set(err, SG_E_UNAVAILABLE,
                         "sandbox init %s is missing (run make install, "
                         "or set SANDGATE_INIT)",
                         env->init);
            goto fail;
        }
        /* The host's glibc runs in the sandbox unless --rootfs says otherwise. */
        char *dir = xstrdup(env->init);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        env->preload = xasprintf("%s/sandgate-preload.so", slash ? dir : ".");
        free(dir);
        if (cfg->rootfs || access(env->preload, R_OK) != 0) {
            if (!cfg->rootfs)
                log_warn("sandbox: %s is missing; 'ls -l' and 'stat' will fail in sandboxes",
                         env->preload);
            free(env->preload);
            env->preload = NULL;
        }
    }
    return 0;
fail:
    return sg_error_prefix(err, "preparing sandboxes in %s", state_dir);
}

/* --- workspaces ------------------------------------------------------------ */

static bool is_mountpoint(const char *path)
{
    struct stat a, b;
    cleanup_free char *parent = xasprintf("%s/..", path);
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

static int local_workspace_open(const sandbox_env_t *env, const char *path, sg_error_t **err)
{
    if (make_dir(path, 0755, err) < 0)
        return -1;
    if (env->cfg.workspace_bytes > 0 && !is_mountpoint(path)) {
        /* A sparse ext4 image per workspace: the size limit is the filesystem's. */
        cleanup_free char *img = xasprintf("%s.img", path);
        if (access(img, F_OK) != 0) {
            /* A new one: refuse it while there is room for it to start,
             * not when the sparse image fills in under a running session. */
            struct statvfs vfs;
            if (statvfs(env->state_dir, &vfs) == 0 &&
                (uint64_t)vfs.f_bavail * vfs.f_frsize < WORKSPACE_MIN_FREE)
                return sg_error_set(
                    err, SG_E_NOSPACE,
                    "the state directory's disk has %llu MiB free: no room for "
                    "a new workspace (sessions need at least %u MiB free)",
                    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20),
                    WORKSPACE_MIN_FREE >> 20);
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
                return sg_error_set(err,
                                    out && strstr(out, "No space left") ? SG_E_NOSPACE : SG_E_IO,
                                    "mkfs.ext4 %s failed: %s", img, out ? out : "");
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

/* Done before returning: there is never a request to cancel. */
static uint64_t local_workspace_open_async(const sandbox_env_t *env, const char *path,
                                           sandbox_opened_fn *cb, void *arg)
{
    sg_error_t *err = NULL;
    local_workspace_open(env, path, &err);
    cb(err, arg);
    sg_error_free(&err);
    return 0;
}

/* Never called with a request: every local operation finishes before
 * returning 0. */
static void local_cancel(uint64_t request)
{
}

static void local_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
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

/* The kernel's command line; `python -m ipykernel_launcher` becomes
 * `python LAUNCHER` (sandgate-kernel.py; sandbox_kernel.py says why). */
static char **kernel_argv(const kspec_t *spec, const char *connfile, const char *launcher)
{
    char **argv = kspec_argv(spec, connfile);
    if (launcher && argv[0] && argv[1] && argv[2] && strcmp(argv[1], "-m") == 0 &&
        strcmp(argv[2], "ipykernel_launcher") == 0) {
        free(argv[1]);
        free(argv[2]);
        argv[1] = xstrdup(launcher);
        for (char **a = argv + 2; *a; a++)
            a[0] = a[1];
    }
    return argv;
}

static json_t *oci_config(const sandbox_t *sb, const kspec_t *spec)
{
    const sandbox_config_t *cfg = &sb->env->cfg;
    char **argv =
        kernel_argv(spec, "/conn/kernel.json", sb->env->launcher_py ? "/sandgate-kernel.py" : NULL);
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
    /* The kernel binds abstract sockets, the sandbox's own; sandgate-init
     * relays the host's sockets in /conn to them (sandbox_init.c). */
    const int *p = sb->conn.ports;
    json_array_append_new(env,
                          json_sprintf("SANDGATE_RELAY=/conn/kernel=" RELAY_INNER ":%d,%d,%d,%d,%d",
                                       p[0], p[1], p[2], p[3], p[4]));
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
    if (sb->env->launcher_py)
        json_array_append_new(mounts, oci_mount("/sandgate-kernel.py", "bind", sb->env->launcher_py,
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
    if (sb->internet) { /* its own namespace, made by egress_sandbox_up */
        size_t i;
        json_t *ns;
        json_array_foreach (json_object_get(linux_, "namespaces"), i, ns)
            if (strcmp(json_string_value(json_object_get(ns, "type")), "network") == 0)
                json_object_set_new(ns, "path", json_sprintf("/var/run/netns/sandgate-%s", sb->id));
    }
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

static int local_prepare(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    cleanup_free char *conndir = xasprintf("%s/conn", sb->dir);
    cleanup_free char *bundle = xasprintf("%s/bundle", sb->dir);
    cleanup_free char *prefix = xasprintf("%s/kernel", conndir);
    cleanup_free char *connfile = xasprintf("%s/kernel.json", conndir);
    cleanup_free char *record = xasprintf("%s/connection.json", sb->dir);
    /* The daemon's unprivileged half reaches the sockets in conn/ through the
     * sandbox group; everything else here is root's. */
    if (make_dir(sb->dir, 0711, err) < 0 || make_dir(conndir, 0750, err) < 0 ||
        jconn_init(&sb->conn, "ipc", prefix, err) < 0)
        goto fail;
    strncpy(sb->conn.kernel_name, spec->name, sizeof sb->conn.kernel_name - 1);
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
    if (jconn_write(&sb->conn, record, err) < 0)
        goto fail;

    if (sb->env->cfg.mode == SANDBOX_NONE) {
        if (jconn_write(&sb->conn, connfile, err) < 0)
            goto fail;
        sb->plain_argv = kernel_argv(spec, connfile, sb->env->launcher_py);
        sb->plain_env = plain_env(spec, sb->dir);
        return 0;
    }
    /* The kernel runs as the sandbox user and rewrites its connection file. */
    if (chown(conndir, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", conndir);
        goto fail;
    }
    jconn_t inside = sb->conn;
    strcpy(inside.ip, RELAY_INNER);
    if (jconn_write(&inside, connfile, err) < 0)
        goto fail;
    if (chown(connfile, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", connfile);
        goto fail;
    }
    if (sb->internet) {
        if (sb->env->egress == NULL) {
            sg_error_set(err, SG_E_INVALID,
                         "this server gives sandboxes no network (start it with --egress-allow)");
            goto fail;
        }
        char *ns = egress_sandbox_up(sb->env->egress, sb->id, sb->dir, err);
        if (ns == NULL)
            goto fail;
        free(ns);
    }
    if (make_dir(bundle, 0700, err) < 0 || write_bundle(sb, spec, bundle, err) < 0)
        goto fail;
    return 0;
fail:
    sg_error_prefix(err, "preparing sandbox %s", sb->id);
    if (sb->internet)
        egress_sandbox_down(sb->id, sb->dir);
    remove_tree(sb->dir);
    return -1;
}

static int local_adopt(sandbox_t *sb, pid_t pid, sg_error_t **err)
{
    /* sandgate's copy: the one in conn/ is the sandbox's to change. */
    cleanup_free char *record = xasprintf("%s/connection.json", sb->dir);
    if (jconn_read(&sb->conn, record, err) < 0)
        return -1;
    if (strcmp(sb->conn.transport, "ipc") != 0)
        return sg_error_set(err, SG_E_INVALID, "%s: not an ipc connection", record);
    snprintf(sb->conn.ip, sizeof sb->conn.ip, "%s/conn/kernel", sb->dir);
    cleanup_free char *img = xasprintf("%s/checkpoint/checkpoint.img", sb->dir);
    if (pid == 0 && access(img, R_OK) < 0)
        return sg_error_errno(err, errno, "paused sandbox %s has no checkpoint", sb->id);
    sb->internet = egress_sandbox_has(sb->dir);
    if (sb->internet && sb->env->egress == NULL)
        log_warn("sandbox %s has a network, but --egress-allow is empty now: it reaches nothing",
                 sb->id);
    return 0;
}

static void pausing_end(sandbox_t *sb);

static void local_release(sandbox_t *sb)
{
    pausing_end(sb);
    if (sb->pending > 0)
        proc_unwatch(sb->pending); /* no callback into freed memory */
}

/* The last max bytes of the kernel's log, "" without one (a new string). */
static char *read_log_tail(const sandbox_t *sb, size_t max)
{
    cleanup_free char *path = xasprintf("%s/kernel.log", sb->dir);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = xmalloc(max + 1);
    buf[0] = 0;
    if (fd >= 0) {
        off_t size = lseek(fd, 0, SEEK_END);
        off_t from = size > (off_t)max ? size - (off_t)max : 0;
        ssize_t n = pread(fd, buf, max, from);
        buf[n > 0 ? n : 0] = 0;
    }
    return buf;
}

/* A local file, read at once: cb is called before returning. */
static uint64_t local_log_tail(const sandbox_t *sb, size_t max, sandbox_tail_fn *cb, void *arg)
{
    cleanup_free char *tail = read_log_tail(sb, max);
    cb(tail, arg);
    return 0;
}

/* runsc's global flags, then the command's. */
static const char **runsc_argv(const sandbox_env_t *env, const char *const *cmd)
{
    static const char *argv[40];
    size_t n = 0;
    argv[n++] = env->cfg.runsc;
    argv[n++] = "--root";
    argv[n++] = env->runsc_root;
    for (; *cmd && n < 31; cmd++)
        argv[n++] = *cmd;
    argv[n] = NULL;
    return argv;
}

/* runsc run or restore of a sandbox with a network (--network=sandbox).
 * runsc 2022-12-19 takes the namespace it is given for the host's own when
 * /proc/sys/net/core/rmem_default exists in it, and refuses ("cannot run
 * with network enabled in root network namespace"); newer Linux (6.x)
 * shows that file in every namespace.  So runsc starts in a mount
 * namespace of its own where /proc/sys/net is an empty read-only tmpfs:
 * nothing else of it reads /proc/sys/net. */
static const char **runsc_net_argv(const sandbox_env_t *env, bool internet, const char *const *cmd)
{
    const char **argv = runsc_argv(env, cmd);
    if (!internet)
        return argv;
    static const char *const wrap[] = {
        "/usr/bin/unshare",
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        "mount -t tmpfs -o ro,size=4k sandgate-no-sysctl /proc/sys/net && exec \"$0\" \"$@\""};
    size_t w = sizeof wrap / sizeof *wrap, n = 0;
    while (argv[n])
        n++;
    memmove(argv + w, argv, (n + 1) * sizeof *argv);
    memcpy(argv, wrap, sizeof wrap);
    return argv;
}

static sg_error_t *start_error(sandbox_t *sb, const char *what, const char *output)
{
    sg_error_t *err = NULL;
    cleanup_free char *tail = read_log_tail(sb, 2000);
    /* runsc run prints nothing of its own; what it says is in the log. */
    sg_error_set(&err, SG_E_UNAVAILABLE, "sandbox %s: %s%s%s%s%s", sb->id, what,
                 *output ? ": " : "", output, *tail ? "; kernel log:\n" : "", tail);
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

static int local_start(sandbox_t *sb, sg_error_t **err)
{
    cleanup_free char *log = xasprintf("%s/kernel.log", sb->dir);
    if (sb->env->cfg.mode == SANDBOX_NONE) {
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
    cleanup_free char *bundle = xasprintf("%s/bundle", sb->dir);
    const char *cmd[] = {"--platform",
                         sb->env->cfg.platform,
                         sb->internet ? "--network=sandbox" : "--network=none",
                         "--host-uds=create",
                         "run",
                         "-detach",
                         "-bundle",
                         bundle,
                         sb->id,
                         NULL};
    /* runsc's stdout/stderr become the kernel's: both go to kernel.log. */
    proc_spec_t spec = {
        .argv = runsc_net_argv(sb->env, sb->internet, cmd), .output = log, .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0)
        return -1;
    if (proc_watch(pid, run_exited, sb, err) < 0)
        return -1;
    sb->pending = pid;
    return 0;
}

static void ignore_done(int status, const char *output, void *arg)
{
    if (status != 0)
        log_debug("sandbox: %s: %s", (const char *)arg, output);
}

/* --- pause and resume: runsc checkpoint / restore ------------------------------------
 * runsc cannot save a sandbox that holds host sockets, and fails by killing
 * it.  The kernel's own sockets are inside (abstract); only sandgate-init's
 * relay holds host ones.  A pause therefore (1) tells init to let go of
 * them (SIGUSR1) and waits for its word (conn/kernel.detached), removes
 * the socket files, (2) checks
 * that the disk can hold the image (the sandbox's memory, an upper bound:
 * runsc compresses it), (3) checkpoints into kernels/<id>/checkpoint/,
 * (4) deletes the stopped container.  The workspace stays mounted, so the
 * files API works on a paused session without waking it.  A resume
 * mounts the workspace if it is not (after a reboot), restores, tells init to listen again
 * (SIGUSR2), waits for the socket files and reads the new pid (runsc state). */

#define PAUSE_POLL_MS 2
#define DETACH_TIMEOUT_MS 3000
#define ATTACH_TIMEOUT_MS 10000
#define CHECKPOINT_MARGIN (32ull << 20)

typedef enum { P_DETACH, P_CHECKPOINT, P_DELETE, R_RESTORE, R_ATTACH } pause_step_t;

struct pausing {
    sandbox_t *sb;
    pause_step_t step;
    int timer;
    int waited_ms;
    long long cpu_quota, cpu_period; /* to put back after a restore; 0: none */
    pid_t child;                     /* the runsc command under way; 0: none */
};

/* STATE/workspaces/<kernel uuid>: the sandbox id is the uuid and "-<generation>". */
static char *workspace_of(const sandbox_t *sb)
{
    return xasprintf("%s/workspaces/%.36s", sb->env->state_dir, sb->id);
}

static char *image_dir(const sandbox_t *sb)
{
    return xasprintf("%s/checkpoint", sb->dir);
}

static void relay_path(const sandbox_t *sb, int c, struct sockaddr_un *sa)
{
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    snprintf(sa->sun_path, sizeof sa->sun_path, "%s/conn/kernel-%d", sb->dir, sb->conn.ports[c]);
}

/* Whether every host socket of the relay exists: it listens again. */
static bool relay_attached(const sandbox_t *sb)
{
    for (int c = 0; c < JCHAN_COUNT; c++) {
        struct sockaddr_un sa;
        relay_path(sb, c, &sa);
        if (access(sa.sun_path, F_OK) < 0)
            return false;
    }
    return true;
}

/* Whether the relay has let go of every host socket: it says so with the
 * file conn/kernel.detached, made last.  (The host cannot tell by the
 * sockets: runsc's gofer keeps them listening.) */
static bool relay_detached(const sandbox_t *sb)
{
    cleanup_free char *marker = xasprintf("%s/conn/kernel.detached", sb->dir);
    return access(marker, F_OK) == 0;
}

/* The relay refused to detach: the number of TCP/UDP sockets open in the
 * sandbox (0: it did not refuse).  conn/ is the sandbox's to write: the
 * file is read without following links or blocking, as a number only.  (Code
 * in the sandbox can forge either file; it only harms its own session.) */
static int relay_refused(const sandbox_t *sb)
{
    cleanup_free char *path = xasprintf("%s/conn/kernel.refused", sb->dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[16] = "";
    struct stat st;
    ssize_t got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    unlink(path);
    int n = got > 0 ? atoi(buf) : 0;
    return n > 0 ? n : 1;
}

/* The sandbox cannot remove host socket files (the gofer does not let it
 * touch them): this side does, so the relay's bind finds the paths free
 * after a restore. */
static void relay_unlink(const sandbox_t *sb)
{
    for (int c = 0; c < JCHAN_COUNT; c++) {
        struct sockaddr_un sa;
        relay_path(sb, c, &sa);
        unlink(sa.sun_path);
    }
    relay_refused(sb);
}

/* Lets a detached relay listen again: it watches for its marker to go
 * (sandbox_init.c) — no runsc command on a resume's path. */
static void relay_release(const sandbox_t *sb)
{
    cleanup_free char *marker = xasprintf("%s/conn/kernel.detached", sb->dir);
    unlink(marker);
}

static void pausing_end(sandbox_t *sb)
{
    struct pausing *p = sb->pausing;
    if (p == NULL)
        return;
    if (p->timer >= 0)
        loop_timer_end(proc_loop(), p->timer);
    if (p->child > 0)
        proc_unwatch(p->child);
    free(p);
    sb->pausing = NULL;
}

static void runsc_signal(sandbox_t *sb, int sig)
{
    char signame[16];
    snprintf(signame, sizeof signame, "%d", sig);
    const char *cmd[] = {"kill", sb->id, signame, NULL};
    sg_error_t *err = NULL;
    if (proc_exec_async(runsc_argv(sb->env, cmd), ignore_done, (void *)"runsc kill", &err) < 0) {
        log_warn("sandbox %s: %s", sb->id, err->msg);
        sg_error_free(&err);
    }
}

static void pause_failed(sandbox_t *sb, sg_error_t *err)
{
    pausing_end(sb);
    cleanup_free char *img = image_dir(sb);
    remove_tree(img);
    bool alive = sb->pid > 0 && (kill(sb->pid, 0) == 0 || errno == EPERM);
    if (alive) { /* listen again: a detached init sees its marker go; a late one gets USR2 */
        relay_release(sb);
        runsc_signal(sb, SIGUSR2);
    }
    sg_error_prefix(&err, "pausing sandbox %s", sb->id);
    sb->paused_cb(sb, 0, err, alive, sb->paused_arg);
}

static int run_step(sandbox_t *sb, const char *const *cmd, proc_done_fn *done, sg_error_t **err)
{
    bool net = sb->internet && sb->pausing->step == R_RESTORE;
    pid_t child = proc_exec_async(runsc_net_argv(sb->env, net, cmd), done, sb, err);
    if (child < 0)
        return -1;
    sb->pausing->child = child;
    return 0;
}

static void delete_after_checkpoint(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pausing->child = 0;
    if (status != 0)
        log_warn("sandbox %s: runsc delete after checkpoint: %s", sb->id, output);
    cgroup_remove(sb->id);
    pausing_end(sb);
    cleanup_free char *img = xasprintf("%s/checkpoint/checkpoint.img", sb->dir);
    struct stat st;
    uint64_t bytes = stat(img, &st) == 0 ? (uint64_t)st.st_size : 0;
    sb->pid = 0;
    sb->paused_cb(sb, bytes, NULL, false, sb->paused_arg);
}

static void checkpoint_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pausing->child = 0;
    sg_error_t *err = NULL;
    if (status != 0) {
        /* runsc's message ends with a Go stack: its first line says it. */
        const char *nl = strchr(output, '\n');
        sg_error_set(&err, strstr(output, "no space left") ? SG_E_NOSPACE : SG_E_UNAVAILABLE,
                     "runsc checkpoint: %.*s", (int)(nl ? nl - output : (int)strlen(output)),
                     output);
        pause_failed(sb, err);
        return;
    }
    const char *cmd[] = {"delete", "-force", sb->id, NULL};
    if (run_step(sb, cmd, delete_after_checkpoint, &err) < 0)
        pause_failed(sb, err);
}

/* The sandbox's memory as its cgroup counts it; 0 when unknown. */
static uint64_t memory_usage(const sandbox_t *sb)
{
    cleanup_free char *path =
        xasprintf("/sys/fs/cgroup/memory/sandgate/%s/memory.usage_in_bytes", sb->id);
    FILE *f = fopen(path, "re");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void checkpoint(sandbox_t *sb)
{
    sg_error_t *err = NULL;
    struct statvfs vfs;
    uint64_t need = memory_usage(sb) + CHECKPOINT_MARGIN;
    if (statvfs(sb->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        sg_error_set(&err, SG_E_NOSPACE,
                     "the state directory's disk has %llu MiB free; the checkpoint may need "
                     "%llu MiB (the sandbox's memory); the session keeps running",
                     (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20),
                     (unsigned long long)(need >> 20));
        pause_failed(sb, err);
        return;
    }
    cleanup_free char *img = image_dir(sb);
    remove_tree(img);
    if (make_dir(img, 0700, &err) < 0) {
        pause_failed(sb, err);
        return;
    }
    sb->pausing->step = P_CHECKPOINT;
    const char *cmd[] = {"checkpoint", "--image-path", img, sb->id, NULL};
    if (run_step(sb, cmd, checkpoint_done, &err) < 0)
        pause_failed(sb, err);
}

static void on_detach_poll(loop_t *loop, int timer_id, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    if (relay_detached(sb)) {
        loop_timer_end(loop, p->timer);
        p->timer = -1;
        relay_unlink(sb);
        checkpoint(sb);
        return;
    }
    sg_error_t *err = NULL;
    int sockets = relay_refused(sb);
    if (sockets > 0) {
        sg_error_set(&err, SG_E_CONFLICT,
                     "the session has %d TCP/UDP socket%s open (a server started in it?), which "
                     "a checkpoint cannot keep; close %s to pause it",
                     sockets, sockets == 1 ? "" : "s", sockets == 1 ? "it" : "them");
        pause_failed(sb, err);
        return;
    }
    if ((p->waited_ms += PAUSE_POLL_MS) < DETACH_TIMEOUT_MS)
        return;
    sg_error_set(&err, SG_E_UNAVAILABLE,
                 "sandgate-init did not release the kernel's sockets within %d ms",
                 DETACH_TIMEOUT_MS);
    pause_failed(sb, err);
}

static int local_pause(sandbox_t *sb, sg_error_t **err)
{
    if (sb->pausing || sb->pid <= 0)
        return sg_error_set(err, SG_E_CONFLICT, "sandbox %s is not running", sb->id);
    cleanup_free char *stale = xasprintf("%s/conn/kernel.detached", sb->dir);
    unlink(stale);
    relay_refused(sb);
    sb->pausing = xzalloc(sizeof *sb->pausing);
    *sb->pausing = (struct pausing){.sb = sb, .step = P_DETACH, .timer = -1};
    runsc_signal(sb, SIGUSR1);
    sb->pausing->timer = loop_timer(proc_loop(), PAUSE_POLL_MS, 0, on_detach_poll, sb);
    return 0;
}

static void resume_failed(sandbox_t *sb, sg_error_t *err)
{
    pausing_end(sb);
    sg_error_prefix(&err, "resuming sandbox %s", sb->id);
    sb->started_cb(sb, -1, err, sb->started_arg);
}

static void on_attach_poll(loop_t *loop, int timer_id, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    sg_error_t *err = NULL;
    if (relay_attached(sb)) {
        /* runsc restore wrote the sandbox's pid (--pid-file). */
        cleanup_free char *pidfile = xasprintf("%s/restore.pid", sb->dir);
        FILE *f = fopen(pidfile, "re");
        int pid = 0;
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        unlink(pidfile);
        pausing_end(sb);
        cleanup_free char *img = image_dir(sb);
        remove_tree(img); /* restored: the image is spent */
        if (pid <= 0) {
            sg_error_set(&err, SG_E_UNAVAILABLE, "runsc restore left no pid in %s", pidfile);
            sb->started_cb(sb, -1, err, sb->started_arg);
            return;
        }
        sb->pid = (pid_t)pid;
        sb->started_cb(sb, sb->pid, NULL, sb->started_arg);
        return;
    }
    if ((p->waited_ms += PAUSE_POLL_MS) < ATTACH_TIMEOUT_MS)
        return;
    sg_error_set(&err, SG_E_UNAVAILABLE,
                 "the restored sandbox did not listen on its sockets within %d ms",
                 ATTACH_TIMEOUT_MS);
    resume_failed(sb, err);
}

static void restore_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    p->child = 0;
    if (status != 0) {
        const char *nl = strchr(output, '\n');
        sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_UNAVAILABLE, "runsc restore: %.*s",
                     (int)(nl ? nl - output : (int)strlen(output)), output);
        resume_failed(sb, err);
        return;
    }
    sg_error_t *err = NULL;
    if (p->cpu_quota > 0 && cgroup_set_cpu(sb->id, p->cpu_quota, p->cpu_period, &err) < 0) {
        resume_failed(sb, err); /* the kernel is stopped with the error */
        return;
    }
    p->step = R_ATTACH;
    relay_release(sb);
    p->waited_ms = 0;
    p->timer = loop_timer(proc_loop(), PAUSE_POLL_MS, 0, on_attach_poll, sb);
}

/* The bundle runsc restore reads: the sandbox's own, but without its CPU
 * quota (restore-bundle/config.json), which *quota and *period get.
 * Restoring decompresses the whole memory image, and at one CPU that is
 * half of a resume; the quota goes back on (cgroup_set_cpu) before the
 * kernel is reached again. */
static char *restore_bundle(const sandbox_t *sb, long long *quota, long long *period,
                            sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/bundle/config.json", sb->dir);
    json_error_t jerr;
    json_t *config = json_load_file(path, 0, &jerr);
    if (config == NULL) {
        sg_error_set(err, SG_E_IO, "cannot read %s: %s", path, jerr.text);
        return NULL;
    }
    json_t *cpu =
        json_object_get(json_object_get(json_object_get(config, "linux"), "resources"), "cpu");
    *quota = json_integer_value(json_object_get(cpu, "quota"));
    *period = json_integer_value(json_object_get(cpu, "period"));
    if (*quota <= 0 || *period <= 0) {
        json_decref(config);
        *quota = *period = 0;
        return xasprintf("%s/bundle", sb->dir);
    }
    json_object_del(cpu, "quota");
    char *bundle = xasprintf("%s/restore-bundle", sb->dir);
    cleanup_free char *out = xasprintf("%s/config.json", bundle);
    int r = make_dir(bundle, 0700, err) < 0 ? -1 : json_dump_file(config, out, JSON_INDENT(2));
    json_decref(config);
    if (r < 0) {
        if (err && *err == NULL)
            sg_error_set(err, SG_E_IO, "cannot write %s", out);
        free(bundle);
        return NULL;
    }
    return bundle;
}

static int local_resume(sandbox_t *sb, sg_error_t **err)
{
    cleanup_free char *img = xasprintf("%s/checkpoint/checkpoint.img", sb->dir);
    if (sb->pausing || sb->pid > 0)
        return sg_error_set(err, SG_E_CONFLICT, "sandbox %s is not paused", sb->id);
    if (access(img, R_OK) < 0)
        return sg_error_errno(err, errno, "sandbox %s has no checkpoint (%s)", sb->id, img);
    if (sb->workspace == NULL)
        sb->workspace = workspace_of(sb);
    if (local_workspace_open(sb->env, sb->workspace, err) < 0)
        return -1;
    relay_unlink(sb); /* left by a machine that went down (or a failed attach) */
    cleanup_free char *dir = image_dir(sb);
    long long quota = 0, period = 0;
    cleanup_free char *bundle = restore_bundle(sb, &quota, &period, err);
    if (bundle == NULL)
        return -1;
    cleanup_free char *pidfile = xasprintf("%s/restore.pid", sb->dir);
    unlink(pidfile);
    /* The same global flags as run: restore needs the sandbox it saved. */
    if (sb->internet) { /* its namespace, again after a reboot */
        char *ns = egress_sandbox_up(sb->env->egress, sb->id, sb->dir, err);
        if (ns == NULL)
            return -1;
        free(ns);
    }
    const char *cmd[] = {"--platform",
                         sb->env->cfg.platform,
                         sb->internet ? "--network=sandbox" : "--network=none",
                         "--host-uds=create",
                         "restore",
                         "-detach",
                         "-pid-file",
                         pidfile,
                         "-bundle",
                         bundle,
                         "--image-path",
                         dir,
                         sb->id,
                         NULL};
    sb->pausing = xzalloc(sizeof *sb->pausing);
    *sb->pausing = (struct pausing){
        .sb = sb, .step = R_RESTORE, .timer = -1, .cpu_quota = quota, .cpu_period = period};
    if (run_step(sb, cmd, restore_done, err) < 0) {
        pausing_end(sb);
        return -1;
    }
    return 0;
}

static int local_signal(sandbox_t *sb, int sig, sg_error_t **err)
{
    if (sb->env->cfg.mode == SANDBOX_NONE) {
        if (sb->pid > 0 && kill(sb->pid, sig) < 0)
            return sg_error_errno(err, errno, "kill %d", (int)sb->pid);
        return 0;
    }
    char signame[16];
    snprintf(signame, sizeof signame, "%d", sig);
    const char *cmd[] = {"kill", sb->id, signame, NULL};
    return proc_exec_async(runsc_argv(sb->env, cmd), ignore_done, (void *)"runsc kill", err) < 0
               ? -1
               : 0;
}

typedef struct {
    char *dir, *id;
} removal_t;

static void delete_done(int status, const char *output, void *arg)
{
    removal_t *r = arg;
    if (status != 0)
        log_warn("sandbox: runsc delete failed: %s", output);
    cgroup_remove(r->id);
    egress_sandbox_down(r->id, r->dir);
    remove_tree(r->dir);
    free(r->dir);
    free(r->id);
    free(r);
}

static void local_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
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
        cgroup_remove(id);
        egress_sandbox_down(id, dir);
        remove_tree(dir);
        return;
    }
    removal_t *r = xzalloc(sizeof *r);
    r->dir = xstrdup(dir);
    r->id = xstrdup(id);
    sg_error_t *err = NULL;
    if (proc_exec_async(runsc_argv(env, cmd), delete_done, r, &err) < 0) {
        log_warn("sandbox: cannot remove %s: %s", id, err->msg);
        sg_error_free(&err);
        free(r->dir);
        free(r->id);
        free(r);
    }
}

static void local_stop(sandbox_t *sb)
{
    pausing_end(sb);
    if (sb->pending > 0) {
        /* Still starting: stop runsc run first, or it creates the container
         * after the delete (remove_id) has found none. */
        proc_unwatch(sb->pending);
        kill(-sb->pending, SIGKILL);
        sb->pending = 0;
    }
    if (sb->env->cfg.mode == SANDBOX_NONE && sb->pid > 0) {
        kill(-sb->pid, SIGKILL); /* its own session and process group */
        kill(sb->pid, SIGKILL);
    }
}

static json_t *local_list(sandbox_env_t *env, sg_error_t **err)
{
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

static void local_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    sg_error_t *err = NULL;
    cleanup_free char *kernels = xasprintf("%s/kernels", env->state_dir);
    if (env->egress == NULL)
        sg_error_set(&err, SG_E_INVALID,
                     "this server gives sandboxes no network (start it with --egress-allow)");
    if (err || egress_refused(kernels, cb, arg, &err) < 0) {
        cb(NULL, err, arg);
        sg_error_free(&err);
    }
}

/* Without root (a daemon not started as root) the file stays ours: the
 * group's permissions still let the code read and write it. */
static uint64_t local_give(int fd, sandbox_given_fn *cb, void *arg)
{
    if (fchown(fd, SANDBOX_UID, SANDBOX_GID) < 0)
        log_debug("sandbox: cannot give a file to the sandbox user: %s", strerror(errno));
    cb(NULL, arg);
    return 0;
}

const sandbox_ops_t sandbox_local_ops = {
    .env_init = local_env_init,
    .workspace_open = local_workspace_open,
    .workspace_open_async = local_workspace_open_async,
    .cancel = local_cancel,
    .workspace_close = local_workspace_close,
    .prepare = local_prepare,
    .adopt = local_adopt,
    .release = local_release,
    .start = local_start,
    .pause = local_pause,
    .resume = local_resume,
    .signal = local_signal,
    .stop = local_stop,
    .remove_id = local_remove_id,
    .list = local_list,
    .egress_refused = local_egress_refused,
    .log_tail = local_log_tail,
    .give = local_give,
};
