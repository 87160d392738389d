/* internal: what the kernel room's files share — kernel.c (lifecycle:
 * start, death, restart), messages.c (the connection and what comes on it),
 * slots.c (start slots), exec.c (the execution queue and its timeouts),
 * pause.c (pause and resume) and snapshot.c.  Not for use outside
 * kernelmgr/kernel/.
 */
#ifndef SG_KERNEL_INTERNAL_H
#define SG_KERNEL_INTERNAL_H

#include "kernelmgr/kernel/kernel.h"
#include "proto/proto.h"

#define PROBE_INTERVAL_MS 250
/* A resumed kernel answers at once; what it waits for is the iopub
 * subscription to reach it again, so probe often — but one kernel_info
 * request at a time: each answered one sends the next at once, and one not
 * answered within PROBE_RESEND_MS is sent again.  (Every 5 ms regardless,
 * a restored kernel, slow at first, had ~20 of them queued, and its first
 * execution waited behind those it had not answered yet.) */
#define RESUME_PROBE_INTERVAL_MS 5
/* An unanswered kernel_info request this old is sent again (at every tick
 * of a fresh start's probe timer, as before there was one at a time). */
#define PROBE_RESEND_MS (PROBE_INTERVAL_MS - 10)
/* One ping at a time, every 10 s: against a 60 s timeout that is plenty, and
 * each ping wakes the sandbox (and sandgate) — an idle kernel should cost
 * next to nothing. */
#define HB_INTERVAL_MS 10000
/* Generous: death is noticed through the sandbox's pidfd at once; the
 * heartbeat only catches a kernel that hangs with its process alive, and a
 * short timeout would kill healthy kernels on a loaded machine. */
#define HB_TIMEOUT_MS 60000

typedef struct exec {
    uint64_t id;
    char *code;
    kernel_exec_opts_t opts;
    kernel_exec_cb_t cb;
    char msg_id[64]; /* empty until sent */
    json_t *reply;
    bool got_reply, got_idle, timed_out;
    bool lingering;    /* answered; its timer waits for late output (kspec's iopub_linger_ms) */
    int lingered_more; /* times late output came while lingering (linger_more) */
    int64_t idle_at;   /* zclock_mono() when it began to linger */
    bool is_preload;   /* the kernel's preload snippet: READY follows it */
    bool tracked;      /* sent by a frontend (kernel_track): on k->tracked, not queued */
    int timer;
    int64_t sent_at; /* zclock_mono() of its execute_request */
    struct kernel *k;
    struct exec *next;
} exec_t;

struct kernel {
    loop_t *loop;
    sandbox_env_t *env;
    const kspec_t *spec;
    char *id, *workspace;
    kernel_opts_t opts;
    kernel_event_fn *ev;
    void *ev_arg;
    kernel_tap_t tap;
    int connections;
    char published[16]; /* the last iopub execution_state */

    kernel_state_t state;
    char *death; /* why it is DEAD, for the executions that come after */
    bool held;   /* waiting for kernel_release (its workspace is being prepared) */
    bool freed;  /* handle released; waiting for the deferred free */
    struct observer {
        kernel_event_fn *fn;
        void *arg;
    } * observers;
    size_t nobservers;
    int generation;
    sandbox_t *sb; /* NULL for a guest: its host's holds it */
    /* A kernel in another's sandbox (kernel_start_guest): that kernel, its
     * number there, and its process there while it runs. */
    struct kernel *host;
    int guest_no;
    sandbox_guest_t *guest;
    bool guest_waiting;                 /* its start waits for its host to run (guest.c) */
    json_t *guest_env;                  /* added to its environment (kernel_start_guest) */
    int guest_retries;                  /* starts refused for a number still taken */
    int guest_rewatches;                /* its end asked for again after a report that stopped */
    struct kernel *guests, *guest_next; /* a host's guests (handles not freed), a list */
    int next_guest;                     /* a host: the number its next guest start tries first */
    jclient_t *client;
    loop_io_t *io[JCHAN_COUNT];
    loop_io_t *io_monitor; /* until stdin connects (jclient_monitor) */
    pid_t watched;

