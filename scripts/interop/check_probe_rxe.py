#!/usr/bin/python3
"""The peer behaviour report (scripts/probe.py) against Linux rxe, held to what rxe's code does
(drivers/infiniband/sw/rxe, Debian 12's kernel in run.sh's guest; docs/probe.md, the rxe example): the
report's structure, then each scenario's finding. Prints one `ok`/`FAIL` line per check; exit 1
on any FAIL.

usage: check_probe_rxe.py REPORT_DIR"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import probe  # noqa: E402  (scripts/probe.py: its pcap reader)

FAILS = []


def expect(what, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {what}" + ("" if cond else f": {detail}"))
    if not cond:
        FAILS.append(what)


PLAN = ["lost_request", "lost_response", "nak_retransmit", "timeout", "rnr", "retry_exhaust", "ghost_ack",
        "unexpected_opcode", "cnp_on_ce"]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    try:
        rep = json.load(open(os.path.join(out, "REPORT.json")))
        md = open(os.path.join(out, "REPORT.md")).read()
    except (OSError, ValueError) as e:
        expect("REPORT.json and REPORT.md readable", False, e)
        return 1
    sc = {s["name"]: s for s in rep.get("scenarios", [])}
    expect("the whole plan, in order", [s["name"] for s in rep["scenarios"]] == PLAN, list(sc))
    if set(sc) != set(PLAN):
        return 1
    for n, s in sc.items():
        expect(f"{n}: a verdict, frames captured, a ladder, a section in REPORT.md",
               s["measurement"].get("verdict") and s["frames"] > 0 and s["ladder"]
               and os.path.getsize(os.path.join(out, s["ladder"])) > 1000
               and f"## {n}" in md and f"![{n}]({n}.svg)" in md, s)
        if n != "retry_exhaust":
            expect(f"{n}: the prober and rxe's ibv_rc_pingpong both exit 0",
                   s["prober_exit"] == 0 and s["peer_exit"] == 0, (s["prober_exit"], s["peer_exit"], s["peer_output"]))
    for n, s in sc.items():
        print(f"info {n}: {s['measurement'].get('verdict')}; the peer's violations: "
              f"{sorted({v['rule'] for v in s['violations']}) or 'none'}")
    m = {n: s["measurement"] for n, s in sc.items()}

    # rxe_resp.c check_psn: a PSN past the expected one is NAKed (PSN sequence error) once per gap,
    # with the expected PSN (qp->resp.psn), i.e. the lost one.
    r = m["lost_request"]
    expect("lost_request: rxe NAKs with the lost PSN, the prober resends from it",
           r["lost_psn"] is not None and r["nak_psn"] == r["lost_psn"] and r["resent_from_lost_psn"]
           and r["verdict"] == "ok", r)
    # rxe_resp.c duplicate_request: a duplicate SEND is ACKed again (C9-105).
    r = m["lost_response"]
    expect("lost_response: rxe ACKs the prober's duplicate",
           r.get("duplicate_answered") is True and r["verdict"] == "ok", r)
    # rxe_comp.c: a NAK sequence error returns COMPST_ERROR_RETRY; the requester resends from
    # comp.psn, the NAK's PSN.
    r = m["nak_retransmit"]
    expect("nak_retransmit: rxe restarts at the NAK's PSN", r["restart_psn"] == r["answered_psn"] is not None
           and r["verdict"] == "ok", r)
    # rxe_qp.c: the timer is 4.096 us << timeout in jiffies (68 ms at 14, HZ 250); stamped at the
    # prober. Nothing of the message was acknowledged: rxe goes back to its first PSN.
    r = m["timeout"]
    expect("timeout: rxe resends from its oldest unacknowledged PSN after its transport timer "
           "(67.1 ms; half at least, as stamped)",
           r["restart_psn"] == r["oldest_unacked_psn"] is not None and r["retransmission_latency_us"] >= 0.5 * 67108.9
           and r["verdict"] == "ok", r)
    # The forged RNR NAK names the SEND's First PSN, where a responder out of receive WQEs stops
    # (IBTA 9.7.5.2.8; docs/inject.md): rxe's oldest unacknowledged PSN. rxe_comp.c check_ack sends
    # an RNR NAK to COMPST_RNR_RETRY: the RNR timer is max(usecs_to_jiffies(t), 1) jiffies from now:
    # at HZ 250 the 1.28 ms of code 14 is one tick, which ends 0 to 4 ms later, so the wait can also
    # be shorter than the timer (then the monitor names it, retx.rnr_timer, and the verdict says
    # so). The requester then resends from comp.psn: the NAK's PSN.
    r = m["rnr"]
    lat = r.get("retransmission_latency_us")
    expect("rnr: the RNR NAK names rxe's oldest unacknowledged PSN (the SEND's First); rxe resends from it",
           r["restart_psn"] == r["answered_psn"] == r["oldest_unacked_psn"] is not None, r)
    short = lat is not None and lat < 1280
    expect("rnr: the verdict names the wait measured ('ok' when the timer was waited out)",
           lat is not None and r["verdict"] == ("RNR timer not waited" if short else "ok"), r)
    expect("rnr: the conformance monitor names nothing, or the short wait only (retx.rnr_timer)",
           sorted({v["rule"] for v in sc["rnr"]["violations"]}) == (["retx.rnr_timer"] if short else []),
           sc["rnr"]["violations"])
    for n in PLAN:
        if n not in ("rnr", "retry_exhaust"):
            expect(f"{n}: no violation by rxe", not sc[n]["violations"], sc[n]["violations"])
    # rxe_comp.c COMPST_ERROR_RETRY: `if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`: retry_cnt 7
    # (ibv_rc_pingpong's) never runs out; IBTA allows 7 retries, then RETRY_EXC_ERR.
    r = m["retry_exhaust"]
    expect("retry_exhaust: rxe retries more than 7 times and still does when the prober gives up "
           "(retry_cnt 7 = infinite)",
           r.get("retransmissions", 0) > 7 and r.get("still_retrying_at_end") is True and "infinite" in r["verdict"], r)
    expect("retry_exhaust: rxe's pingpong never completed in error (stopped by the harness)",
           not any("Failed status" in x for x in sc["retry_exhaust"]["peer_output"]),
           sc["retry_exhaust"]["peer_output"])
    # The documented rxe deviation (docs/conform.md): the monitor names the 8th restart of the
    # retried PSN, once (retx.count, --retry-cnt 7), and nothing else.
    v = sc["retry_exhaust"]["violations"]
    pc = os.path.join(out, sc["retry_exhaust"]["capture"])
    sent = [f["n"] for f in probe.frames(pc) if f["psn"] == r.get("psn") and f["op"] <= probe.RC_SEND_MAX
            and f["src"] == rep.get("peer")] if os.path.exists(pc) else []
    expect("retry_exhaust: the conformance monitor names rxe's 8th retry, once (retx.count at the retried PSN, "
           "the frame of its 9th transmission)",
           [x["rule"] for x in v] == ["retx.count"] and v[0]["psn"] == r.get("psn")
           and len(sent) > 8 and v[0]["frame"] == sent[8], (v, sent[:10]))
    # rxe_comp.c check_psn: a response PSN past the oldest WQE's last PSN completes a pending SEND
    # (COMPST_COMP_WQE): a ghost ACK acknowledges it, which is then never sent again.
    r = m["ghost_ack"]
    expect("ghost_ack: rxe takes the ghost ACK (+4096) as acknowledging its SEND: no retransmission",
           r.get("ghost_psn") == ((r.get("replaced_ack_psn") or 0) + 4096) & 0xFFFFFF
           and r.get("unacked_request_resent") is False and r["verdict"].startswith("the ghost ACK taken"), r)
    expect("ghost_ack: the ghost is named as the prober's own violation (resp.unsolicited)",
           [v["rule"] for v in sc["ghost_ack"]["ours"]] == ["resp.unsolicited"], sc["ghost_ack"]["ours"])
    # After the ACK, rxe has no SEND outstanding: rxe_comp.c get_wqe drops the READ response.
    r = m["unexpected_opcode"]
    expect("unexpected_opcode: rxe ignores the READ response Only (no NAK, pingpong completes)",
           r["peer_naks"] == 0 and r["forged_frames"] == 1 and r["verdict"] == "ok: ignored", r)
    expect("unexpected_opcode: the forged frame is named as the prober's own violation (resp.opcode)",
           [v["rule"] for v in sc["unexpected_opcode"]["ours"]] == ["resp.opcode"], sc["unexpected_opcode"]["ours"])
    # rxe implements no DCQCN notification point: no CNP for CE-marked requests.
    r = m["cnp_on_ce"]
    expect("cnp_on_ce: 20 requests CE-marked, rxe sends no CNP", r["ce_marked"] == 20 and r["cnps"] == 0, r)
    print(f"{len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
