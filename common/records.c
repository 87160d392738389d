#include "common/records.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"

struct records {
    char *dir;
    char *what;
};

records_t *records_open(const char *dir, const char *what, sg_error_t **err)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        sg_error_errno(err, errno, "cannot create %s", dir);
        return NULL;
    }
    records_t *self = xzalloc(sizeof *self);
    self->dir = xstrdup(dir);
    self->what = xstrdup(what);
    return self;
}

void records_close(records_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    free((*self_p)->dir);
    free((*self_p)->what);
    free(*self_p);
    *self_p = NULL;
}

int records_put(records_t *self, const char *id, const json_t *rec)
{
    cleanup_free char *path = xasprintf("%s/%s.json", self->dir, id);
    cleanup_free char *tmp = xasprintf("%s.tmp", path);
    if (json_dump_file(rec, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0) {
        log_warn("%s %s: cannot record it in %s: %s", self->what, id, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int records_write_file(const char *path, const json_t *doc)
{
    cleanup_free char *tmp = xasprintf("%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool written = fd >= 0 && json_dumpfd(doc, fd, JSON_COMPACT) == 0 && fsync(fd) == 0;
    if (fd >= 0 && close(fd) < 0)
        written = false;
    if (written && rename(tmp, path) == 0)
        return 0;
    log_error("cannot write %s: %s", path, strerror(errno));
    if (fd >= 0)
        unlink(tmp);
    return -1;
}

void records_remove(records_t *self, const char *id)
{
    cleanup_free char *path = xasprintf("%s/%s.json", self->dir, id);
    unlink(path);
}

void records_each(records_t *self, records_fn *fn, void *arg)
{
    DIR *d = opendir(self->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (de->d_name[0] == '.' || n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *path = xasprintf("%s/%s", self->dir, de->d_name);
        json_t *rec = json_load_file(path, 0, NULL);
        const char *id = json_string_value(json_object_get(rec, "id"));
        if (!json_is_object(rec) || !id || strlen(id) != n - 5 || strncmp(id, de->d_name, n - 5)) {
            log_warn("%s: ignoring the malformed record %s", self->what, path);
            unlink(path);
        } else {
            fn(id, rec, arg);
        }
        json_decref(rec);
    }
    closedir(d);
}
