#!/bin/sh
# startup.sh - does a lab process start like a C program? Side by side in one run,
# alternating, with the load average printed: a 4-rank hello from start to exit against
# `mpirun --mca pml ob1 -np 4` running an MPI hello (goal: ours <= 0.1x); `generate -n 127
# --temperature 0` on the shipped model as a whole process (CPU seconds, start to exit)
# against llama2.c's run.c built with -Ofast (goal: >= 1.0x run.c's speed) and its decode
# loop alone (goal: >= 1.2x); then each Part II lab on 2 ranks under --backend mpi beside shm
# (a table, no goal). Figures are reported, never asserted.
# Usage: startup.sh BUILD_DIR   (env BENCH_ROUNDS: alternating rounds, default 10;
# LLAMA2C_DIR: a clone of karpathy/llama2.c, default BUILD_DIR/bench/llama2.c)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
rounds=${BENCH_ROUNDS:-10}
here=$(dirname "$0")
llama=${LLAMA2C_DIR:-$build/bench/llama2.c}
if [ ! -x "$bin" ]; then
    echo "startup.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-startup.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$build/bench"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# cpu_of: a command's wall, user and system seconds to the microsecond (tests/bench/cpu_of.c)
cpu_of="$build/bench/cpu_of"
cc -O2 -std=c11 -o "$cpu_of" "$here/cpu_of.c" || exit 1
# one measurement of "$@" appended to file $1: "WALL CPU" (CPU = user + system); 1 on failure
measure() {
    out=$1
    shift
    r=$("$cpu_of" "$@") || return 1
    echo "$r" | awk '{ printf "%.6f %.6f\n", $1, $2 + $3 }' >>"$out"
}
col() { awk -v k="$1" '{ print $k }' "$2" | median; }

echo "==== start-up (load average $(load), $(nproc) cores, $rounds rounds alternating)"

# ---- a 4-rank hello: our launcher against mpirun ----
mpirun_flags="--oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader"
[ "$(id -u)" = 0 ] && mpirun_flags="--allow-run-as-root $mpirun_flags"
have_mpi=0
if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 &&
    mpicc -O2 -o "$build/bench/mpi_hello" "$here/mpi_hello.c" 2>"$tmp/cc.err"; then
    have_mpi=1
fi
: >"$tmp/h.ours"
: >"$tmp/h.mpi"
i=0
while [ $i -lt "$rounds" ]; do
    measure "$tmp/h.ours" "$bin" run ch01/hello-distributed --world-size 4
    # shellcheck disable=SC2086
    [ $have_mpi = 1 ] && measure "$tmp/h.mpi" mpirun $mpirun_flags -np 4 "$build/bench/mpi_hello"
    i=$((i + 1))
done
ho=$(col 1 "$tmp/h.ours")
hoc=$(col 2 "$tmp/h.ours")
echo "hello, 4 ranks, start to exit (median of $rounds; CPU = user + system of every process):"
printf '  %-60s %8.1f ms wall %8.1f ms CPU\n' "mlsys-lab run ch01/hello-distributed -w 4" \
    "$(echo "$ho" | awk '{ print $1 * 1000 }')" "$(echo "$hoc" | awk '{ print $1 * 1000 }')"
if [ $have_mpi = 1 ]; then
    hm=$(col 1 "$tmp/h.mpi")
    hmc=$(col 2 "$tmp/h.mpi")
    printf '  %-60s %8.1f ms wall %8.1f ms CPU\n' "mpirun --mca pml ob1 -np 4 mpi_hello" \
        "$(echo "$hm" | awk '{ print $1 * 1000 }')" "$(echo "$hmc" | awk '{ print $1 * 1000 }')"
    awk -v o="$ho" -v m="$hm" 'BEGIN { r = o / m;
        printf "  ours / mpirun: %.3fx wall (goal <= 0.1x): %s\n", r, (r <= 0.1) ? "met" : "NOT met" }'
else
    echo "  mpirun: skipped (no mpirun or mpicc: apt-get install openmpi-bin libopenmpi-dev)"
fi

# ---- generate against llama2.c's run.c ----
model=assets/models/model.bin
tok=assets/models/tokenizer.bin
prompt="Once upon a time"
echo
echo "generate -n 127 --temperature 0 on $model, whole process (median of $rounds, load $(load)):"
have_run=0
if [ -f "$llama/run.c" ] && cc -Ofast -o "$build/bench/llama2c_run" "$llama/run.c" -lm 2>"$tmp/cc.err"; then
    have_run=1
fi
if [ ! -f "$model" ]; then
    echo "  skipped: $model is missing"
