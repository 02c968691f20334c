#!/usr/bin/python3
"""RoCE v2 over IPv6 GIDs through DPDK's net_af_packet and net_tap, with the Linux kernel's own
neighbour discovery (RFC 4861) on the wire: our responder answers the kernel's solicitations, and
our resolver takes the kernel's advertisements. Everything runs in a network namespace this script
creates (addresses from 2001:2::/48, RFC 5180), removed at the end, also on failure.

bridge  `hcaemu pingpong -c` between two hcaemu processes, each on a veth (net_af_packet) into a
        kernel bridge that has an IPv6 address of its own. Before the client starts, the kernel
        sends the server a datagram: its neighbour entry must then hold the server's MAC, REACHABLE
        (only a solicited advertisement from us makes an entry REACHABLE: the kernel had none before).
        Then jumbo frames: RoCE MTU 4096 at --link-mtu 9000 with framesz/blocksz, and the refusal
        without them.
routed  `hcaemu perf write_bw --check` and `read_bw --check`: the server on net_tap, the client on
        net_af_packet, on two links (2001:2:1::/64, 2001:2:2::/64) with the kernel routing between
        them and answering for the far side by proxy ND. So each hcaemu resolves its peer's GID by
        the kernel's (proxy) advertisement, the kernel resolves the tap side by soliciting hcaemu,
        and every RoCE v2 frame crosses a real IPv6 router (hop limit 64 -> 63; the ICRC masks it,
        IBTA A17.3.3). The captures are checked with tshark and `hcaemu dissect --strict`.

Exit 77 (meson: skipped) without root or `ip netns`, saying why.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SKIP = 77
failures = []
EAL = "--no-huge -m 256 --no-pci --no-shconf --log-level lib.eal:error"
MAC_A = "02:00:00:18:00:0a"
MAC_B = "02:00:00:18:00:0b"


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")


def sh(ns, *cmd, check=True):
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)}: {r.stderr.strip()}")
    return r


def free_port():
    """proclib's: below the ephemeral range, where no connection's source port can take it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proclib
    return proclib.free_port()


