/* snapshot: snapshots of paused runsc sandboxes and sandboxes
 * started from them (sandbox.h), for runsc.c's table.
 *
 * A snapshot is what a resume needs, kept apart from the sandbox it came
 * from: runsc's image of the paused sandbox, the kernel's connection record
 * (its ports and HMAC key are in the image) and a copy of the workspace,
 * taken while nothing writes to it (the sandbox is paused; the host's
 * dirty pages are flushed first).  A sandbox started from it gets its own
 * workspace (a copy of the snapshot's), conn/ directory, cgroup and id:
 * `runsc restore` of the same image with its own bundle, so several run
 * from one snapshot at once, each writing only its own files.  A running
 * sandbox's image comes from sandbox_save_live (checkpoint
 * --leave-running; its relay stays detached while the workspace is
 * copied).  runsc 2022-12-19's `checkpoint --leave-running` restores into
 * the same sandbox and loses its file proxy: with it, a running sandbox is
 * paused and resumed instead, by the kernel layer.  runsc's image is
 * several files (checkpoint.img, pages_meta.img, pages.img), all linked
 * into the snapshot's image/ with the version that made them. */
#include "kernelmgr/sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

char *host_snapshot_dir(const sandbox_env_t *env, const char *sid)
{
    return xasprintf("%s/snapshot-images/%s", env->state_dir, sid);
}

/* A sandbox's workspace: STATE/workspaces/<kernel uuid> (its id is the
 * uuid and "-<generation>"). */
static char *workspace_of(const sandbox_t *sb)
{
    return sb->workspace ? xstrdup(sb->workspace)
                         : xasprintf("%s/workspaces/%.36s", sb->env->state_dir, sb->id);
}

static bool is_mountpoint(const char *path)
{
    struct stat a, b;
    cleanup_free char *parent = xasprintf("%s/..", path);
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* cp's wait status: its output in the error when it failed. */
static int copy_status(int status, const char *out, const char *what, sg_error_t **err)
{
    if (status != 0)
        return sg_error_set(err, out && strstr(out, "No space left") ? SG_E_NOSPACE : SG_E_IO,
                            "copying %s: %s", what, out && *out ? out : "cp failed");
    return 0;
}

/* cp, waited for. */
static int copy(const char *const *argv, const char *what, sg_error_t **err)
{
    cleanup_free char *out = NULL;
    int status = proc_run_sync(argv, &out, err);
    return status < 0 ? -1 : copy_status(status, out, what, err);
}

/* The workspace's files as of now: a sparse copy of its filesystem image
 * (or of the directory when workspaces have no size limit) at dest. */
static int copy_workspace(const sandbox_env_t *env, const char *ws, const char *dest_img,
                          const char *dest_dir, sg_error_t **err)
{
    cleanup_free char *img = xasprintf("%s.img", ws);
    if (access(img, F_OK) == 0) {
        /* What the host has not written back of the mounted image yet. */
        int fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            syncfs(fd);
            close(fd);
        }
        const char *cp[] = {"/bin/cp", "--sparse=always", "--reflink=auto", img, dest_img, NULL};
        return copy(cp, "the workspace", err);
    }
    const char *cp[] = {"/bin/cp", "-a", "--reflink=auto", "-T", ws, dest_dir, NULL};
    return copy(cp, "the workspace", err);
}

static uint64_t tree_bytes;
static int add_bytes(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)flag, (void)ftw;
    tree_bytes += (uint64_t)st->st_blocks * 512;
    return 0;
}

/* Sparse files count their data only. */
uint64_t host_disk_bytes(const char *dir)
{
    tree_bytes = 0;
    nftw(dir, add_bytes, 16, FTW_PHYS | FTW_MOUNT);
    return tree_bytes;
}

