# SPDX-License-Identifier: Apache-2.0
"""A wsbridge.v1.Workspace server that lies, for fs-hostile.bats.

wsfs must survive any agentd: "no input from the network may crash agentd or
wsfs". This server stands where agentd would. It forwards every Workspace
call to a real agentd (--upstream) and, at random (--seed, --rate), corrupts
what comes back before wsfs sees it:

  - a field of a reply (any depth): integers become 0, 1, -1, the type's
    limits or a random value; booleans flip; enums take values the proto
    does not define; bytes and strings become "", ".", "..", "/", "a/b",
    "a\\0b", 256 or 5000 bytes, random bytes; repeated fields are emptied,
    duplicated or grown (up to 2,000 entries); sub-messages are cleared;
  - a whole reply: an empty message, or a failure with a random status code,
    message and wsbridge-errno trailer (a real errno name, a made-up one, or
    bytes that are not one);
  - the Watch stream: batches corrupted as above, and batches made up from
    nothing (events of any kind on paths such as "..", "/etc", "a//b", "",
    names 300 bytes long, attributes with random values), and the stream
    ended without a status.

Workspace/Ops (op streams) is served too: each OpRequest is forwarded as
the unary call it names and lied about as above (a made-up failure becomes
that op's OpReply status); the OpReply itself may come back garbled (bytes
that are no OpReply, cut short, a status code out of range), and the stream
may end with a made-up status. With --lie old-watch there is no Ops, as in
an agentd from before it (wsfs then makes every call on its own).

While the file named by --calm exists, replies pass through untouched (the
test's check that wsfs still works once agentd is honest again). With
--lie KIND it tells one lie only, in every Stat of the root: "root-file" (a
regular file), "root-owner" (owner and group (uint32_t)-1; not in the first,
wsfs's check at mount time); or "old-watch": it plays an agentd from before
WatchRequest.no_events, which ignores that field (it asks agentd for a
whole Watch and takes the no_events mark off its READY); "old-release": it
plays an agentd from before HandleRequest.more, which releases the first
handle of a Release only and replies released 0; "readdir-cycle":
every ReadDir of a directory other than the root answers one entry named
"." (which wsfs drops) and not the end, with offsets 1, 2, 1, 2, ...
(a listing that would go on for ever); "wrong-replies": replies that
agentd cannot mean, by the name they are for: an Open of "lie-dir" says
a directory, of "lie-h0" handle 0, of "lie-data" without read_ahead
brings 100,000 bytes; a Mkdir, Symlink or Mknod of a name starting with
"lie-" says another file type; a Stat of "lie-ino0" says inode 0; the
first Stat of "lie-gone" says it is not there (whatever is); a
ReadDir of "lie-pf" that asks for its subdirectories brings each made-up
entries ("bogusN") past what it asked for, and says "prefetch lie" on
stderr; and every Read brings 4,096 bytes more than it asked for; "statfs-zero":
every StatFs says a block size of 0 (as a FUSE daemon may).

While the file named by --stall exists, every Read (unary or in an op
stream) waits before it is forwarded: a READ the kernel sent stays in
flight, its pages locked, for as long as a test needs. --stall-on names
other methods to hold so instead (comma-separated, e.g. Fsync: agentd
working long on one call while it answers the others); with --stall-reply
the call is forwarded at once and its reply held (agentd has done it; the
client hears of it late). With --stall-skip N the first N such calls after
FILE appears pass (counted per method); FILE.held appears once one is held.

Each reply's lies come from a generator of its own, seeded with (seed,
method, how many calls of that method came before), so a seed gives the same
lies to the same sequence of calls whatever threads run them.

Usage: hostile_agentd.py --listen unix:PATH --upstream unix:PATH
                         --seed N [--rate P] [--calm FILE] [--lie KIND]
                         [--stall FILE [--stall-on METHOD,...] [--stall-reply]
                          [--stall-skip N]]

Runs until SIGTERM or SIGINT. Debian's /usr/bin/python3 with python3-grpcio;
the generated stubs come from $WSB_PROTO (see wsbtest.py).
"""
import argparse
import os
import random
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

import wsbtest
from wsbtest import pb

from google.protobuf.descriptor import FieldDescriptor as FD

