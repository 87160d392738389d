/* webhooks: lifecycle events pushed to HTTP receivers (events.h).
 *
 * A webhook is the server's (--webhook URL: every tenant's events) or a
 * tenant's, made through E2B's API (POST /events/webhooks {name, url,
 * enabled, events, signatureSecret}; GET, PATCH, DELETE /events/webhooks/
 * {id}; sandgate's GET /events/webhooks/{id}/deliveries), at most
 * WEBHOOKS_PER_TENANT each, kept in STATE/webhooks.json across restarts.
 *
 * Each gets its events in order, one POST at a time, the event as the body
 * (E2B's shape), with E2B's headers — e2b-webhook-id, e2b-delivery-id,
 * e2b-signature-version v1, e2b-signature: base64 (unpadded) of SHA-256 of
 * the secret then the body — and X-Sandgate-Signature: sha256=HEX of
 * HMAC-SHA256(secret, body).  A 2xx answer delivers it; anything else (no
 * connection, a timeout of HOOK_TIMEOUT_MS, another status) is retried after
 * 1, 2, 4 ... HOOK_BACKOFF_MAX_MS, so a receiver that is down loses nothing
 * while it comes back within the queue's bound (HOOK_QUEUE_MAX events; past
 * it the oldest go, counted).  Everything is on the loop, non-blocking: a
 * slow receiver holds only its own queue.  URLs are http:// with a numeric
 * address or a name resolved when the webhook is made (or sandgate starts).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/events/internal.h"

#define HOOK_TIMEOUT_MS 10000
#define HOOK_BACKOFF_MAX_MS 300000
#define HOOK_QUEUE_MAX 10000
#define HOOK_LOG_MAX 100
#define WEBHOOKS_MAX_TEXT "10" /* WEBHOOKS_PER_TENANT */

struct hook {
    webhooks_t *all;
    char id[40];
    char *tenant; /* NULL: the server's */
    json_t *conf; /* {name, url, enabled, events, signatureSecret, createdAt} */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *host, *path;
    json_t *queue; /* events to deliver, oldest first */
    unsigned dropped;
    int attempt, timer, deadline;
    int fd;
    loop_io_t *io;
    char *out;
    size_t out_len, out_off;
    char in[256];
    size_t in_len;
    char delivery[40];
    json_t *log; /* the last deliveries, newest last */
    hook_t *next;
};

static void hook_try(hook_t *h);

static void uuid(char out[40])
{
    unsigned char r[16];
    randombytes_buf(r, sizeof r);
    r[6] = (r[6] & 0x0f) | 0x40;
    r[8] = (r[8] & 0x3f) | 0x80;
    snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
             r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
             r[14], r[15]);
}

