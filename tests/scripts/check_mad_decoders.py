#!/usr/bin/python3
"""Cross-check hcaemu's MAD dissector (packet/mad_dissect.cpp) against tshark's InfiniBand CM dissector.

mad_pcap (tests/mad_pcap.cpp) writes one RoCE v2 UD SEND Only to QP1 per CM attribute (ClassPortInfo,
REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) and the REQ again over IPv6. Then:
  - tshark -V decodes every frame with no malformed packet and no error-level expert finding;
  - `hcaemu dissect --strict` accepts the file (exit 0), and `--json` reports every MAD "ok";
  - field by field, the values tshark decodes equal hcaemu's: the MAD common header of every frame,
    and every CM field tshark 4.0 implements (REQ, REP, RTU, REJ, DREQ, DREP; it names ClassPortInfo,
    MRA and SIDR but does not decode them), with the REQ's RDMA CM header (IP version, source port,
    addresses) and the private data bytes;
  - `mad_pcap --malformed` (a reserved bit, header reserved bytes, LAP, an unknown attribute, class
    version 1, a REQ as Get, a wrong Q_Key, a short MAD): `hcaemu dissect --strict` exits 1 and
    flags every frame, its summary counts them all as bad GMPs.
  - `--real DIR`: captures of Linux's own CM (tests/data/cm_rxe: rping, a REJ for a port nobody
    listens on, ib_send_bw -R; the kernel's CM between two rxe guests): `hcaemu dissect --strict`
    accepts every MAD, and every field is cross-checked with tshark as above.
Exit 0 when everything agrees, 1 on any disagreement, 2 on usage.
"""
import argparse
import ipaddress
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proclib  # noqa: E402

