#!/usr/bin/env bash
# Interop tests: hcaemu against Linux Soft-RoCE (rdma_rxe) in a qemu guest.
#
#   scripts/interop/run.sh [options] [FILTER...]
#     FILTER         run only the cases whose name contains one of these words (e.g. pingpong,
#                    write_bw, loss, rxe_srv, v6); the guest checks (guest-*) always run
#     -l             list the cases and exit
#     --hcaemu PATH  the hcaemu executable (default build/tools/hcaemu, or $HCAEMU)
#     --results DIR  logs (default build/interop-results, or $HCAEMU_INTEROP_RESULTS)
#     --cache DIR    guest image (default build/interop-guest, or $HCAEMU_INTEROP_CACHE)
#     --rxe-peer     check this harness itself: a second rxe guest (198.18.0.3) takes hcaemu's
#                    place (same cases, same checks; its output goes to cases/NAME.rxe2.log)
# Environment: HCAEMU_INTEROP_NS=hcaemu-interop (the namespace; a second run at once needs its
# own, and its own --results), HCAEMU_INTEROP_BUDGET=960 (s; a case whose own timeout would end
# past it FAILs without running; meson's timeout is 900), HCAEMU_INTEROP_EMU_PCAP=1 (hcaemu
# also writes cases/NAME.hcaemu.pcap with --pcap), HCAEMU_INTEROP_ACCEL=auto|tcg|kvm (auto: KVM only with kvm_intel/kvm_amd loaded;
# a nested software KVM such as kvm_pvm hangs Debian's kernel, so TCG there).
#
# Topology, all in network namespace hcaemu-interop (created here, deleted on exit):
#   guest eth0 198.18.0.2, 2001:2::2 (virtio) == tap0 ---+
#   vhost0 198.18.0.1/24 (host kernel) == veth ----------+-- br0 (no IP, STP and multicast
#   vemu0 (no IP, NOARP) == veth ------------------------+   snooping off)
#   (--rxe-peer: peer guest 198.18.0.3, 2001:2::3 == tap1 +)
# hcaemu runs in the namespace on vemu0 (DPDK net_af_packet) as 198.18.0.10 (v6- cases:
# 2001:2::10) and answers ARP and neighbour solicitations itself; IPv6 stays disabled in the
# namespace, so no kernel interface there answers for it. The out-of-band TCP exchange
# (ibv_rc_pingpong, perftest) uses the kernel's sockets, so it runs over IPv4 between the guest
# and vhost0: a guest client connects to 198.18.0.1, which is hcaemu's listening socket; the GIDs
# exchanged then carry RoCE to 198.18.0.10 or 2001:2::10.
#
# Exit status: 0 all cases passed, 1 a case failed, 2 bad arguments, 77 (meson: skipped) qemu
# cannot run here (not root, no qemu, no /dev/net/tun, no network namespaces).
set -uo pipefail
# meson's test environment sets LD_LIBRARY_PATH to hcaemu's libibverbs (the test depends on it);
# nothing here wants it implicitly: `hcaemu exec` sets it for the programs that run on hcaemu.
unset LD_LIBRARY_PATH

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
HCAEMU=${HCAEMU:-$REPO/build/tools/hcaemu}
RES=${HCAEMU_INTEROP_RESULTS:-$REPO/build/interop-results}
CACHE=${HCAEMU_INTEROP_CACHE:-$REPO/build/interop-guest}
ACCEL=${HCAEMU_INTEROP_ACCEL:-auto}
NS=${HCAEMU_INTEROP_NS:-hcaemu-interop}   # two runs at once need two names (and two --results)
GUEST_IP=198.18.0.2 GUEST_MAC=52:54:00:12:00:02
PEER_IP=198.18.0.3 PEER_MAC=52:54:00:12:00:03     # --rxe-peer only
HOST_IP=198.18.0.1
EMU_IP=198.18.0.10 EMU_MAC=02:00:c6:12:00:0a
# the v6- cases' addresses (RFC 5180 benchmarking range), each /64 on the bridge
GUEST_IP6=2001:2::2 PEER_IP6=2001:2::3 EMU_IP6=2001:2::10
EAL="--no-huge -m 512 --no-pci --no-shconf -l 0 --vdev=net_af_packet0,iface=vemu0"
EMU_PCAP=${HCAEMU_INTEROP_EMU_PCAP:-}
BUDGET=${HCAEMU_INTEROP_BUDGET:-960}   # s for the whole run; cases left after it FAIL unrun
CM_DELAY_MS=${HCAEMU_INTEROP_CM_DELAY_MS:-1000}   # MADs to the guest in perftest -R cases with rxe as server (0: none)
BASE_PORT=18600        # each case gets its own TCP port: no listener of one case meets the next

