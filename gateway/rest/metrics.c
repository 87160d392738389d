/* metrics: the REST API's service routes, GET /health, GET /metrics
 * and GET /openapi.json (internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/internal.h"

/* --- egress refusals in the audit log --------------------------------------------- */

/* Every REFUSALS_MS, what the egress rules refused since the last look, per
 * context and rule, as audit events "egress.refused" {context, rule,
 * count} in the context's tenant's name: rule "addresses" for the packets
 * nftables refused (its per-sandbox count), or the proxy's rule
 * ("denyOut ENTRY", "unresolved allowOut ENTRY") for connections.  Both
 * counts start again from 0 when sandgate starts (the table and the proxy
 * are new), as this does. */
#define REFUSALS_MS 5000

struct refusals {
    api_t *api;   /* NULL once the API is gone: the answer on its way frees this */
    json_t *seen; /* "CONTEXT\tRULE" -> count at the last look */
    int timer;
    bool asking;
};

static void refused_event(api_t *self, const char *id, const char *rule, json_int_t n, json_t *now,
                          const json_t *seen)
{
    cleanup_free char *key = xasprintf("%s\t%s", id, rule);
    json_int_t before = json_integer_value(json_object_get(seen, key));
    json_object_set_new(now, key, json_integer(n));
    kernel_t *k = kmgr_get(self->kmgr, id);
    if (!k || n <= before)
        return;
    audit_who_t who = {.frontend = "egress"};
    snprintf(who.tenant, sizeof who.tenant, "%s", kernel_owner(k));
    audit_event(&who, "egress.refused",
                json_pack("{s:s, s:s, s:I}", "context", id, "rule", rule, "count", n - before));
}

static void refusals_counted(const json_t *counts, const sg_error_t *err, void *arg)
{
    struct refusals *r = arg;
    r->asking = false;
    if (!r->api) {
        json_decref(r->seen);
        free(r);
        return;
    }
    if (!counts)
        return;
    json_t *now = json_object(), *n, *rules;
    const char *id, *rule;
    json_object_foreach (json_object_get(counts, "sessions"), id, n)
        refused_event(r->api, id, "addresses", json_integer_value(n), now, r->seen);
    json_object_foreach (json_object_get(counts, "rules"), id, rules)
        json_object_foreach (rules, rule, n)
            refused_event(r->api, id, rule, json_integer_value(n), now, r->seen);
    json_decref(r->seen);
    r->seen = now;
}

static void refusals_tick(loop_t *loop, int timer_id, void *arg)
{
    struct refusals *r = arg;
    if (!r->asking) {
        r->asking = true;
        kmgr_egress_refused(r->api->kmgr, refusals_counted, r);
    }
}

void api_refusals_start(api_t *self)
{
    if (!kmgr_has_egress(self->kmgr))
        return;
    struct refusals *r = xzalloc(sizeof *r);
    r->api = self;
    r->timer = loop_timer(self->loop, REFUSALS_MS, 0, refusals_tick, r);
    self->refusals = r;
}

void api_refusals_stop(api_t *self)
{
    struct refusals *r = self->refusals;
    if (!r)
        return;
    loop_timer_end(self->loop, r->timer);
    self->refusals = NULL;
    r->api = NULL;
    if (!r->asking) {
        json_decref(r->seen);
        free(r);
    }
}

/* --- GET /metrics ---------------------------------------------------------------- */

/* How long a scrape waits for the launcher's refusal counts (Prometheus'
 * default scrape timeout is 10 s, as is the launcher link's). */
#define METRICS_WAIT_MS 2000

/* Refused packets: asked of the launcher (nft) for each scrape. */
static void egress(FILE *f, const json_t *counts)
{
    metrics_family(
        f, "sandgate_egress_refused_total", "counter",
        "Packets the egress rules refused (a connection attempt, a datagram, a ping), per "
        "live context with a network, since its sandbox started (a restart starts at 0).");
    const char *id;
    json_t *n;
    json_object_foreach (json_object_get(counts, "sessions"), id, n)
        fprintf(f, "sandgate_egress_refused_total{context=\"%s\"} %lld\n", id,
                (long long)json_integer_value(n));
    metrics_family(f, "sandgate_egress_refused_all_total", "counter",
                   "Packets the egress rules refused, every sandbox together (deleted contexts "
                   "included), since the launcher installed them.");
    json_t *total = json_object_get(counts, "total");
    if (json_is_integer(total))
        fprintf(f, "sandgate_egress_refused_all_total %lld\n",
                (long long)json_integer_value(total));
    metrics_family(f, "sandgate_egress_proxy_refused_total", "counter",
                   "Connections the egress proxy refused (contexts whose rules name hosts), per "
                   "live context and rule (\"denyOut ENTRY\", \"tenant limit\", \"unresolved "
                   "allowOut ENTRY\"), since "
                   "the proxy started.");
    json_t *rules;
    json_object_foreach (json_object_get(counts, "rules"), id, rules) {
        const char *rule;
        json_object_foreach (rules, rule, n)
            fprintf(f, "sandgate_egress_proxy_refused_total{context=\"%s\",rule=\"%s\"} %lld\n", id,
                    rule, (long long)json_integer_value(n));
    }
}

