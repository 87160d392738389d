#include "gateway/http/http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <sodium.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/auth/auth.h"
#include "gateway/http/conn.h"
#include "gateway/http/routes.h"
#include "gateway/observe/observe.h"

struct http_server {
    struct MHD_Daemon *mhd;
    loop_t *loop;
    int timer_id; /* libmicrohttpd's next run: its next timeout, 1 s at most */
    int port;
    loop_io_t *io;
    bool pending; /* libmicrohttpd has work: run it before the next wait */
    http_config_t cfg;
    unsigned char token_hash[crypto_generichash_BYTES]; /* compared, never the token */
    const keys_t *keys;                    /* --keys-file's tenants (borrowed), or NULL */
    authlimit_t *limit;                    /* failed authentications per client address */
    ratelimit_t *rate;                     /* each tenant's requests a second */
    routetab_t *tab;                       /* the front ends' parameter kinds and routes */
    struct request *keyed;                 /* the requests under way made with a key (revocable) */
    http_scoped_t scoped[HTTP_MAX_SCOPED]; /* credentials that are not keys, tried in order */
    size_t nscoped;
    http_rewrite_fn rewrite;
    void *rewrite_ctx;
};

/* A connection's socket context: its request under way, for http_suspend
 * and http_resume, which libmicrohttpd gives only the connection. */
typedef struct {
    struct request *req; /* NULL between requests */
} slot_t;

/* Per-request state between libmicrohttpd's calls. */
typedef struct request {
    http_server_t *server;
    char *body;
    size_t len;
    bool too_big;
    tenant_t tenant;      /* who the key says the caller is (a copy: a SIGHUP may
                             free the keys it came from meanwhile) */
    const route_t *route; /* NULL: no route takes the method and path */
    char *allow;          /* no route: the methods the path takes (405), or NULL (404) */
    int unknown;          /* the arg found unknown before the body came (sinks); -1: none */
    http_req_t call;      /* what the handler gets; its ids and path are ours */
    const param_t *params[HTTP_MAX_ARGS]; /* the kinds of call.args */
    char *ids[HTTP_MAX_ARGS];             /* call.args' ids */
    char *verb, *url, *target;            /* call.method, call.path and call.target */
    void *sink;                           /* a body the handler takes as it arrives (uploads) */
    int64_t started;
    char *method, *path;         /* for the audit log's refusals; NULL without one */
    char *scope;                 /* call.scope's */
    const http_scoped_t *scoped; /* the credential that gave it */
    bool begun;                  /* request_begin ran (uri_seen made it before) */
    bool nul_in_url;             /* its URL has a %00: refused (400), no route sees it */
    /* Made with a key of the keys file (not --token's): listed in the
     * server's keyed list, whose links these are, until it completes. */
    bool keyed;
    struct request *prev, *next;
    bool revoked;   /* its key went (http_server_revoke): it ends, no handler runs */
    bool suspended; /* by http_suspend, until http_resume */
    bool paced;     /* its tenant's rate was checked: served, or waiting its turn */
    int pace_timer; /* while it waits its turn (ratelimit.h), else -1 */
    slot_t *slot;   /* its connection's, while under way */
} request_t;

void http_config_defaults(http_config_t *cfg)
{
    *cfg = (http_config_t){.host = "127.0.0.1",
                           .port = 49999,
                           .token = NULL,
                           .max_body = 1 << 20,
                           .max_conns = 1024,
                           .max_conns_ip = 0,
                           .conn_timeout_s = 300};
}

/* The tenant of the token and of --no-auth: sees and manages everything. */
static const tenant_t admin_tenant = {.name = "admin", .admin = true, .internet = true};

/* The caller's tenant for the key given (presented_key, may be NULL) into
 * *t: the admin for --token's value (or when there is no authentication),
 * the keys file's for one of its keys (then *keyed).  Both are found by a
 * hash of what was given, so nothing secret is compared byte by byte. */
