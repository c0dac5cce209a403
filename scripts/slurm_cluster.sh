#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, from Debian's packages, for tests and
# for trying profiles/slurm without a cluster at hand.
#
#   bash scripts/slurm_cluster.sh start    # munged, slurmctld, slurmd; waits for an idle node
#   bash scripts/slurm_cluster.sh status   # sinfo + squeue
#   bash scripts/slurm_cluster.sh stop     # cancels its jobs, stops the daemons it started (by pid)
#
# Needs root (slurmd must run as root). Installs slurm-wlm and munge with apt-get when
# they are missing. Everything it writes lives in $DDPBENCH_SLURM_DIR (default
# /tmp/ddpbench-slurm), except /etc/slurm/slurm.conf (the client commands srun, sbatch,
# squeue read it from there on every node; the jobstep executor of the Snakemake plugin
# drops SLURM_CONF from the environment), which carries a marker line, is only ever
# overwritten when it carries that marker, and is removed again by `stop`.
#
# The node is this host (hostname -s) at 127.0.0.1 with its real CPU count and memory
# (slurmd -C); set DDPBENCH_SLURM_CPUS to declare more CPUs than the hardware has
# (SlurmdParameters=config_overrides), e.g. to schedule a world-size-3 cell on 2 cores.
#
# Several nodes on one machine: DDPBENCH_SLURM_NODES="n0:198.18.0.1:NETNS0 n1:198.18.0.2:NETNS1"
# (name:address:network namespace, e.g. ddpbench.netlab's two namespaces) runs slurmctld
# and slurmd -N n0 in the first namespace and slurmd -N n1 in the second; each node
# declares all CPUs and 1/N of the memory. Client commands must then run in the first
# namespace (`nsenter --net=/run/netns/NETNS0 sbatch ...`); this script does so itself.
# Plugins: select/cons_tres (CPUs and memory consumable), proctrack/linuxproc,
# task/none, no accounting (MinJobAge=600 so `squeue` still reports finished jobs:
# the Snakemake plugin runs with slurm-status-command: squeue).
set -euo pipefail

DIR=${DDPBENCH_SLURM_DIR:-/tmp/ddpbench-slurm}
CONF=/etc/slurm/slurm.conf
MARKER="# written by ddpbench scripts/slurm_cluster.sh"
NODE=$(hostname -s)
NODES=${DDPBENCH_SLURM_NODES:-}
CLIENT=()
if [ -n "$NODES" ]; then
    first=${NODES%% *}
    # nsenter enters the network namespace only (`ip netns exec` would also remount
    # /sys, hiding /sys/fs/cgroup from slurmd).
    CLIENT=(nsenter "--net=/run/netns/${first##*:}")
fi

log() { echo "[slurm_cluster] $*" >&2; }

is_ours_conf() { [ -f "$CONF" ] && head -n1 "$CONF" | grep -qF "$MARKER"; }

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

ensure_packages() {
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
        log "installing slurm-wlm and munge (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq slurm-wlm munge >/dev/null \
            || { apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null; }
    fi
}

