/* e2b: E2B's sandbox API — the control plane E2B's SDKs call to create,
 * find, connect to, pause, time out and kill sandboxes — over sandgate's
 * contexts, so that the SDKs work unchanged with E2B_API_URL and
 * E2B_SANDBOX_URL set to sandgate's URL and E2B_API_KEY to a key of it.
 *
 * An E2B sandbox is a context here: the first context of a gVisor sandbox
 * (its id is the sandbox id the SDK sends as E2b-Sandbox-Id to envd and to
 * the code interpreter, both served at the same URL); the code contexts
 * create_code_context makes are kernels in the same sandbox (rest.c's
 * POST /contexts with that header), not sandboxes of their own.  What E2B adds to a
 * context lives in its record (api_t's contexts, "e2b"): the template
 * asked for, metadata, start and end times, what its timeout does.  A
 * sandbox's timeout kills it, or with autoPause pauses it; connect
 * resumes it and sets a new end; a snapshot is sandgate's (a template id
 * naming one, by id or name, starts a sandbox from it); a fork is a
 * snapshot and sandboxes made from it.  Errors have E2B's shape, {"code",
 * "message"}, so the SDKs raise their own exceptions.  docs/clients.md
 * has what is served and what is not. */
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/internal.h"

/* The envd protocol version sandgate's envd speaks as far as the SDKs'
 * feature checks go (E2B's SDKs compare it before using newer calls). */
#define E2B_ENVD_VERSION "0.6.4"
#define E2B_DEFAULT_TIMEOUT_S 300
#define E2B_MAX_TIMEOUT_S (24 * 3600)
#define E2B_TICK_MS 1000

/* Templates every E2B SDK names by default: sandgate's default context. */
static bool default_template(const char *t)
{
    return t == NULL || strcmp(t, "base") == 0 || strcmp(t, "code-interpreter-v1") == 0 ||
           strcmp(t, "code-interpreter") == 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- replies in E2B's shape -------------------------------------------------------- */

static enum MHD_Result e2b_reply(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    return http_reply_json(conn, status, json_pack("{s:i, s:s}", "code", status, "message", msg));
}

/* *err (freed) in E2B's shape; a quota's 429 also names it ("quota", "limit"). */
static enum MHD_Result e2b_error(struct MHD_Connection *conn, sg_error_t **err)
{
    enum MHD_Result ret = http_reply_code_error(conn, *err);
    sg_error_free(err);
    return ret;
}

/* --- a sandbox's record ------------------------------------------------------------ */

/* k's record, made for a context that was not made as an E2B sandbox. */
static json_t *e2b_record(api_t *self, kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    json_t *e = json_object_get(meta, "e2b");
    if (e == NULL && meta) {
        e = json_pack("{s:s, s:{}, s:I, s:I, s:b}", "templateID", "base", "metadata", "startedAt",
                      (json_int_t)now_ms(), "endAt", (json_int_t)0, "autoPause", false);
        json_object_set_new(meta, "e2b", e);
    }
    return e;
}

static const char *e2b_state(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    return st == KERNEL_PAUSED || st == KERNEL_PAUSING || kernel_pause_pending(k) ? "paused"
                                                                                  : "running";
}

/* E2B's Sandbox (what create and connect answer); detail adds the rest of
 * SandboxDetail / ListedSandbox; tokens: envdAccessToken and
 * trafficAccessToken, both the sandbox's own token (e2bauth.c), which the
 * SDK sends back to envd and the code interpreter (X-Access-Token,
 * E2B-Traffic-Access-Token) and signs its file URLs with. */
static json_t *sandbox_json(api_t *self, kernel_t *k, bool detail, bool tokens)
{
    json_t *e = e2b_record(self, k);
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:n}", "templateID",
                  json_string_value(json_object_get(e, "templateID")), "sandboxID", kernel_id(k),
                  "clientID", "sandgate", "envdVersion", E2B_ENVD_VERSION, "domain");
    if (tokens) {
        char token[E2B_TOKEN_SIZE];
        api_e2b_token(self, kernel_id(k), token);
        json_object_set_new(j, "envdAccessToken", json_string(token));
        json_object_set_new(j, "trafficAccessToken", json_string(token));
    }
    if (!detail)
        return j;
    const kernel_opts_t *o = kernel_opts(k);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t end = json_integer_value(json_object_get(e, "endAt"));
    json_object_set_new(j, "startedAt",
                        resp_iso_time(json_integer_value(json_object_get(e, "startedAt"))));
    json_object_set_new(j, "endAt",
                        resp_iso_time(end ? end : now_ms() + E2B_MAX_TIMEOUT_S * 1000LL));
    json_object_set_new(j, "cpuCount",
                        json_integer(o->cpu_quota_us
                                         ? (json_int_t)((o->cpu_quota_us + 99999) / 100000)
                                         : (json_int_t)cpus));
    json_object_set_new(j, "memoryMB", json_integer((json_int_t)(o->memory_bytes >> 20)));
    json_object_set_new(j, "diskSizeMB", json_integer(0));
    json_object_set_new(j, "state", json_string(e2b_state(k)));
    json_object_set(j, "metadata", json_object_get(e, "metadata"));
    api_e2b_network_json(j, e);
    return j;
}

