/* kernelmgr/kernel/kernel against the real thing: ipykernel inside runsc (or, with
 * SG_SANDBOX=none, plain processes).  Lifecycle, state, isolation, limits,
 * timeouts, interrupts, crash detection and restart; and nothing left over. */
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/lib/harness.h"

typedef struct {
    kernel_event_t last;
    int events, ready, dead, restarted;
    char *why;
    int64_t dead_at;
} watch_t;

static void on_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    watch_t *w = arg;
    w->last = ev;
    w->events++;
    if (ev == KERNEL_EV_READY)
        w->ready++;
    if (ev == KERNEL_EV_DEAD) {
        w->dead++;
        w->dead_at = zclock_mono();
    }
    if (ev == KERNEL_EV_RESTARTED)
        w->restarted++;
    free(w->why);
    w->why = err ? xstrdup(err->msg) : NULL;
}

static bool is_ready(void *arg)
{
    watch_t *w = arg;
    return w->ready > 0 || w->dead > 0;
}

static bool is_dead(void *arg)
{
    return ((watch_t *)arg)->dead > 0;
}

static sandbox_env_t *env;
static bool sandboxed;
static char state_dir[] = "/tmp/sg-ktest-XXXXXX";
static char ida[32], idb[32]; /* unique: runsc cgroups are machine-wide */

static kernel_t *start(const kspec_t *spec, const char *id, watch_t *w, const kernel_opts_t *o)
{
    sg_error_t *err = NULL;
    cleanup_free char *ws = xasprintf("%s/workspaces/%s", state_dir, id);
    if (sandbox_workspace_open(env, ws, &err) < 0) {
        diag("workspace: %s", err->msg);
        sg_error_free(&err);
        return NULL;
    }
    memset(w, 0, sizeof *w);
    kernel_t *k = kernel_start(loop, env, spec, id, ws, o, on_event, w, &err);
    if (!k) {
        diag("start: %s", err->msg);
        sg_error_free(&err);
        return NULL;
    }
    return k;
}

static void check_code(kernel_t *k, const char *code, const char *want_result, const char *name)
{
    result_t r;
    run_code(k, code, 30000, 60000, &r);
    const char *got = r_result(&r) ? r_result(&r) : "";
    ok(r.done && !r.err && r_status(&r) && strcmp(r_status(&r), "ok") == 0 &&
           strcmp(got, want_result) == 0,
       "%s (got %s%s)", name, r_result(&r) ? r_result(&r) : "no result", r.err ? r.err->msg : "");
    result_clear(&r);
}

/* The stdout of code, which should print one line. */
static char *output_of(kernel_t *k, const char *code)
{
    result_t r;
    run_code(k, code, 30000, 60000, &r);
    char *out = r_stdout(&r);
    if (r.err || (r_status(&r) && strcmp(r_status(&r), "ok") != 0))
        diag("%s -> %s %s %s", code, r_status(&r) ? r_status(&r) : "",
             r_ename(&r) ? r_ename(&r) : "", r.err ? r.err->msg : "");
    result_clear(&r);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n')
        out[n - 1] = 0;
    return out;
}

