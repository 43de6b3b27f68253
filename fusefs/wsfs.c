/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs: mount an agentd workspace with FUSE (libfuse 3 low-level API).
 *
 *   wsfs [-o OPTS] [-f] [-d] [--token-file F] ADDR MOUNTPOINT [-o OPTS]
 *   wsfs --exec 'CMD' MOUNTPOINT
 *
 * Options are parsed with fuse_opt_parse, so they may follow the positional
 * arguments, as mount.fuse3 passes them (`wsfs SOURCE MOUNTPOINT -o OPTS`
 * for `mount -t fuse.wsfs` and fstab). Options wsfs does not know go to
 * fuse_session_new (allow_other, default_permissions, ro, ...). With
 * allow_other wsfs adds default_permissions: every call reaches agentd as
 * agentd's user, so without it any user on the host could read and change
 * every file (the kernel checks each caller against the file's mode and
 * owner with it; mount.fuse(8) "default_permissions"). A /dev/fd/N mount
 * point (mount.fuse3 -o drop_privileges) was mounted by the caller with
 * fstab's options: there allow_other without default_permissions is
 * refused. (allow_root lets only root in besides the owner, and root
 * passes those checks anyway.)
 *
 * Start-up order: parse, create the FUSE session, fork into the background
 * unless -f (before any thread exists: gRPC's threads do not survive fork),
 * connect and stat the root (so a wrong address fails the mount command with
 * a message), mount, tell the waiting parent, then run the multithreaded
 * session loop until `fusermount3 -u`. Main thread only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "fs.h"
#include "wsb.h"

#include <fuse_opt.h>

struct opts {
	char *pos[2];
	int n_pos;
	char *exec_cmd;
	char *token_file;
	double entry_timeout;
	double attr_timeout;
	double negative_timeout;
	double watch_timeout;
	double rpc_timeout;
	unsigned max_threads;
	unsigned read_ahead_kb;
	unsigned read_chunk_kb;
	unsigned max_dir_entries;
	unsigned write_behind;
	unsigned setattr_behind;
	unsigned unlink_behind;
	unsigned op_streams;
	unsigned gather_ms;
	int foreground;
	int single;
	int clone_fd;
	int no_watch;
	int transform_symlinks;
	int debug;
	int allow_other;         /* allow_other was given */
	int default_permissions; /* default_permissions was given */
	int help;
	int version;
	int bad;
	int bad_value; /* a number option's value did not parse: said so */
};

enum { KEY_DEBUG, KEY_HELP, KEY_VERSION, KEY_NUM, KEY_ALLOW_OTHER, KEY_DEFAULT_PERMISSIONS };

#define OPT(t, f, v) { t, offsetof(struct opts, f), v }

static const struct fuse_opt spec[] = {
	/* Numbers: num_opt() reads the whole value (fuse_opt's %u and %lf
	 * are sscanf's, which take "4k" for 4 and "0x1" for 0). */
	FUSE_OPT_KEY("entry_timeout=", KEY_NUM),
	FUSE_OPT_KEY("attr_timeout=", KEY_NUM),
	FUSE_OPT_KEY("negative_timeout=", KEY_NUM),
	FUSE_OPT_KEY("watch_timeout=", KEY_NUM),
	FUSE_OPT_KEY("rpc_timeout=", KEY_NUM),
	FUSE_OPT_KEY("max_threads=", KEY_NUM),
	FUSE_OPT_KEY("read_ahead_kb=", KEY_NUM),
	FUSE_OPT_KEY("read_chunk_kb=", KEY_NUM),
	FUSE_OPT_KEY("max_dir_entries=", KEY_NUM),
	FUSE_OPT_KEY("write_behind=", KEY_NUM),
	FUSE_OPT_KEY("setattr_behind=", KEY_NUM),
	FUSE_OPT_KEY("unlink_behind=", KEY_NUM),
	FUSE_OPT_KEY("op_streams=", KEY_NUM),
	FUSE_OPT_KEY("gather_ms=", KEY_NUM),
	OPT("token_file=%s", token_file, 0),
	OPT("--token-file=%s", token_file, 0),
	OPT("--token-file %s", token_file, 0),
	OPT("--exec=%s", exec_cmd, 0),
	OPT("--exec %s", exec_cmd, 0),
	OPT("no_watch", no_watch, 1),
	OPT("transform_symlinks", transform_symlinks, 1),
	OPT("clone_fd", clone_fd, 1),
	OPT("-f", foreground, 1),
	OPT("--foreground", foreground, 1),
	OPT("-s", single, 1),
	FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("default_permissions", KEY_DEFAULT_PERMISSIONS),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_END
};

/* The options num_opt() reads: a double (seconds) or an unsigned. */
static const struct num_opt {
	const char *name;
	size_t off;
	bool real;
} num_opts[] = {
	{ "entry_timeout", offsetof(struct opts, entry_timeout), true },
	{ "attr_timeout", offsetof(struct opts, attr_timeout), true },
	{ "negative_timeout", offsetof(struct opts, negative_timeout), true },
	{ "watch_timeout", offsetof(struct opts, watch_timeout), true },
	{ "rpc_timeout", offsetof(struct opts, rpc_timeout), true },
	{ "max_threads", offsetof(struct opts, max_threads), false },
	{ "read_ahead_kb", offsetof(struct opts, read_ahead_kb), false },
	{ "read_chunk_kb", offsetof(struct opts, read_chunk_kb), false },
	{ "max_dir_entries", offsetof(struct opts, max_dir_entries), false },
	{ "write_behind", offsetof(struct opts, write_behind), false },
	{ "setattr_behind", offsetof(struct opts, setattr_behind), false },
	{ "unlink_behind", offsetof(struct opts, unlink_behind), false },
	{ "op_streams", offsetof(struct opts, op_streams), false },
	{ "gather_ms", offsetof(struct opts, gather_ms), false },
};

/*
 * Set the option NAME=VALUE that @arg holds (one of num_opts) in @o: VALUE
 * must be decimal digits (with one '.' for seconds), nothing else: no
 * sign, space, exponent, hex or unit, and within range of its type.
 * Returns 0, or -1 after a message on stderr.
 */
static int num_opt(struct opts *o, const char *arg)
{
	const char *eq = strchr(arg, '='), *v = eq ? eq + 1 : "";
	size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg), digits = strspn(v, "0123456789");

	for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++) {
		const struct num_opt *n = &num_opts[i];
		char *at = (char *)o + n->off;
		char *end;

		if (strlen(n->name) != nlen || memcmp(n->name, arg, nlen) != 0)
			continue;
		errno = 0;
		if (n->real) {
			size_t frac = v[digits] == '.' ? strspn(v + digits + 1, "0123456789") : 0;
			bool dot = v[digits] == '.';
			double d;

			if ((digits || frac) && v[digits + dot + frac] == '\0') {
				d = strtod(v, &end);
				if (!*end && errno == 0) {
					memcpy(at, &d, sizeof(d));
					return 0;
				}
			}
			fprintf(stderr, "wsfs: %s wants seconds (like 1 or 0.5), not '%s'\n",
				n->name, v);
		} else {
			unsigned long u;

			if (digits && !v[digits]) {
				u = strtoul(v, &end, 10);
				if (errno == 0 && u <= UINT_MAX) {
					unsigned x = (unsigned)u;

					memcpy(at, &x, sizeof(x));
					return 0;
				}
			}
			fprintf(stderr, "wsfs: %s wants a whole number, not '%s'\n", n->name, v);
		}
		return -1;
	}
	fprintf(stderr, "wsfs: unknown option '%s'\n", arg);
	return -1;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct opts *o = data;

	(void)outargs;
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (o->n_pos >= 2) {
			fprintf(stderr, "wsfs: unexpected argument '%s'\n", arg);
			o->bad = 1;
			return 0;
		}
		o->pos[o->n_pos] = strdup(arg);
		if (!o->pos[o->n_pos])
			o->bad = 1;
		o->n_pos++;
		return 0;
	case KEY_DEBUG:
		o->debug = 1;
		o->foreground = 1;
		return 1; /* libfuse prints every request too */
	case KEY_ALLOW_OTHER:
		o->allow_other = 1;
		return 1; /* for fuse_session_new too */
	case KEY_DEFAULT_PERMISSIONS:
		o->default_permissions = 1;
		return 1;
	case KEY_HELP:
		o->help = 1;
		return 0;
	case KEY_VERSION:
		o->version = 1;
		return 0;
	case KEY_NUM:
		if (num_opt(o, arg) < 0)
			o->bad_value = 1;
		return 0;
	default:
		return 1; /* for fuse_session_new */
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: wsfs [OPTIONS] ADDR MOUNTPOINT\n"
		"       wsfs [OPTIONS] --exec 'CMD' MOUNTPOINT\n"
		"Mount an agentd workspace. ADDR is HOST:PORT or unix:/PATH; CMD is a shell\n"
		"command whose stdin/stdout reach agentd --stdio, e.g.\n"
		"'kubectl exec -i POD -- agentd --stdio'. Unmount with fusermount3 -u MOUNTPOINT.\n"
		"\n"
		"Options:\n"
		"  -f, --foreground       stay in the foreground (logs go to stderr)\n"
		"  -d, -o debug           foreground, and log every request\n"
		"  -s                     single-threaded\n"
		"  --token-file FILE      bearer token (also -o token_file=FILE;\n"
		"                         default $WSBRIDGE_TOKEN_FILE)\n"
		"  --exec CMD             reach agentd through CMD's stdin/stdout\n"
		"  -o entry_timeout=S     kernel name cache, seconds (default 1)\n"
		"  -o attr_timeout=S      kernel attribute cache, seconds (default 1)\n"
		"  -o negative_timeout=S  cache of missing names, seconds (default: 0; while\n"
		"                         the watch stream is live, the longer of\n"
		"                         entry_timeout and watch_timeout)\n"
		"  -o watch_timeout=S     both caches while agentd pushes changes (default 60;\n"
		"                         0 = never longer than entry/attr_timeout)\n"
		"  -o no_watch            do not subscribe to agentd's change stream\n"
		"  -o transform_symlinks  show symlinks that would lead out of the mount\n"
		"                         (absolute, or climbing above its root) as\n"
		"                         links inside it, as if the workspace were /\n"
		"  -o rpc_timeout=S       a call to agentd fails (EIO) after S seconds instead\n"
		"                         of hanging (fsync and other calls that may run long\n"
		"                         in the pod: after S seconds without any answer);\n"
		"                         while agentd is unreachable calls fail at once\n"
		"                         (ENOTCONN) (default 5)\n"
		"  -o max_threads=N       FUSE worker threads (default 16)\n"
		"  -o read_ahead_kb=N     kernel readahead for the mount, KiB (default 4096;\n"
		"                         needs root, else the kernel's 128 stays; 0 = leave)\n"
		"  -o read_chunk_kb=N     a small read that does not follow the last one\n"
		"                         fetches the aligned N KiB around it into the\n"
		"                         page cache (default 128; 4..1024, a multiple of 4;\n"
		"                         0 = only what was asked)\n"
		"  -o max_dir_entries=N   most entries of one directory wsfs lists, about\n"
		"                         200 bytes each while listed; a larger one fails\n"
		"                         with EFBIG (default 1048576)\n"
		"  -o write_behind=N      writes of up to 1 MiB each that write(2) may\n"
		"                         return before agentd has, small ones gathered\n"
		"                         into one (close and fsync wait and report their\n"
		"                         errors; default 4, 0 = none, nor gathered)\n"
		"  -o gather_ms=N         how long gathered small writes wait for more\n"
		"                         before they go to agentd anyway, milliseconds\n"
		"                         (default 5; 0 = none gathered; at most 600000)\n"
		"  -o setattr_behind=0|1  chmod, chown and utimes of a file wsfs created and\n"
		"                         holds open for writing reach agentd merged, within\n"
		"                         10 x gather_ms (close reports their errors; default\n"
		"                         1; none with gather_ms=0 or write_behind=0)\n"
		"  -o unlink_behind=0|1   an unlink that cannot fail returns before agentd\n"
		"                         has done it; the next request waits for it\n"
		"                         (default 1; none with write_behind=0)\n"
		"  -o op_streams=0|1      send each worker thread's calls as messages of one\n"
		"                         stream of its own, not one gRPC call each (default\n"
		"                         1; agentd without Ops: calls one by one)\n"
		"  -o clone_fd            one /dev/fuse descriptor per worker thread\n"
		"  -o allow_other         let every user on the host use the mount; the\n"
		"                         kernel then checks each one against the files'\n"
		"                         mode and owner (default_permissions, implied;\n"
		"                         files are made as agentd's user)\n"
		"  -h, --help             this help, then libfuse's options\n"
		"  -V, --version          show the version\n"
		"\n"
		"fstab: ADDR MOUNTPOINT fuse.wsfs noauto,_netdev,token_file=FILE 0 0\n");
}

