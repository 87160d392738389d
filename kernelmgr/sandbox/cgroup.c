/* cgroup: the cgroups runsc makes for sandboxes (cgroup.h). */
#include "kernelmgr/sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "kernelmgr/sandbox/internal.h"

/* What runsc makes and leaves, and sandgate removes, is cgroup.h's.
 * rmdir(2) refuses a cgroup that still has processes or child cgroups, so a
 * removal can never take a live one. */

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

/* A cgroupsPath sandgate made: under /sandgate, nothing climbing out. */
static bool ours(const char *path)
{
    return path && strncmp(path, "/" CGROUP_TOP "/", sizeof CGROUP_TOP + 1) == 0 &&
           !strstr(path, "/..") && !strstr(path, "//");
}

static void remove_cgroup_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts;
    cleanup_free char *dir = xasprintf("%s%s", mnt, (const char *)arg);
    rmdir(dir);
}

void cgroup_remove(const char *path)
{
    if (ours(path))
        each_cgroup_mount(remove_cgroup_in, (void *)path);
}

/* Removes the directories in dir made a minute ago or more; with tenants,
 * a tenant's directory is swept first (its sandboxes' cgroups), then
 * removed if that left it empty. */
static void sweep_dir(const char *dir, bool tenants)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    time_t old = time(NULL) - 60;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISDIR(st.st_mode))
            continue;
        if (tenants &&
            strncmp(e->d_name, CGROUP_TENANT_PREFIX, strlen(CGROUP_TENANT_PREFIX)) == 0) {
            cleanup_free char *sub = xasprintf("%s/%s", dir, e->d_name);
            sweep_dir(sub, false);
        }
        if (st.st_mtime <= old)
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

/* At start: what deleted sandboxes and a crash left.  Only cgroups made a
 * minute ago or more: another sandgate on the machine may be starting a
 * sandbox in a new, still empty one. */
static void sweep_cgroups_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts, (void)arg;
    cleanup_free char *top = xasprintf("%s/" CGROUP_TOP, mnt);
    sweep_dir(top, true);
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
    const char *path;
    long long quota, period;
    int written, failed;
};

static void set_cpu_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    struct cpu_limit *c = arg;
    char buf[64];
    cleanup_free char *dir = xasprintf("%s%s", mnt, c->path);
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
int cgroup_set_cpu(const char *path, long long quota, long long period, sg_error_t **err)
{
    struct cpu_limit c = {.path = path, .quota = quota, .period = period};
    if (ours(path))
        each_cgroup_mount(set_cpu_in, &c);
    if (c.written == 0 || c.failed > 0)
        return sg_error_set(err, SG_E_UNAVAILABLE, "cannot set the CPU limit of cgroup %s", path);
    return 0;
}

/* v2: whether the hierarchy at mnt has the cpu controller (cgroup.controllers). */
static bool v2_has_cpu(const char *mnt)
{
    cleanup_free char *path = xasprintf("%s/cgroup.controllers", mnt);
    FILE *f = fopen(path, "re");
    char buf[512] = "";
    if (f == NULL)
        return false;
    bool got = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); got && w;
         w = strtok_r(NULL, " ", &save))
        if (strcmp(w, "cpu") == 0)
            return true;
    return false;
}

static void tenant_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    const char *tenant = arg;
    if (v2 ? !v2_has_cpu(mnt) : !has_word(opts, "cpu"))
        return;
    cleanup_free char *top = xasprintf("%s/" CGROUP_TOP, mnt);
    cleanup_free char *dir = xasprintf("%s/" CGROUP_TENANT_PREFIX "%s", top, tenant);
    cleanup_error sg_error_t *err = NULL;
    if (host_make_dir(dir, 0755, &err) < 0) {
        log_warn("sandbox: tenant %s's cgroup: %s", tenant, err->msg);
        return;
    }
    char value[16];
    cleanup_free char *file = NULL;
    if (v2) { /* the children get a cpu controller (the root's is the system's to give) */
        cleanup_free char *control = xasprintf("%s/cgroup.subtree_control", top);
        host_write_file(control, "+cpu", NULL);
        file = xasprintf("%s/cpu.weight", dir);
        snprintf(value, sizeof value, "%d", CGROUP_TENANT_WEIGHT);
    } else {
        file = xasprintf("%s/cpu.shares", dir);
        snprintf(value, sizeof value, "%d", CGROUP_TENANT_SHARES);
    }
    if (host_write_file(file, value, &err) < 0)
        log_warn("sandbox: tenant %s's CPU weight: %s", tenant, err->msg);
}

