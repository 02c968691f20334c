#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (tests/fuzz), written at run time (not committed): from the
Linux rxe captures (../shared/captures/rxe) and from the request shapes the tests use.

  make_seeds.py --captures DIR --out DIR TARGET

Writes OUT/<sha1> files. fuzz_parse: every distinct frame of every capture. fuzz_pcap: each capture
cut to its first frames, in pcap (microsecond and nanosecond magic) and pcapng. fuzz_receive: runs
of capture frames as 'fixed' records (tests/fuzz/fuzz_receive.cpp) aimed at a QP of the right
transport, with posted sends and time steps. fuzz_mad: a CM MAD per attribute ID. fuzz_ctl: request sequences that create a PD, MR, CQs
and QPs of each type, then WQEs and turns (tests/fuzz/fuzz_ctl.cpp).
"""
import argparse
import hashlib
import os
import struct
import sys


def read_pcap(path):
    """(timestamp tuple, frame bytes) of a classic pcap file."""
    data = open(path, 'rb').read()
    if len(data) < 24:
        return []
    magic = data[:4]
    end = '<' if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1') else '>'
    out = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, caplen, _orig = struct.unpack(end + 'IIII', data[off:off + 16])
        off += 16
        out.append(((sec, frac), data[off:off + caplen]))
        off += caplen
    return out


def pcap_file(frames, nano=False):
    magic = 0xa1b23c4d if nano else 0xa1b2c3d4
    b = struct.pack('<IHHiIII', magic, 2, 4, 0, 0, 262144, 1)
    for (sec, frac), f in frames:
        b += struct.pack('<IIII', sec, frac, len(f), len(f)) + f
    return b


def pcapng_file(frames):
    def block(btype, body):
        body += b'\0' * ((4 - len(body) % 4) % 4)
        n = 12 + len(body)
        return struct.pack('<II', btype, n) + body + struct.pack('<I', n)
    b = block(0x0A0D0D0A, struct.pack('<IHHq', 0x1A2B3C4D, 1, 0, -1))
    b += block(1, struct.pack('<HHI', 1, 0, 262144))
    for (sec, frac), f in frames:
        ts = sec * 1000000 + frac
        b += block(6, struct.pack('<IIIII', 0, ts >> 32, ts & 0xffffffff, len(f), len(f)) + f)
    return b


# fuzz_receive.cpp: QP indices (type-major: RC, UC, UD; states RESET INIT RTR RTS SQD ERR).
RTS = {0: 3, 1: 9, 3: 15}  # opcode >> 5 -> the RTS QP of that transport


def receive_seeds(frames):
    seeds = []
    roce = [f for _, f in frames if len(f) > 42 and f[12:14] == b'\x08\x00' and f[36:38] == b'\x12\xb7']
    for start in range(0, len(roce), 3):
        run = roce[start:start + 3]
        b = b''
        # A posted send (record tag 4, sub 0) on the RC RTS QP, so that responses find a WQE.
        b += bytes([4, 3, 2, 0x00, 0x40, 0x00])
        for f in run:
            qp = RTS.get(f[42] >> 5, 3)
            b += bytes([1, qp]) + struct.pack('<H', len(f)) + f
            b += bytes([5, 0x20])  # time: 2^0 ns, two polls
        b += bytes([5, 0x80])  # time: to the next timer
        seeds.append(b)
    return seeds


def built(qp, os_, region=2, ps=0x90, ctl=0x04):
    """A 'built' record (fuzz_receive.cpp Bench::built): PSN delta 0, offset 0, DMA length = the
    payload's, the MR's own R_Key, zero AtomicETH and AETH."""
    return bytes([2, qp, ctl, os_, 0, 0, region, 0, 0x05, ps]) + bytes(16) + bytes(3)


def receive_built_seeds():
    seeds = []
    send = bytes([4, 3, 2, 0x00, 0x40, 0x00])  # a posted SEND on the RC RTS QP
    for qp in (2, 3, 4, 9, 15, 18):  # RC RTR, RTS, SQD; UC RTS; UD RTS; RC on the SRQ
        for os_ in range(32):  # each opcode of the QP's transport (index modulo their count)
            seeds.append(send + built(qp, os_, region=os_ % 6) + bytes([5, 0x20, 5, 0x80]))
    # Multi-packet messages: First, Middle, Last of 1024, 1024 and 16 bytes (RC and UC SEND, WRITE).
    for qp, first in ((3, 0), (3, 6), (9, 0), (9, 6)):
        seeds.append(built(qp, first, ps=0x40) + built(qp, first + 1, ps=0x40) + built(qp, first + 2) + bytes([5, 0x20]))
    return seeds


def ctl_seeds():
    """Requests: tag 0, op, body, handle mask, handle indices."""
    def req(op, body=b'', subst=()):
        mask = 0
        idx = b''
        for w, k in subst:
            mask |= 1 << w
            idx += bytes([k])
        return bytes([0, op - 1]) + body + bytes([mask]) + idx
    qpcap = struct.pack('<IIIII', 16, 16, 2, 2, 64)
    base = b''
    base += req(5)  # alloc_pd -> handles[0]
    base += req(7, struct.pack('<IIQQQ', 0, 0xF, 0, 65536, 0x100000), [(0, 0)])  # reg_mr -> [1]
    base += req(9, struct.pack('<iB3xQ', 64, 1, 7))  # create_cq -> [2]
    seeds = []
    for qtype in (2, 3, 4):
        b = base + req(13, struct.pack('<IIII', 0, 0, 0, 0) + qpcap + bytes([qtype, 0, 0, 0]),
                       [(0, 0), (1, 2), (2, 2)])  # create_qp -> [3]
        b += bytes([3, 2, 0, 0, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])  # wqe on the RQ (rings: CQ, SQ, RQ)
        b += bytes([3, 1, 0, 0, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])  # wqe on the SQ
        b += bytes([4, 9])  # turns
        seeds.append(b)
    b = base + req(17, struct.pack('<II', 0, 0) + struct.pack('<III', 16, 2, 0), [(0, 0)])  # create_srq
    b += bytes([3, 1, 0, 0, 4]) + bytes([4, 9])
    seeds.append(b)
    b = base + req(21, struct.pack('<II', 0, 0) + bytes(16) + struct.pack('<IBBBBB?xx', 0, 1, 64, 0, 0, 1, True),
                   [(0, 0)])  # create_ah
    seeds.append(b)
    b = base + req(23, struct.pack('<B3xI', 0, 0)) + req(24, struct.pack('<B3xI', 0, 0)) + req(4, struct.pack('<B3xi', 1, 0))
    seeds.append(b)
    return seeds


def mad_seeds():
    """fuzz_mad: a 256-byte CM MAD (IBTA 13.4.2 header, Send) per CM attribute ID, fields patterned,
    a REQ with the RDMA CM header (Annex A11.4) in its private data, and the bare CMA header."""
    seeds = []
    cma = struct.pack('>BBH', 0, 0x40, 54321) + bytes(12) + bytes([198, 18, 0, 1]) + bytes(12) + bytes([198, 18, 0, 2])
    for attr in [0x0001] + list(range(0x0010, 0x001B)):
        method = 0x81 if attr == 0x0001 else 0x03
        hdr = struct.pack('>BBBBHHQHHI', 1, 0x07, 2, method, 0, 0, 0x12345678, attr, 0, 0)
        body = bytearray(struct.pack('>II', 0x11223344, 0x55667788)) + bytes(224)
        if attr == 0x0010:  # REQ: TCP port-space Service ID, QPN, PSN, CMA header at byte 140
            body[8:16] = struct.pack('>Q', 0x0000000001064853)
            body[32:36] = struct.pack('>I', 0x00012304)
            body[44:48] = struct.pack('>I', 0xABCDEF9F)
            body[140:176] = cma
        seeds.append(hdr + bytes(body))
    seeds.append(cma)
    return seeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--captures', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('target')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    caps = []
    if os.path.isdir(a.captures):
        caps = sorted(os.path.join(a.captures, n) for n in os.listdir(a.captures) if n.endswith('.pcap'))
    seeds = []
    for c in caps:
        frames = read_pcap(c)
        if a.target == 'fuzz_parse':
            seeds += [f for _, f in frames]
        elif a.target == 'fuzz_pcap':
            seeds += [pcap_file(frames[:4]), pcap_file(frames[:3], nano=True), pcapng_file(frames[:3])]
        elif a.target == 'fuzz_receive':
            seeds += receive_seeds(frames)[:40]
    if a.target == 'fuzz_ctl':
        seeds += ctl_seeds()
    if a.target == 'fuzz_mad':
        seeds += mad_seeds()
    if a.target == 'fuzz_receive':
        seeds += receive_built_seeds()
    seen = set()
    for s in seeds:
        h = hashlib.sha1(s).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        with open(os.path.join(a.out, h), 'wb') as f:
            f.write(s)
    print(f'make_seeds: {a.target}: {len(seen)} seeds from {len(caps)} captures in {a.out}', file=sys.stderr)


if __name__ == '__main__':
    main()
