/* egress: the network a sandbox reaches when its context opted in.
 *
 * Off unless the operator gives --egress-allow.  Then each opted-in sandbox
 * gets a network namespace (sandgate-SANDBOX_ID) with one veth pair: the
 * host end sghN holds 100.127.X.Y/30 (.1), the sandbox end sgsN (.2) is
 * taken over by runsc's own network stack (--network=sandbox).  One
 * nftables table, "inet sandgate", forwards and masquerades what the policy
 * allows and drops the rest: nothing from a sandbox reaches the host itself
 * (input), other sandboxes, IPv6, or the always-blocked ranges (private,
 * loopback, link-local and metadata, multicast, reserved) unless an allow
 * entry lies inside one of them.  Sandboxes that did not opt in keep
 * --network=none: no interface at all.
 *
 * All of it runs as root, in the launcher. */
#ifndef SG_EGRESS_H
#define SG_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/error.h"

#define EGRESS_MAX_RULES 64
#define EGRESS_MAX_DNS 4

typedef struct {
    uint32_t net;        /* host byte order, masked */
    int prefix;          /* 0..32 */
    uint16_t lo, hi;     /* destination ports (TCP and UDP); 0, 0: every port and protocol */
    bool inside_blocked; /* lies inside an always-blocked range: an explicit exception */
} egress_rule_t;

typedef struct {
    egress_rule_t allow[EGRESS_MAX_RULES];
    size_t nallow;
    uint32_t dns[EGRESS_MAX_DNS];
    size_t ndns;
    unsigned max_conns;  /* connections open at once per sandbox; 0: no limit */
    uint64_t rate;       /* bytes per second per sandbox, each way (tc tbf); 0: no limit */
    const char *ca_file; /* what the egress proxy trusts of the servers it re-encrypts to; NULL:
                            the system's */
} egress_policy_t;

/* "CIDR[:PORT[-PORT]],..." (a bare address is a /32); "" allows nothing. */
int egress_parse_allow(egress_policy_t *p, const char *list, sg_error_t **err);
/* "IP[,IP]": resolvers the sandboxes may use on port 53. */
int egress_parse_dns(egress_policy_t *p, const char *list, sg_error_t **err);

/* The nftables script (for `nft -f`) that replaces table inet sandgate. */
char *egress_ruleset(const egress_policy_t *p);

/* The launcher's side.  egress_setup: checks for ip and nft, turns on IPv4
 * forwarding, installs the table, and removes the namespaces and veths of
 * sandboxes that no longer have a directory under kernels_dir (a crash's
 * leftovers).  egress_teardown: removes every namespace name (a sandbox
 * that still runs keeps its namespace until it ends) and leaves the table,
 * whose rules the sandboxes that run on still need. */
int egress_setup(const egress_policy_t *p, const char *kernels_dir, sg_error_t **err);
void egress_teardown(void);

/* The namespace of sandbox id (its directory dir), made if missing: the
 * index is kept in DIR/net so a resume after a reboot gets the same
 * addresses.  restoring: a runsc restore follows, which takes the
 * sandbox's address and route from the namespace as runsc run did (runsc
 * moves them into the sandbox, so they are put back first).  Returns the
 * namespace's path (free it). */
char *egress_sandbox_up(const egress_policy_t *p, const char *id, const char *dir, bool restoring,
                        sg_error_t **err);
void egress_sandbox_down(const char *id, const char *dir);
/* A sandbox's own rules (E2B's allowOut and denyOut), inside the
 * operator's policy: a destination in deny and not in allow is refused;
 * the rest goes on to the policy, which refuses what it refuses (a
 * sandbox's rules never allow more).  Lists of "ENTRY,...": an address
 * ("ADDR[/PREFIX]", a bare one is a /32; no ports) or a host name
 * ("api.example.com", "*.example.com": any name under it).  Both empty:
 * none.  Kept in DIR/egress-rules, so a resume, a re-adoption and a new
 * table apply them again (egress_sandbox_up, egress_setup); applied at once
 * when the sandbox's network is up — addresses as a chain sbN, entered from
 * the map "sandboxes" by its host veth; names, when there are any, by the
 * egress proxy (proxy.c), to which the set "named" sends the sandbox's TCP
 * to ports 80 and 443.  Connections already open are not cut. */
typedef struct {
    const char *allow, *deny; /* "ENTRY,...": addresses, CIDR ranges, host names */
    const char *transforms;   /* {"HOST": {"HEADER": "VALUE"}} as JSON text: headers the proxy
                                 sets on the sandbox's requests to HOST, a value's
                                 ${e2b.secrets.NAME} the tenant's secret; NULL: none */
    const char *tenant;       /* whose secrets those are */
} egress_own_t;
int egress_sandbox_rules(const char *dir, const egress_own_t *own, sg_error_t **err);
/* Whether allow and deny are such lists: the number of host names in
 * them, or -1 (the error names allowOut or denyOut and the entry). */
int egress_check_rules(const char *allow, const char *deny, sg_error_t **err);
/* Whether transforms is such an object: the number of hosts in it, or -1
 * (the error names the host, the header or the placeholder). */
int egress_check_transforms(const char *transforms, sg_error_t **err);
/* The egress proxy's CA certificate (PEM, to free), which a sandbox trusts
 * to reach a host whose rules set headers over TLS; NULL when no proxy
 * runs. */
char *egress_proxy_ca(void);
/* The tenants' egress limits ("egress=ENTRY,..." on their lines of the keys
 * file, whose text this is): what their sandboxes reach at most, addresses
 * and host names, whatever their own rules say.  Kept in this process;
 * the sandboxes of a tenant whose limit changed have their rules applied
 * again (kernels_dir; NULL: none yet — egress_setup applies them). */
void egress_tenant_limits(const char *keys_text, const char *kernels_dir);
/* Whether the sandbox in dir has a network (DIR/net exists). */
bool egress_sandbox_has(const char *dir);

/* Refused packets: the table counts them in total (counter "refused") and
 * per host veth (set "refused_by", an element from a sandbox's first
 * refusal until its veth goes).  egress_refused reads both with `nft -j`
 * without blocking (proc.c's loop) and calls cb once, unless it returns
 * -1: with {"total": N, "sandboxes": {SANDBOX_ID: N}} (borrowed; sghN is
 * the sandbox whose directory under kernels_dir holds N in its net file;
 * sandboxes that refused nothing are absent), or with why not.  Counted
 * since the table was installed: a new launcher starts from 0.  proc.c
 * keeps 64 KiB of nft's output, ~800 elements: past that, an error. */
typedef void(egress_refused_fn)(const json_t *counts, const sg_error_t *err, void *arg);
int egress_refused(const char *kernels_dir, egress_refused_fn *cb, void *arg, sg_error_t **err);
/* The same from nft's output (JSON documents, one per line); a new
 * reference, or NULL with *err.  For egress_refused and the tests. */
json_t *egress_refused_parse(const char *out, const char *kernels_dir, sg_error_t **err);

#endif
