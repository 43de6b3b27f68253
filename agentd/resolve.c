/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Path resolution confined to the workspace root (see resolve.h): openat2(2)
 * with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, or a strict user-space walk
 * that gives the same answers where openat2 is missing.
 *
 * The walk opens one component at a time with O_PATH | O_NOFOLLOW relative to
 * the directory fd reached so far, so the kernel never follows a symlink for
 * us: each symlink is read with readlinkat(2) and its target spliced in front
 * of the rest of the path (path_resolution(7)), at most 40 times (ELOOP, the
 * kernel's MAXSYMLINKS). An absolute target fails with -EXDEV, as openat2's
 * RESOLVE_BENEATH does. ".." is taken with openat(cur, "..") and the result
 * checked against the identity (st_dev, st_ino) of the directory we came
 * down from, kept on a stack; ".." at depth 0 (the root) is an escape
 * (-EXDEV). A mismatch means a directory was moved while we walked: the walk
 * is restarted, a few times, then fails with -EAGAIN, as openat2 does.
 *
 * Threads: no shared state; any thread, concurrently. No locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "resolve.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* Symlinks followed per resolution, as the kernel's MAXSYMLINKS. */
#define RESOLVE_MAX_LINKS 40
/* How often an EAGAIN from openat2 or a moved directory restarts the walk. */
#define RESOLVE_RETRIES 32

static int openat2_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? (mode & 07777) : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	for (int i = 0; i < RESOLVE_RETRIES; i++) {
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0)
			return fd;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
	}
	return -EAGAIN;
}

int resolve_root_open(const char *path, struct resolve_root *root)
{
	struct {
		struct file_handle h;
		unsigned char bytes[MAX_HANDLE_SZ];
	} fh = { .h.handle_bytes = MAX_HANDLE_SZ };
	struct statfs sfs;
	int fd, probe, mount_id;

	if (!path || !root)
		return -EINVAL;
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	probe = openat2_beneath(fd, ".", O_PATH | O_DIRECTORY, 0);
	if (probe >= 0)
		close(probe);
	root->fd = fd;
	/* ENOSYS: kernel < 5.6; EPERM/EINVAL: seccomp or sandboxes (gVisor). */
	root->use_openat2 = probe >= 0;
	root->idents = fstatfs(fd, &sfs) == 0 && sfs.f_type != OVERLAYFS_SUPER_MAGIC;
	root->handles = root->idents && name_to_handle_at(fd, "", &fh.h, &mount_id, AT_EMPTY_PATH) == 0;
	return 0;
}

bool resolve_climbs_out(const char *s)
{
	long depth = 0;

	while (*s) {
		size_t n;

		while (*s == '/')
			s++;
		n = strcspn(s, "/");
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			if (--depth < 0)
				return true;
		} else if (n > 0 && !(n == 1 && s[0] == '.')) {
			depth++;
		}
		s += n;
	}
	return false;
}

bool resolve_has_dotdot(const char *s)
{
	while (*s) {
		size_t n;

		while (*s == '/')
			s++;
		n = strcspn(s, "/");
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return true;
		s += n;
	}
	return false;
}

int resolve_normalize(const void *path, size_t len, char **ret)
{
	const char *p = path;
	size_t i = 0, o = 0, comp = 0;
	char *out;

	if (len > 0 && !p)
		return -EINVAL;
	if (len > 0 && memchr(p, '\0', len))
		return -EINVAL;
	if (len > PATH_MAX)
		return -ENAMETOOLONG;
	out = malloc(len + 2);
	if (!out)
		return -ENOMEM;
	while (i < len && p[i] == '/')
		i++;
	for (; i < len; i++) {
		if (p[i] == '/') {
			comp = 0;
			if (o > 0 && out[o - 1] == '/')
				continue; /* collapse "//" */
		} else if (++comp > NAME_MAX) {
			free(out);
			return -ENAMETOOLONG;
		}
		out[o++] = p[i];
	}
	if (o == 0)
		out[o++] = '.';
	out[o] = '\0';
	*ret = out;
	return 0;
}

/* ---- the portable walk ---- */

struct dir_id {
	dev_t dev;
	ino_t ino;
};

struct walk {
	const struct resolve_root *root;
	int cur;               /* current directory (== root->fd at depth 0) */
	size_t depth;          /* components below the root */
	struct dir_id *stack;  /* stack[i]: identity of the directory at depth i */
	size_t cap;
	unsigned links;        /* symlinks followed so far */
	char *buf;             /* the path still to walk (owned) */
};

static void walk_set_cur(struct walk *w, int fd)
{
	if (w->cur != w->root->fd)
		close(w->cur);
	w->cur = fd;
}