static int count_dir(const char *path, const char *prefix)
{
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

/* The first number in a file, -1 without one. */
static long long read_num(const char *path)
{
    FILE *f = fopen(path, "re");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* The cgroup v1 file of sandbox sbid of tenant (NULL: none) in hierarchy. */
static char *cg_file(const char *hierarchy, const char *tenant, const char *sbid, const char *file)
{
    return tenant
               ? xasprintf("/sys/fs/cgroup/%s/sandgate/t-%s/%s/%s", hierarchy, tenant, sbid, file)
               : xasprintf("/sys/fs/cgroup/%s/sandgate/%s/%s", hierarchy, sbid, file);
}

static bool no_runsc(void *arg)
{
    cleanup_free char *cmd = xasprintf("pgrep -f '[r]unsc.*%s' >/dev/null", state_dir);
    return system(cmd) != 0;
}

static const kernel_exec_opts_t eo = {0};

int main(void)
{
    const char *mode = getenv("SG_SANDBOX") ? getenv("SG_SANDBOX") : "runsc";
    sandboxed = strcmp(mode, "none") != 0;
    if (!mkdtemp(state_dir))
        return 1;
    snprintf(ida, sizeof ida, "ka%d", (int)getpid());
    snprintf(idb, sizeof idb, "kb%d", (int)getpid());
    chmod(state_dir, 0711);
    loop = loop_new();
    sg_error_t *err = NULL;
    proc_init(loop, &err);

    sandbox_config_t cfg;
    sandbox_config_defaults(&cfg);
    cfg.mode = sandboxed ? SANDBOX_RUNSC : SANDBOX_NONE;
    cfg.workspace_bytes = 32ull << 20;
    cfg.tmp_bytes = 32ull << 20;
    env = sandbox_env_new(&cfg, state_dir, &err);
    if (!ok(env != NULL, "sandbox environment prepared (%s)", mode)) {
        diag("%s", err->msg);
        return tap_done();
    }
    kspecs_t *specs = kspecs_discover(NULL);
    const kspec_t *py = kspecs_get(specs, "python3");
    if (!ok(py != NULL, "python3 kernelspec found")) {
        return tap_done();
    }

    /* --- start and state --------------------------------------------------- */
    watch_t wa;
    kernel_opts_t o;
    kernel_opts_defaults(&o);
    o.interrupt_grace_ms = 2000;
    int64_t t0 = zclock_mono();
    kernel_t *a = start(py, ida, &wa, &o);
    ok(a && kernel_state(a) == KERNEL_STARTING, "start returns at once, kernel starting");
    run_until(is_ready, &wa, 60000);
    ok(wa.ready == 1 && kernel_state(a) == KERNEL_IDLE, "kernel ready (%s)",
       wa.why ? wa.why : "ok");
    diag("cold start to ready: %lld ms", (long long)(zclock_mono() - t0));
    if (!wa.ready) {
        return tap_done();
    }
    check_code(a, "x = 41", "", "x = 41 has no result");
    check_code(a, "x + 1", "42", "x + 1 gives 42: variables persist");
    cleanup_free char *out = output_of(a, "open('note.txt','w').write('kept'); print('written')");
    is_str(out, "written", "a file is written in the workspace");
    check_code(a, "open('note.txt').read()", "'kept'", "and read back in the next execution");
    cleanup_free char *host_note = xasprintf("%s/workspaces/%s/note.txt", state_dir, ida);
    ok(access(host_note, F_OK) == 0, "the file is in the workspace on the host");

    result_t r;
    run_code(a, "for i in range(3): print(i, flush=True)\n1/0", 0, 30000, &r);
    cleanup_free char *s = r_stdout(&r);
    ok(r.done && !r.err && strcmp(s, "0\n1\n2\n") == 0, "stdout streamed in order");
    is_str(r_status(&r), "error", "an exception is a normal completion with status error");
    is_str(r_ename(&r), "ZeroDivisionError", "with the exception's name");
    result_clear(&r);

    run_code(a, "input('say: ')", 0, 30000, &r);
    is_str(r_ename(&r), "StdinNotImplementedError", "input() without stdin support fails clearly");
    if (!r_ename(&r))
        diag("done=%d err=%s reply=%s", r.done, r.err ? r.err->msg : "-",
             r.reply ? json_dumps(r.reply, 0) : "-");
    result_clear(&r);

    /* --- isolation --------------------------------------------------------- */
    if (sandboxed) {
        cleanup_free char *uid = output_of(a, "import os; print(os.getuid())");
        ok(strcmp(uid, "0") != 0 && *uid, "uid inside is not 0 (%s)", uid);
        cleanup_free char *root = output_of(a, "import os; print(os.path.exists('/root'))");
        is_str(root, "False", "host /root is invisible");
        cleanup_free char *shadow = output_of(a, "import os; print(os.path.exists('/etc/shadow'))");
        is_str(shadow, "False", "/etc/shadow is invisible");
        const char *src = getenv("SG_SRCDIR") ? getenv("SG_SRCDIR") : "/work";
        cleanup_free char *code = xasprintf("import os; print(os.path.exists(%s))", "'"
                                                                                    "/work"
                                                                                    "'");
        (void)src;
        cleanup_free char *proj = output_of(a, code);
        is_str(proj, "False", "the project tree is invisible");
        cleanup_free char *home = output_of(a, "import os; print(sorted(os.listdir('/home')))");
        is_str(home, "['user']", "/home holds only the workspace");
        cleanup_free char *procs = output_of(
            a, "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]) < 10)");
        is_str(procs, "True", "host processes are invisible");
        cleanup_free char *sdir = xasprintf("import os; print(os.path.exists('%s'))", state_dir);
        cleanup_free char *st = output_of(a, sdir);
        is_str(st, "False", "sandgate's state directory is invisible");
        cleanup_free char *net = output_of(
            a, "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
               "    print('connected')\nexcept OSError as e:\n    print('blocked')");
        is_str(net, "blocked", "no network egress");
        cleanup_free char *lo =
            output_of(a, "import socket\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\n"
                         "c=socket.create_connection(s.getsockname()); print('loopback ok')");
        is_str(lo, "loopback ok", "loopback works");
        cleanup_free char *ro =
            output_of(a, "try:\n    open('/usr/x','w')\nexcept OSError as e:\n    print('ro')");
        is_str(ro, "ro", "/usr is read-only");
    }

    /* --- limits ------------------------------------------------------------------ */
    if (sandboxed) {
        cleanup_free char *disk = output_of(
            a, "try:\n    f=open('big','wb')\n    [f.write(b'x'*1048576) for _ in range(64)]\n"
               "    f.flush(); print('wrote')\nexcept OSError as e:\n    print('ENOSPC' if "
               "e.errno==28 else e)");
        is_str(disk, "ENOSPC", "writing past the workspace limit fails inside the sandbox");
        free(output_of(a, "import os; os.remove('big')"));
    }

    /* a second kernel, to show limits hit one session only: another
     * tenant's, with a lower memory ceiling than the server's */
    watch_t wb;
    kernel_opts_t ob = o;
    ob.owner = "ktest-b";
    ob.memory_bytes = 512ull << 20;
    ob.cpu_quota_us = 50000;
    kernel_t *b = start(py, idb, &wb, &ob);
    run_until(is_ready, &wb, 60000);
    ok(wb.ready == 1, "a second kernel starts");
    check_code(b, "y = 'neighbour'", "", "neighbour has state");

    struct stat cst;
    if (sandboxed && stat("/sys/fs/cgroup/memory", &cst) == 0 &&
        stat("/sys/fs/cgroup/cpu", &cst) == 0) {
        /* cgroup v1: each tenant's sandboxes in its own cgroup (a kernel
         * with no owner is the admin's), with the tenants' CPU weight. */
        const char *sa = kernel_sandbox_id(a), *sbb = kernel_sandbox_id(b);
        cleanup_free char *pa = cg_file("cpu", "admin", sa, "cgroup.procs");
        cleanup_free char *pb = cg_file("cpu", "ktest-b", sbb, "cgroup.procs");
        cleanup_free char *ma = cg_file("memory", "admin", sa, "memory.limit_in_bytes");
        cleanup_free char *mb = cg_file("memory", "ktest-b", sbb, "memory.limit_in_bytes");
        cleanup_free char *qb = cg_file("cpu", "ktest-b", sbb, "cpu.cfs_quota_us");
        ok(read_num(pa) > 0 && read_num(pb) > 0,
           "each sandbox's processes are in its tenant's cgroup: %s, %s", pa, pb);
        is_int((int)read_num("/sys/fs/cgroup/cpu/sandgate/t-ktest-b/cpu.shares"), 1024,
               "the tenant's cgroup has the tenants' CPU weight (cpu.shares)");
        ok(read_num(ma) == (long long)cfg.memory_bytes,
           "the admin's sandbox has the server's "
           "memory limit (%lld)",
           read_num(ma));
        ok(read_num(mb) == 512ll << 20, "the other tenant's has its lower ceiling (%lld)",
           read_num(mb));
        ok(read_num(qb) == 50000, "and its lower CPU quota (%lld)", read_num(qb));
    }

    if (sandboxed) {
        /* A process flood: far more processes than the limit allows. */
        run_code(a,
                 "import subprocess\nn = 0\ntry:\n    while n < 1000:\n"
                 "        subprocess.Popen(['/bin/sleep', '600']); n += 1\n"
                 "except OSError as e:\n    print('fork failed:', e.errno, 'after', n)",
                 30000, 60000, &r);
        cleanup_free char *fo = r_stdout(&r);
        ok(strstr(fo, "fork failed: 11") != NULL, "a process flood hits the process limit: %s", fo);
        result_clear(&r);
        spin(200);
        /* Either way, start the memory test from a fresh kernel. */
        wa.ready = wa.dead = 0;
        sg_error_t *rerr = NULL;
        kernel_restart(a, &rerr);
        sg_error_free(&rerr);
        run_until(is_ready, &wa, 60000);
        ok(wa.ready == 1, "kernel restarted after the fork bomb");

        wa.dead = 0;
        run_code(a, "b = bytearray(3 * 1024**3)", 0, 60000, &r);
        ok(r.done && (r.err || (r_ename(&r) && strcmp(r_ename(&r), "MemoryError") == 0)),
           "allocating past the memory limit ends in an error for that session (%s)",
           r.err         ? r.err->msg
           : r_ename(&r) ? r_ename(&r)
                         : "none");
        result_clear(&r);
        check_code(b, "y", "'neighbour'", "the neighbour kernel is unaffected");
    }

    /* --- timeout and interrupt ------------------------------------------------ */
    if (kernel_state(a) == KERNEL_DEAD) {
        sg_error_t *rerr = NULL;
        kernel_restart(a, &rerr);
        sg_error_free(&rerr);
    }
    wa.ready = wa.dead = 0;
    if (kernel_state(a) != KERNEL_IDLE)
        run_until(is_ready, &wa, 60000);
    check_code(a, "z = 7", "", "state set before a timeout");
    run_code(a, "while True: pass", 2000, 60000, &r);
    ok(r.done && r.err && r.err->kind == SG_E_TIMEOUT,
       "while True: pass is stopped by the timeout (%s)", r.err ? r.err->msg : "no error");
    result_clear(&r);
    check_code(a, "z", "7", "the session answers afterwards, state intact (interrupt worked)");

    memset(&r, 0, sizeof r);
    r.outputs = json_array();
    kernel_execute(a, "import time\nfor i in range(60): time.sleep(0.5)", &eo,
                   &(kernel_exec_cb_t){.on_output = r_output, .on_done = r_done, .arg = &r}, NULL);
    spin(1500);
    ok(kernel_state(a) == KERNEL_BUSY, "busy while running");
    kernel_interrupt(a, NULL);
    run_until(r_is_done, &r, 20000);
    is_str(r_ename(&r), "KeyboardInterrupt", "interrupt stops a long sleep with KeyboardInterrupt");
    result_clear(&r);

    /* Code that does not notice the interrupt: the grace period ends and the
     * kernel is restarted. */
    wa.ready = wa.restarted = 0;
    check_code(a, "w = 1", "", "state before a stuck execution");
    /* sum() over a range runs in C and never looks at signals. */
    run_code(a, "sum(range(10**13))", 1500, 60000, &r);
    ok(r.done && r.err && r.err->kind == SG_E_TIMEOUT && strstr(r.err->msg, "restarted"),
       "a kernel that ignores the interrupt is restarted after the grace period (%s)",
       r.err ? r.err->msg : "no error");
    result_clear(&r);
    run_until(is_ready, &wa, 60000);
    ok(wa.restarted == 1 && wa.ready == 1, "and comes back");
    run_code(a, "w", 0, 30000, &r);
    is_str(r_ename(&r), "NameError", "with its variables gone, as the error said");
    result_clear(&r);
    check_code(a, "z = 7", "", "state set again");

    /* interrupt_mode "message": interrupt_request on the control channel. */
    cleanup_free char *msgdir = xasprintf("%s/kspec-msg", state_dir);
    cleanup_free char *mk =
        xasprintf("mkdir -p %s && sed 's/\"display_name\"/\"interrupt_mode\": \"message\", "
                  "\"display_name\"/' %s/kernel.json > %s/kernel.json",
                  msgdir, py->dir, msgdir);
    ok(system(mk) == 0, "a kernelspec with interrupt_mode message");
    kspec_t *pymsg = kspec_load(msgdir, "python3-msg", &err);
    ok(pymsg && pymsg->interrupt_message, "loaded");
    watch_t wm;
    cleanup_free char *idm = xasprintf("km%d", (int)getpid());
    kernel_t *km = pymsg ? start(pymsg, idm, &wm, &o) : NULL;
    run_until(is_ready, &wm, 60000);
    memset(&r, 0, sizeof r);
    r.outputs = json_array();
    if (km)
        kernel_execute(km, "import time\nfor i in range(60): time.sleep(0.5)", &eo,
                       &(kernel_exec_cb_t){.on_output = r_output, .on_done = r_done, .arg = &r},
                       NULL);
    spin(1500);
    if (km)
        kernel_interrupt(km, NULL);
    run_until(r_is_done, &r, 20000);
    is_str(r_ename(&r), "KeyboardInterrupt", "interrupt_request on control interrupts");
    result_clear(&r);
    kernel_shutdown(&km, true);
    cleanup_free char *wsm = xasprintf("%s/workspaces/%s", state_dir, idm);
    sandbox_workspace_close(env, wsm, true);
    kspec_destroy(&pymsg);

    /* A kernel that cannot start: the error carries its stderr. */
    cleanup_free char *baddir = xasprintf("%s/kspec-bad", state_dir);
    cleanup_free char *mkbad =
        xasprintf("mkdir -p %s && echo '{\"argv\": [\"/usr/bin/python3\", \"-c\", "
                  "\"import no_such_module_xyzzy\", \"{connection_file}\"], \"display_name\": "
                  "\"bad\"}' > %s/kernel.json",
                  baddir, baddir);
    ok(system(mkbad) == 0, "a kernelspec whose kernel fails at once");
    kspec_t *bad = kspec_load(baddir, "bad", &err);
    watch_t wx;
    cleanup_free char *idx = xasprintf("kx%d", (int)getpid());
    kernel_t *kx = bad ? start(bad, idx, &wx, &o) : NULL;
    run_until(is_ready, &wx, 60000);
    ok(wx.dead == 1 && wx.why && strstr(wx.why, "No module named 'no_such_module_xyzzy'"),
       "a failed start is reported with the kernel's stderr (%s)", wx.why ? wx.why : "no error");
    kernel_shutdown(&kx, true);
    cleanup_free char *wsx = xasprintf("%s/workspaces/%s", state_dir, idx);
    sandbox_workspace_close(env, wsx, true);
    kspec_destroy(&bad);
    free(wm.why);
    free(wx.why);

    /* --- death and restart ------------------------------------------------------- */
    memset(&r, 0, sizeof r);
    r.outputs = json_array();
    wa.dead = 0;
    int64_t sent = zclock_mono();
    kernel_execute(a, "import os; os._exit(3)", &eo,
                   &(kernel_exec_cb_t){.on_output = r_output, .on_done = r_done, .arg = &r}, NULL);
    run_until(is_dead, &wa, 10000);
    int64_t took = wa.dead_at - sent;
    ok(wa.dead == 1 && kernel_state(a) == KERNEL_DEAD, "os._exit is detected as death (%s)",
       wa.why ? wa.why : "");
    ok(took < 1000 + 500, "death noticed within about 1 s of the execution being sent (%lld ms)",
       (long long)took);
    ok(r.done && r.err && r.err->kind == SG_E_UNAVAILABLE,
       "the running execution ends with the death");
    result_clear(&r);

    wa.ready = wa.dead = wa.restarted = 0;
    ok(kernel_restart(a, &err) == 0, "restart after death");
    run_until(is_ready, &wa, 60000);
    ok(wa.ready == 1 && wa.restarted == 1, "restarted kernel ready");
    run_code(a, "z", 0, 30000, &r);
    is_str(r_ename(&r), "NameError", "variables are lost after a restart");
    result_clear(&r);
    check_code(a, "open('note.txt').read()", "'kept'", "the workspace survives the restart");

    wa.dead = 0;
    run_code(a, "import ctypes; ctypes.string_at(0)", 0, 20000, &r);
    run_until(is_dead, &wa, 5000);
    ok(wa.dead == 1, "a segfault is detected as death (%s)", wa.why ? wa.why : "");
    result_clear(&r);

    check_code(b, "y", "'neighbour'", "the neighbour kernel is still fine after all that");

    /* --- shutdown leaves nothing ----------------------------------------------- */
    kernel_shutdown(&a, true);
    kernel_shutdown(&b, true);
    spin(300);
    if (sandboxed)
        run_until(no_runsc, NULL, 15000);
    cleanup_free char *kdir = xasprintf("%s/kernels", state_dir);
    is_int(count_dir(kdir, ""), 0, "no kernel directories left");
    json_t *left = sandbox_list(env, NULL);
    is_int(json_array_size(left), 0, "no containers left in runsc list");
    json_decref(left);
    if (sandboxed) {
        ok(run_until(no_runsc, NULL, 15000), "no runsc processes left (background removals end)");
        cleanup_free char *ps =
            xasprintf("pgrep -af '[r]unsc.*%s' | sed 's/^/# left: /'", state_dir);
        if (system(ps) != 0)
            diag("none");
        is_int(count_dir("/sys/fs/cgroup/memory/sandgate", ida) +
                   count_dir("/sys/fs/cgroup/memory/sandgate/t-admin", ida) +
                   count_dir("/sys/fs/cgroup/memory/sandgate/t-ktest-b", idb),
               0, "no cgroups left");
    }
    cleanup_free char *ws1 = xasprintf("%s/workspaces/%s", state_dir, ida);
    cleanup_free char *ws2 = xasprintf("%s/workspaces/%s", state_dir, idb);
    sandbox_workspace_close(env, ws1, true);
    sandbox_workspace_close(env, ws2, true);

    kspecs_destroy(&specs);
    sandbox_env_destroy(&env); /* it lets go of runsc's null-netns mount */
    cleanup_free char *mnt = xasprintf("grep -q '%s' /proc/mounts", state_dir);
    ok(system(mnt) != 0, "no mounts left");
    proc_fini();
    harness_fini();
    loop_destroy(&loop);
    cleanup_free char *rm = xasprintf("rm -rf '%s'", state_dir);
    if (system(rm) != 0)
        diag("could not remove %s", state_dir);
    free(wa.why);
    free(wb.why);
    return tap_done();
}