/* --- timeouts ------------------------------------------------------------------------ */

static void on_tick(loop_t *loop, int timer_id, void *arg);

/* k's end: timeout_s from now. */
static void set_end(api_t *self, kernel_t *k, int64_t timeout_s)
{
    json_t *e = e2b_record(self, k);
    json_object_set_new(e, "endAt", json_integer((json_int_t)(now_ms() + timeout_s * 1000)));
    api_record_write(self, kernel_id(k));
    if (self->e2b_timer < 0)
        self->e2b_timer = loop_timer(self->loop, E2B_TICK_MS, 0, on_tick, self);
}

/* Sandboxes past their end are killed, or paused (autoPause). */
static void on_tick(loop_t *loop, int timer_id, void *arg)
{
    api_t *self = arg;
    int64_t now = now_ms();
    int pending = 0;
    const char *id;
    json_t *meta;
    void *tmp;
    json_object_foreach_safe(self->contexts, tmp, id, meta)
    {
        json_t *e = json_object_get(meta, "e2b");
        int64_t end = json_integer_value(json_object_get(e, "endAt"));
        kernel_t *k = end ? kmgr_get(self->kmgr, id) : NULL;
        if (k == NULL || kernel_state(k) == KERNEL_PAUSED)
            continue;
        if (end > now) {
            pending++;
            continue;
        }
        audit_who_t who = {.frontend = "e2b"};
        snprintf(who.tenant, sizeof who.tenant, "%s", kernel_owner(k));
        if (json_is_true(json_object_get(e, "autoPause"))) {
            sg_error_t *err = NULL;
            bool cold = json_is_false(json_object_get(e, "autoPauseMemory"));
            if ((cold ? kernel_pause_cold : kernel_pause)(k, &err) < 0) { /* busy: next tick */
                log_debug("e2b: sandbox %s timed out, cannot pause yet: %s", id, err->msg);
                sg_error_free(&err);
                pending++;
                continue;
            }
            log_info("e2b: sandbox %s timed out: pausing it (autoPause%s)", id,
                     cold ? ", without its memory" : "");
            audit_event(&who, "sandbox.timeout",
                        json_pack("{s:s, s:s}", "context", id, "action", "pause"));
            /* No end while paused: connect gives it one (a sandbox woken by
             * other use runs until sandgate's own idle rules pause it). */
            json_object_set_new(e, "endAt", json_integer(0));
            api_record_write(self, id);
        } else {
            log_info("e2b: sandbox %s timed out: killing it", id);
            audit_event(&who, "sandbox.timeout",
                        json_pack("{s:s, s:s}", "context", id, "action", "kill"));
            cleanup_free char *gone = xstrdup(id);
            kmgr_shutdown(self->kmgr, gone, NULL);
            api_forget_context(self, gone);
        }
    }
    if (pending == 0) {
        loop_timer_end(loop, timer_id);
        self->e2b_timer = -1;
    }
}

