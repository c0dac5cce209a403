# shellcheck shell=bash
# The one rule for a folder that scripts/slurm_cluster.sh and containers/build.sh (both
# run as root) keep their files in. Sourced, not run:
#
#   dir=$(private_dir PATH [MODE] [WHAT]) || exit 1
#
# PATH is usable when nobody but the current user can change it or anything in it:
#   - its parent exists; every folder from the parent up to / (symbolic links resolved)
#     is owned by root or the current uid and is not writable by group or others unless
#     it is sticky (as /tmp and /var/tmp are: there nobody may rename another's entry);
#   - PATH itself is a real directory (not a symbolic link), owned by the current uid,
#     not writable by group or others.
# With MODE (e.g. 0755) a missing PATH is created first, with that mode, by a plain
# mkdir of its last component (no parents: mkdir -p would follow symbolic links someone
# else planted in them). On success it prints PATH with its parent's symbolic links
# resolved, the path to use from then on; otherwise it prints nothing, names PATH and the
# problem on stderr, and returns 1. WHAT names the folder in that message.
private_dir() {
    local path=$1 mode=${2:-} what=${3:-folder} uid parent name dir owner perm problem=""
    uid=$(id -u)
    [[ $path == /* ]] || path=$PWD/$path
    while [[ $path == */ && $path != / ]]; do path=${path%/}; done
    name=${path##*/}
    parent=$(realpath -m -- "${path%/*}/")
    if [ -z "$name" ] || [ "$name" = . ] || [ "$name" = .. ]; then
        problem="does not name a folder"
    elif [ ! -d "$parent" ]; then
        problem="has no parent folder $parent (create it first)"
    fi
    dir=$parent
    while [ -z "$problem" ]; do
        read -r owner perm < <(stat -c '%u %a' -- "$dir")
        if [ "$owner" != 0 ] && [ "$owner" != "$uid" ]; then
            problem="lies in $dir, which is owned by uid $owner (only root or uid $uid may own it)"
        elif ((8#$perm & 8#022)) && ! ((8#$perm & 8#1000)); then
            problem="lies in $dir, which is writable by group or others (mode $perm) and not sticky"
        fi
        [ "$dir" = / ] && break
        dir=$(dirname -- "$dir")
    done
    local target=${parent%/}/$name
    if [ -z "$problem" ] && [ -n "$mode" ] && [ ! -e "$target" ] && [ ! -L "$target" ]; then
        mkdir -m "$mode" -- "$target" 2>/dev/null || problem="could not be created"
    fi
    if [ -n "$problem" ]; then
        :
    elif [ -L "$target" ]; then
        problem="is a symbolic link (to $(readlink -- "$target"))"
    elif [ ! -e "$target" ]; then
        problem="does not exist"
    elif [ ! -d "$target" ]; then
        problem="is not a directory"
    else
        read -r owner perm < <(stat -c '%u %a' -- "$target")
        if [ "$owner" != "$uid" ]; then
            problem="is owned by uid $owner, not by uid $uid (the user running this)"
        elif ((8#$perm & 8#022)); then
            problem="is writable by group or others (mode $perm)"
        fi
    fi
    if [ -n "$problem" ]; then
        echo "refusing $what $1: it $problem" >&2
        return 1
    fi
    echo "$target"
}
