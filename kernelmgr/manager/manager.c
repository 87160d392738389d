#include "kernelmgr/manager/internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/replica.h"
#include "common/xalloc.h"

void kmgr_config_defaults(kmgr_config_t *cfg)
{
    *cfg = (kmgr_config_t){
        .state_dir = "/var/lib/sandgate",
        .pool_size = 1,
        .pool_kernelspec = "python3",
        .pool_preload = NULL,
        .cull_idle_ms = 3600 * 1000,
        .pause_after_ms = 600 * 1000,
        .max_kernels = 64,
        .max_snapshots = 32,
    };
    sandbox_config_defaults(&cfg->sandbox);
    kernel_opts_defaults(&cfg->kernel);
}

/* --- records --------------------------------------------------------------- */

static char *record_path(const kmgr_t *m, const char *id)
{
    return xasprintf("%s/sessions/%s.json", m->state_dir, id);
}

char *session_workspace(const kmgr_t *m, const char *id)
{
    return xasprintf("%s/workspaces/%s", m->state_dir, id);
}

void session_record(kmgr_t *m, entry_t *e)
{
    kernel_t *k = e->k;
    if (e->host_id)
        return; /* it lives and ends with its host's sandbox */
    bool paused = kernel_state(k) == KERNEL_PAUSED;
    json_t *rec = json_pack(
        "{s:s, s:s, s:s, s:I, s:s, s:b, s:s, s:b, s:I, s:b, s:s}", "id", kernel_id(k), "kernelspec",
        kernel_spec(k)->name, "sandbox_id", kernel_sandbox_id(k), "pid",
        (json_int_t)(paused ? 0 : kernel_pid(k)), "workspace", kernel_workspace(k), "pool", e->pool,
        "mode", m->cfg.sandbox.mode == SANDBOX_RUNSC ? "runsc" : "none", "paused", paused,
        "checkpoint_bytes", (json_int_t)kernel_pause_info(k).checkpoint_bytes, "internet",
        kernel_internet(k), "tenant", kernel_owner(k));
    if (kernel_username(k))
        json_object_set_new(rec, "username", json_string(kernel_username(k)));
    const kernel_opts_t *o = kernel_opts(k);
    if (o->memory_bytes)
        json_object_set_new(rec, "memory_bytes", json_integer((json_int_t)o->memory_bytes));
    if (o->cpu_quota_us)
        json_object_set_new(rec, "cpu_quota_us", json_integer((json_int_t)o->cpu_quota_us));
    if (e->lineage)
        json_object_set(rec, "lineage", e->lineage);
    if (o->template)
        json_object_set_new(rec, "template", json_string(o->template));
    if (o->egress_allow)
        json_object_set_new(rec, "egress_allow", json_string(o->egress_allow));
    if (o->egress_deny)
        json_object_set_new(rec, "egress_deny", json_string(o->egress_deny));
    if (o->egress_transforms)
        json_object_set_new(rec, "egress_transforms", json_string(o->egress_transforms));
    if (o->mounts)
        json_object_set_new(rec, "mounts", json_deep_copy(o->mounts));
    cleanup_free char *path = record_path(m, kernel_id(k));
    cleanup_free char *tmp = xasprintf("%s.tmp", path);
    if (json_dump_file(rec, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0)
        log_error("kmgr: cannot write %s: %s", path, strerror(errno));
    json_decref(rec);
}

static void remove_record(kmgr_t *m, const char *id)
{
    cleanup_free char *path = record_path(m, id);
    unlink(path);
}

/* --- entries ------------------------------------------------------------------- */

void add_entry(kmgr_t *m, entry_t *e)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->entries = xrealloc(m->entries, m->cap * sizeof *m->entries);
    }
    m->entries[m->n++] = e;
}

void drained_one(kmgr_t *m, entry_t *e)
{
    if (!e->draining)
        return;
    e->draining = false;
    if (--m->draining == 0 && m->drained)
        m->drained(m->drained_arg);
}

static void entry_free(void *arg)
{
    entry_t *e = arg;
    json_decref(e->lineage);
    free(e->snap_user);
    free(e->host_id);
    free(e);
}

