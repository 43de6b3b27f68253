#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsfs on a real mount of a real agentd: the user-reported cases of
# /work/shared/cases/fs-cases.md (appending, git, editors, rename, deleting,
# open files, sizes, compilers, metadata, archives), each asserting the exact
# expected value on the mount (MNT) and on the pod side (POD: agentd's root
# directory itself, since agentd runs locally here).
# The pod-side changes (R1, R2) and losing the connection (C1) are in
# fs-remote.bats; big trees and tools in fs-tools.bats; syscall detail in
# fs-fsx.bats.

load test_helper

# No test may hang the suite.
BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

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

@test "A1: echo > then >> prints foo then bar, on MNT and POD" {
	echo foo >"$MNT/t"
	echo bar >>"$MNT/t"
	run cat "$MNT/t"
	assert_status 0
	assert_content "$MNT/t" $'foo\nbar\n' "MNT/t"
	assert_content "$ROOT/t" $'foo\nbar\n' "POD t"

	# After the mount read it (page cache filled), >> still appends.
	cat "$MNT/t" >/dev/null
	echo baz >>"$MNT/t"
	assert_content "$MNT/t" $'foo\nbar\nbaz\n' "MNT/t after a read"
	assert_content "$ROOT/t" $'foo\nbar\nbaz\n' "POD t after a read"

	# Fifty appends, each through a new write-only open.
	local i expect=
	for i in $(seq 1 50); do
		echo "line $i" >>"$MNT/many"
		expect+="line $i"$'\n'
	done
	assert_content "$MNT/many" "$expect" "MNT/many"
	assert_content "$ROOT/many" "$expect" "POD many"

	# printf >> without a trailing newline, then more.
	printf 'a' >"$MNT/nonl"
	printf 'b' >>"$MNT/nonl"
	printf 'c' >>"$MNT/nonl"
	assert_content "$MNT/nonl" "abc"
	assert_content "$ROOT/nonl" "abc"
}

@test "A2: git clone of a small repository into MNT (local path and file://)" {
	git_env
	local src="$BATS_TEST_TMPDIR/src" bare="$BATS_TEST_TMPDIR/src.git" i
	mkdir -p "$src/sub"
	git -C "$src" init -q
	for i in 1 2 3; do
		echo "version $i" >"$src/file$i.txt"
		printf 'int x%d;\n' "$i" >"$src/sub/x$i.c"
		git -C "$src" add -A
		git -C "$src" commit -q -m "commit $i"
	done
	git clone -q --bare "$src" "$bare"
	local head
	head=$(git -C "$bare" rev-parse HEAD)

	run --separate-stderr git clone "$bare" "$MNT/clone"
	assert_status 0
	run --separate-stderr git clone --progress "file://$bare" "$MNT/clone2"
	assert_status 0
	assert_not_contains "$stderr" "Interrupted system call"

	local c
	for c in clone clone2; do
		assert_eq "$(git -C "$MNT/$c" rev-parse HEAD)" "$head" "$c HEAD"
		assert_eq "$(git -C "$MNT/$c" log --oneline | wc -l)" 3 "$c commits"
		run git -C "$MNT/$c" status --porcelain
		assert_status 0
		assert_eq "$output" "" "$c status"
		run git -C "$MNT/$c" fsck --strict
		assert_status 0
		# The clone appended its reflog entry.
		assert_contains "$(cat "$MNT/$c/.git/logs/HEAD")" "clone: from" "$c .git/logs/HEAD"
		run diff -r --exclude=.git "$src" "$MNT/$c"
		assert_status 0
		# POD side: the same repository, intact.
		run git -C "$ROOT/$c" fsck --strict
		assert_status 0
		assert_eq "$(git -C "$ROOT/$c" rev-parse HEAD)" "$head" "POD $c HEAD"
	done

	# Work in the clone: commit (appends to both reflogs) and push back.
	echo change >>"$MNT/clone/file1.txt"
	git -C "$MNT/clone" commit -q -am "from the mount"
	run --separate-stderr git -C "$MNT/clone" push -q origin main
	assert_status 0
	assert_eq "$(git -C "$bare" rev-parse HEAD)" "$(git -C "$MNT/clone" rev-parse HEAD)" "pushed HEAD"
	assert_eq "$(wc -l <"$MNT/clone/.git/logs/HEAD")" 2 "reflog lines"
	assert_eq "$(wc -l <"$ROOT/clone/.git/logs/HEAD")" 2 "POD reflog lines"
}