# ------------------------------------------------------------------ the cases
# name | tool | server (rxe or hcaemu) | flags, given to both sides | guest netem | timeout (s)
# guest netem: netem's arguments for everything the guest sends, or "noack ARGS": only for RoCE
# packets other than ACK/NAK. ibv_rc_pingpong needs that: it has no closing handshake, so when
# the last ACK is lost the side that exited has destroyed its QP, and the other side retries
# against nothing until its retry count runs out (seen with rxe on both sides). perftest ends
# with a handshake over TCP, so its cases lose ACKs too.
# tool: pingpong = ibv_rc_pingpong / hcaemu pingpong; anything else = perftest's ib_TOOL /
# hcaemu perf TOOL. Guest-side flags added: pingpong `-d rxe0 -g 1`, perftest `-d rxe0 -x 1 -F`;
# hcaemu side: `-g 1` / `-x 1 -F` (GID 1 is the IPv4-mapped one on both).
# A name starting with lib- runs Debian's own program on hcaemu's side too, unmodified, through
# hcaemu's libibverbs (`hcaemu exec --eal ... --ip ... -- ib_TOOL -d hcaemu0 -x 1 -F ...` or
# `... -- ibv_rc_pingpong -d hcaemu0 -g 1 ...`; docs/verbs.md): the same program on both sides.
# A name starting with cm- connects with rdma_cm (issue 14): the same Debian program on both sides,
# hcaemu's through `hcaemu exec` (hcaemu's libibverbs and librdmacm, docs/rdmacm.md), the guest's on
# the kernel's CM; the client names the server's RoCE address (no TCP). tool: rping (-V: the data
# checked), udaddy (UD: SIDR), rdma_server (rdma_client on the client side), rej (rping to the
# port above the server's, where nobody listens: REJ reason 8 expected), else perftest's ib_TOOL -R.
# perftest -R with rxe as server: perftest 4.5 syncs both sides on its first connection, then the
# client resolves and sends the second connection's REQ while the server only starts listening
# (create_rdma_cm_connection): nothing orders the two, and against the slow TCG guest the REQ won
# (the kernel's CM answered REJ 8, no listener). perftest's own retry after a REJECTED uses the
# ids it just destroyed in 4.5 (fixed upstream in 2025). So hcaemu's MADs are held CM_DELAY_MS on
# its port in these cases (hcaemu exec --inject 'delay dir=tx qp=1 ...'; the host kernel here has
# no netem): the REQ reaches the guest that much later, as over a slow link.
# perftest -R with hcaemu as server and loss: the server's last message of that sync is a SEND it
# waits to see acknowledged before it listens; the client, which got it, sends its REQ at once. A
# lost ACK (the guest's 5%) holds the server for a retransmission timeout, the REQ finds no
# listener, REJ 8, and perftest 4.5's client ends (seen in CI: cm-loss5-send_bw-hcaemu_srv). Any
# CM would answer so; these cases spare the guest's ACKs ("noack"), as pingpong's do, and leave
# lost ACKs to the loss5- and lib-loss5- cases.
# rping with hcaemu as server and loss: the guest's rping destroys its id right after
# rdma_disconnect, and the kernel's CM cancels the DREQ's retransmission then (cm_destroy_id in
# DREQ_SENT). A lost DREQ leaves the server waiting for a DISCONNECTED no CM could deliver (seen
# in CI: cm-loss5-rping-hcaemu_srv, no DREQ in its capture); that case spares the guest's DREQ
# ("nodreq") and loses the rest. The .netem log ends with tc's counters (what was spared, dropped).
# tool probe: the peer behaviour report (scripts/probe.py, issue 15) with rxe as the peer: the
# guest's ibv_rc_pingpong (flags: its -s and -n) serves each scenario (scripts/interop/guest-server.sh),
# hcaemu pingpong is the prober; the report goes to probe/ in the results and
# scripts/interop/check_probe_rxe.py holds its findings to what rxe does (docs/probe-rxe/).
# A name starting with v6- runs over IPv6 GIDs: hcaemu gets --ip 2001:2::10/64 (its GID 1 then),
# the guest uses the index rxe gave 2001:2::2 (found in sysfs by the guest-ipv6 check).
CASE_TABLE='
pingpong-64-rxe_srv          | pingpong   | rxe    | -s 64 -n 100 -c                |         | 60
pingpong-64-hcaemu_srv       | pingpong   | hcaemu | -s 64 -n 100 -c                |         | 60
pingpong-4096-rxe_srv        | pingpong   | rxe    | -s 4096 -n 100 -c              |         | 60
pingpong-4096-hcaemu_srv     | pingpong   | hcaemu | -s 4096 -n 100 -c              |         | 60
write_bw-64-rxe_srv          | write_bw   | rxe    | -s 64 -n 20                    |         | 60
write_bw-64-hcaemu_srv       | write_bw   | hcaemu | -s 64 -n 20                    |         | 60
write_bw-8192-rxe_srv        | write_bw   | rxe    | -s 8192 -n 20                  |         | 60
write_bw-8192-hcaemu_srv     | write_bw   | hcaemu | -s 8192 -n 20                  |         | 60
read_bw-64-rxe_srv           | read_bw    | rxe    | -s 64 -n 20                    |         | 60
read_bw-64-hcaemu_srv        | read_bw    | hcaemu | -s 64 -n 20                    |         | 60
read_bw-8192-rxe_srv         | read_bw    | rxe    | -s 8192 -n 20                  |         | 60
read_bw-8192-hcaemu_srv      | read_bw    | hcaemu | -s 8192 -n 20                  |         | 60
send_bw-64-rxe_srv           | send_bw    | rxe    | -s 64 -n 20                    |         | 60
send_bw-64-hcaemu_srv        | send_bw    | hcaemu | -s 64 -n 20                    |         | 60
send_bw-8192-rxe_srv         | send_bw    | rxe    | -s 8192 -n 20                  |         | 60
send_bw-8192-hcaemu_srv      | send_bw    | hcaemu | -s 8192 -n 20                  |         | 60
atomic_bw-fadd-rxe_srv       | atomic_bw  | rxe    | -A FETCH_AND_ADD -n 20         |         | 60
atomic_bw-fadd-hcaemu_srv    | atomic_bw  | hcaemu | -A FETCH_AND_ADD -n 20         |         | 60
atomic_bw-cswap-rxe_srv      | atomic_bw  | rxe    | -A CMP_AND_SWAP -n 20          |         | 60
atomic_bw-cswap-hcaemu_srv   | atomic_bw  | hcaemu | -A CMP_AND_SWAP -n 20          |         | 60
atomic_lat-fadd-rxe_srv      | atomic_lat | rxe    | -A FETCH_AND_ADD -n 20         |         | 60
atomic_lat-fadd-hcaemu_srv   | atomic_lat | hcaemu | -A FETCH_AND_ADD -n 20         |         | 60
write_lat-64-rxe_srv         | write_lat  | rxe    | -s 64 -n 20                    |         | 60
write_lat-64-hcaemu_srv      | write_lat  | hcaemu | -s 64 -n 20                    |         | 60
write_lat-8192-rxe_srv       | write_lat  | rxe    | -s 8192 -n 20                  |         | 60
write_lat-8192-hcaemu_srv    | write_lat  | hcaemu | -s 8192 -n 20                  |         | 60
read_lat-64-rxe_srv          | read_lat   | rxe    | -s 64 -n 20                    |         | 60
read_lat-64-hcaemu_srv       | read_lat   | hcaemu | -s 64 -n 20                    |         | 60
read_lat-8192-rxe_srv        | read_lat   | rxe    | -s 8192 -n 20                  |         | 60
read_lat-8192-hcaemu_srv     | read_lat   | hcaemu | -s 8192 -n 20                  |         | 60
send_lat-64-rxe_srv          | send_lat   | rxe    | -s 64 -n 20                    |         | 60
send_lat-64-hcaemu_srv       | send_lat   | hcaemu | -s 64 -n 20                    |         | 60
send_lat-8192-rxe_srv        | send_lat   | rxe    | -s 8192 -n 20                  |         | 60
send_lat-8192-hcaemu_srv     | send_lat   | hcaemu | -s 8192 -n 20                  |         | 60
send_bw-ud-512-rxe_srv       | send_bw    | rxe    | -c UD -s 512 -n 20             |         | 60
send_bw-ud-512-hcaemu_srv    | send_bw    | hcaemu | -c UD -s 512 -n 20             |         | 60
send_bw-ud-1024-rxe_srv      | send_bw    | rxe    | -c UD -s 1024 -n 20            |         | 60
send_bw-ud-1024-hcaemu_srv   | send_bw    | hcaemu | -c UD -s 1024 -n 20            |         | 60
send_lat-ud-512-rxe_srv      | send_lat   | rxe    | -c UD -s 512 -n 20             |         | 60
send_lat-ud-512-hcaemu_srv   | send_lat   | hcaemu | -c UD -s 512 -n 20             |         | 60
send_lat-ud-1024-rxe_srv     | send_lat   | rxe    | -c UD -s 1024 -n 20            |         | 60
send_lat-ud-1024-hcaemu_srv  | send_lat   | hcaemu | -c UD -s 1024 -n 20            |         | 60
v6-pingpong-4096-rxe_srv     | pingpong   | rxe    | -s 4096 -n 100 -c              |         | 60
v6-pingpong-4096-hcaemu_srv  | pingpong   | hcaemu | -s 4096 -n 100 -c              |         | 60
v6-write_bw-8192-rxe_srv     | write_bw   | rxe    | -s 8192 -n 20                  |         | 60
v6-write_bw-8192-hcaemu_srv  | write_bw   | hcaemu | -s 8192 -n 20                  |         | 60
v6-read_bw-8192-rxe_srv      | read_bw    | rxe    | -s 8192 -n 20                  |         | 60
v6-read_bw-8192-hcaemu_srv   | read_bw    | hcaemu | -s 8192 -n 20                  |         | 60
v6-send_bw-8192-rxe_srv      | send_bw    | rxe    | -s 8192 -n 20                  |         | 60
v6-send_bw-8192-hcaemu_srv   | send_bw    | hcaemu | -s 8192 -n 20                  |         | 60
q2-write_bw-64-rxe_srv       | write_bw   | rxe    | -q 2 -s 64 -n 20               |         | 60
q2-write_bw-64-hcaemu_srv    | write_bw   | hcaemu | -q 2 -s 64 -n 20               |         | 60
q2-read_bw-64-rxe_srv        | read_bw    | rxe    | -q 2 -s 64 -n 20               |         | 60
q2-read_bw-64-hcaemu_srv     | read_bw    | hcaemu | -q 2 -s 64 -n 20               |         | 60
q2-send_bw-64-rxe_srv        | send_bw    | rxe    | -q 2 -s 64 -n 20               |         | 60
q2-send_bw-64-hcaemu_srv     | send_bw    | hcaemu | -q 2 -s 64 -n 20               |         | 60
dur2-write_bw-64-rxe_srv     | write_bw   | rxe    | -s 64 -D 2                     |         | 60
dur2-write_bw-64-hcaemu_srv  | write_bw   | hcaemu | -s 64 -D 2                     |         | 60
dur2-send_bw-64-rxe_srv      | send_bw    | rxe    | -s 64 -D 2                     |         | 60
dur2-send_bw-64-hcaemu_srv   | send_bw    | hcaemu | -s 64 -D 2                     |         | 60
dur2-write_lat-64-rxe_srv    | write_lat  | rxe    | -s 64 -D 2                     |         | 60
dur2-write_lat-64-hcaemu_srv | write_lat  | hcaemu | -s 64 -D 2                     |         | 60
dur2-send_lat-64-rxe_srv     | send_lat   | rxe    | -s 64 -D 2                     |         | 60
dur2-send_lat-64-hcaemu_srv  | send_lat   | hcaemu | -s 64 -D 2                     |         | 60
loss5-pingpong-4096-rxe_srv  | pingpong   | rxe    | -s 4096 -n 50 -c               | noack loss 5% | 120
loss5-pingpong-4096-hcaemu_srv | pingpong | hcaemu | -s 4096 -n 50 -c               | noack loss 5% | 120
loss5-write_bw-8192-rxe_srv  | write_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 120
loss5-write_bw-8192-hcaemu_srv | write_bw | hcaemu | -s 8192 -n 32                  | loss 5% | 120
loss5-read_bw-8192-rxe_srv   | read_bw    | rxe    | -s 8192 -n 32                  | loss 5% | 120
loss5-read_bw-8192-hcaemu_srv | read_bw   | hcaemu | -s 8192 -n 32                  | loss 5% | 120
loss5-send_bw-8192-rxe_srv   | send_bw    | rxe    | -s 8192 -n 32                  | loss 5% | 120
loss5-send_bw-8192-hcaemu_srv | send_bw   | hcaemu | -s 8192 -n 32                  | loss 5% | 120
v6-loss5-pingpong-4096-rxe_srv | pingpong | rxe  | -s 4096 -n 50 -c               | noack loss 5% | 120
v6-loss5-pingpong-4096-hcaemu_srv | pingpong | hcaemu | -s 4096 -n 50 -c            | noack loss 5% | 120
v6-loss5-write_bw-8192-rxe_srv | write_bw | rxe    | -s 8192 -n 32                  | loss 5% | 120
v6-loss5-write_bw-8192-hcaemu_srv | write_bw | hcaemu | -s 8192 -n 32               | loss 5% | 120
v6-loss5-read_bw-8192-rxe_srv | read_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 120
v6-loss5-read_bw-8192-hcaemu_srv | read_bw | hcaemu | -s 8192 -n 32                 | loss 5% | 120
v6-loss5-send_bw-8192-rxe_srv | send_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 120
v6-loss5-send_bw-8192-hcaemu_srv | send_bw | hcaemu | -s 8192 -n 32                 | loss 5% | 120
lib-pingpong-4096-rxe_srv    | pingpong   | rxe    | -s 4096 -n 50 -c               |         | 60
lib-pingpong-4096-hcaemu_srv | pingpong   | hcaemu | -s 4096 -n 50 -c               |         | 60
lib-write_bw-8192-rxe_srv    | write_bw   | rxe    | -s 8192 -n 20                  |         | 60
lib-write_bw-8192-hcaemu_srv | write_bw   | hcaemu | -s 8192 -n 20                  |         | 60
lib-read_bw-8192-rxe_srv     | read_bw    | rxe    | -s 8192 -n 20                  |         | 60
lib-read_bw-8192-hcaemu_srv  | read_bw    | hcaemu | -s 8192 -n 20                  |         | 60
lib-send_bw-8192-rxe_srv     | send_bw    | rxe    | -s 8192 -n 20                  |         | 60
lib-send_bw-8192-hcaemu_srv  | send_bw    | hcaemu | -s 8192 -n 20                  |         | 60
lib-atomic_bw-fadd-rxe_srv   | atomic_bw  | rxe    | -A FETCH_AND_ADD -n 20         |         | 60
lib-atomic_bw-fadd-hcaemu_srv | atomic_bw | hcaemu | -A FETCH_AND_ADD -n 20         |         | 60
lib-send_lat-64-rxe_srv      | send_lat   | rxe    | -s 64 -n 20                    |         | 60
lib-send_lat-64-hcaemu_srv   | send_lat   | hcaemu | -s 64 -n 20                    |         | 60
lib-loss5-pingpong-4096-rxe_srv | pingpong | rxe   | -s 4096 -n 50 -c               | noack loss 5% | 120
lib-loss5-pingpong-4096-hcaemu_srv | pingpong | hcaemu | -s 4096 -n 50 -c           | noack loss 5% | 120
lib-loss5-write_bw-8192-rxe_srv | write_bw | rxe    | -s 8192 -n 32                  | loss 5% | 120
lib-loss5-write_bw-8192-hcaemu_srv | write_bw | hcaemu | -s 8192 -n 32               | loss 5% | 120
lib-loss5-read_bw-8192-rxe_srv | read_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 120
lib-loss5-read_bw-8192-hcaemu_srv | read_bw | hcaemu | -s 8192 -n 32                 | loss 5% | 120
lib-loss5-send_bw-8192-rxe_srv | send_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 120
lib-loss5-send_bw-8192-hcaemu_srv | send_bw | hcaemu | -s 8192 -n 32                 | loss 5% | 120
lib-loss5-atomic_bw-fadd-rxe_srv | atomic_bw | rxe  | -A FETCH_AND_ADD -n 32         | loss 5% | 120
lib-loss5-atomic_bw-fadd-hcaemu_srv | atomic_bw | hcaemu | -A FETCH_AND_ADD -n 32    | loss 5% | 120
lib-loss5-send_lat-64-rxe_srv | send_lat   | rxe    | -s 64 -n 32                    | loss 5% | 120
lib-loss5-send_lat-64-hcaemu_srv | send_lat | hcaemu | -s 64 -n 32                   | loss 5% | 120
cm-rping-rxe_srv             | rping      | rxe    | -C 10 -S 64 -V                 |         | 90
cm-rping-hcaemu_srv          | rping      | hcaemu | -C 10 -S 64 -V                 |         | 90
cm-send_bw-rxe_srv           | send_bw    | rxe    | -s 4096 -n 20                  |         | 90
cm-send_bw-hcaemu_srv        | send_bw    | hcaemu | -s 4096 -n 20                  |         | 90
cm-write_bw-rxe_srv          | write_bw   | rxe    | -s 8192 -n 20                  |         | 90
cm-write_bw-hcaemu_srv       | write_bw   | hcaemu | -s 8192 -n 20                  |         | 90
cm-read_lat-rxe_srv          | read_lat   | rxe    | -s 64 -n 20                    |         | 90
cm-read_lat-hcaemu_srv       | read_lat   | hcaemu | -s 64 -n 20                    |         | 90
cm-udaddy-rxe_srv            | udaddy     | rxe    | -C 5                           |         | 90
cm-udaddy-hcaemu_srv         | udaddy     | hcaemu | -C 5                           |         | 90
cm-rdma_server-rxe_srv       | rdma_server | rxe   |                                |         | 90
cm-rdma_server-hcaemu_srv    | rdma_server | hcaemu |                               |         | 90
cm-rej-rxe_srv               | rej        | rxe    | -C 1                           |         | 90
cm-rej-hcaemu_srv            | rej        | hcaemu | -C 1                           |         | 90
cm-loss5-rping-rxe_srv       | rping      | rxe    | -C 20 -S 1024 -V               | loss 5% | 150
cm-loss5-rping-hcaemu_srv    | rping      | hcaemu | -C 20 -S 1024 -V               | nodreq loss 5% | 150
cm-loss5-write_bw-rxe_srv    | write_bw   | rxe    | -s 8192 -n 32                  | loss 5% | 150
cm-loss5-write_bw-hcaemu_srv | write_bw   | hcaemu | -s 8192 -n 32                  | noack loss 5% | 150
cm-loss5-send_bw-rxe_srv     | send_bw    | rxe    | -s 4096 -n 32                  | loss 5% | 150
cm-loss5-send_bw-hcaemu_srv  | send_bw    | hcaemu | -s 4096 -n 32                  | noack loss 5% | 150
cm-loss5-read_lat-rxe_srv    | read_lat   | rxe    | -s 64 -n 32                    | loss 5% | 150
cm-loss5-read_lat-hcaemu_srv | read_lat   | hcaemu | -s 64 -n 32                    | noack loss 5% | 150
cm-loss5-rdma_server-rxe_srv | rdma_server | rxe   |                                | loss 5% | 150
cm-loss5-rdma_server-hcaemu_srv | rdma_server | hcaemu |                             | loss 5% | 150
probe-rxe_srv                | probe      | rxe    | -s 4096 -n 5                   |         | 120
'

trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; echo "${s%"${s##*[![:space:]]}"}"; }

# ------------------------------------------------------------------ arguments
LIST=0 RXE_PEER=0 FILTERS=()
while [ $# -gt 0 ]; do
  case $1 in
    -l) LIST=1;;
    --rxe-peer) RXE_PEER=1;;
    --hcaemu) HCAEMU=$2; shift;;
    --results) RES=$2; shift;;
    --cache) CACHE=$2; shift;;
    -h|--help) sed -n '2,17p' "$0"; exit 0;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2;;
    *) FILTERS+=("$1");;
  esac
  shift
done

HCAEMU=$(realpath -m "$HCAEMU")   # meson passes it relative to the build directory

SELECTED=()
while IFS='|' read -r name tool srv flags netem tmo; do
  name=$(trim "$name"); [ -n "$name" ] || continue
  keep=$(( ${#FILTERS[@]} == 0 ))
  for f in "${FILTERS[@]}"; do [[ $name == *"$f"* ]] && keep=1; done
  [ $keep = 1 ] && SELECTED+=("$name|$(trim "$tool")|$(trim "$srv")|$(trim "$flags")|$(trim "$netem")|$(trim "$tmo")")
done <<< "$CASE_TABLE"
if [ $LIST = 1 ]; then printf '%s\n' "${SELECTED[@]%%|*}"; exit 0; fi
if ! [[ $NS =~ ^[A-Za-z0-9_.-]{1,32}$ ]] || [[ $NS == .* ]]; then
  echo "run.sh: HCAEMU_INTEROP_NS '$NS': letters, digits, '_', '-', '.' (not first), at most 32" >&2; exit 2
fi
if [ ${#FILTERS[@]} -gt 0 ] && [ ${#SELECTED[@]} -eq 0 ]; then
  echo "run.sh: no case matches: ${FILTERS[*]}" >&2; exit 2
fi

skip() {
  echo "###############################################################" >&2
  echo "### interop SKIPPED: $*" >&2
  echo "###############################################################" >&2
  exit 77
}
now_ms() { date +%s%3N; }
log() { echo "[interop $(date +%T)] $*"; }
nsx() { ip netns exec "$NS" "$@"; }

# ------------------------------------------------------------------ can qemu run here?
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespace, tap, qemu)"
T_START=$(now_ms)
if ! "$HERE/build-guest.sh" "$CACHE"; then
  command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing and could not be installed"
  echo "interop: FAIL: build-guest.sh failed" >&2; exit 1
fi
qemu-system-x86_64 -version >/dev/null 2>&1 || skip "qemu-system-x86_64 does not run"
[ -c /dev/net/tun ] || skip "no /dev/net/tun (tap devices)"
if [ "$ACCEL" = auto ]; then
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then ACCEL=kvm; else ACCEL=tcg; fi
fi
# some nested KVMs reject MSR 0x10a (arch-capabilities) at start; the commas are qemu's
# shellcheck disable=SC2054
case $ACCEL in
  kvm) ACCEL_ARGS=(-accel kvm -cpu host,-arch-capabilities);;
  *) ACCEL_ARGS=(-accel tcg -cpu max);;
esac

# One run at a time per namespace (the addresses are fixed, but each run has its own namespace),
# and per results directory: a run removes it at its start, and stops the guests its qemu.pid
# files name (two namespaces sharing one results dir would remove each other's).
exec 9> "/run/$NS.lock"
flock -n 9 || { echo "interop: FAIL: another interop run holds /run/$NS.lock" >&2; exit 1; }
while [[ $RES == */ && $RES != / ]]; do RES=${RES%/}; done   # DIR/.lock would go with rm -rf DIR
mkdir -p "$(dirname "$RES")"
exec 8> "$RES.lock"
flock -n 8 || { echo "interop: FAIL: another interop run holds $RES.lock (its results directory)" >&2; exit 1; }

if [ -d "$RES" ] && [ -n "$(ls -A "$RES")" ] && [ ! -f "$RES/summary.txt" ]; then
  echo "interop: FAIL: $RES is not empty and not an earlier results dir; not removing it" >&2; exit 1
fi
# A run killed with SIGKILL leaves its guests behind: stop them by the pids it recorded.
for f in "$RES"/*/qemu.pid; do
  p=$(cat "$f" 2>/dev/null) || continue
  [ -n "$p" ] && grep -q hcaemu-interop "/proc/$p/cmdline" 2>/dev/null && kill "$p"
done
rm -rf "$RES"
mkdir -p "$RES/cases"
RES=$(cd "$RES" && pwd)
SUMMARY=$RES/summary.txt
: > "$SUMMARY"
# The peer: hcaemu, or (--rxe-peer) a second rxe guest. PEER names its files: cases/NAME.$PEER.*
PEER=hcaemu; [ $RXE_PEER = 1 ] && PEER=rxe2
# Where a guest client connects for the out-of-band exchange: hcaemu listens on the kernel's
# socket in the namespace (vhost0); a peer guest on its own address.
PEER_OOB_IP=$HOST_IP; [ $RXE_PEER = 1 ] && PEER_OOB_IP=$PEER_IP

# ------------------------------------------------------------------ teardown (always)
declare -A QEMU_PID=()
TCPDUMP_PID="" EMU_PID=""
cleanup() {
  local g i
  [ -n "$EMU_PID" ] && kill "$EMU_PID" 2>/dev/null
  [ -n "$TCPDUMP_PID" ] && kill "$TCPDUMP_PID" 2>/dev/null
  for g in "${!QEMU_PID[@]}"; do
    [ -d "$RES/$g/jobs" ] && : > "$RES/$g/jobs/halt"     # the agent powers the guest off
    for ((i = 0; i < 100; i++)); do qemu_alive "$g" || break; sleep 0.1; done
    qemu_alive "$g" && kill "${QEMU_PID[$g]}"
  done
  ip netns list | grep -qx "$NS\( .*\)\?" && ip netns del "$NS"
  return 0
}
qemu_alive() {  # qemu_alive GUEST: the pid recorded for GUEST is still our qemu
  local p=${QEMU_PID[$1]:-}
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && grep -q qemu "/proc/$p/cmdline" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ------------------------------------------------------------------ topology
topology_up() {
  ip netns list | grep -qx "$NS\( .*\)\?" && ip netns del "$NS"   # leftover of a killed run
  ip netns add "$NS" || return 2
  nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || return 1
  nsx ip link set lo up
  # no multicast snooping: ND's solicitations (to solicited-node multicast, RFC 4861 7.2.2) reach
  # every port, whoever sent MLD reports (hcaemu sends none)
  nsx ip link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 &&
  nsx ip link set br0 up &&
  nsx ip tuntap add dev tap0 mode tap &&
  nsx ip link set tap0 master br0 up &&
  nsx ip tuntap add dev tap1 mode tap &&      # --rxe-peer's guest
  nsx ip link set tap1 master br0 up &&
  nsx ip link add vhost0 type veth peer name vhost0-br &&
  nsx ip link set vhost0-br master br0 up &&
  nsx ip addr add "$HOST_IP/24" dev vhost0 &&
  nsx ip link set vhost0 up &&
  nsx ip link add vemu0 address "$EMU_MAC" type veth peer name vemu0-br &&
  nsx ip link set vemu0-br master br0 up &&
  nsx ip link set vemu0 arp off up   # no kernel ARP answers here: 198.18.0.10's ARP is hcaemu's
}

# ------------------------------------------------------------------ guests
guest_boot() {  # guest_boot GUEST TAP IP MAC: qemu in the namespace; files in $RES/GUEST
  local g=$1
  mkdir -p "$RES/$g"
  nsx qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m 1024 -smp 1 -name "hcaemu-interop-$g" \
    -display none -monitor none -no-reboot -daemonize -pidfile "$RES/$g/qemu.pid" \
    -serial "file:$RES/$g/console.log" \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initramfs.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 ifc_dir=$g ifc_ip=$3/24 ifc_agent_timeout=1500" \
    -netdev "tap,id=n0,ifname=$2,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=n0,mac=$4" \
    -fsdev "local,id=fs0,path=$RES,security_model=none" \
    -device virtio-9p-pci,fsdev=fs0,mount_tag=host || return 1
  QEMU_PID[$g]=$(cat "$RES/$g/qemu.pid")
}
wait_file() {  # wait_file FILE SECONDS
  local i
  for ((i = 0; i < $2 * 20; i++)); do [ -e "$1" ] && return 0; sleep 0.05; done
  return 1
}
gjob() {  # gjob GUEST TIMEOUT 'script': run in the guest, print its output, return its status
  local to=$2 j rc
  j=$RES/$1/jobs/$(date +%s%N)   # a time, not a counter: gjob often runs in a $(...) subshell
  printf '%s\n' "$3" > "$j.tmp" && mv "$j.tmp" "$j.sh"
  if ! wait_file "$j.rc" "$to"; then echo "guest job timed out after ${to}s"; return 124; fi
  cat "$j.out"; read -r rc < "$j.rc"; return "$rc"
}
# A tool in a guest, in the background (a server): output cases/NAME.TAG.log, exit status
# cases/NAME.TAG.rc. busybox timeout keeps the pid (the tool's), so the pid file can stop it.
gbg_start() {  # gbg_start GUEST NAME TAG TIMEOUT 'command'
  local f=/mnt/host/cases/$2.$3
  gjob "$1" 10 "( timeout $4 $5 > $f.log 2>&1 & echo \$! > /tmp/$2.pid; wait \$!; echo \$? > $f.rc.tmp; mv $f.rc.tmp $f.rc ) > /dev/null 2>&1 &" > /dev/null
}
gbg_listening() {  # gbg_listening GUEST PORT: a TCP listener on PORT within 15 s
  gjob "$1" 20 "i=0; while [ \$i -lt 150 ]; do netstat -ltn | grep -q ':$2 ' && exit 0; sleep 0.1; i=\$((i+1)); done; exit 1" > /dev/null
}
gbg_finish() {  # gbg_finish GUEST NAME TAG SECONDS: wait for the exit status, else stop the tool
  wait_file "$RES/cases/$2.$3.rc" "$4" && return 0
  gjob "$1" 10 "kill \$(cat /tmp/$2.pid) 2>/dev/null" > /dev/null
  wait_file "$RES/cases/$2.$3.rc" 5
}
gfg_run() {  # gfg_run GUEST NAME TAG TIMEOUT 'command': a tool in the foreground (a client)
  local f=/mnt/host/cases/$2.$3
  gjob "$1" $(($4 + 10)) "timeout $4 $5 > $f.log 2>&1; echo \$? > $f.rc" > /dev/null
}

# An IPv6 address for the v6- cases, added at run time (the image stays as it is). nodad: DAD
# would hold the address tentative for a second or more, and rxe adds its GID only once it is not
# (RFC 4862 5.4). rxe's GID table is searched for it in sysfs: its index is not assumed.
guest_ipv6() {  # guest_ipv6 GUEST ADDR: ADDR/64 on the guest's eth0; prints rxe0's GIDs for it
  local full
  full=$(/usr/bin/python3 -c 'import ipaddress, sys; print(ipaddress.IPv6Address(sys.argv[1]).exploded)' "$2") || return 1
  gjob "$1" 30 "ip -6 addr add $2/64 dev eth0 nodad || exit 1
P=/sys/class/infiniband/rxe0/ports/1
i=0
while [ \$i -lt 100 ]; do
  n=0
  while read -r v < \$P/gids/\$n; do
    if [ \"\$v\" = $full ]; then
      read -r t < \$P/gid_attrs/types/\$n; echo \"GID[\$n]=\$v type=\$t\"
      [ \"\$t\" = 'RoCE v2' ] && { ip -6 addr show dev eth0; exit 0; }
    fi
    n=\$((n + 1))
  done 2>/dev/null
  sleep 0.1; i=\$((i + 1))
done
echo 'no RoCE v2 GID for $2 in rxe0 after 10 s'; ip -6 addr show dev eth0; exit 1"
}
ipv6_check() {  # ipv6_check GUEST ADDR: the check GUEST-ipv6; sets GID6[GUEST]
  local f=$RES/$1/ipv6.txt n rc
  guest_ipv6 "$1" "$2" > "$f" 2>&1; rc=$?
  n=$(sed -n 's/^GID\[\([0-9]*\)\]=.* type=RoCE v2$/\1/p' "$f" | head -1)
  if [ $rc = 0 ] && [ -n "$n" ] && grep -q "inet6 $2/64 " "$f" && ! grep -q "inet6 $2/64 .*tentative" "$f"; then
    GID6[$1]=$n
    report PASS "$1-ipv6" "$2/64 on eth0 (not tentative), rxe0 GID[$n] = $2 RoCE v2 (sysfs)"
  else
    report FAIL "$1-ipv6" "exit $rc: $(tr '\n' ' ' < "$f" | cut -c1-200)"
  fi
}

# ------------------------------------------------------------------ captures
cap_start() {  # cap_start FILE: everything on br0 (ARP, TCP, RoCE)
  # not through nsx: $! must be tcpdump's own pid (ip netns exec execs it)
  # a 32 MiB buffer: with the default (2 MiB) tcpdump dropped frames while TCG guests held the CPUs
  ip netns exec "$NS" tcpdump -i br0 -Z root -B 32768 -U -s 0 --immediate-mode -w "$1" 2> "$1.log" &
  TCPDUMP_PID=$!
  wait_file "$1" 5; sleep 0.2
}
cap_stop() {
  [ -n "$TCPDUMP_PID" ] || return 0
  sleep 0.5                                   # the last frames leave the kernel's ring
  kill "$TCPDUMP_PID" 2>/dev/null; wait "$TCPDUMP_PID" 2>/dev/null
  TCPDUMP_PID=""
}
cap_dropped() {  # cap_dropped FILE: frames the kernel dropped before tcpdump read them
  sed -n 's/^\([0-9]*\) packets dropped by kernel$/\1/p' "$1.log" 2>/dev/null | head -1
}

# ------------------------------------------------------------------ one case
netem_script() {  # netem_script 'ARGS' | 'noack ARGS' | 'nodreq ARGS': the guest's tc commands for eth0
  local m4 m6  # u32 matches of what band 1:1 spares, in the IPv4 packet without options (BTH at
               # 28, a GMP's MAD at 48) and the IPv6 one without extension headers (BTH at 48, MAD at 68)
  case $1 in
    noack\ *) m4='match u8 0x11 0xff at 28'; m6='match u8 0x11 0xff at 48';;  # BTH opcode RC ACK/NAK
    nodreq\ *)  # UD SEND Only (0x64) carrying a CM MAD (class 0x07) with attribute DREQ (0x0015)
      m4='match u8 0x64 0xff at 28 match u8 0x07 0xff at 49 match u16 0x0015 0xffff at 64'
      m6='match u8 0x64 0xff at 48 match u8 0x07 0xff at 69 match u16 0x0015 0xffff at 84';;
    *) echo "tc qdisc replace dev eth0 root netem $1 && tc qdisc show dev eth0"; return;;
  esac
  # prio band 1:1 (the default, and what is spared) passes; other UDP 4791 goes to band 1:2 and netem
  cat <<EOF
tc qdisc replace dev eth0 root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
tc qdisc add dev eth0 parent 1:2 handle 20: netem ${1#* } &&
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff $m4 flowid 1:1 &&
tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:2 &&
tc filter add dev eth0 parent 1: protocol ipv6 prio 3 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff $m6 flowid 1:1 &&
tc filter add dev eth0 parent 1: protocol ipv6 prio 4 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff flowid 1:2 &&
tc qdisc show dev eth0 && tc filter show dev eth0
EOF
}
# The case's address family: run_case sets CASE_V6 (1 for a v6- case); GID6[GUEST] is the index
# of the guest's IPv6 GID (guest_ipv6).
CASE_V6=0 CASE_LIB=0
declare -A GID6=()
gid_index() {  # gid_index GUEST: the GID index the guest's tools use in this case
  if [ "$CASE_V6" = 1 ]; then echo "${GID6[$1]}"; else echo 1; fi
}
emu_ip() {  # hcaemu's address in this case
  if [ "$CASE_V6" = 1 ]; then echo "$EMU_IP6"; else echo "$EMU_IP"; fi
}
guest_cmd() {  # guest_cmd TOOL FLAGS PORT GUEST: the rxe side's command line
  case $1 in
    pingpong) echo "ibv_rc_pingpong -d rxe0 -g $(gid_index "$4") -p $3 $2";;
    *) echo "ib_$1 -d rxe0 -x $(gid_index "$4") -F -p $3 $2";;
  esac
}
emu_args() {  # emu_args TOOL FLAGS PORT NAME: hcaemu's arguments, one word per line
  local -a a f
  local len=24; [ "$CASE_V6" = 1 ] && len=64
  read -r -a f <<< "$2"
  if [ "$CASE_LIB" = 1 ]; then  # lib-: the attach options to hcaemu exec, then the program
    a=(exec --eal "$EAL" --ip "$(emu_ip)/$len" --mac "$EMU_MAC")
    [ -z "$EMU_PCAP" ] || a+=(--pcap "$RES/cases/$4.hcaemu.pcap")
    case $1 in
      pingpong) a+=(-- ibv_rc_pingpong -d hcaemu0 -g 1 -p "$3");;
      *) a+=(-- "ib_$1" -d hcaemu0 -x 1 -F -p "$3");;
    esac
    printf '%s\n' "${a[@]}" "${f[@]}"
    return
  fi
  case $1 in   # GID 1: --ip's address, IPv4-mapped or IPv6 (0 is the link-local one)
    pingpong) a=(pingpong -g 1 -p "$3");;
    *) a=(perf "$1" -x 1 -F -p "$3");;
  esac
  printf '%s\n' "${a[@]}" "${f[@]}" --eal "$EAL" --ip "$(emu_ip)/$len" --mac "$EMU_MAC"
  [ -z "$EMU_PCAP" ] || printf '%s\n' --pcap "$RES/cases/$4.hcaemu.pcap"
  ! dump_case "$1" "$2" || printf '%s\n' --dump "$RES/cases/$4.dump"
}
# The BW cases whose data is proven from the capture: hcaemu dumps its buffer and every message
# (hcaemu perf --dump: one QP, counted runs), tests/scripts/check_capture_data.py compares them
# with cases/NAME.pcap.
dump_case() {  # dump_case TOOL FLAGS
  [ $RXE_PEER = 0 ] && [ "$CASE_LIB" = 0 ] || return 1
  case $1 in write_bw|read_bw|send_bw) ;; *) return 1;; esac
  [[ " $2 " != *" -D "* ]] && ! [[ " $2 " =~ \ -q\ ([2-9]|[1-9][0-9]) ]]
}
DATA_CHECK=$REPO/tests/scripts/check_capture_data.py
last_line() { grep -v '^\s*$' "$1" 2>/dev/null | tail -1 | cut -c1-160; }
why() {  # why FILE: the line that explains a failure: hcaemu's own message, else the last line
  local l; l=$(grep -m1 '^hcaemu' "$1" 2>/dev/null | cut -c1-160)
  echo "${l:-$(last_line "$1")}"
}

# Verdict on one side's output: prints a reason and returns 1 if it shows a failure.
# What rxe's tools print on errors (rdma-core's ibv_rc_pingpong, perftest): "Couldn't ...",
# "Failed ...", "... failed", "Completion with error", "invalid data in page" (-c).
ERR_RE='couldn|fail|error|invalid data|unable|mismatch'
check_output() {  # check_output SIDE FILE TOOL FLAGS IS_CLIENT
  local side=$1 file=$2 tool=$3 flags=$4 client=$5 n q size bad
  bad=$(grep -iE "$ERR_RE" "$file" | head -1 | cut -c1-160)
  # hcaemu's own tools word their messages otherwise; a lib- case runs rxe's programs on both sides
  if { [ "$side" != hcaemu ] || [ "$CASE_LIB" = 1 ]; } && [ -n "$bad" ]; then echo "$side printed: $bad"; return 1; fi
  n=$(sed -n 's/.*-n \([0-9]*\).*/\1/p' <<< "$flags")
  q=$(sed -n 's/.*-q \([0-9]*\).*/\1/p' <<< "$flags"); q=${q:-1}
  size=$(sed -n 's/.*-s \([0-9]*\).*/\1/p' <<< "$flags"); size=${size:-8}
  case $tool in
    pingpong)   # both sides print "N iters in S seconds = U usec/iter" and "B bytes in S seconds"
                # with B = size * N * 2 (each side counts both directions)
      grep -qE "^$n iters in [0-9.]+ seconds" "$file" || { echo "$side: no '$n iters in' line"; return 1; }
      grep -qE "^$((size * n * 2)) bytes in [0-9.]+ seconds" "$file" ||
        { echo "$side: no '$((size * n * 2)) bytes in' line"; return 1; };;
    *)          # perftest's result row "#bytes #iterations ...": the client prints it, and in
                # perftest 4.5 both sides of every *_bw test and of send_lat do (with -D, of
                # write_lat too); a BW row counts every QP's iterations (-q 2 -n 20: 40)
      if [[ " $flags " == *" -D "* ]]; then
        # -D: as many iterations as the time allowed, at least one; perftest's duration rows
        # have 5 columns (BW) or 4 (latency: #bytes #iterations t_avg[usec] tps average)
        local cols=5; [[ $tool == *_lat ]] && cols=4
        if [ "$client" = 1 ] || [[ $tool == *_bw || $tool == send_lat || $tool == write_lat ]]; then
          awk -v s="$size" -v c="$cols" '$1 == s && $2 ~ /^[0-9]+$/ && $2 > 0 && NF == c {f = 1} END {exit !f}' "$file" ||
            { echo "$side: no duration row '$size N>0 ...' ($cols columns)"; return 1; }
        fi
      elif [ "$client" = 1 ] || [[ $tool == *_bw || $tool == send_lat ]]; then
        [[ $tool == *_bw ]] && n=$((n * q))
        awk -v s="$size" -v n="$n" '$1 == s && $2 == n {f = 1} END {exit !f}' "$file" ||
          { echo "$side: no result row '$size $n ...'"; return 1; }
      fi;;
  esac
  return 0
}

