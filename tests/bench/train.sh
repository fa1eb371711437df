#!/bin/sh
# train.sh - timing, not a test: `mlsys-lab train` on the shipped model's configuration.
# Training tokens/s on one rank against the same architecture and batch in PyTorch (one
# thread, OpenBLAS: tests/bench/torch_llama.py), the 2-rank scaling efficiency (2 ranks on
# twice the batch: tok/s(2) / (2 x tok/s(1))) and the peak RSS the trainer reports. Targets
# (>= 1.5x torch, efficiency >= 0.85) are printed, never asserted; the load average is
# printed too, since a shared machine moves every figure.
# Usage: tests/bench/train.sh BUILD_DIR [STEPS (40)] [TORCH_SECONDS (20)]
set -u
build=${1:-build}
steps=${2:-40}
tsec=${3:-20}
bin="$build/mlsys-lab"
if [ ! -x "$bin" ]; then
    echo "train.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-bench-train.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cfg="--dim 128 --layers 5 --heads 4 --kv-heads 2 --hidden 352 --seq-len 128"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# one run: prints the trainer's "done:" line; tok/s is the 4th |-separated field
ours() {
    name=$1
    shift
    "$bin" train $cfg --steps "$steps" --warmup 10 --eval-every 0 --eval-batches 1 \
        --out "$tmp/$name" "$@" 2>&1 | grep '^done:' || echo "done: failed"
}
tps_of() { sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p'; }

line1=$(ours r1 -w 1 --batch 16)
echo "ours, 1 rank,  batch 16: $line1"
line2=$(ours r2 -w 2 --batch 32)
echo "ours, 2 ranks, batch 32: $line2"
tline=$(/usr/bin/python3 tests/bench/torch_llama.py --seconds "$tsec" --batch 16 2>&1 | tail -1)
echo "$tline"
blas=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo "?")
echo "torch's BLAS: $blas"

t1=$(echo "$line1" | tps_of)
t2=$(echo "$line2" | tps_of)
tt=$(echo "$tline" | sed -n 's/.* \([0-9]*\) tok\/s$/\1/p')
awk -v t1="${t1:-0}" -v t2="${t2:-0}" -v tt="${tt:-0}" 'BEGIN {
    if (t1 > 0 && tt > 0)
        printf "speed-up over torch, 1 rank: %.2fx (target >= 1.5)\n", t1 / tt;
    else
        print "speed-up over torch: not measured";
    if (t1 > 0 && t2 > 0)
        printf "2-rank scaling efficiency: %.2f (target >= 0.85)\n", t2 / (2 * t1);
}'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
