#!/usr/bin/env bash
# Sets up, builds and runs every test: first a plain build, then the same tests under ASan+UBSan.
# Exits non-zero on any failure. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

phase() {  # phase NAME: a header with the time, so that a CI log shows where its hour went
    echo "== $1 ($(date -u +%H:%M:%S), ${SECONDS} s in)"
}

configure() {  # configure DIR [meson options...]: set up once, reconfigure after
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@"
    fi
}

phase "plain build"
configure build
ninja -C build
phase "plain tests"
meson test -C build --print-errorlogs

# The interop suite (qemu guest with Linux rxe, scripts/interop/run.sh) runs in the plain build
# only: it boots a guest and takes minutes under TCG, a second run would double that, and the code
# it drives (transport, DPDK port, out-of-band messages) runs under the sanitizers in the unit
# tests already. By hand: meson test -C build-asan interop. Nothing runs beside it: the sanitizer
# build beside it, even at SCHED_IDLE, slowed its guest so much that 21 of its 134 cases no longer
# fit in its budget (2026-12-05; alone it took 803 s of 960).
# The sanitizer builds carry line tables only (-g1): their reports keep file:line, and the
# compiler emits a fraction of the debug info (the builds are a third of the CI's hour).
phase "ASan + UBSan build"
configure build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-g1
ninja -C build-asan
phase "ASan + UBSan tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --timeout-multiplier 4 --no-suite interop

# The fuzz targets (tests/fuzz, clang and libFuzzer, ASan+UBSan): their regression inputs, then a
# few seconds of fuzzing each. The long runs: scripts/fuzz.sh.
phase "fuzz smoke (clang)"
CXX=clang++ CC=clang configure build-fuzz -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-g1
ninja -C build-fuzz tests/fuzz/fuzz_parse tests/fuzz/fuzz_mad tests/fuzz/fuzz_pcap tests/fuzz/fuzz_receive tests/fuzz/fuzz_ctl
meson test -C build-fuzz --no-rebuild --print-errorlogs --suite fuzz

phase "all tests passed (plain, ASan+UBSan, fuzz smoke)"
