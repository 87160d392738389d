/* secrets: the sealed values of E2B's Secret API (secrets.h). */
#include "gateway/secrets/secrets.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/records.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"

#define NAME_MAX_LEN 128
#define ID_PREFIX "sec_"
#define META_ENTRIES 32
#define META_KEY_MAX 128
#define META_VALUE_MAX 1024
#define META_TOTAL_MAX 8192
#define LIST_LIMIT 100

typedef struct {
    char id[37]; /* sec_ and 32 hex digits */
    char *name;  /* lower case, unique per tenant */
    char *owner; /* the tenant */
    json_int_t version;
    char *sealed;     /* base64 of crypto_box_seal(value) */
    json_t *metadata; /* {string: string} */
    int64_t created_ms, updated_ms;
} secret_t;

struct secrets {
    char *record;                                   /* STATE/secrets/secrets.json */
    void (*changed)(void *ctx, const char *tenant); /* secrets_on_change */
    void *changed_ctx;
    unsigned char pk[crypto_box_PUBLICKEYBYTES];
    secret_t **s;
    size_t n, cap;
};

static void json_put(json_t **j)
{
    json_decref(*j);
}
#define cleanup_json __attribute__((cleanup(json_put)))

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* --- the sealing key -------------------------------------------------------------------- */

int secrets_sealing_key(const char *state_dir, unsigned char pk[crypto_box_PUBLICKEYBYTES],
                        sg_error_t **err)
{
    cleanup_free char *dir = xasprintf("%s/sealing", state_dir);
    cleanup_free char *path = xasprintf("%s/key", dir);
    unsigned char pair[crypto_box_PUBLICKEYBYTES + crypto_box_SECRETKEYBYTES];
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return sg_error_set(err, SG_E_INTERNAL, "cannot make %s: %s", dir, strerror(errno));
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        ssize_t got = read(fd, pair, sizeof pair);
        close(fd);
        if (got != (ssize_t)sizeof pair)
            return sg_error_set(err, SG_E_INTERNAL,
                                "%s is not a sealing key (%zd bytes): move it away to make a "
                                "new one (the secrets sealed to it are then lost)",
                                path, got);
    } else if (errno == ENOENT) {
        crypto_box_keypair(pair, pair + crypto_box_PUBLICKEYBYTES);
        cleanup_free char *tmp = xasprintf("%s.tmp", path);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || write(fd, pair, sizeof pair) != (ssize_t)sizeof pair || fsync(fd) < 0 ||
            close(fd) < 0 || rename(tmp, path) < 0) {
            sodium_memzero(pair, sizeof pair);
            return sg_error_set(err, SG_E_INTERNAL, "cannot write %s: %s", path, strerror(errno));
        }
        log_info("secrets: made the sealing key %s", path);
    } else {
        return sg_error_set(err, SG_E_INTERNAL, "cannot read %s: %s", path, strerror(errno));
    }
    memcpy(pk, pair, crypto_box_PUBLICKEYBYTES);
    sodium_memzero(pair, sizeof pair);
    return 0;
}

/* --- the list --------------------------------------------------------------------------- */

static void secret_free(secret_t *s)
{
    free(s->name);
    free(s->owner);
    free(s->sealed);
    json_decref(s->metadata);
    free(s);
}

static secret_t *find_id(const secrets_t *self, const char *id)
{
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->s[i]->id, id) == 0)
            return self->s[i];
    return NULL;
}

static secret_t *find_name(const secrets_t *self, const char *owner, const char *name)
{
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->s[i]->owner, owner) == 0 && strcasecmp(self->s[i]->name, name) == 0)
            return self->s[i];
    return NULL;
}

bool secrets_known(void *self, const char *tenant, const char *name)
{
    return tenant && find_name(self, tenant, name) != NULL;
}

void secrets_on_change(secrets_t *self, void (*changed)(void *ctx, const char *tenant), void *ctx)
{
    self->changed = changed;
    self->changed_ctx = ctx;
}

static void save(secrets_t *self)
{
    json_t *all = json_array();
    for (size_t i = 0; i < self->n; i++) {
        const secret_t *s = self->s[i];
        json_array_append_new(all, json_pack("{s:s, s:s, s:s, s:I, s:s, s:O, s:I, s:I}", "id",
                                             s->id, "name", s->name, "tenant", s->owner, "version",
                                             s->version, "sealed", s->sealed, "metadata",
                                             s->metadata, "created_ms", (json_int_t)s->created_ms,
                                             "updated_ms", (json_int_t)s->updated_ms));
    }
    records_write_file(self->record, all);
    json_decref(all);
}

