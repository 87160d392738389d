/* host: what both implementations that work on this host share
 * (internal.h): runsc.c's sandboxes and none.c's
 * plain kernels — directories, the init program's paths, workspaces, a
 * kernel's connection record and log, and giving files to the sandbox
 * user. */
#include "kernelmgr/sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
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

#define SANDBOX_IDS "64123:64123" /* SANDBOX_UID:SANDBOX_GID, for mkfs */
/* What a new workspace needs free on the state directory's disk: mkfs
 * writes a few MiB of metadata into its sparse image, the kernel's first
 * files some more. */
#define WORKSPACE_MIN_FREE (32u << 20)

/* mkdir -p, then chmod (mkdir obeys umask). */
int host_make_dir(const char *path, mode_t mode, sg_error_t **err)
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

int host_write_file(const char *path, const char *text, sg_error_t **err)
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

void host_remove_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* The /etc every sandbox sees: generated identity files plus the few host
 * files Python, fontconfig and matplotlib read.  Built once, in place, so
 * that sandboxes that outlived a previous sandgate keep a valid /etc. */

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

/* The init program's path, made absolute: it is a bind mount's source,
 * which runsc would resolve against the bundle, and a plain kernel's
 * program, which runs in its workspace. */
char *host_init_path(const sandbox_config_t *cfg)
{
    const char *init = cfg->init ? cfg->init : default_init();
    char *path = realpath(init, NULL);
    return path ? path : xstrdup(init);
}

/* sandgate-kernel.py, beside sandgate-init; NULL (and a warning) if missing. */
char *host_launcher_py(const char *init)
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

/* --- workspaces ------------------------------------------------------------ */

static bool is_mountpoint(const char *path)
{
    struct stat a, b;
    cleanup_free char *parent = xasprintf("%s/..", path);
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* A free loop device bound to img's open file (LOOP_CONFIGURE, Linux 5.8),
 * its fd; another process may take the free one first (EBUSY): a few tries. */
static int loop_attach(const char *img, sg_error_t **err)
{
    cleanup_close int file = open(img, O_RDWR | O_CLOEXEC);
    if (file < 0)
        return sg_error_errno(err, errno, "cannot open %s", img);
    cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return sg_error_errno(err, errno, "cannot open /dev/loop-control");
    for (int tries = 0; tries < 8; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return sg_error_errno(err, errno, "no free loop device");
        char dev[32];
        snprintf(dev, sizeof dev, "/dev/loop%d", n);
        int fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return sg_error_errno(err, errno,
                                  "cannot open %s (a container needs the nodes: "
                                  "docker/README.md, Loop devices)",
                                  dev);
        struct loop_config cfg = {.fd = (uint32_t)file, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR}};
        snprintf((char *)cfg.info.lo_file_name, sizeof cfg.info.lo_file_name, "%s", img);
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
            return fd;
        int e = errno;
        close(fd);
        if (e != EBUSY)
            return sg_error_errno(err, e, "cannot set up %s for %s", dev, img);
    }
    return sg_error_set(err, SG_E_IO, "cannot set up a loop device for %s: all taken", img);
}

int host_mount_image(const char *img, const char *path, sg_error_t **err)
{
    cleanup_close int dev = loop_attach(img, err);
    if (dev < 0)
        return -1;
    char name[32];
    struct loop_info64 info;
    if (ioctl(dev, LOOP_GET_STATUS64, &info) < 0)
        return sg_error_errno(err, errno, "cannot read the loop device of %s", img);
    snprintf(name, sizeof name, "/dev/loop%u", info.lo_number);
    /* Until mounted, closing dev is what clears the device (autoclear). */
    if (mount(name, path, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0)
        return sg_error_errno(err, errno, "cannot mount workspace %s (%s on %s)", path, img, name);
    return 0;
}

/* A volume (bytes > 0) or a workspace (0: --workspace-size's). */
int host_workspace_open(const sandbox_env_t *env, const char *path, uint64_t bytes,
                        sg_error_t **err)
{
    bool volume = bytes > 0;
    uint64_t size = volume ? bytes : env->cfg.workspace_bytes;
    if (host_make_dir(path, 0755, err) < 0)
        return -1;
    if (size > 0 && !is_mountpoint(path)) {
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
                    "a new workspace or volume (they need at least %u MiB free)",
                    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20),
                    WORKSPACE_MIN_FREE >> 20);
            cleanup_close int fd = open(img, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd < 0)
                return sg_error_errno(err, errno, "cannot create %s", img);
            if (ftruncate(fd, (off_t)size) < 0)
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
        if (host_mount_image(img, path, err) < 0)
            return -1;
        cleanup_free char *lost = xasprintf("%s/lost+found", path);
        rmdir(lost);
    }
    /* Owned by the sandbox user; the sandbox group (sandgate's unprivileged
     * half) may read and write, and what it creates stays in the group. */
    if (chown(path, SANDBOX_UID, SANDBOX_GID) < 0 || chmod(path, 02770) < 0)
        return sg_error_errno(err, errno, "chown/chmod %s", path);
    if (volume)
        return 0;
    /* Where executions leave artifacts (gateway/files/files.h).  *at() calls, as
     * sandboxed code may have put a symlink there in an existing workspace. */
    cleanup_close int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0 && mkdirat(dfd, "output", 02770) == 0) {
        (void)fchownat(dfd, "output", SANDBOX_UID, SANDBOX_GID, AT_SYMLINK_NOFOLLOW);
        (void)fchmodat(dfd, "output", 02770, 0);
    }
    return 0;
}

/* Done before returning: there is never a request to cancel. */
uint64_t host_workspace_open_async(const sandbox_env_t *env, const char *path, uint64_t bytes,
                                   sandbox_opened_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    host_workspace_open(env, path, bytes, &err);
    cb(err, arg);
    return 0;
}

