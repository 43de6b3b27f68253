#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsctl's file commands and health against a real agentd on loopback TCP:
# cat, put, get, ls, stat, mkdir, rm, mv, health; the address options; exit
# statuses and messages for bad input. Exec is in exec.bats, large and
# sparse transfers in transfer.bats.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	L="$BATS_TEST_TMPDIR/local"
	mkdir -p "$ROOT" "$L"
	agentd_tcp
}

teardown() {
	wsb_teardown
	if [ -n "${NOBODY_DIR:-}" ]; then
		rm -rf "$NOBODY_DIR"
	fi
}

@test "wsctl health prints SERVING and exits 0" {
	run --separate-stderr "$WSCTL" health
	assert_status 0
	assert_eq "$output" "SERVING"
	assert_eq "$stderr" ""
	run --separate-stderr "$WSCTL" health extra
	assert_status 2
	assert_eq "$output" ""
}

@test "wsctl health with nothing listening fails with a message" {
	local port
	port=$(free_port)
	run --separate-stderr timeout 40 "$WSCTL" -a "127.0.0.1:$port" health
	assert_status 1
	assert_eq "$output" ""
	assert_contains "$stderr" "UNAVAILABLE"
}

@test "wsctl reaches agentd by every address form: unix path, unix URI, IPv4, IPv6, host name" {
	local sock="$BATS_TEST_TMPDIR/s" p6 a forms
	agentd_stop
	PORT=$(free_port)
	p6=$(free_port)
	forms=("unix:$sock" "unix://$sock" "127.0.0.1:$PORT" "localhost:$PORT")
	if [[ -z ${WSB_RUNSC:-} ]] && ip -6 addr show lo 2>/dev/null | grep -q '::1/128'; then
		agentd_start --root "$ROOT" --listen "127.0.0.1:$PORT" --listen "unix:$sock" \
			--listen "[::1]:$p6"
		forms+=("[::1]:$p6")
	else
		agentd_start --root "$ROOT" --listen "127.0.0.1:$PORT" --listen "unix:$sock"
	fi
	echo hello >"$ROOT/f"
	# wsctl connects unix and IP-literal addresses itself (client.h
	# "direct") and host names through gRPC's resolver: each must work.
	for a in "${forms[@]}"; do
		run --separate-stderr "$WSCTL" -a "$a" cat f
		assert_status 0
		assert_eq "$output" "hello"
		run --separate-stderr "$WSCTL" -a "$a" exec -- sh -c 'echo out; exit 7'
		assert_status 7
		assert_eq "$output" "out"
	done
	# A socket path nobody listens on: gRPC's own UNAVAILABLE, as before.
	run --separate-stderr timeout 40 "$WSCTL" -a "unix:$BATS_TEST_TMPDIR/nobody" cat f
	assert_status 1
	assert_contains "$stderr" "UNAVAILABLE"
}

@test "wsctl takes the address from -a, else from \$WSBRIDGE_ADDR" {
	local port
	port=$(free_port)
	run --separate-stderr "$WSCTL" -a "$ADDR" health
	assert_status 0
	assert_eq "$output" "SERVING"
	run --separate-stderr env WSBRIDGE_ADDR="$ADDR" "$WSCTL" health
	assert_status 0
	assert_eq "$output" "SERVING"
	# -a wins over the environment.
	run --separate-stderr env WSBRIDGE_ADDR="127.0.0.1:$port" "$WSCTL" -a "$ADDR" health
	assert_status 0
	run --separate-stderr env WSBRIDGE_ADDR="127.0.0.1:$port" "$WSCTL" health
	assert_status 1
	assert_contains "$stderr" "UNAVAILABLE"
}

@test "wsctl usage errors exit 2 with a message on stderr" {
	run --separate-stderr "$WSCTL"
	assert_status 2
	assert_contains "$stderr" "no command"
	run --separate-stderr "$WSCTL" frobnicate
	assert_status 2
	assert_contains "$stderr" "frobnicate"
	run --separate-stderr "$WSCTL" cat
	assert_status 2
	run --separate-stderr "$WSCTL" put onlyone
	assert_status 2
	run --separate-stderr "$WSCTL" get a b c
	assert_status 2
	run --separate-stderr "$WSCTL" mv a
	assert_status 2
	run --separate-stderr "$WSCTL" stat
	assert_status 2
	run --separate-stderr "$WSCTL" mkdir
	assert_status 2
	run --separate-stderr "$WSCTL" ls --bogus
	assert_status 2
	run --separate-stderr "$WSCTL" -a 127.0.0.1:99999 health
	assert_status 2
	assert_contains "$stderr" "port must be a number from 1 to 65535"
	WSBRIDGE_ADDR=localhost run --separate-stderr "$WSCTL" health
	assert_status 2
	assert_contains "$stderr" "no port"
	# Milliseconds past a uint32_t: refused, not wrapped round.
	run --separate-stderr "$WSCTL" --rpc-timeout 4294968 health
	assert_status 2
	assert_contains "$stderr" "--rpc-timeout wants seconds from 0 to 4294967"
	run --separate-stderr "$WSCTL" --help
	assert_status 0
	assert_contains "$output" "Usage: wsctl"
	assert_eq "$stderr" ""
}

