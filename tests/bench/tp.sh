#!/bin/sh
# tp.sh - tensor parallelism on CPU ranks: the lab's model decoding 8 sequences on T = 1 and
# T = 2 ranks (tests/bench/tp_decode.c: rank 0 leads, the others follow), tokens per
# CPU-second and the share of the decode in the layers' all-reduces, side by side in one run
# with the load printed. No goal: on CPUs that share memory the split only adds work; the
# table shows the price that GPUs pay back (each holds and reads 1/T of the weights).
# Usage: tp.sh BUILD_DIR
set -u
build=${1:-build}
model=assets/models/model.bin
tok=assets/models/tokenizer.bin
if [ ! -x "$build/bench/tp_decode" ]; then
    echo "skipped: $build/bench/tp_decode is not built (make bench)"
    exit 0
fi
if [ ! -f "$model" ]; then
    echo "skipped: $model is missing"
    exit 0
fi
echo "decode of 8 sequences x 64 tokens, one forward per step (load $(cut -d' ' -f1-3 /proc/loadavg)):"
"$build/bench/tp_decode" "$model" "$tok" 1 2 1 2
