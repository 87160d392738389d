#include "gateway/session/exec.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/files/files.h"
#include "gateway/session/envscript.h"
#include "gateway/session/observers.h"
#include "gateway/session/pyscript.h"

typedef struct {
    exec_sink_t sink;
    void *arg;
} observer_t;

struct exec {
    kernel_t *k;
    exec_t *prev, *next; /* on `accepted` from when it is accepted until it ends */
    bool accepted;
    uint64_t kernel_exec; /* kernel_execute's or kernel_track's id */
    exec_info_t info;
    audit_who_t who;
    exec_opts_t opts;
    size_t max_output; /* SIZE_MAX: counted, never cut (a relayed execution) */
    observer_t obs[EXEC_OBSERVERS_MAX];
    int nobs;
    size_t out_bytes;
    bool truncated;
    char *env_restore;
    json_t *before; /* output/ when the execution was accepted */
    char *report;   /* command: the runner's stdout */
    size_t report_len;
    int64_t started;
    char *ename; /* the first exception's name */
};

/* Every execution accepted and not ended yet, whichever front end asked:
 * what max-queued counts. */
static exec_t *accepted;

/* Each observer's callback cb, if it has one, with the arguments after arg. */
#define NOTIFY(e, cb, ...)                                                                         \
    do {                                                                                           \
        for (int i_ = 0; i_ < (e)->nobs; i_++)                                                     \
            if ((e)->obs[i_].sink.cb)                                                              \
                (e)->obs[i_].sink.cb((e)->obs[i_].arg, __VA_ARGS__);                               \
    } while (0)

void exec_policy_defaults(exec_policy_t *policy)
{
    kernel_opts_t k;
    kernel_opts_defaults(&k);
    *policy = (exec_policy_t){.timeout_ms = 300 * 1000,
                              .max_timeout_ms = 3600 * 1000,
                              .interrupt_grace_ms = k.interrupt_grace_ms,
                              .max_output = 16 << 20,
                              .max_queue = 8,
                              .rich_formats = true};
}

int exec_policy_timeout(const exec_policy_t *policy)
{
    int t = policy->timeout_ms > 0 ? policy->timeout_ms : policy->max_timeout_ms;
    return t < policy->max_timeout_ms ? t : policy->max_timeout_ms;
}

static void observe(exec_t *e, const exec_sink_t *sink, void *arg)
{
    assert(e->nobs < EXEC_OBSERVERS_MAX);
    e->obs[e->nobs++] = (observer_t){*sink, arg};
}

static exec_t *exec_new(kernel_t *k, const exec_opts_t *opts, exec_kind_t kind)
{
    static uint64_t executions;
    exec_t *e = xzalloc(sizeof *e);
    e->k = k;
    e->opts = *opts;
    e->opts.env = NULL; /* borrowed for the call only */
    e->who = opts->who;
    e->max_output = opts->policy->max_output;
    e->started = zclock_mono();
    e->info = (exec_info_t){.id = ++executions,
                            .kind = kind,
                            .context = kernel_id(k),
                            .language = kernel_spec(k)->language,
                            .who = &e->who};
    observe(e, &exec_audit_observer, NULL);
    observe(e, &exec_metrics_observer, NULL);
    return e;
}

static void enlist(exec_t *e)
{
    e->accepted = true;
    e->next = accepted;
    if (accepted)
        accepted->prev = e;
    accepted = e;
}

static void exec_free(exec_t *e)
{
    if (e->accepted) {
        if (e->prev)
            e->prev->next = e->next;
        else
            accepted = e->next;
        if (e->next)
            e->next->prev = e->prev;
    }
    free(e->env_restore);
    free(e->report);
    free(e->ename);
    json_decref(e->before);
    free(e);
}

/* The end, for every observer still attached; frees e. */
static void finish(exec_t *e, exec_end_t *end)
{
    end->info = &e->info;
    end->workspace = kernel_workspace(e->k);
    end->ename = e->ename;
    end->output_bytes = e->opts.command ? e->report_len : e->out_bytes;
    end->truncated = e->truncated;
    end->duration_ms = zclock_mono() - e->started;
    if (end->err)
        end->error_name = end->err->kind == SG_E_TIMEOUT ? "TimeoutError" : "KernelError";
    NOTIFY(e, on_done, end);
    exec_free(e);
}