/* Whether directory @path holds any entry but "." and "..": false when it
 * cannot be read. */
static bool dir_has_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool any = false;

	if (!d)
		return false;
	while (!any && (e = readdir(d)))
		any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return any;
}

/* A new session id: 32 lowercase hex digits of getrandom(2) and a NUL into
 * @p buf (33 bytes). Returns 0, or -errno (then the mount goes without one:
 * its handles are not released if it dies). */
static int session_id_new(char buf[33])
{
	unsigned char b[16];
	ssize_t n = getrandom(b, sizeof(b), 0);

	if (n != (ssize_t)sizeof(b)) {
		int err = n < 0 ? errno : EIO;

		wsb_warn("no session id (getrandom: %s): agentd keeps this mount's open files "
			 "if it dies",
			 strerror(err));
		return -err;
	}
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(buf + 2 * i, 3, "%02x", b[i]);
	return 0;
}

/* "-osubtype=wsfs,fsname=SRC" with ',' and '\' escaped for fuse_opt. */
static char *fsname_arg(const char *src)
{
	size_t n = strlen(src);
	char *a = malloc(sizeof("-osubtype=wsfs,fsname=") + 2 * n), *p;

	if (!a)
		return NULL;
	p = a + sprintf(a, "-osubtype=wsfs,fsname=");
	for (const char *s = src; *s; s++) {
		if (*s == ',' || *s == '\\')
			*p++ = '\\';
		*p++ = *s;
	}
	*p = '\0';
	return a;
}

