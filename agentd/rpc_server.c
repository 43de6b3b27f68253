/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The gRPC C-core server adapter (agentd/rpc.h). All grpc_* calls of agentd
 * live here.
 *
 * Threads: N completion-queue threads take turns in
 * grpc_completion_queue_next() (C-core 1.51 has no notification fd to put
 * the queue in a uv loop). A completion for a call of an RPC_ON_CQ method is
 * handled on the cq thread that got it; one of an RPC_ON_LOOP method is
 * pushed on a mutex-protected FIFO and handled by the uv_async callback on
 * the loop thread (uv_async_send coalesces wake-ups, so the FIFO is drained
 * whole).
 *
 * Taking turns (the gate): with several threads waiting in
 * grpc_completion_queue_next(), gRPC's epoll1 poller hands the polling role
 * to another waiting thread at every completion (pollset_work's
 * end_worker), a wake-up each: a unary round trip took 73 us with four
 * threads and 56 us with one here, 115 us against 58 us with both cores
 * busy. So one thread polls and runs what it gets inline, then polls again;
 * the others wait on a condition variable, and one of them starts polling
 * only when nobody has polled for GATE_STALL_NS, that is when every poller
 * is inside a handler that takes long (an fsync, a big read, a stat stuck
 * in a hung mount inside the workspace). A thread that ends a handler while
 * another polls waits again. Up to N handlers can be stuck at once before
 * calls wait, as when all N threads polled.
 *
 * Lifetime: a struct rpc_call is reference-counted (atomic). The handler holds
 * one reference until it ends the call; every batch in flight holds one.
 * Request slots (calls not yet arrived) are counted in srv->live too, so that
 * shutdown waits for all of them (grpc-c-core.md §2, shutdown sequence).
 *
 * gRPC rules followed: only one SEND_MESSAGE in flight per call, and a batch
 * that start_batch rejects poisons the call in 1.51, so the call is cancelled
 * (grpc-c-core.md §2); unknown methods are answered UNIMPLEMENTED at once
 * rather than left to hang (§2); SO_REUSEPORT is turned off (§5).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "rpc.h"
#include "wsb.h"
#include "wsb_grpc.h"

/*
 * Op streams (RPC_OPS). A stream call reads one OpRequest at a time: its
 * method's handler runs on a call of its own (struct rpc_call with parent
 * set and no grpc_call), whose end (rpc_reply, rpc_finish) sends the
 * OpReply on the stream; once that send is done, the stream reads the next
 * request. So one call of a stream runs at a time, in order, and a client
 * that sends ahead is served in order. The OpRequest is read in place and
 * the OpReply written around the packed reply (wsb_wire_*): a 1 MiB Write
 * or Read costs no copy more than a unary call.
 */

/* How long nobody may poll before a waiting cq thread starts (the gate),
 * nanoseconds: the longest a quick call waits behind a slow one. */
#define GATE_STALL_NS (2 * 1000 * 1000)
/* How long after the last completion a waiting thread keeps looking at the
 * clock, nanoseconds (then it waits until woken: no wake-ups when idle). */
#define GATE_WATCH_NS (50 * 1000 * 1000)

/**
 * Requests of methods served without the token (health checks) read at
 * once for callers that lack it: each may be as large as the receive
 * limit (64 MiB), read whole by gRPC.
 */
#define RPC_OPEN_READS_MAX 2
/** Largest request of a method served without the token that is decoded,
 * bytes (a health check's is a service name). */
#define RPC_OPEN_REQUEST_MAX 4096
/**
 * HTTP/2 streams a connection may have open at once
 * (GRPC_ARG_MAX_CONCURRENT_STREAMS, SETTINGS_MAX_CONCURRENT_STREAMS of RFC
 * 9113): each costs agentd about 12 KB (80,000 idle Watch streams on two
 * connections took 1 GB); a client past it waits for one to end. wsfs
 * keeps about 20 open.
 */
#define RPC_STREAMS_MAX 1024

/* Request slots posted per registered method, and for unknown methods. */
#define RPC_SLOTS_PER_METHOD 2

enum tag_kind {
	TAG_REQUEST,   /* a registered call arrived */
	TAG_UNKNOWN,   /* an unregistered call arrived */
	TAG_SEND,      /* SEND_MESSAGE (+ initial metadata) done */
	TAG_RECV,      /* RECV_MESSAGE done */
	TAG_PAYLOAD,   /* RECV_MESSAGE of a unary or server-streaming request */
	TAG_CLOSE,     /* RECV_CLOSE_ON_SERVER done: end or cancel */
	TAG_STATUS,    /* final status sent */
	TAG_SHUTDOWN,  /* grpc_server_shutdown_and_notify done */
};

struct rpc_tag {
	enum tag_kind kind;
	bool ok;
	struct rpc_call *call; /* NULL for TAG_SHUTDOWN */
	struct rpc_tag *next;  /* loop FIFO link */
};

struct rpc_reg {
	const struct rpc_method *m;
	void *handle; /* from grpc_server_register_method */
};

struct rpc_server {
	grpc_server *server;
	grpc_completion_queue *cq;
	grpc_server_credentials *creds;
	uv_loop_t *loop;
	uv_async_t async;
	uv_timer_t grace;
	/* rpc_room_wait()'s waiters, pumped by room_timer; loop thread. */
	struct rpc_room_wait *room_head, *room_tail;
	size_t room_n;
	uv_timer_t room_timer;
	pthread_t *threads;
	int nthreads;
	char *token;
	size_t token_len;
	size_t max_recv;
	size_t max_reply;          /* max_reply_bytes */
	atomic_size_t reply_bytes; /* of sends started and not completed */
	atomic_size_t reserved_bytes; /* rpc_reserve()'s, of calls not yet replied */
	void (*on_call)(struct rpc_call *call, void *arg);
	void *on_call_arg;

	struct rpc_reg *regs;
	size_t nregs;
	bool started;

	pthread_mutex_t lock; /* protects fifo_head/fifo_tail, ops */
	struct rpc_tag *fifo_head, *fifo_tail;
	struct rpc_call *ops; /* op streams (RPC_OPS) alive, by ops_next/ops_prev */

	/* The gate (see the top of this file). */
	pthread_mutex_t gate_lock; /* protects the gate_* fields */
	pthread_cond_t gate_cond;
	int gate_polling;          /* threads in grpc_completion_queue_next() */
	int gate_untimed;          /* threads waiting with no timeout */
	bool gate_watching;        /* a waiting thread looks at the clock */
	int64_t gate_left_ns;      /* CLOCK_MONOTONIC: a poller last left */
	bool gate_stop;            /* the queue is shut down */

	atomic_int live;           /* request slots + calls alive */
	atomic_int open_reads;     /* requests of no_auth calls without the
				      token being read (RPC_OPEN_READS_MAX) */
	atomic_bool shutting_down; /* no new request slots */
	atomic_int threads_done;
	bool shutdown_tag_done;    /* loop thread */
	bool cq_shutdown;          /* loop thread */
	bool finished;             /* loop thread: done callback called */
	struct rpc_tag shutdown_tag;
	void (*done)(void *arg);
	void *done_arg;
	int closing; /* uv handles left to close in rpc_server_free */
};

struct rpc_call {
	struct rpc_server *srv;
	const struct rpc_reg *reg; /* NULL for an unknown method */
	struct rpc_call *parent;   /* an op's stream (RPC_OPS), or NULL */
	grpc_call *call;           /* NULL for an op */
	/* An op stream's: its links in srv->ops, and whether an op of it runs
	 * (else it waits for the next); under srv->lock. */
	struct rpc_call *ops_next, *ops_prev;
	bool op_running;
	gpr_timespec deadline;
	grpc_metadata_array md;
	grpc_call_details details; /* unknown methods only */
	grpc_byte_buffer *payload; /* the request of a unary or server-streaming call (TAG_PAYLOAD) */
	bool open_read;            /* counted in srv->open_reads while read */
	ProtobufCMessage *req;

