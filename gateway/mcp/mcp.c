#include "gateway/mcp/mcp.h"

#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/records.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/mcp/internal.h"
#include "gateway/tenants/tenants.h"

#define MAX_BATCH 64 /* messages in one JSON-RPC batch */
#define TICK_MS 1000 /* idle culling */

/* JSON-RPC 2.0 error codes, and the two the MCP transport adds. */
enum {
    RPC_PARSE = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_NO_METHOD = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_SERVER = -32000,
    RPC_NO_SESSION = -32001,
};

/* Newest first: initialize answers with the client's version when it is
 * here, else with the first. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

const char *const mcp_langs[MCP_LANGS] = {"python", "javascript", "typescript", "r", "bash"};

void mcp_config_defaults(mcp_config_t *cfg)
{
    *cfg = (mcp_config_t){.state_dir = NULL,
                          .kernelspec = "python3",
                          .idle_ms = 3600 * 1000,
                          .exec = NULL,
                          .max_file = 8 << 20,
                          .max_upload = (size_t)256 << 20,
                          .max_sessions = 1024,
                          .loopback_origins = false};
}

/* --- JSON-RPC and HTTP answers ------------------------------------------------ */

json_t *mcp_rpc_result(const json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static json_t *rpc_error(const json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static json_t *rpc_error(const json_t *id, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    utf8_scrub(msg); /* it may quote a header */
    json_t *e = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                          "error", "code", code, "message", msg);
    free(msg);
    return e;
}

static enum MHD_Result send_body(struct MHD_Connection *conn, unsigned status, const char *type,
                                 char *text, const char *session)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (session && *session)
        MHD_add_response_header(r, "Mcp-Session-Id", session);
    enum MHD_Result ret = http_queue(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A transport-level refusal: an HTTP status with a JSON-RPC error body. */
static enum MHD_Result refuse(struct MHD_Connection *conn, unsigned status, int code,
                              const char *msg)
{
    json_t *e = rpc_error(NULL, code, "%s", msg);
    char *text = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return send_body(conn, status, "application/json", text, NULL);
}

/* One message as a server-sent event. */
static char *sse_event(const json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    char *ev = xasprintf("event: message\ndata: %s\n\n", text);
    free(text);
    return ev;
}

/* A tenant's quota reached: JSON-RPC's error with the quota's name and value
 * in its data, as the REST API's 429 body names them. */
static json_t *quota_error(const json_t *id, const char *quota, long long limit)
{
    json_t *e = rpc_error(
        id, RPC_SERVER, "quota_exceeded: this key's tenant may not exceed %s (%lld)", quota, limit);
    json_object_set_new(json_object_get(e, "error"), "data",
                        json_pack("{s:s, s:s, s:I}", "error", "quota_exceeded", "quota", quota,
                                  "limit", (json_int_t)limit));
    return e;
}

/* --- sessions ----------------------------------------------------------------- */

/* The MCP sessions of owner's open now: its max-mcp-sessions counts them. */
static long long sessions_of(void *arg, const char *owner)
{
    mcp_t *self = arg;
    long long n = 0;
    for (session_t *s = zhashx_first(self->sessions); s; s = zhashx_next(self->sessions))
        n += strcmp(s->owner, owner) == 0;
    return n;
}

/* The record: Python's kernel as kernel_id (as before there were others),
 * the other languages' in kernels. */
static void record_write(mcp_t *self, const session_t *s)
{
    if (!self->records)
        return;
    json_t *others = json_object();
    for (int i = LANG_PYTHON + 1; i < MCP_LANGS; i++)
        if (s->kernels[i].id)
            json_object_set_new(others, mcp_langs[i], json_string(s->kernels[i].id));
    json_t *rec = json_pack("{s:s, s:s, s:s?, s:o, s:b, s:s}", "id", s->id, "protocol", s->version,
                            "kernel_id", s->kernels[LANG_PYTHON].id, "kernels", others, "internet",
                            s->internet, "tenant", s->owner);
    records_put(self->records, s->id, rec);
    json_decref(rec);
}

static void session_free(void **item)
{
    session_t *s = *item;
    if (s) {
        for (int i = 0; i < MCP_LANGS; i++)
            free(s->kernels[i].id);
        free(s);
    }
    *item = NULL;
}

static session_t *session_add(mcp_t *self, const char *id, const char *version)
{
    session_t *s = xzalloc(sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->version, sizeof s->version, "%s", version);
    s->last_seen = zclock_mono();
    zhashx_insert(self->sessions, s->id, s);
    return s;
}

/* Ends a session: its kernels and workspaces go, and its record. */
static void session_end(mcp_t *self, session_t *s, const char *why)
{
    char *kids[MCP_LANGS];
    for (int i = 0; i < MCP_LANGS; i++) {
        kids[i] = s->kernels[i].id;
        s->kernels[i].id = NULL;
    }
    log_info("mcp: session %s ended (%s)", s->id, why);
    audit_event(&self->who, "session.delete",
                json_pack("{s:s, s:s?, s:s}", "session", s->id, "context", kids[LANG_PYTHON],
                          "reason", why));
    if (self->records)
        records_remove(self->records, s->id);
    /* Removed before the kernels: their shutdown ends the calls in flight,
     * whose completion looks the session up. */
    zhashx_delete(self->sessions, s->id);
    for (int i = 0; i < MCP_LANGS; i++) {
        if (kids[i] && kmgr_get(self->kmgr, kids[i]))
            kmgr_shutdown(self->kmgr, kids[i], NULL);
        free(kids[i]);
    }
}

/* The session's kernel for language lang, started (from snapshot snap,
 * when given) when there is none.  *note says so when a kernel it had is
 * gone (variables lost). */
static kernel_t *session_kernel(mcp_t *self, session_t *s, int lang, const kmgr_snapshot_t *snap,
                                const char **note, sg_error_t **err)
{
    *note = NULL;
    session_kernel_t *sk = &s->kernels[lang];
    kernel_t *k = sk->id ? kmgr_get(self->kmgr, sk->id) : NULL;
    if (k)
        return k;
    if (sk->id) {
        sk->lost = true;
        free(sk->id);
        sk->id = NULL;
    }
    if (!self->specs[lang]) {
        sg_error_set(err, SG_E_INVALID, "this server has no kernel for %s", mcp_langs[lang]);
        return NULL;
    }
    tenant_t t;
    tenant_quota_t quota;
    if (!tenant_by_name(s->owner, &t)) {
        sg_error_set(err, SG_E_AUTH, "this session's tenant '%s' has no key any more", s->owner);
        return NULL;
    }
    if (tenant_admit(&t, s->internet, &quota, err) < 0)
        return NULL;
    kmgr_start_opts_t so = tenant_start_opts(&t, s->internet);
    so.snapshot = snap ? snap->id : NULL;
    k = kmgr_start_with(self->kmgr, snap ? snap->kernelspec : self->specs[lang], &so, NULL, NULL,
                        err);
    if (!k)
        return NULL;
    kernel_add_connections(k, 1); /* culled with the MCP session, not on its own */
    sk->id = xstrdup(kernel_id(k));
    record_write(self, s);
    audit_event(&self->who, "kernel.create",
                json_pack("{s:s, s:s, s:s, s:s, s:b, s:s?}", "session", s->id, "context", sk->id,
                          "language", mcp_langs[lang], "kernelspec", kernel_spec(k)->name,
                          "internet", s->internet, "snapshot", snap ? snap->id : NULL));
    log_info("mcp: session %s has %s kernel %s", s->id, mcp_langs[lang], sk->id);
    if (sk->lost && !snap)
        *note = "[sandgate: this session's previous kernel is gone (removed, or idle past the "
                "timeout); this is a fresh one: earlier variables and workspace files are lost]";
    sk->lost = false;
    return k;
}

kernel_t *mcp_session_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err)
{
    return session_kernel(self, s, LANG_PYTHON, NULL, note, err);
}

kernel_t *mcp_lang_kernel(mcp_t *self, session_t *s, int lang, const char **note, sg_error_t **err)
{
    return session_kernel(self, s, lang, NULL, note, err);
}

kernel_t *mcp_session_kernel_from(mcp_t *self, session_t *s, const kmgr_snapshot_t *snap,
                                  const char **note, sg_error_t **err)
{
    return session_kernel(self, s, LANG_PYTHON, snap, note, err);
}

/* The session's kernel for a file tool: its workspace must exist (a kernel
 * started through the launcher gets it a moment after it is made). */
kernel_t *mcp_files_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err)
{
    kernel_t *k = mcp_session_kernel(self, s, note, err);
    if (k && !kernel_prepared(k)) {
        sg_error_set(err, SG_E_CONFLICT,
                     "this session's kernel is still starting (its workspace is being "
                     "prepared); retry shortly");
        return NULL;
    }
    return k;
}