@test "wsctl cat writes remote files to stdout, byte-exact" {
	printf 'one\ntwo\n' >"$ROOT/a.txt"
	printf 'no newline' >"$ROOT/b.txt"
	: >"$ROOT/empty"
	head -c 70000 /dev/urandom >"$ROOT/bin"
	run --separate-stderr "$WSCTL" cat a.txt
	assert_status 0
	assert_eq "$output" $'one\ntwo'
	run --separate-stderr "$WSCTL" cat a.txt b.txt empty /a.txt
	assert_status 0
	assert_eq "$output" $'one\ntwo\nno newlineone\ntwo'
	"$WSCTL" cat bin >"$L/bin"
	cmp "$ROOT/bin" "$L/bin"
	"$WSCTL" cat empty >"$L/empty"
	[ ! -s "$L/empty" ]
}

@test "wsctl cat of a missing file or a directory fails; the others still print" {
	echo hi >"$ROOT/hi"
	mkdir "$ROOT/d"
	run --separate-stderr "$WSCTL" cat missing.txt
	assert_status 1
	assert_eq "$output" ""
	assert_eq "$stderr" "wsctl: cat 'missing.txt': No such file or directory (NOT_FOUND)"
	run --separate-stderr "$WSCTL" cat missing.txt hi
	assert_status 1
	assert_eq "$output" "hi"
	run --separate-stderr "$WSCTL" cat d
	assert_status 1
	assert_eq "$output" ""
	assert_contains "$stderr" "wsctl: cat 'd': Is a directory"
}

@test "wsctl put uploads a file, keeps its mode, and puts into a directory" {
	printf 'hello\n' >"$L/h.txt"
	chmod 640 "$L/h.txt"
	run --separate-stderr "$WSCTL" put "$L/h.txt" h.txt
	assert_status 0
	assert_eq "$output" ""
	assert_eq "$stderr" ""
	cmp "$L/h.txt" "$ROOT/h.txt"
	assert_eq "$(stat -c %a "$ROOT/h.txt")" 640 "mode"
	mkdir "$ROOT/dir"
	run --separate-stderr "$WSCTL" put "$L/h.txt" dir
	assert_status 0
	cmp "$L/h.txt" "$ROOT/dir/h.txt"
	# Overwrite replaces the content entirely, and keeps the mode of the
	# file there, as cp(1) does.
	printf 'x' >"$L/short"
	chmod 600 "$L/short"
	chmod 604 "$ROOT/h.txt"
	run --separate-stderr "$WSCTL" put "$L/short" h.txt
	assert_status 0
	assert_eq "$(cat "$ROOT/h.txt")" "x"
	assert_eq "$(stat -c %a "$ROOT/h.txt")" 604 "mode of the file put over"
	# A mode that works out to 0 stays 0, as cp(1) makes it (before: 644,
	# a locked-down file arriving readable by all): a file of mode 000,
	# one under umask 777, and one in a tree.
	printf 's\n' >"$L/secret"
	chmod 000 "$L/secret"
	"$WSCTL" put "$L/secret" secret
	assert_eq "$(stat -c %a "$ROOT/secret")" 0 "mode of a mode 000 file put"
	chmod 600 "$L/secret"
	(umask 777 && "$WSCTL" put "$L/secret" masked)
	assert_eq "$(stat -c %a "$ROOT/masked")" 0 "mode under umask 777"
	mkdir -p "$L/t/sub"
	cp "$L/secret" "$L/t/sub/x"
	chmod 000 "$L/t/sub/x"
	"$WSCTL" put -r "$L/t" t
	assert_eq "$(stat -c %a "$ROOT/t/sub/x")" 0 "mode of a mode 000 file in put -r"
	rm -rf "$ROOT/secret" "$ROOT/masked" "$ROOT/t"
	# No temp files left behind.
	assert_eq "$(ls -A "$ROOT")" $'dir\nh.txt'
	assert_eq "$(ls -A "$ROOT/dir")" "h.txt"
}

@test "wsctl put writes through a remote symlink to a file, as cp(1); a dangling one fails" {
	mkdir "$ROOT/d"
	printf 'old\n' >"$ROOT/d/target"
	ln -s d/target "$ROOT/link"
	printf 'new\n' >"$L/n"
	run --separate-stderr "$WSCTL" put "$L/n" link
	assert_status 0
	assert_eq "$(cat "$ROOT/d/target")" new "the file the link leads to"
	assert_eq "$(readlink "$ROOT/link")" d/target "the link stays"
	ln -s nowhere "$ROOT/dangling"
	run --separate-stderr "$WSCTL" put "$L/n" dangling
	assert_status 1
	# As cp(1) says it (it said "No such file or directory").
	assert_eq "$stderr" "wsctl: put: not writing through dangling symlink 'dangling'"
	assert_eq "$(readlink "$ROOT/dangling")" nowhere "the dangling link stays"
	assert_eq "$(ls -A "$ROOT")" $'d\ndangling\nlink' "nothing made for the dangling link"
	# A link leading out of the workspace is refused, nothing written.
	ln -s ../../outside "$ROOT/d/out"
	run --separate-stderr "$WSCTL" put "$L/n" d/out
	assert_status 1
	assert_contains "$stderr" "escapes the workspace root"
	assert_eq "$(ls -A "$ROOT/d")" $'out\ntarget' "no temp file left"
}

@test "wsctl put from stdin: a pipe, and a file read from where it stands" {
	run --separate-stderr bash -c 'printf "from stdin" | "$0" put - s.txt' "$WSCTL"
	assert_status 0
	assert_eq "$(cat "$ROOT/s.txt")" "from stdin"
	# A regular file on stdin: what a script read first is not sent, and
	# the upload leaves it at its end, as cat(1) would.
	printf 'header\nline2\nline3\n' >"$L/in"
	run --separate-stderr bash -c '{ read -r h; "$0" put - rest.txt; echo "after: $(cat)"; } <"$1"' \
		"$WSCTL" "$L/in"
	assert_status 0
	assert_eq "$output" "after: "
	assert_eq "$(cat "$ROOT/rest.txt")" $'line2\nline3'
}

