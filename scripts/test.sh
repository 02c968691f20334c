#!/usr/bin/env bash
# Sets up, builds and runs every test: first a plain build, then the same tests under ASan+UBSan.
# Exits non-zero on any failure. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

configure() {  # configure DIR [meson options...]: set up once, reconfigure after
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@"
    fi
}

echo "== plain build"
configure build
ninja -C build
meson test -C build --print-errorlogs

echo "== ASan + UBSan build"
configure build-asan -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --timeout-multiplier 4

echo "== all tests passed (plain and ASan+UBSan)"
