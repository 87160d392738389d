#include "gateway/observe/metrics.h"

#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "gateway/tenants/tenants.h"
#include "kernelmgr/manager/manager.h"

metrics_t metrics;

static const double bounds[METRICS_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                               1,     2.5,  5,     10,   30,  60,   300};

void histogram_observe(histogram_t *h, double seconds)
{
    h->count++;
    h->sum += seconds;
    for (int i = 0; i < METRICS_BUCKETS; i++)
        if (seconds <= bounds[i]) {
            h->counts[i]++;
            break;
        }
}

const char *exec_outcome_name(exec_outcome_t outcome)
{
    static const char *const names[OUTCOMES] = {"ok",        "error",   "timeout", "kernel_error",
                                                "cancelled", "refused", "detached"};
    return (unsigned)outcome < OUTCOMES ? names[outcome] : "?";
}

const char *exec_kind_name(exec_kind_t kind)
{
    return kind == EXEC_COMMAND ? "command" : "code";
}

void metrics_execution(exec_kind_t kind, exec_outcome_t outcome, double seconds)
{
    metrics.executions[kind][outcome]++;
    if (outcome != OUTCOME_REFUSED) /* it never ran: counted, not timed */
        histogram_observe(&metrics.exec_seconds[kind], seconds);
}

static void header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void scalar(FILE *f, const char *name, const char *type, const char *help,
                   unsigned long long value)
{
    header(f, name, type, help);
    fprintf(f, "%s %llu\n", name, value);
}

/* labels: "" or 'kind="code",' (with the trailing comma). */
static void histogram(FILE *f, const char *name, const char *labels, const histogram_t *h)
{
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += h->counts[i];
        fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, bounds[i],
                (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->count);
    size_t n = 0;
    while (labels[n] && !(labels[n] == ',' && labels[n + 1] == 0))
        n++;
    fprintf(f, "%s_sum%s%.*s%s %.6f\n", name, n ? "{" : "", (int)n, labels, n ? "}" : "", h->sum);
    fprintf(f, "%s_count%s%.*s%s %llu\n", name, n ? "{" : "", (int)n, labels, n ? "}" : "",
            (unsigned long long)h->count);
}

/* Refused packets: asked of the launcher (nft) for each scrape. */
static void egress(FILE *f, const json_t *counts)
{
    header(f, "sandgate_egress_refused_total", "counter",
           "Packets the egress rules refused (a connection attempt, a datagram, a ping), per "
           "live context with a network, since its sandbox started (a restart starts at 0).");
    const char *id;
    json_t *n;
    json_object_foreach (json_object_get(counts, "sessions"), id, n)
        fprintf(f, "sandgate_egress_refused_total{context=\"%s\"} %lld\n", id,
                (long long)json_integer_value(n));
    header(f, "sandgate_egress_refused_all_total", "counter",
           "Packets the egress rules refused, every sandbox together (deleted contexts "
           "included), since the launcher installed them.");
    json_t *total = json_object_get(counts, "total");
    if (json_is_integer(total))
        fprintf(f, "sandgate_egress_refused_all_total %lld\n",
                (long long)json_integer_value(total));
}

/* {tenant: {what: count}} */
static json_t *tenant_counts;

void metrics_tenant(const char *tenant, const char *what)
{
    if (!tenant || !*tenant)
        return;
    if (!tenant_counts)
        tenant_counts = json_object();
    json_t *t = json_object_get(tenant_counts, tenant);
    if (!t)
        json_object_set_new(tenant_counts, tenant, t = json_object());
    json_object_set_new(t, what, json_integer(json_integer_value(json_object_get(t, what)) + 1));
}

/* What each tenant with sessions or snapshots holds now of what its quotas
 * count (tenants.h). */
