/* snapshots: the sessions' snapshots (manager.h): their records under
 * STATE/snapshots, taking one, starting or rolling back from one, expiry.
 * A snapshot a start or roll-back is restoring keeps its files (users)
 * even when deleted meanwhile: the files go once the last one runs. */
#include "kernelmgr/manager/internal.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"

static int64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static char *record_path(const kmgr_t *m, const char *sid)
{
    return xasprintf("%s/snapshots/%s.json", m->state_dir, sid);
}

void snapshot_free(kmgr_snapshot_t *s)
{
    free(s->name);
    free(s->owner);
    free(s->kernelspec);
    free(s->template);
    free(s->template_of);
    free(s->key);
    free(s->runsc);
    json_decref(s->lineage);
    json_decref(s->mounts);
    free(s);
}

void snapshot_add(kmgr_t *m, kmgr_snapshot_t *s)
{
    if (m->nsnaps == m->capsnaps) {
        m->capsnaps = m->capsnaps ? m->capsnaps * 2 : 16;
        m->snaps = xrealloc(m->snaps, m->capsnaps * sizeof *m->snaps);
    }
    m->snaps[m->nsnaps++] = s;
}

static kmgr_snapshot_t *lookup(const kmgr_t *m, const char *sid)
{
    for (size_t i = 0; i < m->nsnaps; i++)
        if (strcmp(m->snaps[i]->id, sid) == 0)
            return m->snaps[i];
    return NULL;
}

static json_t *snapshot_json(const kmgr_snapshot_t *s)
{
    json_t *rec =
        json_pack("{s:s, s:s, s:s?, s:s, s:s, s:s?, s:I, s:I, s:O}", "id", s->id, "context_id",
                  s->context_id, "name", s->name, "tenant", s->owner, "kernelspec", s->kernelspec,
                  "template", s->template, "created_ms", (json_int_t)s->created_ms, "bytes",
                  (json_int_t)s->bytes, "lineage", s->lineage);
    if (s->runsc)
        json_object_set_new(rec, "runsc", json_string(s->runsc));
    if (s->internet)
        json_object_set_new(rec, "internet", json_true());
    if (s->mounts)
        json_object_set(rec, "mounts", s->mounts);
    if (s->template_of)
        json_object_set_new(rec, "template_of",
                            json_pack("{s:s, s:s}", "name", s->template_of, "key", s->key));
    return rec;
}

