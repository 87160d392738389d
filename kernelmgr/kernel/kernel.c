/* kernel: a kernel's lifecycle (kernel.h) — observers, start, death and
 * restart, shutdown, and the accessors.  Its connection and messages are
 * messages.c's, start slots slots.c's, the execution queue exec.c's, pause
 * and resume pause.c's, snapshots snapshot.c's; internal.h has what they
 * share. */
#include "kernelmgr/kernel/internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "proto/proto.h"

static const char *state_names[] = {"starting", "idle", "busy", "dead", "pausing", "paused"};

const char *kernel_state_name(kernel_state_t state)
{
    return (unsigned)state <= KERNEL_PAUSED ? state_names[state] : "?";
}

void kernel_opts_defaults(kernel_opts_t *opts)
{
    *opts = (kernel_opts_t){.start_timeout_ms = 120000,
                            .exec_timeout_ms = 0,
                            .interrupt_grace_ms = 5000,
                            .preload = NULL};
}

void end_timer(kernel_t *k, int *timer)
{
    if (*timer >= 0)
        loop_timer_end(k->loop, *timer);
    *timer = -1;
}

static bool observed_by(const kernel_t *k, kernel_event_fn *fn, void *arg)
{
    for (size_t i = 0; i < k->nobservers; i++)
        if (k->observers[i].fn == fn && k->observers[i].arg == arg)
            return true;
    return false;
}

void emit(kernel_t *k, kernel_event_t ev, const sg_error_t *err)
{
    if (k->ev)
        k->ev(k, ev, err, k->ev_arg);
    /* A copy: callbacks may (un)observe.  Each is called if still there. */
    size_t n = k->nobservers;
    struct observer *copy = n ? xmalloc(n * sizeof *copy) : NULL;
    if (n)
        memcpy(copy, k->observers, n * sizeof *copy);
    for (size_t i = 0; i < n; i++)
        if (observed_by(k, copy[i].fn, copy[i].arg))
            copy[i].fn(k, ev, err, copy[i].arg);
    free(copy);
    pause_if_wanted(k, ev);
}

void kernel_observe(kernel_t *k, kernel_event_fn *fn, void *arg)
{
    if (observed_by(k, fn, arg))
        return;
    k->observers = xrealloc(k->observers, (k->nobservers + 1) * sizeof *k->observers);
    k->observers[k->nobservers++] = (struct observer){fn, arg};
}

void kernel_unobserve(kernel_t *k, kernel_event_fn *fn, void *arg)
{
    for (size_t i = 0; i < k->nobservers; i++)
        if (k->observers[i].fn == fn && k->observers[i].arg == arg) {
            k->observers[i] = k->observers[--k->nobservers];
            return;
        }
}

/* --- start, death, restart ------------------------------------------------------ */

void die(kernel_t *k, sg_error_t *err)
{
    if (k->state == KERNEL_DEAD)
        return;
    log_warn("kernel %s died: %s", k->id, err->msg);
    snapshot_ready(k, err);
    k->state = KERNEL_DEAD;
    free(k->death);
    k->death = xstrdup(err->msg);
    disconnect(k);
    end_guest(k);
    end_guests(k);
    if (k->sb) {
        sandbox_remove(k->sb, false);
        sandbox_free(&k->sb);
    }
    fail_all(k, err);
    emit(k, KERNEL_EV_DEAD, err);
}

void die_msg(kernel_t *k, sg_errkind_t kind, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sg_error_t *err = NULL;
    sg_error_set(&err, kind, "%s", buf);
    die(k, err);
    sg_error_free(&err);
}