	atomic_int refs;
	atomic_bool cancelled; /* client cancelled / deadline passed */
	int close_cancelled;   /* out-param of RECV_CLOSE_ON_SERVER */
	bool md_sent;          /* initial metadata sent */
	bool ended;            /* terminal op issued (method thread) */
	bool send_busy, recv_busy;

	grpc_byte_buffer *send_buf;
	/* Bytes of s->reply_bytes this call's SEND_MESSAGE batch (TAG_SEND)
	 * and its reply with the status (TAG_STATUS) hold until they complete. */
	size_t send_held, status_held;
	/* Bytes of s->reserved_bytes rpc_reserve() set aside for a reply to
	 * come: given back once that reply takes its own, or at call_free(). */
	size_t reserved;
	rpc_sent_fn sent;
	void *sent_arg;
	grpc_byte_buffer *recv_buf;
	rpc_recv_fn recvfn;
	void *recv_arg;
	void (*cancel_cb)(struct rpc_call *, void *);
	void *cancel_arg;

	struct rpc_tag t_req, t_send, t_recv, t_close, t_status;
};

static int post_slot(struct rpc_server *s, const struct rpc_reg *reg);
static void handle_tag(struct rpc_server *s, struct rpc_tag *t);

/* ---- helpers ---- */

static void tag_init(struct rpc_tag *t, enum tag_kind kind, struct rpc_call *c)
{
	t->kind = kind;
	t->call = c;
	t->ok = false;
	t->next = NULL;
}

static bool call_on_loop(const struct rpc_call *c)
{
	return c->reg && c->reg->m->thread == RPC_ON_LOOP;
}

static void server_check_shutdown(struct rpc_server *s)
{
	if (atomic_load(&s->shutting_down))
		uv_async_send(&s->async);
}

static bool call_is_ops(const struct rpc_call *c)
{
	return c->reg && c->reg->m->kind == RPC_OPS;
}

static void call_unref(struct rpc_call *c);
static void reply_put(struct rpc_server *s, size_t *held);
static void reserve_put(struct rpc_call *c);
static void on_room(uv_timer_t *t);

static void call_free(struct rpc_call *c)
{
	struct rpc_server *s = c->srv;

	if (c->open_read) /* its read never completed */
		atomic_fetch_sub(&s->open_reads, 1);
	/* First: rpc_server_shutdown() cancels the calls on s->ops. */
	if (call_is_ops(c)) {
		pthread_mutex_lock(&s->lock);
		if (c->ops_prev)
			c->ops_prev->ops_next = c->ops_next;
		else if (s->ops == c)
			s->ops = c->ops_next;
		if (c->ops_next)
			c->ops_next->ops_prev = c->ops_prev;
		pthread_mutex_unlock(&s->lock);
	}
	reserve_put(c);
	if (c->call)
		grpc_call_unref(c->call);
	grpc_metadata_array_destroy(&c->md);
	if (!c->reg && !c->parent)
		grpc_call_details_destroy(&c->details);
	if (c->payload)
		grpc_byte_buffer_destroy(c->payload);
	if (c->send_buf)
		grpc_byte_buffer_destroy(c->send_buf);
	if (c->recv_buf)
		grpc_byte_buffer_destroy(c->recv_buf);
	if (c->req)
		protobuf_c_message_free_unpacked(c->req, NULL);
	if (c->parent)
		call_unref(c->parent);
	free(c);
	if (atomic_fetch_sub(&s->live, 1) == 1)
		server_check_shutdown(s);
}

static void call_ref(struct rpc_call *c)
{
	atomic_fetch_add(&c->refs, 1);
}

static void call_unref(struct rpc_call *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		call_free(c);
}

static grpc_byte_buffer *pack_buffer(const ProtobufCMessage *msg)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	grpc_slice slice = grpc_slice_malloc(n);
	grpc_byte_buffer *bb;

	protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
	bb = grpc_raw_byte_buffer_create(&slice, 1);
	grpc_slice_unref(slice);
	return bb;
}

/* Decode a received byte buffer, in place (wsb_grpc.h). Returns 0,
 * -EBADMSG or -ENOMEM. */
static int unpack_buffer(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
			 ProtobufCMessage **ret)
{
	return wsb_grpc_unpack(bb, 0, SIZE_MAX, desc, ret);
}

/*
 * Take @p n bytes of the server's budget of replies in flight
 * (max_reply_bytes) for a reply of call @p c; the caller keeps them in its
 * send_held or status_held until the batch completes (reply_put). Only a
 * reply_budget method's reply of over RPC_REPLY_SMALL bytes can be
 * refused. Returns true, or false when the budget has no room (nothing
 * taken). Any thread.
 */
static bool reply_take(const struct rpc_call *c, size_t n)
{
	struct rpc_server *s = c->srv;
	size_t before = atomic_fetch_add(&s->reply_bytes, n);

	if (n > RPC_REPLY_SMALL && before + n > s->max_reply && c->reg && c->reg->m->reply_budget) {
		atomic_fetch_sub(&s->reply_bytes, n);
		wsb_debug("%s: a %zu-byte reply refused: %zu bytes of replies unread, at most %zu",
			  rpc_method_path(c), n, before, s->max_reply);
		return false;
	}
	return true;
}

size_t rpc_reply_room(const struct rpc_call *c)
{
	size_t used = atomic_load(&c->srv->reply_bytes);

	return used < c->srv->max_reply ? c->srv->max_reply - used : 0;
}

int rpc_reserve(struct rpc_call *c, size_t n)
{
	struct rpc_server *s = c->srv;
	size_t before = atomic_fetch_add(&s->reserved_bytes, n);
	size_t unread = atomic_load(&s->reply_bytes);

	if (unread + before + n > s->max_reply) {
		atomic_fetch_sub(&s->reserved_bytes, n);
		wsb_debug("%s: %zu bytes for a reply to come refused: %zu bytes of replies "
			  "unread and %zu set aside, at most %zu",
			  rpc_method_path(c), n, unread, before, s->max_reply);
		return -ENOBUFS;
	}
	c->reserved += n;
	return 0;
}

/* Give back what rpc_reserve() set aside for @p c. */
static void reserve_put(struct rpc_call *c)
{
	if (c->reserved) {
		atomic_fetch_sub(&c->srv->reserved_bytes, c->reserved);
		c->reserved = 0;
	}
}

/* ---- waiting for room in the reply budget (rpc_room_wait) ---- */

void rpc_room_cancel(struct rpc_room_wait *w)
{
	struct rpc_server *s = w->srv;

	if (!w->queued)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		s->room_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		s->room_tail = w->prev;
	w->prev = w->next = NULL;
	w->queued = false;
	if (--s->room_n == 0)
		uv_timer_stop(&s->room_timer);
}

static void room_queue(struct rpc_server *s, struct rpc_room_wait *w)
{
	w->srv = s;
	w->prev = s->room_tail;
	w->next = NULL;
	if (s->room_tail)
		s->room_tail->next = w;
	else
		s->room_head = w;
	s->room_tail = w;
	w->queued = true;
	if (s->room_n++ == 0)
		uv_timer_start(&s->room_timer, on_room, RPC_ROOM_POLL_MS, RPC_ROOM_POLL_MS);
}

/* Each waiter queued now once, in order: ready() for those with room (it
 * may queue again, at the tail), the rest back to the tail. */
