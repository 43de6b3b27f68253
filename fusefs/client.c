/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The host side's gRPC client adapter (client.h): the only file of wsctl and
 * wsfs that calls grpc_*.
 *
 * Every call runs synchronously on the caller's thread: it takes a
 * completion queue of the pluck kind from a pool (one call per queue at a
 * time), starts batches and plucks their tags. There is no client-side
 * completion-queue thread. A stream keeps its queue until it is freed; its
 * RECV_STATUS_ON_CLIENT batch is started when the call is created and plucked
 * exactly once, under the stream's status_lock, by whichever of recv, send,
 * finish or free first needs the status.
 *
 * The channel sits in a refcounted struct wsc_chan so that wsc_reconnect()
 * can swap it while calls run; the last call on an old channel destroys it,
 * and its exec_cmd child is reaped on a thread of its own (reap_child_later),
 * which wsc_free() waits for.
 *
 * Polling (wsc_options.idle_poller). gRPC reads a connection only while
 * some thread polls (grpc_completion_queue_pluck on a polling queue), and
 * with the epoll1 engine one thread at a time polls every connection of the
 * process, handing the role to another waiting thread each time it is done
 * (ev_epoll1_linux.cc end_worker). A thread that waits long in a stream's
 * queue (wsfs's watch) is then the poller most of the time: each reply to
 * another thread's call wakes it, and it wakes the caller, two switches more
 * per call. With idle_poller, such a stream waits in a non-polling queue
 * (wsc_stream_open_ex(WSC_STREAM_NO_POLL)); a thread waiting for its own
 * call polls for it and for everything else, and while no call has waited
 * for WSC_IDLE_NS a thread of wsc's own polls (idle_run), so that a stream's
 * messages still arrive while the caller is idle; the first call to wait
 * after that wakes it out of its queue (grpc_completion_queue_shutdown).
 *
 * Stuck calls. gRPC enforces a call's deadline by cancelling it, but a
 * batch whose message the transport has begun to write completes only when
 * that write does (chttp2 hands the bytes to the endpoint and waits for
 * it): with a peer that stopped reading (agentd SIGSTOPped, a frozen pod, a
 * stalled `kubectl exec`) and a message larger than the socket buffers, the
 * call never ends, and neither does a caller that waits for it; keepalive
 * pings cannot be written either. So a unary call keeps its state on the
 * heap (struct unary), and its caller waits until the deadline plus
 * WSC_STUCK_GRACE_MS; then it cancels the call, leaves the state on
 * wsc.abandoned and fails with DEADLINE_EXCEEDED. gRPC writes into that
 * state when the batch ends at last (the peer reads again, or the
 * connection breaks); the next unary call frees what has ended (unary_reap).
 * A stream's waits, and a unary call without a deadline (WriteStdin, which
 * waits on the command), may last long with a healthy peer (flow control:
 * a command that does not read its stdin; one that prints nothing), so they
 * have no deadline; instead, with health_ms, after each health_ms of
 * waiting a Health check asks whether agentd still answers on the
 * connection (peer_answers(), stream_wait(), call_wait()). When it does
 * not, or WSC_STUCK_GRACE_MS after a stream whose send waits was
 * cancelled, the stream is left behind: cancelled, marked stuck (every
 * later wait on it returns at once with the status it was given, and no
 * batch is started on it) and, once freed, kept on g_stuck for good with
 * what gRPC may still write into (its receive buffer, the status); the
 * unary call is abandoned as above.
 *
 * Stalled links. A call may be given a longer deadline than the client's
 * default (wsfs's writes behind others in flight, which share the link);
 * with a peer that stopped answering, each would wait out its own, and a
 * caller waiting for all of them (a close(2) after a stream of writes) for
 * the longest. So such a call also ends, as DEADLINE_EXCEEDED, once it has
 * waited the default timeout and no call has had its answer (a reply, or a
 * status of the server's own) for as long (wsc.heard_ns, call_wait()).
 * Stream messages do not count: one may be taken long after it came (wsfs's
 * watch thread blocks in the kernel's page invalidation behind the very
 * writes that wait). A slow link that still answers keeps such calls
 * going; a stalled one ends every call within about the default timeout.
 * Once wsc_cut_long() was called (the client is about to go), a call with
 * a longer deadline waits the default timeout from then at most.
 *
 * Op streams (wsc_options.op_streams). A unary Workspace call costs gRPC a
 * call's set-up and tear-down: HEADERS both ways, trailers, a request slot
 * on the server (a 64-byte ping-pong took 67-74 us as unary calls and 32 us
 * as messages of one stream between two processes here). So each thread
 * keeps one Workspace/Ops stream (struct opstream, in a pthread key) and
 * sends its calls as OpRequest messages on it, one at a time: the thread
 * waits for each OpReply as it would for a unary call, on the stream's own
 * polling queue. A stream is made at a thread's first call, and made anew
 * after it failed, after wsc_reconnect(), or when it ended while idle (an
 * agentd restart: checked once it has been idle WSC_OP_IDLE_CHECK_NS). The
 * deadline is the caller's, enforced here: the stream is cancelled, and
 * left behind when stuck as a unary call would be (wsc.ops_dead, freed by
 * op_reap). An agentd without Ops ends the first stream UNIMPLEMENTED, and
 * every call is then unary (wsc.ops_unsupported). A call whose request could
 * not be sent is made unary; one whose stream broke after is reported as
 * the stream's status (UNAVAILABLE), as a unary call's would be. Streams
 * are on g_ops (under g_ops_lock) so that wsc_free() and the exit of their
 * threads each free them once.
 *
 * Locks: wsc.lock guards wsc.chan, every wsc_chan.refs and the queue pool;
 * wsc.reconnect_lock serialises reconnects; wsc.idle_lock the idle poller's
 * state; wsc_stream.status_lock guards the stream's final status. No lock is
 * held while blocked on gRPC, except status_lock while plucking the status
 * tag.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "client.h"
#include "health.pb-c.h"
#include "wsb.h"
#include "wsb_grpc.h"

extern char **environ;

/** How long no call must have waited before the idle poller polls, ns. */
#define WSC_IDLE_NS (5 * 1000000LL)
/** Longest the idle poller stays in one queue, ms (a safety net: a waiter
 * that missed idle_polling is served by its own poll once it ends). */
#define WSC_IDLE_POLL_MS 1000
/** How long a unary call's batch may outlive its deadline before the caller
 * stops waiting for it (wsc_unary_ex, "Stuck calls"), ms. */
#define WSC_STUCK_GRACE_MS 1000
/** How long a wait that checks on agentd's health (or on a stream left
 * stuck, or a cut) runs before it looks again, ms (slice_end()). */
#define WSC_STREAM_SLICE_MS 100
/** Most calls left behind that way at once; past it callers wait on. */
#define WSC_ABANDON_MAX 256

/** How long a thread's op stream may sit idle before a call checks that it
 * has not ended meanwhile, ns (see "Op streams"). */
#define WSC_OP_IDLE_CHECK_NS (50 * 1000000LL)

/* One channel; replaced as a whole by wsc_reconnect(). */
struct wsc_chan {
	grpc_channel *ch;
	pid_t pid;     /* exec_cmd child (a process group leader), or 0 */
	unsigned refs; /* protected by wsc.lock */
};

/* A unary call's state: gRPC writes into it until the batch ends. */
struct unary {
	struct unary *next; /* wsc.abandoned */
	struct wsc_chan *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_byte_buffer *send_bb, *recv_bb;
	grpc_metadata_array initial_md, trailing_md;
	grpc_status_code code;
	grpc_slice details;
	char tag;
};

/* A thread's Workspace/Ops stream (see "Op streams"). */
struct opstream {
	struct opstream *next; /* g_ops, or wsc.ops_dead */
	struct wsc *c;
	unsigned gen;              /* wsc.chan_gen of the channel it is on */
	grpc_completion_queue *cq; /* polling, of its own */
	grpc_call *call;
	bool started;        /* initial metadata sent and asked for */
	bool op_due;         /* on ops_dead: its op batch has not completed */
	bool used;           /* an op got its reply */
	bool status_done;    /* tag_status plucked */
	int64_t idle_ns;     /* CLOCK_MONOTONIC: its last op ended */
	grpc_byte_buffer *send_bb; /* the op batch's request, until it completed */
	grpc_byte_buffer *recv_bb;
	grpc_metadata_array initial_md, trailing_md;
	grpc_status_code code;
	grpc_slice details;
	char tag_op, tag_status;
};

struct wsc {
	pthread_mutex_t lock;
	pthread_mutex_t reconnect_lock;
	struct wsc_chan *chan;      /* protected by lock */
	unsigned chan_gen;          /* bumped by wsc_reconnect(); protected by lock */
	grpc_completion_queue **cq; /* idle queues; protected by lock */
	size_t n_cq, cap_cq;        /* protected by lock */
	struct unary *abandoned;    /* unary calls left behind; protected by lock */
	atomic_uint n_abandoned;    /* their number; read without lock as a hint */
	unsigned n_reapers;         /* reaper threads running; protected by lock */
	pthread_cond_t reap_cond;   /* n_reapers fell to 0 */

	char *target;
	char *exec_cmd;
	bool direct;
	uint32_t timeout_ms;
	uint32_t health_ms; /* 0 or at least WSC_HEALTH_MIN_MS */
	size_t max_recv;
	uint32_t md_flags; /* flags of SEND_INITIAL_METADATA */
	grpc_metadata md[2]; /* authorization, wsbridge-session: either may be absent */
	size_t n_md;

	atomic_int_fast64_t heard_ns; /* CLOCK_MONOTONIC: a call last had its answer */
	atomic_int_fast64_t cut_ns;   /* wsc_cut_long()'s CLOCK_MONOTONIC; 0: none */

	bool ops;                     /* op_streams */
	atomic_bool ops_unsupported;  /* agentd has no Ops: unary calls only */
	struct opstream *ops_dead;    /* stuck op streams; protected by lock */
	unsigned n_ops_dead;          /* their number; protected by lock */

	/* The idle poller (see "Polling" above); only with idle_poller. */
	bool idle;
	atomic_uint waiting;          /* threads in cq_wait() on a polling queue */
	atomic_int_fast64_t quiet_ns; /* CLOCK_MONOTONIC when waiting last fell to 0 */
	atomic_bool idle_polling;     /* idle_cq is set; read without idle_lock */
	pthread_t idle_thread;
	pthread_mutex_t idle_lock;
	pthread_cond_t idle_cond;          /* CLOCK_MONOTONIC */
	grpc_completion_queue *idle_cq;    /* the queue it polls in, or NULL; under idle_lock */
	bool idle_stop;                    /* under idle_lock */
};

struct wsc_stream {
	struct wsc *c;
	struct wsc_chan *chan;
	grpc_completion_queue *cq;
	bool polls; /* cq is a polling queue (not WSC_STREAM_NO_POLL) */
	grpc_call *call;
	atomic_bool cancelled;

	/* Sending side. */
	char tag_send;
	bool send_closed;

	/* Receiving side. */
	char tag_recv;
	grpc_byte_buffer *recv_bb; /* RECV_MESSAGE's target: gRPC may write it late (stuck) */
	atomic_bool recv_taken; /* a receive was started (wsc_stream_recv or a failed send) */
	bool got_initial_md;
	bool recv_ended;
	grpc_metadata_array initial_md;

	/* Final status. */
	char tag_status;
	pthread_mutex_t status_lock;
	bool status_done; /* protected by status_lock */
	/* Left behind ("Stuck calls"): nothing is waited for from then on,
	 * and the final status is stuck_st. Set by the waiting thread that
	 * won sticking (stream_stick()). */
	atomic_bool sticking;
	atomic_bool stuck;
	struct wsc_status stuck_st; /* the status to give then; written before stuck */
	grpc_byte_buffer *stuck_bb; /* the message of the send that stuck, for gRPC */
	struct wsc_stream *stuck_next; /* g_stuck, once freed */
	grpc_metadata_array trailing_md;
	grpc_status_code status;
	grpc_slice details;
	struct wsc_status final; /* valid once status_done */
};

/* Streams left behind stuck, once their owner freed them: gRPC may still
 * complete their batches into them, so they are never freed (a process
 * has a few at most: wsctl exits soon after). Reachable from here, so
 * LeakSanitizer does not count them. */
static pthread_mutex_t g_stuck_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wsc_stream *g_stuck;

/* Op streams of every thread (see "Op streams"). */
static pthread_mutex_t g_ops_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ops_cond = PTHREAD_COND_INITIALIZER; /* g_ops_closing fell */
static struct opstream *g_ops; /* every thread's stream; under g_ops_lock */
static unsigned g_ops_closing; /* exiting threads closing theirs; under g_ops_lock */
static pthread_key_t g_ops_key;
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;
static bool g_ops_key_ok;
/* Moved by wsc_free(): a thread's stream from before may be freed. */
static atomic_uint g_ops_epoch;
static __thread unsigned t_ops_epoch; /* g_ops_epoch when this thread's was made */

static struct opstream *op_unlist(struct opstream *s, const struct wsc *c, bool closing);
static void op_close(struct opstream *s, bool op_pending);
static void op_reap(struct wsc *c);

/* ---- status ---- */

static void status_clear(struct wsc_status *st)
{
	st->code = WSB_OK;
	st->err = 0;
	st->has_errno = false;
	st->msg[0] = '\0';
}

/* A failure on this side of the wire; returns -err. */
__attribute__((format(printf, 3, 4)))
static int status_local(struct wsc_status *st, int err, const char *fmt, ...)
{
	va_list ap;

	st->code = wsb_status_from_errno(err);
	if (st->code == WSB_OK)
		st->code = WSB_UNKNOWN;
	st->err = err;
	st->has_errno = false;
	va_start(ap, fmt);
	vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
	va_end(ap);
	return -err;
}

/*
 * Fill @st with status @code, message @msg (@msg_len bytes, cut to fit) and
 * the errno named @ename (@ename_len bytes; NULL: none), as agentd sends it
 * in its "wsbridge-errno" trailer or OpReply.errno_name. 0 for OK, else
 * -err.
 */
static int status_set(struct wsc_status *st, int code, const void *msg, size_t msg_len,
		      const void *ename, size_t ename_len, bool cancelled)
{
	status_clear(st);
	st->code = code;
	if (msg_len >= sizeof(st->msg))
		msg_len = sizeof(st->msg) - 1;
	if (msg_len)
		memcpy(st->msg, msg, msg_len);
	st->msg[msg_len] = '\0';
	if (code == GRPC_STATUS_OK)
		return 0;
	if (ename && ename_len > 0 && ename_len < 32) {
		char name[32];
		int err;

		memcpy(name, ename, ename_len);
		name[ename_len] = '\0';
		err = wsb_errno_from_name(name);
		if (err > 0) {
			st->err = err;
			st->has_errno = true;
		}
	}
	if (!st->has_errno) {
		if (cancelled && code == GRPC_STATUS_CANCELLED)
			st->err = ECANCELED;
		else
			st->err = wsb_errno_from_status((int)code);
		if (st->err <= 0)
			st->err = EIO;
	}
	return -st->err;
}

/*
 * Fill @st from a received status (status_set()). Reads (does not free)
 * @details and @trailing. Returns 0 for OK, else -st->err.
 */
static int status_from_call(struct wsc_status *st, grpc_status_code code, const grpc_slice *details,
			    const grpc_metadata_array *trailing, bool cancelled)
{
	const void *ename = NULL;
	size_t ename_len = 0;

	for (size_t i = 0; code != GRPC_STATUS_OK && trailing && i < trailing->count; i++) {
		const grpc_metadata *m = &trailing->metadata[i];

		if (grpc_slice_str_cmp(m->key, WSB_ERRNO_TRAILER) == 0) {
			ename = GRPC_SLICE_START_PTR(m->value);
			ename_len = GRPC_SLICE_LENGTH(m->value);
			break;
		}
	}
	return status_set(st, (int)code, GRPC_SLICE_START_PTR(*details), GRPC_SLICE_LENGTH(*details),
			  ename, ename_len, cancelled);
}

/* ---- messages ---- */

/* Pack @msg into a new byte buffer; NULL on ENOMEM. */
static grpc_byte_buffer *bb_pack(const ProtobufCMessage *msg)
{
	grpc_byte_buffer *bb;
	grpc_slice slice;
	uint8_t *buf;
	size_t len;

	if (wsb_pack(msg, &buf, &len) < 0)
		return NULL;
	if (len == 0) {
		free(buf);
		slice = grpc_empty_slice();
	} else {
		slice = grpc_slice_new(buf, len, free);
	}
	bb = grpc_raw_byte_buffer_create(&slice, 1);
	grpc_slice_unref(slice);
	return bb;
}

/* Decode @bb as @desc, in place (wsb_grpc.h); 0, -EBADMSG or -ENOMEM.
 * Does not free @bb. */
static int bb_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
		     ProtobufCMessage **ret)
{
	return wsb_grpc_unpack(bb, 0, SIZE_MAX, desc, ret);
}

/*
 * A unary call's reply @m of type @desc, decoded with result @r (0 or
 * -errno): to *@ret_reply (the caller's), or freed when that is NULL; on
 * failure @st says so. Returns @r.
 */
static int reply_give(struct wsc_status *st, const char *method,
		      const ProtobufCMessageDescriptor *desc, int r, ProtobufCMessage *m,
		      ProtobufCMessage **ret_reply)
{
	if (r == -ENOMEM)
		status_local(st, ENOMEM, "%s: out of memory decoding the reply", method);
	else if (r < 0)
		status_local(st, -r, "%s: the reply does not decode as %s", method, desc->name);
	else if (ret_reply)
		*ret_reply = m;
	else
		protobuf_c_message_free_unpacked(m, NULL);
	return r;
}

/* ---- exec_cmd child ---- */

/*
 * Run `/bin/sh -c cmd` with one end of a socketpair as its stdin and stdout.
 * Sets *ret_fd to the other end (O_NONBLOCK, O_CLOEXEC) and *ret_pid.
 */
static int spawn_exec(const char *cmd, int *ret_fd, pid_t *ret_pid)
{
	static const int sigs[] = { SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1,
				    SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	char *argv[] = { (char *)"sh", (char *)"-c", (char *)cmd, NULL };
	sigset_t none, dfl;
	int sv[2], r;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	/* dup2(fd, fd) would keep O_CLOEXEC: keep the child's end above 2. */
	if (sv[1] <= STDERR_FILENO) {
		int fd = fcntl(sv[1], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);

		r = -errno;
		close(sv[1]);
		if (fd < 0) {
			close(sv[0]);
			return r;
		}
		sv[1] = fd;
	}

	sigemptyset(&none);
	sigemptyset(&dfl);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&dfl, sigs[i]);
	r = posix_spawn_file_actions_init(&fa);
	if (r) {
		close(sv[0]);
		close(sv[1]);
		return -r;
	}
	r = posix_spawnattr_init(&attr);
	if (r) {
		posix_spawn_file_actions_destroy(&fa);
		close(sv[0]);
		close(sv[1]);
		return -r;
	}
	/*
	 * Own process group: a Ctrl-C on the terminal reaches the client, which
	 * cancels its calls over the transport, instead of killing the
	 * transport first.
	 */
	r = posix_spawn_file_actions_adddup2(&fa, sv[1], STDIN_FILENO);
	if (!r)
		r = posix_spawn_file_actions_adddup2(&fa, sv[1], STDOUT_FILENO);
	if (!r)
		r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
						    POSIX_SPAWN_SETSIGDEF);
	if (!r)
		r = posix_spawnattr_setpgroup(&attr, 0);
	if (!r)
		r = posix_spawnattr_setsigmask(&attr, &none);
	if (!r)
		r = posix_spawnattr_setsigdefault(&attr, &dfl);
	if (!r)
		r = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	close(sv[1]);
	if (r) {
		close(sv[0]);
		return -r;
	}
	/* gRPC needs a non-blocking fd (grpc-c-core.md §5). */
	if (fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK) < 0) {
		r = -errno;
		close(sv[0]);
		(void)kill(-pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return r;
	}
	*ret_fd = sv[0];
	*ret_pid = pid;
	return 0;
}

