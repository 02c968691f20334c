"""Starting and stopping hcaemud for the python checks and benchmarks: a daemon on a temp socket,
on its own EAL vdev, waited for until its control socket accepts, stopped by SIGTERM (by PID only)."""
import os
import signal
import socket
import subprocess
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
            self.out, self.err = self.p.communicate(timeout=timeout)
            return self.p.returncode
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.out, self.err = self.p.communicate()
            return None