# The peer's side of a case: hcaemu in the namespace, or the second rxe guest.
peer_client() {  # peer_client NAME TOOL FLAGS PORT TIMEOUT: run the peer as client; its status
  local d=$RES/cases/$1
  if [ $RXE_PEER = 1 ]; then
    echo "rxe2 (client): $(guest_cmd "$2" "$3" "$4" peer) $GUEST_IP" >> "$d.cmd"
    gfg_run peer "$1" rxe2 "$5" "$(guest_cmd "$2" "$3" "$4" peer) $GUEST_IP"
    return "$(cat "$d.rxe2.rc" 2>/dev/null || echo 125)"
  fi
  local -a emu; mapfile -t emu < <(emu_args "$2" "$3" "$4" "$1")
  echo "hcaemu (client): $(printf '%q ' "$HCAEMU" "${emu[@]}" "$GUEST_IP")" >> "$d.cmd"
  timeout -k 5 "$5" ip netns exec "$NS" "$HCAEMU" "${emu[@]}" "$GUEST_IP" > "$d.hcaemu.log" 2>&1
}
peer_server() {  # peer_server NAME TOOL FLAGS PORT TIMEOUT: start the peer as server; 0 once it listens
  local d=$RES/cases/$1 i
  if [ $RXE_PEER = 1 ]; then
    echo "rxe2 (server): $(guest_cmd "$2" "$3" "$4" peer)" >> "$d.cmd"
    gbg_start peer "$1" rxe2 "$5" "$(guest_cmd "$2" "$3" "$4" peer)"
    gbg_listening peer "$4"; return
  fi
  local -a emu; mapfile -t emu < <(emu_args "$2" "$3" "$4" "$1")
  echo "hcaemu (server): $(printf '%q ' "$HCAEMU" "${emu[@]}")" >> "$d.cmd"
  timeout -k 5 "$5" ip netns exec "$NS" "$HCAEMU" "${emu[@]}" > "$d.hcaemu.log" 2>&1 &
  EMU_PID=$!
  for ((i = 0; i < 300; i++)); do    # 30 s: DPDK's EAL starts slowly on a loaded machine
    [ -n "$(nsx ss -Hltn "sport = :$4")" ] && return 0
    kill -0 "$EMU_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
peer_server_finish() {  # peer_server_finish NAME: wait (20 s) for the peer server; its status
  local i rc
  if [ $RXE_PEER = 1 ]; then
    gbg_finish peer "$1" rxe2 20
    return "$(cat "$RES/cases/$1.rxe2.rc" 2>/dev/null || echo 125)"
  fi
  for ((i = 0; i < 200; i++)); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$EMU_PID" 2>/dev/null && kill "$EMU_PID"
  wait "$EMU_PID"; rc=$?
  EMU_PID=""
  return $rc
}

run_case() {  # run_case INDEX 'name|tool|server|flags|netem|timeout'
  local name tool srv flags netem tmo port d t0 rc_peer rc_rxe reason="" gcmd
  IFS='|' read -r name tool srv flags netem tmo <<< "$2"
  if [[ $name == cm-* ]]; then run_cm_case "$@"; return; fi
  if [ "$(trim "$tool")" = probe ]; then run_probe_case "$@"; return; fi
  port=$((BASE_PORT + $1)); d=$RES/cases/$name; t0=$(now_ms)
  CASE_V6=0; [[ $name == v6-* ]] && CASE_V6=1
  CASE_LIB=0; [[ $name == lib-* ]] && CASE_LIB=1
  gcmd=$(guest_cmd "$tool" "$flags" "$port" guest)
  : > "$d.cmd"

  if [ -n "$netem" ]; then
    gjob guest 20 "$(netem_script "$netem")" > "$d.netem" 2>&1 ||
      reason="netem could not be set: $(last_line "$d.netem")"
  fi
  cap_start "$d.pcap"
  if [ -n "$reason" ]; then :
  elif [ $RXE_PEER = 0 ] && [ ! -x "$HCAEMU" ]; then reason="hcaemu not found: $HCAEMU"
  elif [ $CASE_V6 = 1 ] && [ -z "${GID6[guest]:-}" ]; then reason="the guest has no IPv6 GID (see guest-ipv6)"
  elif [ $CASE_V6 = 1 ] && [ $RXE_PEER = 1 ] && [ -z "${GID6[peer]:-}" ]; then
    reason="the peer guest has no IPv6 GID (see peer-ipv6)"
  elif [ "$srv" = rxe ]; then
    echo "rxe (server): $gcmd" >> "$d.cmd"
    gbg_start guest "$name" rxe "$tmo" "$gcmd"
    if ! gbg_listening guest "$port"; then
      reason="rxe server not listening on :$port: $(last_line "$d.rxe.log")"
    else
      peer_client "$name" "$tool" "$flags" "$port" "$tmo"; rc_peer=$?
      # after a good run the server ends by itself; after a failed client it is stopped in 2 s
      gbg_finish guest "$name" rxe "$([ $rc_peer = 0 ] && echo 20 || echo 2)"
    fi
  else
    if peer_server "$name" "$tool" "$flags" "$port" "$tmo"; then
      echo "rxe (client): $gcmd $PEER_OOB_IP" >> "$d.cmd"
      gfg_run guest "$name" rxe "$tmo" "$gcmd $PEER_OOB_IP"
      peer_server_finish "$name"; rc_peer=$?
    else
      peer_server_finish "$name"; rc_peer=$?
      reason="$PEER server not listening on :$port (exit $rc_peer): $(why "$d.$PEER.log")"
    fi
  fi
  cap_stop
  if [ -n "$netem" ]; then
    gjob guest 20 "tc -s qdisc show dev eth0; tc -s filter show dev eth0; tc qdisc del dev eth0 root" >> "$d.netem" 2>&1 || reason=${reason:-"netem could not be removed"}
  fi

  rc_rxe=$(cat "$d.rxe.rc" 2>/dev/null || echo none)
  local peer_is_client=0; [ "$srv" = rxe ] && peer_is_client=1
  if [ -z "$reason" ]; then
    if [ "${rc_peer:-none}" != 0 ]; then
      reason="$PEER exit ${rc_peer:-none}: $(why "$d.$PEER.log")"
    elif [ "$rc_rxe" != 0 ]; then
      reason="rxe exit $rc_rxe: $(last_line "$d.rxe.log")"
    else
      reason=$(check_output rxe "$d.rxe.log" "$tool" "$flags" $((1 - peer_is_client))) &&
      reason=$(check_output "$PEER" "$d.$PEER.log" "$tool" "$flags" $peer_is_client)
    fi
  fi
  local roce ms drops other fam=ip
  [ $CASE_V6 = 1 ] && fam=ip6
  roce=$(tcpdump -r "$d.pcap" -nn "$fam and udp dst port 4791" 2>/dev/null | wc -l)
  # not one RoCE v2 frame of the other family: the case ran over the GIDs it names
  other=$(tcpdump -r "$d.pcap" -nn "not $fam and udp dst port 4791" 2>/dev/null | wc -l)
  drops=$(cap_dropped "$d.pcap")
  [ "${drops:-0}" = 0 ] || roce="$roce (capture dropped $drops)"
  if [ -z "$reason" ] && [ "$roce" = 0 ]; then reason="no RoCE v2 frame over $fam on br0"; fi
  if [ -z "$reason" ] && [ "$other" != 0 ]; then reason="$other RoCE v2 frames not over $fam on br0"; fi
  if [ -z "$reason" ] && [ $CASE_V6 = 1 ] && [ $RXE_PEER = 0 ]; then
    # hcaemu answers for its address (RFC 4861 7.2.4); a neighbour advertisement for it from
    # another MAC (a kernel interface in the namespace) would steer the guest's RoCE elsewhere
    local na; na=$(tcpdump -r "$d.pcap" -nn -e 'icmp6 and ip6[40] == 136' 2>/dev/null |
                   grep "tgt is $EMU_IP6," | grep -v -m1 " $EMU_MAC > ")
    [ -z "$na" ] || reason="a neighbour advertisement for $EMU_IP6 not from hcaemu: $(cut -c1-160 <<< "$na")"
  fi
  # Every RoCE v2 frame on the bridge, either side's, through hcaemu's own parser and ICRC check.
  if [ -x "$HCAEMU" ] && tcpdump -r "$d.pcap" -w "$d.roce.pcap" 'udp dst port 4791' 2>/dev/null; then
    if ! "$HCAEMU" dissect --strict --brief "$d.roce.pcap" > "$d.dissect.txt" 2>&1 && [ -z "$reason" ]; then
      reason="hcaemu dissect --strict: $(grep -m1 -E '^  error ' "$d.dissect.txt" | tr -s ' ' || last_line "$d.dissect.txt")"
    fi
    rm -f "$d.roce.pcap"
  fi
  # The data, byte for byte: hcaemu's dump against the frames on the bridge.
  local data=""
  if [ -z "$reason" ] && dump_case "$tool" "$flags"; then
    if /usr/bin/python3 "$DATA_CHECK" "$d.pcap" "$d.dump" --emu-ip "$(emu_ip)" --capture-dropped "${drops:-0}" \
         > "$d.datacheck.txt" 2>&1; then
      data=$(sed -n 's/.*: \([0-9]*\) messages compared, \([0-9]*\) bytes, \([0-9]*\) retransmitted copies, \([0-9]*\) not covered$/, data: \1 messages, \2 bytes compared (\3 retransmitted copies, \4 not covered)/p' "$d.datacheck.txt")
      data=${data:-", data: $(last_line "$d.datacheck.txt")"}
    else
      reason="data: $(tail -1 "$d.datacheck.txt" | cut -c1-300 | sed 's/^check_capture_data: //')"
    fi
  fi
  ms=$(( $(now_ms) - t0 ))
  if [ -z "$reason" ]; then
    report PASS "$name" "$roce RoCE v2 frames$data, ${ms} ms"
  else
    report FAIL "$name" "$reason (${ms} ms; logs: cases/$name.*)"
  fi
}

# ------------------------------------------------------------------ rdma_cm cases
cm_prog() {  # cm_prog TOOL ROLE SERVER_IP PORT FLAGS DEVICE: the program and its arguments
  local t=$1 r=$2 ip=$3 p=$4 f=$5 dev=$6
  case $t in
    rping) [ "$r" = server ] && echo "rping -s -a $ip -p $p $f" || echo "rping -c -a $ip -p $p -v $f";;
    rej) [ "$r" = server ] && echo "rping -s -a $ip -p $p -C 1" || echo "rping -c -a $ip -p $((p + 1)) $f";;
    udaddy) [ "$r" = server ] && echo "udaddy -b $ip $f" || echo "udaddy -s $ip $f";;
    rdma_server) [ "$r" = server ] && echo "rdma_server -s $ip -p $p" || echo "rdma_client -s $ip -p $p";;
    *) [ "$r" = server ] && echo "ib_$t -d $dev -x 1 -F -R -p $p $f" || echo "ib_$t -d $dev -x 1 -F -R -p $p $f $ip";;
  esac
}
cm_emu() {  # cm_emu NAME 'program' [MAD_DELAY_MS [tx|rx]]: hcaemu exec's words for it, one per line
  printf '%s\n' exec --eal "$EAL" --ip "$EMU_IP/24" --mac "$EMU_MAC"
  [ -z "$EMU_PCAP" ] || printf '%s\n' --pcap "$RES/cases/$1.hcaemu.pcap"
  # every MAD hcaemu sends (tx) or receives (rx) (BTH destination QP 1) held on its port
  # (docs/inject.md); the MADs keep their order, the rest is not held
  [ "${3:-0}" = 0 ] || printf '%s\n' --inject "delay dir=${4:-tx} qp=1 us=$(($3 * 1000)) count=all"
  printf '%s\n' --
  local -a w; read -r -a w <<< "$2"; printf '%s\n' "${w[@]}"
}
gbg_cm_listening() {  # gbg_cm_listening GUEST PORT: an rdma_cm listener on PORT within 15 s (rdma res)
  gjob "$1" 20 "i=0; while [ \$i -lt 150 ]; do rdma res show cm_id 2>/dev/null | grep 'state LISTEN' | grep -q ':$2 ' && exit 0; sleep 0.1; i=\$((i+1)); done; exit 1" > /dev/null
}
emu_cm_listening() {  # emu_cm_listening LOG PID: librdmacm's listen line (HCAEMU_RDMACM_DEBUG) within 30 s
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q 'rdmacm: listen' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# perftest -R's closing handshake under loss: each side SENDs its "done" on the exchange QP and
# waits for that SEND's completion, i.e. for the peer's ACK. When the peer's ACK of the last one is
# lost, the peer (its own SEND acknowledged) disconnects and destroys its QP, so the retransmissions
# go unanswered and the waiting side exits 1 after its retries ("Failed to close connection between
# server and client") on any RC HCA (ci19: cm-loss5-read_lat-rxe_srv, rxe's ACK lost by netem).
# Accepted only with loss, after a complete results table (check_output), and with nothing else wrong.
# ib_send_bw indents the line and goes on to exit 0 ("Trying to close this side resources"; ci29:
# cm-loss5-send_bw-rxe_srv); ib_read_lat exits 1.
CLOSE_RE='^ *Failed to close connection between server and client$'
CLOSE_LINES='Unable to write to socket/rdma_cm|Failed to close connection between server and client|Unable to read from socket/rdma_cm'
cm_verdict() {  # cm_verdict SIDE FILE RC TOOL FLAGS ROLE NETEM: a reason on stdout and status 1 if it failed
  local side=$1 f=$2 rc=$3 tool=$4 flags=$5 role=$6 netem=$7 n bad close_lost=0
  if [ "$tool" = rej ]; then
    [ "$role" = server ] && return 0
    grep -q 'RDMA_CM_EVENT_REJECTED, error 8' "$f" || { echo "$side: no 'RDMA_CM_EVENT_REJECTED, error 8' (exit $rc)"; return 1; }
    return 0
  fi
  case $tool in rping|udaddy|rdma_server) ;; *)
    [[ $rc =~ ^[01]$ ]] && [[ $netem == loss* ]] && grep -qE "$CLOSE_RE" "$f" && close_lost=1;;
  esac
  [ "$rc" = 0 ] || [ $close_lost = 1 ] || { echo "$side exit $rc: $(last_line "$f")"; return 1; }
  if [ $close_lost = 1 ]; then  # judged without the closing handshake's lines (kept beside the log)
    grep -vE "$CLOSE_LINES" "$f" > "$f.judged"; f=$f.judged
  fi
  bad=$(grep -iE "$ERR_RE|mismatch" "$f" | head -1 | cut -c1-160)
  [ -z "$bad" ] || { echo "$side printed: $bad"; return 1; }
  case $tool in
    rping)  # -v on the client: one 'ping data' line per message, each rdma-ping-N in order
      [ "$role" = client ] || return 0
      n=$(sed -n 's/.*-C \([0-9]*\).*/\1/p' <<< "$flags")
      [ "$(grep -c '^ping data: rdma-ping-' "$f")" = "$n" ] || { echo "$side: not $n 'ping data' lines"; return 1; };;
    udaddy)
      grep -q 'test complete' "$f" || { echo "$side: no 'test complete'"; return 1; };;
    rdma_server)  # rdma-core's examples: 'start', then 'end 0' when the message went both ways
      grep -qE '^rdma_(server|client): end 0$' "$f" || { echo "$side: no 'end 0'"; return 1; };;
    *) check_output "$side" "$f" "$tool" "$flags" "$([ "$role" = client ] && echo 1 || echo 0)" || return 1;;
  esac
  return 0
}
run_cm_case() {  # run_cm_case INDEX 'name|tool|server|flags|netem|timeout'
  local name tool srv flags netem tmo port d t0 reason="" gcmd ecmd rc_emu rc_rxe epid
  IFS='|' read -r name tool srv flags netem tmo <<< "$2"
  name=$(trim "$name"); tool=$(trim "$tool"); srv=$(trim "$srv"); flags=$(trim "$flags"); netem=$(trim "$netem"); tmo=$(trim "$tmo")
  port=$((BASE_PORT + $1)); d=$RES/cases/$name; t0=$(now_ms)
  CASE_V6=0; CASE_LIB=1
  : > "$d.cmd"
  if [ $RXE_PEER = 1 ]; then report PASS "$name" "skipped with --rxe-peer (rdma_cm cases face hcaemu)"; return; fi
  if [ -n "$netem" ]; then
    gjob guest 20 "$(netem_script "$netem")" > "$d.netem" 2>&1 || reason="netem could not be set: $(last_line "$d.netem")"
  fi
  local role_emu=client role_rxe=server sip=$GUEST_IP
  [ "$srv" = hcaemu ] && { role_emu=server; role_rxe=client; sip=$EMU_IP; }
  gcmd=$(cm_prog "$tool" $role_rxe "$sip" "$port" "$flags" rxe0)
  ecmd=$(cm_prog "$tool" $role_emu "$sip" "$port" "$flags" hcaemu0)
  # perftest -R: the client's data REQ must not reach the server before it listens again (below)
  local mad_delay=0 mad_dir=tx
  case $tool in rping|rej|udaddy|rdma_server) ;; *) mad_delay=$CM_DELAY_MS; [ "$srv" = hcaemu ] && mad_dir=rx;; esac
  local -a emu; mapfile -t emu < <(cm_emu "$name" "$ecmd" "$mad_delay" "$mad_dir")
  echo "rxe ($role_rxe): $gcmd" >> "$d.cmd"
  echo "hcaemu ($role_emu): $(printf '%q ' "$HCAEMU" "${emu[@]}")" >> "$d.cmd"
  cap_start "$d.pcap"
  if [ -n "$reason" ]; then :
  elif [ "$srv" = rxe ]; then
    gbg_start guest "$name" rxe "$tmo" "$gcmd"
    local lport=$port; [ "$tool" = udaddy ] && lport=7174   # udaddy's fixed port
    if ! gbg_cm_listening guest "$lport"; then
      reason="rxe server not listening (rdma_cm) on :$port: $(last_line "$d.rxe.log")"
    else
      HCAEMU_RDMACM_DEBUG=1 timeout -k 5 "$tmo" ip netns exec "$NS" "$HCAEMU" "${emu[@]}" > "$d.hcaemu.log" 2>&1; rc_emu=$?
      gbg_finish guest "$name" rxe "$([ $rc_emu = 0 ] && [ "$tool" != rej ] && echo 20 || echo 2)"
    fi
  else
    HCAEMU_RDMACM_DEBUG=1 timeout -k 5 "$tmo" ip netns exec "$NS" "$HCAEMU" "${emu[@]}" > "$d.hcaemu.log" 2>&1 &
    epid=$!
    if emu_cm_listening "$d.hcaemu.log" "$epid"; then
      gfg_run guest "$name" rxe "$tmo" "$gcmd"
    else
      reason="hcaemu server not listening: $(why "$d.hcaemu.log")"
    fi
    [ "$tool" = rej ] && kill "$epid" 2>/dev/null   # its server waits for a client that never comes
    local i; for ((i = 0; i < 200; i++)); do kill -0 "$epid" 2>/dev/null || break; sleep 0.1; done
    kill "$epid" 2>/dev/null
    wait "$epid"; rc_emu=$?
  fi
  cap_stop
  if [ -n "$netem" ]; then
    gjob guest 20 "tc -s qdisc show dev eth0; tc -s filter show dev eth0; tc qdisc del dev eth0 root" >> "$d.netem" 2>&1 || reason=${reason:-"netem could not be removed"}
  fi
  rc_rxe=$(cat "$d.rxe.rc" 2>/dev/null || echo none)
  if [ -z "$reason" ]; then
    reason=$(cm_verdict hcaemu "$d.hcaemu.log" "${rc_emu:-none}" "$tool" "$flags" $role_emu "$netem") &&
    reason=$(cm_verdict rxe "$d.rxe.log" "$rc_rxe" "$tool" "$flags" $role_rxe "$netem")
  fi
  # Every MAD and RoCE frame on the bridge through hcaemu's parser (--strict: MADs too).
  local roce mads
  roce=$(tcpdump -r "$d.pcap" -nn "udp dst port 4791" 2>/dev/null | wc -l)
  if tcpdump -r "$d.pcap" -w "$d.roce.pcap" 'udp dst port 4791' 2>/dev/null; then
    "$HCAEMU" dissect --strict "$d.roce.pcap" > "$d.dissect.txt" 2>&1 ||
      reason=${reason:-"hcaemu dissect --strict: $(grep -m1 -E 'error|bad' "$d.dissect.txt" | tr -s ' ' | cut -c1-160)"}
    rm -f "$d.roce.pcap"
  fi
  mads=$(sed -n 's/.*MADs to QP1 (GMPs) \([0-9]*\), malformed or with reserved bits set \([0-9]*\).*/\1 MADs (\2 bad)/p' "$d.dissect.txt")
  [ -n "$reason" ] || [ -n "$mads" ] || reason="no MAD on br0"
  if [ -z "$reason" ]; then
    report PASS "$name" "$roce RoCE v2 frames, ${mads}, $(( $(now_ms) - t0 )) ms"
  else
    report FAIL "$name" "$reason ($(( $(now_ms) - t0 )) ms; logs: cases/$name.*)"
  fi
}

