/* fuzz_topo.c - libFuzzer target for chapter 4's `nvidia-smi topo -m` parser: any bytes go
 * through topo_parse and, when they parse, through the analysis. Besides crashes (ASan/UBSan)
 * it checks the parser's promises: -1 always comes with a one-line message; a matrix that
 * parsed has at least one GPU, consistent counts, X exactly on the diagonal, and pairs that
 * add up. Built and run by tests/fuzz/run_topo.sh (clang -fsanitize=fuzzer,address). */
#include "../../chapters/ch04/topo_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_topo: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static topo_matrix m;
    char err[256];
    err[0] = 0;
    int rc = topo_parse((const char *)data, size, &m, err, sizeof err);
    check(rc == 0 || rc == -1, "return value is 0 or -1");
    if (rc != 0) {
        check(err[0] != 0, "a refusal has a message");
        check(strchr(err, '\n') == NULL, "the message is one line");
        return 0;
    }
    check(m.ngpu >= 1, "a parsed matrix has a GPU");
    check(m.ndev <= TOPO_MAX_DEVS && m.ngpu + m.nnic == m.ndev, "device counts add up");
    for (int a = 0; a < m.ndev; a++)
        for (int b = 0; b < m.ndev; b++) {
            const topo_link *l = &m.link[a][b];
            check((l->kind == TOPO_L_SELF) == (a == b), "X exactly on the diagonal");
            check(l->kind != TOPO_L_NONE, "every cell parsed");
            check((l->kind == TOPO_L_NV) == (l->nvlinks > 0), "NV<k> has k > 0, others 0");
        }
    int gpus = 0;
    for (int g = 0; g < TOPO_MAX_DEVS; g++)
        if (topo_gpu_dev(&m, g) >= 0) {
            check(m.dev[topo_gpu_dev(&m, g)].kind == TOPO_GPU, "gpu_dev points at a GPU");
            gpus++;
        }
    check(gpus == m.ngpu, "every GPU is reachable by its index");
    topo_analysis an;
    topo_analyse(&m, &an);
    check(an.npairs == m.ngpu * (m.ngpu - 1) / 2, "pairs = n(n-1)/2");
    check(an.nv_pairs + an.pcie_pairs == an.npairs, "every pair is NVLink or PCIe");
    char code[16];
    for (int a = 0; a < m.ndev; a++)
        topo_link_code(&m.link[a][0], code, sizeof code);
    return 0;
}
