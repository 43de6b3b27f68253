/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/resolve.c: every way a path could leave the workspace
 * root, each run twice, with openat2(2) and with the portable walk, and the
 * paths inside the root that must keep working. Each test gets a fresh
 * mkdtemp(3) tree under /tmp:
 *
 *     T/outside/secret          a file that must never be reached
 *     T/root/                   the workspace root
 *         f  a/  a/f  a/b/  b/
 *         abs -> T/outside/secret       up -> ../outside/secret
 *         chain1 -> chain2 -> up        outdir -> ../outside
 *         a/up2 -> ../../outside        dangle -> ../outside/created
 *         dangle_abs -> T/outside/created_abs
 *         loop1 <-> loop2               l0 -> l1 -> ... -> l41 -> f
 *         inlink -> a/f   indir -> a   a/rel -> ../f   dangle_in -> newtarget
 *
 * After every test the outside directory must still hold only "secret".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "resolve.h"

struct fx {
	char top[64];
	char rootdir[96];
	char outside[96];
	struct resolve_root root;
	bool no_openat2; /* the openat2 run of a test, where there is none */
};

static const bool use_openat2 = true;
static const bool use_walk = false;

static void mk(const char *top, const char *rel, bool dir)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", top, rel);
	if (dir) {
		assert_int_equal(mkdir(p, 0755), 0);
		return;
	}
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, rel, strlen(rel)), (ssize_t)strlen(rel));
	close(fd);
}

static void ln(const char *top, const char *target, const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", top, rel);
	assert_int_equal(symlink(target, p), 0);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	const void *wanted = *state;
	char t[256];

	assert_non_null(fx);
	strcpy(fx->top, "/tmp/wsb-test-resolve.XXXXXX");
	assert_non_null(mkdtemp(fx->top));
	snprintf(fx->rootdir, sizeof(fx->rootdir), "%s/root", fx->top);
	snprintf(fx->outside, sizeof(fx->outside), "%s/outside", fx->top);
	mk(fx->top, "outside", true);
	mk(fx->top, "outside/secret", false);
	mk(fx->top, "root", true);
	mk(fx->rootdir, "f", false);
	mk(fx->rootdir, "a", true);
	mk(fx->rootdir, "a/f", false);
	mk(fx->rootdir, "a/b", true);
	mk(fx->rootdir, "b", true);
	snprintf(t, sizeof(t), "%s/secret", fx->outside);
	ln(fx->rootdir, t, "abs");
	ln(fx->rootdir, "../outside/secret", "up");
	ln(fx->rootdir, "chain2", "chain1");
	ln(fx->rootdir, "up", "chain2");
	ln(fx->rootdir, "../outside", "outdir");
	ln(fx->rootdir, "../../outside", "a/up2");
	ln(fx->rootdir, "../outside/created", "dangle");
	snprintf(t, sizeof(t), "%s/created_abs", fx->outside);
	ln(fx->rootdir, t, "dangle_abs");
	ln(fx->rootdir, "loop2", "loop1");
	ln(fx->rootdir, "loop1", "loop2");
	ln(fx->rootdir, "a/f", "inlink");
	ln(fx->rootdir, "a", "indir");
	ln(fx->rootdir, "../f", "a/rel");
	ln(fx->rootdir, "newtarget", "dangle_in");
	for (int i = 0; i <= 41; i++) {
		char name[16], target[16];

		snprintf(name, sizeof(name), "l%d", i);
		if (i == 41)
			snprintf(target, sizeof(target), "f");
		else
			snprintf(target, sizeof(target), "l%d", i + 1);
		ln(fx->rootdir, target, name);
	}
	assert_int_equal(resolve_root_open(fx->rootdir, &fx->root), 0);
	/* the prestate says which mechanism this run uses */
	*state = fx;
	if (wanted == &use_walk)
		fx->root.use_openat2 = false;
	else if (!fx->root.use_openat2)
		fx->no_openat2 = true; /* kernel < 5.6, or valgrind 3.19: skip */
	return 0;
}

/* The outside directory holds exactly "secret", with its original content. */
static void assert_outside_untouched(struct fx *fx)
{
	DIR *d = opendir(fx->outside);
	struct dirent *de;
	char p[256], buf[64];
	int n = 0, fd;
	ssize_t got;

	assert_non_null(d);
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		assert_string_equal(de->d_name, "secret");
		n++;
	}
	closedir(d);
	assert_int_equal(n, 1);
	snprintf(p, sizeof(p), "%s/secret", fx->outside);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	got = read(fd, buf, sizeof(buf));
	close(fd);
	assert_int_equal(got, (ssize_t)strlen("outside/secret"));
	assert_memory_equal(buf, "outside/secret", (size_t)got);
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[128];

	assert_outside_untouched(fx);
	close(fx->root.fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->top);
	assert_int_equal(system(cmd), 0);
	free(fx);
	return 0;
}

