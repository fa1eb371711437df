#!/bin/bash
# tp_serve.sh - ch08/minimal-inference-server on tensor-parallel ranks (-t 2, every layer split
# over two ranks), on shared memory and under --backend mpi, under MLSYS_GEMM=invariant:
#   the workload    the request table (greedy) is T = 1's, lines of times masked
#   the server      chapter 8's eight prompts sent at once (one batch), greedy, 24 tokens each,
#                   answered word for word as the T = 1 server answers them
#   Ctrl-C          SIGINT to the runner: rank 0 drains and stops the other rank, exit 130,
#                   "stopped cleanly", no process of the job left
#   a rank dies     SIGKILL to rank 1 (a follower), then to rank 0 (the leader) of a serving
#                   job: one line naming it, exit 1, no process of the job left
#   a bad T         -t 3 (4 heads, 2 key/value heads): one line, exit 2, no rank started
# The mpi half skips, saying why, when mpirun or the MPI plugin is missing.
# Usage: tests/mpi/tp_serve.sh [BUILD_DIR]
build=${1:-build}
bin=$build/mlsys-lab
. "$(dirname "$0")/../tap.sh"    # ok, bad, finish and their counts
tmp=$(mktemp -d)
runner=
trap '[ -n "$runner" ] && kill -9 $runner 2>/dev/null; rm -rf "$tmp"' EXIT
export LANG=C.UTF-8 MLSYS_GEMM=invariant


[ -x "$bin" ] || { echo "skip: $bin is not built (make BUILD=$build)"; finish; }
if [ ! -f assets/models/model.bin ]; then
    echo "skip: assets/models/model.bin is missing (make assets)"
    finish
fi
backends="shm"
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip (mpi): mpirun is not on PATH (apt-get install openmpi-bin libopenmpi-dev)"
elif [ ! -f "$build/libmlsys-mpi.so" ]; then
    echo "skip (mpi): the MPI plugin $build/libmlsys-mpi.so is not built"
else
    export MLSYS_MPI_PLUGIN=$PWD/$build/libmlsys-mpi.so
    backends="shm mpi"
fi
have_http=1
command -v curl >/dev/null 2>&1 || { echo "skip (server): curl not found"; have_http=0; }

# the processes of a job: whatever carries its command line (ranks, mpirun and its daemons)
job_procs() { pgrep -f -- "$1" | grep -v "^$$\$" || true; }

# start_server LOG ARGS...: the lab serving on a free port in the background; sets runner
# and port (empty when it did not get ready within 60 s)
start_server() {
    local log=$1 i
    shift
    "$bin" run ch08/minimal-inference-server --serve 127.0.0.1:0 "$@" >"$log" 2>&1 </dev/null &
    runner=$!
    port=
    for i in $(seq 600); do
        port=$(sed -n 's/^ready: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$port" ] && return
        kill -0 $runner 2>/dev/null || return
        sleep 0.1
    done
}

# wait_exit: the runner's exit status, within 60 s (124: it did not end)
wait_exit() {
    local i
    for i in $(seq 600); do
        kill -0 $runner 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 $runner 2>/dev/null; then
        kill -9 $runner
        wait $runner 2>/dev/null
        runner=
        return 124
    fi
    wait $runner
    local rc=$?
    runner=
    return $rc
}

# ask FILE: the eight prompts at once, each answer's text on its own line in prompt order
ask() {
    local out=$1 i pids=()
    local prompts=("What is the capital of France?" "Explain quantum computing in simple terms"
        "Write a haiku about programming" "What is machine learning?" "Tell me a joke"
        "How does the internet work?" "What is the meaning of life?"
        "Describe a beautiful sunset")
    for i in "${!prompts[@]}"; do
        curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\":\"mlsys-lab\",\"prompt\":\"${prompts[$i]}\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}" \
            >"$tmp/answer.$i" &
        pids+=($!)
    done
    wait "${pids[@]}"
    : >"$out"
    for i in "${!prompts[@]}"; do
        { cat "$tmp/answer.$i"; echo; } |
            sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p' >>"$out"
        [ -s "$tmp/answer.$i" ] || echo "(no answer)" >>"$out"
    done
}

# ---- a T that does not divide the heads ----
"$bin" run ch08/minimal-inference-server -t 3 >"$tmp/t3" 2>&1
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/t3")" -eq 1 ] &&
    grep -q "tensor-parallel-size 3 must divide the model's 4 heads, 2 key/value heads" "$tmp/t3"; then
    ok "-t 3 refused in one line, exit 2: $(cut -c1-90 "$tmp/t3")..."
else
    bad "-t 3: exit $rc" "$tmp/t3"
fi

