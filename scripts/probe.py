#!/usr/bin/python3
"""Peer behaviour report (issue 15): a plan of scenarios run against a peer HCA that serves
ibv_rc_pingpong (Linux rxe, a hardware HCA, or hcaemu's own `hcaemu pingpong`). Each scenario is
one `hcaemu pingpong` client run with one event injection rule (docs/inject.md) and a capture; a
measurement read from the capture; the conformance monitor's violations (`hcaemu conform`); and a
ladder diagram (`hcaemu ladder`). The report is Markdown (REPORT.md) and JSON (REPORT.json) with
one SVG per scenario, in --out DIR.

The peer (the device under test) is started per scenario by --server-cmd (a shell command; {port}
is replaced by the TCP port, {name} by the scenario's name; its output goes to NAME.peer.log, and
when it outlives the prober by --server-wait seconds it gets SIGTERM, then SIGKILL), or is already
listening (--peer-port, then it must serve one run per scenario, as `ibv_rc_pingpong` restarted by
a loop does).

usage: probe.py --hcaemu HCAEMU --attach "ATTACH OPTIONS" --peer HOST --out DIR
                [--server-cmd CMD [--server-wait S]] [--size N] [--iters N] [--only NAME,...]"""
import argparse
import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time

ACK, RC_SEND_MAX, CNP = 0x11, 0x05, 0x81
TIMEOUT_CODE = 14  # the QP timeout ibv_rc_pingpong and hcaemu pingpong set: 4.096 us * 2^14
RETRY_CNT = 7      # the retry_cnt both set (IBTA 9.7: that many retries, then an error)
RNR_TIMER = 14     # the RNR NAK timer code forged: 1.28 ms (IBTA table 45)


def rnr_us(code):
    t = [655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120,
         7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520]
    return t[code]


# name, the injection rule (the prober's side), what it asks of the peer
SCENARIOS = [
    ("lost_request", "drop dir=tx op=send nth=2",
     "one request packet lost on the way to the peer: the peer NAKs the gap (PSN sequence error) at the next packet"),
    ("lost_response", "drop dir=rx op=ack nth=1",
     "one ACK of the peer lost: the peer answers the retransmitted (duplicate) request again"),
    ("nak_retransmit", "nak-seq dir=tx op=ack",
     "the peer's request answered by a NAK sequence error: it goes back to the NAK's PSN"),
    ("timeout", "ack-withhold dir=tx op=ack",
     "the ACK for the peer's request withheld: it retransmits after its transport timer"),
    ("rnr", f"rnr dir=tx op=ack timer={RNR_TIMER}",
     f"the peer's request answered by an RNR NAK (timer {RNR_TIMER}: {rnr_us(RNR_TIMER)} us): it waits, then resends"),
    ("retry_exhaust", "ack-withhold dir=tx op=ack count=all",
     f"every ACK for the peer's requests withheld: it retries retry_cnt ({RETRY_CNT}) times, then completes in error"),
    ("ghost_ack", "ghost-ack dir=tx op=ack mode=replace",
     "the ACK for the peer's request replaced by an ACK for a PSN it never sent (+4096): the peer ignores "
     "it, so its request stays unacknowledged and goes again after its timer"),
    ("unexpected_opcode", "unexpected-op dir=tx op=ack",
     "a READ response Only for a PSN of the peer's SEND: the peer does not take it as data"),
    ("cnp_on_ce", "ecn dir=tx op=send count=all",
     "every request to the peer marked ECN CE: the peer, as a DCQCN notification point, sends CNPs"),
]
# Scenarios that end in an error by design: the prober gives up after `timeout` s without a
# completion, the peer is stopped `server_wait` s after it.
# ladder_frames: the diagram's frames (the whole capture would be hundreds of retries).
SCENARIO_LIMITS = {"retry_exhaust": dict(timeout=4, server_wait=3, ladder_frames="1-120")}


