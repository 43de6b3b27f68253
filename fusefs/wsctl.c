/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsctl: the host command line for a wsbridge workspace. Runs commands in the
 * sandbox (Exec.Start, Attach, List, Signal, Wait, WriteStdin, Resize) and
 * moves files (Workspace.Upload/Download and the path RPCs), through the
 * client adapter in client.h.
 *
 * Threads: the main thread does the work. SIGINT, SIGTERM, SIGHUP, SIGUSR2
 * and SIGWINCH are blocked in every thread and taken by one signal thread
 * (sigwaitinfo), which cancels the running stream (an exec without --detach asks
 * for kill_on_detach, so agentd then kills the command's tree; an upload
 * leaves no temp file, a download removes its local temp file) or, when no
 * stream runs or on a second signal, exits 128+N at once (restoring the
 * terminal). For exec -t it also turns SIGWINCH into Exec.Resize. At the end
 * main sends it SIGUSR2 (with pthread_kill: si_pid is this process, so
 * that a SIGUSR2 from outside is told apart and ends wsctl, as its default
 * action would) and joins it. The signal thread wakes main with SIGUSR1,
 * whose handler hands one from outside on to the signal thread (g_ext_sig),
 * which then ends wsctl as for SIGTERM. g_sig.lock guards g_sig.active, so a
 * stream is never cancelled after it was freed. exec -i/-t run one more
 * thread that reads stdin and sends it with Exec.WriteStdin; main stops it
 * through a wake pipe. SIGPIPE is ignored: a closed stdout shows as EPIPE,
 * and exec/cat then exit 141 (128+SIGPIPE).
 *
 * Exit status: a file command exits 0, 1 on failure, 2 on a usage error.
 * exec exits with the command's status, 128+N when a signal N killed it, 124
 * when its --timeout expired (as timeout(1)); wsctl's own failures: 127 when
 * the program (or the cwd) is not found, 126 when it cannot be run
 * (PERMISSION_DENIED), 125 for any other failure (connection, server error),
 * 2 for a usage error. Interrupted by signal N: 128+N.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "client.h"
#include "health.pb-c.h"
#include "wsb.h"
#include "wsbridge.pb-c.h"

#define M_WS "/wsbridge.v1.Workspace/"
#define M_STAT M_WS "Stat"
#define M_READDIR M_WS "ReadDir"
#define M_MKDIR M_WS "Mkdir"
#define M_UNLINK M_WS "Unlink"
#define M_RMDIR M_WS "Rmdir"
#define M_RENAME M_WS "Rename"
#define M_READLINK M_WS "Readlink"
#define M_SYMLINK M_WS "Symlink"
#define M_MKNOD M_WS "Mknod"
#define M_SETATTR M_WS "SetAttr"
#define M_UPLOAD M_WS "Upload"
#define M_DOWNLOAD M_WS "Download"
#define M_EXEC "/wsbridge.v1.Exec/Start"
#define M_ATTACH "/wsbridge.v1.Exec/Attach"
#define M_WRITE_STDIN "/wsbridge.v1.Exec/WriteStdin"
#define M_RESIZE "/wsbridge.v1.Exec/Resize"
#define M_SIGNAL "/wsbridge.v1.Exec/Signal"
#define M_LIST "/wsbridge.v1.Exec/List"
#define M_WAIT "/wsbridge.v1.Exec/Wait"
#define M_HEALTH "/grpc.health.v1.Health/Check"

#define CHUNK ((size_t)1024 * 1024)              /* data per message, bytes */
#define STDIN_CHUNK ((size_t)256 * 1024) /* exec -i: most stdin per WriteStdin, bytes */
#define DEFAULT_ADDR "127.0.0.1:9000"

enum {
	EXIT_USAGE = 2,
	EXIT_TIMEDOUT = 124,
	EXIT_EXEC_FAIL = 125,
	EXIT_CANNOT_RUN = 126,
	EXIT_NOT_FOUND = 127,
};

static const char *g_cmd = "wsctl"; /* the command, for messages */
static struct wsc *g_client;
static bool g_verbose;
static mode_t g_umask;

/* Standard descriptors that were closed when wsctl started (0, 1, 2): an
 * O_PATH descriptor holds their numbers (std_fds_hold()). */
static bool g_std_closed[3];

static struct {
	pthread_mutex_t lock;
	struct wsc_stream *active; /* protected by lock */
	atomic_int sig;            /* first signal taken, or 0 */
} g_sig = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The --exec command's process (group leader), once connected; 0 without. */
static _Atomic pid_t g_transport_pid;
/* The token file given (--token-file, WSBRIDGE_TOKEN_FILE), or NULL. */
static const char *g_token_file;

/* exec -t: the local terminal's mode before raw mode. */
static struct {
	struct termios saved;
	atomic_bool raw;
} g_tty;

/* exec -t: the process SIGWINCH resizes (0: none); lock held during a resize. */
static struct {
	pthread_mutex_t lock;
	uint64_t id;
} g_winch = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void raw_off(void);
static void winch_forward(void);

/* ---- messages ---- */

__attribute__((format(printf, 1, 2)))
static void msg(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "wsctl: ");
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!write(STDERR_FILENO, buf, n);
}

__attribute__((format(printf, 1, 2), noreturn))
static void usage_error(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	msg("%s", buf);
	fprintf(stderr, "Try 'wsctl --help' for more information.\n");
	exit(EXIT_USAGE);
}

/* "'path'" escaped for a message; static buffer, one at a time. */
static const char *q(const char *path)
{
	static char buf[1100];
	char *e = wsb_escape(path, strlen(path), 1024);

	snprintf(buf, sizeof(buf), "'%s'", e ? e : "?");
	free(e);
	return buf;
}

/* "wsctl: WHAT: Reason (STATUS)". */
static void report_what(const char *what, const struct wsc_status *st)
{
	/* No status: it failed on this side (writing the local copy). */
	if (st->code == WSB_OK) {
		msg("%s: %s (on this host, not in the pod)", what, strerror(st->err ? st->err : EIO));
		return;
	}
	/* A path that leads out of the root: agentd's errno is EXDEV
	 * (openat2(2) RESOLVE_BENEATH), whose text ("Invalid cross-device
	 * link") would only mislead; its message says what happened. */
	if (st->msg[0] && st->code == WSB_PERMISSION_DENIED && st->has_errno && st->err == EXDEV)
		msg("%s: %s (%s)", what, st->msg, wsb_status_name(st->code));
	/* agentd's message when it says more than the errno's text ("...
	 * escapes the workspace root", "no such working directory ..."). */
	else if (st->msg[0] && (g_verbose || !st->has_errno || !strstr(st->msg, strerror(st->err))))
		msg("%s: %s (%s: %s)", what, strerror(st->err), wsb_status_name(st->code), st->msg);
	else
		msg("%s: %s (%s)", what, strerror(st->err), wsb_status_name(st->code));
	if (st->code == WSB_UNAUTHENTICATED && g_token_file)
		msg("agentd refused the bearer token in %s: it is not the one agentd has "
		    "(its --token-file)", q(g_token_file));
	else if (st->code == WSB_UNAUTHENTICATED)
		msg("agentd wants its bearer token: give wsctl the file that holds it with "
		    "--token-file FILE or WSBRIDGE_TOKEN_FILE=FILE");
}

/* "wsctl: CMD 'PATH': Reason (STATUS)". */
static void report(const char *path, const struct wsc_status *st)
{
	char what[1200];

	if (path)
		snprintf(what, sizeof(what), "%s %s", g_cmd, q(path));
	else
		snprintf(what, sizeof(what), "%s", g_cmd);
	report_what(what, st);
}

/* A failure on this side: "wsctl: CMD 'PATH': Reason". */
static void report_errno(const char *path, int err)
{
	if (path)
		msg("%s %s: %s", g_cmd, q(path), strerror(err));
	else
		msg("%s: %s", g_cmd, strerror(err));
}

/*
 * True, with "wsctl: CMD '': No such file or directory", if @path is empty:
 * an empty pathname names nothing (path_resolution(7), ENOENT), where
 * agentd would take it for the workspace root.
 */
static bool path_empty(const char *path)
{
	if (*path)
		return false;
	report_errno(path, ENOENT);
	return true;
}

/* ---- signals ---- */

/* The thread that does the work (main): woken by SIGUSR1 from
 * signal_thread(). */
static pthread_t g_main_thread;
/* The signal thread; a SIGUSR1 from outside this process, which
 * on_wake() passes on to it (0: none). */
static pthread_t g_sig_thread;
static volatile sig_atomic_t g_ext_sig;

/* SIGUSR1's handler: for signal_thread()'s wake, nothing (its arrival
 * makes a blocking call of the main thread fail with EINTR: no
 * SA_RESTART); one sent from outside ends wsctl as its default action
 * would: handed on to the signal thread (pthread_kill(3) is
 * async-signal-safe). */
static void on_wake(int sig, siginfo_t *info, void *uc)
{
	(void)uc;
	if (info->si_pid != getpid() && !g_ext_sig) {
		g_ext_sig = sig;
		(void)pthread_kill(g_sig_thread, SIGUSR2);
	}
}

static void *signal_thread(void *arg)
{
	const struct timespec kick = { 0, 100 * 1000 * 1000 };
	sigset_t *set = arg;
	bool kicking = false;

	for (;;) {
		struct wsc_stream *s;
		siginfo_t info;
		int sig, first = 0;

		if (kicking) {
			/* A wake that came just before main entered read(2)
			 * wakes nothing: again every 100 ms until main ends. */
			sig = sigtimedwait(set, &info, &kick);
			if (sig < 0) {
				/* Until the transfer's stream is let go (main
				 * saw the signal and cleans up): a wake in the
				 * middle of that would fail a call there. */
				pthread_mutex_lock(&g_sig.lock);
				kicking = g_sig.active != NULL;
				pthread_mutex_unlock(&g_sig.lock);
				if (kicking && errno == EAGAIN)
					(void)pthread_kill(g_main_thread, SIGUSR1);
				continue;
			}
		} else if ((sig = sigwaitinfo(set, &info)) < 0) {
			continue;
		}
		/* (Not si_code: SI_TKILL by tgkill(2), but SI_USER here.) */
		if (sig == SIGUSR2 && info.si_pid == getpid()) {
			if (!g_ext_sig)
				break; /* main is done: see stop_signal_thread() */
			sig = g_ext_sig; /* on_wake(): a SIGUSR1 from outside */
		}
		if (sig == SIGWINCH) {
			winch_forward();
			continue;
		}
		pthread_mutex_lock(&g_sig.lock);
		(void)atomic_compare_exchange_strong(&g_sig.sig, &first, sig);
		s = g_sig.active;
		if (s)
			wsc_stream_cancel(s);
		/* A call without a deadline (exec -i's WriteStdin, blocked on
		 * a frozen agentd) ends too, so that main can join its thread. */
		if (s && g_client)
			wsc_cut_long(g_client);
		pthread_mutex_unlock(&g_sig.lock);
		/* The main thread may wait on local I/O (put - from a pipe
		 * that says nothing): EINTR, and it sees interrupted(). */
		if (s && first == 0) {
			(void)pthread_kill(g_main_thread, SIGUSR1);
			kicking = true;
		}
		/* Nothing to clean up, or asked twice: go now, and take the
		 * --exec command along (it may not read its stdin, whose end
		 * would tell it). */
		if (!s || first != 0) {
			pid_t pid = atomic_load(&g_transport_pid);

			if (pid > 0)
				(void)kill(-pid, SIGTERM);
			raw_off();
			_exit(128 + sig);
		}
	}
	return NULL;
}

/* End the signal thread (so that nothing is left running at exit). */
static void stop_signal_thread(pthread_t th)
{
	if (pthread_kill(th, SIGUSR2) == 0)
		(void)pthread_join(th, NULL);
}

static void set_active(struct wsc_stream *s)
{
	pthread_mutex_lock(&g_sig.lock);
	g_sig.active = s;
	pthread_mutex_unlock(&g_sig.lock);
}

static int interrupted(void)
{
	return atomic_load(&g_sig.sig);
}

/* ---- local I/O ---- */

/* write(2) all of @len bytes; handles EINTR, short writes, O_NONBLOCK. */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR && interrupted())
				return -ECANCELED;
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd pfd = { .fd = fd, .events = POLLOUT };

				if (poll(&pfd, 1, -1) < 0 && errno == EINTR && interrupted())
					return -ECANCELED;
				continue;
			}
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_zeros(int fd, uint64_t len)
{
	static const char zeros[65536];

	while (len > 0) {
		size_t n = len < sizeof(zeros) ? (size_t)len : sizeof(zeros);
		int r = write_all(fd, zeros, n);

		if (r < 0)
			return r;
		len -= n;
	}
	return 0;
}

/* read(2) until @len bytes or EOF; returns bytes read or -errno. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0) {
			if (errno == EINTR && interrupted())
				return -ECANCELED;
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd pfd = { .fd = fd, .events = POLLIN };

				if (poll(&pfd, 1, -1) < 0 && errno == EINTR && interrupted())
					return -ECANCELED;
				continue;
			}
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* ---- progress bar (stderr, only on a terminal) ---- */

struct progress {
	bool on;
	char label[64];
	uint64_t total, done;
	struct timespec start, last;
};

