/* topology_inspector.c - ch04/topology-inspector (single process): what connects the GPUs and
 * NICs of this machine. hwloc's view, NVML's, then the `nvidia-smi topo -m` matrix (popen, or
 * --matrix FILE, or a simulated DGX-A100 without a GPU) parsed by topo_parse.c and analysed;
 * NVLink status, CUDA info, the legend and a quick reference. MLSYS_NVIDIA_SMI names another
 * nvidia-smi (the tests use tests/fixtures/topo/fake-nvidia-smi). */
#include "../common/common.h"
#include "topo_hw.h"
#include "topo_parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define W 60
#define MAX_MATRIX_BYTES (16u << 20)
#define LAB_ID "ch04/topology-inspector"

/* ---- running nvidia-smi ---- */

static const char *smi_path(void)
{
    const char *p = getenv("MLSYS_NVIDIA_SMI");
    return p && *p ? p : "nvidia-smi";
}

/* Runs `<nvidia-smi> args` and returns its exit status (-1: could not start); *out gets
 * its stdout (NUL-terminated, caller frees). stderr is discarded. */
static int smi_capture(const char *args, char **out, size_t *len)
{
    char cmd[4096];
    size_t o = 0;
    const char *p = smi_path();
    cmd[o++] = '\'';
    for (; *p && o + 8 < sizeof cmd; p++) {
        if (*p == '\'') {
            memcpy(cmd + o, "'\\''", 4);
            o += 4;
        } else {
            cmd[o++] = *p;
        }
    }
    cmd[o++] = '\'';
    snprintf(cmd + o, sizeof cmd - o, " %s 2>/dev/null", args);
    *out = NULL;
    *len = 0;
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    char *buf = mlsys_xmalloc(cap);
    for (;;) {
        if (n + 1024 > cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
        if (n > MAX_MATRIX_BYTES)
            break;
    }
    buf[n] = 0;
    int st = pclose(f);
    *out = buf;
    *len = n;
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int count_lines(const char *s)
{
    int n = 0, nonblank = 0;
    for (; *s; s++) {
        if (*s == '\n') {
            n += nonblank;
            nonblank = 0;
        } else if (*s != ' ' && *s != '\t' && *s != '\r') {
            nonblank = 1;
        }
    }
    return n + nonblank;
}

/* Prints text as is, less ANSI escape sequences (nvidia-smi underlines its header) and CRs,
 * ending with a newline. */
static void print_block(const char *text)
{
    size_t l = strlen(text);
    for (size_t i = 0; i < l; i++) {
        if (text[i] == 0x1b && text[i + 1] == '[') {
            i += 2;
            while (i < l && !((unsigned char)text[i] >= 0x40 && (unsigned char)text[i] <= 0x7e))
                i++;
            continue;
        }
        if (text[i] != '\r')
            fputc(text[i], stdout);
    }
    if (l && text[l - 1] != '\n')
        fputc('\n', stdout);
}

/* ---- the analysis of a parsed matrix ---- */

static void print_affinity(const topo_matrix *m)
{
    if (!m->has_cpu_affinity && !m->has_numa_affinity && !m->has_gpu_numa_id)
        return;
    printf("\nGPU affinity (the CPUs and NUMA node to pin each GPU's rank to):\n");
    for (int i = 0; i < m->ndev; i++) {
        const topo_dev *d = &m->dev[i];
        if (d->kind != TOPO_GPU)
            continue;
        printf("  %-6s CPUs %-20s NUMA node %-4s GPU NUMA id %s\n", d->name,
               d->cpu_affinity[0] ? d->cpu_affinity : "?",
               d->numa_affinity[0] ? d->numa_affinity : "?",
               d->gpu_numa_id[0] ? d->gpu_numa_id : "-");
    }
}

/* For each NIC, the GPUs with the closest path: the ones whose traffic it should carry
 * (GPUDirect RDMA wants PIX or PXB). */
static void print_nics(const topo_matrix *m)
{
    char code[16];
    if (m->nnic == 0)
        return;
    printf("\nNICs (columns and rows of their own; they never form GPU pairs):\n");
    for (int i = 0; i < m->ndev; i++) {
        const topo_dev *d = &m->dev[i];
        if (d->kind != TOPO_NIC)
            continue;
        topo_link_kind best = TOPO_L_SYS;
        for (int g = 0; g < m->ndev; g++)
            if (m->dev[g].kind == TOPO_GPU && m->link[i][g].kind < best)
                best = m->link[i][g].kind;
        topo_link bl = {best, 0};
        printf("  %-6s%s%-10s closest GPUs (%s):", d->name, d->alias[0] ? " = " : "   ",
               d->alias, topo_link_code(&bl, code, sizeof code));
        for (int g = 0; g < m->ndev; g++)
            if (m->dev[g].kind == TOPO_GPU && m->link[i][g].kind == best)
                printf(" %s", m->dev[g].name);
        putchar('\n');
    }
}

static void print_recommendation(const topo_analysis *an)
{
    printf("\nRecommendation: ");
    switch (an->verdict) {
    case TOPO_ALL_NVLINK:
        printf("all NVLink. Every GPU pair talks over NVLink, directly or through\n"
               "NVSwitch (topo -m shows both as NV#), the best case for all-reduce: any\n"
               "grouping of these GPUs works, and rings run at NVLink speed.\n");
        break;
    case TOPO_MIXED:
        printf("mixed. Some pairs have NVLink, the others only PCIe. Put the ranks that\n"
               "talk most (tensor parallelism) on NVLink-connected GPUs and use process\n"
               "groups; a ring over all GPUs runs at the speed of its slowest (PCIe) hop.\n");
        break;
    case TOPO_NO_NVLINK:
        printf("no NVLink. Every transfer crosses PCIe or the CPU interconnect, so\n"
               "collectives are PCIe-bound: overlap communication with compute, keep tensor\n"
               "parallelism off this box, and prefer larger steps (fewer, bigger messages).\n");
        break;
    default:
        printf("single GPU: there is no pair to connect. NCCL needs one GPU per rank,\n"
               "so the multi-rank labs run here with --backend shm.\n");
    }
}

static void print_analysis(const topo_matrix *m)
{
    topo_analysis an;
    char code[16];
    topo_analyse(m, &an);
    printf("Parsed: %d GPU%s, %d NIC%s", m->ngpu, m->ngpu == 1 ? "" : "s", m->nnic,
           m->nnic == 1 ? "" : "s");
    if (m->has_cpu_affinity || m->has_numa_affinity || m->has_gpu_numa_id)
        printf(", affinity columns:%s%s%s", m->has_cpu_affinity ? " CPU" : "",
               m->has_numa_affinity ? " NUMA" : "", m->has_gpu_numa_id ? " GPU-NUMA-ID" : "");
    printf("; %d GPU pair%s\n", an.npairs, an.npairs == 1 ? "" : "s");
    if (m->asymmetric)
        printf("[WARN] %d cell%s differ from their mirror image: the matrix is not symmetric\n",
               m->asymmetric, m->asymmetric == 1 ? "" : "s");

    printf("\nNVLink pairs (%d):\n", an.nv_pairs);
    for (int a = 0; a < TOPO_MAX_DEVS; a++)
        for (int b = a + 1; b < TOPO_MAX_DEVS; b++) {
            const topo_link *l = topo_gpu_link(m, a, b);
            if (l && l->kind == TOPO_L_NV)
                printf("  GPU%d ↔ GPU%d: %s (%d link%s, ≈ %d GB/s each way at 25 GB/s a link)\n",
                       a, b, topo_link_code(l, code, sizeof code), l->nvlinks,
                       l->nvlinks == 1 ? "" : "s", 25 * l->nvlinks);
        }
    if (an.nv_pairs == 0)
        printf("  none\n");
    printf("\nPCIe-only pairs (%d):\n", an.pcie_pairs);
    for (int a = 0; a < TOPO_MAX_DEVS; a++)
        for (int b = a + 1; b < TOPO_MAX_DEVS; b++) {
            const topo_link *l = topo_gpu_link(m, a, b);
            if (l && l->kind != TOPO_L_NV)
                printf("  GPU%d ↔ GPU%d: %-4s  %s\n", a, b, topo_link_code(l, code, sizeof code),
                       topo_link_meaning(l->kind));
        }
    if (an.pcie_pairs == 0)
        printf("  none\n");
    print_affinity(m);
    print_nics(m);
    print_recommendation(&an);
}

/* Parses text and prints the analysis; on a parse error prints why. 0 or 1. */
static int analyse_text(const char *text, size_t len, const char *source)
{
    char err[256];
    topo_matrix *m = mlsys_xmalloc(sizeof *m);
    int rc = 0;
    if (topo_parse(text, len, m, err, sizeof err) != 0) {
        fflush(stdout);
        fprintf(stderr, "mlsys-lab: %s: %s: %s\n", LAB_ID, source, err);
        rc = 1;
    } else {
        print_analysis(m);
    }
    free(m);
    return rc;
}

/* ---- sections ---- */

static void section(const char *title)
{
    putchar('\n');
    common_banner(stdout, W, title);
}

static void machine_section(void)
{
    char err[256];
    topo_machine *m = mlsys_xmalloc(sizeof *m);
    section("MACHINE TOPOLOGY (hwloc)");
    if (topo_machine_read(m, err, sizeof err) == 0)
        topo_machine_print(stdout, m);
    else
        printf("hwloc: not available: %s\n", err);
    free(m);
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    *out = NULL;
    *len = 0;
    if (!f) {
        snprintf(err, n, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 8192, used = 0;
    char *buf = mlsys_xmalloc(cap);
    for (;;) {
        if (used + 1 >= cap) {
            if (cap >= MAX_MATRIX_BYTES) {
                snprintf(err, n, "%s is larger than %u MiB: not a topology matrix", path,
                         MAX_MATRIX_BYTES >> 20);
                free(buf);
                fclose(f);
                return -1;
            }
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, n, "out of memory reading %s", path);
                return -1;
            }
            buf = nb;
        }
        size_t r = fread(buf + used, 1, cap - used - 1, f);
        if (r == 0)
            break;
        used += r;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, n, "cannot read %s", path);
        free(buf);
        return -1;
    }
    buf[used] = 0;
    *out = buf;
    *len = used;
    return 0;
}

static void gpu_info_section(void)
{
    char *out;
    size_t len;
    section("GPU INFORMATION");
    int st = smi_capture("--query-gpu=index,name,memory.total,pci.bus_id "
                         "--format=csv,noheader,nounits", &out, &len);
    if (st != 0 || !out || !out[0]) {
        printf("(nvidia-smi --query-gpu failed)\n");
        free(out);
        return;
    }
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *f[4] = {NULL, NULL, NULL, NULL};
        int nf = 0;
        for (char *s2 = NULL, *tok = strtok_r(line, ",", &s2); tok && nf < 4;
             tok = strtok_r(NULL, ",", &s2)) {
            while (*tok == ' ')
                tok++;
            f[nf++] = tok;
        }
        if (nf == 4)
            printf("GPU %s: %s, %s MB, bus %s\n", f[0], f[1], f[2], f[3]);
        else
            printf("%s\n", line);
    }
    free(out);
}

