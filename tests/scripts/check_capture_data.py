#!/usr/bin/python3
"""The data of an `hcaemu perf --dump` run, proven byte for byte against a capture of the run.

    check_capture_data.py PCAP PREFIX --emu-ip ADDR [--capture-dropped N]

PREFIX.json and PREFIX.bin come from `hcaemu perf write_bw|read_bw|send_bw --dump PREFIX`: the
QP pair, the start PSNs, the MTU, hcaemu's buffer at the end of the run, and its records (each WR
as completed on a requester: op, remote VA, its bytes; each message received on a SEND receiver).
The capture (classic pcap, Ethernet) is parsed here: Ethernet (one 802.1Q tag allowed), IPv4 or
IPv6 (ADDR is hcaemu's address, of the family of the dump's GIDs), UDP 4791, BTH and its extension
headers (IBTA 9.2-9.3: RETH, AETH, ImmDt, IETH, DETH). The ICRC is not checked here (`hcaemu
dissect --strict` does). Only the frames of the dump's QP pair count.

Messages are placed by PSN (IBTA 9.7.1: a request takes one PSN per packet, a READ request one per
response packet), counted from the start PSNs of the dump, so a frame missing from the capture
never shifts the others. Per direction:
  hcaemu WRITE responder: the final image of the peer's WRITE payloads (RETH VA of the first
    packet, the rest at k * MTU by PSN) equals hcaemu's buffer at those addresses; when every
    message's VA is in the capture, the rest of the destination block (dst_va, dst_len: zeroed
    before the run) is still zero;
  hcaemu READ responder: every READ response payload equals hcaemu's buffer at the requested VA +
    k * MTU;
  hcaemu WRITE/SEND requester: its messages on the wire equal its records one by one (bytes, and
    the remote VA and length for WRITE);
  hcaemu READ requester: the peer's READ responses to each request equal its records' bytes (a
    READ is covered with its request: the VA read from is checked there);
  hcaemu SEND receiver: the peer's messages equal the received-message records one by one.
Every copy of a retransmitted packet must carry the bytes of the first copy. A message the capture
holds only in part is "not covered" and reported. Each message not covered misses a frame of its
own, so there may be at most as many as the frames the capture dropped (--capture-dropped, tcpdump's
count; 0, the default: every message covered). A pass needs one message compared at least (for the
WRITE responder: one that is the last writer of some bytes of the final image; the messages it
overwrote are not compared and not counted). A frame cut by the snap length is refused (exit 2):
its copy could not be compared. A run of 2^24 PSNs or more is refused: two messages would share one.

Prints one line. Exit 0 pass, 1 a difference (the first one: message, offset, expected, got) or
not enough coverage, 2 bad arguments or input that cannot be parsed.
"""
import argparse
import ipaddress
import json
import struct
import sys

ROCE_PORT = 4791
PSN_MOD = 1 << 24

# BTH opcode's low 5 bits (IBTA 9.2, table 38) for RC and UC: (bytes of extension headers after
# the BTH, class, position). F first, M middle, L last, O only.
OPS = {
    0x00: (0, "send", "F"), 0x01: (0, "send", "M"), 0x02: (0, "send", "L"), 0x03: (4, "send", "L"),
    0x04: (0, "send", "O"), 0x05: (4, "send", "O"),
    0x06: (16, "write", "F"), 0x07: (0, "write", "M"), 0x08: (0, "write", "L"), 0x09: (4, "write", "L"),
    0x0A: (16, "write", "O"), 0x0B: (20, "write", "O"),
    0x0C: (16, "read_req", "O"),
    0x0D: (4, "read_resp", "F"), 0x0E: (0, "read_resp", "M"), 0x0F: (4, "read_resp", "L"), 0x10: (4, "read_resp", "O"),
    0x16: (4, "send", "L"), 0x17: (4, "send", "O"),
}
# UD (transport 011b): SEND Only and SEND Only with immediate, after a DETH (8 bytes)
UD_OPS = {0x64: (8, "send", "O"), 0x65: (12, "send", "O")}
HAS_RETH = {0x06, 0x0A, 0x0B, 0x0C, 0x26, 0x2A, 0x2B}


