/* proc: child processes on the event loop, never waited for on it.
 *
 * proc_spawn() forks and execs; proc_watch() calls back once when a process
 * exits, found through a pidfd polled by the loop — for our children (with
 * their wait status) and for processes we merely know the pid of, such as a
 * sandbox adopted after a restart (status -1).  sandgate is a child
 * subreaper, so processes its children leave behind (runsc's detached
 * sandbox and gofer) are re-parented to it; SIGCHLD (through the loop's
 * signalfd) reaps the ones nobody watches, with a slow sweep as a backstop.
 */
#ifndef SG_PROC_H
#define SG_PROC_H

#include "common/loop.h"
#include <sys/types.h>

#include "common/error.h"

/* status: a waitpid() status, or -1 when the process was not our child. */
typedef void(proc_exit_fn)(pid_t pid, int status, void *arg);

typedef struct {
    const char *const *argv; /* argv[0] is the program path */
    const char *const *env;  /* NULL: inherit ours */
    const char *cwd;         /* NULL: ours */
    const char *output;      /* file that gets stdout and stderr (appended); NULL: /dev/null */
    int output_fd;           /* if > 0, used instead of output */
    bool new_session;        /* setsid(), so signals to our group do not reach it */
    const int *stdio;        /* if not NULL: three fds, the child's 0, 1 and 2 (instead of
                                /dev/null and output); the caller keeps its own */
} proc_spec_t;

/* Makes the calling process a child subreaper and reaps on loop's SIGCHLD.
 * Call once, before spawning and before any other thread starts (loop_signal). */
int proc_init(loop_t *loop, sg_error_t **err);
void proc_fini(void);
/* The loop given to proc_init (for the timers of multi-step operations). */
loop_t *proc_loop(void);

/* Starts a process.  Returns its pid, or -1 with *err set (exec failures
 * show up as exit status 127 and a line in the output file). */
pid_t proc_spawn(const proc_spec_t *spec, sg_error_t **err);

/* Calls cb once when pid exits.  One watch per pid. */
int proc_watch(pid_t pid, proc_exit_fn *cb, void *arg, sg_error_t **err);
/* Stops watching pid (no callback); safe if not watched. */
void proc_unwatch(pid_t pid);

/* Runs argv without blocking the loop and calls cb once it has exited, with
 * its wait status and its output (stdout+stderr, at most 64 KiB, NUL
 * terminated, borrowed for the call).  Returns its pid; proc_unwatch(pid)
 * cancels the callback. */
typedef void(proc_done_fn)(int status, const char *output, void *arg);
pid_t proc_exec_async(const char *const *argv, proc_done_fn *cb, void *arg, sg_error_t **err);

/* Runs argv to completion, blocking, and returns its wait status (or -1
 * with *err set); output (stdout+stderr, at most 64 KiB) is stored in *out
 * if out is not NULL.  For start-up and tests, never on the loop's hot path. */
int proc_run_sync(const char *const *argv, char **out, sg_error_t **err);

/* Describes a wait status: "exited with status 1", "killed by signal 9". */
const char *proc_status_str(int status, char *buf, size_t size);

#endif
