#include "gateway/auth/keys.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "kernelmgr/egress/egress.h"

#define KEY_PREFIX "sgk_"
#define HASH_PREFIX "sha256:"
#define KEYS_FILE_MAX (16u << 20) /* 16 MiB: about 100,000 tenants */

struct keys {
    tenant_t *tenants;
    size_t n;
    size_t *slots; /* open addressing on the hash's first bytes: index + 1, 0 empty */
    size_t nslots; /* a power of two, at least twice n */
};

bool keys_valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > KEYS_NAME_MAX)
        return false;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static size_t slot_of(const unsigned char hash[32], size_t nslots)
{
    uint64_t h;
    memcpy(&h, hash, sizeof h);
    return (size_t)h & (nslots - 1);
}

static void index_tenants(keys_t *self)
{
    free(self->slots);
    self->nslots = 16;
    while (self->nslots < 2 * self->n)
        self->nslots *= 2;
    self->slots = xzalloc(self->nslots * sizeof *self->slots);
    for (size_t i = 0; i < self->n; i++) {
        size_t s = slot_of(self->tenants[i].hash, self->nslots);
        while (self->slots[s])
            s = (s + 1) & (self->nslots - 1);
        self->slots[s] = i + 1;
    }
}

const tenant_t *keys_lookup(const keys_t *self, const char *key)
{
    if (!self || !key)
        return NULL;
    unsigned char h[32];
    crypto_hash_sha256(h, (const unsigned char *)key, strlen(key));
    for (size_t s = slot_of(h, self->nslots); self->slots[s]; s = (s + 1) & (self->nslots - 1)) {
        const tenant_t *t = &self->tenants[self->slots[s] - 1];
        if (sodium_memcmp(t->hash, h, sizeof h) == 0)
            return t;
    }
    return NULL;
}

const tenant_t *keys_find(const keys_t *self, const char *name)
{
    for (size_t i = 0; self && i < self->n; i++)
        if (strcmp(self->tenants[i].name, name) == 0)
            return &self->tenants[i];
    return NULL;
}

size_t keys_count(const keys_t *self)
{
    return self ? self->n : 0;
}

const tenant_t *keys_at(const keys_t *self, size_t i)
{
    return i < keys_count(self) ? &self->tenants[i] : NULL;
}

void keys_destroy(keys_t **self_p)
{
    keys_t *self = *self_p;
    if (!self)
        return;
    free(self->tenants);
    free(self->slots);
    free(self);
    *self_p = NULL;
}

/* --- the file --------------------------------------------------------------------- */

/* A count's value (max-contexts=N...): 1 to 1000000. */
static bool count_value(const char *v, int *out)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    *out = (int)n;
    return *end == 0 && !errno && n > 0 && n <= 1000000;
}

const tenant_count_t tenant_count_options[] = {
    {"max-contexts", "contexts, live and paused", offsetof(tenant_t, max_contexts)},
    {"max-live", "live kernels at once", offsetof(tenant_t, max_live)},
    {"max-queued", "executions, commands, envd processes and MCP calls at once",
     offsetof(tenant_t, max_queued)},
    {"max-jupyter-sessions", "Jupyter sessions (/api/sessions)",
     offsetof(tenant_t, max_jupyter_sessions)},
    {"max-mcp-sessions", "MCP sessions", offsetof(tenant_t, max_mcp_sessions)},
    {"max-snapshots", "snapshots, whether their context lives or not",
     offsetof(tenant_t, max_snapshots)},
    {"max-snapshot-mib", "MiB of those snapshots", offsetof(tenant_t, max_snapshot_mib)},
    {"max-disk-mib", "MiB of workspaces, checkpoints and snapshots",
     offsetof(tenant_t, max_disk_mib)},
    {"max-volume-mib", "MiB of volumes (their sizes together)", offsetof(tenant_t, max_volume_mib)},
    {"max-rps", "requests a second (a second's worth at once; the rest wait their turn)",
     offsetof(tenant_t, max_rps)},
};
const size_t tenant_ncount_options = sizeof tenant_count_options / sizeof tenant_count_options[0];