static bool authenticate(http_server_t *self, const char *given, tenant_t *t, bool *keyed)
{
    *keyed = false; /* set when a key of the keys file it is: revocable */
    if (self->cfg.token == NULL && self->keys == NULL) {
        *t = admin_tenant;
        return true;
    }
    if (!given)
        return false;
    if (self->cfg.token) {
        unsigned char h[crypto_generichash_BYTES];
        crypto_generichash(h, sizeof h, (const unsigned char *)given, strlen(given), NULL, 0);
        if (sodium_memcmp(h, self->token_hash, sizeof h) == 0) {
            *t = admin_tenant;
            return true;
        }
    }
    const tenant_t *k = keys_lookup(self->keys, given);
    if (k)
        *t = *k;
    *keyed = k != NULL;
    return k != NULL;
}

void http_server_set_keys(http_server_t *self, const keys_t *keys)
{
    self->keys = keys;
}

void http_server_set_rewrite(http_server_t *self, http_rewrite_fn fn, void *ctx)
{
    self->rewrite = fn;
    self->rewrite_ctx = ctx;
}

void http_server_set_scoped(http_server_t *self, const http_scoped_t *scoped)
{
    assert(self->nscoped < HTTP_MAX_SCOPED);
    self->scoped[self->nscoped++] = *scoped;
}

/* A sandbox's own credential (http_scoped_t): its owner's tenant, while the
 * owner is a tenant (or the admin): a revoked key ends its sandboxes' too.
 * One of a sandbox that is gone (owner "") is nobody's: enough for a public
 * route only.  *why: a reason the caller hears, or NULL. */
static bool authenticate_scoped(http_server_t *self, request_t *req, const char *given,
                                bool public_route, const char **why)
{
    *why = NULL;
    const char *owner = NULL;
    for (size_t i = 0; !owner && !*why && i < self->nscoped; i++) {
        owner = self->scoped[i].owner(self->scoped[i].ctx, &req->call, given, &req->scope, why);
        req->scoped = &self->scoped[i];
    }
    const tenant_t *k = owner && *owner && self->keys ? keys_find(self->keys, owner) : NULL;
    if (k) {
        req->tenant = *k;
        req->keyed = true;
        req->call.tenant = &req->tenant;
    } else if (owner && strcmp(owner, admin_tenant.name) == 0) {
        req->tenant = admin_tenant;
        req->call.tenant = &req->tenant;
    } else if (!(owner && !*owner && public_route)) {
        free(req->scope);
        req->scope = NULL;
        return false;
    }
    req->call.scope = req->scope;
    return true;
}
/* A failed authentication: counted for its address, which is refused for
 * a while past the limit (logged once a block). */
static void auth_failed(http_server_t *self, struct MHD_Connection *conn)
{
    metrics.auth_failures++;
    const struct sockaddr *addr = http_client_addr(conn);
    if (authlimit_fail(self->limit, addr, zclock_mono())) {
        char text[64];
        metrics.auth_blocks++;
        log_warn("http: %s failed to authenticate more than %u times within a minute; its "
                 "requests are refused (429) for %d s",
                 authlimit_addr_text(addr, text, sizeof text), self->cfg.auth_fail_limit,
                 self->cfg.auth_block_ms / 1000);
    }
}

int http_param(http_server_t *self, const char *name, http_resolve_fn resolve, http_owner_fn owner,
               void *ctx, const char *unknown, sg_error_t **err)
{
    return routetab_param(self->tab, name, resolve, owner, ctx, unknown, err);
}

int http_routes(http_server_t *self, const http_front_t *front, const http_route_t *routes,
                size_t n, sg_error_t **err)
{
    return routetab_add(self->tab, front, routes, n, err);
}

/* --- answers the route layer makes for the front ends ------------------------------- */

/* A refusal on a front end's route (r, may be NULL): in that front end's
 * error shape, with an Allow header for 405. */
static enum MHD_Result reply_refusal(struct MHD_Connection *conn, const route_t *r,
                                     const sg_error_t *err, const char *allow)
{
    struct MHD_Response *resp = r && r->front.error_response
                                    ? r->front.error_response(r->front.ctx, err)
                                    : http_json_response(http_error_body(err));
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = http_queue(conn, sg_error_http_status(err->kind), resp);
    MHD_destroy_response(resp);
    return ret;
}

