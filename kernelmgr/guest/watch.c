/* watch: `sandgate-init --fs watch PATH RECURSIVE ENTRIES`, a directory's
 * changes as inotify inside the sandbox tells them, for gateway/envd/watch.c
 * (E2B's WatchDir and CreateWatcher).  Run as every --fs operation is (fs.c),
 * as the sandbox user, but for as long as it is watched.
 *
 * Out: {"ok":true} once PATH (a directory) is watched, or fs.c's failure
 * line and exit 1 (ENOENT, ENOTDIR...).  Then one line an event:
 *   {"type":N,"name":"REL"}   with ENTRIES also "entry":{...} (fs.c's) when
 *                             the path can still be stat-ed
 * N is E2B's EventType, from inotify as Go's fsnotify (E2B's envd) maps
 * it: 1 create (IN_CREATE, IN_MOVED_TO), 2 write (IN_MODIFY), 3 remove
 * (IN_DELETE), 4 rename (IN_MOVED_FROM), 5 chmod (IN_ATTRIB).  REL is the
 * path relative to PATH.  RECURSIVE: every directory below PATH is watched,
 * and those made later (their own contents from then on).  PATH itself
 * removed or moved: {"type":3|4,"name":""} and exit 0.
 *
 * In: a line "sync" has every event inotify holds so far printed, then
 * {"synced":true}: what happened before the sync was asked for is out
 * before its answer (a write the caller saw complete, then asks for the
 * events).  End of input: exit 0.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernelmgr/guest/fs.h"

#define MASK                                                                                       \
    (IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |                 \
     IN_DELETE_SELF | IN_MOVE_SELF)
#define MAX_DIRS 8192

static int ifd = -1;
static const char *root;
static bool entries;
static struct {
    int wd;
    char *rel; /* "" for the root */
} dirs[MAX_DIRS];
static int ndirs;

static const char *rel_of(int wd)
{
    for (int i = 0; i < ndirs; i++)
        if (dirs[i].wd == wd)
            return dirs[i].rel;
    return NULL;
}

/* The path of rel (relative to the root) into path. */
static void full(char path[PATH_MAX], const char *rel)
{
    bool slash = *rel && strcmp(root, "/") != 0;
    snprintf(path, PATH_MAX, "%s%s%s", *rel && !slash ? "/" : root, slash ? "/" : "", rel);
}

static void add_dir(const char *rel)
{
    char path[PATH_MAX];
    full(path, rel);
    int wd = inotify_add_watch(ifd, path, MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0 || rel_of(wd) || ndirs == MAX_DIRS)
        return;
    dirs[ndirs].wd = wd;
    dirs[ndirs].rel = strdup(rel);
    ndirs += dirs[ndirs].rel != NULL;
}

static int add_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (flag == FTW_D && ftw->level > 0)
        add_dir(path + (strcmp(root, "/") == 0 ? 1 : strlen(root) + 1));
    return 0;
}

/* rel's directory and those below it. */
static void add_tree(const char *rel)
{
    char path[PATH_MAX];
    full(path, rel);
    add_dir(rel);
    nftw(path, add_one, 16, FTW_PHYS);
}

static int type_of(uint32_t mask)
{
    return mask & (IN_CREATE | IN_MOVED_TO) ? 1
           : mask & IN_MODIFY               ? 2
           : mask & IN_DELETE               ? 3
           : mask & IN_MOVED_FROM           ? 4
           : mask & IN_ATTRIB               ? 5
                                            : 0;
}

static void print_event(int type, const char *rel)
{
    printf("{\"type\":%d,\"name\":", type);
    fs_put_str(stdout, rel);
    char path[PATH_MAX];
    full(path, rel);
    if (entries && type != 3 && type != 4) {
        fputs(",\"entry\":", stdout);
        if (!fs_put_entry(stdout, path))
            fputs("null", stdout);
    }
    fputs("}\n", stdout);
}

/* Reads what inotify holds; false when the root went (its last event out). */
static bool drain(bool recursive)
{
    char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(ifd, buf, sizeof buf);
        if (n <= 0)
            return true; /* EAGAIN: all read */
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            const char *dir = rel_of(ev->wd);
            if (!dir)
                continue;
            if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
                if (*dir) /* a directory below: its parent told it already */
                    continue;
                print_event(ev->mask & IN_DELETE_SELF ? 3 : 4, "");
                return false;
            }
            int type = type_of(ev->mask);
            if (!type || !ev->len)
                continue;
            char rel[PATH_MAX];
            snprintf(rel, sizeof rel, "%s%s%s", dir, *dir ? "/" : "", ev->name);
            if (recursive && type == 1 && (ev->mask & IN_ISDIR))
                add_tree(rel);
            print_event(type, rel);
        }
    }
}

int fs_watch(const char *path, bool recursive, bool with_entries)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return fs_fail(errno, "watch", path);
    if (!S_ISDIR(st.st_mode))
        return fs_fail(ENOTDIR, "watch", path);
    static char trimmed[PATH_MAX];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--)
        trimmed[n - 1] = '\0';
    root = trimmed;
    entries = with_entries;
    ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0)
        return fs_fail(errno, "watch (inotify)", path);
    if (recursive)
        add_tree("");
    else
        add_dir("");
    if (ndirs == 0)
        return fs_fail(errno ? errno : EINVAL, "watch", path);
    puts("{\"ok\":true}");
    fflush(stdout);
    char line[64];
    size_t len = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = ifd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            return 1;
        bool going = drain(recursive);
        if (going && (pf[1].revents & (POLLIN | POLLHUP))) {
            ssize_t n = read(0, line + len, sizeof line - 1 - len);
            if (n <= 0)
                going = false;
            else
                len += (size_t)n;
            for (char *nl; going && (nl = memchr(line, '\n', len));) {
                going = drain(recursive); /* everything up to the ask */
                puts("{\"synced\":true}");
                len -= (size_t)(nl + 1 - line);
                memmove(line, nl + 1, len);
            }
            if (len == sizeof line - 1)
                len = 0;
        }
        if (fflush(stdout) != 0 || !going)
            return 0;
    }
}
