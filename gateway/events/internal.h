/* The events room's own: what events.c (the events, read back) and
 * webhooks.c (pushed to receivers) share. */
#ifndef SG_EVENTS_INTERNAL_H
#define SG_EVENTS_INTERNAL_H

#include "gateway/events/events.h"

#define WEBHOOKS_PER_TENANT 10

typedef struct hook hook_t;
typedef struct {
    loop_t *loop;
    char *path; /* STATE/webhooks.json, or NULL */
    hook_t *hooks;
} webhooks_t;

/* Wall clock ms. */
int64_t events_now_ms(void);

/* The server's webhook (url, NULL: none) and the tenants' saved ones;
 * NULL with *err when url is not one. */
webhooks_t *webhooks_new(loop_t *loop, const char *state_dir, const char *url, const char *secret,
                         sg_error_t **err);
void webhooks_destroy(webhooks_t **self_p);
/* A new event (borrowed) for every webhook that wants it. */
void webhooks_push(webhooks_t *self, const json_t *e);
/* ANY /events/webhooks[/ID[/deliveries]]: E2B's webhook API. */
enum MHD_Result webhooks_route(webhooks_t *self, http_req_t *req);

#endif
