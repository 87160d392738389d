/* events: the lifecycle of a tenant's sandboxes, as events a client reads
 * back — sandgate's GET /events (by cursor) and E2B's GET /events/sandboxes
 * and /events/sandboxes/{id} (by offset), in E2B's event shape:
 *
 *   {"version": "v2", "id": N (a string: the cursor), "type": TYPE,
 *    "timestamp": ISO-8601, "sandboxId", "sandboxTeamId" (the tenant),
 *    "sandboxTemplateId", "sandboxBuildId": "", "sandboxExecutionId": "",
 *    "eventData": {"sandbox_metadata": {...}} }
 *
 * TYPE is E2B's sandbox.lifecycle.created, killed, paused, resumed,
 * checkpointed (a snapshot), updated (network rules), and sandgate's own
 * sandbox.lifecycle.forked, sandbox.lifecycle.timed_out (its timeout
 * came: killed or paused next) and sandbox.lifecycle.oom (its kernel died
 * out of memory).  They are taken from what the audit log
 * records (audit_set_tap: one path for every front end and for the kernel
 * manager's own pauses and culls), whether or not a log is written.
 *
 * Pushed to webhooks as they happen (webhooks.c: the server's --webhook,
 * and E2B's /events/webhooks API for a tenant's own).
 *
 * Kept in memory, in order, for keep_ms (--events-keep) and at most
 * EVENTS_MAX; a restart starts with none.  Each is its sandbox's tenant's:
 * a tenant reads its own only (an admin all), a sandbox's own token that
 * sandbox's.
 */
#ifndef SG_EVENTS_H
#define SG_EVENTS_H

#include <stdint.h>

#include "gateway/http/http.h"
#include "kernelmgr/manager/manager.h"

#define EVENTS_MAX 100000
#define EVENTS_PAGE_MAX 1000

typedef struct events events_t;

/* Starts listening to the audit log's events (audit_set_tap); webhook_url
 * (NULL: none) gets every tenant's events, signed with webhook_secret
 * (webhooks.c).  NULL with *err when the URL is not one. */
events_t *events_new(loop_t *loop, kmgr_t *kmgr, int64_t keep_ms, const char *state_dir,
                     const char *webhook_url, const char *webhook_secret, sg_error_t **err);
void events_destroy(events_t **self_p);
int events_register(events_t *self, http_server_t *http, sg_error_t **err);

#endif