/* A timeout in seconds from the body's key, or def; false after answering 400. */
static bool timeout_field(json_t *body, const char *key, int64_t def, int64_t *out,
                          struct MHD_Connection *conn, enum MHD_Result *ret)
{
    json_t *v = json_object_get(body, key);
    *out = def;
    if (v == NULL || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > E2B_MAX_TIMEOUT_S) {
        *ret = e2b_reply(conn, 400, "'timeout' must be whole seconds, 0 to 86400");
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

/* The body as a JSON object; NULL after answering 400. */
static json_t *e2b_body(http_req_t *call, enum MHD_Result *ret)
{
    json_error_t jerr;
    json_t *j = call->len ? json_loadb(call->body, call->len, 0, &jerr) : json_object();
    if (j && json_is_object(j))
        return j;
    json_decref(j);
    *ret = e2b_reply(call->conn, 400, "the body must be a JSON object");
    return NULL;
}

/* An object of strings (metadata, envVars), or absent; false after 400. */
static bool strings_field(json_t *body, const char *key, json_t **out, struct MHD_Connection *conn,
                          enum MHD_Result *ret)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    const char *name;
    json_t *s;
    bool good = json_is_object(v);
    json_object_foreach (v, name, s)
        good = good && json_is_string(s);
    if (!good) {
        cleanup_free char *msg = xasprintf("'%s' must be an object of strings", key);
        *ret = e2b_reply(conn, 400, msg);
        return false;
    }
    *out = v;
    return true;
}

/* --- requests that answer later ----------------------------------------------------- */

typedef enum { LATER_SANDBOX, LATER_EMPTY } later_t;

/* The wait's end (stream_t's status and answer) in E2B's terms: the
 * sandbox (201) or nothing (204) when it went well, else the error. */
static enum MHD_Result e2b_later(api_t *self, http_req_t *call, later_t kind)
{
    stream_t *s = call->state;
    if (!s->done)
        return resp_wait(s->out);
    unsigned st = s->status ? s->status : 200;
    if (st >= 300)
        return e2b_reply(call->conn, st, json_string_value(json_object_get(s->agg, "message")));
    kernel_t *k = kmgr_get(self->kmgr, json_string_value(json_object_get(s->agg, "id")));
    if (kind == LATER_EMPTY || k == NULL)
        return reply_status(call->conn, 204);
    return http_reply_json(call->conn, 201, sandbox_json(self, k, false, true));
}

/* --- routes ------------------------------------------------------------------------- */

/* The caller's snapshot that a template id names: its id, or its name. */
static const kmgr_snapshot_t *snapshot_named(api_t *self, http_req_t *call, const char *id)
{
    const kmgr_snapshot_t *snap = http_resolve(call, "snapshot", id);
    for (size_t i = 0; !snap && i < kmgr_snapshot_count(self->kmgr); i++) {
        const kmgr_snapshot_t *s = kmgr_snapshot_at(self->kmgr, i);
        if (!s->deleted && !s->template_of && s->name && strcmp(s->name, id) == 0 &&
            strcmp(s->owner, call->tenant->name) == 0)
            snap = s;
    }
    return snap;
}

static enum MHD_Result sandbox_create(void *arg, http_req_t *call)
{
    api_t *self = arg;
    if (call->resumed)
        return e2b_later(self, call, LATER_SANDBOX);
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret), *tpl, *metadata, *envs, *pause, *pmem;
    int64_t timeout;
    e2b_net_t net = {0};
    if (!body)
        return ret;
    if (!api_field(body, "templateID", JSON_STRING, &tpl, call->conn, &ret) ||
        !api_field(body, "autoPause", JSON_TRUE, &pause, call->conn, &ret) ||
        !api_field(body, "autoPauseMemory", JSON_TRUE, &pmem, call->conn, &ret) ||
        !api_e2b_network(body, call->tenant ? call->tenant->name : NULL, &net, call->conn, &ret) ||
        !strings_field(body, "metadata", &metadata, call->conn, &ret) ||
        !strings_field(body, "envVars", &envs, call->conn, &ret) ||
        !timeout_field(body, "timeout", E2B_DEFAULT_TIMEOUT_S, &timeout, call->conn, &ret))
        goto out;
    const char *template = json_string_value(tpl);
    const kmgr_snapshot_t *snap = default_template(template) || kmgr_template(self->kmgr, template)
                                      ? NULL
                                      : snapshot_named(self, call, template);
    if (!default_template(template) && !kmgr_template(self->kmgr, template) && !snap) {
        cleanup_free char *msg = xasprintf("template '%s' not found (sandgate's templates: GET "
                                           "/templates; 'base' is the default Python sandbox)",
                                           template);
        ret = e2b_reply(call->conn, 404, msg);
        goto out;
    }
    audit_who_t who;
    http_who(call, "e2b", &who);
    tenant_quota_t quota;
    sg_error_t *err = NULL;
    /* allow_internet_access true alone on a server that gives no network:
     * allowed, and there is none to reach.  Said nothing of it (the SDKs
     * send no allow_internet_access by default): E2B's default, the
     * internet, when the server gives sandboxes a network and the key may
     * use it; else none. */
    bool said = net.asked || net.allow || net.deny || net.transforms;
    bool internet = said ? net.internet && (kmgr_has_egress(self->kmgr) || net.allow || net.deny)
                         : kmgr_has_egress(self->kmgr) && (!call->tenant || call->tenant->internet);
    bool no_mounts;
    json_t *mounts = api_volume_mounts(self, call, json_object_get(body, "volumeMounts"),
                                       snap != NULL, &no_mounts, &err);
    kernel_t *k = !mounts && !no_mounts
                      ? NULL
                      : api_create_context(self, call->tenant, "python", "/home/user",
                                           !snap && internet ? &net : NULL, false, snap,
                                           default_template(template) || snap ? NULL : template,
                                           NULL, mounts, &who, &quota, &err);
    json_decref(mounts);
    if (k == NULL) {
        ret = e2b_error(call->conn, &err);
        goto out;
    }
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    json_object_set_new(
        meta, "e2b",
        json_pack("{s:s, s:o, s:I, s:I, s:b}", "templateID", template ? template : "base",
                  "metadata", metadata ? json_deep_copy(metadata) : json_object(), "startedAt",
                  (json_int_t)now_ms(), "endAt", (json_int_t)0, "autoPause", json_is_true(pause)));
    api_e2b_network_record(json_object_get(meta, "e2b"), &net);
    if (json_is_false(pmem)) /* its timeout's pause keeps only its files */
        json_object_set_new(json_object_get(meta, "e2b"), "autoPauseMemory", json_false());
    if (envs && json_object_size(envs)) /* its commands' and other kernels' (api_sandbox_envs) */
        json_object_set_new(json_object_get(meta, "e2b"), "envVars", json_deep_copy(envs));
    set_end(self, k, timeout ? timeout : E2B_MAX_TIMEOUT_S);
    /* the first line of its logs (sblogs.c), which hear only the API's ids */
    log_info("e2b: sandbox %s created (template %s%s%s)", kernel_id(k),
             template ? template : "base", snap ? ", from snapshot " : "", snap ? snap->id : "");
    if (envs && json_object_size(envs)) { /* queued: runs first, once the kernel is ready */
        char *code = pyscript(PY_KERNEL_SETUP, json_pack("{s:O, s:s, s:b}", "env", envs, "path", "",
                                                         "use_path", false));
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, code, &o, &(kernel_exec_cb_t){0}, NULL);
        free(code);
    }
    /* Answered once it runs, as E2B's: a pause, snapshot or fork may follow at once. */
    kernel_state_t st = kernel_state(k);
    if ((st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        ret = http_reply_json(call->conn, 201, sandbox_json(self, k, false, true));
    else
        ret = api_context_ready(self, call->conn, k, &call->state);
out:
    api_e2b_network_free(&net);
    json_decref(body);
    return ret;
}

/* GET /templates/aliases/NAME (the SDKs' Template.exists): sandgate's
 * default and configured templates (public), and the caller's snapshots by
 * name or id (its own); else E2B's 404. */
static enum MHD_Result template_alias(void *arg, http_req_t *call)
{
    api_t *self = arg;
    const char *alias = call->rest && *call->rest ? call->rest + 1 : "";
    bool shared = *alias && !strchr(alias, '/') &&
                  (default_template(alias) || kmgr_template(self->kmgr, alias));
    const kmgr_snapshot_t *snap =
        shared || !*alias || strchr(alias, '/') ? NULL : snapshot_named(self, call, alias);
    if (!shared && !snap) {
        cleanup_free char *msg = xasprintf("template '%s' not found", alias);
        return e2b_reply(call->conn, 404, msg);
    }
    return http_reply_json(
        call->conn, 200,
        json_pack("{s:s, s:b}", "templateID", snap ? snap->id : alias, "public", shared));
}

static enum MHD_Result sandbox_get(void *arg, http_req_t *call)
{
    return http_reply_json(call->conn, 200,
                           sandbox_json(arg, http_arg(call, "sandbox"), true, true));
}

/* Whether a sandbox's metadata has every key=value of query (URL-encoded
 * pairs joined by '&', as the SDKs send ?metadata=). */
static bool metadata_matches(json_t *metadata, const char *query)
{
    if (query == NULL || *query == 0)
        return true;
    cleanup_free char *q = xstrdup(query);
    char *save = NULL;
    for (char *pair = strtok_r(q, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (eq == NULL)
            return false;
        *eq = 0;
        MHD_http_unescape(pair);
        MHD_http_unescape(eq + 1);
        const char *v = json_string_value(json_object_get(metadata, pair));
        if (v == NULL || strcmp(v, eq + 1) != 0)
            return false;
    }
    return true;
}

/* An ISO 8601 time (E2B's startedAfter: "2026-11-28T09:00:00.123+00:00",
 * or with "Z") in ms since the epoch; -1 when it is not one. */
static int64_t iso_ms(const char *t)
{
    struct tm tm = {0};
    int n = 0;
    if (sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t ms = (int64_t)timegm(&tm) * 1000;
    const char *p = t + n;
    if (*p == '.') { /* fractions: milliseconds kept */
        int64_t frac = 0, scale = 1000;
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (scale > 1)
                frac += (*p - '0') * (scale /= 10);
        ms += frac;
    }
    int hh, mm;
    if (*p == 'Z' && !p[1])
        return ms;
    if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &hh, &mm) == 2)
        return ms - (*p == '+' ? 1 : -1) * ((int64_t)hh * 3600 + mm * 60) * 1000;
    return *p ? -1 : ms;
}

typedef struct {
    int64_t started;
    const char *id;
} listed_t;

static int listed_cmp(const void *a, const void *b)
{
    const listed_t *x = a, *y = b;
    if (x->started != y->started)
        return x->started < y->started ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* GET /v2/sandboxes (state=running,paused; metadata=k%3Dv; template;
 * startedAfter; order=asc|desc, by start, newest first by default; limit;
 * nextToken: where the page before ended, "START_MS.ID") and GET /sandboxes
 * (running ones, all of them, E2B's older list).  Only the sandboxes the
 * caller may see; a sandbox's code contexts are not sandboxes. */
static enum MHD_Result sandboxes_list_as(api_t *self, http_req_t *call, bool v2)
{
    struct MHD_Connection *conn = call->conn;
#define QUERY(name) MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name)
    const char *state = v2 ? QUERY("state") : "running", *meta_q = QUERY("metadata");
    const char *limit_s = QUERY("limit"), *after = QUERY("nextToken"), *order = QUERY("order");
    const char *template = QUERY("template"), *since_s = QUERY("startedAfter");
#undef QUERY
    long limit = limit_s ? strtol(limit_s, NULL, 10) : v2 ? 100 : 100000;
    if (limit < 1 || limit > 100000)
        return e2b_reply(conn, 400, "'limit' must be 1 to 100000");
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
        return e2b_reply(conn, 400, "'order' must be asc or desc");
    int64_t since = since_s ? iso_ms(since_s) : 0;
    if (since < 0)
        return e2b_reply(conn, 400, "'startedAfter' must be an ISO 8601 time");
    bool asc = order && strcmp(order, "asc") == 0;
    listed_t from = {0};
    char *dot = after ? strchr(after, '.') : NULL;
    if (after && (!dot || sscanf(after, "%" SCNd64, &from.started) != 1))
        return e2b_reply(conn, 400, "'nextToken' is not one this list gave");
    from.id = dot ? dot + 1 : NULL;
    size_t n = 0;
    listed_t *all = xzalloc((json_object_size(self->contexts) + 1) * sizeof *all);
    const char *id;
    json_t *meta;
    json_object_foreach (self->contexts, id, meta) {
        kernel_t *k = kmgr_get(self->kmgr, id);
        if (k == NULL || kernel_host(k) || /* a code context in a sandbox, not one */
            !http_may_see(call, kernel_owner(k)))
            continue;
        json_t *e = e2b_record(self, k);
        int64_t started = json_integer_value(json_object_get(e, "startedAt"));
        const char *tpl = json_string_value(json_object_get(e, "templateID"));
        listed_t l = {started, id};
        if ((state && !strstr(state, e2b_state(k))) || (since && started < since) ||
            (template && (!tpl || strcmp(tpl, template) != 0)) ||
            !metadata_matches(json_object_get(e, "metadata"), meta_q) ||
            (from.id && (asc ? listed_cmp(&l, &from) <= 0 : listed_cmp(&l, &from) >= 0)))
            continue;
        all[n++] = l;
    }
    qsort(all, n, sizeof *all, listed_cmp);
    json_t *out = json_array();
    char next[160] = "";
    for (size_t i = 0; i < n && (long)i < limit; i++) {
        const listed_t *l = &all[asc ? i : n - 1 - i];
        json_array_append_new(out, sandbox_json(self, kmgr_get(self->kmgr, l->id), true, false));
        if ((long)i == limit - 1 && (size_t)limit < n)
            snprintf(next, sizeof next, "%" PRId64 ".%s", l->started, l->id);
    }
    free(all);
    struct MHD_Response *r = http_json_response(out);
    if (*next)
        MHD_add_response_header(r, "x-next-token", next);
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result sandboxes_list(void *arg, http_req_t *call)
{
    return sandboxes_list_as(arg, call, false);
}

static enum MHD_Result sandboxes_list_v2(void *arg, http_req_t *call)
{
    return sandboxes_list_as(arg, call, true);
}

static enum MHD_Result sandbox_delete(void *arg, http_req_t *call)
{
    api_t *self = arg;
    const char *id = http_arg_id(call, "sandbox");
    audit_who_t who;
    http_who(call, "e2b", &who);
    kmgr_shutdown(self->kmgr, id, NULL);
    api_forget_context(self, id);
    audit_event(&who, "context.delete", json_pack("{s:s}", "context", id));
    return reply_status(call->conn, 204);
}

/* POST .../timeout {timeout}: the sandbox ends timeout s from now (shorter too). */
static enum MHD_Result sandbox_timeout(void *arg, http_req_t *call)
{
    api_t *self = arg;
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret);
    int64_t t;
    if (body && timeout_field(body, "timeout", -1, &t, call->conn, &ret)) {
        if (t < 0) {
            ret = e2b_reply(call->conn, 400, "'timeout' is required");
        } else {
            set_end(self, http_arg(call, "sandbox"), t);
            ret = reply_status(call->conn, 204);
        }
    }
    json_decref(body);
    return ret;
}

/* The sandbox's end moved to timeout_s from now, unless it is later already. */
static void extend_end(api_t *self, kernel_t *k, int64_t timeout_s)
{
    int64_t end = json_integer_value(json_object_get(e2b_record(self, k), "endAt"));
    if (end == 0 || end < now_ms() + timeout_s * 1000)
        set_end(self, k, timeout_s);
}

/* POST .../refreshes {duration}: keeps it alive duration s (60 by default) more. */
static enum MHD_Result sandbox_refresh(void *arg, http_req_t *call)
{
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret);
    int64_t t;
    if (body && timeout_field(body, "duration", 60, &t, call->conn, &ret)) {
        extend_end(arg, http_arg(call, "sandbox"), t);
        ret = reply_status(call->conn, 204);
    }
    json_decref(body);
    return ret;
}

/* connect and resume: a paused sandbox is resumed (201 once it runs), a
 * running one answered at once (connect: 200; resume: 409); either way its
 * end moves to the timeout asked for (300 s by default) if that is later. */
static enum MHD_Result connect_or_resume(api_t *self, http_req_t *call, bool connect)
{
    if (call->resumed)
        return e2b_later(self, call, LATER_SANDBOX);
    kernel_t *k = http_arg(call, "sandbox");
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret);
    int64_t t;
    if (!body || !timeout_field(body, "timeout", E2B_DEFAULT_TIMEOUT_S, &t, call->conn, &ret)) {
        json_decref(body);
        return ret;
    }
    json_t *pause = json_object_get(body, "autoPause");
    if (json_is_boolean(pause))
        json_object_set(e2b_record(self, k), "autoPause", pause);
    json_decref(body);
    extend_end(self, k, t ? t : E2B_MAX_TIMEOUT_S);
    kernel_state_t st = kernel_state(k);
    if (st != KERNEL_PAUSED && st != KERNEL_PAUSING && st != KERNEL_DEAD) {
        if (!connect)
            return e2b_reply(call->conn, 409, "the sandbox is running already");
        return http_reply_json(call->conn, 200, sandbox_json(self, k, false, true));
    }
    if (st == KERNEL_DEAD)
        return e2b_reply(call->conn, 409,
                         "the sandbox's kernel is dead: kill it and create "
                         "another");
    audit_who_t who;
    http_who(call, "e2b", &who);
    audit_event(&who, "context.resume", json_pack("{s:s}", "context", kernel_id(k)));
    /* Started here, so that a refusal (max-live, another runsc's image) has
     * E2B's shape; then waited for. */
    sg_error_t *err = NULL;
    tenant_quota_t quota;
    if (tenant_admit_wake(k, &quota, &err) < 0 || kernel_resume(k, &err) < 0)
        return e2b_error(call->conn, &err);
    return api_pause_resume(self, call->conn, k, false, &call->state);
}

static enum MHD_Result sandbox_connect(void *arg, http_req_t *call)
{
    return connect_or_resume(arg, call, true);
}

static enum MHD_Result e2b_resume(void *arg, http_req_t *call)
{
    return connect_or_resume(arg, call, false);
}

/* POST .../pause: 204 once paused; 409 when it is paused already. */
static enum MHD_Result e2b_pause(void *arg, http_req_t *call)
{
    api_t *self = arg;
    if (call->resumed)
        return e2b_later(self, call, LATER_EMPTY);
    kernel_t *k = http_arg(call, "sandbox");
    if (kernel_state(k) == KERNEL_PAUSED)
        return e2b_reply(call->conn, 409, "the sandbox is paused already");
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret), *memory;
    bool good = body && api_field(body, "memory", JSON_TRUE, &memory, call->conn, &ret);
    bool cold = good && json_is_false(memory); /* E2B's filesystem-only pause */
    json_decref(body);
    if (!good)
        return ret;
    audit_who_t who;
    http_who(call, "e2b", &who);
    audit_event(&who, "context.pause",
                json_pack("{s:s, s:b}", "context", kernel_id(k), "memory", !cold));
    /* Started here, so that a refusal has E2B's shape; then waited for. */
    sg_error_t *err = NULL;
    if (cold) {
        if (kernel_pause_cold(k, &err) < 0)
            return e2b_error(call->conn, &err);
        return api_wait_event(self, call->conn, k, KERNEL_EV_PAUSED, 200, &call->state);
    }
    if (kernel_state(k) != KERNEL_PAUSING && kernel_pause(k, &err) < 0)
        return e2b_error(call->conn, &err);
    if (kernel_state(k) == KERNEL_PAUSED)
        return reply_status(call->conn, 204);
    return api_pause_resume(self, call->conn, k, true, &call->state);
}

