#include "gateway/jupyter/internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/http/http.h"
#include "gateway/jupyter/kernelspecs.h"
#include "gateway/jupyter/ws.h"
#include "gateway/observe/observe.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"

#define RESOURCE_MAX (1 << 20) /* bytes of one kernelspec resource file */

static jreq_t *jreq_new(jupyter_t *self, struct MHD_Connection *conn)
{
    jreq_t *r = xzalloc(sizeof *r);
    r->j = self;
    r->conn = conn;
    r->out = resp_new(self->loop, conn, self->wake, self->wake_arg);
    return r;
}

static void jreq_free(jreq_t *r)
{
    sg_error_free(&r->err);
    resp_free(&r->out);
    free(r);
}

jupyter_t *jupyter_new(loop_t *loop, kmgr_t *kmgr, const channels_config_t *cfg,
                       void (*wake)(void *), void *wake_arg)
{
    jupyter_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->ch = channels_new(loop, cfg, wake, wake_arg);
    self->sessions = json_object();
    tenants_count_source(TENANT_JUPYTER_SESSIONS, jupyter_sessions_of, self);
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->started = zclock_time();
    return self;
}

void jupyter_close(jupyter_t *self)
{
    if (self)
        channels_destroy(&self->ch);
}

void jupyter_destroy(jupyter_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    jupyter_t *self = *self_p;
    tenants_uncount_source(TENANT_JUPYTER_SESSIONS, jupyter_sessions_of, self);
    channels_destroy(&self->ch);
    json_decref(self->sessions);
    jupyter_terminal_forget(self);
    free(self);
    *self_p = NULL;
}

/* --- replies ---------------------------------------------------------------------- */

static json_t *fail_body(sg_errkind_t kind, char msg[512])
{
    utf8_scrub(msg); /* it may quote a URL, or be cut inside a character */
    const char *reason = MHD_get_reason_phrase_for(sg_error_http_status(kind));
    return json_pack("{s:s, s:s, s:s}", "message", msg, "reason", reason, "error",
                     sg_error_kind_name(kind));
}

enum MHD_Result jupyter_fail(struct MHD_Connection *conn, sg_errkind_t kind, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return http_reply_json(conn, sg_error_http_status(kind), fail_body(kind, msg));
}

/* The route layer's refusals (an unknown id, a wrong method) in the same shape. */
static struct MHD_Response *error_response(void *ctx, const sg_error_t *err)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return http_json_response(fail_body(err->kind, msg));
}

/* Answers with *err and frees it. */
enum MHD_Result jupyter_fail_err(struct MHD_Connection *conn, sg_error_t **err)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", (*err)->msg);
    json_t *body = fail_body((*err)->kind, msg);
    if ((*err)->quota) { /* a quota: which, as REST says it */
        json_object_set_new(body, "quota", json_string((*err)->quota));
        json_object_set_new(body, "limit", json_integer((*err)->limit));
    }
    enum MHD_Result ret = http_reply_json(conn, sg_error_http_status((*err)->kind), body);
    sg_error_free(err);
    return ret;
}

enum MHD_Result jupyter_no_content(struct MHD_Connection *conn)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = http_queue(conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}

json_t *jupyter_parse(struct MHD_Connection *conn, const char *body, size_t len,
                      enum MHD_Result *ret)
{
    if (len == 0)
        return json_object();
    json_error_t e;
    json_t *j = json_loadb(body, len, 0, &e);
    if (j == NULL) {
        *ret = jupyter_fail(conn, SG_E_INVALID, "request body is not JSON: %s (line %d, column %d)",
                            e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = jupyter_fail(conn, SG_E_INVALID, "request body must be a JSON object");
        return NULL;
    }
    return j;
}

/* --- models ------------------------------------------------------------------------ */

static void iso_time(int64_t wall_ms, char out[32])
{
    time_t s = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%06dZ", (int)(wall_ms % 1000) * 1000);
}

json_t *jupyter_kernel_model(kernel_t *k)
{
    char when[32];
    iso_time(zclock_time() - (zclock_mono() - kernel_last_activity(k)), when);
    const char *template = kernel_opts(k)->template; /* a template is a kernelspec here */
    return json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", kernel_id(k), "name",
                     template ? template : kernel_spec(k)->name, "last_activity", when,
                     "execution_state", kernel_execution_state(k), "connections",
                     kernel_connections(k));
}

