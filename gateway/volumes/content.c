/* content: a volume's files with no sandbox — E2B's volume content API
 * (spec/openapi-volumecontent.yml):
 *
 *   GET    /volumecontent/{volume}/path?path=P   an entry's VolumeEntryStat
 *   PATCH  /volumecontent/{volume}/path?path=P   {uid, gid, mode}
 *   DELETE /volumecontent/{volume}/path?path=P   a file, or a directory and all in it
 *   GET    /volumecontent/{volume}/dir?path=P&depth=N   its entries, N levels down
 *   POST   /volumecontent/{volume}/dir?path=P&uid&gid&mode&force   (force: its parents too)
 *   GET    /volumecontent/{volume}/file?path=P   the bytes
 *   PUT    /volumecontent/{volume}/file?path=P&uid&gid&mode&force   streamed to disk
 *
 * Paths resolve beneath the volume's root as a workspace's do
 * (gateway/files/: no '..', no symlink followed, code in a sandbox cannot
 * lead here elsewhere).  What this process makes is given to the sandbox
 * user, or to the uid and gid asked for, through the launcher
 * (sandbox_give_as): uid and gid 1 to 2^31-1, root's refused.  An existing
 * file is replaced only with force=true (E2B's), a missing parent is 404
 * unless a directory is made with force. */
#include "gateway/volumes/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "gateway/files/files.h"

#define LIST_MAX 10000

static const char *arg(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

/* ?path=: "/a/b" as the client means it, and its parts beneath the root
 * ("a/b": parent "a", base "b"; the root itself is ""). */
typedef struct {
    char shown[PATH_MAX + 2], rel[PATH_MAX], parent[PATH_MAX];
    const char *base;
} vpath_t;

static int vpath(struct MHD_Connection *conn, vpath_t *p, sg_error_t **err)
{
    const char *q = arg(conn, "path");
    if (!q || !*q)
        return sg_error_set(err, SG_E_INVALID, "'path' is required");
    while (*q == '/')
        q++;
    size_t n = strlen(q);
    while (n && q[n - 1] == '/')
        n--;
    if (n >= sizeof p->rel - 1)
        return sg_error_set(err, SG_E_INVALID, "'path' is too long");
    memcpy(p->rel, q, n);
    p->rel[n] = 0;
    snprintf(p->shown, sizeof p->shown, "/%s", p->rel);
    snprintf(p->parent, sizeof p->parent, "%s", p->rel);
    char *slash = strrchr(p->parent, '/');
    p->base = p->rel + (slash ? slash - p->parent + 1 : 0);
    if (slash)
        *slash = 0;
    else
        p->parent[0] = 0;
    return 0;
}

static int int_arg(struct MHD_Connection *conn, const char *name, long long lo, long long hi,
                   long long *out, sg_error_t **err)
{
    const char *v = arg(conn, name);
    *out = -1;
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi)
        return sg_error_set(err, SG_E_INVALID, "'%s': %lld to %lld", name, lo, hi);
    *out = n;
    return 0;
}

/* ?uid=&gid=&mode= (-1: not given). */
static int owner_args(struct MHD_Connection *conn, sandbox_owner_t *as, sg_error_t **err)
{
    long long uid, gid, mode;
    if (int_arg(conn, "uid", 1, INT32_MAX, &uid, err) < 0 ||
        int_arg(conn, "gid", 1, INT32_MAX, &gid, err) < 0 ||
        int_arg(conn, "mode", 0, 07777, &mode, err) < 0)
        return -1;
    *as = (sandbox_owner_t){uid, gid, (int)mode};
    return 0;
}

static char *iso(struct timespec ts, char *buf, size_t size)
{
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%06ldZ", ts.tv_nsec / 1000);
    return buf;
}

/* VolumeEntryStat. */
static json_t *stat_json(const char *shown, const struct stat *st, const char *target)
{
    char a[40], m[40], c[40];
    const char *name = strrchr(shown, '/');
    name = name && name[1] ? name + 1 : "/";
    const char *type = S_ISREG(st->st_mode)   ? "file"
                       : S_ISDIR(st->st_mode) ? "directory"
                       : S_ISLNK(st->st_mode) ? "symlink"
                                              : "unknown";
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I, s:s, s:s, s:s}", "name", name,
                          "type", type, "path", shown, "size", (json_int_t)st->st_size, "mode",
                          (int)(st->st_mode & 07777), "uid", (json_int_t)st->st_uid, "gid",
                          (json_int_t)st->st_gid, "atime", iso(st->st_atim, a, sizeof a), "mtime",
                          iso(st->st_mtim, m, sizeof m), "ctime", iso(st->st_ctim, c, sizeof c));
    if (target)
        json_object_set_new(j, "target", json_string(target));
    return j;
}

