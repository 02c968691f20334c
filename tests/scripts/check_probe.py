#!/usr/bin/python3
"""The peer behaviour report (scripts/probe.py, docs/probe.md) against hcaemu's own `hcaemu
pingpong` server over net_memif: every scenario runs, the report's measurements are the ones the
spec asks of a peer (the NAK names the lost PSN, the restart is at the NAK's PSN, the RNR timer and
the transport timer are waited out, retry_cnt 7 means 7 retries, a ghost ACK and an unexpected
opcode are ignored), the peer
has no violation, the prober's forged frames are named as its own, and REPORT.md, REPORT.json and
one ladder SVG per scenario are written.

usage: check_probe.py --hcaemu HCAEMU"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402
from proclib import expect, memif  # noqa: E402

ROOT_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")
sys.path.insert(0, ROOT_SCRIPTS)
import probe  # noqa: E402  (scripts/probe.py: its pcap reader)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hcaemu-probe-") as tmp:
        sock = os.path.join(tmp, "m.sock")
        # The peer writes its own capture too ({name}: the scenario): its tx stamps are its send times.
        srv = (f"{a.hcaemu} pingpong -p {{port}} -s 4096 -n 5 -g 1 -c --timeout 20 --pcap {tmp}/peer-{{name}}.pcap "
               f"--eal '{proclib.eal(0, memif('server', sock), mem=256)}' --ip 198.18.0.1/24 --mac 52:54:00:18:00:01")
        att = f"--eal '{proclib.eal(1, memif('client', sock), mem=256)}' --ip 198.18.0.2/24 --mac 52:54:00:18:00:02"
        out = os.path.join(tmp, "out")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "probe.py"), "--hcaemu", a.hcaemu,
                            "--attach", att, "--peer", "127.0.0.1", "--out", out, "--server-cmd", srv],
                           capture_output=True, text=True, timeout=280)
        expect("probe: exit 0", r.returncode == 0, r.stdout + r.stderr)
        try:
            rep = json.load(open(os.path.join(out, "REPORT.json")))
        except (OSError, ValueError) as e:
            expect("probe: REPORT.json", False, str(e))
            return proclib.report()
        sc = {s["name"]: s for s in rep["scenarios"]}
        expect("probe: all 9 scenarios", len(sc) == 9, list(sc))
        for n, s in sc.items():
            # retry_exhaust ends in an error on both sides by design (checked below)
            ok_exit = n == "retry_exhaust" or (s["prober_exit"] == 0 and s["peer_exit"] == 0)
            expect(f"{n}: both ends exit 0, no violation by the peer, a ladder",
                   ok_exit and not s["violations"] and s["ladder"]
                   and os.path.getsize(os.path.join(out, s["ladder"])) > 1000, s)
        m = {n: s["measurement"] for n, s in sc.items()}
        lr = m["lost_request"]
        expect("lost_request: the peer NAKs the lost PSN", lr.get("lost_psn") is not None
               and lr.get("nak_psn") == lr.get("lost_psn") and (lr.get("nak_latency_us") or -1) >= 0, lr)
        expect("lost_response: our retransmission answered", m["lost_response"].get("duplicate_answered") is True,
               m["lost_response"])
        expect("nak_retransmit: the peer restarts at the NAK's PSN",
               m["nak_retransmit"].get("restart_psn") == m["nak_retransmit"].get("answered_psn") is not None,
               m["nak_retransmit"])
        expect("rnr: the peer waits at least the RNR timer (1280 us)",
               m["rnr"].get("retransmission_latency_us", 0) >= 1280
               and m["rnr"].get("restart_psn") == m["rnr"].get("answered_psn"),
               sc["rnr"])
        # The prober's stamps are its receive times: on a loaded machine the first transmission may
        # be stamped tens of ms late (a prober descheduled), so the timer is judged on the peer's
        # own capture (its send times): the retransmission of the restart PSN at least the timeout
        # (67108.9 us; 1% for the capture stamp taken after the timer was armed) after the first.
        t = m["timeout"]
        peer_tx = [f for f in probe.frames(os.path.join(tmp, "peer-timeout.pcap"))
                   if f["src"] == "198.18.0.1" and f["psn"] == t.get("restart_psn") and f["op"] != probe.ACK]
        gap_us = (peer_tx[1]["ts"] - peer_tx[0]["ts"]) * 1e6 if len(peer_tx) >= 2 else -1
        expect("timeout: the peer retransmits from its oldest unacknowledged PSN, after its transport timer "
               "(67108.9 us, from its own capture)",
               t.get("configured_timeout_us") == 67108.9 and t.get("retransmission_latency_us", 0) > 0
               and t.get("restart_psn") == t.get("oldest_unacked_psn") and len(peer_tx) == 2
               and gap_us >= 0.99 * 67108.9, (sc["timeout"], gap_us, len(peer_tx)))
        # Every ACK withheld: hcaemu retries its SEND retry_cnt (7) times, then completes it with
        # RETRY_EXC_ERR and its pingpong fails; the prober gives up after 4 s without a completion.
        r = m["retry_exhaust"]
        expect("retry_exhaust: the peer retries exactly 7 times, then stops (its pingpong fails)",
               r.get("retransmissions") == 7 and r.get("still_retrying_at_end") is False and r["verdict"] == "ok"
               and sc["retry_exhaust"]["peer_exit"] not in (0, None) and sc["retry_exhaust"]["prober_exit"] != 0
               and any("retry" in x.lower() for x in sc["retry_exhaust"]["peer_output"]), sc["retry_exhaust"])
        # The same capture judged for retry_cnt 6: the peer's 7th retry is one too many, named once,
        # at that frame. The prober's ACKs are in its capture (taken above injection) but were
        # withheld: hcaemu conform skips the frames the notes say were not sent.
        pc = os.path.join(out, "retry_exhaust.pcap")
        cr = subprocess.run([a.hcaemu, "conform", "--json", "--retry-cnt", "6", pc], capture_output=True, text=True,
                            timeout=60)
        vs = [json.loads(x) for x in cr.stdout.splitlines() if x.startswith("{") and '"rule"' in x]
        sent = [f for f in probe.frames(pc) if f["src"] == "198.18.0.1" and f["psn"] == r.get("psn")
                and f["op"] != probe.ACK]
        expect("retry_exhaust: judged for retry_cnt 6, one retx.count at the peer's 7th retry of its PSN",
               cr.returncode == 1 and len(sent) == 8 and len(vs) == 1 and vs[0]["rule"] == "retx.count"
               and vs[0]["src"] == "198.18.0.1" and vs[0]["psn"] == r.get("psn") and vs[0]["frame"] == sent[7]["n"],
               (cr.stdout, [f["n"] for f in sent]))
        cr = subprocess.run([a.hcaemu, "conform", "--json", pc], capture_output=True, text=True, timeout=60)
        expect("retry_exhaust: for retry_cnt 7 (as configured) nothing", cr.returncode == 0, cr.stdout)
        g = m["ghost_ack"]
        expect("ghost_ack: our ACK replaced by a ghost; the peer ignores it and sends the request again",
               g.get("unacked_request_resent") is True
               and g.get("ghost_psn") == ((g.get("replaced_ack_psn") or 0) + 4096) & 0xFFFFFF
               and g["verdict"] == "ok: ignored", g)
        for n in ("ghost_ack", "unexpected_opcode"):
            expect(f"{n}: ignored; the forged frame is named as the prober's",
                   m[n]["peer_naks"] == 0 and m[n]["forged_frames"] == 1 and len(sc[n]["ours"]) == 1, sc[n])
        expect("ghost_ack: the prober's ghost is resp.unsolicited", sc["ghost_ack"]["ours"][0]["rule"] == "resp.unsolicited",
               sc["ghost_ack"]["ours"])
        expect("unexpected_opcode: the prober's forged frame is resp.opcode",
               sc["unexpected_opcode"]["ours"][0]["rule"] == "resp.opcode", sc["unexpected_opcode"]["ours"])
        # hcaemu is a DCQCN notification point (docs/dcqcn.md): CNPs to the one QP, at most one per
        # mark (one per 50 us per QP; capture stamps are per burst, so the interval is not judged).
        c = m["cnp_on_ce"]
        expect("cnp_on_ce: 20 requests marked; the peer answers with CNPs to that QP, at most one per mark",
               c["ce_marked"] == 20 and 1 <= c["cnps"] <= 20 and len(c["cnp_qps"]) == 1 and c["verdict"] == "ok", c)
        md = open(os.path.join(out, "REPORT.md")).read()
        expect("probe: REPORT.md has a section and a ladder per scenario",
               all(f"## {n}" in md and f"![{n}]({n}.svg)" in md for n in sc), md[:2000])
    return proclib.report()


if __name__ == "__main__":
    sys.exit(main())
