#!/usr/bin/python3
"""hcaemu's librdmacm.so.1 (tools/rdmacm, docs/rdmacm.md) under Debian 12's unmodified rdma_cm
programs.

- `abi`: the library exports exactly the functions and symbol versions of Debian's librdmacm.so.1
  (objdump -T), every RDMACM_* symbol that rdmacm-utils, perftest and pyverbs import is among them,
  its soname is librdmacm.so.1 and it needs libibverbs.so.1 (ours, through its RUNPATH); `hcaemu
  exec` makes rping and ib_write_bw resolve both libraries to ours (ldd); with no device the library
  answers ENODEV, as librdmacm does on a machine without RDMA devices.
- `two`: two hcaemud joined by net_memif (198.18.6.1 and .2), the server program a client of one,
  the client program of the other; `local`: HCAEMU_DEVICE=local in both programs over a net_memif
  pair (198.18.7.1 and .2), rping there through `hcaemu exec`. In each: `rping -s` / `rping -c -v -V
  -C 10` (every ping's bytes printed by both sides and compared with rping's own pattern; the
  client's disconnect seen by the server: "server DISCONNECT EVENT"); `ucmatose` with 2 connections
  (the server disconnects, the client's wait for its DISCONNECTED events ends); a connect to a port
  nobody listens on (RDMA_CM_EVENT_REJECTED, error 8: IBTA's invalid service ID); `udaddy` (UD by
  SIDR); `rdma_server` / `rdma_client` (rdma_create_ep, rdma_get_request, the rdma_verbs.h
  helpers); perftest's `ib_send_bw -R`, `ib_write_bw -R`, `ib_read_lat -R` (their result rows);
  `perftest_rej`: perftest -R's client REJected at its first and at its second connection exits 1
  with its own messages, no signal (the second: the SIGBUS of a stale id, case_perftest_rej).
- `rdma_core`: rdma-core's test_rdmacm.py and test_addr.py (../shared/rdma-core-tests, unmodified)
  on an hcaemud, our librdmacm first: nothing fails; the skips and their reasons are listed.

An rdma_cm server has no TCP port to wait for: a client that finds nobody listening yet (REJECTED)
runs again, up to 10 times a second apart."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_verbs as cv  # noqa: E402
import check_verbs_daemon as cvd  # noqa: E402
import daemonlib  # noqa: E402
from proclib import eal, expect, finish, free_port, memif, report, run, start  # noqa: E402

DEBIAN = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1"
IMPORTERS = ["/usr/bin/rping", "/usr/bin/udaddy", "/usr/bin/ucmatose", "/usr/bin/cmtime", "/usr/bin/mckey",
             "/usr/bin/rdma_server", "/usr/bin/rdma_client", "/usr/bin/rdma_xserver", "/usr/bin/rdma_xclient",
             "/usr/bin/rstream", "/usr/bin/riostream", "/usr/bin/rcopy", "/usr/bin/udpong",
             "/usr/bin/ib_write_bw", "/usr/bin/ib_send_bw", "/usr/bin/ib_read_lat",
             "/usr/lib/python3/dist-packages/pyverbs/cmid.cpython-311-x86_64-linux-gnu.so",
             "/usr/lib/python3/dist-packages/pyverbs/device.cpython-311-x86_64-linux-gnu.so"]
LIB = [None]  # our librdmacm.so.1
SLOW_LISTEN = [None]  # tests/rdmacm_slow_listen.cpp, built
HCAEMU = [None]


def dynsyms(path, imported=False):
    """{(version, name)} of the functions and objects `path` defines (or, imported: takes from RDMACM_*)."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        if " DF " not in line and " DO " not in line:
            continue
        f = line.split()
        name, ver = f[-1], f[-2].strip("()")
        if ver == name:  # the version's own definition
            continue
        und = "*UND*" in line
        if imported and und and ver.startswith("RDMACM_"):
            syms.add((ver, name))
        elif not imported and not und:
            syms.add((ver, name))
    return syms


