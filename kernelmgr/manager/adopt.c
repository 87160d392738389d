/* adopt: start-up's re-adoption (internal.h) — the sessions a previous
 * sandgate left in the state directory, their sandboxes still running or
 * paused to disk, taken back so that a restart loses no variables; the
 * records of those that are gone removed with their workspaces. */
#include "kernelmgr/manager/internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"

/* Whether pid is still the sandbox (or plain kernel) the record names. */
static bool process_matches(pid_t pid, const char *needle)
{
    if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM)) /* EPERM: alive, root's */
        return false;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (buf[i] == 0)
            buf[i] = ' ';
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* A session paused to disk (or whose sandbox ended while it was being
 * paused: its checkpoint may be complete) stays paused until it is used. */
static kernel_t *adopt_paused(kmgr_t *m, const kspec_t *spec, const char *id, const char *ws,
                              const char *sbid, uint64_t bytes, bool recorded,
                              const kernel_opts_t *opts)
{
    entry_t *e = xzalloc(sizeof *e);
    *e = (entry_t){.mgr = m, .ready = true, .template = opts->template};
    sg_error_t *err = NULL;
    /* Its files stay reachable while it sleeps (after a reboot: mounted again). */
    if (sandbox_workspace_open(m->env, ws, &err) < 0) {
        log_error("kmgr: paused session %s: %s", id, err->msg);
        sg_error_free(&err);
        free(e);
        return NULL;
    }
    e->k =
        kernel_adopt(m->loop, m->env, spec, id, ws, sbid, 0, bytes, opts, on_kernel_event, e, &err);
    if (e->k == NULL) {
        if (recorded)
            log_error("kmgr: paused session %s cannot be re-adopted: %s", id, err->msg);
        sg_error_free(&err);
        free(e);
        return NULL;
    }
    add_entry(m, e);
    m->stats.adopted++;
    log_info("kmgr: re-adopting paused session %s (sandbox %s)", id, sbid);
    kmgr_notice(m, "context.adopt", id,
                json_pack("{s:s, s:b}", "reason", "recorded by a previous sandgate", "paused", 1));
    return e->k;
}

