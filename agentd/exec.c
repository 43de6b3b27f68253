/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The process table (see exec.h): spawn and exec with a session, a process group
 * and (where allowed) a cgroup v2 per command, optionally on a PTY; output
 * read with libuv into per-stream journals that watchers pull from; stdin
 * writes; wall-clock and idle timeouts (SIGTERM, then SIGKILL); a SIGCHLD
 * reaper that also reaps orphans; exit statuses kept for a while. Plus the
 * head-and-tail output capture and the UTF-8 sanitizer.
 *
 * Runs on the loop thread only; there are no locks. Every libuv handle is
 * embedded in struct exec_process and the struct is freed once the last
 * close callback ran and no reference is left (libuv handle.rst: memory may
 * be released only in close_cb).
 *
 * Why not uv_spawn(3) or posix_spawn(3): neither can make a PTY slave the
 * controlling terminal (TIOCSCTTY) or start the child in a cgroup; the child
 * here does both, then execs. It starts the way glibc's posix_spawn does
 * (CLONE_VM | CLONE_VFORK on a stack of its own: no copy of agentd's page
 * tables, which made a fork(2) cost 0.6 ms at 14 MiB RSS); like libuv, the
 * parent blocks all signals around it, the child resets every disposition
 * and the mask, and exec errors come back through a close-on-exec pipe.
 */
#include <dirent.h>
#include <errno.h>
#include <linux/sched.h> /* struct clone_args, CLONE_INTO_CGROUP */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h> /* clone(2) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"
#include "wsb.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

/** Output a lossless watcher may lag behind before reading pauses, bytes. */
#define FLOW_HIGH_MAX ((size_t)1024 * 1024)
/** The child's own stack until it execs, bytes (touched: a few KiB). */
#define CHILD_STACK_BYTES ((size_t)256 * 1024)
/** Interval of the reaper's re-check after a zombie libuv owns, ms. */
#define RESCAN_MS 20
/**
 * PTY: time the terminal is read after the command itself was reaped, ms;
 * also how often one whose slave fds all closed while the command runs is
 * looked at again (on_hup_poll()).
 * Linux reports EIO on the master once the last slave fd is closed; gVisor
 * does not, so the output ends this long after the exit at the latest
 * (background jobs of the session got SIGHUP with their leader anyway).
 */
#define PTY_LINGER_MS 200
/** PTY: on_hup_poll()'s interval while the terminal gives bytes, ms. */
#define PTY_HUP_POLL_MS 5

enum pipe_state {
	PIPE_NONE,    /* not used or not initialised */
	PIPE_OPEN,    /* initialised; reading (unless paused) or writing */
	PIPE_CLOSING, /* uv_close called; no more callbacks but the close */
	PIPE_CLOSED,  /* close callback ran */
};

struct exec_table {
	uv_loop_t *loop;
	struct exec_config cfg;
	struct exec_process *head, *tail; /* kept processes, in id order */
	unsigned running;                 /* kept and not EXITED */
	unsigned count;                   /* kept */
	unsigned nexited;                 /* kept and EXITED */
	size_t exited_bytes;              /* their journals' memory */
	unsigned nalloc;                  /* allocated, kept or not */
	uint64_t next_id;
	uint64_t seq;                     /* arrival order of reads */
	uv_signal_t sigchld;
	uv_timer_t rescan;
	int open_handles;
	bool freeing;
	bool closing;
	struct exec_table *tnext;         /* all tables (the reaper checks all) */
	/* cgroup v2: the base directory wsbridge-agentd.<pid>, or -1 */
	int cg_fd;
	int cg_parent_fd;
	int cg_lock_fd;                   /* the base, O_RDONLY, flock(2)ed */
	char *cg_name;
	bool cg_noted;                    /* the fallback was logged */
	void *child_stack;                /* CHILD_STACK_BYTES, or NULL: see child_start() */
};

/* One queued stdin write. */
struct stdin_req {
	uv_write_t req;
	struct exec_process *p;
	uint8_t *data;
	size_t len;
	bool eof;
	char veof;     /* PTY: the terminal's EOF character, written after data */
	exec_written_fn done;
	void *arg;
};

struct exec_watch {
	struct exec_process *p;
	struct exec_watch *prev, *next;
	uint64_t cur[EXEC_NSTREAMS];
	unsigned flags;
	bool waiting;   /* next() returned NONE: ready() is owed on news */
	bool exit_sent;
	exec_ready_fn ready;
	void *arg;
};

struct exec_process {
	struct exec_table *table;
	struct exec_process *prev, *next; /* in table->head while kept */
	bool kept;
	unsigned refs;                    /* table (while kept), watchers, exec_ref */

	uint64_t id;
	int pid;                          /* also the pgid (setsid) */
	char *tag;                        /* "" when none */
	char **argv;                      /* as run, owned */
	size_t argc;
	void *cwd;
	size_t cwd_len;
	int64_t start_ns, end_ns;
	bool pty;
	int master;                       /* PTY master (owned by out[0]) or -1 */
	int cg_fd;                        /* O_PATH fd of cmd-<id>, or -1 */
	bool cg_fresh;                    /* cmd-<id> made anew for it */

	struct journal j[EXEC_NSTREAMS];
	size_t flow_high, flow_low;       /* lossless lag marks, bytes */
	size_t rsize;                     /* read size, bytes */
	struct exec_watch *watchers;

	uv_pipe_t out[EXEC_NSTREAMS];     /* out[0] is the PTY master in PTY mode */
	enum pipe_state out_state[EXEC_NSTREAMS];
	uv_pipe_t in;                     /* stdin pipe (not in PTY mode) */
	enum pipe_state in_state;
	bool stdin_closed;                /* EOF queued or stdin gone */
	size_t stdin_queued;              /* bytes in uv_write requests */

	uv_timer_t timer;                 /* timeout, kill phases, then keep */
	enum {
		TIMER_NONE,     /* no timeout, or stopped */
		TIMER_TIMEOUT,  /* waiting for the timeout */
		TIMER_TERM,     /* SIGTERM sent, waiting to SIGKILL */
		TIMER_KILL,     /* SIGKILL sent, waiting to close the pipes */
		TIMER_KEEP,     /* EXITED, waiting to drop the process */
	} timer_phase;
	uv_timer_t idle;
	uint64_t idle_ms, grace_ms;
	uv_timer_t linger;                /* PTY: end of output after the exit;
					     pipes: the release (linger_ms) */
	uint64_t linger_ms;               /* exec_spec.linger_ms */
	bool held;                        /* released: others hold the output */

	unsigned open_handles;            /* handles whose close_cb is pending */
	bool exited;                      /* reaped */
	bool group_gone;                  /* the group emptied after the reap (tree_signal()) */
	bool reported;                    /* EXITED */
	bool paused;
	bool pty_hup;                     /* PTY: no slave fd open, not reaped */
	bool pty_partial;                 /* PTY: the last byte written ends no line */
	bool signal_call;                 /* exec_signal() was used */
	bool killed;                      /* exec_kill() was used */
	enum exec_killed_by reason;       /* first kill reason, or NOT_KILLED */
	struct exec_exit ex;

	char *rbuf;                       /* rsize bytes, until EXITED */
};

static struct exec_table *g_tables; /* loop thread */

static void on_sigchld(uv_signal_t *h, int signum);

static void maybe_report(struct exec_process *p);
static void flow_check(struct exec_process *p);
static void on_linger(uv_timer_t *timer);
static void on_held(uv_timer_t *timer);
static void on_hup_poll(uv_timer_t *timer);
static void table_maybe_free(struct exec_table *t);

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Move @p fd to a descriptor >= 3 (close-on-exec), so that the child's
 * stdio set-up cannot clobber it. Returns the fd or -errno (fd closed). */
static int fd_high(int fd)
{
	int nfd;

	if (fd < 0 || fd > 2)
		return fd;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (nfd < 0)
		nfd = -errno;
	close(fd);
	return nfd;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- cgroup v2 ---- */

/*
 * Undo the octal escapes (\040 etc.) /proc/self/mountinfo uses for spaces,
 * tabs, newlines and backslashes in paths (proc(5)). In place.
 */
static void mountinfo_unescape(char *s)
{
	char *o = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
}

/*
 * The directory of this process's cgroup v2: the cgroup2 mount
 * (/proc/self/mountinfo, fstype "cgroup2") plus the path "0::PATH" of
 * /proc/self/cgroup (cgroups(7)), relative to the mount's root. Returns a
 * malloc'd path or NULL.
 */
static char *cg_own_dir(void)
{
	char *line = NULL, *own = NULL, *mnt = NULL, *mroot = NULL, *res = NULL;
	size_t cap = 0, rl;
	FILE *f;

	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			own = strdup(line + 3);
			break;
		}
	}
	fclose(f);
	if (!own)
		goto out;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		goto out;
	while (!mnt && getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SRC SUPER */
		char *fields[6], *save = NULL, *tok, *sep = strstr(line, " - ");
		int n = 0;

		if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
			continue;
		*sep = '\0';
		for (tok = strtok_r(line, " ", &save); tok && n < 6; tok = strtok_r(NULL, " ", &save))
			fields[n++] = tok;
		if (n < 5)
			continue;
		mroot = strdup(fields[3]);
		mnt = strdup(fields[4]);
	}
	fclose(f);
	if (!mnt || !mroot)
		goto out;
	mountinfo_unescape(mnt);
	mountinfo_unescape(mroot);
	/* own is relative to the cgroup namespace root, as is the mount root. */
	rl = strcmp(mroot, "/") == 0 ? 0 : strlen(mroot);
	if (rl && (strncmp(own, mroot, rl) != 0 || (own[rl] && own[rl] != '/')))
		goto out;
	if (asprintf(&res, "%s%s", mnt, own + rl) < 0)
		res = NULL;
	/* "/sys/fs/cgroup/" for the root cgroup: no trailing slash. */
	rl = res ? strlen(res) : 0;
	while (rl > 1 && res[rl - 1] == '/')
		res[--rl] = '\0';
out:
	free(line);
	free(own);
	free(mnt);
	free(mroot);
	return res;
}

/* Write a decimal number to the cgroup file @p name under @p dirfd. */
static int cg_write(int dirfd, const char *name, long v)
{
	char buf[32];
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC), n, r = 0;

	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%ld", v);
	if (write(fd, buf, (size_t)n) != n)
		r = -errno;
	close(fd);
	return r;
}

/*
 * The pids in cgroup.procs of @p dirfd: a malloc'd array, *ret_n entries.
 * Returns 0 or -errno.
 */
static int cg_pids(int dirfd, int **ret, size_t *ret_n)
{
	char buf[8192], *s, *end;
	size_t n = 0, cap = 0, have = 0;
	int *v = NULL, *nv, fd;
	ssize_t got;
	long pid;

	fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		got = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		have += (size_t)got;
		buf[have] = '\0';
		/* Parse whole lines; keep a partial last line for the next read. */
		s = buf;
		while ((end = strchr(s, '\n'))) {
			*end = '\0';
			pid = strtol(s, NULL, 10);
			if (pid > 0) {
				if (n == cap) {
					cap = cap ? 2 * cap : 64;
					nv = realloc(v, cap * sizeof(*v));
					if (!nv) {
						free(v);
						close(fd);
						return -ENOMEM;
					}
					v = nv;
				}
				v[n++] = (int)pid;
			}
			s = end + 1;
		}
		have = strlen(s);
		memmove(buf, s, have);
	}
	close(fd);
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Move every process of the cgroup @p from into the cgroup @p to. */
static void cg_move_all(int from, int to)
{
	int *pids = NULL;
	size_t n = 0, i;

	if (cg_pids(from, &pids, &n) < 0)
		return;
	for (i = 0; i < n; i++)
		(void)cg_write(to, "cgroup.procs", pids[i]);
	free(pids);
}