def check_abi(hcaemu):
    ours, theirs = dynsyms(LIB[0]), dynsyms(DEBIAN)
    expect(f"exports: Debian's {len(theirs)} symbols with their versions, no other",
           ours == theirs and len(theirs) == 68, (sorted(theirs - ours), sorted(ours - theirs)))
    for prog in IMPORTERS:
        if os.path.exists(prog):
            need = dynsyms(prog, imported=True)
            expect(f"{os.path.basename(prog)}: its {len(need)} RDMACM_* imports are exported", need and need <= ours,
                   sorted(need - ours))
    d = subprocess.run(["readelf", "-d", LIB[0]], capture_output=True, text=True).stdout
    expect("soname librdmacm.so.1, needs libibverbs.so.1",
           "Library soname: [librdmacm.so.1]" in d and "Shared library: [libibverbs.so.1]" in d, d)
    build = os.path.dirname(os.path.dirname(LIB[0]))
    e = cv.env_for()
    e.pop("LD_LIBRARY_PATH", None)
    for prog in ("/usr/bin/rping", "/usr/bin/ib_write_bw"):
        rc, out, err = run([hcaemu, "exec", "--device", "unix:/nonexistent", "--", "ldd", prog], e)
        expect(f"hcaemu exec -- {os.path.basename(prog)}: librdmacm.so.1 and libibverbs.so.1 are ours",
               rc == 0 and re.search(rf"librdmacm\.so\.1 => {re.escape(build)}/rdmacm/librdmacm\.so\.1 ", out)
               and re.search(rf"libibverbs\.so\.1 => {re.escape(build)}/verbs/libibverbs\.so\.1 ", out), (rc, out, err))
    # No device (HCAEMU_DEVICE unset): librdmacm's answer on a machine without RDMA devices.
    code = ("import ctypes,sys\n"
            f"l=ctypes.CDLL({LIB[0]!r},use_errno=True)\n"
            "l.rdma_create_event_channel.restype=ctypes.c_void_p\n"
            "c=l.rdma_create_event_channel(); e1=ctypes.get_errno()\n"
            "r=ctypes.c_void_p(); g=l.rdma_getaddrinfo(b'198.18.0.1',b'7471',None,ctypes.byref(r)); e2=ctypes.get_errno()\n"
            "print(c, e1, g, e2)\n")
    rc, out, err = run([sys.executable, "-c", code], cv.env_for())
    expect("no device: rdma_create_event_channel NULL and rdma_getaddrinfo -1, both ENODEV (19)",
           rc == 0 and out.split() == ["None", "19", "-1", "19"], (rc, out, err))


# ---------------------------------------------------------------- the programs, end to end

def rejected(r):
    """The client found nobody listening (rdma_cm's REJECTED; perftest prints the event's number, 8)."""
    return "REJECTED" in r[1] + r[2] or "Unexpected CM event bl blka 8" in r[1] + r[2]


def start_server(scmd, senv):
    """The server; for a local pair, once its HCA made the memif socket (the last case's is removed
    first: it would look ready)."""
    if WAIT_FOR[0] and os.path.exists(WAIT_FOR[0]):
        os.unlink(WAIT_FOR[0])
    ps = start(scmd, senv)
    end = time.time() + 30
    while WAIT_FOR[0] and not os.path.exists(WAIT_FOR[0]) and time.time() < end and ps.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    return ps


LEAK = [None]  # librestart_leak.so (case_rping)
WAIT_FOR = [None]  # local pairs: the memif socket the server's HCA makes (the client's HCA connects to it)


def late_listen(r):
    """perftest -R's client REJected at its second connection: its server listens for the data
    connection only after the exchange that the client leaves at once to connect (perftest's own
    race; the kernel's CM REJects the same way). The server then waits for a client that is gone."""
    return "RDMA_CM_EVENT_REJECTED" in r[2] and "Failed to create RDMA CM connection" in r[2]