static double since(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void human(char *buf, size_t len, double v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void progress_init(struct progress *p, const char *name, uint64_t total)
{
	const char *base = strrchr(name, '/');
	char *e;

	memset(p, 0, sizeof(*p));
	p->on = isatty(STDERR_FILENO);
	p->total = total;
	base = base && base[1] ? base + 1 : name;
	e = wsb_escape(base, strlen(base), 40);
	snprintf(p->label, sizeof(p->label), "%s", e ? e : "");
	free(e);
	clock_gettime(CLOCK_MONOTONIC, &p->start);
	p->last = p->start;
}

static void progress_draw(struct progress *p, bool force)
{
	char line[256], done[32], total[32], rate[32];
	struct timespec now;
	double t;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && since(&p->last, &now) < 0.2)
		return;
	p->last = now;
	t = since(&p->start, &now);
	human(done, sizeof(done), (double)p->done);
	human(rate, sizeof(rate), t > 0 ? (double)p->done / t : 0);
	if (p->total) {
		human(total, sizeof(total), (double)p->total);
		n = snprintf(line, sizeof(line), "\r%s  %s / %s  %3d%%  %s/s\033[K", p->label, done,
			     total, (int)(p->done >= p->total ? 100 : p->done * 100 / p->total), rate);
	} else {
		n = snprintf(line, sizeof(line), "\r%s  %s  %s/s\033[K", p->label, done, rate);
	}
	(void)write_all(STDERR_FILENO, line, n < (int)sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static void progress_add(struct progress *p, uint64_t n)
{
	p->done += n;
	if (p->on)
		progress_draw(p, false);
}

static void progress_end(struct progress *p)
{
	if (p->on)
		(void)write_all(STDERR_FILENO, "\r\033[K", 4);
}

/* ---- paths ---- */

static ProtobufCBinaryData bin(const char *s)
{
	return (ProtobufCBinaryData){ .len = strlen(s), .data = (uint8_t *)s };
}

/* Last component of @p ("a/b/" -> "b"), malloc'd; NULL if none (root). */
static char *base_name(const char *p)
{
	size_t end = strlen(p), start;

	while (end > 0 && p[end - 1] == '/')
		end--;
	start = end;
	while (start > 0 && p[start - 1] != '/')
		start--;
	if (end == start)
		return NULL;
	return strndup(p + start, end - start);
}

/* dir + "/" + name, malloc'd (exits on ENOMEM). */
static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	char *r;

	if (n == 0)
		r = strdup(name);
	else if (asprintf(&r, "%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name) < 0)
		r = NULL;
	if (!r) {
		report_errno(NULL, ENOMEM);
		exit(EXIT_FAILURE);
	}
	return r;
}

/*
 * Where a copy of @src goes for destination @dst: @dst/basename(@src) when
 * @into (@dst is a directory, which cp(1) copies into), else @dst;
 * malloc'd. NULL with errno EINVAL when @src has no last component (the
 * root), or ENOMEM.
 */
static char *copy_target(const char *dst, bool into, const char *src)
{
	char *b, *t;

	if (!into)
		return strdup(dst);
	b = base_name(src);
	if (!b) {
		errno = EINVAL;
		return NULL;
	}
	t = join(dst, b);
	free(b);
	return t;
}

/* True when @p names the workspace root: only "", "/" and "." parts. */
static bool is_root(const char *p)
{
	while (*p) {
		while (*p == '/')
			p++;
		if (p[0] == '.' && (p[1] == '/' || !p[1]))
			p++;
		else if (*p)
			return false;
	}
	return true;
}

/* ---- RPC helpers ---- */

static int rpc_stat(const char *path, bool follow, Wsbridge__V1__StatReply **ret,
		    struct wsc_status *st)
{
	Wsbridge__V1__StatRequest req = WSBRIDGE__V1__STAT_REQUEST__INIT;
	ProtobufCMessage *reply;
	int r;

	req.path = bin(path);
	req.follow = follow;
	r = wsc_unary(g_client, M_STAT, &req.base, &wsbridge__v1__stat_reply__descriptor, &reply, st);
	if (r < 0)
		return r;
	*ret = (Wsbridge__V1__StatReply *)reply;
	if (!(*ret)->attr) {
		protobuf_c_message_free_unpacked(reply, NULL);
		st->code = WSB_INTERNAL;
		st->err = EPROTO;
		st->has_errno = false;
		snprintf(st->msg, sizeof(st->msg), "Stat reply without attr");
		return -EPROTO;
	}
	return 0;
}

/* 1 if @path is a directory (following symlinks), 0 if not or absent, -err. */
/* The mode and inode number of @path (@follow: a last symlink followed)
 * into *@mode and *@ino (each may be NULL): 0, or -errno with @st filled. */
static int remote_attr(const char *path, bool follow, uint32_t *mode, uint64_t *ino,
		       struct wsc_status *st)
{
	Wsbridge__V1__StatReply *sr;
	int r = rpc_stat(path, follow, &sr, st);

	if (r < 0)
		return r;
	if (mode)
		*mode = sr->attr->mode;
	if (ino)
		*ino = sr->attr->ino;
	protobuf_c_message_free_unpacked(&sr->base, NULL);
	return 0;
}

static int remote_is_dir(const char *path, struct wsc_status *st)
{
	uint32_t mode;
	int r = remote_attr(path, true, &mode, NULL, st);

	if (r == -ENOENT || r == -ENOTDIR)
		return 0;
	return r < 0 ? r : S_ISDIR(mode);
}

static int rpc_path(const char *method, const char *path, struct wsc_status *st)
{
	Wsbridge__V1__PathRequest req = WSBRIDGE__V1__PATH_REQUEST__INIT;

	req.path = bin(path);
	return wsc_unary(g_client, method, &req.base, &wsbridge__v1__empty__descriptor, NULL, st);
}

struct entry {
	char *name;
	bool has_attr;
	Wsbridge__V1__Attr attr;
};

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static void entries_free(struct entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}

/* A name a directory may hold: not empty, no '/' or NUL, not "." or "..". */
static bool name_ok(const ProtobufCBinaryData *n)
{
	if (n->len == 0 || n->len > NAME_MAX || memchr(n->data, '/', n->len) ||
	    memchr(n->data, '\0', n->len))
		return false;
	if (n->data[0] == '.' && (n->len == 1 || (n->len == 2 && n->data[1] == '.')))
		return false;
	return true;
}

/* Read the whole directory @path (ReadDir paging), sorted by name. */
static int list_dir(const char *path, struct entry **ret, size_t *ret_n, struct wsc_status *st)
{
	struct entry *e = NULL;
	size_t n = 0, cap = 0;
	int64_t offset = 0;
	int r;

	for (;;) {
		Wsbridge__V1__ReadDirRequest req = WSBRIDGE__V1__READ_DIR_REQUEST__INIT;
		Wsbridge__V1__ReadDirReply *rep;
		ProtobufCMessage *m;
		bool eof;

		req.path = bin(path);
		req.offset = offset;
		req.max_entries = 1024;
		r = wsc_unary(g_client, M_READDIR, &req.base, &wsbridge__v1__read_dir_reply__descriptor,
			      &m, st);
		if (r < 0)
			goto fail;
		rep = (Wsbridge__V1__ReadDirReply *)m;
		for (size_t i = 0; i < rep->n_entries; i++) {
			Wsbridge__V1__DirEntry *d = rep->entries[i];

			if (!name_ok(&d->name)) {
				char *x = wsb_escape(d->name.data, d->name.len, 256);

				msg("%s %s: skipping an invalid entry name '%s' from the server", g_cmd,
				    q(path), x ? x : "?");
				free(x);
				continue;
			}
			if (n == cap) {
				size_t nc = cap ? 2 * cap : 64;
				struct entry *ne = realloc(e, nc * sizeof(*ne));

				if (!ne) {
					protobuf_c_message_free_unpacked(m, NULL);
					r = -ENOMEM;
					goto fail_local;
				}
				e = ne;
				cap = nc;
			}
			e[n].name = strndup((const char *)d->name.data, d->name.len);
			if (!e[n].name) {
				protobuf_c_message_free_unpacked(m, NULL);
				r = -ENOMEM;
				goto fail_local;
			}
			e[n].has_attr = d->attr != NULL;
			if (d->attr)
				e[n].attr = *d->attr;
			n++;
		}
		eof = rep->eof || rep->n_entries == 0;
		if (!eof) {
			int64_t next = rep->entries[rep->n_entries - 1]->next_offset;

			if (next == offset) {
				protobuf_c_message_free_unpacked(m, NULL);
				r = -EPROTO;
				goto fail_local;
			}
			offset = next;
		}
		protobuf_c_message_free_unpacked(m, NULL);
		if (eof)
			break;
		if (interrupted()) {
			r = -ECANCELED;
			goto fail_local;
		}
	}
	if (n)
		qsort(e, n, sizeof(*e), entry_cmp);
	*ret = e;
	*ret_n = n;
	return 0;

fail_local:
	st->code = wsb_status_from_errno(-r);
	st->err = -r;
	st->has_errno = false;
	snprintf(st->msg, sizeof(st->msg), "%s", r == -EPROTO ? "ReadDir paging did not advance" : "");
fail:
	entries_free(e, n);
	return r;
}

/* ---- exec, attach, ps, kill, wait ---- */

static int exec_error_exit(const struct wsc_status *st)
{
	switch (st->code) {
	case WSB_NOT_FOUND:
		return EXIT_NOT_FOUND;
	case WSB_PERMISSION_DENIED:
		return EXIT_CANNOT_RUN;
	default:
		return EXIT_EXEC_FAIL;
	}
}

/* wsctl's exit status for a remote exit: as timeout(1) and the shell. */
static int exit_code_of(const Wsbridge__V1__ExecExit *ex)
{
	if (ex->timed_out)
		return EXIT_TIMEDOUT;
	if (ex->signal > 0)
		return 128 + (ex->signal & 0x7f);
	return ex->code & 0xff;
}

/* The local terminal's size, from stdin, stdout or stderr; false if none. */
static bool term_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;
	int fd;

	for (fd = 0; fd < 3; fd++) {
		if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
			*rows = ws.ws_row;
			*cols = ws.ws_col;
			return true;
		}
	}
	return false;
}

/* Raw mode of the local terminal (exec -t), restored at the end. */
static void raw_on(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &g_tty.saved) < 0)
		return;
	t = g_tty.saved;
	cfmakeraw(&t);
	if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0)
		atomic_store(&g_tty.raw, true);
}

static void raw_off(void)
{
	/* EINTR: a signal came after the drain (the signal thread's
	 * wakes, SIGWINCH): the settings are not back yet. */
	if (atomic_exchange(&g_tty.raw, false))
		while (tcsetattr(STDIN_FILENO, TCSADRAIN, &g_tty.saved) < 0 && errno == EINTR)
			;
}

/* Forward SIGWINCH as Exec.Resize of process @p id (0: stop). Waits for a
 * resize in flight, so that none runs once this returns with 0. */
static void winch_target(uint64_t id)
{
	pthread_mutex_lock(&g_winch.lock);
	g_winch.id = id;
	pthread_mutex_unlock(&g_winch.lock);
}

/* In the signal thread: the terminal changed size. */
static void winch_forward(void)
{
	Wsbridge__V1__ResizeRequest req = WSBRIDGE__V1__RESIZE_REQUEST__INIT;
	Wsbridge__V1__ProcessRef ref = WSBRIDGE__V1__PROCESS_REF__INIT;
	struct wsc_status st;
	unsigned rows, cols;

	pthread_mutex_lock(&g_winch.lock);
	if (g_winch.id && term_size(&rows, &cols)) {
		ref.id = g_winch.id;
		req.process = &ref;
		req.rows = rows;
		req.cols = cols;
		if (wsc_unary_ex(g_client, M_RESIZE, &req.base, &wsbridge__v1__empty__descriptor, NULL,
				 5000, &st) < 0 && g_verbose)
			msg("resize: %s (%s)", st.msg, wsb_status_name(st.code));
	}
	pthread_mutex_unlock(&g_winch.lock);
}

/* exec -i / -t: a thread reads stdin and sends it with Exec.WriteStdin, in
 * chunks as they come, then EOF. Stopped through a wake pipe. */
struct stdin_fwd {
	uint64_t id;
	int wake[2];
	pthread_t th;
	bool running;
};

static void *stdin_thread(void *arg)
{
	struct stdin_fwd *fw = arg;
	Wsbridge__V1__StdinRequest req = WSBRIDGE__V1__STDIN_REQUEST__INIT;
	Wsbridge__V1__ProcessRef ref = WSBRIDGE__V1__PROCESS_REF__INIT;
	uint8_t *buf = malloc(STDIN_CHUNK);
	struct wsc_status st;
	ssize_t n;

	if (!buf)
		return NULL;
	ref.id = fw->id;
	req.process = &ref;
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = STDIN_FILENO, .events = POLLIN },
			{ .fd = fw->wake[0], .events = POLLIN },
		};

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break; /* the command ended */
		n = read(STDIN_FILENO, buf, STDIN_CHUNK);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			msg("exec: reading stdin: %s", strerror(errno));
			n = 0; /* send EOF */
		}
		req.data.data = buf;
		req.data.len = (size_t)n;
		req.eof = n == 0;
		/* No deadline: a command that does not read yet holds the
		 * write back, which is the flow control we want. */
		if (wsc_unary_ex(g_client, M_WRITE_STDIN, &req.base, &wsbridge__v1__empty__descriptor,
				 NULL, 0, &st) < 0) {
			/* FAILED_PRECONDITION: it closed its stdin or exited. */
			if (!interrupted() && (g_verbose || st.code != WSB_FAILED_PRECONDITION))
				msg("exec: stdin: %s (%s)", st.msg, wsb_status_name(st.code));
			break;
		}
		if (n == 0)
			break;
	}
	free(buf);
	return NULL;
}

static int stdin_fwd_start(struct stdin_fwd *fw, uint64_t id)
{
	int r;

	fw->id = id;
	if (pipe2(fw->wake, O_CLOEXEC) < 0)
		return -errno;
	r = pthread_create(&fw->th, NULL, stdin_thread, fw);
	if (r) {
		close(fw->wake[0]);
		close(fw->wake[1]);
		return -r;
	}
	fw->running = true;
	return 0;
}

static void stdin_fwd_stop(struct stdin_fwd *fw)
{
	if (!fw->running)
		return;
	(void)!write(fw->wake[1], "x", 1);
	(void)pthread_join(fw->th, NULL);
	close(fw->wake[0]);
	close(fw->wake[1]);
	fw->running = false;
}

/* What a stream of ExecEvents told. */
struct evstate {
	bool started;
	uint64_t id;
	bool exited;
	Wsbridge__V1__ExecExit ex;
	int out_err;            /* writing stdout failed: -errno */
	struct stdin_fwd *fwd;  /* start forwarding stdin on started */
	bool winch;             /* forward SIGWINCH on started */
};

/*
 * Read ExecEvents from @p s until the stream ends: output to stdout and
 * stderr, lost bytes reported on stderr. Returns what wsc_stream_recv last
 * returned (0 at a clean end, -err with @p st filled).
 */
