/* exec: one execution, as every front end runs it.
 *
 * The REST API (NDJSON or one JSON document), its shell commands and MCP's
 * execute_python start code here (exec_start), and only translate what
 * comes back into their protocol.  A Jupyter frontend's execute_request,
 * which channels.c relays to the kernel as the frontend sent it, is
 * followed here by its msg_id (exec_track).  This module owns what must
 * behave the same for all of them:
 *
 *  - the limits, one exec_policy_t for every front end;
 *  - the context's queue limit (SG_E_CONFLICT past max_queue waiting), and
 *    its owner's quotas (tenants.h, SG_E_QUOTA): max-queued, the executions
 *    waiting or running in all its sessions, counted here; and max-live when
 *    the execution would resume a paused context;
 *  - env_vars: set by a silent execution before the code, restored after;
 *  - the timeout (the kernel interrupts, then restarts — kernel.h);
 *  - the output limit: stream text is cut where the limit falls (on a UTF-8
 *    boundary), a rich result that does not fit is dropped, and on_limit
 *    comes once with the marker text; nothing after it is delivered (a
 *    relayed execution's output goes to its frontend as the kernel sent it:
 *    it is counted, never cut);
 *  - artifacts: output/ is snapshot when the execution is accepted, and
 *    what is new or changed is listed at the end (not for relayed ones);
 *  - cancel-on-disconnect (exec_cancel interrupts the code);
 *  - how it ended: one exec_outcome_t (metrics.h).
 *
 * Who hears about an execution: its observers, each an exec_sink_t and its
 * argument.  Every execution has the audit log's and the metrics'
 * (observers.h: "execute" or "command" when the code is queued, or
 * refused, and "execution.end" however it ends; sandgate_executions_total
 * and the durations), and, once it is accepted, its front end's.
 */
#ifndef SG_EXEC_H
#define SG_EXEC_H

#include <jansson.h>

#include "gateway/observe/observe.h"
#include "gateway/tenants/tenants.h"
#include "kernelmgr/kernel/kernel.h"

#define EXEC_ARTIFACT_DIR "output" /* files written here are artifacts */
#define EXEC_OBSERVERS_MAX 4

typedef struct exec exec_t;

/* The limits every execution runs under, whichever front end started it:
 * filled once from the options (main.c) and shared, read-only, by every
 * front end.  The kernels get timeout_ms and interrupt_grace_ms as their
 * own defaults (kernel_opts_t), for what sandgate runs on its own. */
typedef struct {
    int timeout_ms;         /* --exec-timeout: when a request names none; 0: max_timeout_ms */
    int max_timeout_ms;     /* --max-timeout: the most a request may ask for */
    int interrupt_grace_ms; /* after a timeout's interrupt, before the kernel is restarted */
    size_t max_output;      /* --max-output: bytes of output delivered per execution */
    int max_queue;          /* executions waiting in a context before another is refused */
    bool rich_formats;      /* --rich-formats: code the REST API and MCP run gets e2b/chart and
                               e2b/data when the request does not say (exec_opts_t) */
} exec_policy_t;

void exec_policy_defaults(exec_policy_t *policy);
/* The timeout (ms) of an execution whose request names none. */
int exec_policy_timeout(const exec_policy_t *policy);

typedef struct {
    const exec_policy_t *policy; /* borrowed; must outlive the execution */
    int timeout_ms;              /* 0: exec_policy_timeout(policy) */
    const json_t *env;     /* env_vars {name: value} (borrowed; Python, Bash, Deno, R), or NULL */
    bool rich_formats;     /* Python kernels add e2b/chart and e2b/data to its results
                              (kernelmgr/guest/kernel.py); a front end sets it from the request
                              or policy->rich_formats */
    bool command;          /* code is a shell command: it runs through a runner in the
                              kernel, whose report {stdout, stderr, exit_code} is on_done's */
    audit_who_t who;       /* who asked, for the audit log (copied) */
    tenant_quota_t *quota; /* where a refusal for a quota (SG_E_QUOTA) says which, for
                              the front end's answer; may be NULL */
} exec_opts_t;