def cm_pair(name, scmd, senv, ccmd, cenv, timeout=90):
    """The server, then the client, run again while it finds nobody listening; both again (at most
    twice more, said on stdout) after perftest's late-listen race or its failed CPU clock
    calibration: ((rc, out, err) of the server, of the client)."""
    for attempt in range(3):
        ps = start_server(scmd, senv)
        cr = None
        for _ in range(10):
            cr = run(ccmd, cenv, timeout)
            if not rejected(cr) or late_listen(cr) or ps.poll() is not None:
                break
            time.sleep(1)
        if late_listen(cr) and ps.poll() is None and attempt < 2:
            ps.kill()  # our own child, by its handle
            finish(ps, 10)
            print(f"note {name}: the client's data connection was REJected before its server listened "
                  "for it (perftest -R's race): both again", flush=True)
            continue
        if cv.CALIBRATION in cr[2] and ps.poll() is None:
            ps.kill()  # our own child, by its handle: it would wait for the client that gave up
        sr = finish(ps, timeout)
        why = cv.calibration_failed(sr, cr)
        if why and attempt < 2:
            print(f"note {name}: {why}", flush=True)
            continue
        return sr, cr


def rping_lines(count, size):
    """What rping -v prints for each ping: 'rdma-ping-N: ' then letters from 'A' + N (wrapping after
    'z' to 'A'), size - 1 bytes (the last is the NUL)."""
    lines, start_c = [], 65
    for n in range(count):
        s = f"rdma-ping-{n}: "
        c = start_c
        while len(s) < size - 1:
            s += chr(c)
            c = 65 if c + 1 > 122 else c + 1
        lines.append(s[:size - 1])
        start_c = 65 if start_c + 1 > 122 else start_c + 1
    return lines


def rping_exit_race(rc, err):
    """rping's own race at exit: main destroys its id once the DISCONNECTED event is acked, then the
    event channel, while the CM thread that acked it loops back to rdma_get_cm_event; called on a
    destroyed channel, it fails (EINVAL here; the kernel's librdmacm reads a freed channel's fd) and
    the thread exits the process with -1. Only after the pings: the DISCONNECT was seen."""
    return rc == 255 and "rdma_get_cm_event: Invalid argument" in err and "DISCONNECT EVENT" in err


def case_rping(mode, ends, sip, exec_cmd=None):
    port, n, size = str(free_port()), 10, 100
    (senv, _), (cenv, _) = ends
    scmd = ["rping", "-s", "-a", sip, "-p", port, "-v", "-C", str(n), "-S", str(size)]
    ccmd = ["rping", "-c", "-a", sip, "-p", port, "-v", "-V", "-C", str(n), "-S", str(size)]
    if exec_cmd:
        scmd, senv = exec_cmd("server", scmd)
        ccmd, cenv = exec_cmd("client", ccmd)
    # Every 3rd blocking read of an eventfd (rping's CM and CQ event threads) fails with errno 512,
    # as this CI's kernel now and then answers one: the libraries read again.
    senv, cenv = (dict(e, HCAEMU_TEST_RESTART_LEAK="3", LD_PRELOAD=" ".join(filter(None, [e.get("LD_PRELOAD"), LEAK[0]])))
                  for e in (senv, cenv))
    label = f"[{mode}] " + ("hcaemu exec -- " if exec_cmd else "") + f"rping -C {n} -S {size}"
    for attempt in range(3):
        (src, sout, serr), (crc, cout, cerr) = cm_pair("rping", scmd, senv, ccmd, cenv)
        raced = [who for who, rc, err in (("server", src, serr), ("client", crc, cerr)) if rping_exit_race(rc, err)]
        if not raced or attempt == 2:
            break
        print(f"note {label}: the {' and '.join(raced)}'s CM thread asked for an event after its main thread had "
              "destroyed the channel (rping's own race at exit; the library answers EINVAL): both again", flush=True)
    want = rping_lines(n, size)
    leaked = re.search(r"^restart_leak: (\d+) reads", cerr, re.M)
    expect(f"{label}: client exit 0, every ping's bytes as rping made them (-V: no mismatch), "
           "with every 3rd eventfd read failing with errno 512 (at least one did)",
           crc == 0 and cout.splitlines() == [f"ping data: {w}" for w in want] and "mismatch" not in cerr
           and leaked and int(leaked.group(1)) > 0, (crc, cout, cerr))
    expect(f"{label}: server exit 0, the same {n} pings read by RDMA READ, the client's disconnect seen",
           src == 0 and [x for x in sout.splitlines() if x.startswith("server ping data")] ==
           [f"server ping data: {w}" for w in want] and "server DISCONNECT EVENT" in serr, (src, sout, serr))


