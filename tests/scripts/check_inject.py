#!/usr/bin/python3
"""Event injection on a real DPDK port (docs/inject.md): two `hcaemu pingpong` (and one `hcaemu perf`)
processes joined by net_memif, one side with --inject, both capturing. Each action's exact effect
frame by frame in the peer's capture (which PSN is missing, doubled, marked, answered by a forged
NAK), the injecting side's notes (FILE.pcap.notes) on the right frames, and `hcaemu dissect`
printing them. Every process has a deadline.

usage: check_inject.py --hcaemu HCAEMU [--libdir BUILD/tools/verbs] [--hcaemud HCAEMUD]"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402
from proclib import expect, finish, free_port, memif, run, start  # noqa: E402

SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, ACK = 0x00, 0x01, 0x02, 0x04, 0x11
MAC_S, MAC_C = "52:54:00:18:00:01", "52:54:00:18:00:02"


def frames(path):
    """Every RoCE v2 frame of a classic pcap: dicts of number (1-based), direction (by source MAC),
    opcode, psn, dest qp, ECN bits, AETH syndrome (ACKs)."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data)[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), hex(magic)
    off, n = 24, 0
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from("<IIII", data, off)
        p = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        n += 1
        if len(p) < 54 or p[12:14] != b"\x08\x00" or p[23] != 17 or struct.unpack_from(">H", p, 36)[0] != 4791:
            continue
        bth = 42
        opcode = p[bth]
        out.append(dict(n=n, src=p[6:12].hex(":"), op=opcode, psn=int.from_bytes(p[bth + 9:bth + 12], "big"),
                        qp=int.from_bytes(p[bth + 5:bth + 8], "big"), ecn=p[15] & 3,
                        syn=p[bth + 12] if opcode == ACK else None))
    return out


def notes(path):
    """The injection's notes by frame (the capture's own, on late stamps, apart)."""
    try:
        with open(path + ".notes") as f:
            return {int(line.split("\t")[0]): line.rstrip("\n").split("\t", 1)[1] for line in f
                    if line.split("\t", 1)[1].startswith("injected:")}
    except FileNotFoundError:
        return {}


def pair(h, tmp, name, size, iters, inj_s=(), inj_c=(), tool="pingpong", extra_c=()):
    sock = os.path.join(tmp, f"memif-{name}.sock")
    port = str(free_port())
    ps, pc = os.path.join(tmp, f"{name}-s.pcap"), os.path.join(tmp, f"{name}-c.pcap")
    if tool == "pingpong":
        common = ["pingpong", "-p", port, "-s", str(size), "-n", str(iters), "-g", "1", "--timeout", "20", "-c"]
    else:
        common = ["perf", "write_bw", "-p", port, "-s", str(size), "-n", str(iters), "--oob-timeout", "30"]
    srv = [h] + common + ["--eal", proclib.eal(0, memif("server", sock), mem=256), "--ip", "198.18.0.1/24",
                          "--mac", MAC_S, "--pcap", ps]
    cli = [h] + common + ["--eal", proclib.eal(1, memif("client", sock), mem=256), "--ip", "198.18.0.2/24",
                          "--mac", MAC_C, "--pcap", pc]
    for r in inj_s:
        srv += ["--inject", r]
    for r in inj_c:
        cli += ["--inject", r]
    cli += list(extra_c)
    p_s = start(srv)
    time.sleep(0.3)
    p_c = start(cli + ["127.0.0.1"])
    rc_c, out_c, err_c = finish(p_c)
    rc_s, out_s, err_s = finish(p_s)
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    ok = expect(f"{name}: both exit 0", rc_s == 0 and rc_c == 0, detail)
    if tool == "pingpong" and ok:
        expect(f"{name}: the data check passes on both sides",
               all(f"data check: {iters} messages of {size} bytes received as sent" in o for o in (out_s, out_c)), detail)
    return ps, pc, detail, err_c


def sent_by(fr, mac):
    return [f for f in fr if f["src"] == mac]


