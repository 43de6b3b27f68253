#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsfs under real tools and real sizes: git on a tree of 2,000 files (G4 at
# scale), a 4 GiB sparse file, a directory of 20,000 entries listed exactly
# once each, and concurrent writers in separate processes (own files plus
# one shared O_APPEND log). Each test mounts its own agentd.

load test_helper

# No test may hang the suite.
BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-240}

setup() {
	need_wsfs
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
	agentd_unix
	mount_wsfs
}

teardown() {
	fs_teardown
}

# timed WHAT CMD...: run CMD with `run`, record how long it took in TIMES.
timed() {
	local what=$1 t0
	shift
	t0=$(now_ms)
	run --separate-stderr "$@"
	TIMES+="$what=$(($(now_ms) - t0))ms "
	ALL_ERR+="$output$stderr"
}

@test "git: init, add 2000 files, commit, status, checkout, gc, fsck, three rounds" {
	git_env
	local r="$MNT/repo"
	TIMES='' ALL_ERR=''
	mkdir "$r"
	timed init git -C "$r" init -q
	assert_status 0
	"$PY" - "$r" <<-'EOF'
	import os, sys
	r = sys.argv[1]
	for d in range(20):
	    os.mkdir(os.path.join(r, "dir%02d" % d))
	    for f in range(100):
	        with open(os.path.join(r, "dir%02d" % d, "file%03d.txt" % f), "w") as fh:
	            fh.write("dir %d file %d\n%s\n" % (d, f, "x" * (f * 13 % 700)))
	EOF
	timed add git -C "$r" add -A
	assert_status 0
	timed commit git -C "$r" commit -q -m "2000 files"
	assert_status 0
	timed status git -C "$r" status --porcelain
	assert_status 0
	assert_eq "$output" "" "status after the first commit"
	assert_eq "$(git -C "$r" ls-files | wc -l)" 2000 "files in the index"

	local round i
	for round in 1 2 3; do
		for i in 0 1 2 3 4 5 6 7 8 9; do
			echo "round $round" >>"$r/dir0$i/file00$i.txt"
		done
		for i in 1 2 3 4 5; do
			echo new >"$r/dir1$i/new$round.txt"
		done
		rm "$r/dir19/file0${round}0.txt"
		timed "status$round" git -C "$r" status --porcelain
		assert_status 0
		assert_eq "$(printf '%s\n' "$output" | grep -c '^ M ')" 10 "modified in round $round"
		assert_eq "$(printf '%s\n' "$output" | grep -c '^?? ')" 5 "untracked in round $round"
		assert_eq "$(printf '%s\n' "$output" | grep -c '^ D ')" 1 "deleted in round $round"
		timed "add$round" git -C "$r" add -A
		assert_status 0
		timed "commit$round" git -C "$r" commit -q -m "round $round"
		assert_status 0
		timed "clean$round" git -C "$r" status --porcelain
		assert_status 0
		assert_eq "$output" "" "status after round $round"
		timed "gc$round" git -C "$r" gc --quiet
		assert_status 0
	done
	# Checkout rewrites files; --progress runs git's SIGALRM progress timer.
	timed checkout git -C "$r" checkout --progress -q -b old HEAD~3
	assert_status 0
	assert_content "$r/dir00/file000.txt" $'dir 0 file 0\n\n' "file after checkout"
	[ -e "$r/dir19/file010.txt" ]
	[ ! -e "$r/dir11/new1.txt" ]
	timed checkout-back git -C "$r" checkout --progress -q main
	assert_status 0
	timed fsck git -C "$r" fsck --strict
	assert_status 0
	timed final-status git -C "$r" status --porcelain
	assert_eq "$output" ""
	assert_eq "$(git -C "$r" rev-list --count HEAD)" 4 "commits"
	run git -C "$r" count-objects -v
	assert_contains "$output" "count: 0" "no loose objects after gc"
	assert_not_contains "$ALL_ERR" "Interrupted system call"
	# POD side: the same repository, clean and intact.
	run git -C "$ROOT/repo" fsck --strict
	assert_status 0
	run git -C "$ROOT/repo" status --porcelain
	assert_eq "$output" "" "POD status"
	echo "# $TIMES" >&3
}

