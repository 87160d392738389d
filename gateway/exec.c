#include "gateway/exec.h"

#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/files.h"

struct exec {
    kernel_t *k;
    uint64_t id;
    exec_opts_t opts;
    exec_sink_t sink;
    void *arg;
    size_t out_bytes;
    bool truncated;
    char *env_restore;
    json_t *before; /* output/ when the execution was accepted */
    char *report;   /* command: the runner's stdout */
    size_t report_len;
    int64_t started;
    uint64_t audit_id; /* its number in the audit log; 0: not audited */
    char *ename;       /* the first exception's name, for the audit log */
};

static const char *const outcome_names[OUTCOMES] = {"ok", "error", "timeout", "kernel_error",
                                                    "cancelled"};

/* The audit log's "execution.end": how it ended, never what it printed. */
static void audit_end(const exec_t *e, const char *outcome, int64_t duration_ms,
                      const json_t *report, const sg_error_t *err)
{
    if (!e->audit_id)
        return;
    json_t *extra = json_object();
    json_t *code = json_object_get(report, "exit_code");
    if (json_is_integer(code))
        json_object_set(extra, "exit_code", code);
    if (e->truncated)
        json_object_set_new(extra, "truncated", json_true());
    audit_exec_t x = {.id = e->audit_id, .context = kernel_id(e->k), .command = e->opts.command};
    audit_execution_end(&e->opts.who, &x, outcome, duration_ms,
                        e->opts.command ? e->report_len : e->out_bytes,
                        e->ename ? e->ename
                        : err    ? sg_error_kind_name(err->kind)
                                 : NULL,
                        extra);
}

static char *env_code(const json_t *env, bool restore)
{
    /* env_vars apply to this execution only: set them, and restore after. */
    char *lit = json_dumps(env, JSON_COMPACT);
    char *code = restore ? xasprintf("import os as _os\n"
                                     "for _k, _v in _sandgate_env_saved.items():\n"
                                     "    if _v is None: _os.environ.pop(_k, None)\n"
                                     "    else: _os.environ[_k] = _v\n"
                                     "del _os, _k, _v, _sandgate_env_saved")
                         : xasprintf("import os as _os\n_sandgate_env_new = %s\n"
                                     "_sandgate_env_saved = {k: _os.environ.get(k) for k in "
                                     "_sandgate_env_new}\n"
                                     "_os.environ.update(_sandgate_env_new)\n"
                                     "del _os, _sandgate_env_new",
                                     lit);
    free(lit);
    return code;
}

/* A shell command runs in the context's sandbox through its kernel: a
 * runner started in a new session (so a timeout's interrupt kills the
 * whole process group), reading at most limit bytes of each stream and
 * draining the rest, reports {stdout, stderr, exit_code} on its stdout. */
static char *command_code(const char *command, size_t limit)
{
    json_t *cmd = json_string(command);
    char *lit = json_dumps(cmd, JSON_ENCODE_ANY);
    json_decref(cmd);
    char *code = xasprintf(
        "def _sandgate_command(cmd, limit):\n"
        "    import json, os, selectors, signal, subprocess, sys\n"
        "    p = subprocess.Popen(['/bin/sh', '-c', cmd], stdin=subprocess.DEVNULL,\n"
        "                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,\n"
        "                         start_new_session=True)\n"
        "    got = {p.stdout: bytearray(), p.stderr: bytearray()}\n"
        "    over = set()\n"
        "    try:\n"
        "        sel = selectors.DefaultSelector()\n"
        "        for f in got: sel.register(f, selectors.EVENT_READ)\n"
        "        while sel.get_map():\n"
        "            for key, _ in sel.select():\n"
        "                chunk = os.read(key.fd, 65536)\n"
        "                if not chunk:\n"
        "                    sel.unregister(key.fileobj)\n"
        "                    continue\n"
        "                buf = got[key.fileobj]\n"
        "                room = max(limit - len(buf), 0)\n"
        "                buf += chunk[:room]\n"
        "                if len(chunk) > room: over.add(key.fileobj)\n"
        "        p.wait()\n"
        "    except BaseException:\n"
        "        try: os.killpg(p.pid, signal.SIGKILL)\n"
        "        except OSError: pass\n"
        "        p.wait()\n"
        "        raise\n"
        "    def text(f):\n"
        "        t = got[f].decode('utf-8', 'replace')\n"
        "        if f in over: t += '\\n[sandgate: output limit of %%d bytes reached; the rest "
        "is dropped]\\n' %% limit\n"
        "        return t\n"
        "    rc = p.returncode if p.returncode >= 0 else 128 - p.returncode\n"
        "    sys.stdout.write(json.dumps({'stdout': text(p.stdout), 'stderr': text(p.stderr),\n"
        "                                 'exit_code': rc}))\n"
        "    sys.stdout.flush()\n"
        "try:\n"
        "    _sandgate_command(%s, %zu)\n"
        "finally:\n"
        "    del _sandgate_command\n",
        lit, limit);
    free(lit);
    return code;
}

