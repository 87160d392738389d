#include "kernelmgr/kspec/kspec.h"

#include <dirent.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/xalloc.h"

/* Deno's late output comes within a few ms of its idle status (at most
 * 9 ms in 150 executions at a load average of 7). */
#define KSPEC_DENO_LINGER_MS 30

struct kspecs {
    kspec_t **items;
    size_t n;
};

void kspec_argv_free(char **argv)
{
    for (char **a = argv; a && *a; a++)
        free(*a);
    free(argv);
}

void kspec_destroy(kspec_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    kspec_t *self = *self_p;
    free(self->name);
    free(self->dir);
    kspec_argv_free(self->argv);
    free(self->display_name);
    free(self->language);
    json_decref(self->env);
    json_decref(self->json);
    free(self);
    *self_p = NULL;
}

kspec_t *kspec_load(const char *dir, const char *name, sg_error_t **err)
{
    cleanup_free char *path = xasprintf("%s/kernel.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        sg_error_set(err, SG_E_INVALID, "%s: %s", path, jerr.text);
        return NULL;
    }
    json_t *argv = json_object_get(root, "argv");
    const char *display = json_string_value(json_object_get(root, "display_name"));
    const char *language = json_string_value(json_object_get(root, "language"));
    const char *imode = json_string_value(json_object_get(root, "interrupt_mode"));
    json_t *env = json_object_get(root, "env");
    if (!json_is_array(argv) || json_array_size(argv) == 0) {
        sg_error_set(err, SG_E_INVALID, "%s: argv must be a non-empty array", path);
        json_decref(root);
        return NULL;
    }
    if (env && !json_is_object(env)) {
        sg_error_set(err, SG_E_INVALID, "%s: env must be an object", path);
        json_decref(root);
        return NULL;
    }
    kspec_t *self = xzalloc(sizeof *self);
    self->argv = xzalloc((json_array_size(argv) + 1) * sizeof(char *));
    size_t i;
    json_t *a;
    json_array_foreach (argv, i, a) {
        if (!json_is_string(a)) {
            sg_error_set(err, SG_E_INVALID, "%s: argv[%zu] is not a string", path, i);
            json_decref(root);
            kspec_destroy(&self);
            return NULL;
        }
        self->argv[i] = xstrdup(json_string_value(a));
    }
    self->name = xstrdup(name);
    self->dir = xstrdup(dir);
    self->display_name = xstrdup(display ? display : name);
    self->language = xstrdup(language ? language : "");
    self->interrupt_message = imode && strcmp(imode, "message") == 0;
    json_t *ours = json_object_get(json_object_get(root, "metadata"), "sandgate");
    const char *transport = json_string_value(json_object_get(ours, "transport"));
    json_int_t linger = json_integer_value(json_object_get(ours, "iopub_linger_ms"));
    const char *program = strrchr(self->argv[0], '/');
    program = program ? program + 1 : self->argv[0];
    bool deno = strcmp(program, "deno") == 0; /* what its own kernelspec lacks */
    self->tcp_only = transport ? strcmp(transport, "tcp") == 0 : deno;
    self->iopub_linger_ms = json_is_integer(json_object_get(ours, "iopub_linger_ms"))
                                ? (linger > 0 && linger <= 1000 ? (int)linger : 0)
                            : deno ? KSPEC_DENO_LINGER_MS
                                   : 0;
    self->env = env ? json_incref(env) : json_object();
    self->json = root;
    return self;
}

/* Options for IPython kernels, after the kernelspec's own (later ones win):
 * - the history database in memory: on disk every execute costs a dozen
 *   writes and two fdatasyncs and wakes IPython's history thread, and a
 *   sandbox's history dies with it anyway; `%history` and history_request
 *   work the same within a session;
 * - no 0.5 ms sleep after every execute (ipykernel's guard against a reply
 *   overtaking its output: sandgate waits for the iopub idle status anyway).
 * Under gVisor's ptrace platform each avoided system call is ~40 us. */
