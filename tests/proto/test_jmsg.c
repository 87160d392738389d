/* Unit tests for proto/jmsg and proto/jsession: the message model, the signed
 * wire form, and refusal of hostile frames. */
#include <regex.h>

#include "proto/jsession.h"
#include "tests/lib/tap.h"

static const char KEY[] = "0123456789abcdef-test-key";

/* A wire message from raw JSON frames, signed with s (or sig if given). */
static zmsg_t *wire(jsession_t *s, const char *ident, const char *sig, const char *h, const char *p,
                    const char *m, const char *c)
{
    const char *parts[4] = {h, p, m, c};
    size_t lens[4];
    for (int i = 0; i < 4; i++)
        lens[i] = strlen(parts[i]);
    char hex[65];
    jsession_sign(s, (const void *const *)parts, lens, 4, hex);
    zmsg_t *z = zmsg_new();
    if (ident)
        zmsg_addstr(z, ident);
    zmsg_addstr(z, JSESSION_DELIM);
    zmsg_addstr(z, sig ? sig : hex);
    for (int i = 0; i < 4; i++)
        zmsg_addstr(z, parts[i]);
    return z;
}

#define HDR(type)                                                                                  \
    "{\"msg_id\":\"m-" type "\",\"msg_type\":\"" type "\",\"session\":\"s\",\"username\":\"u\","   \
    "\"date\":\"2026-01-01T00:00:00.000000Z\",\"version\":\"5.3\"}"

static void expect_refused(jsession_t *s, zmsg_t *z, sg_errkind_t kind, const char *what)
{
    sg_error_t *err = NULL;
    jmsg_t *m = jsession_decode(s, &z, &err);
    ok(m == NULL && err != NULL && err->kind == kind && z == NULL, "refused: %s (%s)", what,
       err ? err->msg : "accepted!");
    jmsg_destroy(&m);
    sg_error_free(&err);
}

static void test_model(void)
{
    jmsg_t *m = jmsg_new("execute_request", "sess-1", "alice");
    json_t *h = jmsg_header(m);
    is_str(jmsg_type(m), "execute_request", "msg_type set");
    is_str(json_string_value(json_object_get(h, "version")), "5.3", "version 5.3");
    is_str(json_string_value(json_object_get(h, "session")), "sess-1", "session set");
    is_str(json_string_value(json_object_get(h, "username")), "alice", "username set");
    regex_t re;
    regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$",
            REG_EXTENDED | REG_NOSUB);
    ok(regexec(&re, json_string_value(json_object_get(h, "date")), 0, NULL, 0) == 0,
       "date is ISO-8601 UTC with microseconds: %s", json_string_value(json_object_get(h, "date")));
    regfree(&re);
    regcomp(&re, "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
            REG_EXTENDED | REG_NOSUB);
    ok(regexec(&re, jmsg_id(m), 0, NULL, 0) == 0, "msg_id is a UUID4: %s", jmsg_id(m));
    regfree(&re);
    is_str(jmsg_parent_id(m), "", "no parent yet");

    jmsg_t *r = jmsg_new("execute_reply", "sess-2", "bob");
    zmsg_addstr(jmsg_identities(m), "peer-A");
    jmsg_set_parent(r, m);
    is_str(jmsg_parent_id(r), jmsg_id(m), "set_parent links parent_header.msg_id");
    ok(zmsg_size(jmsg_identities(r)) == 1, "set_parent copies routing identities");
    jmsg_set_content(r, json_pack("{s:s}", "status", "ok"));
    is_str(jmsg_content_str(r, "status"), "ok", "content set and read");
    ok(jmsg_content_str(r, "missing") == NULL, "absent content field is NULL");
    jmsg_destroy(&m);
    jmsg_destroy(&r);
    jmsg_destroy(&r);
    ok(r == NULL, "destroy nulls the pointer and is safe twice");
}