/* url's address and path into h; -1 with *err. */
static int hook_resolve(hook_t *h, const char *url, sg_error_t **err)
{
    if (strncmp(url, "http://", 7) != 0)
        return sg_error_set(err, SG_E_INVALID, "a webhook's url is http://HOST[:PORT]/PATH");
    const char *host = url + 7, *slash = strchr(host, '/');
    cleanup_free char *hp = slash ? xstrndup(host, (size_t)(slash - host)) : xstrdup(host);
    char *colon = strrchr(hp, ':');
    const char *port = colon && !strchr(colon, ']') ? colon + 1 : "80";
    if (colon && !strchr(colon, ']'))
        *colon = '\0';
    char *name = hp;
    if (name[0] == '[') { /* [IPv6] */
        name++;
        name[strcspn(name, "]")] = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (!*name || getaddrinfo(name, port, &hints, &ai) != 0 || !ai)
        return sg_error_set(err, SG_E_INVALID, "a webhook's host cannot be resolved: %s", url);
    memcpy(&h->addr, ai->ai_addr, ai->ai_addrlen);
    h->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    free(h->host);
    free(h->path);
    h->host = slash ? xstrndup(host, (size_t)(slash - host)) : xstrdup(host);
    h->path = xstrdup(slash ? slash : "/");
    return 0;
}

static void conn_end(hook_t *h)
{
    loop_io_remove(h->all->loop, &h->io);
    loop_timer_end(h->all->loop, h->deadline);
    h->deadline = -1;
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    free(h->out);
    h->out = NULL;
    h->out_len = h->out_off = h->in_len = 0;
}

static void log_delivery(hook_t *h, const json_t *e, int status, const char *error)
{
    json_t *entry = json_pack("{s:s, s:s?, s:s?, s:i, s:o}", "delivery", h->delivery, "event",
                              json_string_value(json_object_get(e, "id")), "type",
                              json_string_value(json_object_get(e, "type")), "attempt",
                              h->attempt + 1, "at", resp_iso_time(events_now_ms()));
    if (status)
        json_object_set_new(entry, "status", json_integer(status));
    if (error)
        json_object_set_new(entry, "error", json_string(error));
    json_array_append_new(h->log, entry);
    if (json_array_size(h->log) > HOOK_LOG_MAX)
        json_array_remove(h->log, 0);
}

static void on_retry(loop_t *loop, int id, void *arg)
{
    hook_t *h = arg;
    h->timer = -1;
    hook_try(h);
}

/* The head's attempt ended: delivered (status 2xx), or to be tried again. */
static void attempt_done(hook_t *h, int status, const char *error)
{
    json_t *e = json_array_get(h->queue, 0);
    log_delivery(h, e, status, error);
    conn_end(h);
    if (status >= 200 && status < 300) {
        json_array_remove(h->queue, 0);
        h->attempt = 0;
        hook_try(h);
        return;
    }
    int64_t wait = 1000;
    for (int i = 0; i < h->attempt && wait < HOOK_BACKOFF_MAX_MS; i++)
        wait *= 2;
    h->attempt++;
    log_info("events: webhook %s: %s; again in %lld ms", h->id, error ? error : "not a 2xx answer",
             (long long)wait);
    h->timer = loop_timer(h->all->loop, wait < HOOK_BACKOFF_MAX_MS ? wait : HOOK_BACKOFF_MAX_MS, 1,
                          on_retry, h);
}

static void on_deadline(loop_t *loop, int id, void *arg)
{
    hook_t *h = arg;
    h->deadline = -1;
    attempt_done(h, 0, "no answer in time");
}

static void on_io(loop_t *loop, int fd, unsigned events, void *arg)
{
    hook_t *h = arg;
    if (h->out_off < h->out_len && (events & (LOOP_WRITE | LOOP_ERROR))) {
        ssize_t n = send(fd, h->out + h->out_off, h->out_len - h->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            attempt_done(h, 0, strerror(errno));
            return;
        }
        h->out_off += n > 0 ? (size_t)n : 0;
        if (h->out_off == h->out_len)
            loop_fd_set_events(loop, h->io, LOOP_READ, NULL);
        return;
    }
    ssize_t n = recv(fd, h->in + h->in_len, sizeof h->in - 1 - h->in_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0)
        h->in_len += (size_t)n;
    h->in[h->in_len] = '\0';
    int status = 0;
    if (strchr(h->in, '\n') || n <= 0 || h->in_len == sizeof h->in - 1) {
        if (sscanf(h->in, "HTTP/1.%*d %d", &status) != 1)
            status = 0;
        attempt_done(h, status, status ? NULL : n < 0 ? strerror(errno) : "no HTTP answer");
    }
}

/* The request for e: its headers signed with the webhook's secret. */
static char *request(hook_t *h, const json_t *e, size_t *len)
{
    json_t *pub = json_deep_copy(e);
    json_object_del(pub, "_ms");
    cleanup_free char *body = json_dumps(pub, JSON_COMPACT);
    json_decref(pub);
    const char *secret = json_string_value(json_object_get(h->conf, "signatureSecret"));
    secret = secret ? secret : "";
    size_t bl = strlen(body), sl = strlen(secret);
    unsigned char digest[crypto_hash_sha256_BYTES], mac[crypto_auth_hmacsha256_BYTES];
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const unsigned char *)secret, sl);
    crypto_hash_sha256_update(&st, (const unsigned char *)body, bl);
    crypto_hash_sha256_final(&st, digest);
    char b64[64], hex[2 * sizeof mac + 1];
    sodium_bin2base64(b64, sizeof b64, digest, sizeof digest, sodium_base64_VARIANT_ORIGINAL);
    b64[strcspn(b64, "=")] = '\0';
    crypto_auth_hmacsha256_state hs;
    crypto_auth_hmacsha256_init(&hs, (const unsigned char *)secret, sl);
    crypto_auth_hmacsha256_update(&hs, (const unsigned char *)body, bl);
    crypto_auth_hmacsha256_final(&hs, mac);
    sodium_bin2hex(hex, sizeof hex, mac, sizeof mac);
    char *req = xasprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\nUser-Agent: sandgate\r\n"
                          "e2b-webhook-id: %s\r\ne2b-delivery-id: %s\r\n"
                          "e2b-signature-version: v1\r\ne2b-signature: %s\r\n"
                          "X-Sandgate-Signature: sha256=%s\r\n\r\n%s",
                          h->path, h->host, bl, h->id, h->delivery, b64, hex, body);
    *len = strlen(req);
    return req;
}