/* Its start no longer needs the snapshot it restores. */
static void snap_done(kmgr_t *m, entry_t *e)
{
    if (e->snap_user)
        snapshot_release(m, e->snap_user);
    free(e->snap_user);
    e->snap_user = NULL;
}

static void drop_entry(kmgr_t *m, entry_t *e)
{
    drained_one(m, e);
    snap_done(m, e);
    sandbox_cancel(e->opening);
    e->opening = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->entries[i] == e) {
            m->entries[i] = m->entries[--m->n];
            break;
        }
    loop_defer(m->loop, entry_free, e);
}

entry_t *entry_find(const kmgr_t *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (!m->entries[i]->pool && strcmp(kernel_id(m->entries[i]->k), id) == 0)
            return m->entries[i];
    return NULL;
}

static void fill_pool(kmgr_t *m);

/* kmgr_notice_fn: fields ("context" is added) are stolen. */
void kmgr_notice(kmgr_t *m, const char *event, const char *id, json_t *fields)
{
    if (!m->cfg.notice) {
        json_decref(fields);
        return;
    }
    json_object_set_new(fields, "context", json_string(id));
    m->cfg.notice(event, fields, m->cfg.notice_arg);
}

void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg)
{
    entry_t *e = arg;
    kmgr_t *m = e->mgr;
    if (ev == KERNEL_EV_READY || ev == KERNEL_EV_DEAD || ev == KERNEL_EV_GONE)
        snap_done(m, e);
    if (ev == KERNEL_EV_READY) {
        kernel_pause_info_t pi = kernel_pause_info(k);
        if (pi.resumes > e->resumes) {
            e->resumes = pi.resumes;
            m->stats.resumes++;
            m->stats.resume_ms_total += (uint64_t)pi.last_resume_ms;
            if (!e->pool)
                kmgr_notice(m, "context.wake", kernel_id(k),
                            json_pack("{s:I}", "resume_ms", (json_int_t)pi.last_resume_ms));
        }
        e->ready = true;
        session_record(m, e);
    }
    if (ev == KERNEL_EV_PAUSED) {
        if (e->auto_pause) {
            json_t *f =
                json_pack("{s:s, s:s}", "reason", e->auto_pause, "outcome", err ? "error" : "ok");
            if (err)
                json_object_set_new(f, "error", json_string(sg_error_kind_name(err->kind)));
            kmgr_notice(m, "context.pause", kernel_id(k), f);
            e->auto_pause = NULL;
        }
        if (err) {
            m->stats.pause_failures++;
        } else {
            m->stats.pauses++;
            m->stats.pause_ms_total += (uint64_t)kernel_pause_info(k).last_pause_ms;
            session_record(m, e);
        }
        drained_one(m, e);
    }
    if (e->pool) {
        if (ev == KERNEL_EV_DEAD) {
            log_warn("kmgr: pool kernel %s failed: %s", kernel_id(k), err ? err->msg : "?");
            kernel_t *dead = e->k;
            remove_record(m, kernel_id(dead));
            cleanup_free char *ws = session_workspace(m, kernel_id(dead));
            kernel_shutdown(&dead, false);
            sandbox_workspace_close(m->env, ws, true);
            drop_entry(m, e);
            /* Do not spin on a kernelspec that cannot start: the next claim
             * or the next tick retries. */
            return;
        }
        if (ev == KERNEL_EV_READY) {
            template_snapshot_maybe(m, e);
            fill_pool(m);
        }
        return;
    }
    if (ev == KERNEL_EV_DEAD) {
        json_t *f =
            json_pack("{s:s}", "error", sg_error_kind_name(err ? err->kind : SG_E_INTERNAL));
        if (err && strncmp(err->msg, "out of memory", 13) == 0) /* kernel.c's words */
            json_object_set_new(f, "oom", json_true());
        kmgr_notice(m, "context.dead", kernel_id(k), f);
    }
    if (e->ev)
        e->ev(k, ev, err, e->ev_arg);
}

/* A kernel's workspace is made (or could not be): a held kernel starts, or
 * fails; before the kernel exists (the workspace was made at once, as
 * sandboxes without a launcher make it), session_launch() reads the outcome. */
