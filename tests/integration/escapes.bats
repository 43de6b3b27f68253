#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# Confinement: every path-taking RPC of wsbridge.v1.Workspace, Exec's cwd
# and ManageAgentOps' names and app_name, tried with "..", absolute and
# climbing symlinks and dangling symlinks pointing out, must fail with
# PERMISSION_DENIED and leave a sentinel directory outside the root exactly
# as it was (tests/python/test_escapes.py). The same through wsctl.

load test_helper

setup() {
	BOX="$BATS_TEST_TMPDIR/box"
	ROOT="$BOX/root"
	mkdir -p "$ROOT"
}

teardown() {
	wsb_teardown
}

@test "no RPC reaches outside the root (grpcio, every path-taking call)" {
	agentd_tcp
	WSB_TARGET=$ADDR WSB_BOX=$BOX WSB_ROOT=$ROOT run_py test_escapes.py
}

@test "no wsctl command reaches outside the root" {
	mkdir -p "$BOX/outside/sub"
	echo secret >"$BOX/outside/secret.txt"
	ln -s ../outside "$ROOT/up"
	ln -s "$BOX/outside/secret.txt" "$ROOT/abssecret"
	echo local >"$BATS_TEST_TMPDIR/local.txt"
	echo inside >"$ROOT/inside.txt"
	agentd_unix
	local before after p
	before=$(cd "$BOX" && find . -path ./root -prune -o -printf '%p %y %m %s %T@ %n\n' | sort; md5sum outside/secret.txt)

	for p in ../outside/secret.txt up/secret.txt abssecret /../outside/secret.txt; do
		run --separate-stderr "$WSCTL" cat "$p"
		assert_status 1
		assert_eq "$output" "" "stdout of cat $p"
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of cat $p"
		# What happened, not EXDEV's text (the errno beneath it).
		assert_contains "$stderr" "escapes the workspace root" "stderr of cat $p"
		[[ $stderr != *"cross-device"* ]]
		run --separate-stderr "$WSCTL" get "$p" "$BATS_TEST_TMPDIR/got"
		assert_status 1
		[ ! -e "$BATS_TEST_TMPDIR/got" ]
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of get $p"
		run --separate-stderr "$WSCTL" stat -L "$p"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of stat -L $p"
	done
	# Paths that climb out before their last component.
	for p in ../outside/secret.txt up/secret.txt /../outside/secret.txt; do
		run --separate-stderr "$WSCTL" stat "$p"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of stat $p"
		run --separate-stderr "$WSCTL" rm "$p"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of rm $p"
		run --separate-stderr "$WSCTL" mv "$p" stolen
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of mv $p"
		run --separate-stderr "$WSCTL" mv inside.txt "$p"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of mv inside.txt $p"
		[ -f "$ROOT/inside.txt" ]
	done
	# The symlinks themselves live inside: acting on them is fine.
	run --separate-stderr "$WSCTL" stat abssecret
	assert_status 0
	for p in ../outside up /../outside; do
		run --separate-stderr "$WSCTL" ls "$p"
		if [ "$p" = up ] && [ "$status" -eq 0 ]; then
			# ls of a symlink it may not follow may list the link itself,
			# as ls(1) does for a dangling one, but nothing behind it.
			assert_eq "$output" "up" "ls up"
		else
			assert_status 1
			assert_contains "$stderr" "PERMISSION_DENIED" "stderr of ls $p"
		fi
		run --separate-stderr "$WSCTL" ls "$p/"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of ls $p/"
		run --separate-stderr "$WSCTL" ls -l "$p/sub"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of ls -l $p/sub"
		run --separate-stderr "$WSCTL" put "$BATS_TEST_TMPDIR/local.txt" "$p/planted.txt"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of put $p"
		run --separate-stderr "$WSCTL" mkdir "$p/newdir"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of mkdir $p"
		run --separate-stderr "$WSCTL" mkdir -p "$p/a/b"
		assert_status 1
		run --separate-stderr "$WSCTL" rm -r "$p/sub"
		assert_status 1
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of rm -r $p"
		run --separate-stderr "$WSCTL" exec --cwd "$p" -- touch "$BOX/pwned"
		assert_status 126
		assert_eq "$output" ""
		assert_contains "$stderr" "PERMISSION_DENIED" "stderr of exec --cwd $p"
	done
	after=$(cd "$BOX" && find . -path ./root -prune -o -printf '%p %y %m %s %T@ %n\n' | sort; md5sum outside/secret.txt)
	assert_eq "$after" "$before" "the tree outside the root"
}
