"""Starting and stopping hcaemud for the python checks and benchmarks: a daemon on a temp socket,
on its own EAL vdev, waited for until its control socket accepts, stopped by SIGTERM (by PID only);
and `hcaemu perf` pairs through daemons (run_pair), with wait_link for a daemon pair's link."""
import os
import signal
import socket
import subprocess
import threading
import time

from check_perf import Drain, free_port  # the in-process perf check's helpers

EAL = "--no-huge -m 256 --no-pci --no-shconf --log-level lib.eal:error"


def memif_eal(tmp, role, lcores, tag):
    common = f"socket={os.path.join(tmp, 'memif.sock')},socket-abstract=no,bsize=10240"
    return f"{EAL} -l {lcores} --file-prefix=d{tag}{role} --vdev=net_memif0,role={role},{common}"


def ring_eal(lcores, tag):
    return f"{EAL} -l {lcores} --file-prefix=d{tag}r --vdev=net_ring0"


class Daemon:
    def __init__(self, hcaemud, sock, eal, ip, mac=None, extra=(), log=None):
        """log: a file for stdout and stderr (a long run), instead of pipes read at stop()."""
        self.sock = sock
        args = [hcaemud, "--socket", sock, "--eal", eal, "--ip", ip] + (["--mac", mac] if mac else []) + list(extra)
        out = log if log else subprocess.PIPE
        self.p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True)
        self.out = self.err = ""
        # The pipes are read as the daemon writes: it logs a line per client, and a pipe left
        # unread fills (64 KiB, about 1000 clients) and blocks the daemon's next write.
        self._got = {"out": [], "err": []}
        self._readers = []
        if not log:
            for name, f in (("out", self.p.stdout), ("err", self.p.stderr)):
                t = threading.Thread(target=self._drain, args=(f, self._got[name]), daemon=True)
                t.start()
                self._readers.append(t)

    @staticmethod
    def _drain(f, chunks):
        for line in f:
            chunks.append(line)

    def err_so_far(self):
        """What the daemon has written to stderr until now (its pipe is read as it writes)."""
        return "".join(self._got["err"])

    def wait_ready(self, timeout=20):
        """True once the control socket accepts a connection; False if the daemon died or never did."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.p.poll() is not None:
                return False
            if os.path.exists(self.sock):
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                    try:
                        s.connect(self.sock)
                        return True
                    except OSError:
                        pass
            time.sleep(0.05)
        return False

    def stop(self, timeout=20):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        for t in self._readers:
            t.join(timeout=10)
        self.out, self.err = "".join(self._got["out"]), "".join(self._got["err"])
        return rc


def start_server(hcaemu, test, dev, port, args):
    srv = subprocess.Popen([hcaemu, "perf", test, "--device", dev, "-p", str(port), "--oob-timeout", "30"] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = []
    for line in srv.stdout:  # perftest's banner, printed just before it listens
        head.append(line)
        if "Waiting for client" in line or len(head) > 10:
            break
    return srv, head


def run_pair(hcaemu, test, sdev, cdev, args, timeout=120):
    port = free_port()
    srv, head = start_server(hcaemu, test, sdev, port, args)
    drain = Drain(srv)  # -q 1024 prints more than a pipe holds
    try:
        cli = subprocess.run([hcaemu, "perf", test, "--device", cdev, "-p", str(port), "--oob-timeout", "30",
                              "127.0.0.1"] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        so, se, _ = drain.wait(0)
        return None, "".join(head) + so + se
    so, se, ended = drain.wait(timeout)
    if not ended:
        return None, "".join(head) + so + se
    return (srv.returncode, "".join(head) + so, se, cli.returncode, cli.stdout, cli.stderr), None


def wait_link(hcaemu, sdev, cdev, timeout=60):
    """A daemon is ready once its socket accepts, its memif link (and so ARP) some time later (a
    loaded machine: seconds): a tiny write_bw pair until one passes."""
    end = time.time() + timeout
    while time.time() < end:
        r, _ = run_pair(hcaemu, "write_bw", sdev, cdev, ["-s", "2", "-n", "5"], timeout=60)
        if r and r[0] == 0 and r[3] == 0:
            return True
        time.sleep(1)
    return False
