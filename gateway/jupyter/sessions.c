/* sessions: Jupyter's /api/sessions (internal.h) — a notebook's session
 * names a kernel (started with it, or one that exists), and lives as long
 * as its kernel; sessions are kept in memory, by owner (tenants.h's
 * max-jupyter-sessions counts them). */
#include "gateway/jupyter/internal.h"

#include <string.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "gateway/observe/observe.h"
#include "gateway/tenants/tenants.h"

json_t *jupyter_session_model(jupyter_t *self, json_t *s)
{
    kernel_t *k = kmgr_get(self->kmgr, json_string_value(json_object_get(s, "kernel_id")));
    json_t *m = json_pack("{s:O, s:O, s:O, s:O, s:{s:O, s:O}}", "id", json_object_get(s, "id"),
                          "path", json_object_get(s, "path"), "name", json_object_get(s, "name"),
                          "type", json_object_get(s, "type"), "notebook", "path",
                          json_object_get(s, "path"), "name", json_object_get(s, "name"));
    json_object_set_new(m, "kernel", k ? jupyter_kernel_model(k) : json_null());
    return m;
}

/* Sessions whose kernel is gone (shut down, culled) go too. */
void jupyter_prune_sessions(jupyter_t *self)
{
    const char *id;
    json_t *s;
    void *tmp;
    json_object_foreach_safe(self->sessions, tmp, id, s)
    {
        if (!kmgr_get(self->kmgr, json_string_value(json_object_get(s, "kernel_id"))))
            json_object_del(self->sessions, id);
    }
}

/* --- sessions ---------------------------------------------------------------------- */

/* The longest path, name or type a session may have: they are labels (a
 * notebook's path), kept in memory, listed and audited. */
#define JUPYTER_FIELD_MAX 4096

/* A session request's body, its fields checked; NULL when answered with an error. */
static json_t *session_request(struct MHD_Connection *conn, const char *body, size_t len,
                               enum MHD_Result *ret)
{
    json_t *req = jupyter_parse(conn, body, len, ret);
    if (req == NULL)
        return NULL;
    const char *keys[] = {"path", "name", "type"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(req, keys[i]);
        if (v && !json_is_string(v) && !json_is_null(v)) {
            *ret = jupyter_fail(conn, SG_E_INVALID, "'%s' must be a string", keys[i]);
            json_decref(req);
            return NULL;
        }
        if (json_string_length(v) > JUPYTER_FIELD_MAX) {
            *ret = jupyter_fail(conn, SG_E_LIMIT, "'%s' is longer than %d bytes", keys[i],
                                JUPYTER_FIELD_MAX);
            json_decref(req);
            return NULL;
        }
    }
    json_t *kern = json_object_get(req, "kernel");
    if (kern && !json_is_object(kern) && !json_is_null(kern)) {
        *ret = jupyter_fail(conn, SG_E_INVALID, "'kernel' must be an object {name} or {id}");
        json_decref(req);
        return NULL;
    }
    return req;
}

/* The kernel a session request names: an existing one by id, or a new one.
 * NULL with *err when none could be started, without when the id is
 * unknown (no_kernel answers both). */
static kernel_t *session_kernel(jupyter_t *self, const http_req_t *call, json_t *req,
                                const audit_who_t *who, sg_error_t **err)
{
    json_t *kern = json_object_get(req, "kernel");
    const char *id = json_string_value(json_object_get(kern, "id"));
    if (id)
        return http_resolve(call, "kernel", id); /* NULL: no_kernel answers */
    json_t *start =
        json_pack("{s:O?, s:O?, s:O?}", "name", json_object_get(kern, "name"), "env",
                  json_object_get(kern, "env"), "internet", json_object_get(kern, "internet"));
    const char *path = json_string_value(json_object_get(req, "path"));
    if (path && strrchr(path, '/')) /* the notebook's directory */
        json_object_set_new(start, "path", json_stringn(path, (size_t)(strrchr(path, '/') - path)));
    kernel_t *k = jupyter_start_kernel(self, call->tenant, start, who, err);
    json_decref(start);
    return k;
}