int tenant_count(const tenant_t *t, const tenant_count_t *c)
{
    return *(const int *)((const char *)t + c->offset);
}

/* The count option named opt (nlen bytes) of t, or NULL. */
static int *count_option(tenant_t *t, const char *opt, size_t nlen)
{
    for (size_t i = 0; i < tenant_ncount_options; i++)
        if (nlen == strlen(tenant_count_options[i].name) &&
            strncmp(opt, tenant_count_options[i].name, nlen) == 0)
            return (int *)((char *)t + tenant_count_options[i].offset);
    return NULL;
}

/* One option of a tenant's line ("admin", "max-live=4"...) into t. */
static int tenant_option(tenant_t *t, const char *opt, const char **why)
{
    const char *eq = strchr(opt, '=');
    size_t nlen = eq ? (size_t)(eq - opt) : strlen(opt);
    const char *v = eq ? eq + 1 : NULL;
    char *end = NULL;
    if (!v && (nlen == 5 && strncmp(opt, "admin", 5) == 0))
        return t->admin = true, 0;
    if (!v && (nlen == 8 && strncmp(opt, "internet", 8) == 0))
        return t->internet = true, 0;
    if (!v || !*v) {
        *why = "unknown option";
        return -1;
    }
    errno = 0;
    int *count = count_option(t, opt, nlen);
    if (count) {
        if (count_value(v, count))
            return 0;
    } else if (nlen == 6 && strncmp(opt, "memory", 6) == 0) {
        unsigned long long n = strtoull(v, &end, 10);
        t->memory_mib = n;
        if (*end == 0 && !errno && *v != '-' && n >= 64 && n <= (1u << 24))
            return 0;
    } else if (nlen == 4 && strncmp(opt, "cpus", 4) == 0) {
        t->cpus = strtod(v, &end);
        if (*end == 0 && t->cpus >= 0.01 && t->cpus <= 1024)
            return 0;
    } else if (nlen == 6 && strncmp(opt, "egress", 6) == 0) { /* checked as rules are */
        if (strlen(v) < sizeof t->egress && !strpbrk(v, " \t") &&
            egress_check_rules(v, NULL, NULL) >= 0)
            return snprintf(t->egress, sizeof t->egress, "%s", v), 0;
    } else {
        *why = "unknown option";
        return -1;
    }
    *why = "bad value";
    return -1;
}

/* One tenant's line: NAME sha256:HEX [OPTION...]. */
static int parse_line(char *line, tenant_t *t, const char **why)
{
    char *save = NULL, *name = strtok_r(line, " \t", &save), *hash = strtok_r(NULL, " \t", &save);
    *t = (tenant_t){0};
    if (!name || !keys_valid_name(name)) {
        *why = "a tenant name is 1-63 of A-Z a-z 0-9 . _ -";
        return -1;
    }
    if (strcmp(name, "admin") == 0) { /* it would own --token's sessions */
        *why = "'admin' is the tenant of --token; give this one another name";
        return -1;
    }
    strcpy(t->name, name);
    size_t hlen = 0;
    if (!hash || strncmp(hash, HASH_PREFIX, strlen(HASH_PREFIX)) != 0 ||
        sodium_hex2bin(t->hash, sizeof t->hash, hash + strlen(HASH_PREFIX),
                       strlen(hash + strlen(HASH_PREFIX)), NULL, &hlen, NULL) != 0 ||
        hlen != sizeof t->hash) {
        *why = "the second field is sha256: and 64 hex digits";
        return -1;
    }
    for (char *opt; (opt = strtok_r(NULL, " \t", &save));)
        if (tenant_option(t, opt, why) < 0)
            return -1;
    return 0;
}

