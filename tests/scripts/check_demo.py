#!/usr/bin/python3
"""`hcaemu demo` end to end: two HCAs on DPDK's net_ring pair perform SEND, WRITE, READ, CmpSwap
and FetchAdd. For the default sizes and for --size 0 and --size 5000:
  - exit status 0 and every operation verified;
  - the story names each step of each operation in order (post, WQE fetched, DMA reads at the
    posted address and the following MTU-sized offsets, each packet with its PSN counted from the
    fixed first PSN 0x000100, DMA writes at the target addresses, ACK with its MSN, CQEs), and the
    atomics' old and new values;
  - the pcap dissects with every frame's ICRC good, in exactly the expected opcode and PSN
    sequence, and its frames are the ones the story tells;
and bad arguments exit 2."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []
MTU = 1024
FIRST_PSN = 0x100

# BTH opcodes (IBTA 9.2 table 38), RC
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0A
READ_REQ, READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
ACK, ATOMIC_ACK, CMP_SWAP, FETCH_ADD = 0x11, 0x12, 0x13, 0x14


def run(args, timeout=120):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-1500:]}")
    return cond


def npkts(size):
    return max(1, (size + MTU - 1) // MTU)


def seq(size, first, middle, last, only):
    n = npkts(size)
    return [only] if n == 1 else [first] + [middle] * (n - 2) + [last]


def chunks(size):
    """(offset, length) of each packet's payload."""
    return [(k * MTU, min(MTU, size - k * MTU)) for k in range(npkts(size))] if size else [(0, 0)]


def expected_frames(send, rw):
    """(opcode, PSN) of every frame, in order: each operation waits for its completion."""
    out, psn = [], FIRST_PSN
    for op in seq(send, SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY):
        out.append((op, psn))
        psn += 1
    out.append((ACK, psn - 1))
    for op in seq(rw, WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY):
        out.append((op, psn))
        psn += 1
    out.append((ACK, psn - 1))
    out.append((READ_REQ, psn))
    for op in seq(rw, READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY):
        out.append((op, psn))
        psn += 1
    out += [(CMP_SWAP, psn), (ATOMIC_ACK, psn), (FETCH_ADD, psn + 1), (ATOMIC_ACK, psn + 1)]
    return out


def in_order(name, lines, patterns):
    """Each regex matches a line, in this order (other lines may come between). Returns the matches."""
    i, found = 0, []
    for pat in patterns:
        rx = re.compile(pat)
        while i < len(lines) and not rx.search(lines[i]):
            i += 1
        if not expect(name, i < len(lines), f"no line matching {pat!r} after the previous step"):
            return None
        found.append(rx.search(lines[i]))
        i += 1
    return found


def sections(out):
    """The story of each numbered operation: {1: [lines], ...}."""
    secs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"== (\d)\. ", line)
        if m:
            cur = int(m.group(1))
            secs[cur] = []
        elif cur is not None:
            secs[cur].append(line)
    return secs


def P(psn):
    return f"PSN 0x{psn:06x}"


HEX = r"(0x[0-9a-f]+)"


