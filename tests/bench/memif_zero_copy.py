#!/usr/bin/python3
"""Benchmark (not a test): net_memif's zero-copy mode against its copy mode under `hcaemu perf`
(issue 13 asks what it changes). The memif client (the sending end of the BW tests) gets
`zero-copy=yes`, which DPDK 22.11 takes only with `--single-file-segments`; the server is the same
in both. Each round runs every test both ways, the order alternating; it prints each round and the
median of the rounds' ratios (zero-copy / copy; for the latency, below 1 is faster).

    tests/bench/memif_zero_copy.py --hcaemu build/tools/hcaemu [--rounds 3]
"""
import argparse
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import check_perf  # noqa: E402

ROW = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
# (test, arguments, the client row's column: BW average MB/s, MsgRate Mpps, t_typical usec)
TESTS = [("write_bw", ["-s", "65536", "-n", "5000"], 4, "MB/s"),
         ("write_bw", ["-s", "65536", "-n", "5000", "-m", "4096", "--link-mtu", "9000"], 4, "MB/s"),
         ("write_bw", ["-s", "8", "-D", "2"], 5, "Mmsg/s"),
         ("send_bw", ["-s", "8", "-D", "2"], 5, "Mmsg/s"),
         ("send_lat", ["-s", "8", "-n", "100000"], 5, "usec t_typical")]


def figure(hcaemu, test, args, col, zero_copy):
    r, _ = check_perf.run_pair(hcaemu, test, args, timeout=300,
                               client_eal=" --single-file-segments" if zero_copy else "",
                               client_vdev=",zero-copy=yes" if zero_copy else "")
    if r is None or r[0] != 0 or r[3] != 0:
        return None
    rows = [m for m in (ROW.match(l) for l in r[4].splitlines()) if m]
    return float(rows[0].group(col)) if rows else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ratios = {}
    ok = True
    for rnd in range(a.rounds):
        for test, args, col, unit in TESTS:
            res = {}
            for zc in (False, True) if rnd % 2 == 0 else (True, False):
                res[zc] = figure(a.hcaemu, test, args, col, zc)
            name = f"{test} {' '.join(args)}"
            if res[False] and res[True]:
                ratios.setdefault(name, []).append(res[True] / res[False])
                print(f"round {rnd + 1} {name}: copy {res[False]:.3f}, zero-copy {res[True]:.3f} {unit}", flush=True)
            else:
                ok = False
                print(f"round {rnd + 1} {name}: failed (copy {res[False]}, zero-copy {res[True]})", flush=True)
    print("\nzero-copy / copy, median of the rounds (for send_lat's t_typical below 1 is faster)")
    for name, v in ratios.items():
        print(f"{name:<55} {statistics.median(v):.2f}   (rounds: " + ", ".join(f"{x:.2f}" for x in v) + ")")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
