/* authlimit: failures per address, blocks, windows, the bounded table. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "gateway/auth/authlimit.h"
#include "tests/lib/tap.h"

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

#define SA(a) ((const struct sockaddr *)&(a))

int main(void)
{
    authlimit_t *al = authlimit_new(20, 60000, 300000, 4);
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    int blocked_at = 0;
    for (int i = 1; i <= 30; i++)
        if (authlimit_fail(al, SA(a), 1000 + i) && !blocked_at)
            blocked_at = i;
    is_int(blocked_at, 21, "the 21st failure within the window blocks the address");
    ok(authlimit_blocked(al, SA(a), 2000), "the address is blocked");
    ok(!authlimit_blocked(al, SA(b), 2000), "another address is not");
    is_int(authlimit_blocks_total(al), 1, "one block counted, however many failures follow");
    is_int(authlimit_blocked_now(al, 2000), 1, "one address blocked now");
    ok(!authlimit_blocked(al, SA(a), 1021 + 300000), "the block ends after block_ms");
    ok(!authlimit_fail(al, SA(a), 1021 + 300001), "a failure after the block starts afresh");

    /* Failures spread out: 20 per window never block. */
    int blocks = 0;
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 20; i++)
            blocks += authlimit_fail(al, SA(b), 10000000 + w * 60000 + i * 100);
    is_int(blocks, 0, "20 failures in each of three windows block nothing");
    ok(!authlimit_blocked(al, SA(b), 10000000 + 3 * 60000), "20 a minute never block");

    /* IPv4-mapped IPv6 is the IPv4 address. */
    struct sockaddr_in6 m = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &m.sin6_addr);
    for (int i = 0; i < 21; i++)
        authlimit_fail(al, SA(m), 20000000 + i);
    ok(authlimit_blocked(al, SA(a), 20000100), "::ffff:10.0.0.1 and 10.0.0.1 are one address");
    char buf[64];
    is_str(authlimit_addr_text(SA(m), buf, sizeof buf), "10.0.0.1", "shown as IPv4");

    /* A full table keeps the blocked address over newer failures. */
    for (int i = 0; i < 10; i++) {
        char ip[32];
        snprintf(ip, sizeof ip, "192.168.0.%d", i);
        struct sockaddr_in x = v4(ip);
        authlimit_fail(al, SA(x), 20000200 + i);
    }
    ok(authlimit_blocked(al, SA(a), 20000300), "a blocked address survives a full table");

    /* Unix sockets and a limit of 0 never block. */
    struct sockaddr un = {.sa_family = AF_UNIX};
    blocks = 0;
    for (int i = 0; i < 50; i++)
        blocks += authlimit_fail(al, &un, 1);
    is_int(blocks, 0, "failures over a Unix socket are not counted");
    authlimit_t *off = authlimit_new(0, 60000, 300000, 4);
    for (int i = 0; i < 50; i++)
        authlimit_fail(off, SA(a), i);
    ok(!authlimit_blocked(off, SA(a), 60), "max_failures 0: never blocked");
    authlimit_destroy(&off);
    authlimit_destroy(&al);
    authlimit_destroy(&al);
    ok(al == NULL, "destroy nulls the pointer and is safe twice");
    return tap_done();
}
