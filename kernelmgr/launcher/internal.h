/* The launcher room's own: what launcher.c (the loop, the requests, most
 * operations) and paths.c (workspaces and volumes by path) share. */
#ifndef SG_LAUNCHER_INTERNAL_H
#define SG_LAUNCHER_INTERNAL_H

#include <czmq.h>

#include "kernelmgr/kspec/kspec.h"
#include "kernelmgr/launcher/launcher.h"

struct launcher {
    const launcher_config_t *cfg;
    loop_t *loop;
    int fd;
    sandbox_env_t *env;
    sg_error_t *env_err; /* why the state directory could not be prepared */
    kspecs_t *kspecs;
    zhashx_t *sandboxes; /* id -> sandbox_t */
    zhashx_t *execs;     /* "ID/SEQ" of a running exec request -> its handle (sandbox_exec) */
    char *workspaces;    /* STATE/workspaces */
    char *volumes;       /* STATE/volumes */
};

/* The answers to request seq: done (fields: a new object or NULL), failed
 * (err borrowed), refused (logged; SG_E_INVALID). */
void launcher_reply_ok(launcher_t *L, json_int_t seq, json_t *fields);
void launcher_reply_err(launcher_t *L, json_int_t seq, const sg_error_t *err);
void launcher_refuse(launcher_t *L, json_int_t seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A workspace's path: exactly STATE/workspaces/<uuid>; *uuid points at it. */
bool launcher_valid_workspace(launcher_t *L, const char *path, const char **uuid);
/* A workspace's path or a volume's (STATE/volumes/<uuid>): LOP_TAKES_PATH. */
bool launcher_valid_path(launcher_t *L, const char *path, const char **uuid);

/* The handlers of paths.c (launcher_handlers). */
void launcher_op_workspace_open(launcher_t *L, const launcher_req_t *r);
void launcher_op_workspace_close(launcher_t *L, const launcher_req_t *r);
void launcher_op_give(launcher_t *L, const launcher_req_t *r);

#endif
