#!/bin/bash
# missing_libs.sh - a rank starts like a C program and nothing breaks where an optional
# library is missing. What each program loads at start (ldd): mlsys-lab-rank, what every rank
# execs, no front-end library (ncurses, md4c) and neither program OpenBLAS, libmicrohttpd
# (and its TLS stack) or hwloc, which the code that needs them loads with dlopen. Then the
# three are hidden for real (a private mount namespace binds /dev/null over each file, so
# neither the dynamic loader nor dlopen can load them) and: a lab's ranks run; `generate`
# and a DDP lab multiply with the reference kernel, said once per process, and print what
# MLSYS_GEMM=ref prints with the libraries present; the server and the topology inspector
# each say in one line what is missing. Without the rights for a mount namespace, OpenBLAS
# alone is hidden through MLSYS_OPENBLAS, and the rest is skipped, saying why.
# Usage: tests/startup/missing_libs.sh [BUILD_DIR]
build=${1:-build}
bin=$PWD/$build/mlsys-lab
rank=$PWD/$build/mlsys-lab-rank
. "$(dirname "$0")/../tap.sh"    # ok, bad, finish and their counts
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LANG=C.UTF-8

skip() { echo "skip - $1"; }

for p in "$bin" "$rank"; do
    [ -x "$p" ] || { bad "$p is not built (make BUILD=$build)"; finish; }
done

# ---- what each program loads before main ----
libs_of() { ldd "$1" 2>/dev/null | awk '{print $1}' | sed 's/\.so.*//' | sort -u | tr '\n' ' '; }
lr=$(libs_of "$rank")
lm=$(libs_of "$bin")
heavy='libopenblas|libmicrohttpd|libgnutls|libhwloc|libgfortran'
if ! echo "$lr" | grep -Eq "$heavy|libncursesw|libmd4c|libtinfo"; then
    ok "mlsys-lab-rank loads no front-end and no optional heavy library at start: $lr"
else
    echo "$lr" >"$tmp/l"
    bad "mlsys-lab-rank loads more than it needs" "$tmp/l"
fi
if ! echo "$lm" | grep -Eq "$heavy"; then
    ok "mlsys-lab loads neither OpenBLAS, libmicrohttpd nor hwloc at start: $lm"
else
    echo "$lm" >"$tmp/l"
    bad "mlsys-lab loads an optional library at start" "$tmp/l"
fi

# ---- the checks, run with the libraries hidden (in a namespace, or through the env) ----
prompt="Once upon"
cat >"$tmp/checks.sh" <<EOF
cd "$PWD"
"$bin" run ch01/hello-distributed -w 2 >"$tmp/hello.out" 2>&1; echo \$? >"$tmp/hello.rc"
"$bin" generate --prompt "$prompt" -n 40 --temperature 0 >"$tmp/gen.out" 2>"$tmp/gen.err"
echo \$? >"$tmp/gen.rc"
"$bin" run ch05/simple-ddp -w 2 --max-steps 2 --hidden 64 >"$tmp/ddp.out" 2>"$tmp/ddp.err"
echo \$? >"$tmp/ddp.rc"
if [ -n "\${ALL:-}" ]; then
    timeout 60 "$bin" run ch08/minimal-inference-server --serve 127.0.0.1:0 >"$tmp/srv.out" 2>&1
    echo \$? >"$tmp/srv.rc"
    "$bin" run ch04/topology-inspector >"$tmp/topo.out" 2>&1; echo \$? >"$tmp/topo.rc"
fi
EOF
# the files behind the names the programs dlopen
hide=""
for name in libopenblas.so.0 libmicrohttpd.so.12 libhwloc.so.15; do
    f=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')
    [ -n "$f" ] && hide="$hide $(readlink -f "$f")"
done
mode=""
if [ -n "$hide" ] && unshare -m true 2>/dev/null; then
    {
        for f in $hide; do echo "mount --bind /dev/null '$f' || exit 99"; done
        echo "ALL=1 . '$tmp/checks.sh'"
    } >"$tmp/ns.sh"
    unshare -m --propagation private sh "$tmp/ns.sh" 2>"$tmp/ns.err"
    if [ $? -eq 99 ]; then
        skip "cannot bind over the libraries in a mount namespace: $(head -1 "$tmp/ns.err")"
    else
        mode=ns
        ok "hidden in a private mount namespace:$hide"
    fi
