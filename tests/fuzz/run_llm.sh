#!/bin/sh
# run_llm.sh - build the model and tokenizer readers' libFuzzer target (fuzz_llm.c, with the
# whole core compiled by clang so that the fuzzer sees its branches) and run it for N seconds
# (default 60). Usage: tests/fuzz/run_llm.sh [seconds] [build-dir]. Skips, saying why, when
# clang or libFuzzer is missing. The corpus starts from a tiny model, its tokenizer and a
# training checkpoint made by BUILD/mlsys-lab when it is there; crashes, hangs (10 s), leaks
# and broken promises land in BUILD/fuzz-llm/crashes and fail the run.
secs=${1:-60}
build=${2:-build-fuzz}
cd "$(dirname "$0")/../.." || exit 1

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz_llm: skipped: clang not found (apt-get install clang)"; exit 0
fi
probe=$(mktemp -d) || exit 1
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz_llm: skipped: clang cannot link -fsanitize=fuzzer (libFuzzer missing)"; exit 0
fi

out="$build/fuzz-llm"
rm -rf "$out/crashes"
mkdir -p "$out/corpus" "$out/crashes" || exit 1
# shellcheck disable=SC2046
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -o "$out/fuzz_llm" tests/fuzz/fuzz_llm.c \
    $(find core -name '*.c' ! -path 'core/mpi/*' ! -path 'core/nccl/*' | sort) \
    -lm -lpthread || exit 1

# Seeds: a tiny model (selector 0), its tokenizer (1; and 2 with the vocabulary announced),
# a checkpoint (3: a 2-byte offset, model.train, model.bin) and a reward model (4: the magic,
# the model's header and weights, a head of dim + 1 floats)
if [ -x "$build/mlsys-lab" ]; then
    s="$probe/seed"
    mkdir -p "$s"
    if "$build/mlsys-lab" model init "$s/m.bin" --tokenizer "$s/t.bin" --dim 16 --layers 1 \
           --heads 2 --kv-heads 1 --hidden 32 --vocab 270 --seq-len 8 >/dev/null 2>&1 &&
       "$build/mlsys-lab" train --dim 16 --layers 1 --heads 2 --kv-heads 1 --hidden 32 \
           --seq-len 8 --vocab 270 --batch 2 --steps 1 --data-bytes 8K --eval-batches 1 \
           --quiet --out "$s/ck" >/dev/null 2>&1; then
        { printf '\000'; cat "$s/m.bin"; } > "$out/corpus/seed-model"
        { printf '\001'; cat "$s/t.bin"; } > "$out/corpus/seed-tokenizer"
        { printf '\002\016\001\000\000'; cat "$s/t.bin"; } > "$out/corpus/seed-tokenizer-270"
        n=$(wc -c < "$s/ck/model.bin")
        lo=$((n % 256)); hi=$((n / 256 % 256))
        { printf '\003'; printf "\\$(printf %03o "$lo")\\$(printf %03o "$hi")";
          cat "$s/ck/model.train" "$s/ck/model.bin"; } > "$out/corpus/seed-ckpt"
        { printf '\004MLSYSRM1'; cat "$s/m.bin"; head -c 68 /dev/zero; } > "$out/corpus/seed-rm"
    else
        echo "fuzz_llm: no seeds (could not make a tiny model with $build/mlsys-lab)"
    fi
fi
echo "fuzz_llm: running for $secs s"
"$out/fuzz_llm" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
    -artifact_prefix="$out/crashes/" -print_final_stats=1 "$out/corpus" 2>&1 | tail -n 12
n=$(ls "$out/crashes" | wc -l)
if [ "$n" -ne 0 ]; then
    echo "fuzz_llm: FAILED: $(ls "$out/crashes" | head -5)"; exit 1
fi
echo "fuzz_llm: ok: no crash, no hang, no leak, no broken promise"
