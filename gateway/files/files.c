#include "gateway/files/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "kernelmgr/sandbox/sandbox.h"

#define UPLOAD_PREFIX ".sandgate-upload-"
#define MAX_LIST 10000    /* entries in one listing */
#define MAX_SNAPSHOT 4096 /* files tracked under output/ */
#define MAX_DEPTH 64      /* directory nesting walked (remove, snapshot) */

/* --- errors ------------------------------------------------------------------------ */

/* sg_error_errno for the workspace's files.  The sandbox's own code sets
 * their modes: a permission it took away (a file made mode 000, a directory
 * made read-only) is the client's 403, not an I/O error of sandgate's. */
static int fs_errno(sg_error_t **err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fs_errno(sg_error_t **err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *what = xvasprintf(fmt, ap);
    va_end(ap);
    if (errnum == EACCES || errnum == EPERM)
        sg_error_set(err, SG_E_FORBIDDEN,
                     "%s: permission denied (the sandbox's files keep the "
                     "modes its code gave them)",
                     what);
    else
        sg_error_errno(err, errnum, "%s", what);
    free(what);
    return -1;
}

/* --- paths ------------------------------------------------------------------------ */

/* Normalises a relative path: no leading '/', no empty or '.' components;
 * '..' is refused outright (it never means anything good here), as is a
 * component no file system takes (the client's error, not an I/O one). */
static int clean_path(const char *in, char *out, size_t size, sg_error_t **err)
{
    size_t n = 0;
    while (*in) {
        while (*in == '/')
            in++;
        size_t len = strcspn(in, "/");
        if (len == 0)
            break;
        if (len == 2 && in[0] == '.' && in[1] == '.')
            return sg_error_set(err, SG_E_INVALID, "path may not contain '..'");
        if (len > NAME_MAX)
            return sg_error_set(err, SG_E_INVALID, "a path component is longer than %d bytes",
                                NAME_MAX);
        if (!(len == 1 && in[0] == '.')) {
            if (n + len + 2 > size)
                return sg_error_set(err, SG_E_INVALID, "path longer than %zu bytes", size - 2);
            if (n)
                out[n++] = '/';
            memcpy(out + n, in, len);
            n += len;
        }
        in += len;
    }
    out[n] = 0;
    return 0;
}

/* Splits "a/b/c" into "a/b" and "c" in place; returns the last component. */
static char *split_last(char *path)
{
    char *slash = strrchr(path, '/');
    if (!slash) {
        memmove(path + 1, path, strlen(path) + 1);
        path[0] = 0;
        return path + 1;
    }
    *slash = 0;
    return slash + 1;
}

static int open_root(const char *workspace, sg_error_t **err)
{
    int fd = open(workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fs_errno(err, errno, "cannot open the workspace");
    return fd;
}

/* Opens path beneath dirfd, never through a symlink (the last component
 * included: no O_NOFOLLOW, which would open the link itself), never outside. */
static int open_beneath(int dirfd, const char *path, int flags, sg_error_t **err)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    const char *p = *path ? path : ".";
    for (int tries = 0;; tries++) {
        long fd = syscall(SYS_openat2, dirfd, p, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if (errno == EAGAIN && tries < 8) /* a concurrent rename; RESOLVE_* asks to retry */
            continue;
        switch (errno) {
        case ELOOP:
            return sg_error_set(err, SG_E_FORBIDDEN, "'%s' goes through a symbolic link", path);
        case EXDEV: return sg_error_set(err, SG_E_FORBIDDEN, "'%s' leaves the workspace", path);
        case ENOENT: return sg_error_set(err, SG_E_NOTFOUND, "no file '%s' in the workspace", path);
        case ENOTDIR:
            return sg_error_set(err, SG_E_NOTFOUND, "'%s': a parent is not a directory", path);
        case ENXIO:
        case ENODEV:
            return sg_error_set(err, SG_E_FORBIDDEN, "'%s' is not a regular file or a directory",
                                path);
        case ENOSYS:
            return sg_error_set(err, SG_E_INTERNAL,
                                "openat2 is missing (sandgate needs Linux 5.6 or later)");
        default: return fs_errno(err, errno, "cannot open '%s'", path);
        }
    }
}

/* Opens a (clean) path of the workspace. */
static int open_in(const char *workspace, const char *path, int flags, sg_error_t **err)
{
    int root = open_root(workspace, err);
    if (root < 0)
        return -1;
    int fd = open_beneath(root, path, flags, err);
    close(root);
    return fd;
}

/* --- reading ----------------------------------------------------------------------- */

int files_open(const char *workspace, const char *path, struct stat *st, sg_error_t **err)
{
    char clean[PATH_MAX];
    if (clean_path(path, clean, sizeof clean, err) < 0)
        return -1;
    /* O_NONBLOCK: opening a FIFO planted by the code must not wait for a writer. */
    int fd = open_in(workspace, clean, O_RDONLY | O_NONBLOCK, err);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode))) {
        close(fd);
        return sg_error_set(err, SG_E_FORBIDDEN, "'%s' is not a regular file or a directory",
                            clean);
    }
    fcntl(fd, F_SETFL, 0);
    return fd;
}