static void on_room(uv_timer_t *t)
{
	struct rpc_server *s = t->data;

	for (size_t n = s->room_n; n > 0 && s->room_head; n--) {
		struct rpc_room_wait *w = s->room_head;
		size_t used = atomic_load(&s->reply_bytes);

		rpc_room_cancel(w);
		if (used < s->max_reply && s->max_reply - used >= w->need)
			w->ready(w, w->arg);
		else
			room_queue(s, w);
	}
}

void rpc_room_wait(struct rpc_call *c, struct rpc_room_wait *w, size_t need,
		   void (*ready)(struct rpc_room_wait *w, void *arg), void *arg)
{
	if (w->queued)
		return;
	w->need = need;
	w->ready = ready;
	w->arg = arg;
	room_queue(c->srv, w);
}

/* Give back the bytes *@p held took of the budget (reply_take). */
static void reply_put(struct rpc_server *s, size_t *held)
{
	if (*held) {
		atomic_fetch_sub(&s->reply_bytes, *held);
		*held = 0;
	}
}

/* Start a batch owned by tag @p t; takes a call reference for it. On a
 * rejected batch the call is cancelled (a rejected batch poisons the call in
 * 1.51) and -ECANCELED returned. */
static int start_batch(struct rpc_call *c, const grpc_op *ops, size_t n, struct rpc_tag *t)
{
	grpc_call_error e;

	call_ref(c);
	e = grpc_call_start_batch(c->call, ops, n, t, NULL);
	if (e != GRPC_CALL_OK) {
		wsb_warn("%s: start_batch: %s", rpc_method_path(c), grpc_call_error_to_string(e));
		atomic_store(&c->cancelled, true);
		grpc_call_cancel(c->call, NULL);
		call_unref(c);
		return -ECANCELED;
	}
	return 0;
}

/* ---- ending a call ---- */

static int send_status(struct rpc_call *c, int code, int err, const char *msg)
{
	grpc_op ops[3];
	grpc_metadata trailer;
	grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");
	const char *ename = err > 0 ? wsb_errno_name(err) : NULL;
	size_t n = 0;
	int r;

	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		n++;
		c->md_sent = true;
	}
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = (grpc_status_code)code;
	ops[n].data.send_status_from_server.status_details = &details;
	if (ename) {
		trailer.key = grpc_slice_from_static_string(WSB_ERRNO_TRAILER);
		trailer.value = grpc_slice_from_static_string(ename);
		ops[n].data.send_status_from_server.trailing_metadata_count = 1;
		ops[n].data.send_status_from_server.trailing_metadata = &trailer;
	}
	n++;
	tag_init(&c->t_status, TAG_STATUS, c);
	r = start_batch(c, ops, n, &c->t_status);
	grpc_slice_unref(details);
	return r;
}

/* ---- op streams ---- */

static void ops_sent(struct rpc_call *p, bool ok, void *arg);
static int call_end(struct rpc_call *c, int code, int err, const char *msg);

/*
 * End op @c by sending its OpReply on its stream: status @code, errno
 * name of @err (> 0) and @msg when not OK, @reply (packed here) when OK;
 * a @reply the budget has no room for (reply_take) is sent as
 * RESOURCE_EXHAUSTED instead. Returns 0, -ECANCELED (the stream is gone)
 * or -ENOBUFS (@reply refused).
 */
static int op_send(struct rpc_call *c, int code, int err, const char *msg,
		   const ProtobufCMessage *reply)
{
	struct rpc_call *p = c->parent;
	const char *ename;
	size_t elen, mlen, n = reply ? protobuf_c_message_get_packed_size(reply) : 0;
	grpc_slice slice;
	grpc_op ops[2];
	uint8_t *w;
	size_t k = 0;
	bool refused = false;
	int r;

	if (p->send_busy || p->ended) {
		/* Not when ops are read one at a time (ops_sent). */
		wsb_err("%s: an op ended while its stream could not send", rpc_method_path(c));
		return -ECANCELED;
	}
	if (reply && !reply_take(c, n)) {
		code = WSB_RESOURCE_EXHAUSTED;
		err = ENOBUFS;
		msg = RPC_NO_ROOM_MSG;
		reply = NULL;
		n = 0;
		refused = true;
	}
	/* A reply's line (call_end() logs the others): before the send, so
	 * that it is in the log by the time the client has the reply, and
	 * with the status the op really ends with. */
	if (reply || refused)
		wsb_debug("%s: %s (op)", rpc_method_path(c),
			  refused ? "RESOURCE_EXHAUSTED: " RPC_NO_ROOM_MSG : "OK");
	ename = err > 0 ? wsb_errno_name(err) : NULL;
	elen = ename ? strlen(ename) : 0;
	mlen = msg ? strlen(msg) : 0;
	slice = grpc_slice_malloc(WSB_WIRE_VARINT_MAX + 3 * WSB_WIRE_LEN_HEAD_MAX + elen + mlen + n);
	w = GRPC_SLICE_START_PTR(slice);
	if (code != WSB_OK)
		w += wsb_wire_varint_field(w, 1, (uint64_t)(int64_t)code);
	if (elen) {
		w += wsb_wire_len_head(w, 2, elen);
		memcpy(w, ename, elen);
		w += elen;
	}
	if (mlen) {
		w += wsb_wire_len_head(w, 3, mlen);
		memcpy(w, msg, mlen);
		w += mlen;
	}
	if (reply) {
		w += wsb_wire_len_head(w, 4, n);
		protobuf_c_message_pack(reply, w);
		w += n;
	}
	GRPC_SLICE_SET_LENGTH(slice, (size_t)(w - GRPC_SLICE_START_PTR(slice)));
	p->send_buf = grpc_raw_byte_buffer_create(&slice, 1);
	grpc_slice_unref(slice);
	memset(ops, 0, sizeof(ops));
	if (!p->md_sent) {
		ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
		p->md_sent = true;
	}
	ops[k].op = GRPC_OP_SEND_MESSAGE;
	ops[k].data.send_message.send_message = p->send_buf;
	k++;
	p->sent = ops_sent;
	p->sent_arg = NULL;
	p->send_busy = true;
	p->send_held = n;
	tag_init(&p->t_send, TAG_SEND, p);
	r = start_batch(p, ops, k, &p->t_send);
	if (r < 0) {
		/* No ops_sent() to come: the stream ends here. */
		p->send_busy = false;
		reply_put(p->srv, &p->send_held);
		call_end(p, WSB_CANCELLED, 0, "the stream could not send");
	} else if (atomic_load(&p->cancelled)) {
		r = -ECANCELED;
	} else if (refused) {
		r = -ENOBUFS;
	}
	return r;
}

/* Read the stream's next OpRequest (ops_recv() gets it), or end the stream
 * when that cannot start. */
static void ops_next(struct rpc_call *p)
{
	struct rpc_server *s = p->srv;
	bool stop;
	grpc_op op;
	int r = 0;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &p->recv_buf;
	/* Under the lock, so that rpc_server_shutdown() either sees the op
	 * running (and leaves it to end here) or the receive started (and
	 * cancels it). */
	pthread_mutex_lock(&s->lock);
	p->op_running = false;
	stop = atomic_load(&s->shutting_down);
	if (!stop) {
		p->recv_busy = true;
		tag_init(&p->t_recv, TAG_RECV, p);
		r = start_batch(p, &op, 1, &p->t_recv);
		if (r < 0)
			p->recv_busy = false;
	}
	pthread_mutex_unlock(&s->lock);
	if (stop)
		call_end(p, WSB_UNAVAILABLE, 0, "agentd is shutting down");
	else if (r < 0)
		call_end(p, WSB_CANCELLED, 0, "the stream could not read on");
}

