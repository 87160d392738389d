/* sandgate-init: PID 1 inside each sandbox.
 *
 * usage: sandgate-init PROGRAM [ARGS...]
 *        sandgate-init --group PROGRAM [ARGS...]
 *        sandgate-init [--group] --fs OP ARGS...   (file operations: fs.c)
 *
 * A kernel as PID 1 would never reap the orphans of code it runs (every
 * `subprocess` grandchild becomes a zombie and counts against the process
 * limit), and PID 1 ignores signals it has no handler for.  This init starts
 * the kernel in its own process group, forwards every catchable signal to it
 * (runsc kill ID INT becomes the kernel's KeyboardInterrupt), reaps whatever
 * exits, and when the kernel ends, kills what is left of its group and exits
 * with the kernel's status (128 + signal number when it was killed).
 *
 * SANDGATE_PRELOAD becomes the kernel's LD_PRELOAD (not init's own: a
 * sanitizer build of init must have its runtime first).
 *
 * SANDGATE_RELAY=HOST=INNER:PORT[,PORT...] (e.g.
 * "/conn/kernel=@sandgate-kernel:1,2,3,4,5") makes init relay the kernel's
 * sockets, so that the kernel never binds a host socket (gVisor cannot
 * checkpoint a sandbox holding one, and ipykernel's connect to its own shell
 * socket never succeeds through one).  For each PORT init listens on the
 * stream socket "HOST-PORT" and, for every connection accepted there,
 * connects to "INNER-PORT" and copies bytes both ways until either side
 * ends, then closes both.  An INNER starting with '@' is in the abstract
 * namespace, named as ZeroMQ names `ipc://@NAME` (the rest of the name after
 * '@', no NUL), so the kernel binds ipc://@sandgate-kernel-1 and so on.  A
 * connection that finds nothing at INNER (the kernel has not bound yet, or
 * is gone) is closed at once: ZeroMQ on the host reconnects by itself.
 * The kernel does not see SANDGATE_RELAY; a malformed one is fatal (127).
 *
 * With a relay, two signals are init's own and not forwarded:
 * SIGUSR1 = detach: close every relayed connection and every listener, then
 *   create the file "HOST.detached".  It comes last, so its existence means
 *   the detach is complete: the launcher waits for it, removes it and the
 *   HOST-PORT files (the sandbox cannot: runsc's gofer does not let it touch
 *   host sockets), and runs `runsc checkpoint`.
 *   With TCP or UDP sockets open in the sandbox it refuses instead (runsc
 *   could not save them) and creates "HOST.refused" with their number.
 * SIGUSR2 = attach: listen on HOST-PORT again (the launcher has removed the
 *   files); a port already listening is left alone.  A detached relay also
 *   attaches by itself when "HOST.detached" is removed (it looks every
 *   2 ms while detached, never otherwise): that is how the launcher lets
 *   it listen after a restore, without a runsc command on the resume's
 *   path.
 * Both are idempotent.  Problems go to stderr (the kernel log) with a
 * "sandgate-init: " prefix; one bad connection never ends init.
 *
 * More kernels in the same sandbox (its files and processes shared): with a
 * relay, init also listens on "HOST-ctl", where the host asks, one request a
 * connection, each a list of NUL-terminated fields ended by an empty one:
 *   spawn N CONN ENV... -- ARGV...   writes CONN (a connection file whose
 *       ports are N*10+1..N*10+5) to /tmp/.sandgate-kernel-N.json, relays
 *       those ports as the first kernel's, and starts ARGV as the first
 *       kernel is started, with ENV (NAME=VALUE) added; N is 2..17.
 *       Answers "ok PID\n" and keeps the connection: "exit STATUS\n" comes
 *       when that kernel ends (its process group is killed then).
 *   watch N                          the same answers for a kernel started
 *       before (after a resume: a detach closes these connections too).
 *   signal N SIG                     SIG to kernel N's process group; "ok\n".
 *   connect PORT                     "ok\n", then relays to PORT on the
 *       sandbox's loopback (127.0.0.1, else ::1): a server its code runs,
 *       reached from outside (gateway/ports/).
 * Errors are "error WHY\n".  Code in the sandbox can reach this socket as
 * the host can: it gains nothing it could not do itself (the kernels are
 * its own, as the sandbox user).  When the first kernel ends, all end.
 *
 * --group: a command run in a running sandbox (`runsc exec`, sandbox_exec in
 * sandbox.h), not PID 1.  No relay (SANDGATE_RELAY, which every process of
 * the sandbox inherits, is ignored); every signal is forwarded to the
 * command's whole process group, and SIGUSR2 kills that group (SIGKILL
 * cannot be caught, and `runsc kill --pid` reaches one process only).
 *
 * Idle, init is blocked in epoll_wait without a timeout.  Every system call
 * costs ~40 us under gVisor's ptrace platform, so a relayed message costs one
 * recv and one send; epoll interest changes only while a write is partial.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernelmgr/guest/fs.h"
#include "kernelmgr/guest/net.h"

#define MAX_GUESTS 16 /* kernels beside the first: numbers 2..MAX_GUESTS + 1 */
#define MAX_PORTS (5 * (MAX_GUESTS + 1) + 1)
#define CTL_MAX 65536  /* a request's bytes */
#define CONNECT_MS 500 /* connect PORT's longest wait */
#define BUF_SIZE 65536