/*
 * Send @p sig to every member of the cgroup @p dirfd: SIGKILL through
 * cgroup.kill (Linux 5.14, cgroup-v2.rst), else (and for other signals) to
 * each pid listed in cgroup.procs, except members of process group
 * @p skip_pgid (the caller signalled that group already: a second delivery
 * would run a handler twice; -1: none). A pid read there is a live member, so the
 * window for signalling a reused pid is the time between read and kill.
 */
static void cg_signal(int dirfd, int sig, int skip_pgid)
{
	int *pids = NULL;
	size_t n = 0, i;
	int round;

	if (sig == SIGKILL && cg_write(dirfd, "cgroup.kill", 1) == 0)
		return;
	/* Members may fork while we walk: a few rounds for SIGKILL. */
	for (round = 0; round < (sig == SIGKILL ? 3 : 1); round++) {
		if (cg_pids(dirfd, &pids, &n) < 0 || n == 0) {
			free(pids);
			return;
		}
		for (i = 0; i < n; i++)
			if (sig == SIGKILL || getpgid(pids[i]) != skip_pgid)
				(void)kill(pids[i], sig);
		free(pids);
		pids = NULL;
	}
}

/* The directory @p name under @p dirfd (any fd, O_PATH too) to list, or
 * NULL (errno set). */
static DIR *dir_open_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;

	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

/* rmdir(2) every cmd-* cgroup below the base @p base_fd that is empty
 * now. */
static void cg_rmdir_cmds(int base_fd)
{
	DIR *d = dir_open_at(base_fd, ".");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "cmd-", 4) == 0)
			(void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
	closedir(d);
}

/*
 * Remove the cgroup directory @p name under @p parent_fd, waiting up to
 * @p ms ms while members already signalled finish dying (rmdir(2) of a
 * populated cgroup, or of one with cgroups below it, is EBUSY,
 * cgroup-v2.rst). With @p base_fd (>= 0: the directory itself) its cmd-*
 * cgroups are removed first as they empty. Returns 0 (removed, or gone)
 * or -errno. Blocks: shutdown and start-up only.
 */
static int cg_rmdir_wait(int parent_fd, const char *name, int base_fd, int ms)
{
	const struct timespec tick = { 0, 10 * 1000 * 1000 };
	int waited;

	for (waited = 0;; waited += 10) {
		if (base_fd >= 0)
			cg_rmdir_cmds(base_fd);
		if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || waited >= ms)
			return -errno;
		nanosleep(&tick, NULL);
	}
}

/* SIGKILL every member of cgroup @p name under @p parent_fd (and, through
 * cgroup.kill, of the cgroups below it) and remove it. */
static void cg_kill_rmdir(int parent_fd, const char *name)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return;
	cg_signal(fd, SIGKILL, 0);
	close(fd);
	(void)cg_rmdir_wait(parent_fd, name, -1, 1000);
}

/*
 * SIGKILL what a dead agentd left in its base cgroup @p d (listed): the
 * base's own members (leftovers moved up), then each command's cgroup,
 * removed (without cgroup.kill, Linux < 5.14, a signal reaches one
 * cgroup's members only).
 */
static void cg_kill_base(DIR *d)
{
	struct dirent *de;

	cg_signal(dirfd(d), SIGKILL, 0);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "cmd-", 4) == 0)
			cg_kill_rmdir(dirfd(d), de->d_name);
}

/*
 * Remove the stale base directories of agentds that are gone (best effort),
 * stopping what they left running there: their commands, and the
 * background processes of commands that exited, belong to no agentd now
 * (one killed with SIGKILL could not stop them) and no List shows them.
 * Gone means both: no process of its pid here (kill(2) ESRCH), and no
 * flock(2) on the directory, which a live agentd holds for its life
 * (cg_setup()): a pid says nothing across pid namespaces (an agentd under
 * bwrap --unshare-pid sharing the cgroup parent), the lock does. Where
 * flock(2) fails otherwise (unsupported), nothing is stopped.
 */
static void cg_cleanup_stale(int parent_fd, const char *mine)
{
	static const char prefix[] = "wsbridge-agentd.";
	DIR *d = dir_open_at(parent_fd, ".");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		DIR *sd;
		long pid;

		if (strncmp(de->d_name, prefix, sizeof(prefix) - 1) != 0 ||
		    strcmp(de->d_name, mine) == 0)
			continue;
		pid = strtol(de->d_name + sizeof(prefix) - 1, NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		sd = dir_open_at(parent_fd, de->d_name);
		if (!sd)
			continue;
		if (flock(dirfd(sd), LOCK_EX | LOCK_NB) < 0) {
			closedir(sd);
			continue; /* a live agentd's, or cannot tell */
		}
		cg_kill_base(sd);
		/* Removed under the lock: an agentd starting with this name
		 * meanwhile would lose its new cgroup to the rmdir. */
		(void)cg_rmdir_wait(parent_fd, de->d_name, -1, 1000);
		closedir(sd);
		wsb_info("exec: removed %s, the cgroup of an agentd that is gone, and what still ran in it",
			   de->d_name);
	}
	closedir(d);
}

