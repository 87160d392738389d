/* The privileged launcher (kernelmgr/launcher/launcher.c) against requests a
 * compromised unprivileged half could send: each must be refused without
 * effect, and the launcher must keep serving.  Needs root (it prepares a
 * state directory, mounts a workspace) and runsc; starts no sandbox. */
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "kernelmgr/launcher/launcher.h"
#include "tests/lib/tap.h"

static int fd;
static json_int_t seq;

/* Sends text as one packet, returns the answer. */
static json_t *raw(const char *text, size_t len)
{
    if (send(fd, text, len, 0) < 0)
        return NULL;
    static char buf[300 * 1024];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
}

/* Sends {"op": op} with the file descriptor passed attached. */
static json_t *call_fd(const char *op, int passed)
{
    char *text = xasprintf("{\"seq\": %lld, \"op\": \"%s\"}", (long long)++seq, op);
    struct iovec iov = {.iov_base = text, .iov_len = strlen(text)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &passed, sizeof passed);
    ssize_t sent = sendmsg(fd, &mh, 0);
    free(text);
    if (sent < 0)
        return NULL;
    static char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
}

static json_t *call(json_t *req)
{
    json_object_set_new(req, "seq", json_integer(++seq));
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    json_t *r = raw(text, strlen(text));
    free(text);
    return r;
}

static bool refused(json_t *r)
{
    bool yes = r && json_object_get(r, "error");
    json_decref(r);
    return yes;
}

