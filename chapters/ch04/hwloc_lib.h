/* hwloc_lib.h - hwloc is loaded with dlopen when the topology is first read, not by the
 * dynamic loader when the program starts: only the topology inspector and the machine
 * report use it, and every rank and command would otherwise load it (with libudev) for
 * nothing. Included by topo_hw.c before <hwloc.h>: the library functions it calls (its own
 * and those hwloc's inline helpers call) are renamed to hwloc_lib.c's, which call the
 * library's through dlsym. */
#ifndef MLSYS_CH04_HWLOC_LIB_H
#define MLSYS_CH04_HWLOC_LIB_H

#define hwloc_bitmap_alloc mlsys_hwloc_bitmap_alloc
#define hwloc_bitmap_free mlsys_hwloc_bitmap_free
#define hwloc_bitmap_list_snprintf mlsys_hwloc_bitmap_list_snprintf
#define hwloc_bitmap_weight mlsys_hwloc_bitmap_weight
#define hwloc_get_api_version mlsys_hwloc_get_api_version
#define hwloc_get_cpubind mlsys_hwloc_get_cpubind
#define hwloc_get_nbobjs_by_depth mlsys_hwloc_get_nbobjs_by_depth
#define hwloc_get_obj_by_depth mlsys_hwloc_get_obj_by_depth
#define hwloc_get_type_depth mlsys_hwloc_get_type_depth
#define hwloc_topology_destroy mlsys_hwloc_topology_destroy
#define hwloc_topology_init mlsys_hwloc_topology_init
#define hwloc_topology_load mlsys_hwloc_topology_load
#define hwloc_topology_set_flags mlsys_hwloc_topology_set_flags
#define hwloc_topology_set_icache_types_filter mlsys_hwloc_topology_set_icache_types_filter
#define hwloc_topology_set_io_types_filter mlsys_hwloc_topology_set_io_types_filter

/* Why the library cannot be used here ("libhwloc.so.15: cannot open ..."), NULL when it
 * loads (this loads it). Every renamed call but topology_init needs it loaded first:
 * topology_init fails (-1) without it, and nothing else is called then. */
const char *hwloc_lib_why(void);

#endif