def check_story(tag, out, send, rw):
    secs = sections(out)
    if not expect(f"{tag}: five operations told", sorted(secs) == [1, 2, 3, 4, 5], list(secs)):
        return
    psn = FIRST_PSN
    # 1. SEND
    s = secs[1]
    m = in_order(f"{tag} SEND", s, [
        rf"^B: post receive wr_id=101, room for {max(send, 64)} bytes at {HEX} \(L_Key {HEX}\)",
        rf"^A: post SEND wr_id=1, {send} bytes from addr {HEX} \(L_Key {HEX}\)",
        rf"^A: WQE fetched from the send queue \(QP 0x[0-9a-f]{{6}}, wr_id=1, SEND, {send} bytes\): "
        rf"{npkts(send)} packet\(s\) from {P(psn)}",
    ])
    if not m:
        return
    recv_addr, src = int(m[0].group(1), 16), int(m[1].group(1), 16)
    steps = []
    for k, (off, ln) in enumerate(chunks(send)):
        if ln:
            steps.append(rf"^A: DMA read {ln} bytes at 0x{src + off:x} \(L_Key {m[1].group(2)}\) for the packet with {P(psn + k)}")
        steps.append(rf"^A -> B: RC SEND \w+  {P(psn + k)}  DestQP 0x[0-9a-f]{{6}}.*  {ln} B payload$")
    in_order(f"{tag} SEND packets", s, steps)
    steps = [rf"^B: receive WQE wr_id=101 taken from the receive queue \(QP 0x[0-9a-f]{{6}}\) for the message at {P(psn)}"]
    steps += [rf"^B: DMA write {ln} bytes at 0x{recv_addr + off:x} \(L_Key {m[0].group(2)}\) from the packet with {P(psn + k)}"
              for k, (off, ln) in enumerate(chunks(send)) if ln]
    last = psn + npkts(send) - 1
    steps += [rf"^B: CQE wr_id=101 RECV success, {send} bytes$",
              rf"^B -> A: RC Acknowledge  {P(last)}  DestQP 0x[0-9a-f]{{6}}  AETH ACK MSN 1$",
              rf"^A: ACK received for {P(last)} \(MSN 1\)",
              rf"^A: CQE wr_id=1 SEND success, {send} bytes$",
              rf"^check: SEND: B's receive buffer against A's source: {send} bytes identical$"]
    in_order(f"{tag} SEND delivery", s, steps)
    psn = last + 1

    # 2. WRITE
    s = secs[2]
    m = in_order(f"{tag} WRITE", s, [
        rf"^A: post RDMA_WRITE wr_id=2, {rw} bytes from addr {HEX} \(L_Key {HEX}\), remote addr {HEX} \(R_Key {HEX}\)",
        rf"^A: WQE fetched from the send queue \(QP 0x[0-9a-f]{{6}}, wr_id=2, RDMA_WRITE, {rw} bytes\): "
        rf"{npkts(rw)} packet\(s\) from {P(psn)}",
    ])
    if not m:
        return
    src, lkey, dst, rkey = int(m[0].group(1), 16), m[0].group(2), int(m[0].group(3), 16), m[0].group(4)
    steps = []
    for k, (off, ln) in enumerate(chunks(rw)):
        if ln:
            steps.append(rf"^A: DMA read {ln} bytes at 0x{src + off:x} \(L_Key {lkey}\) for the packet with {P(psn + k)}")
        reth = rf"  RETH VA 0x{dst:x} R_Key {rkey} length {rw}" if k == 0 else ""
        steps.append(rf"^A -> B: RC RDMA WRITE \w+  {P(psn + k)}  DestQP 0x[0-9a-f]{{6}}(  AckReq)?{reth}  {ln} B payload$")
    in_order(f"{tag} WRITE packets", s, steps)
    steps = [rf"^B: DMA write {ln} bytes at 0x{dst + off:x} \(R_Key {rkey}\) from the packet with {P(psn + k)}"
             for k, (off, ln) in enumerate(chunks(rw)) if ln]
    last = psn + npkts(rw) - 1
    steps += [rf"^B -> A: RC Acknowledge  {P(last)}  DestQP 0x[0-9a-f]{{6}}  AETH ACK MSN 2$",
              rf"^A: ACK received for {P(last)} \(MSN 2\)",
              rf"^A: CQE wr_id=2 RDMA_WRITE success, {rw} bytes$",
              rf"^check: WRITE: B's memory against A's source: {rw} bytes identical$"]
    in_order(f"{tag} WRITE delivery", s, steps)
    expect(f"{tag} WRITE: no CQE on B", not any(l.startswith("B: CQE") for l in s), s)
    psn = last + 1

    # 3. READ
    s = secs[3]
    n = npkts(rw)
    m = in_order(f"{tag} READ", s, [
        rf"^A: post RDMA_READ wr_id=3, {rw} bytes into addr {HEX} \(L_Key {HEX}\), remote addr {HEX} \(R_Key {HEX}\)",
        rf"^A: WQE fetched from the send queue \(QP 0x[0-9a-f]{{6}}, wr_id=3, RDMA_READ, {rw} bytes\): "
        rf"1 request packet at {P(psn)}, its {n} response packet\(s\) take PSNs 0x{psn:06x} to 0x{psn + n - 1:06x}",
    ])
    if not m:
        return
    dst, lkey, src, rkey = int(m[0].group(1), 16), m[0].group(2), int(m[0].group(3), 16), m[0].group(4)
    steps = [rf"^A -> B: RC RDMA READ Request  {P(psn)}  DestQP 0x[0-9a-f]{{6}}  AckReq  RETH VA 0x{src:x} R_Key {rkey} length {rw}$"]
    for k, (off, ln) in enumerate(chunks(rw)):
        if ln:
            steps.append(rf"^B: DMA read {ln} bytes at 0x{src + off:x} \(R_Key {rkey}\) for the packet with {P(psn + k)}")
        aeth = "  AETH ACK MSN 3" if k == 0 or k == n - 1 else ""
        steps.append(rf"^B -> A: RC RDMA READ response \w+  {P(psn + k)}  DestQP 0x[0-9a-f]{{6}}{aeth}  {ln} B payload$")
    in_order(f"{tag} READ responses", s, steps)
    steps = [rf"^A: DMA write {ln} bytes at 0x{dst + off:x} \(L_Key {lkey}\) from the packet with {P(psn + k)}"
             for k, (off, ln) in enumerate(chunks(rw)) if ln]
    steps += [rf"^A: CQE wr_id=3 RDMA_READ success, {rw} bytes$",
              rf"^check: READ: A's buffer against B's memory: {rw} bytes identical$"]
    in_order(f"{tag} READ delivery", s, steps)
    psn += n

    # 4. and 5. the atomics
    for sec, wr, wrop, wcop, bth, old, new, msn, operand in [
            (4, 4, "ATOMIC_CMP_AND_SWP", "COMP_SWAP", "CmpSwap", 0x1111111111111111, 0x2222222222222222, 4,
             "compare 0x1111111111111111 swap 0x2222222222222222"),
            (5, 5, "ATOMIC_FETCH_AND_ADD", "FETCH_ADD", "FetchAdd", 41, 42, 5, "add 0x1")]:
        s = secs[sec]
        m = in_order(f"{tag} {wrop}", s, [
            rf"^A: post {wrop} wr_id={wr}, 8 bytes into addr {HEX} \(L_Key {HEX}\), remote addr {HEX} \(R_Key {HEX}\), {operand}$",
            rf"^A: WQE fetched from the send queue \(QP 0x[0-9a-f]{{6}}, wr_id={wr}, {wrop}, 8 bytes\): 1 packet\(s\) from {P(psn)}",
        ])
        if not m:
            return
        loc, lkey, va, rkey = int(m[0].group(1), 16), m[0].group(2), int(m[0].group(3), 16), m[0].group(4)
        in_order(f"{tag} {wrop} steps", s, [
            rf"^A -> B: RC {bth}  {P(psn)}  DestQP 0x[0-9a-f]{{6}}  AckReq  AtomicETH VA 0x{va:x} R_Key {rkey} {operand}$",
            rf"^B: atomic executed on the 8 bytes at 0x{va:x} \(R_Key {rkey}\): they held 0x{old:x}, now 0x{new:x}$",
            rf"^B -> A: RC ATOMIC Acknowledge  {P(psn)}  DestQP 0x[0-9a-f]{{6}}  AETH ACK MSN {msn}  original value 0x{old:x}$",
            rf"^A: DMA write 8 bytes at 0x{loc:x} \(L_Key {lkey}\): the value the atomic found in B's memory, 0x{old:x}$",
            rf"^A: CQE wr_id={wr} {wcop} success, 8 bytes$",
            rf"^check: \w+: the old value returned to A is 0x{old:x}$",
            rf"^check: \w+: B's word now is 0x{new:x}$",
        ])
        psn += 1
    expect(f"{tag}: summary", "5 of 5 operations completed and verified" in out, out[-300:])
    expect(f"{tag}: no mismatch", "MISMATCH" not in out, out[-800:])


