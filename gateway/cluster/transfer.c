/* transfer: a snapshot out of this sandgate and into another (cluster.h). */
#include "gateway/cluster/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"

#define RECORD_HEADER CLUSTER_RECORD_HEADER
#define RECORD_MAX (256 * 1024)

int cluster_parse_peers(const char *text, json_t *peers, sg_error_t **err)
{
    cleanup_free char *list = xstrdup(text ? text : "");
    char *save = NULL;
    json_object_clear(peers);
    for (char *p = strtok_r(list, " ,\n\t", &save); p; p = strtok_r(NULL, " ,\n\t", &save)) {
        char *eq = strchr(p, '=');
        if (!eq || eq == p || !eq[1] || !strchr(eq + 1, ':'))
            return sg_error_set(err, SG_E_INVALID, "--peers: '%s' is not ID=HOST:PORT", p);
        *eq = 0;
        json_object_set_new(peers, p, json_string(eq + 1));
    }
    return 0;
}

char *cluster_record_header(const json_t *record)
{
    cleanup_free char *text = json_dumps(record, JSON_COMPACT);
    size_t n = strlen(text), size = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_URLSAFE);
    char *b64 = xzalloc(size);
    sodium_bin2base64(b64, size, (const unsigned char *)text, n, sodium_base64_VARIANT_URLSAFE);
    return b64;
}

static bool admin(const http_req_t *req, enum MHD_Result *ret)
{
    if (req->tenant && req->tenant->admin)
        return true;
    *ret = http_reply_errorf(req->conn, SG_E_FORBIDDEN,
                             "moving snapshots between sandgates is the operator's (an admin "
                             "key's)");
    return false;
}

/* A request waiting for the launcher (an export's archive, an import). */
typedef struct {
    cluster_t *self;
    struct MHD_Connection *conn; /* suspended; NULL: not */
    char sid[37];
    json_t *record;
    bool done;
    uint64_t bytes;
    sg_error_t *err;
    int fd;      /* an import's archive being written; -1: none */
    char *path;  /* STATE/transfers/<sid>.tar */
    bool orphan; /* the client went while the launcher worked: finished() frees it */
} transfer_t;

static transfer_t *transfer_new(cluster_t *self)
{
    transfer_t *t = xzalloc(sizeof *t);
    *t = (transfer_t){.self = self, .fd = -1};
    return t;
}

static void transfer_free(transfer_t *t)
{
    if (t->fd >= 0) {
        close(t->fd);
        unlink(t->path);
    }
    json_decref(t->record);
    sg_error_free(&t->err);
    free(t->path);
    free(t);
}

static void finished(uint64_t bytes, const sg_error_t *err, void *arg)
{
    transfer_t *t = arg;
    t->done = true;
    t->bytes = bytes;
    if (err)
        sg_error_set(&t->err, err->kind, "%s", err->msg);
    if (t->orphan) {
        cleanup_free char *tar = xasprintf("%s/%s.tar", t->self->transfers, t->sid);
        unlink(tar); /* an export nobody takes */
        transfer_free(t);
        return;
    }
    if (t->conn) {
        http_resume(t->conn);
        t->conn = NULL;
        t->self->wake(t->self->wake_arg);
    }
}

/* --- GET: out ------------------------------------------------------------------------ */

static enum MHD_Result export_answer(transfer_t *t, struct MHD_Connection *conn)
{
    if (t->err)
        return http_reply_error(conn, t->err);
    cleanup_free char *path = xasprintf("%s/%s.tar", t->self->transfers, t->sid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    unlink(path); /* the open file is what is sent */
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        return http_reply_errorf(conn, SG_E_IO, "the archive of snapshot %s is gone", t->sid);
    }
    cleanup_free char *b64 = cluster_record_header(t->record);
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-tar");
    MHD_add_response_header(r, RECORD_HEADER, b64);
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    log_info("cluster: snapshot %s sent (%llu KiB)", t->sid,
             (unsigned long long)(st.st_size >> 10));
    return ret;
}