/* The tenant's directory in every hierarchy has just been used: another
 * sandgate's start-up sweep (sweep_dir) leaves it alone for a minute, while
 * runsc makes the sandbox's cgroup in it. */
static void touch_tenant_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    (void)v2, (void)opts;
    cleanup_free char *dir =
        xasprintf("%s/" CGROUP_TOP "/" CGROUP_TENANT_PREFIX "%s", mnt, (const char *)arg);
    utimensat(AT_FDCWD, dir, NULL, 0);
}

void cgroup_prepare(const char *path)
{
    static const char top[] = "/" CGROUP_TOP "/" CGROUP_TENANT_PREFIX;
    if (!ours(path) || strncmp(path, top, sizeof top - 1) != 0)
        return;
    cleanup_free char *tenant = xstrdup(path + sizeof top - 1);
    char *slash = strchr(tenant, '/');
    if (slash == NULL || slash == tenant)
        return;
    *slash = 0;
    each_cgroup_mount(tenant_in, tenant);
    each_cgroup_mount(touch_tenant_in, tenant);
}

struct move {
    const char *from, *to;
    int moved, failed;
};

/* The first line of path into buf ("" when unreadable). */
static void read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "re");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)size, f))
            buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

/* Moves every process listed in from/cgroup.procs to to's; false when some
 * are left after a few passes (the sandbox forks meanwhile: a pass more). */
static bool move_procs(const char *from, const char *to)
{
    cleanup_free char *src = xasprintf("%s/cgroup.procs", from);
    cleanup_free char *dst = xasprintf("%s/cgroup.procs", to);
    for (int pass = 0; pass < 10; pass++) {
        FILE *f = fopen(src, "re");
        if (f == NULL)
            return false;
        int pid, n = 0;
        while (fscanf(f, "%d", &pid) == 1) {
            char buf[16];
            snprintf(buf, sizeof buf, "%d", pid);
            host_write_file(dst, buf, NULL); /* a process that ended meanwhile: ESRCH */
            n++;
        }
        fclose(f);
        if (n == 0)
            return true;
    }
    return false;
}

/* cgroup v1 cpuset: a new cgroup has no CPUs or memory nodes (unless
 * cgroup.clone_children), and no process can join it; dir gets its
 * parent's, the parent first when it has none either (up to the mount). */
static void fill_cpuset(const char *dir, const char *mnt)
{
    cleanup_free char *cpus = xasprintf("%s/cpuset.cpus", dir);
    char value[256];
    read_line(cpus, value, sizeof value);
    if (*value || strlen(dir) <= strlen(mnt))
        return;
    cleanup_free char *parent = xstrdup(dir);
    *strrchr(parent, '/') = 0;
    fill_cpuset(parent, mnt);
    static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
    for (size_t i = 0; i < 2; i++) {
        cleanup_free char *src = xasprintf("%s/%s", parent, files[i]);
        cleanup_free char *dst = xasprintf("%s/%s", dir, files[i]);
        read_line(src, value, sizeof value);
        if (*value)
            host_write_file(dst, value, NULL);
    }
}

static void move_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    struct move *m = arg;
    static const char *const v1[] = {"cpuset.cpus",           "cpuset.mems",
                                     "memory.limit_in_bytes", "cpu.cfs_period_us",
                                     "cpu.cfs_quota_us",      "pids.max"};
    static const char *const v2f[] = {"cpuset.cpus", "cpuset.mems", "memory.max", "cpu.max",
                                      "pids.max"};
    cleanup_free char *from = xasprintf("%s%s", mnt, m->from);
    cleanup_free char *to = xasprintf("%s%s", mnt, m->to);
    struct stat st;
    if (stat(from, &st) < 0)
        return;
    if (host_make_dir(to, 0755, NULL) < 0) {
        m->failed++;
        return;
    }
    if (!v2 && has_word(opts, "cpuset")) {
        cleanup_free char *parent = xstrdup(to);
        *strrchr(parent, '/') = 0;
        fill_cpuset(parent, mnt);
    }
    const char *const *files = v2 ? v2f : v1;
    size_t nfiles = v2 ? sizeof v2f / sizeof *v2f : sizeof v1 / sizeof *v1;
    for (size_t i = 0; i < nfiles; i++) { /* cpusets first: a process needs them to join */
        cleanup_free char *src = xasprintf("%s/%s", from, files[i]);
        cleanup_free char *dst = xasprintf("%s/%s", to, files[i]);
        char value[256];
        read_line(src, value, sizeof value);
        if (*value && host_write_file(dst, value, NULL) < 0)
            log_warn("sandbox: %s: cannot copy %s to %s", m->from, files[i], m->to);
    }
    if (move_procs(from, to) && rmdir(from) == 0)
        m->moved++;
    else
        m->failed++;
}

