#include "gateway/session/observers.h"

/* --- the audit log ------------------------------------------------------------------ */

static audit_exec_t audit_of(const exec_info_t *x)
{
    return (audit_exec_t){.id = x->id, .context = x->context, .command = x->kind == EXEC_COMMAND};
}

/* "execute" or "command": what is about to run, and where. */
static void audit_start(void *arg, const exec_info_t *x)
{
    (void)arg;
    if (!audit_enabled())
        return;
    json_t *extra = json_object();
    if (json_object_size(x->env)) { /* the names only: values may be secrets */
        json_t *names = json_array();
        const char *name;
        json_t *v;
        json_object_foreach ((json_t *)x->env, name, v)
            json_array_append_new(names, json_string(name));
        json_object_set_new(extra, "env_vars", names);
    }
    if (x->silent)
        json_object_set_new(extra, "silent", json_true());
    audit_exec_t ax = audit_of(x);
    audit_execute(x->who, &ax, x->language, x->code, x->code_len, extra);
}

/* "execution.end": how it ended, never what it printed. */
static void audit_end(void *arg, const exec_end_t *end)
{
    (void)arg;
    if (!audit_enabled())
        return;
    json_t *extra = json_object();
    json_t *code = json_object_get(end->report, "exit_code");
    if (json_is_integer(code))
        json_object_set(extra, "exit_code", code);
    if (end->truncated)
        json_object_set_new(extra, "truncated", json_true());
    audit_exec_t ax = audit_of(end->info);
    const char *error = end->ename ? end->ename
                        : end->err ? sg_error_kind_name(end->err->kind)
                                   : NULL;
    audit_execution_end(end->info->who, &ax, exec_outcome_name(end->outcome), end->duration_ms,
                        end->output_bytes, error, extra);
}

const exec_sink_t exec_audit_observer = {.on_start = audit_start, .on_done = audit_end};

/* --- the metrics ---------------------------------------------------------------------- */

static void metrics_limit(void *arg, const char *note)
{
    (void)arg;
    (void)note;
    metrics.output_truncated++;
}

static void metrics_end(void *arg, const exec_end_t *end)
{
    (void)arg;
    metrics.artifacts += json_array_size(end->artifacts);
    metrics_execution(end->info->kind, end->outcome, (double)end->duration_ms / 1000.0);
    metrics_tenant(end->info->who->tenant, "executions");
}

const exec_sink_t exec_metrics_observer = {.on_limit = metrics_limit, .on_done = metrics_end};
