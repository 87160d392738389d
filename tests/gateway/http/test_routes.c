/* http.c's route table, through a real server on a loopback port: which
 * route a method and path reach (exact segments, {name} captures, a '*'
 * rest, the query string ignored), the registrations refused (overlaps,
 * malformed patterns, unknown kinds), 405 with Allow and 404, ids resolved
 * before the handler (an unknown one answered 404 by the route layer, the
 * handler never called; another caller's id answered exactly like an
 * unknown one), the token check and public routes, 413, streamed bodies
 * (sinks) on a pattern route and their abort, a sink that takes less than
 * it is given (the upload suspended, the rest given again), a suspended
 * request resumed on the handler that owns it, done() and the metrics.  No kernel, no
 * front end: the handlers here answer with what they were given. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "gateway/auth/keys.h"
#include "gateway/http/http.h"
#include "gateway/observe/metrics.h"
#include "tests/lib/tap.h"

#define TOKEN "t0ken"
#define MAX_BODY 64

static loop_t *loop;
static http_server_t *http;

/* --- a client ------------------------------------------------------------------- */

typedef struct {
    int status;
    char body[512];
    char allow[128]; /* the Allow header, "" without one */
} reply_t;

static void (*tick)(void); /* called on every pass while a request is out */

/* Sends req over a fresh connection and runs the loop until the server has
 * closed it (requests say Connection: close); stops early when *until. */
static reply_t exchange(const char *req, size_t len, const bool *until)
{
    reply_t rep = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)http_server_port(http))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 1000);
    }
    char got[4096];
    size_t off = 0, n = 0;
    for (int64_t end = zclock_mono() + 5000; zclock_mono() < end && !(until && *until);) {
        if (off < len) {
            ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
        }
        ssize_t r = recv(fd, got + n, sizeof got - 1 - n, 0);
        if (r == 0)
            break;
        if (r > 0)
            n += (size_t)r;
        if (tick)
            tick();
        loop_once(loop, 5, NULL);
    }
    close(fd);
    for (int i = 0; i < 5; i++) /* libmicrohttpd sees the close: completion callbacks */
        loop_once(loop, 2, NULL);
    got[n] = 0;
    if (sscanf(got, "HTTP/1.1 %d", &rep.status) != 1)
        rep.status = 0;
    const char *allow = strcasestr(got, "\r\nAllow: ");
    if (allow)
        snprintf(rep.allow, sizeof rep.allow, "%.*s", (int)strcspn(allow + 9, "\r"), allow + 9);
    const char *body = strstr(got, "\r\n\r\n");
    snprintf(rep.body, sizeof rep.body, "%s", body ? body + 4 : "");
    return rep;
}

/* A request with headers (each ending in \r\n) and a body. */
static reply_t request(const char *method, const char *url, const char *headers, const char *body)
{
    char *req = xasprintf("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s"
                          "Content-Length: %zu\r\n\r\n%s",
                          method, url, headers, strlen(body), body);
    reply_t r = exchange(req, strlen(req), NULL);
    free(req);
    return r;
}

static reply_t get(const char *url)
{
    return request("GET", url, "Authorization: Bearer " TOKEN "\r\n", "");
}

/* --- parameter kinds: things and tags ----------------------------------------------- */

/* Things "a", "b" and "c" exist, and belong to the caller unless it says
 * "X-Tenant: other": a resolver decides with the request at hand, as a
 * tenant check will. */
static const char *const things[] = {"a", "b", "c"};
static const char *const thing_objs[] = {"obj-a", "obj-b", "obj-c"};
static int resolves; /* calls of resolve_thing */

static void *resolve_thing(void *ctx, const char *id, const http_req_t *req)
{
    resolves++;
    const char *tenant = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Tenant");
    if (tenant && strcmp(tenant, "other") == 0)
        return NULL;
    for (size_t i = 0; i < 3; i++)
        if (strcmp(id, things[i]) == 0)
            return (void *)thing_objs[i];
    return NULL;
}

/* Every tag exists but "nope". */
static void *resolve_tag(void *ctx, const char *id, const http_req_t *req)
{
    return strcmp(id, "nope") == 0 ? NULL : (void *)"tag-obj";
}

/* --- handlers ------------------------------------------------------------------- */

static int handled; /* calls of any handler */

