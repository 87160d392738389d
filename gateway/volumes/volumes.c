/* volumes: the list of volumes, E2B's Volume API over it, and the mounts a
 * new sandbox gets (volumes.h). */
#include "gateway/volumes/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/records.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/tenants/tenants.h"

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* --- the list ------------------------------------------------------------------------ */

static void volume_free(volume_t *v)
{
    free(v->name);
    free(v->owner);
    free(v->path);
    free(v);
}

static volume_t *volume_add(volumes_t *self, const char *id, const char *name, const char *owner,
                            int mib)
{
    volume_t *v = xzalloc(sizeof *v);
    snprintf(v->id, sizeof v->id, "%s", id);
    v->name = xstrdup(name);
    v->owner = xstrdup(owner);
    v->mib = mib;
    v->path = xasprintf("%s/volumes/%s", self->state_dir, id);
    if (self->n == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 16;
        self->v = xrealloc(self->v, self->cap * sizeof *self->v);
    }
    self->v[self->n++] = v;
    return v;
}

static void volume_drop(volumes_t *self, volume_t *v)
{
    for (size_t i = 0; i < self->n; i++)
        if (self->v[i] == v) {
            self->v[i] = self->v[--self->n];
            volume_free(v);
            return;
        }
}

static volume_t *find_id(const volumes_t *self, const char *id)
{
    for (size_t i = 0; i < self->n; i++)
        if (self->v[i]->ready && strcmp(self->v[i]->id, id) == 0)
            return self->v[i];
    return NULL;
}

/* owner's volume called name (a pending one too: names are unique). */
static volume_t *find_name(const volumes_t *self, const char *owner, const char *name)
{
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->v[i]->owner, owner) == 0 && strcmp(self->v[i]->name, name) == 0)
            return self->v[i];
    return NULL;
}

static void save(volumes_t *self)
{
    json_t *all = json_array();
    for (size_t i = 0; i < self->n; i++) {
        const volume_t *v = self->v[i];
        if (v->ready)
            json_array_append_new(all, json_pack("{s:s, s:s, s:s, s:i, s:I, s:s}", "id", v->id,
                                                 "name", v->name, "tenant", v->owner, "mib", v->mib,
                                                 "created_ms", (json_int_t)v->created_ms, "token",
                                                 v->token));
    }
    records_write_file(self->record, all);
    json_decref(all);
}

static long long count_mib(void *ctx, const char *tenant)
{
    volumes_t *self = ctx;
    long long mib = 0;
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->v[i]->owner, tenant) == 0)
            mib += self->v[i]->mib;
    return mib;
}

/* The sessions whose sandbox mounts v, live or paused: a new array of ids. */
static json_t *mounted_by(volumes_t *self, const volume_t *v)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        size_t j;
        json_t *m;
        if (kernel_host(k))
            continue; /* its host's sandbox is the one listed */
        json_array_foreach ((json_t *)kernel_opts(k)->mounts, j, m) {
            if (strcmp(json_string_value(json_object_get(m, "source")), v->path) == 0) {
                json_array_append_new(ids, json_string(kernel_id(k)));
                break;
            }
        }
    }
    return ids;
}

/* --- E2B's Volume API ----------------------------------------------------------------- */

/* VolumeAndToken, with sandgate's sizeMiB, usedBytes, createdAt and
 * mountedBy. */
static json_t *volume_json(volumes_t *self, const volume_t *v, bool full)
{
    json_t *j = json_pack("{s:s, s:s, s:i}", "volumeID", v->id, "name", v->name, "sizeMiB", v->mib);
    if (!full)
        return j;
    struct statvfs vfs;
    json_int_t used = statvfs(v->path, &vfs) == 0
                          ? (json_int_t)((uint64_t)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize)
                          : 0;
    json_object_set_new(j, "token", json_string(v->token));
    json_object_set_new(j, "usedBytes", json_integer(used));
    json_object_set_new(j, "createdAt", json_integer((json_int_t)v->created_ms));
    json_object_set_new(j, "mountedBy", mounted_by(self, v));
    return j;
}

/* A POST /volumes waiting for its file system (the launcher makes it). */
typedef struct {
    volumes_t *self;
    volume_t *v;
    struct MHD_Connection *conn;
    uint64_t request;
    bool done;
    sg_error_t *err;
    audit_who_t who;
} creating_t;

