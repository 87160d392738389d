/* paths: what the launcher does with workspaces and volumes by path —
 * the paths it takes (STATE/workspaces/<uuid>, STATE/volumes/<uuid>),
 * their open and close, and giving their files to the sandbox user or to
 * whom a volume's client asks (give). */
#include "kernelmgr/launcher/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xalloc.h"

/* Whether path is exactly DIR/<uuid>; *uuid points at it. */
static bool under(const char *dir, const char *path, const char **uuid)
{
    size_t n = strlen(dir);
    if (!path || strncmp(path, dir, n) != 0 || path[n] != '/' ||
        !launcher_valid_uuid(path + n + 1) || path[n + 37] != 0)
        return false;
    *uuid = path + n + 1;
    return true;
}

/* A workspace path: exactly STATE/workspaces/<uuid>. */
bool launcher_valid_workspace(launcher_t *L, const char *path, const char **uuid)
{
    return under(L->workspaces, path, uuid);
}

/* A workspace's path, or a volume's (STATE/volumes/<uuid>), which
 * workspace_open, workspace_close and give also take. */
bool launcher_valid_path(launcher_t *L, const char *path, const char **uuid)
{
    return under(L->workspaces, path, uuid) || under(L->volumes, path, uuid);
}

void launcher_op_workspace_open(launcher_t *L, const launcher_req_t *r)
{
    cleanup_error sg_error_t *err = NULL;
    const char *uuid;
    json_t *bytes = json_object_get(r->body, "bytes"); /* 0 or none: a workspace */
    json_int_t n = json_integer_value(bytes);
    bool volume = under(L->volumes, r->path, &uuid);
    if ((bytes && !json_is_integer(bytes)) || volume != (n != 0) ||
        (volume && (n < (16 << 20) || n > ((json_int_t)1 << 40)))) {
        launcher_refuse(L, r->seq,
                        "workspace_open: a volume's size (16 MiB to 1 TiB), and only a volume's");
        return;
    }
    if ((volume ? sandbox_volume_open(L->env, r->path, (uint64_t)n, &err)
                : sandbox_workspace_open(L->env, r->path, &err)) < 0)
        launcher_reply_err(L, r->seq, err);
    else
        launcher_reply_ok(L, r->seq, NULL);
}

void launcher_op_workspace_close(launcher_t *L, const launcher_req_t *r)
{
    sandbox_workspace_close(L->env, r->path, json_is_true(json_object_get(r->body, "remove")));
    launcher_reply_ok(L, r->seq, NULL);
}

/* Whether path is in (or is) a volume: under STATE/volumes/<uuid>. */
static bool in_volume(launcher_t *L, const char *path)
{
    size_t v = strlen(L->volumes);
    char uuid[37];
    if (strncmp(path, L->volumes, v) != 0 || path[v] != '/' || strnlen(path + v + 1, 37) < 36 ||
        (path[v + 37] != '/' && path[v + 37] != 0))
        return false;
    memcpy(uuid, path + v + 1, 36);
    uuid[36] = 0;
    return launcher_valid_uuid(uuid);
}

/* A file or directory the daemon created in a workspace (the fd it sent)
 * becomes the sandbox user's.  Only its own files, only under the
 * workspaces or volumes: anything else is refused.  With "volume": any file or
 * directory of a volume gets the uid, gid (1 to 2^31-1, -1: the sandbox
 * user's) and mode (permission bits, a directory's setgid; -1: unchanged)
 * given (sandbox_give_as). */
void launcher_op_give(launcher_t *L, const launcher_req_t *r)
{
    struct stat st;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", r->fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    size_t w = strlen(L->workspaces);
    if (fstat(r->fd, &st) < 0 || n <= 0) {
        launcher_refuse(L, r->seq, "give: no file");
        return;
    }
    path[n] = 0;
    bool volume = json_is_true(json_object_get(r->body, "volume"));
    json_int_t uid = json_integer_value(json_object_get(r->body, "uid"));
    json_int_t gid = json_integer_value(json_object_get(r->body, "gid"));
    json_int_t mode = json_integer_value(json_object_get(r->body, "mode"));
    if (!(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) ||
        (volume ? !in_volume(L, path)
                : st.st_uid != L->cfg->uid ||
                      !((strncmp(path, L->workspaces, w) == 0 && path[w] == '/') ||
                        in_volume(L, path)))) {
        launcher_refuse(L, r->seq, "give: %s is not a file %s", path,
                        volume ? "of a volume" : "of the daemon's in a workspace or volume");
        return;
    }
    if (volume &&
        (uid == 0 || uid < -1 || uid > INT32_MAX || gid == 0 || gid < -1 || gid > INT32_MAX ||
         mode < -1 || (mode > 0 && (mode & ~(json_int_t)(S_ISGID | 0777))) ||
         (mode > 0 && (mode & S_ISGID) && !S_ISDIR(st.st_mode)))) {
        launcher_refuse(L, r->seq, "give: uid and gid 1 to 2^31-1, mode permission bits");
        return;
    }
    cleanup_error sg_error_t *err = NULL;
    if (volume && mode >= 0 && fchmod(r->fd, (mode_t)mode) < 0)
        sg_error_errno(&err, errno, "give: fchmod");
    else if (fchown(r->fd, uid > 0 ? (uid_t)uid : SANDBOX_UID, gid > 0 ? (gid_t)gid : SANDBOX_GID) <
             0)
        sg_error_errno(&err, errno, "give: fchown");
    if (err)
        launcher_reply_err(L, r->seq, err);
    else
        launcher_reply_ok(L, r->seq, NULL);
}