def case_ucmatose(mode, ends, sip):
    port = str(free_port())
    (senv, _), (cenv, _) = ends
    (src, sout, serr), (crc, cout, cerr) = cm_pair(
        "ucmatose", ["ucmatose", "-b", sip, "-p", port, "-c", "2", "-C", "10"], senv,
        ["ucmatose", "-s", sip, "-p", port, "-c", "2", "-C", "10"], cenv)
    for who, rc, out, err in (("server", src, sout, serr), ("client", crc, cout, cerr)):
        expect(f"[{mode}] ucmatose -c 2 -C 10: {who} exit 0, 'data transfers complete', 'test complete'"
               + (" after its DISCONNECTED events (the server disconnected)" if who == "client" else ""),
               rc == 0 and "data transfers complete" in out and "test complete" in out
               and "return status 0" in out, (rc, out, err))
    expect(f"[{mode}] ucmatose: the server disconnected", "cmatose: disconnecting" in sout and "disconnected" in sout, sout)


def case_reject(mode, ends, sip):
    """A connect to a port nobody listens on, while the peer's HCA runs (an rping server on another
    port: a local HCA lives in its program)."""
    port, other = str(free_port()), str(free_port())
    (senv, _), (cenv, _) = ends
    ps = start_server(["rping", "-s", "-a", sip, "-p", other, "-C", "1"], senv)
    try:
        rc, out, err = run(["ucmatose", "-s", sip, "-p", port, "-c", "1", "-C", "1"], cenv, 60)
        expect(f"[{mode}] ucmatose to port {port} where nobody listens: RDMA_CM_EVENT_REJECTED, error 8 "
               "(invalid service ID)", "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8" in out and rc != 0,
               (rc, out, err))
    finally:
        ps.kill()  # our own child, by its handle
        finish(ps, 10)


def case_udaddy(mode, ends, sip):
    (senv, _), (cenv, _) = ends
    (src, sout, serr), (crc, cout, cerr) = cm_pair(
        "udaddy", ["udaddy", "-b", sip, "-c", "2", "-C", "10"], senv, ["udaddy", "-s", sip, "-c", "2", "-C", "10"], cenv)
    for who, rc, out, err in (("server", src, sout, serr), ("client", crc, cout, cerr)):
        expect(f"[{mode}] udaddy -c 2 -C 10 (UD, SIDR): {who} exit 0, 'data transfers complete', 'test complete'",
               rc == 0 and "data transfers complete" in out and "test complete" in out, (rc, out, err))


def case_rdma_server(mode, ends, sip):
    port = str(free_port())
    (senv, _), (cenv, _) = ends
    (src, sout, serr), (crc, cout, cerr) = cm_pair(
        "rdma_server", ["rdma_server", "-s", sip, "-p", port], senv, ["rdma_client", "-s", sip, "-p", port], cenv)
    expect(f"[{mode}] rdma_server / rdma_client: both 'end 0'",
           src == 0 and "rdma_server: end 0" in sout and crc == 0 and "rdma_client: end 0" in cout,
           (src, sout, serr, crc, cout, cerr))


def case_perftest(mode, ends, sip, prog, size, iters):
    port = str(free_port())
    (senv, _), (cenv, _) = ends
    cmd = [prog, "-R", "-d", "hcaemu0", "-p", port, "-s", str(size), "-n", str(iters)]
    (src, sout, serr), (crc, cout, cerr) = cm_pair(prog, cmd, senv, cmd + [sip], cenv)
    for who, rc, out, err in (("server", src, sout, serr), ("client", crc, cout, cerr)):
        rows = cv.table(out)
        quiet = who == "server" and cv.passive(prog, [])
        expect(f"[{mode}] {prog} -R -s {size} -n {iters}: {who} exit 0"
               + ("" if quiet else f", one row of {size} B x {iters} iterations"),
               rc == 0 and (quiet or (len(rows) == 1 and rows[0][:2] == (size, iters) and rows[0][2] > 0)),
               (rc, out, err))