/* Set up the base cgroup wsbridge-agentd.<pid> (exec_config.cgroups). */
static void cg_setup(struct exec_table *t)
{
	char *own = cg_own_dir();
	int pfd = -1, fd = -1;
	bool existed;

	if (!own) {
		wsb_info("exec: no cgroup v2 here; a command's tree is its process group");
		return;
	}
	if (asprintf(&t->cg_name, "wsbridge-agentd.%ld", (long)getpid()) < 0) {
		t->cg_name = NULL;
		goto fail;
	}
	pfd = open(own, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		goto fail;
	cg_cleanup_stale(pfd, t->cg_name);
	existed = mkdirat(pfd, t->cg_name, 0755) < 0;
	if (existed && errno != EEXIST)
		goto fail;
	/* Held for agentd's life: the next agentd's cg_cleanup_stale() then
	 * knows this one lives whatever its pid says there. One held already
	 * is an agentd of the same pid in another pid namespace: not ours. */
	t->cg_lock_fd = openat(pfd, t->cg_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->cg_lock_fd >= 0 && flock(t->cg_lock_fd, LOCK_EX | LOCK_NB) < 0 &&
	    errno == EWOULDBLOCK) {
		close_fd(&t->cg_lock_fd);
		errno = EBUSY;
		goto fail;
	}
	fd = openat(pfd, t->cg_name, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || faccessat(fd, "cgroup.procs", W_OK, 0) < 0) {
		close_fd(&t->cg_lock_fd);
		(void)unlinkat(pfd, t->cg_name, AT_REMOVEDIR);
		goto fail;
	}
	if (existed && t->cg_lock_fd >= 0) {
		/* A dead agentd's of the same pid (the lock was free: pid 1
		 * of a pid namespace, started again): what it left goes. */
		DIR *d = dir_open_at(fd, ".");

		if (d) {
			cg_kill_base(d);
			closedir(d);
		} else {
			cg_signal(fd, SIGKILL, 0);
		}
	}
	t->cg_fd = fd;
	t->cg_parent_fd = pfd;
	wsb_info("exec: each command gets a cgroup under %s/%s", own, t->cg_name);
	free(own);
	return;
fail:
	wsb_info("exec: cannot create cgroups under '%s' (%s); a command's tree is its process group",
		 own, strerror(errno));
	close_fd(&fd);
	close_fd(&pfd);
	free(t->cg_name);
	t->cg_name = NULL;
	free(own);
}

/*
 * Remove the base cgroup. The background processes that commands left
 * running there (cg_remove()) stop with agentd, as they would with its
 * pod: SIGTERM, then SIGKILL after 1 s; what even that leaves (cannot
 * happen but for a process stuck in the kernel) goes back to agentd's own
 * cgroup. The cmd-* cgroups of commands killed a moment ago (drop() left
 * the ones still busy with dying members) go as they empty. Loop thread,
 * at shutdown: blocks up to 2 s.
 */
static void cg_teardown(struct exec_table *t)
{
	if (t->cg_fd < 0)
		return;
	if (cg_rmdir_wait(t->cg_parent_fd, t->cg_name, t->cg_fd, 0) == -EBUSY) {
		cg_signal(t->cg_fd, SIGTERM, 0);
		if (cg_rmdir_wait(t->cg_parent_fd, t->cg_name, t->cg_fd, 1000) < 0) {
			cg_signal(t->cg_fd, SIGKILL, 0);
			if (cg_rmdir_wait(t->cg_parent_fd, t->cg_name, t->cg_fd, 1000) < 0) {
				cg_move_all(t->cg_fd, t->cg_parent_fd);
				(void)unlinkat(t->cg_parent_fd, t->cg_name, AT_REMOVEDIR);
			}
		}
	}
	close_fd(&t->cg_lock_fd);
	close_fd(&t->cg_fd);
	close_fd(&t->cg_parent_fd);
	free(t->cg_name);
	t->cg_name = NULL;
}

static void cg_note_fallback(struct exec_table *t, const char *what, int err)
{
	if (t->cg_noted)
		return;
	t->cg_noted = true;
	wsb_info("exec: %s: %s; such commands are signalled through their process group only",
		 what, strerror(err));
}

/*
 * Make cmd-<id> for @p p. Sets p->cg_fd and returns the fd of its
 * cgroup.procs for the child to join (write "0": the writer moves,
 * cgroup-v2.rst), -1 when there is no cgroup for it (the kernel or the
 * delegation refuses one: logged once), or -EMFILE/-ENFILE when agentd is
 * out of descriptors: that fails the start rather than run the command
 * without the cgroup its tree kill relies on.
 */
static int cg_create(struct exec_process *p)
{
	struct exec_table *t = p->table;
	char name[64], procs[80];
	int fd, err;

	if (t->cg_fd < 0)
		return -1;
	snprintf(name, sizeof(name), "cmd-%llu", (unsigned long long)p->id);
	if (mkdirat(t->cg_fd, name, 0755) == 0) {
		p->cg_fresh = true;
	} else if (errno == EEXIST) {
		/*
		 * Stale: left by an earlier table of this process (ids start
		 * at 1 again) or an earlier agentd with this pid, when an
		 * unreaped zombie kept it populated (cg_remove()). It may
		 * have been killed through cgroup.kill, and Linux SIGKILLs
		 * every child cloned into such a cgroup with CLONE_INTO_CGROUP
		 * (cgroup_css_set_fork() takes the kill_seq of the parent's
		 * cgroup, cgroup_post_fork() compares the target's). Make it
		 * anew; if it is still busy, the child joins it by writing
		 * cgroup.procs instead (not fresh: no clone3 into it).
		 */
		int old = openat(t->cg_fd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);

		if (old >= 0) {
			cg_move_all(old, t->cg_fd);
			close(old);
		}
		if (unlinkat(t->cg_fd, name, AT_REMOVEDIR) == 0) {
			if (mkdirat(t->cg_fd, name, 0755) < 0) {
				cg_note_fallback(t, "cannot create a command cgroup", errno);
				return -1;
			}
			p->cg_fresh = true;
		}
	} else {
		cg_note_fallback(t, "cannot create a command cgroup", errno);
		return -1;
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", name);
	p->cg_fd = openat(t->cg_fd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
	fd = p->cg_fd >= 0 ? openat(t->cg_fd, procs, O_WRONLY | O_CLOEXEC) : -1;
	if (fd < 0) {
		err = errno;
		close_fd(&p->cg_fd);
		(void)unlinkat(t->cg_fd, name, AT_REMOVEDIR);
		if (err == EMFILE || err == ENFILE)
			return -err;
		cg_note_fallback(t, "cannot open a command cgroup", err);
		return -1;
	}
	return fd;
}

/*
 * Remove cmd-<id>; background leftovers of a command that exited are moved
 * to the base cgroup first (they outlive their command). A process still
 * in do_exit(2) keeps the cgroup populated (EBUSY) but is no longer in
 * cgroup.procs to be moved, and one may fork during the move: then, unless
 * @p final, p->cg_fd stays so that drop() tries again later. Returns true
 * when p->cg_fd is gone.
 */
static bool cg_remove(struct exec_process *p, bool final)
{
	struct exec_table *t = p->table;
	char name[64];

	if (p->cg_fd < 0)
		return true;
	snprintf(name, sizeof(name), "cmd-%llu", (unsigned long long)p->id);
	if (t->cg_fd >= 0 && unlinkat(t->cg_fd, name, AT_REMOVEDIR) < 0 && errno == EBUSY) {
		bool busy = true;
		int round;

		/* Leftovers may fork while they are moved: a few rounds. */
		for (round = 0; busy && round < 3; round++) {
			cg_move_all(p->cg_fd, t->cg_fd);
			busy = unlinkat(t->cg_fd, name, AT_REMOVEDIR) < 0 && errno == EBUSY;
		}
		if (busy && !final)
			return false;
	}
	close_fd(&p->cg_fd);
	return true;
}

/* ---- signalling ---- */

/*
 * Whether the process group of reaped leader @p p (no cgroup) is no longer
 * its tree's: it was empty when looked at once (ESRCH, kept), or a process
 * now has the leader's pid. A pid is reused only once no process has it as
 * pid, pgid or sid (kernel/pid.c), so while the group has members nobody
 * gets the number; once it is free again, the next process given it can
 * make a group of that number (a command agentd started after, which
 * Signal of this one would kill: it did). Looked at when the leader is
 * reaped, when an orphan of its group is (groups_check(): the group may
 * have emptied then, before its number goes to a new leader that may be
 * gone again by the next Signal while its group lives on), when a command
 * gets its pid, and before each signal. Loop thread.
 */
static bool group_gone(struct exec_process *p)
{
	if (!p->group_gone &&
	    (kill(p->pid, 0) == 0 || errno == EPERM || (kill(-p->pid, 0) < 0 && errno == ESRCH)))
		p->group_gone = true;
	return p->group_gone;
}

/* Signal the whole tree; only while the process is ours. */
static void tree_signal(struct exec_process *p, int sig)
{
	if (p->reported || p->pid <= 0)
		return;
	/* ESRCH: the group is already empty. The group first: kill(-pgid)
	 * reaches every member at once, even one forked a moment ago. Once
	 * the leader was reaped and the group emptied, its number may be
	 * another process's group's (a pid is reused once no process has it
	 * as pid, pgid or sid): where the cgroup holds the tree, only the
	 * cgroup is signalled then, every member of it (those still in the
	 * leader's group too: no kill(-pgid) reached them). */
	bool group = !p->exited || (p->cg_fd < 0 && !group_gone(p));

	if (group)
		(void)kill(-p->pid, sig);
	if (p->cg_fd >= 0)
		cg_signal(p->cg_fd, sig, group ? p->pid : -1);
}

/* ---- table ---- */

int exec_table_new(uv_loop_t *loop, const struct exec_config *cfg, struct exec_table **ret_table)
{
	struct exec_table *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	if (cfg)
		t->cfg = *cfg;
	if (!t->cfg.max_running)
		t->cfg.max_running = EXEC_MAX_PROCESSES_DEFAULT;
	if (!t->cfg.journal_bytes)
		t->cfg.journal_bytes = EXEC_JOURNAL_DEFAULT;
	if (!t->cfg.exit_keep_ms)
		t->cfg.exit_keep_ms = EXEC_EXIT_KEEP_DEFAULT_MS;
	if (!t->cfg.max_kept)
		t->cfg.max_kept = EXEC_MAX_KEPT_DEFAULT;
	if (t->cfg.journal_bytes < EXEC_JOURNAL_MIN || t->cfg.journal_bytes > EXEC_JOURNAL_MAX) {
		free(t);
		return -EINVAL;
	}
	t->loop = loop;
	t->next_id = 1;
	t->cg_fd = t->cg_parent_fd = t->cg_lock_fd = -1;
	r = uv_signal_init(loop, &t->sigchld);
	if (r < 0) {
		free(t);
		return r;
	}
	t->sigchld.data = t;
	t->open_handles++;
	uv_timer_init(loop, &t->rescan);
	t->rescan.data = t;
	uv_unref((uv_handle_t *)&t->rescan);
	t->open_handles++;
	uv_signal_start(&t->sigchld, on_sigchld, SIGCHLD);
	uv_unref((uv_handle_t *)&t->sigchld); /* ref'd while a process runs */
	t->tnext = g_tables;
	g_tables = t;
	if (t->cfg.cgroups)
		cg_setup(t);
	*ret_table = t;
	return 0;
}

unsigned exec_table_running(const struct exec_table *t)
{
	return t->running;
}

unsigned exec_table_count(const struct exec_table *t)
{
	return t->count;
}

unsigned exec_table_max(const struct exec_table *t)
{
	return t->cfg.max_running;
}

size_t exec_table_journal_bytes(const struct exec_table *t)
{
	return t->cfg.journal_bytes;
}

void exec_table_kill_all(struct exec_table *t, enum exec_killed_by why)
{
	struct exec_process *p, *next;

	for (p = t->head; p; p = next) {
		next = p->next;
		exec_kill(p, why);
	}
}

static void on_timer(uv_timer_t *timer);

void exec_table_terminate_all(struct exec_table *t, enum exec_killed_by why)
{
	for (struct exec_process *p = t->head; p; p = p->next) {
		if (p->reported || p->killed || p->timer_phase > TIMER_TIMEOUT)
			continue; /* gone, or on its way: TERM sent already */
		if (p->reason == EXEC_NOT_KILLED)
			p->reason = why;
		uv_timer_stop(&p->timer);
		p->timer_phase = TIMER_NONE;
		on_timer(&p->timer); /* TERM now, KILL after the grace */
	}
}

struct exec_process *exec_table_next(const struct exec_table *t, const struct exec_process *prev)
{
	return prev ? prev->next : t->head;
}

struct exec_process *exec_find(const struct exec_table *t, uint64_t id)
{
	struct exec_process *p;

	for (p = t->head; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

struct exec_process *exec_find_tag(const struct exec_table *t, const char *tag)
{
	struct exec_process *p;

	if (!tag || !*tag)
		return NULL;
	for (p = t->head; p; p = p->next)
		if (strcmp(p->tag, tag) == 0)
			return p;
	return NULL;
}

static void table_handle_closed(uv_handle_t *h)
{
	struct exec_table *t = h->data;

	if (--t->open_handles == 0)
		free(t);
}

static void table_maybe_free(struct exec_table *t)
{
	struct exec_table **pp;

	if (!t->freeing || t->nalloc > 0 || t->closing)
		return;
	t->closing = true;
	for (pp = &g_tables; *pp; pp = &(*pp)->tnext)
		if (*pp == t) {
			*pp = t->tnext;
			break;
		}
	cg_teardown(t);
	if (t->child_stack)
		munmap(t->child_stack, CHILD_STACK_BYTES);
	t->child_stack = NULL;
	uv_close((uv_handle_t *)&t->sigchld, table_handle_closed);
	uv_close((uv_handle_t *)&t->rescan, table_handle_closed);
}

/* ---- process lifetime ---- */

static void process_free(struct exec_process *p)
{
	struct exec_table *t = p->table;
	size_t i;

	for (i = 0; i < EXEC_NSTREAMS; i++)
		journal_done(&p->j[i]);
	if (p->argv)
		for (i = 0; i < p->argc; i++)
			free(p->argv[i]);
	free(p->argv);
	free(p->tag);
	free(p->cwd);
	free(p->rbuf);
	close_fd(&p->cg_fd);
	free(p);
	t->nalloc--;
	table_maybe_free(t);
}

static void process_maybe_free(struct exec_process *p)
{
	if (p->refs == 0 && p->open_handles == 0)
		process_free(p);
}

void exec_ref(struct exec_process *p)
{
	p->refs++;
}

void exec_unref(struct exec_process *p)
{
	p->refs--;
	process_maybe_free(p);
}

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
	exec_ref(p);
	p->open_handles--;
	maybe_report(p);
	exec_unref(p);
}

/* Close a handle that was initialised (and counted in open_handles). */
static void handle_close(uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_close);
}

static void stdin_close(struct exec_process *p);

static void pipe_close(struct exec_process *p, int stream)
{
	if (p->out_state[stream] != PIPE_OPEN)
		return;
	p->out_state[stream] = PIPE_CLOSING;
	if (stream == EXEC_STDOUT && p->pty) {
		p->master = -1; /* the handle owns it */
		stdin_close(p); /* the master's other fd */
	}
	handle_close((uv_handle_t *)&p->out[stream]);
}

static void stdin_close(struct exec_process *p)
{
	p->stdin_closed = true;
	if (p->in_state != PIPE_OPEN)
		return;
	p->in_state = PIPE_CLOSING;
	handle_close((uv_handle_t *)&p->in);
}

/* Drop @p p from the table (it stays in memory while referenced). */
static void drop(struct exec_process *p)
{
	struct exec_table *t = p->table;

	if (!p->kept)
		return;
	p->kept = false;
	if (p->prev)
		p->prev->next = p->next;
	else
		t->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		t->tail = p->prev;
	p->prev = p->next = NULL;
	t->count--;
	if (p->reported) {
		t->nexited--;
		t->exited_bytes -= journal_allocated(&p->j[0]) + journal_allocated(&p->j[1]);
	}
	(void)cg_remove(p, true);
	if (p->reported) {
		uv_timer_stop(&p->timer);
		p->timer_phase = TIMER_NONE;
		handle_close((uv_handle_t *)&p->timer);
	}
	exec_unref(p);
}

static void on_keep(uv_timer_t *timer)
{
	drop(timer->data);
}

/* Let watchers that wait know there is news. */
static void notify(struct exec_process *p, bool output)
{
	struct exec_watch *w, *next;

	exec_ref(p);
	for (w = p->watchers; w; w = next) {
		next = w->next;
		if (!w->waiting || (output && (w->flags & EXEC_WATCH_EXIT_ONLY)))
			continue;
		w->waiting = false;
		w->ready(w, w->arg);
	}
	exec_unref(p);
}

/*
 * Report the exit once the process was reaped and no output pipe is open.
 * Called from libuv callbacks only, so a consumer never sees its own exec_*
 * call re-enter.
 */
static void maybe_report(struct exec_process *p)
{
	struct exec_table *t = p->table;
	struct exec_process *q;
	int i;

	if (p->reported || !p->exited)
		return;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		if (p->out_state[i] == PIPE_OPEN)
			return;
	p->reported = true;
	p->end_ns = now_ns();
	if (p->reason != EXEC_NOT_KILLED)
		p->ex.killed_by = p->reason;
	else if (p->signal_call && p->ex.signal)
		p->ex.killed_by = EXEC_KILLED_SIGNAL_CALL;
	uv_timer_stop(&p->timer);
	p->timer_phase = TIMER_NONE;
	uv_timer_stop(&p->idle);
	handle_close((uv_handle_t *)&p->idle);
	handle_close((uv_handle_t *)&p->linger);
	stdin_close(p);
	t->running--;
	if (t->running == 0)
		uv_unref((uv_handle_t *)&t->sigchld);
	free(p->rbuf); /* no more reads */
	p->rbuf = NULL;
	t->nexited++;
	t->exited_bytes += journal_allocated(&p->j[0]) + journal_allocated(&p->j[1]);
	wsb_debug("exec: process %llu (pid %d) ended: code %d signal %d%s",
		  (unsigned long long)p->id, p->pid, p->ex.code, p->ex.signal,
		  p->ex.timed_out ? " (timed out)" : "");
	exec_ref(p);
	notify(p, false);
	/* Its cgroup did its work (tree_signal stops at the report): remove it
	 * now, not when the record goes, so a kept record holds no fd (each
	 * clone copies agentd's fd table and each exec walks it). */
	(void)cg_remove(p, false);
	if (t->freeing) {
		drop(p);
	} else if (p->kept) {
		p->timer_phase = TIMER_KEEP;
		uv_timer_start(&p->timer, on_keep, t->cfg.exit_keep_ms, 0);
		/* A kept exit status alone does not keep the loop running. */
		uv_unref((uv_handle_t *)&p->timer);
		/* At most max_kept exited processes: the oldest go first. */
		for (q = t->head; q && t->nexited > t->cfg.max_kept;) {
			struct exec_process *next = q->next;

			if (q->reported && q != p)
				drop(q);
			q = next;
		}
		/* Their output holds at most EXEC_KEPT_BYTES_MAX: past it the
		 * oldest output nobody reads goes (Attach reports it lost),
		 * and its exit status stays for exit_keep_ms. */
		for (q = t->head; q && t->exited_bytes > EXEC_KEPT_BYTES_MAX; q = q->next) {
			if (!q->reported || q == p || q->watchers)
				continue;
			t->exited_bytes -= journal_allocated(&q->j[0]) + journal_allocated(&q->j[1]);
			journal_forget(&q->j[0]);
			journal_forget(&q->j[1]);
		}
	}
	exec_unref(p);
}

/* The reaper found @p p's exit. */
static void process_exited(struct exec_process *p, int status)
{
	p->exited = true;
	if (p->cg_fd < 0)
		(void)group_gone(p); /* empty now: its number is free from here on */
	if (WIFSIGNALED(status)) {
		p->ex.signal = WTERMSIG(status);
		p->ex.core_dumped = WCOREDUMP(status);
	} else {
		p->ex.code = WEXITSTATUS(status);
	}
	if (p->pty && p->out_state[EXEC_STDOUT] == PIPE_OPEN)
		uv_timer_start(&p->linger, on_linger, PTY_LINGER_MS, 0);
	else if (!p->pty && p->linger_ms && !p->killed && p->timer_phase <= TIMER_TIMEOUT)
		uv_timer_start(&p->linger, on_held, p->linger_ms, 0);
	maybe_report(p);
}

/* ---- reaping ---- */

struct libuv_pid {
	int pid;
	bool found;
};

static void walk_process(uv_handle_t *h, void *arg)
{
	struct libuv_pid *lp = arg;

	if (h->type == UV_PROCESS && ((uv_process_t *)h)->pid == lp->pid)
		lp->found = true;
}

/*
 * An orphan in process group @p pgid was reaped, or a command was given pid
 * @p pgid: an exited command of that pid without a cgroup whose group it
 * was may have emptied, or its number is another's now (group_gone()).
 * agentd is the subreaper, so the last member of a group whose leader is
 * gone is reaped here (unless another process outside the group is its
 * parent). Loop thread.
 */
static void groups_check(int pgid, bool reused)
{
	struct exec_table *t;
	struct exec_process *p;

	for (t = g_tables; t; t = t->tnext)
		for (p = t->head; p; p = p->next)
			if (p->exited && p->pid == pgid && p->cg_fd < 0 && !p->group_gone) {
				if (reused)
					p->group_gone = true;
				else
					(void)group_gone(p);
			}
}

/* The running process with OS pid @p pid in any table, or NULL. */
static struct exec_process *find_pid(int pid)
{
	struct exec_table *t;
	struct exec_process *p;

	for (t = g_tables; t; t = t->tnext)
		for (p = t->head; p; p = p->next)
			if (!p->exited && p->pid == pid)
				return p;
	return NULL;
}

static void on_rescan(uv_timer_t *timer);

static void reap(struct exec_table *t)
{
	struct exec_process *p;
	siginfo_t si;
	int status, pid, pgid;

	for (;;) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
			return;
		pid = si.si_pid;
		p = find_pid(pid);
		if (!p) {
			struct libuv_pid lp = { .pid = pid };

			uv_walk(t->loop, walk_process, &lp);
			if (lp.found) {
				/* libuv's own SIGCHLD handler reaps it; look at
				 * the rest once it did. */
				uv_timer_start(&t->rescan, on_rescan, RESCAN_MS, 0);
				return;
			}
		}
		pgid = p ? -1 : getpgid(pid); /* a zombie has its group still */
		if (waitpid(pid, &status, WNOHANG) <= 0)
			return;
		if (p) {
			process_exited(p, status);
		} else {
			wsb_debug("exec: reaped pid %d (an orphan)", pid);
			if (pgid > 0)
				groups_check(pgid, false);
		}
	}
}

static void on_sigchld(uv_signal_t *h, int signum)
{
	reap(h->data);
}

static void on_rescan(uv_timer_t *timer)
{
	reap(timer->data);
}

/* ---- output ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct exec_process *p = h->data;

	/* One buffer suffices: libuv calls read_cb right after each alloc_cb
	 * on this thread, and the journal copies what it keeps. */
	*buf = uv_buf_init(p->rbuf, (unsigned)p->rsize);
}

static void on_idle(uv_timer_t *timer);

/* @p len bytes of output of @p stream arrived. */
static void output(struct exec_process *p, int stream, const void *data, size_t len)
{
	if (journal_append(&p->j[stream], data, len, ++p->table->seq) < 0)
		wsb_warn("exec: process %llu: out of memory for its output journal",
			 (unsigned long long)p->id);
	if (p->idle_ms && p->timer_phase <= TIMER_TIMEOUT && !p->killed)
		uv_timer_start(&p->idle, on_idle, p->idle_ms, 0);
	exec_ref(p);
	notify(p, true);
	flow_check(p);
	exec_unref(p);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct exec_process *p = s->data;
	int stream = s == (uv_stream_t *)&p->out[EXEC_STDOUT] ? EXEC_STDOUT : EXEC_STDERR;

	if (nread > 0) {
		output(p, stream, buf->base, (size_t)nread);
		return;
	}
	if (nread == 0)
		return; /* EAGAIN */
	if (p->pty && stream == EXEC_STDOUT && !p->exited) {
		/* Every slave fd is closed (EIO, and at times EOF) but the
		 * command runs on (cat and wc close 0-2 before they exit).
		 * Closing the master now would hang the terminal up and SIGHUP
		 * the command, the session leader (drivers/tty/tty_jobctrl.c
		 * tty_signal_session_leader()): the master stays open, read
		 * by on_hup_poll() from now on (it may open /dev/tty again),
		 * and on_linger() ends the output once it is reaped. */
		p->pty_hup = true;
		uv_read_stop(s);
		uv_timer_start(&p->linger, on_hup_poll, PTY_LINGER_MS, 0);
		return;
	}
	/* UV_EOF, or a read error (ECONNRESET...): the stream is over. */
	exec_ref(p);
	pipe_close(p, stream);
	maybe_report(p);
	exec_unref(p);
}

/*
 * PTY_LINGER_MS after the command was reaped: read what the terminal still
 * holds (non-blocking, on the loop thread, which owns the fd) and end the
 * output, unless a lossless watcher holds reading back: then later.
 */
static void on_linger(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;
	uv_os_fd_t fd;
	ssize_t n;

	if (p->out_state[EXEC_STDOUT] != PIPE_OPEN || p->reported)
		return;
	if (uv_fileno((uv_handle_t *)&p->out[EXEC_STDOUT], &fd) == 0) {
		while (!p->paused) {
			n = read(fd, p->rbuf, p->rsize);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			output(p, EXEC_STDOUT, p->rbuf, (size_t)n);
			if (p->out_state[EXEC_STDOUT] != PIPE_OPEN || p->reported)
				return;
		}
	}
	if (p->paused) {
		uv_timer_start(&p->linger, on_linger, PTY_LINGER_MS, 0);
		return;
	}
	exec_ref(p);
	pipe_close(p, EXEC_STDOUT);
	maybe_report(p);
	exec_unref(p);
}

/*
 * Pipes, linger_ms after the command was reaped while its output is still
 * open (held by what it left running): release it. Its timeouts stop (a
 * server started with `&` is not killed when the command's time is up; a
 * kill still ends it), and watchers learn it (exec_output_held()).
 */
static void on_held(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;

	if (p->reported || p->killed || p->timer_phase > TIMER_TIMEOUT)
		return;
	p->held = true;
	uv_timer_stop(&p->timer);
	p->timer_phase = TIMER_NONE;
	p->idle_ms = 0;
	uv_timer_stop(&p->idle);
	wsb_debug("exec: process %llu (pid %d) released: its output is held by what it left running",
		  (unsigned long long)p->id, p->pid);
	notify(p, false);
}

/*
 * PTY, once no slave fd was open while the command runs (pty_hup): libuv
 * reads the master no more (its read error made the stream unreadable:
 * uv_read_start() says ENOTCONN), so this timer reads it (non-blocking,
 * on the loop thread, which owns the fd) until the command is reaped and
 * process_exited() takes the timer over for on_linger(): a command that
 * opens its terminal again (/dev/tty: a prompt after closing 0-2) is read,
 * not left blocked on a full terminal. Every PTY_HUP_POLL_MS while bytes
 * come, PTY_LINGER_MS while none do; never while a lossless watcher holds
 * reading back (paused).
 */
static void on_hup_poll(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;
	uint64_t next = PTY_LINGER_MS;
	uv_os_fd_t fd;
	ssize_t n;

	if (!p->pty_hup || p->exited || p->reported || p->out_state[EXEC_STDOUT] != PIPE_OPEN ||
	    uv_fileno((uv_handle_t *)&p->out[EXEC_STDOUT], &fd) != 0)
		return;
	while (!p->paused) {
		n = read(fd, p->rbuf, p->rsize);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* EAGAIN: nothing yet; EIO: no slave open */
		output(p, EXEC_STDOUT, p->rbuf, (size_t)n);
		if (p->out_state[EXEC_STDOUT] != PIPE_OPEN || p->reported)
			return;
		next = PTY_HUP_POLL_MS;
	}
	uv_timer_start(&p->linger, on_hup_poll, next, 0);
}

static void reading(struct exec_process *p, bool on)
{
	int i;

	for (i = 0; i < EXEC_NSTREAMS; i++) {
		if (p->out_state[i] != PIPE_OPEN || (on && i == EXEC_STDOUT && p->pty_hup))
			continue;
		if (!on)
			uv_read_stop((uv_stream_t *)&p->out[i]);
		else if (uv_read_start((uv_stream_t *)&p->out[i], on_alloc, on_read) < 0)
			pipe_close(p, i); /* reported as EOF */
	}
}

/* Pause reading while a lossless watcher lags by flow_high bytes or more;
 * resume below flow_low. */
static void flow_check(struct exec_process *p)
{
	struct exec_watch *w;
	uint64_t lag = 0, l;
	int i;

	if (p->reported)
		return;
	for (w = p->watchers; w; w = w->next) {
		if (!(w->flags & EXEC_WATCH_LOSSLESS))
			continue;
		for (i = 0; i < EXEC_NSTREAMS; i++) {
			l = journal_end(&p->j[i]) - w->cur[i];
			if (l > lag)
				lag = l;
		}
	}
	/* While paused the command is not idle, only blocked on its output:
	 * the idle timeout counts from the resume. */
	if (!p->paused && lag >= p->flow_high) {
		p->paused = true;
		reading(p, false);
		uv_timer_stop(&p->idle);
	} else if (p->paused && lag < p->flow_low) {
		p->paused = false;
		reading(p, true);
		if (p->idle_ms && p->timer_phase <= TIMER_TIMEOUT && !p->killed)
			uv_timer_start(&p->idle, on_idle, p->idle_ms, 0);
	}
}

/* ---- timeouts ---- */

static void on_timer(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;
	int i;

	switch (p->timer_phase) {
	case TIMER_TIMEOUT:
		p->ex.timed_out = true;
		if (p->reason == EXEC_NOT_KILLED)
			p->reason = EXEC_KILLED_TIMEOUT;
		/* fall through */
	case TIMER_NONE:
		uv_timer_stop(&p->idle);
		tree_signal(p, SIGTERM);
		p->timer_phase = TIMER_TERM;
		uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
		break;
	case TIMER_TERM:
		tree_signal(p, SIGKILL);
		p->timer_phase = TIMER_KILL;
		uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
		break;
	case TIMER_KILL:
		/* Something outside the tree (a setsid grandchild without a
		 * cgroup) still holds a pipe open: stop waiting for its EOF. */
		p->timer_phase = TIMER_NONE;
		exec_ref(p);
		stdin_close(p);
		for (i = 0; i < EXEC_NSTREAMS; i++)
			pipe_close(p, i);
		maybe_report(p);
		exec_unref(p);
		break;
	case TIMER_KEEP:
		break;
	}
}

static void on_idle(uv_timer_t *timer)
{
	struct exec_process *p = timer->data;

	if (p->reported || p->killed || p->timer_phase > TIMER_TIMEOUT)
		return;
	p->ex.timed_out = true;
	if (p->reason == EXEC_NOT_KILLED)
		p->reason = EXEC_KILLED_IDLE;
	uv_timer_stop(&p->timer);
	p->timer_phase = TIMER_NONE;
	on_timer(&p->timer); /* TERM now, KILL after the grace */
}

/* ---- stdin ---- */

static void on_stdin_written(uv_write_t *req, int status)
{
	struct stdin_req *sr = req->data;
	struct exec_process *p = sr->p;
	int err = 0;

	p->stdin_queued -= sr->len;
	if (status < 0) {
		/* EPIPE: the command closed its stdin or exited; ECANCELED:
		 * the pipe was closed. Either way stdin is finished. */
		err = status == UV_ECANCELED && p->table->freeing ? -ECANCELED : -EPIPE;
		if (!p->pty)
			stdin_close(p);
		else
			p->stdin_closed = true;
	} else if (sr->eof && !p->pty) {
		stdin_close(p); /* closing the write end is the EOF */
	}
	if (sr->done)
		sr->done(err, sr->arg);
	free(sr->data);
	free(sr);
	exec_unref(p);
}

/* Whether byte @p c written to a terminal in canonical mode ends its line
 * (termios(3): NL, CR as ICRNL turns it into NL, or VEOF @p veof), so a
 * VEOF after it reads as end of file. VEOL and VEOL2 are unset unless a
 * program sets them. */
static bool line_end(uint8_t c, char veof)
{
	return c == '\n' || c == '\r' || c == (uint8_t)veof;
}

/* Queue a write; takes ownership of @p data. 0 or -errno (data freed). */
static int stdin_queue(struct exec_process *p, uint8_t *data, size_t len, bool eof,
		       exec_written_fn done, void *arg)
{
	uv_stream_t *s = (uv_stream_t *)&p->in; /* with a PTY, a dup of the master */
	struct stdin_req *sr;
	uv_buf_t b[3];
	unsigned nb = 0;
	struct termios tio;
	int r;

	if (p->in_state != PIPE_OPEN) {
		free(data);
		p->stdin_closed = true;
		return -EPIPE;
	}
	sr = calloc(1, sizeof(*sr));
	if (!sr) {
		free(data);
		return -ENOMEM;
	}
	sr->p = p;
	sr->data = data;
	sr->len = len;
	sr->eof = eof;
	sr->done = done;
	sr->arg = arg;
	sr->req.data = sr;
	/* Zero bytes are fine: libuv completes such a write at once
	 * (asynchronously), which gives an eof-only request its callback. */
	b[nb++] = uv_buf_init((char *)data, (unsigned)len);
	if (eof && p->pty) {
		/* A terminal has no EOF to close: send its VEOF character,
		 * which ends a read at the start of a line (termios(3)). */
		bool canon = true;

		sr->veof = 4; /* ^D */
		if (p->master >= 0 && tcgetattr(p->master, &tio) == 0) {
			if (tio.c_cc[VEOF])
				sr->veof = (char)tio.c_cc[VEOF];
			canon = tio.c_lflag & ICANON;
		}
		/* The bytes must live until the callback (uv_write(3)). After
		 * a partial line the first VEOF only sends the line on: a
		 * second one ends the read empty, which is the EOF (as when
		 * ^D is typed twice). */
		b[nb++] = uv_buf_init(&sr->veof, 1);
		if (canon && (len ? !line_end(data[len - 1], sr->veof) : p->pty_partial))
			b[nb++] = uv_buf_init(&sr->veof, 1);
	}
	r = uv_write(&sr->req, s, b, nb, on_stdin_written);
	if (r < 0) {
		free(data);
		free(sr);
		if (r != UV_EPIPE && r != UV_EBADF)
			return r;
		/* The command closed its stdin: it stays closed. */
		if (!p->pty)
			stdin_close(p);
		p->stdin_closed = true;
		return -EPIPE;
	}
	p->stdin_queued += len;
	if (len)
		p->pty_partial = !line_end(data[len - 1], 4);
	if (eof)
		p->stdin_closed = true;
	exec_ref(p);
	return 0;
}

int exec_write_stdin(struct exec_process *p, const void *data, size_t len, bool eof,
		     exec_written_fn done, void *arg)
{
	uint8_t *copy = NULL;

	if (len > EXEC_STDIN_CHUNK_MAX)
		return -E2BIG;
	if (p->reported || p->stdin_closed)
		return -EPIPE;
	if (p->in_state != PIPE_OPEN)
		return -EPIPE;
	if (p->stdin_queued + len > EXEC_STDIN_QUEUE_MAX)
		return -ENOBUFS;
	if (len) {
		copy = malloc(len);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, data, len);
	}
	return stdin_queue(p, copy, len, eof, done, arg);
}

