#include "gateway/http/routes.h"

#include <string.h>

#include "common/xalloc.h"

struct routetab {
    route_t **routes; /* each its own allocation, so a request's pointer survives the
                         array growing */
    size_t nroutes;
    param_t **params;
    size_t nparams;
};

routetab_t *routetab_new(void)
{
    return xzalloc(sizeof(routetab_t));
}

/* --- parameter kinds --------------------------------------------------------------- */

const param_t *routetab_param_find(const routetab_t *self, const char *name, size_t len)
{
    for (size_t i = 0; i < self->nparams; i++)
        if (strlen(self->params[i]->name) == len && memcmp(self->params[i]->name, name, len) == 0)
            return self->params[i];
    return NULL;
}

int routetab_param(routetab_t *self, const char *name, http_resolve_fn resolve, http_owner_fn owner,
                   void *ctx, const char *unknown, sg_error_t **err)
{
    size_t len = strlen(name);
    const char *pct = strchr(unknown, '%');
    if (len == 0 || strspn(name, "abcdefghijklmnopqrstuvwxyz_") != len || resolve == NULL ||
        (pct && (pct[1] != 's' || strchr(pct + 2, '%'))))
        return sg_error_set(err, SG_E_INVALID,
                            "parameter '%s': a name of [a-z_], a resolver, and at most one %%s "
                            "in its message",
                            name);
    if (routetab_param_find(self, name, len))
        return sg_error_set(err, SG_E_INVALID, "parameter '%s' is registered already", name);
    param_t *p = xmalloc(sizeof *p);
    *p = (param_t){.name = xstrdup(name),
                   .resolve = resolve,
                   .owner = owner,
                   .ctx = ctx,
                   .unknown = xstrdup(unknown)};
    self->params = xrealloc(self->params, (self->nparams + 1) * sizeof *self->params);
    self->params[self->nparams++] = p;
    return 0;
}

/* --- routes ------------------------------------------------------------------------ */

static void route_free(route_t *r)
{
    for (size_t i = 0; i < r->nsegs; i++)
        free(r->segs[i].text);
    free(r->segs);
    free(r->method);
    free(r->pattern);
    free(r);
}

/* Cuts r->pattern into segments; the kinds of its {name}s must be known. */
static int route_parse(const routetab_t *self, route_t *r, sg_error_t **err)
{
    const char *pat = r->pattern;
    if (pat[0] != '/')
        return sg_error_set(err, SG_E_INVALID, "route %s '%s': a pattern starts with '/'",
                            r->method, pat);
    for (const char *p = pat + 1;; p++) {
        size_t n = strcspn(p, "/");
        seg_t seg = {0};
        if (r->star)
            return sg_error_set(err, SG_E_INVALID, "route %s %s: '*' can only be the last segment",
                                r->method, pat);
        if (n == 1 && p[0] == '*') {
            r->star = true;
        } else if (n >= 2 && p[0] == '{' && p[n - 1] == '}') {
            seg.param = routetab_param_find(self, p + 1, n - 2);
            if (seg.param == NULL)
                return sg_error_set(err, SG_E_INVALID,
                                    "route %s %s: no parameter kind '%.*s' (http_param)", r->method,
                                    pat, (int)n, p);
            if (r->nparams == HTTP_MAX_ARGS)
                return sg_error_set(err, SG_E_INVALID, "route %s %s: more than %d parameters",
                                    r->method, pat, HTTP_MAX_ARGS);
            r->nparams++;
        } else if (memchr(p, '{', n) || memchr(p, '}', n) || memchr(p, '*', n)) {
            return sg_error_set(err, SG_E_INVALID,
                                "route %s %s: '{name}' and '*' are whole segments", r->method, pat);
        } else {
            seg.text = xstrndup(p, n);
        }
        r->segs = xrealloc(r->segs, (r->nsegs + 1) * sizeof *r->segs);
        r->segs[r->nsegs++] = seg;
        p += n;
        if (*p == 0)
            return 0;
    }
}

/* Whether path matches r; m gets where its {name}s and '*' rest are. */
static bool route_match(const route_t *r, const char *path, match_t *m)
{
    const char *p = path;
    size_t k = 0;
    for (size_t i = 0; i < r->nsegs; i++) {
        const seg_t *seg = &r->segs[i];
        if (r->star && i + 1 == r->nsegs) {
            m->rest = p; /* "" or from a '/' */
            return true;
        }
        if (*p != '/')
            return false;
        p++;
        size_t n = strcspn(p, "/");
        if (seg->param) {
            if (n == 0)
                return false;
            m->at[k] = p;
            m->len[k++] = n;
        } else if (strlen(seg->text) != n || memcmp(seg->text, p, n) != 0) {
            return false;
        }
        p += n;
    }
    m->rest = NULL;
    return *p == 0;
}

