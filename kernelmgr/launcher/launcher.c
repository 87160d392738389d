#include "kernelmgr/launcher/internal.h"

#include <ctype.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "kernelmgr/egress/egress.h"

#define PACKET_MAX (256 * 1024) /* one request or reply */

bool launcher_valid_uuid(const char *s)
{
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        if (shape[i] == '-' ? s[i] != '-' : !isxdigit((unsigned char)s[i]) || isupper(s[i]))
            return false;
    }
    return s[sizeof shape - 1] == 0;
}

bool launcher_valid_sandbox_id(const char *s)
{
    if (strlen(s) < 38 || s[36] != '-' || strlen(s) > 36 + 1 + 6)
        return false;
    char uuid[37];
    memcpy(uuid, s, 36);
    uuid[36] = 0;
    for (const char *p = s + 37; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return launcher_valid_uuid(uuid);
}

bool launcher_valid_tenant(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 63 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* --- replies -------------------------------------------------------------------------- */

static void send_reply(launcher_t *L, json_t *reply)
{
    cleanup_free char *text = json_dumps(reply, JSON_COMPACT);
    json_decref(reply);
    if (!text)
        log_warn("launcher: cannot answer: unencodable");
    else if (send(L->fd, text, strlen(text), MSG_NOSIGNAL) < 0 && errno != EPIPE &&
             errno != ECONNRESET)
        log_warn("launcher: cannot answer: %s", strerror(errno));
    /* EPIPE, ECONNRESET: the daemon closed the link.  A stopping daemon sends its last
     * requests (forget a sandbox, remove the pool's) without waiting for the
     * answers, and closes the link; they are carried out all the same, and
     * the hang-up, read after them, ends this loop. */
}

void launcher_reply_ok(launcher_t *L, json_int_t seq, json_t *fields)
{
    json_t *r = fields ? fields : json_object();
    json_object_set_new(r, "seq", json_integer(seq));
    send_reply(L, r);
}

void launcher_reply_err(launcher_t *L, json_int_t seq, const sg_error_t *err)
{
    cleanup_free char *msg = xstrdup(err->msg);
    utf8_scrub(msg);
    send_reply(L, json_pack("{s:I, s:{s:i, s:s}}", "seq", seq, "error", "kind", (int)err->kind,
                            "message", msg));
}

void launcher_refuse(launcher_t *L, json_int_t seq, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cleanup_free char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    log_warn("launcher: refused a request: %s", msg);
    launcher_reply_err(L, seq, &(sg_error_t){.kind = SG_E_INVALID, .msg = msg});
}

static json_t *conn_json(const jconn_t *c)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s}", "transport",
                     c->transport, "ip", c->ip, "shell_port", c->ports[JCHAN_SHELL], "iopub_port",
                     c->ports[JCHAN_IOPUB], "stdin_port", c->ports[JCHAN_STDIN], "control_port",
                     c->ports[JCHAN_CONTROL], "hb_port", c->ports[JCHAN_HB], "key", c->key,
                     "signature_scheme", c->signature_scheme, "kernel_name", c->kernel_name);
}

/* --- operations -------------------------------------------------------------------------
 * One handler per operation of launcher_ops (launcher_handlers, below);
 * dispatch() has already checked what the operation's flags ask for. */

/* An answer that comes later: the request it answers. */
typedef struct {
    launcher_t *L;
    json_int_t seq;
} later_t;

static later_t *later(launcher_t *L, json_int_t seq)
{
    later_t *st = xzalloc(sizeof *st);
    *st = (later_t){L, seq};
    return st;
}

static void on_started(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg)
{
    cleanup_free later_t *st = arg;
    if (pid > 0)
        launcher_reply_ok(st->L, st->seq, json_pack("{s:i}", "pid", (int)pid));
    else
        launcher_reply_err(st->L, st->seq, err);
    sg_error_free(&err);
}

