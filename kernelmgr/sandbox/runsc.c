/* runsc: the sandbox operations done in this process with runsc
 * (internal.h) — the shared /etc and root, OCI bundles, runsc
 * through proc.c; pause and resume are pause.c's, what plain
 * kernels share with these host.c's.  The launcher's table, and
 * that of a daemon without one (not started as root). */
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
#include "kernelmgr/sandbox/cgroup.h"

/* The kernel's socket prefix inside the sandbox: the abstract namespace,
 * which is the Sentry's own (per sandbox) and which runsc can checkpoint,
 * unlike host sockets.  sandgate-init relays /conn/kernel-N to it. */
#define RELAY_INNER "@sandgate-kernel"

static int build_etc(const char *dir, sg_error_t **err)
{
    /* The marker names what was copied: a list that grows makes a new one
     * (the Java kernel's configuration came with .complete-2). */
    cleanup_free char *done = xasprintf("%s/.complete-2", dir);
    if (access(done, F_OK) == 0)
        return 0;
    if (host_make_dir(dir, 0755, err) < 0)
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
        if (host_write_file(p, files[i].text, err) < 0)
            return -1;
    }
    /* Host files the runtime reads, each optional: the loader cache, Debian's
     * Python config (sitecustomize.py links into it), fonts, alternatives
     * (numpy finds libblas through them), MIME types, public certificates, R's
     * configuration (/usr/lib/R/etc links into it), the JDK's (its conf/
     * links into /etc/java-17-openjdk: java.security, which the JVM must read).
     * Symlinks are kept: they point into /usr, which the sandbox has. */
    static const char *copies[] = {"/etc/ld.so.cache",    "/etc/localtime", "/etc/python3",
                                   "/etc/python3.11",     "/etc/fonts",     "/etc/alternatives",
                                   "/etc/mime.types",     "/etc/ssl",       "/etc/R",
                                   "/etc/java-17-openjdk"};
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
    host_remove_tree(private_keys);
    if (access("/etc/matplotlibrc", R_OK) == 0) {
        /* Debian's says TkAgg; there is no display in a sandbox. */
        cleanup_free char *p = xasprintf("%s/matplotlibrc", dir);
        if (host_write_file(p, "backend: Agg\n", err) < 0)
            return -1;
    }
    const char *chmod_argv[] = {"/bin/chmod", "-R", "a+rX,go-w", dir, NULL};
    proc_run_sync(chmod_argv, NULL, NULL);
    return host_write_file(done, "", err);
}