@test "wsctl put failures: missing local file, local directory, missing remote dir" {
	run --separate-stderr "$WSCTL" put "$L/nope" x
	assert_status 1
	assert_contains "$stderr" "nope"
	assert_contains "$stderr" "No such file or directory"
	run --separate-stderr "$WSCTL" put "$L" x
	assert_status 1
	assert_contains "$stderr" "Is a directory"
	echo a >"$L/a"
	run --separate-stderr "$WSCTL" put "$L/a" no/such/dir/a
	assert_status 1
	assert_contains "$stderr" "NOT_FOUND"
	assert_eq "$(ls -A "$ROOT")" "" "root after failed puts"
}

@test "wsctl get of a directory without -r says -r copies it, and leaves nothing; -a with --exec is a usage error; a local failure says so" {
	mkdir "$ROOT/d"
	run --separate-stderr "$WSCTL" get d "$L/d"
	assert_status 1
	assert_eq "$stderr" "wsctl: get 'd': Is a directory (get -r copies a directory)"
	[ ! -e "$L/d" ]
	# (It said "get 'd': Is a directory (FAILED_PRECONDITION)".)
	run --separate-stderr "$WSCTL" get -r d -
	assert_status 2
	assert_eq "$stderr" "wsctl: get -r: a directory tree cannot go to standard output (-)"
	run --separate-stderr "$WSCTL" -a "$WSBRIDGE_ADDR" --exec "true" ls
	assert_status 2
	assert_contains "$stderr" "wsctl: -a and --exec both say how to reach agentd: give one"
	# A failure on this side is not given a status of agentd's.
	head -c 100000 /dev/urandom >"$ROOT/rnd"
	run --separate-stderr "$WSCTL" cat rnd
	assert_status 0
	run --separate-stderr bash -c '"$0" cat rnd >/dev/full' "$WSCTL"
	assert_status 1
	assert_eq "$stderr" "wsctl: cat 'rnd': No space left on device (on this host, not in the pod)"
}

@test "wsctl get downloads a file with its mode, into a file, a directory or stdout" {
	printf 'remote\n' >"$ROOT/r.txt"
	chmod 604 "$ROOT/r.txt"
	run --separate-stderr "$WSCTL" get r.txt "$L/r.txt"
	assert_status 0
	assert_eq "$output" ""
	assert_eq "$stderr" ""
	cmp "$ROOT/r.txt" "$L/r.txt"
	assert_eq "$(stat -c %a "$L/r.txt")" "$(printf '%o' $((0604 & ~0$(umask))))" "mode"
	mkdir "$L/into"
	run --separate-stderr "$WSCTL" get r.txt "$L/into"
	assert_status 0
	cmp "$ROOT/r.txt" "$L/into/r.txt"
	run --separate-stderr "$WSCTL" get r.txt -
	assert_status 0
	assert_eq "$output" "remote"
	assert_eq "$(ls -A "$L")" $'into\nr.txt'
}

@test "wsctl put -r and get -r copy a tree as cp -r does: modes, symlinks, FIFOs, holes, empty directories" {
	umask 022
	mkdir -p "$L/t/a/b" "$L/t/empty"
	printf 'one\n' >"$L/t/a/f"
	chmod 640 "$L/t/a/f"
	chmod 750 "$L/t/a/b"
	ln -s ../f "$L/t/a/b/link"
	ln -s /etc/passwd "$L/t/abs"
	mkfifo "$L/t/fifo"
	truncate -s 8M "$L/t/sparse"
	printf 'x' | dd of="$L/t/sparse" bs=1 seek=4000000 conv=notrunc status=none
	run --separate-stderr "$WSCTL" put -r "$L/t" tree
	assert_status 0
	assert_eq "$stderr" ""
	# LOCAL and ROOT/tree the same: names, types, modes, link targets.
	listing() { (cd "$1" && find . -printf '%p %y %m %l %s\n' | sort); }
	assert_eq "$(listing "$ROOT/tree")" "$(listing "$L/t")"
	cmp "$L/t/sparse" "$ROOT/tree/sparse"
	[ "$(alloc_kib "$ROOT/tree/sparse")" -lt 1024 ] # holes kept
	# Into an existing directory: REMOTE/NAME, as cp -r.
	run --separate-stderr "$WSCTL" put -r "$L/t" tree
	assert_status 0
	[ -d "$ROOT/tree/t/a/b" ]
	rm -rf "$ROOT/tree/t"
	run --separate-stderr "$WSCTL" get -r tree "$L/back"
	assert_status 0
	assert_eq "$stderr" ""
	assert_eq "$(listing "$L/back")" "$(listing "$L/t")"
	cmp "$L/t/sparse" "$L/back/sparse"
	[ "$(alloc_kib "$L/back/sparse")" -lt 1024 ]
	mkdir "$L/into"
	run --separate-stderr "$WSCTL" get -r tree/a "$L/into"
	assert_status 0
	assert_eq "$(cat "$L/into/a/f")" "one"
	# Without -r a directory is refused, with a hint.
	run --separate-stderr "$WSCTL" put "$L/t" other
	assert_status 1
	assert_contains "$stderr" "put -r"
	[ ! -e "$ROOT/other" ]
}

