#!/usr/bin/python3
"""Benchmark (not a test): `hcaemu perf write_bw` between two processes over DPDK's net_memif, at
65536 B and at 8 B, beside memcpy measured in the same run. Shared machines are noisy: compare the
ratios, not the raw figures.

memcpy: Python copying one 64 MiB buffer into another (a single memcpy underneath), best of 5.
"""
import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import check_perf  # noqa: E402  (run_pair: two hcaemu processes over net_memif)

LINE = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def memcpy_gbs(n=64 << 20, rounds=5):
    src = bytearray(os.urandom(1 << 20)) * (n >> 20)
    dst = bytearray(n)
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        dst[:] = src
        dt = time.perf_counter() - t
        best = max(best, n / dt / 1e9)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    a = ap.parse_args()
    mc = memcpy_gbs()
    print(f"memcpy (64 MiB, best of 5): {mc:.2f} GB/s")
    ok = True
    for size, iters in ((65536, 5000), (8, 100000)):
        r, t = check_perf.run_pair(a.hcaemu, "write_bw", ["-s", str(size), "-n", str(iters)], timeout=300)
        m = [LINE.match(l) for l in (r[4].splitlines() if r else [])]
        m = [x for x in m if x]
        if r is None or r[3] != 0 or not m:
            print(f"write_bw {size} B: failed\n{r or t}")
            ok = False
            continue
        avg_mb, rate = float(m[0].group(4)), float(m[0].group(5))
        gbs = avg_mb * 1048576 / 1e9
        print(f"write_bw {size:>6} B x {iters}: {avg_mb:10.2f} MB/s = {gbs:.3f} GB/s, {rate:.3f} Mpps;"
              f" memcpy / hcaemu = {mc / gbs if gbs else float('inf'):.0f}x")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
