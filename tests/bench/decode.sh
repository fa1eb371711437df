#!/bin/sh
# decode.sh - chapter 11's decoding figures on the shipped models, each measured side by side
# in one run: speculative decoding with k = 4, greedy (tokens per target forward, goal >= 2.0
# on corpus-like prompts; wall-time speed-up against the target alone, goal >= 1.3x; the
# cost of a round in target steps, which says why), under the batch-invariant kernel and
# under OpenBLAS, with how many tokens differ from the target's own greedy decoding; then the JSON
# mask's cost per token against the decode time (goal <= 20 %). Figures are reported, never
# asserted. Usage: decode.sh BUILD_DIR (env BENCH_REPEAT: runs per figure, median, default 3)
set -u
build=${1:-build}
bin="$build/mlsys-lab"
repeat=${BENCH_REPEAT:-3}
if [ ! -x "$bin" ]; then
    echo "decode.sh: $bin is not built (make BUILD=$build all)" >&2
    exit 1
fi
for f in assets/models/model.bin assets/models/draft.bin assets/models/tokenizer.bin; do
    if [ ! -f "$f" ]; then
        echo "skipped: $f is not there"
        exit 0
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlsys-decodebench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# speculative k=4 greedy: one lab run measures the target alone and speculation on the same
# 40 prompts x 100 tokens; the median over $repeat runs of each figure
spec() {
    gemm=$1
    : >"$tmp/tpf"; : >"$tmp/sp"; : >"$tmp/cpu"; : >"$tmp/acc"
    i=0
    while [ $i -lt "$repeat" ]; do
        "$bin" run ch11/speculative-demo -k 4 --prompts 40 --target-length 100 --sweep 0 --gemm "$gemm" \
            >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
        sed -n 's/^tokens per target forward \([0-9.]*\),.*/\1/p' "$tmp/out" >>"$tmp/tpf"
        sed -n 's/.*speed-up \([0-9.]*\)x (CPU time \([0-9.]*\)x).*/\1/p' "$tmp/out" >>"$tmp/sp"
        sed -n 's/.*speed-up \([0-9.]*\)x (CPU time \([0-9.]*\)x).*/\2/p' "$tmp/out" >>"$tmp/cpu"
        sed -n 's/^acceptance a = \([0-9.]*\) .*/\1/p' "$tmp/out" >>"$tmp/acc"
        i=$((i + 1))
    done
    printf '  %-5s acceptance %s, tokens per target forward %s (goal >= 2.0), speed-up %sx wall, %sx CPU (goal >= 1.3x)\n' \
        "$gemm" "$(median <"$tmp/acc")" "$(median <"$tmp/tpf")" "$(median <"$tmp/sp")" "$(median <"$tmp/cpu")"
    sed -n '/^cost of a round/,/^  one row costs/p' "$tmp/out" | sed 's/^ */        /'
    sed -n '/^exactness/,/^$/p' "$tmp/out" | sed 's/^ */        /'
}

echo "speculative decoding, k = 4, greedy, target model.bin + draft draft.bin, 40 corpus prompts x 100 tokens, median of $repeat (load: $(cut -d' ' -f1-3 /proc/loadavg))"
spec invariant
spec blas

# how often OpenBLAS's rounding changes a greedy token: 100 prompts, every k from 1 to 8
"$bin" run ch11/speculative-demo -k 4 --prompts 100 --target-length 100 --sweep 8 --gemm blas \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
echo "  k sweep under blas, 100 prompts x 100 tokens (equal: tokens equal to the target's own greedy decoding):"
sed -n '/^  k   accept/,/^$/p' "$tmp/out" | sed 's/^/    /'
"$bin" run ch11/speculative-demo -k 4 --prompts 40 --target-length 100 --sweep 8 --gemm invariant \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
echo "  k sweep under the batch-invariant kernel, 40 prompts x 100 tokens (speed-up: wall time):"
sed -n '/^  k   accept/,/^$/p' "$tmp/out" | sed 's/^/    /'

echo
echo "JSON-constrained decoding, 200 runs (5 prompts x 40 seeds), 48-token budget (load: $(cut -d' ' -f1-3 /proc/loadavg))"
"$bin" run ch11/json-constraint-demo --runs 200 >"$tmp/out" 2>"$tmp/err" || {
    cat "$tmp/err" >&2
    exit 1
}
sed -n '/^valid JSON/,/^  plain mask/p' "$tmp/out" | sed 's/^/  /'
exit 0
