#!/bin/sh
# overlap.sh - ch02/async-communication's physical bound, measured: a sender that overlaps its
# send with computation cannot finish before the longer of the two. Prints each run's
# t_overlapped / max(t_comm, t_compute) per rank (reported, not asserted: a ratio well under 1
# means the lab times something it does not overlap, e.g. a first copy into a cold buffer).
# Usage: overlap.sh BUILD_DIR (env BENCH_REPEAT: runs, default 5)
set -u
bin="${1:-build}/mlsys-lab"
runs=${BENCH_REPEAT:-5}
echo
echo "ch02/async-communication --work 1: t_overlapped / max(t_comm, t_compute), $runs runs" \
    "(load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
i=0
while [ $i -lt "$runs" ]; do
    "$bin" run ch02/async-communication --work 1 2>/dev/null | awk '
        /t_comm = / { r = $2; sub(/\(.*/, "", r)
            for (k = 1; k <= NF; k++) {
                if ($k == "t_comm") c = $(k + 2) + 0
                if ($k == "t_compute") p = $(k + 2) + 0
                if ($k == "t_overlapped") o = $(k + 2) + 0 }
            m = c > p ? c : p
            printf "  rank %s: %.3f ms over max(%.3f, %.3f) = %.2f%s\n", r, o, c, p,
                   (m > 0 ? o / m : 0), ((m > 0 && o < 0.9 * m) ? "  (under 0.9: look)" : "") }'
    i=$((i + 1))
done