int snapshot_write(kmgr_t *m, const kmgr_snapshot_t *s, sg_error_t **err)
{
    json_t *rec = snapshot_json(s);
    cleanup_free char *path = record_path(m, s->id);
    cleanup_free char *tmp = xasprintf("%s.tmp", path);
    int r = json_dump_file(rec, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0 ? -1 : 0;
    json_decref(rec);
    if (r < 0)
        sg_error_errno(err, errno, "cannot write %s", path);
    return r;
}

/* Its record and files go (the files once nothing restores it). */
void snapshot_drop(kmgr_t *m, kmgr_snapshot_t *s)
{
    cleanup_free char *path = record_path(m, s->id);
    unlink(path);
    s->deleted = true;
    if (s->users > 0)
        return;
    sandbox_snapshot_delete(m->env, s->id);
    for (size_t i = 0; i < m->nsnaps; i++)
        if (m->snaps[i] == s) {
            m->snaps[i] = m->snaps[--m->nsnaps];
            break;
        }
    snapshot_free(s);
}

/* A record's snapshot (rec borrowed), or NULL when it is not one. */
static kmgr_snapshot_t *from_record(json_t *rec)
{
    const char *id = NULL, *ctx = NULL, *owner = NULL, *spec = NULL;
    json_int_t created = 0, bytes = 0;
    json_t *lineage = NULL;
    if (!rec ||
        json_unpack(rec, "{s:s, s:s, s:s, s:s, s:I, s:I, s:o}", "id", &id, "context_id", &ctx,
                    "tenant", &owner, "kernelspec", &spec, "created_ms", &created, "bytes", &bytes,
                    "lineage", &lineage) < 0 ||
        strlen(id) != 36 || strlen(ctx) != 36 || !json_is_array(lineage))
        return NULL;
    kmgr_snapshot_t *s = xzalloc(sizeof *s);
    memcpy(s->id, id, 37);
    memcpy(s->context_id, ctx, 37);
    const char *name = json_string_value(json_object_get(rec, "name"));
    s->name = name ? xstrdup(name) : NULL;
    s->owner = xstrdup(owner);
    s->kernelspec = xstrdup(spec);
    const char *template = json_string_value(json_object_get(rec, "template"));
    s->template = template ? xstrdup(template) : NULL;
    json_t *of = json_object_get(rec, "template_of");
    const char *of_name = json_string_value(json_object_get(of, "name"));
    const char *of_key = json_string_value(json_object_get(of, "key"));
    s->template_of = of_name && of_key ? xstrdup(of_name) : NULL;
    s->key = of_name && of_key ? xstrdup(of_key) : NULL;
    const char *runsc = json_string_value(json_object_get(rec, "runsc"));
    s->runsc = runsc ? xstrdup(runsc) : NULL;
    s->internet = json_is_true(json_object_get(rec, "internet"));
    json_t *mounts = json_object_get(rec, "mounts");
    s->mounts = json_is_array(mounts) ? json_incref(mounts) : NULL;
    s->created_ms = created;
    s->bytes = (uint64_t)bytes;
    s->lineage = json_incref(lineage);
    return s;
}

static kmgr_snapshot_t *load_one(const char *path)
{
    json_error_t jerr;
    json_t *rec = json_load_file(path, 0, &jerr);
    kmgr_snapshot_t *s = rec ? from_record(rec) : NULL;
    json_decref(rec);
    return s;
}

void snapshots_load(kmgr_t *m)
{
    cleanup_free char *dir = xasprintf("%s/snapshots", m->state_dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *path = xasprintf("%s/%s", dir, de->d_name);
        kmgr_snapshot_t *s = load_one(path);
        if (s) {
            snapshot_add(m, s);
        } else {
            log_warn("kmgr: ignoring unreadable snapshot record %s", path);
            unlink(path);
        }
    }
    closedir(d);
    if (m->nsnaps)
        log_info("kmgr: %zu snapshot(s) kept", m->nsnaps);
}

void snapshots_free(kmgr_t *m)
{
    for (size_t i = 0; i < m->nsnaps; i++)
        snapshot_free(m->snaps[i]);
    free(m->snaps);
    m->snaps = NULL;
    m->nsnaps = m->capsnaps = 0;
}

char *snapshot_runsc(const kmgr_t *m)
{
    const char *v = sandbox_env_runsc_version(m->env);
    return v ? xstrdup(v) : NULL;
}

int snapshot_usable(const kmgr_t *m, const kmgr_snapshot_t *s, sg_error_t **err)
{
    const char *ours = sandbox_env_runsc_version(m->env);
    if (!ours || (s->runsc && strcmp(s->runsc, ours) == 0))
        return 0; /* mode none never restores an image */
    return sg_error_set(err, SG_E_CONFLICT,
                        "snapshot %s was made by runsc %s and this sandgate runs runsc %s, which "
                        "cannot restore it (delete it; take a new one from a running context)",
                        s->id, s->runsc ? s->runsc : "of an older sandgate (no version recorded)",
                        ours);
}

kmgr_snapshot_t *snapshot_use(kmgr_t *m, const char *sid)
{
    kmgr_snapshot_t *s = lookup(m, sid);
    if (s)
        s->users++;
    return s;
}

void snapshot_release(kmgr_t *m, const char *sid)
{
    kmgr_snapshot_t *s = lookup(m, sid);
    if (s && s->users > 0 && --s->users == 0 && s->deleted)
        snapshot_drop(m, s);
}

void snapshots_expire(kmgr_t *m)
{
    if (m->cfg.snapshot_ttl_ms <= 0)
        return;
    int64_t now = now_ms();
    for (size_t i = 0; i < m->nsnaps; i++) {
        kmgr_snapshot_t *s = m->snaps[i];
        if (s->deleted || s->template_of || now - s->created_ms < m->cfg.snapshot_ttl_ms)
            continue;
        log_info("kmgr: snapshot %s expired (--snapshot-ttl)", s->id);
        kmgr_notice(
            m, "snapshot.delete", s->context_id,
            json_pack("{s:s, s:s}", "snapshot", s->id, "reason", "expired (--snapshot-ttl)"));
        bool stays = s->users > 0;
        snapshot_drop(m, s);
        if (!stays)
            i--; /* the array was compacted */
    }
}

/* --- public API ---------------------------------------------------------------- */

const kmgr_snapshot_t *kmgr_snapshot_get(const kmgr_t *m, const char *sid)
{
    kmgr_snapshot_t *s = lookup(m, sid);
    return s && !s->deleted && !s->template_of ? s : NULL;
}

size_t kmgr_snapshot_count(const kmgr_t *m)
{
    return m->nsnaps;
}

const kmgr_snapshot_t *kmgr_snapshot_at(const kmgr_t *m, size_t i)
{
    return i < m->nsnaps ? m->snaps[i] : NULL;
}

int kmgr_snapshot_delete(kmgr_t *m, const char *sid, sg_error_t **err)
{
    kmgr_snapshot_t *s = lookup(m, sid);
    if (!s || s->deleted || s->template_of)
        return sg_error_set(err, SG_E_NOTFOUND, "no snapshot '%s'", sid);
    log_info("kmgr: snapshot %s deleted", sid);
    snapshot_drop(m, s);
    return 0;
}

const json_t *kmgr_lineage(const kmgr_t *m, const kernel_t *k)
{
    entry_t *e = entry_find(m, kernel_id(k));
    return e ? e->lineage : NULL;
}

/* A snapshot being taken: what its record will say. */
typedef struct {
    kmgr_t *m;
    kmgr_snapshot_t *s;
    kmgr_snapshot_fn *cb;
    void *arg;
} taking_t;

static void on_taken(kernel_t *k, uint64_t bytes, const sg_error_t *err, void *arg)
{
    taking_t *t = arg;
    kmgr_snapshot_t *s = t->s;
    sg_error_t *werr = NULL;
    if (!err) {
        s->bytes = bytes;
        if (snapshot_write(t->m, s, &werr) == 0) {
            snapshot_add(t->m, s);
            t->cb(s, NULL, t->arg);
            free(t);
            return;
        }
        sandbox_snapshot_delete(t->m->env, s->id);
        err = werr;
    }
    t->cb(NULL, err, t->arg);
    sg_error_free(&werr);
    snapshot_free(s);
    free(t);
}

int kmgr_snapshot(kmgr_t *m, kernel_t *k, const char *name, kmgr_snapshot_fn *cb, void *arg,
                  sg_error_t **err)
{
    entry_t *e = entry_find(m, kernel_id(k));
    if (!e)
        return sg_error_set(err, SG_E_NOTFOUND, "no session %s", kernel_id(k));
    int have = 0;
    for (size_t i = 0; i < m->nsnaps; i++)
        have += !m->snaps[i]->deleted && !m->snaps[i]->template_of &&
                strcmp(m->snaps[i]->context_id, kernel_id(k)) == 0;
    if (m->cfg.max_snapshots > 0 && have >= m->cfg.max_snapshots)
        return sg_error_quota(err, "max-snapshots-per-context", m->cfg.max_snapshots,
                              "context %s has %d snapshots, the most one context may keep "
                              "(--max-snapshots); delete one first",
                              kernel_id(k), have);
    if (m->cfg.snapshot_gate && m->cfg.snapshot_gate(k, err) < 0)
        return -1;
    kmgr_snapshot_t *s = xzalloc(sizeof *s);
    replica_uuid(s->id);
    snprintf(s->context_id, sizeof s->context_id, "%s", kernel_id(k));
    s->name = name ? xstrdup(name) : NULL;
    s->owner = xstrdup(kernel_owner(k));
    s->kernelspec = xstrdup(kernel_spec(k)->name);
    s->template = kernel_opts(k)->template ? xstrdup(kernel_opts(k)->template) : NULL;
    s->created_ms = now_ms();
    s->runsc = snapshot_runsc(m);
    s->internet = kernel_internet(k);
    s->mounts = kernel_opts(k)->mounts ? json_deep_copy(kernel_opts(k)->mounts) : NULL;
    s->lineage = e->lineage ? json_copy(e->lineage) : json_array();
    taking_t *t = xzalloc(sizeof *t);
    *t = (taking_t){m, s, cb, arg};
    if (kernel_snapshot(k, s->id, on_taken, t, err) < 0) {
        snapshot_free(s);
        free(t);
        return -1;
    }
    return 0;
}

int kmgr_restore(kmgr_t *m, kernel_t *k, const char *sid, sg_error_t **err)
{
    const kmgr_snapshot_t *s = kmgr_snapshot_get(m, sid);
    entry_t *e = entry_find(m, kernel_id(k));
    if (!s || !e)
        return sg_error_set(err, SG_E_NOTFOUND, "no snapshot '%s'", sid);
    bool ancestor = strcmp(s->context_id, kernel_id(k)) == 0;
    size_t i;
    json_t *v;
    json_array_foreach (e->lineage, i, v)
        ancestor = ancestor || strcmp(json_string_value(v), s->context_id) == 0;
    if (!ancestor)
        return sg_error_set(err, SG_E_INVALID,
                            "snapshot %s was taken of context %s, which is neither this context "
                            "nor one it was made from",
                            sid, s->context_id);
    if (e->snap_user)
        return sg_error_set(err, SG_E_CONFLICT, "context %s is still starting from a snapshot",
                            kernel_id(k));
    if (snapshot_usable(m, s, err) < 0)
        return -1;
    if (kernel_restore_snapshot(k, sid, err) < 0)
        return -1;
    snapshot_use(m, sid);
    e->snap_user = xstrdup(sid);
    return 0;
}

/* --- moving snapshots between sandgates ------------------------------------------------ */

typedef struct {
    kmgr_t *m;
    kmgr_snapshot_t *s; /* import: the snapshot, added once its files are here */
    kmgr_moved_fn *cb;
    void *arg;
} moving_t;

static void transferred(uint64_t bytes, const sg_error_t *err, void *arg)
{
    moving_t *t = arg;
    cleanup_error sg_error_t *werr = NULL;
    if (t->s && !err) {
        snapshot_add(t->m, t->s);
        if (snapshot_write(t->m, t->s, &werr) == 0)
            log_info("kmgr: snapshot %s imported (%llu KiB)", t->s->id,
                     (unsigned long long)(bytes >> 10));
        else
            snapshot_drop(t->m, t->s);
        t->s = NULL;
    }
    if (t->s)
        snapshot_free(t->s);
    t->cb(bytes, err ? err : werr, t->arg);
    free(t);
}

int kmgr_snapshot_export(kmgr_t *m, const char *sid, json_t **record, kmgr_moved_fn *cb, void *arg,
                         sg_error_t **err)
{
    kmgr_snapshot_t *s = lookup(m, sid);
    if (!s || s->deleted || s->template_of)
        return sg_error_set(err, SG_E_NOTFOUND, "no snapshot '%s'", sid);
    *record = snapshot_json(s);
    moving_t *t = xzalloc(sizeof *t);
    *t = (moving_t){.m = m, .cb = cb, .arg = arg};
    sandbox_snapshot_transfer(m->env, sid, false, transferred, t);
    return 0;
}

int kmgr_snapshot_import(kmgr_t *m, const json_t *record, kmgr_moved_fn *cb, void *arg,
                         sg_error_t **err)
{
    kmgr_snapshot_t *s = from_record((json_t *)record);
    if (!s || s->template_of) {
        if (s)
            snapshot_free(s);
        return sg_error_set(err, SG_E_INVALID, "not a snapshot's record");
    }
    if (lookup(m, s->id) || s->mounts) {
        sg_error_set(err, SG_E_CONFLICT,
                     s->mounts ? "snapshot %s mounts volumes, which stay on their replica"
                               : "snapshot %s exists here",
                     s->id);
        snapshot_free(s);
        return -1;
    }
    moving_t *t = xzalloc(sizeof *t);
    *t = (moving_t){.m = m, .s = s, .cb = cb, .arg = arg};
    sandbox_snapshot_transfer(m->env, s->id, true, transferred, t);
    return 0;
}