def case_perftest_rej(mode, ends, sip, prog, exec_cmd=None):
    """perftest -R's client REJected (reason 8: nobody listening), at its first rdma_cm connection
    (the out-of-band one) and at its second (the data QP's: the server's second rdma_listen made late
    by rdmacm_slow_listen, preloaded into the server only): the unmodified client exits 1 with its
    own messages, killed by no signal. perftest 4.5-0.17 then retries with ids read from the `nodes`
    array it has just freed (fixed upstream in perftest 3d9d8d0): before the library checked ids,
    rdma_resolve_addr dereferenced those bytes (a sockaddr_in) and the client died of SIGBUS."""
    (senv, _), (cenv, _) = ends
    tag = f"[{mode}] " + ("hcaemu exec -- " if exec_cmd else "") + f"{prog} -R client"
    port, other = str(free_port()), str(free_port())
    ccmd = [prog, "-R", "-d", "hcaemu0", "-p", port, "-s", "4096", "-n", "20", sip]
    cmd, env = exec_cmd("client", ccmd) if exec_cmd else (ccmd, cenv)
    scmd = ["rping", "-s", "-a", sip, "-p", other, "-C", "1"]  # the peer's HCA runs, nobody on `port`
    ps = start_server(*(exec_cmd("server", scmd) if exec_cmd else (scmd, senv)))
    try:
        rc, out, err = run(cmd, env, 60)
    finally:
        ps.kill()  # our own child, by its handle
        finish(ps, 10)
    expect(f"{tag} to port {port} where nobody listens: exit 1, 'Unexpected CM event bl blka 8' (REJECTED), "
           "'Unable to init the socket connection'", rc == 1 and "Unexpected CM event bl blka 8" in err
           and "Unable to init the socket connection" in err, (rc, out, err))

    port = str(free_port())
    scmd = [prog, "-R", "-d", "hcaemu0", "-p", port, "-s", "4096", "-n", "20"]
    ccmd = scmd + [sip]
    if exec_cmd:
        scmd, senv = exec_cmd("server", scmd)
        cmd, env = exec_cmd("client", ccmd)
    else:
        cmd, env = ccmd, cenv
    senv = dict(senv, HCAEMU_TEST_SLOW_LISTEN="2:6",
                LD_PRELOAD=" ".join(filter(None, [senv.get("LD_PRELOAD"), SLOW_LISTEN[0]])))
    ps = start_server(scmd, senv)
    try:
        for _ in range(10):  # a first connection REJected: the server was not listening yet
            rc, out, err = run(cmd, env, 60)
            if "Unable to init the socket connection" not in err or ps.poll() is not None:
                break
            time.sleep(1)
    finally:
        ps.kill()
        sr = finish(ps, 10)
    expect(f"{tag}, its second connection REJected (the server's second rdma_listen 6 s late): exit 1, "
           "no signal, 'Event: RDMA_CM_EVENT_REJECTED; error: 8.', 'Failed to create RDMA CM connection'",
           rc == 1 and "Event: RDMA_CM_EVENT_REJECTED; error: 8." in err
           and "Failed to create RDMA CM connection with resources." in err, (rc, out, err, sr))