/* The page (malloc'd, NUL-terminated): the kernel manager's gauges and
 * counters, the process's own (observe), the tenants', and the egress
 * refusals when there are rules (egress_counts: kmgr_egress_refused's, or
 * NULL when the launcher did not answer: no refusal samples). */
static char *metrics_page(const kmgr_t *kmgr, const json_t *egress_counts)
{
    kmgr_stats_t st;
    kmgr_stats(kmgr, &st);
    char *page = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&page, &size);
    if (!f)
        abort();

    metrics_family(f, "sandgate_info", "gauge", "sandgate's version.");
    fprintf(f, "sandgate_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
    metrics_scalar(f, "sandgate_contexts", "gauge", "Live sessions (contexts, kernels).",
                   (unsigned long long)st.sessions);
    metrics_family(f, "sandgate_kernels", "gauge", "Session kernels by state.");
    fprintf(f,
            "sandgate_kernels{state=\"starting\"} %zu\nsandgate_kernels{state=\"idle\"} %zu\n"
            "sandgate_kernels{state=\"busy\"} %zu\nsandgate_kernels{state=\"dead\"} %zu\n"
            "sandgate_kernels{state=\"pausing\"} %zu\nsandgate_kernels{state=\"paused\"} %zu\n",
            st.starting, st.idle, st.busy, st.dead, st.pausing, st.paused);
    metrics_scalar(f, "sandgate_checkpoint_bytes", "gauge",
                   "Disk held by the checkpoints of paused sessions.",
                   (unsigned long long)st.checkpoint_bytes);
    metrics_family(f, "sandgate_pool_kernels", "gauge", "Warm pool kernels by state.");
    fprintf(f, "sandgate_pool_kernels{state=\"ready\"} %zu\n", st.pool_ready);
    fprintf(f, "sandgate_pool_kernels{state=\"starting\"} %zu\n", st.pool_starting);
    metrics_write(f);
    const struct {
        const char *name, *help;
        uint64_t value;
    } counters[] = {
        {"sandgate_kernels_started_total", "Kernels started (pool included).", st.started},
        {"sandgate_pool_claims_total", "Sessions served from the warm pool.", st.claimed_from_pool},
        {"sandgate_kernels_culled_total", "Idle sessions shut down.", st.culled},
        {"sandgate_pauses_total", "Sessions paused to disk.", st.pauses},
        {"sandgate_pauses_automatic_total", "Pauses started by --pause-after.", st.auto_pauses},
        {"sandgate_pause_failures_total", "Pauses that failed (the session ran on or restarted).",
         st.pause_failures},
        {"sandgate_resumes_total", "Paused sessions resumed.", st.resumes},
        {"sandgate_pause_milliseconds_total", "Time spent pausing (sum over pauses).",
         st.pause_ms_total},
        {"sandgate_resume_milliseconds_total", "Time spent resuming (sum over resumes).",
         st.resume_ms_total},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        metrics_scalar(f, counters[i].name, "counter", counters[i].help,
                       (unsigned long long)counters[i].value);
    tenants_metrics(f, kmgr);
    if (kmgr_has_egress(kmgr))
        egress(f, egress_counts);
    fclose(f);
    return page;
}

/* The page; egress_counts as metrics_page takes them. */
static enum MHD_Result metrics_reply(api_t *self, struct MHD_Connection *conn,
                                     const json_t *egress_counts)
{
    char *page = metrics_page(self->kmgr, egress_counts);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(page), page, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = http_queue(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The answer is ready, with or without counts: the handler gives the page. */
static void metrics_ready(stream_t *s)
{
    s->done = true;
    loop_timer_end(s->api->loop, s->metrics_timer);
    s->metrics_timer = -1;
    resp_ready(s->out);
}

static void on_metrics_timeout(loop_t *loop, int timer_id, void *arg)
{
    stream_t *s = arg;
    s->metrics_timer = -1; /* a one-shot timer ends by itself */
    log_warn("api: GET /metrics without the egress refusals: the launcher did not answer within "
             "%d ms",
             METRICS_WAIT_MS);
    metrics_ready(s);
}

static void on_refused(const json_t *counts, const sg_error_t *err, void *arg)
{
    stream_t *s = arg;
    if (!s->done) { /* not answered by the timeout, the client still there */
        if (err)
            log_warn("api: GET /metrics without the egress refusals: %s", err->msg);
        s->agg = json_deep_copy(counts);
        metrics_ready(s);
    }
    api_stream_unref(s); /* the request's reference */
}

/* With egress, each scrape asks for fresh refusal counts (the launcher runs
 * nft) and the request waits for them, at most METRICS_WAIT_MS. */
static enum MHD_Result metrics_wait(api_t *self, struct MHD_Connection *conn, void **req_state)
{
    stream_t *s =
        api_stream_new(self, conn, NULL); /* refs: the counts' request, the HTTP request */
    s->metrics = true;
    s->metrics_timer = loop_timer(self->loop, METRICS_WAIT_MS, 1, on_metrics_timeout, s);
    *req_state = s;
    kmgr_egress_refused(self->kmgr, on_refused, s);
    if (s->done) /* answered before returning (no launcher) */
        return metrics_reply(self, conn, s->agg);
    return resp_wait(s->out);
}

static enum MHD_Result metrics_get(void *arg, http_req_t *call)
{
    api_t *self = arg;
    stream_t *s = call->state;
    if (call->resumed) /* the counts came, or the wait ended */
        return s->done ? metrics_reply(self, call->conn, s->agg) : resp_wait(s->out);
    /* Every tenant's figures are on the page: an admin's key only. */
    if (!call->tenant || !call->tenant->admin)
        return http_reply_errorf(call->conn, SG_E_FORBIDDEN, "GET /metrics needs an admin key");
    if (!kmgr_has_egress(self->kmgr))
        return metrics_reply(self, call->conn, NULL);
    return metrics_wait(self, call->conn, &call->state);
}

/* --- GET /health ---------------------------------------------------------------- */

/* Anyone may ask whether sandgate is up, and is told only that: counts of
 * sessions would tell a guesser which of its keys made one (each key's
 * creations move them), so they are an admin's, here and on /metrics.
 * Stopping (--pause-on-stop's drain): 503, so that a proxy's health check
 * takes this replica out before it goes. */
static enum MHD_Result health(void *arg, http_req_t *call)
{
    api_t *self = arg;
    /* E2B's SDKs ask envd's /health whether their sandbox runs (is_running):
     * 502 when the sandbox they name is not running here — paused, gone,
     * never was, or another tenant's (answered alike). */
    const char *sandbox = e2b_sandbox_header(call->conn);
    if (sandbox) {
        kernel_t *k = call->tenant ? http_resolve(call, "context", sandbox) : NULL;
        kernel_state_t st = k ? kernel_state(k) : KERNEL_DEAD;
        if (st == KERNEL_DEAD || st == KERNEL_PAUSED || st == KERNEL_PAUSING ||
            (k && kernel_pause_pending(k))) {
            /* E2B's proxy's words, which the SDKs look for ("was not found") */
            cleanup_free char *msg = xasprintf(
                "The sandbox %s was not found running: it is paused, killed, or never was",
                sandbox);
            return http_reply_json(call->conn, 502,
                                   json_pack("{s:i, s:s}", "code", 502, "message", msg));
        }
    }
    bool stopping = kmgr_stopping(self->kmgr);
    unsigned status = stopping ? 503 : 200;
    json_t *body = json_pack("{s:s}", "status",
                             kmgr_draining(self->kmgr) ? "draining"
                             : stopping                ? "stopping"
                                                       : "ok");
    if (!call->tenant || !call->tenant->admin)
        return http_reply_json(call->conn, status, body);
    kmgr_stats_t st;
    kmgr_stats(self->kmgr, &st);
    json_object_update_new(
        body,
        json_pack("{s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "version", PACKAGE_VERSION,
                  "replica", replica_id(), "replica_tag", replica_tag(), "kernels", "sessions",
                  (json_int_t)st.sessions, "starting", (json_int_t)st.starting, "idle",
                  (json_int_t)st.idle, "busy", (json_int_t)st.busy, "pool_ready",
                  (json_int_t)st.pool_ready, "pool_starting", (json_int_t)st.pool_starting));
    return http_reply_json(call->conn, status, body);
}

/* --- GET /openapi.json ---------------------------------------------------------- */

static enum MHD_Result openapi(void *arg, http_req_t *call)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        api_openapi_json_len, (void *)api_openapi_json, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = http_queue(call->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int api_metrics_register(api_t *self, http_server_t *http, const http_front_t *front,
                         sg_error_t **err)
{
    /* /health answers without the token: load balancers' and orchestrators'
     * probes carry none (and an admin's key gets the counts too).  Nor does /openapi.json: the
     * API's description is no secret, and client generators fetch it without one. */
    static const http_route_t routes[] = {
        {"GET", "/health", health, HTTP_ROUTE_PUBLIC, NULL},
        {"GET", "/metrics", metrics_get, 0, NULL},
        {"GET", "/openapi.json", openapi, HTTP_ROUTE_PUBLIC, NULL},
    };
    return http_routes(http, front, routes, sizeof routes / sizeof routes[0], err);
}
