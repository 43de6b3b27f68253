/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Process runner (see exec.h): uv_spawn with a process group per command,
 * output pipes read with backpressure, a wall-clock timeout (SIGTERM, then
 * SIGKILL), cancellation, and an exit report that follows the last output
 * byte. Plus the head-and-tail output capture and the UTF-8 sanitizer.
 *
 * Runs on the loop thread only; there are no locks. Every libuv handle is
 * embedded in struct exec_process and the struct is freed in the last close
 * callback (libuv handle.rst: memory may be released only in close_cb).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"

extern char **environ;

enum pipe_state {
	PIPE_NONE,    /* not used or not initialised */
	PIPE_OPEN,    /* initialised; reading (unless paused) or writing */
	PIPE_CLOSING, /* uv_close called; no more callbacks but the close */
	PIPE_CLOSED,  /* close callback ran */
};

struct exec_table {
	uv_loop_t *loop;
	unsigned max;
	unsigned count;             /* processes allocated and not yet freed */
	struct exec_process *head;  /* all of them, for kill_all */
	bool freeing;               /* exec_table_free called; free with the last */
};

/*
 * One command. A later process table (journal, reattach, signals) extends
 * this struct: the fields below are the runner's, the consumer is one
 * (ops, arg) pair.
 */
struct exec_process {
	struct exec_table *table;
	struct exec_process *prev, *next; /* in table->head */
	struct exec_ops ops;
	void *arg;
	int pid;                          /* also the pgid (setsid) */

	uv_process_t proc;
	uv_pipe_t out[EXEC_NSTREAMS];
	enum pipe_state out_state[EXEC_NSTREAMS];
	uint64_t offset[EXEC_NSTREAMS];   /* bytes delivered per stream */

	uv_pipe_t in;
	enum pipe_state in_state;
	uv_write_t in_req;
	uint8_t *in_buf;                  /* stdin bytes, until freed with p */
	size_t in_len;

	uv_timer_t timer;
	enum {
		TIMER_NONE,     /* no timeout, or stopped */
		TIMER_TIMEOUT,  /* waiting for the timeout */
		TIMER_TERM,     /* SIGTERM sent, waiting to SIGKILL */
		TIMER_KILL,     /* SIGKILL sent, waiting to close the pipes */
	} timer_phase;

	unsigned open_handles;            /* handles whose close_cb is pending */
	bool failed;                      /* uv_spawn failed; no callbacks */
	bool exited;                      /* exit_cb ran */
	bool reported;                    /* ops.exited ran (or is running) */
	bool paused;
	struct exec_exit ex;

	char rbuf[EXEC_READ_CHUNK];       /* read buffer, consumed in read_cb */
};

/* ---- table ---- */

int exec_table_new(uv_loop_t *loop, unsigned max_processes, struct exec_table **ret_table)
{
	struct exec_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->loop = loop;
	t->max = max_processes ? max_processes : EXEC_MAX_PROCESSES_DEFAULT;
	*ret_table = t;
	return 0;
}

unsigned exec_table_count(const struct exec_table *t)
{
	return t->count;
}

unsigned exec_table_max(const struct exec_table *t)
{
	return t->max;
}

void exec_table_kill_all(struct exec_table *t)
{
	struct exec_process *p, *next;

	for (p = t->head; p; p = next) {
		next = p->next;
		if (!p->failed)
			exec_kill(p);
	}
}

void exec_table_free(struct exec_table *t)
{
	if (!t)
		return;
	t->freeing = true;
	exec_table_kill_all(t);
	if (t->count == 0)
		free(t);
}

/* ---- process lifetime ---- */

static void process_free(struct exec_process *p)
{
	struct exec_table *t = p->table;

	if (p->prev)
		p->prev->next = p->next;
	else
		t->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	t->count--;
	free(p->in_buf);
	free(p);
	if (t->freeing && t->count == 0)
		free(t);
}

static void maybe_report(struct exec_process *p);

static void on_close(uv_handle_t *h)
{
	struct exec_process *p = h->data;
	int i;

	for (i = 0; i < EXEC_NSTREAMS; i++)
		if (h == (uv_handle_t *)&p->out[i])
			p->out_state[i] = PIPE_CLOSED;
	if (h == (uv_handle_t *)&p->in)
		p->in_state = PIPE_CLOSED;
	/* exec_kill() closes the pipes; the exit may be reportable now. */
	if (!p->failed)
		maybe_report(p);
	if (--p->open_handles == 0 && (p->reported || p->failed))
		process_free(p);
}

