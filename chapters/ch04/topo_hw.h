/* topo_hw.h - the machine under the GPUs, as chapter 4's inspector shows it: packages, cores,
 * caches, NUMA nodes and PCI devices from hwloc (when the build found libhwloc), the driver's
 * view of the GPUs through NVML and the CUDA driver API (loaded with dlopen, so none of this
 * needs CUDA to build or to run). */
#ifndef CH04_TOPO_HW_H
#define CH04_TOPO_HW_H

#include <stdint.h>
#include <stdio.h>

#define TOPO_HW_MAX_CACHES 16
#define TOPO_HW_MAX_NUMA 16
#define TOPO_HW_MAX_PCI 128

typedef struct topo_cache {
    int level;          /* 1, 2, 3, ... */
    char kind;          /* 'd' data, 'i' instruction, 'u' unified */
    uint64_t size;      /* bytes of one cache */
    unsigned line;      /* line size in bytes, 0 when unknown */
    int count;          /* how many caches of this level/kind/size */
    int pus_per_cache;  /* hardware threads sharing one */
} topo_cache;

typedef struct topo_numa {
    unsigned os_index;
    uint64_t local_memory;  /* bytes */
    char cpus[96];          /* "0-15,32-47" */
} topo_numa;

typedef struct topo_pci {
    unsigned domain, bus, dev, func;
    unsigned class_id, vendor_id, device_id;
    float linkspeed;        /* GB/s as hwloc reports it, 0 when unknown */
    char vendor[64];        /* hwloc's PCIVendor info, "" when it has no name database */
    char name[96];          /* PCIDevice info */
    char osdevs[64];        /* "eth0", "nvme0n1", "cuda0", ... */
    char near_cpus[96];     /* the CPUs of the closest non-I/O ancestor */
} topo_pci;

typedef struct topo_machine {
    char hwloc_version[16]; /* of the library loaded at run time */
    int packages, cores, pus, numa_nodes;
    int pus_allowed;        /* hardware threads this process may run on */
    char cpu_model[96];
    int ncaches;
    topo_cache caches[TOPO_HW_MAX_CACHES];
    int nnuma;
    topo_numa numa[TOPO_HW_MAX_NUMA];
    int npci, npci_total;   /* listed, and found (the list stops at TOPO_HW_MAX_PCI) */
    topo_pci pci[TOPO_HW_MAX_PCI];
} topo_machine;

/* topo_hw.c */
/* Read this machine through hwloc. -1 with the reason in err when the build has no hwloc
 * ("mlsys-lab was built without hwloc: ...") or hwloc fails. */
int topo_machine_read(topo_machine *m, char *err, size_t n);
void topo_machine_print(FILE *out, const topo_machine *m);
/* "Ethernet controller", "3D controller", ... for a PCI class id (class << 8 | subclass). */
const char *topo_pci_class_name(unsigned class_id);
/* NVML (libnvidia-ml.so.1): driver version, each GPU's name, memory and bus id, the PCIe
 * common ancestor of every pair (the same classes as `nvidia-smi topo -m`) and active NVLinks.
 * Without the library it prints one line saying so. Returns the GPU count NVML saw. */
int topo_nvml_print(FILE *out);
/* CUDA runtime/driver versions, cuDNN and NCCL, and per GPU the name, compute capability,
 * memory (GB, 10^9) and SM count from the driver API. Returns the GPU count. */
int topo_cuda_print(FILE *out);

#endif