write_conf() {
    local cpus mem
    cpus=$(nproc)
    # RealMemory as slurmd measures it, less 5% so the node never drains for "low memory".
    mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    mem=$((mem * 95 / 100))
    local overrides=""
    if [ -n "${DDPBENCH_SLURM_CPUS:-}" ]; then
        cpus=$DDPBENCH_SLURM_CPUS
        overrides="SlurmdParameters=config_overrides"
    fi
    if [ -e "$CONF" ] && ! is_ours_conf; then
        log "$CONF exists and was not written by this script; refusing to touch it"
        exit 1
    fi
    mkdir -p /etc/slurm "$DIR/state"
    local ctld="$NODE(127.0.0.1)" node_lines="NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    if [ -n "$NODES" ]; then
        local entries=($NODES) e
        mem=$((mem / ${#entries[@]}))
        node_lines=""
        for e in "${entries[@]}"; do
            IFS=: read -r name addr _ <<<"$e"
            node_lines+="NodeName=$name NodeAddr=$addr CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
        done
        IFS=: read -r _ addr _ <<<"${entries[0]}"
        ctld="$NODE($addr)"
    fi
    cat >"$CONF" <<EOF
$MARKER (state in $DIR); removed by 'stop'
ClusterName=ddpbench
SlurmctldHost=$ctld
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
KillWait=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
$overrides
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    log "wrote $CONF (nodes ${NODES:-$NODE}: CPUs=$cpus RealMemory=${mem}M each)"
}

# Start a daemon in the foreground flags of its own, detached, and record its pid.
spawn() {
    local name=$1
    shift
    setsid "$@" </dev/null >>"$DIR/$name.out" 2>&1 &
    echo $! >"$DIR/$name.ourpid"
    log "started $name (pid $!)"
}

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n </dev/null | unmunge >/dev/null 2>&1; then
        log "munged already running (not ours; left alone on stop)"
        return
    fi
    [ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || create-munge-key; }
    install -d -o munge -g munge -m 0755 /run/munge
    chown munge:munge /etc/munge/munge.key
    # setpriv execs munged itself, so the recorded pid is munged's.
    spawn munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.2
    done
    log "munged did not come up"
    exit 1
}

start() {
    [ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
    if [ -f "$DIR/slurmctld.ourpid" ] && pid_alive "$(cat "$DIR/slurmctld.ourpid")"; then
        log "already running (state in $DIR)"
        return 0
    fi
    ensure_packages
    if [ -f "$CONF" ] && timeout 10 "${CLIENT[@]}" scontrol ping 2>/dev/null | grep -q "is UP"; then
        log "a SLURM controller already answers for $CONF; stop that cluster first"
        exit 1
    fi
    mkdir -p "$DIR"
    write_conf
    start_munge
    spawn slurmctld "${CLIENT[@]}" /usr/sbin/slurmctld -D -c -f "$CONF"
    local want=1
    if [ -n "$NODES" ]; then
        for e in $NODES; do
            IFS=: read -r name _ ns <<<"$e"
            # nsenter execs the daemon, so the recorded pid is slurmd's.
            mkdir -p "$DIR/spool-$name"
            spawn "slurmd-$name" nsenter "--net=/run/netns/$ns" /usr/sbin/slurmd -D -N "$name" -f "$CONF"
        done
        want=$(wc -w <<<"$NODES")
    else
        mkdir -p "$DIR/spool-$NODE"
        spawn "slurmd-$NODE" /usr/sbin/slurmd -D -f "$CONF"
    fi
    # Bounded wait for every node to come up idle.
    for _ in $(seq 120); do
        idle=$("${CLIENT[@]}" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
        if [ "$idle" -ge "$want" ]; then
            log "$want node(s) idle; cluster ready"
            return 0
        fi
        sleep 0.5
    done
    state=$("${CLIENT[@]}" sinfo -h -N -o "%N:%T" 2>/dev/null | tr '\n' ' ' || true)
    log "node did not become idle (state: ${state:-none}); logs in $DIR"
    tail -n 20 "$DIR"/*.log "$DIR"/*.out >&2 || true
    stop
    exit 1
}

stop_pid() {
    local name=$1 f="$DIR/$1.ourpid" pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if pid_alive "$pid"; then
        kill -TERM "$pid"
        for _ in $(seq 50); do pid_alive "$pid" || break; sleep 0.2; done
        pid_alive "$pid" && kill -KILL "$pid"
        log "stopped $name (pid $pid)"
    fi
    rm -f "$f"
}

stop() {
    if [ -f "$DIR/slurmctld.ourpid" ] && pid_alive "$(cat "$DIR/slurmctld.ourpid")"; then
        # Cancel this cluster's jobs (all of them: the cluster is ours), bounded wait.
        jobs=$("${CLIENT[@]}" squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            "${CLIENT[@]}" scancel $jobs 2>/dev/null || true
            for _ in $(seq 30); do
                [ -z "$("${CLIENT[@]}" squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
                sleep 0.5
            done
        fi
    fi
    for f in "$DIR"/slurmd-*.ourpid; do
        [ -e "$f" ] && stop_pid "$(basename "$f" .ourpid)"
    done
    stop_pid slurmctld
    stop_pid munged
    # Job step daemons of our slurmd detach from it; end those still running by pid.
    for pid in $(pgrep -x slurmstepd || true); do
        kill -TERM "$pid" 2>/dev/null && log "stopped leftover slurmstepd (pid $pid)"
    done
    if is_ours_conf; then rm -f "$CONF"; fi
}

status() {
    for f in "$DIR"/*.ourpid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        if pid_alive "$pid"; then s=running; else s=dead; fi
        echo "$(basename "$f" .ourpid): pid $pid $s"
    done
    "${CLIENT[@]}" sinfo 2>/dev/null || true
    "${CLIENT[@]}" squeue 2>/dev/null || true
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
