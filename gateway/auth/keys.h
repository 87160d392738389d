/* keys: tenants and their API keys (--keys-file), and `sandgate keys`.
 *
 * The keys file holds one tenant a line — its name, the SHA-256 of its key
 * and its limits — never a key:
 *
 *   # name   key hash          options
 *   alice    sha256:9f86d08…   max-contexts=20 max-live=4 max-queued=16 memory=2048
 *   bob      sha256:2c26b46…   max-snapshots=8 max-disk-mib=4096
 *   ops      sha256:60303ae…   admin
 *
 * A client presents its key as a bearer token; sandgate hashes what it was
 * given and looks the hash up, so finding a tenant compares nothing secret
 * byte by byte and tells nothing about other keys (as sshd's authorized_keys
 * holds public keys only).  Keys are 32 random bytes, so a plain SHA-256
 * of one cannot be searched back to it.
 *
 * The file must belong to root or to the user reading it, and give nothing
 * to others (no 'o' bits, no group write): keys_load refuses it otherwise,
 * naming the file and its mode, as sshd's StrictModes does.
 */
#ifndef SG_KEYS_H
#define SG_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define KEYS_NAME_MAX 63

typedef struct {
    char name[KEYS_NAME_MAX + 1];
    bool admin;               /* sees and manages every tenant's sessions */
    int max_contexts;         /* contexts live + paused; 0: the server's default */
    int max_live;             /* live kernels at once; 0: the server's default */
    int max_queued;           /* executions, commands, envd processes and MCP calls waiting or
                                 running at once; 0: the server's default */
    int max_jupyter_sessions; /* Jupyter sessions (/api/sessions); 0: the server's default */
    int max_mcp_sessions;     /* MCP sessions; 0: the server's default */
    int max_snapshots;        /* snapshots, whether their context lives or not; 0: the server's */
    int max_snapshot_mib;     /* the bytes of those snapshots, in MiB; 0: the server's */
    int max_disk_mib;         /* workspaces + checkpoints + snapshots, in MiB; 0: the server's */
    int max_rps;              /* requests a second (ratelimit.h); 0: the server's */
    int max_volume_mib;       /* the sizes of its volumes together, in MiB; 0: the server's */
    uint64_t memory_mib;      /* memory ceiling per sandbox; 0: the server's */
    double cpus;              /* CPU ceiling per sandbox; 0: the server's */
    bool internet;            /* may create contexts with a network */
    char egress[2048];        /* "ENTRY,...": what those reach at most (addresses, CIDR ranges,
                                 host names; egress.h); "": what the server allows */
    unsigned char hash[32];
} tenant_t;

typedef struct keys keys_t;

/* Reads and checks path (owner, mode, syntax: errors name the file, and the
 * line or the mode).  NULL with *err set. */
keys_t *keys_load(const char *path, sg_error_t **err);
/* The same from a file's text, mode and owner read elsewhere (the
 * launcher reads it for a daemon that has no root any more); owner_ok: the
 * uid besides root that may own it. */
keys_t *keys_from_text(const char *text, const char *path, unsigned mode, unsigned uid,
                       unsigned owner_ok, sg_error_t **err);
void keys_destroy(keys_t **self_p);

/* The tenant whose key is key (a client's token), or NULL.  Borrowed: valid
 * until self is destroyed. */
const tenant_t *keys_lookup(const keys_t *self, const char *key);
const tenant_t *keys_find(const keys_t *self, const char *name);
size_t keys_count(const keys_t *self);
const tenant_t *keys_at(const keys_t *self, size_t i);

/* The keys file's count options (max-contexts=N, ...), in the order the
 * file and `sandgate keys list` give them: each one's name and where t
 * keeps it. */
typedef struct {
    const char *name;
    const char *help; /* for `sandgate keys --help` */
    size_t offset;    /* of its int in tenant_t */
} tenant_count_t;
extern const tenant_count_t tenant_count_options[];
extern const size_t tenant_ncount_options;
/* t's value of count c (0: the server's default). */
int tenant_count(const tenant_t *t, const tenant_count_t *c);

/* A valid tenant name: 1-63 of A-Z a-z 0-9 . _ - */
bool keys_valid_name(const char *name);

/* `sandgate keys add|list|remove|rotate ...` (argv[0] is "keys"): the
 * exit status. */
int keys_main(int argc, char **argv);

#endif