static enum MHD_Result snapshot_out(void *ctx, http_req_t *req)
{
    cluster_t *self = ctx;
    enum MHD_Result ret;
    if (req->resumed)
        return export_answer(req->state, req->conn);
    if (!admin(req, &ret))
        return ret;
    const kmgr_snapshot_t *s = http_arg(req, "snapshot");
    transfer_t *t = transfer_new(self);
    snprintf(t->sid, sizeof t->sid, "%s", s->id);
    req->state = t;
    cleanup_error sg_error_t *err = NULL;
    if (kmgr_snapshot_export(self->kmgr, t->sid, &t->record, finished, t, &err) < 0)
        return http_reply_error(req->conn, err);
    if (t->done)
        return export_answer(t, req->conn);
    t->conn = req->conn;
    http_suspend(req->conn);
    return MHD_YES;
}

/* --- PUT: in ------------------------------------------------------------------------- */

static json_t *header_record(struct MHD_Connection *conn, sg_error_t **err)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, RECORD_HEADER);
    size_t n = h ? strlen(h) : 0, len = 0;
    if (!n || n > RECORD_MAX) {
        sg_error_set(err, SG_E_INVALID, "no snapshot record (the %s header)", RECORD_HEADER);
        return NULL;
    }
    cleanup_free unsigned char *bin = xzalloc(n);
    json_error_t jerr;
    json_t *rec =
        sodium_base642bin(bin, n, h, n, NULL, &len, NULL, sodium_base64_VARIANT_URLSAFE) == 0
            ? json_loadb((const char *)bin, len, 0, &jerr)
            : NULL;
    if (!json_is_object(rec)) {
        json_decref(rec);
        sg_error_set(err, SG_E_INVALID, "the %s header is not a snapshot record", RECORD_HEADER);
    }
    return json_is_object(rec) ? rec : NULL;
}

static void *in_open(void *ctx, const http_req_t *req)
{
    cluster_t *self = ctx;
    transfer_t *t = transfer_new(self);
    if (!req->tenant || !req->tenant->admin) {
        sg_error_set(&t->err, SG_E_FORBIDDEN,
                     "moving snapshots between sandgates is the operator's (an admin key's)");
        return t;
    }
    const char *id = req->rest && *req->rest ? req->rest + 1 : "";
    if (!(t->record = header_record(req->conn, &t->err)))
        return t;
    const char *rid = json_string_value(json_object_get(t->record, "id"));
    if (!rid || strcmp(rid, id) != 0 || strlen(id) != 36 || strspn(id, "0123456789abcdef-") != 36) {
        sg_error_set(&t->err, SG_E_INVALID, "the path names snapshot '%.64s', its record '%.64s'",
                     id, rid ? rid : "");
        return t;
    }
    snprintf(t->sid, sizeof t->sid, "%s", id);
    if (kmgr_snapshot_get(self->kmgr, id)) {
        sg_error_set(&t->err, SG_E_CONFLICT, "snapshot %s exists here", id);
        return t;
    }
    t->path = xasprintf("%s/%s.tar", self->transfers, id);
    t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (t->fd < 0)
        sg_error_errno(&t->err, errno,
                       errno == EEXIST ? "snapshot %s is being moved in already"
                                       : "cannot create its archive (%s)",
                       errno == EEXIST ? id : t->path);
    return t;
}

