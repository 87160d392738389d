/* commands: processes in a context's sandbox, beside its kernel.
 *
 * A command runs through kernel_exec (kernel.h; sandbox.h's sandbox_exec):
 * `runsc exec` as the sandbox user under sandgate-init --group, so it has a
 * process group of its own and INT, TERM, HUP and KILL reach all of it.  It
 * does not go through the kernel's execution queue: a command never waits
 * for an execution, nor an execution for a command.  Its stdin, stdout and
 * stderr are pipes whose ends this module holds, non-blocking, on the
 * daemon's loop.
 *
 * This module knows no HTTP.  Front ends (the REST API's
 * /contexts/{context}/commands, rest/commands.c; E2B's envd process service)
 * start commands, attach readers to them, write their stdin and signal
 * them; everything they need is here.
 *
 * Identity.  Each command has a number, its pid as clients see it: 1, 2, 3
 * ... per context, never reused while the context lives (the pid inside the
 * sandbox is gVisor's, and runsc does not tell it).  Its id is that number
 * in decimal ("7"): short, unique within its context, and what a route's
 * {command} names.
 *
 * Life.  STARTING (a paused context is resumed first, a starting one is
 * waited for, as executions wait) -> RUNNING -> EXITED.  A command ends when
 * its process has exited and its stdout and stderr have been read to their
 * end (or, if something it left running holds them open, 2 s after the exit,
 * when no reader holds it back).  Its exit code is the process's, 128 + the
 * signal that ended it, or 124 when sandgate killed it at its timeout
 * (timed_out says so).  A command that could not be run at all ends with an
 * error (exit code -1) and no output.  A finished command is kept for
 * listing, status and a late reader until more than COMMANDS_KEEP_EXITED of
 * its context's have finished after it, or the context goes.  A restart of
 * the context's kernel ends its commands with the old sandbox; deleting the
 * context kills them.  A context with a command running is not paused (runsc
 * cannot save host pipes) and is not culled for idleness.
 *
 * Output and slow readers.  Output is delivered to readers as it is read, in
 * order, stdout and stderr interleaved as the pipes gave it.  A reader that
 * cannot keep up returns false from on_output: the module stops reading the
 * command's pipes until the reader calls command_reader_ready, so the
 * command blocks in write(2) as it would behind a slow terminal — nothing is
 * lost.  With no reader attached (a background command nobody reads, a
 * foreground one whose request body is still arriving) output is kept, up to
 * max_backlog bytes; past that it is dropped and counted (dropped_bytes), so
 * a background server that logs forever never blocks on a full pipe.  The
 * first reader to attach gets the kept output first, then what was dropped,
 * then the live output.
 *
 * Standard input, when asked for (stdin_open), is a pipe the caller writes
 * with command_stdin_write: at most COMMANDS_STDIN_BUFFER bytes wait in
 * sandgate; past that the write takes less and the writer (one at a time,
 * command_stdin_writer) is told when there is room (a streamed upload
 * suspends its connection meanwhile).
 * Without stdin_open the command's stdin is at end-of-file from the start.
 * Bytes written after the command stopped reading (it exited, or closed its
 * stdin) are accepted and dropped.
 *
 * Bounds: COMMANDS_MAX_RUNNING commands starting or running per context
 * (SG_E_CONFLICT past it, as a full execution queue), COMMANDS_KEEP_EXITED finished ones kept,
 * max_backlog bytes of unread output and COMMANDS_STDIN_BUFFER of unwritten input per command.
 *
 * Everything runs on the loop thread; callbacks come from it, never from
 * inside the call that caused them unless said.
 */
#ifndef SG_COMMANDS_H
#define SG_COMMANDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/loop.h"
#include "gateway/observe/observe.h"
#include "kernelmgr/kernel/kernel.h"

#define COMMANDS_MAX_RUNNING 16         /* starting or running, per context */
#define COMMANDS_KEEP_EXITED 16         /* finished ones kept per context */
#define COMMANDS_STDIN_BUFFER (1 << 20) /* bytes of stdin waiting in sandgate */
#define COMMANDS_BACKLOG (4 << 20)      /* default max_backlog */
#define COMMANDS_MAX_READERS 4          /* readers attached to one command */
#define COMMANDS_EXIT_GRACE_MS 2000     /* after the exit, for pipes held open */

typedef struct commands commands_t; /* every context's commands */
typedef struct command command_t;   /* one command; owned by commands_t */

