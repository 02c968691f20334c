#!/usr/bin/env bash
# Builds the interop guest: Debian's own kernel (it ships rdma_rxe.ko) and a small initramfs with
# busybox-static, rdma-core (libibverbs, the rxe provider, librdmacm), ibverbs-utils, perftest,
# rdmacm-utils, iproute2's ip/tc/rdma and tcpdump, whose /init is guest-init.sh.
#   scripts/interop/build-guest.sh [CACHE_DIR]
# CACHE_DIR: default $HCAEMU_INTEROP_CACHE, else build/interop-guest in the repository.
# Output: CACHE_DIR/vmlinuz, CACHE_DIR/initramfs.gz. Everything comes from Debian packages:
# host tools through apt-get install, the guest kernel through `apt-get download` (once).
# Idempotent: returns at once when the inputs (these scripts, the package versions) are unchanged.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${1:-${HCAEMU_INTEROP_CACHE:-$REPO/build/interop-guest}}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
log() { echo "[build-guest] $*" >&2; }

# Host packages: the tools copied into the guest, the ones that pack it, and qemu to boot it.
HOST_PKGS=(qemu-system-x86 busybox-static ibverbs-utils ibverbs-providers perftest rdmacm-utils
           iproute2 tcpdump kmod cpio gzip)
missing=()
for p in "${HOST_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=300 -y -q update >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=300 -y -q install --no-install-recommends "${missing[@]}" >&2
fi

# The guest kernel: the version linux-image-amd64 points to, fetched once and kept unpacked.
kroot=$(ls -d "$CACHE"/kroot-* 2>/dev/null | head -1 || true)
if [ -z "$kroot" ]; then
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
  if [ -z "$kpkg" ]; then
    apt-get -o DPkg::Lock::Timeout=300 -q update >&2
    kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
  fi
  [ -n "$kpkg" ] || { log "cannot resolve linux-image-amd64"; exit 1; }
  kv=${kpkg#linux-image-}
  log "apt-get download $kpkg"
  rm -rf "$CACHE/deb"; mkdir -p "$CACHE/deb"
  (cd "$CACHE/deb" && apt-get download "$kpkg" >&2)
  dpkg-deb -x "$CACHE"/deb/"$kpkg"_*.deb "$CACHE/kroot-$kv.tmp"
  depmod -b "$CACHE/kroot-$kv.tmp" "$kv"
  mv "$CACHE/kroot-$kv.tmp" "$CACHE/kroot-$kv"
  rm -rf "$CACHE/deb"
  kroot=$CACHE/kroot-$kv
fi
KV=${kroot##*/kroot-}

# Guest programs (ldd finds their libraries) and kernel modules.
BINS=(/usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ib_write_bw
      /usr/bin/ib_read_bw /usr/bin/ib_send_bw /usr/bin/ib_atomic_bw /usr/bin/ib_write_lat
      /usr/bin/ib_read_lat /usr/bin/ib_send_lat /usr/bin/ib_atomic_lat /usr/bin/rdma
      /usr/sbin/ip /usr/sbin/tc /usr/bin/tcpdump
      /usr/bin/rping /usr/bin/udaddy /usr/bin/rdma_server /usr/bin/rdma_client /usr/bin/ucmatose)
# sch_prio and cls_u32: run.sh's loss that spares RoCE ACKs (netem on one prio band)
# rdma_ucm: the kernel's rdma_cm for librdmacm (it brings rdma_cm and ib_cm)
MODS=(virtio_pci virtio_net 9pnet_virtio 9p rdma_rxe ib_uverbs rdma_ucm crc32_generic sch_netem sch_prio cls_u32)

# Inputs of the image: if their digest matches the last build, the image is current.
stamp=$( { cat "$HERE/build-guest.sh" "$HERE/guest-init.sh"; echo "$KV ${MODS[*]}";
           dpkg-query -W busybox-static libibverbs1 ibverbs-providers ibverbs-utils perftest librdmacm1 rdmacm-utils \
             iproute2 tcpdump; } | sha256sum | cut -d' ' -f1)
if [ -f "$CACHE/vmlinuz" ] && [ -f "$CACHE/initramfs.gz" ] && [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$stamp" ]; then
  log "up to date: $CACHE (kernel $KV)"
  exit 0
fi

ROOT=$CACHE/rootfs
rm -rf "$ROOT" "$CACHE/stamp"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc/libibverbs.d,proc,sys,dev,tmp,run,mnt/host,root}
cp /bin/busybox "$ROOT/bin/busybox"
for app in $("$ROOT/bin/busybox" --list); do
  [ -e "$ROOT/bin/$app" ] || ln -s busybox "$ROOT/bin/$app"
done
ln -sf ../bin/busybox "$ROOT/sbin/modprobe"   # the kernel's request_module() calls /sbin/modprobe

put() {  # put FILE: copy FILE (symlinks followed) to the same path in the image
  [ -e "$ROOT$1" ] && return 0
  mkdir -p "$ROOT$(dirname "$1")"
  cp -L "$1" "$ROOT$1"
}
put_with_libs() {
  put "$1"
  local lib
  # Debian's libraries, never a build tree's (meson's test environment puts hcaemu's libibverbs
  # first in LD_LIBRARY_PATH; the guest must get rdma-core's).
  for lib in $(env -u LD_LIBRARY_PATH ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do put "$lib"; done
}
for b in "${BINS[@]}"; do put_with_libs "$b"; done
rm -f "$ROOT/bin/ip" "$ROOT/bin/tc"           # iproute2's, not busybox's
# libibverbs dlopen()s the rxe provider named by rxe.driver: ldd cannot see either.
for p in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do put_with_libs "$p"; done
cp /etc/libibverbs.d/rxe.driver "$ROOT/etc/libibverbs.d/"
put /lib64/ld-linux-x86-64.so.2
# glibc dlopen()s libgcc_s for pthread_exit/cancel (rping's threads): ldd cannot see it.
put /lib/x86_64-linux-gnu/libgcc_s.so.1
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$ROOT/etc/passwd"
printf 'root:x:0:\n' > "$ROOT/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files\nservices: files\n' > "$ROOT/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n' > "$ROOT/etc/hosts"
cp /etc/services /etc/protocols "$ROOT/etc/" 2>/dev/null || true

for m in "${MODS[@]}"; do
  modprobe -d "$kroot" -S "$KV" --show-depends "$m" || { log "kernel $KV has no module $m"; exit 1; }
done | awk '$1 == "insmod" {print $2}' | sort -u | while read -r ko; do
  rel=${ko#"$kroot"}
  mkdir -p "$ROOT$(dirname "$rel")"
  cp "$ko" "$ROOT$rel"
done
cp "$kroot/lib/modules/$KV"/modules.{builtin,builtin.modinfo,order} "$ROOT/lib/modules/$KV/"
depmod -b "$ROOT" "$KV"
echo "${MODS[*]}" > "$ROOT/etc/guest-modules"
install -m 755 "$HERE/guest-init.sh" "$ROOT/init"

(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1 > "$CACHE/initramfs.gz.tmp")
mv "$CACHE/initramfs.gz.tmp" "$CACHE/initramfs.gz"
cp "$kroot/boot/vmlinuz-$KV" "$CACHE/vmlinuz"
rm -rf "$ROOT"
echo "$stamp" > "$CACHE/stamp"
log "kernel $KV, initramfs $(du -h "$CACHE/initramfs.gz" | cut -f1): $CACHE"
