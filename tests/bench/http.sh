#!/bin/sh
# http.sh - what the HTTP face costs over the engine, per CPU-second of the serving process,
# side by side in one run (medians of BENCH_REPEAT alternating rounds; the CPU figures hold on
# a shared machine, where wall time counts other people's jobs):
#   the engine alone   generate --batch 16 -n 100: tokens over the CPU time of its prefill and
#                      decode (its own report line)
#   the server         streamed, 64 requests 16 at a time, equal lengths (max_tokens 100,
#                      ignore_eos; loadgen): tokens over the server process's CPU time while
#                      they run (its process_cpu_seconds_total), goal >= 0.9x; sixteen at
#                      once, goal >= 0.9x; the same two with --stream-interval 4 (an event
#                      per 4 tokens) and 64 answered whole
#   a mixed workload   on a --speculative 4 server, 64 streamed requests 16 at a time (curl):
#                      half response_format json_object, a quarter greedy (they speculate), a
#                      quarter sampled; goal >= 0.85x the tokens per CPU-second of 64 plain
#                      sampled requests on the same server
#   one token          a non-streamed 1-token completion: the server's time beyond the engine
#                      at p50 (goal <= 1 ms), from its own timers
# Reported, never asserted. Usage: http.sh BUILD_DIR (env BENCH_REPEAT, default 3)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
repeat=${BENCH_REPEAT:-3}
if [ ! -x "$bin" ]; then
    echo "http.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
if ! command -v curl >/dev/null 2>&1; then
    echo "http.sh: skipped: curl not found (apt-get install curl)"
    exit 0
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
# the server's own CPU seconds, every thread's, to the nanosecond (its /metrics)
cpu_s() { curl -s "$url/metrics" | awk '/^process_cpu_seconds_total / { print $2 }'; }

# A server with these extra flags; sets pid and url (or exits after one line).
server_up() {
    "$bin" run ch08/minimal-inference-server --serve 127.0.0.1:0 --max-num-seqs 16 "$@" \
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
}
server_down() {
    kill -TERM $pid
    wait $pid
    pid=
}

# loadgen against the server, its tokens per CPU-second of the server appended to FILE
lg_rate() {
    file=$1; shift
    c0=$(cpu_s)
    "$bin" loadgen --url "$url" --max-tokens 100 --ignore-eos --temperature 0 --seed 1 "$@" \
        >"$tmp/lg.out" 2>&1
    c1=$(cpu_s)
    awk -v c0="$c0" -v c1="$c1" '/^Total generated tokens/ {
        if (c1 > c0) print $NF / (c1 - c0) }' "$tmp/lg.out" >>"$file"
}

echo "== the HTTP server against the engine, per CPU-second of the serving process"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/gen"
for f in s64 s16 s64i s16i w64 mixed.r plain.r; do : >"$tmp/$f"; done
r=0
while [ $r -lt "$repeat" ]; do
    "$bin" generate --batch 16 -n 100 --temperature 0 --ignore-eos --prompt "Once upon a time" \
        2>"$tmp/gen.err" >/dev/null
    sed -n 's/^generate: \([0-9]*\) x \([0-9]*\) tokens.*CPU \([0-9.]*\) ms in all.*/\1 \2 \3/p' \
        "$tmp/gen.err" | awk '{ print $1 * $2 / ($3 / 1000) }' >>"$tmp/gen"
    server_up
    lg_rate "$tmp/s64" --concurrency 16 --requests 64 --stream
    lg_rate "$tmp/s16" --concurrency 16 --requests 16 --stream
    lg_rate "$tmp/w64" --concurrency 16 --requests 64
    server_down
    server_up --stream-interval 4
    lg_rate "$tmp/s64i" --concurrency 16 --requests 64 --stream
    lg_rate "$tmp/s16i" --concurrency 16 --requests 16 --stream
    server_down
    r=$((r + 1))
done
gen=$(median <"$tmp/gen")
row() {   # label, file: the median and its ratio to the engine alone
    v=$(median <"$2")
    printf '  %-62s %8.0f tokens/CPU-s  (%.2fx)\n' "$1" "$v" "$(echo "$v $gen" | awk '{ print $1 / $2 }')"
}
printf '  %-62s %8.0f tokens/CPU-s\n' "engine: generate --batch 16 -n 100 (prefill + decode)" "$gen"
row "server: 64 requests, 16 at a time, streamed (an event per token)" "$tmp/s64"
row "server: 16 at once, streamed" "$tmp/s16"
row "server: 64, 16 at a time, streamed, --stream-interval 4" "$tmp/s64i"
row "server: 16 at once, streamed, --stream-interval 4" "$tmp/s16i"
row "server: 64, 16 at a time, answered whole" "$tmp/w64"