@test "A3: a line appended and fsync'ed at a time: the POD sees every line so far" {
	run "$PY" - "$MNT/app.log" "$ROOT/app.log" <<-'EOF'
	import os, sys, time
	mnt, pod = sys.argv[1], sys.argv[2]
	fd = os.open(mnt, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
	expect = b""
	# Intervals around and beyond the usual 1 s attribute cache.
	for i, pause in enumerate([0, 0.05, 0.3, 1.05, 1.1, 0]):
	    time.sleep(pause)
	    line = b"%s line %d %s\n" % (time.strftime("%H:%M:%S").encode(), i, b"x" * (i * 37 % 200))
	    if os.write(fd, line) != len(line):
	        sys.exit("short write at line %d" % i)
	    expect += line
	    os.fsync(fd)
	    with open(pod, "rb") as f:
	        got = f.read()
	    if got != expect:
	        sys.exit("after fsync of line %d the POD has %d bytes %r, expected %d bytes" %
	                 (i, len(got), got[-120:], len(expect)))
	    with open(mnt, "rb") as f:
	        got = f.read()
	    if got != expect:
	        sys.exit("after fsync of line %d a new reader on MNT got %d bytes %r, expected %d" %
	                 (i, len(got), got[-120:], len(expect)))
	os.close(fd)
	print("%d lines" % (i + 1))
	EOF
	assert_status 0
	assert_eq "$output" "6 lines"
	assert_eq "$(wc -l <"$ROOT/app.log")" 6 "POD lines"
}

@test "G1: mkdir twice fails with EEXIST (not EPERM, not EIO); rmdir non-empty ENOTEMPTY" {
	run mkdir "$MNT/d"
	assert_status 0
	run --separate-stderr mkdir "$MNT/d"
	assert_status 1
	assert_contains "$stderr" "File exists"
	run pyerr 'os.mkdir(sys.argv[2])' "$MNT/d"
	assert_eq "$output" EEXIST "errno of the second mkdir"
	run mkdir -p "$MNT/d"
	assert_status 0
	# On a file too, and for a name the POD created.
	touch "$MNT/f"
	run pyerr 'os.mkdir(sys.argv[2])' "$MNT/f"
	assert_eq "$output" EEXIST "mkdir over a file"
	mkdir "$ROOT/pod-made"
	run pyerr 'os.mkdir(sys.argv[2])' "$MNT/pod-made"
	assert_eq "$output" EEXIST "mkdir over a dir the POD made"

	touch "$MNT/d/child"
	run --separate-stderr rmdir "$MNT/d"
	assert_status 1
	assert_contains "$stderr" "Directory not empty"
	run pyerr 'os.rmdir(sys.argv[2])' "$MNT/d"
	assert_eq "$output" ENOTEMPTY "errno of rmdir non-empty"
	[ -e "$ROOT/d/child" ]
}

@test "G2: mv x.lock x replaces x in one atomic step" {
	echo a >"$MNT/x"
	echo b >"$MNT/x.lock"
	mv "$MNT/x.lock" "$MNT/x"
	run cat "$MNT/x"
	assert_eq "$output" b
	[ ! -e "$MNT/x.lock" ]
	assert_content "$ROOT/x" $'b\n' "POD x"
	[ ! -e "$ROOT/x.lock" ]

	# A reader that opens x in a loop while it is replaced 300 times never
	# finds it missing, empty or half-written.
	run "$PY" - "$MNT" 300 <<-'EOF'
	import errno, os, re, sys, time
	mnt, n = sys.argv[1], int(sys.argv[2])
	x, lock = os.path.join(mnt, "x"), os.path.join(mnt, "x.lock")
	ok = re.compile(rb"^(b|v\d+ " + b"y" * 100 + rb")\n$")
	r, w = os.pipe()
	pid = os.fork()
	if pid == 0:
	    os.close(w)
	    os.set_blocking(r, False)
	    bad, reads = [], 0
	    while True:
	        try:
	            if os.read(r, 1) == b"":
	                break
	        except BlockingIOError:
	            pass
	        try:
	            with open(x, "rb") as f:
	                d = f.read()
	            reads += 1
	            if not ok.match(d):
	                bad.append("read %r" % d[:40])
	        except OSError as e:
	            bad.append("open/read: %s" % errno.errorcode.get(e.errno, e.errno))
	    print("reader: %d reads, %d bad %s" % (reads, len(bad), bad[:5]))
	    os._exit(1 if bad or reads == 0 else 0)
	os.close(r)
	fails = []
	for i in range(n):
	    try:
	        with open(lock, "wb") as f:
	            f.write(b"v%d %s\n" % (i, b"y" * 100))
	        os.rename(lock, x)
	    except OSError as e:
	        fails.append("%d: %s" % (i, e))
	os.close(w)
	_, st = os.waitpid(pid, 0)
	with open(x, "rb") as f:
	    last = f.read()
	print("writer: %d failures %s; last %r; lock left: %s" %
	      (len(fails), fails[:3], last[:8], os.path.exists(lock)))
	sys.exit(0 if st == 0 and not fails and last.startswith(b"v%d " % (n - 1))
	         and not os.path.exists(lock) else 1)
	EOF
	if [ "$status" -ne 0 ]; then
		printf '%s\n' "$output" | sed 's/^/# /' >&3
		return 1
	fi
	assert_content "$ROOT/x" "v299 $(printf 'y%.0s' $(seq 100))"$'\n' "POD x"
}

@test "G2: an open that looked x up just before mv x.lock x opens the old x, as on a local disk" {
	# The reader's race above, made certain: an O_PATH descriptor holds the
	# old x without opening it, and open(2) of its /proc/self/fd link then
	# sends OPEN for the file whose name was taken. It failed with ESTALE
	# (the old file has no name left; the VFS looks up once more, which a
	# writer renaming in a loop defeated now and then): the rename keeps
	# the old file's handle in agentd while the kernel holds it.
	local script out
	script=$(
		cat <<-'EOF'
			import os, sys
			x, lock = sys.argv[1] + "/x", sys.argv[1] + "/x.lock"
			for path, data in ((x, "one\n"), (lock, "two\n")):
			    with open(path, "w") as f:
			        f.write(data)
			p = os.open(x, os.O_PATH)
			os.rename(lock, x)
			st = os.fstat(p)  # the rename made the kernel's attributes stale
			print(st.st_size, st.st_nlink)
			proc = "/proc/self/fd/%d" % p
			with open(proc) as f:
			    print(f.read().strip())
			with open(proc, "a") as f:
			    f.write("three\n")
			with open(x) as f:
			    print(f.read().strip())
			os.unlink(x)
			with open(proc) as f:
			    print(f.read().replace("\n", "|"))
		EOF
	)
	mkdir "$BATS_TEST_TMPDIR/local"
	out=$("$PY" -c "$script" "$BATS_TEST_TMPDIR/local")
	assert_eq "$out" $'4 0\none\ntwo\none|three|' "local"
	# The fstat asks wsfs, which asks agentd through the kept handle
	# (ESTALE before: no name, no open file).
	# gVisor's gofer counts an open, unlinked file's nlink as 1.
	if wsb_runsc; then
		out="4 1${out#4 0}"
	fi
	run "$PY" -c "$script" "$MNT"
	assert_eq "$output" "$out" "MNT"
	[ ! -e "$ROOT/x" ]
}

@test "G2: readers that hold x by O_PATH and open it by /proc/self/fd while mv x.new x runs 1,000 times: ESTALE at most a few times" {
	# The VFS revalidates a dentry with a LOOKUP outside the directory's
	# lock, so one can be answered before a rename over x and come back
	# after it: applied, it bound x to the replaced file again in wsfs's
	# node table, and the next O_PATH open of x got a node with no name
	# and no kept handle (ESTALE on the reopen: 25 to 250 in ~4,700 here).
	# Under load (CI, sanitizers) a few remain (2 seen in a sanitizer
	# run): more than 5 fails.
	# What a reopen reads is not this test's claim: one CI run read a file
	# that was not a number there (not reproduced in ~20 runs here; under
	# study), which the test reports on fd 3.
	run --separate-stderr "$PY" - "$MNT" 1000 <<-'EOF'
	import errno, os, sys, threading
	mnt, n = sys.argv[1], int(sys.argv[2])
	x, new = mnt + "/x", mnt + "/x.new"
	with open(x, "w") as f:
	    f.write("0")
	stop, bad, reads = False, {}, [0, 0]
	def reader(k):
	    while not stop:
	        try:
	            p = os.open(x, os.O_PATH)
	        except OSError as e:
	            bad["open " + errno.errorcode[e.errno]] = bad.get("open " + errno.errorcode[e.errno], 0) + 1
	            continue
	        try:
	            with open("/proc/self/fd/%d" % p) as f:
	                d = f.read()
	            reads[k] += 1
	            if not d.isdigit():
	                print("reopen read %r" % d[:20], file=sys.stderr)
	        except OSError as e:
	            bad["reopen " + errno.errorcode[e.errno]] = bad.get("reopen " + errno.errorcode[e.errno], 0) + 1
	        finally:
	            os.close(p)
	ts = [threading.Thread(target=reader, args=(k,)) for k in (0, 1)]
	for t in ts:
	    t.start()
	for i in range(n):
	    with open(new, "w") as f:
	        f.write(str(i))
	    os.rename(new, x)
	stop = True
	for t in ts:
	    t.join()
	stale = bad.pop("reopen ESTALE", 0)
	if stale:
	    print("reopen ESTALE %d times" % stale, file=sys.stderr)
	print("bad:", bad or "none")
	print("few ESTALE:", stale <= 5)
	print("reads by both:", min(reads) > 0)
	EOF
	[ -z "$stderr" ] || printf '# note: %s\n' "$stderr" >&3
	assert_eq "$output" $'bad: none\nfew ESTALE: True\nreads by both: True'
}

@test "G3: touch then chmod 600: stat shows 0600 on MNT and POD" {
	touch "$MNT/f"
	run chmod 600 "$MNT/f"
	assert_status 0
	assert_eq "$(stat -c %a "$MNT/f")" 600 "MNT mode"
	assert_eq "$(stat -c %a "$ROOT/f")" 600 "POD mode"
	assert_eq "$(stat -c %A "$MNT/f")" -rw------- "MNT mode string"
	chmod u+x,g+r "$MNT/f"
	assert_eq "$(stat -c %a "$MNT/f")" 740
	assert_eq "$(stat -c %a "$ROOT/f")" 740
	mkdir "$MNT/d"
	chmod 2750 "$MNT/d"
	assert_eq "$(stat -c %a "$MNT/d")" 2750
	assert_eq "$(stat -c %a "$ROOT/d")" 2750
	# A file created with a mode keeps it (umask 022).
	(umask 022 && "$PY" -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o664))' "$MNT/g")
	assert_eq "$(stat -c %a "$MNT/g")" 644
	assert_eq "$(stat -c %a "$ROOT/g")" 644
}

