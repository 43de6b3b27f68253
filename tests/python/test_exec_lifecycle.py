# SPDX-License-Identifier: Apache-2.0
"""wsbridge.v1.Exec's process lifecycle as a grpcio client sees it: ids and
tags, Attach with replay from byte offsets and ExecLost, WriteStdin in chunks
then EOF, limits with the limit in the message, List and Wait, Resize, Signal,
and many concurrent commands. Cases: /work/shared/cases/exec-cases.md.

Run by tests/integration/exec-lifecycle.bats against a real agentd (WSB_TARGET,
WSB_ROOT; see wsbtest.py). Classes that need agentd started with particular
options say so; the bats file runs each against the right agentd:
  SmallJournal   agentd --journal-size 4096
  (others)       defaults
"""
import hashlib
import os
import threading
import time
import unittest

import grpc

import wsbtest
from wsbtest import TIMEOUT, describe, pb, pbg, trailer

ROOT = wsbtest.env("WSB_ROOT")
MiB = 1024 * 1024


def rp(*parts):
    return os.path.join(ROOT, *parts)


class ExecTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.ex = pbg.ExecStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def start(self, **kw):
        """Start detached; returns the started event."""
        evs = list(self.ex.Start(pb.ExecRequest(detach=True, **kw), timeout=TIMEOUT))
        self.assertEqual(len(evs), 1, evs)
        self.assertTrue(evs[0].HasField("started"))
        return evs[0].started

    def wait(self, pid_id, timeout=TIMEOUT):
        return self.ex.Wait(pb.WaitRequest(process=pb.ProcessRef(id=pid_id)), timeout=timeout)

    def attach(self, pid_id, out=0, err=0, no_follow=False):
        return list(self.ex.Attach(pb.AttachRequest(process=pb.ProcessRef(id=pid_id),
                                                    stdout_offset=out, stderr_offset=err,
                                                    no_follow=no_follow), timeout=TIMEOUT))

    def fails(self, code, fn, *needles):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.code(), code, describe(e))
        for n in needles:
            self.assertIn(n, e.details(), describe(e))
        return e

    @staticmethod
    def joined(evs, kind):
        return b"".join(getattr(e, kind).data for e in evs if e.HasField(kind))


class Stdin(ExecTest):
    def test_chunks_then_eof(self):
        """E5: WriteStdin chunks as they come, then EOF; output byte-exact."""
        data = os.urandom(5 * 200 * 1024 + 17)
        s = self.start(shell=b"sha256sum; echo done", stdin_open=True)
        ref = pb.ProcessRef(id=s.id)
        for i in range(0, len(data), 200 * 1024):
            self.ex.WriteStdin(pb.StdinRequest(process=ref, data=data[i:i + 200 * 1024]),
                               timeout=TIMEOUT)
        self.ex.WriteStdin(pb.StdinRequest(process=ref, eof=True), timeout=TIMEOUT)
        info = self.wait(s.id)
        self.assertEqual(info.exit.code, 0)
        out = self.joined(self.attach(s.id), "stdout")
        self.assertEqual(out, (hashlib.sha256(data).hexdigest() + "  -\ndone\n").encode())
        # after EOF, stdin is closed
        self.fails(grpc.StatusCode.FAILED_PRECONDITION,
                   lambda: self.ex.WriteStdin(pb.StdinRequest(process=ref, data=b"x"),
                                              timeout=TIMEOUT), "stdin")

    def test_initial_stdin_then_more(self):
        s = self.start(shell=b"cat", stdin=b"first ", stdin_open=True, tag="stdin-more")
        ref = pb.ProcessRef(tag="stdin-more")
        self.ex.WriteStdin(pb.StdinRequest(process=ref, data=b"second", eof=True),
                           timeout=TIMEOUT)
        self.wait(s.id)
        self.assertEqual(self.joined(self.attach(s.id), "stdout"), b"first second")

    def test_no_stdin_is_eof(self):
        """E5: a command started without stdin sees EOF at once."""
        t0 = time.monotonic()
        evs = list(self.ex.Start(pb.ExecRequest(shell=b"cat; echo eof"), timeout=TIMEOUT))
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(self.joined(evs, "stdout"), b"eof\n")
        s = self.start(argv=[b"true"])
        self.wait(s.id)
        self.fails(grpc.StatusCode.FAILED_PRECONDITION,
                   lambda: self.ex.WriteStdin(pb.StdinRequest(process=pb.ProcessRef(id=s.id),
                                                              data=b"x"), timeout=TIMEOUT))

    def test_chunk_limit(self):
        """A chunk over 1 MiB: RESOURCE_EXHAUSTED naming the limit; 1 MiB is fine."""
        s = self.start(shell=b"cat >/dev/null", stdin_open=True)
        ref = pb.ProcessRef(id=s.id)
        e = self.fails(grpc.StatusCode.RESOURCE_EXHAUSTED,
                       lambda: self.ex.WriteStdin(pb.StdinRequest(process=ref,
                                                                  data=b"x" * (MiB + 1)),
                                                  timeout=TIMEOUT),
                       "1048576")
        self.assertIn(str(MiB + 1), e.details())
        self.ex.WriteStdin(pb.StdinRequest(process=ref, data=b"x" * MiB, eof=True),
                           timeout=TIMEOUT)
        self.assertEqual(self.wait(s.id).exit.code, 0)