static int build_rootfs(const char *dir, sg_error_t **err)
{
    static const char *dirs[] = {"usr", "etc", "proc", "dev", "sys", "tmp", "home/user", "conn"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        cleanup_free char *p = xasprintf("%s/%s", dir, dirs[i]);
        if (host_make_dir(p, 0755, err) < 0)
            return -1;
    }
    cleanup_free char *init = xasprintf("%s/sandgate-init", dir);
    cleanup_close int fd = open(init, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
    if (fd < 0)
        return sg_error_errno(err, errno, "cannot create %s", init);
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

static int egress_init(sandbox_env_t *env, const char *kernels, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    if (cfg->egress_allow == NULL || !*cfg->egress_allow)
        return 0;
    cleanup_free egress_policy_t *p = xzalloc(sizeof *p);
    if (egress_parse_allow(p, cfg->egress_allow, err) < 0 ||
        egress_parse_dns(p, cfg->egress_dns, err) < 0)
        return -1;
    p->max_conns = cfg->egress_max_conns;
    p->rate = cfg->egress_rate;
    p->ca_file = cfg->egress_ca_file;
    if (egress_setup(p, kernels, err) < 0)
        return -1;
    env->egress = p;
    p = NULL; /* env's now */
    log_info("egress: sandboxes that ask for it reach %s (DNS: %s)", cfg->egress_allow,
             cfg->egress_dns && *cfg->egress_dns ? cfg->egress_dns : "none");
    return 0;
}

/* The sandboxes' /etc/resolv.conf and the hosts line of nsswitch.conf:
 * --egress-dns's resolvers, or none. */
static int write_resolver(const sandbox_env_t *env, sg_error_t **err)
{
    const char *dns = env->cfg.egress_dns && env->egress ? env->cfg.egress_dns : "";
    cleanup_free char *text = NULL;
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
    int r = host_write_file(resolv, text, err);
    if (r == 0)
        r = host_write_file(nss,
                            *text ? "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                                    "networks: files\nprotocols: files\nservices: files\n"
                                  : "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                                    "networks: files\nprotocols: files\nservices: files\n",
                            err);
    return r;
}

/* The sandboxes' CA bundle: the host's, and the egress proxy's CA when it
 * runs (it opens the TLS of hosts whose rules set headers: proxy.c), also
 * alone in ssl/certs/sandgate-egress-ca.crt for NODE_EXTRA_CA_CERTS and
 * DENO_CERT.  Made
 * at every start, from the host's bundle of the day. */
#define PROXY_CA "/etc/ssl/certs/sandgate-egress-ca.crt"
static int trust_proxy(sandbox_env_t *env, sg_error_t **err)
{
    cleanup_free char *ca = egress_proxy_ca();
    cleanup_free char *bundle = xasprintf("%s/ssl/certs/ca-certificates.crt", env->etc_dir);
    cleanup_free char *alone = xasprintf("%s/ssl/certs/sandgate-egress-ca.crt", env->etc_dir);
    env->trusts_proxy = false;
    if (ca == NULL || access(bundle, F_OK) != 0)
        return 0;
    cleanup_free char *host = NULL;
    size_t len = 0;
    FILE *f = fopen("/etc/ssl/certs/ca-certificates.crt", "re");
    if (f && getdelim(&host, &len, 0, f) < 0) {
        free(host);
        host = NULL;
    }
    if (f)
        fclose(f);
    cleanup_free char *both = xasprintf("%s%s", host ? host : "", ca);
    if (host_write_file(bundle, both, err) < 0 || host_write_file(alone, ca, err) < 0 ||
        chmod(bundle, 0644) < 0 || chmod(alone, 0644) < 0)
        return -1;
    env->trusts_proxy = true;
    return 0;
}

static int runsc_env_init(sandbox_env_t *env, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    const char *state_dir = env->state_dir;
    env->etc_dir = xasprintf("%s/sandbox/etc", state_dir);
    env->rootfs_dir =
        cfg->rootfs ? xstrdup(cfg->rootfs) : xasprintf("%s/sandbox/rootfs", state_dir);
    env->runsc_root = xasprintf("%s/runsc", state_dir);
    cleanup_free char *kernels = xasprintf("%s/kernels", state_dir);
    if (host_make_dir(state_dir, 0711, err) < 0 || host_make_dir(kernels, 0711, err) < 0 ||
        host_make_dir(env->runsc_root, 0700, err) < 0)
        goto fail;
    env->init = host_init_path(cfg);
    env->launcher_py = host_launcher_py(env->init);
    if (access(cfg->runsc, X_OK) != 0) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "runsc not found at %s (scripts/runsc.sh builds and installs it, or "
                     "use --sandbox=none for development)",
                     cfg->runsc);
        goto fail;
    }
    cgroup_sweep();
    if (egress_init(env, kernels, err) < 0)
        goto fail;
    if (build_etc(env->etc_dir, err) < 0 || write_resolver(env, err) < 0 ||
        trust_proxy(env, err) < 0 || (!cfg->rootfs && build_rootfs(env->rootfs_dir, err) < 0) ||
        template_roots_init(env, err) < 0)
        goto fail;
    env->mask_debugpy = access("/usr/lib/python3/dist-packages/debugpy", F_OK) == 0;
    if (access(env->init, X_OK) != 0) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "sandbox init %s is missing (run make install, "
                     "or set SANDGATE_INIT)",
                     env->init);
        goto fail;
    }
    env->preload = host_find_preload(env);
    host_snapshot_sweep(env);
    return 0;
fail:
    return sg_error_prefix(err, "preparing sandboxes in %s", state_dir);
}

/* --- one sandbox ------------------------------------------------------------- */

static json_t *oci_mount(const char *dest, const char *type, const char *source, json_t *options)
{
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type, "source", source,
                     "options", options);
}