static int read_events(struct wsc_stream *s, struct evstate *es, struct wsc_status *st)
{
	Wsbridge__V1__ExecEvent *ev;
	ProtobufCMessage *m;
	int r;

	for (;;) {
		r = wsc_stream_recv(s, &wsbridge__v1__exec_event__descriptor, &m, st);
		if (r <= 0)
			return r;
		ev = (Wsbridge__V1__ExecEvent *)m;
		switch (ev->event_case) {
		case WSBRIDGE__V1__EXEC_EVENT__EVENT_STARTED:
			if (!ev->started || es->started)
				break;
			es->started = true;
			es->id = ev->started->id;
			if (g_verbose)
				msg("%s: process %" PRIu64 ", pid %" PRIu32, g_cmd, ev->started->id,
				    ev->started->pid);
			if (es->winch)
				winch_target(es->id);
			if (es->fwd && stdin_fwd_start(es->fwd, es->id) < 0)
				msg("exec: cannot forward stdin");
			break;
		case WSBRIDGE__V1__EXEC_EVENT__EVENT_STDOUT:
			if (!es->out_err && ev->stdout && ev->stdout->data.len)
				es->out_err = write_all(STDOUT_FILENO, ev->stdout->data.data,
							ev->stdout->data.len);
			break;
		case WSBRIDGE__V1__EXEC_EVENT__EVENT_STDERR:
			if (ev->stderr && ev->stderr->data.len)
				(void)write_all(STDERR_FILENO, ev->stderr->data.data,
						ev->stderr->data.len);
			break;
		case WSBRIDGE__V1__EXEC_EVENT__EVENT_LOST:
			if (ev->lost)
				msg("%s: %" PRIu64 " bytes of %s lost at offset %" PRIu64
				    " (no longer in agentd's journal; see agentd --journal-size)",
				    g_cmd, ev->lost->bytes, ev->lost->stderr ? "stderr" : "stdout",
				    ev->lost->offset);
			break;
		case WSBRIDGE__V1__EXEC_EVENT__EVENT_EXITED:
			if (ev->exited) {
				es->ex = *ev->exited;
				es->exited = true;
			}
			break;
		default:
			break;
		}
		protobuf_c_message_free_unpacked(m, NULL);
		if (es->out_err) {
			/* Our stdout is gone: stop, as a pipe would. */
			wsc_stream_cancel(s);
			st->code = WSB_CANCELLED;
			return -ECANCELED;
		}
	}
}

/* wsctl's exit status at the end of an exec or attach stream. */
static int events_exit(const char *what, int r, const struct evstate *es,
		       const struct wsc_status *st, bool need_exit)
{
	if (es->out_err == -EPIPE)
		return 128 + SIGPIPE;
	if (es->out_err) {
		msg("%s: writing stdout: %s", g_cmd, strerror(-es->out_err));
		return EXIT_EXEC_FAIL;
	}
	if (interrupted())
		return 128 + interrupted();
	if (r < 0) {
		report(what, st);
		return exec_error_exit(st);
	}
	if (!es->exited) {
		if (!need_exit)
			return 0;
		msg("%s %s: the server ended the call without an exit status", g_cmd, q(what));
		return EXIT_EXEC_FAIL;
	}
	return exit_code_of(&es->ex);
}

/* Parse seconds for --timeout and --idle-timeout into ms. */
static uint32_t parse_seconds_ms(const char *opt, const char *arg)
{
	char *end;
	double sec;
	uint32_t ms;

	errno = 0;
	sec = strtod(arg, &end);
	if (errno || end == arg || *end || !(sec >= 0) || sec * 1000.0 > UINT32_MAX)
		usage_error("exec: %s wants seconds (0 to %u), not %s", opt, UINT32_MAX / 1000, q(arg));
	ms = (uint32_t)(sec * 1000.0);
	return sec > 0 && ms == 0 ? 1 : ms;
}

static int cmd_exec(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cwd", required_argument, NULL, 'C' },
		{ "env", required_argument, NULL, 'e' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "idle-timeout", required_argument, NULL, 'I' },
		{ "tag", required_argument, NULL, 'g' },
		{ "shell", no_argument, NULL, 's' },
		{ "stdin", no_argument, NULL, 'i' },
		{ "tty", no_argument, NULL, 't' },
		{ "detach", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	Wsbridge__V1__ExecRequest req = WSBRIDGE__V1__EXEC_REQUEST__INIT;
	ProtobufCBinaryData *env = NULL, *args = NULL;
	bool shell = false, with_stdin = false, tty = false;
	struct evstate es = { 0 };
	struct stdin_fwd fwd = { 0 };
	struct wsc_stream *s = NULL;
	struct wsc_status st;
	size_t n_env = 0;
	int c, r, code;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+ite:C:d", opts, NULL)) != -1) {
		switch (c) {
		case 'C':
			req.cwd = bin(optarg);
			break;
		case 'e': {
			ProtobufCBinaryData *ne;

			if (!strchr(optarg, '=') || optarg[0] == '=')
				usage_error("exec: --env wants KEY=VALUE, not %s", q(optarg));
			ne = realloc(env, (n_env + 1) * sizeof(*ne));
			if (!ne) {
				report_errno(NULL, ENOMEM);
				return EXIT_EXEC_FAIL;
			}
			env = ne;
			env[n_env++] = bin(optarg);
			break;
		}
		case 'T':
			req.timeout_ms = parse_seconds_ms("--timeout", optarg);
			break;
		case 'I':
			req.idle_timeout_ms = parse_seconds_ms("--idle-timeout", optarg);
			break;
		case 'g':
			req.tag = optarg;
			break;
		case 's':
			shell = true;
			break;
		case 'i':
			with_stdin = true;
			break;
		case 't':
			tty = true;
			break;
		case 'd':
			req.detach = true;
			break;
		case 'h':
			printf("Usage: wsctl exec [--cwd DIR] [--env KEY=VALUE]... [--timeout SEC]\n"
			       "                  [--idle-timeout SEC] [--tag NAME] [-i] [-t] [--detach]\n"
			       "                  -- PROG [ARG]...\n"
			       "       wsctl exec --shell [OPTIONS] -- 'SCRIPT' [ARG]...\n");
			return 0;
		default:
			usage_error("exec: bad option");
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage_error("exec: no command given");
	if (req.detach && (with_stdin || tty))
		usage_error("exec: --detach cannot forward stdin (-i, -t): it returns at once");

	if (shell) {
		req.shell = bin(argv[0]);
		if (req.shell.len == 0)
			usage_error("exec: --shell wants a non-empty script");
		if (argc > 1) {
			args = calloc((size_t)argc - 1, sizeof(*args));
			if (!args) {
				report_errno(NULL, ENOMEM);
				return EXIT_EXEC_FAIL;
			}
			for (int i = 1; i < argc; i++)
				args[i - 1] = bin(argv[i]);
			req.n_args = (size_t)argc - 1;
			req.args = args;
		}
	} else {
		args = calloc((size_t)argc, sizeof(*args));
		if (!args) {
			report_errno(NULL, ENOMEM);
			return EXIT_EXEC_FAIL;
		}
		for (int i = 0; i < argc; i++)
			args[i] = bin(argv[i]);
		req.n_argv = (size_t)argc;
		req.argv = args;
	}
	req.n_env = n_env;
	req.env = env;
	/* Without --detach the command lives as long as this call: Ctrl-C,
	 * SIGTERM, a closed stdout or a lost connection end the call, and
	 * agentd then kills the command's tree (KilledBy DETACHED). */
	req.kill_on_detach = !req.detach;
	if (tty) {
		const char *term = getenv("TERM");
		unsigned rows, cols;

		req.pty = true;
		if (term_size(&rows, &cols)) {
			req.rows = rows;
			req.cols = cols;
		}
		if (term && *term && !strchr(term, '='))
			req.term = bin(term);
		with_stdin = true; /* keys, Ctrl-C included, go to the remote terminal */
		es.winch = true;
	}
	if (with_stdin) {
		req.stdin_open = true;
		es.fwd = &fwd;
	}

	r = wsc_stream_open(g_client, M_EXEC, &req.base, 0, &s, &st);
	if (r < 0) {
		report(argv[0], &st);
		code = exec_error_exit(&st);
		goto out;
	}
	set_active(s);
	if (tty)
		raw_on();
	r = read_events(s, &es, &st);
	set_active(NULL);
	winch_target(0);
	stdin_fwd_stop(&fwd);
	raw_off();
	if (req.detach && es.started && r == 0 && !interrupted()) {
		printf("%" PRIu64 "\n", es.id);
		code = 0;
		goto out;
	}
	code = events_exit(argv[0], r, &es, &st, true);
out:
	wsc_stream_free(s);
	free(args);
	free(env);
	return code;
}

/* A process named on the command line: a number is an id, else a tag. */
static void parse_ref(const char *arg, Wsbridge__V1__ProcessRef *ref)
{
	char *end;
	unsigned long long v;

	if (!*arg)
		usage_error("%s: an empty process id or tag", g_cmd);
	if (arg[strspn(arg, "0123456789")] == '\0') {
		errno = 0;
		v = strtoull(arg, &end, 10);
		if (errno || v == 0)
			usage_error("%s: bad process id %s", g_cmd, q(arg));
		ref->id = v;
	} else {
		ref->tag = (char *)arg;
	}
}

static int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "stderr-from", required_argument, NULL, 'F' },
		{ "no-follow", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	Wsbridge__V1__AttachRequest req = WSBRIDGE__V1__ATTACH_REQUEST__INIT;
	Wsbridge__V1__ProcessRef ref = WSBRIDGE__V1__PROCESS_REF__INIT;
	struct evstate es = { 0 };
	struct wsc_stream *s = NULL;
	struct wsc_status st;
	int c, r, code;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
		case 'F': {
			char *end;
			unsigned long long v;

			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-')
				usage_error("attach: --%s wants a byte offset, not %s",
					    c == 'f' ? "from" : "stderr-from", q(optarg));
			if (c == 'f')
				req.stdout_offset = v;
			else
				req.stderr_offset = v;
			break;
		}
		case 'n':
			req.no_follow = true;
			break;
		case 'h':
			printf("Usage: wsctl attach [--from OFFSET] [--stderr-from OFFSET] [--no-follow] ID|TAG\n");
			return 0;
		default:
			usage_error("attach: bad option");
		}
	}
	if (argc - optind != 1)
		usage_error("attach: name one process (ID or TAG)");
	parse_ref(argv[optind], &ref);
	req.process = &ref;
	r = wsc_stream_open(g_client, M_ATTACH, &req.base, 0, &s, &st);
	if (r < 0) {
		report(argv[optind], &st);
		code = exec_error_exit(&st);
		goto out;
	}
	set_active(s);
	r = read_events(s, &es, &st);
	set_active(NULL);
	code = events_exit(argv[optind], r, &es, &st, !req.no_follow);
out:
	wsc_stream_free(s);
	return code;
}

/* "exit 3", "signal SIGKILL", "timeout", for ps. */
static void state_text(const Wsbridge__V1__ProcessInfo *pi, char *buf, size_t size)
{
	const Wsbridge__V1__ExecExit *ex = pi->exit;
	const char *abbrev;

	if (pi->state != WSBRIDGE__V1__PROCESS_STATE__EXITED || !ex) {
		snprintf(buf, size, "running");
		return;
	}
	if (ex->killed_by == WSBRIDGE__V1__KILLED_BY__TIMEOUT)
		snprintf(buf, size, "timeout");
	else if (ex->killed_by == WSBRIDGE__V1__KILLED_BY__IDLE_TIMEOUT)
		snprintf(buf, size, "idle-timeout");
	else if (ex->signal > 0 && (abbrev = sigabbrev_np(ex->signal)))
		snprintf(buf, size, "SIG%s", abbrev);
	else if (ex->signal > 0)
		snprintf(buf, size, "signal %d", ex->signal);
	else
		snprintf(buf, size, "exit %d", ex->code);
}

/* An argv for display: words joined by spaces, quoted when needed. */
static void print_argv(const Wsbridge__V1__ProcessInfo *pi)
{
	for (size_t i = 0; i < pi->n_argv; i++) {
		const ProtobufCBinaryData *a = &pi->argv[i];
		char *e = wsb_escape(a->data, a->len, 200);
		bool plain = a->len > 0;

		for (size_t k = 0; plain && k < a->len; k++)
			plain = strchr("\"'\\ \t\n$`;&|<>()*?[]{}#~", a->data[k]) == NULL;
		if (plain) {
			printf("%s%s", i ? " " : "", e ? e : "?");
		} else {
			printf("%s'", i ? " " : "");
			for (const char *p = e ? e : "?"; *p; p++)
				if (*p == '\'')
					fputs("'\\''", stdout);
				else
					putchar(*p);
			putchar('\'');
		}
		free(e);
	}
	putchar('\n');
}

static int cmd_ps(int argc, char **argv)
{
	Wsbridge__V1__ListRequest req = WSBRIDGE__V1__LIST_REQUEST__INIT;
	Wsbridge__V1__ListReply *rep;
	ProtobufCMessage *m;
	struct wsc_status st;
	int r;

	if (argc != 1)
		usage_error("ps: takes no arguments");
	r = wsc_unary(g_client, M_LIST, &req.base, &wsbridge__v1__list_reply__descriptor, &m, &st);
	if (r < 0) {
		report(NULL, &st);
		return EXIT_FAILURE;
	}
	rep = (Wsbridge__V1__ListReply *)m;
	printf("%-6s %-8s %-14s %-19s %-16s %s\n", "ID", "PID", "STATE", "STARTED", "TAG", "COMMAND");
	for (size_t i = 0; i < rep->n_processes; i++) {
		const Wsbridge__V1__ProcessInfo *pi = rep->processes[i];
		char state[40], started[32] = "-", *tag;
		time_t t = (time_t)(pi->start_time_ns / 1000000000);
		struct tm tm;

		state_text(pi, state, sizeof(state));
		if (pi->start_time_ns > 0 && localtime_r(&t, &tm))
			strftime(started, sizeof(started), "%Y-%m-%d %H:%M:%S", &tm);
		tag = wsb_escape(pi->tag ? pi->tag : "", pi->tag ? strlen(pi->tag) : 0, 64);
		printf("%-6" PRIu64 " %-8" PRIu32 " %-14s %-19s %-16s ", pi->id, pi->pid, state, started,
		       tag && *tag ? tag : "-");
		free(tag);
		print_argv(pi);
	}
	protobuf_c_message_free_unpacked(m, NULL);
	return 0;
}

