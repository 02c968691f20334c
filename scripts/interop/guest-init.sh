#!/bin/sh
# /init of the interop guest (packed into the initramfs by build-guest.sh).
# The guest is Linux Soft-RoCE (rdma_rxe) on its virtio NIC eth0, driven by the host through a
# 9p share (mount tag "host", on /mnt/host):
#   guest writes   G/ready                (port state, GID table, active_mtu) once rxe0 is up
#   host writes    G/jobs/N.sh            (renamed into place, so never seen half written)
#   guest writes   G/jobs/N.out, N.rc     (output, then exit status; rc last)
#   host writes    G/jobs/halt            (the guest powers off)
# G is the guest's own folder in the share (ifc_dir, default "guest"), so two guests can share it.
# Kernel command line knobs (the kernel hands unknown name=value pairs to /init as environment):
#   ifc_dir=guest  ifc_ip=198.18.0.2/24  ifc_mtu=1500  ifc_netem=loss_5%  (netem on eth0 egress, _ for spaces)
#   ifc_agent_timeout=1500 (s, the agent's whole life)  ifc_job_timeout=300 (s, one job)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
exec </dev/console >/dev/console 2>&1

# Debian's static busybox runs its own applets before $PATH, so its ip/tc (no netem) would win
# over iproute2's: every job sources this file.
cat > /etc/guest-env.sh <<'ENV'
ip() { /usr/sbin/ip "$@"; }
tc() { /usr/sbin/tc "$@"; }
ENV
. /etc/guest-env.sh

say() { read -r up _ < /proc/uptime; echo "[guest $up] $*"; }

for m in $(cat /etc/guest-modules); do modprobe "$m" || say "modprobe $m failed"; done

ip link set lo up
ip link set eth0 mtu "${ifc_mtu:-1500}"
ip addr add "${ifc_ip:-198.18.0.2/24}" dev eth0
ip link set eth0 up
if [ -n "$ifc_netem" ]; then
  # shellcheck disable=SC2046 # the words are netem's arguments
  tc qdisc replace dev eth0 root netem $(echo "$ifc_netem" | tr _ ' ') && say "netem: $ifc_netem"
fi
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add rxe0 failed"

# Wait (at most 20 s) for PORT_ACTIVE and the IPv4-mapped GID (::ffff:a.b.c.d, RoCE v2, which
# rxe installs when eth0 has the address). sysfs is read with the shell's own `read`: every
# fork costs milliseconds under TCG.
P=/sys/class/infiniband/rxe0/ports/1
v4_gid() {
  for n in 0 1 2 3 4 5 6 7; do
    read -r v < $P/gids/$n 2>/dev/null || continue
    case $v in 0000:0000:0000:0000:0000:ffff:*) return 0;; esac
  done
  return 1
}
i=0
while [ $i -lt 400 ]; do
  st=; read -r st < $P/state 2>/dev/null
  case $st in *ACTIVE*) v4_gid && break;; esac
  sleep 0.05; i=$((i + 1))
done

if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host; then
  say "no 9p share: nothing to do"; poweroff -f
fi

{
  read -r up _ < /proc/uptime; echo "uptime=$up"
  read -r mac < /sys/class/net/eth0/address; echo "ip=${ifc_ip:-198.18.0.2/24} mac=$mac"
  read -r st < $P/state; echo "port_state=$st"
  for n in 0 1 2 3 4 5 6 7; do
    read -r v < $P/gids/$n 2>/dev/null || continue
    [ "$v" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
    read -r t < $P/gid_attrs/types/$n 2>/dev/null; echo "GID[$n]=$v type=$t"
  done
  echo "active_mtu=$(ibv_devinfo -d rxe0 | awk '/active_mtu/{print $2}')"
} > /tmp/ready
say "ready: $(tr '\n' ' ' < /tmp/ready)"
G=/mnt/host/${ifc_dir:-guest}
mkdir -p $G/jobs
cp /tmp/ready $G/.ready && mv $G/.ready $G/ready

# The agent: bounded in total time, each job bounded by busybox timeout.
J=$G/jobs
read -r up _ < /proc/uptime
deadline=$(( ${up%.*} + ${ifc_agent_timeout:-1500} ))
while read -r up _ < /proc/uptime && [ "${up%.*}" -lt $deadline ]; do
  [ -e $J/halt ] && break
  for f in $J/*.sh; do
    [ -e "$f" ] || continue
    b=${f%.sh}
    [ -e "$b.taken" ] && continue
    : > "$b.taken"
    timeout "${ifc_job_timeout:-300}" sh -c ". /etc/guest-env.sh; . $f" > "$b.out" 2>&1
    echo $? > "$b.rc.tmp"; mv "$b.rc.tmp" "$b.rc"
  done
  sleep 0.05
done
say "agent done"
sync
umount /mnt/host
poweroff -f