    /* start-up */
    bool holds_slot, waiting_slot;
    struct kernel *next_waiting;
    int start_timer, probe_timer;
    bool info_replied, iopub_seen;
    int probes;           /* kernel_info requests sent by this start */
    int64_t probe_sent;   /* zclock_mono() of the one unanswered; 0: none */
    int64_t connected_at; /* zclock_mono() of connect_kernel */
    /* A start that failed waits for the kernel's log before it dies with it
     * (die_with_tail): the launcher's answer, or its timeout. */
    uint64_t tail_req;
    sg_errkind_t dying_kind;
    char *dying_msg;

    /* executions: queue head is the running one when state is BUSY */
    exec_t *queue;
    exec_t *tracked; /* frontends' own executions, followed by msg_id */
    exec_t *overdue; /* the timed-out execution grace_timer is for */
    uint64_t next_exec;
    int grace_timer;
    int execution_count;
    int64_t last_activity;

    /* heartbeat */
    int hb_timer;
    int64_t hb_sent; /* 0: no ping outstanding */

    /* pause and resume */
    bool resuming;         /* STARTING from a checkpoint */
    bool reattaching;      /* ... or reconnecting after a pause that failed */
    bool resume_wanted;    /* asked for while PAUSING */
    bool pause_when_ready; /* kernel_pause_cold: a fresh kernel, paused once it answers */
    const char *closed;    /* sandgate is stopping: why no new work is taken (a literal) */
    int64_t pause_began;   /* zclock_mono() of the pause or resume under way */
    int64_t last_pause_ms, last_resume_ms;
    uint64_t resumes;
    uint64_t checkpoint_bytes;

    /* snapshots (snapshot.c) */
    struct snap *snap;   /* a snapshot under way; NULL: none */
    char *from_snapshot; /* the next launch restores this snapshot (then NULL) */
    uint64_t ws_restore; /* its workspace is being restored (sandbox_cancel) */
};

/* kernel.c */
void end_timer(kernel_t *k, int *timer);
void emit(kernel_t *k, kernel_event_t ev, const sg_error_t *err);
/* The iopub probe's timer: kernel_info again until iopub answers. */
void on_probe(loop_t *loop, int timer_id, void *arg);

