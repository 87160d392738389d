/* http.c's route table, through a real server on a loopback port: which
 * route a path reaches (exact before prefix, registration order, the query
 * string ignored), the patterns refused, the token check and public routes,
 * 413 and 404, streamed bodies (sinks) and their abort, a suspended request
 * resumed on the handler that owns it, done() and the metrics.  No kernel,
 * no front end: the handlers here answer with their own name. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "tests/tap.h"

#define TOKEN "t0ken"
#define MAX_BODY 64

static loop_t *loop;
static http_server_t *http;

/* --- a client ------------------------------------------------------------------- */

typedef struct {
    int status;
    char body[512];
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

/* --- handlers ------------------------------------------------------------------- */

/* Answers "<ctx> <method> <url> <body>". */
static enum MHD_Result name_handle(void *ctx, struct MHD_Connection *conn, const char *method,
                                   const char *url, const char *body, size_t len, void **state)
{
    char *text = xasprintf("%s %s %s %.*s", (const char *)ctx, method, url, (int)len, body);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static const http_handler_t named = {.handle = name_handle};

/* Suspends the first time, answers "resumed" the next; counts the rest. */
static struct MHD_Connection *suspended;
static int waits, resumes, dones;
static bool done_completed;
static void *done_state;
static int the_state;

static enum MHD_Result wait_handle(void *ctx, struct MHD_Connection *conn, const char *method,
                                   const char *url, const char *body, size_t len, void **state)
{
    if (*state == NULL) {
        waits++;
        *state = &the_state;
        suspended = conn;
        MHD_suspend_connection(conn);
        return MHD_YES;
    }
    resumes++;
    return name_handle("resumed", conn, method, url, body, len, state);
}

static void wait_done(void *ctx, void *state, bool completed)
{
    dones++;
    done_state = state;
    done_completed = completed;
}

static const http_handler_t waiting = {.handle = wait_handle, .done = wait_done};

static void resume_suspended(void)
{
    if (suspended) {
        MHD_resume_connection(suspended);
        suspended = NULL;
        http_server_wake(http);
    }
}

/* Takes PUT bodies as they come; answers 201 "<bytes>". */
static int opens, aborts;
static bool wrote;

typedef struct {
    size_t bytes;
} sink_t;

static void *sink_open(void *ctx, const char *method, const char *url)
{
    if (strcmp(method, "PUT") != 0)
        return NULL;
    opens++;
    return xzalloc(sizeof(sink_t));
}

static void sink_write(void *ctx, void *sink, const char *data, size_t len)
{
    ((sink_t *)sink)->bytes += len;
    wrote = true;
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

static const http_handler_t upload = {.handle = name_handle,
                                      .sink_open = sink_open,
                                      .sink_write = sink_write,
                                      .sink_finish = sink_finish,
                                      .sink_abort = sink_abort};

/* --- tests ---------------------------------------------------------------------- */

static void test_patterns(void)
{
    sg_error_t *err = NULL;
    is_int(http_route_add(http, "/health", HTTP_ROUTE_PUBLIC, &named, "health", &err), 0,
           "an exact public route");
    is_int(http_route_add(http, "/a/x", 0, &named, "ax", &err), 0, "an exact route");
    is_int(http_route_add(http, "/a/", HTTP_ROUTE_PREFIX, &named, "a", &err), 0,
           "a prefix over an earlier exact route");
    is_int(http_route_add(http, "/b", 0, &named, "b", &err), 0, "another exact route");
    is_int(http_route_add(http, "/wait", 0, &waiting, "wait", &err), 0, "a route that suspends");
    is_int(http_route_add(http, "/up/", HTTP_ROUTE_PREFIX, &upload, "up", &err), 0,
           "a route with a sink");

    static const struct {
        const char *pattern;
        unsigned flags;
        const char *why;
    } bad[] = {
        {"b", 0, "a path without '/'"},
        {"", 0, "an empty path"},
        {"/c", HTTP_ROUTE_PREFIX, "a prefix not ending in '/'"},
        {"/b", 0, "the same exact route twice"},
        {"/a/z", 0, "an exact route under an earlier prefix"},
        {"/a/x/", HTTP_ROUTE_PREFIX, "a prefix under an earlier prefix"},
        {"/a/", HTTP_ROUTE_PREFIX, "the same prefix twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = http_route_add(http, bad[i].pattern, bad[i].flags, &named, "bad", &err);
        ok(rc < 0 && err && err->kind == SG_E_INVALID, "refused: %s ('%s': %s)", bad[i].why,
           bad[i].pattern, err ? err->msg : "accepted");
        sg_error_free(&err);
    }
    http_handler_t half = {.handle = name_handle, .sink_open = sink_open};
    ok(http_route_add(http, "/half", 0, &half, "half", &err) < 0, "refused: a sink without its "
                                                                  "other functions");
    sg_error_free(&err);
    http_handler_t none = {0};
    ok(http_route_add(http, "/none", 0, &none, "none", &err) < 0, "refused: no handle function");
    sg_error_free(&err);
}

static void test_routing(void)
{
    reply_t r = get("/nothing");
    is_int(r.status, 404, "a path no route takes is 404 (before a fallback exists)");
    ok(strstr(r.body, "\"error\":\"not_found\"") && strstr(r.body, "no route for GET /nothing"),
       "with the error body (%s)", r.body);

    sg_error_t *err = NULL;
    is_int(http_route_add(http, "/", HTTP_ROUTE_PREFIX, &named, "fallback", &err), 0,
           "the prefix '/' as the fallback, last");
    int rc = http_route_add(http, "/late", 0, &named, "late", &err);
    ok(rc < 0, "nothing can be registered after it (%s)", err ? err->msg : "accepted");
    sg_error_free(&err);
    ok(http_route_add(http, "/", HTTP_ROUTE_PREFIX, &named, "fallback2", &err) < 0,
       "nor a second fallback");
    sg_error_free(&err);

    static const struct {
        const char *url, *want;
    } cases[] = {
        {"/a/x", "ax GET /a/x "},     /* exact, registered before the prefix */
        {"/a/y", "a GET /a/y "},      /* under the prefix */
        {"/a/", "a GET /a/ "},        /* the prefix itself */
        {"/a/x/z", "a GET /a/x/z "},  /* exact means exact */
        {"/a", "fallback GET /a "},   /* "/a/" does not take "/a" */
        {"/b", "b GET /b "},          /* exact */
        {"/b/", "fallback GET /b/ "}, /* exact means exact */
        {"/bc", "fallback GET /bc "}, /* exact means exact */
        {"/b?x=1", "b GET /b "},      /* the query string is not the path */
        {"/nothing", "fallback GET /nothing "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = get(cases[i].url);
        ok(r.status == 200 && strcmp(r.body, cases[i].want) == 0, "GET %s reaches '%s' (%d %s)",
           cases[i].url, cases[i].want, r.status, r.body);
    }
    r = request("POST", "/b", "Authorization: Bearer " TOKEN "\r\n", "{\"x\":1}");
    is_str(r.body, "b POST /b {\"x\":1}", "a body is handed over whole");
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
    is_int(request("GET", "/nothing-here", "", "").status, 401, "the fallback needs the token too");

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
    ok(r.status == 200 && strcmp(r.body, "health GET /health ") == 0,
       "a public route needs no token (%d %s)", r.status, r.body);
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
    int opened = opens;
    reply_t r = request("PUT", "/up/f", "Authorization: Bearer " TOKEN "\r\n", big);
    ok(r.status == 201 && strstr(r.body, "\"bytes\":256"),
       "a PUT goes through the sink, past max_body (%d %s)", r.status, r.body);
    is_int(opens - opened, 1, "one sink opened");

    r = request("POST", "/up/f", "Authorization: Bearer " TOKEN "\r\n", "{}");
    is_str(r.body, "up POST /up/f {}", "a sink that declines: the body goes to handle");

    opened = opens;
    r = request("PUT", "/up/f", "", "abc");
    is_int(r.status, 401, "an unauthorised PUT: 401, after its body");
    is_int(opens - opened, 0, "and no sink opened for it");

    /* A request that breaks off mid-body: the sink is aborted. */
    int aborted = aborts;
    wrote = false;
    static const char part[] = "PUT /up/g HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                               "\r\nContent-Length: 1000\r\n\r\nonly a little";
    exchange(part, sizeof part - 1, &wrote);
    for (int64_t end = zclock_mono() + 2000; aborts == aborted && zclock_mono() < end;)
        loop_once(loop, 10, NULL);
    is_int(aborts - aborted, 1, "a broken-off upload's sink is aborted");
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
    test_patterns();
    test_routing();
    test_auth();
    test_limits();
    test_sinks();
    test_resume();
    http_server_destroy(&http);
    http_server_destroy(&http);
    ok(http == NULL, "destroy nulls the pointer and is safe twice");
    loop_destroy(&loop);
    return tap_done();
}