/* Answers "<ctx> <method> <path>[ name=id:obj...][ rest=<rest>] <body>". */
static enum MHD_Result name_handle(void *ctx, http_req_t *req)
{
    handled++;
    char *text = xasprintf("%s %s %s", (const char *)ctx, req->method, req->path);
    for (size_t k = 0; k < req->nargs; k++) {
        char *more = xasprintf("%s %s=%s:%s", text, req->args[k].name, req->args[k].id,
                               req->args[k].obj ? (const char *)req->args[k].obj : "-");
        free(text);
        text = more;
    }
    if (req->rest) {
        char *more = xasprintf("%s rest=[%s]", text, req->rest);
        free(text);
        text = more;
    }
    char *more = xasprintf("%s %.*s", text, (int)req->len, req->body);
    free(text);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(more), more, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ret = MHD_queue_response(req->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* POST /lookup: the body is a thing's id, resolved as a path's would be. */
static enum MHD_Result lookup_handle(void *ctx, http_req_t *req)
{
    handled++;
    if (http_resolve(req, "thing", req->body) == NULL)
        return http_reply_unknown(req, "thing", req->body);
    return name_handle(ctx, req);
}

/* Suspends the first time, answers "resumed" the next; counts the rest. */
static struct MHD_Connection *suspended;
static int waits, resumes, dones;
static bool done_completed, resumed_flag;
static void *done_state;
static int the_state;

static enum MHD_Result wait_handle(void *ctx, http_req_t *req)
{
    if (req->state == NULL) {
        waits++;
        req->state = &the_state;
        suspended = req->conn;
        MHD_suspend_connection(req->conn);
        return MHD_YES;
    }
    resumes++;
    resumed_flag = req->resumed && req->len == 0;
    return name_handle("resumed", req);
}

static void wait_done(void *ctx, void *state, bool completed)
{
    dones++;
    done_state = state;
    done_completed = completed;
}

static void resume_suspended(void)
{
    if (suspended) {
        MHD_resume_connection(suspended);
        suspended = NULL;
        http_server_wake(http);
    }
}

/* Takes PUT bodies as they come; answers 201 {"bytes", "got"}. */
static int opens, aborts;
static bool wrote;
static char opened_with[128]; /* what open was given */

typedef struct {
    size_t bytes;
} sink_t;

static void *sink_open(void *ctx, const http_req_t *req)
{
    opens++;
    snprintf(opened_with, sizeof opened_with, "%s %s", (const char *)http_arg(req, "thing"),
             req->rest);
    if (strstr(req->path, "/decline"))
        return NULL;
    return xzalloc(sizeof(sink_t));
}

static size_t sink_write(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                         size_t len)
{
    ((sink_t *)sink)->bytes += len;
    wrote = true;
    return len;
}

static enum MHD_Result sink_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    size_t bytes = ((sink_t *)*sink)->bytes;
    free(*sink);
    *sink = NULL;
    return http_reply_json(conn, 201, json_pack("{s:I}", "bytes", (json_int_t)bytes));
}

static void sink_abort(void *ctx, void *sink)
{
    aborts++;
    free(sink);
}

static const http_sink_t upload = {
    .open = sink_open, .write = sink_write, .finish = sink_finish, .abort = sink_abort};

/* Takes at most 7 bytes a call (http_sink_t.write taking less), as a sink in front of a
 * slow consumer does; the connection it leaves suspended is resumed on the
 * next pass (tick).  Answers 201 {"bytes", "short"} and keeps what it got. */
typedef struct {
    struct MHD_Connection *conn;
    char got[1024];
    size_t bytes;
    int short_takes;
} taker_t;
static taker_t *taking; /* the one whose connection waits */

static void *taker_open(void *ctx, const http_req_t *req)
{
    taker_t *t = xzalloc(sizeof *t);
    t->conn = req->conn;
    return t;
}

static size_t taker_take(void *ctx, void *sink, struct MHD_Connection *conn, const char *data,
                         size_t len)
{
    taker_t *t = sink;
    if (taking) /* suspended: it must not be called */
        return 0;
    size_t n = len < 7 ? len : 7;
    if (t->bytes + n < sizeof t->got)
        memcpy(t->got + t->bytes, data, n);
    t->bytes += n;
    if (n < len) {
        t->short_takes++;
        taking = t;
        MHD_suspend_connection(conn);
    }
    return n;
}

static void taker_resume(void)
{
    if (taking) {
        struct MHD_Connection *conn = taking->conn;
        taking = NULL;
        MHD_resume_connection(conn);
        http_server_wake(http);
    }
}

static char taken[1024]; /* what the last one got */

static enum MHD_Result taker_finish(void *ctx, struct MHD_Connection *conn, void **sink)
{
    taker_t *t = *sink;
    snprintf(taken, sizeof taken, "%.*s", (int)t->bytes, t->got);
    enum MHD_Result ret = http_reply_json(
        conn, 201, json_pack("{s:I, s:i}", "bytes", (json_int_t)t->bytes, "short", t->short_takes));
    free(t);
    *sink = NULL;
    return ret;
}

static void taker_abort(void *ctx, void *sink)
{
    if (taking == sink)
        taking = NULL;
    free(sink);
}

static const http_sink_t taker = {
    .open = taker_open, .write = taker_take, .finish = taker_finish, .abort = taker_abort};

/* A front end with its own error shape: {"oops": kind, "why": message}. */
static struct MHD_Response *odd_errors(void *ctx, const sg_error_t *err)
{
    char *text =
        xasprintf("{\"oops\":\"%s\",\"why\":\"%s\"}", sg_error_kind_name(err->kind), err->msg);
    return MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
}

/* --- tests ---------------------------------------------------------------------- */

static const http_front_t front_t = {.ctx = "t", .done = wait_done};
static const http_front_t front_odd = {.ctx = "odd", .error_response = odd_errors};

static void test_registration(void)
{
    sg_error_t *err = NULL;
    is_int(http_param(http, "thing", resolve_thing, NULL, NULL, "no thing '%s'", &err), 0,
           "a parameter kind");
    is_int(http_param(http, "tag", resolve_tag, NULL, NULL, "Tag not found", &err), 0,
           "another, its message without the id");
    static const struct {
        const char *name, *unknown, *why;
    } bad_params[] = {
        {"thing", "x", "a kind registered twice"},
        {"Thing", "x", "a name not of [a-z_]"},
        {"", "x", "an empty name"},
        {"pair", "%s and %s", "two %s in the message"},
        {"pct", "100%", "a % that is not %s"},
    };
    for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
        int rc = http_param(http, bad_params[i].name, resolve_thing, NULL, NULL,
                            bad_params[i].unknown, &err);
        ok(rc < 0 && err && err->kind == SG_E_INVALID, "refused: %s (%s)", bad_params[i].why,
           err ? err->msg : "accepted");
        sg_error_free(&err);
    }

