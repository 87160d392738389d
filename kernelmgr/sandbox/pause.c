/* pause: pausing and resuming runsc sandboxes (checkpoint and
 * restore), for runsc.c's table (internal.h). */
#include "kernelmgr/sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "kernelmgr/sandbox/cgroup.h"

/* How runsc checkpoint / restore are used:
 * runsc cannot save a sandbox that holds host sockets, and fails by killing
 * it.  The kernel's own sockets are inside (abstract); only sandgate-init's
 * relay holds host ones.  A pause therefore (1) tells init to let go of
 * them (SIGUSR1) and waits for its word (conn/kernel.detached; init
 * removes the socket files itself where runsc lets it, else this side
 * does), (2) checks that the disk can hold the image (the sandbox's memory,
 * an upper bound), (3) checkpoints into kernels/<id>/checkpoint/ and
 * records there the runsc version that made it (image_stamp), (4) deletes
 * the stopped container — or, for a snapshot of a running session
 * (sandbox_save_live), leaves it running (--leave-running) with its relay
 * detached until the snapshot has taken the image (runsc_reattach).  The
 * workspace stays mounted, so the
 * files API works on a paused session without waking it.  A resume
 * mounts the workspace if it is not (after a reboot), restores, tells init to listen again
 * (SIGUSR2), waits for the socket files and reads the new pid (runsc state). */

#define PAUSE_POLL_MS 2
#define DETACH_TIMEOUT_MS 3000
#define ATTACH_TIMEOUT_MS 10000
#define CHECKPOINT_MARGIN (32ull << 20)

typedef enum { P_DETACH, P_CHECKPOINT, P_DELETE, R_RESTORE, R_ATTACH } pause_step_t;

struct pausing {
    sandbox_t *sb;
    pause_step_t step;
    int timer;
    int waited_ms;
    long long cpu_quota, cpu_period; /* to put back after a restore; 0: none */
    pid_t child;                     /* the runsc command under way; 0: none */
    off_t log_from;                  /* kernel.log's size when runsc restore started */
    int64_t began;                   /* zclock_mono() of the step under way */
};

/* The step that just ended, for the debug log: how long it took. */
static void step_done(sandbox_t *sb, const char *what)
{
    int64_t now = zclock_mono();
    log_debug("sandbox %s: %s in %lld ms", sb->id, what, (long long)(now - sb->pausing->began));
    sb->pausing->began = now;
}

/* STATE/workspaces/<kernel uuid>: the sandbox id is the uuid and "-<generation>". */
static char *workspace_of(const sandbox_t *sb)
{
    return xasprintf("%s/workspaces/%.36s", sb->env->state_dir, sb->id);
}

static char *image_dir(const sandbox_t *sb)
{
    return xasprintf("%s/checkpoint", sb->dir);
}

static void relay_path(const sandbox_t *sb, int c, struct sockaddr_un *sa)
{
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    snprintf(sa->sun_path, sizeof sa->sun_path, "%s/conn/kernel-%d", sb->dir, sb->conn.ports[c]);
}

/* Whether every host socket of the relay exists: it listens again. */
static bool relay_attached(const sandbox_t *sb)
{
    for (int c = 0; c < JCHAN_COUNT; c++) {
        struct sockaddr_un sa;
        relay_path(sb, c, &sa);
        if (access(sa.sun_path, F_OK) < 0)
            return false;
    }
    return true;
}

/* Whether the relay has let go of every host socket: it says so with the
 * file conn/kernel.detached, made last.  (The host cannot tell by the
 * sockets: runsc's gofer keeps them listening.) */
static bool relay_detached(const sandbox_t *sb)
{
    cleanup_free char *marker = xasprintf("%s/conn/kernel.detached", sb->dir);
    return access(marker, F_OK) == 0;
}

/* The relay refused to detach: the number of TCP/UDP sockets open in the
 * sandbox (0: it did not refuse).  conn/ is the sandbox's to write: the
 * file is read without following links or blocking, as a number only.  (Code
 * in the sandbox can forge either file; it only harms its own session.) */