/* ---- spawning ---- */

int exec_cwd_open(const struct resolve_root *root, const void *path, size_t len)
{
	return resolve_open(root, path, len, O_PATH | O_DIRECTORY, 0);
}

int exec_tag_check(const char *tag)
{
	size_t i, n = strlen(tag);
	bool digits = true;

	if (n == 0 || n > EXEC_TAG_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (tag[i] <= ' ' || tag[i] > '~')
			return -EINVAL;
		if (tag[i] < '0' || tag[i] > '9')
			digits = false;
	}
	return digits ? -EINVAL : 0;
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
 * Whether execve(2) can take @p argv and @p envp: each string shorter than
 * EXEC_ARG_STRLEN_MAX, all of them with their pointers within ARG_MAX
 * (sysconf(3); execve(2) "Limits on size of arguments and environment").
 * Returns 0 or -E2BIG.
 */
static int args_fit(char *const *argv, char *const *envp)
{
	long arg_max = sysconf(_SC_ARG_MAX);
	char *const *v[2] = { argv, envp };
	size_t total = 0, n;

	for (int k = 0; k < 2; k++)
		for (size_t i = 0; v[k][i]; i++) {
			n = strlen(v[k][i]) + 1;
			if (n > EXEC_ARG_STRLEN_MAX)
				return -E2BIG;
			total += n + sizeof(char *);
		}
	return arg_max > 0 && total > (size_t)arg_max ? -E2BIG : 0;
}

/*
 * environ plus @p first (or NULL) plus the overrides, later wins. Returns a
 * malloc'd array of borrowed strings (valid while environ and spec live), or
 * NULL.
 */
static char **env_build(const char *first, const char *const *overrides)
{
	size_t n_env = strv_len((const char *const *)environ);
	size_t n_ovr = strv_len(overrides);
	char **v = malloc((n_env + n_ovr + 2) * sizeof(*v));
	size_t n = 0, i, j, klen;
	const char *o;

	if (!v)
		return NULL;
	for (i = 0; i < n_env; i++)
		v[n++] = environ[i];
	for (i = 0; i <= n_ovr; i++) {
		o = i == 0 ? first : overrides[i - 1];
		if (!o)
			continue;
		klen = (size_t)(strchr(o, '=') - o);
		for (j = 0; j < n; j++)
			if (strncmp(v[j], o, klen) == 0 && v[j][klen] == '=')
				break;
		v[j] = (char *)o;
		if (j == n)
			n++;
	}
	v[n] = NULL;
	return v;
}

/* argv as run, deep copy: argv mode as given, shell mode /bin/sh -c S sh ARGS. */
static char **args_build(const struct exec_spec *spec, size_t *ret_n)
{
	size_t n, i, k = 0;
	char **v;

	n = spec->argv ? strv_len(spec->argv) : 4 + strv_len(spec->args);
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		return NULL;
	if (spec->argv) {
		for (i = 0; i < n; i++)
			if (!(v[k++] = strdup(spec->argv[i])))
				goto oom;
	} else {
		if (!(v[k++] = strdup("/bin/sh")) || !(v[k++] = strdup("-c")) ||
		    !(v[k++] = strdup(spec->shell)) || !(v[k++] = strdup("sh")))
			goto oom;
		for (i = 0; i + 4 < n; i++)
			if (!(v[k++] = strdup(spec->args[i])))
				goto oom;
	}
	*ret_n = n;
	return v;
oom:
	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return NULL;
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
			if (!strchr(spec->env[i], '=') || spec->env[i][0] == '=')
				return -EINVAL;
	if (spec->tag && *spec->tag && exec_tag_check(spec->tag) < 0)
		return -EINVAL;
	if (spec->rows > 65535 || spec->cols > 65535)
		return -EINVAL;
	if (spec->term && (strchr(spec->term, '=') || strlen(spec->term) > 256))
		return -EINVAL;
	if (spec->journal_bytes &&
	    (spec->journal_bytes < EXEC_JOURNAL_MIN || spec->journal_bytes > EXEC_JOURNAL_MAX))
		return -EINVAL;
	return 0;
}

/* What the child needs; everything prepared by the parent (the child runs
 * in agentd's memory until it execs: no malloc, no locks, see CHILD_FN). */
struct child_ctx {
	int fd[3];       /* stdin, stdout, stderr */
	int cwd_fd;
	char cwd_path[32]; /* "/proc/self/fd/N", if fchdir(2) on O_PATH fails */
	int cg_procs;    /* cgroup.procs of cmd-<id>, or -1 */
	int cg_dir;      /* O_PATH fd of cmd-<id> for clone3(2), or -1 */
	int err_w;       /* write end of the error pipe */
	bool pty;        /* fd[0] is the slave: make it the controlling tty */
	char **argv, **envp;
	const char *path;  /* the command's PATH (from envp), searched as execvp(3) */
	char **sh_argv;    /* argc + 2 slots for an ENOEXEC script run by /bin/sh */
	unsigned long nofile; /* exec_config.child_nofile */
};

/*
 * The code the child runs before exec. It runs in agentd's memory (CLONE_VM)
 * on a stack of its own but with the parent thread's TLS (no CLONE_SETTLS),
 * while that thread sleeps (CLONE_VFORK). So it writes only its own stack,
 * c->sh_argv and that thread's errno (glibc's write(2) would also flip the
 * thread's cancellation state: raw syscall(2) instead; agentd is linked
 * with -z now, so no lazy binding writes the GOT). The sanitizers' stack
 * bounds and report machinery would misread it: left uninstrumented, as
 * glibc's own posix_spawn child is.
 */
#define CHILD_FN __attribute__((no_sanitize_address, no_sanitize_undefined))

enum child_stage {
	STAGE_CGROUP = 1, /* not fatal: the command runs without a cgroup */
	STAGE_SETSID,
	STAGE_TTY,
	STAGE_STDIO,
	STAGE_CWD,
	STAGE_EXEC,
};

CHILD_FN static void child_note(int fd, int stage, int err)
{
	int rec[2] = { stage, err };

	(void)syscall(SYS_write, fd, rec, sizeof(rec));
}

CHILD_FN __attribute__((noreturn)) static void child_fail(const struct child_ctx *c, int stage)
{
	child_note(c->err_w, stage, errno);
	_exit(127);
}

/* execve(2) @p file; a file the kernel cannot run (ENOEXEC: no #! line)
 * runs as a /bin/sh script, as execvp(3) does. Returns with errno set (by
 * /bin/sh's execve for a script). */
CHILD_FN static void child_execve(const struct child_ctx *c, const char *file)
{
	size_t i;

	execve(file, c->argv, c->envp);
	if (errno != ENOEXEC)
		return;
	c->sh_argv[0] = (char *)"/bin/sh";
	c->sh_argv[1] = (char *)file;
	for (i = 1; c->argv[i]; i++)
		c->sh_argv[i + 1] = c->argv[i];
	c->sh_argv[i + 1] = NULL;
	execve("/bin/sh", c->sh_argv, c->envp);
}

/*
 * execvp(3) with the command's environment: argv[0] as a path if it has a
 * slash, else searched in the command's PATH (c->path), not agentd's. The
 * rules are glibc 2.36's execvpe (posix/execvpe.c): "" is ENOENT; an empty
 * PATH element is the working directory; EACCES, ENOENT, ENOTDIR, ESTALE,
 * ENODEV and ETIMEDOUT go on to the next element, any other error stops
 * (ENAMETOOLONG for a directory and name longer than PATH_MAX together; an
 * element of PATH_MAX - 1 bytes or more is skipped); at the end EACCES if
 * any element gave it, else the last error. Returns (errno set) only when
 * nothing could be run.
 */
CHILD_FN static void child_exec(const struct child_ctx *c)
{
	const char *file = c->argv[0], *p, *end;
	char buf[PATH_MAX];
	size_t flen = strlen(file), dlen;
	bool eacces = false;

	if (!*file) {
		errno = ENOENT;
		return;
	}
	if (strchr(file, '/')) {
		child_execve(c, file);
		return;
	}
	if (flen > NAME_MAX) {
		errno = ENAMETOOLONG;
		return;
	}
	errno = ENOENT; /* if no element is tried */
	for (p = c->path;; p = end + 1) {
		end = strchrnul(p, ':');
		dlen = (size_t)(end - p);
		if (dlen >= PATH_MAX - 1) {
			/* no such directory can exist: skipped, as glibc does */
			if (!*end)
				break;
			continue;
		}
		if (dlen + 1 + flen >= sizeof(buf)) {
			errno = ENAMETOOLONG; /* what execve(2) would say */
			return;
		}
		memcpy(buf, p, dlen);
		if (dlen)
			buf[dlen++] = '/';
		memcpy(buf + dlen, file, flen + 1);
		child_execve(c, buf);
		switch (errno) {
		case EACCES:
			eacces = true;
			break;
		case ENOENT:
		case ENOTDIR:
		case ESTALE:
		case ENODEV:
		case ETIMEDOUT:
			break;
		default:
			return;
		}
		if (!*end)
			break;
	}
	if (eacces)
		errno = EACCES;
}

/* In the child, after clone(2) or clone3(2): async-signal-safe calls that
 * write nothing shared (CHILD_FN), then exec. @joined: clone3 already put
 * the child into its cgroup. */
CHILD_FN __attribute__((noreturn)) static void child_main(const struct child_ctx *c, bool joined)
{
	struct sigaction sa;
	sigset_t none;
	int src[3], i;

	/* Default dispositions (agentd ignores SIGPIPE; libuv has handlers);
	 * the mask is still all-blocked from the parent. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (i = 1; i < _NSIG; i++)
		if (i != SIGKILL && i != SIGSTOP)
			(void)sigaction(i, &sa, NULL);
	if (setsid() < 0)
		child_fail(c, STAGE_SETSID);
	if (!joined && c->cg_procs >= 0 && syscall(SYS_write, c->cg_procs, "0", 1) != 1)
		child_note(c->err_w, STAGE_CGROUP, errno);
	if (c->pty) {
		pid_t me = getpid();

		if (ioctl(c->fd[0], TIOCSCTTY, 0) < 0)
			child_fail(c, STAGE_TTY);
		/* The foreground group (Ctrl-C's target): Linux sets it with
		 * TIOCSCTTY, gVisor only with TIOCSPGRP (tcsetpgrp(3)). */
		(void)ioctl(c->fd[0], TIOCSPGRP, &me);
	}
	if (c->cwd_fd >= 0 && fchdir(c->cwd_fd) < 0 && chdir(c->cwd_path) < 0)
		child_fail(c, STAGE_CWD);
	/* Sources inside 0..2 that go elsewhere move out of the way first. */
	for (i = 0; i < 3; i++) {
		src[i] = c->fd[i];
		if (src[i] < 3 && src[i] != i && (src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3)) < 0)
			child_fail(c, STAGE_STDIO);
	}
	for (i = 0; i < 3; i++) {
		if (src[i] == i) {
			if (fcntl(i, F_SETFD, 0) < 0)
				child_fail(c, STAGE_STDIO);
		} else if (dup2(src[i], i) < 0) {
			child_fail(c, STAGE_STDIO);
		}
	}
	/* Nothing agentd opened reaches the command, even without
	 * O_CLOEXEC (close_range(2), Linux 5.11; ignored where missing). */
	(void)syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	if (c->nofile) {
		struct rlimit rl;

		if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0 && c->nofile <= rl.rlim_max) {
			rl.rlim_cur = c->nofile;
			(void)syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &rl, NULL);
		}
	}
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	child_exec(c);
	child_fail(c, STAGE_EXEC);
}

