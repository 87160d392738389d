/* sblogs: E2B's sandbox logs (GET /sandboxes/{sandbox}/logs and
 * /v2/sandboxes/{sandbox}/logs) — what sandgate's own log says about a
 * sandbox and the kernels in it: its start, readiness, pauses and resumes
 * with their checkpoints, snapshots, forks, timeouts, a kernel's death
 * and restart, refused connections.  The log is tapped (sg_log_set_tap):
 * each line that names the ids of the API's contexts (a kernel's, or a
 * sandbox's "ID-N") is kept under each, the last LOGS_KEPT of an id, while
 * it exists and sandgate runs (a restart starts them anew). */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/rest/internal.h"

#define LOGS_KEPT 200   /* lines kept per id */
#define LOGS_PER_LINE 3 /* ids a line is kept under, at most */
#define LOGS_MAX_LIMIT 1000

static const char *const levels[] = {"debug", "info", "warn", "error"};

/* The first id (36 characters: 8-4-4-4-12 hex digits) at or after p, or NULL. */
static const char *next_id(const char *p)
{
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (; *p; p++) {
        size_t i = 0;
        while (i < 36 && p[i] &&
               (shape[i] == '-' ? p[i] == '-' : strchr("0123456789abcdef", p[i]) != NULL))
            i++;
        if (i == 36 && !strchr("0123456789abcdef", p[36] ? p[36] : '!'))
            return p;
    }
    return NULL;
}

static void on_line(void *arg, sg_loglevel_t level, long long ms, const char *msg)
{
    api_t *self = arg;
    const char *p = msg;
    const char *seen[LOGS_PER_LINE];
    json_t *entry = NULL; /* one for all the ids it names */
    for (int n = 0; n < LOGS_PER_LINE && (p = next_id(p)) != NULL; p += 36) {
        bool again = false;
        for (int i = 0; i < n; i++)
            again = again || strncmp(seen[i], p, 36) == 0;
        if (again)
            continue;
        seen[n++] = p;
        char id[37];
        memcpy(id, p, 36);
        id[36] = 0;
        if (!json_object_get(self->contexts, id))
            continue; /* not the API's (a Jupyter kernel, say), or gone */
        json_t *lines = json_object_get(self->e2b_logs, id);
        if (!lines) {
            lines = json_array();
            json_object_set_new(self->e2b_logs, id, lines);
        }
        if (json_array_size(lines) >= LOGS_KEPT)
            json_array_remove(lines, 0);
        if (!entry)
            entry = json_pack("[I, s, s]", (json_int_t)ms, levels[level], msg);
        json_array_append(lines, entry);
    }
    json_decref(entry);
}

void api_sblogs_start(api_t *self)
{
    self->e2b_logs = json_object();
    sg_log_set_tap(on_line, self);
}

void api_sblogs_stop(api_t *self)
{
    sg_log_set_tap(NULL, NULL);
    json_decref(self->e2b_logs);
    self->e2b_logs = NULL;
}

void api_sblogs_forget(api_t *self, const char *id)
{
    if (self->e2b_logs)
        json_object_del(self->e2b_logs, id);
}

static int level_rank(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(levels[i], name) == 0)
            return i;
    return -1;
}

static int by_time(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_array_get(*(json_t *const *)a, 0));
    json_int_t y = json_integer_value(json_array_get(*(json_t *const *)b, 0));
    return x < y ? -1 : x > y;
}

/* A query parameter as a count >= 0; def when absent; -1 when malformed. */
static long long count_arg(struct MHD_Connection *conn, const char *name, long long def)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    if (!v)
        return def;
    char *end;
    long long n = strtoll(v, &end, 10);
    return *v && !*end && n >= 0 ? n : -1;
}

/* The sandbox's lines and those of the kernels in it, in time order,
 * filtered: from ms `from` on (or up to it, backward), at `min` or above,
 * holding `search`; at most limit. */