@test "wsctl get -r and put -r of a symlink or a FIFO copy it as itself, as cp -r does" {
	mkdir -p "$ROOT/d" "$L/ld" "$L/into"
	echo in >"$ROOT/d/f"
	ln -s d "$ROOT/in"
	ln -s /etc "$ROOT/out"
	mkfifo "$ROOT/fifo"
	for n in in out fifo; do
		run --separate-stderr "$WSCTL" get -r "$n" "$L/$n"
		assert_status 0
		assert_eq "$stderr" ""
	done
	run --separate-stderr "$WSCTL" get -r in "$L/into"
	assert_status 0
	assert_eq "$(readlink "$L/in") $(readlink "$L/out") $(readlink "$L/into/in")" "d /etc d"
	[ -p "$L/fifo" ]
	ln -s ld "$L/lin"
	ln -s /etc "$L/lout"
	mkfifo "$L/lfifo"
	for n in lin lout lfifo; do
		# (A FIFO opened for reading would wait for a writer.)
		run --separate-stderr timeout 10 "$WSCTL" put -r "$L/$n" "$n"
		assert_status 0
		assert_eq "$stderr" ""
	done
	assert_eq "$(readlink "$ROOT/lin") $(readlink "$ROOT/lout")" "ld /etc"
	[ -p "$ROOT/lfifo" ]
	assert_eq "$(ls -A "$ROOT")" $'d\nfifo\nin\nlfifo\nlin\nlout\nout'
	# A file in the way is replaced, as cp -r replaces it; a directory is
	# not (into it, when named; else an error).
	echo old >"$L/file"
	echo old >"$ROOT/file"
	run --separate-stderr "$WSCTL" get -r in "$L/file"
	assert_status 0
	assert_eq "$(readlink "$L/file")" d
	run --separate-stderr timeout 10 "$WSCTL" put -r "$L/lfifo" file
	assert_status 0
	[ -p "$ROOT/file" ]
	mkdir -p "$L/get/t/in2" "$L/put/t" "$ROOT/t/lin"
	ln -s d "$ROOT/t/in2"
	run --separate-stderr "$WSCTL" get -r t "$L/get"
	assert_status 1
	assert_eq "$stderr" "wsctl: get '$L/get/t/in2': cannot overwrite a directory with a non-directory"
	[ -d "$L/get/t/in2" ] && [ -d "$L/get/t/lin" ]
	ln -s ld "$L/put/t/lin"
	run --separate-stderr "$WSCTL" put -r "$L/put/t" .
	assert_status 1
	assert_eq "$stderr" "wsctl: put './t/lin': cannot overwrite a directory with a non-directory"
	[ -d "$ROOT/t/lin" ]
}

@test "wsctl put -r copies a read-only directory to an agentd that is not root (filled, then given its mode, as cp -r)" {
	local d got
	agentd_nobody
	d=$NOBODY_DIR
	mkdir -p "$L/ro/sub"
	echo data >"$L/ro/file"
	echo deep >"$L/ro/sub/f2"
	chmod 555 "$L/ro/sub" "$L/ro"
	# shellcheck disable=SC2153 # NOBODY_ADDR: set by agentd_nobody
	run --separate-stderr "$WSCTL" -a "$NOBODY_ADDR" put -r "$L/ro" ro
	got=$(cat "$d/root/ro/file" "$d/root/ro/sub/f2" 2>&1; stat -c %a "$d/root/ro" "$d/root/ro/sub" 2>&1) || true
	chmod -R u+w "$L/ro"
	assert_status 0
	assert_eq "$stderr" ""
	assert_eq "$got" $'data\ndeep\n555\n555'
}

@test "wsctl get -r and put -r: what they cannot copy is reported, the rest copied, exit 1; a local symlink is not followed" {
	mkdir -p "$ROOT/s/d" "$L/out" "$L/dst"
	echo in >"$ROOT/s/d/f"
	echo ok >"$ROOT/s/g"
	# LOCAL/dst/d is a symlink out of the destination: get -r must not
	# write through it.
	ln -s "$L/out" "$L/dst/d"
	run --separate-stderr "$WSCTL" get -r s/. "$L/dst"
	assert_status 1
	assert_contains "$stderr" "d"
	assert_eq "$(ls -A "$L/out")" ""
	assert_eq "$(cat "$L/dst/g")" "ok"
	# A socket cannot be put: skipped with a message, the rest copied.
	mkdir "$L/p"
	echo a >"$L/p/a"
	"$PY" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$L/p/sock"
	run --separate-stderr "$WSCTL" put -r "$L/p" p
	assert_status 1
	assert_contains "$stderr" "sock"
	assert_contains "$stderr" "skipped"
	assert_eq "$(cat "$ROOT/p/a")" "a"
	[ ! -e "$ROOT/p/sock" ]
}

@test "wsctl get -r copies directories without write permission (as cp -r: filled, then given their mode); put -r does not follow a remote symlink where a directory goes" {
	mkdir -p "$ROOT/t/ro/inner"
	echo a >"$ROOT/t/ro/g"
	chmod 555 "$ROOT/t/ro/inner" "$ROOT/t/ro"
	# (A directory nobody may write to: the test's own is below 0700 ones.)
	local d
	d=$(mktemp -d /tmp/wsctl-nobody.XXXXXX)
	chmod 777 "$d"
	run --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$WSCTL" get -r t "$d/g"
	local got
	got=$(cat "$d/g/ro/g" 2>&1; stat -c %a "$d/g/ro" "$d/g/ro/inner" 2>&1) || true
	chmod -R u+w "$d"
	rm -rf "$d"
	assert_status 0
	assert_eq "$stderr" ""
	assert_eq "$got" $'a\n555\n555'
	# The remote P/ps/d is a symlink to P/tgt: put -r reports it and
	# leaves tgt alone, as cp -r refuses to write through one.
	mkdir -p "$L/ps/d" "$ROOT/P/ps" "$ROOT/P/tgt"
	echo new >"$L/ps/d/f"
	ln -s ../tgt "$ROOT/P/ps/d"
	run --separate-stderr "$WSCTL" put -r "$L/ps" P
	assert_status 1
	assert_contains "$stderr" "not a directory"
	assert_eq "$(ls -A "$ROOT/P/tgt")" ""
}