enum kind { K_SIGNALS, K_LISTENER, K_CONN, K_CTL };

/* What an epoll event points at. */
struct end {
    enum kind kind;
    int fd;          /* -1 when closed */
    uint32_t events; /* the interest epoll has now, to skip needless epoll_ctl */
    struct port *port;
    struct pair *pair;
    struct ctl *ctl;
    bool gone; /* hung up while what it sent was still being written out: not watched */
};

struct port {
    struct end listener;
    bool ctl; /* HOST-ctl: requests, not relayed */
    struct sockaddr_un host, inner;
    socklen_t inner_len;
};

/* Bytes read from one end and not yet written to the other. */
struct dir {
    size_t off, len;
    char buf[BUF_SIZE];
};

struct pair {
    struct end host, inner;
    struct dir to_inner, to_host;
    bool dead; /* closed; freed after the current batch of events */
    struct pair *next;
};

/* A connection on HOST-ctl: its request, then the kernel it waits for. */
struct ctl {
    struct end end;
    size_t len;
    int watching; /* the guest whose end it waits for; 0: none yet */
    struct ctl *next;
    char buf[CTL_MAX];
};

/* The kernels started on HOST-ctl, by number. */
static struct guest {
    pid_t pid;  /* 0: never started */
    int status; /* -1 while it runs */
} guests[MAX_GUESTS + 2];
static struct ctl *ctls;
static void ctl_close(struct ctl *c);
static void ctl_accept(struct port *pt, int fd);

static int epfd = -1;
static struct port ports[MAX_PORTS];
static int nports;
static struct pair *live, *dead;
static bool accept_paused; /* out of file descriptors: listeners wait for a close */

static void warn(const char *what, const char *path, int err)
{
    fprintf(stderr, "sandgate-init: %s %s: %s\n", what, path, strerror(err));
}

/* "HOST.detached": exists while the relay is detached (see detach()). */
static char marker[108];
static bool detached; /* until attach(): the marker's removal is looked for */
/* SANDGATE_SAVES_INET: runsc saves the sandbox's TCP and UDP sockets (a
 * runsc of 2024 or later): a detach need not refuse for them. */
static bool saves_inet;

static char relay_host[108], relay_inner[108];

/* A relayed port (ctl: the requests' socket, HOST-ctl); 0, or -1 when it
 * does not fit or is there already. */