static int walk_push(struct walk *w, int fd, const struct stat *st)
{
	if (w->depth + 1 >= w->cap) {
		size_t cap = w->cap * 2;
		struct dir_id *s = realloc(w->stack, cap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		w->stack = s;
		w->cap = cap;
	}
	w->depth++;
	w->stack[w->depth] = (struct dir_id){ st->st_dev, st->st_ino };
	walk_set_cur(w, fd);
	return 0;
}

/* Go up one level; -EXDEV at the root, -EAGAIN if the tree moved. */
static int walk_dotdot(struct walk *w)
{
	struct stat st;
	const struct dir_id *want;
	int fd;

	if (w->depth == 0)
		return -EXDEV;
	want = &w->stack[w->depth - 1];
	if (w->depth == 1) {
		walk_set_cur(w, w->root->fd);
		w->depth = 0;
		return 0;
	}
	fd = openat(w->cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	if (st.st_dev != want->dev || st.st_ino != want->ino) {
		close(fd);
		return -EAGAIN;
	}
	w->depth--;
	walk_set_cur(w, fd);
	return 0;
}

/*
 * Splice the target of the symlink (@p linkfd, an O_PATH fd of it, or -1 to
 * read @p name in w->cur) in front of @p rest, which points into w->buf.
 */
static int walk_follow(struct walk *w, int linkfd, const char *name, const char *rest)
{
	char target[PATH_MAX + 1];
	ssize_t n;
	size_t rlen = strlen(rest);
	char *nb;

	if (++w->links > RESOLVE_MAX_LINKS)
		return -ELOOP;
	if (linkfd >= 0)
		n = readlinkat(linkfd, "", target, sizeof(target));
	else
		n = readlinkat(w->cur, name, target, sizeof(target));
	if (n < 0)
		return -errno;
	if ((size_t)n >= sizeof(target))
		return -ENAMETOOLONG;
	if (n == 0)
		return -ENOENT; /* as the kernel does for an empty target */
	if (target[0] == '/')
		return -EXDEV;
	nb = malloc((size_t)n + rlen + 1);
	if (!nb)
		return -ENOMEM;
	memcpy(nb, target, (size_t)n);
	memcpy(nb + n, rest, rlen + 1);
	free(w->buf);
	w->buf = nb;
	return 0;
}

/* Is the symlink @p name in @p dirfd? (Only after an open failed.) */
static bool is_symlink_at(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

/*
 * One walk attempt. Returns an fd, -errno, or -EAGAIN when a directory moved
 * under us (the caller retries).
 */
static int walk_once(const struct resolve_root *root, const char *path, int flags, mode_t mode)
{
	struct walk w = { .root = root, .cur = root->fd, .cap = 16 };
	struct stat st;
	char *p, *rest, *name;
	int r = 0, fd;

	w.stack = malloc(w.cap * sizeof(*w.stack));
	w.buf = strdup(path);
	if (!w.stack || !w.buf) {
		r = -ENOMEM;
		goto out;
	}
	if (fstat(root->fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	w.stack[0] = (struct dir_id){ st.st_dev, st.st_ino };

	p = w.buf;
	for (;;) {
		bool final, slash, dir_only;
		size_t n;

		while (*p == '/')
			p++;
		if (*p == '\0') {
			/* path ended in "/", ".", ".." or was the root: open "." */
			fd = openat(w.cur, ".", flags | O_CLOEXEC, mode);
			r = fd < 0 ? -errno : fd;
			goto out;
		}
		name = p;
		n = strcspn(p, "/");
		rest = p + n;
		slash = *rest == '/';
		p = rest;
		while (*p == '/')
			p++;
		final = *p == '\0';

		if (n == 1 && name[0] == '.')
			continue;
		if (n == 2 && name[0] == '.' && name[1] == '.') {
			r = walk_dotdot(&w);
			if (r < 0)
				goto out;
			continue;
		}

		/*
		 * A last component opened with O_DIRECTORY (and no O_CREAT)
		 * takes the intermediate way below: O_PATH | O_NOFOLLOW, then
		 * "." of the directory reached. gVisor (runsc 0.0~20221219)
		 * follows a final symlink on openat(O_RDONLY | O_DIRECTORY |
		 * O_NOFOLLOW), which would open a directory outside the root
		 * (docs/gvisor.md); O_PATH | O_NOFOLLOW it gets right.
		 */
		dir_only = final && !slash && (flags & O_DIRECTORY) && !(flags & O_CREAT);
		if (final && !slash && !dir_only) {
			bool follow = !(flags & O_NOFOLLOW) &&
				      !((flags & O_CREAT) && (flags & O_EXCL));

			fd = openat(w.cur, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
			if (fd >= 0) {
				if (follow && (flags & O_PATH)) {
					/* O_PATH|O_NOFOLLOW opens a symlink itself */
					if (fstat(fd, &st) < 0) {
						r = -errno;
						close(fd);
						goto out;
					}
					if (S_ISLNK(st.st_mode)) {
						r = walk_follow(&w, fd, NULL, rest);
						close(fd);
						if (r < 0)
							goto out;
						p = w.buf;
						continue;
					}
				}
				r = fd;
				goto out;
			}
			r = -errno;
			if (!follow || !is_symlink_at(w.cur, name))
				goto out;
			r = walk_follow(&w, -1, name, rest);
			if (r < 0)
				goto out;
			p = w.buf;
			continue;
		}

		/* an intermediate component, or a final one with a trailing "/" */
		if (final && (flags & O_CREAT)) {
			r = -EISDIR; /* open(2): O_CREAT and a trailing slash */
			goto out;
		}
		name[n] = '\0';
		fd = openat(w.cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			goto out;
		}
		if (fstat(fd, &st) < 0) {
			r = -errno;
			close(fd);
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			r = walk_push(&w, fd, &st);
			if (r < 0) {
				close(fd);
				goto out;
			}
			/* name[n] was '/' (or the end): rest is still in w.buf */
			continue;
		}
		if (!S_ISLNK(st.st_mode) || (dir_only && (flags & O_NOFOLLOW))) {
			/* open(2): O_DIRECTORY | O_NOFOLLOW on a symlink is ENOTDIR */
			close(fd);
			r = -ENOTDIR;
			goto out;
		}
		/* restore the slash so rest keeps its trailing-"/" meaning */
		if (slash)
			name[n] = '/';
		r = walk_follow(&w, fd, NULL, rest);
		close(fd);
		if (r < 0)
			goto out;
		p = w.buf;
	}
out:
	walk_set_cur(&w, root->fd);
	free(w.stack);
	free(w.buf);
	return r;
}

/*
 * Resolve the normalized relative path @p path (NUL-terminated) beneath the
 * root and open it. Returns an fd or -errno.
 */
static int resolve_open_normalized(const struct resolve_root *root, const char *path, int flags,
				   mode_t mode)
{
	int r = -EAGAIN;

	if (root->use_openat2)
		return openat2_beneath(root->fd, path, flags, mode);
	for (int i = 0; i < RESOLVE_RETRIES && r == -EAGAIN; i++)
		r = walk_once(root, path, flags, mode & 07777);
	return r;
}

int resolve_open(const struct resolve_root *root, const void *path, size_t len, int flags,
		 mode_t mode)
{
	char *norm;
	int r;

	if (!root || root->fd < 0)
		return -EBADF;
	r = resolve_normalize(path, len, &norm);
	if (r < 0)
		return r;
	r = resolve_open_normalized(root, norm, flags, mode);
	free(norm);
	return r;
}

bool resolve_trailing_slash(const void *path, size_t len)
{
	const char *p = path;
	size_t n = len;

	while (n > 0 && p[n - 1] == '/')
		n--;
	return n > 0 && n < len;
}

int resolve_parent(const struct resolve_root *root, const void *path, size_t len,
		   int *ret_dirfd, char **ret_name)
{
	return resolve_parent_ex(root, path, len, 0, ret_dirfd, ret_name);
}

int resolve_parent_ex(const struct resolve_root *root, const void *path, size_t len,
		      unsigned flags, int *ret_dirfd, char **ret_name)
{
	char *norm, *slash, *name, *last;
	struct stat st;
	size_t n;
	int r, dirfd;

	if (!root || root->fd < 0)
		return -EBADF;
	r = resolve_normalize(path, len, &norm);
	if (r < 0)
		return r;
	n = strlen(norm);
	while (n > 1 && norm[n - 1] == '/')
		norm[--n] = '\0';
	if (strcmp(norm, ".") == 0) {
		r = -EBUSY;
		goto out;
	}
	slash = strrchr(norm, '/');
	last = slash ? slash + 1 : norm;
	if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
		/* report an escape or a missing directory first, as rmdir(2) would */
		r = resolve_open_normalized(root, norm, O_PATH, 0);
		if (r >= 0) {
			close(r);
			r = -EINVAL;
		}
		goto out;
	}
	name = strdup(last);
	if (!name) {
		r = -ENOMEM;
		goto out;
	}
	if (slash) {
		*slash = '\0';
		dirfd = resolve_open_normalized(root, norm, O_PATH | O_DIRECTORY, 0);
	} else {
		dirfd = fcntl(root->fd, F_DUPFD_CLOEXEC, 3);
		if (dirfd < 0)
			dirfd = -errno;
	}
	if (dirfd < 0) {
		free(name);
		r = dirfd;
		goto out;
	}
	if (resolve_trailing_slash(path, len)) {
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			r = S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
		else
			r = errno == ENOENT && (flags & RESOLVE_PARENT_NEW_DIR) ? 0 : -errno;
		if (r < 0) {
			close(dirfd);
			free(name);
			goto out;
		}
	}
	*ret_dirfd = dirfd;
	*ret_name = name;
	r = 0;
out:
	free(norm);
	return r;
}