/* --- fork ---------------------------------------------------------------------------- */

#define E2B_MAX_FORKS 20

/* A fork under way: the parent's snapshot, then count children from it. */
typedef struct {
    stream_t *s;
    const tenant_t *tenant;
    audit_who_t who;
    json_t *parent; /* the parent's "e2b" record, copied */
    int count;
    int64_t timeout_s;
} forking_t;

/* One child of the fork from snap: {"sandbox"} or {"error"} (E2B's SandboxForkResult). */
static json_t *fork_child(forking_t *f, const kmgr_snapshot_t *snap)
{
    api_t *self = f->s->api;
    tenant_quota_t quota;
    sg_error_t *err = NULL;
    kernel_t *k = api_create_context(self, f->tenant, "python", "/home/user", NULL, false, snap,
                                     NULL, NULL, NULL, &f->who, &quota, &err);
    if (k == NULL) {
        json_t *e = json_pack("{s:{s:i, s:s}}", "error", "code", sg_error_http_status(err->kind),
                              "message", err->msg);
        sg_error_free(&err);
        return e;
    }
    json_t *rec = json_deep_copy(f->parent);
    json_object_set_new(rec, "startedAt", json_integer((json_int_t)now_ms()));
    json_object_set_new(json_object_get(self->contexts, kernel_id(k)), "e2b", rec);
    set_end(self, k, f->timeout_s ? f->timeout_s : E2B_MAX_TIMEOUT_S);
    log_info("e2b: sandbox %s made by a fork (snapshot %s)", kernel_id(k), snap->id);
    return json_pack("{s:o}", "sandbox", sandbox_json(self, k, false, true));
}