/* 405: the path is a resource, the method is not one of those it takes. */
static enum MHD_Result reply_method(const http_server_t *self, request_t *req)
{
    const route_t *r;
    char *methods = routetab_methods(self->tab, req->call.path, false, " or ", &r);
    sg_error_t e = {.kind = SG_E_METHOD};
    e.msg = xasprintf("use %s %s", methods, req->call.path);
    enum MHD_Result ret = reply_refusal(req->call.conn, r, &e, req->allow);
    free(e.msg);
    free(methods);
    return ret;
}

/* Every id a client gives, in a path ({name}) or elsewhere (http_resolve),
 * is resolved here and nowhere else, before any handler sees it; NULL: no
 * such id for this caller.  This is where tenancy checks hang: an object
 * that exists but belongs to another tenant must come back NULL as well,
 * so that reply_unknown answers it exactly as an id that does not exist. */
static request_t *request_of(const http_req_t *call);

static void *lookup(const param_t *p, const char *id, const http_req_t *req)
{
    void *obj = p->resolve(p->ctx, id, req);
    if (obj && req->scope) { /* a sandbox's credential: that sandbox's objects only */
        const http_scoped_t *sc = request_of(req)->scoped;
        return sc->within(sc->ctx, req->scope, p->name, obj) ? obj : NULL;
    }
    if (!obj || !p->owner || (req->tenant && req->tenant->admin))
        return obj;
    /* The tenant check, the one for every id a client names: another
     * tenant's object is an object that does not exist. */
    const char *owner = p->owner(p->ctx, obj);
    return req->tenant && owner && strcmp(owner, req->tenant->name) == 0 ? obj : NULL;
}

void http_who(const http_req_t *req, const char *frontend, audit_who_t *who)
{
    audit_who_conn(who, frontend, req->conn);
    audit_who_set_tenant(who, req->tenant ? req->tenant->name : NULL);
}

bool http_may_see(const http_req_t *req, const char *owner)
{
    return req->tenant && (req->tenant->admin || (owner && strcmp(owner, req->tenant->name) == 0));
}

/* The one answer for an id that lookup did not resolve: 404 with the kind's
 * message, nothing else about the id. */
static enum MHD_Result reply_unknown(const request_t *req, const param_t *p, const char *id)
{
    const char *pct = strstr(p->unknown, "%s");
    sg_error_t e = {.kind = SG_E_NOTFOUND};
    e.msg = pct ? xasprintf("%.*s%s%s", (int)(pct - p->unknown), p->unknown, id, pct + 2)
                : xstrdup(p->unknown);
    enum MHD_Result ret = reply_refusal(req->call.conn, req->route, &e, NULL);
    free(e.msg);
    return ret;
}

/* Resolves the {name}s of the request's route into req->call.args.
 * Returns the index of the first that is unknown, or -1 when all are. */
static int resolve_args(request_t *req)
{
    for (size_t k = 0; k < req->call.nargs; k++) {
        req->call.args[k].obj = lookup(req->params[k], req->call.args[k].id, &req->call);
        if (req->call.args[k].obj == NULL)
            return (int)k;
    }
    return -1;
}

static request_t *request_of(const http_req_t *call)
{
    return (request_t *)((char *)call - offsetof(request_t, call));
}

void *http_resolve(const http_req_t *req, const char *name, const char *id)
{
    const request_t *r = request_of(req);
    const param_t *p = routetab_param_find(r->server->tab, name, strlen(name));
    if (p == NULL) {
        log_error("http: http_resolve of an unregistered kind '%s'", name);
        return NULL;
    }
    return lookup(p, id, req);
}

enum MHD_Result http_reply_unknown(const http_req_t *req, const char *name, const char *id)
{
    const request_t *r = request_of(req);
    const param_t *p = routetab_param_find(r->server->tab, name, strlen(name));
    if (p == NULL)
        return http_reply_errorf(req->conn, SG_E_INTERNAL, "no parameter kind '%s'", name);
    return reply_unknown(r, p, id);
}

void *http_arg(const http_req_t *req, const char *name)
{
    for (size_t k = 0; k < req->nargs; k++)
        if (strcmp(req->args[k].name, name) == 0)
            return req->args[k].obj;
    return NULL;
}

