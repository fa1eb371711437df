/* test_topo.c - chapter 4's topology inspector: the `nvidia-smi topo -m` parser on every
 * fixture of tests/fixtures/topo (link per pair, NV18 and odd NV<k>, NICs kept as NICs,
 * affinities), malformed input (a one-line reason, no crash), hwloc against sysconf and sysfs,
 * and the lab run through MLSYS_LAB_BIN with --matrix, without nvidia-smi and with a fake one.
 * Run from the repository root (the fixtures are found relative to it). */
#include "run_bin.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../chapters/ch04/topo_hw.h"
#include "../../chapters/ch04/topo_parse.h"
#include "../../core/mlsys.h"

#define FIX "tests/fixtures/topo/"

/* ---- helpers ---- */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (run the tests from the repository root)", path);
    size_t cap = 1 << 16, n = 0, got;
    char *s = malloc(cap);
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 1024)
            s = realloc(s, cap *= 2);
    }
    fclose(f);
    s[n] = 0;
    if (len)
        *len = n;
    return s;
}

/* Parses a fixture; the test fails with the parser's message if it does not parse. */
static topo_matrix *parse_fixture(const char *name)
{
    char path[256], err[256];
    size_t len;
    snprintf(path, sizeof path, FIX "%s", name);
    char *text = slurp(path, &len);
    topo_matrix *m = malloc(sizeof *m);
    int rc = topo_parse(text, len, m, err, sizeof err);
    free(text);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    return m;
}

/* Parses a string that must be refused; returns the message (static). */
static const char *parse_error(const char *text)
{
    static char err[256];
    topo_matrix *m = malloc(sizeof *m);
    err[0] = 0;
    int rc = topo_parse(text, text ? strlen(text) : 0, m, err, sizeof err);
    free(m);
    ck_assert_msg(rc == -1, "accepted input that should fail: [%s]", text ? text : "(null)");
    ck_assert_msg(err[0] != 0, "refused without a message: [%s]", text ? text : "(null)");
    ck_assert_msg(!strchr(err, '\n'), "message is not one line: %s", err);
    return err;
}

static void expect_link(const topo_matrix *m, int a, int b, topo_link_kind kind, int nv)
{
    const topo_link *l = topo_gpu_link(m, a, b);
    char code[16];
    ck_assert_msg(l != NULL, "GPU%d-GPU%d: no link", a, b);
    ck_assert_msg(l->kind == kind && l->nvlinks == nv, "GPU%d-GPU%d: got %s", a, b,
                  topo_link_code(l, code, sizeof code));
}

/* Link between two devices by name (for NIC cells). */
static const topo_link *link_by_name(const topo_matrix *m, const char *a, const char *b)
{
    int ia = -1, ib = -1;
    for (int i = 0; i < m->ndev; i++) {
        if (!strcmp(m->dev[i].name, a))
            ia = i;
        if (!strcmp(m->dev[i].name, b))
            ib = i;
    }
    ck_assert_msg(ia >= 0 && ib >= 0, "no device %s or %s", a, b);
    return &m->link[ia][ib];
}

static const topo_dev *dev_by_name(const topo_matrix *m, const char *name)
{
    for (int i = 0; i < m->ndev; i++)
        if (!strcmp(m->dev[i].name, name))
            return &m->dev[i];
    ck_abort_msg("no device %s", name);
    return NULL;
}

/* ---- links and fixtures ---- */