CHILD_FN static int child_entry(void *arg)
{
	child_main(arg, false);
}

CHILD_FN static int child_entry_joined(void *arg)
{
	child_main(arg, true);
}

#if defined(__x86_64__)
/*
 * clone3(2) that runs fn(arg) in the child on the stack in @p args (glibc
 * 2.36 has no clone3 wrapper, and a CLONE_VM child cannot return from
 * syscall(2) onto the parent's stack). As glibc's clone3.S: the kernel
 * starts the child with rsp = stack + stack_size and every other register
 * as the parent's; r8 and r9 survive the syscall. Returns the pid in the
 * parent, or -errno (the raw kernel value); the child never returns.
 */
long wsb_clone3_vm(struct clone_args *args, size_t size, int (*fn)(void *), void *arg)
	__attribute__((visibility("hidden")));
__asm__(".pushsection .text\n"
	".globl wsb_clone3_vm\n"
	".hidden wsb_clone3_vm\n"
	".type wsb_clone3_vm, @function\n"
	"wsb_clone3_vm:\n"
	"	.cfi_startproc\n"
	"	mov %rcx, %r8\n"
	"	mov %rdx, %r9\n"
	"	mov $435, %eax\n" /* __NR_clone3 */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jz 1f\n"
	"	ret\n"
	"1:	.cfi_undefined rip\n" /* the child's outermost frame */
	"	xor %ebp, %ebp\n"
	"	and $-16, %rsp\n"
	"	mov %r8, %rdi\n"
	"	call *%r9\n"
	"	mov %eax, %edi\n"
	"	mov $60, %eax\n" /* __NR_exit */
	"	syscall\n"
	"	hlt\n"
	"	.cfi_endproc\n"
	".size wsb_clone3_vm, .-wsb_clone3_vm\n"
	".popsection\n");