static void on_paused(sandbox_t *sb, uint64_t bytes, sg_error_t *err, bool alive, void *arg)
{
    cleanup_free later_t *st = arg;
    if (err) {
        cleanup_free char *msg = xstrdup(err->msg);
        utf8_scrub(msg);
        send_reply(st->L, json_pack("{s:I, s:{s:i, s:s}, s:b}", "seq", st->seq, "error", "kind",
                                    (int)err->kind, "message", msg, "alive", alive));
    } else {
        launcher_reply_ok(st->L, st->seq, json_pack("{s:I}", "bytes", (json_int_t)bytes));
    }
    sg_error_free(&err);
}

static void on_refused(const json_t *counts, const sg_error_t *err, void *arg)
{
    cleanup_free later_t *st = arg;
    if (counts)
        launcher_reply_ok(st->L, st->seq, json_pack("{s:O}", "counts", counts));
    else
        launcher_reply_err(st->L, st->seq, err);
}

static void on_tail(const char *tail, void *arg)
{
    cleanup_free later_t *st = arg;
    cleanup_free char *text = xstrdup(tail);
    utf8_scrub(text);
    launcher_reply_ok(st->L, st->seq, json_pack("{s:s}", "text", text));
}

/* An answer that is only whether it worked (workspace_restore, egress_rules). */
static void on_done(const sg_error_t *err, void *arg)
{
    cleanup_free later_t *st = arg;
    if (err)
        launcher_reply_err(st->L, st->seq, err);
    else
        launcher_reply_ok(st->L, st->seq, NULL);
}

/* {id, allow, deny, transforms?}: a sandbox's own egress rules
 * (sandbox_set_egress checks them and that it has a network). */
static void op_egress_rules(launcher_t *L, const launcher_req_t *r)
{
    json_t *allow = json_object_get(r->body, "allow"), *deny = json_object_get(r->body, "deny");
    json_t *transforms = json_object_get(r->body, "transforms");
    if (!json_is_string(allow) || !json_is_string(deny) ||
        (transforms && !json_is_string(transforms))) {
        launcher_refuse(L, r->seq, "egress_rules: allow, deny and transforms must be strings");
        return;
    }
    sandbox_set_egress(r->sb, json_string_value(allow), json_string_value(deny),
                       json_string_value(transforms), on_done, later(L, r->seq));
}

static void op_env(launcher_t *L, const launcher_req_t *r)
{
    if (L->env_err)
        launcher_reply_err(L, r->seq, L->env_err);
    else
        launcher_reply_ok(L, r->seq, NULL);
}

static void op_list(launcher_t *L, const launcher_req_t *r)
{
    cleanup_error sg_error_t *err = NULL;
    json_t *ids = sandbox_list(L->env, &err);
    if (!ids)
        launcher_reply_err(L, r->seq, err);
    else
        launcher_reply_ok(L, r->seq, json_pack("{s:o}", "ids", ids));
}

static void op_egress_refused(launcher_t *L, const launcher_req_t *r)
{
    sandbox_egress_refused(L->env, on_refused, later(L, r->seq));
}

/* new and adopt: a sandbox the launcher holds from now on. */
static void made(launcher_t *L, const launcher_req_t *r, sandbox_t *sb, sg_error_t *err)
{
    if (!sb) {
        launcher_reply_err(L, r->seq, err);
        return;
    }
    zhashx_insert(L->sandboxes, r->id, sb);
    const char *cgroup = sandbox_cgroup(sb);
    launcher_reply_ok(
        L, r->seq, json_pack("{s:o, s:s?}", "conn", conn_json(sandbox_conn(sb)), "cgroup", cgroup));
}

