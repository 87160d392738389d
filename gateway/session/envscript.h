/* envscript: an execution's env_vars in the kernel's language, for the
 * kernels that are not Python (Bash, JavaScript and TypeScript, R, Java). */
#ifndef SG_ENVSCRIPT_H
#define SG_ENVSCRIPT_H

#include <jansson.h>
#include <stdbool.h>

/* The code that sets env ({name: string}; names already checked to be
 * variable names) before an execution and the code that restores the old
 * values after it, into *set and *restore (malloc'd); false, both NULL, for
 * a language it does not know. */
bool envscript(const char *language, const json_t *env, char **set, char **restore);

#endif
