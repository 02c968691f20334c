#!/usr/bin/python3
"""libhcaemu's protocol client (tools/libhcaemu/client.cpp) against a fake hcaemud written here from
proto.hpp's layouts: a daemon that hangs up, one that never answers, one that sends stray and
malformed messages before each reply, and paged read_counters/res_list replies. The client is
`daemon_node res SOCK`: it opens the device, lists every object and prints every counter.

Checks: the client fails (exit 1, a message naming the failure) instead of hanging when the daemon
hangs up or stays silent; stray replies and malformed messages are dropped and counted exactly
(client_replies_dropped, client_events_dropped); pages are joined in order, names and values
exact; CQ rings that cannot be used (a file shorter than the ring, a bad header) refused, with
every fd closed and the CQ destroyed, and a good ring polled without a syscall."""
import argparse
import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

MAGIC = 0x45414348
VERSION = 2
REPLY = 0x8000
OP = {name: i + 1 for i, name in enumerate([
    'hello', 'query_device', 'query_port', 'query_gid', 'alloc_pd', 'dealloc_pd', 'reg_mr', 'dereg_mr',
    'create_cq', 'destroy_cq', 'resize_cq', 'req_notify_cq', 'create_qp', 'destroy_qp', 'modify_qp',
    'query_qp', 'create_srq', 'destroy_srq', 'modify_srq', 'query_srq', 'create_ah', 'destroy_ah',
    'read_counters', 'res_list', 'resolve'])}
EV_CQ, EV_ASYNC = 0x4001, 0x4002
RES_KINDS = ['pd', 'mr', 'cq', 'qp', 'srq']
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print('FAIL:', what)


def hdr(op, length, seq, magic=MAGIC):
    return struct.pack('<IHHII', magic, VERSION, op, length, seq)


def reply(op, seq, body=b'', status=0, error=0):
    return hdr(op | REPLY, 24 + len(body), seq) + struct.pack('<BBHI', status, error, 0, 0) + body


def port_attr():
    # PortAttr: state, max_mtu, active_mtu, pad, link_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
    # pkey_tbl_len, link_layer, pad (24 bytes)
    return struct.pack('<BBBxIiIIHBx', 4, 5, 3, 1500, 4, 0, 0x80000000, 1, 2)


def counters_page(names, start, total, cut):
    # CountersRep: total, n, NameValue[128] {char name[40]; uint64 value}
    body = struct.pack('<II', total, len(names))
    for i, n in enumerate(names):
        body += struct.pack('<40sQ', n.encode(), 1000 + start + i)
    if not cut:
        body += b'\0' * (48 * (128 - len(names)))
    return body


def res_page(kind, start, n, total):
    body = struct.pack('<II', total, n)
    for i in range(n):
        k = start + i
        attrs = [('handle', str(0x100 + k)), ('kind', kind)]
        obj = struct.pack('<II32sII', 7, 4000 + k, b'fakeclient', len(attrs), 0)
        for a, v in attrs:
            obj += struct.pack('<16s24s', a.encode(), v.encode())
        obj += b'\0' * (40 * (16 - len(attrs)))
        body += obj
    body += b'\0' * (688 * (16 - n))
    return body


N_COUNTERS = 130  # two pages: 128 + 2
N_QPS = 17        # two pages: 16 + 1


RING_MAGIC = 0x474E4952
CQ_RING_BYTES = 4096  # shm::ring_bytes(16, 64)


