# SPDX-License-Identifier: Apache-2.0
"""Random requests to agentd: no input from the network may crash it.

Each call is a valid request to a method of Workspace, Exec, ManageAgentOps
or Health, with its fields corrupted at random by hostile_agentd.Liar
(integers at their limits, names such as "..", "/etc/passwd" and "a\\0b",
lists emptied or grown, enums out of range). What runs as a command stays
harmless: argv, shell and ManageAgentOps' cmds are put back to `true` or
`echo` after the corruption (Start's other fields, cwd and env included, are
corrupted). Checks: every call ends within its deadline; every failure has
a status message (what failed and why) and no failure is UNKNOWN (an
unhandled case); agentd answers Health at the end. The caller (agentd.bats)
checks that agentd still runs and that nothing outside the root changed.

Paths aim outside the root too: "out/c" through the symlink ROOT/out, which
leads out, "../outside/c", and the absolute path of WSB_OUTSIDE/c in place
of hostile_agentd's "/etc/passwd" (the caller watches WSB_OUTSIDE; the
host's own files are never named).

Usage: fuzz_agentd.py SEED CALLS
Environment: WSB_TARGET, WSB_ROOT, WSB_OUTSIDE (a directory beside the root
holding c and d/g, reached from the root by the symlink "out").
"""
import os
import random
import sys
import time

import grpc

import devagent_pb2 as dpb
import devagent_pb2_grpc as dpbg
import health_pb2 as hpb
import health_pb2_grpc as hpbg
import wsbtest
import hostile_agentd
from hostile_agentd import Liar
from wsbtest import pb, pbg

SC = grpc.StatusCode
OUTSIDE = os.fsencode(os.path.abspath(wsbtest.env("WSB_OUTSIDE")))


def bases():
    """(stub attribute, method, kind, [requests]) for every method."""
    P = [b"", b"f", b"d", b"d/g", b"sl", b"new", b"nope/x", b"out", b"out/c", b"out/d/g",
         b"../outside/c", OUTSIDE + b"/c"]
    ref = [pb.ProcessRef(id=1), pb.ProcessRef(tag="t")]
    return [
        ("ws", "Stat", "uu", [pb.StatRequest(path=p, follow=True) for p in P]),
        ("ws", "ReadDir", "uu", [pb.ReadDirRequest(path=b""), pb.ReadDirRequest(path=b"d")]),
        ("ws", "Open", "uu", [pb.OpenRequest(path=b"f", read_ahead=4096),
                              pb.OpenRequest(path=b"new", access=pb.RDWR, create=True)]),
        ("ws", "Read", "uu", [pb.ReadRequest(handle=1, offset=0, size=4096)]),
        ("ws", "Write", "uu", [pb.WriteRequest(handle=1, offset=0, data=b"x")]),
        ("ws", "Fsync", "uu", [pb.FsyncRequest(handle=1)]),
        ("ws", "Release", "uu", [pb.HandleRequest(handle=1)]),
        ("ws", "SetAttr", "uu", [pb.SetAttrRequest(path=b"f")]),
        ("ws", "Mkdir", "uu", [pb.MkdirRequest(path=b"nd", mode=0o755)]),
        ("ws", "Mknod", "uu", [pb.MknodRequest(path=b"nf", mode=0o10644)]),
        ("ws", "Unlink", "uu", [pb.PathRequest(path=b"new")]),
        ("ws", "Rmdir", "uu", [pb.PathRequest(path=b"nd")]),
        ("ws", "Rename", "uu", [pb.RenameRequest(**{"from": b"new", "to": b"new2"})]),
        ("ws", "Link", "uu", [pb.LinkRequest(**{"from": b"f", "to": b"fl"})]),
        ("ws", "Symlink", "uu", [pb.SymlinkRequest(target=b"f", path=b"s2")]),
        ("ws", "Readlink", "uu", [pb.PathRequest(path=b"sl")]),
        ("ws", "StatFs", "uu", [pb.PathRequest(path=b"")]),
        ("ws", "GetXattr", "uu", [pb.GetXattrRequest(path=b"f", name=b"user.a")]),
        ("ws", "SetXattr", "uu", [pb.SetXattrRequest(path=b"f", name=b"user.a", value=b"v")]),
        ("ws", "ListXattr", "uu", [pb.ListXattrRequest(path=b"f")]),
        ("ws", "RemoveXattr", "uu", [pb.RemoveXattrRequest(path=b"f", name=b"user.a")]),
        ("ws", "Fallocate", "uu", [pb.FallocateRequest(handle=1, offset=0, length=4096)]),
        ("ws", "Lseek", "uu", [pb.LseekRequest(handle=1, offset=0)]),
        ("ws", "CopyFileRange", "uu", [pb.CopyFileRangeRequest(handle_in=1, handle_out=2,
                                                               length=10)]),
        ("ws", "Upload", "su", [pb.UploadChunk(header=pb.UploadHeader(path=b"up", mode=0o644),
                                               data=b"abc", commit=True)]),
        ("ws", "Download", "us", [pb.DownloadRequest(path=b"f")]),
        ("ws", "Watch", "us", [pb.WatchRequest()]),
        ("ex", "Start", "us", [pb.ExecRequest(argv=[b"true"]),
                               pb.ExecRequest(argv=[b"true"], pty=True, rows=24, cols=80),
                               pb.ExecRequest(argv=[b"true"], tag="t", detach=True)]),
        ("ex", "Attach", "us", [pb.AttachRequest(process=r) for r in ref]),
        ("ex", "WriteStdin", "uu", [pb.StdinRequest(process=ref[0], data=b"x", eof=True)]),
        ("ex", "Resize", "uu", [pb.ResizeRequest(process=ref[0], rows=30, cols=100)]),
        ("ex", "Signal", "uu", [pb.SignalRequest(process=ref[0], signal=15)]),
        ("ex", "List", "uu", [pb.ListRequest()]),
        ("ex", "Wait", "uu", [pb.WaitRequest(process=r) for r in ref]),
        ("da", "CreateFiles", "uu", [dpb.CreateFileRequest(files=["a.txt"], contents=["x"],
                                                           app_name="app")]),
        ("da", "ExecuteCommands", "uu", [dpb.ExecuteCommandsRequest(app_name="app",
                                                                    cmds=["true"])]),
        ("da", "ViewFile", "uu", [dpb.ViewFileRequest(path="app/a.txt")]),
        ("hc", "Check", "uu", [hpb.HealthCheckRequest()]),
    ]