def check_drop(h, tmp):
    # The client's 2nd SEND MIDDLE is lost: the server NAKs its PSN, the client goes back to it.
    ps, pc, d, err = pair(h, tmp, "drop", 4096, 3, inj_c=["drop dir=tx op=SEND_MIDDLE nth=2"], extra_c=["--stats"])
    expect("drop: --stats prints the rule's hits: 1, and 7 SEND MIDDLEs matched (6 and the resend)",
           "inject #1 hits 1 matched 7 drop dir=tx op=RC_SEND_MIDDLE nth=2 count=1\n" in err, err)
    srv, cli = frames(ps), frames(pc)
    first = sent_by(cli, MAC_C)[0]["psn"]
    lost = first + 2
    got = [(f["op"], f["psn"]) for f in sent_by(srv, MAC_C) if f["op"] != ACK][:6]
    expect("drop: the server received FIRST, MIDDLE, LAST without the lost MIDDLE, then the resend from it",
           got == [(SEND_FIRST, first), (SEND_MIDDLE, first + 1), (SEND_LAST, first + 3),
                   (SEND_MIDDLE, lost), (SEND_LAST, first + 3), (SEND_FIRST, first + 4)], f"{got} lost {lost}\n{d}")
    naks = [f for f in sent_by(srv, MAC_S) if f["op"] == ACK and f["syn"] == 0x60]
    expect("drop: the server sent one NAK PSN sequence error, for the lost PSN",
           [f["psn"] for f in naks] == [lost], f"{naks}")
    # The client's own capture shows the frame as its HCA sent it, noted.
    n = notes(pc)
    mine = [f for f in sent_by(cli, MAC_C) if f["psn"] == lost]
    expect("drop: the client's capture notes the lost frame (and only it)",
           len(n) == 1 and mine and mine[0]["n"] in n and "#1 drop dir=tx op=RC_SEND_MIDDLE nth=2 count=1: dropped: not sent"
           in n[mine[0]["n"]], f"{n} {mine}")
    rc, out, err = run([h, "dissect", "--brief", pc])
    line = [x for x in out.splitlines() if x.lstrip().startswith(f"{mine[0]['n'] if mine else -1} ")]
    expect("drop: hcaemu dissect prints 'injected: ...' on that frame",
           rc == 0 and line and "[injected: #1 drop dir=tx" in line[0] and out.count("injected:") == 1, out[-3000:])
    rc, out, err = run([h, "dissect", "--json", pc])
    import json
    objs = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    marked = [o["frame"] for o in objs if "injected" in o]
    expect("drop: dissect --json: valid JSON, an 'injected' member on that frame only",
           rc == 0 and mine and marked == [mine[0]["n"]], out[-2000:])
    expect("drop: the server's capture has no notes (it injected nothing)", not os.path.exists(ps + ".notes"))
    # hcaemu ladder draws that frame, and only it, as an arrow that ends in a cross.
    svg = os.path.join(tmp, "drop.svg")
    rc, out, err = run([h, "ladder", pc, "-o", svg])
    import xml.etree.ElementTree as ET
    g = [e for e in ET.parse(svg).iter("{http://www.w3.org/2000/svg}g") if "lost" in e.get("class", "").split()] \
        if rc == 0 else []
    expect("drop: hcaemu ladder of the client's capture: one arrow ends in a cross, the dropped frame's",
           mine and [int(e.get("data-frame")) for e in g] == [mine[0]["n"]], f"{rc} {out} {err} {[e.attrib for e in g]}")


def check_ecn_dup(h, tmp):
    # Two rules on the client: CE on its first two SEND LASTs, its first SEND FIRST twice.
    ps, pc, d, _ = pair(h, tmp, "ecndup", 3000, 4,
                     inj_c=["ecn dir=tx op=SEND_LAST count=2", "dup dir=tx op=SEND_FIRST"])
    got = sent_by(frames(ps), MAC_C)
    marked = [(f["op"], f["psn"]) for f in got if f["ecn"] == 3]
    lasts = [f["psn"] for f in got if f["op"] == SEND_LAST]
    expect("ecn: exactly the first two SEND LASTs arrive with ECN CE", len(lasts) >= 4 and
           marked == [(SEND_LAST, lasts[0]), (SEND_LAST, lasts[1])], f"{marked} {lasts}\n{d}")
    expect("dup: the first SEND FIRST arrives twice, back to back",
           len(got) >= 2 and (got[0]["op"], got[1]["op"]) == (SEND_FIRST, SEND_FIRST) and got[0]["psn"] == got[1]["psn"]
           and sum(1 for f in got if f["op"] == SEND_FIRST) == 5, f"{[(f['op'], f['psn']) for f in got]}")
    n = notes(pc)
    expect("ecn, dup: three notes in the client's capture", len(n) == 3 and
           sum("ECN CE marked on the wire" in v for v in n.values()) == 2 and
           sum("sent twice" in v for v in n.values()) == 1, f"{n}")