/* Counts n bytes against the limit; false, and the marker once, past it. */
static bool fits(exec_t *e, size_t n)
{
    if (e->truncated)
        return false;
    e->out_bytes += n;
    if (e->out_bytes <= e->max_output)
        return true;
    e->truncated = true;
    char note[160];
    snprintf(note, sizeof note,
             "[sandgate: output limit of %zu bytes reached; further output of this execution "
             "is dropped]\n",
             e->max_output);
    NOTIFY(e, on_limit, note);
    return false;
}

/* A command's runner reports on its stdout; nothing else is output. */
static void command_output(exec_t *e, const jmsg_t *m)
{
    const char *text = jmsg_content_str(m, "text");
    const char *name = jmsg_content_str(m, "name");
    if (strcmp(jmsg_type(m), "stream") != 0 || !text || !name || strcmp(name, "stdout") != 0)
        return;
    size_t n = strlen(text);
    if (e->report_len + n > 8 * e->max_output + 65536)
        return; /* cannot happen with the runner's own limit; bounded anyway */
    e->report = xrealloc(e->report, e->report_len + n + 1);
    memcpy(e->report + e->report_len, text, n + 1);
    e->report_len += n;
}

static void stream_output(exec_t *e, const jmsg_t *m)
{
    const char *name = jmsg_content_str(m, "name");
    json_t *tj = json_object_get(jmsg_content(m), "text");
    const char *text = json_string_value(tj);
    size_t n = json_string_length(tj); /* kernels print NULs too */
    if (!text)
        return;
    /* What fits under the limit goes out, then the limit's marker. */
    size_t fit = e->truncated ? 0 : utf8_cut(text, n, e->max_output - e->out_bytes);
    const char *date = json_string_value(json_object_get(jmsg_header(m), "date"));
    if (fit > 0) {
        e->out_bytes += fit;
        NOTIFY(e, on_stream, name && strcmp(name, "stderr") == 0, text, fit, date ? date : "");
    }
    if (fit < n)
        fits(e, n - fit);
}

static void on_output(const jmsg_t *m, void *arg)
{
    exec_t *e = arg;
    const char *type = jmsg_type(m);
    json_t *c = jmsg_content(m);
    if (e->opts.command) {
        command_output(e, m);
    } else if (strcmp(type, "stream") == 0) {
        stream_output(e, m);
    } else if (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0) {
        json_t *data = json_object_get(c, "data");
        if (!json_is_object(data))
            return;
        char *dumped = json_dumps(data, JSON_COMPACT);
        size_t n = dumped ? strlen(dumped) : 0;
        free(dumped);
        if (fits(e, n))
            NOTIFY(e, on_result, data, strcmp(type, "execute_result") == 0);
    } else if (strcmp(type, "error") == 0) {
        const char *ename = jmsg_content_str(m, "ename");
        const char *evalue = jmsg_content_str(m, "evalue");
        if (!e->ename)
            e->ename = xstrdup(ename ? ename : "Error");
        NOTIFY(e, on_error, ename ? ename : "Error", evalue ? evalue : "",
               json_object_get(c, "traceback"));
    } else if (strcmp(type, "execute_input") == 0) {
        NOTIFY(e, on_count, json_integer_value(json_object_get(c, "execution_count")));
    }
}

static exec_outcome_t outcome_of(const json_t *reply, const sg_error_t *err, const json_t *report)
{
    if (err)
        return err->kind == SG_E_TIMEOUT ? OUTCOME_TIMEOUT : OUTCOME_KERNEL;
    if (report) {
        json_t *code = json_object_get(report, "exit_code");
        return json_is_integer(code) && json_integer_value(code) == 0 ? OUTCOME_OK : OUTCOME_ERROR;
    }
    const char *status = json_string_value(json_object_get(reply, "status"));
    return status && strcmp(status, "ok") == 0 ? OUTCOME_OK : OUTCOME_ERROR;
}