/* Every local operation but a workspace's restore finishes before
 * returning 0. */
void host_cancel(uint64_t request)
{
    if (request)
        host_workspace_restore_cancel(request);
}

void host_workspace_close(const sandbox_env_t *env, const char *path, bool remove)
{
    if (is_mountpoint(path) && umount2(path, MNT_DETACH) < 0)
        log_warn("sandbox: cannot unmount %s: %s", path, strerror(errno));
    if (remove) {
        host_remove_tree(path);
        cleanup_free char *img = xasprintf("%s.img", path);
        unlink(img);
    }
}

char **host_kernel_argv(const kspec_t *spec, const char *connfile, const char *launcher)
{
    char **argv = kspec_argv(spec, connfile);
    if (!launcher || !argv[0] || !argv[1] || !argv[2] || strcmp(argv[1], "-m") != 0)
        return argv;
    if (strcmp(argv[2], "ipykernel_launcher") == 0) { /* python LAUNCHER -f FILE */
        free(argv[1]);
        free(argv[2]);
        argv[1] = xstrdup(launcher);
        for (char **a = argv + 2; *a; a++)
            a[0] = a[1];
    } else if (strcmp(argv[2], "bash_kernel") == 0) { /* python LAUNCHER -m bash_kernel ... */
        size_t n = 0;
        while (argv[n])
            n++;
        argv = xrealloc(argv, (n + 2) * sizeof *argv);
        memmove(argv + 2, argv + 1, n * sizeof *argv);
        argv[1] = xstrdup(launcher);
    }
    return argv;
}

int host_adopt(sandbox_t *sb, pid_t pid, sg_error_t **err)
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

char *host_read_log_tail(const sandbox_t *sb, size_t max)
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
uint64_t host_log_tail(const sandbox_t *sb, size_t max, sandbox_tail_fn *cb, void *arg)
{
    cleanup_free char *tail = host_read_log_tail(sb, max);
    cb(tail, arg);
    return 0;
}

uint64_t host_give(int fd, const sandbox_owner_t *as, sandbox_given_fn *cb, void *arg)
{
    uid_t uid = as && as->uid > 0 ? (uid_t)as->uid : SANDBOX_UID;
    gid_t gid = as && as->gid > 0 ? (gid_t)as->gid : SANDBOX_GID;
    /* chmod first: a file given away is no longer this process's to change */
    if (as && as->mode >= 0 && fchmod(fd, (mode_t)as->mode) < 0) {
        cleanup_error sg_error_t *err = NULL;
        sg_error_errno(&err, errno, "cannot change the mode");
        cb(err, arg);
        return 0;
    }
    if (fchown(fd, uid, gid) < 0) {
        log_debug("sandbox: cannot give a file to the sandbox user: %s", strerror(errno));
        if (as) { /* asked for by name: say so */
            cleanup_error sg_error_t *err = NULL;
            sg_error_errno(&err, errno, "cannot change the owner");
            cb(err, arg);
            return 0;
        }
    }
    cb(NULL, arg);
    return 0;
}

int host_prepare_conn(sandbox_t *sb, const kspec_t *spec, sg_error_t **err)
{
    cleanup_free char *conndir = xasprintf("%s/conn", sb->dir);
    cleanup_free char *prefix = xasprintf("%s/kernel", conndir);
    cleanup_free char *record = xasprintf("%s/connection.json", sb->dir);
    /* The daemon's unprivileged half reaches the sockets in conn/ through the
     * sandbox group; everything else here is root's. */
    if (host_make_dir(sb->dir, 0711, err) < 0 || host_make_dir(conndir, 0750, err) < 0 ||
        jconn_init(&sb->conn, "ipc", prefix, err) < 0)
        return -1;
    strncpy(sb->conn.kernel_name, spec->name, sizeof sb->conn.kernel_name - 1);
    if (strlen(prefix) + 3 > 107) /* "-N" suffix and NUL: sun_path holds 108 bytes */
        return sg_error_set(err, SG_E_INVALID,
                            "socket path %s-N is too long for a Unix socket; use a "
                            "shorter --state-dir",
                            prefix);
    /* sandgate's own copy, outside what the kernel can write: adoption reads
     * this one, never the file in conn/ (the kernel rewrites that one, and
     * code in the sandbox can too). */
    return jconn_write(&sb->conn, record, err);
}

int host_write_kernel_conn(const sandbox_t *sb, const kspec_t *spec, const char *ip,
                           const char *path, char **tcp_as_ipc, sg_error_t **err)
{
    jconn_t c = sb->conn;
    snprintf(c.ip, sizeof c.ip, "%s", ip);
    if (spec->tcp_only) {
        strcpy(c.transport, "tcp");
        strcpy(c.ip, "127.0.0.1");
    }
    if (jconn_write(&c, path, err) < 0)
        return -1;
    if (tcp_as_ipc)
        *tcp_as_ipc = spec->tcp_only ? xasprintf("SANDGATE_TCP_AS_IPC=%s", ip) : NULL;
    return 0;
}

char *host_find_preload(const sandbox_env_t *env)
{
    if (env->cfg.rootfs)
        return NULL;
    cleanup_free char *dir = xstrdup(env->init);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    char *preload = xasprintf("%s/sandgate-preload.so", slash ? dir : ".");
    if (access(preload, R_OK) == 0)
        return preload;
    log_warn("sandbox: %s is missing; 'ls -l' and 'stat' will fail in sandboxes, and kernels "
             "that speak TCP only (Deno's) will not start",
             preload);
    free(preload);
    return NULL;
}
