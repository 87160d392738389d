/* internal: what the manager room's files share — manager.c (sessions,
 * pool, the tick), adopt.c (start-up's re-adoption), pause.c, snapshots.c
 * and templates.c.  Not for use outside kernelmgr/manager/. */
#ifndef SG_KMGR_INTERNAL_H
#define SG_KMGR_INTERNAL_H

#include "kernelmgr/manager/manager.h"

typedef struct entry {
    kmgr_t *mgr;
    kernel_t *k;
    bool pool;            /* warm, unclaimed */
    bool ready;           /* has been ready at least once (pool: claimable) */
    const char *template; /* its template's name (the configuration's); NULL: none */
    kernel_event_fn *ev;
    void *ev_arg;
    uint64_t opening;        /* the launcher prepares the workspace (sandbox_cancel) */
    bool opened;             /* launch: the workspace was made before the kernel existed */
    sg_error_t *open_failed; /* ... or could not be */
    int64_t pause_retry_at;  /* after a failed automatic pause, not before this */
    uint64_t resumes;        /* the kernel's resumes counted in the stats */
    bool draining;           /* kmgr_pause_all waits for its pause */
    bool stop_pause;         /* ... which starts once its work is done */
    const char *auto_pause;  /* why the manager is pausing it (a literal), or NULL */
    json_t *lineage;         /* the contexts it descends from (snapshots), nearest first */
    char *snap_user;         /* the snapshot its start restores: kept until it runs */
    char *host_id;           /* a kernel in that session's sandbox (kmgr_start_opts_t's
                                sandbox): the workspace is that session's */
} entry_t;

struct kmgr {
    loop_t *loop;
    kmgr_config_t cfg;
    char *state_dir, *preload;
    sandbox_env_t *env;
    kspecs_t *kspecs;
    entry_t **entries;
    size_t n, cap;
    int tick;
    kmgr_stats_t stats;
    size_t draining;            /* kmgr_pause_all: pauses not over yet */
    bool stopping;              /* kmgr_pause_all was called: no new pool kernels */
    bool moving_away;           /* kmgr_set_draining: the sessions move away */
    void (*drained)(void *arg); /* called when draining reaches 0 */
    void *drained_arg;
    kmgr_snapshot_t **snaps; /* snapshots.c */
    size_t nsnaps, capsnaps;
    json_t *tsnap_taking; /* templates.c: template name -> true while its snapshot is taken */
    struct spec_pool {
        const kspec_t *spec;
        int size;
    } * pools; /* cfg.pools, resolved */
    size_t npools;
};

/* manager.c */
entry_t *entry_find(const kmgr_t *m, const char *id);
/* e joins the sessions (the manager owns it from here). */
void add_entry(kmgr_t *m, entry_t *e);
/* Each session kernel's observer (arg: its entry). */
void on_kernel_event(kernel_t *k, kernel_event_t ev, const sg_error_t *err, void *arg);
/* e's pause for kmgr_pause_all is done (or will not come). */
void drained_one(kmgr_t *m, entry_t *e);
/* The tick's pauses (pause.c): --pause-after's, and the stop's. */
void pause_tick(kmgr_t *m, int64_t now);
char *session_workspace(const kmgr_t *m, const char *id);
void session_record(kmgr_t *m, entry_t *e);
void kmgr_notice(kmgr_t *m, const char *event, const char *id, json_t *fields);
kernel_t *session_launch(kmgr_t *m, const kspec_t *spec, const char *id, bool pool,
                         const kmgr_start_opts_t *so, kernel_event_fn *ev, void *ev_arg,
                         sg_error_t **err);

/* adopt.c: the sessions a previous sandgate left, taken back (kmgr_new) */
void adopt_all(kmgr_t *m);

/* snapshots.c */
/* The snapshot records under STATE/snapshots, at start-up. */
void snapshots_load(kmgr_t *m);
void snapshots_free(kmgr_t *m);
/* A start or roll-back restores sid: its files are kept until release. */
kmgr_snapshot_t *snapshot_use(kmgr_t *m, const char *sid);
/* The runsc version a snapshot taken now records (a new string; NULL: none). */
char *snapshot_runsc(const kmgr_t *m);
/* 0 when this sandgate's runsc can restore s; else a conflict naming both
 * versions (runsc restores only images of its own version). */
int snapshot_usable(const kmgr_t *m, const kmgr_snapshot_t *s, sg_error_t **err);
void snapshot_release(kmgr_t *m, const char *sid);
/* Snapshots past snapshot_ttl_ms are deleted (on the manager's tick). */
void snapshots_expire(kmgr_t *m);
/* A record written (sid's), and one taken out of the list and freed,
 * its files deleted unless users > 0. */
void snapshot_add(kmgr_t *m, kmgr_snapshot_t *s);
int snapshot_write(kmgr_t *m, const kmgr_snapshot_t *s, sg_error_t **err);
void snapshot_drop(kmgr_t *m, kmgr_snapshot_t *s);
void snapshot_free(kmgr_snapshot_t *s);

/* templates.c */
/* At start-up, after snapshots_load: a template's snapshot of something
 * else than the template is now (its key differs, or it is gone) is dropped. */
void templates_check(kmgr_t *m);
/* A pool kernel of a template with preload code is ready: the template's
 * snapshot is taken of it unless there is one. */
void template_snapshot_maybe(kmgr_t *m, entry_t *e);
/* Template name's snapshot ready to start from; NULL: none. */
const kmgr_snapshot_t *template_snapshot(const kmgr_t *m, const char *name);

#endif