/* Why a sandbox ended, as far as the host can tell. */
static void death_cause(kernel_t *k, int status, char *buf, size_t size)
{
    char st[96];
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
        sandbox_env_config(k->env)->mode == SANDBOX_RUNSC) {
        /* sandgate-init reports a kernel killed by signal N as 128 + N. */
        int sig = WEXITSTATUS(status) - 128;
        snprintf(st, sizeof st, "saw the kernel killed by signal %d (%s)", sig, strsignal(sig));
    } else {
        proc_status_str(status, st, sizeof st);
    }
    const char *cgroup = sandbox_cgroup(k->sb);
    cleanup_free char *failcnt_path =
        xasprintf("/sys/fs/cgroup/memory%s/memory.failcnt", cgroup ? cgroup : "/-");
    uint64_t limit = sandbox_env_config(k->env)->memory_bytes;
    if (k->opts.memory_bytes > 0 && k->opts.memory_bytes < limit)
        limit = k->opts.memory_bytes;
    FILE *f = fopen(failcnt_path, "re");
    long long failcnt = 0;
    if (f) {
        if (fscanf(f, "%lld", &failcnt) != 1)
            failcnt = 0;
        fclose(f);
    }
    if (failcnt > 0)
        snprintf(buf, size, "out of memory (limit %llu MiB); the sandbox %s",
                 (unsigned long long)(limit >> 20), st);
    else
        snprintf(buf, size, "the kernel's sandbox %s", st);
}

static void on_tail(const char *tail, void *arg)
{
    kernel_t *k = arg;
    k->tail_req = 0;
    cleanup_free char *msg = k->dying_msg;
    k->dying_msg = NULL;
    die_msg(k, k->dying_kind, "%s%s%s", msg, *tail ? "; kernel log:\n" : "", tail);
}

/* A start failed: the kernel dies with msg (stolen) and the tail of its
 * log, once the log is read — through the launcher that may take until its
 * timeout, and nothing waits for it: the kernel stays STARTING, its timers
 * and watches ended, until on_tail. */
static void die_with_tail(kernel_t *k, sg_errkind_t kind, char *msg)
{
    if (k->sb == NULL) {
        die_msg(k, kind, "%s", msg);
        free(msg);
        return;
    }
    disconnect(k);
    k->dying_kind = kind;
    k->dying_msg = msg;
    uint64_t req = sandbox_log_tail(k->sb, 1500, on_tail, k);
    if (k->dying_msg) /* not answered yet */
        k->tail_req = req;
}

void on_exit_(pid_t pid, int status, void *arg)
{
    kernel_t *k = arg;
    k->watched = 0;
    if (k->freed)
        return;
    char cause[256];
    death_cause(k, status, cause, sizeof cause);
    if (k->sb && k->state == KERNEL_STARTING)
        die_with_tail(k, SG_E_UNAVAILABLE, xstrdup(cause));
    else
        die_msg(k, SG_E_UNAVAILABLE, "%s", cause);
}

void on_start_timeout(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    k->start_timer = -1;
    if (k->freed || k->state != KERNEL_STARTING)
        return;
    const char *what =
        k->info_replied && k->iopub_seen && k->client && !jclient_stdin_connected(k->client)
            ? "kernel answered, but its stdin channel did not accept a connection"
            : "kernel did not answer";
    die_with_tail(k, SG_E_TIMEOUT,
                  xasprintf("%s within %d ms of starting (kernelspec '%s')", what,
                            k->opts.start_timeout_ms, k->spec->name));
}

void on_probe(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->client == NULL || k->state != KERNEL_STARTING)
        return;
    int64_t now = zclock_mono();
    if (k->probe_sent && now - k->probe_sent < PROBE_RESEND_MS)
        return; /* the last one is not answered yet */
    k->probe_sent = now;
    jmsg_t *req = jsession_msg(jclient_session(k->client), "kernel_info_request", NULL);
    send_msg(k, JCHAN_SHELL, req, NULL);
    k->probes++;
    jmsg_destroy(&req);
}

void on_heartbeat(loop_t *loop, int timer_id, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->client == NULL)
        return;
    int64_t now = zclock_mono();
    if (k->hb_sent && now - k->hb_sent > HB_TIMEOUT_MS) {
        if (k->state != KERNEL_STARTING) {
            die_msg(k, SG_E_UNAVAILABLE, "heartbeat lost for %d ms", HB_TIMEOUT_MS);
            return;
        }
    }
    if (!k->hb_sent) {
        zstr_send(jclient_socket(k->client, JCHAN_HB), "ping");
        loop_zsock_sent(k->loop, k->io[JCHAN_HB]);
        k->hb_sent = now;
    }
}