/* Sends the queue's head, unless one is on its way or waits for a retry. */
static void hook_try(hook_t *h)
{
    if (h->fd >= 0 || h->timer >= 0 || !json_array_size(h->queue))
        return;
    uuid(h->delivery);
    h->out = request(h, json_array_get(h->queue, 0), &h->out_len);
    h->fd = socket(h->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0 ||
        (connect(h->fd, (struct sockaddr *)&h->addr, h->addrlen) < 0 && errno != EINPROGRESS)) {
        attempt_done(h, 0, strerror(errno));
        return;
    }
    h->io = loop_fd_add(h->all->loop, h->fd, LOOP_WRITE, on_io, h, NULL);
    h->deadline = loop_timer(h->all->loop, HOOK_TIMEOUT_MS, 1, on_deadline, h);
    if (!h->io)
        attempt_done(h, 0, "out of memory");
}

/* --- the webhooks --------------------------------------------------------------------- */

static bool wants(const hook_t *h, const json_t *e)
{
    const char *tenant = json_string_value(json_object_get(e, "sandboxTeamId"));
    if (!json_is_true(json_object_get(h->conf, "enabled")) ||
        (h->tenant && strcmp(h->tenant, tenant) != 0))
        return false;
    json_t *types = json_object_get(h->conf, "events"), *t;
    size_t i;
    const char *type = json_string_value(json_object_get(e, "type"));
    json_array_foreach (types, i, t)
        if (strcmp(json_string_value(t), type) == 0)
            return true;
    return json_array_size(types) == 0;
}

void webhooks_push(webhooks_t *self, const json_t *e)
{
    for (hook_t *h = self ? self->hooks : NULL; h; h = h->next) {
        if (!wants(h, e))
            continue;
        if (json_array_size(h->queue) >= HOOK_QUEUE_MAX) {
            json_array_remove(h->queue, 0);
            h->dropped++;
        }
        json_array_append(h->queue, (json_t *)e);
        hook_try(h);
    }
}

static void hook_free(hook_t *h)
{
    conn_end(h);
    loop_timer_end(h->all->loop, h->timer);
    json_decref(h->queue);
    json_decref(h->log);
    json_decref(h->conf);
    free(h->tenant);
    free(h->host);
    free(h->path);
    free(h);
}

/* A webhook of tenant (NULL: the server's) from conf (taken); NULL with *err. */
static hook_t *hook_new(webhooks_t *self, const char *id, const char *tenant, json_t *conf,
                        sg_error_t **err)
{
    hook_t *h = xzalloc(sizeof *h);
    *h = (hook_t){.all = self, .conf = conf, .fd = -1, .timer = -1, .deadline = -1};
    snprintf(h->id, sizeof h->id, "%s", id);
    h->tenant = tenant ? xstrdup(tenant) : NULL;
    h->queue = json_array();
    h->log = json_array();
    if (hook_resolve(h, json_string_value(json_object_get(conf, "url")), err) < 0) {
        hook_free(h);
        return NULL;
    }
    h->next = self->hooks;
    self->hooks = h;
    return h;
}

