#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# Binary-safe round trips: wsctl put, then wsctl get, then cmp, for an empty
# file, one byte, 10 MiB of random bytes and a 1 GiB sparse file (which must
# stay sparse on both sides), over loopback TCP and over a unix socket.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	L="$BATS_TEST_TMPDIR/local"
	mkdir -p "$ROOT" "$L"
}

teardown() {
	wsb_teardown
}

# sparse_cmp A B: the same size and the same bytes, comparing only where
# either file has data (SEEK_DATA/SEEK_HOLE): exact, and fast for 1 GiB of
# holes, which read as zeros on both sides.
sparse_cmp() {
	"$PY" - "$1" "$2" <<-'EOF'
	import os, sys
	def extents(fd, size):
	    out, pos = [], 0
	    while pos < size:
	        try:
	            d = os.lseek(fd, pos, os.SEEK_DATA)
	        except OSError:
	            break
	        h = os.lseek(fd, d, os.SEEK_HOLE)
	        out.append((d, h))
	        pos = h
	    return out
	a, b = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
	sa, sb = os.fstat(a).st_size, os.fstat(b).st_size
	if sa != sb:
	    sys.exit("sizes differ: %d != %d" % (sa, sb))
	for d, h in sorted(extents(a, sa) + extents(b, sb)):
	    while d < h:
	        n = min(h - d, 1 << 20)
	        if os.pread(a, n, d) != os.pread(b, n, d):
	            sys.exit("bytes differ in [%d, %d)" % (d, d + n))
	        d += n
	EOF
}

# round_trip FILE: put $L/FILE as remote FILE, get it back as $L/FILE.back,
# and compare all three byte for byte.
round_trip() {
	run --separate-stderr "$WSCTL" put "$L/$1" "$1"
	assert_status 0
	assert_eq "$stderr" "" "put's stderr"
	assert_eq "$(stat -c %s "$ROOT/$1")" "$(stat -c %s "$L/$1")" "remote size"
	${CMP:-cmp} "$L/$1" "$ROOT/$1"
	run --separate-stderr "$WSCTL" get "$1" "$L/$1.back"
	assert_status 0
	assert_eq "$stderr" "" "get's stderr"
	assert_eq "$(stat -c %s "$L/$1.back")" "$(stat -c %s "$L/$1")" "local size"
	${CMP:-cmp} "$L/$1" "$L/$1.back"
	# No temp file was left on either side.
	assert_eq "$(ls -A "$ROOT")" "$1" "remote directory"
	assert_eq "$(find -H "$L" -mindepth 1 -maxdepth 1 ! -name "$1" -printf '%f\n' | LC_ALL=C sort)" "$1.back" "local directory"
}

small_files() {
	local f
	for f in empty one nl; do
		case $f in
		empty) : >"$L/$f" ;;
		one) printf '\0' >"$L/$f" ;;
		nl) printf '\n' >"$L/$f" ;;
		esac
		round_trip "$f"
		rm "$ROOT/$f" "$L/$f.back"
		mv "$L/$f" "$BATS_TEST_TMPDIR/$f.done"
	done
}

random_10m() {
	head -c 10485760 /dev/urandom >"$L/rand"
	round_trip rand
	# The same bytes through cat and put from stdin.
	"$WSCTL" cat rand | cmp - "$L/rand"
	"$WSCTL" put - rand2 <"$L/rand"
	cmp "$L/rand" "$ROOT/rand2"
}

sparse_1g() {
	local CMP=sparse_cmp
	truncate -s 1G "$L/sparse"
	round_trip sparse
	assert_eq "$(stat -c %s "$ROOT/sparse")" 1073741824 "remote size"
	assert_eq "$(stat -c %s "$L/sparse.back")" 1073741824 "local size"
	[ "$(alloc_kib "$ROOT/sparse")" -lt 1024 ] || { du -k "$ROOT/sparse" >&3; false; }
	[ "$(alloc_kib "$L/sparse.back")" -lt 1024 ] || { du -k "$L/sparse.back" >&3; false; }
	rm "$ROOT/sparse" "$L/sparse.back"

	# Data islands in the holes: at the start, the middle and the last byte.
	printf 'head' | dd of="$L/sparse" conv=notrunc status=none
	printf 'middle' | dd of="$L/sparse" bs=1 seek=536870912 conv=notrunc status=none
	printf 'Z' | dd of="$L/sparse" bs=1 seek=1073741823 conv=notrunc status=none
	round_trip sparse
	[ "$(alloc_kib "$ROOT/sparse")" -lt 1024 ] || { du -k "$ROOT/sparse" >&3; false; }
	[ "$(alloc_kib "$L/sparse.back")" -lt 1024 ] || { du -k "$L/sparse.back" >&3; false; }
}