/* stdin's monitor: its connection may be the last thing a start waits for. */
static bool on_monitor(loop_t *loop, zsock_t *sock, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->client == NULL || !jclient_stdin_connected(k->client))
        return false;
    log_debug("kernel %s: stdin connected", k->id);
    loop_io_remove(k->loop, &k->io_monitor);
    jclient_monitor_end(k->client);
    if (k->state == KERNEL_STARTING)
        maybe_ready(k);
    return false;
}

/* The sandbox runs: watch its process, connect, and probe until the kernel answers. */
int connect_kernel(kernel_t *k, pid_t pid, sg_error_t **err)
{
    if (pid > 0 && proc_watch(pid, on_exit_, k, err) < 0) /* a guest's: 0 (guest.c) */
        return -1;
    k->watched = pid;
    k->client = jclient_new(k->guest ? sandbox_guest_conn(k->guest) : sandbox_conn(k->sb), err);
    if (k->client == NULL)
        return -1;
    for (int c = 0; c < JCHAN_COUNT; c++) {
        k->io[c] = loop_zsock_add(k->loop, jclient_socket(k->client, c), on_socket, k, err);
        if (k->io[c] == NULL)
            return -1;
    }
    k->io_monitor = loop_zsock_add(k->loop, jclient_monitor(k->client), on_monitor, k, err);
    if (k->io_monitor == NULL)
        return -1;
    k->connected_at = zclock_mono();
    k->probes = 0;
    k->probe_sent = 0;
    k->probe_timer = loop_timer(
        k->loop, k->resuming || k->from_snapshot ? RESUME_PROBE_INTERVAL_MS : PROBE_INTERVAL_MS, 0,
        on_probe, k);
    k->hb_timer = loop_timer(k->loop, HB_INTERVAL_MS, 0, on_heartbeat, k);
    on_probe(k->loop, -1, k);
    return 0;
}

static void on_started(sandbox_t *sb, pid_t pid, sg_error_t *err, void *arg)
{
    kernel_t *k = arg;
    if (k->freed || k->sb != sb)
        return;
    if (pid < 0) {
        die(k, err);
        sg_error_free(&err);
        return;
    }
    sg_error_t *cerr = NULL;
    if (connect_kernel(k, pid, &cerr) < 0) {
        die(k, cerr);
        sg_error_free(&cerr);
    }
}

int launch(kernel_t *k, sg_error_t **err)
{
    k->state = KERNEL_STARTING;
    k->info_replied = k->iopub_seen = false;
    k->hb_sent = 0;
    if (k->host || k->guest_no) /* in a running sandbox: no start slot */
        return launch_guest(k, err);
    if (!take_slot(k)) /* launch_now once one is free */
        return 0;
    return launch_now(k, err);
}