/* A recorded session's kernel kid for a language: taken back, or lost.
 * Returns whether it is there. */
static bool adopt_kernel(mcp_t *self, session_kernel_t *sk, const char *kid)
{
    kernel_t *k = kid ? kmgr_get(self->kmgr, kid) : NULL;
    if (k) {
        sk->id = xstrdup(kid);
        kernel_add_connections(k, 1);
    } else if (kid) {
        sk->lost = true;
    }
    return k != NULL;
}

/* A session a previous sandgate left in STATE/mcp. */
static void record_load(const char *id, const json_t *rec, void *arg)
{
    mcp_t *self = arg;
    const char *version = json_string_value(json_object_get(rec, "protocol"));
    const char *kid = json_string_value(json_object_get(rec, "kernel_id"));
    if (!version || strlen(id) != 36) {
        log_warn("mcp: ignoring the malformed session record %s", id);
        records_remove(self->records, id);
        return;
    }
    session_t *s = session_add(self, id, version);
    s->internet = json_is_true(json_object_get(rec, "internet"));
    const char *owner = json_string_value(json_object_get(rec, "tenant"));
    snprintf(s->owner, sizeof s->owner, "%s", owner ? owner : "admin");
    bool kept = adopt_kernel(self, &s->kernels[LANG_PYTHON], kid);
    int others = 0;
    for (int i = LANG_PYTHON + 1; i < MCP_LANGS; i++)
        others += adopt_kernel(
            self, &s->kernels[i],
            json_string_value(json_object_get(json_object_get(rec, "kernels"), mcp_langs[i])));
    log_info("mcp: session %s carried over%s (and %d kernels of other languages)", id,
             kept ? " with its kernel" : (kid ? " (its kernel is gone)" : ""), others);
}