def frames(path):
    """RoCE v2 frames of a classic pcap (IPv4): dicts n, ts (s), src, op, qp, psn, syn, len."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return out
    nano = struct.unpack_from("<I", data)[0] == 0xA1B23C4D
    off, n = 24, 0
    while off + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, off)
        p = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        n += 1
        if len(p) < 54 or p[12:14] != b"\x08\x00" or p[23] != 17 or struct.unpack_from(">H", p, 36)[0] != 4791:
            continue
        op = p[42]
        out.append(dict(n=n, ts=sec + frac * (1e-9 if nano else 1e-6), src=socket.inet_ntoa(p[26:30]), op=op,
                        qp=int.from_bytes(p[47:50], "big"), psn=int.from_bytes(p[51:54], "big"),
                        ecn=p[15] & 3, syn=p[54] if op in (ACK, 0x12, 0x0D, 0x0F, 0x10) and len(p) > 58 else None))
    return out


LATE = "capture: stamped up to "  # the capture's note on a received frame (PcapWriter::note_late)


def notes(path):
    """The injection's notes by frame; and by frame, how much earlier than its stamp a received
    frame may have arrived (ns; the capture stamps a frame when its poll returns)."""
    inj, late = {}, {}
    try:
        with open(path + ".notes") as f:
            for line in f:
                n, text = line.rstrip("\n").split("\t", 1)
                if text.startswith(LATE):
                    late[int(n)] = int(text[len(LATE):].split()[0])
                else:
                    inj[int(n)] = inj[int(n)] + "; " + text if int(n) in inj else text
    except FileNotFoundError:
        pass
    return inj, late


def psn_after(a, b):
    return ((a - b) & 0xFFFFFF) not in (0,) and ((a - b) & 0xFFFFFF) < (1 << 23)


def oldest_unacked(peer_req, mine, nt, before_n):
    """The first PSN the peer sent before frame `before_n` past the last ACK of ours it got."""
    acked = [f["psn"] for f in mine if f["op"] == ACK and f["n"] < before_n and f["n"] not in nt
             and f["syn"] is not None and (f["syn"] & 0x60) == 0]
    for f in peer_req:
        if f["n"] < before_n and (not acked or psn_after(f["psn"], acked[-1])):
            return f["psn"]
    return None


def restart_verdict(name, restart, h, m):
    if not restart:
        return "no retransmission"
    if name == "rnr" and m["retransmission_latency_us"] < rnr_us(RNR_TIMER):
        return "RNR timer not waited"
    if name in ("nak_retransmit", "rnr") and restart["psn"] != h["psn"]:
        where = "its oldest unacknowledged PSN" if restart["psn"] == m["oldest_unacked_psn"] else "PSN"
        return f"restart at {where} {restart['psn']}, not at the NAK's PSN {h['psn']}"
    if name == "timeout" and restart["psn"] != m["oldest_unacked_psn"]:
        return f"restart at PSN {restart['psn']}, not at the oldest unacknowledged {m['oldest_unacked_psn']}"
    return "ok"


def measure(name, fr, nt, me):
    """The scenario's measurement, from the prober's capture. `me`: the prober's IP."""
    peer = [f for f in fr if f["src"] != me]
    mine = [f for f in fr if f["src"] == me]
    peer_req = [f for f in peer if f["op"] <= RC_SEND_MAX]
    touched = sorted(nt)
    m = {}
    if name == "lost_request":
        lost = [f for f in mine if f["n"] in nt and "dropped" in nt[f["n"]]]
        naks = [f for f in peer if f["op"] == ACK and f["syn"] is not None and (f["syn"] & 0x60) == 0x60]
        m["lost_psn"] = lost[0]["psn"] if lost else None
        m["nak_psn"] = naks[0]["psn"] if naks else None
        if lost and naks:
            nxt = [f for f in mine if f["n"] > lost[0]["n"] and f["op"] <= RC_SEND_MAX]
            if nxt:
                m["nak_latency_us"] = round((naks[0]["ts"] - nxt[0]["ts"]) * 1e6, 1)
        resent = [f for f in mine if lost and f["n"] > lost[0]["n"] and f["psn"] == lost[0]["psn"]]
        m["resent_from_lost_psn"] = bool(resent)
        m["verdict"] = "ok" if lost and naks and naks[0]["psn"] == lost[0]["psn"] else "no NAK for the lost PSN"
    elif name in ("nak_retransmit", "timeout", "rnr", "lost_response"):
        # The frame our injection touched (a response replaced or withheld, or one received dropped).
        hit = [f for f in fr if f["n"] in nt]
        m["injected_frame"] = hit[0]["n"] if hit else None
        if hit:
            h = hit[0]
            before = [f for f in peer_req if f["n"] < h["n"]]
            if name == "lost_response":
                # Our requester resends; the peer must answer the duplicate.
                dup = None
                sent = set()
                for f in mine:
                    if f["op"] <= RC_SEND_MAX:
                        if f["psn"] in sent and f["n"] > h["n"]:
                            dup = f
                            break
                        sent.add(f["psn"])
                m["our_retransmission"] = dup["psn"] if dup else None
                if dup:
                    ans = [f for f in peer if f["n"] > dup["n"] and f["op"] == ACK]
                    m["duplicate_answered"] = bool(ans)
                    if ans:
                        m["duplicate_ack_latency_us"] = round((ans[0]["ts"] - dup["ts"]) * 1e6, 1)
                m["verdict"] = "ok" if not dup or m.get("duplicate_answered") else "duplicate not answered"
            else:
                # The peer's first PSN sent again after our injected answer (from PSN seen before).
                restart = None
                for f in peer_req:
                    if f["n"] > h["n"] and any(b["psn"] == f["psn"] for b in before):
                        restart = f
                        break
                m["restart_psn"] = restart["psn"] if restart else None
                m["answered_psn"] = h["psn"]
                # The oldest PSN of the peer's not acknowledged by an ACK that reached it: where a
                # timeout restarts (a NAK's PSN acknowledges the PSNs before it, so a NAK moves it).
                m["oldest_unacked_psn"] = oldest_unacked(peer_req, mine, nt, h["n"])
                if restart:
                    lat = restart["ts"] - h["ts"]
                    if name == "timeout":
                        last = [f for f in before if f["psn"] == restart["psn"]]
                        lat = restart["ts"] - (last[-1]["ts"] if last else h["ts"])
                        m["configured_timeout_us"] = round(4.096 * 2 ** TIMEOUT_CODE, 1)
                    m["retransmission_latency_us"] = round(lat * 1e6, 1)
                    if name == "rnr":
                        m["rnr_timer_us"] = rnr_us(RNR_TIMER)
                m["verdict"] = restart_verdict(name, restart, h, m)
    elif name == "retry_exhaust":
        # The peer's request PSN sent most often (its first such): every transmission after the first
        # is a retry; with every ACK withheld a conforming peer stops after retry_cnt of them.
        tx = {}
        for f in peer_req:
            tx.setdefault(f["psn"], []).append(f)
        m["withheld_acks"] = len(touched)
        m["retry_cnt"] = RETRY_CNT
        if tx:
            psn, sent = max(tx.items(), key=lambda kv: (len(kv[1]), -kv[1][0]["n"]))
            m["psn"] = psn
            m["retransmissions"] = len(sent) - 1
            if len(sent) > 1:
                gaps = [b["ts"] - a["ts"] for a, b in zip(sent, sent[1:])]
                m["min_interval_us"] = round(min(gaps) * 1e6, 1)
                m["mean_interval_us"] = round(sum(gaps) / len(gaps) * 1e6, 1)
                m["retrying_for_s"] = round(sent[-1]["ts"] - sent[0]["ts"], 3)
            # Still retrying when the prober gave up (`timeout` s after its last completion, about
            # when the first transmission came): a peer that stops after retry_cnt retries of a
            # 67 ms timer is done within a second.
            m["still_retrying_at_end"] = (len(sent) > 1 and sent[-1]["ts"] - sent[0]["ts"]
                                          >= SCENARIO_LIMITS[name]["timeout"] - 1)
            n = m["retransmissions"]
            m["verdict"] = ("ok" if n == RETRY_CNT and not m["still_retrying_at_end"] else
                            f"{n} retries, still retrying when the prober stopped: retry_cnt {RETRY_CNT} taken as "
                            "infinite" if n > RETRY_CNT and m["still_retrying_at_end"] else
                            f"{n} retries for retry_cnt {RETRY_CNT}")
        else:
            m["verdict"] = "no request from the peer"
    elif name == "ghost_ack":
        # Our ACK replaced by a ghost: the peer's request stays unacknowledged and must go again.
        orig = [f for f in mine if f["n"] in nt and "replaced" in nt[f["n"]]]
        ghost = [f for f in mine if f["n"] in nt and "forged" in nt[f["n"]] and "replaced" not in nt[f["n"]]]
        m["forged_frames"] = len(ghost)
        m["peer_naks"] = sum(1 for f in peer if f["op"] == ACK and f["syn"] is not None and (f["syn"] & 0x60) == 0x60)
        if orig and ghost:
            h = orig[0]
            m["replaced_ack_psn"], m["ghost_psn"] = h["psn"], ghost[0]["psn"]
            before = {f["psn"] for f in peer_req if f["n"] < h["n"]}
            again = [f for f in peer_req if f["n"] > h["n"] and f["psn"] in before]
            m["unacked_request_resent"] = bool(again)
            if again:
                m["resent_psn"] = again[0]["psn"]
                m["retransmission_latency_us"] = round((again[0]["ts"] - h["ts"]) * 1e6, 1)
            m["verdict"] = ("ok: ignored" if again else
                            f"the ghost ACK taken as acknowledging PSN {h['psn']}: never sent again")
        else:
            m["verdict"] = "no ACK replaced"
    elif name == "unexpected_opcode":
        m["forged_frames"] = len(touched)
        m["peer_naks"] = sum(1 for f in peer if f["op"] == ACK and f["syn"] is not None and (f["syn"] & 0x60) == 0x60)
        m["verdict"] = "ok: ignored" if m["peer_naks"] == 0 else "the peer NAKed"
    elif name == "cnp_on_ce":
        ce = [f for f in mine if f["n"] in nt]
        cnps = [f for f in peer if f["op"] == CNP]
        m["ce_marked"] = len(ce)
        m["cnps"] = len(cnps)
        m["cnp_qps"] = sorted({f["qp"] for f in cnps})
        if len(cnps) > 1:
            m["min_cnp_interval_us"] = round(min(b["ts"] - a["ts"] for a, b in zip(cnps, cnps[1:])) * 1e6, 1)
            # the longest that closest pair can have been apart: the capture stamps when it polls
            m["min_cnp_interval_bound_us"] = round(min(b["ts"] - a["ts"] + a["late"] for a, b in zip(cnps, cnps[1:])) * 1e6, 1)
        m["verdict"] = "ok" if cnps else "no CNP (the peer is not a DCQCN notification point)"
    return m


