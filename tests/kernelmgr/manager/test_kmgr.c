/* kernelmgr/manager/manager against real runsc + ipykernel: warm pool with preload,
 * claims, the kernel limit, idle culling, and re-adoption after sandgate is
 * killed with SIGKILL (variables still there; a session whose sandbox died
 * meanwhile gets a fresh kernel on the same files).
 *
 *   test_kmgr                 the test
 *   test_kmgr child DIR       helper: a "sandgate" that makes two sessions,
 *                             writes their ids to DIR/ids and waits to be killed
 */
#include <signal.h>
#include <sys/wait.h>

#include "kernelmgr/manager/manager.h"
#include "tests/lib/harness.h"

static char state_dir[] = "/tmp/sg-kmgr-XXXXXX";

static void config(kmgr_config_t *cfg, const char *dir)
{
    kmgr_config_defaults(cfg);
    cfg->state_dir = dir;
    cfg->sandbox.mode = getenv("SG_SANDBOX") && strcmp(getenv("SG_SANDBOX"), "none") == 0
                            ? SANDBOX_NONE
                            : SANDBOX_RUNSC;
    cfg->sandbox.workspace_bytes = 16ull << 20;
    cfg->pool_size = 1;
    cfg->pool_preload = "PRELOADED = 'yes'";
    cfg->max_kernels = 2;
    cfg->cull_idle_ms = 0;
}

static bool ready_or_dead(void *arg)
{
    kernel_state_t s = kernel_state(arg);
    return s == KERNEL_IDLE || s == KERNEL_DEAD;
}

static kmgr_t *mgr;
static bool pool_ready(void *arg)
{
    kmgr_stats_t st;
    kmgr_stats(mgr, &st);
    return st.pool_ready >= 1;
}

static const char *eval(kernel_t *k, const char *code, result_t *r)
{
    run_code(k, code, 30000, 60000, r);
    return r_result(r) ? r_result(r) : r_ename(r) ? r_ename(r) : r->err ? r->err->msg : "?";
}

