#include "gateway/observe/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void metrics_family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_scalar(FILE *f, const char *name, const char *type, const char *help,
                    unsigned long long value)
{
    metrics_family(f, name, type, help);
    fprintf(f, "%s %llu\n", name, value);
}

void metrics_histogram(FILE *f, const char *name, const char *labels, const histogram_t *h)
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

void metrics_write_tenants(FILE *f)
{
    const char *name;
    json_t *v;
    metrics_family(f, "sandgate_tenant_executions_total", "counter", "Executions by tenant.");
    json_object_foreach (tenant_counts, name, v)
        fprintf(f, "sandgate_tenant_executions_total{tenant=\"%s\"} %lld\n", name,
                (long long)json_integer_value(json_object_get(v, "executions")));
    metrics_family(f, "sandgate_tenant_quota_refusals_total", "counter",
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
}

void metrics_write(FILE *f)
{
    metrics_family(f, "sandgate_executions_total", "counter",
                   "Executions by kind (code, command) and outcome.");
    for (int k = 0; k < EXEC_KINDS; k++)
        for (int o = 0; o < OUTCOMES; o++)
            fprintf(f, "sandgate_executions_total{kind=\"%s\",outcome=\"%s\"} %llu\n",
                    exec_kind_name(k), exec_outcome_name(o),
                    (unsigned long long)metrics.executions[k][o]);
    metrics_family(f, "sandgate_execution_duration_seconds", "histogram",
                   "From the request to the end of the execution (queueing included).");
    for (int k = 0; k < EXEC_KINDS; k++) {
        char labels[32];
        snprintf(labels, sizeof labels, "kind=\"%s\",", exec_kind_name(k));
        metrics_histogram(f, "sandgate_execution_duration_seconds", labels,
                          &metrics.exec_seconds[k]);
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
        metrics_scalar(f, counters[i].name, "counter", counters[i].help,
                       (unsigned long long)counters[i].value);
    metrics_scalar(f, "sandgate_websocket_connections", "gauge",
                   "Kernel channel WebSockets open now.",
                   (unsigned long long)metrics.ws_connections);
    metrics_family(f, "sandgate_http_responses_total", "counter", "HTTP responses by status code.");
    for (int c = 100; c < 600; c++)
        if (metrics.http_status[c])
            fprintf(f, "sandgate_http_responses_total{code=\"%d\"} %llu\n", c,
                    (unsigned long long)metrics.http_status[c]);
    metrics_family(f, "sandgate_http_request_duration_seconds", "histogram",
                   "From a request's headers to the end of its response.");
    metrics_histogram(f, "sandgate_http_request_duration_seconds", "", &metrics.http_seconds);
}
