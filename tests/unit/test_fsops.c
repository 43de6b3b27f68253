/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/fsops.c on a mkdtemp(3) tree under /tmp: the handle
 * table (ids, limit, concurrent use), rename flags, setattr on a symlink
 * (never following it), exact create modes, xattrs not following symlinks,
 * atomic uploads (an abort leaves the old file and no temp file), sparse
 * downloads (holes reported, not sent) and readdir paging (every entry once).
 *
 *     T/outside/secret      must never be touched
 *     T/root/               the workspace root (umask 077 while testing, so
 *                           an exact mode proves the umask was undone)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "fsops.h"
#include "wsb.h"
#include "resolve.h"

static const bool use_openat2 = true;
static const bool use_walk = false;

struct fx {
	char top[64];
	char rootdir[96];
	char outside[96];
	struct resolve_root root;
	struct fsops_handles *h;
	mode_t old_umask;
};

static void write_at(const char *dir, const char *rel, const char *data)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

/* Content of DIR/REL (NUL-terminated, caller frees), or NULL if absent. */
static char *read_at(const char *dir, const char *rel)
{
	char p[512], *buf = calloc(1, 65536);
	ssize_t n;
	int fd;

	assert_non_null(buf);
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		free(buf);
		return NULL;
	}
	n = read(fd, buf, 65535);
	close(fd);
	assert_true(n >= 0);
	return buf;
}

static struct stat lstat_at(const char *dir, const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	assert_int_equal(lstat(p, &st), 0);
	return st;
}

static bool exists_at(const char *dir, const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return lstat(p, &st) == 0;
}

/* Number of ".wsb-upload.*" temp files in DIR. */
static int count_temps(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, ".wsb-upload.", 12) == 0)
			n++;
	closedir(d);
	return n;
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char p[256], t[256];

	assert_non_null(fx);
	strcpy(fx->top, "/tmp/wsb-test-fsops.XXXXXX");
	assert_non_null(mkdtemp(fx->top));
	snprintf(fx->rootdir, sizeof(fx->rootdir), "%s/root", fx->top);
	snprintf(fx->outside, sizeof(fx->outside), "%s/outside", fx->top);
	assert_int_equal(mkdir(fx->rootdir, 0755), 0);
	assert_int_equal(mkdir(fx->outside, 0755), 0);
	write_at(fx->outside, "secret", "secret");
	write_at(fx->rootdir, "f", "hello");
	snprintf(p, sizeof(p), "%s/secret", fx->outside);
	snprintf(t, sizeof(t), "%s/abs", fx->rootdir);
	assert_int_equal(symlink(p, t), 0);
	snprintf(t, sizeof(t), "%s/l", fx->rootdir);
	assert_int_equal(symlink("f", t), 0);
	assert_int_equal(resolve_root_open(fx->rootdir, &fx->root), 0);
	if (*state == &use_walk) /* the prestate picks the resolve mechanism */
		fx->root.use_openat2 = false;
	assert_int_equal(fsops_handles_new(0, &fx->h), 0);
	fx->old_umask = umask(077);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	struct stat st = lstat_at(fx->outside, "secret");
	char cmd[128], *s = read_at(fx->outside, "secret");

	/* nothing outside the root was changed */
	assert_string_equal(s, "secret");
	free(s);
	assert_int_equal(st.st_mode & 07777, 0644);
	umask(fx->old_umask);
	fsops_handles_free(fx->h);
	close(fx->root.fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->top);
	assert_int_equal(system(cmd), 0);
	free(fx);
	return 0;
}

#define P(s) (s), strlen(s)

static void test_handles(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t ids[3], id, off;
	struct stat st;
	bool created;
	char buf[16];

	assert_int_equal(fsops_handles_new(3, &h), 0);
	assert_int_equal(fsops_handles_limit(h), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fsops_open(&fx->root, h, 5, P("f"), O_RDONLY, 0, &ids[i], &st, NULL, NULL), 0);
		assert_int_not_equal(ids[i], 0);
		assert_int_equal(st.st_size, 5);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
	}
	assert_int_equal(fsops_handles_count(h), 3);
	assert_int_equal(fsops_open(&fx->root, h, 5, P("f"), O_RDONLY, 0, &id, NULL, NULL, NULL), -EMFILE);
	assert_int_equal(fsops_read(h, ids[1], 1, buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "ello", 4);
	assert_int_equal(fsops_read(h, ids[1], 100, buf, sizeof(buf)), 0);
	assert_int_equal(fsops_write(h, ids[1], 0, "x", 1, NULL), -EBADF); /* read-only */
	assert_int_equal(fsops_release(h, ids[1]), 0);
	assert_int_equal(fsops_release(h, ids[1]), -EBADF);
	assert_int_equal(fsops_read(h, ids[1], 0, buf, 1), -EBADF);
	assert_int_equal(fsops_read(h, 0, 0, buf, 1), -EBADF);
	assert_int_equal(fsops_handles_count(h), 2);
	/* O_CREAT with O_DIRECTORY is no open (Linux 6.4 on): nothing made */
	assert_int_equal(fsops_open(&fx->root, h, 0, P("cd"), O_RDONLY | O_CREAT | O_DIRECTORY,
				    0644, &id, NULL, NULL, NULL),
			 -EINVAL);
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/cd", fx->rootdir);
		assert_int_equal(access(p, F_OK), -1);
	}
	assert_int_equal(fsops_handles_count(h), 2);
	/* a freed slot can be used again, with a new id */
	created = false;
	assert_int_equal(fsops_open(&fx->root, h, 0, P("new"), O_RDWR | O_CREAT | O_EXCL, 0640, &id,
				    &st, NULL, &created), 0);
	assert_true(created);
	assert_int_not_equal(id, ids[1]);
	assert_int_equal(st.st_mode & 07777, 0640); /* exact despite umask 077 */
	assert_int_equal(fsops_write(h, id, 3, "abc", 3, &st), 3);
	assert_int_equal(st.st_size, 6);
	assert_int_equal(fsops_lseek(h, id, 0, SEEK_DATA, &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(fsops_fsync(h, id, true), 0);
	assert_int_equal(fsops_fallocate(h, id, FALLOC_FL_KEEP_SIZE, 0, 8192), 0);
	assert_int_equal(fsops_fstat(h, id, &st), 0);
	assert_int_equal(st.st_size, 6);
	assert_int_equal(fsops_release(h, id), 0);
	/* O_CREAT of an existing file opens it, and says so (mode ignored) */
	assert_int_equal(fsops_open(&fx->root, h, 0, P("new"), O_RDWR | O_CREAT, 0600, &id, &st, NULL,
				    &created), 0);
	assert_false(created);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_size, 6);
	assert_int_equal(fsops_release(h, id), 0);
	/* an escape is refused and does not leak a slot */
	assert_int_equal(fsops_open(&fx->root, h, 0, P("abs"), O_RDONLY, 0, &id, NULL, NULL, NULL), -EXDEV);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY | O_SYNC, 0, &id, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(fsops_handles_count(h), 2);
	fsops_handles_free(h); /* closes the two still open */

	/* append handles write at the end whatever the offset */
	assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("f"), O_WRONLY | O_APPEND, 0, &id, NULL, NULL, NULL), 0);
	assert_int_equal(fsops_write(fx->h, id, 0, "!!", 2, &st), 2);
	assert_int_equal(st.st_size, 7);
	assert_int_equal(fsops_release(fx->h, id), 0);
	{
		char *s = read_at(fx->rootdir, "f");

		assert_string_equal(s, "hello!!");
		free(s);
	}
}

/* Handles of no session (which only Release frees) take at most half the
 * table: a client that opened 4096 and went shut every mount out until
 * agentd's exit; sessions' handles still have the rest. */
static void test_unowned_half(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t none[4], mine[4], id;

	assert_int_equal(fsops_handles_new(8, &h), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY, 0, &none[i], NULL, NULL,
					    NULL), 0);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY, 0, &id, NULL, NULL, NULL),
			 -EMFILE);
	assert_int_equal(fsops_handles_unowned(h), 4);
	assert_int_equal(fsops_reopen(h, 0, none[0], O_RDONLY, &id, NULL), -EMFILE);
	/* a failed open gives its slot back */
	assert_int_equal(fsops_open(&fx->root, h, 3, P("missing"), O_RDONLY, 0, &id, NULL, NULL,
				    NULL), -ENOENT);
	for (int i = 0; i < 4; i++)
		assert_int_equal(fsops_reopen(h, 3, none[i], O_RDONLY, &mine[i], NULL), 0);
	assert_int_equal(fsops_open(&fx->root, h, 3, P("f"), O_RDONLY, 0, &id, NULL, NULL, NULL),
			 -EMFILE);
	assert_int_equal(fsops_release(h, mine[0]), 0);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY, 0, &id, NULL, NULL, NULL),
			 -EMFILE); /* still 4 of no session */
	assert_int_equal(fsops_release(h, none[1]), 0);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY, 0, &id, NULL, NULL, NULL), 0);
	assert_int_equal(fsops_handles_count(h), 7);
	fsops_handles_free(h);
}

/* fsops_handles_release_owner: a session's handles go, opened by path, by
 * reopen or kept by a rename; others' stay and still read. */