static int child(const char *dir)
{
    loop = loop_new();
    proc_init(loop, NULL);
    kmgr_config_t cfg;
    config(&cfg, dir);
    cfg.pool_size = 0;
    cfg.max_kernels = 3;
    sg_error_t *err = NULL;
    mgr = kmgr_new(loop, &cfg, &err);
    if (!mgr) {
        fprintf(stderr, "child: %s\n", err->msg);
        return 1;
    }
    kernel_t *a = kmgr_start(mgr, "python3", NULL, NULL, &err);
    kernel_t *b = kmgr_start(mgr, "python3", NULL, NULL, &err);
    kernel_t *c = kmgr_start(mgr, "python3", NULL, NULL, &err);
    run_until(ready_or_dead, a, 60000);
    run_until(ready_or_dead, b, 60000);
    run_until(ready_or_dead, c, 60000);
    result_t r;
    run_code(a, "x = 1234", 0, 30000, &r);
    result_clear(&r);
    run_code(b, "x = 5678; open('b.txt', 'w').write('files stay')", 0, 30000, &r);
    result_clear(&r);
    cleanup_free char *path = xasprintf("%s/ids", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s %s %d %s\n", kernel_id(a), kernel_id(b), (int)kernel_pid(b),
            kernel_sandbox_id(c));
    fclose(f);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);
    if (!mkdtemp(state_dir))
        return 1;
    chmod(state_dir, 0711);

    /* --- re-adoption after SIGKILL -------------------------------------------- */
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_kmgr", "child", state_dir, (char *)NULL);
        _exit(127);
    }
    cleanup_free char *ids_path = xasprintf("%s/ids", state_dir);
    for (int i = 0; i < 1200 && access(ids_path, F_OK) != 0; i++)
        usleep(100000);
    char ida[64] = "", idb[64] = "", sbc[80] = "";
    int pidb = 0;
    FILE *f = fopen(ids_path, "r");
    ok(f && fscanf(f, "%63s %63s %d %79s", ida, idb, &pidb, sbc) == 4,
       "a first sandgate made three sessions");
    if (f)
        fclose(f);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ok(pidb > 0 && kill(pidb, 0) == 0, "its sandboxes outlive it (SIGKILL)");
    kill(pidb, SIGKILL); /* one of them dies while no sandgate runs */
    usleep(300000);
    /* and one loses its record: its sandbox becomes an orphan */
    char idc[64];
    snprintf(idc, sizeof idc, "%.36s", sbc);
    cleanup_free char *recc = xasprintf("%s/sessions/%s.json", state_dir, idc);
    ok(unlink(recc) == 0, "the third session's record is removed");

    loop = loop_new();
    sg_error_t *err = NULL;
    proc_init(loop, &err);
    kmgr_config_t cfg;
    config(&cfg, state_dir);
    int64_t t0 = zclock_mono();
    mgr = kmgr_new(loop, &cfg, &err);
    if (!ok(mgr != NULL, "a second sandgate starts on the same state directory")) {
        diag("%s", err->msg);
        return tap_done();
    }
    kmgr_stats_t st;
    kmgr_stats(mgr, &st);
    is_int(st.adopted, 1, "the live sandbox is re-adopted");
    is_int(st.restarted_after_restart, 1, "the session whose sandbox died gets a new kernel");
    cleanup_free char *lst =
        xasprintf("runsc --root %s/runsc list -quiet | grep -q '%s'", state_dir, sbc);
    ok(system(lst) != 0, "the orphan sandbox (no record) is removed");
    kernel_t *a = kmgr_get(mgr, ida), *b = kmgr_get(mgr, idb);
    ok(a && b, "both sessions are known by id");
    if (!a || !b)
        return tap_done();
    run_until(ready_or_dead, a, 60000);
    diag("re-adoption to ready: %lld ms", (long long)(zclock_mono() - t0));
    result_t r;
    is_str(eval(a, "x", &r), "1234", "re-adopted session keeps its variables");
    result_clear(&r);
    run_until(ready_or_dead, b, 60000);
    is_str(eval(b, "x", &r), "NameError", "the restarted session lost its variables");
    result_clear(&r);
    is_str(eval(b, "open('b.txt').read()", &r), "'files stay'", "but kept its files");
    result_clear(&r);

    /* --- pool -------------------------------------------------------------------- */
    ok(run_until(pool_ready, NULL, 90000), "the warm pool fills");
    ok(kmgr_shutdown(mgr, idb, &err) == 0, "a session is shut down");
    ok(kmgr_get(mgr, idb) == NULL, "and is gone");
    int64_t t1 = zclock_mono();
    kernel_t *c = kmgr_start(mgr, "python3", NULL, NULL, &err);
    ok(c && kernel_state(c) == KERNEL_IDLE, "a new session is claimed from the pool, idle at once");
    is_str(eval(c, "1 + 1", &r), "2", "claimed kernel answers");
    diag("pool claim to first result: %lld ms", (long long)(zclock_mono() - t1));
    result_clear(&r);
    is_str(eval(c, "PRELOADED", &r), "'yes'", "the preload snippet ran in the pool kernel");
    result_clear(&r);
    kmgr_stats(mgr, &st);
    ok(st.claimed_from_pool == 1, "claim counted");

    /* --- limits and errors ---------------------------------------------------- */
    kernel_t *d = kmgr_start(mgr, "python3", NULL, NULL, &err);
    ok(d == NULL && err && err->kind == SG_E_LIMIT, "a third session exceeds max_kernels=2 (%s)",
       err ? err->msg : "started!");
    sg_error_free(&err);
    d = kmgr_start(mgr, "no-such-kernel", NULL, NULL, &err);
    ok(d == NULL && err && err->kind == SG_E_NOTFOUND, "unknown kernelspec is not found (%s)",
       err ? err->msg : "");
    sg_error_free(&err);
    ok(kmgr_shutdown(mgr, "nope", &err) < 0 && err && err->kind == SG_E_NOTFOUND,
       "shutting down an unknown session is not found");
    sg_error_free(&err);

    /* --- culling ------------------------------------------------------------------- */
    kmgr_destroy(&mgr, false); /* a and c keep running ... */
    cfg.cull_idle_ms = 1500;
    cfg.pool_size = 0;
    mgr = kmgr_new(loop, &cfg, &err); /* ... and are re-adopted here */
    kmgr_stats(mgr, &st);
    is_int(st.adopted, 2, "a clean restart re-adopts both sessions");
    is_int(st.pool_ready + st.pool_starting, 0, "pool kernels are not carried over");
    spin(4000);
    kmgr_stats(mgr, &st);
    ok(st.culled == 2 && kmgr_count(mgr) == 0, "idle sessions are culled (%llu culled)",
       (unsigned long long)st.culled);

    /* --- nothing left ------------------------------------------------------------ */
    kmgr_destroy(&mgr, true);
    spin(300);
    /* Culled sessions are removed in the background: let that finish. */
    cleanup_free char *ps = xasprintf("pgrep -f '[r]unsc.*%s' >/dev/null", state_dir);
    for (int i = 0; i < 150 && system(ps) == 0; i++)
        spin(100);
    ok(system(ps) != 0, "no runsc processes left");
    cleanup_free char *cmd = xasprintf("runsc --root %s/runsc list -quiet | grep -q .", state_dir);
    ok(system(cmd) != 0, "no containers left");
    cleanup_free char *mnt = xasprintf("grep -q '%s' /proc/mounts", state_dir);
    ok(system(mnt) != 0, "no mounts left");
    proc_fini();
    harness_fini();
    loop_destroy(&loop);
    cleanup_free char *rm = xasprintf("rm -rf '%s'", state_dir);
    if (system(rm) != 0)
        diag("could not remove %s", state_dir);
    return tap_done();
}
