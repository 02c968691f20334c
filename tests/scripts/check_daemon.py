#!/usr/bin/python3
"""hcaemud with libhcaemu clients (tests/daemon_node.cpp), all on one daemon whose port loops frames
for its own address back, so that two clients' QPs connect to each other:

  pair    two clients, RC both ways: SEND, WRITE, READ, CmpSwap, FetchAdd byte-exact, exact CQEs,
          a completion event on the armed receive CQ; the device counters' deltas
  refuse  a client names another's PD/CQ (bad_handle), uses its lkey (local protection error) and
          an rkey of its MR on another PD (remote access error); the owner's memory unchanged
  stream  a client SIGKILLed mid-transfer: its objects gone from res_list, its peer sees retry
          exceeded, recreates its QP (on an SRQ) and takes a byte-exact transfer from a new client
  ud      UD SENDs through an AH (one inline): GRH, src_qp, payload byte-exact
  bigmr   a 1 GiB reg_mr while another client reads the counters: answered during the mapping
then SIGTERM with a client holding objects: the client sees alive() false and typed failures;
the daemon exits 0 and removes its socket. Last, a second daemon whose stderr is a 4 KiB pipe
nobody reads, then nobody can read, its port a memif server logging at debug. Each part is bounded (60 s)."""
import argparse
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

FAILS = []
LIMIT = 60


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print('FAIL:', what, flush=True)
    return cond


