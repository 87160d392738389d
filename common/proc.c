#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/xalloc.h"

typedef struct watch {
    pid_t pid;
    int pidfd;
    proc_exit_fn *cb;
    void *arg;
    void (*arg_free)(void *); /* for arg when unwatched before the exit */
    loop_io_t *io;
    bool dead;   /* unwatched; freed after the loop's pass (loop_defer) */
    bool reaped; /* reaped by proc_run_sync; status holds its wait status */
    int status;
    int timer; /* reaped before the watch: its callback's turn; else -1 */
    struct watch *next;
} watch_t;

static loop_t *loop;
static watch_t *watches;
static int sweep_timer = -1;

/* Children reaped before anyone watched them (one that exits at once can be
 * reaped by a sweep or proc_run_sync before its proc_watch): their status,
 * for a proc_watch that comes later.  The last UNCLAIMED_MAX; pids grow
 * until they wrap past pid_max, so a stale one is not mistaken. */
#define UNCLAIMED_MAX 64
static struct {
    pid_t pid;
    int status;
} unclaimed[UNCLAIMED_MAX];
static unsigned unclaimed_next;

static void keep_unclaimed(pid_t pid, int status)
{
    unclaimed[unclaimed_next % UNCLAIMED_MAX].pid = pid;
    unclaimed[unclaimed_next % UNCLAIMED_MAX].status = status;
    unclaimed_next++;
}

/* pid's status if it was reaped unwatched (then forgotten), else false. */
static bool take_unclaimed(pid_t pid, int *status)
{
    for (size_t i = 0; i < UNCLAIMED_MAX; i++)
        if (unclaimed[i].pid == pid && pid > 0) {
            unclaimed[i].pid = 0;
            *status = unclaimed[i].status;
            return true;
        }
    return false;
}

static watch_t *find(pid_t pid)
{
    for (watch_t *w = watches; w; w = w->next)
        if (w->pid == pid)
            return w;
    return NULL;
}

static void free_watch(void *arg)
{
    watch_t *w = arg;
    if (w->arg_free)
        w->arg_free(w->arg);
    if (w->pidfd >= 0)
        close(w->pidfd);
    free(w);
}

static void unlink_watch(watch_t *w)
{
    for (watch_t **p = &watches; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->dead = true;
    if (loop)
        loop_io_remove(loop, &w->io);
    if (loop && w->timer >= 0)
        loop_timer_end(loop, w->timer);
    w->timer = -1;
    loop_defer(loop, free_watch, w);
}

static void fire(watch_t *w, int status)
{
    w->arg_free = NULL; /* the callback owns arg now */
    proc_exit_fn *cb = w->cb;
    void *arg = w->arg;
    pid_t pid = w->pid;
    unlink_watch(w);
    cb(pid, status, arg);
}

static void on_pidfd(loop_t *l, int fd, unsigned events, void *arg)
{
    watch_t *w = arg;
    if (w->dead)
        return;
    int status;
    if (w->reaped) {
        fire(w, w->status);
        return;
    }
    pid_t r = waitpid(w->pid, &status, WNOHANG | __WALL);
    if (r == w->pid)
        fire(w, status);
    else if (r < 0 && errno == ECHILD)
        fire(w, -1); /* not ours (adopted after a restart), or already reaped */
}

/* Reaps exited children, watched or not: runsc leaves its sandbox, gofer
 * and ptrace stub processes to us (the stubs are clone children, hence
 * __WALL).  Runs on SIGCHLD, and now and then in case a signal was taken
 * by a thread that does not block it. */
static void sweep(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
        watch_t *w = find(pid);
        if (w)
            fire(w, status);
        else
            keep_unclaimed(pid, status);
    }
}

static void on_sigchld(loop_t *l, int signo, void *arg)
{
    sweep();
}

static void on_sweep_timer(loop_t *l, int timer_id, void *arg)
{
    sweep();
}

#define SWEEP_BACKSTOP_MS 30000

loop_t *proc_loop(void)
{
    return loop;
}

