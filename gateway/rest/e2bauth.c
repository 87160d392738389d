/* Each E2B sandbox's own credential.  E2B hands a sandbox's client an
 * envdAccessToken, which it sends to the sandbox's envd and code
 * interpreter and signs its file URLs with (download_url, upload_url:
 * v1_ + SHA-256 of "PATH:OPERATION:USER:TOKEN[:EXPIRATION]").  sandgate's is
 * "sgsb_" + an HMAC of the sandbox's id under a key of its own: nothing to
 * store per sandbox, the same after a restart (STATE/secrets/e2b-token-key).
 *
 * Such a token is good for the requests that name its sandbox
 * (E2b-Sandbox-Id) on the sandbox's own routes (envd's, the code
 * interpreter's), as its owner; a signed URL needs no header, the
 * signature names its sandbox.  Either way every id the request names must
 * be within that sandbox (http_scoped_t.within): the token of one sandbox
 * reaches no other, not even its owner's. */
#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/rest/internal.h"
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN_PREFIX "sgsb_"

void api_e2b_token(const api_t *self, const char *id, char out[E2B_TOKEN_SIZE])
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, self->e2b_token_key, sizeof self->e2b_token_key);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)"envd-token:", 11);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)id, strlen(id));
    crypto_auth_hmacsha256_final(&st, mac);
    memcpy(out, TOKEN_PREFIX, sizeof TOKEN_PREFIX - 1);
    sodium_bin2base64(out + sizeof TOKEN_PREFIX - 1, E2B_TOKEN_SIZE - (sizeof TOKEN_PREFIX - 1),
                      mac, sizeof mac, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

static bool same(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strlen(a) == n && sodium_memcmp(a, b, n) == 0;
}

/* The E2B sandbox id names (not a code context in one), or NULL. */
static kernel_t *sandbox_of(const api_t *self, const char *id)
{
    kernel_t *k = id ? kmgr_get(self->kmgr, id) : NULL;
    return k && kernel_host(k) == NULL ? k : NULL;
}

/* The owner's tenant name, as http_scoped_t wants it. */
static const char *owner_of(const kernel_t *k)
{
    const char *owner = kernel_owner(k);
    return owner ? owner : "admin";
}

/* The routes a sandbox's token is good for: its envd's and its code
 * interpreter's. */
static bool sandbox_route(const char *path)
{
    static const char *const exact[] = {"/health", "/files", "/execute", "/contexts"};
    static const char *const prefix[] = {"/filesystem.Filesystem/", "/process.Process/",
                                         "/contexts/"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(path, exact[i]) == 0)
            return true;
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (strncmp(path, prefix[i], strlen(prefix[i])) == 0)
            return true;
    return false;
}

/* E2B's v1 signature of a file URL, with sandbox id's token. */
static void signature(const api_t *self, const char *id, const char *path, const char *op,
                      const char *user, const char *expiration, char out[64])
{
    char token[E2B_TOKEN_SIZE];
    api_e2b_token(self, id, token);
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
#define PART(s) crypto_hash_sha256_update(&st, (const unsigned char *)(s), strlen(s))
    PART(path), PART(":"), PART(op), PART(":"), PART(user), PART(":"), PART(token);
    if (expiration)
        PART(":"), PART(expiration);
#undef PART
    crypto_hash_sha256_final(&st, digest);
    memcpy(out, "v1_", 3);
    sodium_bin2base64(out + 3, 61, digest, sizeof digest,
                      sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
}

/* A signed GET or POST /files: the sandbox whose token signed it (the one
 * E2b-Sandbox-Id names, else any of them), or NULL with *why. */
static kernel_t *signed_by(api_t *self, const http_req_t *req, const char *sid, const char **why)
{
    struct MHD_Connection *conn = req->conn;
#define QUERY(name) MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name)
    const char *sig = QUERY("signature"), *exp = QUERY("signature_expiration");
    const char *path = QUERY("path"), *user = QUERY("username");
#undef QUERY
    const char *op = strcmp(req->method, "GET") == 0    ? "read"
                     : strcmp(req->method, "POST") == 0 ? "write"
                                                        : NULL;
    if (!sig || !op || strcmp(req->path, "/files") != 0)
        return NULL;
    *why = "invalid signature";
    char want[64];
    kernel_t *found = NULL;
    if (sid) {
        kernel_t *k = sandbox_of(self, sid);
        if (k) {
            signature(self, kernel_id(k), path ? path : "", op, user ? user : "", exp, want);
            found = same(sig, want) ? k : NULL;
        }
    } else { /* the signature names it: each sandbox's is tried */
        const char *id;
        json_t *v;
        json_object_foreach (self->contexts, id, v) {
            kernel_t *k = sandbox_of(self, id);
            if (!k)
                continue;
            signature(self, id, path ? path : "", op, user ? user : "", exp, want);
            if (same(sig, want)) {
                found = k;
                break;
            }
        }
    }
    if (found && exp) {
        char *end;
        long long at = strtoll(exp, &end, 10);
        if (*end || at < (long long)time(NULL)) {
            *why = "signature is already expired";
            return NULL;
        }
    }
    if (found)
        *why = NULL;
    return found;
}

static const char *scoped_owner(void *ctx, const http_req_t *req, const char *given, char **scope,
                                const char **why)
{
    api_t *self = ctx;
    const char *sid = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    char host_id[129];
    bool named = !sid && req->rewritten && strncmp(req->path, "/contexts/", 10) == 0;
    size_t n = named ? strcspn(req->path + 10, "/") : 0;
    if (named && n < sizeof host_id) { /* Host: PORT-ID.DOMAIN named it (gateway/ports/) */
        memcpy(host_id, req->path + 10, n);
        host_id[n] = '\0';
        sid = host_id;
    }
    kernel_t *k = NULL;
    if (given) {
        char token[E2B_TOKEN_SIZE];
        if (!sid || strncmp(given, TOKEN_PREFIX, sizeof TOKEN_PREFIX - 1) != 0 ||
            !sandbox_route(req->path))
            return NULL;
        api_e2b_token(self, sid, token);
        if (!same(given, token))
            return NULL;
        k = sandbox_of(self, sid);
        if (!k) { /* authentic, of a sandbox that is gone: nobody's (its /health: 502) */
            *scope = xstrdup(sid);
            return "";
        }
    } else {
        k = signed_by(self, req, sid, why);
    }
    if (!k)
        return NULL;
    *scope = xstrdup(kernel_id(k));
    return owner_of(k);
}

static bool scoped_within(void *ctx, const char *scope, const char *kind, void *obj)
{
    (void)ctx;
    if (strcmp(kind, "context") != 0 && strcmp(kind, "sandbox") != 0 &&
        strcmp(kind, "exposed") != 0) /* gateway/ports/ */
        return false;
    kernel_t *k = obj, *host = kernel_host(k);
    return strcmp(kernel_id(host ? host : k), scope) == 0;
}

/* The key in STATE/secrets/e2b-token-key (the daemon's own directory,
 * 0700), made there the first time; without a state dir, one for this run. */
static void load_key(api_t *self)
{
    randombytes_buf(self->e2b_token_key, sizeof self->e2b_token_key);
    if (!self->cfg.state_dir)
        return;
    cleanup_free char *dir = xasprintf("%s/secrets", self->cfg.state_dir);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        log_warn("e2b: cannot make %s (%m)", dir);
    cleanup_free char *path = xasprintf("%s/e2b-token-key", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, self->e2b_token_key, sizeof self->e2b_token_key);
        close(fd);
        if (n == (ssize_t)sizeof self->e2b_token_key)
            return;
        log_warn("e2b: %s is not %zu bytes: a new key, and new sandbox tokens", path,
                 sizeof self->e2b_token_key);
        randombytes_buf(self->e2b_token_key, sizeof self->e2b_token_key);
        unlink(path);
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, self->e2b_token_key, sizeof self->e2b_token_key) !=
                      (ssize_t)sizeof self->e2b_token_key)
        log_warn("e2b: cannot keep the sandboxes' token key in %s (%m): their tokens change "
                 "when sandgate restarts",
                 path);
    if (fd >= 0)
        close(fd);
}

void api_e2b_auth_start(api_t *self, http_server_t *http)
{
    load_key(self);
    http_server_set_scoped(
        http, &(http_scoped_t){.owner = scoped_owner, .within = scoped_within, .ctx = self});
}
