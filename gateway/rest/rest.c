#include "gateway/rest/rest.h"

#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/internal.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"

void api_config_defaults(api_config_t *cfg)
{
    *cfg = (api_config_t){.exec = NULL, .max_upload = (size_t)256 << 20};
}

/* A context's record: what the API adds to the kmgr session (language,
 * cwd) and whether it is its language's default, so that POST /execute
 * without context_id finds the same kernel after a restart. */
/* Default contexts are per tenant and language: "TENANT/LANGUAGE" (a
 * tenant's name has no '/'). */
static char *default_key(const char *tenant, const char *language)
{
    return xasprintf("%s/%s", tenant, language);
}

void api_record_write(api_t *self, const char *id)
{
    if (!self->records)
        return;
    json_t *meta = json_object_get(self->contexts, id);
    const char *lang = json_string_value(json_object_get(meta, "language"));
    kernel_t *k = kmgr_get(self->kmgr, id);
    cleanup_free char *key = lang && k ? default_key(kernel_owner(k), lang) : NULL;
    bool is_default =
        key && json_equal(json_object_get(self->defaults, key), json_object_get(meta, "id"));
    json_t *rec = json_pack("{s:s, s:O, s:b}", "id", id, "context", meta, "default", is_default);
    records_put(self->records, id, rec);
    json_decref(rec);
}

/* A context a previous sandgate recorded: kept when kmgr re-adopted its
 * kernel, forgotten otherwise. */
static void record_load(const char *id, const json_t *rec, void *arg)
{
    api_t *self = arg;
    json_t *meta = json_object_get(rec, "context");
    const char *lang = json_string_value(json_object_get(meta, "language"));
    if (kmgr_get(self->kmgr, id) == NULL || !lang ||
        !json_is_string(json_object_get(meta, "cwd"))) {
        records_remove(self->records, id);
        return;
    }
    json_object_set_new(self->contexts, id, json_deep_copy(meta));
    if (json_is_true(json_object_get(rec, "default"))) {
        cleanup_free char *key = default_key(kernel_owner(kmgr_get(self->kmgr, id)), lang);
        json_object_set_new(self->defaults, key, json_string(id));
        log_info("api: context %s is again the default for %s", id, lang);
    }
}

api_t *api_new(loop_t *loop, kmgr_t *kmgr, const api_config_t *cfg, void (*wake)(void *),
               void *wake_arg)
{
    api_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->contexts = json_object();
    self->defaults = json_object();
    self->commands = commands_new(loop, NULL);
    self->e2b_timer = self->e2b_sample_timer = -1;
    if (cfg->state_dir) {
        cleanup_free char *dir = xasprintf("%s/contexts", cfg->state_dir);
        sg_error_t *err = NULL;
        self->records = records_open(dir, "context", &err);
        if (self->records) {
            records_each(self->records, record_load, self);
        } else {
            log_warn("api: %s; default contexts will not survive a restart", err->msg);
            sg_error_free(&err);
        }
    }
    return self;
}

void api_destroy(api_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    commands_destroy(&(*self_p)->commands);
    if ((*self_p)->e2b_timer >= 0)
        loop_timer_end((*self_p)->loop, (*self_p)->e2b_timer);
    api_sbmetrics_stop(*self_p);
    api_refusals_stop(*self_p);
    api_sblogs_stop(*self_p);
    json_decref((*self_p)->contexts);
    json_decref((*self_p)->defaults);
    records_close(&(*self_p)->records);
    free(*self_p);
    *self_p = NULL;
}

commands_t *api_commands(api_t *self)
{
    return self->commands;
}

const char *api_context_cwd(api_t *self, const kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    const char *cwd = json_string_value(json_object_get(meta, "cwd"));
    return cwd ? cwd : "/home/user";
}

/* --- contexts ------------------------------------------------------------------ */

/* The kernelspec for a language (kspecs_for_language). */
static const kspec_t *spec_for(api_t *self, const char *language)
{
    return kspecs_for_language(kmgr_kspecs(self->kmgr), language);
}

