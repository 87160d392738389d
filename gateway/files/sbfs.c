/* sbfs: files anywhere inside a context's sandbox (sbfs.h).
 *
 * Each operation is one `/sandgate-init --group --fs OP ARGS...` (kernelmgr/
 * kernelmgr/guest/fs.c, which documents the protocol) run by kernel_exec, with
 * three pipes whose daemon ends are non-blocking and watched by the loop
 * only while something is wanted from them.  A read's bytes go from its
 * stdout straight into the caller's buffer (libmicrohttpd's), a write's from
 * the caller's into its stdin, framed; neither is ever held whole.  The
 * operation outlives its owner while its command runs: sbfs_op_free closes
 * the pipes (which ends the command: a read gets EPIPE, a write sees its
 * input end without the end frame and stores nothing) and the command's
 * end frees it.
 */
#include "gateway/files/sbfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"

#define OUT_MAX (16u << 20)  /* a listing's JSON */
#define ERR_MAX 4096         /* the helper's error line */
#define HEAD_MAX 65536       /* a read's entry line, and the first bytes after it */
#define FRAME_MAX (1u << 20) /* kernelmgr/guest/fs.c's */
#define PIPE_BYTES (1 << 20)

typedef enum { OP_SIMPLE, OP_READ, OP_WRITE } op_kind_t;
enum { IN, OUT, ERR };

struct sbfs_op {
    loop_t *loop;
    op_kind_t kind;
    sbfs_cb_t cb;
    kernel_t *k;    /* while the operation waits for its kernel to run */
    char **argv;    /* owned, until the command starts */
    bool observing; /* k's observer */
    int fd[3];      /* the daemon's ends of stdin, stdout, stderr; -1: closed */
    loop_io_t *io[3];
    bool running; /* the command's end is still to come */
    bool exited;  /* it came (status) */
    int status;   /* -1: it could not run */
    bool eof[3];  /* stdout, stderr read to their end */
    char *out;    /* simple: stdout; read: the entry's line and what followed */
    size_t out_len, out_cap;
    char err[ERR_MAX + 1];
    size_t err_len;
    sg_error_t *fail; /* the daemon's own reason, before the helper's */
    bool reported;    /* done was called */
    bool orphan;      /* its owner freed it while the command ran */
    /* read: the file's bytes left to give; the first of them are in out */
    bool opened;
    uint64_t left;
    size_t pend;
    bool last_waits; /* the last byte waits for the helper's exit (sbfs_read_pull) */
    /* write */
    uint64_t max, taken;
    uint32_t frame_left;
    bool ending; /* sbfs_write_end was called: the end frame goes next */
    bool broken; /* stdin closed without the end frame: nothing is stored */
};

/* --- errors --------------------------------------------------------------------------- */

static const struct {
    int errnum;
    sg_errkind_t kind;
    const char *code;
} codes[] = {
    {ENOENT, SG_E_NOTFOUND, "not_found"},
    {EISDIR, SG_E_CONFLICT, "is_directory"},
    {ENOTDIR, SG_E_CONFLICT, "not_directory"},
    {EACCES, SG_E_FORBIDDEN, "permission_denied"},
    {EPERM, SG_E_FORBIDDEN, "permission_denied"},
    {EROFS, SG_E_FORBIDDEN, "permission_denied"},
    {ENXIO, SG_E_FORBIDDEN, "not_regular"},
    {EEXIST, SG_E_CONFLICT, "exists"},
    {ENOTEMPTY, SG_E_CONFLICT, "not_empty"},
    {EBUSY, SG_E_CONFLICT, "busy"},
    {EXDEV, SG_E_CONFLICT, "cross_device"},
    {ENOSPC, SG_E_LIMIT, "no_space"},
    {EDQUOT, SG_E_LIMIT, "no_space"},
    {EFBIG, SG_E_LIMIT, "too_large"},
    {EINVAL, SG_E_INVALID, "invalid_path"},
    {ENAMETOOLONG, SG_E_INVALID, "invalid_path"},
    {ELOOP, SG_E_INVALID, "invalid_path"},
};