/* Answers a session request whose kernel session_kernel did not give. */
static enum MHD_Result no_kernel(const http_req_t *call, json_t *req, sg_error_t **err)
{
    if (*err)
        return jupyter_fail_err(call->conn, err);
    return http_reply_unknown(
        call, "kernel", json_string_value(json_object_get(json_object_get(req, "kernel"), "id")));
}

/* The tenant a Jupyter session belongs to: its kernel's (a session whose
 * kernel is gone is pruned). */
static const char *session_owner(void *arg, void *obj)
{
    jupyter_t *self = arg;
    const char *kid = json_string_value(json_object_get(obj, "kernel_id"));
    kernel_t *k = kid ? kmgr_get(self->kmgr, kid) : NULL;
    return k ? kernel_owner(k) : NULL;
}

/* path, name and type from a request, defaults for those a new session lacks. */
static void set_fields(json_t *s, json_t *req)
{
    const char *keys[] = {"path", "name", "type"}, *dflt[] = {"", "", "notebook"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(req, keys[i]);
        if (json_is_string(v))
            json_object_set(s, keys[i], v);
        else if (!json_object_get(s, keys[i]))
            json_object_set_new(s, keys[i], json_string(dflt[i]));
    }
}

/* The Jupyter sessions of owner's: its max-jupyter-sessions counts them. */
long long jupyter_sessions_of(void *arg, const char *owner)
{
    jupyter_t *self = arg;
    jupyter_prune_sessions(self);
    long long n = 0;
    const char *id;
    json_t *s;
    json_object_foreach (self->sessions, id, s) {
        const char *o = session_owner(self, s);
        n += o && strcmp(o, owner) == 0;
    }
    return n;
}

static enum MHD_Result list_sessions(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    jupyter_prune_sessions(self);
    json_t *list = json_array();
    const char *id;
    json_t *s;
    json_object_foreach (self->sessions, id, s)
        if (tenant_sees(call->tenant, session_owner(self, s)))
            json_array_append_new(list, jupyter_session_model(self, s));
    return http_reply_json(call->conn, 200, list);
}

static enum MHD_Result post_session(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    struct MHD_Connection *conn = call->conn;
    if (call->resumed)
        return jupyter_resumed(self, call);
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    audit_who_t who;
    http_who(call, "jupyter", &who);
    jupyter_prune_sessions(self);
    json_t *req = session_request(conn, call->body, call->len, &ret);
    if (req == NULL)
        return ret;
    /* A session for a path that has one already is that session. */
    const char *path = json_string_value(json_object_get(req, "path"));
    const char *sid;
    json_t *s;
    json_object_foreach (self->sessions, sid, s) {
        if (path && tenant_sees(call->tenant, session_owner(self, s)) &&
            strcmp(json_string_value(json_object_get(s, "path")), path) == 0) {
            json_decref(req);
            return http_reply_json(conn, 201, jupyter_session_model(self, s));
        }
    }
    if (tenant_admit_new(call->tenant->name, TENANT_JUPYTER_SESSIONS, &err) < 0) {
        json_decref(req);
        return jupyter_fail_err(conn, &err);
    }
    kernel_t *k = session_kernel(self, call, req, &who, &err);
    if (k == NULL) {
        ret = no_kernel(call, req, &err);
        json_decref(req);
        return ret;
    }
    char id[37];
    replica_uuid(id);
    s = json_pack("{s:s, s:s}", "id", id, "kernel_id", kernel_id(k));
    set_fields(s, req);
    json_object_set_new(self->sessions, id, s);
    json_decref(req);
    audit_event(&who, "session.create",
                json_pack("{s:s, s:s, s:O}", "session", id, "context", kernel_id(k), "path",
                          json_object_get(s, "path")));
    log_info("jupyter: session %s (%s) on kernel %s", id,
             json_string_value(json_object_get(s, "path")), kernel_id(k));
    return jupyter_when_ready(self, conn, k, 201, id, &call->state);
}