const char *http_arg_id(const http_req_t *req, const char *name)
{
    for (size_t k = 0; k < req->nargs; k++)
        if (strcmp(req->args[k].name, name) == 0)
            return req->args[k].id;
    return NULL;
}

/* Each connection's memory pool (libmicrohttpd's default is 32 KiB): an
 * upload's body is handed over, and a streamed download's body taken, in
 * pieces of at most about half of it.  256 KiB makes a file transfer take
 * ~5x fewer handler calls, pipe writes and suspensions (bench/files.py);
 * the pool is mmap'd, so pages no request touches cost no memory. */
#define HTTP_CONN_MEMORY (256 * 1024)

/* --- requests under way, and revocation ------------------------------------------------ */

/* A connection's socket context, made when libmicrohttpd accepts it and
 * freed when it closes (after its last request completed). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = xzalloc(sizeof(slot_t));
        return;
    }
    slot_t *slot = *socket_context;
    if (slot && slot->req) /* not expected: completed comes first */
        slot->req->slot = NULL;
    free(slot);
    *socket_context = NULL;
}

static request_t *request_of_conn(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const slot_t *slot = ci ? ci->socket_context : NULL;
    return slot ? slot->req : NULL;
}

/* The request is under way on its connection: http_suspend finds it, and
 * one made with a key is listed for http_server_revoke. */
static void request_track(http_server_t *self, request_t *req)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->call.conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    req->slot = ci ? ci->socket_context : NULL;
    if (req->slot)
        req->slot->req = req;
    if (!req->keyed)
        return;
    req->next = self->keyed;
    if (self->keyed)
        self->keyed->prev = req;
    self->keyed = req;
}

static void request_untrack(request_t *req)
{
    if (req->slot && req->slot->req == req)
        req->slot->req = NULL;
    req->slot = NULL;
    if (!req->keyed)
        return;
    if (req->prev)
        req->prev->next = req->next;
    else
        req->server->keyed = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    req->keyed = false;
}

bool http_suspend(struct MHD_Connection *conn)
{
    request_t *req = request_of_conn(conn);
    if (req && req->revoked)
        return false;
    if (req)
        req->suspended = true;
    MHD_suspend_connection(conn);
    return true;
}

void http_resume(struct MHD_Connection *conn)
{
    request_t *req = request_of_conn(conn);
    if (req && !req->suspended)
        return; /* resumed already: by the server, for a revocation */
    if (req)
        req->suspended = false;
    MHD_resume_connection(conn);
}

/* Why req's key no longer holds under keys: "removed" (its tenant is gone),
 * "rotated" (its tenant has another key), or NULL: it holds. */
static const char *revoked_why(const keys_t *keys, const request_t *req)
{
    const tenant_t *t = keys ? keys_find(keys, req->tenant.name) : NULL;
    if (t == NULL)
        return "removed";
    return memcmp(t->hash, req->tenant.hash, sizeof t->hash) == 0 ? NULL : "rotated";
}

/* Ends req, whose key went (why). */
static void request_revoke(http_server_t *self, request_t *req, const char *why)
{
    const route_t *r = req->route;
    struct MHD_Connection *conn = req->call.conn;
    req->revoked = true;
    audit_who_t who;
    audit_who_conn(&who, r ? r->front.name : NULL, conn);
    audit_who_set_tenant(&who, req->tenant.name);
    audit_event(
        &who, "revoked",
        json_pack("{s:s?, s:s?, s:s}", "method", req->method, "path", req->path, "reason", why));
    log_info("http: %s %s of tenant %s ended: its key was %s", req->call.method, req->call.path,
             req->tenant.name, why);
    metrics.revoked++;
    if (r && r->front.revoke && req->call.state && r->front.revoke(r->front.ctx, req->call.state))
        return;
    /* The client sees its connection end now, whatever libmicrohttpd does
     * with it; libmicrohttpd, woken by it, closes the connection. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        shutdown(ci->connect_fd, SHUT_RDWR);
    if (req->suspended) { /* resumed, it ends at libmicrohttpd's next call */
        req->suspended = false;
        MHD_resume_connection(conn);
    }
    self->pending = true;
}