/* What an execution is, for its observers (borrowed for the call). */
typedef struct {
    uint64_t id; /* unique in this process: the audit log's "execution" */
    exec_kind_t kind;
    const char *context; /* its kernel's id */
    const char *language;
    const audit_who_t *who;
    const char *code; /* as the client gave it (code_len bytes); on_start only */
    size_t code_len;
    const json_t *env; /* env_vars, or NULL; on_start only */
    bool silent;       /* a Jupyter frontend asked for a silent execution */
} exec_info_t;

/* How an execution ended, for on_done (everything borrowed for the call). */
typedef struct {
    const exec_info_t *info;
    const json_t *reply;    /* execute_reply content; NULL when the kernel gave none */
    const sg_error_t *err;  /* timeout, dead or restarted kernel, refusal; NULL otherwise */
    const char *error_name; /* err's, as clients see it: "TimeoutError" or "KernelError" */
    const json_t *report;   /* command: the runner's report, NULL if it gave none */
    json_t *artifacts;      /* [{path, size, mime}] new or changed under output/, or NULL */
    const char *workspace;  /* the context's, on the host */
    const char *ename;      /* the first exception's name, or NULL */
    size_t output_bytes;    /* printed and displayed (a command: its report) */
    bool truncated;         /* the output limit was reached */
    exec_outcome_t outcome;
    int64_t duration_ms;
} exec_end_t;

/* What an observer hears.  Every callback is optional; all data borrowed. */
typedef struct {
    /* The execution was asked for (observers attached at its creation: the
     * audit log and the metrics; a front end's sink is attached later). */
    void (*on_start)(void *arg, const exec_info_t *info);
    /* Text on stdout or stderr that fits the limit (n bytes; may hold NULs).
     * date: the message's header date ("" if none). */
    void (*on_stream)(void *arg, bool is_stderr, const char *text, size_t n, const char *date);
    /* A rich result that fits: data is its MIME bundle; main for execute_result. */
    void (*on_result)(void *arg, const json_t *data, bool main);
    void (*on_error)(void *arg, const char *ename, const char *evalue, const json_t *traceback);
    void (*on_count)(void *arg, json_int_t execution_count);
    /* Output reached the limit: note says so; later output is dropped. */
    void (*on_limit)(void *arg, const char *note);
    /* The execution passed its timeout and is being interrupted (err says
     * so); on_done follows, after a restart if the interrupt fails. */
    void (*on_timeout)(void *arg, const sg_error_t *err);
    /* Once, last.  The exec is freed after it returns. */
    void (*on_done)(void *arg, const exec_end_t *end);
} exec_sink_t;

/* Queues code on k (resuming it when it is paused).  NULL with *err
 * (SG_E_CONFLICT: the queue is full, SG_E_QUOTA: a quota of k's owner,
 * SG_E_UNAVAILABLE: the kernel is dead).  sink is copied; arg must stay
 * valid until on_done or exec_cancel. */
exec_t *exec_start(kernel_t *k, const char *code, const exec_opts_t *opts, const exec_sink_t *sink,
                   void *arg, sg_error_t **err);

/* Follows request, an execute_request a Jupyter frontend is sending to k
 * itself (borrowed; kernel_send it once this returns an execution, not
 * when it refuses), to its end, as exec_start's executions are followed:
 * the policy's timeout (from when the kernel is busy with it: interrupt,
 * then restart), the observers, the outcome.  opts->timeout_ms and
 * opts->env are not used; the context's queue limit does not apply (the
 * kernel queues what frontends send), its owner's max-queued does.  NULL
 * with *err (SG_E_QUOTA, or the kernel is dead). */
exec_t *exec_track(kernel_t *k, const jmsg_t *request, const exec_opts_t *opts,
                   const exec_sink_t *sink, void *arg, sg_error_t **err);

/* The request exec_track follows never reached the kernel (kernel_send
 * failed): the execution ends with err, as a kernel error, heard by every
 * observer.  Nulls *e. */
void exec_fail(exec_t **e, const sg_error_t *err);

/* The caller is gone: no callback follows, the code is interrupted, the
 * execution ends cancelled.  Nulls *e. */
void exec_cancel(exec_t **e, const char *why);

/* The daemon is stopping: no callback follows, the code runs on (its kernel
 * outlives the daemon); the execution ends detached.  Nulls *e. */
void exec_detach(exec_t **e);

kernel_t *exec_kernel(const exec_t *e);

#endif