static const char *default_kernelspec(jupyter_t *self)
{
    return jks_default(self->kmgr);
}

/* --- kernels ----------------------------------------------------------------------- */

/* What a new kernel runs first: the environment and working directory the
 * request asked for (Python kernels only). */
static void setup_kernel(kernel_t *k, json_t *env, const char *path)
{
    if (strcmp(kernel_spec(k)->language, "python") != 0)
        return;
    json_t *vars = json_object();
    const char *key;
    json_t *v;
    json_object_foreach (env, key, v)
        if (json_is_string(v))
            json_object_set(vars, key, v);
    bool use_path = path && *path && path[0] != '/' && strstr(path, "..") == NULL;
    if (json_object_size(vars) == 0 && !use_path) {
        json_decref(vars);
        return;
    }
    char *code = pyscript(PY_KERNEL_SETUP, json_pack("{s:o, s:s, s:b}", "env", vars, "path",
                                                     use_path ? path : "", "use_path", use_path));
    kernel_exec_opts_t o = {.silent = true};
    kernel_execute(k, code, &o, &(kernel_exec_cb_t){0}, NULL);
    free(code);
}

static void on_ready(const sg_error_t *err, void *arg)
{
    jreq_t *r = arg;
    r->ready = true;
    if (err)
        sg_error_set(&r->err, err->kind, "%s", err->msg);
    resp_ready(r->out);
}

