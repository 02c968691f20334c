#!/usr/bin/python3
"""`hcaemu perf` end to end: two hcaemu processes, server and client, over DPDK's net_memif (one
socket file in a temp dir), the out-of-band exchange over TCP on 127.0.0.1.

For every test (write/read/send/atomic, bw/lat) at a one-packet and a multi-packet size: both exit
0, both print perftest's tables with the size and iteration count asked for, and --check finds the
data where it belongs ('data check: ok'). Then -q 2, -a, UC, --report_gbits. -D for every test: perftest's duration rows
(BW: peak 0.00; latency: #bytes #iterations t_avg[usec] tps average), iterations > 0, the row's
figures consistent with its iterations over the window's counted middle (D - 2*(D/4) s), the
one-sided BW server printing the client's row, -D 4 counting 2 s, -D with -n running timed. UD for send_bw and
send_lat: at 2 B and at the MTU, the size lowered to the MTU without -s and with -a (perftest's note),
refused above it with -s, and refused for the other verbs. The requests our
client puts on the wire are those rdma_rxe sent under the real perftest in the reference captures
(opcodes, AckReq, lengths, atomic operands, the walk through the buffer). Bad arguments; an
unreachable server; a server nobody connects to; a peer speaking another perftest version or not
perftest at all (a fake peer in this script): each with its message and exit status (cli.hpp:
1 the job failed, 2 bad arguments). SIGTERM to a server waiting for its client, to a send_bw server
and to a write_bw client in mid-transfer: exit 143, one 'interrupted by SIGTERM' line, the memif
socket file removed, the --pcap file complete (every record whole); the peer fails with a message.
"""
import argparse
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

failures = []
EAL = "--no-huge -m 256 --no-pci --no-shconf --log-level lib.eal:error"
RESULT = re.compile(r"^ (\d+)\s+(\d+)\s+")


def expect(name, cond, detail=""):
    print(("ok    " if cond else "FAIL  ") + name, flush=True)
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")