static json_t *lines_of(api_t *self, const char *sid, long long from, bool backward, int min,
                        const char *search, long long limit)
{
    size_t n = 0, cap = 0;
    json_t **all = NULL;
    const char *id;
    json_t *meta;
    json_object_foreach (self->contexts, id, meta) {
        const char *host = json_string_value(json_object_get(meta, "sandbox"));
        if (strcmp(id, sid) != 0 && !(host && strcmp(host, sid) == 0))
            continue;
        size_t i;
        json_t *l;
        json_array_foreach (json_object_get(self->e2b_logs, id), i, l) {
            if (n == cap)
                all = xrealloc(all, (cap = cap ? cap * 2 : 64) * sizeof *all);
            all[n++] = l;
        }
    }
    if (n)
        qsort(all, n, sizeof *all, by_time);
    json_t *out = json_array();
    for (size_t k = 0; k < n && (long long)json_array_size(out) < limit; k++) {
        json_t *l = all[backward ? n - 1 - k : k];
        json_int_t at = json_integer_value(json_array_get(l, 0));
        const char *msg = json_string_value(json_array_get(l, 2));
        if ((from >= 0 && (backward ? at > from : at < from)) ||
            level_rank(json_string_value(json_array_get(l, 1))) < min ||
            (search && !strstr(msg, search)))
            continue;
        bool twice = false; /* one line naming two of its kernels: kept once */
        for (size_t j = json_array_size(out); j-- > 0 && !twice;) {
            json_t *o = json_array_get(out, j);
            if (json_integer_value(json_array_get(o, 0)) != at)
                break;
            twice = o == l;
        }
        if (!twice)
            json_array_append(out, l);
    }
    free(all);
    return out;
}

static json_t *entry_json(const json_t *l)
{
    return json_pack("{s:o, s:s, s:s, s:{}}", "timestamp",
                     resp_iso_time(json_integer_value(json_array_get(l, 0))), "level",
                     json_string_value(json_array_get(l, 1)), "message",
                     json_string_value(json_array_get(l, 2)), "fields");
}

static enum MHD_Result logs_as(api_t *self, http_req_t *call, bool v2)
{
    struct MHD_Connection *conn = call->conn;
    const char *sid = kernel_id(http_arg(call, "sandbox"));
    long long from = count_arg(conn, v2 ? "cursor" : "start", -2);
    long long limit = count_arg(conn, "limit", LOGS_MAX_LIMIT);
    const char *dir = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "direction");
    const char *level = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "level");
    const char *search = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "search");
    int min = v2 && level ? level_rank(level) : 0;
    const char *bad = from == -1 ? "'start'/'cursor' must be ms >= 0"
                      : limit < 0 || (v2 && limit > LOGS_MAX_LIMIT) ? "'limit' must be 0 to 1000"
                      : min < 0 ? "'level' must be debug, info, warn or error"
                      : v2 && dir && strcmp(dir, "forward") != 0 && strcmp(dir, "backward") != 0
                          ? "'direction' must be forward or backward"
                          : NULL;
    if (bad) {
        json_t *e = json_pack("{s:i, s:s}", "code", 400, "message", bad);
        return http_reply_json(conn, 400, e);
    }
    bool backward = v2 && dir && strcmp(dir, "backward") == 0;
    json_t *lines =
        lines_of(self, sid, from < 0 ? -1 : from, backward, min, v2 ? search : NULL, limit);
    json_t *entries = json_array(), *plain = json_array();
    size_t i;
    json_t *l;
    json_array_foreach (lines, i, l) {
        json_array_append_new(entries, entry_json(l));
        if (!v2)
            json_array_append_new(plain,
                                  json_pack("{s:o, s:s}", "timestamp",
                                            resp_iso_time(json_integer_value(json_array_get(l, 0))),
                                            "line", json_string_value(json_array_get(l, 2))));
    }
    json_decref(lines);
    if (v2) {
        json_decref(plain);
        return http_reply_json(conn, 200, json_pack("{s:o}", "logs", entries));
    }
    return http_reply_json(conn, 200,
                           json_pack("{s:o, s:o}", "logs", plain, "logEntries", entries));
}

enum MHD_Result api_sandbox_logs(void *arg, http_req_t *call)
{
    return logs_as(arg, call, false);
}

enum MHD_Result api_sandbox_logs_v2(void *arg, http_req_t *call)
{
    return logs_as(arg, call, true);
}