static void save(webhooks_t *self)
{
    if (!self->path)
        return;
    json_t *all = json_array();
    for (hook_t *h = self->hooks; h; h = h->next)
        if (h->tenant)
            json_array_append_new(all, json_pack("{s:s, s:s, s:O}", "id", h->id, "tenant",
                                                 h->tenant, "conf", h->conf));
    cleanup_free char *tmp = xasprintf("%s.new", self->path);
    if (json_dump_file(all, tmp, JSON_COMPACT) == 0) {
        chmod(tmp, 0600);
        rename(tmp, self->path);
    }
    json_decref(all);
}

webhooks_t *webhooks_new(loop_t *loop, const char *state_dir, const char *url, const char *secret,
                         sg_error_t **err)
{
    webhooks_t *self = xzalloc(sizeof *self);
    self->loop = loop;
    self->path = state_dir ? xasprintf("%s/webhooks.json", state_dir) : NULL;
    if (url && !hook_new(self, "server", NULL,
                         json_pack("{s:s, s:s, s:b, s:[], s:s}", "name", "--webhook", "url", url,
                                   "enabled", 1, "events", "signatureSecret", secret ? secret : ""),
                         err)) {
        webhooks_destroy(&self);
        return NULL;
    }
    json_t *saved = self->path ? json_load_file(self->path, 0, NULL) : NULL;
    size_t i;
    json_t *w;
    json_array_foreach (saved, i, w) {
        sg_error_t *e = NULL;
        if (!hook_new(self, json_string_value(json_object_get(w, "id")),
                      json_string_value(json_object_get(w, "tenant")),
                      json_incref(json_object_get(w, "conf")), &e)) {
            log_warn("events: a saved webhook is left out: %s", e->msg);
            sg_error_free(&e);
        }
    }
    json_decref(saved);
    return self;
}

void webhooks_destroy(webhooks_t **self_p)
{
    webhooks_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    while (self->hooks) {
        hook_t *h = self->hooks;
        self->hooks = h->next;
        hook_free(h);
    }
    free(self->path);
    free(self);
}

/* --- E2B's API ------------------------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    return http_reply_json(conn, status, json_pack("{s:i, s:s}", "code", status, "message", msg));
}

static json_t *model(const hook_t *h)
{
    json_t *m = json_deep_copy(h->conf);
    json_object_del(m, "signatureSecret");
    json_object_set_new(m, "id", json_string(h->id));
    json_object_set_new(m, "teamId", json_string(h->tenant ? h->tenant : ""));
    json_object_set_new(m, "teamID", json_string(h->tenant ? h->tenant : ""));
    json_object_set_new(m, "queued", json_integer((json_int_t)json_array_size(h->queue)));
    json_object_set_new(m, "dropped", json_integer(h->dropped));
    return m;
}

/* conf's fields from body (a new webhook's, or a PATCH's onto conf); NULL or why. */
static const char *take(json_t *conf, const json_t *body)
{
    const char *k;
    json_t *v, *t;
    json_object_foreach ((json_t *)body, k, v) {
        size_t i;
        if ((!strcmp(k, "name") || !strcmp(k, "url") || !strcmp(k, "signatureSecret")) &&
            json_is_string(v))
            json_object_set(conf, k, v);
        else if (!strcmp(k, "enabled") && json_is_boolean(v))
            json_object_set(conf, k, v);
        else if (!strcmp(k, "events") && json_is_array(v)) {
            json_array_foreach (v, i, t)
                if (!json_is_string(t) || strncmp(json_string_value(t), "sandbox.lifecycle.", 18))
                    return "events are sandbox.lifecycle.* names";
            json_object_set(conf, k, v);
        } else
            return "a webhook has name, url, enabled, events and signatureSecret";
    }
    return json_is_string(json_object_get(conf, "url")) ? NULL : "url is needed";
}

