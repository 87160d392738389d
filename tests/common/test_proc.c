/* proc: a child that exits before it is watched — reaped meanwhile by a
 * proc_run_sync or a sweep, which take every exited child — is still
 * reported to its proc_watch, with its status, on the loop's next pass. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proc.h"
#include "tests/lib/tap.h"

static int got_status = -2;
static pid_t got_pid;

static void exited(pid_t pid, int status, void *arg)
{
    got_pid = pid;
    got_status = status;
    loop_stop(arg);
}

static void give_up(loop_t *loop, int id, void *arg)
{
    loop_stop(loop);
}

int main(void)
{
    zsys_handler_set(NULL);
    loop_t *loop = loop_new();
    ok(proc_init(loop, NULL) == 0, "proc_init");
    pid_t child = fork();
    if (child == 0)
        _exit(7);
    /* Its exit is reaped by the next proc_run_sync, which waits for any child. */
    siginfo_t si;
    waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT);
    const char *const argv[] = {"/bin/true", NULL};
    ok(proc_run_sync(argv, NULL, NULL) == 0, "proc_run_sync runs, and reaps the other child too");
    ok(waitpid(child, NULL, WNOHANG) < 0, "the child is reaped already");
    ok(proc_watch(child, exited, loop, NULL) == 0, "proc_watch of it is taken");
    loop_timer(loop, 5000, 1, give_up, NULL);
    loop_run(loop, NULL);
    ok(got_pid == child && got_status >= 0 && WIFEXITED(got_status) && WEXITSTATUS(got_status) == 7,
       "its exit is reported, status 7 (got %d)", got_status);
    loop_destroy(&loop);
    zsys_shutdown();
    return tap_done();
}
