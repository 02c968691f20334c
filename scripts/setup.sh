#!/usr/bin/env bash
# Installs the Debian 12 packages hcaemu needs. Idempotent; returns at once when all are present.
set -euo pipefail

PKGS=(
  g++ pkg-config meson ninja-build   # build
  libpcap-dev                        # pcap read/write (dissect, captures)
  libisal-dev                        # ISA-L: accelerated CRC32 for the ICRC
  dpdk-dev                           # poll-mode drivers (dpdk_port/)
  libboost-dev                       # Boost.Asio (out-of-band TCP, control plane)
  catch2                             # unit tests (Catch2 v2)
  clang libclang-rt-14-dev           # fuzz targets (tests/fuzz): clang 14's libFuzzer and sanitizers
  tshark python3-scapy               # independent decoders for cross-checks
  chromium                           # tests: renders hcaemu ladder's SVG/HTML to PNG (headless, file:// only)
  qemu-system-x86 busybox-static cpio kmod iproute2 tcpdump   # interop: the rxe guest (scripts/interop)
  ibverbs-utils ibverbs-providers perftest                    # interop: the guest's rdma-core tools
  python3-pyverbs                    # rdma-core's own test suite against hcaemu's libibverbs (suite verbs)
  librdmacm-dev rdmacm-utils         # tools/rdmacm: <rdma/rdma_cma.h> and the unmodified rdma_cm programs (suite rdmacm)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
APT=(-o DPkg::Lock::Timeout=300 -y -q)
# wireshark-common asks whether non-root users may capture; answer no without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get "${APT[@]}" update
$SUDO apt-get "${APT[@]}" install --no-install-recommends "${missing[@]}"
