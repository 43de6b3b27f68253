/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * fsx: a syscall exerciser that runs one table of cases twice, once in a
 * local directory and once in a directory on the mount under test, and
 * compares what every step returned (value or errno, data read back,
 * attributes) one by one.
 *
 *     fsx [-n ENTRIES] [-t SECONDS] [-c CASE]... [-l] LOCALDIR MOUNTDIR
 *
 * Each case works in a fresh subdirectory named after it (LOCALDIR/CASE and
 * MOUNTDIR/CASE, which must not exist yet), in a child process of its own
 * with umask 022, so a crash or a hang (killed after -t seconds, default 120)
 * is reported as a result instead of stopping the run. The child records its
 * results in a shared anonymous mapping; the parent compares the two lists
 * and prints one line per step:
 *
 *     ok CASE/STEP VALUE
 *     MISMATCH CASE/STEP local=VALUE mount=VALUE
 *
 * then a summary line. Exit status: 0 when every step matched, 1 on any
 * mismatch, 2 on a usage or set-up error.
 *
 * What is compared is what a program may rely on: return values, errno
 * names, bytes read, file type, permission bits, size, link count, uid/gid,
 * explicitly set timestamps (to the nanosecond), and relations (two names
 * share an inode, mtime moved forward after a write) instead of values that
 * differ between any two filesystems (st_ino, st_dev, st_blocks, statfs
 * numbers). SEEK_HOLE offsets and directory link counts are compared raw:
 * give LOCALDIR on the same kind of filesystem as the served root (in the
 * bats suite both live under the same BATS_TEST_TMPDIR). Device nodes are not
 * tried (agentd refuses them by design).
 *
 * Single-threaded; one child process per case and directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <linux/falloc.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define MAX_RECS 512
#define LABEL_LEN 64
#define VALUE_LEN 240

struct rec {
	char label[LABEL_LEN];
	char value[VALUE_LEN];
};

/* One run of one case in one directory; lives in a shared mapping. */
struct run {
	char dir[PATH_MAX];	/* TOP/CASE, absolute, where the case works */
	int n;			/* records used */
	bool overflow;		/* more than MAX_RECS steps were recorded */
	struct rec recs[MAX_RECS];
};

struct fcase {
	const char *name;
	void (*fn)(struct run *r);
	const char *what;
};

/* Entries for the getdents case (-n). */
static int g_nentries = 1000;

/* ---------------------------------------------------------------- records */

static void rec(struct run *r, const char *label, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Append LABEL = printf(FMT...) to r's records (truncated to fit). */
static void rec(struct run *r, const char *label, const char *fmt, ...)
{
	va_list ap;
	struct rec *x;

	if (r->n >= MAX_RECS) {
		r->overflow = true;
		return;
	}
	x = &r->recs[r->n++];
	snprintf(x->label, sizeof(x->label), "%s", label);
	va_start(ap, fmt);
	vsnprintf(x->value, sizeof(x->value), fmt, ap);
	va_end(ap);
}

static const char *errname(int e)
{
	const char *s = strerrorname_np(e);

	return s ? s : "E?";
}

/* Record a syscall's outcome: its value (@show) or "ok", or "-1 ENAME". */
static void rec_sys(struct run *r, const char *label, long v, int e, bool show)
{
	if (v == -1)
		rec(r, label, "-1 %s", errname(e));
	else if (show)
		rec(r, label, "%ld", v);
	else
		rec(r, label, "ok");
}

/* Run EXPR, record its value (or -1 and errno) under LABEL, yield the value. */
#define SYS(r, label, expr) ({ \
	errno = 0; \
	long _v = (long)(expr); \
	int _e = errno; \
	rec_sys((r), (label), _v, _e, true); \
	errno = _e; \
	_v; })
/* As SYS, but a success is recorded as "ok" (file descriptors, addresses). */
#define SYSOK(r, label, expr) ({ \
	errno = 0; \
	long _v = (long)(expr); \
	int _e = errno; \
	rec_sys((r), (label), _v, _e, false); \
	errno = _e; \
	_v; })

static uint64_t fnv1a(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Escape LEN bytes of P into OUT (size OUTLEN): printable ASCII as is,
 * anything else as \xHH. */
static void escape(char *out, size_t outlen, const void *p, size_t len)
{
	const unsigned char *b = p;
	size_t i, o = 0;

	for (i = 0; i < len && o + 5 < outlen; i++) {
		if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\') {
			out[o++] = (char)b[i];
		} else {
			snprintf(out + o, outlen - o, "\\x%02x", b[i]);
			o += 4;
		}
	}
	if (i < len && o + 4 < outlen)
		o += (size_t)snprintf(out + o, outlen - o, "...");
	out[o < outlen ? o : outlen - 1] = '\0';
}

/* Record data read: short data escaped, long data as length and hash. */
static void rec_data(struct run *r, const char *label, const void *p, ssize_t len)
{
	char esc[VALUE_LEN];

	if (len < 0) {
		rec(r, label, "-1 %s", errname(errno));
	} else if (len <= 40) {
		escape(esc, sizeof(esc), p, (size_t)len);
		rec(r, label, "len=%zd '%s'", len, esc);
	} else {
		rec(r, label, "len=%zd fnv=%016" PRIx64, len, fnv1a(p, (size_t)len));
	}
}

static const char *ftype(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG: return "reg";
	case S_IFDIR: return "dir";
	case S_IFLNK: return "lnk";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "sock";
	case S_IFCHR: return "chr";
	case S_IFBLK: return "blk";
	}
	return "?";
}

/* Record the comparable part of a stat: type, permission bits, size (not
 * for directories), link count, owner. */
static void rec_st(struct run *r, const char *label, int ret, const struct stat *st)
{
	if (ret < 0) {
		rec(r, label, "-1 %s", errname(errno));
		return;
	}
	if (S_ISDIR(st->st_mode))
		rec(r, label, "%s %04o nlink=%ju uid=%u gid=%u", ftype(st->st_mode),
		    (unsigned)(st->st_mode & 07777), (uintmax_t)st->st_nlink,
		    (unsigned)st->st_uid, (unsigned)st->st_gid);
	else
		rec(r, label, "%s %04o size=%jd nlink=%ju uid=%u gid=%u",
		    ftype(st->st_mode), (unsigned)(st->st_mode & 07777),
		    (intmax_t)st->st_size, (uintmax_t)st->st_nlink,
		    (unsigned)st->st_uid, (unsigned)st->st_gid);
}

static void rec_stat(struct run *r, const char *label, const char *name, int flags)
{
	struct stat st;
	int ret = fstatat(AT_FDCWD, name, &st, flags);

	rec_st(r, label, ret, &st);
}

static void rec_fstat(struct run *r, const char *label, int fd)
{
	struct stat st;
	int ret = fstat(fd, &st);

	rec_st(r, label, ret, &st);
}

/* Record the whole content of file NAME (or the errno of open or read). */
static void rec_file(struct run *r, const char *label, const char *name)
{
	static char buf[8 << 20];
	ssize_t n, total = 0;
	int fd = open(name, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		rec(r, label, "-1 %s", errname(errno));
		return;
	}
	while ((size_t)total < sizeof(buf)) {
		n = read(fd, buf + total, sizeof(buf) - (size_t)total);
		if (n < 0) {
			rec(r, label, "read -1 %s", errname(errno));
			close(fd);
			return;
		}
		if (n == 0)
			break;
		total += n;
	}
	close(fd);
	rec_data(r, label, buf, total);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Record the sorted names in directory DIR (without "." and ".."),
 * escaped and separated by "|". */
static void rec_listing(struct run *r, const char *label, const char *dir)
{
	char *names[256], out[VALUE_LEN] = "", esc[VALUE_LEN];
	struct dirent *de;
	size_t k = 0, i;
	DIR *d = opendir(dir);

	if (!d) {
		rec(r, label, "-1 %s", errname(errno));
		return;
	}
	while ((de = readdir(d)) && k < 256)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names[k++] = strdup(de->d_name);
	closedir(d);
	qsort(names, k, sizeof(names[0]), cmp_str);
	for (i = 0; i < k; i++) {
		escape(esc, sizeof(esc), names[i], strlen(names[i]));
		if (strlen(out) + strlen(esc) + 2 < sizeof(out)) {
			strcat(out, esc);
			strcat(out, "|");
		}
		free(names[i]);
	}
	rec(r, label, "%zu: %s", k, out);
}

/* Record @len bytes read at @off through @fd (short reads show as such). */
static void rec_pread(struct run *r, const char *label, int fd, off_t off, size_t len)
{
	char *buf = malloc(len ? len : 1);
	ssize_t n;

	if (!buf) {
		rec(r, label, "malloc failed");
		return;
	}
	errno = 0;
	n = pread(fd, buf, len, off);
	rec_data(r, label, buf, n);
	free(buf);
}

/* Create NAME holding DATA (O_CREAT|O_TRUNC, mode 0644 before umask). */
static void mkfile(struct run *r, const char *name, const char *data)
{
	char label[LABEL_LEN];
	int fd;
	ssize_t n;
	size_t len = strlen(data);

	snprintf(label, sizeof(label), "mkfile %s", name);
	fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rec(r, label, "open -1 %s", errname(errno));
		return;
	}
	n = write(fd, data, len);
	if (n != (ssize_t)len)
		rec(r, label, "write %zd %s", n, n < 0 ? errname(errno) : "short");
	else if (close(fd) < 0)
		rec(r, label, "close -1 %s", errname(errno));
	else
		rec(r, label, "ok");
	if (n != (ssize_t)len)
		close(fd);
}

static int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ns_of(&ts);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Deterministic pseudo-random bytes (xorshift64) for data patterns. */
static void fill_pattern(void *p, size_t len, uint64_t seed)
{
	unsigned char *b = p;
	uint64_t x = seed | 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (unsigned char)x;
	}
}

