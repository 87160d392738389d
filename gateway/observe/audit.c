#include "gateway/observe/audit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include "gateway/observe/metrics.h"

static struct {
    int fd; /* -1: no audit log */
    char *path;
    bool queued; /* not a regular file: lines go through the queue */
    audit_code_t mode;
    loop_t *loop;
    loop_io_t *io; /* watching fd for room, while the queue is not empty */
    char *q;       /* bytes not written yet: q[off..len) */
    size_t off, len, cap;
    bool warned;        /* a failed write was logged (once per descriptor) */
    uint64_t size;      /* the file's size, while rotating by size */
    uint64_t max_size;  /* --audit-max-size; 0: no rotation by size */
    unsigned keep;      /* --audit-keep: PATH.1 ... PATH.keep */
    bool rotate_failed; /* a rotation failed: none more until a reopen */
} A = {.fd = -1, .keep = 1};

static int open_path(const char *path, bool *queued, uint64_t *size, sg_error_t **err)
{
    int fd = strcmp(path, "-") == 0
                 ? fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)
                 : open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0)
        return sg_error_errno(err, errno, "cannot open the audit log %s",
                              strcmp(path, "-") == 0 ? "(stderr)" : path);
    struct stat st;
    *queued = fstat(fd, &st) < 0 || !S_ISREG(st.st_mode);
    *size = *queued ? 0 : (uint64_t)st.st_size;
    return fd;
}

int audit_open(const char *path, audit_code_t mode, sg_error_t **err)
{
    audit_close();
    bool queued;
    uint64_t size;
    int fd = open_path(path, &queued, &size, err);
    if (fd < 0)
        return -1;
    A.fd = fd;
    A.queued = queued;
    A.size = size;
    A.rotate_failed = false;
    A.path = xstrdup(path);
    A.mode = mode;
    A.warned = false;
    return 0;
}

void audit_rotate_at(uint64_t max_size, unsigned keep)
{
    A.max_size = max_size;
    A.keep = keep ? keep : 1;
}

void audit_attach(loop_t *loop)
{
    A.loop = loop;
}

bool audit_enabled(void)
{
    return A.fd >= 0;
}

static void watch(bool on);

/* Writes queued bytes while the descriptor takes them without waiting: a
 * pipe that polls writable has room for PIPE_BUF bytes, so a write of at
 * most that much completes at once even on a blocking descriptor (stderr is
 * shared with the daemon's log and others: it is not made O_NONBLOCK). */
static void drain(void)
{
    while (A.off < A.len) {
        struct pollfd p = {.fd = A.fd, .events = POLLOUT};
        if (poll(&p, 1, 0) <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) ||
            !(p.revents & POLLOUT)) {
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
                break; /* nobody reads: what is queued is lost */
            watch(true);
            return;
        }
        size_t n = A.len - A.off < PIPE_BUF ? A.len - A.off : PIPE_BUF;
        ssize_t w = write(A.fd, A.q + A.off, n);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            watch(true);
            return;
        }
        if (w <= 0)
            break;
        A.off += (size_t)w;
    }
    if (A.off < A.len) { /* the reader is gone: count the lines lost */
        for (size_t i = A.off; i < A.len; i++)
            metrics.audit_dropped += A.q[i] == '\n';
        if (!A.warned)
            log_warn("audit: the audit log cannot be written (its reader is gone?); lines are "
                     "dropped and counted in sandgate_audit_dropped_total");
        A.warned = true;
    }
    A.off = A.len = 0;
    watch(false);
}

static void on_writable(loop_t *loop, int fd, unsigned events, void *arg)
{
    drain();
}

static void watch(bool on)
{
    if (!A.loop || on == (A.io != NULL))
        return;
    if (on)
        A.io = loop_fd_add(A.loop, A.fd, LOOP_WRITE, on_writable, NULL, NULL);
    else
        loop_io_remove(A.loop, &A.io);
}

/* PATH.keep-1 to PATH.keep ... PATH to PATH.1, and a new PATH: as
 * logrotate would, by the serving uid, which needs the directory to be
 * writable.  What cannot be renamed or opened leaves the current file in
 * use, with a warning, and no further rotation until a reopen (SIGHUP). */
