/* The event loop: timers, descriptors, ZeroMQ sockets (edge-triggered,
 * drained in batches), removal during a pass, deferred calls, hooks,
 * signals, and that a pass costs what is ready, not what is registered. */
#include <signal.h>
#include <unistd.h>

#include "common/loop.h"
#include "tests/lib/tap.h"

/* --- timers --------------------------------------------------------------------- */

static char order[64];
static size_t norder;

static void note(loop_t *loop, int id, void *arg)
{
    order[norder++] = *(const char *)arg;
    order[norder] = 0;
}

static int ended_by_a; /* a's callback ends this timer */
static void end_other(loop_t *loop, int id, void *arg)
{
    note(loop, id, arg);
    loop_timer_end(loop, ended_by_a);
}

static void test_timers(void)
{
    loop_t *loop = loop_new();
    norder = 0;
    loop_timer(loop, 30, 1, note, "c");
    loop_timer(loop, 10, 1, note, "a");
    loop_timer(loop, 10, 1, note, "b"); /* same time: in the order armed */
    loop_timer(loop, 20, 2, note, "r"); /* twice */
    int64_t t0 = zclock_mono();
    while (zclock_mono() - t0 < 100)
        loop_once(loop, 10, NULL);
    is_str(order, "abrcr", "timers fire by due time, ties in arming order, repeats count down");

    norder = order[0] = 0;
    ended_by_a = loop_timer(loop, 5, 1, note, "x");
    loop_timer(loop, 1, 1, end_other, "a");
    t0 = zclock_mono();
    while (zclock_mono() - t0 < 30)
        loop_once(loop, 5, NULL);
    is_str(order, "a", "a timer ended by another's callback does not fire");

    /* An id that ran out never names the next timer in its slot. */
    norder = order[0] = 0;
    int old = loop_timer(loop, 0, 1, note, "o");
    loop_once(loop, 0, NULL);
    int fresh = loop_timer(loop, 5, 1, note, "n");
    ok(fresh != old, "a new timer gets a new id (%d, %d)", old, fresh);
    loop_timer_end(loop, old); /* stale: must not end "n" */
    t0 = zclock_mono();
    while (zclock_mono() - t0 < 30)
        loop_once(loop, 5, NULL);
    is_str(order, "on", "ending a timer that ran out is harmless");

    /* Many timers: the heap keeps them in order. */
    norder = order[0] = 0;
    static const char digits[] = "9876543210";
    for (int i = 0; i < 10; i++)
        loop_timer(loop, 2 * (10 - i), 1, note, (void *)&digits[i]);
    t0 = zclock_mono();
    while (norder < 10 && zclock_mono() - t0 < 200)
        loop_once(loop, 50, NULL);
    is_str(order, "0123456789", "ten timers armed out of order fire in order");
    loop_destroy(&loop);
    ok(loop == NULL, "loop_destroy nulls the pointer");
    loop_destroy(&loop);
}

/* --- descriptors ------------------------------------------------------------------ */

typedef struct {
    int calls;
    loop_io_t **victim; /* removed by this callback */
    loop_t *loop;
} fdseen_t;

static void on_fd(loop_t *loop, int fd, unsigned events, void *arg)
{
    fdseen_t *s = arg;
    s->calls++;
    char buf[16];
    if (read(fd, buf, sizeof buf) < 0)
        return;
    if (s->victim)
        loop_io_remove(loop, s->victim);
}

