#!/usr/bin/python3
"""check_capture_data.py on synthetic captures and dumps, one per rule (hcaemu as WRITE responder,
READ responder, WRITE and SEND requester, READ requester, SEND receiver, and UD SEND), each clean,
with a retransmitted copy, with a copy that differs, with a corrupted byte, with a frame missing
from the capture (not covered), with PSNs that wrap, over IPv4 and over IPv6 GIDs; then (with --hcaemu) real `hcaemu perf --dump`
runs between two hcaemu processes over net_memif, the client's --pcap as the capture.
"""
import argparse
import ipaddress
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_capture_data.py")
failures = []

EMU, PEER = "198.18.0.10", "198.18.0.2"
EMU6, PEER6 = "2001:2::10", "2001:2::2"  # the IPv6 runs (RFC 5180 benchmarking range)
ADDRS = {4: (EMU, PEER), 6: (EMU6, PEER6)}
EMU_MAC, PEER_MAC = bytes.fromhex("02000000000a"), bytes.fromhex("525400120002")
QPN, PEER_QPN = 0x11, 0x22
MTU = 256
BUF_VA, BUF_LEN = 0x7F0000010000, 4096
DST_VA = BUF_VA + 2048  # the block hcaemu gives the peer
PEER_VA = 0x5500000000


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {detail}")


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def gid(a):
    """The GID of an address, in hex: ::ffff:a.b.c.d for IPv4, the address itself for IPv6."""
    ip = ipaddress.ip_address(a)
    return ("00000000000000000000ffff" + ip.packed.hex()) if ip.version == 4 else ip.packed.hex()


def frame(src, dst, qp, opcode, psn, ext=b"", payload=b""):
    """Ethernet/IPv4 or IPv6 (by the addresses)/UDP 4791/BTH/ext/payload/pad/ICRC (the ICRC and the
    UDP checksum are not checked here: zeros)."""
    pad = -len(payload) % 4
    bth = struct.pack(">BBHB3sB3s", opcode, pad << 4, 0xFFFF, 0, qp.to_bytes(3, "big"), 0x80, psn.to_bytes(3, "big"))
    roce = bth + ext + payload + bytes(pad) + bytes(4)
    udp = struct.pack(">HHHH", 49152, 4791, 8 + len(roce), 0) + roce
    if ":" in src:  # IPv6 (RFC 8200 3): version 6, payload length, next header UDP, hop limit
        ip = struct.pack(">IHBB16s16s", 6 << 28, len(udp), 17, 64, ipaddress.IPv6Address(src).packed,
                         ipaddress.IPv6Address(dst).packed) + udp
        et = b"\x86\xdd"
    else:
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, ip4(src), ip4(dst)) + udp
        et = b"\x08\x00"
    macs = (PEER_MAC + EMU_MAC) if src in (EMU, EMU6) else (EMU_MAC + PEER_MAC)
    fr = macs + et + ip
    return fr + bytes(max(0, 60 - len(fr)))  # Ethernet padding of short frames, as on the wire


def reth(va, n):
    return struct.pack(">QII", va, 0x1234, n)


AETH = struct.pack(">I", 0x1F000001)


