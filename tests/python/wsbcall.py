# SPDX-License-Identifier: Apache-2.0
"""Small grpcio calls for the bats suites, so that agentd's own tests do not
depend on wsctl.

  wsbcall.py health TARGET
      print the health status name (SERVING); exit 0 when SERVING, 1 on an
      RPC error (its code and message on stderr)
  wsbcall.py exec-until-end TARGET -- ARGV...
      start ARGV with Exec.Start; print "started PID" (flushed) once it runs,
      then every event as it arrives, then "status CODE" when the stream ends
  wsbcall.py follow TARGET [--tag T] [--timeout-ms N] -- ARGV...
      start ARGV without kill_on_detach (it outlives this client); print
      "started ID PID" and then "stdout TOTAL" after every stdout chunk
      (flushed), "exited ..." and "status ..." at the end
  wsbcall.py info TARGET ID|TAG
      Exec.Wait for it; print "code=C signal=S timed_out=B killed_by=NAME"
  wsbcall.py devagent-reads TARGET MNT N
      N times, as an agent does: look for MNT/app/outI (missing), have
      ManageAgentOps.ExecuteCommands write I into app/outI, then read it on
      the mount at once; print the runs that did not read I ("failed K")
"""
import os
import sys

import grpc

import wsbtest
from wsbtest import (describe, devagent_pb2, devagent_pb2_grpc, health_pb2, health_pb2_grpc,
                     pb, pbg)


def health(target):
    ch = wsbtest.channel(target)
    try:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    except grpc.RpcError as e:
        print(describe(e), file=sys.stderr)
        return 1
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
    print(name)
    return 0 if name == "SERVING" else 1


def exec_until_end(target, argv):
    ch = wsbtest.channel(target)
    stub = pbg.ExecStub(ch)
    try:
        for ev in stub.Start(pb.ExecRequest(argv=[a.encode() for a in argv]), timeout=60,
                             metadata=wsbtest.auth_md()):
            kind = ev.WhichOneof("event")
            if kind == "started":
                print("started %d" % ev.started.pid, flush=True)
            elif kind == "exited":
                print("exited code=%d signal=%d" % (ev.exited.code, ev.exited.signal),
                      flush=True)
            else:
                print("%s %r" % (kind, getattr(ev, kind).data), flush=True)
        print("status OK", flush=True)
    except grpc.RpcError as e:
        print("status %s" % describe(e), flush=True)
    return 0


def follow(target, opts, argv):
    ch = wsbtest.channel(target)
    stub = pbg.ExecStub(ch)
    req = pb.ExecRequest(argv=[a.encode() for a in argv], tag=opts.get("--tag", ""),
                         timeout_ms=int(opts.get("--timeout-ms", "0")))
    total = 0
    try:
        for ev in stub.Start(req, timeout=120, metadata=wsbtest.auth_md()):
            kind = ev.WhichOneof("event")
            if kind == "started":
                print("started %d %d" % (ev.started.id, ev.started.pid), flush=True)
            elif kind == "stdout":
                total += len(ev.stdout.data)
                print("stdout %d" % total, flush=True)
            elif kind == "exited":
                print("exited code=%d signal=%d" % (ev.exited.code, ev.exited.signal), flush=True)
        print("status OK", flush=True)
    except grpc.RpcError as e:
        print("status %s" % describe(e), flush=True)
    return 0


def info(target, name):
    ch = wsbtest.channel(target)
    ref = pb.ProcessRef(id=int(name)) if name.isdigit() else pb.ProcessRef(tag=name)
    try:
        r = pbg.ExecStub(ch).Wait(pb.WaitRequest(process=ref), timeout=30,
                                  metadata=wsbtest.auth_md())
    except grpc.RpcError as e:
        print(describe(e), file=sys.stderr)
        return 1
    print("code=%d signal=%d timed_out=%s killed_by=%s" % (
        r.exit.code, r.exit.signal, r.exit.timed_out, pb.KilledBy.Name(r.exit.killed_by)))
    return 0


def devagent_reads(target, mnt, n):
    ch = wsbtest.channel(target)
    stub = devagent_pb2_grpc.ManageAgentOpsStub(ch)
    os.makedirs(os.path.join(mnt, "app"), exist_ok=True)
    failed = 0
    for i in range(n):
        path = os.path.join(mnt, "app", "out%d" % i)
        assert not os.path.exists(path), path
        stub.ExecuteCommands(devagent_pb2.ExecuteCommandsRequest(
            cmds=["echo %d > out%d" % (i, i)], app_name="app"),
            timeout=30, metadata=wsbtest.auth_md())
        try:
            with open(path) as f:
                got = f.read().strip()
        except OSError as e:
            got = str(e)
        if got != str(i):
            print("run %d: %s" % (i, got), file=sys.stderr)
            failed += 1
    print("failed %d" % failed)
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "health":
        return health(argv[1])
    if len(argv) >= 4 and argv[0] == "exec-until-end" and argv[2] == "--":
        return exec_until_end(argv[1], argv[3:])
    if len(argv) >= 4 and argv[0] == "follow" and "--" in argv:
        i = argv.index("--")
        opts = dict(zip(argv[2:i:2], argv[3:i:2]))
        return follow(argv[1], opts, argv[i + 1:])
    if len(argv) == 3 and argv[0] == "info":
        return info(argv[1], argv[2])
    if len(argv) == 4 and argv[0] == "devagent-reads":
        return devagent_reads(argv[1], argv[2], int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
