#!/bin/sh
# ddp.sh - chapter 5's DDP engine against the hand-written loop, side by side in one run: a
# 784 -> 2048 -> 2048 -> 10 MLP (5.8 M parameters, 23 MB of gradients) on 2 and 4 ranks.
# Per configuration, from the lab's own table of the median step: the manual loop's step time
# (one blocking all_reduce per tensor after backward), the engine's step time (buckets
# all-reduced during backward), and the share of the all-reduce time hidden behind backward:
# 1 - in sync / alone, where in sync is the engine's wait before the step and alone the same
# buckets' all-reduce time launched after backward (nothing to hide behind), both measured
# by the lab in one run. Reported, never asserted.
# Usage: ddp.sh BUILD_DIR (env DDP_STEPS: steps per method, default 8; DDP_BUCKETS: bucket
# sizes to try, default "25M 4M")
set -u
build=${1:-build}
bin="$build/mlsys-lab"
steps=${DDP_STEPS:-8}
buckets=${DDP_BUCKETS:-"25M 4M"}
if [ ! -x "$bin" ]; then
    echo "ddp.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
row() {     # row FILE NAME COLUMN: a column of the lab's times table (2 step, 6 in sync, 7 alone)
    awk -v n="$2" -v c="$3" '$1 == n && NF == 8 { print $c; exit }' "$1"
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-ddp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "DDP bench: 784-2048-2048-10 MLP, batch 32 per rank, $steps steps per method, $(nproc) cores"
echo "(more ranks than cores oversubscribe: backward and the progress thread then share cores,"
echo " so less of the all-reduce can hide)"
printf '%-6s %-8s %12s %12s %8s %12s %12s %8s\n' ranks bucket "manual ms" "ddp ms" speedup \
    "alone ms" "exposed ms" hidden
for n in 2 4; do
    for b in $buckets; do
        common="run ch05/simple-ddp -w $n --hidden 2048,2048 --max-steps $steps --bucket-size $b --first-bucket 1M"
        if ! "$bin" $common >"$tmp/ov" 2>"$tmp/ov.err"; then
            echo "ddp.sh: the lab failed on $n ranks:" >&2
            cat "$tmp/ov.err" >&2
            exit 1
        fi
        man=$(row "$tmp/ov" manual 2)
        ddp=$(row "$tmp/ov" DDP 2)
        exposed=$(row "$tmp/ov" DDP 6)
        alone=$(row "$tmp/ov" DDP 7)
        awk -v n="$n" -v b="$b" -v m="$man" -v d="$ddp" -v e="$exposed" -v a="$alone" \
            -v s="$steps" 'BEGIN {
            hid = a > 0 ? 100 * (1 - e / a) : 0
            printf "%-6s %-8s %12.3f %12.3f %7.2fx %12.3f %12.3f %7.1f%%\n", n, b, m, d, m / d, \
                a, e, hid }'
    done
done