static void on_workspace(const sg_error_t *err, void *arg)
{
    entry_t *e = arg;
    e->opening = 0;
    if (e->k == NULL) {
        if (err)
            sg_error_set(&e->open_failed, err->kind, "%s", err->msg);
        e->opened = true;
        return;
    }
    if (err) {
        log_warn("kmgr: kernel %s: its workspace could not be prepared: %s", kernel_id(e->k),
                 err->msg);
        kernel_fail(e->k, err);
    } else {
        kernel_release(e->k);
    }
}

/* A new kernel.  Its workspace is asked for first: made here and now
 * without a launcher (tens of ms), or by the launcher, while the kernel
 * starts held and is released when the workspace is there, so nothing on
 * the loop waits for the launcher. */
kernel_t *session_launch(kmgr_t *m, const kspec_t *spec, const char *id, bool pool,
                         const kmgr_start_opts_t *so, kernel_event_fn *ev, void *ev_arg,
                         sg_error_t **err)
{
    cleanup_free char *ws = session_workspace(m, id);
    entry_t *e = xzalloc(sizeof *e);
    *e = (entry_t){.mgr = m, .pool = pool, .ev = ev, .ev_arg = ev_arg};
    if (so->snapshot) { /* its files are the snapshot's, kept until it runs */
        kmgr_snapshot_t *snap = snapshot_use(m, so->snapshot);
        e->snap_user = xstrdup(so->snapshot);
        if (!snap->template_of) { /* a template's own is no session's ancestor */
            e->lineage = json_array();
            if (strcmp(snap->context_id, id) != 0) /* moved here: its own lineage */
                json_array_append_new(e->lineage, json_string(snap->context_id));
            json_array_extend(e->lineage, snap->lineage);
        }
        e->opening = sandbox_workspace_restore_async(m->env, ws, so->snapshot, on_workspace, e);
    } else {
        e->opening = sandbox_workspace_open_async(m->env, ws, on_workspace, e);
    }
    if (e->open_failed) {
        sg_error_set(err, e->open_failed->kind, "%s", e->open_failed->msg);
        sg_error_free(&e->open_failed);
        snap_done(m, e);
        entry_free(e);
        return NULL;
    }
    kernel_opts_t opts = m->cfg.kernel;
    /* A pool kernel runs something before it is claimable, if only "None":
     * an execution's first run pays for compiling IPython's machinery.  A
     * template's kernel runs its preload, pooled or not (not when restored
     * from a snapshot: that ran it before). */
    const sandbox_template_t *t = kmgr_template(m, so->template);
    e->template = t ? t->name : NULL;
    /* Another language's pool kernel (--pool-size LANG=N) runs nothing. */
    bool pooled_spec = strcmp(spec->name, m->cfg.pool_kernelspec) == 0;
    const char *preload = t ? t->preload : pooled_spec ? m->preload : NULL;
    bool python = strcmp(spec->language, "python") == 0;
    opts.preload = so->snapshot ? NULL
                   : pool       ? (preload  ? preload
                                   : python ? "None"
                                            : NULL)
                   : t          ? preload
                                : NULL;
    opts.template = e->template;
    opts.hold = !e->opened;
    opts.internet = so->internet;
    opts.owner = so->owner;
    opts.memory_bytes = so->memory_bytes;
    opts.cpu_quota_us = so->cpu_quota_us;
    opts.snapshot = so->snapshot;
    opts.egress_allow = so->egress_allow;
    opts.egress_deny = so->egress_deny;
    opts.egress_transforms = so->egress_transforms;
    opts.mounts = so->mounts;
    if (strncmp(id, replica_tag(), strlen(replica_tag())) != 0)
        opts.generation = 1000 + (int)randombytes_uniform(800000); /* moved here */
    e->k = kernel_start(m->loop, m->env, spec, id, ws, &opts, on_kernel_event, e, err);
    if (e->k == NULL) {
        sandbox_cancel(e->opening);
        sandbox_workspace_close(m->env, ws, true);
        snap_done(m, e);
        entry_free(e);
        return NULL;
    }
    add_entry(m, e);
    m->stats.started++;
    return e->k;
}

/* Warm kernels of one pool (a template's, or spec's without a template;
 * with a network or not): all, or those a claim would take now (ready and
 * idle). */