else
    : >"$tmp/g.ours"
    : >"$tmp/g.inv"
    : >"$tmp/g.run"
    : >"$tmp/g.rate"
    : >"$tmp/g.rrate"
    i=0
    while [ $i -lt "$rounds" ]; do
        measure "$tmp/g.ours" "$bin" generate --model "$model" --tokenizer "$tok" \
            --prompt "$prompt" -n 127 --temperature 0 --ignore-eos
        measure "$tmp/g.inv" env MLSYS_GEMM=invariant "$bin" generate --model "$model" \
            --tokenizer "$tok" --prompt "$prompt" -n 127 --temperature 0 --ignore-eos
        "$bin" generate --model "$model" --tokenizer "$tok" --prompt "$prompt" -n 127 \
            --temperature 0 --ignore-eos 2>&1 >/dev/null |
            sed -n 's/.*= \([0-9.]*\) tokens\/s.*/\1/p' >>"$tmp/g.rate"
        if [ $have_run = 1 ]; then
            measure "$tmp/g.run" "$build/bench/llama2c_run" "$model" -z "$tok" -n 127 -t 0 \
                -i "$prompt"
            "$build/bench/llama2c_run" "$model" -z "$tok" -n 127 -t 0 -i "$prompt" 2>&1 |
                sed -n 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p' >>"$tmp/g.rrate"
        fi
        i=$((i + 1))
    done
    go=$(col 2 "$tmp/g.ours")
    gi=$(col 2 "$tmp/g.inv")
    printf '  %-60s %8.1f ms CPU %8.1f ms wall\n' "mlsys-lab generate (OpenBLAS, the default)" \
        "$(echo "$go" | awk '{ print $1 * 1000 }')" "$(col 1 "$tmp/g.ours" | awk '{ print $1 * 1000 }')"
    printf '  %-60s %8.1f ms CPU %8.1f ms wall\n' "MLSYS_GEMM=invariant mlsys-lab generate (no OpenBLAS loaded)" \
        "$(echo "$gi" | awk '{ print $1 * 1000 }')" "$(col 1 "$tmp/g.inv" | awk '{ print $1 * 1000 }')"
    if [ $have_run = 1 ]; then
        gr=$(col 2 "$tmp/g.run")
        printf '  %-60s %8.1f ms CPU %8.1f ms wall\n' "llama2.c run.c (cc -Ofast)" \
            "$(echo "$gr" | awk '{ print $1 * 1000 }')" "$(col 1 "$tmp/g.run" | awk '{ print $1 * 1000 }')"
        awk -v o="$go" -v i="$gi" -v r="$gr" 'BEGIN { x = r / o;
            printf "  whole process, run.c CPU / ours: %.2fx (goal >= 1.0x): %s; with the "\
                   "invariant kernel %.2fx\n", x, (x >= 1.0) ? "met" : "NOT met", r / i }'
        awk -v o="$(median <"$tmp/g.rate")" -v r="$(median <"$tmp/g.rrate")" 'BEGIN {
            printf "  decode loop, ours %.0f tokens/s against run.c %.0f: %.2fx (goal >= 1.2x): %s\n",
                   o, r, o / r, (o / r >= 1.2) ? "met" : "NOT met" }'
    else
        echo "  llama2.c: skipped (no $llama/run.c: git clone https://github.com/karpathy/llama2.c $llama)"
    fi
fi

# ---- each Part II lab on 2 ranks, shm and --backend mpi ----
echo
echo "Part II labs on 2 ranks, start to exit, median of 3 alternating (load $(load)):"
printf '  %-64s %9s %9s %7s\n' "lab" "shm ms" "mpi ms" "mpi/shm"
part2() {
    : >"$tmp/p.shm"
    : >"$tmp/p.mpi"
    for k in 1 2 3; do
        measure "$tmp/p.shm" "$bin" run "$@"
        if [ $have_mpi = 1 ] && [ -f "$build/libmlsys-mpi.so" ]; then
            measure "$tmp/p.mpi" "$bin" run "$@" --backend mpi
        fi
    done
    s=$(col 1 "$tmp/p.shm" | awk '{ print $1 * 1000 }')
    if [ -s "$tmp/p.mpi" ]; then
        m=$(col 1 "$tmp/p.mpi" | awk '{ print $1 * 1000 }')
        printf '  %-64s %9.0f %9.0f %6.1fx\n' "$*" "$s" "$m" "$(awk -v a="$m" -v b="$s" 'BEGIN { print a / b }')"
    else
        printf '  %-64s %9.0f %9s %7s\n' "$*" "$s" "n/a" ""
    fi
}
part2 ch05/simple-ddp -w 2 --max-steps 8 --hidden 256
part2 ch05/simple-ddp -w 2 --max-steps 8 --zero 2
part2 ch05/gradient-sync-visualizer -w 2
part2 ch05/train-lm -w 2 --steps 20 --out "$tmp/lm"
part2 ch06/tp-linear -t 2
part2 ch06/tp-mlp -t 2
part2 ch06/tp-attention -t 2
part2 ch07/pipeline-schedule-viz --run -P 2 -m 8
echo "load average at the end: $(load)"