static void test_roundtrip(void)
{
    sg_error_t *err = NULL;
    jsession_t *a = jsession_new(KEY, strlen(KEY), &err);
    jsession_t *b = jsession_new(KEY, strlen(KEY), &err);
    ok(a && b && !err, "sessions created");

    jmsg_t *m = jsession_msg(a, "execute_request",
                             json_pack("{s:s, s:b}", "code", "print('h\xc3\xa9llo')", "silent", 0));
    zmsg_addstr(jmsg_identities(m), "id-1");
    zmsg_addstr(jmsg_identities(m), "id-2");
    zmsg_addmem(jmsg_buffers(m), "\x00\x01\x02", 3);
    zmsg_t *z = jsession_encode(a, m);
    is_int(zmsg_size(z), 2 + 1 + 5 + 1, "wire form has identities, delimiter, 5 frames, buffer");

    jmsg_t *d = jsession_decode(b, &z, &err);
    ok(d != NULL && z == NULL, "decodes under the same key");
    if (d) {
        ok(json_equal(jmsg_header(d), jmsg_header(m)), "header survives");
        ok(json_equal(jmsg_content(d), jmsg_content(m)), "content survives (UTF-8)");
        is_int(zmsg_size(jmsg_identities(d)), 2, "two identities");
        ok(zframe_streq(zmsg_first(jmsg_identities(d)), "id-1"), "identity order kept");
        zframe_t *buf = zmsg_first(jmsg_buffers(d));
        ok(buf && zframe_size(buf) == 3 && memcmp(zframe_data(buf), "\x00\x01\x02", 3) == 0,
           "binary buffer survives");
    }
    jmsg_destroy(&d);

    /* The same bytes again are a replay. */
    z = jsession_encode(a, m);
    d = jsession_decode(b, &z, &err);
    ok(d == NULL && err && err->kind == SG_E_AUTH && strstr(err->msg, "replay"),
       "a replayed message is refused: %s", err ? err->msg : "accepted");
    sg_error_free(&err);

    jsession_stats_t st;
    jsession_stats(b, &st);
    ok(st.accepted == 1 && st.replayed == 1, "stats count accepted=1 replayed=1");

    /* Wrong key. */
    jsession_t *evil = jsession_new("other", 5, &err);
    z = jsession_encode(evil, m);
    expect_refused(b, z, SG_E_AUTH, "signed with another key");
    jsession_stats(b, &st);
    is_int(st.bad_signature, 1, "bad signature counted");
    jsession_destroy(&evil);
    jmsg_destroy(&m);
    jsession_destroy(&a);
    jsession_destroy(&b);
    jsession_destroy(&b);
    ok(b == NULL, "jsession_destroy nulls and is safe twice");
}

static void test_keys(void)
{
    sg_error_t *err = NULL;
    ok(jsession_new("", 0, &err) == NULL && err && err->kind == SG_E_AUTH, "empty key refused");
    sg_error_free(&err);
    ok(jsession_new(NULL, 0, &err) == NULL && err, "NULL key refused");
    sg_error_free(&err);
}

static void test_replay_window(void)
{
    sg_error_t *err = NULL;
    jsession_t *s = jsession_new(KEY, strlen(KEY), &err);
    jsession_set_replay_window(s, 2);
    zmsg_t *first = wire(s, NULL, NULL, HDR("a"), "{}", "{}", "{}");
    zmsg_t *again = zmsg_dup(first);
    zmsg_t *again2 = zmsg_dup(first);
    jmsg_t *m = jsession_decode(s, &first, &err);
    ok(m != NULL, "first message accepted");
    jmsg_destroy(&m);
    expect_refused(s, again, SG_E_AUTH, "immediate replay");
    for (int i = 0; i < 2; i++) {
        char c[32];
        snprintf(c, sizeof c, "{\"n\":%d}", i);
        zmsg_t *z = wire(s, NULL, NULL, HDR("a"), "{}", "{}", c);
        m = jsession_decode(s, &z, &err);
        jmsg_destroy(&m);
    }
    m = jsession_decode(s, &again2, &err);
    ok(m != NULL, "the cache is bounded: the oldest signature is forgotten after 2 newer ones");
    jmsg_destroy(&m);
    sg_error_free(&err);
    jsession_destroy(&s);
}

/* Message number i: distinct content, so a distinct signature. */
static zmsg_t *numbered(jsession_t *s, int i)
{
    char c[32];
    snprintf(c, sizeof c, "{\"n\":%d}", i);
    return wire(s, NULL, NULL, HDR("a"), "{}", "{}", c);
}

