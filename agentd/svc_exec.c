/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The exec services: wsbridge.v1.Exec (Start, Attach, WriteStdin, Resize,
 * Signal, List, Wait) and ManageAgentOps/ExecuteCommands (Dev_Agent's unary
 * call that runs a list of shell commands and returns a transcript). They
 * translate between messages and the process table in exec.c.
 *
 * Start and Attach are server streams fed by a watcher of the process
 * (exec.h): Start's is lossless (a slow client slows the command down, as a
 * pipe would), Attach's never slows the command and reports what fell out of
 * the journal as ExecLost. One event is in flight per call (rpc_send); the
 * watcher is the queue, so nothing is buffered here.
 *
 * Runs on the loop thread only (RPC_ON_LOOP): the handlers, the rpc
 * callbacks and the exec callbacks all run there, so there are no locks.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentd.h"
#include "devagent.pb-c.h"
#include "exec.h"
#include "fsops.h"
#include "watch.h"
#include "wsb.h"
#include "wsbridge.pb-c.h"

/** Largest ExecOutput.data, bytes (wsbridge.proto: chunks of at most 1 MiB). */
#define SEND_MAX ((size_t)1024 * 1024)
/** Most env entries in one request (they are merged in O(n * environ)). */
#define START_MAX_ENV 4096
/** Longest TERM, bytes. */
#define TERM_MAX 256

/**
 * Longest a command's exit status waits for its changes to reach the Watch
 * streams (watch_barrier()), ms: a stalled watcher delays no exit longer.
 */
#define EXIT_BARRIER_MS 100u

/** ExecuteCommands: timeout of each command, ms (Dev_Agent had none). */
#define COMMANDS_TIMEOUT_MS ((uint64_t)10 * 60 * 1000)
/** ExecuteCommands: output kept per command (head and tail), bytes. */
#define COMMANDS_CAPTURE_MAX ((size_t)1024 * 1024)
/** ExecuteCommands: journal per command (it is read as it comes), bytes. */
#define COMMANDS_JOURNAL ((size_t)256 * 1024)
/**
 * ExecuteCommands: largest transcript, bytes; a client with grpcio's default
 * 4 MiB receive limit must be able to read the reply.
 */
#define COMMANDS_TRANSCRIPT_MAX ((size_t)4 * 1024 * 1024 - 64 * 1024)
/**
 * ExecuteCommands: raw transcript kept while the commands run, bytes: its
 * first and last halves, what lies between only counted (cmds_trim()), so
 * that a call of many chatty commands holds no more. Text that is valid
 * UTF-8 (the usual) needs no second cut at the reply: there is room for
 * the marker.
 */
#define COMMANDS_RAW_MAX (COMMANDS_TRANSCRIPT_MAX - 128)
/** ExecuteCommands: how far the transcript may grow past COMMANDS_RAW_MAX
 * before it is cut back (cmds_trim()), bytes. */
#define COMMANDS_TRIM_SLACK ((size_t)1024 * 1024)
/** ExecuteCommands: what a call sets aside in the reply budget before it
 * runs anything, bytes (cmds_reserve() grows it with the transcript). */
#define COMMANDS_RESERVE_FIRST ((size_t)64 * 1024)
/**
 * ExecuteCommands: how long a command's output may stay open after the
 * command itself ended, held by what it left running (`server &`), ms:
 * then the transcript goes on without it (exec_spec.linger_ms), and those
 * processes run on.
 */
#define COMMANDS_LINGER_MS 1000u
/** ExecuteCommands: largest commands.txt, bytes. */
#define COMMANDS_FILE_MAX ((size_t)1024 * 1024)

/** Longest quoted name in an error message, input bytes. */
#define ESC_MAX 200

/* ---- shared helpers ---- */

/* The process table; main.c creates it, this is a fallback. */
static struct exec_table *table_of(struct agentd *ad)
{
	if (!ad->exec && exec_table_new(ad->loop, NULL, &ad->exec) < 0)
		return NULL;
	return ad->exec;
}

/* NUL-terminated copy of a bytes field; -EINVAL if it contains a NUL. */
static int bytes_dup(const ProtobufCBinaryData *b, char **ret)
{
	char *s;

	if (b->len && memchr(b->data, 0, b->len))
		return -EINVAL;
	s = malloc(b->len + 1);
	if (!s)
		return -ENOMEM;
	if (b->len)
		memcpy(s, b->data, b->len);
	s[b->len] = '\0';
	*ret = s;
	return 0;
}

static void strv_free(char **v)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

/*
 * NULL-terminated array of copies of @p n bytes fields. On a NUL byte returns
 * -EINVAL and sets *ret_bad to the index.
 */
static int bytesv_dup(const ProtobufCBinaryData *b, size_t n, char ***ret, size_t *ret_bad)
{
	char **v = calloc(n + 1, sizeof(*v));
	size_t i;
	int r;

	if (!v)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		r = bytes_dup(&b[i], &v[i]);
		if (r < 0) {
			*ret_bad = i;
			strv_free(v);
			return r;
		}
	}
	*ret = v;
	return 0;
}

/* The smaller of a timeout (0 = none) and the caller's deadline, ms. */
static uint64_t timeout_with_deadline(uint64_t timeout_ms, struct rpc_call *call)
{
	uint64_t d = rpc_deadline_ms(call);

	if (d == UINT64_MAX)
		return timeout_ms;
	if (d == 0)
		d = 1; /* already due: the cancel is on its way */
	return timeout_ms && timeout_ms < d ? timeout_ms : d;
}

/* "process 12" or "process 12 ('tag')", for messages. */
static const char *proc_name(const struct exec_process *p, char *buf, size_t size)
{
	if (*exec_tag(p))
		snprintf(buf, size, "process %llu ('%s')", (unsigned long long)exec_id(p),
			 exec_tag(p));
	else
		snprintf(buf, size, "process %llu", (unsigned long long)exec_id(p));
	return buf;
}

/*
 * The process a ProcessRef names: by id, or by tag when id is 0. Answers the
 * call (INVALID_ARGUMENT, NOT_FOUND "unknown process") and returns NULL when
 * there is none.
 */
static struct exec_process *ref_find(struct rpc_call *call, struct agentd *ad,
				     const Wsbridge__V1__ProcessRef *ref)
{
	struct exec_table *t = table_of(ad);
	struct exec_process *p;
	char *q;

	if (!t) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return NULL;
	}
	if (!ref || (ref->id == 0 && (!ref->tag || !*ref->tag))) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "name the process: set process.id, or process.tag with id 0");
		return NULL;
	}
	if (ref->id) {
		p = exec_find(t, ref->id);
		if (!p)
			rpc_finish(call, WSB_NOT_FOUND, ESRCH,
				   "unknown process %llu (never started here, or its exit "
				   "status is no longer kept)",
				   (unsigned long long)ref->id);
		return p;
	}
	p = exec_find_tag(t, ref->tag);
	if (!p) {
		q = wsb_escape(ref->tag, strlen(ref->tag), ESC_MAX);
		rpc_finish(call, WSB_NOT_FOUND, ESRCH,
			   "unknown process tag '%s' (never started here, or its exit status is "
			   "no longer kept)",
			   q ? q : "?");
		free(q);
	}
	return p;
}

