#!/bin/sh
# run_topo.sh - build the topology parser's libFuzzer target with clang and run it for N
# seconds (default 60). Usage: tests/fuzz/run_topo.sh [seconds] [build-dir]. Skips, saying
# why, when clang or libFuzzer is missing. The corpus starts from tests/fixtures/topo; crashes
# land in the build dir and make the script fail.
secs=${1:-60}
build=${2:-build-fuzz}
cd "$(dirname "$0")/../.." || exit 1

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz_topo: skipped: clang not found (apt-get install clang)"; exit 0
fi
probe=$(mktemp -d) || exit 1
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz_topo: skipped: clang cannot link -fsanitize=fuzzer (libFuzzer missing)"; exit 0
fi

out="$build/fuzz-topo"
rm -rf "$out/crashes"
mkdir -p "$out/corpus" "$out/crashes" || exit 1
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -o "$out/fuzz_topo" \
    tests/fuzz/fuzz_topo.c chapters/ch04/topo_parse.c || exit 1
cp tests/fixtures/topo/*.txt "$out/corpus/"
echo "fuzz_topo: running for $secs s"
"$out/fuzz_topo" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -artifact_prefix="$out/crashes/" -print_final_stats=1 "$out/corpus" 2>&1 | tail -n 12
n=$(ls "$out/crashes" | wc -l)
if [ "$n" -ne 0 ]; then
    echo "fuzz_topo: FAILED: $(ls "$out/crashes" | head -5)"; exit 1
fi
echo "fuzz_topo: ok: no crash, no hang, no broken promise"
