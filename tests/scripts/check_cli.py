#!/usr/bin/python3
"""The hcaemu CLI on good and bad input: exit codes, messages, output shapes.

Every case runs the real binary. Bad arguments and bad files must give a clear message and exit
status 2, never a crash; frames that are not RoCE v2 or are damaged are named in the output.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

failures = []


def run(args, timeout=60):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def pcap_bytes(frames, linktype=1, snap=None):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for i, f in enumerate(frames):
        cap = f if snap is None else f[:snap]
        out += struct.pack("<IIII", 1700000000, i, len(cap), len(f)) + cap
    return out


def frames_of(path):
    """Frames of a little-endian microsecond or nanosecond pcap (what libpcap writes here)."""
    data = open(path, "rb").read()
    frames, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    h = ap.parse_args().hcaemu
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731

        rc, out, err = run([h])
        expect("no subcommand", rc == 2 and "usage" in err, (rc, err))
        rc, out, err = run([h, "--help"])
        expect("--help", rc == 0 and "dissect" in out and "demo" in out, (rc, out))
        rc, out, err = run([h, "frobnicate"])
        expect("unknown subcommand", rc == 2 and "unknown subcommand 'frobnicate'" in err, (rc, err))
        rc, out, err = run([h, "dissect", "--help"])
        expect("dissect --help", rc == 0 and "--brief" in out and "--json" in out and "--strict" in out, (rc, out))
        rc, out, err = run([h, "dissect"])
        expect("dissect without a file", rc == 2 and "no pcap file" in err, (rc, err))
        rc, out, err = run([h, "dissect", "--bogus", "x.pcap"])
        expect("unknown option", rc == 2 and "unknown option '--bogus'" in err, (rc, err))
        rc, out, err = run([h, "dissect", "--payload-bytes", "lots", "x.pcap"])
        expect("bad number", rc == 2 and "--payload-bytes" in err, (rc, err))
        rc, out, err = run([h, "dissect", "--payload-bytes"])
        expect("missing number", rc == 2, (rc, err))
        rc, out, err = run([h, "dissect", "a.pcap", "b.pcap"])
        expect("two files", rc == 2 and "one file only" in err, (rc, err))
        rc, out, err = run([h, "dissect", p("missing.pcap")])
        expect("missing file", rc == 2 and "missing.pcap" in err, (rc, err))
        open(p("text.pcap"), "w").write("this is not a capture\n" * 10)
        rc, out, err = run([h, "dissect", p("text.pcap")])
        expect("not a pcap", rc == 2 and "text.pcap" in err, (rc, err))
        open(p("empty.pcap"), "wb").close()
        rc, out, err = run([h, "dissect", p("empty.pcap")])
        expect("empty file", rc == 2 and "empty.pcap" in err, (rc, err))
        open(p("rawip.pcap"), "wb").write(pcap_bytes([b"\x45" + b"\0" * 40], linktype=101))
        rc, out, err = run([h, "dissect", p("rawip.pcap")])
        expect("non-Ethernet link type", rc == 2 and "not Ethernet" in err, (rc, err))

        # The sample capture (one frame of every opcode): every frame a good RoCE v2 frame, in
        # every output format. (The run on the link is checked by check_demo.py.)
        rc, out, err = run([h, "demo", "--samples", "--quiet", "--pcap", p("demo.pcap")])
        expect("demo --samples --quiet", rc == 0 and "wrote 51 frames" in out, (rc, out, err))
        rc, out, err = run([h, "demo", "--samples", "--pcap", p("demo2.pcap")])
        expect("demo --samples", rc == 0 and "51 with a good ICRC" in out and "# RC SEND First" in out, (rc, err))
        rc, out, err = run([h, "demo", "--samples", "--brief", "--pcap", p("demo3.pcap")])
        expect("demo --samples --brief", rc == 0 and "# RC SEND First" not in out and
               "RC RDMA READ response Middle QP=0x000011 PSN=301" in out, (rc, err))
        rc, out, err = run([h, "demo", "--frobnicate"])
        expect("demo bad argument", rc == 2, (rc, err))
        rc, out, err = run([h, "demo", "--samples", "--pcap", os.path.join(tmp, "no", "such", "dir.pcap")])
        expect("demo unwritable file", rc == 2 and "dir.pcap" in err, (rc, err))
        frames = frames_of(p("demo.pcap"))
        expect("demo frame count", len(frames) == 51, len(frames))

        rc, out, err = run([h, "dissect", p("demo.pcap")])
        expect("full format", rc == 0 and out.count(", ICRC ok\n") == 51 and "R_Key names the remote MR" in out
               and "Summary: 51 frames, 51 RoCE v2 frames" in out, (rc, out[-500:]))
        rc, out, err = run([h, "dissect", "--no-notes", p("demo.pcap")])
        expect("--no-notes", rc == 0 and "R_Key names" not in out and "RETH      VA" in out, rc)
        rc, out, err = run([h, "dissect", "--brief", p("demo.pcap")])
        lines = [l for l in out.splitlines() if l.strip()]
        expect("brief: one line per frame", rc == 0 and sum(1 for l in lines if "QP=0x" in l) == 51, out[:300])
        expect("brief mentions opcodes", "RC RDMA READ response Middle QP=0x000011 PSN=301" in out, out[:2000])
        rc, out, err = run([h, "dissect", "--json", p("demo.pcap")])
        objs = [json.loads(l) for l in out.splitlines()]
        expect("json objects", rc == 0 and len(objs) == 52 and objs[-1]["summary"]["roce_ok"] == 51, len(objs))
        expect("json fields", objs[0]["bth"]["psn"] == 100 and objs[0]["bth"]["dest_qp"] == 0x12
               and objs[0]["payload_len"] == 1024 and objs[0]["icrc_ok"] is True, objs[0])

        # Damaged and foreign frames among good ones.
        bad = bytearray(frames[0])
        bad[60] ^= 0x01  # in the payload: ICRC no longer matches
        arp = bytes.fromhex("ffffffffffff525400180001" "0806") + b"\0" * 46
        short = frames[3][:30]
        snapped = frames[1]
        open(p("mixed.pcap"), "wb").write(pcap_bytes([frames[0], bytes(bad), arp, short]))
        rc, out, err = run([h, "dissect", p("mixed.pcap")])
        expect("mixed: exit 0 without --strict", rc == 0, (rc, err))
        expect("mixed: bad ICRC named", "ERROR bad_icrc" in out and "(BAD)" in out, out[:3000])
        expect("mixed: ARP named", "not RoCE v2 (not_ip)" in out, out[:3000])
        expect("mixed: truncated named", "ERROR truncated_ip" in out, out[:3000])
        expect("mixed: summary counts", "error bad_icrc" in out and "error not_ip" in out, out[-800:])
        rc, out, err = run([h, "dissect", "--strict", "--brief", p("mixed.pcap")])
        expect("mixed --strict exits 1", rc == 1, rc)
        rc, out, err = run([h, "dissect", "--strict", p("demo.pcap")])
        expect("clean --strict exits 0", rc == 0, rc)
        open(p("snap.pcap"), "wb").write(pcap_bytes([snapped], snap=100))
        rc, out, err = run([h, "dissect", p("snap.pcap")])
        expect("snapped frame", rc == 0 and "cut by the capture's snap length: 100 of" in out, out)
        whole = pcap_bytes([frames[0], frames[1]])
        open(p("trunc.pcap"), "wb").write(whole[:-100])  # the last record is cut short
        rc, out, err = run([h, "dissect", p("trunc.pcap")])
        expect("truncated file", rc == 2 and "trunc.pcap" in err and "ICRC ok" in out, (rc, err))

    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
