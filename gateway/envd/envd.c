/* envd: registration, the context a request acts on, replies, and the
 * Filesystem service's unary calls over sbfs (internal.h). */
#include <sodium.h>
#include <string.h>

#include "common/xalloc.h"
#include "gateway/envd/internal.h"
#include "gateway/files/files.h"
#include "gateway/http/http.h"
#include "gateway/observe/observe.h"

envd_t *envd_new(loop_t *loop, kmgr_t *kmgr, api_t *api, commands_t *commands,
                 const envd_config_t *cfg, void (*wake)(void *), void *wake_arg)
{
    envd_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->api = api;
    self->commands = commands;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    return self;
}

void envd_destroy(envd_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    envd_watch_destroy(*self_p);
    free(*self_p);
    *self_p = NULL;
}

/* --- which context, replies --------------------------------------------------------- */

/* The ids the SDKs send when they were given none: debug mode's. */
static bool names_default(const char *id)
{
    return id == NULL || *id == 0 || strcmp(id, "debug_sandbox_id") == 0 ||
           strcmp(id, "default") == 0;
}

/* Whether the call asks to act as root: E2B's SDKs name the user in
 * HTTP basic auth ("user:") on RPCs and in ?username= on /files. */
static bool asks_root(const http_req_t *req)
{
    const char *q = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "username");
    if (q && strcmp(q, "root") == 0)
        return true;
    const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Authorization");
    if (!auth || strncasecmp(auth, "Basic ", 6) != 0)
        return false;
    unsigned char user[64];
    size_t n = 0;
    if (sodium_base642bin(user, sizeof user - 1, auth + 6, strlen(auth + 6), " ", &n, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return false;
    user[n] = 0;
    return strncmp((char *)user, "root:", 5) == 0 || strcmp((char *)user, "root") == 0;
}

kernel_t *envd_kernel(envd_t *self, const http_req_t *req, const char **unknown, sg_error_t **err)
{
    const char *id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    if (!id && req->scope) /* a signed URL: its signature named the sandbox */
        id = req->scope;
    *unknown = NULL;
    if (asks_root(req)) { /* docs/security.md, Root inside a sandbox: not given */
        sg_error_set(err, SG_E_FORBIDDEN,
                     "sandgate runs everything in a sandbox as its one unprivileged user; there "
                     "is no root (docs/security.md, Root inside a sandbox)");
        return NULL;
    }
    if (names_default(id))
        return api_default_context(self->api, req, "python", "envd", err);
    kernel_t *k = http_resolve(req, "context", id);
    if (k == NULL)
        *unknown = id;
    return k;
}

kernel_t *envd_kernel_or_reply(envd_t *self, const http_req_t *req, enum MHD_Result *ret)
{
    const char *unknown;
    sg_error_t *err = NULL;
    kernel_t *k = envd_kernel(self, req, &unknown, &err);
    if (k)
        return k;
    if (unknown) {
        *ret = http_reply_unknown(req, "context", unknown);
    } else {
        *ret = envd_reply_error(req->conn, NULL, err);
        sg_error_free(&err);
    }
    return NULL;
}

enum MHD_Result envd_reply_msg(struct MHD_Connection *conn, json_t *msg)
{
    return http_reply_json(conn, 200, msg);
}

enum MHD_Result envd_reply_code(struct MHD_Connection *conn, const char *code, const char *msg)
{
    return http_reply_json(conn, envd_code_status(code), envd_error_json(code, msg));
}

enum MHD_Result envd_reply_error(struct MHD_Connection *conn, const char *sbfs_code,
                                 const sg_error_t *err)
{
    return envd_reply_code(conn, envd_code(sbfs_code, err->kind), err->msg);
}

json_t *envd_request(const http_req_t *req, enum MHD_Result *ret)
{
    if (req->len == 0)
        return json_object();
    json_t *msg = json_loadb(req->body, req->len, 0, NULL);
    if (json_is_object(msg))
        return msg;
    json_decref(msg);
    *ret = envd_reply_code(req->conn, "invalid_argument", "the request is not a JSON object");
    return NULL;
}

json_t *envd_stream_request(const http_req_t *req, enum MHD_Result *ret)
{
    if (req->len && req->body[0] == '{')
        return envd_request(req, ret);
    sg_error_t *err = NULL;
    json_t *msg = envd_unwrap(req->body, req->len, &err);
    if (msg == NULL) {
        *ret = envd_reply_code(req->conn, "invalid_argument", err->msg);
        sg_error_free(&err);
    }
    return msg;
}

/* --- Filesystem: Stat, MakeDir, Move, ListDir, Remove ------------------------------- */

typedef enum { FS_STAT, FS_MKDIR, FS_MOVE, FS_LIST, FS_REMOVE } fs_rpc_t;

typedef struct {
    envd_call_t base;
    envd_t *envd;
    kernel_t *k;  /* borrowed, until the first operation has started */
    char *kid;    /* MakeDir: its context, for the mkdir after the stat */
    char *ctx_id; /* its context, for the audit log */
    audit_who_t who;
    resp_t *out;
    sbfs_op_t *op;
    fs_rpc_t rpc;
    char *path;
    bool finished;
    json_t *answer;   /* the response message, or NULL */
    char *code, *msg; /* or the error */
} fs_call_t;

static void fs_end(envd_call_t *call, bool completed)
{
    fs_call_t *c = (fs_call_t *)call;
    sbfs_op_free(&c->op);
    if (c->out)
        resp_set_gone(c->out);
    resp_free(&c->out);
    json_decref(c->answer);
    free(c->path);
    free(c->kid);
    free(c->ctx_id);
    free(c->code);
    free(c->msg);
    free(c);
}

static void fs_fail(fs_call_t *c, const char *code, const char *msg)
{
    c->code = xstrdup(code);
    c->msg = xstrdup(msg ? msg : "");
}

static void fs_done(sbfs_op_t *op, const json_t *result, const sg_error_t *err, void *arg);

/* MakeDir: the stat said what is there; mkdir unless something is. */
static void mkdir_after_stat(fs_call_t *c, const json_t *entry, const sg_error_t *err)
{
    const char *why = err ? sbfs_error_code(err) : NULL;
    if (entry) {
        bool dir = strcmp(json_string_value(json_object_get(entry, "type")) ?: "", "dir") == 0;
        fs_fail(c, "already_exists", dir ? "directory already exists" : "a file is in the way");
        return;
    }
    if (why == NULL || strcmp(why, "not_found") != 0) {
        fs_fail(c, envd_code(why, err->kind), err->msg);
        return;
    }
    sg_error_t *e = NULL;
    kernel_t *k = kmgr_get(c->envd->kmgr, c->kid);
    if (k == NULL) {
        fs_fail(c, "unavailable", "the context is gone");
        return;
    }
    c->op =
        sbfs_mkdir(c->envd->loop, k, c->path, true, &(sbfs_cb_t){.done = fs_done, .arg = c}, &e);
    if (c->op == NULL) {
        fs_fail(c, envd_code(NULL, e->kind), e->msg);
        sg_error_free(&e);
    }
}

static void fs_done(sbfs_op_t *op, const json_t *result, const sg_error_t *err, void *arg)
{
    fs_call_t *c = arg;
    c->op = NULL; /* freed below: result and err are op's */
    if (c->rpc == FS_MKDIR && c->kid) {
        mkdir_after_stat(c, result, err);
        free(c->kid);
        c->kid = NULL;
        if (c->op) { /* the mkdir runs */
            sbfs_op_free(&op);
            return;
        }
    } else if (err && c->rpc == FS_REMOVE && strcmp(sbfs_error_code(err), "not_found") == 0) {
        c->answer = json_object(); /* gone already: envd's Remove succeeds, as E2B's does */
    } else if (err) {
        fs_fail(c, envd_code(sbfs_error_code(err), err->kind), err->msg);
    } else if (c->rpc == FS_LIST) {
        json_t *entries = json_array(), *e;
        size_t i;
        json_array_foreach (json_object_get(result, "entries"), i, e)
            json_array_append_new(entries, envd_entry(e));
        c->answer = json_pack("{s:o}", "entries", entries);
    } else if (c->rpc == FS_REMOVE) {
        c->answer = json_object();
        audit_event(&c->who, "file.delete",
                    json_pack("{s:s, s:s}", "context", c->ctx_id, "path", c->path));
    } else {
        c->answer = json_pack("{s:o}", "entry", envd_entry(result));
    }
    sbfs_op_free(&op);
    c->finished = true;
    resp_ready(c->out);
}

static enum MHD_Result fs_answer(fs_call_t *c, struct MHD_Connection *conn)
{
    if (c->code)
        return envd_reply_code(conn, c->code, c->msg);
    json_t *a = c->answer;
    c->answer = NULL;
    return envd_reply_msg(conn, a);
}

/* Starts the call's operation on msg's paths; NULL with *err. */
static sbfs_op_t *fs_start(fs_call_t *c, const json_t *msg, sg_error_t **err)
{
    envd_t *self = c->envd;
    const sbfs_cb_t cb = {.done = fs_done, .arg = c};
    const char *path = envd_str(msg, c->rpc == FS_MOVE ? "source" : "path", NULL);
    if (path == NULL) {
        sg_error_set(err, SG_E_INVALID, "'%s' is missing", c->rpc == FS_MOVE ? "source" : "path");
        return NULL;
    }
    c->path = envd_abspath(path);
    switch (c->rpc) {
    case FS_STAT: return sbfs_stat(self->loop, c->k, c->path, &cb, err);
    case FS_MKDIR: return sbfs_stat(self->loop, c->k, c->path, &cb, err);
    case FS_REMOVE: return sbfs_remove(self->loop, c->k, c->path, &cb, err);
    case FS_LIST: {
        json_int_t depth = json_integer_value(json_object_get(msg, "depth"));
        if (depth < 0 || depth > 64) {
            sg_error_set(err, SG_E_INVALID, "'depth' must be in [1, 64]");
            return NULL;
        }
        return sbfs_list(self->loop, c->k, c->path, depth ? (unsigned)depth : 1, &cb, err);
    }
    case FS_MOVE: {
        const char *to = envd_str(msg, "destination", NULL);
        if (to == NULL) {
            sg_error_set(err, SG_E_INVALID, "'destination' is missing");
            return NULL;
        }
        cleanup_free char *dest = envd_abspath(to);
        return sbfs_move(self->loop, c->k, c->path, dest, &cb, err);
    }
    }
    return NULL;
}

static enum MHD_Result fs_rpc(envd_t *self, http_req_t *req, fs_rpc_t rpc)
{
    if (req->resumed)
        return fs_answer(req->state, req->conn);
    enum MHD_Result ret;
    json_t *msg = envd_request(req, &ret);
    if (msg == NULL)
        return ret;
    kernel_t *k = envd_kernel_or_reply(self, req, &ret);
    if (k == NULL) {
        json_decref(msg);
        return ret;
    }
    fs_call_t *c = xzalloc(sizeof *c);
    c->base.end = fs_end;
    c->envd = self;
    c->k = k;
    c->kid = rpc == FS_MKDIR ? xstrdup(kernel_id(k)) : NULL;
    c->ctx_id = xstrdup(kernel_id(k));
    http_who(req, "envd", &c->who);
    c->rpc = rpc;
    c->out = resp_new(self->loop, req->conn, self->wake, self->wake_arg);
    sg_error_t *err = NULL;
    c->op = fs_start(c, msg, &err);
    json_decref(msg);
    if (c->op == NULL && !c->finished) {
        ret = envd_reply_error(req->conn, sbfs_error_code(err), err);
        sg_error_free(&err);
        fs_end(&c->base, false);
        return ret;
    }
    c->k = NULL;
    req->state = c;
    return c->finished ? fs_answer(c, req->conn) : resp_wait(c->out);
}

static enum MHD_Result fs_stat(void *ctx, http_req_t *req)
{
    return fs_rpc(ctx, req, FS_STAT);
}

static enum MHD_Result fs_mkdir(void *ctx, http_req_t *req)
{
    return fs_rpc(ctx, req, FS_MKDIR);
}

static enum MHD_Result fs_move(void *ctx, http_req_t *req)
{
    return fs_rpc(ctx, req, FS_MOVE);
}

static enum MHD_Result fs_list(void *ctx, http_req_t *req)
{
    return fs_rpc(ctx, req, FS_LIST);
}

static enum MHD_Result fs_remove(void *ctx, http_req_t *req)
{
    return fs_rpc(ctx, req, FS_REMOVE);
}

/* Calls envd has that sandgate does not serve: client streams (see
 * docs/clients.md).  The context the
 * request names is still resolved first (without starting a default one),
 * so an unknown id, and another tenant's, is 404 here as on every call. */
static enum MHD_Result unimplemented(void *ctx, http_req_t *req)
{
    const char *id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    if (!names_default(id) && http_resolve(req, "context", id) == NULL)
        return http_reply_unknown(req, "context", id);
    return envd_reply_code(req->conn, "unimplemented",
                           "sandgate does not serve this envd call (docs/clients.md)");
}

/* --- the front end ------------------------------------------------------------------ */

static void done(void *ctx, void *state, bool completed)
{
    envd_call_t *call = state;
    call->end(call, completed);
}

static struct MHD_Response *error_response(void *ctx, const sg_error_t *err)
{
    return http_json_response(envd_error_json(envd_code(NULL, err->kind), err->msg));
}

static const http_route_t routes[] = {
    {"POST", "/filesystem.Filesystem/Stat", fs_stat, 0, NULL},
    {"POST", "/filesystem.Filesystem/MakeDir", fs_mkdir, 0, NULL},
    {"POST", "/filesystem.Filesystem/Move", fs_move, 0, NULL},
    {"POST", "/filesystem.Filesystem/ListDir", fs_list, 0, NULL},
    {"POST", "/filesystem.Filesystem/Remove", fs_remove, 0, NULL},
    {"POST", "/process.Process/StreamInput", unimplemented, 0, NULL},
};

int envd_register(envd_t *self, http_server_t *http, sg_error_t **err)
{
    http_front_t front = {
        .name = "envd", .ctx = self, .done = done, .error_response = error_response};
    if (http_routes(http, &front, routes, sizeof routes / sizeof *routes, err) < 0 ||
        envd_files_register(self, http, &front, err) < 0 ||
        envd_watch_register(self, http, &front, err) < 0)
        return -1;
    return envd_process_register(self, http, &front, err);
}