def harmless(req):
    """What would run as a command runs `true` or `echo` only."""
    name = req.DESCRIPTOR.name
    if name == "ExecRequest":
        del req.argv[:]
        req.argv.extend([b"echo", b"fuzz"] if req.pty else [b"true"])
        req.shell = b""
        del req.args[:]
        req.timeout_ms = min(req.timeout_ms, 5000) or 5000
    elif name == "ExecuteCommandsRequest":
        del req.cmds[:]
        req.cmds.append("true")
        req.load_from_file = False


def main():
    seed, calls = int(sys.argv[1]), int(sys.argv[2])
    i = hostile_agentd.BYTES.index(b"/etc/passwd")
    hostile_agentd.BYTES[i] = OUTSIDE + b"/c"
    rng = random.Random(seed)
    liar = Liar(random.Random("fuzz/%d" % seed), 0.3)
    ch = wsbtest.channel()
    stubs = {"ws": pbg.WorkspaceStub(ch), "ex": pbg.ExecStub(ch),
             "da": dpbg.ManageAgentOpsStub(ch), "hc": hpbg.HealthStub(ch)}
    table = bases()
    bad = []
    codes = {}
    for i in range(calls):
        stub, meth, kind, reqs = rng.choice(table)
        req = type(reqs[0])()
        req.CopyFrom(rng.choice(reqs))
        liar.mutate(req)
        harmless(req)
        fn = getattr(stubs[stub], meth)
        what = "%s.%s(%r)" % (stub, meth, req)
        t0 = time.monotonic()
        try:
            if kind == "uu":
                fn(req, timeout=10)
            elif kind == "su":
                n = rng.choice([1, 2, 3])
                chunks = [req] + [pb.UploadChunk(data=b"y" * rng.choice([0, 1, 5000]))
                                  for _ in range(n - 1)]
                fn(iter(chunks), timeout=10)
            else:
                it = fn(req, timeout=0.3)
                for k, _ in enumerate(it):
                    if k >= 20:
                        it.cancel()
                        break
            code = SC.OK
        except grpc.RpcError as e:
            code = e.code()
            if code not in (SC.CANCELLED, SC.DEADLINE_EXCEEDED) and not e.details():
                bad.append("%s: %s with no message" % (what[:300], code.name))
            if code == SC.UNKNOWN:
                bad.append("%s: UNKNOWN %r" % (what[:300], e.details()))
            if code == SC.DEADLINE_EXCEEDED and kind == "uu" and meth != "Wait":
                bad.append("%s: no answer within 10 s" % what[:300])
            if code == SC.UNAVAILABLE:
                bad.append("%s: UNAVAILABLE %r (agentd gone?)" % (what[:300], e.details()))
                break
        if time.monotonic() - t0 > 15:
            bad.append("%s: took %.1f s" % (what[:300], time.monotonic() - t0))
        codes[code.name] = codes.get(code.name, 0) + 1
    st = hpbg.HealthStub(ch).Check(hpb.HealthCheckRequest(), timeout=10).status
    print("seed %d, %d calls: %s; health %s" % (
        seed, calls, ", ".join("%s %d" % kv for kv in sorted(codes.items())),
        hpb.HealthCheckResponse.ServingStatus.Name(st)))
    for b in bad[:20]:
        print("BAD:", b)
    sys.exit(1 if bad or st != hpb.HealthCheckResponse.SERVING else 0)


if __name__ == "__main__":
    main()
