#!/bin/sh
# serve.sh - the serving engine's figures, each beside its reference in one run: paged
# decode at batch 16 against the contiguous cache (goal >= 0.9x), the prefix cache on 32
# requests sharing half the context (shared prompt rows cut >= 90 %, TTFT p50 with and
# without), continuous against static batching of 16 staggered requests (TTFT p99 <= 0.5x
# static's, both throughputs) with the cost of a decode step at batch 1, 4 and 16. Figures
# are reported, never asserted. Usage: serve.sh BUILD_DIR (env BENCH_REPEAT, default 3)
set -u
build=${1:-build}
bin="$build/bench/serve_bench"
model=assets/models/model.bin
if [ ! -x "$bin" ]; then
    echo "serve.sh: $bin is not built (make BUILD=$build $bin)" >&2
    exit 1
fi
if [ ! -f "$model" ]; then
    echo "serve.sh: $model is missing" >&2
    exit 1
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=1 "$bin" "$model" "${BENCH_REPEAT:-3}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