/* The OpReply went (or the stream is gone): read the next request. */
static void ops_sent(struct rpc_call *p, bool ok, void *arg)
{
	(void)arg;
	if (ok)
		ops_next(p);
	else
		call_end(p, WSB_CANCELLED, 0, "the client went away");
}

/* The RPC_UNARY, RPC_ON_CQ method @path (@len bytes) of the same service
 * as op stream @p, or NULL. */
static const struct rpc_reg *ops_method(const struct rpc_call *p, const uint8_t *path, size_t len)
{
	const char *own = p->reg->m->path, *slash = strrchr(own, '/');
	size_t svc = slash ? (size_t)(slash - own) + 1 : 0;
	const struct rpc_server *s = p->srv;

	if (len <= svc || memcmp(path, own, svc) != 0)
		return NULL;
	for (size_t i = 0; i < s->nregs; i++) {
		const struct rpc_method *m = s->regs[i].m;

		if (m->kind == RPC_UNARY && m->thread == RPC_ON_CQ && strlen(m->path) == len &&
		    memcmp(m->path, path, len) == 0)
			return &s->regs[i];
	}
	return NULL;
}

/* A message (or the end) of op stream @p arrived: run the op it carries. */
static void ops_recv(struct rpc_call *p, bool ok)
{
	struct rpc_server *s = p->srv;
	/* A longer name is kept cut to 256 bytes, which no method's path is as
	 * long as: ops_method() finds none. */
	uint8_t method[256];
	size_t method_len = 0, req_at = 0, req_len = 0;
	grpc_byte_buffer *bb = p->recv_buf;
	grpc_byte_buffer_reader reader;
	struct wsb_pieces pc;
	struct wsb_wire_field f;
	bool has_method = false;
	struct rpc_call *c;
	int r;

	p->recv_busy = false;
	if (!ok) {
		atomic_store(&p->cancelled, true);
		call_end(p, WSB_CANCELLED, 0, "the client went away");
		return;
	}
	if (!p->recv_buf) { /* the client half-closed: done */
		call_end(p, WSB_OK, 0, NULL);
		return;
	}
	/* The message is read in place (wsb_grpc.h): this pass copies the
	 * method's name and notes where the request lies; wsb_grpc_unpack()
	 * decodes it from there below, so a Write's data is copied once. */
	p->recv_buf = NULL;
	if (wsb_grpc_pieces(bb, &reader, &pc) < 0) {
		grpc_byte_buffer_destroy(bb);
		call_end(p, WSB_INTERNAL, 0, "cannot read a received message");
		return;
	}
	while ((r = wsb_pieces_field(&pc, &f)) > 0) {
		if (f.type != WSB_WIRE_LEN)
			continue;
		if (f.number == 1) {
			has_method = true;
			r = wsb_pieces_copy_cut(&pc, f.len, method, sizeof(method), &method_len);
		} else {
			if (f.number == 2) {
				req_at = pc.pos;
				req_len = f.len;
			}
			r = wsb_pieces_skip(&pc, f.len);
		}
		if (r < 0)
			break;
	}
	grpc_byte_buffer_reader_destroy(&reader);
	/* Running from here (rpc_server_shutdown() leaves the stream be),
	 * unless the shutdown came first: then the op is not run at all, as
	 * its reply could not be sent (the stream may be cancelled). */
	pthread_mutex_lock(&s->lock);
	p->op_running = true;
	pthread_mutex_unlock(&s->lock);
	if (atomic_load(&s->shutting_down) || atomic_load(&p->cancelled)) {
		grpc_byte_buffer_destroy(bb);
		call_end(p, WSB_UNAVAILABLE, 0, "agentd is shutting down");
		return;
	}
	if (r < 0 || !has_method) {
		grpc_byte_buffer_destroy(bb);
		rpc_finish(p, WSB_INVALID_ARGUMENT, EBADMSG,
			   "a message of the stream is not an OpRequest with a method");
		return;
	}

	c = calloc(1, sizeof(*c));
	if (!c) {
		grpc_byte_buffer_destroy(bb);
		rpc_finish(p, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	c->srv = s;
	c->reg = ops_method(p, method, method_len);
	c->parent = p;
	call_ref(p);
	c->deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
	atomic_init(&c->refs, 1);
	grpc_metadata_array_init(&c->md);
	atomic_fetch_add(&s->live, 1);
	if (!c->reg) {
		char *esc = wsb_escape(method, method_len, 200);

		grpc_byte_buffer_destroy(bb);
		rpc_finish(c, WSB_UNIMPLEMENTED, 0, "no unary method '%s' of this service to call in an op stream",
			   esc ? esc : "?");
		free(esc);
		return;
	}
	r = wsb_grpc_unpack(bb, req_at, req_len, c->reg->m->request, &c->req);
	grpc_byte_buffer_destroy(bb);
	if (r == -ENOMEM) {
		rpc_finish(c, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	if (r == -E2BIG) {
		rpc_finish(c, WSB_INVALID_ARGUMENT, E2BIG, "the %s request has more than %zu fields",
			   c->reg->m->request->name, WSB_UNPACK_FIELDS_MAX);
		return;
	}
	if (r < 0) {
		rpc_finish(c, WSB_INVALID_ARGUMENT, EBADMSG, "the request does not decode as a %s message",
			   c->reg->m->request->name);
		return;
	}
	call_ref(c);
	if (s->on_call)
		s->on_call(c, s->on_call_arg);
	c->reg->m->handler(c, c->req, c->reg->m->data);
	call_unref(c);
}

static int call_end(struct rpc_call *c, int code, int err, const char *msg)
{
	int r;

	if (c->ended) {
		wsb_err("%s: call ended twice", rpc_method_path(c));
		return -EINVAL;
	}
	c->ended = true;
	/* Every call at debug level: what a client asked for, one line each. */
	/* (An op's line says so: tests tell op streams from calls by it.) */
	wsb_debug("%s: %s%s%s%s", rpc_method_path(c), wsb_status_name(code), msg ? ": " : "",
		  msg ? msg : "", c->parent ? " (op)" : "");
	r = c->parent ? op_send(c, code, err, msg, NULL) : send_status(c, code, err, msg);
	if (r == 0 && atomic_load(&c->cancelled))
		r = -ECANCELED;
	call_unref(c); /* the handler's reference */
	return r;
}

int rpc_reply(struct rpc_call *c, const ProtobufCMessage *msg)
{
	grpc_op ops[3];
	grpc_slice details;
	size_t n = 0, size;
	int r;

	if (c->ended)
		return -EINVAL;
	c->ended = true;
	/* call_end()'s line, with the status the call really ends with. */
	if (c->parent) {
		reserve_put(c); /* the reply holds its own bytes now */
		r = op_send(c, WSB_OK, 0, NULL, msg); /* logs the call's line */
		call_unref(c);
		return r;
	}
	reserve_put(c); /* the reply holds its own bytes now */
	size = protobuf_c_message_get_packed_size(msg);
	if (!reply_take(c, size)) {
		wsb_debug("%s: RESOURCE_EXHAUSTED: %s", rpc_method_path(c), RPC_NO_ROOM_MSG);
		r = send_status(c, WSB_RESOURCE_EXHAUSTED, ENOBUFS, RPC_NO_ROOM_MSG);
		call_unref(c);
		return r < 0 ? r : -ENOBUFS;
	}
	wsb_debug("%s: OK", rpc_method_path(c));
	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
		c->md_sent = true;
	}
	c->send_buf = pack_buffer(msg);
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n].data.send_message.send_message = c->send_buf;
	n++;
	details = grpc_slice_from_static_string("");
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
	ops[n].data.send_status_from_server.status_details = &details;
	n++;
	c->status_held = size;
	tag_init(&c->t_status, TAG_STATUS, c);
	r = start_batch(c, ops, n, &c->t_status);
	if (r < 0)
		reply_put(c->srv, &c->status_held);
	else if (atomic_load(&c->cancelled))
		r = -ECANCELED;
	call_unref(c);
	return r;
}

static int finishv(struct rpc_call *c, int code, int err, const char *prefix, const char *fmt,
		   va_list ap)
{
	char msg[1024] = "";
	int n = 0;

	if (fmt) {
		n = vsnprintf(msg, sizeof(msg), fmt, ap);
		if (n < 0)
			n = 0;
		if (n >= (int)sizeof(msg))
			n = sizeof(msg) - 1;
	}
	if (prefix)
		snprintf(msg + n, sizeof(msg) - n, "%s%s", n ? ": " : "", prefix);
	return call_end(c, code, err, msg);
}

int rpc_finish(struct rpc_call *c, int code, int err, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = finishv(c, code, err, NULL, fmt, ap);
	va_end(ap);
	return r;
}

int rpc_fail_errno(struct rpc_call *c, int err, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (err < 0)
		err = -err;
	if (err == 0)
		err = EIO;
	va_start(ap, fmt);
	r = finishv(c, wsb_status_from_errno(err), err, strerror(err), fmt, ap);
	va_end(ap);
	return r;
}

/* ---- streaming ---- */

int rpc_send(struct rpc_call *c, const ProtobufCMessage *msg, rpc_sent_fn sent, void *arg)
{
	grpc_op ops[2];
	size_t n = 0, size;
	int r;

	if (c->parent || call_is_ops(c))
		return -EINVAL;
	if (c->send_busy)
		return -EBUSY;
	if (c->ended || atomic_load(&c->cancelled))
		return -ECANCELED;
	size = protobuf_c_message_get_packed_size(msg);
	if (!reply_take(c, size))
		return -ENOBUFS;
	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
		c->md_sent = true;
	}
	if (c->send_buf)
		grpc_byte_buffer_destroy(c->send_buf);
	c->send_buf = pack_buffer(msg);
	c->send_held = size;
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n].data.send_message.send_message = c->send_buf;
	n++;
	c->sent = sent;
	c->sent_arg = arg;
	c->send_busy = true;
	tag_init(&c->t_send, TAG_SEND, c);
	r = start_batch(c, ops, n, &c->t_send);
	if (r < 0) {
		c->send_busy = false;
		reply_put(c->srv, &c->send_held);
	}
	return r;
}