#endif

/*
 * Start the child, which runs child_main() and execs. The first way that
 * works:
 *  - with a cgroup on x86-64: clone3(2) with CLONE_VM | CLONE_VFORK |
 *    CLONE_INTO_CGROUP (Linux 5.7): no copy of agentd's memory, and the
 *    child is born in its cgroup. Joining at birth spares the write to
 *    cgroup.procs, which waits for the cgroup_threadgroup_rwsem (an RCU
 *    grace period: 10 ms and more here, most of a short command's round
 *    trip);
 *  - with a cgroup elsewhere: a fork-style clone3 with CLONE_INTO_CGROUP;
 *  - else, or when the kernel refuses (gVisor, older Linux, a cgroup that
 *    cannot take processes): clone(2) with CLONE_VM | CLONE_VFORK, and the
 *    child writes cgroup.procs itself (c->cg_procs).
 * With CLONE_VFORK this thread sleeps until the child execs or exits.
 * @p stack: CHILD_STACK_BYTES for a CLONE_VM child, free again on return
 * (spawns are serial: one per table, kept). Returns the pid, or -1 with
 * errno set. Signals must be blocked (the child runs agentd's handlers
 * until it resets them).
 */
static pid_t child_start(struct child_ctx *c, void *stack)
{
	if (c->cg_dir >= 0) {
#if defined(__x86_64__)
		struct clone_args args = {
			.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP,
			.exit_signal = SIGCHLD,
			.stack = (uint64_t)(uintptr_t)stack,
			.stack_size = CHILD_STACK_BYTES,
			.cgroup = (uint64_t)c->cg_dir,
		};
		long r = wsb_clone3_vm(&args, sizeof(args), child_entry_joined, c);

		if (r > 0)
			return (pid_t)r;
#else
		struct clone_args args = {
			.flags = CLONE_INTO_CGROUP,
			.exit_signal = SIGCHLD,
			.cgroup = (uint64_t)c->cg_dir,
		};
		pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));

		if (pid == 0)
			child_main(c, true);
		if (pid > 0)
			return pid;