static size_t pool_count(const kmgr_t *m, const char *template, const kspec_t *spec, bool internet,
                         bool ready_only)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++) {
        const entry_t *e = m->entries[i];
        n += e->pool && (!ready_only || (e->ready && kernel_state(e->k) == KERNEL_IDLE)) &&
             kernel_internet(e->k) == internet &&
             (template && e->template
                  ? strcmp(template, e->template) == 0
                  : template == e->template && (template || kernel_spec(e->k) == spec));
    }
    return n;
}

size_t kmgr_pool_ready(const kmgr_t *m, const char *template)
{
    return pool_count(m, template, kspecs_get(m->kspecs, m->cfg.pool_kernelspec), false, true);
}

/* The --pool-size LANG=N pools, resolved; the pooled kernelspec's sets
 * pool_size.  -1 with *err for a name that is no language or kernelspec. */
static int pools_resolve(kmgr_t *m, sg_error_t **err)
{
    m->pools = xzalloc((m->cfg.npools + 1) * sizeof *m->pools);
    for (size_t i = 0; i < m->cfg.npools; i++) {
        const kmgr_pool_t *p = &m->cfg.pools[i];
        const kspec_t *spec = kspecs_for_language(m->kspecs, p->name);
        if (spec == NULL)
            return sg_error_set(err, SG_E_INVALID,
                                "--pool-size %s=%d: no template, kernelspec or language '%s'",
                                p->name, p->size, p->name);
        if (strcmp(spec->name, m->cfg.pool_kernelspec) == 0)
            m->cfg.pool_size = p->size;
        else
            m->pools[m->npools++] = (struct spec_pool){spec, p->size};
    }
    return 0;
}

/* Starts one pool kernel where a pool is short: the server's first (and,
 * when sandboxes may have a network, as many with one: what the operator's
 * policy lets through, for sessions with no rules of their own and no
 * tenant's limit), then each other language's and template's in order. */
static void fill_pool(kmgr_t *m)
{
    if (m->stopping)
        return;
    for (size_t i = 0; i < m->n; i++)
        if (m->entries[i]->pool && !m->entries[i]->ready)
            return; /* one start at a time: starts are CPU-heavy */
    const sandbox_config_t *sc = &m->cfg.sandbox;
    const char *template = NULL;
    const kspec_t *spec = kspecs_get(m->kspecs, m->cfg.pool_kernelspec);
    size_t size = m->cfg.pool_size > 0 ? (size_t)m->cfg.pool_size : 0;
    bool internet = false;
    bool short_ = pool_count(m, NULL, spec, false, false) < size;
    if (!short_ && kmgr_has_egress(m))
        short_ = internet = pool_count(m, NULL, spec, true, false) < size;
    for (size_t i = 0; !short_ && i < m->npools; i++) {
        spec = m->pools[i].spec;
        short_ = pool_count(m, NULL, spec, false, false) < (size_t)m->pools[i].size;
    }
    for (size_t i = 0; !short_ && i < sc->ntemplates; i++) {
        const sandbox_template_t *t = &sc->templates[i];
        template = t->name;
        spec = kspecs_get(m->kspecs, t->kernelspec ? t->kernelspec : "python3");
        short_ =
            t->pool_size > 0 && pool_count(m, t->name, spec, false, false) < (size_t)t->pool_size;
    }
    if (!short_ || spec == NULL)
        return;
    char id[37];
    replica_uuid(id);
    sg_error_t *err = NULL;
    const kmgr_snapshot_t *ts = template_snapshot(m, template); /* templates.c */
    kmgr_start_opts_t so = {
        .template = template, .snapshot = ts ? ts->id : NULL, .internet = internet};
    if (session_launch(m, spec, id, true, &so, NULL, NULL, &err) == NULL) {
        log_error("kmgr: cannot start a pool kernel%s%s: %s", template ? " of template " : "",
                  template ? template : "", err->msg);
        sg_error_free(&err);
    }
}

const kmgr_config_t *kmgr_config(const kmgr_t *m)
{
    return &m->cfg;
}

const sandbox_template_t *kmgr_template(const kmgr_t *m, const char *name)
{
    return sandbox_template_find(&m->cfg.sandbox, name);
}

/* --- public API ---------------------------------------------------------------- */

/* Session kernels that hold a sandbox: paused ones do not count. */
static size_t running_count(const kmgr_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += !m->entries[i]->pool && kernel_state(m->entries[i]->k) != KERNEL_PAUSED;
    return n;
}

