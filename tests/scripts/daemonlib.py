"""Starting and stopping hcaemud for the python checks and benchmarks: a daemon on a temp socket,
on its own EAL vdev, waited for until its control socket accepts, stopped by SIGTERM (by PID only)."""
import os
import signal
import socket
import subprocess
import threading
import time

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
