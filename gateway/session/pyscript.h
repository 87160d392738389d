/* pyscript: the Python that sandgate itself runs in kernels, kept in
 * gateway/session/py/ (one .py file each) rather than in C strings.
 *
 * The files are installed beside sandgate-kernel.py, in PKGLIBEXECDIR/py
 * (a build directory has them in BUILDDIR/py).  They are read once, at
 * start (pyscript_load), from the first of: the directory of
 * $SANDGATE_INIT (as the tests and a build directory set it), the running
 * binary's directory (a build tree), PKGLIBEXECDIR (installed) — the same
 * places the sandbox finds sandgate-init and sandgate-kernel.py.
 *
 * A script takes its parameters as Python variables set on lines before its
 * text: pyscript(PY_X, {"name": value}) gives `_sandgate_name = VALUE` for
 * each, VALUE a JSON literal (a string, a number, an object of strings),
 * true, false and null written as Python's True, False and None.  The
 * script deletes them when done.
 */
#ifndef SG_PYSCRIPT_H
#define SG_PYSCRIPT_H

#include <jansson.h>

#include "common/error.h"

typedef enum {
    PY_COMMAND,      /* command.py: a shell command's runner (exec.c) */
    PY_ENV_SET,      /* env_set.py: an execution's env_vars (exec.c) */
    PY_ENV_RESTORE,  /* env_restore.py: ... restored after it */
    PY_CONTEXT_CWD,  /* context_cwd.py: a REST context's cwd (rest/rest.c) */
    PY_KERNEL_SETUP, /* kernel_setup.py: a Jupyter kernel's env and path (jupyter.c) */
    PY_SCRIPTS
} py_script_t;

/* Reads every script.  -1 with *err naming the file that cannot be read.
 * Safe to call again (does nothing once loaded). */
int pyscript_load(sg_error_t **err);

/* The code to run: params' lines, then the script (malloc'd).  params is
 * stolen (NULL: none).  The scripts must have been loaded. */
char *pyscript(py_script_t script, json_t *params);

#endif