HDR = [
    ("infiniband.mad.baseversion", "base_version"),
    ("infiniband.mad.mgmtclass", "mgmt_class"),
    ("infiniband.mad.classversion", "class_version"),
    ("infiniband.mad.method", "method"),
    ("infiniband.mad.status", "status"),
    ("infiniband.mad.classspecific", "class_specific"),
    ("infiniband.mad.transactionid", "tid"),
    ("infiniband.mad.attributeid", "attr_id"),
    ("infiniband.mad.attributemodifier", "attr_mod"),
]
PATH = ["locallid", "remotelid", "tfcclass", "hoplim", "sl", "subnetlocal", "localacktout"]
OURS_PATH = ["local_lid", "remote_lid", "traffic_class", "hop_limit", "sl", "subnet_local", "local_ack_timeout"]
# Not compared: the path Flow Label and Packet Rate. tshark 4.0 reads the Flow Label as the top 20
# bits of the 3 bytes at path byte 36 (not of the 4-byte word) and the Packet Rate from path byte 36
# (IBTA table 106 and Linux CM_REQ_PRIMARY_PACKET_RATE: byte 39 bits 5:0).
CM = {
    "REQ": [("infiniband.cm.req", "local_comm_id"), ("infiniband.cm.req.localcaguid", "local_ca_guid"),
            ("infiniband.cm.req.localqkey", "local_qkey"), ("infiniband.cm.req.localqpn", "local_qpn"),
            ("infiniband.cm.req.responderres", "responder_resources"), ("infiniband.cm.req.localeecn", "local_eecn"),
            ("infiniband.cm.req.initdepth", "initiator_depth"), ("infiniband.cm.req.remoteeecn", "remote_eecn"),
            ("infiniband.cm.req.remoteresptout", "remote_cm_response_timeout"),
            ("infiniband.cm.req.transpsvctype", "transport_service_type"),
            ("infiniband.cm.req.e2eflowctrl", "end_to_end_flow_control"),
            ("infiniband.cm.req.startpsn", "starting_psn"),
            ("infiniband.cm.req.localresptout", "local_cm_response_timeout"),
            ("infiniband.cm.req.retrcount", "retry_count"), ("infiniband.cm.req.pkey", "pkey"),
            ("infiniband.cm.req.pppmtu", "path_mtu"), ("infiniband.cm.req.rdcexist", "rdc_exists"),
            ("infiniband.cm.req.rnrretrcount", "rnr_retry_count"), ("infiniband.cm.req.maxcmretr", "max_cm_retries"),
            ("infiniband.cm.req.srq", "srq"), ("infiniband.cm.req.ext_transport", "extended_transport_type")]
           + [(f"infiniband.cm.req.prim_{t}", f"primary_{o}") for t, o in zip(PATH, OURS_PATH)]
           + [(f"infiniband.cm.req.alt_{t}", f"alternate_{o}") for t, o in zip(PATH, OURS_PATH)],
    "REP": [("infiniband.cm.rep", "local_comm_id"), ("infiniband.cm.rep.remotecommid", "remote_comm_id"),
            ("infiniband.cm.rep.localqkey", "local_qkey"), ("infiniband.cm.rep.localqpn", "local_qpn"),
            ("infiniband.cm.rep.localeecn", "local_eecn"), ("infiniband.cm.rep.startpsn", "starting_psn"),
            ("infiniband.cm.rep.respres", "responder_resources"), ("infiniband.cm.rep.initdepth", "initiator_depth"),
            ("infiniband.cm.rep.tgtackdelay", "target_ack_delay"), ("infiniband.cm.rep.failoveracc", "failover_accepted"),
            ("infiniband.cm.rep.e2eflowctrl", "end_to_end_flow_control"),
            ("infiniband.cm.rep.rnrretrcount", "rnr_retry_count"), ("infiniband.cm.rep.srq", "srq"),
            ("infiniband.cm.rep.localcaguid", "local_ca_guid"), ("infiniband.cm.rep.private", "private_data")],
    "RTU": [("infiniband.cm.rtu.localcommid", "local_comm_id"), ("infiniband.cm.rtu.remotecommid", "remote_comm_id"),
            ("infiniband.cm.rtu.private", "private_data")],
    "REJ": [("infiniband.cm.rej.localcommid", "local_comm_id"), ("infiniband.cm.rej.remotecommid", "remote_comm_id"),
            ("infiniband.cm.rej.msgrej", "message_rejected"), ("infiniband.cm.rej.rejinfolen", "rejected_info_length"),
            ("infiniband.cm.rej.reason", "reason"), ("infiniband.cm.rej.ari", "ari"),
            ("infiniband.cm.rej.private", "private_data")],
    "DREQ": [("infiniband.cm.dreq.localcommid", "local_comm_id"), ("infiniband.cm.dreq.remotecommid", "remote_comm_id"),
             ("infiniband.cm.req.remoteqpneecn", "remote_qpn"), ("infiniband.cm.dreq.private", "private_data")],
    "DREP": [("infiniband.cm.drsp.localcommid", "local_comm_id"), ("infiniband.cm.drsp.remotecommid", "remote_comm_id"),
             ("infiniband.cm.drsp.private", "private_data")],
}
GIDS = [("infiniband.cm.req.prim_localgid", "infiniband.cm.req.prim_localgid_ipv4", "primary_local_gid"),
        ("infiniband.cm.req.prim_remotegid", "infiniband.cm.req.prim_remotegid_ipv4", "primary_remote_gid")]
SID = [("infiniband.cm.req.serviceid.protocol", lambda sid: (sid >> 16) & 0xFF),
       ("infiniband.cm.req.serviceid.dport", lambda sid: sid & 0xFFFF),
       ("infiniband.cm.req.serviceid.prefix", lambda sid: sid >> 24)]
CMA = [("infiniband.cm.req.ip_cm.ipv", "ip_version"), ("infiniband.cm.req.ip_cm.sport", "src_port")]
CMA_ADDR = [("infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.sip6", "src_ip"),
            ("infiniband.cm.req.ip_cm.dip4", "infiniband.cm.req.ip_cm.dip6", "dst_ip")]

problems = []


def problem(msg):
    problems.append(msg)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout, r.stderr


def all_fields():
    f = ["frame.number", "_ws.malformed", "_ws.expert.severity"] + [t for t, _ in HDR]
    for rows in CM.values():
        f += [t for t, _ in rows]
    f += [a for a, _, _ in GIDS] + [b for _, b, _ in GIDS] + [t for t, _ in SID] + [t for t, _ in CMA]
    f += [a for a, _, _ in CMA_ADDR] + [b for _, b, _ in CMA_ADDR] + ["infiniband.cm.req.ip_cm.private"]
    return f