def write_pcap(path, frames, cut=()):
    """Frame i of `cut` is stored without its last 20 bytes (cut by the snap length)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            kept = fr[:-20] if i in cut else fr
            f.write(struct.pack("<IIII", 1000, i, len(kept), len(fr)) + kept)


def data(i, n, salt=0):
    return bytes((i * 31 + k * 7 + salt) & 0xFF for k in range(n))


def chunks(b):
    return [b[k:k + MTU] for k in range(0, len(b), MTU)] or [b""]


def pos_op(base, k, n):
    """RC opcode of packet k of n for a message kind (SEND 0x00, WRITE 0x06, READ response 0x0D)."""
    if base == 0x00:
        return 0x04 if n == 1 else 0x00 if k == 0 else 0x02 if k == n - 1 else 0x01
    if base == 0x06:
        return 0x0A if n == 1 else 0x06 if k == 0 else 0x08 if k == n - 1 else 0x07
    return 0x10 if n == 1 else 0x0D if k == 0 else 0x0F if k == n - 1 else 0x0E


class Case:
    """A run: its dump (meta, the buffer, the records) and its frames, in wire order; each frame
    as (message index, packet index, bytes) so that the tests can drop, copy or change one."""

    def __init__(self, test, role, psn, peer_psn, conn="RC", fam=4):
        self.emu, self.peer = ADDRS[fam]
        self.meta = {"test": test, "role": role, "conn": conn, "status": 0, "qpn": QPN, "psn": psn,
                     "gid": gid(self.emu), "peer_qpn": PEER_QPN,
                     "peer_psn": peer_psn, "peer_gid": gid(self.peer),
                     "buf_va": BUF_VA, "buf_len": BUF_LEN, "dst_va": DST_VA, "dst_len": BUF_LEN - 2048,
                     "peer_va": PEER_VA, "mtu": MTU,
                     "size": 0, "all_sizes": False, "iterations": 0, "records_overflow": False, "records": []}
        self.buf = bytearray((k * 5 + 3) & 0xFF for k in range(BUF_LEN))
        self.recs = []
        self.frames = []

    def record(self, op, va, b):
        self.recs.append((op, va, b))

    def write(self, tmp, name, frames=None, cut=()):
        off = BUF_LEN
        recs = []
        for op, va, b in self.recs:
            recs.append({"op": op, "remote_va": va, "len": len(b), "off": off})
            off += len(b)
        self.meta["records"] = recs
        prefix = os.path.join(tmp, name)
        with open(prefix + ".json", "w") as f:
            json.dump(self.meta, f)
        with open(prefix + ".bin", "wb") as f:
            f.write(bytes(self.buf) + b"".join(b for _, _, b in self.recs))
        write_pcap(prefix + ".pcap", [fr for _, _, fr in (self.frames if frames is None else frames)], cut)
        return prefix


def build(rule, fam=4):
    """The run of one rule: 4 messages of 600 B (3 packets at MTU 256), over IPv4 or IPv6 (fam)."""
    size, iters = 600, 4
    emu, peer = ADDRS[fam]
    if rule == "write_responder":
        c = Case("write_bw", "server", 0x000010, 0xFFFFFE, fam=fam)  # the peer's PSNs wrap
        c.buf[DST_VA - BUF_VA:] = bytes(BUF_LEN - (DST_VA - BUF_VA))  # hcaemu zeroes its destination block
        psn = c.meta["peer_psn"]
        for i in range(iters):
            va = DST_VA + (i % 2) * 1024
            b = data(i, size)
            c.buf[va - BUF_VA:va - BUF_VA + size] = b  # the final image: messages 2 and 3 last
            for k, ch in enumerate(chunks(b)):
                ext = reth(va, size) if k == 0 else b""
                c.frames.append((i, k, frame(peer, emu, QPN, pos_op(0x06, k, 3), (psn + k) % (1 << 24), ext, ch)))
            psn = (psn + 3) % (1 << 24)
    elif rule == "read_responder":
        c = Case("read_bw", "server", 0x000010, 0x000100, fam=fam)
        psn = c.meta["peer_psn"]
        for i in range(iters):
            va = DST_VA + (i % 2) * 1024
            c.frames.append((i, -1, frame(peer, emu, QPN, 0x0C, psn, reth(va, size))))
            b = bytes(c.buf[va - BUF_VA:va - BUF_VA + size])
            for k, ch in enumerate(chunks(b)):
                ext = AETH if k in (0, 2) else b""
                c.frames.append((i, k, frame(emu, peer, PEER_QPN, pos_op(0x0D, k, 3), psn + k, ext, ch)))
            psn += 3
    elif rule in ("write_requester", "send_requester"):
        w = rule == "write_requester"
        c = Case("write_bw" if w else "send_bw", "client", 0xFFFFFD, 0x000100, fam=fam)
        psn = c.meta["psn"]
        for i in range(iters):
            va = PEER_VA + (i % 2) * 1024 if w else 0
            b = data(i, size, 1)
            c.record("write" if w else "send", va, b)
            for k, ch in enumerate(chunks(b)):
                ext = reth(va, size) if w and k == 0 else b""
                c.frames.append((i, k, frame(emu, peer, PEER_QPN, pos_op(0x06 if w else 0x00, k, 3),
                                             (psn + k) % (1 << 24), ext, ch)))
            psn = (psn + 3) % (1 << 24)
    elif rule == "read_requester":
        c = Case("read_bw", "client", 0x000200, 0x000100, fam=fam)
        psn = c.meta["psn"]
        for i in range(iters):
            va = PEER_VA + (i % 2) * 1024
            b = data(i, size, 2)
            c.record("read", va, b)
            c.frames.append((i, -1, frame(emu, peer, PEER_QPN, 0x0C, psn, reth(va, size))))
            for k, ch in enumerate(chunks(b)):
                ext = AETH if k in (0, 2) else b""
                c.frames.append((i, k, frame(peer, emu, QPN, pos_op(0x0D, k, 3), psn + k, ext, ch)))
            psn += 3
    elif rule == "send_receiver":
        c = Case("send_bw", "server", 0x000200, 0x000100, fam=fam)
        psn = c.meta["peer_psn"]
        for i in range(iters):
            b = data(i, size, 3)
            c.record("recv", 0, b)
            for k, ch in enumerate(chunks(b)):
                c.frames.append((i, k, frame(peer, emu, QPN, pos_op(0x00, k, 3), psn + k, b"", ch)))
            # ACKs from hcaemu: not data, not compared
            c.frames.append((i, -2, frame(emu, peer, PEER_QPN, 0x11, psn + 2, AETH)))
            psn += 3
    elif rule == "ud_send_receiver":
        c = Case("send_bw", "server", 0x000200, 0x000100, "UD", fam=fam)
        size = 200
        for i in range(iters):
            b = data(i, size, 4)
            c.record("recv", 0, b)
            deth = struct.pack(">II", 0x11111111, PEER_QPN)
            c.frames.append((i, 0, frame(peer, emu, QPN, 0x64, 0x000100 + i, deth, b)))
    c.meta["size"], c.meta["iterations"] = size, iters
    # frames of another QP pair and non-RoCE frames are ignored
    c.frames.insert(1, (-1, -1, frame(peer, emu, QPN + 1, 0x04, c.meta["peer_psn"], b"", b"x" * 50)))
    c.frames.insert(0, (-1, -1, EMU_MAC + PEER_MAC + b"\x08\x06" + bytes(46)))
    return c


WHAT = {"write_responder": "WRITE responder", "read_responder": "READ responder", "write_requester": "WRITE requester",
        "send_requester": "SEND requester", "read_requester": "READ requester", "send_receiver": "SEND receiver",
        "ud_send_receiver": "SEND receiver"}


def run(prefix, *extra, emu=EMU):
    r = subprocess.run(["/usr/bin/python3", CHECKER, prefix + ".pcap", prefix, "--emu-ip", emu, *extra],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout.strip() + r.stderr.strip()


def check_rule(tmp, rule, fam=4):
    c = build(rule, fam)
    name = rule if fam == 4 else "IPv6 " + rule  # the test names
    head = f"check_capture_data: {c.meta['test']} ({c.meta['role']}, hcaemu QP 0x{QPN:06x}): "
    size = c.meta["size"]
    # compared: the WRITE responder's final image is 2 regions of 600 B, each the last of the 2
    # messages that wrote it (messages 0 and 1 are overwritten: not compared); otherwise every message
    wr = rule == "write_responder"
    full, msgs = (2 * size, 2) if wr else (4 * size, 4)
    rc, out = run(c.write(tmp, f"v{fam}-{rule}"), emu=c.emu)
    expect(f"{name}: clean capture passes with the exact summary",
           rc == 0 and out == head + f"PASS {WHAT[rule]}: {msgs} messages compared, {full} bytes, 0 retransmitted copies, "
           "0 not covered", out)

    # the data frames of message 3 (the last writer of its region), packet 1 if there is one
    data_frames = [n for n, (i, k, _) in enumerate(c.frames) if i == 3 and k >= 0]
    victim = data_frames[1] if len(data_frames) > 1 else data_frames[0]
    # a retransmitted copy, identical, later in the capture
    fr = list(c.frames)
    fr.append(c.frames[victim])
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-rexmit", fr), emu=c.emu)
    expect(f"{name}: an identical retransmitted copy passes and is counted",
           rc == 0 and out.endswith(f"{msgs} messages compared, {full} bytes, 1 retransmitted copies, 0 not covered"), out)

    # a copy that differs from the first
    i, k, b = c.frames[victim]
    bad = bytearray(b)
    bad[-10] ^= 0x40  # a payload byte (the last 4 are the ICRC, before them at most 3 of pad)
    fr = list(c.frames) + [(i, k, bytes(bad))]
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-rexmit-bad", fr), emu=c.emu)
    expect(f"{name}: a retransmitted copy that differs fails", rc == 1 and "differs from the first copy" in out, out)

    # a corrupted byte in the only copy
    fr = list(c.frames)
    fr[victim] = (i, k, bytes(bad))
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-corrupt", fr), emu=c.emu)
    expect(f"{name}: a corrupted byte fails and names message 3", rc == 1 and "FAIL message 3 " in out and "offset" in out, out)

    # a frame missing from the capture
    fr = [f for n, f in enumerate(c.frames) if n != victim]
    p = c.write(tmp, f"v{fam}-{rule}-drop", fr)
    # (the WRITE responder: message 3 not covered leaves region 1 unknown; message 2 is compared)
    partial, pmsgs = (600, 1) if wr else (3 * size, 3)
    rc, out = run(p, "--capture-dropped", "1", emu=c.emu)
    expect(f"{name}: a dropped frame is 'not covered', and passes when the capture said it dropped one",
           rc == 0 and out.endswith(f"{pmsgs} messages compared, {partial} bytes, 0 retransmitted copies, 1 not covered"), out)
    rc, out = run(p, emu=c.emu)
    expect(f"{name}: a message not covered fails when the capture dropped nothing",
           rc == 1 and "1 messages are not whole in a capture that dropped nothing" in out, out)

    # nothing of the QP pair in the capture
    fr = [f for f in c.frames if f[0] < 0]
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-none", fr), "--capture-dropped", "5", emu=c.emu)
    expect(f"{name}: no whole message at all fails", rc == 1 and "no message compared" in out, out)

    # more messages not covered than frames the capture dropped: each one not covered misses a
    # frame of its own, so 2 of them with 1 frame dropped means a message never on the wire
    other = next(n for n, (i, k, _) in enumerate(c.frames) if i == 1 and k >= 0)
    fr = [f for n, f in enumerate(c.frames) if n not in (victim, other)]
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-drop2", fr), "--capture-dropped", "1", emu=c.emu)
    expect(f"{name}: 2 messages not covered when the capture dropped 1 frame fails",
           rc == 1 and "2 messages are not whole; the capture dropped 1 frames" in out, out)
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-drop2b", fr), "--capture-dropped", "2", emu=c.emu)
    expect(f"{name}: 2 messages not covered when the capture dropped 2 frames passes", rc == 0, out)

    # a retransmitted copy cut by the snap length is not a copy that can be compared: the capture
    # is refused rather than the copy skipped (here its captured part differs from the first copy)
    i, k, b = c.frames[victim]
    bad = bytearray(b)
    bad[60] ^= 0x40
    fr = list(c.frames) + [(i, k, bytes(bad))]
    rc, out = run(c.write(tmp, f"v{fam}-{rule}-cut", fr, cut={len(fr) - 1}), emu=c.emu)
    expect(f"{name}: a frame cut by the snap length is refused (exit 2)",
           rc == 2 and f"frame {len(fr)} is cut by the snap length" in out, out)


def check_specific(tmp):
    # the WRITE responder's buffer differs from the last WRITE on the wire
    c = build("write_responder")
    c.buf[DST_VA - BUF_VA + 1024 + 5] ^= 1
    rc, out = run(c.write(tmp, "wr-buf"))
    want = f"message 3 (PSN 0x000007), offset 5: expected 0x{data(3, 600)[5]:02x}"
    expect("WRITE responder: a buffer byte unlike the wire fails at the last writer", rc == 1 and want in out, out)
    # a byte of the destination block that no WRITE on the wire wrote is not zero any more
    c = build("write_responder")
    c.buf[DST_VA - BUF_VA + 700] = 0x55
    rc, out = run(c.write(tmp, "wr-stray-byte"))
    expect("WRITE responder: a byte written where no WRITE went fails",
           rc == 1 and f"VA 0x{DST_VA + 700:x} holds 0x55" in out, out)
    # a message whose first packet is missing may have written anywhere: earlier bytes are not compared
    c = build("write_responder")
    first3 = next(n for n, (i, k, _) in enumerate(c.frames) if i == 3 and k == 0)
    fr = [f for n, f in enumerate(c.frames) if n != first3]
    rc, out = run(c.write(tmp, "wr-nofirst", fr), "--capture-dropped", "1")
    expect("WRITE responder: a message without its RETH packet leaves nothing of the image before it compared",
           rc == 1 and "no message compared" in out and "0 messages compared, 0 bytes, 0 retransmitted copies, "
           "1 not covered" in out, out)
    # a run of more PSNs than the 24-bit space: two messages would share a PSN; refused
    c = build("write_responder")
    c.meta["size"], c.meta["iterations"] = 1 << 20, 4097  # 4096 PSNs each at MTU 256
    rc, out = run(c.write(tmp, "wr-wrap"))
    expect("a run longer than 2^24 PSNs is refused (exit 2)", rc == 2 and "2^24" in out, out)
    # the WRITE requester's RETH must carry the WR's remote VA
    c = build("write_requester")
    op, va, b = c.recs[2]
    c.recs[2] = (op, va + 64, b)
    rc, out = run(c.write(tmp, "wq-va"))
    expect("WRITE requester: a RETH VA other than the WR's fails", rc == 1 and "message 2" in out and "RETH VA" in out, out)
    # a READ whose request is not in the capture: its responses match what hcaemu stored, but the
    # VA it read from is not proven (a READ of the wrong VA brings the wrong bytes both ways)
    c = build("read_requester")
    req2 = next(n for n, (i, k, _) in enumerate(c.frames) if i == 2 and k == -1)
    fr = [f for n, f in enumerate(c.frames) if n != req2]
    rc, out = run(c.write(tmp, "rq-noreq", fr))
    expect("READ requester: a READ without its request in the capture is not covered",
           rc == 1 and "3 messages compared, 1800 bytes, 0 retransmitted copies, 1 not covered" in out, out)
    # a READ request the dump does not know, past the run's PSNs
    c = build("read_requester")
    c.frames.append((9, -1, frame(EMU, PEER, PEER_QPN, 0x0C, 0x000200 + 12, reth(PEER_VA, 600))))
    rc, out = run(c.write(tmp, "rq-extra"))
    expect("READ requester: a READ request past the records fails", rc == 1 and "outside the run's 12 PSNs" in out, out)
    # the dump holds fewer records than the run's messages
    c = build("send_requester")
    c.recs.pop()
    rc, out = run(c.write(tmp, "sq-short"))
    expect("a dump with a record missing fails", rc == 1 and "holds 3 records; the run had 4" in out, out)
    # a message past the last record
    c = build("send_receiver")
    c.frames.append((9, 0, frame(PEER, EMU, QPN, 0x04, 0x000100 + 12, b"", b"extra")))
    rc, out = run(c.write(tmp, "sr-extra"))
    expect("a SEND past the records fails", rc == 1 and "outside the run's 12 PSNs" in out, out)
    # a failed run's dump
    c = build("send_receiver")
    c.meta["status"] = 1
    rc, out = run(c.write(tmp, "failed"))
    expect("the dump of a failed run fails", rc == 1 and "the run failed (exit 1)" in out, out)
    # usage and parse errors: exit 2
    p = build("send_receiver").write(tmp, "ok")
    rc, out = run(p[:-2] + "nonexistent")
    expect("no dump: exit 2", rc == 2 and "cannot read the dump" in out, out)
    r = subprocess.run(["/usr/bin/python3", CHECKER, p + ".pcap", p, "--emu-ip", "198.18.0.99"], capture_output=True,
                       text=True, timeout=60)
    expect("--emu-ip not the dump's: exit 2", r.returncode == 2 and "not --emu-ip 198.18.0.99" in r.stdout, r.stdout)
    with open(p + ".pcap", "wb") as f:
        f.write(b"\x0a\x0d\x0d\x0a" + bytes(40))
    rc, out = run(p)
    expect("pcapng: exit 2, says so", rc == 2 and "pcapng" in out, out)
    with open(p + ".pcap", "wb") as f:
        f.write(b"garbage, not a capture at all")
    rc, out = run(p)
    expect("not a pcap: exit 2", rc == 2 and "not a pcap file" in out, out)
    r = subprocess.run(["/usr/bin/python3", CHECKER, p + ".pcap"], capture_output=True, text=True, timeout=60)
    expect("missing arguments: exit 2", r.returncode == 2, r.stderr)


def check_ipv6(tmp):
    c = build("send_receiver", 6)
    ok = "PASS SEND receiver: 4 messages compared, 2400 bytes, 0 retransmitted copies, 0 not covered"
    # the same QPNs between the IPv4 addresses are another stream: a bad copy there is not compared
    v4 = build("send_receiver", 4)
    i, k, b = next(f for f in v4.frames if f[0] == 2 and f[1] == 1)
    bad = bytearray(b)
    bad[-10] ^= 0x40
    rc, out = run(c.write(tmp, "v6-mixed", c.frames + v4.frames + [(i, k, bytes(bad))]), emu=c.emu)
    expect("IPv6: the IPv4 frames of the same QPNs are not the dump's", rc == 0 and out.endswith(ok), out)
    # hcaemu's address written otherwise (RFC 5952 is the form compared)
    rc, out = run(c.write(tmp, "v6-form"), emu="2001:0002:0:0:0::0010")
    expect("IPv6: --emu-ip in a non-canonical form", rc == 0 and out.endswith(ok), out)
    # a packet with an extension header (next header 0, hop-by-hop) is not parsed: not covered
    n = next(n for n, f in enumerate(c.frames) if f[0] == 1 and f[1] == 1)
    fr = list(c.frames)
    b = bytearray(c.frames[n][2])
    b[14 + 6] = 0  # the IPv6 header's next header
    fr[n] = (1, 1, bytes(b))
    rc, out = run(c.write(tmp, "v6-ext", fr), "--capture-dropped", "1", emu=c.emu)
    expect("IPv6: a packet with an extension header is not compared (not covered)",
           rc == 0 and out.endswith("3 messages compared, 1800 bytes, 0 retransmitted copies, 1 not covered"), out)
    # a frame cut short (the IPv6 payload length says more): not compared
    fr = list(c.frames)
    fr[n] = (1, 1, c.frames[n][2][:-20])
    rc, out = run(c.write(tmp, "v6-cut", fr), "--capture-dropped", "1", emu=c.emu)
    expect("IPv6: a frame shorter than its payload length is not compared (not covered)",
           rc == 0 and out.endswith("3 messages compared, 1800 bytes, 0 retransmitted copies, 1 not covered"), out)
    # the address family must be the dump's
    rc, out = run(c.write(tmp, "v6-fam"), emu=EMU)
    expect("IPv6: --emu-ip IPv4 for an IPv6 dump: exit 2", rc == 2 and f"the dump is of {EMU6}, not --emu-ip {EMU}" in out,
           out)
    rc, out = run(c.write(tmp, "v6-bad"), emu="2001:2::10::1")
    expect("IPv6: --emu-ip not an address: exit 2", rc == 2 and "not an IPv4 or IPv6 address" in out, out)
    c.meta["peer_gid"] = "2001"
    rc, out = run(c.write(tmp, "v6-gid"), emu=c.emu)
    expect("a GID that is not 16 bytes: exit 2", rc == 2 and "is not 16 bytes in hex" in out, out)


# ---- real runs: two hcaemu processes over net_memif ----
EAL = "--no-huge -m 256 --no-pci --no-shconf --log-level lib.eal:error"


def free_port():
    """proclib's: below the ephemeral range, where no connection's source port can take it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proclib
    return proclib.free_port()