int rpc_finish_send_error(struct rpc_call *c, int err, const char *what)
{
	if (err == -ENOBUFS)
		return rpc_finish(c, WSB_RESOURCE_EXHAUSTED, ENOBUFS, "%s", RPC_NO_ROOM_MSG);
	return rpc_finish(c, WSB_CANCELLED, ECANCELED, "%s cancelled", what);
}

int rpc_recv(struct rpc_call *c, rpc_recv_fn recv, void *arg)
{
	grpc_op op;
	int r;

	if (c->parent || call_is_ops(c))
		return -EINVAL;
	if (c->recv_busy)
		return -EBUSY;
	if (c->ended || atomic_load(&c->cancelled))
		return -ECANCELED;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &c->recv_buf;
	c->recvfn = recv;
	c->recv_arg = arg;
	c->recv_busy = true;
	tag_init(&c->t_recv, TAG_RECV, c);
	r = start_batch(c, &op, 1, &c->t_recv);
	if (r < 0)
		c->recv_busy = false;
	return r;
}

void rpc_on_cancel(struct rpc_call *c, void (*cb)(struct rpc_call *, void *), void *arg)
{
	c->cancel_cb = cb;
	c->cancel_arg = arg;
}

bool rpc_cancelled(const struct rpc_call *c)
{
	if (c->parent)
		c = c->parent;
	return atomic_load(&c->cancelled);
}

uint64_t rpc_deadline_ms(const struct rpc_call *c)
{
	gpr_timespec d, now;
	int64_t ms;

	if (gpr_time_cmp(c->deadline, gpr_inf_future(c->deadline.clock_type)) == 0)
		return UINT64_MAX;
	d = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
	now = gpr_now(GPR_CLOCK_MONOTONIC);
	ms = gpr_time_to_millis(gpr_time_sub(d, now));
	return ms > 0 ? (uint64_t)ms : 0;
}

const char *rpc_method_path(const struct rpc_call *c)
{
	return c->reg ? c->reg->m->path : "(unknown method)";
}

bool rpc_metadata(const struct rpc_call *c, const char *key, const uint8_t **ret, size_t *ret_len)
{
	if (c->parent)
		c = c->parent;
	for (size_t i = 0; i < c->md.count; i++) {
		const grpc_metadata *m = &c->md.metadata[i];

		if (grpc_slice_str_cmp(m->key, key) == 0) {
			*ret = GRPC_SLICE_START_PTR(m->value);
			*ret_len = GRPC_SLICE_LENGTH(m->value);
			return true;
		}
	}
	return false;
}

/* ---- arrival of a call ---- */

/* Constant-time check of "authorization: Bearer TOKEN" among the metadata. */
static bool call_authorized(const struct rpc_server *s, const struct rpc_call *c)
{
	static const char prefix[] = "Bearer ";
	bool found = false;

	for (size_t i = 0; i < c->md.count; i++) {
		const grpc_metadata *m = &c->md.metadata[i];
		const uint8_t *v = GRPC_SLICE_START_PTR(m->value);
		size_t vlen = GRPC_SLICE_LENGTH(m->value);
		unsigned diff = 0;

		if (grpc_slice_str_cmp(m->key, "authorization") != 0)
			continue;
		if (vlen != sizeof(prefix) - 1 + s->token_len ||
		    memcmp(v, prefix, sizeof(prefix) - 1) != 0)
			continue;
		v += sizeof(prefix) - 1;
		for (size_t j = 0; j < s->token_len; j++)
			diff |= (unsigned)(v[j] ^ (uint8_t)s->token[j]);
		found |= diff == 0;
	}
	return found;
}

static void call_begin(struct rpc_call *c);

/* A new call arrived (any thread for cq methods, loop for loop methods). */
static void call_start(struct rpc_call *c)
{
	const struct rpc_method *m = c->reg->m;
	struct rpc_server *s = c->srv;
	grpc_op op;

	/* RECV_CLOSE_ON_SERVER tells of the call's end or cancellation. */
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	op.data.recv_close_on_server.cancelled = &c->close_cancelled;
	tag_init(&c->t_close, TAG_CLOSE, c);
	if (start_batch(c, &op, 1, &c->t_close) < 0) {
		call_end(c, WSB_INTERNAL, 0, "could not start call");
		return;
	}
	if (s->token && !m->no_auth && !call_authorized(s, c)) {
		call_end(c, WSB_UNAUTHENTICATED, 0,
			 "missing or wrong bearer token (send metadata 'authorization: Bearer TOKEN')");
		return;
	}
	if (m->kind != RPC_CLIENT_STREAM && m->kind != RPC_OPS) {
		/* The request is read only now, once the call is authorized:
		 * gRPC reads no more of it than flow control lets in before
		 * (methods are registered GRPC_SRM_PAYLOAD_NONE), so callers
		 * without the token cannot make agentd hold 64 MiB requests;
		 * of a method served without it (health checks), a few at a
		 * time. */
		if (s->token && m->no_auth && !call_authorized(s, c)) {
			if (atomic_fetch_add(&s->open_reads, 1) >= RPC_OPEN_READS_MAX) {
				atomic_fetch_sub(&s->open_reads, 1);
				call_end(c, WSB_RESOURCE_EXHAUSTED, 0,
					 "too many calls without the token at once; try again");
				return;
			}
			c->open_read = true;
		}
		memset(&op, 0, sizeof(op));
		op.op = GRPC_OP_RECV_MESSAGE;
		op.data.recv_message.recv_message = &c->payload;
		tag_init(&c->t_recv, TAG_PAYLOAD, c);
		if (start_batch(c, &op, 1, &c->t_recv) < 0)
			call_end(c, WSB_INTERNAL, 0, "could not read the request");
		return;
	}
	call_begin(c);
}

