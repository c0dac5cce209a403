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
# /var/lib/ddpbench-slurm, created mode 0755: jobs of other users must reach the spool
# in it; slurmctld's state/ in it is 0700), except /etc/slurm/slurm.conf (the client
# commands srun, sbatch, squeue read it from there on every node; the jobstep executor of
# the Snakemake plugin drops SLURM_CONF from the environment), which carries a marker
# line, is only ever overwritten when it carries that marker, and is removed again by
# `stop` when the marker names this state folder.
#
# Runs as root, so it trusts nothing that someone else could have put in its way:
# - the state folder must be a real directory owned by the user running this and not
#   writable by anyone else, in folders only root or that user can change
#   (scripts/private_dir.sh); anything else is refused with the path and the problem;
# - files it writes there and /etc/slurm/slurm.conf are refused when they are symbolic
#   links; pid and config files are written to a fresh temporary file and renamed;
# - a pid file counts only when it holds one positive decimal pid that is alive and is
#   the daemon the file is for (/proc/PID/comm munged, slurmctld, slurmd; SLURM's
#   daemons with -f /etc/slurm/slurm.conf on their command line); else nothing is killed;
# - `stop` cancels jobs only on the controller it started (its live, verified slurmctld,
#   with the config naming this state folder), and ends only the slurmstepd processes
#   of its own slurmd (those holding its log file in the state folder open), never all
#   of the machine's.
#
# The node is this host (hostname -s) at 127.0.0.1 with its real CPU count and memory
# (slurmd -C); set DDPBENCH_SLURM_CPUS to declare more CPUs than the hardware has
# (SlurmdParameters=config_overrides), e.g. to schedule a world-size-3 cell on 2 cores.
#
# Several nodes on one machine: DDPBENCH_SLURM_NODES="n0:198.18.0.1:NETNS0 n1:198.18.0.2:NETNS1"
# (name:address:network namespace, e.g. ddpbench.cluster.netlab's two namespaces) runs slurmctld
# and slurmd -N n0 in the first namespace and slurmd -N n1 in the second; each node
# declares all CPUs and 1/N of the memory. Client commands must then run in the first
# namespace (`nsenter --net=/run/netns/NETNS0 sbatch ...`); this script does so itself.
# Plugins: select/cons_tres (CPUs and memory consumable), proctrack/linuxproc,
# task/none, no accounting (MinJobAge=600 so `squeue` still reports finished jobs:
# the Snakemake plugin runs with slurm-status-command: squeue).
set -euo pipefail
# shellcheck source=scripts/private_dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/private_dir.sh"

DIR=${DDPBENCH_SLURM_DIR:-/var/lib/ddpbench-slurm}
CONF=/etc/slurm/slurm.conf
MARKER="# written by ddpbench scripts/slurm_cluster.sh"
PARTITION=debug
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
die() { log "$*"; exit 1; }

# The config's first line: the marker and the state folder it belongs to.
conf_head() { echo "$MARKER (state in $DIR); removed by 'stop'"; }
# Written by this script (for any state folder): the only config it may overwrite.
is_ours_conf() { [ -f "$CONF" ] && [ ! -L "$CONF" ] && head -n1 "$CONF" | grep -qF "$MARKER"; }
# Written by this script for this state folder: the cluster `stop` may take down.
is_this_conf() { [ -f "$CONF" ] && [ ! -L "$CONF" ] && [ "$(head -n1 "$CONF")" = "$(conf_head)" ]; }

# SLURM's client commands, on this cluster's config whatever SLURM_CONF says.
client() { env SLURM_CONF="$CONF" "${CLIENT[@]}" "$@"; }

# Refuse to write through a symbolic link (the state folder is ours, but be explicit).
no_link() { if [ -L "$1" ]; then die "$1 is a symbolic link; refusing to write through it"; fi; }

# Replace file $1 by content $2 (mode $3, default 0644): a fresh file renamed into place.
write_file() {
    local f=$1 tmp
    no_link "$f"
    tmp=$(mktemp "$f.XXXXXX")
    printf '%s\n' "$2" >"$tmp"
    chmod "${3:-0644}" "$tmp"
    mv -fT -- "$tmp" "$f"
}

# A folder under the state folder (mode $2), never a symbolic link.
subdir() {
    no_link "$1"
    [ -e "$1" ] || mkdir -m "$2" -- "$1"
    [ -d "$1" ] || die "$1 is not a directory"
    chmod "$2" -- "$1"
}