def real_pair(hcaemu, tmp, test, args):
    sock = os.path.join(tmp, "memif.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    common = f"socket={sock},socket-abstract=no,bsize=10240"
    port = str(free_port())
    tag = f"{os.getpid()}{test}{len(args)}"
    base = [hcaemu, "perf", test, "-p", port, "--oob-timeout", "30"] + args
    srv = subprocess.Popen(base + ["--ip", "198.18.0.1/24", "--mac", "02:00:00:00:00:01", "--dump", os.path.join(tmp, "s"),
                                   "--eal", f"{EAL} -l 0 --file-prefix=cs{tag} --vdev=net_memif0,role=server,{common}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    head = []
    for line in srv.stdout:  # the server listens once it prints its banner
        head.append(line)
        if "Waiting for client" in line or len(head) > 10:
            break
    pcap = os.path.join(tmp, "c.pcap")
    try:
        cli = subprocess.run(base + ["--ip", "198.18.0.2/24", "--mac", "02:00:00:00:00:02", "--dump", os.path.join(tmp, "c"),
                                     "--pcap", pcap, "--eal",
                                     f"{EAL} -l 1 --file-prefix=cc{tag} --vdev=net_memif0,role=client,{common}",
                                     "127.0.0.1"], capture_output=True, text=True, timeout=90)
        so, _ = srv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.communicate()
        return None, "timeout"
    outs = []
    for who, ip in (("c", "198.18.0.2"), ("s", "198.18.0.1")):
        r = subprocess.run(["/usr/bin/python3", CHECKER, pcap, os.path.join(tmp, who), "--emu-ip", ip],
                           capture_output=True, text=True, timeout=60)
        outs.append((r.returncode, r.stdout.strip()))
    return (srv.returncode, cli.returncode, outs), "".join(head) + so + cli.stdout + cli.stderr


def check_real(hcaemu, tmp):
    runs = [("write_bw", ["-n", "30", "-s", "3000"], 30, 3000, "WRITE requester", "WRITE responder"),
            ("read_bw", ["-n", "200", "-s", "64", "--check"], 200, 64, "READ requester", "READ responder"),
            ("read_bw", ["-n", "30", "-s", "3000", "--check"], 30, 3000, "READ requester", "READ responder"),
            ("send_bw", ["-n", "30", "-s", "3000", "--check"], 30, 3000, "SEND requester", "SEND receiver"),
            ("send_bw", ["-n", "30", "-s", "512", "-c", "UD", "--check"], 30, 512, "SEND requester", "SEND receiver")]
    for test, args, n, size, cw, sw in runs:
        r, log = real_pair(hcaemu, tmp, test, args)
        label = f"real {test} {' '.join(args)}"
        if r is None:
            expect(f"{label}: both ends finish", False, log)
            continue
        rs, rc, outs = r
        expect(f"{label}: both exit 0", rs == 0 and rc == 0, log)
        # the WRITE responder's image: 30 messages of 3000 B all at offset 0 of its block, the
        # last of them the one compared
        sbytes, smsgs = (size, 1) if test == "write_bw" else (n * size, n)
        expect(f"{label}: the client's dump matches the capture",
               outs[0][0] == 0 and outs[0][1].endswith(f"PASS {cw}: {n} messages compared, {n * size} bytes, "
                                                        "0 retransmitted copies, 0 not covered"), outs[0])
        expect(f"{label}: the server's dump matches the capture",
               outs[1][0] == 0 and outs[1][1].endswith(f"PASS {sw}: {smsgs} messages compared, {sbytes} bytes, "
                                                        "0 retransmitted copies, 0 not covered"), outs[1])
        if "--check" in args:
            expect(f"{label}: --check beside --dump still checks", "data check: ok" in log, log)
    # the dump changed after the run is caught: a record byte of the client's last run
    with open(os.path.join(tmp, "c.json")) as f:
        off = json.load(f)["records"][7]["off"]
    with open(os.path.join(tmp, "c.bin"), "r+b") as f:
        f.seek(off + 100)
        b = f.read(1)
        f.seek(off + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    r = subprocess.run(["/usr/bin/python3", CHECKER, os.path.join(tmp, "c.pcap"), os.path.join(tmp, "c"), "--emu-ip",
                        "198.18.0.2"], capture_output=True, text=True, timeout=60)
    expect("real: a record byte changed after the run is found (message 7, offset 100)",
           r.returncode == 1 and "message 7 " in r.stdout and "offset 100" in r.stdout, r.stdout)
    # --dump's refusals
    bad = [(["atomic_bw"], "--dump: write_bw, read_bw and send_bw only"), (["write_lat"], "write_bw, read_bw and send_bw only"),
           (["write_bw", "-q", "2"], "--dump: one QP only"), (["write_bw", "-D", "2"], "--dump: counted runs only"),
           (["write_bw", "-s", "1048576", "-n", "100"], "more than 64 MiB"), (["write_bw", "-a"], "more than 64 MiB")]
    for args, msg in bad:
        r = subprocess.run([hcaemu, "perf"] + args + ["--dump", os.path.join(tmp, "x"), "--ip", "198.18.0.1/24"],
                           capture_output=True, text=True, timeout=30)
        expect(f"--dump with {' '.join(args)}: exit 2, says so", r.returncode == 2 and msg in r.stderr, r.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", help="also run hcaemu perf --dump pairs over net_memif")
    a = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hcaemu-datacheck-") as tmp:
        for fam in (4, 6):
            for rule in WHAT:
                check_rule(tmp, rule, fam)
        check_specific(tmp)
        check_ipv6(tmp)
        if a.hcaemu:
            check_real(a.hcaemu, tmp)
    print(f"{time.monotonic() - t0:.1f} s")
    if failures:
        print(f"\n{len(failures)} check(s) failed:\n" + "\n\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("all capture data checks passed")


if __name__ == "__main__":
    main()