static void on_tick(loop_t *loop, int timer_id, void *arg)
{
    mcp_t *self = arg;
    if (self->cfg.idle_ms <= 0)
        return;
    int64_t now = zclock_mono();
    zlistx_t *idle = zlistx_new();
    for (session_t *s = zhashx_first(self->sessions); s; s = zhashx_next(self->sessions))
        if (s->calls == 0 && now - s->last_seen >= self->cfg.idle_ms)
            zlistx_add_end(idle, s);
    audit_who_conn(&self->who, "mcp", NULL);
    for (session_t *s = zlistx_first(idle); s; s = zlistx_next(idle))
        session_end(self, s, "idle past the timeout");
    zlistx_destroy(&idle);
}

/* --- one POST ------------------------------------------------------------------ */

static void post_unref(post_t *p)
{
    if (--p->refs > 0)
        return;
    resp_free(&p->out);
    json_decref(p->replies);
    free(p);
}

/* An answer (or a notification, while streaming) for the client; steals msg. */
void mcp_post_send(post_t *p, json_t *msg)
{
    if (p->streaming) {
        char *ev = sse_event(msg);
        resp_write(p->out, ev, strlen(ev));
        free(ev);
        json_decref(msg);
    } else {
        json_array_append_new(p->replies, msg);
    }
}