def check_pcap(tag, h, path, out, send, rw):
    rc, js, err = run([h, "dissect", "--json", path])
    if not expect(f"{tag}: dissect --json", rc == 0, (rc, err)):
        return
    objs = [json.loads(l) for l in js.splitlines() if l.strip()]
    frames = [o for o in objs if "frame" in o]
    want = expected_frames(send, rw)
    expect(f"{tag}: every ICRC good", frames and all(f.get("icrc_ok") is True and f["status"] == "ok" for f in frames),
           [f.get("status") for f in frames])
    got = [(f["bth"]["opcode"], f["bth"]["psn"]) for f in frames if "bth" in f]
    expect(f"{tag}: opcode and PSN sequence", got == want, (got, want))
    expect(f"{tag}: frame count in the summary", f"; {len(want)} frames written to {path}" in out, out[-300:])
    # The story tells the frames of the file, in the same order, A's from 198.18.0.1.
    told = re.findall(r"^([AB]) -> [AB]: (RC [^ ].*?)  PSN 0x([0-9a-f]{6})", out, re.M)
    expect(f"{tag}: the story tells each frame of the file",
           [(s, n, int(p, 16)) for s, n, p in told] ==
           [("A" if f["ipv4"]["src"] == "198.18.0.1" else "B", f["bth"]["name"], f["bth"]["psn"]) for f in frames],
           (told, [(f["ipv4"]["src"], f["bth"]["name"], f["bth"]["psn"]) for f in frames]))
    rc, brief, _ = run([h, "dissect", "--strict", "--brief", path])
    expect(f"{tag}: dissect --strict", rc == 0 and f"Summary: {len(want)} frames, {len(want)} RoCE v2 frames" in brief,
           (rc, brief[-400:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    h = ap.parse_args().hcaemu
    with tempfile.TemporaryDirectory() as tmp:
        for tag, args, send, rw in [("default", [], 64, 3000), ("size 0", ["--size", "0"], 0, 0),
                                    ("size 5000", ["--size", "5000"], 5000, 5000)]:
            path = os.path.join(tmp, f"demo-{len(args)}-{send}.pcap")
            rc, out, err = run([h, "demo", "--pcap", path] + args)
            if not expect(f"{tag}: exit status", rc == 0, (rc, out[-1500:], err)):
                continue
            check_story(tag, out, send, rw)
            check_pcap(tag, h, path, out, send, rw)

        path = os.path.join(tmp, "quiet.pcap")
        rc, out, err = run([h, "demo", "--quiet", "--pcap", path])
        expect("--quiet", rc == 0 and "A: post" not in out and "A -> B" not in out and
               f"5 of 5 operations completed and verified; 14 frames written to {path}" in out, (rc, out, err))
        rc, out, err = run([h, "demo", "--help"])
        expect("--help", rc == 0 and "--size N" in out and "--samples" in out, (rc, out))
        for bad in (["--size"], ["--size", "lots"], ["--size", "1048577"], ["--size", "-1"], ["--brief"],
                    ["--samples", "--size", "10"], ["--bogus"], ["--pcap"]):
            rc, out, err = run([h, "demo"] + bad)
            expect(f"bad arguments {bad}", rc == 2 and "hcaemu demo:" in err and not out, (rc, out, err))
        rc, out, err = run([h, "demo", "--pcap", os.path.join(tmp, "no", "such", "dir.pcap")])
        expect("unwritable pcap", rc == 2 and "dir.pcap" in err, (rc, err))

    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
