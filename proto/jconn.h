/* jconn: Jupyter connection files and channel endpoints.
 *
 * A connection file tells a kernel where to bind its five channels and with
 * which key to sign.  For transport "tcp", `ip` is an address and each channel
 * has a port; for "ipc", `ip` is a path prefix and channel N binds the Unix
 * socket "<ip>-<port>" (the jupyter_client convention).
 */
#ifndef SG_JCONN_H
#define SG_JCONN_H

#include <stddef.h>

#include "common/error.h"

typedef enum {
    JCHAN_SHELL,
    JCHAN_IOPUB,
    JCHAN_STDIN,
    JCHAN_CONTROL,
    JCHAN_HB,
    JCHAN_COUNT
} jchan_t;

typedef struct {
    char transport[8];         /* "tcp" or "ipc" */
    char ip[256];              /* address (tcp) or socket path prefix (ipc) */
    int ports[JCHAN_COUNT];    /* indexed by jchan_t */
    char key[256];             /* HMAC key, as the file has it */
    char signature_scheme[32]; /* always "hmac-sha256" */
    char kernel_name[64];      /* may be empty */
} jconn_t;

/* The channel's name as connection files spell it ("shell", "iopub", ...). */
const char *jchan_name(jchan_t chan);

/* Fills conn with a new random key and ports for transport "tcp" (ip is an
 * address; free ports on it are picked) or "ipc" (ip is a path prefix; ports
 * 1..5).  Returns 0, or -1 with *err set. */
int jconn_init(jconn_t *conn, const char *transport, const char *ip, sg_error_t **err);

/* Reads a connection file (JSON).  Unknown fields are ignored; a missing or
 * ill-typed required field, or a signature scheme other than hmac-sha256, is
 * an error. */
int jconn_read(jconn_t *conn, const char *path, sg_error_t **err);
int jconn_parse(jconn_t *conn, const char *json_text, size_t len, sg_error_t **err);

/* The connection file's text (a new string); NULL when a field is not
 * valid UTF-8. */
char *jconn_json(const jconn_t *conn);

/* Writes conn to path with mode 0600 (through a temporary file and rename,
 * so a reader never sees half a file). */
int jconn_write(const jconn_t *conn, const char *path, sg_error_t **err);

/* The ZeroMQ endpoint of a channel, e.g. "tcp://127.0.0.1:5555" or
 * "ipc:///run/k/kernel-1".  Returns 0, or -1 if buf is too small. */
int jconn_endpoint(const jconn_t *conn, jchan_t chan, char *buf, size_t size);

#endif