/* The value sealed to the server's key, as base64 (a new string). */
static char *seal(const secrets_t *self, const char *value, size_t len)
{
    size_t n = crypto_box_SEALBYTES + len;
    unsigned char *box = xmalloc(n);
    crypto_box_seal(box, (const unsigned char *)value, len, self->pk);
    size_t b64 = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = xmalloc(b64);
    sodium_bin2base64(out, b64, box, n, sodium_base64_VARIANT_ORIGINAL);
    free(box);
    return out;
}

/* --- E2B's Secret API --------------------------------------------------------------------- */

static void iso(int64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

/* E2B's Secret: never the value. */
static json_t *secret_json(const secret_t *s)
{
    char created[32], updated[32];
    iso(s->created_ms, created);
    iso(s->updated_ms, updated);
    return json_pack("{s:s, s:s, s:I, s:O, s:s, s:s}", "secretID", s->id, "name", s->name,
                     "currentVersion", s->version, "metadata", s->metadata, "createdAt", created,
                     "updatedAt", updated);
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= NAME_MAX_LEN &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n &&
           strncasecmp(name, ID_PREFIX, sizeof ID_PREFIX - 1) != 0;
}

/* metadata: absent, or {string: string} within E2B's bounds; NULL: ok. */
static const char *metadata_wrong(const json_t *metadata)
{
    if (!metadata || json_is_null(metadata))
        return NULL;
    if (!json_is_object(metadata) || json_object_size(metadata) > META_ENTRIES)
        return "'metadata': an object of at most 32 strings";
    size_t total = 0;
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)metadata, key, v) {
        if (!json_is_string(v) || strlen(key) > META_KEY_MAX ||
            json_string_length(v) > META_VALUE_MAX)
            return "'metadata': each value a string, keys at most 128 bytes, values 1024";
        total += strlen(key) + json_string_length(v);
    }
    return total > META_TOTAL_MAX ? "'metadata': 8192 bytes at most in all" : NULL;
}

/* body's value and metadata: NULL, or why not. */
static const char *value_wrong(const json_t *body)
{
    const json_t *value = json_object_get(body, "value");
    if (!json_is_string(value))
        return "'value': a string";
    if (json_string_length(value) == 0 || json_string_length(value) > SECRET_VALUE_MAX)
        return "'value': 1 to 65536 bytes";
    return metadata_wrong(json_object_get(body, "metadata"));
}

static json_t *metadata_of(const json_t *body)
{
    json_t *m = json_object_get(body, "metadata");
    return json_is_object(m) ? json_deep_copy(m) : json_object();
}

