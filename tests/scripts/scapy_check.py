#!/usr/bin/python3
"""Check RoCE v2 frames in pcap files with scapy's own RoCE layer.

Usage: /usr/bin/python3 scapy_check.py FILE.pcap [FILE.pcap...]

For every IPv4/IPv6 + UDP dst port 4791 frame, prints one JSON object per line:
  {"file", "frame" (1-based), "opcode", "dqpn", "psn", "ackreq", "se", "padcnt",
   "pkey", "icrc_ok" (true/false/null), "icrc_wire", "icrc_scapy"[, "note"]}
Exit status: 0 = every computable ICRC matched, 1 = at least one mismatch,
2 = usage error or unreadable file.  Offline only; needs python3-scapy (Debian).

How the check works: scapy.contrib.roce.BTH ends with an FCSField "icrc".
When a BTH is built with icrc=None, BTH.post_build() calls
BTH.compute_icrc(), which builds 8 x 0xFF + the IPv4 header (TOS, TTL = 0xFF,
checksum = 0xFFFF) + UDP header (checksum = 0xFFFF) + BTH with byte 4 (FECN,
BECN, resv6) = 0xFF + payload, runs zlib.crc32 over it and stores the result
little-endian.  So we copy the dissected packet, delete its icrc field, let
scapy rebuild the bytes, and compare the ICRC scapy wrote with the one on the
wire.  compute_icrc() only supports IPv4 (IPv6 is a TODO in roce.py and would
silently yield 0), so IPv6 frames get icrc_ok = null.
"""
import json
import logging
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)  # keep stderr quiet

from scapy.compat import raw                 # noqa: E402
from scapy.contrib.roce import BTH           # noqa: E402  (binds UDP:4791 -> BTH)
from scapy.error import Scapy_Exception      # noqa: E402
from scapy.layers.inet import IP, UDP        # noqa: E402
from scapy.layers.inet6 import IPv6          # noqa: E402
from scapy.layers.l2 import Ether            # noqa: E402,F401 (registers link types)
from scapy.packet import Padding             # noqa: E402
from scapy.utils import rdpcap               # noqa: E402

ROCEV2_PORT = 4791


def scapy_icrc(ip_layer):
    """Return the ICRC (wire bytes) that scapy computes for this IP packet."""
    q = ip_layer.copy()
    # Drop an Ethernet trailer (short frames padded to 60 bytes): scapy hangs it
    # off the last layer as Padding, and compute_icrc() would hash it too.
    pad = q.getlayer(Padding)
    if pad is not None and pad.underlayer is not None:
        pad.underlayer.remove_payload()
    del q[BTH].icrc          # icrc=None -> BTH.post_build() calls compute_icrc()
    rebuilt = q.__class__(raw(q))   # re-dissect to read back the computed field
    return rebuilt[BTH].icrc


def check_frame(index, pkt):
    """Return the JSON record for one frame, or None if it is not RoCE v2."""
    udp = pkt.getlayer(UDP)
    if udp is None or udp.dport != ROCEV2_PORT:
        return None
    ip = udp.underlayer
    if not isinstance(ip, (IP, IPv6)):
        return None
    rec = {"frame": index}
    if not pkt.haslayer(BTH):
        rec.update(icrc_ok=None, note="scapy could not dissect a BTH")
        return rec
    bth = pkt[BTH]
    rec.update(opcode=bth.opcode, dqpn=bth.dqpn, psn=bth.psn,
               ackreq=bth.ackreq, se=bth.solicited, padcnt=bth.padcount,
               pkey=bth.pkey, icrc_ok=None,
               icrc_wire="%08x" % bth.icrc, icrc_scapy=None)
    wirelen = getattr(pkt, "wirelen", None)
    if isinstance(ip, IPv6):
        rec["note"] = "scapy.contrib.roce computes the ICRC for IPv4 only"
    elif wirelen and wirelen > len(raw(pkt)):
        rec.update(icrc_wire=None, note="frame truncated by the capture snaplen")
    elif ip.flags.MF or ip.frag:
        rec["note"] = "IPv4 fragment"
    else:
        calc = scapy_icrc(ip)
        rec.update(icrc_scapy="%08x" % calc, icrc_ok=(calc == bth.icrc))
    return rec


def main(argv):
    if len(argv) < 2 or any(a in ("-h", "--help") for a in argv[1:]):
        print("usage: %s FILE.pcap [FILE.pcap...]" % argv[0], file=sys.stderr)
        return 2
    # Read every file first, so an unreadable one is reported before any output.
    captures = []
    for name in argv[1:]:
        try:
            captures.append((name, rdpcap(name)))
        except (OSError, Scapy_Exception, EOFError) as exc:
            print("error: cannot read %s: %s" % (name, exc), file=sys.stderr)
            return 2
    status = 0
    for name, packets in captures:
        counts = {True: 0, False: 0, None: 0}
        for index, pkt in enumerate(packets, 1):
            rec = check_frame(index, pkt)
            if rec is None:
                continue
            rec = dict(file=name, **rec)
            counts[rec["icrc_ok"]] += 1
            if rec["icrc_ok"] is False:
                status = 1
            print(json.dumps(rec))
        print("%s: %d RoCE v2 frames, ICRC ok %d, mismatch %d, not computed %d"
              % (name, sum(counts.values()), counts[True], counts[False],
                 counts[None]), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
