#!/bin/sh
# Install the Debian packages the tests drive for real, only those missing (a second run is
# instant). `make test` runs this first; so does nothing else (.ci/run only calls `make test`).
#
#   openssh-server, openssh-client  sshd/ssh/ssh-keygen: the SSH host, against a second "host"
#   iproute2                        ip netns / veth: that second host's own network
#   util-linux                      unshare/setsid/fallocate/mount: its own mount view, detached servers
#   chromium                        the HTML report's screenshot tests
#
# As root: apt-get update + apt-get install -y of what is missing. Not root and something is
# missing: one line naming the exact command to run, exit 1. Never a silent skip.
set -eu
missing=""
need() {  # need PROGRAM PACKAGE: PACKAGE is missing when PROGRAM is not found
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$1" ] && [ ! -x "/sbin/$1" ]; then
    case " $missing " in *" $2 "*) ;; *) missing="$missing $2" ;; esac
  fi
}
need sshd openssh-server
need ssh openssh-client
need ssh-keygen openssh-client
need ip iproute2
need unshare util-linux
need setsid util-linux
need fallocate util-linux
need mount mount
need chromium chromium
missing=${missing# }
[ -z "$missing" ] && exit 0
cmd="apt-get update && apt-get install -y $missing"
if [ "$(id -u)" != 0 ]; then
  echo "make test: missing system packages ($missing); run as root: $cmd" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make test: missing system packages ($missing) and no apt-get here; install their equivalents" >&2
  exit 1
fi
echo "make test: installing system packages: $missing"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
