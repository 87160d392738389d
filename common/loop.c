#include "common/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"

_Static_assert(LOOP_READ == EPOLLIN && LOOP_WRITE == EPOLLOUT &&
                   LOOP_ERROR == (EPOLLERR | EPOLLHUP),
               "LOOP_* are epoll's values");

struct loop_io {
    int fd;
    unsigned events;
    bool removed;
    zsock_t *sock; /* NULL for a plain fd */
    loop_fd_fn *fd_fn;
    loop_zsock_fn *zsock_fn;
    void *arg;
    bool queued; /* on the ready list */
    loop_io_t *next_ready, *next_dead;
    loop_io_t *prev, *next; /* every live registration, for loop_destroy */
};

/* Timer ids: the slot in the lower bits, the slot's generation above, so an
 * id that ran out never names the slot's next timer. */
#define SLOT_BITS 20
#define SLOT_MASK ((1u << SLOT_BITS) - 1)

typedef struct {
    int id;
    int64_t when; /* ms, CLOCK_MONOTONIC */
    int64_t interval;
    size_t times; /* left; 0: forever */
    uint64_t seq; /* ties fire in the order they were armed */
    loop_timer_fn *fn;
    void *arg;
    size_t heap_pos;
} ltimer_t;

typedef struct hook {
    loop_hook_fn *fn;
    void *arg;
    struct hook *next;
} hook_t;

typedef struct deferred {
    void (*fn)(void *);
    void *arg;
    struct deferred *next;
} deferred_t;

typedef struct sigwatch {
    int signo;
    loop_signal_fn *fn;
    void *arg;
    struct sigwatch *next;
} sigwatch_t;

struct loop {
    int epfd;
    bool stop;
    loop_io_t *ready, **ready_tail; /* ZeroMQ sockets to look at */
    loop_io_t *dead;                /* removed, freed after the pass */
    loop_io_t *ios;                 /* live */

    ltimer_t **slots; /* by slot */
    unsigned *gens;
    size_t nslots;
    unsigned *free_slots;
    size_t nfree;
    ltimer_t **heap;
    size_t nheap, heap_cap;
    uint64_t timer_seq;

    hook_t *hooks;
    deferred_t *deferred, **deferred_tail;

    int sigfd;
    sigset_t sigs;
    loop_io_t *sigio;
    sigwatch_t *sighandlers;

    loop_stats_t stats;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

loop_t *loop_new(void)
{
    loop_t *self = xzalloc(sizeof *self);
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0)
        abort(); /* out of fds or memory at start-up */
    self->ready_tail = &self->ready;
    self->deferred_tail = &self->deferred;
    self->sigfd = -1;
    sigemptyset(&self->sigs);
    return self;
}

/* --- deferred calls ------------------------------------------------------------- */

void loop_defer(loop_t *self, void (*fn)(void *), void *arg)
{
    if (self == NULL) {
        fn(arg);
        return;
    }
    deferred_t *d = xmalloc(sizeof *d);
    *d = (deferred_t){.fn = fn, .arg = arg};
    *self->deferred_tail = d;
    self->deferred_tail = &d->next;
}

static void run_deferred(loop_t *self)
{
    while (self->deferred) { /* a call may defer more: those run too */
        deferred_t *d = self->deferred;
        self->deferred = d->next;
        if (self->deferred == NULL)
            self->deferred_tail = &self->deferred;
        d->fn(d->arg);
        free(d);
    }
}

/* Frees removed registrations that nothing names any more (one still on
 * the ready list waits for the list to drop it). */
static void free_dead(loop_t *self)
{
    loop_io_t *keep = NULL;
    while (self->dead) {
        loop_io_t *io = self->dead;
        self->dead = io->next_dead;
        if (io->queued) {
            io->next_dead = keep;
            keep = io;
        } else {
            free(io);
        }
    }
    self->dead = keep;
}

/* --- timers: a binary min-heap on (when, seq) ------------------------------------ */

static bool earlier(const ltimer_t *a, const ltimer_t *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static void heap_set(loop_t *self, size_t i, ltimer_t *t)
{
    self->heap[i] = t;
    t->heap_pos = i;
}

static void sift_up(loop_t *self, size_t i)
{
    ltimer_t *t = self->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(t, self->heap[parent]))
            break;
        heap_set(self, i, self->heap[parent]);
        i = parent;
    }
    heap_set(self, i, t);
}

