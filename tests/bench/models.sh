#!/bin/sh
# models.sh - the second half of `make bench`: the numerics and the parallel training of
# Parts II and III, each figure next to its reference in the same run: the chapter-5 MLP step
# (ours, reference kernel and OpenBLAS, against PyTorch on one thread), DDP's buckets and
# overlap against the hand-written loop, pipeline bubbles measured against predicted, the
# language model's training against PyTorch with its 2-rank scaling, decode throughput, and
# chapter 11's speculative and JSON-constrained decoding (decode.sh), chapter 10's step phases
# with and without the overlap scheduler (sched.sh), and PPO on CartPole
# against PyTorch (steps/s, steps and seconds to a return of 475).
# Figures are reported, never asserted. Usage: models.sh BUILD_DIR
set -u
build=${1:-build}
here=$(dirname "$0")
section() { printf '\n==== %s (load average %s)\n' "$1" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

section "MLP training step 784-256-10, batch 32, one thread (samples/s)"
if [ -x "$build/bench/nn_mlp" ]; then
    OPENBLAS_NUM_THREADS=1 "$build/bench/nn_mlp" 2
else
    echo "skipped: $build/bench/nn_mlp is not built"
fi
if [ -x /usr/bin/python3 ]; then
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/torch_mlp.py" 2
else
    echo "skipped: no /usr/bin/python3 for the PyTorch side"
fi

section "DDP: buckets and overlap against one all-reduce per tensor"
sh "$here/ddp.sh" "$build"

section "Pipeline schedules on real ranks: measured bubble against predicted"
sh "$here/pipeline.sh" "$build"

section "PPO on CartPole: ch12/ppo-cartpole against PyTorch (CleanRL's defaults)"
sh "$here/ppo.sh" "$build"

for s in train generate serve decode sched tp; do
    if [ -f "$here/$s.sh" ]; then
        section "The lab's language model: $s"
        sh "$here/$s.sh" "$build"
    fi
done
exit 0