START_TEST(test_link_codes)
{
    topo_link l;
    static const struct { const char *s; topo_link_kind k; int nv; } ok[] = {
        {"X", TOPO_L_SELF, 0}, {"NV1", TOPO_L_NV, 1}, {"NV4", TOPO_L_NV, 4},
        {"NV10", TOPO_L_NV, 10}, {"NV12", TOPO_L_NV, 12}, {"NV16", TOPO_L_NV, 16},
        {"NV18", TOPO_L_NV, 18}, {"NV100", TOPO_L_NV, 100}, {"PIX", TOPO_L_PIX, 0},
        {"PXB", TOPO_L_PXB, 0}, {"PHB", TOPO_L_PHB, 0}, {"NODE", TOPO_L_NODE, 0},
        {"SYS", TOPO_L_SYS, 0}, {"SOC", TOPO_L_SYS, 0},
    };
    static const char *const bad[] = {"", "NV", "NV0", "nv4", "NV-1", "NV4x", "NV 4", "x",
                                      "SYSTEM", "PCIE", "NV99999", "N/A"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_msg(topo_link_parse(ok[i].s, &l) == 0, "%s refused", ok[i].s);
        ck_assert_int_eq(l.kind, ok[i].k);
        ck_assert_int_eq(l.nvlinks, ok[i].nv);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(topo_link_parse(bad[i], &l) != 0, "'%s' accepted", bad[i]);
    char buf[16];
    l.kind = TOPO_L_NV;
    l.nvlinks = 18;
    ck_assert_str_eq(topo_link_code(&l, buf, sizeof buf), "NV18");
    l.kind = TOPO_L_NODE;
    ck_assert_str_eq(topo_link_code(&l, buf, sizeof buf), "NODE");
}
END_TEST

/* [check] the simulated DGX-A100: 28 NV pairs, 0 PCIe, all NVLink. */
START_TEST(test_simulated_dgx_a100)
{
    char text[4096], err[256];
    size_t len = topo_simulated_dgx_a100(text, sizeof text);
    ck_assert_uint_lt(len, sizeof text);
    topo_matrix *m = malloc(sizeof *m);
    ck_assert_msg(topo_parse(text, len, m, err, sizeof err) == 0, "%s", err);
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 8);
    ck_assert_int_eq(an.nv_pairs, 28);
    ck_assert_int_eq(an.pcie_pairs, 0);
    ck_assert_int_eq(an.verdict, TOPO_ALL_NVLINK);
    ck_assert_str_eq(topo_verdict_name(an.verdict), "all NVLink");
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            expect_link(m, a, b, a == b ? TOPO_L_SELF : TOPO_L_NV, a == b ? 0 : 12);
    free(m);
}
END_TEST