@test "G4: git init, add, commit, status, gc, many times in a row, no EINTR" {
	git_env
	local r="$MNT/repo" round i all=
	mkdir "$r"
	run --separate-stderr git -C "$r" init
	assert_status 0
	for round in 1 2 3 4 5; do
		for i in $(seq 1 20); do
			echo "round $round file $i" >"$r/f$i.txt"
		done
		mkdir -p "$r/dir$round"
		echo "$round" >"$r/dir$round/new"
		[ "$round" -lt 3 ] || git -C "$r" rm -q "dir$((round - 2))/new"
		run --separate-stderr git -C "$r" add -A
		assert_status 0
		all+="$output$stderr"
		run --separate-stderr git -C "$r" commit -q -m "round $round"
		assert_status 0
		all+="$output$stderr"
		run --separate-stderr git -C "$r" status --porcelain
		assert_status 0
		assert_eq "$output" "" "status after round $round"
		all+="$stderr"
		run --separate-stderr git -C "$r" gc --quiet
		assert_status 0
		all+="$output$stderr"
	done
	run --separate-stderr git -C "$r" checkout --progress -q HEAD~2
	assert_status 0
	all+="$output$stderr"
	assert_content "$r/f1.txt" $'round 3 file 1\n'
	run --separate-stderr git -C "$r" checkout --progress -q main
	assert_status 0
	all+="$output$stderr"
	assert_not_contains "$all" "Interrupted system call"
	assert_eq "$(git -C "$r" log --oneline | wc -l)" 5 "commits"
	run git -C "$r" fsck --strict
	assert_status 0
	run git -C "$r" count-objects -v
	assert_contains "$output" "count: 0" "loose objects after gc"
	# POD side.
	run git -C "$ROOT/repo" status --porcelain
	assert_status 0
	assert_eq "$output" "" "POD status"
	run git -C "$ROOT/repo" fsck --strict
	assert_status 0
}