static void usage(FILE *f, const kmgr_t *kmgr, json_t *live, json_t *paused)
{
    json_t *names = json_object();
    json_object_update(names, live);
    json_object_update(names, paused);
    for (size_t i = 0; i < kmgr_snapshot_count(kmgr); i++) {
        const kmgr_snapshot_t *s = kmgr_snapshot_at(kmgr, i);
        if (!s->deleted && !s->template_of)
            json_object_set_new(names, s->owner, json_true());
    }
    header(f, "sandgate_tenant_usage", "gauge",
           "What a tenant holds now of what its quotas count, by tenant and resource.");
    const char *name;
    json_t *v;
    json_object_foreach (names, name, v) {
        tenant_usage_t u;
        tenant_usage(name, &u);
        const struct {
            const char *what;
            long long n;
        } rows[] = {{"queued", tenant_counted(name, TENANT_QUEUED)},
                    {"jupyter_sessions", tenant_counted(name, TENANT_JUPYTER_SESSIONS)},
                    {"mcp_sessions", tenant_counted(name, TENANT_MCP_SESSIONS)},
                    {"snapshots", u.snapshots},
                    {"snapshot_bytes", (long long)u.snapshot_bytes},
                    {"disk_bytes", (long long)u.disk_bytes}};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
            fprintf(f, "sandgate_tenant_usage{tenant=\"%s\",resource=\"%s\"} %lld\n", name,
                    rows[r].what, rows[r].n);
    }
    json_decref(names);
}

/* Per tenant: sessions live and paused now, executions and quota refusals
 * since the start. */
static void tenants(FILE *f, const kmgr_t *kmgr)
{
    json_t *live = json_object(), *paused = json_object();
    for (size_t i = 0; i < kmgr_count(kmgr); i++) {
        const kernel_t *k = kmgr_at((kmgr_t *)kmgr, i);
        json_t *m = kernel_state(k) == KERNEL_PAUSED ? paused : live;
        const char *o = kernel_owner(k);
        json_object_set_new(m, o, json_integer(json_integer_value(json_object_get(m, o)) + 1));
    }
    const char *name;
    json_t *v;
    header(f, "sandgate_tenant_sessions", "gauge", "Sessions by tenant and state.");
    json_object_foreach (live, name, v)
        fprintf(f, "sandgate_tenant_sessions{tenant=\"%s\",state=\"live\"} %lld\n", name,
                (long long)json_integer_value(v));
    json_object_foreach (paused, name, v)
        fprintf(f, "sandgate_tenant_sessions{tenant=\"%s\",state=\"paused\"} %lld\n", name,
                (long long)json_integer_value(v));
    header(f, "sandgate_tenant_executions_total", "counter", "Executions by tenant.");
    json_object_foreach (tenant_counts, name, v)
        fprintf(f, "sandgate_tenant_executions_total{tenant=\"%s\"} %lld\n", name,
                (long long)json_integer_value(json_object_get(v, "executions")));
    header(f, "sandgate_tenant_quota_refusals_total", "counter",
           "Requests refused for a tenant's quota, by tenant and quota.");
    json_object_foreach (tenant_counts, name, v) {
        const char *what;
        json_t *n;
        json_object_foreach (v, what, n)
            if (strncmp(what, "quota:", 6) == 0)
                fprintf(f,
                        "sandgate_tenant_quota_refusals_total{tenant=\"%s\",quota=\"%s\"} %lld\n",
                        name, what + 6, (long long)json_integer_value(n));
    }
    usage(f, kmgr, live, paused);
    json_decref(live);
    json_decref(paused);
}