@test "wsctl get of a missing file fails and leaves nothing behind" {
	echo keep >"$L/existing"
	run --separate-stderr "$WSCTL" get missing "$L/existing"
	assert_status 1
	assert_eq "$stderr" "wsctl: get 'missing': No such file or directory (NOT_FOUND)"
	assert_eq "$(cat "$L/existing")" "keep"
	run --separate-stderr "$WSCTL" get missing "$L/new"
	assert_status 1
	assert_eq "$(ls -A "$L")" "existing"
	# Written in place (a file with two names, a symlink that leads
	# nowhere): untouched when the download cannot begin.
	ln "$L/existing" "$L/twin"
	ln -s nowhere "$L/dangling"
	mkdir "$ROOT/dir"
	for what in missing dir; do
		run --separate-stderr "$WSCTL" get "$what" "$L/twin"
		assert_status 1
		run --separate-stderr "$WSCTL" get "$what" "$L/dangling"
		assert_status 1
	done
	assert_eq "$(cat "$L/existing")" "keep"
	[ ! -e "$L/nowhere" ]
	# And emptied first when it can: a shorter file leaves no old tail.
	printf 'x' >"$ROOT/short"
	run --separate-stderr "$WSCTL" get short "$L/twin"
	assert_status 0
	assert_eq "$(cat "$L/existing")" "x"
}

@test "wsctl fails when its output cannot be written (a full disk), as coreutils do" {
	echo a >"$ROOT/f"
	for c in "ls" "ls -l" "stat f" "cat f" "ps" "health"; do
		# shellcheck disable=SC2086 # the command and its argument
		run --separate-stderr "$WSCTL" $c
		assert_status 0
		# shellcheck disable=SC2086
		run --separate-stderr bash -c '"$@" >/dev/full' "$WSCTL" "$WSCTL" $c
		assert_status 1
		assert_contains "$stderr" "No space left on device"
	done
}

@test "wsctl ls lists names sorted, one per line; ls -l shows modes and sizes" {
	mkdir -p "$ROOT/d/sub"
	printf '12345' >"$ROOT/d/b.txt"
	printf '' >"$ROOT/d/a.txt"
	chmod 600 "$ROOT/d/b.txt"
	ln -s b.txt "$ROOT/d/link"
	touch "$ROOT/d/.hidden" "$ROOT/d/with space"
	run --separate-stderr "$WSCTL" ls d
	assert_status 0
	assert_eq "$output" $'.hidden\na.txt\nb.txt\nlink\nsub\nwith space'
	run --separate-stderr "$WSCTL" ls
	assert_status 0
	assert_eq "$output" "d"
	run --separate-stderr "$WSCTL" ls /
	assert_status 0
	assert_eq "$output" "d"
	run --separate-stderr "$WSCTL" ls d/b.txt
	assert_status 0
	assert_eq "$output" "d/b.txt"

	run --separate-stderr "$WSCTL" ls -l d
	assert_status 0
	local lines
	mapfile -t lines <<<"$output"
	assert_eq "${#lines[@]}" 7 "lines of ls -l"
	[[ "${lines[0]}" =~ ^total\ [0-9]+$ ]]
	[[ "${lines[2]}" =~ ^-rw-r--r--\ +1\ +[0-9]+\ +[0-9]+\ +0\ .*\ a\.txt$ ]] || { echo "# ${lines[2]}" >&3; false; }
	[[ "${lines[3]}" =~ ^-rw-------\ +1\ +[0-9]+\ +[0-9]+\ +5\ .*\ b\.txt$ ]] || { echo "# ${lines[3]}" >&3; false; }
	[[ "${lines[4]}" =~ ^l.*\ link\ -\>\ b\.txt$ ]] || { echo "# ${lines[4]}" >&3; false; }
	[[ "${lines[5]}" =~ ^d.*\ sub$ ]] || { echo "# ${lines[5]}" >&3; false; }
}

@test "wsctl ls, ls -l and stat quote names on a terminal as ls(1) does: an escape sequence or a newline from the pod reaches it as text" {
	command -v script >/dev/null || skip "no script(1)"
	mkdir "$ROOT/d"
	touch "$ROOT/d/$(printf 'red\033[31mX')" "$ROOT/d/$(printf 'a\nb')" "$ROOT/d/it's" \
		"$ROOT/d/plain.txt" "$ROOT/d/sp ace" "$ROOT/d/$(printf 'c1\302\2332J')" \
		"$ROOT/d/$(printf 'bad\377')" "$ROOT/d/$(printf 'caf\303\251')" "$ROOT/d/k=v"
	ln -s "$(printf 'b\007l')" "$ROOT/d/lnk"
	# script(1) gives wsctl a terminal (and turns its \n into \r\n).
	run script -qec "$WSCTL ls d" /dev/null
	assert_status 0
	# (A C1 control, U+009B, is an escape sequence's start to a terminal
	# too; a byte of no valid UTF-8 is shown as its octal; é as it is.)
	assert_eq "${output//$'\r'/}" "'a'\$'\\n''b'
'bad'\$'\\377'
'c1'\$'\\302\\233''2J'
$(printf 'caf\303\251')
'it'\\''s'
'k=v'
lnk
plain.txt
'red'\$'\\033''[31mX'
'sp ace'"
	run script -qec "$WSCTL ls -l d" /dev/null
	assert_status 0
	[[ "${output//$'\r'/}" == *" lnk -> 'b'\$'\\a''l'"* ]] || { echo "# $output" >&3; false; }
	[[ "$output" != *$'\033'* && "$output" != *$'\a'* ]] || { echo "# $output" | cat -A >&3; false; }
	run script -qec "$WSCTL stat d/lnk" /dev/null
	assert_status 0
	[[ "${output//$'\r'/}" == *"File: d/lnk"* ]] || { echo "# $output" >&3; false; }
	# To a pipe, names go as they are (ls(1) too).
	run --separate-stderr "$WSCTL" ls d
	assert_eq "$output" "$(printf 'a\nb')
$(printf 'bad\377')
$(printf 'c1\302\2332J')
$(printf 'caf\303\251')
it's
k=v
lnk
plain.txt
$(printf 'red\033[31mX')
sp ace"
}