static void on_forked(const kmgr_snapshot_t *snap, const sg_error_t *err, void *arg)
{
    forking_t *f = arg;
    stream_t *s = f->s;
    if (err) {
        api_stream_answer(
            s, sg_error_http_status(err->kind),
            json_pack("{s:i, s:s}", "code", sg_error_http_status(err->kind), "message", err->msg));
    } else if (f->count == 0) { /* a snapshot only: E2B's SnapshotInfo */
        json_t *j = api_snapshot_json(snap);
        api_stream_answer(
            s, 201,
            json_pack("{s:s, s:O}", "snapshotID", snap->id, "names", json_object_get(j, "names")));
        json_decref(j);
    } else {
        cleanup_free char *sid = xstrdup(snap->id);
        json_t *children = json_array();
        for (int i = 0; i < f->count && !s->done; i++)
            json_array_append_new(children, fork_child(f, snap));
        /* its files stay until the children run (kernelmgr/manager/manager.h) */
        kmgr_snapshot_delete(s->api->kmgr, sid, NULL);
        if (s->done) { /* the client left: no children, nobody to answer */
            json_decref(children);
            api_stream_unref(s);
        } else {
            api_stream_answer(s, 201, children);
        }
    }
    json_decref(f->parent);
    free(f);
}

/* A snapshot of the sandbox (name may be NULL) and, when count > 0, count
 * sandboxes from it, each with timeout_s: answered once all is done. */