/* Decodes a copy of z: true if accepted. */
static bool accepted(jsession_t *s, zmsg_t *z)
{
    sg_error_t *err = NULL;
    zmsg_t *copy = zmsg_dup(z);
    jmsg_t *m = jsession_decode(s, &copy, &err);
    bool yes = m != NULL;
    jmsg_destroy(&m);
    sg_error_free(&err);
    return yes;
}

/* The window holds exactly the newest signatures through growth, wrap and
 * many forgettings (a forgetting that broke a probe chain would let an
 * in-window replay through), at a bounded cost per entry. */
static void test_replay_cache(void)
{
    enum { W = 1000, N = 5000 };
    sg_error_t *err = NULL;
    jsession_t *s = jsession_new(KEY, strlen(KEY), &err);
    jsession_set_replay_window(s, W);
    static zmsg_t *msgs[N];
    int first = 0, refused = 0, old = 0;
    for (int i = 0; i < N; i++) {
        msgs[i] = numbered(s, i);
        first += accepted(s, msgs[i]);
    }
    is_int(first, N, "%d distinct messages through a window of %d are all accepted", N, W);
    for (int i = N - W; i < N; i++)
        refused += !accepted(s, msgs[i]);
    is_int(refused, W, "a replay of each of the newest %d is refused", W);
    /* Each old one accepted again is remembered and pushes out the oldest. */
    for (int i = 0; i < 10; i++)
        old += accepted(s, msgs[i]);
    is_int(old, 10, "replays older than the window are accepted (and remembered)");
    ok(!accepted(s, msgs[N - W + 10]) && !accepted(s, msgs[0]) && accepted(s, msgs[N - W]),
       "...which forgets the oldest ones, and no others");
    for (int i = 0; i < N; i++)
        zmsg_destroy(&msgs[i]);

    /* The default window, filled and past it: 16 to 24 bytes an entry. */
    jsession_set_replay_window(s, JSESSION_DEFAULT_REPLAY_WINDOW);
    jsession_stats_t st;
    jsession_stats(s, &st);
    is_int((long)st.replay_bytes, 0, "an empty window costs nothing");
    int n = (int)JSESSION_DEFAULT_REPLAY_WINDOW + 100, fresh = 0;
    zmsg_t *oldest_kept = NULL, *forgotten = NULL;
    for (int i = 0; i < n; i++) {
        zmsg_t *z = numbered(s, i);
        fresh += accepted(s, z);
        if (i == 99)
            forgotten = z;
        else if (i == 100)
            oldest_kept = z;
        else
            zmsg_destroy(&z);
    }
    jsession_stats(s, &st);
    is_int(fresh, n, "%d messages accepted", n);
    ok(st.replay_bytes <= 24 * JSESSION_DEFAULT_REPLAY_WINDOW,
       "the default window full costs %.2f MiB (<= 24 bytes an entry)",
       st.replay_bytes / 1048576.0);
    ok(!accepted(s, oldest_kept) && accepted(s, forgotten),
       "the %u newest are remembered, the one before them is not", JSESSION_DEFAULT_REPLAY_WINDOW);
    zmsg_destroy(&oldest_kept);
    zmsg_destroy(&forgotten);
    jsession_destroy(&s);
}

