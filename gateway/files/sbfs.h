/* sbfs: files anywhere inside a context's sandbox, as its user sees them.
 *
 * files.h serves the workspace from the host; this module serves every
 * other path too (/tmp, /home/user, /etc...), and never from the host: each
 * operation is one `sandgate-init --group --fs OP PATH...` run in the running
 * sandbox by kernel_exec (runsc exec, as the sandbox user), so every path is
 * resolved by gVisor in the sandbox's own file system — a symlink planted
 * by sandboxed code, a '..', /proc/1/root all lead only to what the sandbox
 * itself can reach.  Its stdin, stdout and stderr are pipes watched by the
 * daemon's loop: a file's bytes stream through them both ways (never whole
 * in memory, never on a command line), with backpressure.
 *
 * Paths: absolute ("/tmp/a.csv"), at most SBFS_PATH_MAX bytes, no NUL;
 * anything else is SG_E_INVALID with code "invalid_path" before anything
 * runs.  '..' is allowed: it is resolved inside the sandbox.
 *
 * The context's kernel must be running: a starting kernel is waited for,
 * a paused one resumed first (as an execution does), a dead one fails
 * (SG_E_UNAVAILABLE).  A kernel without isolation (--sandbox none) refuses
 * every operation with SG_E_FORBIDDEN: its "sandbox" would be the host.
 *
 * Entries (stat, list, what write, mkdir and move answer) are JSON objects:
 *   {"name", "path", "type": "file"|"dir"|"symlink"|"other", "size",
 *    "mode": permission bits (0644 as 420), "permissions": "rw-r--r--",
 *    "owner", "group" (names, or numbers as strings), "modified": RFC 3339
 *    UTC, "symlink_target" (symlinks only, not followed)}
 * path is the entry's absolute path as given (no '..' resolved, no symlink
 * followed), name its last component.
 *
 * Errors are sg_error_t: kind for the HTTP status, msg for people, and
 * errnum the errno the operation got inside the sandbox (0 when none);
 * sbfs_error_code() gives the stable name a protocol needs.
 *
 * Every function is asynchronous (never blocks the loop) and returns an
 * operation, or NULL with *err when it could not start (then no callback).
 * The operation is the caller's: sbfs_op_free ends it (no callback after;
 * a command still running is killed, a write not committed stores
 * nothing), before or after its done.
 */
#ifndef SG_SBFS_H
#define SG_SBFS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/loop.h"
#include "kernelmgr/kernel/kernel.h"

#define SBFS_PATH_MAX 4096

typedef struct sbfs_op sbfs_op_t;

typedef struct {
    /* Once.  result (borrowed, valid during the call) as each function
     * says, or err (borrowed) when it failed.  May free op. */
    void (*done)(sbfs_op_t *op, const json_t *result, const sg_error_t *err, void *arg);
    /* Streams only: sbfs_read_pull may give bytes again / sbfs_write_push
     * take some again.  May free op. */
    void (*ready)(sbfs_op_t *op, void *arg);
    void *arg;
} sbfs_cb_t;

/* The stable name of why an operation failed: "not_found",
 * "is_directory", "not_directory", "permission_denied", "not_regular" (a
 * FIFO, a socket, a device: never read), "invalid_path", "exists",
 * "not_empty", "busy", "cross_device", "no_space", "too_large",
 * "unavailable" or "failed"; NULL for NULL. */
const char *sbfs_error_code(const sg_error_t *err);

/* Whether path is one sbfs takes (absolute, not too long, no NUL in its
 * len bytes); SG_E_INVALID naming what is wrong otherwise. */
int sbfs_path_check(const char *path, size_t len, sg_error_t **err);

/* The entry of path; symlinks are not followed (stat a link: "symlink"). */
sbfs_op_t *sbfs_stat(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                     sg_error_t **err);

/* A directory's entries: result {"path", "entries": [entry...],
 * "truncated"?: true}, entries sorted by path; depth 1 is the directory's
 * own entries, 2 theirs as well, and so on (symlinked directories are not
 * entered).  At most SBFS_LIST_MAX entries (then "truncated").
 * not_directory when path is a file. */
