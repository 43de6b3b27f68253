#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# agentd as a process: options, listeners, tokens, refusing to start, a
# second instance on the same address, SIGTERM, logging to stderr only, and
# the transport as a grpcio client sees it (tests/python/test_server.py).

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
}

teardown() {
	wsb_teardown
}

@test "agentd --help prints usage on stdout and exits 0" {
	run --separate-stderr "$AGENTD" --help
	assert_status 0
	assert_contains "$output" "Usage: agentd"
	assert_contains "$output" "--token-file"
	assert_eq "$stderr" ""
}

@test "agentd rejects bad options with exit 2 and a message" {
	run --separate-stderr timeout 10 "$AGENTD" --no-such-option
	assert_status 2
	assert_eq "$output" ""
	assert_contains "$stderr" "no-such-option"

	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --stdio --listen 127.0.0.1:1
	assert_status 2
	assert_contains "$stderr" "--stdio"

	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --log-level loud --listen 127.0.0.1:1
	assert_status 2
	assert_contains "$stderr" "loud"

	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --view-limit -5 --listen 127.0.0.1:1
	assert_status 2
	assert_contains "$stderr" "view-limit"

	# gRPC took port 99999 as 34463 and a missing port as 443.
	for a in 127.0.0.1:99999 127.0.0.1:0 127.0.0.1 garbage unix:; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "$a"
		assert_status 2
		assert_contains "$stderr" "bad --listen address '$a'"
	done

	for v in 0 -1 4294967296 x; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --max-watches "$v" --listen 127.0.0.1:1
		assert_status 2
		assert_eq "$stderr" "agentd: bad number '$v' for --max-watches"
	done

	for v in -1 0 4 86401 5.5 x ''; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --session-grace "$v" --listen 127.0.0.1:1
		assert_status 2
		assert_eq "$stderr" "agentd: bad number '$v' for --session-grace (5 to 86400 seconds)"
	done

	for v in -1 3601 5.5 x ''; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --drain-grace "$v" --listen 127.0.0.1:1
		assert_status 2
		assert_eq "$stderr" "agentd: bad number '$v' for --drain-grace (0 to 3600 seconds)"
	done

	for v in 8388607 1099511627777 -1 0 x; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --max-reply-bytes "$v" --listen 127.0.0.1:1
		assert_status 2
		assert_eq "$stderr" "agentd: bad number '$v' for --max-reply-bytes (8388608 to 1099511627776 bytes)"
	done
	# No room for the largest ViewFile reply.
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --max-reply-bytes 8388608 \
		--view-limit 8388608 --listen 127.0.0.1:1
	assert_status 2
	assert_contains "$stderr" "--max-reply-bytes 8388608 is too small for --view-limit 8388608"

	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" stray-arg
	assert_status 2
	assert_contains "$stderr" "stray-arg"
}

@test "agentd without a usable root refuses to start" {
	local port
	port=$(free_port)
	run --separate-stderr timeout 10 "$AGENTD" --root "$BATS_TEST_TMPDIR/missing" --listen "127.0.0.1:$port"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "$BATS_TEST_TMPDIR/missing"

	touch "$BATS_TEST_TMPDIR/plainfile"
	run --separate-stderr timeout 10 "$AGENTD" --root "$BATS_TEST_TMPDIR/plainfile" --listen "127.0.0.1:$port"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "plainfile"
}

@test "a listener beyond loopback without --token-file refuses to start" {
	local port a
	port=$(free_port)
	for a in "0.0.0.0:$port" "[::]:$port" ":$port" "192.0.2.1:$port"; do
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "$a"
		if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
			echo "# --listen $a: status $status (started?)" >&3
			return 1
		fi
		assert_contains "$stderr" "--token-file" "stderr for --listen $a"
		assert_contains "$stderr" "$a" "stderr for --listen $a"
		assert_eq "$output" "" "stdout for --listen $a"
	done
	# One bad listener among good ones: nothing starts.
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "127.0.0.1:$port" --listen "0.0.0.0:$port"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "0.0.0.0:$port"
}

@test "an address agentd cannot listen on fails with the reason, not a guess" {
	local port
	port=$(free_port)
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "unix:$BATS_TEST_TMPDIR/no-such-dir/s"
	assert_status 1
	assert_contains "$stderr" "no-such-dir/s': No such file or directory"
	# A file in the way is kept (gRPC would replace only a stale socket).
	echo keep >"$BATS_TEST_TMPDIR/file"
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "unix:$BATS_TEST_TMPDIR/file"
	assert_status 1
	assert_contains "$stderr" "file': the path exists and is not a socket"
	[ "$(cat "$BATS_TEST_TMPDIR/file")" = keep ]
	printf 'a-token\n' >"$BATS_TEST_TMPDIR/token"
	chmod 600 "$BATS_TEST_TMPDIR/token"
	# TEST-NET-1 (RFC 5737): no address of this machine.
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "192.0.2.1:$port" \
		--token-file "$BATS_TEST_TMPDIR/token"
	assert_status 1
	assert_contains "$stderr" "192.0.2.1:$port': Cannot assign requested address"
}

