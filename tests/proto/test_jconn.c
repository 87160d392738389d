/* Unit tests for proto/jconn: connection files and endpoints. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "proto/jconn.h"
#include "tests/lib/tap.h"

static void expect_parse_error(const char *json, const char *what)
{
    jconn_t c;
    sg_error_t *err = NULL;
    int rc = jconn_parse(&c, json, strlen(json), &err);
    ok(rc < 0 && err && err->kind == SG_E_INVALID, "refused: %s (%s)", what,
       err ? err->msg : "accepted");
    sg_error_free(&err);
}

#define GOOD_PORTS                                                                                 \
    "\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5"

int main(void)
{
    sg_error_t *err = NULL;
    char dir[] = "/tmp/sg-jconn-XXXXXX";
    if (!mkdtemp(dir))
        return 1;

    jconn_t tcp;
    ok(jconn_init(&tcp, "tcp", "127.0.0.1", &err) == 0, "tcp connection info generated");
    int distinct = 1;
    for (int i = 0; i < JCHAN_COUNT; i++)
        for (int j = i + 1; j < JCHAN_COUNT; j++)
            distinct &= tcp.ports[i] != tcp.ports[j] && tcp.ports[i] > 0;
    ok(distinct, "five distinct non-zero tcp ports");
    is_int(strlen(tcp.key), 36, "random key generated");
    is_str(tcp.signature_scheme, "hmac-sha256", "scheme hmac-sha256");

    cleanup_free char *path = xasprintf("%s/kernel.json", dir);
    strcpy(tcp.kernel_name, "python3");
    ok(jconn_write(&tcp, path, &err) == 0, "written");
    struct stat st;
    ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "file mode is 0600 (%o)",
       st.st_mode & 0777);
    jconn_t back;
    ok(jconn_read(&back, path, &err) == 0, "read back");
    ok(memcmp(&back, &tcp, sizeof back) == 0, "read back equals what was written");

    char ep[300];
    jconn_endpoint(&tcp, JCHAN_IOPUB, ep, sizeof ep);
    char want[64];
    snprintf(want, sizeof want, "tcp://127.0.0.1:%d", tcp.ports[JCHAN_IOPUB]);
    is_str(ep, want, "tcp endpoint");

    jconn_t ipc;
    cleanup_free char *prefix = xasprintf("%s/kernel", dir);
    ok(jconn_init(&ipc, "ipc", prefix, &err) == 0, "ipc connection info generated");
    jconn_endpoint(&ipc, JCHAN_HB, ep, sizeof ep);
    cleanup_free char *want_ipc = xasprintf("ipc://%s-5", prefix);
    is_str(ep, want_ipc, "ipc endpoint is <ip>-<port>");
    ok(jconn_endpoint(&ipc, JCHAN_HB, ep, 8) < 0, "endpoint into a short buffer fails");

    ok(jconn_init(&ipc, "udp", "x", &err) < 0 && err, "unknown transport refused");
    sg_error_free(&err);
    ok(jconn_init(&ipc, "tcp", "not-an-ip", &err) < 0 && err, "tcp with a non-address refused");
    sg_error_free(&err);
    ok(jconn_read(&back, "/nonexistent/kernel.json", &err) < 0 && err && err->kind == SG_E_IO,
       "missing file is an I/O error");
    sg_error_free(&err);

    /* Parses what jupyter_client writes, extra fields included. */
    const char *jc = "{\"shell_port\": 5001, \"iopub_port\": 5002, \"stdin_port\": 5003, "
                     "\"control_port\": 5004, \"hb_port\": 5005, \"ip\": \"127.0.0.1\", "
                     "\"key\": \"abc\", \"transport\": \"tcp\", \"signature_scheme\": "
                     "\"hmac-sha256\", \"kernel_name\": \"\", \"extra\": [1]}";
    jconn_t p;
    ok(jconn_parse(&p, jc, strlen(jc), &err) == 0 && p.ports[JCHAN_CONTROL] == 5004 &&
           strcmp(p.key, "abc") == 0,
       "parses a jupyter_client connection file");

    expect_parse_error("not json", "not JSON");
    expect_parse_error("[]", "an array");
    expect_parse_error("{\"transport\":\"tcp\",\"ip\":\"1.2.3.4\",\"signature_scheme\":"
                       "\"hmac-sha256\"," GOOD_PORTS "}",
                       "no key");
    expect_parse_error("{\"transport\":\"tcp\",\"ip\":\"1.2.3.4\",\"key\":\"k\","
                       "\"signature_scheme\":\"hmac-md5\"," GOOD_PORTS "}",
                       "unsupported signature scheme");
    expect_parse_error("{\"transport\":\"tcp\",\"ip\":\"1.2.3.4\",\"key\":\"k\","
                       "\"signature_scheme\":\"hmac-sha256\",\"shell_port\":70000,"
                       "\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5}",
                       "port out of range");
    expect_parse_error("{\"transport\":\"sctp\",\"ip\":\"1.2.3.4\",\"key\":\"k\","
                       "\"signature_scheme\":\"hmac-sha256\"," GOOD_PORTS "}",
                       "unknown transport");
    expect_parse_error("{\"transport\":\"tcp\",\"ip\":\"1.2.3.4\",\"key\":\"k\","
                       "\"signature_scheme\":\"hmac-sha256\",\"shell_port\":\"1\","
                       "\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5}",
                       "port as a string");
    char longip[600] =
        "{\"transport\":\"ipc\",\"signature_scheme\":\"hmac-sha256\",\"key\":\"k\"," GOOD_PORTS
        ",\"ip\":\"";
    size_t n = strlen(longip);
    memset(longip + n, 'a', 400);
    strcpy(longip + n + 400, "\"}");
    expect_parse_error(longip, "ip longer than the buffer");

    unlink(path);
    rmdir(dir);
    return tap_done();
}