def free_port():
    """proclib's: below the ephemeral range, where no connection's source port can take it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proclib
    return proclib.free_port()


def results(out):
    """(size, iterations) of every result line."""
    return [(int(m.group(1)), int(m.group(2))) for m in (RESULT.match(l) for l in out.splitlines()) if m]


class Drain:
    """Reads a process's stdout and stderr to the end in a thread (Popen.communicate), so that a
    server printing more than a pipe holds (-q 1024: two address lines per QP) does not block
    while its client runs."""

    def __init__(self, proc):
        self.proc = proc
        self.out = self.err = ""
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        self.out, self.err = self.proc.communicate()

    def wait(self, timeout):
        """(stdout, stderr) once the process ended; after `timeout` s it is killed first."""
        self.t.join(timeout)
        if self.t.is_alive():
            self.proc.kill()
            self.t.join()
            return self.out, self.err, False
        return self.out, self.err, True


def run_pair(hcaemu, test, args, timeout=120, client_pcap=None, client_eal="", client_vdev=""):
    with tempfile.TemporaryDirectory(prefix="hcaemu-perf-") as tmp:
        sock = os.path.join(tmp, "memif.sock")
        common = f"socket={sock},socket-abstract=no,bsize=10240"
        port = str(free_port())
        tag = f"{os.getpid()}-{test}-{abs(hash(tuple(args))) % 100000}"
        base = [hcaemu, "perf", test, "-p", port, "--oob-timeout", "30"] + args
        srv = subprocess.Popen(base + ["--ip", "198.18.0.1/24", "--mac", "02:00:00:00:00:01", "--eal",
                                       f"{EAL} -l 0 --file-prefix=ps{tag} --vdev=net_memif0,role=server,{common}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The memif client needs the server's socket file: start it once the server is attached
        # (it prints perftest's banner just before it listens).
        head = []
        for line in srv.stdout:
            head.append(line)
            if "Waiting for client" in line or len(head) > 10:
                break
        drain = Drain(srv)
        try:
            cli = subprocess.run(base + ["--ip", "198.18.0.2/24", "--mac", "02:00:00:00:00:02", "--eal",
                                         f"{EAL}{client_eal} -l 1 --file-prefix=pc{tag} --vdev=net_memif0,role=client,{common}{client_vdev}",
                                         "127.0.0.1"] + (["--pcap", client_pcap] if client_pcap else []), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            so, se, _ = drain.wait(0)
            return None, ("".join(head) + so, se, "", "timeout")
        so, se, ended = drain.wait(timeout)
        if not ended:
            return None, ("".join(head) + so, se, "", "timeout")
        so = "".join(head) + so
        return (srv.returncode, so, se, cli.returncode, cli.stdout, cli.stderr), None


def run_checked_pair(hcaemu, test, args, label):
    """run_pair, with the checks every pair starts with: both ends finish, both exit 0. None if
    they did not finish; else the results and the detail to print on a failure."""
    r, t = run_pair(hcaemu, test, args)
    if r is None:
        expect(f"{label}: both ends finish", False, t)
        return None
    rs, so, se, rc, co, ce = r
    detail = f"server rc={rs}\n{so}\n{se}\nclient rc={rc}\n{co}\n{ce}"
    expect(f"{label}: both exit 0", rs == 0 and rc == 0, detail)
    return rs, so, se, rc, co, ce, detail


TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send", "atomic": "Atomic"}


def check_pair(hcaemu, test, args, size_list, iters, label=None):
    label = label or f"{test} {' '.join(args)}"
    r = run_checked_pair(hcaemu, test, args, label)
    if r is None:
        return
    rs, so, se, rc, co, ce, detail = r
    verb, kind = test.split("_")
    title = TITLES[verb] + (" FETCH_AND_ADD" if verb == "atomic" and "CMP_AND_SWAP" not in args else "")
    title += (" CMP_AND_SWAP" if "CMP_AND_SWAP" in args else "") + (" BW Test" if kind == "bw" else " Latency Test")
    expect(f"{label}: both print the test's title", title in co and title in so, detail)
    want = [(s, iters) for s in size_list]
    expect(f"{label}: client's table has sizes {size_list} x {iters} iterations", results(co) == want, detail)
    # the server prints the client's results (one-sided BW), its own (send, write/send latency),
    # or nothing (read/atomic latency: perftest's server only waits)
    server_prints = not (kind == "lat" and verb in ("read", "atomic"))
    server_want = want if server_prints else []
    if kind == "bw" and verb != "send":
        server_want = [want[-1]]  # the last size's results, as the exchange carries them
    expect(f"{label}: server's table", results(so) == server_want, detail)
    if "--check" in args:
        checker = {"write_bw": so, "read_bw": co, "send_bw": so, "atomic_bw": so,
                   "write_lat": so + co, "send_lat": so + co, "read_lat": co, "atomic_lat": co}[test]
        n = 2 if kind == "lat" and verb in ("write", "send") else 1
        expect(f"{label}: data check: ok", checker.count("data check: ok") == n and "FAILED" not in so + co, detail)


class FakePeer:
    """A perftest server that answers the version message with `reply` (16 bytes)."""

    def __init__(self, reply):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(1)
        self.s.settimeout(30)
        self.port = self.s.getsockname()[1]
        self.reply = reply
        self.got = b""
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        try:
            c, _ = self.s.accept()
            with c:
                c.settimeout(30)
                while len(self.got) < 16:
                    b = c.recv(16 - len(self.got))
                    if not b:
                        break
                    self.got += b
                c.sendall(self.reply)
                c.recv(100)  # until the client closes
        except OSError:
            pass
        finally:
            self.s.close()


def null_eal(tag):
    return ["--ip", "198.18.0.2/24", "--eal", f"{EAL} -l 1 --file-prefix=pn{tag} --vdev=net_null0"]


def check_errors(hcaemu):
    def run(args, timeout=60):
        return subprocess.run([hcaemu, "perf"] + args, capture_output=True, text=True, timeout=timeout)

    ip = ["--ip", "198.18.0.2/24"]
    bad = [
        ([], "usage: hcaemu perf TEST", "no test"),
        (["frob_bw"] + ip, "unknown test 'frob_bw'", "an unknown test"),
        (["write_bw", "-s", "0"] + ip, "-s: '0' is not a number in 1..", "size 0"),
        (["write_bw", "-n", "3"] + ip, "-n: '3' is not a number in 5..", "3 iterations"),
        (["write_bw", "-c", "UD"] + ip, "UD connection only possible in SEND verb", "UD with write_bw"),
        (["read_lat", "-c", "UD"] + ip, "UD connection only possible in SEND verb", "UD with read_lat"),
        (["atomic_bw", "-c", "UD"] + ip, "UD connection only possible in SEND verb", "UD with atomic_bw"),
        (["send_bw", "-c", "XRC"] + ip, "choose RC, UC or UD", "an unknown connection type"),
        (["read_bw", "-c", "UC"] + ip, "RDMA READ and atomics need RC", "READ over UC"),
        (["atomic_bw", "-s", "16"] + ip, "atomic tests move 8 bytes", "a 16-byte atomic"),
        (["write_bw", "-m", "1500"] + ip, "256, 512, 1024, 2048 or 4096", "MTU 1500"),
        (["write_bw", "-a", "-s", "64"] + ip, "-a and -s together", "-a with -s"),
        (["send_bw", "-D", "2", "-a"] + ip, "-D and -a together: Duration mode currently doesn't support running on all sizes.",
         "-D with -a"),
        (["write_lat", "-a", "-D", "1"] + ip, "Duration mode currently doesn't support running on all sizes.", "-a with -D"),
        (["write_lat", "-D", "0"] + ip, "-D: '0' is not a number in 1..", "-D 0"),
        (["write_lat", "-q", "2"] + ip, "latency tests use one QP", "-q on latency"),
        (["write_bw", "-z"] + ip, "-z: a perftest option hcaemu perf does not implement", "-z alone"),
        (["send_bw", "-R", "-c", "UD"] + ip, "-R: rdma_cm connects RC QPs only here", "-R with UD"),
        (["write_bw", "-R", "peer.example"] + ip, "-R: SERVER must be the peer's RoCE address", "-R with a host name"),
        (["write_bw", "--frob"] + ip, "unknown option '--frob'", "an unknown option"),
        (["read_lat", "-u", "32"] + ip, "-u: '32' is not a number in 0..31", "-u above the 5-bit timeout"),
        (["write_bw", "-p"] + ip, "-p: '--ip' is not a number", "-p without a number"),
        (["write_bw", "a", "b"] + ip, "one server address only", "two servers"),
        (["write_bw"], "--ip ADDR/LEN is required", "no --ip"),
        (["write_bw", "--ip", "300.1.1.1/24"], "--ip: '300.1.1.1/24'", "a bad --ip"),
    ]
    for args, msg, what in bad:
        r = run(args)
        expect(f"bad arguments ({what}): exit 2 and says so", r.returncode == 2 and msg in r.stderr,
               f"rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    r = run(["write_bw", "--help"])
    expect("--help: exit 0, perftest's options and the attach options",
           r.returncode == 0 and "--report_gbits" in r.stdout and "--eal" in r.stdout, r.stdout + r.stderr)

    tag = os.getpid()
    port = str(free_port())  # nobody listens there
    r = run(["write_bw", "-p", port, "--oob-timeout", "2"] + null_eal(f"{tag}a") + ["127.0.0.1"])
    expect("unreachable server: exit 1 within the timeout, says so",
           r.returncode == 1 and f"cannot connect to 127.0.0.1:{port} within 2 s" in r.stderr, r.stderr)
    r = run(["write_bw", "-p", str(free_port()), "--oob-timeout", "1"] + null_eal(f"{tag}b"))
    expect("server nobody connects to: exit 1, says so",
           r.returncode == 1 and "no client connected" in r.stderr and "Waiting for client" in r.stdout, r.stderr)

    peer = FakePeer(b"5.60" + bytes(12))
    r = run(["write_bw", "-p", str(peer.port), "--oob-timeout", "10"] + null_eal(f"{tag}c") + ["127.0.0.1"])
    peer.t.join(10)
    expect("our version message is perftest 6.06's 16 bytes", peer.got == b"6.06" + bytes(12), peer.got)
    expect("a peer speaking perftest 5.60: exit 1, names both versions",
           r.returncode == 1 and "the peer speaks perftest version 5.60; hcaemu perf speaks version 6.06" in r.stderr,
           r.stderr)
    peer = FakePeer(b"hello, perftest!")
    r = run(["write_bw", "-p", str(peer.port), "--oob-timeout", "10"] + null_eal(f"{tag}d") + ["127.0.0.1"])
    peer.t.join(10)
    expect("a peer that is not perftest: exit 1, says so",
           r.returncode == 1 and "not a perftest version: no_terminator" in r.stderr, r.stderr)


def pcap_frames(path):
    """The number of records of a classic pcap file if it is whole (header, then records that end
    exactly at the end of the file), else None."""
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError:
        return None
    if len(b) < 24 or b[:4] not in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        return None
    off, n = 24, 0
    while off + 16 <= len(b):
        incl = struct.unpack_from("<I", b, off + 8)[0]
        off += 16 + incl
        n += 1
    return n if off == len(b) else None


def wait_for(cond, limit=30.0):
    end = time.monotonic() + limit
    while not cond() and time.monotonic() < end:
        time.sleep(0.1)
    return cond()


def check_signals(hc):
    with tempfile.TemporaryDirectory(prefix="hcaemu-perf-sig-") as tmp:
        sock = os.path.join(tmp, "memif.sock")
        common = f"socket={sock},socket-abstract=no,bsize=10240"
        tag = f"{os.getpid()}sig"

        def server(test, args, pcap, n):
            return subprocess.Popen([hc, "perf", test] + args + ["--ip", "198.18.0.1/24", "--pcap", pcap, "--eal",
                                     f"{EAL} -l 0 --file-prefix=ps{tag}{n} --vdev=net_memif0,role=server,{common}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def client(test, args, pcap, n):
            return subprocess.Popen([hc, "perf", test] + args + ["--ip", "198.18.0.2/24", "--pcap", pcap, "--eal",
                                     f"{EAL} -l 1 --file-prefix=pc{tag}{n} --vdev=net_memif0,role=client,{common}",
                                     "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def finish(p, timeout=60):
            try:
                so, se = p.communicate(timeout=timeout)
                return p.returncode, so, se
            except subprocess.TimeoutExpired:
                p.kill()  # our own child, by its handle
                so, se = p.communicate()
                return "timeout", so, se

        def stopped_clean(label, rc, so, se, pcap, min_frames):
            frames = pcap_frames(pcap)
            d = f"rc={rc} frames={frames}\n{so}\n{se}"
            expect(f"{label}: exit 143, 'hcaemu perf: interrupted by SIGTERM' once, no other message of ours",
                   rc == 143 and se.count("hcaemu perf: interrupted by SIGTERM\n") == 1
                   and se.count("hcaemu perf:") == 1, d)
            expect(f"{label}: the memif socket file is gone", not os.path.exists(sock), d)
            expect(f"{label}: the pcap file is whole, with at least {min_frames} frame(s)",
                   frames is not None and frames >= min_frames, d)

        # A server waiting for its client.
        pcap = os.path.join(tmp, "wait.pcap")
        srv = server("write_bw", ["-p", str(free_port()), "--oob-timeout", "60"], pcap, 1)
        up = wait_for(lambda: os.path.exists(sock) or srv.poll() is not None)
        for line in srv.stdout:
            if "Waiting for client" in line:
                break
        srv.send_signal(signal.SIGTERM)
        rc, so, se = finish(srv)
        stopped_clean("SIGTERM to a server waiting for its client", rc if up else "no socket", so, se, pcap, 0)

        # Mid-transfer: the send_bw server receiving (-D 30: a long timed run), then the write_bw
        # client writing. The peer fails within its --oob-timeout, with a message.
        for n, test, victim in ((2, "send_bw", "server"), (3, "write_bw", "client")):
            port = str(free_port())
            args = ["-p", port, "--oob-timeout", "5", "-s", "64", "-D", "30"]
            spcap, cpcap = os.path.join(tmp, f"s{n}.pcap"), os.path.join(tmp, f"c{n}.pcap")
            srv = server(test, args, spcap, n)
            wait_for(lambda: os.path.exists(sock) or srv.poll() is not None)
            cli = client(test, args, cpcap, n)
            head = []
            for line in cli.stdout:  # bounded by the client's own timeouts
                head.append(line)
                if "#bytes" in line:  # the table's header: the transfer starts
                    break
            # mid-transfer: the victim's capture has grown past 64 KiB (or 30 s went by)
            vpcap = spcap if victim == "server" else cpcap
            wait_for(lambda: os.path.exists(vpcap) and os.path.getsize(vpcap) > 65536)
            (srv if victim == "server" else cli).send_signal(signal.SIGTERM)
            rc_v, so_v, se_v = finish(srv if victim == "server" else cli)
            rc_p, so_p, se_p = finish(cli if victim == "server" else srv)
            if victim == "client":
                so_v = "".join(head) + so_v
            label = f"SIGTERM to a {test} {victim} mid-transfer"
            stopped_clean(label, rc_v, so_v, se_v, vpcap, 100)
            expect(f"{label}: the peer exits 1 within its timeout, with a message",
                   rc_p == 1 and re.search(r"hcaemu perf: (no progress|no completion|out-of-band|completion error)", se_p)
                   is not None, f"rc={rc_p}\n{so_p}\n{se_p}")


def check_flags(hc):
    """perftest's -d -i -x -t -o: taken, and shown in the banner as perftest shows them."""
    def line(out, key):
        return [l for l in out.splitlines() if key in l]

    args = ["-n", "200", "-s", "64", "-d", "hcaemu_flagdev", "-i", "1", "-x", "1", "-t", "64", "--check"]
    r, t = run_pair(hc, "write_bw", args)
    if r is None:
        expect("write_bw -d -i 1 -x 1 -t 64: both ends finish", False, t)
    else:
        rs, so, se, rc, co, ce = r
        detail = f"server rc={rs}\n{so}\n{se}\nclient rc={rc}\n{co}\n{ce}"
        expect("write_bw -d -i 1 -x 1 -t 64: both exit 0, data check: ok",
               rs == 0 and rc == 0 and so.count("data check: ok") == 1 and "FAILED" not in so + co, detail)
        expect("-d NAME: both print it as the device",
               all(any(re.search(r"Device\s+: hcaemu_flagdev$", l) for l in line(o, "Device")) for o in (so, co)),
               detail)
        expect("-x 1: both print GID index 1",
               all(line(o, "GID index") == [" GID index       : 1"] for o in (so, co)), detail)
        expect("-t 64: the client prints TX depth 64 (the server, as perftest's, none)",
               line(co, "TX depth") == [" TX depth        : 64"] and line(so, "TX depth") == [], detail)
        expect("-t 64: client's table has 200 iterations of 64 B", results(co) == [(64, 200)], detail)
    r, t = run_pair(hc, "read_bw", ["-n", "200", "-s", "4000", "-o", "4", "--check"])
    if r is None:
        expect("read_bw -o 4: both ends finish", False, t)
    else:
        rs, so, se, rc, co, ce = r
        detail = f"server rc={rs}\n{so}\n{se}\nclient rc={rc}\n{co}\n{ce}"
        expect("read_bw -o 4: both exit 0, data check: ok",
               rs == 0 and rc == 0 and co.count("data check: ok") == 1 and "FAILED" not in so + co, detail)
        expect("-o 4: both print Outstand reads 4",
               all(line(o, "Outstand reads") == [" Outstand reads  : 4"] for o in (so, co)), detail)
    r = subprocess.run([hc, "perf", "write_bw", "-i", "2", "--ip", "198.18.0.2/24"], capture_output=True, text=True,
                       timeout=60)
    expect("-i 2: exit 2, says the device has one port",
           r.returncode == 2 and "-i: the device has one port, 1" in r.stderr, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    # the GIDs are looked at once the TCP connection is up (as perftest does): a client, to a fake peer
    peer = FakePeer(b"6.06" + bytes(12))
    r = subprocess.run([hc, "perf", "write_bw", "-x", "5", "-p", str(peer.port), "--oob-timeout", "10"] +
                       null_eal(f"{os.getpid()}x") + ["127.0.0.1"], capture_output=True, text=True, timeout=60)
    peer.t.join(30)
    expect("-x 5 (no such GID): exit 1, says so",
           r.returncode == 1 and "-x 5: no such GID" in r.stderr, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--only", help="run the pairs of this test only ('ud': the UD checks only, 'timed': the -D ones, 'signals': SIGTERM's, 'flags': -d -i -x -t -o, 'stats': --stats and -u, 'qps': 1024 QPs)")
    ap.add_argument("--captures", default=os.environ.get("HCAEMU_CAPTURES", ""))
    a = ap.parse_args()
    hc = a.hcaemu

    if a.only == "ud":
        check_ud(hc)
    if a.only == "timed":
        check_timed_all(hc)
    if a.only == "signals":
        check_signals(hc)
    if a.only == "flags":
        check_flags(hc)
    if a.only == "stats":
        check_stats(hc)
    if a.only == "qps":
        check_many_qps(hc)
    for test in ["write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat", "atomic_lat"]:
        if a.only and test != a.only:
            continue
        verb, kind = test.split("_")
        iters = 200 if kind == "bw" else 50
        sizes = [8] if verb == "atomic" else [2, 4000]  # one packet; four at MTU 1024
        for size in sizes:
            check_pair(hc, test, ["-n", str(iters), "-s", str(size), "--check"], [size], iters)
    if not a.only:
        more(hc)
        check_flags(hc)
        if a.captures:
            check_wire(hc, a.captures)
    if failures:
        print(f"\n{len(failures)} check(s) failed:\n" + "\n\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("all perf checks passed")


def requests(hcaemu, pcap, src):
    """The requests `src` sent, per QP in order of appearance: what perftest's traffic looks like
    on the wire (opcode, AckReq, lengths, atomic operands, the VA relative to the first)."""
    out = subprocess.run([hcaemu, "dissect", "--json", pcap], capture_output=True, text=True, timeout=60).stdout
    qps = {}
    for line in out.splitlines():
        f = json.loads(line)
        if f.get("ipv4", {}).get("src") != src or "bth" not in f:
            continue
        b = f["bth"]
        ext = f.get("reth") or f.get("atomic_eth") or {}
        q = qps.setdefault(b["dest_qp"], {"va0": ext.get("va"), "reqs": []})
        va = ext.get("va")
        q["reqs"].append((b["name"], b["ack_req"], f.get("payload_len"), ext.get("dma_len"), ext.get("swap_add"),
                          ext.get("compare"), None if va is None else va - q["va0"]))
    return [q["reqs"] for q in qps.values()]


def check_wire(hc, captures):
    """Our client's requests against rdma_rxe's under real perftest, for the runs the captures hold."""
    runs = [("write_bw.pcap", 0, "write_bw", ["-s", "64"]), ("write_bw.pcap", 1, "write_bw", ["-s", "1024"]),
            ("write_bw.pcap", 2, "write_bw", ["-s", "4000"]), ("read_bw.pcap", 0, "read_bw", ["-s", "64"]),
            ("read_bw.pcap", 1, "read_bw", ["-s", "4000"]), ("send_bw.pcap", 0, "send_bw", ["-s", "64"]),
            ("send_bw.pcap", 1, "send_bw", ["-s", "4000"]),
            ("atomic_fadd_cswap.pcap", 0, "atomic_bw", ["-A", "FETCH_AND_ADD"]),
            ("atomic_fadd_cswap.pcap", 1, "atomic_bw", ["-A", "CMP_AND_SWAP"])]
    with tempfile.TemporaryDirectory(prefix="hcaemu-perf-pcap-") as tmp:
        for pcap, idx, test, args in runs:
            ref_path = os.path.join(captures, pcap)
            if not os.path.exists(ref_path):
                print(f"SKIP  wire pattern of {test} {' '.join(args)}: {ref_path} not found")
                continue
            ref = requests(hc, ref_path, "198.18.0.3")[idx]
            mine = os.path.join(tmp, f"{test}-{idx}.pcap")
            r, t = run_pair(hc, test, ["-n", "5", "-F"] + args, client_pcap=mine)
            ours = requests(hc, mine, "198.18.0.2") if r is not None and os.path.exists(mine) else []
            expect(f"wire: {test} {' '.join(args)} -n 5: our requests are rdma_rxe's under perftest ({pcap})",
                   r is not None and r[0] == 0 and r[3] == 0 and ours == [ref], f"ours {ours}\nrxe  {ref}\n{r or t}")


def check_ud(hc):
    """UD: send tests only; a message fits one MTU. --check also checks each receive's GRH."""
    for test, iters in (("send_bw", 200), ("send_lat", 50)):
        check_pair(hc, test, ["-n", str(iters), "-s", "2", "-c", "UD", "--check"], [2], iters, f"{test} over UD, 2 B")
        check_pair(hc, test, ["-n", str(iters), "-s", "1024", "-m", "1024", "-c", "UD", "--check"], [1024], iters,
                   f"{test} over UD, 1024 B at MTU 1024")
    # without -s: send_bw's default 65536 B becomes the MTU, with perftest's note; send_lat's 2 B stays
    note = " Max msg size in UD is MTU 1024\n Changing to this MTU\n"
    for test, iters, size, noted in (("send_bw", 100, 1024, True), ("send_lat", 20, 2, False)):
        r, t = run_pair(hc, test, ["-n", str(iters), "-m", "1024", "-c", "UD", "--check"])
        ok = r is not None and r[0] == 0 and r[3] == 0 and results(r[4]) == [(size, iters)] and \
            (note in r[2]) == noted and (note in r[5]) == noted and "Connection type : UD" in r[1] and \
            "Connection type : UD" in r[4]
        expect(f"{test} over UD without -s: {size} B, " + ("with" if noted else "without") + " perftest's note", ok, r or t)
    check_pair(hc, "send_lat", ["-n", "20", "-a", "-m", "512", "-c", "UD", "--check"], [1 << i for i in range(1, 10)], 20,
               "send_lat -a over UD: 2 B .. the MTU")
    r, t = run_pair(hc, "send_bw", ["-n", "20", "-s", "2048", "-m", "1024", "-c", "UD"])
    msg = "Max message size in UD cannot be greater than MTU (1024)"
    ok = r is not None and r[0] == 1 and r[3] == 1 and msg in r[2] and msg in r[5] and not results(r[1] + r[4])
    expect("send_bw over UD with -s above the MTU: both exit 1, say so, run nothing", ok, r or t)


def rows(out):
    """Every result row, split into its fields (numbers as text)."""
    return [l.split() for l in out.splitlines() if RESULT.match(l)]


def row_ok(kind, row, size, window_s, round_trip):
    """A -D row of `size` with iterations > 0 whose figures are its iterations over `window_s`, as
    perftest prints them (the time is the window's counted middle, so this is arithmetic, not
    timing): BW: 5 columns, peak 0.00, MsgRate = iterations/time, BW average = size * MsgRate;
    latency: 4 columns, tps = iterations/time, t_avg = time/iterations (halved for ping-pongs)."""
    if kind == "bw":
        if len(row) != 5 or int(row[0]) != size or int(row[1]) <= 0 or row[2] != "0.00":
            return False
        iters, avg, rate = int(row[1]), float(row[3]), float(row[4])
        want_rate = iters / window_s / 1e6
        return abs(rate - want_rate) <= 6e-7 and abs(avg - size * want_rate * 1e6 / 1048576) <= 0.006
    if len(row) != 4 or int(row[0]) != size or int(row[1]) <= 0:
        return False
    iters, t_avg, tps = int(row[1]), float(row[2]), float(row[3])
    return abs(tps - iters / window_s) <= 0.006 and \
        abs(t_avg - window_s * 1e6 / iters / (2 if round_trip else 1)) <= 0.006


def check_timed(hc, test, args, size, window_s, label=None):
    """A -D run between two hcaemu: exit statuses, the rows each side prints, --check."""
    label = label or f"{test} {' '.join(args)}"
    r = run_checked_pair(hc, test, args, label)
    if r is None:
        return
    rs, so, se, rc, co, ce, detail = r
    verb, kind = test.split("_")
    header = " #bytes        #iterations       t_avg[usec]    tps average" if kind == "lat" else " #bytes     #iterations"
    rt = verb in ("write", "send")
    crow, srow = rows(co), rows(so)
    expect(f"{label}: the client prints perftest's duration header and one row of {size} B, iterations > 0, "
           f"its figures over {window_s} s", header in co and len(crow) == 1 and row_ok(kind, crow[0], size, window_s, rt),
           detail)
    if kind == "bw" and verb != "send":
        # the client's results go over the out-of-band connection: the server prints them
        expect(f"{label}: the server prints the client's row", srow == crow, detail)
    elif verb in ("read", "atomic"):
        expect(f"{label}: the server prints no row", srow == [], detail)
    else:
        expect(f"{label}: the server prints its own row, iterations > 0, its figures over {window_s} s",
               header in so and len(srow) == 1 and row_ok(kind, srow[0], size, window_s, rt), detail)
    if "--check" in args:
        checker = {"write_bw": so, "read_bw": co, "send_bw": so, "atomic_bw": so,
                   "write_lat": so + co, "send_lat": so + co, "read_lat": co, "atomic_lat": co}[test]
        n = 2 if kind == "lat" and verb in ("write", "send") else 1
        expect(f"{label}: data check: ok", checker.count("data check: ok") == n and "FAILED" not in so + co, detail)


def check_timed_all(hc):
    for test, size in (("write_bw", 1024), ("read_bw", 4000), ("send_bw", 64), ("atomic_bw", 8),
                       ("write_lat", 64), ("read_lat", 2), ("send_lat", 4000), ("atomic_lat", 8)):
        args = ["-D", "1", "--check"] + ([] if test.startswith("atomic") else ["-s", str(size)])
        check_timed(hc, test, args, size, 1.0)
    check_timed(hc, "send_bw", ["-D", "1", "-s", "3000", "-q", "2", "--check"], 3000, 1.0, "send_bw -D 1 on 2 QPs")
    check_timed(hc, "write_bw", ["-D", "1", "-s", "64", "-q", "2", "--check"], 64, 1.0, "write_bw -D 1 on 2 QPs")
    # -D 4: perftest leaves D/4 = 1 s out at each end, the rows count the 2 s between (a BW and a
    # latency test below). The servers that wait for the client's run (one-sided BW, read/atomic
    # latency) wait -D on top of --oob-timeout: a run longer than the timeout is no silent peer
    for test, size in (("write_bw", 64), ("read_lat", 2)):
        check_timed(hc, test, ["-D", "4", "-s", str(size), "--oob-timeout", "2"], size, 2.0,
                    f"{test} -D 4 --oob-timeout 2: the server waits out the client's run")
    # -D with -n: timed, as perftest runs it (-n is ignored); -n alone gives a peak, -D 0.00
    check_timed(hc, "write_bw", ["-D", "1", "-n", "5", "-s", "64"], 64, 1.0, "write_bw -D 1 -n 5: timed")


def stat_lines(err):
    """--stats' "group.name value" lines of a stderr, as a dict."""
    out = {}
    for line in err.splitlines():
        parts = line.split()
        if len(parts) == 2 and "." in parts[0] and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def check_stats(hc):
    # --stats prints the counters at the end; -u sets the QP's Local ACK Timeout (18: 1.07 s,
    # so a peer the scheduler leaves off its CPU for less than 8.6 s does not fail the run).
    r, t = run_pair(hc, "read_lat", ["-n", "50", "-s", "2", "-u", "18", "--stats"])
    ok = r is not None and r[0] == 0 and r[3] == 0
    expect("read_lat -u 18 --stats: both sides succeed", ok, r or t)
    if not ok:
        return
    srv, cli = stat_lines(r[2]), stat_lines(r[5])
    # new READ requests: exactly the iterations (a retransmission counts as a duplicate)
    expect("read_lat --stats: the server counts 50 READ requests", srv.get("device.rx_read_requests") == 50, r[2])
    # one READ outstanding: each retransmission (a Go-Back-N restart) is one more packet
    expect("read_lat --stats: the client sent 50 READs and its retransmissions",
           cli.get("device.sent_pkts") == 50 + cli.get("device.completer_retry_err", 0), r[5])
    expect("read_lat --stats: 100 bytes read by the server's DMA", srv.get("device.dma_bytes_read") ==
           100 + 2 * srv.get("device.duplicate_request", 0), r[2])
    expect("read_lat --stats: the longest engine gap printed", "perf.max_turn_gap_us" in srv and "perf.max_turn_gap_us" in cli,
           r[2] + r[5])
    for side, st, err in (("server", srv, r[2]), ("client", cli, r[5])):
        # the engine's load (docs/tools/perf.md): 50 READs and 50 responses moved in busy turns,
        # which with the idle turns between them fit in the span from the first busy turn to the last
        expect("read_lat --stats: the %s's engine moved the 100 frames (and retransmissions)" % side,
               st.get("perf.load_frames", 0) >= 100 and 1 <= st.get("perf.load_busy_turns", 0) <= st["perf.load_frames"], err)
        expect("read_lat --stats: the %s's busy and idle turns within the span" % side,
               st.get("perf.load_busy_us", 0) + st.get("perf.load_idle_us", 0) <= st.get("perf.load_span_us", -2) + 1, err)
        # the same busy turns step by step (transport/turn_profile.hpp): one engine, reset with the load
        expect("read_lat --stats: the %s's turn profile counts the load's busy turns and frames" % side,
               st.get("perf.turn_busy_turns") == st.get("perf.load_busy_turns") and
               st.get("perf.turn_frames") == st.get("perf.load_frames"), err)
        # read_lat: one READ at a time, so a busy turn received frames or sent its own in its last
        # burst (never 32 at once, which would leave in the requesters' step)
        steps = ("rx", "receive", "acks_timers", "requesters", "tx")
        turns = st.get("perf.turn_busy_turns", -1)
        expect("read_lat --stats: the %s's steps: p50 <= p90; each busy turn received or sent at its end" % side,
               all(st.get(f"perf.turn_{k}_p50_ns", 0) <= st.get(f"perf.turn_{k}_p90_ns", -1) for k in steps + ("whole",)) and
               all(1 <= st.get(f"perf.turn_{k}_turns", 0) <= turns for k in ("rx", "receive", "tx")) and
               st.get("perf.turn_rx_turns", 0) + st.get("perf.turn_tx_turns", 0) >= turns and
               all(st.get(f"perf.turn_{k}_turns") == turns for k in ("acks_timers", "requesters", "whole")) and
               sum(st.get(f"perf.turn_{k}_mean_ns", 0) * st.get(f"perf.turn_{k}_turns", 0) for k in steps)
               <= (st.get("perf.turn_whole_mean_ns", 0) + 1) * turns, err)
        # the buffers mapped before the first frame (dpdk_port/prefault.hpp): the pool's 4096 mbufs
        # of at least 2176 bytes, and memif's region, whose buffers alone are 2 rings of 1024 x bsize
        expect("read_lat --stats: the %s's pool and memif region prefaulted" % side,
               st.get("link.prefaulted_pool_bytes", 0) >= 4096 * 2176 and
               st.get("link.prefaulted_link_bytes", 0) >= 2 * 1024 * 10240, err)
    expect("read_lat --stats: counters that are zero are not printed", all(v != 0 for k, v in cli.items()
                                                                           if not k.startswith("perf.")), r[5])


def check_many_qps(hc):
    """1024 QPs (issue 13): every QP connected, each one's data byte-exact; the server prints more
    address lines than a pipe holds (run_pair drains it meanwhile)."""
    check_pair(hc, "write_bw", ["-n", "5", "-s", "4096", "-q", "1024", "--check"], [4096], 5120, "write_bw on 1024 QPs")
    check_pair(hc, "send_bw", ["-n", "5", "-s", "4096", "-q", "1024", "--check"], [4096], 5120, "send_bw on 1024 QPs")


def more(hc):
    check_pair(hc, "atomic_bw", ["-n", "100", "-A", "CMP_AND_SWAP", "--check"], [8], 100)
    check_pair(hc, "write_bw", ["-n", "100", "-s", "3000", "-q", "2", "--check"], [3000], 200, "write_bw on 2 QPs")
    check_pair(hc, "send_bw", ["-n", "100", "-s", "1500", "-q", "2", "--check"], [1500], 200, "send_bw on 2 QPs")
    check_many_qps(hc)
    check_pair(hc, "write_bw", ["-n", "5", "-a", "--check"], [1 << i for i in range(1, 24)], 5, "write_bw -a")
    check_pair(hc, "send_lat", ["-n", "20", "-a", "--check"], [1 << i for i in range(1, 24)], 20, "send_lat -a")
    check_pair(hc, "write_bw", ["-n", "100", "-s", "2048", "-c", "UC", "--check"], [2048], 100, "write_bw over UC")
    check_pair(hc, "send_lat", ["-n", "50", "-s", "100", "-c", "UC", "--check"], [100], 50, "send_lat over UC")
    check_ud(hc)
    check_timed_all(hc)
    r, t = run_pair(hc, "write_bw", ["-n", "50", "-s", "65536", "--report_gbits"])
    expect("write_bw --report_gbits: Gb/sec columns", r is not None and r[3] == 0 and "BW peak[Gb/sec]" in r[4], r or t)
    check_errors(hc)
    check_signals(hc)
    check_stats(hc)


if __name__ == "__main__":
    main()
