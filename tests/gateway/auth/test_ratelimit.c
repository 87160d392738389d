/* ratelimit: a tenant's burst, its pace after it, refusal past another
 * second's worth, recovery, and tenants apart. */
#include "gateway/auth/ratelimit.h"
#include "tests/lib/tap.h"

int main(void)
{
    ratelimit_t *rl = ratelimit_new();
    int64_t t = 1000000;
    int now = 0;
    for (int i = 0; i < 10; i++)
        now += ratelimit_take(rl, "mallory", 10, t) == 0;
    is_int(now, 10, "rate 10: a second's worth (10) is served at once");
    int64_t waits[10];
    for (int i = 0; i < 10; i++)
        waits[i] = ratelimit_take(rl, "mallory", 10, t);
    is_int(waits[0], 100, "the 11th waits one interval (100 ms)");
    is_int(waits[9], 1000, "the 20th waits a second");
    int steady = 1;
    for (int i = 1; i < 10; i++)
        steady &= waits[i] - waits[i - 1] == 100;
    ok(steady, "each waits one interval more than the one before");
    is_int(ratelimit_take(rl, "mallory", 10, t), -1,
           "the 21st, past another second's worth, is refused");
    is_int(ratelimit_take(rl, "mallory", 10, t), -1, "and a refusal takes no turn");
    is_int(ratelimit_take(rl, "alice", 10, t), 0, "another tenant is served at once");
    is_int(ratelimit_take(rl, "mallory", 10, t + 100), 1000,
           "100 ms later one turn is free again: a second's wait");
    /* Two seconds after the last turn was given, the whole burst is back. */
    int64_t later = t + 100 + 3000;
    now = 0;
    for (int i = 0; i < 10; i++)
        now += ratelimit_take(rl, "mallory", 10, later) == 0;
    is_int(now, 10, "once the queue has drained, a full burst again");
    /* A steady client at the rate never waits. */
    int waited = 0;
    for (int i = 0; i < 100; i++)
        waited += ratelimit_take(rl, "erin", 50, t + i * 20) != 0;
    is_int(waited, 0, "a client sending at its rate (50/s, every 20 ms) never waits");
    ratelimit_destroy(&rl);
    ok(rl == NULL, "destroy nulls the pointer");
    ratelimit_destroy(&rl);
    ok(1, "and is safe twice");
    return tap_done();
}
