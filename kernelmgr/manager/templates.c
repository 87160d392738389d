/* templates: a template's own snapshot (manager.h).  A template with
 * preload code is snapshotted once, after the first of its pool kernels
 * ran the preload: a record in STATE/snapshots like the sessions' (with
 * "template_of": its name and key), which the API neither lists nor uses.
 * A new session of the template takes a ready pool kernel when there is
 * one (a claim: nothing runs), else starts from this snapshot (a restore,
 * whatever the preload costs) rather than fresh plus the preload; the
 * pool refills the same way.  The key says what it was taken of (the
 * template's kernelspec, preload and root): a start-up finding another
 * drops it, and the next pool kernel takes a new one. */
#include "kernelmgr/manager/internal.h"

#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "common/log.h"
#include "common/replica.h"
#include "common/xalloc.h"

/* 16 hex digits of what the snapshot depends on (an image by its file's
 * size and time: a new one is a new unpacked root). */
static void template_key(const sandbox_template_t *t, char key[17])
{
    struct stat st = {0};
    if (t->image)
        stat(t->image, &st);
    cleanup_free char *what =
        xasprintf("%s\n%s\n%s\n%s\n%lld.%lld", t->kernelspec ? t->kernelspec : "python3",
                  t->preload ? t->preload : "", t->root ? t->root : "", t->image ? t->image : "",
                  (long long)st.st_size, (long long)st.st_mtime);
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)what, strlen(what));
    sodium_bin2hex(key, 17, h, 8);
}

static kmgr_snapshot_t *find(const kmgr_t *m, const char *name)
{
    for (size_t i = 0; i < m->nsnaps; i++) {
        kmgr_snapshot_t *s = m->snaps[i];
        if (s->template_of && !s->deleted && strcmp(s->template_of, name) == 0)
            return s;
    }
    return NULL;
}

const kmgr_snapshot_t *template_snapshot(const kmgr_t *m, const char *name)
{
    return name ? find(m, name) : NULL;
}

uint64_t kmgr_template_snapshot_bytes(const kmgr_t *m, const char *name)
{
    const kmgr_snapshot_t *s = template_snapshot(m, name);
    return s ? s->bytes : 0;
}

void templates_check(kmgr_t *m)
{
    for (size_t i = 0; i < m->nsnaps; i++) {
        kmgr_snapshot_t *s = m->snaps[i];
        if (!s->template_of)
            continue;
        const sandbox_template_t *t = kmgr_template(m, s->template_of);
        char key[17] = "";
        if (t)
            template_key(t, key);
        sg_error_t *old = NULL;
        if (t && t->preload && strcmp(key, s->key) == 0 && snapshot_usable(m, s, &old) == 0)
            continue;
        sg_error_free(&old);
        log_info("kmgr: template %s changed or is gone: its snapshot %s is dropped", s->template_of,
                 s->id);
        snapshot_drop(m, s);
        i--; /* the array was compacted (nothing uses it yet) */
    }
}

typedef struct {
    kmgr_t *m;
    kmgr_snapshot_t *s;
} taking_t;

static void on_taken(kernel_t *k, uint64_t bytes, const sg_error_t *err, void *arg)
{
    taking_t *t = arg;
    kmgr_snapshot_t *s = t->s;
    json_object_del(t->m->tsnap_taking, s->template_of);
    sg_error_t *werr = NULL;
    if (!err) {
        s->bytes = bytes;
        if (snapshot_write(t->m, s, &werr) == 0) {
            snapshot_add(t->m, s);
            log_info("kmgr: template %s snapshotted after its preload (%s, %llu bytes): its "
                     "sessions start from it when its pool is empty",
                     s->template_of, s->id, (unsigned long long)bytes);
            free(t);
            return;
        }
        sandbox_snapshot_delete(t->m->env, s->id);
        err = werr;
    }
    log_warn("kmgr: template %s: its snapshot failed (its sessions start fresh): %s",
             s->template_of, err->msg);
    sg_error_free(&werr);
    snapshot_free(s);
    free(t);
    (void)k;
}

void template_snapshot_maybe(kmgr_t *m, entry_t *e)
{
    const sandbox_template_t *t = kmgr_template(m, e->template);
    if (!t || !t->preload || !sandbox_env_can_pause(m->env) || kernel_internet(e->k) ||
        find(m, t->name) || json_object_get(m->tsnap_taking, t->name) || m->stopping)
        return;
    kmgr_snapshot_t *s = xzalloc(sizeof *s);
    replica_uuid(s->id);
    snprintf(s->context_id, sizeof s->context_id, "%s", kernel_id(e->k));
    s->owner = xstrdup("admin");
    s->kernelspec = xstrdup(kernel_spec(e->k)->name);
    s->template = xstrdup(t->name);
    s->template_of = xstrdup(t->name);
    s->runsc = snapshot_runsc(m);
    char key[17];
    template_key(t, key);
    s->key = xstrdup(key);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    s->created_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    s->lineage = json_array();
    taking_t *tk = xzalloc(sizeof *tk);
    *tk = (taking_t){m, s};
    if (!m->tsnap_taking)
        m->tsnap_taking = json_object();
    json_object_set_new(m->tsnap_taking, t->name, json_true()); /* on_taken may come first */
    sg_error_t *err = NULL;
    if (kernel_snapshot(e->k, s->id, on_taken, tk, &err) < 0) {
        log_warn("kmgr: template %s: cannot snapshot it: %s", t->name, err->msg);
        json_object_del(m->tsnap_taking, t->name);
        sg_error_free(&err);
        snapshot_free(s);
        free(tk);
    }
}
