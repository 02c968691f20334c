#!/usr/bin/python3
"""hcaemu's libibverbs.so.1 (tools/verbs) under Debian's unmodified rdma-core binaries:
ibv_devices and ibv_devinfo -v on a local HCA (exact GUID, port, MTU and GID table lines), the
HCAEMU_DEVICE/HCAEMU_* variables' errors, then ibv_rc/uc/ud/srq_pingpong between two processes
each with HCAEMU_DEVICE=local (the HCA inside the program), joined by DPDK's net_memif: -c data
checks, -e completion events, several sizes, the programs' own byte counts and the addresses
each side printed agreeing with the other's. Every process has a deadline.

Under ASan the library needs the ASan runtime first in the uninstrumented program: LD_PRELOAD."""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-3000:]}")
        print(f"FAIL {name}")
    else:
        print(f"ok   {name}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def eal(lcore, vdev):
    return f"--no-huge -m 512 --no-pci --no-shconf -l {lcore} --log-level lib.eal:error --vdev={vdev}"


def memif(role, sock):
    return f"net_memif0,role={role},id=0,socket={sock},socket-abstract=no,bsize=10240"


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


def run(args, env, timeout=60):
    try:
        r = subprocess.run(args, env=env, capture_output=True, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return -999, (e.stdout or b"").decode(errors="replace"), (e.stderr or b"").decode(errors="replace")


def finish(p, timeout=90):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()  # our own child, by its handle
        out, err = p.communicate()
        return -999, out.decode(errors="replace"), err.decode(errors="replace")
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def local_env(tmp, role, lcore, ip, mac, name, **extra):
    sock = os.path.join(tmp, f"memif-{name}.sock")
    return env_for(HCAEMU_DEVICE="local", HCAEMU_IP=ip, HCAEMU_MAC=mac,
                   HCAEMU_EAL=eal(lcore, memif(role, sock)), **extra)


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
    expect("hcaemu exec sets HCAEMU_DEVICE and puts its library first in LD_LIBRARY_PATH",
           rc == 0 and out.strip() == f"unix:/x|{LIBDIR[0]}:/keep", (rc, out, err))


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
    finally:
        rc = d.stop()
    expect("hcaemud stopped by SIGTERM: exit 0, both clients gone", rc == 0 and d.err.count(" gone: ") >= 2, (rc, d.err))


ADDR = re.compile(r"^  (local|remote) address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$", re.M)  # ud_pingpong: "PSN 0x...: GID"


def wait_listen(port, proc, timeout):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        for f in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(f) as fh:
                for line in fh.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        time.sleep(0.05)
    return False


def server_listening(prog, name, port, ps):
    ok = wait_listen(int(port), ps, 30)
    if not ok:
        if ps.poll() is None:
            ps.kill()  # our own child, by its handle
        out, err = ps.communicate()
        expect(f"{prog} {name}: the server listens on its TCP port", False,
               (ps.returncode, out.decode(errors="replace"), err.decode(errors="replace")))
    else:
        expect(f"{prog} {name}: the server listens on its TCP port", True)
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


def pingpong(tmp, prog, args, size, iters, name, exec_=False):
    port = str(free_port())
    cmd = [prog, "-d", "hcaemu0", "-g", "1", "-p", port, "-s", str(size), "-n", str(iters)] + args
    if exec_:
        scmd, senv = via_exec(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", name, cmd)
        ccmd, cenv = via_exec(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", name, cmd + ["127.0.0.1"])
    else:
        scmd, senv = cmd, local_env(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", name)
        ccmd, cenv = cmd + ["127.0.0.1"], local_env(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", name)
    ps = subprocess.Popen(scmd, env=senv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The programs' clients do not retry a refused connect: start it once the server listens.
    if not server_listening(prog, name, port, ps):
        return
    pc = subprocess.Popen(ccmd, env=cenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cr = finish(pc)
    sr = finish(ps)
    label = ("hcaemu exec -- " if exec_ else "") + f"{prog} {' '.join(args)} -s {size} -n {iters}"
    total = size * iters * 2  # each side counts both directions
    lines = {}
    for who, (rc, out, err) in (("server", sr), ("client", cr)):
        m = re.search(r"^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec$", out, re.M)
        m2 = re.search(rf"^{iters} iters in [\d.]+ seconds = [\d.]+ usec/iter$", out, re.M)
        lines[who] = addresses(out)
        expect(f"{label}: {who} exit 0, '{total} bytes in' and '{iters} iters in'",
               rc == 0 and m and int(m.group(1)) == total and m2, (rc, out, err))
    s, c = lines["server"], lines["client"]
    expect(f"{label}: the addresses each side printed agree (QPN, PSN, GID ::ffff:198.18.0.x)",
           s.get("local") and s.get("local") == c.get("remote") and c.get("local") == s.get("remote")
           and s["local"][2] == "::ffff:198.18.0.1" and c["local"][2] == "::ffff:198.18.0.2", (s, c))


RESULT = re.compile(r"^\s*#bytes\s+#iterations.*\n\s*(\d+)\s+(\d+)\s+([\d.]+)", re.M)


def perftest(tmp, prog, args, size, iters, name, total_iters=None):
    """perftest (Debian's 4.5) with -x 1 (GID 1) and -u 18 (1 s ACK timeout: the machine may be
    loaded): both sides exit 0 and print their result line for exactly this size and count."""
    port = str(free_port())
    cmd = [prog, "-d", "hcaemu0", "-x", "1", "-u", "18", "-p", port, "-n", str(iters)] + \
          (["-s", str(size)] if size else []) + args
    ps = subprocess.Popen(cmd, env=local_env(tmp, "server", 0, "198.18.0.1/24", "52:54:00:18:00:01", name),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not server_listening(prog, name, port, ps):
        return
    pc = subprocess.Popen(cmd + ["127.0.0.1"],
                          env=local_env(tmp, "client", 1, "198.18.0.2/24", "52:54:00:18:00:02", name),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cr = finish(pc)
    sr = finish(ps)
    label = f"{prog} {' '.join(args)} -n {iters}" + (f" -s {size}" if size else "")
    want_size = size or 8
    want_iters = total_iters or iters
    for who, (rc, out, err) in (("server", sr), ("client", cr)):
        if who == "server" and prog in ("ib_read_lat", "ib_atomic_lat"):
            # The passive side of a READ/atomic latency test prints no result (perftest's own way).
            expect(f"{label}: server exit 0, no result line", rc == 0 and not RESULT.search(out), (rc, out, err))
            continue
        m = RESULT.search(out)
        expect(f"{label}: {who} exit 0, result line for {want_size} bytes x {want_iters}",
               rc == 0 and m and int(m.group(1)) == want_size and int(m.group(2)) == want_iters,
               (rc, out, err))


def daemon_pingpongs(tmp, hcaemud):
    """Two clients of one hcaemud (its embedded link, net_ring0): the pingpongs with the programs'
    own memory. Needs reg_mr of any memory on a daemon (the verbsmem branch): run with
    --daemon-pingpong once that is merged."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import daemonlib
    sock = os.path.join(tmp, "hcaemud-pp.sock")
    d = daemonlib.Daemon(hcaemud, sock, daemonlib.ring_eal(0, "verbspp"), "198.18.0.1/24", "52:54:00:18:00:01")
    try:
        expect("hcaemud (net_ring0) ready", d.wait_ready(), d.err)
        e = env_for(HCAEMU_DEVICE=f"unix:{sock}")
        for prog, args, size, iters in (("ibv_rc_pingpong", ["-c"], 4096, 300), ("ibv_rc_pingpong", ["-c", "-e"], 20000, 100),
                                        ("ibv_uc_pingpong", ["-c"], 1024, 200), ("ibv_ud_pingpong", ["-c"], 1024, 200),
                                        ("ibv_srq_pingpong", ["-c", "-e"], 1000, 100)):
            port = str(free_port())
            cmd = [prog, "-d", "hcaemu0", "-g", "1", "-p", port, "-s", str(size), "-n", str(iters)] + args
            ps = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            expect(f"{prog} on unix: the server listens", wait_listen(int(port), ps, 30))
            pc = subprocess.Popen(cmd + ["127.0.0.1"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            cr, sr = finish(pc), finish(ps)
            for who, (rc, out, err) in (("server", sr), ("client", cr)):
                m = re.search(r"^(\d+) bytes in [\d.]+ seconds", out, re.M)
                expect(f"unix: {prog} {' '.join(args)} -s {size}: {who} exit 0, {size * iters * 2} bytes",
                       rc == 0 and m and int(m.group(1)) == size * iters * 2, (rc, out, err))
    finally:
        d.stop()


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--verbs-wr", required=True)
    ap.add_argument("--daemon-pingpong", action="store_true",
                    help="also the pingpongs between two clients of one hcaemud (needs the verbsmem branch)")
    a = ap.parse_args()
    BASE_ENV["LD_LIBRARY_PATH"] = a.libdir
    HCAEMU[0] = a.hcaemu
    LIBDIR[0] = os.path.abspath(a.libdir)
    lib = os.path.join(a.libdir, "libibverbs.so.1")
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    asan = re.search(r"(\S*libasan\.so\S*) => (\S+)", ldd)
    if asan:
        BASE_ENV["LD_PRELOAD"] = asan.group(2)
        # The programs are not ours: their leaks are not reported; ours would be in our tests.
        BASE_ENV["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))
    with tempfile.TemporaryDirectory(prefix="hcaemu-verbs-") as tmp:
        check_devices(tmp)
        check_exec_errors()
        check_daemon(tmp, a.hcaemud)
        wr_api(tmp, a.verbs_wr)
        if a.daemon_pingpong:
            daemon_pingpongs(tmp, a.hcaemud)
        cases = [
            ("ibv_rc_pingpong", ["-c"], 1, 100), ("ibv_rc_pingpong", ["-c"], 4096, 500),
            ("ibv_rc_pingpong", ["-c", "-e"], 20000, 100), ("ibv_rc_pingpong", ["-e"], 65536, 50),
            ("ibv_uc_pingpong", ["-c"], 1024, 200), ("ibv_uc_pingpong", ["-c", "-e"], 8192, 100),
            ("ibv_ud_pingpong", ["-c"], 1024, 200), ("ibv_ud_pingpong", ["-c", "-e"], 100, 100),
            ("ibv_srq_pingpong", ["-c"], 4096, 200), ("ibv_srq_pingpong", ["-c", "-e", "-q", "4"], 1000, 100),
        ]
        for i, (prog, args, size, iters) in enumerate(cases):
            pingpong(tmp, prog, args, size, iters, f"pp{i}")
        pingpong(tmp, "ibv_rc_pingpong", ["-c"], 2048, 100, "ppexec", exec_=True)
        perf = [
            ("ib_write_bw", [], 65536, 200, None), ("ib_write_bw", ["-q", "4"], 8192, 100, 400),
            ("ib_send_bw", [], 4096, 300, None), ("ib_send_bw", ["-e"], 2048, 200, None),
            ("ib_send_bw", ["-c", "UD"], 1024, 200, None), ("ib_read_bw", [], 65536, 100, None),
            ("ib_atomic_bw", [], 0, 200, None), ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"], 0, 100, None),
            # ib_write_lat is left out: both sides spin on memory, so only the progress threads
            # drive the two engines, and on this oversubscribed 2-core machine they get no CPU
            # for over a second at times (docs/verbs.md, "Not done yet").
            ("ib_send_lat", [], 64, 200, None),
            ("ib_read_lat", [], 64, 200, None), ("ib_atomic_lat", [], 0, 100, None),
        ]
        for i, (prog, args, size, iters, total) in enumerate(perf):
            perftest(tmp, prog, args, size, iters, f"pt{i}", total)
    if failures:
        print("\n".join("FAIL " + f for f in failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