/* Wait for @pid up to @ms milliseconds; true once it is reaped (or gone). */
static bool reap_wait(pid_t pid, unsigned ms)
{
	for (unsigned waited = 0;; waited += 10) {
		pid_t r = waitpid(pid, NULL, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return true;
		if (waited >= ms)
			return false;
		(void)nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	}
}

/* Stop the exec_cmd child @pid (its process group: SIGTERM, 1 s, SIGKILL)
 * and reap it. Blocks for up to 1 s. */
static void reap_child_now(pid_t pid)
{
	(void)kill(-pid, SIGTERM);
	if (reap_wait(pid, 1000))
		return;
	(void)kill(-pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Reap the exec_cmd child after its transport was closed: it has 2 s to
 * exit by itself (kubectl exec ends its stream), then SIGTERM, 1 s more,
 * then SIGKILL. Blocks for up to those 3 s. */
static void reap_child(pid_t pid)
{
	if (reap_wait(pid, 2000))
		return;
	reap_child_now(pid);
}

struct reaper {
	struct wsc *c;
	pid_t pid;
};

static void *reaper_main(void *arg)
{
	struct reaper *rp = arg;
	struct wsc *c = rp->c;

	reap_child(rp->pid);
	free(rp);
	pthread_mutex_lock(&c->lock);
	if (--c->n_reapers == 0)
		pthread_cond_broadcast(&c->reap_cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Wait until every reaper thread has ended (each within 3 s). */
static void reapers_wait(struct wsc *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->n_reapers > 0)
		pthread_cond_wait(&c->reap_cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

/* reap_child() without blocking the caller: at once if the child has
 * exited, else on a detached thread of its own, which wsc_free() waits
 * for. A FUSE request or the monitor dropping an old channel must not wait
 * for its command (a `kubectl exec` slow to end held the mount at ENOTCONN
 * for those 3 s more). */
static void reap_child_later(struct wsc *c, pid_t pid)
{
	struct reaper *rp;
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	int r;

	if (reap_wait(pid, 0))
		return;
	rp = malloc(sizeof(*rp));
	if (!rp || pthread_attr_init(&a) != 0) {
		free(rp);
		reap_child(pid);
		return;
	}
	rp->c = c;
	rp->pid = pid;
	(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&c->lock);
	c->n_reapers++;
	pthread_mutex_unlock(&c->lock);
	/* Signals stay with the threads that handle them (libfuse's). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t, &a, reaper_main, rp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (r != 0) {
		pthread_mutex_lock(&c->lock);
		c->n_reapers--;
		pthread_mutex_unlock(&c->lock);
		free(rp);
		reap_child(pid);
	}
}

/* ---- channel ---- */

/*
 * Parse a "unix:/path", "unix:///path", "unix-abstract:name", "A.B.C.D:port"
 * or "[v6]:port" gRPC target (gRPC's doc/naming.md) into @p sa. Returns its
 * length, or 0 when the target is of another kind (a host name, a scheme).
 */
static socklen_t target_sockaddr(const char *target, struct sockaddr_storage *sa)
{
	struct sockaddr_un *un = (struct sockaddr_un *)sa;
	struct sockaddr_in *in4 = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *h = target;
	size_t hl;
	unsigned long port;
	char *end;

	memset(sa, 0, sizeof(*sa));
	if (strncmp(target, "unix:", 5) == 0 || strncmp(target, "unix-abstract:", 14) == 0) {
		size_t abstract = target[4] == '-'; /* a leading NUL in sun_path */
		const char *path = target + (abstract ? 14 : 5);
		size_t n;

		if (!abstract && strncmp(path, "//", 2) == 0)
			path += 2;
		n = strlen(path);
		if (n == 0 || abstract + n >= sizeof(un->sun_path))
			return 0;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path + abstract, path, n);
		/* A path's length counts its NUL; an abstract name's does not. */
		return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + abstract + n + !abstract);
	}
	if (*h == '[') {
		h++;
		colon = strstr(h, "]:");
		hl = colon ? (size_t)(colon - h) : 0;
		if (colon)
			colon++;
	} else {
		colon = strrchr(h, ':');
		hl = colon ? (size_t)(colon - h) : 0;
	}
	if (!colon || hl == 0 || hl >= sizeof(host))
		return 0;
	memcpy(host, h, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port == 0 || port > 65535)
		return 0;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		return sizeof(*in4);
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		return sizeof(*in6);
	}
	return 0;
}

/*
 * connect(2) to @p target (see target_sockaddr), waiting at most
 * @p timeout_ms (0: 20 s) for a TCP handshake. Returns a connected,
 * non-blocking, close-on-exec socket (TCP_NODELAY set, as gRPC sets it),
 * or -1 on any failure: the caller then uses an ordinary channel, which
 * reports the reason.
 */
static int direct_connect(const char *target, uint32_t timeout_ms)
{
	struct sockaddr_storage sa;
	socklen_t len = target_sockaddr(target, &sa), errlen = sizeof(int);
	int fd, one = 1, err = 0, wait_ms;
	struct pollfd pfd;

	if (len == 0)
		return -1;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (sa.ss_family != AF_UNIX)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, len) == 0)
		return fd;
	if (errno != EINPROGRESS)
		goto fail;
	wait_ms = timeout_ms == 0 ? 20000 : timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms;
	pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&pfd, 1, wait_ms) != 1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 || err)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static int chan_new(struct wsc *c, struct wsc_chan **ret)
{
	/*
	 * Reconnect backoff: gRPC waits up to 120 s between connection
	 * attempts by default (doc/connection-backoff.md), so a mount would
	 * stay broken long after agentd is back. Start at 250 ms and retry at
	 * least every 500 ms (+-20% jitter) instead; MIN_RECONNECT_BACKOFF is
	 * gRPC's minimum connect timeout (5 s).
	 */
	grpc_arg arg[] = {
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		  .value.integer = c->max_recv > INT_MAX ? INT_MAX : (int)c->max_recv },
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
		  .value.integer = 250 },
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
		  .value.integer = 500 },
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
		  .value.integer = 5000 },
	};
	grpc_channel_args args = { .num_args = sizeof(arg) / sizeof(arg[0]), .args = arg };
	grpc_channel_credentials *creds;
	struct wsc_chan *ch;
	int r;

	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->refs = 1;
	if (c->exec_cmd) {
		int fd = -1;

		r = spawn_exec(c->exec_cmd, &fd, &ch->pid);
		if (r < 0) {
			free(ch);
			return r;
		}
		/* Only insecure credentials work here (grpc-c-core.md §5);
		 * the channel owns fd from now on. */
		creds = grpc_insecure_credentials_create();
		ch->ch = grpc_channel_create_from_fd("wsbridge-exec", fd, creds, &args);
	} else {
		int fd = c->direct ? direct_connect(c->target, c->timeout_ms) : -1;

		creds = grpc_insecure_credentials_create();
		if (fd >= 0)
			ch->ch = grpc_channel_create_from_fd(c->target, fd, creds, &args);
		else
			ch->ch = grpc_channel_create(c->target, creds, &args);
	}
	grpc_channel_credentials_release(creds);
	if (!ch->ch) {
		if (ch->pid > 0)
			reap_child(ch->pid);
		free(ch);
		return -ENOMEM;
	}
	*ret = ch;
	return 0;
}