def case_hcaemu_perf(mode, ends, sip, prog, size, iters, exec_cmd=None):
    """`hcaemu perf -R` (rdma_cm for the exchange and the test's QPs, as perftest's -R) against
    itself and, with a local pair, against Debian's unmodified perftest -R through `hcaemu exec`,
    each as server and as client: both exit 0 and print perftest's result row (size, iterations,
    a figure above 0); the side of read_lat that only answers prints none."""
    test = prog[3:]  # ib_write_bw -> write_bw
    (senv, _), (cenv, _) = ends
    pairs = [("hcaemu", "hcaemu")] + ([("hcaemu", "debian"), ("debian", "hcaemu")] if exec_cmd else [])
    for skind, ckind in pairs:
        port = str(free_port())
        cmds = {}
        for role in ("server", "client"):
            kind = skind if role == "server" else ckind
            # both hcaemu: --check, the bytes that arrived compared with the pattern sent
            tail = ["-s", str(size), "-n", str(iters)] + (["--check"] if skind == ckind else []) + \
                ([sip] if role == "client" else [])
            if kind == "debian":
                cmds[role] = exec_cmd(role, [prog, "-R", "-d", "hcaemu0", "-p", port] + tail)
            elif exec_cmd:  # a local HCA of its own on the net_memif pair
                cmd, env = exec_cmd(role, ["true"])
                i = cmd.index("--")  # hcaemu exec --ip .. --mac .. --eal .. -- true
                cmds[role] = ([HCAEMU[0], "perf", test, "-R", "-p", port, "--oob-timeout", "30"] + cmd[2:i] + tail, env)
            else:
                env = senv if role == "server" else cenv
                cmds[role] = ([HCAEMU[0], "perf", test, "-R", "-p", port, "--oob-timeout", "30",
                               "--device", env["HCAEMU_DEVICE"]] + tail, env)
        (src, sout, serr), (crc, cout, cerr) = cm_pair(prog, cmds["server"][0], cmds["server"][1],
                                                       cmds["client"][0], cmds["client"][1])
        for who, kind, rc, out, err in (("server", skind, src, sout, serr), ("client", ckind, crc, cout, cerr)):
            rows = cv.table(out)
            quiet = who == "server" and cv.passive(prog, [])
            name = "hcaemu perf " + test + " -R" if kind == "hcaemu" else prog + " -R (hcaemu exec)"
            expect(f"[{mode}] {skind} server, {ckind} client, {prog[3:]} -s {size} -n {iters}: {who} ({name}) exit 0"
                   + ("" if quiet else f", one row of {size} B x {iters} iterations"),
                   rc == 0 and (quiet or (len(rows) == 1 and rows[0][:2] == (size, iters) and rows[0][2] > 0)),
                   (rc, out, err))
        if skind == ckind:  # the side the data reached: WRITE and SEND the server, READ the client
            out = cout if prog == "ib_read_lat" else sout
            expect(f"[{mode}] hcaemu perf {test} -R --check: 'data check: ok' where the data landed",
                   "data check: ok" in out and "FAILED" not in sout + cout, (sout, cout))


def case_hcaemu_perf_rej(mode, ends, sip, exec_cmd):
    """`hcaemu perf -R` as client of a port nobody listens on: it connects again while the REJ says
    so (reason 8: a perftest server may not listen yet), then gives up at --oob-timeout: exit 1."""
    port, other = str(free_port()), str(free_port())
    ps = start_server(*exec_cmd("server", ["rping", "-s", "-a", sip, "-p", other, "-C", "1"]))
    try:
        cmd, env = exec_cmd("client", ["true"])
        i = cmd.index("--")
        t0 = time.time()
        rc, out, err = run([HCAEMU[0], "perf", "write_bw", "-R", "-p", port, "--oob-timeout", "2"] + cmd[2:i] + [sip],
                           env, 60)
        took = time.time() - t0
    finally:
        ps.kill()  # our own child, by its handle
        finish(ps, 10)
    expect(f"[{mode}] hcaemu perf write_bw -R to port {port} where nobody listens: REJ 8 again and again, "
           f"exit 1 after --oob-timeout 2 (took {took:.1f} s)",
           rc == 1 and "rdma_cm: rdma_connect: rejected, reason 8" in err and 2 <= took < 15, (rc, out, err))


def matrix(mode, ends, sip, exec_cmd=None, only=""):
    cases = [("rping", lambda: case_rping(mode, ends, sip, exec_cmd)),
             ("ucmatose", lambda: case_ucmatose(mode, ends, sip)),
             ("reject", lambda: case_reject(mode, ends, sip)),
             ("udaddy", lambda: case_udaddy(mode, ends, sip)),
             ("rdma_server", lambda: case_rdma_server(mode, ends, sip)),
             ("ib_send_bw", lambda: case_perftest(mode, ends, sip, "ib_send_bw", 4096, 200)),
             ("ib_write_bw", lambda: case_perftest(mode, ends, sip, "ib_write_bw", 65536, 200)),
             ("ib_read_lat", lambda: case_perftest(mode, ends, sip, "ib_read_lat", 64, 200)),
             ("perftest_rej", lambda: case_perftest_rej(mode, ends, sip, "ib_write_bw", exec_cmd)),
             ("hcaemu_perf_write_bw", lambda: case_hcaemu_perf(mode, ends, sip, "ib_write_bw", 65536, 200, exec_cmd)),
             ("hcaemu_perf_send_bw", lambda: case_hcaemu_perf(mode, ends, sip, "ib_send_bw", 4096, 200, exec_cmd)),
             ("hcaemu_perf_read_lat", lambda: case_hcaemu_perf(mode, ends, sip, "ib_read_lat", 64, 200, exec_cmd))]
    if exec_cmd:
        cases += [("hcaemu_perf_rej", lambda: case_hcaemu_perf_rej(mode, ends, sip, exec_cmd)),
                  ("perftest_rej_send", lambda: case_perftest_rej(mode, ends, sip, "ib_send_bw", exec_cmd)),
                  ("perftest_rej_read", lambda: case_perftest_rej(mode, ends, sip, "ib_read_lat", exec_cmd))]
    for name, fn in cases:
        if any(o in name for o in only.split(",")):
            fn()


