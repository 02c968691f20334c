#!/usr/bin/python3
"""The conformance monitor (docs/conform.md). Offline: `hcaemu conform` on the rxe reference
captures (nothing but the documented deviation), its JSON and Chinese output, its exit codes on
bad input. Live: two `hcaemu pingpong` processes joined by net_memif, the server injecting a ghost
ACK (docs/inject.md), the client with --conform --stats: the client counts exactly one
resp.unsolicited, and `hcaemu conform` on either capture names it at the ghost ACK's frame.
Every process has a deadline.

usage: check_conform.py --hcaemu HCAEMU --captures DIR [--hcaemud HCAEMUD] [--libdir BUILD/tools/verbs]"""
import argparse
import json
import os
import struct
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


def pair(h, tmp, name, size, inject):
    """Two pingpong processes on net_memif: the server injects `inject`, the client runs --conform
    --stats. (client stderr's conform_* counts, client capture, server capture, detail)."""
    sock = os.path.join(tmp, f"memif-{name}.sock")
    port = str(free_port())
    ps, pc = os.path.join(tmp, f"{name}-s.pcap"), os.path.join(tmp, f"{name}-c.pcap")
    common = ["pingpong", "-p", port, "-s", str(size), "-n", "3", "-g", "1", "--timeout", "20", "-c"]
    srv = [h] + common + ["--eal", proclib.eal(0, memif("server", sock), mem=256), "--ip", "198.18.0.1/24",
                          "--mac", MAC_S, "--pcap", ps, "--inject", inject]
    cli = [h] + common + ["--eal", proclib.eal(1, memif("client", sock), mem=256), "--ip", "198.18.0.2/24",
                          "--mac", MAC_C, "--pcap", pc, "--conform", "--stats"]
    p_s = start(srv)
    time.sleep(0.3)
    p_c = start(cli + ["127.0.0.1"])
    rc_c, out_c, err_c = finish(p_c)
    rc_s, out_s, err_s = finish(p_s)
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect(f"{name}: both exit 0", rc_s == 0 and rc_c == 0, detail)
    counts = {}
    for line in err_c.splitlines():
        w = line.split()
        if len(w) == 2 and w[0].startswith("conform_"):
            counts[w[0]] = int(w[1])
    return counts, pc, ps, detail


def client_psns(path):
    """The BTH PSNs of the requests the client (MAC_C) sent, in capture order."""
    with open(path, "rb") as f:
        data = f.read()
    off, out = 24, []
    while off + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, off + 8)[0]
        p = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if (len(p) >= 54 and p[6:12].hex(":") == MAC_C and p[12:14] == b"\x08\x00" and p[23] == 17
                and struct.unpack_from(">H", p, 36)[0] == 4791 and p[42] <= 0x04):
            out.append(int.from_bytes(p[51:54], "big"))
    return out


def check_obeyed(h, tmp):
    """hcaemu obeys a forged NAK and a forged RNR NAK: its requester's restarts name nothing, and
    the injector's capture (the forged frames written by it) names nothing either."""
    for name, rule in (("nak", "nak-seq dir=tx op=ack"), ("rnr", "rnr dir=tx op=ack timer=14")):
        counts, pc, ps, detail = pair(h, tmp, name, 4096, rule)
        psns = client_psns(pc)
        expect(f"{name}: the client did go back (a SEND PSN sent twice)", len(psns) > len(set(psns)), f"{psns}")
        expect(f"{name}: the client's monitor saw the frames and counts no violation",
               counts.get("conform_frames", 0) >= 12 and "conform_violations" not in counts, f"{counts}\n{detail}")
        for side, path in (("client", pc), ("server", ps)):
            rc, out, _ = conform(h, path)
            expect(f"{name}: the {side}'s capture names nothing", rc == 0 and ": 0 violations" in out, out)


def check_live(h, tmp):
    counts, pc, ps, detail = pair(h, tmp, "ghost", 64, "ghost-ack dir=tx op=ack")
    expect("live: the client's monitor counts exactly the ghost ACK",
           counts.get("conform_resp_unsolicited") == 1 and counts.get("conform_violations") == 1
           and counts.get("conform_frames", 0) >= 12, f"{counts}\n{detail}")
    for name, path in (("client", pc), ("server", ps)):
        rc, out, _ = conform(h, "--json", path)
        vs = [json.loads(x) for x in out.splitlines()][:-1]
        expect(f"live: the {name}'s capture names one resp.unsolicited, from the server, 4096 past an ACK's PSN",
               rc == 1 and len(vs) == 1 and vs[0]["rule"] == "resp.unsolicited" and vs[0]["src"] == "198.18.0.1",
               out)


