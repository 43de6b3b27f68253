#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# shellcheck disable=SC2154,SC2016
# (SC2154: status, output, lines and stderr come from bats' run; SC2016: the
# single-quoted scripts run remotely or under bash -c, unexpanded on purpose.)
#
# The Exec process lifecycle against a real agentd: processes that outlive
# their call (--detach, ids, tags), Attach with replay from a byte offset and
# lost-bytes reporting, WriteStdin, PTY with resize, Signal to the whole tree
# (cgroup where allowed), server-side and idle timeouts, kept exit statuses,
# limits, List and Wait, orphan reaping, and wsctl's exec/attach/ps/kill/wait.
# Every case of /work/shared/cases/exec-cases.md (E1..E10) has a test here
# (exec.bats covers the plain `wsctl exec` side of several more).

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
	W=$WSCTL
}

teardown() {
	wsb_teardown
}

# wait_file FILE [SECONDS]: wait until FILE is non-empty.
wait_file() {
	local i n=$(( ${2:-10} * 20 ))
	for ((i = 0; i < n; i++)); do
		[ -s "$1" ] && return 0
		sleep 0.05
	done
	echo "# $1 never appeared" >&3
	return 1
}

# in_agentd_cgroup PID: PID runs in a cgroup agentd made for a command.
in_agentd_cgroup() {
	pod_run cat "/proc/$1/cgroup" 2>/dev/null | grep -q 'wsbridge-agentd\.[0-9]*/cmd-'
}

@test "E1: kill reaches the whole tree, a setsid grandchild too (cgroup v2 where allowed)" {
	agentd_tcp
	local id gc cg=0
	id=$("$W" exec --detach --tag tree -- sh -c \
		'setsid sleep 300 & echo $! > gc.pid; sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait')
	wait_file "$ROOT/gc.pid"
	wait_file "$ROOT/bg.pid"
	wait_file "$ROOT/sh.pid"
	gc=$(cat "$ROOT/gc.pid")
	in_agentd_cgroup "$gc" && cg=1
	run --separate-stderr "$W" kill tree
	assert_status 0
	run --separate-stderr "$W" wait "$id"
	assert_status 143
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	if [ $cg = 1 ]; then
		pod_wait_gone "$gc" 5
	else
		echo "# no per-command cgroup here: the setsid grandchild escapes the group (expected)" >&3
		pod_run kill -KILL "$gc" 2>/dev/null || true
	fi
	# signals by name and number; a second kill: FAILED_PRECONDITION
	run --separate-stderr "$W" -v kill -s KILL tree
	assert_status 1
	assert_contains "$stderr" "FAILED_PRECONDITION"
	assert_contains "$stderr" "exited"
	id=$("$W" exec --detach -- sh -c 'trap "echo got-usr1; exit 7" USR1; sleep 300 & wait')
	sleep 0.3
	run --separate-stderr "$W" kill -s USR1 "$id"
	assert_status 0
	run --separate-stderr "$W" wait "$id"
	assert_status 7
	run --separate-stderr "$W" attach "$id"
	assert_eq "$output" "got-usr1"
	run --separate-stderr "$W" kill -s NOSUCH "$id"
	assert_status 2
}

@test "E1/E6/E7: a detached command that ignores SIGTERM is gone after --timeout plus the grace" {
	agentd_tcp
	local id t0 t1
	t0=$(date +%s%N)
	id=$("$W" exec --detach --timeout 1 -- sh -c \
		'trap "" TERM; sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; while :; do sleep 1; done')
	run --separate-stderr "$W" wait "$id"
	t1=$(date +%s%N)
	assert_status 124
	(((t1 - t0) / 1000000 >= 2900 && (t1 - t0) / 1000000 < 8000)) ||
		{ echo "# took $(((t1 - t0) / 1000000)) ms (timeout 1 s + grace 2 s)" >&3; false; }
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
	run "$PY" "$PYTESTS/wsbcall.py" info "$ADDR" "$id"
	assert_eq "$output" "code=0 signal=9 timed_out=True killed_by=TIMEOUT"
	run --separate-stderr "$W" ps
	assert_contains "$output" "timeout"
}