static struct wsc_chan *chan_get(struct wsc *c)
{
	struct wsc_chan *ch;

	pthread_mutex_lock(&c->lock);
	ch = c->chan;
	ch->refs++;
	pthread_mutex_unlock(&c->lock);
	return ch;
}

pid_t wsc_transport_pid(struct wsc *c)
{
	pid_t pid;

	pthread_mutex_lock(&c->lock);
	pid = c->chan ? c->chan->pid : 0;
	pthread_mutex_unlock(&c->lock);
	return pid;
}

/* Drop a reference to @ch; the last destroys it and reaps its command.
 * Returns whether that was the last. */
static bool chan_put(struct wsc *c, struct wsc_chan *ch)
{
	bool last;

	pthread_mutex_lock(&c->lock);
	last = --ch->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (!last)
		return false;
	grpc_channel_destroy(ch->ch);
	if (ch->pid > 0)
		reap_child_later(c, ch->pid);
	free(ch);
	return true;
}

/* ---- completion-queue pool ---- */

static grpc_completion_queue *cq_get(struct wsc *c)
{
	grpc_completion_queue *cq = NULL;

	pthread_mutex_lock(&c->lock);
	if (c->n_cq > 0)
		cq = c->cq[--c->n_cq];
	pthread_mutex_unlock(&c->lock);
	if (!cq)
		cq = grpc_completion_queue_create_for_pluck(NULL);
	return cq;
}

static void cq_destroy(grpc_completion_queue *cq)
{
	grpc_completion_queue_shutdown(cq);
	grpc_completion_queue_destroy(cq);
}

/* Give back a queue with no pending tag. */
static void cq_put(struct wsc *c, grpc_completion_queue *cq)
{
	pthread_mutex_lock(&c->lock);
	if (c->n_cq == c->cap_cq) {
		size_t cap = c->cap_cq ? 2 * c->cap_cq : 8;
		grpc_completion_queue **a = realloc(c->cq, cap * sizeof(*a));

		if (!a) {
			pthread_mutex_unlock(&c->lock);
			cq_destroy(cq);
			return;
		}
		c->cq = a;
		c->cap_cq = cap;
	}
	c->cq[c->n_cq++] = cq;
	pthread_mutex_unlock(&c->lock);
}

/* A non-polling queue of the pluck kind (grpc.h GRPC_CQ_NON_POLLING): its
 * waiter sleeps until a polling thread completes its tag. */
static grpc_completion_queue *cq_new_nonpolling(void)
{
	grpc_completion_queue_attributes a = {
		.version = 1,
		.cq_completion_type = GRPC_CQ_PLUCK,
		.cq_polling_type = GRPC_CQ_NON_POLLING,
	};

	return grpc_completion_queue_create(grpc_completion_queue_factory_lookup(&a), &a, NULL);
}

/* Take the idle poller out of its queue, if it polls (any thread). */
static void idle_kick(struct wsc *c)
{
	pthread_mutex_lock(&c->idle_lock);
	if (c->idle_cq) {
		/* Its pluck returns GRPC_QUEUE_SHUTDOWN; idle_run() destroys it. */
		grpc_completion_queue_shutdown(c->idle_cq);
		c->idle_cq = NULL;
		atomic_store(&c->idle_polling, false);
	}
	pthread_mutex_unlock(&c->idle_lock);
}

/*
 * The idle poller's thread: while some thread waits in cq_wait(), or one did
 * less than WSC_IDLE_NS ago, look again every WSC_IDLE_NS; then poll in a
 * fresh queue of its own until a waiter comes (idle_kick), at most
 * WSC_IDLE_POLL_MS at a time.
 */