static int add_port(const char *name, bool ctl)
{
    if (nports == MAX_PORTS)
        return -1;
    for (int i = 0; i < nports; i++)
        if (strcmp(strrchr(ports[i].host.sun_path, '-') + 1, name) == 0)
            return -1;
    struct port *pt = &ports[nports];
    *pt = (struct port){.listener = {.kind = K_LISTENER, .fd = -1, .port = pt}, .ctl = ctl};
    if (guest_unix_addr(&pt->host, relay_host, name) == 0 ||
        (!ctl && (pt->inner_len = guest_unix_addr(&pt->inner, relay_inner, name)) == 0))
        return -1;
    nports++;
    return 0;
}

/* HOST=INNER:PORT[,PORT...]; 0 or -1 with a message. */
static int parse_relay(const char *spec)
{
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        goto bad;
    strcpy(buf, spec);
    char *eq = strchr(buf, '=');
    char *colon = strrchr(buf, ':');
    if (!eq || !colon || colon < eq || eq == buf || colon == eq + 1 || eq[1] == ':')
        goto bad;
    *eq = *colon = '\0';
    const char *host = buf, *inner = eq + 1;
    if (strcmp(inner, "@") == 0 || host[0] == '@' ||
        snprintf(marker, sizeof marker, "%s.detached", host) >= (int)sizeof marker ||
        snprintf(relay_host, sizeof relay_host, "%s", host) >= (int)sizeof relay_host ||
        snprintf(relay_inner, sizeof relay_inner, "%s", inner) >= (int)sizeof relay_inner)
        goto bad;
    for (char *p = colon + 1, *tok; (tok = strsep(&p, ","));) {
        char *endp;
        unsigned long port = strtoul(tok, &endp, 10);
        if (tok[0] < '0' || tok[0] > '9' || *endp || port == 0 || port > 65535 ||
            add_port(tok, false) < 0)
            goto bad;
    }
    if (add_port("ctl", true) < 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "sandgate-init: bad SANDGATE_RELAY (want HOST=INNER:PORT[,PORT...]): %s\n",
            spec);
    return -1;
}

static void set_events(struct end *e, uint32_t events)
{
    if (e->events == events || e->gone)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = e};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, e->fd, &ev) < 0)
        warn("epoll_ctl", "relay", errno);
    e->events = events;
}

static int watch(struct end *e, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = e};
    e->events = events;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, e->fd, &ev);
}

static void pause_accepting(bool pause)
{
    accept_paused = pause;
    for (int i = 0; i < nports; i++)
        if (ports[i].listener.fd >= 0)
            set_events(&ports[i].listener, pause ? 0 : EPOLLIN);
}

/* Closes an end's fd, its epoll interest first: a kernel being started
 * (fork, then exec) holds a copy of every fd for a moment, and the copy
 * would keep the interest, and its events pointing at freed memory. */
static void close_end(struct end *e)
{
    if (e->fd < 0)
        return;
    epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
    close(e->fd);
}

static void close_pair(struct pair *p)
{
    if (p->dead)
        return;
    close_end(&p->host);
    close_end(&p->inner);
    p->host.fd = p->inner.fd = -1;
    p->dead = true;
    for (struct pair **pp = &live; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->next = dead;
    dead = p;
    if (accept_paused)
        pause_accepting(false);
}

static void attach(void)
{
    for (int i = 0; i < nports; i++) {
        struct port *pt = &ports[i];
        if (pt->listener.fd >= 0)
            continue;
        const char *path = pt->host.sun_path;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            warn("socket for", path, errno);
            continue;
        }
        unlink(path); /* a stale socket: the launcher removes them, this is a fallback */
        if (bind(fd, (struct sockaddr *)&pt->host, sizeof pt->host) < 0 ||
            listen(fd, SOMAXCONN) < 0) {
            warn("listen on", path, errno);
            close(fd);
            continue;
        }
        pt->listener.fd = fd;
        if (watch(&pt->listener, accept_paused ? 0 : EPOLLIN) < 0) {
            warn("epoll_ctl", path, errno);
            close(fd);
            pt->listener.fd = -1;
        }
    }
    unlink(marker); /* attached (the launcher usually removed it already) */
    detached = false;
}

