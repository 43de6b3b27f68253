/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The exec services: wsbridge.v1.Exec/Start (a server stream of a command's
 * pid, output and exit) and ManageAgentOps/ExecuteCommands (Dev_Agent's
 * unary call that runs a list of shell commands and returns a transcript).
 * Both translate between messages and the process runner in exec.c.
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
#include "wsb.h"
#include "wsbridge.pb-c.h"

/** Largest ExecOutput.data, bytes (wsbridge.proto: chunks of at most 1 MiB). */
#define START_SEND_MAX ((size_t)1024 * 1024)
/** Output queued behind a send above which reading pauses, bytes. */
#define START_QUEUE_HIGH ((size_t)1024 * 1024)
/** Queued output below which reading resumes, bytes. */
#define START_QUEUE_LOW ((size_t)256 * 1024)
/** Most env entries in one request (they are merged in O(n * environ)). */
#define START_MAX_ENV 4096

/** ExecuteCommands: timeout of each command, ms (Dev_Agent had none). */
#define COMMANDS_TIMEOUT_MS ((uint64_t)10 * 60 * 1000)
/** ExecuteCommands: output kept per command (head and tail), bytes. */
#define COMMANDS_CAPTURE_MAX ((size_t)1024 * 1024)
/**
 * ExecuteCommands: largest transcript, bytes; a client with grpcio's default
 * 4 MiB receive limit must be able to read the reply.
 */
#define COMMANDS_TRANSCRIPT_MAX ((size_t)4 * 1024 * 1024 - 64 * 1024)
/** ExecuteCommands: largest commands.txt, bytes. */
#define COMMANDS_FILE_MAX ((size_t)1024 * 1024)

/** Longest quoted name in an error message, input bytes. */
#define ESC_MAX 200

/* ---- shared helpers ---- */

