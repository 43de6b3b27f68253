#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsctl exec against a real agentd: arguments passed as arguments (E9),
# clear errors and no process for a missing program or a cwd outside (E10),
# exit codes and signals, separate stdout and stderr, timeouts that kill the
# whole process group (E1, E6), byte-exact output (E4, E2), stdin (E5).
# Cases: /work/shared/cases/exec-cases.md.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
	agentd_tcp
}

teardown() {
	wsb_teardown
}

@test "E9: argv and cwd with spaces, quotes, \$(...) and ; run exactly as given" {
	mkdir "$ROOT/d i r"
	run --separate-stderr "$WSCTL" exec --cwd 'd i r' -- printf '%s|' 'a b' '$(id)' 'x;y' '"q"'
	assert_status 0
	assert_eq "$output" 'a b|$(id)|x;y|"q"|'
	assert_eq "$stderr" ""

	local weird="q'\"\$(touch pwned);\`touch pwned2\` d"
	mkdir "$ROOT/$weird"
	run --separate-stderr "$WSCTL" exec --cwd "$weird" -- pwd
	assert_status 0
	assert_eq "$output" "$(cd "$ROOT/$weird" && pwd -P)"
	run --separate-stderr "$WSCTL" exec --cwd "$weird" -- printf '[%s]' "" ' ' '*' '$HOME' $'tab\there' "\\" "'"
	assert_status 0
	assert_eq "$output" "[][ ][*][\$HOME][$(printf 'tab\there')][\\][']"
	# Nothing was run by a shell on the way.
	[ ! -e "$ROOT/pwned" ] && [ ! -e "$ROOT/pwned2" ] && [ ! -e "$ROOT/$weird/pwned" ]
	run find "$ROOT" -name 'pwned*'
	assert_eq "$output" ""
}

@test "E9: --shell passes ARGs as positional parameters, never pasted" {
	run --separate-stderr "$WSCTL" exec --shell -- 'printf "<%s>" "$@"; echo " $#"' '$(touch pwned)' 'a;b' '  '
	assert_status 0
	assert_eq "$output" '<$(touch pwned)><a;b><  > 3'
	[ ! -e "$ROOT/pwned" ]
}

@test "E10: a program that does not exist: NOT_FOUND, exit 127, nothing runs" {
	run -127 --separate-stderr "$WSCTL" exec -- no-such-program-wsb arg
	assert_status 127
	assert_eq "$output" ""
	assert_contains "$stderr" "no-such-program-wsb"
	assert_contains "$stderr" "NOT_FOUND"
	run -127 --separate-stderr "$WSCTL" exec -- ./missing-relative
	assert_status 127
	assert_contains "$stderr" "NOT_FOUND"
	run -127 --separate-stderr "$WSCTL" exec --cwd no/such/dir -- true
	assert_status 127
	assert_contains "$stderr" "NOT_FOUND"
}

@test "E10: a cwd outside the workspace: PERMISSION_DENIED, no process started" {
	mkdir -p "$BATS_TEST_TMPDIR/outside"
	ln -s ../outside "$ROOT/up"
	ln -s "$BATS_TEST_TMPDIR/outside" "$ROOT/abs"
	mkdir "$ROOT/sub"
	ln -s ../.. "$ROOT/sub/upup"
	local cwd
	for cwd in .. ../outside /../outside up abs sub/upup sub/../..; do
		run --separate-stderr "$WSCTL" exec --cwd "$cwd" -- touch "$BATS_TEST_TMPDIR/outside/pwned" pwned-here
		assert_status 126
		assert_eq "$output" ""
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr for --cwd $cwd"
	done
	run ls -A "$BATS_TEST_TMPDIR/outside"
	assert_eq "$output" ""
	run find "$BATS_TEST_TMPDIR" -name 'pwned*'
	assert_eq "$output" ""
}

@test "a program that cannot be run: exit 126" {
	printf 'not executable\n' >"$ROOT/noexec"
	chmod 644 "$ROOT/noexec"
	run --separate-stderr "$WSCTL" exec -- ./noexec
	assert_status 126
	assert_contains "$stderr" "PERMISSION_DENIED"
}