static enum MHD_Result secret_create(void *ctx, http_req_t *req)
{
    secrets_t *self = ctx;
    json_error_t jerr;
    cleanup_json json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    const char *name = json_string_value(json_object_get(body, "name"));
    const char *wrong = json_is_object(body) ? value_wrong(body) : "the body: a JSON object";
    if (wrong)
        return http_reply_code_errorf(req->conn, SG_E_INVALID, "%s", wrong);
    if (!name || !name_ok(name))
        return http_reply_code_errorf(
            req->conn, SG_E_INVALID,
            "'name': 1 to 128 of a-z, A-Z, 0-9, '_' and '-', not beginning "
            "with sec_ (secrets' ids do)");
    const char *owner = req->tenant->name;
    if (find_name(self, owner, name))
        return http_reply_code_errorf(req->conn, SG_E_CONFLICT,
                                      "a secret named '%s' exists already", name);
    size_t have = 0;
    for (size_t i = 0; i < self->n; i++)
        have += strcmp(self->s[i]->owner, owner) == 0;
    if (have >= SECRETS_PER_TENANT) {
        cleanup_error sg_error_t *err = NULL;
        sg_error_quota(&err, "max-secrets", SECRETS_PER_TENANT,
                       "a tenant has %d secrets at most; delete one first", SECRETS_PER_TENANT);
        return http_reply_code_error(req->conn, err);
    }
    secret_t *s = xzalloc(sizeof *s);
    unsigned char raw[16];
    randombytes_buf(raw, sizeof raw);
    memcpy(s->id, ID_PREFIX, sizeof ID_PREFIX - 1);
    sodium_bin2hex(s->id + sizeof ID_PREFIX - 1, 33, raw, sizeof raw);
    s->name = xstrdup(name);
    for (char *c = s->name; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    s->owner = xstrdup(owner);
    s->version = 1;
    const json_t *value = json_object_get(body, "value");
    s->sealed = seal(self, json_string_value(value), json_string_length(value));
    s->metadata = metadata_of(body);
    s->created_ms = s->updated_ms = wall_ms();
    if (self->n == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 16;
        self->s = xrealloc(self->s, self->cap * sizeof *self->s);
    }
    self->s[self->n++] = s;
    save(self);
    audit_who_t who;
    http_who(req, "secrets", &who);
    audit_event(&who, "secret.create", json_pack("{s:s, s:s}", "secret", s->id, "name", s->name));
    log_info("secrets: secret %s (%s) created for %s", s->id, s->name, owner);
    if (self->changed)
        self->changed(self->changed_ctx, owner);
    return http_reply_json(req->conn, 201, secret_json(s));
}

/* A page: sorted by creation, then id; nextToken is the last one's id. */
static int by_created(const void *a, const void *b)
{
    const secret_t *x = *(secret_t *const *)a, *y = *(secret_t *const *)b;
    return x->created_ms != y->created_ms ? (x->created_ms < y->created_ms ? -1 : 1)
                                          : strcmp(x->id, y->id);
}

static enum MHD_Result secret_list(void *ctx, http_req_t *req)
{
    secrets_t *self = ctx;
    const char *lim = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "limit");
    const char *after = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "nextToken");
    char *end = NULL;
    long limit = lim ? strtol(lim, &end, 10) : LIST_LIMIT;
    if (lim && (*end || limit < 1 || limit > LIST_LIMIT))
        return http_reply_code_errorf(req->conn, SG_E_INVALID, "'limit': 1 to %d", LIST_LIMIT);
    secret_t **mine = xmalloc((self->n + 1) * sizeof *mine);
    size_t n = 0;
    for (size_t i = 0; i < self->n; i++)
        if (http_may_see(req, self->s[i]->owner))
            mine[n++] = self->s[i];
    qsort(mine, n, sizeof *mine, by_created);
    size_t from = 0;
    if (after && *after) {
        while (from < n && strcmp(mine[from]->id, after) != 0)
            from++;
        if (from == n) {
            free(mine);
            return http_reply_code_errorf(req->conn, SG_E_INVALID,
                                          "'nextToken': not one this list gave");
        }
        from++;
    }
    json_t *out = json_array();
    size_t i = from;
    for (; i < n && (long)(i - from) < limit; i++)
        json_array_append_new(out, secret_json(mine[i]));
    struct MHD_Response *r = http_json_response(out);
    if (i < n)
        MHD_add_response_header(r, "x-next-token", mine[i - 1]->id);
    free(mine);
    enum MHD_Result ret = http_queue(req->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result secret_get(void *ctx, http_req_t *req)
{
    (void)ctx;
    return http_reply_json(req->conn, 200, secret_json(http_arg(req, "secret")));
}

static enum MHD_Result secret_update(void *ctx, http_req_t *req)
{
    secrets_t *self = ctx;
    secret_t *s = http_arg(req, "secret");
    json_error_t jerr;
    cleanup_json json_t *body = json_loadb(req->body, req->len, 0, &jerr);
    const char *wrong = json_is_object(body) ? value_wrong(body) : "the body: a JSON object";
    if (wrong)
        return http_reply_code_errorf(req->conn, SG_E_INVALID, "%s", wrong);
    const json_t *value = json_object_get(body, "value");
    free(s->sealed);
    s->sealed = seal(self, json_string_value(value), json_string_length(value));
    s->version++;
    if (json_is_object(json_object_get(body, "metadata"))) {
        json_decref(s->metadata);
        s->metadata = metadata_of(body);
    }
    s->updated_ms = wall_ms();
    save(self);
    audit_who_t who;
    http_who(req, "secrets", &who);
    audit_event(
        &who, "secret.update",
        json_pack("{s:s, s:s, s:I}", "secret", s->id, "name", s->name, "version", s->version));
    log_info("secrets: secret %s (%s) is at version %lld", s->id, s->name, (long long)s->version);
    if (self->changed)
        self->changed(self->changed_ctx, s->owner);
    return http_reply_json(req->conn, 200, secret_json(s));
}

static enum MHD_Result secret_delete(void *ctx, http_req_t *req)
{
    secrets_t *self = ctx;
    secret_t *s = http_arg(req, "secret");
    audit_who_t who;
    http_who(req, "secrets", &who);
    audit_event(&who, "secret.delete", json_pack("{s:s, s:s}", "secret", s->id, "name", s->name));
    log_info("secrets: secret %s (%s) deleted", s->id, s->name);
    for (size_t i = 0; i < self->n; i++)
        if (self->s[i] == s) {
            self->s[i] = self->s[--self->n];
            break;
        }
    cleanup_free char *owner = xstrdup(s->owner);
    secret_free(s);
    save(self);
    if (self->changed)
        self->changed(self->changed_ctx, owner);
    return http_reply_empty(req->conn, 204);
}

/* {secret}: an id, or a name of the caller's tenant. */
static void *resolve_secret(void *ctx, const char *id, const http_req_t *req)
{
    secrets_t *self = ctx;
    secret_t *s = find_id(self, id);
    return s ? s : req->tenant ? find_name(self, req->tenant->name, id) : NULL;
}

static const char *secret_owner(void *ctx, void *obj)
{
    (void)ctx;
    return ((secret_t *)obj)->owner;
}

/* --- the room -------------------------------------------------------------------------- */

secrets_t *secrets_new(const char *state_dir, const unsigned char pk[crypto_box_PUBLICKEYBYTES],
                       sg_error_t **err)
{
    (void)err;
    secrets_t *self = xzalloc(sizeof *self);
    self->record = xasprintf("%s/secrets/secrets.json", state_dir);
    memcpy(self->pk, pk, crypto_box_PUBLICKEYBYTES);
    cleanup_free char *dir = xasprintf("%s/secrets", state_dir);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        log_warn("secrets: cannot make %s: %s", dir, strerror(errno));
    json_error_t jerr;
    cleanup_json json_t *all = json_load_file(self->record, 0, &jerr);
    size_t i;
    json_t *r;
    json_array_foreach (all, i, r) {
        const char *id = json_string_value(json_object_get(r, "id"));
        const char *name = json_string_value(json_object_get(r, "name"));
        const char *owner = json_string_value(json_object_get(r, "tenant"));
        const char *sealed = json_string_value(json_object_get(r, "sealed"));
        json_t *meta = json_object_get(r, "metadata");
        if (!id || strlen(id) != sizeof((secret_t *)0)->id - 1 || !name || !owner || !sealed ||
            !json_is_object(meta)) {
            log_warn("secrets: %s: entry %zu is not a secret; left out", self->record, i);
            continue;
        }
        secret_t *s = xzalloc(sizeof *s);
        memcpy(s->id, id, sizeof s->id);
        s->name = xstrdup(name);
        s->owner = xstrdup(owner);
        s->sealed = xstrdup(sealed);
        s->metadata = json_incref(meta);
        s->version = json_integer_value(json_object_get(r, "version"));
        s->created_ms = json_integer_value(json_object_get(r, "created_ms"));
        s->updated_ms = json_integer_value(json_object_get(r, "updated_ms"));
        if (self->n == self->cap) {
            self->cap = self->cap ? self->cap * 2 : 16;
            self->s = xrealloc(self->s, self->cap * sizeof *self->s);
        }
        self->s[self->n++] = s;
    }
    return self;
}

void secrets_destroy(secrets_t **self_p)
{
    secrets_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->n; i++)
        secret_free(self->s[i]);
    free(self->s);
    free(self->record);
    free(self);
    *self_p = NULL;
}

int secrets_register(secrets_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/secrets", secret_create, 0, NULL},
        {"GET", "/secrets", secret_list, 0, NULL},
        {"GET", "/secrets/{secret}", secret_get, 0, NULL},
        {"POST", "/secrets/{secret}", secret_update, 0, NULL},
        {"DELETE", "/secrets/{secret}", secret_delete, 0, NULL},
    };
    const http_front_t front = {
        .name = "secrets", .ctx = self, .error_response = http_code_error_response};
    return http_param(http, "secret", resolve_secret, secret_owner, self, "secret %s not found",
                      err) < 0
               ? -1
               : http_routes(http, &front, routes, sizeof routes / sizeof *routes, err);
}