class Proc:
    """A process in the namespace; stdout read line by line until a marker, the rest at the end."""

    def __init__(self, ns, args):
        self.p = subprocess.Popen(["ip", "netns", "exec", ns] + args, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.head = []

    def wait_for(self, marker, max_lines=40):
        for line in self.p.stdout:
            self.head.append(line)
            if marker in line or len(self.head) > max_lines:
                return marker in line
        return False

    def finish(self, timeout=90):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()  # our own child, by its handle
            out, err = self.p.communicate()
            return -999, "".join(self.head) + out, err
        return self.p.returncode, "".join(self.head) + out, err


def wait_iface(ns, name, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if sh(ns, "ip", "link", "show", name, check=False).returncode == 0:
            return True
        time.sleep(0.1)
    return False


def neigh(ns, addr, dev):
    return sh(ns, "ip", "-6", "neigh", "show", addr, "dev", dev, check=False).stdout.strip()


def ipv6_on(ns, dev):
    sh(ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=0")


def kernel_solicits(ns, addr, dev, mac, what):
    """A datagram from the kernel to `addr` makes it solicit (it has no entry); our advertisement
    must make the entry REACHABLE (RFC 4861 7.2.5), with `mac` unless None. Returns the entry's MAC.
    The datagram itself is dropped by hcaemu and counted: not RoCE."""
    sh(ns, sys.executable, "-c", "import socket, sys; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)"
       ".sendto(b'x', (sys.argv[1], 9))", addr)
    after = ""
    for _ in range(50):  # until the kernel's entry settles, at most 5 s
        after = neigh(ns, addr, dev)
        if after.endswith(("REACHABLE", "FAILED", "STALE")):
            break
        time.sleep(0.1)
    m = re.fullmatch(rf"{re.escape(addr)} lladdr ([0-9a-f:]{{17}}) (router )?REACHABLE", after)
    expect(f"{what}: the kernel's entry for {addr} on {dev} is " + (mac or "our MAC") +
           " REACHABLE (it solicited, we advertised)", m is not None and (mac is None or m.group(1) == mac), after)
    return m.group(1) if m else None


def tshark(pcap, fields, flt):
    r = subprocess.run(["tshark", "-r", pcap, "-n", "-Y", flt, "-T", "fields"] + sum((["-e", f] for f in fields), []),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return [l.split("\t") for l in r.stdout.splitlines() if l]


def dissect_roce(hcaemu, pcap, what):
    """Every UDP 4791 frame (tshark's count) parses in `hcaemu dissect` with a good ICRC; the only
    other frames are ICMPv6 (neighbour discovery: not_udp) and the test's datagram to port 9
    (not_roce_port)."""
    n = len(tshark(pcap, ["frame.number"], "udp.dstport == 4791"))
    r = subprocess.run([hcaemu, "dissect", "--brief", pcap], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    m = re.search(r"^Summary: (\d+) frames, (\d+) RoCE v2 frames parsed with a good ICRC$", r.stdout, re.M)
    errors = re.findall(r"^  error (\S+) +(\d+)$", r.stdout, re.M)
    expect(f"{what}: hcaemu dissect: all {n} RoCE v2 frames parse with a good ICRC, the rest is ND and the probe",
           n > 0 and m is not None and int(m.group(2)) == n and
           int(m.group(1)) == n + sum(int(c) for _, c in errors) and
           all(e in ("not_udp", "not_roce_port") for e, _ in errors), r.stdout[-1500:] + r.stderr)


def setup_ns(ns):
    if os.geteuid() != 0:
        print("SKIP: needs root (network namespaces, AF_PACKET sockets, tap)")
        sys.exit(SKIP)
    r = subprocess.run(["ip", "netns", "add", ns], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(f"SKIP: ip netns add failed: {r.stderr.strip()}")
        sys.exit(SKIP)
    sh(None, "ip", "-n", ns, "link", "set", "lo", "up")
    # IPv6 only where the test puts it: new interfaces start without (no router solicitations,
    # MLD or DAD of the kernel's own on the links hcaemu sits on).
    sh(ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")


def pingpong_bridge(hcaemu, ns, tmp):
    """Two hcaemu pingpong on af_packet veths into a kernel bridge with an IPv6 address."""
    # No MLD snooping: the solicited-node multicast goes to every port (no querier on this bridge).
    sh(None, "ip", "-n", ns, "link", "add", "hbr0", "type", "bridge", "mcast_snooping", "0")
    ipv6_on(ns, "hbr0")
    sh(None, "ip", "-n", ns, "addr", "add", "2001:2::100/64", "dev", "hbr0", "nodad")
    for a, b in (("hva0", "hva1"), ("hvb0", "hvb1")):
        sh(None, "ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b)
        sh(None, "ip", "-n", ns, "link", "set", b, "master", "hbr0", "up")
        sh(None, "ip", "-n", ns, "link", "set", a, "up")
    sh(None, "ip", "-n", ns, "link", "set", "hbr0", "up")

    port = str(free_port())
    pa, pb = os.path.join(tmp, "pp-a.pcap"), os.path.join(tmp, "pp-b.pcap")
    common = [hcaemu, "pingpong", "-p", port, "-d", "hcaemu0", "-i", "1", "-l", "0", "-s", "4096", "-n", "50", "-c",
              "--timeout", "20"]
    srv = Proc(ns, common + ["--ip", "2001:2::1/64", "--mac", MAC_A, "--pcap", pa, "--eal",
                             f"{EAL} -l 0 --file-prefix=v6a{os.getpid()} --vdev=net_af_packet0,iface=hva0"])
    try:
        expect("bridge: pingpong server attached (prints its local address)", srv.wait_for("local address"),
               "".join(srv.head))
        before = neigh(ns, "2001:2::1", "hbr0")
        expect("bridge: the kernel has no neighbour entry for 2001:2::1 before", before == "", before)
        kernel_solicits(ns, "2001:2::1", "hbr0", MAC_A, "bridge, af_packet")
        cli = Proc(ns, common + ["--ip", "2001:2::2/64", "--mac", MAC_B, "--pcap", pb, "--eal",
                                 f"{EAL} -l 1 --file-prefix=v6b{os.getpid()} --vdev=net_af_packet0,iface=hvb0",
                                 "127.0.0.1"])
        rc_c, out_c, err_c = cli.finish()
    finally:
        rc_s, out_s, err_s = srv.finish()
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect("bridge: pingpong -s 4096 -n 50 -c over IPv6 GIDs: both exit 0", rc_s == 0 and rc_c == 0, detail)
    for who, out, mine, theirs in (("server", out_s, "2001:2::1", "2001:2::2"), ("client", out_c, "2001:2::2", "2001:2::1")):
        expect(f"bridge: {who}'s GIDs are {mine} (local) and {theirs} (remote)",
               re.search(rf"local address: .* GID {re.escape(mine)}$", out, re.M) is not None and
               re.search(rf"remote address: .* GID {re.escape(theirs)}$", out, re.M) is not None, out)
        expect(f"bridge: {who}: 50 iters, data check", re.search(r"^50 iters in ", out, re.M) is not None and
               "data check: 50 messages of 4096 bytes received as sent" in out, out)
    # The server's capture: the kernel's solicitation for it and our advertisement, then 50 SENDs
    # of 4 packets each way over IPv6 (MTU 1024).
    ns_in = tshark(pa, ["ipv6.src", "icmpv6.nd.ns.target_address"], "icmpv6.type == 135")
    na_out = tshark(pa, ["eth.src", "ipv6.dst", "icmpv6.nd.na.target_address", "icmpv6.nd.na.flag.s"],
                    "icmpv6.type == 136")
    expect("bridge: the server's capture has the kernel's NS for 2001:2::1 and our solicited NA to it",
           ["2001:2::100", "2001:2::1"] in ns_in and [MAC_A, "2001:2::100", "2001:2::1", "1"] in [
               [r[0], r[1], r[2], "1" if r[3] in ("1", "True") else r[3]] for r in na_out], f"{ns_in}\n{na_out}")
    roce = tshark(pa, ["ipv6.src", "ipv6.dst", "infiniband.bth.opcode"], "udp.dstport == 4791")
    sends = [r for r in roce if r[2] in ("0", "1", "2")]  # SEND First, Middle, Last
    expect("bridge: 400 SEND First/Middle/Last frames over IPv6 (50 x 4 packets each way), between the GIDs",
           len(sends) == 400 and {(r[0], r[1]) for r in sends} == {("2001:2::1", "2001:2::2"), ("2001:2::2", "2001:2::1")},
           roce[:10])
    dissect_roce(hcaemu, pa, "bridge")


def pingpong_jumbo(hcaemu, ns, tmp):
    """RoCE MTU 4096 on net_af_packet: --link-mtu 9000 with framesz=10240,blocksz=20480 (README,
    DPDK vdevs); the same without framesz is refused, naming the devarg."""
    for dev in ("hva1", "hvb1"):  # the bridge's ports; hcaemu sets its own ends (hva0, hvb0)
        sh(None, "ip", "-n", ns, "link", "set", dev, "mtu", "9000")
    port = str(free_port())
    pa = os.path.join(tmp, "jumbo-a.pcap")
    vdev = "net_af_packet0,iface={},framesz=10240,blocksz=20480"
    common = [hcaemu, "pingpong", "-p", port, "-s", "20000", "-n", "20", "-m", "4096", "-c", "--timeout", "20",
              "--link-mtu", "9000"]
    srv = Proc(ns, common + ["--ip", "2001:2::1/64", "--mac", MAC_A, "--pcap", pa, "--eal",
                             f"{EAL} -l 0 --file-prefix=v6ja{os.getpid()} --vdev=" + vdev.format("hva0")])
    try:
        srv.wait_for("local address")
        cli = Proc(ns, common + ["--ip", "2001:2::2/64", "--mac", MAC_B, "--eal",
                                 f"{EAL} -l 1 --file-prefix=v6jb{os.getpid()} --vdev=" + vdev.format("hvb0"),
                                 "127.0.0.1"])
        rc_c, out_c, err_c = cli.finish()
    finally:
        rc_s, out_s, err_s = srv.finish()
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect("jumbo: pingpong -s 20000 -m 4096 -c, --link-mtu 9000 on af_packet: both exit 0, data check",
           rc_s == 0 and rc_c == 0 and all("data check: 20 messages of 20000 bytes received as sent" in o
                                            for o in (out_s, out_c)), detail)
    mtu = sh(ns, "cat", "/sys/class/net/hva0/mtu").stdout.strip()
    expect("jumbo: hcaemu set its kernel interface's MTU to 9000", mtu == "9000", mtu)
    # 20000 B at MTU 4096: First, 3 Middle and a Last of 3616 B; the First and Middle carry 4096.
    rows = tshark(pa, ["infiniband.bth.opcode", "frame.len"], "udp.dstport == 4791")
    full = [r for r in rows if r[0] in ("0", "1")]
    expect("jumbo: 160 SEND First/Middle frames of 4096 B payload (4174-byte frames over IPv6), both ways",
           len(full) == 160 and all(r[1] == str(14 + 40 + 8 + 12 + 4096 + 4) for r in full), rows[:8])
    dissect_roce(hcaemu, pa, "jumbo")
    r = subprocess.run(["ip", "netns", "exec", ns, hcaemu, "pingpong", "-p", port, "--timeout", "2", "--link-mtu", "9000",
                        "--ip", "2001:2::1/64", "--eal",
                        f"{EAL} -l 0 --file-prefix=v6jc{os.getpid()} --vdev=net_af_packet0,iface=hva0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    expect("jumbo: --link-mtu 9000 on af_packet's default framesz: exit 1, naming framesz",
           r.returncode == 1 and "framesz=2048 carries frames up to 1982 bytes; mtu 9000 needs framesz>=9080" in r.stderr,
           (r.returncode, r.stderr))


def link_local_state(ns, dev):
    """The kernel's fe80:: address on `dev` once its duplicate address detection is over (at most
    5 s): its `ip -6 addr` line."""
    line = ""
    for _ in range(50):
        lines = [l.strip() for l in sh(ns, "ip", "-6", "addr", "show", "dev", dev, check=False).stdout.splitlines()
                 if "inet6 fe80::" in l]
        line = lines[0] if lines else ""
        if line and ("tentative" not in line or "dadfailed" in line):
            break
        time.sleep(0.1)
    return line


def perf_routed(hcaemu, ns, tmp, test, index, server_mac):
    """hcaemu perf TEST --check: server on net_tap (2001:2:2::2), client on net_af_packet
    (2001:2:1::1), the kernel routing between the two links and answering for each side by proxy
    ND. The server takes --mac `server_mac`, or without it (None) the MAC the port picks."""
    tap = f"htd{index}"
    port = str(free_port())
    ps, pc = os.path.join(tmp, f"{test}-srv.pcap"), os.path.join(tmp, f"{test}-cli.pcap")
    base = [hcaemu, "perf", test, "-p", port, "-s", "4000", "-n", "200", "--check", "--oob-timeout", "20"]
    srv = Proc(ns, base + ["--ip", "2001:2:2::2/64", "--pcap", ps] + (["--mac", server_mac] if server_mac else []) +
               ["--eal", f"{EAL} -l 0 --file-prefix=v6s{os.getpid()}{index} --vdev=net_tap0,iface={tap}"])
    rc_c, out_c, err_c = -1, "", ""
    tap_mac = ""
    try:
        up = srv.wait_for("Waiting for client") and wait_iface(ns, tap)
        expect(f"routed {test}: the server on net_tap is up and waiting for its client", up, "".join(srv.head))
        tap_mac = sh(ns, "cat", f"/sys/class/net/{tap}/address").stdout.strip()
        # The kernel's side of the tap: IPv6 (its link-local address and DAD), an address,
        # forwarding, proxy ND for the client's address.
        ipv6_on(ns, tap)
        sh(ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{tap}.forwarding=1")
        sh(None, "ip", "-n", ns, "addr", "add", "2001:2:2::100/64", "dev", tap, "nodad")
        sh(None, "ip", "-n", ns, "-6", "neigh", "add", "proxy", "2001:2:1::1", "dev", tap)
        # While waiting for its client, the server answers the kernel's solicitation.
        before = neigh(ns, "2001:2:2::2", tap)
        expect(f"routed {test}, tap: the kernel has no neighbour entry for 2001:2:2::2 before", before == "", before)
        mac = kernel_solicits(ns, "2001:2:2::2", tap, server_mac, f"routed {test}, tap")
        expect(f"routed {test}, tap: the server's MAC ({mac}) is not the kernel's end of the tap ({tap_mac})",
               mac is not None and mac != tap_mac, (mac, tap_mac))
        ll = link_local_state(ns, tap)
        expect(f"routed {test}, tap: the kernel's link-local address passed duplicate address detection",
               ll != "" and "dadfailed" not in ll and "tentative" not in ll, ll)
        cli = Proc(ns, base + ["--ip", "2001:2:1::1/64", "--mac", MAC_A, "--pcap", pc, "--eal",
                               f"{EAL} -l 1 --file-prefix=v6c{os.getpid()}{index} --vdev=net_af_packet0,iface=hvc0",
                               "127.0.0.1"])
        rc_c, out_c, err_c = cli.finish()
    finally:
        rc_s, out_s, err_s = srv.finish()
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect(f"routed {test} -s 4000 -n 200 --check: both exit 0", rc_s == 0 and rc_c == 0, detail)
    checker = out_s if test == "write_bw" else out_c
    expect(f"routed {test}: data check: ok", "data check: ok" in checker and "FAILED" not in out_s + out_c, detail)
    expect(f"routed {test}: the client's table has 4000 B x 200",
           re.search(r"^ 4000\s+200\s+", out_c, re.M) is not None, out_c)
    # perftest prints a GID's bytes in decimal ("%02d:"): 0x20 is 32.
    gid_a = "32:01:00:02:00:01:00:00:00:00:00:00:00:00:00:01"
    gid_b = "32:01:00:02:00:02:00:00:00:00:00:00:00:00:00:02"
    expect(f"routed {test}: each side's local and remote GIDs are the IPv6 ones",
           re.search(rf"local address: .*\n GID: {gid_a}\n remote address: .*\n GID: {gid_b}", out_c) is not None and
           re.search(rf"local address: .*\n GID: {gid_b}\n remote address: .*\n GID: {gid_a}", out_s) is not None, detail)
    vc1_mac = sh(ns, "cat", "/sys/class/net/hvc1/address").stdout.strip()
    # Each resolver took the kernel's proxy advertisement (the router's MAC for the far side), and
    # the RoCE v2 frames it received came through the router: its MAC, hop limit 64 - 1.
    for pcap, mine, router, peer, side in ((pc, "2001:2:1::1", vc1_mac, "2001:2:2::2", "client"),
                                           (ps, "2001:2:2::2", tap_mac, "2001:2:1::1", "server")):
        na = tshark(pcap, ["eth.src", "icmpv6.nd.na.target_address", "icmpv6.opt.linkaddr", "icmpv6.nd.na.flag.s"],
                    "icmpv6.type == 136 && ipv6.dst == " + mine)
        expect(f"routed {test}: the {side} got the kernel's solicited proxy NA for {peer} ({router})",
               any(r[0] == router and r[1] == peer and r[2] == router and r[3] in ("1", "True") for r in na), na)
        roce = tshark(pcap, ["eth.src", "ipv6.src", "ipv6.hlim"], f"udp.dstport == 4791 && ipv6.dst == {mine}")
        expect(f"routed {test}: the {side} received RoCE v2 from {peer} through the router ({router}, hop limit 63)",
               len(roce) > 0 and all(r == [router, peer, "63"] for r in roce), roce[:10])
        dissect_roce(hcaemu, pcap, f"routed {test} ({side})")
    # The client's entry in the kernel came from its own NS (the source link-layer option).
    n = neigh(ns, "2001:2:1::1", "hvc1")
    expect(f"routed {test}: the kernel knows the client 2001:2:1::1 on hvc1 as {MAC_A}", f"lladdr {MAC_A}" in n, n)


def routed(hcaemu, ns, tmp):
    sh(None, "ip", "-n", ns, "link", "add", "hvc0", "type", "veth", "peer", "name", "hvc1")
    ipv6_on(ns, "hvc1")
    sh(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1")
    sh(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.proxy_ndp=1")
    sh(ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.forwarding=1")
    sh(None, "ip", "-n", ns, "addr", "add", "2001:2:1::100/64", "dev", "hvc1", "nodad")
    sh(None, "ip", "-n", ns, "-6", "neigh", "add", "proxy", "2001:2:2::2", "dev", "hvc1")
    sh(None, "ip", "-n", ns, "link", "set", "hvc1", "up")
    sh(None, "ip", "-n", ns, "link", "set", "hvc0", "up")
    for i, (test, mac) in enumerate((("write_bw", MAC_B), ("read_bw", None))):
        perf_routed(hcaemu, ns, tmp, test, i, mac)
        sh(None, "ip", "-n", ns, "-6", "neigh", "flush", "dev", "hvc1", check=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--only", choices=["bridge", "routed"])
    ap.add_argument("--keep", help="write the captures to this directory (kept) instead of a temporary one")
    a = ap.parse_args()
    ns = f"hcaemu-v6-{os.getpid()}"
    setup_ns(ns)
    try:
        with tempfile.TemporaryDirectory(prefix="hcaemu-v6-") as tmp:
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                tmp = a.keep
            if a.only != "routed":
                pingpong_bridge(a.hcaemu, ns, tmp)
                pingpong_jumbo(a.hcaemu, ns, tmp)
            if a.only != "bridge":
                routed(a.hcaemu, ns, tmp)
    finally:
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if failures:
        print(f"\n{len(failures)} check(s) failed:\n" + "\n\n".join(failures))
        return 1
    print("all IPv6 vdev checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