@test "a bad token file is refused" {
	local port
	port=$(free_port)
	: >"$BATS_TEST_TMPDIR/empty-token"
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "127.0.0.1:$port" --token-file "$BATS_TEST_TMPDIR/empty-token"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "empty-token"

	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "127.0.0.1:$port" --token-file "$BATS_TEST_TMPDIR/no-such-token"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || assert_status 1
	assert_contains "$stderr" "no-such-token"

	# A NUL byte would cut the token short (before: to "", which let
	# 'Bearer ' in); a space or a second line is no one token either.
	printf '\0secret\n' >"$BATS_TEST_TMPDIR/nul-token"
	printf 'two words\n' >"$BATS_TEST_TMPDIR/space-token"
	for t in nul-token space-token; do
		chmod 600 "$BATS_TEST_TMPDIR/$t"
		run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "127.0.0.1:$port" --token-file "$BATS_TEST_TMPDIR/$t"
		assert_status 1
		assert_contains "$stderr" "$t': empty, or not one word of printable ASCII"
		run --separate-stderr "$WSCTL" -a "127.0.0.1:$port" --token-file "$BATS_TEST_TMPDIR/$t" health
		assert_status 2
		assert_contains "$stderr" "holds no valid token"
		mkdir -p "$BATS_TEST_TMPDIR/mnt"
		run --separate-stderr timeout 10 "$WSFS" --token-file "$BATS_TEST_TMPDIR/$t" "127.0.0.1:$port" "$BATS_TEST_TMPDIR/mnt"
		assert_status 1
		assert_contains "$stderr" "$t': no valid token (one word of printable ASCII)"
	done
}

@test "agentd raises its open-file limit and gives commands the one it got" {
	wsb_runsc && skip "agentd's limits are gVisor's there"
	command -v prlimit >/dev/null || skip "prlimit (util-linux) is not installed"
	# A login shell's 1024: --max-handles' 4096 files would run agentd out
	# (and gRPC 1.51 stops accepting on EMFILE for good).
	local real=$AGENTD
	printf '#!/bin/sh\nexec prlimit --nofile=1024:8192 %q "$@"\n' "$real" >"$BATS_TEST_TMPDIR/agentd"
	chmod +x "$BATS_TEST_TMPDIR/agentd"
	AGENTD=$BATS_TEST_TMPDIR/agentd agentd_unix
	assert_eq "$(awk '/^Max open files/ { print $4, $5 }' "/proc/$AGENTD_PID/limits")" \
		"8192 8192" "agentd's open-file limits"
	run "$WSCTL" -a "$ADDR" exec --shell -- 'ulimit -Sn; ulimit -Hn'
	assert_status 0
	assert_eq "$output" "1024
8192" "a command's open-file limits"
}

@test "agentd serves loopback TCP, IPv6 loopback and a unix socket at once" {
	local p4 p6
	p4=$(free_port)
	p6=$(free_port)
	if ! "$PY" -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
		skip "no IPv6 loopback here"
	fi
	agentd_start --root "$ROOT" --listen "127.0.0.1:$p4" --listen "[::1]:$p6" --listen "unix:$BATS_TEST_TMPDIR/a.sock"
	run "$PY" "$PYTESTS/wsbcall.py" health "127.0.0.1:$p4"
	assert_status 0
	assert_eq "$output" "SERVING"
	run "$PY" "$PYTESTS/wsbcall.py" health "[::1]:$p6"
	assert_status 0
	assert_eq "$output" "SERVING"
	run "$PY" "$PYTESTS/wsbcall.py" health "unix:$BATS_TEST_TMPDIR/a.sock"
	assert_status 0
	assert_eq "$output" "SERVING"
}

@test "a second agentd on the same TCP port fails to start; the first keeps serving" {
	agentd_tcp
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "$ADDR"
	if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
		echo "# second agentd on $ADDR: status $status" >&3
		return 1
	fi
	assert_contains "$stderr" "$ADDR"
	run "$PY" "$PYTESTS/wsbcall.py" health "$ADDR"
	assert_status 0
	assert_eq "$output" "SERVING"
	proc_alive "$AGENTD_PID"
}