size_t http_server_revoke(http_server_t *self)
{
    size_t n = 0;
    for (request_t *req = self->keyed, *next; req; req = next) {
        next = req->next; /* ending req frees nothing else */
        const char *why = req->revoked ? NULL : revoked_why(self->keys, req);
        if (why) {
            request_revoke(self, req, why);
            n++;
        }
    }
    return n;
}

/* --- one request --------------------------------------------------------------------- */

/* The headers have come: the route is chosen (or why there is none), the
 * key checked — a refusal (401, 429) is answered now — and a route that
 * takes bodies as they arrive gets its sink. */
static enum MHD_Result request_begin(http_server_t *self, struct MHD_Connection *conn,
                                     const char *url, const char *method, void **req_cls)
{
    request_t *req = *req_cls ? *req_cls : xzalloc(sizeof(request_t));
    *req_cls = req;
    req->begun = true;
    req->pace_timer = -1;
    req->server = self;
    req->started = zclock_mono();
    req->unknown = -1;
    req->call.conn = conn;
    req->call.method = req->verb = xstrdup(method);
    req->call.path = req->url = xstrdup(url);
    req->call.body = "";
    req->call.target = req->target ? req->target : req->url;
    if (req->nul_in_url) /* a malformed URL, whoever asks: it names nothing */
        return http_reply_errorf(conn, SG_E_INVALID, "the URL may not contain a NUL (%%00)");
    char *path = self->rewrite ? self->rewrite(self->rewrite_ctx, conn, url) : NULL;
    if (path) {
        free(req->url);
        req->call.path = req->url = path;
        req->call.rewritten = true;
    }
    match_t m;
    const route_t *r = req->route = routetab_find(self->tab, method, req->url, &m);
    if (r) {
        req->call.rest = m.rest;
        for (size_t i = 0, k = 0; i < r->nsegs; i++) {
            if (!r->segs[i].param)
                continue;
            req->params[k] = r->segs[i].param;
            req->call.args[k].name = r->segs[i].param->name;
            req->call.args[k].id = req->ids[k] = xstrndup(m.at[k], m.len[k]);
            req->call.nargs = ++k;
        }
    } else {
        req->allow = routetab_methods(self->tab, req->url, true, ", ", &r);
    }
    if (audit_enabled()) {
        req->method = xstrdup(method);
        /* libmicrohttpd gives the path without its query; cut anyway:
         * a ?token= must never reach the audit log. */
        req->path = xstrndup(url, strcspn(url, "?"));
        utf8_scrub(req->method);
        utf8_scrub(req->path);
    }
    /* The key is checked now, before any of the body is read: a refusal is
     * queued at once, so libmicrohttpd answers without reading the body
     * (none is awaited, no 100 Continue is sent) and closes the connection
     * after the answer.  A failure counts for its address here, whether or
     * not a body would follow: a client that never sends it is counted
     * too. */
    const char *key = http_presented_key(conn);
    if (r && (r->def.flags & HTTP_ROUTE_PUBLIC) && key == NULL) {
        /* a probe's request: nobody (the admin without authentication) */
        req->call.tenant =
            authenticate(self, NULL, &req->tenant, &req->keyed) ? &req->tenant : NULL;
    } else if (authlimit_blocked(self->limit, http_client_addr(conn), zclock_mono())) {
        /* its key is not even looked at: guessing learns nothing meanwhile */
        return http_reply_errorf(conn, SG_E_TOO_MANY,
                                 "too many failed authentications from this address; retry "
                                 "later");
    } else if (!authenticate(self, key, &req->tenant, &req->keyed)) {
        /* A key given to a public route is checked as anywhere: a wrong one
         * is refused and counted, so no route tells a right key from a
         * wrong one without a count (GET /health shows an admin more). */
        const char *why = NULL;
        if (!authenticate_scoped(self, req, key, r && (r->def.flags & HTTP_ROUTE_PUBLIC), &why)) {
            /* in the route's own error shape (E2B's SDKs read {"code"}) */
            auth_failed(self, conn);
            sg_error_t e = {
                .kind = SG_E_AUTH,
                .msg = (char *)(why ? why
                                    : "missing or wrong token (send 'Authorization: Bearer "
                                      "<token>')")};
            return reply_refusal(conn, r, &e, NULL);
        }
    } else {
        req->call.tenant = &req->tenant;
    }
    request_track(self, req); /* a key's, revocable (http_server_revoke) */
    /* Only now, for a caller the key was accepted for, is anything looked
     * up or opened. */
    r = req->route;
    if (r && r->def.sink) {
        req->unknown = resolve_args(req);
        if (req->unknown < 0)
            req->sink = r->def.sink->open(r->front.ctx, &req->call);
    }
    return MHD_YES;
}

