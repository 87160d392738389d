/* defer: run a function on a later pass of the event loop.
 *
 * zloop dispatches one poll's events in a batch: a handler that frees an
 * object whose socket, fd or timer is also ready in the same batch would leave
 * zloop calling into freed memory.  Objects with loop registrations are
 * therefore ended (reader/poller/timer _end) at once but freed through
 * defer_call(), which runs fn(arg) from a timer that cannot fire before the
 * next pass, after zloop has rebuilt its poll set. */
#ifndef SG_DEFER_H
#define SG_DEFER_H

#include <czmq.h>

/* With loop NULL, calls fn(arg) at once. */
void defer_call(zloop_t *loop, void (*fn)(void *), void *arg);
/* Runs every pending call now; before the loop is destroyed. */
void defer_flush(void);

#endif
