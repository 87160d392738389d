#include "gateway/jupyter/kernelspecs.h"

#include <dirent.h>
#include <string.h>

#include "common/xalloc.h"

bool jks_resource_name(const char *f)
{
    size_t n = strlen(f);
    if (strchr(f, '/') || f[0] == '.' || n > 64)
        return false;
    return (strncmp(f, "logo-", 5) == 0 && n > 9 &&
            (strcmp(f + n - 4, ".png") == 0 || strcmp(f + n - 4, ".svg") == 0)) ||
           strcmp(f, "kernel.js") == 0 || strcmp(f, "kernel.css") == 0;
}

static json_t *kernelspec_model(const kspec_t *s)
{
    json_t *res = json_object();
    DIR *d = opendir(s->dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!jks_resource_name(de->d_name))
            continue;
        char *key = xstrdup(de->d_name);
        if (strncmp(key, "logo-", 5) == 0)
            *strrchr(key, '.') = 0; /* "logo-64x64", as jupyter_server names it */
        json_object_set_new(res, key, json_sprintf("/kernelspecs/%s/%s", s->name, de->d_name));
        free(key);
    }
    if (d)
        closedir(d);
    json_t *spec = json_deep_copy(s->json);
    if (!json_is_object(json_object_get(spec, "metadata")))
        json_object_set_new(spec, "metadata", json_object());
    if (!json_object_get(spec, "interrupt_mode"))
        json_object_set_new(spec, "interrupt_mode",
                            json_string(s->interrupt_message ? "message" : "signal"));
    return json_pack("{s:s, s:o, s:o}", "name", s->name, "spec", spec, "resources", res);
}

/* A template's: its kernelspec's, under its own name and display name. */
static json_t *template_model(const kmgr_t *kmgr, const sandbox_template_t *t)
{
    const kspec_t *base = jks_spec(kmgr, t->name);
    if (!base)
        return NULL;
    json_t *m = kernelspec_model(base);
    json_t *spec = json_object_get(m, "spec");
    const char *display = json_string_value(json_object_get(spec, "display_name"));
    json_object_set_new(spec, "display_name",
                        json_sprintf("%s (%s)", display ? display : base->name, t->name));
    json_object_set_new(json_object_get(spec, "metadata"), "sandgate",
                        json_pack("{s:s, s:s}", "template", t->name, "kernelspec", base->name));
    json_object_set_new(m, "name", json_string(t->name));
    return m;
}

const kspec_t *jks_spec(const kmgr_t *kmgr, const char *name)
{
    const sandbox_template_t *t = kmgr_template(kmgr, name);
    if (t)
        name = t->kernelspec ? t->kernelspec : "python3";
    return kspecs_get(kmgr_kspecs(kmgr), name);
}

json_t *jks_model(const kmgr_t *kmgr, const char *name)
{
    const sandbox_template_t *t = kmgr_template(kmgr, name);
    if (t)
        return template_model(kmgr, t);
    const kspec_t *s = kspecs_get(kmgr_kspecs(kmgr), name);
    return s ? kernelspec_model(s) : NULL;
}

const char *jks_default(const kmgr_t *kmgr)
{
    const kspecs_t *ks = kmgr_kspecs(kmgr);
    if (kspecs_get(ks, "python3"))
        return "python3";
    return kspecs_count(ks) ? kspecs_at(ks, 0)->name : "python3";
}

json_t *jks_list(const kmgr_t *kmgr)
{
    const kspecs_t *ks = kmgr_kspecs(kmgr);
    json_t *all = json_object();
    for (size_t i = 0; i < kspecs_count(ks); i++)
        json_object_set_new(all, kspecs_at(ks, i)->name, kernelspec_model(kspecs_at(ks, i)));
    const sandbox_config_t *sc = &kmgr_config(kmgr)->sandbox;
    for (size_t i = 0; i < sc->ntemplates; i++) {
        json_t *m = template_model(kmgr, &sc->templates[i]);
        if (m)
            json_object_set_new(all, sc->templates[i].name, m);
    }
    return json_pack("{s:s, s:o}", "default", jks_default(kmgr), "kernelspecs", all);
}