static const char *type_name(mode_t mode)
{
    return S_ISREG(mode) ? "file" : S_ISDIR(mode) ? "dir" : S_ISLNK(mode) ? "symlink" : "other";
}

static char *iso_time(time_t t, char *buf, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

static int by_key(const void *a, const void *b, void *key)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, key)),
                  json_string_value(json_object_get(*(json_t *const *)b, key)));
}

/* items[0..n) (stolen, and freed) as an array sorted by their string key. */
static json_t *sorted_array(json_t **items, size_t n, const char *key)
{
    if (n > 1)
        qsort_r(items, n, sizeof *items, by_key, (void *)key);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, items[i]);
    free(items);
    return list;
}

json_t *files_list(int dirfd, const char *path, sg_error_t **err)
{
    char clean[PATH_MAX];
    if (clean_path(path, clean, sizeof clean, err) < 0)
        return NULL;
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        fs_errno(err, errno, "cannot list '%s'", clean);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    rewinddir(d);
    json_t **items = NULL;
    size_t n = 0;
    bool truncated = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strncmp(e->d_name, UPLOAD_PREFIX, strlen(UPLOAD_PREFIX)) == 0)
            continue;
        if (n == MAX_LIST) {
            truncated = true;
            break;
        }
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        char when[32];
        char *full = xasprintf("%s%s%s", clean, *clean ? "/" : "", e->d_name);
        items = xrealloc(items, (n + 1) * sizeof *items);
        items[n++] = json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", e->d_name, "path", full, "type",
                               type_name(st.st_mode), "size", (json_int_t)st.st_size, "modified",
                               iso_time(st.st_mtime, when, sizeof when));
        free(full);
    }
    closedir(d);
    json_t *out = json_pack("{s:s, s:o}", "path", clean, "entries", sorted_array(items, n, "name"));
    if (truncated)
        json_object_set_new(out, "truncated", json_true());
    return out;
}

/* --- removing ---------------------------------------------------------------------- */

/* Empties the directory name under dirfd, descending only into real
 * directories (O_NOFOLLOW on every step). */
static int empty_dir(int dirfd, const char *name, int depth, sg_error_t **err)
{
    if (depth > MAX_DEPTH)
        return sg_error_set(err, SG_E_LIMIT, "directories nested deeper than %d", MAX_DEPTH);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return fs_errno(err, errno, "cannot open directory '%s'", name);
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            rc = empty_dir(fd, e->d_name, depth + 1, err);
        if (rc == 0 && unlinkat(fd, e->d_name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0 &&
            errno != ENOENT)
            rc = fs_errno(err, errno, "cannot remove '%s'", e->d_name);
    }
    closedir(d);
    return rc;
}