@test "a second agentd on the same unix socket fails to start; the first keeps serving" {
	agentd_unix
	local ino
	ino=$(stat -c %i "$SOCK")
	run --separate-stderr timeout 10 "$AGENTD" --root "$ROOT" --listen "$ADDR"
	if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
		echo "# second agentd on $ADDR: status $status" >&3
		return 1
	fi
	assert_contains "$stderr" "$SOCK"
	# The socket file was not replaced, and it still reaches the first.
	assert_eq "$(stat -c %i "$SOCK")" "$ino" "inode of the socket"
	run "$PY" "$PYTESTS/wsbcall.py" health "$ADDR"
	assert_status 0
	assert_eq "$output" "SERVING"
}

@test "SIGTERM on an idle agentd exits 0; logs go to stderr, nothing to stdout" {
	agentd_tcp --log-level debug
	run "$PY" "$PYTESTS/wsbcall.py" health "$ADDR"
	assert_status 0
	agentd_stop
	assert_eq "$AGENTD_STATUS" 0 "exit status after SIGTERM"
	assert_eq "$(cat "$AGENTD_OUT")" "" "agentd's stdout"
	run grep -c '^agentd: ' "$AGENTD_ERR"
	[ "$output" -ge 1 ] || { cat "$AGENTD_ERR" >&3; false; }
}

@test "SIGTERM drains: a running call finishes, then agentd exits 0" {
	agentd_tcp
	bg client "$PY" "$PYTESTS/wsbcall.py" exec-until-end "$ADDR" -- sh -c 'echo begin; sleep 1; echo done'
	local client=$BG_PID i
	for ((i = 0; i < 200; i++)); do
		grep -q '^stdout' "$BATS_TEST_TMPDIR/client.out" && break
		sleep 0.05
	done
	agentd_stop
	assert_eq "$AGENTD_STATUS" 0 "exit status after SIGTERM"
	wait_gone "$client" 5
	run cat "$BATS_TEST_TMPDIR/client.out"
	assert_eq "${lines[1]}" "stdout b'begin\\n'"
	assert_eq "${lines[2]}" "stdout b'done\\n'"
	assert_eq "${lines[3]}" "exited code=0 signal=0"
	assert_eq "${lines[4]}" "status OK"
	assert_eq "$(cat "$AGENTD_OUT")" "" "agentd's stdout"
}

@test "SIGTERM with a command that outlasts the grace (--drain-grace 2): its group is killed, exit 0" {
	agentd_tcp --drain-grace 2
	bg client "$PY" "$PYTESTS/wsbcall.py" exec-until-end "$ADDR" -- sh -c 'sleep 100 & echo $! > bg.pid; exec sleep 100'
	local client=$BG_PID i
	for ((i = 0; i < 200; i++)); do
		grep -q '^started' "$BATS_TEST_TMPDIR/client.out" && [ -s "$ROOT/bg.pid" ] && break
		sleep 0.05
	done
	local pid bgpid
	pid=$(sed -n 's/^started //p' "$BATS_TEST_TMPDIR/client.out")
	bgpid=$(cat "$ROOT/bg.pid")
	proc_alive "$pid"
	proc_alive "$bgpid"
	# Within the drain grace (2 s) plus the kill grace (2 s) and a margin
	# (the default drain grace, 10 s, would take 12).
	local t0
	t0=$(now_ms)
	WSB_STOP_WAIT=16 agentd_stop
	assert_eq "$AGENTD_STATUS" 0 "exit status after SIGTERM"
	[ $(($(now_ms) - t0)) -ge 1900 ] || { echo "stopped $(($(now_ms) - t0)) ms after SIGTERM, before the grace" >&3; false; }
	[ $(($(now_ms) - t0)) -lt 8000 ] || { echo "stopped $(($(now_ms) - t0)) ms after SIGTERM" >&3; false; }
	wait_gone "$client" 5
	run cat "$BATS_TEST_TMPDIR/client.out"
	assert_contains "${lines[-1]}" "status "
	wait_gone "$pid" 5
	wait_gone "$bgpid" 5
	assert_eq "$(cat "$AGENTD_OUT")" "" "agentd's stdout"
}

@test "SIGTERM: commands still running once the calls ended get TERM first, KILL 2 s later; agentd waits for them, exit 0" {
	agentd_unix
	local soft hard t0 ms
	# One that cleans up on TERM, one that ignores it.
	soft=$("$WSCTL" -a "$ADDR" exec --detach -- sh -c "trap 'echo termed > termed; exit 6' TERM; echo \$\$ > soft.pid; while :; do sleep 0.1; done")
	hard=$("$WSCTL" -a "$ADDR" exec --detach -- sh -c "trap '' TERM; echo \$\$ > hard.pid; while :; do sleep 0.1; done")
	[ -n "$soft" ] && [ -n "$hard" ]
	poll_until 10 test -s "$ROOT/soft.pid"
	poll_until 10 test -s "$ROOT/hard.pid"
	t0=$(now_ms)
	agentd_stop
	ms=$(($(now_ms) - t0))
	assert_eq "$AGENTD_STATUS" 0 "exit status after SIGTERM"
	# (Before: both got SIGKILL at once, and no file was written.)
	assert_content "$ROOT/termed" $'termed\n'
	[ "$ms" -ge 1800 ] && [ "$ms" -lt 6000 ] || { echo "# agentd took $ms ms" >&3; false; }
	pod_wait_gone "$(cat "$ROOT/hard.pid")" 5
	grep -q "stopping 2 running commands: SIGTERM" "$AGENTD_ERR"
}

