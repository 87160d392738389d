/* http: sandgate's HTTP server, libmicrohttpd driven by the daemon's loop.
 *
 * libmicrohttpd runs in external-epoll mode: its epoll fd is watched by the
 * loop, and MHD_run runs from a loop hook, before the wait, when that fd was
 * readable, a connection was resumed, or one of libmicrohttpd's timeouts
 * came.  No thread of its own: every handler runs on the loop thread and
 * must not block; long responses suspend their connection.
 *
 * This layer checks the key as soon as a request's headers have come —
 * refusing it then, before any of its body is read — reads the body
 * (bounded), picks the route for the request's method and path, resolves
 * the ids the path names ({context}, {kernel}...) to their objects, and
 * only then calls the route's handler.  It knows no front end and no kernel manager by name:
 * each front end registers its parameter kinds (http_param) and its routes
 * (http_routes), and main.c has them do so.
 */
#ifndef SG_HTTP_H
#define SG_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "common/error.h"
#include "common/loop.h"
#include "gateway/auth/auth.h"
#include "gateway/observe/observe.h"
/* Responses that are not ready when their request is handled (streams,
 * waits): every front end's, through this face. */
#include "gateway/http/resp.h"

typedef struct {
    const char *host;
    int port;
    const char *token;        /* the admin key; NULL: keys only, or none (loopback only) */
    const keys_t *keys;       /* the tenants' keys (borrowed), or NULL */
    unsigned auth_fail_limit; /* failures a minute per address before 429; 0: any */
    int auth_block_ms;        /* how long such an address is refused */
    size_t max_body;          /* bytes */
    unsigned max_conns;       /* connections at once */
    unsigned max_conns_ip;    /* per client address; 0: max_conns / 4 */
    unsigned conn_timeout_s;  /* idle connection timeout */
    unsigned tenant_max_rps;  /* requests a second of a keys-file tenant whose line names no
                                 max-rps (ratelimit.h; admins have none); 0: no limit */
} http_config_t;

typedef struct http_server http_server_t;

void http_config_defaults(http_config_t *cfg);

/* Starts listening and registers with loop.  NULL with *err set when the
 * address cannot be used. */
http_server_t *http_server_new(loop_t *loop, const http_config_t *cfg, sg_error_t **err);
void http_server_destroy(http_server_t **self_p);
/* The tenants' keys from now on (SIGHUP); keys borrowed.  A request under
 * way keeps the tenant it authenticated as, until http_server_revoke. */
void http_server_set_keys(http_server_t *self, const keys_t *keys);

/* Revocation is immediate: ends every request under way — a stream, a
 * suspended wait, a body still arriving, a connection upgraded to a
 * WebSocket — that authenticated with a key the keys in use no longer
 * hold (removed, or rotated: its tenant has another key now; a key whose
 * options alone changed holds).  The admin token's requests, and those
 * made without authentication, are never ended.  Each one ended writes an
 * audit event "revoked" (its tenant, front end, client, method, path and
 * reason: "removed" or "rotated").  A front end's revoke hook ends a
 * request its own way (a WebSocket's close frame); else the server does:
 * it shuts the socket down, so the client sees the end at once, resumes
 * the request if it is suspended, and ends it the next time
 * libmicrohttpd calls about it (the handler is not called again; a
 * content reader's http_suspend says false) — the front end's done or
 * sink abort then runs as for a client that left.  Sessions are not
 * touched.  Returns how many requests were ended. */
size_t http_server_revoke(http_server_t *self);

/* The most {name} parameters one pattern may have. */
#define HTTP_MAX_ARGS 4

/* One request as a handler sees it.  Owned by the server; valid for the
 * duration of the call it is passed to. */