/* "running" (idle or busy), "starting", "pausing", "paused", "resuming", "dead". */
static const char *context_state(const kernel_t *k)
{
    kernel_state_t st = kernel_state(k);
    if ((st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        return "running";
    return kernel_status(k);
}

json_t *api_context_json(api_t *self, kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    const char *lang = json_string_value(json_object_get(meta, "language"));
    const char *cwd = json_string_value(json_object_get(meta, "cwd"));
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b}", "id", kernel_id(k), "language",
                          lang ? lang : kernel_spec(k)->language, "cwd", cwd ? cwd : "/home/user",
                          "state", context_state(k), "internet", kernel_internet(k));
    json_object_set_new(j, "tenant", json_string(kernel_owner(k)));
    api_network_json(j, kernel_opts(k)->egress_allow, kernel_opts(k)->egress_deny,
                     kernel_opts(k)->egress_transforms);
    /* The sandbox it runs in: its own, or the context's whose sandbox it
     * shares (POST /contexts {"sandbox"}), E2B's sandbox id. */
    const char *sandbox = json_string_value(json_object_get(meta, "sandbox"));
    json_object_set_new(j, "sandbox", json_string(sandbox ? sandbox : kernel_id(k)));
    if (kernel_username(k)) /* a Jupyter server's KERNEL_USERNAME (jupyter.c) */
        json_object_set_new(j, "username", json_string(kernel_username(k)));
    if (kernel_state(k) == KERNEL_PAUSED)
        json_object_set_new(j, "checkpoint_bytes",
                            json_integer((json_int_t)kernel_pause_info(k).checkpoint_bytes));
    if (kernel_opts(k)->template)
        json_object_set_new(j, "template", json_string(kernel_opts(k)->template));
    const json_t *lineage = kmgr_lineage(self->kmgr, k);
    if (lineage && json_array_size(lineage)) /* made from a snapshot of this context */
        json_object_set_new(j, "parent", json_incref(json_array_get(lineage, 0)));
    char *url = handover_url(self->cfg.notebook_url, kernel_id(k));
    if (url)
        json_object_set_new(j, "notebook_url", json_string(url));
    free(url);
    return j;
}

/* A context event for the audit log: name ("context.delete", ...) on id. */
static void audit_context(const audit_who_t *who, const char *name, const char *id)
{
    audit_event(who, name, json_pack("{s:s}", "context", id));
}

/* Answers *err, a refusal for a quota (tenant_reply_quota's 429, with
 * *quota) or another error, and frees it. */
enum MHD_Result api_reply_refused(struct MHD_Connection *conn, const tenant_quota_t *quota,
                                  sg_error_t **err)
{
    if ((*err)->kind != SG_E_QUOTA)
        return reply_failed(conn, err);
    enum MHD_Result ret = tenant_reply_quota(conn, quota, *err);
    sg_error_free(err);
    return ret;
}

/* A Java context's sandbox envs and cwd: system properties (a JVM cannot
 * change its environment or directory; E2B's Java contexts read both so,
 * user.dir the cwd), set by a silent execution queued before any other. */
static void java_properties(kernel_t *k, const json_t *env, const char *cwd)
{
    json_t *props = env ? json_deep_copy(env) : json_object();
    if (strcmp(cwd, "/home/user") != 0)
        json_object_set_new(props, "user.dir", json_string(cwd));
    char *set = NULL, *restore = NULL;
    if (json_object_size(props) && envscript("java", props, &set, &restore)) {
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, set, &o, &(kernel_exec_cb_t){0}, NULL);
    }
    free(set);
    free(restore);
    json_decref(props);
}

json_t *api_volume_mounts(api_t *self, const http_req_t *call, const json_t *spec, bool fixed,
                          bool *none, sg_error_t **err)
{
    *none = spec == NULL || json_is_null(spec) || (json_is_array(spec) && !json_array_size(spec));
    if (*none)
        return NULL;
    if (fixed) {
        sg_error_set(err, SG_E_INVALID,
                     "'volumeMounts': a sandbox made from a snapshot mounts the snapshot's "
                     "volumes, and a context in a sandbox has that sandbox's");
        return NULL;
    }
    if (!self->volumes) {
        sg_error_set(err, SG_E_INVALID, "'volumeMounts': this server has no volumes");
        return NULL;
    }
    return volumes_mounts(self->volumes, call->tenant->name, spec, none, err);
}

void api_set_volumes(api_t *self, volumes_t *volumes)
{
    self->volumes = volumes;
}

