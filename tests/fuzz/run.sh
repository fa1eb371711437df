#!/bin/sh
# run.sh - build the Markdown reader's libFuzzer target with clang and run it for N seconds
# (default 60), then the model and tokenizer readers' (run_llm.sh) for as long.
# Usage: tests/fuzz/run.sh [seconds] [build-dir]. Skips, saying why, when clang
# or libFuzzer is missing (without md4c it fuzzes the raw fallback). Crashes, hangs (10 s) and
# leaks land in BUILD/fuzz/crashes and fail the run; the corpus starts from pieces of the
# shipped chapters so the fuzzer begins with real Markdown.
secs=${1:-60}
build=${2:-build-fuzz}
cd "$(dirname "$0")/../.." || exit 1

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: skipped: clang not found (apt-get install clang)"; exit 0
fi
probe=$(mktemp -d) || exit 1
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz: skipped: clang cannot link -fsanitize=fuzzer (libFuzzer missing)"; exit 0
fi
md4c=
if pkg-config --exists md4c 2>/dev/null; then
    md4c="-DHAVE_MD4C $(pkg-config --libs md4c)"
else
    echo "fuzz: md4c not found: fuzzing the raw-text fallback only"
fi

rm -rf "$build/fuzz/crashes"
mkdir -p "$build/fuzz/corpus" "$build/fuzz/crashes" || exit 1
# shellcheck disable=SC2086
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -o "$build/fuzz/fuzz_md" \
    tests/fuzz/fuzz_md.c lab/ui/md.c lab/ui/grid.c $md4c || exit 1
# Seed with the chapters cut into pieces of whole lines (<= 2 KB each): small inputs keep the
# fuzzer fast, and every construct the chapters use is in some piece.
for f in assets/chapters/*.md; do
    [ -f "$f" ] && split -C 2000 "$f" "$build/fuzz/corpus/seed-$(basename "$f" .md)-"
done
echo "fuzz: running fuzz_md for $secs s"
"$build/fuzz/fuzz_md" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -artifact_prefix="$build/fuzz/crashes/" -print_final_stats=1 "$build/fuzz/corpus" 2>&1 |
    tail -n 25
status=$(ls "$build/fuzz/crashes" | wc -l)
if [ "$status" -ne 0 ]; then
    echo "fuzz: FAILED: $(ls "$build/fuzz/crashes" | head -5)"; exit 1
fi
echo "fuzz: ok: no crash, no hang"
# the model's and the tokenizer's file readers: a target of their own, for as long
sh tests/fuzz/run_llm.sh "$secs" "$build" || exit 1
# the HTTP server's request parser, for as long
sh tests/fuzz/run_serve.sh "$secs" "$build" || exit 1