const char *sbfs_error_code(const sg_error_t *err)
{
    if (!err)
        return NULL;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (err->errnum && codes[i].errnum == err->errnum)
            return codes[i].code;
    switch (err->kind) {
    case SG_E_INVALID: return "invalid_path";
    case SG_E_NOTFOUND: return "not_found";
    case SG_E_FORBIDDEN: return "permission_denied";
    case SG_E_LIMIT: return "too_large";
    case SG_E_UNAVAILABLE: return "unavailable";
    default: return "failed";
    }
}

/* An error for errnum: its kind from the table (SG_E_IO for another). */
static int set_errno(sg_error_t **err, int errnum, const char *msg)
{
    sg_errkind_t kind = SG_E_IO;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].errnum == errnum)
            kind = codes[i].kind;
    sg_error_set(err, kind, "%s", msg);
    if (err && *err)
        (*err)->errnum = errnum;
    return -1;
}

int sbfs_path_check(const char *path, size_t len, sg_error_t **err)
{
    const char *why = NULL;
    if (len == 0)
        why = "a path is needed";
    else if (memchr(path, 0, len))
        why = "a path must not contain a NUL byte";
    else if (path[0] != '/')
        why = "the path must be absolute (start with '/'): it is resolved inside the sandbox";
    else if (len > SBFS_PATH_MAX)
        why = "the path is longer than 4096 bytes";
    if (!why)
        return 0;
    return set_errno(err, EINVAL, why);
}

/* --- the command's end ---------------------------------------------------------------- */

static void destroy(sbfs_op_t *op)
{
    for (int i = IN; i <= ERR; i++) {
        loop_io_remove(op->loop, &op->io[i]);
        if (op->fd[i] >= 0)
            close(op->fd[i]);
        op->fd[i] = -1;
    }
    for (char **a = op->argv; a && *a; a++)
        free(*a);
    free(op->argv);
    op->argv = NULL;
    free(op->out);
    op->out = NULL;
    sg_error_free(&op->fail);
    if (!op->running)
        free(op);
}

static void report(sbfs_op_t *op, const json_t *result, const sg_error_t *err)
{
    op->reported = true;
    op->cb.done(op, result, err, op->cb.arg);
}

/* The helper's error line, or why there is none. */
static sg_error_t *helper_error(sbfs_op_t *op)
{
    sg_error_t *err = NULL;
    op->err[op->err_len] = 0;
    json_t *j = json_loads(op->err, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *no = json_object_get(j, "errno"), *msg = json_object_get(j, "message");
    if (json_is_integer(no) && json_is_string(msg))
        set_errno(&err, (int)json_integer_value(no), json_string_value(msg));
    else
        sg_error_set(
            &err, SG_E_UNAVAILABLE, "the file operation in the sandbox failed (%s %d)%s%.200s",
            op->status < 0 ? "not run:" : "status", op->status, op->err_len ? ": " : "", op->err);
    json_decref(j);
    return err;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "path")),
                  json_string_value(json_object_get(*(json_t *const *)b, "path")));
}

/* A listing's entries, sorted by path (the helper gives them as it walks). */
static void sort_entries(json_t *listing)
{
    json_t *entries = json_object_get(listing, "entries");
    size_t n = json_array_size(entries);
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_object_get(json_array_get(entries, i), "path")))
            return; /* not the helper's: left as it is */
    json_t **items = xmalloc((n + 1) * sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(entries, i);
    qsort(items, n, sizeof *items, by_path);
    json_t *sorted = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(sorted, items[i]);
    free(items);
    json_object_set_new(listing, "entries", sorted);
}