/* The entry p names, not followed: its stat (and a symlink's target). */
static json_t *entry(const volume_t *v, const vpath_t *p, sg_error_t **err)
{
    struct stat st;
    if (!*p->rel) {
        int fd = files_open(v->path, "", &st, err);
        if (fd < 0)
            return NULL;
        close(fd);
        return stat_json("/", &st, NULL);
    }
    cleanup_close int dfd = files_open(v->path, p->parent, &st, err);
    if (dfd < 0 || !S_ISDIR(st.st_mode)) {
        sg_error_free(err);
        sg_error_set(err, SG_E_NOTFOUND, "path %s not found", p->shown);
        return NULL;
    }
    if (fstatat(dfd, p->base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        sg_error_set(err, errno == ENOENT ? SG_E_NOTFOUND : SG_E_IO, "path %s not found", p->shown);
        return NULL;
    }
    char target[PATH_MAX] = "";
    ssize_t n = S_ISLNK(st.st_mode) ? readlinkat(dfd, p->base, target, sizeof target - 1) : -1;
    if (n >= 0)
        target[n] = 0;
    return stat_json(p->shown, &st, n >= 0 ? target : NULL);
}

/* A request waiting for the launcher's give (a made directory, a PATCH). */
typedef struct {
    volumes_t *self;
    struct MHD_Connection *conn;
    vpath_t p;
    volume_t *v;
    unsigned status;
    bool done;
    sg_error_t *err;
    uint64_t request;
} giving_t;

static void given(const sg_error_t *err, void *arg)
{
    giving_t *g = arg;
    g->done = true;
    g->request = 0;
    if (err)
        sg_error_set(&g->err, err->kind, "%s", err->msg);
    if (g->conn) {
        http_resume(g->conn);
        g->self->wake(g->self->wake_arg);
    }
}

static enum MHD_Result give_answer(giving_t *g, struct MHD_Connection *conn)
{
    if (g->err)
        return http_reply_code_error(conn, g->err);
    sg_error_t *err = NULL;
    json_t *j = entry(g->v, &g->p, &err);
    enum MHD_Result ret =
        j ? http_reply_json(conn, g->status, j) : http_reply_code_error(conn, err);
    sg_error_free(&err);
    return ret;
}

/* Gives fd (closed here) as as says, then answers g->status with the
 * entry: now, or once the launcher has answered. */
static enum MHD_Result give_then_answer(volumes_t *self, http_req_t *req, volume_t *v,
                                        const vpath_t *p, int fd, const sandbox_owner_t *as,
                                        unsigned status)
{
    giving_t *g = xzalloc(sizeof *g);
    *g = (giving_t){.self = self, .p = *p, .v = v, .status = status};
    req->state = g;
    g->request = sandbox_give_as(fd, as, given, g);
    close(fd);
    if (g->done)
        return give_answer(g, req->conn);
    g->conn = req->conn;
    http_suspend(req->conn);
    return MHD_YES;
}

static void content_done(void *ctx, void *state, bool completed)
{
    (void)ctx, (void)completed;
    giving_t *g = state;
    sandbox_cancel(g->request);
    sg_error_free(&g->err);
    free(g);
}

/* --- path -------------------------------------------------------------------------------- */

static enum MHD_Result path_get(void *ctx, http_req_t *req)
{
    (void)ctx;
    vpath_t p;
    cleanup_error sg_error_t *err = NULL;
    json_t *j = vpath(req->conn, &p, &err) < 0 ? NULL : entry(http_arg(req, "volume"), &p, &err);
    return j ? http_reply_json(req->conn, 200, j) : http_reply_code_error(req->conn, err);
}

static enum MHD_Result path_patch(void *ctx, http_req_t *req)
{
    if (req->resumed)
        return give_answer(req->state, req->conn);
    volume_t *v = http_arg(req, "volume");
    vpath_t p;
    struct stat st;
    cleanup_error sg_error_t *err = NULL;
    json_error_t jerr;
    cleanup_json json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    json_t *uid = json_object_get(body, "uid"), *gid = json_object_get(body, "gid"),
           *mode = json_object_get(body, "mode");
    if (vpath(req->conn, &p, &err) < 0)
        return http_reply_code_error(req->conn, err);
    if (!json_is_object(body) || (uid && !json_is_integer(uid)) || (gid && !json_is_integer(gid)) ||
        (mode && !json_is_integer(mode)) || json_integer_value(uid) < 0 ||
        json_integer_value(gid) < 0 || json_integer_value(mode) < 0 ||
        json_integer_value(mode) > 07777 || json_integer_value(uid) > INT32_MAX ||
        json_integer_value(gid) > INT32_MAX || (uid && !json_integer_value(uid)) ||
        (gid && !json_integer_value(gid))) {
        sg_error_set(&err, SG_E_INVALID,
                     "the body: {uid, gid (1 to 2^31-1), mode (0 to 07777)}, each optional");
        return http_reply_code_error(req->conn, err);
    }
    int fd = files_open(v->path, p.rel, &st, &err);
    if (fd < 0)
        return http_reply_code_error(req->conn, err);
    sandbox_owner_t as = {uid ? json_integer_value(uid) : -1, gid ? json_integer_value(gid) : -1,
                          mode ? (int)json_integer_value(mode) : -1};
    return give_then_answer(ctx, req, v, &p, fd, &as, 200);
}

static enum MHD_Result path_delete(void *ctx, http_req_t *req)
{
    (void)ctx;
    volume_t *v = http_arg(req, "volume");
    vpath_t p;
    cleanup_error sg_error_t *err = NULL;
    if (vpath(req->conn, &p, &err) < 0)
        return http_reply_code_error(req->conn, err);
    if (!*p.rel) {
        sg_error_set(&err, SG_E_INVALID, "the volume's root is not removed (DELETE /volumes/%s)",
                     v->id);
        return http_reply_code_error(req->conn, err);
    }
    json_t *e = entry(v, &p, &err);
    json_decref(e);
    if (!e || files_remove(v->path, p.rel, &err) < 0)
        return http_reply_code_error(req->conn, err);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = http_queue(req->conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- dir --------------------------------------------------------------------------------- */

static void list_into(json_t *out, int dfd, const char *shown, long depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) && json_array_size(out) < LIST_MAX) {
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        cleanup_free char *path = xasprintf("%s/%s", strcmp(shown, "/") ? shown : "", de->d_name);
        char target[PATH_MAX];
        ssize_t n =
            S_ISLNK(st.st_mode) ? readlinkat(dirfd(d), de->d_name, target, sizeof target - 1) : -1;
        if (n >= 0)
            target[n] = 0;
        json_array_append_new(out, stat_json(path, &st, n >= 0 ? target : NULL));
        if (S_ISDIR(st.st_mode) && depth > 1) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                list_into(out, sub, path, depth - 1);
        }
    }
    closedir(d);
}