@test "a 4 GiB sparse file: size exact, holes read as zeros, quickly" {
	local t0 ms size=$((4 << 30))
	t0=$(now_ms)
	printf END | dd of="$MNT/sparse" bs=1 seek=$((size - 3)) conv=notrunc status=none
	assert_eq "$(stat -c %s "$MNT/sparse")" "$size" "MNT size"
	assert_eq "$(stat -c %s "$ROOT/sparse")" "$size" "POD size"
	[ "$(alloc_kib "$ROOT/sparse")" -le 64 ]
	local off
	for off in 0 1024 2047 3000 4091; do
		# 4 MiB at OFF MiB.
		run bash -c 'dd if="$1" bs=1M skip="$2" count=4 status=none | cmp -n 4194304 - /dev/zero' _ "$MNT/sparse" "$off"
		assert_status 0
	done
	# Unaligned reads across the 2 GiB and 4 GiB - 4 KiB boundaries.
	run "$PY" - "$MNT/sparse" <<-'EOF'
	import os, sys
	size = 2**32
	def expect(off, n):
	    end = min(off + n, size)
	    out = bytearray(end - off)
	    for i in range(max(off, size - 3), end):
	        out[i - off] = b"END"[i - (size - 3)]
	    return bytes(out)
	fd = os.open(sys.argv[1], os.O_RDONLY)
	for off, n in ((2**31 - 7, 100000), (size - 4096 - 3, 4099), (size - 5, 100), (size, 10)):
	    d = os.pread(fd, n, off)
	    if d != expect(off, n):
	        sys.exit("at %d: got %d bytes ending %r" % (off, len(d), d[-8:]))
	print("ok")
	EOF
	assert_eq "$output" ok
	assert_eq "$(tail -c 3 "$MNT/sparse")" END
	ms=$(($(now_ms) - t0))
	echo "# create + 20 MiB of reads: $ms ms" >&3
	[ "$ms" -lt 15000 ]
	# Overwrite in the middle, through the mount.
	printf MID | dd of="$MNT/sparse" bs=1 seek=$((2 << 30)) conv=notrunc status=none
	assert_eq "$(dd if="$ROOT/sparse" bs=1 skip=$((2 << 30)) count=3 status=none)" MID
	assert_eq "$(stat -c %s "$MNT/sparse")" "$size" "size after the overwrite"
}

