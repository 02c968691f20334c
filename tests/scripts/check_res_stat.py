#!/usr/bin/python3
"""`hcaemu res show` and `hcaemu stat`, and `--device` on perf and pingpong.

Without a daemon: bad arguments give the exact message and exit status 2; a socket nobody serves
`cannot connect to unix:PATH: ...` and exit 1; perf and pingpong refuse the attach options beside
`--device unix:PATH` (the daemon owns the port) with exit 2, before touching DPDK.
With --hcaemud: one daemon on net_ring (it loops frames for its own address back): `stat` text and
JSON, every group and counter; a pingpong server's objects in `res show` text and JSON while it
waits (owner pid, sizes, handles that point at each other); pingpong and perf pairs through the
daemon with every byte checked; the objects gone once their clients exit; SIGTERM ends it with 0.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def run(args, timeout=30):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def usage(h, sub, args, msg, name):
    """exit 2, the message as the first stderr line, nothing on stdout"""
    rc, out, err = run([h] + args)
    first = err.splitlines()[0] if err else ""
    expect(name, rc == 2 and first == f"hcaemu {sub}: {msg}" and out == "", (rc, out, err))


def parse_res_line(line):
    """'client C pid P comm X k v k v ...' -> dict (values as text)"""
    w = line.split(" ")
    if len(w) % 2:
        return None
    return {w[i]: w[i + 1] for i in range(0, len(w), 2)}


def check_daemon(h, hcaemud, tmp):
    sock = os.path.join(tmp, "d.sock")
    dev = ["--device", f"unix:{sock}"]
    port = 20000 + os.getpid() % 20000
    eal = f"--no-huge -m 256 --no-pci --no-shconf -l 0 --file-prefix rs{os.getpid()} --vdev=net_ring0"
    log = open(os.path.join(tmp, "hcaemud.log"), "w+")
    d = subprocess.Popen([hcaemud, "--socket", sock, "--eal", eal], stdout=log, stderr=subprocess.STDOUT)
    procs = []
    try:
        for _ in range(100):
            if os.path.exists(sock) or d.poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.exists(sock):
            log.seek(0)
            expect("hcaemud started", False, log.read()[-2000:])
            return

        # ---- stat: four groups in order, text and JSON agree on the device's counters ----
        rc, out, err = run([h, "stat"] + dev)
        expect("stat: exit 0", rc == 0 and err == "", (rc, err))
        heads = [ln for ln in out.splitlines() if not ln.startswith("  ")]
        expect("stat: the groups", heads == ["device:", "net:", "link:", "daemon:"], heads)
        text = {}
        group = None
        for ln in out.splitlines():
            if not ln.startswith("  "):
                group = ln[:-1]
                continue
            n, v = ln.split()
            text[(group, n)] = int(v)
        rc, out, err = run([h, "stat", "--json"] + dev)
        try:
            js = json.loads(out)
        except ValueError as e:
            js = {}
            expect("stat --json: valid JSON", False, (e, out[:500]))
        expect("stat --json: the groups", list(js) == ["device", "net", "link", "daemon"], list(js))
        for g in ("device", "net", "link"):
            expect(f"stat: {g} text == JSON",
                   {n: v for (gg, n), v in text.items() if gg == g} == js.get(g), (g, js.get(g)))
        expect("stat: the device's counters", list(js.get("device", {}))[:2] == ["sent_pkts", "rcvd_pkts"] and
               js["device"]["sent_pkts"] == 0 and "dma_access_errors" in js["device"], js.get("device"))
        expect("stat: net and link counters", "arp_rx_requests" in js.get("net", {}) and
               "tx_frames" in js.get("link", {}), js)
        expect("stat: the daemon sees this client", js.get("daemon", {}).get("clients_connected") == 1,
               js.get("daemon"))

        # ---- res show: nothing yet, then a waiting pingpong server's objects ----
        for k in ("pd", "mr", "cq", "qp", "srq"):
            rc, out, err = run([h, "res", "show", k] + dev)
            expect(f"res show {k}: empty", rc == 0 and out == "" and err == "", (rc, out, err))
            rc, out, err = run([h, "res", "show", k, "--json"] + dev)
            expect(f"res show {k} --json: []", rc == 0 and json.loads(out) == [], (rc, out))
        pp = ["-p", str(port), "-c", "-n", "200", "-s", "10000", "-r", "64"]
        srv = subprocess.Popen([h, "pingpong"] + dev + pp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(srv)
        qps = []
        for _ in range(100):
            rc, out, err = run([h, "res", "show", "qp", "--json"] + dev)
            qps = json.loads(out) if rc == 0 else []
            if qps:
                break
            time.sleep(0.1)
        res = {}
        for k in ("pd", "mr", "cq", "qp"):
            rc, out, err = run([h, "res", "show", k] + dev)
            lines = out.splitlines()
            rc2, out2, _ = run([h, "res", "show", k, "--json"] + dev)
            objs = json.loads(out2) if rc2 == 0 else []
            expect(f"res show {k}: one line, one object", rc == 0 and len(lines) == 1 and len(objs) == 1,
                   (rc, out, out2))
            if len(lines) != 1 or len(objs) != 1:
                continue
            t = parse_res_line(lines[0])
            o = objs[0]
            expect(f"res show {k}: owner", t and t["pid"] == str(srv.pid) and t["comm"] == "hcaemu" and
                   o["pid"] == srv.pid and o["comm"] == "hcaemu" and str(o["client"]) == t["client"], (t, o))
            expect(f"res show {k}: text == JSON", t == {n: str(v) for n, v in o.items()}, (t, o))
            res[k] = o
        if len(res) == 4:
            pd, mr, cq, qp = res["pd"], res["mr"], res["cq"], res["qp"]
            expect("res: the PD's users (MR, QP)", pd["users"] == 2, pd)
            expect("res: the MR", mr["length"] == 10000 and int(str(mr["access"]), 0) == 1, mr)
            expect("res: the CQ", cq["cqe"] >= 65, cq)
            expect("res: the QP", qp["type"] == "RC" and qp["state"] == "INIT" and qp["pd"] == pd["handle"] and
                   qp["send_cq"] == cq["handle"] and qp["recv_cq"] == cq["handle"], qp)
            expect("res: everything is one client's",
                   len({res[k]["client"] for k in res}) == 1, res)
        cli = subprocess.run([h, "pingpong"] + dev + pp + ["-e", "127.0.0.1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=60)
        so, se = srv.communicate(timeout=60)
        for who, r, o, e in (("client", cli.returncode, cli.stdout, cli.stderr), ("server", srv.returncode, so, se)):
            expect(f"pingpong through the daemon: {who}", r == 0 and "200 iters in" in o and
                   "data check: 200 messages of 10000 bytes received as sent" in o, (r, o, e))
        for k in ("pd", "mr", "cq", "qp"):
            rc, out, err = run([h, "res", "show", k] + dev)
            expect(f"res show {k}: empty once pingpong is gone", rc == 0 and out == "", (rc, out))

        # ---- perf through the daemon, both ends on it ----
        for test, extra in (("write_bw", ["-s", "4096", "-n", "500"]), ("send_lat", ["-s", "3000", "-n", "200"]),
                            ("read_bw", ["-s", "65536", "-n", "100"])):
            base = [h, "perf", test] + dev + extra + ["-p", str(port + 1), "--check"]
            ps = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(ps)
            time.sleep(0.3)
            pc = subprocess.run(base + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=120)
            so, se = ps.communicate(timeout=120)
            size, iters = extra[1], extra[3]
            row = lambda o: any(ln.split()[:2] == [size, iters] for ln in o.splitlines() if ln.strip())  # noqa: E731
            expect(f"perf {test} through the daemon", pc.returncode == 0 and ps.returncode == 0 and
                   row(pc.stdout) and row(so), (pc.returncode, ps.returncode, pc.stdout[-600:], pc.stderr, se))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
            try:
                rc = d.wait(timeout=30)
            except subprocess.TimeoutExpired:
                d.kill()
                rc = d.wait()
            expect("hcaemud: SIGTERM -> exit 0", rc == 0, rc)
        expect("hcaemud: socket removed", not os.path.exists(sock))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", help="run the checks against a daemon too")
    args = ap.parse_args()
    h = args.hcaemu
    with tempfile.TemporaryDirectory() as tmp:
        if args.hcaemud:
            check_daemon(h, args.hcaemud, tmp)
        nosock = os.path.join(tmp, "none", "hcaemu.sock")
        dev = f"unix:{nosock}"

        # ---- res: bad arguments ----
        usage(h, "res", ["res"], "what to do? res show pd|mr|cq|qp|srq", "res alone")
        usage(h, "res", ["res", "list", "qp"], "unknown command 'list' (res show pd|mr|cq|qp|srq)", "res list")
        usage(h, "res", ["res", "show"], "res show needs a kind: pd, mr, cq, qp or srq", "res show alone")
        usage(h, "res", ["res", "show", "ah"], "unknown kind 'ah': pd, mr, cq, qp or srq", "res show ah")
        usage(h, "res", ["res", "show", "qp", "17"], "unexpected argument '17'", "res stray argument")
        usage(h, "res", ["res", "show", "qp", "--jsn"], "unknown option '--jsn'", "res unknown option")
        usage(h, "res", ["res", "show", "qp", "--device"], "--device needs a value (unix:PATH or local)",
              "res --device without a value")
        usage(h, "res", ["res", "show", "qp", "--device", "local"],
              "--device: 'local' is not unix:PATH (the socket of a running hcaemud)", "res --device local")
        usage(h, "res", ["res", "show", "pd", "--device=unix:"],
              "--device: 'unix:' is not unix:PATH (the socket of a running hcaemud)", "res --device=unix:")
        rc, out, err = run([h, "res", "--help"])
        expect("res --help", rc == 0 and "res show pd|mr|cq|qp|srq" in out and "--json" in out, (rc, out))

        # ---- stat: bad arguments ----
        usage(h, "stat", ["stat", "device"], "unexpected argument 'device'", "stat stray argument")
        usage(h, "stat", ["stat", "-j"], "unknown option '-j'", "stat unknown option")
        usage(h, "stat", ["stat", "--device", "/run/hcaemu.sock"],
              "--device: '/run/hcaemu.sock' is not unix:PATH (the socket of a running hcaemud)", "stat bare path")
        rc, out, err = run([h, "stat", "--help"])
        expect("stat --help", rc == 0 and "--json" in out and "daemon" in out, (rc, out))

        # ---- no daemon there: exit 1, the socket named ----
        for args in (["res", "show", "qp"], ["res", "show", "mr", "--json"], ["stat"], ["stat", "--json"]):
            sub = args[0]
            rc, out, err = run([h] + args + ["--device", dev])
            expect(f"{' '.join(args)}: unreachable daemon", rc == 1 and out == "" and
                   err.startswith(f"hcaemu {sub}: cannot connect to {dev}: ") and len(err.splitlines()) == 1,
                   (rc, out, err))
        # a file that is not a socket
        plain = os.path.join(tmp, "plain")
        open(plain, "w").close()
        rc, out, err = run([h, "stat", f"--device=unix:{plain}"])
        expect("stat: a plain file", rc == 1 and err.startswith(f"hcaemu stat: cannot connect to unix:{plain}: "),
               (rc, err))

        # ---- perf and pingpong: --device unix:PATH with an attach option ----
        owns = f"the daemon behind --device {dev} owns the port; attach options go with an in-process HCA only"
        for opt in (["--ip", "198.18.0.1/24"], ["--eal", "--no-pci"], ["--dpdk-port", "0"], ["--mac", "02:00:00:00:00:01"],
                    ["--link-mtu", "9000"], ["--pcap", os.path.join(tmp, "x.pcap")], ["--ip=198.18.0.1/24"]):
            name = opt[0].split("=")[0]
            usage(h, "perf", ["perf", "write_bw", "--device", dev] + opt, f"{name}: {owns}", f"perf --device + {name}")
            usage(h, "pingpong", ["pingpong", f"--device={dev}"] + opt, f"{name}: {owns}", f"pingpong --device + {name}")
            # the order does not matter
            usage(h, "perf", ["perf", "send_lat"] + opt + ["--device", dev], f"{name}: {owns}", f"perf {name} + --device")
        expect("no capture file written", not os.path.exists(os.path.join(tmp, "x.pcap")))
        for sub, base in (("perf", ["perf", "write_bw"]), ("pingpong", ["pingpong"])):
            usage(h, sub, base + ["--device", "rdma0"],
                  "--device: unknown device 'rdma0': use unix:PATH (a running hcaemud) or local", f"{sub} --device rdma0")
            usage(h, sub, base + ["--device", "unix:"], "--device: 'unix:' names no socket: use unix:PATH",
                  f"{sub} --device unix:")
            usage(h, sub, base + ["--device"], "--device needs a value (unix:PATH or local)", f"{sub} --device alone")
            usage(h, sub, base + ["--device", "local"], "--ip ADDR/LEN is required (this HCA's address)",
                  f"{sub} --device local without --ip")
            rc, out, err = run([h] + base + ["--device", dev, "127.0.0.1"])
            expect(f"{sub} --device: unreachable daemon", rc == 1 and
                   err.startswith(f"hcaemu {sub}: cannot connect to {dev}: "), (rc, out, err))
            rc, out, err = run([h] + base + ["--help"])
            expect(f"{sub} --help names --device", rc == 0 and "--device SPEC" in out, (rc, out[-500:]))

    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