static enum MHD_Result take(api_t *self, http_req_t *call, const char *name, int count,
                            int64_t timeout_s)
{
    kernel_t *k = http_arg(call, "sandbox");
    sg_error_t *err = NULL;
    if (count && tenant_check_contexts(call->tenant, &err) < 0) /* none would start */
        return e2b_error(call->conn, &err);
    stream_t *s = api_stream_new(self, call->conn, k); /* refs: the callback's, the request's */
    s->json_mode = s->snapshot_wait = true;
    forking_t *f = xzalloc(sizeof *f);
    *f = (forking_t){.s = s,
                     .tenant = call->tenant,
                     .parent = json_deep_copy(e2b_record(self, k)),
                     .count = count,
                     .timeout_s = timeout_s};
    http_who(call, "e2b", &f->who);
    audit_event(&f->who, count ? "context.fork" : "snapshot.create",
                json_pack("{s:s, s:i}", "context", kernel_id(k), "count", count));
    if (kmgr_snapshot(self->kmgr, k, name, on_forked, f, &err) < 0) {
        json_decref(f->parent);
        free(f);
        s->done = true;
        api_stream_unref(s); /* the callback's: none comes */
        api_stream_unref(s);
        return e2b_error(call->conn, &err);
    }
    call->state = s;
    if (s->done) /* answered already (no launcher) */
        return http_reply_json(call->conn, s->status, json_incref(s->agg));
    return resp_wait(s->out);
}

