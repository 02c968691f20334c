#!/usr/bin/python3
"""Benchmark (not a test): many QPs against one, in the same run (issue 13: 1024 QPs' aggregate
>= 0.8x one QP's).

`hcaemu perf write_bw` and `send_bw` between two processes over net_memif (as perf_memif.py), once
with one QP and once with --qps QPs (default 1024), which the client posts to round-robin (each
QP in turn gets what its send queue has room for, as perftest does); both move the same bytes
(-n is divided among the QPs). Each round runs the pair in both orders' turn (one QP first in
even rounds, the many first in odd ones); the medians are printed, and the median of the rounds'
own ratios (aggregate / one QP). With --hcaemud the same through two daemons (perf_daemon.py's
setup) as well. With --bench-mem, each round also measures the machine's own bound for that
working set (bench_mem: gather and scatter of the same messages over one buffer against QPS
buffers, in RoCE MTU pieces), printed beside. Shared machines are noisy: compare the ratios, not
the raw figures.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import check_perf  # noqa: E402  (run_pair: two in-process hcaemu over net_memif)
import daemonlib  # noqa: E402

BW = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
MEM = re.compile(r"^(gather|scatter)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def mem_bound(bench_mem, size, qps):
    """{'gather': (one, many, ratio), 'scatter': ...} from bench_mem, None if it failed."""
    r = subprocess.run([bench_mem, str(size), str(qps), "1024"], capture_output=True, text=True, timeout=120)
    rows = {m.group(1): tuple(float(m.group(i)) for i in (2, 3, 4))
            for m in (MEM.match(l) for l in r.stdout.splitlines()) if m}
    return rows if r.returncode == 0 and len(rows) == 2 else None


def bw(r):
    """(GB/s, Mmsg/s) of the client's row, None if the pair failed."""
    if r is None or r[0] != 0 or r[3] != 0:
        return None
    m = [x for x in (BW.match(l) for l in r[4].splitlines()) if x]
    return (float(m[0].group(4)) * 1048576 / 1e9, float(m[0].group(5))) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", help="also through two daemons")
    ap.add_argument("--qps", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--messages", type=int, default=5120, help="messages of a run, all QPs together")
    ap.add_argument("--bench-mem", help="bench_mem: the memory bound of the working set, each round")
    a = ap.parse_args()
    per_qp = max(5, a.messages // a.qps)  # perf's -n is at least 5
    tests = ("write_bw", "send_bw")
    rows = {}  # (mode, test) -> [(one, many)]
    mems = []  # bench_mem's rows, one a round
    ok = True

    def runs(mode, run):
        nonlocal ok
        for rnd in range(a.rounds):
            if a.bench_mem and mode == "in-process":
                m = mem_bound(a.bench_mem, a.size, a.qps)
                if m:
                    mems.append(m)
                    print(f"round {rnd + 1} memory bound: gather {m['gather'][2]:.2f}, scatter {m['scatter'][2]:.2f}"
                          f" ({a.qps} buffers / 1)", flush=True)
                else:
                    ok = False
                    print(f"round {rnd + 1} memory bound: bench_mem failed", flush=True)
            for test in tests:
                res = {}
                order = (1, a.qps) if rnd % 2 == 0 else (a.qps, 1)
                for q in order:
                    n = a.messages if q == 1 else per_qp
                    r = run(test, ["-s", str(a.size), "-n", str(n), "-q", str(q)])
                    res[q] = bw(r)
                if res[1] and res[a.qps]:
                    rows.setdefault((mode, test), []).append((res[1], res[a.qps]))
                    print(f"round {rnd + 1} {mode} {test}: 1 QP {res[1][0]:.3f} GB/s, {a.qps} QPs {res[a.qps][0]:.3f} GB/s"
                          f" = {res[a.qps][0] / res[1][0]:.2f}", flush=True)
                else:
                    ok = False
                    print(f"round {rnd + 1} {mode} {test}: failed (1 QP {res[1]}, {a.qps} QPs {res[a.qps]})", flush=True)

    runs("in-process", lambda test, args: check_perf.run_pair(a.hcaemu, test, args, timeout=300)[0])
    if a.hcaemud:
        with tempfile.TemporaryDirectory(prefix="hcaemu-bqps-") as tmp:
            tag = str(os.getpid())
            sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
            da = daemonlib.Daemon(a.hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.0.1/24")
            db = daemonlib.Daemon(a.hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.0.2/24") \
                if da.wait_ready() else None
            if db and db.wait_ready() and daemonlib.wait_link(a.hcaemu, f"unix:{sa}", f"unix:{sb}"):
                runs("hcaemud", lambda test, args: daemonlib.run_pair(a.hcaemu, test, f"unix:{sa}", f"unix:{sb}",
                                                                              args, timeout=300)[0])
            else:
                ok = False
                print("hcaemud: the daemons did not start")
            for d in (da, db):
                if d:
                    d.stop()
    print(f"\nmedians of {a.rounds} rounds, {a.size} B messages, {a.messages} a run "
          f"({per_qp} per QP with {a.qps}); ratio: the median of the rounds' own ({a.qps} QPs / 1 QP)")
    for (mode, test), v in rows.items():
        one = statistics.median(x[0][0] for x in v)
        many = statistics.median(x[1][0] for x in v)
        ratio = statistics.median(x[1][0] / x[0][0] for x in v)
        print(f"{mode:<11} {test:<9} 1 QP {one:.3f} GB/s   {a.qps} QPs {many:.3f} GB/s   ratio {ratio:.2f}"
              f"   (rounds: " + ", ".join(f"{x[1][0] / x[0][0]:.2f}" for x in v) + ")")
    for kind in ("gather", "scatter") if mems else ():
        one = statistics.median(m[kind][0] for m in mems)
        many = statistics.median(m[kind][1] for m in mems)
        print(f"{'bound':<11} {kind:<9} 1 buf {one:.3f} GB/s   {a.qps} bufs {many:.3f} GB/s   ratio "
              f"{statistics.median(m[kind][2] for m in mems):.2f}   (memcpy in 1024 B pieces, one core)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