def two_daemons(tmp, hcaemud, only):
    tag = f"cm{os.getpid()}"
    sa, sb = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
    da = daemonlib.Daemon(hcaemud, sa, daemonlib.memif_eal(tmp, "server", "0", tag), "198.18.6.1/24", "52:54:00:18:06:01")
    db = None
    try:
        if not expect("two: daemon A (memif server) ready", da.wait_ready(), da.err):
            return
        db = daemonlib.Daemon(hcaemud, sb, daemonlib.memif_eal(tmp, "client", "1", tag), "198.18.6.2/24",
                              "52:54:00:18:06:02")
        if expect("two: daemon B (memif client) ready", db.wait_ready(), db.err):
            ends = ((cv.env_for(HCAEMU_DEVICE=f"unix:{sa}"), None), (cv.env_for(HCAEMU_DEVICE=f"unix:{sb}"), None))
            # The memif link comes up some time after the daemons accept clients (an ARP before it
            # fails: ADDR_ERROR): a pingpong crosses it first.
            if expect("two: the memif link carries a pingpong (up to 30 s after start)", cvd.link_up(ends)):
                matrix("two", ends, "198.18.6.1", only=only)
    finally:
        for d, name in ((db, "daemon B"), (da, "daemon A")):
            if d:
                rc = d.stop()
                expect(f"two: {name}: SIGTERM, exit 0", rc == 0, (rc, d.out[-2000:], d.err[-2000:]))


def local_pair(tmp, hcaemu, only):
    sock = os.path.join(tmp, "memif-local.sock")
    pre = f"cml{os.getpid()}"
    ends = ((cv.env_for(HCAEMU_DEVICE="local", HCAEMU_IP="198.18.7.1/24", HCAEMU_MAC="52:54:00:18:07:01",
                        HCAEMU_EAL=eal(0, memif("server", sock), prefix=pre + "s")), None),
            (cv.env_for(HCAEMU_DEVICE="local", HCAEMU_IP="198.18.7.2/24", HCAEMU_MAC="52:54:00:18:07:02",
                        HCAEMU_EAL=eal(1, memif("client", sock), prefix=pre + "c")), None))

    def via_exec(role, cmd):
        e = cv.env_for()
        e.pop("LD_LIBRARY_PATH", None)
        ip, mac, lc = ("198.18.7.1/24", "52:54:00:18:07:01", 0) if role == "server" else ("198.18.7.2/24", "52:54:00:18:07:02", 1)
        return [hcaemu, "exec", "--ip", ip, "--mac", mac, "--eal",
                eal(lc, memif(role, sock), prefix=pre + role[0]), "--"] + cmd, e

    WAIT_FOR[0] = sock
    matrix("local", ends, "198.18.7.1", exec_cmd=via_exec, only=only)
    WAIT_FOR[0] = None


# ---------------------------------------------------------------- rdma-core's tests

