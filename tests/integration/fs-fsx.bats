#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# tests/fsx/fsx on a wsfs mount: every step of its table of syscalls (open
# flags, I/O at offsets, truncate, SEEK_DATA/SEEK_HOLE, unlink and rename of
# open files, rename flags, links, mkdir/rmdir errors, chmod/chown/utimensat,
# xattrs, fallocate, copy_file_range, statfs, fsync, mknod, access,
# getdents, names, mmap, locks, a signal storm) must give on the mount what
# it gives in a local directory on the same filesystem as agentd's root.

load test_helper

BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-300}

setup() {
	need_wsfs
	[ -x "$FSX" ] || skip "fsx is not built ($FSX)"
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT" "$BATS_TEST_TMPDIR/local"
	agentd_unix
	mount_wsfs
}

teardown() {
	fs_teardown
}

@test "fsx: each syscall on the mount matches a local directory (result and errno)" {
	run timeout 280 "$FSX" -n 1000 -t 120 "$BATS_TEST_TMPDIR/local" "$MNT"
	if [ "$status" -ne 0 ]; then
		{
			echo "# fsx exit status $status; its mismatches (reproduce: fsx -c CASE LOCALDIR MNTDIR):"
			printf '%s\n' "$output" | grep -v '^ok ' | sed 's/^/#   /'
		} >&3
		return 1
	fi
	assert_contains "$output" " 0 mismatches"
	# The pod side holds what the mount made (spot checks).
	[ -d "$ROOT/open_flags" ]
	assert_content "$ROOT/fsync/f" durable
}