/*
 * The request of @p c was read (TAG_PAYLOAD; or none is read first: a
 * client stream, an Ops stream): decode it and run the handler. The
 * thread of call_start().
 */
static void call_begin(struct rpc_call *c)
{
	const struct rpc_method *m = c->reg->m;
	struct rpc_server *s = c->srv;

	if (m->kind == RPC_OPS) {
		pthread_mutex_lock(&s->lock);
		c->ops_next = s->ops;
		if (s->ops)
			s->ops->ops_prev = c;
		s->ops = c;
		pthread_mutex_unlock(&s->lock);
		if (s->on_call)
			s->on_call(c, s->on_call_arg);
		ops_next(c);
		return;
	}
	if (m->kind != RPC_CLIENT_STREAM) {
		int r;

		if (!c->payload) {
			if (atomic_load(&c->cancelled))
				call_end(c, WSB_CANCELLED, 0, "the call was cancelled");
			else
				call_end(c, WSB_INVALID_ARGUMENT, 0,
					 "the call carried no request message");
			return;
		}
		size_t wire = grpc_byte_buffer_length(c->payload);

		if (m->no_auth && wire > RPC_OPEN_REQUEST_MAX) {
			grpc_byte_buffer_destroy(c->payload);
			c->payload = NULL;
			rpc_finish(c, WSB_INVALID_ARGUMENT, EMSGSIZE,
				   "a %s request of %zu bytes (at most %d)", m->request->name, wire,
				   RPC_OPEN_REQUEST_MAX);
			return;
		}
		r = unpack_buffer(c->payload, m->request, &c->req);
		grpc_byte_buffer_destroy(c->payload);
		c->payload = NULL;
		if (r == -ENOMEM) {
			rpc_finish(c, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
			return;
		}
		if (r == -E2BIG) {
			rpc_finish(c, WSB_INVALID_ARGUMENT, E2BIG,
				   "the %s request has more than %zu fields", m->request->name,
				   WSB_UNPACK_FIELDS_MAX);
			return;
		}
		if (r < 0) {
			rpc_finish(c, WSB_INVALID_ARGUMENT, EBADMSG,
				   "the request does not decode as a %s message", m->request->name);
			return;
		}
		/*
		 * protobuf-c hands a proto3 string over NUL-terminated, so one
		 * that holds a NUL character (valid UTF-8, which grpcio sends)
		 * would be taken as cut short there: a file written under
		 * another name, a command run in part. Such a message packs
		 * shorter than it came (every other field packs back to its
		 * bytes, unknown ones too, from encoders that write proto3's
		 * canonical form: protobuf-c, grpcio, Go's).
		 */
		if (protobuf_c_message_get_packed_size(c->req) < wire) {
			rpc_finish(c, WSB_INVALID_ARGUMENT, EINVAL,
				   "a string of the %s request holds a NUL character, which agentd "
				   "cannot take (its strings end at the first NUL)", m->request->name);
			return;
		}
	}
	/* Keep the call (and req) alive until the handler returns, even if it
	 * ends the call first. Callbacks are covered by their batch's ref. */
	call_ref(c);
	if (s->on_call)
		s->on_call(c, s->on_call_arg);
	m->handler(c, c->req, m->data);
	call_unref(c);
}

static void unknown_start(struct rpc_call *c)
{
	char *method = grpc_slice_to_c_string(c->details.method);
	char *esc = wsb_escape(method, strlen(method), 200);
	grpc_op op;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	op.data.recv_close_on_server.cancelled = &c->close_cancelled;
	tag_init(&c->t_close, TAG_CLOSE, c);
	if (start_batch(c, &op, 1, &c->t_close) == 0) {
		char msg[512];

		snprintf(msg, sizeof(msg), "unknown method '%s'", esc ? esc : "?");
		call_end(c, WSB_UNIMPLEMENTED, 0, msg);
	} else {
		c->ended = true;
		call_unref(c);
	}
	free(esc);
	gpr_free(method);
}

/* Post one request slot for @p reg (NULL: unknown methods). */
static int post_slot(struct rpc_server *s, const struct rpc_reg *reg)
{
	struct rpc_call *c;
	grpc_call_error e;

	if (atomic_load(&s->shutting_down))
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->srv = s;
	c->reg = reg;
	atomic_init(&c->refs, 1);
	grpc_metadata_array_init(&c->md);
	tag_init(&c->t_req, reg ? TAG_REQUEST : TAG_UNKNOWN, c);
	atomic_fetch_add(&s->live, 1);
	if (reg) {
		e = grpc_server_request_registered_call(s->server, reg->handle, &c->call,
							&c->deadline, &c->md, NULL, s->cq, s->cq,
							&c->t_req);
	} else {
		grpc_call_details_init(&c->details);
		e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq,
					     s->cq, &c->t_req);
	}
	if (e != GRPC_CALL_OK) {
		wsb_err("request_call: %s", grpc_call_error_to_string(e));
		call_free(c);
		return -EIO;
	}
	return 0;
}

/* ---- completion handling ---- */

static void handle_tag(struct rpc_server *s, struct rpc_tag *t)
{
	struct rpc_call *c = t->call;

	switch (t->kind) {
	case TAG_REQUEST:
		if (!t->ok) { /* shutting down */
			call_free(c);
			return;
		}
		/* ON_LOOP calls reach here on the loop; the slot is reposted
		 * by the cq thread before the hop (see cq_dispatch). */
		if (c->reg->m->thread == RPC_ON_CQ)
			post_slot(s, c->reg);
		c->deadline = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
		call_start(c);
		return;
	case TAG_UNKNOWN:
		if (!t->ok) {
			call_free(c);
			return;
		}
		post_slot(s, NULL);
		unknown_start(c);
		return;
	case TAG_SEND:
		reply_put(s, &c->send_held);
		c->send_busy = false;
		if (c->send_buf) {
			grpc_byte_buffer_destroy(c->send_buf);
			c->send_buf = NULL;
		}
		if (!t->ok)
			atomic_store(&c->cancelled, true);
		if (!c->ended && c->sent)
			c->sent(c, t->ok, c->sent_arg);
		call_unref(c);
		return;
	case TAG_PAYLOAD:
		if (c->open_read) {
			atomic_fetch_sub(&s->open_reads, 1);
			c->open_read = false;
		}
		if (!t->ok)
			atomic_store(&c->cancelled, true);
		call_begin(c);
		call_unref(c);
		return;
	case TAG_RECV: {
		ProtobufCMessage *msg = NULL;
		int err = 0;

		if (call_is_ops(c)) {
			ops_recv(c, t->ok);
			call_unref(c);
			return;
		}
		c->recv_busy = false;
		if (!t->ok) {
			atomic_store(&c->cancelled, true);
			err = -ECANCELED;
		} else if (c->recv_buf) {
			err = unpack_buffer(c->recv_buf, c->reg->m->request, &msg);
			grpc_byte_buffer_destroy(c->recv_buf);
			c->recv_buf = NULL;
		}
		if (!c->ended && c->recvfn)
			c->recvfn(c, msg, err, c->recv_arg);
		else if (msg)
			protobuf_c_message_free_unpacked(msg, NULL);
		call_unref(c);
		return;
	}
	case TAG_CLOSE:
		if (!t->ok || c->close_cancelled)
			atomic_store(&c->cancelled, true);
		if (atomic_load(&c->cancelled) && !c->ended && c->cancel_cb) {
			void (*cb)(struct rpc_call *, void *) = c->cancel_cb;

			c->cancel_cb = NULL;
			cb(c, c->cancel_arg);
		}
		call_unref(c);
		return;
	case TAG_STATUS:
		reply_put(s, &c->status_held);
		call_unref(c);
		return;
	case TAG_SHUTDOWN:
		s->shutdown_tag_done = true;
		return;
	}
}