static keys_t *keys_parse(char *text, const char *path, sg_error_t **err)
{
    keys_t *self = xzalloc(sizeof *self);
    int lineno = 0;
    for (char *next = text, *line; (line = strsep(&next, "\n"));) {
        lineno++;
        line += strspn(line, " \t");
        line[strcspn(line, "\r")] = 0;
        if (*line == 0 || *line == '#')
            continue;
        tenant_t t;
        const char *why = NULL;
        if (parse_line(line, &t, &why) < 0) {
            sg_error_set(err, SG_E_INVALID, "%s:%d: %s", path, lineno, why);
            keys_destroy(&self);
            return NULL;
        }
        if (keys_find(self, t.name)) {
            sg_error_set(err, SG_E_INVALID, "%s:%d: tenant '%s' is named twice", path, lineno,
                         t.name);
            keys_destroy(&self);
            return NULL;
        }
        self->tenants = xrealloc(self->tenants, (self->n + 1) * sizeof *self->tenants);
        self->tenants[self->n++] = t;
    }
    index_tenants(self);
    return self;
}

/* Whether a keys file of this mode and owner may be used: owned by root or
 * by owner_ok, nothing for others, no write for its group. */
static int check_mode(const char *path, unsigned mode, unsigned uid, unsigned owner_ok,
                      sg_error_t **err)
{
    if (uid != 0 && uid != owner_ok)
        return sg_error_set(err, SG_E_INVALID,
                            "keys file %s belongs to uid %u: it must belong to root or to uid %u",
                            path, uid, owner_ok);
    if (mode & (S_IRWXO | S_IWGRP))
        return sg_error_set(err, SG_E_INVALID,
                            "keys file %s has mode %04o: others must have no access and its group "
                            "no write (chmod 600 %s)",
                            path, mode & 07777, path);
    return 0;
}

keys_t *keys_from_text(const char *text, const char *path, unsigned mode, unsigned uid,
                       unsigned owner_ok, sg_error_t **err)
{
    if (check_mode(path, mode, uid, owner_ok, err) < 0)
        return NULL;
    cleanup_free char *copy = xstrdup(text);
    return keys_parse(copy, path, err);
}

/* The file's text, once its owner and mode are checked. */
static char *read_checked(const char *path, sg_error_t **err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        sg_error_errno(err, errno, "cannot read keys file %s", path);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        sg_error_set(err, SG_E_INVALID, "keys file %s is not a regular file", path);
        return NULL;
    }
    if (check_mode(path, st.st_mode, st.st_uid, geteuid(), err) < 0)
        return NULL;
    if ((uint64_t)st.st_size > KEYS_FILE_MAX) {
        sg_error_set(err, SG_E_INVALID, "keys file %s is larger than %u bytes", path,
                     KEYS_FILE_MAX);
        return NULL;
    }
    char *text = xmalloc((size_t)st.st_size + 1);
    size_t len = 0;
    ssize_t got;
    while (len < (size_t)st.st_size && (got = read(fd, text + len, st.st_size - len)) > 0)
        len += (size_t)got;
    text[len] = 0;
    if (memchr(text, 0, len)) {
        sg_error_set(err, SG_E_INVALID, "keys file %s is not a text file", path);
        free(text);
        return NULL;
    }
    return text;
}

keys_t *keys_load(const char *path, sg_error_t **err)
{
    cleanup_free char *text = read_checked(path, err);
    return text ? keys_parse(text, path, err) : NULL;
}

/* --- sandgate keys ------------------------------------------------------------------ */

static void tenant_line(FILE *f, const tenant_t *t)
{
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, t->hash, sizeof t->hash);
    fprintf(f, "%s %s%s", t->name, HASH_PREFIX, hex);
    if (t->admin)
        fputs(" admin", f);
    for (size_t i = 0; i < tenant_ncount_options; i++)
        if (tenant_count(t, &tenant_count_options[i]))
            fprintf(f, " %s=%d", tenant_count_options[i].name,
                    tenant_count(t, &tenant_count_options[i]));
    if (t->memory_mib)
        fprintf(f, " memory=%llu", (unsigned long long)t->memory_mib);
    if (t->cpus > 0)
        fprintf(f, " cpus=%g", t->cpus);
    if (t->internet)
        fputs(" internet", f);
    if (t->egress[0])
        fprintf(f, " egress=%s", t->egress);
    fputc('\n', f);
}

/* Writes self to path through a new file renamed over it (mode 0600), so a
 * daemon reading it on SIGHUP sees the old file or the new, never half. */
