#!/bin/sh
# rlhf.sh - timing, not a test: ch13/rlhf-loop at -w 1 against its PyTorch peer
# (tests/bench/torch_rlhf.py: the same four roles, sizes and updates, one thread), alternating
# run by run, seconds and CPU seconds per iteration (medians after the first iteration), with
# the peer's rows padded to the batch's longest (--row-len 0, as TRL pads; the goal is ours
# >= 1.5x faster) and to our former fixed 24 tokens; then the share of each phase, colocated
# against split on 2 and 3 ranks, and the split weight sync's bandwidth beside `mlsys-lab bench
# broadcast`. Printed, never asserted, with the load average.
# The peer needs Debian's python3-torch (on libopenblas0), installed here when missing as
# root or through sudo (tests/deps.sh); without it the peer's side is skipped.
# Usage: tests/bench/rlhf.sh BUILD_DIR [ITERATIONS (8)] [ROUNDS (3)]
set -u
build=${1:-build}
iters=${2:-8}
rounds=${3:-3}
here=$(dirname "$0")
repo=$(cd "$here/../.." && pwd)
bin="$build/mlsys-lab"
if [ ! -x "$bin" ]; then
    echo "rlhf.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo
echo "RLHF loop (ch13/rlhf-loop, PPO, 32 problems per iteration, $iters iterations a run)"
"$bin" train --reward-model --out "$tmp" --quiet >/dev/null 2>&1 ||
    { echo "rlhf.sh: the reward model did not train" >&2; exit 1; }
torch=1
if ! OPENBLAS_NUM_THREADS=1 /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    sh "$here/../deps.sh" python3-torch libopenblas0 ||
        echo "rlhf.sh: no PyTorch (apt-get install python3-torch libopenblas0): its side is skipped"
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 -c "import torch" >/dev/null 2>&1 || torch=0
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# "<s/it> <cpu s>": medians over the iterations after the first
ours() {
    "$bin" run ch13/rlhf-loop --reward-model "$tmp/reward.bin" --iterations "$iters" -w 1 2>&1 |
        awk '/^ +[0-9]+ +[-+][0-9]/ && $1 > 1 { w[++n] = $7; c[n] = $8 }
             function med(a,   i, j, t) {
                 for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) {
                     t = a[j]; a[j] = a[j-1]; a[j-1] = t }
                 return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
             END { if (n) printf "%.4f %.4f\n", med(w), med(c); else print "0 0" }'
}
peer() {
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/torch_rlhf.py" --repo "$repo" \
        --reward-model "$tmp/reward.bin" --iterations "$iters" --row-len "$1" 2>&1 |
        sed -n 's/^median after the first: \([0-9.]*\) s per iteration, \([0-9.]*\) s of CPU$/\1 \2/p'
}

if [ "$torch" = 1 ]; then
    a=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/torch_rlhf.py" --repo "$repo" --verify)
    b=$("$bin" generate --prompt "Once upon" -n 20 --temperature 0 2>/dev/null)
    [ "$a" = "$b" ] && same="the same greedy tokens" || same="DIFFERENT greedy text: '$a'"
    echo "the peer loads the shipped model: $same as mlsys-lab generate ('Once upon', 20 tokens)"
    printf '%-6s %17s %17s %17s\n' round "ours s (cpu)" "torch rows=longest" "torch rows=24"
    : >"$tmp/ratios"
    r=1
    while [ "$r" -le "$rounds" ]; do
        set -- $(ours) $(peer 0) $(peer 24)
        printf '%-6s %8s (%6s) %8s (%6s) %8s (%6s)\n' "$r" "$1" "$2" "${3:-?}" "${4:-?}" \
            "${5:-?}" "${6:-?}"
        [ $# -eq 6 ] && echo "$*" >>"$tmp/ratios"
        r=$((r + 1))
    done
    awk 'function med(a, n,   i, j, t) {
             for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) {
                 t = a[j]; a[j] = a[j-1]; a[j-1] = t }
             return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
         $1 > 0 && $2 > 0 { n++; w0[n] = $3 / $1; c0[n] = $4 / $2; w24[n] = $5 / $1; c24[n] = $6 / $2 }
         END { if (!n) { print "no ratio: a side failed"; exit }
               printf "torch / ours, median of %d rounds: rows to the longest %.2fx (CPU %.2fx; goal >= 1.5x), rows of 24 %.2fx (CPU %.2fx)\n",
                      n, med(w0, n), med(c0, n), med(w24, n), med(c24, n) }' "$tmp/ratios"
fi

echo
printf '%-22s %8s  %s\n' placement "s/iter" "phases (generate score advantage train sync)"
for p in "colocated 1" "colocated 2" "split 2" "split 3"; do
    set -- $p
    out=$("$bin" run ch13/rlhf-loop --reward-model "$tmp/reward.bin" --iterations "$iters" \
          --placement "$1" -w "$2" 2>&1)
    sit=$(echo "$out" | sed -n 's/.*; \([0-9.]*\) s per iteration$/\1/p')
    ph=$(echo "$out" | sed -n 's/^Phases, all iterations[^:]*: //p')
    printf '%-22s %8s  %s\n' "$1, $2 rank(s)" "${sit:-fail}" "${ph:-}"
    [ "$p" = "split 2" ] && sync=$(echo "$out" | sed -n 's/^Weight sync: //p')
done
echo "weight sync, split on 2 ranks: ${sync:-none}"
echo "mlsys-lab bench broadcast -w 2 at the bucket (256 KiB) and the whole (4 MiB) size:"
"$bin" bench broadcast --sizes 256K,4M -w 2 2>&1 | grep -v '^#' |
    awk 'NF > 8 { printf "  %10d B: %9.2f us, algbw %6.2f GB/s\n", $1, $6, $7 }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit 0