typedef struct {
    size_t max_backlog; /* bytes of output kept while no reader takes it; 0: COMMANDS_BACKLOG */
} commands_config_t;

/* The registry; cfg copied (NULL: defaults). */
commands_t *commands_new(loop_t *loop, const commands_config_t *cfg);
/* Kills every running command (the daemon stops; their sandboxes may run
 * on) and frees everything; readers get no further callback.  Safe twice. */
void commands_destroy(commands_t **self_p);

typedef enum { COMMAND_STARTING, COMMAND_RUNNING, COMMAND_EXITED } command_state_t;

typedef enum { COMMAND_STDOUT, COMMAND_STDERR } command_stream_t;

/* What to run.  Exactly one of argv and shell. */
typedef struct {
    const char *const *argv; /* argv[0] a path, or a name looked up in the sandbox's PATH */
    const char *shell;       /* or: run /bin/sh -c shell */
    const char *cwd;         /* absolute inside the sandbox, or relative to /home/user;
                                NULL: /home/user */
    const json_t *envs;      /* object of strings: added to the environment (borrowed); NULL */
    int timeout_ms;          /* killed (the whole group) after this long running; 0: never */
    bool stdin_open;         /* stdin is a pipe for command_stdin_write; else at EOF */
    bool background;         /* only reported (command_json): who started it to come back */
    /* sandgate's own (a directory watch, gateway/envd/watch.c): never
     * listed nor found by id or pid; it counts as a command all the same
     * (COMMANDS_MAX_RUNNING, max-queued, no pause while it runs) */
    bool internal;
    /* A terminal (E2B's pty): the command runs on a pseudo-terminal of this
     * size (sandgate-init --pty), its output the terminal's, its input
     * through command_pty_input (stdin is the terminal's); 0: none */
    unsigned pty_rows, pty_cols;
    audit_who_t who; /* for the audit log's command.start and command.end */
} command_opts_t;

/* Starts a command in k's sandbox.  Returns it (borrowed: the registry owns
 * it; hold it only while attached as a reader — until on_exit — or within
 * one loop callback, and look it up again by id otherwise: a finished
 * command is freed when evicted or when its context goes), or NULL with *err:
 * SG_E_INVALID (no or both of argv and shell, a bad cwd or env name, too
 * long), SG_E_CONFLICT (COMMANDS_MAX_RUNNING of k's are running),
 * SG_E_UNAVAILABLE (the kernel is dead).  A paused kernel is resumed, and a
 * starting one awaited, before the process is started; if that fails the
 * command ends with the error (command_error).  Attach a reader at once,
 * before returning to the loop, to miss nothing (a foreground client). */
command_t *commands_start(commands_t *self, kernel_t *k, const command_opts_t *opts,
                          sg_error_t **err);

/* k's command with this id ("7"), or NULL. */
command_t *commands_find(commands_t *self, const kernel_t *k, const char *id);
/* The same by number. */
command_t *commands_find_pid(commands_t *self, const kernel_t *k, uint32_t pid);
/* k's commands, oldest first: the first when prev is NULL, else the one
 * after prev; NULL at the end (finished ones included: command_state). */
command_t *commands_next(commands_t *self, const kernel_t *k, const command_t *prev);
/* k's commands, oldest first, the finished ones only with exited: a JSON
 * array of command_json (new reference). */
json_t *commands_list(commands_t *self, const kernel_t *k, bool exited);

/* --- one command ------------------------------------------------------------------- */

const char *command_id(const command_t *c);
uint32_t command_pid(const command_t *c);
/* Its process id inside the sandbox (sandgate-init --group's, the leader of
 * its process group: E2B's envd gives this one), 0 until it is known; and
 * whether it is known or will not be (the command ended first). */
long command_inner_pid(const command_t *c);
bool command_pid_settled(const command_t *c);
/* k's command whose process id inside is pid, or NULL. */
command_t *commands_find_inner_pid(commands_t *self, const kernel_t *k, long pid);
kernel_t *command_kernel(const command_t *c); /* NULL once its context is gone */
command_state_t command_state(const command_t *c);
/* EXITED: the exit code (see above); else -1. */
int command_exit_code(const command_t *c);
bool command_timed_out(const command_t *c);
/* Why it could not run (borrowed), or NULL. */
const sg_error_t *command_error(const command_t *c);
/* Output bytes dropped while no reader took them. */
uint64_t command_dropped(const command_t *c);
/* {"id", "pid", "cmd" (the shell string, or argv joined by spaces), "argv",
 * "cwd", "state": "starting"|"running"|"exited", "background", "stdin"
 * (open for input), "started_at" (ISO-8601 UTC), and once exited
 * "exit_code", "timed_out", "ended_at", "error" (a message, when it could
 * not run); "dropped_bytes" when any}.  New reference. */