int launch_now(kernel_t *k, sg_error_t **err)
{
    char sbid[128];
    snprintf(sbid, sizeof sbid, "%s-%d", k->id, ++k->generation);
    sandbox_opts_t so = {.internet = k->opts.internet,
                         .tenant = k->opts.owner,
                         .memory_bytes = k->opts.memory_bytes,
                         .cpu_quota_us = k->opts.cpu_quota_us,
                         .snapshot = k->from_snapshot,
                         .template = k->opts.template,
                         .egress_allow = k->opts.egress_allow,
                         .egress_deny = k->opts.egress_deny,
                         .egress_transforms = k->opts.egress_transforms,
                         .mounts = k->opts.mounts};
    k->sb = sandbox_new(k->env, sbid, k->spec, &so, k->workspace, err);
    if (k->sb == NULL) {
        release_slot(k);
        return -1;
    }
    k->start_timer = loop_timer(k->loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    if (sandbox_start(k->sb, on_started, k, err) < 0) {
        sandbox_remove(k->sb, false);
        sandbox_free(&k->sb);
        end_timer(k, &k->start_timer);
        release_slot(k);
        return -1;
    }
    return 0;
}

kernel_t *kernel_alloc(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg)
{
    kernel_t *k = xzalloc(sizeof *k);
    k->loop = loop;
    k->env = env;
    k->spec = spec;
    k->id = xstrdup(id);
    k->workspace = xstrdup(workspace);
    if (opts)
        k->opts = *opts;
    else
        kernel_opts_defaults(&k->opts);
    if (k->opts.preload)
        k->opts.preload = xstrdup(k->opts.preload);
    k->opts.owner = xstrdup(k->opts.owner ? k->opts.owner : "admin");
    k->opts.username = k->opts.username ? xstrdup(k->opts.username) : NULL;
    k->opts.template = k->opts.template ? xstrdup(k->opts.template) : NULL;
    k->opts.egress_allow = k->opts.egress_allow ? xstrdup(k->opts.egress_allow) : NULL;
    k->opts.egress_deny = k->opts.egress_deny ? xstrdup(k->opts.egress_deny) : NULL;
    k->opts.egress_transforms =
        k->opts.egress_transforms ? xstrdup(k->opts.egress_transforms) : NULL;
    k->opts.mounts = k->opts.mounts ? json_deep_copy(k->opts.mounts) : NULL;
    k->from_snapshot = k->opts.snapshot ? xstrdup(k->opts.snapshot) : NULL;
    k->generation = k->opts.generation;
    k->opts.snapshot = NULL; /* from_snapshot says it, until the kernel runs */
    k->ev = ev;
    k->ev_arg = ev_arg;
    k->start_timer = k->probe_timer = k->hb_timer = k->grace_timer = -1;
    k->last_activity = zclock_mono();
    return k;
}

static void kernel_free(void *arg)
{
    kernel_t *k = arg;
    free(k->id);
    free(k->workspace);
    free(k->death);
    free((char *)k->opts.preload);
    free((char *)k->opts.owner);
    free((char *)k->opts.username);
    free((char *)k->opts.template);
    free((char *)k->opts.egress_allow);
    free((char *)k->opts.egress_deny);
    free((char *)k->opts.egress_transforms);
    json_decref((json_t *)k->opts.mounts);
    free(k->from_snapshot);
    free(k->observers);
    json_decref(k->guest_env);
    free(k);
}

kernel_t *kernel_start(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg, sg_error_t **err)
{
    kernel_t *k = kernel_alloc(loop, env, spec, id, workspace, opts, ev, ev_arg);
    if (k->opts.hold) {
        k->held = true;
        k->state = KERNEL_STARTING;
        return k;
    }
    if (launch(k, err) < 0) {
        sg_error_prefix(err, "starting kernel %s", id);
        kernel_free(k);
        return NULL;
    }
    return k;
}

void kernel_release(kernel_t *k)
{
    if (!k->held || k->freed)
        return;
    k->held = false;
    emit(k, KERNEL_EV_PREPARED, NULL);
    if (k->freed || k->state != KERNEL_STARTING)
        return; /* shut down or failed by an observer */
    sg_error_t *err = NULL;
    if (launch(k, &err) < 0) {
        sg_error_prefix(&err, "starting kernel %s", k->id);
        die(k, err);
        sg_error_free(&err);
    }
}

void kernel_fail(kernel_t *k, const sg_error_t *err)
{
    if (!k->held || k->freed)
        return;
    k->held = false;
    sg_error_t *copy = NULL;
    sg_error_set(&copy, err->kind, "%s", err->msg);
    die(k, copy);
    sg_error_free(&copy);
}

bool kernel_prepared(const kernel_t *k)
{
    return !k->held;
}

kernel_t *kernel_adopt(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const char *sandbox_id, pid_t pid,
                       uint64_t checkpoint_bytes, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg, sg_error_t **err)
{
    kernel_t *k = kernel_alloc(loop, env, spec, id, workspace, opts, ev, ev_arg);
    const char *dash = strrchr(sandbox_id, '-');
    k->generation = dash ? atoi(dash + 1) : 1;
    k->state = pid == 0 ? KERNEL_PAUSED : KERNEL_STARTING;
    free((char *)k->opts.preload);
    k->opts.preload = NULL; /* it ran in the previous life */
    k->sb = sandbox_adopt(env, sandbox_id, pid, err);
    if (k->sb && pid == 0) {
        k->checkpoint_bytes = checkpoint_bytes;
        return k;
    }
    if (k->sb == NULL || connect_kernel(k, pid, err) < 0) {
        sg_error_prefix(err, "adopting kernel %s", id);
        disconnect(k);
        sandbox_free(&k->sb);
        kernel_free(k);
        return NULL;
    }
    k->start_timer = loop_timer(loop, k->opts.start_timeout_ms, 1, on_start_timeout, k);
    return k;
}

int kernel_interrupt(kernel_t *k, sg_error_t **err)
{
    if (k->state == KERNEL_DEAD || k->client == NULL)
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is not running", k->id);
    if (k->spec->interrupt_message) {
        jmsg_t *req = jsession_msg(jclient_session(k->client), "interrupt_request", NULL);
        int r = send_msg(k, JCHAN_CONTROL, req, err);
        jmsg_destroy(&req);
        return r;
    }
    if (k->guest)
        return sandbox_guest_signal(k->guest, SIGINT, err);
    if (!k->sb)
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is not running", k->id);
    return sandbox_signal(k->sb, SIGINT, err);
}

int kernel_restart(kernel_t *k, sg_error_t **err)
{
    if (kernel_wake_refused(k, err))
        return -1;
    return restart_now(k, err);
}

int restart_now(kernel_t *k, sg_error_t **err)
{
    if (k->held)
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is still being prepared", k->id);
    log_info("kernel %s: restarting", k->id);
    restart_reset(k, "the kernel was restarted; its variables are lost");
    free(k->from_snapshot); /* a fresh kernel, whatever a failed roll-back wanted */
    k->from_snapshot = NULL;
    if (launch(k, err) < 0) {
        die_msg(k, SG_E_UNAVAILABLE, "restart failed: %s", *err ? (*err)->msg : "?");
        return -1;
    }
    emit(k, KERNEL_EV_RESTARTED, NULL);
    return 0;
}

void restart_reset(kernel_t *k, const char *msg)
{
    snapshot_ready(k, &(sg_error_t){.kind = SG_E_UNAVAILABLE, .msg = (char *)msg});
    k->state = KERNEL_STARTING; /* not DEAD: die() below must not fire */
    k->resuming = k->resume_wanted = k->reattaching = false;
    k->checkpoint_bytes = 0;
    disconnect(k);
    end_guest(k);
    end_guests(k);
    if (k->sb) {
        sandbox_remove(k->sb, false);
        sandbox_free(&k->sb);
    }
    sg_error_t *why = NULL;
    sg_error_set(&why, SG_E_UNAVAILABLE, "%s", msg);
    /* Executions not yet sent survive into the new kernel; a sent one cannot. */
    exec_t *unsent = NULL, **tail = &unsent;
    exec_t *sent = NULL, **stail = &sent;
    for (exec_t *e = k->queue, *next; e; e = next) {
        next = e->next;
        e->next = NULL;
        if (e->msg_id[0]) {
            *stail = e;
            stail = &e->next;
        } else {
            *tail = e;
            tail = &e->next;
        }
    }
    k->queue = sent;
    fail_all(k, why);
    k->queue = unsent;
    sg_error_free(&why);
    k->execution_count = 0;
    k->published[0] = 0;
}

void kernel_shutdown(kernel_t **k_p, bool wait)
{
    if (k_p == NULL || *k_p == NULL)
        return;
    kernel_t *k = *k_p;
    *k_p = NULL;
    if (k->client && k->state != KERNEL_DEAD && k->state != KERNEL_STARTING) {
        /* Polite first: a kernel may clean up.  The sandbox is removed either way. */
        jmsg_t *req = jsession_msg(jclient_session(k->client), "shutdown_request",
                                   json_pack("{s:b}", "restart", 0));
        send_msg(k, JCHAN_CONTROL, req, NULL);
        jmsg_destroy(&req);
    }
    k->ev = NULL;
    snapshot_abort(k);
    emit(k, KERNEL_EV_GONE, NULL);
    k->tap = (kernel_tap_t){0};
    k->nobservers = 0;
    k->freed = true;
    disconnect(k);
    end_guest(k);
    end_guests(k);
    guest_unlink(k);
    if (k->sb) {
        sandbox_remove(k->sb, wait);
        sandbox_free(&k->sb);
    }
    sg_error_t *err = NULL;
    sg_error_set(&err, SG_E_UNAVAILABLE, "the kernel was shut down");
    k->state = KERNEL_DEAD;
    fail_all(k, err);
    sg_error_free(&err);
    loop_defer(k->loop, kernel_free, k);
}

void kernel_detach(kernel_t **k_p)
{
    if (k_p == NULL || *k_p == NULL)
        return;
    kernel_t *k = *k_p;
    *k_p = NULL;
    k->ev = NULL;
    snapshot_abort(k);
    emit(k, KERNEL_EV_GONE, NULL);
    k->tap = (kernel_tap_t){0};
    k->nobservers = 0;
    k->freed = true;
    disconnect(k);
    end_guest(k); /* no record of it: a next sandgate would not find it */
    end_guests(k);
    guest_unlink(k);
    sandbox_free(&k->sb);
    sg_error_t *err = NULL;
    sg_error_set(&err, SG_E_UNAVAILABLE, "sandgate is shutting down");
    fail_all(k, err);
    sg_error_free(&err);
    loop_defer(k->loop, kernel_free, k);
}

const char *kernel_id(const kernel_t *k)
{
    return k->id;
}

uint64_t kernel_exec(kernel_t *k, const sandbox_exec_t *x, const int fds[3],
                     sandbox_exec_done_fn *cb, void *arg, sg_error_t **err)
{
    sandbox_t *sb = k->host ? k->host->sb : k->sb;
    if ((k->state != KERNEL_IDLE && k->state != KERNEL_BUSY) || !sb) {
        sg_error_set(err, SG_E_CONFLICT, "kernel %s is %s; commands run while it runs", k->id,
                     kernel_status(k));
        return 0;
    }
    return sandbox_exec(sb, x, fds, cb, arg, err);
}

int kernel_exec_signal(kernel_t *k, uint64_t exec, int sig, sg_error_t **err)
{
    sandbox_t *sb = k->host ? k->host->sb : k->sb;
    return sb ? sandbox_exec_signal(sb, exec, sig, err) : 0;
}

void kernel_exec_pid(kernel_t *k, uint64_t exec, sandbox_pid_fn *cb, void *arg)
{
    sandbox_t *sb = k->host ? k->host->sb : k->sb;
    if (sb)
        sandbox_exec_pid(sb, exec, cb, arg);
    else
        cb(-1, arg);
}

int kernel_port_open(kernel_t *k, int port, bool *ack, sg_error_t **err)
{
    sandbox_t *sb = k->host ? k->host->sb : k->sb;
    if ((k->state != KERNEL_IDLE && k->state != KERNEL_BUSY) || !sb)
        return sg_error_set(err, SG_E_CONFLICT,
                            "kernel %s is %s; its ports are reached while it "
                            "runs",
                            k->id, kernel_status(k));
    return sandbox_port_open(sb, port, ack, err);
}

bool kernel_isolated(const kernel_t *k)
{
    return sandbox_env_isolated(k->env);
}

const char *kernel_sandbox_id(const kernel_t *k)
{
    if (k->host)
        return kernel_sandbox_id(k->host);
    return k->sb ? sandbox_id(k->sb) : "";
}

pid_t kernel_pid(const kernel_t *k)
{
    if (k->host)
        return kernel_pid(k->host);
    return k->sb ? sandbox_pid(k->sb) : 0;
}

const kspec_t *kernel_spec(const kernel_t *k)
{
    return k->spec;
}

const char *kernel_workspace(const kernel_t *k)
{
    return k->workspace;
}

const char *kernel_owner(const kernel_t *k)
{
    return k->opts.owner;
}

void kernel_set_owner(kernel_t *k, const char *owner)
{
    free((char *)k->opts.owner);
    k->opts.owner = xstrdup(owner ? owner : "admin");
    if (k->sb) /* its processes join the tenant's cgroup */
        sandbox_set_tenant(k->sb, k->opts.owner);
}

const kernel_opts_t *kernel_opts(const kernel_t *k)
{
    return &k->opts;
}

const char *kernel_username(const kernel_t *k)
{
    return k->opts.username;
}

void kernel_set_username(kernel_t *k, const char *username)
{
    free((char *)k->opts.username);
    k->opts.username = username && *username ? xstrdup(username) : NULL;
}

void kernel_set_egress(kernel_t *k, const char *allow, const char *deny, const char *transforms,
                       sandbox_rules_fn *cb, void *arg)
{
    if (k->host) {
        kernel_set_egress(k->host, allow, deny, transforms, cb, arg);
        return;
    }
    cleanup_error sg_error_t *err = NULL;
    if (!k->opts.internet) {
        sg_error_set(&err, SG_E_CONFLICT,
                     "kernel %s has no network, so it has no rules to change (one made with "
                     "internet access has them)",
                     k->id);
        cb(err, arg);
        return;
    }
    if (sandbox_check_egress(allow, deny, transforms, &err) < 0) {
        cb(err, arg);
        return;
    }
    free((char *)k->opts.egress_allow);
    free((char *)k->opts.egress_deny);
    free((char *)k->opts.egress_transforms);
    k->opts.egress_allow = allow && *allow ? xstrdup(allow) : NULL;
    k->opts.egress_deny = deny && *deny ? xstrdup(deny) : NULL;
    k->opts.egress_transforms = transforms && *transforms ? xstrdup(transforms) : NULL;
    if (k->sb)
        sandbox_set_egress(k->sb, allow, deny, transforms, cb, arg);
    else /* its next sandbox gets them */
        cb(NULL, arg);
}

bool kernel_internet(const kernel_t *k)
{
    return k->opts.internet;
}

kernel_state_t kernel_state(const kernel_t *k)
{
    return k->state;
}

bool kernel_shut_down(const kernel_t *k)
{
    return k->freed;
}

int64_t kernel_last_activity(const kernel_t *k)
{
    return k->last_activity;
}

int kernel_execution_count(const kernel_t *k)
{
    return k->execution_count;
}

void kernel_set_events(kernel_t *k, kernel_event_fn *ev, void *ev_arg)
{
    k->ev = ev;
    k->ev_arg = ev_arg;
}

void kernel_set_tap(kernel_t *k, const kernel_tap_t *tap)
{
    k->tap = tap ? *tap : (kernel_tap_t){0};
}

int kernel_send(kernel_t *k, jchan_t chan, const jmsg_t *msg, sg_error_t **err)
{
    if (chan != JCHAN_SHELL && chan != JCHAN_CONTROL && chan != JCHAN_STDIN)
        return sg_error_set(err, SG_E_INVALID, "messages cannot be sent on %s", jchan_name(chan));
    if (k->client == NULL || (k->state != KERNEL_IDLE && k->state != KERNEL_BUSY))
        return sg_error_set(err, SG_E_CONFLICT, "kernel %s is %s", k->id,
                            kernel_state_name(k->state));
    k->last_activity = zclock_mono();
    return send_msg(k, chan, msg, err);
}

const char *kernel_execution_state(const kernel_t *k)
{
    if (k->state == KERNEL_PAUSING)
        return "paused"; /* as good as: a Jupyter client only needs to know it is not running */
    if (k->state == KERNEL_STARTING || k->state == KERNEL_DEAD || k->state == KERNEL_PAUSED)
        return kernel_state_name(k->state);
    return k->published[0] ? k->published : "idle";
}

void kernel_add_connections(kernel_t *k, int delta)
{
    k->connections += delta;
    if (k->connections < 0)
        k->connections = 0;
    k->last_activity = zclock_mono();
}

int kernel_connections(const kernel_t *k)
{
    return k->connections;
}
