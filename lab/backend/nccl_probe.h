/* nccl_probe.h - the program's side of the NCCL plugin: find libmlsys-nccl.so, ask it how
 * many GPUs there are, refuse --backend nccl with one clear line when it cannot run, and
 * attach a rank to NCCL once its shm world is up. Nothing here needs CUDA to build. */
#ifndef MLSYS_LAB_NCCL_PROBE_H
#define MLSYS_LAB_NCCL_PROBE_H

#include "../../core/mlsys.h"
#include <stddef.h>

/* GPUs NCCL can use here (> 0), or 0 with one line in why. With no GPU, why is exactly
 * "NCCL needs one GPU per rank: 0 GPUs found; use --backend shm" (whether or not the plugin
 * was built); with GPUs but no plugin, "mlsys-lab was built without CUDA/NCCL; ...". */
int nccl_available(char *why, size_t n);
/* For the runner before any rank starts: 0 when world_size ranks can each have a GPU, else
 * 2 with "mlsys-lab: LAB: <reason>" in err (the exit status of a refused run). */
int nccl_backend_check(const char *lab_id, int world_size, char *err, size_t n);
/* In a rank, after mlsys_init: load the plugin and attach c's world to NCCL (collective over
 * the world). Rank 0 prints the NCCL line (version, GPU, NCCL_ALGO/NCCL_PROTO). 0 or -1. */
int nccl_attach(mlsys_comm *c, char *err, size_t n);
/* Where the plugin is looked for: $MLSYS_NCCL_PLUGIN, else next to the program (and one
 * folder up, for test binaries in BUILD/tests). Writes the first that exists, or the first
 * candidate when none does. */
const char *nccl_plugin_path(char *buf, size_t n);

#endif
