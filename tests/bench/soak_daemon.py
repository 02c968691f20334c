#!/usr/bin/python3
"""Soak (a benchmark, not a test): two hcaemud joined by net_memif (A the memif server at 198.18.0.1,
B the client at 198.18.0.2) serve waves of clients for --seconds (default 600):

  churn   `daemon_node churn` on A or B: PD, MR, CQs (one on a channel), SRQ, RC QP, UD QP, AH, a
          loopback RC and UD SEND byte-exact, all destroyed, a few rounds; then exits holding one
          round's objects (the daemon frees them)
  perf    `hcaemu perf` pairs A <-> B (write/read/send/atomic, bw/lat, --check), bounded count
  pair/ud `daemon_node pair` / `ud` with one end on each daemon (every verb, byte-exact)
  victim  a perf client or server, or a churn client, SIGKILLed after a seeded random delay (in
          the middle of creating objects or of a transfer); its peer fails on its own.

Every client has a deadline and is killed by its PID if it overruns. Between waves, once the
daemons are idle again (no client but the sampler, no object listed), it samples each daemon:
RSS (/proc/PID/status VmRSS), open fds (/proc/PID/fd), the objects `hcaemu res show` lists and the
device's own tables (`hcaemu stat`, daemon set: dev_pds ... dev_ahs), malloc's bytes in use
(malloc_in_use, table_bytes) and its error counters. Printed after a warm-up wave (the start),
every --sample-every seconds (60), and at the end.

A daemon error is: the daemon dying or not exiting 0 on SIGTERM at the end; a line in its log
while it serves other than its own start, client-gone and stop lines (DPDK's start-up output is
not counted; in its stop, lines saying error or failure are); a non-zero daemon counter that a
well-formed client cannot cause (err_* but err_shutting_down, bad_handle, rings_in_error, bad_wqes, cq_rings_bad,
events_dropped, clients_refused, requests_failed: the clients here are libhcaemu and the hcaemu
tools, whose requests are well-formed and valid). A SIGKILLed client and what its peer sees
(retries exhausted, a failed exit) are expected and not counted. A client neither killed nor the
peer of a killed one that fails (exit status, data check) or overruns is a client failure.

The device's tables hand out fresh indices until each has used all of its max once, and keep a
slot per index ever used (hca_model/table.hpp): their heap (`table_bytes`, at most a few MiB)
grows with the handles ever created, by design. Flat: every sample's fds and objects equal the
start's; at the end, beside the tables' growth, malloc's bytes in use within --heap-slack-kib
(256) and RSS within max(--rss-slack-mib (4), --rss-slack-pct (5) of the start) of the start's;
zero daemon errors, zero client failures. Exit 0 if flat, 1 if not.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import daemonlib  # noqa: E402
from check_perf import free_port  # noqa: E402

KINDS = ("pd", "mr", "cq", "qp", "srq")
GAUGES = ("dev_pds", "dev_mrs", "dev_cqs", "dev_qps", "dev_srqs", "dev_ahs")
ERROR_COUNTERS = ("err_bad_magic", "err_bad_version", "err_bad_length", "err_unknown_op", "err_no_hello",
                  "err_bad_field", "err_bad_fd", "err_fd_unexpected", "err_limit", "bad_handle", "rings_in_error",
                  "bad_wqes", "cq_rings_bad", "events_dropped", "clients_refused", "requests_failed")
LOG_OK = re.compile(r"^hcaemud: (serving .*|client \d+ \(pid \d+, .*\) gone: \d+ object\(s\) destroyed|"
                    r"stopping: every QP to ERR, clients told|stopped)$")
PERF = {  # test: (args, the output (server or client) that says 'data check: ok', how many times)
    "write_bw": (["-s", "65536", "-n", "2000"], "s", 1), "read_bw": (["-s", "4096", "-n", "2000"], "c", 1),
    "send_bw": (["-s", "4096", "-n", "2000"], "s", 1), "atomic_bw": (["-n", "2000"], "s", 1),
    "write_lat": (["-s", "64", "-n", "500"], "sc", 2), "send_lat": (["-s", "2048", "-n", "500"], "sc", 2),
    "read_lat": (["-s", "4096", "-n", "500"], "c", 1), "atomic_lat": (["-n", "500"], "c", 1)}
# Frames lost on the link, and the neighbour table's work (printed, not counted as daemon errors).
LINK_LOSS = ("tx_no_buffer", "rx_dropped", "down_events", "reconnects", "burst_faults", "frames_lost_in_fault",
             "pmd_ierrors", "pmd_oerrors", "pmd_imissed", "pmd_rx_nombuf")
NET_NOTE = ("resolve_started", "resolve_failed", "drop_other_mac", "drop_other_ip", "tx_no_buffer")
CLIENT_LIMIT = 90  # seconds any one client may run


class Proc:
    """A client, its output in files; killed by its PID if it overruns its deadline."""
    def __init__(self, tmp, name, args, limit=CLIENT_LIMIT):
        self.name, self.args = name, args
        self.out_path = os.path.join(tmp, name + ".out")
        with open(self.out_path, "w") as out:
            self.p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.deadline = time.monotonic() + limit
        self.killed = False   # by us, on purpose (a victim)
        self.overran = False
        self.note = ""

    def output(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def wait_for(self, text, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end and self.p.poll() is None:
            if text in self.output():
                return True
            time.sleep(0.05)
        return text in self.output()

    def sigkill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.killed = True

    def reap(self):
        """Waits up to the deadline; a process still running then is killed (by its PID)."""
        try:
            self.p.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.overran = True
            self.p.kill()
            self.p.wait()
        return self.p.returncode


def run_json(args, timeout=30):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    try:
        return json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        return None


class Soak:
    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.rng = random.Random(a.seed)
        self.n = 0
        self.failures = []   # client failures: (name, why, output tail)
        self.stats = {"churn": 0, "perf": 0, "pair": 0, "ud": 0, "victims": 0, "victim_phase": {}, "overran": 0,
                      "churn_rounds": []}
        self.daemons = {}

    def name(self, what):
        self.n += 1
        return f"{self.n:05d}-{what}"

    # ---- daemons ----
    def start_daemons(self):
        tag = str(os.getpid())
        for d, role, lcore, ip, mac in (("A", "server", "0", "198.18.0.1/24", "02:00:00:00:00:01"),
                                        ("B", "client", "1", "198.18.0.2/24", "02:00:00:00:00:02")):
            sock = os.path.join(self.tmp, d + ".sock")
            log = open(os.path.join(self.tmp, d + ".log"), "w")
            eal = daemonlib.memif_eal(self.tmp, role, lcore, tag)
            dm = daemonlib.Daemon(self.a.hcaemud, sock, eal, ip, mac, log=log)
            self.daemons[d] = dm
            # Ready once its port is attached too ('serving'): B's memif client then finds A listening.
            end = time.monotonic() + 30
            while time.monotonic() < end and "hcaemud: serving " not in self.log(d) and dm.p.poll() is None:
                time.sleep(0.05)
            if not dm.wait_ready() or "hcaemud: serving " not in self.log(d):
                print(f"daemon {d} did not start: rc {dm.stop()}\n{self.log(d)}")
                return False
        return True

    def log(self, d):
        with open(os.path.join(self.tmp, d + ".log"), errors="replace") as f:
            return f.read()

    def bad_log_lines(self, d):
        """Lines while serving (after 'serving', before 'stopping') other than the daemon's own
        start, client-gone and stop lines; after 'stopping', lines that say error or failure.
        What DPDK prints while the daemon starts comes before any client and is not counted."""
        bad, phase = [], "start"
        for line in self.log(d).splitlines():
            if line.startswith("hcaemud: serving "):
                phase = "serve"
            elif line.startswith("hcaemud: stopping"):
                phase = "stop"
            elif phase == "serve" and line.strip() and not LOG_OK.match(line):
                bad.append(line)
            elif phase == "stop" and re.search(r"error|fail|fatal|abort|sanitizer|assert", line, re.I):
                bad.append(line)
        return bad

    def dev(self, d):
        return f"unix:{self.daemons[d].sock}"

    # ---- samples ----
    def read(self, d):
        st = run_json([self.a.hcaemu, "stat", "--json", "--device", self.dev(d)])
        res = {}
        for k in KINDS:
            j = run_json([self.a.hcaemu, "res", "show", k, "--json", "--device", self.dev(d)])
            res[k] = None if j is None else len(j)
        return st, res

    def proc(self, d):
        pid = self.daemons[d].p.pid
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))

    def sample(self, d, base=None):
        """Once the daemon is idle again (only the sampler connected, nothing listed, its tables as
        at the start): RSS, fds, objects and counters. Waits at most 15 s for that."""
        end = time.monotonic() + 15
        while True:
            st, res = self.read(d)
            dm = (st or {}).get("daemon", {})
            idle = dm.get("clients_connected") == 1 and all(v == 0 for v in res.values()) and \
                (base is None or all(dm.get(g) == base["daemon"].get(g) for g in GAUGES))
            if idle or time.monotonic() > end:
                break
            time.sleep(0.2)
        # fds once the sampler's own connections are closed (each `hcaemu` above has exited)
        time.sleep(0.3)
        rss, fds = self.proc(d)
        fend = time.monotonic() + 3
        while base and fds != base["fds"] and time.monotonic() < fend:
            time.sleep(0.2)
            rss, fds = self.proc(d)
        return {"rss": rss, "fds": fds, "res": res, "daemon": dm, "device": (st or {}).get("device", {}),
                "net": (st or {}).get("net", {}), "link": (st or {}).get("link", {}), "idle": idle,
                "alive": self.daemons[d].p.poll() is None}

    def errors(self, s):
        return {k: s["daemon"].get(k, 0) for k in ERROR_COUNTERS if s["daemon"].get(k, 0)}

    def show(self, label, t, d, s):
        dm = s["daemon"]
        objs = " ".join(f"{k} {s['res'][k]}" for k in KINDS)
        gauges = " ".join(str(dm.get(g, "?")) for g in GAUGES)
        errs = self.errors(s)
        print(f"{label:5} {t:6.0f} s  {d}: rss {s['rss'] / 1024:6.1f} MiB  "
              f"malloc {dm.get('malloc_in_use', 0) / 1024:6.0f} KiB "
              f"(tables {dm.get('table_bytes', 0) / 1024:5.0f})  fds {s['fds']:3}  "
              f"listed: {objs}  device pd/mr/cq/qp/srq/ah: {gauges}  "
              f"clients {dm.get('clients_total', '?')} cleaned {dm.get('clients_cleaned', '?')} "
              f"objects_cleaned {dm.get('objects_cleaned', '?')}  errors {sum(errs.values())}"
              + (f" {errs}" if errs else ""), flush=True)

    # ---- clients ----
    def churn(self, d, rounds, limit=CLIENT_LIMIT):
        self.stats["churn"] += 1
        return Proc(self.tmp, self.name(f"churn{d}"), [self.a.node, "churn", self.daemons[d].sock, str(rounds)], limit)

    def perf_pair(self, test, sd, cd, args, oob=30):
        port = free_port()
        base = ["--oob-timeout", str(oob), "-p", str(port)] + args
        s = Proc(self.tmp, self.name(f"perf-{test}-srv{sd}"),
                 [self.a.hcaemu, "perf", test, "--device", self.dev(sd)] + base)
        s.wait_for("Waiting for client", 20)
        c = Proc(self.tmp, self.name(f"perf-{test}-cli{cd}"),
                 [self.a.hcaemu, "perf", test, "--device", self.dev(cd)] + base + ["127.0.0.1"])
        self.stats["perf"] += 1
        return s, c

    def node_pair(self, mode):
        d = os.path.join(self.tmp, self.name(mode + "dir"))
        os.mkdir(d)
        self.stats[mode] += 1
        return [Proc(self.tmp, self.name(f"{mode}-{r}"), [self.a.node, mode, self.daemons[dd].sock, d, r])
                for r, dd in (("a", "A"), ("b", "B"))]

    def phase_of(self, d, pid):
        """The victim's QP states on its daemon just before the kill: what it was in the middle of."""
        j = run_json([self.a.hcaemu, "res", "show", "qp", "--json", "--device", self.dev(d)], timeout=10) or []
        states = sorted(o.get("state", "?") for o in j if o.get("pid") == pid)
        return ("transfer (QP in RTS)" if "RTS" in states else
                f"connect (QP in {'/'.join(states)})" if states else "start (no QP yet: connecting, creating objects)")

    def wave(self, i):
        """One wave: a churn, a perf pair, a victim, every other wave a pair/ud; all reaped."""
        r = self.rng
        ordinary, victims, peers = [], [], []
        ordinary.append(self.churn(r.choice("AB"), r.randint(2, 6)))
        test = r.choice(sorted(PERF))
        sd, cd = r.choice((("A", "B"), ("B", "A")))
        s, c = self.perf_pair(test, sd, cd, PERF[test][0] + ["--check"])
        s.check, c.check = (test, "s"), (test, "c")
        ordinary += [s, c]
        if i % 2:
            ordinary += self.node_pair("pair" if i % 4 == 1 else "ud")
        kind = r.choice(("perf-client", "perf-server", "churn"))
        delay = r.uniform(0.05, 2.5)
        if kind == "churn":
            vd = r.choice("AB")
            v = self.churn(vd, 5000)  # ~10 ms a round: killed long before its last
            victims.append((v, vd))
        else:
            vt = r.choice(("write_bw", "send_bw", "read_bw", "write_lat"))
            sd, cd = r.choice((("A", "B"), ("B", "A")))
            # --oob-timeout 5: the survivor gives up on its vanished peer after 5 s without progress
            vs, vc = self.perf_pair(vt, sd, cd, ["-s", "4096", "-n", "5000000"], oob=5)
            if kind == "perf-client":
                victims.append((vc, cd))
                peers.append(vs)
            else:
                victims.append((vs, sd))
                peers.append(vc)
        time.sleep(delay)
        for v, vd in victims:
            phase = self.phase_of(vd, v.p.pid)
            if kind == "churn":
                self.stats["churn_rounds"].append(v.output().count(": ok"))
            v.sigkill()
            v.note = (f"{kind} SIGKILLed after {delay:.2f} s, mid-{phase}" if v.killed
                      else f"{kind}: exited before the kill")
            key = f"{kind} mid-{phase}" if v.killed else f"{kind} exited before the kill"
            self.stats["victim_phase"][key] = self.stats["victim_phase"].get(key, 0) + 1
            self.stats["victims"] += 1
        for p in ordinary + peers + [v for v, _ in victims]:
            p.reap()
            if p.overran:
                self.stats["overran"] += 1
        for p in ordinary:
            self.judge(p)
        for p in peers + [v for v, _ in victims]:
            if p.overran:
                self.failures.append((p.name, f"overran its {CLIENT_LIMIT} s deadline ({p.note})", p.output()[-1500:]))

    def judge(self, p):
        out = p.output()
        why = None
        if p.overran:
            why = f"overran its {CLIENT_LIMIT} s deadline"
        elif p.p.returncode != 0:
            why = f"exit {p.p.returncode}"
        elif "churn" in p.name and "churn: exiting with the objects of round" not in out:
            why = "no final churn line"
        elif hasattr(p, "check"):
            test, side = p.check
            if side in PERF[test][1] and out.count("data check: ok") < 1:
                why = "no 'data check: ok'"
        elif re.search(r"-(pair|ud)-", p.name) and "OK " not in out:
            why = "no OK line"
        if why:
            self.failures.append((p.name, why, out[-1500:]))

    # ---- the run ----
    def run(self):
        if not self.start_daemons():
            return 1
        t0 = time.monotonic()
        print(f"soak: two hcaemud over net_memif (A pid {self.daemons['A'].p.pid}, B pid {self.daemons['B'].p.pid}), "
              f"{self.a.seconds} s, seed {self.a.seed}", flush=True)
        self.wave(0)  # warm-up: every pool and table touched once before the start sample
        base = {d: self.sample(d) for d in self.daemons}
        for d in sorted(base):
            self.show("start", time.monotonic() - t0, d, base[d])
        start = time.monotonic()
        last = start
        samples = {d: [base[d]] for d in base}
        waves = 0
        dead = False
        while time.monotonic() - start < self.a.seconds and not dead:
            waves += 1
            self.wave(waves)
            dead = any(dm.p.poll() is not None for dm in self.daemons.values())
            if time.monotonic() - last >= self.a.sample_every and not dead:
                last = time.monotonic()
                for d in sorted(base):
                    s = self.sample(d, base[d])
                    samples[d].append(s)
                    self.show("", last - t0, d, s)
        end = {}
        for d in sorted(base):
            if self.daemons[d].p.poll() is None:
                end[d] = self.sample(d, base[d])
                self.show("end", time.monotonic() - t0, d, end[d])
        # B (the memif client) first: stopped after A, its port would try to reconnect to A and say so.
        rcs = {d: self.daemons[d].stop() for d in ("B", "A")}
        return self.verdict(base, end, samples, rcs, waves, time.monotonic() - start)

    def report(self, d, b, e, samples, drift):
        """One daemon's start and end figures; what is not flat goes into drift."""
        kib = lambda s, k: s["daemon"].get(k, 0) / 1024  # noqa: E731
        tables = kib(e, "table_bytes") - kib(b, "table_bytes")
        heap = kib(e, "malloc_in_use") - kib(b, "malloc_in_use") - tables
        rss = (e["rss"] - b["rss"]) - tables
        slack = max(self.a.rss_slack_mib * 1024, b["rss"] * self.a.rss_slack_pct / 100)
        peak = max(s["rss"] for s in samples + [e])
        if rss > slack:
            drift.append(f"RSS grew {rss / 1024:.1f} MiB beside the tables' (> {slack / 1024:.1f} MiB)")
        if heap > self.a.heap_slack_kib:
            drift.append(f"malloc in use grew {heap:.0f} KiB beside the tables' (> {self.a.heap_slack_kib:.0f} KiB)")
        bad = [s for s in samples[1:] + [e] if s["fds"] != b["fds"]]
        if bad:
            drift.append(f"fds {[s['fds'] for s in bad]} != {b['fds']}")
        bad = [s for s in samples[1:] + [e] if not s["idle"] or s["res"] != b["res"]]
        if bad:
            drift.append("objects not back to the start's: " +
                         "; ".join(f"{s['res']} {[s['daemon'].get(g) for g in GAUGES]}" for s in bad))
        dev = e["device"]
        print(f"{d}: RSS {b['rss'] / 1024:.1f} -> {e['rss'] / 1024:.1f} MiB (peak of the samples {peak / 1024:.1f}); "
              f"malloc in use {kib(b, 'malloc_in_use'):.0f} -> {kib(e, 'malloc_in_use'):.0f} KiB, of which the "
              f"device tables' slots {kib(b, 'table_bytes'):.0f} -> {kib(e, 'table_bytes'):.0f} KiB: beside them "
              f"RSS {rss / 1024:+.1f} MiB (slack {slack / 1024:.1f}), malloc {heap:+.0f} KiB (slack "
              f"{self.a.heap_slack_kib:.0f}); fds {b['fds']} -> {e['fds']}; objects listed "
              f"{sum(b['res'].values())} -> {sum(e['res'].values())}, device tables "
              f"{[b['daemon'].get(g) for g in GAUGES]} -> {[e['daemon'].get(g) for g in GAUGES]}; clients "
              f"{e['daemon'].get('clients_total')}, cleaned {e['daemon'].get('clients_cleaned')} "
              f"({e['daemon'].get('objects_cleaned')} objects); requests {e['daemon'].get('requests')}; device: "
              f"sent_pkts {dev.get('sent_pkts')} rcvd_pkts {dev.get('rcvd_pkts')} "
              f"retry_exceeded_err {dev.get('retry_exceeded_err')}", flush=True)
        lost = {k: v for k, v in e["link"].items() if v and k in LINK_LOSS}
        lost.update({k: v for k, v in e["net"].items() if v and k in NET_NOTE})
        print(f"{d}: link and neighbour figures: {lost or 'none'}", flush=True)

    def verdict(self, base, end, samples, rcs, waves, secs):
        st = self.stats
        print(f"\n{waves} waves in {secs:.0f} s: {st['churn']} churn clients, {st['perf']} perf pairs, "
              f"{st['pair']} pair and {st['ud']} ud pairs, {st['victims']} victims "
              f"({', '.join(f'{v} {k}' for k, v in sorted(st['victim_phase'].items()))}), "
              f"{st['overran']} clients killed at their deadline", flush=True)
        if st["churn_rounds"]:
            print(f"churn victims killed after {min(st['churn_rounds'])} to {max(st['churn_rounds'])} rounds")
        flat = True
        for d in sorted(base):
            b, e = base[d], end.get(d)
            drift, errors = [], []  # not flat; daemon errors
            if e is None:
                errors.append(f"died during the soak: {self.daemons[d].p.returncode}")
            else:
                self.report(d, b, e, samples[d], drift)
                errs = self.errors(e)
                if errs:
                    errors.append(f"error counters {errs}")
            if rcs[d] != 0:
                errors.append(f"exit status {rcs[d]} after SIGTERM")
            log = self.bad_log_lines(d)
            if log:
                errors.append(f"{len(log)} log line(s): " + " | ".join(log[:10]))
            print(f"{d}: {'flat' if not drift else 'NOT flat: ' + '; '.join(drift)}; "
                  f"daemon errors: {'; '.join(errors) if errors else 0}", flush=True)
            flat = flat and not drift and not errors
        for name, why, out in self.failures:
            print(f"client failure: {name}: {why}\n{out}", flush=True)
        print(f"client failures: {len(self.failures)}")
        flat = flat and not self.failures
        print("verdict: " + ("flat" if flat else "NOT flat"))
        return 0 if flat else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--node", required=True, help="tests/daemon_node")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-every", type=float, default=60)
    ap.add_argument("--rss-slack-mib", type=float, default=4)
    ap.add_argument("--heap-slack-kib", type=float, default=256)
    ap.add_argument("--rss-slack-pct", type=float, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hcaemu-soak-") as tmp:
        s = Soak(a, tmp)
        try:
            return s.run()
        finally:
            for dm in s.daemons.values():
                if dm.p.poll() is None:
                    dm.p.kill()
                    dm.p.wait()


if __name__ == "__main__":
    sys.exit(main())
