#!/usr/bin/python3
"""`hcaemu pingpong` end to end between two hcaemu processes joined by DPDK's net_memif, with the
out-of-band exchange on TCP over loopback: both roles, one-packet and multi-packet messages, -c
data check, -e completion events, the printed addresses agreeing across the two sides, the pcap
of the run decoding; then the failures: bad arguments, nobody listening, nobody connecting, a
hostile client, a peer address that never answers ARP. Every process has a deadline."""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402
from proclib import finish, free_port, memif, start, wait_listen  # noqa: E402

failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-2500:]}")
    else:
        print(f"ok   {name}")


def eal(lcore, vdev):
    return proclib.eal(lcore, vdev, mem=256)


ADDR = re.compile(r"^  (local|remote) address: +LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$", re.M)


def addresses(out):
    return {m.group(1): m.group(2, 3, 4, 5) for m in ADDR.finditer(out)}


def pair(h, tmp, size, iters, extra_s=(), extra_c=(), pcap=None, name="", ips=("198.18.0.1/24", "198.18.0.2/24")):
    sock = os.path.join(tmp, f"memif-{name}.sock")
    port = str(free_port())
    srv = [h, "pingpong", "-p", port, "-s", str(size), "-n", str(iters), "-g", "1", "--timeout", "20",
           "--eal", eal(0, memif("server", sock)), "--ip", ips[0], "--mac", "52:54:00:18:00:01"] + list(extra_s)
    if pcap:
        srv += ["--pcap", pcap]
    cli = [h, "pingpong", "-p", port, "-s", str(size), "-n", str(iters), "-g", "1", "--timeout", "20",
           "--eal", eal(1, memif("client", sock)), "--ip", ips[1], "--mac", "52:54:00:18:00:02"] + list(extra_c) + ["127.0.0.1"]
    ps = start(srv)
    wait_listen(int(port), ps, 30)  # the client connects once (as ibv_rc_pingpong's)
    pc = start(cli)
    rc_c, out_c, err_c = finish(pc)
    rc_s, out_s, err_s = finish(ps)
    return (rc_s, out_s, err_s), (rc_c, out_c, err_c)


def check_pair(name, s, c, size, iters, chk, gids=("::ffff:198.18.0.1", "::ffff:198.18.0.2")):
    (rc_s, out_s, err_s), (rc_c, out_c, err_c) = s, c
    detail = f"server rc={rc_s}\n{out_s}\n{err_s}\nclient rc={rc_c}\n{out_c}\n{err_c}"
    expect(f"{name}: both exit 0", rc_s == 0 and rc_c == 0, detail)
    a_s, a_c = addresses(out_s), addresses(out_c)
    expect(f"{name}: each side's remote address is the other's local address",
           a_s.get("remote") == a_c.get("local") and a_c.get("remote") == a_s.get("local") and "local" in a_s, detail)
    expect(f"{name}: GIDs are {gids}",
           a_s.get("local", ("",) * 4)[3] == gids[0] and a_c.get("local", ("",) * 4)[3] == gids[1], detail)
    for who, out in (("server", out_s), ("client", out_c)):
        expect(f"{name}: {who} reports {size * iters * 2} bytes and {iters} iters",
               re.search(rf"^{size * iters * 2} bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$", out, re.M) is not None
               and re.search(rf"^{iters} iters in [0-9.]+ seconds = [0-9.]+ usec/iter$", out, re.M) is not None, out)
        if chk:
            expect(f"{name}: {who} data check", f"data check: {iters} messages of {size} bytes received as sent" in out, out)