/* The fixture; skips the test when it is the openat2 run and there is none. */
static struct fx *get_fx(void **state)
{
	struct fx *fx = *state;

	if (fx->no_openat2)
		skip();
	return fx;
}

/* resolve_open of a C string; returns 0 (fd closed) or -errno. */
static int ropen(struct fx *fx, const char *path, int flags)
{
	int fd = resolve_open(&fx->root, path, strlen(path), flags, 0644);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return fd;
}

static int rparent(struct fx *fx, const char *path, char **name)
{
	int dirfd, r;

	r = resolve_parent(&fx->root, path, strlen(path), &dirfd, name);
	if (r == 0)
		close(dirfd);
	return r;
}

/* The inode @p path resolves to (opened O_PATH, final symlink followed). */
static ino_t rino(struct fx *fx, const char *path, int flags)
{
	struct stat st;
	int fd = resolve_open(&fx->root, path, strlen(path), O_PATH | flags, 0);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	return st.st_ino;
}

static ino_t real_ino(struct fx *fx, const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", fx->rootdir, rel);
	assert_int_equal(lstat(p, &st), 0);
	return st.st_ino;
}

static bool exists_in(const char *dir, const char *name)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0;
}

static void test_dotdot_above_root(void **state)
{
	struct fx *fx = get_fx(state);
	char *name = NULL;

	assert_int_equal(ropen(fx, "..", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "../outside/secret", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "/../outside/secret", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "a/../../outside/secret", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "a/b/../../../outside", O_PATH), -EXDEV);
	assert_int_equal(ropen(fx, "a/../../root/f", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "../outside/new", O_WRONLY | O_CREAT), -EXDEV);
	assert_int_equal(rparent(fx, "../outside/new", &name), -EXDEV);
	assert_int_equal(rparent(fx, "a/../../x", &name), -EXDEV);
	assert_int_equal(rparent(fx, "..", &name), -EXDEV);
	assert_null(name);
}

static void test_absolute_symlink(void **state)
{
	struct fx *fx = get_fx(state);

	assert_int_equal(ropen(fx, "abs", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "abs", O_PATH), -EXDEV);
	assert_int_equal(ropen(fx, "abs", O_WRONLY | O_TRUNC), -EXDEV);
	/* not following it is fine: that is the link itself */
	assert_int_equal(ropen(fx, "abs", O_PATH | O_NOFOLLOW), 0);
	assert_int_equal(ropen(fx, "abs", O_RDONLY | O_NOFOLLOW), -ELOOP);
}

static void test_relative_symlink_out(void **state)
{
	struct fx *fx = get_fx(state);

	assert_int_equal(ropen(fx, "up", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "a/up2", O_PATH), -EXDEV);
	assert_int_equal(ropen(fx, "a/up2/secret", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "up", O_WRONLY | O_CREAT | O_TRUNC), -EXDEV);
}

static void test_symlink_chain(void **state)
{
	struct fx *fx = get_fx(state);

	assert_int_equal(ropen(fx, "chain1", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "chain2", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "chain1", O_WRONLY | O_APPEND), -EXDEV);
}

static void test_symlink_dir_outside_intermediate(void **state)
{
	struct fx *fx = get_fx(state);
	char *name = NULL;

	assert_int_equal(ropen(fx, "outdir/secret", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "outdir/", O_RDONLY), -EXDEV);
	assert_int_equal(ropen(fx, "outdir/new", O_WRONLY | O_CREAT), -EXDEV);
	assert_int_equal(ropen(fx, "outdir/../root/f", O_RDONLY), -EXDEV);
	assert_int_equal(rparent(fx, "outdir/new", &name), -EXDEV);
	assert_int_equal(rparent(fx, "a/up2/secret", &name), -EXDEV);
	assert_null(name);
}

