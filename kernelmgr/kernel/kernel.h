/* kernel: one Jupyter kernel in its sandbox, driven by the event loop.
 *
 * States: starting -> idle <-> busy -> dead.  Ready (idle) means a
 * kernel_info_reply arrived and iopub delivers.  Executions are queued and
 * sent one at a time; each gets every iopub message whose parent is its
 * request, as it arrives, and completes on execute_reply plus status idle.
 * A timeout interrupts the kernel and, if it does not come back within the
 * grace period, restarts it.  Death (process exit, whatever the cause, or a
 * lost heartbeat) is noticed through a pidfd and reported with its cause.
 */
#ifndef SG_KERNEL_H
#define SG_KERNEL_H

#include "common/loop.h"
#include <stdint.h>

#include "kernelmgr/kspec/kspec.h"
#include "kernelmgr/sandbox/sandbox.h"
#include "proto/proto.h"

/* PAUSING: its sandbox is being checkpointed; PAUSED: only the checkpoint
 * is left (no process).  A resume goes through STARTING again. */
typedef enum {
    KERNEL_STARTING,
    KERNEL_IDLE,
    KERNEL_BUSY,
    KERNEL_DEAD,
    KERNEL_PAUSING,
    KERNEL_PAUSED
} kernel_state_t;

typedef struct kernel kernel_t;

/* Lifecycle events: a held kernel was released (PREPARED: its workspace is
 * there), the kernel became ready (err NULL), died or failed to start (err
 * says why, with the kernel's stderr tail), was restarted, or its handle is
 * about to be freed (GONE).  PAUSED ends a pause: err NULL when the kernel
 * is paused, else why not (it runs on, or — when the attempt cost the
 * sandbox — RESTARTED follows).  A resumed kernel reports READY again. */
typedef enum {
    KERNEL_EV_PREPARED,
    KERNEL_EV_READY,
    KERNEL_EV_DEAD,
    KERNEL_EV_RESTARTED,
    KERNEL_EV_GONE,
    KERNEL_EV_PAUSED,
    KERNEL_EV_NOT_RESUMED /* err says why; it stays paused, its image kept (another runsc's) */
} kernel_event_t;
typedef void(kernel_event_fn)(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg);

typedef struct {
    int start_timeout_ms;   /* default 120000 (starts queue for CPU under load) */
    int exec_timeout_ms;    /* default for executions; 0 = none */
    int interrupt_grace_ms; /* after a timeout's interrupt, before restarting (5000) */
    const char *preload;    /* code run silently once ready, before READY is reported */
    bool hold;              /* start held: nothing runs until kernel_release() (or kernel_fail()) */
    bool internet;          /* the sandbox gets a network (egress.h) */
    const char *owner;      /* the tenant it belongs to (copied); NULL: "admin"; with
                               tenant cgroups its sandboxes go in the tenant's (sandbox.h) */
    uint64_t memory_bytes;  /* the tenant's ceilings for its sandboxes: the lower of each and */
    uint64_t cpu_quota_us;  /* the server's applies (sandbox_opts_t); 0: the server's */
    const char *username;   /* who its client says uses it (copied); NULL: not said */
    const char *snapshot;   /* kernel_start: start as this snapshot's kernel (sandbox.h; its
                               workspace restored by the caller); NULL: a fresh kernel */
    const char *template;   /* its sandboxes' root is this template's (copied; sandbox.h);
                               NULL: the server's */
    const char *egress_allow, *egress_deny; /* with internet: its sandboxes' own rules (copied;
                                               sandbox.h's sandbox_set_egress); NULL: none */
    const char *egress_transforms;          /* and headers (the same) */
    const json_t *mounts; /* volumes in its sandboxes (sandbox_opts_t.mounts; copied); NULL:
                             none */
    int generation;       /* its first sandbox is ID-(generation + 1): above 0 for a session
                             moved from another replica, whose sandbox of the same id may be
                             going there still (a host's cgroups are shared); 0: ID-1 */
    /* Asked before a paused or dead kernel runs again for a client
     * (kernel_resume, kernel_execute, kernel_restart): 0 to go ahead, else
     * -1 with *err, which those return (the gateway's tenants: max-live).
     * Not asked when the kernel resumes or restarts on its own (after a
     * snapshot, a failed pause, a timeout).  NULL: always. */
    int (*wake_gate)(kernel_t *k, sg_error_t **err);
} kernel_opts_t;