static enum MHD_Result get_session(void *arg, http_req_t *call)
{
    return http_reply_json(call->conn, 200, jupyter_session_model(arg, http_arg(call, "session")));
}

static enum MHD_Result delete_session(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    const char *id = http_arg_id(call, "session");
    json_t *s = http_arg(call, "session");
    audit_who_t who;
    http_who(call, "jupyter", &who);
    const char *kid = json_string_value(json_object_get(s, "kernel_id"));
    audit_event(&who, "session.delete", json_pack("{s:s, s:s?}", "session", id, "context", kid));
    if (kmgr_get(self->kmgr, kid))
        kmgr_shutdown(self->kmgr, kid, NULL);
    json_object_del(self->sessions, id);
    return jupyter_no_content(call->conn);
}

static enum MHD_Result patch_session(void *arg, http_req_t *call)
{
    jupyter_t *self = arg;
    struct MHD_Connection *conn = call->conn;
    if (call->resumed)
        return jupyter_resumed(self, call);
    const char *id = http_arg_id(call, "session");
    json_t *s = http_arg(call, "session");
    enum MHD_Result ret = MHD_NO;
    sg_error_t *err = NULL;
    audit_who_t who;
    http_who(call, "jupyter", &who);
    json_t *req = session_request(conn, call->body, call->len, &ret);
    if (req == NULL)
        return ret;
    set_fields(s, req);
    json_t *kern = json_object_get(req, "kernel");
    if (json_is_object(kern)) {
        char old[64];
        snprintf(old, sizeof old, "%s", json_string_value(json_object_get(s, "kernel_id")));
        kernel_t *k = session_kernel(self, call, req, &who, &err);
        if (k == NULL) {
            ret = no_kernel(call, req, &err);
            json_decref(req);
            return ret;
        }
        json_object_set_new(s, "kernel_id", json_string(kernel_id(k)));
        audit_event(&who, "session.update",
                    json_pack("{s:s, s:s, s:s}", "session", id, "context", kernel_id(k),
                              "previous_context", old));
        /* A kernel started for this session replaces the old one, as in jupyter_server. */
        if (!json_object_get(kern, "id") && strcmp(old, kernel_id(k)) != 0 &&
            kmgr_get(self->kmgr, old))
            kmgr_shutdown(self->kmgr, old, NULL);
        json_decref(req);
        return jupyter_when_ready(self, conn, k, 200, id, &call->state);
    }
    json_decref(req);
    return http_reply_json(conn, 200, jupyter_session_model(self, s));
}

static void *resolve_session(void *arg, const char *id, const http_req_t *call)
{
    jupyter_t *self = arg;
    jupyter_prune_sessions(self);
    return json_object_get(self->sessions, id);
}

int jupyter_sessions_register(jupyter_t *self, http_server_t *http, const http_front_t *front,
                              sg_error_t **err)
{
    /* jupyter_server takes each collection with and without a final '/'. */
    static const http_route_t routes[] = {
        {"GET", "/api/sessions", list_sessions, 0, NULL},
        {"GET", "/api/sessions/", list_sessions, 0, NULL},
        {"POST", "/api/sessions", post_session, 0, NULL},
        {"POST", "/api/sessions/", post_session, 0, NULL},
        {"GET", "/api/sessions/{session}", get_session, 0, NULL},
        {"PATCH", "/api/sessions/{session}", patch_session, 0, NULL},
        {"DELETE", "/api/sessions/{session}", delete_session, 0, NULL},
    };
    if (http_param(http, "session", resolve_session, session_owner, self, "Session not found: %s",
                   err) < 0 ||
        http_routes(http, front, routes, sizeof routes / sizeof routes[0], err) < 0)
        return -1;
    return 0;
}
