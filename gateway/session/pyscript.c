#include "gateway/session/pyscript.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"

static const char *const files[PY_SCRIPTS] = {"command.py", "env_set.py", "env_restore.py",
                                              "context_cwd.py", "kernel_setup.py"};
static char *texts[PY_SCRIPTS];

/* Where the scripts are: see pyscript.h. */
static char *scripts_dir(void)
{
    const char *init = getenv("SANDGATE_INIT");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    const char *bases[] = {init && *init ? init : NULL, n > 0 ? exe : NULL, SG_INIT_PATH};
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        if (bases[i] == NULL)
            continue;
        const char *slash = strrchr(bases[i], '/');
        char *dir = slash ? xasprintf("%.*s/py", (int)(slash - bases[i]), bases[i]) : xstrdup("py");
        char *probe = xasprintf("%s/%s", dir, files[0]);
        bool there = access(probe, F_OK) == 0;
        free(probe);
        if (there)
            return dir;
        free(dir);
    }
    const char *slash = strrchr(SG_INIT_PATH, '/');
    return xasprintf("%.*s/py", (int)(slash ? slash - SG_INIT_PATH : 1),
                     slash ? SG_INIT_PATH : ".");
}

static char *read_text(const char *path, sg_error_t **err)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        sg_error_set(err, SG_E_IO,
                     "cannot read %s: %s (sandgate's Python scripts; run make "
                     "install, or set SANDGATE_INIT to a build's sandgate-init)",
                     path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        abort();
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, out);
    bool failed = ferror(f);
    fclose(f);
    fclose(out);
    if (failed) {
        sg_error_set(err, SG_E_IO, "cannot read %s", path);
        free(text);
        return NULL;
    }
    return text;
}

static void unload(void)
{
    for (int i = 0; i < PY_SCRIPTS; i++) {
        free(texts[i]);
        texts[i] = NULL;
    }
}

int pyscript_load(sg_error_t **err)
{
    if (texts[0])
        return 0;
    cleanup_free char *dir = scripts_dir();
    for (int i = 0; i < PY_SCRIPTS; i++) {
        cleanup_free char *path = xasprintf("%s/%s", dir, files[i]);
        if ((texts[i] = read_text(path, err)) == NULL) {
            unload();
            return -1;
        }
    }
    atexit(unload);
    return 0;
}

char *pyscript(py_script_t script, json_t *params)
{
    assert(texts[script] != NULL); /* pyscript_load() ran at start */
    char *code = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&code, &len);
    if (out == NULL)
        abort();
    const char *name;
    json_t *v;
    json_object_foreach (params, name, v) {
        char *lit = json_is_true(v)    ? xstrdup("True")
                    : json_is_false(v) ? xstrdup("False")
                    : json_is_null(v)  ? xstrdup("None")
                                       : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        fprintf(out, "_sandgate_%s = %s\n", name, lit);
        free(lit);
    }
    fputs(texts[script], out);
    fclose(out);
    json_decref(params);
    return code;
}