@test "wsctl ls of a symlink to a directory lists the directory; ls -l shows the link, unless it ends in /, as ls(1)" {
	mkdir "$ROOT/d"
	touch "$ROOT/d/x"
	ln -s d "$ROOT/ld"
	run --separate-stderr "$WSCTL" ls ld
	assert_status 0
	assert_eq "$output" "x"
	run --separate-stderr "$WSCTL" ls -l ld
	assert_status 0
	[[ "$output" =~ ^l[rwx-]{9}\ .*\ ld\ -\>\ d$ ]] || { echo "# $output" >&3; false; }
	run --separate-stderr "$WSCTL" ls -l ld/
	assert_status 0
	[[ "${lines[1]}" =~ ^-.*\ x$ ]] || { echo "# $output" >&3; false; }
}

@test "an empty path names nothing: every file command fails ENOENT and touches nothing; rm -f ignores it" {
	echo keep >"$ROOT/a"
	local c
	for c in "ls ''" "ls -l ''" "stat ''" "cat ''" "mkdir ''" "mkdir -p ''" "rm ''" "rm -r ''" \
		"mv a ''" "mv '' a" "get '' $BATS_TEST_TMPDIR/x" "put /etc/hostname ''"; do
		eval "run --separate-stderr \"\$WSCTL\" $c"
		assert_status 1
		assert_eq "$output" "" "stdout of $c"
		[[ "$stderr" =~ ^wsctl:\ [a-z]+\ \'\':\ No\ such\ file\ or\ directory$ ]] ||
			{ echo "# $c: $stderr" >&3; false; }
	done
	run --separate-stderr "$WSCTL" rm -rf ''
	assert_status 0
	assert_eq "$stderr" ""
	assert_eq "$(ls -A "$ROOT")" "a"
	assert_content "$ROOT/a" $'keep\n'
	[ ! -e "$BATS_TEST_TMPDIR/x" ]
}

@test "wsctl ls of a large directory lists every entry" {
	mkdir "$ROOT/many"
	(cd "$ROOT/many" && seq -f 'f%05g' 1 3000 | xargs touch)
	run --separate-stderr "$WSCTL" ls many
	assert_status 0
	assert_eq "$output" "$(seq -f 'f%05g' 1 3000)"
}

@test "wsctl ls of a missing path fails" {
	run --separate-stderr "$WSCTL" ls nope
	assert_status 1
	assert_eq "$output" ""
	assert_eq "$stderr" "wsctl: ls 'nope': No such file or directory (NOT_FOUND)"
}

@test "a time past 2262 (ext4 keeps them; beyond int64 nanoseconds) is shown exactly by stat and ls -l" {
	: >"$ROOT/future"
	touch -d @10413792000.25 "$ROOT/future" # 2300-01-01 00:00:00.25 UTC
	[ "$(stat -c %Y "$ROOT/future")" = 10413792000 ] || skip "this file system cannot keep the year 2300"
	run --separate-stderr "$WSCTL" stat future
	assert_status 0
	assert_contains "$output" $'\n'"Modify: $(date -d @10413792000 '+%Y-%m-%d %H:%M:%S').250000000 "
	run --separate-stderr "$WSCTL" ls -l future
	assert_status 0
	assert_contains "$output" " $(date -d @10413792000 '+%b %e  %Y') future"
	run --separate-stderr "$WSCTL" health
	assert_eq "$output" SERVING
}

@test "wsctl stat shows type, mode, size, inode, links and times, birth too" {
	printf '1234567' >"$ROOT/f"
	chmod 751 "$ROOT/f"
	touch -d '2021-02-03 04:05:06.123456789' "$ROOT/f"
	ln "$ROOT/f" "$ROOT/hard"
	run --separate-stderr "$WSCTL" stat f
	assert_status 0
	local ino want_mtime
	ino=$(pod_run find "$ROOT/f" -printf %i)
	want_mtime=$(date -d '2021-02-03 04:05:06' '+%Y-%m-%d %H:%M:%S').123456789\ $(date -d '2021-02-03 04:05:06' +%z)
	assert_contains "$output" "  File: f"$'\n'"  Type: regular file"$'\n'"  Mode: 0751 (-rwxr-x--x)"$'\n'"  Size: 7"$'\n'
	assert_contains "$output" $'\n'" Inode: $ino"$'\n'" Links: 2"$'\n'"   Uid: $(id -u)"$'\n'"   Gid: $(id -g)"$'\n'
	assert_contains "$output" $'\n'"Modify: $want_mtime"
	# stat(1)'s %w has wsctl's format; "-" where the file system keeps
	# no birth time (gVisor, where Debian's stat(1) also fails: EINVAL).
	local birth
	birth=$(pod_run stat -c %w "$ROOT/f" 2>/dev/null) || birth=-
	assert_contains "$output" $'\n'" Birth: $birth"
	mkdir "$ROOT/dd"
	ln -s f "$ROOT/sl"
	run --separate-stderr "$WSCTL" stat dd sl
	assert_status 0
	assert_contains "$output" "  File: dd"$'\n'"  Type: directory"
	assert_contains "$output" "  File: sl"$'\n'"  Type: symbolic link"$'\n'"  Mode: 0777 (lrwxrwxrwx)"$'\n'"  Size: 1"
	run --separate-stderr "$WSCTL" stat -L sl
	assert_status 0
	assert_contains "$output" "  Type: regular file"$'\n'"  Mode: 0751 (-rwxr-x--x)"$'\n'"  Size: 7"
}

@test "wsctl stat of a missing path fails; the others still print" {
	echo x >"$ROOT/x"
	run --separate-stderr "$WSCTL" stat nope x
	assert_status 1
	assert_eq "$stderr" "wsctl: stat 'nope': No such file or directory (NOT_FOUND)"
	assert_contains "$output" "  File: x"
}

@test "wsctl mkdir makes directories; -p makes parents and accepts existing ones" {
	run --separate-stderr "$WSCTL" mkdir a
	assert_status 0
	assert_eq "$output$stderr" ""
	[ -d "$ROOT/a" ]
	assert_eq "$(stat -c %a "$ROOT/a")" "$(printf '%o' $((0777 & ~0$(umask))))" "mode"
	run --separate-stderr "$WSCTL" mkdir a
	assert_status 1
	assert_eq "$stderr" "wsctl: mkdir 'a': File exists (ALREADY_EXISTS)"
	run --separate-stderr "$WSCTL" mkdir x/y/z
	assert_status 1
	assert_contains "$stderr" "NOT_FOUND"
	[ ! -e "$ROOT/x" ]
	run --separate-stderr "$WSCTL" mkdir -p x/y/z a b/
	assert_status 0
	[ -d "$ROOT/x/y/z" ] && [ -d "$ROOT/b" ]
	touch "$ROOT/file"
	run --separate-stderr "$WSCTL" mkdir -p file/sub
	assert_status 1
	# As coreutils' mkdir -p (it said "File exists").
	assert_eq "$stderr" "wsctl: mkdir 'file': Not a directory"
	[ -f "$ROOT/file" ]
	run --separate-stderr "$WSCTL" mkdir -p file
	assert_status 1
	assert_eq "$stderr" "wsctl: mkdir 'file': File exists (ALREADY_EXISTS)"
	ln -s nowhere "$ROOT/dl"
	run --separate-stderr "$WSCTL" mkdir -p dl/x
	assert_status 1
	assert_eq "$stderr" "wsctl: mkdir 'dl': File exists (ALREADY_EXISTS)"
	rm "$ROOT/dl"
	# "." and ".." as mkdir -p takes them; one that climbs out is refused
	# for that (it said "mkdir 'x1/..': Invalid argument").
	run --separate-stderr "$WSCTL" mkdir -p x1/../y1 ./c/./d
	assert_status 0
	[ -d "$ROOT/x1" ] && [ -d "$ROOT/y1" ] && [ -d "$ROOT/c/d" ]
	run --separate-stderr "$WSCTL" mkdir -p q/../../out
	assert_status 1
	assert_eq "$stderr" "wsctl: mkdir 'q/../../out': 'q/../../out' escapes the workspace root (PERMISSION_DENIED)"
	# Through a symlink that leads out: the escape is what it says (it
	# said "File exists"), and nothing is made outside.
	ln -s "$L" "$ROOT/outlink"
	run --separate-stderr "$WSCTL" mkdir -p outlink/new
	assert_status 1
	assert_eq "$stderr" "wsctl: mkdir 'outlink': 'outlink' escapes the workspace root (PERMISSION_DENIED)"
	[ ! -e "$L/new" ]
}

@test "wsctl rm removes files; -r trees; -f ignores missing; directories need -r" {
	mkdir -p "$ROOT/t/a/b" "$ROOT/e"
	touch "$ROOT/t/a/b/f" "$ROOT/t/g" "$ROOT/one" "$ROOT/two"
	ln -s /nonexistent "$ROOT/t/dangling"
	run --separate-stderr "$WSCTL" rm one two
	assert_status 0
	assert_eq "$output$stderr" ""
	[ ! -e "$ROOT/one" ] && [ ! -e "$ROOT/two" ]
	run --separate-stderr "$WSCTL" rm t
	assert_status 1
	assert_eq "$stderr" "wsctl: rm 't': Is a directory"
	[ -d "$ROOT/t" ]
	run --separate-stderr "$WSCTL" rm missing
	assert_status 1
	assert_eq "$stderr" "wsctl: rm 'missing': No such file or directory (NOT_FOUND)"
	run --separate-stderr "$WSCTL" rm -f missing
	assert_status 0
	assert_eq "$stderr" ""
	run --separate-stderr "$WSCTL" rm -r t e
	assert_status 0
	assert_eq "$(ls -A "$ROOT")" ""
	run --separate-stderr "$WSCTL" rm -r /
	assert_status 1
	assert_contains "$stderr" "root"
}

@test "wsctl rm -r leaves an outside tree alone when it meets a symlink" {
	mkdir -p "$ROOT/t" "$BATS_TEST_TMPDIR/outside"
	touch "$BATS_TEST_TMPDIR/outside/keep"
	ln -s ../../outside "$ROOT/t/up"
	ln -s "$BATS_TEST_TMPDIR/outside" "$ROOT/t/abs"
	run --separate-stderr "$WSCTL" rm -r t
	assert_status 0
	[ ! -e "$ROOT/t" ]
	[ -f "$BATS_TEST_TMPDIR/outside/keep" ]
}

@test "wsctl mv renames files and directories, replaces, and moves into a directory" {
	echo a >"$ROOT/a"
	echo b >"$ROOT/b"
	mkdir -p "$ROOT/d/inner" "$ROOT/into"
	run --separate-stderr "$WSCTL" mv a c
	assert_status 0
	assert_eq "$output$stderr" ""
	[ ! -e "$ROOT/a" ] && [ "$(cat "$ROOT/c")" = a ]
	run --separate-stderr "$WSCTL" mv c b
	assert_status 0
	assert_eq "$(cat "$ROOT/b")" a
	run --separate-stderr "$WSCTL" mv d e
	assert_status 0
	[ -d "$ROOT/e/inner" ] && [ ! -e "$ROOT/d" ]
	run --separate-stderr "$WSCTL" mv b into
	assert_status 0
	assert_eq "$(cat "$ROOT/into/b")" a
	run --separate-stderr "$WSCTL" mv nope x
	assert_status 1
	assert_eq "$stderr" "wsctl: mv 'nope' to 'x': No such file or directory (NOT_FOUND)"
	assert_eq "$(ls -A "$ROOT")" $'e\ninto'
	# "--" ends the options, as with every command that takes some.
	echo dash >"$ROOT/-f"
	run --separate-stderr "$WSCTL" mv -- -f g
	assert_status 0
	run --separate-stderr "$WSCTL" cat -- g
	assert_status 0
	assert_eq "$output" dash
}

@test "wsctl mv and put: a name ending in / must be a directory; nothing is replaced" {
	echo victim >"$ROOT/victim"
	echo keep >"$ROOT/keep"
	echo new >"$L/new"
	mkdir "$ROOT/dir"
	run --separate-stderr "$WSCTL" mv victim keep/
	assert_status 1
	assert_eq "$stderr" "wsctl: mv 'victim' to 'keep/': Not a directory (NOT_FOUND)"
	run --separate-stderr "$WSCTL" mv victim newname/
	assert_status 1
	run --separate-stderr "$WSCTL" mv victim/ moved
	assert_status 1
	run --separate-stderr "$WSCTL" put "$L/new" keep/
	assert_status 1
	assert_eq "$stderr" "wsctl: put 'keep/': Not a directory (NOT_FOUND)"
	assert_eq "$(cat "$ROOT/victim") $(cat "$ROOT/keep")" "victim keep"
	# A directory may be named so, and moved to a new name so.
	run --separate-stderr "$WSCTL" mv dir/ dir2/
	assert_status 0
	[ -d "$ROOT/dir2" ] && [ ! -e "$ROOT/dir" ]
	run --separate-stderr "$WSCTL" put "$L/new" dir2/
	assert_status 0
	assert_eq "$(cat "$ROOT/dir2/new")" new
	assert_eq "$(ls -A "$ROOT")" $'dir2\nkeep\nvictim'
}

@test "wsctl mv of a file onto itself or into itself fails as mv(1) does" {
	echo a >"$ROOT/f"
	ln "$ROOT/f" "$ROOT/link"
	mkdir -p "$ROOT/d/sub"
	# rename(2) of a name onto itself, or onto another link of its file,
	# succeeds doing nothing: mv(1) reports it instead.
	run --separate-stderr "$WSCTL" mv f /
	assert_status 1
	assert_eq "$stderr" "wsctl: mv: 'f' and '/f' are the same file"
	run --separate-stderr "$WSCTL" mv f .
	assert_status 1
	assert_eq "$stderr" "wsctl: mv: 'f' and './f' are the same file"
	run --separate-stderr "$WSCTL" mv f link
	assert_status 1
	assert_eq "$stderr" "wsctl: mv: 'f' and 'link' are the same file"
	run --separate-stderr "$WSCTL" mv d d/sub
	assert_status 1
	assert_eq "$stderr" "wsctl: mv: cannot move 'd' to a subdirectory of itself, 'd/sub/d'"
	run --separate-stderr "$WSCTL" mv d d/new
	assert_status 1
	assert_eq "$stderr" "wsctl: mv: cannot move 'd' to a subdirectory of itself, 'd/new'"
	[ -f "$ROOT/f" ] && [ -f "$ROOT/link" ] && [ -d "$ROOT/d/sub" ]
	assert_eq "$(stat -c %h "$ROOT/f")" 2
}

@test "wsctl handles names with spaces, quotes, newlines and non-UTF-8 bytes" {
	local n1="sp ace 'q' \"d\" \$(x);y" n2=$'nl\nname' n3=$'bad\xff\xfe'
	printf 'content' >"$L/src"
	for n in "$n1" "$n2" "$n3"; do
		run --separate-stderr "$WSCTL" put "$L/src" "$n"
		assert_status 0
		cmp "$L/src" "$ROOT/$n"
		run --separate-stderr "$WSCTL" cat "$n"
		assert_eq "$output" "content"
		run --separate-stderr "$WSCTL" mv "$n" "$n.moved"
		assert_status 0
		[ -f "$ROOT/$n.moved" ]
		run --separate-stderr "$WSCTL" rm "$n.moved"
		assert_status 0
	done
	assert_eq "$(ls -A "$ROOT")" ""
}