kernel_t *kmgr_start(kmgr_t *m, const char *name, kernel_event_fn *ev, void *ev_arg,
                     sg_error_t **err)
{
    return kmgr_start_with(m, name, &(kmgr_start_opts_t){0}, ev, ev_arg, err);
}

/* A tenant's ceiling as it applies: 0 when it is not below the server's. */
static uint64_t lower(uint64_t tenant, uint64_t server)
{
    return tenant > 0 && tenant < server ? tenant : 0;
}

/* Whether pool kernel e's sandbox is what o's would be (kmgr_start_with). */
static bool pool_fits(const kmgr_t *m, const entry_t *e, const kmgr_start_opts_t *o)
{
    const sandbox_config_t *c = &m->cfg.sandbox;
    bool own_rules = o->egress_allow || o->egress_deny || o->egress_transforms;
    return kernel_internet(e->k) == o->internet &&
           (!o->internet || (!own_rules && !o->egress_limited)) &&
           !lower(o->memory_bytes, c->memory_bytes) && !lower(o->cpu_quota_us, c->cpu_quota_us);
}

static void claimed_rules(const sg_error_t *err, void *arg)
{
    char *id = arg;
    if (err)
        log_warn("kmgr: session %s: its network rules: %s", id, err->msg);
    free(id);
}

/* A kernel in session host's sandbox (kmgr_start_opts_t's sandbox). */
static kernel_t *start_guest(kmgr_t *m, const kspec_t *spec, const kmgr_start_opts_t *o,
                             kernel_event_fn *ev, void *ev_arg, sg_error_t **err)
{
    entry_t *h = entry_find(m, o->sandbox);
    if (h && h->host_id) /* a guest's id names its host's sandbox */
        h = entry_find(m, h->host_id);
    if (!h || h->pool) {
        sg_error_set(err, SG_E_NOTFOUND, "no sandbox %s", o->sandbox);
        return NULL;
    }
    char id[37];
    replica_uuid(id);
    entry_t *e = xzalloc(sizeof *e);
    *e = (entry_t){.mgr = m, .ev = ev, .ev_arg = ev_arg, .opened = true, .ready = false};
    e->host_id = xstrdup(kernel_id(h->k));
    kernel_opts_t opts = m->cfg.kernel;
    opts.owner = kernel_owner(h->k);
    opts.memory_bytes = o->memory_bytes;
    opts.cpu_quota_us = o->cpu_quota_us;
    e->k = kernel_start_guest(h->k, spec, id, &opts, o->env, on_kernel_event, e, err);
    if (e->k == NULL) {
        entry_free(e);
        return NULL;
    }
    add_entry(m, e);
    m->stats.started++;
    return e->k;
}