char *metrics_render(const kmgr_t *kmgr, const json_t *egress_counts)
{
    kmgr_stats_t st;
    kmgr_stats(kmgr, &st);
    char *page = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&page, &size);
    if (!f)
        abort();

    header(f, "sandgate_info", "gauge", "sandgate's version.");
    fprintf(f, "sandgate_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
    scalar(f, "sandgate_contexts", "gauge", "Live sessions (contexts, kernels).",
           (unsigned long long)st.sessions);
    header(f, "sandgate_kernels", "gauge", "Session kernels by state.");
    fprintf(f,
            "sandgate_kernels{state=\"starting\"} %zu\nsandgate_kernels{state=\"idle\"} %zu\n"
            "sandgate_kernels{state=\"busy\"} %zu\nsandgate_kernels{state=\"dead\"} %zu\n"
            "sandgate_kernels{state=\"pausing\"} %zu\nsandgate_kernels{state=\"paused\"} %zu\n",
            st.starting, st.idle, st.busy, st.dead, st.pausing, st.paused);
    scalar(f, "sandgate_checkpoint_bytes", "gauge",
           "Disk held by the checkpoints of paused sessions.",
           (unsigned long long)st.checkpoint_bytes);
    header(f, "sandgate_pool_kernels", "gauge", "Warm pool kernels by state.");
    fprintf(f, "sandgate_pool_kernels{state=\"ready\"} %zu\n", st.pool_ready);
    fprintf(f, "sandgate_pool_kernels{state=\"starting\"} %zu\n", st.pool_starting);

    header(f, "sandgate_executions_total", "counter",
           "Executions by kind (code, command) and outcome.");
    for (int k = 0; k < EXEC_KINDS; k++)
        for (int o = 0; o < OUTCOMES; o++)
            fprintf(f, "sandgate_executions_total{kind=\"%s\",outcome=\"%s\"} %llu\n",
                    exec_kind_name(k), exec_outcome_name(o),
                    (unsigned long long)metrics.executions[k][o]);
    header(f, "sandgate_execution_duration_seconds", "histogram",
           "From the request to the end of the execution (queueing included).");
    for (int k = 0; k < EXEC_KINDS; k++) {
        char labels[32];
        snprintf(labels, sizeof labels, "kind=\"%s\",", exec_kind_name(k));
        histogram(f, "sandgate_execution_duration_seconds", labels, &metrics.exec_seconds[k]);
    }
    const struct {
        const char *name, *help;
        uint64_t value;
    } counters[] = {
        {"sandgate_output_truncated_total", "Executions whose output passed --max-output.",
         metrics.output_truncated},
        {"sandgate_artifacts_total", "Files announced from output/.", metrics.artifacts},
        {"sandgate_file_uploads_total", "Workspace files uploaded.", metrics.uploads},
        {"sandgate_file_upload_bytes_total", "Bytes uploaded.", metrics.upload_bytes},
        {"sandgate_file_downloads_total", "Workspace files downloaded.", metrics.downloads},
        {"sandgate_file_download_bytes_total", "Bytes downloaded.", metrics.download_bytes},
        {"sandgate_http_auth_failures_total", "Requests refused for a missing or wrong token.",
         metrics.auth_failures},
        {"sandgate_http_auth_blocks_total",
         "Client addresses refused for a while after too many failed authentications "
         "(--auth-fail-limit).",
         metrics.auth_blocks},
        {"sandgate_http_revoked_total",
         "Requests, streams and WebSockets ended because their key was removed or rotated.",
         metrics.revoked},
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
        {"sandgate_websocket_connections_total", "Kernel channel WebSockets accepted.",
         metrics.ws_accepted},
        {"sandgate_websocket_protocol_errors_total",
         "Kernel channel WebSockets closed for a framing error.", metrics.ws_protocol_errors},
        {"sandgate_audit_dropped_total",
         "Audit log lines not written (its reader fell behind, or the file could not take "
         "them).",
         metrics.audit_dropped},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        scalar(f, counters[i].name, "counter", counters[i].help,
               (unsigned long long)counters[i].value);
    scalar(f, "sandgate_websocket_connections", "gauge", "Kernel channel WebSockets open now.",
           (unsigned long long)metrics.ws_connections);
    header(f, "sandgate_http_responses_total", "counter", "HTTP responses by status code.");
    for (int c = 100; c < 600; c++)
        if (metrics.http_status[c])
            fprintf(f, "sandgate_http_responses_total{code=\"%d\"} %llu\n", c,
                    (unsigned long long)metrics.http_status[c]);
    header(f, "sandgate_http_request_duration_seconds", "histogram",
           "From a request's headers to the end of its response.");
    histogram(f, "sandgate_http_request_duration_seconds", "", &metrics.http_seconds);
    tenants(f, kmgr);
    if (kmgr_has_egress(kmgr))
        egress(f, egress_counts);
    fclose(f);
    return page;
}