static void loop_push(struct rpc_server *s, struct rpc_tag *t)
{
	pthread_mutex_lock(&s->lock);
	t->next = NULL;
	if (s->fifo_tail)
		s->fifo_tail->next = t;
	else
		s->fifo_head = t;
	s->fifo_tail = t;
	pthread_mutex_unlock(&s->lock);
	uv_async_send(&s->async);
}

/* Which thread a completion belongs on; runs on the cq thread. */
static void cq_dispatch(struct rpc_server *s, struct rpc_tag *t)
{
	struct rpc_call *c = t->call;

	switch (t->kind) {
	case TAG_SHUTDOWN:
		loop_push(s, t);
		return;
	case TAG_STATUS:
	case TAG_UNKNOWN:
		handle_tag(s, t);
		return;
	case TAG_REQUEST:
		if (t->ok && call_on_loop(c)) {
			post_slot(s, c->reg);
			loop_push(s, t);
			return;
		}
		handle_tag(s, t);
		return;
	default:
		if (call_on_loop(c))
			loop_push(s, t);
		else
			handle_tag(s, t);
		return;
	}
}

/* Sleep on the gate until CLOCK_MONOTONIC @until_ns (gate_lock held). */
static void gate_sleep_until(struct rpc_server *s, int64_t until_ns)
{
	struct timespec ts = { .tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000 };

	(void)pthread_cond_timedwait(&s->gate_cond, &s->gate_lock, &ts);
}

/*
 * Wait for this thread's turn to poll (the gate): at once when nobody
 * polls and @after_handler (the thread just ran what it polled); else when
 * nobody has polled for GATE_STALL_NS. One waiting thread (the watcher)
 * looks at the clock every GATE_STALL_NS while completions keep coming
 * (the last within GATE_WATCH_NS); the others, and all of them when the
 * server is idle, wait with no timeout. Returns false once the queue is
 * shut down. cq threads.
 */
static bool gate_enter(struct rpc_server *s, bool after_handler)
{
	bool ok;

	pthread_mutex_lock(&s->gate_lock);
	while (!s->gate_stop) {
		int64_t now = wsb_mono_ns();

		if (s->gate_polling == 0 && after_handler)
			break;
		if (s->gate_polling == 0 && now >= s->gate_left_ns + GATE_STALL_NS)
			break; /* every poller is in a handler that takes long */
		after_handler = false;
		if (!s->gate_watching && now < s->gate_left_ns + GATE_WATCH_NS) {
			s->gate_watching = true;
			gate_sleep_until(s, s->gate_polling == 0 ? s->gate_left_ns + GATE_STALL_NS
								 : now + GATE_STALL_NS);
			s->gate_watching = false;
			continue;
		}
		s->gate_untimed++;
		pthread_cond_wait(&s->gate_cond, &s->gate_lock);
		s->gate_untimed--;
	}
	ok = !s->gate_stop;
	if (ok)
		s->gate_polling++;
	pthread_mutex_unlock(&s->gate_lock);
	return ok;
}

/* A poller got a completion and goes to handle it. cq threads. */
static void gate_leave(struct rpc_server *s)
{
	pthread_mutex_lock(&s->gate_lock);
	s->gate_polling--;
	s->gate_left_ns = wsb_mono_ns();
	/* Nobody polls now: someone must watch the clock. */
	if (s->gate_polling == 0 && !s->gate_watching && s->gate_untimed > 0)
		pthread_cond_signal(&s->gate_cond);
	pthread_mutex_unlock(&s->gate_lock);
}

static void *cq_thread(void *arg)
{
	struct rpc_server *s = arg;

	while (gate_enter(s, true)) {
		grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
							   NULL);
		struct rpc_tag *t;

		if (ev.type == GRPC_QUEUE_SHUTDOWN) {
			pthread_mutex_lock(&s->gate_lock);
			s->gate_polling--;
			s->gate_stop = true;
			pthread_cond_broadcast(&s->gate_cond);
			pthread_mutex_unlock(&s->gate_lock);
			break;
		}
		gate_leave(s);
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		t = ev.tag;
		t->ok = ev.success != 0;
		cq_dispatch(s, t);
	}
	atomic_fetch_add(&s->threads_done, 1);
	uv_async_send(&s->async);
	return NULL;
}

static void finish_shutdown(struct rpc_server *s)
{
	if (s->finished || !atomic_load(&s->shutting_down))
		return;
	if (!s->cq_shutdown && s->shutdown_tag_done && atomic_load(&s->live) == 0) {
		s->cq_shutdown = true;
		grpc_completion_queue_shutdown(s->cq);
	}
	if (s->cq_shutdown && atomic_load(&s->threads_done) == s->nthreads) {
		for (int i = 0; i < s->nthreads; i++)
			pthread_join(s->threads[i], NULL);
		s->nthreads = 0;
		s->finished = true;
		uv_timer_stop(&s->grace);
		if (s->done)
			s->done(s->done_arg);
	}
}

static void on_async(uv_async_t *h)
{
	struct rpc_server *s = h->data;
	struct rpc_tag *t;

	for (;;) {
		pthread_mutex_lock(&s->lock);
		t = s->fifo_head;
		if (t) {
			s->fifo_head = t->next;
			if (!s->fifo_head)
				s->fifo_tail = NULL;
		}
		pthread_mutex_unlock(&s->lock);
		if (!t)
			break;
		handle_tag(s, t);
	}
	finish_shutdown(s);
}
/*
 * gRPC's own log lines (gpr_log) go to agentd's log at info level (an
 * error) or debug: what a user needs of them agentd says itself, in a
 * sentence ("cannot listen on ...: address in use"), and the raw line
 * before it only confused. grpc_init() time, before any thread.
 */
static void grpc_log(gpr_log_func_args *a)
{
	wsb_log(a->severity == GPR_LOG_SEVERITY_ERROR ? WSB_LOG_INFO : WSB_LOG_DEBUG,
		"grpc: %s:%d: %s", a->file, a->line, a->message);
}


/* ---- server lifecycle ---- */