static void exit_to_msg(const struct exec_exit *in, Wsbridge__V1__ExecExit *out)
{
	out->code = in->code;
	out->signal = in->signal;
	out->timed_out = in->timed_out;
	out->core_dumped = in->core_dumped;
	out->killed_by = (Wsbridge__V1__KilledBy)in->killed_by;
}

/*
 * Fill @p pi from @p p. @p argv gets room for the argv entries (borrowed
 * strings of @p p) and @p ex the exit; the caller frees *argv.
 */
static int info_to_msg(const struct exec_process *p, Wsbridge__V1__ProcessInfo *pi,
		       Wsbridge__V1__ExecExit *ex, ProtobufCBinaryData **argv)
{
	struct exec_info in;
	size_t i;

	exec_get_info(p, &in);
	*argv = calloc(in.argc ? in.argc : 1, sizeof(**argv));
	if (!*argv)
		return -ENOMEM;
	for (i = 0; i < in.argc; i++) {
		(*argv)[i].data = (uint8_t *)in.argv[i];
		(*argv)[i].len = strlen(in.argv[i]);
	}
	pi->id = in.id;
	pi->pid = (uint32_t)in.pid;
	pi->tag = (char *)in.tag;
	pi->n_argv = in.argc;
	pi->argv = *argv;
	pi->cwd.data = (uint8_t *)in.cwd;
	pi->cwd.len = in.cwd_len;
	pi->start_time_ns = in.start_ns;
	pi->end_time_ns = in.end_ns;
	pi->stdout_bytes = in.bytes[EXEC_STDOUT];
	pi->stderr_bytes = in.bytes[EXEC_STDERR];
	pi->pty = in.pty;
	if (in.state == EXEC_EXITED) {
		pi->state = WSBRIDGE__V1__PROCESS_STATE__EXITED;
		exit_to_msg(&in.exit, ex);
		pi->exit = ex;
	} else {
		pi->state = WSBRIDGE__V1__PROCESS_STATE__RUNNING;
	}
	return 0;
}

/* ---- Exec/Start and Exec/Attach: a stream of one process's events ---- */

struct stream_ctx {
	struct rpc_call *call;       /* NULL once the call ended */
	struct exec_watch *w;        /* NULL when not watching (detach, ended) */
	uint64_t id;
	uint32_t pid;
	char tag[EXEC_TAG_MAX + 1];
	bool kill_on_detach;         /* Start: the command dies with the call */
	bool detach;                 /* Start: end after the started event */
	bool no_follow;              /* Attach: end once caught up */
	bool started_sent;
	bool sending;                /* an rpc_send is outstanding */
	bool done;                   /* the last event is on its way */
	bool end_wanted;             /* ended while sending: finish on sent */
	int end_code;
	const char *end_msg;         /* static */
	bool have_exit;              /* exit holds the exit event, not yet sent */
	struct exec_exit exit;
	struct watch_barrier *barrier; /* the exit waits for its changes */
	struct rpc_room_wait room;   /* output waits for room (stream_pump()) */
};

static void stream_maybe_free(struct stream_ctx *c)
{
	if (!c->call && !c->sending && !c->barrier) {
		rpc_room_cancel(&c->room);
		free(c);
	}
}

/* Stop watching; a kill_on_detach command that still runs dies (DETACHED). */
static void stream_unwatch(struct stream_ctx *c)
{
	struct exec_process *p;

	if (!c->w)
		return;
	p = exec_watch_process(c->w);
	if (c->kill_on_detach && !exec_exited(p)) {
		wsb_debug("exec: the call of process %llu ended: killing it (kill_on_detach)",
			  (unsigned long long)c->id);
		exec_kill(p, EXEC_KILLED_DETACHED);
	}
	exec_watch_free(c->w);
	c->w = NULL;
}

/* End the call (once) with @p code and static message @p msg. */
static void stream_end(struct stream_ctx *c, int code, const char *msg)
{
	struct rpc_call *call = c->call;

	if (!call || c->end_wanted)
		return;
	rpc_room_cancel(&c->room);
	stream_unwatch(c);
	watch_barrier_cancel(c->barrier);
	c->barrier = NULL;
	if (c->sending && code != WSB_OK) {
		/* One operation at a time: the outstanding send completes
		 * first (fast, once the call is cancelled). */
		c->end_wanted = true;
		c->end_code = code;
		c->end_msg = msg;
		return;
	}
	c->call = NULL;
	if (code == WSB_OK)
		rpc_finish(call, WSB_OK, 0, NULL);
	else
		rpc_finish(call, code, 0, "%s", msg);
}

static void stream_sent(struct rpc_call *call, bool ok, void *arg);
static void stream_barrier_done(void *arg);
static void stream_pump(struct stream_ctx *c);

/* rpc_room_wait()'s ready: the budget has room for output again. */
static void stream_room(struct rpc_room_wait *w, void *arg)
{
	struct stream_ctx *c = arg;

	(void)w;
	stream_pump(c);
	stream_maybe_free(c); /* the pump may have ended the call */
}

static void stream_send(struct stream_ctx *c, const ProtobufCMessage *msg)
{
	/* rpc_send packs the message before it returns (never refused for
	 * the reply budget: Exec is not reply_budget). */
	if (rpc_send(c->call, msg, stream_sent, c) < 0)
		stream_end(c, WSB_CANCELLED, "the call was cancelled");
	else
		c->sending = true;
}

/* Send the next event if none is outstanding. */
static void stream_pump(struct stream_ctx *c)
{
	Wsbridge__V1__ExecEvent ev = WSBRIDGE__V1__EXEC_EVENT__INIT;
	Wsbridge__V1__ExecStarted started = WSBRIDGE__V1__EXEC_STARTED__INIT;
	Wsbridge__V1__ExecOutput out = WSBRIDGE__V1__EXEC_OUTPUT__INIT;
	Wsbridge__V1__ExecExit ex = WSBRIDGE__V1__EXEC_EXIT__INIT;
	Wsbridge__V1__ExecLost lost = WSBRIDGE__V1__EXEC_LOST__INIT;
	struct exec_event e;
	size_t room;

	if (!c->call || c->sending || c->done || c->end_wanted || c->barrier || c->room.queued)
		return;
	if (c->have_exit)
		goto exited;
	if (!c->started_sent) {
		c->started_sent = true;
		started.id = c->id;
		started.pid = c->pid;
		started.tag = c->tag;
		ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STARTED;
		ev.started = &started;
		if (c->detach)
			c->done = true;
		stream_send(c, &ev.base);
		return;
	}
	if (!c->w)
		return;
	/*
	 * Output waits for room. Replies a client has not read stay in
	 * agentd (rpc_server.c "reply budget"); output is not refused like a
	 * pure read's reply, which its client would ask for again, but held
	 * back: no larger than the room left, none while that is under
	 * RPC_REPLY_SMALL (the command's output waits in its journal, and the
	 * command in its pipe once that is full, as for a client that reads
	 * slowly). The exit is small: it goes when no output is left.
	 */
	room = rpc_reply_room(c->call);
	if (room < RPC_REPLY_SMALL && exec_watch_has_output(c->w)) {
		rpc_room_wait(c->call, &c->room, RPC_REPLY_SMALL, stream_room, c);
		return;
	}
	switch (exec_watch_next(c->w, room < RPC_REPLY_SMALL ? 1 : room < SEND_MAX ? room : SEND_MAX,
				&e)) {
	case EXEC_EV_OUTPUT:
		out.offset = e.offset;
		out.data.data = (uint8_t *)e.data;
		out.data.len = e.len;
		if (e.stream == EXEC_STDOUT) {
			ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STDOUT;
			ev.stdout = &out;
		} else {
			ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STDERR;
			ev.stderr = &out;
		}
		break;
	case EXEC_EV_LOST:
		lost.stderr = e.stream == EXEC_STDERR;
		lost.offset = e.offset;
		lost.bytes = e.len;
		ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_LOST;
		ev.lost = &lost;
		break;
	case EXEC_EV_EXITED:
		/* The exit goes once the command's changes to the tree went
		 * out on the Watch streams: a client that reads the mount
		 * right after the command finds them there (README, R1). */
		c->exit = e.exit;
		c->have_exit = true;
		if (watch_barrier(svc_workspace_watcher(), EXIT_BARRIER_MS, stream_barrier_done, c,
				  &c->barrier) == 1)
			return;
		c->barrier = NULL;
		goto exited;
	case EXEC_EV_NONE:
		if (c->no_follow)
			stream_end(c, WSB_OK, NULL); /* caught up: the replay is over */
		return; /* else the watcher's ready callback comes back */
	}
	stream_send(c, &ev.base);
	return;
exited: {
	struct rpc_call *call = c->call;

	exit_to_msg(&c->exit, &ex);
	ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_EXITED;
	ev.exited = &ex;
	/* The last event and the OK status in one batch: one write and one
	 * wake-up less at the end of every command. */
	c->have_exit = false;
	c->done = true;
	stream_unwatch(c);
	c->call = NULL;
	(void)rpc_reply(call, &ev.base);
}
}