@test "round trips over TCP: empty, 1 byte, newline" {
	agentd_tcp
	small_files
}

@test "round trips over a unix socket: empty, 1 byte, newline" {
	agentd_unix
	small_files
}

@test "round trip over TCP: 10 MiB random" {
	agentd_tcp
	random_10m
}

@test "round trip over a unix socket: 10 MiB random" {
	agentd_unix
	random_10m
}

@test "round trip over TCP: 1 GiB sparse stays sparse" {
	agentd_tcp
	sparse_1g
}

@test "round trip over a unix socket: 1 GiB sparse stays sparse" {
	agentd_unix
	sparse_1g
}

@test "put over an existing file is atomic: a reader sees the old or the new content" {
	agentd_unix
	head -c 4194304 /dev/zero | tr '\0' 'o' >"$ROOT/f"
	head -c 4194304 /dev/zero | tr '\0' 'n' >"$L/new"
	# Read the remote file in a loop while it is replaced.
	bg reader bash -c 'while :; do tr -s on <"$0"; echo; done' "$ROOT/f"
	"$WSCTL" put "$L/new" f
	sleep 0.2
	kill -TERM -- "-$BG_PID"
	cmp "$L/new" "$ROOT/f"
	run sort -u "$BATS_TEST_TMPDIR/reader.out"
	[[ "$output" == n || "$output" == o || "$output" == $'n\no' ]] || { echo "# reader saw: $output" >&3; false; }
}

@test "put into a file system that keeps no count of its blocks (ramfs) is not refused for room" {
	if wsb_runsc; then
		skip "mounts ramfs on the host side of the sandbox's workspace"
	fi
	[ "$(id -u)" = 0 ] || skip "mounting ramfs needs root"
	mkdir "$ROOT/r"
	mount -t ramfs ramfs "$ROOT/r" || skip "cannot mount ramfs here"
	agentd_unix
	head -c 100000 /dev/urandom >"$L/f"
	local same=no
	run --separate-stderr "$WSCTL" put "$L/f" r/f
	cmp -s "$L/f" "$ROOT/r/f" && same=yes
	umount "$ROOT/r" # before any assertion: the test's directory goes after it
	assert_status 0
	assert_eq "$same" yes "the file put into ramfs"
}

@test "get writes into what LOCAL is, as cp does: a device, a FIFO, a symlink's target, a hard-linked file; a plain file keeps its mode" {
	agentd_unix
	echo remote >"$ROOT/s"
	# A character device (a copy of /dev/null): a rename over it would
	# make it a plain file (as root, over /dev/null itself).
	mknod "$L/null" c 1 3 || skip "cannot mknod here"
	"$WSCTL" get s "$L/null"
	assert_eq "$(stat -c '%F %t:%T' "$L/null")" "character special file 1:3"
	# A FIFO: its reader gets the bytes.
	mkfifo "$L/fifo"
	bg fiforeader cat "$L/fifo"
	"$WSCTL" get s "$L/fifo"
	wait_gone "$BG_PID" 5
	assert_eq "$(stat -c %F "$L/fifo")" fifo
	assert_content "$BATS_TEST_TMPDIR/fiforeader.out" $'remote\n'
	# A symlink: the link stays, its target gets the bytes; a dangling
	# one is refused, as cp refuses it (before: it made the target).
	echo old >"$L/target"
	ln -s target "$L/link"
	ln -s made "$L/dangling"
	"$WSCTL" get s "$L/link"
	run --separate-stderr "$WSCTL" get s "$L/dangling"
	assert_status 1
	assert_contains "$stderr" "not writing through dangling symlink"
	[ -L "$L/link" ] && [ -L "$L/dangling" ]
	assert_content "$L/target" $'remote\n'
	[ ! -e "$L/made" ]
	# Hard links stay one file.
	echo a >"$L/h1"
	ln "$L/h1" "$L/h2"
	"$WSCTL" get s "$L/h1"
	assert_content "$L/h2" $'remote\n'
	assert_eq "$(stat -c %h "$L/h1")" 2
	# A plain file is replaced atomically, keeping its mode.
	echo x >"$L/p"
	chmod 700 "$L/p"
	"$WSCTL" get s "$L/p"
	assert_content "$L/p" $'remote\n'
	assert_eq "$(stat -c %a "$L/p")" 700
	# No temp file left behind.
	assert_eq "$(find "$L" -name '.*wsctl-*' | wc -l)" 0
}

