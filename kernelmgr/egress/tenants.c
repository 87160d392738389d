/* tenants: each tenant's egress limit, "egress=ENTRY,..." on its line of the
 * keys file (gateway/auth/keys.h): what its sandboxes may reach at most,
 * whatever their own rules say (egress.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "kernelmgr/egress/internal.h"

static json_t *limits; /* tenant -> "ENTRY,..." */

/* The limits in a keys file's text: {tenant: list}.  Only what a sandbox's
 * rules need: the daemon checks the rest of the file (keys.c). */
static json_t *parse(const char *text)
{
    json_t *out = json_object();
    cleanup_free char *copy = xstrdup(text ? text : "");
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *lsave = NULL, *name = strtok_r(line, " \t", &lsave);
        if (!name || name[0] == '#')
            continue;
        for (char *w = strtok_r(NULL, " \t", &lsave); w; w = strtok_r(NULL, " \t", &lsave))
            if (strncmp(w, "egress=", 7) == 0 && egress_check_rules(w + 7, NULL, NULL) >= 0)
                json_object_set_new(out, name, json_string(w + 7));
    }
    return out;
}

const char *egress_tenant_limit(const char *tenant)
{
    return tenant ? json_string_value(json_object_get(limits, tenant)) : NULL;
}

/* The sandboxes of tenant in kernels_dir get their rules applied again. */
typedef struct {
    const char *kernels_dir;
    json_t *changed; /* tenant -> true */
} again_t;

static void again(const char *id, int n, void *arg)
{
    again_t *a = arg;
    cleanup_free char *dir = xasprintf("%s/%s", a->kernels_dir, id);
    cleanup_free char *path = xasprintf("%s/" RULES_FILE, dir);
    FILE *f = fopen(path, "re");
    char line[256];
    bool mine = false;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "tenant ", 7) == 0) {
            line[strcspn(line, "\n")] = 0;
            mine = json_object_get(a->changed, line + 7) != NULL;
        }
    if (f)
        fclose(f);
    cleanup_error sg_error_t *err = NULL;
    if (mine && egress_link_exists(n) && egress_apply_rules(dir, n, &err) < 0)
        log_warn("egress: the rules of sandbox %s under its tenant's new limit: %s", id, err->msg);
}

void egress_tenant_limits(const char *keys_text, const char *kernels_dir)
{
    json_t *now = parse(keys_text), *changed = json_object(), *v;
    const char *tenant;
    json_object_foreach (now, tenant, v)
        if (!json_equal(v, json_object_get(limits, tenant)))
            json_object_set_new(changed, tenant, json_true());
    json_object_foreach (limits, tenant, v)
        if (!json_object_get(now, tenant))
            json_object_set_new(changed, tenant, json_true());
    json_decref(limits);
    limits = now;
    json_object_foreach (changed, tenant, v)
        log_info("egress: tenant %s reaches at most %s", tenant,
                 egress_tenant_limit(tenant) ?: "what the server allows");
    if (kernels_dir && json_object_size(changed) > 0)
        egress_each_index(kernels_dir, again, &(again_t){kernels_dir, changed});
    json_decref(changed);
}