static void exec_free(exec_t *e)
{
    free(e->env_restore);
    free(e->report);
    free(e->ename);
    json_decref(e->before);
    free(e);
}

/* Counts n bytes against the limit; false, and the marker once, past it. */
static bool fits(exec_t *e, size_t n)
{
    if (e->truncated)
        return false;
    e->out_bytes += n;
    if (e->out_bytes <= e->opts.max_output)
        return true;
    e->truncated = true;
    metrics.output_truncated++;
    char note[160];
    snprintf(note, sizeof note,
             "[sandgate: output limit of %zu bytes reached; further output of this execution "
             "is dropped]\n",
             e->opts.max_output);
    if (e->sink.on_limit)
        e->sink.on_limit(e->arg, note);
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
    if (e->report_len + n > 8 * e->opts.max_output + 65536)
        return; /* cannot happen with the runner's own limit; bounded anyway */
    e->report = xrealloc(e->report, e->report_len + n + 1);
    memcpy(e->report + e->report_len, text, n + 1);
    e->report_len += n;
}

static void on_output(const jmsg_t *m, void *arg)
{
    exec_t *e = arg;
    const char *type = jmsg_type(m);
    json_t *c = jmsg_content(m);
    if (e->opts.command) {
        command_output(e, m);
        return;
    }
    if (strcmp(type, "stream") == 0) {
        const char *name = jmsg_content_str(m, "name");
        json_t *tj = json_object_get(c, "text");
        const char *text = json_string_value(tj);
        size_t n = json_string_length(tj); /* kernels print NULs too */
        if (!text)
            return;
        /* What fits under the limit goes out, then the limit's marker. */
        size_t fit = e->truncated ? 0 : utf8_cut(text, n, e->opts.max_output - e->out_bytes);
        const char *date = json_string_value(json_object_get(jmsg_header(m), "date"));
        if (fit > 0) {
            e->out_bytes += fit;
            if (e->sink.on_stream)
                e->sink.on_stream(e->arg, name && strcmp(name, "stderr") == 0, text, fit,
                                  date ? date : "");
        }
        if (fit < n)
            fits(e, n - fit);
    } else if (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0) {
        json_t *data = json_object_get(c, "data");
        if (!json_is_object(data))
            return;
        char *dumped = json_dumps(data, JSON_COMPACT);
        size_t n = dumped ? strlen(dumped) : 0;
        free(dumped);
        if (fits(e, n) && e->sink.on_result)
            e->sink.on_result(e->arg, data, strcmp(type, "execute_result") == 0);
    } else if (strcmp(type, "error") == 0) {
        const char *ename = jmsg_content_str(m, "ename");
        const char *evalue = jmsg_content_str(m, "evalue");
        if (!e->ename)
            e->ename = xstrdup(ename ? ename : "Error");
        if (e->sink.on_error)
            e->sink.on_error(e->arg, ename ? ename : "Error", evalue ? evalue : "",
                             json_object_get(c, "traceback"));
    } else if (strcmp(type, "execute_input") == 0) {
        if (e->sink.on_count)
            e->sink.on_count(e->arg, json_integer_value(json_object_get(c, "execution_count")));
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

static void on_done(const json_t *reply, const sg_error_t *err, void *arg)
{
    exec_t *e = arg;
    if (e->env_restore) {
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(e->k, e->env_restore, &o, &(kernel_exec_cb_t){0}, NULL);
    }
    /* JSON_ALLOW_NUL: a command's output may hold NUL bytes (grep -Z, find
     * -print0), which the runner's JSON escapes as \u0000. */
    json_t *report = e->report ? json_loadb(e->report, e->report_len, JSON_ALLOW_NUL, NULL) : NULL;
    if (report && !json_is_object(report)) {
        json_decref(report);
        report = NULL;
    }
    exec_end_t end = {
        .reply = reply, .err = err, .report = report, .workspace = kernel_workspace(e->k)};
    end.artifacts = files_changed(kernel_workspace(e->k), EXEC_ARTIFACT_DIR, e->before);
    metrics.artifacts += json_array_size(end.artifacts);
    end.outcome = outcome_of(reply, err, e->opts.command ? report : NULL);
    end.duration_ms = zclock_mono() - e->started;
    metrics_execution(e->opts.command ? EXEC_COMMAND : EXEC_CODE, end.outcome,
                      (double)end.duration_ms / 1000.0);
    audit_end(e, outcome_names[end.outcome], end.duration_ms, report, err);
    if (e->sink.on_done)
        e->sink.on_done(e->arg, &end);
    json_decref(end.artifacts);
    json_decref(report);
    exec_free(e);
}

/* The audit log's "execute" or "command": what is about to run, and where. */
static void audit_start(const exec_t *e, const char *code)
{
    json_t *extra = json_object();
    if (json_object_size(e->opts.env)) { /* the names only: values may be secrets */
        json_t *names = json_array();
        const char *name;
        json_t *v;
        json_object_foreach ((json_t *)e->opts.env, name, v)
            json_array_append_new(names, json_string(name));
        json_object_set_new(extra, "env_vars", names);
    }
    audit_exec_t x = {.id = e->audit_id, .context = kernel_id(e->k), .command = e->opts.command};
    audit_execute(&e->opts.who, &x, kernel_spec(e->k)->language, code, strlen(code), extra);
}

exec_t *exec_start(kernel_t *k, const char *code, const exec_opts_t *opts, const exec_sink_t *sink,
                   void *arg, sg_error_t **err)
{
    exec_t *e = xzalloc(sizeof *e);
    e->k = k;
    e->opts = *opts;
    e->sink = *sink;
    e->arg = arg;
    e->started = zclock_mono();
    if (audit_enabled()) {
        e->audit_id = audit_next_execution();
        audit_start(e, code);
    }
    e->opts.env = NULL; /* borrowed for this call only */
    if (kernel_pending(k) >= (size_t)opts->max_queue) {
        sg_error_set(err, SG_E_CONFLICT,
                     "context %s already has %d executions waiting; try again later", kernel_id(k),
                     opts->max_queue);
        audit_end(e, "refused", 0, NULL, err ? *err : NULL);
        exec_free(e);
        return NULL;
    }
    e->before = files_snapshot(kernel_workspace(k), EXEC_ARTIFACT_DIR);
    bool python = strcmp(kernel_spec(k)->language, "python") == 0;
    if (json_object_size(opts->env) && python) {
        char *set = env_code(opts->env, false);
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, set, &o, &(kernel_exec_cb_t){0}, NULL);
        free(set);
        e->env_restore = env_code(opts->env, true);
    }
    kernel_exec_opts_t o = {
        .timeout_ms = opts->timeout_ms, .store_history = !opts->command, .silent = opts->command};
    char *run = opts->command ? command_code(code, opts->max_output) : xstrdup(code);
    e->id = kernel_execute(
        k, run, &o, &(kernel_exec_cb_t){.on_output = on_output, .on_done = on_done, .arg = e}, err);
    free(run);
    if (e->id == 0) {
        if (e->env_restore) { /* the kernel is dead: nothing will run it */
            free(e->env_restore);
            e->env_restore = NULL;
        }
        audit_end(e, "refused", 0, NULL, err ? *err : NULL);
        exec_free(e);
        return NULL;
    }
    return e;
}

void exec_cancel(exec_t **e_p, const char *why)
{
    exec_t *e = *e_p;
    if (e == NULL)
        return;
    *e_p = NULL;
    log_info("%s; interrupting its execution on %s", why, kernel_id(e->k));
    kernel_forget(e->k, e->id);
    kernel_interrupt(e->k, NULL);
    if (e->env_restore) {
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(e->k, e->env_restore, &o, &(kernel_exec_cb_t){0}, NULL);
    }
    int64_t ms = zclock_mono() - e->started;
    metrics_execution(e->opts.command ? EXEC_COMMAND : EXEC_CODE, OUTCOME_CANCELLED,
                      (double)ms / 1000.0);
    audit_end(e, outcome_names[OUTCOME_CANCELLED], ms, NULL, NULL);
    exec_free(e);
}

void exec_detach(exec_t **e_p)
{
    exec_t *e = *e_p;
    if (e == NULL)
        return;
    *e_p = NULL;
    kernel_forget(e->k, e->id);
    audit_end(e, "detached", zclock_mono() - e->started, NULL, NULL);
    exec_free(e);
}

kernel_t *exec_kernel(const exec_t *e)
{
    return e->k;
}
