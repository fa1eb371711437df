#!/bin/sh
# http.sh - the HTTP server's figures beside the engine's own, in one run: 16 concurrent
# requests with seeded varied output lengths (max_tokens 25..100, ignore_eos) through
# `--serve` and `mlsys-lab loadgen`, server output tokens/s against `generate --batch 16`
# (goal >= 0.9x); and a 1-token non-streamed completion: the server's time beyond the engine
# at p50 (goal <= 1 ms), from the server's own timers (X-Mlsys-Server-Ms minus
# X-Mlsys-Engine-Ms). Reported, never asserted. Usage: http.sh BUILD_DIR (env BENCH_REPEAT)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
repeat=${BENCH_REPEAT:-3}
if [ ! -x "$bin" ]; then
    echo "http.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-httpbench.XXXXXX") || exit 1
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
export OPENBLAS_NUM_THREADS=1
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "== HTTP server (ch08/minimal-inference-server --serve) against the engine"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$bin" run ch08/minimal-inference-server --serve 127.0.0.1:0 --max-num-seqs 16 \
    >"$tmp/server.log" 2>&1 &
pid=$!
port=
i=0
while [ $i -lt 300 ] && [ -z "$port" ]; do
    port=$(sed -n 's/^ready: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/server.log")
    i=$((i + 1)); sleep 0.1
done
if [ -z "$port" ]; then
    echo "http.sh: the server did not start: $(cat "$tmp/server.log")"
    exit 0
fi
url=http://127.0.0.1:$port

# The engine alone: 16 sequences of 100 tokens, prefill and decode (end to end), and the
# server: 16 at once (lengths 25..100), then 64 at 16 at a time (a seat refilled as soon as
# one frees: continuous batching keeps the batch full), answered whole and streamed
r=0
while [ $r -lt "$repeat" ]; do
    "$bin" generate --batch 16 -n 100 --temperature 0 --ignore-eos --prompt "Once upon a time" \
        2>"$tmp/gen.err" >/dev/null
    awk '/^generate:/ { for (i = 1; i <= NF; i++) { if ($i == "prefill") p = $(i + 1);
                                                 if ($i == "steps") d = $(i + 1) }
                        print 16 * 100 / (p / 1000 + d) }' "$tmp/gen.err" >>"$tmp/gen"
    for n in 16 64; do
        "$bin" loadgen --url "$url" --concurrency 16 --requests $n --max-tokens 100 \
            --vary-output --ignore-eos --temperature 0 --seed 1 >"$tmp/lg.out" 2>&1
        awk '/^Output token throughput/ { print $NF }' "$tmp/lg.out" >>"$tmp/srv$n"
    done
    "$bin" loadgen --url "$url" --concurrency 16 --requests 64 --max-tokens 100 \
        --vary-output --ignore-eos --temperature 0 --seed 1 --stream >"$tmp/lg.out" 2>&1
    awk '/^Output token throughput/ { print $NF }' "$tmp/lg.out" >>"$tmp/srvst"
    r=$((r + 1))
done
gen=$(median <"$tmp/gen")
s16=$(median <"$tmp/srv16")
s64=$(median <"$tmp/srv64")
sst=$(median <"$tmp/srvst")
printf '  %-58s %10.0f tokens/s\n' "engine: generate --batch 16 -n 100 (prefill + decode)" "$gen"
printf '  %-58s %10.0f tokens/s  (%.2fx)\n' "server: 16 requests at once, lengths 25..100" "$s16" \
    "$(echo "$s16 $gen" | awk '{ print $1 / $2 }')"
printf '  %-58s %10.0f tokens/s  (%.2fx)\n' "server: 64 requests, 16 at a time, lengths 25..100" \
    "$s64" "$(echo "$s64 $gen" | awk '{ print $1 / $2 }')"
printf '  %-58s %10.0f tokens/s  (%.2fx)\n' "server: the same, streamed (an event per token)" \
    "$sst" "$(echo "$sst $gen" | awk '{ print $1 / $2 }')"

# One token, not streamed, one request at a time: what HTTP adds to the engine's time
"$bin" loadgen --url "$url" --concurrency 1 --requests 300 --max-tokens 1 --temperature 0 \
    >"$tmp/one.out" 2>&1
over=$(awk -F: '/^Median server time - engine/ { print $2 + 0 }' "$tmp/one.out")
cover=$(awk -F: '/^Median client E2EL - engine/ { print $2 + 0 }' "$tmp/one.out")
e2e=$(awk -F: '/^Median E2EL/ { print $2 + 0 }' "$tmp/one.out")
printf '  %-58s %10.3f ms\n' "1-token completion: client end to end, p50" "$e2e"
printf '  %-58s %10.3f ms\n' "  server time beyond the engine (server's timers), p50" "$over"
printf '  %-58s %10.3f ms\n' "  client time beyond the engine (loopback, client), p50" "$cover"
kill -TERM $pid
wait $pid
pid=
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "targets (reported, not asserted):"
echo "$s16 $s64 $gen" | awk '{ a = $1 / $3 >= 0.9 ? "met" : "NOT met";
    b = $2 / $3 >= 0.9 ? "met" : "NOT met";
    printf "  server tokens/s >= 0.9x generate --batch 16: 16 at once %.2fx, %s; 64 at 16 %.2fx, %s\n",
    $1 / $3, a, $2 / $3, b }'
echo "$over" | awk '{ v = $1 <= 1 ? "met" : "NOT met";
    printf "  1-token completion, server time beyond the engine <= 1 ms at p50: %.3f ms, %s\n", $1, v }'
exit 0
