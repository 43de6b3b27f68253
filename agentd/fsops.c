/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The file operations core of agentd (see fsops.h): path operations through
 * resolve.h, the open-handle table, atomic uploads and sparse-aware
 * downloads. No gRPC and no logging here; every function returns -errno.
 *
 * Threads: called from the completion-queue threads, concurrently. The only
 * shared state is the handle table, guarded by fsops_handles.lock; each
 * handle is reference-counted so that a Release while a Read is in flight
 * closes the fd only after the Read is done. An upload or download object
 * belongs to one call and is used by one thread at a time.
 *
 * Operations that must not follow a final symlink and have no *at(2) flag
 * for it (chmod, xattrs, reopening a file) work on an O_PATH | O_NOFOLLOW
 * fd: fchmodat2(2) with AT_EMPTY_PATH where the kernel has it (Linux 6.6),
 * else the /proc/self/fd/N path of the fd, which names the fd's own inode and
 * is not followed further (the trick glibc's fchmodat(AT_SYMLINK_NOFOLLOW)
 * uses).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fsops.h"
#include "wsb.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6, same number on every architecture */
#endif
#ifndef XATTR_NAME_MAX
#define XATTR_NAME_MAX 255
#endif

#define PROC_FD_PATH_MAX 40

/* ---- helpers ---- */

static void proc_fd_path(char buf[PROC_FD_PATH_MAX], int fd)
{
	snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
}

/* fstat(2) @p fd into @p st; on failure close it. Returns @p fd or -errno. */
static int fstat_or_close(int fd, struct stat *st)
{
	int r;

	if (fd < 0 || fstat(fd, st) == 0)
		return fd;
	r = -errno;
	close(fd);
	return r;
}

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct ids. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* 64 random bits from getrandom(2); the clock and pid if it fails (it
 * does not once the kernel's pool is ready, before any pod starts). */
static uint64_t random_key(void)
{
	uint64_t k = 0;

	if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		k = mix64(((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
			  ((uint64_t)getpid() << 16));
	}
	return k;
}

/*
 * chmod the inode of O_PATH fd @p fd (whose type is @p type) to @p mode
 * without following a symlink: symlinks have no mode of their own here
 * (-EOPNOTSUPP, as fchmodat(AT_SYMLINK_NOFOLLOW) in glibc).
 */
static int chmod_opath(int fd, mode_t type, mode_t mode)
{
	char p[PROC_FD_PATH_MAX];

	if (S_ISLNK(type))
		return -EOPNOTSUPP;
	if (syscall(SYS_fchmodat2, fd, "", mode & 07777, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL)
		return -errno;
	proc_fd_path(p, fd);
	if (chmod(p, mode & 07777) < 0)
		return -errno;
	return 0;
}

/*
 * Give a newly created inode (fd @p fd, O_PATH or not, stat in @p st) exactly
 * the permission bits @p want, undoing the umask. Updates st->st_mode.
 */
static int fix_mode(int fd, struct stat *st, mode_t want)
{
	int r;

	want &= 07777;
	if ((st->st_mode & 07777) == want)
		return 0;
	if (fchmod(fd, want) < 0) {
		if (errno != EBADF)
			return -errno;
		r = chmod_opath(fd, st->st_mode, want); /* an O_PATH fd */
		if (r < 0)
			return r;
	}
	st->st_mode = (st->st_mode & ~(mode_t)07777) | want;
	return 0;
}

/* Open the inode of O_PATH fd @p fd anew with @p flags, via /proc/self/fd. */
static int reopen_fd(int fd, int flags)
{
	char p[PROC_FD_PATH_MAX];
	int nfd;

	proc_fd_path(p, fd);
	nfd = open(p, flags | O_CLOEXEC | O_NOCTTY);
	return nfd < 0 ? -errno : nfd;
}

/*
 * Open @p path as a regular file with @p flags: resolve to an O_PATH fd
 * first (following a final symlink if @p follow), check the type, then
 * reopen, so that a FIFO or device is never opened. Returns the fd, the
 * fstat in *st; -EISDIR for a directory, -EINVAL for another non-regular file,
 * -EWOULDBLOCK when a process in the pod holds a lease the open would break
 * (fcntl(2) F_SETLEASE: without O_NONBLOCK the open waits for the holder,
 * up to /proc/sys/fs/lease-break-time, 45 s, and again after each renewal,
 * keeping a completion-queue thread or the loop thread that long).
 */
static int open_regular(const struct resolve_root *root, const void *path, size_t len,
			bool follow, int flags, struct stat *st)
{
	int pfd, fd;

	pfd = resolve_open(root, path, len, O_PATH | (follow ? 0 : O_NOFOLLOW), 0);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, st) < 0) {
		fd = -errno;
		goto out;
	}
	if (S_ISDIR(st->st_mode)) {
		fd = -EISDIR;
		goto out;
	}
	if (!S_ISREG(st->st_mode)) {
		fd = -EINVAL;
		goto out;
	}
	fd = reopen_fd(pfd, flags | O_NONBLOCK);
out:
	close(pfd);
	return fd;
}

/* ---- handle table ---- */

#define HANDLE_BUCKETS 1024

struct fsops_handle {
	uint64_t id;
	int fd;
	int flags;                 /* open(2) flags it was opened with */
	uint64_t owner;            /* session key (session.h), 0 = none */
	unsigned refs;             /* table's ref + calls in flight; under lock */
	struct fsops_handle *next; /* bucket chain; under lock */
};

struct fsops_handles {
	pthread_mutex_t lock;
	unsigned max;
	unsigned count;            /* handles in the table + slots reserved */
	unsigned unowned;          /* of them, of no session (owner 0) */
	struct fsops_handle *buckets[HANDLE_BUCKETS];
};

int fsops_handles_new(unsigned max, struct fsops_handles **ret)
{
	struct fsops_handles *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	h->max = max ? max : FSOPS_MAX_HANDLES_DEFAULT;
	*ret = h;
	return 0;
}

void fsops_handles_free(struct fsops_handles *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < HANDLE_BUCKETS; i++) {
		struct fsops_handle *e = h->buckets[i], *n;

		for (; e; e = n) {
			n = e->next;
			close(e->fd);
			free(e);
		}
	}
	pthread_mutex_destroy(&h->lock);
	free(h);
}

unsigned fsops_handles_unowned(struct fsops_handles *h)
{
	unsigned n;

	pthread_mutex_lock(&h->lock);
	n = h->unowned;
	pthread_mutex_unlock(&h->lock);
	return n;
}

unsigned fsops_handles_count(struct fsops_handles *h)
{
	unsigned n;

	pthread_mutex_lock(&h->lock);
	n = h->count;
	pthread_mutex_unlock(&h->lock);
	return n;
}

unsigned fsops_handles_limit(const struct fsops_handles *h)
{
	return h->max;
}

static struct fsops_handle **handle_slot(struct fsops_handles *h, uint64_t id)
{
	struct fsops_handle **pp = &h->buckets[id % HANDLE_BUCKETS];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* Take a reference on handle @p id; NULL if there is none. */
static struct fsops_handle *handle_get(struct fsops_handles *h, uint64_t id)
{
	struct fsops_handle *e;

	if (id == 0)
		return NULL;
	pthread_mutex_lock(&h->lock);
	e = *handle_slot(h, id);
	if (e)
		e->refs++;
	pthread_mutex_unlock(&h->lock);
	return e;
}

static void handle_put(struct fsops_handles *h, struct fsops_handle *e)
{
	bool last;

	pthread_mutex_lock(&h->lock);
	last = --e->refs == 0;
	pthread_mutex_unlock(&h->lock);
	if (last) {
		close(e->fd);
		free(e);
	}
}

int fsops_release(struct fsops_handles *h, uint64_t id)
{
	struct fsops_handle **pp, *e;

	if (id == 0)
		return -EBADF;
	pthread_mutex_lock(&h->lock);
	pp = handle_slot(h, id);
	e = *pp;
	if (e) {
		*pp = e->next;
		h->count--;
		if (e->owner == 0)
			h->unowned--;
	}
	pthread_mutex_unlock(&h->lock);
	if (!e)
		return -EBADF;
	handle_put(h, e);
	return 0;
}

unsigned fsops_handles_release_owner(struct fsops_handles *h, uint64_t owner)
{
	struct fsops_handle *gone = NULL, *e;
	unsigned n = 0;

	if (owner == 0)
		return 0;
	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < HANDLE_BUCKETS; i++) {
		struct fsops_handle **pp = &h->buckets[i];

		while ((e = *pp)) {
			if (e->owner != owner) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			h->count--;
			e->next = gone;
			gone = e;
			n++;
		}
	}
	pthread_mutex_unlock(&h->lock);
	/* Each goes as fsops_release() lets it: once no call uses it. */
	for (; gone; gone = e) {
		e = gone->next;
		handle_put(h, gone);
	}
	return n;
}

/*
 * fstatat(2) of (@p dirfd, @p name) with @p flags (AT_SYMLINK_NOFOLLOW; "" and
 * AT_EMPTY_PATH: @p dirfd itself, as fstat(2)) into @p st, and what names the
 * file into @p id (may be NULL): its birth time from the same call
 * (fsops_birth()) and its generation (fsops_generation()) where
 * root->idents, else zeros. The two calls are not one: a name replaced
 * between them gives a birth of one file and a generation of the next,
 * which a client takes for a third file until it asks again. Returns 0 or
 * -errno.
 */