@test "a directory of 20,000 entries is listed exactly once each" {
	local n=20000 t0
	"$PY" - "$ROOT/big" "$n" <<-'EOF'
	import os, sys
	d, n = sys.argv[1], int(sys.argv[2])
	os.mkdir(d)
	for i in range(n):
	    # Lengths from 7 to ~200 bytes, so replies span many pages.
	    open(os.path.join(d, "e%05d%s" % (i, "-" * (i % 190))), "w").close()
	EOF
	t0=$(now_ms)
	run bash -c 'ls -f "$1" | grep -v "^\.\.\?$" | sort | uniq -d' _ "$MNT/big"
	assert_status 0
	assert_eq "$output" "" "names listed more than once"
	# shellcheck disable=SC2010 # ls itself is under test here (ls -f: raw readdir order, with . and ..)
	assert_eq "$(ls -f "$MNT/big" | grep -vc '^\.\.\?$')" "$n" "entries (ls -f)"
	# shellcheck disable=SC2012 # ls itself is under test here
	assert_eq "$(ls -A "$MNT/big" | wc -l)" "$n" "entries (ls -A)"
	run diff <(ls -A "$MNT/big") <(ls -A "$ROOT/big")
	assert_status 0
	# ls -l stats every entry (READDIRPLUS).
	# shellcheck disable=SC2010 # ls itself is under test here (ls -l stats every entry: READDIRPLUS)
	assert_eq "$(ls -lA "$MNT/big" | grep -c '^-')" "$n" "regular files in ls -l"
	assert_eq "$(find "$MNT/big" -type f | wc -l)" "$n" "find"
	echo "# listing 20,000 entries 6 times: $(($(now_ms) - t0)) ms" >&3
	# Half of them removed on the pod: the mount lists the other half.
	"$PY" -c 'import os, sys
d = sys.argv[1]
for n in os.listdir(d):
    if int(n[1:6]) % 2:
        os.unlink(os.path.join(d, n))' "$ROOT/big"
	poll_until 1 bash -c '[ "$(ls -A "$1" | wc -l)" = "$2" ]' _ "$MNT/big" $((n / 2)) || {
		# shellcheck disable=SC2012 # counts as ls lists them, like the check above
		echo "# after the pod removed half: $(ls -A "$MNT/big" | wc -l) entries listed" >&3
		return 1
	}
	run bash -c 'ls -A "$1" | sort | uniq -d' _ "$MNT/big"
	assert_eq "$output" ""
	# Creating 2,000 more through the mount.
	"$PY" -c 'import os, sys
for i in range(2000):
    open(os.path.join(sys.argv[1], "m%04d" % i), "w").close()' "$MNT/big"
	# shellcheck disable=SC2012 # ls itself is under test here
	assert_eq "$(ls -A "$MNT/big" | wc -l)" $((n / 2 + 2000)) "entries after 2,000 creates"
	# shellcheck disable=SC2012 # same count on the pod side, for comparison
	assert_eq "$(ls -A "$ROOT/big" | wc -l)" $((n / 2 + 2000)) "POD entries"
}