static void op_new(launcher_t *L, const launcher_req_t *r)
{
    const char *name = json_string_value(json_object_get(r->body, "kernelspec"));
    const kspec_t *spec = name ? kspecs_get(L->kspecs, name) : NULL;
    const char *ws = json_string_value(json_object_get(r->body, "workspace"));
    const char *uuid;
    if (r->sb) {
        launcher_refuse(L, r->seq, "new: sandbox %s is already known", r->id);
        return;
    }
    if (!spec) {
        launcher_refuse(L, r->seq, "new: no kernelspec '%.64s'", name ? name : "");
        return;
    }
    if (!launcher_valid_workspace(L, ws, &uuid) || strncmp(uuid, r->id, 36) != 0) {
        launcher_refuse(L, r->seq, "new: the workspace is not the sandbox's own");
        return;
    }
    json_t *tenant = json_object_get(r->body, "tenant");
    json_t *memory = json_object_get(r->body, "memory");
    json_t *cpu = json_object_get(r->body, "cpu_quota");
    if (tenant && !json_is_null(tenant) &&
        !(json_is_string(tenant) && launcher_valid_tenant(json_string_value(tenant)))) {
        launcher_refuse(L, r->seq, "new: not a tenant's name");
        return;
    }
    /* A tenant's ceilings: 0 (the server's), else at least what the keys
     * file allows; sandbox_new keeps the lower of each and the server's. */
    json_int_t mem = json_integer_value(memory), quota = json_integer_value(cpu);
    if ((memory && !json_is_integer(memory)) || (cpu && !json_is_integer(cpu)) || mem < 0 ||
        (mem > 0 && mem < (64 << 20)) || quota < 0 || (quota > 0 && quota < 1000)) {
        launcher_refuse(L, r->seq,
                        "new: memory must be 0 or 64 MiB or more, cpu_quota 0 or 1000 or more");
        return;
    }
    json_t *snapshot = json_object_get(r->body, "snapshot");
    if (snapshot && !json_is_null(snapshot) &&
        !(json_is_string(snapshot) && launcher_valid_uuid(json_string_value(snapshot)))) {
        launcher_refuse(L, r->seq, "new: not a snapshot's id");
        return;
    }
    /* Only a configured template's name (sandbox_new refuses others). */
    json_t *template = json_object_get(r->body, "template");
    if (template && !json_is_null(template) && !json_is_string(template)) {
        launcher_refuse(L, r->seq, "new: not a template's name");
        return;
    }
    cleanup_error sg_error_t *err = NULL;
    const char *allow = json_string_value(json_object_get(r->body, "allow"));
    const char *deny = json_string_value(json_object_get(r->body, "deny"));
    const char *transforms = json_string_value(json_object_get(r->body, "transforms"));
    if (sandbox_check_egress(allow, deny, transforms, &err) < 0) {
        launcher_reply_err(L, r->seq, err);
        return;
    }
    json_t *mounts = json_object_get(r->body, "mounts"); /* sandbox_new checks them */
    sandbox_opts_t o = {.internet = json_is_true(json_object_get(r->body, "internet")),
                        .tenant = json_string_value(tenant),
                        .memory_bytes = (uint64_t)mem,
                        .cpu_quota_us = (uint64_t)quota,
                        .snapshot = json_string_value(snapshot),
                        .template = json_string_value(template),
                        .egress_allow = allow,
                        .egress_deny = deny,
                        .egress_transforms = transforms,
                        .mounts = json_is_null(mounts) ? NULL : mounts};
    sandbox_t *sb = sandbox_new(L->env, r->id, spec, &o, ws, &err);
    made(L, r, sb, err); /* not in one call: err is read after sandbox_new sets it */
}

static void op_adopt(launcher_t *L, const launcher_req_t *r)
{
    json_int_t pid = json_integer_value(json_object_get(r->body, "pid"));
    if (r->sb) {
        launcher_refuse(L, r->seq, "adopt: sandbox %s is already known", r->id);
        return;
    }
    if ((pid <= 1 && pid != 0) || pid > 1 << 22) /* 0: paused */
    {
        launcher_refuse(L, r->seq, "adopt: not a pid");
        return;
    }
    cleanup_error sg_error_t *err = NULL;
    sandbox_t *sb = sandbox_adopt(L->env, r->id, (pid_t)pid, &err);
    made(L, r, sb, err); /* not in one call: err is read after sandbox_adopt sets it */
}

static void op_remove(launcher_t *L, const launcher_req_t *r)
{
    bool wait = json_is_true(json_object_get(r->body, "wait"));
    if (r->sb) {
        sandbox_remove(r->sb, wait);
        zhashx_delete(L->sandboxes, r->id);
    } else {
        sandbox_remove_id(L->env, r->id, wait);
    }
    launcher_reply_ok(L, r->seq, NULL);
}