/* A snapshot or fork answered later: what on_forked put in the stream. */
static enum MHD_Result taken(http_req_t *call)
{
    stream_t *s = call->state;
    return s->done ? http_reply_json(call->conn, s->status, json_incref(s->agg))
                   : resp_wait(s->out);
}

/* POST .../fork {timeout, count}: count new sandboxes (1 by default) from
 * one snapshot of this one, which runs on; each with the parent's
 * template and metadata.  The snapshot goes once they run. */
static enum MHD_Result sandbox_fork(void *arg, http_req_t *call)
{
    if (call->resumed)
        return taken(call);
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret), *count;
    int64_t timeout;
    if (!body ||
        !timeout_field(body, "timeout", E2B_DEFAULT_TIMEOUT_S, &timeout, call->conn, &ret) ||
        !api_field(body, "count", JSON_INTEGER, &count, call->conn, &ret)) {
        json_decref(body);
        return ret;
    }
    json_int_t n = count ? json_integer_value(count) : 1;
    json_decref(body);
    if (n < 1 || n > E2B_MAX_FORKS)
        return e2b_reply(call->conn, 400, "'count' must be 1 to 20");
    return take(arg, call, NULL, (int)n, timeout);
}

/* POST .../snapshots {name}: 201 {snapshotID, names}; Sandbox.create with
 * either starts a sandbox from it. */
