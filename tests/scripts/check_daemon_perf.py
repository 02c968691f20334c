#!/usr/bin/python3
"""`hcaemu perf` through hcaemud (issue 6): two daemons over DPDK's net_memif (A the memif server at
198.18.0.1, B the memif client at 198.18.0.2), each perf process a client of its daemon
(`--device unix:PATH`), the out-of-band exchange over TCP on 127.0.0.1.

- Every perf test (write/read/send/atomic, bw/lat) A <-> B: both exit 0, perftest's tables with the
  size and count asked for, and --check finds the data where it belongs ('data check: ok').
- Two clients on one daemon: server and client both on A (the daemon loops its own traffic back).
- UD receives posted while daemon B is stopped, UD SENDs from A arriving meanwhile: once B runs
  again the SENDs land in those receives (tests/daemon_node ud, with --node).
- A client SIGKILLed in the middle of a transfer while a second pair runs beside it: the second pair
  finishes with its data right; `hcaemu res show` then lists none of the killed process's objects.
- SIGTERM to a perf client of A mid-transfer: exit 143 with one 'interrupted by SIGTERM' line, its
  objects gone from A, its peer failing with a message; to a perf server of B waiting for its
  client: exit 143.
- `hcaemu stat --json` and `hcaemu res show --json` parse and show the traffic.
- SIGTERM: both daemons exit 0 and remove their sockets.
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
from check_perf import free_port, results  # noqa: E402  (the same helpers as the in-process test)
from daemonlib import run_pair, start_server, wait_link  # noqa: E402

failures = []


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")


def check_pair(hcaemu, test, sdev, cdev, args, sizes, iters, label):
    r, t = run_pair(hcaemu, test, sdev, cdev, args)
    if r is None:
        expect(f"{label}: both ends finish", False, t)
        return
    rs, so, se, rc, co, ce = r
    detail = f"server rc={rs}\n{so}\n{se}\nclient rc={rc}\n{co}\n{ce}"
    expect(f"{label}: both exit 0", rs == 0 and rc == 0, detail)
    expect(f"{label}: client's table has sizes {sizes} x {iters}", results(co) == [(s, iters) for s in sizes], detail)
    verb, kind = test.split("_")
    checker = {"write_bw": so, "read_bw": co, "send_bw": so, "atomic_bw": so,
               "write_lat": so + co, "send_lat": so + co, "read_lat": co, "atomic_lat": co}[test]
    n = 2 if kind == "lat" and verb in ("write", "send") else 1
    expect(f"{label}: data check: ok", checker.count("data check: ok") == n and "FAILED" not in so + co, detail)


def res_json(hcaemu, dev, kind):
    r = subprocess.run([hcaemu, "res", "show", kind, "--json", "--device", dev], capture_output=True, text=True,
                       timeout=30)
    try:
        return r.returncode, json.loads(r.stdout), r
    except ValueError:
        return r.returncode, None, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--node", help="tests/daemon_node: the receives-posted-while-stopped case")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hcaemu-dperf-") as tmp:
        tag = str(os.getpid())
        sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
        da = daemonlib.Daemon(a.hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.0.1/24",
                              "02:00:00:00:00:01")
        if not da.wait_ready():
            expect("daemon A (memif server) starts", False, f"rc={da.stop()}\n{da.out}\n{da.err}")
            return finish()
        db = daemonlib.Daemon(a.hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.0.2/24",
                              "02:00:00:00:00:02")
        if not db.wait_ready():
            expect("daemon B (memif client) starts", False, f"rc={db.stop()}\n{db.out}\n{db.err}")
            da.stop()
            return finish()
        A, B = f"unix:{sa}", f"unix:{sb}"
        try:
            # A daemon's socket accepts before its memif link is up (a loaded machine: seconds).
            expect("A and B reach each other (ARP, a small write_bw)", wait_link(a.hcaemu, A, B))
            for test, args, sizes, iters in (
                    ("write_bw", ["-s", "65536", "-n", "200"], [65536], 200),
                    ("read_bw", ["-s", "4096", "-n", "200"], [4096], 200),
                    ("send_bw", ["-s", "4096", "-n", "200"], [4096], 200),
                    ("atomic_bw", ["-n", "200"], [8], 200),
                    ("atomic_bw", ["-n", "200", "-A", "CMP_AND_SWAP"], [8], 200),
                    ("write_lat", ["-s", "64", "-n", "200"], [64], 200),
                    ("read_lat", ["-s", "4096", "-n", "200"], [4096], 200),
                    ("send_lat", ["-s", "2048", "-n", "200"], [2048], 200),
                    ("atomic_lat", ["-n", "200"], [8], 200)):
                check_pair(a.hcaemu, test, A, B, args + ["--check"], sizes, iters,
                           f"A<->B {test} {' '.join(args)}")
            # two clients of one daemon, talking through its loopback
            check_pair(a.hcaemu, "write_bw", A, A, ["-s", "8192", "-n", "200", "--check"], [8192], 200,
                       "A<->A write_bw -s 8192")
            check_pair(a.hcaemu, "send_lat", B, B, ["-s", "64", "-n", "200", "--check"], [64], 200,
                       "B<->B send_lat -s 64")
            if a.node:
                stalled_receive_case(a.node, da, db, tmp)
            sigkill_case(a.hcaemu, A, B)
            sigterm_case(a.hcaemu, A, B)
            rc, st, r = (lambda r: (r.returncode, r.stdout, r))(
                subprocess.run([a.hcaemu, "stat", "--json", "--device", A], capture_output=True, text=True, timeout=30))
            try:
                j = json.loads(st)
            except ValueError:
                j = None
            expect("stat --json on A: exit 0, valid JSON", rc == 0 and isinstance(j, dict), f"{r.stdout}\n{r.stderr}")
            if isinstance(j, dict):
                dev = j.get("device", {})
                expect("stat --json on A: device counters show the traffic (sent_pkts, rcvd_pkts > 0)",
                       isinstance(dev, dict) and dev.get("sent_pkts", 0) > 0 and dev.get("rcvd_pkts", 0) > 0, st)
        finally:
            ra, rb = da.stop(), db.stop()
        expect("SIGTERM: daemon A exits 0", ra == 0, f"rc={ra}\n{da.out}\n{da.err}")
        expect("SIGTERM: daemon B exits 0", rb == 0, f"rc={rb}\n{db.out}\n{db.err}")
        expect("SIGTERM: both control sockets removed", not os.path.exists(sa) and not os.path.exists(sb))
    return finish()


def wait_file(path, proc, seconds=30):
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None and not os.path.exists(path):
        time.sleep(0.02)
    return os.path.exists(path)


def stalled_receive_case(node, da, db, tmp):
    """UD receives posted while b's daemon B is stopped (SIGSTOP: they sit in b's ring) and a's
    UD SENDs sent through A meanwhile (they sit in B's memif ring): once B runs again, the
    receives posted first take the SENDs (as on an HCA, where a posted WQE is seen by any packet
    arriving after it), none of them dropped for want of a receive."""
    d = os.path.join(tmp, "stall")
    os.mkdir(d)
    open(os.path.join(d, "stall"), "w").close()
    b = subprocess.Popen([node, "ud", db.sock, d, "b"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    a = subprocess.Popen([node, "ud", da.sock, d, "a"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped = False
    try:
        if wait_file(os.path.join(d, "rts.b"), b):
            db.p.send_signal(signal.SIGSTOP)  # our daemon B, by its PID
            stopped = True
            open(os.path.join(d, "stopped"), "w").close()
            sent = wait_file(os.path.join(d, "sent.a"), a)
            expect("stalled receives: a's UD SENDs complete through A while B is stopped", sent)
            time.sleep(0.3)  # the frames are in B's memif ring, the receives in b's ring
    finally:
        if stopped:
            db.p.send_signal(signal.SIGCONT)
    outs = {}
    for name, p in (("b", b), ("a", a)):
        try:
            outs[name] = p.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            outs[name] = p.communicate()[0]
    expect("stalled receives: b takes both UD SENDs byte-exact, a sees it done (both exit 0)",
           b.returncode == 0 and "OK ud b" in outs["b"] and a.returncode == 0 and "OK ud a" in outs["a"],
           f"b rc={b.returncode}\n{outs['b']}\na rc={a.returncode}\n{outs['a']}")


def sigkill_case(hcaemu, A, B):
    """Pair 1 (victim) and pair 2 run at once, A's side the client of both; pair 1's client is
    SIGKILLed in the middle; pair 2 must finish with its data right; A must free pair 1's objects."""
    p1, p2 = free_port(), free_port()
    s1, _ = start_server(hcaemu, "write_bw", B, p1, ["-s", "65536", "-n", "2000000"])
    s2, _ = start_server(hcaemu, "write_bw", B, p2, ["-s", "4096", "-n", "20000", "--check"])
    c1 = subprocess.Popen([hcaemu, "perf", "write_bw", "--device", A, "-p", str(p1), "--oob-timeout", "30",
                           "-s", "65536", "-n", "2000000", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    c2 = subprocess.Popen([hcaemu, "perf", "write_bw", "--device", A, "-p", str(p2), "--oob-timeout", "30",
                           "-s", "4096", "-n", "20000", "--check", "127.0.0.1"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    # Mid-transfer: once A holds the victim's QP in RTS (its objects exist), give it a moment to run.
    victim_seen = False
    end = time.monotonic() + 30
    while time.monotonic() < end and not victim_seen:
        rc, objs, _ = res_json(hcaemu, A, "qp")
        victim_seen = rc == 0 and isinstance(objs, list) and any(o.get("pid") == c1.pid for o in objs)
        time.sleep(0.1)
    expect("SIGKILL case: the victim's QP is listed by res show qp on A while it runs", victim_seen)
    # In the middle of a transfer: alive, its QP in RTS with WRITEs outstanding in its send queue.
    # Looked for, not slept for: with two daemons and four programs polling on two cores the victim
    # can be off its CPU long enough for A to retire its whole send queue (ci52: RTS, sq_used 0
    # half a second after its QP appeared).
    busy, mine = False, []
    end = time.monotonic() + 20
    while time.monotonic() < end and not busy and c1.poll() is None:
        rc, objs, _ = res_json(hcaemu, A, "qp")
        mine = [o for o in objs or [] if o.get("pid") == c1.pid]
        busy = len(mine) == 1 and mine[0].get("state") == "RTS" and int(mine[0].get("sq_used", 0)) > 0
        if not busy:
            time.sleep(0.02)
    busy = busy and c1.poll() is None
    expect("SIGKILL case: the victim is in the middle of its transfer when killed (RTS, WQEs outstanding)", busy, mine)
    c1.send_signal(signal.SIGKILL)
    c1.communicate(timeout=30)
    # The daemon frees what the victim held once it sees the connection close.
    gone = False
    left = {}
    end = time.monotonic() + 10
    while time.monotonic() < end and not gone:
        left = {}
        for kind in ("pd", "mr", "cq", "qp", "srq"):
            rc, objs, _ = res_json(hcaemu, A, kind)
            left[kind] = None if objs is None else [o for o in objs if o.get("pid") == c1.pid]
        gone = all(v == [] for v in left.values())
        time.sleep(0.1)
    expect("SIGKILL case: res show pd|mr|cq|qp|srq on A lists none of the victim's objects", gone, left)
    try:
        o2, e2 = c2.communicate(timeout=120)
        so2, se2 = s2.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        c2.kill()
        s2.kill()
        o2, e2 = c2.communicate()
        so2, se2 = s2.communicate()
    d = f"client rc={c2.returncode}\n{o2}\n{e2}\nserver rc={s2.returncode}\n{so2}\n{se2}"
    expect("SIGKILL case: the other pair finishes, both exit 0", c2.returncode == 0 and s2.returncode == 0, d)
    expect("SIGKILL case: the other pair's data check: ok", "data check: ok" in so2, d)
    # The victim's peer server fails on its own (its peer vanished); bounded by --oob-timeout.
    try:
        s1.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        s1.kill()
        s1.communicate()
    expect("SIGKILL case: the victim's peer exits with a failure, not a hang", s1.returncode not in (0, None))


def sigterm_case(hcaemu, A, B):
    """A perf client (through A) stopped by SIGTERM mid-transfer, then a server (through B) waiting."""
    port = free_port()
    srv, _ = start_server(hcaemu, "write_bw", B, port, ["-s", "4096", "-n", "2000000", "--oob-timeout", "5"])
    cli = subprocess.Popen([hcaemu, "perf", "write_bw", "--device", A, "-p", str(port), "--oob-timeout", "5",
                            "-s", "4096", "-n", "2000000", "127.0.0.1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    seen = False
    end = time.monotonic() + 30
    while time.monotonic() < end and not seen and cli.poll() is None:
        rc, objs, _ = res_json(hcaemu, A, "qp")
        seen = rc == 0 and isinstance(objs, list) and any(o.get("pid") == cli.pid and o.get("state") == "RTS"
                                                          for o in objs)
        time.sleep(0.1)
    time.sleep(0.5)  # into the transfer
    cli.send_signal(signal.SIGTERM)
    try:
        co, ce = cli.communicate(timeout=30)
        so, se = srv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        cli.kill()  # our own children, by their handles
        srv.kill()
        co, ce = cli.communicate()
        so, se = srv.communicate()
    d = f"client rc={cli.returncode}\n{co}\n{ce}\nserver rc={srv.returncode}\n{so}\n{se}"
    expect("SIGTERM case: the client through A mid-transfer exits 143, 'hcaemu perf: interrupted by SIGTERM' once",
           seen and cli.returncode == 143 and ce.count("hcaemu perf: interrupted by SIGTERM\n") == 1
           and ce.count("hcaemu perf:") == 1, d)
    left = {}
    for kind in ("pd", "mr", "cq", "qp"):
        rc, objs, _ = res_json(hcaemu, A, kind)
        left[kind] = None if objs is None else [o for o in objs if o.get("pid") == cli.pid]
    expect("SIGTERM case: A lists none of the stopped client's objects", all(v == [] for v in left.values()), left)
    expect("SIGTERM case: its peer server exits 1 with a message", srv.returncode == 1 and "hcaemu perf: " in se, d)

    srv, head = start_server(hcaemu, "write_bw", B, free_port(), ["--oob-timeout", "60"])
    srv.send_signal(signal.SIGTERM)
    try:
        so, se = srv.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
        so, se = srv.communicate()
    expect("SIGTERM case: a server through B waiting for its client exits 143, says so",
           srv.returncode == 143 and se.count("hcaemu perf: interrupted by SIGTERM\n") == 1,
           f"rc={srv.returncode}\n{''.join(head)}{so}\n{se}")


def finish():
    if failures:
        print(f"\n{len(failures)} check(s) failed:", file=sys.stderr)
        for f in failures:
            print(f, file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