    static const http_route_t routes[] = {
        {"GET", "/health", name_handle, HTTP_ROUTE_PUBLIC, NULL},
        {"GET", "/b", name_handle, 0, NULL},
        {"POST", "/b", name_handle, 0, NULL},
        {"GET", "/things", name_handle, 0, NULL},
        {"GET", "/things/", name_handle, 0, NULL},
        {"GET", "/things/{thing}", name_handle, 0, NULL},
        {"DELETE", "/things/{thing}", name_handle, 0, NULL},
        {"POST", "/things/{thing}/tags/{tag}", name_handle, 0, NULL},
        {"GET", "/files/{thing}/*", name_handle, 0, NULL},
        {"PUT", "/files/{thing}/*", name_handle, 0, &upload},
        {"POST", "/lookup", lookup_handle, 0, NULL},
        {"GET", "/wait", wait_handle, 0, NULL},
    };
    is_int(http_routes(http, &front_t, routes, sizeof routes / sizeof routes[0], &err), 0,
           "a table of routes (%s)", err ? err->msg : "ok");
    sg_error_free(&err);
    static const http_route_t odd[] = {{"GET", "/odd/{thing}", name_handle, 0, NULL}};
    is_int(http_routes(http, &front_odd, odd, 1, &err), 0, "another front end's route");