@test "G5: vi MNT/new.txt, type, :wq: swap file on MNT while editing, gone after, text saved" {
	command -v vi >/dev/null || skip "no vi (Debian: vim-tiny provides vi and ex)"
	command -v script >/dev/null || skip "no script(1) to give vi a terminal"
	local keys="$BATS_TEST_TMPDIR/keys" list="$BATS_TEST_TMPDIR/list"
	# Insert a line, list MNT from inside vi (the swap file must be there),
	# then :wq.
	printf 'ihello from vi\033:!ls -A %s > %s\r:wq\r' "$MNT" "$list" >"$keys"
	TERM=xterm run timeout 30 script -qec "vi -u NONE -i NONE -N $MNT/new.txt" /dev/null <"$keys"
	assert_status 0
	assert_not_contains "$output" "ATTENTION" "vi's screen"
	assert_not_contains "$output" "E325" "vi's screen"
	if [[ $output =~ E[0-9]+: ]]; then
		echo "# vi reported an error: $(printf '%q' "$output" | head -c 600)" >&3
		return 1
	fi
	assert_contains "$(cat "$list")" ".new.txt.swp" "MNT listing while vi ran"
	assert_content "$MNT/new.txt" $'hello from vi\n'
	assert_content "$ROOT/new.txt" $'hello from vi\n' "POD new.txt"
	run ls -A "$MNT"
	assert_eq "$output" new.txt "MNT after vi quit"
	run ls -A "$ROOT"
	assert_eq "$output" new.txt "POD after vi quit"

	# Edit it again: no swap-file prompt (the old swap file is really gone).
	printf 'Gosecond line\033:wq\r' >"$keys"
	TERM=xterm run timeout 30 script -qec "vi -u NONE -i NONE -N $MNT/new.txt" /dev/null <"$keys"
	assert_status 0
	assert_not_contains "$output" "ATTENTION" "vi's screen, second run"
	assert_content "$MNT/new.txt" $'hello from vi\nsecond line\n'
	assert_content "$ROOT/new.txt" $'hello from vi\nsecond line\n' "POD new.txt"
	run ls -A "$MNT"
	assert_eq "$output" new.txt "MNT after the second edit"
}

@test "G5: ex scripts create and rewrite files on MNT" {
	command -v ex >/dev/null || skip "no ex (Debian: vim-tiny provides vi and ex)"
	printf 'a\nline one\nline two\n.\nwq\n' | timeout 30 ex -s -N -u NONE -i NONE "$MNT/e.txt"
	assert_content "$MNT/e.txt" $'line one\nline two\n'
	printf '%%s/one/ONE/\n$a\nline three\n.\nwq\n' | timeout 30 ex -s -N -u NONE -i NONE "$MNT/e.txt"
	assert_content "$MNT/e.txt" $'line ONE\nline two\nline three\n'
	assert_content "$ROOT/e.txt" $'line ONE\nline two\nline three\n' "POD e.txt"
	run ls -A "$MNT"
	assert_eq "$output" e.txt "no swap or backup file left"
}

@test "G6: mv of files and directories: never ENOSYS or EIO" {
	local i
	echo a >"$MNT/a"
	run --separate-stderr mv "$MNT/a" "$MNT/b"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/a" ]
	assert_content "$MNT/b" $'a\n'
	assert_content "$ROOT/b" $'a\n'

	mkdir -p "$MNT/d1/sub"
	for i in $(seq 1 200); do echo "$i" >"$MNT/d1/sub/f$i"; done
	run --separate-stderr mv "$MNT/d1" "$MNT/d2"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/d1" ]
	[ ! -e "$ROOT/d1" ]
	assert_eq "$(find -H "$MNT/d2/sub" -mindepth 1 -maxdepth 1 -name '[!.]*' -printf x | wc -c)" 200 "entries after a directory mv"
	assert_content "$MNT/d2/sub/f77" $'77\n'
	assert_content "$ROOT/d2/sub/f77" $'77\n'

	# Into an existing directory, over an existing file, onto an empty dir.
	mkdir "$MNT/into"
	run --separate-stderr mv "$MNT/b" "$MNT/d2" "$MNT/into/"
	assert_status 0
	assert_eq "$stderr" ""
	assert_content "$MNT/into/b" $'a\n'
	assert_content "$MNT/into/d2/sub/f1" $'1\n'
	echo new >"$MNT/c"
	run --separate-stderr mv -f "$MNT/c" "$MNT/into/b"
	assert_status 0
	assert_content "$MNT/into/b" $'new\n'
	mkdir "$MNT/empty"
	run --separate-stderr mv -T "$MNT/into/d2" "$MNT/empty"
	assert_status 0
	assert_content "$MNT/empty/sub/f200" $'200\n'
	assert_content "$ROOT/empty/sub/f200" $'200\n'
	# Rename a directory that the kernel has just listed and stat'ed.
	ls -lR "$MNT/empty" >/dev/null
	run --separate-stderr mv "$MNT/empty" "$MNT/renamed"
	assert_status 0
	run ls "$MNT/renamed/sub"
	assert_eq "$(printf '%s\n' "$output" | wc -l)" 200
	# Children of a renamed directory are reachable under the new name
	# only, from the mount and the pod.
	echo more >>"$MNT/renamed/sub/f1"
	assert_content "$ROOT/renamed/sub/f1" $'1\nmore\n'
	[ ! -e "$MNT/empty/sub/f1" ]
	# Case-only rename.
	echo x >"$MNT/Name"
	run mv "$MNT/Name" "$MNT/name"
	assert_status 0
	run ls "$MNT"
	assert_not_contains "$output" "Name"
	assert_content "$MNT/name" $'x\n'
}

@test "D1: mkdir d; touch d/f; rm -r d succeeds (and a deeper tree)" {
	mkdir "$MNT/d"
	touch "$MNT/d/f"
	run --separate-stderr rm -r "$MNT/d"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/d" ]
	[ ! -e "$ROOT/d" ]

	local a b
	for a in 1 2 3 4 5; do
		for b in 1 2 3; do
			mkdir -p "$MNT/t/a$a/b$b"
			touch "$MNT/t/a$a/b$b/"{1..20}
			ln -s ../../a1 "$MNT/t/a$a/b$b/link"
		done
	done
	run --separate-stderr rm -r "$MNT/t"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/t" ]
	[ ! -e "$ROOT/t" ]
	run ls -A "$MNT"
	assert_eq "$output" ""
}

