/* An execution's env_vars in the kernel's own language (exec.h): a silent
 * execution that sets them before the code, and one that puts the old
 * values back after it.  Python's are pyscript's (py/env_set.py); these
 * are the others sandgate ships kernels for: Bash, JavaScript and
 * TypeScript (Deno), R, and Java (JJava), whose are system properties
 * (System.getProperty: a JVM cannot change its environment), as E2B's.  Names are checked by the
 * front end (variable names: letters, digits, '_'); values go in as JSON strings, which the
 * JavaScript and R parsers read as their own string literals, or quoted
 * for Bash. */
#include <string.h>

#include "common/xalloc.h"
#include "gateway/session/envscript.h"

/* v in single quotes for Bash: each ' becomes '\'' */
static char *sh_quote(const char *v)
{
    size_t n = 3;
    for (const char *p = v; *p; p++)
        n += *p == '\'' ? 4 : 1;
    char *out = xmalloc(n), *o = out;
    *o++ = '\'';
    for (const char *p = v; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = 0;
    return out;
}

static char *json_text(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
}

bool envscript(const char *language, const json_t *env, char **set, char **restore)
{
    *set = *restore = NULL;
    const char *k;
    json_t *v;
    if (strcmp(language, "bash") == 0) {
        char *s = xstrdup(""), *r = xstrdup("");
        json_object_foreach ((json_t *)env, k, v) {
            char *q = sh_quote(json_string_value(v)), *t;
            t = xasprintf("%s__sg_had_%s=${%s+x}; __sg_old_%s=${%s-}; export %s=%s; ", s, k, k, k,
                          k, k, q);
            free(s), free(q), s = t;
            t = xasprintf("%sif [ -n \"$__sg_had_%s\" ]; then export %s=\"$__sg_old_%s\"; else "
                          "unset %s; fi; unset __sg_had_%s __sg_old_%s; ",
                          r, k, k, k, k, k, k);
            free(r), r = t;
        }
        *set = s;
        *restore = r;
        return true;
    }
    if (strcmp(language, "javascript") == 0 || strcmp(language, "typescript") == 0) {
        char *e = json_text(env);
        *set = xasprintf("globalThis.__sgEnv = {}; for (const [k, v] of Object.entries(%s)) { "
                         "globalThis.__sgEnv[k] = Deno.env.get(k); Deno.env.set(k, v); }",
                         e);
        *restore = xstrdup("for (const [k, v] of Object.entries(globalThis.__sgEnv ?? {})) { "
                           "if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); } "
                           "delete globalThis.__sgEnv;");
        free(e);
        return true;
    }
    if (strcmp(language, "R") == 0) {
        json_t *names = json_array(), *values = json_array();
        json_object_foreach ((json_t *)env, k, v) {
            json_array_append_new(names, json_string(k));
            json_array_append(values, v);
        }
        char *n = json_text(names), *vs = json_text(values);
        /* c(...) from a JSON array: its brackets become c( ) */
        n[0] = vs[0] = '(';
        n[strlen(n) - 1] = vs[strlen(vs) - 1] = ')';
        *set = xasprintf(".sg_env <- Sys.getenv(c%s, unset = NA, names = TRUE); "
                         "do.call(Sys.setenv, setNames(as.list(c%s), c%s)); invisible(NULL)",
                         n, vs, n);
        *restore =
            xstrdup("for (.k in names(.sg_env)) if (is.na(.sg_env[[.k]])) "
                    "Sys.unsetenv(.k) else do.call(Sys.setenv, setNames(list(.sg_env[[.k]]), "
                    ".k)); rm(.sg_env, .k); invisible(NULL)");
        free(n), free(vs);
        json_decref(names), json_decref(values);
        return true;
    }
    if (strcmp(language, "java") == 0) { /* JShell: system properties, as E2B's Java has them */
        char *pairs = xstrdup("");
        json_object_foreach ((json_t *)env, k, v) {
            json_t *name = json_string(k);
            char *n = json_text(name), *q = json_text(v);
            char *t = xasprintf("%s%s{%s, %s}", pairs, *pairs ? ", " : "", n, q);
            free(pairs), free(n), free(q), json_decref(name), pairs = t;
        }
        *set = xasprintf("java.util.Map<String, String> __sgEnv = new java.util.HashMap<>(); "
                         "for (String[] __sgKv : new String[][] {%s}) { "
                         "__sgEnv.put(__sgKv[0], System.getProperty(__sgKv[0])); "
                         "System.setProperty(__sgKv[0], __sgKv[1]); }",
                         pairs);
        *restore = xstrdup("for (var __sgE : __sgEnv.entrySet()) { if (__sgE.getValue() == null) "
                           "System.clearProperty(__sgE.getKey()); else "
                           "System.setProperty(__sgE.getKey(), __sgE.getValue()); }");
        free(pairs);
        return true;
    }
    return false;
}