/* Answers once kernel k is ready: with its model (or the session's). */
static enum MHD_Result answer(jupyter_t *self, jreq_t *r)
{
    if (r->err)
        return jupyter_fail_err(r->conn, &r->err);
    kernel_t *k = kmgr_get(self->kmgr, r->kernel_id);
    if (k == NULL)
        return jupyter_fail(r->conn, SG_E_NOTFOUND, "kernel %s is gone", r->kernel_id);
    json_t *model;
    char location[128];
    if (r->session_id[0]) {
        json_t *s = json_object_get(self->sessions, r->session_id);
        if (s == NULL)
            return jupyter_fail(r->conn, SG_E_NOTFOUND, "session %s is gone", r->session_id);
        model = jupyter_session_model(self, s);
        snprintf(location, sizeof location, "/api/sessions/%s", r->session_id);
    } else {
        model = jupyter_kernel_model(k);
        snprintf(location, sizeof location, "/api/kernels/%s", r->kernel_id);
    }
    char *text = json_dumps(model, JSON_COMPACT);
    json_decref(model);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (r->status == 201)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    enum MHD_Result ret = http_queue(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Waits for k, then answers with status; r becomes the request's state. */
enum MHD_Result jupyter_when_ready(jupyter_t *self, struct MHD_Connection *conn, kernel_t *k,
                                   unsigned status, const char *session_id, void **req_state)
{
    jreq_t *r = jreq_new(self, conn);
    r->status = status;
    snprintf(r->kernel_id, sizeof r->kernel_id, "%s", kernel_id(k));
    if (session_id)
        snprintf(r->session_id, sizeof r->session_id, "%s", session_id);
    *req_state = r;
    channels_when_ready(self->ch, k, on_ready, r);
    if (r->ready)
        return answer(self, r);
    return resp_wait(r->out);
}

/* Whether a new kernel asks for a network: "internet": true in the request,
 * or KERNEL_INTERNET in its env, which is how a Jupyter server started with
 * --gateway-url passes on its own KERNEL_* variables (Enterprise Gateway's
 * convention). */
static int want_internet(const jupyter_t *self, json_t *req, json_t *env, bool *internet,
                         sg_error_t **err)
{
    json_t *flag = json_object_get(req, "internet");
    const char *var = json_string_value(json_object_get(env, "KERNEL_INTERNET"));
    *internet = false;
    if (flag && !json_is_null(flag) && !json_is_boolean(flag))
        return sg_error_set(err, SG_E_INVALID, "'internet' must be a boolean");
    if (var && strcasecmp(var, "true") != 0 && strcmp(var, "1") != 0 &&
        strcasecmp(var, "false") != 0 && strcmp(var, "0") != 0 && *var)
        return sg_error_set(err, SG_E_INVALID, "KERNEL_INTERNET must be true or false, not '%.32s'",
                            var);
    *internet =
        json_is_true(flag) || (var && (strcasecmp(var, "true") == 0 || strcmp(var, "1") == 0));
    if (*internet && !kmgr_has_egress(self->kmgr))
        return sg_error_set(err, SG_E_INVALID,
                            "a kernel with a network (internet/KERNEL_INTERNET): this server gives "
                            "sandboxes no network (its operator has not set --egress-allow)");
    return 0;
}

/* Who the kernel is for, as its env says: KERNEL_USERNAME, which a Jupyter
 * server started with --gateway-url sends when it has it in its environment
 * (Enterprise Gateway's convention; JupyterHub can set it per user).  A
 * label the client chooses, recorded with the session, not an identity: the
 * key says whose the kernel is.  NULL when absent or empty. */
#define USERNAME_MAX 256
static int kernel_username_of(json_t *env, const char **username, sg_error_t **err)
{
    json_t *v = json_object_get(env, "KERNEL_USERNAME");
    *username = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    bool plain = s && n <= USERNAME_MAX && strlen(s) == n;
    for (size_t i = 0; plain && i < n; i++)
        plain = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f;
    if (!plain)
        return sg_error_set(err, SG_E_INVALID,
                            "KERNEL_USERNAME must be a string of at most %d bytes without "
                            "control characters",
                            USERNAME_MAX);
    *username = n ? s : NULL;
    return 0;
}

/* A new kernel of tenant t's (its quotas checked: SG_E_QUOTA, a 429). */
kernel_t *jupyter_start_kernel(jupyter_t *self, const tenant_t *t, json_t *req,
                               const audit_who_t *who, sg_error_t **err)
{
    json_t *name = json_object_get(req, "name");
    json_t *env = json_object_get(req, "env");
    json_t *path = json_object_get(req, "path");
    if ((name && !json_is_string(name) && !json_is_null(name)) ||
        (env && !json_is_object(env) && !json_is_null(env)) ||
        (path && !json_is_string(path) && !json_is_null(path))) {
        sg_error_set(err, SG_E_INVALID, "name and path must be strings, env an object");
        return NULL;
    }
    bool internet;
    const char *username;
    if (want_internet(self, req, env, &internet, err) < 0 ||
        kernel_username_of(env, &username, err) < 0)
        return NULL;
    const char *n = json_string_value(name);
    /* KERNEL_SNAPSHOT: a kernel with a snapshot's state (the REST API's
     * snapshots; Jupyter Server's --gateway-url forwards KERNEL_ env). */
    json_t *snap_v = json_object_get(env, "KERNEL_SNAPSHOT");
    const char *sid = json_string_value(snap_v);
    const kmgr_snapshot_t *snap = sid && *sid ? kmgr_snapshot_get(self->kmgr, sid) : NULL;
    if ((snap_v && !json_is_null(snap_v) && !sid) || (sid && *sid && !snap) ||
        (snap && !tenant_sees(t, snap->owner))) {
        sg_error_set(err, sid ? SG_E_NOTFOUND : SG_E_INVALID,
                     sid ? "KERNEL_SNAPSHOT: no snapshot '%s'" : "KERNEL_SNAPSHOT must be a string",
                     sid);
        return NULL;
    }
    if (snap) /* a snapshot's kernel has its network, or none (as POST /contexts) */
        internet = snap->internet;
    tenant_quota_t quota;
    if (tenant_admit(t, internet, &quota, err) < 0)
        return NULL;
    kmgr_start_opts_t so = tenant_start_opts(t, internet);
    so.snapshot = snap ? snap->id : NULL;
    so.template = n && kmgr_template(self->kmgr, n) ? n : NULL; /* kernelspecs.h */
    kernel_t *k =
        kmgr_start_with(self->kmgr, n && *n ? n : default_kernelspec(self), &so, NULL, NULL, err);
    if (k == NULL)
        return NULL;
    if (username)
        kmgr_set_username(self->kmgr, k, username);
    setup_kernel(k, env, json_string_value(path));
    json_t *fields = json_pack("{s:s, s:s, s:s, s:b}", "context", kernel_id(k), "language",
                               kernel_spec(k)->language, "kernelspec", kernel_spec(k)->name,
                               "internet", internet);
    if (username)
        json_object_set_new(fields, "username", json_string(username));
    audit_event(who, "kernel.create", fields);
    log_info("jupyter: kernel %s started (%s%s%s%s)", kernel_id(k), kernel_spec(k)->name,
             internet ? ", with a network" : "", username ? ", for user " : "",
             username ? username : "");
    return k;
}

/* GET /api/kernels/{id}/channels: the WebSocket handshake (RFC 6455). */
static void on_upgrade(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra,
                       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    jreq_t *r = cls;
    kernel_t *k = kmgr_get(r->j->kmgr, r->kernel_id);
    if (k == NULL || r->j->ch == NULL) { /* gone, or sandgate is stopping */
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    audit_who_t who;
    audit_who_fd(&who, "jupyter", sock);
    audit_who_set_tenant(&who, r->tenant);
    r->upgraded = true;
    channels_attach(r->j->ch, k, r->ws_session, r->ws_v1, sock, urh, extra, extra_len, &who, r);
    (void)conn, (void)req_cls;
}

static bool header_has_token(struct MHD_Connection *conn, const char *name, const char *token)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
    if (v == NULL)
        return false;
    size_t n = strlen(token);
    for (const char *p = v; *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ",");
        size_t t = len;
        while (t && (p[t - 1] == ' ' || p[t - 1] == '\t'))
            t--;
        if (t == n && strncasecmp(p, token, n) == 0)
            return true;
        p += len;
    }
    return false;
}

static enum MHD_Result channels_route(jupyter_t *self, struct MHD_Connection *conn, kernel_t *k,
                                      const tenant_t *tenant, void **req_state)
{
    const char *upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Upgrade");
    if (upgrade == NULL || strcasecmp(upgrade, "websocket") != 0 ||
        !header_has_token(conn, "Connection", "upgrade"))
        return jupyter_fail(conn, SG_E_INVALID,
                            "this is a WebSocket endpoint: send 'Upgrade: websocket' and "
                            "'Connection: Upgrade'");
    const char *version =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    if (version == NULL || strcmp(version, "13") != 0) {
        json_t *body =
            json_pack("{s:s, s:s, s:s}", "message", "unsupported WebSocket version (use 13)",
                      "reason", "Upgrade Required", "error", "invalid");
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(r, "Sec-WebSocket-Version", "13");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        enum MHD_Result ret = http_queue(conn, 426, r);
        MHD_destroy_response(r);
        return ret;
    }
    char accept[29];
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    if (key == NULL || ws_accept_key(key, accept) < 0)
        return jupyter_fail(conn, SG_E_INVALID, "missing or malformed Sec-WebSocket-Key");
    const char *session = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "session_id");
    if (session && strlen(session) > 128)
        return jupyter_fail(conn, SG_E_INVALID, "session_id longer than 128 characters");
    if (kernel_state(k) == KERNEL_DEAD)
        return jupyter_fail(conn, SG_E_UNAVAILABLE, "kernel %s is dead; restart it first",
                            kernel_id(k));

