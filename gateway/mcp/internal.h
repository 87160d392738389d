/* internal: what the MCP endpoint's two files share (not for other
 * modules).
 *
 *   mcp.c        the protocol: JSON-RPC 2.0 over Streamable HTTP, MCP
 *                sessions and their kernels, one POST's answers, the routes
 *   tools.c  the tools: execute_python and execute_code (an
 *                execution's output as content blocks and progress
 *                notifications), list_files,
 *                read_file, write_file, restart_kernel, snapshot, restore,
 *                and their descriptions
 */
#ifndef SG_MCP_INTERNAL_H
#define SG_MCP_INTERNAL_H

#include "common/records.h"
#include "gateway/auth/auth.h"
#include "gateway/http/http.h"
#include "gateway/mcp/mcp.h"
#include "gateway/observe/observe.h"
#include "gateway/session/session.h"

#define HOME "/home/user" /* the workspace, as the kernel sees it */

/* The languages execute_code runs, each in a kernel of its own per
 * session (mcp_langs: their names).  Python's is the kernel of
 * execute_python and of the workspace, restart and snapshot tools. */
enum { LANG_PYTHON, LANG_JAVASCRIPT, LANG_TYPESCRIPT, LANG_R, LANG_BASH, MCP_LANGS };
extern const char *const mcp_langs[MCP_LANGS];

typedef struct {
    char *id;  /* NULL until a tool needs the kernel */
    bool lost; /* it had one that is gone (deleted, culled, lost in a crash) */
} session_kernel_t;

typedef struct {
    char id[37];
    session_kernel_t kernels[MCP_LANGS]; /* one per language */
    bool internet; /* its kernels have a network (/mcp?internet=true at initialize) */
    char owner[KEYS_NAME_MAX + 1]; /* the tenant that initialized it */
    char version[16];              /* negotiated protocol version */
    int64_t last_seen;
    int calls; /* executions in flight */
} session_t;

/* One POST: its JSON-RPC answers, given at once or when the last execution
 * it started ends.  Freed when both the HTTP request and every call are
 * gone. */
typedef struct {
    mcp_t *mcp;
    int refs; /* the HTTP request, and each call in flight */
    struct MHD_Connection *conn;
    resp_t *out; /* the event stream, or the wait for the answers */
    char session[37];
    tenant_t tenant; /* who posted (a copy) */
    bool batch, accept_json, streaming;
    int pending;     /* calls not answered yet */
    json_t *replies; /* answers not sent yet (JSON mode) */
} post_t;

/* One execute_python or execute_code call in flight. */
typedef struct {
    mcp_t *mcp;
    post_t *post;
    json_t *id;       /* the request's id */
    json_t *progress; /* the client's progressToken, or NULL */
    char session[37];
    exec_t *exec;    /* NULL once over */
    json_t *content; /* content blocks so far */
    char *run;       /* stream text not yet made a block */
    size_t run_len;
    int run_kind; /* 0 none, 1 stdout, 2 stderr */
    bool error;
    int progress_n;
    char *notebook_url; /* the kernel's --notebook-url link; NULL: none */
} call_t;

struct mcp {
    loop_t *loop;
    kmgr_t *kmgr;
    mcp_config_t cfg;
    records_t *records; /* STATE/mcp; NULL: none */
    zhashx_t *sessions; /* id -> session_t */
    zlistx_t *calls;    /* call_t in flight */
    json_t *tools[2];   /* tools/list's answer without and with a network */
    /* Each language's kernelspec (Python's is cfg.kernelspec); NULL: none
     * is installed, so execute_code does not offer the language. */
    const char *specs[MCP_LANGS];
    int tick;
    void (*wake)(void *);
    void *wake_arg;
    /* Who sent the request being handled (or "mcp" and no client for the
     * idle timer), for the audit log: set before each dispatch, so the tools
     * need no extra parameter. */
    audit_who_t who;
};

/* --- the protocol's side (mcp.c) ------------------------------------------------ */

/* A JSON-RPC result for request id (result stolen). */
json_t *mcp_rpc_result(const json_t *id, json_t *result);
/* An answer (or a notification, while streaming) for the client; steals msg. */
void mcp_post_send(post_t *p, json_t *msg);
/* A call of this POST is over (answered or cancelled). */
void mcp_post_call_over(post_t *p);
/* The session's Python kernel, started when there is none (borrowed).
 * *note says so when a kernel it had is gone (variables lost). */
kernel_t *mcp_session_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err);
/* The same for language lang (LANG_*): its own kernel, started when there
 * is none. */
kernel_t *mcp_lang_kernel(mcp_t *self, session_t *s, int lang, const char **note, sg_error_t **err);
/* The Python kernel, started as snapshot snap's (its variables and files)
 * when there is none. */
kernel_t *mcp_session_kernel_from(mcp_t *self, session_t *s, const kmgr_snapshot_t *snap,
                                  const char **note, sg_error_t **err);
/* The same for a file tool: its workspace must exist as well. */
kernel_t *mcp_files_kernel(mcp_t *self, session_t *s, const char **note, sg_error_t **err);

/* --- the tools' side (tools.c) ----------------------------------------------- */

/* tools/list's answer (owned by the caller), for sessions without or with a
 * network (self's cfg and specs set). */
json_t *mcp_tools_json(const mcp_t *self, bool internet);
/* tools/call of the tool name: its result, or NULL when an execution is
 * under way and answers later (or, with *unknown, when there is no such
 * tool). */
json_t *mcp_tools_call(mcp_t *self, post_t *p, session_t *s, const json_t *id, const char *name,
                       json_t *args, json_t *meta, bool *unknown);
/* Stops a call's code and drops its answer (the caller gave it up). */
void mcp_call_cancel(call_t *c, const char *why);
/* Frees a call that is no longer listed or running. */
void mcp_call_free(call_t *c);

#endif
