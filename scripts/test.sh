#!/usr/bin/env bash
# Sets up, builds and runs every test: a plain build, the interop run (beside the sanitizer
# builds), the plain tests, the same tests under ASan+UBSan, the fuzz smoke.
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

# The interop suite (qemu guest with Linux rxe, scripts/interop/run.sh) runs in the plain build
# only: it boots a guest and takes minutes under TCG, a second run would double that, and the code
# it drives (transport, DPDK port, out-of-band messages) runs under the sanitizers in the unit
# tests already. By hand: meson test -C build-asan interop. It runs alone among the tests, but
# beside the sanitizer builds, which only compile, at the lowest priority (nice 19): the guest and
# its peer keep the CPU they need, the compilers take what they leave.
echo "== interop (qemu guest) in the background, beside the ASan+UBSan and fuzz builds"
# In a session of its own (setsid: not a group leader here, so it does not fork), so that an early
# exit stops it, its harness and the guest (the harness's TERM trap powers the guest off).
setsid meson test -C build --no-rebuild --suite interop --logbase interop --print-errorlogs > build/interop-run.txt 2>&1 &
interop_pid=$!
interop_rc=0
stop_interop() {
    if [ -n "$interop_pid" ] && kill -0 "$interop_pid" 2>/dev/null; then
        kill -TERM -- "-$interop_pid" 2>/dev/null || true
        wait "$interop_pid" 2>/dev/null || true
    fi
}
trap stop_interop EXIT

echo "== ASan + UBSan build"
configure build-asan -Db_sanitize=address,undefined -Db_lundef=false
nice -n 19 ninja -C build-asan

# The fuzz targets (tests/fuzz, clang and libFuzzer, ASan+UBSan): their regression inputs, then a
# few seconds of fuzzing each. The long runs: scripts/fuzz.sh.
echo "== fuzz build (clang)"
CXX=clang++ CC=clang configure build-fuzz -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false
nice -n 19 ninja -C build-fuzz tests/fuzz/fuzz_parse tests/fuzz/fuzz_mad tests/fuzz/fuzz_pcap tests/fuzz/fuzz_receive tests/fuzz/fuzz_ctl

wait "$interop_pid" || interop_rc=$?
interop_pid=""
echo "== interop (exit $interop_rc)"
cat build/interop-run.txt

echo "== plain tests"
meson test -C build --no-rebuild --print-errorlogs --no-suite interop

echo "== ASan + UBSan tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --no-rebuild --print-errorlogs --timeout-multiplier 4 --no-suite interop

echo "== fuzz smoke (clang)"
meson test -C build-fuzz --no-rebuild --print-errorlogs --suite fuzz

if [ "$interop_rc" -ne 0 ]; then
    echo "== interop failed (exit $interop_rc): build/interop-run.txt, build/meson-logs/interop.txt"
    exit 1
fi
echo "== all tests passed (plain, interop, ASan+UBSan, fuzz smoke)"
