#!/usr/bin/python3
"""Benchmark (not a test): what hcaemu's libibverbs.so.1 costs. Debian's perftest (`ib_write_bw
-s 65536`, `ib_write_bw -s 8`, `ib_send_lat -s 8`) through the library (HCAEMU_DEVICE=local, two
processes over DPDK's net_memif), beside `hcaemu perf` with the same test, size and iterations in
the same run; the library's figures as a ratio of hcaemu perf's (BW average: library / perf, above
1 is faster; latency t_typical and t_avg: library / perf, above 1 is slower). Shared machines are
noisy: compare the ratios, not the raw figures; each pair runs `--rounds` times (default 3), the
best figure of each kept."""
import argparse
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import check_perf  # noqa: E402  (run_pair: two hcaemu perf processes over net_memif)
import check_verbs as cv  # noqa: E402  (run_pair, local_ends, table: perftest through the library)

ROW = re.compile(r"^\s*(\d+)\s+(\d+)((?:\s+[\d.]+)+)\s*$")


def figures(out):
    """The first result row's figures after #bytes and #iterations."""
    m = cv.TABLE.search(out or "")
    if not m:
        return None
    for line in out[m.end():].splitlines()[1:]:
        r = ROW.match(line)
        if r:
            return [float(x) for x in r.group(3).split()]
    return None


def lib_run(tmp, prog, size, iters, name):
    port = str(cv.free_port())
    cmd = [prog, "-d", "hcaemu0", "-x", "1", "-u", "18", "-p", port, "-n", str(iters), "-s", str(size)]
    (senv, _), (cenv, _) = cv.local_ends(tmp, name)
    r = cv.run_pair(prog, cmd, senv, cmd + ["127.0.0.1"], cenv, port, name, timeout=300)
    if r is None or r[0][0] != 0 or r[1][0] != 0:
        return None, r
    return figures(r[1][1]), r


def perf_run(hcaemu, test, size, iters):
    r, t = check_perf.run_pair(hcaemu, test, ["-s", str(size), "-n", str(iters)], timeout=300)
    if r is None or r[0] != 0 or r[3] != 0:
        return None, r or t
    return figures(r[4]), r


def best(a, b, lat):
    if a is None:
        return b
    if b is None:
        return a
    pick = min if lat else max
    return [pick(x, y) for x, y in zip(a, b)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cv.setup_env(a.libdir, a.hcaemu)
    ok = True
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine shared with other jobs)")
    with tempfile.TemporaryDirectory(prefix="hcaemu-benchverbs-") as tmp:
        for prog, test, size, iters in (("ib_write_bw", "write_bw", 65536, 5000), ("ib_write_bw", "write_bw", 8, 100000),
                                        ("ib_send_lat", "send_lat", 8, 5000)):
            lat = test.endswith("_lat")
            lf = pf = None
            for i in range(a.rounds):
                f, r = lib_run(tmp, prog, size, iters, f"b{prog}{size}-{i}")
                if f is None:
                    print(f"{prog} -s {size}: the library's run failed: {str(r)[-1500:]}")
                    ok = False
                lf = best(lf, f, lat)
                f, r = perf_run(a.hcaemu, test, size, iters)
                if f is None:
                    print(f"hcaemu perf {test} -s {size}: failed: {str(r)[-1500:]}")
                    ok = False
                pf = best(pf, f, lat)
            if lf is None or pf is None:
                continue
            if lat:  # t_min t_max t_typical t_avg ...
                print(f"{prog} -s {size} -n {iters}: library t_typical {lf[2]:.2f} us, t_avg {lf[3]:.2f} us;"
                      f" hcaemu perf {pf[2]:.2f} us, {pf[3]:.2f} us; library / perf = {lf[2] / pf[2]:.2f}x,"
                      f" {lf[3] / pf[3]:.2f}x")
            else:  # BW peak, BW average [MB/sec], MsgRate [Mpps]
                print(f"{prog} -s {size} -n {iters}: library {lf[1]:.2f} MB/s ({lf[2]:.4f} Mpps);"
                      f" hcaemu perf {pf[1]:.2f} MB/s ({pf[2]:.4f} Mpps); library / perf = {lf[1] / pf[1]:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
