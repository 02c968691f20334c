#!/usr/bin/python3
"""hcaemud's control protocol from a raw client (tools/libhcaemu/PROTOCOL.md, tools/libhcaemu/proto.hpp):
exact replies of the simple ops, a QP to RTS, fuzzing (random bytes, truncations, bad lengths,
magic, version, ops, hello order, fds), foreign handles refused, hostile rings, the daemon's
counters, cleanup on disconnect, SIGTERM, start-up errors; then, on a daemon of its own: clients
gone while their replies are sent, a client that sends and never reads, hostile creating ops, a
lingering TCP socket passed as an fd, res_list paging, a backlogged socket path, flush CQEs at SIGTERM.

usage: check_daemon_proto.py HCAEMUD"""
import errno
import mmap
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HCAEMUD = sys.argv[1] if len(sys.argv) > 1 else ""
MAGIC, VERSION = 0x45414348, 2
REPLY, EVENT = 0x8000, 0x4000
OP = {n: i + 1 for i, n in enumerate(
    "hello query_device query_port query_gid alloc_pd dealloc_pd reg_mr dereg_mr create_cq destroy_cq "
    "resize_cq req_notify_cq create_qp destroy_qp modify_qp query_qp create_srq destroy_srq modify_srq "
    "query_srq create_ah destroy_ah read_counters res_list resolve rereg_mr inject cm".split())}
BODY = {1: 40, 2: 0, 3: 8, 4: 8, 5: 0, 6: 8, 7: 32, 8: 8, 9: 16, 10: 8, 11: 8, 12: 8, 13: 40, 14: 8,
        15: 124, 16: 8, 17: 20, 18: 8, 19: 20, 20: 8, 21: 36, 22: 8, 23: 8, 24: 8, 25: 16, 26: 40, 27: 256, 28: 552}
ERR = {n: i for i, n in enumerate("ok bad_magic bad_version bad_length unknown_op no_hello bad_field bad_fd "
                                  "fd_unexpected limit shutting_down".split())}
ST = {n: i for i, n in enumerate("ok invalid_argument no_resources busy bad_handle not_supported bad_transition "
                                 "missing_attr attr_not_allowed queue_full too_many_sge bad_lkey inline_too_large "
                                 "opcode_not_allowed no_ah bad_qp_state misaligned permission_denied bad_address".split())}
EV_ASYNC, EV_SHUTDOWN, EV_CQ = EVENT | 2, EVENT | 3, EVENT | 1
IP = "198.18.7.1"
GID = bytes(10) + b"\xff\xff" + socket.inet_aton(IP)

failures = []
sent_errors = {k: 0 for k in ERR}
sent_bad_handles = 0


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


class Client:
    def __init__(self, path, hello=True, comm=b"pytest"):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(10)
        self.s.connect(path)
        self.seq = 0
        self.events = []
        if hello:
            h, body, _ = self.req("hello", struct.pack("<II32s", os.getpid(), 0, comm))
            assert h["status"] == 0 and h["error"] == 0, h
            self.id, self.max_objects = struct.unpack_from("<II", body)
            self.gid = body[8:24]
            self.gid_index = struct.unpack_from("<i", body, 24)[0]

    def raw(self, data, fds=()):
        if fds:
            socket.send_fds(self.s, [data], list(fds))
        else:
            self.s.send(data)

    def recv(self):
        while True:
            msg, fds, _, _ = socket.recv_fds(self.s, 20000, 4)
            magic, ver, op, ln, seq = struct.unpack_from("<IHHII", msg)
            if op & EVENT and not op & REPLY:
                self.events.append((op, msg[16:]))
                continue
            st, er, _, detail = struct.unpack_from("<BBHI", msg, 16)
            return dict(op=op, len=ln, seq=seq, status=st, error=er, detail=detail), msg[24:], fds

    def req(self, op, body=b"", fds=()):
        self.seq += 1
        o = OP[op] if isinstance(op, str) else op
        self.raw(struct.pack("<IHHII", MAGIC, VERSION, o, 16 + len(body), self.seq) + body, fds)
        h, b, f = self.recv()
        check(h["seq"] == self.seq and h["op"] == (o | REPLY), f"{op}: reply header {h}")
        return h, b, f

    def close(self):
        self.s.close()


def expect_error(c, data, err, what, fds=()):
    c.raw(data, fds)
    h, _, _ = c.recv()
    check(h["error"] == ERR[err], f"{what}: error {h['error']} != {err}")
    sent_errors[err] += 1