/* The process table; main.c creates it, this is a fallback. */
static struct exec_table *table_of(struct agentd *ad)
{
	if (!ad->exec && exec_table_new(ad->loop, EXEC_MAX_PROCESSES_DEFAULT, &ad->exec) < 0)
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

/* ---- Exec/Start ---- */

enum ev_kind { EV_STARTED, EV_STDOUT, EV_STDERR, EV_EXITED };

/* One queued ExecEvent; output events grow by coalescing. */
struct ev {
	struct ev *next;
	enum ev_kind kind;
	uint64_t offset;
	size_t len, cap;
	uint8_t *data;
};

struct start_ctx {
	struct rpc_call *call;      /* NULL once the call ended */
	struct exec_process *proc;  /* NULL once exited */
	struct ev *head, *tail;     /* events not yet handed to rpc_send */
	size_t queued;              /* output bytes in the queue */
	bool sending;               /* an rpc_send is outstanding */
	bool paused;                /* we paused the process's reading */
	bool end_wanted;            /* failed while sending: end on sent */
	int end_code;               /* ... with this status */
	const char *end_msg;        /* ... and message (static) */
	uint32_t pid;
	struct exec_exit ex;
};

static void ev_free(struct ev *e)
{
	free(e->data);
	free(e);
}

static void start_queue_drop(struct start_ctx *ctx)
{
	struct ev *e;

	while ((e = ctx->head)) {
		ctx->head = e->next;
		ev_free(e);
	}
	ctx->tail = NULL;
	ctx->queued = 0;
}

static void start_maybe_free(struct start_ctx *ctx)
{
	if (ctx->call || ctx->proc)
		return;
	start_queue_drop(ctx);
	free(ctx);
}

/*
 * End the call (once), with @p code and static message @p msg; kills the
 * process if it still runs.
 */
static void start_end(struct start_ctx *ctx, int code, const char *msg)
{
	struct rpc_call *call = ctx->call;

	if (!call)
		return;
	if (ctx->proc)
		exec_kill(ctx->proc);
	start_queue_drop(ctx);
	if (ctx->sending && code != WSB_OK) {
		/* Let the outstanding send complete first (it fails fast once
		 * the call is cancelled); start_sent ends the call. */
		ctx->end_wanted = true;
		ctx->end_code = code;
		ctx->end_msg = msg;
		return;
	}
	ctx->call = NULL;
	if (code == WSB_OK)
		rpc_finish(call, WSB_OK, 0, NULL);
	else
		rpc_finish(call, code, 0, "%s", msg);
}

static void start_sent(struct rpc_call *call, bool ok, void *arg);

/* Send the next queued event if no send is outstanding. */
static void start_pump(struct start_ctx *ctx)
{
	Wsbridge__V1__ExecEvent ev = WSBRIDGE__V1__EXEC_EVENT__INIT;
	Wsbridge__V1__ExecOutput out = WSBRIDGE__V1__EXEC_OUTPUT__INIT;
	Wsbridge__V1__ExecExit ex = WSBRIDGE__V1__EXEC_EXIT__INIT;
	struct ev *e = ctx->head;
	Wsbridge__V1__ExecStarted started = WSBRIDGE__V1__EXEC_STARTED__INIT;
	int r;

	if (!ctx->call || ctx->sending || !e)
		return;
	switch (e->kind) {
	case EV_STARTED:
		ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STARTED;
		started.pid = ctx->pid;
		ev.started = &started;
		break;
	case EV_STDOUT:
	case EV_STDERR:
		out.offset = e->offset;
		out.data.data = e->data;
		out.data.len = e->len;
		if (e->kind == EV_STDOUT) {
			ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STDOUT;
			ev.stdout = &out;
		} else {
			ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_STDERR;
			ev.stderr = &out;
		}
		break;
	case EV_EXITED:
		ex.code = ctx->ex.code;
		ex.signal = ctx->ex.signal;
		ex.timed_out = ctx->ex.timed_out;
		ex.core_dumped = ctx->ex.core_dumped;
		ev.event_case = WSBRIDGE__V1__EXEC_EVENT__EVENT_EXITED;
		ev.exited = &ex;
		break;
	}
	/* rpc_send packs the message before it returns. */
	r = rpc_send(ctx->call, &ev.base, start_sent, ctx);
	if (r < 0) {
		start_end(ctx, WSB_CANCELLED, "the call was cancelled");
		return;
	}
	ctx->sending = true;
	ctx->head = e->next;
	if (!ctx->head)
		ctx->tail = NULL;
	if (e->kind == EV_STDOUT || e->kind == EV_STDERR)
		ctx->queued -= e->len;
	ev_free(e);
	if (ctx->paused && ctx->queued < START_QUEUE_LOW && ctx->proc) {
		ctx->paused = false;
		exec_resume(ctx->proc);
	}
}

static void start_sent(struct rpc_call *call, bool ok, void *arg)
{
	struct start_ctx *ctx = arg;

	ctx->sending = false;
	if (ctx->end_wanted) {
		ctx->end_wanted = false;
		start_end(ctx, ctx->end_code, ctx->end_msg);
	} else if (!ok) {
		start_end(ctx, WSB_CANCELLED, "the call was cancelled");
	} else if (!ctx->head && !ctx->proc) {
		/* The exit event was the last one. */
		start_end(ctx, WSB_OK, NULL);
	} else {
		start_pump(ctx);
	}
	start_maybe_free(ctx);
}

static int start_enqueue(struct start_ctx *ctx, enum ev_kind kind, uint64_t offset,
			 const void *data, size_t len)
{
	struct ev *t = ctx->tail, *e;
	size_t cap;
	uint8_t *d;

	/* Coalesce with the queued chunk of the same stream while a send is
	 * outstanding, up to START_SEND_MAX. */
	if (len && t && t->kind == kind && t->offset + t->len == offset &&
	    t->len + len <= START_SEND_MAX) {
		if (t->len + len > t->cap) {
			cap = t->cap * 2 > t->len + len ? t->cap * 2 : t->len + len;
			if (cap > START_SEND_MAX)
				cap = START_SEND_MAX;
			d = realloc(t->data, cap);
			if (!d)
				return -ENOMEM;
			t->data = d;
			t->cap = cap;
		}
		memcpy(t->data + t->len, data, len);
		t->len += len;
		ctx->queued += len;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (len) {
		e->data = malloc(len);
		if (!e->data) {
			free(e);
			return -ENOMEM;
		}
		memcpy(e->data, data, len);
	}
	e->kind = kind;
	e->offset = offset;
	e->len = e->cap = len;
	if (ctx->tail)
		ctx->tail->next = e;
	else
		ctx->head = e;
	ctx->tail = e;
	ctx->queued += len;
	return 0;
}

static void start_output(struct exec_process *p, enum exec_stream stream, uint64_t offset,
			 const void *data, size_t len, void *arg)
{
	struct start_ctx *ctx = arg;

	if (!ctx->call)
		return;
	if (start_enqueue(ctx, stream == EXEC_STDOUT ? EV_STDOUT : EV_STDERR, offset, data,
			  len) < 0) {
		start_end(ctx, WSB_RESOURCE_EXHAUSTED, "out of memory queueing output");
		return;
	}
	if (!ctx->paused && ctx->queued >= START_QUEUE_HIGH) {
		ctx->paused = true;
		exec_pause(p);
	}
	start_pump(ctx);
}

static void start_exited(struct exec_process *p, const struct exec_exit *ex, void *arg)
{
	struct start_ctx *ctx = arg;

	ctx->proc = NULL;
	ctx->ex = *ex;
	if (ctx->call) {
		if (start_enqueue(ctx, EV_EXITED, 0, NULL, 0) < 0)
			start_end(ctx, WSB_RESOURCE_EXHAUSTED, "out of memory");
		else
			start_pump(ctx);
	}
	start_maybe_free(ctx);
}

static void start_cancel(struct rpc_call *call, void *arg)
{
	struct start_ctx *ctx = arg;

	start_end(ctx, WSB_CANCELLED, "the call was cancelled");
	start_maybe_free(ctx);
}

static const struct exec_ops start_ops = {
	.output = start_output,
	.exited = start_exited,
};

/* Answer a failed spawn: what failed, quoted. */
static void start_spawn_failed(struct rpc_call *call, struct exec_table *t, int err,
			       const char *prog)
{
	char *q = wsb_escape(prog, strlen(prog), ESC_MAX);
	const char *name = q ? q : "?";

	switch (err) {
	case ENOENT:
		rpc_finish(call, WSB_NOT_FOUND, ENOENT, "no such program '%s'", name);
		break;
	case EAGAIN:
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EAGAIN,
			   "too many commands running (limit %u)", exec_table_max(t));
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

static void do_start(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Wsbridge__V1__ExecRequest *req = (const void *)msg;
	struct agentd *ad = data;
	struct exec_table *t = table_of(ad);
	struct exec_spec spec = { .cwd_fd = -1 };
	struct start_ctx *ctx = NULL;
	char **argv = NULL, **args = NULL, **env = NULL, *shell = NULL;
	size_t i, bad = 0;
	int r;

	if ((req->n_argv > 0) == (req->shell.len > 0)) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "set exactly one of argv and shell (got %s)",
			   req->n_argv ? "both" : "neither");
		return;
	}
	if (req->n_argv && req->n_args) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "args are the positional parameters of shell; with argv put them in argv");
		return;
	}
	if (req->n_argv && req->argv[0].len == 0) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "argv[0] is empty");
		return;
	}
	if (req->n_env > START_MAX_ENV) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, E2BIG, "too many env entries (%zu, limit %d)",
			   req->n_env, START_MAX_ENV);
		return;
	}
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

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
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
	spec.stdin_data = req->stdin.data;
	spec.stdin_len = req->stdin.len;
	spec.timeout_ms = timeout_with_deadline(req->timeout_ms, call);
	r = exec_spawn(t, &spec, &start_ops, ctx, &ctx->proc);
	if (r < 0) {
		start_spawn_failed(call, t, -r, argv ? argv[0] : "/bin/sh");
		goto out;
	}
	ctx->call = call;
	ctx->pid = (uint32_t)exec_pid(ctx->proc);
	wsb_debug("exec: started pid %d (%s)", exec_pid(ctx->proc), argv ? argv[0] : "/bin/sh -c");
	rpc_on_cancel(call, start_cancel, ctx);
	if (start_enqueue(ctx, EV_STARTED, 0, NULL, 0) < 0)
		start_end(ctx, WSB_RESOURCE_EXHAUSTED, "out of memory");
	else
		start_pump(ctx);
	ctx = NULL; /* owned by the callbacks now */