START_TEST(test_fixture_dgx_a100)
{
    topo_matrix *m = parse_fixture("dgx-a100-8gpu-nv12.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 8);
    ck_assert_int_eq(m->nnic, 0);
    ck_assert_int_eq(an.npairs, 28);
    ck_assert_int_eq(an.nv_pairs, 28);
    ck_assert_int_eq(an.min_nvlinks, 12);
    ck_assert_int_eq(an.max_nvlinks, 12);
    ck_assert_int_eq(an.verdict, TOPO_ALL_NVLINK);
    ck_assert(m->has_cpu_affinity && m->has_numa_affinity && m->has_gpu_numa_id);
    ck_assert_str_eq(dev_by_name(m, "GPU0")->cpu_affinity, "0-63,128-191");
    ck_assert_str_eq(dev_by_name(m, "GPU7")->cpu_affinity, "64-127,192-255");
    ck_assert_str_eq(dev_by_name(m, "GPU3")->numa_affinity, "0");
    ck_assert_str_eq(dev_by_name(m, "GPU4")->numa_affinity, "1");
    ck_assert_str_eq(dev_by_name(m, "GPU4")->gpu_numa_id, "N/A");
    ck_assert_int_eq(m->asymmetric, 0);
    free(m);
}
END_TEST

/* 8 GPUs on NVSwitch (NV18) plus 4 NICs: the NIC columns must not become GPUs 8..11. */
START_TEST(test_fixture_nvswitch_nics)
{
    topo_matrix *m = parse_fixture("nvswitch-h100-8gpu-nics.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ndev, 12);
    ck_assert_int_eq(m->ngpu, 8);
    ck_assert_int_eq(m->nnic, 4);
    for (int g = 8; g < 12; g++)
        ck_assert_int_eq(topo_gpu_dev(m, g), -1);
    ck_assert_int_eq(an.npairs, 28);
    ck_assert_int_eq(an.nv_pairs, 28);
    ck_assert_int_eq(an.pcie_pairs, 0);
    ck_assert_int_eq(an.verdict, TOPO_ALL_NVLINK);
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            if (a != b)
                expect_link(m, a, b, TOPO_L_NV, 18);
    for (int k = 0; k < 4; k++) {
        char name[32], alias[32];
        snprintf(name, sizeof name, "NIC%d", k);
        snprintf(alias, sizeof alias, "mlx5_%d", k);
        const topo_dev *d = dev_by_name(m, name);
        ck_assert_int_eq(d->kind, TOPO_NIC);
        ck_assert_int_eq(d->index, k);
        ck_assert_str_eq(d->alias, alias);
        ck_assert_str_eq(d->cpu_affinity, "");     /* NIC rows have no affinity cells */
    }
    ck_assert_int_eq(link_by_name(m, "GPU0", "NIC0")->kind, TOPO_L_PXB);
    ck_assert_int_eq(link_by_name(m, "NIC0", "GPU1")->kind, TOPO_L_PXB);
    ck_assert_int_eq(link_by_name(m, "GPU0", "NIC1")->kind, TOPO_L_NODE);
    ck_assert_int_eq(link_by_name(m, "GPU0", "NIC2")->kind, TOPO_L_SYS);
    ck_assert_int_eq(link_by_name(m, "GPU6", "NIC3")->kind, TOPO_L_PXB);
    ck_assert_int_eq(link_by_name(m, "NIC0", "NIC0")->kind, TOPO_L_SELF);
    ck_assert_str_eq(dev_by_name(m, "GPU5")->cpu_affinity, "56-111,168-223");
    ck_assert_str_eq(dev_by_name(m, "GPU5")->numa_affinity, "1");
    free(m);
}
END_TEST

/* PIX, PXB, PHB, NODE, SYS: the all-PCIe box gives 0 NV pairs and "none". */
START_TEST(test_fixture_pcie)
{
    topo_matrix *m = parse_fixture("pcie-8gpu.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 8);
    ck_assert_int_eq(an.nv_pairs, 0);
    ck_assert_int_eq(an.pcie_pairs, 28);
    ck_assert_int_eq(an.verdict, TOPO_NO_NVLINK);
    ck_assert_str_eq(topo_verdict_name(an.verdict), "none");
    expect_link(m, 0, 1, TOPO_L_PIX, 0);
    expect_link(m, 2, 3, TOPO_L_PIX, 0);
    expect_link(m, 0, 2, TOPO_L_PXB, 0);
    expect_link(m, 1, 3, TOPO_L_PXB, 0);
    expect_link(m, 4, 5, TOPO_L_PHB, 0);
    expect_link(m, 6, 7, TOPO_L_PIX, 0);
    expect_link(m, 4, 6, TOPO_L_NODE, 0);
    expect_link(m, 5, 7, TOPO_L_NODE, 0);
    expect_link(m, 0, 4, TOPO_L_SYS, 0);
    expect_link(m, 7, 3, TOPO_L_SYS, 0);
    /* every class appears: count them over the pairs */
    int seen[TOPO_L_SYS + 1] = {0};
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++)
            seen[topo_gpu_link(m, a, b)->kind]++;
    ck_assert_int_eq(seen[TOPO_L_PIX], 3);     /* 0-1, 2-3, 6-7 */
    ck_assert_int_eq(seen[TOPO_L_PXB], 4);     /* {0,1} x {2,3} */
    ck_assert_int_eq(seen[TOPO_L_PHB], 1);     /* 4-5 */
    ck_assert_int_eq(seen[TOPO_L_NODE], 4);    /* {4,5} x {6,7} */
    ck_assert_int_eq(seen[TOPO_L_SYS], 16);
    free(m);
}
END_TEST

/* [check] the 4-GPU mixed box (0-1 NV4, 2-3 NV4, rest SYS) with NIC rows and columns. */
START_TEST(test_fixture_mixed_nics)
{
    topo_matrix *m = parse_fixture("mixed-4gpu-nv4-nics.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 4);
    ck_assert_int_eq(m->nnic, 2);
    ck_assert_int_eq(an.nv_pairs, 2);
    ck_assert_int_eq(an.pcie_pairs, 4);
    ck_assert_int_eq(an.verdict, TOPO_MIXED);
    ck_assert_str_eq(topo_verdict_name(an.verdict), "mixed");
    expect_link(m, 0, 1, TOPO_L_NV, 4);
    expect_link(m, 2, 3, TOPO_L_NV, 4);
    expect_link(m, 0, 2, TOPO_L_SYS, 0);
    expect_link(m, 1, 3, TOPO_L_SYS, 0);
    ck_assert_int_eq(link_by_name(m, "NIC0", "GPU0")->kind, TOPO_L_PIX);
    ck_assert_int_eq(link_by_name(m, "NIC1", "GPU3")->kind, TOPO_L_PIX);
    ck_assert_int_eq(link_by_name(m, "NIC1", "GPU0")->kind, TOPO_L_SYS);
    ck_assert_str_eq(dev_by_name(m, "NIC1")->alias, "mlx5_1");
    ck_assert_str_eq(dev_by_name(m, "GPU2")->cpu_affinity, "12-23,36-47");
    free(m);
}
END_TEST

/* Older drivers: spaces instead of tabs, NICs named by their device (mlx5_0), CPU Affinity
 * only. */
START_TEST(test_fixture_legacy)
{
    topo_matrix *m = parse_fixture("legacy-2gpu-mlx5.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 2);
    ck_assert_int_eq(m->nnic, 2);
    ck_assert_int_eq(dev_by_name(m, "mlx5_0")->kind, TOPO_NIC);
    ck_assert_int_eq(dev_by_name(m, "mlx5_1")->index, 1);
    expect_link(m, 0, 1, TOPO_L_NV, 2);
    ck_assert_int_eq(link_by_name(m, "GPU1", "mlx5_1")->kind, TOPO_L_PIX);
    ck_assert(m->has_cpu_affinity);
    ck_assert(!m->has_numa_affinity);
    ck_assert_str_eq(dev_by_name(m, "GPU0")->cpu_affinity, "0-9,20-29");
    ck_assert_str_eq(dev_by_name(m, "GPU1")->cpu_affinity, "10-19,30-39");
    ck_assert_int_eq(an.verdict, TOPO_ALL_NVLINK);
    free(m);
}
END_TEST

/* [orig] bug: NV10, NV16 and friends were not recognised. */
START_TEST(test_fixture_nvlink_counts)
{
    static const int want[4][4] = {{0, 16, 10, 2}, {16, 0, 6, 24}, {10, 6, 0, 1}, {2, 24, 1, 0}};
    topo_matrix *m = parse_fixture("nvlink-counts-4gpu.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            if (a != b)
                expect_link(m, a, b, TOPO_L_NV, want[a][b]);
    ck_assert_int_eq(an.nv_pairs, 6);
    ck_assert_int_eq(an.min_nvlinks, 1);
    ck_assert_int_eq(an.max_nvlinks, 24);
    free(m);
}
END_TEST

START_TEST(test_fixture_single_gpu)
{
    topo_matrix *m = parse_fixture("single-gpu-nics.txt");
    topo_analysis an;
    topo_analyse(m, &an);
    ck_assert_int_eq(m->ngpu, 1);
    ck_assert_int_eq(m->nnic, 2);
    ck_assert_int_eq(an.npairs, 0);
    ck_assert_int_eq(an.verdict, TOPO_SINGLE_GPU);   /* not "all NVLink" with 0 of 0 pairs */
    ck_assert_str_eq(dev_by_name(m, "NIC0")->alias, "rocep1s0f0");
    free(m);
}
END_TEST

/* Variants: "GPU 0" names, CRLF line ends, no affinity columns at all. */
START_TEST(test_variants)
{
    char err[256];
    topo_matrix *m = malloc(sizeof *m);
    const char *spaced = "        GPU 0   GPU 1   CPU Affinity\n"
                         "GPU 0    X      NV4     0-7\n"
                         "GPU 1   NV4      X      0-7\n";
    ck_assert_msg(topo_parse(spaced, strlen(spaced), m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m->ngpu, 2);
    expect_link(m, 0, 1, TOPO_L_NV, 4);
    ck_assert_str_eq(dev_by_name(m, "GPU1")->cpu_affinity, "0-7");
    const char *crlf = "\tGPU0\tGPU1\r\nGPU0\t X \tPHB\r\nGPU1\tPHB\t X \r\n\r\nLegend:\r\n";
    ck_assert_msg(topo_parse(crlf, strlen(crlf), m, err, sizeof err) == 0, "%s", err);
    expect_link(m, 1, 0, TOPO_L_PHB, 0);
    ck_assert(!m->has_cpu_affinity);
    /* text before the matrix (nvidia-smi -L lines naming GPU 0) is skipped */
    const char *pre = "GPU 0: NVIDIA H100 (UUID: GPU-1)\nsome text\n"
                      "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n";
    ck_assert_msg(topo_parse(pre, strlen(pre), m, err, sizeof err) == 0, "%s", err);
    expect_link(m, 0, 1, TOPO_L_NV, 18);
    free(m);
}
END_TEST

/* ---- malformed input: a clear one-line reason, never a crash ---- */

START_TEST(test_malformed)
{
    ck_assert_ptr_nonnull(strstr(parse_error(""), "empty"));
    ck_assert_ptr_nonnull(strstr(parse_error(NULL), "empty"));
    ck_assert_ptr_nonnull(strstr(parse_error("  \n\t\n\n"), "empty"));
    ck_assert_ptr_nonnull(strstr(parse_error("hello\nworld\n"), "no header"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tNIC0\tNIC1\nNIC0\t X \tSYS\n"), "no header"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n"),
                                 "truncated row"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV4\tSYS\nGPU1\tNV4\t X \n"),
                                 "extra columns"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV4\n"), "no row for GPU1"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tZZZ\nGPU1\tNV4\t X \n"),
                                 "unknown connection 'ZZZ'"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV4\t X \n"),
                                 "unknown connection 'NV0'"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\tNV4\tNV4\nGPU1\tNV4\t X \n"),
                                 "diagonal must be X"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \t X \nGPU1\tNV4\t X \n"),
                                 "only the diagonal"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU0\nGPU0\t X \tNV4\n"), "twice"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU0\t X \tNV4\n"),
                                 "second row"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU9\tNV4\t X \n"),
                                 "not a device of the header"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGP$U1\nGPU0\t X \tNV4\n"),
                                 "not a device name"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU99999\n"), "GPU index"));
    ck_assert_ptr_nonnull(strstr(parse_error("\tGPU0\tGPU1a\n"), "not a device name"));
    /* the bad fixtures */
    size_t len;
    static const struct { const char *file, *want; } bad[] = {
        {"bad-truncated-row.txt", "row GPU2 has 2 link cells, the header has 4 devices"},
        {"bad-extra-column.txt", "row GPU1 has 8 fields, the header has 7 columns"},
        {"bad-missing-rows.txt", "no row for GPU2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", bad[i].file);
        char *text = slurp(path, &len);
        const char *e = parse_error(text);
        ck_assert_msg(strstr(e, bad[i].want) != NULL, "%s: %s", bad[i].file, e);
        free(text);
    }
}
END_TEST

/* Too many columns or cells: refused, no overflow of the fixed tables. */
START_TEST(test_too_big)
{
    size_t cap = 1 << 16, o = 0;
    char *s = malloc(cap);
    for (int i = 0; i < TOPO_MAX_DEVS + 5; i++)
        o += (size_t)snprintf(s + o, cap - o, "\tGPU%d", i);
    s[o++] = '\n';
    s[o] = 0;
    ck_assert_ptr_nonnull(strstr(parse_error(s), "more than"));
    o = (size_t)snprintf(s, cap, "\tGPU0\tGPU1\nGPU0\t X \tNV4");
    for (int i = 0; i < 1000; i++)
        o += (size_t)snprintf(s + o, cap - o, "\tSYS");
    snprintf(s + o, cap - o, "\nGPU1\tNV4\t X \n");
    ck_assert_ptr_nonnull(strstr(parse_error(s), "extra columns"));
    free(s);
}
END_TEST

/* Random bytes and mutated fixtures: the parser returns 0 or -1, with a message on -1. A
 * small deterministic cousin of tests/fuzz/fuzz_topo.c. */
START_TEST(test_garbage)
{
    size_t len;
    char *base = slurp(FIX "nvswitch-h100-8gpu-nics.txt", &len);
    char *buf = malloc(len + 1), err[256];
    topo_matrix *m = malloc(sizeof *m);
    mlsys_rng r;
    mlsys_rng_seed(&r, 42);
    static const char alphabet[] = "\t\n \x1b[GPUNICVX0123456789SYPHBODE:-,";
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, base, len + 1);
        size_t n = len;
        if (iter % 3 == 0)
            n = mlsys_rng_u64(&r) % (len + 1);      /* truncate anywhere */
        int edits = (int)(mlsys_rng_u64(&r) % 8);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = mlsys_rng_u64(&r) % n;
            buf[at] = (iter & 1) ? (char)(mlsys_rng_u64(&r) & 0xff)
                                 : alphabet[mlsys_rng_u64(&r) % (sizeof alphabet - 1)];
        }
        err[0] = 0;
        int rc = topo_parse(buf, n, m, err, sizeof err);
        ck_assert(rc == 0 || rc == -1);
        if (rc == 0) {
            ck_assert_int_ge(m->ngpu, 1);
            ck_assert_int_le(m->ndev, TOPO_MAX_DEVS);
            ck_assert_int_eq(m->ngpu + m->nnic, m->ndev);
            topo_analysis an;
            topo_analyse(m, &an);
            ck_assert_int_eq(an.nv_pairs + an.pcie_pairs, an.npairs);
            ck_assert_int_eq(an.npairs, m->ngpu * (m->ngpu - 1) / 2);
        } else {
            ck_assert_msg(err[0] != 0, "iteration %d: refused without a message", iter);
        }
    }
    free(m);
    free(buf);
    free(base);
}
END_TEST

/* ---- hwloc: this machine, checked against sysconf and sysfs ---- */

#ifdef HAVE_HWLOC
static int read_int_file(const char *path, long *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%li", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

/* Cores as Linux counts them: distinct (package, core) pairs over the online CPUs. -1 when
 * sysfs does not say. */
static int sysfs_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN), pairs[1024][2];
    int npairs = 0;
    for (long cpu = 0, found = 0; found < n && cpu < 4096; cpu++) {
        char path[256];
        long pkg, core;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        if (read_int_file(path, &core) != 0)
            continue;
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
        if (read_int_file(path, &pkg) != 0)
            return -1;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/online", cpu);
        long online = 1;
        read_int_file(path, &online);      /* cpu0 often has no "online" file */
        if (!online)
            continue;
        found++;
        int dup = 0;
        for (int i = 0; i < npairs; i++)
            dup |= pairs[i][0] == pkg && pairs[i][1] == core;
        if (!dup && npairs < 1024) {
            pairs[npairs][0] = pkg;
            pairs[npairs][1] = core;
            npairs++;
        }
    }
    return npairs > 0 ? npairs : -1;
}

/* Size of cpu0's level-1 data cache from sysfs, 0 when unknown. */
static uint64_t sysfs_l1d(void)
{
    for (int i = 0; i < 8; i++) {
        char path[256], type[32] = "", size[32] = "";
        long level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_int_file(path, &level) != 0)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (!f || fscanf(f, "%31s", type) != 1)
            type[0] = 0;
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f || fscanf(f, "%31s", size) != 1)
            size[0] = 0;
        if (f)
            fclose(f);
        if (level == 1 && !strcmp(type, "Data") && size[0]) {
            char *end;
            uint64_t v = strtoull(size, &end, 10);
            return *end == 'K' ? v * 1024 : *end == 'M' ? v * 1024 * 1024 : v;
        }
    }
    return 0;
}
#endif