static void test_dangling_escape_creat(void **state)
{
	struct fx *fx = get_fx(state);

	assert_int_equal(ropen(fx, "dangle", O_WRONLY | O_CREAT), -EXDEV);
	assert_int_equal(ropen(fx, "dangle", O_RDWR | O_CREAT | O_TRUNC), -EXDEV);
	assert_int_equal(ropen(fx, "dangle_abs", O_WRONLY | O_CREAT), -EXDEV);
	assert_false(exists_in(fx->outside, "created"));
	assert_false(exists_in(fx->outside, "created_abs"));
	/* O_EXCL never follows: the link itself exists */
	assert_int_equal(ropen(fx, "dangle", O_WRONLY | O_CREAT | O_EXCL), -EEXIST);
	/* a dangling link inside the root creates its target, as open(2) does */
	assert_int_equal(ropen(fx, "dangle_in", O_WRONLY | O_CREAT), 0);
	assert_true(exists_in(fx->rootdir, "newtarget"));
}

static void test_nul_in_path(void **state)
{
	struct fx *fx = get_fx(state);
	char *name = NULL, *norm = NULL;

	assert_int_equal(resolve_open(&fx->root, "f\0x", 3, O_RDONLY, 0), -EINVAL);
	assert_int_equal(resolve_open(&fx->root, "\0", 1, O_RDONLY, 0), -EINVAL);
	assert_int_equal(resolve_parent(&fx->root, "a/\0/../..", 9, &(int){ 0 }, &name), -EINVAL);
	assert_int_equal(resolve_normalize("a\0", 2, &norm), -EINVAL);
	assert_null(name);
	assert_null(norm);
}

static void test_overlong(void **state)
{
	struct fx *fx = get_fx(state);
	char name[NAME_MAX + 2];
	char *path;
	size_t n = PATH_MAX + 1;

	memset(name, 'x', NAME_MAX + 1);
	name[NAME_MAX + 1] = '\0';
	assert_int_equal(ropen(fx, name, O_RDONLY), -ENAMETOOLONG);
	assert_int_equal(ropen(fx, name, O_WRONLY | O_CREAT), -ENAMETOOLONG);
	name[NAME_MAX] = '\0'; /* exactly NAME_MAX: allowed, just absent */
	assert_int_equal(ropen(fx, name, O_RDONLY), -ENOENT);

	path = malloc(n + 1);
	assert_non_null(path);
	for (size_t i = 0; i < n; i++)
		path[i] = (i % 2) ? '/' : 'a';
	path[n] = '\0';
	assert_int_equal(resolve_open(&fx->root, path, n, O_RDONLY, 0), -ENAMETOOLONG);
	free(path);
}

static void test_eloop(void **state)
{
	struct fx *fx = get_fx(state);

	assert_int_equal(ropen(fx, "loop1", O_RDONLY), -ELOOP);
	assert_int_equal(ropen(fx, "loop1/x", O_RDONLY), -ELOOP);
	assert_int_equal(ropen(fx, "loop1", O_WRONLY | O_CREAT), -ELOOP);
	/* l1 needs 41 hops to reach f, l2 needs 40: the kernel's limit is 40 */
	assert_int_equal(ropen(fx, "l1", O_RDONLY), -ELOOP);
	assert_int_equal(ropen(fx, "l2", O_RDONLY), 0);
	assert_int_equal(rino(fx, "l2", 0), real_ino(fx, "f"));
}

