#!/usr/bin/python3
"""hcaemu's libibverbs.so.1 (tools/verbs) under Debian's unmodified rdma-core binaries:
ibv_devices and ibv_devinfo -v on a local HCA (exact GUID, port, MTU and GID table lines), the
HCAEMU_DEVICE/HCAEMU_* variables' errors, then ibv_rc/uc/ud/srq_pingpong between two processes
each with HCAEMU_DEVICE=local (the HCA inside the program), joined by DPDK's net_memif: -c data
checks, -e completion events, several sizes, the programs' own byte counts and the addresses
each side printed agreeing with the other's; perftest 4.5's eight tests the same way (their result
rows, check perftest()). Pairs run two at a time. Every process has a deadline. The same programs
through hcaemud: check_verbs_daemon.py.

Under ASan the library needs the ASan runtime first in the uninstrumented program: LD_PRELOAD."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proclib import asan_env, eal, expect, finish, free_port, memif, report, run, start, wait_listen  # noqa: E402

BASE_ENV = {}
HCAEMU = [None]  # the hcaemu CLI (exec)
LIBDIR = [None]


def env_for(**kv):
    e = dict(os.environ)
    e.update(BASE_ENV)
    for k in [k for k in e if k.startswith("HCAEMU_")]:
        del e[k]
    e.update({k: v for k, v in kv.items() if v is not None})
    return e


def local_env(tmp, role, lcore, ip, mac, name, **extra):
    """HCAEMU_DEVICE=local on one end of the net_memif pair `name` (its own socket in tmp, its own
    EAL file prefix: pairs and parallel runs do not meet)."""
    sock = os.path.join(tmp, f"memif-{name}.sock")
    return env_for(HCAEMU_DEVICE="local", HCAEMU_IP=ip, HCAEMU_MAC=mac,
                   HCAEMU_EAL=eal(lcore, memif(role, sock), prefix=f"v{os.getpid()}{name}{role[0]}"), **extra)


def check_devices(tmp):
    e = local_env(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", "dev")
    rc, out, err = run(["ibv_devices"], e)
    # The node GUID is the MAC's modified EUI-64: 52:54:00:18:00:01 -> 5054:00ff:fe18:0001.
    expect("ibv_devices: exit 0, hcaemu0 with the MAC's EUI-64 as node GUID",
           rc == 0 and re.search(r"^\s+hcaemu0\s+505400fffe180001$", out, re.M), (rc, out, err))

    rc, out, err = run(["ibv_devinfo", "-v"], e)
    want = [r"^hca_id:\thcaemu0$", r"^\ttransport:\t+InfiniBand \(0\)$", r"^\tfw_ver:\t+0\.1\.0$",
            r"^\tnode_guid:\t+5054:00ff:fe18:0001$", r"^\tsys_image_guid:\t+5054:00ff:fe18:0001$",
            r"^\tphys_port_cnt:\t+1$", r"^\tmax_qp:\t+65536$", r"^\tmax_cqe:\t+32767$",
            r"^\tatomic_cap:\t+ATOMIC_HCA \(1\)$", r"^\tmax_srq_sge:\t+27$", r"^\tmax_pkeys:\t+1$",
            r"^\tnum_comp_vectors:\t+1$", r"^\t+state:\t+PORT_ACTIVE \(4\)$", r"^\t+max_mtu:\t+4096 \(5\)$",
            r"^\t+active_mtu:\t+1024 \(3\)$", r"^\t+link_layer:\t+Ethernet$", r"^\t+max_msg_sz:\t+0x80000000$",
            r"^\t+pkey_tbl_len:\t+1$", r"^\t+gid_tbl_len:\t+16$", r"^\t+phys_state:\t+LINK_UP \(5\)$",
            r"^\t+GID\[  0\]:\t+fe80::5054:ff:fe18:1, RoCE v2$", r"^\t+GID\[  1\]:\t+::ffff:198\.18\.0\.1, RoCE v2$"]
    missing = [w for w in want if not re.search(w, out, re.M)]
    expect("ibv_devinfo -v: exit 0, device, port and GID lines as expected", rc == 0 and not missing,
           (rc, missing, out, err))

    # The link MTU decides the active MTU (9000 - RoCE's 80 bytes of headers -> 4096); IPv6 address.
    e = local_env(tmp, "server", 0, "2001:db8::18:1/64", "52:54:00:18:00:01", "dev6", HCAEMU_LINK_MTU="9000")
    rc, out, err = run(["ibv_devinfo", "-v"], e)
    expect("ibv_devinfo -v: HCAEMU_LINK_MTU=9000 gives active_mtu 4096, HCAEMU_IP IPv6 is GID 1",
           rc == 0 and re.search(r"^\t+active_mtu:\t+4096 \(5\)$", out, re.M)
           and re.search(r"^\t+GID\[  1\]:\t+2001:db8::18:1, RoCE v2$", out, re.M), (rc, out, err))

    rc, out, err = run(["ibv_devices"], env_for())
    expect("no HCAEMU_DEVICE: no device listed", rc == 0 and "hcaemu" not in out, (rc, out, err))
    rc, out, err = run(["ibv_devices"], env_for(HCAEMU_DEVICE="local,unix:/nonexistent/sock,bogus"))
    expect("HCAEMU_DEVICE=local,unix:...,bogus: hcaemu0 and hcaemu1 listed, 'bogus' refused by name",
           re.search(r"^\s+hcaemu0\s", out, re.M) and re.search(r"^\s+hcaemu1\s", out, re.M)
           and "ignoring 'bogus'" in err and "hcaemu2" not in out, (rc, out, err))
    rc, out, err = run(["ibv_devinfo"], env_for(HCAEMU_DEVICE="local", HCAEMU_IP="bogus"))
    expect("HCAEMU_IP=bogus: open fails with the --ip message",
           rc != 0 and "HCAEMU_IP: --ip: 'bogus' is not ADDR/LEN" in err, (rc, out, err))
    rc, out, err = run(["ibv_devinfo"], env_for(HCAEMU_DEVICE="local"))
    expect("no HCAEMU_IP: open fails saying it is required",
           rc != 0 and "HCAEMU_IP=ADDR/LEN is required" in err, (rc, out, err))
    rc, out, err = run(["ibv_devinfo", "-d", "hcaemu0"], env_for(HCAEMU_DEVICE="unix:/nonexistent/sock"))
    expect("unix:PATH with no daemon: open fails naming the socket",
           rc != 0 and "cannot connect to unix:/nonexistent/sock" in err, (rc, out, err))


def check_exec_errors():
    h = HCAEMU[0]
    e = env_for()
    for args, rc_want, msg in (
            ([], 2, "no program: hcaemu exec [OPTIONS] -- PROGRAM"),
            (["--ip", "198.18.0.1/24", "--"], 2, "no program"),
            (["--bogus", "--", "true"], 2, "unknown option '--bogus'"),
            (["--", "true"], 2, "--ip ADDR/LEN is required for a local HCA"),
            (["--device", "unix:/x", "--ip", "198.18.0.1/24", "--", "true"], 2, "owns the port"),
            (["--ip", "bogus", "--", "true"], 2, "--ip: 'bogus' is not ADDR/LEN"),
            (["--device", "unix:/x", "--", "hcaemu-no-such-program"], 127, "cannot run 'hcaemu-no-such-program'")):
        rc, out, err = run([h, "exec"] + args, e)
        expect(f"hcaemu exec {' '.join(args)}: exit {rc_want}, '{msg}'", rc == rc_want and msg in err, (rc, out, err))
    rc, out, err = run([h, "exec", "--device", "unix:/x", "--", "sh", "-c", 'echo "$HCAEMU_DEVICE|$LD_LIBRARY_PATH"'],
                       dict(e, LD_LIBRARY_PATH="/keep"))
    # build/tools/rdmacm (librdmacm.so.1) follows build/tools/verbs when it is built
    cm = os.path.join(os.path.dirname(LIBDIR[0]), "rdmacm")
    libs = f"{LIBDIR[0]}:{cm}" if os.path.exists(os.path.join(cm, "librdmacm.so.1")) else LIBDIR[0]
    expect("hcaemu exec sets HCAEMU_DEVICE and puts its libraries first in LD_LIBRARY_PATH",
           rc == 0 and out.strip() == f"unix:/x|{libs}:/keep", (rc, out, err))


def check_daemon(tmp, hcaemud):
    """unix:PATH: the same queries answered by a running hcaemud (its HCA, its GID table)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import daemonlib
    sock = os.path.join(tmp, "hcaemud.sock")
    d = daemonlib.Daemon(hcaemud, sock, f"{daemonlib.EAL} -l 0 --file-prefix=verbsd --vdev=net_null0",
                         "198.18.0.7/24", "52:54:00:18:00:07")
    try:
        expect("hcaemud ready", d.wait_ready(), d.err)
        e = env_for(HCAEMU_DEVICE=f"unix:{sock}")
        rc, out, err = run(["ibv_devices"], e)
        expect("ibv_devices on unix:PATH: hcaemu0 with the daemon's GUID",
               rc == 0 and re.search(r"^\s+hcaemu0\s+505400fffe180007$", out, re.M), (rc, out, err))
        rc, out, err = run(["ibv_devinfo", "-v"], e)
        want = [r"^hca_id:\thcaemu0$", r"^\tnode_guid:\t+5054:00ff:fe18:0007$", r"^\t+state:\t+PORT_ACTIVE \(4\)$",
                r"^\t+active_mtu:\t+1024 \(3\)$", r"^\t+link_layer:\t+Ethernet$",
                r"^\t+GID\[  1\]:\t+::ffff:198\.18\.0\.7, RoCE v2$"]
        missing = [w for w in want if not re.search(w, out, re.M)]
        expect("ibv_devinfo -v on unix:PATH: the daemon's port and GID table", rc == 0 and not missing, (rc, missing, out, err))
        e2 = env_for()
        e2.pop("LD_LIBRARY_PATH", None)
        rc, out, err = run([HCAEMU[0], "exec", "--device", f"unix:{sock}", "--", "ibv_devinfo", "-d", "hcaemu0"], e2)
        expect("hcaemu exec --device unix:PATH -- ibv_devinfo: the daemon's hcaemu0",
               rc == 0 and re.search(r"^\tnode_guid:\t+5054:00ff:fe18:0007$", out, re.M), (rc, out, err))
        # The data thread queues a client's 'gone' line and the io thread writes it, while the
        # daemon runs: one for each of the three programs above.
        end = time.monotonic() + 10
        while time.monotonic() < end and d.err_so_far().count(" gone: ") < 3:
            time.sleep(0.05)
        expect("hcaemud: the three clients' 'gone' lines written while it runs",
               d.err_so_far().count(" gone: ") == 3, d.err_so_far())
        # A client still attached at SIGTERM is removed after the io loop stopped: its line is
        # written at the exit. ibv_rc_pingpong's server holds its context while it waits for a peer.
        port = str(free_port())
        holder = start(["ibv_rc_pingpong", "-d", "hcaemu0", "-g", "1", "-p", port], e)
        expect("ibv_rc_pingpong server on unix:PATH listens", wait_listen(int(port), holder, 30), "")
    finally:
        rc = d.stop()
        if "holder" in locals():
            if holder.poll() is None:
                holder.kill()  # our own child, by its handle
            finish(holder, 10)
    expect("hcaemud stopped by SIGTERM: exit 0, every client gone (the one attached at the stop last)",
           rc == 0 and d.err.count(" gone: ") == 4 and
           re.search(r"gone: \d+ object\(s\) destroyed\n(.*\n)?hcaemud: stopped\n$", d.err) and
           re.search(r"\(pid \d+, ibv_rc_pingpong\) gone: [1-9]", d.err), (rc, d.err))