/* messages.c: the connection and what comes on it */
int send_msg(kernel_t *k, jchan_t chan, const jmsg_t *msg, sg_error_t **err);
void disconnect(kernel_t *k);
/* Ready once kernel_info is answered, iopub heard and stdin connected. */
void maybe_ready(kernel_t *k);
/* The loop's handler of the client's sockets (arg: the kernel). */
bool on_socket(loop_t *loop, zsock_t *sock, void *arg);
void die(kernel_t *k, sg_error_t *err);
void die_msg(kernel_t *k, sg_errkind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int launch(kernel_t *k, sg_error_t **err);
int connect_kernel(kernel_t *k, pid_t pid, sg_error_t **err);
void on_exit_(pid_t pid, int status, void *arg);
void on_start_timeout(loop_t *loop, int timer_id, void *arg);
void on_heartbeat(loop_t *loop, int timer_id, void *arg);

/* kernel.c: the sandbox starts (launch_now: k holds a start slot) */
int launch_now(kernel_t *k, sg_error_t **err);
/* kernel.c: a guest's process in its host's sandbox is killed (nothing
 * when it has none). */
void end_guest(kernel_t *k);
/* guest.c: kernel_start_guest's way of starting (launch's for a guest),
 * and the guest's handle let go of its host's list. */
int launch_guest(kernel_t *k, sg_error_t **err);
void guest_unlink(kernel_t *k);
void end_guests(kernel_t *host);
/* Whether k may not be paused or snapshotted (what: "paused",
 * "snapshotted") for its place in a shared sandbox; then *err says why. */
bool guests_refuse(kernel_t *k, const char *what, sg_error_t **err);
/* A pause (or a snapshot's checkpoint) of host begins: 0 once every guest
 * let go and is PAUSING, or -1 with *err (SG_E_CONFLICT) when one is not
 * idle.  guests_resume: the pause did not happen after all (they
 * reconnect).  guest_resume: a guest's resume is its host's. */
int guests_suspend(kernel_t *host, sg_error_t **err);
void guests_resume(kernel_t *host);
int guest_resume(kernel_t *k, sg_error_t **err);
/* host's sandbox was restored from an image: the kernels it holds beside
 * the first that are no guest's now are ended. */
void guests_restored(kernel_t *host);
/* kernel.c: a new handle (kernel_start's first step). */
kernel_t *kernel_alloc(loop_t *loop, sandbox_env_t *env, const kspec_t *spec, const char *id,
                       const char *workspace, const kernel_opts_t *opts, kernel_event_fn *ev,
                       void *ev_arg);

/* slots.c: start slots.  take_slot: whether k has one now, else it
 * waits in line and launch_now is called once one is free (or it dies).
 * release_slot: the one held (or the place in line) is given up. */
bool take_slot(kernel_t *k);
void release_slot(kernel_t *k);

/* kernel.c: what a restart and a roll-back share — the kernel reconnects
 * to nothing, its sandbox is removed, executions already sent end with
 * why, those not sent yet wait for the new kernel. */
void restart_reset(kernel_t *k, const char *why);
/* kernel_resume and kernel_restart without the wake gate: for a kernel
 * that resumes or restarts on its own (after a snapshot, a failed pause, a
 * timeout), having been let run before. */
int resume_now(kernel_t *k, sg_error_t **err);
/* kernel_pause with live: the checkpoint leaves the sandbox running
 * (sandbox_save_live), for a snapshot. */
int pause_kernel(kernel_t *k, bool live, sg_error_t **err);
/* After each event: a kernel_pause_cold's fresh kernel pauses once READY. */
void pause_if_wanted(kernel_t *k, kernel_event_t ev);
/* The sandbox runs but the relay dropped every connection: fresh sockets,
 * ready again once the kernel answers; paused_err (a failed pause's) is
 * reported as KERNEL_EV_PAUSED first. */
void reattach(kernel_t *k, const sg_error_t *paused_err);
int restart_now(kernel_t *k, sg_error_t **err);
/* Whether k is paused or dead and opts.wake_gate refuses to let it run
 * again (then *err says why). */
bool kernel_wake_refused(kernel_t *k, sg_error_t **err);

/* snapshot.c, for pause.c and kernel.c */
/* The pause a snapshot asked for ended: saved and resumed, or err (the
 * snapshot fails with it; the pause's own handling goes on). */
void snapshot_paused(kernel_t *k);
/* Whether the snapshot under way checkpoints the kernel and lets it run on. */
bool snapshot_is_live(const kernel_t *k);
void snapshot_failed(kernel_t *k, const sg_error_t *err);
/* A snapshot asked for while the kernel resumed waits for it to answer:
 * why NULL, the kernel answers (it starts now); else it fails with why.
 * Nothing when none waits. */
void snapshot_ready(kernel_t *k, const sg_error_t *why);
/* The kernel goes away: a snapshot under way fails, a workspace being
 * restored calls back no more. */
void snapshot_abort(kernel_t *k);

/* exec.c */
void exec_free(exec_t *e);
exec_t *exec_new(kernel_t *k, const char *code, const kernel_exec_opts_t *opts,
                 const kernel_exec_cb_t *cb);
void fail_all(kernel_t *k, const sg_error_t *err);
void pump(kernel_t *k);
void maybe_finish(kernel_t *k);
/* Output of e came while it lingers: it waits that long again. */
void linger_more(kernel_t *k, exec_t *e);
/* A frontend's own execution (kernel_track) hears of a message: exec.c. */
void on_tracked(kernel_t *k, jchan_t chan, const jmsg_t *m);

#endif
