#!/usr/bin/env bash
# A one-node Slurm cluster with stand-in GPUs, everything under one state directory (nothing in /etc/slurm or
# /run/munge): `start DIR [GPUS]` brings up munged, slurmctld and slurmd until the node is idle and prints the
# SLURM_CONF to export; `stop DIR` stops the three daemons it started (by the PIDs it recorded, nothing else);
# `status DIR` says whether they run. Stand-in GPUs are character devices made in DIR (`nvidiaN`, major 195) — gres
# needs real device nodes — so nothing in /dev makes other code think a GPU is present. Slurm hands each task its
# GPUs as CUDA_VISIBLE_DEVICES. Facts: ../shared/notes/slurm-one-node.md.
set -euo pipefail
cmd=${1:?usage: slurm-cluster.sh start|stop|status DIR [GPUS]}
dir=${2:?usage: slurm-cluster.sh start|stop|status DIR [GPUS]}
gpus=${3:-4}
say() { echo "slurm-cluster: $*" >&2; }

alive() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

stop() {
  for d in slurmd slurmctld munged; do
    if alive "$d"; then kill -TERM "$(cat "$dir/$d.pid")" 2>/dev/null || true; fi
  done
  for _ in $(seq 50); do
    alive slurmd || alive slurmctld || alive munged || break
    sleep 0.1
  done
  for d in slurmd slurmctld munged; do
    if alive "$d"; then kill -KILL "$(cat "$dir/$d.pid")" 2>/dev/null || true; fi
    rm -f "$dir/$d.pid"
  done
}

case "$cmd" in
  stop) [ -d "$dir" ] && stop; say "stopped ($dir)"; exit 0 ;;
  status) alive slurmctld && alive slurmd && alive munged && { echo running; exit 0; }; echo stopped; exit 1 ;;
  start) ;;
  *) say "unknown command $cmd"; exit 2 ;;
esac

[ "$(id -u)" -eq 0 ] || { say "the test cluster runs as root (SlurmUser=root, munged --force)"; exit 1; }
mkdir -p "$dir"/{state,spool,munge,log}
stop  # a cluster of this directory left running: start afresh
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
                                   chmod 400 "$dir/munge/munge.key"; }
for i in $(seq 0 $((gpus - 1))); do
  [ -c "$dir/nvidia$i" ] || { rm -f "$dir/nvidia$i"; mknod "$dir/nvidia$i" c 195 "$i"; }
done
cpus=$(nproc)
# the node's memory in MiB (what a task's --mem is held to), less 1 GiB for the machine itself
mem=$(( $(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=boot-harness
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MinJobAge=300
DependencyParameters=kill_invalid_depend
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
{
  echo "Name=gpu File=$dir/nvidia[0-$((gpus - 1))]"
} > "$dir/gres.conf"
export SLURM_CONF="$dir/slurm.conf"
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N localhost
for _ in $(seq 100); do
  state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && break
  sleep 0.1
done
[ "${state:-}" = idle ] || { say "the node did not come up idle (state: ${state:-none}); logs in $dir/log"; stop; exit 1; }
say "up: node localhost idle, $gpus stand-in GPUs, $cpus CPUs ($dir)"
echo "$SLURM_CONF"
