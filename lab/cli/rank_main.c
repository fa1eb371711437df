/* rank_main.c - mlsys-lab-rank, the program each rank of a lab's job runs (`mlsys-lab-rank
 * worker LAB FLAGS`, what `mlsys-lab worker` does): the labs and the runtime without the front
 * end, so a rank starts as a small C program does. It links no terminal, Markdown or HTTP
 * library; OpenBLAS, libmicrohttpd and hwloc are loaded (dlopen) by the code that needs them.
 * The launchers run it when it sits next to mlsys-lab, else `mlsys-lab worker`. */
#include "../job/runner.h"
#include "../../core/nn/nn.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    nn_gemm_start(argv);    /* BLAS threads and the GEMM kernel, once, before anything else */
    if (argc < 3 || strcmp(argv[1], "worker") != 0) {
        fprintf(stderr, "usage: mlsys-lab-rank worker LAB [flags] (the launcher starts it; "
                "run a lab with mlsys-lab run LAB)\n");
        return 2;
    }
    const lab *l = lab_find(argv[2]);
    if (!l || (!l->rank_main && !l->main)) {
        fprintf(stderr, "mlsys-lab: unknown lab '%s' (see `mlsys-lab list`)\n", argv[2]);
        return 2;
    }
    return runner_worker(l, argc - 3, argv + 3);
}