int host_link_files(const char *from, const char *to, sg_error_t **err)
{
    DIR *d = opendir(from);
    if (d == NULL)
        return sg_error_errno(err, errno, "cannot open %s", from);
    int r = host_make_dir(to, 0700, err);
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (de->d_type != DT_REG)
            continue;
        cleanup_free char *a = xasprintf("%s/%s", from, de->d_name);
        cleanup_free char *b = xasprintf("%s/%s", to, de->d_name);
        unlink(b);
        if (link(a, b) < 0)
            r = sg_error_errno(err, errno, "cannot link %s to %s", a, b);
    }
    closedir(d);
    return r;
}

int image_stamp(const sandbox_env_t *env, const char *dir, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/" IMAGE_VERSION_FILE, dir);
    cleanup_free char *text = xasprintf("%s\n", env->runsc_version ? env->runsc_version : "");
    return host_write_file(path, text, err);
}

int image_check(const sandbox_env_t *env, const char *dir, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/" IMAGE_VERSION_FILE, dir);
    char made[128] = "";
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(made, sizeof made, f) == NULL)
            made[0] = '\0';
        made[strcspn(made, "\n")] = '\0';
        fclose(f);
    }
    const char *ours = env->runsc_version ? env->runsc_version : "";
    if (strcmp(made, ours) == 0)
        return 0;
    return sg_error_set(err, SG_E_CONFLICT,
                        "its image was made by runsc %s and this sandgate runs runsc %s, which "
                        "cannot restore it (the session can be restarted with a fresh kernel; "
                        "its files are kept)",
                        *made ? made : "of an older sandgate (no version recorded)",
                        *ours ? ours : "(version unknown)");
}

void runsc_snapshot_save(sandbox_t *sb, const char *sid, sandbox_saved_fn *cb, void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    cleanup_free char *image = xasprintf("%s/checkpoint/checkpoint.img", sb->dir);
    cleanup_free char *cpdir = xasprintf("%s/checkpoint", sb->dir);
    cleanup_free char *dir = host_snapshot_dir(sb->env, sid);
    cleanup_free char *ws = workspace_of(sb);
    cleanup_free char *to_image = xasprintf("%s/image", dir);
    cleanup_free char *to_conn = xasprintf("%s/connection.json", dir);
    cleanup_free char *to_ws_img = xasprintf("%s/workspace.img", dir);
    cleanup_free char *to_ws_dir = xasprintf("%s/workspace", dir);
    if ((sb->pid > 0 && !sb->live_saved) || sb->pausing) {
        sg_error_set(&err, SG_E_CONFLICT, "sandbox %s is not paused", sb->id);
    } else if (access(image, R_OK) < 0) {
        sg_error_errno(&err, errno, "sandbox %s has no checkpoint (%s)", sb->id, image);
    } else if (access(dir, F_OK) == 0) {
        sg_error_set(&err, SG_E_CONFLICT, "snapshot %s exists", sid);
    } else if (host_make_dir(dir, 0700, &err) == 0) {
        if (host_link_files(cpdir, to_image, &err) == 0 &&
            jconn_write(&sb->conn, to_conn, &err) == 0)
            copy_workspace(sb->env, ws, to_ws_img, to_ws_dir, &err);
        if (err)
            host_remove_tree(dir);
    }
    if (err) {
        sg_error_prefix(&err, "snapshot of sandbox %s", sb->id);
        cb(0, err, arg);
        return;
    }
    uint64_t bytes = host_disk_bytes(dir);
    log_info("sandbox %s: snapshot %s saved (%llu KiB)", sb->id, sid,
             (unsigned long long)(bytes >> 10));
    cb(bytes, NULL, arg);
}

void host_snapshot_delete(sandbox_env_t *env, const char *sid)
{
    cleanup_free char *dir = host_snapshot_dir(env, sid);
    host_remove_tree(dir);
}