static bool seconds_ok(double v, double min)
{
	return v >= min && v <= 86400.0 * 365;
}

/* Tell the waiting parent (fork mode) how start-up went. */
static void tell_parent(int fd, char status)
{
	if (fd < 0)
		return;
	while (write(fd, &status, 1) < 0 && errno == EINTR)
		;
	close(fd);
}

static void detach_stdio(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return;
	(void)dup2(fd, STDIN_FILENO);
	(void)dup2(fd, STDOUT_FILENO);
	(void)dup2(fd, STDERR_FILENO);
	if (fd > STDERR_FILENO)
		close(fd);
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct opts o = {
		.entry_timeout = 1.0,
		.attr_timeout = 1.0,
		.negative_timeout = -1.0,
		.watch_timeout = 60.0,
		.rpc_timeout = 5.0,
		.max_threads = 16,
		.read_ahead_kb = 4096,
		.read_chunk_kb = WSFS_READ_CHUNK_KB_DEFAULT,
		.max_dir_entries = WSFS_MAX_DIR_ENTRIES_DEFAULT,
		.write_behind = WSFS_WRITE_BEHIND_DEFAULT,
		.setattr_behind = 1,
		.unlink_behind = 1,
		.op_streams = 1,
		.gather_ms = WSFS_GATHER_MS_DEFAULT,
	};
	struct wsc_options wo = { 0 };
	struct wsfs_config cfg;
	struct fuse_session *se = NULL;
	struct fuse_loop_config *lc = NULL;
	struct wsfs *fs = NULL;
	struct wsc *client = NULL;
	const char *addr = NULL, *mnt;
	char *mnt_real = NULL;
	char *token = NULL, *fsarg = NULL;
	char session[33];
	bool idle_poller;
	char msg[600];
	int parent_fd = -1, ret = 1, r;

	wsb_malloc_tune(); /* before any thread: see wsb.h */
	signal(SIGPIPE, SIG_IGN);
	wsb_log_init("wsfs", WSB_LOG_NOTICE);
	if (fuse_opt_parse(&args, &o, spec, opt_proc) < 0) {
		usage(stderr);
		goto out;
	}
	if (o.bad_value)
		goto out; /* num_opt() said which and why */
	/* Every call reaches agentd as agentd's user: other users of the
	 * host must be checked by the kernel. */
	if (o.allow_other && !o.default_permissions &&
	    fuse_opt_add_arg(&args, "-odefault_permissions") < 0) {
		fprintf(stderr, "wsfs: %s\n", strerror(ENOMEM));
		goto out;
	}
	if (o.bad) {
		usage(stderr);
		goto out;
	}
	if (o.help) {
		usage(stdout);
		printf("\nlibfuse options:\n");
		fflush(stdout);
		fuse_lowlevel_help();
		ret = 0;
		goto out;
	}
	if (o.version) {
		printf("wsfs %s (libfuse %s)\n", WSB_VERSION, fuse_pkgversion());
		ret = 0;
		goto out;
	}
	if (o.debug)
		wsb_log_init("wsfs", WSB_LOG_DEBUG);
	if (o.exec_cmd ? o.n_pos != 1 : o.n_pos != 2) {
		fprintf(stderr, "wsfs: %s\n",
			o.exec_cmd ? "--exec wants one MOUNTPOINT" : "want ADDR and MOUNTPOINT");
		usage(stderr);
		goto out;
	}
	if (!o.exec_cmd) {
		const char *why;

		addr = o.pos[0];
		if (wsb_addr_check(addr, &why) < 0) {
			fprintf(stderr, "wsfs: bad address '%s': %s\n", addr, why);
			goto out;
		}
	}
	mnt = o.pos[o.n_pos - 1];
	if (!seconds_ok(o.entry_timeout, 0) || !seconds_ok(o.attr_timeout, 0) ||
	    !seconds_ok(o.watch_timeout, 0) ||
	    !(o.negative_timeout < 0 || seconds_ok(o.negative_timeout, 0))) {
		fprintf(stderr, "wsfs: timeouts are seconds from 0 to one year\n");
		goto out;
	}
	/* Milliseconds in a uint32_t (cfg.rpc_timeout_ms): 49 days. */
	if (!seconds_ok(o.rpc_timeout, 0.05) || o.rpc_timeout > UINT32_MAX / 1000.0) {
		fprintf(stderr, "wsfs: rpc_timeout wants seconds from 0.05 to %u\n",
			UINT32_MAX / 1000);
		goto out;
	}
	if (o.max_threads < 1 || o.max_threads > 1024) {
		fprintf(stderr, "wsfs: max_threads wants 1..1024\n");
		goto out;
	}
	if (o.read_ahead_kb > 1024 * 1024) {
		fprintf(stderr, "wsfs: read_ahead_kb wants 0..1048576\n");
		goto out;
	}
	if (o.read_chunk_kb % 4 || o.read_chunk_kb > 1024) {
		fprintf(stderr, "wsfs: read_chunk_kb wants 0 or 4..1024, a multiple of 4\n");
		goto out;
	}
	if (o.max_dir_entries < 1 || o.max_dir_entries > 1u << 26) {
		fprintf(stderr, "wsfs: max_dir_entries wants 1..67108864\n");
		goto out;
	}
	if (o.write_behind > WSFS_WRITE_BEHIND_MAX) {
		fprintf(stderr, "wsfs: write_behind wants 0..%u\n", WSFS_WRITE_BEHIND_MAX);
		goto out;
	}
	if (o.setattr_behind > 1) {
		fprintf(stderr, "wsfs: setattr_behind wants 0 or 1\n");
		goto out;
	}
	if (o.unlink_behind > 1) {
		fprintf(stderr, "wsfs: unlink_behind wants 0 or 1\n");
		goto out;
	}
	if (o.op_streams > 1) {
		fprintf(stderr, "wsfs: op_streams wants 0 or 1\n");
		goto out;
	}
	if (o.gather_ms > WSFS_GATHER_MS_MAX) {
		fprintf(stderr, "wsfs: gather_ms wants 0..%u\n", WSFS_GATHER_MS_MAX);
		goto out;
	}
	if (!o.token_file) {
		const char *e = getenv("WSBRIDGE_TOKEN_FILE");

		if (e && *e)
			o.token_file = strdup(e);
	}
	if (o.token_file) {
		r = wsb_token_read(o.token_file, &token);
		if (r < 0) {
			fprintf(stderr, "wsfs: token file '%s': %s\n", o.token_file,
				r == -EINVAL ? "no valid token (one word of printable ASCII)"
				: strerror(-r));
			goto out;
		}
	}

	fsarg = fsname_arg(addr ? addr : "wsfs-exec");
	if (!fsarg || fuse_opt_insert_arg(&args, 1, fsarg) < 0) {
		fprintf(stderr, "wsfs: out of memory\n");
		goto out;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.entry_timeout = o.entry_timeout;
	cfg.attr_timeout = o.attr_timeout;
	cfg.negative_timeout = o.negative_timeout;
	cfg.watch_timeout = o.watch_timeout;
	cfg.rpc_timeout_ms = (uint32_t)(o.rpc_timeout * 1000.0);
	cfg.exec_transport = o.exec_cmd != NULL;
	cfg.no_watch = o.no_watch;
	cfg.transform_symlinks = o.transform_symlinks;
	cfg.read_ahead_kb = o.read_ahead_kb;
	cfg.read_chunk_kb = o.read_chunk_kb;
	cfg.max_dir_entries = o.max_dir_entries;
	cfg.write_behind = o.write_behind;
	cfg.setattr_behind = o.setattr_behind != 0;
	cfg.unlink_behind = o.unlink_behind != 0 && o.write_behind > 0;
	cfg.gather_ns = (int64_t)o.gather_ms * 1000000;
	/* mount(2) mounts a FUSE file system on a regular file too (and
	 * hides it); a mount point is a directory (mount(8) says the same).
	 * Save /dev/fd/N: /dev/fuse mounted already by the caller
	 * (mount.fuse3 -o drop_privileges; fuse_session_mount()). */
	{
		struct stat st;
		unsigned fd;
		int n = 0, e;

		if (sscanf(mnt, "/dev/fd/%u%n", &fd, &n) == 1 && n > 0 && mnt[n] == '\0') {
			e = 0;
			if (o.allow_other && !o.default_permissions) {
				/* The mount is made: the option added above
				 * cannot reach the kernel. */
				fprintf(stderr,
					"wsfs: allow_other without default_permissions would let "
					"every user of the host read and change every file: add "
					"default_permissions to the mount's options (fstab), "
					"and fusermount3 -u the mount point this leaves\n");
				goto out;
			}
		} else
			e = stat(mnt, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
		if (e == ENOTCONN) {
			/* The mount of a FUSE server that died (stat(2) of a
			 * connection without its server: ENOTCONN). */
			fprintf(stderr,
				"wsfs: mount point %s: %s: a FUSE mount there (or above it) "
				"whose server is gone is still mounted; unmount it first: "
				"fusermount3 -u %s\n",
				mnt, strerror(e), mnt);
			goto out;
		}
		if (e) {
			fprintf(stderr, "wsfs: mount point %s: %s\n", mnt, strerror(e));
			goto out;
		}
	}
	/* For /proc/self/mountinfo (readahead); the mount point exists. */
	mnt_real = realpath(mnt, NULL);
	cfg.mountpoint = mnt_real;
	/* A second wsfs on top of one would hide it and leave both running
	 * (mount(2) stacks; fusermount3 -u then takes off the top one only). */
	{
		char type[64], src[PATH_MAX + 1];

		if (mnt_real && wsfs_mount_at(mnt_real, NULL, 0, type, sizeof(type), src,
					      sizeof(src)) == 0 &&
		    strcmp(type, "fuse.wsfs") == 0) {
			fprintf(stderr,
				"wsfs: %s is already a wsfs mount (of %s); unmount it first: "
				"fusermount3 -u %s\n",
				mnt, src, mnt);
			goto out;
		}
	}
	/* Allowed, as by fusermount3 and sshfs (an fstab mount may sit on
	 * a directory with a placeholder), but said: the files there are
	 * out of sight until the unmount. */
	if (mnt_real && dir_has_entries(mnt_real))
		fprintf(stderr,
			"wsfs: note: mount point %s is not empty: what it holds is hidden until "
			"fusermount3 -u %s\n",
			mnt, mnt);
	/* No thread yet: the client is connected after the fork. */
	r = wsfs_new(&cfg, NULL, &fs);
	if (r < 0) {
		fprintf(stderr, "wsfs: %s\n", strerror(-r));
		goto out;
	}
	se = fuse_session_new(&args, &wsfs_ll_ops, sizeof(wsfs_ll_ops), fs);
	if (!se)
		goto out; /* libfuse said why (an unknown option) */

	if (!o.foreground) {
		int pfd[2];
		pid_t pid;

		if (pipe2(pfd, O_CLOEXEC) < 0) {
			perror("wsfs: pipe");
			goto out;
		}
		pid = fork();
		if (pid < 0) {
			perror("wsfs: fork");
			goto out;
		}
		if (pid > 0) {
			char status = 1;

			close(pfd[1]);
			while (read(pfd[0], &status, 1) < 0 && errno == EINTR)
				;
			close(pfd[0]);
			if (status != 0)
				(void)waitpid(pid, NULL, 0);
			_exit(status == 0 ? 0 : 1);
		}
		close(pfd[0]);
		parent_fd = pfd[1];
		(void)setsid();
	}

	/*
	 * gRPC C-core makes progress on a connection only while some thread
	 * polls it: a call waiting in its completion queue, or the channel's
	 * backup poller, which runs every 5 s by default. While agentd is down
	 * every call fails at once (no wait-for-ready), so a reconnect would be
	 * noticed up to 5 s late, twice (connect, then the SETTINGS frame).
	 * Poll every 100 ms instead (gRPC's doc/environment_variables.md);
	 * must be set before grpc_init(). A value in the environment wins.
	 */
	setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", 0);
	/*
	 * The watch stream waits without polling and each FUSE request's call
	 * polls for itself (client.h idle_poller), which relies on epoll1, the
	 * engine in which any polling thread reads every connection (Linux's
	 * default). Another engine set in the environment wins, and then the
	 * watch stream polls for itself as before.
	 */
	{
		const char *ps = getenv("GRPC_POLL_STRATEGY");

		idle_poller = !ps || strcmp(ps, "epoll1") == 0;
		setenv("GRPC_POLL_STRATEGY", "epoll1", 0);
	}

	/* From here on threads exist (gRPC). */
	wo.target = addr;
	wo.exec_cmd = o.exec_cmd;
	wo.token = token;
	/* One session for the mount's life, across reconnects: agentd keeps
	 * its handles while it is gone no longer than agentd's
	 * --session-grace (docs/protocol.md "Sessions"). */
	wo.session = session_id_new(session) == 0 ? session : NULL;
	wo.timeout_ms = cfg.rpc_timeout_ms;
	wo.idle_poller = idle_poller;
	wo.op_streams = o.op_streams != 0;
	r = wsc_connect(&wo, &client);
	if (r < 0) {
		fprintf(stderr, "wsfs: cannot connect to '%s': %s\n", addr ? addr : o.exec_cmd,
			r == -EINVAL && token ? "the token is not printable ASCII" : strerror(-r));
		goto out;
	}
	fs->client = client;
	r = wsfs_probe(fs, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, "wsfs: cannot mount agentd at '%s': %s\n",
			addr ? addr : o.exec_cmd, msg);
		goto out;
	}
	fs->se = se;
	if (fuse_set_signal_handlers(se) < 0)
		goto out;
	if (fuse_session_mount(se, mnt) < 0) {
		fuse_remove_signal_handlers(se);
		goto out;
	}
	r = wsfs_io_attach(fs, se);
	if (r < 0)
		wsb_warn("cannot hook /dev/fuse (%s): the kernel asks about "
			 "security.capability before each write", strerror(-r));
	(void)wsfs_conn_open(fs);
	r = wsfs_gather_start(fs);
	if (r == 0)
		r = wsfs_monitor_start(fs);
	if (r < 0) {
		fprintf(stderr, "wsfs: cannot start a thread: %s\n", strerror(-r));
		fuse_session_unmount(se);
		fuse_remove_signal_handlers(se);
		goto out;
	}
	wsb_log(o.foreground ? WSB_LOG_NOTICE : WSB_LOG_INFO, "mounted %s on %s",
		addr ? addr : o.exec_cmd, mnt);
	if (parent_fd >= 0) {
		if (chdir("/") < 0) {
			/* cannot happen; carry on */
		}
		detach_stdio();
		tell_parent(parent_fd, 0);
		parent_fd = -1;
	}

	if (o.single) {
		r = fuse_session_loop(se);
	} else {
		lc = fuse_loop_cfg_create();
		if (!lc) {
			r = -ENOMEM;
		} else {
			fuse_loop_cfg_set_max_threads(lc, o.max_threads);
			fuse_loop_cfg_set_clone_fd(lc, (unsigned)o.clone_fd);
			r = fuse_session_loop_mt(se, lc);
		}
	}
	ret = r == 0 ? 0 : 1;
	wsfs_send_behind(fs);
	r = wsfs_monitor_stop(fs, 3000);
	fuse_session_unmount(se);
	if (r < 0 && wsfs_conn_abort() == 0) {
		/* A thread still in the kernel may wait on a page that a READ
		 * nobody will answer holds: ending the requests frees it. */
		wsb_warn("wrote the FUSE connection's abort file to end the kernel's wait");
		r = wsfs_monitor_stop(fs, 2000);
	}
	fuse_remove_signal_handlers(se);
	if (r < 0) {
		/* The monitor still uses fs and the client: leave it to exit. */
		fflush(NULL);
		_exit(ret);
	}

out:
	tell_parent(parent_fd, 1);
	if (lc)
		fuse_loop_cfg_destroy(lc);
	if (se)
		fuse_session_destroy(se);
	wsfs_free(fs);
	if (client)
		wsc_free(client);
	fuse_opt_free_args(&args);
	free(o.pos[0]);
	free(o.pos[1]);
	free(o.exec_cmd);
	free(o.token_file);
	free(token);
	free(fsarg);
	free(mnt_real);
	return ret;
}
