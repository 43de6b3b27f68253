#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The local path, in one step: install the Debian 12 packages wsbridge needs,
# build it with meson into build/, start agentd on a small sample workspace
# (./workspace, created if missing) on 127.0.0.1:9000 in the background, and
# mount it with wsfs on ./mnt. Prints how to use it; deploy/local/down.sh
# unmounts and stops it.
#
# Environment: WSB_WORKSPACE (default ./workspace), WSB_MOUNT (default ./mnt),
# WSB_LISTEN (default 127.0.0.1:9000), WSB_BUILD (default ./build),
# WSB_SKIP_INSTALL=1 to skip apt.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
build=${WSB_BUILD:-$top/build}
workspace=${WSB_WORKSPACE:-$top/workspace}
listen=${WSB_LISTEN:-127.0.0.1:9000}
mnt=${WSB_MOUNT:-$top/mnt}
state=$build/local
packages=(build-essential meson ninja-build pkg-config
	libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev
	libfuse3-dev fuse3 libcmocka-dev bats
	python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc
	socat git vim-tiny python3-yaml python3-jsonschema shellcheck runsc strace)

say() { printf '==> %s\n' "$*"; }

if [[ ${WSB_SKIP_INSTALL:-0} != 1 ]]; then
	missing=()
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if ((${#missing[@]})); then
		say "installing ${missing[*]}"
		sudo=()
		[[ $(id -u) -eq 0 ]] || sudo=(sudo)
		"${sudo[@]}" apt-get update -qq
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
fi

say "building into $build"
[[ -f $build/build.ninja ]] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null

if [[ ! -d $workspace ]]; then
	say "creating a sample workspace in $workspace"
	mkdir -p "$workspace/hello"
	cat >"$workspace/hello/hello.c" <<'C'
#include <stdio.h>

int main(void)
{
	puts("hello from the workspace");
	return 0;
}
C
	printf 'cc -o hello hello.c\n./hello\n' >"$workspace/hello/commands.txt"
fi

mkdir -p "$state"
if [[ -f $state/agentd.pid ]] && kill -0 "$(cat "$state/agentd.pid")" 2>/dev/null; then
	say "agentd already running (pid $(cat "$state/agentd.pid")); restarting"
	"$top/deploy/local/down.sh"
fi
wsctl=("$build/fusefs/wsctl" -a "$listen")
# Another agentd on the address would answer the health check below for
# this one, which fails to listen (address in use), and get mounted.
if "${wsctl[@]}" health >/dev/null 2>&1; then
	echo "up.sh: something already serves $listen (another agentd?): stop it, or pick" \
		"another address: WSB_LISTEN=127.0.0.1:PORT $0" >&2
	exit 1
fi
say "starting agentd on $listen serving $workspace"
# All of agentd's output to its log: a pipe on up.sh's stdout (up.sh | tee)
# must end when up.sh does.
"$build/agentd/agentd" --root "$workspace" --listen "$listen" </dev/null >"$state/agentd.log" 2>&1 &
echo $! >"$state/agentd.pid"

for _ in $(seq 50); do
	kill -0 "$(cat "$state/agentd.pid")" 2>/dev/null || {
		cat "$state/agentd.log" >&2
		rm -f "$state/agentd.pid"
		exit 1
	}
	"${wsctl[@]}" health >/dev/null 2>&1 && break
	sleep 0.1
done
"${wsctl[@]}" health

say "mounting it on $mnt"
# A mount left there, also one whose wsfs died (any access to it fails
# with ENOTCONN, so ask the mount table, not the directory).
if findmnt -rn -M "$mnt" >/dev/null; then
	fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt"
fi
mkdir -p "$mnt"
"$build/fusefs/wsfs" "$listen" "$mnt"
echo "$mnt" >"$state/mnt"
say "the workspace through the mount:"
ls -l "$mnt/hello"
say "a command run in the workspace writes a file; the mount sees it:"
"${wsctl[@]}" exec --cwd hello -- sh -c 'cc -o hello hello.c && ./hello > out.txt'
cat "$mnt/hello/out.txt"

cat <<EOT

agentd is running (pid $(cat "$state/agentd.pid"), log $state/agentd.log),
and its workspace is mounted on $mnt. Try:
  cd $mnt && ls -la && git init demo          # any tool works on the mount
  export WSBRIDGE_ADDR=$listen PATH=$build/fusefs:\$PATH
  wsctl exec -- ls -la      wsctl cat hello/hello.c      wsctl put FILE dst
Stop it with: deploy/local/down.sh
EOT