void host_snapshot_transfer(sandbox_env_t *env, const char *sid, bool import, sandbox_saved_fn *cb,
                            void *arg)
{
    cleanup_error sg_error_t *err = NULL;
    cleanup_free char *dir = host_snapshot_dir(env, sid);
    cleanup_free char *tdir = xasprintf("%s/transfers", env->state_dir);
    cleanup_free char *tar = xasprintf("%s/%s.tar", tdir, sid);
    cleanup_free char *out = NULL;
    struct stat st;
    const char *pack[] = {"/bin/tar", "--sparse", "-C", dir, "-cf", tar, ".", NULL};
    const char *unpack[] = {
        "/bin/tar", "--no-same-owner", "--no-same-permissions", "-C", dir, "-xf", tar, NULL};
    if (stat(tdir, &st) < 0) {
        sg_error_errno(&err, errno, "no %s", tdir);
    } else if (import ? access(dir, F_OK) == 0 : access(dir, F_OK) < 0) {
        sg_error_set(&err, import ? SG_E_CONFLICT : SG_E_NOTFOUND,
                     import ? "snapshot %s exists here" : "snapshot %s has no files here", sid);
    } else if (import && host_make_dir(dir, 0700, &err) < 0) {
    } else if (proc_run_sync(import ? unpack : pack, &out, &err) != 0) {
        if (!err)
            sg_error_set(&err, SG_E_INVALID, "%s snapshot %s: tar: %s",
                         import ? "importing" : "exporting", sid, out ? out : "");
        if (import)
            host_remove_tree(dir);
        unlink(tar);
    } else if (!import && chown(tar, st.st_uid, st.st_gid) < 0) {
        sg_error_errno(&err, errno, "chown %s", tar);
    }
    struct stat ts;
    uint64_t bytes = stat(tar, &ts) == 0 ? (uint64_t)ts.st_size : 0;
    if (import)
        unlink(tar);
    cb(bytes, err, arg);
}

void host_snapshot_sweep(sandbox_env_t *env)
{
    cleanup_free char *records = xasprintf("%s/snapshots", env->state_dir);
    cleanup_free char *images = xasprintf("%s/snapshot-images", env->state_dir);
    DIR *rd = opendir(records), *d = rd ? opendir(images) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        cleanup_free char *rec = xasprintf("%s/%s.json", records, de->d_name);
        if (access(rec, F_OK) == 0 || errno != ENOENT)
            continue;
        log_info("sandbox: snapshot files %s/%s have no record (a stop or a deleted context "
                 "cut their save short): removed",
                 images, de->d_name);
        cleanup_free char *p = xasprintf("%s/%s", images, de->d_name);
        host_remove_tree(p);
    }
    if (d)
        closedir(d);
    if (rd)
        closedir(rd);
}

int snapshot_attach(sandbox_t *sb, sg_error_t **err)
{
    cleanup_free char *dir = host_snapshot_dir(sb->env, sb->snapshot);
    cleanup_free char *conn = xasprintf("%s/connection.json", dir);
    cleanup_free char *image = xasprintf("%s/image", dir);
    cleanup_free char *record = xasprintf("%s/connection.json", sb->dir);
    cleanup_free char *cpdir = xasprintf("%s/checkpoint", sb->dir);
    jconn_t saved;
    if (access(conn, R_OK) < 0)
        return sg_error_set(err, SG_E_NOTFOUND, "no snapshot %s", sb->snapshot);
    if (image_check(sb->env, image, err) < 0) { /* an older layout has no image/ either */
        sg_error_prefix(err, "snapshot %s", sb->snapshot);
        return -1;
    }
    if (jconn_read(&saved, conn, err) < 0)
        return -1;
    /* The kernel's ports and key are the snapshot's; the host path of its
     * sockets is this sandbox's own conn/. */
    memcpy(sb->conn.ports, saved.ports, sizeof sb->conn.ports);
    memcpy(sb->conn.key, saved.key, sizeof sb->conn.key);
    if (jconn_write(&sb->conn, record, err) < 0)
        return -1;
    host_remove_tree(cpdir);
    return host_link_files(image, cpdir, err);
}