/* The barrier of the exit event (stream_pump()) is met: send it. */
static void stream_barrier_done(void *arg)
{
	struct stream_ctx *c = arg;

	c->barrier = NULL;
	stream_pump(c);
	stream_maybe_free(c);
}

static void stream_sent(struct rpc_call *call, bool ok, void *arg)
{
	struct stream_ctx *c = arg;

	c->sending = false;
	if (c->end_wanted) {
		c->call = NULL;
		rpc_finish(call, c->end_code, 0, "%s", c->end_msg);
	} else if (!ok) {
		stream_end(c, WSB_CANCELLED, "the call was cancelled");
	} else if (c->done) {
		stream_end(c, WSB_OK, NULL);
	} else {
		stream_pump(c);
	}
	stream_maybe_free(c);
}

static void stream_ready(struct exec_watch *w, void *arg)
{
	struct stream_ctx *c = arg;

	stream_pump(c);
	stream_maybe_free(c);
}

static void stream_cancel(struct rpc_call *call, void *arg)
{
	struct stream_ctx *c = arg;

	stream_end(c, WSB_CANCELLED, "the call was cancelled");
	stream_maybe_free(c);
}

/*
 * Start streaming @p p on @p call: the started event, then (unless
 * c->detach) the watcher's events. Takes ownership of @p c.
 */
static void stream_begin(struct rpc_call *call, struct stream_ctx *c, struct exec_process *p)
{
	c->call = call;
	c->id = exec_id(p);
	c->pid = (uint32_t)exec_pid(p);
	snprintf(c->tag, sizeof(c->tag), "%s", exec_tag(p));
	rpc_on_cancel(call, stream_cancel, c);
	stream_pump(c);
	stream_maybe_free(c);
}

/* Answer a failed spawn: what failed, quoted. */
static void start_spawn_failed(struct rpc_call *call, struct exec_table *t, int err,
			       const char *prog, const char *tag)
{
	char *q = wsb_escape(prog, strlen(prog), ESC_MAX);
	const char *name = q ? q : "?";
	struct exec_process *other;

	switch (err) {
	case ENOENT:
		rpc_finish(call, WSB_NOT_FOUND, ENOENT, "no such program '%s'", name);
		break;
	case EAGAIN:
		if (exec_table_running(t) >= exec_table_max(t))
			rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EAGAIN,
				   "too many processes running (limit %u, agentd --max-procs)",
				   exec_table_max(t));
		else /* clone(2) refused: RLIMIT_NPROC or the pod's pids.max */
			rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EAGAIN,
				   "cannot run '%s': the system refused a new process (EAGAIN: "
				   "the user's process limit, RLIMIT_NPROC, or the pod's pids "
				   "limit)", name);
		break;
	case EEXIST:
		other = exec_find_tag(t, tag);
		rpc_finish(call, WSB_ALREADY_EXISTS, EEXIST,
			   "tag '%s' is in use by process %llu (tags are unique among kept "
			   "processes)",
			   tag, other ? (unsigned long long)exec_id(other) : 0ULL);
		break;
	default:
		rpc_fail_errno(call, err, "cannot run '%s'", name);
		break;
	}
	free(q);
}

/* Answer a cwd that cannot be opened. */
static void cwd_failed(struct rpc_call *call, int err, const char *what, const void *path,
		       size_t len)
{
	char *q = wsb_escape(path, len, ESC_MAX);
	const char *name = q ? q : "?";

	switch (err) {
	case EXDEV:
		rpc_finish(call, WSB_PERMISSION_DENIED, EXDEV,
			   "%s '%s' is outside the workspace root", what, name);
		break;
	case ENOENT:
		rpc_finish(call, WSB_NOT_FOUND, ENOENT, "no such %s '%s'", what, name);
		break;
	default:
		rpc_fail_errno(call, err, "%s '%s'", what, name);
		break;
	}
	free(q);
}

/* INVALID_ARGUMENT for field[i] with a NUL byte. */
static void nul_failed(struct rpc_call *call, const char *field, size_t i)
{
	rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "%s[%zu] contains a NUL byte", field, i);
}

/* INVALID_ARGUMENT (E2BIG) for a string execve(2) cannot pass; false then. */
static bool arg_fits(struct rpc_call *call, const char *field, long i, size_t len)
{
	char at[32] = "";

	if (len < EXEC_ARG_STRLEN_MAX)
		return true;
	if (i >= 0)
		snprintf(at, sizeof(at), "[%ld]", i);
	rpc_finish(call, WSB_INVALID_ARGUMENT, E2BIG,
		   "%s%s is %zu bytes: a command's argument or environment string is "
		   "at most %zu (MAX_ARG_STRLEN, execve(2))",
		   field, at, len, EXEC_ARG_STRLEN_MAX - 1);
	return false;
}

