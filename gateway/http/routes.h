/* routes: the HTTP server's route table — the parameter kinds the
 * front ends register ({context}, {kernel}...) and their routes, matched
 * against a request's method and path (http.h says what patterns mean).
 * http.c's own: front ends register through http_param and http_routes and
 * never include this. */
#ifndef SG_HTTP_ROUTES_H
#define SG_HTTP_ROUTES_H

#include "gateway/http/http.h"

/* A parameter kind: {name} in patterns, and the ids of that kind clients
 * give elsewhere (http_resolve). */
typedef struct {
    char *name;
    http_resolve_fn resolve;
    http_owner_fn owner; /* NULL: objects of this kind belong to nobody */
    void *ctx;
    char *unknown; /* the 404's message; "%s" in it becomes the id */
} param_t;

/* One segment of a pattern: exact text, a {name}, or the final '*'. */
typedef struct {
    char *text;           /* exact: the segment; NULL for {name} and '*' */
    const param_t *param; /* {name}: its kind */
} seg_t;

typedef struct {
    char *method, *pattern;
    seg_t *segs;
    size_t nsegs, nparams;
    bool star; /* the last segment is '*' */
    http_route_t def;
    http_front_t front;
} route_t;

/* Where a path matched a route: its {name}s and the '*' rest. */
typedef struct {
    const char *at[HTTP_MAX_ARGS];
    size_t len[HTTP_MAX_ARGS];
    const char *rest;
} match_t;

typedef struct routetab routetab_t;

routetab_t *routetab_new(void);
/* Frees every route and kind; safe on NULL and twice. */
void routetab_destroy(routetab_t **self_p);

/* http_param's and http_routes' work (the same contracts). */
int routetab_param(routetab_t *self, const char *name, http_resolve_fn resolve, http_owner_fn owner,
                   void *ctx, const char *unknown, sg_error_t **err);
int routetab_add(routetab_t *self, const http_front_t *front, const http_route_t *routes, size_t n,
                 sg_error_t **err);
/* The kind called name (len bytes, not NUL-terminated), or NULL. */
const param_t *routetab_param_find(const routetab_t *self, const char *name, size_t len);
/* The route for method and path (m: its matches), or NULL.  A GET route
 * takes HEAD when no HEAD route does.  Borrowed: valid until destroy. */
const route_t *routetab_find(const routetab_t *self, const char *method, const char *path,
                             match_t *m);
/* The methods whose routes match path, joined ("GET, HEAD, PUT" for Allow
 * with head; "GET or PUT" for a message without), or NULL when none does
 * (a new string).  *first: one of those routes, a public one if there is
 * one. */
char *routetab_methods(const routetab_t *self, const char *path, bool head, const char *last_sep,
                       const route_t **first);

#endif