static void test_inside_paths(void **state)
{
	struct fx *fx = get_fx(state);
	ino_t root_ino = real_ino(fx, ".");
	struct stat st;
	char *name = NULL;
	int dirfd, fd;

	assert_int_equal(rino(fx, "f", 0), real_ino(fx, "f"));
	assert_int_equal(rino(fx, "/f", 0), real_ino(fx, "f"));
	assert_int_equal(rino(fx, "//a///f", 0), real_ino(fx, "a/f"));
	assert_int_equal(rino(fx, "./a/./f", 0), real_ino(fx, "a/f"));
	assert_int_equal(rino(fx, "a/../f", 0), real_ino(fx, "f"));
	assert_int_equal(rino(fx, "a/b/../../b", 0), real_ino(fx, "b"));
	assert_int_equal(rino(fx, "a/..", 0), root_ino);
	assert_int_equal(rino(fx, "", 0), root_ino);
	assert_int_equal(rino(fx, "/", 0), root_ino);
	assert_int_equal(rino(fx, ".", 0), root_ino);
	assert_int_equal(rino(fx, "a/", 0), real_ino(fx, "a"));
	/* in-root symlinks, final and intermediate, relative and climbing */
	assert_int_equal(rino(fx, "inlink", 0), real_ino(fx, "a/f"));
	assert_int_equal(rino(fx, "inlink", O_NOFOLLOW), real_ino(fx, "inlink"));
	assert_int_equal(rino(fx, "indir/f", 0), real_ino(fx, "a/f"));
	assert_int_equal(rino(fx, "indir/b/..", 0), real_ino(fx, "a"));
	assert_int_equal(rino(fx, "indir/", O_NOFOLLOW), real_ino(fx, "a"));
	assert_int_equal(rino(fx, "a/rel", 0), real_ino(fx, "f"));
	assert_int_equal(ropen(fx, "inlink", O_RDONLY | O_NOFOLLOW), -ELOOP);
	assert_int_equal(ropen(fx, "inlink", O_RDWR), 0);
	/* errors as open(2) gives them */
	assert_int_equal(ropen(fx, "nope", O_RDONLY), -ENOENT);
	assert_int_equal(ropen(fx, "nope/x", O_RDONLY), -ENOENT);
	assert_int_equal(ropen(fx, "f/x", O_RDONLY), -ENOTDIR);
	assert_int_equal(ropen(fx, "f/", O_RDONLY), -ENOTDIR);
	assert_int_equal(ropen(fx, "f", O_RDONLY | O_DIRECTORY), -ENOTDIR);
	assert_int_equal(ropen(fx, "a", O_WRONLY), -EISDIR);
	assert_int_equal(ropen(fx, "new/", O_WRONLY | O_CREAT), -EISDIR);
	assert_int_equal(ropen(fx, "f", O_WRONLY | O_CREAT | O_EXCL), -EEXIST);
	/* creating inside works */
	fd = resolve_open(&fx->root, "a/b/new", 7, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	assert_int_equal(st.st_ino, real_ino(fx, "a/b/new"));
	assert_int_equal(ropen(fx, "indir/b/../new2", O_WRONLY | O_CREAT), 0);
	assert_true(exists_in(fx->rootdir, "a/new2"));

	/* resolve_parent */
	assert_int_equal(resolve_parent(&fx->root, "a/b/c", 5, &dirfd, &name), 0);
	assert_string_equal(name, "c");
	assert_int_equal(fstat(dirfd, &st), 0);
	assert_int_equal(st.st_ino, real_ino(fx, "a/b"));
	close(dirfd);
	free(name);
	/* A trailing "/" names a directory: a missing one only for a call
	 * that makes it (RESOLVE_PARENT_NEW_DIR), never a file or a symlink. */
	assert_int_equal(resolve_parent(&fx->root, "/x/", 3, &dirfd, &name), -ENOENT);
	assert_int_equal(resolve_parent_ex(&fx->root, "/x/", 3, RESOLVE_PARENT_NEW_DIR, &dirfd,
					   &name), 0);
	assert_string_equal(name, "x");
	assert_int_equal(fstat(dirfd, &st), 0);
	assert_int_equal(st.st_ino, root_ino);
	close(dirfd);
	free(name);
	assert_int_equal(resolve_parent(&fx->root, "a//", 3, &dirfd, &name), 0);
	assert_string_equal(name, "a");
	close(dirfd);
	free(name);
	assert_int_equal(resolve_parent_ex(&fx->root, "f/", 2, RESOLVE_PARENT_NEW_DIR, &dirfd,
					   &name), -ENOTDIR);
	assert_int_equal(resolve_parent(&fx->root, "indir/", 6, &dirfd, &name), -ENOTDIR);
	assert_true(resolve_trailing_slash("a/", 2) && resolve_trailing_slash("a//", 3));
	assert_false(resolve_trailing_slash("a", 1) || resolve_trailing_slash("/", 1) ||
		     resolve_trailing_slash("//", 2) || resolve_trailing_slash("", 0));
	assert_int_equal(resolve_parent(&fx->root, "indir/x", 7, &dirfd, &name), 0);
	assert_int_equal(fstat(dirfd, &st), 0);
	assert_int_equal(st.st_ino, real_ino(fx, "a"));
	close(dirfd);
	free(name);
	/* the final component of resolve_parent is never followed */
	assert_int_equal(resolve_parent(&fx->root, "abs", 3, &dirfd, &name), 0);
	assert_string_equal(name, "abs");
	close(dirfd);
	free(name);
	name = NULL;
	assert_int_equal(rparent(fx, "", &name), -EBUSY);
	assert_int_equal(rparent(fx, "/", &name), -EBUSY);
	assert_int_equal(rparent(fx, "a/..", &name), -EINVAL);
	assert_int_equal(rparent(fx, "a/.", &name), -EINVAL);
	assert_int_equal(rparent(fx, "nope/x", &name), -ENOENT);
	assert_int_equal(rparent(fx, "f/x", &name), -ENOTDIR);
	assert_null(name);
}

/* Both mechanisms give the same answer for every path here. */
static void test_mechanisms_agree(void **state)
{
	static const char *const paths[] = {
		"", ".", "..", "f", "a", "a/", "a/f", "a/f/", "a/..", "a/../..", "a/b/../../f",
		"abs", "up", "chain1", "outdir", "outdir/secret", "a/up2", "a/up2/secret",
		"dangle", "dangle_abs", "loop1", "l0", "l1", "l2", "inlink", "indir/f",
		"a/rel", "nope", "nope/x", "f/x", "indir/../a/rel", "./././f", "b/../a/b/..",
	};
	static const int flags[] = { O_RDONLY, O_PATH, O_PATH | O_NOFOLLOW, O_RDONLY | O_NOFOLLOW,
				     O_RDONLY | O_DIRECTORY, O_WRONLY };
	struct fx *fx = get_fx(state);

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		for (size_t j = 0; j < sizeof(flags) / sizeof(flags[0]); j++) {
			int a, b;
			struct stat sa, sb;

			fx->root.use_openat2 = true;
			a = resolve_open(&fx->root, paths[i], strlen(paths[i]), flags[j], 0);
			fx->root.use_openat2 = false;
			b = resolve_open(&fx->root, paths[i], strlen(paths[i]), flags[j], 0);
			if (a < 0 || b < 0) {
				if (a != b)
					fail_msg("'%s' flags %#x: openat2 %d, walk %d", paths[i],
						 flags[j], a, b);
				if (a >= 0)
					close(a);
				if (b >= 0)
					close(b);
				continue;
			}
			assert_int_equal(fstat(a, &sa), 0);
			assert_int_equal(fstat(b, &sb), 0);
			assert_int_equal(sa.st_ino, sb.st_ino);
			close(a);
			close(b);
		}
	}
}