@test "SIGTERM after finished streaming calls exits at once (nothing left to drain)" {
	agentd_unix
	head -c 3000000 /dev/urandom >"$ROOT/f"
	run "$PY" -c '
import sys, wsbtest
from wsbtest import pb, pbg
ch = wsbtest.channel(sys.argv[1])
ws, ex = pbg.WorkspaceStub(ch), pbg.ExecStub(ch)
n = sum(len(c.data) for c in ws.Download(pb.DownloadRequest(path=b"f"), timeout=15))
m = sum(len(e.stdout.data) for e in ex.Start(pb.ExecRequest(argv=[b"cat", b"f"]), timeout=15))
print(n, m)' "$ADDR"
	assert_status 0
	assert_eq "$output" "3000000 3000000"
	local t0 t1
	t0=$(date +%s%N)
	agentd_stop
	t1=$(date +%s%N)
	assert_eq "$AGENTD_STATUS" 0 "exit status after SIGTERM"
	[ $(((t1 - t0) / 1000000)) -lt 3000 ] || {
		echo "# agentd took $(((t1 - t0) / 1000000)) ms to exit after SIGTERM with no call running" >&3
		false
	}
}

@test "SIGINT also drains and exits 0" {
	agentd_unix
	kill -INT "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 10
	local st=0
	wait "$AGENTD_PID" || st=$?
	assert_eq "$st" 0 "exit status after SIGINT"
}

@test "transport without a token: health, unknown methods, bad requests (grpcio)" {
	agentd_tcp
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_server.py
}

@test "transport with --token-file on 127.0.0.1: every call but health needs the token (grpcio)" {
	printf 's3cr3t-T0ken_%s\n' "$RANDOM" >"$BATS_TEST_TMPDIR/token"
	chmod 600 "$BATS_TEST_TMPDIR/token"
	agentd_tcp --token-file "$BATS_TEST_TMPDIR/token"
	# agentd's own memory is read where it is a process here (not gVisor's)
	# and not a sanitizer build (ASan's quarantine keeps freed memory).
	local pid=
	wsb_runsc || wsb_sanitized || pid=$AGENTD_PID
	WSB_TOKEN=$(head -n1 "$BATS_TEST_TMPDIR/token") WSB_TARGET=$ADDR WSB_ROOT=$ROOT \
		WSB_AGENTD_PID=$pid run_py test_server.py
	assert_contains "$output" "test_without_token_unauthenticated"
	assert_not_contains "$output" "skipped"
}

@test "the token file's trailing newline is not part of the token" {
	printf 'abc123\n' >"$BATS_TEST_TMPDIR/token"
	chmod 600 "$BATS_TEST_TMPDIR/token"
	agentd_unix --token-file "$BATS_TEST_TMPDIR/token"
	WSB_TOKEN=abc123 WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_server.py Token.test_with_token
}

@test "random requests (valid calls to every method, fields corrupted) never crash agentd nor touch anything outside the root" {
	# Beside the root: what no call may reach.
	local out="$BATS_TEST_TMPDIR/outside" before s
	mkdir -p "$out/d" "$ROOT/d" "$ROOT/app"
	printf 'canary\n' >"$out/c"
	printf 'g\n' >"$out/d/g"
	ln -s ../outside "$ROOT/out"
	printf 'f\n' >"$ROOT/f"
	printf 'g\n' >"$ROOT/d/g"
	ln -s f "$ROOT/sl"
	before=$(tree_sig "$out")
	agentd_unix
	for s in 1 2; do
		WSB_TARGET=$ADDR WSB_ROOT=$ROOT WSB_OUTSIDE=$out run_py fuzz_agentd.py "$s" 500
		echo "# ${output##*$'\n'}" >&3
	done
	proc_alive "$AGENTD_PID"
	assert_eq "$(tree_sig "$out")" "$before" "the tree outside the root"
	# hostile_agentd's "../x" and "a/../../x" would land here.
	[ ! -e "$BATS_TEST_TMPDIR/x" ]
}
