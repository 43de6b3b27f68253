# SPDX-License-Identifier: Apache-2.0
"""agentd's transport as a grpcio client sees it: health, unknown methods,
bearer tokens.

Environment: WSB_TARGET, WSB_ROOT; WSB_TOKEN when agentd was started with
--token-file (then the auth tests run, else the no-token tests run).
Run by tests/integration/agentd.bats.
"""
import os
import re
import time
import unittest

import grpc

import wsbtest
from wsbtest import (describe, devagent_pb2, devagent_pb2_grpc, health_pb2, health_pb2_grpc, pb,
                     pbg)

TIMEOUT = wsbtest.TIMEOUT
TOKEN = os.environ.get("WSB_TOKEN")


class Transport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.md = wsbtest.auth_md()

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def test_health_check(self):
        stub = health_pb2_grpc.HealthStub(self.ch)
        # Exempt from the token: no metadata at all.
        for service in ("", "wsbridge.v1.Workspace"):
            r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
            self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING, service)

    def test_health_watch_unimplemented(self):
        call = self.ch.unary_stream("/grpc.health.v1.Health/Watch")
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            list(call(health_pb2.HealthCheckRequest().SerializeToString(), timeout=10,
                      metadata=self.md))
        self.assertIn(cm.exception.code(), (grpc.StatusCode.UNIMPLEMENTED,),
                      describe(cm.exception))
        self.assertLess(time.monotonic() - t0, 2.0)

    def test_unknown_methods_answer_at_once(self):
        req = pb.StatRequest(path=b".").SerializeToString()
        for path in ("/wsbridge.v1.Workspace/NoSuchMethod", "/wsbridge.v1.workspace/Stat",
                     "/WSBRIDGE.V1.WORKSPACE/STAT", "/wsbridge.v1.Nope/Stat", "/x", "/",
                     "/wsbridge.v1.Workspace/stat"):
            call = self.ch.unary_unary(path)
            t0 = time.monotonic()
            with self.assertRaises(grpc.RpcError, msg=path) as cm:
                call(req, timeout=10, metadata=self.md)
            took = time.monotonic() - t0
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED,
                             "%s: %s" % (path, describe(cm.exception)))
            self.assertLess(took, 2.0, "%s took %.2f s" % (path, took))
        # Streaming shapes too.
        call = self.ch.stream_stream("/wsbridge.v1.Exec/Nope")
        with self.assertRaises(grpc.RpcError) as cm:
            list(call(iter([req]), timeout=10, metadata=self.md))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_garbage_request_is_invalid_argument(self):
        # A request body that is not a valid encoding must not crash agentd.
        call = self.ch.unary_unary("/wsbridge.v1.Workspace/Stat")
        for body in (b"\xff\xff\xff\xff", b"\x0a\x80\x80\x80\x80\x10", b"\x0a\x05ab"):
            with self.assertRaises(grpc.RpcError) as cm:
                call(body, timeout=TIMEOUT, metadata=self.md)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                             describe(cm.exception))
        # Still serving.
        r = pbg.WorkspaceStub(self.ch).Stat(pb.StatRequest(path=b"."), timeout=TIMEOUT,
                                            metadata=self.md)
        self.assertTrue(r.attr.mode)