static enum MHD_Result dir_get(void *ctx, http_req_t *req)
{
    (void)ctx;
    volume_t *v = http_arg(req, "volume");
    vpath_t p;
    struct stat st;
    long long depth;
    cleanup_error sg_error_t *err = NULL;
    if (vpath(req->conn, &p, &err) < 0 || int_arg(req->conn, "depth", 1, 32, &depth, &err) < 0)
        return http_reply_code_error(req->conn, err);
    int fd = files_open(v->path, p.rel, &st, &err);
    if (fd >= 0 && !S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        sg_error_set(&err, SG_E_NOTFOUND, "path %s is not a directory", p.shown);
    }
    if (fd < 0)
        return http_reply_code_error(req->conn, err);
    json_t *out = json_array();
    list_into(out, fd, p.shown, depth > 0 ? depth : 1);
    return http_reply_json(req->conn, 200, out);
}

static void ignore(const sg_error_t *err, void *arg)
{
    (void)err, (void)arg;
}

/* rel, a directory POST /dir with force makes when missing: the sandbox
 * user's.  What fails is found by the step after. */
static void make_parent(const volume_t *v, const char *rel)
{
    vpath_t q;
    struct stat st;
    snprintf(q.parent, sizeof q.parent, "%s", rel);
    char *slash = strrchr(q.parent, '/');
    const char *base = slash ? slash + 1 : rel;
    if (slash)
        *slash = 0;
    else
        q.parent[0] = 0;
    cleanup_error sg_error_t *err = NULL;
    cleanup_close int pfd = files_open(v->path, q.parent, &st, &err);
    if (pfd < 0 || mkdirat(pfd, base, 02770) < 0)
        return;
    int fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        sandbox_give(fd, ignore, NULL);
        close(fd);
    }
}

