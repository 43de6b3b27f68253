#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# agentd --stdio: one gRPC connection over stdin/stdout, as under
# `kubectl exec -i POD -- agentd --stdio`. Reached from Python through socat
# (one agentd per connection) and from wsctl --exec. Nothing but the
# transport may ever appear on stdout.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
}

teardown() {
	wsb_teardown
}

# socat_agentd [AGENTD-ARGS...]: a unix socket $SOCK where every connection
# gets its own `agentd --root $ROOT --stdio ARGS`. agentd's stderr is socat's.
socat_agentd() {
	local cmd="$AGENTD --root $ROOT --stdio"
	[ $# -eq 0 ] || cmd+=" $*"
	SOCK="$BATS_TEST_TMPDIR/tunnel.sock"
	bg socat socat "UNIX-LISTEN:$SOCK,fork" "EXEC:$cmd"
	SOCAT_PID=$BG_PID
	wait_listen "unix:$SOCK" "$SOCAT_PID" 10
}

# True when $1 consists only of whole HTTP/2 frames (RFC 9113 §4.1).
only_http2_frames() {
	"$PY" - "$1" <<-'EOF'
	import sys
	data = open(sys.argv[1], "rb").read()
	pos = 0
	while pos < len(data):
	    if len(data) - pos < 9:
	        sys.exit("%d stray bytes at offset %d: %r" % (len(data) - pos, pos, data[pos:pos + 64]))
	    length = int.from_bytes(data[pos:pos + 3], "big")
	    ftype = data[pos + 3]
	    if ftype > 9 or length > 16384:
	        sys.exit("not an HTTP/2 frame at offset %d: %r" % (pos, data[pos:pos + 64]))
	    pos += 9 + length
	if pos != len(data):
	    sys.exit("truncated frame at the end")
	EOF
}

@test "--stdio with stdin at EOF exits 0 and writes nothing but HTTP/2 frames" {
	local st=0
	timeout 10 "$AGENTD" --root "$ROOT" --stdio --log-level debug </dev/null \
		>"$BATS_TEST_TMPDIR/stdout" 2>"$BATS_TEST_TMPDIR/stderr" || st=$?
	# shellcheck disable=SC2030 # bats @test is not a subshell; teardown reads WSB_LOGS
	WSB_LOGS+=("$BATS_TEST_TMPDIR/stderr")
	assert_eq "$st" 0 "exit status"
	run only_http2_frames "$BATS_TEST_TMPDIR/stdout"
	assert_status 0
}

@test "--stdio serves a client over a socat tunnel; debug logs stay off stdout (grpcio)" {
	socat_agentd --log-level debug
	WSB_TARGET="unix:$SOCK" WSB_ROOT=$ROOT run_py test_server.py
	run "$PY" "$PYTESTS/wsbcall.py" health "unix:$SOCK"
	assert_status 0
	assert_eq "$output" "SERVING"
	# agentd logged (to stderr, which is socat's) while serving.
	run grep -c '^agentd: ' "$BATS_TEST_TMPDIR/socat.err"
	[ "$output" -ge 1 ] || { cat "$BATS_TEST_TMPDIR/socat.err" >&3; false; }
}

@test "--stdio: each tunnel's agentd exits when its client goes" {
	socat_agentd
	run "$PY" "$PYTESTS/wsbcall.py" health "unix:$SOCK"
	assert_status 0
	# The per-connection agentd sees EOF and exits; only socat is left.
	local i left p
	for ((i = 0; i < 100; i++)); do
		left=
		for p in $(pgrep -s "$SOCAT_PID" -x agentd || true); do
			proc_alive "$p" && left+=" $p"
		done
		[ -z "$left" ] && break
		sleep 0.05
	done
	assert_eq "$left" "" "agentd processes left in socat's session"
}

@test "wsctl --exec 'agentd --root R --stdio': health, exec, put, get, ls" {
	local cmd="$AGENTD --root $ROOT --stdio --log-level debug 2>>$BATS_TEST_TMPDIR/agentd.err"
	# shellcheck disable=SC2031 # bats @test is not a subshell; teardown reads WSB_LOGS
	WSB_LOGS+=("$BATS_TEST_TMPDIR/agentd.err")
	run --separate-stderr "$WSCTL" --exec "$cmd" health
	assert_status 0
	assert_eq "$output" "SERVING"

	run --separate-stderr "$WSCTL" --exec "$cmd" exec -- sh -c 'echo out; echo err >&2; exit 3'
	assert_status 3
	assert_eq "$output" "out"
	assert_eq "$stderr" "err"

	head -c 3000000 /dev/urandom >"$BATS_TEST_TMPDIR/blob"
	run --separate-stderr "$WSCTL" --exec "$cmd" put "$BATS_TEST_TMPDIR/blob" blob
	assert_status 0
	cmp "$BATS_TEST_TMPDIR/blob" "$ROOT/blob"
	run --separate-stderr "$WSCTL" --exec "$cmd" get blob "$BATS_TEST_TMPDIR/back"
	assert_status 0
	cmp "$BATS_TEST_TMPDIR/blob" "$BATS_TEST_TMPDIR/back"

	run --separate-stderr "$WSCTL" --exec "$cmd" ls
	assert_status 0
	assert_eq "$output" "blob"
	# Every agentd started by wsctl has gone.
	run pgrep -f "$AGENTD --root $ROOT --stdio"
	assert_eq "$output" "" "agentd processes left"
}

@test "wsctl --exec 'agentd --stdio': agentd says nothing on the user's terminal when the connection ends" {
	# Its stderr is wsctl's: the end of stdin is how every --stdio
	# connection ends, logged at info, not as a notice.
	run --separate-stderr "$WSCTL" --exec "$AGENTD --root $ROOT --stdio" health
	assert_status 0
	assert_eq "$output" "SERVING"
	assert_eq "$stderr" "" "stderr of wsctl and agentd"
}

@test "wsctl --exec: wsctl stopped by a signal takes a command that never reads its stdin along" {
	local tag="wsb-stdio-$$-$RANDOM" dur="97.$RANDOM" sig
	for sig in TERM INT; do
		# sleep does not read stdin, so its end does not tell it; the
		# shell runs it as a child (a command follows), so both must go.
		run --separate-stderr timeout -s "$sig" 2 "$WSCTL" --exec "sleep $dur; : $tag" ls
		[ "$status" -ne 0 ] || { echo "wsctl exited 0 on SIG$sig" >&2; return 1; }
		sleep 0.3
		run pgrep -f "$tag"
		assert_eq "$output" "" "the --exec shell left after SIG$sig"
		run pgrep -f "sleep $dur"
		assert_eq "$output" "" "the --exec command's sleep left after SIG$sig"
	done
}

@test "wsctl --exec: a command that never answers is stopped when wsctl gives up on it" {
	local tag="wsb-stdio-$$-$RANDOM" dur="96.$RANDOM" c
	# A stream's wait asks for health after --rpc-timeout, and gives up;
	# the call it left stuck kept the channel, whose command was never
	# stopped (a kubectl exec and its agentd in the pod, each time).
	for c in "cat f" "exec -- true" "ls"; do
		# shellcheck disable=SC2086 # c is the command and its words
		run --separate-stderr timeout 30 "$WSCTL" --rpc-timeout 1 --exec "sleep $dur; : $tag" $c
		[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { echo "wsctl $c: exit $status" >&2; return 1; }
		sleep 0.3
		run pgrep -f "$tag"
		assert_eq "$output" "" "the --exec shell left after wsctl $c"
		run pgrep -f "sleep $dur"
		assert_eq "$output" "" "the --exec command's sleep left after wsctl $c"
	done
}

@test "wsctl --exec with a command that is not agentd fails cleanly" {
	run --separate-stderr timeout 30 "$WSCTL" --exec "echo not-grpc" health
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_eq "$output" ""
	run --separate-stderr timeout 30 "$WSCTL" --exec "exit 3" exec -- true
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 125
	assert_eq "$output" ""
}
