#!/bin/sh
# deps_rule_test.sh - proves tests/deps_rule.sh catches what it must: a scratch tree with a
# planted violation of each kind (core/ including lab/ and chapters/, a chapter including
# lab/cli, lab/ui, lab/backend, lab/job) must fail with each FILE:LINE, and the same tree
# without them must pass (lab/lab.h, lab/exercise/ and chapters/common stay allowed).
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
[ $fail = 0 ] && echo "deps_rule: the check refuses 6 planted violations with their FILE:LINE and passes the clean tree"
exit $fail