def check_daemon(h, hcaemud, tmp):
    """hcaemud --conform on net_memif facing a local pingpong that injects a ghost ACK; a pingpong
    server through the daemon. `hcaemu stat` shows conform_resp_unsolicited 1."""
    dsock, msock = os.path.join(tmp, "d.sock"), os.path.join(tmp, "memif-d.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w+")
    d = subprocess.Popen([hcaemud, "--socket", dsock, "--eal", proclib.eal(0, memif("server", msock), mem=256),
                          "--ip", "198.18.0.1/24", "--mac", MAC_S, "--conform"], stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.time() + 30
        while time.time() < end and d.poll() is None:
            log.seek(0)
            if "hcaemud: serving" in log.read():
                break
            time.sleep(0.05)
        dev = ["--device", "unix:" + dsock]
        port = str(free_port())
        common = ["pingpong", "-p", port, "-s", "64", "-n", "3", "-g", "1", "--timeout", "20", "-c"]
        p_s = start([h] + common + dev)
        time.sleep(0.3)
        p_c = start([h] + common + ["--eal", proclib.eal(1, memif("client", msock), mem=256), "--ip", "198.18.0.2/24",
                                    "--mac", MAC_C, "--inject", "ghost-ack dir=tx op=ack", "127.0.0.1"])
        rc_c, out_c, err_c = finish(p_c)
        rc_s, out_s, err_s = finish(p_s)
        expect("daemon: both pingpongs exit 0", rc_s == 0 and rc_c == 0,
               f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}")
        r = proclib.run([h, "stat"] + dev)
        lines = {}
        for line in r[1].splitlines():
            w = line.split()
            if len(w) >= 2 and "conform_" in w[0]:
                lines[w[0]] = w[-1]
        expect("daemon: hcaemu stat shows the monitor's counts, one resp.unsolicited",
               r[0] == 0 and any(k.endswith("conform_resp_unsolicited") and v == "1" for k, v in lines.items())
               and any(k.endswith("conform_violations") and v == "1" for k, v in lines.items()), r)
    finally:
        d.terminate()  # our own child, by its handle
        try:
            d.wait(timeout=20)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()


def check_verbs(libdir, tmp):
    """ibv_rc_pingpong through hcaemu's libibverbs: the server injects a ghost ACK
    (HCAEMU_INJECT), the client runs HCAEMU_CONFORM=1: at exit it reports the one violation."""
    port = str(free_port())
    sock = os.path.join(tmp, "memif-verbs.sock")

    def env(role, lcore, ip, mac, **kv):
        e = {k: v for k, v in os.environ.items() if not k.startswith("HCAEMU_")}
        e["LD_LIBRARY_PATH"] = libdir
        e.update(proclib.asan_env(os.path.join(libdir, "libibverbs.so.1")))
        e.update(HCAEMU_DEVICE="local", HCAEMU_IP=ip, HCAEMU_MAC=mac,
                 HCAEMU_EAL=proclib.eal(lcore, memif(role, sock), mem=256, prefix=f"cf{os.getpid()}{role[0]}"), **kv)
        return e
    cmd = ["ibv_rc_pingpong", "-d", "hcaemu0", "-g", "1", "-p", port, "-s", "64", "-n", "4", "-c"]
    p_s = start(cmd, env("server", 0, "198.18.0.1/24", MAC_S, HCAEMU_INJECT="ghost-ack dir=tx op=ack"))
    proclib.wait_listen(port, p_s, 20)
    p_c = start(cmd + ["127.0.0.1"], env("client", 1, "198.18.0.2/24", MAC_C, HCAEMU_CONFORM="1"))
    rc_c, out_c, err_c = finish(p_c)
    rc_s, out_s, err_s = finish(p_s)
    d = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect("verbs: ibv_rc_pingpong with HCAEMU_CONFORM=1: both exit 0", rc_s == 0 and rc_c == 0, d)
    expect("verbs: the client reports the ghost ACK at exit, and nothing else",
           "hcaemu --conform: 1 violations in " in err_c and " resp.unsolicited=1\n" in err_c
           and "198.18.0.1 -> 198.18.0.2" in err_c and "[resp.unsolicited, IBTA 9.7.5.2" in err_c, d)
    expect("verbs: the server (no HCAEMU_CONFORM) reports nothing", "hcaemu --conform" not in err_s, d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--captures", required=True)
    ap.add_argument("--hcaemud", help="hcaemud: --conform on the daemon, the counts in hcaemu stat")
    ap.add_argument("--libdir", help="hcaemu's libibverbs (build/tools/verbs): the HCAEMU_CONFORM check")
    a = ap.parse_args()
    check_offline(a.hcaemu, a.captures)
    with tempfile.TemporaryDirectory(prefix="hcaemu-conform-") as tmp:
        check_live(a.hcaemu, tmp)
        check_obeyed(a.hcaemu, tmp)
        if a.hcaemud:
            check_daemon(a.hcaemu, a.hcaemud, tmp)
        if a.libdir:
            check_verbs(os.path.abspath(a.libdir), tmp)
    return proclib.report()


if __name__ == "__main__":
    sys.exit(main())