typedef struct {
    int timeout_ms;   /* 0: the kernel's default */
    bool allow_stdin; /* false: input() raises StdinNotImplementedError */
    bool silent;
    bool store_history;
    bool rich_formats; /* ask a Python kernel for E2B's result formats e2b/chart and
                          e2b/data (the request's metadata says so: guest/kernel.py) */
} kernel_exec_opts_t;

typedef struct {
    /* Each iopub message of the execution (stream, display_data,
     * execute_result, error, clear_output, ...); msg is borrowed. */
    void (*on_output)(const jmsg_t *msg, void *arg);
    /* Once at the end.  reply: execute_reply content (borrowed; NULL when the
     * kernel gave none).  err: NULL for a normal completion — an exception in
     * user code is a normal completion with reply.status "error" — or why
     * the execution ended abnormally (timeout, kernel died or restarted). */
    void (*on_done)(const json_t *reply, const sg_error_t *err, void *arg);
    /* Optional: the execution passed its timeout and the kernel is being
     * interrupted (err says so, as on_done will if that stops it). */
    void (*on_timeout)(const sg_error_t *err, void *arg);
    void *arg;
} kernel_exec_cb_t;

const char *kernel_state_name(kernel_state_t state);
void kernel_opts_defaults(kernel_opts_t *opts);

/* Starts a kernel for spec (borrowed; must outlive the kernel) with the given
 * workspace directory (already opened).  Returns at once; events report
 * readiness or failure. */
kernel_t *kernel_start(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg, sg_error_t **err);
/* Reconnects to a kernel whose sandbox (container sandbox_id, process pid)
 * outlived a previous sandgate.  Reports READY when it answers.  pid 0: the
 * kernel was paused (checkpoint_bytes its size); it stays PAUSED. */
kernel_t *kernel_adopt(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const char *sandbox_id, pid_t pid,
                       uint64_t checkpoint_bytes, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg, sg_error_t **err);

/* Starts a kernel for spec inside host's sandbox, beside host's own kernel
 * (kernelmgr/kernel/guest.c): it shares host's files, processes, network
 * and tenant, and starts at once, or once host runs (a paused host is
 * resumed for it); SG_E_LIMIT when the sandbox holds SANDBOX_GUESTS more
 * already.  It dies when host's sandbox ends, restarts or goes.  The
 * sandbox pauses whole: host's pause (or a snapshot's) pauses its guests
 * with it, a guest's pause is host's, a guest's resume wakes host.  env:
 * NAME -> string, added to its process's environment (copied; NULL). */
kernel_t *kernel_start_guest(kernel_t *host, const kspec_t *spec, const char *id,
                             const kernel_opts_t *opts, const json_t *env, kernel_event_fn *ev,
                             void *ev_arg, sg_error_t **err);
/* What k's sandbox uses now (sandbox_usage; its host's for a guest). */
bool kernel_usage(const kernel_t *k, sandbox_usage_t *u);
/* The kernel whose sandbox k runs in; NULL: k's is its own. */
kernel_t *kernel_host(const kernel_t *k);
/* How many kernels run in k's sandbox beside it (not dead). */
unsigned kernel_guests(const kernel_t *k);
/* Whether every kernel beside k in its sandbox is idle with no frontend
 * connected; *last_activity is the latest activity of k and of them (a
 * sandbox is idle for --pause-after as a whole). */
bool kernel_sandbox_idle(const kernel_t *k, int64_t *last_activity);

/* A held kernel (opts.hold) may start now: PREPARED is reported, then the
 * sandbox starts.  kernel_fail() instead ends it with err (DEAD).  Both do
 * nothing to a kernel that is not held. */
void kernel_release(kernel_t *k);
void kernel_fail(kernel_t *k, const sg_error_t *err);
/* Not held: its workspace can be used. */
bool kernel_prepared(const kernel_t *k);

/* Observers: each gets every lifecycle event (after the kernel's own
 * handler, its owner's), GONE last.  An observer may remove itself, or
 * others, from its callback. */
void kernel_observe(kernel_t *k, kernel_event_fn *fn, void *arg);
void kernel_unobserve(kernel_t *k, kernel_event_fn *fn, void *arg);

/* Queues code for execution.  Returns an execution id (> 0), or 0 with *err
 * set when the kernel is dead. */
uint64_t kernel_execute(kernel_t *k, const char *code, const kernel_exec_opts_t *opts,
                        const kernel_exec_cb_t *cb, sg_error_t **err);
/* The caller of execution id is gone: no more callbacks (the code runs on). */
void kernel_forget(kernel_t *k, uint64_t exec_id);