int rpc_server_new(const struct rpc_server_config *cfg, struct rpc_server **ret)
{
	struct rpc_server *s;
	grpc_arg args[7];
	grpc_channel_args chargs;

	if (!cfg || !cfg->loop || cfg->cq_threads < 1)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = cfg->loop;
	s->nthreads = cfg->cq_threads;
	s->max_recv = cfg->max_recv_bytes ? cfg->max_recv_bytes : 4u << 20;
	s->max_reply = cfg->max_reply_bytes ? cfg->max_reply_bytes : (size_t)256 << 20;
	atomic_init(&s->reply_bytes, 0);
	if (cfg->token) {
		s->token = strdup(cfg->token);
		if (!s->token) {
			free(s);
			return -ENOMEM;
		}
		s->token_len = strlen(s->token);
	}
	s->on_call = cfg->on_call;
	s->on_call_arg = cfg->on_call_arg;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->gate_lock, NULL);
	/* The gate's timed waits use CLOCK_MONOTONIC, like wsb_mono_ns(). */
	wsb_cond_init_mono(&s->gate_cond);
	atomic_init(&s->live, 0);
	atomic_init(&s->open_reads, 0);
	atomic_init(&s->threads_done, 0);
	atomic_init(&s->shutting_down, false);

	gpr_set_log_function(grpc_log);
	grpc_init();
	args[0].type = GRPC_ARG_INTEGER;
	args[0].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
	args[0].value.integer = 0;
	args[1].type = GRPC_ARG_INTEGER;
	args[1].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
	args[1].value.integer = s->max_recv > INT32_MAX ? INT32_MAX : (int)s->max_recv;
	args[2].type = GRPC_ARG_INTEGER;
	args[2].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
	args[2].value.integer = RPC_STREAMS_MAX;
	chargs.num_args = 3;
	if (cfg->keepalive_ms) {
		int ms = cfg->keepalive_ms > INT32_MAX ? INT32_MAX : (int)cfg->keepalive_ms;

		args[3].type = args[4].type = args[5].type = args[6].type = GRPC_ARG_INTEGER;
		args[3].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
		args[3].value.integer = ms;
		args[4].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
		args[4].value.integer = ms;
		/* Keep pinging while a stream is open and nothing flows (an
		 * idle Watch): by default the pings stop after two. */
		args[5].key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA;
		args[5].value.integer = 0;
		args[6].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
		args[6].value.integer = 1;
		chargs.num_args = 7;
	}
	chargs.args = args;
	s->server = grpc_server_create(&chargs, NULL);
	s->cq = grpc_completion_queue_create_for_next(NULL);
	grpc_server_register_completion_queue(s->server, s->cq, NULL);
	s->creds = grpc_insecure_server_credentials_create();

	uv_async_init(s->loop, &s->async, on_async);
	s->async.data = s;
	uv_timer_init(s->loop, &s->grace);
	s->grace.data = s;
	uv_timer_init(s->loop, &s->room_timer);
	s->room_timer.data = s;
	uv_unref((uv_handle_t *)&s->room_timer); /* the calls keep the loop */
	*ret = s;
	return 0;
}

int rpc_server_register(struct rpc_server *s, const struct rpc_method *m)
{
	struct rpc_reg *regs;
	void *h;

	if (s->started)
		return -EBUSY;
	if (m->kind == RPC_OPS && m->thread != RPC_ON_CQ)
		return -EINVAL;
	for (size_t i = 0; i < s->nregs; i++)
		if (strcmp(s->regs[i].m->path, m->path) == 0)
			return -EEXIST;
	regs = realloc(s->regs, (s->nregs + 1) * sizeof(*regs));
	if (!regs)
		return -ENOMEM;
	s->regs = regs;
	/* No payload with the call: call_start() checks the token first. */
	h = grpc_server_register_method(s->server, m->path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
	if (!h)
		return -EINVAL;
	s->regs[s->nregs].m = m;
	s->regs[s->nregs].handle = h;
	s->nregs++;
	return 0;
}

int rpc_server_listen(struct rpc_server *s, const char *addr)
{
	mode_t old = 0;
	bool unix_sock = strncmp(addr, "unix:", 5) == 0;
	int port;

	if (s->started)
		return -EBUSY;
	if (!*addr || (unix_sock && !addr[5]))
		return -EINVAL;
	if (unix_sock)
		old = umask(0077);
	port = grpc_server_add_http2_port(s->server, addr, s->creds);
	if (unix_sock)
		umask(old);
	return port > 0 ? 0 : -EADDRINUSE;
}

int rpc_server_start(struct rpc_server *s)
{
	grpc_server_start(s->server);
	s->started = true;
	for (size_t i = 0; i < s->nregs; i++)
		for (int k = 0; k < RPC_SLOTS_PER_METHOD; k++)
			if (post_slot(s, &s->regs[i]) < 0)
				return -ENOMEM;
	for (int k = 0; k < RPC_SLOTS_PER_METHOD; k++)
		if (post_slot(s, NULL) < 0)
			return -ENOMEM;
	s->threads = calloc(s->nthreads, sizeof(*s->threads));
	if (!s->threads)
		return -ENOMEM;
	for (int i = 0; i < s->nthreads; i++) {
		int r = pthread_create(&s->threads[i], NULL, cq_thread, s);
		if (r) {
			s->nthreads = i;
			return -r;
		}
	}
	return 0;
}

int rpc_server_add_fd(struct rpc_server *s, int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	/* Only insecure credentials work here; others fail silently (§5). */
	grpc_server_add_channel_from_fd(s->server, fd, s->creds);
	return 0;
}

static void on_grace(uv_timer_t *t)
{
	struct rpc_server *s = t->data;

	wsb_notice("grace period over: cancelling the calls still running");
	grpc_server_cancel_all_calls(s->server);
}

void rpc_server_shutdown(struct rpc_server *s, uint64_t grace_ms, void (*done)(void *), void *arg)
{
	if (atomic_load(&s->shutting_down))
		return;
	s->done = done;
	s->done_arg = arg;
	atomic_store(&s->shutting_down, true);
	/* An op stream waiting for its next op is no call in progress: end it
	 * now (its client makes a new one, which finds the server gone), not
	 * after the grace; one running an op ends once its reply is sent
	 * (ops_next). */
	pthread_mutex_lock(&s->lock);
	for (struct rpc_call *c = s->ops; c; c = c->ops_next)
		if (!c->op_running && c->call)
			grpc_call_cancel_with_status(c->call, GRPC_STATUS_UNAVAILABLE,
						     "agentd is shutting down", NULL);
	pthread_mutex_unlock(&s->lock);
	tag_init(&s->shutdown_tag, TAG_SHUTDOWN, NULL);
	grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
	if (grace_ms == 0)
		grpc_server_cancel_all_calls(s->server);
	else
		uv_timer_start(&s->grace, on_grace, grace_ms, 0);
	if (!s->started) {
		/* No cq threads: drain here. */
		for (;;) {
			grpc_event ev = grpc_completion_queue_next(
				s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
			if (ev.type != GRPC_OP_COMPLETE)
				break;
			if (ev.tag == &s->shutdown_tag) {
				s->shutdown_tag_done = true;
				break;
			}
		}
		s->cq_shutdown = true;
		grpc_completion_queue_shutdown(s->cq);
		while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
			       .type != GRPC_QUEUE_SHUTDOWN)
			;
		s->finished = true;
		if (done)
			done(arg);
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	struct rpc_server *s = h->data;

	if (--s->closing == 0)
		free(s);
}

void rpc_server_free(struct rpc_server *s)
{
	if (!s)
		return;
	if (s->server)
		grpc_server_destroy(s->server);
	if (s->cq)
		grpc_completion_queue_destroy(s->cq);
	grpc_server_credentials_release(s->creds);
	/*
	 * No grpc_shutdown(): in 1.51 its clean-up joins the executor threads,
	 * one of which can sit in epoll_wait for up to ~10 s, and agentd calls
	 * this only on its way out, where exit() frees everything anyway.
	 */
	free(s->regs);
	free(s->threads);
	free(s->token);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->gate_lock);
	pthread_cond_destroy(&s->gate_cond);
	while (s->room_head)
		rpc_room_cancel(s->room_head);
	s->closing = 3;
	uv_close((uv_handle_t *)&s->async, on_handle_closed);
	uv_close((uv_handle_t *)&s->grace, on_handle_closed);
	uv_close((uv_handle_t *)&s->room_timer, on_handle_closed);
}
