#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsbridge.v1.Workspace and Exec through grpcio: errno names in the
# "wsbridge-errno" trailer, status codes, and the calls' POSIX behaviour
# (tests/python/test_workspace.py).

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
}

teardown() {
	wsb_teardown
}

@test "Workspace and Exec over TCP: errno trailers and behaviour (grpcio)" {
	agentd_tcp
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_workspace.py
}

@test "unread replies: agentd holds at most --max-reply-bytes of them; past it a large reply is refused, a small one goes" {
	local rss=1
	# ASan's quarantine keeps freed memory: no RSS to compare there.
	if wsb_sanitized; then rss=; fi
	agentd_tcp --max-reply-bytes $((8 << 20)) --log-level debug
	mount_wsfs
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT WSB_MAX_REPLY=$((8 << 20)) WSB_AGENTD_PID=$AGENTD_PID \
		WSB_CHECK_RSS=$rss WSB_MNT=$MNT run_py test_workspace.py ReplyBudget
	umount_wsfs
	# The log's line for each call says how it ended: a refused Read
	# RESOURCE_EXHAUSTED (it said OK, then that the reply was refused).
	grep -q 'Workspace/Read: RESOURCE_EXHAUSTED: agentd holds' "$AGENTD_ERR" ||
		{ grep 'Workspace/Read' "$AGENTD_ERR" | tail -5 >&3; false; }
}

@test "handles of no session take half of --max-handles at most, and the refusal says so (grpcio)" {
	agentd_unix --max-handles 8
	WSB_MAX_HANDLES=8 WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_workspace.py Handles
}

@test "Workspace over a unix socket: the same errno trailers (grpcio)" {
	agentd_unix
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_workspace.py Errors
}
