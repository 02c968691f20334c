#!/usr/bin/python3
"""Cross-check hcaemu's decode against two independent decoders, tshark and scapy.

For the captures hcaemu makes itself (`hcaemu demo --samples`: every opcode, IPv6, VLAN; `hcaemu
demo`: what two HCAs sent each other on the embedded link) and for every Linux rxe capture in --captures (skipped with a message when absent):
  - tshark decodes every frame without a malformed-packet or error-level expert finding;
  - the opcode counts tshark reports equal hcaemu's;
  - field by field, for every RoCE v2 frame: opcode, DestQP, PSN, AckReq, SE, M, PadCnt, TVer,
    P_Key, RETH VA/R_Key/DMALen, AtomicETH VA/R_Key/swap-add/compare, AETH syndrome/MSN,
    AtomicAckETH, ImmDt, IETH, DETH Q_Key/SrcQP, and the ICRC bytes;
  - scapy's RoCE layer recomputes every IPv4 ICRC and agrees with the frame (scapy_check.py),
    and its BTH fields agree with hcaemu's.
Exit 0 when everything agrees, 1 on any disagreement (the first ones are printed), 2 on usage.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402

# tshark 4.0 field -> how to read hcaemu's `dissect --json` object. AtomicETH VA and R_Key are
# shown by tshark under the RETH field names.
BTH_FIELDS = [
    ("infiniband.bth.opcode", lambda j: j["bth"]["opcode"]),
    ("infiniband.bth.destqp", lambda j: j["bth"]["dest_qp"]),
    ("infiniband.bth.psn", lambda j: j["bth"]["psn"]),
    ("infiniband.bth.a", lambda j: j["bth"]["ack_req"]),
    ("infiniband.bth.se", lambda j: j["bth"]["se"]),
    ("infiniband.bth.m", lambda j: j["bth"]["mig"]),
    ("infiniband.bth.padcnt", lambda j: j["bth"]["pad_cnt"]),
    ("infiniband.bth.tver", lambda j: j["bth"]["tver"]),
    ("infiniband.bth.p_key", lambda j: j["bth"]["pkey"]),
]
EXT_FIELDS = [
    ("infiniband.reth.va", lambda j: j["reth"]["va"] if "reth" in j else j.get("atomic_eth", {}).get("va")),
    ("infiniband.reth.r_key", lambda j: j["reth"]["rkey"] if "reth" in j else j.get("atomic_eth", {}).get("rkey")),
    ("infiniband.reth.dmalen", lambda j: j.get("reth", {}).get("dma_len")),
    ("infiniband.atomiceth.swapdt", lambda j: j.get("atomic_eth", {}).get("swap_add")),
    ("infiniband.atomiceth.cmpdt", lambda j: j.get("atomic_eth", {}).get("compare")),
    ("infiniband.aeth.syndrome", lambda j: j.get("aeth", {}).get("syndrome")),
    ("infiniband.aeth.msn", lambda j: j.get("aeth", {}).get("msn")),
    ("infiniband.atomicacketh.origremdt", lambda j: j.get("atomic_ack_eth", {}).get("orig")),
    ("infiniband.immdt", lambda j: j.get("imm")),
    ("infiniband.ieth", lambda j: j.get("ieth_rkey")),
    ("infiniband.deth.q_key", lambda j: j.get("deth", {}).get("qkey")),
    ("infiniband.deth.srcqp", lambda j: j.get("deth", {}).get("src_qp")),
    # tshark reads the 4 ICRC bytes big-endian; the CRC is stored little-endian
    ("infiniband.invariant.crc", lambda j: int.from_bytes(j["icrc"].to_bytes(4, "little"), "big") if "icrc" in j else None),
]
BYTE_FIELDS = {"infiniband.immdt", "infiniband.ieth"}  # printed as bare hex bytes
TSHARK_UNKNOWN_OPCODES = {0x1C, 0x1D, 0x81}  # FLUSH, ATOMIC WRITE (IBTA 1.5), CNP: tshark 4.0 lacks them

problems = []


def problem(msg):
    problems.append(msg)


def tshark_value(field, text):
    if text == "":
        return None
    if field in BYTE_FIELDS:
        return int(text, 16)
    return int(text, 0)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout, r.stderr


def hcaemu_frames(hcaemu, path):
    rc, err, frames, summary = proclib.dissect_json(hcaemu, path)
    if rc != 0:
        problem(f"{path}: hcaemu dissect exited {rc}: {err.strip()}")
    return frames, summary


def tshark_frames(path):
    fields = ["frame.number", "udp.dstport", "_ws.malformed", "_ws.expert.severity"]
    fields += [f for f, _ in BTH_FIELDS + EXT_FIELDS]
    cmd = ["tshark", "-r", path, "-n", "--disable-protocol", "rpcordma", "-T", "fields",
           "-E", "occurrence=f", "-E", "separator=\t"]
    for f in fields:
        cmd += ["-e", f]
    rc, out, err = run(cmd)
    if rc != 0:
        problem(f"{path}: tshark exited {rc}: {err.strip()[:300]}")
        return {}
    rows = {}
    for line in out.splitlines():
        vals = line.split("\t")
        vals += [""] * (len(fields) - len(vals))
        row = dict(zip(fields, vals))
        rows[int(row["frame.number"])] = row
    return rows


def check_file(path, hcaemu, scapy_check):
    ours, summary = hcaemu_frames(hcaemu, path)
    theirs = tshark_frames(path)
    if not ours or not theirs:
        return 0
    if set(ours) != set(theirs):
        problem(f"{path}: hcaemu saw {len(ours)} frames, tshark {len(theirs)}")
    ts_ops, our_ops = collections.Counter(), collections.Counter()
    roce = 0
    for n in sorted(theirs):
        t, o = theirs[n], ours.get(n)
        if o is None:
            continue
        where = f"{os.path.basename(path)} frame {n}"
        if t["_ws.malformed"]:
            problem(f"{where}: tshark says malformed")
        if t["_ws.expert.severity"] and int(t["_ws.expert.severity"]) >= 8388608:
            problem(f"{where}: tshark reports an error-level expert finding")
        if t["udp.dstport"] != "4791":
            if o["status"] == "ok":
                problem(f"{where}: not UDP/4791 for tshark but hcaemu parsed it as RoCE v2")
            continue
        roce += 1
        if o["status"] != "ok":
            problem(f"{where}: hcaemu status {o['status']}")
            continue
        ts_ops[int(t["infiniband.bth.opcode"])] += 1
        our_ops[o["bth"]["opcode"]] += 1
        checks = BTH_FIELDS if o["bth"]["opcode"] in TSHARK_UNKNOWN_OPCODES else BTH_FIELDS + EXT_FIELDS
        for field, get in checks:
            want, got = tshark_value(field, t[field]), get(o)
            if want != got:
                problem(f"{where}: {field}: tshark {t[field]!r}, hcaemu {got!r}")
    if ts_ops != our_ops:
        problem(f"{path}: opcode counts differ: tshark {dict(ts_ops)}, hcaemu {dict(our_ops)}")
    # hcaemu's own summary must agree with its per-frame objects
    if summary.get("roce_ok") != sum(our_ops.values()):
        problem(f"{path}: summary roce_ok {summary.get('roce_ok')} != {sum(our_ops.values())}")

    rc, out, err = run(["/usr/bin/python3", scapy_check, path])
    if rc != 0:
        problem(f"{path}: scapy_check exited {rc}: {err.strip()[:300]}")
    scapy_ok = 0
    for line in out.splitlines():
        s = json.loads(line)
        o = ours.get(s["frame"])
        where = f"{os.path.basename(path)} frame {s['frame']} (scapy)"
        if s["icrc_ok"] is True:
            scapy_ok += 1
        elif s["icrc_ok"] is False:
            problem(f"{where}: scapy computes ICRC {s['icrc_scapy']}, frame has {s['icrc_wire']}")
        elif "ipv6" not in (o or {}):
            problem(f"{where}: scapy could not check an IPv4 frame: {s.get('note')}")
        if o is None or o["status"] != "ok":
            continue
        b = o["bth"]
        for k, ours_k in (("opcode", "opcode"), ("dqpn", "dest_qp"), ("psn", "psn"), ("ackreq", "ack_req"),
                          ("se", "se"), ("padcnt", "pad_cnt"), ("pkey", "pkey")):
            if s[k] != b[ours_k]:
                problem(f"{where}: {k}: scapy {s[k]}, hcaemu {b[ours_k]}")
    v4 = sum(1 for o in ours.values() if o["status"] == "ok" and "ipv4" in o)
    if scapy_ok != v4:
        problem(f"{path}: scapy verified {scapy_ok} ICRCs of {v4} IPv4 RoCE frames")
    print(f"{os.path.basename(path)}: {len(theirs)} frames, {roce} RoCE v2; tshark opcodes "
          f"{dict(sorted(ts_ops.items()))}; scapy ICRC ok {scapy_ok}/{v4} IPv4")
    return roce


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--scapy-check", required=True)
    ap.add_argument("--captures", default="")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = os.path.join(tmp, "demo.pcap")
        rc, _, err = run([a.hcaemu, "demo", "--samples", "--quiet", "--pcap", demo])
        if rc != 0:
            print(f"hcaemu demo --samples failed: {err}")
            return 1
        # What two HCAs really sent each other on the embedded link (SEND, WRITE, READ, atomics).
        link = os.path.join(tmp, "demo-link.pcap")
        rc, _, err = run([a.hcaemu, "demo", "--quiet", "--pcap", link])
        if rc != 0:
            print(f"hcaemu demo failed: {err}")
            return 1
        files = [demo, link]
        if a.captures and os.path.isdir(a.captures):
            files += sorted(os.path.join(a.captures, f) for f in os.listdir(a.captures) if f.endswith(".pcap"))
        else:
            print(f"SKIP part: Linux rxe captures not found at {a.captures!r}; checking hcaemu's own capture only")
        total = sum(check_file(f, a.hcaemu, a.scapy_check) for f in files)
    for p in problems[:30]:
        print("MISMATCH", p)
    if len(problems) > 30:
        print(f"... and {len(problems) - 30} more")
    print(f"{total} RoCE v2 frames cross-checked; {len(problems)} problems")
    return 1 if problems or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