static void sift_down(loop_t *self, size_t i)
{
    ltimer_t *t = self->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= self->nheap)
            break;
        if (child + 1 < self->nheap && earlier(self->heap[child + 1], self->heap[child]))
            child++;
        if (!earlier(self->heap[child], t))
            break;
        heap_set(self, i, self->heap[child]);
        i = child;
    }
    heap_set(self, i, t);
}

static void heap_push(loop_t *self, ltimer_t *t)
{
    if (self->nheap == self->heap_cap) {
        self->heap_cap = self->heap_cap ? 2 * self->heap_cap : 64;
        self->heap = xrealloc(self->heap, self->heap_cap * sizeof *self->heap);
    }
    heap_set(self, self->nheap++, t);
    sift_up(self, self->nheap - 1);
}

static void heap_remove(loop_t *self, ltimer_t *t)
{
    size_t i = t->heap_pos;
    ltimer_t *last = self->heap[--self->nheap];
    if (i == self->nheap)
        return;
    heap_set(self, i, last);
    if (i > 0 && earlier(last, self->heap[(i - 1) / 2]))
        sift_up(self, i);
    else
        sift_down(self, i);
}

int loop_timer(loop_t *self, int64_t delay_ms, size_t times, loop_timer_fn *fn, void *arg)
{
    unsigned slot;
    if (self->nfree) {
        slot = self->free_slots[--self->nfree];
    } else {
        slot = (unsigned)self->nslots++;
        if (slot > SLOT_MASK)
            abort(); /* a million timers at once: a leak, not a load */
        self->slots = xrealloc(self->slots, self->nslots * sizeof *self->slots);
        self->gens = xrealloc(self->gens, self->nslots * sizeof *self->gens);
        self->free_slots = xrealloc(self->free_slots, self->nslots * sizeof *self->free_slots);
        self->gens[slot] = 0;
    }
    self->gens[slot] = (self->gens[slot] + 1) & 0x3ff; /* ids stay positive ints */
    if (self->gens[slot] == 0)
        self->gens[slot] = 1;
    ltimer_t *t = xmalloc(sizeof *t);
    *t = (ltimer_t){.id = (int)(self->gens[slot] << SLOT_BITS | slot),
                    .when = now_ms() + (delay_ms > 0 ? delay_ms : 0),
                    .interval = delay_ms > 0 ? delay_ms : 0,
                    .times = times,
                    .seq = ++self->timer_seq,
                    .fn = fn,
                    .arg = arg};
    self->slots[slot] = t;
    heap_push(self, t);
    return t->id;
}

static ltimer_t *timer_find(loop_t *self, int id)
{
    if (id <= 0)
        return NULL;
    unsigned slot = (unsigned)id & SLOT_MASK;
    if (slot >= self->nslots || self->slots[slot] == NULL || self->slots[slot]->id != id)
        return NULL;
    return self->slots[slot];
}

static void timer_free(loop_t *self, ltimer_t *t)
{
    unsigned slot = (unsigned)t->id & SLOT_MASK;
    self->slots[slot] = NULL;
    self->free_slots[self->nfree++] = slot;
    free(t);
}

void loop_timer_end(loop_t *self, int timer_id)
{
    ltimer_t *t = timer_find(self, timer_id);
    if (t == NULL)
        return;
    heap_remove(self, t);
    timer_free(self, t);
}

static void run_timers(loop_t *self)
{
    int64_t now = now_ms();
    /* Only timers due now: one re-armed with a 0 ms delay waits for the next pass. */
    uint64_t last_seq = self->timer_seq;
    while (self->nheap && self->heap[0]->when <= now && self->heap[0]->seq <= last_seq) {
        ltimer_t *t = self->heap[0];
        int id = t->id;
        loop_timer_fn *fn = t->fn;
        void *arg = t->arg;
        if (t->times == 1) {
            heap_remove(self, t);
            timer_free(self, t);
        } else {
            if (t->times > 1)
                t->times--;
            t->when = now + t->interval;
            t->seq = ++self->timer_seq;
            sift_down(self, 0);
        }
        self->stats.timer_calls++;
        fn(self, id, arg);
    }
}

