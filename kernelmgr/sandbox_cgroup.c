/* sandbox_cgroup: the cgroups runsc makes for sandboxes (sandbox_cgroup.h). */
#include "kernelmgr/sandbox_cgroup.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "kernelmgr/sandbox_internal.h"

/*
 * runsc makes each sandbox's cgroup (cgroupsPath /sandgate/ID, in every
 * hierarchy) and leaves it behind when the sandbox is deleted, one per
 * start and per resume; sandgate removes it.  rmdir(2) refuses a cgroup
 * that still has processes, so a removal can never take a live one. */

typedef void cgroup_fn(const char *mnt, bool v2, const char *opts, void *arg);

static void each_cgroup_mount(cgroup_fn *fn, void *arg)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return;
    cleanup_free char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        const char *sep = strstr(line, " - ");
        char fstype[32], opts[512], mnt[PATH_MAX];
        if (sep == NULL || sscanf(sep + 3, "%31s %*s %511s", fstype, opts) != 2 ||
            sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        bool v2 = strcmp(fstype, "cgroup2") == 0;
        if (v2 || strcmp(fstype, "cgroup") == 0)
            fn(mnt, v2, opts, arg);
    }
    fclose(f);
}

static void remove_cgroup_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts;
    cleanup_free char *dir = xasprintf("%s/sandgate/%s", mnt, (const char *)arg);
    rmdir(dir);
}

void cgroup_remove(const char *id)
{
    each_cgroup_mount(remove_cgroup_in, (void *)id);
}

/* At start: what deleted sandboxes and a crash left.  Only cgroups made a
 * minute ago or more: another sandgate on the machine may be starting a
 * sandbox in a new, still empty one. */
static void sweep_cgroups_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts, (void)arg;
    cleanup_free char *top = xasprintf("%s/sandgate", mnt);
    DIR *d = opendir(top);
    if (d == NULL)
        return;
    struct dirent *e;
    time_t old = time(NULL) - 60;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0 ||
            !S_ISDIR(st.st_mode) || st.st_mtime > old)
            continue;
        unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

struct cpu_limit {
    const char *id;
    long long quota, period;
    int written, failed;
};

static void set_cpu_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    struct cpu_limit *c = arg;
    char buf[64];
    cleanup_free char *dir = xasprintf("%s/sandgate/%s", mnt, c->id);
    if (v2) {
        cleanup_free char *max = xasprintf("%s/cpu.max", dir);
        if (access(max, F_OK) < 0)
            return; /* no cpu controller here */
        snprintf(buf, sizeof buf, "%lld %lld", c->quota, c->period);
        host_write_file(max, buf, NULL) < 0 ? c->failed++ : c->written++;
        return;
    }
    if (!has_word(opts, "cpu"))
        return;
    cleanup_free char *period = xasprintf("%s/cpu.cfs_period_us", dir);
    cleanup_free char *quota = xasprintf("%s/cpu.cfs_quota_us", dir);
    snprintf(buf, sizeof buf, "%lld", c->period);
    int r = host_write_file(period, buf, NULL);
    snprintf(buf, sizeof buf, "%lld", c->quota);
    r |= host_write_file(quota, buf, NULL);
    r < 0 ? c->failed++ : c->written++;
}

/* Puts the sandbox's CPU quota in place (restore runs without it). */
int cgroup_set_cpu(const char *id, long long quota, long long period, sg_error_t **err)
{
    struct cpu_limit c = {.id = id, .quota = quota, .period = period};
    each_cgroup_mount(set_cpu_in, &c);
    if (c.written == 0 || c.failed > 0)
        return sg_error_set(err, SG_E_UNAVAILABLE,
                            "cannot set the CPU limit of sandbox %s in its cgroup", id);
    return 0;
}

void cgroup_sweep(void)
{
    each_cgroup_mount(sweep_cgroups_in, NULL);
}