class Lifecycle(ExecTest):
    def test_list_and_wait(self):
        """List shows running and exited processes with argv, cwd and start
        time; Wait returns the exit."""
        os.makedirs(rp("wd"), exist_ok=True)
        before = time.time_ns()
        a = self.start(argv=[b"sleep", b"30"], cwd=b"wd", tag="list-a")
        b = self.start(shell=b"echo hi; exit 4", args=[b"x y"])
        self.assertEqual(a.tag, "list-a")
        self.assertGreater(b.id, a.id)
        self.assertEqual(self.wait(b.id).exit.code, 4)
        procs = {p.id: p for p in self.ex.List(pb.ListRequest(), timeout=TIMEOUT).processes}
        pa, pb_ = procs[a.id], procs[b.id]
        self.assertEqual(pa.state, pb.RUNNING)
        self.assertEqual(list(pa.argv), [b"sleep", b"30"])
        self.assertEqual(pa.cwd, b"wd")
        self.assertEqual(pa.tag, "list-a")
        self.assertEqual(pa.pid, a.pid)
        self.assertFalse(pa.HasField("exit"))
        self.assertGreaterEqual(pa.start_time_ns, before - 10**9)
        self.assertLessEqual(pa.start_time_ns, time.time_ns())
        self.assertEqual(pa.end_time_ns, 0)
        self.assertEqual(pb_.state, pb.EXITED)
        self.assertEqual(list(pb_.argv), [b"/bin/sh", b"-c", b"echo hi; exit 4", b"sh", b"x y"])
        self.assertEqual(pb_.exit.code, 4)
        self.assertEqual(pb_.stdout_bytes, 3)
        self.assertGreaterEqual(pb_.end_time_ns, pb_.start_time_ns)
        # Wait blocks until the exit; a Signal ends it (SIGNAL_CALL)
        res = {}
        th = threading.Thread(target=lambda: res.update(info=self.wait(a.id)))
        th.start()
        time.sleep(0.3)
        self.assertTrue(th.is_alive())
        self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(tag="list-a"), signal=15),
                       timeout=TIMEOUT)
        th.join(TIMEOUT)
        info = res["info"]
        self.assertEqual((info.state, info.exit.signal, info.exit.killed_by),
                         (pb.EXITED, 15, pb.SIGNAL_CALL))
        # Wait with a deadline on a running process: DEADLINE_EXCEEDED
        c = self.start(argv=[b"sleep", b"30"])
        self.fails(grpc.StatusCode.DEADLINE_EXCEEDED, lambda: self.wait(c.id, timeout=0.5))
        self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=c.id), signal=9), timeout=TIMEOUT)
        self.assertEqual(self.wait(c.id).exit.signal, 9)

    def test_unknown_and_bad_refs(self):
        for call in (lambda r: self.ex.Wait(pb.WaitRequest(process=r), timeout=TIMEOUT),
                     lambda r: list(self.ex.Attach(pb.AttachRequest(process=r), timeout=TIMEOUT)),
                     lambda r: self.ex.Signal(pb.SignalRequest(process=r, signal=15),
                                              timeout=TIMEOUT),
                     lambda r: self.ex.Resize(pb.ResizeRequest(process=r, rows=2, cols=2),
                                              timeout=TIMEOUT),
                     lambda r: self.ex.WriteStdin(pb.StdinRequest(process=r), timeout=TIMEOUT)):
            e = self.fails(grpc.StatusCode.NOT_FOUND, lambda: call(pb.ProcessRef(id=987654)),
                           "unknown process 987654")
            self.assertEqual(trailer(e), "ESRCH")
            self.fails(grpc.StatusCode.NOT_FOUND, lambda: call(pb.ProcessRef(tag="no-such-tag")),
                       "unknown process tag 'no-such-tag'")
            self.fails(grpc.StatusCode.INVALID_ARGUMENT, lambda: call(pb.ProcessRef()))

    def test_tags_and_arguments(self):
        s = self.start(argv=[b"sleep", b"30"], tag="dup-tag")
        self.fails(grpc.StatusCode.ALREADY_EXISTS,
                   lambda: self.start(argv=[b"true"], tag="dup-tag"), "dup-tag", str(s.id))
        for bad in ("123", "a b", "x" * 129, "caf\u00e9"):
            self.fails(grpc.StatusCode.INVALID_ARGUMENT,
                       lambda: self.start(argv=[b"true"], tag=bad), "tag")
        self.fails(grpc.StatusCode.INVALID_ARGUMENT,
                   lambda: list(self.ex.Start(pb.ExecRequest(argv=[b"true"], detach=True,
                                                             kill_on_detach=True),
                                              timeout=TIMEOUT)), "kill_on_detach")
        self.fails(grpc.StatusCode.INVALID_ARGUMENT,
                   lambda: self.start(argv=[b"true"], pty=True, rows=70000))
        self.fails(grpc.StatusCode.INVALID_ARGUMENT,
                   lambda: self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=s.id),
                                                           signal=0), timeout=TIMEOUT))
        self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=s.id), signal=9), timeout=TIMEOUT)
        self.wait(s.id)
        self.fails(grpc.StatusCode.FAILED_PRECONDITION,
                   lambda: self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=s.id),
                                                           signal=9), timeout=TIMEOUT),
                   "exited")

    def test_attach_replay_and_follow(self):
        """E3: replay from offsets, then follow to the exit; no_follow stops
        when caught up; an offset beyond the output is OUT_OF_RANGE."""
        s = self.start(shell=b"printf 0123456789; printf abc >&2; sleep 2; printf XY")
        # An offset beyond what was written is OUT_OF_RANGE (checked below),
        # so attach only once the first output is in the journal; on a slow
        # machine (ASan) the command may not have printed yet.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            info = [p for p in self.ex.List(pb.ListRequest(), timeout=TIMEOUT).processes
                    if p.id == s.id]
            if info and info[0].stdout_bytes >= 10 and info[0].stderr_bytes >= 3:
                break
            time.sleep(0.02)
        evs = self.attach(s.id, out=4, err=1)
        self.assertTrue(evs[0].HasField("started"))
        self.assertEqual((evs[0].started.id, evs[0].started.pid), (s.id, s.pid))
        self.assertEqual(self.joined(evs, "stdout"), b"456789XY")
        self.assertEqual(self.joined(evs, "stderr"), b"bc")
        self.assertEqual([e.stdout.offset for e in evs if e.HasField("stdout")][0], 4)
        self.assertTrue(evs[-1].HasField("exited"))
        self.assertFalse(any(e.HasField("lost") for e in evs))
        evs = self.attach(s.id, out=10, no_follow=True)
        self.assertEqual(self.joined(evs, "stdout"), b"XY")
        self.assertTrue(evs[-1].HasField("exited"))
        self.fails(grpc.StatusCode.OUT_OF_RANGE, lambda: self.attach(s.id, out=13), "13", "12")
        # no_follow on a running process ends after the replay, without exit
        r = self.start(shell=b"printf abc; sleep 30")
        time.sleep(0.3)
        evs = self.attach(r.id, no_follow=True)
        self.assertEqual(self.joined(evs, "stdout"), b"abc")
        self.assertFalse(any(e.HasField("exited") for e in evs))
        self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=r.id), signal=9), timeout=TIMEOUT)

    def test_resize(self):
        s = self.start(shell=b"stty size; read x; stty size", pty=True, rows=30, cols=100,
                       stdin_open=True, term=b"vt100")
        ref = pb.ProcessRef(id=s.id)
        deadline = time.monotonic() + TIMEOUT
        while self.ex.List(pb.ListRequest(), timeout=TIMEOUT) and time.monotonic() < deadline:
            info = [p for p in self.ex.List(pb.ListRequest(), timeout=TIMEOUT).processes
                    if p.id == s.id][0]
            if info.stdout_bytes >= 8:
                break
            time.sleep(0.05)
        self.assertTrue(info.pty)
        self.fails(grpc.StatusCode.INVALID_ARGUMENT,
                   lambda: self.ex.Resize(pb.ResizeRequest(process=ref, rows=0, cols=5),
                                          timeout=TIMEOUT))
        self.ex.Resize(pb.ResizeRequest(process=ref, rows=40, cols=120), timeout=TIMEOUT)
        self.ex.WriteStdin(pb.StdinRequest(process=ref, data=b"go\n"), timeout=TIMEOUT)
        self.assertEqual(self.wait(s.id).exit.code, 0)
        self.assertEqual(self.joined(self.attach(s.id), "stdout"),
                         b"30 100\r\ngo\r\n40 120\r\n")
        plain = self.start(argv=[b"sleep", b"30"])
        self.fails(grpc.StatusCode.FAILED_PRECONDITION,
                   lambda: self.ex.Resize(pb.ResizeRequest(process=pb.ProcessRef(id=plain.id),
                                                           rows=5, cols=5), timeout=TIMEOUT),
                   "PTY")
        self.ex.Signal(pb.SignalRequest(process=pb.ProcessRef(id=plain.id), signal=9),
                       timeout=TIMEOUT)