kernel_t *kmgr_start_with(kmgr_t *m, const char *name, const kmgr_start_opts_t *o,
                          kernel_event_fn *ev, void *ev_arg, sg_error_t **err)
{
    const char *owner = o->owner;
    const kmgr_snapshot_t *snap = o->snapshot ? kmgr_snapshot_get(m, o->snapshot) : NULL;
    if (o->snapshot && !snap) {
        sg_error_set(err, SG_E_NOTFOUND, "no snapshot '%s'", o->snapshot);
        return NULL;
    }
    if (snap && snapshot_usable(m, snap, err) < 0)
        return NULL;
    size_t vi;
    json_t *vol;
    json_array_foreach (snap ? snap->mounts : NULL, vi, vol) {
        const char *src = json_string_value(json_object_get(vol, "source"));
        if (src && access(src, F_OK) != 0) {
            sg_error_set(err, SG_E_CONFLICT,
                         "snapshot %s mounts a volume at %s that has been deleted since", snap->id,
                         json_string_value(json_object_get(vol, "path")));
            return NULL;
        }
    }
    const char *template = snap ? snap->template : o->template;
    const sandbox_template_t *t = kmgr_template(m, template);
    if (template && !t) {
        sg_error_set(err, SG_E_NOTFOUND, "no template '%s'", template);
        return NULL;
    }
    if (t)
        name = t->kernelspec ? t->kernelspec : "python3";
    const kspec_t *spec = kspecs_get(m->kspecs, snap ? snap->kernelspec : name);
    if (spec == NULL) {
        sg_error_set(err, SG_E_NOTFOUND, "no kernelspec named '%s'", name);
        return NULL;
    }
    if (running_count(m) >= (size_t)m->cfg.max_kernels) {
        sg_error_set(err, SG_E_LIMIT, "the maximum of %d kernels is running", m->cfg.max_kernels);
        return NULL;
    }
    if (o->sandbox)
        return start_guest(m, spec, o, ev, ev_arg, err);
    if (o->id && (strlen(o->id) != 36 || entry_find(m, o->id))) {
        sg_error_set(err, SG_E_CONFLICT, "a session %.64s exists here", o->id);
        return NULL;
    }
    for (size_t i = 0; i < m->n && !o->id; i++) {
        entry_t *e = m->entries[i];
        if (!snap && !o->mounts && e->pool && pool_fits(m, e, o) && e->ready &&
            kernel_spec(e->k) == spec && e->template == (t ? t->name : NULL) &&
            kernel_state(e->k) == KERNEL_IDLE) {
            e->pool = false;
            e->ev = ev;
            e->ev_arg = ev_arg;
            kernel_set_owner(e->k, owner);
            if (o->internet) /* the same rules, now its tenant's (a limit added later) */
                kernel_set_egress(e->k, "", "", "", claimed_rules, xstrdup(kernel_id(e->k)));
            session_record(m, e);
            m->stats.claimed_from_pool++;
            log_info("kmgr: session %s claimed from the pool", kernel_id(e->k));
            fill_pool(m);
            return e->k;
        }
    }
    char id[37];
    if (o->id)
        memcpy(id, o->id, sizeof id);
    else
        replica_uuid(id);
    kmgr_start_opts_t so = *o;
    so.template = t ? t->name : NULL;
    if (snap)
        so.mounts = snap->mounts;
    /* No pool kernel: the template's snapshot, when it has one, is a restore
     * instead of a start plus its preload (templates.c). */
    const kmgr_snapshot_t *ts =
        snap || o->internet || o->mounts ? NULL : template_snapshot(m, so.template);
    if (ts)
        so.snapshot = ts->id;
    kernel_t *k = session_launch(m, spec, id, false, &so, ev, ev_arg, err);
    fill_pool(m);
    return k;
}

void kmgr_set_username(kmgr_t *m, kernel_t *k, const char *username)
{
    kernel_set_username(k, username);
    entry_t *e = entry_find(m, kernel_id(k));
    if (e && e->ready) /* else its record is written once it is */
        session_record(m, e);
}

void kmgr_set_egress(kmgr_t *m, kernel_t *k, const char *allow, const char *deny,
                     const char *transforms, sandbox_rules_fn *cb, void *arg)
{
    entry_t *e = entry_find(m, kernel_id(k));
    kernel_set_egress(k, allow, deny, transforms, cb, arg);
    if (e && e->ready) /* else its record is written once it is */
        session_record(m, e);
}

int kmgr_check_egress(const char *allow, const char *deny, const char *transforms, sg_error_t **err)
{
    return sandbox_check_egress(allow, deny, transforms, err);
}

bool kmgr_saves_network(const kmgr_t *m)
{
    return sandbox_env_can_save_live(m->env);
}

bool kmgr_has_egress(const kmgr_t *m)
{
    const char *a = m->cfg.sandbox.egress_allow;
    return m->cfg.sandbox.mode == SANDBOX_RUNSC && a && *a;
}

typedef struct {
    kmgr_t *m;
    kmgr_refused_fn *cb;
    void *arg;
} refusing_t;

/* Sandbox ids to sessions: each session's current sandbox (a restart's new
 * one starts at 0), every session with a network listed. */