static size_t in_write(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                       size_t len)
{
    (void)ctx, (void)conn;
    transfer_t *t = sink;
    for (size_t off = 0; t->fd >= 0 && !t->err && off < len;) {
        ssize_t n = write(t->fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            sg_error_errno(&t->err, errno, "writing the archive of snapshot %s", t->sid);
        else
            off += (size_t)n;
    }
    return len;
}

static enum MHD_Result in_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    cluster_t *self = ctx;
    transfer_t *t = *sink;
    if (!t->err && !t->done && !t->conn) {
        close(t->fd);
        t->fd = -1; /* the launcher takes it in, and removes it */
        if (kmgr_snapshot_import(self->kmgr, t->record, finished, t, &t->err) == 0 && !t->done) {
            t->conn = conn;
            http_suspend(conn);
            return MHD_YES;
        }
        if (t->err)
            unlink(t->path);
    }
    if (t->conn) /* still waiting */
        return MHD_YES;
    enum MHD_Result ret;
    if (t->err) {
        ret = http_reply_error(conn, t->err);
    } else {
        audit_who_t who;
        audit_who_conn(&who, "cluster", conn);
        audit_event(&who, "snapshot.import",
                    json_pack("{s:s, s:I}", "snapshot", t->sid, "bytes", (json_int_t)t->bytes));
        ret = http_reply_json(conn, 201,
                              json_pack("{s:s, s:O, s:I}", "id", t->sid, "tenant",
                                        json_object_get(t->record, "tenant"), "bytes",
                                        (json_int_t)t->bytes));
    }
    *sink = NULL;
    transfer_free(t);
    return ret;
}

/* A transfer whose client went: freed now, or by finished() when the
 * launcher is still at it (an import then completes all the same). */
static void let_go(transfer_t *t)
{
    t->conn = NULL;
    if (t->record && !t->done && t->fd < 0 && !t->err && *t->sid)
        t->orphan = true;
    else
        transfer_free(t);
}

static void in_abort(void *ctx, void *sink)
{
    (void)ctx;
    let_go(sink);
}

static void done(void *ctx, void *state, bool completed)
{
    (void)ctx, (void)completed;
    let_go(state);
}

/* --- the room ------------------------------------------------------------------------ */

cluster_t *cluster_new(loop_t *loop, kmgr_t *kmgr, api_t *api, const char *state_dir,
                       const char *token, const char *peers, void (*wake)(void *), void *wake_arg,
                       sg_error_t **err)
{
    cluster_t *self = xzalloc(sizeof *self);
    *self = (cluster_t){.loop = loop,
                        .kmgr = kmgr,
                        .api = api,
                        .transfers = xasprintf("%s/transfers", state_dir),
                        .peers = json_object(),
                        .moving = json_object(),
                        .pollers = json_object(),
                        .wake = wake,
                        .wake_arg = wake_arg};
    mkdir(self->transfers, 0700);
    if (peers && peers[0] == '@') /* read at each move: the replicas' ports may come later */
        self->peers_file = xstrdup(peers + 1);
    else if (cluster_parse_peers(peers, self->peers, err) < 0) {
        cluster_destroy(&self);
        return NULL;
    }
    if (token) { /* a peer is asked with the admin key the replicas share */
        self->auth = xasprintf("%s/secrets/peer-auth", state_dir);
        cleanup_free char *dir = xasprintf("%s/secrets", state_dir);
        mkdir(dir, 0700);
        int fd = open(self->auth, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dprintf(fd, "Authorization: Bearer %s\n", token) < 0 || close(fd) < 0) {
            sg_error_errno(err, errno, "cannot write %s", self->auth);
            cluster_destroy(&self);
            return NULL;
        }
    }
    return self;
}

void cluster_destroy(cluster_t **self_p)
{
    cluster_t *self = *self_p;
    if (!self)
        return;
    free(self->transfers);
    free(self->auth);
    free(self->peers_file);
    json_decref(self->peers);
    json_decref(self->moving);
    json_decref(self->pollers);
    free(self);
    *self_p = NULL;
}

int cluster_register(cluster_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_sink_t in = {
        .open = in_open, .write = in_write, .finish = in_finish, .abort = in_abort};
    static const http_route_t routes[] = {
        {"GET", "/cluster/snapshots/{snapshot}", snapshot_out, 0, NULL},
        {"PUT", "/cluster/snapshots/*", NULL, 0, &in},
    };
    const http_front_t front = {.name = "cluster", .ctx = self, .done = done};
    return http_routes(http, &front, routes, sizeof routes / sizeof *routes, err) < 0
               ? -1
               : cluster_move_register(self, http, &front, err);
}