class SmallJournal(ExecTest):
    """agentd --journal-size 4096."""

    def test_lost_head(self):
        """E3: bytes that fell out of the ring are reported, not skipped."""
        data = os.urandom(10000)
        with open(rp("ten-k"), "wb") as f:
            f.write(data)
        s = self.start(argv=[b"cat", b"ten-k"])
        self.wait(s.id)
        evs = self.attach(s.id)
        lost = [e.lost for e in evs if e.HasField("lost")]
        self.assertEqual([(l.stderr, l.offset, l.bytes) for l in lost], [(False, 0, 10000 - 4096)])
        outs = [e.stdout for e in evs if e.HasField("stdout")]
        self.assertEqual(outs[0].offset, 10000 - 4096)
        self.assertEqual(self.joined(evs, "stdout"), data[-4096:])
        # from inside the ring: no loss
        evs = self.attach(s.id, out=8000)
        self.assertFalse(any(e.HasField("lost") for e in evs))
        self.assertEqual(self.joined(evs, "stdout"), data[8000:])

    def test_lossless_start_through_small_journal(self):
        """E2: the Start stream itself never loses a byte, whatever the journal."""
        data = os.urandom(3 * MiB)
        with open(rp("three-m"), "wb") as f:
            f.write(data)
        it = self.ex.Start(pb.ExecRequest(argv=[b"cat", b"three-m"]), timeout=60)
        first = next(it)
        time.sleep(1)  # a slow reader: agentd must pause the command, not drop
        evs = [first] + list(it)
        self.assertFalse(any(e.HasField("lost") for e in evs))
        self.assertEqual(hashlib.sha256(self.joined(evs, "stdout")).digest(),
                         hashlib.sha256(data).digest())


