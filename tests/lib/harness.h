/* Test harness for kernelmgr: run the event loop until a condition holds,
 * and collect an execution's outputs. */
#ifndef SG_TEST_HARNESS_H
#define SG_TEST_HARNESS_H

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/loop.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "kernelmgr/kernel/kernel.h"
#include "tests/lib/tap.h"

static loop_t *loop;

typedef bool(cond_fn)(void *arg);

/* Runs the loop until cond(arg) or timeout_ms; returns cond(arg).  cond is
 * checked after every pass: only the loop's callbacks change what it sees. */
static __attribute__((unused)) bool run_until(cond_fn *cond, void *arg, int timeout_ms)
{
    int64_t deadline = zclock_mono() + timeout_ms;
    while (!cond(arg)) {
        int64_t left = deadline - zclock_mono();
        if (left <= 0 || loop_once(loop, (int)left, NULL) < 0)
            break;
    }
    return cond(arg);
}

static __attribute__((unused)) void harness_fini(void)
{
}

static __attribute__((unused)) bool never(void *arg)
{
    return false;
}

/* Lets the loop run for ms (deferred frees, background removals). */
static __attribute__((unused)) void spin(int ms)
{
    run_until(never, NULL, ms);
}

/* One execution's results. */
typedef struct {
    bool done;
    json_t *outputs; /* [{msg_type, content}] */
    json_t *reply;
    sg_error_t *err;
    int64_t done_at;
} result_t;

static __attribute__((unused)) void r_output(const jmsg_t *m, void *arg)
{
    result_t *r = arg;
    json_array_append_new(
        r->outputs, json_pack("{s:s, s:O}", "msg_type", jmsg_type(m), "content", jmsg_content(m)));
}

static __attribute__((unused)) void r_done(const json_t *reply, const sg_error_t *err, void *arg)
{
    result_t *r = arg;
    r->done = true;
    r->done_at = zclock_mono();
    r->reply = reply ? json_deep_copy(reply) : NULL;
    if (err) {
        r->err = xzalloc(sizeof *r->err);
        r->err->kind = err->kind;
        r->err->msg = xstrdup(err->msg);
    }
}

static __attribute__((unused)) bool r_is_done(void *arg)
{
    return ((result_t *)arg)->done;
}

static __attribute__((unused)) void result_clear(result_t *r)
{
    json_decref(r->outputs);
    json_decref(r->reply);
    sg_error_free(&r->err);
    memset(r, 0, sizeof *r);
}

/* Executes code and waits; r must be cleared by the caller. */
static __attribute__((unused)) bool run_code(kernel_t *k, const char *code, int timeout_ms,
                                             int wait_ms, result_t *r)
{
    memset(r, 0, sizeof *r);
    r->outputs = json_array();
    kernel_exec_opts_t o = {.timeout_ms = timeout_ms, .store_history = true};
    kernel_exec_cb_t cb = {.on_output = r_output, .on_done = r_done, .arg = r};
    sg_error_t *err = NULL;
    if (kernel_execute(k, code, &o, &cb, &err) == 0) {
        r->done = true;
        r->err = err;
        return false;
    }
    return run_until(r_is_done, r, wait_ms);
}

/* The concatenated stdout, and the text/plain of the execute_result. */
static __attribute__((unused)) char *r_stdout(const result_t *r)
{
    size_t i;
    json_t *m;
    char *s = xstrdup("");
    json_array_foreach (r->outputs, i, m) {
        json_t *c = json_object_get(m, "content");
        if (strcmp(json_string_value(json_object_get(m, "msg_type")), "stream") == 0 &&
            strcmp(json_string_value(json_object_get(c, "name")), "stdout") == 0) {
            char *n = xasprintf("%s%s", s, json_string_value(json_object_get(c, "text")));
            free(s);
            s = n;
        }
    }
    return s;
}

static __attribute__((unused)) const char *r_result(const result_t *r)
{
    size_t i;
    json_t *m;
    json_array_foreach (r->outputs, i, m)
        if (strcmp(json_string_value(json_object_get(m, "msg_type")), "execute_result") == 0)
            return json_string_value(json_object_get(
                json_object_get(json_object_get(m, "content"), "data"), "text/plain"));
    return NULL;
}

static __attribute__((unused)) const char *r_status(const result_t *r)
{
    return r->reply ? json_string_value(json_object_get(r->reply, "status")) : NULL;
}

static __attribute__((unused)) const char *r_ename(const result_t *r)
{
    return r->reply ? json_string_value(json_object_get(r->reply, "ename")) : NULL;
}

#endif
