#!/usr/bin/python3
"""Instructions per message of a `bench_transport` case, counted by valgrind's callgrind inside
its timed part (`timed_part`, the warm-up left out), per function. A count,
not a time: the same build gives the same figure on a loaded or a quiet machine, where the timed
benches of a shared VM move by more than a change worth a few percent.
    tests/bench/count_instr.py --bench-transport build/tests/bench/bench_transport [--compare OLD]
        [--top N] [OPERATION SIZE [MTU]]        (default: send 8)
Valgrind runs the code without AVX-512 (its CPU has none), so the dispatch takes the AVX2/SSE
kernels: compare counts with counts, not with the timed benches' kernels.
Needs valgrind (Debian's package).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

COUNT = re.compile(r"^(write|send|read)\s+(\d+)\s+(\d+)\s+(\d+)\s")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.split("\n")[:len(names)]


def parse_callgrind(path):
    """Self Ir per function name from a callgrind.out file (the costs after a calls= line are a
    call's inclusive cost, not the caller's own: skipped)."""
    names, self_ir, fn, skip = {}, collections.Counter(), None, False
    for line in open(path):
        if line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.strip())
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                fn = names.get(m.group(1), m.group(1))
            else:
                fn = line[3:].strip()
            continue
        if line.startswith("cfn="):  # a callee's name may be defined here first
            m = re.match(r"cfn=\((\d+)\) (.*)", line.strip())
            if m:
                names[m.group(1)] = m.group(2)
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if fn is None or not line[:1] in "0123456789+-*":
            continue
        if skip:
            skip = False
            continue
        parts = line.split()
        if len(parts) >= 2:
            self_ir[fn] += int(parts[1])
    return self_ir


def group(name):
    if "MemWire" in name:
        return "the in-memory wire"
    if name.startswith(("main", "std::_Function", "hcaemu::Mr::", "hcaemu::tools::SimPair")) or "bench_transport" in name:
        return "the bench's own calls"
    return "hcaemu"


def has_timed_part(bench):
    nm = subprocess.run(["nm", "-C", bench], capture_output=True, text=True)
    return "timed_part" in nm.stdout


def count(bench, case):
    # A build before 2026-12-06 has no timed_part: its warm-up (min(count, 256) messages, through
    # the same SimPair::run_until) is counted with it.
    timed = has_timed_part(bench)
    toggle = "*timed_part*" if timed else "hcaemu::tools::SimPair::run_until*"
    with tempfile.TemporaryDirectory(prefix="hcaemu-instr-") as tmp:
        out = os.path.join(tmp, "cg.out")
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            f"--toggle-collect={toggle}", bench] + case,
                           capture_output=True, text=True, timeout=1200)
        lines = [m for m in (COUNT.match(line) for line in r.stdout.splitlines()) if m]
        if r.returncode != 0 or not lines:
            sys.exit(f"count_instr.py: {bench} {' '.join(case)} failed:\n{r.stdout}\n{r.stderr[-2000:]}")
        if len(lines) != 1:  # the counts would be summed over cases of different message counts
            sys.exit(f"count_instr.py: '{' '.join(case)}' names {len(lines)} cases; name one (OPERATION SIZE MTU)")
        n = int(lines[0].group(4))
        messages = n if timed else n + min(n, 256)
        raw = parse_callgrind(out)
    keys = list(raw)
    per = collections.Counter()
    for k, d in zip(keys, demangle(keys)):
        d = d.replace("(anonymous namespace)", "{anon}")
        per[re.sub(r"\(.*", "", d) or d] += raw[k] / messages
    return per, messages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-transport", required=True)
    ap.add_argument("--compare", help="another bench_transport (an older build): its counts beside")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("case", nargs="*", default=["send", "8"])
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("count_instr.py: no valgrind (apt-get install valgrind)")
    runs = [count(a.bench_transport, a.case)]
    if a.compare:
        runs.append(count(a.compare, a.case))
    head = "this build" + ("      other   this/other" if a.compare else "")
    print(f"bench_transport {' '.join(a.case)}: instructions a message ({runs[0][1]} messages, "
          f"inside the timed part)\n")
    def by_part(per):
        parts = collections.Counter()
        for k, v in per.items():
            parts[group(k)] += v
        return parts

    for title, tables, top in (("by part", [by_part(per) for per, _ in runs], None),
                               (f"by function (the top {a.top})", [per for per, _ in runs], a.top)):
        print(f"{title:<60} {head}")
        for name, v in tables[0].most_common(top):
            line = f"  {name[:58]:<58} {v:10.1f}"
            if a.compare:
                o = tables[1].get(name, 0.0)
                line += f" {o:10.1f}   {v / o:6.3f}" if o else f" {o:10.1f}"
            print(line)
        total = [sum(t.values()) for t in tables]
        line = f"  {'all':<58} {total[0]:10.1f}"
        if a.compare:
            line += f" {total[1]:10.1f}   {total[0] / total[1]:6.3f}"
        print(line + "\n")


if __name__ == "__main__":
    main()