/* Whether some path matches both a and b. */
static bool routes_overlap(const route_t *a, const route_t *b)
{
    for (size_t i = 0;; i++) {
        if ((a->star && i + 1 == a->nsegs) || (b->star && i + 1 == b->nsegs))
            return true; /* '*' takes whatever the other still needs */
        if (i == a->nsegs || i == b->nsegs)
            return a->nsegs == b->nsegs;
        const seg_t *x = &a->segs[i], *y = &b->segs[i];
        if (x->param && y->param)
            continue;
        if (x->param || y->param) { /* {name} takes any segment but "" */
            if (*(x->param ? y : x)->text == 0)
                return false;
            continue;
        }
        if (strcmp(x->text, y->text) != 0)
            return false;
    }
}

static int route_add(routetab_t *self, const http_front_t *front, const http_route_t *def,
                     sg_error_t **err)
{
    const http_sink_t *k = def->sink;
    if (!def->method || !*def->method || !def->pattern || !(def->handle || k) ||
        (k && !(k->open && k->write && k->finish && k->abort)))
        return sg_error_set(err, SG_E_INVALID,
                            "route %s %s: a method, a pattern, a handler or a sink, and a sink's "
                            "four functions",
                            def->method ? def->method : "?", def->pattern ? def->pattern : "?");
    route_t *r = xzalloc(sizeof *r);
    r->method = xstrdup(def->method);
    r->pattern = xstrdup(def->pattern);
    r->def = *def;
    r->front = *front;
    if (route_parse(self, r, err) < 0) {
        route_free(r);
        return -1;
    }
    for (size_t i = 0; i < self->nroutes; i++) {
        const route_t *o = self->routes[i];
        if (strcmp(o->method, r->method) == 0 && routes_overlap(o, r)) {
            sg_error_set(err, SG_E_INVALID,
                         "route %s %s overlaps route %s %s: a path could match both", r->method,
                         r->pattern, o->method, o->pattern);
            route_free(r);
            return -1;
        }
    }
    self->routes = xrealloc(self->routes, (self->nroutes + 1) * sizeof *self->routes);
    self->routes[self->nroutes++] = r;
    return 0;
}

int routetab_add(routetab_t *self, const http_front_t *front, const http_route_t *routes, size_t n,
                 sg_error_t **err)
{
    for (size_t i = 0; i < n; i++)
        if (route_add(self, front, &routes[i], err) < 0)
            return -1;
    return 0;
}

/* At most one route of a method matches a path (route_add sees to it), so
 * the order does not matter. */
const route_t *routetab_find(const routetab_t *self, const char *method, const char *path,
                             match_t *m)
{
    const route_t *get = NULL;
    match_t get_m = {0};
    for (size_t i = 0; i < self->nroutes; i++) {
        const route_t *r = self->routes[i];
        match_t rm;
        if (!route_match(r, path, &rm))
            continue;
        if (strcmp(r->method, method) == 0) {
            *m = rm;
            return r;
        }
        if (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0) {
            get = r;
            get_m = rm;
        }
    }
    *m = get_m;
    return get;
}

char *routetab_methods(const routetab_t *self, const char *path, bool head, const char *last_sep,
                       const route_t **first)
{
    const char **names = xmalloc((2 * self->nroutes + 1) * sizeof *names);
    size_t n = 0;
    bool has_head = false;
    *first = NULL;
    for (size_t i = 0; i < self->nroutes; i++) {
        const route_t *r = self->routes[i];
        match_t m;
        if (route_match(r, path, &m)) {
            names[n++] = r->method;
            has_head |= strcmp(r->method, "HEAD") == 0;
            if (!*first || (r->def.flags & HTTP_ROUTE_PUBLIC))
                *first = r;
        }
    }
    char *list = NULL;
    for (size_t i = 0, count = 0; i < n; i++) {
        for (int twice = 0; twice < 2; twice++) {
            const char *name = twice ? "HEAD" : names[i];
            if (twice && !(head && !has_head && strcmp(names[i], "GET") == 0))
                break;
            bool last = i + 1 == n && (twice || !(head && !has_head && strcmp(name, "GET") == 0));
            char *joined = xasprintf("%s%s%s", list ? list : "",
                                     count == 0 ? "" : (last ? last_sep : ", "), name);
            free(list);
            list = joined;
            count++;
        }
    }
    free(names);
    return list;
}

void routetab_destroy(routetab_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    routetab_t *self = *self_p;
    for (size_t i = 0; i < self->nroutes; i++)
        route_free(self->routes[i]);
    free(self->routes);
    for (size_t i = 0; i < self->nparams; i++) {
        free(self->params[i]->name);
        free(self->params[i]->unknown);
        free(self->params[i]);
    }
    free(self->params);
    free(self);
    *self_p = NULL;
}