@unittest.skipUnless(TOKEN, "agentd runs without a token")
class Token(unittest.TestCase):
    """Every call but health Check needs 'authorization: Bearer TOKEN'."""

    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.ws = pbg.WorkspaceStub(cls.ch)
        cls.ex = pbg.ExecStub(cls.ch)
        cls.da = devagent_pb2_grpc.ManageAgentOpsStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    BAD = [None,
           (("authorization", "Bearer wrong"),),
           (("authorization", "Bearer " + (TOKEN or "")[:-1]),),
           (("authorization", "Bearer " + (TOKEN or "") + "x"),),
           (("authorization", "bearer-" + (TOKEN or "")),),
           (("authorization", (TOKEN or "")),),
           (("authorization", "Basic " + (TOKEN or "")),),
           (("x-token", "Bearer " + (TOKEN or "")),)]

    def calls(self, md):
        marker = os.path.join(wsbtest.env("WSB_ROOT"), "made_without_token")

        def upload():
            return self.ws.Upload(iter([pb.UploadChunk(header=pb.UploadHeader(path=b"up.txt"),
                                                       data=b"x", commit=True)]),
                                  timeout=TIMEOUT, metadata=md)
        return [
            ("Stat", lambda: self.ws.Stat(pb.StatRequest(path=b"."), timeout=TIMEOUT,
                                          metadata=md)),
            ("Mkdir", lambda: self.ws.Mkdir(pb.MkdirRequest(path=b"made_without_token_d",
                                                            mode=0o755),
                                            timeout=TIMEOUT, metadata=md)),
            ("Upload", upload),
            ("Download", lambda: list(self.ws.Download(pb.DownloadRequest(path=b"f.txt"),
                                                       timeout=TIMEOUT, metadata=md))),
            ("Exec", lambda: list(self.ex.Start(pb.ExecRequest(argv=[b"touch", marker.encode()]),
                                                timeout=TIMEOUT, metadata=md))),
            ("CreateFiles", lambda: self.da.CreateFiles(
                devagent_pb2.CreateFileRequest(files=["made_without_token_cf"], contents=["x"],
                                               app_name=""), timeout=TIMEOUT, metadata=md)),
            ("ExecuteCommands", lambda: self.da.ExecuteCommands(
                devagent_pb2.ExecuteCommandsRequest(cmds=["touch " + marker], app_name=""),
                timeout=TIMEOUT, metadata=md)),
            ("ViewFile", lambda: self.da.ViewFile(devagent_pb2.ViewFileRequest(path="f.txt"),
                                                  timeout=TIMEOUT, metadata=md)),
        ]

    def test_without_token_unauthenticated(self):
        with open(os.path.join(wsbtest.env("WSB_ROOT"), "f.txt"), "w") as fh:
            fh.write("f\n")
        for md in self.BAD:
            for name, fn in self.calls(md):
                with self.subTest("%s with %r" % (name, md)):
                    with self.assertRaises(grpc.RpcError) as cm:
                        fn()
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED,
                                     "%s: %s" % (name, describe(cm.exception)))
        self.assertEqual(sorted(os.listdir(wsbtest.env("WSB_ROOT"))), ["f.txt"],
                         "a call without the token changed the workspace")

    def test_unknown_method_without_token(self):
        # Unknown methods answer UNAUTHENTICATED or UNIMPLEMENTED; either way
        # at once, and without leaking anything.
        call = self.ch.unary_unary("/wsbridge.v1.Workspace/NoSuch")
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"", timeout=5)
        self.assertIn(cm.exception.code(), (grpc.StatusCode.UNAUTHENTICATED,
                                            grpc.StatusCode.UNIMPLEMENTED))

    def test_with_token(self):
        md = (("authorization", "Bearer " + TOKEN),)
        with open(os.path.join(wsbtest.env("WSB_ROOT"), "f.txt"), "w") as fh:
            fh.write("f\n")
        r = self.ws.Stat(pb.StatRequest(path=b"f.txt"), timeout=TIMEOUT, metadata=md)
        self.assertEqual(r.attr.size, 2)
        r = self.da.ViewFile(devagent_pb2.ViewFileRequest(path="f.txt"), timeout=TIMEOUT,
                             metadata=md)
        self.assertEqual(r.code, "f\n")
        evs = list(self.ex.Start(pb.ExecRequest(argv=[b"echo", b"hi"]), timeout=TIMEOUT,
                                 metadata=md))
        self.assertEqual(b"".join(e.stdout.data for e in evs if e.HasField("stdout")), b"hi\n")
        self.assertEqual([e.exited.code for e in evs if e.HasField("exited")], [0])

    def test_large_requests_without_token_are_not_read(self):
        # A request is read only once its call is authorized (before: in
        # full, 40 MiB of path and as much again decoded, for each
        # caller without the token); a health check's, read without the
        # token, is not decoded past 4 KiB, a few at a time.
        pid = os.environ.get("WSB_AGENTD_PID")
        big = b"x" * (40 << 20)

        def hwm_mib():
            with open("/proc/%s/status" % pid) as fh:
                return int(re.search(r"VmHWM:\s+(\d+) kB", fh.read()).group(1)) // 1024
        if pid:
            with open("/proc/%s/clear_refs" % pid, "w") as fh:
                fh.write("5")  # reset VmHWM (proc(5))
            before = hwm_mib()
        for _ in range(3):
            with self.assertRaises(grpc.RpcError) as cm:
                self.ws.Stat(pb.StatRequest(path=big), timeout=TIMEOUT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED,
                             describe(cm.exception))
        if pid:
            self.assertLess(hwm_mib() - before, 20, "agentd's peak RSS grew (MiB)")
        with self.assertRaises(grpc.RpcError) as cm:
            health_pb2_grpc.HealthStub(self.ch).Check(
                health_pb2.HealthCheckRequest(service="x" * 5000), timeout=TIMEOUT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         describe(cm.exception))
        self.assertIn("(at most 4096)", cm.exception.details())
        r = health_pb2_grpc.HealthStub(self.ch).Check(health_pb2.HealthCheckRequest(),
                                                      timeout=TIMEOUT)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def test_health_exempt(self):
        r = health_pb2_grpc.HealthStub(self.ch).Check(health_pb2.HealthCheckRequest(),
                                                      timeout=TIMEOUT)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)


if __name__ == "__main__":
    unittest.main(verbosity=2)
