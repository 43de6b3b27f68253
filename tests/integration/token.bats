#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# Bearer tokens from wsctl's side: agentd with --token-file on 127.0.0.1
# rejects wsctl without the token (UNAUTHENTICATED, non-zero) and serves it
# with --token-file; agentd on 0.0.0.0 without a token refuses to start.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
	unset WSBRIDGE_TOKEN_FILE
	TOKEN_FILE="$BATS_TEST_TMPDIR/token"
	printf 'tok-%s-%s\n' "$RANDOM" "$RANDOM" >"$TOKEN_FILE"
	chmod 600 "$TOKEN_FILE"
}

teardown() {
	wsb_teardown
}

@test "wsctl without the token: UNAUTHENTICATED and non-zero, nothing done" {
	agentd_tcp --token-file "$TOKEN_FILE"
	echo data >"$BATS_TEST_TMPDIR/f"
	run --separate-stderr "$WSCTL" ls
	assert_status 1
	assert_eq "$output" ""
	assert_contains "$stderr" "UNAUTHENTICATED"
	assert_contains "$stderr" "wsctl: agentd wants its bearer token: give wsctl the file that holds it with --token-file FILE or WSBRIDGE_TOKEN_FILE=FILE"
	run --separate-stderr "$WSCTL" put "$BATS_TEST_TMPDIR/f" f
	assert_status 1
	assert_contains "$stderr" "UNAUTHENTICATED"
	run --separate-stderr "$WSCTL" mkdir d
	assert_status 1
	assert_contains "$stderr" "UNAUTHENTICATED"
	run --separate-stderr "$WSCTL" exec -- touch pwned
	[ "$status" -ne 0 ]
	assert_contains "$stderr" "UNAUTHENTICATED"
	assert_eq "$(ls -A "$ROOT")" "" "root"
}

@test "wsctl with a wrong token: UNAUTHENTICATED" {
	agentd_tcp --token-file "$TOKEN_FILE"
	echo wrong >"$BATS_TEST_TMPDIR/wrong"
	run --separate-stderr "$WSCTL" --token-file "$BATS_TEST_TMPDIR/wrong" exec -- true
	[ "$status" -ne 0 ]
	assert_contains "$stderr" "UNAUTHENTICATED"
	run --separate-stderr "$WSCTL" --token-file "$BATS_TEST_TMPDIR/wrong" cat x
	assert_status 1
	assert_contains "$stderr" "UNAUTHENTICATED"
	# A file was given: it holds the wrong token (not "give wsctl the file").
	assert_contains "$stderr" "wsctl: agentd refused the bearer token in '$BATS_TEST_TMPDIR/wrong': it is not the one agentd has (its --token-file)"
}

@test "wsctl with --token-file (or \$WSBRIDGE_TOKEN_FILE) works" {
	agentd_tcp --token-file "$TOKEN_FILE"
	run --separate-stderr "$WSCTL" --token-file "$TOKEN_FILE" exec -- sh -c 'echo hi; exit 3'
	assert_status 3
	assert_eq "$output" "hi"
	echo data >"$BATS_TEST_TMPDIR/f"
	run --separate-stderr "$WSCTL" --token-file "$TOKEN_FILE" put "$BATS_TEST_TMPDIR/f" f
	assert_status 0
	run --separate-stderr "$WSCTL" --token-file "$TOKEN_FILE" cat f
	assert_status 0
	assert_eq "$output" "data"
	run --separate-stderr env WSBRIDGE_TOKEN_FILE="$TOKEN_FILE" "$WSCTL" ls
	assert_status 0
	assert_eq "$output" "f"
}

@test "health answers without a token" {
	agentd_tcp --token-file "$TOKEN_FILE"
	run --separate-stderr "$WSCTL" health
	assert_status 0
	assert_eq "$output" "SERVING"
}

@test "agentd on 0.0.0.0 without a token refuses to start" {
	local port
	port=$(free_port)
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "0.0.0.0:$port"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "0.0.0.0:$port"
	assert_contains "$stderr" "--token-file"
	# And nothing listens there now.
	run "$PY" -c 'import socket, sys
s = socket.socket()
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) else 1)' "$port"
	assert_status 0
}