@test "E7: the server enforces the timeout after its client died (kill -9)" {
	agentd_tcp
	bg client "$PY" "$PYTESTS/wsbcall.py" follow "$ADDR" --timeout-ms 1500 -- \
		sh -c 'sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; sleep 300'
	local client=$BG_PID id
	wait_file "$ROOT/bg.pid"
	wait_file "$ROOT/sh.pid"
	# The command can write its pid files before the client has printed
	# the id the Started event gave it.
	poll_until 10 grep -q '^started ' "$BATS_TEST_TMPDIR/client.out"
	kill -KILL "$client"
	id=$(sed -n 's/^started \([0-9]*\) .*/\1/p' "$BATS_TEST_TMPDIR/client.out")
	[ -n "$id" ]
	# still running after the client is gone (no kill_on_detach) ...
	pod_proc_alive "$(cat "$ROOT/sh.pid")"
	# ... until the timeout
	run "$PY" "$PYTESTS/wsbcall.py" info "$ADDR" "$id"
	assert_eq "$output" "code=0 signal=15 timed_out=True killed_by=TIMEOUT"
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
}

@test "plain exec: Ctrl-C to wsctl kills the remote command (kill_on_detach, killed_by DETACHED)" {
	agentd_tcp
	bg wsctl "$W" exec --tag plain -- sh -c 'sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; sleep 300'
	local w=$BG_PID st=0
	wait_file "$ROOT/bg.pid"
	wait_file "$ROOT/sh.pid"
	kill -INT "$w"
	wait "$w" || st=$?
	assert_eq "$st" 130 "wsctl's exit status"
	pod_wait_gone "$(cat "$ROOT/sh.pid")" 5
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	run "$PY" "$PYTESTS/wsbcall.py" info "$ADDR" plain
	assert_eq "$output" "code=0 signal=9 timed_out=False killed_by=DETACHED"
	# kill -9 of wsctl: the connection drops, the command dies all the same
	bg wsctl2 "$W" exec -- sh -c 'echo $$ > sh2.pid; exec sleep 300'
	wait_file "$ROOT/sh2.pid"
	kill -KILL "$BG_PID"
	pod_wait_gone "$(cat "$ROOT/sh2.pid")" 5
}

@test "E2: 1 MiB in one burst to a slow reader, and to an attach in the middle: byte-exact" {
	agentd_tcp
	head -c 1048576 /dev/urandom >"$ROOT/big"
	run bash -c '"$0" exec -- cat big | (sleep 2; sha256sum)' "$W"
	assert_status 0
	assert_eq "$output" "$(sha256sum <"$ROOT/big")"
	# detached: two bursts a second apart; attach from 0 while it runs, and
	# from the middle of the first burst
	local id
	id=$("$W" exec --detach -- sh -c 'cat big; sleep 1; cat big')
	cat "$ROOT/big" "$ROOT/big" >"$BATS_TEST_TMPDIR/want"
	"$W" attach "$id" >"$BATS_TEST_TMPDIR/a1" &
	local a1=$! i
	# an offset the command has not written yet is OUT_OF_RANGE (like a
	# read past the end of a file), so wait until it has: a1 follows from 0
	for ((i = 0; i < 400; i++)); do
		[ "$(stat -c %s "$BATS_TEST_TMPDIR/a1")" -ge 500000 ] && break
		sleep 0.05
	done
	"$W" attach --from 500000 "$id" >"$BATS_TEST_TMPDIR/a2"
	wait "$a1"
	cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/a1"
	tail -c +500001 "$BATS_TEST_TMPDIR/want" | cmp - "$BATS_TEST_TMPDIR/a2"
}

