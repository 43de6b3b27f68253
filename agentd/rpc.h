/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * agentd's transport adapter: the only interface between the services and the
 * gRPC C-core. No grpc_* type or call appears outside rpc_server.c, because the
 * C-core API changes between gRPC releases (grpc/grpc#6814, #9656).
 *
 * Model. Each incoming call of a registered method becomes one struct rpc_call.
 * The adapter decodes the first request message (unary and server-streaming
 * methods), checks authorization, and calls the method's handler. The handler
 * must end the call exactly once, with rpc_reply() or rpc_finish() (or one of
 * the rpc_fail* helpers), even if the client has gone away; after that call the
 * handler must not touch the rpc_call again. Between start and end it may
 * stream with rpc_send() (one send outstanding at a time) or rpc_recv().
 *
 * Threads. agentd runs N completion-queue threads and one libuv loop thread.
 * A method with thread RPC_ON_CQ has its handler and every callback of its
 * calls run on some cq thread (never two at once for one call); use it for
 * short blocking work such as file I/O. A method with RPC_ON_LOOP has all of
 * them run on the loop thread; use it for anything that touches libuv (exec).
 * The rpc_* functions below may be called from any thread, but calls on one
 * rpc_call must not overlap.
 *
 * Errors. A failing call carries a gRPC status code (enum wsb_status), a
 * message that says what and why, and, when it stems from an errno, the errno
 * name in the "wsbridge-errno" trailer (see proto/wsb.h).
 */
#ifndef AGENTD_RPC_H
#define AGENTD_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct rpc_server;
struct rpc_call;

enum rpc_kind {
	RPC_UNARY,         /**< one request, one reply */
	RPC_SERVER_STREAM, /**< one request, a stream of replies */
	RPC_CLIENT_STREAM, /**< a stream of requests (rpc_recv), one reply */
	/** A stream of calls of the RPC_UNARY, RPC_ON_CQ methods of the same
	 * service (the path up to its last '/'), one OpRequest message each,
	 * answered with an OpReply (proto/wsbridge.proto Ops), in order. The
	 * adapter serves it: request and handler are unused (NULL). Each call
	 * runs its method's handler as a call of its own would (rpc_metadata()
	 * and rpc_cancelled() are the stream's; no deadline), save that it
	 * cannot stream. RPC_ON_CQ only. */
	RPC_OPS,
};

enum rpc_thread {
	RPC_ON_CQ,   /**< handler and callbacks on a completion-queue thread */
	RPC_ON_LOOP, /**< handler and callbacks on the libuv loop thread */
};

/**
 * Handler of a method. @p req is the decoded first request (NULL for
 * RPC_CLIENT_STREAM, whose messages come through rpc_recv()); it belongs to
 * the call and stays valid until the call has ended and the handler or
 * callback that ended it has returned. @p data is rpc_method.data.
 */
typedef void (*rpc_handler_fn)(struct rpc_call *call, const ProtobufCMessage *req, void *data);

struct rpc_method {
	const char *path; /**< "/package.Service/Method", case-sensitive */
	enum rpc_kind kind;
	enum rpc_thread thread;
	const ProtobufCMessageDescriptor *request; /**< request message type */
	bool no_auth; /**< served without a token (health checks only) */
	rpc_handler_fn handler;
	void *data;
	/** Its replies of over RPC_REPLY_SMALL bytes are refused
	 * RESOURCE_EXHAUSTED (ENOBUFS) past rpc_server_config.max_reply_bytes:
	 * only for a pure read, which the client may ask again as it was and
	 * which changed nothing (Read, ReadDir, Download, ViewFile). Every
	 * other reply goes, and counts: an Open's with read-ahead holds a new
	 * handle, an exec stream's output its command (a refusal would end
	 * it), a transcript the commands' only record. */
	bool reply_budget;
};

/** Settings for rpc_server_new(). */
struct rpc_server_config {
	uv_loop_t *loop;       /**< loop that RPC_ON_LOOP work runs on; borrowed */
	int cq_threads;        /**< completion-queue threads, >= 1 */
	const char *token;     /**< bearer token every call must carry, or NULL */
	size_t max_recv_bytes; /**< largest request message accepted, bytes */
	/** Ping every connection after this many milliseconds without
	 * traffic, and close one whose ping is not answered within as long
	 * again (GRPC_ARG_KEEPALIVE_TIME_MS/_TIMEOUT_MS, gRPC's doc/keepalive.md):
	 * a peer that vanished without closing (host gone, a partition) ends
	 * its calls. 0: gRPC's defaults (a server pings after 2 hours). */
	unsigned keepalive_ms;
	/** Bytes of reply messages sent and not yet taken by their clients
	 * (gRPC completes a send once HTTP/2 flow control let it go: a client
	 * that does not read holds its replies in agentd) past which a reply
	 * of over RPC_REPLY_SMALL bytes of a reply_budget method is refused
	 * RESOURCE_EXHAUSTED (ENOBUFS) instead (0: 256 MiB). Without it,
	 * clients that open many calls and read none ran agentd out of memory
	 * (800 Ops streams each holding an unread 1 MiB Read: 672 MB). */
	size_t max_reply_bytes;
	/** Called for every call that arrives (authorized, decoded), before its
	 * handler, on the thread that runs the handler; or NULL. */
	void (*on_call)(struct rpc_call *call, void *arg);
	void *on_call_arg;
};

/**
 * Create a server. Returns 0 and sets *ret_server, or -errno (-EINVAL for a bad
 * config, -ENOMEM). The server copies the token. Loop thread only.
 */
int rpc_server_new(const struct rpc_server_config *cfg, struct rpc_server **ret_server);

/**
 * Register a method; all must be registered before rpc_server_start(). The
 * method struct is borrowed and must outlive the server. Returns 0 or -errno
 * (-EEXIST for a path registered twice, -EBUSY after start).
 */
int rpc_server_register(struct rpc_server *s, const struct rpc_method *m);

/**
 * Listen on @p addr: "host:port" (IPv4, [IPv6] or a name) or "unix:/path".
 * Two servers never share a TCP port (SO_REUSEPORT is turned off), and a unix
 * socket is created with mode 0600. Returns 0, -EADDRINUSE when the address
 * cannot be bound, or -EINVAL for a malformed address. Before start only.
 */
int rpc_server_listen(struct rpc_server *s, const char *addr);

/**
 * Start serving. Returns 0 or -errno. Loop thread only.
 */
int rpc_server_start(struct rpc_server *s);

/**
 * Serve one already connected byte stream @p fd (a socket end; it is made
 * O_NONBLOCK here). The server takes ownership of the fd. After start only.
 */
int rpc_server_add_fd(struct rpc_server *s, int fd);

/**
 * Stop accepting calls and let running calls finish; after @p grace_ms
 * milliseconds cancel the rest (their handlers see failed sends/receives and
 * their cancel callbacks run). @p done runs on the loop thread once every call
 * has ended; then rpc_server_free() may be called. Loop thread only.
 */
void rpc_server_shutdown(struct rpc_server *s, uint64_t grace_ms, void (*done)(void *arg), void *arg);

/**
 * Free a shut-down server. NULL is a no-op. Loop thread only. gRPC itself is
 * left initialised (see rpc_server.c): call this only on the way to exit.
 */
void rpc_server_free(struct rpc_server *s);

/* ---- per-call API ---- */

/** Replies of up to this many bytes are sent whatever their clients hold
 * unread (rpc_server_config.max_reply_bytes), a reply_budget method's too. */
#define RPC_REPLY_SMALL 4096

/** The status message of a reply refused for max_reply_bytes (static). */
#define RPC_NO_ROOM_MSG                                                                   \
	"agentd holds as many bytes of replies its clients have not read yet as "         \
	"--max-reply-bytes allows; try again once they are read"

/** The status message of a call refused by rpc_reserve() (static). */
#define RPC_NO_ROOM_RESERVE_MSG                                                           \
	"agentd holds, in replies its clients have not read yet and in replies of "       \
	"calls still running, as many bytes as --max-reply-bytes allows; try again later"

/**
 * Bytes left now in the server's budget of unread replies
 * (rpc_server_config.max_reply_bytes); 0 when past it. A method that can
 * hold its output back (Exec's streams) sends no more than this and waits
 * while it is under RPC_REPLY_SMALL. A snapshot: other threads take and
 * give back bytes. Any thread.
 */
size_t rpc_reply_room(const struct rpc_call *call);

/** How often rpc_room_wait()'s waiters look for room again, ms. */
#define RPC_ROOM_POLL_MS 10

/** A place in the queue of rpc_room_wait(); the caller's storage, zeroed
 * before first use; its fields are the server's. */
struct rpc_room_wait {
	struct rpc_server *srv;
	struct rpc_room_wait *prev, *next;
	size_t need;
	void (*ready)(struct rpc_room_wait *w, void *arg);
	void *arg;
	bool queued;
};

/**
 * Wait for room in the reply budget: @p ready(@p w, @p arg) runs once the
 * budget has @p need bytes left (rpc_reply_room() >= @p need), looked at
 * every RPC_ROOM_POLL_MS, in the order the waiters came. A stream that
 * can hold its next message back (Exec output, the next Watch batch) waits
 * so, rather than grow agentd past --max-reply-bytes. @p w (the caller's,
 * kept until ready ran or rpc_room_cancel()) is queued on @p call's server;
 * a no-op while @p w is queued already. Loop thread (the timer's), as is
 * @p ready; the server frees no waiter: cancel it before its owner goes.
 */
void rpc_room_wait(struct rpc_call *call, struct rpc_room_wait *w, size_t need,
		   void (*ready)(struct rpc_room_wait *w, void *arg), void *arg);

/** Take @p w out of the queue of rpc_room_wait(); a no-op when it is not
 * queued. Loop thread. */
void rpc_room_cancel(struct rpc_room_wait *w);

/**
 * Set aside @p n bytes for a reply that @p call will send later, before
 * the method does anything that a refusal then could not undo
 * (ManageAgentOps/ExecuteCommands reserves its largest transcript before
 * it runs a command). Reservations are counted apart from the replies
 * sent: they bound the calls that reserve (the unread replies and every
 * reservation within rpc_server_config.max_reply_bytes), not what other
 * calls may send (rpc_reply_room() does not see them), so calls running
 * for minutes refuse no read. Held until that reply took its own bytes
 * (rpc_reply()) or the call is freed; any method may reserve. Returns 0,
 * or -ENOBUFS when there is no room (nothing set aside: end the call
 * RESOURCE_EXHAUSTED, ENOBUFS, RPC_NO_ROOM_RESERVE_MSG). The method's
 * thread.
 */
int rpc_reserve(struct rpc_call *call, size_t n);

/**
 * End a unary or client-streaming call with reply @p msg (borrowed; packed
 * before return) and status OK. A reply_budget method's reply of over
 * RPC_REPLY_SMALL bytes that would take the server past max_reply_bytes
 * ends the call RESOURCE_EXHAUSTED (errno ENOBUFS, RPC_NO_ROOM_MSG)
 * instead. Returns 0, or -ECANCELED if the client is gone, or -ENOBUFS for
 * a refused reply (the call is ended all the same).
 */
int rpc_reply(struct rpc_call *call, const ProtobufCMessage *msg);

/**
 * End the call with status @p code, message printf(@p fmt) and, if @p err is a
 * positive errno, the errno trailer. rpc_finish(call, WSB_OK, 0, NULL) ends a
 * server stream successfully. Returns 0 or -ECANCELED (the call is ended all
 * the same).
 */
int rpc_finish(struct rpc_call *call, int code, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/**
 * rpc_finish() with the status derived from positive errno @p err
 * (wsb_status_from_errno) and message "WHAT: strerror(err)", where WHAT is the
 * printf of @p fmt. Use for failures of a system call.
 */
int rpc_fail_errno(struct rpc_call *call, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/**
 * Callback for rpc_send(): @p ok is false when the message could not be sent
 * (the client is gone or the call was cancelled); the handler should then
 * clean up and end the call.
 */
typedef void (*rpc_sent_fn)(struct rpc_call *call, bool ok, void *arg);

/**
 * Send one message of a server stream. @p msg is borrowed and packed before
 * return. Only one send may be outstanding: call again only after @p sent ran.
 * Returns 0 (then @p sent will run exactly once), -EBUSY if a send is already
 * outstanding, -ECANCELED if the call is already dead, -ENOBUFS if the
 * method is reply_budget, @p msg is over RPC_REPLY_SMALL bytes and the
 * server holds max_reply_bytes of unread replies (then @p sent does not
 * run; end the call, as rpc_finish_send_error() does).
 */
int rpc_send(struct rpc_call *call, const ProtobufCMessage *msg, rpc_sent_fn sent, void *arg);

/**
 * End @p call after rpc_send() failed with @p err (< 0): RESOURCE_EXHAUSTED
 * with errno ENOBUFS and RPC_NO_ROOM_MSG for -ENOBUFS, else CANCELLED
 * (ECANCELED) "@p what cancelled". Returns what rpc_finish() returns.
 * The method's thread.
 */
int rpc_finish_send_error(struct rpc_call *call, int err, const char *what);

/**
 * Callback for rpc_recv(): @p msg is the next decoded request, owned by the
 * callback (free it with protobuf_c_message_free_unpacked(msg, NULL)); NULL
 * with @p err 0 at the end of the client's stream; NULL with @p err
 * -ECANCELED when the call was cancelled, -EBADMSG when the message did not
 * decode.
 */
typedef void (*rpc_recv_fn)(struct rpc_call *call, ProtobufCMessage *msg, int err, void *arg);

/**
 * Receive the next message of a client stream. Only one receive may be
 * outstanding. Returns 0 (then @p recv will run exactly once) or -errno.
 */
int rpc_recv(struct rpc_call *call, rpc_recv_fn recv, void *arg);

/**
 * Ask to be told when the client cancels the call or its deadline passes.
 * @p cb runs at most once, on the method's thread, and never after the call
 * ended. Only for RPC_ON_LOOP methods (cq-thread methods notice a cancel by
 * a failed send or receive). Call at most once per call.
 */
void rpc_on_cancel(struct rpc_call *call, void (*cb)(struct rpc_call *call, void *arg), void *arg);

/** True once the client cancelled or the deadline passed. Any thread. */
bool rpc_cancelled(const struct rpc_call *call);

/**
 * The caller's deadline as milliseconds from now (0 if already passed), or
 * UINT64_MAX when the client set none.
 */
uint64_t rpc_deadline_ms(const struct rpc_call *call);

/** The method path of the call ("/wsbridge.v1.Workspace/Stat"). */
const char *rpc_method_path(const struct rpc_call *call);

/**
 * The first value of request metadata @p key (lowercase: gRPC delivers keys
 * so, per the HTTP/2 rules it follows) of @p call: its bytes (not
 * NUL-terminated, valid until the call ends) in *ret and their number in
 * *ret_len. Returns false when the client sent no such key. The method's
 * thread, while the call runs.
 */
bool rpc_metadata(const struct rpc_call *call, const char *key, const uint8_t **ret,
		  size_t *ret_len);

#endif /* AGENTD_RPC_H */