# ---- the workload: T = 2 prints T = 1's request table ----
mask='s/[0-9]+\.[0-9]+/#/g; s/ +/ /g'
"$bin" run ch08/minimal-inference-server --temperature 0 --num-requests 6 >"$tmp/w1" 2>&1
rc1=$?
sed -E "$mask" "$tmp/w1" | grep -E '^ [0-9]+ [0-9]+ [0-9]+ (length|stop) ' >"$tmp/w1.table"
for be in $backends; do
    "$bin" run ch08/minimal-inference-server --temperature 0 --num-requests 6 -t 2 \
        --backend $be >"$tmp/w2" 2>&1
    rc2=$?
    sed -E "$mask" "$tmp/w2" | grep -E '^ [0-9]+ [0-9]+ [0-9]+ (length|stop) ' >"$tmp/w2.table"
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(wc -l <"$tmp/w1.table")" -eq 6 ] &&
        cmp -s "$tmp/w1.table" "$tmp/w2.table" &&
        grep -q "^  tensor parallel  *2 ranks: [0-9]* all-reduces" "$tmp/w2"; then
        ok "workload on 2 ranks ($be): the 6 requests' greedy outputs are T = 1's, all-reduces reported"
    else
        { echo "exit T=1 $rc1, T=2 $rc2"; diff "$tmp/w1.table" "$tmp/w2.table"; tail -5 "$tmp/w2"; } >"$tmp/d"
        bad "workload on 2 ranks ($be)" "$tmp/d"
    fi
done

[ $have_http = 1 ] || finish

# ---- the server: T = 1's answers ----
start_server "$tmp/s1"
if [ -z "$port" ] && grep -q "without libmicrohttpd\|without cJSON" "$tmp/s1"; then
    echo "skip (server): $(cat "$tmp/s1")"
    finish
elif [ -z "$port" ]; then
    bad "the T = 1 server did not start" "$tmp/s1"
    finish
fi
ask "$tmp/a1"
kill -TERM $runner
wait_exit

for be in $backends; do
    start_server "$tmp/s2" -t 2 --backend $be
    if [ -z "$port" ]; then
        bad "the T = 2 server ($be) did not start" "$tmp/s2"
        [ -n "$runner" ] && { kill -9 $runner; wait $runner 2>/dev/null; runner=; }
        continue
    fi
    ask "$tmp/a2"
    if [ "$(grep -c . "$tmp/a1")" -eq 8 ] && ! grep -q "no answer" "$tmp/a1" &&
        cmp -s "$tmp/a1" "$tmp/a2"; then
        ok "server on 2 ranks ($be): 8 prompts at once, greedy, word for word T = 1's answers"
    else
        { echo "T = 1:"; cat "$tmp/a1"; echo "T = 2:"; cat "$tmp/a2"; } >"$tmp/d"
        bad "server on 2 ranks ($be): answers differ from T = 1's" "$tmp/d"
    fi
    procs=$(job_procs "minimal-inference-server --serve 127.0.0.1:0 -t 2 --backend $be")
    kill -INT $runner
    wait_exit
    rc=$?
    sleep 0.5
    left=$(job_procs "minimal-inference-server --serve 127.0.0.1:0 -t 2 --backend $be")
    if [ $rc -eq 130 ] && grep -q "^stopped cleanly" "$tmp/s2" && [ -z "$left" ] &&
        [ "$(echo "$procs" | wc -w)" -ge 3 ] && ! grep -q "^mlsys-lab: \|\[rank" "$tmp/s2"; then
        ok "Ctrl-C ($be): rank 0 drained and stopped rank 1, exit 130, nothing left"
    else
        { echo "exit $rc; processes before: $procs; left: $left"; cat "$tmp/s2"; } >"$tmp/d"
        bad "Ctrl-C ($be)" "$tmp/d"
    fi

    # a rank that dies: rank 1 (a follower, waiting for a step), then rank 0 (the leader)
    for victim_rank in 1 0; do
        start_server "$tmp/s3" -t 2 --backend $be
        if [ -z "$port" ]; then
            bad "the T = 2 server ($be) did not start for the kill" "$tmp/s3"
            continue
        fi
        victim=$(pgrep -f -- "worker ch08/minimal-inference-server --serve 127.0.0.1:0 -t 2 --backend $be" |
            while read -r p; do
                grep -qz "^RANK=$victim_rank\$\|^OMPI_COMM_WORLD_RANK=$victim_rank\$" \
                    /proc/$p/environ 2>/dev/null && echo $p
            done | head -1)
        if [ -z "$victim" ]; then
            bad "rank $victim_rank ($be): not found among the job's processes"
            kill -9 $runner; wait $runner 2>/dev/null; runner=
            continue
        fi
        kill -9 "$victim"
        wait_exit
        rc=$?
        sleep 0.5
        left=$(job_procs "minimal-inference-server --serve 127.0.0.1:0 -t 2 --backend $be")
        nerr=$(grep -c "^mlsys-lab: " "$tmp/s3")
        if [ $rc -eq 1 ] && [ -z "$left" ] && [ "$nerr" -eq 1 ] && ! grep -q "^\[rank" "$tmp/s3" &&
            grep -q "^mlsys-lab: ch08/minimal-inference-server: rank $victim_rank .*signal 9" "$tmp/s3"; then
            ok "rank $victim_rank killed ($be): $(grep '^mlsys-lab: ' "$tmp/s3" | cut -c1-80)..., exit 1, nothing left"
        else
            { echo "exit $rc; left: $left"; cat "$tmp/s3"; } >"$tmp/d"
            bad "rank $victim_rank killed ($be)" "$tmp/d"
        fi
    done
done
finish