static void test_release_owner(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t a1, a2, a3, b1, none, kept;
	char buf[8];

	assert_int_equal(fsops_handles_new(16, &h), 0);
	assert_int_equal(fsops_open(&fx->root, h, 7, P("f"), O_RDONLY, 0, &a1, NULL, NULL, NULL), 0);
	assert_int_equal(fsops_reopen(h, 7, a1, O_RDONLY, &a2, NULL), 0);
	assert_int_equal(fsops_open(&fx->root, h, 9, P("f"), O_RDONLY, 0, &b1, NULL, NULL, NULL), 0);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("f"), O_RDONLY, 0, &none, NULL, NULL, NULL), 0);
	write_at(fx->rootdir, "k.new", "new");
	write_at(fx->rootdir, "k", "old");
	assert_int_equal(fsops_rename_keep(&fx->root, h, 7, P("k.new"), P("k"), 0, &a3, NULL), 0);
	assert_int_not_equal(a3, 0);
	/* A reopen under another owner belongs to that one. */
	assert_int_equal(fsops_reopen(h, 9, a3, O_RDONLY, &kept, NULL), 0);
	assert_int_equal(fsops_handles_count(h), 6);

	assert_int_equal(fsops_handles_release_owner(h, 0), 0);
	assert_int_equal(fsops_handles_release_owner(h, 7), 3);
	assert_int_equal(fsops_handles_count(h), 3);
	assert_int_equal(fsops_read(h, a1, 0, buf, 1), -EBADF);
	assert_int_equal(fsops_read(h, a2, 0, buf, 1), -EBADF);
	assert_int_equal(fsops_read(h, a3, 0, buf, 1), -EBADF);
	assert_int_equal(fsops_release(h, a1), -EBADF);
	assert_int_equal(fsops_read(h, b1, 0, buf, 5), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(fsops_read(h, none, 1, buf, 4), 4);
	/* The replaced file, through owner 9's reopen of the released keep. */
	assert_int_equal(fsops_read(h, kept, 0, buf, 3), 3);
	assert_memory_equal(buf, "old", 3);
	assert_int_equal(fsops_handles_release_owner(h, 7), 0);
	assert_int_equal(fsops_handles_release_owner(h, 9), 2);
	assert_int_equal(fsops_handles_count(h), 1);
	assert_int_equal(fsops_release(h, none), 0);
	fsops_handles_free(h);
}

/* fsops_reopen: the handle's own file, nameless or not; flags checked. */
static void test_reopen(void **state)
{
	struct fx *fx = *state;
	uint64_t id, ro, rw, none;
	struct stat st, st2;
	char buf[16];

	assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("g"), O_RDWR | O_CREAT | O_EXCL, 0644, &id,
				    &st, NULL, NULL), 0);
	assert_int_equal(fsops_write(fx->h, id, 0, "old", 3, NULL), 3);
	write_at(fx->rootdir, "g.new", "new");
	assert_int_equal(fsops_rename(&fx->root, P("g.new"), P("g"), 0), 0);
	assert_int_equal(fsops_reopen(fx->h, 0, id, O_RDONLY, &ro, &st2), 0);
	assert_int_not_equal(ro, id);
	assert_int_equal(st2.st_ino, st.st_ino);
	assert_int_equal(st2.st_nlink, 0);
	assert_int_equal(fsops_read(fx->h, ro, 0, buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "old", 3);
	assert_int_equal(fsops_write(fx->h, ro, 0, "x", 1, NULL), -EBADF); /* read-only */
	/* Through an unlink too, and O_TRUNC truncates the nameless file. */
	assert_int_equal(fsops_unlink(&fx->root, P("g"), NULL), 0);
	assert_int_equal(fsops_reopen(fx->h, 0, ro, O_WRONLY | O_TRUNC | O_APPEND, &rw, &st2), 0);
	assert_int_equal(st2.st_size, 0);
	assert_int_equal(fsops_write(fx->h, rw, 100, "ab", 2, &st2), 2);
	assert_int_equal(fsops_read(fx->h, id, 0, buf, sizeof(buf)), 2); /* appended at 0 */
	assert_memory_equal(buf, "ab", 2);
	/* Flags a reopen does not take, and handles that are not open. */
	assert_int_equal(fsops_reopen(fx->h, 0, id, O_RDONLY | O_CREAT, &none, NULL), -EINVAL);
	assert_int_equal(fsops_reopen(fx->h, 0, id, O_RDONLY | O_NOFOLLOW, &none, NULL), -EINVAL);
	assert_int_equal(fsops_reopen(fx->h, 0, id, O_ACCMODE, &none, NULL), -EINVAL);
	assert_int_equal(fsops_reopen(fx->h, 0, 0, O_RDONLY, &none, NULL), -EBADF);
	assert_int_equal(fsops_release(fx->h, rw), 0);
	assert_int_equal(fsops_reopen(fx->h, 0, rw, O_RDONLY, &none, NULL), -EBADF);
	assert_int_equal(fsops_handles_count(fx->h), 2);
	assert_int_equal(fsops_release(fx->h, ro), 0);
	assert_int_equal(fsops_release(fx->h, id), 0);
}

/* fsops_pin: the stat of a regular file and a handle that reopens that very
 * file after its name was replaced; nothing pinned for other kinds, a
 * symlink not followed, a table three quarters full a stat only. */
static void test_pin(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t pin, ro, other;
	struct stat st, st2;
	struct fsops_ident id;
	char buf[8], path[128];

	assert_int_equal(fsops_handles_new(2, &h), 0);
	write_at(fx->rootdir, "p", "two");
	assert_int_equal(fsops_pin(&fx->root, h, 1, P("p"), &pin, &st, &id), 0);
	assert_int_not_equal(pin, 0);
	assert_int_equal(st.st_size, 3);
	assert_true(S_ISREG(st.st_mode));
	write_at(fx->rootdir, "p.new", "three");
	assert_int_equal(fsops_rename(&fx->root, P("p.new"), P("p"), 0), 0);
	assert_int_equal(fsops_write(h, pin, 0, "x", 1, NULL), -EBADF); /* read-only */
	assert_int_equal(fsops_reopen(h, 1, pin, O_RDONLY, &ro, &st2), 0);
	assert_int_equal(st2.st_ino, st.st_ino);
	assert_int_equal(fsops_read(h, ro, 0, buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "two", 3);
	/* Past three quarters of the table (2 of 2): a stat, no handle. */
	assert_int_equal(fsops_pin(&fx->root, h, 1, P("p"), &other, &st2, NULL), 0);
	assert_int_equal(other, 0);
	assert_int_equal(st2.st_size, 5);
	assert_int_equal(fsops_handles_count(h), 2);
	assert_int_equal(fsops_release(h, ro), 0);
	assert_int_equal(fsops_release(h, pin), 0);
	/* A directory and a symlink (not followed): stat only; a missing
	 * name fails as lstat(2). */
	snprintf(path, sizeof(path), "%s/pd", fx->rootdir);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(fsops_pin(&fx->root, h, 1, P("pd"), &other, &st2, NULL), 0);
	assert_int_equal(other, 0);
	assert_true(S_ISDIR(st2.st_mode));
	snprintf(path, sizeof(path), "%s/pl", fx->rootdir);
	assert_int_equal(symlink("p", path), 0);
	assert_int_equal(fsops_pin(&fx->root, h, 1, P("pl"), &other, &st2, NULL), 0);
	assert_int_equal(other, 0);
	assert_true(S_ISLNK(st2.st_mode));
	assert_int_equal(fsops_pin(&fx->root, h, 1, P("nope"), &other, &st2, NULL), -ENOENT);
	assert_int_equal(other, 0);
	assert_int_equal(fsops_handles_count(h), 0);
	fsops_handles_free(h);
}

/* fsops_rename_keep: the replaced regular file stays open as an O_PATH
 * handle while the table is under three quarters full. */
static void test_rename_keep(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t kept, ro, ids[2];
	struct stat st, old;
	char buf[8], path[128];

	assert_int_equal(fsops_handles_new(4, &h), 0);
	write_at(fx->rootdir, "a", "old");
	write_at(fx->rootdir, "a.new", "new");
	snprintf(path, sizeof(path), "%s/a", fx->rootdir);
	assert_int_equal(stat(path, &old), 0);
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("a.new"), P("a"), 0, &kept, &st), 0);
	assert_int_not_equal(kept, 0);
	assert_int_equal(st.st_ino, old.st_ino);
	assert_int_equal(st.st_nlink, 0);
	assert_int_equal(fsops_write(h, kept, 0, "x", 1, NULL), -EBADF); /* read-only */
	assert_int_equal(fsops_reopen(h, 1, kept, O_RDONLY, &ro, NULL), 0);
	assert_int_equal(fsops_read(h, ro, 0, buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "old", 3);
	assert_int_equal(fsops_handles_count(h), 2);
	/* Nothing replaced, a failed rename, an exchange, a rename onto
	 * itself or another name of the same file: nothing kept. */
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("a"), P("b"), 0, &kept, NULL), 0);
	assert_int_equal(kept, 0);
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("b"), P("b"), 0, &kept, &st), 0);
	assert_int_equal(kept, 0);
	snprintf(path, sizeof(path), "%s/b", fx->rootdir);
	{
		char other[160];

		snprintf(other, sizeof(other), "%s/b.link", fx->rootdir);
		assert_int_equal(link(path, other), 0);
		assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("b.link"), P("b"), 0, &kept,
						   &st), 0);
		assert_int_equal(kept, 0);
		assert_int_equal(unlink(other), 0);
	}
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("nope"), P("b"), 0, &kept, NULL),
			 -ENOENT);
	assert_int_equal(kept, 0);
	write_at(fx->rootdir, "c", "c");
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("c"), P("b"), RENAME_EXCHANGE, &kept,
					   NULL), 0);
	assert_int_equal(kept, 0);
	assert_int_equal(fsops_handles_count(h), 2);
	/* Three of four handles open: no room kept for it. */
	assert_int_equal(fsops_open(&fx->root, h, 1, P("f"), O_RDONLY, 0, &ids[0], NULL, NULL, NULL), 0);
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("c"), P("b"), 0, &kept, NULL), 0);
	assert_int_equal(kept, 0);
	assert_int_equal(fsops_handles_count(h), 3);
	/* A replaced (empty) directory: its attributes once gone, r 1, no
	 * handle; a directory that is not replaced gives none. */
	snprintf(path, sizeof(path), "%s/dold", fx->rootdir);
	assert_int_equal(mkdir(path, 0750), 0);
	assert_int_equal(stat(path, &old), 0);
	snprintf(path, sizeof(path), "%s/dnew", fx->rootdir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("dnew"), P("dold"), 0, &kept, &st), 1);
	assert_int_equal(kept, 0);
	assert_int_equal(st.st_ino, old.st_ino);
	assert_int_equal(st.st_mode, old.st_mode);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_nlink, 0);
	assert_int_equal(fsops_rename_keep(&fx->root, h, 1, P("dold"), P("dnew"), 0, &kept, &st), 0);
	assert_int_equal(fsops_rename(&fx->root, P("dnew"), P("e"), 0), 0);
	assert_int_equal(fsops_handles_count(h), 3);
	fsops_handles_free(h);
}