@test "E3: client killed mid-stream; a second attaches from offset N: the bytes from N, the live tail, the exit" {
	agentd_tcp
	local script='i=0; while [ $i -lt 30 ]; do printf "line %04d\n" $i; i=$((i+1)); sleep 0.1; done; exit 3'
	local i
	for ((i = 0; i < 30; i++)); do printf 'line %04d\n' $i; done >"$BATS_TEST_TMPDIR/want"
	bg client "$PY" "$PYTESTS/wsbcall.py" follow "$ADDR" --tag e3 -- sh -c "$script"
	local client=$BG_PID n=
	# killed once it has seen at least 50 bytes; it resumes from what it saw
	for ((i = 0; i < 200; i++)); do
		n=$(sed -n 's/^stdout //p' "$BATS_TEST_TMPDIR/client.out" | tail -n 1)
		[ "${n:-0}" -ge 50 ] && break
		sleep 0.05
	done
	kill -KILL "$client"
	n=$(sed -n 's/^stdout //p' "$BATS_TEST_TMPDIR/client.out" | tail -n 1)
	[ "$n" -ge 50 ] && [ "$n" -lt 300 ]
	run --separate-stderr "$W" attach --from "$n" e3
	assert_status 3
	assert_eq "$stderr" ""
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/got"
	tail -c +$((n + 1)) "$BATS_TEST_TMPDIR/want" | cmp - "$BATS_TEST_TMPDIR/got"
	run "$PY" "$PYTESTS/wsbcall.py" info "$ADDR" e3
	assert_eq "$output" "code=3 signal=0 timed_out=False killed_by=NOT_KILLED"
}

@test "E3: an offset that fell out of the journal is reported as lost bytes, not skipped" {
	agentd_tcp --journal-size 4096
	head -c 10000 /dev/urandom >"$ROOT/tenk"
	local id
	id=$("$W" exec --detach -- cat tenk)
	"$W" wait "$id"
	run --separate-stderr "$W" attach "$id"
	assert_status 0
	assert_contains "$stderr" "5904 bytes of stdout lost at offset 0"
	"$W" attach "$id" 2>/dev/null | cmp - <(tail -c 4096 "$ROOT/tenk")
	run --separate-stderr "$W" attach --from 8000 "$id"
	assert_eq "$stderr" ""
	run --separate-stderr "$W" -v attach --from 20000 "$id"
	assert_status 125
	assert_contains "$stderr" "OUT_OF_RANGE"
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py SmallJournal
}

@test "E4: output that is not UTF-8 arrives byte-exact, live and replayed" {
	agentd_tcp
	head -c 4096 /dev/urandom >"$ROOT/rand"
	"$W" exec -- cat rand | cmp - "$ROOT/rand"
	local id
	id=$("$W" exec --detach -- sh -c 'cat rand; cat rand >&2')
	"$W" wait "$id"
	"$W" attach "$id" 2>"$BATS_TEST_TMPDIR/err" | cmp - "$ROOT/rand"
	cmp "$BATS_TEST_TMPDIR/err" "$ROOT/rand"
}

@test "E5: stdin streamed with WriteStdin chunks then EOF; heredoc; python3 -; no stdin is EOF" {
	agentd_tcp
	head -c 3000000 /dev/urandom >"$BATS_TEST_TMPDIR/in"
	run bash -c '"$0" exec -i -- sha256sum < "$1"' "$W" "$BATS_TEST_TMPDIR/in"
	assert_status 0
	assert_eq "$output" "$(sha256sum <"$BATS_TEST_TMPDIR/in")"
	# stdin is streamed as it is read: the command sees the first line before EOF
	run bash -c '(echo first; sleep 1; echo second) | "$0" exec -i -- sh -c "read a; echo got-\$a; cat"' "$W"
	assert_eq "$output" $'got-first\nsecond'
	run --separate-stderr "$W" exec --shell -- 'cat <<EOF
heredoc $((1 + 1))
EOF'
	assert_eq "$output" "heredoc 2"
	if command -v python3 >/dev/null; then
		run bash -c 'printf "import sys\nprint(sum(range(10)))\n" | "$0" exec -i -- python3 -' "$W"
		assert_eq "$output" "45"
	fi
	run --separate-stderr timeout 20 "$W" exec -- sh -c 'cat; echo eof'
	assert_eq "$output" "eof"
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Stdin
}

