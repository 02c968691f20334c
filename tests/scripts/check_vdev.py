#!/usr/bin/python3
"""The DPDK port on DPDK's vdevs, end to end, with tests/vdev_node (one process per end):

memif      two processes over net_memif (socket in a temp dir, bsize=10240, mtu 9000): frames
           byte-exact both ways; clients are SIGKILLed mid-traffic, the server stays up, reports
           the link down, and serves the next client; a last client ends cleanly. Then the other
           way round: servers are SIGKILLed mid-traffic (each replaced by a new one), the client
           stays up, reports the link down, reconnects, and exchanges frames with the next. Each
           killed server leaves its socket file, which the next server removes (saying so); a
           server on a live server's socket is refused.
af_packet  net_af_packet on a veth in a network namespace, a kernel AF_PACKET socket on its peer:
           frames byte-exact both ways at mtu 1500 and at mtu 9000 (framesz=10240,blocksz=20480);
           a too small framesz is refused with the devarg to give.
tap        net_tap creates its interface in a network namespace, a kernel AF_PACKET socket on it:
           frames byte-exact both ways; mtu 9000 is refused (DPDK 22.11's net_tap: 1522 bytes).

Exit 77 (meson: skipped) when root or network namespaces are missing, saying why.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
failures = []


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-2000:]}")


class Node:
    """A vdev_node process whose stdout lines are collected as they come."""

    def __init__(self, args, netns=None):
        cmd = (["ip", "netns", "exec", netns] if netns else []) + args
        self.cmd = cmd
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.err = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, args=(self.p.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True).start()

    def _read(self, f, into):
        for line in f:
            with self.cv:
                into.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait_line(self, prefix, count=1, timeout=20.0):
        """Waits until `count` stdout lines start with `prefix`; returns the last, or None."""
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                hits = [l for l in self.lines if l.startswith(prefix)]
                if len(hits) >= count:
                    return hits[count - 1]
                left = end - time.monotonic()
                if left <= 0 or self.p.poll() is not None:
                    return None
                self.cv.wait(min(left, 0.2))

    def finish(self, timeout=30.0):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()  # this process, by its PID
            rc = self.p.wait()
        time.sleep(0.05)
        return rc

    def result(self):
        hits = [l for l in self.lines if l.startswith("result ")]
        if not hits:
            return {}
        return dict(kv.split("=", 1) for kv in hits[-1].split()[1:] if "=" in kv)

    def text(self):
        return "\n".join(self.lines + ["--- stderr"] + self.err[-20:])


def eal(prefix, vdev, lcore):
    return ["--lcore", str(lcore), "--", f"--file-prefix={prefix}", f"--vdev={vdev}"]


def check_memif(node, kills):
    with tempfile.TemporaryDirectory(prefix="hcaemu-memif-") as tmp:
        sock = os.path.join(tmp, "memif.sock")
        common = f"socket={sock},socket-abstract=no,bsize=10240"
        server_vdev = f"net_memif0,role=server,{common}"
        client_vdev = f"net_memif0,role=client,{common}"
        sessions = kills + 1
        srv = Node([node, "dpdk", "echo", "--mtu", "9000", "--sessions", str(sessions), "--seconds", "120"]
                   + eal(f"hcaemu-s{os.getpid()}", server_vdev, 0))
        try:
            ready = srv.wait_line("ready")
            expect("memif server starts", ready is not None and "mtu_how=none" in ready, srv.text())
            expect("memif socket is a file in the temp dir", os.path.exists(sock), os.listdir(tmp))
            expect("memif server: link down before any client", srv.wait_line("link down") is not None, srv.text())
            for k in range(kills):
                cl = Node([node, "dpdk", "send", "--mtu", "9000", "--count", "300", "--stream", "--seconds", "60"]
                          + eal(f"hcaemu-c{os.getpid()}-{k}", client_vdev, 1))
                streaming = cl.wait_line("streaming")
                expect(f"memif client {k}: 300 frames byte-exact both ways, then streaming",
                       streaming is not None and "bad=0" in streaming, cl.text())
                time.sleep(0.3)  # mid-traffic
                os.kill(cl.p.pid, signal.SIGKILL)
                cl.finish()
                down = srv.wait_line("link down", count=k + 2, timeout=20)
                expect(f"memif server sees client {k} die (link down)", down is not None, srv.text())
                expect(f"memif server alive after SIGKILL of client {k}", srv.p.poll() is None, srv.text())
            cl = Node([node, "dpdk", "send", "--mtu", "9000", "--count", "2000", "--seconds", "60"]
                      + eal(f"hcaemu-c{os.getpid()}-last", client_vdev, 1))
            rc = cl.finish(90)
            r = cl.result()
            expect("memif last client: 2000 frames byte-exact both ways, up to 9014 bytes",
                   rc == 0 and r.get("ok") == "2000" and r.get("bad") == "0", cl.text())
            rc = srv.finish(30)
            r = srv.result()
            expect("memif server ends after its sessions, no bad frame", rc == 0 and r.get("bad") == "0", f"rc={rc}\n" + srv.text())
            expect("memif server counted each client's link up and down",
                   r.get("link_up_events") == str(sessions) and r.get("link_down_events") == str(sessions) and
                   r.get("downs") == str(sessions), srv.text())
            expect("memif server: no chained (dropped) frames", r.get("rx_dropped") == "0", srv.text())
            errors = [l for l in srv.err if "rror" in l and "mp action callback" not in l]
            expect("memif server: no DPDK error on its stderr", not errors, errors)
        finally:
            if srv.p.poll() is None:
                srv.p.kill()
                srv.p.wait()


def check_memif_client_first(node):
    """A client started before any server listens (its connect fails) connects once one does."""
    with tempfile.TemporaryDirectory(prefix="hcaemu-memif-") as tmp:
        sock = os.path.join(tmp, "memif.sock")
        common = f"socket={sock},socket-abstract=no,bsize=10240"
        cl = Node([node, "dpdk", "send", "--mtu", "9000", "--count", "300", "--seconds", "60"]
                  + eal(f"hcaemu-c{os.getpid()}-first", f"net_memif0,role=client,{common}", 1))
        srv = None
        try:
            expect("memif client with no server listening starts (its connect is tried again)",
                   cl.wait_line("ready") is not None, cl.text())
            time.sleep(0.5)  # a few failed connects
            srv = Node([node, "dpdk", "echo", "--mtu", "9000", "--sessions", "1", "--seconds", "60"]
                       + eal(f"hcaemu-s{os.getpid()}-late", f"net_memif0,role=server,{common}", 0))
            rc = cl.finish(60)
            r = cl.result()
            expect("memif client started first: 300 frames byte-exact both ways once the server listens",
                   rc == 0 and r.get("bad") == "0" and int(r.get("reconnects") or 0) >= 1, cl.text())
            expect("memif late server: ends when the client leaves", srv.finish(30) == 0, srv.text())
        finally:
            for n in (cl, srv):
                if n and n.p.poll() is None:
                    n.finish(0.1)  # kills it, by its PID


def check_memif_server_kills(node, kills):
    """The client stays: servers are SIGKILLed mid-traffic, each replaced by a new one."""
    with tempfile.TemporaryDirectory(prefix="hcaemu-memif-") as tmp:
        sock = os.path.join(tmp, "memif.sock")
        common = f"socket={sock},socket-abstract=no,bsize=10240"
        server_vdev = f"net_memif0,role=server,{common}"
        client_vdev = f"net_memif0,role=client,{common}"

        def server(k):
            s = Node([node, "dpdk", "echo", "--mtu", "9000", "--sessions", "1", "--seconds", "120"]
                     + eal(f"hcaemu-s{os.getpid()}-{k}", server_vdev, 0))
            expect(f"memif server {k} starts", s.wait_line("ready") is not None, s.text())
            return s

        srv = server(0)
        # A second server on the socket of a live one: refused before the EAL starts, the first untouched.
        p = subprocess.run([node, "dpdk", "echo", "--mtu", "9000", "--count", "1", "--seconds", "5"]
                           + eal(f"hcaemu-s{os.getpid()}-dup", server_vdev, 1),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("memif: a second server on a live server's socket is refused, naming it",
               p.returncode == 3 and f"net_memif0: socket {sock} is in use: another memif server listens on it"
               in p.stderr and os.path.exists(sock) and srv.p.poll() is None, p.stderr)
        cl = Node([node, "dpdk", "send", "--mtu", "9000", "--count", "300", "--stream", "--sessions", str(kills),
                   "--seconds", "120"] + eal(f"hcaemu-c{os.getpid()}", client_vdev, 1))
        try:
            for k in range(kills):
                streaming = cl.wait_line("streaming", count=k + 1)
                expect(f"memif client with server {k}: 300 frames byte-exact both ways, then streaming",
                       streaming is not None and "bad=0" in streaming and f"session={k}" in streaming, cl.text())
                time.sleep(0.3)  # mid-traffic
                os.kill(srv.p.pid, signal.SIGKILL)
                srv.finish()
                down = cl.wait_line("link down", count=k + 1, timeout=20)
                expect(f"memif client sees server {k} die (link down)", down is not None, cl.text())
                time.sleep(0.2)  # the client keeps polling a dead link
                expect(f"memif client alive after SIGKILL of server {k}", cl.p.poll() is None,
                       f"exit {cl.p.returncode}\n" + cl.text())
                if cl.p.poll() is not None:
                    break
                # A killed server leaves its socket file; the next server's eal_start removes it.
                expect(f"memif server {k} left its socket file", os.path.exists(sock), os.listdir(tmp))
                srv = server(k + 1)
                expect(f"memif server {k + 1} removed the stale socket file, saying so",
                       f"net_memif0: removed the stale socket file {sock} (no memif server listens on it)"
                       in "\n".join(srv.err), srv.text())
                up = cl.wait_line("link up", count=k + 2, timeout=20)
                expect(f"memif client reconnects to server {k + 1} (link up)", up is not None, cl.text())
            rc = cl.finish(90)
            r = cl.result()
            print("      client " + " ".join(f"{k}={r.get(k)}" for k in
                                           ("reconnects", "burst_faults", "frames_lost_in_fault")), flush=True)
            expect(f"memif client: after {kills} servers died, 300 frames byte-exact both ways with the last",
                   rc == 0 and r.get("bad") == "0" and r.get("downs") == str(kills), cl.text())
            expect("memif client counted each server's link up and down",
                   r.get("link_up_events") == str(kills + 1) and r.get("link_down_events") == str(kills), cl.text())
            expect("memif client: no chained (dropped) frames", r.get("rx_dropped") == "0", cl.text())
            rc = srv.finish(30)
            r = srv.result()
            expect("memif last server: 300 frames byte-exact, ends when the client leaves",
                   r.get("ok") == "300" and r.get("bad") == "0" and r.get("downs") == "1", srv.text())
            # A server's exit used to end in SIGSEGV in the EAL interrupt thread (rte_intr_fd_get)
            # now and then: vdev_node called rte_eal_cleanup(), which unmaps EAL memory under that
            # thread. It no longer does; the exit is asserted.
            expect("memif last server exits 0", rc == 0, f"rc={rc}\n" + srv.text())
        finally:
            for n in (srv, cl):
                if n.p.poll() is None:
                    n.p.kill()
                    n.p.wait()


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def netns_or_skip(ns):
    if os.geteuid() != 0:
        print("SKIP: needs root (network namespaces, AF_PACKET sockets)")
        sys.exit(SKIP)
    r = subprocess.run(["ip", "netns", "add", ns], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(f"SKIP: ip netns add failed: {r.stderr.strip()}")
        sys.exit(SKIP)
    # No IPv6 (router solicitations, MLD) in the namespace: only the test's frames on its links.
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
    sh("ip", "-n", ns, "link", "set", "lo", "up")


def pair(node, ns, dpdk_args, raw_iface, mtu, dpdk_sends, count, prefix):
    """One DPDK end and one kernel-socket end; returns (dpdk node, raw node, their exit codes)."""
    raw_role, dpdk_role = ("echo", "send") if dpdk_sends else ("send", "echo")
    raw_cmd = [node, "raw", raw_role, "--iface", raw_iface, "--mtu", str(mtu), "--count", str(count), "--seconds", "60"]
    dpdk_cmd = [node, "dpdk", dpdk_role, "--mtu", str(mtu), "--count", str(count), "--seconds", "60"] + dpdk_args(prefix)
    # The echo first, ready before the sender's first frame.
    first, second = (raw_cmd, dpdk_cmd) if dpdk_sends else (dpdk_cmd, raw_cmd)
    a = Node(first, netns=ns)
    a.wait_line("ready")
    b = Node(second, netns=ns)
    rb = b.finish(90)
    ra = a.finish(10)
    return (b, a, rb, ra) if dpdk_sends else (a, b, ra, rb)


def check_af_packet(node):
    ns = f"hcaemu-t-{os.getpid()}"
    netns_or_skip(ns)
    try:
        sh("ip", "-n", ns, "link", "add", "hva", "type", "veth", "peer", "name", "hvb")
        sh("ip", "-n", ns, "addr", "add", "198.18.7.1/24", "dev", "hvb")
        sh("ip", "-n", ns, "link", "set", "hva", "up")
        sh("ip", "-n", ns, "link", "set", "hvb", "up")
        # mtu 8112 with framesz=8192 puts an 8126-byte frame exactly at the end of its ring slot
        # (framesz - 66): the offset open() assumes, tested at its edge.
        for mtu, devargs in ((1500, ""), (9000, ",framesz=10240,blocksz=20480"),
                             (8112, ",framesz=8192,blocksz=8192")):
            sh("ip", "-n", ns, "link", "set", "hvb", "mtu", str(mtu))  # hva's MTU is the port's to set
            vdev = f"net_af_packet0,iface=hva{devargs}"
            for dpdk_sends in (True, False):
                way = "DPDK to kernel and back" if dpdk_sends else "kernel to DPDK and back"
                dp, raw, rd, rr = pair(node, ns, lambda p: eal(p, vdev, 0), "hvb", mtu, dpdk_sends, 1000,
                                       f"hcaemu-a{os.getpid()}")
                s = dp.result() if dpdk_sends else raw.result()
                e = raw.result() if dpdk_sends else dp.result()
                expect(f"af_packet mtu {mtu}: {way}, 1000 frames byte-exact (up to {mtu + 14} bytes)",
                       rd == 0 and rr == 0 and s.get("ok") == "1000" and e.get("ok") == "1000" and
                       s.get("bad") == "0" and e.get("bad") == "0", dp.text() + "\n=== raw\n" + raw.text())
                ready = next((l for l in dp.lines if l.startswith("ready")), "")
                how = "mtu_how=kernel interface hva" if mtu > 1500 else "mtu_how=ethdev"
                expect(f"af_packet mtu {mtu}: MTU set by {how.split('=')[1]}", how in ready, ready)
            mtu_now = sh("ip", "netns", "exec", ns, "cat", "/sys/class/net/hva/mtu").stdout.strip()
            expect(f"af_packet mtu {mtu}: hva's kernel MTU is {mtu}", mtu_now == str(mtu), mtu_now)
        # framesz too small for mtu 9000: refused, naming the devarg.
        p = subprocess.run(["ip", "netns", "exec", ns, node, "dpdk", "send", "--mtu", "9000", "--count", "1",
                            "--seconds", "5"] + eal(f"hcaemu-a{os.getpid()}", "net_af_packet0,iface=hva", 0),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("af_packet: mtu 9000 with the default framesz is refused with the devarg to give",
               p.returncode == 3 and "framesz=2048 carries frames up to 1982 bytes; mtu 9000 needs framesz>=9080"
               in p.stderr, p.stderr)
        p = subprocess.run(["ip", "netns", "exec", ns, node, "dpdk", "send", "--mtu", "9000", "--count", "1",
                            "--seconds", "5"] + eal(f"hcaemu-a{os.getpid()}",
                                                    "net_af_packet0,iface=hva,framesz=9088,blocksz=36864", 0),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("af_packet: a blocksz that is not a multiple of framesz is refused",
               p.returncode == 3 and "blocksz=36864 is not a multiple of framesz=9088" in p.stderr, p.stderr)
    finally:
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def check_tap(node):
    ns = f"hcaemu-t-{os.getpid()}"
    netns_or_skip(ns)
    tmpdir = tempfile.TemporaryDirectory(prefix="hcaemu-tap-")
    tmp = tmpdir.name
    try:
        tap = "htap0"
        vdev = f"net_tap0,iface={tap}"
        for dpdk_sends in (True, False):
            way = "DPDK to kernel and back" if dpdk_sends else "kernel to DPDK and back"
            raw_role, dpdk_role = ("echo", "send") if dpdk_sends else ("send", "echo")
            # DPDK creates the tap in the namespace it runs in; the kernel end opens it once it is there.
            go = os.path.join(tmp, f"go{int(dpdk_sends)}")
            dp = Node([node, "dpdk", dpdk_role, "--mtu", "1500", "--count", "1000", "--seconds", "60", "--go-file", go]
                      + eal(f"hcaemu-p{os.getpid()}", vdev, 0), netns=ns)
            ready = dp.wait_line("ready")
            sh("ip", "-n", ns, "addr", "add", "198.18.8.1/24", "dev", tap, check=False)
            raw = Node([node, "raw", raw_role, "--iface", tap, "--mtu", "1500", "--count", "1000", "--seconds", "60"],
                       netns=ns)
            raw.wait_line("ready")
            open(go, "w").close()
            rr = raw.finish(90)
            rd = dp.finish(30)
            s = dp.result() if dpdk_sends else raw.result()
            e = raw.result() if dpdk_sends else dp.result()
            expect(f"tap: {way}, 1000 frames byte-exact (up to 1514 bytes)",
                   ready is not None and rd == 0 and rr == 0 and s.get("ok") == "1000" and e.get("ok") == "1000"
                   and s.get("bad") == "0" and e.get("bad") == "0", dp.text() + "\n=== raw\n" + raw.text())
            gone = sh("ip", "-n", ns, "link", "show", tap, check=False).returncode != 0
            expect(f"tap: the interface is gone once the port is closed ({way})", gone)
        p = subprocess.run(["ip", "netns", "exec", ns, node, "dpdk", "send", "--mtu", "9000", "--count", "1",
                            "--seconds", "5"] + eal(f"hcaemu-p{os.getpid()}", vdev, 0),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("tap: mtu 9000 is refused, with the PMD's limit",
               p.returncode == 3 and "the PMD refuses MTU 9000" in p.stderr and "1522 bytes" in p.stderr, p.stderr)
    finally:
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tmpdir.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["memif", "af_packet", "tap"])
    ap.add_argument("--node", required=True)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--server-kills-only", action="store_true", help="memif: only the test where servers die")
    a = ap.parse_args()
    if a.which == "memif":
        if not a.server_kills_only:
            check_memif(a.node, a.kills)
        check_memif_server_kills(a.node, a.kills)
        check_memif_client_first(a.node)
    elif a.which == "af_packet":
        check_af_packet(a.node)
    else:
        check_tap(a.node)
    if failures:
        print("\n".join(["FAILURES:"] + failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