def start_daemon(d, sock, extra=(), name="p"):
    eal = (f"--no-huge -m 128 --no-pci --no-shconf -l 0 --no-telemetry --log-level lib.eal:error "
           f"--file-prefix hcaemud-test-{name}-{os.getpid()} --vdev=net_ring_{name}{os.getpid() % 10000}")
    log = open(os.path.join(d, f"daemon-{name}.log"), "w+")
    p = subprocess.Popen([HCAEMUD, "--socket", sock, "--eal", eal, "--ip", IP + "/24", *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    # Ready when it says it serves (the socket file alone may be a stale one, or not listening yet).
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None:
        log.seek(0)
        if "hcaemud: serving" in log.read():
            break
        time.sleep(0.05)
    return p, log


def st64(ring, off, v):
    """One 8-byte store (struct.pack_into writes byte by byte: the daemon could see a torn counter)."""
    with memoryview(ring) as m, m.cast("Q") as q:
        q[off // 8] = v


def ld64(ring, off):
    with memoryview(ring) as m, m.cast("Q") as q:
        return q[off // 8]


def wait_event(c, op, timeout=5):
    """The first event `op` the client has or gets within `timeout` s (events arrive between replies)."""
    deadline = time.time() + timeout
    while True:
        for i, (o, body) in enumerate(c.events):
            if o == op:
                del c.events[i]
                return body
        left = deadline - time.time()
        if left <= 0:
            return None
        c.s.settimeout(left)
        try:
            msg = c.s.recv(20000)
        except socket.timeout:
            return None
        finally:
            c.s.settimeout(10)
        o = struct.unpack_from("<H", msg, 6)[0]
        c.events.append((o, msg[16:]))


def post_send(ring, n, wr_id, opcode, sges, esz=144, flags=2, **kw):
    """SEND WQE n (SendWqe then Sge) into an SQ ring mapped at offset 0, then the doorbell."""
    cap = struct.unpack_from("<I", ring, 8)[0]
    off = 256 + (n % cap) * esz
    ring[off:off + esz] = bytes(esz)
    struct.pack_into("<QB3xIIIIIQII", ring, off, wr_id, opcode, flags, len(sges), 0, kw.get("imm", 0), 0,
                     kw.get("raddr", 0), kw.get("rkey", 0), kw.get("ah", 0))
    struct.pack_into("<II", ring, off + 64, kw.get("rqpn", 0), kw.get("qkey", 0))
    for i, (addr, ln, key) in enumerate(sges):
        struct.pack_into("<QII", ring, off + 80 + 16 * i, addr, ln, key)
    st64(ring, 64, n + 1)


def post_recv(ring, base, n, wr_id, sges, esz=48):
    cap = struct.unpack_from("<I", ring, base + 8)[0]
    off = base + 256 + (n % cap) * esz
    struct.pack_into("<QII", ring, off, wr_id, len(sges), 0)
    for i, (addr, ln, key) in enumerate(sges):
        struct.pack_into("<QII", ring, off + 16 + 16 * i, addr, ln, key)
    st64(ring, base + 64, n + 1)


def wait_cqes(ring, want, timeout=5):
    deadline = time.time() + timeout
    while ld64(ring, 64) < want and time.time() < deadline:
        time.sleep(0.005)
    return ld64(ring, 64)


def cqe(ring, n):
    cap = struct.unpack_from("<I", ring, 8)[0]
    wr_id, status, opcode, _, _, _, byte_len, imm, qp_num, src_qp = struct.unpack_from("<QBBBBIIIII", ring, 256 + 64 * (n % cap))
    return dict(wr_id=wr_id, status=status, opcode=opcode, byte_len=byte_len, qp_num=qp_num, src_qp=src_qp)


def memfd(size, seal=True):
    fd = os.memfd_create("buf", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        import fcntl
        fcntl.fcntl(fd, 1033, 0x0002)  # F_ADD_SEALS, F_SEAL_SHRINK
    return fd


def qp_attr(**kw):
    a = bytearray(116)
    struct.pack_into("<B", a, 0, kw.get("state", 0))
    struct.pack_into("<B", a, 2, kw.get("path_mtu", 3))
    struct.pack_into("<IIIII", a, 4, kw.get("qkey", 0), kw.get("rq_psn", 0), kw.get("sq_psn", 0),
                     kw.get("dest_qp", 0), kw.get("access", 0))
    a[44:60] = kw.get("dgid", GID)
    struct.pack_into("<BB", a, 64, kw.get("sgid_index", 1), 64)  # sgid_index, hop_limit
    struct.pack_into("<BB", a, 68, 1, 1)                          # port_num, is_global
    struct.pack_into("<BB", a, 72 + 24, 1, 1)                     # alt: port_num, is_global
    struct.pack_into("<BBBBBBB", a, 109, kw.get("max_rd_atomic", 0), kw.get("max_dest_rd_atomic", 0),
                     kw.get("min_rnr_timer", 0), 1, kw.get("timeout", 0), kw.get("retry_cnt", 0), kw.get("rnr_retry", 0))
    return bytes(a)


def modify(c, qp, mask, **kw):
    h, _, _ = c.req("modify_qp", struct.pack("<II", qp, mask) + qp_attr(**kw))
    return h


def to_rts(c, qp, dest_qp):
    check(modify(c, qp, 1 | 1 << 4 | 1 << 5 | 1 << 3, state=1, access=7)["status"] == 0, "to INIT")
    check(modify(c, qp, 1 | 1 << 7 | 1 << 8 | 1 << 20 | 1 << 12 | 1 << 17 | 1 << 15, state=2, dest_qp=dest_qp,
                 rq_psn=200, max_dest_rd_atomic=4, min_rnr_timer=12)["status"] == 0, "to RTR")
    check(modify(c, qp, 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 16 | 1 << 13, state=3, sq_psn=200, timeout=14,
                 retry_cnt=7, rnr_retry=7, max_rd_atomic=4)["status"] == 0, "to RTS")


def query_state(c, qp):
    h, b, _ = c.req("query_qp", struct.pack("<II", qp, 0))
    return b[0] if h["status"] == 0 else None


def counters(c, which):
    out, start = {}, 0
    while True:
        h, b, _ = c.req("read_counters", struct.pack("<B3xI", which, start))
        total, n = struct.unpack_from("<II", b)
        for i in range(n):
            name, v = struct.unpack_from("<40sQ", b, 8 + i * 48)
            out[name.rstrip(b"\0").decode()] = v
        start += n
        if start >= total or n == 0:
            return out


def res_list(c, kind):
    out, start = [], 0
    while True:
        h, b, _ = c.req("res_list", struct.pack("<B3xI", kind, start))
        total, n = struct.unpack_from("<II", b)
        for i in range(n):
            off = 8 + i * 688
            client, pid, comm, nattr = struct.unpack_from("<II32sI", b, off)
            attrs = {}
            for j in range(nattr):
                k, v = struct.unpack_from("<16s24s", b, off + 48 + j * 40)
                attrs[k.rstrip(b"\0").decode()] = v.rstrip(b"\0").decode()
            out.append(dict(client=client, pid=pid, comm=comm.rstrip(b"\0").decode(), **attrs))
        start += n
        if start >= total or n == 0:
            return out


def objects(c):
    c.s.settimeout(10)
    return {k: res_list(c, i) for i, k in enumerate(["pd", "mr", "cq", "qp", "srq"])}


def gauges_match(c, o, when):
    """The daemon set's dev_* gauges (the device's tables) count what res_list lists, kind by kind."""
    dc = counters(c, 3)
    got = {k: dc.get(f"dev_{k}s") for k in o}
    want = {k: len(v) for k, v in o.items()}
    check(got == want, f"dev_* gauges {when}: {got}, res_list {want}")


class Setup:
    """A PD, an MR on a sealed memfd, a CQ and an RC QP, as a client builds them."""

    def __init__(self, c):
        self.c = c
        h, b, _ = c.req("alloc_pd")
        check(h["status"] == 0, "alloc_pd")
        self.pd = struct.unpack_from("<I", b)[0]
        self.buf_fd = memfd(8192)
        self.buf = mmap.mmap(self.buf_fd, 8192)
        self.iova = 0x7F0000100000
        h, b, _ = c.req("reg_mr", struct.pack("<IIQQQ", self.pd, 15, 0, 8192, self.iova), [self.buf_fd])
        check(h["status"] == 0 and h["error"] == 0, f"reg_mr {h}")
        self.mr, self.lkey, self.rkey = struct.unpack_from("<III", b)
        h, b, f = c.req("create_cq", struct.pack("<iB3xQ", 64, 1, 0xC0FFEE))
        check(h["status"] == 0 and len(f) == 1, f"create_cq {h} fds {f}")
        self.cq, self.cqe, self.cq_bytes = struct.unpack_from("<IiQ", b)
        check(self.cqe == 64 and self.cq_bytes == 8192, f"cq {self.cqe} bytes {self.cq_bytes}")  # 256 + 64*64 -> 2 pages
        self.cq_ring = mmap.mmap(f[0], self.cq_bytes)
        os.close(f[0])
        self.qp, self.qpn, self.sq_ring, self.rq_ring = self.make_qp()

    def make_qp(self, srq=0, qp_type=2):
        req = struct.pack("<IIII5IBB2x", self.pd, self.cq, self.cq, srq, 16, 16, 2, 2, 64, qp_type, 0)
        h, b, f = self.c.req("create_qp", req)
        check(h["status"] == 0 and len(f) == 1, f"create_qp {h}")
        handle, qpn = struct.unpack_from("<II", b)
        cap = struct.unpack_from("<5I", b, 8)
        sq_off, rq_off, nbytes = struct.unpack_from("<QQQ", b, 32)
        check(cap == (16, 16, 2, 2, 64), f"granted caps {cap}")
        check((sq_off, rq_off, nbytes) == (0, 4096, 8192), f"ring layout {(sq_off, rq_off, nbytes)}")
        m = mmap.mmap(f[0], nbytes)
        os.close(f[0])
        magic, kind, cap_, esz = struct.unpack_from("<IIII", m, 0)
        check((magic, kind, cap_, esz) == (0x474E4952, 1, 16, 144), f"SQ ring header {(magic, kind, cap_, esz)}")
        magic, kind, cap_, esz = struct.unpack_from("<IIII", m, 4096)
        check((magic, kind, cap_, esz) == (0x474E4952, 2, 16, 48), f"RQ ring header {(magic, kind, cap_, esz)}")
        return handle, qpn, m, 4096


def child(path):
    """A client that keeps RDMA WRITEs in flight between its two QPs until it is killed."""
    c = Client(path, comm=b"victim")
    st = Setup(c)
    q2, qpn2, _, _ = st.make_qp()
    to_rts(c, st.qp, qpn2)
    to_rts(c, q2, st.qpn)
    n = 0
    print("ready", flush=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        cons = ld64(st.sq_ring, 128)
        if n - cons < 16:
            post_send(st.sq_ring, n, n, 0, [(st.iova, 4096, st.lkey)], raddr=st.iova + 4096, rkey=st.rkey)
            n += 1
        st64(st.cq_ring, 128, ld64(st.cq_ring, 64))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    """ASan's quarantine keeps freed memory resident: RSS bounds mean nothing under it."""
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def review_checks(d):
    """A daemon of its own: clients gone while their replies are sent, a client that never reads,
    res_list paging over hundreds of objects, a backlogged socket path, the flush CQEs at SIGTERM."""
    sock = os.path.join(d, "r.sock")
    p, log = start_daemon(d, sock, name="r")
    try:
        w = Client(sock, comm=b"watch")
        # ---- clients gone before their replies (create_cq, res_list, reg_mr): sendmsg fails, the
        # daemon drops them (a use-after-free before: drop() erased the entry its caller held)
        for i in range(150):
            c = Client(sock, comm=b"gone")
            fd = memfd(4096)
            c.seq = 100
            c.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["alloc_pd"], 16, 1))
            c.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["create_cq"], 32, 2) + struct.pack("<iB3xQ", 64, 1, 0))
            c.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["res_list"], 24, 3) + struct.pack("<B3xI", 0, 0))
            c.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["reg_mr"], 48, 4) + struct.pack("<IIQQQ", 1, 1, 0, 4096, 0), [fd])
            os.close(fd)
            c.close()
        deadline = time.time() + 10
        while time.time() < deadline and counters(w, 3)["clients_connected"] != 1:
            time.sleep(0.05)
        dc = counters(w, 3)
        check(p.poll() is None and dc["clients_connected"] == 1 and dc["clients_total"] == 151,
              f"clients gone mid-reply: daemon alive, connected {dc['clients_connected']} total {dc['clients_total']}")
        o = objects(w)
        check(not any(x for k in o for x in o[k]), f"clients gone mid-reply: no object left {o}")

        # ---- a client that sends and never reads: the daemon stops reading it (its replies wait),
        # memory stays bounded, others are served; then it reads every reply, in order
        fl = Client(sock, comm=b"flood")
        rss0 = rss_kb(p.pid)
        fl.s.setblocking(False)
        sent, kinds = 0, []
        deadline = time.time() + 20
        stalled = None
        while sent < 100000 and time.time() < deadline:
            seq = sent + 1
            if seq % 500 == 0:
                msg = struct.pack("<IHHII", MAGIC, VERSION, OP["res_list"], 24, seq) + struct.pack("<B3xI", 0, 0)
            else:
                msg = struct.pack("<IHHII", MAGIC, VERSION, OP["query_device"], 17, seq)  # bad length
            try:
                fl.s.send(msg)
            except BlockingIOError:
                if stalled is None:
                    stalled = time.time()
                if time.time() - stalled > 1.0:
                    break
                time.sleep(0.01)
                continue
            stalled = None
            kinds.append("res" if seq % 500 == 0 else "bad")
            sent += 1
        rss1 = rss_kb(p.pid)
        print(f"flood: {sent} requests sent before the client's socket was full", flush=True)
        check(sent < 100000, f"flood: the daemon stopped reading a client that reads nothing ({sent} sent)")
        check(sanitized(p.pid) or rss1 - rss0 < 4096, f"flood: daemon RSS {rss0} -> {rss1} kB")
        h, _, _ = w.req("query_device")
        check(h["status"] == 0, "flood: another client served meanwhile")
        fl.s.setblocking(True)
        fl.s.settimeout(10)
        got_ok = True
        for i in range(sent):
            h, b, _ = fl.recv()
            want_err = 0 if kinds[i] == "res" else ERR["bad_length"]
            if h["seq"] != i + 1 or h["error"] != want_err:
                got_ok = False
                check(False, f"flood: reply {i + 1}: {h}")
                break
        check(got_ok, f"flood: {sent} replies in order")
        h, _, _ = fl.req("query_device")
        check(h["status"] == 0, "flood: the client is served again after reading")
        fl.close()
        # the same flood, then the client goes without reading: the daemon notices (its write side)
        f2 = Client(sock, comm=b"flood2")
        f2.s.setblocking(False)
        try:
            for i in range(100000):
                f2.s.send(struct.pack("<IHHII", MAGIC, VERSION, OP["res_list"], 24, i + 1) + struct.pack("<B3xI", 0, 0))
        except BlockingIOError:
            pass
        f2.close()
        deadline = time.time() + 10
        while time.time() < deadline and counters(w, 3)["clients_connected"] != 1:
            time.sleep(0.05)
        check(counters(w, 3)["clients_connected"] == 1, "flood2: a client gone while paused is dropped")

        # ---- res_list paging: two clients, a few hundred PDs; pages built only as returned
        pa, pb = Client(sock, comm=b"pa"), Client(sock, comm=b"pb")
        mine = {}
        for c, n in ((pa, 37), (pb, 300)):
            for _ in range(n):
                h, b, _ = c.req("alloc_pd")
                mine[(c.id, struct.unpack_from("<I", b)[0])] = 1
        got = res_list(w, 0)
        keys = [(x["client"], int(x["handle"])) for x in got]
        check(len(keys) == 337 and set(keys) == set(mine), f"res_list pd: {len(keys)} objects, exact set")
        h, b, _ = w.req("res_list", struct.pack("<B3xI", 0, 30))
        total, n = struct.unpack_from("<II", b)
        page = [struct.unpack_from("<I", b, 8 + i * 688)[0] for i in range(n)]
        check(total == 337 and n == 16 and page == [k[0] for k in keys[30:46]], f"res_list from 30: total {total} n {n}")
        h, b, _ = w.req("res_list", struct.pack("<B3xI", 0, 337))
        check(struct.unpack_from("<II", b) == (337, 0), "res_list past the end: total, no object")
        pa.close()
        pb.close()

        # ---- creating ops with hostile sizes and caps, on the client's own handles: every reply
        # well formed (seq, op checked by req()), status and error from each op's allowed set
        z = Client(sock, comm=b"fuzzc")
        sz = Setup(z)
        mfd = memfd(8192)
        rz = random.Random(11)
        big = [0, 1, 2, 3, 15, 16, 17, 255, 4096, 16383, 16384, 16385, 32767, 32768, 65535, 65536,
               0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
        u32 = lambda: rz.choice(big) if rz.random() < 0.8 else rz.getrandbits(32)
        u64 = lambda: rz.choice([0, 1, 4095, 4096, 8191, 8192, 8193, 1 << 63, (1 << 64) - 1, (1 << 64) - 4096, rz.getrandbits(64)])
        cap = lambda: rz.choice([0, 1, 2, 3, 4, 16, 64, 200]) if rz.random() < 0.7 else u32()
        hd = lambda own: own if rz.random() < 0.85 else rz.choice([0, own + 1, rz.getrandbits(32)])
        S = ST
        allowed = {
            "create_cq": ({S["ok"], S["invalid_argument"], S["no_resources"]}, {0, ERR["bad_field"], ERR["limit"]}),
            "resize_cq": ({S["ok"], S["invalid_argument"], S["no_resources"], S["bad_handle"]}, {0}),
            "create_qp": ({S["ok"], S["invalid_argument"], S["no_resources"], S["bad_handle"]}, {0, ERR["bad_field"], ERR["limit"]}),
            "create_srq": ({S["ok"], S["invalid_argument"], S["no_resources"], S["bad_handle"]}, {0, ERR["limit"]}),
            "reg_mr": ({S["ok"], S["invalid_argument"], S["no_resources"], S["bad_handle"]}, {0, ERR["bad_fd"], ERR["limit"]}),
        }
        destroy = {"create_cq": "destroy_cq", "create_qp": "destroy_qp", "create_srq": "destroy_srq", "reg_mr": "dereg_mr"}
        rss0 = rss_kb(p.pid)
        made = {k: 0 for k in allowed}
        for i in range(1500):
            op = rz.choice(list(allowed))
            fds = ()
            if op == "create_cq":
                body = struct.pack("<IB3xQ", u32(), rz.choice([0, 1, 1, 2, 255]), rz.getrandbits(64))
            elif op == "resize_cq":
                body = struct.pack("<II", hd(sz.cq), u32())
            elif op == "create_qp":
                body = struct.pack("<IIII5IBB2x", hd(sz.pd), hd(sz.cq), hd(sz.cq), 0 if rz.random() < 0.9 else u32(),
                                   cap(), cap(), cap(), cap(), cap(), rz.choice([2, 2, 3, 4, 0, 9]), rz.choice([0, 1, 2]))
            elif op == "create_srq":
                body = struct.pack("<II3I", hd(sz.pd), 0, u32(), u32(), u32())
            else:
                body = struct.pack("<IIQQQ", hd(sz.pd), rz.choice([0, 1, 15, 0xFFFFFFFF, rz.getrandbits(32)]), u64(), u64(), u64())
                fds = (mfd,)
            req_caps = struct.unpack_from("<5I", body, 16) if op == "create_qp" else None
            h, b, f = z.req(op, body, fds)
            sts, errs = allowed[op]
            check(h["status"] in sts and h["error"] in errs and (h["error"] == 0 or h["status"] in (S["invalid_argument"], S["no_resources"])),
                  f"hostile {op} {body.hex()}: status {h['status']} error {h['error']}")
            check(len(f) == (1 if h["status"] == 0 and op not in ("reg_mr",) else 0), f"hostile {op}: fds {f} with status {h['status']}")
            for x in f:
                os.close(x)
            if h["status"] == 0:
                made[op] += 1
                if op == "create_qp":
                    got = struct.unpack_from("<5I", b, 8)
                    check(all(g >= r for g, r in zip(got, req_caps)), f"hostile create_qp: granted {got} < asked {req_caps}")
                if op in destroy:
                    r2, _, _ = z.req(destroy[op], struct.pack("<II", struct.unpack_from("<I", b)[0], 0))
                    check(r2["status"] == 0, f"destroy after hostile {op}: {r2}")
            if failures:
                break
        os.close(mfd)
        rss1 = rss_kb(p.pid)
        print("hostile creates that succeeded:", made, f"daemon RSS {rss0} -> {rss1} kB", flush=True)
        check(sanitized(p.pid) or rss1 - rss0 < 16384, f"hostile creates: daemon RSS {rss0} -> {rss1} kB")
        check(p.poll() is None, "hostile creates: daemon alive")
        z.close()
        fz = Client(sock, comm=b"after")
        Setup(fz)
        fz.close()

        # ---- a passed TCP socket (loopback) with SO_LINGER 30 s and unsent data: the daemon closes it
        # at once (SO_LINGER {1, 0}: the peer sees a reset) and answers the next request
        ln = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ln.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ln.bind(("127.0.0.1", 0))
        ln.listen(1)
        ts = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ts.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        ts.connect(ln.getsockname())
        peer, _ = ln.accept()
        ts.setblocking(False)
        try:
            for _ in range(10000):
                ts.send(bytes(4096))
        except BlockingIOError:
            pass
        ts.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 30))
        lc = Client(sock, comm=b"linger")
        # 40 res_list first, unread: their replies (11 kB each) fill the daemon's send buffer and
        # it pauses reading us, so the fd is still in flight when we close our copy: the daemon's
        # close is the last one
        for i in range(40):
            lc.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["res_list"], 24, 1000 + i) + struct.pack("<B3xI", 0, 0))
        lc.raw(struct.pack("<IHHII", MAGIC, VERSION, OP["alloc_pd"], 16, 1040), [ts.fileno()])
        ts.close()
        try:
            for i in range(40):
                h, _, _ = lc.recv()
                check(h["seq"] == 1000 + i and h["error"] == 0, f"lingering socket: res_list reply {i}: {h}")
            h, _, _ = lc.recv()
            check(h["seq"] == 1040 and h["error"] == ERR["fd_unexpected"], f"lingering socket: fd_unexpected {h}")
            lc.seq = 2000
            h, _, _ = lc.req("query_device")
            check(h["status"] == 0, "lingering socket: the next request answered")
        except OSError as e:
            check(False, f"lingering socket: no reply ({e}): close() blocked the io thread")
        peer.settimeout(10)
        reset = False
        try:
            while peer.recv(65536):
                pass
        except ConnectionResetError:
            reset = True
        except OSError:
            pass
        check(reset, "lingering socket: closed by the daemon with a reset (SO_LINGER {1, 0})")
        peer.close()
        ln.close()
        lc.close()

        # ---- socket path of a live listener whose backlog is full: taken, no hang
        s3 = os.path.join(d, "full.sock")
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ls.bind(s3)
        ls.listen(0)
        held = []
        for _ in range(64):
            x = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            x.setblocking(False)
            try:
                x.connect(s3)
            except BlockingIOError:
                x.close()
                break
            held.append(x)
        try:
            r = subprocess.run([HCAEMUD, "--socket", s3], capture_output=True, text=True, timeout=20)
            check(r.returncode == 1 and "taken" in r.stderr, f"full backlog: {r.returncode} {r.stderr}")
        except subprocess.TimeoutExpired:
            check(False, "full backlog: hcaemud hung on the socket check")
        for x in held:
            x.close()
        ls.close()

        # ---- SIGTERM: posted receives are flushed into the CQ ring before the shutdown event
        fx = Client(sock, comm=b"flush")
        sx = Setup(fx)
        to_rts(fx, sx.qp, sx.qpn)
        for i in range(3):
            post_recv(sx.sq_ring, sx.rq_ring, i, 500 + i, [(sx.iova, 64, sx.lkey)])
        h, _, _ = fx.req("alloc_pd")  # a round trip: the doorbell is polled every turn
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        got = None
        try:
            while got is None:
                msg = fx.s.recv(1000)
                if not msg:
                    break
                if struct.unpack_from("<H", msg, 6)[0] == EV_SHUTDOWN:
                    got = msg
        except OSError:
            pass
        check(got is not None, "flush at SIGTERM: shutdown event")
        prod = ld64(sx.cq_ring, 64)
        cq = [cqe(sx.cq_ring, i) for i in range(min(prod, 3))]
        check(prod == 3 and sorted((x["wr_id"], x["status"]) for x in cq) == [(500, 5), (501, 5), (502, 5)],
              f"flush at SIGTERM: 3 FLUSH_ERR CQEs in the ring when the event arrives: prod {prod} {cq}")
        check(p.wait(timeout=20) == 0, "review daemon: exit 0")
        log.seek(0)
        text = log.read()
        check(not any(x in text for x in ("runtime error", "AddressSanitizer", "LeakSanitizer")),
              "review daemon: no sanitizer report")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if failures:
            log.seek(0)
            print("---- review daemon log\n" + log.read()[-3000:])


