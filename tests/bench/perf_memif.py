#!/usr/bin/python3
"""Benchmark (not a test): hcaemu's data path against the wire's own limit, in the same run.

The bound: bench_wire (tests/bench/bench_wire.cpp), a bare DPDK burst loop over the same net_memif
pair `hcaemu perf` uses (two processes, one lcore each, bsize=10240): a sender of bursts of 32
frames against a sink (receive and free) for the frame and byte rate, at 64 B and at the frame of a
full-MTU RoCE v2 WRITE packet (WRITE_MIDDLE: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload +
ICRC 4 = MTU + 58: 1082 B at RoCE MTU 1024, 4154 B at RoCE MTU 4096); and a ping-pong of one 64 B
frame against an echo (rx -> tx of the same mbuf) for the half round trip.

Beside it, `hcaemu perf` between two processes over net_memif: write_bw -s 65536 at RoCE MTU 1024
(link MTU 1500) and 4096 (link MTU 9000) against the byte rate at that frame size; send_bw and
write_bw -s 8 (message rate, -n 200000, CQ moderation 100: perftest's window; and -D 2, the
steady state) against the 64 B frame rate; send_lat and write_lat
-s 8 (t_typical and 99.9%) against the half round trip; and bench_transport's 1 MiB WRITE at RoCE
MTU 1024 and 4096 against memcpy of the same working set (its own ratio). Each figure is measured --rounds times (each round
measures the bound and then the figures); the median is printed, and the median of the rounds'
ratios. --compare OTHER_HCAEMU runs the hcaemu figures with a second binary too, the two taking turns
at going first in each round, and prints the ratio of the two per round (a before/after on a machine too
loaded for figures far apart in time to compare). Shared machines are noisy: compare the ratios,
not the raw figures.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import check_perf  # noqa: E402  (run_pair: two hcaemu processes over net_memif)

BW = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
LAT = re.compile(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
SINK = re.compile(r"^sink: (\d+) frames, (\d+) bytes in ([\d.]+) s: ([\d.]+) Mpps [\d.]+ Gbit/s ([\d.]+) GB/s")
PING = re.compile(r"median ([\d.]+) average ([\d.]+) 99% ([\d.]+) 99.9% ([\d.]+)")
EAL = "--no-huge -m 512 --no-pci --no-shconf --log-level lib.eal:error"
FRAMES = {64: 64, 1024: 1082, 4096: 4154}  # RoCE MTU -> a full WRITE_MIDDLE frame


def memcpy_gbs(n=64 << 20, rounds=5):
    """Python copying one 64 MiB buffer into another (a single memcpy underneath), best of 5."""
    src = bytearray(os.urandom(1 << 20)) * (n >> 20)
    dst = bytearray(n)
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        dst[:] = src
        dt = time.perf_counter() - t
        best = max(best, n / dt / 1e9)
    return best


def wire(bench_wire, rx_mode, tx_args, tag, mtu=1500):
    """bench_wire's receiving end (memif server) and sending end (client), mbufs as hcaemu's port
    makes them at link MTU mtu; both outputs."""
    with tempfile.TemporaryDirectory(prefix="hcaemu-wire-") as tmp:
        common = f"socket={os.path.join(tmp, 'm.sock')},socket-abstract=no,bsize=10240"
        rx = subprocess.Popen([bench_wire, rx_mode, "--mtu", str(mtu), "--max-seconds", "60", "--eal",
                               f"{EAL} -l 0 --file-prefix=wr{tag} --vdev=net_memif0,role=server,{common}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(100):  # the socket file: the server is listening
            if os.path.exists(os.path.join(tmp, "m.sock")):
                break
            time.sleep(0.05)
        try:
            tx = subprocess.run([bench_wire] + tx_args + ["--mtu", str(mtu), "--eal",
                                 f"{EAL} -l 1 --file-prefix=wt{tag} --vdev=net_memif0,role=client,{common}"],
                                capture_output=True, text=True, timeout=120)
            ro, re_ = rx.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            rx.kill()
            rx.communicate()
            return None, None
        return ro + re_, tx.stdout + tx.stderr


def wire_rate(bench_wire, size, tag):
    # hcaemu perf's link MTU for that frame: 1500, or 9000 at RoCE MTU 4096
    ro, _ = wire(bench_wire, "sink", ["send", "--size", str(size), "--seconds", "2"], tag,
                 1500 if size <= 1518 else 9000)
    m = [x for x in (SINK.match(l) for l in (ro or "").splitlines()) if x]
    return (float(m[0].group(4)), float(m[0].group(5))) if m else None  # Mpps, GB/s


def wire_ping(bench_wire, tag):
    _, to = wire(bench_wire, "echo", ["ping", "--size", "64", "--count", "20000", "--warmup", "1000"], tag)
    m = PING.search(to or "")
    return (float(m.group(1)), float(m.group(4))) if m else None  # median, 99.9% (usec)


def hcaemu(hc, test, args):
    r, _ = check_perf.run_pair(hc, test, args, timeout=300)
    if r is None or r[0] != 0 or r[3] != 0:
        return None
    out = r[4]
    if test.endswith("_bw"):
        m = [x for x in (BW.match(l) for l in out.splitlines()) if x]
        return (float(m[0].group(4)) * 1048576 / 1e9, float(m[0].group(5))) if m else None  # GB/s, Mpps
    m = [x for x in (LAT.match(l) for l in out.splitlines()) if x]
    return (float(m[0].group(5)), float(m[0].group(9))) if m else None  # t_typical, 99.9% (usec)


def transport(bench_transport):
    """{RoCE MTU: (GB/s, memcpy GB/s)} of bench_transport's 1 MiB WRITE rows."""
    r = subprocess.run([bench_transport, "write", "1048576"], capture_output=True, text=True, timeout=600)
    rows = {}
    for l in r.stdout.splitlines():
        f = l.split()
        if len(f) >= 8 and f[0] == "write" and f[1] == "1048576":
            rows[int(f[2])] = (float(f[5]), float(f[7]))
    return rows if r.returncode == 0 and len(rows) == 2 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--bench-wire", required=True)
    ap.add_argument("--bench-transport")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", help="another hcaemu binary (an older build): its figures too, run right after "
                                      "this one's in each round, and the ratio of the two")
    a = ap.parse_args()
    bins = [("", a.hcaemu)] + ([("(compare) ", a.compare)] if a.compare else [])
    # name -> list over rounds of (figure, bound, ratio); ratio > 1 is better than the bound for rates
    rows = {}
    order = []

    def add(name, fig, bound, ratio, unit, bunit):
        if name not in rows:
            rows[name] = []
            order.append((name, unit, bunit))
        rows[name].append((fig, bound, ratio))

    ok = True
    for rnd in range(a.rounds):
        tag = f"{os.getpid()}r{rnd}"
        rate = {mtu: wire_rate(a.bench_wire, fr, f"{tag}s{fr}") for mtu, fr in FRAMES.items()}
        ping = wire_ping(a.bench_wire, tag + "p")
        print(f"round {rnd + 1}: wire {', '.join(f'{FRAMES[k]} B {v[0]:.3f} Mpps {v[1]:.3f} GB/s' if v else f'{FRAMES[k]} B failed' for k, v in rate.items())};"
              f" ping half round trip {ping}", flush=True)
        for label, hc in (bins if rnd % 2 == 0 else bins[::-1]):  # --compare: each goes first in turn
            for mtu, link in ((1024, "1500"), (4096, "9000")):
                h = hcaemu(hc, "write_bw", ["-s", "65536", "-n", "5000", "-m", str(mtu), "--link-mtu", link])
                if h and rate[mtu]:
                    add(f"{label}write_bw -s 65536 -m {mtu} vs {FRAMES[mtu]} B frames", h[0], rate[mtu][1], h[0] / rate[mtu][1], "GB/s", "GB/s")
                else:
                    ok = False
                    print(f"{label}write_bw -s 65536 -m {mtu}: failed ({h}, {rate[mtu]})")
            # perftest's window (-t 128, a completion every 100: the sender waits for an ACK's
            # round trip every 100 messages), and the steady state without it (-D: every WR
            # signaled, measured after a warm-up, as perftest's duration mode)
            for test in ("write_bw", "send_bw"):
                for how, args in (("", ["-n", "200000"]), (" -D 2", ["-D", "2"])):
                    h = hcaemu(hc, test, ["-s", "8"] + args)
                    if h and rate[64]:
                        add(f"{label}{test} -s 8{how} msg rate vs 64 B frames", h[1], rate[64][0], h[1] / rate[64][0], "Mmsg/s", "Mpps")
                    else:
                        ok = False
                        print(f"{label}{test} -s 8{how}: failed ({h}, {rate[64]})")
            for test in ("send_lat", "write_lat"):
                h = hcaemu(hc, test, ["-s", "8", "-n", "10000"])
                if h and ping:
                    add(f"{label}{test} -s 8 t_typical vs half RTT", h[0], ping[0], h[0] / ping[0], "usec", "usec")
                    add(f"{label}{test} -s 8 99.9% vs its typical", h[1], h[0], h[1] / h[0], "usec", "usec")
                    add(f"{label}{test} -s 8 99.9% vs half RTT 99.9%", h[1], ping[1], h[1] / ping[1], "usec", "usec")
                else:
                    ok = False
                    print(f"{label}{test} -s 8: failed ({h}, {ping})")
        if a.bench_transport:
            t = transport(a.bench_transport)
            if t:
                for mtu, (gbs, bound) in sorted(t.items()):
                    add(f"bench_transport write 1 MiB, MTU {mtu} vs memcpy", gbs, bound, gbs / bound, "GB/s", "GB/s")
            else:
                ok = False
                print("bench_transport: failed")
    print(f"\nmedians of {a.rounds} rounds (ratio: the median of the rounds' own ratios)")
    print(f"{'figure':<48} {'hcaemu':>10} {'bound':>10} {'ratio':>7}")
    for name, unit, bunit in order:
        v = rows[name]
        fig = statistics.median(x[0] for x in v)
        bound = statistics.median(x[1] for x in v)
        ratio = statistics.median(x[2] for x in v)
        print(f"{name:<48} {fig:>10.3f} {bound:>10.3f} {ratio:>7.2f}   ({unit} / {bunit}; rounds: "
              + ", ".join(f"{x[2]:.2f}" for x in v) + ")")
    if a.compare:
        print(f"\nthis build against --compare, per round (figure / compare's figure; for latencies below 1 is faster)")
        for name, unit, bunit in order:
            if name.startswith("(compare) ") or "(compare) " + name not in rows:
                continue
            r = [x[0] / y[0] for x, y in zip(rows[name], rows["(compare) " + name]) if y[0]]
            if r:
                print(f"{name:<48} {statistics.median(r):>7.2f}   (rounds: " + ", ".join(f"{x:.2f}" for x in r) + ")")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