static void *idle_run(void *arg)
{
	struct wsc *c = arg;
	char never; /* a tag no operation completes */

	pthread_mutex_lock(&c->idle_lock);
	while (!c->idle_stop) {
		int64_t now = wsb_mono_ns(), due = atomic_load(&c->quiet_ns) + WSC_IDLE_NS;
		grpc_completion_queue *cq;
		struct timespec ts;

		if (atomic_load(&c->waiting) > 0 || now < due) {
			if (due <= now)
				due = now + WSC_IDLE_NS;
			ts.tv_sec = (time_t)(due / 1000000000LL);
			ts.tv_nsec = (long)(due % 1000000000LL);
			(void)pthread_cond_timedwait(&c->idle_cond, &c->idle_lock, &ts);
			continue;
		}
		cq = grpc_completion_queue_create_for_pluck(NULL);
		if (!cq)
			break; /* callers' own waits still poll */
		c->idle_cq = cq;
		atomic_store(&c->idle_polling, true);
		pthread_mutex_unlock(&c->idle_lock);
		(void)grpc_completion_queue_pluck(
			cq, &never,
			gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
				     gpr_time_from_millis(WSC_IDLE_POLL_MS, GPR_TIMESPAN)),
			NULL);
		pthread_mutex_lock(&c->idle_lock);
		if (c->idle_cq == cq) {
			grpc_completion_queue_shutdown(cq);
			c->idle_cq = NULL;
			atomic_store(&c->idle_polling, false);
		}
		grpc_completion_queue_destroy(cq);
	}
	pthread_mutex_unlock(&c->idle_lock);
	return NULL;
}

/* Wait for @tag on @cq until @until (GPR_CLOCK_MONOTONIC); the event, whose
 * type is GRPC_QUEUE_TIMEOUT when @until passed first. @polls: @cq is a
 * polling queue, so this thread may poll for every call (see "Polling"). */
static grpc_event cq_wait_until(struct wsc *c, grpc_completion_queue *cq, void *tag, bool polls,
				gpr_timespec until)
{
	grpc_event ev;

	if (polls && c->idle) {
		atomic_fetch_add(&c->waiting, 1);
		if (atomic_load(&c->idle_polling))
			idle_kick(c);
	}
	ev = grpc_completion_queue_pluck(cq, tag, until, NULL);
	if (polls && c->idle && atomic_fetch_sub(&c->waiting, 1) == 1)
		atomic_store(&c->quiet_ns, wsb_mono_ns());
	return ev;
}

/* A call had its answer at @now_ns: the link moves ("Stalled links").
 * Never backwards (a thread preempted before its store). */
static void heard(struct wsc *c, int64_t now_ns)
{
	int_fast64_t old = atomic_load_explicit(&c->heard_ns, memory_order_relaxed);

	while (old < now_ns && !atomic_compare_exchange_weak_explicit(&c->heard_ns, &old, now_ns,
								       memory_order_relaxed,
								       memory_order_relaxed))
		;
}

static bool peer_answers(struct wsc *c);

/* This thread waits for a Health check (peer_answers()): call_wait() ends
 * it at wsc_cut_long(). */
static __thread bool health_wait;

/* The end of a wait's next slice: now + WSC_STREAM_SLICE_MS. */
static gpr_timespec slice_end(void)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis(WSC_STREAM_SLICE_MS, GPR_TIMESPAN));
}

/* For a wait that checks on agentd every health_ms: false when a Health
 * check was due (*@due_ns, CLOCK_MONOTONIC, passed) and had no answer
 * (peer_answers()); else true, with *@due_ns moved on if one was made. */
static bool health_ok(struct wsc *c, int64_t *due_ns)
{
	if (wsb_mono_ns() < *due_ns)
		return true;
	if (!peer_answers(c))
		return false;
	*due_ns = wsb_mono_ns() + (int64_t)c->health_ms * 1000000;
	return true;
}

/*
 * cq_wait_until() on a polling queue for a call begun at @start_ns
 * (CLOCK_MONOTONIC) with a deadline of @timeout_ms: when that is longer than
 * the client's default, the wait also ends once the call has waited the
 * default and no call had an answer for as long ("Stalled links"):
 * a GRPC_QUEUE_TIMEOUT event with *@stalled set. After wsc_cut_long(), it
 * ends the default after that (or after @start_ns, if later) at most: a
 * GRPC_QUEUE_TIMEOUT event with *@stalled clear. A call without a deadline
 * (@timeout_ms 0) waits for good, or with health_ms until agentd does
 * not answer a Health check made after each health_ms of waiting (a
 * GRPC_QUEUE_TIMEOUT event with *@stalled 2, "Stuck calls") or
 * wsc_cut_long() was called (*@stalled clear).
 */
static grpc_event call_wait(struct wsc *c, grpc_completion_queue *cq, void *tag,
			    gpr_timespec until, int64_t start_ns, int64_t timeout_ms, int *stalled)
{
	int64_t quiet_ns = (int64_t)c->timeout_ms * 1000000;
	grpc_event ev;

	*stalled = 0;
	if (health_wait) {
		/* A signal came or comes (wsc_cut_long()): the caller is about
		 * to go, and a check of a frozen agentd held it up to 10 s. */
		for (;;) {
			gpr_timespec w = slice_end();
			bool last = gpr_time_cmp(w, until) >= 0;

			ev = cq_wait_until(c, cq, tag, true, last ? until : w);
			if (ev.type != GRPC_QUEUE_TIMEOUT || last ||
			    atomic_load_explicit(&c->cut_ns, memory_order_relaxed))
				return ev;
		}
	}
	if (timeout_ms == 0 && c->health_ms) {
		/* No deadline (WriteStdin waits on the command): after each
		 * health_ms, whether agentd still answers ("Stuck calls");
		 * and within a slice of wsc_cut_long() (a signal: the caller
		 * is about to go). */
		int64_t due_ns = wsb_mono_ns() + (int64_t)c->health_ms * 1000000;

		for (;;) {
			ev = cq_wait_until(c, cq, tag, true, slice_end());
			if (ev.type != GRPC_QUEUE_TIMEOUT)
				return ev;
			if (atomic_load_explicit(&c->cut_ns, memory_order_relaxed))
				return ev;
			if (!health_ok(c, &due_ns)) {
				*stalled = 2;
				return ev;
			}
		}
	}
	if (c->timeout_ms == 0 || timeout_ms == 0 || timeout_ms <= (int64_t)c->timeout_ms)
		return cq_wait_until(c, cq, tag, true, until);
	for (;;) {
		int64_t last = atomic_load_explicit(&c->heard_ns, memory_order_relaxed);
		int64_t cut = atomic_load_explicit(&c->cut_ns, memory_order_relaxed);
		int64_t now = wsb_mono_ns();
		int64_t stall = (last > start_ns ? last : start_ns) + quiet_ns;
		int64_t end = cut ? (cut > start_ns ? cut : start_ns) + quiet_ns : INT64_MAX;
		gpr_timespec w;

		if (stall <= now || end <= now) {
			*stalled = stall <= now;
			memset(&ev, 0, sizeof(ev));
			ev.type = GRPC_QUEUE_TIMEOUT;
			return ev;
		}
		if (end < stall)
			stall = end;
		w = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
				 gpr_time_from_nanos(stall - now, GPR_TIMESPAN));
		if (gpr_time_cmp(w, until) >= 0)
			return cq_wait_until(c, cq, tag, true, until);
		ev = cq_wait_until(c, cq, tag, true, w);
		if (ev.type != GRPC_QUEUE_TIMEOUT)
			return ev;
	}
}

void wsc_cut_long(struct wsc *c)
{
	int_fast64_t none = 0;

	/* The first cut counts: a second must not push the end later. */
	(void)atomic_compare_exchange_strong(&c->cut_ns, &none, wsb_mono_ns());
}

/* Wait for @tag on @cq for as long as it takes (a stream's; the call's
 * deadline, if any, bounds it). True when the batch succeeded. */
