/* egress's own: what egress.c (the table, the namespaces), rules.c (a
 * sandbox's own rules) and proxy.c (the proxy that sees host names)
 * share.  All of it runs as root, in the launcher. */
#ifndef SG_EGRESS_INTERNAL_H
#define SG_EGRESS_INTERNAL_H

#include <stdio.h>

#include "kernelmgr/egress/egress.h"

#define RULES_FILE "egress-rules" /* in a sandbox's directory: "allow LIST\ndeny LIST\n" */
#define POOL_NET 0x647f0000u      /* 100.127.0.0/16: a /30 per sandbox */
#define PROXY_HTTP_PORT 49080     /* where a named sandbox's TCP to port 80 is redirected */
#define PROXY_TLS_PORT 49443      /* ... and to port 443 */
#define PROXY_UID 64731           /* the proxy's uid and gid: nftables knows its connections */

/* An allow entry "CIDR[:PORT[-PORT]]" in [s, end). */
int egress_parse_rule(const char *s, const char *end, egress_rule_t *r);
/* The next item of a comma-separated list, spaces trimmed: [*s, *e); false
 * at the end.  *rest moves past it. */
bool egress_next_item(const char **rest, const char **s, const char **e);
void egress_put_addr(FILE *f, uint32_t a);
/* The path of a system tool (ip, nft, tc, haproxy), NULL if missing; a
 * static buffer. */
const char *egress_tool(const char *name);
/* Runs a0 with args (NULL-ended, at most 14), its first line of output in
 * the error. */
int egress_run(sg_error_t **err, const char *a0, const char *const *args);
/* Runs nft with script (a file: nft -f). */
int egress_nft(const char *script, sg_error_t **err);
/* Calls fn with the id and index of each sandbox directory in kernels_dir
 * that holds an index. */
typedef void(index_fn)(const char *id, int n, void *arg);
void egress_each_index(const char *kernels_dir, index_fn *fn, void *arg);
/* tenant's limit (tenants.c: its keys-file line's egress=), or NULL. */
const char *egress_tenant_limit(const char *tenant);
/* The index N of the sandbox in dir (its veth sghN), -1 if none. */
int egress_index_of(const char *dir);
bool egress_link_exists(int n);
/* DIR/egress-rules as the chain sbN, the map's entry and, when it names
 * hosts, the proxy's rules; without the file, none of them. */
int egress_apply_rules(const char *dir, int n, sg_error_t **err);

/* The proxy (HAProxy, proxy.lua): started by egress_setup when haproxy is
 * installed, in STATE/egress-proxy; a leftover one (its pid file) is
 * stopped first.  proxy_rules gives it sandbox n's rules, its tenant's
 * limit (NULL: none) and header lines (egress_transform_lines; all empty:
 * it forgets the sandbox); proxy_up says whether it runs, and if not why
 * (*err). */
int egress_proxy_start(const egress_policy_t *p, const char *state_dir, sg_error_t **err);
void egress_proxy_stop(void);
bool egress_proxy_up(sg_error_t **err);
int egress_proxy_rules(int n, const char *allow, const char *deny, const char *limit,
                       const char *headers, sg_error_t **err);
/* STATE, once egress_proxy_start has run (the secrets' record and key);
 * STATE/egress-proxy. */
const char *egress_state_dir(void);
const char *egress_proxy_dir(void);
/* One request to the proxy's unix socket socket_name (rules.sock: proxy.lua;
 * admin.sock: HAProxy's runtime API), its whole answer in answer; -1 if it
 * could not be sent. */
int egress_proxy_say(const char *socket_name, const char *request, char *answer, size_t size);

/* certs.c.  egress_make_ca: the proxy's CA in dir (ca.crt, ca.key, made
 * once), the key its own certificate has (default.pem), and certs.list,
 * the certificates HAProxy loads at its start.  egress_proxy_cert: a
 * certificate for host ("*.example.com" too) signed by the CA, made once
 * and given to the running proxy, which shows it to a sandbox whose TLS to
 * host it opens (a rule's headers). */
int egress_make_ca(const char *dir, sg_error_t **err);
int egress_proxy_cert(const char *host, sg_error_t **err);

/* A host name in [s, e): letters, digits and '-' in labels, or "*." and
 * one (any name under it). */
bool egress_name_ok(const char *s, const char *e);
/* The proxy's "header HOST\tNAME\tVALUE" lines for transforms (JSON text,
 * egress_check_transforms's), each ${e2b.secrets.NAME} replaced by tenant's
 * secret, opened with the sealing key (the caller wipes and frees them).
 * strict: a secret that is not there is an error; else its header is left
 * out (a secret deleted since the rules were set). */
char *egress_transform_lines(const char *transforms, const char *tenant, bool strict,
                             sg_error_t **err);
/* egress_proxy_cert for each host of transforms. */
int egress_transform_certs(const char *transforms, sg_error_t **err);
/* The connections the proxy refused, {"sghN": {RULE: COUNT}} (RULE:
 * "denyOut ENTRY", or "unresolved allowOut ENTRY"); NULL when it does not
 * run or answer. */
json_t *egress_proxy_refused(void);

#endif