@test "get into another name of the very file it reads (a hard link beside a local workspace) keeps its bytes; over a larger hard-linked file it leaves the new bytes exactly, holes too" {
	agentd_unix
	# 6 MiB of data, a 3 MiB hole, 2 MiB of data: several chunks.
	head -c 6291456 /dev/urandom >"$ROOT/f"
	truncate -s +3M "$ROOT/f"
	head -c 2097152 /dev/urandom >>"$ROOT/f"
	cp --sparse=always "$ROOT/f" "$BATS_TEST_TMPDIR/orig"
	ln "$ROOT/f" "$L/link"
	"$WSCTL" get f "$L/link"
	# Before: the file was emptied at the first chunk, and agentd then
	# read the zeros and the end of what was left.
	cmp "$BATS_TEST_TMPDIR/orig" "$ROOT/f"
	# Over another file with two names, 16 MiB of other bytes: the new
	# ones, its size, zeros in the hole.
	head -c 16777216 /dev/urandom >"$L/h1"
	ln "$L/h1" "$L/h2"
	"$WSCTL" get f "$L/h1"
	cmp "$BATS_TEST_TMPDIR/orig" "$L/h2"
	assert_eq "$(stat -c %h "$L/h1")" 2
	assert_eq "$(find "$L" -name '.*wsctl-*' | wc -l)" 0
}

@test "get -r never writes through a symlink or FIFO in its tree (the pod made them by an earlier get -r): it replaces them" {
	agentd_unix
	mkdir "$ROOT/tree"
	ln -s "$BATS_TEST_TMPDIR/outside" "$ROOT/tree/y"
	echo victim >"$BATS_TEST_TMPDIR/victim"
	ln -s "$BATS_TEST_TMPDIR/victim" "$ROOT/tree/x"
	# (gVisor's gofer refuses a FIFO made on the host, EPERM: there the
	# local FIFO is made as an earlier get -r would have made it)
	if wsb_runsc; then
		mkdir "$L/tree"
		mkfifo "$L/tree/f"
	else
		mkfifo "$ROOT/tree/f"
	fi
	"$WSCTL" get -r tree "$L/"
	[ -L "$L/tree/y" ] && [ -L "$L/tree/x" ] && [ -p "$L/tree/f" ]
	# The pod makes them files; the same get -r again.
	rm -f "$ROOT/tree/x" "$ROOT/tree/y" "$ROOT/tree/f"
	echo pod-y >"$ROOT/tree/y"
	echo pod-x >"$ROOT/tree/x"
	echo pod-f >"$ROOT/tree/f"
	timeout 20 "$WSCTL" get -r tree "$L/"
	# Before: outside made and victim overwritten with the pod's bytes
	# (and the FIFO's write would block).
	[ ! -e "$BATS_TEST_TMPDIR/outside" ]
	assert_content "$BATS_TEST_TMPDIR/victim" $'victim\n'
	assert_content "$L/tree/y" $'pod-y\n'
	assert_content "$L/tree/x" $'pod-x\n'
	assert_content "$L/tree/f" $'pod-f\n'
	[ ! -L "$L/tree/y" ] && [ ! -L "$L/tree/x" ] && [ ! -p "$L/tree/f" ]
}