/* A signal by number or name ("TERM", "SIGTERM", "15"); -1 if unknown. */
static int parse_signal(const char *s)
{
	char *end;
	long v;

	if (*s >= '0' && *s <= '9') {
		errno = 0;
		v = strtol(s, &end, 10);
		return errno || *end || v <= 0 || v >= NSIG ? -1 : (int)v;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (int sig = 1; sig < NSIG; sig++) {
		const char *a = sigabbrev_np(sig);

		if (a && strcasecmp(a, s) == 0)
			return sig;
	}
	return -1;
}

static int cmd_kill(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "signal", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	Wsbridge__V1__SignalRequest req = WSBRIDGE__V1__SIGNAL_REQUEST__INIT;
	Wsbridge__V1__ProcessRef ref = WSBRIDGE__V1__PROCESS_REF__INIT;
	struct wsc_status st;
	int c, sig = SIGTERM;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+s:", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			sig = parse_signal(optarg);
			if (sig < 0)
				usage_error("kill: unknown signal %s", q(optarg));
			break;
		case 'h':
			printf("Usage: wsctl kill [-s SIGNAL] ID|TAG\n");
			return 0;
		default:
			usage_error("kill: bad option");
		}
	}
	if (argc - optind != 1)
		usage_error("kill: name one process (ID or TAG)");
	parse_ref(argv[optind], &ref);
	req.process = &ref;
	req.signal = sig;
	if (wsc_unary(g_client, M_SIGNAL, &req.base, &wsbridge__v1__empty__descriptor, NULL, &st) < 0) {
		report(argv[optind], &st);
		return EXIT_FAILURE;
	}
	return 0;
}

static int cmd_wait(int argc, char **argv)
{
	Wsbridge__V1__WaitRequest req = WSBRIDGE__V1__WAIT_REQUEST__INIT;
	Wsbridge__V1__ProcessRef ref = WSBRIDGE__V1__PROCESS_REF__INIT;
	Wsbridge__V1__ProcessInfo *pi;
	ProtobufCMessage *m;
	struct wsc_status st;
	int code;

	if (argc != 2)
		usage_error("wait: name one process (ID or TAG)");
	parse_ref(argv[1], &ref);
	req.process = &ref;
	/* No deadline: it waits as long as the command runs. */
	if (wsc_unary_ex(g_client, M_WAIT, &req.base, &wsbridge__v1__process_info__descriptor, &m, 0,
			 &st) < 0) {
		report(argv[1], &st);
		return exec_error_exit(&st);
	}
	pi = (Wsbridge__V1__ProcessInfo *)m;
	code = pi->exit ? exit_code_of(pi->exit) : EXIT_EXEC_FAIL;
	protobuf_c_message_free_unpacked(m, NULL);
	return code;
}

/* ---- download ---- */

/* In @fd, positioned at @at, a hole of @len bytes over a file that had
 * @old_size bytes: what of it lies below @old_size is punched
 * (fallocate(2) FALLOC_FL_PUNCH_HOLE), or written with zeros where the
 * file system cannot, the rest skipped; leaves @fd at @at + @len. 0 or
 * -errno. */
static int hole_over(int fd, uint64_t at, uint64_t len, uint64_t old_size)
{
	uint64_t in = old_size - at < len ? old_size - at : len;
	int r;

	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)in) == 0)
		return lseek(fd, (off_t)len, SEEK_CUR) < 0 ? -errno : 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return -errno;
	r = write_zeros(fd, in); /* moves the position by in */
	if (r < 0)
		return r;
	return lseek(fd, (off_t)(len - in), SEEK_CUR) < 0 ? -errno : 0;
}

/*
 * Download @remote into @fd. With @seek, holes become lseek(SEEK_CUR) plus a
 * final ftruncate (fd must be an empty regular file, or @over given); else
 * zeros are written. @over: @fd is a regular file with content, written
 * over in place: holes inside its old size are punched (or zeros written
 * where that is not supported), and it is cut to size at the end, not
 * emptied first, so that a download that fails at once leaves it as it
 * was, and one into another name of the very file it reads (a hard link,
 * on a host where the workspace is a local directory) writes each byte
 * over itself instead of destroying what it has yet to read. *ret_mode gets
 * the remote mode, or 0 if the server sent no attr.
 */
static int download(const char *remote, int fd, bool seek, bool over, uint32_t *ret_mode,
		    struct wsc_status *st)
{
	Wsbridge__V1__DownloadRequest req = WSBRIDGE__V1__DOWNLOAD_REQUEST__INIT;
	struct wsc_stream *s;
	struct progress pr;
	uint64_t pos = 0, old_size = 0;
	struct stat sb;
	int r;

	if (seek && over && fstat(fd, &sb) == 0)
		old_size = (uint64_t)sb.st_size;

	progress_init(&pr, remote, 0);
	*ret_mode = 0;
	req.path = bin(remote);
	r = wsc_stream_open(g_client, M_DOWNLOAD, &req.base, 0, &s, st);
	if (r < 0)
		return r;
	set_active(s);
	for (;;) {
		Wsbridge__V1__DownloadChunk *ch;
		ProtobufCMessage *m;

		r = wsc_stream_recv(s, &wsbridge__v1__download_chunk__descriptor, &m, st);
		if (r <= 0)
			break;
		ch = (Wsbridge__V1__DownloadChunk *)m;
		if (ch->attr && !*ret_mode) {
			*ret_mode = ch->attr->mode;
			pr.total = ch->attr->size;
		}
		if (ch->data.len > (uint64_t)INT64_MAX - pos || ch->hole > (uint64_t)INT64_MAX - pos - ch->data.len) {
			/* agentd's chunks claim more than a file holds. */
			protobuf_c_message_free_unpacked(m, NULL);
			st->code = WSB_INTERNAL;
			st->err = EFBIG;
			st->has_errno = false;
			snprintf(st->msg, sizeof(st->msg), "agentd's chunks add up past 2^63 bytes");
			r = -EFBIG;
			goto end;
		}
		r = write_all(fd, ch->data.data, ch->data.len);
		if (r == 0 && ch->hole) {
			uint64_t at = pos + ch->data.len;

			if (!seek)
				r = write_zeros(fd, ch->hole);
			else if (at < old_size)
				r = hole_over(fd, at, ch->hole, old_size);
			else
				r = lseek(fd, (off_t)ch->hole, SEEK_CUR) < 0 ? -errno : 0;
		}
		pos += ch->data.len + ch->hole;
		progress_add(&pr, ch->data.len + ch->hole);
		protobuf_c_message_free_unpacked(m, NULL);
		if (r < 0)
			goto local;
	}
	if (r == 0 && seek && ftruncate(fd, (off_t)pos) < 0) {
		r = -errno;
		goto local;
	}
	progress_end(&pr);
	if (r < 0 || !seek) {
		set_active(NULL);
		wsc_stream_free(s);
		return r;
	}
	/* Stay "active" until the caller renamed: see cmd_get. */
	return 0;

local:
	st->code = WSB_OK; /* report(): a failure here, not agentd's */
	st->err = -r;
	st->has_errno = false;
	st->msg[0] = '\0';
end:
	progress_end(&pr);
	set_active(NULL);
	wsc_stream_free(s);
	return r;
}

/* End of the "active" window opened by a successful download(seek). */
static void download_done(void)
{
	struct wsc_stream *s;

	pthread_mutex_lock(&g_sig.lock);
	s = g_sig.active;
	g_sig.active = NULL;
	pthread_mutex_unlock(&g_sig.lock);
	wsc_stream_free(s);
}

static int exit_for(int r)
{
	if (interrupted())
		return 128 + interrupted();
	return r < 0 ? EXIT_FAILURE : 0;
}

/* Index of the first operand of a command that takes no options: after a
 * "--" that ends them, as getopt(3) would skip it (utility syntax
 * guideline 10, POSIX.1-2017 XBD 12.2). */
static int first_operand(int argc, char **argv)
{
	return argc > 1 && !strcmp(argv[1], "--") ? 2 : 1;
}

static int cmd_cat(int argc, char **argv)
{
	struct wsc_status st;
	uint32_t mode;
	int r, rc = 0, i0 = first_operand(argc, argv);

	if (argc <= i0)
		usage_error("cat: no PATH given");
	for (int i = i0; i < argc; i++) {
		if (path_empty(argv[i])) {
			rc = EXIT_FAILURE;
			continue;
		}
		r = download(argv[i], STDOUT_FILENO, false, false, &mode, &st);
		if (r < 0) {
			if (interrupted())
				return exit_for(r);
			if (r == -EPIPE && !st.msg[0])
				return 128 + SIGPIPE;
			report(argv[i], &st);
			rc = EXIT_FAILURE;
		}
	}
	return rc;
}

/*
 * get into @target in place, as cp(1) writes an existing destination: a
 * device or FIFO gets the bytes (O_TRUNC is ignored there), a symlink's
 * target is written (get_file() refuses a dangling one), a file with other hard
 * links keeps them, its inode, mode and owner. Holes are kept where @target
 * is a regular file. Returns the exit status.
 */
static int get_in_place(const char *remote, const char *target)
{
	struct wsc_status st;
	struct stat sb;
	uint32_t mode;
	bool seek;
	int fd, r;

	/* Nothing here is touched (made through a dangling symlink, written)
	 * before the remote file is known to be one, as cp(1) opens its source
	 * first; a regular file is written over and cut to size at the end
	 * (download()), never emptied first: it may be the very file being
	 * read, by another name. */
	r = remote_attr(remote, true, &mode, NULL, &st);
	if (r < 0) {
		report(remote, &st);
		return EXIT_FAILURE;
	}
	if (S_ISDIR(mode)) {
		msg("get %s: Is a directory (get -r copies a directory)", q(remote));
		return EXIT_FAILURE;
	}
	fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd < 0) {
		report_errno(target, errno);
		return EXIT_FAILURE;
	}
	seek = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
	r = download(remote, fd, seek, true, &mode, &st);
	if (r < 0) {
		if (!interrupted())
			report(remote, &st);
		close(fd);
		return exit_for(r);
	}
	if (seek)
		download_done();
	r = seek && fsync(fd) < 0 ? -errno : 0;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0) {
		report_errno(target, -r);
		return EXIT_FAILURE;
	}
	return exit_for(0);
}

/*
 * Download remote file @remote to local path @target (taken over: freed
 * here), as get does: a new or plain file by a temp file and a rename, the
 * rest in place. @in_tree: a file of get -r's tree, where a symlink, FIFO
 * or device at @target is replaced, never written through. Returns the
 * exit status.
 */
static int get_file(const char *remote, char *target, bool in_tree)
{
	char *tmp = NULL, *dir, *slash, *base;
	struct wsc_status st;
	struct stat sb;
	bool exists = false, replace;
	uint32_t mode;
	int fd, r;

	/* Inside a tree the pod chose the symlinks and FIFOs there (an earlier
	 * get -r made them): writing through one would write wherever it
	 * points on this host. They are replaced, as rsync does. */
	replace = in_tree && lstat(target, &sb) == 0 && !S_ISREG(sb.st_mode) &&
		  !S_ISDIR(sb.st_mode);
	/* Only a new file, or a regular one with no other name, is replaced by
	 * a rename (atomic: a reader sees the old file or the new one, never
	 * part of it); anything else is written in place, as cp(1) does: a
	 * rename over /dev/null, a FIFO or a symlink would replace them with
	 * a plain file, and one over a hard link would part it from its other
	 * names. A symlink to such a regular file renames over its target; a
	 * dangling one is refused, as cp(1) refuses it. */
	if (!replace && lstat(target, &sb) == 0 && S_ISLNK(sb.st_mode)) {
		char *real;

		if (stat(target, &sb) < 0) {
			if (errno == ENOENT)
				msg("get: not writing through dangling symlink %s", q(target));
			else
				report_errno(target, errno);
			free(target);
			return EXIT_FAILURE;
		}
		real = S_ISREG(sb.st_mode) && sb.st_nlink == 1 ? realpath(target, NULL) : NULL;
		if (!real) {
			r = get_in_place(remote, target);
			free(target);
			return r;
		}
		free(target);
		target = real;
	}
	if (!replace && lstat(target, &sb) == 0) {
		if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1) {
			r = get_in_place(remote, target);
			free(target);
			return r;
		}
		exists = true;
	}
	/* Temp file beside the target: ".NAME.wsctl-XXXXXX", or without NAME
	 * where that would pass NAME_MAX. */
	dir = strdup(target);
	if (!dir) {
		report_errno(target, ENOMEM);
		free(target);
		return EXIT_FAILURE;
	}
	slash = strrchr(dir, '/');
	base = slash ? slash + 1 : dir;
	if (asprintf(&tmp, "%.*s.%s%swsctl-XXXXXX", slash ? (int)(slash - dir + 1) : 0, dir,
		     strlen(base) + 14 > NAME_MAX ? "" : base,
		     strlen(base) + 14 > NAME_MAX ? "" : ".") < 0)
		tmp = NULL;
	free(dir);
	if (!tmp) {
		report_errno(target, ENOMEM);
		free(target);
		return EXIT_FAILURE;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		report_errno(target, errno);
		free(tmp);
		free(target);
		return EXIT_FAILURE;
	}

	r = download(remote, fd, true, false, &mode, &st);
	if (r < 0) {
		if (r == -EISDIR && !interrupted())
			msg("get %s: Is a directory (get -r copies a directory)", q(remote));
		else if (!interrupted())
			report(remote, &st);
		goto fail;
	}
	/* A file it replaces keeps its mode and owner, as cp(1) leaves them;
	 * a new one gets the remote file's mode less the umask. */
	if (exists && geteuid() == 0)
		(void)fchown(fd, sb.st_uid, sb.st_gid);
	/* (Its set-user-ID and set-group-ID bits only for root: a write by
	 * one without CAP_FSETID clears them, as cp(1)'s would, write(2).) */
	if (fchmod(fd, exists ? sb.st_mode & (geteuid() == 0 ? 07777 : 01777)
			      : ((mode ? mode : 0666) & 0777) & ~g_umask) < 0 ||
	    fsync(fd) < 0) {
		r = -errno;
		report_errno(target, errno);
		goto fail_active;
	}
	if (close(fd) < 0) {
		fd = -1;
		r = -errno;
		report_errno(target, errno);
		goto fail_active;
	}
	fd = -1;
	/* A signal that came after the last byte: nothing is put in place
	 * (the exit status says it was cut short). */
	if (interrupted()) {
		r = -EINTR;
		goto fail_active;
	}
	if (rename(tmp, target) < 0) {
		r = -errno;
		report_errno(target, errno);
		goto fail_active;
	}
	download_done();
	free(tmp);
	free(target);
	return exit_for(0);

