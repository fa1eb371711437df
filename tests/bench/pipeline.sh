#!/bin/sh
# pipeline.sh - bench fragment (not a test): chapter 7's pipeline schedules executed on 2 and
# 4 ranks with `--run`, printing the bubble measured from timestamps next to the one the
# schedule predicts (unit costs). Usage: tests/bench/pipeline.sh [BUILD_DIR] [extra flags]
build=${1:-build}; shift 2>/dev/null
bin="$build/mlsys-lab"
[ -x "$bin" ] || { echo "pipeline.sh: $bin not built (make BUILD=$build)" >&2; exit 2; }
# layers big enough that compute, not messaging, dominates a slot
flags="--layers 16 --hidden 256 --batch-size 64 -m 8 $*"
printf '%-6s %-12s %10s %10s %10s\n' ranks schedule measured predicted "time (ms)"
for n in 2 4; do
    "$bin" run ch07/pipeline-schedule-viz --run -P "$n" $flags 2>&1 |
        awk -v n="$n" '
            / on [0-9]+ ranks: / { name = $1 }
            /^bubble: measured/ {
                m = $3; p = $0; sub(/.*predicted /, "", p); sub(/ .*/, "", p)
                t = $0; sub(/.*timestamps, /, "", t); sub(/ ms.*/, "", t)
                printf "%-6s %-12s %10s %10s %10s\n", n, name, m, p, t
            }
            /NOT OK/ { print "gradients differ from the serial model: " $0; bad = 1 }
            END { exit bad }'
done
echo "(predicted: F = B = W = 1 slot; a real backward costs about 2 forwards, and with more"
echo " ranks than cores the ranks share CPUs: read the 4-rank line with nproc=$(nproc) in mind)"