def check_rnr(h, tmp):
    # The server answers the client's first message (4 packets) with a forged RNR NAK (timer 1: 10
    # us) instead of its ACK: the NAK names the message's First PSN, where a responder out of
    # receive WQEs stops (IBTA 9.7.5.2.8), not the ACK's (its Last); the client sends the message
    # again from there, the server's HCA counts duplicates.
    ps, pc, d, _ = pair(h, tmp, "rnr", 4096, 3, inj_s=["rnr dir=tx op=ack timer=1"])
    cli = frames(pc)
    from_s = sent_by(cli, MAC_S)
    rnr = [f for f in from_s if f["op"] == ACK and f["syn"] == 0x21]
    got = [(f["op"], f["psn"]) for f in sent_by(cli, MAC_C) if f["op"] in (SEND_FIRST, SEND_MIDDLE, SEND_LAST)]
    first = got[0][1] if got else None
    expect("rnr: the client received one RNR NAK (timer 1), for its first message's First PSN",
           len(rnr) == 1 and got and got[0][0] == SEND_FIRST and rnr[0]["psn"] == first, f"{rnr} {got[:8]}\n{d}")
    msg = [(SEND_FIRST, 0), (SEND_MIDDLE, 1), (SEND_MIDDLE, 2), (SEND_LAST, 3)]
    want = ([(o, first + i) for o, i in msg] * 2 + [(o, first + 4 + i) for o, i in msg]
            + [(o, first + 8 + i) for o, i in msg]) if first is not None else None
    expect("rnr: the client sent its first message twice, from its First PSN, then each other once",
           got == want, f"{got}")
    n = notes(ps)
    expect("rnr: the server's capture has the forged NAK and the replaced ACK, noted",
           len(n) == 2 and any("forged RNR NAK" in v for v in n.values()) and
           any("replaced by a forged frame: not sent" in v for v in n.values()), f"{n}")


def check_perf(h, tmp):
    # hcaemu perf takes --inject too: the client's 3rd WRITE packet is lost, the run still passes.
    ps, pc, d, _ = pair(h, tmp, "perf", 65536, 5, inj_c=["drop dir=tx op=write nth=3"], tool="perf")
    got = [f for f in sent_by(frames(ps), MAC_C) if f["op"] in (0x06, 0x07, 0x08, 0x0A)]
    psns = [f["psn"] for f in got]
    expect("perf: the server saw PSN first+2 missing at first, then resent", len(psns) > 4 and
           psns[2] == psns[0] + 3 and (psns[0] + 2) in psns, f"{psns[:12]}\n{d}")
    naks = [f["psn"] for f in sent_by(frames(ps), MAC_S) if f["op"] == ACK and f["syn"] == 0x60]
    expect("perf: one NAK sequence error for that PSN", naks == [psns[0] + 2] if psns else False, f"{naks}")


def check_bad(h):
    rc, out, err = run([h, "pingpong", "--inject", "drop dir=sideways", "--ip", "198.18.0.1/24"])
    expect("a bad --inject rule: exit 2 with the parser's message",
           rc == 2 and "--inject 'drop dir=sideways': dir=sideways: use dir=tx or dir=rx (bad_direction)" in err, err)
    rc, out, err = run([h, "perf", "write_bw", "--inject", "corrupt dir=tx", "--ip", "198.18.0.1/24"])
    expect("perf: a bad --inject rule: exit 2", rc == 2 and "corrupt_needs_target" in err, err)


def verbs_env(libdir, tmp, role, lcore, ip, mac, **kv):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HCAEMU_")}
    e["LD_LIBRARY_PATH"] = libdir
    e.update(proclib.asan_env(os.path.join(libdir, "libibverbs.so.1")))
    sock = os.path.join(tmp, "memif-verbs.sock")
    e.update(HCAEMU_DEVICE="local", HCAEMU_IP=ip, HCAEMU_MAC=mac,
             HCAEMU_EAL=proclib.eal(lcore, memif(role, sock), mem=256, prefix=f"inj{os.getpid()}{role[0]}"), **kv)
    return e