out:
	free(ctx);
	if (spec.cwd_fd >= 0)
		close(spec.cwd_fd);
	strv_free(argv);
	strv_free(args);
	strv_free(env);
	free(shell);
}

static struct rpc_method exec_start = {
	.path = "/wsbridge.v1.Exec/Start",
	.kind = RPC_SERVER_STREAM,
	.thread = RPC_ON_LOOP,
	.request = &wsbridge__v1__exec_request__descriptor,
	.handler = do_start,
};

int svc_exec_register(struct rpc_server *s, struct agentd *ad)
{
	exec_start.data = ad;
	return rpc_server_register(s, &exec_start);
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
	struct exec_process *proc;  /* running command, or NULL */
	uint64_t timeout_ms;        /* of the running command */
	struct exec_capture cap;    /* its output */
	struct buf out;             /* transcript, raw bytes */
};

static void cmds_free(struct cmds_ctx *ctx)
{
	strv_free(ctx->cmds);
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

/* Append the captured output of the command that just ended. */
static void cmds_add_output(struct cmds_ctx *ctx)
{
	struct exec_capture *c = &ctx->cap;
	size_t kept = exec_capture_kept(c), head;
	uint64_t omitted = exec_capture_omitted(c);
	char *d;

	if (!kept)
		return;
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

static const struct exec_ops cmds_ops;

/* Start commands until one runs; reply when none is left. */
static void cmds_next(struct cmds_ctx *ctx)
{
	struct exec_spec spec = { .cwd_fd = ctx->dir_fd, .combine_output = true };
	const char *cmd;
	int r;

	while (ctx->next < ctx->n) {
		cmd = ctx->cmds[ctx->next++];
		buf_str(&ctx->out, "$ ");
		buf_str(&ctx->out, cmd);
		buf_str(&ctx->out, "\n");
		exec_capture_done(&ctx->cap);
		r = exec_capture_init(&ctx->cap, COMMANDS_CAPTURE_MAX);
		if (r == 0) {
			spec.shell = cmd;
			ctx->timeout_ms = timeout_with_deadline(COMMANDS_TIMEOUT_MS, ctx->call);
			spec.timeout_ms = ctx->timeout_ms;
			r = exec_spawn(table_of(ctx->ad), &spec, &cmds_ops, ctx, &ctx->proc);
		}
		if (r == 0)
			return;
		if (r == -EAGAIN)
			buf_printf(&ctx->out, "[not started: too many commands running (limit %u)]\n",
				   exec_table_max(table_of(ctx->ad)));
		else
			buf_printf(&ctx->out, "[not started: %s]\n", strerror(-r));
	}
	cmds_reply(ctx);
}

static void cmds_output(struct exec_process *p, enum exec_stream stream, uint64_t offset,
			const void *data, size_t len, void *arg)
{
	struct cmds_ctx *ctx = arg;

	exec_capture_add(&ctx->cap, data, len);
}

static void cmds_exited(struct exec_process *p, const struct exec_exit *ex, void *arg)
{
	struct cmds_ctx *ctx = arg;

	ctx->proc = NULL;
	if (!ctx->call) {
		cmds_free(ctx); /* cancelled */
		return;
	}
	cmds_add_output(ctx);
	cmds_add_status(ctx, ex);
	if (ex->killed && ctx->next < ctx->n) {
		/* Killed by agentd itself (exec_table_kill_all at shutdown),
		 * not by the command's timeout: do not start the rest. */
		buf_printf(&ctx->out, "[agentd stopped; %zu more commands not run]\n",
			   ctx->n - ctx->next);
		ctx->next = ctx->n;
	}
	cmds_next(ctx);
	if (!ctx->call && !ctx->proc)
		cmds_free(ctx);
}

static const struct exec_ops cmds_ops = {
	.output = cmds_output,
	.exited = cmds_exited,
};

static void cmds_cancel(struct rpc_call *call, void *arg)
{
	struct cmds_ctx *ctx = arg;

	ctx->call = NULL;
	rpc_finish(call, WSB_CANCELLED, 0, "the call was cancelled");
	if (ctx->proc)
		exec_kill(ctx->proc); /* cmds_exited frees ctx */
	else
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
	size_t alen = strlen(app), cap = COMMANDS_FILE_MAX, len = 0, i, start, n;
	char *path = malloc(alen + sizeof("/commands.txt"));
	char *text = NULL;
	struct stat st;
	ssize_t got;
	int fd = -1, r = 0;

	if (!path)
		goto oom;
	memcpy(path, app, alen);
	strcpy(path + alen, "/commands.txt");
	/* O_NONBLOCK: a FIFO named commands.txt must not block the loop. */
	fd = resolve_open(&ctx->ad->root, path, strlen(path), O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0) {
		cwd_failed(call, -fd, "commands file", path, strlen(path));
		r = fd;
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rpc_finish(call, WSB_FAILED_PRECONDITION, EINVAL, "'%.200s' is not a regular file",
			   path);
		r = -EINVAL;
		goto out;
	}
	text = malloc(cap + 1);
	if (!text)
		goto oom;
	while (len <= cap && (got = read(fd, text + len, cap + 1 - len)) != 0) {
		if (got < 0) {
			r = -errno;
			rpc_fail_errno(call, -r, "cannot read '%.200s'", path);
			goto out;
		}
		len += (size_t)got;
		if (len > cap) {
			rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EFBIG,
				   "'%.200s' is larger than %zu bytes", path, cap);
			r = -EFBIG;
			goto out;
		}
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
	if (fd >= 0)
		close(fd);
	free(text);
	free(path);
	return r;
}

/* mkdir -p ROOT/@p path, each component created with mkdirat beneath the root. */
static int mkdir_p(const struct resolve_root *root, const char *path)
{
	char *norm = NULL, *name = NULL;
	size_t len, end, start;
	int dirfd, r;

	r = resolve_normalize(path, strlen(path), &norm);
	if (r < 0)
		return r;
	len = strlen(norm);
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
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
		return;
	}
	ctx->ad = ad;
	ctx->dir_fd = -1;

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

	r = mkdir_p(&ad->root, app);
	if (r == 0)
		r = exec_cwd_open(&ad->root, app, strlen(app));
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
	if (!ctx->call && !ctx->proc)
		cmds_free(ctx);
	return;
oom:
	rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENOMEM, "out of memory");
fail:
	cmds_free(ctx);
}