static int relay_refused(const sandbox_t *sb)
{
    cleanup_free char *path = xasprintf("%s/conn/kernel.refused", sb->dir);
    cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[16] = "";
    struct stat st;
    ssize_t got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    unlink(path);
    int n = got > 0 ? atoi(buf) : 0;
    return n > 0 ? n : 1;
}

/* The sandbox cannot remove host socket files (the gofer does not let it
 * touch them): this side does, so the relay's bind finds the paths free
 * after a restore. */
static void relay_unlink(const sandbox_t *sb)
{
    for (int c = 0; c < JCHAN_COUNT; c++) {
        struct sockaddr_un sa;
        relay_path(sb, c, &sa);
        unlink(sa.sun_path);
    }
    relay_refused(sb);
}

/* Lets a detached relay listen again: it watches for its marker to go
 * (guest/init.c) — no runsc command on a resume's path. */
static void relay_release(const sandbox_t *sb)
{
    cleanup_free char *marker = xasprintf("%s/conn/kernel.detached", sb->dir);
    unlink(marker);
}

void runsc_pausing_end(sandbox_t *sb)
{
    struct pausing *p = sb->pausing;
    if (p == NULL)
        return;
    if (p->timer >= 0)
        loop_timer_end(proc_loop(), p->timer);
    if (p->child > 0)
        proc_unwatch(p->child);
    free(p);
    sb->pausing = NULL;
}

static void runsc_signal(sandbox_t *sb, int sig)
{
    char signame[16];
    snprintf(signame, sizeof signame, "%d", sig);
    const char *cmd[] = {"kill", sb->id, signame, NULL};
    cleanup_error sg_error_t *err = NULL;
    if (proc_exec_async(runsc_argv(sb->env, cmd), runsc_ignore_done, (void *)"runsc kill", &err) <
        0) {
        log_warn("sandbox %s: %s", sb->id, err->msg);
    }
}

static void pause_failed(sandbox_t *sb, sg_error_t *err)
{
    runsc_pausing_end(sb);
    cleanup_free char *img = image_dir(sb);
    host_remove_tree(img);
    bool alive = sb->pid > 0 && (kill(sb->pid, 0) == 0 || errno == EPERM);
    if (alive) { /* listen again: a detached init sees its marker go; a late one gets USR2 */
        relay_release(sb);
        runsc_signal(sb, SIGUSR2);
    }
    sg_error_prefix(&err, "pausing sandbox %s", sb->id);
    sb->paused_cb(sb, 0, err, alive, sb->paused_arg);
}

static int run_step(sandbox_t *sb, const char *const *cmd, proc_done_fn *done, sg_error_t **err)
{
    pid_t child = proc_exec_async(runsc_net_argv(sb->env, false, cmd), done, sb, err);
    if (child < 0)
        return -1;
    sb->pausing->child = child;
    return 0;
}

static void delete_after_checkpoint(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pausing->child = 0;
    step_done(sb, "runsc delete");
    if (status != 0)
        log_warn("sandbox %s: runsc delete after checkpoint: %s", sb->id, output);
    cgroup_remove(sandbox_cgroup(sb));
    runsc_pausing_end(sb);
    cleanup_free char *img = image_dir(sb);
    uint64_t bytes = host_disk_bytes(img);
    sb->pid = 0;
    sb->paused_cb(sb, bytes, NULL, false, sb->paused_arg);
}

static void checkpoint_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    sb->pausing->child = 0;
    step_done(sb, "runsc checkpoint");
    sg_error_t *err = NULL;
    if (status != 0) {
        /* runsc's message ends with a Go stack: its first line says it. */
        const char *nl = strchr(output, '\n');
        sg_error_set(&err, strstr(output, "no space left") ? SG_E_NOSPACE : SG_E_UNAVAILABLE,
                     "runsc checkpoint: %.*s", (int)(nl ? nl - output : (int)strlen(output)),
                     output);
        pause_failed(sb, err);
        return;
    }
    cleanup_free char *img = image_dir(sb);
    if (image_stamp(sb->env, img, &err) < 0) {
        pause_failed(sb, err);
        return;
    }
    if (sb->leave_running) { /* it runs on, its relay detached until runsc_reattach */
        runsc_pausing_end(sb);
        sb->live_saved = true;
        sb->paused_cb(sb, host_disk_bytes(img), NULL, true, sb->paused_arg);
        return;
    }
    const char *cmd[] = {"delete", "-force", sb->id, NULL};
    if (run_step(sb, cmd, delete_after_checkpoint, &err) < 0)
        pause_failed(sb, err);
}