static bool all_zero(const unsigned char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* ------------------------------------------------------------------ cases */

/* open(2) flags: O_CREAT|O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW,
 * the mode given at creation. */
static void c_open_flags(struct run *r)
{
	long fd, fd2;
	char buf[64];

	fd = SYSOK(r, "creat excl new", open("f", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
	rec_fstat(r, "fstat new (0640)", (int)fd);
	SYS(r, "creat excl again", open("f", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
	SYS(r, "write 10", write((int)fd, "0123456789", 10));
	SYS(r, "close", close((int)fd));

	fd = SYSOK(r, "open O_TRUNC", open("f", O_WRONLY | O_TRUNC | O_CLOEXEC));
	rec_fstat(r, "fstat after O_TRUNC", (int)fd);
	SYS(r, "write abc", write((int)fd, "abc", 3));
	SYS(r, "close", close((int)fd));

	fd = SYSOK(r, "open O_APPEND", open("f", O_WRONLY | O_APPEND | O_CLOEXEC));
	SYS(r, "lseek 0", lseek((int)fd, 0, SEEK_SET));
	SYS(r, "append de", write((int)fd, "de", 2));
	SYS(r, "position after append", lseek((int)fd, 0, SEEK_CUR));
	SYS(r, "pwrite at 0 appends (Linux)", pwrite((int)fd, "F", 1, 0));
	SYS(r, "close", close((int)fd));
	rec_file(r, "content", "f");

	/* Two descriptors appending in turn: every write lands at the end. */
	fd = SYSOK(r, "open append A", open("log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
	fd2 = SYSOK(r, "open append B", open("log", O_WRONLY | O_APPEND | O_CLOEXEC));
	SYS(r, "A writes", write((int)fd, "A1\n", 3));
	SYS(r, "B writes", write((int)fd2, "B1\n", 3));
	SYS(r, "A writes again", write((int)fd, "A2\n", 3));
	close((int)fd);
	close((int)fd2);
	rec_file(r, "two appenders", "log");

	/* O_RDWR|O_APPEND: reads from the current position, writes at the end. */
	fd = SYSOK(r, "open O_RDWR|O_APPEND", open("log", O_RDWR | O_APPEND | O_CLOEXEC));
	SYS(r, "read 2", read((int)fd, buf, 2));
	SYS(r, "write Z", write((int)fd, "Z", 1));
	SYS(r, "position after", lseek((int)fd, 0, SEEK_CUR));
	close((int)fd);
	rec_file(r, "rdwr append", "log");

	SYS(r, "O_DIRECTORY on a file", open("f", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	SYS(r, "mkdir d", mkdir("d", 0755));
	fd = SYSOK(r, "O_DIRECTORY on a dir", open("d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	if (fd >= 0)
		close((int)fd);
	SYS(r, "O_WRONLY on a dir", open("d", O_WRONLY | O_CLOEXEC));
	SYS(r, "O_CREAT on a dir", open("d", O_RDWR | O_CREAT | O_CLOEXEC, 0644));
	SYS(r, "missing without O_CREAT", open("nope", O_RDONLY | O_CLOEXEC));
	SYS(r, "missing parent", open("nope/f", O_RDWR | O_CREAT | O_CLOEXEC, 0644));
	SYS(r, "file as a parent", open("f/x", O_RDWR | O_CREAT | O_CLOEXEC, 0644));
	SYS(r, "symlink s -> f", symlink("f", "s"));
	SYS(r, "O_NOFOLLOW on a symlink", open("s", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
	SYS(r, "symlink dangling -> none", symlink("none", "dangling"));
	SYS(r, "O_CREAT|O_EXCL on a dangling symlink", open("dangling", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
	fd = SYSOK(r, "O_CREAT through a dangling symlink", open("dangling", O_RDWR | O_CREAT | O_CLOEXEC, 0600));
	if (fd >= 0)
		close((int)fd);
	rec_stat(r, "created target 'none'", "none", AT_SYMLINK_NOFOLLOW);
	fd = SYSOK(r, "creat 0755", open("x", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0777));
	if (fd >= 0)
		close((int)fd);
	rec_stat(r, "mode 0777 & ~umask", "x", 0);
	fd = SYSOK(r, "O_CREAT|O_TRUNC existing", open("f", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
	if (fd >= 0)
		close((int)fd);
	rec_stat(r, "stat f", "f", 0);
}

/* read/write/pread/pwrite at offsets, past EOF, vectors, big buffers. */
static void c_rw(struct run *r)
{
	size_t big = (3 << 20) + 7;
	unsigned char *p = malloc(big), *q = malloc(big);
	struct iovec iov[3];
	char a[8], b[8], c[8];
	long fd, rfd;
	size_t off;
	ssize_t n;

	if (!p || !q) {
		rec(r, "malloc", "failed");
		free(p);
		free(q);
		return;
	}
	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write 11", write((int)fd, "hello world", 11));
	SYS(r, "position", lseek((int)fd, 0, SEEK_CUR));
	rec_pread(r, "pread 6+5", (int)fd, 6, 5);
	rec_pread(r, "pread at EOF", (int)fd, 11, 10);
	rec_pread(r, "pread past EOF", (int)fd, 100, 10);
	rec_pread(r, "pread spanning EOF", (int)fd, 9, 20);
	SYS(r, "pwrite past EOF at 20", pwrite((int)fd, "XY", 2, 20));
	rec_fstat(r, "fstat", (int)fd);
	rec_pread(r, "whole with gap", (int)fd, 0, 64);
	SYS(r, "write 0 bytes", write((int)fd, "", 0));
	SYS(r, "position unchanged by pwrite", lseek((int)fd, 0, SEEK_CUR));
	SYS(r, "lseek 0", lseek((int)fd, 0, SEEK_SET));
	SYS(r, "read 5", read((int)fd, a, 5));
	rec_data(r, "read 5 data", a, 5);
	SYS(r, "overwrite middle", pwrite((int)fd, "___", 3, 4));
	rec_pread(r, "after overwrite", (int)fd, 0, 64);

	/* Vectors. */
	memcpy(a, "one", 3);
	memcpy(b, "two", 3);
	memcpy(c, "three", 5);
	iov[0] = (struct iovec){ a, 3 };
	iov[1] = (struct iovec){ b, 3 };
	iov[2] = (struct iovec){ c, 5 };
	SYS(r, "pwritev at 30", pwritev((int)fd, iov, 3, 30));
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	memset(c, 0, sizeof(c));
	SYS(r, "preadv at 30", preadv((int)fd, iov, 3, 30));
	rec(r, "preadv data", "%.3s|%.3s|%.5s", a, b, c);
	SYS(r, "close", close((int)fd));

	/* A big buffer in one write, read back in odd pieces. */
	fill_pattern(p, big, 42);
	fd = SYSOK(r, "open big", open("big", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write 3 MiB+7", write((int)fd, p, big));
	memset(q, 0, big);
	for (off = 0, n = 1; off < big && n > 0; off += (size_t)n)
		n = pread((int)fd, q + off, 65537 < big - off ? 65537 : big - off, (off_t)off);
	rec(r, "read back in 65537-byte pieces", "%s got=%zu", memcmp(p, q, big) ? "DIFFERENT" : "same", off);
	rec_pread(r, "pread 8193 at 4095", (int)fd, 4095, 8193);
	rec_pread(r, "pread across the end", (int)fd, (off_t)big - 10, 100);
	SYS(r, "pwrite at 4 GiB", pwrite((int)fd, "end", 3, (off_t)4 << 30));
	rec_fstat(r, "fstat after 4 GiB", (int)fd);
	rec_pread(r, "pread at 4 GiB - 2", (int)fd, ((off_t)4 << 30) - 2, 8);
	SYS(r, "close", close((int)fd));
	rec_file(r, "content via a new open", "f");

	/* Access modes are enforced. */
	rfd = SYSOK(r, "open O_RDONLY", open("f", O_RDONLY | O_CLOEXEC));
	SYS(r, "write on O_RDONLY", write((int)rfd, "x", 1));
	close((int)rfd);
	fd = SYSOK(r, "open O_WRONLY", open("f", O_WRONLY | O_CLOEXEC));
	SYS(r, "read on O_WRONLY", read((int)fd, a, 1));
	/* Write through one fd, read through another at once. */
	rfd = SYSOK(r, "open reader", open("f", O_RDONLY | O_CLOEXEC));
	rec_pread(r, "reader before", (int)rfd, 0, 5);
	SYS(r, "writer pwrite", pwrite((int)fd, "HELLO", 5, 0));
	rec_pread(r, "reader after", (int)rfd, 0, 5);
	close((int)fd);
	close((int)rfd);
	free(p);
	free(q);
}

/* ftruncate/truncate up and down; reads of the extended part. */
static void c_truncate(struct run *r)
{
	unsigned char buf[4096];
	long fd, rfd;
	ssize_t n;

	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write 10", write((int)fd, "0123456789", 10));
	rfd = SYSOK(r, "open reader", open("f", O_RDONLY | O_CLOEXEC));
	rec_pread(r, "reader sees 10", (int)rfd, 0, 64);
	SYS(r, "ftruncate 4", ftruncate((int)fd, 4));
	rec_fstat(r, "fstat", (int)fd);
	rec_pread(r, "reader after shrink", (int)rfd, 0, 64);
	SYS(r, "ftruncate 1 MiB+3", ftruncate((int)fd, (1 << 20) + 3));
	rec_fstat(r, "fstat", (int)fd);
	n = pread((int)rfd, buf, sizeof(buf), 4);
	rec(r, "extended part reads zeros", "n=%zd zero=%d", n, n > 0 && all_zero(buf, (size_t)n));
	rec_pread(r, "tail", (int)rfd, 1 << 20, 16);
	rec_pread(r, "head", (int)rfd, 0, 6);
	SYS(r, "truncate path 2", truncate("f", 2));
	rec_fstat(r, "fstat via fd", (int)fd);
	rec_pread(r, "reader after truncate(2)", (int)rfd, 0, 64);
	SYS(r, "write at position 10 after shrink", write((int)fd, "Z", 1));
	rec_pread(r, "content", (int)rfd, 0, 64);
	SYS(r, "ftruncate on O_RDONLY", ftruncate((int)rfd, 0));
	SYS(r, "ftruncate -1", ftruncate((int)fd, -1));
	SYS(r, "truncate missing", truncate("nope", 0));
	SYS(r, "mkdir d", mkdir("d", 0755));
	SYS(r, "truncate a dir", truncate("d", 0));
	SYS(r, "ftruncate 0", ftruncate((int)fd, 0));
	rec_fstat(r, "fstat", (int)fd);
	SYS(r, "close", close((int)fd));
	SYS(r, "close reader", close((int)rfd));
	rec_stat(r, "stat", "f", 0);
}

/* lseek: SEEK_SET/CUR/END, SEEK_DATA/SEEK_HOLE on a sparse file. */
static void c_seek(struct run *r)
{
	const off_t M = 1 << 20;
	long fd;

	fd = SYSOK(r, "open", open("sparse", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "pwrite x at 0", pwrite((int)fd, "x", 1, 0));
	SYS(r, "pwrite y at 8 MiB", pwrite((int)fd, "y", 1, 8 * M));
	SYS(r, "ftruncate 16 MiB", ftruncate((int)fd, 16 * M));
	SYS(r, "fsync", fsync((int)fd));
	SYS(r, "SEEK_DATA 0", lseek((int)fd, 0, SEEK_DATA));
	SYS(r, "SEEK_HOLE 0", lseek((int)fd, 0, SEEK_HOLE));
	SYS(r, "SEEK_DATA 64 KiB", lseek((int)fd, 65536, SEEK_DATA));
	SYS(r, "SEEK_HOLE 8 MiB", lseek((int)fd, 8 * M, SEEK_HOLE));
	SYS(r, "SEEK_DATA 9 MiB", lseek((int)fd, 9 * M, SEEK_DATA));
	SYS(r, "SEEK_HOLE 9 MiB", lseek((int)fd, 9 * M, SEEK_HOLE));
	SYS(r, "SEEK_DATA at EOF", lseek((int)fd, 16 * M, SEEK_DATA));
	SYS(r, "SEEK_HOLE at EOF", lseek((int)fd, 16 * M, SEEK_HOLE));
	SYS(r, "SEEK_DATA past EOF", lseek((int)fd, 17 * M, SEEK_DATA));
	SYS(r, "SEEK_DATA -1", lseek((int)fd, -1, SEEK_DATA));
	SYS(r, "SEEK_HOLE -1", lseek((int)fd, -1, SEEK_HOLE));
	SYS(r, "SEEK_END 0", lseek((int)fd, 0, SEEK_END));
	SYS(r, "SEEK_END -5", lseek((int)fd, -5, SEEK_END));
	SYS(r, "SEEK_CUR +5", lseek((int)fd, 5, SEEK_CUR));
	SYS(r, "SEEK_SET -1", lseek((int)fd, -1, SEEK_SET));
	SYS(r, "SEEK_SET past EOF", lseek((int)fd, 20 * M, SEEK_SET));
	SYS(r, "write past EOF", write((int)fd, "z", 1));
	rec_fstat(r, "fstat", (int)fd);
	rec_pread(r, "hole reads zero", (int)fd, 12 * M, 8);
	SYS(r, "close", close((int)fd));

	/* A file that is all hole. */
	fd = SYSOK(r, "open hole", open("hole", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "ftruncate 1 MiB", ftruncate((int)fd, M));
	SYS(r, "SEEK_DATA 0 (all hole)", lseek((int)fd, 0, SEEK_DATA));
	SYS(r, "SEEK_HOLE 0 (all hole)", lseek((int)fd, 0, SEEK_HOLE));
	SYS(r, "close", close((int)fd));
	/* An empty file. */
	fd = SYSOK(r, "open empty", open("empty", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "SEEK_DATA 0 (empty)", lseek((int)fd, 0, SEEK_DATA));
	SYS(r, "SEEK_HOLE 0 (empty)", lseek((int)fd, 0, SEEK_HOLE));
	SYS(r, "close", close((int)fd));
}

/* open(2) of /proc/self/fd/@fd with @flags: the fd's own file anew, even
 * when it has no name any more (proc(5)). */
static long open_proc_fd(long fd, int flags)
{
	char p[64];

	snprintf(p, sizeof(p), "/proc/self/fd/%ld", fd);
	return open(p, flags | O_CLOEXEC);
}

/* unlink (and rename over) a file that is open; I/O through the fd and
 * through new opens of it by /proc/self/fd. */
static void c_unlink_open(struct run *r)
{
	struct stat st;
	long fd, fd2, fd3, fd4;

	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write abc", write((int)fd, "abc", 3));
	SYS(r, "unlink while open", unlink("f"));
	SYS(r, "access after unlink", access("f", F_OK));
	rec_stat(r, "stat after unlink", "f", 0);
	rec_fstat(r, "fstat after unlink (nlink 0)", (int)fd);
	SYS(r, "write def through fd", write((int)fd, "def", 3));
	rec_pread(r, "pread through fd", (int)fd, 0, 64);
	SYS(r, "ftruncate through fd", ftruncate((int)fd, 5));
	rec_fstat(r, "fstat", (int)fd);
	SYS(r, "fsync through fd", fsync((int)fd));
	SYS(r, "fchmod through fd", fchmod((int)fd, 0600));
	rec_fstat(r, "fstat after fchmod", (int)fd);
	fd4 = SYSOK(r, "open unlinked by /proc/self/fd", open_proc_fd(fd, O_RDWR));
	rec_pread(r, "read through the new open", (int)fd4, 0, 64);
	SYS(r, "write through the new open", pwrite((int)fd4, "X", 1, 1));
	rec_pread(r, "first fd sees it", (int)fd, 0, 64);
	rec_fstat(r, "fstat of the new open", (int)fd4);
	SYS(r, "close the new open", close((int)fd4));
	/* The name is free again: a new file there is a different one. */
	fd2 = SYSOK(r, "create same name", open("f", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
	SYS(r, "write new", write((int)fd2, "new", 3));
	rec_pread(r, "old fd still sees old data", (int)fd, 0, 64);
	rec_pread(r, "new fd", (int)fd2, 0, 64);
	if (fstat((int)fd, &st) == 0) {
		struct stat st2;

		fstat((int)fd2, &st2);
		rec(r, "old and new are different inodes", "%d", st.st_ino != st2.st_ino);
	}
	SYS(r, "close old", close((int)fd));
	SYS(r, "close new", close((int)fd2));
	rec_file(r, "file by name", "f");

	/* Rename over a file that is open: the fd keeps the old file. */
	mkfile(r, "g", "old");
	mkfile(r, "g.new", "replacement");
	fd3 = SYSOK(r, "open g", open("g", O_RDWR | O_CLOEXEC));
	SYS(r, "rename g.new over g", rename("g.new", "g"));
	rec_pread(r, "old fd reads old", (int)fd3, 0, 64);
	SYS(r, "write through old fd", pwrite((int)fd3, "OLD", 3, 0));
	rec_pread(r, "old fd after write", (int)fd3, 0, 64);
	rec_fstat(r, "fstat old (nlink 0)", (int)fd3);
	fd4 = SYSOK(r, "open renamed-over by /proc/self/fd", open_proc_fd(fd3, O_RDONLY));
	rec_pread(r, "it reads the old file", (int)fd4, 0, 64);
	SYS(r, "close it", close((int)fd4));
	fd4 = SYSOK(r, "open it again O_WRONLY|O_TRUNC", open_proc_fd(fd3, O_WRONLY | O_TRUNC));
	rec_fstat(r, "old file truncated", (int)fd3);
	SYS(r, "close it again", close((int)fd4));
	SYS(r, "close old", close((int)fd3));
	rec_file(r, "g by name", "g");

	/* Unlinked directory that is open: empty, no new entries. */
	SYS(r, "mkdir d", mkdir("d", 0755));
	fd = SYSOK(r, "open d", open("d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	SYS(r, "rmdir d while open", rmdir("d"));
	SYS(r, "create in removed dir", openat((int)fd, "x", O_RDWR | O_CREAT | O_CLOEXEC, 0644));
	{
		char buf[4096];

		SYS(r, "getdents of removed dir", syscall(SYS_getdents64, (int)fd, buf, sizeof(buf)));
	}
	close((int)fd);
	/* No leftovers (no .fuse_hidden or similar). */
	rec_listing(r, "entries left", ".");
}

/* rename(2) and renameat2(2): plain, over a file, directories, flags. */
static void c_rename(struct run *r)
{
	struct stat s1, s2;
	long fd;

	mkfile(r, "a", "A");
	SYS(r, "rename a b", rename("a", "b"));
	SYS(r, "a is gone", access("a", F_OK));
	rec_file(r, "b", "b");
	mkfile(r, "c", "C");
	SYS(r, "rename c over b", rename("c", "b"));
	rec_file(r, "b replaced", "b");
	SYS(r, "c is gone", access("c", F_OK));
	SYS(r, "rename b b", rename("b", "b"));
	rec_file(r, "b unchanged", "b");
	SYS(r, "rename missing", rename("missing", "z"));
	SYS(r, "rename into missing dir", rename("b", "nodir/b"));

	/* An open fd follows the file through a rename. */
	fd = SYSOK(r, "open b", open("b", O_RDWR | O_CLOEXEC));
	SYS(r, "rename b e", rename("b", "e"));
	SYS(r, "write through fd", pwrite((int)fd, "E", 1, 1));
	rec_file(r, "e", "e");
	SYS(r, "close", close((int)fd));

	/* Directories. */
	SYS(r, "mkdir d1", mkdir("d1", 0755));
	mkfile(r, "d1/x", "x");
	SYS(r, "mkdir d2", mkdir("d2", 0755));
	mkfile(r, "d2/y", "y");
	SYS(r, "mkdir d3 (empty)", mkdir("d3", 0755));
	SYS(r, "dir onto non-empty dir", rename("d1", "d2"));
	SYS(r, "dir onto empty dir", rename("d1", "d3"));
	rec_file(r, "d3/x", "d3/x");
	SYS(r, "d1 gone", access("d1", F_OK));
	SYS(r, "file onto dir", rename("e", "d2"));
	SYS(r, "dir onto file", rename("d3", "e"));
	SYS(r, "dir into itself", rename("d3", "d3/sub"));
	SYS(r, "dir to a new name", rename("d3", "d4"));
	rec_file(r, "d4/x", "d4/x");
	SYS(r, "file into a subdir", rename("e", "d4/e"));
	rec_file(r, "d4/e", "d4/e");
	SYS(r, "file back out", rename("d4/e", "e"));
	SYS(r, "dir into another dir", rename("d4", "d2/d4"));
	rec_file(r, "d2/d4/x", "d2/d4/x");
	rec_stat(r, "d2 (nlink 3)", "d2", 0);

	/* renameat2 flags. */
	mkfile(r, "f", "F");
	SYS(r, "NOREPLACE to a free name", syscall(SYS_renameat2, AT_FDCWD, "e", AT_FDCWD, "g", RENAME_NOREPLACE));
	rec_file(r, "g", "g");
	SYS(r, "NOREPLACE onto existing", syscall(SYS_renameat2, AT_FDCWD, "g", AT_FDCWD, "f", RENAME_NOREPLACE));
	rec_file(r, "f kept", "f");
	SYS(r, "EXCHANGE f g", syscall(SYS_renameat2, AT_FDCWD, "f", AT_FDCWD, "g", RENAME_EXCHANGE));
	rec_file(r, "f after exchange", "f");
	rec_file(r, "g after exchange", "g");
	SYS(r, "EXCHANGE with missing", syscall(SYS_renameat2, AT_FDCWD, "f", AT_FDCWD, "missing", RENAME_EXCHANGE));
	SYS(r, "EXCHANGE file and dir", syscall(SYS_renameat2, AT_FDCWD, "f", AT_FDCWD, "d2", RENAME_EXCHANGE));
	rec_stat(r, "f is the dir now", "f", AT_SYMLINK_NOFOLLOW);
	rec_stat(r, "d2 is the file now", "d2", AT_SYMLINK_NOFOLLOW);
	rec_file(r, "f/d4/x", "f/d4/x");
	SYS(r, "NOREPLACE|EXCHANGE", syscall(SYS_renameat2, AT_FDCWD, "f", AT_FDCWD, "g", RENAME_NOREPLACE | RENAME_EXCHANGE));

	/* Two hard links of one file: rename one onto the other does nothing. */
	mkfile(r, "h1", "H");
	SYS(r, "link h1 h2", link("h1", "h2"));
	SYS(r, "rename h1 onto its hard link h2", rename("h1", "h2"));
	SYS(r, "h1 still there", access("h1", F_OK));
	SYS(r, "h2 still there", access("h2", F_OK));
	if (stat("h1", &s1) == 0 && stat("h2", &s2) == 0)
		rec(r, "h1 h2 same inode, nlink", "%d %ju", s1.st_ino == s2.st_ino, (uintmax_t)s1.st_nlink);

	/* A symlink is renamed, not its target. */
	SYS(r, "symlink sl -> g", symlink("g", "sl"));
	SYS(r, "rename symlink", rename("sl", "sl2"));
	rec_stat(r, "sl2 is a link", "sl2", AT_SYMLINK_NOFOLLOW);
	rec_file(r, "g untouched", "g");
	/* Lock-file style: write x.lock, rename over x, many times. */
	{
		int i, bad = 0;
		char data[32];

		for (i = 0; i < 50; i++) {
			snprintf(data, sizeof(data), "v%d", i);
			int lfd = open("x.lock", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

			if (lfd < 0 || write(lfd, data, strlen(data)) < 0 || close(lfd) < 0 ||
			    rename("x.lock", "x") < 0)
				bad++;
		}
		rec(r, "50 lock-file renames failed", "%d", bad);
		rec_file(r, "x", "x");
		SYS(r, "x.lock gone", access("x.lock", F_OK));
	}
}

/* link, symlink, readlink. */
static void c_links(struct run *r)
{
	struct stat s1, s2;
	char buf[PATH_MAX];
	const char *weird = "a b/\xff\xfe/../c\n d";
	long fd;

	mkfile(r, "f", "data");
	SYS(r, "link f g", link("f", "g"));
	if (stat("f", &s1) == 0 && stat("g", &s2) == 0)
		rec(r, "same inode", "%d", s1.st_ino == s2.st_ino);
	else
		rec(r, "same inode", "stat failed %s", errname(errno));
	rec_stat(r, "f (nlink 2)", "f", 0);
	rec_stat(r, "g (nlink 2)", "g", 0);
	fd = SYSOK(r, "open g append", open("g", O_WRONLY | O_APPEND | O_CLOEXEC));
	SYS(r, "append via g", write((int)fd, "+more", 5));
	close((int)fd);
	rec_file(r, "f sees it", "f");
	rec_stat(r, "f size", "f", 0);
	SYS(r, "link onto existing", link("f", "g"));
	SYS(r, "mkdir d", mkdir("d", 0755));
	SYS(r, "link a dir", link("d", "d2"));
	SYS(r, "link missing", link("missing", "m"));
	SYS(r, "link into a subdir", link("f", "d/f3"));
	rec_stat(r, "f (nlink 3)", "f", 0);
	SYS(r, "unlink g", unlink("g"));
	rec_stat(r, "f (nlink 2)", "f", 0);
	SYS(r, "unlink d/f3", unlink("d/f3"));
	rec_stat(r, "f (nlink 1)", "f", 0);

	SYS(r, "symlink s -> f", symlink("f", "s"));
	SYS(r, "readlink s", readlink("s", buf, sizeof(buf)));
	rec_stat(r, "lstat s", "s", AT_SYMLINK_NOFOLLOW);
	rec_stat(r, "stat s follows", "s", 0);
	rec_file(r, "read through s", "s");
	SYS(r, "symlink weird target", symlink(weird, "w"));
	{
		ssize_t n = readlink("w", buf, sizeof(buf));

		rec_data(r, "readlink w (byte-exact)", buf, n);
	}
	rec_stat(r, "lstat w (size = target length)", "w", AT_SYMLINK_NOFOLLOW);
	SYS(r, "readlink small buffer", readlink("w", buf, 3));
	rec_data(r, "readlink small data", buf, 3);
	SYS(r, "readlink a file", readlink("f", buf, sizeof(buf)));
	SYS(r, "readlink missing", readlink("missing", buf, sizeof(buf)));
	SYS(r, "symlink onto existing", symlink("x", "f"));
	SYS(r, "symlink dangling", symlink("nowhere", "dl"));
	rec_stat(r, "stat dangling", "dl", 0);
	rec_stat(r, "lstat dangling", "dl", AT_SYMLINK_NOFOLLOW);
	SYS(r, "symlink absolute", symlink("/etc/hostname", "abs"));
	{
		ssize_t n = readlink("abs", buf, sizeof(buf));

		rec_data(r, "readlink absolute", buf, n);
	}
	SYS(r, "symlink loop a", symlink("lb", "la"));
	SYS(r, "symlink loop b", symlink("la", "lb"));
	SYS(r, "open a loop", open("la", O_RDONLY | O_CLOEXEC));
	SYS(r, "O_NOFOLLOW", open("s", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
	SYS(r, "symlink to dir", symlink("d", "sd"));
	mkfile(r, "sd/through", "T");
	rec_file(r, "d/through", "d/through");
	SYS(r, "hard link to a symlink", linkat(AT_FDCWD, "s", AT_FDCWD, "s2", 0));
	rec_stat(r, "s2 is a link (nlink 2)", "s2", AT_SYMLINK_NOFOLLOW);
	SYS(r, "linkat AT_SYMLINK_FOLLOW", linkat(AT_FDCWD, "s", AT_FDCWD, "f2", AT_SYMLINK_FOLLOW));
	rec_stat(r, "f2 is the file (nlink 2)", "f2", AT_SYMLINK_NOFOLLOW);
	SYS(r, "unlink a symlink", unlink("s"));
	rec_stat(r, "target stays", "f", 0);
	SYS(r, "symlink empty target", symlink("", "empty"));
}

/* mkdir/rmdir and their errors. */
static void c_dirs(struct run *r)
{
	long fd;

	SYS(r, "mkdir d", mkdir("d", 0755));
	SYS(r, "mkdir d again", mkdir("d", 0755));
	SYS(r, "mkdir missing parent", mkdir("nope/d", 0755));
	mkfile(r, "f", "f");
	SYS(r, "mkdir under a file", mkdir("f/d", 0755));
	SYS(r, "mkdir over a file", mkdir("f", 0755));
	SYS(r, "mkdir 0700", mkdir("p", 0700));
	rec_stat(r, "p", "p", 0);
	SYS(r, "mkdir 01777", mkdir("t", 01777));
	rec_stat(r, "t (sticky, umask)", "t", 0);
	SYS(r, "mkdir trailing slash", mkdir("slash/", 0755));
	rec_stat(r, "slash", "slash", 0);
	mkfile(r, "d/x", "x");
	SYS(r, "rmdir non-empty", rmdir("d"));
	SYS(r, "unlink a dir", unlink("d"));
	SYS(r, "rmdir a file", rmdir("f"));
	SYS(r, "rmdir missing", rmdir("missing"));
	SYS(r, "rmdir d/.", rmdir("d/."));
	SYS(r, "rmdir through a file", rmdir("f/x"));
	SYS(r, "mkdir d/s1", mkdir("d/s1", 0755));
	SYS(r, "mkdir d/s2", mkdir("d/s2", 0755));
	SYS(r, "mkdir d/s3", mkdir("d/s3", 0755));
	rec_stat(r, "d (nlink 5)", "d", 0);
	SYS(r, "rmdir d/s3", rmdir("d/s3"));
	rec_stat(r, "d (nlink 4)", "d", 0);
	/* D2: a directory emptied one child at a time is removable at once. */
	{
		char name[64];
		int i, bad = 0;

		for (i = 0; i < 100; i++) {
			snprintf(name, sizeof(name), "d/s1/f%03d", i);
			int cfd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

			if (cfd < 0 || close(cfd) < 0)
				bad++;
		}
		rec(r, "100 creates failed", "%d", bad);
		SYS(r, "rmdir d/s1 (full)", rmdir("d/s1"));
		for (i = bad = 0; i < 100; i++) {
			snprintf(name, sizeof(name), "d/s1/f%03d", i);
			if (unlink(name) < 0)
				bad++;
		}
		rec(r, "100 unlinks failed", "%d", bad);
		SYS(r, "rmdir d/s1 right after", rmdir("d/s1"));
	}
	SYS(r, "unlink d/x", unlink("d/x"));
	SYS(r, "rmdir d/s2", rmdir("d/s2"));
	SYS(r, "rmdir d (now empty)", rmdir("d"));
	SYS(r, "d gone", access("d", F_OK));
	fd = SYSOK(r, "open . O_DIRECTORY", open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	SYS(r, "mkdirat", mkdirat((int)fd, "e", 0750));
	rec_stat(r, "e", "e", 0);
	SYS(r, "unlinkat AT_REMOVEDIR", unlinkat((int)fd, "e", AT_REMOVEDIR));
	SYS(r, "unlinkat AT_REMOVEDIR on a file", unlinkat((int)fd, "f", AT_REMOVEDIR));
	SYS(r, "unlinkat a file", unlinkat((int)fd, "f", 0));
	close((int)fd);
	{
		char longname[300];

		memset(longname, 'n', 255);
		longname[255] = '\0';
		SYS(r, "mkdir 255-byte name", mkdir(longname, 0755));
		longname[255] = 'n';
		longname[256] = '\0';
		SYS(r, "mkdir 256-byte name", mkdir(longname, 0755));
	}
}

/* chmod/chown/utimensat (UTIME_NOW, UTIME_OMIT, AT_SYMLINK_NOFOLLOW). */
static void c_attrs(struct run *r)
{
	const struct timespec t1[2] = { { 1577934245, 123456789 }, { 1577934245, 987654321 } };
	struct timespec t2[2] = { { 1600000000, 1 }, { 0, UTIME_OMIT } };
	struct timespec tnow[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
	struct timespec tlink[2] = { { 1500000000, 5 }, { 1500000000, 6 } };
	struct stat st, before;
	int64_t t0, tend;
	long fd;

	mkfile(r, "f", "data");
	SYS(r, "chmod 600", chmod("f", 0600));
	rec_stat(r, "stat 0600", "f", 0);
	SYS(r, "chmod 4755", chmod("f", 04755));
	rec_stat(r, "stat 4755", "f", 0);
	SYS(r, "chmod 0", chmod("f", 0));
	rec_stat(r, "stat 0000", "f", 0);
	fd = SYSOK(r, "open rw as root despite 0000", open("f", O_RDWR | O_CLOEXEC));
	SYS(r, "fchmod 644", fchmod((int)fd, 0644));
	rec_fstat(r, "fstat 0644", (int)fd);
	SYS(r, "chmod missing", chmod("missing", 0644));
	SYS(r, "chown 1234:5678", chown("f", 1234, 5678));
	rec_stat(r, "owner", "f", 0);
	SYS(r, "chown -1:-1", chown("f", (uid_t)-1, (gid_t)-1));
	rec_stat(r, "owner unchanged", "f", 0);
	SYS(r, "fchown 0:42", fchown((int)fd, 0, 42));
	rec_fstat(r, "owner", (int)fd);
	SYS(r, "symlink s -> f", symlink("f", "s"));
	SYS(r, "lchown symlink 7:8", lchown("s", 7, 8));
	rec_stat(r, "symlink owner", "s", AT_SYMLINK_NOFOLLOW);
	rec_stat(r, "target owner unchanged", "f", 0);

	/* Exact times. */
	SYS(r, "utimensat exact", utimensat(AT_FDCWD, "f", t1, 0));
	if (stat("f", &st) == 0)
		rec(r, "atime mtime", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	SYS(r, "utimensat atime, mtime OMIT", utimensat(AT_FDCWD, "f", t2, 0));
	if (stat("f", &st) == 0)
		rec(r, "atime set, mtime kept", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	t2[0].tv_nsec = UTIME_OMIT;
	t2[1] = (struct timespec){ 1650000000, 999999999 };
	SYS(r, "utimensat atime OMIT, mtime", utimensat(AT_FDCWD, "f", t2, 0));
	if (stat("f", &st) == 0)
		rec(r, "atime kept, mtime set", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	t2[0].tv_nsec = UTIME_OMIT;
	t2[1].tv_nsec = UTIME_OMIT;
	SYS(r, "utimensat both OMIT", utimensat(AT_FDCWD, "f", t2, 0));
	if (stat("f", &st) == 0)
		rec(r, "both kept", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);

	t0 = now_ns() - 1000000000;	/* coarse kernel clocks may lag a little */
	SYS(r, "utimensat UTIME_NOW", utimensat(AT_FDCWD, "f", tnow, 0));
	tend = now_ns() + 1000000000;
	if (stat("f", &st) == 0)
		rec(r, "UTIME_NOW is now", "atime %d mtime %d",
		    ns_of(&st.st_atim) >= t0 && ns_of(&st.st_atim) <= tend,
		    ns_of(&st.st_mtim) >= t0 && ns_of(&st.st_mtim) <= tend);
	SYS(r, "utimensat exact again", utimensat(AT_FDCWD, "f", t1, 0));
	t0 = now_ns() - 1000000000;
	SYS(r, "utimensat NULL", utimensat(AT_FDCWD, "f", NULL, 0));
	tend = now_ns() + 1000000000;
	if (stat("f", &st) == 0)
		rec(r, "NULL times is now", "atime %d mtime %d",
		    ns_of(&st.st_atim) >= t0 && ns_of(&st.st_atim) <= tend,
		    ns_of(&st.st_mtim) >= t0 && ns_of(&st.st_mtim) <= tend);
	SYS(r, "futimens exact", futimens((int)fd, t1));
	if (fstat((int)fd, &st) == 0)
		rec(r, "futimens times", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	SYS(r, "utimensat missing", utimensat(AT_FDCWD, "missing", t1, 0));

	/* On the symlink itself. */
	stat("f", &before);
	SYS(r, "utimensat NOFOLLOW on symlink", utimensat(AT_FDCWD, "s", tlink, AT_SYMLINK_NOFOLLOW));
	if (lstat("s", &st) == 0)
		rec(r, "symlink times", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	if (stat("f", &st) == 0)
		rec(r, "target mtime unchanged", "%d", ns_of(&st.st_mtim) == ns_of(&before.st_mtim));
	SYS(r, "utimensat following the symlink", utimensat(AT_FDCWD, "s", t1, 0));
	if (stat("f", &st) == 0)
		rec(r, "target times", "%jd.%09ld %jd.%09ld", (intmax_t)st.st_atim.tv_sec,
		    st.st_atim.tv_nsec, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);

	/* ctime moves on chmod, mtime does not. */
	stat("f", &before);
	sleep_ms(30);
	SYS(r, "chmod 640", chmod("f", 0640));
	if (stat("f", &st) == 0)
		rec(r, "chmod: ctime moved, mtime kept", "%d %d",
		    ns_of(&st.st_ctim) > ns_of(&before.st_ctim),
		    ns_of(&st.st_mtim) == ns_of(&before.st_mtim));
	/* Directories. */
	SYS(r, "mkdir d", mkdir("d", 0755));
	SYS(r, "chmod dir 700", chmod("d", 0700));
	rec_stat(r, "d", "d", 0);
	SYS(r, "utimensat dir", utimensat(AT_FDCWD, "d", t1, 0));
	if (stat("d", &st) == 0)
		rec(r, "dir mtime", "%jd.%09ld", (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	mkfile(r, "d/new", "n");
	if (stat("d", &st) == 0)
		rec(r, "dir mtime moved after create", "%d", ns_of(&st.st_mtim) > ns_of(&t1[1]));
	close((int)fd);
}

/* stat fields: type, mode, size, nlink; mtime/ctime after write/read. */
static void c_stat(struct run *r)
{
	struct stat a, b, l;
	char buf[16];
	long fd;

	fd = SYSOK(r, "creat", open("f", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
	rec_fstat(r, "fstat new", (int)fd);
	rec_stat(r, "stat new", "f", 0);
	{
		static char five[5000];

		memset(five, 'a', sizeof(five));
		SYS(r, "write 5000", write((int)fd, five, sizeof(five)));
	}
	rec_fstat(r, "fstat after write", (int)fd);
	rec_stat(r, "stat after write", "f", 0);
	fstat((int)fd, &a);
	sleep_ms(50);
	SYS(r, "write 1 more", write((int)fd, "b", 1));
	fstat((int)fd, &b);
	rec(r, "fstat: mtime and ctime moved", "%d %d", ns_of(&b.st_mtim) > ns_of(&a.st_mtim),
	    ns_of(&b.st_ctim) > ns_of(&a.st_ctim));
	stat("f", &b);
	rec(r, "stat: mtime moved, size", "%d %jd", ns_of(&b.st_mtim) > ns_of(&a.st_mtim),
	    (intmax_t)b.st_size);
	a = b;
	sleep_ms(50);
	SYS(r, "pread", pread((int)fd, buf, sizeof(buf), 0));
	stat("f", &b);
	rec(r, "read leaves mtime", "%d", ns_of(&b.st_mtim) == ns_of(&a.st_mtim));
	SYS(r, "close", close((int)fd));
	stat("f", &b);
	rec(r, "close leaves mtime", "%d", ns_of(&b.st_mtim) == ns_of(&a.st_mtim));
	a = b;
	sleep_ms(50);
	fd = SYSOK(r, "open O_TRUNC", open("f", O_WRONLY | O_TRUNC | O_CLOEXEC));
	stat("f", &b);
	rec(r, "O_TRUNC moves mtime, size", "%d %jd", ns_of(&b.st_mtim) > ns_of(&a.st_mtim),
	    (intmax_t)b.st_size);
	close((int)fd);
	a = b;
	sleep_ms(50);
	SYS(r, "truncate to 7", truncate("f", 7));
	stat("f", &b);
	rec(r, "truncate moves mtime, size", "%d %jd", ns_of(&b.st_mtim) > ns_of(&a.st_mtim),
	    (intmax_t)b.st_size);
	SYS(r, "stat/lstat/fstat agree", (stat("f", &a) == 0 && lstat("f", &l) == 0 &&
					   a.st_ino == l.st_ino && a.st_size == l.st_size) ? 1 : 0);
	SYS(r, "mkdir d", mkdir("d", 0755));
	rec_stat(r, "dir", "d", 0);
	SYS(r, "mkfifo p", mkfifo("p", 0600));
	rec_stat(r, "fifo", "p", 0);
	SYS(r, "symlink l", symlink("d", "l"));
	rec_stat(r, "lstat symlink", "l", AT_SYMLINK_NOFOLLOW);
	rec_stat(r, "stat symlink to dir", "l", 0);
	rec_stat(r, "stat missing", "missing", 0);
	rec_stat(r, "stat through a file", "f/x", 0);
	{
		struct statx sx;

		SYS(r, "statx", statx(AT_FDCWD, "f", AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx));
		rec(r, "statx basics", "%s %04o size=%llu nlink=%u", ftype(sx.stx_mode),
		    sx.stx_mode & 07777, (unsigned long long)sx.stx_size, sx.stx_nlink);
	}
}

/* User extended attributes. */
static void c_xattr(struct run *r)
{
	char buf[8192], big[2000], val[3] = { 'a', '\0', 'b' };
	ssize_t n;
	char *p;

	mkfile(r, "f", "x");
	SYS(r, "set user.a", setxattr("f", "user.a", "v1", 2, 0));
	n = getxattr("f", "user.a", buf, sizeof(buf));
	rec_data(r, "get user.a", buf, n);
	SYS(r, "get size only", getxattr("f", "user.a", NULL, 0));
	SYS(r, "get with 1-byte buffer", getxattr("f", "user.a", buf, 1));
	SYS(r, "get missing", getxattr("f", "user.missing", buf, sizeof(buf)));
	SYS(r, "XATTR_CREATE on existing", setxattr("f", "user.a", "v2", 2, XATTR_CREATE));
	SYS(r, "XATTR_REPLACE on missing", setxattr("f", "user.b", "v2", 2, XATTR_REPLACE));
	SYS(r, "XATTR_CREATE|XATTR_REPLACE on missing",
	    setxattr("f", "user.c", "v2", 2, XATTR_CREATE | XATTR_REPLACE));
	SYS(r, "XATTR_CREATE|XATTR_REPLACE on existing",
	    setxattr("f", "user.a", "v2", 2, XATTR_CREATE | XATTR_REPLACE));
	SYS(r, "XATTR_REPLACE on existing", setxattr("f", "user.a", "v3", 2, XATTR_REPLACE));
	n = getxattr("f", "user.a", buf, sizeof(buf));
	rec_data(r, "get replaced", buf, n);
	SYS(r, "XATTR_CREATE new", setxattr("f", "user.b", val, sizeof(val), XATTR_CREATE));
	n = getxattr("f", "user.b", buf, sizeof(buf));
	rec_data(r, "binary value with NUL", buf, n);
	SYS(r, "empty value", setxattr("f", "user.empty", "", 0, 0));
	SYS(r, "get empty", getxattr("f", "user.empty", buf, sizeof(buf)));
	fill_pattern(big, sizeof(big), 7);
	SYS(r, "2000-byte value", setxattr("f", "user.big", big, sizeof(big), 0));
	n = getxattr("f", "user.big", buf, sizeof(buf));
	rec(r, "2000-byte value back", "%zd %s", n, n == (ssize_t)sizeof(big) && !memcmp(buf, big, sizeof(big)) ? "same" : "DIFFERENT");

	/* listxattr: compare the sorted user.* names. */
	n = listxattr("f", buf, sizeof(buf));
	if (n < 0) {
		rec(r, "list", "-1 %s", errname(errno));
	} else {
		char names[VALUE_LEN] = "";
		const char *sorted[16];
		int k = 0, i, j;

		for (p = buf; p < buf + n && k < 16; p += strlen(p) + 1)
			if (!strncmp(p, "user.", 5))
				sorted[k++] = p;
		for (i = 0; i < k; i++)
			for (j = i + 1; j < k; j++)
				if (strcmp(sorted[j], sorted[i]) < 0) {
					const char *t = sorted[i];

					sorted[i] = sorted[j];
					sorted[j] = t;
				}
		for (i = 0; i < k; i++) {
			strncat(names, sorted[i], sizeof(names) - strlen(names) - 2);
			strcat(names, " ");
		}
		rec(r, "list user.*", "%s", names);
	}
	n = listxattr("f", NULL, 0);
	rec(r, "list size only covers the list", "%d", n > 0 && n >= (ssize_t)strlen("user.a user.b user.big user.empty "));
	SYS(r, "list with 2-byte buffer", listxattr("f", buf, 2));
	SYS(r, "fsetxattr", ({
		int fd = open("f", O_RDONLY | O_CLOEXEC);
		int ret = fsetxattr(fd, "user.fd", "F", 1, 0);
		int e = errno;

		close(fd);
		errno = e;
		ret;
	}));
	n = getxattr("f", "user.fd", buf, sizeof(buf));
	rec_data(r, "get user.fd", buf, n);
	SYS(r, "remove user.a", removexattr("f", "user.a"));
	SYS(r, "remove user.a again", removexattr("f", "user.a"));
	SYS(r, "get removed", getxattr("f", "user.a", buf, sizeof(buf)));
	SYS(r, "mkdir d", mkdir("d", 0755));
	SYS(r, "set on a dir", setxattr("d", "user.d", "D", 1, 0));
	n = getxattr("d", "user.d", buf, sizeof(buf));
	rec_data(r, "get on a dir", buf, n);
	SYS(r, "symlink s -> f", symlink("f", "s"));
	SYS(r, "lsetxattr user.* on a symlink", lsetxattr("s", "user.l", "L", 1, 0));
	SYS(r, "lgetxattr on a symlink", lgetxattr("s", "user.b", buf, sizeof(buf)));
	n = getxattr("s", "user.b", buf, sizeof(buf));
	rec_data(r, "getxattr follows the symlink", buf, n);
	SYS(r, "bad namespace", setxattr("f", "bogus.x", "1", 1, 0));
	SYS(r, "on missing file", getxattr("missing", "user.a", buf, sizeof(buf)));
	{
		char name[300] = "user.";

		memset(name + 5, 'n', 250);
		name[255] = '\0';
		SYS(r, "255-byte name", setxattr("f", name, "1", 1, 0));
		memset(name + 5, 'n', 251);
		name[256] = '\0';
		SYS(r, "256-byte name", setxattr("f", name, "1", 1, 0));
	}
}

/* fallocate(2): plain, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE; posix_fallocate. */
static void c_fallocate(struct run *r)
{
	unsigned char buf[65536], pat[65536];
	long fd;
	ssize_t n;

	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "fallocate 0..1 MiB", fallocate((int)fd, 0, 0, 1 << 20));
	rec_fstat(r, "size 1 MiB", (int)fd);
	n = pread((int)fd, buf, sizeof(buf), 12345);
	rec(r, "reads zeros", "%zd %d", n, n > 0 && all_zero(buf, (size_t)n));
	SYS(r, "KEEP_SIZE beyond EOF", fallocate((int)fd, FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20));
	rec_fstat(r, "size unchanged", (int)fd);
	fill_pattern(pat, sizeof(pat), 3);
	SYS(r, "write 64 KiB at 0", pwrite((int)fd, pat, sizeof(pat), 0));
	SYS(r, "PUNCH_HOLE|KEEP_SIZE 4 KiB..12 KiB", fallocate((int)fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192));
	rec_fstat(r, "size unchanged", (int)fd);
	n = pread((int)fd, buf, sizeof(buf), 0);
	rec(r, "punched range zero, rest kept", "%zd %d %d %d", n, !memcmp(buf, pat, 4096),
	    all_zero(buf + 4096, 8192), !memcmp(buf + 12288, pat + 12288, sizeof(pat) - 12288));
	SYS(r, "PUNCH_HOLE alone", fallocate((int)fd, FALLOC_FL_PUNCH_HOLE, 0, 4096));
	SYS(r, "ZERO_RANGE 20000+100", fallocate((int)fd, FALLOC_FL_ZERO_RANGE, 20000, 100));
	n = pread((int)fd, buf, 200, 19950);
	rec(r, "zeroed range", "%zd %d %d %d", n, !memcmp(buf, pat + 19950, 50), all_zero(buf + 50, 100),
	    !memcmp(buf + 150, pat + 20100, 50));
	SYS(r, "fallocate extends size", fallocate((int)fd, 0, 2 << 20, 4096));
	rec_fstat(r, "size", (int)fd);
	SYS(r, "fallocate len 0", fallocate((int)fd, 0, 0, 0));
	SYS(r, "fallocate negative offset", fallocate((int)fd, 0, -1, 10));
	SYS(r, "SEEK_HOLE after punch", lseek((int)fd, 0, SEEK_HOLE));
	SYS(r, "close", close((int)fd));
	fd = SYSOK(r, "open O_RDONLY", open("f", O_RDONLY | O_CLOEXEC));
	SYS(r, "fallocate on O_RDONLY", fallocate((int)fd, 0, 0, 4096));
	close((int)fd);
	fd = SYSOK(r, "open g", open("g", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "posix_fallocate 100000", -posix_fallocate((int)fd, 0, 100000) == 0 ? 0 : -1);
	rec_fstat(r, "size 100000", (int)fd);
	close((int)fd);
}

/* copy_file_range(2). */
static void c_copy_range(struct run *r)
{
	unsigned char pat[102400];
	loff_t in_off, out_off;
	long in, out;

	fill_pattern(pat, sizeof(pat), 11);
	in = SYSOK(r, "open src", open("src", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write 100 KiB", write((int)in, pat, sizeof(pat)));
	out = SYSOK(r, "open dst", open("dst", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	in_off = 10;
	out_off = 5;
	SYS(r, "copy 50 KiB 10 -> 5", copy_file_range((int)in, &in_off, (int)out, &out_off, 51200, 0));
	rec(r, "offsets advanced", "%jd %jd", (intmax_t)in_off, (intmax_t)out_off);
	rec_fstat(r, "dst size", (int)out);
	rec_pread(r, "dst data", (int)out, 0, 51205);
	{
		unsigned char *buf = malloc(51200);
		ssize_t n = pread((int)out, buf, 51200, 5);

		rec(r, "dst matches src", "%zd %d", n, n == 51200 && !memcmp(buf, pat + 10, 51200));
		free(buf);
	}
	in_off = sizeof(pat) - 100;
	out_off = 0;
	SYS(r, "copy across src EOF", copy_file_range((int)in, &in_off, (int)out, &out_off, 1000, 0));
	in_off = sizeof(pat) + 10;
	SYS(r, "copy at src EOF", copy_file_range((int)in, &in_off, (int)out, &out_off, 1000, 0));
	/* File positions are used when offsets are NULL. */
	SYS(r, "lseek src 0", lseek((int)in, 0, SEEK_SET));
	SYS(r, "lseek dst end", lseek((int)out, 0, SEEK_END));
	SYS(r, "copy with file positions", copy_file_range((int)in, NULL, (int)out, NULL, 1000, 0));
	SYS(r, "src position", lseek((int)in, 0, SEEK_CUR));
	SYS(r, "dst position", lseek((int)out, 0, SEEK_CUR));
	rec_fstat(r, "dst size", (int)out);
	in_off = 0;
	out_off = 100;
	SYS(r, "overlapping in one file", copy_file_range((int)in, &in_off, (int)in, &out_off, 1000, 0));
	in_off = 0;
	out_off = 50000;
	SYS(r, "same file, no overlap", copy_file_range((int)in, &in_off, (int)in, &out_off, 1000, 0));
	rec_pread(r, "src after self copy", (int)in, 50000, 1000);
	SYS(r, "bad flags", copy_file_range((int)in, NULL, (int)out, NULL, 10, 1));
	close((int)in);
	close((int)out);
	in = SYSOK(r, "open src O_WRONLY", open("src", O_WRONLY | O_CLOEXEC));
	out = SYSOK(r, "open dst O_RDONLY", open("dst", O_RDONLY | O_CLOEXEC));
	SYS(r, "copy from a write-only fd", copy_file_range((int)in, NULL, (int)out, NULL, 10, 0));
	close((int)in);
	close((int)out);
}

/* statfs/statvfs sanity. */
static void c_statfs(struct run *r)
{
	struct statvfs v;
	long fd;

	if (SYS(r, "statvfs .", statvfs(".", &v)) == 0) {
		rec(r, "bsize>0 frsize>0", "%d %d", v.f_bsize > 0, v.f_frsize > 0);
		rec(r, "blocks>=bfree>=bavail", "%d", v.f_blocks >= v.f_bfree && v.f_bfree >= v.f_bavail);
		rec(r, "blocks>0", "%d", v.f_blocks > 0);
		rec(r, "files>=ffree", "%d", v.f_files >= v.f_ffree);
		rec(r, "namemax", "%lu", v.f_namemax);
	}
	mkfile(r, "f", "x");
	fd = SYSOK(r, "open", open("f", O_RDONLY | O_CLOEXEC));
	if (SYS(r, "fstatvfs", fstatvfs((int)fd, &v)) == 0)
		rec(r, "fstatvfs namemax", "%lu", v.f_namemax);
	close((int)fd);
	SYS(r, "statvfs missing", statvfs("missing", &v));
}

/* fsync/fdatasync/syncfs. */
static void c_fsync(struct run *r)
{
	long fd, dfd, rfd;

	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write", write((int)fd, "durable", 7));
	SYS(r, "fsync", fsync((int)fd));
	SYS(r, "fdatasync", fdatasync((int)fd));
	SYS(r, "syncfs", syncfs((int)fd));
	SYS(r, "fsync again (nothing dirty)", fsync((int)fd));
	SYS(r, "close", close((int)fd));
	rfd = SYSOK(r, "open O_RDONLY", open("f", O_RDONLY | O_CLOEXEC));
	SYS(r, "fsync O_RDONLY fd", fsync((int)rfd));
	SYS(r, "close", close((int)rfd));
	dfd = SYSOK(r, "open dir", open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	SYS(r, "fsync a dir", fsync((int)dfd));
	SYS(r, "close", close((int)dfd));
	SYS(r, "mkfifo", mkfifo("p", 0644));
	rfd = SYSOK(r, "open fifo nonblock", open("p", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
	SYS(r, "fsync a fifo", fsync((int)rfd));
	close((int)rfd);
	rec_file(r, "content", "f");
}

/* mknod: FIFO (and I/O through it), regular file, socket node. */
static void c_mknod(struct run *r)
{
	char buf[16] = "";
	long rfd, wfd;

	SYS(r, "mkfifo", mkfifo("p", 0640));
	rec_stat(r, "fifo", "p", AT_SYMLINK_NOFOLLOW);
	SYS(r, "mkfifo again", mkfifo("p", 0640));
	SYS(r, "open fifo for writing, no reader", open("p", O_WRONLY | O_NONBLOCK | O_CLOEXEC));
	rfd = SYSOK(r, "open fifo reader", open("p", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
	wfd = SYSOK(r, "open fifo writer", open("p", O_WRONLY | O_NONBLOCK | O_CLOEXEC));
	SYS(r, "write to fifo", write((int)wfd, "through", 7));
	SYS(r, "read from fifo", read((int)rfd, buf, sizeof(buf)));
	rec_data(r, "fifo data", buf, 7);
	close((int)rfd);
	close((int)wfd);
	SYS(r, "mknod S_IFREG", mknod("r", S_IFREG | 0600, 0));
	rec_stat(r, "regular", "r", 0);
	SYS(r, "mknod S_IFSOCK", mknod("sock", S_IFSOCK | 0755, 0));
	rec_stat(r, "socket node", "sock", AT_SYMLINK_NOFOLLOW);
	SYS(r, "mknod over existing", mknod("r", S_IFIFO | 0600, 0));
	SYS(r, "unlink fifo", unlink("p"));
}

/* access(2)/faccessat(2) as root. */
static void c_access(struct run *r)
{
	mkfile(r, "f", "x");
	SYS(r, "F_OK", access("f", F_OK));
	SYS(r, "R_OK|W_OK", access("f", R_OK | W_OK));
	SYS(r, "X_OK on 0644", access("f", X_OK));
	SYS(r, "chmod 0744", chmod("f", 0744));
	SYS(r, "X_OK on 0744", access("f", X_OK));
	SYS(r, "chmod 0", chmod("f", 0));
	SYS(r, "W_OK on 0000 as root", access("f", W_OK));
	SYS(r, "X_OK on 0000 as root", access("f", X_OK));
	SYS(r, "missing", access("missing", F_OK));
	SYS(r, "through a file", access("f/x", F_OK));
	SYS(r, "mkdir d 0700", mkdir("d", 0700));
	SYS(r, "X_OK on dir", access("d", X_OK));
	SYS(r, "symlink dangling", symlink("nowhere", "dl"));
	SYS(r, "access dangling", access("dl", F_OK));
	SYS(r, "faccessat NOFOLLOW dangling", faccessat(AT_FDCWD, "dl", F_OK, AT_SYMLINK_NOFOLLOW));
	SYS(r, "faccessat AT_EACCESS", faccessat(AT_FDCWD, "d", R_OK | X_OK, AT_EACCESS));
}

/* getdents64 of a directory with N entries: each exactly once; d_type;
 * seekdir/telldir; unlinking while reading. */
static void c_getdents(struct run *r)
{
	int n = g_nentries, i, bad = 0, dots = 0, seen = 0, dup = 0, missing = 0;
	unsigned char *mark = calloc((size_t)n, 1);
	char name[300], buf[1024], xs[201];
	long fd;
	ssize_t got;

	memset(xs, 'x', 200);
	xs[200] = '\0';

	if (!mark) {
		rec(r, "calloc", "failed");
		return;
	}
	SYS(r, "mkdir d", mkdir("d", 0755));
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "d/e%06d_%.*s", i, i % 200, xs);
		int cfd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

		if (cfd < 0 || close(cfd) < 0)
			bad++;
	}
	rec(r, "creates failed", "%d of %d", bad, n);
	SYS(r, "mkdir d/sub", mkdir("d/sub", 0755));
	SYS(r, "symlink d/link", symlink("sub", "d/link"));
	SYS(r, "mkfifo d/fifo", mkfifo("d/fifo", 0644));

	/* getdents64 with a 1 KiB buffer: many calls, each entry once. */
	fd = SYSOK(r, "open d", open("d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	{
		char types[64] = "";

		while ((got = syscall(SYS_getdents64, (int)fd, buf, sizeof(buf))) > 0) {
			long off;

			for (off = 0; off < got;) {
				struct dirent64 *de = (struct dirent64 *)(buf + off);
				int idx;

				off += de->d_reclen;
				if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) {
					dots++;
					continue;
				}
				seen++;
				if (sscanf(de->d_name, "e%06d_", &idx) == 1 && idx >= 0 && idx < n) {
					if (mark[idx]++)
						dup++;
					if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
						bad++;
				} else {
					char t[300];

					snprintf(t, sizeof(t), "%.20s=%d ", de->d_name, de->d_type);
					if (strlen(types) + strlen(t) < sizeof(types))
						strcat(types, t);
				}
			}
		}
		rec_sys(r, "getdents end", got, errno, true);
		for (i = 0; i < n; i++)
			if (!mark[i])
				missing++;
		rec(r, "entries seen (N + 3)", "%d", seen);
		rec(r, "duplicates", "%d", dup);
		rec(r, "missing", "%d", missing);
		rec(r, "dot entries", "%d", dots);
		rec(r, "file d_type wrong", "%d", bad);
		/* The three others, sorted by construction of the names. */
		rec(r, "special d_types", "%d %d %d", strstr(types, "fifo=1 ") != NULL,
		    strstr(types, "link=10 ") != NULL, strstr(types, "sub=4 ") != NULL);
	}
	SYS(r, "lseek dir 0 (rewind)", lseek((int)fd, 0, SEEK_SET));
	got = syscall(SYS_getdents64, (int)fd, buf, sizeof(buf));
	rec(r, "rewind reads again", "%d", got > 0);
	close((int)fd);

	/* telldir/seekdir give the same continuation. */
	{
		DIR *d = opendir("d");
		struct dirent *de;
		char a[VALUE_LEN] = "", b[VALUE_LEN] = "";
		long pos;
		int k;

		for (k = 0; d && k < n / 3 && readdir(d); k++)
			;
		pos = d ? telldir(d) : -1;
		for (k = 0; d && k < 5 && (de = readdir(d)); k++) {
			snprintf(a + strlen(a), sizeof(a) - strlen(a), "%.12s ", de->d_name);
		}
		if (d)
			seekdir(d, pos);
		for (k = 0; d && k < 5 && (de = readdir(d)); k++) {
			snprintf(b + strlen(b), sizeof(b) - strlen(b), "%.12s ", de->d_name);
		}
		rec(r, "seekdir(telldir) repeats the same entries", "%d", d && !strcmp(a, b) && a[0]);
		if (d)
			closedir(d);
	}

	/* rm -r style: unlink every entry of each batch as it is read. */
	fd = SYSOK(r, "open d again", open("d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	memset(mark, 0, (size_t)n);
	seen = dup = bad = 0;
	while ((got = syscall(SYS_getdents64, (int)fd, buf, sizeof(buf))) > 0) {
		long off;

		for (off = 0; off < got;) {
			struct dirent64 *de = (struct dirent64 *)(buf + off);
			int idx;

			off += de->d_reclen;
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			seen++;
			if (sscanf(de->d_name, "e%06d_", &idx) == 1 && idx >= 0 && idx < n && mark[idx]++)
				dup++;
			if (unlinkat((int)fd, de->d_name, !strcmp(de->d_name, "sub") ? AT_REMOVEDIR : 0) < 0)
				bad++;
		}
	}
	close((int)fd);
	rec(r, "unlink while reading: seen, dup, failed", "%d %d %d", seen, dup, bad);
	SYS(r, "rmdir d right after", rmdir("d"));
	free(mark);
}

/* Names are bytes: spaces, newlines, non-UTF-8, both Unicode normal forms. */
static void c_names(struct run *r)
{
	static const char *const names[] = {
		"a b", "new\nline", "\xff\xfe", "caf\xc3\xa9", "cafe\xcc\x81", "tab\t",
		"q'\"", "back\\slash", "-dash", " lead", "trail ", "CaSe", "case",
		"\x01\x7f", "*?[", "~", "..a", "a..", ".hidden", "%s%n",
	};
	size_t k;
	char label[LABEL_LEN], esc[40];
	long fd;

	for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		escape(esc, sizeof(esc), names[k], strlen(names[k]));
		snprintf(label, sizeof(label), "create '%s'", esc);
		fd = SYSOK(r, label, open(names[k], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
		if (fd >= 0) {
			dprintf((int)fd, "%zu", k);
			close((int)fd);
		}
	}
	for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		escape(esc, sizeof(esc), names[k], strlen(names[k]));
		snprintf(label, sizeof(label), "read '%s'", esc);
		rec_file(r, label, names[k]);
	}
	/* The listing holds exactly these names, byte for byte. */
	{
		DIR *d = opendir(".");
		struct dirent *de;
		size_t found = 0, extra = 0, j;

		while (d && (de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			for (j = 0; j < sizeof(names) / sizeof(names[0]); j++)
				if (!strcmp(de->d_name, names[j]))
					break;
			if (j < sizeof(names) / sizeof(names[0]))
				found++;
			else
				extra++;
		}
		if (d)
			closedir(d);
		rec(r, "listing: found, extra", "%zu %zu", found, extra);
	}
	{
		char longname[300];

		memset(longname, 'L', 255);
		longname[255] = '\0';
		fd = SYSOK(r, "create 255-byte name", open(longname, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
		if (fd >= 0)
			close((int)fd);
		rec_stat(r, "stat 255-byte name", longname, 0);
		longname[255] = 'L';
		longname[256] = '\0';
		SYS(r, "create 256-byte name", open(longname, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
		rec_stat(r, "stat 256-byte name", longname, 0);
	}
	SYS(r, "rename to a newline name", rename("a b", "x\ny"));
	rec_file(r, "read it", "x\ny");
	SYS(r, "mkdir non-UTF-8 dir", mkdir("\xc3\x28", 0755));
	fd = SYSOK(r, "create inside it", open("\xc3\x28/\xe2\x82", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	if (fd >= 0)
		close((int)fd);
	rec_stat(r, "stat inside", "\xc3\x28/\xe2\x82", 0);
}

/* mmap: MAP_SHARED writes reach the file; MAP_PRIVATE reads it. */
static void c_mmap(struct run *r)
{
	unsigned char pat[65536];
	long fd;
	void *m;

	fill_pattern(pat, sizeof(pat), 5);
	fd = SYSOK(r, "open", open("f", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	SYS(r, "write 64 KiB", write((int)fd, pat, sizeof(pat)));
	m = (void *)SYSOK(r, "mmap MAP_PRIVATE read", mmap(NULL, sizeof(pat), PROT_READ, MAP_PRIVATE, (int)fd, 0));
	if (m != MAP_FAILED) {
		rec(r, "mapped data", "%d", !memcmp(m, pat, sizeof(pat)));
		munmap(m, sizeof(pat));
	}
	m = (void *)SYSOK(r, "mmap MAP_SHARED rw", mmap(NULL, sizeof(pat), PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0));
	if (m != MAP_FAILED) {
		memcpy((char *)m + 5000, "mapped!", 7);
		SYS(r, "msync", msync(m, sizeof(pat), MS_SYNC));
		SYS(r, "munmap", munmap(m, sizeof(pat)));
	}
	rec_pread(r, "pread sees the mapped write", (int)fd, 5000, 7);
	SYS(r, "close", close((int)fd));
	rec_pread(r, "after close", (int)(fd = open("f", O_RDONLY | O_CLOEXEC)), 4998, 11);
	SYSOK(r, "mmap MAP_SHARED rw on O_RDONLY", mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0));
	close((int)fd);
	/* A write through write(2) shows in an existing shared mapping. */
	fd = SYSOK(r, "open again", open("f", O_RDWR | O_CLOEXEC));
	m = (void *)SYSOK(r, "mmap MAP_SHARED read", mmap(NULL, sizeof(pat), PROT_READ, MAP_SHARED, (int)fd, 0));
	SYS(r, "pwrite", pwrite((int)fd, "seen?", 5, 100));
	if (m != MAP_FAILED) {
		rec_data(r, "mapping shows pwrite", (char *)m + 100, 5);
		munmap(m, sizeof(pat));
	}
	close((int)fd);
	/* O_RDWR|O_APPEND maps shared too; an append shows in the mapping. */
	fd = SYSOK(r, "open O_RDWR|O_APPEND", open("f", O_RDWR | O_APPEND | O_CLOEXEC));
	m = (void *)SYSOK(r, "mmap MAP_SHARED rw, O_APPEND",
			  mmap(NULL, sizeof(pat) + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0));
	SYS(r, "append", write((int)fd, "tail", 4));
	if (m != MAP_FAILED) {
		rec_data(r, "mapping shows the append", (char *)m + sizeof(pat), 4);
		memcpy((char *)m + 7, "MAP", 3);
		SYS(r, "msync, O_APPEND", msync(m, sizeof(pat) + 4096, MS_SYNC));
		munmap(m, sizeof(pat) + 4096);
	}
	rec_pread(r, "pread sees the mapped write, O_APPEND", (int)fd, 5, 8);
	close((int)fd);
}

/* flock and fcntl locks (one process, two descriptors / a child). */
static void c_locks(struct run *r)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	long fd1, fd2;
	pid_t pid;
	int st;

	mkfile(r, "f", "lock");
	fd1 = SYSOK(r, "open 1", open("f", O_RDWR | O_CLOEXEC));
	fd2 = SYSOK(r, "open 2", open("f", O_RDWR | O_CLOEXEC));
	SYS(r, "flock EX 1", flock((int)fd1, LOCK_EX | LOCK_NB));
	SYS(r, "flock EX 2 (conflict)", flock((int)fd2, LOCK_EX | LOCK_NB));
	SYS(r, "flock UN 1", flock((int)fd1, LOCK_UN));
	SYS(r, "flock EX 2", flock((int)fd2, LOCK_EX | LOCK_NB));
	SYS(r, "flock UN 2", flock((int)fd2, LOCK_UN));
	SYS(r, "F_SETLK write", fcntl((int)fd1, F_SETLK, &fl));
	pid = fork();
	if (pid == 0) {
		int cfd = open("f", O_RDWR | O_CLOEXEC);
		struct flock c = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

		if (fcntl(cfd, F_SETLK, &c) == 0)
			_exit(0);
		_exit(errno == EAGAIN || errno == EACCES ? 10 : 20);
	}
	waitpid(pid, &st, 0);
	rec(r, "other process F_SETLK conflicts", "%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	fl.l_type = F_UNLCK;
	SYS(r, "F_SETLK unlock", fcntl((int)fd1, F_SETLK, &fl));
	close((int)fd1);
	close((int)fd2);
}

static volatile sig_atomic_t g_signals;

static void on_alarm(int sig)
{
	(void)sig;
	g_signals++;
}

/* A timer signal every 500 us (SA_RESTART) while files are written,
 * fsync'ed, closed, read, renamed, listed: no call may fail with EINTR or
 * come back short (G4: an interrupt never makes flush or close fail). */
static void c_interrupts(struct run *r)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval it = { { 0, 500 }, { 0, 500 } };
	static unsigned char buf[256 << 10], back[256 << 10];
	int i, fails[8] = { 0 }, first = 0;
	const char *what[8] = { "open", "write", "fsync", "close", "read", "rename", "stat", "list" };

	fill_pattern(buf, sizeof(buf), 9);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (i = 0; i < 40; i++) {
		struct stat st;
		ssize_t n;
		int fd = open("f.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

#define FAIL(k) do { fails[k]++; if (!first) first = errno ? errno : -1; } while (0)
		if (fd < 0) {
			FAIL(0);
			continue;
		}
		n = write(fd, buf, sizeof(buf));
		if (n != (ssize_t)sizeof(buf))
			FAIL(1);
		if (fsync(fd) < 0)
			FAIL(2);
		if (close(fd) < 0)
			FAIL(3);
		if (rename("f.tmp", "f") < 0)
			FAIL(5);
		fd = open("f", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			FAIL(0);
			continue;
		}
		n = read(fd, back, sizeof(back));
		if (n != (ssize_t)sizeof(back) || memcmp(buf, back, sizeof(buf)))
			FAIL(4);
		if (close(fd) < 0)
			FAIL(3);
		if (stat("f", &st) < 0)
			FAIL(6);
		DIR *d = opendir(".");

		if (!d)
			FAIL(7);
		else {
			while (readdir(d))
				;
			closedir(d);
		}
#undef FAIL
	}
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_REAL, &it, NULL);
	for (i = 0; i < 8; i++)
		rec(r, what[i], "failed %d", fails[i]);
	rec(r, "first error", "%s", first > 0 ? errname(first) : first < 0 ? "short" : "none");
	rec(r, "signals were delivered", "%d", g_signals > 0);
}

static const struct fcase cases[] = {
	{ "open_flags", c_open_flags, "O_CREAT|O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW, creation mode" },
	{ "rw", c_rw, "read/write/pread/pwrite at offsets and past EOF, vectors, 3 MiB buffers" },
	{ "truncate", c_truncate, "ftruncate/truncate up and down" },
	{ "seek", c_seek, "lseek incl. SEEK_DATA/SEEK_HOLE on a sparse file" },
	{ "unlink_open", c_unlink_open, "unlink or rename over an open file, I/O through its fd" },
	{ "rename", c_rename, "rename and renameat2 (NOREPLACE, EXCHANGE), directories" },
	{ "links", c_links, "link, symlink, readlink" },
	{ "dirs", c_dirs, "mkdir/rmdir and their errors" },
	{ "attrs", c_attrs, "chmod/chown/utimensat (UTIME_NOW, UTIME_OMIT, AT_SYMLINK_NOFOLLOW)" },
	{ "stat", c_stat, "stat fields; mtime/ctime after write, read, truncate" },
	{ "xattr", c_xattr, "user.* xattrs: ENODATA, ERANGE, XATTR_CREATE/REPLACE" },
	{ "fallocate", c_fallocate, "fallocate incl. KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE" },
	{ "copy_range", c_copy_range, "copy_file_range" },
	{ "statfs", c_statfs, "statvfs sanity" },
	{ "fsync", c_fsync, "fsync, fdatasync, syncfs" },
	{ "mknod", c_mknod, "FIFO, regular and socket nodes" },
	{ "access", c_access, "access/faccessat as root" },
	{ "getdents", c_getdents, "a directory of N entries: each once; seekdir; unlink while reading" },
	{ "names", c_names, "byte-exact names, NAME_MAX" },
	{ "mmap", c_mmap, "MAP_SHARED and MAP_PRIVATE" },
	{ "locks", c_locks, "flock and fcntl locks" },
	{ "interrupts", c_interrupts, "a timer signal storm during I/O: no EINTR" },
};

/* ------------------------------------------------------------------ driver */

/* Run case C in TOP/C->name in a child process; results into R. */
static void run_case(const struct fcase *c, const char *top, struct run *r, int timeout_s)
{
	int64_t deadline;
	pid_t pid;
	int st;

	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "%s/%s", top, c->name);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rec(r, "fork", "-1 %s", errname(errno));
		return;
	}
	if (pid == 0) {
		umask(022);
		if (mkdir(r->dir, 0755) < 0) {
			rec(r, "setup mkdir", "-1 %s", errname(errno));
			_exit(3);
		}
		if (chdir(r->dir) < 0) {
			rec(r, "setup chdir", "-1 %s", errname(errno));
			_exit(3);
		}
		c->fn(r);
		_exit(0);
	}
	deadline = now_ns() + (int64_t)timeout_s * 1000000000;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			rec(r, "waitpid", "-1 %s", errname(errno));
			return;
		}
		if (now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			rec(r, "TIMEOUT", "killed after %d s", timeout_s);
			return;
		}
		sleep_ms(5);
	}
	if (WIFSIGNALED(st))
		rec(r, "CRASH", "signal %d", WTERMSIG(st));
	else if (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3)
		rec(r, "EXIT", "status %d", WEXITSTATUS(st));
	if (r->overflow)
		rec(r, "OVERFLOW", "more than %d steps", MAX_RECS);
}

/* Compare two runs of case NAME; print a line per step; return mismatches. */
static int compare(const char *name, const struct run *l, const struct run *m, int *nops)
{
	int i, bad = 0, n = l->n > m->n ? l->n : m->n;

	for (i = 0; i < n; i++) {
		const struct rec *a = i < l->n ? &l->recs[i] : NULL;
		const struct rec *b = i < m->n ? &m->recs[i] : NULL;

		(*nops)++;
		if (a && b && !strcmp(a->label, b->label) && !strcmp(a->value, b->value)) {
			printf("ok %s/%s %s\n", name, a->label, a->value);
			continue;
		}
		bad++;
		if (a && b && !strcmp(a->label, b->label))
			printf("MISMATCH %s/%s local=%s mount=%s\n", name, a->label, a->value, b->value);
		else
			printf("MISMATCH %s/%s local=%s mount=%s%s%s\n", name,
			       a ? a->label : b->label, a ? a->value : "<no such step>",
			       b ? b->value : "<no such step>", b && a ? " at step " : "",
			       b && a ? b->label : "");
	}
	return bad;
}

static void usage(FILE *f)
{
	size_t k;

	fprintf(f,
		"Usage: fsx [-n ENTRIES] [-t SECONDS] [-c CASE]... [-l] LOCALDIR MOUNTDIR\n"
		"Run every case (or each -c CASE) in LOCALDIR/CASE and MOUNTDIR/CASE and\n"
		"compare the results step by step. -n: entries for getdents (default 1000);\n"
		"-t: per-case time limit (default 120). Exit 0 all match, 1 mismatch, 2 error.\n"
		"Cases:\n");
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		fprintf(f, "  %-12s %s\n", cases[k].name, cases[k].what);
}

int main(int argc, char **argv)
{
	const char *only[64];
	int nonly = 0, timeout_s = 120, opt, total_bad = 0, nops = 0, ncases = 0;
	struct run *runs;
	size_t k;

	while ((opt = getopt(argc, argv, "n:t:c:lh")) != -1) {
		switch (opt) {
		case 'n':
			g_nentries = atoi(optarg);
			if (g_nentries < 1 || g_nentries > 1000000) {
				fprintf(stderr, "fsx: -n wants 1..1000000\n");
				return 2;
			}
			break;
		case 't':
			timeout_s = atoi(optarg);
			if (timeout_s < 1) {
				fprintf(stderr, "fsx: -t wants a positive number of seconds\n");
				return 2;
			}
			break;
		case 'c':
			if (nonly < 64)
				only[nonly++] = optarg;
			break;
		case 'l':
			usage(stdout);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	for (opt = 0; opt < nonly; opt++) {
		for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
			if (!strcmp(only[opt], cases[k].name))
				break;
		if (k == sizeof(cases) / sizeof(cases[0])) {
			fprintf(stderr, "fsx: no case '%s' (fsx -l lists them)\n", only[opt]);
			return 2;
		}
	}
	runs = mmap(NULL, 2 * sizeof(struct run), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (runs == MAP_FAILED) {
		perror("fsx: mmap");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		bool want = nonly == 0;
		int bad;

		for (opt = 0; opt < nonly; opt++)
			if (!strcmp(only[opt], cases[k].name))
				want = true;
		if (!want)
			continue;
		ncases++;
		run_case(&cases[k], argv[optind], &runs[0], timeout_s);
		run_case(&cases[k], argv[optind + 1], &runs[1], timeout_s);
		if (runs[0].n > 0 && !strncmp(runs[0].recs[0].label, "setup", 5)) {
			fprintf(stderr, "fsx: cannot set up %s in %s: %s\n", cases[k].name,
				argv[optind], runs[0].recs[0].value);
			return 2;
		}
		bad = compare(cases[k].name, &runs[0], &runs[1], &nops);
		total_bad += bad;
	}
	printf("fsx: %d cases, %d steps, %d mismatches\n", ncases, nops, total_bad);
	return total_bad ? 1 : 0;
}