@test "put and get: a /proc file of size 0 is read to its end; a sparse file larger than the free space fits; closed stdin or stdout is EBADF; a 250-byte name" {
	agentd_unix
	# /proc reports size 0 for what it holds (before: an empty file).
	"$WSCTL" put /proc/self/status st
	grep -q '^Pid:' "$ROOT/st"
	# 1 TiB of apparent size, 3 bytes of data: agentd checks room for
	# what the file takes (before: ENOSPC past the free space).
	truncate -s 1T "$L/sp"
	echo hi >>"$L/sp"
	"$WSCTL" put "$L/sp" sp
	assert_eq "$(stat -c %s "$ROOT/sp")" 1099511627779
	assert_eq "$(tail -c 3 "$ROOT/sp")" hi
	# fd 0 or 1 closed: gRPC's first descriptor took its number before,
	# and put read it (a hang), get wrote into it.
	run --separate-stderr timeout 10 bash -c 'exec "$0" put - x <&-' "$WSCTL"
	assert_status 1
	assert_contains "$stderr" "Bad file descriptor"
	[ ! -e "$ROOT/x" ]
	run --separate-stderr timeout 10 bash -c 'exec "$0" get st - >&-' "$WSCTL"
	assert_status 1
	assert_contains "$stderr" "Bad file descriptor"
	# Any output to a closed stdout fails as ls >&- does (the fd held
	# for it is read-only).
	run --separate-stderr timeout 10 bash -c 'exec "$0" ls >&-' "$WSCTL"
	assert_status 1
	assert_contains "$stderr" "write error on standard output: Bad file descriptor"
	# A reader that goes: quiet, 141 as cat (before: "Broken pipe", 1).
	head -c 5000000 /dev/urandom >"$ROOT/big"
	run --separate-stderr bash -c '"$0" get big - | head -c1 >/dev/null; echo "${PIPESTATUS[0]}"' "$WSCTL"
	assert_eq "$output" 141
	assert_eq "$stderr" ""
	# A name of 250 bytes: the temp name beside it stays within NAME_MAX.
	local n
	n=$(printf 'n%.0s' $(seq 250))
	echo long >"$ROOT/$n"
	"$WSCTL" get "$n" "$L/"
	assert_content "$L/$n" $'long\n'
	assert_eq "$(find "$L" -name '.*wsctl-*' | wc -l)" 0
}

@test "put: an agentd killed in the middle of an upload leaves no temp file in the workspace" {
	# (gVisor's gofer makes no O_TMPFILE files: there a named temp file
	# stays, as it did everywhere before)
	wsb_runsc && skip "kills agentd outside the sandbox; the gofer has no O_TMPFILE"
	agentd_unix
	local w
	bg putter sh -c '{ head -c 2000000 /dev/urandom; sleep 30; } | "$1" put - big' sh "$WSCTL"
	w=$BG_PID
	# The upload's file is open in agentd (a descriptor below the root,
	# "ROOT/#123 (deleted)" or "ROOT/.wsb-upload.X"; the root's own has
	# no slash after it).
	poll_until 10 bash -c 'ls -l /proc/$1/fd | grep -qF -- "$2/"' _ "$AGENTD_PID" "$ROOT"
	sleep 0.5
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# Before: .wsb-upload.XXXXXX, 2 MB, stayed for good.
	assert_eq "$(find "$ROOT" -mindepth 1 | wc -l)" 0
	kill -KILL -- "-$w" 2>/dev/null || true
}

