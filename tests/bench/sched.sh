#!/bin/sh
# sched.sh - chapter 10's scheduling overhead on the serving engine: a decode step's time per
# phase, and the step time with and without the overlap scheduler per batch size, measured
# side by side in one run (the lab alternates the two engines, BENCH_REPEAT rounds each),
# with the engine's own scheduler and with 1 ms of busy work added to every scheduling (a
# Python scheduler's order of cost). Figures are reported, never asserted.
# Usage: sched.sh BUILD_DIR (env BENCH_REPEAT: alternate runs per point, default 3)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
repeat=${BENCH_REPEAT:-3}
if [ ! -x "$bin" ]; then
    echo "sched.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
for f in assets/models/model.bin assets/models/tokenizer.bin; do
    if [ ! -f "$f" ]; then
        echo "skipped: $f is not there"
        exit 0
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-schedbench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

for cost in 0 1000; do
    echo "ch10/scheduling-overhead-benchmark --batch-sizes 1,2,4,8,16 --steps 48 --rounds $repeat" \
        "--schedule-cost-us $cost (load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
    "$bin" run ch10/scheduling-overhead-benchmark --batch-sizes 1,2,4,8,16 --steps 48 \
        --rounds "$repeat" --schedule-cost-us "$cost" >"$tmp/out" 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; exit 1; }
    sed -n '/^WITHOUT OVERLAP/,/^WHAT IF/p' "$tmp/out" | sed '$d' | sed 's/^/  /'
done
exit 0