static void rotate(void)
{
    char *from = NULL, *to = NULL;
    int e = 0;
    for (unsigned i = A.keep; i >= 1 && e == 0; i--) {
        from = i == 1 ? xstrdup(A.path) : xasprintf("%s.%u", A.path, i - 1);
        to = xasprintf("%s.%u", A.path, i);
        if (rename(from, to) < 0 && (errno != ENOENT || i == 1))
            e = errno;
        free(from);
        free(to);
    }
    bool queued;
    uint64_t size;
    sg_error_t *err = NULL;
    int fd = e ? -1 : open_path(A.path, &queued, &size, &err);
    if (fd < 0) {
        log_warn("audit: cannot rotate the audit log %s at %llu bytes: %s; it keeps growing until "
                 "a SIGHUP reopens it",
                 A.path, (unsigned long long)A.max_size, err ? err->msg : strerror(e));
        sg_error_free(&err);
        A.rotate_failed = true;
        return;
    }
    close(A.fd);
    A.fd = fd;
    A.queued = queued;
    A.size = size;
    A.warned = false;
    log_info("audit: the audit log %s reached %llu bytes; the old one is %s.1", A.path,
             (unsigned long long)A.max_size, A.path);
}

static void write_line(const char *line, size_t n)
{
    if (!A.queued && A.max_size && !A.rotate_failed && A.size > 0 && A.size + n > A.max_size)
        rotate();
    if (!A.queued) {
        /* One write per line on O_APPEND: whole lines, even with another
         * writer.  A local file does not make it wait. */
        ssize_t w = write(A.fd, line, n);
        if (w > 0)
            A.size += (uint64_t)w;
        if (w != (ssize_t)n) {
            metrics.audit_dropped++;
            if (!A.warned)
                log_warn("audit: cannot write the audit log %s: %s; lines are dropped and "
                         "counted in sandgate_audit_dropped_total",
                         A.path, w < 0 ? strerror(errno) : "short write");
            A.warned = true;
        }
        return;
    }
    if (A.len - A.off + n > AUDIT_QUEUE_MAX) {
        metrics.audit_dropped++;
        return;
    }
    if (A.off > 0 && A.len + n > A.cap) { /* reuse the room already written */
        memmove(A.q, A.q + A.off, A.len - A.off);
        A.len -= A.off;
        A.off = 0;
    }
    if (A.len + n > A.cap) {
        A.cap = A.len + n > 2 * A.cap ? A.len + n : 2 * A.cap;
        A.q = xrealloc(A.q, A.cap);
    }
    memcpy(A.q + A.len, line, n);
    A.len += n;
    if (A.io == NULL) /* else the loop says when there is room */
        drain();
}

int audit_reopen(sg_error_t **err)
{
    if (A.fd < 0 || strcmp(A.path, "-") == 0)
        return 0;
    bool queued;
    uint64_t size;
    int fd = open_path(A.path, &queued, &size, err);
    if (fd < 0)
        return sg_error_prefix(err, "the old file stays in use");
    if (A.queued && A.off < A.len) { /* what waits goes to the old file's reader */
        watch(false);
        drain();
    }
    watch(false);
    A.off = A.len = 0;
    close(A.fd);
    A.fd = fd;
    A.queued = queued;
    A.size = size;
    A.warned = false;
    A.rotate_failed = false;
    return 0;
}

void audit_close(void)
{
    if (A.fd < 0)
        return;
    if (A.queued && A.off < A.len) {
        watch(false);
        drain(); /* what can go without waiting; the rest is lost */
    }
    watch(false);
    close(A.fd);
    A.fd = -1;
    free(A.path);
    free(A.q);
    A.path = A.q = NULL;
    A.off = A.len = A.cap = 0;
}

static void address(const struct sockaddr *sa, char out[AUDIT_CLIENT_MAX])
{
    out[0] = 0;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, AUDIT_CLIENT_MAX);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, AUDIT_CLIENT_MAX);
}

void audit_who_conn(audit_who_t *who, const char *frontend, struct MHD_Connection *conn)
{
    who->frontend = frontend;
    who->client[0] = 0;
    who->tenant[0] = 0;
    if (A.fd < 0 || conn == NULL)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    address(ci ? ci->client_addr : NULL, who->client);
}

