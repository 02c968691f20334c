#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz) and prints, per target: executions, executions per
# second, coverage (libFuzzer's cov: edges, ft: features), corpus size and crashes found.
#
#   scripts/fuzz.sh [--runs N | --time SECONDS] [--build-dir DIR] [--captures DIR] [TARGET...]
#   scripts/fuzz.sh --smoke [--build-dir DIR] [TARGET...]     (CI: replay the regressions, then 5 s)
# --no-build: use the targets in DIR/tests/fuzz as they are (a copy, while DIR is rebuilt).
#
# Targets: fuzz_parse fuzz_mad fuzz_pcap fuzz_receive fuzz_ctl (default: all, one after another).
# The build dir (default build-fuzz) is configured with clang, ASan and UBSan if it is not yet, and
# the targets are built (not with --smoke: meson test has built them). Work files go to
# DIR/fuzz-work/TARGET: corpus/ (kept between runs), seeds/ (tests/fuzz/make_seeds.py, from the
# captures), artifacts/ (crash-*, leak-*, timeout-*, oom-*: each a reproducer, run it as
# `DIR/tests/fuzz/TARGET FILE`). Every input of tests/fuzz/regressions/TARGET is replayed first.
# Exits 1 if any target crashed, 2 on a usage or build error.
set -uo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build-fuzz"
captures="$src/../shared/captures/rxe"
runs="" secs="" smoke=0 nobuild=0
targets=()
all=(fuzz_parse fuzz_mad fuzz_pcap fuzz_receive fuzz_ctl)

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --time) secs=$2; shift 2 ;;
    --smoke) smoke=1; nobuild=1; shift ;;
    --no-build) nobuild=1; shift ;;
    --build-dir) build=$2; shift 2 ;;
    --captures) captures=$2; shift 2 ;;
    -h|--help) usage ;;
    fuzz_parse|fuzz_mad|fuzz_pcap|fuzz_receive|fuzz_ctl) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
if [ $smoke = 1 ]; then
    secs=${secs:-5}
elif [ -z "$runs" ] && [ -z "$secs" ]; then
    secs=60
fi

if [ $nobuild = 0 ]; then
    if [ ! -f "$build/build.ninja" ]; then
        CXX=clang++ CC=clang meson setup "$build" "$src" -Dfuzz=true -Dtests=false \
            -Db_sanitize=address,undefined -Db_lundef=false >/dev/null || exit 2
    fi
    ninja -C "$build" "${targets[@]/#/tests/fuzz/}" >/dev/null || { echo "fuzz.sh: build failed" >&2; exit 2; }
fi

# Per target: libFuzzer options. fuzz_ctl: the daemon engine logs each client's removal to stderr
# (-close_fd_mask=2 hides it; sanitizer and libFuzzer reports still come through).
opts_for() {
    case "$1" in
    fuzz_parse) echo "-max_len=9100" ;;
    fuzz_mad) echo "-max_len=600" ;;
    fuzz_pcap) echo "-max_len=16384" ;;
    fuzz_receive) echo "-max_len=4096" ;;
    fuzz_ctl) echo "-max_len=2048 -close_fd_mask=2" ;;
    esac
}

crashed=0
printf '%-13s %12s %8s %7s %7s %7s %8s\n' target execs exec/s cov ft corpus crashes
for t in "${targets[@]}"; do
    exe="$build/tests/fuzz/$t"
    [ -x "$exe" ] || { echo "fuzz.sh: $exe not built" >&2; exit 2; }
    work="$build/fuzz-work/$t"
    mkdir -p "$work/corpus" "$work/artifacts"
    if [ -z "$(ls -A "$work/seeds" 2>/dev/null)" ]; then
        [ -d "$captures" ] || echo "fuzz.sh: no captures at $captures (--captures DIR): fewer seeds" >&2
        python3 "$src/tests/fuzz/make_seeds.py" --captures "$captures" --out "$work/seeds" "$t" 2>/dev/null
    fi
    regs="$src/tests/fuzz/regressions/$t"
    # The regression inputs, each once: a crash here is a regression.
    if [ -d "$regs" ] && [ -n "$(ls -A "$regs")" ]; then
        if ! "$exe" $(opts_for "$t") "$regs"/* >"$work/regressions.log" 2>&1; then
            echo "fuzz.sh: $t: a regression input fails again; see $work/regressions.log" >&2
            tail -30 "$work/regressions.log" >&2
            crashed=1
            continue
        fi
    fi
    limit=()
    [ -n "$runs" ] && limit+=("-runs=$runs")
    [ -n "$secs" ] && limit+=("-max_total_time=$secs")
    dirs=("$work/corpus" "$work/seeds")
    [ -d "$src/tests/fuzz/seeds/$t" ] && dirs+=("$src/tests/fuzz/seeds/$t")
    [ -d "$regs" ] && dirs+=("$regs")
    # Findings: crash-, leak-, timeout- and oom- files (slow-unit- ones are reported, not failures).
    findings() { ls "$work/artifacts" | grep -cE '^(crash|leak|timeout|oom)-'; }
    before=$(findings)
    nice -n 10 "$exe" $(opts_for "$t") -timeout=20 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
        "${limit[@]}" "${dirs[@]}" >"$work/run.log" 2>&1
    rc=$?
    after=$(findings)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/run.log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/run.log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$work/run.log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    new=$((after - before))
    printf '%-13s %12s %8s %7s %7s %7s %8s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$new"
    slow=$(ls "$work/artifacts" | grep -c '^slow-unit-')
    [ "$slow" -gt 0 ] && echo "fuzz.sh: $t: $slow slow input(s) (over 10 s once) in $work/artifacts" >&2
    if [ $rc -ne 0 ] || [ $new -gt 0 ]; then
        crashed=1
        echo "fuzz.sh: $t exited $rc; artifacts in $work/artifacts; log $work/run.log" >&2
        grep -E 'ERROR|SUMMARY|invariant|deadly' "$work/run.log" | head -5 >&2
    fi
done
exit $crashed
