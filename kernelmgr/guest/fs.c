/* sandgate-init --fs: file operations inside a sandbox, for gateway/files/sbfs.c.
 *
 * usage: sandgate-init --fs stat PATH
 *                           list PATH DEPTH
 *                           mkdir PATH
 *                           envd-mkdir PATH
 *                           move FROM TO
 *                           remove PATH
 *                           read PATH
 *                           write PATH [METADATA]
 *                           overwrite PATH [METADATA]
 *                           watch PATH RECURSIVE ENTRIES   (watch.c)
 *
 * Run by `runsc exec` as the sandbox user (under --group), so every path is
 * resolved by gVisor inside the sandbox: this program never sees the host.
 * It is still the sandbox's code's neighbour, so it trusts nothing it finds
 * (names are escaped into JSON, a FIFO is never read, symlinks are not
 * followed except by read, which opens what the sandbox user could).
 *
 * Success: exit 0 and, on stdout, one JSON line (an entry, a listing) —
 * for read that line, then exactly the entry's "size" bytes (for a file
 * whose size says 0, a /proc one say, what reading it gave).  Failure: one
 * JSON line {"errno": N, "message": "..."} on stderr and exit 1 (2 for a
 * usage error); sbfs.c maps the errno to a status and a code.
 *
 * write's stdin is framed, so that a write broken off (the client left,
 * the daemon died) can never be taken for a complete one: frames of a
 * 4-byte little-endian length and that many bytes (at most FRAME_MAX), and
 * a frame of length 0 ends the data.  The bytes go to a temporary file
 * beside PATH that is renamed onto it after the last frame; end of input
 * before that removes it.  METADATA, "KEY=VALUE" lines, become the file's
 * extended attributes user.e2b.KEY (E2B's file metadata; the new file has
 * no others, so a write replaces what the old one had).  Every entry has
 * the user.e2b.* attributes it holds as "metadata" {KEY: VALUE}.
 *
 * overwrite is write as E2B's envd writes: in place — the file opened with
 * O_CREAT|O_TRUNC, its owner set, its metadata replaced, then the bytes —
 * so that a directory watch sees what it sees under E2B (create, chmod,
 * write; not a temporary file renamed).  A write broken off leaves what
 * came, as envd's does.
 *
 * Modes: the sandbox group's (umask 007, directories 02770), as the
 * kernel's files are, so that sandgate's unprivileged half reaches them
 * from outside (kernelmgr/launcher/launcher.h); overwrite and envd-mkdir,
 * E2B's envd's, make E2B's modes instead: files 0644, directories 0755.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "kernelmgr/guest/fs.h"

#define FRAME_MAX (1u << 20)

static bool envd_modes; /* overwrite and envd-mkdir: E2B's envd's modes */
#define META_PREFIX "user.e2b."
#define META_MAX 4096 /* E2B's budget for one file's metadata */
#define LIST_MAX 10000

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* --- JSON out ----------------------------------------------------------------------- */

/* s as a JSON string: control characters escaped, bytes that are not UTF-8
 * replaced by U+FFFD (a file name may be any bytes). */
void fs_put_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0;
        for (size_t i = 1; ok && i < n; i++)
            ok = (p[i] & 0xc0) == 0x80;
        if (!ok) {
            fputs("\\ufffd", f);
            p++;
        } else if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            p++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else {
            fwrite(p, 1, n, f);
            p += n;
        }
    }
    fputc('"', f);
}

static const char *type_name(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

/* The name of a uid (user) or gid, or the number as text.  The last few
 * are kept: a listing asks for the same owners thousands of times, and each
 * getpwuid reads /etc/passwd again — syscalls that cost ~100 us each under
 * gVisor's ptrace platform (10000 entries took 29 s, most of it here). */
static const char *id_name(bool user, unsigned id)
{
    static struct {
        bool used, user;
        unsigned id;
        char name[32];
    } cache[8];
    static unsigned next;
    for (size_t i = 0; i < sizeof cache / sizeof cache[0]; i++)
        if (cache[i].used && cache[i].user == user && cache[i].id == id)
            return cache[i].name;
    unsigned slot = next++ % (sizeof cache / sizeof cache[0]);
    struct passwd *pw = user ? getpwuid(id) : NULL;
    struct group *gr = user ? NULL : getgrgid(id);
    const char *name = pw ? pw->pw_name : gr ? gr->gr_name : NULL;
    if (name)
        snprintf(cache[slot].name, sizeof cache[slot].name, "%s", name);
    else
        snprintf(cache[slot].name, sizeof cache[slot].name, "%u", id);
    cache[slot].used = true;
    cache[slot].user = user;
    cache[slot].id = id;
    return cache[slot].name;
}

/* path's user.e2b.* attributes as ,"metadata":{KEY: VALUE} (nothing
 * without any; a link's own, which it cannot have). */
static void put_metadata(FILE *f, const char *path)
{
    char names[META_MAX * 2], value[META_MAX + 1];
    ssize_t n = llistxattr(path, names, sizeof names);
    bool any = false;
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
        const char *name = names + i;
        if (strncmp(name, META_PREFIX, strlen(META_PREFIX)) != 0)
            continue;
        ssize_t v = lgetxattr(path, name, value, META_MAX);
        if (v < 0)
            continue;
        value[v] = 0;
        fputs(any ? "," : ",\"metadata\":{", f);
        any = true;
        fs_put_str(f, name + strlen(META_PREFIX));
        fputc(':', f);
        fs_put_str(f, value);
    }
    if (any)
        fputc('}', f);
}