def tshark_rows(path):
    fields = all_fields()
    cmd = ["tshark", "-r", path, "-n", "-T", "fields", "-E", "occurrence=f", "-E", "separator=\t"]
    for f in fields:
        cmd += ["-e", f]
    rc, out, err = run(cmd)
    if rc != 0:
        problem(f"tshark exited {rc}: {err.strip()[:300]}")
        return {}
    rows = {}
    for line in out.splitlines():
        vals = line.split("\t") + [""] * len(fields)
        row = dict(zip(fields, vals))
        rows[int(row["frame.number"])] = row
    return rows


def ours(hcaemu, path):
    rc, err, frames, summary = proclib.dissect_json(hcaemu, path)
    if rc != 0:
        problem(f"hcaemu dissect --json exited {rc}: {err.strip()}")
    return frames, summary


def num(text):
    """tshark's text of a number: 0x-hex, decimal, or bare hex bytes (FT_BYTES, leading zeros)."""
    if text.startswith("0x"):
        return int(text, 16)
    if text.isdigit() and (len(text) == 1 or text[0] != "0"):
        return int(text)
    return int(hexbytes(text), 16)


def hexbytes(text):
    return text.replace(":", "").lower()


def same_ip(a, b):
    try:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return False
    if x.version == 6 and x.ipv4_mapped:
        x = x.ipv4_mapped
    if y.version == 6 and y.ipv4_mapped:
        y = y.ipv4_mapped
    return x == y


def compare(n, t, o):
    where = f"frame {n}"
    if t["_ws.malformed"]:
        problem(f"{where}: tshark says malformed")
    if t["_ws.expert.severity"] and int(t["_ws.expert.severity"]) >= 8388608:
        problem(f"{where}: tshark reports an error-level expert finding")
    mad = o.get("mad")
    if not mad:
        problem(f"{where}: hcaemu decoded no MAD")
        return 0
    if mad["status"] != "ok" or mad["reserved_bytes"]:
        problem(f"{where}: hcaemu MAD status {mad['status']}, reserved bytes {mad['reserved_bytes']}")
    checked = 0
    for tf, key in HDR:
        if t[tf] == "" or num(t[tf]) != mad["hdr"][key]:
            problem(f"{where}: {tf}: tshark {t[tf]!r}, hcaemu {mad['hdr'][key]}")
        checked += 1
    fields = mad.get("fields", {})
    attr = mad.get("attr")
    for tf, key in CM.get(attr, []):
        want, got = t[tf], fields.get(key)
        if key in ("private_data", "ari"):
            if want == "" or hexbytes(want) != got:
                problem(f"{where} {attr}: {tf}: tshark {want[:40]!r}..., hcaemu {str(got)[:40]!r}...")
        elif want == "" or num(want) != got:
            problem(f"{where} {attr}: {tf}: tshark {want!r}, hcaemu {got!r}")
        checked += 1
    if attr == "REQ":
        for v6, v4, key in GIDS:
            text = t[v4] or t[v6]
            if not same_ip(text, fields[key]):
                problem(f"{where}: {key}: tshark {text!r}, hcaemu {fields[key]!r}")
            checked += 1
        for tf, get in SID:
            if t[tf] == "" or num(t[tf]) != get(fields["service_id"]):
                problem(f"{where}: {tf}: tshark {t[tf]!r}, hcaemu service ID 0x{fields['service_id']:016x}")
            checked += 1
        cma = mad.get("cma", {})
        for tf, key in CMA:
            if t[tf] == "" or num(t[tf]) != cma.get(key):
                problem(f"{where}: {tf}: tshark {t[tf]!r}, hcaemu {cma.get(key)!r}")
            checked += 1
        for v4, v6, key in CMA_ADDR:
            text = t[v4] or t[v6]
            if not same_ip(text, cma.get(key, "")):
                problem(f"{where}: CMA {key}: tshark {text!r}, hcaemu {cma.get(key)!r}")
            checked += 1
        consumer = hexbytes(t["infiniband.cm.req.ip_cm.private"])
        if not consumer or fields["private_data"][72:] != consumer:
            problem(f"{where}: REQ consumer private data: tshark {consumer[:20]!r}, hcaemu {fields['private_data'][72:92]!r}")
        checked += 1
    return checked