/* Once the command has ended and its output is read: done. */
static void maybe_finish(sbfs_op_t *op)
{
    if (op->reported || !op->exited || !op->eof[OUT] || !op->eof[ERR])
        return;
    if (op->fail) {
        report(op, NULL, op->fail);
        return;
    }
    if (op->status != 0 || (op->kind == OP_READ && !op->opened)) {
        sg_error_t *err = helper_error(op);
        report(op, NULL, err);
        sg_error_free(&err);
        return;
    }
    json_t *result = op->out_len ? json_loadb(op->out, op->out_len, 0, NULL) : NULL;
    if (op->out_len && !json_is_object(result)) {
        sg_error_t *err = NULL;
        sg_error_set(&err, SG_E_UNAVAILABLE, "the file operation in the sandbox gave no answer");
        report(op, NULL, err);
        sg_error_free(&err);
    } else {
        if (json_object_get(result, "entries"))
            sort_entries(result);
        report(op, result, NULL);
    }
    json_decref(result);
}

static void on_exit_status(int status, const sg_error_t *err, void *arg)
{
    sbfs_op_t *op = arg;
    op->running = false;
    op->exited = true;
    op->status = err ? -1 : status;
    if (err && !op->fail)
        sg_error_set(&op->fail, SG_E_UNAVAILABLE, "%s", err->msg);
    if (op->orphan) {
        free(op); /* destroyed by sbfs_op_free already */
        return;
    }
    if (op->last_waits) { /* the puller takes the last byte now */
        op->last_waits = false;
        op->running = true; /* so that a free on the way leaves op to this function */
        op->cb.ready(op, op->cb.arg);
        op->running = false;
        if (op->orphan) {
            free(op);
            return;
        }
    }
    maybe_finish(op);
}

/* --- the pipes -------------------------------------------------------------------------- */

static void close_end(sbfs_op_t *op, int i)
{
    loop_io_remove(op->loop, &op->io[i]);
    if (op->fd[i] >= 0)
        close(op->fd[i]);
    op->fd[i] = -1;
    if (i != IN)
        op->eof[i] = true;
}

static void watch(sbfs_op_t *op, int i, unsigned events, loop_fd_fn *fn)
{
    if (op->io[i] || op->fd[i] < 0)
        return;
    sg_error_t *err = NULL;
    op->io[i] = loop_fd_add(op->loop, op->fd[i], events, fn, op, &err);
    if (!op->io[i]) { /* cannot happen with a valid pipe; the operation fails */
        if (!op->fail)
            op->fail = err;
        else
            sg_error_free(&err);
        close_end(op, i);
    }
}

/* The read's entry line has come: the file is open. */
static void read_opened(sbfs_op_t *op, char *nl)
{
    json_t *entry = json_loadb(op->out, (size_t)(nl - op->out), 0, NULL);
    json_t *size = json_object_get(entry, "size");
    if (!json_is_integer(size) || json_integer_value(size) < 0) {
        sg_error_set(&op->fail, SG_E_UNAVAILABLE, "the read in the sandbox gave no entry");
        close_end(op, OUT);
        json_decref(entry);
        maybe_finish(op);
        return;
    }
    op->opened = true;
    op->left = (uint64_t)json_integer_value(size);
    op->pend = (size_t)(nl + 1 - op->out);
    loop_io_remove(op->loop, &op->io[OUT]); /* the puller reads from now on */
    report(op, entry, NULL);
    json_decref(entry);
}

static void on_out(loop_t *loop, int fd, unsigned events, void *arg)
{
    sbfs_op_t *op = arg;
    if (op->opened) { /* a pull found nothing: there may be bytes now */
        loop_io_remove(op->loop, &op->io[OUT]);
        op->cb.ready(op, op->cb.arg);
        return;
    }
    size_t cap = op->kind == OP_READ ? HEAD_MAX : OUT_MAX;
    for (;;) {
        if (op->out_len == cap) {
            sg_error_set(&op->fail, SG_E_LIMIT, "the answer from the sandbox is over %zu bytes",
                         cap);
            close_end(op, OUT);
            break;
        }
        if (op->out_cap - op->out_len < 65536 && op->out_cap < cap) {
            op->out_cap = op->out_cap ? op->out_cap * 2 : 65536;
            op->out_cap = op->out_cap > cap ? cap : op->out_cap;
            op->out = xrealloc(op->out, op->out_cap);
        }
        ssize_t n = read(fd, op->out + op->out_len, op->out_cap - op->out_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close_end(op, OUT);
            break;
        }
        op->out_len += (size_t)n;
        char *nl = op->kind == OP_READ ? memchr(op->out, '\n', op->out_len) : NULL;
        if (nl) {
            read_opened(op, nl); /* may free op */
            return;
        }
    }
    maybe_finish(op);
}

