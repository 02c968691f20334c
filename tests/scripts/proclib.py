"""What the python checks that run pairs of programs share: the pass/fail record, free TCP ports,
DPDK EAL arguments for a net_memif pair, child processes with deadlines (killed by their own
handle only), waiting for a server's TCP port. Daemons: daemonlib.py."""
import os
import re
import random
import socket
import subprocess
import threading
import time

failures = []
_lock = threading.Lock()


def asan_env(lib):
    """Under ASan, an uninstrumented program (python, Debian's binaries) loading our library `lib`
    needs the ASan runtime first: LD_PRELOAD. Their leaks are not ours: no leak report. {} when
    `lib` is a plain build."""
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    asan = re.search(r"(\S*libasan\.so\S*) => (\S+)", ldd)
    if not asan:
        return {}
    return {"LD_PRELOAD": asan.group(2),
            "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))}


def dissect_json(hcaemu, path):
    """`hcaemu dissect --json FILE`: (exit status, stderr, {frame number: object}, summary object)."""
    import json
    rc, out, err = run([hcaemu, "dissect", "--json", path], timeout=120)
    frames, summary = {}, {}
    if rc == 0:
        for line in out.splitlines():
            o = json.loads(line)
            if "summary" in o:
                summary = o["summary"]
            else:
                frames[o["frame"]] = o
    return rc, err, frames, summary


def expect(name, cond, detail="", quiet_ok=False):
    """Records one check; the cases may run in threads."""
    with _lock:
        if not cond:
            failures.append(f"{name}: {str(detail)[-3000:]}")
            # The detail's tail beside the line too: a CI log shown in part may lose the end's list.
            tail = str(detail)[-800:].replace("\n", "\n     ")
            print(f"FAIL {name}\n     {tail}", flush=True)
        elif not quiet_ok:
            print(f"ok   {name}", flush=True)
    return bool(cond)


def report(stream=None):
    """The failures again at the end (on stderr), and the exit status: 0 when there were none."""
    import sys
    if failures:
        print("\n".join("FAIL " + f for f in failures), file=stream or sys.stderr)
        return 1
    return 0


_port_rng = random.Random(os.getpid() ^ int(time.time() * 1e6))


def free_port():
    """A TCP port for a server on loopback, free now, below the kernel's ephemeral range: a port
    from bind(0) is an ephemeral one, which any connection made meanwhile (a perftest client's
    out-of-band socket, in another case or suite) may take as its source port before the server
    binds it ("Couldn't listen to port")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(1000):
        p = _port_rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        return p
    raise RuntimeError("no free TCP port below the ephemeral range")


def eal(lcore, vdev, mem=512, prefix=None):
    """EAL arguments without hugepages or shared config (--no-shconf: no --file-prefix needed)."""
    pre = f" --file-prefix={prefix}" if prefix else ""
    return f"--no-huge -m {mem} --no-pci --no-shconf -l {lcore}{pre} --log-level lib.eal:error --vdev={vdev}"


def memif(role, sock):
    return f"net_memif0,role={role},id=0,socket={sock},socket-abstract=no,bsize=10240"


def run(args, env=None, timeout=60):
    """Runs to the end: (exit status, stdout, stderr); -999 when killed at the deadline."""
    try:
        r = subprocess.run(args, env=env, capture_output=True, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return -999, (e.stdout or b"").decode(errors="replace"), (e.stderr or b"").decode(errors="replace")


def start(args, env=None):
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p, timeout=90):
    """Waits for a child started by start(): (exit status, stdout, stderr); -999 if it had to be
    killed at the deadline (our own child, by its handle)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return -999, out.decode(errors="replace"), err.decode(errors="replace")
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def listening(port):
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(f) as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def wait_listen(port, proc, timeout):
    """True once something listens on TCP `port`; False if `proc` exited or the time ran out."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if listening(port):
            return True
        time.sleep(0.05)
    return False


def scratch(tmp, name):
    """A fresh directory under tmp for one case (its memif socket, its files)."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    return d