/* A call of this POST is over (answered or cancelled). */
void mcp_post_call_over(post_t *p)
{
    if (--p->pending == 0) {
        if (p->streaming)
            resp_end(p->out);
        else
            resp_ready(p->out);
    }
    post_unref(p);
}

/* Every answer of a POST whose calls are over. */
static enum MHD_Result post_answer(post_t *p)
{
    size_t n = json_array_size(p->replies);
    if (n == 0) /* notifications and responses only, or every call cancelled */
        return send_body(p->conn, 202, NULL, xstrdup(""), p->session);
    if (p->accept_json) {
        char *text =
            json_dumps(p->batch ? p->replies : json_array_get(p->replies, 0), JSON_COMPACT);
        return send_body(p->conn, 200, "application/json", text, p->session);
    }
    char *text = xstrdup("");
    size_t i;
    json_t *m;
    json_array_foreach (p->replies, i, m) {
        char *ev = sse_event(m), *joined = xasprintf("%s%s", text, ev);
        free(ev);
        free(text);
        text = joined;
    }
    return send_body(p->conn, 200, "text/event-stream", text, p->session);
}

/* --- dispatch ------------------------------------------------------------------ */

static bool supported_version(const char *v)
{
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

static json_t *initialize(mcp_t *self, post_t *p, const json_t *id, json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked)
        return rpc_error(id, RPC_INVALID_PARAMS, "initialize needs params.protocolVersion");
    const char *version = supported_version(asked) ? asked : versions[0];
    /* A network is asked for in the server's URL (/mcp?internet=true), the
     * one setting every MCP client lets its user write. */
    const char *net = MHD_lookup_connection_value(p->conn, MHD_GET_ARGUMENT_KIND, "internet");
    bool internet = net && (strcmp(net, "true") == 0 || strcmp(net, "1") == 0);
    if (net && !internet && strcmp(net, "false") != 0 && strcmp(net, "0") != 0)
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "the URL's internet= must be true or false, not '%.32s'", net);
    if (internet && !p->tenant.internet && !p->tenant.admin) {
        metrics_tenant(p->tenant.name, "quota:internet");
        return quota_error(id, "internet", 0);
    }
    if (internet && !kmgr_has_egress(self->kmgr))
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "internet=true: this server gives sandboxes no network (its operator "
                         "has not set --egress-allow)");
    char sid[37];
    replica_uuid(sid);
    session_t *s = session_add(self, sid, version);
    s->internet = internet;
    snprintf(s->owner, sizeof s->owner, "%s", p->tenant.name);
    record_write(self, s);
    snprintf(p->session, sizeof p->session, "%s", sid);
    audit_event(
        &self->who, "session.create",
        json_pack("{s:s, s:s, s:b}", "session", sid, "protocol", version, "internet", internet));
    json_t *client = json_object_get(params, "clientInfo");
    const char *cname = json_string_value(json_object_get(client, "name"));
    const char *cver = json_string_value(json_object_get(client, "version"));
    log_info("mcp: session %s started (client %s %s, protocol %s%s)", sid, cname ? cname : "?",
             cver ? cver : "?", version, internet ? ", with a network" : "");
    cleanup_free char *instructions = xasprintf(
        "execute_python runs Python in a stateful, sandboxed Jupyter kernel that belongs to this "
        "session (%s); execute_code runs the other languages it lists, each in a kernel of its "
        "own. State persists between calls; files live in " HOME "; files written under output/ "
        "come back with the result. Use list_files, read_file and write_file for the Python "
        "kernel's workspace, and restart_kernel for a fresh Python kernel.",
        internet ? "with a network: the internet, as the server allows" : "no network");
    return mcp_rpc_result(id,
                          json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
                                    version, "capabilities", "tools", "listChanged", 0,
                                    "serverInfo", "name", "sandgate", "title", "sandgate",
                                    "version", PACKAGE_VERSION, "instructions", instructions));
}