@test "D2: a directory whose children were just removed reads empty and rmdir works at once" {
	local round i
	for round in 1 2 3 4 5; do
		mkdir "$MNT/stage"
		for i in $(seq 1 40); do echo "$i" >"$MNT/stage/pkg$i"; done
		mkdir "$MNT/stage/sub"
		# The kernel has listed and looked up every child.
		ls -l "$MNT/stage" >/dev/null
		rm "$MNT/stage"/pkg*
		rmdir "$MNT/stage/sub"
		run ls -A "$MNT/stage"
		assert_eq "$output" "" "listing right after removing the children (round $round)"
		run --separate-stderr rmdir "$MNT/stage"
		assert_status 0
		[ ! -e "$ROOT/stage" ]
	done
	# One unlink at a time, then rmdir, from one process.
	run "$PY" - "$MNT/s2" <<-'EOF'
	import os, sys
	d = sys.argv[1]
	os.mkdir(d)
	for i in range(100):
	    open(os.path.join(d, "f%d" % i), "w").close()
	os.listdir(d)
	for n in os.listdir(d):
	    os.unlink(os.path.join(d, n))
	left = os.listdir(d)
	os.rmdir(d)
	print("left %d" % len(left))
	EOF
	assert_status 0
	assert_eq "$output" "left 0"
}

@test "O1: ( rm -f MNT/f; echo foo ) > MNT/f succeeds and f is gone afterwards" {
	run --separate-stderr bash -c '( rm -f "$1"; echo foo ) > "$1"' _ "$MNT/f"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/f" ]
	run ls -A "$MNT"
	assert_eq "$output" "" "MNT listing (no .fuse_hidden or other leftovers)"
	# RELEASE is asynchronous: give the pod side a moment to drop it.
	poll_until 2 bash -c '[ -z "$(ls -A "$1")" ]' _ "$ROOT" || {
		echo "# POD still holds: $(ls -A "$ROOT")" >&3
		return 1
	}

	# The same with an existing file, and reading back through the fd.
	echo old >"$MNT/g"
	run --separate-stderr bash -c 'exec 3<>"$1"; rm "$1"; echo data >&3; [ ! -e "$1" ] || exit 3
		exec 3>&-; [ ! -e "$1" ]' _ "$MNT/g"
	assert_status 0
	assert_eq "$stderr" ""
	run ls -A "$MNT"
	assert_eq "$output" ""
}

@test "O2: exec 3>MNT/p.pid; echo; rm; echo more; exec 3>&- all succeed" {
	run --separate-stderr bash -ec 'exec 3>"$1/p.pid"; echo $$ >&3; rm "$1/p.pid"; echo more >&3; exec 3>&-' _ "$MNT"
	assert_status 0
	assert_eq "$stderr" ""
	[ ! -e "$MNT/p.pid" ]
	[ ! -e "$ROOT/p.pid" ]
	run ls -A "$MNT"
	assert_eq "$output" ""
}

@test "O2: a removed file open O_RDWR|O_APPEND: bytes written through mmap(2) reach it at their offset, as on a local disk" {
	local prog out_local out_mnt
	# The kernel writes mapped pages back through any writable handle
	# of the file, with their offset; an O_APPEND handle would append
	# them, so wsfs opens one without O_APPEND. For a file with no name
	# left that open failed: fsync(2) EIO, the bytes lost.
	prog=$(cat <<-'EOF'
	import mmap, os, sys
	p = sys.argv[1]
	fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
	os.unlink(p)
	os.write(fd, b"a" * 70000)
	m = mmap.mmap(fd, 70000)
	m[4097:4098] = b"M"
	m.close()
	os.write(fd, b"b" * 70000)
	os.fsync(fd)
	os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
	d = os.pread(fd, 200000, 0)
	print(os.fstat(fd).st_size, len(d), d.count(b"M"), d.find(b"M"), d.count(b"b"))
	EOF
	)
	mkdir "$BATS_TEST_TMPDIR/local"
	out_local=$("$PY" -c "$prog" "$BATS_TEST_TMPDIR/local/f")
	assert_eq "$out_local" "140000 140000 1 4097 70000" "local"
	out_mnt=$("$PY" -c "$prog" "$MNT/f")
	assert_eq "$out_mnt" "$out_local" "mount"
}

@test "O3: echo data > f; : > f; wc -c < f prints 0" {
	echo data >"$MNT/f"
	: >"$MNT/f"
	run bash -c 'wc -c < "$1"' _ "$MNT/f"
	assert_eq "$output" 0
	assert_eq "$(stat -c %s "$MNT/f")" 0 "MNT size"
	assert_eq "$(stat -c %s "$ROOT/f")" 0 "POD size"
	# A reader that had it open sees the truncation too.
	echo "more data" >"$MNT/f"
	exec 4<"$MNT/f"
	: >"$MNT/f"
	run cat <&4
	exec 4<&-
	assert_eq "$output" "" "read through an fd opened before the truncation"
	# O_TRUNC on a file the mount has cached.
	echo 0123456789 >"$MNT/g"
	cat "$MNT/g" >/dev/null
	echo ab >"$MNT/g"
	assert_content "$MNT/g" $'ab\n'
	assert_content "$ROOT/g" $'ab\n'
}