ADDR = re.compile(r"^  (local|remote) address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$", re.M)  # ud_pingpong: "PSN 0x...: GID"


def server_listening(prog, name, port, ps, last=True):
    """True once the server listens. A server that could not bind its port (taken since
    free_port() chose it) is a failure only on the `last` attempt; else the caller tries another."""
    ok = wait_listen(int(port), ps, 60)
    if not ok:
        if ps.poll() is None:
            ps.kill()  # our own child, by its handle
        out, err = ps.communicate()
        err = err.decode(errors="replace")
        if not last and "Couldn't listen to port" in err:
            return None
        expect(f"{prog} {name}: the server listens on its TCP port", False,
               (ps.returncode, out.decode(errors="replace"), err))
    return ok


def addresses(out):
    return {m.group(1): m.group(2, 3, 4) for m in ADDR.finditer(out)}


def via_exec(tmp, role, lcore, ip, mac, name, cmd):
    """`hcaemu exec` with the attach options as arguments, in an environment without LD_LIBRARY_PATH
    or HCAEMU_*: it sets them itself."""
    sock = os.path.join(tmp, f"memif-{name}.sock")
    e = env_for()
    e.pop("LD_LIBRARY_PATH", None)
    return [HCAEMU[0], "exec", "--ip", ip, "--mac", mac, "--eal", eal(lcore, memif(role, sock)), "--"] + cmd, e