# the mixed workload: curl clients, 16 at a time, each a streamed answer with its usage
prompts="Once upon a time|Tom saw a|One day, the little|The dog|She said|Lily and Tom|A big red|The sun was"
body() {   # kind index
    p=$(echo "$prompts" | cut -d'|' -f$(($2 % 8 + 1)))
    tail='"stream":true,"stream_options":{"include_usage":true}'
    case $1 in
    json) echo "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0.8,\"seed\":$2,$tail,\"response_format\":{\"type\":\"json_object\"}}" ;;
    greedy) echo "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0,\"ignore_eos\":true,$tail}" ;;
    plain) echo "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0.8,\"seed\":$2,\"ignore_eos\":true,$tail}" ;;
    esac
}
mkdir -p "$tmp/mixed" "$tmp/plain"
i=0
while [ $i -lt 64 ]; do
    body plain $i >"$tmp/plain/$i"
    case $((i % 4)) in 0|1) k=json ;; 2) k=greedy ;; *) k=plain ;; esac
    body $k $i >"$tmp/mixed/$i"
    i=$((i + 1))
done
curl_rate() {   # dir file
    rm -f "$1"/*.out
    c0=$(cpu_s)
    ls "$1" | grep -v out | xargs -P 16 -I{} sh -c "curl -sN -H 'Content-Type: application/json' \
        --data-binary @$1/{} $url/v1/completions >$1/{}.out"
    c1=$(cpu_s)
    cat "$1"/*.out | grep -o '"completion_tokens":[0-9]*' | cut -d: -f2 |
        awk -v c0="$c0" -v c1="$c1" '{ s += $1 } END { if (c1 > c0) print s / (c1 - c0) }' >>"$2"
}
server_up --speculative 4
r=0
while [ $r -lt "$repeat" ]; do
    curl_rate "$tmp/plain" "$tmp/plain.r"
    curl_rate "$tmp/mixed" "$tmp/mixed.r"
    r=$((r + 1))
done
curl -s "$url/metrics" >"$tmp/metrics"
server_down
pl=$(median <"$tmp/plain.r")
mx=$(median <"$tmp/mixed.r")
printf '  %-62s %8.0f tokens/CPU-s\n' "--speculative 4 server: 64 plain sampled, 16 at a time" "$pl"
printf '  %-62s %8.0f tokens/CPU-s  (%.2fx plain)\n' \
    "  mixed: 1/2 json_object, 1/4 greedy (speculating), 1/4 sampled" "$mx" \
    "$(echo "$mx $pl" | awk '{ print $1 / $2 }')"
awk '/^mlsys_spec_(rounds|draft_tokens|accepted_tokens)_total / { v[$1] = $2 }
     END { if (v["mlsys_spec_draft_tokens_total"] > 0)
        printf "    speculation: %d rounds, %.2f of %d drafts kept\n", v["mlsys_spec_rounds_total"],
               v["mlsys_spec_accepted_tokens_total"] / v["mlsys_spec_draft_tokens_total"],
               v["mlsys_spec_draft_tokens_total"] }' "$tmp/metrics"

# One token, not streamed, one request at a time: what HTTP adds to the engine's time
server_up
"$bin" loadgen --url "$url" --concurrency 1 --requests 300 --max-tokens 1 --temperature 0 \
    >"$tmp/one.out" 2>&1
server_down
over=$(awk -F: '/^Median server time - engine/ { print $2 + 0 }' "$tmp/one.out")
e2e=$(awk -F: '/^Median E2EL/ { print $2 + 0 }' "$tmp/one.out")
printf '  %-62s %8.3f ms\n' "1-token completion: client end to end, p50" "$e2e"
printf '  %-62s %8.3f ms\n' "  server time beyond the engine (server's timers), p50" "$over"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "targets (reported, not asserted):"
awk -v g="$gen" -v a="$(median <"$tmp/s64")" -v b="$(median <"$tmp/s16")" \
    -v c="$(median <"$tmp/s64i")" -v d="$(median <"$tmp/s16i")" -v m="$mx" -v p="$pl" -v o="$over" 'BEGIN {
    f = "  %-58s %.2fx, %s\n";
    printf f, "streamed, 64 at 16 >= 0.9x the engine alone:", a / g, (a / g >= 0.9) ? "met" : "NOT met";
    printf f, "streamed, 16 at once >= 0.9x:", b / g, (b / g >= 0.9) ? "met" : "NOT met";
    printf f, "  with --stream-interval 4, 64 at 16:", c / g, (c / g >= 0.9) ? "met" : "NOT met";
    printf f, "  with --stream-interval 4, 16 at once:", d / g, (d / g >= 0.9) ? "met" : "NOT met";
    printf f, "mixed >= 0.85x plain:", m / p, (m / p >= 0.85) ? "met" : "NOT met";
    printf "  %-58s %.3f ms, %s\n", "1-token completion, server beyond the engine <= 1 ms p50:", o,
           (o <= 1) ? "met" : "NOT met" }'
exit 0
