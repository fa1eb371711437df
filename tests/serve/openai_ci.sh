#!/bin/sh
# openai_ci.sh - openai.sh's promise about the client it cannot have: with the npm registry
# unreachable (an empty cache, a registry on a closed loopback port) it skips with the reason
# and exits 0, but under CI=true it fails (exit 1, FAILED in the line). Takes a second or
# two. Skips, saying why, where npm is missing. Usage: tests/serve/openai_ci.sh [BUILD]
build=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "openai.sh under CI: skipped: node or npm not found"; exit 0
fi
tmp=$(mktemp -d) || exit 1
fail=0
# $1: CI's value; $2: the exit status wanted; $3: a word the line must hold
try() {
    rm -rf "$tmp/build" "$tmp/cache"
    mkdir -p "$tmp/build" "$tmp/cache"
    out=$(CI=$1 npm_config_registry=http://127.0.0.1:9/ npm_config_cache="$tmp/cache" \
          npm_config_fetch_retries=0 npm_config_offline=false \
          sh tests/serve/openai.sh "$tmp/build" 2>&1)
    rc=$?
    case $out in
        *"$3"*) ;;
        *) rc=-1 ;;
    esac
    if [ "$rc" != "$2" ]; then
        echo "openai.sh under CI=$1 without a registry: exit $rc, wanted $2 and '$3': $out"
        fail=1
    fi
}
try true 1 "FAILED (CI=true): npm install openai failed"
try false 0 "skipped: npm install openai failed"
try "" 0 "skipped: npm install openai failed"
rm -rf "$tmp"
[ $fail = 0 ] && echo "openai.sh under CI: fails without the client under CI=true, skips otherwise"
exit $fail
