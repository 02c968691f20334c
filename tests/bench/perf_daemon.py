#!/usr/bin/python3
"""Benchmark (not a test): `hcaemu perf write_bw` and `write_lat` through hcaemud (two daemons over
net_memif, each perf process a client of its daemon) beside the same tests with in-process HCAs
(two hcaemu processes over net_memif) and memcpy, all measured in this run. Shared machines are
noisy: compare the ratios, not the raw figures.
"""
import argparse
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import check_perf  # noqa: E402  (run_pair: two in-process hcaemu over net_memif)
import daemonlib  # noqa: E402
from perf_memif import memcpy_gbs  # noqa: E402

BW = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
LAT = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def bw(out):
    m = [x for x in (BW.match(l) for l in out.splitlines()) if x]
    return float(m[0].group(4)) * 1048576 / 1e9 if m else None  # average, GB/s


def lat(out):
    m = [x for x in (LAT.match(l) for l in out.splitlines()) if x]
    return float(m[0].group(5)) if m else None  # t_typical, usec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    a = ap.parse_args()
    mc = memcpy_gbs()
    print(f"memcpy (64 MiB, best of 5): {mc:.2f} GB/s")
    cases = (("write_bw", ["-s", "65536", "-n", "5000"], bw, "GB/s"), ("write_lat", ["-s", "64", "-n", "5000"], lat, "usec"))
    inproc = {}
    for test, args, get, unit in cases:
        r, t = check_perf.run_pair(a.hcaemu, test, args, timeout=300)
        inproc[test] = get(r[4]) if r and r[3] == 0 else None
    ok = True
    with tempfile.TemporaryDirectory(prefix="hcaemu-bdaemon-") as tmp:
        tag = str(os.getpid())
        sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
        da = daemonlib.Daemon(a.hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.0.1/24")
        db = daemonlib.Daemon(a.hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.0.2/24") \
            if da.wait_ready() else None
        daemons = {}
        if db and db.wait_ready() and daemonlib.wait_link(a.hcaemu, f"unix:{sa}", f"unix:{sb}"):
            for test, args, get, unit in cases:
                r, t = daemonlib.run_pair(a.hcaemu, test, f"unix:{sa}", f"unix:{sb}", args, timeout=300)
                daemons[test] = get(r[4]) if r and r[3] == 0 else None
                if daemons[test] is None:  # why, in a line each end
                    print(f"{test} through hcaemud failed: " + (f"server rc {r[0]}: {r[2].strip()[-300:]}; client rc {r[3]}: "
                                                                 f"{r[5].strip()[-300:]}" if r else str(t)[-600:]))
        for d in (da, db):
            if d:
                d.stop()
    for test, args, get, unit in cases:
        i, d = inproc.get(test), daemons.get(test)
        if i is None or d is None:
            print(f"{test} {' '.join(args)}: failed (in-process {i}, daemon {d})")
            ok = False
            continue
        if unit == "GB/s":
            print(f"{test} {' '.join(args)}: in-process {i:.3f} GB/s = {i / mc:.3f}x memcpy; "
                  f"through hcaemud {d:.3f} GB/s = {d / mc:.3f}x memcpy; daemon / in-process = {d / i:.2f}")
        else:
            print(f"{test} {' '.join(args)}: t_typical in-process {i:.2f} usec, through hcaemud {d:.2f} usec;"
                  f" daemon / in-process = {d / i:.2f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