kernel_t *api_create_context(api_t *self, const tenant_t *t, const char *language, const char *cwd,
                             const e2b_net_t *net, bool implicit, const kmgr_snapshot_t *snap,
                             const char *template, kernel_t *sandbox, const json_t *mounts,
                             const audit_who_t *who, tenant_quota_t *quota, sg_error_t **err)
{
    bool internet = net != NULL;
    if (sandbox && kernel_host(sandbox)) /* a context's sandbox is its host's */
        sandbox = kernel_host(sandbox);
    if (sandbox) /* it has that sandbox's network */
        internet = kernel_internet(sandbox);
    language = kspec_language_name(language);
    const sandbox_template_t *tpl = template ? kmgr_template(self->kmgr, template) : NULL;
    if (template && !tpl) {
        sg_error_set(err, SG_E_NOTFOUND, "no template '%s' (GET /templates lists them)", template);
        return NULL;
    }
    if (tpl) { /* the template's kernelspec's language */
        const kspec_t *ks =
            kspecs_get(kmgr_kspecs(self->kmgr), tpl->kernelspec ? tpl->kernelspec : "python3");
        language = ks ? ks->language : language;
    }
    if (snap) { /* the snapshot's context's language and cwd (its kernel keeps its own cwd) */
        json_t *meta = json_object_get(self->contexts, snap->context_id);
        const char *l = json_string_value(json_object_get(meta, "language"));
        const char *c = json_string_value(json_object_get(meta, "cwd"));
        const kspec_t *ks = kspecs_get(kmgr_kspecs(self->kmgr), snap->kernelspec);
        language = l ? l : ks ? ks->language : "python";
        cwd = c ? c : "/home/user";
    }
    const kspec_t *spec =
        snap  ? kspecs_get(kmgr_kspecs(self->kmgr), snap->kernelspec)
        : tpl ? kspecs_get(kmgr_kspecs(self->kmgr), tpl->kernelspec ? tpl->kernelspec : "python3")
              : spec_for(self, language);
    if (spec == NULL) {
        sg_error_set(err, SG_E_INVALID, "no kernel for language '%s'", language);
        return NULL;
    }
    if (snap) /* a snapshot's context has its network, or none */
        internet = snap->internet;
    if (snap && snap->mounts && self->volumes &&
        volumes_check(self->volumes, snap->mounts, err) < 0)
        return NULL;
    if (tenant_admit(t, internet, quota, err) < 0)
        return NULL;
    if (internet && !kmgr_has_egress(self->kmgr)) {
        sg_error_set(err, SG_E_INVALID,
                     "'internet': this server gives sandboxes no network (its operator has not "
                     "set --egress-allow)");
        return NULL;
    }
    kmgr_start_opts_t so = tenant_start_opts(t, internet);
    so.snapshot = snap ? snap->id : NULL;
    so.template = template;
    so.sandbox = sandbox ? kernel_id(sandbox) : NULL;
    so.env = sandbox ? api_sandbox_envs(self, sandbox) : NULL;
    so.mounts = mounts;
    if (internet && net && !sandbox && !snap) { /* its own rules, before its code runs */
        so.egress_allow = net->rules_allow;
        so.egress_deny = net->rules_deny;
        so.egress_transforms = net->transforms;
    }
    kernel_t *k = kmgr_start_with(self->kmgr, spec->name, &so, NULL, NULL, err);
    if (k == NULL)
        return NULL;
    json_t *meta =
        json_pack("{s:s, s:s, s:s}", "id", kernel_id(k), "language", language, "cwd", cwd);
    if (sandbox)
        json_object_set_new(meta, "sandbox", json_string(kernel_id(sandbox)));
    json_object_set_new(self->contexts, kernel_id(k), meta);
    api_record_write(self, kernel_id(k));
    audit_event(who, "context.create",
                json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:s?, s:s?, s:s?}", "context",
                          kernel_id(k), "language", language, "kernelspec", spec->name, "cwd", cwd,
                          "internet", internet, "implicit", implicit, "snapshot",
                          snap ? snap->id : NULL, "template", template, "sandbox",
                          sandbox ? kernel_id(sandbox) : NULL));
    if (!snap && strcmp(cwd, "/home/user") != 0 && strcmp(spec->language, "python") == 0) {
        /* Queued: runs first, once the kernel is ready. */
        char *code = pyscript(PY_CONTEXT_CWD, json_pack("{s:s}", "cwd", cwd));
        kernel_exec_opts_t o = {.silent = true};
        kernel_execute(k, code, &o, &(kernel_exec_cb_t){0}, NULL);
        free(code);
    }
    if (!snap && strcmp(spec->language, "java") == 0)
        java_properties(k, so.env, cwd);
    return k;
}

/* Tenant t's default context for language: POST /execute without
 * context_id. */
kernel_t *api_tenant_context(api_t *self, const tenant_t *t, const char *language,
                             const audit_who_t *who, tenant_quota_t *quota, sg_error_t **err)
{
    language = kspec_language_name(language);
    cleanup_free char *key = default_key(t->name, language);
    const char *id = json_string_value(json_object_get(self->defaults, key));
    kernel_t *k = id ? kmgr_get(self->kmgr, id) : NULL;
    if (k)
        return k;
    k = api_create_context(self, t, language, "/home/user", NULL, true, NULL, NULL, NULL, NULL, who,
                           quota, err);
    if (k) {
        json_object_set_new(self->defaults, key, json_string(kernel_id(k)));
        api_record_write(self, kernel_id(k));
    }
    return k;
}