static bool fine(json_t *r)
{
    bool yes = r && !json_object_get(r, "error");
    if (!yes && r) {
        char *t = json_dumps(r, 0);
        diag("%s", t);
        free(t);
    }
    json_decref(r);
    return yes;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

int main(void)
{
    if (geteuid() != 0 || access("/usr/local/bin/runsc", X_OK) != 0) {
        printf("1..0 # SKIP needs root and runsc\n");
        return 0;
    }
    char tmpl[] = "/tmp/sg-launcher-XXXXXX";
    char *state = mkdtemp(tmpl);
    launcher_config_t cfg = {.state_dir = state, .uid = 64122, .gid = 64123};
    sandbox_config_defaults(&cfg.sandbox);
    cfg.sandbox.workspace_bytes = 16 << 20;
    int sv[2];
    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        zsys_init();
        _exit(launcher_serve(&cfg, sv[1]));
    }
    close(sv[1]);
    fd = sv[0];
    int size = 1 << 20; /* room for the oversized packet below */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size);

    ok(fine(call(json_pack("{s:s}", "op", "env"))), "env: the state directory is ready");
    char *sessions = xasprintf("%s/sessions", state);
    struct stat st;
    ok(stat(sessions, &st) == 0 && st.st_uid == 64122 && (st.st_mode & 0777) == 0700,
       "sessions/ belongs to the unprivileged uid, 0700");

    ok(refused(raw("not json", 8)), "a packet that is not JSON is refused");
    ok(refused(raw("[1,2]", 5)), "a JSON array is refused");
    ok(refused(call(json_object())), "a request without op is refused");
    ok(refused(call(json_pack("{s:s}", "op", "mount"))), "an unknown op is refused");
    char *big = xmalloc(300 * 1024);
    memset(big, ' ', 300 * 1024);
    ok(refused(raw(big, 300 * 1024)), "a 300 KiB packet is refused");
    free(big);

    const char *bad_paths[] = {"/etc", "/tmp/x", "",
                               "workspaces/0e3f0c4e-6a4b-4c57-9a3e-000000000001"};
    for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++)
        ok(refused(call(json_pack("{s:s, s:s}", "op", "workspace_open", "path", bad_paths[i]))),
           "workspace_open of '%s' is refused", bad_paths[i]);
    char *escape = xasprintf("%s/workspaces/../../sg-launcher-escape", state);
    ok(refused(call(json_pack("{s:s, s:s}", "op", "workspace_open", "path", escape))) &&
           !exists("/tmp/sg-launcher-escape"),
       "workspace_open through .. is refused and creates nothing");
    char *upper = xasprintf("%s/workspaces/0E3F0C4E-6A4B-4C57-9A3E-000000000001", state);
    ok(refused(call(json_pack("{s:s, s:s}", "op", "workspace_close", "path", upper))),
       "a workspace id that is not sandgate's lower-case UUID is refused");
    ok(refused(
           call(json_pack("{s:s, s:s, s:b}", "op", "workspace_close", "path", "/", "remove", 1))),
       "workspace_close of / (remove) is refused");

    const char *uuid = "0e3f0c4e-6a4b-4c57-9a3e-000000000001";
    char *ws = xasprintf("%s/workspaces/%s", state, uuid);
    ok(fine(call(json_pack("{s:s, s:s}", "op", "workspace_open", "path", ws))),
       "workspace_open of a real workspace path");
    ok(stat(ws, &st) == 0 && st.st_uid == 64123 && st.st_gid == 64123 &&
           (st.st_mode & 07777) == 02770,
       "it belongs to the sandbox user, group-writable, setgid");

    /* give: only a file of the daemon's uid, inside a workspace. */
    char *mine = xasprintf("%s/mine.txt", ws);
    int f = open(mine, O_CREAT | O_WRONLY, 0660);
    ok(refused(call_fd("give", f)), "give of a root-owned file is refused");
    ok(fchown(f, 64122, 64123) == 0 && fine(call_fd("give", f)) && stat(mine, &st) == 0 &&
           st.st_uid == 64123,
       "give of the daemon's file in a workspace makes it the sandbox user's");
    close(f);
    char *outside = xasprintf("%s/outside.txt", state);
    f = open(outside, O_CREAT | O_WRONLY, 0660);
    ok(fchown(f, 64122, 64123) == 0 && refused(call_fd("give", f)) && stat(outside, &st) == 0 &&
           st.st_uid == 64122,
       "give of the daemon's file outside the workspaces is refused");
    close(f);
    ok(refused(call_fd("list", open("/etc/hostname", O_RDONLY))),
       "a file descriptor with any other op is refused");
    ok(refused(call_fd("exec", open("/etc/hostname", O_RDONLY))),
       "exec with one file descriptor instead of three is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:[s]}", "op", "exec", "id",
                              "0e3f0c4e-6a4b-4c57-9a3e-000000000001-1", "argv", "id"))),
       "exec without file descriptors is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:I, s:i}", "op", "exec_signal", "id",
                              "0e3f0c4e-6a4b-4c57-9a3e-000000000001-1", "exec", (json_int_t)1,
                              "sig", 9))),
       "exec_signal for a sandbox the launcher does not hold is refused");

    const char *bad_ids[] = {"../../etc", "x", "0e3f0c4e-6a4b-4c57-9a3e-000000000001",
                             "0e3f0c4e-6a4b-4c57-9a3e-000000000001-1/../..",
                             "0e3f0c4e-6a4b-4c57-9a3e-000000000001-12345678"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++)
        ok(refused(call(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", bad_ids[i],
                                  "kernelspec", "python3", "workspace", ws))),
           "new with id '%s' is refused", bad_ids[i]);
    char *sbid = xasprintf("%s-1", uuid);
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", sbid, "kernelspec",
                              "no-such-kernel", "workspace", ws))),
       "new with an unknown kernelspec is refused");
    char *other = xasprintf("%s/workspaces/0e3f0c4e-6a4b-4c57-9a3e-000000000002", state);
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", other))),
       "new with another session's workspace is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", "/"))),
       "new with / as the workspace is refused");

    const char *bad_tenants[] = {
        "", "../x", "a/b", "t x",
        "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad_tenants / sizeof bad_tenants[0]; i++)
        ok(refused(
               call(json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", ws, "tenant", bad_tenants[i]))),
           "new with tenant '%.12s' is refused", bad_tenants[i]);
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s, s:i}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", ws, "tenant", 7))),
       "new with a tenant that is not a string is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", ws, "memory", (json_int_t)4096))),
       "new with a memory ceiling of 4 KiB is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", ws, "cpu_quota", (json_int_t)-1))),
       "new with a negative CPU quota is refused");

    /* A tenant's ceiling above the server's: the server's applies. */
    json_t *r = call(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "op", "new", "id", sbid,
                               "kernelspec", "python3", "workspace", ws, "tenant", "lt-tenant",
                               "memory", (json_int_t)(1ll << 40), "cpu_quota", (json_int_t)50000));
    const char *key = json_string_value(json_object_get(json_object_get(r, "conn"), "key"));
    ok(key && strlen(key) >= 32, "new prepares a sandbox and answers its connection (key)");
    json_decref(r);
    char *bundle = xasprintf("%s/kernels/%s/bundle/config.json", state, sbid);
    json_t *oci = json_load_file(bundle, 0, NULL);
    json_t *args = json_object_get(json_object_get(oci, "process"), "args");
    ok(json_array_size(args) > 2 &&
           strstr(json_string_value(json_array_get(args, 1)) ?: "", "python"),
       "the bundle's command comes from the launcher's kernelspec");
    json_t *res = json_object_get(json_object_get(oci, "linux"), "resources");
    sandbox_config_t dflt;
    sandbox_config_defaults(&dflt);
    ok(json_integer_value(json_object_get(json_object_get(res, "memory"), "limit")) ==
           (json_int_t)dflt.memory_bytes,
       "a tenant's memory ceiling above the server's gives the server's");
    ok(json_integer_value(json_object_get(json_object_get(res, "cpu"), "quota")) == 50000,
       "a lower CPU ceiling is the sandbox's quota");
    cleanup_free char *cgpath = xasprintf("/sandgate/t-lt-tenant/%s", sbid);
    is_str(json_string_value(json_object_get(json_object_get(oci, "linux"), "cgroupsPath")), cgpath,
           "the bundle's cgroupsPath is in the tenant's cgroup");
    json_decref(oci);
    ok(refused(call(json_pack("{s:s, s:s, s:s, s:s}", "op", "new", "id", sbid, "kernelspec",
                              "python3", "workspace", ws))),
       "the same sandbox twice is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:i}", "op", "signal", "id", sbid, "sig", 11))),
       "signal 11 is refused (INT, TERM, KILL only)");
    ok(refused(call(json_pack("{s:s, s:s, s:i}", "op", "signal", "id",
                              "0e3f0c4e-6a4b-4c57-9a3e-000000000009-1", "sig", 2))),
       "signal to an unknown sandbox is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:i}", "op", "adopt", "id", sbid, "pid", 999))),
       "adopt of a known sandbox is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:i}", "op", "adopt", "id",
                              "0e3f0c4e-6a4b-4c57-9a3e-000000000003-1", "pid", 1))),
       "adopt of pid 1 is refused");
    ok(refused(call(json_pack("{s:s, s:s, s:i}", "op", "log", "id", sbid, "max", 1 << 30))),
       "a log tail of 1 GiB is refused");
    ok(fine(call(json_pack("{s:s}", "op", "list"))), "list answers");

    char *kdir = xasprintf("%s/kernels/%s", state, sbid);
    ok(fine(call(json_pack("{s:s, s:s, s:b}", "op", "remove", "id", sbid, "wait", 1))) &&
           !exists(kdir),
       "remove deletes the sandbox's directory");
    ok(fine(call(json_pack("{s:s, s:s, s:b}", "op", "workspace_close", "path", ws, "remove", 1))) &&
           !exists(ws),
       "workspace_close removes the workspace");
    ok(fine(call(json_pack("{s:s}", "op", "env"))), "the launcher still answers after all that");

    close(fd);
    int status = -1;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status), "the launcher exits when its link closes");
    char *rm = xasprintf("rm -rf %s", state);
    if (system(rm) != 0)
        diag("could not remove %s", state);
    char *owned[] = {sessions, escape, upper, ws, mine, outside, sbid, other, bundle, kdir, rm};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        free(owned[i]);
    return tap_done();
}
