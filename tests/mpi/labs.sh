#!/bin/bash
# labs.sh - every lab that runs on ranks, under --backend mpi, prints what it prints on shm:
# each case runs on 2 and 3 ranks (small sizes) on both backends and the outputs are
# compared line by line once the timings are masked (times, rates, ratios of times, the
# PIDs, the backend's own name; a case masks what else its clock decides). The table is the
# issue's list: chapters 1-3, ch04's benchmark, the DDP labs (ZeRO stages, buckets), train-lm,
# the three tensor-parallel labs, the pipeline schedules run on ranks, PPO on N ranks, RLHF
# colocated and split, the weight update, the inference server on tensor-parallel ranks.
# Usage: tests/mpi/labs.sh [BUILD_DIR] [NAME...]   (NAME: only the cases whose name starts
# so; skips, saying why, when mpirun or the MPI plugin is missing)
build=${1:-build}
shift
only=("$@")
bin=$build/mlsys-lab
. "$(dirname "$0")/../tap.sh"    # ok, bad, finish and their counts
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LANG=C.UTF-8


if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip: mpirun is not on PATH (apt-get install openmpi-bin libopenmpi-dev)"
    finish
fi
[ -x "$bin" ] || { echo "skip: $bin is not built (make BUILD=$build)"; finish; }
if [ ! -f "$build/libmlsys-mpi.so" ]; then
    if command -v mpicc >/dev/null 2>&1; then
        bad "the MPI plugin $build/libmlsys-mpi.so is not built (make BUILD=$build)"
    else
        echo "skip: mpicc is missing, so the MPI plugin cannot be built (apt-get install libopenmpi-dev)"
    fi
    finish
fi
export MLSYS_MPI_PLUGIN=$PWD/$build/libmlsys-mpi.so

. "$(dirname "$0")/mask.sh"    # mask_all and the masks of the families (mask_ddp, ...)