static void detach(void)
{
    /* runsc of 2022 cannot save a TCP socket that a thread waits on, and a
     * failed checkpoint ends the sandbox: with any TCP or UDP socket open (a
     * server started from the notebook), refuse, and say so in
     * "HOST.refused".  A newer runsc saves them (SANDGATE_SAVES_INET). */
    char refused[sizeof marker + 8];
    snprintf(refused, sizeof refused, "%.*s.refused", (int)(strlen(marker) - 9), marker);
    unlink(refused); /* an earlier refusal's, read by now */
    int open_sockets = saves_inet ? 0 : guest_inet_sockets();
    if (open_sockets > 0) {
        FILE *f = fopen(refused, "we");
        if (f) {
            fprintf(f, "%d\n", open_sockets);
            fclose(f);
        }
        return;
    }
    while (live)
        close_pair(live);
    while (ctls)
        ctl_close(ctls);
    for (int i = 0; i < nports; i++)
        if (ports[i].listener.fd >= 0) {
            close_end(&ports[i].listener);
            ports[i].listener.fd = -1;
            /* Removed from inside too: a restore walks again every file
             * the sandbox knew at the checkpoint, and fails on one the host
             * removed behind its back.  (runsc of 2022 refuses this
             * unlink; the launcher removes them then.) */
            unlink(ports[i].host.sun_path);
        }
    /* The host cannot tell a detached relay by its sockets (runsc's gofer
     * may keep them listening on the host): this file says it, and the
     * launcher then removes what socket files are left; the marker stays
     * until the launcher lets the relay attach again. */
    int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0660);
    if (fd < 0)
        warn("create", marker, errno);
    else
        close(fd);
    detached = fd >= 0;
}

/* Relays h (the host's end) and k (the inner one); closes both if it cannot. */
static void start_pair(int h, int k, const char *what)
{
    struct pair *p = malloc(sizeof *p);
    if (!p) {
        warn("relay for", what, ENOMEM);
        close(h);
        close(k);
        return;
    }
    p->host = (struct end){.kind = K_CONN, .fd = h, .pair = p};
    p->inner = (struct end){.kind = K_CONN, .fd = k, .pair = p};
    p->to_inner.len = p->to_host.len = 0;
    p->dead = false;
    p->next = live;
    live = p;
    if (watch(&p->host, EPOLLIN) < 0 || watch(&p->inner, EPOLLIN) < 0) {
        warn("epoll_ctl", what, errno);
        close_pair(p);
    }
}

static void accept_one(struct port *pt)
{
    int h = accept4(pt->listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (h < 0) {
        if (errno == EMFILE || errno == ENFILE) {
            warn("accept on", pt->host.sun_path, errno);
            pause_accepting(true); /* level-triggered: it would spin */
        } else if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) {
            warn("accept on", pt->host.sun_path, errno);
        }
        return;
    }
    if (pt->ctl) {
        ctl_accept(pt, h);
        return;
    }
    const char *inner = pt->inner.sun_path[0] ? pt->inner.sun_path : pt->inner.sun_path + 1;
    int k = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (k < 0 || connect(k, (struct sockaddr *)&pt->inner, pt->inner_len) < 0) {
        /* Nothing there yet (or any more) is normal: the host reconnects. */
        if (errno != ECONNREFUSED && errno != ENOENT)
            warn("connect to", inner, errno);
        if (k >= 0)
            close(k);
        close(h);
        return;
    }
    start_pair(h, k, pt->host.sun_path);
}

/* The data read from e waits in *from, the data for e in *to. */
static void pair_dirs(struct end *e, struct end **peer, struct dir **from, struct dir **to)
{
    struct pair *p = e->pair;
    bool host = e == &p->host;
    *peer = host ? &p->inner : &p->host;
    *from = host ? &p->to_inner : &p->to_host;
    *to = host ? &p->to_host : &p->to_inner;
}