kernel_t *api_default_context(api_t *self, const http_req_t *req, const char *language,
                              const char *frontend, sg_error_t **err)
{
    audit_who_t who;
    http_who(req, frontend, &who);
    tenant_quota_t quota;
    return api_tenant_context(self, req->tenant, language, &who, &quota, err);
}

/* --- one request that answers later: an execution's stream, or a wait ---------------- */

stream_t *api_stream_new(api_t *self, struct MHD_Connection *conn, kernel_t *k)
{
    stream_t *s = xzalloc(sizeof *s);
    s->api = self;
    s->refs = 2;
    s->out = resp_new(self->loop, conn, self->wake, self->wake_arg);
    s->k = k;
    return s;
}

void api_stream_unref(stream_t *s)
{
    if (--s->refs > 0)
        return;
    resp_free(&s->out);
    json_decref(s->agg);
    free(s);
}

/* --- requests ---------------------------------------------------------------------- */

json_t *api_parse_body(struct MHD_Connection *conn, const char *body, size_t len,
                       enum MHD_Result *ret)
{
    json_error_t jerr;
    json_t *j = len ? json_loadb(body, len, 0, &jerr) : json_object();
    if (j == NULL) {
        *ret = http_reply_errorf(conn, SG_E_INVALID, "malformed JSON body: %s (line %d)", jerr.text,
                                 jerr.line);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = http_reply_errorf(conn, SG_E_INVALID, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* A field of the wrong type is an error; an absent one is NULL. */
bool api_field(json_t *obj, const char *key, json_type type, json_t **out,
               struct MHD_Connection *conn, enum MHD_Result *ret)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    bool good = json_typeof(v) == type || (type == JSON_REAL && json_is_integer(v)) ||
                (type == JSON_TRUE && json_is_boolean(v)); /* JSON_TRUE: any boolean */
    if (!good) {
        static const char *names[] = {"an object", "an array",  "a string",  "an integer",
                                      "a number",  "a boolean", "a boolean", "null"};
        *ret = http_reply_errorf(conn, SG_E_INVALID, "'%s' must be %s", key, names[type]);
        return false;
    }
    *out = v;
    return true;
}

void api_forget_context(api_t *self, const char *id)
{
    /* The contexts in its sandbox went with it (kmgr_shutdown). */
    const char *other;
    json_t *meta;
    void *it;
    json_object_foreach_safe(self->contexts, it, other, meta)
    {
        const char *sandbox = json_string_value(json_object_get(meta, "sandbox"));
        if (sandbox && strcmp(sandbox, id) == 0 && strcmp(other, id) != 0 &&
            !kmgr_get(self->kmgr, other)) {
            cleanup_free char *gone = xstrdup(other);
            api_forget_context(self, gone);
        }
    }
    json_object_del(self->contexts, id);
    api_sblogs_forget(self, id);
    if (self->records)
        records_remove(self->records, id);
    const char *lang;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(self->defaults, tmp, lang, v)
    {
        if (strcmp(json_string_value(v), id) == 0)
            json_object_del(self->defaults, lang);
    }
}

typedef struct {
    api_t *api;
    char id[64];
} failed_t;

static void remove_failed(void *arg)
{
    failed_t *f = arg;
    kmgr_shutdown(f->api->kmgr, f->id, NULL);
    api_forget_context(f->api, f->id);
    free(f);
}

/* A context's workspace is ready (POST /contexts answers 201 with it), or
 * the context failed before (the error, and the context is removed); a
 * pause or a resume ended (200 with the context, or the error). */
static void on_context_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    /* A resume that could not restore gives a fresh kernel: RESTARTED. */
    bool failed = ev == KERNEL_EV_DEAD || ev == KERNEL_EV_GONE ||
                  (s->wait_for == KERNEL_EV_READY && ev == KERNEL_EV_RESTARTED && !s->restoring);
    bool refused = s->wait_for == KERNEL_EV_READY && ev == KERNEL_EV_NOT_RESUMED;
    if (ev != s->wait_for && !failed && !refused)
        return;
    kernel_unobserve(k, on_context_event, s);
    if (!failed && err) { /* a pause that failed (the kernel runs on, or was restarted), or a
                             resume refused (it stays paused) */
        json_decref(s->agg);
        s->agg = http_error_body(err);
        s->status = sg_error_http_status(err->kind);
    } else if (!failed && s->wait_for != KERNEL_EV_PREPARED) {
        json_decref(s->agg);
        s->agg = api_context_json(s->api, k);
    }
    if (failed && s->wait_for != KERNEL_EV_PREPARED) {
        sg_error_t *why = NULL;
        sg_error_set(&why, SG_E_UNAVAILABLE, "%s",
                     ev == KERNEL_EV_RESTARTED
                         ? "the context could not be resumed: it has a fresh kernel and its "
                           "variables are lost (the log says why)"
                     : err ? err->msg
                           : "the context was deleted");
        json_decref(s->agg);
        s->agg =
            json_pack("{s:s, s:s}", "error", sg_error_kind_name(why->kind), "message", why->msg);
        s->status = sg_error_http_status(why->kind);
        sg_error_free(&why);
    } else if (failed) {
        sg_error_t *gone = NULL;
        if (!err)
            sg_error_set(&gone, SG_E_NOTFOUND, "context %s was deleted before it was ready",
                         kernel_id(k));
        const sg_error_t *why = err ? err : gone;
        json_decref(s->agg);
        s->agg =
            json_pack("{s:s, s:s}", "error", sg_error_kind_name(why->kind), "message", why->msg);
        s->status = sg_error_http_status(why->kind);
        if (ev == KERNEL_EV_DEAD) { /* not from inside the kernel's own callback */
            failed_t *f = xzalloc(sizeof *f);
            f->api = s->api;
            snprintf(f->id, sizeof f->id, "%s", kernel_id(k));
            loop_defer(s->api->loop, remove_failed, f);
        }
        sg_error_free(&gone);
    }
    s->done = true;
    resp_ready(s->out);
    api_stream_unref(s); /* the observer's reference */
}

enum MHD_Result api_wait_event(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                               kernel_event_t ev, unsigned status, void **req_state)
{
    stream_t *s = api_stream_new(self, conn, k); /* refs: the observer, and the HTTP request */
    s->json_mode = true;
    s->agg = api_context_json(self, k);
    s->status = status;
    *req_state = s;
    api_stream_wait(s, k, ev);
    return resp_wait(s->out);
}

void api_stream_wait(stream_t *s, kernel_t *k, kernel_event_t ev)
{
    s->snapshot_wait = false;
    s->context_wait = true;
    s->k = k;
    s->wait_for = ev;
    kernel_observe(k, on_context_event, s);
}

void api_stream_answer(stream_t *s, unsigned status, json_t *answer)
{
    json_decref(s->agg);
    s->agg = answer;
    s->status = status;
    s->done = true;
    resp_ready(s->out);
    api_stream_unref(s);
}

/* Answers POST /contexts once k's workspace exists: at once without a
 * launcher, else when the launcher has made it (or failed, or timed out). */
enum MHD_Result api_context_created(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                    void **req_state)
{
    if (kernel_prepared(k))
        return http_reply_json(conn, 201, api_context_json(self, k));
    return api_wait_event(self, conn, k, KERNEL_EV_PREPARED, 201, req_state);
}

enum MHD_Result api_context_ready(api_t *self, struct MHD_Connection *conn, kernel_t *k,
                                  void **req_state)
{
    kernel_state_t st = kernel_state(k);
    if ((st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        return http_reply_json(conn, 201, api_context_json(self, k));
    return api_wait_event(self, conn, k, KERNEL_EV_READY, 201, req_state);
}

/* POST /contexts/{id}/pause and /resume: answered when the kernel is paused
 * (or resumed), with the context, or with why not (a resume within its
 * owner's max-live, as a new context). */
enum MHD_Result api_pause_resume(api_t *self, struct MHD_Connection *conn, kernel_t *k, bool pause,
                                 void **req_state)
{
    sg_error_t *err = NULL;
    tenant_quota_t quota;
    kernel_state_t st = kernel_state(k);
    if (pause ? st == KERNEL_PAUSED
              : (st == KERNEL_IDLE || st == KERNEL_BUSY) && kernel_prepared(k))
        return http_reply_json(conn, 200, api_context_json(self, k));
    if (pause && st == KERNEL_PAUSING)
        return api_wait_event(self, conn, k, KERNEL_EV_PAUSED, 200, req_state);
    if (!pause && st == KERNEL_DEAD) /* no event would ever answer the wait */
        return http_reply_errorf(conn, SG_E_CONFLICT,
                                 "context %s is dead: POST /contexts/%s/restart gives it a new "
                                 "kernel",
                                 kernel_id(k), kernel_id(k));
    if (pause ? kernel_pause(k, &err) < 0
              : tenant_admit_wake(k, &quota, &err) < 0 || kernel_resume(k, &err) < 0)
        return api_reply_refused(conn, &quota, &err);
    return api_wait_event(self, conn, k, pause ? KERNEL_EV_PAUSED : KERNEL_EV_READY, 200,
                          req_state);
}

/* --- the routes ------------------------------------------------------------------ */

/* A request that suspended (a JSON-mode execution, a wait) resumed: its
 * answer once there is one. */
static enum MHD_Result answer_later(http_req_t *call)
{
    stream_t *s = call->state;
    if (!s->done)
        return resp_wait(s->out);
    return http_reply_json(call->conn, s->status ? s->status : 200, json_incref(s->agg));
}

static enum MHD_Result execute_post(void *arg, http_req_t *call)
{
    if (call->resumed)
        return answer_later(call);
    return api_execute(arg, call, call->body, call->len, &call->state);
}

/* The E2B sandbox context k is in (POST /contexts {"sandbox"}), or its own id. */
static const char *context_sandbox(api_t *self, const kernel_t *k)
{
    json_t *meta = json_object_get(self->contexts, kernel_id(k));
    const char *sandbox = json_string_value(json_object_get(meta, "sandbox"));
    return sandbox ? sandbox : kernel_id(k);
}

/* Whether k is one of sandbox's default contexts: its first kernel, or the
 * one of a language run_code(language=...) made (api_sandbox_context). */
static bool sandbox_default(api_t *self, const char *sandbox, const kernel_t *k)
{
    if (strcmp(kernel_id(k), sandbox) == 0)
        return true;
    cleanup_free char *prefix = xasprintf("sandbox:%s:", sandbox);
    const char *key;
    json_t *v;
    json_object_foreach (self->defaults, key, v)
        if (strncmp(key, prefix, strlen(prefix)) == 0 &&
            strcmp(json_string_value(v), kernel_id(k)) == 0)
            return true;
    return false;
}

/* E2B's list_code_contexts names a sandbox: a running one has its default
 * JavaScript context too, as E2B's sandboxes start with one (made here at
 * the first list, where a JavaScript kernel is installed and the quota
 * allows; a paused sandbox is not woken for it). */
static void sandbox_defaults(api_t *self, http_req_t *call, const char *sandbox)
{
    kernel_t *host = kmgr_get(self->kmgr, sandbox);
    if (!host || kernel_host(host) || !tenant_sees(call->tenant, kernel_owner(host)) ||
        (kernel_state(host) != KERNEL_IDLE && kernel_state(host) != KERNEL_BUSY) ||
        !spec_for(self, "javascript"))
        return;
    audit_who_t who;
    http_who(call, "rest", &who);
    tenant_quota_t quota;
    sg_error_t *err = NULL;
    if (!api_sandbox_context(self, call->tenant, host, "javascript", &who, &quota, &err)) {
        log_debug("api: sandbox %s has no JavaScript context: %s", sandbox, err->msg);
        sg_error_free(&err);
    }
}

static enum MHD_Result contexts_list(void *arg, http_req_t *call)
{
    api_t *self = arg;
    json_t *list = json_array();
    /* E2B's list_code_contexts: the contexts of the sandbox it names, its
     * default ones first, then those made in it, as E2B lists them. */
    const char *sandbox = e2b_sandbox_header(call->conn);
    if (sandbox)
        sandbox_defaults(self, call, sandbox);
    for (int pass = sandbox ? 0 : 1; pass < 2; pass++)
        for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
            kernel_t *k = kmgr_at(self->kmgr, i);
            if (!tenant_sees(call->tenant, kernel_owner(k))) /* only the caller's own */
                continue;
            if (sandbox && (strcmp(context_sandbox(self, k), sandbox) != 0 ||
                            sandbox_default(self, sandbox, k) != (pass == 0)))
                continue;
            json_array_append_new(list, api_context_json(self, k));
        }
    return http_reply_json(call->conn, 200, list);
}

static enum MHD_Result context_create(void *arg, http_req_t *call)
{
    api_t *self = arg;
    struct MHD_Connection *conn = call->conn;
    if (call->resumed)
        return answer_later(call);
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    audit_who_t who;
    http_who(call, "rest", &who);
    json_t *req = api_parse_body(conn, call->body, call->len, &ret);
    json_t *lang, *cwd, *internet, *snapshot, *template, *sandbox;
    const kmgr_snapshot_t *snap = NULL;
    kernel_t *host = NULL;
    if (!req)
        return ret;
    if (api_field(req, "language", JSON_STRING, &lang, conn, &ret) &&
        api_field(req, "cwd", JSON_STRING, &cwd, conn, &ret) &&
        api_field(req, "internet", JSON_TRUE, &internet, conn, &ret) &&
        api_field(req, "snapshot", JSON_STRING, &snapshot, conn, &ret) &&
        api_field(req, "template", JSON_STRING, &template, conn, &ret) &&
        api_field(req, "sandbox", JSON_STRING, &sandbox, conn, &ret)) {
        /* E2B's code interpreter makes a context in the sandbox it names
         * in a header (create_code_context). */
        const char *named = sandbox ? json_string_value(sandbox) : e2b_sandbox_header(conn);
        if (named && !snapshot && !template)
            host = http_resolve(call, "context", named);
        if (snapshot && !(snap = http_resolve(call, "snapshot", json_string_value(snapshot)))) {
            ret = http_reply_unknown(call, "snapshot", json_string_value(snapshot));
        } else if (sandbox && !host && !snapshot && !template) {
            ret = http_reply_unknown(call, "sandbox", json_string_value(sandbox));
        } else if (sandbox && (snapshot || template || json_is_true(internet))) {
            ret = http_reply_errorf(conn, SG_E_INVALID,
                                    "a context in a sandbox has that sandbox's files, template and "
                                    "network: \"sandbox\" goes with \"language\" and \"cwd\" "
                                    "alone");
        } else if (snap && (lang || cwd || json_is_true(internet) || template)) {
            ret = http_reply_errorf(conn, SG_E_INVALID,
                                    "a context made from a snapshot has the snapshot's language, "
                                    "cwd, template and network: give \"snapshot\" alone");
        } else if (!json_is_null(json_object_get(req, "network") ?: json_null()) &&
                   !json_is_true(internet)) {
            ret = http_reply_errorf(conn, SG_E_INVALID,
                                    "\"network\" (allowOut, denyOut) narrows a network: it goes "
                                    "with \"internet\": true");
        } else if (template && lang) {
            ret = http_reply_errorf(conn, SG_E_INVALID,
                                    "a template names its kernel: give \"template\" or "
                                    "\"language\", not both");
        } else {
            tenant_quota_t quota = {0};
            bool none;
            e2b_net_t net = {0};
            cleanup_free char *why = NULL;
            json_t *rules = json_pack("{s:O?}", "network", json_object_get(req, "network"));
            bool good =
                api_network_parse(rules, call->tenant ? call->tenant->name : NULL, &net, &why);
            json_decref(rules);
            if (!good) {
                ret = http_reply_errorf(conn, SG_E_INVALID, "%s", why);
                goto out;
            }
            json_t *mounts = api_volume_mounts(self, call, json_object_get(req, "volumeMounts"),
                                               snap != NULL || host != NULL, &none, &err);
            kernel_t *k = !mounts && !none
                              ? NULL
                              : api_create_context(
                                    self, call->tenant, lang ? json_string_value(lang) : "python",
                                    cwd ? json_string_value(cwd) : "/home/user",
                                    json_is_true(internet) ? &net : NULL, false, snap,
                                    json_string_value(template), host, mounts, &who, &quota, &err);
            json_decref(mounts);
            api_e2b_network_free(&net);
            ret = k ? api_context_created(self, conn, k, &call->state)
                    : api_reply_refused(conn, &quota, &err);
        }
    }
out:
    sg_error_free(&err);
    json_decref(req);
    return ret;
}

static enum MHD_Result context_get(void *arg, http_req_t *call)
{
    return http_reply_json(call->conn, 200, api_context_json(arg, http_arg(call, "context")));
}

static enum MHD_Result context_delete(void *arg, http_req_t *call)
{
    api_t *self = arg;
    const char *id = http_arg_id(call, "context"); /* the path's: it outlives the kernel */
    audit_who_t who;
    http_who(call, "rest", &who);
    kmgr_shutdown(self->kmgr, id, NULL);
    api_forget_context(self, id);
    audit_context(&who, "context.delete", id);
    return reply_status(call->conn, 204);
}

static enum MHD_Result context_pause_or_resume(api_t *self, http_req_t *call, bool pause)
{
    if (call->resumed)
        return answer_later(call);
    kernel_t *k = http_arg(call, "context");
    audit_who_t who;
    http_who(call, "rest", &who);
    audit_context(&who, pause ? "context.pause" : "context.resume", kernel_id(k));
    return api_pause_resume(self, call->conn, k, pause, &call->state);
}

static enum MHD_Result context_pause(void *arg, http_req_t *call)
{
    return context_pause_or_resume(arg, call, true);
}

static enum MHD_Result context_resume(void *arg, http_req_t *call)
{
    return context_pause_or_resume(arg, call, false);
}

static enum MHD_Result context_restart(void *arg, http_req_t *call)
{
    kernel_t *k = http_arg(call, "context");
    sg_error_t *err = NULL;
    tenant_quota_t quota; /* a paused or dead context runs again: max-live */
    if (tenant_admit_wake(k, &quota, &err) < 0 || kernel_restart(k, &err) < 0)
        return api_reply_refused(call->conn, &quota, &err);
    audit_who_t who;
    http_who(call, "rest", &who);
    audit_context(&who, "context.restart", kernel_id(k));
    return reply_status(call->conn, 204);
}

static void request_done(void *ctx, void *req_state, bool completed)
{
    stream_t *s = req_state;
    resp_set_gone(s->out);
    if (!s->done && s->metrics) {
        /* The client left first: the counts still come, and drop the
         * request's reference then. */
        loop_timer_end(s->api->loop, s->metrics_timer);
        s->metrics_timer = -1;
        s->done = true;
    } else if (!s->done && s->snapshot_wait) {
        /* The snapshot's callback still comes, and drops its reference. */
        s->done = true;
    } else if (!s->done) {
        /* The client went away first: the execution is interrupted, a
         * context goes on starting with nobody waiting for it.  No callback
         * follows, so the execution's (or observer's) reference goes too. */
        if (s->context_wait)
            kernel_unobserve(s->k, on_context_event, s);
        else
            exec_cancel(&s->exec, "api: the client left");
        s->done = true;
        s->refs--;
    }
    api_stream_unref(s);
}

int api_register(api_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/execute", execute_post, 0, NULL},
        {"GET", "/contexts", contexts_list, 0, NULL},
        {"POST", "/contexts", context_create, 0, NULL},
        {"GET", "/contexts/{context}", context_get, 0, NULL},
        {"DELETE", "/contexts/{context}", context_delete, 0, NULL},
        {"PUT", "/contexts/{context}/network", api_e2b_network_put, 0, NULL},
        {"POST", "/contexts/{context}/pause", context_pause, 0, NULL},
        {"POST", "/contexts/{context}/resume", context_resume, 0, NULL},
        {"POST", "/contexts/{context}/restart", context_restart, 0, NULL},
    };
    const http_front_t front = {.name = "rest", .ctx = self, .done = request_done};
    if (http_param(http, "context", tenants_resolve_session, tenants_session_owner, self->kmgr,
                   "no context '%s'", err) < 0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof routes[0], err) < 0 ||
        api_files_register(self, http, &front, err) < 0 ||
        api_snapshots_register(self, http, &front, err) < 0 ||
        api_commands_register(self, http, err) < 0 ||
        api_metrics_register(self, http, &front, err) < 0 ||
        api_e2b_register(self, http, request_done, err) < 0)
        return -1;
    return 0;
}