# run_case NAME "RANKS..." MASK LAB ARGS... ({N}, the rank count, in ARGS); with sorted=1
# before it, the lines are compared in sorted order (a lab that prints as events happen)
run_case() {
    local name=$1 ranks=$2 mask=$3 n k
    shift 3
    if [ ${#only[@]} -gt 0 ]; then
        local want=0
        for k in "${only[@]}"; do [[ $name == "$k"* ]] && want=1; done
        [ $want = 1 ] || return 0
    fi
    for n in $ranks; do
        local args=("${@//\{N\}/$n}") t0 t1 t2
        t0=$(date +%s%N)
        timeout -k 5 300 "$bin" run "${args[@]}" >"$tmp/shm" 2>&1
        local rs=$?
        t1=$(date +%s%N)
        timeout -k 5 300 "$bin" run "${args[@]}" --backend mpi >"$tmp/mpi" 2>&1
        local rm=$?
        t2=$(date +%s%N)
        sed -E -e "$mask_all" ${mask:+-e "$mask"} -e 's/ +#/ #/g' "$tmp/shm" >"$tmp/a"
        sed -E -e "$mask_all" ${mask:+-e "$mask"} -e 's/ +#/ #/g' "$tmp/mpi" >"$tmp/b"
        if [ -n "${sorted:-}" ]; then      # lines in the clock's order: compared as a set
            sort "$tmp/a" -o "$tmp/a"
            sort "$tmp/b" -o "$tmp/b"
        fi
        local what="$name on $n ranks: $(wc -l <"$tmp/a") lines as on shm (shm $(( (t1 - t0) / 1000000 )) ms, mpi $(( (t2 - t1) / 1000000 )) ms)"
        if [ $rs -eq 0 ] && [ $rm -eq 0 ] && [ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b"; then
            ok "$what"
        else
            { echo "mlsys-lab run ${args[*]} [--backend mpi]: exit status shm $rs, mpi $rm";
              diff "$tmp/a" "$tmp/b"; [ $rm -ne 0 ] && tail -5 "$tmp/mpi"; } >"$tmp/d"
            bad "$name on $n ranks" "$tmp/d"
        fi
    done
}

run_case hello "2 3" "" ch01/hello-distributed -w {N}
run_case send-recv "2 3" "" ch02/send-recv-basic -w {N}
# the stages print as their micro-batches arrive: the order is the clock's, the lines are not
sorted=1 run_case pipeline-simulation "2 3" 's/ +@ #ms$//' ch02/pipeline-simulation -w {N} -m 3 \
    --hidden-size 16 --batch-size 4
run_case async-communication "2" 's/= [0-9.]+ x max/= # x max/; s/, [0-9.]+ x their/, # x their/' \
    ch02/async-communication --size 256K --work 2
run_case collective-cheatsheet "2 3" "" ch03/collective-cheatsheet -w {N}
run_case distributed-mean "2 3" "" ch03/distributed-mean -w {N}
run_case distributed-softmax "2 3" "" ch03/distributed-softmax -w {N}
# every figure of the benchmark is a time; what the clock does not decide is its check and
# its layout (the faster algorithm, and whether the model agrees, are the clock's)
run_case benchmark-algorithms "2 3" '/^[0-9.]+ [KMG]?B +[0-9]+ /s/^([0-9.]+ [KMG]?B +[0-9]+) .* (ok|WRONG[^ ]*) +([a-z_]+)$/\1 \2 \3/
/^[0-9.]+ [KMG]?B +[0-9.]+ +[0-9.]+ +(ring|tree) +(ring|tree)$/d
/^  -> |^Measured: |^Model and measurement agree/d' \
    ch04/benchmark-algorithms -w {N} --sizes 1K,64K -i 2 --alpha 10 --beta 5
run_case simple-ddp "2 3" "$mask_ddp" ch05/simple-ddp -w {N} --max-steps 3 --hidden 64 \
    --bucket-size 16K --first-bucket 4K
run_case "simple-ddp --zero 1" "2 3" "$mask_ddp" ch05/simple-ddp -w {N} --max-steps 3 \
    --hidden 64 --zero 1 --optim adamw
run_case "simple-ddp --zero 2" "2 3" "$mask_ddp" ch05/simple-ddp -w {N} --max-steps 3 \
    --hidden 64 --zero 2
run_case "simple-ddp --zero 3" "2 3" "$mask_ddp" ch05/simple-ddp -w {N} --max-steps 3 \
    --hidden 64 --zero 3 --no-overlap
run_case gradient-sync-visualizer "2 3" "" ch05/gradient-sync-visualizer -w {N}
run_case train-lm "2 3" "" ch05/train-lm -w {N} --steps 3 --batch 6 --seq-len 16 --dim 16 \
    --layers 1 --heads 2 --kv-heads 1 --hidden 32 --out "$tmp/lm"
# tp-linear's layer is 8 wide: T of 1, 2, 4 or 8
run_case tp-linear "2 4" "" ch06/tp-linear -t {N}
run_case tp-mlp "2 3" "$mask_tp" ch06/tp-mlp -t {N} -H 48
run_case tp-attention "2 3" "" ch06/tp-attention -t {N} -H 48 --heads 6
run_case pipeline-schedule-viz "2 3" "$mask_pp" \
    ch07/pipeline-schedule-viz --run -P {N} -m 4 --layers 6 --hidden 32 --batch-size 8
run_case ppo-cartpole "2 3" 's/^( +[0-9]+ +[0-9]+ +[-0-9.]+ .*) +[0-9]+$/\1 #/' \
    ch12/ppo-cartpole -w {N} --total-steps 768 --num-envs 6 --num-steps 64 --print-every 1
run_case "rlhf-loop colocated" "2 3" "$mask_rlhf" ch13/rlhf-loop -w {N} --iterations 2 \
    --prompts 12 --rm-steps 5
run_case "rlhf-loop split" "2 3" "$mask_rlhf" ch13/rlhf-loop -w {N} --placement split \
    --iterations 2 --prompts 12 --rm-steps 5
# the server on tensor-parallel ranks: the model's 4 heads and 2 key/value heads split over 2
# (tests/mpi/tp_serve.sh holds it to T = 1's outputs and serves HTTP on both backends)
run_case minimal-inference-server "2" 's/ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+  / # # #  /
s/\(([0-9.]+%)\)$/(#%)/
s/(p50|p90|p99) +[0-9.]+/\1 #/g' \
    ch08/minimal-inference-server -t {N} --temperature 0 --num-requests 6
run_case weight-update-demo "2 3" 's/^( +[0-9]+ [KMG]iB +#ms) .*/\1/
s/^( +[0-9]+ [KMG]iB +[0-9]+ +[0-9]+) .*/\1/' \
    ch14/weight-update-demo -w {N} --measure-bytes 64K --iters 1 --bucket-size 64K
finish
