#!/bin/sh
# deps_rule_test.sh - proves tests/deps_rule.sh catches what it must: a scratch tree with a
# planted violation of each kind (core/ including lab/ and chapters/, a chapter including
# lab/cli, lab/ui, lab/backend, lab/job) must fail with each FILE:LINE, and the same tree
# without them must pass (lab/lab.h, lab/exercise/ and chapters/common stay allowed). Then
# the same for the built objects: calls through prototypes written by hand (no include) from
# core/ into lab/ and chapters/, from a chapter into lab/ beyond lab/lab.h and lab/exercise/,
# from lab/ into a chapter beyond the table in lab/chapters.c, and between chapters (or from
# chapters/common into one) must each fail with FILE:LINE of the call, the clean ones pass.
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d /tmp/deps_rule_test.XXXXXX) || exit 2
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/core/nn" "$t/chapters/ch01" "$t/chapters/common"
printf '#include "nn.h"\n#include "../mlsys.h"\n' > "$t/core/nn/ok.c"
printf '#include "../lab/lab.h"\n#include "../../lab/exercise/exercise.h"\n' > "$t/chapters/ch01/ok.c"
printf '#include "../common/common.h"\n#include "../../core/nn/nn.h"\n' >> "$t/chapters/ch01/ok.c"
printf '#include "../../lab/lab.h"\n' > "$t/chapters/common/common.h"
sh "$here/deps_rule.sh" "$t" > "$t/out" 2>&1 || { echo "FAIL: a clean tree was refused:"; cat "$t/out"; exit 1; }
printf '/* x */\n#include "../../lab/ui/ui.h"\n' > "$t/core/nn/bad.c"
printf '#include "../../chapters/ch01/x.h"\n' > "$t/core/nn/bad2.h"
printf '#include "../../lab/cli/cli.h"\n#include "../../lab/backend/mpirun.h"\n' > "$t/chapters/ch01/bad.c"
printf '#include "../../lab/lab.h"\n  #  include "../../lab/job/runner.h"\n' >> "$t/chapters/ch01/bad.c"
printf '#include "../../lab/ui/views/blocks.h"\n' > "$t/chapters/common/bad.h"
if sh "$here/deps_rule.sh" "$t" > "$t/out" 2>&1; then
    echo "FAIL: planted violations passed"; cat "$t/out"; exit 1
fi
fail=0
for want in "core/nn/bad.c:2: includes lab/ui/ui.h" "core/nn/bad2.h:1: includes chapters/ch01/x.h" \
            "chapters/ch01/bad.c:1: includes lab/cli/cli.h" \
            "chapters/ch01/bad.c:2: includes lab/backend/mpirun.h" \
            "chapters/ch01/bad.c:4: includes lab/job/runner.h" \
            "chapters/common/bad.h:1: includes lab/ui/views/blocks.h" \
            "deps_rule: 6 includes break the dependency rule"; do
    grep -qF "$want" "$t/out" || { echo "FAIL: no line '$want' in:"; cat "$t/out"; fail=1; }
done
[ "$(grep -c ': includes ' "$t/out")" = 6 ] || { echo "FAIL: not exactly 6 findings:"; cat "$t/out"; fail=1; }
[ $fail = 0 ] && echo "deps_rule: the check refuses 6 planted includes with their FILE:LINE and passes the clean tree"

# ---- the link-level rule: calls through prototypes written by hand, no include at all ----
s=$t/syms
mkdir -p "$s/core/nn" "$s/lab/exercise" "$s/lab/cli" "$s/lab/ui" "$s/chapters/common" \
         "$s/chapters/ch01" "$s/chapters/ch02"
