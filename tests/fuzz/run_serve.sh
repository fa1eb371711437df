#!/bin/sh
# run_serve.sh - build the HTTP server's request-parser libFuzzer target (fuzz_serve.c, with
# core/ compiled by clang and cJSON) and run it for N seconds (default 60). Usage:
# tests/fuzz/run_serve.sh [seconds] [build-dir]. Skips, saying why, when clang, libFuzzer or
# cJSON is missing. The corpus starts from valid and broken requests; crashes, hangs (10 s),
# leaks and broken promises land in BUILD/fuzz-serve/crashes and fail the run.
secs=${1:-60}
build=${2:-build-fuzz}
cd "$(dirname "$0")/../.." || exit 1

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz_serve: skipped: clang not found (apt-get install clang)"; exit 0
fi
if ! pkg-config --exists libcjson; then
    echo "fuzz_serve: skipped: cJSON not found (apt-get install libcjson-dev)"; exit 0
fi
probe=$(mktemp -d) || exit 1
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz_serve: skipped: clang cannot link -fsanitize=fuzzer (libFuzzer missing)"; exit 0
fi

out="$build/fuzz-serve"
rm -rf "$out/crashes"
mkdir -p "$out/corpus" "$out/crashes" || exit 1
# shellcheck disable=SC2046
clang -g -O1 -std=c11 -D_GNU_SOURCE -DHAVE_CJSON $(pkg-config --cflags libcjson) \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o "$out/fuzz_serve" tests/fuzz/fuzz_serve.c \
    $(find core -name '*.c' ! -path 'core/mpi/*' ! -path 'core/nccl/*' | sort) \
    $(pkg-config --libs libcjson) -lm -lpthread || exit 1

# Seeds: a byte for the route (bit 0 chat, bit 1 model checked), then a body
i=0
for s in '\000{"prompt":"Once upon a time","max_tokens":16,"temperature":0}' \
         '\003{"model":"mlsys-lab","messages":[{"role":"user","content":"hi"}],"stream":true}' \
         '\002{"prompt":["x"],"stop":["a","b"],"seed":3,"top_p":0.5,"n":1}' \
         '\001{"messages":[{"role":"user","content":[{"type":"text","text":"t"}]}]}' \
         '\000{"prompt":"x","response_format":{"type":"json_object"},"stream_options":{}}' \
         '\000{"prompt":' '\000[1,2,3]' '\002{"model":"gpt-4","prompt":"x"}'; do
    printf "$s" > "$out/corpus/seed$i"
    i=$((i + 1))
done
"$out/fuzz_serve" "$out/corpus" -max_total_time="$secs" -timeout=10 -max_len=4096 \
    -artifact_prefix="$out/crashes/" -print_final_stats=1 2>"$out/log.txt"
rc=$?
tail -n 3 "$out/log.txt"
if [ $rc -ne 0 ] || [ -n "$(ls "$out/crashes" 2>/dev/null)" ]; then
    echo "fuzz_serve: FAILED (see $out/log.txt, $out/crashes)"; exit 1
fi
echo "fuzz_serve: ok ($secs s)"
