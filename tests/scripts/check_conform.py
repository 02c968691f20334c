#!/usr/bin/python3
"""The conformance monitor (docs/conform.md). Offline: `hcaemu conform` on the rxe reference
captures (nothing but the documented deviation), its JSON and Chinese output, its exit codes on
bad input. Live: two `hcaemu pingpong` processes joined by net_memif, the server injecting a ghost
ACK (docs/inject.md), the client with --conform --stats: the client counts exactly one
resp.unsolicited, and `hcaemu conform` on either capture names it at the ghost ACK's frame.
Every process has a deadline.

usage: check_conform.py --hcaemu HCAEMU --captures DIR"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402
from proclib import expect, finish, free_port, memif, start  # noqa: E402

MAC_S, MAC_C = "52:54:00:18:00:01", "52:54:00:18:00:02"


def conform(h, *args):
    p = subprocess.run([h, "conform", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def check_offline(h, caps):
    rc, out, _ = conform(h, os.path.join(caps, "write_bw.pcap"))
    expect("offline: write_bw.pcap clean, exit 0", rc == 0 and "45 frames, 45 RoCE v2 frames, 6 flows: 0 violations" in out, out)
    loss = os.path.join(caps, "loss5_write_send_read.pcap")
    rc, out, _ = conform(h, loss)
    expect("offline: loss5 names the documented capture-point deviation, exit 1",
           rc == 1 and out.startswith("frame 218 198.18.0.3 -> 198.18.0.2 QP 0x000020 PSN 2892354: ")
           and "[retx.psn, IBTA 9.7.5.2" in out and ": 1 violations" in out, out)
    rc, out, _ = conform(h, loss, "--ignore", "retx.psn")
    expect("offline: --ignore drops it, exit 0", rc == 0 and "0 violations" in out, out)
    rc, out, _ = conform(h, loss, "--json")
    lines = [json.loads(x) for x in out.splitlines()]
    expect("offline: --json, one object per violation and a summary",
           rc == 1 and len(lines) == 2 and lines[0]["rule"] == "retx.psn" and lines[0]["frame"] == 218
           and lines[0]["psn"] == 2892354 and lines[0]["qp"] == 0x20 and lines[1]["summary"]["violations"] == 1
           and lines[1]["summary"]["rules"] == {"retx.psn": 1}, out)
    rc, out, _ = conform(h, loss, "--lang", "zh")
    expect("offline: --lang zh", rc == 1 and out.startswith("帧 218 ") and "违规 1 处" in out, out)
    rc, _, err = conform(h, "/nonexistent.pcap")
    expect("offline: a missing file: exit 2 and why", rc == 2 and "hcaemu conform:" in err, err)
    rc, _, err = conform(h, "--ignore", "no.such", loss)
    expect("offline: an unknown rule: exit 2", rc == 2 and "no rule 'no.such'" in err, err)
    with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
        f.write(b"not a pcap at all")
        f.flush()
        rc, _, err = conform(h, f.name)
        expect("offline: not a pcap: exit 2", rc == 2 and err.startswith("hcaemu conform: "), err)


def check_live(h, tmp):
    sock = os.path.join(tmp, "memif-conform.sock")
    port = str(free_port())
    ps, pc = os.path.join(tmp, "s.pcap"), os.path.join(tmp, "c.pcap")
    common = ["pingpong", "-p", port, "-s", "64", "-n", "3", "-g", "1", "--timeout", "20", "-c"]
    srv = [h] + common + ["--eal", proclib.eal(0, memif("server", sock), mem=256), "--ip", "198.18.0.1/24",
                          "--mac", MAC_S, "--pcap", ps, "--inject", "ghost-ack dir=tx op=ack"]
    cli = [h] + common + ["--eal", proclib.eal(1, memif("client", sock), mem=256), "--ip", "198.18.0.2/24",
                          "--mac", MAC_C, "--pcap", pc, "--conform", "--stats"]
    p_s = start(srv)
    time.sleep(0.3)
    p_c = start(cli + ["127.0.0.1"])
    rc_c, out_c, err_c = finish(p_c)
    rc_s, out_s, err_s = finish(p_s)
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect("live: both exit 0", rc_s == 0 and rc_c == 0, detail)
    counts = {}
    for line in err_c.splitlines():
        w = line.split()
        if len(w) == 2 and w[0].startswith("conform_"):
            counts[w[0]] = int(w[1])
    expect("live: the client's monitor counts exactly the ghost ACK",
           counts.get("conform_resp_unsolicited") == 1 and counts.get("conform_violations") == 1
           and counts.get("conform_frames", 0) >= 12, f"{counts}\n{detail}")
    for name, path in (("client", pc), ("server", ps)):
        rc, out, _ = conform(h, "--json", path)
        vs = [json.loads(x) for x in out.splitlines()][:-1]
        expect(f"live: the {name}'s capture names one resp.unsolicited, from the server, 4096 past an ACK's PSN",
               rc == 1 and len(vs) == 1 and vs[0]["rule"] == "resp.unsolicited" and vs[0]["src"] == "198.18.0.1",
               out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--captures", required=True)
    a = ap.parse_args()
    check_offline(a.hcaemu, a.captures)
    with tempfile.TemporaryDirectory(prefix="hcaemu-conform-") as tmp:
        check_live(a.hcaemu, tmp)
    return proclib.report()


if __name__ == "__main__":
    sys.exit(main())