/* Checks of the fields that need no allocation; answers and returns false. */
static bool start_check(struct rpc_call *call, const Wsbridge__V1__ExecRequest *req)
{
	size_t i;
	char *q;

	for (i = 0; i < req->n_argv; i++)
		if (!arg_fits(call, "argv", (long)i, req->argv[i].len))
			return false;
	for (i = 0; i < req->n_args; i++)
		if (!arg_fits(call, "args", (long)i, req->args[i].len))
			return false;
	for (i = 0; i < req->n_env; i++)
		if (!arg_fits(call, "env", (long)i, req->env[i].len))
			return false;
	if (!arg_fits(call, "shell", -1, req->shell.len))
		return false;

	if ((req->n_argv > 0) == (req->shell.len > 0)) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "set exactly one of argv and shell (got %s)",
			   req->n_argv ? "both" : "neither");
		return false;
	}
	if (req->n_argv && req->n_args) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "args are the positional parameters of shell; with argv put them in argv");
		return false;
	}
	if (req->n_argv && req->argv[0].len == 0) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "argv[0] is empty");
		return false;
	}
	if (req->n_env > START_MAX_ENV) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, E2BIG, "too many env entries (%zu, limit %d)",
			   req->n_env, START_MAX_ENV);
		return false;
	}
	if (req->stdin.len > EXEC_STDIN_QUEUE_MAX) {
		/* Every command's stdin waits in agentd until the command
		 * reads it: unchecked, 20 Starts of 60 MiB took 1.3 GB. */
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOBUFS,
			   "stdin of %zu bytes is more than a command's stdin may queue (%zu); "
			   "send the rest with WriteStdin (stdin_open)",
			   req->stdin.len, EXEC_STDIN_QUEUE_MAX);
		return false;
	}
	if (req->detach && req->kill_on_detach) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "detach and kill_on_detach exclude each other (the command would die "
			   "as soon as it started)");
		return false;
	}
	if (req->tag && *req->tag && exec_tag_check(req->tag) < 0) {
		q = wsb_escape(req->tag, strlen(req->tag), ESC_MAX);
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "bad tag '%s': 1 to %d printable ASCII characters without spaces, "
			   "not all digits",
			   q ? q : "?", EXEC_TAG_MAX);
		free(q);
		return false;
	}
	if (req->rows > 65535 || req->cols > 65535) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "PTY size %ux%u is too large (at most 65535 each)", req->rows, req->cols);
		return false;
	}
	if (req->term.len > TERM_MAX ||
	    (req->term.len && (memchr(req->term.data, 0, req->term.len) ||
			       memchr(req->term.data, '=', req->term.len)))) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "bad term: at most %d bytes, no NUL or '='", TERM_MAX);
		return false;
	}
	return true;
}

static void do_start(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__ExecRequest *req = (const void *)msg;
	struct agentd *ad = data;
	struct exec_table *t = table_of(ad);
	struct exec_spec spec = { .cwd_fd = -1 };
	struct stream_ctx *c = NULL;
	struct exec_process *p;
	char **argv = NULL, **args = NULL, **env = NULL, *shell = NULL, *term = NULL;
	size_t i, bad = 0;
	int r;

	if (!start_check(call, req))
		return;
	if (!t) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}

	if (req->n_argv) {
		r = bytesv_dup(req->argv, req->n_argv, &argv, &bad);
		if (r == -EINVAL) {
			nul_failed(call, "argv", bad);
			goto out;
		}
	} else {
		r = bytes_dup(&req->shell, &shell);
		if (r == -EINVAL) {
			rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "shell contains a NUL byte");
			goto out;
		}
		if (r == 0) {
			r = bytesv_dup(req->args, req->n_args, &args, &bad);
			if (r == -EINVAL) {
				nul_failed(call, "args", bad);
				goto out;
			}
		}
	}
	if (r == 0) {
		r = bytesv_dup(req->env, req->n_env, &env, &bad);
		if (r == -EINVAL) {
			nul_failed(call, "env", bad);
			goto out;
		}
	}
	if (r == 0 && req->term.len)
		r = bytes_dup(&req->term, &term);
	if (r < 0) {
		rpc_fail_errno(call, -r, "cannot start the command");
		goto out;
	}
	for (i = 0; i < req->n_env; i++) {
		char *eq = strchr(env[i], '=');

		if (!eq || eq == env[i]) {
			char *q = wsb_escape(env[i], strlen(env[i]), ESC_MAX);

			rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
				   "env[%zu] '%s' is not NAME=VALUE", i, q ? q : "?");
			free(q);
			goto out;
		}
	}

	r = exec_cwd_open(&ad->root, req->cwd.data, req->cwd.len);
	if (r < 0) {
		cwd_failed(call, -r, "working directory", req->cwd.data, req->cwd.len);
		goto out;
	}
	spec.cwd_fd = r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		goto out;
	}
	if (rpc_cancelled(call)) {
		rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled");
		goto out;
	}
	spec.argv = (const char *const *)argv;
	spec.shell = shell;
	spec.args = (const char *const *)args;
	spec.env = (const char *const *)env;
	spec.cwd_name = req->cwd.data;
	spec.cwd_len = req->cwd.len;
	spec.tag = req->tag;
	spec.stdin_data = req->stdin.data;
	spec.stdin_len = req->stdin.len;
	spec.stdin_open = req->stdin_open;
	spec.pty = req->pty;
	spec.rows = req->rows;
	spec.cols = req->cols;
	spec.term = term;
	spec.timeout_ms = req->timeout_ms;
	spec.idle_timeout_ms = req->idle_timeout_ms;
	spec.grace_ms = req->grace_ms;
	r = exec_spawn(t, &spec, &p);
	if (r < 0) {
		start_spawn_failed(call, t, -r, argv ? argv[0] : "/bin/sh", req->tag);
		goto out;
	}
	wsb_debug("exec: started process %llu, pid %d (%s)%s", (unsigned long long)exec_id(p),
		  exec_pid(p), argv ? argv[0] : "/bin/sh -c", req->detach ? ", detached" : "");
	c->detach = req->detach;
	c->kill_on_detach = req->kill_on_detach;
	if (!req->detach) {
		r = exec_watch_new(p, NULL, EXEC_WATCH_LOSSLESS, stream_ready, c, &c->w);
		if (r < 0) {
			if (req->kill_on_detach)
				exec_kill(p, EXEC_KILLED_DETACHED);
			rpc_fail_errno(call, -r, "cannot follow process %llu",
				       (unsigned long long)exec_id(p));
			goto out;
		}
	}
	stream_begin(call, c, p);
	c = NULL; /* owned by the callbacks now */
out:
	free(c);
	if (spec.cwd_fd >= 0)
		close(spec.cwd_fd);
	strv_free(argv);
	strv_free(args);
	strv_free(env);
	free(shell);
	free(term);
}

static void do_attach(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__AttachRequest *req = (const void *)msg;
	struct exec_process *p = ref_find(call, data, req->process);
	uint64_t from[EXEC_NSTREAMS] = { req->stdout_offset, req->stderr_offset };
	struct exec_info in;
	struct stream_ctx *c;
	char name[64 + EXEC_TAG_MAX];
	int r;

	if (!p)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	c->no_follow = req->no_follow;
	r = exec_watch_new(p, from, 0, stream_ready, c, &c->w);
	if (r == -ERANGE) {
		exec_get_info(p, &in);
		rpc_finish(call, WSB_OUT_OF_RANGE, ERANGE,
			   "offset beyond the output of %s: stdout_offset %llu of %llu bytes "
			   "written, stderr_offset %llu of %llu",
			   proc_name(p, name, sizeof(name)), (unsigned long long)from[0],
			   (unsigned long long)in.bytes[0], (unsigned long long)from[1],
			   (unsigned long long)in.bytes[1]);
		free(c);
		return;
	}
	if (r < 0) {
		rpc_fail_errno(call, -r, "cannot attach");
		free(c);
		return;
	}
	stream_begin(call, c, p);
}

/* ---- Exec/WriteStdin ---- */

struct stdin_ctx {
	struct rpc_call *call; /* NULL once the call ended */
	uint64_t id;
};

static void stdin_written(int err, void *arg)
{
	struct stdin_ctx *c = arg;
	Wsbridge__V1__Empty empty = WSBRIDGE__V1__EMPTY__INIT;

	if (c->call) {
		if (err == 0)
			rpc_reply(c->call, &empty.base);
		else
			rpc_finish(c->call, WSB_FAILED_PRECONDITION, EPIPE,
				   "stdin of process %llu closed before all bytes were written "
				   "(the command closed it or exited)",
				   (unsigned long long)c->id);
	}
	free(c);
}