static void on_err(loop_t *loop, int fd, unsigned events, void *arg)
{
    sbfs_op_t *op = arg;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        size_t keep = n > 0 && op->err_len < ERR_MAX ? ERR_MAX - op->err_len : 0;
        keep = keep < (size_t)(n > 0 ? n : 0) ? keep : (size_t)(n > 0 ? n : 0);
        memcpy(op->err + op->err_len, buf, keep);
        op->err_len += keep;
    }
    if (n < 0 && errno == EAGAIN)
        return;
    close_end(op, ERR);
    maybe_finish(op);
}

static void flush_end(sbfs_op_t *op);

static void on_in(loop_t *loop, int fd, unsigned events, void *arg)
{
    sbfs_op_t *op = arg;
    loop_io_remove(op->loop, &op->io[IN]);
    if (op->ending)
        flush_end(op);
    else
        op->cb.ready(op, op->cb.arg);
}

/* --- starting ----------------------------------------------------------------------------- */

static int pipes(int in[2], int out[2], int er[2])
{
    in[0] = in[1] = out[0] = out[1] = er[0] = er[1] = -1;
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0)
        return -1;
    /* A bigger pipe: fewer wake-ups per MiB (each costs gVisor a syscall or two). */
    fcntl(in[1], F_SETPIPE_SZ, PIPE_BYTES);
    fcntl(out[0], F_SETPIPE_SZ, PIPE_BYTES);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(er[0], F_SETFL, O_NONBLOCK);
    return 0;
}

static void close_all(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Runs the command in k's (running) sandbox. */
static int run(sbfs_op_t *op, kernel_t *k, sg_error_t **err)
{
    int in[2], out[2], er[2];
    if (pipes(in, out, er) < 0) {
        int e = errno;
        close_all((int[]){in[0], in[1], out[0], out[1], er[0], er[1]}, 6);
        return sg_error_errno(err, e, "pipes for a file operation");
    }
    const int fds[3] = {in[0], out[1], er[1]};
    sandbox_exec_t x = {.argv = (const char *const *)op->argv};
    op->running = kernel_exec(k, &x, fds, on_exit_status, op, err) != 0;
    close_all((int[]){in[0], out[1], er[1]}, 3);
    op->fd[IN] = in[1];
    op->fd[OUT] = out[0];
    op->fd[ERR] = er[0];
    if (!op->running)
        return -1;
    if (op->kind != OP_WRITE)
        close_end(op, IN);
    else
        watch(op, IN, LOOP_WRITE, on_in); /* ready (or the end frame) when it can take bytes */
    watch(op, OUT, LOOP_READ, on_out);
    watch(op, ERR, LOOP_READ, on_err);
    return 0;
}

static void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *kerr, void *arg);

/* Runs op now if its kernel runs, else waits for it (resuming a paused
 * one).  0, or -1 with *err. */
static int try_run(sbfs_op_t *op, kernel_t *k, sg_error_t **err)
{
    switch (kernel_state(k)) {
    case KERNEL_IDLE:
    case KERNEL_BUSY:
        if (op->observing)
            kernel_unobserve(k, on_kernel_event, op);
        op->observing = false;
        op->k = NULL;
        return run(op, k, err);
    case KERNEL_DEAD:
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "context %s's kernel is dead; restart the context to use its files",
                            kernel_id(k));
    case KERNEL_PAUSED:
        if (kernel_resume(k, err) < 0)
            return -1;
        break;
    default: break;
    }
    if (!op->observing)
        kernel_observe(k, on_kernel_event, op);
    op->observing = true;
    op->k = k;
    return 0;
}

