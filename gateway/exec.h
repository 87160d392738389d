/* exec: one execution, as every front end runs it.
 *
 * The REST API (NDJSON or one JSON document), its shell commands and MCP's
 * execute_python all start code here, and only translate what comes back
 * into their protocol.  This module owns what must behave the same for all
 * of them:
 *
 *  - the context's queue limit (SG_E_CONFLICT past max_queue waiting);
 *  - env_vars: set by a silent execution before the code, restored after;
 *  - the timeout (the kernel interrupts, then restarts — kernel.h);
 *  - the output limit: stream text is cut where the limit falls (on a UTF-8
 *    boundary), a rich result that does not fit is dropped, and on_limit
 *    comes once with the marker text; nothing after it is delivered;
 *  - artifacts: output/ is snapshot when the execution is accepted, and
 *    what is new or changed is listed at the end;
 *  - metrics (executions by kind and outcome, durations, truncations,
 *    artifacts) and cancel-on-disconnect (exec_cancel interrupts the code);
 *  - the audit log: an "execute" or "command" event when the code is
 *    queued (or refused), an "execution.end" when it ends, however it ends.
 */
#ifndef SG_EXEC_H
#define SG_EXEC_H

#include <jansson.h>

#include "gateway/audit.h"
#include "gateway/metrics.h"
#include "kernelmgr/kernel.h"

#define EXEC_ARTIFACT_DIR "output" /* files written here are artifacts */

typedef struct exec exec_t;

typedef struct {
    int timeout_ms;
    const json_t *env; /* env_vars {name: value} (borrowed; Python kernels), or NULL */
    bool command;      /* code is a shell command: it runs through a runner in the
                          kernel, whose report {stdout, stderr, exit_code} is on_done's */
    size_t max_output; /* bytes of output delivered */
    int max_queue;     /* executions waiting in the context before this one is refused */
    audit_who_t who;   /* who asked, for the audit log (copied) */
} exec_opts_t;

/* How an execution ended, for on_done (everything borrowed for the call). */
typedef struct {
    const json_t *reply;   /* execute_reply content; NULL when the kernel gave none */
    const sg_error_t *err; /* timeout, dead or restarted kernel; NULL otherwise */
    const json_t *report;  /* command: the runner's report, NULL if it gave none */
    json_t *artifacts;     /* [{path, size, mime}] new or changed under output/ */
    const char *workspace; /* the context's, on the host */
    exec_outcome_t outcome;
    int64_t duration_ms;
} exec_end_t;

/* What a front end hears.  Every callback is optional; all data borrowed. */
typedef struct {
    /* Text on stdout or stderr that fits the limit (n bytes; may hold NULs).
     * date: the message's header date ("" if none). */
    void (*on_stream)(void *arg, bool is_stderr, const char *text, size_t n, const char *date);
    /* A rich result that fits: data is its MIME bundle; main for execute_result. */
    void (*on_result)(void *arg, const json_t *data, bool main);
    void (*on_error)(void *arg, const char *ename, const char *evalue, const json_t *traceback);
    void (*on_count)(void *arg, json_int_t execution_count);
    /* Output reached the limit: note says so; later output is dropped. */
    void (*on_limit)(void *arg, const char *note);
    /* Once, last.  The exec is freed after it returns. */
    void (*on_done)(void *arg, const exec_end_t *end);
} exec_sink_t;

/* Queues code on k.  NULL with *err (SG_E_CONFLICT: the queue is full,
 * SG_E_UNAVAILABLE: the kernel is dead).  sink is copied; arg must stay
 * valid until on_done or exec_cancel. */
exec_t *exec_start(kernel_t *k, const char *code, const exec_opts_t *opts, const exec_sink_t *sink,
                   void *arg, sg_error_t **err);

/* The caller is gone: no callback follows, the code is interrupted, the
 * execution is counted as cancelled.  Nulls *e. */
void exec_cancel(exec_t **e, const char *why);

/* The daemon is stopping: no callback follows, the code runs on (its kernel
 * outlives the daemon).  Nulls *e. */
void exec_detach(exec_t **e);

kernel_t *exec_kernel(const exec_t *e);

#endif
