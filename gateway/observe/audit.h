/* audit: the audit log — what ran, for whom, when.
 *
 * One JSON object per line (JSON_COMPACT), one line per event, in the file
 * given by --audit-log (or on stderr with "-").  Every line starts with
 *   {"ts": ISO-8601 UTC with milliseconds, "event": NAME, "replica": ID,
 *    "frontend": "rest" | "jupyter" | "mcp" | null, "client": ADDRESS | null, ...}
 * and the event's own fields follow (docs/operations.md lists them).
 *
 * What is never written: the API token (no header and no query string is
 * ever logged: a refused request's path is cut at '?'), file contents,
 * execution output.  Code and shell commands are written whole up to
 * AUDIT_CODE_MAX bytes (then cut, with a marker, and "code_truncated") or,
 * with --audit-code hash, as their SHA-256 only; both with their length
 * ("code_bytes").  Any other string a client chose (a path, a name) is cut
 * at AUDIT_FIELD_MAX bytes, and followed by "KEY_bytes" (its length) and
 * "KEY_truncated": true; a list or object holding such a string gets its
 * strings cut and "KEY_truncated".  A line is never longer than
 * AUDIT_LINE_MAX: one that would be keeps its short fields only, lists the
 * others' names in "dropped" and says "line_bytes" and "line_truncated".
 *
 * A regular file can be rotated by size (audit_rotate_at, --audit-max-size):
 * before a line would take it past the size, PATH becomes PATH.1 (PATH.1
 * PATH.2, and so on up to --audit-keep) and a new PATH is opened.
 *
 * Writing never blocks the loop.  A regular file is written with one
 * write(2) per line on an O_APPEND descriptor (a local file's write does not
 * wait for a reader).  Anything else (stderr, a pipe) gets a bounded queue,
 * AUDIT_QUEUE_MAX bytes, written only when poll(2) says the descriptor can
 * take at least PIPE_BUF bytes, PIPE_BUF bytes at a time, and otherwise when
 * the loop reports it writable; a line that does not fit in the queue is
 * dropped and counted (metrics.audit_dropped, sandgate_audit_dropped_total).
 *
 * One process-wide log, like metrics: the daemon is single-threaded, and
 * every front end and exec.c write into it; an object threaded through
 * each of them would add a parameter to every layer and change nothing.
 * Before audit_open, or without --audit-log, every call does nothing.
 */
#ifndef SG_AUDIT_H
#define SG_AUDIT_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "common/loop.h"

#define AUDIT_CODE_MAX 65536        /* bytes of code or a command written in full mode */
#define AUDIT_QUEUE_MAX (4u << 20)  /* bytes waiting for a slow stderr or pipe reader */
#define AUDIT_CLIENT_MAX 48         /* an IPv4 or IPv6 address as text */
#define AUDIT_FIELD_MAX 4096        /* bytes of any other string written (a path, a name) */
#define AUDIT_LINE_MAX (256u << 10) /* bytes of a whole line, its newline included */

typedef enum {
    AUDIT_CODE_FULL, /* the code, capped at AUDIT_CODE_MAX bytes */
    AUDIT_CODE_HASH, /* its SHA-256 only */
} audit_code_t;

/* Who asked: the front end, and the client's address ("" unknown). */
typedef struct {
    const char *frontend; /* a string literal ("rest", "jupyter", "mcp"), or NULL */
    char client[AUDIT_CLIENT_MAX];
    char tenant[64]; /* the key's tenant; "" when unknown (a refusal) */
} audit_who_t;

/* Opens path ("-": stderr) for appending, creating it 0640.  Call before
 * dropping privileges when the file's directory is root's; the loop comes
 * later (audit_attach).  -1 with *err when it cannot be opened. */
int audit_open(const char *path, audit_code_t mode, sg_error_t **err);
/* Rotation by size from now on: a regular file about to grow past
 * max_size bytes (0: never) is renamed PATH.1, the older ones shifted up to
 * PATH.keep (the oldest dropped), and PATH opened anew.  Renaming needs the
 * directory to be writable by the serving uid; when it is not, the file
 * keeps growing (a warning says so) until a reopen. */
void audit_rotate_at(uint64_t max_size, unsigned keep);
/* The loop that drains the queue (stderr and pipes).  main.c delivers
 * SIGHUP through the same loop and calls audit_reopen. */
void audit_attach(loop_t *loop);
/* Reopens the file by its name: the old one was renamed (logrotate).  The
 * new one is created if missing, which needs the directory to be writable
 * by the serving uid; else logrotate's "create MODE OWNER GROUP" makes it
 * first.  On failure the old descriptor stays in use (-1 with *err).  A
 * no-op for "-". */
int audit_reopen(sg_error_t **err);
/* Writes what is queued if it can without waiting, and closes.  Safe twice. */
void audit_close(void);
bool audit_enabled(void);

/* who from an HTTP connection (the peer's address), or from a socket. */
void audit_who_conn(audit_who_t *who, const char *frontend, struct MHD_Connection *conn);
void audit_who_fd(audit_who_t *who, const char *frontend, int fd);
/* The tenant who acts (NULL: none known). */
void audit_who_set_tenant(audit_who_t *who, const char *tenant);

/* Writes one event: the common fields, then those of fields (stolen; NULL:
 * none). */
void audit_event(const audit_who_t *who, const char *event, json_t *fields);
/* Every event, before it is written (whether or not a log is open): fn
 * sees who, the event's name and its own fields (borrowed, for the call).
 * One tap (gateway/events/); NULL removes it. */
typedef void(audit_tap_fn)(const audit_who_t *who, const char *event, const json_t *fields,
                           void *arg);
void audit_set_tap(audit_tap_fn *fn, void *arg);

/* The two events of an execution, as every front end's executions write
 * them (session/observers.h). */
typedef struct {
    uint64_t id; /* unique in this process: its "execute" and "execution.end" carry it */
    const char *context;
    bool command; /* a shell command ("command"), else code ("execute") */
} audit_exec_t;

/* "execute" or "command": the code — capped at AUDIT_CODE_MAX in full
 * mode, left out in hash mode — its length (code_bytes) and its SHA-256
 * (code_sha256; command_... for a command); n: bytes of code.  extra (stolen,
 * may be NULL) adds fields. */
void audit_execute(const audit_who_t *who, const audit_exec_t *x, const char *language,
                   const char *code, size_t n, json_t *extra);
/* "execution.end": outcome, duration_ms, output_bytes and, when not NULL,
 * error (an exception's name or an error kind); extra as above. */
void audit_execution_end(const audit_who_t *who, const audit_exec_t *x, const char *outcome,
                         int64_t duration_ms, size_t output_bytes, const char *error,
                         json_t *extra);

#endif
