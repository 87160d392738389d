#include "proto/jconn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "proto/jmsg.h"

static const char *chan_names[JCHAN_COUNT] = {"shell", "iopub", "stdin", "control", "hb"};
static const char *port_keys[JCHAN_COUNT] = {"shell_port", "iopub_port", "stdin_port",
                                             "control_port", "hb_port"};

const char *jchan_name(jchan_t chan)
{
    return (unsigned)chan < JCHAN_COUNT ? chan_names[chan] : "?";
}

static int copy_str(char *dst, size_t size, const char *src, const char *what, sg_error_t **err)
{
    size_t n = strlen(src);
    if (n >= size)
        return sg_error_set(err, SG_E_INVALID, "%s is too long (%zu bytes, at most %zu)", what, n,
                            size - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

/* A free TCP port on ip, found by binding port 0.  The port could be taken
 * again before the kernel binds it; jupyter_client accepts the same race. */
static int free_port(const char *ip, sg_error_t **err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return sg_error_set(err, SG_E_INVALID, "'%s' is not an IPv4 address", ip);
    cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        return sg_error_errno(err, errno, "cannot find a free port on %s", ip);
    return ntohs(sa.sin_port);
}

int jconn_init(jconn_t *conn, const char *transport, const char *ip, sg_error_t **err)
{
    memset(conn, 0, sizeof *conn);
    if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0)
        return sg_error_set(err, SG_E_INVALID, "unknown transport '%s' (tcp or ipc)", transport);
    strcpy(conn->transport, transport);
    strcpy(conn->signature_scheme, "hmac-sha256");
    if (copy_str(conn->ip, sizeof conn->ip, ip, "ip", err) < 0)
        return -1;
    jmsg_uuid(conn->key);
    for (int c = 0; c < JCHAN_COUNT; c++) {
        if (conn->transport[0] == 'i') {
            conn->ports[c] = c + 1;
            continue;
        }
        int port = free_port(ip, err);
        if (port < 0)
            return -1;
        /* Two probes may return the same port; retry rather than collide. */
        for (int d = 0; d < c; d++)
            if (conn->ports[d] == port) {
                port = -1;
                break;
            }
        if (port < 0) {
            c--;
            continue;
        }
        conn->ports[c] = port;
    }
    return 0;
}

int jconn_parse(jconn_t *conn, const char *text, size_t len, sg_error_t **err)
{
    memset(conn, 0, sizeof *conn);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (root == NULL)
        return sg_error_set(err, SG_E_INVALID, "not JSON (line %d: %s)", jerr.line, jerr.text);

    int rc = -1;
    const char *transport, *ip, *key, *scheme, *kernel_name = "";
    json_int_t ports[JCHAN_COUNT];
    json_error_t perr;
    if (json_unpack_ex(root, &perr, 0, "{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s?s}",
                       "transport", &transport, "ip", &ip, "key", &key, "signature_scheme", &scheme,
                       port_keys[0], &ports[0], port_keys[1], &ports[1], port_keys[2], &ports[2],
                       port_keys[3], &ports[3], port_keys[4], &ports[4], "kernel_name",
                       &kernel_name) < 0) {
        sg_error_set(err, SG_E_INVALID, "bad connection info: %s", perr.text);
        goto out;
    }
    if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0) {
        sg_error_set(err, SG_E_INVALID, "unknown transport '%s'", transport);
        goto out;
    }
    if (strcmp(scheme, "hmac-sha256") != 0) {
        sg_error_set(err, SG_E_INVALID, "unsupported signature scheme '%s' (hmac-sha256 only)",
                     scheme);
        goto out;
    }
    for (int c = 0; c < JCHAN_COUNT; c++) {
        if (ports[c] <= 0 || ports[c] > 65535) {
            sg_error_set(err, SG_E_INVALID, "%s %lld is out of range", port_keys[c],
                         (long long)ports[c]);
            goto out;
        }
        conn->ports[c] = (int)ports[c];
    }
    if (copy_str(conn->transport, sizeof conn->transport, transport, "transport", err) < 0 ||
        copy_str(conn->ip, sizeof conn->ip, ip, "ip", err) < 0 ||
        copy_str(conn->key, sizeof conn->key, key, "key", err) < 0 ||
        copy_str(conn->signature_scheme, sizeof conn->signature_scheme, scheme, "scheme", err) <
            0 ||
        copy_str(conn->kernel_name, sizeof conn->kernel_name, kernel_name, "kernel_name", err) < 0)
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int jconn_read(jconn_t *conn, const char *path, sg_error_t **err)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return sg_error_errno(err, errno, "cannot open connection file %s", path);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool too_big = n == sizeof buf;
    fclose(f);
    if (too_big)
        return sg_error_set(err, SG_E_LIMIT, "connection file %s is larger than %zu bytes", path,
                            sizeof buf);
    if (jconn_parse(conn, buf, n, err) < 0)
        return sg_error_prefix(err, "%s", path);
    return 0;
}

char *jconn_json(const jconn_t *conn)
{
    json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:s}", "transport", conn->transport, "ip",
                             conn->ip, "key", conn->key, "signature_scheme", conn->signature_scheme,
                             "kernel_name", conn->kernel_name);
    if (root == NULL)
        return NULL;
    for (int c = 0; c < JCHAN_COUNT; c++)
        json_object_set_new(root, port_keys[c], json_integer(conn->ports[c]));
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

int jconn_write(const jconn_t *conn, const char *path, sg_error_t **err)
{
    cleanup_free char *text = jconn_json(conn);
    if (text == NULL)
        return sg_error_set(err, SG_E_INVALID, "connection info is not valid UTF-8");

    cleanup_free char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return sg_error_errno(err, errno, "cannot create %s", tmp);
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    int werr = errno;
    if (close(fd) < 0 && w == (ssize_t)len) {
        w = -1;
        werr = errno;
    }
    if (w != (ssize_t)len || rename(tmp, path) < 0) {
        int e = w != (ssize_t)len ? werr : errno;
        unlink(tmp);
        return sg_error_errno(err, e ? e : EIO, "cannot write connection file %s", path);
    }
    return 0;
}

int jconn_endpoint(const jconn_t *conn, jchan_t chan, char *buf, size_t size)
{
    bool ipc = strcmp(conn->transport, "ipc") == 0;
    int n = snprintf(buf, size, "%s://%s%c%d", ipc ? "ipc" : "tcp", conn->ip, ipc ? '-' : ':',
                     conn->ports[chan]);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}