fi
if [ -z "$mode" ]; then
    [ -n "$hide" ] || skip "none of OpenBLAS, libmicrohttpd, hwloc is installed: nothing to hide"
    skip "no mount namespace here (needs root or CAP_SYS_ADMIN): OpenBLAS hidden through MLSYS_OPENBLAS only"
    MLSYS_OPENBLAS=/nonexistent/libopenblas.so.0 sh "$tmp/checks.sh"
    mode=env
fi

if [ "$(cat "$tmp/hello.rc")" = 0 ] && grep -q '^All 2 processes finished' "$tmp/hello.out"; then
    ok "a lab's ranks run (hello-distributed, 2 ranks)"
else
    bad "hello-distributed without the libraries" "$tmp/hello.out"
fi

# generate: the reference kernel's text, the note once
MLSYS_GEMM=ref "$bin" generate --prompt "$prompt" -n 40 --temperature 0 >"$tmp/gen.ref" 2>/dev/null
notes=$(grep -c 'OpenBLAS cannot be loaded here' "$tmp/gen.err")
if [ "$mode" = ns ] && ! grep -q openblas <<<"$hide"; then
    skip "generate without OpenBLAS: it is not installed here"
elif [ "$(cat "$tmp/gen.rc")" = 0 ] && [ "$notes" = 1 ] && [ -s "$tmp/gen.out" ] &&
     cmp -s "$tmp/gen.out" "$tmp/gen.ref"; then
    ok "generate without OpenBLAS: the reference kernel's $(wc -c <"$tmp/gen.out") bytes, said once: $(grep -o 'OpenBLAS cannot be loaded here ([^)]*)' "$tmp/gen.err" | cut -c1-60)..."
else
    { cat "$tmp/gen.err"; diff "$tmp/gen.ref" "$tmp/gen.out"; echo "exit $(cat "$tmp/gen.rc"), notes $notes"; } >"$tmp/d"
    bad "generate without OpenBLAS" "$tmp/d"
fi

# a DDP lab: ranks multiply; each rank says it once; the checks pass
MLSYS_GEMM=ref "$bin" run ch05/simple-ddp -w 2 --max-steps 2 --hidden 64 >"$tmp/ddp.ref" 2>/dev/null
clean() { grep -v -e 'steps in' -e '^  \(manual\|DDP\|noise\|t_fwd\|ratio\)' "$1"; }
if [ "$(cat "$tmp/ddp.rc")" = 0 ] && grep -q '^All checks passed' "$tmp/ddp.out" &&
   [ "$(grep -c 'OpenBLAS cannot be loaded here' "$tmp/ddp.err")" = 2 ] &&
   cmp -s <(clean "$tmp/ddp.out") <(clean "$tmp/ddp.ref"); then
    ok "simple-ddp's ranks without OpenBLAS: the reference kernel's numbers, one note per rank"
else
    { cat "$tmp/ddp.err"; diff <(clean "$tmp/ddp.ref") <(clean "$tmp/ddp.out"); } >"$tmp/d"
    bad "simple-ddp without OpenBLAS" "$tmp/d"
fi

if [ "$mode" = ns ]; then
    if [ "$(cat "$tmp/srv.rc")" = 2 ] && [ "$(wc -l <"$tmp/srv.out")" -le 2 ] &&
       grep -q 'libmicrohttpd cannot be loaded' "$tmp/srv.out"; then
        ok "--serve without libmicrohttpd: $(grep -o 'libmicrohttpd cannot be loaded.*' "$tmp/srv.out" | cut -c1-70)..."
    else
        echo "exit $(cat "$tmp/srv.rc")" >>"$tmp/srv.out"
        bad "--serve without libmicrohttpd" "$tmp/srv.out"
    fi
    if [ "$(cat "$tmp/topo.rc")" != 139 ] && grep -q 'hwloc cannot be loaded' "$tmp/topo.out"; then
        ok "topology-inspector without hwloc says so (exit $(cat "$tmp/topo.rc"))"
    else
        echo "exit $(cat "$tmp/topo.rc")" >>"$tmp/topo.out"
        bad "topology-inspector without hwloc" "$tmp/topo.out"
    fi
fi
finish