static void test_has_dotdot(void **state)
{
	(void)state;
	assert_true(resolve_has_dotdot(".."));
	assert_true(resolve_has_dotdot("a/../b"));
	assert_true(resolve_has_dotdot("/a//..//b"));
	assert_true(resolve_has_dotdot("a/.."));
	assert_false(resolve_has_dotdot(""));
	assert_false(resolve_has_dotdot("a/b"));
	assert_false(resolve_has_dotdot("..a/b.."));
	assert_false(resolve_has_dotdot("a/.../b"));
	assert_false(resolve_has_dotdot("./a/."));
}

static void test_normalize(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", "." },      { "/", "." },        { "///", "." },     { "a", "a" },
		{ "/a/b", "a/b" }, { "a//b", "a/b" },  { "a/b/", "a/b/" }, { "./x", "./x" },
		{ "..", ".." },   { "a/../b", "a/../b" },
	};
	char *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(resolve_normalize(cases[i].in, strlen(cases[i].in), &out), 0);
		assert_string_equal(out, cases[i].out);
		free(out);
	}
	assert_int_equal(resolve_normalize(NULL, 0, &out), 0);
	assert_string_equal(out, ".");
	free(out);
}

static void test_root_open(void **state)
{
	struct fx *fx = get_fx(state);
	struct resolve_root r;
	char p[256];

	snprintf(p, sizeof(p), "%s/f", fx->rootdir);
	assert_int_equal(resolve_root_open(p, &r), -ENOTDIR);
	snprintf(p, sizeof(p), "%s/nope", fx->rootdir);
	assert_int_equal(resolve_root_open(p, &r), -ENOENT);
	assert_int_equal(resolve_root_open(fx->rootdir, &r), 0);
	assert_true(r.fd >= 0);
	assert_true(fcntl(r.fd, F_GETFD) & FD_CLOEXEC);
	close(r.fd);
}

/* Each test twice: "<name> openat2" and "<name> walk". */
#define BOTH(t)                                                                   \
	{ #t " openat2", t, setup, teardown, (void *)&use_openat2 },                 \
	{                                                                            \
		#t " walk", t, setup, teardown, (void *)&use_walk                    \
	}

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_dotdot_above_root),
		BOTH(test_absolute_symlink),
		BOTH(test_relative_symlink_out),
		BOTH(test_symlink_chain),
		BOTH(test_symlink_dir_outside_intermediate),
		BOTH(test_dangling_escape_creat),
		BOTH(test_nul_in_path),
		BOTH(test_overlong),
		BOTH(test_eloop),
		BOTH(test_inside_paths),
		cmocka_unit_test_prestate_setup_teardown(test_mechanisms_agree, setup, teardown,
							 (void *)&use_openat2),
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_has_dotdot),
		cmocka_unit_test_prestate_setup_teardown(test_root_open, setup, teardown,
							 (void *)&use_walk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
