/* net: the socket helpers of sandgate-init (init.c). */
#ifndef SG_GUEST_NET_H
#define SG_GUEST_NET_H

#include <sys/socket.h>
#include <sys/un.h>

/* Fills a with NAME-SUFFIX; a leading '@' is the abstract namespace.
 * Returns the address length, 0 when the name does not fit. */
socklen_t guest_unix_addr(struct sockaddr_un *a, const char *name, const char *suffix);
/* TCP and UDP sockets of the sandbox (its loopback), from /proc/net. */
int guest_inet_sockets(void);
/* A non-blocking connection to port on the sandbox's loopback (family
 * AF_INET or AF_INET6), or -1 with errno when none came within wait_ms (a
 * listener whose backlog is full is waited for that long at most). */
int guest_connect_loopback(int family, unsigned port, int wait_ms);

#endif