# ------------------------------------------------------------------ the peer behaviour report
run_probe_case() {  # run_probe_case INDEX 'name|probe|rxe|flags|netem|timeout'
  local name tool srv flags netem tmo d t0 reason="" rc size iters out=$RES/probe scmd
  IFS='|' read -r name tool srv flags netem tmo <<< "$2"
  d=$RES/cases/$name; t0=$(now_ms)
  CASE_V6=0; CASE_LIB=0
  : > "$d.cmd"
  if [ $RXE_PEER = 1 ]; then report PASS "$name" "skipped with --rxe-peer (the prober is hcaemu)"; return; fi
  size=$(sed -n 's/.*-s \([0-9]*\).*/\1/p' <<< "$flags"); iters=$(sed -n 's/.*-n \([0-9]*\).*/\1/p' <<< "$flags")
  # each scenario: the guest's pingpong in the background (at most 40 s), its output in cases/probe-SCENARIO.rxe.log
  scmd="$HERE/guest-server.sh $RES guest probe-{name} 40 ibv_rc_pingpong -d rxe0 -g 1 -p {port} -s $size -n $iters -c"
  local -a cmd=(/usr/bin/python3 "$REPO/scripts/probe.py" --hcaemu "$HCAEMU" --peer "$GUEST_IP" --out "$out"
                --attach "--eal '$EAL' --ip $EMU_IP/24 --mac $EMU_MAC" --server-cmd "$scmd" --server-wait 20
                --size "$size" --iters "$iters")
  echo "hcaemu (prober, in netns $NS): $(printf '%q ' "${cmd[@]}")" >> "$d.cmd"
  cap_start "$d.pcap"
  timeout -k 5 "$tmo" ip netns exec "$NS" "${cmd[@]}" > "$d.hcaemu.log" 2>&1; rc=$?
  cap_stop
  if [ $rc != 0 ]; then reason="probe.py exit $rc: $(last_line "$d.hcaemu.log")"
  elif ! /usr/bin/python3 "$HERE/check_probe_rxe.py" "$out" > "$d.check.txt" 2>&1; then
    reason="the report against rxe's known behaviour: $(grep -m1 '^FAIL' "$d.check.txt" | cut -c1-240)"
  fi
  # every RoCE v2 frame on the bridge, the forged ones too, parses with a good ICRC
  if tcpdump -r "$d.pcap" -w "$d.roce.pcap" 'udp dst port 4791' 2>/dev/null; then
    "$HCAEMU" dissect --strict --brief "$d.roce.pcap" > "$d.dissect.txt" 2>&1 ||
      reason=${reason:-"hcaemu dissect --strict: $(grep -m1 -E '^  error ' "$d.dissect.txt" | tr -s ' ')"}
    rm -f "$d.roce.pcap"
  fi
  if [ -z "$reason" ]; then
    report PASS "$name" "$(grep -c '^ok' "$d.check.txt") findings as rxe's code says (report: probe/REPORT.md), $(( $(now_ms) - t0 )) ms"
  else
    report FAIL "$name" "$reason ($(( $(now_ms) - t0 )) ms; logs: cases/$name.*, probe/)"
  fi
}