static enum MHD_Result dir_post(void *ctx, http_req_t *req)
{
    if (req->resumed)
        return give_answer(req->state, req->conn);
    volume_t *v = http_arg(req, "volume");
    vpath_t p;
    struct stat st;
    sandbox_owner_t as;
    cleanup_error sg_error_t *err = NULL;
    const char *force = arg(req->conn, "force");
    bool forced = force && strcmp(force, "true") == 0;
    if (vpath(req->conn, &p, &err) < 0 || owner_args(req->conn, &as, &err) < 0)
        return http_reply_code_error(req->conn, err);
    if (!*p.rel) {
        sg_error_set(&err, SG_E_CONFLICT, "path / exists already");
        return http_reply_code_error(req->conn, err);
    }
    /* each missing parent (with force), then the directory itself */
    for (char *s = p.rel; forced && (s = strchr(s, '/')); *s++ = '/') {
        *s = 0;
        make_parent(v, p.rel);
    }
    cleanup_close int pfd = files_open(v->path, p.parent, &st, &err);
    if (pfd < 0 || !S_ISDIR(st.st_mode)) {
        sg_error_free(&err);
        sg_error_set(&err, SG_E_NOTFOUND, "path %s not found (its parent does not exist)", p.shown);
        return http_reply_code_error(req->conn, err);
    }
    if (mkdirat(pfd, p.base, as.mode >= 0 ? (mode_t)as.mode : 02770) < 0) {
        bool dir = errno == EEXIST && fstatat(pfd, p.base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISDIR(st.st_mode);
        if (!(dir && forced)) {
            sg_error_set(&err, errno == EEXIST ? SG_E_CONFLICT : SG_E_IO, "path %s exists already",
                         p.shown);
            return http_reply_code_error(req->conn, err);
        }
    }
    int fd = openat(pfd, p.base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        sg_error_errno(&err, errno, "cannot open %s", p.shown);
        return http_reply_code_error(req->conn, err);
    }
    if (as.uid < 0)
        as.uid = SANDBOX_UID;
    if (as.gid < 0)
        as.gid = SANDBOX_GID;
    return give_then_answer(ctx, req, v, &p, fd, &as, 201);
}

/* --- file -------------------------------------------------------------------------------- */

static enum MHD_Result file_get(void *ctx, http_req_t *req)
{
    (void)ctx;
    volume_t *v = http_arg(req, "volume");
    vpath_t p;
    struct stat st;
    cleanup_error sg_error_t *err = NULL;
    if (vpath(req->conn, &p, &err) < 0)
        return http_reply_code_error(req->conn, err);
    int fd = files_open(v->path, p.rel, &st, &err);
    if (fd >= 0 && !S_ISREG(st.st_mode)) {
        close(fd);
        fd = -1;
        sg_error_set(&err, SG_E_NOTFOUND, "path %s is not a file", p.shown);
    }
    if (fd < 0)
        return http_reply_code_error(req->conn, err);
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    enum MHD_Result ret = http_queue(req->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* PUT: the body streamed into an upload (files.h), stored once in. */
typedef struct {
    volumes_t *self;
    volume_t *v;
    vpath_t p;
    sandbox_owner_t as;
    files_upload_t *up;
    sg_error_t *err;
    struct MHD_Connection *conn;
    bool storing, stored, giving, given;
    uint64_t request;
} put_t;

static void put_free(put_t *u)
{
    files_upload_abort(&u->up);
    sandbox_cancel(u->request);
    sg_error_free(&u->err);
    free(u);
}

static void *put_open(void *ctx, const http_req_t *req)
{
    put_t *u = xzalloc(sizeof *u);
    u->self = ctx;
    u->v = http_arg(req, "volume");
    struct stat st;
    const char *force = arg(req->conn, "force");
    if (vpath(req->conn, &u->p, &u->err) < 0 || owner_args(req->conn, &u->as, &u->err) < 0)
        return u;
    int pfd = *u->p.rel ? files_open(u->v->path, u->p.parent, &st, &u->err) : -1;
    if (pfd < 0 || !S_ISDIR(st.st_mode)) {
        sg_error_free(&u->err);
        sg_error_set(&u->err, *u->p.rel ? SG_E_NOTFOUND : SG_E_INVALID,
                     *u->p.rel ? "path %s not found (its parent does not exist)"
                               : "path %s is the volume's root",
                     u->p.shown);
    } else if (fstatat(pfd, u->p.base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               (!S_ISREG(st.st_mode) || !(force && strcmp(force, "true") == 0))) {
        sg_error_set(&u->err, SG_E_CONFLICT,
                     S_ISREG(st.st_mode) ? "path %s exists already (force=true replaces it)"
                                         : "path %s is not a file",
                     u->p.shown);
    } else {
        u->up = files_upload_begin(u->v->path, u->p.rel, (size_t)u->v->mib << 20, &u->err);
    }
    if (pfd >= 0)
        close(pfd);
    return u;
}

static size_t put_write(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                        size_t len)
{
    (void)ctx, (void)conn;
    put_t *u = sink;
    if (u->up && files_upload_write(u->up, data, len, &u->err) < 0)
        files_upload_abort(&u->up);
    return len;
}

static void put_wake(put_t *u)
{
    if (u->conn) {
        http_resume(u->conn);
        u->conn = NULL;
        u->self->wake(u->self->wake_arg);
    }
}

static void put_given(const sg_error_t *err, void *arg)
{
    put_t *u = arg;
    u->given = true;
    u->request = 0;
    if (err)
        sg_error_set(&u->err, err->kind, "%s", err->msg);
    put_wake(u);
}

static void put_stored(const json_t *info, const sg_error_t *err, void *arg)
{
    (void)info;
    put_t *u = arg;
    u->stored = true;
    if (err)
        sg_error_set(&u->err, err->kind, "%s", err->msg);
    put_wake(u);
}

static enum MHD_Result put_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    (void)ctx;
    put_t *u = *sink;
    if (u->up && !u->storing) {
        u->storing = true;
        files_upload_store(u->up, put_stored, u);
    }
    if (u->storing && !u->stored) {
        u->conn = conn;
        http_suspend(conn);
        return MHD_YES;
    }
    if (!u->err && !u->giving && (u->as.uid >= 0 || u->as.gid >= 0 || u->as.mode >= 0)) {
        u->giving = true;
        struct stat st;
        int fd = files_open(u->v->path, u->p.rel, &st, &u->err);
        if (fd >= 0) {
            u->request = sandbox_give_as(fd, &u->as, put_given, u);
            close(fd);
            if (!u->given) {
                u->conn = conn;
                http_suspend(conn);
                return MHD_YES;
            }
        }
    }
    json_t *j = u->err ? NULL : entry(u->v, &u->p, &u->err);
    enum MHD_Result ret = j ? http_reply_json(conn, 201, j) : http_reply_code_error(conn, u->err);
    *sink = NULL;
    put_free(u);
    return ret;
}

static void put_abort(void *ctx, void *sink)
{
    (void)ctx;
    put_free(sink);
}

static const http_sink_t put_sink = {
    .open = put_open, .write = put_write, .finish = put_finish, .abort = put_abort};

int volume_content_register(volumes_t *self, http_server_t *http, const http_front_t *front,
                            sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"GET", "/volumecontent/{volume}/path", path_get, 0, NULL},
        {"PATCH", "/volumecontent/{volume}/path", path_patch, 0, NULL},
        {"DELETE", "/volumecontent/{volume}/path", path_delete, 0, NULL},
        {"GET", "/volumecontent/{volume}/dir", dir_get, 0, NULL},
        {"POST", "/volumecontent/{volume}/dir", dir_post, 0, NULL},
        {"GET", "/volumecontent/{volume}/file", file_get, 0, NULL},
        {"PUT", "/volumecontent/{volume}/file", NULL, 0, &put_sink},
    };
    http_front_t content = *front;
    content.done = content_done;
    (void)self;
    return http_routes(http, &content, routes, sizeof routes / sizeof *routes, err);
}