int proc_init(loop_t *l, sg_error_t **err)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        return sg_error_errno(err, errno, "cannot become a child subreaper");
    loop = l;
    if (loop) {
        if (loop_signal(loop, SIGCHLD, on_sigchld, NULL, err) < 0)
            return -1;
        sweep_timer = loop_timer(loop, SWEEP_BACKSTOP_MS, 0, on_sweep_timer, NULL);
    }
    return 0;
}

static void async_free(void *arg);

/* Commands from proc_exec_async are short (runsc delete) and their callbacks
 * clean up after them: let them finish before sandgate exits, 10 s at most. */
static void finish_async(void)
{
    int64_t deadline = zclock_mono() + 10000;
    for (watch_t *w = watches, *next; w; w = next) {
        next = w->next;
        if (w->dead || w->arg_free != async_free)
            continue;
        int status = w->status;
        pid_t r = w->reaped ? w->pid : 0;
        while (r == 0 && (r = waitpid(w->pid, &status, WNOHANG | __WALL)) == 0 &&
               zclock_mono() < deadline)
            zclock_sleep(20);
        if (r == w->pid)
            fire(w, status);
        else if (r < 0)
            fire(w, -1);
    }
}

void proc_fini(void)
{
    finish_async();
    while (watches) {
        watch_t *w = watches;
        watches = w->next;
        if (loop)
            loop_io_remove(loop, &w->io);
        free_watch(w);
    }
    if (loop && sweep_timer >= 0)
        loop_timer_end(loop, sweep_timer);
    sweep_timer = -1;
    loop = NULL;
}

pid_t proc_spawn(const proc_spec_t *spec, sg_error_t **err)
{
    int out = -1;
    if (spec->output_fd > 0) {
        out = fcntl(spec->output_fd, F_DUPFD_CLOEXEC, 3);
        if (out < 0)
            return sg_error_errno(err, errno, "dup");
    } else if (spec->output) {
        out = open(spec->output, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (out < 0)
            return sg_error_errno(err, errno, "cannot open %s", spec->output);
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        if (out >= 0)
            close(out);
        return sg_error_errno(err, e, "fork");
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls from here on. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (spec->new_session)
            setsid();
        if (spec->stdio) {
            /* Above 2 first, so that one of them being 0, 1 or 2 is no problem. */
            int high[3];
            for (int i = 0; i < 3; i++)
                high[i] = fcntl(spec->stdio[i], F_DUPFD_CLOEXEC, 3);
            for (int i = 0; i < 3; i++)
                if (high[i] < 0 || dup2(high[i], i) < 0)
                    _exit(126);
        } else {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 0);
            dup2(out >= 0 ? out : null, 1);
            dup2(out >= 0 ? out : null, 2);
        }
        if (spec->cwd && chdir(spec->cwd) < 0)
            _exit(126);
        /* By PATH when the program has no '/': a kernelspec may name its
         * program so ("R"), as sandgate-init finds it in a sandbox. */
        if (spec->env)
            execvpe(spec->argv[0], (char *const *)spec->argv, (char *const *)spec->env);
        else
            execvp(spec->argv[0], (char *const *)spec->argv);
        static const char msg[] = "sandgate: exec failed\n";
        if (write(2, msg, sizeof msg - 1) < 0)
            _exit(127);
        _exit(127);
    }
    if (out >= 0)
        close(out);
    return pid;
}

static void fire_reaped(loop_t *l, int timer_id, void *arg)
{
    watch_t *w = arg;
    w->timer = -1;
    if (!w->dead)
        fire(w, w->status);
}

int proc_watch(pid_t pid, proc_exit_fn *cb, void *arg, sg_error_t **err)
{
    if (find(pid))
        return sg_error_set(err, SG_E_CONFLICT, "process %d is already watched", (int)pid);
    int status = -1;
    bool gone = take_unclaimed(pid, &status);
    int fd = gone ? -1 : pidfd_open(pid, 0);
    if (fd < 0 && !gone && errno != ESRCH)
        return sg_error_errno(err, errno, "pidfd_open(%d)", (int)pid);
    watch_t *w = xzalloc(sizeof *w);
    w->pid = pid;
    w->pidfd = fd;
    w->cb = cb;
    w->arg = arg;
    w->timer = -1;
    if (fd < 0) { /* reaped already (its status kept, or -1: unknown): told on the next pass */
        w->reaped = true;
        w->status = status;
        w->next = watches;
        watches = w;
        if (loop)
            w->timer = loop_timer(loop, 0, 1, fire_reaped, w);
        return 0;
    }
    if (loop && !(w->io = loop_fd_add(loop, fd, LOOP_READ, on_pidfd, w, err))) {
        close(fd);
        free(w);
        return -1;
    }
    w->next = watches;
    watches = w;
    return 0;
}