@test "put: where the unnamed temp file cannot be linked (no /proc) the upload still lands, copied into a named one" {
	wsb_runsc && skip "runs agentd outside the sandbox"
	skip_sanitized "the sanitizers need /proc (they read /proc/self/maps)"
	unshare -m true 2>/dev/null || skip "cannot make a mount namespace here"
	local sock=$BATS_TEST_TMPDIR/np
	bg agentd_noproc unshare -m sh -c 'umount -l /proc && exec "$0" --root "$1" --listen "unix:$2"' \
		"$AGENTD" "$ROOT" "$sock"
	wait_listen "unix:$sock" "$BG_PID" 10
	head -c 3000000 /dev/urandom >"$L/src"
	truncate -s +1M "$L/src"
	"$WSCTL" -a "unix:$sock" put "$L/src" f
	cmp "$L/src" "$ROOT/f"
	assert_eq "$(find "$ROOT" -name '.wsb-upload.*' | wc -l)" 0
	# The reply's attributes are the file's in place, not those of the
	# unnamed file it was copied from.
	run "$PY" - "unix:$sock" "$ROOT/g" <<-'EOF'
	import os, sys
	import wsbtest
	from wsbtest import pb, pbg
	ws = pbg.WorkspaceStub(wsbtest.channel(sys.argv[1]))
	r = ws.Upload(iter([pb.UploadChunk(header=pb.UploadHeader(path=b"g"), data=b"data",
	                                   commit=True)]), timeout=15)
	print(r.attr.ino == os.stat(sys.argv[2]).st_ino, r.size)
	EOF
	assert_eq "$output" "True 4"
}

@test "put - from a pipe that says nothing ends at SIGTERM at once: exit 143, no file" {
	agentd_unix
	local fifo=$BATS_TEST_TMPDIR/in p
	mkfifo "$fifo"
	bg putter sh -c '"$1" put - idle <"$2"; echo "$?" >"$3"' sh "$WSCTL" "$fifo" "$BATS_TEST_TMPDIR/rc"
	exec 7>"$fifo"
	# Anchored: the sh -c around it says "put - idle" too, before wsctl
	# has started.
	poll_until 10 pgrep -f "^$WSCTL put - idle"
	p=$(pgrep -f "^$WSCTL put - idle")
	[ -n "$p" ]
	sleep 0.3 # its upload stream is open
	kill -TERM "$p"
	# Before: it waited in read(2) of its stdin until the pipe spoke or
	# closed (sleep 30 | wsctl put - x ran the whole 30 s).
	if ! poll_until 3 test -s "$BATS_TEST_TMPDIR/rc"; then
		exec 7>&-
		return 1
	fi
	exec 7>&-
	assert_eq "$(cat "$BATS_TEST_TMPDIR/rc")" 143
	[ ! -e "$ROOT/idle" ]
}

@test "put of more than the stream's window to a path agentd refuses fails at once with agentd's error, not a hang" {
	agentd_unix
	head -c 8388608 /dev/urandom >"$L/big"
	echo x >"$ROOT/file"
	# agentd ends the Upload at its first message; the rest of the 8 MiB
	# no longer fits the flow-control window, and the client waited for
	# a status that gRPC gave only once it was asked to receive.
	run --separate-stderr timeout 30 "$WSCTL" put "$L/big" nodir/big
	assert_status 1
	assert_eq "$stderr" "wsctl: put 'nodir/big': No such file or directory (NOT_FOUND)"
	run --separate-stderr timeout 30 "$WSCTL" put "$L/big" file/big
	assert_status 1
	assert_contains "$stderr" "Not a directory"
	assert_eq "$(ls -A "$ROOT")" file
}

