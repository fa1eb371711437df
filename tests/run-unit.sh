#!/bin/sh
# run-unit.sh - run every Check suite binary; print each suite's result and a total.
# Usage: run-unit.sh BUILD_DIR BIN...
build=$1; shift
export MLSYS_LAB_BIN="$build/mlsys-lab" LANG=C.UTF-8 CK_FORK=yes
fail=0
for t in "$@"; do
    echo "== $(basename "$t")"
    "$t" || fail=1
done
if ls /dev/shm 2>/dev/null | grep -qi mlsys; then
    echo "leftover /dev/shm segments:"; ls /dev/shm | grep -i mlsys; fail=1
fi
exit $fail