static int stat_ident(const struct resolve_root *root, int dirfd, const char *name, int flags,
		      struct stat *st, struct fsops_ident *id)
{
	struct fsops_ident i = { 0 };
	int r;

	if (root->idents)
		r = fsops_birth(dirfd, name, flags, st, &i.btime_ns);
	else if (flags & AT_EMPTY_PATH)
		r = fstat(dirfd, st) < 0 ? -errno : 0;
	else
		r = fstatat(dirfd, name, st, flags) < 0 ? -errno : 0;
	if (r == 0 && root->handles)
		i.generation = fsops_generation(dirfd, name, flags);
	if (r == 0 && id)
		*id = i;
	return r;
}

/* stat_ident() of @p fd itself; on failure close it. Returns @p fd or -errno. */
static int fstat_ident_or_close(const struct resolve_root *root, int fd, struct stat *st,
				struct fsops_ident *id)
{
	int r;

	if (fd < 0)
		return fd;
	r = stat_ident(root, fd, "", AT_EMPTY_PATH, st, id);
	if (r == 0)
		return fd;
	close(fd);
	return r;
}

/* Open with O_CREAT so that a newly created file gets exactly @p mode;
 * *created says whether this call created it (false too when it cannot
 * tell: the file went away between the two opens and the second one may
 * have made it again). Its fstat in *st, what names it in *id. */
