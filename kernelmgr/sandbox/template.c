/* template: the roots of templates (sandbox.h's sandbox_template_t)
 * for the runsc table, prepared once at start-up (blocking, as /etc is):
 *
 *   root=DIR     used as it is; it must have the mount points a sandbox
 *                needs (below), or the start-up fails saying which.
 *   image=PATH   an OCI image: a layout directory (`buildah push IMG
 *                oci:PATH`) or its tar archive (`podman save --format
 *                oci-archive`), PATH[:TAG] when it holds several.  Unpacked
 *                with umoci into STATE/templates/NAME/KEY/rootfs, KEY a hash
 *                of the image's index (a directory) or of the archive's
 *                path, size and time: the next start finds it there.
 *
 * An unpacked image gets the mount points, and the sandbox user in its
 * /etc/passwd and /etc/group.  umoci needs the manifest named by a tag:
 * sandgate writes its own index.json beside the image's blobs (a symlink
 * to them, or the archive's copy) naming the one chosen "sandgate". */
#include "kernelmgr/sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"

#define UMOCI "/usr/bin/umoci"
#define REF_NAME "org.opencontainers.image.ref.name"

/* What a root needs: bind mounts land on these (runsc makes no mount
 * points in a read-only root). */
static const char *const mount_dirs[] = {"proc", "dev", "sys", "tmp", "home/user", "conn"};
static const char *const mount_files[] = {"sandgate-init", "sandgate-kernel.py"};

static int check_root(const char *name, const char *root, sg_error_t **err)
{
    struct stat st;
    if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode))
        return sg_error_set(err, SG_E_INVALID, "template '%s': root %s is not a directory", name,
                            root);
    char missing[512] = "";
    for (size_t i = 0; i < sizeof mount_dirs / sizeof *mount_dirs; i++) {
        cleanup_free char *p = xasprintf("%s/%s", root, mount_dirs[i]);
        if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s/",
                     mount_dirs[i]);
    }
    for (size_t i = 0; i < sizeof mount_files / sizeof *mount_files; i++) {
        cleanup_free char *p = xasprintf("%s/%s", root, mount_files[i]);
        if (stat(p, &st) < 0 || !S_ISREG(st.st_mode))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s",
                     mount_files[i]);
    }
    if (*missing)
        return sg_error_set(err, SG_E_INVALID,
                            "template '%s': root %s lacks mount points sandboxes need:%s "
                            "(directories/, and empty files)",
                            name, root, missing);
    return 0;
}

/* Appends line to root's etc/FILE unless a line starts with its first
 * field and ':'. */
static int add_account(const char *root, const char *file, const char *line, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/etc/%s", root, file);
    cleanup_free char *text = NULL;
    size_t cap = 0;
    FILE *f = fopen(path, "a+e");
    if (!f)
        return sg_error_errno(err, errno, "cannot open %s", path);
    size_t first = strcspn(line, ":") + 1;
    bool have = false;
    rewind(f);
    while (!have && getline(&text, &cap, f) > 0)
        have = strncmp(text, line, first) == 0;
    if (!have)
        fputs(line, f);
    if (fclose(f) != 0)
        return sg_error_errno(err, errno, "cannot write %s", path);
    return 0;
}