static void op_log(launcher_t *L, const launcher_req_t *r)
{
    json_int_t max = json_integer_value(json_object_get(r->body, "max"));
    if (max <= 0 || max > 65536) {
        launcher_refuse(L, r->seq, "log: max must be in (0, 65536]");
        return;
    }
    if (!r->sb) {
        on_tail("", later(L, r->seq));
        return;
    }
    sandbox_log_tail(r->sb, (size_t)max, on_tail, later(L, r->seq));
}

/* The keys file named when the launcher was forked (the daemon can name no
 * other), for a daemon without root to read it again at SIGHUP: its text,
 * mode and owner, which the daemon checks as it checks the file at start
 * (gateway/auth/keys.h).  At most 16 MiB. */
static char *read_keys(const char *path, struct stat *st, ssize_t *n, sg_error_t **err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 || fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_size > (16 << 20)) {
        sg_error_errno(err, fd < 0 ? errno : EINVAL, "cannot read keys file %s", path);
        return NULL;
    }
    char *text = xmalloc((size_t)st->st_size + 1);
    *n = read(fd, text, (size_t)st->st_size);
    if (*n < 0 || memchr(text, 0, (size_t)*n)) {
        free(text);
        sg_error_set(err, SG_E_INVALID, "keys file %s is not a text file", path);
        return NULL;
    }
    text[*n] = 0;
    return text;
}

static void op_keys(launcher_t *L, const launcher_req_t *r)
{
    const char *path = L->cfg->keys_file;
    if (!path) {
        launcher_refuse(L, r->seq, "keys: no --keys-file was given");
        return;
    }
    struct stat st;
    ssize_t n = 0;
    cleanup_error sg_error_t *err = NULL;
    cleanup_free char *text = read_keys(path, &st, &n, &err);
    if (!text) {
        launcher_reply_err(L, r->seq, err);
        return;
    }
    /* The tenants' egress limits, which this process applies (egress.h). */
    cleanup_free char *kernels = xasprintf("%s/kernels", L->cfg->state_dir);
    egress_tenant_limits(text, kernels);
    launcher_reply_ok(L, r->seq,
                      json_pack("{s:s%, s:i, s:i}", "text", text, (size_t)n, "mode",
                                (int)(st.st_mode & 07777), "uid", (int)st.st_uid));
}

/* A pool kernel claimed by a tenant: its sandbox joins the tenant's cgroup
 * (sandbox_set_tenant logs what fails; the answer says done). */
static void op_tenant(launcher_t *L, const launcher_req_t *r)
{
    const char *tenant = json_string_value(json_object_get(r->body, "tenant"));
    if (!tenant || !launcher_valid_tenant(tenant)) {
        launcher_refuse(L, r->seq, "tenant: not a tenant's name");
        return;
    }
    sandbox_set_tenant(r->sb, tenant);
    launcher_reply_ok(L, r->seq, NULL);
}

/* Also after remove, which forgot it already. */
static void op_free(launcher_t *L, const launcher_req_t *r)
{
    zhashx_delete(L->sandboxes, r->id);
    launcher_reply_ok(L, r->seq, NULL);
}

/* start, pause and resume answer when runsc is done. */
static void op_start(launcher_t *L, const launcher_req_t *r)
{
    cleanup_error sg_error_t *err = NULL;
    later_t *st = later(L, r->seq);
    if (sandbox_start(r->sb, on_started, st, &err) < 0) {
        free(st);
        launcher_reply_err(L, r->seq, err);
    }
}

static void op_pause(launcher_t *L, const launcher_req_t *r)
{
    cleanup_error sg_error_t *err = NULL;
    later_t *st = later(L, r->seq);
    bool live = json_is_true(json_object_get(r->body, "leave_running"));
    if ((live ? sandbox_save_live : sandbox_pause)(r->sb, on_paused, st, &err) < 0) {
        free(st);
        launcher_reply_err(L, r->seq, err);
    }
}

static void op_reattach(launcher_t *L, const launcher_req_t *r)
{
    sandbox_reattach(r->sb);
    launcher_reply_ok(L, r->seq, NULL);
}