static void restore_env(exec_t *e)
{
    if (e->env_restore) {
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(e->k, e->env_restore, &o, &(kernel_exec_cb_t){0}, NULL);
    }
}

static void on_done(const json_t *reply, const sg_error_t *err, void *arg)
{
    exec_t *e = arg;
    restore_env(e);
    /* JSON_ALLOW_NUL: a command's output may hold NUL bytes (grep -Z, find
     * -print0), which the runner's JSON escapes as \u0000. */
    json_t *report = e->report ? json_loadb(e->report, e->report_len, JSON_ALLOW_NUL, NULL) : NULL;
    if (report && !json_is_object(report)) {
        json_decref(report);
        report = NULL;
    }
    exec_end_t end = {.reply = reply, .err = err, .report = report};
    if (e->before)
        end.artifacts = files_changed(kernel_workspace(e->k), EXEC_ARTIFACT_DIR, e->before);
    end.outcome = outcome_of(reply, err, e->opts.command ? report : NULL);
    finish(e, &end);
    json_decref(end.artifacts);
    json_decref(report);
}

static void on_timeout(const sg_error_t *err, void *arg)
{
    exec_t *e = arg;
    NOTIFY(e, on_timeout, err);
}

/* Ends an execution that never ran. */
static void refuse(exec_t *e, sg_error_t **err)
{
    sg_error_t *why = NULL;
    if (err == NULL || *err == NULL)
        sg_error_set(&why, SG_E_INTERNAL, "refused");
    finish(e, &(exec_end_t){.err = why ? why : *err, .outcome = OUTCOME_REFUSED});
    sg_error_free(&why);
}

/* The executions waiting or running in owner's sessions (tenants.h's
 * TENANT_QUEUED, registered at the first execution). */
static long long queued_of(void *ctx, const char *owner)
{
    (void)ctx;
    long long n = 0;
    for (exec_t *e = accepted; e; e = e->next)
        n += strcmp(kernel_owner(e->k), owner) == 0;
    return n;
}

/* The quotas of k's owner, before k takes one more execution: max-queued,
 * and max-live when the execution would resume k (asked here, not only by
 * kernel_execute's wake gate, so that nothing is begun for a refusal). */
static int admit(kernel_t *k, const exec_opts_t *opts, sg_error_t **err)
{
    static bool counted;
    if (!counted)
        tenants_count_source(TENANT_QUEUED, queued_of, NULL);
    counted = true;
    if (tenant_admit_work(kernel_owner(k), err) < 0)
        return -1;
    kernel_state_t st = kernel_state(k);
    if (st == KERNEL_PAUSED || st == KERNEL_PAUSING)
        return tenant_admit_wake(k, opts->quota, err);
    return 0;
}

