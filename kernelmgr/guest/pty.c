/* pty: `sandgate-init --group --pty ROWS COLS PROGRAM [ARGS...]`, a command
 * on a pseudo-terminal inside the sandbox (E2B's pty, gateway/envd/
 * process.c; commands.h's pty_rows), as the sandbox user.
 *
 * PROGRAM runs in a session of its own whose controlling terminal is the
 * pty's other end, sized ROWS x COLS.  What the terminal writes comes out on
 * stdout, as it comes.  stdin carries frames, so that input and a resize
 * cannot be confused: a type byte, a 4-byte little-endian length, that many
 * bytes —
 *   'd'  bytes typed into the terminal
 *   'r'  "ROWS COLS": the terminal's new size (the program gets SIGWINCH)
 * INT, TERM and HUP go to the program's process group (its session), USR2
 * kills it (as --group does: `runsc kill --pid` reaches one process only).
 * The exit status is the program's (128 + a signal's), once what it wrote
 * is out.  The end of stdin changes nothing: the terminal lives as long as
 * the program.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "kernelmgr/guest/fs.h"

#define FRAME_MAX (1u << 20)
#define DRAIN_MS 100

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void set_size(int master, const char *rows, const char *cols)
{
    struct winsize ws = {.ws_row = (unsigned short)atoi(rows),
                         .ws_col = (unsigned short)atoi(cols)};
    if (ws.ws_row && ws.ws_col)
        ioctl(master, TIOCSWINSZ, &ws);
}

static pid_t start(int master, char **argv, const sigset_t *mask)
{
    const char *slave = ptsname(master);
    pid_t pid = slave ? fork() : -1;
    if (pid != 0)
        return pid;
    sigprocmask(SIG_UNBLOCK, mask, NULL);
    int fd = setsid() < 0 ? -1 : open(slave, O_RDWR);
    if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 ||
        dup2(fd, 2) < 0) {
        perror("sandgate-init --pty: the terminal");
        _exit(127);
    }
    if (fd > 2)
        close(fd);
    execvp(argv[0], argv);
    fprintf(stderr, "sandgate-init --pty: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* The frames in buf[0..*len): handled, the rest (a frame not whole yet) kept. */
static void frames(int master, char *buf, size_t *len)
{
    size_t off = 0;
    while (*len - off >= 5) {
        const unsigned char *h = (const unsigned char *)buf + off;
        uint32_t n = h[1] | (uint32_t)h[2] << 8 | (uint32_t)h[3] << 16 | (uint32_t)h[4] << 24;
        if (*len - off < 5 + n)
            break;
        char *p = buf + off + 5;
        if (h[0] == 'd') {
            write_all(master, p, n);
        } else if (h[0] == 'r' && n < 32) {
            char size[32];
            memcpy(size, p, n);
            size[n] = '\0';
            char *sp = strchr(size, ' ');
            if (sp) {
                *sp = '\0';
                set_size(master, size, sp + 1);
            }
        }
        off += 5 + n;
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
}

int sandbox_pty_main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: sandgate-init --group --pty ROWS COLS PROGRAM [ARGS...]\n");
        return 127;
    }
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0) {
        perror("sandgate-init --pty: posix_openpt");
        return 127;
    }
    set_size(master, argv[0], argv[1]);
    /* This process holds the terminal's other end too: under gVisor the
     * master says EIO while no process has it open (before the program
     * opens it); the end is the program's exit, drained below. */
    const char *name = ptsname(master);
    int slave = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (slave < 0) {
        perror("sandgate-init --pty: the terminal");
        return 127;
    }
    sigset_t mask;
    sigemptyset(&mask);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP && s != SIGPIPE)
            sigaddset(&mask, s);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    pid_t child = start(master, argv + 2, &mask);
    if (sfd < 0 || child < 0) {
        perror("sandgate-init --pty: start");
        return 127;
    }
    static char in[FRAME_MAX + 5];
    size_t inlen = 0;
    int status = -1;
    bool in_open = true, out_open = true;
    while (out_open) {
        struct pollfd pf[3] = {{.fd = master, .events = POLLIN},
                               {.fd = sfd, .events = POLLIN},
                               {.fd = in_open ? 0 : -1, .events = POLLIN}};
        if (poll(pf, 3, -1) < 0 && errno != EINTR)
            break;
        if (pf[0].revents) {
            char buf[65536];
            ssize_t n = read(master, buf, sizeof buf);
            if (n > 0)
                write_all(1, buf, (size_t)n);
            else if (n == 0 || errno != EINTR) /* EIO: every end of the terminal closed */
                out_open = false;
        }
        if (pf[1].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD) {
                    int st;
                    if (waitpid(child, &st, WNOHANG) == child)
                        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    /* What it wrote last (gVisor's line discipline may
                     * hand it over after the exit is known), then the end,
                     * even if something it left running holds the terminal
                     * open: until DRAIN_MS pass without output. */
                    if (status >= 0) {
                        char buf[65536];
                        struct pollfd m = {.fd = master, .events = POLLIN};
                        for (ssize_t n = 1; n > 0 && poll(&m, 1, DRAIN_MS) == 1;)
                            if ((n = read(master, buf, sizeof buf)) > 0)
                                write_all(1, buf, (size_t)n);
                        out_open = false;
                    }
                } else if (sig == SIGUSR2) { /* killed: gone at once, as its program */
                    kill(-child, SIGKILL);
                    int st;
                    waitpid(child, &st, 0);
                    return 128 + SIGKILL;
                } else {
                    kill(-child, sig);
                }
            }
        }
        if (in_open && pf[2].revents) {
            ssize_t n = read(0, in + inlen, sizeof in - inlen);
            if (n <= 0)
                in_open = false;
            else {
                inlen += (size_t)n;
                frames(master, in, &inlen);
                if (inlen == sizeof in) /* not a frame: dropped */
                    inlen = 0;
            }
        }
    }
    if (status < 0) {
        int st;
        if (waitpid(child, &st, 0) == child)
            status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return status < 0 ? 127 : status;
}
