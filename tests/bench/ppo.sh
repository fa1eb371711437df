#!/bin/sh
# ppo.sh - timing, not a test: ch12/ppo-cartpole against the same PPO in PyTorch
# (tests/bench/torch_ppo.py, the same settings, one thread), side by side, seed by seed:
# environment steps per second (goal: >= 5x PyTorch's), the step at which the mean return of
# the last 100 episodes first reaches 475 (CartPole-v1's "solved"; within 500k steps) and the
# wall time to it. Then our 2-rank run of seed 1. Figures are printed, never asserted, with
# the load average, since a shared machine moves every one of them.
# Usage: tests/bench/ppo.sh BUILD_DIR [SEEDS (1 2 3)] [TOTAL_STEPS (500000)]
set -u
build=${1:-build}
seeds=${2:-"1 2 3"}
total=${3:-500000}
here=$(dirname "$0")
bin="$build/mlsys-lab"
if [ ! -x "$bin" ]; then
    echo "ppo.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
# the PyTorch side: Debian's python3-torch on OpenBLAS, installed when missing
if ! OPENBLAS_NUM_THREADS=1 /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    sh "$here/../deps.sh" python3-torch libopenblas0 || echo "ppo.sh: no PyTorch: its side is skipped"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# ours: "<steps/s> <solved step or -> <seconds to it or -> <final line>"
ours() {
    out=$("$bin" run ch12/ppo-cartpole --seed "$1" --total-steps "$total" --print-every 100000 \
          -w "${2:-1}" 2>&1)
    sps=$(echo "$out" | sed -n 's/.* steps in .* s on .*: \([0-9]*\) steps\/s$/\1/p')
    solved=$(echo "$out" | sed -n 's/.*averaged >= 475 at step \([0-9]*\), after \([0-9.]*\) s$/\1 \2/p')
    echo "${sps:-0} ${solved:-- -}"
}

printf '\n%-6s %-6s %10s %14s %12s\n' seed side "steps/s" "steps to 475" "s to 475"
for s in $seeds; do
    set -- $(ours "$s")
    o_sps=$1 o_step=$2 o_sec=$3
    printf '%-6s %-6s %10s %14s %12s\n' "$s" ours "$o_sps" "$o_step" "$o_sec"
    t=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/torch_ppo.py" --seeds "$s" \
        --total-steps "$total" 2>&1 | tail -1)
    case "$t" in
    skipped*) printf '%-6s %-6s %s\n' "$s" torch "$t"; t_sps=0 ;;
    *)
        t_sps=$(echo "$t" | sed -n 's/^torch seed [0-9]*: *\([0-9]*\) steps\/s.*/\1/p')
        t_solved=$(echo "$t" | sed -n 's/.*solved at step \([0-9]*\) after \([0-9.]*\) s.*/\1 \2/p')
        set -- ${t_solved:-- -}
        printf '%-6s %-6s %10s %14s %12s\n' "$s" torch "${t_sps:-0}" "$1" "$2"
        ;;
    esac
    awk -v o="${o_sps:-0}" -v t="${t_sps:-0}" 'BEGIN {
        if (o > 0 && t > 0) printf "%-6s ratio  %9.1fx  (goal >= 5x)\n", "", o / t }'
done
set -- $(ours 1 2)
printf '\n2 ranks, seed 1: %s steps/s, solved at step %s after %s s\n' "$1" "$2" "$3"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