static void put_entry(FILE *f, const char *path, const struct stat *st, const char *target)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash && slash[1] ? slash + 1 : path;
    char perms[10], when[32];
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        perms[i] = st->st_mode & (0400u >> i) ? rwx[i] : '-';
    perms[9] = 0;
    struct tm tm;
    gmtime_r(&st->st_mtime, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fputs("{\"name\":", f);
    fs_put_str(f, name);
    fputs(",\"path\":", f);
    fs_put_str(f, path);
    fprintf(f, ",\"type\":\"%s\",\"size\":%lld,\"mode\":%u,\"permissions\":\"%s\",\"owner\":",
            type_name(st->st_mode), (long long)st->st_size, (unsigned)(st->st_mode & 07777), perms);
    fs_put_str(f, id_name(true, (unsigned)st->st_uid));
    fputs(",\"group\":", f);
    fs_put_str(f, id_name(false, (unsigned)st->st_gid));
    fprintf(f, ",\"modified\":\"%s\"", when);
    put_metadata(f, path);
    if (target) {
        /* the link as written, and where it leads: the type and the whole
         * path of what it names in the end (E2B's envd gives these) */
        fputs(",\"symlink_target\":", f);
        fs_put_str(f, target);
        struct stat to;
        char *resolved = realpath(path, NULL);
        if (resolved && stat(resolved, &to) == 0) {
            fprintf(f, ",\"target_type\":\"%s\",\"target_path\":", type_name(to.st_mode));
            fs_put_str(f, resolved);
        }
        free(resolved);
    }
    fputc('}', f);
}

/* The entry of path, whose lstat is st: a link's target read (none if it
 * went meanwhile); always written. */
static void put_entry_of(FILE *f, const char *path, const struct stat *st)
{
    char target[PATH_MAX + 1];
    ssize_t n = S_ISLNK(st->st_mode) ? readlink(path, target, PATH_MAX) : -1;
    if (n >= 0)
        target[n] = 0;
    put_entry(f, path, st, n >= 0 ? target : NULL);
}

bool fs_put_entry(FILE *f, const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return false;
    put_entry_of(f, path, &st);
    return true;
}

/* path's entry, links not followed; 0, or fs_fail()'s status. */
static int entry_of(FILE *f, const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return fs_fail(errno, "stat", path);
    put_entry_of(f, path, &st);
    return 0;
}

int fs_fail(int errnum, const char *what, const char *path)
{
    fprintf(stderr, "{\"errno\":%d,\"message\":", errnum);
    char *msg = NULL;
    if (asprintf(&msg, "%s %s: %s", what, path, strerror(errnum)) < 0)
        msg = NULL;
    fs_put_str(stderr, msg ? msg : what);
    free(msg);
    fputs("}\n", stderr);
    return 1;
}

/* --- stat, list, mkdir, move, remove ------------------------------------------------ */

static int do_stat(const char *path)
{
    int rc = entry_of(stdout, path);
    if (rc == 0)
        fputc('\n', stdout);
    return rc;
}

static unsigned listed;
static bool truncated;

/* The entries under dir (path as given), depth levels deep. */
static void list_dir(const char *path, unsigned depth)
{
    DIR *d = opendir(path);
    if (!d)
        return; /* unreadable below the top: its entry is listed, not its contents */
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (listed == LIST_MAX) {
            truncated = true;
            break;
        }
        char *child = NULL;
        if (asprintf(&child, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", e->d_name) <
            0)
            break;
        /* One lstat: a second one, after the comma, could find the entry
         * gone (a file removed meanwhile, a process leaving /proc) and leave
         * the listing a dangling comma, invalid JSON. */
        struct stat st;
        if (lstat(child, &st) == 0) {
            fputs(listed++ ? "," : "", stdout);
            put_entry_of(stdout, child, &st);
            if (S_ISDIR(st.st_mode) && depth > 1)
                list_dir(child, depth - 1);
        }
        free(child);
    }
    closedir(d);
}

