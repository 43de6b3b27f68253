#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# Dev_Agent compatibility: ManageAgentOps called with the generated Python
# stubs exactly as Dev_Agent calls it (tests/python/test_devagent.py), over
# loopback TCP, over a stdio tunnel, and with a token.

load test_helper

setup() {
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
}

teardown() {
	wsb_teardown
}

@test "ManageAgentOps over TCP (grpcio, Dev_Agent's calls)" {
	agentd_tcp --view-limit 1000
	# agentd's own memory is read where it is a process here (not gVisor's)
	# and not a sanitizer build (ASan's quarantine keeps freed memory).
	local pid=
	wsb_runsc || wsb_sanitized || pid=$AGENTD_PID
	WSB_TARGET=$ADDR WSB_ROOT=$ROOT WSB_VIEW_LIMIT=1000 WSB_AGENTD_PID=$pid run_py test_devagent.py
}

@test "ManageAgentOps over agentd --stdio through socat (grpcio)" {
	local sock="$BATS_TEST_TMPDIR/tunnel.sock"
	bg socat socat "UNIX-LISTEN:$sock,fork" "EXEC:$AGENTD --root $ROOT --stdio --view-limit 4096"
	wait_listen "unix:$sock" "$BG_PID" 10
	WSB_TARGET="unix:$sock" WSB_ROOT=$ROOT WSB_VIEW_LIMIT=4096 run_py test_devagent.py
}

@test "ExecuteCommands at agentd's process limit (grpcio)" {
	agentd_unix --max-procs 1
	WSB_MAX_PROCS=1 WSB_TARGET=$ADDR WSB_ROOT=$ROOT WSB_VIEW_LIMIT=4193280 \
		run_py test_devagent.py DevAgent.test_execute_commands_at_the_process_limit
}

@test "ManageAgentOps with a token (grpcio)" {
	printf 'dev-agent-token\n' >"$BATS_TEST_TMPDIR/token"
	chmod 600 "$BATS_TEST_TMPDIR/token"
	agentd_unix --token-file "$BATS_TEST_TMPDIR/token" --view-limit 2000
	WSB_TOKEN=dev-agent-token WSB_TARGET=$ADDR WSB_ROOT=$ROOT WSB_VIEW_LIMIT=2000 \
		run_py test_devagent.py DevAgent.test_create_files DevAgent.test_execute_commands_transcript DevAgent.test_view_file_limit
}

@test "ViewFile's default limit lets a 1 MiB file through" {
	agentd_tcp
	head -c 1048576 /dev/zero | tr '\0' 'a' >"$ROOT/big.txt"
	run "$PY" -c '
import sys, wsbtest
from wsbtest import devagent_pb2, devagent_pb2_grpc
stub = devagent_pb2_grpc.ManageAgentOpsStub(wsbtest.channel(sys.argv[1]))
r = stub.ViewFile(devagent_pb2.ViewFileRequest(path="big.txt"), timeout=15)
print(len(r.code), set(r.code))' "$ADDR"
	assert_status 0
	assert_eq "$output" "1048576 {'a'}"
}
