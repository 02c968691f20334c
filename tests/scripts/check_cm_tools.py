#!/usr/bin/python3
"""`hcaemu pingpong -R` (rdma_cm, the IB CM on QP1: docs/cm.md) between two hcaemu processes joined by
DPDK's net_memif, and between two clients of two hcaemud joined the same way; a -R client to a port
nobody listens on is rejected with reason 8; the CM counters of each side (--stats) count each MAD.

usage: check_cm_tools.py --hcaemu HCAEMU --hcaemud HCAEMUD
Exit 0 when every check passes, 1 otherwise."""
import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemonlib  # noqa: E402
import proclib  # noqa: E402
from proclib import finish, memif, start  # noqa: E402

failures = []
ADDR = re.compile(r"^  (local|remote) address: +LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$", re.M)


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")
        print(f"FAIL {name}", flush=True)
    else:
        print(f"ok   {name}", flush=True)


def stats(err):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(cm_\w+|gsi_\w+) +(\d+)$", err, re.M)}


def check_pair(name, s, c, iters, size):
    (rc_s, out_s, err_s), (rc_c, out_c, err_c) = s, c
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect(f"{name}: both exit 0", rc_s == 0 and rc_c == 0, detail)
    a_s = {m.group(1): m.group(2, 3, 4, 5) for m in ADDR.finditer(out_s)}
    a_c = {m.group(1): m.group(2, 3, 4, 5) for m in ADDR.finditer(out_c)}
    expect(f"{name}: each side's remote address (QPN, PSN chosen by the CM, GID) is the other's local one",
           "local" in a_s and a_s.get("remote") == a_c.get("local") and a_c.get("remote") == a_s.get("local"), detail)
    for who, out in (("server", out_s), ("client", out_c)):
        expect(f"{name}: {who} checked {iters} messages of {size} bytes",
               f"data check: {iters} messages of {size} bytes received as sent" in out, out)
    return stats(err_s), stats(err_c)


def run_pair(srv, cli, settle=2.0):
    ps = start(srv)
    time.sleep(settle)  # the server listens before the client's REQ (no TCP to wait on with -R)
    pc = start(cli)
    c = finish(pc)
    s = finish(ps)
    return s, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    a = ap.parse_args()
    h = a.hcaemu
    pp = ["pingpong", "-R", "-p", "7471", "-s", "2048", "-n", "200", "-c", "--timeout", "20", "--stats"]
    with tempfile.TemporaryDirectory(prefix="hcaemu-cm-") as tmp:
        # ---- two processes over net_memif
        sock = os.path.join(tmp, "pp.sock")
        srv = [h] + pp + ["--eal", proclib.eal(0, memif("server", sock), mem=256), "--ip", "198.18.0.1/24",
                          "--mac", "52:54:00:18:00:01"]
        cli = [h] + pp + ["--eal", proclib.eal(1, memif("client", sock), mem=256), "--ip", "198.18.0.2/24",
                          "--mac", "52:54:00:18:00:02", "198.18.0.1"]
        s, c = run_pair(srv, cli)
        ss, cs = check_pair("pingpong -R over net_memif", s, c, 200, 2048)
        detail = f"server {ss}\nclient {cs}"
        expect("pingpong -R: one REQ, REP, RTU each way; a DREQ/DREP exchange at the end",
               cs.get("cm_req_sent") == 1 and ss.get("cm_req_rcvd") == 1 and ss.get("cm_rep_sent") == 1
               and cs.get("cm_rep_rcvd") == 1 and cs.get("cm_rtu_sent") == 1 and ss.get("cm_rtu_rcvd") == 1
               and cs.get("cm_dreq_sent", 0) + ss.get("cm_dreq_sent", 0) >= 1
               and cs.get("cm_drep_sent", 0) + ss.get("cm_drep_sent", 0) >= 1
               and not cs.get("cm_retries") and not ss.get("cm_retries") and not ss.get("cm_rx_invalid"), detail)

        # ---- a -R client to a port nobody listens on: REJ 8
        sock = os.path.join(tmp, "rej.sock")
        # The server side here is a pingpong -R on another port: it listens on 7000, the client asks 7001.
        srv = [h, "pingpong", "-R", "-p", "7000", "--timeout", "6", "--eal", proclib.eal(0, memif("server", sock), mem=256),
               "--ip", "198.18.0.1/24", "--mac", "52:54:00:18:00:01"]
        cli = [h, "pingpong", "-R", "-p", "7001", "--timeout", "6", "--eal", proclib.eal(1, memif("client", sock), mem=256),
               "--ip", "198.18.0.2/24", "--mac", "52:54:00:18:00:02", "198.18.0.1"]
        (rc_s, out_s, err_s), (rc_c, out_c, err_c) = run_pair(srv, cli)
        expect("pingpong -R to a port nobody listens on: the client is rejected with reason 8 (exit 1)",
               rc_c == 1 and "rdma_connect: rejected, reason 8" in err_c, f"rc={rc_c}\n{out_c}\n{err_c}")

        # ---- through two hcaemud over net_memif
        tag = str(os.getpid())
        sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
        mtmp = os.path.join(tmp, "d")
        os.mkdir(mtmp)
        da = daemonlib.Daemon(a.hcaemud, sa, daemonlib.memif_eal(mtmp, "server", "0", tag), "198.18.0.1/24",
                              "02:00:00:00:00:01")
        db = None
        try:
            expect("daemon A starts", da.wait_ready())
            db = daemonlib.Daemon(a.hcaemud, sb, daemonlib.memif_eal(mtmp, "client", "1", tag), "198.18.0.2/24",
                                  "02:00:00:00:00:02")
            expect("daemon B starts", db.wait_ready())
            # A daemon's socket accepts before its memif link is up (a loaded machine: seconds).
            expect("A and B reach each other (ARP, a small write_bw)",
                   daemonlib.wait_link(h, f"unix:{sa}", f"unix:{sb}"))
            srv = [h] + pp + ["--device", f"unix:{sa}"]
            cli = [h] + pp + ["--device", f"unix:{sb}", "198.18.0.1"]
            s, c = run_pair(srv, cli, settle=1.0)
            ss, cs = check_pair("pingpong -R through two hcaemud", s, c, 200, 2048)
            expect("pingpong -R through hcaemud: the daemons' agents exchanged REQ, REP, RTU",
                   cs.get("cm_req_sent") == 1 and ss.get("cm_req_rcvd") == 1 and ss.get("cm_rep_sent") == 1
                   and cs.get("cm_rtu_sent") == 1 and ss.get("cm_rtu_rcvd") == 1, f"server {ss}\nclient {cs}")
        finally:
            rb = db.stop() if db else None
            ra = da.stop()
            expect("both daemons stop with SIGTERM, exit 0", ra == 0 and rb == 0,
                   f"A rc={ra}\n{da.out}\n{da.err}\nB rc={rb}\n{db.out if db else ''}\n{db.err if db else ''}")
    print(f"{len(failures)} failure(s)")
    for f in failures:
        print("----", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