/* A request (it has an id).  Returns its answer, or NULL when a call is
 * under way and answers later. */
static json_t *request(mcp_t *self, post_t *p, session_t *s, const char *method, const json_t *id,
                       json_t *params)
{
    if (strcmp(method, "initialize") == 0)
        return initialize(self, p, id, params);
    if (strcmp(method, "ping") == 0)
        return mcp_rpc_result(id, json_object());
    if (strcmp(method, "tools/list") == 0)
        return mcp_rpc_result(id, json_pack("{s:O}", "tools", self->tools[s && s->internet]));
    if (strcmp(method, "tools/call") != 0)
        return rpc_error(id, RPC_NO_METHOD, "Method not found: %s", method);
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    if (!name)
        return rpc_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name (a string)");
    if (args && !json_is_object(args) && !json_is_null(args))
        return rpc_error(id, RPC_INVALID_PARAMS, "params.arguments must be an object");
    json_t *empty = json_object();
    if (!json_is_object(args))
        args = empty;
    bool unknown;
    json_t *result =
        mcp_tools_call(self, p, s, id, name, args, json_object_get(params, "_meta"), &unknown);
    json_decref(empty);
    if (unknown)
        return rpc_error(id, RPC_INVALID_PARAMS, "Unknown tool: %s", name);
    return result ? mcp_rpc_result(id, result) : NULL;
}

/* notifications/cancelled: the client gave up a request.  The spec says a
 * cancelled request gets no answer. */
static void cancel(mcp_t *self, session_t *s, json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls))
        if (strcmp(c->session, s->id) == 0 && json_equal(c->id, rid)) {
            mcp_call_cancel(c, "cancelled a call");
            return;
        }
}

static void dispatch(mcp_t *self, post_t *p, session_t *s, json_t *msg)
{
    if (!json_is_object(msg)) {
        mcp_post_send(p,
                      rpc_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: not a JSON object"));
        return;
    }
    json_t *id = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    json_t *params = json_object_get(msg, "params");
    const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));
    bool id_ok = json_is_string(id) || json_is_integer(id);
    if (!jsonrpc || strcmp(jsonrpc, "2.0") != 0) {
        mcp_post_send(p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
                                   "Invalid Request: 'jsonrpc' must be \"2.0\""));
        return;
    }
    if (!method) {
        if (id_ok && (json_object_get(msg, "result") || json_object_get(msg, "error")))
            return; /* a response; sandgate sends no requests, so there is nothing to match */
        mcp_post_send(
            p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST, "Invalid Request: no 'method'"));
        return;
    }
    if (!json_is_string(method)) {
        mcp_post_send(p, rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
                                   "Invalid Request: 'method' must be a string"));
        return;
    }
    if (id && !id_ok) {
        mcp_post_send(p, rpc_error(NULL, RPC_INVALID_REQUEST,
                                   "Invalid Request: 'id' must be a string or an integer"));
        return;
    }
    const char *name = json_string_value(method);
    if (!id) { /* a notification: never answered */
        if (strcmp(name, "notifications/cancelled") == 0 && s && json_is_object(params))
            cancel(self, s, params);
        return;
    }
    if (params && !json_is_object(params)) {
        mcp_post_send(p, rpc_error(id, RPC_INVALID_PARAMS, "'params' must be an object"));
        return;
    }
    json_t *answer = request(self, p, s, name, id, params);
    if (answer)
        mcp_post_send(p, answer);
}

/* Which answers the client takes (Accept); false when neither. */
static bool acceptable(struct MHD_Connection *conn, bool *json, bool *sse)
{
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    if (!accept || !*accept) {
        *json = true;
        *sse = false;
        return true;
    }
    *json = strcasestr(accept, "application/json") || strstr(accept, "*/*") ||
            strcasestr(accept, "application/*");
    *sse = strcasestr(accept, "text/event-stream") != NULL;
    return *json || *sse;
}

