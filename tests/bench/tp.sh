#!/bin/sh
# tp.sh - tensor parallelism on CPU ranks: T = 2 beside T = 1, side by side in one run
# (BENCH_REPEAT alternating rounds, medians; default 3), the load printed. No goal: on CPU
# cores that share one memory the split only adds work (two all-reduces per layer and a
# message per step); the figures are the price that GPUs pay back (each holds and reads 1/T
# of the weights and of the KV cache).
#   the server     ch08/minimal-inference-server --serve -t T: 64 requests, 8 at a time
#                  (loadgen, greedy, 64 tokens each, ignore_eos): tokens per CPU-second of the
#                  whole job (every rank and the runner, from /proc while it serves)
#   its engine     the same lab's workload, -t T (16 requests of 64 tokens, 8 seats): tokens
#                  per CPU-second of the whole process tree, and the all-reduces' share of
#                  rank 0's forward time as the lab reports it
#   the steps      tests/bench/tp_decode: 8 sequences decoded, rank 0 leading by hand
# Usage: tp.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/mlsys-lab
repeat=${BENCH_REPEAT:-3}
model=assets/models/model.bin
tok=assets/models/tokenizer.bin
here=$(dirname "$0")
if [ ! -x "$bin" ]; then
    echo "tp.sh: skipped: $bin is not built (make BUILD=$build all)"
    exit 0
fi
if [ ! -f "$model" ]; then
    echo "tp.sh: skipped: $model is missing"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-tpbench.XXXXXX") || exit 1
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
cpu_of=$tmp/cpu_of
cc -O2 -std=c11 -o "$cpu_of" "$here/cpu_of.c" || exit 1
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
hz=$(getconf CLK_TCK)
# CPU seconds so far of a process and every descendant (utime + stime of the live ones)
tree_cpu() {
    all="$1 $(pgrep -P "$1" | tr '\n' ' ')"
    for p in $(pgrep -P "$1"); do all="$all $(pgrep -P "$p" | tr '\n' ' ')"; done
    for p in $all; do sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }'; done |
        awk -v hz="$hz" '{ s += $1 } END { printf "%.3f\n", s / hz }'
}

server_rate() {   # T, appends tokens per CPU-second to $tmp/srv.T
    "$bin" run ch08/minimal-inference-server --serve 127.0.0.1:0 -t "$1" --max-num-seqs 8 \
        >"$tmp/server.log" 2>&1 </dev/null &
    pid=$!
    port=
    i=0
    while [ $i -lt 300 ] && [ -z "$port" ]; do
        port=$(sed -n 's/^ready: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/server.log")
        i=$((i + 1)); sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "tp.sh: the server (-t $1) did not start: $(cat "$tmp/server.log")"
        kill -9 $pid 2>/dev/null; pid=
        return
    fi
    c0=$(tree_cpu $pid)
    "$bin" loadgen --url "http://127.0.0.1:$port" --requests 64 --concurrency 8 \
        --max-tokens 64 --ignore-eos --temperature 0 >"$tmp/lg.out" 2>&1
    c1=$(tree_cpu $pid)
    awk -v c0="$c0" -v c1="$c1" '/^Total generated tokens/ { if (c1 > c0) print $NF / (c1 - c0) }' \
        "$tmp/lg.out" >>"$tmp/srv.$1"
    kill -TERM $pid
    wait $pid
    pid=
}

engine_rate() {   # T: tokens per CPU-second and the all-reduce share, appended
    cost=$(CPU_OF_OUT="$tmp/wl.out" "$cpu_of" "$bin" run ch08/minimal-inference-server -t "$1" \
        --num-requests 16 --batch-size 8 --max-tokens 64 --fixed-output --temperature 0) || return
    toks=$(sed -n 's/^  tokens generated *\([0-9]*\).*/\1/p' "$tmp/wl.out")
    echo "$cost $toks" | awk '{ print $4 / ($2 + $3) }' >>"$tmp/eng.$1"
    sed -n 's/.*forwards. [0-9.]* ms on rank 0 (\([0-9.]*\)%)$/\1/p' "$tmp/wl.out" >>"$tmp/share.$1"
}

echo "== tensor parallelism on CPU ranks, T = 2 beside T = 1 (medians of $repeat alternating rounds)"
echo "load average before: $(load) on $(nproc) cores"
export MLSYS_GEMM=${MLSYS_GEMM:-invariant}
for t in 1 2; do : >"$tmp/srv.$t"; : >"$tmp/eng.$t"; : >"$tmp/share.$t"; done
round=0
while [ "$round" -lt "$repeat" ]; do
    for t in 1 2; do
        engine_rate $t
        if command -v curl >/dev/null 2>&1; then server_rate $t; fi
    done
    round=$((round + 1))
done
printf '  %-58s %12s %12s\n' "" "T = 1" "T = 2"
cell() { median <"$1" | awk -v f="$2" '{ if ($1 == "nan") print "-"; else printf f "\n", $1 }'; }
row() {   # label, file stem, format
    printf "  %-58s %12s %12s\n" "$1" "$(cell "$tmp/$2.1" "$3")" "$(cell "$tmp/$2.2" "$3")"
}
row "server: 64 requests 8 at a time, tokens per CPU-second" srv "%.0f"
row "its engine (the lab's workload), tokens per CPU-second" eng "%.0f"
row "  the all-reduces' share of rank 0's forward time" share "%.1f%%"
echo "load average after: $(load); GEMM kernel $MLSYS_GEMM (as the equality tests)"
if [ -x "$build/bench/tp_decode" ]; then
    echo "the steps alone: 8 sequences x 64 tokens, one forward per step (load $(load)):"
    "$build/bench/tp_decode" "$model" "$tok" 1 2 1 2
else
    echo "(the steps alone: $build/bench/tp_decode is not built: make bench)"
fi