static void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *kerr, void *arg)
{
    sbfs_op_t *op = arg;
    sg_error_t *err = NULL;
    if (ev == KERNEL_EV_GONE || ev == KERNEL_EV_DEAD)
        sg_error_set(&err, SG_E_UNAVAILABLE, "context %s's kernel %s before the file operation",
                     kernel_id(k), ev == KERNEL_EV_GONE ? "went away" : "died");
    else if (ev == KERNEL_EV_READY || ev == KERNEL_EV_PAUSED)
        try_run(op, k, &err);
    else if (ev == KERNEL_EV_NOT_RESUMED)
        sg_error_set(&err, kerr->kind, "%s", kerr->msg);
    if (!err)
        return;
    if (op->observing)
        kernel_unobserve(k, on_kernel_event, op);
    op->observing = false;
    op->k = NULL;
    report(op, NULL, err);
    sg_error_free(&err);
}

static sbfs_op_t *start(loop_t *loop, kernel_t *k, op_kind_t kind, const char *const *args,
                        const sbfs_cb_t *cb, sg_error_t **err)
{
    if (!kernel_isolated(k)) {
        sg_error_set(err, SG_E_FORBIDDEN,
                     "context %s has no sandbox (--sandbox none): an absolute path would be the "
                     "host's; use a workspace-relative path",
                     kernel_id(k));
        return NULL;
    }
    size_t n = 0;
    while (args[n])
        n++;
    sbfs_op_t *op = xzalloc(sizeof *op);
    *op = (sbfs_op_t){.loop = loop, .kind = kind, .cb = *cb, .fd = {-1, -1, -1}};
    /* sandbox_exec runs `/sandgate-init --group ARGV`; with ARGV `--fs OP
     * ...` that init does the operation itself (kernelmgr/guest/init.c). */
    op->argv = xzalloc((n + 2) * sizeof *op->argv);
    op->argv[0] = xstrdup("--fs");
    for (size_t i = 0; i < n; i++)
        op->argv[i + 1] = xstrdup(args[i]);
    if (try_run(op, k, err) < 0) {
        op->running = false;
        destroy(op);
        return NULL;
    }
    return op;
}

static bool paths_ok(const char *a, const char *b, sg_error_t **err)
{
    return sbfs_path_check(a, strlen(a), err) == 0 &&
           (!b || sbfs_path_check(b, strlen(b), err) == 0);
}

/* --- the operations ----------------------------------------------------------------------- */

sbfs_op_t *sbfs_stat(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                     sg_error_t **err)
{
    if (!paths_ok(path, NULL, err))
        return NULL;
    return start(loop, k, OP_SIMPLE, (const char *[]){"stat", path, NULL}, cb, err);
}

sbfs_op_t *sbfs_list(loop_t *loop, kernel_t *k, const char *path, unsigned depth,
                     const sbfs_cb_t *cb, sg_error_t **err)
{
    if (!paths_ok(path, NULL, err))
        return NULL;
    if (depth < 1 || depth > 64) {
        sg_error_set(err, SG_E_INVALID, "a listing's depth is 1 to 64");
        return NULL;
    }
    char d[16];
    snprintf(d, sizeof d, "%u", depth);
    return start(loop, k, OP_SIMPLE, (const char *[]){"list", path, d, NULL}, cb, err);
}

sbfs_op_t *sbfs_mkdir(loop_t *loop, kernel_t *k, const char *path, bool envd, const sbfs_cb_t *cb,
                      sg_error_t **err)
{
    if (!paths_ok(path, NULL, err))
        return NULL;
    return start(loop, k, OP_SIMPLE, (const char *[]){envd ? "envd-mkdir" : "mkdir", path, NULL},
                 cb, err);
}

