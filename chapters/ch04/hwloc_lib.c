/* hwloc_lib.c - hwloc through dlopen (hwloc_lib.h says why): each function topo_hw.c calls
 * is found once with dlsym and called through a pointer. Built only with HAVE_HWLOC (the
 * headers are needed; the library itself is not linked). */
#ifdef HAVE_HWLOC
#include "hwloc_lib.h"
#include "../../core/dynlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <hwloc.h>

#define FN(name) __typeof__(mlsys_hwloc_##name) *name
static struct {
    pthread_once_t once;
    void *so;
    char why[400];
    FN(bitmap_alloc);
    FN(bitmap_free);
    FN(bitmap_list_snprintf);
    FN(bitmap_weight);
    FN(get_api_version);
    FN(get_cpubind);
    FN(get_nbobjs_by_depth);
    FN(get_obj_by_depth);
    FN(get_type_depth);
    FN(topology_destroy);
    FN(topology_init);
    FN(topology_load);
    FN(topology_set_flags);
    FN(topology_set_icache_types_filter);
    FN(topology_set_io_types_filter);
} g = {.once = PTHREAD_ONCE_INIT};
#undef FN

static void load(void)
{
    static const char *const names[] = {"libhwloc.so.15", "libhwloc.so", NULL};
    char err[256];
    if (!(g.so = mlsys_dl_open_first(names, err, sizeof err))) {
        snprintf(g.why, sizeof g.why, "hwloc cannot be loaded (%s): apt-get install libhwloc15",
                 err);
        return;
    }
#define SYM(name) {(void **)&g.name, "hwloc_" #name}
    const mlsys_dl_fn fns[] = {
        SYM(bitmap_alloc), SYM(bitmap_free), SYM(bitmap_list_snprintf), SYM(bitmap_weight),
        SYM(get_api_version), SYM(get_cpubind), SYM(get_nbobjs_by_depth), SYM(get_obj_by_depth),
        SYM(get_type_depth), SYM(topology_destroy), SYM(topology_init), SYM(topology_load),
        SYM(topology_set_flags), SYM(topology_set_icache_types_filter),
        SYM(topology_set_io_types_filter),
    };
#undef SYM
    const char *missing = mlsys_dl_bind(g.so, fns, sizeof fns / sizeof fns[0]);
    if (missing) {
        snprintf(g.why, sizeof g.why, "hwloc has no %s (another major version?)", missing);
        dlclose(g.so);
        g.so = NULL;
    }
}

const char *hwloc_lib_why(void)
{
    pthread_once(&g.once, load);
    return g.so ? NULL : g.why;
}

int mlsys_hwloc_topology_init(hwloc_topology_t *topologyp)
{
    return hwloc_lib_why() ? -1 : g.topology_init(topologyp);
}

/* Below, the library is loaded: topology_init succeeded first (get_api_version aside). */

unsigned mlsys_hwloc_get_api_version(void)
{
    return hwloc_lib_why() ? 0 : g.get_api_version();
}

hwloc_bitmap_t mlsys_hwloc_bitmap_alloc(void) { return g.bitmap_alloc(); }
void mlsys_hwloc_bitmap_free(hwloc_bitmap_t bitmap) { g.bitmap_free(bitmap); }
int mlsys_hwloc_bitmap_list_snprintf(char *__hwloc_restrict buf, size_t buflen,
                                     hwloc_const_bitmap_t bitmap)
{
    return g.bitmap_list_snprintf(buf, buflen, bitmap);
}
int mlsys_hwloc_bitmap_weight(hwloc_const_bitmap_t bitmap) { return g.bitmap_weight(bitmap); }
int mlsys_hwloc_get_cpubind(hwloc_topology_t topology, hwloc_cpuset_t set, int flags)
{
    return g.get_cpubind(topology, set, flags);
}
unsigned mlsys_hwloc_get_nbobjs_by_depth(hwloc_topology_t topology, int depth)
{
    return g.get_nbobjs_by_depth(topology, depth);
}
hwloc_obj_t mlsys_hwloc_get_obj_by_depth(hwloc_topology_t topology, int depth, unsigned idx)
{
    return g.get_obj_by_depth(topology, depth, idx);
}
int mlsys_hwloc_get_type_depth(hwloc_topology_t topology, hwloc_obj_type_t type)
{
    return g.get_type_depth(topology, type);
}
void mlsys_hwloc_topology_destroy(hwloc_topology_t topology) { g.topology_destroy(topology); }
int mlsys_hwloc_topology_load(hwloc_topology_t topology) { return g.topology_load(topology); }
int mlsys_hwloc_topology_set_flags(hwloc_topology_t topology, unsigned long flags)
{
    return g.topology_set_flags(topology, flags);
}
int mlsys_hwloc_topology_set_icache_types_filter(hwloc_topology_t topology,
                                                 enum hwloc_type_filter_e filter)
{
    return g.topology_set_icache_types_filter(topology, filter);
}
int mlsys_hwloc_topology_set_io_types_filter(hwloc_topology_t topology,
                                             enum hwloc_type_filter_e filter)
{
    return g.topology_set_io_types_filter(topology, filter);
}
#else
typedef int hwloc_lib_unused;        /* ISO C: a translation unit is not empty */
#endif