void audit_who_fd(audit_who_t *who, const char *frontend, int fd)
{
    who->frontend = frontend;
    who->client[0] = 0;
    who->tenant[0] = 0;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (A.fd >= 0 && getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
        address((struct sockaddr *)&ss, who->client);
}

void audit_who_set_tenant(audit_who_t *who, const char *tenant)
{
    snprintf(who->tenant, sizeof who->tenant, "%s", tenant ? tenant : "");
}

/* Whether some string in v, at any depth, is longer than AUDIT_FIELD_MAX. */
static bool has_long_string(json_t *v)
{
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_string(v))
        return json_string_length(v) > AUDIT_FIELD_MAX;
    if (json_is_array(v)) {
        json_array_foreach (v, i, x) {
            if (has_long_string(x))
                return true;
        }
    } else if (json_is_object(v)) {
        json_object_foreach (v, k, x) {
            if (has_long_string(x))
                return true;
        }
    }
    return false;
}

/* The string s cut to AUDIT_FIELD_MAX bytes, at a character's start. */
static json_t *cut_string(json_t *s)
{
    const char *text = json_string_value(s);
    return json_stringn(text, utf8_cut(text, json_string_length(s), AUDIT_FIELD_MAX));
}

/* v, which is this line's own (a deep copy), with its strings cut. */
static void cut_strings(json_t *v)
{
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v)) {
        json_array_foreach (v, i, x) {
            if (json_is_string(x))
                json_array_set_new(v, i, cut_string(x));
            else
                cut_strings(x);
        }
    } else if (json_is_object(v)) {
        json_object_foreach (v, k, x) {
            if (json_is_string(x))
                json_object_set_new(v, k, cut_string(x));
            else
                cut_strings(x);
        }
    }
}

/* Every field of line (but exempt's, already capped) within AUDIT_FIELD_MAX:
 * a longer string is cut, and "KEY_bytes" (its length) and "KEY_truncated"
 * (true) follow it; an array or object holding one gets its strings cut and
 * "KEY_truncated".  Values may be shared with the caller's objects (s:O):
 * they are replaced, never changed. */
static void bound_fields(json_t *line, const char *exempt)
{
    json_t *cut = json_object();
    const char *key;
    json_t *v;
    json_object_foreach (line, key, v) {
        if ((exempt && strcmp(key, exempt) == 0) || !has_long_string(v))
            continue;
        json_t *copy = json_is_string(v) ? cut_string(v) : json_deep_copy(v);
        cut_strings(copy);
        json_object_set_new(cut, key, copy);
    }
    json_object_foreach (cut, key, v) {
        json_t *old = json_object_get(line, key);
        if (json_is_string(old)) {
            cleanup_free char *nkey = xasprintf("%s_bytes", key);
            json_object_set_new(line, nkey, json_integer((json_int_t)json_string_length(old)));
        }
        cleanup_free char *tkey = xasprintf("%s_truncated", key);
        json_object_set(line, key, v); /* old is freed here */
        json_object_set_new(line, tkey, json_true());
    }
    json_decref(cut);
}

/* The fields of a line that came out longer than AUDIT_LINE_MAX (code of
 * 64 KiB that JSON escapes to six times as much, a list of thousands of
 * names): the short ones are kept in order, the others' names listed in
 * "dropped", with the line's length ("line_bytes") and "line_truncated". */
#define AUDIT_KEPT_MAX 1024 /* bytes of one field kept in such a line */

static char *shortened(json_t *line, size_t len)
{
    json_t *out = json_object();
    json_t *dropped = json_array();
    size_t total = 0;
    const char *key;
    json_t *v;
    json_object_foreach (line, key, v) {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        size_t n = text ? strlen(text) + strlen(key) + 4 : SIZE_MAX;
        free(text);
        if (n <= AUDIT_KEPT_MAX && total + n < AUDIT_LINE_MAX / 2) {
            json_object_set(out, key, v);
            total += n;
        } else if (total + strlen(key) + 4 < AUDIT_LINE_MAX / 2) {
            json_array_append_new(dropped, json_string(key));
            total += strlen(key) + 4;
        }
    }
    json_object_set_new(out, "dropped", dropped);
    json_object_set_new(out, "line_bytes", json_integer((json_int_t)len));
    json_object_set_new(out, "line_truncated", json_true());
    char *text = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    return text;
}

/* audit_event, but exempt's field (the code, capped by set_code) is left
 * as it is. */
static audit_tap_fn *tap;
static void *tap_arg;

void audit_set_tap(audit_tap_fn *fn, void *arg)
{
    tap = fn;
    tap_arg = arg;
}