    jreq_t *r = jreq_new(self, conn);
    snprintf(r->kernel_id, sizeof r->kernel_id, "%s", kernel_id(k));
    snprintf(r->ws_session, sizeof r->ws_session, "%s", session ? session : "");
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant ? tenant->name : "");
    /* As jupyter_server: v1 when the client offers it, else the default format. */
    r->ws_v1 = header_has_token(conn, "Sec-WebSocket-Protocol", CHANNELS_V1_PROTOCOL);
    *req_state = r;
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, r);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
    if (r->ws_v1)
        MHD_add_response_header(resp, "Sec-WebSocket-Protocol", CHANNELS_V1_PROTOCOL);
    enum MHD_Result ret = http_queue(conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A request that waited for a kernel resumed: the kernel it waited for is
 * ready (or not). */
enum MHD_Result jupyter_resumed(jupyter_t *self, http_req_t *call)
{
    jreq_t *r = call->state;
    if (!r->ready)
        return resp_wait(r->out);
    return answer(self, r);
}

static enum MHD_Result list_kernels(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    json_t *list = json_array();
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        if (tenant_sees(call->tenant, kernel_owner(k))) /* only the caller's own */
            json_array_append_new(list, jupyter_kernel_model(k));
    }
    return http_reply_json(call->conn, 200, list);
}