PASSED=0 FAILED=0
report() {  # report PASS|FAIL NAME REASON
  printf '%s %-32s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"
  if [ "$1" = PASS ]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
}

# ------------------------------------------------------------------ the run
if [ $RXE_PEER = 1 ]; then peer_desc="a second rxe guest, $PEER_IP"; else peer_desc=$HCAEMU; fi
log "results: $RES; guest image: $CACHE (accel $ACCEL); peer: $peer_desc"
topology_up; rc=$?
[ $rc = 2 ] && skip "cannot create a network namespace (ip netns add $NS)"
[ $rc = 0 ] || { echo "interop: FAIL: could not build the topology in netns $NS" >&2; exit 1; }
t_boot=$(now_ms)
guest_boot guest tap0 "$GUEST_IP" "$GUEST_MAC" || { echo "interop: FAIL: qemu did not start" >&2; exit 1; }
if [ $RXE_PEER = 1 ]; then
  guest_boot peer tap1 "$PEER_IP" "$PEER_MAC" || { echo "interop: FAIL: qemu (peer) did not start" >&2; exit 1; }
fi
for g in "${!QEMU_PID[@]}"; do
  if ! wait_file "$RES/$g/ready" 180; then
    report FAIL "$g-boot" "no rxe0 after 180 s: $(last_line "$RES/$g/console.log")"
    exit 1
  fi
  report PASS "$g-boot" "rxe0 ready $(( $(now_ms) - t_boot )) ms after qemu start ($(grep -o 'uptime=[0-9.]*' "$RES/$g/ready") s in the guest)"
