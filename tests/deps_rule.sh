#!/bin/sh
# deps_rule.sh - the dependency rule of the tree (DESIGN.md, "Layout"): core/ includes nothing
# from lab/ or chapters/; a chapter includes from lab/ only lab/lab.h and the exercise table
# (lab/exercise/), never the commands, the runner, the front end or the backends.
# Prints FILE:LINE: what is wrong, for every offending #include "...", and exits 1 if any.
# Usage: deps_rule.sh [ROOT]   (ROOT: the source tree, default the current folder)
root=${1:-.}
cd "$root" || exit 2
files=$(find core chapters -name '*.[ch]' 2>/dev/null | sort)
[ -n "$files" ] || { echo "deps_rule: no sources under $root/core or $root/chapters"; exit 2; }
# shellcheck disable=SC2086
grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $files | awk '
# a path with . and .. folded away ("chapters/ch05/../../lab/x.h" -> "lab/x.h")
function fold(p,    n, i, k, part, out, s) {
    n = split(p, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (part[i] == "" || part[i] == ".") continue
        if (part[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
        out[++k] = part[i]
    }
    s = ""
    for (i = 1; i <= k; i++) s = s (i > 1 ? "/" : "") out[i]
    return s
}
{
    # FILE:LINE:#include "x.h"
    file = $0; sub(/:.*/, "", file)
    rest = substr($0, length(file) + 2)
    line = rest; sub(/:.*/, "", line)
    inc = rest; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    dir = file; sub(/\/[^\/]*$/, "", dir)
    target = fold(dir "/" inc)
    bad = ""
    if (file ~ /^core\// && (target ~ /^lab\// || target ~ /^chapters\//))
        bad = "core/ must not include lab/ or chapters/"
    else if (file ~ /^chapters\// && target ~ /^lab\// && target != "lab/lab.h" &&
             target !~ /^lab\/exercise\//)
        bad = "a chapter includes from lab/ only lab/lab.h and lab/exercise/ (an engine a " \
              "chapter and a command share belongs in core/)"
    if (bad != "") {
        printf "%s:%s: includes %s: %s\n", file, line, target, bad
        n++
    }
}
END {
    if (n) { printf "deps_rule: %d include%s the dependency rule\n", n, n == 1 ? " breaks" : "s break"; exit 1 }
}'