w() { printf '%b' "$2" > "$s/$1"; }
w lab/lab.h '/* the tables; lab_private is not here */\nint lab_api(void);\n'
w core/nn/ok.c 'int core_fn(void) { return 1; }\n'
w lab/flags.c 'int lab_api(void) { return 2; }\nint lab_private(void) { return 3; }\n'
w lab/exercise/ex.c 'int ex_api(void) { return 4; }\n'
w lab/chapters.c 'extern int ch01_chapter, ch02_chapter;\nint *lab_tables[] = {&ch01_chapter, &ch02_chapter};\n'
w lab/cli/cmd.c 'int core_fn(void);\nint cmd_fn(void) { return core_fn(); }\n'
w chapters/common/common.c 'int core_fn(void);\nint lab_api(void);\nint common_fn(void) { return core_fn() + lab_api(); }\n'
w chapters/ch01/ch01.c 'int common_fn(void);\nint lab_api(void);\nint ex_api(void);\nint ch01_chapter = 1;\nint ch01_fn(void) { return common_fn() + lab_api() + ex_api(); }\n'
w chapters/ch02/ch02.c 'int common_fn(void);\nint ch02_chapter = 2;\nint ch02_fn(void) { return common_fn(); }\n'
objs() {     # every source without its object yet (with -g: the finding's line)
    for c in $(cd "$s" && find core lab chapters -name '*.c'); do
        [ -f "$s/build/${c%.c}.o" ] && continue
        mkdir -p "$s/build/$(dirname "$c")"
        ${CC:-cc} -g -O0 -c "$s/$c" -o "$s/build/${c%.c}.o" || { echo "FAIL: cannot compile $c"; exit 1; }
    done
}
objs
sh "$here/deps_rule.sh" "$s" build > "$t/out" 2>&1 || { echo "FAIL: a clean tree's objects were refused:"; cat "$t/out"; exit 1; }
w core/nn/bad_lab.c 'int lab_api(void);\n\nint core_bad(void)\n{\n    return lab_api();\n}\n'
w core/nn/bad_ch.c 'int ch02_fn(void);\nint core_bad2(void) { return ch02_fn(); }\n'
w chapters/ch01/bad.c 'int lab_private(void);\nint cmd_fn(void);\nint ch01_bad(void)\n{\n    return lab_private() +\n           cmd_fn();\n}\n'
w lab/cli/bad.c 'int ch01_fn(void);\nint cmd_bad(void) { return ch01_fn(); }\n'
w lab/ui/bad.c 'extern int ch02_chapter;\nint *ui_bad(void) { return &ch02_chapter; }\n'
w chapters/ch02/bad.c 'int ch01_fn(void);\nint ch02_bad(void) { return ch01_fn(); }\n'
w chapters/common/bad.c 'int ch02_fn(void);\n\n\nint common_bad(void) { return ch02_fn(); }\n'
objs
if sh "$here/deps_rule.sh" "$s" build > "$t/out" 2>&1; then
    echo "FAIL: planted calls passed"; cat "$t/out"; exit 1
fi
for want in "core/nn/bad_lab.c:5: calls lab_api of lab/flags.c: core/ resolves nothing" \
            "core/nn/bad_ch.c:2: calls ch02_fn of chapters/ch02/ch02.c: core/ resolves nothing" \
            "chapters/ch01/bad.c:5: calls lab_private of lab/flags.c: a chapter reaches lab/ only" \
            "chapters/ch01/bad.c:6: calls cmd_fn of lab/cli/cmd.c: a chapter reaches lab/ only" \
            "lab/cli/bad.c:2: calls ch01_fn of chapters/ch01/ch01.c: lab/ reaches chapters only" \
            "lab/ui/bad.c:2: calls ch02_chapter of chapters/ch02/ch02.c: lab/ reaches chapters only" \
            "chapters/ch02/bad.c:2: calls ch01_fn of chapters/ch01/ch01.c: no chapter reaches another" \
            "chapters/common/bad.c:4: calls ch02_fn of chapters/ch02/ch02.c: no chapter reaches another" \
            "deps_rule: 8 calls break the dependency rule"; do
    grep -qF "$want" "$t/out" || { echo "FAIL: no line '$want' in:"; cat "$t/out"; fail=1; }
done
[ "$(grep -c ': calls ' "$t/out")" = 8 ] || { echo "FAIL: not exactly 8 findings:"; cat "$t/out"; fail=1; }
[ $fail = 0 ] && echo "deps_rule: the link check refuses 8 planted calls (no include) with their FILE:LINE and passes the clean objects"
exit $fail