/* DNS rebinding: with no token, a browser page of another origin must not
 * drive the kernels through a user's loopback sandgate. */
static bool origin_allowed(mcp_t *self, struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!self->cfg.loopback_origins || !origin)
        return true;
    const char *host = strstr(origin, "://");
    host = host ? host + 3 : origin;
    static const char *const loopback[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(loopback[i]);
        if (strncasecmp(host, loopback[i], n) == 0 && (host[n] == 0 || host[n] == ':'))
            return true;
    }
    return false;
}

/* The session a request names in Mcp-Session-Id: resolved as every id a
 * client gives is (http_resolve, where tenant checks hang), so an unknown
 * session is answered by http_reply_unknown.  NULL when the request was
 * answered: no header (400, saying missing), an unknown session (404). */
static session_t *session_of(http_req_t *call, const char *missing, enum MHD_Result *ret)
{
    const char *sid = MHD_lookup_connection_value(call->conn, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (!sid) {
        *ret = refuse(call->conn, 400, RPC_SERVER, missing);
        return NULL;
    }
    session_t *s = http_resolve(call, "mcp_session", sid);
    if (!s)
        *ret = http_reply_unknown(call, "mcp_session", sid);
    return s;
}

static enum MHD_Result handle_post(mcp_t *self, http_req_t *call, const char *body, size_t len,
                                   void **req_state)
{
    struct MHD_Connection *conn = call->conn;
    http_who(call, "mcp", &self->who);
    const char *ctype = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (!ctype || strncasecmp(ctype, "application/json", 16) != 0 ||
        (ctype[16] != 0 && ctype[16] != ';' && ctype[16] != ' '))
        return refuse(conn, 415, RPC_SERVER,
                      "Unsupported Media Type: Content-Type must be application/json");
    bool accept_json, accept_sse;
    if (!acceptable(conn, &accept_json, &accept_sse))
        return refuse(conn, 406, RPC_SERVER,
                      "Not Acceptable: accept application/json or text/event-stream");
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!doc) {
        char msg[256];
        snprintf(msg, sizeof msg, "Parse error: %s (line %d, column %d)", jerr.text, jerr.line,
                 jerr.column);
        return refuse(conn, 400, RPC_PARSE, msg);
    }
    bool batch = json_is_array(doc);
    size_t n = batch ? json_array_size(doc) : 1;
    enum MHD_Result ret;
    if (batch && n == 0) {
        ret = refuse(conn, 400, RPC_INVALID_REQUEST, "Invalid Request: an empty batch");
        goto out;
    }
    if (n > MAX_BATCH) {
        char msg[96];
        snprintf(msg, sizeof msg, "Invalid Request: a batch of more than %d messages", MAX_BATCH);
        ret = refuse(conn, 400, RPC_INVALID_REQUEST, msg);
        goto out;
    }
    bool init = false;
    for (size_t i = 0; i < n; i++) {
        json_t *m = batch ? json_array_get(doc, i) : doc;
        const char *method = json_string_value(json_object_get(m, "method"));
        init |= method && strcmp(method, "initialize") == 0;
    }
    session_t *s = NULL;
    if (init && n > 1) {
        ret = refuse(conn, 400, RPC_INVALID_REQUEST,
                     "Invalid Request: initialize must be sent alone, not in a batch");
        goto out;
    }
    if (init && zhashx_size(self->sessions) >= (size_t)self->cfg.max_sessions) {
        char msg[96];
        snprintf(msg, sizeof msg, "the maximum of %d MCP sessions is open; try again later",
                 self->cfg.max_sessions);
        ret = refuse(conn, 503, RPC_SERVER, msg);
        goto out;
    }
    sg_error_t *qerr = NULL;
    if (init && tenant_admit_new(call->tenant->name, TENANT_MCP_SESSIONS, &qerr) < 0) {
        json_t *e = quota_error(json_object_get(doc, "id"), qerr->quota, qerr->limit);
        sg_error_free(&qerr);
        char *text = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        ret = send_body(conn, 429, "application/json", text, NULL);
        goto out;
    }
    if (!init) {
        s = session_of(call, "Bad Request: no Mcp-Session-Id header (send initialize first)", &ret);
        if (!s)
            goto out;
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (v && !supported_version(v)) {
            char msg[160];
            snprintf(msg, sizeof msg, "Bad Request: unsupported MCP-Protocol-Version '%.40s'", v);
            ret = refuse(conn, 400, RPC_SERVER, msg);
            goto out;
        }
        s->last_seen = zclock_mono();
    }
    post_t *p = xzalloc(sizeof *p);
    p->mcp = self;
    p->refs = 1;
    p->conn = conn;
    p->out = resp_new(self->loop, conn, self->wake, self->wake_arg);
    p->batch = batch;
    p->tenant = *call->tenant;
    p->accept_json = accept_json;
    p->replies = json_array();
    if (s)
        snprintf(p->session, sizeof p->session, "%s", s->id);
    for (size_t i = 0; i < n; i++)
        dispatch(self, p, s, batch ? json_array_get(doc, i) : doc);
    if (p->pending == 0) {
        ret = post_answer(p);
        post_unref(p);
        goto out;
    }
    *req_state = p;
    if (accept_sse) { /* stream: progress now, answers as they come */
        p->streaming = true;
        size_t i;
        json_t *m;
        json_array_foreach (p->replies, i, m) {
            char *ev = sse_event(m);
            resp_write(p->out, ev, strlen(ev));
            free(ev);
        }
        json_array_clear(p->replies);
        struct MHD_Response *r = resp_stream(p->out, ": keepalive\n\n");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "Mcp-Session-Id", p->session);
        ret = http_queue(conn, 200, r);
        MHD_destroy_response(r);
    } else { /* JSON: answer when every call is over */
        ret = resp_wait(p->out);
    }