SERVICE = "wsbridge.v1.Workspace"

INT_EDGES = {
    FD.TYPE_INT32: [0, 1, -1, 2**31 - 1, -2**31],
    FD.TYPE_SINT32: [0, 1, -1, 2**31 - 1, -2**31],
    FD.TYPE_SFIXED32: [0, 1, -1, 2**31 - 1, -2**31],
    FD.TYPE_INT64: [0, 1, -1, 2**63 - 1, -2**63],
    FD.TYPE_SINT64: [0, 1, -1, 2**63 - 1, -2**63],
    FD.TYPE_SFIXED64: [0, 1, -1, 2**63 - 1, -2**63],
    FD.TYPE_UINT32: [0, 1, 2, 2**31, 2**32 - 1],
    FD.TYPE_FIXED32: [0, 1, 2, 2**31, 2**32 - 1],
    FD.TYPE_UINT64: [0, 1, 2, 2**63, 2**64 - 1],
    FD.TYPE_FIXED64: [0, 1, 2, 2**63, 2**64 - 1],
}
INT_RANGE = {
    FD.TYPE_INT32: (-2**31, 2**31 - 1), FD.TYPE_SINT32: (-2**31, 2**31 - 1),
    FD.TYPE_SFIXED32: (-2**31, 2**31 - 1),
    FD.TYPE_INT64: (-2**63, 2**63 - 1), FD.TYPE_SINT64: (-2**63, 2**63 - 1),
    FD.TYPE_SFIXED64: (-2**63, 2**63 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1), FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1), FD.TYPE_FIXED64: (0, 2**64 - 1),
}
BYTES = [b"", b".", b"..", b"/", b"a/b", b"a\0b", b"../x", b"/etc/passwd",
         b"x" * 256, b"y" * 5000, b"a//b", b"\xff\xfe"]
ERRNO_NAMES = ["ENOENT", "EIO", "EACCES", "EEXIST", "ENOTDIR", "EISDIR",
               "EBADF", "ESTALE", "ENOSPC", "EWHATEVER", "", "E" * 300, "\x01"]
CODES = [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK]