@test "E8: the exit status is kept for --exit-keep, then NOT_FOUND 'unknown process'" {
	agentd_tcp --exit-keep 2
	local id
	id=$("$W" exec --detach --tag e8 -- sh -c 'exit 7')
	sleep 0.5
	run --separate-stderr "$W" wait "$id"
	assert_status 7
	run --separate-stderr "$W" wait e8
	assert_status 7
	run --separate-stderr "$W" ps
	assert_contains "$output" "exit 7"
	sleep 2.5
	run -127 --separate-stderr "$W" -v wait "$id"
	assert_status 127
	assert_contains "$stderr" "NOT_FOUND"
	assert_contains "$stderr" "unknown process $id"
	run -127 --separate-stderr "$W" -v attach e8
	assert_status 127
	assert_contains "$stderr" "unknown process tag 'e8'"
	run --separate-stderr "$W" ps
	assert_not_contains "$output" "exit 7"
	# the tag is free again
	"$W" exec --tag e8 -- true
}

@test "E8: past 256 MiB of kept output the oldest output goes, its exit status stays for --exit-keep" {
	agentd_tcp --journal-size 134217728
	# (not i: bats' run with flags sets a global i, bats_version_lt)
	local ids=() code
	# 3 x 100 MB of journals kept: 300 MB > 256 MiB.
	for code in 11 12 13; do
		ids+=("$("$W" exec --detach -- sh -c "head -c 100000000 /dev/zero; exit $code")")
		run --separate-stderr "$W" wait "${ids[-1]}"
		assert_status "$code"
	done
	# Before: the first record went whole (NOT_FOUND, "no longer kept").
	run --separate-stderr "$W" wait "${ids[0]}"
	assert_status 11
	run --separate-stderr "$W" attach "${ids[0]}"
	assert_status 11
	assert_eq "$output" ""
	assert_contains "$stderr" "100000000 bytes of stdout lost at offset 0"
	# The newest keeps its output.
	assert_eq "$("$W" attach "${ids[2]}" 2>/dev/null | wc -c)" 100000000
}

# cmd_cgroups BASE: how many cmd-* cgroups BASE (a path in the pod) has,
# polled for up to 1 s until none is left.
cmd_cgroups() {
	local i n
	for i in $(seq 20); do
		n=$(pod_run sh -c 'ls -d "$1"/cmd-* 2>/dev/null | wc -l' sh "$1")
		[ "$n" = 0 ] && break
		sleep 0.05
	done
	echo "$n"
}

@test "a command's cgroup goes at its exit; one a dying process holds, when its record goes" {
	agentd_tcp --exit-keep 2
	local cg mnt base i n
	cg=$("$W" exec -- cat /proc/self/cgroup | sed -n 's/^0:://p')
	case $cg in
	*/wsbridge-agentd.*/cmd-*) ;;
	*) skip "no per-command cgroup here ($cg)" ;;
	esac
	mnt=$(pod_run awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
	base=$mnt${cg%/cmd-*}
	# Removed at the exit, well before the records go (--exit-keep 2 s).
	for i in 1 2 3; do "$W" exec -- true; done
	n=$(cmd_cgroups "$base")
	assert_eq "$n" 0 "cmd-* cgroups left under $base after plain commands"
	# Killed trees whose member takes a while to exit (300 MiB to free): at
	# the report the cgroup may still count it, but cgroup.procs no longer
	# lists it, so rmdir says EBUSY; agentd tries again when the record goes.
	for i in 1 2 3; do
		run --separate-stderr "$W" exec --timeout 1 -- sh -c \
			'python3 -c "b = bytearray(300 << 20); import time; time.sleep(100)" >/dev/null 2>&1 & sleep 100'
		assert_status 124
	done
	sleep 2.5
	n=$(cmd_cgroups "$base")
	assert_eq "$n" 0 "cmd-* cgroups left under $base after killed trees and --exit-keep"
}

@test "E9: arguments stay arguments through --detach, attach, ps and List" {
	agentd_tcp
	mkdir "$ROOT/d i r"
	local id
	id=$("$W" exec --detach --cwd 'd i r' -- printf '%s|' 'a b' '$(id)' 'x;y' '"q"')
	"$W" wait "$id"
	run --separate-stderr "$W" attach "$id"
	assert_eq "$output" 'a b|$(id)|x;y|"q"|'
	run --separate-stderr "$W" ps
	assert_contains "$output" "printf '%s|' 'a b' '\$(id)' 'x;y' '\"q\"'"
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Lifecycle.test_list_and_wait
}