@test "a bare program name is searched in the command's PATH as execvp(3) does" {
	mkdir -p "$ROOT/b1" "$ROOT/b2" "$ROOT/b3"
	# b1/tool cannot be run (EACCES): the search goes on to b2/tool.
	printf '#!/bin/sh\necho from-b1\n' >"$ROOT/b1/tool"
	chmod 644 "$ROOT/b1/tool"
	printf '#!/bin/sh\necho "from-b2 $*"\n' >"$ROOT/b2/tool"
	# No #! line (ENOEXEC): run as a /bin/sh script with its arguments.
	printf 'echo "plain-script $# $1"\n' >"$ROOT/b3/plain"
	chmod 755 "$ROOT/b2/tool" "$ROOT/b3/plain"
	run --separate-stderr "$WSCTL" exec --env PATH=/no/such/dir:b1:b2 -- tool 'a b'
	assert_status 0
	assert_eq "$output" "from-b2 a b"
	# An element longer than PATH_MAX is skipped, not the end of the search.
	local long
	long=/$(printf '%5000s' '' | tr ' ' a)
	run --separate-stderr "$WSCTL" exec --env "PATH=$long:b2" -- tool x
	assert_status 0
	assert_eq "$output" "from-b2 x"
	run -127 --separate-stderr "$WSCTL" exec --env "PATH=b2:$long" -- no-such-tool
	assert_contains "$stderr" "NOT_FOUND"
	run --separate-stderr "$WSCTL" exec --env PATH=b3 -- plain 'x y' z
	assert_status 0
	assert_eq "$output" "plain-script 2 x y"
	run --separate-stderr "$WSCTL" exec -- ./b3/plain q
	assert_status 0
	assert_eq "$output" "plain-script 1 q"
	# Only the command's PATH counts, not agentd's: sh is not in b1.
	run -127 --separate-stderr "$WSCTL" exec --env PATH=b1 -- sh -c true
	assert_status 127
	assert_contains "$stderr" "NOT_FOUND"
	# Only EACCES found: PERMISSION_DENIED, exit 126.
	run --separate-stderr "$WSCTL" exec --env PATH=b1 -- tool
	assert_status 126
	assert_contains "$stderr" "PERMISSION_DENIED"
}

@test "exit code passthrough" {
	local c
	for c in 0 1 7 42 125 126 127 255; do
		run "-$c" --separate-stderr "$WSCTL" exec -- sh -c "exit $c"
		assert_status "$c"
		assert_eq "$output$stderr" ""
	done
	run --separate-stderr "$WSCTL" exec -- false
	assert_status 1
}

@test "a command killed by signal N exits 128+N" {
	run --separate-stderr "$WSCTL" exec -- sh -c 'kill -9 $$'
	assert_status 137
	run --separate-stderr "$WSCTL" exec -- sh -c 'kill -TERM $$'
	assert_status 143
	run --separate-stderr "$WSCTL" exec -- sh -c 'echo before; kill -USR1 $$; echo after'
	assert_status 138
	assert_eq "$output" "before"
}

@test "output is streamed while the command runs" {
	bg wsctl "$WSCTL" exec -- sh -c 'echo first; echo err-first >&2; sleep 2; echo second'
	local w=$BG_PID i
	for ((i = 0; i < 30; i++)); do
		grep -q first "$BATS_TEST_TMPDIR/wsctl.out" && grep -q err-first "$BATS_TEST_TMPDIR/wsctl.err" && break
		sleep 0.05
	done
	assert_eq "$(cat "$BATS_TEST_TMPDIR/wsctl.out")" "first" "stdout while it runs"
	assert_eq "$(cat "$BATS_TEST_TMPDIR/wsctl.err")" "err-first" "stderr while it runs"
	proc_alive "$w"
	local st=0
	wait "$w" || st=$?
	assert_eq "$st" 0 "wsctl's exit status"
	assert_eq "$(cat "$BATS_TEST_TMPDIR/wsctl.out")" $'first\nsecond' "stdout at the end"
}

@test "stdout and stderr stay separate and ordered" {
	run --separate-stderr "$WSCTL" exec -- sh -c 'echo o1; echo e1 >&2; echo o2; echo e2 >&2; exit 4'
	assert_status 4
	assert_eq "$output" $'o1\no2'
	assert_eq "$stderr" $'e1\ne2'
}

@test "--env sets variables; the command runs in the root by default" {
	run --separate-stderr "$WSCTL" exec --env A=1 --env 'B=two words' --env C= -- sh -c 'printf "%s|%s|%s|%s\n" "$A" "$B" "${C-unset}" "$(pwd -P)"'
	assert_status 0
	assert_eq "$output" "1|two words||$(cd "$ROOT" && pwd -P)"
	run --separate-stderr "$WSCTL" exec --env NOEQUALS -- true
	assert_status 2
}

@test "--timeout kills a sleep 100 and its background child" {
	local t0 t1
	t0=$(date +%s)
	run --separate-stderr "$WSCTL" exec --timeout 1 -- sh -c 'sleep 100 & echo $! > bg.pid; echo $$ > sh.pid; wait'
	t1=$(date +%s)
	assert_status 124
	[ $((t1 - t0)) -lt 8 ] || { echo "# took $((t1 - t0)) s" >&3; false; }
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
}