static void test_hostile(void)
{
    sg_error_t *err = NULL;
    jsession_t *s = jsession_new(KEY, strlen(KEY), &err);
    const char *h = HDR("kernel_info_request");

    expect_refused(s, NULL, SG_E_INVALID, "NULL message");
    expect_refused(s, zmsg_new(), SG_E_INVALID, "no frames at all");
    zmsg_t *z = zmsg_new();
    zmsg_addstr(z, "a");
    zmsg_addstr(z, "b");
    expect_refused(s, z, SG_E_INVALID, "no delimiter");
    z = wire(s, "peer", NULL, h, "{}", "{}", "{}");
    zframe_t *last = zmsg_last(z);
    zmsg_remove(z, last);
    zframe_destroy(&last);
    expect_refused(s, z, SG_E_INVALID, "truncated (content frame missing)");
    z = zmsg_new();
    zmsg_addstr(z, JSESSION_DELIM);
    expect_refused(s, z, SG_E_INVALID, "delimiter only");
    expect_refused(s, wire(s, NULL, "", h, "{}", "{}", "{}"), SG_E_AUTH, "unsigned (empty hmac)");
    expect_refused(s, wire(s, NULL, "deadbeef", h, "{}", "{}", "{}"), SG_E_AUTH, "short hmac");
    expect_refused(s,
                   wire(s, NULL, "0000000000000000000000000000000000000000000000000000000000000000",
                        h, "{}", "{}", "{}"),
                   SG_E_AUTH, "wrong hmac of the right length");
    expect_refused(s, wire(s, NULL, NULL, "{not json", "{}", "{}", "{}"), SG_E_INVALID,
                   "header not JSON (validly signed)");
    expect_refused(s, wire(s, NULL, NULL, h, "{}", "{}", "[1,2]"), SG_E_INVALID,
                   "content is an array");
    expect_refused(s, wire(s, NULL, NULL, h, "\"str\"", "{}", "{}"), SG_E_INVALID,
                   "parent is a string");
    expect_refused(s, wire(s, NULL, NULL, h, "{}", "null", "{}"), SG_E_INVALID, "metadata null");
    expect_refused(s, wire(s, NULL, NULL, "{\"msg_id\":\"x\"}", "{}", "{}", "{}"), SG_E_INVALID,
                   "header without msg_type");
    expect_refused(s,
                   wire(s, NULL, NULL,
                        "{\"msg_id\":1,\"msg_type\":\"t\",\"session\":\"s\",\"username\":\"u\","
                        "\"date\":\"d\",\"version\":\"5.3\"}",
                        "{}", "{}", "{}"),
                   SG_E_INVALID, "header msg_id not a string");
    expect_refused(s, wire(s, NULL, NULL, h, "{}", "{}", "{\"a\":\"\xff\xfe\"}"), SG_E_INVALID,
                   "invalid UTF-8 in content");

    jsession_set_max_bytes(s, 1024);
    char *big = malloc(4096);
    memset(big, ' ', 4095);
    big[0] = '{';
    big[4094] = '}';
    big[4095] = 0;
    expect_refused(s, wire(s, NULL, NULL, h, "{}", "{}", big), SG_E_LIMIT, "oversized frame");
    free(big);

    /* A NUL inside a JSON string (\u0000) is legal JSON and kernels send it. */
    jmsg_t *m;
    z = wire(s, NULL, NULL, h, "{}", "{}", "{\"text\":\"a\\u0000b\"}");
    m = jsession_decode(s, &z, &err);
    ok(m && json_string_length(json_object_get(jmsg_content(m), "text")) == 3,
       "escaped NUL in a string is accepted and kept");
    jmsg_destroy(&m);
    sg_error_free(&err);

    jsession_stats_t st;
    jsession_stats(s, &st);
    ok(st.malformed == 12 && st.unsigned_msgs == 1 && st.bad_signature == 2 && st.oversized == 1,
       "every rejection counted (malformed=%llu unsigned=%llu bad=%llu oversized=%llu)",
       (unsigned long long)st.malformed, (unsigned long long)st.unsigned_msgs,
       (unsigned long long)st.bad_signature, (unsigned long long)st.oversized);

    z = wire(s, "peer", NULL, h, "{}", "{}", "{}");
    m = jsession_decode(s, &z, &err);
    ok(m != NULL, "a good message is still accepted after all that");
    jmsg_destroy(&m);
    jsession_destroy(&s);
}

static void test_errors(void)
{
    sg_error_t *err = NULL;
    sg_error_set(&err, SG_E_NOTFOUND, "kernel %s", "k1");
    sg_error_prefix(&err, "session %d", 7);
    is_str(err->msg, "session 7: kernel k1", "error context is prepended");
    is_int(sg_error_http_status(err->kind), 404, "not found maps to 404");
    sg_error_free(&err);
    sg_error_errno(&err, 2, "open %s", "/x");
    is_str(err->msg, "open /x: No such file or directory", "errno text appended");
    sg_error_free(&err);
    sg_error_free(&err);
    ok(err == NULL, "sg_error_free nulls and is safe twice");
    is_int(sg_error_http_status(SG_E_INVALID), 400, "invalid maps to 400");
    is_int(sg_error_http_status(SG_E_TIMEOUT), 504, "timeout maps to 504");
}

int main(void)
{
    test_model();
    test_roundtrip();
    test_keys();
    test_replay_window();
    test_replay_cache();
    test_hostile();
    test_errors();
    return tap_done();
}