struct race {
	struct fsops_handles *h;
	uint64_t id;
	int bad;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	char buf[8];

	for (int i = 0; i < 20000; i++) {
		ssize_t n = fsops_read(r->h, r->id, 0, buf, 5);

		if (n == -EBADF)
			break; /* released */
		if (n != 5 || memcmp(buf, "hello", 5) != 0)
			r->bad++;
	}
	return NULL;
}

/* Release while reads are in flight: reads finish or see EBADF, nothing else. */
static void test_handles_concurrent_release(void **state)
{
	struct fx *fx = *state;

	for (int round = 0; round < 20; round++) {
		struct race r = { .h = fx->h };
		pthread_t t[4];

		assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("f"), O_RDONLY, 0, &r.id, NULL, NULL, NULL), 0);
		for (int i = 0; i < 4; i++)
			assert_int_equal(pthread_create(&t[i], NULL, reader, &r), 0);
		usleep(200);
		assert_int_equal(fsops_release(fx->h, r.id), 0);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		assert_int_equal(r.bad, 0);
	}
	assert_int_equal(fsops_handles_count(fx->h), 0);
}

static void test_rename_flags(void **state)
{
	struct fx *fx = *state;
	char *s;

	write_at(fx->rootdir, "x", "X");
	write_at(fx->rootdir, "y", "Y");
	assert_int_equal(fsops_rename(&fx->root, P("x"), P("y"), RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(fsops_rename(&fx->root, P("x"), P("y"), RENAME_NOREPLACE | RENAME_EXCHANGE),
			 -EINVAL);
	assert_int_equal(fsops_rename(&fx->root, P("x"), P("nope"), RENAME_EXCHANGE), -ENOENT);
	assert_int_equal(fsops_rename(&fx->root, P("x"), P("y"), RENAME_EXCHANGE), 0);
	s = read_at(fx->rootdir, "x");
	assert_string_equal(s, "Y");
	free(s);
	s = read_at(fx->rootdir, "y");
	assert_string_equal(s, "X");
	free(s);
	assert_int_equal(fsops_rename(&fx->root, P("x"), P("z"), RENAME_NOREPLACE), 0);
	assert_false(exists_at(fx->rootdir, "x"));
	assert_int_equal(fsops_rename(&fx->root, P("z"), P("y"), 0), 0);
	s = read_at(fx->rootdir, "y");
	assert_string_equal(s, "Y");
	free(s);
	/* escapes, and the root itself */
	assert_int_equal(fsops_rename(&fx->root, P("y"), P("../outside/y"), 0), -EXDEV);
	assert_int_equal(fsops_rename(&fx->root, P("../outside/secret"), P("s"), 0), -EXDEV);
	assert_int_equal(fsops_rename(&fx->root, P("/"), P("r"), 0), -EBUSY);
	/* a symlink is renamed, not its target */
	assert_int_equal(fsops_rename(&fx->root, P("abs"), P("abs2"), 0), 0);
	assert_true(S_ISLNK(lstat_at(fx->rootdir, "abs2").st_mode));
}

static int sys_rc(int r)
{
	return r < 0 ? -errno : 0;
}

/* A name ending in "/" names a directory (path_resolution(7)): each call
 * gives what the same syscall gives on a twin tree, in the same order
 * (a file named "f/" was renamed over, removed or linked before). */
static void test_trailing_slash(void **state)
{
	struct fx *fx = *state;
	static const char *const dirs[] = { "d", "e" };
	char twin[128];
	int t, r = fx->root.fd;

	snprintf(twin, sizeof(twin), "%s/twin", fx->top);
	assert_int_equal(mkdir(twin, 0755), 0);
	write_at(twin, "f", "hello");
	t = open(twin, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(t >= 0);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(mkdirat(r, dirs[i], 0755), 0);
		assert_int_equal(mkdirat(t, dirs[i], 0755), 0);
	}
	assert_int_equal(symlinkat("d", r, "ld"), 0);
	assert_int_equal(symlinkat("d", t, "ld"), 0);
#define SAME(fsop, sysop)                                                         \
	do {                                                                      \
		int want_ = sys_rc(sysop);                                        \
		assert_int_equal(fsop, want_);                                    \
	} while (0)
	SAME(fsops_unlink(&fx->root, P("f/"), NULL), unlinkat(t, "f/", 0));
	SAME(fsops_unlink(&fx->root, P("missing/"), NULL), unlinkat(t, "missing/", 0));
	SAME(fsops_unlink(&fx->root, P("ld/"), NULL), unlinkat(t, "ld/", 0));
	SAME(fsops_unlink(&fx->root, P("d/"), NULL), unlinkat(t, "d/", 0));
	SAME(fsops_rmdir(&fx->root, P("ld/"), NULL), unlinkat(t, "ld/", AT_REMOVEDIR));
	SAME(fsops_symlink(&fx->root, P("x"), P("new/"), NULL, NULL), symlinkat("x", t, "new/"));
	SAME(fsops_mknod(&fx->root, P("new/"), S_IFIFO | 0644, NULL, NULL),
	     mknodat(t, "new/", S_IFIFO | 0644, 0));
	SAME(fsops_link(&fx->root, P("f"), P("new/"), NULL, NULL), linkat(t, "f", t, "new/", 0));
	SAME(fsops_link(&fx->root, P("f/"), P("new"), NULL, NULL), linkat(t, "f/", t, "new", 0));
	SAME(fsops_rename(&fx->root, P("f"), P("new/"), 0), renameat(t, "f", t, "new/"));
	SAME(fsops_rename(&fx->root, P("f/"), P("new"), 0), renameat(t, "f/", t, "new"));
	SAME(fsops_rename(&fx->root, P("ld/"), P("new"), 0), renameat(t, "ld/", t, "new"));
	SAME(fsops_rename(&fx->root, P("f"), P("ld/"), 0), renameat(t, "f", t, "ld/"));
	SAME(fsops_mkdir(&fx->root, P("new2/"), 0755, NULL, NULL), mkdirat(t, "new2/", 0755));
	SAME(fsops_rename(&fx->root, P("e"), P("new3/"), 0), renameat(t, "e", t, "new3/"));
	SAME(fsops_rename(&fx->root, P("new3"), P("d/"), 0), renameat(t, "new3", t, "d/"));
	SAME(fsops_rename(&fx->root, P("new2/"), P("ld/"), 0), renameat(t, "new2/", t, "ld/"));
	SAME(fsops_rmdir(&fx->root, P("d/"), NULL), unlinkat(t, "d/", AT_REMOVEDIR));
#undef SAME
	/* what is left: f, ld and new2, in both */
	assert_true(exists_at(fx->rootdir, "f") && exists_at(fx->rootdir, "new2"));
	assert_true(S_ISLNK(lstat_at(fx->rootdir, "ld").st_mode));
	assert_false(exists_at(fx->rootdir, "new") || exists_at(fx->rootdir, "d") ||
		     exists_at(fx->rootdir, "e") || exists_at(fx->rootdir, "new3"));
	assert_true(exists_at(twin, "f") && exists_at(twin, "new2") && !exists_at(twin, "d"));
	close(t);
}

static void test_setattr_symlink_nofollow(void **state)
{
	struct fx *fx = *state;
	struct fsops_setattr sa = {
		.atime = { 0, UTIME_OMIT },
		.mtime = { 12345, 0 },
	};
	struct stat before_f = lstat_at(fx->rootdir, "f"), st;

	/* times: the symlink's own change */
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("l"), 0, &sa, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_mtime, 12345);
	assert_int_equal(lstat_at(fx->rootdir, "l").st_mtime, 12345);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_mtime, before_f.st_mtime);
	/* the same on a link that points outside: only the link changes */
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("abs"), 0, &sa, NULL), 0);
	assert_int_equal(lstat_at(fx->rootdir, "abs").st_mtime, 12345);
	assert_int_not_equal(lstat_at(fx->outside, "secret").st_mtime, 12345);
	/* chmod of a symlink is refused, not passed to the target */
	sa = (struct fsops_setattr){ .valid = FSOPS_SET_MODE, .mode = 0600,
				     .atime = { 0, UTIME_OMIT }, .mtime = { 0, UTIME_OMIT } };
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("l"), 0, &sa, NULL), -EOPNOTSUPP);
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("abs"), 0, &sa, NULL), -EOPNOTSUPP);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_mode & 07777, before_f.st_mode & 07777);
	/* truncate of a symlink is refused */
	sa.valid = FSOPS_SET_SIZE;
	sa.size = 0;
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("abs"), 0, &sa, NULL), -EINVAL);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_size, 5);
	/* owner of the link itself (we are whoever we are: chown to ourselves) */
	sa = (struct fsops_setattr){ .valid = FSOPS_SET_UID | FSOPS_SET_GID, .uid = getuid(),
				     .gid = getgid(), .atime = { 0, UTIME_OMIT },
				     .mtime = { 0, UTIME_OMIT } };
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("abs"), 0, &sa, NULL), 0);

	/* on a regular file everything applies, in order */
	sa = (struct fsops_setattr){ .valid = FSOPS_SET_SIZE | FSOPS_SET_MODE, .size = 2,
				     .mode = 0604, .atime = { 0, UTIME_NOW },
				     .mtime = { 777, 5 } };
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("f"), 0, &sa, &st), 0);
	assert_int_equal(st.st_size, 2);
	assert_int_equal(st.st_mode & 07777, 0604);
	assert_int_equal(st.st_mtim.tv_sec, 777);
	assert_int_equal(st.st_mtim.tv_nsec, 5);
	/* size of a directory */
	sa.valid = FSOPS_SET_SIZE;
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("/"), 0, &sa, NULL), -EISDIR);
	/* via a handle */
	{
		uint64_t id;

		assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("f"), O_RDWR, 0, &id, NULL, NULL, NULL), 0);
		sa = (struct fsops_setattr){ .valid = FSOPS_SET_SIZE | FSOPS_SET_MODE, .size = 1,
					     .mode = 0600, .atime = { 0, UTIME_OMIT },
					     .mtime = { 0, UTIME_OMIT } };
		assert_int_equal(fsops_setattr(&fx->root, fx->h, NULL, 0, id, &sa, &st), 0);
		assert_int_equal(st.st_size, 1);
		assert_int_equal(st.st_mode & 07777, 0600);
		assert_int_equal(fsops_release(fx->h, id), 0);
		assert_int_equal(fsops_setattr(&fx->root, fx->h, NULL, 0, id, &sa, &st), -EBADF);
	}
}

