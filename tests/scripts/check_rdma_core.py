#!/usr/bin/python3
"""rdma-core's own test suite (v44.0, unmodified, with Debian's python3-pyverbs) against hcaemu0 through
hcaemu's libibverbs, twice: the HCA of an hcaemud on net_ring (HCAEMU_DEVICE=unix:PATH), then an HCA
inside the python process (HCAEMU_DEVICE=local).

Passes when no test fails or errors, as many pass as today, and every skip is the suite's own answer
to a capability the device reports it lacks (or to another vendor's device): each skip reason must be
in SKIPS below, with why. A new reason (say "Rereg MR is not supported") fails the check.

usage: check_rdma_core.py HCAEMUD VERBS_LIBDIR RDMA_CORE_TESTS_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemonlib  # noqa: E402
import proclib  # noqa: E402

PYTHON = "/usr/bin/python3"  # the interpreter Debian's pyverbs is built for
RAN, PASSED = 273, 83        # v44.0 on hcaemu today: exact, so a newly skipped test shows too

# Skip reason -> why hcaemu answers so (docs/verbs.md repeats this table).
SKIPS = {
    "Can not run the test over non MLX5 device": "another vendor's device",
    "Could not open mlx5 context (This is not an MLX5 device)": "another vendor's device",
    "Can not run the test over non EFA device": "another vendor's device",
    "PCI device must be passed by the user": "mlx5 VFIO tests",
    "cuda-python 12.0+ must be installed to run CUDA tests": "no GPU",
    "Allocating dmabuf is not supported by /dev/dri/renderD128": "no GPU memory to export",
    "ODP is not supported - No ODP caps": "no on-demand paging (odp_caps 0)",
    "Device memory is not supported": "no device memory (max_dm_size 0)",
    "Create XRCD is not supported": "no XRC",
    "Reg MR with MW access is not supported": "no memory windows (max_mw 0)",
    "Create memory window of type 3 is not supported": "no memory windows",
    "Create custom mr with additional access flags 18 is not supported": "MW_BIND access: no memory windows",
    "Create QP type 8 is not supported": "no raw packet QPs",
    "Create Raw Packet QP without attrs is not supported": "no raw packet QPs",
    "Create Raw Packet QP with attrs is not supported": "no raw packet QPs",
    "Create Raw Packet QP without extended attrs is not supported": "no raw packet QPs",
    "Create Raw Packet QP with extended attrs is not supported": "no raw packet QPs",
    "Parent Domain is not supported on this device": "no parent domains (rxe has none either)",
    "Create Extended CQ is not supported": "completion timestamps: no device clock (hca_core_clock 0)",
    "Query device real time is not supported": "no device clock",
    "Extended CQ is not supported": "tag matching (tm_caps 0)",
    "Extended QP is not supported on this device": "ATOMIC_WRITE (not in send_ops_flags)",
    "There are no huge pages of size 2M allocated": "the ODP and parent domain huge page tests (skipped anyway)",
    "Device hcaemu0 doesn't have net interface": "rdma_cm tests: they look for /sys/class/infiniband/DEV/device/net, "
                                                   "which only a kernel device has",
}

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run_suite(suite, env, mode):
    """One run of the whole suite; checks its result and returns its output."""
    r = subprocess.run([PYTHON, "run_tests.py", "-v", "--dev", "hcaemu0"], cwd=suite, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    out = r.stdout
    ran = re.search(r"^Ran (\d+) tests? in", out, re.M)
    summary = re.search(r"^(OK|FAILED) \((.*)\)$", out, re.M)
    skipped = int(re.search(r"skipped=(\d+)", summary.group(2)).group(1)) if summary and "skipped=" in summary.group(2) else 0
    bad = re.findall(r"^(?:ERROR|FAIL): (\S+)", out, re.M)
    reasons = {}
    for m in re.finditer(r"\.\.\. skipped ['\"](.*)['\"]$", out, re.M):
        reasons[m.group(1)] = reasons.get(m.group(1), 0) + 1
    n_ran = int(ran.group(1)) if ran else 0
    passed = n_ran - skipped - len(bad)
    print(f"{mode}: rdma-core tests ran {n_ran}, passed {passed}, skipped {skipped}, failed or errors {len(bad)}")
    for why, n in sorted(reasons.items(), key=lambda x: -x[1]):
        print(f"  skipped {n:3d}: {why}  [{SKIPS.get(why, 'NOT EXPECTED')}]")
    nfail = len(failures)
    check(r.returncode == 0 and summary and summary.group(1) == "OK", f"{mode}: run_tests.py exit 0, OK (exit {r.returncode})")
    check(not bad, f"{mode}: no test failed or errored: {len(bad)}: {' '.join(bad[:12])}")
    check(n_ran == RAN, f"{mode}: {n_ran} tests ran (v44.0 has {RAN})")
    check(passed == PASSED, f"{mode}: {passed} passed ({PASSED} expected: change PASSED when more pass)")
    unexpected = sorted(set(reasons) - set(SKIPS))
    check(not unexpected, f"{mode}: every skip is a capability the device lacks or another vendor's test: {unexpected}")
    check(sum(reasons.values()) == skipped, f"{mode}: every skip has its reason printed ({sum(reasons.values())} of {skipped})")
    if len(failures) > nfail:
        print(out[-6000:])


def main():
    hcaemud, libdir, suite = (os.path.abspath(a) for a in sys.argv[1:4])  # run_tests.py runs in `suite`
    base = dict(os.environ, LD_LIBRARY_PATH=libdir, **proclib.asan_env(os.path.join(libdir, "libibverbs.so.1")))
    check(os.path.isfile(os.path.join(suite, "run_tests.py")), f"rdma-core's tests in {suite}")
    if failures:
        return 1
    # An hcaemud's HCA (net_ring: it loops its own address back), every context a client of it.
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "hcaemud.sock")
        d = daemonlib.Daemon(hcaemud, sock, daemonlib.ring_eal(0, f"rc{os.getpid()}"), "198.18.0.1/24")
        try:
            check(d.wait_ready(), "hcaemud ready")
            run_suite(suite, dict(base, HCAEMU_DEVICE=f"unix:{sock}"), "unix:PATH")
        finally:
            rc = d.stop()
        check(rc == 0, f"hcaemud stopped by SIGTERM: exit {rc}")
    # The HCA inside the python process (its own DPDK port, net_null: loopback happens in the port).
    run_suite(suite, dict(base, HCAEMU_DEVICE="local", HCAEMU_IP="198.18.0.1/24",
                          HCAEMU_EAL=f"{daemonlib.EAL} -l 0 --file-prefix rcl{os.getpid()} --vdev=net_null0"), "local")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
