/* dynlib.c - dlopen of the first name that loads, and a table of functions bound by name
 * (see dynlib.h). */
#include "dynlib.h"

#include <dlfcn.h>
#include <stdio.h>

void *mlsys_dl_open_first(const char *const *names, char *err, size_t errlen)
{
    void *so = NULL;
    if (errlen)
        snprintf(err, errlen, "not found");
    for (int i = 0; names[i] && !so; i++) {
        /* the first name's failure, copied now: dlerror's text is reused by the next call */
        const char *e = (so = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) ? NULL : dlerror();
        if (e && i == 0 && errlen)
            snprintf(err, errlen, "%s", e);
    }
    return so;
}

const char *mlsys_dl_bind(void *so, const mlsys_dl_fn *fns, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(*fns[i].slot = dlsym(so, fns[i].name)))
            return fns[i].name;
    return NULL;
}