def check_verbs(libdir, tmp):
    # ibv_rc_pingpong through hcaemu's libibverbs, HCAEMU_INJECT on the client: its 2nd SEND is
    # lost (resent after the ACK timeout), every other one (and the resend) marked CE.
    ps, pc = os.path.join(tmp, "verbs-s.pcap"), os.path.join(tmp, "verbs-c.pcap")
    port = str(free_port())
    cmd = ["ibv_rc_pingpong", "-d", "hcaemu0", "-g", "1", "-p", port, "-s", "64", "-n", "4", "-c"]
    senv = verbs_env(libdir, tmp, "server", 0, "198.18.0.1/24", MAC_S, HCAEMU_PCAP=ps)
    cenv = verbs_env(libdir, tmp, "client", 1, "198.18.0.2/24", MAC_C, HCAEMU_PCAP=pc,
                     HCAEMU_INJECT="drop dir=tx op=SEND_ONLY nth=2 ;  ecn dir=tx op=SEND_ONLY count=all")
    p_s = start(cmd, senv)
    proclib.wait_listen(port, p_s, 20)
    p_c = start(cmd + ["127.0.0.1"], cenv)
    rc_c, out_c, err_c = finish(p_c)
    rc_s, out_s, err_s = finish(p_s)
    d = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect("verbs: ibv_rc_pingpong -c with HCAEMU_INJECT: both exit 0", rc_s == 0 and rc_c == 0, d)
    sends = [(f["psn"], f["ecn"]) for f in sent_by(frames(ps), MAC_C) if f["op"] == SEND_ONLY]
    expect("verbs: the server got 4 SENDs, consecutive PSNs, each once, all CE (the 2nd only after its resend)",
           len(sends) == 4 and [p for p, _ in sends] == list(range(sends[0][0], sends[0][0] + 4)) and
           all(e == 3 for _, e in sends), f"{sends}\n{d}")
    n = notes(pc)
    expect("verbs: the client's capture notes one drop and four CE marks (three SENDs and the resend)",
           sum("dropped: not sent" in v for v in n.values()) == 1 and sum("ECN CE" in v for v in n.values()) == 4, f"{n}")
    e = verbs_env(libdir, tmp, "server", 0, "198.18.0.1/24", MAC_S, HCAEMU_INJECT="drop dir=tx; bogus dir=rx")
    rc, out, err = run(["ibv_devinfo"], e)
    expect("verbs: a bad rule in HCAEMU_INJECT: the device does not open, the message names it",
           "HCAEMU_INJECT: --inject 'bogus dir=rx': unknown action 'bogus'" in err, (rc, out, err))


def check_cli(h, hcaemud, tmp):
    """hcaemu inject add|list|del against a running hcaemud."""
    sock = os.path.join(tmp, "d.sock")
    eal = (f"--no-huge -m 128 --no-pci --no-shconf -l 0 --no-telemetry --log-level lib.eal:error "
           f"--vdev=net_ring_inj{os.getpid() % 10000}")
    log = open(os.path.join(tmp, "daemon.log"), "w+")
    d = subprocess.Popen([hcaemud, "--socket", sock, "--eal", eal, "--ip", "198.18.9.1/24"], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        end = time.time() + 30
        while time.time() < end and d.poll() is None:
            log.seek(0)
            if "hcaemud: serving" in log.read():
                break
            time.sleep(0.05)
        dev = ["--device", "unix:" + sock]
        r1 = run([h, "inject", "add", "drop dir=tx op=WRITE_MIDDLE psn=5"] + dev)
        r2 = run([h, "inject", "add", "ecn dir=rx prob=0.25 seed=7 count=all"] + dev)
        expect("cli: inject add prints the ids 1 and 2", r1[:2] == (0, "1\n") and r2[:2] == (0, "2\n"), (r1, r2))
        r = run([h, "inject", "list"] + dev)
        expect("cli: inject list", r[0] == 0 and r[1] ==
               "1 hits 0 matched 0 drop dir=tx op=RC_RDMA_WRITE_MIDDLE psn=5 count=1\n"
               "2 hits 0 matched 0 ecn dir=rx prob=0.25 seed=7 count=all\n", r)
        r = run([h, "inject", "del", "1"] + dev)
        expect("cli: inject del 1", r[0] == 0, r)
        r = run([h, "inject", "del", "1"] + dev)
        expect("cli: inject del 1 again: exit 1, no rule 1", r[0] == 1 and "no rule 1" in r[2], r)
        r = run([h, "inject", "list"] + dev)
        expect("cli: inject list after del", r[:2] == (0, "2 hits 0 matched 0 ecn dir=rx prob=0.25 seed=7 count=all\n"), r)
        r = run([h, "inject", "add", "drop dir=tx colour=red"] + dev)
        expect("cli: a bad rule: exit 2, the parser's message", r[0] == 2 and "unknown key 'colour' (unknown_key)" in r[2], r)
        r = run([h, "inject", "frobnicate"] + dev)
        expect("cli: an unknown command: exit 2", r[0] == 2 and "unknown command 'frobnicate'" in r[2], r)
    finally:
        d.terminate()  # our own child, by its handle
        try:
            d.wait(timeout=20)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--libdir", help="hcaemu's libibverbs (build/tools/verbs): the HCAEMU_INJECT check")
    ap.add_argument("--hcaemud", help="hcaemud: the hcaemu inject CLI check")
    a = ap.parse_args()
    check_bad(a.hcaemu)
    with tempfile.TemporaryDirectory(prefix="hcaemu-inject-") as tmp:
        check_drop(a.hcaemu, tmp)
        check_ecn_dup(a.hcaemu, tmp)
        check_rnr(a.hcaemu, tmp)
        check_perf(a.hcaemu, tmp)
        if a.libdir:
            check_verbs(os.path.abspath(a.libdir), tmp)
        if a.hcaemud:
            check_cli(a.hcaemu, a.hcaemud, tmp)
    return proclib.report()


if __name__ == "__main__":
    sys.exit(main())