fail_active:
	download_done();
fail:
	if (fd >= 0)
		close(fd);
	(void)unlink(tmp);
	free(tmp);
	free(target);
	return exit_for(r);
}

static int get_tree(const char *remote, const char *local, uint32_t mode);

/*
 * Make a symlink to @link_target at @lp, or (@link_target NULL) a FIFO of
 * @fifo_mode, replacing a non-directory there as cp -r does (unlink(2),
 * then again). Returns 0 or an errno value.
 */
static int make_local_node(const char *lp, const char *link_target, mode_t fifo_mode)
{
	struct stat sb;

	for (int again = 0;; again++) {
		if ((link_target ? symlink(link_target, lp) : mkfifo(lp, fifo_mode)) == 0)
			return 0;
		if (errno != EEXIST || again)
			return errno;
		if (lstat(lp, &sb) < 0)
			return errno;
		if (S_ISDIR(sb.st_mode))
			return EISDIR;
		if (unlink(lp) < 0)
			return errno;
	}
}

/* Report make_local_node()'s failure @err at @lp. */
static void report_local_node(const char *lp, int err)
{
	if (err == EISDIR)
		msg("get %s: cannot overwrite a directory with a non-directory", q(lp));
	else
		report_errno(lp, err);
}

/*
 * get -r of one entry: remote @rp of mode @m to local path @lp (taken over:
 * freed here), as cp -r copies it: a directory with get_tree(), a file as
 * get does, a symlink as a symlink (its target as it is, even one that
 * leads out of the workspace), a FIFO as a FIFO; anything else is reported
 * and skipped. Returns 0, or -1 when it failed (reported).
 */
static int get_entry(const char *rp, char *lp, uint32_t m)
{
	Wsbridge__V1__PathRequest req = WSBRIDGE__V1__PATH_REQUEST__INIT;
	Wsbridge__V1__ReadlinkReply *rl;
	struct wsc_status st;
	ProtobufCMessage *reply;
	int rc = 0, r;
	char *t;

	if (S_ISDIR(m)) {
		rc = get_tree(rp, lp, m);
	} else if (S_ISREG(m)) {
		return get_file(rp, lp, true) != 0 ? -1 : 0; /* get_file() took @lp */
	} else if (S_ISLNK(m)) {
		req.path = bin(rp);
		if (wsc_unary(g_client, M_READLINK, &req.base,
			      &wsbridge__v1__readlink_reply__descriptor, &reply, &st) < 0) {
			report(rp, &st);
			rc = -1;
		} else {
			rl = (Wsbridge__V1__ReadlinkReply *)reply;
			t = strndup((const char *)rl->target.data, rl->target.len);
			r = !t ? ENOMEM : strlen(t) != rl->target.len ? EINVAL
				: make_local_node(lp, t, 0);
			if (r) {
				report_local_node(lp, r);
				rc = -1;
			}
			free(t);
			protobuf_c_message_free_unpacked(reply, NULL);
		}
	} else if (S_ISFIFO(m)) {
		r = make_local_node(lp, NULL, m & 07777 & ~g_umask);
		if (r) {
			report_local_node(lp, r);
			rc = -1;
		}
	} else {
		msg("get %s: not a regular file, directory, symlink or FIFO: skipped", q(rp));
		rc = -1;
	}
	free(lp);
	return rc;
}

/*
 * get -r: copy remote directory @remote to local directory @local (made,
 * or merged into when it is one already), as cp -r does: directories with
 * their mode less the umask, files as get does, symlinks as symlinks,
 * FIFOs as FIFOs; anything else is reported and skipped. @mode: @remote's.
 * Returns 0, or -1 when anything failed (each failure reported).
 */
static int get_tree(const char *remote, const char *local, uint32_t mode)
{
	struct wsc_status st;
	struct entry *e = NULL;
	size_t n = 0;
	struct stat sb;
	int rc = 0;
	bool made;

	/* (An existing symlink is not followed: the tree stays below LOCAL.)
	 * Made writable for its owner until it is filled, as cp -r does: a
	 * directory of mode 0555 is copied too. */
	made = mkdir(local, (mode | 0700) & 07777 & ~g_umask) == 0;
	if (!made && !(errno == EEXIST && lstat(local, &sb) == 0 && S_ISDIR(sb.st_mode))) {
		report_errno(local, errno);
		return -1;
	}
	if (list_dir(remote, &e, &n, &st) < 0) {
		report(remote, &st);
		return -1;
	}
	for (size_t i = 0; i < n && !interrupted(); i++) {
		char *rp = join(remote, e[i].name), *lp = join(local, e[i].name);
		uint32_t m = e[i].attr.mode;

		if (!rp || !lp) {
			report_errno(NULL, ENOMEM);
			free(rp);
			free(lp);
			rc = -1;
			break;
		}
		if (!e[i].has_attr && remote_attr(rp, false, &m, NULL, &st) < 0) {
			report(rp, &st);
			free(rp);
			free(lp);
			rc = -1;
			continue;
		}
		if (get_entry(rp, lp, m) < 0)
			rc = -1;
		free(rp);
	}
	entries_free(e, n);
	if (made && (mode & 0700) != 0700 && chmod(local, mode & 07777 & ~g_umask) < 0) {
		report_errno(local, errno);
		rc = -1;
	}
	return interrupted() ? -1 : rc;
}

/*
 * The options of get and put (@cmd): -r (-R, --recursive), and then the two
 * operands @operands names, from argv[optind]. Returns whether -r was
 * given; exits 2 on a usage error.
 */
static bool transfer_args(int argc, char **argv, const char *cmd, const char *operands)
{
	static const struct option opts[] = { { "recursive", no_argument, NULL, 'r' }, {} };
	bool recursive = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+rR", opts, NULL)) != -1) {
		if (c == 'r' || c == 'R')
			recursive = true;
		else
			usage_error("%s: unknown option", cmd);
	}
	if (argc - optind != 2)
		usage_error("%s: want [-r] %s", cmd, operands);
	if (path_empty(argv[optind]) || path_empty(argv[optind + 1]))
		exit(EXIT_FAILURE);
	return recursive;
}

static int cmd_get(int argc, char **argv)
{
	const char *remote, *local;
	char *target = NULL;
	bool recursive = false;
	struct wsc_status st;
	struct stat sb;
	uint32_t mode;
	int r;

	recursive = transfer_args(argc, argv, "get", "REMOTE LOCAL");
	remote = argv[optind];
	local = argv[optind + 1];
	if (!strcmp(local, "-")) {
		if (recursive) {
			/* A tree has no one stream of bytes to write there. */
			msg("get -r: a directory tree cannot go to standard output (-)");
			return EXIT_USAGE;
		}
		if (g_std_closed[STDOUT_FILENO]) {
			report_errno("-", EBADF);
			return EXIT_FAILURE;
		}
		r = download(remote, STDOUT_FILENO, false, false, &mode, &st);
		/* A reader that went (get R - | head -c1): quiet, as cat(1)
		 * killed by SIGPIPE, as wsctl cat. */
		if (r == -EPIPE && !st.msg[0] && !interrupted())
			return 128 + SIGPIPE;
		if (r < 0 && !interrupted())
			report(remote, &st);
		return exit_for(r);
	}
	if (recursive) {
		r = remote_attr(remote, false, &mode, NULL, &st);
		if (r < 0) {
			report(remote, &st);
			return EXIT_FAILURE;
		}
	}

	target = copy_target(local, stat(local, &sb) == 0 && S_ISDIR(sb.st_mode), remote);
	if (!target) {
		if (errno == EINVAL)
			msg("get %s: names no file", q(remote));
		else
			report_errno(local, ENOMEM);
		return EXIT_FAILURE;
	}
	if (recursive && !S_ISREG(mode))
		return get_entry(remote, target, mode) < 0 ? EXIT_FAILURE : 0;
	return get_file(remote, target, false);
}

/* ---- upload ---- */

struct upload {
	struct wsc_stream *s;
	uint8_t *buf;    /* CHUNK bytes */
	size_t len;      /* pending data in buf */
	uint64_t hole;   /* pending zeros after it */
	bool pending;
	struct progress pr;
};

/* Send what is pending; @commit marks the last chunk (always sent), which
 * tells agentd the data is complete (UploadChunk.commit). */
static int up_flush(struct upload *u, bool commit, struct wsc_status *st)
{
	Wsbridge__V1__UploadChunk ch = WSBRIDGE__V1__UPLOAD_CHUNK__INIT;
	int r;

	if (!u->pending && !commit)
		return 0;
	ch.data.data = u->buf;
	ch.data.len = u->len;
	ch.hole = u->hole;
	ch.commit = commit;
	r = wsc_stream_send(u->s, &ch.base, st);
	progress_add(&u->pr, u->len + u->hole);
	u->pending = false;
	u->len = 0;
	u->hole = 0;
	return r;
}

static void up_hole(struct upload *u, uint64_t n)
{
	u->pending = true;
	u->hole += n;
}

/* Send the contents of @fd: sparse-aware for a regular file of @size bytes. */
static int up_data(struct upload *u, int fd, bool regular, uint64_t start, uint64_t size,
		   struct wsc_status *st)
{
	uint64_t pos = start;
	ssize_t n;
	int r;

	while (regular && pos < size) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO) {
			up_hole(u, size - pos);
			return 0;
		}
		if (data < 0) {
			/* No SEEK_DATA here: read the rest as data. */
			if (lseek(fd, (off_t)pos, SEEK_SET) < 0)
				return -errno;
			break;
		}
		if ((uint64_t)data > size)
			data = (off_t)size;
		if ((uint64_t)data > pos) {
			up_hole(u, (uint64_t)data - pos);
			pos = (uint64_t)data;
		}
		hole = lseek(fd, (off_t)pos, SEEK_HOLE);
		if (hole < 0 || (uint64_t)hole > size)
			hole = (off_t)size;
		while (pos < (uint64_t)hole) {
			size_t want = (uint64_t)hole - pos < CHUNK ? (size_t)((uint64_t)hole - pos) : CHUNK;

			r = up_flush(u, false, st);
			if (r < 0)
				return r;
			do
				n = pread(fd, u->buf, want, (off_t)pos);
			while (n < 0 && errno == EINTR);
			if (n < 0)
				return -errno;
			if (n == 0)
				return 0; /* the file shrank: send what it holds */
			u->len = (size_t)n;
			u->pending = true;
			pos += (uint64_t)n;
		}
		if (interrupted())
			return -ECANCELED;
	}
	/* A regular file of size 0 may still hold bytes (/proc's, /sys's):
	 * read to the end, as cat(1) does. */
	if (regular && pos >= size && size > 0)
		return 0;
	for (;;) {
		r = up_flush(u, false, st);
		if (r < 0)
			return r;
		n = read_full(fd, u->buf, CHUNK);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 0;
		u->len = (size_t)n;
		u->pending = true;
		if (interrupted())
			return -ECANCELED;
	}
}

/*
 * Upload what @fd (opened on @local, "-" for stdin; fstat in *@sb) holds to
 * remote file @target. Reports its failure itself. Returns 0 or -errno.
 */
static int put_file(const char *local, int fd, const struct stat *sb, const char *target)
{
	Wsbridge__V1__UploadChunk first = WSBRIDGE__V1__UPLOAD_CHUNK__INIT;
	Wsbridge__V1__UploadHeader hdr = WSBRIDGE__V1__UPLOAD_HEADER__INIT;
	Wsbridge__V1__UploadReply *rep = NULL;
	bool std_in = !strcmp(local, "-");
	bool regular = S_ISREG(sb->st_mode);
	uint64_t size = regular ? (uint64_t)sb->st_size : 0, start = 0;
	struct upload u = { 0 };
	struct wsc_status st;
	ProtobufCMessage *m;
	int r;

	/* A regular file on stdin is read from where it stands, as cat(1)
	 * reads it (a script may have read a header off it), and left at
	 * its end. */
	if (std_in && regular) {
		off_t at = lseek(fd, 0, SEEK_CUR);

		start = at < 0 ? 0 : (uint64_t)at < size ? (uint64_t)at : size;
	}
	u.buf = malloc(CHUNK);
	if (!u.buf) {
		report_errno(NULL, ENOMEM);
		return -ENOMEM;
	}
	progress_init(&u.pr, local, size - start);
	hdr.path = bin(target);
	hdr.mode = (std_in || !regular ? 0666 : sb->st_mode & 0777) & ~g_umask;
	hdr.mode_set = true; /* a mode of 0 is 0 (cp(1) of a mode 000 file) */
	/* What the file takes, not its size: a sparse file needs room for
	 * its data only (agentd refuses a hint past the free space). */
	hdr.size_hint = size - start;
	if (regular && (uint64_t)sb->st_blocks * 512 < hdr.size_hint)
		hdr.size_hint = (uint64_t)sb->st_blocks * 512;
	/* As cp(1): an existing file keeps its mode, and a symlink there is
	 * written through. */
	hdr.keep_mode = true;
	hdr.follow = true;
	first.header = &hdr;
	r = wsc_stream_open(g_client, M_UPLOAD, NULL, 0, &u.s, &st);
	if (r < 0) {
		report(target, &st);
		goto out;
	}
	set_active(u.s);
	r = wsc_stream_send(u.s, &first.base, &st);
	if (r < 0)
		goto failed;
	r = up_data(&u, fd, regular, start, size, &st);
	if (r == 0)
		r = up_flush(&u, true, &st);
	if (r == 0 && std_in && regular)
		(void)lseek(fd, (off_t)size, SEEK_SET);
	if (r < 0) {
		if (st.code == WSB_OK) {
			/* A local failure: tell the server to drop the upload. */
			int err = -r;

			wsc_stream_cancel(u.s);
			progress_end(&u.pr);
			if (!interrupted())
				report_errno(local, err);
			goto out;
		}
		goto failed;
	}
	r = wsc_stream_finish(u.s, &wsbridge__v1__upload_reply__descriptor, &m, &st);
	if (r < 0)
		goto failed;
	rep = (Wsbridge__V1__UploadReply *)m;
	progress_end(&u.pr);
	if (g_verbose)
		msg("put %s: %" PRIu64 " bytes", q(target), rep->size);
	protobuf_c_message_free_unpacked(m, NULL);
	goto out;

failed:
	progress_end(&u.pr);
	if (!interrupted()) {
		struct wsc_status st2;
		uint32_t mode = 0;

		/* agentd follows a symlink at the target (follow) and a
		 * dangling one fails NOT_FOUND: say so as cp(1) does. */
		if (r == -ENOENT && remote_attr(target, false, &mode, NULL, &st2) == 0 &&
		    S_ISLNK(mode))
			msg("put: not writing through dangling symlink %s", q(target));
		else
			report(target, &st);
	}
out:
	set_active(NULL);
	wsc_stream_free(u.s);
	free(u.buf);
	return r;
}

