/* kspec: installed Jupyter kernelspecs (<dir>/kernels/<name>/kernel.json).
 *
 * A kernelspec says how to start a kernel: argv with "{connection_file}",
 * language, display name, extra environment, interrupt mode.  sandgate runs
 * the same argv inside the sandbox, so the interpreter it names must be
 * visible there (the sandbox sees the host's /usr).
 */
#ifndef SG_KSPEC_H
#define SG_KSPEC_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"

typedef struct {
    char *name;
    char *dir;   /* the directory holding kernel.json (resources) */
    char **argv; /* NULL-terminated, "{connection_file}" not yet substituted */
    char *display_name;
    char *language;
    bool interrupt_message; /* interrupt_mode "message" (else "signal") */
    /* Speaks ZeroMQ over TCP only (Deno's kernel ignores the "ipc"
     * transport): its metadata says {"sandgate": {"transport": "tcp"}}, or
     * its program is named deno.  sandgate gives it a connection on
     * 127.0.0.1 that sandgate-preload.so turns into its usual Unix sockets
     * (kernelmgr/guest/preload.c). */
    bool tcp_only;
    /* How long after an execution's reply and idle status its output may
     * still come (Deno's kernel publishes results and stdout from another
     * task, now and then after the idle status): metadata
     * {"sandgate": {"iopub_linger_ms": N}}; 0 (default): none. */
    int iopub_linger_ms;
    json_t *env;  /* object of extra environment strings; never NULL */
    json_t *json; /* the kernel.json as read, for the API */
} kspec_t;

typedef struct kspecs kspecs_t;

/* Reads <dir>/kernel.json.  NULL with *err set when it is missing or bad. */
kspec_t *kspec_load(const char *dir, const char *name, sg_error_t **err);
void kspec_destroy(kspec_t **self_p);

/* argv with {connection_file} replaced, plus sandgate's options for IPython
 * kernels (kspec.c); caller frees with kspec_argv_free. */
char **kspec_argv(const kspec_t *self, const char *connection_file);
void kspec_argv_free(char **argv);

/* Finds kernelspecs under each "<path>/kernels" of a colon-separated list
 * (earlier entries win for the same name).  NULL path: $JUPYTER_PATH, then
 * /usr/local/share/jupyter and /usr/share/jupyter.  Bad kernelspecs are
 * skipped with a warning. */
kspecs_t *kspecs_discover(const char *path);
void kspecs_destroy(kspecs_t **self_p);
size_t kspecs_count(const kspecs_t *self);
/* Borrowed; NULL if absent / out of range. */
const kspec_t *kspecs_get(const kspecs_t *self, const char *name);
const kspec_t *kspecs_at(const kspecs_t *self, size_t i);
/* A language's usual name: the short ones clients send (E2B's "js" and
 * "ts") become "javascript" and "typescript"; others are as given. */
const char *kspec_language_name(const char *language);
/* The kernelspec for a language (or its short name): one named so, else
 * the first whose language it is (python3 for "python"); for "javascript"
 * without a JavaScript kernel, a TypeScript one (Deno's runs both).
 * Borrowed; NULL: none. */
const kspec_t *kspecs_for_language(const kspecs_t *self, const char *language);

#endif