static void test_create_modes(void **state)
{
	struct fx *fx = *state;
	struct stat st;

	assert_int_equal(fsops_mkdir(&fx->root, P("d"), 0755, &st, NULL), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(lstat_at(fx->rootdir, "d").st_mode & 07777, 0755);
	assert_int_equal(fsops_mkdir(&fx->root, P("d"), 0755, &st, NULL), -EEXIST);
	assert_int_equal(fsops_mkdir(&fx->root, P("abs/x"), 0755, &st, NULL), -EXDEV);
	assert_int_equal(fsops_mknod(&fx->root, P("d/fifo"), S_IFIFO | 0644, &st, NULL), 0);
	assert_true(S_ISFIFO(lstat_at(fx->rootdir, "d/fifo").st_mode));
	assert_int_equal(lstat_at(fx->rootdir, "d/fifo").st_mode & 07777, 0644);
	assert_int_equal(fsops_mknod(&fx->root, P("d/reg"), 0664, &st, NULL), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0664);
	assert_int_equal(fsops_mknod(&fx->root, P("d/sock"), S_IFSOCK | 0600, &st, NULL), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(fsops_mknod(&fx->root, P("d/chr"), S_IFCHR | 0600, &st, NULL), -EPERM);
	assert_int_equal(fsops_mknod(&fx->root, P("d/blk"), S_IFBLK | 0600, &st, NULL), -EPERM);
	assert_false(exists_at(fx->rootdir, "d/chr"));
	assert_int_equal(fsops_mknod(&fx->root, P("d/dir"), S_IFDIR | 0600, &st, NULL), -EINVAL);
	/* a FIFO opened over the wire does not hang the thread */
	{
		uint64_t id;

		assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("d/fifo"), O_RDONLY, 0, &id, NULL, NULL, NULL), 0);
		assert_int_equal(fsops_release(fx->h, id), 0);
	}
	assert_int_equal(fsops_rmdir(&fx->root, P("d"), NULL), -ENOTEMPTY);
	assert_int_equal(fsops_unlink(&fx->root, P("d/fifo"), NULL), 0);
	assert_int_equal(fsops_unlink(&fx->root, P("d/reg"), NULL), 0);
	assert_int_equal(fsops_unlink(&fx->root, P("d/sock"), NULL), 0);
	assert_int_equal(fsops_rmdir(&fx->root, P("d"), NULL), 0);
	assert_int_equal(fsops_rmdir(&fx->root, P(""), NULL), -EBUSY);
	/* With ret_st: the directory as its removal left it (nlink 0). */
	{
		struct stat before;
		char p[160];

		snprintf(p, sizeof(p), "%s/gone", fx->rootdir);
		assert_int_equal(mkdir(p, 0750), 0);
		assert_int_equal(stat(p, &before), 0);
		assert_int_equal(fsops_rmdir(&fx->root, P("gone"), &st), 1);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode, before.st_mode);
		assert_int_equal(st.st_nlink, 0);
		assert_int_equal(st.st_ino, before.st_ino);
		assert_int_equal(access(p, F_OK), -1);
		assert_int_equal(fsops_rmdir(&fx->root, P("gone"), &st), -ENOENT);
	}
	/* unlinking a symlink that points outside removes the link only */
	assert_int_equal(fsops_unlink(&fx->root, P("abs"), NULL), 0);
	assert_false(exists_at(fx->rootdir, "abs"));
}

static void test_links(void **state)
{
	struct fx *fx = *state;
	struct stat st;
	char *t;
	size_t n;

	assert_int_equal(fsops_symlink(&fx->root, P("../../etc/passwd"), P("s"), &st, NULL), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(fsops_readlink(&fx->root, P("s"), &t, &n), 0);
	assert_string_equal(t, "../../etc/passwd");
	assert_int_equal(n, 16);
	free(t);
	assert_int_equal(fsops_readlink(&fx->root, P("f"), &t, &n), -EINVAL);
	assert_int_equal(fsops_symlink(&fx->root, "", 0, P("s2"), &st, NULL), -ENOENT);
	assert_int_equal(fsops_symlink(&fx->root, "a\0b", 3, P("s2"), &st, NULL), -EINVAL);
	assert_int_equal(fsops_stat(&fx->root, P("s"), true, &st, NULL), -EXDEV);
	assert_int_equal(fsops_stat(&fx->root, P("s"), false, &st, NULL), 0);
	assert_true(S_ISLNK(st.st_mode));
	/* link(2) of a symlink links the symlink */
	assert_int_equal(fsops_link(&fx->root, P("abs"), P("abs_hard"), &st, NULL), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(fsops_link(&fx->root, P("f"), P("../outside/f"), &st, NULL), -EXDEV);
	/* Unlink of one name of a file that another keeps reports the file
	 * as the unlink left it (git's objects: link, unlink the temporary
	 * name); of the last name, nothing. */
	{
		struct stat before, after, left;
		char p2[160];

		assert_int_equal(fsops_link(&fx->root, P("f"), P("f2"), &before, NULL), 0);
		assert_int_equal(before.st_nlink, 2);
		usleep(20000); /* ctime ticks (the kernel's coarse clock) */
		memset(&after, 0, sizeof(after));
		assert_int_equal(fsops_unlink(&fx->root, P("f"), &after), 1);
		assert_int_equal(after.st_ino, before.st_ino);
		assert_int_equal(after.st_nlink, 1);
		snprintf(p2, sizeof(p2), "%s/f2", fx->rootdir);
		assert_int_equal(lstat(p2, &left), 0);
		assert_int_equal(after.st_ctim.tv_sec, left.st_ctim.tv_sec);
		assert_int_equal(after.st_ctim.tv_nsec, left.st_ctim.tv_nsec);
		assert_true(after.st_ctim.tv_sec != before.st_ctim.tv_sec ||
			    after.st_ctim.tv_nsec != before.st_ctim.tv_nsec);
		assert_int_equal(fsops_unlink(&fx->root, P("f2"), &after), 0);
		assert_false(exists_at(fx->rootdir, "f2"));
		assert_int_equal(fsops_unlink(&fx->root, P("f2"), &after), -ENOENT);
		/* A symlink with another name too (its names are nodes of
		 * their own in wsfs, which must hear of the nlink). */
		memset(&after, 0, sizeof(after));
		assert_int_equal(fsops_unlink(&fx->root, P("abs_hard"), &after), 1);
		assert_true(S_ISLNK(after.st_mode));
		assert_int_equal(after.st_nlink, 1);
		assert_int_equal(fsops_unlink(&fx->root, P("abs"), &after), 0);
		/* Names that escape are refused as before. */
		assert_int_equal(fsops_unlink(&fx->root, P("../outside/f"), &after), -EXDEV);
	}
	{
		struct statvfs v;

		assert_int_equal(fsops_statfs(&fx->root, P(""), &v), 0);
		assert_true(v.f_bsize > 0);
	}
}

static void test_xattr_nofollow(void **state)
{
	struct fx *fx = *state;
	char p[256], *list;
	void *v;
	size_t n;
	int r;

	snprintf(p, sizeof(p), "%s/secret", fx->outside);
	if (setxattr(p, "user.secret", "s", 1, 0) < 0) {
		skip(); /* no user xattrs on this file system */
		return;
	}
	assert_int_equal(fsops_setxattr(&fx->root, NULL, P("f"), 0, P("user.a"), "va", 2, XATTR_CREATE), 0);
	assert_int_equal(fsops_setxattr(&fx->root, NULL, P("f"), 0, P("user.a"), "v", 1, XATTR_CREATE),
			 -EEXIST);
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("f"), 0, P("user.a"), &v, &n), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(v, "va", 2);
	free(v);
	assert_int_equal(fsops_listxattr(&fx->root, NULL, P("f"), 0, &list, &n), 0);
	assert_int_equal(n, 7);
	assert_string_equal(list, "user.a");
	free(list);
	assert_int_equal(fsops_removexattr(&fx->root, NULL, P("f"), 0, P("user.a")), 0);
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("f"), 0, P("user.a"), &v, &n), -ENODATA);
	/* the symlink to the outside file is never followed */
	r = fsops_getxattr(&fx->root, NULL, P("abs"), 0, P("user.secret"), &v, &n);
	assert_true(r == -ENODATA || r == -EPERM || r == -EOPNOTSUPP);
	r = fsops_setxattr(&fx->root, NULL, P("abs"), 0, P("user.x"), "x", 1, 0);
	assert_true(r == -EPERM || r == -EOPNOTSUPP);
	assert_int_equal(getxattr(p, "user.x", NULL, 0), -1);
	assert_int_equal(fsops_removexattr(&fx->root, NULL, P("abs"), 0, P("user.secret")) < 0, 1);
	assert_int_equal(getxattr(p, "user.secret", NULL, 0), 1);
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("../outside/secret"), 0, P("user.secret"), &v, &n),
			 -EXDEV);
	/* limits */
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("f"), 0, "", 0, &v, &n), -ERANGE);
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("f"), 0, "u\0x", 3, &v, &n), -EINVAL);
	v = calloc(1, FSOPS_XATTR_MAX + 1);
	assert_non_null(v);
	assert_int_equal(fsops_setxattr(&fx->root, NULL, P("f"), 0, P("user.big"), v, FSOPS_XATTR_MAX + 1, 0),
			 -E2BIG);
	free(v);
	assert_int_equal(removexattr(p, "user.secret"), 0);
}