/* A chunk of the body: to the sink, kept (up to max_body), or dropped.
 * Returns how much of it was taken (less only from a sink that suspended
 * the connection). */
static size_t request_body(http_server_t *self, request_t *req, const char *data, size_t len)
{
    const route_t *r = req->route;
    if (req->sink) {
        return r->def.sink->write(r->front.ctx, req->sink, req->call.conn, data, len);
    } else if (req->unknown >= 0) {
        /* answered 404 once the body is read, which is not kept */
    } else if (!req->too_big && req->len + len <= self->cfg.max_body) {
        req->body = xrealloc(req->body, req->len + len + 1);
        memcpy(req->body + req->len, data, len);
        req->len += len;
        req->body[req->len] = 0;
    } else {
        req->too_big = true; /* keep reading, discard, answer 413 at the end */
    }
    return len;
}

/* req's tenant's requests a second: its line's max-rps, else the server's;
 * 0 for an admin (no limit). */
static unsigned rate_of(const http_server_t *self, const request_t *req)
{
    if (req->tenant.admin)
        return 0;
    return req->tenant.max_rps ? (unsigned)req->tenant.max_rps : self->cfg.tenant_max_rps;
}

/* The tenant's share of the loop (ratelimit.h): how long req waits for its
 * turn, in ms (0: none), or -1 when it is refused. */
static int64_t pace(http_server_t *self, request_t *req)
{
    req->paced = true;
    unsigned rate = rate_of(self, req);
    if (!rate)
        return 0;
    int64_t wait = ratelimit_take(self->rate, req->tenant.name, rate, zclock_mono());
    if (wait < 0)
        metrics_tenant(req->tenant.name, "quota:max-rps");
    return wait;
}

/* req's turn has come: it is served as libmicrohttpd resumes it. */
static void paced(loop_t *loop, int timer_id, void *arg)
{
    request_t *req = arg;
    req->pace_timer = -1;
    http_resume(req->call.conn);
    http_server_wake(req->server);
}

/* The whole request has come (or a suspended one was resumed): its answer. */
static enum MHD_Result request_end(http_server_t *self, request_t *req)
{
    const route_t *r = req->route;
    struct MHD_Connection *conn = req->call.conn;
    if (req->sink) /* the body is in (or, suspended by finish, resumed) */
        return r->def.sink->finish(r->front.ctx, conn, &req->sink);
    if (req->call.state) { /* a suspended request resumed */
        req->call.resumed = true;
        for (size_t k = 0; k < req->call.nargs; k++)
            req->call.args[k].obj = NULL;
        return r->def.handle(r->front.ctx, &req->call);
    }
    if (req->unknown >= 0)
        return reply_unknown(req, req->params[req->unknown], req->ids[req->unknown]);
    if (req->too_big)
        return http_reply_errorf(conn, SG_E_LIMIT, "request body larger than %zu bytes",
                                 self->cfg.max_body);
    if (r == NULL && req->allow)
        return reply_method(self, req);
    if (r == NULL)
        return http_reply_errorf(conn, SG_E_NOTFOUND, "no route for %s %s", req->call.method,
                                 req->call.path);
    int bad = resolve_args(req);
    if (bad >= 0)
        return reply_unknown(req, req->params[bad], req->ids[bad]);
    req->call.body = req->body ? req->body : "";
    req->call.len = req->len;
    if (r->def.handle == NULL) /* a sink that declined, with no handler to fall back on */
        return http_reply_errorf(conn, SG_E_INTERNAL, "%s %s took no body", req->call.method,
                                 req->call.path);
    if (!req->paced) {
        int64_t wait = pace(self, req);
        if (wait < 0)
            return http_reply_error(conn, &(sg_error_t){.kind = SG_E_QUOTA,
                                                        .msg = "quota max-rps of tenant reached: "
                                                               "more than a second's worth of its "
                                                               "requests wait already",
                                                        .quota = "max-rps",
                                                        .limit = rate_of(self, req)});
        if (wait > 0 && http_suspend(conn)) {
            req->pace_timer = loop_timer(self->loop, wait, 1, paced, req);
            return MHD_YES;
        }
    }
    return r->def.handle(r->front.ctx, &req->call);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls)
{
    http_server_t *self = cls;
    request_t *req = *req_cls;
    if (req == NULL || !req->begun) /* headers only so far */
        return request_begin(self, conn, url, method, req_cls);
    if (req->revoked) /* its key went: closed, no handler or sink sees it again */
        return MHD_NO;
    if (*upload_size) {
        *upload_size -= request_body(self, req, upload_data, *upload_size);
        return MHD_YES;
    }
    return request_end(self, req);
}