# Whether pid $1 is a live process (a zombie has exited: its parent has yet to reap it).
pid_alive() {
    local stat
    [[ ${1:-} =~ ^[1-9][0-9]*$ ]] && stat=$(cat "/proc/$1/stat" 2>/dev/null) && [[ ${stat##*) } != Z* ]]
}

# Whether process $1 is daemon $2 as this script starts it: /proc/PID/comm is $2 and,
# for SLURM's daemons, its command line has `-f $CONF`.
is_daemon() {
    local pid=$1 want=$2 comm prev="" arg
    pid_alive "$pid" && comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$want" ] || return 1
    [ "$want" = munged ] && return 0
    while IFS= read -r -d '' arg; do
        [ "$prev" = -f ] && [ "$arg" = "$CONF" ] && return 0
        prev=$arg
    done 2>/dev/null <"/proc/$pid/cmdline"
    return 1
}

# our_pid NAME: whether $DIR/NAME.ourpid names a live daemon this script started.
# Sets PID to it (empty when not) and WHY to the reason it does not (empty when the
# file is missing or the daemon has exited: nothing to report).
our_pid() {
    local name=$1 f="$DIR/$1.ourpid" daemon=$1 content
    PID="" WHY=""
    [ "${daemon#slurmd-}" != "$daemon" ] && daemon=slurmd
    if [ -L "$f" ]; then WHY="$f is a symbolic link"; return 1; fi
    [ -f "$f" ] || return 1
    content=$(head -c 32 -- "$f")
    if ! [[ $content =~ ^[1-9][0-9]{0,9}$ ]]; then
        WHY="$f holds '${content//[^[:print:]]/?}', not a process id"
        return 1
    fi
    pid_alive "$content" || return 1
    if ! is_daemon "$content" "$daemon"; then
        local comm
        comm=$(cat "/proc/$content/comm" 2>/dev/null || echo gone)
        if [ "$comm" = "$daemon" ]; then
            WHY="pid $content in $f is a $daemon this script did not start (not run with -f $CONF)"
        else
            WHY="pid $content in $f is $comm, not the $daemon this script started"
        fi
        return 1
    fi
    PID=$content
}

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
    if [ -L "$CONF" ]; then
        die "$CONF is a symbolic link; refusing to touch it"
    fi
    if [ -e "$CONF" ] && ! is_ours_conf; then
        die "$CONF exists and was not written by this script; refusing to touch it"
    fi
    mkdir -p "$(dirname "$CONF")"
    subdir "$DIR/state" 0700
    local ctld="$NODE(127.0.0.1)" node_lines="NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    if [ -n "$NODES" ]; then
        local entries e
        read -r -a entries <<<"$NODES"
        mem=$((mem / ${#entries[@]}))
        node_lines=""
        for e in "${entries[@]}"; do
            IFS=: read -r name addr _ <<<"$e"
            node_lines+="NodeName=$name NodeAddr=$addr CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
        done
        IFS=: read -r _ addr _ <<<"${entries[0]}"
        ctld="$NODE($addr)"
    fi
    write_file "$CONF" "$(cat <<EOF
$(conf_head)
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
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)"
    log "wrote $CONF (nodes ${NODES:-$NODE}: CPUs=$cpus RealMemory=${mem}M each)"
}

# Start a daemon in the foreground flags of its own, detached, and record its pid.
spawn() {
    local name=$1
    shift
    no_link "$DIR/$name.out"
    setsid "$@" </dev/null >>"$DIR/$name.out" 2>&1 &
    write_file "$DIR/$name.ourpid" "$!"
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
    die "munged did not come up"
}

start() {
    if our_pid slurmctld; then
        log "already running (state in $DIR)"
        return 0
    fi
    ensure_packages
    if [ -f "$CONF" ] && timeout 10 env SLURM_CONF="$CONF" "${CLIENT[@]}" scontrol ping 2>/dev/null | grep -q "is UP"; then
        die "a SLURM controller already answers for $CONF; stop that cluster first"
    fi
    write_conf
    start_munge
    spawn slurmctld "${CLIENT[@]}" /usr/sbin/slurmctld -D -c -f "$CONF"
    local want=1
    if [ -n "$NODES" ]; then
        for e in $NODES; do
            IFS=: read -r name _ ns <<<"$e"
            # nsenter execs the daemon, so the recorded pid is slurmd's.
            subdir "$DIR/spool-$name" 0755
            spawn "slurmd-$name" nsenter "--net=/run/netns/$ns" /usr/sbin/slurmd -D -N "$name" -f "$CONF"
        done
        want=$(wc -w <<<"$NODES")
    else
        subdir "$DIR/spool-$NODE" 0755
        spawn "slurmd-$NODE" /usr/sbin/slurmd -D -f "$CONF"
    fi
    # Bounded wait for every node to come up idle.
    for _ in $(seq 120); do
        idle=$(client sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
        if [ "$idle" -ge "$want" ]; then
            log "$want node(s) idle; cluster ready"
            return 0
        fi
        sleep 0.5
    done
    state=$(client sinfo -h -N -o "%N:%T" 2>/dev/null | tr '\n' ' ' || true)
    log "node did not become idle (state: ${state:-none}); logs in $DIR"
    tail -n 20 "$DIR"/*.log "$DIR"/*.out >&2 || true
    stop
    exit 1
}

# Stop the daemon $DIR/$1.ourpid names, if it is one this script started; else kill nothing.
stop_pid() {
    local name=$1 f="$DIR/$1.ourpid" daemon=$1 pid
    [ "${daemon#slurmd-}" != "$daemon" ] && daemon=slurmd
    if our_pid "$name"; then
        pid=$PID
        kill -TERM "$pid"
        # Bounded wait until it is gone: exited, and reaped by its parent (init).
        for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
        if is_daemon "$pid" "$daemon"; then kill -KILL "$pid"; fi
        log "stopped $name (pid $pid)"
    elif [ -n "$WHY" ]; then
        log "$WHY; killed nothing"
    fi
    rm -f -- "$f"
}

# Cancel the jobs of the controller this script started, only that one: the config
# must be this state folder's and the recorded slurmctld alive and ours.
cancel_jobs() {
    if ! our_pid slurmctld; then
        [ -z "$WHY" ] || log "$WHY; no jobs cancelled"
        return 0
    fi
    if ! is_this_conf; then
        log "$CONF is not the config of the cluster in $DIR; no jobs cancelled"
        return 0
    fi
    local jobs
    jobs=$(client squeue -h -p "$PARTITION" -o %i 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    # shellcheck disable=SC2086
    client scancel $jobs 2>/dev/null || true
    for _ in $(seq 30); do
        [ -z "$(client squeue -h -p "$PARTITION" -t running,completing -o %i 2>/dev/null)" ] && break
        sleep 0.5
    done
}

# Job step daemons of our slurmd detach from it (their parent becomes init) and clear
# their environment, but keep our slurmd's log file open: that tells them from every
# other slurmstepd on the machine.
our_stepds() {
    local p fd
    for p in /proc/[0-9]*; do
        [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
        for fd in "$p"/fd/*; do
            case $(readlink "$fd" 2>/dev/null) in
                "$DIR"/slurmd-*.log*) echo "${p#/proc/}"; break ;;
            esac
        done
    done
}

stop() {
    # Judged before anything is stopped: a config whose controller this very stop ends is not orphaned.
    local orphaned=0
    if is_ours_conf && ! conf_served; then orphaned=1; fi
    cancel_jobs
    for f in "$DIR"/slurmd-*.ourpid; do
        if [ -e "$f" ] || [ -L "$f" ]; then stop_pid "$(basename "$f" .ourpid)"; fi
    done
    stop_pid slurmctld
    stop_pid munged
    # End the step daemons of our slurmd still running (jobs that ignored the cancel).
    for pid in $(our_stepds); do
        kill -TERM "$pid" 2>/dev/null && log "stopped leftover slurmstepd (pid $pid)"
    done
    if is_this_conf; then
        rm -f -- "$CONF"
    elif [ "$orphaned" = 1 ]; then
        remove_orphaned_conf
    elif is_ours_conf; then
        log "$CONF belongs to the cluster whose state is elsewhere ($(head -n1 "$CONF")); left alone"
    fi
}

# Whether a controller reading $CONF runs (clients can reach what the config names).
conf_served() { pgrep -f -- "slurmctld .*-f $CONF" >/dev/null; }

# A config of ours that no running controller reads (its cluster's state folder gone, a test
# killed before its stop) would send every client to an address nobody serves: a bare
# `squeue` in the root namespace hung on a two-namespace cluster's 198.18.0.1. Remove it.
remove_orphaned_conf() {
    is_ours_conf || return 0
    if conf_served; then
        log "$CONF belongs to the running cluster whose state is elsewhere ($(head -n1 "$CONF")); left alone"
    else
        local head
        head=$(head -n1 "$CONF")
        rm -f -- "$CONF"
        log "removed $CONF: no controller of it runs (${head#"$MARKER" })"
    fi
}

status() {
    local f name s
    for f in "$DIR"/*.ourpid; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        name=$(basename "$f" .ourpid)
        if our_pid "$name"; then s="pid $PID running"
        elif [ -n "$WHY" ]; then s="not ours: $WHY"
        else s="dead"; fi
        echo "$name: $s"
    done
    client sinfo 2>/dev/null || true
    client squeue 2>/dev/null || true
}

main() {
    local cmd=${1:-}
    case "$cmd" in
        start | stop | status) ;;
        *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
    esac
    if [ "$cmd" = start ]; then
        [ "$(id -u)" = 0 ] || die "needs root"
        DIR=$(private_dir "$DIR" 0755 "state folder (DDPBENCH_SLURM_DIR)") || exit 1
    elif [ -e "$DIR" ] || [ -L "$DIR" ]; then
        DIR=$(private_dir "$DIR" "" "state folder (DDPBENCH_SLURM_DIR)") || exit 1
    else
        log "no state folder $DIR: nothing of this script's to $cmd there"
        if [ "$cmd" = stop ]; then remove_orphaned_conf; fi
        [ "$cmd" = status ] && status
        return 0
    fi
    "$cmd"
}

# Run when executed; when sourced (tests), only define the functions above.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