class Concurrency(ExecTest):
    def test_100_concurrent_1mib(self):
        """100 commands at once, each writing 1 MiB of its own random bytes:
        every stream byte-exact (sha256 against what the command wrote)."""
        n = 100
        script = (b'while [ ! -e go ]; do sleep 0.05; done; '
                  b'head -c 1048576 /dev/urandom > "out.$1"; sha256sum < "out.$1" > "sum.$1"; '
                  b'cat "out.$1"; rm -f "out.$1"')
        results, errors = {}, []
        started = threading.Semaphore(0)
        ch = wsbtest.channel()
        ex = pbg.ExecStub(ch)

        def one(i):
            try:
                h, nbytes, off = hashlib.sha256(), 0, 0
                for ev in ex.Start(pb.ExecRequest(shell=script, args=[str(i).encode()],
                                                  kill_on_detach=True), timeout=120):
                    kind = ev.WhichOneof("event")
                    if kind == "started":
                        started.release()
                    elif kind == "stdout":
                        if ev.stdout.offset != off:
                            raise AssertionError("offset %d, expected %d" % (ev.stdout.offset, off))
                        off += len(ev.stdout.data)
                        h.update(ev.stdout.data)
                    elif kind == "exited":
                        results[i] = (h.hexdigest(), off, ev.exited.code)
            except Exception as e:  # noqa: BLE001
                errors.append((i, e))
                started.release()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for _ in range(n):
            self.assertTrue(started.acquire(timeout=60))
        running = [p for p in self.ex.List(pb.ListRequest(), timeout=TIMEOUT).processes
                   if p.state == pb.RUNNING and len(p.argv) > 4 and p.argv[2] == script]
        self.assertEqual(len(running), n, "all %d run at once" % n)
        open(rp("go"), "w").close()
        for t in threads:
            t.join(120)
        ch.close()
        self.assertEqual(errors, [])
        self.assertEqual(len(results), n)
        for i in range(n):
            with open(rp("sum.%d" % i)) as f:
                want = f.read().split()[0]
            self.assertEqual(results[i], (want, MiB, 0), "command %d" % i)


if __name__ == "__main__":
    unittest.main(verbosity=2)