sbfs_op_t *sbfs_move(loop_t *loop, kernel_t *k, const char *from, const char *to,
                     const sbfs_cb_t *cb, sg_error_t **err)
{
    if (!paths_ok(from, to, err))
        return NULL;
    return start(loop, k, OP_SIMPLE, (const char *[]){"move", from, to, NULL}, cb, err);
}

sbfs_op_t *sbfs_remove(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                       sg_error_t **err)
{
    if (!paths_ok(path, NULL, err))
        return NULL;
    return start(loop, k, OP_SIMPLE, (const char *[]){"remove", path, NULL}, cb, err);
}

sbfs_op_t *sbfs_read(loop_t *loop, kernel_t *k, const char *path, const sbfs_cb_t *cb,
                     sg_error_t **err)
{
    if (!paths_ok(path, NULL, err))
        return NULL;
    return start(loop, k, OP_READ, (const char *[]){"read", path, NULL}, cb, err);
}

ssize_t sbfs_read_pull(sbfs_op_t *op, void *buf, size_t len, sg_error_t **err)
{
    if (!op->opened || op->left == 0)
        return op->opened ? 0 : SBFS_AGAIN;
    len = len < op->left ? len : (size_t)op->left;
    /* The last byte waits for the helper to have exited, so that a client
     * holding the whole file finds no file operation still running in the
     * sandbox (a pause right after a download was refused for it). */
    if (!op->exited && len == op->left && --len == 0) {
        op->last_waits = true;
        return SBFS_AGAIN;
    }
    if (op->pend < op->out_len) {
        size_t n = op->out_len - op->pend < len ? op->out_len - op->pend : len;
        memcpy(buf, op->out + op->pend, n);
        op->pend += n;
        op->left -= n;
        return (ssize_t)n;
    }
    ssize_t n = op->fd[OUT] >= 0 ? read(op->fd[OUT], buf, len) : 0;
    if (n > 0) {
        op->left -= (uint64_t)n;
        return n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        watch(op, OUT, LOOP_READ, on_out);
        return SBFS_AGAIN;
    }
    if (n < 0)
        return sg_error_errno(err, errno, "reading a file from the sandbox");
    return sg_error_set(err, SG_E_IO,
                        "the file ended %llu bytes early (it shrank while it was read, or the "
                        "sandbox went away)",
                        (unsigned long long)op->left);
}

sbfs_op_t *sbfs_write(loop_t *loop, kernel_t *k, const char *path, uint64_t max,
                      const sbfs_cb_t *cb, sg_error_t **err)
{
    return sbfs_write_meta(loop, k, path, max, NULL, false, cb, err);
}

#define META_KEY_MAX 246 /* the VFS's 255 for a name, less "user.e2b." */
#define META_MAX 4096

static bool printable(const char *s, bool key)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e || (key && *s == '='))
            return false;
    return true;
}

int sbfs_metadata_check(const json_t *metadata, sg_error_t **err)
{
    const char *key;
    json_t *v;
    size_t total = 0;
    json_object_foreach ((json_t *)metadata, key, v) {
        const char *s = json_string_value(v);
        if (!*key || !printable(key, true) || strlen(key) > META_KEY_MAX)
            return sg_error_set(err, SG_E_INVALID,
                                "metadata key '%.64s': printable ASCII without '=', 1 to %d bytes",
                                key, META_KEY_MAX);
        if (!s || !printable(s, false))
            return sg_error_set(err, SG_E_INVALID, "metadata value of '%.64s': printable ASCII",
                                key);
        total += strlen("user.e2b.") + strlen(key) + strlen(s);
    }
    if (total > META_MAX)
        return sg_error_set(err, SG_E_INVALID,
                            "metadata: %zu bytes, more than a file holds (%d, keys with their "
                            "prefix user.e2b. and values)",
                            total, META_MAX);
    return 0;
}

