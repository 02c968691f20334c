#!/usr/bin/python3
"""hcaemu's libibverbs.so.1 with HCAEMU_DEVICE=unix:PATH under Debian's unmodified rdma-core and
perftest 4.5 binaries, each program's own memory registered with the daemon (docs/memory.md):

- `two`: two hcaemud joined by net_memif (each its own EAL prefix and lcore, the memif socket in a
  temp dir, 198.18.2.1 and 198.18.2.2); the server program on daemon A, the client on daemon B;
- `one`: one hcaemud on net_ring0 (198.18.3.1) looping its own address back; both programs its
  clients.

In each mode every program runs as server and as client on hcaemu: ibv_rc/uc/ud/srq_pingpong with
-c (the programs check the bytes), -e, several sizes; ib_write_bw, ib_read_bw, ib_send_bw,
ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat with -a (every size from 2 B to
8 MiB, a few iterations each: every BW and latency test but the atomics, whose size is fixed), -q 4,
-D 1, -c UD, -A FETCH_AND_ADD / CMP_AND_SWAP, -e. Each case:
exit 0 on both sides and the programs' own result lines (check_verbs.pingpong/perftest). The
daemons end by SIGTERM with exit 0. Cases run three at a time (each its own TCP port)."""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_verbs as cv  # noqa: E402
import daemonlib  # noqa: E402
from proclib import expect, report  # noqa: E402

PINGPONGS = [  # prog, args, size, iterations
    ("ibv_rc_pingpong", ["-c"], 4096, 200), ("ibv_rc_pingpong", ["-c", "-e"], 20000, 50),
    ("ibv_uc_pingpong", ["-c"], 1024, 100), ("ibv_ud_pingpong", ["-c", "-e"], 1024, 100),
    ("ibv_srq_pingpong", ["-c", "-e", "-q", "4"], 1000, 50),
]

# prog, args, size (0: perftest's default), iterations (None with -D), rows' iterations (-q), modes.
# Both set-ups run every case: READs of 64 KiB, UD bursts and atomics between two clients of one
# daemon once lost frames past a 64-frame loopback ring (READs stalled ~1 s each; now 4096). The
# latency tests' -a (~12 s each whatever the HCA: perftest samples the CPU's clock for 220 ms twice
# a size) run in one set-up each; the other runs them at a multi-packet size.
PERFTESTS = [
    ("ib_write_bw", ["-a"], 0, 5, None, "one two"), ("ib_write_bw", ["-q", "4"], 8192, 50, 200, "one two"),
    ("ib_write_bw", ["-D", "1"], 65536, None, None, "one two"),
    ("ib_read_bw", [], 65536, 20, None, "one two"), ("ib_read_bw", ["-q", "4"], 4096, 50, 200, "one two"),
    ("ib_read_bw", ["-a"], 0, 5, None, "one two"), ("ib_send_bw", ["-D", "1"], 4096, None, None, "two"),
    ("ib_send_bw", ["-a"], 0, 5, None, "one two"), ("ib_send_bw", ["-e"], 4096, 100, None, "one two"),
    ("ib_send_bw", ["-c", "UD"], 1024, 100, None, "one two"),
    ("ib_atomic_bw", ["-A", "FETCH_AND_ADD"], 0, 50, None, "one two"),
    ("ib_atomic_bw", ["-A", "CMP_AND_SWAP", "-q", "4"], 0, 50, 200, "one two"),
    ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"], 0, 100, None, "one"),
    ("ib_write_lat", [], 8, 200, None, "one two"), ("ib_write_lat", ["-a"], 0, 5, None, "two"),
    ("ib_write_lat", [], 65536, 50, None, "one"), ("ib_read_lat", ["-a"], 0, 5, None, "one"),
    ("ib_read_lat", [], 65536, 50, None, "two"), ("ib_send_lat", ["-a"], 0, 5, None, "two"),
    ("ib_send_lat", [], 65536, 50, None, "one"),
    ("ib_send_lat", ["-c", "UD"], 64, 100, None, "one two"),
    ("ib_read_lat", [], 64, 100, None, "one two"),
    ("ib_send_lat", ["-e"], 64, 100, None, "one two"), ("ib_send_lat", ["-D", "1"], 64, None, None, "one two"),
    ("ib_atomic_lat", ["-A", "FETCH_AND_ADD"], 0, 100, None, "one two"),
    ("ib_atomic_lat", ["-A", "CMP_AND_SWAP"], 0, 100, None, "one two"),
]