/* Close a handle that was initialised (and counted in open_handles). */
static void handle_close(struct exec_process *p, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_close);
}

static void pipe_close(struct exec_process *p, int stream)
{
	if (p->out_state[stream] != PIPE_OPEN)
		return;
	p->out_state[stream] = PIPE_CLOSING;
	handle_close(p, (uv_handle_t *)&p->out[stream]);
}

static void stdin_close(struct exec_process *p)
{
	if (p->in_state != PIPE_OPEN)
		return;
	p->in_state = PIPE_CLOSING;
	handle_close(p, (uv_handle_t *)&p->in);
}

/* Signal the whole process group; only while the process is ours. */
static void group_signal(struct exec_process *p, int sig)
{
	if (p->reported || p->pid <= 0)
		return;
	/* ESRCH: the group is already empty. */
	(void)kill(-p->pid, sig);
}

/*
 * Report the exit once the process was reaped and no output pipe is open.
 * Called from libuv callbacks only, so the consumer never sees its own
 * exec_* call re-enter.
 */
static void maybe_report(struct exec_process *p)
{
	int i;

	if (p->reported || !p->exited)
		return;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		if (p->out_state[i] == PIPE_OPEN)
			return;
	p->reported = true;
	uv_timer_stop(&p->timer);
	p->timer_phase = TIMER_NONE;
	handle_close(p, (uv_handle_t *)&p->timer);
	handle_close(p, (uv_handle_t *)&p->proc);
	stdin_close(p);
	p->ops.exited(p, &p->ex, p->arg);
}

