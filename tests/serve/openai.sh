#!/bin/sh
# openai.sh - the official OpenAI Node client (npm package `openai`, installed into
# BUILD/serve-npm) against `mlsys-lab run ch08/minimal-inference-server --serve` on a free
# loopback port with a bearer key: tests/serve/openai_client.mjs. Skips with the reason when
# node or npm is missing, the package cannot be installed (offline), or the lab was built
# without the HTTP server; under CI=true (where the registry is reachable) a client that
# cannot be had fails instead. Usage: tests/serve/openai.sh [BUILD]
build=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
# skip here, fail under CI
cannot() {
    if [ "$CI" = true ]; then echo "openai client: FAILED (CI=true): $1"; exit 1; fi
    echo "openai client: skipped: $1"; exit 0
}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    cannot "node or npm not found (apt-get install nodejs npm)"
fi
dir=$build/serve-npm
if [ ! -f "$dir/node_modules/openai/package.json" ]; then
    mkdir -p "$dir" || exit 1
    if ! (cd "$dir" && timeout 300 npm install --no-audit --no-fund --silent openai@4 \
              >npm.log 2>&1); then
        cannot "npm install openai failed (offline?), see $dir/npm.log"
    fi
fi
cp tests/serve/openai_client.mjs "$dir/" || exit 1
log=$(mktemp) || exit 1
"$build/mlsys-lab" run ch08/minimal-inference-server --serve 127.0.0.1:0 --api-key labkey \
    >"$log" 2>&1 &
pid=$!
# the ready line names the port; then GET /health must answer 200 (30 s at most in all)
port=
i=0
while [ $i -lt 300 ]; do
    port=$(sed -n 's/^ready: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 $pid 2>/dev/null; then
        if grep -q "without libmicrohttpd\|without cJSON" "$log"; then
            echo "openai client: skipped: $(cat "$log")"; rm -f "$log"; exit 0
        fi
        echo "openai client: the server did not start:"; cat "$log"; rm -f "$log"; exit 1
    fi
    i=$((i + 1)); sleep 0.1
done
if [ -z "$port" ]; then
    echo "openai client: no /health within 30 s"; kill $pid; rm -f "$log"; exit 1
fi
PORT=$port KEY=labkey node "$dir/openai_client.mjs"
rc=$?
kill -TERM $pid
wait $pid || rc=1
rm -f "$log"
exit $rc
