#include "gateway/http/resp.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "gateway/http/http.h"

struct resp {
    loop_t *loop;
    struct MHD_Connection *conn;
    void (*wake)(void *);
    void *wake_arg;
    bool suspended, gone, ended, aborted;
    char *buf; /* written, not yet sent: buf[off, len), cap allocated */
    size_t len, off, cap;
    char *keepalive;
    int keepalive_timer;
    void (*drained)(void *);
    void *drained_arg;
    bool wrote_since_tick;
};

resp_t *resp_new(loop_t *loop, struct MHD_Connection *conn, void (*wake)(void *), void *wake_arg)
{
    resp_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->conn = conn;
    self->wake = wake;
    self->wake_arg = wake_arg;
    self->keepalive_timer = -1;
    return self;
}

void resp_free(resp_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    resp_t *self = *self_p;
    loop_timer_end(self->loop, self->keepalive_timer);
    free(self->buf);
    free(self->keepalive);
    free(self);
    *self_p = NULL;
}

static void resume(resp_t *self)
{
    if (self->suspended && !self->gone) {
        self->suspended = false;
        http_resume(self->conn);
        if (self->wake)
            self->wake(self->wake_arg);
    }
}

static ssize_t read_body(void *cls, uint64_t pos, char *out, size_t max)
{
    resp_t *self = cls;
    if (self->off < self->len) {
        size_t n = self->len - self->off < max ? self->len - self->off : max;
        memcpy(out, self->buf + self->off, n);
        self->off += n;
        if (self->off == self->len && self->drained)
            self->drained(self->drained_arg);
        return (ssize_t)n;
    }
    if (self->ended)
        return self->aborted ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    if (!http_suspend(self->conn)) /* its key was revoked: the stream ends */
        return MHD_CONTENT_READER_END_WITH_ERROR;
    self->suspended = true;
    return 0;
}

static void free_nothing(void *cls)
{
    /* The owner frees the resp, after the request is over. */
}

static void on_keepalive(loop_t *loop, int timer_id, void *arg)
{
    resp_t *self = arg;
    if (!self->ended && !self->wrote_since_tick)
        resp_write(self, self->keepalive, strlen(self->keepalive));
    self->wrote_since_tick = false;
}

struct MHD_Response *resp_stream(resp_t *self, const char *keepalive)
{
    if (keepalive) {
        self->keepalive = xstrdup(keepalive);
        self->keepalive_timer = loop_timer(self->loop, RESP_KEEPALIVE_MS, 0, on_keepalive, self);
    }
    return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_body, self,
                                             free_nothing);
}

void resp_write(resp_t *self, const char *data, size_t n)
{
    if (self->gone || self->ended)
        return;
    if (self->off > 0 && self->off == self->len)
        self->off = self->len = 0;
    if (self->len + n > self->cap && self->off > 0) { /* what was sent makes room */
        memmove(self->buf, self->buf + self->off, self->len - self->off);
        self->len -= self->off;
        self->off = 0;
    }
    if (self->len + n > self->cap) { /* doubling: a stream of small writes copies little */
        self->cap = self->cap * 2 > self->len + n ? self->cap * 2 : self->len + n;
        self->buf = xrealloc(self->buf, self->cap);
    }
    memcpy(self->buf + self->len, data, n);
    self->len += n;
    self->wrote_since_tick = true;
    resume(self);
}

size_t resp_pending(const resp_t *self)
{
    return self->len - self->off;
}

void resp_on_drained(resp_t *self, void (*fn)(void *arg), void *arg)
{
    self->drained = fn;
    self->drained_arg = arg;
}

void resp_end(resp_t *self)
{
    self->ended = true;
    loop_timer_end(self->loop, self->keepalive_timer);
    self->keepalive_timer = -1;
    resume(self);
}

void resp_abort(resp_t *self)
{
    self->aborted = true;
    resp_end(self);
}

enum MHD_Result resp_wait(resp_t *self)
{
    self->suspended = true;
    http_suspend(self->conn);
    return MHD_YES;
}

void resp_ready(resp_t *self)
{
    resume(self);
}

void resp_set_gone(resp_t *self)
{
    self->gone = true;
    loop_timer_end(self->loop, self->keepalive_timer);
    self->keepalive_timer = -1;
}

bool resp_gone(const resp_t *self)
{
    return self->gone;
}

json_t *resp_iso_time(int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03dZ", (int)(ms % 1000));
    return json_string(when);
}