/* An unpacked image becomes a root: mount points, the sandbox user. */
static int finish_root(const char *name, const char *root, sg_error_t **err)
{
    for (size_t i = 0; i < sizeof mount_dirs / sizeof *mount_dirs; i++) {
        cleanup_free char *p = xasprintf("%s/%s", root, mount_dirs[i]);
        if (host_make_dir(p, 0755, err) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof mount_files / sizeof *mount_files; i++) {
        cleanup_free char *p = xasprintf("%s/%s", root, mount_files[i]);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return sg_error_errno(err, errno, "template '%s': cannot create %s", name, p);
        close(fd);
    }
    cleanup_free char *etc = xasprintf("%s/etc", root);
    if (host_make_dir(etc, 0755, err) < 0 || chmod(root, 0755) < 0 ||
        add_account(root, "passwd", "user:x:64123:64123::/home/user:/bin/sh\n", err) < 0 ||
        add_account(root, "group", "user:x:64123:\n", err) < 0)
        return -1;
    return check_root(name, root, err);
}

/* KEY: what identifies this version of the image, in 16 hex digits. */
static int image_key(const char *path, const char *tag, const struct stat *st, char key[17],
                     sg_error_t **err)
{
    cleanup_free char *what = NULL;
    if (S_ISDIR(st->st_mode)) {
        cleanup_free char *index = xasprintf("%s/index.json", path);
        json_error_t jerr;
        json_t *j = json_load_file(index, 0, &jerr);
        if (!j)
            return sg_error_set(err, SG_E_INVALID, "%s: %s", index, jerr.text);
        char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        what = xasprintf("dir\n%s\n%s\n%s", path, tag ? tag : "", text);
        free(text);
    } else {
        what =
            xasprintf("archive\n%s\n%s\n%lld\n%lld.%09ld", path, tag ? tag : "",
                      (long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)what, strlen(what));
    sodium_bin2hex(key, 17, h, 8);
    return 0;
}

/* The manifest of layout's index.json to unpack: the one named tag, else
 * the only one. */
static json_t *pick_manifest(const char *layout, const char *tag, sg_error_t **err)
{
    cleanup_free char *index = xasprintf("%s/index.json", layout);
    json_error_t jerr;
    json_t *j = json_load_file(index, 0, &jerr), *pick = NULL, *m;
    json_t *all = json_object_get(j, "manifests");
    size_t i, n = json_array_size(all);
    if (!j || n == 0) {
        sg_error_set(err, SG_E_INVALID, "%s: %s", index, j ? "no manifests" : jerr.text);
        json_decref(j);
        return NULL;
    }
    json_array_foreach (all, i, m) {
        const char *ref =
            json_string_value(json_object_get(json_object_get(m, "annotations"), REF_NAME));
        if (tag ? ref && strcmp(ref, tag) == 0 : n == 1)
            pick = json_deep_copy(m);
    }
    json_decref(j);
    if (!pick && tag)
        sg_error_set(err, SG_E_INVALID, "%s: no image tagged '%s'", index, tag);
    else if (!pick)
        sg_error_set(err, SG_E_INVALID, "%s holds %zu images: name one, PATH:TAG", index, n);
    else if (strcmp(json_string_value(json_object_get(pick, "mediaType")) ?: "",
                    "application/vnd.oci.image.index.v1+json") == 0) {
        sg_error_set(err, SG_E_INVALID,
                     "%s: the image is an index of several platforms; save "
                     "one platform's image",
                     index);
        json_decref(pick);
        pick = NULL;
    }
    return pick;
}

/* work/layout: the image's blobs and an index naming the chosen manifest
 * "sandgate", for umoci. */
static int make_layout(const char *path, const char *tag, bool archive, const char *layout,
                       sg_error_t **err)
{
    if (host_make_dir(layout, 0700, err) < 0)
        return -1;
    if (archive) {
        const char *argv[] = {"/bin/tar", "-xf", path, "-C", layout, "--no-same-owner", NULL};
        if (proc_run_sync(argv, NULL, err) < 0)
            return sg_error_prefix(err, "unpacking the archive");
    } else {
        cleanup_free char *blobs = xasprintf("%s/blobs", path);
        cleanup_free char *link = xasprintf("%s/blobs", layout);
        cleanup_free char *ol = xasprintf("%s/oci-layout", layout);
        if (symlink(blobs, link) < 0)
            return sg_error_errno(err, errno, "symlink %s", link);
        if (host_write_file(ol, "{\"imageLayoutVersion\":\"1.0.0\"}", err) < 0)
            return -1;
    }
    json_t *m = pick_manifest(archive ? layout : path, tag, err);
    if (!m)
        return -1;
    json_t *ann = json_object_get(m, "annotations");
    if (!json_is_object(ann))
        json_object_set_new(m, "annotations", ann = json_object());
    json_object_set_new(ann, REF_NAME, json_string("sandgate"));
    json_t *index = json_pack("{s:i, s:[o]}", "schemaVersion", 2, "manifests", m);
    cleanup_free char *ip = xasprintf("%s/index.json", layout);
    int r = json_dump_file(index, ip, JSON_COMPACT);
    json_decref(index);
    return r < 0 ? sg_error_errno(err, errno, "cannot write %s", ip) : 0;
}

/* Removes every entry of dir but keep. */
static void remove_others(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, keep)) {
            cleanup_free char *p = xasprintf("%s/%s", dir, de->d_name);
            host_remove_tree(p);
        }
    if (d)
        closedir(d);
}