class CqFake:
    """create_cq replies: a memfd shorter than ring_bytes (with a second, unasked-for fd), a ring
    with a bad magic, then a good ring holding one CQE."""
    def __init__(self):
        self.made, self.destroyed, self.maps = 0, [], []

    def create(self, conn, seq):
        k = self.made
        self.made += 1
        fd = os.memfd_create('fake-cq', os.MFD_CLOEXEC)
        os.ftruncate(fd, CQ_RING_BYTES)
        mm = mmap.mmap(fd, CQ_RING_BYTES)
        struct.pack_into('<IIII', mm, 0, RING_MAGIC if k != 1 else 0x12345678, 4, 16, 64)
        claimed = CQ_RING_BYTES * 2 if k == 0 else CQ_RING_BYTES
        fds = [fd]
        if k == 0:
            fds.append(os.memfd_create('fake-extra', os.MFD_CLOEXEC))
        socket.send_fds(conn, [reply(OP['create_cq'], seq, struct.pack('<IiQ', 0x100 + k, 16, claimed))], fds)
        for f in fds:
            os.close(f)
        if k == 2:  # one CQE, then the doorbell
            struct.pack_into('<QBBBBIIIIIIHH16s8s', mm, 256, 4242, 0, 128, 0, 0, 0, 77, 0, 0x11, 0, 0, 0, 0,
                             b'\0' * 16, b'\0' * 8)
            struct.pack_into('<Q', mm, 64, 1)
        self.maps.append(mm)


def serve(conn, hostile, cqf=None):
    """Answers one client until it hangs up; returns how many requests it saw."""
    seen = 0
    while True:
        try:
            data = conn.recv(65536)
        except OSError:
            return seen
        if not data:
            return seen
        seen += 1
        magic, ver, op, length, seq = struct.unpack_from('<IHHII', data)
        assert magic == MAGIC and ver == VERSION and length == len(data), (magic, ver, length, len(data))
        if hostile and op == OP['hello']:
            conn.send(reply(op, seq + 1, struct.pack('<II16siI', 1, 64, b'\0' * 16, 1, 0)))  # another seq
            conn.send(b'\x01\x02\x03\x04\x05')                                               # shorter than a header
            conn.send(hdr(op | REPLY, 24, seq, magic=0xDEADBEEF) + b'\0' * 8)                # bad magic
            conn.send(hdr(EV_CQ, 32, 0) + struct.pack('<IIQ', 999, 0, 0))                    # event for no CQ
            conn.send(hdr(EV_ASYNC, 24, 0) + struct.pack('<BxxxI', 1, 5))                    # a good async event
            conn.send(reply(OP['query_device'], seq))                                        # the right seq, another op
        if op == OP['hello']:
            gid = bytes(10) + b'\xff\xff' + bytes([198, 18, 0, 1])
            conn.send(reply(op, seq, struct.pack('<II16siI', 1, 64, gid, 1, 0)))
        elif op == OP['query_device']:
            conn.send(reply(op, seq, b'fake'.ljust(32, b'\0') + b'\0' * 120))
        elif op == OP['query_port']:
            conn.send(reply(op, seq, port_attr()))
        elif op == OP['res_list']:
            kind, start = struct.unpack_from('<B3xI', data, 16)
            n = 0
            if RES_KINDS[kind] == 'qp':
                n = min(16, N_QPS - start)
            conn.send(reply(op, seq, res_page(RES_KINDS[kind], start, n, N_QPS if RES_KINDS[kind] == 'qp' else 0)))
        elif op == OP['create_cq'] and cqf:
            cqf.create(conn, seq)
        elif op == OP['destroy_cq'] and cqf:
            cqf.destroyed.append(struct.unpack_from('<II', data, 16))
            conn.send(reply(op, seq))
        elif op == OP['read_counters']:
            cset, start = struct.unpack_from('<B3xI', data, 16)
            if cset == 0:
                names = ['c%03d' % i for i in range(start, min(start + 128, N_COUNTERS))]
                conn.send(reply(op, seq, counters_page(names, start, N_COUNTERS, cut=start > 0)))
            else:
                conn.send(reply(op, seq, counters_page([], 0, 0, cut=True)))
        else:
            conn.send(reply(op, seq, status=5))  # not_supported