START_TEST(test_hwloc_machine)
{
    topo_machine *m = malloc(sizeof *m);
    char err[256] = "";
    int rc = topo_machine_read(m, err, sizeof err);
#ifdef HAVE_HWLOC
    ck_assert_msg(rc == 0, "%s", err);
    long onln = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_ge(m->packages, 1);
    ck_assert_int_eq(m->pus, onln);
    ck_assert_int_ge(m->cores, 1);
    ck_assert_int_le(m->cores, m->pus);
    int cores = sysfs_cores();
    if (cores > 0)
        ck_assert_int_eq(m->cores, cores);
    ck_assert_int_ge(m->pus_allowed, 1);
    ck_assert_int_le(m->pus_allowed, m->pus);
    ck_assert_int_ge(m->numa_nodes, 1);
    ck_assert_int_eq(m->nnuma, m->numa_nodes < TOPO_HW_MAX_NUMA ? m->numa_nodes : TOPO_HW_MAX_NUMA);
    for (int i = 0; i < m->nnuma; i++)
        ck_assert_uint_gt(m->numa[i].local_memory, 0);
    ck_assert_int_ge(m->ncaches, 1);
    int have_l1 = 0;
    for (int i = 0; i < m->ncaches; i++) {
        ck_assert_uint_gt(m->caches[i].size, 0);
        ck_assert_int_ge(m->caches[i].level, 1);
        ck_assert_int_ge(m->caches[i].count, 1);
        if (m->caches[i].level == 1 && m->caches[i].kind == 'd') {
            have_l1 = 1;
            uint64_t ref = sysfs_l1d();
            if (ref)
                ck_assert_uint_eq(m->caches[i].size, ref);
        }
    }
    ck_assert_msg(have_l1 || sysfs_l1d() == 0, "no L1 data cache reported");
    /* every PCI device hwloc lists exists in sysfs with the same ids */
    for (int i = 0; i < m->npci; i++) {
        const topo_pci *p = &m->pci[i];
        char path[256];
        long vendor = -1, device = -1, cls = -1;
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/", p->domain, p->bus,
                 p->dev, p->func);
        char f[300];
        snprintf(f, sizeof f, "%svendor", path);
        if (read_int_file(f, &vendor) != 0)
            continue;                      /* no sysfs view of PCI here */
        snprintf(f, sizeof f, "%sdevice", path);
        read_int_file(f, &device);
        snprintf(f, sizeof f, "%sclass", path);
        read_int_file(f, &cls);
        ck_assert_int_eq(vendor, p->vendor_id);
        ck_assert_int_eq(device, p->device_id);
        ck_assert_int_eq(cls >> 8, p->class_id);
    }
