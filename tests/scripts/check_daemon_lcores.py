#!/usr/bin/python3
"""hcaemud --lcores 2 (issue 13: N data-path lcores): two daemons over DPDK's net_memif with two
queue pairs (A the memif server at 198.18.0.1, B the client at 198.18.0.2), `hcaemu perf` clients.

- Two write_bw pairs A <-> B at once, and then two send_bw pairs: each perf process has one CQ for
  its QPs, so each goes to the lcore with fewer QPs (`res show qp` shows each QP's "lcore"): both
  lcores of both daemons carry traffic, and --check finds every byte where it belongs.
- A <-> A (two clients of one daemon): the server's QPs and the client's are on different lcores,
  so every frame of the pair is read on one lcore's queue and steered to the other's.
- `hcaemu stat --json`: per lcore, its engine's packets (lcoreK_rcvd_pkts, lcoreK_sent_pkts),
  what steering did (lcoreK_steer_*), no frame given to an engine that does not own its QP
  (lcoreK_rx_drop_no_qp 0: a frame for a QP of another lcore would be dropped there and counted).
- --lcores with --pcap is refused at start (exit 1, the message names the options); a bad
  --lcores value is a bad argument (exit 2).
- SIGTERM: both daemons exit 0.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemonlib  # noqa: E402
from check_perf import Drain, free_port, results  # noqa: E402

failures = []


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")


def finish():
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    return 0


def qp_rows(hcaemu, dev):
    """The daemon's QPs (`res show qp --json`), or None when it did not answer."""
    r = subprocess.run([hcaemu, "res", "show", "qp", "--json", "--device", dev], capture_output=True, text=True,
                       timeout=60)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def wait_qps(hcaemu, devs, n, timeout=120):
    """Until each daemon of `devs` has exactly n QPs; False on timeout."""
    end = time.time() + timeout
    while time.time() < end:
        counts = [qp_rows(hcaemu, d) for d in devs]
        if all(c is not None and len(c) == n for c in counts):
            return True
        time.sleep(0.05)
    return False


