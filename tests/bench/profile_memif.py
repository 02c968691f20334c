#!/usr/bin/python3
"""Profile `hcaemu perf` between two processes over net_memif: each end runs under
`perf record --call-graph dwarf`, and flamegraph.py draws one SVG per end.

    tests/bench/profile_memif.py --hcaemu build/tools/hcaemu --out docs/perf/before-write64k \\
        write_bw -s 65536 -n 20000

writes OUT-client.svg and OUT-server.svg (and, with --keep, the perf.data files and the folded
stacks beside them). Debian's linux-perf gives `perf`; perf_event_paranoid must let a user
profile their own processes (2 does).
"""
import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import check_perf  # noqa: E402


def perf_binary():
    for p in ("perf",) + tuple(f"perf_{v}" for v in ("6.1", "6.0", "5.10")):
        if shutil.which(p):
            return shutil.which(p)
    sys.exit("profile_memif.py: no perf binary (apt-get install linux-perf)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--out", required=True, help="prefix of the SVGs")
    ap.add_argument("--freq", default="999")
    ap.add_argument("--min-percent", default="0.5")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("test")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    perf = perf_binary()
    hcaemu = os.path.abspath(a.hcaemu)
    with tempfile.TemporaryDirectory(prefix="hcaemu-prof-") as tmp:
        wrap = os.path.join(tmp, "hcaemu")
        with open(wrap, "w") as f:
            # the client is the one given the server's address (the last argument)
            f.write("#!/bin/sh\nrole=server\nfor x; do [ \"$x\" = 127.0.0.1 ] && role=client; done\n"
                    f"exec {perf} record -q -F {a.freq} --call-graph dwarf,16384 -o {tmp}/$role.data -- {hcaemu} \"$@\"\n")
        os.chmod(wrap, os.stat(wrap).st_mode | stat.S_IXUSR)
        r, t = check_perf.run_pair(wrap, a.test, a.args, timeout=600)
        if r is None or r[0] != 0 or r[3] != 0:
            sys.exit(f"profile_memif.py: the pair failed: {r or t}")
        print(r[4])
        for role in ("client", "server"):
            data = os.path.join(tmp, f"{role}.data")
            script = subprocess.run([perf, "script", "-i", data], capture_output=True, text=True)
            txt = os.path.join(tmp, f"{role}.txt")
            with open(txt, "w") as f:
                f.write(script.stdout)
            title = f"hcaemu perf {a.test} {' '.join(a.args)}: {role}"
            cmd = [sys.executable, os.path.join(HERE, "flamegraph.py"), txt, "-o", f"{a.out}-{role}.svg",
                   "--title", title, "--min-percent", a.min_percent]
            if a.keep:
                cmd += ["--folded", f"{a.out}-{role}.folded"]
                shutil.copy(data, f"{a.out}-{role}.data")
            subprocess.run(cmd, check=True)
            print(f"{a.out}-{role}.svg")


if __name__ == "__main__":
    main()