static void on_process_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
	struct exec_process *p = proc->data;
	/* libuv keeps the raw wait status in a private field (unix.h,
	 * UV_PROCESS_PRIVATE_FIELDS); it is the only way to see WCOREDUMP. */
	int status = proc->status;

	p->exited = true;
	p->ex.code = term_signal ? 0 : (int)exit_status;
	p->ex.signal = term_signal;
	p->ex.core_dumped = WIFSIGNALED(status) && WCOREDUMP(status);
	maybe_report(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct exec_process *p = h->data;

	/* One buffer suffices: libuv calls read_cb right after each alloc_cb
	 * on this thread, and the consumer copies what it keeps. */
	*buf = uv_buf_init(p->rbuf, sizeof(p->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct exec_process *p = s->data;
	int stream = s == (uv_stream_t *)&p->out[EXEC_STDOUT] ? EXEC_STDOUT : EXEC_STDERR;
	uint64_t off;

	if (nread > 0) {
		off = p->offset[stream];
		p->offset[stream] += (uint64_t)nread;
		p->ops.output(p, (enum exec_stream)stream, off, buf->base, (size_t)nread, p->arg);
		return;
	}
	if (nread == 0)
		return; /* EAGAIN */
	/* UV_EOF, or a read error (ECONNRESET...): the stream is over. */
	pipe_close(p, stream);
	maybe_report(p);
}

static void on_stdin_written(uv_write_t *req, int status)
{
	struct exec_process *p = req->data;

	/* Done, or EPIPE (the command did not read it all), or ECANCELED
	 * (closed): either way stdin is finished; closing gives EOF. */
	stdin_close(p);
}

static void on_timer(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;
	int i;

	switch (p->timer_phase) {
	case TIMER_TIMEOUT:
		p->ex.timed_out = true;
		group_signal(p, SIGTERM);
		p->timer_phase = TIMER_TERM;
		uv_timer_start(&p->timer, on_timer, EXEC_KILL_GRACE_MS, 0);
		break;
	case TIMER_TERM:
		group_signal(p, SIGKILL);
		p->timer_phase = TIMER_KILL;
		uv_timer_start(&p->timer, on_timer, EXEC_KILL_GRACE_MS, 0);
		break;
	case TIMER_KILL:
		/* Something outside the group (a setsid grandchild) still
		 * holds a pipe open: stop waiting for its EOF. */
		p->timer_phase = TIMER_NONE;
		stdin_close(p);
		for (i = 0; i < EXEC_NSTREAMS; i++)
			pipe_close(p, i);
		maybe_report(p);
		break;
	case TIMER_NONE:
		break;
	}
}

/* ---- spawning ---- */

int exec_cwd_open(const struct resolve_root *root, const void *path, size_t len)
{
	return resolve_open(root, path, len, O_PATH | O_DIRECTORY, 0);
}

static size_t strv_len(const char *const *v)
{
	size_t n = 0;

	if (v)
		while (v[n])
			n++;
	return n;
}

/*
 * environ plus the overrides, later wins. Returns a malloc'd array of
 * borrowed strings (valid while environ and spec live), or NULL.
 */
static char **env_build(const char *const *overrides)
{
	size_t n_env = strv_len((const char *const *)environ);
	size_t n_ovr = strv_len(overrides);
	char **v = malloc((n_env + n_ovr + 1) * sizeof(*v));
	size_t n = 0, i, j, klen;

	if (!v)
		return NULL;
	for (i = 0; i < n_env; i++)
		v[n++] = environ[i];
	for (i = 0; i < n_ovr; i++) {
		klen = (size_t)(strchr(overrides[i], '=') - overrides[i]);
		for (j = 0; j < n; j++)
			if (strncmp(v[j], overrides[i], klen) == 0 && v[j][klen] == '=')
				break;
		v[j] = (char *)overrides[i];
		if (j == n)
			n++;
	}
	v[n] = NULL;
	return v;
}

/* argv for uv_spawn: argv mode as given, shell mode /bin/sh -c S sh ARGS. */
static char **args_build(const struct exec_spec *spec)
{
	size_t n, i;
	char **v;

	if (spec->argv) {
		n = strv_len(spec->argv);
		v = malloc((n + 1) * sizeof(*v));
		if (!v)
			return NULL;
		for (i = 0; i < n; i++)
			v[i] = (char *)spec->argv[i];
		v[n] = NULL;
		return v;
	}
	n = strv_len(spec->args);
	v = malloc((n + 5) * sizeof(*v));
	if (!v)
		return NULL;
	v[0] = (char *)"/bin/sh";
	v[1] = (char *)"-c";
	v[2] = (char *)spec->shell;
	v[3] = (char *)"sh"; /* $0 */
	for (i = 0; i < n; i++)
		v[4 + i] = (char *)spec->args[i];
	v[4 + n] = NULL;
	return v;
}

static int spec_check(const struct exec_spec *spec)
{
	size_t i;

	if (!!spec->argv == !!spec->shell)
		return -EINVAL;
	if (spec->argv && !spec->argv[0])
		return -EINVAL;
	if (spec->argv && spec->args)
		return -EINVAL;
	if (spec->env)
		for (i = 0; spec->env[i]; i++)
			if (!strchr(spec->env[i], '='))
				return -EINVAL;
	return 0;
}

int exec_spawn(struct exec_table *t, const struct exec_spec *spec, const struct exec_ops *ops,
	       void *arg, struct exec_process **ret_process)
{
	uv_process_options_t opts = { 0 };
	uv_stdio_container_t stdio[3];
	char cwd_buf[64];
	char **argv = NULL, **envp = NULL;
	struct exec_process *p = NULL;
	int combined[2] = { -1, -1 };
	bool proc_init = false;
	int r, i;

	r = spec_check(spec);
	if (r < 0)
		return r;
	if (t->count >= t->max || t->freeing)
		return -EAGAIN;

	argv = args_build(spec);
	envp = env_build(spec->env);
	p = calloc(1, sizeof(*p));
	if (!argv || !envp || !p) {
		r = -ENOMEM;
		goto fail_early;
	}
	if (spec->stdin_len) {
		p->in_buf = malloc(spec->stdin_len);
		if (!p->in_buf) {
			r = -ENOMEM;
			goto fail_early;
		}
		memcpy(p->in_buf, spec->stdin_data, spec->stdin_len);
		p->in_len = spec->stdin_len;
	}
	if (spec->combine_output && pipe2(combined, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail_early;
	}

	/* From here on p owns libuv handles and is freed by their close. */
	p->table = t;
	p->ops = *ops;
	p->arg = arg;
	p->next = t->head;
	if (t->head)
		t->head->prev = p;
	t->head = p;
	t->count++;

	uv_timer_init(t->loop, &p->timer);
	p->timer.data = p;
	p->open_handles++;

	memset(stdio, 0, sizeof(stdio));
	if (p->in_len) {
		uv_pipe_init(t->loop, &p->in, 0);
		p->in.data = p;
		p->in_req.data = p;
		p->open_handles++;
		p->in_state = PIPE_OPEN;
		stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
		stdio[0].data.stream = (uv_stream_t *)&p->in;
	} else {
		stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null */
	}
	for (i = 0; i < EXEC_NSTREAMS; i++) {
		if (i == EXEC_STDERR && spec->combine_output)
			break;
		uv_pipe_init(t->loop, &p->out[i], 0);
		p->out[i].data = p;
		p->open_handles++;
		p->out_state[i] = PIPE_OPEN;
	}
	if (spec->combine_output) {
		/* One pipe for both: the child gets the write end as fd 1
		 * and 2 (dup2 clears O_CLOEXEC); we read the other end. */
		r = uv_pipe_open(&p->out[EXEC_STDOUT], combined[0]);
		if (r < 0) {
			close(combined[0]);
			close(combined[1]);
			goto fail;
		}
		combined[0] = -1;
		stdio[1].flags = UV_INHERIT_FD;
		stdio[1].data.fd = combined[1];
		stdio[2].flags = UV_INHERIT_FD;
		stdio[2].data.fd = combined[1];
	} else {
		stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
		stdio[1].data.stream = (uv_stream_t *)&p->out[EXEC_STDOUT];
		stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
		stdio[2].data.stream = (uv_stream_t *)&p->out[EXEC_STDERR];
	}

	opts.exit_cb = on_process_exit;
	opts.file = argv[0];
	opts.args = argv;
	opts.env = envp;
	if (spec->cwd_fd >= 0) {
		/* The fd stays open in the child until execve (O_CLOEXEC),
		 * so the child's chdir() sees it through its own /proc. */
		snprintf(cwd_buf, sizeof(cwd_buf), "/proc/self/fd/%d", spec->cwd_fd);
		opts.cwd = cwd_buf;
	}
	opts.flags = UV_PROCESS_DETACHED; /* setsid(): pgid == pid */
	opts.stdio_count = 3;
	opts.stdio = stdio;

	r = uv_spawn(t->loop, &p->proc, &opts);
	/* uv_spawn initialises the handle even when it fails; close it then. */
	p->proc.data = p;
	p->open_handles++;
	proc_init = true;
	if (combined[1] >= 0)
		close(combined[1]);
	if (r < 0)
		goto fail;
	free(argv);
	free(envp);

	p->pid = p->proc.pid;
	for (i = 0; i < EXEC_NSTREAMS; i++) {
		if (p->out_state[i] != PIPE_OPEN)
			continue;
		r = uv_read_start((uv_stream_t *)&p->out[i], on_alloc, on_read);
		if (r < 0)
			pipe_close(p, i); /* reported as EOF */
	}
	if (p->in_len) {
		uv_buf_t b = uv_buf_init((char *)p->in_buf, (unsigned)p->in_len);

		if (p->in_len > UINT32_MAX ||
		    uv_write(&p->in_req, (uv_stream_t *)&p->in, &b, 1, on_stdin_written) < 0)
			stdin_close(p);
	}
	if (spec->timeout_ms) {
		p->timer_phase = TIMER_TIMEOUT;
		uv_timer_start(&p->timer, on_timer, spec->timeout_ms, 0);
	}
	*ret_process = p;
	return 0;

fail:
	/* Close everything initialised; the last close frees p. */
	p->failed = true;
	free(argv);
	free(envp);
	if (proc_init)
		handle_close(p, (uv_handle_t *)&p->proc);
	handle_close(p, (uv_handle_t *)&p->timer);
	stdin_close(p);
	for (i = 0; i < EXEC_NSTREAMS; i++)
		pipe_close(p, i);
	return r;

fail_early:
	if (combined[0] >= 0) {
		close(combined[0]);
		close(combined[1]);
	}
	free(argv);
	free(envp);
	if (p)
		free(p->in_buf);
	free(p);
	return r;
}

int exec_pid(const struct exec_process *p)
{
	return p->pid;
}

void exec_pause(struct exec_process *p)
{
	int i;

	if (p->paused || p->reported)
		return;
	p->paused = true;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		if (p->out_state[i] == PIPE_OPEN)
			uv_read_stop((uv_stream_t *)&p->out[i]);
}

void exec_resume(struct exec_process *p)
{
	int i;

	if (!p->paused || p->reported)
		return;
	p->paused = false;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		if (p->out_state[i] == PIPE_OPEN &&
		    uv_read_start((uv_stream_t *)&p->out[i], on_alloc, on_read) < 0)
			pipe_close(p, i);
}

void exec_kill(struct exec_process *p)
{
	int i;

	if (p->reported)
		return;
	p->ex.killed = true;
	group_signal(p, SIGKILL);
	uv_timer_stop(&p->timer);
	p->timer_phase = TIMER_NONE;
	/* Close even while paused: EOF would never be read (grpc-c-core.md
	 * §6 bug (e)). The exit is reported from the close callbacks. */
	stdin_close(p);
	for (i = 0; i < EXEC_NSTREAMS; i++)
		pipe_close(p, i);
}

/* ---- capture ---- */

int exec_capture_init(struct exec_capture *c, size_t max)
{
	memset(c, 0, sizeof(*c));
	c->half = max / 2 ? max / 2 : 1;
	c->buf = malloc(2 * c->half);
	return c->buf ? 0 : -ENOMEM;
}

void exec_capture_add(struct exec_capture *c, const void *data, size_t len)
{
	const uint8_t *d = data;
	size_t n;

	c->total += len;
	n = c->half - c->head_len;
	if (n > len)
		n = len;
	memcpy(c->buf + c->head_len, d, n);
	c->head_len += n;
	d += n;
	len -= n;
	if (len >= c->half) {
		/* Only the last half bytes survive. */
		memcpy(c->buf + c->half, d + len - c->half, c->half);
		c->tail_len = c->half;
		c->tail_pos = 0;
		return;
	}
	while (len) {
		n = c->half - c->tail_pos;
		if (n > len)
			n = len;
		memcpy(c->buf + c->half + c->tail_pos, d, n);
		c->tail_pos = (c->tail_pos + n) % c->half;
		c->tail_len = c->tail_len + n > c->half ? c->half : c->tail_len + n;
		d += n;
		len -= n;
	}
}

uint64_t exec_capture_omitted(const struct exec_capture *c)
{
	return c->total - c->head_len - c->tail_len;
}

size_t exec_capture_kept(const struct exec_capture *c)
{
	return c->head_len + c->tail_len;
}

size_t exec_capture_copy(const struct exec_capture *c, uint8_t *out)
{
	size_t start = (c->tail_pos + c->half - c->tail_len) % c->half;
	size_t n = c->half - start;

	memcpy(out, c->buf, c->head_len);
	out += c->head_len;
	if (n > c->tail_len)
		n = c->tail_len;
	memcpy(out, c->buf + c->half + start, n);
	memcpy(out + n, c->buf + c->half, c->tail_len - n);
	return c->head_len;
}

void exec_capture_done(struct exec_capture *c)
{
	free(c->buf);
	c->buf = NULL;
}

/* ---- UTF-8 ---- */

/*
 * Length of the well-formed prefix of the sequence at s (n bytes available)
 * per Unicode Table 3-7: returns the sequence length if it is complete and
 * well-formed, else 0 and sets *bad to the length of its maximal subpart
 * (>= 1), which is replaced by one U+FFFD.
 */
static size_t utf8_seq(const uint8_t *s, size_t n, size_t *bad)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* <= U+10FFFF */
	} else {
		*bad = 1; /* 80..C1, F5..FF never start a sequence */
		return 0;
	}
	for (i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}

size_t exec_utf8_sanitize(const void *in, size_t len, char *out, bool replace_nul)
{
	const uint8_t *s = in;
	size_t i = 0, o = 0, n, bad = 1;

	while (i < len) {
		n = utf8_seq(s + i, len - i, &bad);
		if (n == 1 && s[i] == 0 && replace_nul) {
			n = 0;
			bad = 1;
		}
		if (n) {
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += bad;
		}
	}
	return o;
}