#endif
	}
	return clone(child_entry, (char *)stack + CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, c);
}

/*
 * Start the child and let it exec; reads the child's error pipe to its EOF
 * (exec) or a fatal record. Returns the pid, or -errno (the failed child
 * reaped). Sets *cg_failed to a positive errno when the child could not join
 * its cgroup.
 */
static int fork_exec(struct exec_table *t, struct child_ctx *c, int err_r, int *cg_failed)
{
	sigset_t all, old;
	int pid, saved, rec[2], fatal = 0, status;
	void *stack;
	ssize_t n;

	if (!t->child_stack) {
		stack = mmap(NULL, CHILD_STACK_BYTES, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
		if (stack == MAP_FAILED) {
			saved = errno;
			close_fd(&c->err_w);
			return -saved;
		}
		t->child_stack = stack;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = child_start(c, t->child_stack);
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close_fd(&c->err_w);
	if (pid < 0)
		return -saved;
	for (;;) {
		n = read(err_r, rec, sizeof(rec));
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(rec))
			break;
		if (rec[0] == STAGE_CGROUP)
			*cg_failed = rec[1] ? rec[1] : EIO;
		else
			fatal = rec[1] ? rec[1] : EIO;
	}
	if (!fatal)
		return pid;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return -fatal;
}

/* Open a PTY pair (pty(7)): *master and *slave, both O_CLOEXEC. */
static int pty_open(unsigned rows, unsigned cols, int *master, int *slave)
{
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	char name[128];
	int m, s, r;

	m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -errno;
	if (grantpt(m) < 0 || unlockpt(m) < 0) {
		r = -errno;
		close(m);
		return r;
	}
	r = ptsname_r(m, name, sizeof(name));
	if (r != 0) {
		close(m);
		return -r;
	}
	s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0) {
		r = -errno;
		close(m);
		return r;
	}
	if (ioctl(m, TIOCSWINSZ, &ws) < 0) {
		r = -errno;
		close(m);
		close(s);
		return r;
	}
	*master = m;
	*slave = s;
	return 0;
}

/* Link @p p at the tail of the table (ids increase). */
static void keep(struct exec_table *t, struct exec_process *p)
{
	p->kept = true;
	p->prev = t->tail;
	if (t->tail)
		t->tail->next = p;
	else
		t->head = p;
	t->tail = p;
	t->count++;
	p->refs++;
}

