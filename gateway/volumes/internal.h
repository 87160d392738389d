/* The volumes room's own: what volumes.c (the list, E2B's Volume API,
 * mounts) and content.c (a volume's files, E2B's volume content API)
 * share. */
#ifndef SG_VOLUMES_INTERNAL_H
#define SG_VOLUMES_INTERNAL_H

#include "gateway/volumes/volumes.h"

#define VOLUME_TOKEN_PREFIX "sgvol_"

static inline void volume_json_put(json_t **j)
{
    json_decref(*j);
}
#define cleanup_json __attribute__((cleanup(volume_json_put)))

typedef struct {
    char id[37];
    char *name, *owner;
    char *path; /* STATE/volumes/<id>: the mount point */
    char token[6 + 48 + 1];
    int mib;
    int64_t created_ms;
    bool ready; /* made: until then counted, never listed nor mounted */
} volume_t;

struct volumes {
    loop_t *loop;
    kmgr_t *kmgr;
    char *state_dir, *record;
    int default_mib;
    void (*wake)(void *);
    void *wake_arg;
    volume_t **v;
    size_t n, cap;
};

/* E2B's volume content API: /volumecontent/{volume}/path|dir|file. */
int volume_content_register(volumes_t *self, http_server_t *http, const http_front_t *front,
                            sg_error_t **err);

#endif