static bool cq_wait(struct wsc *c, grpc_completion_queue *cq, void *tag, bool polls)
{
	grpc_event ev = cq_wait_until(c, cq, tag, polls, gpr_inf_future(GPR_CLOCK_MONOTONIC));

	return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static gpr_timespec deadline_of(const struct wsc *c, int64_t timeout_ms)
{
	if (timeout_ms < 0)
		timeout_ms = c->timeout_ms;
	if (timeout_ms == 0)
		return gpr_inf_future(GPR_CLOCK_MONOTONIC);
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* A call of @method (copied) on @ch, ending by @deadline; NULL on failure. */
static grpc_call *call_new(struct wsc_chan *ch, grpc_completion_queue *cq, const char *method,
			   gpr_timespec deadline)
{
	grpc_slice m = grpc_slice_from_copied_string(method);
	grpc_call *call;

	call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
					deadline, NULL);
	grpc_slice_unref(m);
	return call;
}

/* ---- connect ---- */

static bool token_ok(const char *t)
{
	if (!*t)
		return false;
	for (; *t; t++)
		if (*t < 0x20 || *t > 0x7e)
			return false;
	return true;
}

/* gRPC's own log lines (gpr_log) at debug level (wsctl -v, wsfs -d): the
 * caller reports failures itself, with the status agentd sent. */
static void grpc_log(gpr_log_func_args *a)
{
	wsb_log(WSB_LOG_DEBUG, "grpc %s: %s:%d: %s", gpr_log_severity_string(a->severity),
		a->file, a->line, a->message);
}

int wsc_connect(const struct wsc_options *o, struct wsc **ret)
{
	struct wsc *c;
	int r;

	if (!o || (!o->exec_cmd && (!o->target || !*o->target)) || (o->exec_cmd && !*o->exec_cmd))
		return -EINVAL;
	if (o->token && !token_ok(o->token))
		return -EINVAL;
	if (o->session && !wsb_session_id_valid(o->session, strlen(o->session)))
		return -EINVAL;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->reconnect_lock, NULL);
	pthread_cond_init(&c->reap_cond, NULL);
	c->timeout_ms = o->timeout_ms;
	c->health_ms = o->health_ms && o->health_ms < WSC_HEALTH_MIN_MS
				  ? WSC_HEALTH_MIN_MS
				  : o->health_ms;
	c->direct = o->direct;
	c->max_recv = o->max_recv_bytes ? o->max_recv_bytes : WSC_MAX_RECV_DEFAULT;
	c->md_flags = o->wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY |
					  GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET
					: 0;
	if (o->exec_cmd)
		c->exec_cmd = strdup(o->exec_cmd);
	else
		c->target = strdup(o->target);
	if (!c->exec_cmd && !c->target) {
		pthread_cond_destroy(&c->reap_cond);
		pthread_mutex_destroy(&c->lock);
		pthread_mutex_destroy(&c->reconnect_lock);
		free(c);
		return -ENOMEM;
	}
	gpr_set_log_function(grpc_log);
	grpc_init();
	c->idle = o->idle_poller;
	c->ops = o->op_streams;
	atomic_init(&c->ops_unsupported, false);
	atomic_init(&c->n_abandoned, 0);
	atomic_init(&c->heard_ns, 0);
	atomic_init(&c->waiting, 0);
	atomic_init(&c->quiet_ns, 0);
	atomic_init(&c->idle_polling, false);
	pthread_mutex_init(&c->idle_lock, NULL);
	wsb_cond_init_mono(&c->idle_cond);
	if (o->token) {
		char *v;

		if (asprintf(&v, "Bearer %s", o->token) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		c->md[c->n_md].key = grpc_slice_from_static_string("authorization");
		c->md[c->n_md++].value = grpc_slice_from_copied_string(v);
		free(v);
	}
	if (o->session) {
		c->md[c->n_md].key = grpc_slice_from_static_string(WSB_SESSION_MD);
		c->md[c->n_md++].value = grpc_slice_from_copied_string(o->session);
	}
	r = chan_new(c, &c->chan);
	if (r < 0)
		goto fail;
	if (c->idle) {
		r = -pthread_create(&c->idle_thread, NULL, idle_run, c);
		if (r < 0) {
			chan_put(c, c->chan);
			goto fail;
		}
	}
	*ret = c;
	return 0;

fail:
	reapers_wait(c);
	for (size_t i = 0; i < c->n_md; i++)
		grpc_slice_unref(c->md[i].value);
	pthread_cond_destroy(&c->idle_cond);
	pthread_mutex_destroy(&c->idle_lock);
	grpc_shutdown();
	free(c->target);
	free(c->exec_cmd);
	pthread_cond_destroy(&c->reap_cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->reconnect_lock);
	free(c);
	return r;
}

int wsc_reconnect(struct wsc *c)
{
	struct wsc_chan *ch, *old;
	unsigned gen;
	int r;

	pthread_mutex_lock(&c->reconnect_lock);
	r = chan_new(c, &ch);
	if (r == 0) {
		pthread_mutex_lock(&c->lock);
		old = c->chan;
		c->chan = ch;
		gen = ++c->chan_gen;
		pthread_mutex_unlock(&c->lock);
		/* Op streams on the old channel end now; their threads make new
		 * ones at their next call (op_get). */
		pthread_mutex_lock(&g_ops_lock);
		for (struct opstream *s = g_ops; s; s = s->next)
			if (s->c == c && s->gen != gen)
				grpc_call_cancel(s->call, NULL);
		pthread_mutex_unlock(&g_ops_lock);
		chan_put(c, old);
	}
	pthread_mutex_unlock(&c->reconnect_lock);
	return r;
}

static void unary_free(struct wsc *c, struct unary *u);

struct wsc *wsc_free(struct wsc *c)
{
	gpr_timespec until;
	pid_t pid;

	if (!c)
		return NULL;
	if (c->idle) {
		pthread_mutex_lock(&c->idle_lock);
		c->idle_stop = true;
		pthread_cond_signal(&c->idle_cond);
		pthread_mutex_unlock(&c->idle_lock);
		idle_kick(c);
		pthread_join(c->idle_thread, NULL);
	}
	pthread_cond_destroy(&c->idle_cond);
	pthread_mutex_destroy(&c->idle_lock);
	/* Threads' op streams: no call runs now (client.h); a thread that
	 * exits later finds its stream gone from g_ops, and one that calls
	 * again does not touch it (g_ops_epoch). */
	atomic_fetch_add(&g_ops_epoch, 1);
	for (struct opstream *s; (s = op_unlist(NULL, c, false));)
		op_close(s, false);
	pthread_mutex_lock(&g_ops_lock);
	while (g_ops_closing > 0)
		pthread_cond_wait(&g_ops_cond, &g_ops_lock);
	pthread_mutex_unlock(&g_ops_lock);
	op_reap(c);
	/* Calls left behind (cancelled already): give them a moment, in all,
	 * to end; one still stuck keeps its memory and its channel (the
	 * process is about to exit: freeing either under gRPC would be worse). */
	until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			     gpr_time_from_millis(WSC_STUCK_GRACE_MS, GPR_TIMESPAN));
	while (c->abandoned) {
		struct unary *u = c->abandoned;
		grpc_event ev = grpc_completion_queue_pluck(u->cq, &u->tag, until, NULL);

		c->abandoned = u->next;
		if (ev.type == GRPC_OP_COMPLETE)
			unary_free(c, u);
	}
	for (size_t i = 0; i < c->n_cq; i++)
		cq_destroy(c->cq[i]);
	free(c->cq);
	pid = c->chan->pid;
	if (!chan_put(c, c->chan) && pid > 0) {
		/* A stuck call keeps the channel (above), so its command
		 * would see no end of its stream: stop it now, or it outlives
		 * us (a kubectl exec, and the agentd it started in the pod). */
		reap_child_now(pid);
	}
	reapers_wait(c);
	for (size_t i = 0; i < c->n_md; i++)
		grpc_slice_unref(c->md[i].value);
	free(c->target);
	free(c->exec_cmd);
	pthread_cond_destroy(&c->reap_cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->reconnect_lock);
	free(c);
	grpc_shutdown();
	return NULL;
}

/* ---- unary ---- */

int wsc_unary(struct wsc *c, const char *method, const ProtobufCMessage *req,
	      const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **ret_reply,
	      struct wsc_status *st)
{
	return wsc_unary_ex(c, method, req, reply_desc, ret_reply, -1, st);
}

/* Free @u, whose batch has ended (or never started). */
static void unary_free(struct wsc *c, struct unary *u)
{
	if (u->call)
		grpc_call_unref(u->call);
	grpc_slice_unref(u->details);
	grpc_metadata_array_destroy(&u->initial_md);
	grpc_metadata_array_destroy(&u->trailing_md);
	if (u->recv_bb)
		grpc_byte_buffer_destroy(u->recv_bb);
	grpc_byte_buffer_destroy(u->send_bb);
	cq_put(c, u->cq);
	chan_put(c, u->ch);
	free(u);
}

/* Free the abandoned calls whose batches have ended (see "Stuck calls").
 * Any thread; takes wsc.lock, and polls each queue without waiting. */
static void unary_reap(struct wsc *c)
{
	struct unary *done = NULL, **pp, *u;

	if (atomic_load(&c->n_abandoned) == 0)
		return;
	pthread_mutex_lock(&c->lock);
	for (pp = &c->abandoned; (u = *pp);) {
		grpc_event ev = grpc_completion_queue_pluck(u->cq, &u->tag,
							    gpr_time_0(GPR_CLOCK_MONOTONIC), NULL);

		if (ev.type != GRPC_OP_COMPLETE) {
			pp = &u->next;
			continue;
		}
		*pp = u->next;
		u->next = done;
		done = u;
		atomic_fetch_sub(&c->n_abandoned, 1);
	}
	pthread_mutex_unlock(&c->lock);
	while ((u = done)) {
		done = u->next;
		unary_free(c, u);
	}
}

/* ---- op streams (see "Op streams") ---- */

#define OPS_METHOD "/wsbridge.v1.Workspace/Ops"
#define OPS_SERVICE "/wsbridge.v1.Workspace/"

/* Take @s off g_ops, or the first stream of client @c when @s is NULL;
 * NULL when someone else (wsc_free, the thread's exit) took it first.
 * Compares pointers only: @s may be freed already. @closing: count it in
 * g_ops_closing (op_thread_exit). */
static struct opstream *op_unlist(struct opstream *s, const struct wsc *c, bool closing)
{
	struct opstream *found = NULL;

	pthread_mutex_lock(&g_ops_lock);
	for (struct opstream **pp = &g_ops; *pp; pp = &(*pp)->next) {
		if (s ? *pp == s : (*pp)->c == c) {
			found = *pp;
			*pp = found->next;
			g_ops_closing += closing;
			break;
		}
	}
	pthread_mutex_unlock(&g_ops_lock);
	return found;
}

/* Free @s, whose batches have all ended. */
static void op_destroy(struct opstream *s)
{
	if (s->call)
		grpc_call_unref(s->call);
	if (s->send_bb)
		grpc_byte_buffer_destroy(s->send_bb);
	if (s->recv_bb)
		grpc_byte_buffer_destroy(s->recv_bb);
	grpc_metadata_array_destroy(&s->initial_md);
	grpc_metadata_array_destroy(&s->trailing_md);
	grpc_slice_unref(s->details);
	cq_destroy(s->cq);
	free(s);
}

/* Wait for @s's final status until @until; true when it came. */
static bool op_status_wait(struct opstream *s, gpr_timespec until)
{
	if (!s->status_done &&
	    grpc_completion_queue_pluck(s->cq, &s->tag_status, until, NULL).type == GRPC_OP_COMPLETE)
		s->status_done = true;
	return s->status_done;
}

/* End @s (off g_ops, not in use): cancel it and free it once its status
 * came, or leave it on wsc.ops_dead when its op batch is stuck. @op_pending:
 * its last op batch has not completed. */
static void op_close(struct opstream *s, bool op_pending)
{
	struct wsc *c = s->c;
	gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
					  gpr_time_from_millis(WSC_STUCK_GRACE_MS, GPR_TIMESPAN));
	unsigned n;

	/* Past WSC_ABANDON_MAX left behind, wait for this one (as unary
	 * calls do): their memory stays bounded. */
	pthread_mutex_lock(&c->lock);
	n = c->n_ops_dead;
	pthread_mutex_unlock(&c->lock);
	if (n >= WSC_ABANDON_MAX)
		until = gpr_inf_future(GPR_CLOCK_MONOTONIC);
	grpc_call_cancel(s->call, NULL);
	if (op_pending && grpc_completion_queue_pluck(s->cq, &s->tag_op, until, NULL).type ==
				  GRPC_OP_COMPLETE)
		op_pending = false;
	if (!op_pending && op_status_wait(s, until)) {
		op_destroy(s);
		return;
	}
	s->op_due = op_pending;
	pthread_mutex_lock(&c->lock);
	s->next = c->ops_dead;
	c->ops_dead = s;
	c->n_ops_dead++;
	pthread_mutex_unlock(&c->lock);
}

/* Free the streams on wsc.ops_dead whose batches have ended. */
static void op_reap(struct wsc *c)
{
	struct opstream *done = NULL, **pp, *s;
	gpr_timespec now = gpr_time_0(GPR_CLOCK_MONOTONIC);

	pthread_mutex_lock(&c->lock);
	for (pp = &c->ops_dead; (s = *pp);) {
		if (s->op_due &&
		    grpc_completion_queue_pluck(s->cq, &s->tag_op, now, NULL).type == GRPC_OP_COMPLETE)
			s->op_due = false;
		if (s->op_due || !op_status_wait(s, now)) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		s->next = done;
		done = s;
		c->n_ops_dead--;
	}
	pthread_mutex_unlock(&c->lock);
	while ((s = done)) {
		done = s->next;
		op_destroy(s);
	}
}