static void refused_counted(const json_t *counts, const sg_error_t *err, void *arg)
{
    refusing_t *r = arg;
    json_t *mine = NULL;
    if (counts) {
        json_t *by_sandbox = json_object_get(counts, "sandboxes"), *sessions = json_object();
        json_t *rules = json_object_get(counts, "rules"), *by_rule = json_object();
        for (size_t i = 0; i < r->m->n; i++) {
            kernel_t *k = r->m->entries[i]->k;
            if (r->m->entries[i]->pool || !kernel_internet(k))
                continue;
            json_t *n = json_object_get(by_sandbox, kernel_sandbox_id(k));
            json_object_set_new(sessions, kernel_id(k),
                                json_integer(json_is_integer(n) ? json_integer_value(n) : 0));
            json_t *its = json_object_get(rules, kernel_sandbox_id(k));
            if (its)
                json_object_set(by_rule, kernel_id(k), its);
        }
        mine = json_pack("{s:O, s:o, s:o}", "total", json_object_get(counts, "total"), "sessions",
                         sessions, "rules", by_rule);
    }
    r->cb(mine, err, r->arg);
    json_decref(mine);
    free(r);
}

void kmgr_egress_refused(kmgr_t *m, kmgr_refused_fn *cb, void *arg)
{
    refusing_t *r = xzalloc(sizeof *r);
    *r = (refusing_t){m, cb, arg};
    sandbox_egress_refused(m->env, refused_counted, r);
}

kernel_t *kmgr_get(kmgr_t *m, const char *id)
{
    entry_t *e = entry_find(m, id);
    return e ? e->k : NULL;
}

int kmgr_shutdown(kmgr_t *m, const char *id, sg_error_t **err)
{
    entry_t *e = entry_find(m, id);
    if (e == NULL)
        return sg_error_set(err, SG_E_NOTFOUND, "no kernel %s", id);
    /* Its sandbox's other kernels go with it (their workspace is its). */
    for (size_t i = 0; !e->host_id && i < m->n;)
        if (m->entries[i]->host_id && strcmp(m->entries[i]->host_id, id) == 0)
            kmgr_shutdown(m, kernel_id(m->entries[i]->k), NULL);
        else
            i++;
    cleanup_free char *ws = session_workspace(m, id);
    remove_record(m, id);
    kernel_shutdown(&e->k, false);
    if (!e->host_id)
        sandbox_workspace_close(m->env, ws, true);
    drop_entry(m, e);
    log_info("kmgr: session %s shut down", id);
    return 0;
}

size_t kmgr_count(const kmgr_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += !m->entries[i]->pool;
    return n;
}

kernel_t *kmgr_at(const kmgr_t *m, size_t i)
{
    for (size_t j = 0; j < m->n; j++)
        if (!m->entries[j]->pool && i-- == 0)
            return m->entries[j]->k;
    return NULL;
}

const kspecs_t *kmgr_kspecs(const kmgr_t *m)
{
    return m->kspecs;
}

sandbox_env_t *kmgr_sandbox_env(const kmgr_t *m)
{
    return m->env;
}

void kmgr_stats(const kmgr_t *m, kmgr_stats_t *out)
{
    *out = m->stats;
    out->sessions = out->starting = out->idle = out->busy = out->dead = 0;
    out->pool_ready = out->pool_starting = 0;
    for (size_t i = 0; i < m->n; i++) {
        entry_t *e = m->entries[i];
        if (e->pool) {
            if (e->ready)
                out->pool_ready++;
            else
                out->pool_starting++;
            continue;
        }
        out->sessions++;
        switch (kernel_state(e->k)) {
        case KERNEL_STARTING: out->starting++; break;
        case KERNEL_IDLE: out->idle++; break;
        case KERNEL_BUSY: out->busy++; break;
        case KERNEL_DEAD: out->dead++; break;
        case KERNEL_PAUSING: out->pausing++; break;
        case KERNEL_PAUSED:
            out->paused++;
            out->checkpoint_bytes += kernel_pause_info(e->k).checkpoint_bytes;
            break;
        }
    }
}

static void on_tick(loop_t *loop, int timer_id, void *arg)
{
    kmgr_t *m = arg;
    int64_t now = zclock_mono();
    pause_tick(m, now);
    snapshots_expire(m);
    for (size_t i = 0; m->cfg.cull_idle_ms > 0 && i < m->n; i++) {
        entry_t *e = m->entries[i];
        /* Not idle: starting (a slow start is not idleness), pausing, running or
         * queued work, a frontend connected. */
        if (e->pool || kernel_state(e->k) == KERNEL_STARTING ||
            kernel_state(e->k) == KERNEL_PAUSING || kernel_pending(e->k) > 0 ||
            kernel_connections(e->k) > 0 || now - kernel_last_activity(e->k) < m->cfg.cull_idle_ms)
            continue;
        cleanup_free char *id = xstrdup(kernel_id(e->k));
        log_info("kmgr: culling session %s, idle for %lld ms", id,
                 (long long)(now - kernel_last_activity(e->k)));
        m->stats.culled++;
        kmgr_notice(m, "context.delete", id,
                    json_pack("{s:s, s:I}", "reason", "idle (--idle-timeout)", "idle_ms",
                              (json_int_t)(now - kernel_last_activity(e->k))));
        kmgr_shutdown(m, id, NULL);
        i--; /* the array was compacted */
    }
    fill_pool(m);
}