#else
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(err, "built without hwloc"));
#endif
    free(m);
}
END_TEST

START_TEST(test_pci_class_names)
{
    ck_assert_str_eq(topo_pci_class_name(0x0302), "3D controller (GPU)");
    ck_assert_str_eq(topo_pci_class_name(0x0200), "Ethernet controller");
    ck_assert_str_eq(topo_pci_class_name(0x0207), "InfiniBand controller");
    ck_assert_str_eq(topo_pci_class_name(0x0280), "Network controller");
    ck_assert_str_eq(topo_pci_class_name(0x7f00), "Other device");
}
END_TEST

/* ---- the lab, run for real ---- */

typedef struct run_result {
    char *out, *err;
    int status;
} run_result;

static char *read_stream(FILE *f)
{
    size_t cap = 4096, n = 0, got;
    char *s = malloc(cap);
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2048)
            s = realloc(s, cap *= 2);
    }
    s[n] = 0;
    return s;
}

/* env: "VAR=value ..." put before the command (may be ""). */
static run_result run_lab(const char *env, const char *fmt, ...)
{
    run_result r;
    char args[1024], cmd[4096], errpath[] = "/tmp/mlsys-test-topo-XXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int fd = mkstemp(errpath);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s timeout -k 5 60 '%s' run ch04/topology-inspector %s 2>%s", env,
             bin(), args, errpath);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    r.out = read_stream(p);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *e = fopen(errpath, "r");
    r.err = e ? read_stream(e) : strdup("");
    if (e)
        fclose(e);
    unlink(errpath);
    return r;
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

