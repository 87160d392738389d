/* handover: the link that hands a session over to a person (--notebook-url).
 *
 * A template is an http(s) URL holding {kernel_id}, e.g.
 * https://hub.example.org/user/alice/lab?kernel={kernel_id}: a JupyterLab
 * whose server runs with --gateway-url pointing here.  Every context's JSON
 * (the REST API) and every execution's tool result (MCP) carries the
 * template with the context's id in place of each {kernel_id}, so an agent
 * can give a person the notebook attached to the kernel it is driving.
 */
#ifndef SG_HANDOVER_H
#define SG_HANDOVER_H

#include <stdbool.h>

#define HANDOVER_PLACEHOLDER "{kernel_id}"

/* Whether tmpl is a template: http:// or https://, a host, at least one
 * {kernel_id}, no spaces or control characters. */
bool handover_valid(const char *tmpl);

/* tmpl with id in place of each {kernel_id} (owned by the caller); NULL
 * when tmpl is NULL (no --notebook-url).  id is a context's id, which is
 * URL-safe as it is (a UUID with a replica's name). */
char *handover_url(const char *tmpl, const char *id);

#endif