static void stdin_cancel(struct rpc_call *call, void *arg)
{
	struct stdin_ctx *c = arg;

	/* The bytes stay queued; stdin_written frees c. */
	c->call = NULL;
	rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled");
}

static void do_write_stdin(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__StdinRequest *req = (const void *)msg;
	struct exec_process *p;
	struct stdin_ctx *c;
	char name[64 + EXEC_TAG_MAX];
	int r;

	if (req->data.len > EXEC_STDIN_CHUNK_MAX) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EMSGSIZE,
			   "stdin chunk of %zu bytes is larger than the limit of %zu bytes",
			   req->data.len, EXEC_STDIN_CHUNK_MAX);
		return;
	}
	p = ref_find(call, data, req->process);
	if (!p)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	c->id = exec_id(p);
	r = exec_write_stdin(p, req->data.data, req->data.len, req->eof, stdin_written, c);
	if (r == 0) {
		c->call = call;
		rpc_on_cancel(call, stdin_cancel, c);
		return;
	}
	free(c);
	proc_name(p, name, sizeof(name));
	switch (r) {
	case -EPIPE:
		rpc_finish(call, WSB_FAILED_PRECONDITION, EPIPE,
			   "stdin of %s is closed (%s)", name,
			   exec_exited(p) ? "it exited" :
					    "EOF was sent, or it was started without stdin_open");
		break;
	case -ENOBUFS:
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOBUFS,
			   "%s has %zu bytes of stdin queued already (limit %zu bytes): wait for "
			   "earlier writes",
			   name, exec_stdin_queued(p), EXEC_STDIN_QUEUE_MAX);
		break;
	default:
		rpc_fail_errno(call, -r, "cannot write to the stdin of %s", name);
		break;
	}
}

/* ---- Exec/Resize, Exec/Signal ---- */

static void do_resize(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__ResizeRequest *req = (const void *)msg;
	Wsbridge__V1__Empty empty = WSBRIDGE__V1__EMPTY__INIT;
	struct exec_process *p = ref_find(call, data, req->process);
	char name[64 + EXEC_TAG_MAX];
	int r;

	if (!p)
		return;
	proc_name(p, name, sizeof(name));
	if (!req->rows || !req->cols || req->rows > 65535 || req->cols > 65535) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "bad PTY size %ux%u (1 to 65535 rows and columns)", req->rows, req->cols);
		return;
	}
	r = exec_resize(p, req->rows, req->cols);
	if (r == 0)
		rpc_reply(call, &empty.base);
	else if (r == -ENOTTY)
		rpc_finish(call, WSB_FAILED_PRECONDITION, ENOTTY, "%s does not run on a PTY", name);
	else if (r == -ESRCH)
		rpc_finish(call, WSB_FAILED_PRECONDITION, ESRCH, "%s has exited", name);
	else
		rpc_fail_errno(call, -r, "cannot resize the PTY of %s", name);
}

static void do_signal(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__SignalRequest *req = (const void *)msg;
	Wsbridge__V1__Empty empty = WSBRIDGE__V1__EMPTY__INIT;
	struct exec_process *p = ref_find(call, data, req->process);
	char name[64 + EXEC_TAG_MAX];
	int r;

	if (!p)
		return;
	proc_name(p, name, sizeof(name));
	r = exec_signal(p, req->signal);
	if (r == 0)
		rpc_reply(call, &empty.base);
	else if (r == -EINVAL)
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "%d is not a signal number (1 to %d)", req->signal, _NSIG - 1);
	else if (r == -ESRCH)
		rpc_finish(call, WSB_FAILED_PRECONDITION, ESRCH, "%s has already exited", name);
	else
		rpc_fail_errno(call, -r, "cannot signal %s", name);
}

/* ---- Exec/List, Exec/Wait ---- */

static void do_list(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	struct agentd *ad = data;
	struct exec_table *t = table_of(ad);
	Wsbridge__V1__ListReply rep = WSBRIDGE__V1__LIST_REPLY__INIT;
	Wsbridge__V1__ProcessInfo *infos = NULL, **ptrs = NULL;
	Wsbridge__V1__ExecExit *exits = NULL;
	ProtobufCBinaryData **argvs = NULL;
	struct exec_process *p;
	size_t n = 0, i;

	if (!t) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	n = exec_table_count(t);
	infos = calloc(n + 1, sizeof(*infos));
	ptrs = calloc(n + 1, sizeof(*ptrs));
	exits = calloc(n + 1, sizeof(*exits));
	argvs = calloc(n + 1, sizeof(*argvs));
	if (!infos || !ptrs || !exits || !argvs)
		goto oom;
	for (i = 0, p = exec_table_next(t, NULL); p && i < n; p = exec_table_next(t, p), i++) {
		wsbridge__v1__process_info__init(&infos[i]);
		wsbridge__v1__exec_exit__init(&exits[i]);
		if (info_to_msg(p, &infos[i], &exits[i], &argvs[i]) < 0)
			goto oom;
		ptrs[i] = &infos[i];
	}
	rep.n_processes = i;
	rep.processes = ptrs;
	rpc_reply(call, &rep.base);
	goto out;
oom:
	rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
out:
	for (i = 0; argvs && i < n; i++)
		free(argvs[i]);
	free(argvs);
	free(exits);
	free(ptrs);
	free(infos);
}

/* Reply to @p call with @p p's ProcessInfo. */
static void reply_info(struct rpc_call *call, const struct exec_process *p)
{
	Wsbridge__V1__ProcessInfo pi = WSBRIDGE__V1__PROCESS_INFO__INIT;
	Wsbridge__V1__ExecExit ex = WSBRIDGE__V1__EXEC_EXIT__INIT;
	ProtobufCBinaryData *argv = NULL;

	if (info_to_msg(p, &pi, &ex, &argv) < 0)
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
	else
		rpc_reply(call, &pi.base);
	free(argv);
}

struct wait_ctx {
	struct rpc_call *call;
	struct exec_watch *w;
};

static void wait_ready(struct exec_watch *w, void *arg)
{
	struct wait_ctx *c = arg;
	struct exec_event e;

	if (exec_watch_next(w, 1, &e) != EXEC_EV_EXITED)
		return;
	reply_info(c->call, exec_watch_process(w));
	exec_watch_free(w);
	free(c);
}

static void wait_cancel(struct rpc_call *call, void *arg)
{
	struct wait_ctx *c = arg;

	exec_watch_free(c->w);
	rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled before the process exited");
	free(c);
}