def rdma_core(tmp, hcaemud, suite, libdir):
    s = os.path.join(tmp, "rc.sock")
    d = daemonlib.Daemon(hcaemud, s, daemonlib.ring_eal(0, f"cmr{os.getpid()}"), "198.18.8.1/24", "52:54:00:18:08:01")
    try:
        if not expect("rdma_core: daemon ready", d.wait_ready(), d.err):
            return
        env = cv.env_for(HCAEMU_DEVICE=f"unix:{s}")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        rc, out, err = run(["/usr/bin/python3", "-c", "import pyverbs.cmid\nprint(open('/proc/self/maps').read())"], env)
        expect("rdma_core: pyverbs.cmid loads our librdmacm.so.1",
               rc == 0 and os.path.realpath(LIB[0]) in {os.path.realpath(x.split()[-1]) for x in out.splitlines()
                                                         if "librdmacm" in x}, (rc, err))
        r = subprocess.run(["/usr/bin/python3", "run_tests.py", "-v", "--dev", "hcaemu0", "test_rdmacm", "test_addr"],
                           cwd=suite, env=env, capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        results, cur = [], None  # (test, module, result, skip reason); a docstring line may come between
        for line in out.splitlines():
            m = re.match(r"^(test_\w+) \(([\w.]+)\)", line)
            if m:
                cur = m.groups()
            r2 = re.search(r" \.\.\. (ok|skipped (['\"])(.*)\2|FAIL|ERROR)$", line)
            if r2 and cur:
                results.append((cur[0], cur[1], r2.group(1), r2.group(3) or ""))
                cur = None
        summary = re.search(r"^Ran (\d+) tests", out, re.M)
        passed = [t for t, _, res, _ in results if res == "ok"]
        skips = {}
        for t, _, res, why in results:
            if res.startswith("skipped"):
                skips.setdefault(why, []).append(t)
        bad = [(t, res) for t, _, res, _ in results if res in ("FAIL", "ERROR")]
        print(f"rdma_core test_rdmacm + test_addr: {summary.group(1) if summary else '?'} tests, {len(passed)} pass: "
              f"{' '.join(passed)}")
        for why, ts in skips.items():
            print(f"  skipped {len(ts)} ({why}): {' '.join(ts)}")
        expect("rdma_core test_rdmacm + test_addr: exit 0, none fails, every test accounted for",
               r.returncode == 0 and not bad and summary and int(summary.group(1)) == len(results), (bad, out[-4000:]))
        # Their own capability check: the rdma_cm tests need the device's kernel net interface
        # (/sys/class/infiniband/DEV/device/net), which only a kernel device has.
        expect("rdma_core: the only skip reason is the suite's net-interface check",
               set(skips) <= {"Device hcaemu0 doesn't have net interface"}, skips)
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libdir", required=True, help="build/tools/verbs")
    ap.add_argument("--rdmacm", required=True, help="our librdmacm.so.1")
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--hcaemud", required=True)
    ap.add_argument("--rdma-core-tests", default="")
    ap.add_argument("--part", default="abi,two,local,rdma_core")
    ap.add_argument("--slow-listen", required=True, help="librdmacm_slow_listen.so (perftest_rej)")
    ap.add_argument("--restart-leak", required=True, help="librestart_leak.so (errno 512 on eventfd reads)")
    ap.add_argument("--only", default="", help="the cases whose name contains one of these (comma-separated)")
    a = ap.parse_args()
    LIB[0] = os.path.abspath(a.rdmacm)
    SLOW_LISTEN[0] = os.path.abspath(a.slow_listen)
    LEAK[0] = os.path.abspath(a.restart_leak)
    HCAEMU[0] = os.path.abspath(a.hcaemu)
    cv.setup_env(a.libdir)
    cv.BASE_ENV["LD_LIBRARY_PATH"] = f"{os.path.abspath(a.libdir)}:{os.path.dirname(LIB[0])}"
    parts = a.part.split(",")
    with tempfile.TemporaryDirectory(prefix="hcaemu-rdmacm-") as tmp:
        if "abi" in parts:
            check_abi(a.hcaemu)
        if "two" in parts:
            two_daemons(tmp, a.hcaemud, a.only)
        if "local" in parts:
            local_pair(tmp, a.hcaemu, a.only)
        if "rdma_core" in parts and a.rdma_core_tests:
            rdma_core(tmp, a.hcaemud, a.rdma_core_tests, a.libdir)
    return report()


if __name__ == "__main__":
    sys.exit(main())