@test "E10: a missing program or a cwd outside: a clear error, no process, nothing listed" {
	agentd_tcp
	mkdir -p "$BATS_TEST_TMPDIR/outside"
	ln -s "$BATS_TEST_TMPDIR/outside" "$ROOT/out"
	run -127 --separate-stderr "$W" -v exec --detach -- no-such-program-wsb
	assert_status 127
	assert_contains "$stderr" "NOT_FOUND"
	assert_contains "$stderr" "no-such-program-wsb"
	run --separate-stderr "$W" -v exec --detach --cwd out -- touch pwned
	assert_status 126
	assert_contains "$stderr" "PERMISSION_DENIED"
	assert_contains "$stderr" "outside the workspace root"
	run --separate-stderr "$W" ps
	assert_eq "${#lines[@]}" 1 "ps lines (header only)"
	[ ! -e "$BATS_TEST_TMPDIR/outside/pwned" ]
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Lifecycle.test_unknown_and_bad_refs Lifecycle.test_tags_and_arguments
}

@test "idle timeout: no output for --idle-timeout ends the command; steady output does not" {
	agentd_tcp
	local t0 t1
	t0=$(date +%s%N)
	run --separate-stderr "$W" exec --tag idle --idle-timeout 1 -- sh -c 'echo a; sleep 0.5; echo b; sleep 100'
	t1=$(date +%s%N)
	assert_status 124
	assert_eq "$output" $'a\nb'
	(((t1 - t0) / 1000000 >= 1400 && (t1 - t0) / 1000000 < 5000)) ||
		{ echo "# took $(((t1 - t0) / 1000000)) ms" >&3; false; }
	run "$PY" "$PYTESTS/wsbcall.py" info "$ADDR" idle
	assert_eq "$output" "code=0 signal=15 timed_out=True killed_by=IDLE_TIMEOUT"
	run --separate-stderr "$W" ps
	assert_contains "$output" "idle-timeout"
	run --separate-stderr "$W" exec --idle-timeout 1 -- sh -c 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.3; done'
	assert_status 0
	assert_eq "${#lines[@]}" 6
}

@test "100 concurrent commands each writing 1 MiB: every output byte-exact (sha256)" {
	agentd_tcp
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Concurrency
}

@test "PTY: stty size shows the set size, then the resized one (tmux: SIGWINCH -> Resize); Ctrl-C reaches the command" {
	command -v tmux >/dev/null || skip "no tmux"
	agentd_tcp
	local sock="$BATS_TEST_TMPDIR/tmux" out="$BATS_TEST_TMPDIR/pty.out" i
	tmux -S "$sock" -f /dev/null new-session -d -x 100 -y 30 \
		"$(printf '%q ' "$W" exec -t -- sh -c 'stty size; echo "TERM=$TERM"; while read line; do [ "$line" = quit ] && exit 5; echo "got:$line"; stty size; done') >$(printf '%q' "$out") 2>&1; echo rc=\$? >>$(printf '%q' "$out"); sleep 30"
	WSB_PIDS+=("$(tmux -S "$sock" display-message -p '#{pid}')")
	for ((i = 0; i < 100; i++)); do grep -q TERM= "$out" 2>/dev/null && break; sleep 0.05; done
	assert_eq "$(tr -d '\r' <"$out")" $'30 100\nTERM=tmux-256color'
	tmux -S "$sock" resize-window -x 120 -y 40
	sleep 0.3
	tmux -S "$sock" send-keys 'hello' Enter
	for ((i = 0; i < 100; i++)); do grep -q '40 120' "$out" 2>/dev/null && break; sleep 0.05; done
	assert_eq "$(tr -d '\r' <"$out")" $'30 100\nTERM=tmux-256color\nhello\ngot:hello\n40 120'
	if wsb_runsc; then
		# gVisor 2022's line discipline has no ISIG (^C -> SIGINT) and
		# no canonical EOF (^D): end the loop with a line instead.
		tmux -S "$sock" send-keys quit Enter
		for ((i = 0; i < 100; i++)); do grep -q 'rc=' "$out" 2>/dev/null && break; sleep 0.05; done
		assert_contains "$(cat "$out")" "rc=5"
	else
		# Ctrl-C is a byte in raw mode; the remote terminal makes it SIGINT
		tmux -S "$sock" send-keys C-c
		for ((i = 0; i < 100; i++)); do grep -q 'rc=' "$out" 2>/dev/null && break; sleep 0.05; done
		assert_contains "$(cat "$out")" "rc=130"
	fi
	tmux -S "$sock" kill-server 2>/dev/null || true
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Lifecycle.test_resize
}