/* A thread that made calls ends: end its stream (pthread key destructor). */
static void op_thread_exit(void *arg)
{
	struct opstream *s = arg;

	/* Counted while closing: wsc_free() waits, so that the client is not
	 * freed under op_close() (libfuse's idle workers exit detached). */
	if (!op_unlist(s, NULL, true))
		return;
	op_close(s, false);
	pthread_mutex_lock(&g_ops_lock);
	if (--g_ops_closing == 0)
		pthread_cond_broadcast(&g_ops_cond);
	pthread_mutex_unlock(&g_ops_lock);
}

static void op_key_init(void)
{
	g_ops_key_ok = pthread_key_create(&g_ops_key, op_thread_exit) == 0;
}

/* Drop this thread's stream @s (failed, stale or stuck). */
static void op_drop(struct opstream *s, bool op_pending)
{
	pthread_setspecific(g_ops_key, NULL);
	if (op_unlist(s, NULL, false))
		op_close(s, op_pending);
}

/* This thread's stream for @c on its current channel, made when missing;
 * NULL when none can be had (the call is then made unary). */
static struct opstream *op_get(struct wsc *c)
{
	struct opstream *s;
	struct wsc_chan *ch;
	grpc_call_error e;
	unsigned gen;
	grpc_op op;

	pthread_once(&g_ops_once, op_key_init);
	if (!g_ops_key_ok)
		return NULL;
	s = pthread_getspecific(g_ops_key);
	if (s && t_ops_epoch != atomic_load(&g_ops_epoch)) {
		/* Not to be touched: wsc_free() may have freed it (one of a
		 * live client stays on g_ops until that client is freed). */
		pthread_setspecific(g_ops_key, NULL);
		s = NULL;
	}
	if (s) {
		pthread_mutex_lock(&c->lock);
		gen = c->chan_gen;
		pthread_mutex_unlock(&c->lock);
		/* Ended while idle (agentd restarted)? A status that came
		 * means it did. */
		if (s->c == c && s->gen == gen &&
		    (wsb_mono_ns() - s->idle_ns < WSC_OP_IDLE_CHECK_NS ||
		     !op_status_wait(s, gpr_time_0(GPR_CLOCK_MONOTONIC))))
			return s;
		op_drop(s, false);
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->c = c;
	grpc_metadata_array_init(&s->initial_md);
	grpc_metadata_array_init(&s->trailing_md);
	s->details = grpc_empty_slice();
	s->code = GRPC_STATUS_UNKNOWN;
	s->cq = grpc_completion_queue_create_for_pluck(NULL);
	/* The call holds the channel (gRPC's own reference) for as long as it
	 * lives; the stream holds no wsc_chan reference, which would keep an
	 * old channel's --exec command from being reaped after a reconnect
	 * while the thread is idle (wsc_reconnect cancels the stream). */
	pthread_mutex_lock(&c->lock);
	ch = c->chan;
	ch->refs++;
	s->gen = c->chan_gen;
	pthread_mutex_unlock(&c->lock);
	s->call = call_new(ch, s->cq, OPS_METHOD, gpr_inf_future(GPR_CLOCK_MONOTONIC));
	chan_put(c, ch);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
	op.data.recv_status_on_client.status = &s->code;
	op.data.recv_status_on_client.status_details = &s->details;
	e = s->call ? grpc_call_start_batch(s->call, &op, 1, &s->tag_status, NULL) : GRPC_CALL_ERROR;
	if (e != GRPC_CALL_OK) {
		if (s->call)
			grpc_call_cancel(s->call, NULL);
		s->status_done = true; /* nothing to pluck */
		op_destroy(s);
		return NULL;
	}
	s->idle_ns = wsb_mono_ns();
	pthread_mutex_lock(&g_ops_lock);
	s->next = g_ops;
	g_ops = s;
	pthread_mutex_unlock(&g_ops_lock);
	pthread_setspecific(g_ops_key, s);
	t_ops_epoch = atomic_load(&g_ops_epoch);
	return s;
}

/* An OpRequest for @method carrying @req, packed in place; NULL on ENOMEM. */
static grpc_byte_buffer *op_pack(const char *method, const ProtobufCMessage *req)
{
	size_t mlen = strlen(method), n = protobuf_c_message_get_packed_size(req);
	grpc_slice slice = grpc_slice_malloc(2 * WSB_WIRE_LEN_HEAD_MAX + mlen + n);
	uint8_t *w = GRPC_SLICE_START_PTR(slice);
	grpc_byte_buffer *bb;

	w += wsb_wire_len_head(w, 1, mlen);
	memcpy(w, method, mlen);
	w += mlen;
	w += wsb_wire_len_head(w, 2, n);
	protobuf_c_message_pack(req, w);
	w += n;
	GRPC_SLICE_SET_LENGTH(slice, (size_t)(w - GRPC_SLICE_START_PTR(slice)));
	bb = grpc_raw_byte_buffer_create(&slice, 1);
	grpc_slice_unref(slice);
	return bb;
}

/*
 * Decode OpReply @bb into @st and, when OK, the reply of @desc. In place
 * (wsb_grpc.h): a pass over the fields copies the status's and notes where
 * the reply lies; a second decodes the reply from there, so a Read's data
 * is copied once, straight out of gRPC's slices.
 */
static int op_unpack(grpc_byte_buffer *bb, const char *method,
		     const ProtobufCMessageDescriptor *desc, ProtobufCMessage **ret_reply,
		     struct wsc_status *st)
{
	char ename[32], msg[sizeof(st->msg)];
	size_t ename_len = 0, msg_len = 0, reply_at = 0, reply_len = 0;
	grpc_byte_buffer_reader reader;
	struct wsb_pieces c;
	struct wsb_wire_field f;
	int code = GRPC_STATUS_OK, r;

	if (wsb_grpc_pieces(bb, &reader, &c) < 0)
		return status_local(st, EBADMSG, "%s: cannot read the reply", method);
	while ((r = wsb_pieces_field(&c, &f)) > 0) {
		if (f.number == 1 && f.type == WSB_WIRE_VARINT) {
			code = (int)(int32_t)f.value;
		} else if (f.type != WSB_WIRE_LEN) {
			continue;
		} else if (f.number == 2) { /* 32 bytes kept: status_set() ignores such */
			r = wsb_pieces_copy_cut(&c, f.len, ename, sizeof(ename), &ename_len);
		} else if (f.number == 3) {
			r = wsb_pieces_copy_cut(&c, f.len, msg, sizeof(msg), &msg_len);
		} else {
			if (f.number == 4) {
				reply_at = c.pos;
				reply_len = f.len;
			}
			r = wsb_pieces_skip(&c, f.len);
		}
		if (r < 0)
			break;
	}
	grpc_byte_buffer_reader_destroy(&reader);
	if (r < 0) {
		r = status_local(st, EBADMSG, "%s: the reply does not decode as an OpReply", method);
	} else if (code < 0 || code > WSB_UNAUTHENTICATED) {
		r = status_local(st, EPROTO, "%s: status code %d in the reply", method, code);
	} else {
		r = status_set(st, code, msg, msg_len, ename, ename_len, false);
		if (r == 0) {
			ProtobufCMessage *m = NULL;

			r = wsb_grpc_unpack(bb, reply_at, reply_len, desc, &m);
			r = reply_give(st, method, desc, r, m, ret_reply);
		}
	}
	return r;
}

/*
 * wsc_unary_ex() as a message of this thread's op stream. Returns what the
 * call returns, or 1 when it is to be made as a unary call instead (no
 * stream, nothing sent, or an agentd without Ops).
 */
static int op_call(struct wsc *c, const char *method, const ProtobufCMessage *req,
		   const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **ret_reply,
		   int64_t timeout_ms, struct wsc_status *st)
{
	gpr_timespec deadline = deadline_of(c, timeout_ms), until;
	int64_t start_ns;
	struct opstream *s;
	grpc_call_error e;
	grpc_event ev;
	grpc_op ops[4];
	size_t n = 0;
	int stalled;
	int r;

	op_reap(c);
	s = op_get(c);
	if (!s)
		return 1;
	s->send_bb = op_pack(method, req);
	if (!s->send_bb)
		return status_local(st, ENOMEM, "cannot pack the request");
	memset(ops, 0, sizeof(ops));
	if (!s->started) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		ops[n].flags = c->md_flags;
		ops[n].data.send_initial_metadata.count = c->n_md;
		ops[n].data.send_initial_metadata.metadata = c->md;
		n++;
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
		n++;
	}
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n].data.send_message.send_message = s->send_bb;
	n++;
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n].data.recv_message.recv_message = &s->recv_bb;
	n++;
	e = grpc_call_start_batch(s->call, ops, n, &s->tag_op, NULL);
	if (e != GRPC_CALL_OK) {
		op_drop(s, false);
		return 1; /* not sent */
	}
	s->started = true;
	start_ns = wsb_mono_ns();
	/* The deadline is ours to keep: the stream has none. */
	ev = call_wait(c, s->cq, &s->tag_op, deadline, start_ns, timeout_ms, &stalled);
	if (ev.type == GRPC_QUEUE_TIMEOUT) {
		op_drop(s, true); /* (send_bb goes with it) */
		if (stalled)
			status_local(st, ETIMEDOUT, "%s: no call had an answer from agentd for %u ms",
				     method, c->timeout_ms);
		else
			status_local(st, ETIMEDOUT, "%s: no answer within the deadline", method);
		st->code = WSB_DEADLINE_EXCEEDED;
		return -ETIMEDOUT;
	}
	grpc_byte_buffer_destroy(s->send_bb);
	s->send_bb = NULL;
	if (ev.success && s->recv_bb) {
		r = op_unpack(s->recv_bb, method, reply_desc, ret_reply, st);
		grpc_byte_buffer_destroy(s->recv_bb);
		s->recv_bb = NULL;
		s->used = true;
		s->idle_ns = wsb_mono_ns();
		heard(c, s->idle_ns);
		if (r < 0 && !st->has_errno && (st->err == EBADMSG || st->err == EPROTO))
			op_drop(s, false); /* a stream that sends such is not to be trusted */
		return r;
	}
	/* The stream ended: its status says why. */
	until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			     gpr_time_from_millis(WSC_STUCK_GRACE_MS, GPR_TIMESPAN));
	if (!op_status_wait(s, until)) {
		op_drop(s, false);
		status_local(st, EIO, "%s: the op stream ended without a status", method);
		st->code = WSB_UNAVAILABLE;
		return -EIO;
	}
	if (s->code == GRPC_STATUS_UNIMPLEMENTED && !s->used) {
		/* An agentd without Ops: nothing was called. */
		atomic_store(&c->ops_unsupported, true);
		op_drop(s, false);
		return 1;
	}
	r = status_from_call(st, s->code, &s->details, &s->trailing_md, false);
	if (r == 0 || s->code == GRPC_STATUS_CANCELLED) {
		/* Ended with the op unanswered: as a broken connection. */
		status_local(st, EIO, "%s: the op stream ended (%s%s%s)", method,
			     wsb_status_name((int)s->code), st->msg[0] ? ": " : "", st->msg);
		st->code = WSB_UNAVAILABLE;
		r = -EIO;
	}
	op_drop(s, false);
	return r;
}