/* One unary call that changes @path (Mkdir, Symlink, Mknod) and returns an
 * AttrReply. Reports a failure unless it is -EEXIST and @quiet_exist. */
static int put_node(const char *method, const ProtobufCMessage *req, const char *path,
		    bool quiet_exist)
{
	struct wsc_status st;
	int r = wsc_unary(g_client, method, req, &wsbridge__v1__attr_reply__descriptor, NULL, &st);

	if (r < 0 && !(r == -EEXIST && quiet_exist))
		report(path, &st);
	return r;
}

static int put_tree(const char *local, const char *remote, const struct stat *sb);

/* put_node() of a Symlink or Mknod at @path, replacing a non-directory
 * there as cp -r does (Unlink, then again). Returns 0 or -errno (reported). */
static int put_node_replace(const char *method, const ProtobufCMessage *req, const char *path)
{
	struct wsc_status st;
	uint32_t mode;
	int r = put_node(method, req, path, true);

	if (r != -EEXIST)
		return r;
	r = remote_attr(path, false, &mode, NULL, &st);
	if (r == 0)
		r = S_ISDIR(mode) ? -EISDIR : rpc_path(M_UNLINK, path, &st);
	if (r < 0 && r != -ENOENT) {
		if (r == -EISDIR)
			msg("put %s: cannot overwrite a directory with a non-directory", q(path));
		else
			report(path, &st);
		return r;
	}
	return put_node(method, req, path, false);
}

/*
 * put -r of one entry: local @lp, of lstat(2) @cs, to remote path @rp, as cp
 * -r copies it: a directory with put_tree(), a file as put does, a symlink
 * as a symlink (not followed), a FIFO as a FIFO (not opened); anything else
 * is reported and skipped. Returns 0, or -1 when it failed (reported).
 */
static int put_entry(const char *lp, const char *rp, struct stat *cs)
{
	Wsbridge__V1__SymlinkRequest sl = WSBRIDGE__V1__SYMLINK_REQUEST__INIT;
	Wsbridge__V1__MknodRequest mn = WSBRIDGE__V1__MKNOD_REQUEST__INIT;
	char target[PATH_MAX];
	int fd, rc = 0;
	ssize_t n;

	if (S_ISDIR(cs->st_mode))
		return put_tree(lp, rp, cs);
	if (S_ISREG(cs->st_mode)) {
		fd = open(lp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			report_errno(lp, errno);
			return -1;
		}
		if (fstat(fd, cs) < 0 || put_file(lp, fd, cs, rp) < 0)
			rc = -1;
		close(fd);
		return rc;
	}
	if (S_ISLNK(cs->st_mode)) {
		n = readlink(lp, target, sizeof(target) - 1);
		if (n < 0) {
			report_errno(lp, errno);
			return -1;
		}
		sl.target.data = (uint8_t *)target;
		sl.target.len = (size_t)n;
		sl.path = bin(rp);
		return put_node_replace(M_SYMLINK, &sl.base, rp) < 0 ? -1 : 0;
	}
	if (S_ISFIFO(cs->st_mode)) {
		mn.path = bin(rp);
		mn.mode = S_IFIFO | (cs->st_mode & 07777 & ~g_umask);
		return put_node_replace(M_MKNOD, &mn.base, rp) < 0 ? -1 : 0;
	}
	msg("put %s: not a regular file, directory, symlink or FIFO: skipped", q(lp));
	return -1;
}

/*
 * put -r: copy local directory @local to remote directory @remote (made, or
 * merged into when it is one already), as cp -r does: directories with
 * their mode less the umask, files as put does, symlinks as symlinks (not
 * followed), FIFOs as FIFOs; anything else is reported and skipped.
 * Returns 0, or -1 when anything failed (each failure reported).
 */
static int put_tree(const char *local, const char *remote, const struct stat *sb)
{
	Wsbridge__V1__MkdirRequest mk = WSBRIDGE__V1__MKDIR_REQUEST__INIT;
	uint32_t mode = sb->st_mode & 07777 & ~g_umask;
	struct wsc_status st;
	struct dirent *de;
	int rc = 0, r;
	bool made;
	DIR *dir;

	/* Made writable for its owner until it is filled, then given its
	 * mode, as cp -r does (get_tree() too): an agentd that is not root
	 * could not fill a directory of mode 0555. */
	mk.path = bin(remote);
	mk.mode = (mode | 0700) & ~g_umask;
	r = put_node(M_MKDIR, &mk.base, remote, true);
	made = r == 0;
	if (r == -EEXIST) {
		/* A directory there is merged into; anything else (a symlink
		 * to one too: not followed, as cp -r does not) is an error. */
		uint32_t there;

		r = remote_attr(remote, false, &there, NULL, &st);
		if (r < 0) {
			report(remote, &st);
			return -1;
		}
		if (!S_ISDIR(there)) {
			msg("put %s: exists and is not a directory", q(remote));
			return -1;
		}
	} else if (r < 0) {
		return -1;
	}
	dir = opendir(local);
	if (!dir) {
		report_errno(local, errno);
		return -1;
	}
	while (!interrupted() && (errno = 0, de = readdir(dir))) {
		char *lp, *rp;
		struct stat cs;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		lp = join(local, de->d_name);
		rp = join(remote, de->d_name);
		if (!lp || !rp) {
			report_errno(NULL, ENOMEM);
			free(lp);
			free(rp);
			rc = -1;
			break;
		}
		if (lstat(lp, &cs) < 0) {
			report_errno(lp, errno);
			rc = -1;
		} else if (put_entry(lp, rp, &cs) < 0) {
			rc = -1;
		}
		free(lp);
		free(rp);
	}
	if (errno && !interrupted()) {
		report_errno(local, errno);
		rc = -1;
	}
	closedir(dir);
	if (made && mk.mode != mode && !interrupted()) {
		Wsbridge__V1__SetAttrRequest sa = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;

		sa.path = bin(remote);
		sa.valid = WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE;
		sa.mode = mode;
		if (wsc_unary(g_client, M_SETATTR, &sa.base, &wsbridge__v1__attr_reply__descriptor,
			      NULL, &st) < 0) {
			report(remote, &st);
			rc = -1;
		}
	}
	return interrupted() ? -1 : rc;
}

static int cmd_put(int argc, char **argv)
{
	const char *local, *remote;
	char *target = NULL;
	bool recursive = false, as_entry = false;
	struct wsc_status st;
	struct stat sb;
	bool std_in;
	int fd = -1, r;

	recursive = transfer_args(argc, argv, "put", "LOCAL REMOTE");
	local = argv[optind];
	remote = argv[optind + 1];
	std_in = !strcmp(local, "-");
	/* With -r, anything but a file is copied as itself, as cp -r does: a
	 * symlink is not followed, a FIFO not opened (that would wait for a
	 * writer). */
	if (recursive && !std_in) {
		if (lstat(local, &sb) < 0) {
			report_errno(local, errno);
			return EXIT_FAILURE;
		}
		as_entry = !S_ISREG(sb.st_mode);
	}
	if (std_in && g_std_closed[STDIN_FILENO]) {
		report_errno("-", EBADF);
		return EXIT_FAILURE;
	} else if (std_in) {
		fd = STDIN_FILENO;
	} else if (!as_entry) {
		fd = open(local, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			report_errno(local, errno);
			return EXIT_FAILURE;
		}
	}
	if (!as_entry && fstat(fd, &sb) < 0) {
		report_errno(local, errno);
		r = -1;
		goto out;
	}
	if (S_ISDIR(sb.st_mode) && !recursive) {
		msg("put %s: Is a directory (put -r copies a directory)", q(local));
		r = -1;
		goto out;
	}

	/* Into an existing directory, as cp(1) does. */
	r = std_in ? 0 : remote_is_dir(remote, &st);
	if (r < 0) {
		report(remote, &st);
		goto out;
	}
	target = copy_target(remote, r > 0, local);
	if (!target) {
		report_errno(errno == EINVAL ? local : NULL, errno);
		r = -1;
		goto out;
	}
	if (as_entry)
		r = put_entry(local, target, &sb);
	else
		r = put_file(local, fd, &sb, target);
out:
	free(target);
	if (!std_in && fd >= 0)
		close(fd);
	return exit_for(r);
}

/* ---- ls / stat ---- */

static void mode_string(uint32_t mode, char out[11])
{
	char t = '?';

	switch (mode & S_IFMT) {
	case S_IFREG: t = '-'; break;
	case S_IFDIR: t = 'd'; break;
	case S_IFLNK: t = 'l'; break;
	case S_IFCHR: t = 'c'; break;
	case S_IFBLK: t = 'b'; break;
	case S_IFIFO: t = 'p'; break;
	case S_IFSOCK: t = 's'; break;
	}
	out[0] = t;
	out[1] = mode & S_IRUSR ? 'r' : '-';
	out[2] = mode & S_IWUSR ? 'w' : '-';
	out[3] = mode & S_ISUID ? (mode & S_IXUSR ? 's' : 'S') : (mode & S_IXUSR ? 'x' : '-');
	out[4] = mode & S_IRGRP ? 'r' : '-';
	out[5] = mode & S_IWGRP ? 'w' : '-';
	out[6] = mode & S_ISGID ? (mode & S_IXGRP ? 's' : 'S') : (mode & S_IXGRP ? 'x' : '-');
	out[7] = mode & S_IROTH ? 'r' : '-';
	out[8] = mode & S_IWOTH ? 'w' : '-';
	out[9] = mode & S_ISVTX ? (mode & S_IXOTH ? 't' : 'T') : (mode & S_IXOTH ? 'x' : '-');
	out[10] = '\0';
}

static const char *type_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symbolic link";
	case S_IFCHR: return "character special file";
	case S_IFBLK: return "block special file";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	}
	return "unknown";
}

/* ls -l date: "Mon DD HH:MM" within six months, else "Mon DD  YYYY". */
static void ls_time(struct timespec ts, char *buf, size_t len)
{
	time_t t = ts.tv_sec, now = time(NULL);
	struct tm tm;

	if (!localtime_r(&t, &tm)) {
		snprintf(buf, len, "?");
		return;
	}
	if (t > now - 182 * 24 * 3600 && t <= now + 3600)
		strftime(buf, len, "%b %e %H:%M", &tm);
	else
		strftime(buf, len, "%b %e  %Y", &tm);
}