/* The sandbox's memory as its cgroup counts it; 0 when unknown. */
static uint64_t memory_usage(sandbox_t *sb)
{
    cleanup_free char *path =
        xasprintf("/sys/fs/cgroup/memory%s/memory.usage_in_bytes", sandbox_cgroup(sb));
    FILE *f = fopen(path, "re");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void checkpoint(sandbox_t *sb)
{
    sg_error_t *err = NULL;
    struct statvfs vfs;
    uint64_t need = memory_usage(sb) + CHECKPOINT_MARGIN;
    if (statvfs(sb->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        sg_error_set(&err, SG_E_NOSPACE,
                     "the state directory's disk has %llu MiB free; the checkpoint may need "
                     "%llu MiB (the sandbox's memory); the session keeps running",
                     (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20),
                     (unsigned long long)(need >> 20));
        pause_failed(sb, err);
        return;
    }
    cleanup_free char *img = image_dir(sb);
    host_remove_tree(img);
    if (host_make_dir(img, 0700, &err) < 0) {
        pause_failed(sb, err);
        return;
    }
    sb->pausing->step = P_CHECKPOINT;
    /* Pages that are committed but zero are not written (modern runsc). */
    const char *cmd[8];
    size_t n = 0;
    cmd[n++] = "checkpoint";
    cmd[n++] = "--image-path";
    cmd[n++] = img;
    if (sandbox_env_can_save_live(sb->env))
        cmd[n++] = "--exclude-committed-zero-pages";
    if (sb->leave_running)
        cmd[n++] = "--leave-running";
    cmd[n++] = sb->id;
    cmd[n] = NULL;
    if (run_step(sb, cmd, checkpoint_done, &err) < 0)
        pause_failed(sb, err);
}

static void on_detach_poll(loop_t *loop, int timer_id, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    if (relay_detached(sb)) {
        loop_timer_end(loop, p->timer);
        p->timer = -1;
        step_done(sb, "the relay's detach");
        relay_unlink(sb);
        checkpoint(sb);
        return;
    }
    sg_error_t *err = NULL;
    int sockets = relay_refused(sb);
    if (sockets > 0) {
        sg_error_set(&err, SG_E_CONFLICT,
                     "the session has %d TCP/UDP socket%s open (a server started in it?), which "
                     "a checkpoint cannot keep; close %s to pause it",
                     sockets, sockets == 1 ? "" : "s", sockets == 1 ? "it" : "them");
        pause_failed(sb, err);
        return;
    }
    if ((p->waited_ms += PAUSE_POLL_MS) < DETACH_TIMEOUT_MS)
        return;
    sg_error_set(&err, SG_E_UNAVAILABLE,
                 "sandgate-init did not release the kernel's sockets within %d ms",
                 DETACH_TIMEOUT_MS);
    pause_failed(sb, err);
}

int runsc_pause(sandbox_t *sb, sg_error_t **err)
{
    if (sb->pausing || sb->pid <= 0)
        return sg_error_set(err, SG_E_CONFLICT, "sandbox %s is not running", sb->id);
    cleanup_free char *stale = xasprintf("%s/conn/kernel.detached", sb->dir);
    unlink(stale);
    relay_refused(sb);
    sb->pausing = xzalloc(sizeof *sb->pausing);
    *sb->pausing =
        (struct pausing){.sb = sb, .step = P_DETACH, .timer = -1, .began = zclock_mono()};
    runsc_signal(sb, SIGUSR1);
    sb->pausing->timer = loop_timer(proc_loop(), PAUSE_POLL_MS, 0, on_detach_poll, sb);
    return 0;
}

void runsc_reattach(sandbox_t *sb)
{
    if (sb->pausing)
        return; /* a pause under way ends with its own callback */
    if (sb->live_saved) {
        cleanup_free char *img = image_dir(sb);
        host_remove_tree(img); /* the snapshot has its own links to it */
        sb->live_saved = false;
    }
    relay_release(sb);
}

static void resume_failed(sandbox_t *sb, sg_error_t *err)
{
    runsc_pausing_end(sb);
    sg_error_prefix(&err, "resuming sandbox %s", sb->id);
    sb->started_cb(sb, -1, err, sb->started_arg);
}

static void on_attach_poll(loop_t *loop, int timer_id, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    sg_error_t *err = NULL;
    if (relay_attached(sb)) {
        step_done(sb, "the relay's attach");
        /* runsc restore wrote the sandbox's pid (--pid-file). */
        cleanup_free char *pidfile = xasprintf("%s/restore.pid", sb->dir);
        FILE *f = fopen(pidfile, "re");
        int pid = 0;
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        unlink(pidfile);
        runsc_pausing_end(sb);
        cleanup_free char *img = image_dir(sb);
        host_remove_tree(img); /* restored: the image is spent */
        if (pid <= 0) {
            sg_error_set(&err, SG_E_UNAVAILABLE, "runsc restore left no pid in %s", pidfile);
            sb->started_cb(sb, -1, err, sb->started_arg);
            return;
        }
        sb->pid = (pid_t)pid;
        sb->started_cb(sb, sb->pid, NULL, sb->started_arg);
        return;
    }
    if ((p->waited_ms += PAUSE_POLL_MS) < ATTACH_TIMEOUT_MS)
        return;
    sg_error_set(&err, SG_E_UNAVAILABLE,
                 "the restored sandbox did not listen on its sockets within %d ms",
                 ATTACH_TIMEOUT_MS);
    resume_failed(sb, err);
}

static void restore_done(int status, const char *output, void *arg)
{
    sandbox_t *sb = arg;
    struct pausing *p = sb->pausing;
    p->child = 0;
    step_done(sb, "runsc restore");
    if (status != 0) {
        const char *nl = strchr(output, '\n');
        sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_UNAVAILABLE, "runsc restore: %.*s",
                     (int)(nl ? nl - output : (int)strlen(output)), output);
        resume_failed(sb, err);
        return;
    }
    sg_error_t *err = NULL;
    if (p->cpu_quota > 0 &&
        cgroup_set_cpu(sandbox_cgroup(sb), p->cpu_quota, p->cpu_period, &err) < 0) {
        resume_failed(sb, err); /* the kernel is stopped with the error */
        return;
    }
    p->step = R_ATTACH;
    relay_release(sb);
    p->waited_ms = 0;
    p->timer = loop_timer(proc_loop(), PAUSE_POLL_MS, 0, on_attach_poll, sb);
}

/* What runsc restore wrote to kernel.log (at most 64 KiB; a new string). */
static char *restore_output(const sandbox_t *sb)
{
    cleanup_free char *path = xasprintf("%s/kernel.log", sb->dir);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = xmalloc(65537);
    ssize_t n = fd >= 0 ? pread(fd, buf, 65536, sb->pausing->log_from) : -1;
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static void restore_exited(pid_t pid, int status, void *arg)
{
    sandbox_t *sb = arg;
    cleanup_free char *output = status == 0 ? xstrdup("") : restore_output(sb);
    restore_done(status, output, sb);
}

/* runsc restore, its stdout and stderr appended to kernel.log as runsc
 * run's are: they become the restored sandbox's, whose kernel (and
 * sandgate-init) write there again. */
static int restore_spawn(sandbox_t *sb, const char *const *cmd, sg_error_t **err)
{
    cleanup_free char *log = xasprintf("%s/kernel.log", sb->dir);
    struct stat st;
    sb->pausing->log_from = stat(log, &st) == 0 ? st.st_size : 0;
    proc_spec_t spec = {
        .argv = runsc_net_argv(sb->env, sb->internet, cmd), .output = log, .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0)
        return -1;
    if (proc_watch(pid, restore_exited, sb, err) < 0)
        return -1;
    sb->pausing->child = pid;
    return 0;
}

/* The bundle runsc restore reads: the sandbox's own, but without its CPU
 * quota (restore-bundle/config.json), which *quota and *period get.
 * Restoring loads the memory image (Debian's runsc of 2022 decompresses
 * all of it: at one CPU half of a resume); the quota goes back on (cgroup_set_cpu) before the
 * kernel is reached again. */
static char *restore_bundle(const sandbox_t *sb, long long *quota, long long *period,
                            sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/bundle/config.json", sb->dir);
    json_error_t jerr;
    json_t *config = json_load_file(path, 0, &jerr);
    if (config == NULL) {
        sg_error_set(err, SG_E_IO, "cannot read %s: %s", path, jerr.text);
        return NULL;
    }
    json_t *cpu =
        json_object_get(json_object_get(json_object_get(config, "linux"), "resources"), "cpu");
    *quota = json_integer_value(json_object_get(cpu, "quota"));
    *period = json_integer_value(json_object_get(cpu, "period"));
    if (*quota <= 0 || *period <= 0) {
        json_decref(config);
        *quota = *period = 0;
        return xasprintf("%s/bundle", sb->dir);
    }
    json_object_del(cpu, "quota");
    cleanup_free char *bundle = xasprintf("%s/restore-bundle", sb->dir);
    cleanup_free char *out = xasprintf("%s/config.json", bundle);
    int r = host_make_dir(bundle, 0700, err) < 0 ? -1 : json_dump_file(config, out, JSON_INDENT(2));
    json_decref(config);
    if (r < 0) {
        if (err && *err == NULL)
            sg_error_set(err, SG_E_IO, "cannot write %s", out);
        return NULL;
    }
    char *made = bundle;
    bundle = NULL; /* the caller's */
    return made;
}

int runsc_resume(sandbox_t *sb, sg_error_t **err)
{
    cleanup_free char *img = xasprintf("%s/checkpoint/checkpoint.img", sb->dir);
    if (sb->pausing || sb->pid > 0)
        return sg_error_set(err, SG_E_CONFLICT, "sandbox %s is not paused", sb->id);
    if (access(img, R_OK) < 0)
        return sg_error_errno(err, errno, "sandbox %s has no checkpoint (%s)", sb->id, img);
    cleanup_free char *dir = image_dir(sb);
    if (image_check(sb->env, dir, err) < 0)
        return -1;
    if (sb->workspace == NULL)
        sb->workspace = workspace_of(sb);
    if (host_workspace_open(sb->env, sb->workspace, 0, err) < 0)
        return -1;
    relay_unlink(sb); /* left by a machine that went down (or a failed attach) */
    long long quota = 0, period = 0;
    cleanup_free char *bundle = restore_bundle(sb, &quota, &period, err);
    if (bundle == NULL)
        return -1;
    cleanup_free char *pidfile = xasprintf("%s/restore.pid", sb->dir);
    unlink(pidfile);
    cgroup_prepare(sandbox_cgroup(sb)); /* its tenant's, swept since a restart */
    /* The same global flags as run: restore needs the sandbox it saved. */
    if (sb->internet) { /* its namespace, again after a reboot */
        cleanup_free char *ns = egress_sandbox_up(sb->env->egress, sb->id, sb->dir, true, err);
        if (ns == NULL)
            return -1;
    }
    const char *cmd[] = {"--platform",
                         sb->env->cfg.platform,
                         sb->internet ? "--network=sandbox" : "--network=none",
                         "--host-uds=create",
                         "restore",
                         "-detach",
                         "-pid-file",
                         pidfile,
                         "-bundle",
                         bundle,
                         "--image-path",
                         dir,
                         sb->id,
                         NULL,
                         NULL};
    /* A modern runsc lets the sandbox run once the kernel's state is loaded
     * and reads its memory in as it is needed (the image is uncompressed);
     * it holds the image's files open, so removing them after is safe. */
    if (sandbox_env_can_save_live(sb->env)) {
        cmd[12] = "--background";
        cmd[13] = sb->id;
    }
    sb->pausing = xzalloc(sizeof *sb->pausing);
    *sb->pausing = (struct pausing){.sb = sb,
                                    .step = R_RESTORE,
                                    .timer = -1,
                                    .cpu_quota = quota,
                                    .cpu_period = period,
                                    .began = zclock_mono()};
    if (restore_spawn(sb, cmd, err) < 0) {
        runsc_pausing_end(sb);
        return -1;
    }
    return 0;
}