def fake_server(port, reply, got, hold=False):
    """A TCP peer that plays ibv_rc_pingpong's server with a scripted reply; with `hold`, it then
    keeps the connection open (reading) until the client closes it, at most 20 s."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    srv.settimeout(20)
    try:
        c, _ = srv.accept()
        c.settimeout(20)
        data = b""
        while len(data) < 52:
            d = c.recv(52 - len(data))
            if not d:
                break
            data += d
        got.append(data)
        c.sendall(reply)
        try:
            got.append(c.recv(5))
            while hold and c.recv(64):
                pass
        except OSError:
            pass
        c.close()
    except OSError as e:
        got.append(e)
    srv.close()


def wait_for(cond, limit=30.0):
    """Polls cond() every 0.1 s until true or `limit` seconds; returns its last value."""
    end = time.monotonic() + limit
    while not cond() and time.monotonic() < end:
        time.sleep(0.1)
    return cond()


def check_signals(h, tmp):
    # SIGINT to a client in the middle of a long run (ibv_rc_pingpong's -n at 10^8).
    sock = os.path.join(tmp, "memif-sig.sock")
    port = str(free_port())
    n = ["-s", "64", "-n", "100000000", "-g", "1", "--timeout", "5"]
    ps = start([h, "pingpong", "-p", port] + n + ["--eal", eal(0, memif("server", sock)), "--ip", "198.18.0.1/24"])
    wait_for(lambda: os.path.exists(sock) or ps.poll() is not None)
    pc = start([h, "pingpong", "-p", port] + n + ["--eal", eal(1, memif("client", sock)), "--ip", "198.18.0.2/24",
                                                  "127.0.0.1"])
    head = []
    for line in pc.stdout:  # the client's own --timeout bounds this
        head.append(line.decode(errors="replace"))
        if "remote address" in head[-1]:
            break
    time.sleep(0.5)  # into the ping-pong loop
    pc.send_signal(signal.SIGINT)
    rc_c, out_c, err_c = finish(pc, 30)
    rc_s, out_s, err_s = finish(ps, 60)
    out_c = "".join(head) + out_c
    detail = f"client rc={rc_c}\n{out_c}\n{err_c}\nserver rc={rc_s}\n{out_s}\n{err_s}"
    expect("SIGINT to a client mid-run: exit 130, 'hcaemu pingpong: interrupted by SIGINT', no result",
           rc_c == 130 and err_c.count("hcaemu pingpong: interrupted by SIGINT\n") == 1 and "iters in" not in out_c
           and "remote address" in out_c, detail)
    expect("SIGINT to a client mid-run: nothing else on its stderr but DPDK's",
           all(l.startswith(("rte_", "TELEMETRY", "Device with port_id", "memif_", "hcaemu pingpong: interrupted"))
               for l in err_c.splitlines()), detail)
    # (its SEND's retries run out first, or, if it was waiting for a SEND, --timeout)
    expect("... its server fails within its timeout: exit 1, says why",
           rc_s == 1 and ("Failed status transport retry counter exceeded" in err_s
                          or re.search(r"no completion for 5 s \(sent \d+, received \d+ of 100000000\)", err_s)), detail)
    expect("... the server's memif socket file is gone", not os.path.exists(sock), detail)

    # SIGTERM to a server waiting for its client: the port closed (memif socket file removed).
    sock = os.path.join(tmp, "memif-sig2.sock")
    ps = start([h, "pingpong", "-p", str(free_port()), "--timeout", "60", "--eal", eal(0, memif("server", sock)),
                "--ip", "198.18.0.1/24"])
    up = wait_for(lambda: os.path.exists(sock) or ps.poll() is not None)
    ps.send_signal(signal.SIGTERM)
    rc, out, err = finish(ps, 30)
    expect("SIGTERM to a server waiting for a client: exit 143, says so once, the memif socket file gone",
           up and rc == 143 and err.count("hcaemu pingpong: interrupted by SIGTERM\n") == 1 and not os.path.exists(sock),
           (up, rc, out, err))

    # Two signals at once: a stopped process gets SIGTERM and SIGINT, then SIGCONT; both are
    # delivered together, so the second finds the first's stop under way: the immediate exit
    # (128 + the second signal, by Linux's order SIGTERM's), without the clean stop's message.
    sock = os.path.join(tmp, "memif-sig3.sock")
    ps = start([h, "pingpong", "-p", str(free_port()), "--timeout", "60", "--eal", eal(0, memif("server", sock)),
                "--ip", "198.18.0.1/24"])
    up = wait_for(lambda: os.path.exists(sock) or ps.poll() is not None)
    ps.send_signal(signal.SIGSTOP)
    ps.send_signal(signal.SIGTERM)
    ps.send_signal(signal.SIGINT)
    ps.send_signal(signal.SIGCONT)
    rc, out, err = finish(ps, 30)
    expect("two signals at once: exit 128+signal at once, 'second signal' said, no clean-stop message",
           up and rc in (130, 143) and "hcaemu: second signal: exiting now, without the clean stop" in err
           and "interrupted by" not in err, (up, rc, out, err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--only", choices=["signals"], help="run the signal checks only")
    args = ap.parse_args()
    h = args.hcaemu
    if args.only == "signals":
        with tempfile.TemporaryDirectory() as tmp:
            check_signals(h, tmp)
        for f in failures:
            print(" -", f)
        return 1 if failures else 0
    with tempfile.TemporaryDirectory() as tmp:
        # 64 B (SEND Only) and 10000 B (FIRST, MIDDLE..., LAST at MTU 1024), with -c.
        pcap = os.path.join(tmp, "pp.pcap")
        s, c = pair(h, tmp, 64, 50, ["-c"], ["-c"], pcap=pcap, name="64")
        check_pair("64 B x50 -c", s, c, 64, 50, True)
        s, c = pair(h, tmp, 10000, 20, ["-c"], ["-c"], name="10000")
        check_pair("10000 B x20 -c", s, c, 10000, 20, True)
        # Completion events on one side, MTU 4096 on both, a small receive queue (re-posting).
        s, c = pair(h, tmp, 4096, 30, ["-e", "-m", "4096", "-r", "4"], ["-m", "4096", "-r", "4", "-c"], name="ev")
        check_pair("4096 B x30 -e -r 4", s, c, 4096, 30, False)
        # IPv6 GIDs: the peers find each other by neighbour discovery (RFC 5180 benchmarking range).
        pcap6 = os.path.join(tmp, "pp6.pcap")
        s, c = pair(h, tmp, 3000, 10, ["-c"], ["-c"], pcap=pcap6, name="v6", ips=("2001:2::1/64", "2001:2::2/64"))
        check_pair("IPv6 3000 B x10 -c", s, c, 3000, 10, True, gids=("2001:2::1", "2001:2::2"))
        t = subprocess.run(["tshark", "-r", pcap6, "-n", "-T", "fields", "-e", "icmpv6.type", "-e", "infiniband.bth.opcode"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        rows = [l.split("\t") for l in t.stdout.splitlines()]
        expect("IPv6 pcap: solicitation and advertisement, then RoCE v2 over IPv6",
               any(r[0] == "135" for r in rows) and any(r[0] == "136" for r in rows)
               and sum(1 for r in rows if len(r) > 1 and r[1] == "0") == 20, t.stdout[:800])

        # The server's capture: ARP both ways, then SEND Only and ACK, all RoCE frames intact.
        r = subprocess.run([h, "dissect", "--brief", pcap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        roce = [l for l in r.stdout.splitlines() if "RC SEND Only QP=" in l]
        expect("pcap: 100 SEND Only frames (50 each way)", len(roce) == 100, r.stdout[-2000:])
        t = subprocess.run(["tshark", "-r", pcap, "-n", "-T", "fields", "-e", "arp.opcode"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ops = [l for l in t.stdout.splitlines() if l]
        expect("pcap: ARP request and reply captured", "1" in ops and "2" in ops, t.stdout[:500])

        # Failures: each a clear message and a non-zero exit, never a hang.
        base = ["--eal", eal(0, memif("server", os.path.join(tmp, "lonely.sock"))), "--ip", "198.18.0.1/24"]
        for args, want in ((["-m", "300"], "256, 512"), (["-s", "0"], "-s"), (["--bogus"], "unknown option"),
                           (["-p", "70000"], "-p"), (["--ip", "300.1.1.1/24"], "--ip"), (["--mac", "01:00:00:00:00:01"], "--mac"),
                           (["a", "b"], "one server name")):
            r = subprocess.run([h, "pingpong"] + base + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
            expect(f"bad args {args}: exit 2", r.returncode == 2 and want in r.stderr, (r.returncode, r.stderr))
        r = subprocess.run([h, "pingpong", "--eal", eal(0, memif("server", os.path.join(tmp, "x.sock")))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect("no --ip: exit 2", r.returncode == 2 and "--ip" in r.stderr, r.stderr)
        r = subprocess.run([h, "pingpong", "--eal", "--no-such-eal-flag", "--ip", "198.18.0.1/24"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect("bad EAL arguments: exit 1 with a message", r.returncode == 1 and "EAL" in r.stderr, r.stderr)
        r = subprocess.run([h, "pingpong", "--ip", "198.18.0.1/24", "--eal",
                            eal(0, "net_af_packet0,iface=hcaemu-none0") + " --file-prefix=ppnone"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect("a --vdev DPDK cannot create: exit 1, naming it",
               r.returncode == 1 and "no DPDK port: DPDK could not create net_af_packet0 (its messages above say why)"
               in r.stderr, (r.returncode, r.stderr))

        port = str(free_port())
        r = subprocess.run([h, "pingpong", "-p", port, "--timeout", "2"] + base + ["127.0.0.1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("nobody listening: exit 1", r.returncode == 1 and "Couldn't connect" in r.stderr, r.stderr)
        r = subprocess.run([h, "pingpong", "-p", port, "--timeout", "2"] + base,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        expect("nobody connecting: exit 1", r.returncode == 1 and "no client connected" in r.stderr, r.stderr)
        # The memif server's socket file exists from EAL start until the port is closed: after
        # each failure above, DpdkPort::close() ran.
        expect("after the failures the DPDK port was closed (memif socket removed)",
               not os.path.exists(os.path.join(tmp, "lonely.sock")), os.listdir(tmp))

        # A hostile client: 52 bytes that are not an address.
        port = free_port()
        p = start([h, "pingpong", "-p", str(port), "--timeout", "10"] + base)
        for _ in range(100):
            try:
                k = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                time.sleep(0.1)
        else:
            k = None
        if k:
            k.sendall(b"Z" * 51 + b"\0")
            k.close()
        rc, out, err = finish(p, 30)
        expect("hostile client: exit 1, typed reason", rc == 1 and "bad_" in err, (rc, err))

        # A server whose RoCE address never answers ARP: the client says so and stops.
        port = free_port()
        got = []
        reply = b"0000:000011:123456:00000000000000000000ffffc6120063\0"  # ::ffff:198.18.0.99
        th = threading.Thread(target=fake_server, args=(port, reply, got))
        th.start()
        time.sleep(0.2)
        r = subprocess.run([h, "pingpong", "-p", str(port), "--timeout", "10", "-g", "1",
                            "--eal", eal(1, memif("server", os.path.join(tmp, "nobody.sock"))), "--ip", "198.18.0.2/24",
                            "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        th.join(30)
        expect("client sent its address (52 bytes, GID ::ffff:198.18.0.2)",
               got and isinstance(got[0], bytes) and len(got[0]) == 52 and got[0].endswith(b"ffffc6120002\0"), got)
        expect("client sent done", len(got) > 1 and got[1] == b"done\0", got)
        expect("unanswered ARP: exit 1", r.returncode == 1 and "no answer from 198.18.0.99" in r.stderr, (r.returncode, r.stderr))

        # --port is the TCP port (ibv_rc_pingpong's long option), in both spellings.
        port = free_port()
        for spelling in (["--port", str(port)], [f"--port={port}"]):
            r = subprocess.run([h, "pingpong", "--timeout", "1"] + spelling + base + ["127.0.0.1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            expect(f"{spelling}: the TCP port", r.returncode == 1 and f"Couldn't connect to 127.0.0.1:{port}" in r.stderr,
                   (r.returncode, r.stderr))
        r = subprocess.run([h, "pingpong", "--ip=198.18.0.1/24", "--dpdk-port=nope", "--eal", base[1]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect("--dpdk-port=NAME not found: exit 1, the ports listed",
               r.returncode == 1 and "no DPDK port 'nope'; ports: 0 net_memif0 (net_memif)" in r.stderr, (r.returncode, r.stderr))
        expect("--dpdk-port not found: the vdev the EAL made was closed (memif socket removed)",
               not os.path.exists(os.path.join(tmp, "lonely.sock")), os.listdir(tmp))
        r = subprocess.run([h, "pingpong", "--pcap", os.path.join(tmp, "no", "such", "dir.pcap")] + base,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect("--pcap unwritable: exit 1, the path named once",
               r.returncode == 1 and r.stderr.count("dir.pcap") == 1 and "No such file or directory" in r.stderr,
               (r.returncode, r.stderr))
        r = subprocess.run([h, "pingpong", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        flags = ["-p", "--port", "-d", "--ib-dev", "-i", "--ib-port", "-s", "--size", "-m", "--mtu", "-r", "--rx-depth",
                 "-n", "--iters", "-l", "--sl", "-e", "--events", "-g", "--gid-idx", "-c", "--chk", "--timeout", "--stats",
                 "-h", "--help", "--eal", "--dpdk-port", "--ip", "--mac", "--link-mtu", "--pcap"]
        missing = [f for f in flags if not re.search(rf"(^|[ ,]){re.escape(f)}([ ,=]|$)", r.stdout, re.M)]
        expect("--help lists every flag", r.returncode == 0 and not missing, (r.returncode, missing))

        # Hostile or odd servers, each answered at once with a message and exit 1.
        v4 = "00000000000000000000ffff"
        for what, gid, want in (("a multicast GID", "ff020000000000000000000000000001", "cannot send to ff02::1: it is not a unicast address"),
                                ("a broadcast IPv4", v4 + "ffffffff", "cannot send to 255.255.255.255: it is not a unicast address"),
                                ("an IPv6 GID to an IPv4 HCA", "20010002000000000000000000000063",
                                 "cannot send to 2001:2::63: this HCA has no IPv6 address (--ip is IPv4)")):
            port = free_port()
            got = []
            th = threading.Thread(target=fake_server, args=(port, f"0000:000011:123456:{gid}".encode() + b"\0", got))
            th.start()
            time.sleep(0.2)
            r = subprocess.run([h, "pingpong", "-p", str(port), "--timeout", "10", "-g", "1",
                                "--eal", eal(1, memif("server", os.path.join(tmp, "odd.sock"))), "--ip", "198.18.0.2/24",
                                "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            th.join(30)
            expect(f"server sends {what}: exit 1", r.returncode == 1 and want in r.stderr, (r.returncode, r.stderr))

        # A server that sends half an address and stalls.
        port = free_port()
        got = []
        th = threading.Thread(target=fake_server, args=(port, b"0000:000011:123456:0000000", got, True))
        th.start()
        time.sleep(0.2)
        r = subprocess.run([h, "pingpong", "-p", str(port), "--timeout", "2"] + base + ["127.0.0.1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        th.join(30)
        expect("server stalls after 26 bytes: exit 1",
               r.returncode == 1 and "Couldn't read remote address: the peer stopped sending for 2 s (26 of 52 bytes came)" in r.stderr,
               (r.returncode, r.stderr))

        # Clients that connect and never write, or write half an address and close.
        for what, data, want in (("never writes", None, "the peer sent nothing for 2 s (0 of 52 bytes came)"),
                                 ("closes after 26 bytes", b"0000:000011:123456:0000000",
                                  "the peer closed the connection (26 of 52 bytes came)")):
            port = free_port()
            p = start([h, "pingpong", "-p", str(port), "--timeout", "2"] + base)
            k = None
            for _ in range(100):
                try:
                    k = socket.create_connection(("127.0.0.1", port), timeout=5)
                    break
                except OSError:
                    time.sleep(0.1)
            if k and data:
                k.sendall(data)
                k.close()
            rc, out, err = finish(p, 30)
            if k:
                k.close()
            expect(f"client {what}: exit 1", rc == 1 and "Couldn't read remote address: " + want in err, (rc, err))
            expect(f"client {what}: the DPDK port was closed", not os.path.exists(os.path.join(tmp, "lonely.sock")))

        check_signals(h, tmp)

    if failures:
        print(f"{len(failures)} check(s) failed:")
        for f in failures:
            print(" -", f)
        return 1
    print("all pingpong checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