static void op_resume(launcher_t *L, const launcher_req_t *r)
{
    cleanup_error sg_error_t *err = NULL;
    later_t *st = later(L, r->seq);
    if (sandbox_resume(r->sb, on_started, st, &err) < 0) {
        free(st);
        launcher_reply_err(L, r->seq, err);
    }
}

/* The snapshot's id a request names: a UUID, else NULL after refusing it. */
static const char *snapshot_id(launcher_t *L, const launcher_req_t *r)
{
    const char *sid = json_string_value(json_object_get(r->body, "snapshot"));
    if (!sid || !launcher_valid_uuid(sid)) {
        launcher_refuse(L, r->seq, "not a snapshot's id");
        return NULL;
    }
    return sid;
}

static void on_saved(uint64_t bytes, const sg_error_t *err, void *arg)
{
    cleanup_free later_t *st = arg;
    if (err)
        launcher_reply_err(st->L, st->seq, err);
    else
        launcher_reply_ok(st->L, st->seq, json_pack("{s:I}", "bytes", (json_int_t)bytes));
}

static void op_snapshot_save(launcher_t *L, const launcher_req_t *r)
{
    const char *sid = snapshot_id(L, r);
    if (sid)
        sandbox_snapshot_save(r->sb, sid, on_saved, later(L, r->seq));
}

static void op_snapshot_transfer(launcher_t *L, const launcher_req_t *r)
{
    const char *sid = snapshot_id(L, r);
    if (sid)
        sandbox_snapshot_transfer(L->env, sid, json_is_true(json_object_get(r->body, "import")),
                                  on_saved, later(L, r->seq));
}

static void op_snapshot_delete(launcher_t *L, const launcher_req_t *r)
{
    const char *sid = snapshot_id(L, r);
    if (!sid)
        return;
    sandbox_snapshot_delete(L->env, sid);
    launcher_reply_ok(L, r->seq, NULL);
}

static void op_workspace_restore(launcher_t *L, const launcher_req_t *r)
{
    const char *uuid, *sid = snapshot_id(L, r);
    if (sid && !launcher_valid_workspace(L, r->path, &uuid))
        launcher_refuse(L, r->seq, "workspace_restore: not a workspace path");
    else if (sid)
        sandbox_workspace_restore_async(L->env, r->path, sid, on_done, later(L, r->seq));
}

static void op_signal(launcher_t *L, const launcher_req_t *r)
{
    json_int_t sig = json_integer_value(json_object_get(r->body, "sig"));
    if (sig != SIGINT && sig != SIGTERM && sig != SIGKILL) {
        launcher_refuse(L, r->seq, "signal: only INT, TERM and KILL");
        return;
    }
    cleanup_error sg_error_t *err = NULL;
    if (sandbox_signal(r->sb, (int)sig, &err) < 0)
        launcher_reply_err(L, r->seq, err);
    else
        launcher_reply_ok(L, r->seq, NULL);
}

/* A command's end: its exit status, for the request that started it. */
typedef struct {
    launcher_t *L;
    json_int_t seq;
    char *key; /* in L->execs */
} exec_later_t;

static void on_exec_done(int status, const sg_error_t *err, void *arg)
{
    exec_later_t *st = arg;
    zhashx_delete(st->L->execs, st->key);
    if (err)
        launcher_reply_err(st->L, st->seq, err);
    else
        launcher_reply_ok(st->L, st->seq, json_pack("{s:i}", "status", status));
    free(st->key);
    free(st);
}

/* A JSON array of strings as a NULL-terminated array (borrowed strings);
 * NULL when it is not one (absent and not required: an empty one). */
static const char **string_array(json_t *a, bool required)
{
    if (!a && !required)
        return xzalloc(sizeof(char *));
    if (!json_is_array(a) || json_array_size(a) > 4096)
        return NULL;
    const char **v = xzalloc((json_array_size(a) + 1) * sizeof *v);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!(v[i] = json_string_value(json_array_get(a, i)))) {
            free(v);
            return NULL;
        }
    return v;
}

/* A command in a running sandbox, as the sandbox user, its stdio the three
 * fds sent (sandbox_exec checks argv, env and cwd); answered when it ends. */
