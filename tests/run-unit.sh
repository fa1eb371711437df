#!/bin/sh
# run-unit.sh - run every Check suite binary; print each suite's result and a total.
# Usage: run-unit.sh BUILD_DIR BIN...
build=$1; shift
export MLSYS_LAB_BIN="$build/mlsys-lab" LANG=C.UTF-8 CK_FORK=yes
# one BLAS thread per process from the start, as every program of the lab has (nn_gemm_start):
# suites that never call it must not run OpenBLAS's default of one thread per core
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
fail=0
for t in "$@"; do
    echo "== $(basename "$t")"
    "$t" || fail=1
done
if ls /dev/shm 2>/dev/null | grep -qi mlsys; then
    echo "leftover /dev/shm segments:"; ls /dev/shm | grep -i mlsys; fail=1
fi
exit $fail