static int do_list(const char *path, const char *depth_s)
{
    char *end;
    unsigned long depth = strtoul(depth_s, &end, 10);
    if (*end || depth < 1 || depth > 64)
        return fs_fail(EINVAL, "list: depth (1 to 64)", depth_s);
    struct stat st;
    if (stat(path, &st) < 0)
        return fs_fail(errno, "list", path);
    if (!S_ISDIR(st.st_mode))
        return fs_fail(ENOTDIR, "list", path);
    DIR *d = opendir(path);
    if (!d)
        return fs_fail(errno, "list", path);
    closedir(d);
    fputs("{\"path\":", stdout);
    fs_put_str(stdout, path);
    fputs(",\"entries\":[", stdout);
    list_dir(path, (unsigned)depth);
    printf("]%s}\n", truncated ? ",\"truncated\":true" : "");
    return 0;
}

/* mkdir -p: every missing directory on path, its last component too when
 * last.  A file in the way: EEXIST for the last component, else ENOTDIR. */
static int make_dirs(const char *path, bool last)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return fs_fail(ENAMETOOLONG, "mkdir", path);
    if (!last)
        *strrchr(buf, '/') = 0; /* path is absolute: there is one */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char c = *p;
        *p = 0;
        struct stat st;
        int made = mkdir(buf, 0777);
        if (made < 0 && errno != EEXIST)
            return fs_fail(errno, "mkdir", buf);
        if (made == 0 && envd_modes) /* not the group's setgid bit it inherits */
            chmod(buf, 0755);
        if (stat(buf, &st) < 0)
            return fs_fail(errno, "mkdir", buf);
        if (!S_ISDIR(st.st_mode))
            return fs_fail(c == 0 && last ? EEXIST : ENOTDIR, "mkdir", buf);
        *p = c;
        if (c == 0)
            return 0;
    }
}

static int do_mkdir(const char *path)
{
    int rc = make_dirs(path, true);
    return rc ? rc : do_stat(path);
}

/* A temporary file beside path, in tmp; its fd, or -1 (errno set). */
static int temp_beside(const char *path, char tmp[PATH_MAX])
{
    const char *slash = strrchr(path, '/');
    if (snprintf(tmp, PATH_MAX, "%.*s/.%s.sandgate-XXXXXX", (int)(slash - path), path, slash + 1) >=
        PATH_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkostemp(tmp, O_CLOEXEC);
}

/* in's user.e2b.* attributes onto out (a file moved across file systems
 * keeps its metadata). */
static void copy_metadata(int in, int out)
{
    char names[META_MAX * 2], value[META_MAX];
    ssize_t n = flistxattr(in, names, sizeof names);
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
        ssize_t v = strncmp(names + i, META_PREFIX, strlen(META_PREFIX)) == 0
                        ? fgetxattr(in, names + i, value, sizeof value)
                        : -1;
        if (v >= 0)
            fsetxattr(out, names + i, value, (size_t)v, 0);
    }
}

static int copy_fd(int in, int out)
{
    static char buf[1 << 20];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write_all(out, buf, (size_t)n) < 0)
            return -1;
    }
    return 0;
}

/* rename(2) across file systems (/tmp is a tmpfs, the workspace another):
 * a file is copied beside `to` and renamed onto it, a symlink made anew,
 * then the original goes.  A directory is refused (EXDEV). */
static int move_across(const char *from, const char *to, const struct stat *st)
{
    char tmp[PATH_MAX], target[PATH_MAX + 1];
    if (S_ISLNK(st->st_mode)) {
        ssize_t n = readlink(from, target, PATH_MAX);
        int fd = n < 0 ? -1 : temp_beside(to, tmp);
        if (fd < 0)
            return fs_fail(errno, "move", from);
        close(fd);
        target[n] = 0;
        if (unlink(tmp) < 0 || symlink(target, tmp) < 0 || rename(tmp, to) < 0) {
            int e = errno;
            unlink(tmp);
            return fs_fail(e, "move to", to);
        }
        return unlink(from) < 0 ? fs_fail(errno, "move (removing the original)", from) : 0;
    }
    if (!S_ISREG(st->st_mode))
        return fs_fail(EXDEV, "move (only files and links move across file systems)", from);
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (in < 0)
        return fs_fail(errno, "move", from);
    int out = temp_beside(to, tmp);
    if (out < 0) {
        close(in);
        return fs_fail(errno, "move to", to);
    }
    fchmod(out, st->st_mode & 07777);
    copy_metadata(in, out);
    int rc = copy_fd(in, out);
    int e = errno;
    close(in);
    if (close(out) < 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, to) < 0) {
        rc = -1;
        e = errno;
    }
    if (rc < 0) {
        unlink(tmp);
        return fs_fail(e, "move to", to);
    }
    return unlink(from) < 0 ? fs_fail(errno, "move (removing the original)", from) : 0;
}