def real_captures(hcaemu, folder):
    """Linux's CM MADs: accepted by --strict, every MAD ok, fields as tshark decodes them."""
    checked = 0
    names = sorted(f for f in os.listdir(folder) if f.endswith(".pcap"))
    if not names:
        problem(f"{folder}: no captures")
    for name in names:
        path = os.path.join(folder, name)
        rc, _, _ = run([hcaemu, "dissect", "--strict", path])
        if rc != 0:
            problem(f"{name}: hcaemu dissect --strict exited {rc}")
        theirs = tshark_rows(path)
        mine, summary = ours(hcaemu, path)
        if not theirs or sorted(theirs) != sorted(mine) or summary.get("gmp") != len(theirs) or summary.get("gmp_bad"):
            problem(f"{name}: tshark frames {sorted(theirs)}, hcaemu {sorted(mine)}, summary {summary}")
        n = sum(compare(f"{name} {k}", theirs[k], mine[k]) for k in sorted(theirs) if k in mine)
        print(f"{name}: {len(theirs)} MADs, {n} fields agree with tshark unless listed")
        checked += n
    return checked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--mad-pcap", required=True)
    ap.add_argument("--real", help="a folder of captures of Linux's CM")
    a = ap.parse_args()
    total = real_captures(a.hcaemu, a.real) if a.real else 0
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = os.path.join(tmp, "gmp.pcap"), os.path.join(tmp, "gmp-bad.pcap")
        for path, extra in ((good, []), (bad, ["--malformed"])):
            rc, _, err = run([a.mad_pcap, path] + extra)
            if rc != 0:
                print(f"mad_pcap {path} failed: {err}")
                return 1
        rc, out, err = run([a.hcaemu, "dissect", "--strict", good])
        if rc != 0:
            problem(f"hcaemu dissect --strict on the good GMPs exited {rc}")
        for name in ("ConnectRequest (REQ)", "Local Communication ID 0x11223344", "Reason 8 (Invalid Service ID)",
                     "CMA       version 0, IPv4, 198.18.0.1 port 54321 -> 198.18.0.2 port 18515",
                     "MADs to QP1 (GMPs) 11, malformed or with reserved bits set 0"):
            if name not in out:
                problem(f"hcaemu dissect full output lacks {name!r}")
        theirs = tshark_rows(good)
        mine, summary = ours(a.hcaemu, good)
        if sorted(theirs) != list(range(1, 12)) or sorted(mine) != list(range(1, 12)):
            problem(f"frames: tshark {sorted(theirs)}, hcaemu {sorted(mine)} (want 11)")
        total += sum(compare(n, theirs[n], mine[n]) for n in sorted(theirs) if n in mine)
        if summary.get("gmp") != 11 or summary.get("gmp_bad") != 0:
            problem(f"summary: {summary}")
        attrs = [mine[n].get("mad", {}).get("attr") for n in sorted(mine)]
        want = ["ClassPortInfo", "REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP", "REQ"]
        if attrs != want:
            problem(f"attributes: {attrs}")

        rc, _, _ = run([a.hcaemu, "dissect", "--strict", bad])
        if rc != 1:
            problem(f"hcaemu dissect --strict on malformed GMPs exited {rc}, want 1")
        bad_frames, bad_sum = ours(a.hcaemu, bad)
        want_status = ["ok", "ok", "unsupported_attribute", "unknown_attribute", "bad_class_version", "bad_method",
                       "bad_gsi_qkey", "mad_truncated"]
        got_status = [bad_frames[n]["mad"]["status"] for n in sorted(bad_frames)]
        if got_status != want_status:
            problem(f"malformed GMPs: status {got_status}, want {want_status}")
        if [bad_frames[n]["mad"]["reserved_bytes"] for n in (1, 2)] != [1, 1]:
            problem("malformed GMPs: the reserved bits of frames 1 and 2 are not reported")
        if bad_sum.get("gmp") != 8 or bad_sum.get("gmp_bad") != 8:
            problem(f"malformed GMPs: summary {bad_sum}")
    for p in problems[:40]:
        print("MISMATCH", p)
    print(f"{total} MAD fields cross-checked with tshark over 11 GMPs; {len(problems)} problems")
    return 1 if problems or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