static void op_exec(launcher_t *L, const launcher_req_t *r)
{
    cleanup_free const char **argv = string_array(json_object_get(r->body, "argv"), true);
    cleanup_free const char **env = string_array(json_object_get(r->body, "env"), false);
    json_t *cwd = json_object_get(r->body, "cwd");
    if (!argv || !env || (cwd && !json_is_string(cwd))) {
        launcher_refuse(L, r->seq, "exec: argv and env must be arrays of strings, cwd a string");
        return;
    }
    sandbox_exec_t x = {.argv = argv, .env = env, .cwd = json_string_value(cwd)};
    exec_later_t *st = xzalloc(sizeof *st);
    *st = (exec_later_t){L, r->seq, xasprintf("%s/%lld", r->id, (long long)r->seq)};
    cleanup_error sg_error_t *err = NULL;
    uint64_t h = sandbox_exec(r->sb, &x, r->fds, on_exec_done, st, &err);
    if (h == 0) {
        free(st->key);
        free(st);
        launcher_reply_err(L, r->seq, err);
        return;
    }
    zhashx_insert(L->execs, st->key, (void *)(uintptr_t)h);
}

/* {id, exec: the seq of its exec request, sig}. */
static void op_exec_signal(launcher_t *L, const launcher_req_t *r)
{
    cleanup_free char *key = xasprintf(
        "%s/%lld", r->id, (long long)json_integer_value(json_object_get(r->body, "exec")));
    uintptr_t h = (uintptr_t)zhashx_lookup(L->execs, key);
    json_int_t sig = json_integer_value(json_object_get(r->body, "sig"));
    cleanup_error sg_error_t *err = NULL;
    if (h && sandbox_exec_signal(r->sb, h, (int)sig, &err) < 0)
        launcher_reply_err(L, r->seq, err);
    else
        launcher_reply_ok(L, r->seq, NULL);
}

static void on_exec_pid(long pid, void *arg)
{
    cleanup_free later_t *st = arg;
    launcher_reply_ok(st->L, st->seq, json_pack("{s:I}", "pid", (json_int_t)pid));
}

/* {id, exec: the seq of its exec} -> {pid}: 0 not yet, -1 ended. */
static void op_exec_pid(launcher_t *L, const launcher_req_t *r)
{
    cleanup_free char *key = xasprintf(
        "%s/%lld", r->id, (long long)json_integer_value(json_object_get(r->body, "exec")));
    uintptr_t h = (uintptr_t)zhashx_lookup(L->execs, key);
    if (!h)
        on_exec_pid(-1, later(L, r->seq));
    else
        sandbox_exec_pid(r->sb, h, on_exec_pid, later(L, r->seq));
}

launcher_handler_fn *const launcher_handlers[LOP_COUNT] = {
    [LOP_ENV] = op_env,
    [LOP_WORKSPACE_OPEN] = launcher_op_workspace_open,
    [LOP_WORKSPACE_CLOSE] = launcher_op_workspace_close,
    [LOP_NEW] = op_new,
    [LOP_ADOPT] = op_adopt,
    [LOP_START] = op_start,
    [LOP_PAUSE] = op_pause,
    [LOP_REATTACH] = op_reattach,
    [LOP_RESUME] = op_resume,
    [LOP_SIGNAL] = op_signal,
    [LOP_REMOVE] = op_remove,
    [LOP_FREE] = op_free,
    [LOP_LIST] = op_list,
    [LOP_LOG] = op_log,
    [LOP_EGRESS_REFUSED] = op_egress_refused,
    [LOP_EGRESS_RULES] = op_egress_rules,
    [LOP_GIVE] = launcher_op_give,
    [LOP_KEYS] = op_keys,
    [LOP_TENANT] = op_tenant,
    [LOP_EXEC] = op_exec,
    [LOP_EXEC_SIGNAL] = op_exec_signal,
    [LOP_EXEC_PID] = op_exec_pid,
    [LOP_SNAPSHOT_SAVE] = op_snapshot_save,
    [LOP_SNAPSHOT_DELETE] = op_snapshot_delete,
    [LOP_WORKSPACE_RESTORE] = op_workspace_restore,
    [LOP_SNAPSHOT_TRANSFER] = op_snapshot_transfer,
};

