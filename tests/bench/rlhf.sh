#!/bin/sh
# rlhf.sh - timing, not a test: ch13/rlhf-loop's seconds per iteration and the share of each
# phase (generate, score, advantage, train, sync), colocated against split on 2 ranks and on
# one rank, side by side with one reward model (trained once here); then the split weight
# sync's bandwidth beside `mlsys-lab bench broadcast` at its bucket and whole sizes. Printed,
# never asserted, with the load average. Usage: tests/bench/rlhf.sh BUILD_DIR [ITERATIONS (10)]
set -u
build=${1:-build}
iters=${2:-10}
bin="$build/mlsys-lab"
if [ ! -x "$bin" ]; then
    echo "rlhf.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo
echo "RLHF loop (ch13/rlhf-loop, PPO, 32 problems per iteration, $iters iterations)"
"$bin" train --reward-model --out "$tmp" --quiet >/dev/null 2>&1 ||
    { echo "rlhf.sh: the reward model did not train" >&2; exit 1; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
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
