/* mcp: the Model Context Protocol over Streamable HTTP, so agent clients
 * (Claude Code, Gemini CLI, ADK, LangChain's MCP adapters, the official
 * SDKs) get sandgate's kernels as tools.
 *
 *   POST   /mcp    JSON-RPC 2.0: one message or a batch; answered with
 *                  application/json, or text/event-stream when the client
 *                  accepts it and a tool runs code (progress notifications
 *                  carry the output as it comes)
 *   DELETE /mcp    ends the session named by Mcp-Session-Id
 *   GET    /mcp    405: sandgate sends no server-initiated messages
 *
 * An MCP session (Mcp-Session-Id, given by initialize) owns one Python
 * kernel session, started when a tool first needs it, and one more per
 * other language execute_code runs in it; variables and the workspace
 * persist across its tool calls.  The kernels are shut down when the MCP
 * session is deleted or stays idle past the idle timeout.  Sessions are
 * recorded under STATE/mcp, so a restarted sandgate carries on with them.
 *
 * Tools: execute_python, execute_code (JavaScript, TypeScript, R, Bash:
 * those installed), list_files, read_file, write_file, restart_kernel,
 * snapshot, restore.  Failures of a tool (an exception in the code, a timeout,
 * a dead kernel, a bad path) are tool results with isError; malformed
 * JSON-RPC gets JSON-RPC errors.  See docs/mcp.md.
 */
#ifndef SG_MCP_H
#define SG_MCP_H

#include <microhttpd.h>
#include <stdbool.h>

#include "gateway/http/http.h"
#include "gateway/session/session.h"
#include "kernelmgr/manager/manager.h"

typedef struct mcp mcp_t;

typedef struct {
    const char *state_dir;     /* sessions are recorded in STATE/mcp */
    const char *kernelspec;    /* the Python kernel every MCP session gets ("python3") */
    int idle_ms;               /* end sessions idle this long; 0: never */
    const exec_policy_t *exec; /* executions' limits (borrowed; set it) */
    size_t max_file;           /* the largest file returned inline (read_file, output/) */
    size_t max_upload;         /* the largest file write_file writes */
    int max_sessions;          /* MCP sessions at once */
    const char *notebook_url;  /* --notebook-url (handover.h); NULL: results carry none */
    bool loopback_origins;     /* refuse browser Origins other than loopback ones
                                  (no token: DNS-rebinding protection) */
} mcp_config_t;

void mcp_config_defaults(mcp_config_t *cfg);

/* Reads the recorded sessions (their kernels must have been re-adopted by
 * kmgr already).  wake is called after a suspended connection is resumed. */
mcp_t *mcp_new(loop_t *loop, kmgr_t *kmgr, const mcp_config_t *cfg, void (*wake)(void *),
               void *wake_arg);
/* Frees the sessions' memory; their kernels and records stay for the next
 * sandgate.  Call after the HTTP server is gone. */
void mcp_destroy(mcp_t **self_p);

/* Registers /mcp (and /mcp/) with http (self borrowed: it must outlive
 * http). */
int mcp_register(mcp_t *self, http_server_t *http, sg_error_t **err);

#endif