@test "S1: truncate -s 5G: size exact, reads zeros anywhere, no 5 GiB transfer" {
	local t0 t1
	t0=$(now_ms)
	run truncate -s 5G "$MNT/big"
	assert_status 0
	assert_eq "$(stat -c %s "$MNT/big")" 5368709120 "MNT size"
	assert_eq "$(stat -c %s "$ROOT/big")" 5368709120 "POD size"
	[ "$(alloc_kib "$ROOT/big")" -le 64 ]
	local off
	for off in 0 1 2560 4095 5116; do
		# 4 MiB at OFF MiB (the last one ends at the end of the file).
		run bash -c 'dd if="$1" bs=1M skip="$2" count=4 status=none | cmp -n 4194304 - /dev/zero' _ "$MNT/big" "$off"
		assert_status 0
	done
	run bash -c 'tail -c 4096 "$1" | cmp -n 4096 - /dev/zero' _ "$MNT/big"
	assert_status 0
	assert_eq "$(tail -c 4096 "$MNT/big" | wc -c)" 4096 "tail bytes"
	t1=$(now_ms)
	echo "# truncate + 21 MiB of reads: $((t1 - t0)) ms" >&3
	[ $((t1 - t0)) -lt 10000 ]
	# Shrink and grow again.
	truncate -s 1K "$MNT/big"
	assert_eq "$(stat -c %s "$MNT/big")" 1024
	assert_eq "$(stat -c %s "$ROOT/big")" 1024
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "S2: cc builds a program on MNT (the linker seeks and rewrites) and it runs" {
	command -v cc >/dev/null || skip "no cc"
	printf 'int main(){return 0;}' >"$MNT/t.c"
	run --separate-stderr bash -c 'cd "$1" && cc t.c -o t && ./t' _ "$MNT"
	assert_status 0
	assert_eq "$stderr" ""
	[ -x "$MNT/t" ]
	[ -x "$ROOT/t" ]
	run "$ROOT/t"
	assert_status 0

	# Separate compilation, an archive and a link, then run.
	cat >"$MNT/main.c" <<-'EOF'
	#include <stdio.h>
	int answer(void);
	int main(void) { printf("hello %d\n", answer()); return 3; }
	EOF
	echo 'int answer(void) { return 42; }' >"$MNT/lib.c"
	run --separate-stderr bash -c 'cd "$1" && cc -c main.c && cc -c lib.c && ar rcs libl.a lib.o &&
		cc -o prog main.o -L. -ll && ./prog' _ "$MNT"
	assert_status 3
	assert_eq "$output" "hello 42"
	run "$ROOT/prog"
	assert_eq "$output" "hello 42"
	assert_eq "$(cmp "$MNT/prog" "$ROOT/prog" && echo same)" same
}

# made_then_run WHAT STATUS NAME SCRIPT: run bash SCRIPT ($1 MNT, $2 NAME),
# which makes MNT/NAME, then at once (in the same shell, no gap; under
# gVisor in the sandbox, pod_run) the program ROOT/NAME in the workspace;
# count a status other than STATUS in S2_FAILS.
# shellcheck disable=SC2031 # status/output are run's globals
made_then_run() {
	local what=$1 want=$2 name=$3 script=$4
	if wsb_runsc; then
		bash -c "$script" _ "$MNT" "$name"
		run pod_run "$ROOT/$name"
	else
		run bash -c "$script"' && exec "$3/$2"' _ "$MNT" "$name" "$ROOT"
	fi
	[ "$status" -eq "$want" ] || {
		S2_FAILS=$((S2_FAILS + 1))
		echo "# $what $name: $status $output" >&3
	}
}

@test "S2: a program made on MNT runs in the workspace right after (no ETXTBSY from a handle still open)" {
	command -v cc >/dev/null || skip "no cc"
	local i
	S2_FAILS=0
	# agentd holding the file open for writing, execve(2) of it in the
	# pod fails ETXTBSY. The linker makes its output executable after
	# closing it (chmod), cp(1) creates it so.
	printf 'int main(void){return 7;}' >"$MNT/p.c"
	for i in 1 2 3 4 5 6 7 8; do
		made_then_run cc 7 "p$i" 'cd "$1" && cc p.c -o "$2"'
	done
	for i in $(seq 1 30); do
		made_then_run cp 0 "t$i" 'cp /bin/true "$1/$2"'
	done
	# Made with no write bit (agentd as root may still write it).
	S2_RO=$BATS_TEST_TMPDIR/true-ro
	cp /bin/true "$S2_RO"
	chmod 555 "$S2_RO"
	export S2_RO
	for i in $(seq 1 10); do
		made_then_run cp-555 0 "r$i" 'cp "$S2_RO" "$1/$2"'
	done
	# A change by name right after the close (chmod, touch: through the
	# closing file's parked handle) leaves nothing open for writing
	# either.
	for i in $(seq 1 10); do
		made_then_run touch 0 "u$i" 'cp /bin/true "$1/$2" && chmod 0755 "$1/$2" &&
			touch -d @1000000000 "$1/$2"'
	done
	assert_eq "$S2_FAILS" 0 "runs that failed"

	# A close gives agentd's writable handle back while another
	# descriptor of the open file stays: that one writes on (with
	# O_APPEND too).
	exec 4>"$MNT/s"
	chmod +x "$MNT/s"
	(echo a >&4)
	echo b >&4
	exec 4>&-
	exec 4>>"$MNT/s"
	(echo c >&4)
	echo d >&4
	exec 4>&-
	assert_eq "$(cat "$ROOT/s")" $'a\nb\nc\nd'
	assert_eq "$(cat "$MNT/s")" $'a\nb\nc\nd'
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "M1: touch gives now; touch -d sets exactly; touch -a leaves mtime alone" {
	local before after m exp
	before=$(date +%s)
	touch "$MNT/n"
	after=$(date +%s)
	m=$(stat -c %Y "$MNT/n")
	[ "$m" -ge $((before - 1)) ] && [ "$m" -le $((after + 1)) ] || {
		echo "# mtime $m not within [$before, $after]" >&3
		return 1
	}
	assert_eq "$(stat -c %Y "$ROOT/n")" "$m" "POD mtime of a new file"

	echo x >"$MNT/f"
	touch -d '2020-01-02 03:04:05' "$MNT/f"
	exp=$(date -d '2020-01-02 03:04:05' +%s)
	assert_eq "$(stat -c %Y "$MNT/f")" "$exp" "MNT mtime"
	assert_eq "$(stat -c %Y "$ROOT/f")" "$exp" "POD mtime"
	assert_eq "$(stat -c %X "$MNT/f")" "$exp" "MNT atime"
	assert_eq "$(stat -c %y "$MNT/f")" "$(stat -c %y "$ROOT/f")" "MNT and POD mtime to the ns"

	before=$(date +%s)
	touch -a "$MNT/f"
	assert_eq "$(stat -c %Y "$MNT/f")" "$exp" "MNT mtime after touch -a"
	assert_eq "$(stat -c %Y "$ROOT/f")" "$exp" "POD mtime after touch -a"
	[ "$(stat -c %X "$MNT/f")" -ge $((before - 1)) ]
	[ "$(stat -c %X "$ROOT/f")" -ge $((before - 1)) ]

	touch -m -d '2021-06-07 08:09:10' "$MNT/f"
	[ "$(stat -c %X "$MNT/f")" -ge $((before - 1)) ] # atime kept
	assert_eq "$(stat -c %Y "$MNT/f")" "$(date -d '2021-06-07 08:09:10' +%s)" "touch -m"

	# Nanoseconds survive.
	touch -d '2020-01-02 03:04:05.123456789' "$MNT/f"
	assert_eq "$(stat -c %.9Y "$MNT/f")" "$exp.123456789" "MNT mtime ns"
	assert_eq "$(stat -c %.9Y "$ROOT/f")" "$exp.123456789" "POD mtime ns"

	# touch -h on a symlink sets the link, not the target.
	ln -s f "$MNT/l"
	touch -h -d '2019-05-05 05:05:05' "$MNT/l"
	assert_eq "$(stat -c %Y "$MNT/l")" "$(date -d '2019-05-05 05:05:05' +%s)" "symlink mtime"
	assert_eq "$(stat -c %.9Y "$MNT/f")" "$exp.123456789" "target mtime kept"
	assert_eq "$(stat -c %Y "$ROOT/l")" "$(date -d '2019-05-05 05:05:05' +%s)" "POD symlink mtime"

	# Plain touch of an existing file: now.
	before=$(date +%s)
	touch "$MNT/f"
	[ "$(stat -c %Y "$MNT/f")" -ge $((before - 1)) ]
	[ "$(stat -c %Y "$ROOT/f")" -ge $((before - 1)) ]
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "M1: times past 2262 and before 1970 (beyond int64 nanoseconds) are set and shown as on a local directory" {
	local t out d="$BATS_TEST_TMPDIR/local" # the workspace's file system: it clamps alike
	mkdir "$d"
	: >"$MNT/f"
	: >"$d/f"
	ln -s f "$MNT/l"
	ln -s f "$d/l"
	for t in '2262-04-11 23:47:16.854775807' '2262-04-11 23:47:16.854775808' \
		'2300-01-01 00:00:00.123456789' '2446-05-10 22:38:55' '1969-12-31 23:59:59.5' \
		'1901-12-13 20:45:52' '1600-01-01 00:00:00.25'; do
		touch -d "$t UTC" "$MNT/f" "$d/f"
		assert_eq "$(stat -c '%x|%y' "$MNT/f")" "$(stat -c '%x|%y' "$d/f")" "touch -d '$t' of f"
		assert_eq "$(stat -c '%x|%y' "$ROOT/f")" "$(stat -c '%x|%y' "$d/f")" "POD f after '$t'"
		touch -h -m -d "$t UTC" "$MNT/l" "$d/l"
		assert_eq "$(stat -c %y "$MNT/l")" "$(stat -c %y "$d/l")" "touch -h -d '$t' of l"
	done
	# The pod's own touch -d, and a remount (nothing cached), show alike.
	touch -d '2400-02-29 12:00:00.5 UTC' "$ROOT/f"
	touch -d '2400-02-29 12:00:00.5 UTC' "$d/f"
	umount_wsfs
	wsfs_wait_exit
	mount_wsfs
	assert_eq "$(stat -c '%x|%y' "$MNT/f")" "$(stat -c '%x|%y' "$d/f")" "the pod's touch -d, remounted"
	out=$(TZ=UTC "$WSB_BUILD/fusefs/wsctl" -a "$ADDR" stat f)
	assert_contains "$out" "Modify: 2400-02-29 12:00:00.500000000 +0000" "wsctl stat"
	# tar -p restores such a time, through the same SETATTR.
	touch -d '2300-06-01 00:00:00 UTC' "$d/f"
	tar -C "$d" -cf "$BATS_TEST_TMPDIR/t.tar" f
	rm "$MNT/f"
	tar -C "$MNT" -xpf "$BATS_TEST_TMPDIR/t.tar"
	assert_eq "$(stat -c %y "$MNT/f")" "$(stat -c %y "$d/f")" "tar -xp of a 2300 mtime"
	assert_eq "$(stat -c %y "$ROOT/f")" "$(stat -c %y "$d/f")" "POD after tar -xp"
}

# make_tree DIR: a tree with directories, modes (incl. setuid/setgid, 0555
# and 0700 dirs), empty and binary files, odd names, a hard link, symlinks
# (relative, dangling, absolute), a FIFO, and a distinct mtime (with
# nanoseconds) on every entry.
make_tree() {
	"$PY" - "$1" <<-'EOF'
	import os, sys
	top = sys.argv[1]
	os.makedirs(top)
	dirs = [("a", 0o755), ("a/b", 0o700), ("a/b/c", 0o750), ("ro", 0o555),
	        ("sgid", 0o2775), ("empty", 0o711), ("with space", 0o755)]
	x, big = 7, bytearray()
	for _ in range((1 << 20) + 5):
	    x = (x * 1103515245 + 12345) & 0x7fffffff
	    big.append(x >> 16 & 0xff)
	files = [("a/f644", 0o644, b"hello\n"), ("a/b/x600", 0o600, b"secret\n"),
	         ("a/exec", 0o755, b"#!/bin/sh\necho hi\n"), ("a/ro444", 0o444, b"ro\n"),
	         ("a/suid", 0o4755, b"s\n"), ("empty.txt", 0o644, b""),
	         ("bin", 0o640, bytes(big)), ("with space/new\nline", 0o644, b"nl\n"),
	         ("ro/inside", 0o644, b"in\n"), ("a/b/c/deep", 0o600, b"deep\n"),
	         ("sgid/f", 0o2755, b"g\n"), (b"caf\xc3\xa9 \xff".decode("utf-8", "surrogateescape"), 0o644, b"u\n")]
	for d, _ in dirs:
	    os.makedirs(os.path.join(top, d))
	for f, mode, data in files:
	    p = os.path.join(top, f)
	    with open(p, "wb") as fh:
	        fh.write(data)
	    os.chmod(p, mode)
	os.link(os.path.join(top, "a/f644"), os.path.join(top, "a/hl"))
	os.symlink("f644", os.path.join(top, "a/sl"))
	os.symlink("no/such", os.path.join(top, "dangling"))
	os.symlink("/etc/hostname", os.path.join(top, "abs"))
	os.mkfifo(os.path.join(top, "fifo"), 0o640)
	entries = [f for f, _, _ in files] + ["a/sl", "dangling", "abs", "fifo"]
	for i, e in enumerate(entries):
	    t = 1600000000 * 10**9 + i * 1000000007 + i * 1111
	    os.utime(os.path.join(top, e), ns=(t, t), follow_symlinks=False)
	for d, mode in dirs:
	    os.chmod(os.path.join(top, d), mode)
	for i, (d, _) in enumerate(sorted(dirs, key=lambda d: -d[0].count("/"))):
	    t = 1500000000 * 10**9 + i * 999999937
	    os.utime(os.path.join(top, d), ns=(t, t))
	os.chmod(top, 0o751)
	os.utime(top, ns=(1400000000123456789, 1400000000123456789))
	EOF
}

# assert_same_tree A B: tree_sig of A and B are equal (and contents, by diff).
assert_same_tree() {
	local sa sb
	sa=$(tree_sig "$1")
	sb=$(tree_sig "$2")
	if [ "$sa" != "$sb" ]; then
		echo "# trees differ (path|type|mode|nlink|size|mtime|target): $1 vs $2" >&3
		diff <(printf '%s\n' "$sa") <(printf '%s\n' "$sb") | sed 's/^/#   /' >&3
		return 1
	fi
	run diff -r --no-dereference --exclude=fifo "$1" "$2"
	# shellcheck disable=SC2031 # status/output come from the run just above
	if [ "$status" -ne 0 ]; then
		# shellcheck disable=SC2031 # output comes from the run just above
		printf '%s\n' "$output" | sed 's/^/#   /' >&3
		return 1
	fi
}

@test "M2: tar -xpf into MNT reproduces modes and mtimes; tar -c from MNT round-trips" {
	local src="$BATS_TEST_TMPDIR/src"
	make_tree "$src"
	tar --format=posix -C "$src" -cf "$BATS_TEST_TMPDIR/some.tar" .
	mkdir "$MNT/x"
	run --separate-stderr tar -C "$MNT/x" -xpf "$BATS_TEST_TMPDIR/some.tar"
	assert_status 0
	assert_eq "$stderr" ""
	assert_same_tree "$src" "$MNT/x"
	assert_same_tree "$src" "$ROOT/x"
	# And back out of the mount.
	run --separate-stderr tar --format=posix -C "$MNT/x" -cpf "$BATS_TEST_TMPDIR/back.tar" .
	assert_status 0
	assert_eq "$stderr" ""
	mkdir "$BATS_TEST_TMPDIR/back"
	tar -C "$BATS_TEST_TMPDIR/back" -xpf "$BATS_TEST_TMPDIR/back.tar"
	assert_same_tree "$src" "$BATS_TEST_TMPDIR/back"
	# Extracting over the existing tree (tar unlinks and recreates).
	run --separate-stderr tar -C "$MNT/x" -xpf "$BATS_TEST_TMPDIR/some.tar"
	assert_status 0
	assert_eq "$stderr" ""
	assert_same_tree "$src" "$MNT/x"
}

@test "M2: cp -a DIR MNT/ and back reproduces modes, mtimes, links and xattrs" {
	local src="$BATS_TEST_TMPDIR/src"
	make_tree "$src"
	"$PY" -c 'import os, sys; os.setxattr(sys.argv[1], "user.origin", b"cp-a\x00\xff")' "$src/a/f644"
	run --separate-stderr cp -a "$src" "$MNT/"
	assert_status 0
	assert_eq "$stderr" ""
	assert_same_tree "$src" "$MNT/src"
	assert_same_tree "$src" "$ROOT/src"
	run --separate-stderr cp -a "$MNT/src" "$BATS_TEST_TMPDIR/back"
	assert_status 0
	assert_eq "$stderr" ""
	assert_same_tree "$src" "$BATS_TEST_TMPDIR/back"
	run "$PY" -c 'import os, sys; print(repr(os.getxattr(sys.argv[1], "user.origin")))' "$MNT/src/a/f644"
	assert_eq "$output" "b'cp-a\\x00\\xff'" "user xattr copied by cp -a"
	run "$PY" -c 'import os, sys; print(repr(os.getxattr(sys.argv[1], "user.origin")))' "$BATS_TEST_TMPDIR/back/a/f644"
	assert_eq "$output" "b'cp-a\\x00\\xff'" "user xattr copied back"
}