static int keys_save(const keys_t *self, const char *path)
{
    cleanup_free char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "sandgate keys: cannot write %s: %s\n", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fputs("# sandgate keys file: NAME sha256:HASH [admin] [max-contexts=N] [max-live=N]\n"
          "# [max-queued=N] [max-jupyter-sessions=N] [max-mcp-sessions=N] [max-snapshots=N]\n"
          "# [max-snapshot-mib=N] [max-disk-mib=N] [max-rps=N] [memory=MIB] [cpus=N]\n"
          "# [internet] [egress=ENTRY,...].\n"
          "# Edit with `sandgate keys`;\n"
          "# keys are never stored, only their hashes.  SIGHUP makes a running sandgate\n"
          "# read it again.\n",
          f);
    for (size_t i = 0; i < self->n; i++)
        tenant_line(f, &self->tenants[i]);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "sandgate keys: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A new key: its text (returned, to print once) and its hash (in t). */
static char *new_key(tenant_t *t)
{
    unsigned char raw[32];
    randombytes_buf(raw, sizeof raw);
    char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
    sodium_bin2base64(b64, sizeof b64, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    char *key = xasprintf(KEY_PREFIX "%s", b64);
    crypto_hash_sha256(t->hash, (const unsigned char *)key, strlen(key));
    sodium_memzero(raw, sizeof raw);
    return key;
}

static const char keys_usage[] =
    "usage: sandgate keys add NAME [--admin] [--max-contexts N] [--max-live N]\n"
    "                        [--max-queued N] [--max-jupyter-sessions N]\n"
    "                        [--max-mcp-sessions N] [--max-snapshots N]\n"
    "                        [--max-snapshot-mib N] [--max-disk-mib N] [--max-rps N]\n"
    "                        [--memory MIB] [--cpus N] [--internet]\n"
    "                        [--egress ENTRY,...]\n"
    "                        --keys-file FILE\n"
    "       sandgate keys rotate NAME --keys-file FILE\n"
    "       sandgate keys remove NAME --keys-file FILE\n"
    "       sandgate keys list --keys-file FILE\n"
    "\n"
    "Manages the tenants of a keys file (--keys-file, or SANDGATE_KEYS_FILE).\n"
    "add and rotate print the tenant's new key once, as the last line of their\n"
    "output; the file keeps only its SHA-256.  The file is written mode 0600.\n"
    "A running sandgate reads it again on SIGHUP: a new key works at once; a\n"
    "removed or rotated one stops working, and every WebSocket and stream it\n"
    "opened is closed; no session is touched.\n"
    "Options of add (limits of this tenant; 0 or absent: the server's\n"
    "--tenant-max-...):\n"
    "  --admin             sees and manages every tenant's sessions\n"
    "  --max-contexts N    contexts, live and paused\n"
    "  --max-live N        live kernels at once\n"
    "  --max-queued N      executions, commands, envd processes and MCP calls\n"
    "                      waiting or running at once, all its sessions\n"
    "  --max-jupyter-sessions N   Jupyter sessions (/api/sessions)\n"
    "  --max-mcp-sessions N       MCP sessions\n"
    "  --max-snapshots N   snapshots, whether their context lives or not\n"
    "  --max-snapshot-mib N       MiB of those snapshots\n"
    "  --max-disk-mib N    MiB of workspaces, checkpoints and snapshots\n"
    "  --max-rps N         requests a second (a second's worth at once; the rest\n"
    "                      wait their turn, and past another second's worth, 429)\n"
    "  --memory MIB        memory ceiling per sandbox\n"
    "  --cpus N            CPU ceiling per sandbox\n"
    "  --internet          may create contexts with a network (--egress-allow)\n"
    "  --egress LIST       what those reach at most, whatever their own rules say:\n"
    "                      addresses, CIDR ranges and host names, comma-separated\n"
    "                      (198.51.100.0/24,api.example.com,*.example.org)\n";

/* The file to edit: its tenants, or an empty set when it does not exist. */
static keys_t *load_for_edit(const char *path, bool create)
{
    if (create && access(path, F_OK) != 0 && errno == ENOENT)
        return xzalloc(sizeof(keys_t));
    sg_error_t *err = NULL;
    keys_t *k = keys_load(path, &err);
    if (!k) {
        fprintf(stderr, "sandgate keys: %s\n", err->msg);
        sg_error_free(&err);
    }
    return k;
}

static int keys_add(keys_t *k, const char *path, const tenant_t *want)
{
    if (keys_find(k, want->name)) {
        fprintf(stderr,
                "sandgate keys: tenant '%s' exists in %s (rotate gives it a new key; remove "
                "it first to change its limits)\n",
                want->name, path);
        return 1;
    }
    k->tenants = xrealloc(k->tenants, (k->n + 1) * sizeof *k->tenants);
    tenant_t *t = &k->tenants[k->n++];
    *t = *want;
    cleanup_free char *key = new_key(t);
    if (keys_save(k, path) < 0)
        return 1;
    printf("tenant '%s' added to %s; its key (shown once):\n%s\n", t->name, path, key);
    return 0;
}

static int keys_rotate(keys_t *k, const char *path, const char *name)
{
    tenant_t *t = (tenant_t *)keys_find(k, name);
    if (!t) {
        fprintf(stderr, "sandgate keys: no tenant '%s' in %s\n", name, path);
        return 1;
    }
    cleanup_free char *key = new_key(t);
    if (keys_save(k, path) < 0)
        return 1;
    printf("tenant '%s' has a new key in %s (the old one stops working at SIGHUP); shown "
           "once:\n%s\n",
           name, path, key);
    return 0;
}

static int keys_remove(keys_t *k, const char *path, const char *name)
{
    const tenant_t *t = keys_find(k, name);
    if (!t) {
        fprintf(stderr, "sandgate keys: no tenant '%s' in %s\n", name, path);
        return 1;
    }
    size_t i = (size_t)(t - k->tenants);
    memmove(&k->tenants[i], &k->tenants[i + 1], (k->n - i - 1) * sizeof *k->tenants);
    k->n--;
    if (keys_save(k, path) < 0)
        return 1;
    printf("tenant '%s' removed from %s (its key stops working at SIGHUP; its sessions stay "
           "until deleted)\n",
           name, path);
    return 0;
}

static void keys_list(const keys_t *k)
{
    printf("%-24s %-5s", "TENANT", "ADMIN");
    for (size_t c = 0; c < tenant_ncount_options; c++) {
        char upper[32];
        size_t i = 0;
        for (; tenant_count_options[c].name[i] && i < sizeof upper - 1; i++)
            upper[i] = (char)toupper((unsigned char)tenant_count_options[c].name[i]);
        upper[i] = 0;
        printf(" %s", upper);
    }
    printf(" %s %s %s %s\n", "MEMORY-MIB", "CPUS", "INTERNET", "EGRESS");
    for (size_t i = 0; i < k->n; i++) {
        const tenant_t *t = &k->tenants[i];
        printf("%-24s %-5s", t->name, t->admin ? "yes" : "no");
        for (size_t c = 0; c < tenant_ncount_options; c++) {
            int n = tenant_count(t, &tenant_count_options[c]);
            char v[16] = "-";
            if (n)
                snprintf(v, sizeof v, "%d", n);
            printf(" %*s", (int)strlen(tenant_count_options[c].name), v);
        }
        char mem[24] = "-", cpus[16] = "-";
        if (t->memory_mib)
            snprintf(mem, sizeof mem, "%llu", (unsigned long long)t->memory_mib);
        if (t->cpus > 0)
            snprintf(cpus, sizeof cpus, "%g", t->cpus);
        printf(" %10s %4s %8s %s\n", mem, cpus, t->internet ? "yes" : "no",
               t->egress[0] ? t->egress : "-");
    }
}

/* add's options into t; -1 after a usage message.  Each count of the keys
 * file (tenant_count_options) is an option --NAME N; getopt gives it 256 + its
 * index. */
static int add_options(int argc, char **argv, tenant_t *t, const char **path)
{
    enum { COUNT = 256 };
    struct option lo[32] = {
        {"keys-file", required_argument, NULL, 'f'}, {"admin", no_argument, NULL, 'a'},
        {"memory", required_argument, NULL, 'm'},    {"cpus", required_argument, NULL, 'u'},
        {"internet", no_argument, NULL, 'i'},        {"help", no_argument, NULL, 'h'},
        {"egress", required_argument, NULL, 'e'}};
    size_t n = 7;
    for (size_t c = 0; c < tenant_ncount_options && n < sizeof lo / sizeof lo[0] - 1; c++)
        lo[n++] =
            (struct option){tenant_count_options[c].name, required_argument, NULL, COUNT + (int)c};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        const char *name = c >= COUNT ? tenant_count_options[c - COUNT].name
                           : c == 'm' ? "memory"
                           : c == 'u' ? "cpus"
                           : c == 'e' ? "egress"
                                      : NULL;
        if (c == 'f')
            *path = optarg;
        else if (c == 'a')
            t->admin = true;
        else if (c == 'i')
            t->internet = true;
        else if (c == 'h') {
            fputs(keys_usage, stdout);
            exit(0);
        } else if (name) {
            cleanup_free char *opt = xasprintf("%s=%s", name, optarg);
            const char *why = NULL;
            if (tenant_option(t, opt, &why) < 0) {
                fprintf(stderr, "sandgate keys: --%s: %s '%s'\n", name, why, optarg);
                return -1;
            }
        } else {
            fputs("Try 'sandgate keys --help'.\n", stderr);
            return -1;
        }
    }
    return 0;
}

/* Whether add's options set anything (the other commands take none). */
static bool any_limit(const tenant_t *t)
{
    for (size_t c = 0; c < tenant_ncount_options; c++)
        if (tenant_count(t, &tenant_count_options[c]))
            return true;
    return t->admin || t->internet || t->memory_mib || t->cpus > 0 || t->egress[0];
}

int keys_main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (!cmd || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(keys_usage, cmd ? stdout : stderr);
        return cmd ? 0 : 2;
    }
    tenant_t want = {0};
    const char *path = getenv("SANDGATE_KEYS_FILE");
    /* argv[1] is the command; getopt permutes the rest, leaving NAME last. */
    if (add_options(argc - 1, argv + 1, &want, &path) < 0)
        return 2;
    const char *name = optind < argc - 1 ? argv[1 + optind] : NULL;
    bool needs_name = strcmp(cmd, "list") != 0;
    if (!path || (needs_name && !name) || (!needs_name && name) ||
        (needs_name && optind + 2 < argc) || (strcmp(cmd, "add") != 0 && any_limit(&want))) {
        fprintf(stderr, "%s",
                !path ? "sandgate keys: --keys-file FILE (or SANDGATE_KEYS_FILE) "
                        "is needed\n"
                      : "");
        fputs(keys_usage, stderr);
        return 2;
    }
    if (name && strcmp(name, "admin") == 0) {
        fprintf(stderr, "sandgate keys: 'admin' is the tenant of --token; choose another name "
                        "(--admin makes any tenant an admin)\n");
        return 2;
    }
    if (name && !keys_valid_name(name)) {
        fprintf(stderr, "sandgate keys: '%s': a tenant name is 1-63 of A-Z a-z 0-9 . _ -\n", name);
        return 2;
    }
    if (strcmp(cmd, "add") && strcmp(cmd, "rotate") && strcmp(cmd, "remove") &&
        strcmp(cmd, "list")) {
        fprintf(stderr, "sandgate keys: unknown command '%s'\n%s", cmd, keys_usage);
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    keys_t *k = load_for_edit(path, strcmp(cmd, "add") == 0);
    if (!k)
        return 1;
    int rc = 0;
    if (strcmp(cmd, "add") == 0) {
        strcpy(want.name, name);
        rc = keys_add(k, path, &want);
    } else if (strcmp(cmd, "rotate") == 0) {
        rc = keys_rotate(k, path, name);
    } else if (strcmp(cmd, "remove") == 0) {
        rc = keys_remove(k, path, name);
    } else {
        keys_list(k);
    }
    keys_destroy(&k);
    return rc;
}