typedef struct {
    struct MHD_Connection *conn;
    const char *method;
    const char *path; /* the URL without its query string */
    /* The request target as the client sent it: path and query, still
     * %-escaped ("/a%20b?x=1"). */
    const char *target;
    /* The server's rewrite (http_server_set_rewrite) gave the path. */
    bool rewritten;
    /* Who asks: the tenant its key belongs to (the admin for --token or
     * without authentication); NULL on a public route without a valid key. */
    const tenant_t *tenant;
    /* A sandbox's own credential (http_scoped_t) was presented, not a key:
     * that sandbox's id.  Every id the request names must then be within
     * it.  NULL for a key's request. */
    const char *scope;
    const char *body; /* NUL-terminated, no larger than max_body; "" when none */
    size_t len;
    /* The handler's own, NULL on the first call.  A handler that suspends
     * the connection keeps what it needs here and is called again, with
     * resumed set, body "" and the same state, each time the connection is
     * resumed; the front end's done gets it when the request ends. */
    void *state;
    bool resumed;
    /* What the pattern's trailing '*' matched: "" when the path ends where
     * the '*' starts, else the rest from its '/' ("/", "/a/b.txt"); NULL
     * for a pattern without '*'. */
    const char *rest;
    /* The pattern's {name}s, in order: the id the path gave and the object
     * its kind's resolver returned (borrowed).  On a resumed call obj is
     * NULL: the object may be gone since, and the state says what the
     * handler waits for. */
    size_t nargs;
    struct {
        const char *name, *id;
        void *obj;
    } args[HTTP_MAX_ARGS];
} http_req_t;

/* Credentials that are not keys: a token one sandbox's front end handed out
 * (E2B's envdAccessToken), or a URL it signed, good for that sandbox only. */
typedef struct {
    /* The sandbox that `given` (a presented credential, or NULL) stands for
     * in this request: its id into *scope (malloc'd) and its owner's tenant
     * name returned (borrowed), or NULL — with *why set when the caller
     * should hear why (an expired signature), else left NULL. */
    const char *(*owner)(void *ctx, const http_req_t *req, const char *given, char **scope,
                         const char **why);
    /* Whether obj, an object of parameter kind `kind`, is within sandbox
     * scope: the only objects a scoped request may name. */
    bool (*within)(void *ctx, const char *scope, const char *kind, void *obj);
    void *ctx;
} http_scoped_t;
/* Adds a kind of such credentials (at most HTTP_MAX_SCOPED; tried in the
 * order added: a sandbox's token, a volume's). */
#define HTTP_MAX_SCOPED 4
void http_server_set_scoped(http_server_t *self, const http_scoped_t *scoped);

/* A path for the request instead of its own, chosen from its headers
 * before any route is looked for (a Host naming a sandbox's port,
 * gateway/ports/): a new string, or NULL to keep its own. */
typedef char *(*http_rewrite_fn)(void *ctx, struct MHD_Connection *conn, const char *path);
void http_server_set_rewrite(http_server_t *self, http_rewrite_fn fn, void *ctx);

/* The object resolved for {name}: never NULL on a first call (an unknown
 * id never reaches the handler); NULL on a resumed call, or when the
 * pattern has no {name} (a programmer's error). */
void *http_arg(const http_req_t *req, const char *name);
/* The id the path gave for {name}. */
const char *http_arg_id(const http_req_t *req, const char *name);

/* Resolves an id of kind name, given by a client: the object (borrowed) or
 * NULL when there is none for this request.  req is the request being
 * handled: its caller is who asks, so an owner check belongs here too, and
 * an object the caller may not see comes back NULL, answered exactly as an
 * id that does not exist.  The {name}s before this one in the pattern are
 * resolved already (http_arg), so a kind can be scoped by them: a
 * {command} is looked up within its {context}.  ctx is http_param's. */
typedef void *(*http_resolve_fn)(void *ctx, const char *id, const http_req_t *req);

/* The tenant an object of a kind belongs to (its name, borrowed), or NULL
 * for one only an admin may see.  ctx is http_param's. */
typedef const char *(*http_owner_fn)(void *ctx, void *obj);

