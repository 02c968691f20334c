#!/usr/bin/python3
"""A peer whose RoCE address never answers ARP (IPv4) or neighbour solicitation (IPv6), for
`hcaemu pingpong` and `hcaemu perf`, each as client and as server: the out-of-band exchange
succeeds (a fake peer in this script plays ibv_rc_pingpong or perftest 6.06 and gives a GID
nobody owns), then the tool must say which address did not answer, exit 1, and release its port.
The port is DPDK's net_null (nothing ever arrives), so no root is needed. Every process runs
under a deadline (a hang fails the test); how long each took is printed, not asserted.
"""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time

failures = []
EAL = "--no-huge -m 256 --no-pci --no-shconf --log-level lib.eal:error -l 0 --vdev=net_null0"
DEADLINE = 60  # s: far above the resolver's 3 s and the --timeout given below


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-2000:]}")


def gid_hex(addr):
    if ":" in addr:
        return socket.inet_pton(socket.AF_INET6, addr).hex()
    return "00000000000000000000ffff" + socket.inet_aton(addr).hex()


def pingpong_msg(gid):
    return f"0000:000011:123456:{gid_hex(gid)}".encode() + b"\0"


def perftest_qp_info(gid):
    g = bytes.fromhex(gid_hex(gid))
    return (f"{0:04x}:{128:04x}:{0x11:06x}:{0x123456:06x}:{0x100:08x}:{0x7f0000000000:016x}:".encode() +
            b"".join(f"{b:02x}:".encode() for b in g) + f"{0:08x}:".encode() + b"\0")


def perftest_msgs(gid):
    """perftest 6.06's exchange up to the QP information, each message as both sides send it."""
    return [b"6.06" + bytes(12), (4096).to_bytes(4, "big"), (64).to_bytes(4, "big"), b"3\0", perftest_qp_info(gid)]


def recv_exact(c, n):
    data = b""
    while len(data) < n:
        d = c.recv(n - len(data))
        if not d:
            break
        data += d
    return data


class FakePeer(threading.Thread):
    """Plays the other side of the exchange: as a server (listens; reads each message, then
    answers) or as a client (connects; writes each message, then reads the answer). `msgs` are
    its messages; it expects messages of the same lengths. Then it holds the connection until
    the tool closes it."""

    def __init__(self, msgs, server, port=0):
        super().__init__(daemon=True)
        self.msgs, self.server, self.got, self.err = msgs, server, [], None
        if server:
            self.s = socket.socket()
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.s.bind(("127.0.0.1", 0))
            self.s.listen(1)
            self.s.settimeout(DEADLINE)
            self.port = self.s.getsockname()[1]
        else:
            self.port = port
        self.start()

    def run(self):
        try:
            if self.server:
                c, _ = self.s.accept()
                self.s.close()
            else:
                c = None
                for _ in range(200):
                    try:
                        c = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                        break
                    except OSError:
                        time.sleep(0.1)
                if c is None:
                    raise OSError("the tool never listened")
            with c:
                c.settimeout(DEADLINE)
                for m in self.msgs:
                    if self.server:
                        self.got.append(recv_exact(c, len(m)))
                        c.sendall(m)
                    else:
                        c.sendall(m)
                        self.got.append(recv_exact(c, len(m)))
                while c.recv(64):
                    pass
        except OSError as e:
            self.err = e


def free_port():
    """proclib's: below the ephemeral range, where no connection's source port can take it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proclib
    return proclib.free_port()


def run_tool(args):
    t = time.monotonic()
    try:
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired as e:  # the process is killed by subprocess.run
        return None, f"no exit within {DEADLINE} s\n{e.stdout}\n{e.stderr}", DEADLINE
    return r, "", time.monotonic() - t


def case(h, tool, role, ours, peer):
    v6 = ":" in peer
    how = "neighbour solicitation" if v6 else "ARP"
    name = f"{tool} {role}, peer {peer} never answers {how}"
    if tool == "pingpong":
        msgs = [pingpong_msg(peer)] + ([b"done\0"] if role == "server" else [])
        base = [h, "pingpong", "-g", "1", "--timeout", "10"]
    else:
        msgs = perftest_msgs(peer)
        base = [h, "perf", "write_bw", "--oob-timeout", "10"]
    base += ["--ip", ours, "--eal", EAL + f" --file-prefix=unr{abs(hash(name)) % 10**6}"]
    if role == "client":
        fake = FakePeer(msgs, server=True)
        r, why, secs = run_tool(base + ["-p", str(fake.port), "127.0.0.1"])
    else:
        port = free_port()
        fake = FakePeer(msgs if tool == "perf" else msgs[:1], server=False, port=port)
        r, why, secs = run_tool(base + ["-p", str(port)])
    fake.join(DEADLINE)
    print(f"      {name}: exit after {secs:.1f} s", flush=True)
    want = f"no answer from {peer} to {how} requests"
    expect(f"{name}: exit 1 with '{want}'", r is not None and r.returncode == 1 and want in r.stderr,
           why or f"rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    # The exchange really happened: the fake peer got each of the tool's messages. ibv_rc_pingpong's
    # server connects its QP (and resolves) before it sends its address: it closes without it.
    if tool == "pingpong" and role == "server":
        expect(f"{name}: the server closed without sending its address", fake.got == [b""], (fake.got, fake.err))
    else:
        expect(f"{name}: the out-of-band exchange reached the address",
               [len(g) for g in fake.got] == [len(m) for m in msgs], (fake.got, fake.err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    h = ap.parse_args().hcaemu
    for tool in ("pingpong", "perf"):
        for role in ("client", "server"):
            case(h, tool, role, "198.18.0.2/24", "198.18.0.99")
            case(h, tool, role, "2001:2::2/64", "2001:2::99")
    if failures:
        print(f"\n{len(failures)} check(s) failed:\n" + "\n\n".join(failures))
        return 1
    print("all unreachable-peer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