sbfs_op_t *sbfs_write_meta(loop_t *loop, kernel_t *k, const char *path, uint64_t max,
                           const json_t *metadata, bool in_place, const sbfs_cb_t *cb,
                           sg_error_t **err)
{
    if (!paths_ok(path, NULL, err) || (metadata && sbfs_metadata_check(metadata, err) < 0))
        return NULL;
    cleanup_free char *lines = NULL; /* KEY=VALUE lines, for the helper */
    size_t len = 0;
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)metadata, key, v) {
        const char *s = json_string_value(v);
        lines = xrealloc(lines, len + strlen(key) + strlen(s) + 3);
        len += (size_t)sprintf(lines + len, "%s%s=%s", len ? "\n" : "", key, s);
    }
    const char *how = in_place ? "overwrite" : "write";
    sbfs_op_t *op = start(loop, k, OP_WRITE, (const char *[]){how, path, lines, NULL}, cb, err);
    if (op)
        op->max = max;
    return op;
}

/* The write cannot go on: its stdin closes without the end frame, so the
 * helper stores nothing; done follows with why (the helper's reason when
 * it stopped reading first). */
static ssize_t write_broken(sbfs_op_t *op, sg_error_t **err)
{
    close_end(op, IN);
    op->broken = true;
    return sg_error_set(err, op->fail ? op->fail->kind : SG_E_IO, "%s",
                        op->fail ? op->fail->msg : "the write in the sandbox stopped");
}

ssize_t sbfs_write_push(sbfs_op_t *op, const void *data, size_t n, sg_error_t **err)
{
    if (op->broken || op->fail || op->ending || op->exited)
        return write_broken(op, err);
    if (op->fd[IN] < 0)
        return 0; /* not started yet: ready comes when it runs */
    if (op->max && op->taken + n > op->max) {
        sg_error_set(&op->fail, SG_E_LIMIT, "the file is larger than %llu bytes (--max-upload)",
                     (unsigned long long)op->max);
        op->fail->errnum = EFBIG;
        return write_broken(op, err);
    }
    size_t done = 0;
    while (done < n) {
        if (op->frame_left == 0) {
            size_t f = n - done < FRAME_MAX ? n - done : FRAME_MAX;
            unsigned char h[4] = {f & 0xff, (f >> 8) & 0xff, (f >> 16) & 0xff, f >> 24};
            ssize_t w = write(op->fd[IN], h, 4); /* a pipe takes 4 bytes whole or not at all */
            if (w < 0 && errno == EAGAIN)
                break;
            if (w != 4)
                return write_broken(op, err);
            op->frame_left = (uint32_t)f;
        }
        size_t want = n - done < op->frame_left ? n - done : op->frame_left;
        ssize_t w = write(op->fd[IN], (const char *)data + done, want);
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0)
            return write_broken(op, err);
        done += (size_t)w;
        op->frame_left -= (uint32_t)w;
        op->taken += (uint64_t)w;
    }
    if (done < n)
        watch(op, IN, LOOP_WRITE, on_in);
    return (ssize_t)done;
}

/* The end frame, once the pipe takes it; then stdin closes. */
static void flush_end(sbfs_op_t *op)
{
    if (op->fd[IN] < 0)
        return;               /* not started (run watches stdin: on_in comes here), or broken */
    if (op->frame_left > 0) { /* a frame promised bytes that never came: store nothing */
        close_end(op, IN);
        return;
    }
    static const unsigned char end[4] = {0};
    ssize_t w = write(op->fd[IN], end, 4);
    if (w < 0 && errno == EAGAIN) {
        watch(op, IN, LOOP_WRITE, on_in);
        return;
    }
    close_end(op, IN);
}

void sbfs_write_end(sbfs_op_t *op)
{
    op->ending = true;
    flush_end(op);
}

void sbfs_op_free(sbfs_op_t **op_p)
{
    sbfs_op_t *op = *op_p;
    if (!op)
        return;
    *op_p = NULL;
    if (op->observing)
        kernel_unobserve(op->k, on_kernel_event, op);
    op->observing = false;
    op->orphan = op->running;
    destroy(op);
}