class Usage(Exception):
    pass


class Mismatch(Exception):
    pass


class Pkt:
    __slots__ = ("frame", "opcode", "cls", "pos", "psn", "reth", "payload")

    def key(self):
        return (self.opcode, self.reth, self.payload)


def read_pcap(path):
    """Yields (frame number from 1, bytes) of a classic pcap with Ethernet frames, none cut."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Usage(f"cannot read {path}: {e.strerror}")
    if len(data) < 24:
        raise Usage(f"{path}: not a pcap file (too short)")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    elif magic == b"\x0a\x0d\x0d\x0a":
        raise Usage(f"{path}: pcapng is not read here (editcap -F pcap converts it)")
    else:
        raise Usage(f"{path}: not a pcap file (magic {magic.hex()})")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        raise Usage(f"{path}: link type {linktype}, not Ethernet (1)")
    off, n = 24, 0
    while off < len(data):
        if off + 16 > len(data):
            raise Usage(f"{path}: truncated record header at byte {off}")
        incl, orig = struct.unpack(e + "II", data[off + 8:off + 16])
        off += 16
        if off + incl > len(data):
            raise Usage(f"{path}: truncated frame at byte {off}")
        n += 1
        if incl < orig:  # a copy whose end is not there cannot be compared (tcpdump -s 0)
            raise Usage(f"{path}: frame {n} is cut by the snap length ({incl} of {orig} bytes)")
        yield n, data[off:off + incl]
        off += incl


def parse_frame(n, fr):
    """(src ip, dst ip, dest QP, Pkt) of a RoCE v2 frame over IPv4 or IPv6 with an opcode of OPS, else None."""
    if len(fr) < 14:
        return None
    et, o = struct.unpack(">H", fr[12:14])[0], 14
    if et == 0x8100 and len(fr) >= 18:
        et, o = struct.unpack(">H", fr[16:18])[0], 18
    if et == 0x0800 and len(fr) >= o + 20:
        vihl = fr[o]
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20 or fr[o + 9] != 17:
            return None
        tot = struct.unpack(">H", fr[o + 2:o + 4])[0]
        if tot < ihl + 8 or o + tot > len(fr):
            return None  # cut by the snap length or malformed: not compared
        src, dst = str(ipaddress.IPv4Address(fr[o + 12:o + 16])), str(ipaddress.IPv4Address(fr[o + 16:o + 20]))
    elif et == 0x86DD and len(fr) >= o + 40:
        # IPv6 (RFC 8200 3): UDP right after the fixed header; extension headers are not parsed
        # here, so such a packet is not compared (its message shows as not covered)
        if fr[o] >> 4 != 6 or fr[o + 6] != 17:
            return None
        ihl = 40
        tot = ihl + struct.unpack(">H", fr[o + 4:o + 6])[0]
        if tot < ihl + 8 or o + tot > len(fr):
            return None  # cut by the snap length or malformed: not compared
        src, dst = str(ipaddress.IPv6Address(fr[o + 8:o + 24])), str(ipaddress.IPv6Address(fr[o + 24:o + 40]))
    else:
        return None
    u = o + ihl
    dport, ulen = struct.unpack(">H", fr[u + 2:u + 4])[0], struct.unpack(">H", fr[u + 4:u + 6])[0]
    if dport != ROCE_PORT or ulen < 8 + 12 + 4 or u + ulen > o + tot:
        return None
    b = fr[u + 8:u + ulen]  # BTH .. ICRC
    opcode = b[0]
    ops = UD_OPS if opcode >> 5 == 3 else OPS if opcode >> 5 in (0, 1) else {}
    info = ops.get(opcode if opcode >> 5 == 3 else opcode & 0x1F)
    if info is None:
        return None  # ACK, atomics, CNP, ...: no data compared
    ext, cls, pos = info
    pad = (b[1] >> 4) & 3
    dqp = int.from_bytes(b[5:8], "big")
    psn = int.from_bytes(b[9:12], "big")
    end = len(b) - 4 - pad
    if 12 + ext > end:
        raise Usage(f"frame {n}: opcode 0x{opcode:02x} shorter than its headers")
    p = Pkt()
    p.frame, p.opcode, p.cls, p.pos, p.psn = n, opcode, cls, pos, psn
    p.reth = struct.unpack(">QII", b[12:28]) if opcode in HAS_RETH else None  # VA, R_Key, DMA length
    p.payload = bytes(b[12 + ext:end])
    return src, dst, dqp, p


class Streams:
    """The packets of each (src, dst, dest QP), by PSN: the first copy, later copies compared to it."""

    def __init__(self, frames, keep):
        self.by = {}
        self.copies = 0
        self.first_diff = None
        for n, fr in frames:
            r = parse_frame(n, fr)
            if r is None or (r[0], r[1], r[2]) not in keep:
                continue
            s = self.by.setdefault((r[0], r[1], r[2]), {})
            p = r[3]
            q = s.get(p.psn)
            if q is None:
                s[p.psn] = p
                continue
            self.copies += 1
            if q.key() != p.key() and self.first_diff is None:
                self.first_diff = (f"frame {p.frame} (PSN 0x{p.psn:06x}, a copy of frame {q.frame}) differs from "
                                   f"the first copy: {describe_diff(q, p)}")

    def get(self, stream):
        return self.by.get(stream, {})


def describe_diff(a, b):
    if a.opcode != b.opcode:
        return f"opcode 0x{a.opcode:02x} then 0x{b.opcode:02x}"
    if a.reth != b.reth:
        return f"RETH {a.reth} then {b.reth}"
    if len(a.payload) != len(b.payload):
        return f"payload {len(a.payload)} then {len(b.payload)} bytes"
    i = next(i for i in range(len(a.payload)) if a.payload[i] != b.payload[i])
    return f"payload byte {i}: 0x{a.payload[i]:02x} then 0x{b.payload[i]:02x}"


def first_diff(want, got):
    if want == got:
        return None
    n = min(len(want), len(got))
    for i in range(n):
        if want[i] != got[i]:
            return i
    return n


class Checker:
    def __init__(self, meta, blob, streams, emu, peer):
        self.m, self.blob, self.st, self.emu, self.peer = meta, blob, streams, emu, peer
        self.mtu = meta["mtu"]
        self.to_peer = (emu, peer, meta["peer_qpn"])
        self.to_emu = (peer, emu, meta["qpn"])
        self.compared = self.bytes = self.not_covered = 0

    def npk(self, size):
        return max(1, -(-size // self.mtu))

    def buf(self, va, n, what):
        off = va - self.m["buf_va"]
        if off < 0 or off + n > self.m["buf_len"]:
            raise Mismatch(f"{what}: VA 0x{va:x} + {n} is outside hcaemu's buffer "
                           f"0x{self.m['buf_va']:x} + {self.m['buf_len']}")
        return self.blob[off:off + n]

    def gather(self, stream, psn, n, cls, i):
        """The packets of message i (n PSNs from psn) in `stream`: None where the capture has none."""
        s = self.st.get(stream)
        out = []
        for k in range(n):
            p = s.get((psn + k) % PSN_MOD)
            if p is not None:
                want = "O" if n == 1 else "F" if k == 0 else "L" if k == n - 1 else "M"
                if p.cls != cls or p.pos != want:
                    raise Mismatch(f"message {i}: frame {p.frame} at PSN 0x{p.psn:06x} is {p.cls} {p.pos} "
                                   f"(opcode 0x{p.opcode:02x}), expected {cls} {want}")
                exp_len = min(self.mtu, self.size_of(i) - k * self.mtu) if cls != "read_req" else 0
                if cls != "read_req" and len(p.payload) != max(exp_len, 0):
                    raise Mismatch(f"message {i}: frame {p.frame} at PSN 0x{p.psn:06x} carries {len(p.payload)} "
                                   f"bytes, expected {max(exp_len, 0)}")
            out.append(p)
        return out

    def stray(self, stream, psn0, span, classes):
        """Data packets of `stream` outside the run's PSN range: messages the dump does not know."""
        for psn, p in self.st.get(stream).items():
            rel = (psn - psn0) % PSN_MOD
            if p.cls in classes and rel >= span:
                raise Mismatch(f"frame {p.frame}: {p.cls} at PSN 0x{psn:06x}, outside the run's "
                               f"{span} PSNs from 0x{psn0:06x}")

    def compare(self, i, psn, want, got, want_what, got_what):
        d = first_diff(want, got)
        if d is None:
            return
        w = f"0x{want[d]:02x}" if d < len(want) else "the end"
        g = f"0x{got[d]:02x}" if d < len(got) else "the end"
        raise Mismatch(f"message {i} (PSN 0x{psn:06x}), offset {d}: expected {w} ({want_what}), got {g} ({got_what})"
                       + (f"; lengths {len(want)} and {len(got)}" if len(want) != len(got) else ""))

    def cover(self, ok):
        self.not_covered += not ok
        return ok

    # ---- the messages of the run ----
    def records(self, op):
        recs = self.m["records"]
        bad = [r["op"] for r in recs if r["op"] != op]
        if bad:
            raise Usage(f"the dump's records are {bad[0]}, expected {op}")
        if len(recs) != self.m["iterations"]:
            raise Mismatch(f"the dump holds {len(recs)} records; the run had {self.m['iterations']} messages")
        self.sizes = [r["len"] for r in recs]
        self.span_ok()
        return recs

    def span_ok(self):
        """Messages are placed by PSN: a run of 2^24 PSNs or more would put two on one."""
        n = sum(self.npk(s) for s in self.sizes)
        if n >= PSN_MOD:
            raise Usage(f"the run takes {n} PSNs, 2^24 or more: messages cannot be placed by PSN")

    def size_of(self, i):
        return self.sizes[i]

    def rec_bytes(self, r):
        return self.blob[r["off"]:r["off"] + r["len"]]

    # ---- the five rules ----
    def requester_write_send(self, cls):
        recs = self.records(cls)
        psn = self.m["psn"]
        for i, r in enumerate(recs):
            n = self.npk(r["len"])
            pk = self.gather(self.to_peer, psn, n, cls, i)
            if cls == "write" and pk[0] is not None:
                va, _, dlen = pk[0].reth
                if va != r["remote_va"] or dlen != r["len"]:
                    raise Mismatch(f"message {i} (PSN 0x{psn:06x}): RETH VA 0x{va:x} length {dlen}, the WR had "
                                   f"0x{r['remote_va']:x} length {r['len']}")
            if self.cover(None not in pk):
                self.compare(i, psn, self.rec_bytes(r), b"".join(p.payload for p in pk), "the WR's bytes", "the wire")
                self.compared += 1
                self.bytes += r["len"]
            psn = (psn + n) % PSN_MOD
        self.stray(self.to_peer, self.m["psn"], (psn - self.m["psn"]) % PSN_MOD, {cls})

    def requester_read(self):
        recs = self.records("read")
        psn = self.m["psn"]
        for i, r in enumerate(recs):
            n = self.npk(r["len"])
            req = self.st.get(self.to_peer).get(psn)
            if req is not None:
                if req.cls != "read_req":
                    raise Mismatch(f"message {i}: frame {req.frame} at PSN 0x{psn:06x} is {req.cls}, expected a READ request")
                va, _, dlen = req.reth
                if va != r["remote_va"] or dlen != r["len"]:
                    raise Mismatch(f"message {i} (PSN 0x{psn:06x}): READ request VA 0x{va:x} length {dlen}, the WR had "
                                   f"0x{r['remote_va']:x} length {r['len']}")
            pk = self.gather(self.to_emu, psn, n, "read_resp", i)
            # without its request the VA read from is not proven: not covered
            if self.cover(req is not None and None not in pk):
                self.compare(i, psn, b"".join(p.payload for p in pk), self.rec_bytes(r), "the peer's READ responses",
                             "the bytes hcaemu read")
                self.compared += 1
                self.bytes += r["len"]
            psn = (psn + n) % PSN_MOD
        self.stray(self.to_emu, self.m["psn"], (psn - self.m["psn"]) % PSN_MOD, {"read_resp"})
        self.stray(self.to_peer, self.m["psn"], (psn - self.m["psn"]) % PSN_MOD, {"read_req"})

    def receiver_send(self):
        recs = self.records("recv")
        psn = self.m["peer_psn"]
        for i, r in enumerate(recs):
            n = self.npk(r["len"])
            pk = self.gather(self.to_emu, psn, n, "send", i)
            if self.cover(None not in pk):
                self.compare(i, psn, b"".join(p.payload for p in pk), self.rec_bytes(r), "the peer's SEND",
                             "what hcaemu received")
                self.compared += 1
                self.bytes += r["len"]
            psn = (psn + n) % PSN_MOD
        self.stray(self.to_emu, self.m["peer_psn"], (psn - self.m["peer_psn"]) % PSN_MOD, {"send"})

    def peer_sizes(self):
        if self.m["all_sizes"]:
            raise Usage("a dump of -a: the peer's sizes are not recorded")
        self.sizes = [self.m["size"]] * self.m["iterations"]
        self.span_ok()
        return self.sizes

    def responder_write(self):
        sizes = self.peer_sizes()
        base, blen = self.m["buf_va"], self.m["buf_len"]
        image = bytearray(blen)
        known = bytearray(blen)       # 0xFF: the byte's last writer is a covered message
        writers = []                  # the covered messages in order: (offset, size, message, PSN)
        wrote = bytearray(blen)       # 0xFF: a message on the wire wrote there (None: not known)
        psn = self.m["peer_psn"]
        for i, size in enumerate(sizes):
            n = self.npk(size)
            pk = self.gather(self.to_emu, psn, n, "write", i)
            va = None
            if pk[0] is not None:
                va, _, dlen = pk[0].reth
                if dlen != size:
                    raise Mismatch(f"message {i} (PSN 0x{psn:06x}): RETH length {dlen}, the run's size is {size}")
                self.buf(va, size, f"message {i} (PSN 0x{psn:06x})")
                if wrote is not None:
                    wrote[va - base:va - base + size] = b"\xff" * size
            else:
                wrote = None
            if self.cover(None not in pk):
                o = va - base
                data = b"".join(p.payload for p in pk)
                image[o:o + size] = data
                known[o:o + size] = b"\xff" * size
                writers.append((o, size, i, psn))
            elif va is not None:  # where it wrote is known, what is not
                o = va - base
                known[o:o + size] = bytes(size)
            else:  # it may have written anywhere
                known = bytearray(blen)
            psn = (psn + n) % PSN_MOD
        self.stray(self.to_emu, self.m["peer_psn"], (psn - self.m["peer_psn"]) % PSN_MOD, {"write"})
        # the known bytes of the image against the buffer, as big integers (fast for large buffers)
        diff = (int.from_bytes(image, "big") ^ int.from_bytes(self.blob[:blen], "big")) & int.from_bytes(known, "big")
        if diff:
            o = blen - 1 - (diff.bit_length() - 1) // 8  # the first differing byte
            wo, _, i, p = next(w for w in reversed(writers) if w[0] <= o < w[0] + w[1])  # its last writer
            raise Mismatch(f"message {i} (PSN 0x{p:06x}), offset {o - wo}: expected 0x{image[o]:02x} (the last WRITE "
                           f"to VA 0x{base + o:x} on the wire), got 0x{self.blob[o]:02x} (hcaemu's buffer)")
        self.bytes = known.count(0xFF)
        # the rest of the destination block (zeroed before the run) stays zero when every message's
        # VA is known: a byte there is one written where no WRITE on the wire went
        if wrote is not None:
            d0, dl = self.m["dst_va"] - base, self.m["dst_len"]
            if d0 < 0 or d0 + dl > blen:
                raise Usage(f"the destination block 0x{self.m['dst_va']:x} + {dl} is outside the buffer")
            mask = bytearray(blen)
            mask[d0:d0 + dl] = b"\xff" * dl
            extra = int.from_bytes(self.blob[:blen], "big") & int.from_bytes(mask, "big") & ~int.from_bytes(wrote, "big")
            if extra:
                o = blen - 1 - (extra.bit_length() - 1) // 8
                raise Mismatch(f"hcaemu's buffer at VA 0x{base + o:x} holds 0x{self.blob[o]:02x} where no WRITE on the wire "
                               "wrote (its destination block starts zeroed)")
        # compared: the messages that are the last writer of some byte of the image (the others
        # were overwritten: their bytes are not in the buffer any more, nothing of them is proven)
        k = int.from_bytes(known, "big")
        for o, size, _, _ in reversed(writers):
            m = ((1 << (8 * size)) - 1) << (8 * (blen - o - size))
            self.compared += bool(k & m)
            k &= ~m
    def responder_read(self):
        sizes = self.peer_sizes()
        psn = self.m["peer_psn"]
        reqs = self.st.get(self.to_emu)
        for i, size in enumerate(sizes):
            n = self.npk(size)
            req = reqs.get(psn)
            if req is not None and req.cls != "read_req":
                raise Mismatch(f"message {i}: frame {req.frame} at PSN 0x{psn:06x} is {req.cls}, expected a READ request")
            pk = self.gather(self.to_peer, psn, n, "read_resp", i)
            if req is not None:
                va, _, dlen = req.reth
                if dlen != size:
                    raise Mismatch(f"message {i} (PSN 0x{psn:06x}): READ length {dlen}, the run's size is {size}")
                for k, p in enumerate(pk):  # every response there is, also of a message not covered
                    if p is None:
                        continue
                    want = self.buf(va + k * self.mtu, len(p.payload), f"message {i}")
                    self.compare(i, psn, want, p.payload, f"hcaemu's buffer at VA 0x{va + k * self.mtu:x}",
                                 f"the READ response at PSN 0x{p.psn:06x}")
            if self.cover(req is not None and None not in pk):
                self.compared += 1
                self.bytes += size
            psn = (psn + n) % PSN_MOD
        self.stray(self.to_peer, self.m["peer_psn"], (psn - self.m["peer_psn"]) % PSN_MOD, {"read_resp"})

    def run(self):
        t, role = self.m["test"], self.m["role"]
        if t == "write_bw":
            (self.requester_write_send("write") if role == "client" else self.responder_write())
            return "WRITE requester" if role == "client" else "WRITE responder"
        if t == "read_bw":
            (self.requester_read() if role == "client" else self.responder_read())
            return "READ requester" if role == "client" else "READ responder"
        if t == "send_bw":
            (self.requester_write_send("send") if role == "client" else self.receiver_send())
            return "SEND requester" if role == "client" else "SEND receiver"
        raise Usage(f"test {t}: not one this checks (write_bw, read_bw, send_bw)")