def run_case(node, name, behaviour, bound, mode='res', cqf=None):
    with tempfile.TemporaryDirectory(prefix='hcaemu-fake-') as d:
        path = os.path.join(d, 'fake.sock')
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        srv.bind(path)
        srv.listen(1)
        srv.settimeout(10)
        t0 = time.monotonic()
        p = subprocess.Popen([node, mode, path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        conn, _ = srv.accept()
        if behaviour == 'hangup':
            conn.recv(65536)
            conn.close()
        elif behaviour == 'silent':
            conn.recv(65536)
        else:
            serve(conn, behaviour == 'hostile', cqf)
        try:
            out, _ = p.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            check(False, '%s: the client did not finish within %d s' % (name, bound))
        took = time.monotonic() - t0
        conn.close()
        srv.close()
        print('--- %s: exit %d after %.1f s' % (name, p.returncode, took))
        print(out, end='')
        return p.returncode, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--node', required=True)
    a = ap.parse_args()

    rc, out = run_case(a.node, 'hangup', 'hangup', 30)
    check(rc == 1 and 'hello to' in out and 'bad_handle (no answer or connection closed)' in out,
          'hangup: exit 1 naming the closed connection')

    rc, out = run_case(a.node, 'silent', 'silent', 40)
    check(rc == 1 and 'bad_handle (no answer or connection closed)' in out,
          'silent daemon: exit 1 after the call deadline, not a hang')

    for behaviour in ('good', 'hostile'):
        rc, out = run_case(a.node, behaviour, behaviour, 30)
        check(rc == 0, '%s: exit 0' % behaviour)
        lines = out.splitlines()
        stats = [l.split() for l in lines if l.startswith('stat ')]
        check(len(stats) == N_COUNTERS, '%s: %d device counters, expected %d' % (behaviour, len(stats), N_COUNTERS))
        check(all(s[1] == 'c%03d' % i and s[2] == str(1000 + i) for i, s in enumerate(stats)),
              '%s: counters in order with exact names and values' % behaviour)
        qps = [l for l in lines if l.startswith('res qp ')]
        check(len(qps) == N_QPS, '%s: %d QPs listed, expected %d' % (behaviour, len(qps), N_QPS))
        check(all(q == 'res qp 7 %d fakeclient handle=%d kind=qp' % (4000 + i, 0x100 + i) for i, q in enumerate(qps)),
              '%s: QP entries exact' % behaviour)
        check(not [l for l in lines if l.startswith('res ') and not l.startswith('res qp ')],
              '%s: no entries of other kinds' % behaviour)
        dropped = 4 if behaviour == 'hostile' else 0
        check('daemon client_replies_dropped %d' % dropped in lines,
              '%s: client_replies_dropped %d' % (behaviour, dropped))
        check('daemon client_events_dropped %d' % (1 if behaviour == 'hostile' else 0) in lines,
              '%s: client_events_dropped' % behaviour)

    cqf = CqFake()
    rc, out = run_case(a.node, 'cq rings', 'good', 30, mode='cq', cqf=cqf)
    lines = out.splitlines()
    check(rc == 0, 'cq: exit 0')
    check(lines[:3] == ['create_cq 0 invalid_argument', 'create_cq 1 invalid_argument', 'create_cq 2 ok'],
          'cq: a ring shorter than its file claims and a bad header refused, a good one taken')
    check('wc 4242 IBV_WC_SUCCESS RECV 77' in lines, 'cq: the CQE written by the fake daemon polled exactly')
    check('destroy_cq ok' in lines, 'cq: destroy_cq ok')
    check(sorted(h for h, _ in cqf.destroyed) == [0x100, 0x101, 0x102],
          'cq: every CQ the daemon made destroyed, the refused ones too: %s' % cqf.destroyed)
    cons = struct.unpack_from('<Q', cqf.maps[2], 128)[0]
    check(cons == 1, 'cq: the client stored cons 1 after taking the CQE (%d)' % cons)
    fdl = [l.split() for l in lines if l.startswith('fds ')]
    check(len(fdl) == 1 and fdl[0][1] == fdl[0][2], 'cq: no fd left open by the refused rings or the extra fd: %s' % fdl)

    if FAILS:
        print('%d check(s) failed' % len(FAILS))
        return 1
    print('all client protocol checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