@test "8 concurrent writers: own files and one shared O_APPEND log, every line whole" {
	local w n=500 pids=()
	cat >"$BATS_TEST_TMPDIR/writer.py" <<-'EOF'
	import hashlib, os, sys
	mnt, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
	log = os.open(os.path.join(mnt, "shared.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
	own = os.open(os.path.join(mnt, "own%d.bin" % wid), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
	h = hashlib.sha256()
	for j in range(n):
	    line = b"writer %d line %04d %s\n" % (wid, j, b"abcdefghij"[: j % 11])
	    if os.write(log, line) != len(line):
	        sys.exit("short log write")
	    block = hashlib.sha256(b"%d.%d" % (wid, j)).digest() * 128  # 4 KiB
	    if os.write(own, block) != len(block):
	        sys.exit("short write")
	    h.update(block)
	os.fsync(own)
	os.close(own)
	os.close(log)
	print(h.hexdigest())
	EOF
	for w in 0 1 2 3 4 5 6 7; do
		"$PY" "$BATS_TEST_TMPDIR/writer.py" "$MNT" "$w" "$n" >"$BATS_TEST_TMPDIR/sum$w" &
		pids+=($!)
	done
	for w in "${pids[@]}"; do
		wait "$w"
	done
	for w in 0 1 2 3 4 5 6 7; do
		assert_eq "$(sha256sum <"$MNT/own$w.bin" | cut -d' ' -f1)" "$(cat "$BATS_TEST_TMPDIR/sum$w")" "MNT own$w.bin"
		assert_eq "$(sha256sum <"$ROOT/own$w.bin" | cut -d' ' -f1)" "$(cat "$BATS_TEST_TMPDIR/sum$w")" "POD own$w.bin"
	done
	run "$PY" - "$MNT/shared.log" 8 "$n" <<-'EOF'
	import re, sys
	path, nw, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
	lines = open(path, "rb").read().split(b"\n")
	bad, seen = [], {}
	if lines[-1] != b"":
	    bad.append("no newline at the end: %r" % lines[-1][:40])
	for ln in lines[:-1]:
	    m = re.fullmatch(rb"writer (\d) line (\d{4}) ([a-j]*)", ln)
	    if not m or m.group(3) != b"abcdefghij"[: int(m.group(2)) % 11]:
	        bad.append("torn line %r" % ln[:60])
	        continue
	    w, j = int(m.group(1)), int(m.group(2))
	    if j != seen.get(w, -1) + 1:
	        bad.append("writer %d: line %d after %d" % (w, j, seen.get(w, -1)))
	    seen[w] = j
	for w in range(nw):
	    if seen.get(w, -1) != n - 1:
	        bad.append("writer %d: last line %d" % (w, seen.get(w, -1)))
	print("%d lines, %d problems %s" % (len(lines) - 1, len(bad), bad[:5]))
	EOF
	assert_eq "$output" "4000 lines, 0 problems []" "MNT shared.log"
	run cmp "$MNT/shared.log" "$ROOT/shared.log"
	assert_status 0
}

@test "a big file reads back exactly with the mount's readahead raised (read_ahead_kb)" {
	[ "$(id -u)" = 0 ] || skip "only root may set a mount's readahead"
	local dev
	head -c $((24 * 1024 * 1024 + 4099)) /dev/urandom >"$ROOT/big"
	cmp "$ROOT/big" "$MNT/big"
	dev=$(mountpoint -d "$MNT")
	# The default, 4096 KiB, set by wsfs on its first request.
	assert_eq "$(cat "/sys/class/bdi/$dev/read_ahead_kb")" 4096 "read_ahead_kb of $MNT ($dev)"
	umount_wsfs "$MNT"
	wsfs_wait_exit
	mount_wsfs -o read_ahead_kb=2048
	# The pod's copy out of the page cache too (only this file's pages: a
	# drop_caches would empty the caches the tests running beside this one
	# count on).
	"$PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$ROOT/big"
	cmp "$ROOT/big" "$MNT/big"
	dev=$(mountpoint -d "$MNT")
	assert_eq "$(cat "/sys/class/bdi/$dev/read_ahead_kb")" 2048 "read_ahead_kb=2048"
}

@test "wsfs refuses options out of range or not numbers with a one-line message, and mounts nothing" {
	local m="$BATS_TEST_TMPDIR/m2" o
	mkdir -p "$m"
	for o in read_ahead_kb=1048577 max_threads=0 rpc_timeout=0.01 rpc_timeout=4294968 max_dir_entries=0 \
		max_dir_entries=67108865 write_behind=65 setattr_behind=2 \
		setattr_behind=1x write_behind=4k max_threads=' 4' setattr_behind=yes \
		setattr_behind= rpc_timeout=0x1 entry_timeout=inf attr_timeout=1e3 \
		max_threads=99999999999 gather_ms=600001 gather_ms=5ms read_chunk_kb=6 \
		read_chunk_kb=1028 unlink_behind=2 unlink_behind=yes; do
		run --separate-stderr "$WSFS" -f -o "$o" "$ADDR" "$m"
		assert_status 1
		assert_contains "$stderr" "${o%%=*} wants"
		# One line that says which and why, not the usage after it.
		assert_eq "$(wc -l <<<"$stderr")" 1
		! is_mounted "$m"
	done
	for o in 127.0.0.1:99999 127.0.0.1; do
		run --separate-stderr "$WSFS" -f "$o" "$m"
		assert_status 1
		assert_contains "$stderr" "bad address '$o'"
		! is_mounted "$m"
	done
	# A mount point that is a regular file (mount(2) would take it and
	# hide the file) or missing: one line, nothing mounted.
	echo keep >"$BATS_TEST_TMPDIR/file"
	run --separate-stderr "$WSFS" -f "$ADDR" "$BATS_TEST_TMPDIR/file"
	assert_status 1
	assert_eq "$stderr" "wsfs: mount point $BATS_TEST_TMPDIR/file: Not a directory"
	if is_mounted "$BATS_TEST_TMPDIR/file"; then return 1; fi
	assert_content "$BATS_TEST_TMPDIR/file" $'keep\n'
	run --separate-stderr "$WSFS" -f "$ADDR" "$BATS_TEST_TMPDIR/none"
	assert_status 1
	assert_eq "$stderr" "wsfs: mount point $BATS_TEST_TMPDIR/none: No such file or directory"
	# The largest readahead is accepted (and mounts).
	run --separate-stderr "$WSFS" -o read_ahead_kb=1048576 "$ADDR" "$m" 3>&-
	track_mount "$m"
	assert_status 0
	is_mounted "$m"
	# A second wsfs on the same mount point is refused (mount(2) would
	# stack it over the first, both running); the first keeps serving.
	echo first >"$m/f"
	run --separate-stderr "$WSFS" "$ADDR" "$m" 3>&-
	assert_status 1
	assert_eq "$stderr" "wsfs: $m is already a wsfs mount (of $ADDR); unmount it first: fusermount3 -u $m"
	assert_eq "$(findmnt -n -M "$m" | wc -l)" 1 "mounts on $m"
	assert_content "$m/f" $'first\n'
	umount_wsfs "$m" # fails while a mount is left
	# A mount point that holds files mounts (as fusermount3 and sshfs
	# do), with a note that they are hidden until the unmount.
	local full="$BATS_TEST_TMPDIR/full"
	mkdir "$full"
	echo mine >"$full/local-file"
	run --separate-stderr "$WSFS" "$ADDR" "$full" 3>&-
	track_mount "$full"
	assert_status 0
	assert_eq "$stderr" "wsfs: note: mount point $full is not empty: what it holds is hidden until fusermount3 -u $full"
	[ ! -e "$full/local-file" ]
	assert_content "$full/f" $'first\n'
	umount_wsfs "$full"
	assert_content "$full/local-file" $'mine\n'
}

@test "as a mount helper (mount -t fuse.wsfs, fstab): mount.fuse3 runs wsfs with fstab's options; with drop_privileges it hands wsfs /dev/fd/N" {
	command -v mount.fuse3 >/dev/null || PATH=$PATH:/sbin:/usr/sbin
	command -v mount.fuse3 >/dev/null || skip "mount.fuse3 is not installed"
	local m="$BATS_TEST_TMPDIR/m3" tok="$BATS_TEST_TMPDIR/token"
	mkdir -p "$m"
	echo helper >"$ROOT/h"
	# /sbin/mount.fuse.wsfs (meson install) is mount.fuse3 under another
	# name, which takes the type from it; -t says the same. It runs
	# `wsfs ADDR MNT -o OPTS` from PATH, as mount(8) runs it for fstab's
	# ADDR MNT fuse.wsfs noauto,_netdev,token_file=FILE 0 0.
	printf 'unused\n' >"$tok" # a unix socket needs none; the option must still parse
	run --separate-stderr env PATH="$(dirname "$WSFS"):$PATH" \
		mount.fuse3 "$ADDR" "$m" -t fuse.wsfs -o "noauto,_netdev,token_file=$tok" 3>&-
	track_mount "$m"
	[ "$status" -eq 0 ] || echo "# $stderr" >&3
	assert_status 0
	assert_content "$m/h" $'helper\n'
	assert_eq "$(findmnt -n -o FSTYPE -M "$m")" fuse.wsfs
	umount_wsfs "$m"
	# drop_privileges: mount.fuse3 opens /dev/fuse and mounts itself, then
	# runs wsfs without capabilities on /dev/fd/N (fuse_session_mount()).
	run --separate-stderr env PATH="$(dirname "$WSFS"):$PATH" \
		mount.fuse3 "$ADDR" "$m" -t fuse.wsfs -o drop_privileges 3>&-
	track_mount "$m"
	[ "$status" -eq 0 ] || echo "# $stderr" >&3
	assert_status 0
	assert_content "$m/h" $'helper\n'
	echo back >"$m/b"
	assert_content "$ROOT/b" $'back\n'
	umount_wsfs "$m"
	# There the mount is made before wsfs runs: allow_other without
	# default_permissions (which wsfs adds on its own mounts) is refused,
	# and with it the mount works and the kernel checks each user.
	run --separate-stderr env PATH="$(dirname "$WSFS"):$PATH" \
		mount.fuse3 "$ADDR" "$m" -t fuse.wsfs -o drop_privileges,allow_other 3>&-
	track_mount "$m"
	assert_status 1
	assert_contains "$stderr" "wsfs: allow_other without default_permissions would let every user of the host read and change every file"
	fusermount3 -u "$m"
	run --separate-stderr env PATH="$(dirname "$WSFS"):$PATH" \
		mount.fuse3 "$ADDR" "$m" -t fuse.wsfs -o drop_privileges,allow_other,default_permissions 3>&-
	assert_status 0
	grep -q " $m fuse.wsfs .*default_permissions" /proc/mounts
	assert_content "$m/h" $'helper\n'
	umount_wsfs "$m"
}

@test "-o transform_symlinks: links the pod makes out of the workspace lead into it; without it they stay byte-exact" {
	local m="$BATS_TEST_TMPDIR/m2" victim="$BATS_TEST_TMPDIR/victim"
	echo host >"$victim"
	mkdir -p "$m" "$ROOT/d"
	echo in >"$ROOT/d/f"
	# What a hostile pod can make (agentd itself refuses to follow them).
	ln -s "$victim" "$ROOT/abs"
	ln -s "../../../../../../../../../../..$victim" "$ROOT/d/up"
	ln -s ../d/f "$ROOT/d/ok"
	# The default mount shows them as they are; the host's kernel follows.
	assert_eq "$(readlink "$MNT/abs")" "$victim"
	assert_eq "$(readlink "$MNT/d/ok")" ../d/f
	# Not on bats's fd 3, and unmounted by the teardown if a check fails.
	run --separate-stderr "$WSFS" -o transform_symlinks "$ADDR" "$m" 3>&-
	track_mount "$m"
	assert_status 0
	is_mounted "$m"
	assert_eq "$(readlink "$m/abs")" "${victim#/}"
	assert_eq "$(readlink "$m/d/up")" "../${victim#/}"
	assert_eq "$(readlink "$m/d/ok")" ../d/f # inside already: as it is
	assert_eq "$(cat "$m/d/ok")" in
	# Written through, they create files in the workspace, not on the host.
	run sh -c "echo pwned > '$m/abs'"
	assert_eq "$(cat "$victim")" host "the host's file"
	run sh -c "echo pwned > '$m/d/up'"
	assert_eq "$(cat "$victim")" host "the host's file"
	# One symlink with two names at two depths (ln -P): each name's
	# target is computed from its own directory, whichever was looked up
	# last (they shared a node, whose path was the deeper name's).
	mkdir -p "$BATS_TEST_TMPDIR/outside" "$ROOT/a"
	echo SECRET >"$BATS_TEST_TMPDIR/outside/v"
	ln -s ../outside/v "$ROOT/a/w"
	ln -P "$ROOT/a/w" "$ROOT/w2"
	ls -R "$m" >/dev/null
	readlink "$m/w2" >/dev/null
	stat "$m/a/w" >/dev/null
	assert_eq "$(readlink "$m/w2")" outside/v
	assert_eq "$(readlink "$m/a/w")" ../outside/v
	run sh -c "echo pwned > '$m/w2'"
	assert_eq "$(cat "$BATS_TEST_TMPDIR/outside/v")" SECRET "the host's file"
	umount_wsfs "$m"
}