def inject_req(cmd, id_=0, start=0, rule=b"", rsv=0):
    return struct.pack("<B3xIII240s", cmd, id_, start, rsv, rule)


def inject_list(c, start=0):
    h, b, _ = c.req("inject", inject_req(1, start=start))
    total, n, _ = struct.unpack_from("<III", b)
    out = []
    for i in range(n):
        rid, _, matched, hits, text = struct.unpack_from("<IIQQ240s", b, 16 + i * 264)
        out.append((rid, matched, hits, text.split(b"\0")[0].decode()))
    return h, total, out


CM_CMD = {n: i for i, n in enumerate("create_id destroy_id bind resolve_addr resolve_route query listen connect accept "
                                     "reject disconnect establish init_qp_attr set_option".split())}


def cm_req(cmd, cm_id=0, qp_type=0, arg8=0, ps=0, arg32=0, context=0, src=b"", dst=b"", pd_len=0, srq=0, qp_num=0,
           rsv=0):
    """CmCallReq (proto.hpp): 24 bytes of fields, src and dst sockaddr_storage, CmConnParam (268), 4 pad."""
    body = struct.pack("<BBBBIHHiQ", CM_CMD[cmd] if isinstance(cmd, str) else cmd, qp_type, arg8, rsv, cm_id, ps, 0,
                       arg32, context)
    body += src.ljust(128, b"\0") + dst.ljust(128, b"\0")
    param = bytearray(268)
    struct.pack_into("<B", param, 224, pd_len)
    struct.pack_into("<B", param, 230, srq)
    struct.pack_into("<I", param, 232, qp_num)
    return body + bytes(param) + bytes(4)