int cgroup_move(const char *from, const char *to, sg_error_t **err)
{
    struct move m = {.from = from, .to = to};
    if (!ours(from) || !ours(to))
        return sg_error_set(err, SG_E_INVALID, "not sandgate's cgroups: %s, %s", from, to);
    each_cgroup_mount(move_in, &m);
    if (m.failed > 0 || m.moved == 0)
        return sg_error_set(err, SG_E_UNAVAILABLE, "could not move cgroup %s to %s (%d of %d)",
                            from, to, m.failed, m.moved + m.failed);
    return 0;
}

char *cgroup_of_bundle(const char *config_path)
{
    json_t *config = json_load_file(config_path, 0, NULL);
    const char *path =
        json_string_value(json_object_get(json_object_get(config, "linux"), "cgroupsPath"));
    char *copy = ours(path) ? xstrdup(path) : NULL;
    json_decref(config);
    return copy;
}

void cgroup_sweep(void)
{
    each_cgroup_mount(sweep_cgroups_in, NULL);
}

/* --- usage --------------------------------------------------------------------- */

/* The number a file holds, or -1. */
static long long read_number(const char *dir, const char *name)
{
    cleanup_free char *path = xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "re");
    long long v = -1;
    if (f && fscanf(f, "%lld", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

/* The value of "KEY N" in a stat file (memory.stat, cpu.stat), or -1. */
static long long read_stat(const char *dir, const char *name, const char *key)
{
    cleanup_free char *path = xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "re");
    char k[64];
    long long v, found = -1;
    while (f && fscanf(f, "%63s %lld", k, &v) == 2)
        if (strcmp(k, key) == 0) {
            found = v;
            break;
        }
    if (f)
        fclose(f);
    return found;
}

struct usage {
    const char *path;
    sandbox_usage_t *u;
};

static void usage_in(const char *mnt, bool v2, const char *opts, void *arg)
{
    struct usage *c = arg;
    sandbox_usage_t *u = c->u;
    cleanup_free char *dir = xasprintf("%s%s", mnt, c->path);
    long long v;
    if (v2) {
        if ((v = read_stat(dir, "cpu.stat", "usage_usec")) >= 0)
            u->cpu_ns = (uint64_t)v * 1000, u->known = true;
        if ((v = read_number(dir, "memory.current")) >= 0)
            u->mem_bytes = (uint64_t)v, u->known = true;
        if ((v = read_stat(dir, "memory.stat", "file")) >= 0)
            u->mem_cache = (uint64_t)v;
        if ((v = read_number(dir, "memory.max")) > 0) /* "max": no limit, not a number */
            u->mem_limit = (uint64_t)v;
        return;
    }
    if (has_word(opts, "cpuacct") && (v = read_number(dir, "cpuacct.usage")) >= 0)
        u->cpu_ns = (uint64_t)v, u->known = true;
    if (has_word(opts, "memory")) {
        if ((v = read_number(dir, "memory.usage_in_bytes")) >= 0)
            u->mem_bytes = (uint64_t)v, u->known = true;
        if ((v = read_stat(dir, "memory.stat", "cache")) >= 0)
            u->mem_cache = (uint64_t)v;
        if ((v = read_number(dir, "memory.limit_in_bytes")) > 0 && v < (1ll << 60))
            u->mem_limit = (uint64_t)v;
    }
}

bool cgroup_usage(const char *path, sandbox_usage_t *u)
{
    *u = (sandbox_usage_t){0};
    struct usage c = {.path = path, .u = u};
    if (ours(path))
        each_cgroup_mount(usage_in, &c);
    return u->known;
}