static void test_fds(void)
{
    loop_t *loop = loop_new();
    int p1[2], p2[2];
    if (pipe(p1) < 0 || pipe(p2) < 0)
        abort();
    fdseen_t s1 = {0}, s2 = {0};
    loop_io_t *io2 = NULL;
    loop_io_t *io1 = loop_fd_add(loop, p1[0], LOOP_READ, on_fd, &s1, NULL);
    io2 = loop_fd_add(loop, p2[0], LOOP_READ, on_fd, &s2, NULL);
    s1.victim = &io2;
    s2.victim = &io1;
    /* Both readable in one pass: whichever runs first removes the other. */
    if (write(p1[1], "x", 1) != 1 || write(p2[1], "x", 1) != 1)
        abort();
    loop_once(loop, 100, NULL);
    is_int(s1.calls + s2.calls, 1, "a watch removed earlier in the same pass gets no callback");
    ok((io1 == NULL) != (io2 == NULL), "the removed handle was nulled");

    /* Level-triggered: unread data reports again on the next pass. */
    fdseen_t s3 = {0};
    int p3[2];
    if (pipe(p3) < 0 || write(p3[1], "yy", 2) != 2)
        abort();
    loop_io_t *io3 = loop_fd_add(loop, p3[0], LOOP_READ, on_fd, &s3, NULL);
    loop_once(loop, 100, NULL);
    is_int(s3.calls, 1, "a readable pipe calls back");
    loop_io_remove(loop, &io3);
    if (write(p3[1], "z", 1) != 1)
        abort();
    loop_once(loop, 20, NULL);
    is_int(s3.calls, 1, "no callback after removal");

    /* A hang-up is reported even when only writability was asked for. */
    fdseen_t s4 = {0};
    int p4[2];
    if (pipe(p4) < 0)
        abort();
    loop_io_t *io4 = loop_fd_add(loop, p4[0], 0, on_fd, &s4, NULL);
    close(p4[1]);
    loop_once(loop, 100, NULL);
    ok(s4.calls >= 1, "a hang-up reaches the callback");
    loop_io_remove(loop, &io4);
    loop_io_t *io5 = loop_fd_add(loop, 12345, LOOP_READ, on_fd, NULL, NULL);
    ok(io5 == NULL, "watching a closed fd fails");
    loop_destroy(&loop);
    for (int i = 0; i < 2; i++) {
        close(p1[i]);
        close(p2[i]);
        close(p3[i]);
    }
    close(p4[0]);
}

/* --- ZeroMQ sockets ----------------------------------------------------------------- */

typedef struct {
    int got;
    bool stop_reading;
} zseen_t;

static bool on_zsock(loop_t *loop, zsock_t *sock, void *arg)
{
    zseen_t *s = arg;
    char m[64];
    if (zmq_recv(zsock_resolve(sock), m, sizeof m, ZMQ_DONTWAIT) < 0)
        return false;
    s->got++;
    return true;
}

static void test_zsocks(void)
{
    loop_t *loop = loop_new();
    zsock_t *rx = zsock_new_pair("@inproc://test-loop-batch");
    zsock_t *tx = zsock_new_pair(">inproc://test-loop-batch");
    for (int i = 0; i < 150; i++)
        zstr_send(tx, "m");
    zseen_t s = {0};
    /* The messages came before the watch: their edge is gone. */
    loop_io_t *io = loop_zsock_add(loop, rx, on_zsock, &s, NULL);
    loop_once(loop, 0, NULL);
    is_int(s.got, LOOP_ZSOCK_BATCH, "a socket is read at most %d messages per pass",
           LOOP_ZSOCK_BATCH);
    int64_t t0 = zclock_mono();
    loop_once(loop, 5000, NULL); /* must not sleep: messages are waiting */
    loop_once(loop, 5000, NULL);
    ok(zclock_mono() - t0 < 1000, "the passes after a cut batch do not sleep");
    is_int(s.got, 150, "messages already queued when the watch began are all delivered");

    /* A message sent later wakes the loop through ZMQ_FD. */
    zstr_send(tx, "late");
    loop_once(loop, 2000, NULL);
    is_int(s.got, 151, "a later message is delivered");

    /* Cost: a message on one socket among many idle ones reads ZMQ_EVENTS
     * on that socket only. */
    enum { IDLE = 200 };
    zsock_t *idle_rx[IDLE], *idle_tx[IDLE];
    loop_io_t *idle_io[IDLE];
    zseen_t idle_seen = {0};
    for (int i = 0; i < IDLE; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "inproc://test-loop-idle-%d", i);
        idle_rx[i] = zsock_new(ZMQ_PAIR);
        zsock_bind(idle_rx[i], "%s", ep);
        idle_tx[i] = zsock_new(ZMQ_PAIR);
        zsock_connect(idle_tx[i], "%s", ep);
        idle_io[i] = loop_zsock_add(loop, idle_rx[i], on_zsock, &idle_seen, NULL);
    }
    loop_stats_t before, after;
    /* Settle: each new watch looks once, and the connections' own
     * commands wake their sockets once or twice. */
    for (int i = 0; i < 100; i++) {
        loop_get_stats(loop, &before);
        loop_once(loop, 20, NULL);
        loop_get_stats(loop, &after);
        if (after.zsock_calls == before.zsock_calls)
            break;
    }
    loop_get_stats(loop, &before);
    zstr_send(tx, "one");
    loop_once(loop, 2000, NULL);
    loop_get_stats(loop, &after);
    is_int(s.got, 152, "the message arrived");
    is_int(after.zsock_calls - before.zsock_calls, 2,
           "one message with %d idle sockets registered: 2 receive attempts", IDLE);
    is_int(after.zsock_empty - before.zsock_empty, 1, "the second found nothing and ended it");
    is_int(idle_seen.got, 0, "idle sockets were not called");
    for (int i = 0; i < IDLE; i++) {
        loop_io_remove(loop, &idle_io[i]);
        zsock_destroy(&idle_rx[i]);
        zsock_destroy(&idle_tx[i]);
    }

    /* Removed while queued for reading: no callback, no use after free. */
    zstr_send(tx, "x");
    loop_zsock_sent(loop, io);
    loop_io_remove(loop, &io);
    loop_once(loop, 0, NULL);
    loop_once(loop, 0, NULL);
    is_int(s.got, 152, "a socket removed while queued is not read");
    zsock_destroy(&tx);
    zsock_destroy(&rx);
    loop_destroy(&loop);
}

