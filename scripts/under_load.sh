#!/usr/bin/env bash
# Run a command while competing processes keep the machine busy, as on a shared login node or a
# workstation with a neighbour: one busy loop per usable core at normal priority, and with
# --memory a memory-bandwidth hog (copies of a 256 MiB buffer) as well. The hogs stop when the
# command ends, is interrupted or fails; the command's exit status is this script's.
#   bash scripts/under_load.sh [--cores N] [--memory] -- bash scripts/test.sh -m faults
#   bash scripts/under_load.sh -- pytest tests/integration -x
set -euo pipefail
cores=$(nproc)
memory=0
while [ $# -gt 0 ]; do
    case "$1" in
        --cores) cores="$2"; shift 2 ;;
        --memory) memory=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--cores N] [--memory] -- COMMAND..." >&2; exit 2; }
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT
trap 'stop_hogs; exit 143' TERM
for _ in $(seq "$cores"); do
    python3 -c 'while True: pass' &
    hogs+=($!)
done
if [ "$memory" = 1 ]; then
    python3 -c '
import array
a = array.array("d", bytes(256 * 2**20))
while True:
    b = a[:]  # one 256 MiB copy: memory bandwidth, not cache
' &
    hogs+=($!)
fi
echo "== under load: $cores busy loop(s)$([ "$memory" = 1 ] && echo ' and a memory-bandwidth hog') while: $*" >&2
status=0
"$@" || status=$?
exit "$status"
