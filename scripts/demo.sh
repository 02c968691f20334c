#!/usr/bin/env bash
# Sets up, builds and runs the main job on the embedded default link (no NIC needed):
#  1. one RoCE v2 frame of every opcode into a capture, dissected with `hcaemu dissect`;
#  2. two HCAs over the in-memory wire (`hcaemu sim`): a mix of RC operations over a wire that
#     loses, duplicates, reorders and corrupts frames, every packet and event traced, the
#     destination memory verified byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null

pcap=build/hcaemu-demo.pcap
./build/tools/hcaemu demo --quiet --pcap "$pcap"
./build/tools/hcaemu dissect "$pcap"
echo
echo "The capture is $pcap: open it in Wireshark, or try"
echo "  ./build/tools/hcaemu dissect --brief $pcap"
echo
echo "== Two HCAs, one lossy wire: hcaemu sim --op mix --count 12 --size 3000 --loss 0.1 --dup 0.05 --reorder 0.05 --corrupt 0.05 --seed 7"
./build/tools/hcaemu sim --op mix --count 12 --size 3000 --loss 0.1 --dup 0.05 --reorder 0.05 --corrupt 0.05 --seed 7