done

# Guest checks: the rxe port and its IPv4-mapped GID at index 1 (perftest -x 1, pingpong -g 1),
# ibv_devinfo through libibverbs and the rxe provider, IP to vhost0 over the bridge.
if grep -q '^port_state=4: ACTIVE' "$RES/guest/ready" && grep -q '^active_mtu=1024' "$RES/guest/ready" &&
   grep -q '^GID\[1\]=0000:0000:0000:0000:0000:ffff:c612:0002 type=RoCE v2' "$RES/guest/ready"; then
  report PASS guest-rxe0 "PORT_ACTIVE, active_mtu 1024, GID[1] ::ffff:$GUEST_IP RoCE v2"
else
  report FAIL guest-rxe0 "unexpected port state or GID table: $(tr '\n' ' ' < "$RES/guest/ready")"
fi
gjob guest 30 "ibv_devinfo -d rxe0 -v" > "$RES/guest/ibv_devinfo.txt" 2>&1
if grep -q 'transport:.*InfiniBand' "$RES/guest/ibv_devinfo.txt" && grep -q 'link_layer:.*Ethernet' "$RES/guest/ibv_devinfo.txt"; then
  report PASS guest-ibv_devinfo "rxe0 through libibverbs: InfiniBand transport, Ethernet link layer"