int wsc_unary_ex(struct wsc *c, const char *method, const ProtobufCMessage *req,
		 const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **ret_reply,
		 int64_t timeout_ms, struct wsc_status *st)
{
	gpr_timespec deadline = deadline_of(c, timeout_ms), until;
	int64_t start_ns;
	struct wsc_status tmp;
	struct unary *u;
	grpc_call_error e;
	grpc_event ev;
	grpc_op ops[6];
	int stalled = 0;
	int r;

	if (!st)
		st = &tmp;
	status_clear(st);
	/* WatchSync is served on agentd's loop thread, not in Ops (proto). */
	if (c->ops && !atomic_load(&c->ops_unsupported) &&
	    strncmp(method, OPS_SERVICE, sizeof(OPS_SERVICE) - 1) == 0 &&
	    strcmp(method, OPS_SERVICE "WatchSync") != 0) {
		r = op_call(c, method, req, reply_desc, ret_reply, timeout_ms, st);
		if (r <= 0)
			return r;
		status_clear(st);
	}
	unary_reap(c);
	u = calloc(1, sizeof(*u));
	if (!u)
		return status_local(st, ENOMEM, "cannot allocate a call");
	u->send_bb = bb_pack(req);
	if (!u->send_bb) {
		free(u);
		return status_local(st, ENOMEM, "cannot pack the request");
	}
	u->code = GRPC_STATUS_UNKNOWN;
	u->details = grpc_empty_slice();
	grpc_metadata_array_init(&u->initial_md);
	grpc_metadata_array_init(&u->trailing_md);
	u->cq = cq_get(c);
	u->ch = chan_get(c);
	u->call = call_new(u->ch, u->cq, method, deadline);

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].flags = c->md_flags;
	ops[0].data.send_initial_metadata.count = c->n_md;
	ops[0].data.send_initial_metadata.metadata = c->md;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = u->send_bb;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial_md;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &u->recv_bb;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
	ops[5].data.recv_status_on_client.status = &u->code;
	ops[5].data.recv_status_on_client.status_details = &u->details;

	e = u->call ? grpc_call_start_batch(u->call, ops, 6, &u->tag, NULL) : GRPC_CALL_ERROR;
	if (e != GRPC_CALL_OK) {
		r = status_local(st, EIO, "%s: cannot start the call: %s", method,
				 grpc_call_error_to_string(e));
		unary_free(c, u);
		return r;
	}
	start_ns = wsb_mono_ns();
	until = gpr_time_add(deadline, gpr_time_from_millis(WSC_STUCK_GRACE_MS, GPR_TIMESPAN));
	if (atomic_load(&c->n_abandoned) < WSC_ABANDON_MAX)
		ev = call_wait(c, u->cq, &u->tag, until, start_ns, timeout_ms, &stalled);
	else
		ev = cq_wait_until(c, u->cq, &u->tag, true, gpr_inf_future(GPR_CLOCK_MONOTONIC));
	if (ev.type == GRPC_QUEUE_TIMEOUT) {
		/* Stuck (see "Stuck calls") or stalled ("Stalled links"):
		 * leave it to unary_reap(). */
		grpc_call_cancel_with_status(u->call, GRPC_STATUS_DEADLINE_EXCEEDED,
					     stalled ? "the link stalled"
						     : "the call outlived its deadline",
					     NULL);
		pthread_mutex_lock(&c->lock);
		u->next = c->abandoned;
		c->abandoned = u;
		atomic_fetch_add(&c->n_abandoned, 1);
		pthread_mutex_unlock(&c->lock);
		if (stalled == 2)
			return status_local(st, ENOTCONN,
					    "%s: agentd does not answer: a health check had no "
					    "reply, after %.1f s of waiting on this call",
					    method, c->health_ms / 1000.0);
		if (stalled)
			status_local(st, ETIMEDOUT, "%s: no call had an answer from agentd for %u ms",
				     method, c->timeout_ms);
		else if (timeout_ms == 0)
			status_local(st, ETIMEDOUT, "%s: cut short: the client is going", method);
		else
			status_local(st, ETIMEDOUT,
				     "%s: no answer %d ms past the deadline (the connection is stuck)",
				     method, WSC_STUCK_GRACE_MS);
		st->code = WSB_DEADLINE_EXCEEDED;
		return -ETIMEDOUT;
	}
	r = status_from_call(st, u->code, &u->details, &u->trailing_md, false);
	/* A reply, or agentd's errno: not a status of gRPC's own. */
	if (u->recv_bb || st->has_errno)
		heard(c, wsb_mono_ns());
	if (r == 0 && !u->recv_bb) {
		r = status_local(st, EPROTO, "%s: status OK without a reply", method);
	} else if (r == 0) {
		ProtobufCMessage *reply = NULL;

		r = bb_unpack(u->recv_bb, reply_desc, &reply);
		r = reply_give(st, method, reply_desc, r, reply, ret_reply);
	}
	unary_free(c, u);
	return r;
}

/* ---- streams ---- */

/* Leave @s stuck (see "Stuck calls"): its final status becomes gRPC's code
 * for errno @err with the message; the call is cancelled. Any thread. */
static void stream_stick(struct wsc_stream *s, int err, const char *fmt, ...)
{
	va_list ap;

	if (atomic_exchange(&s->sticking, true))
		return; /* another thread's word stands */
	s->stuck_st.code = wsb_status_from_errno(err);
	s->stuck_st.err = err;
	s->stuck_st.has_errno = false;
	va_start(ap, fmt);
	vsnprintf(s->stuck_st.msg, sizeof(s->stuck_st.msg), fmt, ap);
	va_end(ap);
	atomic_store(&s->stuck, true);
	atomic_store(&s->cancelled, true);
	grpc_call_cancel(s->call, NULL);
}

/* Whether agentd answers a Health check on @c's connection within
 * health_ms (10 s at most: a cancel waits for it): any status it sends
 * counts, only gRPC's own DEADLINE_EXCEEDED or UNAVAILABLE (nothing came
 * back) does not. agentd answers it on its completion queue threads, not
 * its loop. Blocks up to that plus WSC_STUCK_GRACE_MS, or until
 * wsc_cut_long() (true then: the caller's own wait sees the cut and ends
 * as cut short, not as agentd's failure). */
static bool peer_answers(struct wsc *c)
{
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	struct wsc_status st;
	int r;

	health_wait = true;
	r = wsc_unary_ex(c, "/grpc.health.v1.Health/Check", &req.base,
			 &grpc__health__v1__health_check_response__descriptor, NULL,
			 c->health_ms < 10000 ? c->health_ms : 10000, &st);
	health_wait = false;
	if (atomic_load_explicit(&c->cut_ns, memory_order_relaxed))
		return true;
	return r == 0 || st.has_errno ||
	       (st.code != WSB_DEADLINE_EXCEEDED && st.code != WSB_UNAVAILABLE);
}

/*
 * Wait for the batch of @s tagged @tag to end: 1 if it succeeded, 0 if it
 * failed, -1 if the stream is stuck (left behind: "Stuck calls"; nothing
 * will be waited for on it any more, and the batch may still run). With
 * health_ms or @send the wait runs in slices of WSC_STREAM_SLICE_MS, to
 * see another thread leave the stream stuck, and leaves it stuck itself:
 * with health_ms, when agentd does not answer a Health check made after
 * each health_ms of waiting (peer_answers()); with @send (a send batch,
 * which may never end), WSC_STUCK_GRACE_MS after the stream was cancelled
 * (wsc_stream_cancel()). Else it waits for good. The calling thread; one
 * waiter per tag.
 */
static int stream_wait(struct wsc_stream *s, void *tag, bool send)
{
	struct wsc *c = s->c;
	int64_t cancel_ns = 0, due_ns;

	if (atomic_load(&s->stuck))
		return -1;
	if (!c->health_ms && !send)
		return cq_wait(c, s->cq, tag, s->polls) ? 1 : 0;
	due_ns = c->health_ms ? wsb_mono_ns() + (int64_t)c->health_ms * 1000000 : INT64_MAX;
	for (;;) {
		grpc_event ev;
		int64_t now;

		if (atomic_load(&s->stuck))
			return -1;
		ev = cq_wait_until(c, s->cq, tag, s->polls, slice_end());
		if (ev.type == GRPC_OP_COMPLETE)
			return ev.success ? 1 : 0;
		if (ev.type != GRPC_QUEUE_TIMEOUT)
			return 0; /* the queue shut down */
		now = wsb_mono_ns();
		if (atomic_load(&s->cancelled)) {
			if (!send)
				continue; /* a cancelled call's receives end by themselves */
			if (cancel_ns == 0)
				cancel_ns = now;
			else if (now - cancel_ns >= (int64_t)WSC_STUCK_GRACE_MS * 1000000) {
				stream_stick(s, ECANCELED, "cancelled while a message could not "
							   "be written to agentd");
				return -1;
			}
		} else if (!health_ok(c, &due_ns)) {
			stream_stick(s, ENOTCONN,
				     "agentd does not answer: a health check had no reply, "
				     "after %.1f s of waiting on this call",
				     c->health_ms / 1000.0);
			return -1;
		}
	}
}

/* Wait for the final status (once); copy it to @st. 0 for OK, else -err. */
static int stream_status(struct wsc_stream *s, struct wsc_status *st)
{
	pthread_mutex_lock(&s->status_lock);
	if (!s->status_done) {
		if (stream_wait(s, &s->tag_status, false) >= 0)
			(void)status_from_call(&s->final, s->status, &s->details, &s->trailing_md,
					       atomic_load(&s->cancelled));
		else
			s->final = s->stuck_st;
		s->status_done = true;
	}
	pthread_mutex_unlock(&s->status_lock);
	if (st)
		*st = s->final;
	return s->final.code == WSB_OK ? 0 : -s->final.err;
}

/* Start @ops and wait (stream_wait(); @send: a send batch): as
 * stream_wait(), 1 when the batch succeeded, 0 when it failed (the call is
 * over), -1 when the stream is stuck: then the batch may still be running
 * (or was not started), and what it points to must stay. */