exec_t *exec_start(kernel_t *k, const char *code, const exec_opts_t *opts, const exec_sink_t *sink,
                   void *arg, sg_error_t **err)
{
    exec_t *e = exec_new(k, opts, opts->command ? EXEC_COMMAND : EXEC_CODE);
    e->info.code = code;
    e->info.code_len = strlen(code);
    e->info.env = opts->env;
    NOTIFY(e, on_start, &e->info);
    e->info.code = NULL;
    e->info.env = NULL;
    int max_queue = opts->policy->max_queue;
    if (kernel_pending(k) >= (size_t)max_queue) {
        sg_error_set(err, SG_E_CONFLICT,
                     "context %s already has %d executions waiting; try again later", kernel_id(k),
                     max_queue);
        refuse(e, err);
        return NULL;
    }
    if (admit(k, opts, err) < 0) {
        refuse(e, err);
        return NULL;
    }
    e->before = files_snapshot(kernel_workspace(k), EXEC_ARTIFACT_DIR);
    const char *language = kernel_spec(k)->language;
    if (json_object_size(opts->env)) {
        char *set = NULL;
        if (strcmp(language, "python") == 0) {
            set = pyscript(PY_ENV_SET, json_pack("{s:O}", "env_new", opts->env));
            e->env_restore = pyscript(PY_ENV_RESTORE, NULL);
        } else {
            envscript(language, opts->env, &set, &e->env_restore);
        }
        if (set) {
            kernel_exec_opts_t o = {.silent = true};
            kernel_execute(k, set, &o, &(kernel_exec_cb_t){0}, NULL);
            free(set);
        }
    }
    kernel_exec_opts_t o = {.timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms
                                                               : exec_policy_timeout(opts->policy),
                            .store_history = !opts->command,
                            .silent = opts->command,
                            .rich_formats = opts->rich_formats && !opts->command};
    char *run = opts->command ? pyscript(PY_COMMAND, json_pack("{s:s, s:I}", "cmd", code, "limit",
                                                               (json_int_t)e->max_output))
                              : xstrdup(code);
    kernel_exec_cb_t cb = {
        .on_output = on_output, .on_done = on_done, .on_timeout = on_timeout, .arg = e};
    e->kernel_exec = kernel_execute(k, run, &o, &cb, err);
    free(run);
    if (e->kernel_exec == 0) {
        free(e->env_restore); /* the kernel is dead: nothing will run it */
        e->env_restore = NULL;
        refuse(e, err);
        return NULL;
    }
    enlist(e);
    observe(e, sink, arg);
    return e;
}

exec_t *exec_track(kernel_t *k, const jmsg_t *request, const exec_opts_t *opts,
                   const exec_sink_t *sink, void *arg, sg_error_t **err)
{
    exec_t *e = exec_new(k, opts, EXEC_CODE);
    e->max_output = SIZE_MAX; /* its frontend gets the kernel's messages as they are */
    json_t *code = json_object_get(jmsg_content(request), "code");
    e->info.code = json_string_value(code) ? json_string_value(code) : "";
    e->info.code_len = json_string_length(code);
    e->info.silent = json_is_true(json_object_get(jmsg_content(request), "silent"));
    NOTIFY(e, on_start, &e->info);
    e->info.code = NULL;
    if (admit(k, opts, err) < 0) {
        refuse(e, err);
        return NULL;
    }
    kernel_exec_opts_t o = {.timeout_ms = exec_policy_timeout(opts->policy)};
    kernel_exec_cb_t cb = {
        .on_output = on_output, .on_done = on_done, .on_timeout = on_timeout, .arg = e};
    e->kernel_exec = kernel_track(k, jmsg_id(request), &o, &cb, err);
    if (e->kernel_exec == 0) {
        refuse(e, err);
        return NULL;
    }
    enlist(e);
    observe(e, sink, arg);
    return e;
}

void exec_fail(exec_t **e_p, const sg_error_t *err)
{
    exec_t *e = *e_p;
    if (e == NULL)
        return;
    *e_p = NULL;
    kernel_forget(e->k, e->kernel_exec);
    finish(e, &(exec_end_t){.err = err, .outcome = OUTCOME_KERNEL});
}

/* The front end is gone: its sink leaves (it is the last observer). */
static void drop_sink(exec_t *e)
{
    if (e->nobs > 0)
        e->nobs--;
}

void exec_cancel(exec_t **e_p, const char *why)
{
    exec_t *e = *e_p;
    if (e == NULL)
        return;
    *e_p = NULL;
    drop_sink(e);
    log_info("%s; interrupting its execution on %s", why, kernel_id(e->k));
    kernel_forget(e->k, e->kernel_exec);
    kernel_interrupt(e->k, NULL);
    restore_env(e);
    finish(e, &(exec_end_t){.outcome = OUTCOME_CANCELLED});
}

void exec_detach(exec_t **e_p)
{
    exec_t *e = *e_p;
    if (e == NULL)
        return;
    *e_p = NULL;
    drop_sink(e);
    kernel_forget(e->k, e->kernel_exec);
    finish(e, &(exec_end_t){.outcome = OUTCOME_DETACHED});
}

kernel_t *exec_kernel(const exec_t *e)
{
    return e->k;
}