int files_remove(const char *workspace, const char *path, sg_error_t **err)
{
    char clean[PATH_MAX];
    if (clean_path(path, clean, sizeof clean, err) < 0)
        return -1;
    if (*clean == 0)
        return sg_error_set(err, SG_E_INVALID, "refusing to remove the workspace itself");
    char *name = split_last(clean);
    int parent = open_in(workspace, clean, O_PATH | O_DIRECTORY, err);
    if (parent < 0)
        return -1;
    struct stat st;
    int rc = 0;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = sg_error_set(err, SG_E_NOTFOUND, "no file '%s' in the workspace", name);
    else if (S_ISDIR(st.st_mode))
        rc = empty_dir(parent, name, 0, err);
    if (rc == 0 && unlinkat(parent, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
        rc = fs_errno(err, errno, "cannot remove '%s'", name);
    close(parent);
    return rc;
}

/* --- uploads ----------------------------------------------------------------------- */

struct files_upload {
    int dirfd; /* the target's directory */
    int fd;    /* the temporary file in it */
    char tmp[64];
    char *name; /* the target's name in dirfd */
    char *path; /* as the caller knows it */
    size_t size, max;
    /* What it created is given to the sandbox user (sandbox_give): */
    uint64_t *gives; /* the requests, for sandbox_cancel */
    size_t ngives;
    size_t pending;          /* gives not answered yet */
    sg_error_t *give_err;    /* the first that failed */
    sg_error_t *write_err;   /* files_upload_store: closing the file failed */
    files_stored_fn *stored; /* files_upload_store waits for the gives */
    void *stored_arg;
};

static void store(files_upload_t *u);

static void given(const sg_error_t *err, void *arg)
{
    files_upload_t *u = arg;
    u->pending--;
    if (err && !u->give_err)
        sg_error_set(&u->give_err, err->kind, "'%s' could not be given to the sandbox user: %s",
                     u->path, err->msg);
    if (u->pending == 0 && u->stored)
        store(u);
}

/* fd (which the caller closes when it likes) becomes the sandbox user's. */
static void give(files_upload_t *u, int fd)
{
    u->pending++;
    uint64_t req = sandbox_give(fd, given, u);
    if (req == 0)
        return; /* answered already */
    u->gives = xrealloc(u->gives, (u->ngives + 1) * sizeof *u->gives);
    u->gives[u->ngives++] = req;
}

/* Opens (creating as needed) the directory path beneath root; new
 * directories are given to the sandbox user. */
static int make_dirs(files_upload_t *u, int root, const char *path, sg_error_t **err)
{
    int d = open_beneath(root, "", O_PATH | O_DIRECTORY, err);
    const char *p = path;
    while (d >= 0 && *p) {
        size_t len = strcspn(p, "/");
        char comp[NAME_MAX + 1];
        if (len > NAME_MAX) {
            close(d);
            return sg_error_set(err, SG_E_INVALID, "a path component is longer than %d bytes",
                                NAME_MAX);
        }
        memcpy(comp, p, len);
        comp[len] = 0;
        p += len + (p[len] == '/');
        if (mkdirat(d, comp, 0775) == 0) { /* the sandbox user's, like the code's own */
            cleanup_close int made =
                openat(d, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (made >= 0)
                give(u, made);
        }
        int next = open_beneath(d, comp, O_PATH | O_DIRECTORY, err);
        close(d);
        d = next;
    }
    return d;
}

files_upload_t *files_upload_begin(const char *workspace, const char *path, size_t max,
                                   sg_error_t **err)
{
    char clean[PATH_MAX];
    if (clean_path(path, clean, sizeof clean, err) < 0)
        return NULL;
    if (*clean == 0) {
        sg_error_set(err, SG_E_INVALID, "give the file's path after /files/");
        return NULL;
    }
    files_upload_t *u = xzalloc(sizeof *u);
    u->fd = u->dirfd = -1;
    u->path = xstrdup(clean);
    u->name = xstrdup(split_last(clean));
    u->max = max;
    struct stat st;
    cleanup_close int root = open_root(workspace, err);
    if (root < 0 || (u->dirfd = make_dirs(u, root, clean, err)) < 0)
        goto fail;
    if (fstatat(u->dirfd, u->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        sg_error_set(err, SG_E_CONFLICT, "'%s' is a directory", u->path);
        goto fail;
    }
    unsigned char rnd[8];
    randombytes_buf(rnd, sizeof rnd);
    int off = snprintf(u->tmp, sizeof u->tmp, UPLOAD_PREFIX);
    sodium_bin2hex(u->tmp + off, sizeof u->tmp - (size_t)off, rnd, sizeof rnd);
    u->fd = openat(u->dirfd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0664);
    if (u->fd < 0) {
        fs_errno(err, errno, "cannot create '%s'", u->path);
        u->tmp[0] = 0;
        goto fail;
    }
    give(u, u->fd);
    return u;
fail:
    files_upload_abort(&u);
    return NULL;
}

static int write_error(files_upload_t *u, int errnum, sg_error_t **err)
{
    if (errnum == ENOSPC || errnum == EDQUOT)
        return sg_error_set(err, SG_E_LIMIT, "the workspace is full (writing '%s')", u->path);
    return fs_errno(err, errnum, "cannot write '%s'", u->path);
}

int files_upload_write(files_upload_t *u, const void *data, size_t n, sg_error_t **err)
{
    if (u->size + n > u->max)
        return sg_error_set(err, SG_E_LIMIT, "upload larger than %zu bytes", u->max);
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(u->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return write_error(u, errno, err);
        p += w;
        n -= (size_t)w;
        u->size += (size_t)w;
    }
    return 0;
}

/* Closes the temporary file and renames it into place: {path, size}, or
 * NULL with *err. */
static json_t *rename_into_place(files_upload_t *u, sg_error_t **err)
{
    if (u->fd >= 0) {
        int closed = close(u->fd);
        u->fd = -1;
        if (closed < 0) {
            write_error(u, errno, err);
            return NULL;
        }
    }
    if (renameat(u->dirfd, u->tmp, u->dirfd, u->name) < 0) {
        if (errno == EISDIR)
            sg_error_set(err, SG_E_CONFLICT, "cannot store '%s': %s", u->path, strerror(errno));
        else
            fs_errno(err, errno, "cannot store '%s'", u->path);
        return NULL;
    }
    u->tmp[0] = 0; /* nothing left to remove */
    return json_pack("{s:s, s:I}", "path", u->path, "size", (json_int_t)u->size);
}

json_t *files_upload_commit(files_upload_t **u_p, sg_error_t **err)
{
    json_t *info = rename_into_place(*u_p, err);
    files_upload_abort(u_p); /* removes the temporary file if it is still there */
    return info;
}

/* Every give is answered: the upload is stored, or removed when one failed. */
static void store(files_upload_t *u)
{
    files_stored_fn *cb = u->stored;
    u->stored = NULL;
    cleanup_error sg_error_t *err = NULL;
    json_t *info = NULL;
    if (u->write_err)
        sg_error_set(&err, u->write_err->kind, "%s", u->write_err->msg);
    else if (u->give_err)
        sg_error_set(&err, u->give_err->kind, "%s", u->give_err->msg);
    else
        info = rename_into_place(u, &err);
    cb(info, err, u->stored_arg);
    json_decref(info);
}

void files_upload_store(files_upload_t *u, files_stored_fn *cb, void *arg)
{
    /* Closed now: the body is complete, and a failure to write it is known. */
    int closed = close(u->fd);
    u->fd = -1;
    if (closed < 0)
        write_error(u, errno, &u->write_err);
    u->stored = cb;
    u->stored_arg = arg;
    if (u->pending == 0)
        store(u);
}

void files_upload_abort(files_upload_t **u_p)
{
    files_upload_t *u = *u_p;
    if (!u)
        return;
    for (size_t i = 0; i < u->ngives; i++)
        sandbox_cancel(u->gives[i]); /* the gives go on; no one is told */
    if (u->fd >= 0)
        close(u->fd);
    if (u->dirfd >= 0) {
        if (u->tmp[0])
            unlinkat(u->dirfd, u->tmp, 0);
        close(u->dirfd);
    }
    free(u->gives);
    sg_error_free(&u->give_err);
    sg_error_free(&u->write_err);
    free(u->name);
    free(u->path);
    free(u);
    *u_p = NULL;
}

/* --- artifacts --------------------------------------------------------------------- */

static void snap_dir(int fd, const char *prefix, int depth, json_t *out)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL && json_object_size(out) < MAX_SNAPSHOT) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strncmp(e->d_name, UPLOAD_PREFIX, strlen(UPLOAD_PREFIX)) == 0)
            continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        char *path = xasprintf("%s/%s", prefix, e->d_name);
        if (S_ISREG(st.st_mode)) {
            char sig[64];
            snprintf(sig, sizeof sig, "%lld %lld.%09ld", (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
            json_object_set_new(out, path, json_string(sig));
        } else if (S_ISDIR(st.st_mode) && depth < 16) {
            int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                snap_dir(sub, path, depth + 1, out);
        }
        free(path);
    }
    closedir(d);
}

json_t *files_snapshot(const char *workspace, const char *dir)
{
    json_t *out = json_object();
    int fd = open_in(workspace, dir, O_RDONLY | O_DIRECTORY, NULL);
    if (fd >= 0)
        snap_dir(fd, dir, 0, out);
    return out;
}

json_t *files_changed(const char *workspace, const char *dir, const json_t *before)
{
    json_t *now = files_snapshot(workspace, dir);
    json_t **items = NULL;
    size_t n = 0;
    const char *path;
    json_t *sig;
    json_object_foreach (now, path, sig) {
        const char *old = json_string_value(json_object_get(before, path));
        if (old && strcmp(old, json_string_value(sig)) == 0)
            continue;
        items = xrealloc(items, (n + 1) * sizeof *items);
        items[n++] = json_pack("{s:s, s:I, s:s}", "path", path, "size",
                               (json_int_t)strtoll(json_string_value(sig), NULL, 10), "mime",
                               files_mime(path));
    }
    json_decref(now);
    return sorted_array(items, n, "path");
}

const char *files_mime(const char *name)
{
    static const struct {
        const char *ext, *mime;
    } types[] = {
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"webp", "image/webp"},
        {"svg", "image/svg+xml"},
        {"pdf", "application/pdf"},
        {"html", "text/html; charset=utf-8"},
        {"htm", "text/html; charset=utf-8"},
        {"txt", "text/plain; charset=utf-8"},
        {"log", "text/plain; charset=utf-8"},
        {"md", "text/markdown; charset=utf-8"},
        {"csv", "text/csv; charset=utf-8"},
        {"tsv", "text/tab-separated-values; charset=utf-8"},
        {"py", "text/x-python; charset=utf-8"},
        {"json", "application/json"},
        {"ipynb", "application/x-ipynb+json"},
        {"xml", "application/xml"},
        {"zip", "application/zip"},
        {"gz", "application/gzip"},
        {"tar", "application/x-tar"},
        {"parquet", "application/vnd.apache.parquet"},
        {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
        {"mp4", "video/mp4"},
        {"wav", "audio/wav"},
    };
    const char *base = strrchr(name, '/');
    const char *dot = strrchr(base ? base : name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcasecmp(dot + 1, types[i].ext) == 0)
                return types[i].mime;
    return "application/octet-stream";
}