const json_t *api_sandbox_envs(api_t *self, kernel_t *k)
{
    if (kernel_host(k))
        k = kernel_host(k);
    json_t *e = json_object_get(json_object_get(self->contexts, kernel_id(k)), "e2b");
    json_t *envs = json_object_get(e, "envVars");
    return json_object_size(envs) ? envs : NULL;
}

const char *e2b_sandbox_header(struct MHD_Connection *conn)
{
    const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    if (!id || !*id || strcmp(id, "debug_sandbox_id") == 0 || strcmp(id, "default") == 0)
        return NULL;
    return id;
}

kernel_t *api_sandbox_context(api_t *self, const tenant_t *t, kernel_t *sandbox,
                              const char *language, const audit_who_t *who, tenant_quota_t *quota,
                              sg_error_t **err)
{
    if (kernel_host(sandbox))
        sandbox = kernel_host(sandbox);
    language = kspec_language_name(language);
    const kspec_t *want = spec_for(self, language);
    if (want && kernel_spec(sandbox) == want)
        return sandbox;
    cleanup_free char *key = xasprintf("sandbox:%s:%s", kernel_id(sandbox), language);
    const char *id = json_string_value(json_object_get(self->defaults, key));
    kernel_t *k = id ? kmgr_get(self->kmgr, id) : NULL;
    if (k && kernel_host(k) == sandbox && kernel_state(k) != KERNEL_DEAD)
        return k;
    k = api_create_context(self, t, language, "/home/user", NULL, true, NULL, NULL, sandbox, NULL,
                           who, quota, err);
    if (k) {
        json_object_set_new(self->defaults, key, json_string(kernel_id(k)));
        api_record_write(self, kernel_id(k));
    }
    return k;
}