static void adopt_one(kmgr_t *m, const char *file, json_t *live_ids)
{
    json_error_t jerr;
    json_t *rec = json_load_file(file, 0, &jerr);
    const char *id = NULL, *spec_name = NULL, *sbid = NULL, *mode = NULL;
    json_int_t pid = 0;
    int pool = 0;
    bool paused = json_is_true(json_object_get(rec, "paused"));
    bool internet = json_is_true(json_object_get(rec, "internet"));
    /* Sessions recorded before tenants existed are the admin's. */
    const char *owner = json_string_value(json_object_get(rec, "tenant"));
    const char *username = json_string_value(json_object_get(rec, "username"));
    kmgr_start_opts_t so = {
        .internet = internet,
        .owner = owner,
        .memory_bytes = (uint64_t)json_integer_value(json_object_get(rec, "memory_bytes")),
        .cpu_quota_us = (uint64_t)json_integer_value(json_object_get(rec, "cpu_quota_us"))};
    /* A template no longer configured: the session goes on without it
     * (a running or paused sandbox keeps the root its bundle names). */
    const sandbox_template_t *t =
        kmgr_template(m, json_string_value(json_object_get(rec, "template")));
    so.template = t ? t->name : NULL;
    kernel_opts_t opts = m->cfg.kernel;
    opts.template = so.template;
    opts.internet = internet;
    opts.owner = owner;
    opts.memory_bytes = so.memory_bytes;
    opts.cpu_quota_us = so.cpu_quota_us;
    opts.username = username;
    opts.egress_allow = json_string_value(json_object_get(rec, "egress_allow"));
    opts.egress_deny = json_string_value(json_object_get(rec, "egress_deny"));
    opts.egress_transforms = json_string_value(json_object_get(rec, "egress_transforms"));
    opts.mounts = json_object_get(rec, "mounts");
    json_int_t bytes = json_integer_value(json_object_get(rec, "checkpoint_bytes"));
    json_t *lineage = json_object_get(rec, "lineage");
    if (!rec ||
        json_unpack(rec, "{s:s, s:s, s:s, s:I, s:b, s:s}", "id", &id, "kernelspec", &spec_name,
                    "sandbox_id", &sbid, "pid", &pid, "pool", &pool, "mode", &mode) < 0) {
        log_warn("kmgr: ignoring unreadable record %s", file);
        unlink(file);
        json_decref(rec);
        return;
    }
    const kspec_t *spec = kspecs_get(m->kspecs, spec_name);
    bool same_mode = strcmp(mode, m->cfg.sandbox.mode == SANDBOX_RUNSC ? "runsc" : "none") == 0;
    cleanup_free char *ws = session_workspace(m, id);
    cleanup_free char *needle = m->cfg.sandbox.mode == SANDBOX_RUNSC
                                    ? xstrdup(sbid)
                                    : xasprintf("%s/kernels/%s/", m->state_dir, sbid);
    bool alive = !paused && same_mode && process_matches((pid_t)pid, needle);
    sg_error_t *err = NULL;
    kernel_t *k = NULL;
    if (pool || spec == NULL || !same_mode) {
        /* Pool kernels are cheap to replace; foreign records cannot be served. */
        if (alive || same_mode)
            sandbox_remove_id(m->env, sbid, true);
        sandbox_workspace_close(m->env, ws, true);
        unlink(file);
    } else if (alive) {
        entry_t *e = xzalloc(sizeof *e);
        *e = (entry_t){.mgr = m, .template = opts.template};
        if (sandbox_workspace_open(m->env, ws, &err) < 0 ||
            !(e->k = kernel_adopt(m->loop, m->env, spec, id, ws, sbid, (pid_t)pid, 0, &opts,
                                  on_kernel_event, e, &err))) {
            log_error("kmgr: cannot re-adopt session %s: %s", id, err->msg);
            sg_error_free(&err);
            free(e);
            sandbox_remove_id(m->env, sbid, true);
            unlink(file);
        } else {
            add_entry(m, e);
            json_array_append_new(live_ids, json_string(sbid));
            m->stats.adopted++;
            log_info("kmgr: re-adopting session %s (sandbox %s, pid %d)", id, sbid, (int)pid);
            kmgr_notice(
                m, "context.adopt", id,
                json_pack("{s:s, s:b}", "reason", "recorded by a previous sandgate", "paused", 0));
        }
    } else if (sandbox_env_can_pause(m->env) &&
               (k = adopt_paused(m, spec, id, ws, sbid, (uint64_t)bytes, paused, &opts))) {
        kernel_set_username(k, username);
        json_array_append_new(live_ids, json_string(sbid));
    } else {
        /* The sandbox is gone but the session's files are not: a fresh kernel. */
        log_warn("kmgr: session %s lost its sandbox while sandgate was down; starting a new "
                 "kernel (its variables are lost)",
                 id);
        sandbox_remove_id(m->env, sbid, true);
        if (!(k = session_launch(m, spec, id, false, &so, NULL, NULL, &err))) {
            log_error("kmgr: cannot restart session %s: %s", id, err->msg);
            sg_error_free(&err);
            unlink(file);
        } else {
            /* Its new sandbox may take the old one's name, and may not be
             * made yet: neither is an orphan for the sweep below. */
            json_array_append_new(live_ids, json_string(sbid));
            if (*kernel_sandbox_id(k) && strcmp(kernel_sandbox_id(k), sbid) != 0)
                json_array_append_new(live_ids, json_string(kernel_sandbox_id(k)));
            kernel_set_username(k, username); /* recorded once it is ready */
            m->stats.restarted_after_restart++;
            kmgr_notice(
                m, "context.restart", id,
                json_pack("{s:s}", "reason",
                          "its sandbox was gone at start; a new kernel, its variables lost"));
        }
    }
    entry_t *e = id ? entry_find(m, id) : NULL;
    if (e && json_is_array(lineage))
        e->lineage = json_incref(lineage);
    json_decref(rec);
}

void adopt_all(kmgr_t *m)
{
    cleanup_free char *dir = xasprintf("%s/sessions", m->state_dir);
    json_t *live = json_array();
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        cleanup_free char *file = xasprintf("%s/%s", dir, de->d_name);
        adopt_one(m, file, live);
    }
    if (d)
        closedir(d);

    /* Containers under our runsc root that no live record names. */
    sg_error_t *err = NULL;
    json_t *ids = sandbox_list(m->env, &err);
    size_t i, j;
    json_t *v, *w;
    json_array_foreach (ids, i, v) {
        bool known = false;
        json_array_foreach (live, j, w)
            known |= json_equal(v, w);
        if (!known) {
            log_info("kmgr: removing orphan sandbox %s", json_string_value(v));
            sandbox_remove_id(m->env, json_string_value(v), true);
        }
    }
    if (!ids) {
        log_warn("kmgr: %s", err->msg);
        sg_error_free(&err);
    }
    json_decref(ids);
    json_decref(live);

    /* Workspaces of sessions that no longer exist. */
    cleanup_free char *wdir = xasprintf("%s/workspaces", m->state_dir);
    d = opendir(wdir);
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strchr(de->d_name, '.') || entry_find(m, de->d_name))
            continue;
        cleanup_free char *ws = xasprintf("%s/%s", wdir, de->d_name);
        log_info("kmgr: removing the workspace of ended session %s", de->d_name);
        sandbox_workspace_close(m->env, ws, true);
    }
    if (d)
        closedir(d);
}
