#!/bin/sh
# A second "host" on this machine for the SSH tests: its own network namespace (its own
# address on a veth pair, its own loopback), its own mount view, and OpenSSH's sshd in it.
# Run as root. Traffic goes only between this machine's own namespaces.
#
#   scripts/netns_host.sh up NAME DIR SUBNET REMOTE_ONLY SOURCE...
#       NAME         namespace name (also the veth names NAMEa / NAMEb, <= 13 characters)
#       DIR          keys, sshd_config and sshd's files (created)
#       SUBNET       e.g. 10.213.7: this side gets .1, the namespace .2 (a /30)
#       REMOTE_ONLY  a directory (created empty here) on which the namespace mounts a private
#                    tmpfs; each SOURCE (a file) is bind-mounted there as REMOTE_ONLY/<its
#                    name>, so that path exists on the remote only
#     Prints "address=…", "port=22", "key=…" and then *becomes* sshd (exec), so the caller
#     owns sshd's process and its log (stderr). Stopping it: `down`.
#   scripts/netns_host.sh down NAME
#       Kills every process in the namespace, deletes it and its veth pair. Idempotent: also
#       what `up` does first, so a run that crashed leaves nothing that breaks the next.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

down() {
  name=$1
  if ip netns list | awk '{print $1}' | grep -qx "$name"; then
    for p in $(ip netns pids "$name" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    i=0; while [ -n "$(ip netns pids "$name" 2>/dev/null)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
    ip netns del "$name" 2>/dev/null || true
  fi
  ip link del "${name}a" 2>/dev/null || true
}

case "${1:-}" in
down) down "${2:?usage: netns_host.sh down NAME}" ;;
up)
  name=${2:?NAME}; dir=${3:?DIR}; subnet=${4:?SUBNET}; only=${5:?REMOTE_ONLY}; shift 5
  [ $# -ge 1 ] || { echo "netns_host.sh up: give at least one SOURCE file" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "netns_host.sh: needs root (ip netns, mount)" >&2; exit 2; }
  down "$name"
  ip netns add "$name"
  ip link add "${name}a" type veth peer name "${name}b"
  ip link set "${name}b" netns "$name"
  ip addr add "$subnet.1/30" dev "${name}a"
  ip link set "${name}a" up
  ip netns exec "$name" ip addr add "$subnet.2/30" dev "${name}b"
  ip netns exec "$name" ip link set "${name}b" up
  ip netns exec "$name" ip link set lo up
  mkdir -p "$only" "$dir"
  export LISTEN="$subnet.2" PORT=22
  echo "address=$subnet.2"
  # ip netns exec gives the command a mount namespace of its own; unshare -m makes sure, with
  # private propagation, that the tmpfs and the bind mount are seen by this tree only
  exec ip netns exec "$name" unshare -m --propagation private sh -c '
    only=$1; here=$2; dir=$3; shift 3
    mount -t tmpfs -o size=1m,mode=755 bakeoff-remote "$only" || exit 1
    for src in "$@"; do
      dst="$only/$(basename "$src")"
      touch "$dst" && mount --bind -o ro "$src" "$dst" || exit 1
    done
    exec sh "$here/ci_sshd.sh" "$dir"' netns-host "$only" "$here" "$dir" "$@"
  ;;
*) echo "usage: netns_host.sh up NAME DIR SUBNET REMOTE_ONLY SOURCE | down NAME" >&2; exit 2 ;;
esac