#define HAS(r, s) ck_assert_msg(strstr((r).out, (s)) != NULL, "missing [%s] in:\n%s", (s), (r).out)
#define LACKS(r, s) ck_assert_msg(strstr((r).out, (s)) == NULL, "unexpected [%s] in:\n%s", (s), (r).out)

START_TEST(test_lab_matrix_file)
{
    run_result r = run_lab("MLSYS_NVIDIA_SMI=/nonexistent", "--matrix " FIX "mixed-4gpu-nv4-nics.txt");
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    HAS(r, "GPU TOPOLOGY INSPECTOR");
    HAS(r, "TOPOLOGY MATRIX (from " FIX "mixed-4gpu-nv4-nics.txt)");
    HAS(r, "Parsed: 4 GPUs, 2 NICs");
    HAS(r, "NVLink pairs (2):\n  GPU0 ↔ GPU1: NV4 (4 links");
    HAS(r, "  GPU2 ↔ GPU3: NV4 (4 links");
    HAS(r, "PCIe-only pairs (4):\n  GPU0 ↔ GPU2: SYS");
    HAS(r, "Recommendation: mixed.");
    HAS(r, "NIC0   = mlx5_0     closest GPUs (PIX): GPU0 GPU1\n");
    HAS(r, "GPU2   CPUs 12-23,36-47");
    LACKS(r, "GPU4");                 /* NIC columns invent no GPUs */
    LACKS(r, "\x1b[");                /* the header's underline is not echoed */
    LACKS(r, "simulated");
    run_free(&r);

    r = run_lab("", "--matrix " FIX "nvswitch-h100-8gpu-nics.txt");
    ck_assert_int_eq(r.status, 0);
    HAS(r, "NVLink pairs (28):");
    HAS(r, "GPU6 ↔ GPU7: NV18 (18 links, ≈ 450 GB/s each way");
    HAS(r, "PCIe-only pairs (0):\n  none");
    HAS(r, "Recommendation: all NVLink.");
    LACKS(r, "GPU8");
    run_free(&r);

    r = run_lab("", "--matrix " FIX "pcie-8gpu.txt");
    ck_assert_int_eq(r.status, 0);
    HAS(r, "NVLink pairs (0):\n  none");
    HAS(r, "PCIe-only pairs (28):");
    HAS(r, "GPU4 ↔ GPU5: PHB");
    HAS(r, "Recommendation: no NVLink.");
    run_free(&r);
}
END_TEST