static int open_create(const struct resolve_root *root, const void *path, size_t len, int flags,
		       mode_t mode, struct stat *st, struct fsops_ident *id, bool *created)
{
	int fd, r;

	*created = true;
	if (!(flags & O_EXCL)) {
		/* Find out whether we create it: O_EXCL first, then plain. */
		fd = resolve_open(root, path, len, flags | O_EXCL, mode);
		if (fd == -EEXIST) {
			*created = false;
			fd = resolve_open(root, path, len, flags & ~O_CREAT, 0);
			if (fd == -ENOENT) /* a dangling symlink, or raced */
				fd = resolve_open(root, path, len, flags, mode);
			return fstat_ident_or_close(root, fd, st, id);
		}
	} else {
		fd = resolve_open(root, path, len, flags, mode);
	}
	fd = fstat_ident_or_close(root, fd, st, id);
	if (fd < 0)
		return fd;
	r = fix_mode(fd, st, mode);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* Reserve a slot of @p h for a handle about to be opened for session
 * @p owner: 0 and a zeroed entry in *ret, -ENOMEM, or -EMFILE when the
 * table is full, or when @p owner is 0 and half of it holds handles of no
 * session: those live until Release or agentd's exit, and a client that
 * opened them and went would otherwise shut every mount out for good. */
static int handle_reserve(struct fsops_handles *h, uint64_t owner, struct fsops_handle **ret)
{
	struct fsops_handle *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	pthread_mutex_lock(&h->lock);
	if (h->count >= h->max || (owner == 0 && h->unowned >= h->max / 2)) {
		pthread_mutex_unlock(&h->lock);
		free(e);
		return -EMFILE;
	}
	h->count++;
	if (owner == 0)
		h->unowned++;
	pthread_mutex_unlock(&h->lock);
	*ret = e;
	return 0;
}

/* Enter the reserved @p e for fd @p fd (owned from now on) opened with
 * @p flags and store its new id in *ret_id; or, for @p fd < 0 (the open
 * failed), free @p e and give its slot back. Returns 0 or @p fd. */
static int handle_enter(struct fsops_handles *h, struct fsops_handle *e, int fd, int flags,
			uint64_t owner, uint64_t *ret_id)
{
	pthread_mutex_lock(&h->lock);
	if (fd < 0) {
		h->count--;
		if (owner == 0)
			h->unowned--;
		pthread_mutex_unlock(&h->lock);
		free(e);
		return fd;
	}
	e->fd = fd;
	e->flags = flags;
	e->owner = owner;
	e->refs = 1;
	/* Random: an id one client holds says nothing of another's (ids
	 * derived from a counter were found from one id in three guesses,
	 * then read and released another client's handles). */
	do {
		e->id = random_key();
	} while (e->id == 0 || *handle_slot(h, e->id));
	e->next = h->buckets[e->id % HANDLE_BUCKETS];
	h->buckets[e->id % HANDLE_BUCKETS] = e;
	*ret_id = e->id;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int fsops_open(const struct resolve_root *root, struct fsops_handles *h, uint64_t owner,
	       const void *path, size_t len, int flags, mode_t mode, uint64_t *ret_handle,
	       struct stat *ret_st, struct fsops_ident *ret_ident, bool *ret_created)
{
	const int allowed = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_NOFOLLOW |
			    O_DIRECTORY;
	struct fsops_handle *e;
	struct stat st;
	struct fsops_ident ident = { 0 };
	bool created = false;
	int fd, oflags, r;

	/* O_CREAT with O_DIRECTORY: EINVAL, as Linux 6.4 on gives (open(2));
	 * before, and under gVisor, it could make or open a regular file. */
	if ((flags & ~allowed) || (flags & O_ACCMODE) == O_ACCMODE ||
	    (flags & (O_CREAT | O_DIRECTORY)) == (O_CREAT | O_DIRECTORY))
		return -EINVAL;
	r = handle_reserve(h, owner, &e);
	if (r < 0)
		return r;
	oflags = flags | O_NONBLOCK | O_NOCTTY;
	if (flags & O_CREAT) {
		fd = open_create(root, path, len, oflags, mode & 07777, &st, &ident, &created);
	} else {
		fd = fstat_ident_or_close(root, resolve_open(root, path, len, oflags, 0), &st,
					  &ident);
	}
	if (handle_enter(h, e, fd, flags, owner, ret_handle) < 0)
		return fd;
	if (ret_st)
		*ret_st = st;
	if (ret_ident)
		*ret_ident = ident;
	if (ret_created)
		*ret_created = created;
	return 0;
}

int fsops_reopen(struct fsops_handles *h, uint64_t owner, uint64_t id, int flags,
		 uint64_t *ret_handle, struct stat *ret_st)
{
	struct fsops_handle *src, *e;
	struct stat st;
	int fd, r;

	if ((flags & ~(O_ACCMODE | O_TRUNC | O_APPEND)) || (flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	src = handle_get(h, id);
	if (!src)
		return -EBADF;
	r = handle_reserve(h, owner, &e);
	if (r < 0) {
		handle_put(h, src);
		return r;
	}
	/* The magic link names the open file's own inode, linked or not: no
	 * path is resolved, so nothing can lead outside the root. */
	fd = reopen_fd(src->fd, flags | O_NONBLOCK);
	if (fd == -EINVAL && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
		/* gVisor refuses O_TRUNC here for a file with no name left
		 * (docs/gvisor.md): open, then truncate as open(2) would. */
		fd = reopen_fd(src->fd, (flags & ~O_TRUNC) | O_NONBLOCK);
		if (fd >= 0 && ftruncate(fd, 0) < 0) {
			r = -errno;
			close(fd);
			fd = r;
		}
	}
	fd = fstat_or_close(fd, &st);
	handle_put(h, src);
	if (handle_enter(h, e, fd, flags, owner, ret_handle) < 0)
		return fd;
	if (ret_st)
		*ret_st = st;
	return 0;
}

int fsops_pin(const struct resolve_root *root, struct fsops_handles *h, uint64_t owner,
	      const void *path, size_t len, uint64_t *ret_handle, struct stat *ret_st,
	      struct fsops_ident *ret_ident)
{
	struct fsops_handle *e = NULL;
	int fd;

	*ret_handle = 0;
	/* Only while the table stays at most three quarters full with it (the
	 * rest stays for opens), as fsops_rename_keep(). */
	if (4 * ((size_t)fsops_handles_count(h) + 1) > 3 * (size_t)h->max ||
	    handle_reserve(h, owner, &e) < 0)
		e = NULL; /* a stat only */
	fd = fstat_ident_or_close(root, resolve_open(root, path, len, O_PATH | O_NOFOLLOW, 0),
				  ret_st, ret_ident);
	if (fd >= 0 && e && S_ISREG(ret_st->st_mode)) {
		/* Read-only where agentd may read it: gVisor cannot open an
		 * O_PATH descriptor's file again once it has no name (EINVAL;
		 * docs/gvisor.md), the very case a pin is for. */
		int rfd = reopen_fd(fd, O_RDONLY | O_NONBLOCK);

		if (rfd >= 0) {
			close(fd);
			fd = rfd;
		}
		return handle_enter(h, e, fd, O_PATH, owner, ret_handle);
	}
	if (fd >= 0)
		close(fd);
	if (e)
		(void)handle_enter(h, e, -EBADF, 0, owner, ret_handle); /* the slot back */
	*ret_handle = 0;
	return fd < 0 ? fd : 0;
}

ssize_t fsops_read(struct fsops_handles *h, uint64_t id, uint64_t offset, void *buf, size_t size)
{
	struct fsops_handle *e;
	size_t done = 0;
	ssize_t r = 0;

	if (offset > INT64_MAX || size > SSIZE_MAX)
		return -EINVAL;
	e = handle_get(h, id);
	if (!e)
		return -EBADF;
	while (done < size) {
		r = pread(e->fd, (char *)buf + done, size - done, (off_t)(offset + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	handle_put(h, e);
	return r < 0 ? r : (ssize_t)done;
}

/* write(2)/pwrite(2) all of @p len bytes; -errno on failure. */
static ssize_t write_all(int fd, const void *data, size_t len, bool append, uint64_t offset)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r;

		if (append)
			r = write(fd, (const char *)data + done, len - done);
		else
			r = pwrite(fd, (const char *)data + done, len - done,
				   (off_t)(offset + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && done > 0)
				break; /* a FIFO without room: report what went */
			return -errno;
		}
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

ssize_t fsops_write(struct fsops_handles *h, uint64_t id, uint64_t offset, const void *data,
		    size_t len, struct stat *ret_st)
{
	struct fsops_handle *e;
	ssize_t r;

	if (len > SSIZE_MAX)
		return -EINVAL;
	e = handle_get(h, id);
	if (!e)
		return -EBADF;
	if (!(e->flags & O_APPEND) && (offset > INT64_MAX || len > INT64_MAX - offset)) {
		r = -EFBIG;
		goto out;
	}
	r = write_all(e->fd, data, len, e->flags & O_APPEND, offset);
	if (r >= 0 && ret_st && fstat(e->fd, ret_st) < 0)
		r = -errno;
out:
	handle_put(h, e);
	return r;
}

/* fsops_kill_suidgid() on a descriptor: 1, 0 or -errno. */
static int kill_suidgid_fd(int fd)
{
	struct stat st;
	unsigned kill;

	if (fstat(fd, &st) < 0)
		return -errno;
	kill = wsb_suidgid_kill_bits(st.st_mode);
	if (!kill)
		return 0;
	if (fchmod(fd, st.st_mode & 07777 & ~kill) < 0)
		return -errno;
	return 1;
}

int fsops_kill_suidgid(struct fsops_handles *h, uint64_t id)
{
	struct fsops_handle *e = handle_get(h, id);
	int r;

	if (!e)
		return -EBADF;
	r = kill_suidgid_fd(e->fd);
	handle_put(h, e);
	return r;
}

int fsops_fsync(struct fsops_handles *h, uint64_t id, bool datasync)
{
	struct fsops_handle *e = handle_get(h, id);
	int r;

	if (!e)
		return -EBADF;
	r = datasync ? fdatasync(e->fd) : fsync(e->fd);
	r = r < 0 ? -errno : 0;
	handle_put(h, e);
	return r;
}

int fsops_fallocate(struct fsops_handles *h, uint64_t id, int fl, uint64_t offset, uint64_t length)
{
	const int allowed = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
	struct fsops_handle *e;
	int r;

	if ((fl & ~allowed) || offset > INT64_MAX || length > INT64_MAX)
		return -EINVAL;
	e = handle_get(h, id);
	if (!e)
		return -EBADF;
	r = fallocate(e->fd, fl, (off_t)offset, (off_t)length) < 0 ? -errno : 0;
	handle_put(h, e);
	return r;
}

int fsops_lseek(struct fsops_handles *h, uint64_t id, uint64_t offset, int whence,
		uint64_t *ret_offset)
{
	struct fsops_handle *e;
	off_t o;
	int r = 0;

	if ((whence != SEEK_DATA && whence != SEEK_HOLE) || offset > INT64_MAX)
		return -EINVAL;
	e = handle_get(h, id);
	if (!e)
		return -EBADF;
	o = lseek(e->fd, (off_t)offset, whence);
	if (o < 0)
		r = -errno;
	else
		*ret_offset = (uint64_t)o;
	handle_put(h, e);
	return r;
}

/*
 * Copy with pread(2)/pwrite(2) in FSOPS_CHUNK_MAX steps, for file systems
 * (and sandboxes: gVisor) without copy_file_range(2). Adds to *done.
 */
static int copy_by_rw(int in, uint64_t off_in, int out, uint64_t off_out, uint64_t len,
		      uint64_t *done)
{
	size_t bsize = len < FSOPS_CHUNK_MAX ? (size_t)len : FSOPS_CHUNK_MAX;
	char *buf = malloc(bsize ? bsize : 1);
	int r = 0;

	if (!buf)
		return -ENOMEM;
	while (*done < len) {
		uint64_t left = len - *done;
		size_t want = left < bsize ? (size_t)left : bsize;
		ssize_t n = pread(in, buf, want, (off_t)(off_in + *done));
		ssize_t w;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (n == 0)
			break; /* end of file */
		w = write_all(out, buf, (size_t)n, false, off_out + *done);
		if (w < 0) {
			r = (int)w;
			break;
		}
		*done += (uint64_t)n;
	}
	free(buf);
	return r;
}

int fsops_copy_file_range(struct fsops_handles *h, uint64_t id_in, uint64_t off_in,
			  uint64_t id_out, uint64_t off_out, uint64_t len, uint64_t *ret_copied)
{
	struct fsops_handle *ein, *eout = NULL;
	struct stat sin, sout;
	uint64_t done = 0, hi;
	int r = 0;

	if (off_in > INT64_MAX || off_out > INT64_MAX)
		return -EINVAL;
	ein = handle_get(h, id_in);
	if (!ein)
		return -EBADF;
	eout = handle_get(h, id_out);
	if (!eout) {
		r = -EBADF;
		goto out;
	}
	/* copy_file_range(2): EBADF for a write-only input, a read-only or
	 * O_APPEND output; EISDIR for directories; EINVAL for other types. */
	if ((ein->flags & O_ACCMODE) == O_WRONLY || (eout->flags & O_ACCMODE) == O_RDONLY ||
	    (eout->flags & O_APPEND)) {
		r = -EBADF;
		goto out;
	}
	if (fstat(ein->fd, &sin) < 0 || fstat(eout->fd, &sout) < 0) {
		r = -errno;
		goto out;
	}
	if (S_ISDIR(sin.st_mode) || S_ISDIR(sout.st_mode)) {
		r = -EISDIR;
		goto out;
	}
	if (!S_ISREG(sin.st_mode) || !S_ISREG(sout.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	if (len > FSOPS_COPY_MAX)
		len = FSOPS_COPY_MAX;
	hi = off_in > off_out ? off_in : off_out;
	if (len > (uint64_t)INT64_MAX - hi)
		len = (uint64_t)INT64_MAX - hi; /* keep both ends representable */
	/* Overlapping ranges of one file: EINVAL, as copy_file_range(2). */
	if (sin.st_dev == sout.st_dev && sin.st_ino == sout.st_ino && len &&
	    off_in < off_out + len && off_out < off_in + len) {
		r = -EINVAL;
		goto out;
	}
	while (done < len) {
		loff_t oi = (loff_t)(off_in + done), oo = (loff_t)(off_out + done);
		uint64_t left = len - done;
		ssize_t n = copy_file_range(ein->fd, &oi, eout->fd, &oo,
					    left > SSIZE_MAX ? SSIZE_MAX : (size_t)left, 0);

		if (n > 0) {
			done += (uint64_t)n;
			continue;
		}
		if (n == 0)
			break; /* end of file */
		if (errno == EINTR)
			continue;
		if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
			r = copy_by_rw(ein->fd, off_in, eout->fd, off_out, len, &done);
			break;
		}
		r = -errno;
		break;
	}
	if (done > 0)
		r = 0; /* a partial copy is a short count, as with write(2) */
	if (r == 0)
		*ret_copied = done;
out:
	if (eout)
		handle_put(h, eout);
	handle_put(h, ein);
	return r;
}

int fsops_fstat(struct fsops_handles *h, uint64_t id, struct stat *ret_st)
{
	struct fsops_handle *e = handle_get(h, id);
	int r;

	if (!e)
		return -EBADF;
	r = fstat(e->fd, ret_st) < 0 ? -errno : 0;
	handle_put(h, e);
	return r;
}

/* ---- path operations ---- */

int fsops_stat(const struct resolve_root *root, const void *path, size_t len, bool follow,
	       struct stat *ret_st, struct fsops_ident *ret_ident)
{
	int fd, r = 0;

	fd = resolve_open(root, path, len, O_PATH | (follow ? 0 : O_NOFOLLOW), 0);
	if (fd < 0)
		return fd;
	r = stat_ident(root, fd, "", AT_EMPTY_PATH, ret_st, ret_ident);
	close(fd);
	return r;
}

int fsops_birth(int dirfd, const char *name, int flags, struct stat *ret_st,
		int64_t *ret_btime_ns)
{
	struct statx sx;

	if (statx(dirfd, name, flags, STATX_BASIC_STATS | STATX_BTIME, &sx) < 0) {
		/* A seccomp filter that refuses statx(2) (older container
		 * runtimes: EPERM; glibc emulates it only for ENOSYS). */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		*ret_btime_ns = 0;
		return fstatat(dirfd, name, ret_st, flags) < 0 ? -errno : 0;
	}
	memset(ret_st, 0, sizeof(*ret_st));
	ret_st->st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
	ret_st->st_ino = sx.stx_ino;
	ret_st->st_mode = sx.stx_mode;
	ret_st->st_nlink = sx.stx_nlink;
	ret_st->st_uid = sx.stx_uid;
	ret_st->st_gid = sx.stx_gid;
	ret_st->st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
	ret_st->st_size = (off_t)sx.stx_size;
	ret_st->st_blksize = (blksize_t)sx.stx_blksize;
	ret_st->st_blocks = (blkcnt_t)sx.stx_blocks;
	ret_st->st_atim = (struct timespec){ sx.stx_atime.tv_sec, sx.stx_atime.tv_nsec };
	ret_st->st_mtim = (struct timespec){ sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec };
	ret_st->st_ctim = (struct timespec){ sx.stx_ctime.tv_sec, sx.stx_ctime.tv_nsec };
	*ret_btime_ns = 0;
	if (sx.stx_mask & STATX_BTIME) {
		struct timespec b = { sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec };

		*ret_btime_ns = wsb_ns_of_ts(&b);
	}
	return 0;
}

uint64_t fsops_generation(int dirfd, const char *name, int flags)
{
	union {
		struct file_handle fh;
		unsigned char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h;
	const unsigned char *b = h.buf + offsetof(struct file_handle, f_handle);
	uint64_t x;
	int mount_id, hflags = flags & AT_EMPTY_PATH;

	if (!(flags & AT_SYMLINK_NOFOLLOW) && *name)
		hflags |= AT_SYMLINK_FOLLOW;
	h.fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(dirfd, name, &h.fh, &mount_id, hflags) < 0)
		return 0;
	x = wsb_fnv1a(&h.fh.handle_type, sizeof(h.fh.handle_type), WSB_FNV1A_INIT);
	x = wsb_fnv1a(b, h.fh.handle_bytes < MAX_HANDLE_SZ ? h.fh.handle_bytes : MAX_HANDLE_SZ, x);
	return x ? x : 1;
}

void fsops_fident(const struct resolve_root *root, struct fsops_handles *h, uint64_t id,
		  struct fsops_ident *ret)
{
	struct fsops_handle *e = root->idents ? handle_get(h, id) : NULL;
	struct stat st;

	*ret = (struct fsops_ident){ 0 };
	if (!e)
		return;
	if (stat_ident(root, e->fd, "", AT_EMPTY_PATH, &st, ret) < 0)
		*ret = (struct fsops_ident){ 0 };
	handle_put(h, e);
}

void fsops_dirents_free(struct fsops_dirent *ents, size_t n)
{
	if (!ents)
		return;
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

static bool is_dot_or_dotdot(const char *n)
{
	return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'));
}

int fsops_readdir(const struct resolve_root *root, const void *path, size_t len, int oflags,
		  int64_t offset, unsigned max, struct fsops_dirent **ret_ents, size_t *ret_n,
		  bool *ret_eof, struct fsops_dirent *ret_self)
{
	/* getdents64 records: d_ino, d_off, d_reclen, d_type, d_name */
	char buf[32 * 1024] __attribute__((aligned(8)));
	struct fsops_dirent *ents = NULL;
	size_t n = 0, cap = 0;
	bool eof = false, full = false;
	int fd, r = 0;

	if (max == 0)
		max = FSOPS_READDIR_DEFAULT;
	if (max > FSOPS_READDIR_MAX)
		max = FSOPS_READDIR_MAX;
	if (offset < 0)
		return -EINVAL;
	fd = resolve_open(root, path, len, O_RDONLY | O_DIRECTORY | (oflags & O_NOFOLLOW), 0);
	if (fd < 0)
		return fd;
	if (offset != 0 && lseek(fd, (off_t)offset, SEEK_SET) < 0) {
		r = -errno;
		goto fail;
	}
	for (;;) {
		ssize_t got = getdents64(fd, buf, sizeof(buf));

		if (got < 0) {
			r = -errno;
			goto fail;
		}
		if (got == 0) {
			eof = true;
			break;
		}
		for (ssize_t pos = 0; pos < got;) {
			struct dirent64 *d = (struct dirent64 *)(buf + pos);
			struct fsops_dirent *de;

			pos += d->d_reclen;
			if (is_dot_or_dotdot(d->d_name))
				continue;
			if (full)
				goto done; /* there is at least one more entry */
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				struct fsops_dirent *ne;

				if (ncap > max)
					ncap = max;
				ne = realloc(ents, ncap * sizeof(*ne));
				if (!ne) {
					r = -ENOMEM;
					goto fail;
				}
				ents = ne;
				cap = ncap;
			}
			de = &ents[n];
			memset(de, 0, sizeof(*de));
			de->name_len = strlen(d->d_name);
			de->name = strdup(d->d_name);
			if (!de->name) {
				r = -ENOMEM;
				goto fail;
			}
			n++;
			de->next_offset = (int64_t)d->d_off;
			de->has_attr = stat_ident(root, fd, d->d_name, AT_SYMLINK_NOFOLLOW,
						  &de->st, &de->ident) == 0;
			if (n == max)
				full = true;
		}
	}
done:
	if (ret_self) {
		memset(ret_self, 0, sizeof(*ret_self));
		ret_self->has_attr = stat_ident(root, fd, "", AT_EMPTY_PATH, &ret_self->st,
						&ret_self->ident) == 0;
	}
	close(fd);
	*ret_ents = ents;
	*ret_n = n;
	*ret_eof = eof;
	return 0;
fail:
	close(fd);
	fsops_dirents_free(ents, n);
	return r;
}

/* fchownat(2) of O_PATH fd @p fd's own file (a symlink too). Returns 0 or
 * -errno. */
static int chown_opath(int fd, uid_t uid, gid_t gid)
{
	char p[PROC_FD_PATH_MAX];

	if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) == 0)
		return 0;
	/* gVisor: EBADF for an O_PATH fd. The /proc path names the fd's own
	 * inode, a symlink too (flags 0: with AT_SYMLINK_NOFOLLOW it would
	 * name the /proc link). */
	if (errno != EBADF && errno != EINVAL)
		return -errno;
	proc_fd_path(p, fd);
	return fchownat(AT_FDCWD, p, uid, gid, 0) < 0 ? -errno : 0;
}

int fsops_setattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		  size_t len, uint64_t id, const struct fsops_setattr *sa, struct stat *ret_st)
{
	struct fsops_handle *e = NULL;
	struct stat st;
	struct timespec ts[2] = { sa->atime, sa->mtime };
	bool times = sa->atime.tv_nsec != UTIME_OMIT || sa->mtime.tv_nsec != UTIME_OMIT;
	/* One that sets nothing but clears set-ID bits is a chown(2) to -1,
	 * -1 (or the kernel's own clearing of the bits, which moves ctime
	 * as well): ctime moves, as chown(2) moves it, whatever the bits. */
	bool chown_none = sa->kill_suidgid && !sa->valid && !times;
	int fd, r = 0;

	if (sa->valid & ~(unsigned)(FSOPS_SET_MODE | FSOPS_SET_UID | FSOPS_SET_GID | FSOPS_SET_SIZE))
		return -EINVAL;
	if ((sa->valid & FSOPS_SET_SIZE) && sa->size > INT64_MAX)
		return -EINVAL;

	if (id != 0) {
		e = handle_get(h, id);
		if (!e)
			return -EBADF;
		fd = e->fd;
		if ((sa->valid & FSOPS_SET_SIZE) && ftruncate(fd, (off_t)sa->size) < 0)
			goto fail_errno;
		if (sa->kill_suidgid)
			(void)kill_suidgid_fd(fd);
		if (chown_none)
			(void)fchown(fd, (uid_t)-1, (gid_t)-1);
		if ((sa->valid & FSOPS_SET_MODE) && fchmod(fd, sa->mode & 07777) < 0)
			goto fail_errno;
		if ((sa->valid & (FSOPS_SET_UID | FSOPS_SET_GID)) &&
		    fchown(fd, (sa->valid & FSOPS_SET_UID) ? sa->uid : (uid_t)-1,
			   (sa->valid & FSOPS_SET_GID) ? sa->gid : (gid_t)-1) < 0)
			goto fail_errno;
		if (times && futimens(fd, ts) < 0)
			goto fail_errno;
		if (ret_st && fstat(fd, ret_st) < 0)
			goto fail_errno;
		handle_put(h, e);
		return 0;
	}

	fd = resolve_open(root, path, len, O_PATH | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		goto fail_errno;
	if (sa->valid & FSOPS_SET_SIZE) {
		int wfd;

		if (S_ISDIR(st.st_mode)) {
			r = -EISDIR;
			goto out;
		}
		if (!S_ISREG(st.st_mode)) {
			r = -EINVAL;
			goto out;
		}
		wfd = reopen_fd(fd, O_WRONLY | O_NONBLOCK);
		if (wfd < 0) {
			r = wfd;
			goto out;
		}
		r = ftruncate(wfd, (off_t)sa->size) < 0 ? -errno : 0;
		close(wfd);
		if (r < 0)
			goto out;
	}
	if (sa->kill_suidgid && S_ISREG(st.st_mode) && fstat(fd, &st) == 0 &&
	    wsb_suidgid_kill_bits(st.st_mode))
		(void)chmod_opath(fd, st.st_mode,
				  st.st_mode & 07777 & ~wsb_suidgid_kill_bits(st.st_mode));
	if (sa->valid & FSOPS_SET_MODE) {
		r = chmod_opath(fd, st.st_mode, sa->mode);
		if (r < 0)
			goto out;
	}
	if ((sa->valid & (FSOPS_SET_UID | FSOPS_SET_GID)) || chown_none) {
		uid_t uid = (sa->valid & FSOPS_SET_UID) ? sa->uid : (uid_t)-1;
		gid_t gid = (sa->valid & FSOPS_SET_GID) ? sa->gid : (gid_t)-1;

		r = chown_opath(fd, uid, gid);
		if (r < 0 && !chown_none)
			goto out;
		r = 0; /* chown_none: only ctime, never a failure */
	}
	if (times && utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		char p[PROC_FD_PATH_MAX];

		/* AT_EMPTY_PATH needs Linux 5.8 (and gVisor refuses it);
		 * else the /proc path, which names the fd's own inode, a
		 * symlink too. */
		if (errno != EINVAL)
			goto fail_errno;
		proc_fd_path(p, fd);
		if (utimensat(AT_FDCWD, p, ts, 0) < 0)
			goto fail_errno;
	}
	if (ret_st && fstat(fd, ret_st) < 0)
		goto fail_errno;
out:
	close(fd);
	return r;
fail_errno:
	r = -errno;
	if (e)
		handle_put(h, e);
	else
		close(fd);
	return r;
}

int fsops_mkdir(const struct resolve_root *root, const void *path, size_t len, mode_t mode,
		struct stat *ret_st, struct fsops_ident *ret_ident)
{
	struct stat st;
	char *name;
	int dirfd, fd, r;

	r = resolve_parent_ex(root, path, len, RESOLVE_PARENT_NEW_DIR, &dirfd, &name);
	if (r < 0)
		return r;
	if (mkdirat(dirfd, name, mode & 07777) < 0) {
		r = -errno;
		goto out;
	}
	/* O_PATH: gVisor follows a symlink on O_RDONLY|O_DIRECTORY|O_NOFOLLOW */
	fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	r = stat_ident(root, fd, "", AT_EMPTY_PATH, &st, ret_ident);
	if (r == 0) {
		/* mkdir(2) takes 01777 and inherits S_ISGID from the parent */
		r = fix_mode(fd, &st, (mode & 01777) | (st.st_mode & S_ISGID));
		if (r == 0 && ret_st)
			*ret_st = st;
	}
	close(fd);
out:
	close(dirfd);
	free(name);
	return r;
}

int fsops_mknod(const struct resolve_root *root, const void *path, size_t len, mode_t mode,
		struct stat *ret_st, struct fsops_ident *ret_ident)
{
	mode_t type = mode & S_IFMT;
	struct stat st;
	char *name;
	int dirfd, fd, r;

	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	if (type == 0)
		type = S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK)
		return -EINVAL;
	r = resolve_parent(root, path, len, &dirfd, &name);
	if (r < 0)
		return r;
	if (mknodat(dirfd, name, type | (mode & 07777), 0) < 0) {
		r = -errno;
		goto out;
	}
	fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	r = stat_ident(root, fd, "", AT_EMPTY_PATH, &st, ret_ident);
	if (r == 0) {
		r = fix_mode(fd, &st, mode);
		if (r == 0 && ret_st)
			*ret_st = st;
	}
	close(fd);
out:
	close(dirfd);
	free(name);
	return r;
}

static int unlink_common(const struct resolve_root *root, const void *path, size_t len, int flags)
{
	char *name;
	int dirfd, r;

	r = resolve_parent(root, path, len, &dirfd, &name);
	if (r < 0)
		return r;
	r = unlinkat(dirfd, name, flags) < 0 ? -errno : 0;
	close(dirfd);
	free(name);
	return r;
}

int fsops_unlink(const struct resolve_root *root, const void *path, size_t len,
		 struct stat *ret_st)
{
	struct stat st;
	char *name;
	int dirfd, fd = -1, r;

	if (!ret_st)
		return unlink_common(root, path, len, 0);
	r = resolve_parent(root, path, len, &dirfd, &name);
	if (r < 0)
		return r;
	/* A file that other names keep: hold it to report what the unlink
	 * left (nlink, ctime) once the name is gone. */
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && st.st_nlink > 1)
		fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	r = unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
	if (r == 0 && fd >= 0 && fstat(fd, ret_st) == 0 &&
	    (S_ISREG(ret_st->st_mode) || S_ISLNK(ret_st->st_mode)) && ret_st->st_nlink > 0)
		r = 1;
	if (fd >= 0)
		close(fd);
	close(dirfd);
	free(name);
	return r;
}

int fsops_rmdir(const struct resolve_root *root, const void *path, size_t len,
		struct stat *ret_st)
{
	char *name;
	int dirfd, fd, r;

	if (!ret_st)
		return unlink_common(root, path, len, AT_REMOVEDIR);
	r = resolve_parent(root, path, len, &dirfd, &name);
	if (r < 0)
		return r;
	/* Held across the rmdir: what it left (nlink 0, ctime), which a
	 * process whose cwd it was still stats. */
	fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = unlinkat(dirfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
	if (r == 0 && fd >= 0 && fstat(fd, ret_st) == 0 && S_ISDIR(ret_st->st_mode))
		r = 1;
	if (fd >= 0)
		close(fd);
	close(dirfd);
	free(name);
	return r;
}

int fsops_rename(const struct resolve_root *root, const void *from, size_t from_len,
		 const void *to, size_t to_len, unsigned flags)
{
	return fsops_rename_keep(root, NULL, 0, from, from_len, to, to_len, flags, NULL, NULL);
}

int fsops_rename_keep(const struct resolve_root *root, struct fsops_handles *h,
		      uint64_t owner, const void *from, size_t from_len, const void *to, size_t to_len,
		      unsigned flags, uint64_t *ret_kept, struct stat *ret_st)
{
	struct fsops_handle *e = NULL;
	char *fname, *tname;
	int fdir, tdir, kfd = -1, dfd = -1, r;
	struct stat st;

	if (ret_kept)
		*ret_kept = 0;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	r = resolve_parent(root, from, from_len, &fdir, &fname);
	if (r < 0)
		return r;
	/* A TO ending in "/" names a directory: FROM must be one (rename(2):
	 * ENOTDIR), and TO may be missing. */
	if (resolve_trailing_slash(to, to_len)) {
		if (fstatat(fdir, fname, &st, AT_SYMLINK_NOFOLLOW) < 0)
			r = -errno;
		else if (!S_ISDIR(st.st_mode))
			r = -ENOTDIR;
		if (r < 0)
			goto out;
	}
	r = resolve_parent_ex(root, to, to_len, RESOLVE_PARENT_NEW_DIR, &tdir, &tname);
	if (r < 0)
		goto out;
	/* The file the rename will replace, by its own inode: a regular
	 * file only, and only while the table stays at most three quarters
	 * full with it (the rest stays for opens). */
	if (h && ret_kept && !(flags & (RENAME_NOREPLACE | RENAME_EXCHANGE)) &&
	    4 * ((size_t)fsops_handles_count(h) + 1) <= 3 * (size_t)h->max) {
		struct stat src;

		kfd = openat(tdir, tname, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		/* Not when both names are one file: rename(2) replaces nothing
		 * then (POSIX), and nothing is to be kept. */
		if (kfd >= 0 && (fstat(kfd, &st) < 0 || !S_ISREG(st.st_mode) ||
				 (fstatat(fdir, fname, &src, AT_SYMLINK_NOFOLLOW) == 0 &&
				  src.st_dev == st.st_dev && src.st_ino == st.st_ino) ||
				 handle_reserve(h, owner, &e) < 0)) {
			close(kfd);
			kfd = -1;
		}
		if (kfd >= 0) {
			/* Read-only where agentd may read it: gVisor cannot
			 * open an O_PATH descriptor's file again once it has
			 * no name (EINVAL; docs/gvisor.md). */
			int rfd = reopen_fd(kfd, O_RDONLY | O_NONBLOCK);

			if (rfd >= 0) {
				close(kfd);
				kfd = rfd;
			}
		}
	}
	/* A directory it will replace (an empty one): held across the
	 * rename to report what it left (nlink 0, ctime), which a process
	 * whose cwd it was still stats (as fsops_rmdir()). */
	if (ret_st && kfd < 0 && !(flags & (RENAME_NOREPLACE | RENAME_EXCHANGE)))
		dfd = openat(tdir, tname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = renameat2(fdir, fname, tdir, tname, flags) < 0 ? -errno : 0;
	if (dfd >= 0) {
		if (r == 0 && fstat(dfd, ret_st) == 0 && S_ISDIR(ret_st->st_mode))
			r = 1;
		close(dfd);
	}
	if (kfd >= 0) {
		if (r < 0 || fstat(kfd, &st) < 0) {
			close(kfd);
			kfd = -1;
		}
		if (handle_enter(h, e, kfd, O_RDONLY, owner, ret_kept) == 0 && ret_st)
			*ret_st = st;
	}
	close(tdir);
	free(tname);
out:
	close(fdir);
	free(fname);
	return r;
}

int fsops_link(const struct resolve_root *root, const void *from, size_t from_len,
	       const void *to, size_t to_len, struct stat *ret_st, struct fsops_ident *ret_ident)
{
	char *fname, *tname;
	int fdir, tdir, r;

	r = resolve_parent(root, from, from_len, &fdir, &fname);
	if (r < 0)
		return r;
	r = resolve_parent(root, to, to_len, &tdir, &tname);
	if (r < 0)
		goto out;
	r = linkat(fdir, fname, tdir, tname, 0) < 0 ? -errno : 0;
	if (r == 0 && ret_st)
		r = stat_ident(root, tdir, tname, AT_SYMLINK_NOFOLLOW, ret_st, ret_ident);
	close(tdir);
	free(tname);
out:
	close(fdir);
	free(fname);
	return r;
}

int fsops_symlink(const struct resolve_root *root, const void *target, size_t target_len,
		  const void *path, size_t len, struct stat *ret_st, struct fsops_ident *ret_ident)
{
	char *t, *name;
	int dirfd, r;

	if (target_len > 0 && memchr(target, '\0', target_len))
		return -EINVAL;
	if (target_len == 0)
		return -ENOENT;
	if (target_len >= PATH_MAX)
		return -ENAMETOOLONG;
	t = strndup(target, target_len);
	if (!t)
		return -ENOMEM;
	r = resolve_parent(root, path, len, &dirfd, &name);
	if (r < 0)
		goto out;
	r = symlinkat(t, dirfd, name) < 0 ? -errno : 0;
	if (r == 0 && ret_st)
		r = stat_ident(root, dirfd, name, AT_SYMLINK_NOFOLLOW, ret_st, ret_ident);
	close(dirfd);
	free(name);
out:
	free(t);
	return r;
}

int fsops_readlink(const struct resolve_root *root, const void *path, size_t len, char **ret,
		   size_t *ret_len)
{
	char buf[PATH_MAX + 1];
	struct stat st;
	ssize_t n;
	int fd, r = 0;

	fd = resolve_open(root, path, len, O_PATH | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISLNK(st.st_mode)) {
		r = -EINVAL; /* readlink(2) of a non-symlink */
		goto out;
	}
	n = readlinkat(fd, "", buf, sizeof(buf));
	if (n < 0) {
		r = -errno;
		goto out;
	}
	if ((size_t)n >= sizeof(buf)) {
		r = -ENAMETOOLONG;
		goto out;
	}
	*ret = strndup(buf, (size_t)n);
	if (!*ret) {
		r = -ENOMEM;
		goto out;
	}
	*ret_len = (size_t)n;
out:
	close(fd);
	return r;
}

int fsops_statfs(const struct resolve_root *root, const void *path, size_t len,
		 struct statvfs *ret)
{
	int fd, r = 0;

	fd = resolve_open(root, path, len, O_PATH, 0);
	if (fd < 0)
		return fd;
	if (fstatvfs(fd, ret) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* ---- extended attributes ---- */

/*
 * Resolve @p path without following a final symlink and give the
 * /proc/self/fd path that names exactly that inode; the fd is returned and
 * must be closed after the xattr call. Use the following variants
 * (getxattr, not lgetxattr) on it: they jump through the magic link to the
 * fd's inode and stop there, a symlink included; the l* variants would act
 * on the /proc link itself (tried on Linux 6.18: lgetxattr gives ENODATA for
 * a file that has the attribute).
 */
/* The file an xattr call acts on: handle @e's, or @fd, an O_PATH fd of the
 * path; by @p, its /proc/self/fd name. */
struct xattr_target {
	struct fsops_handles *h;
	struct fsops_handle *e;
	int fd;
	char p[PROC_FD_PATH_MAX];
};

/* Find the target of an xattr call: handle @p id's file when nonzero, else
 * @p path's (a final symlink itself). Returns 0 (release it with
 * xattr_target_put) or -errno (-EBADF: no such handle). */
static int xattr_target_get(const struct resolve_root *root, struct fsops_handles *h,
			    const void *path, size_t len, uint64_t id, struct xattr_target *t)
{
	t->h = h;
	t->e = NULL;
	if (id != 0) {
		t->e = handle_get(h, id);
		if (!t->e)
			return -EBADF;
		t->fd = -1;
		proc_fd_path(t->p, t->e->fd);
		return 0;
	}
	t->fd = resolve_open(root, path, len, O_PATH | O_NOFOLLOW, 0);
	if (t->fd < 0)
		return t->fd;
	proc_fd_path(t->p, t->fd);
	return 0;
}

static void xattr_target_put(struct xattr_target *t)
{
	if (t->e)
		handle_put(t->h, t->e);
	else
		close(t->fd);
}

/* Check and copy an xattr name: NUL -> -EINVAL, empty or too long -> -ERANGE. */
static int xattr_name(const void *name, size_t name_len, char out[XATTR_NAME_MAX + 1])
{
	if (name_len > 0 && memchr(name, '\0', name_len))
		return -EINVAL;
	if (name_len == 0 || name_len > XATTR_NAME_MAX)
		return -ERANGE;
	memcpy(out, name, name_len);
	out[name_len] = '\0';
	return 0;
}

/*
 * The value of xattr @n (NULL: the list of names) of @path, in a buffer of
 * its own size: *@ret (free(3) it), *@ret_len bytes. One over
 * FSOPS_XATTR_MAX is -E2BIG.
 */
static int xattr_read(const struct resolve_root *root, struct fsops_handles *h,
		      const void *path, size_t len, uint64_t id, const char *n, char **ret,
		      size_t *ret_len)
{
	struct xattr_target t;
	char *buf, *shrunk;
	ssize_t got;
	int r;

	buf = malloc(FSOPS_XATTR_MAX);
	if (!buf)
		return -ENOMEM;
	r = xattr_target_get(root, h, path, len, id, &t);
	if (r < 0) {
		free(buf);
		return r;
	}
	/* getxattr on /proc/self/fd/N acts on the fd's inode (a symlink stays one) */
	got = n ? getxattr(t.p, n, buf, FSOPS_XATTR_MAX) : listxattr(t.p, buf, FSOPS_XATTR_MAX);
	r = got < 0 ? (errno == ERANGE ? -E2BIG : -errno) : 0;
	xattr_target_put(&t);
	if (r < 0) {
		free(buf);
		return r;
	}
	shrunk = realloc(buf, got > 0 ? (size_t)got : 1);
	*ret = shrunk ? shrunk : buf;
	*ret_len = (size_t)got;
	return 0;
}

int fsops_getxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		   size_t len, uint64_t id, const void *name, size_t name_len, void **ret,
		   size_t *ret_len)
{
	char n[XATTR_NAME_MAX + 1], *buf;
	int r;

	r = xattr_name(name, name_len, n);
	if (r < 0)
		return r;
	r = xattr_read(root, h, path, len, id, n, &buf, ret_len);
	if (r == 0)
		*ret = buf;
	return r;
}

int fsops_setxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		   size_t len, uint64_t id, const void *name, size_t name_len, const void *value,
		   size_t value_len, int flags)
{
	char n[XATTR_NAME_MAX + 1];
	struct xattr_target t;
	int r;

	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL; /* both: ENODATA or EEXIST, as setxattr(2) gives */
	if (value_len > FSOPS_XATTR_MAX)
		return -E2BIG;
	r = xattr_name(name, name_len, n);
	if (r < 0)
		return r;
	r = xattr_target_get(root, h, path, len, id, &t);
	if (r < 0)
		return r;
	r = setxattr(t.p, n, value_len ? value : "", value_len, flags) < 0 ? -errno : 0;
	xattr_target_put(&t);
	return r;
}

int fsops_listxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		    size_t len, uint64_t id, char **ret, size_t *ret_len)
{
	return xattr_read(root, h, path, len, id, NULL, ret, ret_len);
}

int fsops_removexattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		      size_t len, uint64_t id, const void *name, size_t name_len)
{
	char n[XATTR_NAME_MAX + 1];
	struct xattr_target t;
	int r;

	r = xattr_name(name, name_len, n);
	if (r < 0)
		return r;
	r = xattr_target_get(root, h, path, len, id, &t);
	if (r < 0)
		return r;
	r = removexattr(t.p, n) < 0 ? -errno : 0;
	xattr_target_put(&t);
	return r;
}

/* ---- uploads ---- */

struct fsops_upload {
	int dirfd;          /* O_PATH fd of the target's directory */
	char *name;         /* target's last component */
	char tmp[32];       /* temp file's name in dirfd; "" while unnamed */
	int fd;             /* the temp file, O_RDWR */
	bool unnamed;       /* fd is O_TMPFILE's: named at the commit only */
	uint64_t pos;       /* bytes of content so far */
	mode_t mode;
	bool exclusive;
	bool synced;        /* fsops_upload_sync done */
};

static atomic_uint_fast64_t tmp_seq;
static uint64_t tmp_key;
static pthread_once_t tmp_once = PTHREAD_ONCE_INIT;

static void tmp_key_init(void)
{
	tmp_key = random_key();
}

/* ".wsb-upload." + 6 characters from [A-Za-z0-9]. */
static void tmp_name(char out[32])
{
	static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	uint64_t x;

	pthread_once(&tmp_once, tmp_key_init);
	x = mix64(atomic_fetch_add(&tmp_seq, 1) ^ tmp_key);
	memcpy(out, ".wsb-upload.", 12);
	for (int i = 0; i < 6; i++) {
		out[12 + i] = set[x % (sizeof(set) - 1)];
		x /= sizeof(set) - 1;
	}
	out[18] = '\0';
}

int fsops_mkdirs(const struct resolve_root *root, const void *path, size_t len)
{
	char *norm, *s;
	int r;

	r = resolve_normalize(path, len, &norm);
	if (r < 0)
		return r;
	/* every prefix that ends before a "/" is a parent */
	for (s = strchr(norm, '/'); s; s = strchr(s + 1, '/')) {
		char *last;

		*s = '\0';
		last = strrchr(norm, '/');
		last = last ? last + 1 : norm;
		if (strcmp(last, ".") != 0 && strcmp(last, "..") != 0) {
			r = fsops_mkdir(root, norm, strlen(norm), 0755, NULL, NULL);
			if (r == -EEXIST)
				r = 0;
		}
		*s = '/';
		if (r < 0)
			break;
	}
	free(norm);
	return r;
}

/*
 * While *@name in *@dirfd (what resolve_parent() gave for wire path @path,
 * @len bytes) is a symlink, put there the parent and name of what it leads
 * to, resolved beneath the root as open(2) follows a final symlink: a
 * relative target from the link's directory, an absolute one -EXDEV (as
 * resolve.h), at most 40 links (-ELOOP, path_resolution(7)). -ENOENT when a
 * link leads nowhere (cp(1) does not write through a dangling symlink
 * either). On failure *@dirfd and *@name are the caller's to free still.
 */
static int upload_follow(const struct resolve_root *root, const void *path, size_t len,
			 int *dirfd, char **name)
{
	char *cur = NULL, link[PATH_MAX];
	size_t cur_len = len;
	int r = 0;

	for (int hops = 0;; hops++) {
		const char *p = cur ? cur : path;
		const char *slash;
		struct stat st;
		size_t dir_len;
		ssize_t n;
		char *next;
		int nfd;

		if (fstatat(*dirfd, *name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = errno == ENOENT && hops == 0 ? 0 : -errno;
			break;
		}
		if (!S_ISLNK(st.st_mode))
			break;
		if (hops == 40) {
			r = -ELOOP;
			break;
		}
		n = readlinkat(*dirfd, *name, link, sizeof(link));
		if (n < 0 || (size_t)n >= sizeof(link)) {
			r = n < 0 ? -errno : -ENAMETOOLONG;
			break;
		}
		if (n == 0 || link[0] == '/') {
			r = n == 0 ? -ENOENT : -EXDEV;
			break;
		}
		/* The link's directory in wire terms, then its target. */
		slash = memrchr(p, '/', cur_len);
		dir_len = slash ? (size_t)(slash - p) + 1 : 0;
		next = malloc(dir_len + (size_t)n + 1);
		if (!next) {
			r = -ENOMEM;
			break;
		}
		memcpy(next, p, dir_len);
		memcpy(next + dir_len, link, (size_t)n);
		next[dir_len + (size_t)n] = '\0';
		free(cur);
		cur = next;
		cur_len = dir_len + (size_t)n;
		{
			char *nname;

			r = resolve_parent(root, cur, cur_len, &nfd, &nname);
			if (r < 0)
				break;
			close(*dirfd);
			free(*name);
			*dirfd = nfd;
			*name = nname;
		}
	}
	free(cur);
	return r;
}

/* Copy the first @len bytes of @in to the start of @out: copy_file_range(2),
 * else copy_by_rw(). Returns 0 or -errno. */
static int copy_whole(int in, int out, uint64_t len)
{
	uint64_t done = 0;

	while (done < len) {
		loff_t oi = (loff_t)done, oo = (loff_t)done;
		uint64_t left = len - done;
		ssize_t n = copy_file_range(in, &oi, out, &oo,
					    left > SSIZE_MAX ? SSIZE_MAX : (size_t)left, 0);

		if (n > 0) {
			done += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return 0; /* the end: the caller's ftruncate sets the size */
		if (errno == EINTR)
			continue;
		if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)
			return copy_by_rw(in, 0, out, 0, len, &done);
		return -errno;
	}
	return 0;
}

/* A named temp file in u->dirfd, O_RDWR, its name in u->tmp. Returns the
 * fd or -errno. */
static int tmp_create(struct fsops_upload *u)
{
	int fd = -1;

	for (int i = 0; i < 100; i++) {
		tmp_name(u->tmp);
		fd = openat(u->dirfd, u->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	return fd >= 0 ? fd : -errno;
}

int fsops_upload_begin(const struct resolve_root *root, const void *path, size_t len,
		       const struct fsops_upload_opts *opts, struct fsops_upload **ret)
{
	struct fsops_upload *u;
	struct statvfs vfs;
	struct stat st;
	int r;

	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->fd = -1;
	u->dirfd = -1;
	u->mode = opts->mode_set || (opts->mode & 07777) ? opts->mode & 07777 : 0644;
	u->exclusive = opts->exclusive;
	if (opts->mkdirs) {
		r = fsops_mkdirs(root, path, len);
		if (r < 0)
			goto fail;
	}
	r = resolve_parent(root, path, len, &u->dirfd, &u->name);
	if (r == 0 && opts->follow && !opts->exclusive)
		r = upload_follow(root, path, len, &u->dirfd, &u->name);
	if (r < 0)
		goto fail;
	if (fstatat(u->dirfd, u->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (opts->exclusive) {
			r = -EEXIST;
			goto fail;
		}
		if (S_ISDIR(st.st_mode)) {
			r = -EISDIR;
			goto fail;
		}
		/* Not the set-user-ID, set-group-ID and sticky bits: the new
		 * file is agentd's, not the old one's owner's (cp writes into
		 * the old inode, and a write by one without CAP_FSETID clears
		 * them, write(2)). */
		if (opts->keep_mode && S_ISREG(st.st_mode))
			u->mode = st.st_mode & 0777;
	}
	/* A file system may say a block size of 0 (a FUSE daemon; a FUSE
	 * mount agentd may not use answers zeros, fs/fuse/inode.c
	 * fuse_statfs), or no blocks at all (ramfs, a tmpfs without a size:
	 * simple_statfs(), shmem_statfs()): then nothing is known of its
	 * room. */
	if (opts->size_hint && fstatvfs(u->dirfd, &vfs) == 0 && vfs.f_frsize && vfs.f_blocks &&
	    opts->size_hint / vfs.f_frsize > vfs.f_bavail) {
		r = -ENOSPC;
		goto fail;
	}
	/* An unnamed file (O_TMPFILE, open(2)) where the file system makes
	 * them, named only at the commit (upload_name()): an agentd killed
	 * mid-upload then leaves nothing behind. Else a named temp file. */
	u->fd = openat(u->dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (u->fd >= 0) {
		u->unnamed = true;
		*ret = u;
		return 0;
	}
	u->fd = tmp_create(u);
	if (u->fd < 0) {
		r = u->fd;
		goto fail;
	}
	*ret = u;
	return 0;
fail:
	if (u->dirfd >= 0)
		close(u->dirfd);
	free(u->name);
	free(u);
	return r;
}

int fsops_upload_write(struct fsops_upload *u, const void *data, size_t len)
{
	ssize_t r;

	if (len == 0)
		return 0;
	if (u->pos > INT64_MAX || len > INT64_MAX - u->pos)
		return -EFBIG;
	r = write_all(u->fd, data, len, false, u->pos);
	if (r < 0)
		return (int)r;
	u->pos += len;
	return 0;
}

int fsops_upload_hole(struct fsops_upload *u, uint64_t len)
{
	if (u->pos > INT64_MAX || len > INT64_MAX - u->pos)
		return -EFBIG;
	u->pos += len;
	return 0;
}

uint64_t fsops_upload_size(const struct fsops_upload *u)
{
	return u->pos;
}

static void upload_free(struct fsops_upload *u, bool unlink_tmp)
{
	if (unlink_tmp && !u->unnamed)
		(void)unlinkat(u->dirfd, u->tmp, 0);
	close(u->fd);
	close(u->dirfd);
	free(u->name);
	free(u);
}

void fsops_upload_abort(struct fsops_upload *u)
{
	if (u)
		upload_free(u, true);
}

/*
 * Give an unnamed temp file (O_TMPFILE) its temp name: linkat(2) of its
 * /proc/self/fd link (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH). Where
 * that is refused (no /proc; an LSM), its bytes are copied into a named
 * temp file instead (copy_whole()), so that the upload still lands.
 * Returns 0 or -errno.
 */
static int upload_name(struct fsops_upload *u)
{
	char proc[64];
	int fd, r;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", u->fd);
	for (int i = 0; i < 100; i++) {
		tmp_name(u->tmp);
		if (linkat(AT_FDCWD, proc, u->dirfd, u->tmp, AT_SYMLINK_FOLLOW) == 0) {
			u->unnamed = false;
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	fd = tmp_create(u);
	if (fd < 0) {
		u->tmp[0] = '\0';
		return fd;
	}
	r = copy_whole(u->fd, fd, u->pos);
	if (r == 0 && (ftruncate(fd, (off_t)u->pos) < 0 || fchmod(fd, u->mode) < 0 ||
		       fsync(fd) < 0))
		r = -errno;
	if (r < 0) {
		(void)unlinkat(u->dirfd, u->tmp, 0);
		close(fd);
		u->tmp[0] = '\0';
		return r;
	}
	close(u->fd);
	u->fd = fd;
	u->unnamed = false;
	return 0;
}

/* Put the temp file in place: rename, or refuse to replace when exclusive. */
static int upload_place(struct fsops_upload *u)
{
	if (u->unnamed) {
		int r = upload_name(u);

		if (r < 0)
			return r;
	}
	if (!u->exclusive)
		return renameat(u->dirfd, u->tmp, u->dirfd, u->name) < 0 ? -errno : 0;
	if (renameat2(u->dirfd, u->tmp, u->dirfd, u->name, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* no RENAME_NOREPLACE here: link(2) fails with EEXIST just the same */
	if (linkat(u->dirfd, u->tmp, u->dirfd, u->name, 0) < 0)
		return -errno;
	(void)unlinkat(u->dirfd, u->tmp, 0);
	return 0;
}

int fsops_upload_sync(struct fsops_upload *u)
{
	if (u->synced)
		return 0;
	if (ftruncate(u->fd, (off_t)u->pos) < 0 || fchmod(u->fd, u->mode) < 0 || fsync(u->fd) < 0)
		return -errno;
	u->synced = true;
	return 0;
}

int fsops_upload_commit(struct fsops_upload *u, struct stat *ret_st)
{
	struct stat st;
	int r, dfd;

	r = fsops_upload_sync(u);
	if (r == 0 && fstat(u->fd, &st) < 0)
		r = -errno;
	if (r < 0) {
		upload_free(u, true);
		return r;
	}
	r = upload_place(u);
	if (r < 0) {
		upload_free(u, true);
		return r;
	}
	/* The file in place: upload_name() may have copied the unnamed one. */
	(void)fstat(u->fd, &st);
	/* make the rename durable (fsync(2): the directory needs its own fsync) */
	dfd = openat(u->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) < 0 && errno != EINVAL && errno != EROFS)
			r = -errno;
		close(dfd);
	}
	upload_free(u, false);
	if (r == 0 && ret_st)
		*ret_st = st;
	return r;
}

int fsops_write_file(const struct resolve_root *root, const void *path, size_t len,
		     const void *data, size_t data_len, const struct fsops_upload_opts *opts)
{
	struct fsops_upload_opts def = { 0 };
	struct fsops_upload *u;
	int r;

	r = fsops_upload_begin(root, path, len, opts ? opts : &def, &u);
	if (r < 0)
		return r;
	r = fsops_upload_write(u, data, data_len);
	if (r < 0) {
		fsops_upload_abort(u);
		return r;
	}
	return fsops_upload_commit(u, NULL);
}

int fsops_read_file(const struct resolve_root *root, const void *path, size_t len, size_t limit,
		    char **ret, size_t *ret_len)
{
	struct stat st;
	size_t cap, n = 0;
	char *buf;
	int fd, r = 0;

	fd = open_regular(root, path, len, true, O_RDONLY, &st);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > limit) {
		close(fd);
		return -EFBIG;
	}
	cap = (size_t)st.st_size + 1;
	buf = malloc(cap + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t got;

		if (n == cap) { /* the file grew */
			char *nb;

			if (cap > limit) {
				r = -EFBIG;
				break;
			}
			cap = cap * 2 > limit + 1 ? limit + 1 : cap * 2;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				r = -ENOMEM;
				break;
			}
			buf = nb;
		}
		got = read(fd, buf + n, cap - n);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	if (r == 0 && n > limit)
		r = -EFBIG;
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	return 0;
}

/* ---- downloads ---- */

struct fsops_download {
	int fd;
	uint64_t pos;  /* next byte to report */
	uint64_t end;  /* one past the last byte to report */
	bool sparse;   /* SEEK_DATA/SEEK_HOLE work here */
};

int fsops_download_begin(const struct resolve_root *root, const void *path, size_t len,
			 uint64_t offset, uint64_t length, struct stat *ret_st,
			 struct fsops_download **ret)
{
	struct fsops_download *d;
	struct stat st;
	uint64_t size;
	int fd;

	fd = open_regular(root, path, len, true, O_RDONLY, &st);
	if (fd < 0)
		return fd;
	d = calloc(1, sizeof(*d));
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	size = (uint64_t)st.st_size;
	d->fd = fd;
	d->sparse = true;
	d->pos = offset < size ? offset : size;
	d->end = size;
	if (length && length < size - d->pos)
		d->end = d->pos + length;
	if (ret_st)
		*ret_st = st;
	*ret = d;
	return 0;
}

#define DL_ZERO_BLOCK ((size_t)4096)
/* Shortest run of zero blocks inside data that is sent as a hole, bytes:
 * each hole ends a chunk, and a file of scattered zero blocks went out a
 * block per message (and read 1 MiB for each). */
#define DL_ZERO_RUN_MIN ((size_t)64 * 1024)

/* Offset in a chunk at file offset @p pos where its first whole block ends. */
static size_t first_block_end(uint64_t pos, size_t len)
{
	size_t k = (size_t)(DL_ZERO_BLOCK - pos % DL_ZERO_BLOCK) % DL_ZERO_BLOCK;

	return k ? k : (len ? DL_ZERO_BLOCK : 0);
}

/*
 * Bytes of whole zero blocks (block-aligned in the file) at the start of
 * @p buf (file offset @p pos, @p len bytes); a zero tail shorter than a
 * block counts when it ends the chunk at a block boundary or the chunk is
 * all zeros. 0 if @p pos is not block-aligned or the first block has data.
 */
static size_t zero_prefix(uint64_t pos, const char *buf, size_t len)
{
	size_t z = 0, n;

	if (pos % DL_ZERO_BLOCK)
		return 0;
	while (z < len) {
		n = len - z < DL_ZERO_BLOCK ? len - z : DL_ZERO_BLOCK;
		if (buf[z] || memcmp(buf + z, buf + z + 1, n - 1))
			break;
		z += n;
	}
	return z;
}

/* Length of the hole at d->pos (0 if data is there), bounded by d->end. */
static int download_hole_at(struct fsops_download *d, uint64_t *ret_hole)
{
	off_t o;

	*ret_hole = 0;
	if (!d->sparse || d->pos >= d->end)
		return 0;
	o = lseek(d->fd, (off_t)d->pos, SEEK_DATA);
	if (o < 0) {
		if (errno == ENXIO) { /* no data up to the end of the file */
			*ret_hole = d->end - d->pos;
			return 0;
		}
		if (errno == EINVAL || errno == EOPNOTSUPP) {
			d->sparse = false;
			return 0;
		}
		return -errno;
	}
	if ((uint64_t)o > d->pos)
		*ret_hole = ((uint64_t)o < d->end ? (uint64_t)o : d->end) - d->pos;
	return 0;
}

ssize_t fsops_download_next(struct fsops_download *d, void *buf, size_t size, uint64_t *ret_hole)
{
	uint64_t lim = d->end, hole;
	size_t want, done = 0;
	int r;

	*ret_hole = 0;
	if (d->pos >= d->end)
		return 0;
	r = download_hole_at(d, &hole);
	if (r < 0)
		return r;
	if (hole) {
		d->pos += hole;
		*ret_hole = hole;
		return 0;
	}
	if (d->sparse) {
		off_t o = lseek(d->fd, (off_t)d->pos, SEEK_HOLE);

		if (o >= 0 && (uint64_t)o < lim)
			lim = (uint64_t)o;
	}
	want = lim - d->pos < size ? (size_t)(lim - d->pos) : size;
	while (done < want) {
		ssize_t got = pread(d->fd, (char *)buf + done, want - done,
				    (off_t)(d->pos + done));

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (got == 0) { /* the file shrank: stop here */
			d->end = d->pos + done;
			break;
		}
		done += (size_t)got;
	}
	/*
	 * Runs of whole zero blocks are holes too: where SEEK_DATA/SEEK_HOLE
	 * report none (gVisor's gofer, docs/gvisor.md), a sparse file would
	 * otherwise go out as zeros. A run counts when it is DL_ZERO_RUN_MIN
	 * long, or ends where the data read ends short of @size (at a hole
	 * SEEK_HOLE found, or the end of the file); shorter ones go as data.
	 * The data before the first run that counts is returned with the run
	 * as its hole.
	 */
	for (size_t k = d->pos % DL_ZERO_BLOCK ? first_block_end(d->pos, done) : 0, z; k < done;
	     k += z ? z : DL_ZERO_BLOCK) {
		z = zero_prefix(d->pos + k, (char *)buf + k, done - k);
		if (z && (z >= DL_ZERO_RUN_MIN || (k + z == done && done < size))) {
			d->pos += k + z;
			*ret_hole = z;
			return (ssize_t)k;
		}
	}
	d->pos += done;
	if (done == want && d->pos == lim && lim < d->end) {
		r = download_hole_at(d, &hole);
		if (r < 0)
			return r;
		d->pos += hole;
		*ret_hole = hole;
	}
	return (ssize_t)done;
}

void fsops_download_free(struct fsops_download *d)
{
	if (!d)
		return;
	close(d->fd);
	free(d);
}
