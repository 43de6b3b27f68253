# SPDX-License-Identifier: Apache-2.0
"""Small grpcio calls for the bats suites, so that agentd's own tests do not
depend on wsctl.

  wsbcall.py health TARGET
      print the health status name (SERVING); exit 0 when SERVING, 1 on an
      RPC error (its code and message on stderr)
  wsbcall.py exec-until-end TARGET -- ARGV...
      start ARGV with Exec.Start; print "started PID" (flushed) once it runs,
      then every event as it arrives, then "status CODE" when the stream ends
"""
import sys

import grpc

import wsbtest
from wsbtest import describe, health_pb2, health_pb2_grpc, pb, pbg


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


def main(argv):
    if len(argv) >= 2 and argv[0] == "health":
        return health(argv[1])
    if len(argv) >= 4 and argv[0] == "exec-until-end" and argv[2] == "--":
        return exec_until_end(argv[1], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