START_TEST(test_lab_bad_matrix)
{
    run_result r = run_lab("", "--matrix " FIX "bad-truncated-row.txt");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "row GPU2 has 2 link cells, the header has 4 devices (truncated "
                                "row)") != NULL, "%s", r.err);
    ck_assert_msg(strstr(r.err, "mlsys-lab: ch04/topology-inspector: ") == r.err, "%s", r.err);
    run_free(&r);
    r = run_lab("", "--matrix /nonexistent/topo.txt");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "cannot open /nonexistent/topo.txt") != NULL, "%s", r.err);
    run_free(&r);
}
END_TEST

/* No nvidia-smi: the simulated DGX-A100 and its analysis (28 NV pairs, 0 PCIe). */
START_TEST(test_lab_simulated)
{
    run_result r = run_lab("MLSYS_NVIDIA_SMI=/nonexistent/nvidia-smi", "");
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    HAS(r, "[INFO] nvidia-smi is not available: showing a simulated DGX-A100");
    HAS(r, "SIMULATED TOPOLOGY (DGX-A100)");
    HAS(r, "NVLink pairs (28):");
    HAS(r, "PCIe-only pairs (0):");
    HAS(r, "Recommendation: all NVLink.");
    HAS(r, "CONNECTION TYPES");
    HAS(r, "QUICK REFERENCE");
    LACKS(r, "NVLINK STATUS");
    run_free(&r);
    /* nvidia-smi present but listing no GPU: simulated too */
    r = run_lab("FAKE_SMI_GPUS=0 MLSYS_NVIDIA_SMI=" FIX "fake-nvidia-smi", "");
    ck_assert_int_eq(r.status, 0);
    HAS(r, "[INFO] nvidia-smi lists no GPU: showing a simulated DGX-A100");
    run_free(&r);
}
END_TEST