/* Follows an execute_request that a frontend sent itself (kernel_send),
 * by its msg_id, as kernel_execute's executions are followed: cb gets its
 * iopub output and its end (execute_reply plus status idle; or an error
 * when the kernel dies or restarts), and its timeout (opts->timeout_ms, 0:
 * the kernel's default) interrupts, then restarts, the kernel the same way.
 * Its clock starts when the kernel says it is busy with it (the kernel may
 * hold it behind others).  Nothing is queued or sent, and the tap still
 * sees every message.  Returns an id for kernel_forget, or 0 with *err
 * when the kernel is dead. */
uint64_t kernel_track(kernel_t *k, const char *msg_id, const kernel_exec_opts_t *opts,
                      const kernel_exec_cb_t *cb, sg_error_t **err);

int kernel_interrupt(kernel_t *k, sg_error_t **err);

/* Pause: an idle kernel with nothing queued is saved to disk and its sandbox
 * ends (sandbox_pause); PAUSED reports the outcome.  SG_E_CONFLICT when it
 * is not idle.  Resume: a paused kernel is restored and reports READY; it
 * is also resumed by an execution queued on it.  Resuming a running kernel
 * does nothing; one that cannot be restored gets a fresh kernel (its
 * variables are lost: queued executions end with that error). */
int kernel_pause(kernel_t *k, sg_error_t **err);
int kernel_resume(kernel_t *k, sg_error_t **err);
/* A pause without the kernel's memory (E2B's filesystem-only pause): a
 * fresh kernel on the same workspace (RESTARTED, READY), paused once it
 * answers (PAUSED) — its variables and processes are gone, its files kept,
 * and its resume is a cold boot's state.  The same refusals as a pause;
 * SG_E_CONFLICT too when its sandbox holds other kernels. */
int kernel_pause_cold(kernel_t *k, sg_error_t **err);
/* Whether a kernel_pause_cold is under way (its fresh kernel starting, to
 * be paused): to its clients it is pausing. */
bool kernel_pause_pending(const kernel_t *k);
/* Sandgate is stopping and will pause k once its work is done: from now on
 * kernel_execute and kernel_resume refuse (SG_E_UNAVAILABLE, why: a
 * literal); the executions already queued run to their end. */
void kernel_close(kernel_t *k, const char *why);
/* "starting", "idle", "busy", "dead", "pausing", "paused" or "resuming". */
const char *kernel_status(const kernel_t *k);
typedef struct {
    uint64_t checkpoint_bytes;             /* a paused kernel's checkpoint; 0 otherwise */
    int64_t last_pause_ms, last_resume_ms; /* durations (0: none yet) */
    uint64_t resumes;                      /* completed resumes of this handle */
} kernel_pause_info_t;
kernel_pause_info_t kernel_pause_info(const kernel_t *k);
/* Snapshots (sandbox.h's): kernel_snapshot saves the kernel as snapshot
 * sid.  An idle kernel is paused for it and resumed afterwards (executions
 * sent meanwhile wait for the resume); a paused one stays paused.  cb is
 * called once with the snapshot's bytes on disk, or why not — after the
 * resume began, from the loop (or before this returns without a
 * launcher).  SG_E_CONFLICT at once when the kernel is busy or starting, has
 * a network, runs without a sandbox, or a snapshot is under way.
 * kernel_restore_snapshot gives k the snapshot's state: its workspace
 * becomes a copy of the snapshot's and a new sandbox restores the image
 * (executions sent to the old one end as in a restart; RESTARTED, then
 * READY). */
typedef void(kernel_snapshot_fn)(kernel_t *k, uint64_t bytes, const sg_error_t *err, void *arg);
int kernel_snapshot(kernel_t *k, const char *sid, kernel_snapshot_fn *cb, void *arg,
                    sg_error_t **err);
int kernel_restore_snapshot(kernel_t *k, const char *sid, sg_error_t **err);
/* A fresh kernel on the same workspace; pending executions end with an
 * error; variables are lost. */
int kernel_restart(kernel_t *k, sg_error_t **err);
/* Ends the kernel: shutdown_request, then kill and remove the sandbox.
 * Nothing is left when wait is true.  Frees the handle. */
void kernel_shutdown(kernel_t **k_p, bool wait);
/* Frees the handle and leaves the sandbox running (daemon exit). */
void kernel_detach(kernel_t **k_p);

