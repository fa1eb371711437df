#!/bin/sh
# deps.sh - install the Debian packages the lab needs (the list lives in the Makefile),
# with apt-get as root or through sudo; otherwise say exactly what to install.
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "mlsys-lab: installing missing packages:$missing"
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"
else
    echo "mlsys-lab: please install:$missing  (e.g. sudo apt-get install$missing)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null || true
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
    echo "mlsys-lab: apt-get could not install:$missing" >&2; exit 1; }