class Liar:
    """The corruption of one call (or one Watch message): not thread-safe;
    make one per call."""

    def __init__(self, rng, rate):
        self.rng = rng
        self.rate = rate

    def roll(self, p):
        return self.rng.random() < p

    def scalar(self, f):
        r = self.rng
        if f.type == FD.TYPE_BOOL:
            return r.random() < 0.5
        if f.type == FD.TYPE_ENUM:
            vals = [v.number for v in f.enum_type.values]
            return r.choice(vals + [max(vals) + 1, 99, -1])
        if f.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
            return r.choice([0.0, -1.0, 1e300, float("nan")])
        if f.type == FD.TYPE_BYTES:
            return r.choice(BYTES + [r.randbytes(r.randrange(64))])
        if f.type == FD.TYPE_STRING:
            return r.choice(["", ".", "..", "/", "a/b", "x" * 300, "\u00e9"])
        if r.random() < 0.7:
            return r.choice(INT_EDGES[f.type])
        lo, hi = INT_RANGE[f.type]
        return r.randint(lo, hi)

    def mutate(self, m, depth=0):
        """Corrupt message @m in place, each field with probability rate."""
        r = self.rng
        for f in m.DESCRIPTOR.fields:
            msg = f.type == FD.TYPE_MESSAGE
            rep = f.label == FD.LABEL_REPEATED
            if rep:
                items = getattr(m, f.name)
                if self.roll(self.rate):
                    how = r.randrange(3)
                    if how == 0:
                        del items[:]
                    elif len(items) and how == 1:
                        n = r.choice([1, 2, 2000 // max(1, len(items))])
                        snap = list(items)
                        for _ in range(n):
                            for it in snap:
                                if msg:
                                    items.add().CopyFrom(it)
                                else:
                                    items.append(it)
                    elif msg:
                        for _ in range(r.choice([1, 3, 500])):
                            self.mutate(items.add(), depth + 1)
                    else:
                        items.append(self.scalar(f))
                if msg and depth < 4:
                    for it in items:
                        self.mutate(it, depth + 1)
                continue
            if msg:
                if self.roll(self.rate / 2):
                    m.ClearField(f.name)
                elif depth < 4 and (m.HasField(f.name) or self.roll(self.rate)):
                    self.mutate(getattr(m, f.name), depth + 1)
                continue
            if self.roll(self.rate):
                try:
                    setattr(m, f.name, self.scalar(f))
                except (ValueError, TypeError):
                    pass

    def reply(self, cls, data, context):
        """The reply wsfs gets for upstream's serialized @data (or raises
        through @context)."""
        if self.roll(self.rate / 4):
            self.fail(context)
        m = cls()
        if not self.roll(self.rate / 4):
            m.ParseFromString(data)
        self.mutate(m)
        return m.SerializeToString()

    def fail(self, context):
        """Abort the call with a made-up status."""
        r = self.rng
        md = ()
        if r.random() < 0.8:
            md = (("wsbridge-errno", r.choice(ERRNO_NAMES).encode("latin-1")
                   .decode("ascii", "replace").replace("\ufffd", "?")),)
        try:
            context.set_trailing_metadata(md)
        except ValueError:
            pass
        context.abort(r.choice(CODES), r.choice(["", "lie", "x" * 2000]))

    def invent_batch(self):
        """A WatchBatch made up from nothing."""
        r = self.rng
        b = pb.WatchBatch()
        for _ in range(r.choice([1, 2, 50, 1000])):
            ev = b.events.add()
            self.mutate(ev)
            ev.path = r.choice(BYTES + [b"f", b"d/f", b"dir", b"x" * 300])
        self.mutate(b)
        return b.SerializeToString()


class Liars:
    """A Liar per call, seeded by (seed, method, count); thread-safe."""

    def __init__(self, seed, rate, calm):
        self.seed, self.rate, self.calm = seed, rate, calm
        self.count = {}
        self.lock = threading.Lock()

    def honest(self):
        return bool(self.calm) and os.path.exists(self.calm)

    def next(self, method):
        """The Liar of @method's next call, or None while honest."""
        if self.honest():
            return None
        with self.lock:
            n = self.count.get(method, 0)
            self.count[method] = n + 1
        return Liar(random.Random("%d/%s/%d" % (self.seed, method, n)), self.rate)


class GoneLie(Exception):
    """A made-up NOT_FOUND (--lie wrong-replies, lie-gone)."""


class OpAbort(Exception):
    def __init__(self, code, details, md):
        super().__init__(details)
        self.code, self.details, self.md = code, details, md


class OpContext:
    """What a unary handler's context does, for one op of an Ops stream:
    its abort() becomes that op's failure, not the stream's."""

    def __init__(self, real):
        self.real = real
        self.md = ()

    def invocation_metadata(self):
        return self.real.invocation_metadata()

    def set_trailing_metadata(self, md):
        self.md = tuple(md)

    def abort(self, code, details):
        raise OpAbort(code, details, self.md)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rate", type=float, default=0.05)
    ap.add_argument("--calm")
    ap.add_argument("--stall")
    ap.add_argument("--stall-on", default="Read")
    ap.add_argument("--stall-reply", action="store_true")
    ap.add_argument("--stall-skip", type=int, default=0)
    ap.add_argument("--lie", choices=["root-file", "root-owner", "old-watch", "readdir-cycle",
                                      "old-release", "wrong-replies", "statfs-zero"])
    a = ap.parse_args()
    stall_on = set(a.stall_on.split(","))
    a.root_file = a.lie is not None
    root_stats = [0]

    liars = Liars(a.seed, a.rate, a.calm)
    up = wsbtest.channel(a.upstream)
    svc = pb.DESCRIPTOR.services_by_name["Workspace"]
    handlers = {}
    unary = {}

    def fwd_md(context):
        return tuple((k, v) for k, v in context.invocation_metadata()
                     if k == "authorization")

    def relay_error(e, context):
        try:
            context.set_trailing_metadata(tuple(e.trailing_metadata() or ()))
        except ValueError:
            pass
        context.abort(e.code(), e.details() or "")

    passed = {}
    passed_lock = threading.Lock()

    def base_of(path):
        return path.rsplit(b"/", 1)[-1]

    gone_told = []

    def wrong_reply(name, req, data):
        """--lie wrong-replies: @data, the reply to @name's @req, made one
        agentd cannot mean where the name asks for it."""
        if name == "Open":
            q, m = pb.OpenRequest.FromString(req), pb.OpenReply.FromString(data)
            base = base_of(q.path)
            if base == b"lie-dir":
                m.attr.mode = 0o040755
            elif base == b"lie-h0":
                m.handle = 0
            elif base == b"lie-data" and q.read_ahead == 0:
                m.data = b"x" * 100000
            return m.SerializeToString()
        if name in ("Mkdir", "Symlink", "Mknod"):
            q = getattr(pb, name + "Request").FromString(req)
            m = pb.AttrReply.FromString(data)
            if base_of(q.path).startswith(b"lie-"):
                m.attr.mode = 0o100644 if name == "Mkdir" else 0o040755
            return m.SerializeToString()
        if name == "Stat":
            q, m = pb.StatRequest.FromString(req), pb.StatReply.FromString(data)
            if base_of(q.path) == b"lie-ino0":
                m.attr.ino = 0
            if base_of(q.path) == b"lie-gone" and not gone_told:
                gone_told.append(True)
                raise GoneLie()
            return m.SerializeToString()
        if name == "ReadDir":
            q, m = pb.ReadDirRequest.FromString(req), pb.ReadDirReply.FromString(data)
            if base_of(q.path) != b"lie-pf" or not q.prefetch:
                return data
            for dl in m.subdirs:
                if not dl.entries:
                    continue
                tmpl = pb.DirEntry()
                tmpl.CopyFrom(dl.entries[0])
                for i in range(q.prefetch + 1):
                    e = dl.entries.add()
                    e.CopyFrom(tmpl)
                    e.name = b"bogus%d" % i
                    e.attr.ino = 10**9 + i
            print("prefetch lie", file=sys.stderr, flush=True)
            return m.SerializeToString()
        if name == "Read":
            q, m = pb.ReadRequest.FromString(req), pb.ReadReply.FromString(data)
            m.data += b"Z" * (q.size - min(q.size, len(m.data)) + 4096)
            return m.SerializeToString()
        return data

    def hold(name):
        """While the --stall file exists, hold a call of a --stall-on method
        (but the first --stall-skip of them); FILE.held tells the test."""
        if name not in stall_on or not a.stall or not os.path.exists(a.stall):
            return
        with passed_lock:
            passed[name] = passed.get(name, 0) + 1
            if passed[name] <= a.stall_skip:
                return
        with open(a.stall + ".held", "w"):
            pass
        while os.path.exists(a.stall):
            time.sleep(0.02)

    for meth in svc.methods:
        path = "/%s/%s" % (SERVICE, meth.name)
        cls = getattr(pb, meth.output_type.name)
        cs, ss = meth.client_streaming, meth.server_streaming

        if not cs and not ss:
            call = up.unary_unary(path)

            def uu(req, context, call=call, cls=cls, name=meth.name):
                if not a.stall_reply:
                    hold(name)
                if a.lie == "old-release" and name == "Release":
                    q = pb.HandleRequest.FromString(req)
                    del q.more[:]
                    req = q.SerializeToString()
                try:
                    data = call(req, metadata=fwd_md(context), timeout=30)
                except grpc.RpcError as e:
                    liar = None if a.root_file else liars.next(name)
                    if liar and liar.roll(liar.rate):
                        liar.fail(context)
                    relay_error(e, context)
                if a.stall_reply:
                    hold(name)
                if a.lie == "old-release":
                    return pb.ReleaseReply().SerializeToString() if name == "Release" else data
                if a.lie == "wrong-replies":
                    try:
                        return wrong_reply(name, req, data)
                    except GoneLie:
                        context.set_trailing_metadata((("wsbridge-errno", "ENOENT"),))
                        context.abort(grpc.StatusCode.NOT_FOUND, "stat: no such file (a lie)")
                if a.lie == "statfs-zero":
                    if name != "StatFs":
                        return data
                    m = pb.StatFsReply.FromString(data)
                    m.bsize = m.frsize = 0
                    return m.SerializeToString()
                if a.lie == "readdir-cycle":
                    if name != "ReadDir" or pb.ReadDirRequest.FromString(req).path == b"":
                        return data
                    root_stats[0] += 1
                    return pb.ReadDirReply(entries=[pb.DirEntry(
                        name=b".", next_offset=1 + root_stats[0] % 2)]).SerializeToString()
                if a.lie:
                    if name != "Stat" or pb.StatRequest.FromString(req).path != b"":
                        return data
                    m = pb.StatReply.FromString(data)
                    root_stats[0] += 1
                    if a.lie == "root-file":
                        m.attr.mode = 0o100644
                    elif root_stats[0] > 1:
                        m.attr.uid = m.attr.gid = 2**32 - 1
                    return m.SerializeToString()
                liar = liars.next(name)
                return liar.reply(cls, data, context) if liar else data

            handlers[meth.name] = grpc.unary_unary_rpc_method_handler(uu)
            unary[meth.name] = uu
        elif not cs and ss:
            call = up.unary_stream(path)

            def us(req, context, call=call, cls=cls, name=meth.name):
                if a.lie == "old-watch" and name == "Watch":
                    req = pb.WatchRequest().SerializeToString()
                it = call(req, metadata=fwd_md(context))
                context.add_callback(it.cancel)
                try:
                    for data in it:
                        liar = None if a.root_file else liars.next(name)
                        if a.lie == "old-watch" and name == "Watch":
                            b = pb.WatchBatch.FromString(data)
                            for e in b.events:
                                e.no_events = False
                            data = b.SerializeToString()
                        if not liar:
                            yield data
                            continue
                        yield liar.reply(cls, data, context)
                        if name == "Watch":
                            if liar.roll(liar.rate * 4):
                                yield liar.invent_batch()
                            if liar.roll(liar.rate / 4):
                                return
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.CANCELLED:
                        relay_error(e, context)

            handlers[meth.name] = grpc.unary_stream_rpc_method_handler(us)
        elif cs and not ss:
            call = up.stream_unary(path)

            def su(reqs, context, call=call, cls=cls, name=meth.name):
                try:
                    data = call(reqs, metadata=fwd_md(context), timeout=30)
                except grpc.RpcError as e:
                    relay_error(e, context)
                liar = None if a.root_file else liars.next(name)
                return liar.reply(cls, data, context) if liar else data

            handlers[meth.name] = grpc.stream_unary_rpc_method_handler(su)

    def ops(reqs, context):
        for raw in reqs:
            op = pb.OpRequest.FromString(raw)
            svc_path, _, name = op.method.rpartition("/")
            fn = unary.get(name) if svc_path == "/" + SERVICE else None
            if fn is None:
                out = pb.OpReply(code=grpc.StatusCode.UNIMPLEMENTED.value[0],
                                 message="unknown method").SerializeToString()
            else:
                ctx = OpContext(context)
                try:
                    out = pb.OpReply(reply=fn(op.request, ctx)).SerializeToString()
                except OpAbort as e:
                    out = pb.OpReply(code=e.code.value[0], message=e.details,
                                     errno_name=dict(e.md).get("wsbridge-errno", "")
                                     ).SerializeToString()
            liar = None if a.lie else liars.next("Ops")
            if liar and liar.roll(liar.rate / 4):
                r = liar.rng
                out = r.choice([b"\xff\xff\xff", out[:len(out) // 2], b"\x08\x63",
                                pb.OpReply(code=r.choice([-1, 17, 2**31 - 1])).SerializeToString()])
            if liar and liar.roll(liar.rate / 8):
                liar.fail(context)  # the stream ends
            yield out

    if a.lie != "old-watch":
        handlers["Ops"] = grpc.stream_stream_rpc_method_handler(ops)

    # A thread per call in progress: each of wsfs's op streams (one per
    # FUSE thread, up to 16) holds one for as long as it lives.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20)])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(a.listen)
    server.start()
    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: done.set())
    print("hostile_agentd: serving %s -> %s, seed %d, rate %g"
          % (a.listen, a.upstream, a.seed, a.rate), file=sys.stderr, flush=True)
    done.wait()
    server.stop(0)


if __name__ == "__main__":
    main()
