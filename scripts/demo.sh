#!/usr/bin/env bash
# Sets up, builds and runs the main job on the embedded default link (no NIC needed).
# For now the job is the packet layer's: build one RoCE v2 frame of every opcode into a capture,
# then dissect that capture with `hcaemu dissect`.
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
