/* sandgate-init: PID 1 inside each sandbox.
 *
 * usage: sandgate-init PROGRAM [ARGS...]
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
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sandgate-init PROGRAM [ARGS...]\n");
        return 127;
    }
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t child = fork();
    if (child < 0) {
        perror("sandgate-init: fork");
        return 127;
    }
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        setpgid(0, 0);
        const char *preload = getenv("SANDGATE_PRELOAD");
        if (preload && *preload)
            setenv("LD_PRELOAD", preload, 1);
        unsetenv("SANDGATE_PRELOAD");
        /* The kernel's files and sockets are the sandbox group's too: sandgate's
         * unprivileged half is in that group (kernelmgr/launcher.h). */
        umask(007);
        execv(argv[1], argv + 1);
        perror("sandgate-init: exec");
        _exit(127);
    }
    setpgid(child, child);
    for (;;) {
        int sig;
        if (sigwait(&all, &sig) != 0)
            continue;
        if (sig != SIGCHLD) {
            kill(child, sig);
            continue;
        }
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            if (p != child)
                continue;
            kill(-child, SIGKILL);
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
}