@test "PTY: a command that closes its terminal and runs on is not hung up (SIGHUP); stdin's end after a partial line is an EOF" {
	agentd_tcp
	# Its exit, not a hang-up when the last slave fd closed: the master
	# stays open until the command is reaped (before: 129 at once).
	run timeout 20 "$W" exec -t --shell -- 'exec 0<&- 1>&- 2>&-; sleep 1; exit 3'
	assert_status 3
	# wc closes 0-2 before it exits: 2 of 10 were killed before.
	local n
	for ((n = 0; n < 10; n++)); do
		run timeout 20 "$W" exec -t -- wc -l < <(printf 'a\nb\n')
		assert_status 0
		assert_contains "$output" 2
	done
	# One that closed 0-2 and then writes to /dev/tty (a prompt) is read
	# on, not left to fill the terminal's buffer and block (before: it
	# hung until killed).
	run timeout 20 "$W" exec -t --shell -- 'exec 0<&- 1>&- 2>&-; sleep 0.3; head -c 100000 /dev/zero | tr "\0" x >/dev/tty; exit 4'
	assert_status 4
	assert_eq "$(printf '%s' "$output" | tr -d '\r\n' | wc -c)" 100000
	# And one that opens /dev/tty again to read gets what comes on
	# stdin after (before: the write failed, EPIPE, and it hung).
	run timeout 20 "$W" exec -t --shell -- 'exec 0<&- 1>&- 2>&-; sleep 0.5; read l </dev/tty; echo "got $l" >/dev/tty' \
		< <(sleep 1.5; echo hello; sleep 1)
	assert_status 0
	assert_contains "$output" "got hello"
	if wsb_runsc; then
		return # gVisor's line discipline has no canonical EOF (^D)
	fi
	# A line with no newline: one ^D only sends it on; the second is the
	# EOF (before: cat hung).
	run timeout 20 "$W" exec -t -- cat < <(printf hello)
	assert_status 0
	assert_eq "$(printf '%s' "$output" | tr -d '\r')" hellohello
	run timeout 20 "$W" exec -t -- cat < <(printf 'line\n')
	assert_status 0
	assert_eq "$(printf '%s' "$output" | tr -d '\r')" $'line\nline'
}

@test "limits: --max-procs with the limit in the message; tags unique" {
	agentd_tcp --max-procs 2
	local b
	"$W" exec --detach --tag one -- sleep 300
	b=$("$W" exec --detach -- sleep 300)
	run --separate-stderr "$W" -v exec --detach -- sleep 300
	assert_status 125
	assert_contains "$stderr" "RESOURCE_EXHAUSTED"
	assert_contains "$stderr" "limit 2"
	"$W" kill -s KILL "$b"
	"$W" wait "$b" || true
	run --separate-stderr "$W" -v exec --detach --tag one -- true
	assert_status 125
	assert_contains "$stderr" "ALREADY_EXISTS"
	run --separate-stderr "$W" exec -- echo room-again
	assert_status 0
	assert_eq "$output" "room-again"
	"$W" kill -s KILL one
	run --separate-stderr "$W" exec --detach -i -- true
	assert_status 2
}

@test "List and Wait: running and exited commands with argv and start time; wait returns the exit" {
	agentd_tcp
	local a b
	a=$("$W" exec --detach --tag sleeper -- sleep 300)
	b=$("$W" exec --detach -- sh -c 'exit 5')
	[ "$b" -gt "$a" ]
	"$W" wait "$b" || true
	run --separate-stderr "$W" ps
	assert_status 0
	assert_contains "${lines[0]}" "ID"
	assert_contains "$output" "running"
	assert_contains "$output" "sleeper"
	assert_contains "$output" "sleep 300"
	assert_contains "$output" "exit 5"
	assert_contains "$output" "$(date +%Y-%m-%d)"
	run --separate-stderr "$W" wait "$b"
	assert_status 5
	"$W" kill sleeper
	run --separate-stderr "$W" wait sleeper
	assert_status 143
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT run_py test_exec_lifecycle.py Lifecycle.test_attach_replay_and_follow
}

