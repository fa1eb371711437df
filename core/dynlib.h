/* dynlib.h - optional libraries loaded with dlopen where they are used (OpenBLAS,
 * libmicrohttpd, hwloc): the first of a list of names that loads, then its functions by name
 * into pointers, each failure said in one line. */
#ifndef MLSYS_DYNLIB_H
#define MLSYS_DYNLIB_H

#include <stddef.h>

typedef struct mlsys_dl_fn {
    void **slot;                /* where the function's address goes */
    const char *name;           /* its symbol */
} mlsys_dl_fn;

/* The first of names[] (NULL-ended) that dlopen loads (RTLD_NOW | RTLD_LOCAL), or NULL with
 * the first name's failure in err ("not found" when the list is empty). */
void *mlsys_dl_open_first(const char *const *names, char *err, size_t errlen);
/* Every fns[i].slot from so: NULL, or the first name so lacks (the slots are then not all
 * set: close so). */
const char *mlsys_dl_bind(void *so, const mlsys_dl_fn *fns, size_t n);

#endif