static hook_t *hook_of(webhooks_t *self, const http_req_t *req, const char *id)
{
    for (hook_t *h = self->hooks; h; h = h->next)
        if (strcmp(h->id, id) == 0 && h->tenant && http_may_see(req, h->tenant))
            return h;
    return NULL;
}

enum MHD_Result webhooks_route(webhooks_t *self, http_req_t *req)
{
    const char *rest = req->rest && req->rest[0] == '/' ? req->rest + 1 : "";
    cleanup_free char *id = xstrndup(rest, strcspn(rest, "/"));
    const char *sub = rest + strlen(id);
    bool get = !strcmp(req->method, "GET"), post = !strcmp(req->method, "POST");
    if (!req->tenant || req->scope)
        return reply(req->conn, 403, "webhooks are a tenant key's");
    if (!*id && get) {
        json_t *list = json_array();
        for (hook_t *h = self->hooks; h; h = h->next)
            if (h->tenant && http_may_see(req, h->tenant))
                json_array_append_new(list, model(h));
        return http_reply_json(req->conn, 200, list);
    }
    json_error_t jerr;
    json_t *body = req->len ? json_loadb(req->body, req->len, 0, &jerr) : json_object();
    if (!*id && post) {
        unsigned n = 0;
        for (hook_t *h = self->hooks; h; h = h->next)
            n += h->tenant && strcmp(h->tenant, req->tenant->name) == 0;
        json_t *conf = json_pack("{s:s, s:b, s:[], s:o}", "name", "", "enabled", 1, "events",
                                 "createdAt", resp_iso_time(events_now_ms()));
        const char *why = json_is_object(body) ? take(conf, body) : "the body is a JSON object";
        json_decref(body);
        char nid[40];
        uuid(nid);
        sg_error_t *err = NULL;
        hook_t *h = why || n >= WEBHOOKS_PER_TENANT
                        ? NULL
                        : hook_new(self, nid, req->tenant->name, json_incref(conf), &err);
        json_decref(conf);
        enum MHD_Result ret =
            h     ? http_reply_json(req->conn, 201, model(h))
            : err ? reply(req->conn, 400, err->msg)
            : why ? reply(req->conn, 400, why)
                  : reply(req->conn, 429, "a tenant has " WEBHOOKS_MAX_TEXT " webhooks at most");
        sg_error_free(&err);
        if (h)
            save(self);
        return ret;
    }
    hook_t *h = *id ? hook_of(self, req, id) : NULL;
    if (!h) {
        json_decref(body);
        return reply(req->conn, 404, "no such webhook");
    }
    enum MHD_Result ret;
    if (get && !strcmp(sub, "/deliveries"))
        ret = http_reply_json(req->conn, 200, json_incref(h->log));
    else if (get && !*sub)
        ret = http_reply_json(req->conn, 200, model(h));
    else if (!strcmp(req->method, "DELETE") && !*sub) {
        for (hook_t **pp = &self->hooks; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                break;
            }
        hook_free(h);
        save(self);
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        ret = http_queue(req->conn, 204, r);
        MHD_destroy_response(r);
    } else if (!strcmp(req->method, "PATCH") && !*sub) {
        json_t *conf = json_deep_copy(h->conf);
        const char *why = json_is_object(body) ? take(conf, body) : "the body is a JSON object";
        sg_error_t *err = NULL;
        if (!why && hook_resolve(h, json_string_value(json_object_get(conf, "url")), &err) < 0)
            why = err->msg;
        ret = why ? reply(req->conn, 400, why) : MHD_YES;
        sg_error_free(&err);
        if (!why) {
            json_decref(h->conf);
            h->conf = json_incref(conf);
            save(self);
            ret = http_reply_json(req->conn, 200, model(h));
        }
        json_decref(conf);
    } else
        ret = reply(req->conn, 405, "GET, PATCH or DELETE a webhook; GET its deliveries");
    json_decref(body);
    return ret;
}
