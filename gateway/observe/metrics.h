/* metrics: sandgate's counters and latency histograms, served by GET
 * /metrics in the Prometheus text exposition format (version 0.0.4).
 *
 * One process-wide instance: the daemon is single-threaded, so plain
 * increments suffice.  This room knows neither kernels nor tenants' quotas:
 * the page is put together by GET /metrics (gateway/rest/metrics.c), which
 * writes the kernel manager's gauges and counters and asks the tenants room
 * for its families (tenants_metrics), with the helpers below.
 */
#ifndef SG_METRICS_H
#define SG_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kmgr kmgr_t; /* kernelmgr/manager/manager.h, which metrics.c includes */

#define METRICS_BUCKETS 14

typedef struct {
    uint64_t counts[METRICS_BUCKETS]; /* per bucket (not cumulative) */
    uint64_t count;
    double sum;
} histogram_t;

typedef enum { EXEC_CODE, EXEC_COMMAND, EXEC_KINDS } exec_kind_t;
/* How an execution ended: one set for every front end, the metrics
 * (sandgate_executions_total's outcome) and the audit log (execution.end's
 * outcome), named by exec_outcome_name(). */
typedef enum {
    OUTCOME_OK,        /* ran to the end without an exception */
    OUTCOME_ERROR,     /* the code raised (or the kernel skipped it after an earlier error),
                          or the command exited non-zero */
    OUTCOME_TIMEOUT,   /* stopped by its timeout */
    OUTCOME_KERNEL,    /* the kernel died or was restarted under it */
    OUTCOME_CANCELLED, /* the client went away */
    OUTCOME_REFUSED,   /* never started: the context's queue was full or its kernel dead */
    OUTCOME_DETACHED,  /* sandgate stopped while it ran; the code runs on */
    OUTCOMES
} exec_outcome_t;

/* "ok", "error", "timeout", "kernel_error", "cancelled", "refused", "detached". */
const char *exec_outcome_name(exec_outcome_t outcome);
const char *exec_kind_name(exec_kind_t kind); /* "code", "command" */

typedef struct {
    uint64_t http_status[600]; /* responses by status code */
    histogram_t http_seconds;
    uint64_t auth_failures;
    uint64_t auth_blocks; /* client addresses refused for failing too often */
    uint64_t revoked;     /* requests and WebSockets ended when their key went */
    uint64_t executions[EXEC_KINDS][OUTCOMES];
    histogram_t exec_seconds[EXEC_KINDS];
    uint64_t output_truncated;
    uint64_t artifacts;
    uint64_t uploads, upload_bytes, downloads, download_bytes;
    uint64_t ws_connections; /* kernel channel WebSockets open now */
    uint64_t ws_accepted, ws_protocol_errors;
    uint64_t audit_dropped; /* audit log lines not written (gateway/observe/audit.h) */
} metrics_t;

extern metrics_t metrics;

void histogram_observe(histogram_t *h, double seconds);
/* Counts one event of a tenant's (tenants come from the keys file, so the
 * label set is bounded): what is "executions" or "quota:NAME". */
void metrics_tenant(const char *tenant, const char *what);
void metrics_execution(exec_kind_t kind, exec_outcome_t outcome, double seconds);

/* The page's pieces, in the Prometheus text format (version 0.0.4). */
/* One family's "# HELP" and "# TYPE" lines; its samples follow. */
void metrics_family(FILE *f, const char *name, const char *type, const char *help);
/* A family of one unlabelled sample. */
void metrics_scalar(FILE *f, const char *name, const char *type, const char *help,
                    unsigned long long value);
/* A histogram's samples; labels: "" or 'kind="code",' (with the trailing comma). */
void metrics_histogram(FILE *f, const char *name, const char *labels, const histogram_t *h);
/* This process's own families: executions, files, authentication,
 * WebSockets, the audit log, HTTP responses. */
void metrics_write(FILE *f);
/* The families counted by metrics_tenant: executions and quota refusals by
 * tenant. */
void metrics_write_tenants(FILE *f);

#endif
