/* kbench: kernel manager numbers, as medians (min..max) of repeated runs.
 *
 *   kbench [-n RUNS] [-e EXECS]
 *
 *   cold start     kernel_start to ready (no pool), in gVisor and unsandboxed
 *   pool claim     kmgr_start from a warm pool to the first result of 1+1
 *   round trip     execute "1+1" on an idle kernel, gVisor vs unsandboxed,
 *                  and their ratio (the sandbox's share of an execution)
 *
 * Times on a shared machine are noisy; the ratios are the signal.
 */
#include <getopt.h>

#include "common/log.h"

#include "kernelmgr/manager/manager.h"
#include "tests/lib/harness.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double median, min, max;
    int n;
} stat_t;

static stat_t summarize(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    stat_t s = {n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0, n ? v[0] : 0,
                n ? v[n - 1] : 0, n};
    return s;
}

static void row(const char *what, stat_t s)
{
    printf("| %-40s | %10.2f | %10.2f | %10.2f | %5d |\n", what, s.median, s.min, s.max, s.n);
    fflush(stdout);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool ready_or_dead(void *arg)
{
    kernel_state_t s = kernel_state(arg);
    return s == KERNEL_IDLE || s == KERNEL_DEAD;
}

static kmgr_t *mgr_new(const char *dir, sandbox_mode_t mode, int pool)
{
    kmgr_config_t cfg;
    kmgr_config_defaults(&cfg);
    cfg.state_dir = dir;
    cfg.sandbox.mode = mode;
    cfg.pool_size = pool;
    cfg.cull_idle_ms = 0;
    cfg.max_kernels = 4;
    sg_error_t *err = NULL;
    kmgr_t *m = kmgr_new(loop, &cfg, &err);
    if (!m) {
        fprintf(stderr, "kbench: %s\n", err->msg);
        exit(1);
    }
    return m;
}

static stat_t cold_starts(kmgr_t *m, int runs)
{
    double *v = xzalloc(runs * sizeof *v);
    int n = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        kernel_t *k = kmgr_start(m, "python3", NULL, NULL, NULL);
        if (k && run_until(ready_or_dead, k, 60000) && kernel_state(k) == KERNEL_IDLE)
            v[n++] = now_ms() - t0;
        if (k) {
            cleanup_free char *id = xstrdup(kernel_id(k));
            kmgr_shutdown(m, id, NULL);
        }
        spin(200);
    }
    stat_t s = summarize(v, n);
    free(v);
    return s;
}

static kmgr_t *pool_mgr;
static bool pool_ready(void *arg)
{
    kmgr_stats_t st;
    kmgr_stats(pool_mgr, &st);
    return st.pool_ready >= 1;
}

static stat_t pool_claims(kmgr_t *m, int runs)
{
    pool_mgr = m;
    double *v = xzalloc(runs * sizeof *v);
    int n = 0;
    for (int i = 0; i < runs; i++) {
        if (!run_until(pool_ready, NULL, 90000))
            break;
        double t0 = now_ms();
        kernel_t *k = kmgr_start(m, "python3", NULL, NULL, NULL);
        result_t r;
        if (k && run_until(ready_or_dead, k, 60000) && run_code(k, "1+1", 0, 30000, &r) &&
            r_result(&r))
            v[n++] = now_ms() - t0;
        result_clear(&r);
        if (k) {
            cleanup_free char *id = xstrdup(kernel_id(k));
            kmgr_shutdown(m, id, NULL);
        }
    }
    stat_t s = summarize(v, n);
    free(v);
    return s;
}

static stat_t round_trips(kmgr_t *m, int execs)
{
    kernel_t *k = kmgr_start(m, "python3", NULL, NULL, NULL);
    run_until(ready_or_dead, k, 60000);
    double *v = xzalloc(execs * sizeof *v);
    int n = 0;
    result_t r;
    for (int i = 0; i < 5; i++) { /* warm-up */
        run_code(k, "1+1", 0, 30000, &r);
        result_clear(&r);
    }
    for (int i = 0; i < execs; i++) {
        double t0 = now_ms();
        if (run_code(k, "1+1", 0, 30000, &r) && r_result(&r))
            v[n++] = now_ms() - t0;
        result_clear(&r);
    }
    cleanup_free char *id = xstrdup(kernel_id(k));
    kmgr_shutdown(m, id, NULL);
    stat_t s = summarize(v, n);
    free(v);
    return s;
}

int main(int argc, char **argv)
{
    int runs = 20, execs = 200, c;
    while ((c = getopt(argc, argv, "n:e:")) != -1) {
        if (c == 'n')
            runs = atoi(optarg);
        else if (c == 'e')
            execs = atoi(optarg);
        else {
            fprintf(stderr, "usage: kbench [-n RUNS] [-e EXECS]\n");
            return 2;
        }
    }
    sg_log_set_level(SG_LOG_WARN);
    loop = loop_new();
    proc_init(loop, NULL);
    char d1[] = "/tmp/sg-bench-XXXXXX", d2[] = "/tmp/sg-bench-XXXXXX",
         d3[] = "/tmp/sg-bench-XXXXXX";
    if (!mkdtemp(d1) || !mkdtemp(d2) || !mkdtemp(d3))
        return 1;
    chmod(d1, 0711);
    chmod(d2, 0711);
    chmod(d3, 0711);
    kmgr_t *gv = mgr_new(d1, SANDBOX_RUNSC, 0);
    kmgr_t *none = mgr_new(d2, SANDBOX_NONE, 0);

    printf("| %-40s | %10s | %10s | %10s | %5s |\n", "measure (ms)", "median", "min", "max",
           "runs");
    printf("|%s|%s|%s|%s|%s|\n", "------------------------------------------", "------------",
           "------------", "------------", "-------");
    stat_t rt_g = round_trips(gv, execs);
    row("execute 1+1 round trip, gVisor", rt_g);
    stat_t rt_n = round_trips(none, execs);
    row("execute 1+1 round trip, --sandbox=none", rt_n);
    stat_t cold_g = cold_starts(gv, runs);
    row("cold start to ready, gVisor", cold_g);
    stat_t cold_n = cold_starts(none, runs);
    row("cold start to ready, --sandbox=none", cold_n);
    kmgr_t *pool = mgr_new(d3, SANDBOX_RUNSC, 1);
    stat_t claim = pool_claims(pool, runs);
    row("pool claim to first result, gVisor", claim);
    printf("\nratios (gVisor / none): round trip %.2fx, cold start %.2fx; "
           "pool claim / cold start %.3f\n",
           rt_g.median / rt_n.median, cold_g.median / cold_n.median, claim.median / cold_g.median);

    kmgr_destroy(&pool, true);
    kmgr_destroy(&gv, true);
    kmgr_destroy(&none, true);
    spin(500);
    proc_fini();
    harness_fini();
    loop_destroy(&loop);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s", d1, d2, d3);
    return system(cmd) == 0 ? 0 : 1;
}