static char *unpack_image(const sandbox_env_t *env, const sandbox_template_t *t, sg_error_t **err)
{
    cleanup_free char *path = xstrdup(t->image);
    char *colon = strrchr(path, ':'), *tag = NULL;
    if (colon && !strchr(colon, '/')) {
        *colon = 0;
        tag = colon + 1;
    }
    struct stat st;
    char key[17];
    if (stat(path, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
        sg_error_set(err, SG_E_INVALID, "template '%s': image %s: %s", t->name, path,
                     errno ? strerror(errno) : "neither a directory nor a file");
        return NULL;
    }
    if (image_key(path, tag, &st, key, err) < 0)
        return NULL;
    cleanup_free char *dir = xasprintf("%s/templates/%s", env->state_dir, t->name);
    cleanup_free char *done = xasprintf("%s/%s", dir, key);
    char *root = xasprintf("%s/rootfs", done);
    if (access(done, F_OK) == 0)
        return root;
    cleanup_free char *work = xasprintf("%s/%s.tmp", dir, key);
    cleanup_free char *layout = xasprintf("%s/layout", work);
    cleanup_free char *wroot = xasprintf("%s/rootfs", work);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    log_info("template %s: unpacking image %s (once; kept in %s)", t->name, t->image, dir);
    host_remove_tree(work);
    const char *argv[] = {UMOCI, "raw", "unpack", "--image", NULL, wroot, NULL};
    if (access(UMOCI, X_OK) != 0) {
        sg_error_set(err, SG_E_UNAVAILABLE,
                     "template '%s': images are unpacked with umoci, and %s is missing "
                     "(apt-get install umoci)",
                     t->name, UMOCI);
        free(root);
        return NULL;
    }
    cleanup_free char *ref = xasprintf("%s:sandgate", layout);
    argv[4] = ref;
    if (host_make_dir(work, 0700, err) < 0 ||
        make_layout(path, tag, S_ISREG(st.st_mode), layout, err) < 0 ||
        proc_run_sync(argv, NULL, err) < 0 || finish_root(t->name, wroot, err) < 0) {
        sg_error_prefix(err, "template '%s': image %s", t->name, t->image);
        host_remove_tree(work);
        free(root);
        return NULL;
    }
    host_remove_tree(layout);
    if (rename(work, done) < 0) {
        sg_error_errno(err, errno, "template '%s': rename %s", t->name, work);
        free(root);
        return NULL;
    }
    remove_others(dir, key); /* earlier versions */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    log_info("template %s: image unpacked in %.1f s", t->name,
             (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return root;
}

int template_roots_init(sandbox_env_t *env, sg_error_t **err)
{
    const sandbox_config_t *cfg = &env->cfg;
    env->template_roots = xzalloc((cfg->ntemplates + 1) * sizeof *env->template_roots);
    cleanup_free char *top = xasprintf("%s/templates", env->state_dir);
    for (size_t i = 0; i < cfg->ntemplates; i++) {
        const sandbox_template_t *t = &cfg->templates[i];
        if (t->root && check_root(t->name, t->root, err) < 0)
            return -1;
        if (t->root)
            env->template_roots[i] = xstrdup(t->root);
        else if (t->image && (host_make_dir(top, 0711, err) < 0 ||
                              !(env->template_roots[i] = unpack_image(env, t, err))))
            return -1;
    }
    return 0;
}

void template_roots_free(sandbox_env_t *env)
{
    for (size_t i = 0; env->template_roots && i < env->cfg.ntemplates; i++)
        free(env->template_roots[i]);
    free(env->template_roots);
    env->template_roots = NULL;
}

const char *template_root_dir(const sandbox_env_t *env, const char *name)
{
    const sandbox_template_t *t = sandbox_template_find(&env->cfg, name);
    return t && env->template_roots ? env->template_roots[t - env->cfg.templates] : NULL;
}