static int make_dirs(const char *state_dir, sg_error_t **err)
{
    static const char *sub[] = {"sessions", "workspaces", "snapshots"};
    for (int i = 0; i < 3; i++) {
        cleanup_free char *p = xasprintf("%s/%s", state_dir, sub[i]);
        if (mkdir(p, 0711) < 0 && errno != EEXIST)
            return sg_error_errno(err, errno, "cannot create %s", p);
    }
    return 0;
}

kmgr_t *kmgr_new(loop_t *loop, const kmgr_config_t *cfg, sg_error_t **err)
{
    kmgr_t *m = xzalloc(sizeof *m);
    m->loop = loop;
    m->cfg = *cfg;
    m->state_dir = xstrdup(cfg->state_dir);
    m->cfg.state_dir = m->state_dir;
    m->preload = cfg->pool_preload ? xstrdup(cfg->pool_preload) : NULL;
    m->cfg.pool_preload = m->preload;
    m->cfg.kernel.preload = NULL;
    m->tick = -1;
    m->env = sandbox_env_new(&cfg->sandbox, cfg->state_dir, err);
    if (m->env == NULL)
        goto fail;
    if (make_dirs(cfg->state_dir, err) < 0)
        goto fail;
    m->kspecs = kspecs_discover(cfg->kernelspec_path);
    if (kspecs_count(m->kspecs) == 0) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "no Jupyter kernelspecs found (install "
                     "python3-ipykernel)");
        goto fail;
    }
    for (size_t i = 0; i < cfg->sandbox.ntemplates; i++) {
        const sandbox_template_t *t = &cfg->sandbox.templates[i];
        const char *spec = t->kernelspec ? t->kernelspec : "python3";
        if (!kspecs_get(m->kspecs, spec)) {
            sg_error_set(err, SG_E_INVALID, "template '%s': no kernelspec named '%s'", t->name,
                         spec);
            goto fail;
        }
        if (kspecs_get(m->kspecs, t->name)) {
            sg_error_set(err, SG_E_INVALID,
                         "template '%s': a kernelspec has that name (the Jupyter API offers "
                         "each template as a kernelspec of its name); choose another",
                         t->name);
            goto fail;
        }
    }
    if (pools_resolve(m, err) < 0)
        goto fail;
    snapshots_load(m);
    templates_check(m);
    adopt_all(m);
    m->tick = loop_timer(loop, 1000, 0, on_tick, m);
    fill_pool(m);
    return m;
fail:
    kmgr_destroy(&m, false);
    return NULL;
}

void kmgr_destroy(kmgr_t **self_p, bool shutdown)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    kmgr_t *m = *self_p;
    *self_p = NULL;
    if (m->tick >= 0)
        loop_timer_end(m->loop, m->tick);
    while (m->n > 0) {
        entry_t *e = m->entries[m->n - 1];
        m->n--;
        sandbox_cancel(e->opening);
        bool discard = shutdown || e->pool; /* pool kernels are not worth re-adopting */
        if (discard) {
            cleanup_free char *id = xstrdup(kernel_id(e->k));
            cleanup_free char *ws = session_workspace(m, id);
            remove_record(m, id);
            kernel_shutdown(&e->k, true);
            if (!e->host_id)
                sandbox_workspace_close(m->env, ws, true);
        } else {
            kernel_detach(&e->k);
        }
        entry_free(e);
    }
    free(m->entries);
    snapshots_free(m);
    json_decref(m->tsnap_taking);
    kspecs_destroy(&m->kspecs);
    sandbox_env_destroy(&m->env);
    free(m->state_dir);
    free(m->pools);
    free(m->preload);
    free(m);
}