static void opened(const sg_error_t *err, void *arg)
{
    creating_t *c = arg;
    c->done = true;
    c->request = 0;
    if (err)
        sg_error_set(&c->err, err->kind, "%s", err->msg);
    if (c->conn) {
        http_resume(c->conn);
        c->self->wake(c->self->wake_arg);
    }
}

static enum MHD_Result created(creating_t *c)
{
    volumes_t *self = c->self;
    volume_t *v = c->v;
    c->v = NULL;
    if (c->err) {
        log_warn("volumes: %s: %s", v->name, c->err->msg);
        sandbox_workspace_close(kmgr_sandbox_env(self->kmgr), v->path, true);
        volume_drop(self, v);
        return http_reply_code_error(c->conn, c->err);
    }
    v->ready = true;
    v->created_ms = wall_ms();
    save(self);
    log_info("volumes: volume %s (%s, %d MiB) created for %s", v->id, v->name, v->mib, v->owner);
    audit_event(&c->who, "volume.create",
                json_pack("{s:s, s:s, s:i}", "volume", v->id, "name", v->name, "mib", v->mib));
    return http_reply_json(c->conn, 201, volume_json(self, v, true));
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= 63 &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static enum MHD_Result volume_create(void *ctx, http_req_t *req)
{
    volumes_t *self = ctx;
    creating_t *c = req->state;
    if (req->resumed) {
        c->conn = req->conn;
        return created(c);
    }
    json_error_t jerr;
    cleanup_json json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    const char *name = json_string_value(json_object_get(body, "name"));
    json_t *size = json_object_get(body, "sizeMiB");
    if (!json_is_object(body))
        return http_reply_code_errorf(req->conn, SG_E_INVALID, "the body is not a JSON object: %s",
                                      jerr.text);
    if (!name || !name_ok(name))
        return http_reply_code_errorf(req->conn, SG_E_INVALID,
                                      "'name': 1 to 63 of a-z, A-Z, 0-9, '_' and '-'");
    if (size && (!json_is_integer(size) || json_integer_value(size) < 16 ||
                 json_integer_value(size) > 1048576))
        return http_reply_code_errorf(req->conn, SG_E_INVALID, "'sizeMiB': 16 to 1048576");
    const char *owner = req->tenant->name;
    if (find_name(self, owner, name))
        return http_reply_code_errorf(req->conn, SG_E_CONFLICT,
                                      "a volume named '%s' exists already", name);
    size_t have = 0;
    for (size_t i = 0; i < self->n; i++)
        have += strcmp(self->v[i]->owner, owner) == 0;
    if (have >= VOLUMES_PER_TENANT)
        return http_reply_code_errorf(req->conn, SG_E_LIMIT,
                                      "a tenant has %d volumes at most; delete one first",
                                      VOLUMES_PER_TENANT);
    int mib = size ? (int)json_integer_value(size) : self->default_mib;
    cleanup_error sg_error_t *err = NULL;
    if (tenant_admit_more(owner, TENANT_VOLUME_MIB, mib, &err) < 0)
        return http_reply_code_error(req->conn, err);
    char id[37];
    replica_uuid(id);
    c = xzalloc(sizeof *c);
    *c = (creating_t){.self = self, .v = volume_add(self, id, name, owner, mib)};
    http_who(req, "volumes", &c->who);
    memcpy(c->v->token, VOLUME_TOKEN_PREFIX, sizeof VOLUME_TOKEN_PREFIX - 1);
    unsigned char raw[24];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(c->v->token + sizeof VOLUME_TOKEN_PREFIX - 1, 49, raw, sizeof raw);
    req->state = c;
    c->request = sandbox_volume_open_async(kmgr_sandbox_env(self->kmgr), c->v->path,
                                           (uint64_t)mib << 20, opened, c);
    if (c->done) {
        c->conn = req->conn;
        return created(c);
    }
    c->conn = req->conn;
    http_suspend(req->conn);
    return MHD_YES;
}

static void done(void *ctx, void *state, bool completed)
{
    (void)completed;
    volumes_t *self = ctx;
    creating_t *c = state;
    if (c->v) { /* the client went before the file system was made */
        sandbox_cancel(c->request);
        sandbox_workspace_close(kmgr_sandbox_env(self->kmgr), c->v->path, true);
        volume_drop(self, c->v);
    }
    sg_error_free(&c->err);
    free(c);
}

static enum MHD_Result volume_list(void *ctx, http_req_t *req)
{
    volumes_t *self = ctx;
    json_t *out = json_array();
    for (size_t i = 0; i < self->n; i++)
        if (self->v[i]->ready && http_may_see(req, self->v[i]->owner))
            json_array_append_new(out, volume_json(self, self->v[i], false));
    return http_reply_json(req->conn, 200, out);
}

static enum MHD_Result volume_get(void *ctx, http_req_t *req)
{
    return http_reply_json(req->conn, 200, volume_json(ctx, http_arg(req, "volume"), true));
}

static enum MHD_Result volume_delete(void *ctx, http_req_t *req)
{
    volumes_t *self = ctx;
    volume_t *v = http_arg(req, "volume");
    cleanup_json json_t *users = mounted_by(self, v);
    if (json_array_size(users)) {
        cleanup_free char *ids = json_dumps(users, JSON_COMPACT);
        cleanup_error sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_CONFLICT,
                     "volume %s is mounted by %s; delete those sandboxes (or contexts) first",
                     v->id, ids);
        return http_reply_code_error(req->conn, err);
    }
    audit_who_t who;
    http_who(req, "volumes", &who);
    audit_event(&who, "volume.delete", json_pack("{s:s, s:s}", "volume", v->id, "name", v->name));
    log_info("volumes: volume %s (%s) deleted", v->id, v->name);
    sandbox_workspace_close(kmgr_sandbox_env(self->kmgr), v->path, true);
    volume_drop(self, v);
    save(self);
    return http_reply_empty(req->conn, 204);
}