/* --- deferred calls, hooks, signals --------------------------------------------------- */

static void defer_note(void *arg)
{
    order[norder++] = *(const char *)arg;
    order[norder] = 0;
}

static void defer_more(void *arg)
{
    defer_note(((void **)arg)[0]);
    loop_defer((loop_t *)((void **)arg)[1], defer_note, "z");
}

static void timer_defers(loop_t *loop, int id, void *arg)
{
    loop_defer(loop, defer_note, "d");
    order[norder++] = 't';
    order[norder] = 0;
}

static int hook_calls;
static bool busy_hook(loop_t *loop, void *arg)
{
    hook_calls++;
    return hook_calls < 3;
}

static int signals_seen;
static void on_sig(loop_t *loop, int signo, void *arg)
{
    signals_seen++;
}

static void test_defer_hooks_signals(void)
{
    loop_t *loop = loop_new();
    norder = order[0] = 0;
    loop_timer(loop, 0, 1, timer_defers, NULL);
    loop_once(loop, 100, NULL);
    is_str(order, "td", "a deferred call runs after the pass's callbacks");

    norder = order[0] = 0;
    static void *pair[2] = {"y", NULL};
    pair[1] = loop;
    loop_defer(loop, defer_more, pair);
    loop_destroy(&loop); /* runs what is deferred, and what that defers */
    is_str(order, "yz", "loop_destroy runs deferred calls, chained ones too");

    norder = order[0] = 0;
    loop_defer(NULL, defer_note, "n");
    is_str(order, "n", "without a loop a deferred call runs at once");

    loop = loop_new();
    loop_hook_add(loop, busy_hook, NULL);
    int64_t t0 = zclock_mono();
    for (int i = 0; i < 3; i++)
        loop_once(loop, i < 2 ? 5000 : 30, NULL);
    ok(zclock_mono() - t0 < 1000, "a hook with more to do keeps the wait from sleeping");
    is_int(hook_calls, 3, "hooks run before each wait");
    loop_hook_remove(loop, busy_hook, NULL);
    loop_once(loop, 0, NULL);
    is_int(hook_calls, 3, "a removed hook no longer runs");

    ok(loop_signal(loop, SIGUSR1, on_sig, NULL, NULL) == 0, "SIGUSR1 goes through the loop");
    raise(SIGUSR1);
    raise(SIGUSR1);
    loop_once(loop, 1000, NULL);
    ok(signals_seen >= 1, "the signal reached its callback (%d)", signals_seen);
    loop_destroy(&loop);
}

static void stop_now(loop_t *loop, int id, void *arg)
{
    (*(int *)arg)++;
    if (*(int *)arg == 3)
        loop_stop(loop);
}

int main(void)
{
    zsys_handler_set(NULL);
    test_timers();
    test_fds();
    test_zsocks();
    test_defer_hooks_signals();

    loop_t *loop = loop_new();
    int n = 0;
    loop_timer(loop, 1, 0, stop_now, &n);
    int rc = loop_run(loop, NULL);
    ok(rc == 0 && n == 3, "loop_run returns after loop_stop (%d calls)", n);
    loop_destroy(&loop);
    zsys_shutdown();
    return tap_done();
}
