#!/bin/sh
# Start a throwaway OpenSSH server for the SSH-host tests (run as root).
#
#   scripts/ci_sshd.sh DIR                      # on 127.0.0.1, a free port
#   LISTEN=10.213.7.2 PORT=22 scripts/ci_sshd.sh DIR   # e.g. inside a network namespace
#
# DIR is created if missing and holds every file. Generates a host key and a client key in DIR,
# authorizes the client key for the current user, picks a free port (unless PORT is given),
# prints two lines on stdout and then *becomes* sshd (exec, -D -e), so
# the caller that started this script owns sshd's process and its log (stderr):
#
#   port=<port>
#   key=<DIR>/client_key
#
# Installs nothing: needs the Debian packages openssh-server and openssh-client.
set -eu

dir=${1:?usage: ci_sshd.sh DIR}
sshd=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$sshd" ] || { echo "ci_sshd.sh: sshd not found (apt-get install -y openssh-server)" >&2; exit 2; }
command -v ssh-keygen >/dev/null || { echo "ci_sshd.sh: ssh-keygen not found (apt-get install -y openssh-client)" >&2; exit 2; }

mkdir -p "$dir" /run/sshd
chmod 700 "$dir"
dir=$(cd "$dir" && pwd)
[ -f "$dir/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
[ -f "$dir/client_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
cp "$dir/client_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"

listen=${LISTEN:-127.0.0.1}
port=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
cat > "$dir/sshd_config" <<EOF
ListenAddress $listen
Port $port
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxStartups 50:30:100
MaxSessions 50
AllowTcpForwarding yes
LogLevel INFO
EOF

echo "port=$port"
echo "key=$dir/client_key"
exec "$sshd" -D -e -f "$dir/sshd_config"