static enum MHD_Result post_kernel(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    struct MHD_Connection *conn = call->conn;
    if (call->resumed)
        return jupyter_resumed(self, call);
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    audit_who_t who;
    http_who(call, "jupyter", &who);
    json_t *req = jupyter_parse(conn, call->body, call->len, &ret);
    if (req == NULL)
        return ret;
    kernel_t *k = jupyter_start_kernel(self, call->tenant, req, &who, &err);
    json_decref(req);
    if (k == NULL) {
        return jupyter_fail_err(conn, &err);
    }
    return jupyter_when_ready(self, conn, k, 201, NULL, &call->state);
}

static enum MHD_Result get_kernel(void *arg, http_req_t *call)
{
    return http_reply_json(call->conn, 200, jupyter_kernel_model(http_arg(call, "kernel")));
}

static enum MHD_Result delete_kernel(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    const char *id = http_arg_id(call, "kernel"); /* the path's: it outlives the kernel */
    audit_who_t who;
    http_who(call, "jupyter", &who);
    kmgr_shutdown(self->kmgr, id, NULL);
    audit_event(&who, "kernel.delete", json_pack("{s:s}", "context", id));
    log_info("jupyter: kernel %s shut down", id);
    return jupyter_no_content(call->conn);
}

static enum MHD_Result get_channels(void *arg, http_req_t *call)
{
    return channels_route(arg, call->conn, http_arg(call, "kernel"), call->tenant, &call->state);
}

static enum MHD_Result post_interrupt(void *arg, http_req_t *call)
{
    kernel_t *k = http_arg(call, "kernel");
    sg_error_t *err = NULL;
    if (kernel_interrupt(k, &err) < 0) {
        return jupyter_fail_err(call->conn, &err);
    }
    audit_who_t who;
    http_who(call, "jupyter", &who);
    audit_event(&who, "kernel.interrupt", json_pack("{s:s}", "context", kernel_id(k)));
    return jupyter_no_content(call->conn);
}

static enum MHD_Result post_restart(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    if (call->resumed)
        return jupyter_resumed(self, call);
    kernel_t *k = http_arg(call, "kernel");
    sg_error_t *err = NULL;
    tenant_quota_t quota; /* a paused or dead kernel runs again: max-live */
    if (tenant_admit_wake(k, &quota, &err) < 0 || kernel_restart(k, &err) < 0)
        return jupyter_fail_err(call->conn, &err);
    audit_who_t who;
    http_who(call, "jupyter", &who);
    audit_event(&who, "kernel.restart", json_pack("{s:s}", "context", kernel_id(k)));
    return jupyter_when_ready(self, call->conn, k, 200, NULL, &call->state);
}

/* --- kernelspecs ------------------------------------------------------------------- */

static enum MHD_Result list_kernelspecs(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    return http_reply_json(call->conn, 200, jks_list(self->kmgr));
}

static enum MHD_Result get_kernelspec(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    return http_reply_json(call->conn, 200, jks_model(self->kmgr, http_arg_id(call, "kernelspec")));
}

/* GET /kernelspecs/{kernelspec}/{file}: a logo or other resource of a
 * kernelspec. */
static enum MHD_Result get_resource(void *arg, http_req_t *call)
{
    struct MHD_Connection *conn = call->conn;
    const kspec_t *s = http_arg(call, "kernelspec");
    const char *name = s->name;
    const char *file = call->rest[0] == '/' ? call->rest + 1 : call->rest;
    if (!jks_resource_name(file))
        return jupyter_fail(conn, SG_E_NOTFOUND, "no resource '%s' for kernelspec '%s'", file,
                            name);
    char *path = xasprintf("%s/%s", s->dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    free(path);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > RESOURCE_MAX) {
        if (fd >= 0)
            close(fd);
        return jupyter_fail(conn, SG_E_NOTFOUND, "no resource '%s' for kernelspec '%s'", file,
                            name);
    }
    struct MHD_Response *r = MHD_create_response_from_fd((size_t)st.st_size, fd);
    size_t fl = strlen(file);
    const char *type = strcmp(file + fl - 4, ".png") == 0   ? "image/png"
                       : strcmp(file + fl - 4, ".svg") == 0 ? "image/svg+xml"
                       : strcmp(file + fl - 3, ".js") == 0  ? "application/javascript"
                                                            : "text/css";
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "max-age=3600");
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- the server ------------------------------------------------------------------ */

