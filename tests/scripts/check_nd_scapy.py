#!/usr/bin/python3
"""Cross-check NetPort's ARP and ND frames with scapy.

Usage: /usr/bin/python3 check_nd_scapy.py --test-exe build/tests/test_net_port

Runs the hidden Catch2 case "[.scapy]", which writes ARP and neighbour discovery frames (both
directions) to a pcap, then decodes each frame with scapy and checks it independently: ICMPv6
checksums recomputed by scapy equal the ones on the wire, hop limit 255 (RFC 4861 7.1), NS sent
to the solicited-node address and its 33:33:ff MAC (RFC 4291 2.7.1, RFC 2464 7), link-layer
address options equal the Ethernet source, NA flags S and O set, ARP fields per RFC 826.
Exit 0 when everything holds, 1 on the first failure (printed), 2 on a usage error.
"""
import argparse
import ipaddress
import logging
import os
import subprocess
import sys
import tempfile

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.compat import raw  # noqa: E402
from scapy.layers.inet6 import (ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,  # noqa: E402
                                ICMPv6NDOptSrcLLAddr, IPv6)
from scapy.layers.l2 import ARP, Ether  # noqa: E402
from scapy.utils import rdpcap  # noqa: E402

MAC_A = "02:00:00:00:00:01"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(frames):
    seen = {"arp_req": 0, "arp_rep": 0, "ns_out": 0, "ns_in": 0, "na_out": 0}
    for i, f in enumerate(frames, 1):
        e = Ether(raw(f))
        if ARP in e:
            a = e[ARP]
            if (a.hwtype, a.ptype, a.hwlen, a.plen) != (1, 0x0800, 6, 4):
                fail(f"frame {i}: ARP fixed fields {a.hwtype} {a.ptype} {a.hwlen} {a.plen}")
            if a.hwsrc != e.src:
                fail(f"frame {i}: ARP sender MAC {a.hwsrc} != Ethernet source {e.src}")
            if e.src == MAC_A:
                if a.op == 1:
                    if e.dst != "ff:ff:ff:ff:ff:ff" or a.hwdst != "00:00:00:00:00:00":
                        fail(f"frame {i}: ARP request addresses {e.dst} {a.hwdst}")
                    seen["arp_req"] += 1
                elif a.op == 2:
                    if a.psrc != "198.18.0.1" or a.pdst != "198.18.0.2" or e.dst != a.hwdst:
                        fail(f"frame {i}: ARP reply fields {a.psrc} {a.pdst} {e.dst} {a.hwdst}")
                    seen["arp_rep"] += 1
            continue
        if IPv6 not in e:
            fail(f"frame {i}: neither ARP nor IPv6")
        ip = e[IPv6]
        if ip.hlim != 255:
            fail(f"frame {i}: hop limit {ip.hlim}")
        nd = ip.payload
        wire = nd.cksum
        copy = IPv6(raw(ip))
        del copy.payload.cksum
        again = IPv6(raw(copy)).payload.cksum
        if wire != again:
            fail(f"frame {i}: ICMPv6 checksum on the wire {wire:#06x}, scapy computes {again:#06x}")
        if isinstance(nd, ICMPv6ND_NS):
            if ICMPv6NDOptSrcLLAddr not in nd or nd[ICMPv6NDOptSrcLLAddr].lladdr != e.src:
                fail(f"frame {i}: NS without a source link-layer option for {e.src}")
            if e.src == MAC_A:
                t = ipaddress.IPv6Address(nd.tgt).packed
                sn = ipaddress.IPv6Address(b"\xff\x02" + b"\x00" * 9 + b"\x01\xff" + t[13:])
                if ipaddress.IPv6Address(ip.dst) != sn:
                    fail(f"frame {i}: NS to {ip.dst}, the solicited-node address is {sn}")
                if e.dst != "33:33:ff:%02x:%02x:%02x" % (t[13], t[14], t[15]):
                    fail(f"frame {i}: NS Ethernet destination {e.dst}")
                seen["ns_out"] += 1
            else:
                seen["ns_in"] += 1
        elif isinstance(nd, ICMPv6ND_NA):
            if e.src == MAC_A:
                if not (nd.S and nd.O) or nd.R:
                    fail(f"frame {i}: NA flags R={nd.R} S={nd.S} O={nd.O}")
                if ICMPv6NDOptDstLLAddr not in nd or nd[ICMPv6NDOptDstLLAddr].lladdr != MAC_A:
                    fail(f"frame {i}: NA without our target link-layer address")
                if ip.src != nd.tgt:
                    fail(f"frame {i}: NA from {ip.src} for target {nd.tgt}")
                seen["na_out"] += 1
        else:
            fail(f"frame {i}: IPv6 but not NS/NA: {nd.summary()}")
    want = {"arp_req": 1, "arp_rep": 1, "ns_out": 1, "ns_in": 2, "na_out": 2}
    if seen != want:
        fail(f"frames seen {seen}, expected {want}")
    print(f"ok: {len(frames)} frames, {seen}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--test-exe", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net.pcap")
        r = subprocess.run([args.test_exe, "[.scapy]"], env={**os.environ, "HCAEMU_NET_PCAP": path},
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            fail(f"{args.test_exe} exited {r.returncode}")
        check(rdpcap(path))


if __name__ == "__main__":
    main()
