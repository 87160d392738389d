/* Unit tests for kernelmgr/kspec/kspec: kernelspec discovery and argv. */
#include <stdlib.h>
#include <sys/stat.h>

#include "common/xalloc.h"
#include "kernelmgr/kspec/kspec.h"
#include "tests/lib/tap.h"

static void put(const char *dir, const char *name, const char *json)
{
    char *d = xasprintf("%s/kernels/%s", dir, name);
    char *cmd = xasprintf("mkdir -p '%s'", d);
    if (system(cmd) != 0)
        abort();
    char *p = xasprintf("%s/kernel.json", d);
    FILE *f = fopen(p, "w");
    fputs(json, f);
    fclose(f);
    free(d);
    free(cmd);
    free(p);
}

int main(void)
{
    char a[] = "/tmp/sg-kspec-XXXXXX", b[] = "/tmp/sg-kspec-XXXXXX";
    if (!mkdtemp(a) || !mkdtemp(b))
        return 1;
    put(a, "py",
        "{\"argv\": [\"/usr/bin/python3\", \"-m\", \"ipykernel_launcher\", \"-f\", "
        "\"{connection_file}\"], \"display_name\": \"Python\", \"language\": \"python\", "
        "\"env\": {\"A\": \"1\"}}");
    put(a, "msg",
        "{\"argv\": [\"k\", \"--conn={connection_file}\"], \"interrupt_mode\": "
        "\"message\", \"language\": \"x\"}");
    put(a, "broken", "{\"argv\": ");
    put(a, "noargv", "{\"display_name\": \"x\"}");
    put(a, "badenv", "{\"argv\": [\"k\"], \"env\": [1]}");
    put(b, "py", "{\"argv\": [\"other\"], \"display_name\": \"Shadowed\"}");
    put(b, "extra", "{\"argv\": [\"e\"]}");

    char *path = xasprintf("%s:%s", a, b);
    kspecs_t *ks = kspecs_discover(path);
    is_int(kspecs_count(ks), 3, "valid kernelspecs found, broken ones skipped");
    const kspec_t *py = kspecs_get(ks, "py");
    ok(py && strcmp(py->display_name, "Python") == 0, "earlier path wins for the same name");
    ok(py && strcmp(py->language, "python") == 0 && !py->interrupt_message,
       "language and default (signal) interrupt mode");
    ok(py && strcmp(json_string_value(json_object_get(py->env, "A")), "1") == 0, "env read");
    char **argv = kspec_argv(py, "/conn/kernel.json");
    is_str(argv[4], "/conn/kernel.json", "{connection_file} substituted");
    is_str(argv[0], "/usr/bin/python3", "other arguments kept");
    is_str(argv[5], "--HistoryManager.hist_file=:memory:",
           "an IPython kernel gets sandgate's options after its own: history in memory");
    is_str(argv[6], "--IPythonKernel._execute_sleep=0", "and no sleep after each execute");
    ok(argv[7] == NULL, "argv NULL-terminated");
    kspec_argv_free(argv);
    const kspec_t *msg = kspecs_get(ks, "msg");
    ok(msg && msg->interrupt_message, "interrupt_mode message");
    argv = kspec_argv(msg, "/c.json");
    is_str(argv[1], "--conn=/c.json", "substitution inside an argument");
    ok(argv[2] == NULL, "another kernel gets no extra options");
    kspec_argv_free(argv);
    ok(kspecs_get(ks, "extra") != NULL, "second path searched");
    ok(kspecs_get(ks, "broken") == NULL && kspecs_get(ks, "noargv") == NULL &&
           kspecs_get(ks, "badenv") == NULL,
       "invalid kernelspecs are not offered");
    ok(kspecs_at(ks, 99) == NULL, "out of range is NULL");
    kspecs_destroy(&ks);
    kspecs_destroy(&ks);
    ok(ks == NULL, "destroy nulls and is safe twice");

    sg_error_t *err = NULL;
    char *bdir = xasprintf("%s/kernels/broken", a);
    kspec_t *broken = kspec_load(bdir, "broken", &err);
    ok(broken == NULL && err && err->kind == SG_E_INVALID && strstr(err->msg, "kernel.json"),
       "loading a broken kernelspec says why: %s", err ? err->msg : "");
    sg_error_free(&err);
    char *cmd = xasprintf("rm -rf %s %s", a, b);
    if (system(cmd) != 0)
        diag("cleanup failed");
    free(cmd);
    free(bdir);
    free(path);
    return tap_done();
}