static int smi_matrix_section(void)
{
    char *out;
    size_t len;
    section("TOPOLOGY MATRIX (nvidia-smi topo -m)");
    int st = smi_capture("topo -m", &out, &len);
    if (st != 0 || !out || !out[0]) {
        printf("(nvidia-smi topo -m failed with status %d)\n", st);
        free(out);
        return 1;
    }
    print_block(out);
    section("ANALYSIS");
    int rc = analyse_text(out, len, "nvidia-smi topo -m");
    free(out);
    return rc;
}

/* [orig] printed this only when the output did NOT contain "NVLINK"; [fix] print it whenever
 * nvidia-smi printed something. */
static void nvlink_section(void)
{
    char *out;
    size_t len;
    section("NVLINK STATUS (GPU 0)");
    int st = smi_capture("nvlink --status -i 0", &out, &len);
    if (out && count_lines(out) > 0)
        print_block(out);
    else
        printf("(nvidia-smi nvlink printed nothing, status %d: GPU 0 has no NVLink, or the "
               "driver does not report it)\n", st);
    free(out);
}

static void simulated_section(const char *why)
{
    char text[4096];
    printf("\n[INFO] %s: showing a simulated DGX-A100 (8x A100 through NVSwitch) instead\n", why);
    section("SIMULATED TOPOLOGY (DGX-A100)");
    size_t len = topo_simulated_dgx_a100(text, sizeof text);
    print_block(text);
    section("ANALYSIS (simulated)");
    analyse_text(text, len, "the simulated DGX-A100");
}