/* --- mounts --------------------------------------------------------------------------- */

json_t *volumes_mounts(volumes_t *self, const char *owner, const json_t *spec, bool *none,
                       sg_error_t **err)
{
    *none = spec == NULL || json_is_null(spec) || (json_is_array(spec) && !json_array_size(spec));
    if (*none)
        return NULL;
    if (!json_is_array(spec)) {
        sg_error_set(err, SG_E_INVALID, "'volumeMounts': a list of {name, path, readOnly}");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach ((json_t *)spec, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *path = json_string_value(json_object_get(m, "path"));
        json_t *ro = json_object_get(m, "readOnly");
        volume_t *v = name ? find_name(self, owner, name) : NULL;
        if (!path || (ro && !json_is_boolean(ro)) || !name) {
            sg_error_set(err, SG_E_INVALID,
                         "'volumeMounts': each one {name, path, readOnly (a boolean)}");
        } else if (!v || !v->ready) {
            sg_error_set(err, SG_E_NOTFOUND, "no volume named '%s' (POST /volumes makes one)",
                         name);
        } else {
            json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "source", v->path, "path", path,
                                                 "read_only", json_is_true(ro)));
            continue;
        }
        json_decref(out);
        return NULL;
    }
    if (sandbox_check_mounts(kmgr_sandbox_env(self->kmgr), out, err) < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int volumes_check(const volumes_t *self, const json_t *mounts, sg_error_t **err)
{
    size_t i, j;
    json_t *m;
    json_array_foreach ((json_t *)mounts, i, m) {
        const char *src = json_string_value(json_object_get(m, "source"));
        bool found = false;
        for (j = 0; j < self->n && !found; j++)
            found = self->v[j]->ready && src && strcmp(self->v[j]->path, src) == 0;
        if (!found)
            return sg_error_set(err, SG_E_CONFLICT,
                                "the volume mounted at %s has been deleted since the snapshot",
                                json_string_value(json_object_get(m, "path")));
    }
    return 0;
}

/* --- a volume's own token ------------------------------------------------------------- */

/* given names the volume of a /volumecontent/{id}/... path: its owner. */
static const char *token_owner(void *ctx, const http_req_t *req, const char *given, char **scope,
                               const char **why)
{
    (void)why;
    volumes_t *self = ctx;
    static const char prefix[] = "/volumecontent/";
    if (!given || strncmp(given, VOLUME_TOKEN_PREFIX, sizeof VOLUME_TOKEN_PREFIX - 1) != 0 ||
        strncmp(req->path, prefix, sizeof prefix - 1) != 0)
        return NULL;
    const char *id = req->path + sizeof prefix - 1;
    size_t n = strcspn(id, "/");
    char vid[37];
    if (n != 36)
        return NULL;
    memcpy(vid, id, 36);
    vid[36] = 0;
    volume_t *v = find_id(self, vid);
    if (!v || strlen(given) != strlen(v->token) ||
        sodium_memcmp(given, v->token, strlen(v->token)) != 0)
        return NULL;
    *scope = xstrdup(v->id);
    return v->owner;
}

static bool token_within(void *ctx, const char *scope, const char *kind, void *obj)
{
    (void)ctx;
    return strcmp(kind, "volume") == 0 && strcmp(((volume_t *)obj)->id, scope) == 0;
}

static void *resolve_volume(void *ctx, const char *id, const http_req_t *req)
{
    (void)req;
    return find_id(ctx, id);
}

static const char *volume_owner(void *ctx, void *obj)
{
    (void)ctx;
    return ((volume_t *)obj)->owner;
}

/* --- the room -------------------------------------------------------------------------- */

volumes_t *volumes_new(loop_t *loop, kmgr_t *kmgr, const char *state_dir, int default_mib,
                       void (*wake)(void *), void *wake_arg, sg_error_t **err)
{
    (void)err;
    volumes_t *self = xzalloc(sizeof *self);
    *self = (volumes_t){.loop = loop,
                        .kmgr = kmgr,
                        .state_dir = xstrdup(state_dir),
                        .record = xasprintf("%s/secrets/volumes.json", state_dir),
                        .default_mib = default_mib,
                        .wake = wake,
                        .wake_arg = wake_arg};
    cleanup_free char *secrets = xasprintf("%s/secrets", state_dir);
    if (mkdir(secrets, 0700) < 0 && errno != EEXIST)
        log_warn("volumes: cannot make %s: %s", secrets, strerror(errno));
    json_error_t jerr;
    cleanup_json json_t *all = json_load_file(self->record, 0, &jerr);
    size_t i;
    json_t *r;
    json_array_foreach (all, i, r) {
        const char *id = json_string_value(json_object_get(r, "id"));
        const char *name = json_string_value(json_object_get(r, "name"));
        const char *owner = json_string_value(json_object_get(r, "tenant"));
        const char *token = json_string_value(json_object_get(r, "token"));
        int mib = (int)json_integer_value(json_object_get(r, "mib"));
        if (!id || strlen(id) != 36 || !name || !owner || !token ||
            strlen(token) != sizeof((volume_t *)0)->token - 1 || mib < 16) {
            log_warn("volumes: %s: entry %zu is not a volume; left out", self->record, i);
            continue;
        }
        volume_t *v = volume_add(self, id, name, owner, mib);
        memcpy(v->token, token, sizeof v->token);
        v->created_ms = json_integer_value(json_object_get(r, "created_ms"));
        v->ready = true;
        cleanup_error sg_error_t *e = NULL;
        if (sandbox_volume_open(kmgr_sandbox_env(kmgr), v->path, (uint64_t)mib << 20, &e) < 0)
            log_warn("volumes: cannot mount volume %s (%s): %s", v->id, v->name, e->msg);
    }
    tenants_count_source(TENANT_VOLUME_MIB, count_mib, self);
    return self;
}

void volumes_destroy(volumes_t **self_p)
{
    volumes_t *self = *self_p;
    if (!self)
        return;
    tenants_uncount_source(TENANT_VOLUME_MIB, count_mib, self);
    for (size_t i = 0; i < self->n; i++)
        volume_free(self->v[i]);
    free(self->v);
    free(self->state_dir);
    free(self->record);
    free(self);
    *self_p = NULL;
}

int volumes_register(volumes_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/volumes", volume_create, 0, NULL},
        {"GET", "/volumes", volume_list, 0, NULL},
        {"GET", "/volumes/{volume}", volume_get, 0, NULL},
        {"DELETE", "/volumes/{volume}", volume_delete, 0, NULL},
    };
    const http_front_t front = {
        .name = "volumes", .ctx = self, .done = done, .error_response = http_code_error_response};
    if (http_param(http, "volume", resolve_volume, volume_owner, self, "volume %s not found", err) <
            0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof *routes, err) < 0)
        return -1;
    http_server_set_scoped(
        http, &(http_scoped_t){.owner = token_owner, .within = token_within, .ctx = self});
    return volume_content_register(self, http, &front, err);
}