/* A (fake) nvidia-smi with 4 GPUs: the popen path, and the fixed NVLink-status condition:
 * the output is shown although it contains "NVLINK". */
START_TEST(test_lab_fake_smi)
{
    run_result r = run_lab("MLSYS_NVIDIA_SMI=" FIX "fake-nvidia-smi", "");
    ck_assert_msg(r.status == 0, "status %d: %s\n%s", r.status, r.err, r.out);
    HAS(r, "GPU INFORMATION");
    HAS(r, "GPU 0: Fake A100-SXM4-80GB, 81920 MB, bus 00000000:00:00.0\n");
    HAS(r, "GPU 3: Fake A100-SXM4-80GB, 81920 MB, bus 00000000:03:00.0\n");
    HAS(r, "TOPOLOGY MATRIX (nvidia-smi topo -m)");
    HAS(r, "NVLink pairs (2):");
    HAS(r, "Recommendation: mixed.");
    HAS(r, "NVLINK STATUS (GPU 0)\n");
    HAS(r, "Link 0: 25 GB/s (NVLINK fake)");
    LACKS(r, "simulated");
    run_free(&r);
}
END_TEST

/* The hwloc section of the lab prints the same counts as the struct. */
START_TEST(test_lab_hwloc_section)
{
    run_result r = run_lab("MLSYS_NVIDIA_SMI=/nonexistent", "");
    ck_assert_int_eq(r.status, 0);
    HAS(r, "MACHINE TOPOLOGY (hwloc)");
#ifdef HAVE_HWLOC
    topo_machine *m = malloc(sizeof *m);
    char err[256], want[128];
    ck_assert_int_eq(topo_machine_read(m, err, sizeof err), 0);
    snprintf(want, sizeof want, "  Packages (sockets)  %3d", m->packages);
    HAS(r, want);
    snprintf(want, sizeof want, "  Cores               %3d\n", m->cores);
    HAS(r, want);
    snprintf(want, sizeof want, "  Hardware threads    %3ld", sysconf(_SC_NPROCESSORS_ONLN));
    HAS(r, want);
    HAS(r, "  Caches\n    L1");
    free(m);
#else
    HAS(r, "hwloc: not available: mlsys-lab was built without hwloc");
#endif
    HAS(r, "NVML");
    run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("topo");
    TCase *tp = tcase_create("parser");
    tcase_add_test(tp, test_link_codes);
    tcase_add_test(tp, test_simulated_dgx_a100);
    tcase_add_test(tp, test_fixture_dgx_a100);
    tcase_add_test(tp, test_fixture_nvswitch_nics);
    tcase_add_test(tp, test_fixture_pcie);
    tcase_add_test(tp, test_fixture_mixed_nics);
    tcase_add_test(tp, test_fixture_legacy);
    tcase_add_test(tp, test_fixture_nvlink_counts);
    tcase_add_test(tp, test_fixture_single_gpu);
    tcase_add_test(tp, test_variants);
    tcase_add_test(tp, test_malformed);
    tcase_add_test(tp, test_too_big);
    tcase_add_test(tp, test_garbage);
    suite_add_tcase(s, tp);
    TCase *th = tcase_create("hwloc");
    tcase_add_test(th, test_hwloc_machine);
    tcase_add_test(th, test_pci_class_names);
    suite_add_tcase(s, th);
    TCase *tl = tcase_create("lab");
    tcase_set_timeout(tl, 120);
    tcase_add_test(tl, test_lab_matrix_file);
    tcase_add_test(tl, test_lab_bad_matrix);
    tcase_add_test(tl, test_lab_simulated);
    tcase_add_test(tl, test_lab_fake_smi);
    tcase_add_test(tl, test_lab_hwloc_section);
    suite_add_tcase(s, tl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