/* A command in k's sandbox beside the kernel (sandbox.h's sandbox_exec: as
 * the sandbox user, stdio the three fds, cb at its end).  Only while the
 * kernel runs (idle or busy): SG_E_CONFLICT when it is starting, paused
 * (resume it first) or dead.  A restart or shutdown ends its commands with
 * the old sandbox; a kernel with commands running does not pause. */
uint64_t kernel_exec(kernel_t *k, const sandbox_exec_t *x, const int fds[3],
                     sandbox_exec_done_fn *cb, void *arg, sg_error_t **err);
/* sandbox_exec_signal for a command kernel_exec started (nothing when it
 * has ended or its sandbox is gone). */
int kernel_exec_signal(kernel_t *k, uint64_t exec, int sig, sg_error_t **err);
/* sandbox_exec_pid for a command kernel_exec started (-1 when its sandbox
 * is gone). */
void kernel_exec_pid(kernel_t *k, uint64_t exec, sandbox_pid_fn *cb, void *arg);

/* sandbox_port_open in k's sandbox, while the kernel runs (idle or busy):
 * SG_E_CONFLICT when it is starting, paused (resume it first) or dead. */
int kernel_port_open(kernel_t *k, int port, bool *ack, sg_error_t **err);

const char *kernel_id(const kernel_t *k);
const char *kernel_sandbox_id(const kernel_t *k);
pid_t kernel_pid(const kernel_t *k);
const kspec_t *kernel_spec(const kernel_t *k);
const char *kernel_workspace(const kernel_t *k);
bool kernel_internet(const kernel_t *k); /* its sandbox has a network */
bool kernel_isolated(const kernel_t *k); /* its sandbox is gVisor's (not --sandbox none) */
/* What it was started with (the owner as kernel_owner). */
const kernel_opts_t *kernel_opts(const kernel_t *k);
/* The tenant the kernel belongs to ("admin" when none was named). */
const char *kernel_owner(const kernel_t *k);
/* A pool kernel claimed by a tenant becomes its. */
void kernel_set_owner(kernel_t *k, const char *owner);
/* Who the kernel's client says uses it (Jupyter's KERNEL_USERNAME), NULL
 * when it did not say: a label, not an identity (the owner is what a key
 * proves). */
const char *kernel_username(const kernel_t *k);
void kernel_set_username(kernel_t *k, const char *username);
/* Its sandbox's own egress rules from now on, its next sandboxes' too (a
 * restart): sandbox_set_egress's lists and contract.  A kernel inside
 * another's sandbox changes that sandbox's. */
void kernel_set_egress(kernel_t *k, const char *allow, const char *deny, const char *transforms,
                       sandbox_rules_fn *cb, void *arg);
kernel_state_t kernel_state(const kernel_t *k);
/* Whether k was shut down (deleted; not a kernel that died): its last
 * callbacks are under way. */
bool kernel_shut_down(const kernel_t *k);
int64_t kernel_last_activity(const kernel_t *k); /* zclock_mono() ms */
int kernel_execution_count(const kernel_t *k);
size_t kernel_pending(const kernel_t *k); /* queued + running executions */
void kernel_set_events(kernel_t *k, kernel_event_fn *ev, void *ev_arg);

/* --- raw channels: frontends that speak the Jupyter protocol themselves ---------- */

/* A tap sees what sandgate's own executions do not consume: every iopub
 * message once the kernel is ready (those of sandgate's executions too: iopub
 * is a broadcast), replies on shell and control to requests it did not send,
 * and input_requests on stdin whose parent it did not send.  (Lifecycle
 * events reach a tap's owner as an observer, kernel_observe.)  One tap per
 * kernel; NULL clears it. */
typedef struct {
    void (*on_message)(kernel_t *k, jchan_t chan, const jmsg_t *msg, void *arg);
    void *arg;
} kernel_tap_t;
void kernel_set_tap(kernel_t *k, const kernel_tap_t *tap);

/* Signs msg (its header kept as the frontend made it) and sends it on chan
 * (shell, control or stdin).  SG_E_CONFLICT while the kernel is not ready. */
int kernel_send(kernel_t *k, jchan_t chan, const jmsg_t *msg, sg_error_t **err);

/* What the kernel last published on iopub ("idle", "busy"), or "starting" /
 * "dead" when it is not running. */
const char *kernel_execution_state(const kernel_t *k);

/* Frontends connected to the kernel's channels; a connected kernel is not
 * culled. */
void kernel_add_connections(kernel_t *k, int delta);
int kernel_connections(const kernel_t *k);

#endif