static enum MHD_Result sandbox_snapshot(void *arg, http_req_t *call)
{
    if (call->resumed)
        return taken(call);
    enum MHD_Result ret = MHD_NO;
    json_t *body = e2b_body(call, &ret), *name;
    if (!body || !api_field(body, "name", JSON_STRING, &name, call->conn, &ret)) {
        json_decref(body);
        return ret;
    }
    ret = take(arg, call, json_string_value(name), 0, 0);
    json_decref(body);
    return ret;
}

/* DELETE /templates/{snapshot}: how E2B's SDKs delete a snapshot. */
static enum MHD_Result snapshot_delete(void *arg, http_req_t *call)
{
    api_t *self = arg;
    sg_error_t *err = NULL;
    const char *sid = http_arg_id(call, "snapshot");
    if (kmgr_snapshot_delete(self->kmgr, sid, &err) < 0)
        return e2b_error(call->conn, &err);
    audit_who_t who;
    http_who(call, "e2b", &who);
    audit_event(&who, "snapshot.delete", json_pack("{s:s}", "snapshot", sid));
    return reply_status(call->conn, 204);
}

int api_e2b_register(api_t *self, http_server_t *http, void (*done)(void *, void *, bool),
                     sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/sandboxes", sandbox_create, 0, NULL},
        {"POST", "/v2/sandboxes", sandbox_create, 0, NULL},
        {"GET", "/sandboxes", sandboxes_list, 0, NULL},
        {"GET", "/v2/sandboxes", sandboxes_list_v2, 0, NULL},
        {"GET", "/sandboxes/{sandbox}", sandbox_get, 0, NULL},
        {"GET", "/sandboxes/{sandbox}/metrics", api_sandbox_metrics, 0, NULL},
        {"GET", "/sandboxes/{sandbox}/logs", api_sandbox_logs, 0, NULL},
        {"GET", "/v2/sandboxes/{sandbox}/logs", api_sandbox_logs_v2, 0, NULL},
        {"DELETE", "/sandboxes/{sandbox}", sandbox_delete, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/timeout", sandbox_timeout, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/refreshes", sandbox_refresh, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/connect", sandbox_connect, 0, NULL},
        {"POST", "/v2/sandboxes/{sandbox}/connect", sandbox_connect, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/resume", e2b_resume, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/pause", e2b_pause, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/fork", sandbox_fork, 0, NULL},
        {"POST", "/sandboxes/{sandbox}/snapshots", sandbox_snapshot, 0, NULL},
        {"PUT", "/sandboxes/{sandbox}/network", api_e2b_network_put, 0, NULL},
        {"DELETE", "/templates/{snapshot}", snapshot_delete, 0, NULL},
        {"GET", "/templates/aliases/*", template_alias, 0, NULL},
    };
    const http_front_t front = {
        .name = "e2b", .ctx = self, .done = done, .error_response = http_code_error_response};
    self->e2b_timer = -1;
    api_sbmetrics_start(self);
    api_refusals_start(self);
    api_sblogs_start(self);
    api_e2b_auth_start(self, http);
    if (http_param(http, "sandbox", tenants_resolve_session, tenants_session_owner, self->kmgr,
                   "sandbox '%s' not found", err) < 0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof routes[0], err) < 0)
        return -1;
    /* Sandboxes a previous sandgate timed: their clock runs on. */
    const char *id;
    json_t *meta;
    json_object_foreach (self->contexts, id, meta)
        if (json_integer_value(json_object_get(json_object_get(meta, "e2b"), "endAt")) &&
            self->e2b_timer < 0)
            self->e2b_timer = loop_timer(self->loop, E2B_TICK_MS, 0, on_tick, self);
    return 0;
}
