/* net: the socket helpers of sandgate-init (init.c): its relay's Unix
 * addresses, and the sandbox's own loopback. */
#include "kernelmgr/guest/net.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Fills a with NAME-PORT; a leading '@' is the abstract namespace.  Returns
 * the address length, 0 when the name does not fit. */
socklen_t guest_unix_addr(struct sockaddr_un *a, const char *name, const char *suffix)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, "%s-%s", name, suffix);
    if (n < 0 || (size_t)n >= sizeof a->sun_path)
        return 0;
    if (name[0] != '@')
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    a->sun_path[0] = '\0';
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

/* TCP and UDP sockets of the sandbox (its loopback), from /proc/net. */
int guest_inet_sockets(void)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp",
                                         "/proc/net/udp6"};
    int n = 0;
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        FILE *f = fopen(tables[i], "re");
        if (f == NULL)
            continue;
        char line[512];
        for (int row = 0; fgets(line, sizeof line, f); row++)
            n += row > 0 && strchr(line, ':') != NULL;
        fclose(f);
    }
    return n;
}

/* A connection to port on the sandbox's loopback (family AF_INET or
 * AF_INET6), non-blocking; -1 with errno when none came within wait_ms. */
int guest_connect_loopback(int family, unsigned port, int wait_ms)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int k = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool v4 = family == AF_INET;
    if (k < 0)
        return -1;
    if (connect(k, v4 ? (struct sockaddr *)&a4 : (struct sockaddr *)&a6,
                v4 ? sizeof a4 : sizeof a6) == 0)
        return k;
    int e = errno;
    struct pollfd pf = {.fd = k, .events = POLLOUT};
    socklen_t len = sizeof e;
    /* A listener whose backlog is full: init waits for it at most this long. */
    if (e == EINPROGRESS && (e = poll(&pf, 1, wait_ms) == 1 ? 0 : ETIMEDOUT) == 0 &&
        getsockopt(k, SOL_SOCKET, SO_ERROR, &e, &len) == 0 && e == 0)
        return k;
    close(k);
    errno = e;
    return -1;
}
