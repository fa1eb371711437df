/* topo_parse.h - the matrix that `nvidia-smi topo -m` prints, as data. The parser is a pure
 * function (text in, struct out, no I/O, no allocation that outlives it) so that unit tests
 * and the fuzzer can drive it; the analysis is the one chapter 4 prints: which GPU pairs
 * talk over NVLink, which only over PCIe, and what that means for collectives. */
#ifndef CH04_TOPO_PARSE_H
#define CH04_TOPO_PARSE_H

#include <stddef.h>

#define TOPO_MAX_DEVS 64        /* GPU and NIC columns together */
#define TOPO_NAME_MAX 32
#define TOPO_FIELD_MAX 160

typedef enum { TOPO_GPU, TOPO_NIC } topo_dev_kind;

/* Ordered from closest to farthest, so a larger value is a slower path. */
typedef enum {
    TOPO_L_NONE = 0,   /* no cell parsed (never left in a matrix that parsed) */
    TOPO_L_SELF,       /* X: the device itself */
    TOPO_L_NV,         /* NV<k>: k bonded NVLinks */
    TOPO_L_PIX,        /* at most one PCIe bridge (same switch) */
    TOPO_L_PXB,        /* several PCIe bridges, not through the host bridge */
    TOPO_L_PHB,        /* through a PCIe host bridge (the CPU's root complex) */
    TOPO_L_NODE,       /* between host bridges of one NUMA node */
    TOPO_L_SYS         /* across the inter-socket link (QPI/UPI/Infinity Fabric) */
} topo_link_kind;

typedef struct topo_link {
    topo_link_kind kind;
    int nvlinks;       /* k of NV<k>; 0 for the other kinds */
} topo_link;

typedef struct topo_dev {
    topo_dev_kind kind;
    int index;                          /* k of GPUk or NICk; NICs named otherwise: their order */
    char name[TOPO_NAME_MAX];           /* as the header spells it: "GPU3", "NIC0", "mlx5_0" */
    char alias[TOPO_NAME_MAX];          /* from the NIC legend ("NIC0: mlx5_0"), else "" */
    char cpu_affinity[TOPO_FIELD_MAX];  /* "0-55,112-167"; "" when absent (NIC rows) */
    char numa_affinity[TOPO_FIELD_MAX];
    char gpu_numa_id[TOPO_FIELD_MAX];
} topo_dev;

typedef struct topo_matrix {
    int ndev;                           /* matrix columns (GPUs and NICs) in header order */
    int ngpu, nnic;
    topo_dev dev[TOPO_MAX_DEVS];
    topo_link link[TOPO_MAX_DEVS][TOPO_MAX_DEVS];   /* [row device][column device] */
    int gpu_dev[TOPO_MAX_DEVS];         /* GPU index k -> device position, -1 when absent */
    int has_cpu_affinity, has_numa_affinity, has_gpu_numa_id;
    int ninfo;                          /* info columns after the devices (affinities, ...) */
    int asymmetric;                     /* cells where [a][b] and [b][a] differ */
} topo_matrix;

typedef enum {
    TOPO_SINGLE_GPU,   /* fewer than two GPUs: no pair to connect */
    TOPO_ALL_NVLINK,   /* every GPU pair has NVLink */
    TOPO_MIXED,        /* some pairs NVLink, some PCIe only */
    TOPO_NO_NVLINK     /* PCIe (or the CPU interconnect) only */
} topo_verdict;

typedef struct topo_analysis {
    int ngpu, npairs;          /* npairs = ngpu(ngpu-1)/2 */
    int nv_pairs, pcie_pairs;  /* nv_pairs + pcie_pairs == npairs */
    int min_nvlinks, max_nvlinks;   /* over the NVLink pairs; 0 when none */
    topo_verdict verdict;
} topo_analysis;

/* topo_parse.c */
/* Parse the output of `nvidia-smi topo -m` (len bytes, need not be NUL-terminated). The
 * header is the first line naming GPU0 (or "GPU 0") without any link code in it; rows follow
 * until a blank line or a line with "Legend". Column identity comes from the header, so NIC
 * columns stay NICs; any NV<k> is accepted; cells are split at tabs when the line has them,
 * else at spaces; ANSI escapes and CRs are ignored. Returns 0, or -1 with one line in err
 * ("line 5: row GPU2 has 6 link cells, the header has 8 devices"). */
int topo_parse(const char *text, size_t len, topo_matrix *m, char *err, size_t errlen);
/* One cell: "X", "NV<k>" (k >= 1), PIX, PXB, PHB, NODE, SYS (and SOC, the old name of SYS). */
int topo_link_parse(const char *cell, topo_link *out);
/* "NV18", "SYS", "X" into buf; returns buf. */
const char *topo_link_code(const topo_link *l, char *buf, size_t n);
/* A phrase for the legend: "NVLink, k bonded links", "same PCIe switch", ... */
const char *topo_link_meaning(topo_link_kind kind);
/* Device position of GPU k, -1 when the matrix has no such GPU. */
int topo_gpu_dev(const topo_matrix *m, int gpu);
/* The link from GPU a to GPU b (row a, column b); NULL when either GPU is absent. */
const topo_link *topo_gpu_link(const topo_matrix *m, int a, int b);
/* Pairs a < b over the GPUs of the matrix (NICs never form pairs). */
void topo_analyse(const topo_matrix *m, topo_analysis *an);
const char *topo_verdict_name(topo_verdict v);   /* "all NVLink", "mixed", "none", "single GPU" */
/* The simulated DGX-A100 that the lab shows without a GPU: 8 GPUs, NV12 between every pair,
 * written as nvidia-smi would print it (with affinity columns). Returns the length. */
size_t topo_simulated_dgx_a100(char *buf, size_t n);

#endif