    static const http_sink_t half = {.open = sink_open};
    static const struct {
        http_route_t route;
        const char *why;
    } bad[] = {
        {{"GET", "/b", name_handle, 0, NULL}, "the same method and pattern twice"},
        {{"GET", "/things/x", name_handle, 0, NULL}, "an exact segment a {name} already takes"},
        {{"GET", "/things/{tag}", name_handle, 0, NULL}, "another kind in the same place"},
        {{"GET", "/files/{thing}", name_handle, 0, NULL},
         "a path that a '*' takes with nothing after it"},
        {{"GET", "/files/{thing}/x/y", name_handle, 0, NULL}, "a path under a '*'"},
        {{"GET", "/*", name_handle, 0, NULL}, "a '*' over everything"},
        {{"GET", "b", name_handle, 0, NULL}, "a pattern without '/'"},
        {{"GET", "", name_handle, 0, NULL}, "an empty pattern"},
        {{"GET", "/c/*/d", name_handle, 0, NULL}, "a '*' before the end"},
        {{"GET", "/c/a*", name_handle, 0, NULL}, "a '*' inside a segment"},
        {{"GET", "/c/x{thing}", name_handle, 0, NULL}, "a {name} inside a segment"},
        {{"GET", "/c/{nope}", name_handle, 0, NULL}, "an unregistered kind"},
        {{"GET", "/c/{thing}/{tag}/{thing}/{tag}/{thing}", name_handle, 0, NULL},
         "too many {name}s"},
        {{"PUT", "/c", name_handle, 0, &half}, "a sink without its other functions"},
        {{"GET", "/c", NULL, 0, NULL}, "no handler and no sink"},
        {{"", "/c", name_handle, 0, NULL}, "no method"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = http_routes(http, &front_t, &bad[i].route, 1, &err);
        ok(rc < 0 && err && err->kind == SG_E_INVALID, "refused: %s (%s %s: %s)", bad[i].why,
           bad[i].route.method, bad[i].route.pattern, err ? err->msg : "accepted");
        sg_error_free(&err);
    }
    static const http_route_t fine[] = {{"POST", "/things/{thing}/x", name_handle, 0, NULL},
                                        {"DELETE", "/files/{thing}/*", name_handle, 0, NULL}};
    is_int(http_routes(http, &front_t, fine, 2, &err), 0,
           "the same paths for other methods, and beside a {name} (%s)", err ? err->msg : "ok");
    sg_error_free(&err);
}

static void test_routing(void)
{
    static const struct {
        const char *method, *url, *want;
    } cases[] = {
        {"GET", "/b", "t GET /b "},
        {"POST", "/b", "t POST /b "},
        {"GET", "/b?x=1", "t GET /b "}, /* the query string is not the path */
        {"GET", "/things", "t GET /things "},
        {"GET", "/things/", "t GET /things/ "}, /* an exact "" segment */
        {"GET", "/things/a", "t GET /things/a thing=a:obj-a "},
        {"HEAD", "/things/a", ""}, /* a GET route answers HEAD, without the body */
        {"DELETE", "/things/c", "t DELETE /things/c thing=c:obj-c "},
        {"POST", "/things/b/tags/red", "t POST /things/b/tags/red thing=b:obj-b tag=red:tag-obj "},
        {"POST", "/things/b/x", "t POST /things/b/x thing=b:obj-b "},
        {"GET", "/files/a", "t GET /files/a thing=a:obj-a rest=[] "},
        {"GET", "/files/a/", "t GET /files/a/ thing=a:obj-a rest=[/] "},
        {"GET", "/files/a/x/y.txt", "t GET /files/a/x/y.txt thing=a:obj-a rest=[/x/y.txt] "},
        {"GET", "/odd/b", "odd GET /odd/b thing=b:obj-b "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply_t r =
            request(cases[i].method, cases[i].url, "Authorization: Bearer " TOKEN "\r\n", "");
        ok(r.status == 200 && strcmp(r.body, cases[i].want) == 0, "%s %s reaches '%s' (%d %s)",
           cases[i].method, cases[i].url, cases[i].want, r.status, r.body);
    }
    reply_t r = request("POST", "/b", "Authorization: Bearer " TOKEN "\r\n", "{\"x\":1}");
    is_str(r.body, "t POST /b {\"x\":1}", "a body is handed over whole");

    static const char *const nowhere[] = {
        "/nothing", "/b/", "/bc", "/things/a/b", "/files", "/things//tags/red", "/odd"};
    for (size_t i = 0; i < sizeof nowhere / sizeof nowhere[0]; i++) {
        r = get(nowhere[i]);
        char want[96];
        snprintf(want, sizeof want, "no route for GET %s", nowhere[i]);
        ok(r.status == 404 && strstr(r.body, "\"error\":\"not_found\"") && strstr(r.body, want),
           "GET %s: no pattern matches, 404 (%d %s)", nowhere[i], r.status, r.body);
    }
}

static void test_methods(void)
{
    int calls = handled, looked = resolves;
    reply_t r = request("POST", "/things/a", "Authorization: Bearer " TOKEN "\r\n", "");
    is_int(r.status, 405, "a method the path does not take: 405");
    is_str(r.allow, "GET, HEAD, DELETE", "Allow lists the methods it takes");
    ok(strstr(r.body, "\"error\":\"method_not_allowed\"") &&
           strstr(r.body, "\"message\":\"use GET or DELETE /things/a\""),
       "with the JSON error (%s)", r.body);
    r = request("PUT", "/things/zzz", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 405 && strcmp(r.allow, "GET, HEAD, DELETE") == 0,
       "an unknown id under a wrong method: 405 all the same (%d)", r.status);
    r = request("DELETE", "/b", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 405 && strcmp(r.allow, "GET, HEAD, POST") == 0 &&
           strstr(r.body, "use GET or POST /b"),
       "DELETE /b: 405, Allow: %s (%s)", r.allow, r.body);
    r = request("GET", "/lookup", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 405 && strcmp(r.allow, "POST") == 0 && strstr(r.body, "use POST /lookup"),
       "GET /lookup: 405, Allow: %s (%s)", r.allow, r.body);
    r = request("POST", "/odd/a", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 405 && strcmp(r.allow, "GET, HEAD") == 0 &&
           strcmp(r.body, "{\"oops\":\"method_not_allowed\",\"why\":\"use GET /odd/a\"}") == 0,
       "a front end's own error shape for its 405 (%s)", r.body);
    is_int(handled - calls, 0, "no handler called for any of them");
    is_int(resolves - looked, 0, "and no id resolved");
    is_int(request("POST", "/things/a", "", "").status, 401, "the token comes before the 405");
}

static void test_ids(void)
{
    int calls = handled, looked = resolves;
    reply_t unknown = get("/things/zzz");
    is_int(unknown.status, 404, "an id the resolver does not know: 404");
    is_str(unknown.body, "{\"error\":\"not_found\",\"message\":\"no thing 'zzz'\"}\n",
           "with the kind's message");
    is_int(handled - calls, 0, "answered by the route layer: the handler is not called");
    is_int(resolves - looked, 1, "the resolver was asked once");

    reply_t r = request("POST", "/things/a/tags/nope", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 404 && strstr(r.body, "\"message\":\"Tag not found\""),
       "the second {name} unknown: 404 with its kind's message (%s)", r.body);
    r = request("POST", "/things/zzz/tags/nope", "Authorization: Bearer " TOKEN "\r\n", "");
    ok(r.status == 404 && strstr(r.body, "no thing 'zzz'"), "the first unknown one answers (%s)",
       r.body);
    is_int(handled - calls, 0, "no handler called");

    /* Another caller's thing: the resolver says no, and the answer is the
     * unknown id's, byte for byte (the id aside). */
    reply_t theirs =
        request("GET", "/things/zzz", "Authorization: Bearer " TOKEN "\r\nX-Tenant: other\r\n", "");
    reply_t other =
        request("GET", "/things/abc", "Authorization: Bearer " TOKEN "\r\nX-Tenant: other\r\n", "");
    reply_t missing = get("/things/abc");
    ok(theirs.status == 404 && strcmp(theirs.body, unknown.body) == 0,
       "an id the resolver refuses this caller is answered exactly as an unknown one (%s)",
       theirs.body);
    ok(other.status == missing.status && strcmp(other.body, missing.body) == 0, "(%s | %s)",
       other.body, missing.body);
    r = request("GET", "/things/a", "Authorization: Bearer " TOKEN "\r\nX-Tenant: other\r\n", "");
    ok(r.status == 404 &&
           strcmp(r.body, "{\"error\":\"not_found\",\"message\":\"no thing 'a'\"}\n") == 0,
       "an existing thing of another tenant: the same 404 (%s)", r.body);

    r = request("POST", "/lookup", "Authorization: Bearer " TOKEN "\r\n", "zzz");
    ok(r.status == 404 && strcmp(r.body, unknown.body) == 0,
       "an id from a body, resolved with http_resolve: the same 404 (%s)", r.body);
    r = request("POST", "/lookup", "Authorization: Bearer " TOKEN "\r\n", "b");
    is_str(r.body, "t POST /lookup b", "and a known one found");

    r = get("/odd/zzz");
    is_str(r.body, "{\"oops\":\"not_found\",\"why\":\"no thing 'zzz'\"}",
           "a front end's own error shape for its unknown ids");

    looked = resolves;
    is_int(request("GET", "/things/zzz", "", "").status, 401, "without the token: 401, not 404");
    is_int(resolves - looked, 0, "and nothing resolved for it");
}

static void test_auth(void)
{
    uint64_t failures = metrics.auth_failures;
    reply_t r = request("GET", "/b", "", "");
    is_int(r.status, 401, "no token: 401");
    ok(strstr(r.body, "\"error\":\"unauthorized\"") && strstr(r.body, "Authorization: Bearer"),
       "with the error body (%s)", r.body);
    is_int((long long)(metrics.auth_failures - failures), 1, "counted in auth_failures");
    is_int(request("GET", "/b", "Authorization: Bearer wrong\r\n", "").status, 401,
           "a wrong token: 401");
    is_int(request("GET", "/nothing-here", "", "").status, 401, "a path no route takes too");

    static const char *const ways[] = {
        "Authorization: Bearer " TOKEN "\r\n", "Authorization: token " TOKEN "\r\n",
        "authorization: bearer " TOKEN "\r\n", "X-Access-Token: " TOKEN "\r\n",
        "E2B-Traffic-Access-Token: " TOKEN "\r\n"};
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        r = request("GET", "/b", ways[i], "");
        ok(r.status == 200, "token as %.*s: 200 (%d)", (int)strcspn(ways[i], "\r"), ways[i],
           r.status);
    }
    is_int(request("GET", "/b?token=" TOKEN, "", "").status, 200, "token as ?token=: 200");

    r = request("GET", "/health", "", "");
    ok(r.status == 200 && strcmp(r.body, "t GET /health ") == 0,
       "a public route needs no token (%d %s)", r.status, r.body);
    r = request("POST", "/health", "", "");
    ok(r.status == 405 && strcmp(r.allow, "GET, HEAD") == 0,
       "a wrong method on it: 405 without the token (%d %s)", r.status, r.allow);
    is_int(request("GET", "/health/", "", "").status, 401, "only the public route itself");
}

static void test_limits(void)
{
    char big[MAX_BODY + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    reply_t r = request("POST", "/b", "Authorization: Bearer " TOKEN "\r\n", big);
    is_int(r.status, 413, "a body over max_body: 413");
    ok(strstr(r.body, "\"error\":\"limit_exceeded\"") != NULL, "with the error body (%s)", r.body);
    big[MAX_BODY] = 0;
    is_int(request("POST", "/b", "Authorization: Bearer " TOKEN "\r\n", big).status, 200,
           "max_body itself is fine");
    big[MAX_BODY] = 'x';
    is_int(request("POST", "/b", "", big).status, 401, "the token is checked before the size");
}

static void test_sinks(void)
{
    char big[4 * MAX_BODY + 1];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    int opened = opens, calls = handled;
    reply_t r = request("PUT", "/files/a/dir/f", "Authorization: Bearer " TOKEN "\r\n", big);
    ok(r.status == 201 && strstr(r.body, "\"bytes\":256"),
       "a PUT goes through the sink, past max_body (%d %s)", r.status, r.body);
    is_int(opens - opened, 1, "one sink opened");
    is_str(opened_with, "obj-a /dir/f", "with the resolved {thing} and the '*' rest");
    is_int(handled - calls, 0, "the handler is not called");

    r = request("PUT", "/files/b/decline", "Authorization: Bearer " TOKEN "\r\n", "{}");
    is_str(r.body, "t PUT /files/b/decline thing=b:obj-b rest=[/decline] {}",
           "a sink that declines: the body goes to the handler");

    opened = opens;
    r = request("PUT", "/files/zzz/f", "Authorization: Bearer " TOKEN "\r\n", big);
    ok(r.status == 404 && strstr(r.body, "no thing 'zzz'"),
       "an unknown id: 404 once the body is read, not 413 (%d %s)", r.status, r.body);
    is_int(opens - opened, 0, "and no sink opened for it");

    r = request("PUT", "/files/a/f", "", "abc");
    is_int(r.status, 401, "an unauthorised PUT: 401");
    is_int(opens - opened, 0, "and no sink opened for it");
    /* Its body is not awaited: the 401 comes at the headers, and the
     * connection closes (exchange returns when it does). */
    static const char unauth[] = "PUT /files/a/f HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                                 "Expect: 100-continue\r\n\r\nonly a little";
    int64_t t0 = zclock_mono();
    r = exchange(unauth, sizeof unauth - 1, NULL);
    ok(r.status == 401 && zclock_mono() - t0 < 2000,
       "an unauthorised PUT whose body never ends: 401 at once, no 100 (%d)", r.status);
    is_int(opens - opened, 0, "and no sink opened for it");

    /* A request that breaks off mid-body: the sink is aborted. */
    int aborted = aborts;
    wrote = false;
    static const char part[] = "PUT /files/c/g HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                               "\r\nContent-Length: 1000\r\n\r\nonly a little";
    exchange(part, sizeof part - 1, &wrote);
    for (int64_t end = zclock_mono() + 2000; aborts == aborted && zclock_mono() < end;)
        loop_once(loop, 10, NULL);
    is_int(aborts - aborted, 1, "a broken-off upload's sink is aborted");

    /* A sink that takes less than it is given: the upload waits, then the
     * rest comes again, in order, nothing lost. */
    static const http_route_t slow[] = {{"POST", "/slow/{thing}", NULL, 0, &taker}};
    sg_error_t *err = NULL;
    is_int(http_routes(http, &front_t, slow, 1, &err), 0, "a sink with take (%s)",
           err ? err->msg : "ok");
    char body[301];
    for (size_t i = 0; i < 300; i++)
        body[i] = (char)('0' + i % 10);
    body[300] = 0;
    tick = taker_resume;
    r = request("POST", "/slow/a", "Authorization: Bearer " TOKEN "\r\n", body);
    tick = NULL;
    ok(r.status == 201 && strstr(r.body, "\"bytes\":300"),
       "a sink that takes 7 bytes at a time gets the whole body (%d %s)", r.status, r.body);
    ok(strstr(r.body, "\"short\":0") == NULL, "having taken less than it was given (%s)", r.body);
    is_str(taken, body, "in order, nothing lost or repeated");
}

/* --- tenants: the owner check of the route layer ---------------------------------- */

/* Boxes "a1" (alice's) and "b1" (bob's). */
static void *resolve_box(void *ctx, const char *id, const http_req_t *req)
{
    return strcmp(id, "a1") == 0 ? "alice" : strcmp(id, "b1") == 0 ? "bob" : NULL;
}

static const char *box_owner(void *ctx, void *obj)
{
    return obj; /* the object is its owner's name */
}

static enum MHD_Result box_handle(void *ctx, http_req_t *req)
{
    char *text = xasprintf("%s sees %s", req->tenant ? req->tenant->name : "-",
                           (const char *)http_arg(req, "box"));
    enum MHD_Result r = http_reply_json(req->conn, 200, json_pack("{s:s}", "who", text));
    free(text);
    return r;
}

static reply_t as(const char *key, const char *url)
{
    char *h = xasprintf("Authorization: Bearer %s\r\n", key);
    reply_t r = request("GET", url, h, "");
    free(h);
    return r;
}

static void test_tenants(void)
{
    sg_error_t *err = NULL;
    is_int(http_param(http, "box", resolve_box, box_owner, NULL, "no box '%s'", &err), 0,
           "a kind with an owner function");
    static const http_route_t routes[] = {{"GET", "/boxes/{box}", box_handle, 0, NULL}};
    is_int(http_routes(http, &front_t, routes, 1, &err), 0, "its route");
    /* A keys file of two tenants whose keys are known. */
    char path[] = "/tmp/sg-routes-keys-XXXXXX";
    int fd = mkstemp(path);
    unsigned char ha[32], hb[32];
    crypto_hash_sha256(ha, (const unsigned char *)"alice-key-0123456789", 20);
    crypto_hash_sha256(hb, (const unsigned char *)"bob-key-0123456789xx", 20);
    char xa[65], xb[65];
    sodium_bin2hex(xa, sizeof xa, ha, 32);
    sodium_bin2hex(xb, sizeof xb, hb, 32);
    dprintf(fd, "# two tenants\nalice sha256:%s max-live=2\nbob sha256:%s\n", xa, xb);
    close(fd);
    keys_t *keys = keys_load(path, &err);
    ok(keys != NULL && keys_count(keys) == 2, "the keys file loads (%s)", err ? err->msg : "ok");
    sg_error_free(&err);
    http_server_set_keys(http, keys);

    reply_t r = as("alice-key-0123456789", "/boxes/a1");
    ok(r.status == 200 && strstr(r.body, "alice sees alice"), "alice gets her box (%d %s)",
       r.status, r.body);
    reply_t theirs = as("alice-key-0123456789", "/boxes/b1");
    is_int(theirs.status, 404, "bob's box is 404 to alice");
    r = as("bob-key-0123456789xx", "/boxes/b1");
    ok(r.status == 200 && strstr(r.body, "bob sees bob"), "bob gets his (%s)", r.body);
    r = as(TOKEN, "/boxes/a1");
    ok(r.status == 200 && strstr(r.body, "admin sees alice"),
       "the token is the admin, who sees every tenant's (%s)", r.body);
    is_int(as("carol-key-0123456789", "/boxes/a1").status, 401, "an unknown key: 401");
    /* Byte-identical: the same id, once another tenant's and once unknown. */
    http_server_set_keys(http, NULL);
    keys_destroy(&keys);
    unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    dprintf(fd, "alice sha256:%s\n", xa); /* bob and his box are gone */
    close(fd);
    keys = keys_load(path, &err);
    http_server_set_keys(http, keys);
    is_int(as("bob-key-0123456789xx", "/boxes/b1").status, 401,
           "a removed key stops working once the keys are replaced");
    reply_t unknown = as("alice-key-0123456789", "/boxes/zz");
    char *want = xasprintf("%s", unknown.body);
    char *p = strstr(want, "zz");
    if (p)
        memcpy(p, "b1", 2);
    ok(strcmp(theirs.body, want) == 0,
       "another tenant's id answers byte for byte what an unknown id answers (%s / %s)",
       theirs.body, want);
    free(want);
    http_server_set_keys(http, NULL);
    keys_destroy(&keys);
    unlink(path);
}

static void test_resume(void)
{
    uint64_t ok200 = metrics.http_status[200], timed = metrics.http_seconds.count;
    tick = resume_suspended;
    reply_t r = get("/wait");
    tick = NULL;
    ok(r.status == 200 && strncmp(r.body, "resumed GET /wait", 17) == 0,
       "a suspended request resumes on its own handler (%d %s)", r.status, r.body);
    is_int(waits, 1, "suspended once");
    is_int(resumes, 1, "called again once, with its state");
    ok(resumed_flag, "marked resumed, with no body");
    is_int(dones, 1, "done called once");
    ok(done_state == &the_state && done_completed, "with its state, completed");
    is_int((long long)(metrics.http_status[200] - ok200), 1, "the 200 is counted");
    is_int((long long)(metrics.http_seconds.count - timed), 1, "and timed");

    dones = 0;
    get("/b");
    is_int(dones, 0, "done is not called for a handler that kept no state");
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    loop = loop_new();
    http_config_t cfg;
    http_config_defaults(&cfg);
    cfg.port = 0;
    cfg.token = TOKEN;
    cfg.max_body = MAX_BODY;
    sg_error_t *err = NULL;
    http = http_server_new(loop, &cfg, &err);
    if (!ok(http != NULL, "a server on a loopback port (%s)", err ? err->msg : "ok"))
        return tap_done();
    test_registration();
    test_routing();
    test_methods();
    test_ids();
    test_auth();
    test_limits();
    test_sinks();
    test_resume();
    test_tenants();
    http_server_destroy(&http);
    http_server_destroy(&http);
    ok(http == NULL, "destroy nulls the pointer and is safe twice");
    loop_destroy(&loop);
    return tap_done();
}