static void legend_section(void)
{
    static const topo_link_kind order[] = {TOPO_L_SELF, TOPO_L_NV, TOPO_L_PIX, TOPO_L_PXB,
                                           TOPO_L_PHB, TOPO_L_NODE, TOPO_L_SYS};
    static const char *const codes[] = {"X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS"};
    section("CONNECTION TYPES (closest first)");
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        printf("  %-5s %s\n", codes[i], topo_link_meaning(order[i]));
    printf("  (NIC rows and columns use the same codes: a NIC at PIX/PXB from a GPU can\n"
           "   read and write that GPU's memory directly, GPUDirect RDMA)\n");
    printf("\nBandwidth, per direction (double it for both directions):\n");
    printf("  %-37s %s\n", "NVLink 3 (A100) or 4 (H100), 1 link", "25 GB/s");
    printf("  %-37s %s\n", "NV12 (A100, 12 links)", "300 GB/s");
    printf("  %-37s %s\n", "NV18 (H100, 18 links)", "450 GB/s");
    printf("  %-37s %s\n", "PCIe 4.0 x16", "32 GB/s peak, about 25 measured");
    printf("  %-37s %s\n", "PCIe 5.0 x16", "64 GB/s peak");
    printf("  %-37s %s\n", "SYS (PCIe 4.0 through the CPUs)", "about 12 GB/s GPU to GPU");
    printf("So NV12 against a SYS path: 300 / 12 = 25x. (The original called 300 GB/s\n"
           "\"bidirectional\"; it is each way, 600 GB/s counting both directions.)\n");
}

