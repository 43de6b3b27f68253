#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Unmount the workspace and stop the agentd that deploy/local/up.sh started
# (SIGTERM: it drains calls).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
state=${WSB_BUILD:-$top/build}/local
if [[ -f $state/mnt ]]; then
	mnt=$(cat "$state/mnt")
	# The mount table, not the directory: a mount whose wsfs died fails
	# every access (ENOTCONN).
	if findmnt -rn -M "$mnt" >/dev/null; then
		fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt"
		echo "==> unmounted $mnt"
	fi
	rm -f "$state/mnt"
fi
[[ -f $state/agentd.pid ]] || { echo "no agentd started by up.sh" >&2; exit 0; }
pid=$(cat "$state/agentd.pid")
if kill -0 "$pid" 2>/dev/null; then
	kill -TERM "$pid"
	for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		echo "agentd (pid $pid) did not stop in 15 s; killing it" >&2
		kill -KILL "$pid"
	fi
fi
rm -f "$state/agentd.pid"
echo "==> agentd stopped"
