/* loop: the one event loop that owns all of a process's I/O.
 *
 * The shape of redis' ae: one epoll set, a timer heap, and a pass that is
 * wait -> dispatch -> timers -> hooks -> deferred calls.  What it watches:
 *
 *  - file descriptors (level-triggered): libmicrohttpd's epoll fd, pidfds,
 *    WebSocket sockets, the launcher link, a signalfd;
 *  - ZeroMQ sockets, through their ZMQ_FD.  That fd is edge-triggered: it
 *    only says something may have changed.  The loop drains a socket that
 *    woke by calling its callback, which receives one message without
 *    waiting, until the callback says nothing was there — a receive that
 *    finds nothing leaves ZMQ_FD armed for the next message — at most
 *    LOOP_ZSOCK_BATCH messages per socket per pass, so one chatty kernel
 *    cannot starve the others; the rest is read on the next pass, which then
 *    does not sleep.  A send can consume the edge of a message that arrived
 *    meanwhile, so whoever sends on a socket calls loop_zsock_sent().
 *
 * Cost per pass is that of the ready events, not of everything registered:
 * an idle kernel's sockets cost nothing until they have something to say.
 *
 * Removal is always safe, even from a callback of the same pass: a removed
 * registration gets no further callback, and its memory is released after
 * the pass.  Objects that callbacks may still reach later in the same pass
 * are freed with loop_defer(), which runs after dispatch, before the next
 * wait.
 *
 * One thread.  Nothing here blocks except the wait itself.
 */
#ifndef SG_LOOP_H
#define SG_LOOP_H

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

typedef struct loop loop_t;
typedef struct loop_io loop_io_t;

/* Events, as epoll names them (the values are epoll's). */
#define LOOP_READ 0x001u  /* EPOLLIN */
#define LOOP_WRITE 0x004u /* EPOLLOUT */
#define LOOP_ERROR 0x018u /* EPOLLERR | EPOLLHUP: always reported */

#define LOOP_ZSOCK_BATCH 64

typedef void(loop_fd_fn)(loop_t *loop, int fd, unsigned events, void *arg);
/* Receives one message from sock without waiting (ZMQ_DONTWAIT); returns
 * false when there was none. */
typedef bool(loop_zsock_fn)(loop_t *loop, zsock_t *sock, void *arg);
typedef void(loop_timer_fn)(loop_t *loop, int timer_id, void *arg);
/* Runs before each wait; returns true when it has more to do at once (the
 * wait then does not sleep). */
typedef bool(loop_hook_fn)(loop_t *loop, void *arg);
typedef void(loop_signal_fn)(loop_t *loop, int signo, void *arg);

loop_t *loop_new(void);
/* Runs what is deferred, then frees the loop; registrations left are
 * dropped (their fds are not closed).  Safe twice. */
void loop_destroy(loop_t **self_p);

/* Runs passes until loop_stop().  Returns 0, or -1 with *err when the wait
 * itself failed. */
int loop_run(loop_t *self, sg_error_t **err);
/* Makes loop_run return after the current pass. */
void loop_stop(loop_t *self);
/* Runs one pass, waiting at most timeout_ms (-1: until something happens). */
int loop_once(loop_t *self, int timeout_ms, sg_error_t **err);

/* Watches fd for events (LOOP_READ and/or LOOP_WRITE; errors always).  The
 * handle belongs to the loop: loop_io_remove() ends it. */
loop_io_t *loop_fd_add(loop_t *self, int fd, unsigned events, loop_fd_fn *fn, void *arg,
                       sg_error_t **err);
int loop_fd_set_events(loop_t *self, loop_io_t *io, unsigned events, sg_error_t **err);

/* Watches a ZeroMQ socket for messages to receive. */
loop_io_t *loop_zsock_add(loop_t *self, zsock_t *sock, loop_zsock_fn *fn, void *arg,
                          sg_error_t **err);
/* A message was sent on io's socket: look at it again before sleeping. */
void loop_zsock_sent(loop_t *self, loop_io_t *io);

/* Ends a watch and nulls *io_p; no callback follows.  NULL is fine. */
void loop_io_remove(loop_t *self, loop_io_t **io_p);

/* Calls fn after delay_ms, times times (0: until ended).  Returns a timer id
 * (> 0) that stays unique for the loop's life, so ending one that already
 * ran out is harmless. */
int loop_timer(loop_t *self, int64_t delay_ms, size_t times, loop_timer_fn *fn, void *arg);
void loop_timer_end(loop_t *self, int timer_id);

/* Calls fn(arg) before every wait (e.g. to run an HTTP library that has
 * work queued).  Hooks run in the order added. */
void loop_hook_add(loop_t *self, loop_hook_fn *fn, void *arg);
void loop_hook_remove(loop_t *self, loop_hook_fn *fn, void *arg);

/* Calls fn(arg) after this pass's callbacks.  With self NULL, at once. */
void loop_defer(loop_t *self, void (*fn)(void *), void *arg);

/* Delivers signo through the loop (a signalfd): blocks it in the calling
 * thread, so call this before any other thread starts (ZeroMQ's I/O thread
 * starts with the first socket) — threads inherit the mask. */
int loop_signal(loop_t *self, int signo, loop_signal_fn *fn, void *arg, sg_error_t **err);

/* What the loop did, for tests and benchmarks. */
typedef struct {
    uint64_t passes;      /* waits */
    uint64_t fd_calls;    /* fd callbacks */
    uint64_t zsock_calls; /* receive attempts */
    uint64_t zsock_empty; /* attempts that found nothing */
    uint64_t timer_calls;
} loop_stats_t;
void loop_get_stats(const loop_t *self, loop_stats_t *stats);

#endif