@test "a frozen agentd (SIGSTOP) ends get, put and exec -i with an error within seconds, not a hang, and a signal ends them at once; a quiet exec, one with stdin it does not read and one whose reader pauses run on" {
	wsb_runsc && skip "stops agentd outside the sandbox"
	agentd_unix
	local W=("$WSCTL" --rpc-timeout 1) q b r t0 g p e i s rc
	# Alive first, for several times --rpc-timeout, while wsctl waits
	# with nothing coming (health checks every second), with its stdin
	# held back, and while it does not read at all (a pager: gRPC's
	# keepalive pings would have had their acks go unread, and the
	# connection cut).
	bg quiet "${W[@]}" exec -- sh -c 'sleep 5; echo quiet'
	q=$BG_PID
	bg blocked sh -c 'yes | "$@" exec -i -- sh -c "sleep 5; echo blocked"' sh "${W[@]}"
	b=$BG_PID
	bg reader sh -c '"$@" exec -- head -c 5000000 /dev/zero | { sleep 5; wc -c; }' sh "${W[@]}"
	r=$BG_PID
	wait "$q" || { cat "$BATS_TEST_TMPDIR/quiet.err" >&3; false; }
	wait "$b" || { cat "$BATS_TEST_TMPDIR/blocked.err" >&3; false; }
	wait "$r" || { cat "$BATS_TEST_TMPDIR/reader.err" >&3; false; }
	assert_content "$BATS_TEST_TMPDIR/quiet.out" $'quiet\n'
	assert_content "$BATS_TEST_TMPDIR/blocked.out" $'blocked\n'
	assert_content "$BATS_TEST_TMPDIR/reader.out" $'5000000\n'

	head -c 33554432 /dev/urandom >"$ROOT/big"
	# Two uploads that never end, one without health checks
	# (--rpc-timeout 0), and two commands whose stdin never ends
	# (WriteStdin calls of 256 KiB, from a file): agentd stops once all
	# are under way, their sends stuck in the middle of a message.
	bg put sh -c 'cat /dev/zero | "$@" put - up' sh "${W[@]}"
	p=$BG_PID
	bg stuck sh -c 'cat /dev/zero | exec timeout -s KILL 20 "$@" put - up0' sh "$WSCTL" --rpc-timeout 0
	s=$BG_PID
	truncate -s 64G "$BATS_TEST_TMPDIR/zeros"
	bg exec sh -c 'timeout 30 "$@" exec -i -- sh -c "touch in; exec cat >/dev/null" <"$0"' \
		"$BATS_TEST_TMPDIR/zeros" "${W[@]}"
	e=$BG_PID
	bg execint sh -c 'exec timeout -s KILL 20 "$@" exec -i -- sh -c "touch in2; exec cat >/dev/null" <"$0"' \
		"$BATS_TEST_TMPDIR/zeros" "$WSCTL" --rpc-timeout 30
	i=$BG_PID
	poll_until 10 bash -c '[ "$(ls -l /proc/$1/fd | grep -cF -- "$2/")" -ge 2 ]' _ "$AGENTD_PID" "$ROOT"
	poll_until 10 test -e "$ROOT/in"
	poll_until 10 test -e "$ROOT/in2"
	sleep 0.5
	kill -STOP "$AGENTD_PID"
	t0=$(now_ms)
	# (Before: each waited for good; a stream has no deadline.)
	bg get timeout 30 "${W[@]}" get big "$L/got"
	g=$BG_PID
	# A signal ends a put whose bytes cannot be written, and an exec -i
	# whose WriteStdin waits (before: wsctl took SIGTERM and waited on;
	# then 30 s, for the health check).
	sleep 1
	kill -TERM "$(pgrep -f "^$WSCTL --rpc-timeout 0 put - up0")"
	kill -INT "$(pgrep -f "^$WSCTL --rpc-timeout 30 exec -i")"
	rc=0; wait "$s" || rc=$?
	assert_eq "$rc" 143 "put's exit status at SIGTERM"
	rc=0; wait "$i" || rc=$?
	assert_eq "$rc" 130 "exec -i's exit status at SIGINT"
	[ $(($(now_ms) - t0)) -lt 5000 ] || { echo "signals took $(($(now_ms) - t0)) ms" >&3; false; }
	rc=0; wait "$g" || rc=$?
	assert_eq "$rc" 1 "get's exit status"
	rc=0; wait "$p" || rc=$?
	assert_eq "$rc" 1 "put's exit status"
	rc=0; wait "$e" || rc=$?
	assert_eq "$rc" 125 "exec's exit status"
	for f in get put exec; do
		grep -F "agentd does not answer" "$BATS_TEST_TMPDIR/$f.err"
	done
	# rpc_timeout 1 s: a health check after 1 s of waiting, of 1 s.
	[ $(($(now_ms) - t0)) -lt 15000 ] || { echo "took $(($(now_ms) - t0)) ms" >&3; false; }
	kill -CONT "$AGENTD_PID"
	# Nothing landed, no temp file on either side.
	poll_until 5 bash -c 'test "$(ls -A "$1" | tr "\n" " ")" = "big in in2 "' _ "$ROOT"
	assert_eq "$(ls -A "$L")" "" "local directory"
}