static int do_move(const char *from, const char *to)
{
    struct stat st;
    if (lstat(from, &st) < 0)
        return fs_fail(errno, "move", from);
    int rc = make_dirs(to, false);
    if (rc)
        return rc;
    if (rename(from, to) < 0) {
        if (errno != EXDEV)
            return fs_fail(errno, "move to", to);
        if ((rc = move_across(from, to, &st)) != 0)
            return rc;
    }
    return do_stat(to);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
        return fs_fail(errno, "remove", path);
    return 0;
}

static int do_remove(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return fs_fail(errno, "remove", path);
    if (!S_ISDIR(st.st_mode))
        return unlink(path) < 0 ? fs_fail(errno, "remove", path) : 0;
    /* FTW_PHYS: links are removed, never followed; FTW_MOUNT: not into a mount */
    return nftw(path, remove_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0;
}

/* --- read, write -------------------------------------------------------------------- */

static int do_read(const char *path)
{
    /* O_NONBLOCK: a FIFO planted at path must not hold the command open */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return fs_fail(errno, "read", path);
    if (S_ISDIR(st.st_mode))
        return fs_fail(EISDIR, "read", path);
    if (!S_ISREG(st.st_mode))
        return fs_fail(ENXIO, "read (not a regular file)", path);
    static char buf[1 << 20];
    if (st.st_size == 0) {
        /* /proc's and /sys's files say 0 and have text: what one read up
         * to the buffer gives is its content, and its size */
        size_t got = 0;
        ssize_t n;
        while (got < sizeof buf &&
               ((n = read(fd, buf + got, sizeof buf - got)) > 0 || (n < 0 && errno == EINTR)))
            got += n > 0 ? (size_t)n : 0;
        st.st_size = (off_t)got;
        put_entry(stdout, path, &st, NULL);
        fputc('\n', stdout);
        fflush(stdout);
        return write_all(1, buf, got) < 0;
    }
    put_entry(stdout, path, &st, NULL);
    fputc('\n', stdout);
    fflush(stdout);
    for (off_t left = st.st_size; left > 0;) {
        ssize_t n = read(fd, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fs_fail(n < 0 ? errno : EIO, "read (the file shrank)", path);
        if (write_all(1, buf, (size_t)n) < 0)
            return 1; /* the reader has gone */
        left -= n;
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* stdin's frames into fd; 0 after the end frame, else fs_fail()'s status. */
/* The frames are gathered up to FRAME_MAX and written a full buffer at a
 * time: a file of that size or less is one write(2), one change a watcher
 * sees (however the daemon cut the data). */
static int copy_frames(int fd, const char *path)
{
    static char buf[2 * FRAME_MAX];
    size_t have = 0;
    for (;;) {
        unsigned char h[4];
        if (read_full(0, h, 4) < 0)
            return fs_fail(ECANCELED, "write (the data broke off)", path);
        uint32_t len = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (len > FRAME_MAX)
            return fs_fail(EPROTO, "write (a bad frame)", path);
        if ((len == 0 || have + len > FRAME_MAX) && have && write_all(fd, buf, have) < 0)
            return fs_fail(errno, "write", path);
        have = len == 0 || have + len > FRAME_MAX ? 0 : have;
        if (len == 0)
            return 0;
        if (read_full(0, buf + have, len) < 0)
            return fs_fail(ECANCELED, "write (the data broke off)", path);
        have += len;
    }
}

/* METADATA's lines onto fd as user.e2b.KEY; 0, or fs_fail()'s status. */
static int set_metadata(int fd, const char *meta, const char *path)
{
    char line[META_MAX + 64];
    for (const char *p = meta; p && *p;) {
        size_t n = strcspn(p, "\n");
        const char *eq = memchr(p, '=', n);
        if (!eq || eq == p || n >= sizeof line - strlen(META_PREFIX))
            return fs_fail(EINVAL, "write (metadata: KEY=VALUE lines)", path);
        snprintf(line, sizeof line, META_PREFIX "%.*s", (int)(eq - p), p);
        if (fsetxattr(fd, line, eq + 1, n - (size_t)(eq + 1 - p), 0) < 0)
            return fs_fail(errno, "write (metadata)", path);
        p += n + (p[n] == '\n');
    }
    return 0;
}

/* Removes fd's user.e2b.* attributes. */
static void clear_metadata(int fd)
{
    char names[8192];
    ssize_t n = flistxattr(fd, names, sizeof names);
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1)
        if (strncmp(names + i, META_PREFIX, strlen(META_PREFIX)) == 0)
            fremovexattr(fd, names + i);
}

static int overwrite(const char *path, const char *meta)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fs_fail(EISDIR, "write", path);
    int rc = make_dirs(path, false);
    if (rc)
        return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
    if (fd < 0)
        return fs_fail(errno, "write", path);
    struct stat now;
    int e = fstat(fd, &now) < 0 ? errno : S_ISREG(now.st_mode) ? 0 : EINVAL;
    if (e) { /* a FIFO, a device: never written */
        close(fd);
        return fs_fail(e, "write (a regular file)", path);
    }
    fcntl(fd, F_SETFL, 0);
    /* envd's chown after the open: the change a watcher sees as chmod (a
     * file of another owner keeps it) */
    if (fchown(fd, getuid(), getgid()) < 0)
        e = 0;
    clear_metadata(fd);
    rc = set_metadata(fd, meta, path);
    if (rc == 0)
        rc = copy_frames(fd, path);
    if (close(fd) < 0 && rc == 0)
        rc = fs_fail(errno, "write", path);
    return rc ? rc : do_stat(path);
}

static int do_write(const char *path, const char *meta)
{
    struct stat st;
    bool existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode))
        return fs_fail(EISDIR, "write", path);
    int rc = make_dirs(path, false);
    if (rc)
        return rc;
    char tmp[PATH_MAX];
    int fd = temp_beside(path, tmp);
    if (fd < 0)
        return fs_fail(errno, "write", path);
    /* mkstemp's 0600, widened as umask allows: what the kernel's files get */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, existed && S_ISREG(st.st_mode) ? st.st_mode & 07777 : 0666 & ~mask);
    rc = set_metadata(fd, meta, path);
    if (rc == 0)
        rc = copy_frames(fd, path);
    if (close(fd) < 0 && rc == 0)
        rc = fs_fail(errno, "write", path);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = fs_fail(errno, "write", path);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    return do_stat(path);
}