def matrix(tmp, mode, ends, only):
    pp = [(tmp, prog, args, size, iters, f"{mode}pp{i}", False, ends, mode)
          for i, (prog, args, size, iters) in enumerate(PINGPONGS) if only in prog + " " + " ".join(args)]
    pt = [(tmp, prog, args, size, iters, f"{mode}pt{i}", total, ends, mode)
          for i, (prog, args, size, iters, total, modes) in enumerate(PERFTESTS)
          if mode in modes.split() and only in prog + " " + " ".join(args)]
    cv.run_cases(cv.pingpong, pp, 3)
    cv.run_cases(cv.perftest, pt, 3)


def stop(d, name):
    rc = d.stop()
    expect(f"{name}: SIGTERM, exit 0", rc == 0, (rc, d.out[-2000:], d.err[-2000:]))


def link_up(ends, timeout=30):
    """A daemon is ready once its socket accepts, its memif link some time later (a loaded machine:
    seconds): ibv_rc_pingpong -n 1 until one passes (ARP answered, one exchange each way)."""
    end = time.time() + timeout
    while time.time() < end:
        port = str(cv.free_port())
        cmd = ["ibv_rc_pingpong", "-d", "hcaemu0", "-g", "1", "-p", port, "-n", "1"]
        r = cv.run_pair("ibv_rc_pingpong", cmd, ends[0][0], cmd + ["127.0.0.1"], ends[1][0], port, "link", timeout=30)
        if r and r[0][0] == 0 and r[1][0] == 0:
            return True
        time.sleep(1)
    return False


def two_daemons(tmp, hcaemud, only):
    tag = f"vd{os.getpid()}"
    sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
    da = daemonlib.Daemon(hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.2.1/24",
                          "52:54:00:18:02:01")
    if not expect("two: daemon A (memif server) ready", da.wait_ready(), da.err):
        return stop(da, "daemon A")
    db = daemonlib.Daemon(hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.2.2/24",
                          "52:54:00:18:02:02")
    try:
        if expect("two: daemon B (memif client) ready", db.wait_ready(), db.err):
            ends = ((cv.env_for(HCAEMU_DEVICE=f"unix:{sa}"), "::ffff:198.18.2.1"),
                    (cv.env_for(HCAEMU_DEVICE=f"unix:{sb}"), "::ffff:198.18.2.2"))
            if expect("two: the memif link between the daemons carries a pingpong (up to 30 s after start)",
                      link_up(ends)):
                matrix(tmp, "two", ends, only)
    finally:
        stop(db, "two: daemon B")
        stop(da, "two: daemon A")


def one_daemon(tmp, hcaemud, only):
    s = os.path.join(tmp, "one.sock")
    d = daemonlib.Daemon(hcaemud, s, daemonlib.ring_eal(0, f"vo{os.getpid()}"), "198.18.3.1/24", "52:54:00:18:03:01")
    try:
        if expect("one: daemon (net_ring0) ready", d.wait_ready(), d.err):
            e = (cv.env_for(HCAEMU_DEVICE=f"unix:{s}"), "::ffff:198.18.3.1")
            matrix(tmp, "one", (e, e), only)
    finally:
        stop(d, "one: daemon")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--mode", choices=["one", "two", "both"], default="both")
    ap.add_argument("--only", default="", help="the cases whose program and arguments contain this")
    a = ap.parse_args()
    cv.setup_env(a.libdir)
    with tempfile.TemporaryDirectory(prefix="hcaemu-verbsd-") as tmp:
        if a.mode in ("two", "both"):
            two_daemons(tmp, a.hcaemud, a.only)
        if a.mode in ("one", "both"):
            one_daemon(tmp, a.hcaemud, a.only)
    return report()


if __name__ == "__main__":
    sys.exit(main())