def pid_lcores(hcaemu, dev, proc, n, timeout=120):
    """Once process `proc` has n QPs on `dev`: the set of their lcores (`res show qp`'s "lcore");
    None if it exits first or the timeout passes."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        mine = [r for r in qp_rows(hcaemu, dev) or [] if int(r.get("pid", 0)) == proc.pid]
        if len(mine) == n:
            return {int(r.get("lcore", -1)) for r in mine}
        time.sleep(0.02)
    return None


def link(hcaemu, dev):
    r = subprocess.run([hcaemu, "stat", "--json", "--device", dev], capture_output=True, text=True, timeout=30)
    try:
        j = json.loads(r.stdout)
        return j.get("link", {}), j.get("device", {}), r.stdout
    except ValueError:
        return {}, {}, r.stdout + r.stderr


class Pair:
    """A perf pair: the server on `sdev`, its client on `cdev`, started at once."""

    def __init__(self, hcaemu, test, sdev, cdev, args):
        port = str(free_port())
        base = [hcaemu, "perf", test, "-p", port, "--oob-timeout", "60"] + args
        self.srv = subprocess.Popen(base + ["--device", sdev], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        head = []
        for line in self.srv.stdout:  # the banner, printed just before it listens
            head.append(line)
            if "Waiting for client" in line or len(head) > 10:
                break
        self.head = "".join(head)
        self.sd = Drain(self.srv)
        self.cli = subprocess.Popen(base + ["--device", cdev, "127.0.0.1"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        self.cd = Drain(self.cli)

    def wait(self, timeout=240):
        co, ce, c_end = self.cd.wait(timeout)
        so, se, s_end = self.sd.wait(30)
        return (c_end and s_end, self.srv.returncode, self.head + so, se, self.cli.returncode, co, ce)


def check(label, r, test, sizes, iters):
    ended, rs, so, se, rc, co, ce = r
    detail = f"server rc={rs}\n{so}\n{se}\nclient rc={rc}\n{co}\n{ce}"
    expect(f"{label}: both exit 0", ended and rs == 0 and rc == 0, detail)
    expect(f"{label}: client's table has {sizes} x {iters}", results(co) == [(s, iters) for s in sizes], detail)
    checker = so if test in ("write_bw", "send_bw") else co
    expect(f"{label}: data check: ok", checker.count("data check: ok") == 1 and "FAILED" not in so + co, detail)


def lane_counts(lk):
    return {k: v for k, v in lk.items() if k.startswith("lcore")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hcaemu-lcores-") as tmp:
        tag = str(os.getpid())
        # Bad start-up arguments first: no daemon stays.
        r = subprocess.run([a.hcaemud, "--socket", os.path.join(tmp, "x.sock"), "--lcores", "9"],
                           capture_output=True, text=True, timeout=30)
        expect("--lcores 9: bad argument, exit 2", r.returncode == 2 and "--lcores" in r.stderr, r.stderr)
        r = subprocess.run([a.hcaemud, "--socket", os.path.join(tmp, "x.sock"), "--lcores", "2", "--pcap",
                            os.path.join(tmp, "x.pcap"), "--eal", daemonlib.ring_eal("0", tag + "x")],
                           capture_output=True, text=True, timeout=60)
        expect("--lcores 2 --pcap: refused at start, exit 1, naming the options",
               r.returncode == 1 and "--pcap, --inject and --conform" in r.stderr, f"rc={r.returncode}\n{r.stderr}")

        sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
        lc = ["--lcores", "2"]
        da = daemonlib.Daemon(a.hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.0.1/24",
                              "02:00:00:00:00:01", extra=lc)
        if not da.wait_ready():
            expect("daemon A (memif server, --lcores 2) starts", False, f"rc={da.stop()}\n{da.out}\n{da.err}")
            return finish()
        db = daemonlib.Daemon(a.hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.0.2/24",
                              "02:00:00:00:00:02", extra=lc)
        if not db.wait_ready():
            expect("daemon B (memif client, --lcores 2) starts", False, f"rc={db.stop()}\n{db.out}\n{db.err}")
            da.stop()
            return finish()
        A, B = f"unix:{sa}", f"unix:{sb}"
        try:
            expect("A and B reach each other (ARP on each queue, a small write_bw)", daemonlib.wait_link(a.hcaemu, A, B))
            for test, args, size, n, q in (("write_bw", ["-s", "65536", "-n", "4000", "-q", "4"], 65536, 4000, 4),
                                           ("send_bw", ["-s", "4096", "-n", "100000", "-q", "2"], 4096, 100000, 2)):
                # Pair 1's QPs go to lcore 0 of both daemons (none are placed yet), pair 2's, made
                # while pair 1's exist, to lcore 1. Each client is stopped (SIGSTOP, by PID) as
                # soon as its QPs are on B, so that its pair cannot finish (its QPs gone) before
                # the other's are made and both are listed; then both go on at once.
                # A pair can still finish between its client's QPs showing and the SIGSTOP (a
                # fast transfer, a slow listing under the sanitizers): then the round is run
                # again, at most three times.
                for attempt in range(3):
                    expect(f"{test}: no QP left on A and B before it", wait_qps(a.hcaemu, (A, B), 0))
                    p1 = Pair(a.hcaemu, test, A, B, args + ["--check"])
                    placed = [pid_lcores(a.hcaemu, B, p1.cli, q)]
                    p1.cli.send_signal(signal.SIGSTOP)
                    placed.append(pid_lcores(a.hcaemu, A, p1.srv, q))
                    p2 = Pair(a.hcaemu, test, A, B, args + ["--check"])
                    placed.append(pid_lcores(a.hcaemu, B, p2.cli, q))
                    p2.cli.send_signal(signal.SIGSTOP)
                    placed.append(pid_lcores(a.hcaemu, A, p2.srv, q))
                    p1.cli.send_signal(signal.SIGCONT)
                    p2.cli.send_signal(signal.SIGCONT)
                    ended = any(x.poll() is not None for x in (p1.srv, p1.cli, p2.srv, p2.cli))
                    r1, r2 = p1.wait(), p2.wait()
                    if placed != [{0}, {0}, {1}, {1}] and ended and attempt < 2:
                        print(f"      {test}: a pair ended before it was listed ({placed}), again", flush=True)
                        continue
                    break
                expect(f"{test}: pair 1's QPs on lcore 0 of B and A, pair 2's on lcore 1 (res show qp)",
                       placed == [{0}, {0}, {1}, {1}], f"B p1, A p1, B p2, A p2: {placed} (None: not {q} QPs in 120 s)")
                # perftest's table counts the iterations of every QP
                check(f"{test} pair 1 (lcore 0s)", r1, test, [size], n * q)
                check(f"{test} pair 2 (lcore 1s)", r2, test, [size], n * q)
            before, _, _ = link(a.hcaemu, A)
            p = Pair(a.hcaemu, "write_bw", A, A, ["-s", "8192", "-n", "500", "--check"])
            check("A<->A write_bw -s 8192 (the two ends on different lcores)", p.wait(), "write_bw", [8192], 500)
            after, dev_a, raw_a = link(a.hcaemu, A)
            lb, dev_b, raw_b = link(a.hcaemu, B)
            for name, lk, raw in (("A", after, raw_a), ("B", lb, raw_b)):
                lanes = lane_counts(lk)
                for k in (0, 1):
                    expect(f"{name} lcore{k}: its engine received and sent (rcvd_pkts, sent_pkts > 0)",
                           lanes.get(f"lcore{k}_rcvd_pkts", 0) > 0 and lanes.get(f"lcore{k}_sent_pkts", 0) > 0, raw)
                    expect(f"{name} lcore{k}: no frame for a QP it does not own (rx_drop_no_qp 0)",
                           f"lcore{k}_rx_drop_no_qp" in lanes and lanes[f"lcore{k}_rx_drop_no_qp"] == 0, raw)
                    expect(f"{name} lcore{k}: steering read its queue (steer_rx_own > 0), nothing unparsed",
                           lanes.get(f"lcore{k}_steer_rx_own", 0) > 0 and lanes.get(f"lcore{k}_steer_rx_unparsed", 1) == 0,
                           raw)
                print(f"      {name}: " + " ".join(f"{k}={v}" for k, v in sorted(lanes.items())), flush=True)
            fwd = sum(after.get(f"lcore{k}_steer_forwarded", 0) - before.get(f"lcore{k}_steer_forwarded", 0)
                      for k in (0, 1))
            got = sum(after.get(f"lcore{k}_steer_received", 0) - before.get(f"lcore{k}_steer_received", 0)
                      for k in (0, 1))
            # 500 WRITEs of 8 packets one way and their ACKs the other: each read on the sender's
            # queue (the loopback) and steered to the receiver's lcore.
            expect("A<->A: frames steered between A's lcores (forwarded = received >= 4000)",
                   fwd >= 4000 and got == fwd, f"forwarded {fwd} received {got}\n{raw_a}")
        finally:
            ra, rb = da.stop(), db.stop()
        expect("SIGTERM: daemon A exits 0", ra == 0, f"rc={ra}\n{da.out}\n{da.err}")
        expect("SIGTERM: daemon B exits 0", rb == 0, f"rc={rb}\n{db.out}\n{db.err}")
        if failures:
            failures.append(f"daemon A's stderr:\n{da.err[-3000:]}\ndaemon B's stderr:\n{db.err[-3000:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