/* --- descriptors and ZeroMQ sockets ------------------------------------------------- */

static loop_io_t *io_add(loop_t *self, int fd, unsigned events, sg_error_t **err)
{
    loop_io_t *io = xzalloc(sizeof *io);
    io->fd = fd;
    io->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        sg_error_errno(err, errno, "watching fd %d", fd);
        free(io);
        return NULL;
    }
    io->next = self->ios;
    if (self->ios)
        self->ios->prev = io;
    self->ios = io;
    return io;
}

loop_io_t *loop_fd_add(loop_t *self, int fd, unsigned events, loop_fd_fn *fn, void *arg,
                       sg_error_t **err)
{
    loop_io_t *io = io_add(self, fd, events & (LOOP_READ | LOOP_WRITE), err);
    if (io) {
        io->fd_fn = fn;
        io->arg = arg;
    }
    return io;
}

int loop_fd_set_events(loop_t *self, loop_io_t *io, unsigned events, sg_error_t **err)
{
    events &= LOOP_READ | LOOP_WRITE;
    if (io->removed || io->events == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    if (epoll_ctl(self->epfd, EPOLL_CTL_MOD, io->fd, &ev) < 0)
        return sg_error_errno(err, errno, "watching fd %d", io->fd);
    io->events = events;
    return 0;
}

static void queue_ready(loop_t *self, loop_io_t *io)
{
    if (io->queued || io->removed)
        return;
    io->queued = true;
    io->next_ready = NULL;
    *self->ready_tail = io;
    self->ready_tail = &io->next_ready;
}

loop_io_t *loop_zsock_add(loop_t *self, zsock_t *sock, loop_zsock_fn *fn, void *arg,
                          sg_error_t **err)
{
    loop_io_t *io = io_add(self, zsock_fd(sock), EPOLLIN | EPOLLET, err);
    if (io == NULL)
        return NULL;
    io->sock = sock;
    io->zsock_fn = fn;
    io->arg = arg;
    queue_ready(self, io); /* messages may already wait: the edge came before us */
    return io;
}

void loop_zsock_sent(loop_t *self, loop_io_t *io)
{
    if (io)
        queue_ready(self, io);
}

void loop_io_remove(loop_t *self, loop_io_t **io_p)
{
    if (io_p == NULL || *io_p == NULL)
        return;
    loop_io_t *io = *io_p;
    *io_p = NULL;
    if (io->removed)
        return;
    io->removed = true;
    epoll_ctl(self->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    if (io->prev)
        io->prev->next = io->next;
    else
        self->ios = io->next;
    if (io->next)
        io->next->prev = io->prev;
    io->next_dead = self->dead; /* the ready list or this pass's events may still name it */
    self->dead = io;
}

/* Reads each ready socket until it has nothing, up to the batch size. */
static void drain_ready(loop_t *self)
{
    loop_io_t *list = self->ready;
    self->ready = NULL;
    self->ready_tail = &self->ready;
    while (list) {
        loop_io_t *io = list;
        list = io->next_ready;
        io->queued = false;
        for (int n = 0; !io->removed; n++) {
            if (n == LOOP_ZSOCK_BATCH) {
                queue_ready(self, io); /* more next pass; others first */
                break;
            }
            self->stats.zsock_calls++;
            if (!io->zsock_fn(self, io->sock, io->arg)) {
                self->stats.zsock_empty++;
                break;
            }
        }
    }
}

/* --- signals ----------------------------------------------------------------------- */

static void on_signalfd(loop_t *self, int fd, unsigned events, void *arg)
{
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si)
        for (sigwatch_t *h = self->sighandlers; h; h = h->next)
            if (h->signo == (int)si.ssi_signo)
                h->fn(self, h->signo, h->arg);
}

int loop_signal(loop_t *self, int signo, loop_signal_fn *fn, void *arg, sg_error_t **err)
{
    sigaddset(&self->sigs, signo);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    if (pthread_sigmask(SIG_BLOCK, &one, NULL) != 0)
        return sg_error_set(err, SG_E_INTERNAL, "cannot block signal %d", signo);
    int fd = signalfd(self->sigfd, &self->sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return sg_error_errno(err, errno, "signalfd");
    if (self->sigfd < 0) {
        self->sigfd = fd;
        self->sigio = loop_fd_add(self, fd, LOOP_READ, on_signalfd, NULL, err);
        if (self->sigio == NULL)
            return -1;
    }
    sigwatch_t *h = xmalloc(sizeof *h);
    *h = (sigwatch_t){.signo = signo, .fn = fn, .arg = arg, .next = self->sighandlers};
    self->sighandlers = h;
    return 0;
}

/* --- hooks and the pass --------------------------------------------------------------- */

void loop_hook_add(loop_t *self, loop_hook_fn *fn, void *arg)
{
    hook_t **p = &self->hooks;
    while (*p)
        p = &(*p)->next;
    *p = xzalloc(sizeof **p);
    (*p)->fn = fn;
    (*p)->arg = arg;
}

void loop_hook_remove(loop_t *self, loop_hook_fn *fn, void *arg)
{
    for (hook_t **p = &self->hooks; *p; p = &(*p)->next)
        if ((*p)->fn == fn && (*p)->arg == arg) {
            hook_t *h = *p;
            *p = h->next;
            free(h);
            return;
        }
}

static int wait_ms(loop_t *self, int timeout_ms)
{
    if (self->ready || self->deferred)
        return 0;
    if (self->nheap) {
        int64_t d = self->heap[0]->when - now_ms();
        if (d < 0)
            d = 0;
        if (timeout_ms < 0 || d < timeout_ms)
            timeout_ms = d > INT32_MAX ? INT32_MAX : (int)d;
    }
    return timeout_ms;
}

int loop_once(loop_t *self, int timeout_ms, sg_error_t **err)
{
    bool busy = false;
    for (hook_t *h = self->hooks, *next; h; h = next) {
        next = h->next; /* a hook may remove itself */
        busy |= h->fn(self, h->arg);
    }
    run_deferred(self);
    free_dead(self);

    struct epoll_event events[64];
    self->stats.passes++;
    int n = epoll_wait(self->epfd, events, 64, busy ? 0 : wait_ms(self, timeout_ms));
    if (n < 0 && errno != EINTR)
        return sg_error_errno(err, errno, "epoll_wait");
    for (int i = 0; i < n; i++) {
        loop_io_t *io = events[i].data.ptr;
        if (io->removed)
            continue;
        if (io->sock) {
            queue_ready(self, io);
            continue;
        }
        self->stats.fd_calls++;
        io->fd_fn(self, io->fd, events[i].events, io->arg);
    }
    drain_ready(self);
    run_timers(self);
    run_deferred(self);
    return 0;
}

int loop_run(loop_t *self, sg_error_t **err)
{
    self->stop = false;
    while (!self->stop)
        if (loop_once(self, -1, err) < 0)
            return -1;
    return 0;
}

void loop_stop(loop_t *self)
{
    self->stop = true;
}

void loop_get_stats(const loop_t *self, loop_stats_t *stats)
{
    *stats = self->stats;
}

void loop_destroy(loop_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    loop_t *self = *self_p;
    *self_p = NULL;
    run_deferred(self);
    self->sigio = NULL;
    while (self->ios) {
        loop_io_t *io = self->ios;
        loop_io_remove(self, &io);
    }
    for (loop_io_t *io = self->ready; io; io = io->next_ready)
        io->queued = false;
    free_dead(self);
    if (self->sigfd >= 0) {
        close(self->sigfd);
        sigset_t old = self->sigs;
        pthread_sigmask(SIG_UNBLOCK, &old, NULL);
    }
    while (self->sighandlers) {
        sigwatch_t *h = self->sighandlers;
        self->sighandlers = h->next;
        free(h);
    }
    while (self->hooks) {
        hook_t *h = self->hooks;
        self->hooks = h->next;
        free(h);
    }
    for (size_t i = 0; i < self->nheap; i++)
        free(self->heap[i]);
    free(self->heap);
    free(self->slots);
    free(self->gens);
    free(self->free_slots);
    close(self->epfd);
    free(self);
}