static void quick_reference(void)
{
    static const char *const vars[] = {"NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NTHREADS",
                                       "NCCL_P2P_DISABLE"};
    section("QUICK REFERENCE");
    printf("Environment (NCCL reads it when a communicator is created):\n");
    printf("  NCCL_DEBUG=INFO         log the topology NCCL found and the rings/trees it built\n");
    printf("  NCCL_ALGO=Ring|Tree     restrict the algorithms (for experiments, not production)\n");
    printf("  NCCL_PROTO=LL|LL128|Simple   restrict the protocols\n");
    printf("  NCCL_NTHREADS=256       CUDA threads per block\n");
    printf("  NCCL_P2P_DISABLE=1      no direct GPU-to-GPU copies: traffic goes through the host\n");
    printf("Set here now:");
    int any = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) {
            printf(" %s=%s", vars[i], v);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
    printf("Commands:\n");
    printf("  nvidia-smi topo -m          the matrix above\n");
    printf("  nvidia-smi nvlink --status  state and speed of every NVLink\n");
    printf("  nvidia-smi -q -d MEMORY     memory of every GPU\n");
    printf("  lstopo-no-graphics          hwloc's picture of the machine\n");
    printf("  mlsys-lab run %s --matrix FILE   analyse a saved matrix\n", LAB_ID);
}

static int inspector_main(const lab_args *a)
{
    const char *file = lab_arg_str(a, "matrix");
    int rc = 0;
    common_box(stdout, COMMON_BOX_WIDTH, "GPU Topology Inspector");
    machine_section();
    section("NVML");
    topo_nvml_print(stdout);

    if (file) {
        char *text, err[512], title[512];
        size_t len;
        if (read_file(file, &text, &len, err, sizeof err) != 0) {
            fflush(stdout);
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
            return 1;
        }
        snprintf(title, sizeof title, "TOPOLOGY MATRIX (from %s)", file);
        section(title);
        print_block(text);
        section("ANALYSIS");
        rc = analyse_text(text, len, file);
        free(text);
    } else {
        char *out = NULL;
        size_t len;
        int have = smi_capture("--version", &out, &len) == 0, gpus = 0;
        free(out);
        if (have) {
            if (smi_capture("-L", &out, &len) == 0)
                gpus = count_lines(out);
            free(out);
        }
        if (!have) {
            simulated_section("nvidia-smi is not available");
        } else if (gpus == 0) {
            simulated_section("nvidia-smi lists no GPU");
        } else {
            gpu_info_section();
            rc = smi_matrix_section();
            nvlink_section();
        }
    }
    section("CUDA INFO");
    topo_cuda_print(stdout);
    legend_section();
    quick_reference();
    fflush(stdout);
    return rc;
}

const lab ch04_topology_inspector_lab = {
    .id = LAB_ID,
    .title = "GPU topology inspector",
    .summary = "what connects the GPUs and NICs: hwloc, NVML and nvidia-smi topo -m, analysed",
    .flags = (const lab_flag[]){
        {"matrix", 0, FLAG_STR, NULL, NULL, 0, 0,
         "a file with saved `nvidia-smi topo -m` output, analysed instead of running nvidia-smi"},
        {NULL, 0, 0, NULL, NULL, 0, 0, NULL}},
    .port = 0,
    .min_ranks = 1,
    .max_ranks = 1,
    .main = inspector_main,
    .view = "log",
};