/* Writes what d holds to e; 0 when all of it is written, 1 when some is left,
 * -1 when e has failed. */
static int flush(struct end *e, struct dir *d)
{
    ssize_t n = send(e->fd, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 1 : -1;
    d->off += (size_t)n;
    if (d->off < d->len)
        return 1;
    d->off = d->len = 0;
    return 0;
}

/* Interest follows the buffers: read an end while what it sent is written
 * out, wait for it to be writable while something for it is left. */
static void update_interest(struct pair *p)
{
    set_events(&p->host, (p->to_inner.len ? 0 : EPOLLIN) | (p->to_host.len ? EPOLLOUT : 0));
    set_events(&p->inner, (p->to_host.len ? 0 : EPOLLIN) | (p->to_inner.len ? EPOLLOUT : 0));
}

static void relay(struct end *e, uint32_t events)
{
    struct end *peer;
    struct dir *from, *to;
    pair_dirs(e, &peer, &from, &to);
    if ((events & EPOLLOUT) && to->len && flush(e, to) < 0)
        goto close;
    /* The peer hung up while e was slow: the rest of what it sent is
     * written out (and read, once its buffer is), then the pair closes. */
    while (peer->gone && !to->len) {
        ssize_t n = recv(peer->fd, to->buf, BUF_SIZE, 0);
        if (n <= 0)
            goto close;
        to->off = 0;
        to->len = (size_t)n;
        if (flush(e, to) < 0)
            goto close;
    }
    if (peer->gone) { /* what e sends has nowhere to go */
        update_interest(e->pair);
        return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        /* Only a hang-up or an error is reported while from is full (no
         * EPOLLIN interest then); level-triggered, it would come back
         * forever: e is no longer watched, and its peer's EPOLLOUT writes
         * out what it sent first (above). */
        if (from->len) {
            e->gone = true;
            epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
            update_interest(e->pair);
            return;
        }
        ssize_t n = recv(e->fd, from->buf, BUF_SIZE, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            goto close;
        if (n > 0) {
            from->off = 0;
            from->len = (size_t)n;
            if (flush(peer, from) < 0)
                goto close;
        }
    }
    update_interest(e->pair);
    return;
close:
    close_pair(e->pair);
}

/* Whether a pair holds bytes it could not write yet. */
static bool waiting(void)
{
    for (struct pair *p = live; p; p = p->next)
        if (p->to_host.len || p->to_inner.len)
            return true;
    return false;
}

static void retry_writes(void)
{
    for (struct pair *p = live, *next; p; p = next) {
        next = p->next;
        if (p->to_host.len)
            relay(&p->host, EPOLLOUT);
        else if (p->to_inner.len)
            relay(&p->inner, EPOLLOUT);
    }
}

/* --- more kernels: requests on HOST-ctl ------------------------------------- */

static struct ctl *dead_ctls; /* closed; freed after the current batch of events */

static void ctl_close(struct ctl *c)
{
    if (c->end.fd < 0)
        return;
    close_end(&c->end);
    c->end.fd = -1;
    for (struct ctl **pp = &ctls; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    c->next = dead_ctls;
    dead_ctls = c;
    if (accept_paused)
        pause_accepting(false);
}

/* An answer (a line, small enough for any socket buffer); last closes c. */
static void ctl_say(struct ctl *c, bool last, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ctl_say(struct ctl *c, bool last, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && send(c->end.fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1,
                      MSG_NOSIGNAL) < 0)
        warn("answer on", "HOST-ctl", errno);
    if (last)
        ctl_close(c);
}

/* Starts a kernel as the first one is started: every signal at its
 * default, its own process group, LD_PRELOAD from SANDGATE_PRELOAD, and
 * env's NAME=VALUE entries added (NULL-terminated; NULL: none). */
static pid_t start_kernel(char **argv, char **env)
{
    pid_t child = fork();
    if (child > 0)
        setpgid(child, child);
    if (child != 0)
        return child;
    /* A SIGINT ignored by whoever started init (a shell's background job)
     * would otherwise stay ignored, and Python would never turn an
     * interrupt into KeyboardInterrupt. */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);
    const char *preload = getenv("SANDGATE_PRELOAD");
    if (preload && *preload)
        setenv("LD_PRELOAD", preload, 1);
    unsetenv("SANDGATE_PRELOAD");
    for (char **e = env; e && *e; e++)
        putenv(*e);
    execvp(argv[0], argv); /* a kernelspec may name its program by PATH ("R") */
    perror("sandgate-init: exec");
    _exit(127);
}

/* Relays kernel n's five ports (n*10+1..n*10+5) from now on. */
static int add_guest_ports(int n)
{
    for (int p = 1; p <= 5; p++) {
        char name[16];
        snprintf(name, sizeof name, "%d", n * 10 + p);
        bool known = false;
        for (int i = 0; i < nports; i++)
            known |= strcmp(strrchr(ports[i].host.sun_path, '-') + 1, name) == 0;
        if (!known && add_port(name, false) < 0)
            return -1;
    }
    attach();
    return 0;
}

static void ctl_spawn(struct ctl *c, int n, char **f, int nf)
{
    struct guest *g = &guests[n];
    if (g->pid > 0 && g->status < 0) {
        ctl_say(c, true, "error kernel %d runs\n", n);
        return;
    }
    int dash = 3;
    while (dash < nf && strcmp(f[dash], "--") != 0)
        dash++;
    if (dash + 1 >= nf) {
        ctl_say(c, true, "error spawn N CONN ENV... -- ARGV...\n");
        return;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/.sandgate-kernel-%d.json", n);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    size_t len = strlen(f[2]);
    bool written = fd >= 0 && write(fd, f[2], len) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    if (!written) {
        ctl_say(c, true, "error cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    if (add_guest_ports(n) < 0) {
        ctl_say(c, true, "error no room to relay kernel %d's ports\n", n);
        return;
    }
    f[dash] = NULL; /* env: f[3..dash), argv: f[dash+1..nf) */
    f[nf] = NULL;
    pid_t pid = start_kernel(f + dash + 1, f + 3);
    if (pid < 0) {
        ctl_say(c, true, "error fork: %s\n", strerror(errno));
        return;
    }
    *g = (struct guest){.pid = pid, .status = -1};
    c->watching = n;
    ctl_say(c, false, "ok %d\n", (int)pid);
}

static void ctl_connect(struct ctl *c, const char *arg)
{
    char *endp;
    unsigned long port = strtoul(arg, &endp, 10);
    int k = -1, h = -1;
    if (arg[0] < '1' || arg[0] > '9' || *endp || port > 65535)
        errno = EINVAL;
    else if ((k = guest_connect_loopback(AF_INET, (unsigned)port, CONNECT_MS)) < 0 &&
             errno == ECONNREFUSED && /* nothing on 127.0.0.1: ::1's answer, or that */
             (k = guest_connect_loopback(AF_INET6, (unsigned)port, CONNECT_MS)) < 0 &&
             errno != ETIMEDOUT)
        errno = ECONNREFUSED;
    if (k >= 0 && (h = dup(c->end.fd)) < 0) /* c's own fd goes with c */
        close(k);
    if (h < 0) {
        ctl_say(c, true, "error connect to port %s: %s\n", arg, strerror(errno));
        return;
    }
    ctl_say(c, true, "ok\n");
    start_pair(h, k, "HOST-ctl");
}

static void ctl_request(struct ctl *c)
{
    char *f[512];
    int nf = 0;
    for (size_t i = 0; i < c->len && nf < 511; i += strlen(c->buf + i) + 1)
        f[nf++] = c->buf + i;
    nf--; /* the empty field that ends it */
    if (nf == 2 && strcmp(f[0], "connect") == 0) {
        ctl_connect(c, f[1]);
        return;
    }
    int n = nf >= 2 ? atoi(f[1]) : 0;
    if (n < 2 || n > MAX_GUESTS + 1) {
        ctl_say(c, true, "error want spawn|watch|signal N (2..%d), connect PORT\n", MAX_GUESTS + 1);
        return;
    }
    struct guest *g = &guests[n];
    if (strcmp(f[0], "spawn") == 0 && nf >= 5) {
        ctl_spawn(c, n, f, nf);
        return;
    }
    if (g->pid == 0) {
        ctl_say(c, true, "error no kernel %d\n", n);
        return;
    }
    if (strcmp(f[0], "watch") == 0 && nf == 2) {
        if (g->status >= 0) {
            ctl_say(c, true, "exit %d\n", g->status);
            return;
        }
        c->watching = n;
        ctl_say(c, false, "ok %d\n", (int)g->pid);
        return;
    }
    int sig = nf == 3 ? atoi(f[2]) : 0;
    if (strcmp(f[0], "signal") == 0 && sig > 0 && sig < NSIG) {
        if (g->status < 0 && kill(-g->pid, sig) < 0 && errno != ESRCH) {
            ctl_say(c, true, "error kill: %s\n", strerror(errno));
            return;
        }
        ctl_say(c, true, "ok\n");
        return;
    }
    ctl_say(c, true, "error want spawn|watch|signal N...\n");
}

static void ctl_read(struct ctl *c)
{
    ssize_t n = recv(c->end.fd, c->buf + c->len, CTL_MAX - c->len, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ctl_close(c);
        return;
    }
    if (n < 0 || c->watching)
        return; /* once answered, a connection only waits */
    c->len += (size_t)n;
    if (c->len >= 2 && c->buf[c->len - 1] == 0 && c->buf[c->len - 2] == 0)
        ctl_request(c);
    else if (c->len == CTL_MAX)
        ctl_say(c, true, "error request over %d bytes\n", CTL_MAX);
}

static void ctl_accept(struct port *pt, int fd)
{
    struct ctl *c = malloc(sizeof *c);
    if (!c) {
        warn("requests on", pt->host.sun_path, ENOMEM);
        close(fd);
        return;
    }
    c->end = (struct end){.kind = K_CTL, .fd = fd, .ctl = c};
    c->len = 0;
    c->watching = 0;
    c->next = ctls;
    ctls = c;
    if (watch(&c->end, EPOLLIN) < 0) {
        warn("epoll_ctl", pt->host.sun_path, errno);
        ctl_close(c);
    }
}

/* Kernel pid (not the first) ended: its group killed, who waits told. */
static void guest_ended(pid_t pid, int status)
{
    for (int n = 2; n <= MAX_GUESTS + 1; n++) {
        struct guest *g = &guests[n];
        if (g->pid != pid || g->status >= 0)
            continue;
        g->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        kill(-pid, SIGKILL);
        for (struct ctl *c = ctls, *next; c; c = next) {
            next = c->next;
            if (c->watching == n)
                ctl_say(c, true, "exit %d\n", g->status);
        }
    }
}

static bool group_mode; /* --group */

static void forward(pid_t child, int sig)
{
    if (group_mode && sig == SIGUSR2)
        sig = SIGKILL;
    if (kill(group_mode ? -child : child, sig) < 0 && errno != ESRCH)
        warn("kill", group_mode ? "command" : "kernel", errno);
}

/* Reaps every child that has ended; the kernel's exit status once it has
 * (after killing what is left of its group), -1 before. */
static int reap(pid_t child)
{
    int status;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
        if (p != child) {
            guest_ended(p, status);
            continue;
        }
        kill(-child, SIGKILL);
        for (int n = 2; n <= MAX_GUESTS + 1; n++)
            if (guests[n].pid > 0 && guests[n].status < 0)
                kill(-guests[n].pid, SIGKILL);
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return -1;
}

/* Handles the pending signals; like reap. */
static int on_signals(int sfd, pid_t child)
{
    struct signalfd_siginfo si[16];
    ssize_t n = read(sfd, si, sizeof si);
    if (n < 0)
        return -1;
    for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++) {
        int sig = (int)si[i].ssi_signo;
        if (sig == SIGCHLD) {
            int status = reap(child);
            if (status >= 0)
                return status;
        } else if (nports && sig == SIGUSR1) {
            detach();
        } else if (nports && sig == SIGUSR2) {
            attach();
        } else {
            forward(child, sig);
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    group_mode = argc > 1 && strcmp(argv[1], "--group") == 0;
    if (group_mode) {
        argv++;
        argc--;
    }
    /* A file operation or a terminal (pty.c) is this process's own work,
     * also under --group (`--group --fs OP...`, how sandbox_exec runs sbfs's;
     * a sanitizer build's helper is not started with the kernel's preload). */
    if (argc > 1 && (strcmp(argv[1], "--fs") == 0 || strcmp(argv[1], "--pty") == 0)) {
        umask(007); /* what the kernel's files get (below) */
        return argv[1][2] == 'f' ? sandbox_fs_main(argc - 2, argv + 2)
                                 : sandbox_pty_main(argc - 2, argv + 2);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: sandgate-init [--group] PROGRAM [ARGS...]\n");
        return 127;
    }
    if (group_mode) /* the kernel's alone (preload.c) */
        unsetenv("SANDGATE_TCP_AS_IPC");
    const char *relay_spec = group_mode ? NULL : getenv("SANDGATE_RELAY");
    if (relay_spec && *relay_spec && parse_relay(relay_spec) < 0)
        return 127;
    unsetenv("SANDGATE_RELAY");
    saves_inet = getenv("SANDGATE_SAVES_INET") != NULL;
    unsetenv("SANDGATE_SAVES_INET");
    /* The kernel's files and sockets, and the relay's, are the sandbox
     * group's too: sandgate's unprivileged half is in that group
     * (kernelmgr/launcher/launcher.h). */
    umask(007);

    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    int sfd = signalfd(-1, &all, SFD_NONBLOCK | SFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct end signals = {.kind = K_SIGNALS, .fd = sfd};
    if (sfd < 0 || epfd < 0 || watch(&signals, EPOLLIN) < 0) {
        perror("sandgate-init: signalfd/epoll");
        return 127;
    }
    pid_t child = start_kernel(argv + 1, NULL);
    if (child < 0) {
        perror("sandgate-init: fork");
        return 127;
    }
    attach();

    for (;;) {
        struct epoll_event evs[64];
        /* runsc (2022-12-19) does not always report a host socket writable
         * again once it was full: while bytes wait, look every 2 ms. */
        int n = epoll_wait(epfd, evs, 64, waiting() ? 2 : detached ? 2 : -1);
        if (n < 0 && errno != EINTR) /* before access() below sets errno */
            perror("sandgate-init: epoll_wait");
        n = n < 0 ? 0 : n; /* (an error cannot happen with valid arguments; keep reaping) */
        if (n == 0)
            retry_writes();
        if (detached && access(marker, F_OK) != 0)
            attach(); /* the launcher removed the marker: after a restore, or a failed pause */
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e->kind == K_SIGNALS) {
                int status = on_signals(sfd, child);
                if (status >= 0)
                    return status;
            } else if (e->kind == K_LISTENER) {
                if (e->fd >= 0)
                    accept_one(e->port);
            } else if (e->kind == K_CTL) {
                if (e->fd >= 0)
                    ctl_read(e->ctl);
            } else if (!e->pair->dead) {
                relay(e, evs[i].events);
            }
        }
        while (dead_ctls) {
            struct ctl *c = dead_ctls;
            dead_ctls = c->next;
            free(c);
        }
        while (dead) {
            struct pair *p = dead;
            dead = p->next;
            free(p);
        }
    }
}