int exec_spawn(struct exec_table *t, const struct exec_spec *spec, struct exec_process **ret_process)
{
	/* Descriptors: [0] ours, [1] the child's, per pipe. */
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, perrp[2] = { -1, -1 };
	int master = -1, slave = -1, devnull = -1, cg_procs = -1, cg_failed = 0;
	struct child_ctx c = { .fd = { -1, -1, -1 }, .cg_procs = -1, .cg_dir = -1, .err_w = -1 };
	char **envp = NULL, *term_env = NULL;
	struct exec_process *p = NULL;
	size_t jmax;
	bool want_stdin;
	int r, i, pid;

	r = spec_check(spec);
	if (r < 0)
		return r;
	if (t->freeing || t->running >= t->cfg.max_running)
		return -EAGAIN;
	if (spec->tag && *spec->tag && exec_find_tag(t, spec->tag))
		return -EEXIST;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->table = t;
	p->master = -1;
	p->cg_fd = -1;
	p->id = t->next_id;
	p->pty = spec->pty;
	p->tag = strdup(spec->tag ? spec->tag : "");
	p->argv = args_build(spec, &p->argc);
	p->cwd = malloc(spec->cwd_len ? spec->cwd_len : 1);
	if (!p->tag || !p->argv || !p->cwd) {
		r = -ENOMEM;
		goto fail;
	}
	if (spec->cwd_len)
		memcpy(p->cwd, spec->cwd_name, spec->cwd_len);
	p->cwd_len = spec->cwd_len;
	jmax = spec->journal_bytes ? spec->journal_bytes : t->cfg.journal_bytes;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		journal_init(&p->j[i], jmax);
	/* A lossless watcher lags < flow_high + one read <= jmax: never
	 * loses a byte. */
	p->flow_high = jmax / 2 < FLOW_HIGH_MAX ? jmax / 2 : FLOW_HIGH_MAX;
	p->flow_low = p->flow_high / 4;
	p->rsize = jmax - p->flow_high < EXEC_READ_CHUNK ? jmax - p->flow_high : EXEC_READ_CHUNK;
	p->idle_ms = spec->idle_timeout_ms;
	p->grace_ms = spec->grace_ms ? spec->grace_ms : EXEC_KILL_GRACE_MS;
	p->linger_ms = spec->linger_ms;
	p->rbuf = malloc(p->rsize);
	if (!p->rbuf) {
		r = -ENOMEM;
		goto fail;
	}

	if (spec->pty) {
		const char *term = spec->term && *spec->term ? spec->term : "xterm-256color";

		if (asprintf(&term_env, "TERM=%s", term) < 0) {
			term_env = NULL;
			r = -ENOMEM;
			goto fail;
		}
	}
	envp = env_build(term_env, spec->env);
	if (!envp) {
		r = -ENOMEM;
		goto fail;
	}
	r = args_fit(p->argv, envp);
	if (r < 0)
		goto fail; /* before the child: its PATH walk would try each */

	/* The child's stdio. */
	want_stdin = spec->stdin_open || spec->stdin_len;
	if (spec->pty) {
		r = pty_open(spec->rows ? spec->rows : EXEC_PTY_ROWS, spec->cols ? spec->cols : EXEC_PTY_COLS,
			     &master, &slave);
		if (r < 0)
			goto fail;
		master = fd_high(master);
		slave = fd_high(slave);
		if (master < 0 || slave < 0) {
			r = master < 0 ? master : slave;
			goto fail;
		}
		c.fd[0] = c.fd[1] = c.fd[2] = slave;
		c.pty = true;
		/* stdin goes to the master through a handle of its own: once
		 * every slave fd closed, libuv's read error on the master's
		 * handle makes that handle unwritable too, and a command that
		 * opens /dev/tty again would never get its input. Closed with
		 * the master's handle (pipe_close()): the terminal hangs up
		 * when the last master fd goes. */
		pin[0] = fcntl(master, F_DUPFD_CLOEXEC, 3);
		if (pin[0] < 0) {
			r = -errno;
			goto fail;
		}
	} else {
		if (want_stdin) {
			if (pipe2(pin, O_CLOEXEC) < 0) {
				r = -errno;
				goto fail;
			}
			/* ours: the write end */
			i = pin[0];
			pin[0] = fd_high(pin[1]);
			pin[1] = fd_high(i);
			c.fd[0] = pin[1];
		} else {
			devnull = fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
			if (devnull < 0) {
				r = devnull == -1 ? -errno : devnull;
				goto fail;
			}
			c.fd[0] = devnull;
		}
		if (pipe2(pout, O_CLOEXEC) < 0) {
			r = -errno;
			goto fail;
		}
		pout[0] = fd_high(pout[0]);
		pout[1] = fd_high(pout[1]);
		c.fd[1] = pout[1];
		if (spec->combine_output) {
			c.fd[2] = pout[1];
		} else {
			if (pipe2(perr, O_CLOEXEC) < 0) {
				r = -errno;
				goto fail;
			}
			perr[0] = fd_high(perr[0]);
			perr[1] = fd_high(perr[1]);
			c.fd[2] = perr[1];
		}
		if (c.fd[0] < 0 || c.fd[1] < 0 || c.fd[2] < 0 || pout[0] < 0 ||
		    (want_stdin && pin[0] < 0) || (!spec->combine_output && perr[0] < 0)) {
			r = -EMFILE;
			goto fail;
		}
	}
	if (pipe2(perrp, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	perrp[1] = fd_high(perrp[1]);
	if (perrp[1] < 0) {
		r = perrp[1];
		goto fail;
	}
	cg_procs = fd_high(cg_create(p));
	if (cg_procs < -1) {
		r = cg_procs;
		goto fail;
	}
	c.cwd_fd = spec->cwd_fd;
	snprintf(c.cwd_path, sizeof(c.cwd_path), "/proc/self/fd/%d", spec->cwd_fd);
	c.cg_procs = cg_procs;
	c.nofile = t->cfg.child_nofile;
	c.cg_dir = cg_procs >= 0 && p->cg_fresh ? p->cg_fd : -1;
	c.err_w = perrp[1];
	perrp[1] = -1;
	c.argv = p->argv;
	c.envp = envp;
	c.path = "/bin:/usr/bin"; /* glibc's _CS_PATH when PATH is unset */
	for (i = 0; envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0) {
			c.path = envp[i] + 5; /* the first, as getenv(3) and env_build() */
			break;
		}
	c.sh_argv = malloc((p->argc + 2) * sizeof(*c.sh_argv));
	if (!c.sh_argv) {
		r = -ENOMEM;
		goto fail;
	}

	pid = fork_exec(t, &c, perrp[0], &cg_failed);
	free(c.sh_argv);
	c.sh_argv = NULL;
	close_fd(&perrp[0]);
	close_fd(&cg_procs);
	close_fd(&slave);
	close_fd(&devnull);
	close_fd(&pin[1]);
	close_fd(&pout[1]);
	close_fd(&perr[1]);
	if (pid < 0) {
		r = pid;
		goto fail;
	}
	if (cg_failed) {
		cg_note_fallback(t, "a command could not join its cgroup", cg_failed);
		(void)cg_remove(p, true);
	}
	free(envp);
	envp = NULL;
	free(term_env);
	term_env = NULL;

	/* From here on p owns libuv handles and is freed after their close. */
	t->next_id++;
	t->nalloc++;
	t->running++;
	uv_ref((uv_handle_t *)&t->sigchld);
	keep(t, p);
	p->pid = pid;
	groups_check(pid, true); /* an exited command's number, now this one's */
	p->start_ns = now_ns();
	uv_timer_init(t->loop, &p->timer);
	p->timer.data = p;
	p->open_handles++;
	uv_timer_init(t->loop, &p->idle);
	p->idle.data = p;
	p->open_handles++;
	uv_timer_init(t->loop, &p->linger);
	p->linger.data = p;
	p->open_handles++;
	if (spec->pty) {
		p->master = master;
		pout[0] = master;
		master = -1;
	}
	for (i = 0; i < EXEC_NSTREAMS; i++) {
		int fd = i == EXEC_STDOUT ? pout[0] : perr[0];

		if (fd < 0)
			continue;
		uv_pipe_init(t->loop, &p->out[i], 0);
		p->out[i].data = p;
		p->open_handles++;
		p->out_state[i] = PIPE_OPEN;
		r = uv_pipe_open(&p->out[i], fd);
		if (r < 0) {
			close(fd);
			pipe_close(p, i); /* reported as EOF */
		}
	}
	pout[0] = perr[0] = -1;
	if (spec->pty && pin[0] >= 0 && p->out_state[EXEC_STDOUT] != PIPE_OPEN) {
		/* The master's own handle failed: its dup must not keep the
		 * terminal from hanging up. */
		close_fd(&pin[0]);
		p->stdin_closed = true;
	}
	if (pin[0] >= 0) {
		uv_pipe_init(t->loop, &p->in, 0);
		p->in.data = p;
		p->open_handles++;
		p->in_state = PIPE_OPEN;
		if (uv_pipe_open(&p->in, pin[0]) < 0) {
			close(pin[0]);
			stdin_close(p);
		}
		pin[0] = -1;
	}
	if (!want_stdin && !spec->pty)
		p->stdin_closed = true; /* /dev/null */
	reading(p, true);
	if ((spec->stdin_len || !spec->stdin_open) && !p->stdin_closed) {
		uint8_t *copy = spec->stdin_len ? malloc(spec->stdin_len) : NULL;

		if (spec->stdin_len && !copy) {
			wsb_warn("exec: process %llu: out of memory for its stdin",
				 (unsigned long long)p->id);
			stdin_close(p);
		} else {
			if (spec->stdin_len)
				memcpy(copy, spec->stdin_data, spec->stdin_len);
			if (stdin_queue(p, copy, spec->stdin_len, !spec->stdin_open, NULL, NULL) < 0)
				stdin_close(p);
		}
	}
	if (spec->timeout_ms) {
		p->timer_phase = TIMER_TIMEOUT;
		uv_timer_start(&p->timer, on_timer, spec->timeout_ms, 0);
	}
	if (p->idle_ms)
		uv_timer_start(&p->idle, on_idle, p->idle_ms, 0);
	wsb_debug("exec: process %llu is pid %d (%s)%s", (unsigned long long)p->id, pid, p->argv[0],
		  p->cg_fd >= 0 ? " in its own cgroup" : "");
	*ret_process = p;
	return 0;

fail:
	close_fd(&pin[0]);
	close_fd(&pin[1]);
	close_fd(&pout[0]);
	close_fd(&pout[1]);
	close_fd(&perr[0]);
	close_fd(&perr[1]);
	close_fd(&perrp[0]);
	close_fd(&perrp[1]);
	close_fd(&c.err_w);
	close_fd(&master);
	close_fd(&slave);
	close_fd(&devnull);
	close_fd(&cg_procs);
	free(c.sh_argv);
	free(envp);
	free(term_env);
	if (p) {
		(void)cg_remove(p, true);
		for (i = 0; i < EXEC_NSTREAMS; i++)
			journal_done(&p->j[i]);
		if (p->argv)
			for (size_t k = 0; k < p->argc; k++)
				free(p->argv[k]);
		free(p->argv);
		free(p->tag);
		free(p->cwd);
		free(p->rbuf);
		free(p);
	}
	return r;
}

/* ---- queries and control ---- */

uint64_t exec_id(const struct exec_process *p)
{
	return p->id;
}

int exec_pid(const struct exec_process *p)
{
	return p->pid;
}

const char *exec_tag(const struct exec_process *p)
{
	return p->tag;
}

bool exec_exited(const struct exec_process *p)
{
	return p->reported;
}

bool exec_output_held(const struct exec_process *p, struct exec_exit *ret_exit)
{
	if (!p->held || p->reported)
		return false;
	*ret_exit = p->ex;
	if (p->reason != EXEC_NOT_KILLED)
		ret_exit->killed_by = p->reason;
	return true;
}

size_t exec_stdin_queued(const struct exec_process *p)
{
	return p->stdin_queued;
}

void exec_get_info(const struct exec_process *p, struct exec_info *info)
{
	int i;

	memset(info, 0, sizeof(*info));
	info->id = p->id;
	info->pid = p->pid;
	info->tag = p->tag;
	info->argv = (const char *const *)p->argv;
	info->argc = p->argc;
	info->cwd = p->cwd;
	info->cwd_len = p->cwd_len;
	info->start_ns = p->start_ns;
	info->end_ns = p->reported ? p->end_ns : 0;
	info->state = p->reported ? EXEC_EXITED : EXEC_RUNNING;
	if (p->reported)
		info->exit = p->ex;
	for (i = 0; i < EXEC_NSTREAMS; i++)
		info->bytes[i] = journal_end(&p->j[i]);
	info->pty = p->pty;
}

int exec_signal(struct exec_process *p, int sig)
{
	if (sig <= 0 || sig >= _NSIG)
		return -EINVAL;
	if (p->reported)
		return -ESRCH;
	p->signal_call = true;
	tree_signal(p, sig);
	return 0;
}

int exec_resize(struct exec_process *p, unsigned rows, unsigned cols)
{
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };

	if (!p->pty)
		return -ENOTTY;
	if (p->reported || p->master < 0)
		return -ESRCH;
	if (!rows || !cols || rows > 65535 || cols > 65535)
		return -EINVAL;
	return ioctl(p->master, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

void exec_kill(struct exec_process *p, enum exec_killed_by why)
{
	int i;

	if (p->reported)
		return;
	if (p->reason == EXEC_NOT_KILLED)
		p->reason = why;
	p->killed = true;
	tree_signal(p, SIGKILL);
	uv_timer_stop(&p->timer);
	uv_timer_stop(&p->idle);
	p->timer_phase = TIMER_NONE;
	/* Close even while paused: EOF would never be read (grpc-c-core.md
	 * §6 bug (e)). The exit is reported from the close callbacks. */
	stdin_close(p);
	for (i = 0; i < EXEC_NSTREAMS; i++)
		pipe_close(p, i);
}

/* ---- watchers ---- */

int exec_watch_new(struct exec_process *p, const uint64_t *from, unsigned flags,
		   exec_ready_fn ready, void *arg, struct exec_watch **ret)
{
	struct exec_watch *w;
	int i;

	for (i = 0; from && i < EXEC_NSTREAMS; i++)
		if (from[i] > journal_end(&p->j[i]))
			return -ERANGE;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->p = p;
	for (i = 0; from && i < EXEC_NSTREAMS; i++)
		w->cur[i] = from[i];
	w->flags = flags;
	w->ready = ready;
	w->arg = arg;
	w->next = p->watchers;
	if (p->watchers)
		p->watchers->prev = w;
	p->watchers = w;
	exec_ref(p);
	*ret = w;
	return 0;
}

struct exec_process *exec_watch_process(const struct exec_watch *w)
{
	return w->p;
}

void exec_watch_free(struct exec_watch *w)
{
	struct exec_process *p;

	if (!w)
		return;
	p = w->p;
	if (w->prev)
		w->prev->next = w->next;
	else
		p->watchers = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w);
	flow_check(p);
	exec_unref(p);
}

bool exec_watch_has_output(const struct exec_watch *w)
{
	if (w->exit_sent || (w->flags & EXEC_WATCH_EXIT_ONLY))
		return false;
	for (int s = 0; s < EXEC_NSTREAMS; s++)
		if (w->cur[s] < journal_end(&w->p->j[s]))
			return true;
	return false;
}

enum exec_event_kind exec_watch_next(struct exec_watch *w, size_t max, struct exec_event *ev)
{
	struct exec_process *p = w->p;
	uint64_t start, end[EXEC_NSTREAMS], limit, q0, q1;
	const uint8_t *data;
	bool pend[EXEC_NSTREAMS];
	size_t n;
	int s;

	memset(ev, 0, sizeof(*ev));
	if (w->exit_sent)
		return EXEC_EV_NONE;
	if (!(w->flags & EXEC_WATCH_EXIT_ONLY)) {
		for (s = 0; s < EXEC_NSTREAMS; s++) {
			start = journal_start(&p->j[s]);
			if (w->cur[s] < start) {
				ev->kind = EXEC_EV_LOST;
				ev->stream = (enum exec_stream)s;
				ev->offset = w->cur[s];
				ev->len = (size_t)(start - w->cur[s]);
				w->cur[s] = start;
				return ev->kind;
			}
			end[s] = journal_end(&p->j[s]);
			pend[s] = w->cur[s] < end[s];
		}
		if (pend[0] || pend[1]) {
			if (pend[0] && pend[1]) {
				/* The older of the two next bytes goes first, up
				 * to where the other stream's turn comes. */
				q0 = journal_seq_at(&p->j[0], w->cur[0]);
				q1 = journal_seq_at(&p->j[1], w->cur[1]);
				s = q1 < q0 ? 1 : 0;
				limit = journal_run_end(&p->j[s], w->cur[s], s ? q0 : q1);
			} else {
				s = pend[0] ? 0 : 1;
				limit = end[s];
			}
			n = journal_peek(&p->j[s], w->cur[s], &data);
			if (n > max)
				n = max;
			if (n > limit - w->cur[s])
				n = (size_t)(limit - w->cur[s]);
			ev->kind = EXEC_EV_OUTPUT;
			ev->stream = (enum exec_stream)s;
			ev->offset = w->cur[s];
			ev->data = data;
			ev->len = n;
			w->cur[s] += n;
			if (w->flags & EXEC_WATCH_LOSSLESS)
				flow_check(p);
			return ev->kind;
		}
	}
	if (p->reported) {
		ev->kind = EXEC_EV_EXITED;
		ev->exit = p->ex;
		w->exit_sent = true;
		return ev->kind;
	}
	w->waiting = true;
	return EXEC_EV_NONE;
}

/* ---- freeing the table ---- */

void exec_table_free(struct exec_table *t)
{
	struct exec_process *p, *next;

	if (!t)
		return;
	t->freeing = true;
	exec_table_kill_all(t, EXEC_KILLED_SHUTDOWN);
	for (p = t->head; p; p = next) {
		next = p->next;
		if (p->reported)
			drop(p);
	}
	/* Running ones are dropped when reported. */
	table_maybe_free(t);
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

size_t exec_utf8_sanitize(const void *in, size_t len, char *out, bool replace_nul)
{
	const uint8_t *s = in;
	size_t i = 0, o = 0, n, bad = 1;

	while (i < len) {
		n = wsb_utf8_seq(s + i, len - i, &bad);
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