/* libmicrohttpd hands handle() the path unescaped, as a C string, so a %00
 * would cut it short: "a%00b" would name the file "a".  The raw URI comes
 * here first, before its headers; what this returns is the request's
 * *req_cls, so the request is made here, marked when its URI (path or
 * query) has a %00.  request_begin then refuses it (400) at once. */
static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
    request_t *req = xzalloc(sizeof(request_t));
    req->nul_in_url = strstr(uri, "%00") != NULL;
    req->target = xstrdup(uri);
    return req;
}

static void completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                      enum MHD_RequestTerminationCode code)
{
    request_t *req = *req_cls;
    if (req == NULL)
        return;
    if (req->begun && req->pace_timer >= 0) /* ended while it waited its turn */
        loop_timer_end(req->server->loop, req->pace_timer);
    if (!req->begun) { /* ended before its headers were complete */
        free(req->target);
        free(req);
        *req_cls = NULL;
        return;
    }
    request_untrack(req);
    const route_t *r = req->route;
    if (req->call.state && r->front.done)
        r->front.done(r->front.ctx, req->call.state, code == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (req->sink)
        r->def.sink->abort(r->front.ctx, req->sink);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    if (info && info->http_status >= 100 && info->http_status < 600)
        metrics.http_status[info->http_status]++;
    if (info && req->path) {
        unsigned st = info->http_status;
        if (st == 401 || st == 403 || st == 413 || st == 429) {
            /* Refused: who and where, never a header or the query. */
            audit_who_t who;
            audit_who_conn(&who, NULL, conn);
            if (req->call.tenant) /* a key was known: a 403 or a quota's 429 */
                audit_who_set_tenant(&who, req->call.tenant->name);
            audit_event(&who, "refused",
                        json_pack("{s:i, s:s, s:s}", "status", (int)st, "method", req->method,
                                  "path", req->path));
        }
    }
    histogram_observe(&metrics.http_seconds, (double)(zclock_mono() - req->started) / 1000.0);
    if (code != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_debug("http: request ended early (code %d)", (int)code);
    /* A client that half-closed after its request (its FIN came with the
     * request's bytes) gets no further event under edge-triggered epoll, and
     * libmicrohttpd would keep the connection until --connection-timeout.
     * Shutting it down here wakes libmicrohttpd to close it. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char peek;
    if (code == MHD_REQUEST_TERMINATED_COMPLETED_OK && ci &&
        recv(ci->connect_fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        shutdown(ci->connect_fd, SHUT_RDWR);
    free(req->body);
    free(req->method);
    free(req->path);
    free(req->verb);
    free(req->scope);
    free(req->url);
    free(req->target);
    free(req->allow);
    for (size_t k = 0; k < req->call.nargs; k++)
        free(req->ids[k]);
    free(req);
    *req_cls = NULL;
}

/* libmicrohttpd runs from the loop's hook, before each wait, when there is
 * something for it: its epoll fd was readable, a connection was resumed
 * (http_server_wake), or one of its timeouts came.  It runs again at once
 * while it says it has more (MHD_get_timeout 0): with edge-triggered
 * sockets it will not make its own fd readable for work it already knows
 * about.  Several wake-ups in one pass cost one run.  A connection it
 * closed (its timeout, an error) is only released — and stops counting
 * against the limits — on a later run: each pass ends with one more.  It
 * also runs at least once a second, which nothing else would cause. */
#define MHD_RUNS_PER_PASS 8
#define MHD_MAX_IDLE_MS 1000

static void on_mhd_timeout(loop_t *loop, int timer_id, void *arg)
{
    http_server_t *self = arg;
    self->timer_id = -1;
    self->pending = true;
}

static bool run_mhd(loop_t *loop, void *arg)
{
    http_server_t *self = arg;
    if (!self->pending)
        return false;
    MHD_UNSIGNED_LONG_LONG to = 0;
    bool timeout = false;
    for (int i = 0; i < MHD_RUNS_PER_PASS && self->pending; i++) {
        self->pending = false;
        MHD_run(self->mhd);
        timeout = MHD_get_timeout(self->mhd, &to) == MHD_YES;
        if (timeout && to == 0)
            self->pending = true;
    }
    /* A connection this pass closed (its timeout, an error) is released on
     * the next run: run it now, before a waiting client's connection is
     * accepted against the limits the closed one still counts in. */
    MHD_run(self->mhd);
    timeout = MHD_get_timeout(self->mhd, &to) == MHD_YES;
    loop_timer_end(loop, self->timer_id);
    int64_t next = timeout && to < MHD_MAX_IDLE_MS ? (int64_t)to : MHD_MAX_IDLE_MS;
    self->timer_id = loop_timer(loop, next, 1, on_mhd_timeout, self);
    return self->pending;
}

static void on_readable(loop_t *loop, int fd, unsigned events, void *arg)
{
    http_server_t *self = arg;
    self->pending = true;
}

http_server_t *http_server_new(loop_t *loop, const http_config_t *cfg, sg_error_t **err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        sg_error_set(err, SG_E_INVALID, "listen address '%s' is not an IPv4 address", cfg->host);
        return NULL;
    }
    http_server_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->cfg = *cfg;
    self->timer_id = -1;
    self->keys = cfg->keys;
    self->limit = authlimit_new(cfg->auth_fail_limit, 60 * 1000, cfg->auth_block_ms, 4096);
    self->tab = routetab_new();
    self->rate = ratelimit_new();
    if (cfg->token)
        crypto_generichash(self->token_hash, sizeof self->token_hash,
                           (const unsigned char *)cfg->token, strlen(cfg->token), NULL, 0);
    self->mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG,
        (uint16_t)cfg->port, NULL, NULL, handle, self, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log,
        self, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, completed, self,
        MHD_OPTION_URI_LOG_CALLBACK, uri_seen, self, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        self, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        cfg->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        cfg->max_conns_ip ? cfg->max_conns_ip : (cfg->max_conns + 3) / 4, MHD_OPTION_END);
    if (self->mhd == NULL) {
        sg_error_set(err, SG_E_UNAVAILABLE, "cannot listen on %s:%d (in use or not permitted)",
                     cfg->host, cfg->port);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    self->io = loop_fd_add(loop, info->epoll_fd, LOOP_READ, on_readable, self, err);
    if (self->io == NULL) {
        MHD_stop_daemon(self->mhd);
        free(self);
        return NULL;
    }
    loop_hook_add(loop, run_mhd, self);
    self->pending = true;
    info = MHD_get_daemon_info(self->mhd, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : cfg->port;
    return self;
}

void http_server_wake(void *arg)
{
    http_server_t *self = arg;
    self->pending = true;
}

void http_server_destroy(http_server_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    http_server_t *self = *self_p;
    loop_io_remove(self->loop, &self->io);
    loop_hook_remove(self->loop, run_mhd, self);
    loop_timer_end(self->loop, self->timer_id);
    MHD_stop_daemon(self->mhd); /* its last completion callbacks use the routes */
    routetab_destroy(&self->tab);
    authlimit_destroy(&self->limit);
    ratelimit_destroy(&self->rate);
    free(self);
    *self_p = NULL;
}

int http_server_port(const http_server_t *self)
{
    return self->port;
}