# sleeper_pid SECONDS: the pid of the `sleep SECONDS` running, or nothing.
sleeper_pid() {
	pgrep -x -f "sleep $1" || true
}

# sleepers_gone SECONDS...: no `sleep SECONDS` runs (for poll_until).
sleepers_gone() {
	local s
	for s; do
		[ -z "$(sleeper_pid "$s")" ] || return 1
	done
}

@test "what commands leave running in the background stops with agentd: on SIGTERM, and after SIGKILL at the next agentd's start" {
	wsb_runsc && skip "agentd's children are inside the sandbox, which goes with it"
	agentd_tcp
	local s1=86401 s2=86402 s3=86403 p1 p2 p3 old=$AGENTD_PID
	"$W" exec --shell -- "sleep $s1 >/dev/null 2>&1 </dev/null &"
	p1=$(sleeper_pid $s1)
	[ -n "$p1" ]
	grep -q "wsbridge-agentd\\.$AGENTD_PID" "/proc/$p1/cgroup" || skip "no cgroup v2 for agentd's commands here"
	agentd_stop
	assert_eq "$AGENTD_STATUS" 0
	# Before: moved to agentd's own cgroup, and it ran on.
	poll_until 3 sleepers_gone $s1
	# A command that runs, and a leftover of one that exited, when agentd
	# is killed: nothing can stop them then; the next agentd does.
	agentd_tcp
	"$W" exec --detach -- sleep $s2 >/dev/null
	"$W" exec --shell -- "sleep $s3 >/dev/null 2>&1 </dev/null &"
	p2=$(sleeper_pid $s2)
	p3=$(sleeper_pid $s3)
	[ -n "$p2" ] && [ -n "$p3" ]
	old=$AGENTD_PID
	kill -KILL "$old"
	wait "$old" 2>/dev/null || true
	# The next agentd to start stops them: this test's, or one another
	# test running beside it starts first (before: they ran on for good).
	agentd_tcp
	poll_until 3 sleepers_gone $s2 $s3
}

@test "an agentd in another pid namespace (unshare -p) under the same cgroup does not take a live agentd's cgroup for a dead one's" {
	wsb_runsc && skip "agentd's children are inside the sandbox"
	command -v unshare >/dev/null || skip "no unshare"
	agentd_tcp
	local s=86404 p root2=$BATS_TEST_TMPDIR/root2 sock2=$BATS_TEST_TMPDIR/s2
	"$W" exec --detach -- sleep $s >/dev/null
	p=$(sleeper_pid $s)
	[ -n "$p" ]
	grep -q "wsbridge-agentd\\.$AGENTD_PID" "/proc/$p/cgroup" || skip "no cgroup v2 for agentd's commands here"
	mkdir -p "$root2"
	# There the first agentd's pid names no process: before, the second
	# one killed its commands as a dead agentd's leftovers.
	unshare -pf --mount-proc true 2>/dev/null || skip "cannot make a pid namespace here"
	bg agentd2 unshare -pf --mount-proc "$AGENTD" --root "$root2" --listen "unix:$sock2"
	wait_listen "unix:$sock2" "$BG_PID" 10
	sleep 0.3
	proc_alive "$p"
	run "$W" -a "unix:$sock2" exec -- true
	assert_status 0
	proc_alive "$p"
	kill "$p"
}

@test "agentd reaps orphans re-parented to it (double-forked daemons leave no zombie)" {
	wsb_runsc && skip "agentd's children are inside the sandbox"
	agentd_tcp
	run --separate-stderr "$W" exec -- sh -c '(sleep 0.5 >/dev/null 2>&1 &); echo started'
	assert_eq "$output" "started"
	sleep 1.5
	run ps --ppid "$AGENTD_PID" -o pid=,stat=,comm=
	assert_not_contains "$output" " Z"
}