/* Registers the parameter kind name: {name} in a pattern matches one
 * non-empty path segment, which resolve turns into the object the handler
 * gets.  With owner, the route layer then checks the object is the
 * caller's tenant's (or the caller an admin): another tenant's object is
 * answered exactly as an id that does not exist — the one tenant check of
 * every id a client names, in the path, a body or a header.  unknown is the 404's message for an id
 * it does not know, "%s" in it (at most one) replaced by the id.  A name registered twice, or a
 * name that is not [a-z_]+, is refused.  Register before the routes using it. */
int http_param(http_server_t *self, const char *name, http_resolve_fn resolve, http_owner_fn owner,
               void *ctx, const char *unknown, sg_error_t **err);

/* Who makes req, for the audit log: its client address and tenant. */
void http_who(const http_req_t *req, const char *frontend, audit_who_t *who);

/* Whether the caller of req may see an object owner's (an admin sees all):
 * for lists, which show only the caller's own. */
bool http_may_see(const http_req_t *req, const char *owner);

/* Resolves an id a client gave elsewhere than in the path (a body field, a
 * header) exactly as {name} is resolved: the object, or NULL, in which case
 * answer with http_reply_unknown, as for an unknown {name}. */
void *http_resolve(const http_req_t *req, const char *name, const char *id);
/* Answers an unknown id of kind name: 404 with the kind's message, in the
 * front end's error shape.  The one answer for every unknown id. */
enum MHD_Result http_reply_unknown(const http_req_t *req, const char *name, const char *id);

/* A handler: answers the request (queues a response, or suspends the
 * connection and keeps req->state).  Runs on the loop; must not block. */
typedef enum MHD_Result (*http_handle_fn)(void *ctx, http_req_t *req);

/* A route that takes its request body as it arrives instead of in memory,
 * so max_body does not apply (uploads).  open runs when the headers of an
 * authorised request have come and its {name}s are resolved, and returns
 * the sink, or NULL to have the body read into memory and handed to the
 * handler as usual.  write gets each chunk and says how much of it it
 * took: all of it, or — backpressure — less after suspending conn, which
 * it resumes when it can take more (the rest is offered again then; a
 * sink that took less without suspending is a programmer's error).
 * finish, after the last one,
 * answers, frees the sink and sets *sink to NULL (so errors found on the
 * way are answered once the body has been read) — or, to answer later,
 * suspends the connection and leaves *sink, and is called again when the
 * connection is resumed; abort frees one whose request broke off.  A sink
 * that feeds something slower than the network (a command's stdin, a file
 * inside a sandbox) resumes the connection with MHD_resume_connection, then
 * http_server_wake. */
typedef struct {
    void *(*open)(void *ctx, const http_req_t *req);
    size_t (*write)(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                    size_t len);
    enum MHD_Result (*finish)(void *ctx, struct MHD_Connection *conn, void **sink);
    void (*abort)(void *ctx, void *sink);
} http_sink_t;

/* Route flags. */
enum {
    /* No key needed (a health check for probes); a key that is given is
     * checked as on any route, and a wrong one refused and counted. */
    HTTP_ROUTE_PUBLIC = 1,
};

/* One endpoint: a method and a path pattern.  A pattern starts with '/'
 * and is made of segments: an exact one matches itself ("" too: "/api/"
 * ends with one), {name} one non-empty segment (name registered with
 * http_param), and '*', only as the last, whatever rest the path has,
 * nothing included: "/a/" then '*' matches "/a", "/a/" and "/a/b/c".  A
 * GET route also answers HEAD when no HEAD route matches. */
typedef struct {
    const char *method;
    const char *pattern;
    http_handle_fn handle;   /* NULL only with a sink whose open never declines */
    unsigned flags;          /* HTTP_ROUTE_* */
    const http_sink_t *sink; /* NULL: bodies in memory; else borrowed (static) */
} http_route_t;