/* Checks what op's flags ask of a request, then calls its handler. */
static void dispatch(launcher_t *L, json_t *body, const int *fds, int nfds)
{
    launcher_req_t r = {
        .seq = json_integer_value(json_object_get(body, "seq")), .body = body, .fd = -1};
    const char *name = json_string_value(json_object_get(body, "op"));
    int op = launcher_op_find(name);
    if (op < 0) {
        launcher_refuse(L, r.seq, "unknown op '%.32s'", name ? name : "");
        return;
    }
    const launcher_op_desc_t *d = &launcher_ops[op];
    int want = (d->flags & LOP_TAKES_FD) ? 1 : (d->flags & LOP_TAKES_STDIO) ? 3 : 0;
    if (nfds != want) {
        launcher_refuse(L, r.seq, "%s: %d file descriptors expected, %d sent", d->name, want, nfds);
        return;
    }
    if (want == 1)
        r.fd = fds[0];
    for (int i = 0; want == 3 && i < 3; i++)
        r.fds[i] = fds[i];
    if ((d->flags & LOP_NEEDS_ENV) && !L->env) {
        launcher_reply_err(L, r.seq, L->env_err);
        return;
    }
    r.path = json_string_value(json_object_get(body, "path"));
    if ((d->flags & LOP_TAKES_PATH) && !launcher_valid_path(L, r.path, &r.uuid)) {
        launcher_refuse(L, r.seq, "%s: not a workspace path", d->name);
        return;
    }
    r.id = json_string_value(json_object_get(body, "id"));
    if ((d->flags & LOP_TAKES_ID) && !(r.id && launcher_valid_sandbox_id(r.id))) {
        launcher_refuse(L, r.seq, "%s: not a sandbox id", d->name);
        return;
    }
    r.sb = r.id ? zhashx_lookup(L->sandboxes, r.id) : NULL;
    if ((d->flags & LOP_TAKES_SANDBOX) && !r.sb) {
        launcher_refuse(L, r.seq, "%s: no sandbox %s", d->name, r.id);
        return;
    }
    launcher_handlers[op](L, &r);
}

static void on_request(loop_t *loop, int fd, unsigned events, void *arg)
{
    launcher_t *L = arg;
    static char buf[PACKET_MAX + 1];
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    ssize_t n = recvmsg(L->fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) { /* the daemon is gone: so are we (the sandboxes stay) */
        loop_stop(loop);
        return;
    }
    int fds[4], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < 4; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    json_t *req = n <= PACKET_MAX ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
    if (n > PACKET_MAX)
        launcher_refuse(L, 0, "a request of %zd bytes", n);
    else if (!json_is_object(req))
        launcher_refuse(L, json_integer_value(json_object_get(req, "seq")), "not a JSON object");
    else
        dispatch(L, req, fds, nfds);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    json_decref(req);
}

/* The state directory as the two halves share it: the daemon owns its
 * records; the workspaces' parent lets the sandbox group list it. */
static int prepare(launcher_t *L, sg_error_t **err)
{
    struct stat st;
    ssize_t n;
    cleanup_free char *keys =
        L->cfg->keys_file ? read_keys(L->cfg->keys_file, &st, &n, NULL) : NULL;
    egress_tenant_limits(keys, NULL); /* before the sandboxes' rules are applied */
    L->env = sandbox_env_new(&L->cfg->sandbox, L->cfg->state_dir, err);
    if (!L->env)
        return -1;
    static const struct {
        const char *name;
        mode_t mode;
        bool daemons;
    } dirs[] = {{"sessions", 0700, true},    {"mcp", 0700, true},
                {"contexts", 0700, true},    {"snapshots", 0700, true},
                {"secrets", 0700, true},     {"snapshot-images", 0700, false},
                {"workspaces", 0750, false}, {"volumes", 0750, false},
                {"transfers", 0700, true},   {"sealing", 0700, false}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        cleanup_free char *p = xasprintf("%s/%s", L->cfg->state_dir, dirs[i].name);
        if ((mkdir(p, dirs[i].mode) < 0 && errno != EEXIST) ||
            chown(p, dirs[i].daemons ? L->cfg->uid : 0, L->cfg->gid) < 0 ||
            chmod(p, dirs[i].mode) < 0)
            return sg_error_errno(err, errno, "preparing %s", p);
        if (dirs[i].daemons) { /* records an earlier, unseparated sandgate wrote */
            const char *argv[] = {"/bin/chown", "-R", NULL, p, NULL};
            cleanup_free char *owner = xasprintf("%u:%u", L->cfg->uid, L->cfg->gid);
            argv[2] = owner;
            proc_run_sync(argv, NULL, NULL);
        }
    }
    return 0;
}