static enum MHD_Result get_api(void *arg, http_req_t *call)
{
    return http_reply_json(
        call->conn, 200, json_pack("{s:s, s:s}", "version", PACKAGE_VERSION, "server", "sandgate"));
}

static enum MHD_Result get_status(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    char started[32], now[32];
    iso_time(self->started, started);
    iso_time(zclock_time(), now);
    size_t conns = 0;
    size_t kernels = 0; /* the caller's own */
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        if (!tenant_sees(call->tenant, kernel_owner(k)))
            continue;
        kernels++;
        conns += (size_t)kernel_connections(k);
    }
    return http_reply_json(call->conn, 200,
                           json_pack("{s:s, s:s, s:I, s:I}", "started", started, "last_activity",
                                     now, "kernels", (json_int_t)kernels, "connections",
                                     (json_int_t)conns));
}

/* --- registration ------------------------------------------------------------------ */

/* http_front_t.revoke: a WebSocket is closed with 1008; a request still
 * waiting for its kernel is the server's to end. */
static bool request_revoke(void *ctx, void *req_state)
{
    jupyter_t *self = ctx;
    jreq_t *r = req_state;
    if (!r->upgraded)
        return false;
    if (self->ch)
        channels_revoke(self->ch, r, "the key was revoked");
    return true;
}

static void request_done(void *ctx, void *req_state, bool completed)
{
    jupyter_t *self = ctx;
    jreq_t *r = req_state;
    resp_set_gone(r->out);
    if (!r->ready && self->ch)
        channels_cancel_wait(self->ch, r);
    jreq_free(r);
}

/* The parameter kinds: a kernel (a kmgr session), a kernelspec, and
 * sessions.c's Jupyter session; the messages are jupyter_server's. */

static void *resolve_kernelspec(void *arg, const char *id, const http_req_t *call)
{
    jupyter_t *self = arg;
    return (void *)jks_spec(self->kmgr, id);
}

void jupyter_set_commands(jupyter_t *self, commands_t *commands)
{
    self->commands = commands;
}

int jupyter_register(jupyter_t *self, http_server_t *http, sg_error_t **err)
{
    /* jupyter_server takes each collection with and without a final '/'. */
    static const http_route_t routes[] = {
        {"GET", "/api", get_api, 0, NULL},
        {"GET", "/api/", get_api, 0, NULL},
        {"GET", "/api/status", get_status, 0, NULL},
        {"GET", "/api/kernelspecs", list_kernelspecs, 0, NULL},
        {"GET", "/api/kernelspecs/", list_kernelspecs, 0, NULL},
        {"GET", "/api/kernelspecs/{kernelspec}", get_kernelspec, 0, NULL},
        {"GET", "/kernelspecs/{kernelspec}/*", get_resource, 0, NULL},
        {"GET", "/api/kernels", list_kernels, 0, NULL},
        {"GET", "/api/kernels/", list_kernels, 0, NULL},
        {"POST", "/api/kernels", post_kernel, 0, NULL},
        {"POST", "/api/kernels/", post_kernel, 0, NULL},
        {"GET", "/api/kernels/{kernel}", get_kernel, 0, NULL},
        {"DELETE", "/api/kernels/{kernel}", delete_kernel, 0, NULL},
        {"POST", "/api/kernels/{kernel}/interrupt", post_interrupt, 0, NULL},
        {"POST", "/api/kernels/{kernel}/restart", post_restart, 0, NULL},
        {"GET", "/api/kernels/{kernel}/channels", get_channels, 0, NULL},
    };
    const http_front_t front = {.name = "jupyter",
                                .ctx = self,
                                .done = request_done,
                                .revoke = request_revoke,
                                .error_response = error_response};
    if (http_param(http, "kernel", tenants_resolve_session, tenants_session_owner, self->kmgr,
                   "Kernel does not exist: %s", err) < 0 ||
        http_param(http, "kernelspec", resolve_kernelspec, NULL, self, "Kernel spec %s not found",
                   err) < 0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof routes[0], err) < 0 ||
        jupyter_sessions_register(self, http, &front, err) < 0 ||
        (self->commands && jupyter_terminal_register(self, http, err) < 0))
        return -1;
    return 0;
}
