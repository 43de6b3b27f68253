/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The host side's gRPC client adapter, shared by wsctl and wsfs: one channel
 * to agentd, synchronous unary calls and synchronous streams, all taking and
 * giving protobuf-c messages. No grpc_* type or call appears outside client.c,
 * because the C-core API changes between gRPC releases (grpc/grpc#6814).
 *
 * Transports. The target is "host:port", "unix:/path" (anything gRPC's
 * grpc_channel_create() accepts), or a shell command (wsc_options.exec_cmd)
 * that is spawned with one end of a socketpair as both its stdin and its
 * stdout and speaks gRPC over it: `kubectl exec -i POD -- agentd --stdio`.
 *
 * Errors. Every call that can fail returns 0 (or >= 0) on success and a
 * negative errno on failure, and fills an optional struct wsc_status with the
 * gRPC status code, the positive errno and the status message. The errno comes
 * from the "wsbridge-errno" trailer when agentd sent one (proto/wsb.h), else
 * from the status code (wsb_errno_from_status). Failures on this side of the
 * wire (ENOMEM, a reply that does not decode) are reported the same way, with
 * a status code derived from the errno (wsb_status_from_errno).
 *
 * Thread safety. A struct wsc may be used by any number of threads at once:
 * calls share the channel and each call uses its own completion queue, taken
 * from a pool. A struct wsc_stream is used by one thread at a time, except
 * that wsc_stream_cancel() may be called from any thread while the stream
 * exists, and one thread may send while another receives.
 */
#ifndef WSC_CLIENT_H
#define WSC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct wsc;
struct wsc_stream;

/** Shortest health_ms wsc uses, milliseconds (wsc_options). */
#define WSC_HEALTH_MIN_MS 1000u

/** Default largest message wsc accepts from the server: 64 MiB. */
#define WSC_MAX_RECV_DEFAULT ((size_t)64 * 1024 * 1024)

/** Settings for wsc_connect(); all strings are copied. */
struct wsc_options {
	/** "host:port", "[v6]:port", "unix:/path", "unix-abstract:name";
	 * ignored when exec_cmd is set. */
	const char *target;
	/** Shell command run as `/bin/sh -c exec_cmd`, whose stdin and stdout
	 * are the transport, or NULL. Its stderr is wsc's stderr. */
	const char *exec_cmd;
	/** Bearer token sent as "authorization: Bearer TOKEN" on every call,
	 * or NULL. Printable ASCII only. */
	const char *token;
	/** Session id sent as "wsbridge-session: ID" on every call, or NULL:
	 * agentd releases the handles opened under it once no call or stream
	 * of it has run for its --session-grace (docs/protocol.md "Sessions").
	 * 1 to 64 ASCII letters, digits, '-' and '_' (wsb_session_id_valid). */
	const char *session;
	/** Deadline of wsc_unary() calls, milliseconds; 0 = none. */
	uint32_t timeout_ms;
	/** While a stream's wait, or a unary call without a deadline, has
	 * had no answer for this many milliseconds, ask agentd's Health
	 * service on a call of its own; when that has no answer either (a
	 * frozen agentd, a dead link), the call or stream fails (UNAVAILABLE
	 * or DEADLINE_EXCEEDED) instead of waiting for good (client.c "Stuck
	 * calls"). 0 = never; less than WSC_HEALTH_MIN_MS counts as that.
	 * Not gRPC's keepalive pings: their acks are read only while some
	 * thread polls, and a caller busy with local I/O (a pager that does
	 * not read wsctl's stdout) would have the connection cut. */
	uint32_t health_ms;
	/** Largest message accepted from the server, bytes; 0 = 64 MiB. */
	size_t max_recv_bytes;
	/** Wait for the channel to connect instead of failing UNAVAILABLE at
	 * once when the server is not reachable (gRPC's wait-for-ready). */
	bool wait_for_ready;
	/** Connect the socket here, once, and hand gRPC the connected fd
	 * (grpc_channel_create_from_fd) for "unix:/path", "unix-abstract:name"
	 * and numeric "IPv4:port" or "[IPv6]:port" targets: no resolver, load
	 * balancer or subchannel, which is most of a one-shot client's
	 * connection set-up (~0.5 ms of ~0.8 ms here). Such a channel does not
	 * reconnect by itself (see wsc_reconnect()). Other targets, and a
	 * connect(2) that fails, use the ordinary channel, whose errors
	 * (UNAVAILABLE with gRPC's reason) are what callers see. */
	bool direct;
	/** Keep the connection polled by a thread of wsc's own while no call
	 * waits, and let streams opened with WSC_STREAM_NO_POLL wait without
	 * polling (client.c "Polling"): for a caller with one long-lived
	 * stream beside many short calls (wsfs), whose calls then each poll
	 * for themselves. Needs gRPC's epoll1 engine (the default on Linux),
	 * in which any polling thread reads every connection. */
	bool idle_poller;
	/** Make wsc_unary() calls of "/wsbridge.v1.Workspace/" methods as
	 * messages of a stream of the calling thread's own (Workspace/Ops,
	 * client.c "Op streams"), which saves a call's set-up and tear-down;
	 * with an agentd that has no Ops, and for other methods, calls are
	 * made one by one. Errors, deadlines and replies are as they would
	 * be. For a caller with a few long-lived threads (wsfs). */
	bool op_streams;
};

/** wsc_stream_open_ex() flag: the stream's waits do not poll (with
 * wsc_options.idle_poller; ignored without it). */
#define WSC_STREAM_NO_POLL 1u

/** Outcome of a call. */
struct wsc_status {
	int code;       /**< gRPC status code (enum wsb_status), 0 = OK */
	int err;        /**< positive errno; 0 when code is OK */
	bool has_errno; /**< err came from agentd's "wsbridge-errno" trailer */
	char msg[512];  /**< status message, NUL-terminated, maybe truncated */
};

/**
 * Connect (lazily, as gRPC does: nothing is sent before the first call) to
 * the server named in @p o. For exec_cmd the command is started here, in its
 * own process group, with default signal dispositions and an empty signal
 * mask; it is reaped by wsc_reconnect()/wsc_free(). Calls grpc_init(). With
 * idle_poller, starts the idle poller's thread (joined by wsc_free()).
 *
 * @param o       settings; borrowed for the duration of the call
 * @param ret     on success, the new client, freed with wsc_free()
 * @return 0, -EINVAL (no target, bad token or session), -ENOMEM, or the errno of
 *         socketpair(2)/posix_spawn(3)/pthread_create(3).
 * Thread safety: any thread.
 */
int wsc_connect(const struct wsc_options *o, struct wsc **ret);

/**
 * Replace the channel with a new one to the same target; for exec_cmd, run
 * the command again. Calls already running finish on the old channel, which
 * is closed (and its command reaped, waiting at most ~2 s before SIGTERM and
 * SIGKILL) when the last of them ends. Use after a transport failure of an fd
 * channel, which cannot reconnect by itself (grpc-c-core.md §5); a TCP or unix
 * channel reconnects on its own.
 *
 * @return 0, or -errno as wsc_connect(); the old channel stays on failure.
 * Thread safety: any thread; concurrent reconnects are serialised.
 */
int wsc_reconnect(struct wsc *c);

/**
 * The process id of the exec_cmd child behind the current channel (the
 * leader of its own process group), or 0 without exec_cmd. For a caller
 * that must stop it without wsc_free(), such as a program that exits on a
 * signal (kill(-pid, SIGTERM)); after a wsc_reconnect() it names another
 * process. Thread safety: any thread.
 */
pid_t wsc_transport_pid(struct wsc *c);

/**
 * Close the channel, reap an exec_cmd child (see wsc_reconnect) and free
 * @p c. No call or stream may be running. NULL is a no-op. Calls
 * grpc_shutdown(). Returns NULL.
 */
struct wsc *wsc_free(struct wsc *c);

/**
 * One unary call with the default deadline (wsc_options.timeout_ms).
 * Same as wsc_unary_ex(c, method, req, reply_desc, ret_reply, -1, st).
 */
int wsc_unary(struct wsc *c, const char *method, const ProtobufCMessage *req,
	      const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **ret_reply,
	      struct wsc_status *st);

/**
 * One unary call: send @p req to @p method, wait for the reply.
 *
 * @param method     "/package.Service/Method", case-sensitive; copied
 * @param req        request; borrowed, packed before the call is started
 * @param reply_desc type of the reply message
 * @param ret_reply  on success, the decoded reply, owned by the caller
 *                   (protobuf_c_message_free_unpacked(msg, NULL)); may be
 *                   NULL to drop the reply
 * @param timeout_ms deadline in milliseconds from now; 0 = none, < 0 = the
 *                   client's default. A longer one than the default also
 *                   ends once the call has waited the default while no call
 *                   had an answer for as long (client.c "Stalled links"):
 *                   it suits calls that share a slow link, not one that
 *                   may run long on the server alone (give it 0).
 * @param st         filled with the outcome, or NULL
 * @return 0, or -err of the status (-ENOENT for NOT_FOUND from agentd, ...),
 *         -EBADMSG for a reply that does not decode, -ENOMEM, or
 *         -ETIMEDOUT (status DEADLINE_EXCEEDED) when the call has not ended
 *         1 s after its deadline: a connection whose peer stopped reading
 *         during a large message, which gRPC's deadline cannot end
 *         (client.c "Stuck calls"), or when the link stalled; the call is
 *         cancelled and left to end in the background. The wait is
 *         unbounded with no deadline.
 * Thread safety: any thread, concurrently with other calls.
 */
int wsc_unary_ex(struct wsc *c, const char *method, const ProtobufCMessage *req,
		 const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **ret_reply,
		 int64_t timeout_ms, struct wsc_status *st);

/**
 * From now on (the first call counts), a call given a deadline longer than
 * the client's default (wsc_unary_ex()) waits the default from now at
 * most, those already waiting included; the wait ends as the deadline's does (-ETIMEDOUT). For
 * a client about to go: agentd frees what its session holds anyway.
 * Thread safety: any thread; the waits notice it within the default.
 */
void wsc_cut_long(struct wsc *c);

/**
 * Start a streaming call.
 *
 * Server streaming: pass the one request as @p req; it is sent and the send
 * side is half-closed. Then call wsc_stream_recv() until it returns <= 0.
 *
 * Client streaming (and bidirectional): pass @p req NULL, send messages with
 * wsc_stream_send(), then call wsc_stream_finish() (half-close, read the one
 * reply, wait for the status).
 *
 * @param method     "/package.Service/Method"; copied
 * @param req        the request of a server-streaming call (borrowed), or NULL
 * @param timeout_ms deadline of the whole call in milliseconds; 0 = none,
 *                   < 0 = the client's default
 * @param ret        on success, the stream; free it with wsc_stream_free()
 * @param st         filled on failure, or NULL
 * @return 0 or -errno (as wsc_unary_ex; -ENOTCONN etc. when the server cannot
 *         be reached).
 * Thread safety: any thread.
 */
int wsc_stream_open(struct wsc *c, const char *method, const ProtobufCMessage *req,
		    int64_t timeout_ms, struct wsc_stream **ret, struct wsc_status *st);

/**
 * wsc_stream_open() with @p flags: 0 or WSC_STREAM_NO_POLL (a thread that
 * waits long on the stream, beside other threads' calls, should not be the
 * one that polls for them; see wsc_options.idle_poller).
 */
int wsc_stream_open_ex(struct wsc *c, const char *method, const ProtobufCMessage *req,
		       int64_t timeout_ms, unsigned flags, struct wsc_stream **ret,
		       struct wsc_status *st);

/**
 * Receive the next message of type @p desc.
 *
 * @param ret_msg on 1, the message, owned by the caller
 *                (protobuf_c_message_free_unpacked(msg, NULL))
 * @param st      filled when the stream ended or failed, or NULL
 * @return 1 with a message; 0 when the server ended the stream with OK;
 *         -err when it ended with another status (the status is kept for
 *         wsc_stream_finish()); -ECANCELED after wsc_stream_cancel();
 *         -EBADMSG when a message does not decode (cancel and free then).
 * Thread safety: the stream's receiving thread.
 */
int wsc_stream_recv(struct wsc_stream *s, const ProtobufCMessageDescriptor *desc,
		    ProtobufCMessage **ret_msg, struct wsc_status *st);

/**
 * Send one message (borrowed; packed before return) and wait until gRPC has
 * taken it, which applies HTTP/2 flow control: this blocks while the server
 * is not reading. Only one send at a time.
 *
 * @return 0; when the call has already ended (the server failed it, the
 *         deadline passed), -err of its final status, with @p st filled
 *         (-EPIPE if the server ended it with OK); -ENOMEM. To get that
 *         status, a stream nobody has received from yet is received from
 *         here (gRPC delivers the status only then; the server's messages
 *         are dropped); with a receiving thread, that thread's receive
 *         brings it.
 * Thread safety: the stream's sending thread.
 */
int wsc_stream_send(struct wsc_stream *s, const ProtobufCMessage *msg, struct wsc_status *st);

/**
 * Half-close: tell the server no more messages follow. Idempotent.
 * @return 0 or -err as wsc_stream_send().
 */
int wsc_stream_close_send(struct wsc_stream *s, struct wsc_status *st);

/**
 * End the call from the client's side: half-close if not done, receive the
 * one reply of type @p reply_desc if that is not NULL, then wait for the
 * status. For a server stream whose messages were not all received this
 * waits for the server to finish; call wsc_stream_cancel() first to abandon.
 *
 * @param ret_reply on success, the reply (owned by the caller), or NULL to
 *                  drop it
 * @return 0 or -err of the final status; -EPROTO when the status is OK but
 *         no reply came; -EBADMSG when it does not decode.
 * Thread safety: the stream's thread.
 */
int wsc_stream_finish(struct wsc_stream *s, const ProtobufCMessageDescriptor *reply_desc,
		      ProtobufCMessage **ret_reply, struct wsc_status *st);

/**
 * Cancel the call: the server sees the cancellation (agentd then kills an
 * exec'd command's process group), and blocked or later receives and sends
 * fail with -ECANCELED. Harmless after the call ended. Async-signal-unsafe.
 * Thread safety: any thread, while @p s has not been freed.
 */
void wsc_stream_cancel(struct wsc_stream *s);

/**
 * Free the stream; a call that has not ended is cancelled first. NULL is a
 * no-op. Returns NULL.
 * Thread safety: the stream's thread, with no send or receive running.
 */
struct wsc_stream *wsc_stream_free(struct wsc_stream *s);

#endif /* WSC_CLIENT_H */