out:
    json_decref(doc);
    return ret;
}

static enum MHD_Result post_mcp(void *arg, http_req_t *call)
{
    mcp_t *self = arg;
    post_t *p = call->state;
    if (call->resumed) { /* a JSON-mode POST resumed */
        if (p->pending > 0)
            return resp_wait(p->out);
        return post_answer(p);
    }
    if (!origin_allowed(self, call->conn))
        return refuse(call->conn, 403, RPC_SERVER,
                      "Forbidden: this Origin may not use a sandgate that has no token");
    return handle_post(self, call, call->body, call->len, &call->state);
}

static enum MHD_Result delete_mcp(void *arg, http_req_t *call)
{
    mcp_t *self = arg;
    struct MHD_Connection *conn = call->conn;
    if (!origin_allowed(self, conn))
        return refuse(conn, 403, RPC_SERVER,
                      "Forbidden: this Origin may not use a sandgate that has no token");
    enum MHD_Result ret;
    session_t *s = session_of(call, "Bad Request: no Mcp-Session-Id header", &ret);
    if (!s)
        return ret;
    http_who(call, "mcp", &self->who);
    session_end(self, s, "deleted by the client");
    return send_body(conn, 200, NULL, xstrdup(""), NULL);
}

/* The request whose state this is has ended (answered or broken off):
 * executions still running for it are interrupted. */
static void request_done(void *ctx, void *req_state, bool completed)
{
    mcp_t *self = ctx;
    post_t *p = req_state;
    resp_set_gone(p->out);
    /* The client left with calls running: stop their code, drop their output. */
    zlistx_t *mine = zlistx_new();
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls))
        if (c->post == p)
            zlistx_add_end(mine, c);
    for (call_t *c = zlistx_first(mine); c; c = zlistx_next(mine))
        mcp_call_cancel(c, "lost its client during a call");
    zlistx_destroy(&mine);
    post_unref(p);
}

/* The route layer's refusals as JSON-RPC errors: an unknown session
 * (-32001), a method /mcp does not take (a GET: sandgate opens no
 * server-initiated stream). */