def sin(ip, port):
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_aton(ip)


def cm_call(c, *args, **kw):
    h, b, _ = c.req("cm", cm_req(*args, **kw))
    err, cm_id = struct.unpack_from("<iI", b) if len(b) >= 8 else (None, None)
    return h, err, cm_id


def cm_checks(sock):
    """The cm op (CmCallReq): valid calls, every hostile field refused with bad_field, another client's id
    refused as a bad handle, a client's ids (a listener on a port) gone with the client."""
    global sent_bad_handles
    c1, c2 = Client(sock), Client(sock)
    h, err, lid = cm_call(c1, "create_id", qp_type=2, ps=0x0106, context=0xC0FFEE)
    check(h["status"] == 0 and err == 0 and lid, f"cm create_id {h} {err} {lid}")
    h, err, _ = cm_call(c1, "bind", lid, src=sin(IP, 5000))
    check(h["status"] == 0 and err == 0, f"cm bind {h} {err}")
    h, err, _ = cm_call(c1, "listen", lid, arg32=4)
    check(h["status"] == 0 and err == 0, f"cm listen {h} {err}")
    h, err, x = cm_call(c2, "create_id", qp_type=2, ps=0x0106)
    h, err, _ = cm_call(c2, "bind", x, src=sin(IP, 5000))
    check(h["status"] == 0 and err == errno.EADDRINUSE, f"cm bind in use: {err}")
    h, err, _ = cm_call(c2, "create_id", qp_type=4, ps=0x0106)  # TCP is RC
    check(h["status"] == 0 and err == errno.EINVAL, f"cm create_id TCP/UD: {err}")
    # Another client's id: a bad handle.
    for cmd in ("destroy_id", "listen", "query", "disconnect"):
        h, _, _ = cm_call(c2, cmd, lid)
        check(h["status"] == ST["bad_handle"], f"cm {cmd} of another client's id: {h}")
        sent_bad_handles += 1
    hostile = [
        ("cmd out of range", cm_req(14, lid)),
        ("cmd 255", cm_req(255, lid)),
        ("reserved byte", cm_req("query", lid, rsv=1)),
        ("create_id with an id", cm_req("create_id", 5, qp_type=2, ps=0x0106)),
        ("qp_type on query", cm_req("query", lid, qp_type=2)),
        ("bind without an address", cm_req("bind", lid)),
        ("bind to AF 99", cm_req("bind", lid, src=struct.pack("<H", 99) + bytes(30))),
        ("AF_INET with bytes past sockaddr_in", cm_req("bind", lid, src=sin(IP, 1).ljust(16, b"\0") + b"\1")),
        ("dst on bind", cm_req("bind", lid, src=sin(IP, 1), dst=sin(IP, 2))),
        ("resolve_addr src flag 2", cm_req("resolve_addr", lid, arg8=2, dst=sin(IP, 2))),
        ("resolve_addr src given, flag 0", cm_req("resolve_addr", lid, src=sin(IP, 1), dst=sin(IP, 2))),
        ("init_qp_attr state 7", cm_req("init_qp_attr", lid, arg8=7)),
        ("set_option 9", cm_req("set_option", lid, arg8=9)),
        ("arg32 on query", cm_req("query", lid, arg32=1)),
        ("private data 225 bytes", cm_req("connect", lid, pd_len=225, qp_num=1)),
        ("srq byte 2", cm_req("accept", lid, srq=2)),
        ("connect with a QP not the client's", cm_req("connect", lid, qp_num=0xFFFFFF)),
        ("private data on query", cm_req("query", lid, pd_len=1)),
    ]
    for what, body in hostile:
        expect_error(c1, struct.pack("<IHHII", MAGIC, VERSION, OP["cm"], 16 + len(body), 7) + body, "bad_field",
                     f"cm: {what}")
    # c1 leaves: its listener and port go with it, so c2 may bind the port.
    c1.close()
    time.sleep(0.3)
    h, err, _ = cm_call(c2, "bind", x, src=sin(IP, 5000))
    check(h["status"] == 0 and err == 0, f"cm bind after the owner left: {err}")
    h, err, _ = cm_call(c2, "destroy_id", x)
    check(h["status"] == 0 and err == 0, f"cm destroy_id {err}")
    c2.close()


def inject_checks(a):
    """The inject op (PROTOCOL.md): add, list (paged), del; hostile input typed and counted; the limit."""
    h, b, _ = a.req("inject", inject_req(0, rule=b"drop dir=tx qp=0xffffff psn=5\0"))
    check(h["status"] == 0 and h["error"] == 0 and struct.unpack_from("<I", b, 8)[0] == 1, f"inject add: id 1 {h}")
    h, b, _ = a.req("inject", inject_req(0, rule=b"ecn dir=rx qp=0xffffff prob=0.5 seed=3 count=all\0"))
    check(h["status"] == 0 and struct.unpack_from("<I", b, 8)[0] == 2, f"inject add: id 2 {h}")
    h, total, rules = inject_list(a)
    check(h["status"] == 0 and total == 2 and rules == [
        (1, 0, 0, "drop dir=tx qp=0xffffff psn=5 count=1"),
        (2, 0, 0, "ecn dir=rx qp=0xffffff prob=0.5 seed=3 count=all")], f"inject list: {total} {rules}")
    h, total, rules = inject_list(a, start=1)
    check(total == 2 and [r[0] for r in rules] == [2], f"inject list from 1: {rules}")
    h, _, _ = a.req("inject", inject_req(2, id_=1))
    check(h["status"] == 0, f"inject del 1: {h}")
    h, _, _ = a.req("inject", inject_req(2, id_=1))
    check(h["status"] == ST["bad_handle"] and h["error"] == 0, f"inject del 1 again: bad_handle {h}")
    # A rule that does not parse: a failed request, not a protocol error.
    for bad in (b"drop dir=up\0", b"\0", b"explode dir=tx\0", b"delay dir=tx us=0\0"):
        h, _, _ = a.req("inject", inject_req(0, rule=bad))
        check(h["status"] == ST["invalid_argument"] and h["error"] == 0, f"inject add {bad!r}: invalid_argument {h}")
    # Hostile framing of the body: bad_field, counted.
    for what, body in (("rule without its NUL", inject_req(0, rule=b"a" * 240)),
                       ("unknown cmd", inject_req(3)), ("cmd 255", inject_req(255)),
                       ("reserved field", inject_req(1, rsv=1)),
                       ("add with an id", inject_req(0, id_=4, rule=b"drop dir=tx\0")),
                       ("del with a rule", inject_req(2, id_=2, rule=b"x\0")),
                       ("list with an id", inject_req(1, id_=2))):
        h, _, _ = a.req("inject", body)
        check(h["error"] == ERR["bad_field"] and h["status"] == ST["invalid_argument"], f"inject {what}: bad_field {h}")
        sent_errors["bad_field"] += 1
    # The 64 rules limit: 63 more fit beside rule 2, the next one is refused.
    ids = []
    for i in range(63):
        h, b, _ = a.req("inject", inject_req(0, rule=b"drop dir=rx qp=0xffffff psn=%d\0" % i))
        ids.append(struct.unpack_from("<I", b, 8)[0] if h["status"] == 0 else 0)
    check(0 not in ids, "inject: 64 rules")
    h, _, _ = a.req("inject", inject_req(0, rule=b"drop dir=tx\0"))
    check(h["error"] == ERR["limit"] and h["status"] == ST["no_resources"], f"inject: the 65th rule: limit {h}")
    sent_errors["limit"] += 1
    h, total, rules = inject_list(a)
    check(total == 64 and len(rules) == 16, f"inject list: a page of 16 of 64: {total} {len(rules)}")
    for rid in ids + [2]:
        a.req("inject", inject_req(2, id_=rid))
    h, total, rules = inject_list(a)
    check(total == 0 and rules == [], "inject: every rule deleted")