#define SBFS_LIST_MAX 10000
sbfs_op_t *sbfs_list(loop_t *loop, kernel_t *k, const char *path, unsigned depth,
                     const sbfs_cb_t *cb, sg_error_t **err);

/* Creates a directory and its missing parents; result its entry.  An
 * existing directory is not an error (exists when a file is in the way).
 * envd: made as E2B's envd makes them, 0755 (else 02770, the sandbox
 * group's: sandgate reaches them from outside too). */
sbfs_op_t *sbfs_mkdir(loop_t *loop, kernel_t *k, const char *path, bool envd, const sbfs_cb_t *cb,
                      sg_error_t **err);

/* Renames from to `to` (rename(2) inside the sandbox: what was at `to` is
 * replaced, a directory only by a directory; missing parents of `to` are
 * created); result the entry at `to`.  Across file systems (/tmp and the
 * workspace) a file or symlink is copied, then removed; a directory is
 * refused (cross_device). */
sbfs_op_t *sbfs_move(loop_t *loop, kernel_t *k, const char *from, const char *to,
                     const sbfs_cb_t *cb, sg_error_t **err);

/* Removes a file, a symlink (not what it points to), or a directory with
 * everything in it (links inside are removed, not followed); result NULL. */
sbfs_op_t *sbfs_remove(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                       sg_error_t **err);

/* Reads a regular file.  done comes once it is open, with its entry (its
 * "size" is exactly how many bytes will come), or why not (is_directory,
 * not_found...).  Then the bytes are pulled: sbfs_read_pull gives up to len
 * of them (> 0), SBFS_AGAIN when none have come yet (ready follows when
 * some have), 0 once all "size" bytes have come, or -1 with *err (the file
 * shrank while it was read, the sandbox went away).  Symlinks are
 * followed, inside the sandbox. */
#define SBFS_AGAIN (-2)
sbfs_op_t *sbfs_read(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                     sg_error_t **err);
ssize_t sbfs_read_pull(sbfs_op_t *op, void *buf, size_t len, sg_error_t **err);

/* Writes a file: bytes pushed are written to a temporary file beside path
 * (missing parents created), renamed onto path by sbfs_write_end, so no
 * reader ever sees half a file and a write that ends otherwise leaves
 * nothing.  The file belongs to the sandbox user, with the mode the
 * kernel's own files get (0660: its umask is 007) or, replacing a file,
 * that file's mode.  sbfs_write_push takes up to n bytes and
 * says how many (0 when the pipe is full: ready follows when it is not), or
 * -1 with *err once the write has failed (over max bytes: too_large, a
 * full /tmp: no_space...; done follows with the error: stop pushing).
 * sbfs_write_end says the data is complete: done follows with the file's
 * entry, or the error.  max: 0 for none. */
sbfs_op_t *sbfs_write(loop_t *loop, kernel_t *k, const char *path, uint64_t max,
                      const sbfs_cb_t *cb, sg_error_t **err);
/* The same, the file getting metadata ({KEY: VALUE}, NULL for none) as its
 * user.e2b.KEY extended attributes (E2B's file metadata, which the file's
 * entry gives back as "metadata"): keys and values printable ASCII, keys
 * without '=', at most 246 bytes each, 4096 together (sbfs_metadata_check).
 * in_place: written as E2B's envd writes, into the file itself (opened with
 * O_TRUNC; what a directory watch sees is envd's), not renamed onto it, a
 * new file 0644 and new parents 0755 as envd's are (else 0660 and 02770,
 * the sandbox group's: sandgate reaches them from outside too). */
sbfs_op_t *sbfs_write_meta(loop_t *loop, kernel_t *k, const char *path, uint64_t max,
                           const json_t *metadata, bool in_place, const sbfs_cb_t *cb,
                           sg_error_t **err);
/* Whether metadata is such a map: 0, or -1 with *err (SG_E_INVALID). */
int sbfs_metadata_check(const json_t *metadata, sg_error_t **err);
ssize_t sbfs_write_push(sbfs_op_t *op, const void *data, size_t n, sg_error_t **err);
void sbfs_write_end(sbfs_op_t *op);

/* Ends op; no callback after.  NULL-safe and safe twice. */
void sbfs_op_free(sbfs_op_t **op_p);

#endif