static const char *const ipython_opts[] = {"--HistoryManager.hist_file=:memory:",
                                           "--IPythonKernel._execute_sleep=0"};

static bool is_ipykernel(const kspec_t *self)
{
    for (char **a = self->argv; *a; a++)
        if (strstr(*a, "ipykernel"))
            return true;
    return false;
}

char **kspec_argv(const kspec_t *self, const char *connection_file)
{
    size_t n = 0;
    while (self->argv[n])
        n++;
    size_t extra = is_ipykernel(self) ? sizeof ipython_opts / sizeof *ipython_opts : 0;
    char **out = xzalloc((n + extra + 1) * sizeof(char *));
    for (size_t i = 0; i < extra; i++)
        out[n + i] = xstrdup(ipython_opts[i]);
    for (size_t i = 0; i < n; i++) {
        const char *a = self->argv[i];
        const char *at = strstr(a, "{connection_file}");
        out[i] = at ? xasprintf("%.*s%s%s", (int)(at - a), a, connection_file,
                                at + strlen("{connection_file}"))
                    : xstrdup(a);
    }
    return out;
}

static void scan(kspecs_t *self, const char *base)
{
    cleanup_free char *kdir = xasprintf("%s/kernels", base);
    DIR *d = opendir(kdir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || kspecs_get(self, e->d_name))
            continue;
        cleanup_free char *dir = xasprintf("%s/%s", kdir, e->d_name);
        sg_error_t *err = NULL;
        kspec_t *k = kspec_load(dir, e->d_name, &err);
        if (k == NULL) {
            log_warn("kernelspec %s skipped: %s", e->d_name, err->msg);
            sg_error_free(&err);
            continue;
        }
        self->items = xrealloc(self->items, (self->n + 1) * sizeof *self->items);
        self->items[self->n++] = k;
    }
    closedir(d);
}

kspecs_t *kspecs_discover(const char *path)
{
    kspecs_t *self = xzalloc(sizeof *self);
    cleanup_free char *list = NULL;
    if (path)
        list = xstrdup(path);
    else
        list = xasprintf("%s%s/usr/local/share/jupyter:/usr/share/jupyter",
                         getenv("JUPYTER_PATH") ? getenv("JUPYTER_PATH") : "",
                         getenv("JUPYTER_PATH") ? ":" : "");
    char *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save))
        scan(self, p);
    return self;
}

void kspecs_destroy(kspecs_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    kspecs_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        kspec_destroy(&self->items[i]);
    free(self->items);
    free(self);
    *self_p = NULL;
}

size_t kspecs_count(const kspecs_t *self)
{
    return self->n;
}

const kspec_t *kspecs_get(const kspecs_t *self, const char *name)
{
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->items[i]->name, name) == 0)
            return self->items[i];
    return NULL;
}

const kspec_t *kspecs_at(const kspecs_t *self, size_t i)
{
    return i < self->n ? self->items[i] : NULL;
}

const char *kspec_language_name(const char *language)
{
    if (strcasecmp(language, "js") == 0)
        return "javascript";
    if (strcasecmp(language, "ts") == 0)
        return "typescript";
    return language;
}

static const kspec_t *of_language(const kspecs_t *ks, const char *language)
{
    const kspec_t *best = NULL;
    for (size_t i = 0; i < kspecs_count(ks); i++) {
        const kspec_t *k = kspecs_at(ks, i);
        if (strcasecmp(k->language, language) == 0 && (!best || strcmp(k->name, "python3") == 0))
            best = k;
    }
    return best;
}

const kspec_t *kspecs_for_language(const kspecs_t *self, const char *language)
{
    language = kspec_language_name(language);
    const kspec_t *k = kspecs_get(self, language);
    if (k == NULL)
        k = of_language(self, language);
    if (k == NULL && strcasecmp(language, "javascript") == 0)
        k = of_language(self, "typescript");
    return k;
}
