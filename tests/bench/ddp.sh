#!/bin/sh
# ddp.sh - chapter 5's DDP engine against the hand-written loop, side by side in one run: a
# 784 -> 2048 -> 2048 -> 10 MLP (5.8 M parameters, 23 MB of gradients) on 2 and 4 ranks.
# Per configuration: the manual loop's step time (one blocking all_reduce per tensor after
# backward), the engine's step time (buckets all-reduced during backward), and the share of
# all-reduce time hidden behind backward: 1 - exposed / alone, where exposed is the engine's
# wait before the step and alone the same buckets' all-reduce time with --no-overlap
# (launched after backward, nothing to hide behind). Reported, never asserted.
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
field() {   # field FILE PREFIX: the "X ms per step" number of the line starting with PREFIX
    sed -n "s/^$2.*steps, \([0-9.]*\) ms per step.*/\1/p" "$1" | head -1
}
waitms() {  # the DDP wait, in ms for the whole run
    sed -n 's/.*waiting for all-reduces \([0-9.]*\) ms.*/\1/p' "$1" | head -1
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
        if ! "$bin" $common >"$tmp/ov" 2>"$tmp/ov.err" ||
            ! "$bin" $common --no-overlap >"$tmp/no" 2>"$tmp/no.err"; then
            echo "ddp.sh: the lab failed on $n ranks:" >&2
            cat "$tmp/ov.err" "$tmp/no.err" >&2
            exit 1
        fi
        man=$(field "$tmp/ov" "Manual - Total sync time")
        ddp=$(field "$tmp/ov" "DDP - Total epoch time")
        exposed=$(waitms "$tmp/ov")
        alone=$(waitms "$tmp/no")
        awk -v n="$n" -v b="$b" -v m="$man" -v d="$ddp" -v e="$exposed" -v a="$alone" \
            -v s="$steps" 'BEGIN {
            hid = a > 0 ? 100 * (1 - e / a) : 0
            printf "%-6s %-8s %12.2f %12.2f %7.2fx %12.2f %12.2f %7.1f%%\n", n, b, m, d, m / d, \
                a / s, e / s, hid }'
    done
done