static void emit(const audit_who_t *who, const char *event, json_t *fields, const char *exempt)
{
    if (tap)
        tap(who, event, fields, tap_arg);
    if (A.fd < 0) {
        json_decref(fields);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000);
    const char *frontend = who ? who->frontend : NULL;
    const char *client = who && who->client[0] ? who->client : NULL;
    json_t *line = json_pack("{s:s, s:s, s:s, s:s?, s:s?}", "ts", when, "event", event, "replica",
                             replica_id(), "frontend", frontend, "client", client);
    if (!frontend) /* present, so every line has the same keys first */
        json_object_set_new(line, "frontend", json_null());
    if (!client)
        json_object_set_new(line, "client", json_null());
    /* Every line names the tenant who acted; null for sandgate's own acts
     * and for requests refused before a key was known. */
    json_object_set_new(line, "tenant",
                        who && who->tenant[0] ? json_string(who->tenant) : json_null());
    if (fields)
        json_object_update(line, fields);
    json_decref(fields);
    bound_fields(line, exempt);
    char *text = json_dumps(line, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    if (text && len + 1 > AUDIT_LINE_MAX) {
        free(text);
        text = shortened(line, len);
        len = text ? strlen(text) : 0;
    }
    json_decref(line);
    if (text == NULL) { /* a programmer's error: a string that is not UTF-8 */
        log_error("audit: an '%s' event could not be encoded", event);
        metrics.audit_dropped++;
        return;
    }
    text[len] = '\n'; /* json_dumps' NUL becomes the line's end */
    write_line(text, len + 1);
    free(text);
}

void audit_event(const audit_who_t *who, const char *event, json_t *fields)
{
    emit(who, event, fields, NULL);
}

static void set_code(json_t *fields, const char *key, const char *code, size_t n)
{
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * sizeof h + 1];
    crypto_hash_sha256(h, (const unsigned char *)code, n);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    cleanup_free char *hkey = xasprintf("%s_sha256", key);
    cleanup_free char *nkey = xasprintf("%s_bytes", key);
    if (A.mode == AUDIT_CODE_FULL) {
        size_t keep = utf8_cut(code, n, AUDIT_CODE_MAX);
        json_t *text = json_stringn(code, keep);
        if (text == NULL) { /* not UTF-8 (a Jupyter frontend's bytes): scrubbed */
            char *copy = xstrndup(code, keep);
            utf8_scrub(copy);
            text = json_string(copy);
            free(copy);
        }
        if (keep < n) {
            cleanup_free char *cut = xasprintf(
                "%s\n[sandgate: audit log keeps the first %d bytes; %zu more not written]",
                json_string_value(text), AUDIT_CODE_MAX, n - keep);
            json_decref(text);
            text = json_string(cut);
        }
        json_object_set_new(fields, key, text);
    }
    json_object_set_new(fields, nkey, json_integer((json_int_t)n));
    if (A.mode == AUDIT_CODE_FULL && n > AUDIT_CODE_MAX) {
        cleanup_free char *tkey = xasprintf("%s_truncated", key);
        json_object_set_new(fields, tkey, json_true());
    }
    json_object_set_new(fields, hkey, json_string(hex));
}

void audit_execute(const audit_who_t *who, const audit_exec_t *x, const char *language,
                   const char *code, size_t n, json_t *extra)
{
    if (A.fd < 0) {
        json_decref(extra);
        return;
    }
    json_t *f = json_pack("{s:I, s:s, s:s}", "execution", (json_int_t)x->id, "context", x->context,
                          "language", language);
    set_code(f, x->command ? "command" : "code", code, n);
    if (extra)
        json_object_update(f, extra);
    json_decref(extra);
    const char *key = x->command ? "command" : "code";
    emit(who, x->command ? "command" : "execute", f, A.mode == AUDIT_CODE_FULL ? key : NULL);
}

void audit_execution_end(const audit_who_t *who, const audit_exec_t *x, const char *outcome,
                         int64_t duration_ms, size_t output_bytes, const char *error, json_t *extra)
{
    if (A.fd < 0) {
        json_decref(extra);
        return;
    }
    json_t *f = json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:s?}", "execution", (json_int_t)x->id,
                          "context", x->context, "kind", x->command ? "command" : "code", "outcome",
                          outcome, "duration_ms", (json_int_t)duration_ms, "output_bytes",
                          (json_int_t)output_bytes, "error", error);
    if (extra)
        json_object_update(f, extra);
    json_decref(extra);
    audit_event(who, "execution.end", f);
}