static void sandbox_free_fn(void **item)
{
    sandbox_free((sandbox_t **)item);
}

int launcher_serve(const launcher_config_t *cfg, int fd)
{
    launcher_t L = {.cfg = cfg, .fd = fd};
    L.loop = loop_new();
    L.sandboxes = zhashx_new();
    L.execs = zhashx_new();
    zhashx_set_destructor(L.sandboxes, sandbox_free_fn);
    L.workspaces = xasprintf("%s/workspaces", cfg->state_dir);
    L.volumes = xasprintf("%s/volumes", cfg->state_dir);
    sg_error_t *err = NULL;
    if (proc_init(L.loop, &err) < 0 || prepare(&L, &err) < 0) {
        log_error("launcher: %s", err->msg);
        L.env_err = err;
        err = NULL;
        sandbox_env_destroy(&L.env);
    }
    L.kspecs = kspecs_discover(cfg->kernelspec_path);
    /* A hang-up reaches on_request, which ends the loop: the daemon, not a
     * signal, ends us. */
    if (!loop_fd_add(L.loop, fd, LOOP_READ, on_request, &L, &err) || loop_run(L.loop, &err) < 0)
        log_error("launcher: %s", err->msg);
    sg_error_free(&err);
    zhashx_destroy(&L.sandboxes); /* handles only: the sandboxes keep running */
    zhashx_destroy(&L.execs);
    kspecs_destroy(&L.kspecs);
    sandbox_env_destroy(&L.env);
    sg_error_free(&L.env_err);
    proc_fini();
    loop_destroy(&L.loop);
    free(L.workspaces);
    free(L.volumes);
    return 0;
}

int launcher_fork(const launcher_config_t *cfg, pid_t *pid, sg_error_t **err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return sg_error_errno(err, errno, "socketpair");
    int size = 4 * PACKET_MAX;
    for (int i = 0; i < 2; i++) {
        setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    pid_t child = fork();
    if (child < 0)
        return sg_error_errno(err, errno, "fork");
    if (child == 0) {
        close(sv[0]);
        /* Ctrl-C reaches the whole process group: the daemon decides. */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN); /* the daemon's (the audit log's rotation) */
        prctl(PR_SET_NAME, "sandgate-priv");
        zsys_init();
        zsys_handler_set(NULL);
        launcher_serve(cfg, sv[1]);
        _exit(0);
    }
    close(sv[1]);
    *pid = child;
    return sv[0];
}

int launcher_drop_privileges(const launcher_config_t *cfg, sg_error_t **err)
{
    gid_t groups[] = {cfg->gid};
    if (setgroups(1, groups) < 0 || setresgid(cfg->gid, cfg->gid, cfg->gid) < 0 ||
        setresuid(cfg->uid, cfg->uid, cfg->uid) < 0)
        return sg_error_errno(err, errno, "dropping privileges to %u:%u", cfg->uid, cfg->gid);
    if (setuid(0) == 0 || seteuid(0) == 0)
        return sg_error_set(err, SG_E_INTERNAL, "root could be regained after dropping it");
#if defined(__SANITIZE_ADDRESS__)
    /* Changing uid made us undumpable; LeakSanitizer's exit check ptraces us. */
    prctl(PR_SET_DUMPABLE, 1);
#endif
    umask(007); /* the sandbox group reads and writes what the API writes */
    return 0;
}