json_t *command_json(const command_t *c);

/* A reader: hears a command's output and its end.  The functions are
 * borrowed (static); arg is the reader's. */
typedef struct {
    /* A chunk of output, in order.  Return false when the reader is full:
     * no more output until it calls command_reader_ready (its chunks are
     * never dropped: the command waits).  NULL: an exit watcher (a wait),
     * which gets no output, leaves the kept output to a reader and never
     * holds the command back. */
    bool (*on_output)(void *arg, command_t *c, command_stream_t which, const char *data, size_t n);
    /* Output was dropped while no reader was attached (before the reader's
     * first live chunk).  Optional. */
    void (*on_dropped)(void *arg, command_t *c, uint64_t bytes);
    /* The command ended (after its last output): command_exit_code,
     * command_timed_out, command_error say how.  The reader is detached
     * after this returns. */
    void (*on_exit)(void *arg, command_t *c);
    /* Its process id inside is known (command_inner_pid), or will not be
     * (command_pid_settled).  Optional; not after on_exit. */
    void (*on_pid)(void *arg, command_t *c);
} command_reader_t;

/* Attaches a reader (at most COMMANDS_MAX_READERS): it gets the kept
 * output first (from inside this call), then the live output, then on_exit.
 * A command that has already ended gives its kept output and on_exit from
 * inside this call, and is not left attached.  Refused when it has its
 * readers already: SG_E_CONFLICT. */
int command_attach(command_t *c, const command_reader_t *r, void *arg, sg_error_t **err);
/* Detaches a reader (its client left); no further callback.  Nothing when
 * it is not attached. */
void command_detach(command_t *c, const command_reader_t *r, void *arg);
/* A reader that returned false from on_output can take more. */
void command_reader_ready(command_t *c, const command_reader_t *r, void *arg);

/* Queues n bytes for the command's stdin; returns how many it took (fewer
 * than n, maybe 0, when COMMANDS_STDIN_BUFFER bytes wait: the writer's
 * callback says when to go on), or -1 with *err: SG_E_CONFLICT when its
 * stdin was not opened or has been closed.  Bytes given after the command
 * stopped reading are taken and dropped.  A terminal's command (pty_rows)
 * takes input through command_pty_input only (SG_E_CONFLICT here). */
ssize_t command_stdin_write(command_t *c, const char *data, size_t n, sg_error_t **err);
/* The one writer of c's stdin (a streamed upload): fn(arg, c, false) when
 * there is room again after a command_stdin_write that took less than it
 * was given, and fn(arg, c, true) once when the command has ended — c must
 * not be used after that.  fn NULL: the writer is done.  SG_E_CONFLICT
 * while another writer is set, or when the command has ended. */
typedef void(command_stdin_fn)(void *arg, command_t *c, bool ended);
int command_stdin_writer(command_t *c, command_stdin_fn *fn, void *arg, sg_error_t **err);
/* Closes its stdin once what waits is written (the command reads EOF).
 * Nothing when it is closed already. */
void command_stdin_close(command_t *c);
/* Bytes waiting for the command's stdin. */
size_t command_stdin_pending(const command_t *c);

/* A terminal's command (pty_rows): bytes typed into it, or its new size
 * (the program gets SIGWINCH).  0, or -1 with *err: SG_E_CONFLICT when it
 * is no terminal or has ended, SG_E_TOO_MANY when COMMANDS_STDIN_BUFFER
 * bytes wait already. */
bool command_pty(const command_t *c);
int command_pty_input(command_t *c, const char *data, size_t n, sg_error_t **err);
int command_pty_resize(command_t *c, unsigned rows, unsigned cols, sg_error_t **err);

/* Sends sig (SIGINT, SIGTERM, SIGHUP or SIGKILL) to the command's whole
 * process group: SG_E_INVALID for another signal, SG_E_CONFLICT when it has
 * ended.  Delivery is asynchronous; one sent while the command is starting
 * is delivered once it runs. */
int command_signal(command_t *c, int sig, sg_error_t **err);
/* The signal named "INT", "SIGTERM", "hup", "9" ...: its number, or 0 for
 * one commands do not take. */
int command_signal_parse(const char *name);

#endif