/* The xattr calls by handle act on the file opened, as fgetxattr(2) and
 * the like: once its name holds another file, and once it is unlinked. */
static void test_xattr_by_handle(void **state)
{
	struct fx *fx = *state;
	struct fsops_handles *h;
	uint64_t id;
	char *list;
	void *v;
	size_t n;
	int fd;

	assert_int_equal(fsops_handles_new(4, &h), 0);
	assert_int_equal(fsops_open(&fx->root, h, 0, P("xh"), O_RDWR | O_CREAT, 0600, &id, NULL,
				    NULL, NULL), 0);
	if (fsops_setxattr(&fx->root, h, NULL, 0, id, P("user.a"), "mine", 4, 0) == -EOPNOTSUPP) {
		fsops_handles_free(h);
		skip(); /* no user xattrs on this file system */
		return;
	}
	/* Another file renamed over the name: the handle's file is changed. */
	fd = openat(fx->root.fd, "xh.new", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(renameat(fx->root.fd, "xh.new", fx->root.fd, "xh"), 0);
	assert_int_equal(fsops_setxattr(&fx->root, h, P("xh"), id, P("user.b"), "b", 1, 0), 0);
	assert_int_equal(fsops_getxattr(&fx->root, NULL, P("xh"), 0, P("user.b"), &v, &n), -ENODATA);
	assert_int_equal(fsops_listxattr(&fx->root, NULL, P("xh"), 0, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	/* Unlinked: still its own. */
	assert_int_equal(unlinkat(fx->root.fd, "xh", 0), 0);
	assert_int_equal(fsops_getxattr(&fx->root, h, P("xh"), id, P("user.a"), &v, &n), 0);
	assert_int_equal(n, 4);
	assert_memory_equal(v, "mine", 4);
	free(v);
	assert_int_equal(fsops_listxattr(&fx->root, h, NULL, 0, id, &list, &n), 0);
	assert_int_equal(n, 14);
	assert_memory_equal(list, "user.a\0user.b\0", 14);
	free(list);
	assert_int_equal(fsops_removexattr(&fx->root, h, NULL, 0, id, P("user.a")), 0);
	assert_int_equal(fsops_getxattr(&fx->root, h, NULL, 0, id, P("user.a"), &v, &n), -ENODATA);
	assert_int_equal(fsops_release(h, id), 0);
	assert_int_equal(fsops_getxattr(&fx->root, h, NULL, 0, id, P("user.b"), &v, &n), -EBADF);
	fsops_handles_free(h);
}

/* Whether @dir's file system makes O_TMPFILE files (open(2)) and /proc
 * can name them later, as fsops_upload_begin() asks. */
static bool tmpfile_works(const char *dir)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		return false;
	close(fd);
	return access("/proc/self/fd", F_OK) == 0;
}

static void test_upload_atomic(void **state)
{
	struct fx *fx = *state;
	struct fsops_upload_opts o = { .mode = 0640 };
	struct fsops_upload *u;
	struct stat st;
	char path[512];
	char *s;

	write_at(fx->rootdir, "t", "old");
	/* abort: the old file stays, no temp file is left. Where the file
	 * system makes O_TMPFILE files, the upload has no name until its
	 * commit (a killed agentd leaves nothing). */
	assert_int_equal(fsops_upload_begin(&fx->root, P("t"), &o, &u), 0);
	assert_int_equal(count_temps(fx->rootdir), tmpfile_works(fx->rootdir) ? 0 : 1);
	assert_int_equal(fsops_upload_write(u, "new content", 11), 0);
	s = read_at(fx->rootdir, "t");
	assert_string_equal(s, "old"); /* nothing visible before commit */
	free(s);
	fsops_upload_abort(u);
	s = read_at(fx->rootdir, "t");
	assert_string_equal(s, "old");
	free(s);
	assert_int_equal(count_temps(fx->rootdir), 0);

	/* commit: the whole new file, with the mode asked for */
	assert_int_equal(fsops_upload_begin(&fx->root, P("t"), &o, &u), 0);
	assert_int_equal(fsops_upload_write(u, "new ", 4), 0);
	assert_int_equal(fsops_upload_write(u, "content", 7), 0);
	assert_int_equal(fsops_upload_size(u), 11);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_size, 11);
	assert_int_equal(st.st_mode & 07777, 0640);
	s = read_at(fx->rootdir, "t");
	assert_string_equal(s, "new content");
	free(s);
	assert_int_equal(count_temps(fx->rootdir), 0);

	/* keep_mode: the file there keeps its bits (cp over a file); a new
	 * one gets the mode asked for */
	snprintf(path, sizeof(path), "%s/t", fx->rootdir);
	assert_int_equal(chmod(path, 0604), 0);
	o.keep_mode = true;
	assert_int_equal(fsops_upload_begin(&fx->root, P("t"), &o, &u), 0);
	assert_int_equal(fsops_upload_write(u, "kept", 4), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0604);
	/* ... but never set-user-ID or set-group-ID: the new file is not the
	 * old one's owner's */
	assert_int_equal(chmod(path, 06755), 0);
	assert_int_equal(fsops_upload_begin(&fx->root, P("t"), &o, &u), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(fsops_upload_begin(&fx->root, P("t3"), &o, &u), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	snprintf(path, sizeof(path), "%s/t3", fx->rootdir);
	assert_int_equal(unlink(path), 0);
	o.keep_mode = false;

	/* mode 0: 0644 unless mode_set, then none at all */
	o.mode = 0;
	assert_int_equal(fsops_upload_begin(&fx->root, P("t4"), &o, &u), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	o.mode_set = true;
	assert_int_equal(fsops_upload_begin(&fx->root, P("t4"), &o, &u), 0);
	assert_int_equal(fsops_upload_write(u, "x", 1), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0);
	assert_int_equal(st.st_size, 1);
	snprintf(path, sizeof(path), "%s/t4", fx->rootdir);
	assert_int_equal(unlink(path), 0);
	o = (struct fsops_upload_opts){ .mode = 0640 };

	/* exclusive */
	o.exclusive = true;
	assert_int_equal(fsops_upload_begin(&fx->root, P("t"), &o, &u), -EEXIST);
	assert_int_equal(fsops_upload_begin(&fx->root, P("t2"), &o, &u), 0);
	write_at(fx->rootdir, "t2", "raced"); /* someone else got there first */
	assert_int_equal(fsops_upload_write(u, "mine", 4), 0);
	assert_int_equal(fsops_upload_commit(u, NULL), -EEXIST);
	s = read_at(fx->rootdir, "t2");
	assert_string_equal(s, "raced");
	free(s);
	assert_int_equal(count_temps(fx->rootdir), 0);

	/* mkdirs, escapes, directories */
	o = (struct fsops_upload_opts){ .mkdirs = true };
	assert_int_equal(fsops_upload_begin(&fx->root, P("p/q/r"), &o, &u), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(lstat_at(fx->rootdir, "p/q").st_mode & 07777, 0755);
	assert_int_equal(fsops_upload_begin(&fx->root, P("p"), &o, &u), -EISDIR);
	assert_int_equal(fsops_upload_begin(&fx->root, P("../outside/u"), &o, &u), -EXDEV);
	assert_int_equal(fsops_upload_begin(&fx->root, P("abs/u"), &o, &u), -EXDEV);
	o.mkdirs = false;
	assert_int_equal(fsops_upload_begin(&fx->root, P("nodir/u"), &o, &u), -ENOENT);
	o.size_hint = UINT64_MAX / 2;
	assert_int_equal(fsops_upload_begin(&fx->root, P("huge"), &o, &u), -ENOSPC);
	assert_int_equal(count_temps(fx->rootdir), 0);
	/* upload over the symlink "l" replaces the link, not its target */
	o = (struct fsops_upload_opts){ 0 };
	assert_int_equal(fsops_write_file(&fx->root, P("l"), "L", 1, &o), 0);
	assert_true(S_ISREG(lstat_at(fx->rootdir, "l").st_mode));
	s = read_at(fx->rootdir, "f");
	assert_string_equal(s, "hello");
	free(s);
}

/*
 * Zero blocks written as data (no hole for SEEK_HOLE to find): short runs
 * go as data, in full chunks (before: a chunk and a 1 MiB read per zero
 * block); a run of 64 KiB and more, or one the file ends with, is a hole,
 * returned with the data before it.
 */
static void test_download_zero_runs(void **state)
{
	struct fx *fx = *state;
	const size_t blk = 4096, mib = 1024 * 1024;
	struct fsops_upload_opts o = { 0 };
	struct fsops_upload *u;
	struct fsops_download *d;
	char *buf = malloc(FSOPS_CHUNK_MAX), *img = calloc(1, 2 * mib);
	uint64_t pos = 0, hole, holes[8];
	size_t calls = 0, nholes = 0, size = mib + 128 * 1024 + blk + 70 * 1024;
	struct stat st;
	ssize_t n;

	assert_non_null(buf);
	assert_non_null(img);
	/* 1 MiB of 'C' and zero blocks in turn, 128 KiB of zeros, a 'D'
	 * block, 70 KiB of zeros at the end. */
	for (size_t i = 0; i < mib; i += 2 * blk)
		memset(img + i, 'C', blk);
	memset(img + mib + 128 * 1024, 'D', blk);
	assert_int_equal(fsops_upload_begin(&fx->root, P("zeros"), &o, &u), 0);
	assert_int_equal(fsops_upload_write(u, img, size), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);

	assert_int_equal(fsops_download_begin(&fx->root, P("zeros"), 0, 0, &st, &d), 0);
	for (;;) {
		n = fsops_download_next(d, buf, FSOPS_CHUNK_MAX, &hole);
		assert_true(n >= 0);
		if (n == 0 && hole == 0)
			break;
		calls++;
		assert_memory_equal(buf, img + pos, (size_t)n);
		pos += (uint64_t)n;
		if (hole) {
			assert_true(nholes < 8);
			holes[nholes++] = pos;
			holes[nholes++] = hole;
			for (uint64_t i = 0; i < hole; i++)
				assert_int_equal(img[pos + i], 0);
		}
		pos += hole;
	}
	fsops_download_free(d);
	assert_int_equal(pos, size);
	/* The 1 MiB, the 128 KiB hole, the 'D' block with the 70 KiB one. */
	assert_int_equal(calls, 3);
	assert_int_equal(nholes, 4);
	assert_int_equal(holes[0], mib);
	assert_int_equal(holes[1], 128 * 1024);
	assert_int_equal(holes[2], mib + 128 * 1024 + blk);
	assert_int_equal(holes[3], 70 * 1024);
	free(img);
	free(buf);
}

/* Upload a sparse file, then download it: holes come back as hole counts. */
static void test_sparse_round_trip(void **state)
{
	struct fx *fx = *state;
	const uint64_t mib = 1024 * 1024, size = 3 * mib + 100;
	struct fsops_upload_opts o = { 0 };
	struct fsops_upload *u;
	struct fsops_download *d;
	char block[4096], *buf = malloc(FSOPS_CHUNK_MAX);
	uint64_t pos = 0, data_bytes = 0, hole_bytes = 0, hole;
	struct stat st;
	ssize_t n;

	assert_non_null(buf);
	memset(block, 'A', sizeof(block));
	assert_int_equal(fsops_upload_begin(&fx->root, P("sparse"), &o, &u), 0);
	assert_int_equal(fsops_upload_write(u, block, sizeof(block)), 0);
	assert_int_equal(fsops_upload_hole(u, mib - sizeof(block)), 0);
	memset(block, 'B', sizeof(block));
	assert_int_equal(fsops_upload_write(u, block, sizeof(block)), 0);
	assert_int_equal(fsops_upload_hole(u, size - mib - sizeof(block)), 0);
	assert_int_equal(fsops_upload_commit(u, &st), 0);
	assert_int_equal(st.st_size, size);
	assert_true((uint64_t)st.st_blocks * 512 < mib); /* it really is sparse */

	assert_int_equal(fsops_download_begin(&fx->root, P("sparse"), 0, 0, &st, &d), 0);
	assert_int_equal(st.st_size, size);
	for (;;) {
		n = fsops_download_next(d, buf, FSOPS_CHUNK_MAX, &hole);
		assert_true(n >= 0);
		if (n == 0 && hole == 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			char want = pos + i < 4096 ? 'A' : (pos + i >= mib && pos + i < mib + 4096) ? 'B' : 0;

			if (buf[i] != want)
				fail_msg("byte %llu: %d, want %d", (unsigned long long)(pos + i),
					 buf[i], want);
		}
		pos += (uint64_t)n + hole;
		data_bytes += (uint64_t)n;
		hole_bytes += hole;
	}
	fsops_download_free(d);
	assert_int_equal(pos, size);
	assert_true(hole_bytes >= 2 * mib); /* the holes were not sent as zeros */
	assert_true(data_bytes <= mib);

	/* a range in the middle of the second block */
	assert_int_equal(fsops_download_begin(&fx->root, P("sparse"), mib + 10, 20, NULL, &d), 0);
	n = fsops_download_next(d, buf, FSOPS_CHUNK_MAX, &hole);
	assert_int_equal(n, 20);
	assert_int_equal(hole, 0);
	assert_int_equal(buf[0], 'B');
	assert_int_equal(fsops_download_next(d, buf, FSOPS_CHUNK_MAX, &hole), 0);
	assert_int_equal(hole, 0);
	fsops_download_free(d);
	/* small buffers: the 4 KiB block comes in pieces */
	assert_int_equal(fsops_download_begin(&fx->root, P("sparse"), 0, 0, NULL, &d), 0);
	assert_int_equal(fsops_download_next(d, buf, 1000, &hole), 1000);
	assert_int_equal(hole, 0);
	fsops_download_free(d);

	assert_int_equal(fsops_download_begin(&fx->root, P(""), 0, 0, NULL, &d), -EISDIR);
	assert_int_equal(fsops_download_begin(&fx->root, P("abs"), 0, 0, NULL, &d), -EXDEV);
	free(buf);
}

static void test_read_file(void **state)
{
	struct fx *fx = *state;
	char *buf;
	size_t n;

	assert_int_equal(fsops_read_file(&fx->root, P("f"), 100, &buf, &n), 0);
	assert_int_equal(n, 5);
	assert_string_equal(buf, "hello");
	free(buf);
	assert_int_equal(fsops_read_file(&fx->root, P("l"), 5, &buf, &n), 0);
	free(buf);
	assert_int_equal(fsops_read_file(&fx->root, P("f"), 4, &buf, &n), -EFBIG);
	assert_int_equal(fsops_read_file(&fx->root, P("/"), 100, &buf, &n), -EISDIR);
	assert_int_equal(fsops_read_file(&fx->root, P("nope"), 100, &buf, &n), -ENOENT);
	assert_int_equal(fsops_read_file(&fx->root, P("abs"), 100, &buf, &n), -EXDEV);
	assert_int_equal(fsops_write_file(&fx->root, P("e"), "", 0, NULL), 0);
	assert_int_equal(fsops_read_file(&fx->root, P("e"), 100, &buf, &n), 0);
	assert_int_equal(n, 0);
	free(buf);
}

static void test_readdir_paging(void **state)
{
	enum { N = 1000 };
	struct fx *fx = *state;
	char p[300];
	unsigned char seen[N] = { 0 };
	int64_t off = 0;
	int pages = 0;
	bool eof = false;

	assert_int_equal(mkdir(strcat(strcpy(p, fx->rootdir), "/many"), 0755), 0);
	for (int i = 0; i < N; i++) {
		char rel[32];

		snprintf(rel, sizeof(rel), "many/e%04d", i);
		write_at(fx->rootdir, rel, "");
	}
	while (!eof) {
		struct fsops_dirent *ents;
		size_t n;

		assert_int_equal(fsops_readdir(&fx->root, P("many"), 0, off, 37,
		                               &ents, &n, &eof, NULL), 0);
		assert_true(n <= 37);
		assert_true(eof || n == 37);
		for (size_t i = 0; i < n; i++) {
			int k;

			assert_int_equal(sscanf(ents[i].name, "e%04d", &k), 1);
			assert_true(k >= 0 && k < N);
			seen[k]++;
			assert_true(ents[i].has_attr);
			assert_true(S_ISREG(ents[i].st.st_mode));
			assert_int_equal(ents[i].name_len, 5);
		}
		if (n)
			off = ents[n - 1].next_offset;
		fsops_dirents_free(ents, n);
		assert_true(++pages < 100);
	}
	for (int i = 0; i < N; i++)
		if (seen[i] != 1)
			fail_msg("entry e%04d seen %d times", i, seen[i]);
	assert_int_equal(pages, (N + 36) / 37);

	/* default page size; "." and ".." never appear; a file is ENOTDIR */
	{
		struct fsops_dirent *ents;
		size_t n;

		assert_int_equal(fsops_readdir(&fx->root, P(""), 0, 0, 0,
		                               &ents, &n, &eof, NULL), 0);
		assert_true(eof);
		for (size_t i = 0; i < n; i++) {
			assert_string_not_equal(ents[i].name, ".");
			assert_string_not_equal(ents[i].name, "..");
		}
		assert_int_equal(n, 4); /* f abs l many */
		fsops_dirents_free(ents, n);
		assert_int_equal(fsops_readdir(&fx->root, P("f"), 0, 0, 0,
		                               &ents, &n, &eof, NULL), -ENOTDIR);
		assert_int_equal(fsops_readdir(&fx->root, P("abs"), 0, 0, 0,
		                               &ents, &n, &eof, NULL), -EXDEV);
		assert_int_equal(fsops_readdir(&fx->root, P(""), 0, -1, 0,
		                               &ents, &n, &eof, NULL), -EINVAL);
		/* a symlink to a directory inside: followed, unless O_NOFOLLOW */
		assert_int_equal(symlink("many", strcat(strcpy(p, fx->rootdir), "/tomany")), 0);
		assert_int_equal(fsops_readdir(&fx->root, P("tomany"), 0, 0, 0,
		                               &ents, &n, &eof, NULL), 0);
		assert_int_equal(n, N);
		fsops_dirents_free(ents, n);
		assert_int_equal(fsops_readdir(&fx->root, P("tomany"), O_NOFOLLOW, 0, 0, &ents, &n, &eof,
					       NULL), -ENOTDIR);
		assert_int_equal(unlink(p), 0);
	}

	/* the directory's own attributes, taken after the listing: an atime
	 * older than the mtime is one the listing may set (relatime) */
	{
		const struct timespec old[2] = { { .tv_sec = 946684800 }, { .tv_nsec = UTIME_OMIT } };
		struct fsops_dirent *ents, self = { .has_attr = false };
		struct stat after;
		size_t n;
		int dfd = open(fx->rootdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		assert_true(dfd >= 0);
		assert_int_equal(utimensat(dfd, "many", old, 0), 0);
		assert_int_equal(fsops_readdir(&fx->root, P("many"), 0, 0, 0,
		                               &ents, &n, &eof, &self), 0);
		fsops_dirents_free(ents, n);
		assert_int_equal(fstatat(dfd, "many", &after, 0), 0);
		close(dfd);
		assert_true(self.has_attr);
		assert_null(self.name);
		assert_true(S_ISDIR(self.st.st_mode));
		assert_int_equal(self.st.st_ino, after.st_ino);
		assert_int_equal(self.st.st_atim.tv_sec, after.st_atim.tv_sec);
		assert_int_equal(self.st.st_atim.tv_nsec, after.st_atim.tv_nsec);
		assert_int_equal(self.st.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
		assert_int_equal(fsops_readdir(&fx->root, P("f"), 0, 0, 0,
		                               &ents, &n, &eof, &self), -ENOTDIR);
	}
}

/* Upload with follow: through a symlink (and a chain of them) the file it
 * leads to is replaced and the links stay, as cp(1) writes through one; a
 * dangling link, an absolute one, one leading out and a loop fail. */
static void upload_to(struct fx *fx, const char *path, const char *data, int want)
{
	struct fsops_upload_opts o = { .mode = 0600, .follow = true, .keep_mode = true };
	struct fsops_upload *u;
	int r;

	r = fsops_upload_begin(&fx->root, path, strlen(path), &o, &u);
	if (r == 0) {
		assert_int_equal(fsops_upload_write(u, data, strlen(data)), 0);
		r = fsops_upload_commit(u, NULL);
	}
	assert_int_equal(r, want);
}

static void test_upload_follow(void **state)
{
	struct fx *fx = *state;
	char p[512], l[512], *s;
	struct stat st;

#define AT(rel) (snprintf(p, sizeof(p), "%s/%s", fx->rootdir, rel), p)
	assert_int_equal(mkdir(AT("d"), 0755), 0);
	write_at(fx->rootdir, "d/target", "old");
	assert_int_equal(chmod(AT("d/target"), 0640), 0);
	assert_int_equal(symlink("d/target", AT("ln")), 0);   /* relative to the root */
	assert_int_equal(symlink("../ln", AT("d/ln2")), 0);   /* a chain, via .. */
	upload_to(fx, "d/ln2", "new", 0);
	s = read_at(fx->rootdir, "d/target");
	assert_string_equal(s, "new");
	free(s);
	assert_int_equal(lstat(AT("ln"), &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(lstat(AT("d/ln2"), &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(stat(AT("d/target"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640); /* keep_mode, through the links */
	assert_int_equal(count_temps(fx->rootdir), 0);

	assert_int_equal(symlink("nowhere", AT("dangling")), 0);
	upload_to(fx, "dangling", "x", -ENOENT);
	assert_int_equal(lstat(AT("nowhere"), &st), -1);
	snprintf(l, sizeof(l), "%s/f", fx->rootdir);
	assert_int_equal(symlink(l, AT("absolute")), 0);
	upload_to(fx, "absolute", "x", -EXDEV);
	assert_int_equal(symlink("../../etc/passwd", AT("d/out")), 0);
	upload_to(fx, "d/out", "x", -EXDEV);
	assert_int_equal(symlink("loop", AT("loop")), 0);
	upload_to(fx, "loop", "x", -ELOOP);
	/* Each left as it was. */
	s = read_at(fx->rootdir, "f");
	assert_string_equal(s, "hello");
	free(s);
	assert_int_equal(lstat(AT("loop"), &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(count_temps(fx->rootdir), 0);
	/* A new name is made as without follow. */
	upload_to(fx, "d/fresh", "fresh", 0);
	assert_int_equal(stat(AT("d/fresh"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
#undef AT
}

/*
 * fsops_birth() gives what fstatat(2) gives, and the birth time and
 * generation (struct fsops_ident) tell a file from the next one the file
 * system makes with its freed inode number.
 */
static void test_birth(void **state)
{
	struct fx *fx = *state;
	struct stat want, st, st2;
	struct fsops_ident id = { -1, 1 }, id2, id3;
	struct resolve_root saved;
	int64_t b = -1;
	int dfd = fx->root.fd;

	assert_int_equal(fstatat(dfd, "f", &want, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(fsops_birth(dfd, "f", AT_SYMLINK_NOFOLLOW, &st, &b), 0);
	assert_int_equal(st.st_dev, want.st_dev);
	assert_int_equal(st.st_ino, want.st_ino);
	assert_int_equal(st.st_mode, want.st_mode);
	assert_int_equal(st.st_nlink, want.st_nlink);
	assert_int_equal(st.st_uid, want.st_uid);
	assert_int_equal(st.st_size, want.st_size);
	assert_int_equal(st.st_blocks, want.st_blocks);
	assert_int_equal(st.st_blksize, want.st_blksize);
	assert_int_equal(st.st_mtim.tv_sec, want.st_mtim.tv_sec);
	assert_int_equal(st.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
	assert_int_equal(st.st_ctim.tv_nsec, want.st_ctim.tv_nsec);
	/* A symlink, not followed; through fsops_stat() too. */
	assert_int_equal(fsops_stat(&fx->root, P("l"), false, &st2, &id2), 0);
	assert_true(S_ISLNK(st2.st_mode));
	assert_int_equal(fsops_birth(dfd, "nope", 0, &st2, &b), -ENOENT);
	/* A file made after "f" is freed (often on its inode number). */
	assert_int_equal(fsops_stat(&fx->root, P("f"), false, &st, &id), 0);
	assert_int_equal(id.btime_ns, b);
	assert_int_equal(unlinkat(dfd, "f", 0), 0);
	write_at(fx->rootdir, "g", "x");
	assert_int_equal(fsops_stat(&fx->root, P("g"), false, &st2, &id3), 0);
	if (id.btime_ns == 0) {
		assert_int_equal(id3.btime_ns, 0); /* a file system without birth times */
	} else {
		assert_true(id.btime_ns > 1000000000LL * 1600000000LL); /* ns: after 2020 */
		assert_true(id3.btime_ns > id.btime_ns || st2.st_ino != st.st_ino);
		assert_true(id3.btime_ns != id.btime_ns);
	}
	if (fx->root.handles) {
		assert_true(id.generation != 0);
		assert_true(id3.generation != 0 && id3.generation != id.generation);
	} else {
		assert_int_equal(id3.generation, 0);
	}
	/* A root on overlayfs (copy-up: a new birth and handle under the old
	 * number) sends neither: fsops_stat() and ReadDir give zeros. */
	assert_true(fx->root.idents); /* not overlayfs here */
	saved = fx->root;
	fx->root.idents = false;
	fx->root.handles = false;
	assert_int_equal(fsops_stat(&fx->root, P("g"), false, &st, &id), 0);
	assert_int_equal(id.btime_ns, 0);
	assert_int_equal(id.generation, 0);
	assert_int_equal(st.st_ino, st2.st_ino);
	{
		struct fsops_dirent *ents = NULL;
		size_t n = 0;
		bool eof = false;

		assert_int_equal(fsops_readdir(&fx->root, P(""), 0, 0, 0,
		                               &ents, &n, &eof, NULL), 0);
		assert_true(n > 0);
		for (size_t i = 0; i < n; i++) {
			assert_true(ents[i].has_attr);
			assert_int_equal(ents[i].ident.btime_ns, 0);
			assert_int_equal(ents[i].ident.generation, 0);
		}
		fsops_dirents_free(ents, n);
		fx->root = saved;
		assert_int_equal(fsops_readdir(&fx->root, P(""), 0, 0, 0,
		                               &ents, &n, &eof, NULL), 0);
		for (size_t i = 0; i < n; i++)
			if (strcmp(ents[i].name, "g") == 0) {
				assert_int_equal(ents[i].ident.btime_ns, id3.btime_ns);
				assert_true(ents[i].ident.generation == id3.generation);
			}
		fsops_dirents_free(ents, n);
	}
}

/*
 * Files made one after another on a freed inode number, with no pause, each
 * have a generation of their own, also those born within one tick of the
 * file clock (the same birth time: seen here by a statx(2) that asks for no
 * ctime, since one that does makes the kernel's next timestamp a fine one,
 * multigrain timestamps); one file keeps its generation across a rename and
 * through a handle (fsops_fident()).
 */
static void test_generation(void **state)
{
	struct fx *fx = *state;
	struct fsops_ident id, prev = { 0 };
	struct stat st;
	uint64_t prev_ino = 0, h;
	int reused = 0, same_birth = 0;

	if (!fx->root.handles)
		skip(); /* a file system without file handles */
	for (int i = 0; i < 300; i++) {
		struct statx sx;

		write_at(fx->rootdir, "v", "x");
		assert_int_equal(statx(fx->root.fd, "v", AT_SYMLINK_NOFOLLOW,
				       STATX_INO | STATX_BTIME, &sx),
				 0);
		id.btime_ns = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_sec * 1000000000LL +
								     sx.stx_btime.tv_nsec
							   : 0;
		id.generation = fsops_generation(fx->root.fd, "v", AT_SYMLINK_NOFOLLOW);
		st.st_ino = sx.stx_ino;
		assert_true(id.generation != 0);
		if (st.st_ino == prev_ino) {
			reused++;
			same_birth += id.btime_ns == prev.btime_ns;
			assert_true(id.generation != prev.generation);
		}
		prev = id;
		prev_ino = st.st_ino;
		assert_int_equal(unlinkat(fx->root.fd, "v", 0), 0);
	}
	print_message("# %d of 299 files on a reused number, %d with its birth time\n", reused,
		      same_birth);
	write_at(fx->rootdir, "v", "x");
	assert_int_equal(fsops_stat(&fx->root, P("v"), false, &st, &prev), 0);
	assert_int_equal(fsops_rename(&fx->root, P("v"), P("w"), 0), 0);
	assert_int_equal(fsops_stat(&fx->root, P("w"), false, &st, &id), 0);
	assert_true(id.generation == prev.generation);
	assert_int_equal(id.btime_ns, prev.btime_ns);
	assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("w"), O_RDONLY, 0, &h, &st, NULL, NULL),
			 0);
	fsops_fident(&fx->root, fx->h, h, &id);
	assert_true(id.generation == prev.generation);
	assert_int_equal(id.btime_ns, prev.btime_ns);
	assert_int_equal(fsops_release(fx->h, h), 0);
	fsops_fident(&fx->root, fx->h, h, &id); /* gone: zeros */
	assert_true(id.generation == 0 && id.btime_ns == 0);
}

/* mkdir, mknod, symlink, link and open give the new name's birth time and
 * generation, as a Stat of it would (none where root->idents is false). */
static void test_birth_made(void **state)
{
	struct fx *fx = *state;
	struct stat st;
	struct fsops_ident b, want;

#define SAME(x, y) assert_true((x).btime_ns == (y).btime_ns && (x).generation == (y).generation)
	assert_int_equal(fsops_mkdir(&fx->root, P("md"), 0755, &st, &b), 0);
	assert_int_equal(fsops_stat(&fx->root, P("md"), false, &st, &want), 0);
	SAME(b, want);
	assert_int_equal(fsops_mknod(&fx->root, P("mf"), S_IFIFO | 0600, &st, &b), 0);
	assert_int_equal(fsops_stat(&fx->root, P("mf"), false, &st, &want), 0);
	SAME(b, want);
	assert_int_equal(fsops_symlink(&fx->root, P("f"), P("ms"), &st, &b), 0);
	assert_int_equal(fsops_stat(&fx->root, P("ms"), false, &st, &want), 0);
	SAME(b, want);
	assert_int_equal(fsops_link(&fx->root, P("f"), P("ml"), &st, &b), 0);
	assert_int_equal(fsops_stat(&fx->root, P("f"), false, &st, &want), 0);
	SAME(b, want); /* the linked file's own */
	/* open(2), creating or not, from the stat it makes anyway */
	{
		uint64_t id;
		bool created = false;

		b = (struct fsops_ident){ -1, 1 };
		assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("mo"), O_RDWR | O_CREAT, 0600,
					    &id, &st, &b, &created),
				 0);
		assert_true(created);
		assert_int_equal(fsops_stat(&fx->root, P("mo"), false, &st, &want), 0);
		SAME(b, want);
		assert_int_equal(fsops_release(fx->h, id), 0);
		b = (struct fsops_ident){ -1, 1 };
		assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("f"), O_RDONLY, 0, &id, &st, &b,
					    NULL),
				 0);
		assert_int_equal(fsops_stat(&fx->root, P("f"), false, &st, &want), 0);
		SAME(b, want);
		assert_int_equal(fsops_release(fx->h, id), 0);
	}
	if (want.btime_ns != 0 || want.generation != 0) {
		fx->root.idents = false;
		fx->root.handles = false;
		assert_int_equal(fsops_mkdir(&fx->root, P("md2"), 0755, &st, &b), 0);
		assert_true(b.btime_ns == 0 && b.generation == 0);
	}
#undef SAME
}

/*
 * Under a seccomp filter that refuses statx(2) with EPERM (older container
 * runtimes' default profiles), fsops_birth() falls back to fstatat(2), birth
 * unknown: in a child, which the filter binds for good.
 */
static void test_birth_no_statx(void **state)
{
	struct fx *fx = *state;
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_statx, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(filter) / sizeof(filter[0]), filter };
	struct stat want;
	int status;
	pid_t pid;

	assert_int_equal(fstatat(fx->root.fd, "f", &want, AT_SYMLINK_NOFOLLOW), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct stat st;
		struct statx sx;
		int64_t b = -1;

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
			_exit(2);
		if (statx(fx->root.fd, "f", 0, STATX_BASIC_STATS, &sx) == 0 || errno != EPERM)
			_exit(3); /* the filter is not in force */
		if (fsops_birth(fx->root.fd, "f", AT_SYMLINK_NOFOLLOW, &st, &b) != 0)
			_exit(4);
		if (b != 0 || st.st_ino != want.st_ino || st.st_size != want.st_size ||
		    st.st_mtim.tv_nsec != want.st_mtim.tv_nsec)
			_exit(5);
		if (fsops_birth(fx->root.fd, "nope", 0, &st, &b) != -ENOENT)
			_exit(6);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* Each test twice: "<name> openat2" and "<name> walk". */
#define BOTH(t)                                                                   \
	{ #t " openat2", t, setup, teardown, (void *)&use_openat2 },                 \
	{                                                                            \
		#t " walk", t, setup, teardown, (void *)&use_walk                    \
	}

/* A writer without CAP_FSETID (FUSE_HANDLE_KILLPRIV_V2): S_ISUID goes,
 * S_ISGID with S_IXGRP goes, S_ISGID alone and the rest stay; by handle,
 * and after a truncate by path or by handle. */
static void test_kill_suidgid(void **state)
{
	struct fx *fx = *state;
	struct fsops_setattr sa = { .valid = FSOPS_SET_SIZE, .size = 2, .kill_suidgid = true,
				    .atime = { 0, UTIME_OMIT }, .mtime = { 0, UTIME_OMIT } };
	char p[300];
	struct stat st;
	uint64_t id;

	assert_int_equal(wsb_suidgid_kill_bits(S_IFREG | 06755), 06000);
	assert_int_equal(wsb_suidgid_kill_bits(S_IFREG | 04700), 04000);
	assert_int_equal(wsb_suidgid_kill_bits(S_IFREG | 02644), 0);
	assert_int_equal(wsb_suidgid_kill_bits(S_IFREG | 03675), 02000);
	assert_int_equal(wsb_suidgid_kill_bits(S_IFDIR | 06755), 0);

	snprintf(p, sizeof(p), "%s/f", fx->rootdir);
	assert_int_equal(chmod(p, 07755), 0);
	assert_int_equal(fsops_open(&fx->root, fx->h, 0, P("f"), O_WRONLY, 0, &id, NULL, NULL,
				    NULL), 0);
	assert_int_equal(fsops_kill_suidgid(fx->h, id), 1);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_mode & 07777, 01755);
	assert_int_equal(fsops_kill_suidgid(fx->h, id), 0); /* none left */
	assert_int_equal(fsops_kill_suidgid(fx->h, id + 1000), -EBADF);
	/* after a truncate through the handle */
	assert_int_equal(chmod(p, 06711), 0);
	assert_int_equal(fsops_setattr(&fx->root, fx->h, NULL, 0, id, &sa, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0711);
	assert_int_equal(st.st_size, 2);
	assert_int_equal(fsops_release(fx->h, id), 0);
	/* by path; S_ISGID without S_IXGRP stays */
	assert_int_equal(chmod(p, 06701), 0);
	sa.size = 1;
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("f"), 0, &sa, &st), 0);
	assert_int_equal(st.st_mode & 07777, 02701);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_size, 1);
	/* with nothing else to set (the kernel's own request), by path */
	assert_int_equal(chmod(p, 06755), 0);
	sa.valid = 0;
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("f"), 0, &sa, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(lstat_at(fx->rootdir, "f").st_size, 1);
	/* without the flag, nothing goes */
	assert_int_equal(chmod(p, 06755), 0);
	sa.valid = FSOPS_SET_SIZE;
	sa.kill_suidgid = false;
	assert_int_equal(fsops_setattr(&fx->root, fx->h, P("f"), 0, &sa, &st), 0);
	assert_int_equal(st.st_mode & 07777, 06755);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_handles),
		BOTH(test_unowned_half),
		BOTH(test_release_owner),
		BOTH(test_reopen),
		BOTH(test_pin),
		BOTH(test_rename_keep),
		BOTH(test_handles_concurrent_release),
		BOTH(test_rename_flags),
		BOTH(test_trailing_slash),
		BOTH(test_setattr_symlink_nofollow),
		BOTH(test_kill_suidgid),
		BOTH(test_create_modes),
		BOTH(test_links),
		BOTH(test_xattr_nofollow),
		BOTH(test_xattr_by_handle),
		BOTH(test_upload_atomic),
		BOTH(test_upload_follow),
		BOTH(test_sparse_round_trip),
		BOTH(test_download_zero_runs),
		BOTH(test_read_file),
		BOTH(test_readdir_paging),
		BOTH(test_birth),
		BOTH(test_birth_no_statx),
		BOTH(test_birth_made),
		BOTH(test_generation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