@test "E6: --timeout also ends a command that ignores SIGTERM (TERM, then KILL)" {
	local t0 t1
	t0=$(date +%s)
	run --separate-stderr "$WSCTL" exec --timeout 1 -- sh -c 'trap "" TERM; sleep 100 & echo $! > bg.pid; echo $$ > sh.pid; while :; do sleep 1; done'
	t1=$(date +%s)
	assert_status 124
	[ $((t1 - t0)) -lt 10 ] || { echo "# took $((t1 - t0)) s" >&3; false; }
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
}

@test "E1: killing wsctl (SIGTERM) kills the remote command and its children" {
	bg wsctl "$WSCTL" exec -- sh -c 'sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; sleep 300'
	local w=$BG_PID i
	for ((i = 0; i < 200; i++)); do
		[ -s "$ROOT/bg.pid" ] && [ -s "$ROOT/sh.pid" ] && break
		sleep 0.05
	done
	pod_proc_alive "$(cat "$ROOT/sh.pid")"
	kill -TERM "$w"
	wait_gone "$w" 5
	local st=0
	wait "$w" || st=$?
	assert_eq "$st" 143 "wsctl's exit status"
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
}

@test "E1: SIGUSR1 and SIGUSR2 end wsctl as they end a local command (128+N) and kill the remote command; SIGURG, ignored by default, changes nothing" {
	local sig n w st
	for sig in USR1 USR2; do
		rm -f "$ROOT/sh.pid"
		bg "wsctl$sig" "$WSCTL" exec -- sh -c 'echo $$ > sh.pid; exec sleep 300'
		w=$BG_PID
		poll_until 10 test -s "$ROOT/sh.pid"
		kill "-$sig" "$w"
		wait_gone "$w" 5
		st=0
		wait "$w" || st=$?
		n=$(kill -l "$sig")
		# (Before: SIGUSR2 stopped wsctl's signal thread, and then even
		# SIGTERM did nothing; SIGUSR1 was ignored.)
		assert_eq "$st" $((128 + n)) "wsctl's exit status at SIG$sig"
		pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
	done
	run --separate-stderr bash -c '"$0" exec -- sh -c "sleep 1; echo done" & w=$!; sleep 0.5
		kill -URG "$w"; wait "$w"' "$WSCTL"
	assert_status 0
	assert_eq "$output" "done"
	# wsctl --exec stops its signal thread (its own SIGUSR2) before it
	# exits: that one is no signal from outside (exit 0, not 140).
	run --separate-stderr "$WSCTL" --exec "$AGENTD --root $ROOT --stdio" exec -- true
	assert_status 0
}

@test "E4/E2: binary output arrives byte-exact, 10 MiB in one burst too" {
	head -c 300000 /dev/urandom >"$ROOT/rand"
	"$WSCTL" exec -- cat rand >"$BATS_TEST_TMPDIR/out"
	cmp "$ROOT/rand" "$BATS_TEST_TMPDIR/out"
	"$WSCTL" exec -- sh -c 'cat rand >&2' 2>"$BATS_TEST_TMPDIR/err"
	cmp "$ROOT/rand" "$BATS_TEST_TMPDIR/err"
	head -c 10485760 /dev/urandom >"$ROOT/big"
	"$WSCTL" exec -- cat big | sha256sum >"$BATS_TEST_TMPDIR/sum"
	assert_eq "$(cat "$BATS_TEST_TMPDIR/sum")" "$(sha256sum <"$ROOT/big")"
}

@test "E5: stdin: -i sends wsctl's stdin then EOF; without -i the command reads EOF" {
	run --separate-stderr bash -c 'printf "line1\nline2" | "$0" exec -i -- sh -c "cat; echo; echo done"' "$WSCTL"
	assert_status 0
	assert_eq "$output" $'line1\nline2\ndone'
	run --separate-stderr timeout 20 "$WSCTL" exec -- sh -c 'cat; echo eof'
	assert_status 0
	assert_eq "$output" "eof"
	run --separate-stderr bash -c '"$0" exec -i -- wc -c < /dev/null' "$WSCTL"
	assert_status 0
	assert_eq "$output" "0"
}

@test "a closed stdout ends the command (SIGPIPE), not a hang" {
	run --separate-stderr timeout 30 bash -c 'set -o pipefail; "$0" exec -- sh -c "while :; do echo y; done" | head -n 3' "$WSCTL"
	assert_eq "$output" $'y\ny\ny'
	[ "$status" -ne 124 ]
}

@test "exec options need -- or a program" {
	run --separate-stderr "$WSCTL" exec
	assert_status 2
	run --separate-stderr "$WSCTL" exec --timeout abc -- true
	assert_status 2
	assert_contains "$stderr" "abc"
	run --separate-stderr "$WSCTL" exec --timeout -1 -- true
	assert_status 2
}