def ip_of_gid(h):
    """The address of a GID (32 hex digits): IPv4 for an IPv4-mapped one (::ffff:a.b.c.d), else IPv6."""
    try:
        g = bytes.fromhex(h)
    except ValueError:
        g = b""
    if len(g) != 16:
        raise Usage(f"GID {h!r} is not 16 bytes in hex")
    if g[:12] == bytes(10) + b"\xff\xff":
        return str(ipaddress.IPv4Address(g[12:]))
    return str(ipaddress.IPv6Address(g))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap")
    ap.add_argument("prefix")
    ap.add_argument("--emu-ip", required=True, help="hcaemu's IPv4 or IPv6 address in the capture")
    ap.add_argument("--capture-dropped", type=int, default=0, help="frames the capture dropped (tcpdump's count)")
    try:
        a = ap.parse_args()
    except SystemExit as e:
        sys.exit(2 if e.code else 0)
    head = "check_capture_data:"
    try:
        if a.capture_dropped < 0:
            raise Usage(f"--capture-dropped {a.capture_dropped}: a count, 0 or more")
        try:
            with open(a.prefix + ".json") as f:
                meta = json.load(f)
            with open(a.prefix + ".bin", "rb") as f:
                blob = f.read()
        except (OSError, ValueError) as e:
            raise Usage(f"cannot read the dump {a.prefix}.json/.bin: {e}")
        for k in ("test", "role", "qpn", "psn", "peer_qpn", "peer_psn", "gid", "peer_gid", "buf_va", "buf_len", "dst_va",
                  "dst_len", "mtu",
                  "size", "iterations", "records", "status"):
            if k not in meta:
                raise Usage(f"{a.prefix}.json has no '{k}'")
        if len(blob) < meta["buf_len"] + sum(r["len"] for r in meta["records"]):
            raise Usage(f"{a.prefix}.bin is shorter than its json says")
        try:
            emu = str(ipaddress.ip_address(a.emu_ip))
        except ValueError:
            raise Usage(f"--emu-ip {a.emu_ip}: not an IPv4 or IPv6 address")
        if ip_of_gid(meta["gid"]) != emu:
            raise Usage(f"the dump is of {ip_of_gid(meta['gid'])}, not --emu-ip {emu}")
        peer = ip_of_gid(meta["peer_gid"])
        head = f"check_capture_data: {meta['test']} ({meta['role']}, hcaemu QP 0x{meta['qpn']:06x})"
        if meta["status"] != 0:
            raise Mismatch(f"the run failed (exit {meta['status']}): its dump is partial")
        if meta.get("records_overflow"):
            raise Mismatch("the run had more records than it reserved room for")
        st = Streams(read_pcap(a.pcap), {(emu, peer, meta["peer_qpn"]), (peer, emu, meta["qpn"])})
        if st.first_diff:
            raise Mismatch(st.first_diff)
        c = Checker(meta, blob, st, emu, peer)
        what = c.run()
        summary = (f"{what}: {c.compared} messages compared, {c.bytes} bytes, {st.copies} retransmitted copies, "
                   f"{c.not_covered} not covered")
        if c.compared == 0:
            raise Mismatch(f"no message compared: none is whole in the capture, or none is in the final image ({summary})")
        if a.capture_dropped == 0 and c.not_covered:
            raise Mismatch(f"{c.not_covered} messages are not whole in a capture that dropped nothing ({summary})")
        if c.not_covered > a.capture_dropped:
            raise Mismatch(f"{c.not_covered} messages are not whole; the capture dropped {a.capture_dropped} frames, "
                           f"and each of them misses one of its own ({summary})")
    except Usage as e:
        print(f"{head}: ERROR {e}")
        sys.exit(2)
    except Mismatch as e:
        print(f"{head}: FAIL {e}")
        sys.exit(1)
    print(f"{head}: PASS {summary}")


if __name__ == "__main__":
    main()