static void do_wait(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__WaitRequest *req = (const void *)msg;
	struct exec_process *p = ref_find(call, data, req->process);
	struct wait_ctx *c;
	struct exec_event e;
	int r;

	if (!p)
		return;
	if (exec_exited(p)) {
		reply_info(call, p);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	c->call = call;
	r = exec_watch_new(p, NULL, EXEC_WATCH_EXIT_ONLY, wait_ready, c, &c->w);
	if (r < 0) {
		rpc_fail_errno(call, -r, "cannot wait");
		free(c);
		return;
	}
	/* Arms the ready callback (the process runs, so nothing comes now). */
	(void)exec_watch_next(c->w, 1, &e);
	rpc_on_cancel(call, wait_cancel, c);
}

/* ---- registration ---- */

static struct rpc_method exec_methods[] = {
	{ .path = "/wsbridge.v1.Exec/Start", .kind = RPC_SERVER_STREAM,
	  .request = &wsbridge__v1__exec_request__descriptor, .handler = do_start },
	{ .path = "/wsbridge.v1.Exec/Attach", .kind = RPC_SERVER_STREAM,
	  .request = &wsbridge__v1__attach_request__descriptor, .handler = do_attach },
	{ .path = "/wsbridge.v1.Exec/WriteStdin", .kind = RPC_UNARY,
	  .request = &wsbridge__v1__stdin_request__descriptor, .handler = do_write_stdin },
	{ .path = "/wsbridge.v1.Exec/Resize", .kind = RPC_UNARY,
	  .request = &wsbridge__v1__resize_request__descriptor, .handler = do_resize },
	{ .path = "/wsbridge.v1.Exec/Signal", .kind = RPC_UNARY,
	  .request = &wsbridge__v1__signal_request__descriptor, .handler = do_signal },
	{ .path = "/wsbridge.v1.Exec/List", .kind = RPC_UNARY,
	  .request = &wsbridge__v1__list_request__descriptor, .handler = do_list },
	{ .path = "/wsbridge.v1.Exec/Wait", .kind = RPC_UNARY,
	  .request = &wsbridge__v1__wait_request__descriptor, .handler = do_wait },
};

int svc_exec_register(struct rpc_server *s, struct agentd *ad)
{
	size_t i;
	int r;

	for (i = 0; i < sizeof(exec_methods) / sizeof(exec_methods[0]); i++) {
		exec_methods[i].thread = RPC_ON_LOOP;
		exec_methods[i].data = ad;
		r = rpc_server_register(s, &exec_methods[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- ManageAgentOps/ExecuteCommands ---- */

/* A growable byte buffer. */
struct buf {
	char *data;
	size_t len, cap;
	bool oom;
};

static char *buf_room(struct buf *b, size_t n)
{
	size_t cap;
	char *d;

	if (b->oom)
		return NULL;
	if (b->len + n > b->cap) {
		cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d) {
			b->oom = true;
			return NULL;
		}
		b->data = d;
		b->cap = cap;
	}
	return b->data + b->len;
}

static void buf_add(struct buf *b, const void *data, size_t n)
{
	char *d = buf_room(b, n);

	if (d) {
		memcpy(d, data, n);
		b->len += n;
	}
}

static void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

struct cmds_ctx {
	struct rpc_call *call;      /* NULL once the call ended */
	struct agentd *ad;
	char **cmds;                /* owned, NULL-terminated */
	size_t n, next;             /* count; index of the next to start */
	int dir_fd;                 /* O_PATH fd of ROOT/app_name */
	char *app;                  /* app_name, the commands' cwd */
	struct exec_watch *w;       /* watcher of the running command, or NULL */
	uint64_t timeout_ms;        /* of the running command */
	struct exec_capture cap;    /* its output */
	struct buf out;             /* transcript, raw bytes */
	uint64_t omitted;           /* raw bytes cut out of its middle */
	size_t reserved;            /* rpc_reserve()d for the reply, bytes */
	struct watch_barrier *barrier; /* the reply waits for the changes */
};

static void cmds_free(struct cmds_ctx *ctx)
{
	strv_free(ctx->cmds);
	free(ctx->app);
	if (ctx->dir_fd >= 0)
		close(ctx->dir_fd);
	exec_capture_done(&ctx->cap);
	free(ctx->out.data);
	free(ctx);
}

static const char *signal_name(int sig, char *tmp, size_t size)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(tmp, size, "SIG%s", abbrev);
	else
		snprintf(tmp, size, "%d", sig);
	return tmp;
}

/* Keep the transcript within COMMANDS_RAW_MAX: its first half stays, and
 * the newest bytes after it; the bytes between are counted in omitted, and
 * cmds_reply() puts a marker where they were. Done once it is @p slack
 * bytes over, so that a run of short commands past the limit moves the
 * tail once per @p slack bytes, not once per command (3,000,000 empty
 * commands that could not start held the loop for 86 s). */
static void cmds_trim(struct cmds_ctx *ctx, size_t slack)
{
	const size_t half = COMMANDS_RAW_MAX / 2, tail = COMMANDS_RAW_MAX - half;
	struct buf *b = &ctx->out;

	if (b->len <= COMMANDS_RAW_MAX + slack)
		return;
	ctx->omitted += b->len - COMMANDS_RAW_MAX;
	memmove(b->data + half, b->data + b->len - tail, tail);
	b->len = COMMANDS_RAW_MAX;
}

/*
 * Room in the reply budget for a transcript of @p len raw bytes (the
 * reply is at most COMMANDS_TRANSCRIPT_MAX): what was set aside grows
 * with the transcript (rpc_reserve()), so that unread transcripts stay
 * within --max-reply-bytes and calls with little output set aside
 * little. Returns false when the budget has no room for it.
 */
static bool cmds_reserve(struct cmds_ctx *ctx, size_t len)
{
	size_t want = len < COMMANDS_TRANSCRIPT_MAX ? len + RPC_REPLY_SMALL
						    : COMMANDS_TRANSCRIPT_MAX + RPC_REPLY_SMALL;

	if (!ctx->call || want <= ctx->reserved)
		return true;
	if (rpc_reserve(ctx->call, want - ctx->reserved) < 0)
		return false;
	ctx->reserved = want;
	return true;
}

/* Append the captured output of the command that just ended. */
static void cmds_add_output(struct cmds_ctx *ctx)
{
	struct exec_capture *c = &ctx->cap;
	size_t kept = exec_capture_kept(c), head;
	uint64_t omitted = exec_capture_omitted(c);
	char *d;

	if (!kept)
		return;
	if (!cmds_reserve(ctx, ctx->out.len + kept + 64)) {
		/* Dropped rather than held past the budget: the command ran,
		 * and its status still comes. */
		buf_printf(&ctx->out, "[%zu bytes of output not kept: %s]\n", kept,
			   "agentd holds --max-reply-bytes of replies unread");
		return;
	}
	d = buf_room(&ctx->out, kept + 64);
	if (!d)
		return;
	head = exec_capture_copy(c, (uint8_t *)d);
	if (omitted) {
		/* Put the marker on its own line between head and tail. */
		char marker[64];
		int m = snprintf(marker, sizeof(marker), "%s[... %llu bytes omitted ...]\n",
				 head && d[head - 1] != '\n' ? "\n" : "",
				 (unsigned long long)omitted);

		memmove(d + head + m, d + head, kept - head);
		memcpy(d + head, marker, (size_t)m);
		kept += (size_t)m;
	}
	ctx->out.len += kept;
	if (ctx->out.data[ctx->out.len - 1] != '\n')
		buf_str(&ctx->out, "\n");
}

static void cmds_add_status(struct cmds_ctx *ctx, const struct exec_exit *ex)
{
	char sig[32];

	if (ex->timed_out) {
		if (ctx->timeout_ms % 1000 == 0)
			buf_printf(&ctx->out, "[timed out after %llu s]\n",
				   (unsigned long long)(ctx->timeout_ms / 1000));
		else
			buf_printf(&ctx->out, "[timed out after %.3f s]\n",
				   (double)ctx->timeout_ms / 1000);
	} else if (ex->signal) {
		buf_printf(&ctx->out, "[killed by signal %s%s]\n",
			   signal_name(ex->signal, sig, sizeof(sig)),
			   ex->core_dumped ? " (core dumped)" : "");
	} else {
		buf_printf(&ctx->out, "[exit %d]\n", ex->code);
	}
}

/*
 * Reply with the transcript: valid UTF-8 (a proto3 string; clients that
 * check, such as Python's, fail on anything else) without NUL bytes (which
 * would end protobuf-c's char * string), cut in the middle if it would not
 * fit in a message a default client accepts.
 */
static void cmds_reply(struct cmds_ctx *ctx)
{
	ExecuteCommandsResponse resp = EXECUTE_COMMANDS_RESPONSE__INIT;
	struct rpc_call *call = ctx->call;
	char *text = NULL;
	size_t n = 0, head, tail, half;
	int m;

	ctx->call = NULL;
	cmds_trim(ctx, 0);
	if (ctx->omitted && !ctx->out.oom) {
		const size_t cut = COMMANDS_RAW_MAX / 2;
		char marker[80];

		m = snprintf(marker, sizeof(marker), "%s[... %llu bytes of output omitted ...]\n",
			     ctx->out.data[cut - 1] != '\n' ? "\n" : "",
			     (unsigned long long)ctx->omitted);
		if (buf_room(&ctx->out, (size_t)m)) {
			memmove(ctx->out.data + cut + m, ctx->out.data + cut, ctx->out.len - cut);
			memcpy(ctx->out.data + cut, marker, (size_t)m);
			ctx->out.len += (size_t)m;
		}
	}
	if (ctx->out.oom || ctx->out.len > (SIZE_MAX - 1) / 3 ||
	    !(text = malloc(3 * ctx->out.len + 1))) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory for the transcript");
		return;
	}
	if (ctx->out.len)
		n = exec_utf8_sanitize(ctx->out.data, ctx->out.len, text, true);
	if (n > COMMANDS_TRANSCRIPT_MAX) {
		/* Keep the head and the tail, each cut at a character
		 * boundary (not before a continuation byte 10xxxxxx). */
		char marker[80];

		half = COMMANDS_TRANSCRIPT_MAX / 2 - sizeof(marker);
		head = half;
		while (head && ((unsigned char)text[head] & 0xC0) == 0x80)
			head--;
		tail = n - half;
		while (tail < n && ((unsigned char)text[tail] & 0xC0) == 0x80)
			tail++;
		m = snprintf(marker, sizeof(marker), "\n[... %zu bytes of transcript omitted ...]\n",
			     tail - head);
		memcpy(text + head, marker, (size_t)m);
		memmove(text + head + m, text + tail, n - tail);
		n = head + (size_t)m + (n - tail);
	}
	text[n] = '\0';
	resp.status = text;
	rpc_reply(call, &resp.base);
	free(text);
}

static void cmds_ready(struct exec_watch *w, void *arg);

/* The barrier of the reply (cmds_next()) is met: reply, and free @arg
 * unless a command still runs (it cannot: the last one ended). */
static void cmds_barrier_done(void *arg)
{
	struct cmds_ctx *ctx = arg;

	ctx->barrier = NULL;
	cmds_reply(ctx);
	if (!ctx->w)
		cmds_free(ctx);
}

/* Start commands until one runs; reply when none is left, once the
 * commands' changes to the tree went out on the Watch streams (as
 * stream_pump()'s exit). */
static void cmds_next(struct cmds_ctx *ctx)
{
	struct exec_spec spec = {
		.cwd_fd = ctx->dir_fd,
		.combine_output = true,
		.journal_bytes = COMMANDS_JOURNAL,
		.linger_ms = COMMANDS_LINGER_MS,
	};
	struct exec_table *t = table_of(ctx->ad);
	struct exec_process *p = NULL;
	const char *cmd;
	int r;

	while (ctx->next < ctx->n) {
		cmds_trim(ctx, COMMANDS_TRIM_SLACK);
		cmd = ctx->cmds[ctx->next++];
		buf_str(&ctx->out, "$ ");
		buf_str(&ctx->out, cmd);
		buf_str(&ctx->out, "\n");
		exec_capture_done(&ctx->cap);
		r = exec_capture_init(&ctx->cap, COMMANDS_CAPTURE_MAX);
		if (r == 0) {
			spec.shell = cmd;
			spec.cwd_name = ctx->app;
			spec.cwd_len = strlen(ctx->app);
			ctx->timeout_ms = timeout_with_deadline(COMMANDS_TIMEOUT_MS, ctx->call);
			spec.timeout_ms = ctx->timeout_ms;
			r = exec_spawn(t, &spec, &p);
		}
		if (r == 0) {
			r = exec_watch_new(p, NULL, EXEC_WATCH_LOSSLESS, cmds_ready, ctx, &ctx->w);
			if (r == 0) {
				cmds_ready(ctx->w, ctx); /* arms the ready callback */
				return;
			}
			exec_kill(p, EXEC_KILLED_DETACHED);
		}
		if (r == -EAGAIN && exec_table_running(t) >= exec_table_max(t))
			buf_printf(&ctx->out, "[not started: too many commands running (limit %u)]\n",
				   exec_table_max(t));
		else if (r == -EAGAIN)
			buf_printf(&ctx->out, "[not started: the system refused a new process "
					      "(RLIMIT_NPROC or the pod's pids limit)]\n");
		else
			buf_printf(&ctx->out, "[not started: %s]\n", strerror(-r));
		if ((r == -EAGAIN || r == -ENOMEM) && ctx->next < ctx->n) {
			/* agentd's or the system's limit, not this command's
			 * fault: the ones after it would meet it too, and run
			 * without what this one was to do first. */
			buf_printf(&ctx->out, "[%zu more commands not run]\n", ctx->n - ctx->next);
			ctx->next = ctx->n;
		}
	}
	if (watch_barrier(svc_workspace_watcher(), EXIT_BARRIER_MS, cmds_barrier_done, ctx,
			  &ctx->barrier) == 1)
		return; /* ctx->call stays: nothing frees ctx meanwhile */
	ctx->barrier = NULL;
	cmds_reply(ctx);
}

/* The running command's output and exit. */
static void cmds_ready(struct exec_watch *w, void *arg)
{
	struct cmds_ctx *ctx = arg;
	struct exec_process *p = exec_watch_process(w);
	struct exec_event e;
	struct exec_exit ex;
	uint64_t id = exec_id(p);
	bool held = false;

	for (;;) {
		switch (exec_watch_next(w, EXEC_READ_CHUNK, &e)) {
		case EXEC_EV_OUTPUT:
			exec_capture_add(&ctx->cap, e.data, e.len);
			continue;
		case EXEC_EV_LOST: /* not with a lossless watcher */
			continue;
		case EXEC_EV_NONE:
			if (!exec_output_held(p, &ex))
				return;
			held = true;
			break;
		case EXEC_EV_EXITED:
			ex = e.exit;
			break;
		}
		break;
	}
	exec_watch_free(w); /* a held process runs on */
	ctx->w = NULL;
	cmds_add_output(ctx);
	cmds_add_status(ctx, &ex);
	if (held)
		buf_printf(&ctx->out, "[what it started in the background still runs, its later "
				      "output not shown here: command %llu (wsctl attach %llu)]\n",
			   (unsigned long long)id, (unsigned long long)id);
	cmds_trim(ctx, COMMANDS_TRIM_SLACK);
	if (ex.killed_by == EXEC_KILLED_SHUTDOWN && ctx->next < ctx->n) {
		/* Killed by agentd itself (it is stopping), not by the
		 * command's timeout: do not start the rest. */
		buf_printf(&ctx->out, "[agentd stopped; %zu more commands not run]\n",
			   ctx->n - ctx->next);
		ctx->next = ctx->n;
	}
	cmds_next(ctx);
	if (!ctx->call && !ctx->w)
		cmds_free(ctx);
}

static void cmds_cancel(struct rpc_call *call, void *arg)
{
	struct cmds_ctx *ctx = arg;

	ctx->call = NULL;
	rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled");
	watch_barrier_cancel(ctx->barrier);
	ctx->barrier = NULL;
	if (ctx->w) {
		exec_kill(exec_watch_process(ctx->w), EXEC_KILLED_DETACHED);
		exec_watch_free(ctx->w);
		ctx->w = NULL;
	}
	cmds_free(ctx);
}

static bool blank(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\v' && s[i] != '\f')
			return false;
	return true;
}

/*
 * Read ROOT/@p app/commands.txt into ctx->cmds: its non-blank lines ("\n" or
 * "\r\n" ended). Answers the call and returns < 0 on failure.
 */
static int cmds_load(struct rpc_call *call, struct cmds_ctx *ctx, const char *app)
{
	size_t alen = strlen(app), len = 0, i, start, n;
	char *path = malloc(alen + sizeof("/commands.txt"));
	char *text = NULL;
	int r = 0;

	if (!path)
		goto oom;
	memcpy(path, app, alen);
	strcpy(path + alen, "/commands.txt");
	/* A regular file only, and known to be one before it is opened: a
	 * FIFO would block the loop, a device would be opened (its side
	 * effects; a terminal could become agentd's). */
	r = fsops_read_file(&ctx->ad->root, path, strlen(path), COMMANDS_FILE_MAX, &text, &len);
	if (r == -EISDIR || r == -EINVAL) {
		rpc_finish(call, WSB_FAILED_PRECONDITION, EINVAL, "'%.200s' is not a regular file",
			   path);
		goto out;
	}
	if (r == -EFBIG) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EFBIG, "'%.200s' is larger than %zu bytes",
			   path, (size_t)COMMANDS_FILE_MAX);
		goto out;
	}
	if (r == -ENOMEM)
		goto oom;
	if (r < 0) {
		cwd_failed(call, -r, "commands file", path, strlen(path));
		goto out;
	}
	if (len && memchr(text, 0, len)) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "'%.200s' contains a NUL byte", path);
		r = -EINVAL;
		goto out;
	}
	ctx->cmds = calloc(len / 2 + 2, sizeof(*ctx->cmds));
	if (!ctx->cmds)
		goto oom;
	for (start = 0; start < len; start = i + 1) {
		for (i = start; i < len && text[i] != '\n'; i++)
			;
		n = i - start;
		if (n && text[start + n - 1] == '\r')
			n--;
		if (blank(text + start, n))
			continue;
		ctx->cmds[ctx->n] = strndup(text + start, n);
		if (!ctx->cmds[ctx->n])
			goto oom;
		ctx->n++;
	}
	goto out;