def run_one(a, name, rule, out):
    lim = SCENARIO_LIMITS.get(name, {})
    pc = os.path.join(out, f"{name}.pcap")
    for p in (pc, pc + ".notes"):
        if os.path.exists(p):
            os.remove(p)
    port = a.peer_port or free_port()
    srv = None
    plog = os.path.join(out, f"{name}.peer.log")
    if a.server_cmd:
        with open(plog, "w") as lf:
            srv = subprocess.Popen(a.server_cmd.format(port=port, name=name), shell=True, stdout=lf,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(0.5)
    cli = ([a.hcaemu, "pingpong", "-p", str(port), "-s", str(a.size), "-n", str(a.iters), "-g", str(a.gid), "-c",
            "--timeout", str(lim.get("timeout", 20))]
           + shlex.split(a.attach) + ["--pcap", pc, "--inject", rule, a.peer])
    try:
        r = subprocess.run(cli, capture_output=True, text=True, timeout=60)
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        rc, err = -999, "timed out"
    srv_rc = None
    peer_out = []
    if srv:
        try:
            srv.wait(timeout=lim.get("server_wait", a.server_wait))
        except subprocess.TimeoutExpired:
            stop_session(srv)
        srv_rc = srv.returncode
        with open(plog, errors="replace") as lf:
            peer_out = [x.rstrip() for x in lf if x.strip()][-8:]
    fr = frames(pc) if os.path.exists(pc) else []
    nt, late = notes(pc)
    for f in fr:
        f["late"] = late.get(f["n"], 0) / 1e9
    me = a.attach.split("--ip")[1].split()[0].split("/")[0] if "--ip" in a.attach else ""
    conf = subprocess.run([a.hcaemu, "conform", "--json", "--retry-cnt", str(RETRY_CNT), pc], capture_output=True, text=True, timeout=60)
    lines = [json.loads(x) for x in conf.stdout.splitlines() if x.startswith("{")]
    viol = [x for x in lines if "rule" in x]
    svg = os.path.join(out, f"{name}.svg")
    # --summary: a message's packets as one arrow; lost, retransmitted and forged ones stay rows
    lad = [a.hcaemu, "ladder", pc, "-o", svg, "--summary"]
    if "ladder_frames" in lim:
        lad += ["--frames", lim["ladder_frames"]]
    subprocess.run(lad, capture_output=True, timeout=60)
    return dict(name=name, rule=rule, prober_exit=rc, peer_exit=srv_rc, prober_stderr=err.strip()[-400:],
                peer_output=peer_out,
                frames=len(fr), injected=[f"{k}: {v}" for k, v in sorted(nt.items())],
                measurement=measure(name, fr, nt, me),
                # The peer's violations; the prober's own (its forged frames) apart.
                violations=[vd(v) for v in viol if v["src"] != me],
                ours=[vd(v) for v in viol if v["src"] == me],
                capture=os.path.basename(pc), ladder=os.path.basename(svg) if os.path.exists(svg) else None)


def session_alive(sid):
    """Whether a process of session `sid` (our server command's, start_new_session) still runs."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(st[3]) == sid and st[0] != "Z":  # session id; not a zombie
                return True
    return False


def stop_session(srv, grace=30):
    """SIGTERM to the server command's session, then its end awaited: all of it, not only the shell
    (a wrapper may stop the peer elsewhere on SIGTERM, and the next scenario must not meet it);
    SIGKILL after `grace` seconds (guest-server.sh needs up to 25)."""
    os.killpg(srv.pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        srv.poll()
        if not session_alive(srv.pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(srv.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    srv.wait()


def vd(v):
    return dict(frame=v["frame"], rule=v["rule"], psn=v["psn"], qp=v["qp"], src=v["src"], message=v["message"],
                cite=v["cite"])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def markdown(results, a):
    lines = ["# Peer behaviour report", "",
             f"Peer: `{a.peer}`; prober: `hcaemu pingpong -s {a.size} -n {a.iters}` with one injection rule per "
             "scenario (docs/inject.md); violations from the conformance monitor (docs/conform.md).", "",
             "| scenario | rule | verdict | measurement | the peer's violations |", "|---|---|---|---|---|"]
    for r in results:
        m = {k: v for k, v in r["measurement"].items() if k != "verdict"}
        lines.append(f"| {r['name']} | `{r['rule']}` | {r['measurement'].get('verdict')} | "
                     f"{', '.join(f'{k}={v}' for k, v in m.items())} | {len(r['violations'])} |")
    for r in results:
        desc = next(d for n, _, d in SCENARIOS if n == r["name"])
        lines += ["", f"## {r['name']}", "", desc + ".", "",
                  f"Rule `{r['rule']}`; prober exit {r['prober_exit']}, peer exit {r['peer_exit']}; "
                  f"{r['frames']} RoCE v2 frames in `{r['capture']}`.", ""]
        for k, v in r["measurement"].items():
            lines.append(f"- {k}: {v}")
        if r["injected"]:
            inj = r["injected"]
            if len(inj) > 12:  # e.g. every ACK withheld: the first ones and a count
                inj = inj[:10] + [f"... {len(r['injected']) - 10} more"]
            lines += ["", "Injected:", ""] + [f"- {x}" for x in inj]
        if r.get("peer_output"):
            lines += ["", "The peer's output (last lines):", "", "```"] + r["peer_output"] + ["```"]
        for title, vs in (("The peer's violations", r["violations"]), ("The prober's own (injected)", r["ours"])):
            if title.startswith("The prober") and not vs:
                continue
            lines += ["", f"{title}:" if vs else f"{title}: none."]
            for v in vs:
                lines.append(f"- frame {v['frame']} from {v['src']} QP {v['qp']} PSN {v['psn']}: {v['message']} "
                             f"[{v['rule']}, {v['cite']}]")
        if r["ladder"]:
            lines += ["", f"![{r['name']}]({r['ladder']})"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--attach", required=True, help="the prober's attach options: --eal ... --ip A/N [--mac M]")
    ap.add_argument("--peer", required=True, help="the peer's host for the out-of-band TCP exchange")
    ap.add_argument("--peer-port", type=int, help="the peer's TCP port when it is already listening")
    ap.add_argument("--server-cmd", help="starts the peer per scenario; {port}: the TCP port")
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--gid", type=int, default=1)
    ap.add_argument("--only", help="scenario names, comma-separated")
    ap.add_argument("--server-wait", type=float, default=30,
                    help="seconds the peer may outlive the prober before it is stopped (default 30)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    want = set(a.only.split(",")) if a.only else None
    results = []
    for name, rule, _ in SCENARIOS:
        if want and name not in want:
            continue
        results.append(run_one(a, name, rule, a.out))
        print(f"{name}: {results[-1]['measurement'].get('verdict')}", flush=True)
    with open(os.path.join(a.out, "REPORT.json"), "w") as f:
        json.dump(dict(peer=a.peer, size=a.size, iters=a.iters, scenarios=results), f, indent=1)
    with open(os.path.join(a.out, "REPORT.md"), "w") as f:
        f.write(markdown(results, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