def wait_for(pred, seconds, step=0.05):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Nodes:
    def __init__(self, node, sock):
        self.node, self.sock, self.procs = node, sock, []

    def start(self, mode, d, role):
        p = subprocess.Popen([self.node, mode, self.sock, d, role], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        p.tag = '%s %s' % (mode, role)
        self.procs.append(p)
        return p

    def start_args(self, mode, args):
        p = subprocess.Popen([self.node, mode] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        p.tag = mode
        self.procs.append(p)
        return p

    def finish(self, p, expect_ok=True):
        try:
            out, _ = p.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            check(False, '%s: not done within %d s' % (p.tag, LIMIT))
        print('--- %s (exit %s)\n%s' % (p.tag, p.returncode, out), end='', flush=True)
        if expect_ok:
            check(p.returncode == 0 and ('OK ' + p.tag) in out, '%s: exit 0 and OK' % p.tag)
        return out

    def res(self):
        r = subprocess.run([self.node, 'res', self.sock], capture_output=True, text=True, timeout=LIMIT)
        if not check(r.returncode == 0, 'res: exit 0 (%s)' % r.stdout.strip()[-200:]):
            return [], {}, {}
        objs = [l.split() for l in r.stdout.splitlines() if l.startswith('res ')]
        stats = {l.split()[1]: int(l.split()[2]) for l in r.stdout.splitlines() if l.startswith('stat ')}
        dstats = {l.split()[1]: int(l.split()[2]) for l in r.stdout.splitlines() if l.startswith('daemon ')}
        return objs, stats, dstats

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def objects_of(objs, pid):
    return [o for o in objs if o[3] == str(pid)]


def ring_mappings(pid, kinds='cq|qp|srq'):
    """The hcaemu-<kinds> memfd mappings of a process: (name, Size kB, Rss kB) from its smaps."""
    out, cur = [], None
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            parts = line.split()
            if re.match(r'^[0-9a-f]+-[0-9a-f]+$', parts[0] if parts else ''):
                name = ' '.join(parts[5:])
                cur = [name, 0, 0] if re.search(r'/memfd:hcaemu-(%s)\b' % kinds, name) else None
                if cur:
                    out.append(cur)
            elif cur and parts[0] in ('Size:', 'Rss:'):
                cur[1 if parts[0] == 'Size:' else 2] = int(parts[1])
    return [tuple(x) for x in out]


def start_daemon(a, sock, prefix, out, vdev='net_ring0', log_level='lib.eal:error'):
    """hcaemud on one lcore, its stdout and stderr to out."""
    eal = ('--no-huge -m 256 --no-pci --no-shconf -l 0 --no-telemetry --log-level %s '
           '--file-prefix %s-%d --vdev=%s' % (log_level, prefix, os.getpid(), vdev))
    return subprocess.Popen([a.hcaemud, '--socket', sock, '--eal', eal, '--ip', '198.18.0.1/24'],
                            stdout=out, stderr=subprocess.STDOUT if out == subprocess.PIPE else out,
                            text=out == subprocess.PIPE)


def memif_hellos(path, n):
    """n connections to a memif server's socket, each closed once its HELLO (128 bytes) came: how
    many came within 2 s each. DPDK's memif logs each on its interrupt thread (at debug)."""
    got = 0
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(2)
        try:
            s.connect(path)
            if len(s.recv(256)) == 128:
                got += 1
        except OSError:
            pass
        finally:
            s.close()
    return got


def check_unread_log(a, tmp):
    """hcaemud's stderr on a pipe nobody reads (4 KiB): it keeps answering once the pipe is full,
    writes every waiting line in order once it is read, and drops (and counts) lines, without
    dying, once the reader is gone. Its port is a memif server logging at debug: DPDK's own lines,
    written on DPDK's interrupt thread, wait like the daemon's and never stop that thread."""
    sock = os.path.join(tmp, 'unread.sock')
    msock = os.path.join(tmp, 'unread-memif.sock')
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page
    daemon = start_daemon(a, sock, 'hcaemud-unread', w, vdev='net_memif0,role=server,socket=%s,socket-abstract=no' % msock,
                          log_level='lib.eal:error --log-level pmd.net.memif:debug')
    os.close(w)
    nodes = Nodes(a.node, sock)
    got = b''
    try:
        if not check(wait_for(lambda: os.path.exists(sock) or daemon.poll() is not None, 30) and daemon.poll() is None,
                     'unread log: hcaemud listening on %s' % sock):
            return
        n = 150  # ~70 bytes a line: 10 KiB, more than the pipe holds
        hello = nodes.start_args('hello', [sock, str(n)])
        nodes.finish(hello)
        k = 40  # each 3 lines of memif's, ~170 bytes: more than the pipe holds
        hellos = memif_hellos(msock, k)
        check(hellos == k, 'unread log: memif answered %d of %d connections with its log full' % (hellos, k))
        _, _, d1 = nodes.res()
        check(d1.get('notes_dropped', -1) == 0, 'unread log: nothing dropped while lines wait (%s)'
              % d1.get('notes_dropped'))
        os.set_blocking(r, False)
        end = time.time() + LIMIT
        accepted = b'Connection request accepted'
        while (got.count(b' gone: ') < n + 1 or got.count(accepted) < k) and time.time() < end:
            try:
                got += os.read(r, 65536)
            except BlockingIOError:
                time.sleep(0.02)
        gone = [int(m) for m in re.findall(rb'hcaemud: client (\d+) \(pid \d+, [^)]*\) gone: ', got)]
        check(len(gone) == n + 1 and gone == sorted(gone) and len(set(gone)) == len(gone),
              'unread log: every waiting line written in order once read: %d of %d' % (len(gone), n + 1))
        last_hello = [m.start() for m in re.finditer(b' gone: ', got)][n - 1:n] or [len(got)]
        check(got.count(accepted) == k and got.find(accepted) > last_hello[0],
              'unread log: memif\'s %d of %d lines written, after the clients\' lines' % (got.count(accepted), k))
        os.close(r)
        r = -1
        hello = nodes.start_args('hello', [sock, '3'])
        nodes.finish(hello)
        hellos = memif_hellos(msock, 3)
        _, _, d2 = nodes.res()
        check(daemon.poll() is None and hellos == 3,
              'unread log: hcaemud and memif (%d of 3) alive after the log\'s reader went away' % hellos)
        # 3 hello clients' lines, then memif's (3 a connection in DPDK 22.11): above 3 only if DPDK's count
        check(d2.get('notes_dropped', 0) >= 6, 'unread log: lines dropped and counted once nobody can read them: %s'
              % d2.get('notes_dropped'))
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        check(daemon.returncode == 0, 'unread log: hcaemud exit 0 after SIGTERM (%s)' % daemon.returncode)
        print('unread log: %d lines and %d of memif\'s connections waited and came out in order, %d dropped '
              'after the reader left' % (len(gone), got.count(accepted), d2.get('notes_dropped', 0)), flush=True)
    finally:
        if r >= 0:
            os.close(r)
        nodes.kill_all()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--hcaemud', required=True)
    ap.add_argument('--node', required=True)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix='hcaemud-test-')
    sock = os.path.join(tmp, 'hcaemu.sock')
    daemon = start_daemon(a, sock, 'hcaemud-test', subprocess.PIPE)
    nodes = Nodes(a.node, sock)
    try:
        if not check(wait_for(lambda: os.path.exists(sock) or daemon.poll() is not None, 30) and daemon.poll() is None,
                     'hcaemud listening on %s' % sock):
            return 1
        _, s0, _ = nodes.res()

        # ---- pair (and completion events) ----
        d = os.path.join(tmp, 'pair')
        os.mkdir(d)
        pa, pb = nodes.start('pair', d, 'a'), nodes.start('pair', d, 'b')
        nodes.finish(pa)
        nodes.finish(pb)
        objs, s1, _ = nodes.res()
        delta = {k: s1.get(k, 0) - s0.get(k, 0) for k in s1}
        print('pair: counter deltas', {k: v for k, v in delta.items() if v}, flush=True)
        # Per message, both sides: 1 WRITE, 1 SEND, 1 READ, 2 atomics each.
        for k, v in (('rx_write_requests', 2), ('rx_read_requests', 2), ('rx_atomic_requests', 4),
                     ('rdma_recvs', 2), ('rdma_sends', 2), ('resp_remote_access_errors', 0), ('dma_access_errors', 0),
                     ('req_cqe_error', 0), ('resp_cqe_error', 0), ('retry_exceeded_err', 0)):
            check(delta.get(k) == v, 'pair: %s delta %s, expected %d' % (k, delta.get(k), v))
        check(not objects_of(objs, pa.pid) and not objects_of(objs, pb.pid), 'pair: no objects left of either client')

        # ---- refuse ----
        d = os.path.join(tmp, 'refuse')
        os.mkdir(d)
        ra, rb = nodes.start('refuse', d, 'a'), nodes.start('refuse', d, 'b')
        nodes.finish(rb)
        nodes.finish(ra)
        _, s2, _ = nodes.res()
        check(s2.get('resp_remote_access_errors', 0) - s1.get('resp_remote_access_errors', 0) == 1,
              'refuse: one remote access error detected as responder')

        # ---- stream: a SIGKILLed mid-transfer ----
        d = os.path.join(tmp, 'stream')
        os.mkdir(d)
        sb = nodes.start('stream', d, 'b')
        sa = nodes.start('stream', d, 'a')
        if check(wait_for(lambda: os.path.exists(os.path.join(d, 'streaming.a')) or sa.poll() is not None, LIMIT)
                 and sa.poll() is None, 'stream: a streaming'):
            objs, _, _ = nodes.res()
            mine = objects_of(objs, sa.pid)
            kinds = sorted(set(o[1] for o in mine))
            check(kinds == ['cq', 'mr', 'pd', 'qp'], 'stream: a\'s objects listed before the kill: %s' % kinds)
            sa.send_signal(signal.SIGKILL)
            sa.wait(timeout=LIMIT)
            check(sa.returncode == -signal.SIGKILL, 'stream: a died of SIGKILL (%s)' % sa.returncode)
            gone = wait_for(lambda: not objects_of(nodes.res()[0], sa.pid), 10, step=0.2)
            objs, _, dst = nodes.res()
            check(gone, 'stream: a\'s objects gone after its death: %s' % objects_of(objs, sa.pid))
            check(dst.get('clients_cleaned', 0) >= 1, 'stream: the daemon counted a cleaned client')
            print('stream: a (pid %d) killed, objects left: %d' % (sa.pid, len(objects_of(objs, sa.pid))), flush=True)
            open(os.path.join(d, 'killed'), 'w').close()
            sc = nodes.start('stream', d, 'c')
            nodes.finish(sb)
            nodes.finish(sc)
            objs, _, _ = nodes.res()
            check(not objects_of(objs, sb.pid) and not objects_of(objs, sc.pid), 'stream: b and c left nothing')
        else:
            nodes.finish(sa, expect_ok=False)

        # ---- ud ----
        d = os.path.join(tmp, 'ud')
        os.mkdir(d)
        ua, ub = nodes.start('ud', d, 'a'), nodes.start('ud', d, 'b')
        nodes.finish(ua)
        nodes.finish(ub)

        # ---- a large reg_mr: mapped and faulted in on the daemon's worker, the io thread free ----
        big = nodes.start_args('bigmr', [sock, '1024'])
        out = nodes.finish(big)
        m = re.search(r'replies to the other client meanwhile, mr_maps_pending seen in attempt (\d+)', out)
        check(m is not None and int(m.group(1)) >= 1, 'bigmr: the other client answered during the mapping')

        # ---- SIGTERM, with a client holding objects ----
        check(daemon.poll() is None, 'hcaemud still running after every client')
        _, _, d2 = nodes.res()
        d = os.path.join(tmp, 'hold')
        os.mkdir(d)
        hold = subprocess.Popen([a.node, 'hold', sock, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        hold.tag = 'hold'
        nodes.procs.append(hold)
        check(wait_for(lambda: os.path.exists(os.path.join(d, 'held')) or hold.poll() is not None, LIMIT),
              'hold: the client holds its objects')
        # The shared rings are mapped whole on both sides at creation, before any traffic
        # (dpdk_port/prefault.hpp): every page resident in the daemon and in the client.
        for who, pid in (('hcaemud', daemon.pid), ('the client', hold.pid)):
            rings = ring_mappings(pid)
            check(len(rings) >= 2 and all(rss == size for _, size, rss in rings),
                  'hold: %s\'s CQ and QP rings resident before any traffic: %s' % (who, rings))
        # A client's MR memory is mapped by the io thread at reg_mr and the pages its memfd has
        # are faulted in there (the 64 KiB the client read), none it does not have (the 1 MiB it
        # never touched: the daemon allocates no memory for a client).
        mrs = sorted((size, rss) for _, size, rss in ring_mappings(daemon.pid, 'buffer'))
        check(mrs == [(64, 64), (1024, 0)], 'hold: the daemon\'s MR mappings (Size, Rss kB): %s, expected '
              '[(64, 64), (1024, 0)]' % mrs)
        _, _, d3 = nodes.res()
        check(d3.get('mr_bytes_prefaulted', 0) - d2.get('mr_bytes_prefaulted', 0) == 65536,
              'hold: mr_bytes_prefaulted delta %d, expected 65536'
              % (d3.get('mr_bytes_prefaulted', 0) - d2.get('mr_bytes_prefaulted', 0)))
        daemon.send_signal(signal.SIGTERM)
        out = nodes.finish(hold, expect_ok=False)
        check(hold.returncode == 0 and 'OK hold' in out, 'hold: the client saw the shutdown and its calls fail typed')
        try:
            out, _ = daemon.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            out, _ = daemon.communicate()
        print('--- hcaemud (exit %s)\n%s' % (daemon.returncode, out[-3000:]), end='', flush=True)
        check(daemon.returncode == 0, 'hcaemud: exit 0 after SIGTERM')
        check(not os.path.exists(sock), 'hcaemud: socket removed')

        # ---- a log nobody reads ----
        check_unread_log(a, tmp)
    finally:
        nodes.kill_all()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print('%d check(s) failed' % len(FAILS))
        return 1
    print('all daemon checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
