/* kernelspecs: the kernelspecs the Jupyter API offers — the
 * installed ones (kspec.h) and one per template (--template), named as the
 * template, whose kernels start with it (kmgr_start_opts_t.template). */
#ifndef SG_JUPYTER_KERNELSPECS_H
#define SG_JUPYTER_KERNELSPECS_H

#include <stdbool.h>

#include "kernelmgr/manager/manager.h"

/* {"default", "kernelspecs": {name: model}} as jupyter_server answers. */
json_t *jks_list(const kmgr_t *kmgr);
/* One model {name, spec, resources}; NULL when there is no such name. */
json_t *jks_model(const kmgr_t *kmgr, const char *name);
/* The kernelspec behind name: itself, or a template's; NULL: none. */
const kspec_t *jks_spec(const kmgr_t *kmgr, const char *name);
/* python3 when installed, else the first. */
const char *jks_default(const kmgr_t *kmgr);
/* Whether f may be served as a kernelspec's resource (logos, kernel.js/css). */
bool jks_resource_name(const char *f);

#endif