void proc_unwatch(pid_t pid)
{
    watch_t *w = find(pid);
    if (w)
        unlink_watch(w);
}

typedef struct {
    proc_done_fn *cb;
    void *arg;
    int memfd;
} async_t;

static void async_free(void *arg)
{
    async_t *a = arg;
    close(a->memfd);
    free(a);
}

static void async_exited(pid_t pid, int status, void *arg)
{
    async_t *a = arg;
    char *buf = xmalloc(65537);
    ssize_t n = pread(a->memfd, buf, 65536, 0);
    buf[n > 0 ? n : 0] = 0;
    close(a->memfd);
    a->cb(status, buf, a->arg);
    free(buf);
    free(a);
}

pid_t proc_exec_async(const char *const *argv, proc_done_fn *cb, void *arg, sg_error_t **err)
{
    int memfd = memfd_create("sandgate-cmd", MFD_CLOEXEC);
    if (memfd < 0)
        return sg_error_errno(err, errno, "memfd_create");
    proc_spec_t spec = {.argv = argv, .output_fd = memfd, .new_session = true};
    pid_t pid = proc_spawn(&spec, err);
    if (pid < 0) {
        close(memfd);
        return -1;
    }
    async_t *a = xzalloc(sizeof *a);
    *a = (async_t){cb, arg, memfd};
    if (proc_watch(pid, async_exited, a, err) < 0) {
        /* Cannot happen for a fresh child short of fd exhaustion; do not leak a zombie. */
        waitpid(pid, NULL, 0);
        close(memfd);
        free(a);
        return -1;
    }
    find(pid)->arg_free = async_free;
    return pid;
}

int proc_run_sync(const char *const *argv, char **out, sg_error_t **err)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return sg_error_errno(err, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return sg_error_errno(err, errno, "fork");
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        dup2(pipefd[1], 1);
        dup2(pipefd[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    /* While the command runs, reap every child that exits, not only it: a
     * subreaper's zombie sandbox would otherwise make the very runsc command
     * we wait for (delete, kill) wait for that zombie to disappear. */
    size_t cap = 65536, len = 0;
    char *buf = xmalloc(cap + 1);
    char sink[4096];
    int status = -1;
    bool eof = false, exited = false;
    /* Until it exits, then what is left in the pipe (a grandchild holding the
     * pipe open must not hold us). */
    for (int drain = 0; !exited || (!eof && drain < 100); drain += exited) {
        if (!eof) {
            struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
            if (poll(&pfd, 1, exited ? 0 : 50) > 0) {
                ssize_t n = read(pipefd[0], len < cap ? buf + len : sink,
                                 len < cap ? cap - len : sizeof sink);
                if (n > 0 && len < cap)
                    len += n;
                else if (n == 0 || (n < 0 && errno != EINTR))
                    eof = true;
            }
        }
        int st;
        pid_t r = 0;
        while (!exited && (r = waitpid(-1, &st, (eof ? 0 : WNOHANG) | __WALL)) > 0) {
            if (r == pid) {
                status = st;
                exited = true;
                break;
            }
            watch_t *w = find(r);
            if (w) {
                w->reaped = true;
                w->status = st;
            } else {
                keep_unclaimed(r, st);
            }
        }
        if (r < 0 && errno == ECHILD && !exited)
            exited = true; /* reaped elsewhere; status unknown */
        if (exited && !eof) {
            struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
            if (poll(&pfd, 1, 0) <= 0)
                break;
        }
    }
    close(pipefd[0]);
    buf[len] = 0;
    if (out)
        *out = buf;
    else
        free(buf);
    return status;
}

const char *proc_status_str(int status, char *buf, size_t size)
{
    if (status < 0)
        snprintf(buf, size, "exited (status unknown)");
    else if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "stopped");
    return buf;
}