/* The kernel's command line; `python -m ipykernel_launcher` becomes
 * `python LAUNCHER` (sandgate-kernel.py; guest/kernel.py says why). */

/* Node's and Deno's stores are their own: they are told of the proxy's CA. */
static void proxy_ca_env(const sandbox_t *sb, json_t *env)
{
    if (!sb->internet || !sb->env->trusts_proxy)
        return;
    json_array_append_new(env, json_string("NODE_EXTRA_CA_CERTS=" PROXY_CA));
    json_array_append_new(env, json_string("DENO_CERT=" PROXY_CA));
}

static json_t *oci_config(const sandbox_t *sb, const kspec_t *spec)
{
    const sandbox_config_t *cfg = &sb->env->cfg;
    /* A root of its own (--rootfs, a template's) brings its /usr and /etc,
     * and perhaps a libc sandgate-preload.so was not built for. */
    const char *root = template_root_dir(sb->env, sb->template);
    bool own = root || cfg->rootfs;
    root = root ? root : sb->env->rootfs_dir;
    const char *preload = own ? NULL : sb->env->preload;
    char **argv = host_kernel_argv(spec, "/conn/kernel.json",
                                   sb->env->launcher_py ? "/sandgate-kernel.py" : NULL);
    json_t *args = json_pack("[s]", "/sandgate-init");
    for (char **a = argv; *a; a++)
        json_array_append_new(args, json_string(*a));
    kspec_argv_free(argv);

    json_t *env = json_pack(
        "[s, s, s, s, s, s, s, s]", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user",
        "USER=user", "LANG=C.UTF-8", "MPLCONFIGDIR=/tmp/matplotlib", "IPYTHONDIR=/tmp/ipython",
        "JUPYTER_RUNTIME_DIR=/tmp/jupyter-runtime", "PYDEVD_DISABLE_FILE_VALIDATION=1");
    if (preload)
        json_array_append_new(env, json_string("SANDGATE_PRELOAD=/sandgate-preload.so"));
    proxy_ca_env(sb, env);
    /* The kernel binds abstract sockets, the sandbox's own; sandgate-init
     * relays the host's sockets in /conn to them (guest/init.c). */
    const int *p = sb->conn.ports;
    json_array_append_new(env,
                          json_sprintf("SANDGATE_RELAY=/conn/kernel=" RELAY_INNER ":%d,%d,%d,%d,%d",
                                       p[0], p[1], p[2], p[3], p[4]));
    if (sandbox_env_can_save_live(sb->env)) /* its runsc saves TCP and UDP sockets */
        json_array_append_new(env, json_string("SANDGATE_SAVES_INET=1"));
    if (spec->tcp_only) /* sandgate-preload.so binds its TCP ports there (runsc_prepare) */
        json_array_append_new(env, json_string("SANDGATE_TCP_AS_IPC=" RELAY_INNER));
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
    if (!own) {
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
    if (preload)
        json_array_append_new(mounts, oci_mount("/sandgate-preload.so", "bind", preload,
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
    size_t nvol; /* volumes, after /home/user: one may be inside it */
    json_t *vol;
    json_array_foreach (sb->mounts, nvol, vol)
        json_array_append_new(
            mounts,
            oci_mount(json_string_value(json_object_get(vol, "path")), "bind",
                      json_string_value(json_object_get(vol, "source")),
                      json_pack("[s, s, s, s]", "rbind",
                                json_is_true(json_object_get(vol, "read_only")) ? "ro" : "rw",
                                "nosuid", "nodev")));

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
    json_t *linux_ = json_pack(
        "{s:s, s:{s:{s:I}, s:{s:I, s:I}, s:{s:I}}, s:[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}],"
        " s:[s, s, s, s], s:[s, s]}",
        "cgroupsPath", sb->cgroup, "resources", "memory", "limit", (json_int_t)sb->memory_bytes,
        "cpu", "quota", (json_int_t)sb->cpu_quota_us, "period", (json_int_t)100000, "pids", "limit",
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
                     process, "root", "path", root, "readonly", 1, "hostname", "sandbox", "mounts",
                     mounts, "linux", linux_);
}

/* Mode none: our environment plus the kernelspec's, with private IPython and
 * matplotlib directories. */

static int write_bundle(const sandbox_t *sb, const kspec_t *spec, const char *bundle,
                        sg_error_t **err)
{
    json_t *config = oci_config(sb, spec);
    cleanup_free char *path = xasprintf("%s/config.json", bundle);
    int r = json_dump_file(config, path, JSON_INDENT(2));
    json_decref(config);
    return r < 0 ? sg_error_set(err, SG_E_IO, "cannot write %s", path) : 0;
}

static int runsc_prepare(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    cleanup_free char *conndir = xasprintf("%s/conn", sb->dir);
    cleanup_free char *bundle = xasprintf("%s/bundle", sb->dir);
    cleanup_free char *connfile = xasprintf("%s/kernel.json", conndir);
    if (host_prepare_conn(sb, spec, err) < 0)
        goto fail;
    /* The kernel runs as the sandbox user and rewrites its connection file. */
    if (chown(conndir, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", conndir);
        goto fail;
    }
    /* A kernel that speaks TCP only needs sandgate-preload.so, which a root
     * of its own does not load (oci_config). */
    if (spec->tcp_only && (sb->env->preload == NULL || template_root_dir(sb->env, sb->template) ||
                           sb->env->cfg.rootfs)) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "kernel '%s' speaks TCP only and needs sandgate-preload.so, which a sandbox "
                     "with a root of its own (--rootfs, a template's image) does not load",
                     spec->name);
        goto fail;
    }
    if (host_write_kernel_conn(sb, spec, RELAY_INNER, connfile, NULL, err) < 0)
        goto fail;
    if (chown(connfile, SANDBOX_UID, SANDBOX_GID) < 0) {
        sg_error_errno(err, errno, "chown %s", connfile);
        goto fail;
    }
    if (sb->snapshot) {
        /* The image's init is detached, and its marker was in conn/ when
         * it was saved: a restore walks every file the sandbox knew, and
         * fails on one that is not there ("failed to walk
         * kernel.detached").  Removed once restored, which lets init
         * listen again (pause.c's relay_release). */
        cleanup_free char *marker = xasprintf("%s/kernel.detached", conndir);
        int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0660);
        if (fd < 0 || fchown(fd, SANDBOX_UID, SANDBOX_GID) < 0) {
            sg_error_errno(err, errno, "cannot create %s", marker);
            if (fd >= 0)
                close(fd);
            goto fail;
        }
        close(fd);
    }
    if (sb->internet) {
        if (sb->env->egress == NULL) {
            sg_error_set(err, SG_E_INVALID,
                         "this server gives sandboxes no network (start it with --egress-allow)");
            goto fail;
        }
        egress_own_t own = {sb->egress_allow, sb->egress_deny, sb->egress_transforms, sb->tenant};
        if (egress_sandbox_rules(sb->dir, &own, err) < 0) /* in place before it runs */
            goto fail;
        cleanup_free char *ns =
            egress_sandbox_up(sb->env->egress, sb->id, sb->dir, sb->snapshot != NULL, err);
        if (ns == NULL)
            goto fail;
    }
    if (host_make_dir(bundle, 0700, err) < 0 || write_bundle(sb, spec, bundle, err) < 0)
        goto fail;
    if (sb->snapshot && snapshot_attach(sb, err) < 0)
        goto fail;
    cgroup_prepare(sb->cgroup);
    return 0;
fail:
    sg_error_prefix(err, "preparing sandbox %s", sb->id);
    if (sb->internet)
        egress_sandbox_down(sb->id, sb->dir);
    host_remove_tree(sb->dir);
    return -1;
}

static void runsc_release(sandbox_t *sb)
{
    runsc_pausing_end(sb);
    if (sb->pending > 0)
        proc_unwatch(sb->pending); /* no callback into freed memory */
}

/* The last max bytes of the kernel's log, "" without one (a new string). */

const char **runsc_argv(const sandbox_env_t *env, const char *const *cmd)
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
const char **runsc_net_argv(const sandbox_env_t *env, bool internet, const char *const *cmd)
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
    cleanup_free char *tail = host_read_log_tail(sb, 2000);
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

static int runsc_start(sandbox_t *sb, sg_error_t **err)
{
    if (sb->snapshot) /* prepared as the snapshot's paused sandbox (snapshot_attach) */
        return runsc_resume(sb, err);
    cleanup_free char *log = xasprintf("%s/kernel.log", sb->dir);
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

void runsc_ignore_done(int status, const char *output, void *arg)
{
    if (status != 0)
        log_debug("sandbox: %s: %s", (const char *)arg, output);
}

static int runsc_signal_op(sandbox_t *sb, int sig, sg_error_t **err)
{
    char signame[16];
    snprintf(signame, sizeof signame, "%d", sig);
    const char *cmd[] = {"kill", sb->id, signame, NULL};
    return proc_exec_async(runsc_argv(sb->env, cmd), runsc_ignore_done, (void *)"runsc kill", err) <
                   0
               ? -1
               : 0;
}

typedef struct {
    char *dir, *id, *cgroup;
} removal_t;

static void removal_free(removal_t *r)
{
    free(r->dir);
    free(r->id);
    free(r->cgroup);
    free(r);
}

/* Sandbox id's cgroup, as its bundle in dir names it (cgroup.h). */
static char *cgroup_of(const char *dir, const char *id)
{
    cleanup_free char *config = xasprintf("%s/bundle/config.json", dir);
    char *path = cgroup_of_bundle(config);
    return path ? path : xasprintf("/" CGROUP_TOP "/%s", id);
}

static void delete_done(int status, const char *output, void *arg)
{
    removal_t *r = arg;
    if (status != 0)
        log_warn("sandbox: runsc delete failed: %s", output);
    cgroup_remove(r->cgroup);
    egress_sandbox_down(r->id, r->dir);
    host_remove_tree(r->dir);
    removal_free(r);
}

static void runsc_remove_id(sandbox_env_t *env, const char *id, bool wait)
{
    cleanup_free char *dir = xasprintf("%s/kernels/%s", env->state_dir, id);
    cleanup_free char *cgroup = cgroup_of(dir, id);
    const char *cmd[] = {"delete", "-force", id, NULL};
    if (wait) {
        cleanup_free char *out = NULL;
        cleanup_error sg_error_t *err = NULL;
        int st = proc_run_sync(runsc_argv(env, cmd), &out, &err);
        if (st != 0 && !strstr(out ? out : "", "does not exist"))
            log_warn("sandbox: runsc delete %s: %s", id, err ? err->msg : out);
        cgroup_remove(cgroup);
        egress_sandbox_down(id, dir);
        host_remove_tree(dir);
        return;
    }
    removal_t *r = xzalloc(sizeof *r);
    r->dir = xstrdup(dir);
    r->id = xstrdup(id);
    r->cgroup = xstrdup(cgroup);
    cleanup_error sg_error_t *err = NULL;
    if (proc_exec_async(runsc_argv(env, cmd), delete_done, r, &err) < 0) {
        log_warn("sandbox: cannot remove %s: %s", id, err->msg);
        removal_free(r); /* delete_done's otherwise */
    }
}

static void runsc_stop(sandbox_t *sb)
{
    runsc_pausing_end(sb);
    if (sb->pending > 0) {
        /* Still starting: stop runsc run first, or it creates the container
         * after the delete (remove_id) has found none. */
        proc_unwatch(sb->pending);
        kill(-sb->pending, SIGKILL);
        sb->pending = 0;
    }
}

/* The bundle's cgroupsPath becomes cgroup: a restore makes it there. */
static int rewrite_bundle_cgroup(const sandbox_t *sb, const char *cgroup, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/bundle/config.json", sb->dir);
    cleanup_free char *tmp = xasprintf("%s/bundle/config.json.tmp", sb->dir);
    json_t *config = json_load_file(path, 0, NULL);
    json_t *linux_ = json_object_get(config, "linux");
    int r = linux_ ? json_object_set_new(linux_, "cgroupsPath", json_string(cgroup)) : -1;
    if (r == 0)
        r = json_dump_file(config, tmp, JSON_INDENT(2));
    json_decref(config);
    if (r < 0 || rename(tmp, path) < 0)
        return sg_error_set(err, SG_E_IO, "cannot rewrite %s", path);
    return 0;
}

static void runsc_set_tenant(sandbox_t *sb, const char *tenant)
{
    free(sb->tenant);
    sb->tenant = xstrdup(tenant);
    const char *from = sandbox_cgroup(sb);
    cleanup_free char *to = sandbox_cgroup_name(sb->env, tenant, sb->id);
    if (strcmp(from, to) == 0)
        return;
    cleanup_error sg_error_t *err = NULL;
    cgroup_prepare(to);
    if ((sb->pid > 0 && cgroup_move(from, to, &err) < 0) ||
        rewrite_bundle_cgroup(sb, to, &err) < 0) {
        log_warn("sandbox %s: moving to tenant %s's cgroup: %s", sb->id, tenant, err->msg);
        return;
    }
    log_debug("sandbox %s: moved from %s to %s", sb->id, from, to);
    free(sb->cgroup);
    sb->cgroup = to;
    to = NULL; /* sb's */
}

static void runsc_set_egress(sandbox_t *sb, const char *allow, const char *deny,
                             const char *transforms, sandbox_rules_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    if (!sb->internet)
        sg_error_set(&err, SG_E_CONFLICT,
                     "sandbox %s has no network, so it has no rules to change (a sandbox made "
                     "with internet access has them)",
                     sb->id);
    else if (egress_sandbox_rules(sb->dir, &(egress_own_t){allow, deny, transforms, sb->tenant},
                                  &err) == 0) {
        free(sb->egress_allow);
        free(sb->egress_deny);
        free(sb->egress_transforms);
        sb->egress_allow = allow && *allow ? xstrdup(allow) : NULL;
        sb->egress_deny = deny && *deny ? xstrdup(deny) : NULL;
        sb->egress_transforms = transforms && *transforms ? xstrdup(transforms) : NULL;
        log_info("egress: sandbox %s: allow %s, deny %s%s", sb->id, allow && *allow ? allow : "-",
                 deny && *deny ? deny : "-",
                 transforms && *transforms ? ", headers for some hosts" : "");
    }
    cb(err, arg);
}

static json_t *runsc_list(sandbox_env_t *env, sg_error_t **err)
{
    json_t *ids = json_array();
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

static void runsc_egress_refused(sandbox_env_t *env, sandbox_refused_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    cleanup_free char *kernels = xasprintf("%s/kernels", env->state_dir);
    if (env->egress == NULL)
        sg_error_set(&err, SG_E_INVALID,
                     "this server gives sandboxes no network (start it with --egress-allow)");
    if (err || egress_refused(kernels, cb, arg, &err) < 0)
        cb(NULL, err, arg);
}

/* Without root (a daemon not started as root) the file stays ours: the
 * group's permissions still let the code read and write it. */

const sandbox_ops_t sandbox_runsc_ops = {
    .env_init = runsc_env_init,
    .workspace_open = host_workspace_open,
    .workspace_open_async = host_workspace_open_async,
    .cancel = host_cancel,
    .workspace_close = host_workspace_close,
    .prepare = runsc_prepare,
    .adopt = host_adopt,
    .release = runsc_release,
    .start = runsc_start,
    .pause = runsc_pause,
    .reattach = runsc_reattach,
    .resume = runsc_resume,
    .set_tenant = runsc_set_tenant,
    .set_egress = runsc_set_egress,
    .signal = runsc_signal_op,
    .exec = runsc_exec,
    .exec_signal = runsc_exec_signal,
    .exec_pid = runsc_exec_pid,
    .stop = runsc_stop,
    .remove_id = runsc_remove_id,
    .list = runsc_list,
    .egress_refused = runsc_egress_refused,
    .log_tail = host_log_tail,
    .give = host_give,
    .snapshot_save = runsc_snapshot_save,
    .snapshot_delete = host_snapshot_delete,
    .snapshot_transfer = host_snapshot_transfer,
    .workspace_restore = host_workspace_restore,
};