/* A workspace being restored: the copy, a process the loop does not wait
 * for (eight sessions started from one snapshot at once, each copy and
 * mount waited for, kept the launcher from answering anything else for
 * ~0.3 s), then its mount (host_mount_image, ~0.6 ms). */
typedef struct ws_restore {
    uint64_t id;
    const sandbox_env_t *env;
    char *path, *sid, *img, *fresh;
    sandbox_opened_fn *cb; /* NULL once cancelled */
    void *arg;
    int64_t began, copied;
    struct ws_restore *next;
} ws_restore_t;

static ws_restore_t *restoring;

void host_workspace_restore_cancel(uint64_t request)
{
    for (ws_restore_t *w = restoring; w; w = w->next)
        if (w->id == request)
            w->cb = NULL;
}

/* The workspace is in place (or err): opened (mounted, its owner and
 * output/), and w ends. */
static void restore_end(ws_restore_t *w, sg_error_t *err)
{
    if (w->copied == 0)
        w->copied = zclock_mono();
    if (!err)
        host_workspace_open(w->env, w->path, 0, &err);
    log_debug("workspace %s: snapshot %s's copy in %lld ms, mounted in %lld ms", w->path, w->sid,
              (long long)(w->copied - w->began), (long long)(zclock_mono() - w->copied));
    for (ws_restore_t **p = &restoring; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    if (w->cb)
        w->cb(err, w->arg);
    sg_error_free(&err);
    free(w->path);
    free(w->sid);
    free(w->img);
    free(w->fresh);
    free(w);
}

static void restore_copied(int status, const char *output, void *arg)
{
    ws_restore_t *w = arg;
    sg_error_t *err = NULL;
    w->copied = zclock_mono();
    if (copy_status(status, output, "the snapshot's workspace", &err) == 0 &&
        rename(w->fresh, w->img) < 0)
        sg_error_errno(&err, errno, "cannot rename %s to %s", w->fresh, w->img);
    if (err)
        unlink(w->fresh);
    restore_end(w, err);
}

/* Without a launcher the callback may be cancelled (host_cancel); the
 * launcher's own requests never are. */
uint64_t host_workspace_restore(const sandbox_env_t *env, const char *path, const char *sid,
                                sandbox_opened_fn *cb, void *arg)
{
    static uint64_t ids;
    ws_restore_t *w = xzalloc(sizeof *w);
    cleanup_free char *dir = host_snapshot_dir(env, sid);
    cleanup_free char *from_img = xasprintf("%s/workspace.img", dir);
    cleanup_free char *from_dir = xasprintf("%s/workspace", dir);
    *w = (ws_restore_t){.id = ++ids,
                        .env = env,
                        .path = xstrdup(path),
                        .sid = xstrdup(sid),
                        .img = xasprintf("%s.img", path),
                        .fresh = xasprintf("%s.img.new", path),
                        .cb = cb,
                        .arg = arg,
                        .began = zclock_mono(),
                        .next = restoring};
    restoring = w;
    sg_error_t *err = NULL;
    /* A sandbox still running on the old one keeps it until it ends. */
    if (is_mountpoint(path) && umount2(path, MNT_DETACH) < 0)
        log_warn("sandbox: cannot unmount %s: %s", path, strerror(errno));
    if (access(from_img, R_OK) == 0) {
        const char *cp[] = {"/bin/cp", "--sparse=always", "--reflink=auto",
                            from_img,  w->fresh,          NULL};
        unlink(w->fresh);
        if (proc_exec_async(cp, restore_copied, w, &err) > 0)
            return w->id;
    } else if (access(from_dir, R_OK) == 0) {
        host_remove_tree(path);
        const char *cp[] = {"/bin/cp", "-a", "--reflink=auto", "-T", from_dir, path, NULL};
        copy(cp, "the snapshot's workspace", &err);
    } else {
        sg_error_set(&err, SG_E_NOTFOUND, "no snapshot %s", sid);
    }
    restore_end(w, err);
    return 0;
}
