#!/bin/sh
# deps_rule.sh - the dependency rule of the tree (DESIGN.md, "Layout"), on the sources and on
# the built objects. Includes: core/ includes nothing from lab/ or chapters/; a chapter
# includes from lab/ only lab/lab.h and the exercise table (lab/exercise/), never the
# commands, the runner, the front end or the backends. Symbols (nm), so that a call through
# a prototype written by hand is caught too: an object of core/ resolves nothing in lab/'s or
# chapters/' objects; a chapter resolves in lab/ only what lab/lab.h declares and lab/exercise/
# defines; lab/ resolves in chapters/ only the chapter tables, in lab/chapters.c; no chapter
# resolves anything in another (chapters/common/ is shared, and reaches no chapter itself).
# Prints FILE:LINE: what is wrong, for every finding, and exits 1 if any.
# Usage: deps_rule.sh [ROOT [BUILD]]   (ROOT: the source tree, default the current folder;
#        BUILD: where make put the objects, relative to ROOT; without it only includes)
root=${1:-.}
build=$2
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
inc_rc=$?
[ -n "$build" ] || exit $inc_rc

# ---- the objects: who calls whom ----
srcs=$(find core lab chapters -name '*.c' 2>/dev/null | grep -v '^core/mpi/\|^core/nccl/' | sort)
objs=""
missing=0
for s in $srcs; do
    o="$build/${s%.c}.o"
    if [ -f "$o" ]; then objs="$objs $o"; else missing=$((missing + 1)); fi
done
if [ "$missing" -gt 0 ]; then
    echo "deps_rule: $missing source(s) have no object under $build: build them first (make)"
    exit 2
fi
# what lab/lab.h declares: the names a chapter may use of lab/'s own files
declared=$(${CC:-cc} -fpreprocessed -dD -E -P lab/lab.h 2>/dev/null | grep -o '[A-Za-z_][A-Za-z0-9_]*' | sort -u | tr '\n' ' ')
# "D OBJ SYM" for each global definition, "U OBJ SYM" for each undefined symbol
# shellcheck disable=SC2086
{ nm -A --defined-only $objs | awk '$(NF-1) ~ /^[TDRBCGSVW]$/ { o = $1; sub(/:.*/, "", o); print "D", o, $NF }'
  nm -A -u $objs | awk '{ o = $1; sub(/:.*/, "", o); print "U", o, $NF }'
} 2>/dev/null | awk -v build="$build/" -v declared="$declared" '
function src(o) { s = substr(o, length(build) + 1); sub(/\.o$/, ".c", s); return s }
function room(f) {
    if (f ~ /^core\//) return "core"
    if (f ~ /^lab\//) return "lab"
    if (f ~ /^chapters\//) return "chapters"
    return ""
}
function chapter(f,    p) { p = f; sub(/^chapters\//, "", p); sub(/\/.*/, "", p); return p }
BEGIN { n = split(declared, d, " "); for (i = 1; i <= n; i++) in_lab_h[d[i]] = 1 }
$1 == "D" { def[$3] = src($2); next }
{ user[++nu] = src($2); sym[nu] = $3 }
END {
    for (i = 1; i <= nu; i++) {
        s = sym[i]; f = user[i]
        if (!(s in def)) continue               # the C library, a plugin, a system library
        p = def[s]; rf = room(f); rp = room(p); why = ""
        if (rf == "core" && (rp == "lab" || rp == "chapters"))
            why = "core/ resolves nothing in lab/ or chapters/"
        else if (rf == "chapters" && rp == "lab" && p !~ /^lab\/exercise\// &&
                 !(p ~ /^lab\/[^\/]*$/ && (s in in_lab_h)))
            why = "a chapter reaches lab/ only through lab/lab.h and lab/exercise/"
        else if (rf == "lab" && rp == "chapters" && !(f == "lab/chapters.c" && s ~ /^ch[0-9]+_chapter$/))
            why = "lab/ reaches chapters only through the chapter table (lab/chapters.c)"
        else if (rf == "chapters" && rp == "chapters" && chapter(p) != chapter(f) && chapter(p) != "common")
            why = "no chapter reaches another (what two chapters share lives in core/ or chapters/common/)"
        if (why != "")
            printf "%s %s %s %s\n", f, s, p, why
    }
    print "end", nu
}' > "${TMPDIR:-/tmp}/deps_rule.$$"
last=$(tail -n 1 "${TMPDIR:-/tmp}/deps_rule.$$")
case "$last" in
end\ [1-9]*) ;;
*) echo "deps_rule: reading the objects' symbols failed (nm, awk)"; rm -f "${TMPDIR:-/tmp}/deps_rule.$$"; exit 2 ;;
esac
sed -i '$d' "${TMPDIR:-/tmp}/deps_rule.$$"
nbad=$(wc -l < "${TMPDIR:-/tmp}/deps_rule.$$")
# each finding with the line of its call (nm -l reads the relocation's line in the debug info)
while read -r f s p why; do
    line=$(nm -l -u "$build/${f%.c}.o" 2>/dev/null | awk -v s="$s" '$2 == s { n = split($3, a, ":"); print a[n]; exit }')
    printf "%s:%s: calls %s of %s: %s\n" "$f" "${line:-?}" "$s" "$p" "$why"
done < "${TMPDIR:-/tmp}/deps_rule.$$"
rm -f "${TMPDIR:-/tmp}/deps_rule.$$"
if [ "$nbad" -gt 0 ]; then
    printf "deps_rule: %d call%s the dependency rule\n" "$nbad" "$([ "$nbad" = 1 ] && echo " breaks" || echo "s break")"
    exit 1
fi
exit $inc_rc
