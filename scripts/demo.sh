#!/usr/bin/env bash
# Sets up, builds and runs the main job on the embedded default link (no NIC needed):
#  1. `hcaemu demo`: two HCAs on DPDK's net_ring pair perform SEND, RDMA WRITE, RDMA READ,
#     CmpSwap and FetchAdd, every step told in plain words, the data verified, every frame
#     written to a pcap;
#  2. that capture, one line per frame (`hcaemu dissect --brief`);
#  3. two HCAs over the in-memory wire (`hcaemu sim`): a mix of RC operations over a wire that
#     loses, duplicates, reorders and corrupts frames, every packet and event traced, the
#     destination memory verified byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null

pcap=build/hcaemu-demo.pcap
echo "== Two HCAs on the embedded link: hcaemu demo --pcap $pcap"
./build/tools/hcaemu demo --pcap "$pcap"
echo
echo "== The frames they exchanged: hcaemu dissect --brief $pcap"
./build/tools/hcaemu dissect --brief "$pcap"
echo
echo "Every field of every frame: ./build/tools/hcaemu dissect $pcap (or open it in Wireshark)."
echo "One frame of every opcode hcaemu knows: ./build/tools/hcaemu demo --samples --pcap samples.pcap"
echo
echo "== Two HCAs, one lossy wire: hcaemu sim --op mix --count 12 --size 3000 --loss 0.1 --dup 0.05 --reorder 0.05 --corrupt 0.05 --seed 7"
./build/tools/hcaemu sim --op mix --count 12 --size 3000 --loss 0.1 --dup 0.05 --reorder 0.05 --corrupt 0.05 --seed 7