static int stream_batch(struct wsc_stream *s, grpc_op *ops, size_t n, void *tag, bool send)
{
	grpc_call_error e;

	if (atomic_load(&s->stuck))
		return -1;
	e = grpc_call_start_batch(s->call, ops, n, tag, NULL);
	if (e != GRPC_CALL_OK) {
		/* A rejected batch poisons the call in 1.51 (grpc-c-core.md §2). */
		wsb_debug("grpc_call_start_batch: %s", grpc_call_error_to_string(e));
		grpc_call_cancel(s->call, NULL);
		return 0;
	}
	return stream_wait(s, tag, send);
}

int wsc_stream_open(struct wsc *c, const char *method, const ProtobufCMessage *req,
		    int64_t timeout_ms, struct wsc_stream **ret, struct wsc_status *st)
{
	return wsc_stream_open_ex(c, method, req, timeout_ms, 0, ret, st);
}

int wsc_stream_open_ex(struct wsc *c, const char *method, const ProtobufCMessage *req,
		       int64_t timeout_ms, unsigned flags, struct wsc_stream **ret,
		       struct wsc_status *st)
{
	struct wsc_stream *s;
	grpc_byte_buffer *bb = NULL;
	grpc_call_error e;
	grpc_op ops[3];
	size_t n = 0;
	int r;

	if (st)
		status_clear(st);
	s = calloc(1, sizeof(*s));
	if (!s)
		return st ? status_local(st, ENOMEM, "out of memory") : -ENOMEM;
	if (req) {
		bb = bb_pack(req);
		if (!bb) {
			free(s);
			return st ? status_local(st, ENOMEM, "cannot pack the request") : -ENOMEM;
		}
	}
	s->c = c;
	atomic_init(&s->cancelled, false);
	atomic_init(&s->recv_taken, false);
	pthread_mutex_init(&s->status_lock, NULL);
	grpc_metadata_array_init(&s->initial_md);
	grpc_metadata_array_init(&s->trailing_md);
	s->details = grpc_empty_slice();
	s->status = GRPC_STATUS_UNKNOWN;
	s->polls = !(flags & WSC_STREAM_NO_POLL) || !c->idle;
	s->cq = s->polls ? cq_get(c) : cq_new_nonpolling();
	if (!s->cq) {
		grpc_metadata_array_destroy(&s->initial_md);
		grpc_metadata_array_destroy(&s->trailing_md);
		pthread_mutex_destroy(&s->status_lock);
		if (bb)
			grpc_byte_buffer_destroy(bb);
		free(s);
		return st ? status_local(st, ENOMEM, "out of memory") : -ENOMEM;
	}
	s->chan = chan_get(c);
	s->call = call_new(s->chan, s->cq, method, deadline_of(c, timeout_ms));

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[0].data.recv_status_on_client.trailing_metadata = &s->trailing_md;
	ops[0].data.recv_status_on_client.status = &s->status;
	ops[0].data.recv_status_on_client.status_details = &s->details;
	e = grpc_call_start_batch(s->call, ops, 1, &s->tag_status, NULL);
	if (e != GRPC_CALL_OK) {
		struct wsc_status tmp;

		r = status_local(st ? st : &tmp, EIO, "%s: cannot start the call: %s", method,
				 grpc_call_error_to_string(e));
		/* Nothing to pluck: mark the status as known. */
		s->final = st ? *st : tmp;
		s->status_done = true;
		goto fail;
	}

	memset(ops, 0, sizeof(ops));
	ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[n].flags = c->md_flags;
	ops[n].data.send_initial_metadata.count = c->n_md;
	ops[n].data.send_initial_metadata.metadata = c->md;
	n++;
	if (bb) {
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n].data.send_message.send_message = bb;
		n++;
		ops[n].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
		n++;
		s->send_closed = true;
	}
	r = stream_batch(s, ops, n, &s->tag_send, true);
	if (r < 0 && bb) { /* stuck: gRPC may read it still; kept */
		s->stuck_bb = bb;
		bb = NULL;
	}
	if (r <= 0) {
		r = stream_status(s, st);
		if (r == 0)
			r = st ? status_local(st, EPIPE, "%s: the server ended the call at once",
					      method)
			       : -EPIPE;
		goto fail;
	}
	if (bb)
		grpc_byte_buffer_destroy(bb);
	*ret = s;
	return 0;

fail:
	if (bb)
		grpc_byte_buffer_destroy(bb);
	wsc_stream_free(s);
	return r;
}

/* Receive the next message into *@bb (NULL at the stream's end), with the
 * initial metadata the first time, and wait; false when the call is over.
 * The stream's receiving thread. */
static bool stream_recv_batch(struct wsc_stream *s, grpc_byte_buffer **bb)
{
	grpc_op ops[2];
	size_t n = 0;
	int r;

	*bb = NULL;
	memset(ops, 0, sizeof(ops));
	if (!s->got_initial_md) {
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
		n++;
	}
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n].data.recv_message.recv_message = &s->recv_bb;
	n++;
	s->recv_bb = NULL;
	r = stream_batch(s, ops, n, &s->tag_recv, false);
	s->got_initial_md = true;
	if (r >= 0) { /* ended: the buffer is ours (stuck: gRPC's still) */
		*bb = s->recv_bb;
		s->recv_bb = NULL;
	}
	return r > 0;
}

int wsc_stream_recv(struct wsc_stream *s, const ProtobufCMessageDescriptor *desc,
		    ProtobufCMessage **ret_msg, struct wsc_status *st)
{
	grpc_byte_buffer *bb;
	bool ok;
	int r;

	atomic_store(&s->recv_taken, true);
	if (s->recv_ended)
		return stream_status(s, st);
	ok = stream_recv_batch(s, &bb);
	if (!ok || !bb) {
		if (bb)
			grpc_byte_buffer_destroy(bb);
		s->recv_ended = true;
		return stream_status(s, st);
	}
	r = bb_unpack(bb, desc, ret_msg);
	grpc_byte_buffer_destroy(bb);
	if (r < 0) {
		if (st)
			status_local(st, -r, "a message does not decode as %s", desc->name);
		return r;
	}
	return 1;
}

int wsc_stream_send(struct wsc_stream *s, const ProtobufCMessage *msg, struct wsc_status *st)
{
	grpc_byte_buffer *bb;
	grpc_op op;
	int r;

	if (st)
		status_clear(st);
	if (s->send_closed) {
		struct wsc_status tmp;

		return status_local(st ? st : &tmp, EPIPE, "send after half-close");
	}
	bb = bb_pack(msg);
	if (!bb) {
		struct wsc_status tmp;

		return status_local(st ? st : &tmp, ENOMEM, "cannot pack a message");
	}
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	r = stream_batch(s, &op, 1, &s->tag_send, true);
	if (r >= 0)
		grpc_byte_buffer_destroy(bb);
	else if (!s->stuck_bb) /* stuck: gRPC may read it still; kept */
		s->stuck_bb = bb;
	else
		grpc_byte_buffer_destroy(bb); /* never sent: the stream stuck before */
	if (r > 0)
		return 0;
	/*
	 * The call is over (the server ended it with its status while our
	 * messages were still coming, as agentd does for an Upload it
	 * refuses). gRPC 1.51 has the server's trailers (a Trailers-Only
	 * response) but completes RECV_STATUS_ON_CLIENT only once initial
	 * metadata and messages were asked for: without that receive the
	 * status never came (wsctl put of 8 MiB to a missing directory hung
	 * for good). Nothing the server sent is wanted now. Not when a
	 * receiving thread has begun (a bidirectional stream): its receive
	 * is the one pending, and two would be one too many.
	 */
	if (!atomic_exchange(&s->recv_taken, true) && !s->recv_ended) {
		grpc_byte_buffer *rbb;

		(void)stream_recv_batch(s, &rbb);
		if (rbb)
			grpc_byte_buffer_destroy(rbb);
		s->recv_ended = true;
	}
	r = stream_status(s, st);
	return r ? r : -EPIPE;
}

int wsc_stream_close_send(struct wsc_stream *s, struct wsc_status *st)
{
	grpc_op op;
	int r;

	if (st)
		status_clear(st);
	if (s->send_closed)
		return 0;
	s->send_closed = true;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	if (stream_batch(s, &op, 1, &s->tag_send, true) > 0)
		return 0;
	r = stream_status(s, st);
	return r ? r : -EPIPE;
}

int wsc_stream_finish(struct wsc_stream *s, const ProtobufCMessageDescriptor *reply_desc,
		      ProtobufCMessage **ret_reply, struct wsc_status *st)
{
	ProtobufCMessage *reply = NULL;
	struct wsc_status tmp;
	int r;

	if (!st)
		st = &tmp;
	status_clear(st);
	(void)wsc_stream_close_send(s, NULL);
	if (reply_desc) {
		r = wsc_stream_recv(s, reply_desc, &reply, st);
		if (r == -EBADMSG) {
			wsc_stream_cancel(s);
			(void)stream_status(s, NULL);
			return r;
		}
	}
	r = stream_status(s, st);
	if (r < 0) {
		if (reply)
			protobuf_c_message_free_unpacked(reply, NULL);
		return r;
	}
	if (reply_desc && !reply)
		return status_local(st, EPROTO, "status OK without a reply");
	if (ret_reply)
		*ret_reply = reply;
	else if (reply)
		protobuf_c_message_free_unpacked(reply, NULL);
	return 0;
}

void wsc_stream_cancel(struct wsc_stream *s)
{
	atomic_store(&s->cancelled, true);
	/* Thread-safe per grpc.h ("THREAD-SAFETY grpc_call_cancel"). */
	grpc_call_cancel(s->call, NULL);
}

struct wsc_stream *wsc_stream_free(struct wsc_stream *s)
{
	bool done;

	if (!s)
		return NULL;
	pthread_mutex_lock(&s->status_lock);
	done = s->status_done;
	pthread_mutex_unlock(&s->status_lock);
	if (!done) {
		wsc_stream_cancel(s);
		(void)stream_status(s, NULL);
	}
	if (atomic_load(&s->stuck)) {
		/* gRPC may still end its batches into it: kept (g_stuck). */
		pthread_mutex_lock(&g_stuck_lock);
		s->stuck_next = g_stuck;
		g_stuck = s;
		pthread_mutex_unlock(&g_stuck_lock);
		return NULL;
	}
	grpc_call_unref(s->call);
	grpc_slice_unref(s->details);
	grpc_metadata_array_destroy(&s->initial_md);
	grpc_metadata_array_destroy(&s->trailing_md);
	pthread_mutex_destroy(&s->status_lock);
	if (s->polls)
		cq_put(s->c, s->cq);
	else
		cq_destroy(s->cq);
	chan_put(s->c, s->chan);
	free(s);
	return NULL;
}