def run_pair(prog, scmd, senv, ccmd, cenv, port, name, timeout=90):
    """The server, then (the programs' clients do not retry a refused connect) the client once the
    server listens: ((rc, out, err) of the server, of the client), or None if it never listened."""
    for attempt in range(3):
        ps = start(scmd, senv)
        ok = server_listening(prog, name, port, ps, last=attempt == 2)
        if ok is not None:
            break
        # the port was taken between free_port() and the server's bind: another one
        new = str(free_port())
        scmd, ccmd = (c[:c.index("-p") + 1] + [new] + c[c.index("-p") + 2:] for c in (scmd, ccmd))
        port = new
    if not ok:
        return None
    pc = start(ccmd, cenv)
    cr = finish(pc, timeout)
    sr = finish(ps, timeout)
    return sr, cr


# The two ends of a pair: (environment, GID it prints) for the server and for the client.
def local_ends(tmp, name):
    return ((local_env(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", name), "::ffff:198.18.0.1"),
            (local_env(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", name), "::ffff:198.18.0.2"))


def pingpong(tmp, prog, args, size, iters, name, exec_=False, ends=None, mode="local"):
    """ibv_*_pingpong: both exit 0 with the byte and iteration counts of this run (each side counts
    both directions; -c: every byte the program checks was right, else it exits 1 printing
    'invalid data'), and each side's remote address is the other's local one."""
    port = str(free_port())
    cmd = [prog, "-d", "hcaemu0", "-g", "1", "-p", port, "-s", str(size), "-n", str(iters)] + args
    (senv, sgid), (cenv, cgid) = ends or local_ends(tmp, name)
    scmd, ccmd = cmd, cmd + ["127.0.0.1"]
    if exec_:
        scmd, senv = via_exec(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", name, cmd)
        ccmd, cenv = via_exec(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", name, cmd + ["127.0.0.1"])
    r = run_pair(prog, scmd, senv, ccmd, cenv, port, name)
    if r is None:
        return
    sr, cr = r
    label = ("hcaemu exec -- " if exec_ else "") + f"[{mode}] {prog} {' '.join(args)} -s {size} -n {iters}"
    total = size * iters * 2
    lines = {}
    for who, (rc, out, err) in (("server", sr), ("client", cr)):
        m = re.search(r"^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec$", out, re.M)
        m2 = re.search(rf"^{iters} iters in [\d.]+ seconds = [\d.]+ usec/iter$", out, re.M)
        lines[who] = addresses(out)
        expect(f"{label}: {who} exit 0, '{total} bytes in' and '{iters} iters in'",
               rc == 0 and m and int(m.group(1)) == total and m2 and "invalid data" not in out + err, (rc, out, err))
    s, c = lines["server"], lines["client"]
    expect(f"{label}: the addresses each side printed agree (QPN, PSN, GID {sgid}, {cgid})",
           s.get("local") and s.get("local") == c.get("remote") and c.get("local") == s.get("remote")
           and s["local"][2] == sgid and c["local"][2] == cgid, (s, c))


def restart_leak(tmp, shim):
    """ibv_rc_pingpong -e with every 3rd blocking read of an eventfd failing with errno 512, as this
    CI's kernel now and then answers one (ERESTARTSYS, never meant for a program): ibv_get_cq_event
    reads again and both sides finish (before: 'Failed to get cq_event', the peer waiting forever).
    Each side's preload says how many reads it failed: at least one."""
    prog, size, iters = "ibv_rc_pingpong", 4096, 100
    port = str(free_port())
    cmd = [prog, "-d", "hcaemu0", "-g", "1", "-p", port, "-s", str(size), "-n", str(iters), "-c", "-e"]
    (senv, _), (cenv, _) = local_ends(tmp, "leak")
    leak = {"HCAEMU_TEST_RESTART_LEAK": "3"}
    senv = dict(senv, **leak, LD_PRELOAD=" ".join(filter(None, [senv.get("LD_PRELOAD"), shim])))
    cenv = dict(cenv, **leak, LD_PRELOAD=" ".join(filter(None, [cenv.get("LD_PRELOAD"), shim])))
    r = run_pair(prog, cmd, senv, cmd + ["127.0.0.1"], cenv, port, "leak")
    if r is None:
        return
    for who, (rc, out, err) in zip(("server", "client"), r):
        m = re.search(r"^restart_leak: (\d+) reads", err, re.M)
        expect(f"[local] {prog} -c -e, every 3rd eventfd read failing with errno 512: {who} exit 0, "
               f"'{size * iters * 2} bytes in', at least one read failed so",
               rc == 0 and f"{size * iters * 2} bytes in" in out and m and int(m.group(1)) > 0, (rc, out, err))


TABLE = re.compile(r"^\s*#bytes\s+#iterations.*$", re.M)
# -nan: perftest's stdev of one sample; inf: seen in one latency row on a loaded machine, beside
# perftest's warning on its CPU clock calibration ("Correlation coefficient r^2: ... < 0.9").
ROW = re.compile(r"^\s*(\d+)\s+(\d+)((?:\s+(?:[\d.]+|-?nan|inf))+)\s*$")


def table(out):
    """perftest's result rows: (bytes, iterations, the largest figure after them)."""
    m = TABLE.search(out)
    rows = []
    if m:
        for line in out[m.end():].splitlines()[1:]:
            r = ROW.match(line)
            if not r:
                break
            figs = [float(x) for x in r.group(3).split() if "nan" not in x]
            rows.append((int(r.group(1)), int(r.group(2)), max(figs, default=0.0)))
    return rows


# perftest's get_cpu_mhz gave up (its sampled clock's fit under r^2 0.9): that side exits 1, the
# other then fails its exchange. Not the HCA's doing: the pair runs again (at most twice).
CALIBRATION = "Can't produce a report"


def calibration_failed(sr, cr):
    """The sides ("server", "client") whose perftest gave up on its CPU clock, from their (rc, out,
    err); '' when none did: the note to print before a pair runs again."""
    who = " and ".join(w for w, (_, _, err) in (("server", sr), ("client", cr)) if CALIBRATION in err)
    return who and (f"the {who}'s own CPU clock calibration failed (perftest's '{CALIBRATION}': its cycles "
                    "against gettimeofday, r^2 < 0.9, on a loaded machine): both again")

ALL_SIZES = [2 ** k for k in range(1, 24)]  # -a: 2 B to 8 MiB


def passive(prog, args):
    """The side of a READ or atomic latency test that only answers prints no result (perftest's
    own way)."""
    return prog in ("ib_read_lat", "ib_atomic_lat")


def perftest(tmp, prog, args, size, iters, name, total_iters=None, ends=None, mode="local", sizes=None,
             timeout_exp="18"):
    """perftest (Debian's 4.5) with -x 1 (GID 1) and -u 18 (1 s ACK timeout: the machine may be
    loaded): both sides exit 0 and print their result rows: exactly the sizes asked (-a: every
    power of two from 2 B to 8 MiB, or `sizes`), each with this run's iteration count (times -q),
    or with -D a count above 0, and a figure above 0 (BW or message rate, or latency)."""
    (senv, _), (cenv, _) = ends or local_ends(tmp, name)
    label = f"[{mode}] {prog} {' '.join(args)}" + (f" -n {iters}" if iters else "") + (f" -s {size}" if size else "")
    for attempt in range(3):
        port = str(free_port())
        cmd = [prog, "-d", "hcaemu0", "-x", "1", "-u", timeout_exp, "-p", port] + \
              (["-n", str(iters)] if iters else []) + (["-s", str(size)] if size else []) + args
        r = run_pair(prog, cmd, senv, cmd + ["127.0.0.1"], cenv, port, name, timeout=150)
        if r is None:
            return
        sr, cr = r
        why = calibration_failed(sr, cr)
        if attempt == 2 or not why:
            break
        print(f"note {label}: {why}", flush=True)
    want_sizes = sizes or (ALL_SIZES if "-a" in args else [size or 8])
    want_iters = total_iters or iters
    for who, (rc, out, err) in (("server", sr), ("client", cr)):
        rows = table(out)
        if who == "server" and passive(prog, args):
            expect(f"{label}: server exit 0, no result rows", rc == 0 and not rows, (rc, out, err))
            continue
        want = want_sizes
        if who == "server" and "-a" in args and prog in ("ib_write_bw", "ib_read_bw"):
            want = want_sizes[-1:]  # the passive side of -a prints the last size's row only (perftest)
        got = [b for b, _, _ in rows]
        counts_ok = all((n > 0 if want_iters is None else n == want_iters) and f > 0 for _, n, f in rows)
        expect(f"{label}: {who} exit 0, rows for {want_sizes[0]}..{want_sizes[-1]} B ({len(want_sizes)}) x "
               f"{'>0 (duration)' if want_iters is None else want_iters}",
               rc == 0 and got == want and counts_ok, (rc, rows, out, err))


def run_cases(fn, cases, workers):
    """Independent cases side by side (each has its own ports, sockets and EAL prefix)."""
    with ThreadPoolExecutor(max_workers=workers) as ex:
        for f in [ex.submit(fn, *c) for c in cases]:
            f.result()


def wr_api(tmp, exe):
    """tests/verbs_wr.cpp: the ibv_wr_* API between two processes (WRITE, SEND_WITH_IMM inline,
    READ, atomics), each side checking the bytes it sees."""
    d = os.path.join(tmp, "wr")
    os.mkdir(d)
    ps = subprocess.Popen([exe, "server", d], env=local_env(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", "wr"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The client after the server's port is up (it writes its file then), as with the pingpongs.
    end = time.time() + 30
    while time.time() < end and ps.poll() is None and not os.path.exists(os.path.join(d, "server")):
        time.sleep(0.05)
    pc = subprocess.Popen([exe, "client", d], env=local_env(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", "wr"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cr = finish(pc)
    sr = finish(ps)
    for who, (rc, out, err), n in (("server", sr, 10), ("client", cr, 12)):
        oks = len(re.findall(r"^ok ", out, re.M))
        expect(f"verbs_wr: {who} exit 0, its {n} checks ok", rc == 0 and oks == n and "FAIL" not in out, (rc, out, err))


def setup_env(libdir, hcaemu=None):
    """The programs' environment: our library first; under ASan its runtime preloaded."""
    BASE_ENV["LD_LIBRARY_PATH"] = libdir
    HCAEMU[0] = hcaemu
    LIBDIR[0] = os.path.abspath(libdir)
    BASE_ENV.update(asan_env(os.path.join(libdir, "libibverbs.so.1")))


PINGPONGS = [  # prog, args, size, iterations
    ("ibv_rc_pingpong", ["-c"], 1, 100), ("ibv_rc_pingpong", ["-c"], 4096, 500),
    ("ibv_rc_pingpong", ["-c", "-e"], 20000, 100), ("ibv_rc_pingpong", ["-e"], 65536, 50),
    ("ibv_uc_pingpong", ["-c"], 1024, 200), ("ibv_uc_pingpong", ["-c", "-e"], 8192, 100),
    ("ibv_ud_pingpong", ["-c"], 1024, 200), ("ibv_ud_pingpong", ["-c", "-e"], 100, 100),
    ("ibv_srq_pingpong", ["-c"], 4096, 200), ("ibv_srq_pingpong", ["-c", "-e", "-q", "4"], 1000, 100),
]

# prog, args, size (0: perftest's default), iterations (None with -D), rows' iterations (-q).
# -a (-n 5, 2 B .. 8 MiB): ib_write_bw and ib_send_lat; ib_read_bw -a and the other latency tests'
# -a run through the daemons (check_verbs_daemon.py). A latency test's -a takes ~12 s whatever the
# HCA: perftest samples the CPU's clock for 220 ms twice a size. Here WRITE and READ latency are
# multi-packet at 64 KiB instead.
PERFTESTS = [
    ("ib_write_bw", [], 65536, 200, None), ("ib_write_bw", ["-q", "4"], 8192, 100, 400),
    ("ib_write_bw", ["-a"], 0, 5, None), ("ib_write_bw", ["-D", "1"], 65536, None, None),
    ("ib_send_bw", [], 4096, 300, None), ("ib_send_bw", ["-e"], 2048, 200, None),
    ("ib_send_bw", ["-c", "UD"], 1024, 200, None), ("ib_send_bw", ["-q", "4"], 4096, 50, 200),
    ("ib_read_bw", [], 65536, 100, None),
    ("ib_read_bw", ["-q", "4"], 4096, 50, 200),
    ("ib_atomic_bw", [], 0, 200, None), ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"], 0, 100, None),
    # Both sides spin on memory: only the progress threads turn the engines (docs/verbs.md).
    ("ib_write_lat", [], 8, 200, None), ("ib_write_lat", [], 65536, 50, None),
    ("ib_send_lat", [], 64, 200, None), ("ib_send_lat", ["-e"], 64, 100, None),
    ("ib_send_lat", ["-c", "UD"], 1024, 100, None), ("ib_send_lat", ["-D", "1"], 64, None, None),
    ("ib_read_lat", [], 64, 200, None), ("ib_read_lat", [], 65536, 50, None), ("ib_send_lat", ["-a"], 0, 5, None),
    ("ib_atomic_lat", [], 0, 100, None), ("ib_atomic_lat", ["-A", "CMP_AND_SWAP"], 0, 100, None),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--verbs-wr", required=True)
    ap.add_argument("--restart-leak", required=True, help="librestart_leak.so (errno 512 on eventfd reads)")
    ap.add_argument("--only", help="only the pingpong and perftest cases whose program and arguments contain this")
    a = ap.parse_args()
    setup_env(a.libdir, a.hcaemu)
    with tempfile.TemporaryDirectory(prefix="hcaemu-verbs-") as tmp:
        if a.only is None:
            check_devices(tmp)
            check_exec_errors()
            check_daemon(tmp, a.hcaemud)
            wr_api(tmp, a.verbs_wr)
            pingpong(tmp, "ibv_rc_pingpong", ["-c"], 2048, 100, "ppexec", exec_=True)
            restart_leak(tmp, os.path.abspath(a.restart_leak))
        only = a.only or ""
        # Two pairs at a time: each process has its own EAL (512 MiB without hugepages).
        run_cases(pingpong, [(tmp, prog, args, size, iters, f"pp{i}") for i, (prog, args, size, iters)
                             in enumerate(PINGPONGS) if only in prog + " " + " ".join(args)], 2)
        run_cases(perftest, [(tmp, prog, args, size, iters, f"pt{i}", total) for i, (prog, args, size, iters, total)
                             in enumerate(PERFTESTS) if only in prog + " " + " ".join(args)], 2)
    return report()


if __name__ == "__main__":
    sys.exit(main())
