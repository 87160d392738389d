/* sbmetrics: E2B's sandbox metrics (GET /sandboxes/{id}/metrics: what the
 * SDKs' get_metrics calls; E2B's GET /sandboxes/metrics for many at once
 * is not served, as its path would overlap GET /sandboxes/{id}), sampled
 * every 5 s from each running sandbox's
 * cgroup (sandbox_usage) and its workspace's file system, the last hour of
 * them kept in memory: CPU used (% of the CPUs it may use) and their
 * number, memory used (page cache included, also given alone) and its
 * limit, the workspace's bytes used and its size.  A sandbox is a
 * context's: its first context's samples are the sandbox's (guests share
 * them); a paused one has no new samples. */
#include <math.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "gateway/rest/internal.h"

#define SAMPLE_MS 5000
#define SAMPLES_KEPT 720 /* an hour */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CPUs k's sandbox may use: its quota's (the tenant's if lower), else
 * the host's. */
static double cpus_of(api_t *self, kernel_t *k)
{
    uint64_t quota = kmgr_config(self->kmgr)->sandbox.cpu_quota_us;
    uint64_t own = kernel_opts(k)->cpu_quota_us;
    if (own && (!quota || own < quota))
        quota = own;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    double cpus = quota ? (double)quota / 100000.0 : (double)(online > 0 ? online : 1);
    return cpus > 0 ? cpus : 1;
}

/* A sample of k's sandbox now, in E2B's SandboxMetric shape; NULL when its
 * cgroup cannot be read.  rec keeps the CPU time of the last one. */
static json_t *sample(api_t *self, kernel_t *k, json_t *rec, int64_t now)
{
    sandbox_usage_t u;
    if (!kernel_usage(k, &u))
        return NULL;
    double cpus = cpus_of(self, k), pct = 0;
    int64_t last_at = json_integer_value(json_object_get(rec, "at"));
    uint64_t last_ns = (uint64_t)json_integer_value(json_object_get(rec, "cpu_ns"));
    if (last_at && now > last_at && u.cpu_ns >= last_ns)
        pct = (double)(u.cpu_ns - last_ns) / ((double)(now - last_at) * 1e6) / cpus * 100;
    pct = pct > 100 ? 100 : pct;
    json_object_set_new(rec, "at", json_integer((json_int_t)now));
    json_object_set_new(rec, "cpu_ns", json_integer((json_int_t)u.cpu_ns));
    uint64_t mem_total = u.mem_limit;
    if (!mem_total) {
        mem_total = kmgr_config(self->kmgr)->sandbox.memory_bytes;
        uint64_t own = kernel_opts(k)->memory_bytes;
        if (own && (!mem_total || own < mem_total))
            mem_total = own;
    }
    struct statvfs vfs;
    uint64_t disk_total = 0, disk_used = 0;
    if (statvfs(kernel_workspace(k), &vfs) == 0) {
        disk_total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        disk_used = (uint64_t)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
    }
    return json_pack("{s:o, s:I, s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp",
                     resp_iso_time(now), "timestampUnix", (json_int_t)(now / 1000), "cpuCount",
                     (int)ceil(cpus), "cpuUsedPct", round(pct * 100) / 100, "memUsed",
                     (json_int_t)u.mem_bytes, "memTotal", (json_int_t)mem_total, "memCache",
                     (json_int_t)u.mem_cache, "diskUsed", (json_int_t)disk_used, "diskTotal",
                     (json_int_t)disk_total);
}

/* Adds a sample of k's sandbox to its record; the record. */
static json_t *take(api_t *self, kernel_t *k, int64_t now)
{
    json_t *rec = json_object_get(self->e2b_metrics, kernel_id(k));
    if (!rec) {
        rec = json_pack("{s:[]}", "samples");
        json_object_set_new(self->e2b_metrics, kernel_id(k), rec);
    }
    json_t *s = sample(self, k, rec, now);
    json_t *samples = json_object_get(rec, "samples");
    if (s)
        json_array_append_new(samples, s);
    while (json_array_size(samples) > SAMPLES_KEPT)
        json_array_remove(samples, 0);
    return rec;
}

static void on_sample(loop_t *loop, int timer_id, void *arg)
{
    api_t *self = arg;
    int64_t now = wall_ms();
    const char *id;
    json_t *rec;
    void *tmp;
    json_object_foreach_safe(self->e2b_metrics, tmp, id, rec)
    {
        if (!kmgr_get(self->kmgr, id))
            json_object_del(self->e2b_metrics, id);
    }
    for (size_t i = 0; i < kmgr_count(self->kmgr); i++) {
        kernel_t *k = kmgr_at(self->kmgr, i);
        kernel_state_t st = kernel_state(k);
        if (!kernel_host(k) && (st == KERNEL_IDLE || st == KERNEL_BUSY))
            take(self, k, now);
    }
}

void api_sbmetrics_start(api_t *self)
{
    self->e2b_metrics = json_object();
    self->e2b_sample_timer = loop_timer(self->loop, SAMPLE_MS, 0, on_sample, self);
}

void api_sbmetrics_stop(api_t *self)
{
    if (self->e2b_sample_timer >= 0)
        loop_timer_end(self->loop, self->e2b_sample_timer);
    self->e2b_sample_timer = -1;
    json_decref(self->e2b_metrics);
    self->e2b_metrics = NULL;
}

/* A query parameter as whole seconds; def when absent; false when malformed. */
static bool seconds_arg(struct MHD_Connection *conn, const char *name, int64_t def, int64_t *out)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    char *end;
    *out = def;
    if (!v)
        return true;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || n < 0)
        return false;
    *out = n;
    return true;
}

/* GET /sandboxes/{sandbox}/metrics?start&end (Unix seconds): its samples
 * then, or every one kept; a running sandbox with none yet gets one now. */
enum MHD_Result api_sandbox_metrics(void *arg, http_req_t *call)
{
    api_t *self = arg;
    kernel_t *k = http_arg(call, "sandbox");
    if (kernel_host(k))
        k = kernel_host(k);
    int64_t start, end;
    if (!seconds_arg(call->conn, "start", 0, &start) ||
        !seconds_arg(call->conn, "end", INT64_MAX / 1000, &end))
        return http_reply_json(call->conn, 400,
                               json_pack("{s:i, s:s}", "code", 400, "message",
                                         "'start' and 'end' must be Unix times in whole seconds"));
    json_t *rec = json_object_get(self->e2b_metrics, kernel_id(k));
    kernel_state_t st = kernel_state(k);
    if (json_array_size(json_object_get(rec, "samples")) == 0 &&
        (st == KERNEL_IDLE || st == KERNEL_BUSY))
        rec = take(self, k, wall_ms());
    json_t *out = json_array(), *s;
    size_t i;
    json_array_foreach (json_object_get(rec, "samples"), i, s) {
        int64_t t = json_integer_value(json_object_get(s, "timestampUnix"));
        if (t >= start && t <= end)
            json_array_append(out, s);
    }
    return http_reply_json(call->conn, 200, out);
}