else
  report FAIL guest-ibv_devinfo "$(last_line "$RES/guest/ibv_devinfo.txt")"
fi
cap_start "$RES/cases/guest-ping.pcap"
gjob guest 30 "ping -c 3 -W 5 $HOST_IP" > "$RES/cases/guest-ping.log" 2>&1; rc=$?
cap_stop
if [ $rc = 0 ] && grep -q '3 packets received' "$RES/cases/guest-ping.log"; then
  report PASS guest-ping "3/3 echo replies from $HOST_IP (vhost0, over br0)"
else
  report FAIL guest-ping "ping exit $rc: $(last_line "$RES/cases/guest-ping.log")"
fi

ipv6_check guest "$GUEST_IP6"
[ $RXE_PEER = 0 ] || ipv6_check peer "$PEER_IP6"

for ((c = 0; c < ${#SELECTED[@]}; c++)); do
  alive=1
  for g in "${!QEMU_PID[@]}"; do qemu_alive "$g" || alive=0; done
  if [ $alive = 0 ]; then report FAIL "${SELECTED[c]%%|*}" "a guest is gone (see */console.log)"; continue; fi
  # a case starts only if its own timeout still fits in the budget (meson's timeout comes after it)
  if [ $(( ($(now_ms) - T_START) / 1000 + ${SELECTED[c]##*|} )) -gt "$BUDGET" ]; then
    report FAIL "${SELECTED[c]%%|*}" "not run: its timeout of ${SELECTED[c]##*|} s no longer fits in the run's budget of $BUDGET s"; continue
  fi
  run_case "$c" "${SELECTED[c]}"
done

total=$(( ($(now_ms) - T_START) / 1000 ))
echo "== interop: $PASSED passed, $FAILED failed, ${total} s (accel $ACCEL, peer $PEER); logs in $RES" | tee -a "$SUMMARY"
[ $FAILED -eq 0 ]
