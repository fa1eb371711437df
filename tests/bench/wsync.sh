#!/bin/sh
# wsync.sh - the RLHF weight sync (core/rl/wsync.c) against `mlsys-lab bench broadcast` at the
# same size, side by side: ch14/weight-update-demo hands the actor's weights (1 copy 3.8 MiB,
# 16 copies 60 MiB) from rank 0 to the others per bucket size, then the bench broadcasts the
# same bytes; alternating, median of BENCH_REPEAT (3) runs. Reported, not asserted (goal:
# sync >= 0.8x the bench's bandwidth). Usage: wsync.sh BUILD_DIR (env WSYNC_BUCKETS)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
repeat=${BENCH_REPEAT:-3}
buckets=${WSYNC_BUCKETS:-"1M,16M,64M"}
if [ ! -x "$bin" ]; then
    echo "wsync.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-wsync.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "== weight sync (rl_wsync, ch14/weight-update-demo) against mlsys-lab bench broadcast"
echo "   sync: rl_wsync (header, verdict all-reduce, buckets) called back to back, then a barrier;"
echo "   average per call, median of the lab's 3 rounds of 10 calls (5 at 60 MiB). lab bcast: the"
echo "   lab's plain broadcast of the same bytes timed the same way in the same run. bench: mlsys-lab"
echo "   bench broadcast --sizes BYTES (average of n back-to-back calls, max over ranks)."
echo "   GB/s = bytes / time per call; each figure the median of $repeat runs, alternating."
echo "   $(nproc) cores, load average $(load) at the start"
printf '%-5s %9s %7s %10s %11s %11s %12s %12s\n' ranks size bucket "sync GB/s" \
    "lab bcast" "bench GB/s" "sync/bench" "goal >= 0.8"
for n in 2 4; do
    for copies in 1 16; do
        its=10
        [ "$copies" -gt 1 ] && its=5
        : >"$tmp/bench.t"
        for b in $(echo "$buckets" | tr ',' ' '); do : >"$tmp/s.$b"; : >"$tmp/l.$b"; done
        bytes=""
        k=0
        while [ $k -lt "$repeat" ]; do
            if ! "$bin" run ch14/weight-update-demo -w "$n" --copies "$copies" --iters "$its" \
                --measure-bytes 4M --bucket-size "$buckets" >"$tmp/demo.out" 2>"$tmp/demo.err"; then
                echo "wsync.sh: the demo failed on $n ranks, $copies copies:" >&2
                tail -n 5 "$tmp/demo.err" >&2
                k=$((k + 1))
                continue
            fi
            # "  assets/models/model.bin: 47 tensors, 3.8 MiB" gives no exact size: 3954176 B
            # per copy is the model's parameters (the RoPE tables are not sent)
            bytes=$((3954176 * copies))
            awk '/MEASURED HERE: the actor/ { on = 1 } on && NF == 11 && $3 ~ /^[0-9]+$/ {
                    print $1 $2, $7, $10 }' "$tmp/demo.out" | while read -r b s l; do
                bb=$(echo "$b" | sed 's/KiB/K/; s/MiB/M/; s/GiB/G/')
                [ -f "$tmp/s.$bb" ] && echo "$s" >>"$tmp/s.$bb" && echo "$l" >>"$tmp/l.$bb"
            done
            "$bin" bench broadcast --sizes "$bytes" -n "$its" --warmup_iters 3 --world-size "$n" \
                --datatype float -o sum -c 1 2>/dev/null |
                awk -v b="$bytes" '!/^#/ && NF >= 14 && $1 == b && $9 == 0 { print b / $6 / 1e3 }' \
                    >>"$tmp/bench.t"
            k=$((k + 1))
        done
        bg=$(median <"$tmp/bench.t")
        for b in $(echo "$buckets" | tr ',' ' '); do
            s=$(median <"$tmp/s.$b")
            l=$(median <"$tmp/l.$b")
            awk -v n="$n" -v sz="${bytes:-0}" -v b="$b" -v s="$s" -v l="$l" -v g="$bg" 'BEGIN {
                r = (g + 0 > 0 && s != "nan") ? s / g : -1
                if (r >= 0) r = sprintf("%.2f", r) + 0      # the verdict as the ratio prints
                printf "%-5s %8.1fM %7s %10s %11s %11.4g %11s %12s\n", n, sz / 1048576, b, s, l,
                       g, r < 0 ? "n/a" : sprintf("%.2fx", r),
                       r < 0 ? "n/a" : (r >= 0.8 ? "met" : "NOT met") }'
        done
    done
done
echo "   load average at the end: $(load)"
exit 0