int sandbox_fs_main(int argc, char **argv)
{
    const char *op = argc > 0 ? argv[0] : "";
    int n = argc - 1;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '/' &&
            !(i >= 2 && (strcmp(op, "list") == 0 || strcmp(op, "write") == 0 ||
                         strcmp(op, "overwrite") == 0 || strcmp(op, "watch") == 0)))
            return fs_fail(EINVAL, "a path must be absolute:", argv[i]);
    envd_modes = strcmp(op, "overwrite") == 0 || strcmp(op, "envd-mkdir") == 0;
    if (envd_modes)
        umask(022);
    int rc;
    if (strcmp(op, "stat") == 0 && n == 1)
        rc = do_stat(argv[1]);
    else if (strcmp(op, "list") == 0 && n == 2)
        rc = do_list(argv[1], argv[2]);
    else if ((strcmp(op, "mkdir") == 0 || strcmp(op, "envd-mkdir") == 0) && n == 1)
        rc = do_mkdir(argv[1]);
    else if (strcmp(op, "move") == 0 && n == 2)
        rc = do_move(argv[1], argv[2]);
    else if (strcmp(op, "remove") == 0 && n == 1)
        rc = do_remove(argv[1]);
    else if (strcmp(op, "read") == 0 && n == 1)
        rc = do_read(argv[1]);
    else if (strcmp(op, "write") == 0 && (n == 1 || n == 2))
        rc = do_write(argv[1], n == 2 ? argv[2] : NULL);
    else if (strcmp(op, "overwrite") == 0 && (n == 1 || n == 2))
        rc = overwrite(argv[1], n == 2 ? argv[2] : NULL);
    else if (strcmp(op, "watch") == 0 && n == 3)
        rc = fs_watch(argv[1], strcmp(argv[2], "1") == 0, strcmp(argv[3], "1") == 0);
    else {
        fs_fail(EINVAL, "usage: sandgate-init --fs",
                "stat|list|mkdir|envd-mkdir|move|remove|read|write|overwrite|watch ...");
        return 2;
    }
    if (fflush(stdout) != 0 && rc == 0)
        rc = 1;
    return rc;
}
