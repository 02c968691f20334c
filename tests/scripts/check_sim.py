#!/usr/bin/python3
"""`hcaemu sim` end to end: every operation verifies under seeded faults; every frame it puts on
the wire, written with --pcap, parses with hcaemu's packet layer (dissect --strict) and decodes in
tshark with no malformed frame; a run that must fail exits 1 with the first difference; bad
arguments exit 2; SIGINT ends a long run with exit 130, one message and a whole capture."""
import argparse
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

failures = []


def run(args, timeout=300):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-1500:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    h = ap.parse_args().hcaemu
    faults = ["--loss", "0.1", "--dup", "0.05", "--reorder", "0.05", "--corrupt", "0.05", "--delay", "0.05"]
    ops = ["send", "send_imm", "write", "write_imm", "read", "cmp_swap", "fetch_add", "mix", "uc_write", "ud_send"]
    for op in ops:
        for seed in ("1", "2"):
            size = "1000" if op == "ud_send" else "2500"
            rc, out, err = run([h, "sim", "--op", op, "--size", size, "--count", "60", "--seed", seed, "--quiet"] + faults)
            expect(f"sim {op} seed {seed}", rc == 0 and "verify            OK" in out, (rc, out, err))
    for mtu in ("256", "4096"):
        rc, out, err = run([h, "sim", "--op", "mix", "--mtu", mtu, "--size", "9000", "--count", "20", "--quiet"] + faults)
        expect(f"sim mtu {mtu}", rc == 0 and "verify            OK" in out, (rc, out))

    with tempfile.TemporaryDirectory() as tmp:
        # The trace: one line per packet and event, then the summary.
        rc, out, err = run([h, "sim", "--op", "write", "--size", "3000", "--count", "2", "--loss", "0.2", "--seed", "3"])
        expect("trace", rc == 0 and "send  198.18.0.1 -> 198.18.0.2 RC RDMA WRITE First" in out and "EVENT ack-timeout" in out
               and "EVENT retransmit" in out and "WIRE  lost:" in out and "CQE   qp" in out and "nak-sent" in out, out[:3000])
        # Every frame on the wire, as pcap: hcaemu's parser and tshark accept all of them.
        pcap = os.path.join(tmp, "sim.pcap")
        rc, out, err = run([h, "sim", "--op", "mix", "--size", "2000", "--count", "40", "--pcap", pcap] + faults)
        expect("sim --pcap", rc == 0 and os.path.getsize(pcap) > 10000, (rc, out, err))
        rc, out, err = run([h, "dissect", "--strict", "--brief", pcap])
        expect("pcap parses (dissect --strict)", rc == 0 and "error" not in out.split("Summary")[-1], out[-2000:])
        r = subprocess.run(["tshark", "-r", pcap, "-n", "-T", "fields", "-e", "frame.number", "-e", "_ws.malformed",
                            "-e", "infiniband.bth.opcode"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines = [l.split("\t") for l in r.stdout.splitlines()]
        expect("tshark reads the pcap", r.returncode == 0 and len(lines) > 50, r.returncode)
        expect("tshark: no malformed frames", all(len(l) < 2 or l[1] == "" for l in lines),
               [l for l in lines if len(l) > 1 and l[1]][:5])
        expect("tshark: every frame is RoCE v2", all(len(l) > 2 and l[2] != "" for l in lines), lines[:3])
        # UD and UC traffic too
        for op in ("ud_send", "uc_write"):
            p2 = os.path.join(tmp, op + ".pcap")
            rc, out, err = run([h, "sim", "--op", op, "--size", "500", "--count", "20", "--pcap", p2])
            rc2, out2, _ = run([h, "dissect", "--strict", "--brief", p2])
            expect(f"{op} pcap parses", rc == 0 and rc2 == 0, (rc, rc2, out2[-500:]))

        # SIGINT in a long run: exit 130, one message, no summary, the capture whole (its records
        # end exactly at the end of the file).
        p3 = os.path.join(tmp, "sig.pcap")
        pr = subprocess.Popen([h, "sim", "--op", "write", "--size", "64", "--count", "1000000", "--pcap", p3],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Into the run: frames reach the file (past its 24-byte header) in the writer's buffer-sized
        # steps.
        end = time.monotonic() + 60
        while (not os.path.exists(p3) or os.path.getsize(p3) <= 24) and pr.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        pr.send_signal(signal.SIGINT)
        try:
            so, se = pr.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pr.kill()  # our own child, by its handle
            so, se = pr.communicate()
        so, se = so.decode(errors="replace"), se.decode(errors="replace")
        b = open(p3, "rb").read() if os.path.exists(p3) else b""
        off, frames = 24, 0
        while off + 16 <= len(b):
            off += 16 + struct.unpack_from("<I", b, off + 8)[0]
            frames += 1
        expect("SIGINT: exit 130, 'hcaemu sim: interrupted by SIGINT', no summary",
               pr.returncode == 130 and se == "hcaemu sim: interrupted by SIGINT\n" and "verify" not in so,
               (pr.returncode, so[-500:], se))
        expect("SIGINT: the capture is whole", len(b) >= 24 and off == len(b) and frames > 0, (len(b), off, frames))

    # A run that cannot succeed: no retries over a lossy wire. Exit 1, naming what went wrong.
    rc, out, err = run([h, "sim", "--op", "write", "--count", "50", "--loss", "0.5", "--retry-cnt", "0", "--quiet"])
    expect("failure is reported", rc == 1 and "verify            FAIL" in out and "transport retry counter exceeded" in out, (rc, out))
    # B keeps one receive WQE posted, A sends three: the 2nd and 3rd meet an empty receive queue, get an
    # RNR NAK each, wait the RNR timer (code 1 = 0.01 ms) and go again.
    rc, out, err = run([h, "sim", "--op", "send", "--count", "3", "--size", "64", "--rq-depth", "1"])
    expect("--rq-depth 1: RNR NAKs, then all delivered",
           rc == 0 and out.count("RNR NAK (timer code 1)") == 2 and "2 RNR NAKs received" in out
           and "2 RNR NAKs sent" in out and "CQEs B            3: success 3" in out
           and re.search(r"^ +14\.000 us  A  send .* RC SEND Only QP=0x[0-9a-f]+ PSN=257 ", out, re.M), (rc, out))
    # Bad arguments.
    for args in (["--op", "frobnicate"], ["--loss", "1.5"], ["--loss", "x"], ["--mtu", "1000"], ["--count", "0"],
                 ["--timeout", "32"], ["--bogus", "1"], ["--size"], ["--op", "ud_send", "--size", "5000"],
                 ["--size", "100000000", "--count", "100"], ["--rq-depth", "0"], ["--rq-depth", "1025"]):
        rc, out, err = run([h, "sim"] + args)
        expect(f"bad arguments {args}", rc == 2 and "hcaemu sim:" in err, (rc, err))
    rc, out, err = run([h, "sim", "--help"])
    expect("sim --help", rc == 0 and "--loss P" in out and "--pcap FILE" in out, rc)

    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