def main():
    global sent_bad_handles
    d = tempfile.mkdtemp(prefix="hcaemud-test-")
    sock = os.path.join(d, "hcaemu.sock")
    p, log = start_daemon(d, sock)
    try:
        check(p.poll() is None, "daemon running")
        check(oct(os.stat(sock).st_mode & 0o777) == oct(0o660), "socket mode 0660")

        # ---- exact replies
        a = Client(sock)
        check(a.id == 1 and a.max_objects == 4096, f"hello: id {a.id} max_objects {a.max_objects}")
        check(a.gid == GID and a.gid_index == 1, f"hello: gid {a.gid.hex()} index {a.gid_index}")
        h, b, _ = a.req("query_device")
        check(len(b) == 152 and b[:6] == b"0.1.0\0", "query_device: size and fw_ver")
        u32 = struct.unpack_from("<20I", b, 64)
        check(u32[3] == 0x10000 and u32[4] == 0x4000 and u32[6] == 32 and u32[9] == 32767 and u32[19] == 256,
              f"query_device: max_qp/max_qp_wr/max_sge/max_cqe/max_inline {u32}")
        h, b, _ = a.req("query_port", struct.pack("<B7x", 1))
        check(h["status"] == 0 and b[0] == 4 and b[2] == 3 and struct.unpack_from("<I", b, 4)[0] == 1500,
              f"query_port: state ACTIVE, active_mtu 1024, link_mtu 1500: {b.hex()}")
        h, _, _ = a.req("query_port", struct.pack("<B7x", 2))
        check(h["status"] == ST["invalid_argument"], "query_port 2 refused")
        h, b, _ = a.req("query_gid", struct.pack("<B3xi", 1, 1))
        check(h["status"] == 0 and b[:16] == GID and b[16] == 2, f"query_gid 1: {b.hex()}")
        h, _, _ = a.req("query_gid", struct.pack("<B3xi", 1, 99))
        check(h["status"] == ST["invalid_argument"], "query_gid 99 refused")

        sa = Setup(a)
        q2, qpn2, ring2, _ = sa.make_qp()
        to_rts(a, sa.qp, qpn2)
        to_rts(a, q2, sa.qpn)
        check(query_state(a, sa.qp) == 3, "QP in RTS")
        h, b, _ = a.req("query_qp", struct.pack("<II", sa.qp, 0))
        sq_psn, dest = struct.unpack_from("<II", b, 12)
        check(struct.unpack_from("<I", b, 8)[0] == 200 and sq_psn == 200 and dest == qpn2, "query_qp: psns and dest")
        h, _, _ = a.req("modify_qp", struct.pack("<II", sa.qp, 1 | 1 << 3) + qp_attr(state=1))
        check(h["status"] == ST["bad_transition"], f"RTS -> INIT refused: {h}")

        # ---- data through the rings: SEND from qp to q2 (loopback on our own address)
        sa.buf[0:64] = bytes(range(64))
        rq = ring2
        struct.pack_into("<QII", rq, 4096 + 256, 77, 1, 0)
        struct.pack_into("<QII", rq, 4096 + 256 + 16, sa.iova + 4096, 64, sa.lkey)
        st64(rq, 4096 + 64, 1)  # RQ prod
        wqe = struct.pack("<QB3xIIIIIQIIQQIIQ", 55, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        sa.sq_ring[256:256 + 80] = wqe
        struct.pack_into("<QII", sa.sq_ring, 256 + 80, sa.iova, 64, sa.lkey)
        st64(sa.sq_ring, 64, 1)  # SQ prod: the doorbell
        deadline = time.time() + 5
        while ld64(sa.cq_ring, 64) < 2 and time.time() < deadline:
            time.sleep(0.01)
        prod = ld64(sa.cq_ring, 64)
        check(prod == 2, f"two CQEs (send, recv) in the CQ ring: prod {prod}")
        if prod != 2:
            print("net", {k: v for k, v in counters(a, 1).items() if v}, "dev", {k: v for k, v in counters(a, 0).items() if v})
        cqes = sorted(struct.unpack_from("<QBBxxIIII", sa.cq_ring, 256 + 64 * i) for i in range(2))
        check(cqes[0][:2] == (55, 0) and cqes[0][2] == 0, f"send CQE {cqes[0]}")
        check(cqes[1][:2] == (77, 0) and cqes[1][2] == 128 and cqes[1][4] == 64, f"recv CQE {cqes[1]}")
        check(bytes(sa.buf[4096:4160]) == bytes(range(64)), "received bytes in place (zero copy)")
        check(ld64(sa.sq_ring, 128) == 1, "SQ cons published")
        st64(sa.cq_ring, 128, prod)  # CQ cons: taken

        # ---- a completion event: armed CQ, then a SEND; the event follows the CQEs
        h, _, _ = a.req("req_notify_cq", struct.pack("<IB3x", sa.cq, 0))
        check(h["status"] == 0, "req_notify_cq")
        sa.buf[100:110] = b"0123456789"
        post_recv(ring2, 4096, 1, 78, [(sa.iova + 5000, 100, sa.lkey)])
        post_send(sa.sq_ring, 1, 56, 2, [(sa.iova + 100, 10, sa.lkey)])
        ev = wait_event(a, EV_CQ)
        check(ev is not None and struct.unpack_from("<IIQ", ev) == (sa.cq, 0, 0xC0FFEE), f"cq_event: {ev}")
        check(ld64(sa.cq_ring, 64) >= 3, "the CQE is in the ring before its event")
        check(wait_cqes(sa.cq_ring, prod + 2) == prod + 2, "SEND 2 completions")
        got = sorted([cqe(sa.cq_ring, prod), cqe(sa.cq_ring, prod + 1)], key=lambda x: x["wr_id"])
        check((got[0]["wr_id"], got[0]["status"], got[1]["wr_id"], got[1]["byte_len"], got[1]["qp_num"]) == (56, 0, 78, 10, qpn2),
              f"SEND 2 CQEs {got}")
        check(bytes(sa.buf[5000:5010]) == b"0123456789", "SEND 2 bytes")
        prod += 2
        st64(sa.cq_ring, 128, prod)

        # ---- resize: a new ring, the next CQEs land there
        h, b, f = a.req("resize_cq", struct.pack("<Ii", sa.cq, 128))
        check(h["status"] == 0 and len(f) == 1 and struct.unpack_from("<IiQ", b) == (sa.cq, 128, 12288), f"resize_cq {h} {b.hex()}")
        new_ring = mmap.mmap(f[0], 12288)
        os.close(f[0])
        check(struct.unpack_from("<IIII", new_ring) == (0x474E4952, 4, 128, 64), "resized ring header")
        post_recv(ring2, 4096, 2, 79, [(sa.iova + 5000, 100, sa.lkey)])
        post_send(sa.sq_ring, 2, 57, 2, [(sa.iova + 100, 3, sa.lkey)])
        check(wait_cqes(new_ring, 2) == 2, "CQEs in the resized ring")
        check(sorted(cqe(new_ring, i)["wr_id"] for i in range(2)) == [57, 79], "resized ring CQEs")
        st64(new_ring, 128, 2)
        sa.cq_ring = new_ring
        prod = 2

        # ---- an SRQ: its ring, a QP on it, a SEND into it
        h, b, f = a.req("create_srq", struct.pack("<II3I", sa.pd, 0, 8, 1, 0))
        check(h["status"] == 0 and len(f) == 1, f"create_srq {h}")
        srq, _, mw, ms, lim, srq_bytes = struct.unpack_from("<II3I4xQ", b)
        check((mw, ms, lim, srq_bytes) == (8, 1, 0, 4096), f"create_srq reply {(mw, ms, lim, srq_bytes)}")
        srq_ring = mmap.mmap(f[0], srq_bytes)
        os.close(f[0])
        check(struct.unpack_from("<IIII", srq_ring) == (0x474E4952, 3, 8, 32), "SRQ ring header")
        h, b, f = a.req("create_qp", struct.pack("<IIII5IBB2x", sa.pd, sa.cq, sa.cq, srq, 4, 0, 1, 1, 0, 2, 0))
        check(h["status"] == 0 and len(f) == 1, f"create_qp on SRQ {h}")
        qs, qpns = struct.unpack_from("<II", b)
        check(struct.unpack_from("<QQQ", b, 32) == (0, 0, 4096), "SRQ QP: no RQ ring")
        os.close(f[0])
        qt, qpnt, ring_t, _ = sa.make_qp()
        to_rts(a, qs, qpnt)
        to_rts(a, qt, qpns)
        post_recv(srq_ring, 0, 0, 90, [(sa.iova + 6000, 64, sa.lkey)], esz=32)
        post_send(ring_t, 0, 91, 2, [(sa.iova, 16, sa.lkey)])
        check(wait_cqes(sa.cq_ring, prod + 2) == prod + 2, "SRQ SEND completions")
        got = sorted([cqe(sa.cq_ring, prod), cqe(sa.cq_ring, prod + 1)], key=lambda x: x["wr_id"])
        check((got[0]["wr_id"], got[0]["status"], got[1]["wr_id"], got[1]["status"], got[1]["qp_num"]) == (90, 0, 91, 0, qpnt)
              or (got[0]["wr_id"], got[0]["qp_num"], got[1]["wr_id"]) == (90, qpns, 91), f"SRQ CQEs {got}")
        check(bytes(sa.buf[6000:6016]) == bytes(range(16)), "SRQ receive bytes")
        check(ld64(srq_ring, 128) == 1, "SRQ cons published")
        prod += 2
        st64(sa.cq_ring, 128, prod)
        h, b, _ = a.req("query_srq", struct.pack("<II", srq, 0))
        check(struct.unpack_from("<3I", b) == (8, 1, 0), "query_srq")
        h, _, _ = a.req("modify_srq", struct.pack("<II3I", srq, 2, 0, 0, 4))
        check(h["status"] == 0, "modify_srq limit")
        h, _, _ = a.req("destroy_srq", struct.pack("<II", srq, 0))
        check(h["status"] == ST["busy"], "destroy_srq while a QP uses it: busy")
        for op, hd in [("destroy_qp", qs), ("destroy_qp", qt), ("destroy_srq", srq)]:
            h, _, _ = a.req(op, struct.pack("<II", hd, 0))
            check(h["status"] == 0, f"{op}")
        h, b, _ = a.req("create_ah", struct.pack("<II", sa.pd, 0) + qp_attr()[44:72])
        check(h["status"] == 0, "create_ah")
        ah = struct.unpack_from("<I", b)[0]
        h, _, _ = a.req("destroy_ah", struct.pack("<II", ah, 0))
        check(h["status"] == 0, "destroy_ah")
        h, b, _ = a.req("resolve", GID)
        check(h["status"] == 0 and b[0] == 0, f"resolve our own GID: resolved {b.hex()}")

        inject_checks(a)
        cm_checks(sock)

        # ---- fuzz: framing
        b0 = Client(sock, hello=False)
        expect_error(b0, struct.pack("<IHHII", MAGIC, VERSION, OP["alloc_pd"], 16, 1), "no_hello", "request before hello")
        expect_error(a, struct.pack("<IHHII", MAGIC, VERSION, OP["hello"], 56, 9) + bytes(40), "no_hello", "second hello")
        expect_error(a, struct.pack("<IHHII", 0x12345678, VERSION, 2, 16, 1), "bad_magic", "bad magic")
        expect_error(a, struct.pack("<IHHII", MAGIC, 3, 2, 16, 1), "bad_version", "bad version")
        for op in (0, 29, 0x3FFF, 0x8001, 0xFFFF):
            expect_error(a, struct.pack("<IHHII", MAGIC, VERSION, op, 16, 1), "unknown_op", f"unknown op {op}")
        for op, n in BODY.items():
            if op == 1:
                continue
            full = struct.pack("<IHHII", MAGIC, VERSION, op, 16 + n, 3) + bytes(n)
            for cut in range(1, len(full)):  # an empty datagram is EOF on SOCK_SEQPACKET
                expect_error(a, full[:cut], "bad_length", f"op {op} cut at {cut}")
            for ln in (0, 15, 16 + n + 1, 16 + n - 1, 0xFFFFFFFF):
                bad = struct.pack("<IHHII", MAGIC, VERSION, op, ln, 3) + bytes(n)
                expect_error(a, bad, "bad_length", f"op {op} len field {ln}")
            expect_error(a, full + b"\0", "bad_length", f"op {op} one byte too many")
        expect_error(a, bytes(20000), "bad_length", "longer than kMaxMsg")
        rnd = random.Random(6)
        for i in range(300):
            data = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 300)))
            want = "bad_length" if len(data) < 16 else "bad_magic"
            expect_error(a, data, want, f"random bytes {i}")
        # fds with an op that takes none; reg_mr without, with two, unsealed, out of range
        fd = memfd(4096)
        expect_error(a, struct.pack("<IHHII", MAGIC, VERSION, OP["alloc_pd"], 16, 4), "fd_unexpected", "fd with alloc_pd", [fd])
        mr_req = lambda off, ln: struct.pack("<IHHII", MAGIC, VERSION, OP["reg_mr"], 48, 5) + struct.pack("<IIQQQ", sa.pd, 1, off, ln, 0x1000)
        expect_error(a, mr_req(0, 4096), "bad_fd", "reg_mr without fd")
        expect_error(a, mr_req(0, 4096), "bad_fd", "reg_mr with two fds", [fd, fd])
        ufd = memfd(4096, seal=False)
        expect_error(a, mr_req(0, 4096), "bad_fd", "reg_mr unsealed memfd", [ufd])
        expect_error(a, mr_req(0, 4097), "bad_fd", "reg_mr past the end", [fd])
        expect_error(a, mr_req(4096, 1), "bad_fd", "reg_mr offset at the end", [fd])
        expect_error(a, mr_req(0xFFFFFFFFFFFFF000, 0x2000), "bad_fd", "reg_mr offset+length overflows", [fd])
        expect_error(a, mr_req(0, 0), "bad_fd", "reg_mr length 0", [fd])
        rfd = os.open("/dev/null", os.O_RDONLY)
        expect_error(a, mr_req(0, 1), "bad_fd", "reg_mr with /dev/null", [rfd])
        os.close(rfd)
        os.close(ufd)
        h, _, _ = a.req("reg_mr", struct.pack("<IIQQQ", sa.pd, 2, 0, 4096, 0x1000), [fd])
        check(h["status"] == ST["invalid_argument"] and h["error"] == 0, "reg_mr remote_write without local_write: EINVAL")
        # rereg_mr (flags: 1 translation, 2 pd, 4 access): the keys stay; an fd only with a new
        # translation, then checked as reg_mr's
        h, b, _ = a.req("reg_mr", struct.pack("<IIQQQ", sa.pd, 1, 0, 4096, 0x1000), [fd])
        check(h["status"] == 0, f"reg_mr for rereg: {h}")
        mr, lkey, rkey = struct.unpack_from("<III", b)
        rr = lambda handle, flags, pd, acc, off, ln, iova: struct.pack("<IIIIQQQ", handle, flags, pd, acc, off, ln, iova)
        h, b, _ = a.req("rereg_mr", rr(mr, 4, 0, 7, 0, 0, 0))
        check(h["status"] == 0 and struct.unpack_from("<III", b) == (mr, lkey, rkey), f"rereg_mr access: ok, same keys {h} {b.hex()}")
        h, b, _ = a.req("rereg_mr", rr(mr, 1, 0, 0, 2048, 2048, 0x2000), [fd])
        check(h["status"] == 0 and struct.unpack_from("<III", b) == (mr, lkey, rkey), f"rereg_mr translation: ok, same keys {h}")
        rr_raw = lambda flags, off, ln: struct.pack("<IHHII", MAGIC, VERSION, OP["rereg_mr"], 56, 6) + rr(mr, flags, 0, 0, off, ln, 0x3000)
        expect_error(a, rr_raw(4, 0, 0), "fd_unexpected", "rereg_mr access with an fd", [fd])
        expect_error(a, rr_raw(1, 0, 4096), "bad_fd", "rereg_mr translation without fd")
        expect_error(a, rr_raw(1, 0, 4097), "bad_fd", "rereg_mr translation past the end", [fd])
        h, _, _ = a.req("rereg_mr", rr(mr + 0x1000, 4, 0, 1, 0, 0, 0))
        check(h["status"] == ST["bad_handle"], f"rereg_mr of another handle: bad_handle {h}")
        h, _, _ = a.req("rereg_mr", rr(mr, 2, 0xdead, 0, 0, 0, 0))
        check(h["status"] == ST["bad_handle"], f"rereg_mr to a PD not ours: bad_handle {h}")
        sent_bad_handles += 2
        h, _, _ = a.req("rereg_mr", rr(mr, 4, 0, 2, 0, 0, 0))
        check(h["status"] == ST["invalid_argument"], f"rereg_mr remote_write without local_write: EINVAL {h}")
        h, _, _ = a.req("rereg_mr", rr(mr, 0, 0, 0, 0, 0, 0))
        check(h["status"] == ST["invalid_argument"], f"rereg_mr no flags: EINVAL {h}")
        h, _, _ = a.req("dereg_mr", struct.pack("<II", mr, 0))
        check(h["status"] == 0, f"dereg_mr after rereg: {h}")
        # enum and bool fields
        h, _, _ = a.req("create_qp", struct.pack("<IIII5IBB2x", sa.pd, sa.cq, sa.cq, 0, 4, 4, 1, 1, 0, 9, 0))
        check(h["error"] == ERR["bad_field"], "create_qp type 9: bad_field")
        sent_errors["bad_field"] += 1
        bad_attr = bytearray(qp_attr(state=6))
        bad_attr[69] = 7  # ah_attr.is_global
        h, _, _ = a.req("modify_qp", struct.pack("<II", sa.qp, 1) + bytes(bad_attr))
        check(h["error"] == ERR["bad_field"], "modify_qp bool 7: bad_field")
        sent_errors["bad_field"] += 1
        h, _, _ = a.req("read_counters", struct.pack("<B3xI", 9, 0))
        check(h["error"] == ERR["bad_field"], "read_counters set 9: bad_field")
        sent_errors["bad_field"] += 1

        # ---- thousands of well-framed requests with random fields (handles not ours)
        handle_ops = {6, 8, 10, 11, 12, 14, 15, 16, 18, 19, 20, 22}
        own = {sa.pd, sa.mr, sa.cq, sa.qp, q2}
        for i in range(3000):
            # no create (would fill tables), no rereg_mr (its fd rules are checked above)
            op = rnd.choice([o for o in BODY if o not in (1, 5, 7, 9, 13, 17, 21, 26)])
            body = bytearray(rnd.getrandbits(8) for _ in range(BODY[op]))
            if op in handle_ops and struct.unpack_from("<I", body)[0] in own:
                continue
            h, _, f = a.req(op, bytes(body))
            for x in f:
                os.close(x)
            if op in handle_ops:
                ok = h["status"] == ST["bad_handle"] or h["error"] == ERR["bad_field"]
                check(ok, f"random op {op}: {h}")
                if h["status"] == ST["bad_handle"] and h["error"] == 0:
                    sent_bad_handles += 1
                else:
                    sent_errors["bad_field"] += 1
            else:  # no handle: query_device/port/gid, read_counters, res_list, resolve
                check(h["error"] in (0, ERR["bad_field"]) and h["status"] in (ST["ok"], ST["invalid_argument"]) and not f,
                      f"random op {op}: {h} fds {f}")
                if h["error"] == ERR["bad_field"]:
                    sent_errors["bad_field"] += 1
            if failures:
                break

        # ---- foreign handles: a second client uses the first's
        bc = Client(sock, comm=b"other")
        for op, body in [("dealloc_pd", struct.pack("<II", sa.pd, 0)), ("dereg_mr", struct.pack("<II", sa.mr, 0)),
                         ("destroy_cq", struct.pack("<II", sa.cq, 0)), ("resize_cq", struct.pack("<Ii", sa.cq, 128)),
                         ("req_notify_cq", struct.pack("<IB3x", sa.cq, 0)), ("destroy_qp", struct.pack("<II", sa.qp, 0)),
                         ("modify_qp", struct.pack("<II", sa.qp, 1) + qp_attr(state=6)),
                         ("query_qp", struct.pack("<II", sa.qp, 0)),
                         ("reg_mr", struct.pack("<IIQQQ", sa.pd, 1, 0, 4096, 0x1000)),
                         ("create_cq", None),
                         ("create_qp", struct.pack("<IIII5IBB2x", sa.pd, sa.cq, sa.cq, 0, 4, 4, 1, 1, 0, 2, 0)),
                         ("create_srq", struct.pack("<II3I", sa.pd, 0, 16, 1, 0)),
                         ("create_ah", struct.pack("<II", sa.pd, 0) + qp_attr()[44:72])]:
            if body is None:
                continue
            h, _, _ = bc.req(op, body, [fd] if op == "reg_mr" else ())
            check(h["status"] == ST["bad_handle"], f"foreign handle {op}: {h}")
            sent_bad_handles += 1
        check(query_state(a, sa.qp) == 3, "the owner's QP untouched by the other client")
        # the other client's own object, and its QP using the first's CQ
        h, b, _ = bc.req("alloc_pd")
        bpd = struct.unpack_from("<I", b)[0]
        h, _, _ = bc.req("create_qp", struct.pack("<IIII5IBB2x", bpd, sa.cq, sa.cq, 0, 4, 4, 1, 1, 0, 2, 0))
        check(h["status"] == ST["bad_handle"], "QP on a foreign CQ")
        sent_bad_handles += 1

        # the other client's SEND naming the first one's lkey: refused (IBV_WC_LOC_PROT_ERR), QP to ERR
        sb = Setup(bc)
        qb2, qpnb2, _, _ = sb.make_qp()
        to_rts(bc, sb.qp, qpnb2)
        to_rts(bc, qb2, sb.qpn)
        post_send(sb.sq_ring, 0, 66, 2, [(sa.iova, 8, sa.lkey)])
        check(wait_cqes(sb.cq_ring, 1) == 1 and (cqe(sb.cq_ring, 0)["wr_id"], cqe(sb.cq_ring, 0)["status"]) == (66, 4),
              f"foreign lkey: LOC_PROT_ERR {cqe(sb.cq_ring, 0)}")
        check(query_state(bc, sb.qp) == 6, "foreign lkey: QP in ERR")
        sent_bad_wqes = 1

        # ---- UD through an AH; another client's AH handle in a WQE is refused
        u1, un1, uring1, _ = sa.make_qp(qp_type=4)
        u2, un2, uring2, _ = sa.make_qp(qp_type=4)
        # A controlled Q_Key (bit 31) is for privileged consumers: EPERM, as Linux's uverbs modify_qp
        # answers without CAP_NET_RAW; the QP stays where it was.
        h = modify(a, u1, 1 | 1 << 4 | 1 << 5 | 1 << 6, state=1, qkey=0x80000001)
        check(h["status"] == ST["permission_denied"], f"UD to INIT with Q_Key 0x80000001: EPERM {h}")
        check(query_state(a, u1) == 0, "controlled Q_Key refused: QP still in RESET")
        for q in (u1, u2):
            check(modify(a, q, 1 | 1 << 4 | 1 << 5 | 1 << 6, state=1, qkey=0x1111)["status"] == 0, "UD to INIT")
            check(modify(a, q, 1, state=2)["status"] == 0, "UD to RTR")
            check(modify(a, q, 1 | 1 << 16, state=3, sq_psn=5)["status"] == 0, "UD to RTS")
        h = modify(a, u1, 1 << 6, qkey=0x80001111)
        check(h["status"] == ST["permission_denied"], f"RTS -> RTS with Q_Key 0x80001111: EPERM {h}")
        h, b, _ = a.req("query_qp", struct.pack("<II", u1, 0))
        check(h["status"] == 0 and struct.unpack_from("<I", b, 4)[0] == 0x1111, "the QP kept its Q_Key 0x1111")
        h, b, _ = a.req("create_ah", struct.pack("<II", sa.pd, 0) + qp_attr()[44:72])
        ah = struct.unpack_from("<I", b)[0]
        sa.buf[200:232] = bytes(range(100, 132))
        prod = ld64(sa.cq_ring, 64)
        post_recv(uring2, 4096, 0, 301, [(sa.iova + 7000, 40 + 32, sa.lkey)])
        post_send(uring1, 0, 300, 2, [(sa.iova + 200, 32, sa.lkey)], ah=ah, rqpn=un2, qkey=0x1111)
        check(wait_cqes(sa.cq_ring, prod + 2) == prod + 2, "UD SEND completions")
        got = sorted([cqe(sa.cq_ring, prod), cqe(sa.cq_ring, prod + 1)], key=lambda x: x["wr_id"])
        check((got[0]["wr_id"], got[0]["status"], got[1]["wr_id"], got[1]["status"], got[1]["byte_len"], got[1]["src_qp"])
              == (300, 0, 301, 0, 72, un1), f"UD CQEs {got}")
        check(bytes(sa.buf[7040:7072]) == bytes(range(100, 132)), "UD payload after the GRH space")
        prod += 2
        h, b, _ = bc.req("create_ah", struct.pack("<II", bpd, 0) + qp_attr()[44:72])
        foreign_ah = struct.unpack_from("<I", b)[0]
        post_send(uring1, 1, 302, 2, [(sa.iova + 200, 32, sa.lkey)], ah=foreign_ah, rqpn=un2, qkey=0x1111)
        check(wait_cqes(sa.cq_ring, prod + 1) == prod + 1 and (cqe(sa.cq_ring, prod)["wr_id"], cqe(sa.cq_ring, prod)["status"]) == (302, 2),
              f"foreign AH in a UD WQE: LOC_QP_OP_ERR {cqe(sa.cq_ring, prod)}")
        check(query_state(a, u1) == 5, "foreign AH: UD QP in SQE (IBTA 10.3.1: UD send errors stop the send queue only)")
        sent_bad_wqes += 1
        prod = ld64(sa.cq_ring, 64)
        st64(sa.cq_ring, 128, prod)
        for op, hd in [("destroy_qp", u1), ("destroy_qp", u2), ("destroy_ah", ah)]:
            check(a.req(op, struct.pack("<II", hd, 0))[0]["status"] == 0, f"UD cleanup {op}")

        # ---- hostile rings: prod far beyond cap; a garbage WQE
        st64(ring2, 64, 1000)
        deadline = time.time() + 5
        while query_state(a, q2) != 6 and time.time() < deadline:
            time.sleep(0.01)
        check(query_state(a, q2) == 6, "hostile SQ prod: QP in ERR")
        ev = wait_event(a, EV_ASYNC)
        check(ev is not None and struct.unpack_from("<B3xI", ev) == (1, qpn2), f"async event QP_FATAL for QPN {qpn2}: {ev}")
        check(struct.unpack_from("<I", ring2, 192)[0] & 2, "hostile SQ prod: kRingError set")
        q3, qpn3, ring3, _ = sa.make_qp()
        to_rts(a, q3, sa.qpn)
        garbage = bytearray(rnd.getrandbits(8) for _ in range(144))
        garbage[8] = 200  # no such opcode
        st64(garbage, 0, 999)
        ring3[256:256 + 144] = bytes(garbage)
        cq_prod0 = ld64(sa.cq_ring, 64)
        st64(ring3, 64, 1)
        deadline = time.time() + 5
        while ld64(sa.cq_ring, 64) == cq_prod0 and time.time() < deadline:
            time.sleep(0.01)
        i = cq_prod0 % 64
        wr_id, status = struct.unpack_from("<QB", sa.cq_ring, 256 + 64 * i)
        check((wr_id, status) == (999, 2), f"garbage WQE: IBV_WC_LOC_QP_OP_ERR CQE, got {(wr_id, status)}")
        check(query_state(a, q3) == 6, "garbage WQE: QP in ERR")
        # a header word changed under the daemon (cap), then a doorbell: the ring is hostile
        q4, qpn4, ring4, _ = sa.make_qp()
        to_rts(a, q4, sa.qpn)
        struct.pack_into("<I", ring4, 8, 100000)
        st64(ring4, 64, 1)
        deadline = time.time() + 5
        while query_state(a, q4) != 6 and time.time() < deadline:
            time.sleep(0.01)
        check(query_state(a, q4) == 6 and struct.unpack_from("<I", ring4, 192)[0] & 2, "changed ring header: QP in ERR, kRingError")
        check(a.req("destroy_qp", struct.pack("<II", q4, 0))[0]["status"] == 0, "destroy the hostile QP")
        time.sleep(0.1)

        # ---- the daemon still serves a fresh client a whole lifecycle
        fc = Client(sock, comm=b"fresh")
        sf = Setup(fc)
        for op, hd in [("destroy_qp", sf.qp), ("destroy_cq", sf.cq), ("dereg_mr", sf.mr), ("dealloc_pd", sf.pd)]:
            h, _, _ = fc.req(op, struct.pack("<II", hd, 0))
            check(h["status"] == 0, f"fresh client {op}: {h}")
        o = objects(fc)
        check(not any(x["client"] == fc.id for k in o for x in o[k]), "fresh client's objects all gone")

        # ---- the daemon's counters, exactly
        dc = counters(fc, 3)
        for k, v in sent_errors.items():
            if k in ("ok",):
                continue
            check(dc.get("err_" + k) == v, f"daemon counter err_{k}: {dc.get('err_' + k)} != {v}")
        check(dc["bad_handle"] == sent_bad_handles, f"bad_handle {dc['bad_handle']} != {sent_bad_handles}")
        check(dc["rings_in_error"] == 2 and dc["bad_wqes"] == sent_bad_wqes + 1, f"rings_in_error {dc['rings_in_error']} bad_wqes {dc['bad_wqes']}")
        # 4 connected, and cm_checks' two that came and went.
        check(dc["clients_total"] == 6 and dc["clients_connected"] == 4, f"clients {dc['clients_total']} {dc['clients_connected']}")
        print("daemon counters:", {k: v for k, v in dc.items() if v}, flush=True)
        dev = counters(fc, 0)
        check(dev.get("sent_pkts", 0) >= 2, f"device counters: sent_pkts {dev.get('sent_pkts')}")
        net = counters(fc, 2)
        check("tx_frames" in net and "up_events" in net, "link counters")

        # ---- res_list while a holds objects; then a disconnects: nothing of it is left
        o = objects(fc)
        mine = [x for x in o["qp"] if x["client"] == a.id]
        check(len(mine) == 3 and {x["state"] for x in mine} == {"RTS", "ERR"}, f"res qp: {mine}")
        check(all(x["comm"] == "pytest" and x["pid"] == os.getpid() for x in mine), "res: comm and pid")
        mr = [x for x in o["mr"] if x["client"] == a.id]
        check(len(mr) == 1 and mr[0]["iova"] == hex(sa.iova) and mr[0]["length"] == "8192", f"res mr: {mr}")
        gauges_match(fc, o, "while a holds objects")
        a.close()
        time.sleep(0.3)
        o = objects(fc)
        check(not any(x["client"] == a.id for k in o for x in o[k]), f"disconnected client's objects remain: {o}")
        gauges_match(fc, o, "after a's disconnect")
        dc = counters(fc, 3)
        # cm_checks' two clients (one CM id left), then a.
        check(dc["clients_cleaned"] == 3 and dc["objects_cleaned"] == 1 + 6, f"cleaned {dc['clients_cleaned']} {dc['objects_cleaned']}")

        # ---- a client SIGKILLed with WRITEs in flight: its objects go, the others' stay
        before = objects(fc)
        kid = subprocess.Popen([sys.executable, __file__, "--child", sock], stdout=subprocess.PIPE, text=True)
        check(kid.stdout.readline().strip() == "ready", "victim ready")
        time.sleep(0.3)
        o = objects(fc)
        victim = [x for x in o["qp"] if x["comm"] == "victim"]
        check(len(victim) == 2 and all(x["state"] == "RTS" for x in victim), f"victim's QPs: {victim}")
        kid.kill()
        kid.wait()
        deadline = time.time() + 5
        while time.time() < deadline and any(x["comm"] == "victim" for k, v in objects(fc).items() for x in v):
            time.sleep(0.05)
        check(objects(fc) == before, "victim's objects all gone, the rest as before")
        dc = counters(fc, 3)
        check(dc["clients_cleaned"] == 4 and dc["objects_cleaned"] == 1 + 6 + 5, f"cleaned {dc['clients_cleaned']} {dc['objects_cleaned']}")
        sf2 = Setup(fc)
        check(query_state(fc, sf2.qp) == 0, "the daemon still serves")

        # ---- start-up errors
        r = subprocess.run([HCAEMUD, "--socket", sock, "--eal", "--no-huge"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and "taken" in r.stderr, f"socket taken: {r.returncode} {r.stderr}")
        r = subprocess.run([HCAEMUD, "--bogus"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 2 and "bad argument" in r.stderr, f"bad option: {r.returncode} {r.stderr}")
        r = subprocess.run([HCAEMUD, "--socket-mode", "999"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 2, f"bad mode: {r.returncode}")
        r = subprocess.run([HCAEMUD, "--socket", "/nonexistent-dir/x.sock"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and "writable" in r.stderr, f"unwritable dir: {r.returncode} {r.stderr}")
        s2 = os.path.join(d, "s2.sock")
        r = subprocess.run([HCAEMUD, "--socket", s2, "--eal", "--no-huge --bogus-eal-arg"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and "EAL" in r.stderr and not os.path.exists(s2), f"bad EAL: {r.returncode} {r.stderr}")
        eal = f"--no-huge -m 128 --no-pci --no-shconf -l 0 --no-telemetry --file-prefix hcaemud-np-{os.getpid()} --vdev=net_ring_np{os.getpid() % 10000}"
        r = subprocess.run([HCAEMUD, "--socket", s2, "--eal", eal, "--dpdk-port", "net_nosuch0"], capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and "net_nosuch0" in r.stderr and not os.path.exists(s2), f"no such port: {r.returncode} {r.stderr}")
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stale.bind(s2)
        stale.close()
        p2, log2 = start_daemon(d, s2, extra=("--max-clients", "1", "--max-objects", "2", "--inject",
                                              "drop dir=rx qp=0xfffffe op=WRITE_MIDDLE"), name="q")
        log2.seek(0)
        text = log2.read()
        check("removed the stale socket" in text and "serving" in text and p2.poll() is None, "stale socket removed")
        one = Client(s2)
        h, total, rules = inject_list(one)
        check(total == 1 and rules == [(1, 0, 0, "drop dir=rx qp=0xfffffe op=RC_RDMA_WRITE_MIDDLE count=1")],
              f"--inject at start: listed {rules}")
        r = subprocess.run([HCAEMUD, "--socket", os.path.join(d, "x.sock"), "--inject", "drop dir=rx nth=0"],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and "nth=0: out of range" in r.stderr and not os.path.exists(os.path.join(d, "x.sock")),
              f"--inject with a bad rule: {r.returncode} {r.stderr}")
        two = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        two.settimeout(5)
        two.connect(s2)
        check(two.recv(100) == b"", "--max-clients 1: the second client is closed")
        two.close()
        for i in range(2):
            check(one.req("alloc_pd")[0]["status"] == 0, f"--max-objects 2: PD {i}")
        h, _, _ = one.req("alloc_pd")
        check((h["status"], h["error"]) == (ST["no_resources"], ERR["limit"]), f"--max-objects 2: third PD {h}")
        one.close()
        p2.send_signal(signal.SIGINT)
        check(p2.wait(timeout=20) == 0 and not os.path.exists(s2), "SIGINT: exit 0, socket gone")

        # ---- SIGTERM: a connected client is told
        p.send_signal(signal.SIGTERM)
        fc.s.settimeout(10)
        got = None
        try:
            while got is None:
                msg = fc.s.recv(1000)
                if not msg:
                    break
                op = struct.unpack_from("<H", msg, 6)[0]
                if op == EV_SHUTDOWN:
                    got = msg
        except OSError:
            pass
        check(got is not None and len(got) == 24, "SIGTERM: Ev::shutdown received")
        check(p.wait(timeout=20) == 0, "SIGTERM: exit 0")
        check(not os.path.exists(sock), "SIGTERM: socket removed")
        review_checks(d)
        for lg in (log, log2):
            lg.seek(0)
            text = lg.read()
            check(not any(w in text for w in ("runtime error", "AddressSanitizer", "LeakSanitizer")),
                  "no sanitizer report in the daemon's log")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.seek(0)
        if failures:
            print("---- daemon log\n" + log.read()[-3000:])
    if not failures:
        import shutil
        shutil.rmtree(d, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    sys.exit(main())