static int digits(uint64_t v)
{
	int n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* The first error writing to stdout (an errno value), for main()'s check. */
static int g_out_err;

/* fflush(3) stdout, keeping the first error in g_out_err. */
static void out_flush(void)
{
	if (fflush(stdout) != 0 && !g_out_err)
		g_out_err = errno ? errno : EIO;
}

/* Whether names are quoted: stdout is a terminal (set by print_name()). */
static int g_quote = -1;

/* An ASCII byte a shell takes as itself, in a name (what coreutils' ls
 * leaves unquoted in its shell-escape style). */
static bool name_safe(unsigned char b)
{
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
	       (b && strchr("%+,-./:@_", b));
}

/* The length of the one printable UTF-8 character at @p s (@p n bytes
 * left; @p s[0] >= 0x80), or 0 for anything else: a byte of no well-formed
 * sequence (wsb_utf8_seq()) or a C1 control (U+0080 to U+009F, C2 80 to
 * C2 9F, which terminals take as escape sequences: U+009B is CSI). */
static size_t utf8_printable(const unsigned char *s, size_t n)
{
	size_t bad, len = wsb_utf8_seq(s, n, &bad);

	if (len < 2 || (s[0] == 0xc2 && s[1] < 0xa0))
		return 0;
	return len;
}

/*
 * @p n bytes of @p s as ls(1) shows a name on a terminal (coreutils' quoting
 * style shell-escape, in a UTF-8 locale): as they are when every byte is
 * safe or part of a printable UTF-8 character, else in single quotes, a
 * quote as \', a control character (C0, DEL, C1) or a byte of no valid
 * UTF-8 as $'\n' or $'\ooo', so that no name sends the terminal an escape
 * sequence or passes for two names, and the text pastes back into a
 * shell. Returns a malloc'd string, or NULL (ENOMEM).
 */
static char *shell_quote(const char *s, size_t n)
{
	static const char esc[] = "\\a\\b\\t\\n\\v\\f\\r";
	const unsigned char *u = (const unsigned char *)s;
	/* What the text written last is inside: nothing, '...' or $'...'. */
	enum { BARE, QUOTE, DOLLAR } at = BARE;
	char *out = malloc(n * 8 + 3), *w = out;
	bool plain = n > 0;

	if (!out)
		return NULL;
	for (size_t i = 0, l; plain && i < n; i += l) {
		l = u[i] < 0x80 ? name_safe(u[i]) : utf8_printable(u + i, n - i);
		plain = l > 0;
	}
	if (plain) {
		memcpy(out, s, n);
		out[n] = '\0';
		return out;
	}
	for (size_t i = 0, l; i < n; i += l) {
		unsigned char b = u[i];

		l = b < 0x80 ? 1 : utf8_printable(u + i, n - i);
		if (b == '\'') {
			if (at != BARE)
				*w++ = '\'';
			w += sprintf(w, "\\'");
			at = BARE;
		} else if (l == 0 || b < 0x20 || b == 0x7f) {
			/* A control character or a byte of no valid UTF-8. */
			if (at == QUOTE)
				*w++ = '\'';
			if (at != DOLLAR)
				w += sprintf(w, "$'");
			if (b >= '\a' && b <= '\r')
				w += sprintf(w, "%.2s", esc + 2 * (b - '\a'));
			else
				w += sprintf(w, "\\%03o", b);
			at = DOLLAR;
			l = 1;
		} else {
			if (at == DOLLAR)
				*w++ = '\'';
			if (at != QUOTE)
				*w++ = '\'';
			memcpy(w, s + i, l);
			w += l;
			at = QUOTE;
		}
	}
	if (n == 0)
		w += sprintf(w, "''");
	else if (at != BARE)
		*w++ = '\'';
	*w = '\0';
	return out;
}

/* Write @p n bytes of @p name (no stdio conversion), after what stdio
 * holds: as they are, or quoted (shell_quote()) when stdout is a terminal,
 * as ls(1) does. Errors go to g_out_err. */
static void print_bytes(const char *name, size_t n)
{
	char *q = NULL;
	int r;

	if (g_quote < 0)
		g_quote = isatty(STDOUT_FILENO);
	out_flush();
	if (g_quote && (q = shell_quote(name, n)) != NULL)
		r = write_all(STDOUT_FILENO, q, strlen(q));
	else
		r = write_all(STDOUT_FILENO, name, n);
	free(q);
	if (r < 0 && !g_out_err)
		g_out_err = -r;
}

static void print_name(const char *name)
{
	print_bytes(name, strlen(name));
}

static void ls_long(const char *dir, const struct entry *e, size_t n)
{
	int wl = 1, wu = 1, wg = 1, ws = 1;
	uint64_t blocks = 0;

	for (size_t i = 0; i < n; i++) {
		if (!e[i].has_attr)
			continue;
		wl = digits(e[i].attr.nlink) > wl ? digits(e[i].attr.nlink) : wl;
		wu = digits(e[i].attr.uid) > wu ? digits(e[i].attr.uid) : wu;
		wg = digits(e[i].attr.gid) > wg ? digits(e[i].attr.gid) : wg;
		ws = digits(e[i].attr.size) > ws ? digits(e[i].attr.size) : ws;
		blocks += e[i].attr.blocks;
	}
	if (dir)
		printf("total %" PRIu64 "\n", blocks / 2);
	for (size_t i = 0; i < n; i++) {
		const Wsbridge__V1__Attr *a = &e[i].attr;
		char mode[11], when[64];

		if (!e[i].has_attr) {
			printf("?????????? %*s %*s %*s %*s %12s ", wl, "?", wu, "?", wg, "?", ws, "?", "?");
		} else {
			mode_string(a->mode, mode);
			ls_time(wsb_time_of_wire(a->mtime_ns, a->mtime_s, a->mtime_nsec), when,
				sizeof(when));
			printf("%s %*" PRIu32 " %*" PRIu32 " %*" PRIu32 " %*" PRIu64 " %s ", mode, wl,
			       a->nlink, wu, a->uid, wg, a->gid, ws, a->size, when);
		}
		print_name(e[i].name);
		if (e[i].has_attr && S_ISLNK(a->mode)) {
			char *p = dir ? join(dir, e[i].name) : strdup(e[i].name);
			Wsbridge__V1__PathRequest req = WSBRIDGE__V1__PATH_REQUEST__INIT;
			struct wsc_status st;
			ProtobufCMessage *m;

			req.path = bin(p ? p : "");
			if (p && wsc_unary(g_client, M_READLINK, &req.base,
					   &wsbridge__v1__readlink_reply__descriptor, &m, &st) == 0) {
				Wsbridge__V1__ReadlinkReply *rl = (Wsbridge__V1__ReadlinkReply *)m;

				(void)write_all(STDOUT_FILENO, " -> ", 4);
				print_bytes((const char *)rl->target.data, rl->target.len);
				protobuf_c_message_free_unpacked(m, NULL);
			}
			free(p);
		}
		(void)write_all(STDOUT_FILENO, "\n", 1);
	}
}

static int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = { { "long", no_argument, NULL, 'l' }, {} };
	Wsbridge__V1__StatReply *sr;
	struct wsc_status st;
	struct entry *e;
	const char *path;
	bool lng = false, dir;
	size_t n;
	int c, r;

	optind = 0;
	while ((c = getopt_long(argc, argv, "l", opts, NULL)) != -1) {
		if (c != 'l')
			usage_error("ls: bad option");
		lng = true;
	}
	if (argc - optind > 1)
		usage_error("ls: at most one PATH");
	path = optind < argc ? argv[optind] : "";
	if (optind < argc && path_empty(path))
		return EXIT_FAILURE;

	r = rpc_stat(path, false, &sr, &st);
	if (r < 0) {
		report(path[0] ? path : "/", &st);
		return exit_for(r);
	}
	dir = S_ISDIR(sr->attr->mode);
	/* ls(1): a symlink named on the command line is followed, save by
	 * -l unless it ends in '/'. */
	if (S_ISLNK(sr->attr->mode) && (!lng || (path[0] && path[strlen(path) - 1] == '/'))) {
		r = remote_is_dir(path, &st);
		dir = r > 0;
	}
	if (!dir) {
		struct entry one = { .name = (char *)path, .has_attr = true, .attr = *sr->attr };

		protobuf_c_message_free_unpacked(&sr->base, NULL);
		if (lng) {
			ls_long(NULL, &one, 1);
		} else {
			print_name(path);
			(void)write_all(STDOUT_FILENO, "\n", 1);
		}
		return 0;
	}
	protobuf_c_message_free_unpacked(&sr->base, NULL);

	r = list_dir(path, &e, &n, &st);
	if (r < 0) {
		report(path[0] ? path : "/", &st);
		return exit_for(r);
	}
	if (lng) {
		ls_long(path, e, n);
	} else {
		for (size_t i = 0; i < n; i++) {
			print_name(e[i].name);
			(void)write_all(STDOUT_FILENO, "\n", 1);
		}
	}
	entries_free(e, n);
	return 0;
}

static void print_time(const char *label, struct timespec ts)
{
	char buf[64], zone[16];
	struct tm tm;

	if (!localtime_r(&ts.tv_sec, &tm)) {
		printf("%s: %lld.%09ld s\n", label, (long long)ts.tv_sec, ts.tv_nsec);
		return;
	}
	strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
	strftime(zone, sizeof(zone), "%z", &tm);
	printf("%s: %s.%09ld %s\n", label, buf, ts.tv_nsec, zone);
}

static int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = { { "follow", no_argument, NULL, 'L' }, {} };
	Wsbridge__V1__StatReply *sr;
	struct wsc_status st;
	bool follow = false;
	int c, r, rc = 0;

	optind = 0;
	while ((c = getopt_long(argc, argv, "L", opts, NULL)) != -1) {
		if (c != 'L')
			usage_error("stat: bad option");
		follow = true;
	}
	if (optind >= argc)
		usage_error("stat: no PATH given");
	for (int i = optind; i < argc; i++) {
		const Wsbridge__V1__Attr *a;
		char mode[11];

		if (path_empty(argv[i])) {
			rc = EXIT_FAILURE;
			continue;
		}
		r = rpc_stat(argv[i], follow, &sr, &st);
		if (r < 0) {
			report(argv[i], &st);
			rc = exit_for(r);
			continue;
		}
		a = sr->attr;
		mode_string(a->mode, mode);
		fputs("  File: ", stdout);
		print_name(argv[i]);
		printf("\n  Type: %s\n", type_name(a->mode));
		printf("  Mode: %04" PRIo32 " (%s)\n", a->mode & 07777, mode);
		printf("  Size: %" PRIu64 "\n", a->size);
		printf("Blocks: %" PRIu64 " (512-byte)\n", a->blocks);
		printf("IO Block: %" PRIu32 "\n", a->blksize);
		printf(" Inode: %" PRIu64 "\n", a->ino);
		printf(" Links: %" PRIu32 "\n", a->nlink);
		printf("   Uid: %" PRIu32 "\n", a->uid);
		printf("   Gid: %" PRIu32 "\n", a->gid);
		printf("  Rdev: %" PRIu64 " (%u:%u)\n", a->rdev, major(a->rdev), minor(a->rdev));
		print_time("Access", wsb_time_of_wire(a->atime_ns, a->atime_s, a->atime_nsec));
		print_time("Modify", wsb_time_of_wire(a->mtime_ns, a->mtime_s, a->mtime_nsec));
		print_time("Change", wsb_time_of_wire(a->ctime_ns, a->ctime_s, a->ctime_nsec));
		if (a->btime_ns)
			print_time(" Birth", wsb_ts_of_ns(a->btime_ns));
		else
			puts(" Birth: -"); /* as stat(1): the file system keeps none */
		out_flush();
		protobuf_c_message_free_unpacked(&sr->base, NULL);
	}
	return rc;
}

/* ---- mkdir / rm / mv ---- */

/* Whether the last component of @path is "." or "..". */
static bool dot_last(const char *path)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strcmp(b, ".") || !strcmp(b, "..");
}

/* Make directory @path; with @parents an existing directory is no error;
 * @inner: @path is a leading part of the path asked for, so an existing
 * non-directory there is ENOTDIR (mkdir -p a/b with a a file: "cannot
 * create directory 'a': Not a directory", as coreutils says). */
static int mkdir_one(const char *path, bool parents, bool inner)
{
	Wsbridge__V1__MkdirRequest req = WSBRIDGE__V1__MKDIR_REQUEST__INIT;
	struct wsc_status st;
	int r;

	req.path = bin(path);
	req.mode = 0777 & ~g_umask;
	r = wsc_unary(g_client, M_MKDIR, &req.base, &wsbridge__v1__attr_reply__descriptor, NULL, &st);
	if (r == -EEXIST && parents) {
		struct wsc_status st2;
		uint32_t mode;
		int a = remote_attr(path, true, &mode, NULL, &st2);

		if (a == 0 && S_ISDIR(mode))
			return 0;
		if (a < 0 && a != -ENOENT && a != -ENOTDIR) {
			/* A symlink that leads out of the workspace: say that,
			 * not "File exists". */
			report(path, &st2);
			return a;
		}
		if (a == 0 && inner) {
			/* Not a dangling symlink (that stays "File exists"). */
			report_errno(path, ENOTDIR);
			return -ENOTDIR;
		}
	}
	if (r < 0)
		report(path, &st);
	return r;
}

static int cmd_mkdir(int argc, char **argv)
{
	static const struct option opts[] = { { "parents", no_argument, NULL, 'p' }, {} };
	bool parents = false;
	int c, rc = 0;

	optind = 0;
	while ((c = getopt_long(argc, argv, "p", opts, NULL)) != -1) {
		if (c != 'p')
			usage_error("mkdir: bad option");
		parents = true;
	}
	if (optind >= argc)
		usage_error("mkdir: no PATH given");
	for (int i = optind; i < argc; i++) {
		const char *p = argv[i];
		int r = 0;

		if (path_empty(p)) {
			rc = EXIT_FAILURE;
			continue;
		}
		if (parents) {
			/* Each prefix ending before a '/', then the whole path. */
			char *buf = strdup(p);

			if (!buf) {
				report_errno(p, ENOMEM);
				return EXIT_FAILURE;
			}
			for (char *s = buf; r == 0 && *s; s++) {
				if (*s != '/' || s == buf || s[-1] == '/')
					continue;
				*s = '\0';
				/* "." and ".." exist once what they follow does, as
				 * mkdir -p takes them (agentd makes no such name). */
				if (!is_root(buf) && !dot_last(buf))
					r = mkdir_one(buf, true, true);
				*s = '/';
			}
			free(buf);
			if (r == 0 && !is_root(p))
				r = mkdir_one(p, true, false);
		} else {
			r = mkdir_one(p, false, false);
		}
		if (r < 0)
			rc = exit_for(r);
	}
	return rc;
}

static int rm_tree(const char *path, bool force);

/* Remove one entry whose lstat mode is @mode (0 if unknown). */
static int rm_entry(const char *path, uint32_t mode, bool force, bool recursive)
{
	struct wsc_status st;
	int r;

	if (interrupted())
		return -ECANCELED;
	if (!mode) {
		r = remote_attr(path, false, &mode, NULL, &st);
		if (r < 0) {
			if (r == -ENOENT && force)
				return 0;
			report(path, &st);
			return r;
		}
	}
	if (S_ISDIR(mode)) {
		if (!recursive) {
			report_errno(path, EISDIR);
			return -EISDIR;
		}
		return rm_tree(path, force);
	}
	r = rpc_path(M_UNLINK, path, &st);
	if (r < 0 && !(r == -ENOENT && force))
		report(path, &st);
	else
		r = 0;
	return r;
}

/* Depth-first: the entries of @path, then @path itself. */
static int rm_tree(const char *path, bool force)
{
	struct wsc_status st;
	struct entry *e;
	size_t n;
	int r, rc = 0;

	r = list_dir(path, &e, &n, &st);
	if (r < 0) {
		if (r == -ENOENT && force)
			return 0;
		if (r != -ECANCELED)
			report(path, &st);
		return r;
	}
	for (size_t i = 0; i < n; i++) {
		char *child = join(path, e[i].name);

		r = rm_entry(child, e[i].has_attr ? e[i].attr.mode : 0, force, true);
		free(child);
		if (r == -ECANCELED) {
			entries_free(e, n);
			return r;
		}
		if (r < 0)
			rc = r;
	}
	entries_free(e, n);
	if (rc < 0)
		return rc; /* the directory is not empty; its errors were shown */
	r = rpc_path(M_RMDIR, path, &st);
	if (r < 0 && !(r == -ENOENT && force)) {
		report(path, &st);
		return r;
	}
	return 0;
}

static int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "recursive", no_argument, NULL, 'r' },
		{ "force", no_argument, NULL, 'f' },
		{}
	};
	bool recursive = false, force = false;
	int c, rc = 0;

	optind = 0;
	while ((c = getopt_long(argc, argv, "rRf", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
		case 'R':
			recursive = true;
			break;
		case 'f':
			force = true;
			break;
		default:
			usage_error("rm: bad option");
		}
	}
	if (optind >= argc && !force)
		usage_error("rm: no PATH given");
	for (int i = optind; i < argc; i++) {
		char *b = base_name(argv[i]);
		int r;

		if (!argv[i][0]) {
			/* rm -f ignores what does not exist, '' too (rm(1)). */
			if (!force && path_empty(argv[i]))
				rc = EXIT_FAILURE;
		} else if (is_root(argv[i])) {
			msg("rm %s: refusing to remove the workspace root", q(argv[i]));
			rc = EXIT_FAILURE;
		} else if (b && (!strcmp(b, ".") || !strcmp(b, ".."))) {
			msg("rm %s: refusing to remove '.' or '..'", q(argv[i]));
			rc = EXIT_FAILURE;
		} else {
			r = rm_entry(argv[i], 0, force, recursive);
			if (r < 0)
				rc = exit_for(r);
		}
		free(b);
		if (interrupted())
			return exit_for(-ECANCELED);
	}
	return rc;
}

