/* internal: what commands.c and input.c share (not for
 * other modules).
 *
 *   commands.c        the registry, contexts, starting, output, the end,
 *                     readers, looking up
 *   input.c  what goes in: stdin and signals
 */
#ifndef SG_COMMANDS_INTERNAL_H
#define SG_COMMANDS_INTERNAL_H

#include "gateway/commands/commands.h"

#define SIGNAL_RETRY_MS 50
#define SIGNAL_RETRIES 200

typedef struct chunk {
    struct chunk *next;
    command_stream_t which;
    size_t n;
    char data[];
} chunk_t;

typedef struct {
    const command_reader_t *r;
    void *arg;
    bool full;
} reader_t;

typedef struct ctx ctx_t;

struct command {
    commands_t *reg;
    ctx_t *ctx;           /* NULL once the context is gone */
    kernel_t *k;          /* NULL once the context is gone */
    char context[64];     /* its id, for the audit log */
    struct command *next; /* in ctx->list, oldest first */
    uint32_t pid;
    char id[12];
    command_state_t state;
    /* what runs */
    char **argv;
    char **env;
    char *shell; /* NULL for an argv */
    char *cwd;
    int timeout_ms;
    bool stdin_open, background, internal;
    unsigned pty_rows, pty_cols; /* a terminal (command_opts_t) */
    audit_who_t who;
    int64_t started_at, ended_at; /* wall clock, ms */
    /* the process */
    uint64_t handle;       /* kernel_exec's; 0 before the launch */
    struct ticket *ticket; /* what kernel_exec calls back with, while it may */
    bool proc_ended;
    int status;
    sg_error_t *err;
    bool timed_out;
    int timeout_timer, grace_timer, signal_timer;
    int pending_signal, signal_tries;
    /* its process id inside the sandbox (input.c's commands_ask_pid) */
    long inner_pid;           /* 0: not known (yet) */
    bool pid_settled;         /* known, or given up on */
    struct ticket *pid_asked; /* a kernel_exec_pid under way */
    int pid_timer, pid_tries;
    int64_t pid_waited; /* ms spent asking for its pid inside */
    bool holds_connection;
    /* its pipes: our ends, -1 when closed */
    int in_fd, out_fd, err_fd;
    loop_io_t *in_io, *out_io, *err_io;
    /* stdin waiting to be written */
    char *in_buf;
    size_t in_len, in_off;
    bool in_accepting, in_closing, in_broken, in_wanted;
    command_stdin_fn *writer;
    void *writer_arg;
    /* output no reader has taken */
    chunk_t *backlog, **backlog_tail;
    size_t backlog_bytes;
    uint64_t dropped, dropped_unreported;
    reader_t readers[COMMANDS_MAX_READERS];
    size_t nreaders;
};

struct ctx {
    commands_t *reg;
    kernel_t *k;
    uint32_t next_pid;
    command_t *list;
    struct ctx *next;
};

struct commands {
    loop_t *loop;
    commands_config_t cfg;
    ctx_t *ctxs;
};

/* kernel_exec's callback argument: outlives a command freed before its
 * process ended (commands_destroy), which nulls c. */
typedef struct ticket {
    command_t *c;
} ticket_t;

/* Asks for c's process id inside its sandbox until it is known (a launch
 * just started it), telling its readers (on_pid) once it is or once it
 * cannot be; commands_pid_forget before c is freed. */
void commands_ask_pid(command_t *c);
void commands_pid_forget(command_t *c);

/* Writes c's waiting stdin when its pipe has room (a loop_fd_fn). */
void commands_stdin_writable(loop_t *loop, int fd, unsigned events, void *arg);

#endif