static struct MHD_Response *error_response(void *arg, const sg_error_t *err)
{
    const char *msg = err->kind == SG_E_METHOD
                          ? "Method Not Allowed: POST JSON-RPC to /mcp, DELETE ends a session "
                            "(sandgate opens no server-initiated stream)"
                          : err->msg;
    json_t *e =
        rpc_error(NULL, err->kind == SG_E_NOTFOUND ? RPC_NO_SESSION : RPC_SERVER, "%s", msg);
    char *text = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return r;
}

/* The tenant an MCP session belongs to. */
static const char *session_owner(void *arg, void *obj)
{
    return ((session_t *)obj)->owner;
}

/* mcp_session: an MCP session's id, from the Mcp-Session-Id header. */
static void *resolve_session(void *arg, const char *id, const http_req_t *call)
{
    mcp_t *self = arg;
    return zhashx_lookup(self->sessions, id);
}

int mcp_register(mcp_t *self, http_server_t *http, sg_error_t **err)
{
    static const http_route_t routes[] = {
        {"POST", "/mcp", post_mcp, 0, NULL},
        {"DELETE", "/mcp", delete_mcp, 0, NULL},
        {"POST", "/mcp/", post_mcp, 0, NULL},
        {"DELETE", "/mcp/", delete_mcp, 0, NULL},
    };
    const http_front_t front = {
        .name = "mcp", .ctx = self, .done = request_done, .error_response = error_response};
    if (http_param(http, "mcp_session", resolve_session, session_owner, self,
                   "Session not found: it was deleted or expired; initialize a new one", err) < 0 ||
        http_routes(http, &front, routes, sizeof routes / sizeof routes[0], err) < 0)
        return -1;
    return 0;
}

/* --- lifecycle ------------------------------------------------------------------ */

mcp_t *mcp_new(loop_t *loop, kmgr_t *kmgr, const mcp_config_t *cfg, void (*wake)(void *),
               void *wake_arg)
{
    mcp_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->kmgr = kmgr;
    self->cfg = *cfg;
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->sessions = zhashx_new();
    tenants_count_source(TENANT_MCP_SESSIONS, sessions_of, self);
    zhashx_set_destructor(self->sessions, session_free);
    self->calls = zlistx_new();
    self->specs[LANG_PYTHON] = cfg->kernelspec;
    for (int i = LANG_PYTHON + 1; i < MCP_LANGS; i++) {
        const kspec_t *ks = kspecs_for_language(kmgr_kspecs(kmgr), mcp_langs[i]);
        self->specs[i] = ks ? ks->name : NULL;
    }
    self->tools[0] = mcp_tools_json(self, false);
    self->tools[1] = mcp_tools_json(self, true);
    if (cfg->state_dir) {
        cleanup_free char *dir = xasprintf("%s/mcp", cfg->state_dir);
        sg_error_t *err = NULL;
        self->records = records_open(dir, "mcp session", &err);
        if (self->records) {
            records_each(self->records, record_load, self);
        } else {
            log_warn("mcp: %s; sessions will not survive a restart", err->msg);
            sg_error_free(&err);
        }
    }
    self->tick = loop_timer(loop, TICK_MS, 0, on_tick, self);
    return self;
}

void mcp_destroy(mcp_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    mcp_t *self = *self_p;
    tenants_uncount_source(TENANT_MCP_SESSIONS, sessions_of, self);
    loop_timer_end(self->loop, self->tick);
    /* Calls still listed belong to no request (the HTTP server is gone). */
    for (call_t *c = zlistx_first(self->calls); c; c = zlistx_next(self->calls)) {
        exec_detach(&c->exec);
        mcp_call_free(c);
    }
    zlistx_destroy(&self->calls);
    zhashx_destroy(&self->sessions);
    json_decref(self->tools[0]);
    json_decref(self->tools[1]);
    records_close(&self->records);
    free(self);
    *self_p = NULL;
}
