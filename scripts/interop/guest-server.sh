#!/usr/bin/env bash
# A server in run.sh's interop guest, for scripts/probe.py's --server-cmd (run.sh's probe case):
# started in the background through the guest's 9p job protocol (guest-init.sh), then waited for.
# Its output comes on stdout when it ends, its exit status is ours. SIGTERM or SIGINT (probe.py
# stopping a peer that outlived the prober) stops it in the guest first.
#   guest-server.sh RES GUEST NAME TIMEOUT COMMAND...
# RES: run.sh's results directory (the guest's /mnt/host); GUEST: the guest's folder there;
# NAME: the server's files, RES/cases/NAME.rxe.log and .rc; TIMEOUT: s, busybox timeout in the guest.
set -u
[ $# -ge 5 ] || { echo "usage: guest-server.sh RES GUEST NAME TIMEOUT COMMAND..." >&2; exit 2; }
res=$1 g=$2 name=$3 tmo=$4
shift 4
cmd=$*
job() {  # job SECONDS 'script': one guest job (as run.sh's gjob); its status, 124 when it timed out
  local j i
  j=$res/$g/jobs/$(date +%s%N)
  printf '%s\n' "$2" > "$j.tmp" && mv "$j.tmp" "$j.sh" || return 125
  for ((i = 0; i < $1 * 20; i++)); do [ -e "$j.rc" ] && return "$(cat "$j.rc")"; sleep 0.05; done
  return 124
}
rcf=$res/cases/$name.rxe.rc f=/mnt/host/cases/$name.rxe
rm -f "$rcf" "$res/cases/$name.rxe.log"
finish() {  # finish STATUS_IF_NONE: the server's output, then its status
  local i
  for ((i = 0; i < 300; i++)); do [ -e "$rcf" ] && break; sleep 0.05; done   # 15 s
  cat "$res/cases/$name.rxe.log" 2>/dev/null
  if [ -e "$rcf" ]; then exit "$(cat "$rcf")"; fi
  exit "$1"
}
# busybox timeout keeps the tool's pid, so the pid file can stop it
job 10 "( timeout $tmo $cmd > $f.log 2>&1 & echo \$! > /tmp/$name.pid; wait \$!; echo \$? > $f.rc.tmp; mv $f.rc.tmp $f.rc ) > /dev/null 2>&1 &" ||
  { echo "guest-server.sh: the guest did not take the job"; exit 125; }
stopped() {
  job 10 "kill \$(cat /tmp/$name.pid) 2>/dev/null"
  echo "guest-server.sh: SIGTERM: stopping '$cmd' in the guest"
  finish 143
}
trap stopped TERM INT
# sleep in the background: the signal ends the wait at once, and no "Terminated" notice for it
for ((i = 0; i < (tmo + 10) * 20; i++)); do [ -e "$rcf" ] && finish 124; sleep 0.05 & wait $!; done
finish 124
