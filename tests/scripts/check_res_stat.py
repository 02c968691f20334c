#!/usr/bin/python3
"""`hcaemu res show` and `hcaemu stat` without a daemon, and `--device` on perf and pingpong.

Bad arguments: the exact message and exit status 2; a socket nobody serves: `cannot connect to
unix:PATH: ...` and exit 1; perf and pingpong refuse the attach options beside `--device unix:PATH`
(the daemon owns the port) with exit 2, before touching DPDK.
"""
import argparse
import os
import subprocess
import sys
import tempfile

failures = []


def run(args, timeout=30):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def usage(h, sub, args, msg, name):
    """exit 2, the message as the first stderr line, nothing on stdout"""
    rc, out, err = run([h] + args)
    first = err.splitlines()[0] if err else ""
    expect(name, rc == 2 and first == f"hcaemu {sub}: {msg}" and out == "", (rc, out, err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    h = ap.parse_args().hcaemu
    with tempfile.TemporaryDirectory() as tmp:
        nosock = os.path.join(tmp, "none", "hcaemu.sock")
        dev = f"unix:{nosock}"

        # ---- res: bad arguments ----
        usage(h, "res", ["res"], "what to do? res show pd|mr|cq|qp|srq", "res alone")
        usage(h, "res", ["res", "list", "qp"], "unknown command 'list' (res show pd|mr|cq|qp|srq)", "res list")
        usage(h, "res", ["res", "show"], "res show needs a kind: pd, mr, cq, qp or srq", "res show alone")
        usage(h, "res", ["res", "show", "ah"], "unknown kind 'ah': pd, mr, cq, qp or srq", "res show ah")
        usage(h, "res", ["res", "show", "qp", "17"], "unexpected argument '17'", "res stray argument")
        usage(h, "res", ["res", "show", "qp", "--jsn"], "unknown option '--jsn'", "res unknown option")
        usage(h, "res", ["res", "show", "qp", "--device"], "--device needs a value (unix:PATH or local)",
              "res --device without a value")
        usage(h, "res", ["res", "show", "qp", "--device", "local"],
              "--device: 'local' is not unix:PATH (the socket of a running hcaemud)", "res --device local")
        usage(h, "res", ["res", "show", "pd", "--device=unix:"],
              "--device: 'unix:' is not unix:PATH (the socket of a running hcaemud)", "res --device=unix:")
        rc, out, err = run([h, "res", "--help"])
        expect("res --help", rc == 0 and "res show pd|mr|cq|qp|srq" in out and "--json" in out, (rc, out))

        # ---- stat: bad arguments ----
        usage(h, "stat", ["stat", "device"], "unexpected argument 'device'", "stat stray argument")
        usage(h, "stat", ["stat", "-j"], "unknown option '-j'", "stat unknown option")
        usage(h, "stat", ["stat", "--device", "/run/hcaemu.sock"],
              "--device: '/run/hcaemu.sock' is not unix:PATH (the socket of a running hcaemud)", "stat bare path")
        rc, out, err = run([h, "stat", "--help"])
        expect("stat --help", rc == 0 and "--json" in out and "daemon" in out, (rc, out))

        # ---- no daemon there: exit 1, the socket named ----
        for args in (["res", "show", "qp"], ["res", "show", "mr", "--json"], ["stat"], ["stat", "--json"]):
            sub = args[0]
            rc, out, err = run([h] + args + ["--device", dev])
            expect(f"{' '.join(args)}: unreachable daemon", rc == 1 and out == "" and
                   err.startswith(f"hcaemu {sub}: cannot connect to {dev}: ") and len(err.splitlines()) == 1,
                   (rc, out, err))
        # a file that is not a socket
        plain = os.path.join(tmp, "plain")
        open(plain, "w").close()
        rc, out, err = run([h, "stat", f"--device=unix:{plain}"])
        expect("stat: a plain file", rc == 1 and err.startswith(f"hcaemu stat: cannot connect to unix:{plain}: "),
               (rc, err))

        # ---- perf and pingpong: --device unix:PATH with an attach option ----
        owns = f"the daemon behind --device {dev} owns the port; attach options go with an in-process HCA only"
        for opt in (["--ip", "198.18.0.1/24"], ["--eal", "--no-pci"], ["--dpdk-port", "0"], ["--mac", "02:00:00:00:00:01"],
                    ["--link-mtu", "9000"], ["--pcap", os.path.join(tmp, "x.pcap")], ["--ip=198.18.0.1/24"]):
            name = opt[0].split("=")[0]
            usage(h, "perf", ["perf", "write_bw", "--device", dev] + opt, f"{name}: {owns}", f"perf --device + {name}")
            usage(h, "pingpong", ["pingpong", f"--device={dev}"] + opt, f"{name}: {owns}", f"pingpong --device + {name}")
            # the order does not matter
            usage(h, "perf", ["perf", "send_lat"] + opt + ["--device", dev], f"{name}: {owns}", f"perf {name} + --device")
        expect("no capture file written", not os.path.exists(os.path.join(tmp, "x.pcap")))
        for sub, base in (("perf", ["perf", "write_bw"]), ("pingpong", ["pingpong"])):
            usage(h, sub, base + ["--device", "rdma0"],
                  "--device: unknown device 'rdma0': use unix:PATH (a running hcaemud) or local", f"{sub} --device rdma0")
            usage(h, sub, base + ["--device", "unix:"], "--device: 'unix:' names no socket: use unix:PATH",
                  f"{sub} --device unix:")
            usage(h, sub, base + ["--device"], "--device needs a value (unix:PATH or local)", f"{sub} --device alone")
            usage(h, sub, base + ["--device", "local"], "--ip ADDR/LEN is required (this HCA's address)",
                  f"{sub} --device local without --ip")
            rc, out, err = run([h] + base + ["--device", dev, "127.0.0.1"])
            expect(f"{sub} --device: unreachable daemon", rc == 1 and
                   err.startswith(f"hcaemu {sub}: cannot connect to {dev}: "), (rc, out, err))
            rc, out, err = run([h] + base + ["--help"])
            expect(f"{sub} --help names --device", rc == 0 and "--device SPEC" in out, (rc, out[-500:]))

    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