/* What the routes of one front end share. */
typedef struct {
    void *ctx; /* the front end's object, passed to every function (borrowed) */
    /* The request has ended, answered or broken off (completed: the whole
     * response went out); called once, and only when req->state is not
     * NULL.  May be NULL for a front end that never keeps state. */
    void (*done)(void *ctx, void *state, bool completed);
    /* The front end's name in the audit log ("rest", "jupyter"...), or NULL. */
    const char *name;
    /* Optional: ends, its own way, a request whose key was revoked
     * (http_server_revoke), state its req->state: true when it did (a
     * WebSocket closed with 1008), false to let the server end it.  Runs on
     * the loop, outside libmicrohttpd's calls. */
    bool (*revoke)(void *ctx, void *state);
    /* Optional: the response for a refusal the route layer makes on this
     * front end's routes (an unknown id: 404; a method the path does not
     * take: 405), in the front end's error shape.  The server adds the
     * status and, for 405, the Allow header.  NULL: {"error", "message"}. */
    struct MHD_Response *(*error_response)(void *ctx, const sg_error_t *err);
} http_front_t;

/* Registers routes (n of them; the table and its strings borrowed: static)
 * for front (copied).  The route for a request is the one whose method and
 * pattern match; since two routes of one method that could match the same
 * path are refused (an identical pattern, "/a/{x}" next to "/a/b", "/a/"
 * then '*' next to "/a"), the order does not matter.  Refused too: a
 * pattern not starting with '/', a '*' that is not the last segment, an
 * unregistered {name}, an incomplete sink.  A request whose path no pattern matches is
 * answered 404 "no route for METHOD PATH", one whose path only routes of
 * other methods match 405 with Allow, after the token check (unless one of
 * those routes is public).  Register before the loop runs. */
int http_routes(http_server_t *self, const http_front_t *front, const http_route_t *routes,
                size_t n, sg_error_t **err);

/* Suspends and resumes conn's request as MHD_suspend_connection and
 * MHD_resume_connection do, the server knowing which are suspended so
 * that it can end them (http_server_revoke); every suspension goes through
 * these.  http_resume of a request that is not suspended does nothing.
 * http_suspend returns false, without suspending, only to a content reader
 * whose request's key was revoked: it returns
 * MHD_CONTENT_READER_END_WITH_ERROR then (handlers and sinks are not
 * called for such a request). */
bool http_suspend(struct MHD_Connection *conn);
void http_resume(struct MHD_Connection *conn);

/* Runs libmicrohttpd before the loop next waits: front ends call it after
 * they resume a suspended connection or hand back an upgraded one.  arg is
 * the http_server_t. */
void http_server_wake(void *arg);

/* The port actually bound (useful when port 0 was asked for). */
int http_server_port(const http_server_t *self);

/* MHD_queue_response, with the headers every response carries
 * (X-Sandgate-Replica). */
enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r);
/* A JSON response (body is stolen; a newline ends it). */
struct MHD_Response *http_json_response(json_t *body);
/* Queues a JSON response (body is stolen) on a connection. */
enum MHD_Result http_reply_json(struct MHD_Connection *conn, unsigned status, json_t *body);
/* {"error": kind, "message": msg}, and for a quota its name and value:
 * {"error": "quota_exceeded", "quota", "limit", "message"} (a new reference). */
json_t *http_error_body(const sg_error_t *err);
/* E2B's error shape, {"code": STATUS, "message"}, as a front end's
 * error_response (http_front_t) for the route layer's refusals. */
struct MHD_Response *http_code_error_response(void *ctx, const sg_error_t *err);
/* Answers err in that shape (a quota's 429 also naming it: "quota", "limit"). */
enum MHD_Result http_reply_code_error(struct MHD_Connection *conn, const sg_error_t *err);
/* Same from a kind and a message. */
enum MHD_Result http_reply_code_errorf(struct MHD_Connection *conn, sg_errkind_t kind,
                                       const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An empty answer (204, say). */
enum MHD_Result http_reply_empty(struct MHD_Connection *conn, unsigned status);
/* Queues http_error_body(err) with the status the kind maps to. */
enum MHD_Result http_reply_error(struct MHD_Connection *conn, const sg_error_t *err);
/* Same from a kind and a message. */
enum MHD_Result http_reply_errorf(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));

#endif