oom:
	rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
	r = -ENOMEM;
out:
	free(text);
	free(path);
	return r;
}

/* mkdir -p ROOT/@p path, each component created with mkdirat beneath the
 * root. A path whose ".." climb above where it started (a/../..) is -EXDEV
 * before anything is made: the open that follows would refuse it, and the
 * directories on the way would stay behind. */
static int mkdir_p(const struct resolve_root *root, const char *path)
{
	char *norm = NULL, *name = NULL;
	size_t len, end, start;
	int dirfd, r;

	r = resolve_normalize(path, strlen(path), &norm);
	if (r < 0)
		return r;
	len = strlen(norm);
	if (resolve_climbs_out(norm)) {
		free(norm);
		return -EXDEV;
	}
	for (start = 0; start < len; start = end + 1) {
		for (end = start; end < len && norm[end] != '/'; end++)
			;
		if (end == start || (end - start == 1 && norm[start] == '.') ||
		    (end - start == 2 && norm[start] == '.' && norm[start + 1] == '.'))
			continue;
		r = resolve_parent(root, norm, end, &dirfd, &name);
		if (r < 0)
			break;
		r = mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
		close(dirfd);
		free(name);
		if (r < 0)
			break;
	}
	free(norm);
	return r;
}

void svc_devagent_execute_commands(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const ExecuteCommandsRequest *req = (const void *)msg;
	struct agentd *ad = data;
	const char *app = req->app_name ? req->app_name : "";
	struct cmds_ctx *ctx;
	size_t i;
	int r;

	if (!table_of(ad)) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	/* Room in the reply budget for a start, before anything runs (a
	 * refusal then undoes nothing; cmds_reserve() grows it with the
	 * transcript): calls whose clients never read their transcripts stop
	 * at the budget instead of growing agentd. */
	if (rpc_reserve(call, COMMANDS_RESERVE_FIRST) < 0) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOBUFS, "%s", RPC_NO_ROOM_RESERVE_MSG);
		return;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	ctx->ad = ad;
	ctx->dir_fd = -1;
	ctx->reserved = COMMANDS_RESERVE_FIRST;
	ctx->app = strdup(app);
	if (!ctx->app)
		goto oom;

	if (req->load_from_file) {
		if (cmds_load(call, ctx, app) < 0)
			goto fail;
	} else {
		ctx->cmds = calloc(req->n_cmds + 1, sizeof(*ctx->cmds));
		if (!ctx->cmds)
			goto oom;
		for (i = 0; i < req->n_cmds; i++) {
			ctx->cmds[i] = strdup(req->cmds[i] ? req->cmds[i] : "");
			if (!ctx->cmds[i])
				goto oom;
		}
		ctx->n = req->n_cmds;
	}

	r = exec_cwd_open(&ad->root, app, strlen(app));
	if (r == -ENOENT && resolve_has_dotdot(app) && !resolve_climbs_out(app)) {
		/* resolve_has_dotdot(): refused before anything is made. */
		char *q = wsb_escape(app, strlen(app), ESC_MAX);

		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "bad app_name '%s': a '..' in a path whose directories do not all "
			   "exist yet", q ? q : "?");
		free(q);
		goto fail;
	}
	if (r == -ENOENT) {
		r = mkdir_p(&ad->root, app);
		if (r == 0)
			r = exec_cwd_open(&ad->root, app, strlen(app));
	}
	if (r < 0) {
		if (r == -EINVAL || r == -ENAMETOOLONG || r == -EBUSY) {
			char *q = wsb_escape(app, strlen(app), ESC_MAX);

			rpc_finish(call, WSB_INVALID_ARGUMENT, -r, "bad app_name '%s': %s",
				   q ? q : "?", strerror(-r));
			free(q);
		} else
			cwd_failed(call, -r, "app directory", app, strlen(app));
		goto fail;
	}
	ctx->dir_fd = r;
	if (rpc_cancelled(call)) {
		rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled");
		goto fail;
	}
	ctx->call = call;
	rpc_on_cancel(call, cmds_cancel, ctx);
	cmds_next(ctx);
	if (!ctx->call && !ctx->w)
		cmds_free(ctx);
	return;
oom:
	rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
fail:
	cmds_free(ctx);
}