static int cmd_mv(int argc, char **argv)
{
	Wsbridge__V1__RenameRequest req = WSBRIDGE__V1__RENAME_REQUEST__INIT;
	struct wsc_status st, st_dir;
	uint64_t from_ino = 0, to_ino = 0;
	char *to = NULL, from_q[1100];
	const char *dst;
	int r;

	if (first_operand(argc, argv) == 2) {
		argc--;
		argv++;
	}
	if (argc != 3)
		usage_error("mv: want FROM TO");
	if (path_empty(argv[1]) || path_empty(argv[2]))
		return EXIT_FAILURE;
	/* Into an existing directory, as mv(1) does. */
	r = remote_is_dir(argv[2], &st);
	if (r < 0) {
		report(argv[2], &st);
		return exit_for(r);
	}
	if (r > 0) {
		char *b = base_name(argv[1]);

		if (!b) {
			msg("mv %s: cannot move the workspace root", q(argv[1]));
			return EXIT_FAILURE;
		}
		to = join(argv[2], b);
		free(b);
	}
	dst = to ? to : argv[2];
	/* rename(2) of a name onto itself or onto another link of the same
	 * file succeeds doing nothing; mv(1) says so and fails instead. */
	r = remote_attr(argv[1], false, NULL, &from_ino, &st);
	if (r == 0)
		r = remote_attr(dst, false, NULL, &to_ino, &st);
	snprintf(from_q, sizeof(from_q), "%s", q(argv[1])); /* q() has one buffer */
	if (r == 0 && from_ino == to_ino) {
		msg("mv: %s and %s are the same file", from_q, q(dst));
		free(to);
		return EXIT_FAILURE;
	}
	req.from = bin(argv[1]);
	req.to = bin(dst);
	r = wsc_unary(g_client, M_RENAME, &req.base, &wsbridge__v1__empty__descriptor, NULL, &st);
	if (r == -EINVAL && remote_is_dir(argv[1], &st_dir) > 0)
		/* rename(2): "an attempt was made to make a directory a
		 * subdirectory of itself" (also the root's own rename). */
		msg("mv: cannot move %s to a subdirectory of itself, %s", from_q, q(dst));
	else if (r < 0) {
		/* The reason may be TO's ("Not a directory", "Directory not
		 * empty"): both are named. */
		char what[2300];

		snprintf(what, sizeof(what), "mv %s to %s", from_q, q(dst));
		report_what(what, &st);
	}
	free(to);
	return exit_for(r);
}

static int cmd_health(int argc, char **argv)
{
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	Grpc__Health__V1__HealthCheckResponse *rep;
	const ProtobufCEnumValue *v;
	struct wsc_status st;
	ProtobufCMessage *m;
	int r;

	if (argc != 1)
		usage_error("health: takes no arguments");
	req.service = (char *)"";
	r = wsc_unary(g_client, M_HEALTH, &req.base,
		      &grpc__health__v1__health_check_response__descriptor, &m, &st);
	if (r < 0) {
		report(NULL, &st);
		return EXIT_FAILURE;
	}
	rep = (Grpc__Health__V1__HealthCheckResponse *)m;
	v = protobuf_c_enum_descriptor_get_value(
		&grpc__health__v1__health_check_response__serving_status__descriptor, rep->status);
	printf("%s\n", v ? v->name : "UNKNOWN");
	r = rep->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING ? 0 : 1;
	protobuf_c_message_free_unpacked(m, NULL);
	return r;
}

/* ---- main ---- */

static void help(void)
{
	printf("Usage: wsctl [OPTIONS] COMMAND [ARGS]...\n"
	       "Run commands in a wsbridge workspace and move files in and out of it.\n"
	       "\n"
	       "Options:\n"
	       "  -a, --addr ADDR        agentd address: HOST:PORT or unix:/PATH\n"
	       "                         (default $WSBRIDGE_ADDR, then " DEFAULT_ADDR ")\n"
	       "      --exec CMD         reach agentd through a command's stdin/stdout, e.g.\n"
	       "                         'kubectl exec -i POD -- agentd --stdio'\n"
	       "      --token-file FILE  bearer token (default $WSBRIDGE_TOKEN_FILE)\n"
	       "      --rpc-timeout SEC  deadline of each non-streaming call (default 30);\n"
	       "                         a stream (exec, get, put) waiting on agentd for SEC\n"
	       "                         asks it for its health, and fails when that has no\n"
	       "                         answer (0: never)\n"
	       "  -v, --verbose          show the server's message with every error\n"
	       "  -h, --help             show this help\n"
	       "  -V, --version          show the version\n"
	       "\n"
	       "Commands (remote paths are relative to the workspace root):\n"
	       "  exec [--cwd DIR] [--env K=V]... [--timeout SEC] [--idle-timeout SEC]\n"
	       "       [--tag NAME] [-i] [-t] [--detach] [--shell] -- PROG [ARG]...\n"
	       "                         run a command; -i streams wsctl's stdin to it (else it\n"
	       "                         reads EOF); -t runs it on a terminal (raw mode here,\n"
	       "                         window size followed; implies -i); --detach prints its\n"
	       "                         id and leaves it running; --idle-timeout ends it after\n"
	       "                         SEC without output; --shell runs /bin/sh -c PROG with\n"
	       "                         ARGs as $1..\n"
	       "  attach [--from OFFSET] [--stderr-from OFFSET] [--no-follow] ID|TAG\n"
	       "                         replay a command's output from a byte offset, then\n"
	       "                         follow it to its exit\n"
	       "  ps                     list commands, running and recently exited\n"
	       "  kill [-s SIGNAL] ID|TAG  signal a command's whole tree (default TERM)\n"
	       "  wait ID|TAG            wait for a command to end; exit with its status\n"
	       "  cat PATH...            write remote files to stdout\n"
	       "  get [-r] REMOTE LOCAL  download (LOCAL '-' = stdout); holes kept; a new or\n"
	       "                         plain file is written to a temp file and renamed\n"
	       "                         (keeping its mode), a device, FIFO or hard-linked\n"
	       "                         file in place, a symlink's target as cp(1) does;\n"
	       "                         -r: a directory and all below it, as cp -r\n"
	       "                         (a symlink or FIFO as itself)\n"
	       "  put [-r] LOCAL REMOTE  upload (LOCAL '-' = stdin); holes kept; -r: a\n"
	       "                         directory and all below it, as cp -r (a symlink\n"
	       "                         or FIFO as itself)\n"
	       "  ls [-l] [PATH]         list a directory\n"
	       "  stat [-L|--follow] PATH...  show attributes\n"
	       "  mkdir [-p] PATH...     make directories\n"
	       "  rm [-r] [-f] PATH...   remove files (-r: directories too)\n"
	       "  mv FROM TO             rename (into TO if it is a directory)\n"
	       "  health                 print the server's health (exit 0 if SERVING)\n"
	       "\n"
	       "Exit status: 0 ok, 1 a command failed, 2 usage error.\n"
	       "exec, attach, wait: the command's status; 128+N if killed by signal N; 124 if\n"
	       "a timeout expired; 127 program, cwd or process not found; 126 cannot run it;\n"
	       "125 other failure. Interrupted by signal N (Ctrl-C): 128+N; exec (without\n"
	       "--detach) then kills the command, attach leaves it running.\n");
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "exec", cmd_exec }, { "attach", cmd_attach }, { "ps", cmd_ps },
	{ "kill", cmd_kill }, { "wait", cmd_wait },     { "cat", cmd_cat },
	{ "get", cmd_get },   { "put", cmd_put },       { "ls", cmd_ls },
	{ "stat", cmd_stat }, { "mkdir", cmd_mkdir },   { "rm", cmd_rm },
	{ "mv", cmd_mv },     { "health", cmd_health },
};

/*
 * Put /dev/null on each of fds 0-2 that is closed, before anything opens a
 * descriptor: else the first one gRPC opens (an eventfd, in a static
 * constructor of the library) would take the number, and `put -` would
 * read it, `get R -` write into it. An O_PATH descriptor of "/": reads and
 * writes fail EBADF and poll(2) says POLLNVAL, as on the closed one (ls
 * >&-: "write error"), with no /dev/null needed; remembered in
 * g_std_closed for a clear message from put - and get R -. Run from
 * .preinit_array, which the executable alone may have and which runs
 * before every initializer, the shared libraries' too (System V gABI,
 * "Initialization and Termination Functions").
 */
static void std_fds_hold(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		g_std_closed[fd] = true;
		(void)open("/", O_PATH); /* the lowest free descriptor: fd */
	}
}

__attribute__((section(".preinit_array"), used)) static void (*const std_fds_preinit)(void) =
	std_fds_hold;

int main(int argc, char **argv)
{
	enum { OPT_EXEC = 256, OPT_TOKEN_FILE, OPT_RPC_TIMEOUT };
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "exec", required_argument, NULL, OPT_EXEC },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "rpc-timeout", required_argument, NULL, OPT_RPC_TIMEOUT },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{}
	};
	/* direct: a one-shot client need not pay for gRPC's reconnecting
	 * channel (client.h). */
	struct wsc_options o = { .timeout_ms = 30000, .direct = true };
	const char *token_file = getenv("WSBRIDGE_TOKEN_FILE");
	int (*fn)(int, char **) = NULL;
	char *token = NULL;
	static sigset_t sigs;
	pthread_t th;
	bool addr_given = false;
	int c, r;

	wsb_log_init("wsctl", WSB_LOG_WARNING);
	o.target = getenv("WSBRIDGE_ADDR");
	if (!o.target || !*o.target)
		o.target = DEFAULT_ADDR;
	while ((c = getopt_long(argc, argv, "+a:vhV", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			o.target = optarg;
			addr_given = true;
			break;
		case OPT_EXEC:
			o.exec_cmd = optarg;
			break;
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_RPC_TIMEOUT: {
			char *end;
			double sec;

			errno = 0;
			sec = strtod(optarg, &end);
			/* Milliseconds in a uint32_t (wsc_options): 49 days. */
			if (errno || end == optarg || *end || !(sec >= 0) || sec > UINT32_MAX / 1000.0)
				usage_error("--rpc-timeout wants seconds from 0 to %u, not %s",
					    UINT32_MAX / 1000, q(optarg));
			o.timeout_ms = (uint32_t)(sec * 1000.0);
			break;
		}
		case 'v':
			g_verbose = true;
			break;
		case 'h':
			help();
			return 0;
		case 'V':
			printf("wsctl %s\n", WSB_VERSION);
			return 0;
		default:
			usage_error("bad option");
		}
	}
	if (o.exec_cmd && addr_given)
		usage_error("-a and --exec both say how to reach agentd: give one");
	/* A stream has no deadline (a command may run for days): a frozen
	 * agentd or a dead link is found by health checks instead. */
	o.health_ms = o.timeout_ms;
	if (!o.exec_cmd) {
		const char *why;

		if (wsb_addr_check(o.target, &why) < 0)
			usage_error("bad address %s: %s", q(o.target), why);
	}
	if (optind >= argc)
		usage_error("no command given");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[optind], commands[i].name))
			fn = commands[i].fn;
	if (!fn)
		usage_error("unknown command %s", q(argv[optind]));
	g_cmd = argv[optind];
	if (g_verbose)
		wsb_log_init("wsctl", WSB_LOG_DEBUG);

	if (token_file && *token_file) {
		r = wsb_token_read(token_file, &token);
		if (r == -EINVAL) {
			msg("token file %s holds no valid token (one word of printable ASCII)",
			    q(token_file));
			exit(EXIT_USAGE);
		} else if (r < 0) {
			msg("token file %s: %s", q(token_file), strerror(-r));
			exit(EXIT_USAGE);
		}
		o.token = token;
		g_token_file = token_file;
	}
	g_umask = umask(0);
	umask(g_umask);

	wsb_malloc_tune();
	/* Before any thread exists, so that all inherit the mask. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR2);
	sigaddset(&sigs, SIGWINCH);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	g_main_thread = pthread_self();
	{
		struct sigaction sa = { .sa_sigaction = on_wake, .sa_flags = SA_SIGINFO };

		sigemptyset(&sa.sa_mask);
		(void)sigaction(SIGUSR1, &sa, NULL);
	}
	r = pthread_create(&th, NULL, signal_thread, &sigs);
	if (r) {
		report_errno(NULL, r);
		return EXIT_FAILURE;
	}
	g_sig_thread = th;

	r = wsc_connect(&o, &g_client);
	if (r < 0) {
		if (r == -EINVAL && token)
			msg("token file %s holds no valid token (printable ASCII)", q(token_file));
		else
			msg("cannot connect to %s: %s", q(o.exec_cmd ? o.exec_cmd : o.target),
			    strerror(-r));
		free(token);
		stop_signal_thread(th);
		return strcmp(g_cmd, "exec") ? EXIT_FAILURE : EXIT_EXEC_FAIL;
	}
	atomic_store(&g_transport_pid, wsc_transport_pid(g_client));
	r = fn(argc - optind, argv + optind);
	/* As coreutils' close_stdout(): a write to stdout that failed on the
	 * way (a full disk, a closed pipe: SIGPIPE is ignored) fails the
	 * command, though a later flush had nothing left to write. */
	out_flush();
	if ((g_out_err || ferror(stdout)) && r == 0) {
		msg("%s: write error on standard output: %s", g_cmd,
		    strerror(g_out_err ? g_out_err : EIO));
		r = EXIT_FAILURE;
	}
#ifndef __SANITIZE_ADDRESS__
	/*
	 * Leave without tearing gRPC down: grpc_shutdown() joins gRPC's
	 * thread pools, 2-4 ms here (gRPC 1.51), a third of a short `wsctl
	 * exec`. Everything is flushed and the kernel frees the rest; the
	 * remote side sees the connection close. Not with --exec: wsc_free()
	 * reaps (and if need be stops) the transport command. ASan builds
	 * always tear down, so that LeakSanitizer checks the client code.
	 */
	if (!o.exec_cmd) {
		fflush(stderr);
		_exit(r);
	}
#endif
	/* wsc_free() reaps the command: its pid may be another's after. */
	atomic_store(&g_transport_pid, 0);
	g_client = wsc_free(g_client);
	stop_signal_thread(th);
	free(token);
	return r;
}
