/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs's FUSE low-level operations (libfuse 3 fuse_lowlevel_ops): each
 * request becomes one or a few synchronous unary RPCs of
 * wsbridge.v1.Workspace (proto/wsbridge.proto) through the client adapter
 * (client.h). Runs on libfuse's worker threads (fuse_session_loop_mt). A
 * handler's own kernel notifications say at each why the kernel holds
 * no lock they need; the watch's come from watch.c's thread.
 *
 * Naming: nodeids come from node.h's table; a node's wire path is built on
 * each request. Attributes are the server's, so st_ino is the pod's inode
 * (mixed with the device on a file system mounted inside the workspace:
 * agentd's attr_ino()).
 *
 * Open files: fi->fh points to a struct wsfs_file holding agentd's handle,
 * which keeps an unlinked or renamed file usable until release. When agentd
 * answers EBADF for a handle it no longer knows (it restarted, or an --exec
 * transport started a new agentd), the file is reopened by its node's path
 * if that is safe (same server inode; never with O_TRUNC/O_CREAT/O_EXCL) and
 * fails with EIO from then on if not.
 *
 * Caching: no writeback cache; a write(2) through the kernel's pages may
 * return before agentd has it (write-behind, below; small ones gathered
 * into one, "Write gathering"), but flush (close) and fsync wait for it;
 * kernel entry/attribute timeouts, longer while the watch stream is live; FOPEN_KEEP_CACHE only when the file's
 * (ino, size, mtime) are what this mount saw last. POSIX and BSD locks are
 * not implemented, so the kernel keeps them locally (per mount).
 *
 * Interrupts are ignored (no fuse_req_interrupt_func): a request always runs
 * to its RPC's end, bounded by rpc_timeout, so flush/fsync/close never fail
 * with EINTR.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/fuse.h>
#include <sys/uio.h>

#include "fs.h"
#include "wsbridge.pb-c.h"
#include "wsb.h"

#define M(name) "/wsbridge.v1.Workspace/" name

/** Largest Read/Write per RPC, bytes (proto: "at most 1 MiB"). */
#define CHUNK_MAX ((size_t)1024 * 1024)
/** Entries asked per ReadDir page (the server's cap). */
#define READDIR_PAGE 4096u
/** Entries of subdirectories a ReadDir may prefetch (the server's cap). */
#define READDIR_PREFETCH 4096u
/** Bytes a read-only Open brings along (OpenRequest.read_ahead). */
#define OPEN_READ_AHEAD ((uint32_t)128 * 1024)
/** Largest xattr value / name list accepted, bytes (XATTR_SIZE_MAX/LIST_MAX). */
#define XATTR_MAX ((size_t)64 * 1024)

/* An open file (fi->fh). */
struct wsfs_file {
	struct node_fh link; /* the node's list; refcount */
	pthread_mutex_t lock;
	uint64_t sh;   /* agentd's handle; under lock */
	uint64_t gen;  /* conn_gen when sh was obtained; under lock */
	bool broken;   /* could not be reopened safely: EIO; under lock */
	/* sh is a read-only handle that stands in for the writable one that
	 * file_park() gave back; file_handle_rw() opens that again. Under
	 * lock. */
	bool parked;
	uint64_t ino;  /* server inode at open */
	uint64_t ident; /* and identity (st_ident()) */
	Wsbridge__V1__Access access;
	bool append;
	bool direct_io; /* opened FOPEN_DIRECT_IO: writes bypass the kernel's pages */
	/* The file had an execute bit when last seen (open, chmod): its
	 * handles go back to agentd at once when it is closed, not queued
	 * ("Releases"). */
	atomic_bool exec;
	uint64_t sh_pos; /* for an append file: a handle without O_APPEND, or 0; under lock */
	atomic_int wb_err; /* errno of a write-behind that failed, not yet reported */
	bool wrote;         /* a WRITE came; under lock */
	uint64_t write_end; /* where the last WRITE ended, bytes; under lock */
	/* The file's first bytes as Open read them (OpenRequest.read_ahead),
	 * for the first Read; under lock. */
	char *ra;
	size_t ra_len;
	bool ra_have, ra_eof; /* ra_eof: ra is the whole file */
	uint64_t ra_seq, ra_mgen; /* inval_seq and mgen before the Open */
	int64_t ra_at_ns;         /* CLOCK_MONOTONIC of the Open */
	int64_t ra_size, ra_mtime_ns; /* the file's size and mtime that Open gave */
	uint64_t read_end; /* where the last READ ended, bytes; under lock */
	struct wsfs_file *prev, *next; /* fs_files list */
	bool created;      /* this open made the file */
	uint32_t owner;    /* its st_uid then: agentd's user */
	bool closing;      /* a FLUSH or RELEASE came: keep nothing behind; under fs->sab_lock */
	atomic_int sab_err; /* errno of a SetAttr sent behind that failed, not yet reported */
	/* A SETATTR written behind (sab_*), under fs->sab_lock: the fields of
	 * SetAttrRequest.valid it sets, their values, the times (ns since the
	 * epoch; sab_atime/sab_mtime: set), the nodeid it came for, whether it
	 * waits in fs->sab_list and whether a thread is sending one. */
	uint32_t sab_valid;
	uint32_t sab_mode, sab_uid, sab_gid;
	bool sab_atime, sab_mtime;
	int64_t sab_atime_ns, sab_mtime_ns;
	fuse_ino_t sab_id;
	uint64_t sab_gseq; /* fs->gb_seq when last merged: runs numbered below go first */
	bool sab_listed, sab_sending;
	TAILQ_ENTRY(wsfs_file) sab_entry;
	/* The run of gathered writes the next WRITE may join (fs.c "Write
	 * gathering"), or NULL; under fs->gb_lock. */
	struct wsfs_gather *g;
};

/* One name of a directory listing. */
struct wsfs_dirent {
	char *name; /* NUL-terminated */
	size_t len;
	struct stat st;
	uint64_t seq; /* inval_seq when fetched */
	uint64_t off; /* its offset in the listing (node_dir_offs()); set by dir_sort() */
};

/*
 * An open directory (fi->fh of opendir): the whole listing, in offset
 * order, from the READDIR at offset 0 (opendir, rewinddir) until the one
 * that finds no more entries, or a READDIR past them. A READDIR lists
 * afresh when the directory changed since (its node's attribute version
 * moved: the watch's or the mount's own change in it, node.h), or at an
 * offset outside the last reply (the kernel resumes at the last entry it
 * could give the reader, so anywhere in it): then the reader got what came
 * before from the kernel's cache (after a rewinddir or seekdir, or another
 * handle's listing), which may be newer than this listing.
 */
struct wsfs_dir {
	pthread_mutex_t lock;
	struct wsfs_dirent *ents;
	size_t n, cap;
	bool have;      /* ents is a listing */
	bool at_end;    /* a reply reached the end (ents freed by the READDIR after) */
	uint64_t aver;  /* node_attr_ver() of the directory before it was listed */
	uint64_t ngen;  /* node_names_gen() before it was listed */
	uint64_t clock; /* node_attr_clock() before it was listed */
	uint64_t start; /* the offset the last reply began at */
	uint64_t end;   /* the offset the last reply ended at */
};

/* node_fh_each() hands out the link; the file is the struct around it. */
_Static_assert(offsetof(struct wsfs_file, link) == 0, "link must come first");

/* Every open file, for the final Release at exit. */
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wsfs_file *fs_files;

static struct wsfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* ---- errors ---- */

/*
 * The errno to hand the kernel for a failed call (@r < 0). Keeps the
 * server's exact errno, except: ENOSYS would disable the operation for the
 * mount's life in the kernel (fuse_lowlevel.h), so it becomes EOPNOTSUPP;
 * EINTR/ECANCELED never reach a caller (no interrupts); local decode
 * failures are EIO; EXDEV (a path escaping the root) is EACCES unless
 * @allow_exdev (rename/link across mounts in the pod).
 */
static int errno_out(int r, bool allow_exdev)
{
	int e = r < 0 ? -r : r;

	if (e <= 0 || e >= 4096)
		return EIO;
	switch (e) {
	case ENOSYS:
		return EOPNOTSUPP;
	case EINTR:
	case ECANCELED:
	case EPROTO:
	case EBADMSG:
		return EIO;
	case EXDEV:
		return allow_exdev ? EXDEV : EACCES;
	default:
		return e;
	}
}

static void reply_err(fuse_req_t req, int r)
{
	fuse_reply_err(req, errno_out(r, false));
}

/* ---- connection state ---- */

void wsfs_conn_ok(struct wsfs *fs)
{
	if (atomic_load(&fs->conn_down) && atomic_exchange(&fs->conn_down, false)) {
		atomic_store(&fs->down_ns, 0);
		atomic_fetch_add(&fs->conn_gen, 1);
		wsb_notice("agentd answers again");
	}
}

void wsfs_conn_failed(struct wsfs *fs, int code)
{
	int_fast64_t since = 0;
	int64_t now = wsfs_now_ns();
	bool was_down, stalled, reconnect;

	/* The down period's start, set by its first failure (0 while up):
	 * one compare-and-swap, so no thread reads another period's. */
	if (atomic_compare_exchange_strong(&fs->down_ns, &since, now))
		since = now;
	was_down = atomic_exchange(&fs->conn_down, true);
	stalled = was_down && code == WSB_DEADLINE_EXCEEDED &&
		  now - since >= 2 * (int64_t)fs->cfg.rpc_timeout_ms * 1000000;
	reconnect = fs->cfg.exec_transport && (code == WSB_UNAVAILABLE || stalled);

	if (!was_down) {
		wsb_warn("agentd is unreachable (%s); calls fail at once until it answers again",
			 wsb_status_name(code));
	} else if (stalled && fs->cfg.exec_transport) {
		wsb_warn("agentd has not answered for %lld ms through the transport command: "
			 "running it again", (long long)((now - since) / 1000000));
	}
	pthread_mutex_lock(&fs->mon_lock);
	if (reconnect && !fs->want_reconnect) {
		fs->want_reconnect = true;
		was_down = false;
		if (stalled) /* the new command gets as long */
			atomic_store(&fs->down_ns, now);
	}
	/* The monitor probes (and reconnects) instead of waiting on a watch
	 * stream that may hang as long as agentd does. */
	if (!was_down && fs->watch)
		wsc_stream_cancel(fs->watch);
	pthread_cond_signal(&fs->mon_cond);
	pthread_mutex_unlock(&fs->mon_lock);
}

/*
 * One unary call with the mount's deadline. Returns 0 or -errno (the
 * server's exact errno, else one mapped from the status by client.c).
 *
 * While agentd is known to be unreachable (a call failed with UNAVAILABLE
 * or DEADLINE_EXCEEDED from gRPC itself), calls fail at once with ENOTCONN
 * instead of each waiting out its deadline; the monitor thread probes every
 * WSFS_PROBE_MS and ends that state. A deadline gRPC enforced is EIO: the
 * call may or may not have taken effect. @timeout_ms: the deadline (> 0).
 *
 * A read agentd refused because its clients hold --max-reply-bytes of
 * replies unread (RESOURCE_EXHAUSTED, ENOBUFS: only pure reads are refused
 * so, docs/protocol.md) is asked again, 2 ms later and then at twice the
 * last wait, at most 64 ms, while @timeout_ms lasts; then it is EIO, as a
 * call agentd did not answer in time.
 */
static int rpc_ex(struct wsfs *fs, const char *method, const ProtobufCMessage *req,
		  const ProtobufCMessageDescriptor *desc, void *ret_reply, uint32_t timeout_ms)
{
	int64_t end = wsb_mono_ns() + (int64_t)timeout_ms * 1000000, wait_ns = 2000000;
	struct wsc_status st;
	int r;

	if (atomic_load(&fs->conn_down)) {
		wsb_debug("%s: agentd is unreachable: ENOTCONN", method);
		return -ENOTCONN;
	}
	for (;;) {
		r = wsc_unary_ex(fs->client, method, req, desc, (ProtobufCMessage **)ret_reply,
				 timeout_ms, &st);
		if (!(r == -ENOBUFS && st.code == WSB_RESOURCE_EXHAUSTED))
			break;
		if (wsb_mono_ns() + wait_ns >= end) {
			wsb_info("%s: agentd still holds too many unread replies after %u ms: EIO",
				 method, timeout_ms);
			return -EIO;
		}
		(void)nanosleep(&(struct timespec){ .tv_nsec = wait_ns }, NULL);
		if (wait_ns < 64000000)
			wait_ns *= 2;
	}
	if (r == 0) {
		wsfs_conn_ok(fs);
		return 0;
	}
	if (!st.has_errno && (st.code == WSB_UNAVAILABLE || st.code == WSB_DEADLINE_EXCEEDED)) {
		wsfs_conn_failed(fs, st.code);
		if (st.code == WSB_DEADLINE_EXCEEDED)
			r = -EIO;
	} else if (st.has_errno) {
		wsfs_conn_ok(fs);
	}
	wsb_debug("%s: %s (%s): %s", method, strerror(-r), wsb_status_name(st.code), st.msg);
	return r;
}

/* rpc_ex() with the mount's deadline (-o rpc_timeout). */
static int rpc(struct wsfs *fs, const char *method, const ProtobufCMessage *req,
	       const ProtobufCMessageDescriptor *desc, void *ret_reply)
{
	return rpc_ex(fs, method, req, desc, ret_reply, fs->cfg.rpc_timeout_ms);
}

static void free_reply(void *msg)
{
	if (msg)
		protobuf_c_message_free_unpacked(msg, NULL);
}

/* ---- attributes ---- */

/*
 * Convert a server Attr to a struct stat. -EIO for a missing Attr, an inode
 * number of 0 (no file has it; node.h reads it as "not known", and
 * readdir(3) callers skip such an entry as deleted), a file type the kernel
 * would reject (it marks such an inode bad), or an owner or group of
 * (uint32_t)-1: no file has it (chown(2) reads it as "unchanged"),
 * and the kernel maps it to INVALID_UID and then refuses every write to the
 * inode, creates in a directory too, with EACCES for as long as it keeps the
 * attributes (fs/namei.c inode_permission, HAS_UNMAPPED_ID).
 *
 * st_dev carries the file's identity (node_ident() of Attr.btime_ns and
 * Attr.generation; st_ident()): with st_ino it names one file, as (st_dev,
 * st_ino) does in POSIX, where a server inode number alone is reused. The
 * kernel never sees it: FUSE's attributes have no device (struct
 * fuse_attr), the mount's is st_dev.
 */
static int attr_to_stat(const Wsbridge__V1__Attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	if (!a || !a->ino || a->uid == UINT32_MAX || a->gid == UINT32_MAX)
		return -EIO;
	switch (a->mode & S_IFMT) {
	case S_IFREG:
	case S_IFDIR:
	case S_IFLNK:
	case S_IFIFO:
	case S_IFSOCK:
	case S_IFCHR:
	case S_IFBLK:
		break;
	default:
		return -EIO;
	}
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_rdev = a->rdev;
	st->st_size = a->size > INT64_MAX ? INT64_MAX : (off_t)a->size;
	st->st_blocks = a->blocks > INT64_MAX ? INT64_MAX : (blkcnt_t)a->blocks;
	/* The kernel takes its log2 for i_blkbits (fs/fuse/inode.c): the
	 * power of two at or below it, 512 B to 64 MiB (an XFS stripe of
	 * 192 KiB shows as 128 KiB, as the kernel would make it); 0: a page. */
	if (!a->blksize)
		st->st_blksize = 4096;
	else if (a->blksize < 512)
		st->st_blksize = 512;
	else if (a->blksize > (64u << 20))
		st->st_blksize = 64 << 20;
	else
		st->st_blksize = (blksize_t)1 << (31 - __builtin_clz(a->blksize));
	st->st_atim = wsb_time_of_wire(a->atime_ns, a->atime_s, a->atime_nsec);
	st->st_mtim = wsb_time_of_wire(a->mtime_ns, a->mtime_s, a->mtime_nsec);
	st->st_ctim = wsb_time_of_wire(a->ctime_ns, a->ctime_s, a->ctime_nsec);
	st->st_dev = (dev_t)wsfs_attr_ident(a);
	return 0;
}

/* The identity attr_to_stat() left in @st (node_ident(), 0 unknown). */
static uint64_t st_ident(const struct stat *st)
{
	return (uint64_t)st->st_dev;
}

/* Whether @st (attr_to_stat()) is the file of node @info: its server
 * inode, and its identity as far as both are known (node_same_ident()). */
static bool same_file(const struct node_info *info, const struct stat *st)
{
	return info->ino == st->st_ino && node_same_ident(info->ident, st_ident(st));
}

static struct node_seen seen_of(const struct stat *st)
{
	return (struct node_seen){
		.valid = true,
		.ino = st->st_ino,
		.ident = st_ident(st),
		.size = (uint64_t)st->st_size,
		.mtime_ns = wsb_ns_of_ts(&st->st_mtim),
	};
}

/* watch_timeout in nanoseconds. */
static int64_t watch_ttl_ns(const struct wsfs *fs)
{
	return (int64_t)(fs->cfg.watch_timeout * 1e9);
}

/* What this mount saw at @at_ns (wsfs_now_ns) may still be trusted without
 * a report of change: at most watch_timeout ago. */
static bool still_young(const struct wsfs *fs, int64_t at_ns)
{
	return wsfs_now_ns() - at_ns <= watch_ttl_ns(fs);
}

/* Kernel cache timeouts for a reply whose RPC started at inval_seq @seq0. */
struct ttl {
	double entry, attr, negative;
};

static struct ttl ttl_for(struct wsfs *fs, uint64_t seq0, const struct stat *st)
{
	const struct wsfs_config *c = &fs->cfg;
	bool live = c->watch_timeout > 0 && atomic_load(&fs->watch_live) &&
		    atomic_load(&fs->inval_seq) == seq0;
	struct ttl t = { c->entry_timeout, c->attr_timeout, 0 };

	if (live) {
		if (c->watch_timeout > t.entry)
			t.entry = c->watch_timeout;
		/* inotify reports a change under one name only: other hard
		 * links of a file would stay stale. */
		if (c->watch_timeout > t.attr && !(st && !S_ISDIR(st->st_mode) && st->st_nlink > 1))
			t.attr = c->watch_timeout;
	}
	if (c->negative_timeout >= 0)
		t.negative = c->negative_timeout;
	else
		t.negative = live ? t.entry : 0;
	return t;
}

static uint64_t seq_now(struct wsfs *fs)
{
	return atomic_load(&fs->inval_seq);
}

/* ---- paths ---- */

/* Path of @ino into *ret; a detached node gives -ESTALE. */
static int path_of(struct wsfs *fs, fuse_ino_t ino, char **ret, size_t *len)
{
	return node_path(fs->nodes, ino, ret, len);
}

/* Path of @name in @parent. A detached parent (removed directory) is ENOENT. */
static int child_path(struct wsfs *fs, fuse_ino_t parent, const char *name, char **ret,
		      size_t *len)
{
	size_t n = strlen(name);
	int r;

	if (n > NODE_NAME_MAX)
		return -ENAMETOOLONG;
	r = node_child_path(fs->nodes, parent, name, n, ret, len);
	if (r == -ESTALE)
		return -ENOENT;
	return r;
}

static ProtobufCBinaryData bin(const char *s, size_t len)
{
	return (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)s };
}

/*
 * Long calls. fsync(2) of a large file on a slow disk, copy_file_range(2)
 * of a GiB, fallocate(2), the unlink, truncate or last close of a large
 * file (freeing its blocks): agentd may work on one longer than rpc_timeout
 * and be there all along, and failing it with EIO (and taking agentd for
 * gone) would be a false error. Such a call has a deadline of
 * WSFS_LONG_CALL_MS (ms) and ends sooner only when no call had an answer
 * from agentd for rpc_timeout (client.c "Stalled links"). While one runs,
 * the pinger thread asks agentd for the root's attributes every
 * rpc_timeout / 4: an agentd that answers keeps the long call waiting, one
 * that does not (stopped, unreachable) ends it within about rpc_timeout,
 * as any other call, with EIO. The pinger starts with the first long call
 * and sleeps while none runs; it wakes every rpc_timeout / 4 while some
 * run (one Stat each time it finds one running). Any FUSE worker thread.
 */
static void ping_once(struct wsfs *fs)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;

	q.path = bin("", 0);
	(void)rpc(fs, M("Stat"), &q.base, &wsbridge__v1__stat_reply__descriptor, &rep);
	free_reply(rep);
}

static void *ping_main(void *arg)
{
	struct wsfs *fs = arg;
	int64_t every_ms = fs->cfg.rpc_timeout_ms / 4, next_ns = 0;

	if (every_ms < 20)
		every_ms = 20;
	pthread_mutex_lock(&fs->ping_lock);
	while (!fs->ping_stop) {
		int64_t now = wsb_mono_ns();

		if (!fs->long_calls) {
			next_ns = 0;
			fs->ping_idle = true;
			pthread_cond_wait(&fs->ping_cond, &fs->ping_lock);
			fs->ping_idle = false;
			continue;
		}
		/* Not before every_ms: a short call costs nothing. */
		if (!next_ns)
			next_ns = now + every_ms * 1000000;
		if (now < next_ns) {
			struct timespec t = { (time_t)(next_ns / 1000000000),
					      (long)(next_ns % 1000000000) };

			(void)pthread_cond_timedwait(&fs->ping_cond, &fs->ping_lock, &t);
			continue;
		}
		next_ns = now + every_ms * 1000000;
		pthread_mutex_unlock(&fs->ping_lock);
		ping_once(fs);
		pthread_mutex_lock(&fs->ping_lock);
	}
	pthread_mutex_unlock(&fs->ping_lock);
	return NULL;
}

static void long_begin(struct wsfs *fs)
{
	pthread_mutex_lock(&fs->ping_lock);
	/* Without the thread, a long call ends as soon as no other call has
	 * an answer for rpc_timeout: no worse than a short one. */
	if (!fs->ping_started && !fs->ping_stop)
		fs->ping_started = pthread_create(&fs->ping_thread, NULL, ping_main, fs) == 0;
	/* Only a pinger that sleeps for good is woken: calls that begin and
	 * end in a row (rm -rf) must not cost it a wakeup each. */
	if (fs->long_calls++ == 0 && fs->ping_idle)
		pthread_cond_signal(&fs->ping_cond);
	pthread_mutex_unlock(&fs->ping_lock);
}

static void long_end(struct wsfs *fs)
{
	pthread_mutex_lock(&fs->ping_lock);
	fs->long_calls--;
	pthread_mutex_unlock(&fs->ping_lock);
}

int wsfs_ping_stop(struct wsfs *fs, const struct timespec *until)
{
	bool started;

	pthread_mutex_lock(&fs->ping_lock);
	fs->ping_stop = true;
	started = fs->ping_started;
	pthread_cond_signal(&fs->ping_cond);
	pthread_mutex_unlock(&fs->ping_lock);
	if (!started)
		return 0;
	if (pthread_timedjoin_np(fs->ping_thread, NULL, until) == ETIMEDOUT)
		return -ETIMEDOUT;
	fs->ping_started = false;
	return 0;
}

/* The deadline of a long call, ms: never shorter than any other's. */
static uint32_t long_ms(const struct wsfs *fs)
{
	return fs->cfg.rpc_timeout_ms > WSFS_LONG_CALL_MS ? fs->cfg.rpc_timeout_ms
							 : WSFS_LONG_CALL_MS;
}

/* rpc_ex() of a long call ("Long calls"). */
static int rpc_long(struct wsfs *fs, const char *method, const ProtobufCMessage *req,
		    const ProtobufCMessageDescriptor *desc, void *ret_reply)
{
	int r;

	long_begin(fs);
	r = rpc_ex(fs, method, req, desc, ret_reply, long_ms(fs));
	long_end(fs);
	return r;
}

/* ---- write-behind ----
 *
 * A WRITE that goes on where its handle's last one ended, through the
 * kernel's pages (the handle is neither O_APPEND nor FOPEN_DIRECT_IO, and
 * it is not the writeback of an mmap), is replied to as soon as it is
 * recorded here; its thread then sends it to agentd while the
 * writer's next write(2) goes on, as sshfs's writes go on without waiting
 * for their replies. Up to cfg.write_behind are in flight; one that
 * overlaps another in flight on the same server inode waits for it first,
 * so agentd applies overlapping bytes in the order the kernel sent them.
 * Every other request first waits for the writes replied to before it came
 * (wb_wait()): whatever it reads or changes in agentd (a size, an mtime,
 * bytes, a truncate, the Close) comes after them, so what the kernel was
 * told stays true. The kernel marks a file's size and mtime stale after
 * each WRITE (fs/fuse/file.c fuse_write_update_attr), so a stat after a
 * write is such a request and sees the new size. A write agentd fails
 * fails every later write through each handle open on the file with its
 * errno until that handle's fsync or flush (so close(2)) reports it, as a
 * failed writeback is reported to every descriptor on a local disk
 * (fsync(2), close(2): "errors ... may be reported"), and the file's pages
 * are dropped (wsfs_inval_pages_later(): descriptors open on it read what
 * agentd has) and not kept at its next open. Each write's deadline counts
 * every write that may share the link with it (cfg.write_behind). wb_lock is a
 * leaf lock; the waits are bounded by the writes' RPC deadlines.
 */

static uint64_t gb_flush(struct wsfs *fs);
static void store_barrier(struct wsfs *fs);
static bool gb_attr(struct wsfs *fs, fuse_ino_t id, struct stat *st, bool mtime_set);
static void gb_fold(struct wsfs *fs, fuse_ino_t id);

/* Wait until every thread that holds @lock for reading now has let it go
 * (take it for writing a moment), rpc_timeout + WSFS_STORE_GRACE_MS at
 * most: a reader may be in an RPC, or wait for a READ that needs a free
 * worker. Any request thread, @lock not held. */
static void readers_drain(struct wsfs *fs, pthread_rwlock_t *lock)
{
	struct timespec until;

	until = wsb_deadline(CLOCK_MONOTONIC, fs->cfg.rpc_timeout_ms + WSFS_STORE_GRACE_MS);
	if (pthread_rwlock_clockwrlock(lock, CLOCK_MONOTONIC, &until) == 0)
		pthread_rwlock_unlock(lock);
}

/* Wait until every write (and, unless @writes_only, every unlink) sent
 * behind before this call (not those still gathered) has reached agentd or
 * failed. Any FUSE request thread; returns at once with none in flight. */
static void wb_wait_sent_ex(struct wsfs *fs, bool writes_only)
{
	unsigned n = fs->cfg.write_behind;
	uint64_t upto;

	if (atomic_load(&fs->wb_n) == 0)
		return;
	pthread_mutex_lock(&fs->wb_lock);
	upto = fs->wb_seq;
	for (;;) {
		bool busy = false;

		for (unsigned i = 0; i < n && !busy; i++)
			busy = fs->wb[i].seq && fs->wb[i].seq < upto &&
			       !(writes_only && fs->wb[i].unlink);
		if (!busy)
			break;
		pthread_cond_wait(&fs->wb_cond, &fs->wb_lock);
	}
	pthread_mutex_unlock(&fs->wb_lock);
}

/* wb_wait_sent_ex() of writes and unlinks. */
static void wb_wait_sent(struct wsfs *fs)
{
	wb_wait_sent_ex(fs, false);
}

/* Wait until every write replied to before this call has reached agentd
 * or failed, gathered ones (below) sent first. Any FUSE request thread. */
static void wb_wait_writes(struct wsfs *fs)
{
	gb_flush(fs);
	wb_wait_sent(fs);
}

/*
 * Record a write of bytes [@off, @end) of server inode @ino as in flight,
 * once a slot is free and no write in flight overlaps it; with @unlink,
 * an unlink sent behind (@ino, @off, @end 0: it overlaps nothing).
 * Returns its sequence number, for wb_end().
 */
static uint64_t wb_begin_ex(struct wsfs *fs, uint64_t ino, uint64_t off, uint64_t end,
			    bool unlink)
{
	unsigned n = fs->cfg.write_behind, slot;
	uint64_t seq;

	pthread_mutex_lock(&fs->wb_lock);
	for (;;) {
		bool overlap = false;

		slot = n;
		for (unsigned i = 0; i < n; i++) {
			const struct wsfs_wb *w = &fs->wb[i];

			if (!w->seq)
				slot = slot < n ? slot : i;
			else if (w->ino == ino && w->off < end && off < w->end)
				overlap = true;
		}
		if (!overlap && slot < n)
			break;
		pthread_cond_wait(&fs->wb_cond, &fs->wb_lock);
	}
	seq = fs->wb_seq++;
	fs->wb[slot] = (struct wsfs_wb){
		.seq = seq, .ino = ino, .off = off, .end = end, .unlink = unlink
	};
	atomic_fetch_add(&fs->wb_n, 1);
	pthread_mutex_unlock(&fs->wb_lock);
	return seq;
}

/* wb_begin_ex() of a write. */
static uint64_t wb_begin(struct wsfs *fs, uint64_t ino, uint64_t off, uint64_t end)
{
	return wb_begin_ex(fs, ino, off, end, false);
}

/*
 * The deadline of a write sent behind, ms: the writes in flight share the
 * link, those begun after it too (HTTP/2 takes its streams in turns, in no
 * fixed order), so it covers all their bytes, or a slow link would fail
 * what a write at a time does not. A link that stops is caught within the
 * default timeout all the same (client.c, "Stalled links").
 */
static uint32_t wb_timeout_ms(const struct wsfs *fs)
{
	uint64_t ms = (uint64_t)fs->cfg.rpc_timeout_ms * (1 + (uint64_t)fs->cfg.write_behind);

	return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

/* The write wb_begin() numbered @seq reached agentd or failed. */
static void wb_end(struct wsfs *fs, uint64_t seq)
{
	pthread_mutex_lock(&fs->wb_lock);
	for (unsigned i = 0; i < fs->cfg.write_behind; i++) {
		if (fs->wb[i].seq == seq) {
			fs->wb[i].seq = 0;
			atomic_fetch_sub(&fs->wb_n, 1);
			break;
		}
	}
	pthread_cond_broadcast(&fs->wb_cond);
	pthread_mutex_unlock(&fs->wb_lock);
}

/* Who asks wb_error(). */
enum wb_ask {
	WB_WRITE, /* a WRITE: fails with a failed write, which stays */
	WB_FLUSH, /* a FLUSH (close(2)): reports either, which stays */
	WB_FSYNC, /* an FSYNC: reports either, which is then gone */
};

/*
 * @f's write-behind error, or that of a SETATTR kept behind (sab_send(),
 * which fails no write): a positive errno, or 0. A write fails with it
 * (the kernel turns the error of a WRITE after the first of a write(2)
 * into a short count, and the caller's write of the rest must fail too,
 * or the file would hold a hole that nobody was told of). Only fsync(2)
 * takes it, as Linux reports a writeback error to each open file
 * description's fsync once (errseq, Documentation/filesystems/vfs.rst): a
 * FLUSH comes for every close(2) of a descriptor of the open file,
 * also a forked child's that exec closed (O_CLOEXEC) or that closed its
 * descriptors before exec (Python's subprocess); had that taken it, the
 * writer's own fsync and close would have succeeded over lost bytes.
 */
static int wb_error(struct wsfs_file *f, enum wb_ask ask)
{
	int e, s;

	if (ask == WB_WRITE)
		return atomic_load(&f->wb_err);
	if (ask == WB_FLUSH) {
		e = atomic_load(&f->wb_err);
		return e ? e : atomic_load(&f->sab_err);
	}
	e = atomic_exchange(&f->wb_err, 0);
	s = atomic_exchange(&f->sab_err, 0);
	return e ? e : s;
}

/* Give open file @h the setattr-behind error *@arg unless it has one. */
static void sab_error_set(struct node_fh *h, void *arg)
{
	struct wsfs_file *f = (struct wsfs_file *)h;
	int none = 0;

	atomic_compare_exchange_strong(&f->sab_err, &none, *(const int *)arg);
}

/* Give open file @h the write-behind error *@arg unless it has one. */
static void wb_error_set(struct node_fh *h, void *arg)
{
	struct wsfs_file *f = (struct wsfs_file *)h;
	int none = 0;

	atomic_compare_exchange_strong(&f->wb_err, &none, *(const int *)arg);
}

static void sab_drain(struct wsfs *fs);

/*
 * What every request but GETATTR, SETATTR and a written-behind WRITE does
 * first: wait for the writes (wb_wait_writes()) and send the SETATTRs
 * (sab_drain()) replied to before it came, so that whatever it reads or
 * changes in agentd comes after them. Any FUSE request thread.
 */
static void wb_wait(struct wsfs *fs)
{
	wb_wait_writes(fs);
	sab_drain(fs);
}

/* ---- entries ---- */

/*
 * Reply to a request that created or found @name in @parent with server
 * attributes @st: count one lookup and send the entry. The lookup is taken
 * back if the reply cannot be delivered (the request was interrupted).
 */
static void known_begin(struct wsfs *fs, uint64_t dir, uint64_t seq0);
static uint64_t reply_node(fuse_req_t req, struct wsfs *fs, uint64_t id, const struct stat *st,
			   uint64_t seq0, bool empty);

/*
 * Reply with the entry (@parent, @name) -> @st; returns its nodeid, or 0
 * when it could not be given to the kernel. @empty: a directory this
 * mount just made, whose (no) names are known from before the kernel can
 * ask for any (known_begin).
 */
static uint64_t reply_entry(fuse_req_t req, struct wsfs *fs, fuse_ino_t parent, const char *name,
			    const struct stat *st, uint64_t seq0, bool empty)
{
	uint64_t id;
	int r;

	r = node_lookup(fs->nodes, NODE_OWN, parent, name, strlen(name), st->st_ino, st_ident(st),
			st->st_mode, (uint32_t)st->st_nlink, &id);
	if (r < 0) {
		reply_err(req, r == -ESTALE ? -ENOENT : r);
		return 0;
	}
	return reply_node(req, fs, id, st, seq0, empty);
}

/* reply_entry() for node @id, already counted one lookup by node_lookup(). */
static uint64_t reply_node(fuse_req_t req, struct wsfs *fs, uint64_t id, const struct stat *st,
			   uint64_t seq0, bool empty)
{
	struct fuse_entry_param e;
	struct ttl t = ttl_for(fs, seq0, st);

	memset(&e, 0, sizeof(e));
	e.ino = id;
	e.attr = *st;
	e.attr_timeout = t.attr;
	e.entry_timeout = t.entry;
	if (S_ISREG(st->st_mode))
		(void)node_ksize_told(fs->nodes, id, st->st_size);
	node_told_set(fs->nodes, id, st);
	if (empty)
		known_begin(fs, id, seq0);
	if (fuse_reply_entry(req, &e) == -ENOENT) {
		node_forget(fs->nodes, id, 1);
		return 0;
	}
	return id;
}

/*
 * Reply with an AttrReply that created @name in @parent, of file type @type
 * (S_IFMT bits; 0: any but a directory, as a hard link is); returns the new
 * nodeid, or 0. A reply of another type is EIO and binds nothing: the
 * kernel would refuse the entry (fs/fuse/dir.c create_new_entry()) and
 * never FORGET it.
 */
static uint64_t reply_created(fuse_req_t req, struct wsfs *fs, fuse_ino_t parent,
			      const char *name, Wsbridge__V1__AttrReply *rep, uint64_t seq0,
			      mode_t type, bool empty)
{
	struct stat st;
	int r = attr_to_stat(rep->attr, &st);

	if (r == 0 && (type ? (st.st_mode & S_IFMT) != type : S_ISDIR(st.st_mode))) {
		wsb_warn("agentd's reply made a file of type %#o, not %#o: EIO",
			 (unsigned)(st.st_mode & S_IFMT), (unsigned)type);
		r = -EIO;
	}
	if (r < 0) {
		reply_err(req, r);
		return 0;
	}
	return reply_entry(req, fs, parent, name, &st, seq0, empty && S_ISDIR(st.st_mode));
}

/* A change of this mount's own has reached agentd (fs.h mgen); returns the
 * new generation. */
static uint64_t mutated(struct wsfs *fs)
{
	return atomic_fetch_add(&fs->mgen, 1) + 1;
}

/*
 * Keep what this mount knows of @dir's names (node.h, node_known_*) in step
 * with its own operation on @name: @r is the operation's result and @exists
 * whether the name exists after it. A failure may mean that the pod changed
 * the directory behind the mount's back: what is known of it is dropped.
 */
static void known_update(struct wsfs *fs, uint64_t dir, const char *name, int r, bool exists)
{
	mutated(fs);
	if (r < 0)
		node_known_drop(fs->nodes, dir);
	else if (exists)
		node_known_add(fs->nodes, dir, name, strlen(name));
	else
		node_known_del(fs->nodes, dir, name, strlen(name));
}

/*
 * @dir was just made by this mount, so it is empty: from now on its names
 * are known (LOOKUP of a missing one needs no round trip). Only while the
 * watch stream is live (it drops the set on the pod's changes) and when no
 * invalidation arrived since @seq0 (a change in the new directory that
 * the watch reported before the set existed).
 */
static void known_begin(struct wsfs *fs, uint64_t dir, uint64_t seq0)
{
	if (dir && fs->cfg.watch_timeout > 0 && atomic_load(&fs->watch_live))
		(void)node_known_begin(fs->nodes, dir, &fs->inval_seq, seq0);
}

/*
 * End the own change wsfs_self_begin() announced on @path: @r is the RPC's
 * result, @a the attributes in its reply (may be NULL).
 */
static void self_end_attr(struct wsfs *fs, const char *path, size_t len, int r,
			  const Wsbridge__V1__Attr *a)
{
	struct stat st;

	wsfs_self_end(fs, path, len, r == 0, r == 0 && a && attr_to_stat(a, &st) == 0 ? &st : NULL);
}

/* ---- open files ---- */

static struct wsfs_file *file_of(struct fuse_file_info *fi)
{
	return (struct wsfs_file *)(uintptr_t)fi->fh;
}

/* Whether @mode is a regular file's with an execute bit: one execve(2)
 * may run, which fails ETXTBSY while anyone has it open for writing. */
static bool mode_exec(mode_t mode)
{
	return S_ISREG(mode) && (mode & (S_IXUSR | S_IXGRP | S_IXOTH));
}

static struct wsfs_file *file_new(struct wsfs *fs, uint64_t sh, const struct stat *st,
				  Wsbridge__V1__Access access, bool append)
{
	struct wsfs_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	atomic_init(&f->wb_err, 0);
	f->sh = sh;
	f->gen = atomic_load(&fs->conn_gen);
	f->ino = st->st_ino;
	f->ident = st_ident(st);
	f->access = access;
	f->append = append;
	atomic_init(&f->exec, mode_exec(st->st_mode));
	pthread_mutex_lock(&files_lock);
	f->next = fs_files;
	if (fs_files)
		fs_files->prev = f;
	fs_files = f;
	pthread_mutex_unlock(&files_lock);
	return f;
}

/* ---- releases ----
 *
 * A close's RELEASE is replied to at once and agentd's handle released
 * after it (ws_release()): a Release per file closed, an RPC that keeps a
 * request thread and agentd busy while the next file's requests wait for
 * a CPU (untar, cp -r, a compiler's outputs). While the gathering thread
 * runs (gb_main()), release_handle() queues the handle instead, and the
 * queue goes as one Release (HandleRequest.more) once it holds
 * WSFS_RELEASE_BATCH handles (sent by the thread that filled it), once
 * its oldest waited rel_ns() (gb_main()), or as the thread stops. So the
 * pod sees the file closed (IN_CLOSE_WRITE) up to 5 ms later, within the
 * window its echo is expected in (wsfs_self_end()); every byte written
 * was agentd's before the close returned (FLUSH), and nothing waits on a
 * release. Not so for a writable handle of a file with an execute bit
 * (wsfs_file.exec): while agentd holds it open for writing, execve(2) of
 * the file in the pod fails ETXTBSY (execve(2)), and the kernel sends
 * RELEASE only after close(2) has returned (fs/fuse/file.c: a background
 * request). So FLUSH, which close(2) waits for, parks such a handle
 * (file_park()): agentd opens the file again read-only from it
 * (OpenRequest.reopen) and releases it; a later call on it (a dup(2)'d
 * descriptor still writing) opens it for writing again from the
 * read-only one (file_handle_rw()); a reopen by path after an agentd
 * restart keeps it read-only (file_reopen()). A file agentd could not
 * open for writing again (no owner write bit, and a trial reopen fails:
 * agentd is not root) is not parked.
 * A chmod that adds an execute bit (the linker makes its output
 * executable after closing it: binutils' bfd_close()) parks the node's
 * closed writable handles, waits for the closes in flight to queue
 * theirs (fs->put_lock) and sends the queue (exec_changed()); a writable
 * handle with the bit that is not parked is released at once
 * (file_destroy()). An agentd from
 * before HandleRequest.more releases the first handle only and replies
 * released 0: the rest then go one per call, as every release after it
 * (rel_single). A handle a Release cannot take to agentd now (it is
 * unreachable) is kept and released by the monitor once agentd answers
 * again (release_later(), wsfs_release_pending()), so that a network
 * blip does not leak agentd's handles (its table is bounded); after an
 * agentd restart that Release finds them gone, which is harmless (EBADF
 * for one alone, nothing for a batch).
 */

/* Keep handles @a[@n] agentd could not be told of for
 * wsfs_release_pending(), as many as WSFS_PENDING_MAX allows. */
static void release_later(struct wsfs *fs, const uint64_t *a, size_t n)
{
	pthread_mutex_lock(&fs->mon_lock);
	for (size_t i = 0; i < n; i++) {
		if (fs->n_pending == fs->cap_pending && fs->cap_pending < WSFS_PENDING_MAX) {
			size_t cap = fs->cap_pending ? 2 * fs->cap_pending : 64;
			uint64_t *p = realloc(fs->pending, cap * sizeof(*p));

			if (p) {
				fs->pending = p;
				fs->cap_pending = cap;
			}
		}
		if (fs->n_pending < fs->cap_pending)
			fs->pending[fs->n_pending++] = a[i];
	}
	pthread_mutex_unlock(&fs->mon_lock);
}

/* Release agentd's handles @a[@n] (none 0): one Release for all, unless
 * rel_single. Any thread but with no lock held; blocks on the RPCs. */
static void release_send(struct wsfs *fs, const uint64_t *a, size_t n)
{
	Wsbridge__V1__HandleRequest q = WSBRIDGE__V1__HANDLE_REQUEST__INIT;
	size_t i = 0;

	while (i < n) {
		Wsbridge__V1__ReleaseReply *rep = NULL;
		size_t k = atomic_load(&fs->rel_single) ? 1 : n - i;
		int r;

		q.handle = a[i];
		q.n_more = k - 1;
		q.more = (uint64_t *)(uintptr_t)(a + i + 1);
		/* Freeing an unlinked large file's blocks may take long. */
		r = rpc_long(fs, M("Release"), &q.base, &wsbridge__v1__release_reply__descriptor,
			     &rep);
		if (r == 0 && k > 1 && rep->released == 0) {
			if (!atomic_exchange(&fs->rel_single, true))
				wsb_notice("agentd releases one handle per call (it ignores "
					   "HandleRequest.more): releasing one by one");
			k = 1;
		}
		free_reply(rep);
		if (r == -ENOTCONN || (r == -EIO && atomic_load(&fs->conn_down)))
			release_later(fs, a + i, k);
		i += k;
	}
}

/* How long a queued handle waits at most, nanoseconds. */
static int64_t rel_ns(const struct wsfs *fs)
{
	return fs->cfg.gather_ns < WSFS_RELEASE_NS ? fs->cfg.gather_ns : WSFS_RELEASE_NS;
}

/* Take the queued handles into @a (WSFS_RELEASE_BATCH long); returns how
 * many. Under gb_lock. */
static size_t rel_take(struct wsfs *fs, uint64_t *a)
{
	size_t n = fs->rel_n;

	memcpy(a, fs->rel_q, n * sizeof(*a));
	fs->rel_n = 0;
	return n;
}

/* Send the handles queued for release now: on return every handle queued
 * before the call is released (rel_send_lock). Returns how many it sent.
 * Any thread with no lock held; takes rel_send_lock, then gb_lock. */
static size_t release_flush(struct wsfs *fs)
{
	uint64_t a[WSFS_RELEASE_BATCH];
	size_t n;

	pthread_mutex_lock(&fs->rel_send_lock);
	pthread_mutex_lock(&fs->gb_lock);
	n = rel_take(fs, a);
	pthread_mutex_unlock(&fs->gb_lock);
	release_send(fs, a, n);
	pthread_mutex_unlock(&fs->rel_send_lock);
	return n;
}

/* Wake the gathering thread if it sleeps past @due_ns (wsfs_now_ns()):
 * something it sends is due then. Any thread; gb_lock not held. */
static void gb_kick(struct wsfs *fs, int64_t due_ns)
{
	bool kick;

	pthread_mutex_lock(&fs->gb_lock);
	kick = fs->gb_started && !fs->gb_stop && due_ns < fs->gb_wake_ns;
	pthread_mutex_unlock(&fs->gb_lock);
	if (kick)
		pthread_cond_signal(&fs->gb_main_cond);
}

/* Release agentd's handle @sh (0: none): queued (above) or at once. Any
 * thread, with no lock held; may block on a Release RPC. */
static void release_handle(struct wsfs *fs, uint64_t sh)
{
	bool kick = false, full = false;

	if (!sh)
		return;
	pthread_mutex_lock(&fs->gb_lock);
	if (fs->gb_started && !fs->gb_stop && !atomic_load(&fs->rel_single) &&
	    fs->rel_n < WSFS_RELEASE_BATCH) {
		int64_t now = wsfs_now_ns();

		if (fs->rel_n == 0) {
			fs->rel_born_ns = now;
			kick = now + rel_ns(fs) < fs->gb_wake_ns;
		}
		fs->rel_q[fs->rel_n++] = sh;
		full = fs->rel_n == WSFS_RELEASE_BATCH;
		sh = 0;
	}
	pthread_mutex_unlock(&fs->gb_lock);
	if (kick)
		pthread_cond_signal(&fs->gb_main_cond);
	if (sh)
		release_send(fs, &sh, 1); /* not queued, or the queue is full */
	else if (full)
		(void)release_flush(fs);
}

/*
 * Open (OpenRequest @q; *@rep as rpc()'s): when agentd's handle table is
 * full (ENFILE: --max-handles; EMFILE from an agentd before 2026-12-04)
 * while handles of closed files wait in the release queue, those go at
 * once and the Open is asked once more. A reply agentd cannot mean is
 * -EIO, its handle released. Any FUSE request thread.
 */
static int open_rpc(struct wsfs *fs, Wsbridge__V1__OpenRequest *q, Wsbridge__V1__OpenReply **rep)
{
	int r = rpc(fs, M("Open"), &q->base, &wsbridge__v1__open_reply__descriptor, rep);
	const char *why;

	if ((r == -ENFILE || r == -EMFILE) && fs->gb_started && !atomic_load(&fs->rel_single)) {
		(void)release_flush(fs);
		r = rpc(fs, M("Open"), &q->base, &wsbridge__v1__open_reply__descriptor, rep);
	}
	if (r < 0)
		return r;
	/* An O_CREAT open that found a FIFO or a directory the pod made at
	 * the name since the kernel looked it up: ESTALE, and the VFS looks
	 * the name up again (LOOKUP_REVAL) and opens what is there, as a
	 * local disk would (the kernel refuses a created entry that is no
	 * regular file, fs/fuse/dir.c fuse_create_open(), and never releases
	 * it). An open without O_CREAT of such a name is the callers' to tell
	 * (ws_open(): ESTALE too). */
	if (q->create && (*rep)->handle && (*rep)->attr &&
	    ((*rep)->attr->mode & S_IFMT) != S_IFREG) {
		release_handle(fs, (*rep)->handle);
		free_reply(*rep);
		*rep = NULL;
		return -ESTALE;
	}
	/* What agentd cannot mean: a handle of 0 (a SetAttr of it would name
	 * the path, the root's for a handle's call), bytes not asked for (kept
	 * until read), a directory's open of another file type. */
	if (!(*rep)->handle)
		why = "handle 0";
	else if ((*rep)->data.len > q->read_ahead)
		why = "more bytes than asked for";
	else if (q->directory && (*rep)->attr && ((*rep)->attr->mode & S_IFMT) != S_IFDIR)
		why = "a file of another type";
	else
		return 0;
	wsb_warn("agentd's Open reply has %s: EIO", why);
	if ((*rep)->handle)
		release_handle(fs, (*rep)->handle);
	free_reply(*rep);
	*rep = NULL;
	return -EIO;
}

void wsfs_release_pending(struct wsfs *fs)
{
	uint64_t *a;
	size_t n;

	pthread_mutex_lock(&fs->mon_lock);
	a = fs->pending;
	n = fs->n_pending;
	fs->pending = NULL;
	fs->n_pending = fs->cap_pending = 0;
	pthread_mutex_unlock(&fs->mon_lock);
	if (n)
		wsb_info("releasing %zu handle(s) closed while agentd was unreachable", n);
	for (size_t i = 0; i < n; i++)
		release_handle(fs, a[i]);
	free(a);
}

/*
 * Release agentd's handles of @f and free it (nothing references it). A
 * writable handle of a file with an execute bit goes at once
 * ("Releases"), the positional one of a parked file too; others are
 * queued (release_handle()). A chmod that gave the file the bit after it
 * left its node, so that exec_changed() could not mark it, sends the
 * queue after this (fs->put_lock).
 */
static void file_destroy(struct wsfs *fs, struct wsfs_file *f)
{
	bool writable = f->access != WSBRIDGE__V1__ACCESS__RDONLY;
	bool now = writable && atomic_load(&f->exec);

	pthread_mutex_lock(&files_lock);
	if (f->prev)
		f->prev->next = f->next;
	else
		fs_files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	pthread_mutex_unlock(&files_lock);
	if (now && !f->parked)
		release_send(fs, &f->sh, f->sh ? 1 : 0);
	else
		release_handle(fs, f->sh);
	if (now)
		release_send(fs, &f->sh_pos, f->sh_pos ? 1 : 0);
	else
		release_handle(fs, f->sh_pos);
	pthread_mutex_destroy(&f->lock);
	free(f->ra);
	free(f);
}

/* Release the pins twice as old as a repeat of an open uses
 * (node_pins_expire(); ws_open()). Any thread, no lock held. */
static void pins_release(struct wsfs *fs)
{
	uint64_t ids[64];
	size_t n = node_pins_expire(fs->nodes, 2 * WSFS_STALE_NS, ids, 64);

	for (size_t i = 0; i < n; i++)
		release_handle(fs, ids[i]);
}

/* Release the handles kept for renamed-over files (node_keep()) whose
 * nodes are gone, and old pins (pins_release()); @all: every one
 * (unmount). */
static void kept_release(struct wsfs *fs, bool all)
{
	uint64_t ids[64];
	size_t n;

	while ((n = node_kept_drain(fs->nodes, ids, 64, all)) > 0) {
		for (size_t i = 0; i < n; i++)
			release_handle(fs, ids[i]);
	}
	if (all)
		return;
	pins_release(fs);
}

/* Drop one reference; the last one releases the handle. Takes
 * fs->put_lock for reading for a writable @f (a read-only handle cannot
 * make ETXTBSY): call with no lock held. */
static void file_put(struct wsfs *fs, struct wsfs_file *f)
{
	bool hold = f->access != WSBRIDGE__V1__ACCESS__RDONLY, last;

	if (hold)
		pthread_rwlock_rdlock(&fs->put_lock);
	last = node_fh_put(fs->nodes, &f->link);
	if (last)
		file_destroy(fs, f);
	if (hold)
		pthread_rwlock_unlock(&fs->put_lock);
	if (last)
		kept_release(fs, false); /* the node may have gone with it */
}

/*
 * agentd said EBADF for handle @failed of @f: unless another thread already
 * did, open the file again by its node's path. Safe only when the path still
 * names the same server inode; the open is never replayed with O_TRUNC,
 * O_CREAT or O_EXCL. An unlinked file or another inode makes @f broken (EIO
 * for good). Returns 0 (retry with f->sh) or -errno.
 */
static int file_reopen(struct wsfs *fs, struct wsfs_file *f, uint64_t failed)
{
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	uint64_t gen = atomic_load(&fs->conn_gen);
	char *path = NULL;
	size_t len;
	int r;

	pthread_mutex_lock(&f->lock);
	if (f->broken) {
		r = -EIO;
		goto out;
	}
	if (f->sh != failed) {
		r = 0; /* reopened meanwhile */
		goto out;
	}
	if (f->gen == gen) {
		/* Lost without a failure seen: agentd restarted between calls. */
		gen = atomic_fetch_add(&fs->conn_gen, 1) + 1;
	}
	r = path_of(fs, f->link.nodeid, &path, &len);
	if (r < 0) {
		wsb_warn("an open file (server inode %" PRIu64 ") was lost by agentd and has "
			 "no name any more: I/O on it fails with EIO",
			 f->ino);
		f->broken = true;
		r = -EIO;
		goto out;
	}
	q.path = bin(path, len);
	/* A parked file (file_park()) stays parked: read-only. */
	q.access = f->parked ? WSBRIDGE__V1__ACCESS__RDONLY : f->access;
	q.append = f->append && !f->parked;
	q.nofollow = true;
	r = open_rpc(fs, &q, &rep);
	if (r == -ENOENT || r == -ELOOP || r == -ENOTDIR) {
		f->broken = true;
		r = -EIO;
	}
	if (r < 0)
		goto out;
	if (!rep->attr || rep->attr->ino != f->ino ||
	    !node_same_ident(wsfs_attr_ident(rep->attr), f->ident)) {
		/* Another file under the name (perhaps on the freed inode
		 * number): not the one this handle had open. */
		release_handle(fs, rep->handle);
		f->broken = true;
		r = -EIO;
	} else {
		f->sh = rep->handle;
		f->gen = gen;
		wsb_notice("reopened a file that agentd had lost (generation %" PRIu64 ")", gen);
	}
out:
	if (r == -EIO && f->broken) {
		char *esc = path ? wsb_escape(path, strlen(path), 200) : NULL;

		wsb_warn("cannot reopen '%s' safely after agentd lost its handle: EIO",
			 esc ? esc : "?");
		free(esc);
	}
	pthread_mutex_unlock(&f->lock);
	free(path);
	free_reply(rep);
	return r;
}

/* Current handle of @f into *sh; -EIO if @f is broken. */
static int file_handle(struct wsfs_file *f, uint64_t *sh)
{
	int r = 0;

	pthread_mutex_lock(&f->lock);
	if (f->broken)
		r = -EIO;
	else
		*sh = f->sh;
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* Open the file of agentd's handle @from again with @f's access (and
 * O_APPEND) into *@ret (OpenRequest.reopen). Returns 0 or the Open's
 * -errno (EACCES without write permission). Called under f->lock. */
static int reopen_rw(struct wsfs *fs, struct wsfs_file *f, uint64_t from, uint64_t *ret)
{
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	int r;

	q.reopen = from;
	q.path = bin("\0", 1); /* ws_open(): names nothing */
	q.access = f->access;
	q.append = f->append;
	r = open_rpc(fs, &q, &rep);
	if (r == 0)
		*ret = rep->handle;
	free_reply(rep);
	return r;
}

/*
 * FLUSH (close(2)) of @f, a writable handle of a file with an execute bit
 * ("Releases"): agentd opens the file again read-only from @f's handle
 * (OpenRequest.reopen: the same inode, linked or not) and releases the
 * writable one (and the append file's positional one), so that nothing
 * holds the file open for writing once close(2) returns and the pod can
 * execve(2) it. If agentd cannot open it read-only (no read permission),
 * or could not open it for writing again (a mode without the owner's
 * write bit: a write on another descriptor would fail EACCES, unless a
 * trial reopen for writing shows that agentd may, as root may; a
 * non-owner agentd that wrote through a group or other bit since removed
 * is not told apart, wsfs not knowing agentd's uid), the handle stays as
 * it is. A positional handle opened since a park
 * (file_pos_handle(), for mmap's writeback) goes too. Any FUSE request
 * thread, no lock held; the Open runs under f->lock (as file_reopen()'s).
 */
static void file_park(struct wsfs *fs, struct wsfs_file *f)
{
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	uint64_t gave[3] = { 0, 0, 0 }, ro = 0;
	size_t ngave = 0;
	char *path = NULL;
	size_t len = 0;

	if (f->access == WSBRIDGE__V1__ACCESS__RDONLY || !atomic_load(&f->exec))
		return;
	pthread_mutex_lock(&f->lock);
	if (f->parked && f->sh_pos) {
		/* Opened since for mmap's writeback (file_pos_handle()). */
		gave[ngave++] = f->sh_pos;
		f->sh_pos = 0;
	} else if (!f->broken && !f->parked && f->sh) {
		q.reopen = f->sh;
		q.path = bin("\0", 1); /* ws_open(): names nothing */
		q.access = WSBRIDGE__V1__ACCESS__RDONLY;
		if (open_rpc(fs, &q, &rep) == 0) {
			uint64_t trial = 0;
			bool may = rep->attr && (rep->attr->mode & S_IWUSR);

			if (!may && !reopen_rw(fs, f, rep->handle, &trial)) {
				may = true;
				gave[ngave++] = trial;
			}
			if (may) {
				gave[ngave++] = f->sh;
				if (f->sh_pos)
					gave[ngave++] = f->sh_pos;
				f->sh = rep->handle;
				f->sh_pos = 0;
				f->parked = true;
			} else {
				ro = rep->handle; /* kept: file_handle_rw() could not undo it */
			}
		} /* else kept: its Release goes at once (file_destroy()) */
	}
	pthread_mutex_unlock(&f->lock);
	free_reply(rep);
	release_handle(fs, ro);
	if (!ngave)
		return;
	/* The Release is an IN_CLOSE_WRITE (CHANGED) echo, as ws_release()'s.
	 * A call that took a handle before the swap gets EBADF and goes
	 * again with the new one (file_rpc_ex()). */
	if (path_of(fs, f->link.nodeid, &path, &len) == 0)
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
	release_send(fs, gave, ngave);
	if (path) {
		wsfs_self_end(fs, path, len, true, NULL);
		free(path);
	}
}

/*
 * file_handle() for a call on @f, which may write: a parked handle
 * (file_park()) is opened for writing again first, from the read-only one,
 * with @f's access and O_APPEND, and the read-only one released. Returns 0
 * with *@sh, -EIO if @f is broken, or the Open's -errno (EACCES when the
 * file lost its write permission meanwhile and agentd is not root). A
 * read-only handle agentd no longer knows is given as it is, for the
 * call's EBADF to reopen the file by path. Any FUSE request thread, no
 * lock held.
 */
static int file_handle_rw(struct wsfs *fs, struct wsfs_file *f, uint64_t *sh)
{
	uint64_t ro = 0, rw = 0;
	int r = 0;

	pthread_mutex_lock(&f->lock);
	if (f->broken) {
		r = -EIO;
	} else if (f->parked) {
		r = reopen_rw(fs, f, f->sh, &rw);
		if (r == 0) {
			ro = f->sh;
			f->sh = rw;
			f->parked = false;
		} else if (r == -EBADF) {
			/* agentd lost it (a restart): the call's EBADF reopens
			 * by path (file_rpc_ex(), file_reopen()). */
			f->parked = false;
			r = 0;
		}
	}
	if (r == 0)
		*sh = f->sh;
	pthread_mutex_unlock(&f->lock);
	release_handle(fs, ro);
	return r;
}

/* node_fh_each(): set a file's wsfs_file.exec to *@arg (a bool). */
static void exec_set_fn(struct node_fh *n, void *arg)
{
	atomic_store(&((struct wsfs_file *)n)->exec, *(bool *)arg);
}

/* Writable open files of a node, referenced (exec_pick()). */
struct exec_pick {
	struct wsfs_file *f[8];
	size_t n;
};

/* node_fh_each(): @h into @arg when it is writable, with a reference (the
 * table's lock is held: sab_pick()). */
static void exec_pick(struct node_fh *h, void *arg)
{
	struct exec_pick *p = arg;
	struct wsfs_file *f = (struct wsfs_file *)h;

	if (p->n < sizeof(p->f) / sizeof(p->f[0]) && f->access != WSBRIDGE__V1__ACCESS__RDONLY) {
		h->refs++;
		p->f[p->n++] = f;
	}
}

/* Node @id's mode became @mode (a SETATTR's): its open files note whether
 * it has an execute bit. When it does, its writable handles whose FLUSH
 * came are parked (file_park()) and the handles waiting in the release
 * queue go at once ("Releases"), before the chmod(2) returns. Any FUSE
 * request thread, no lock held; blocks on RPCs. */
static void exec_changed(struct wsfs *fs, uint64_t id, mode_t mode)
{
	struct exec_pick pick = { .n = 0 };
	bool on = mode_exec(mode);

	node_fh_each(fs->nodes, id, exec_set_fn, &on);
	if (!on)
		return;
	node_fh_each(fs->nodes, id, exec_pick, &pick);
	for (size_t i = 0; i < pick.n; i++) {
		bool closing;

		pthread_mutex_lock(&fs->sab_lock);
		closing = pick.f[i]->closing;
		pthread_mutex_unlock(&fs->sab_lock);
		if (closing)
			file_park(fs, pick.f[i]);
		file_put(fs, pick.f[i]);
	}
	/* A file that left the node before the marks (its RELEASE runs now)
	 * is in the queue once this returns (a close holds the lock across
	 * Release calls, to an agentd gone quiet too: bounded). */
	readers_drain(fs, &fs->put_lock);
	if (fs->gb_started)
		(void)release_flush(fs);
}

/* Does agentd still know handle @sh? 1 yes, 0 no (EBADF), or -errno. */
static int handle_alive(struct wsfs *fs, uint64_t sh)
{
	Wsbridge__V1__SetAttrRequest q = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	int r;

	q.handle = sh;
	r = rpc(fs, M("SetAttr"), &q.base, &wsbridge__v1__attr_reply__descriptor, NULL);
	if (r == 0)
		return 1;
	return r == -EBADF ? 0 : r;
}

/* An open file and where its handle goes in a request; @write: the call
 * writes through it (Write, Fallocate, a SetAttr of the size, the
 * destination of CopyFileRange), so a parked handle is opened for writing
 * again first (file_handle_rw()). Anything else (a read, fsync, fchmod)
 * goes through the parked read-only handle as it is. */
struct hslot {
	struct wsfs_file *f;
	uint64_t *field;
	bool write;
};

/*
 * A call on one or two open files' handles: fills each slot's handle field,
 * calls, and when agentd answers EBADF because it lost a handle, reopens
 * (file_reopen) and calls again: up to twice more, for a handle that
 * file_park() gave back while the call was on its way (a close of another
 * descriptor of the file) and a second park before the retry. @timeout_ms:
 * the call's deadline.
 */
static int file_rpc_ex(struct wsfs *fs, struct hslot *slots, size_t n, const char *method,
		       const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
		       void *ret_reply, uint32_t timeout_ms)
{
	uint64_t used[2];
	int r;

	for (int attempt = 0;; attempt++) {
		bool reopened = false;

		/* Writing slots first: a parked file opened for writing
		 * again gives back the read-only handle, which a reading slot
		 * of the same file (CopyFileRange within one file) would
		 * otherwise have taken. */
		for (int pass = 0; pass < 2; pass++) {
			for (size_t i = 0; i < n; i++) {
				if (slots[i].write != (pass == 0))
					continue;
				r = pass == 0 ? file_handle_rw(fs, slots[i].f, &used[i])
					      : file_handle(slots[i].f, &used[i]);
				if (r < 0)
					return r;
				*slots[i].field = used[i];
			}
		}
		r = rpc_ex(fs, method, req, desc, ret_reply, timeout_ms);
		if (r != -EBADF || attempt > 2)
			return r;
		for (size_t i = 0; i < n; i++) {
			int a = handle_alive(fs, used[i]);

			if (a < 0)
				return a;
			if (a == 0) {
				a = file_reopen(fs, slots[i].f, used[i]);
				if (a < 0)
					return a;
				reopened = true;
			}
		}
		if (!reopened)
			return -EBADF; /* a genuine EBADF (wrong access mode) */
	}
}

/* file_rpc_ex() with the mount's deadline. */
static int file_rpc(struct wsfs *fs, struct hslot *slots, size_t n, const char *method,
		    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
		    void *ret_reply)
{
	return file_rpc_ex(fs, slots, n, method, req, desc, ret_reply, fs->cfg.rpc_timeout_ms);
}

/* file_rpc_ex() of a long call ("Long calls"). */
static int file_rpc_long(struct wsfs *fs, struct hslot *slots, size_t n, const char *method,
			 const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
			 void *ret_reply)
{
	int r;

	long_begin(fs);
	r = file_rpc_ex(fs, slots, n, method, req, desc, ret_reply, long_ms(fs));
	long_end(fs);
	return r;
}

/* fstat through @f's handle (SetAttr that sets nothing). */
static int file_stat(struct wsfs *fs, struct wsfs_file *f, struct stat *st)
{
	Wsbridge__V1__SetAttrRequest q = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	Wsbridge__V1__AttrReply *rep = NULL;
	struct hslot s = { f, &q.handle };
	int r;

	r = file_rpc(fs, &s, 1, M("SetAttr"), &q.base, &wsbridge__v1__attr_reply__descriptor, &rep);
	if (r == 0)
		r = attr_to_stat(rep->attr, st);
	free_reply(rep);
	if (r == 0) {
		/* The bytes Open brought along are of the file as it was then:
		 * a reply of another size or mtime (the pod wrote it since,
		 * and its event is still on the way) must not be followed by
		 * reads of them (read(2) gave 0 bytes of a file stat(2) had
		 * just called 17969 bytes long). */
		pthread_mutex_lock(&f->lock);
		if (f->ra_have && (st->st_size != f->ra_size ||
				   wsb_ns_of_ts(&st->st_mtim) != f->ra_mtime_ns)) {
			free(f->ra);
			f->ra = NULL;
			f->ra_len = 0;
			f->ra_have = f->ra_eof = false;
		}
		pthread_mutex_unlock(&f->lock);
	}
	return r;
}

/*
 * After a call that asked agentd to clear the set-ID bits (kill_suidgid) of
 * the file @f has open (node @ino) and answered with its mode @mode: an
 * agentd from before the field left bits wsb_suidgid_kill_bits() names,
 * so a SetAttr on the handle clears them. Returns true when it sent one
 * (what the call's reply said is stale then; the kept attributes are
 * dropped), false when no bits were left. Its failure fails nothing, as
 * agentd's own attempt. Any FUSE request thread, or gb_main().
 */
static bool kill_left(struct wsfs *fs, struct wsfs_file *f, fuse_ino_t ino, mode_t mode)
{
	Wsbridge__V1__SetAttrRequest q = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	Wsbridge__V1__AttrReply *rep = NULL;
	struct hslot s = { f, &q.handle, false };
	unsigned kill = wsb_suidgid_kill_bits(mode);

	if (!kill)
		return false;
	q.valid = WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE;
	q.mode = mode & 07777 & ~kill;
	(void)file_rpc(fs, &s, 1, M("SetAttr"), &q.base, &wsbridge__v1__attr_reply__descriptor,
		       &rep);
	free_reply(rep);
	mutated(fs);
	node_attr_drop(fs->nodes, ino);
	return true;
}

/* ---- the kernel's requests as read: FUSE_HANDLE_KILLPRIV_V2 ----
 *
 * Without FUSE_HANDLE_KILLPRIV_V2 the kernel asks GETXATTR
 * security.capability before every write(2) to a file (fs/inode.c
 * file_remove_privs(): a FUSE inode never gets S_NOSEC) and GETATTR before
 * every chown (fs/fuse/dir.c fuse_setattr()): a round trip each, half of
 * those a run of 4 KiB writes makes. With it the superblock is SB_NOSEC
 * (fs/fuse/inode.c process_init_reply()), the kernel asks once per inode,
 * and the server clears the set-ID bits itself: the kernel flags a write,
 * an O_TRUNC open or create and a truncate by a process without
 * CAP_FSETID (FUSE_WRITE_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID,
 * FATTR_KILL_SUIDGID; FUSE protocol 7.33) and agentd clears them
 * (proto kill_suidgid), as its own write in the pod does not when agentd
 * has CAP_FSETID; so does a SETATTR that sets nothing, the kernel's own
 * request (before fallocate(2) and copy_file_range(2), ws_setattr()). A
 * chown's FATTR_KILL_SUIDGID needs nothing: the pod's chown(2) clears
 * them for any caller. File capabilities: agentd's write,
 * truncate and chown in the pod remove security.capability themselves.
 * One case differs from a local file: S_ISGID without S_IXGRP, which
 * Linux 6.2 and later also clears for a writer outside the file's group;
 * agentd does not know the writer's groups and keeps it.
 *
 * libfuse 3.14 negotiates neither the flag nor passes the request flags
 * on; through fuse_session_custom_io(), io_read() sees each request as read
 * from /dev/fuse, before libfuse handles it on the same thread, and
 * io_writev() adds the flag to INIT's reply when the kernel offered it.
 */

/* The request this thread read last asks to clear set-ID bits. */
static __thread bool req_kill_suidgid;

/* fuse_custom_io.read: read(2) of /dev/fuse (-1 and errno on failure, as
 * libfuse expects), noting what libfuse 3.14 drops. Worker threads. */
static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct wsfs *fs = userdata;
	const struct fuse_in_header *h = buf;
	ssize_t n = read(fd, buf, len);
	size_t got = n > 0 ? (size_t)n : 0, arg = sizeof(*h);

	req_kill_suidgid = false;
	if (got < sizeof(*h))
		return n;
	switch (h->opcode) {
	case FUSE_WRITE:
		if (got >= arg + offsetof(struct fuse_write_in, lock_owner))
			req_kill_suidgid = ((const struct fuse_write_in *)(h + 1))->write_flags &
					   FUSE_WRITE_KILL_SUIDGID;
		break;
	case FUSE_OPEN:
		if (got >= arg + sizeof(struct fuse_open_in))
			req_kill_suidgid = ((const struct fuse_open_in *)(h + 1))->open_flags &
					   FUSE_OPEN_KILL_SUIDGID;
		break;
	case FUSE_CREATE:
		if (got >= arg + sizeof(struct fuse_create_in))
			req_kill_suidgid = ((const struct fuse_create_in *)(h + 1))->open_flags &
					   FUSE_OPEN_KILL_SUIDGID;
		break;
	case FUSE_INIT:
		if (got >= arg + offsetof(struct fuse_init_in, flags) + sizeof(uint32_t) &&
		    (((const struct fuse_init_in *)(h + 1))->flags & FUSE_HANDLE_KILLPRIV_V2))
			atomic_store(&fs->init_unique, h->unique);
		break;
	default:
		break;
	}
	return n;
}

/* fuse_custom_io.writev: writev(2) to /dev/fuse; INIT's reply gains
 * FUSE_HANDLE_KILLPRIV_V2 when the kernel offered it. Worker threads (and
 * notifications: any thread). */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct wsfs *fs = userdata;
	const struct fuse_out_header *oh = count > 0 ? iov[0].iov_base : NULL;
	uint64_t init = atomic_load(&fs->init_unique);

	if (init && oh && iov[0].iov_len >= sizeof(*oh) && oh->unique == init &&
	    oh->error == 0 && count == 2 &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t) &&
	    iov[1].iov_len <= sizeof(struct fuse_init_out) + 64) {
		unsigned char out[sizeof(struct fuse_init_out) + 64];
		struct iovec v[2] = { iov[0], { out, iov[1].iov_len } };
		uint32_t flags;

		memcpy(out, iov[1].iov_base, iov[1].iov_len);
		memcpy(&flags, out + offsetof(struct fuse_init_out, flags), sizeof(flags));
		flags |= FUSE_HANDLE_KILLPRIV_V2;
		memcpy(out + offsetof(struct fuse_init_out, flags), &flags, sizeof(flags));
		atomic_store(&fs->init_unique, 0);
		return writev(fd, v, 2);
	}
	return writev(fd, iov, count);
}

int wsfs_io_attach(struct wsfs *fs, struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };
	int r;

	/* libfuse hands fuse_custom_io the session's userdata: @fs. */
	r = fuse_session_custom_io(se, &io, fuse_session_fd(se));
	return r < 0 ? r : 0;
}

/* ---- init / destroy ---- */

static void ws_init(void *userdata, struct fuse_conn_info *conn)
{
	unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_PARALLEL_DIROPS |
			FUSE_CAP_ATOMIC_O_TRUNC;

	struct wsfs *fs = userdata;

	conn->want |= want & conn->capable;
	atomic_store(&fs->expire_only, (conn->capable & FUSE_CAP_EXPIRE_ONLY) != 0);
	/* Linux 6.6 (FUSE 7.39) drops, after writing back, the cached pages a
	 * FOPEN_DIRECT_IO write covers (fuse_direct_io); see file_opened(). */
	fs->direct_append = conn->proto_major > 7 || (conn->proto_major == 7 && conn->proto_minor >= 39);
	/*
	 * No writeback cache: sshfs dropped it for data loss on append with a
	 * remote writer (fuse-clients.md A.2). No POSIX/BSD lock support: the
	 * kernel then keeps locks locally, per mount. Invalidation is by
	 * timeouts, AUTO_INVAL_DATA and the watch stream.
	 */
	conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_POSIX_LOCKS |
				  FUSE_CAP_FLOCK_LOCKS | FUSE_CAP_EXPLICIT_INVAL_DATA |
				  FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_POSIX_ACL |
				  FUSE_CAP_CACHE_SYMLINKS | FUSE_CAP_NO_OPEN_SUPPORT |
				  FUSE_CAP_NO_OPENDIR_SUPPORT | FUSE_CAP_EXPORT_SUPPORT |
				  FUSE_CAP_DONT_MASK);
	/*
	 * READDIRPLUS always, not _AUTO: a ReadDir RPC returns the names and
	 * attributes of a whole page at once, and with _AUTO the kernel asks
	 * for plain READDIR after the first request, then LOOKUPs each
	 * subdirectory it enters: one more round trip per directory.
	 */
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	conn->max_write = (unsigned)CHUNK_MAX;
	conn->max_readahead = (unsigned)CHUNK_MAX;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
	wsb_info("FUSE protocol %u.%u, capable %#x, want %#x, max_write %u", conn->proto_major,
		 conn->proto_minor, conn->capable, conn->want, conn->max_write);
}

/* ---- readahead ---- */

int wsfs_mount_at(const char *mnt, char *dev, size_t dev_size, char *type, size_t type_size,
		  char *src, size_t src_size)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char d[32], point[PATH_MAX + 1], t[64] = "", s[PATH_MAX + 1] = "", *q = point;
		const char *p, *sep;

		if (sscanf(line, "%*s %*s %31s %*s %4096s", d, point) != 2)
			continue;
		/* After the optional fields: " - TYPE SOURCE SUPER_OPTIONS". */
		sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%63s %4096s", t, s) < 1)
			continue;
		/* Unescape \ooo in place. */
		for (p = point; *p; p++) {
			if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' &&
			    p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
				*q++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
				p += 3;
			} else {
				*q++ = *p;
			}
		}
		*q = '\0';
		if (strcmp(point, mnt) != 0)
			continue;
		if (dev)
			snprintf(dev, dev_size, "%s", d);
		if (type)
			snprintf(type, type_size, "%s", t);
		if (src)
			snprintf(src, src_size, "%s", s);
		r = 0;
	}
	free(line);
	fclose(f);
	return r;
}

/*
 * Raise the kernel's readahead for this mount to cfg.read_ahead_kb. A FUSE
 * mount's backing device starts at the kernel's default (128 KiB) and FUSE
 * INIT can only lower it (fs/fuse/inode.c process_init_reply), so a cold
 * sequential read went out as one 128 KiB-1 MiB request at a time; with a
 * few MiB the kernel keeps several 1 MiB READs in flight. The knob is
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb (sysfs-class-bdi), which only root
 * may write: otherwise the default stays, and this says so at info level.
 * Runs once, on the first request after INIT (which the kernel has applied
 * by then).
 */
static void readahead_tune(struct wsfs *fs)
{
	char dev[32], path[96], cur[32], type[64];
	unsigned have = 0;
	FILE *f;
	int r;

	if (!fs->cfg.read_ahead_kb || !fs->cfg.mountpoint)
		return;
	r = wsfs_mount_at(fs->cfg.mountpoint, dev, sizeof(dev), type, sizeof(type), NULL, 0);
	if (r == 0 && strncmp(type, "fuse", 4) != 0)
		r = -ENOENT; /* not this FUSE mount on top */
	if (r < 0) {
		wsb_info("readahead: %s not found in /proc/self/mountinfo", fs->cfg.mountpoint);
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	f = fopen(path, "re");
	if (f && fgets(cur, sizeof(cur), f))
		have = (unsigned)strtoul(cur, NULL, 10);
	if (f)
		fclose(f);
	if (have >= fs->cfg.read_ahead_kb)
		return;
	f = fopen(path, "we");
	if (!f || fprintf(f, "%u\n", fs->cfg.read_ahead_kb) < 0 || fclose(f) != 0) {
		wsb_info("readahead: cannot set %s to %u KiB (%s); it stays %u KiB", path,
			 fs->cfg.read_ahead_kb, strerror(errno), have);
		return;
	}
	wsb_debug("readahead: %s: %u KiB", path, fs->cfg.read_ahead_kb);
}

static pthread_once_t readahead_once = PTHREAD_ONCE_INIT;
static struct wsfs *readahead_fs;

static void readahead_run(void)
{
	readahead_tune(readahead_fs);
}

/* The first request after INIT: readahead_tune(), once per process. */
static void first_request(struct wsfs *fs)
{
	readahead_fs = fs;
	(void)pthread_once(&readahead_once, readahead_run);
}

/* ---- the connection's abort file ---- */

/*
 * The FUSE control filesystem's abort file of this mount's connection
 * (/sys/fs/fuse/connections/DEV/abort, Documentation/filesystems/fuse.rst
 * "Control filesystem"), open for writing, or -1. Written once, by
 * wsfs_conn_open() before crash_catch() installs the handlers that read it.
 *
 * Why: a thread of wsfs may sit in the kernel, uninterruptible, on a page
 * lock that a READ in flight holds (the page thread's fuse_notify_store()
 * and fuse_notify_inval_inode() lock each page they touch). If wsfs dies
 * or exits then, that READ is never answered, the thread never returns,
 * so the process never finishes exiting, its /dev/fuse descriptor is
 * never released and the connection never aborted: wsfs and the reader
 * hang for good. Writing the abort file ends every request of the
 * connection, which unlocks the pages. An open descriptor stays with this
 * connection: once the connection is gone, a write to it does nothing
 * (fs/fuse/control.c fuse_ctl_file_conn_get()), so it cannot reach a
 * later mount that took the same number.
 */
static int conn_abort_fd = -1;

int wsfs_conn_abort(void)
{
	int e = errno;
	int r = 0;

	if (conn_abort_fd < 0)
		return -ENOENT;
	if (write(conn_abort_fd, "1", 1) != 1)
		r = -errno;
	errno = e;
	return r;
}

static struct sigaction crash_old[NSIG];
static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

/*
 * A fatal signal: abort the connection (see conn_abort_fd), put back the
 * handler that was there before (the default, or a sanitizer's), and let
 * it act: a fault returns and faults again; a signal that was sent
 * (kill(2), raise(3), abort(3): si_code <= 0, sigaction(2)) is raised
 * again, and so is a machine-check SIGBUS that is no fault of this thread
 * (BUS_MCEERR_AO, sigaction(2)), which would not come again. Only
 * async-signal-safe calls (signal-safety(7)).
 */
static void crash_handler(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	(void)wsfs_conn_abort();
	(void)sigaction(sig, &crash_old[sig], NULL);
	if (si->si_code <= 0 || (sig == SIGBUS && si->si_code == BUS_MCEERR_AO))
		(void)raise(sig);
}

/*
 * A sanitizer that finds an error ends the process with _exit (unless
 * abort_on_error), no signal: abort the connection then too. Weak, so
 * that a build without a sanitizer needs no such symbol
 * (sanitizer/common_interface_defs.h).
 */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void crash_sanitizer_death(void)
{
	(void)wsfs_conn_abort();
}

/* Install crash_handler() for the signals that end a process with a
 * fault, except one ignored (a kill(2) of it ends nothing); once, from
 * wsfs_conn_open(). The handler that was there is read before the new
 * one goes in, so a crash between the two finds it. SA_ONSTACK: a
 * sanitizer's alternate stack serves a stack overflow. */
static void crash_catch(void)
{
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = crash_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++) {
		int sig = crash_signals[i];

		if (sigaction(sig, NULL, &crash_old[sig]) < 0 ||
		    (!(crash_old[sig].sa_flags & SA_SIGINFO) &&
		     crash_old[sig].sa_handler == SIG_IGN))
			continue;
		(void)sigaction(sig, &sa, NULL);
	}
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(crash_sanitizer_death);
}

int wsfs_conn_open(struct wsfs *fs)
{
	char dev[32], type[64], path[96];
	unsigned maj, min;
	int fd, r;

	if (conn_abort_fd >= 0)
		return 0;
	if (!fs->cfg.mountpoint)
		return -ENOENT;
	r = wsfs_mount_at(fs->cfg.mountpoint, dev, sizeof(dev), type, sizeof(type), NULL, 0);
	if (r == 0 && strcmp(type, "fuse.wsfs") != 0 && strcmp(type, "fuse") != 0)
		r = -ENOENT; /* not this mount on top */
	if (r == 0 &&
	    (sscanf(dev, "%u:%u", &maj, &min) != 2 || maj >= 4096 || min >= (1u << 20)))
		r = -EINVAL;
	if (r < 0)
		goto fail;
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", maj << 20 | min);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	conn_abort_fd = fd;
	crash_catch();
	return 0;
fail:
	wsb_info("no FUSE abort file for %s (%s): a crash of wsfs while the kernel holds one "
		 "of its threads may leave the mount hung",
		 fs->cfg.mountpoint, strerror(-r));
	return r;
}

/* ---- lookup / forget / getattr ---- */

/* Longest a LOOKUP or OPEN whose answer crossed an own change of names
 * waits for it to end before it asks again, ms (node_names_wait()). */
#define NAMES_WAIT_MS 200

/*
 * LOOKUP of a name the kernel holds while agentd cannot be reached. The
 * kernel drops an entry whose revalidating LOOKUP fails with anything but
 * ENOMEM or EINTR (fs/fuse/dir.c fuse_dentry_revalidate), and a directory
 * that is some process's cwd then stays "(deleted)" for it after agentd is
 * back (git: "Unable to read current working directory"). Answer with the
 * node the table has, timeouts 0 (the next use asks again), and attributes
 * the kernel does not take: notify_inval_inode (offset -1) first moves the
 * inode's attr_version past the one the LOOKUP was sent with, so
 * fuse_change_attributes() skips them, and the caller's stat asks GETATTR,
 * which fails with ENOTCONN while agentd is away. True when it replied.
 * Any FUSE request thread.
 */
static bool lookup_keep(fuse_req_t req, struct wsfs *fs, fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	uint64_t id = node_child(fs->nodes, parent, name, len), got = 0;
	struct fuse_entry_param e;
	struct node_info info;

	if (!id || !fs->se || node_info(fs->nodes, id, &info) < 0 || !info.ino || !info.nlookup)
		return false;
	if (node_lookup(fs->nodes, NODE_ANY, parent, name, len, info.ino, info.ident, info.mode, 1,
			&got) < 0)
		return false;
	if (got != id) {
		node_forget(fs->nodes, got, 1);
		return false;
	}
	(void)fuse_lowlevel_notify_inval_inode(fs->se, id, -1, 0);
	memset(&e, 0, sizeof(e));
	e.ino = id;
	e.attr.st_ino = (ino_t)info.ino;
	e.attr.st_mode = info.mode;
	e.attr.st_nlink = 1;
	if (fuse_reply_entry(req, &e) == -ENOENT)
		node_forget(fs->nodes, id, 1);
	return true;
}

static uint64_t stale_path(const char *path, size_t len);
static bool stale_pending(struct wsfs *fs, pid_t tid, uint64_t path);

/*
 * LOOKUP. The VFS's repeat of an open told ESTALE (stale_told(): the name
 * held another file by the time the OPEN came) asks agentd to pin the
 * file it finds (StatRequest.pin): the node keeps the handle
 * (node_pin_set()) and the OPEN that follows opens that very file
 * (ws_open()), as a local file system opens the inode its lookup found;
 * a pod that replaces the name in a loop would otherwise beat the
 * repeat too, and the new file would be opened on the old kernel inode.
 * The pin serves every repeat that comes to the node within
 * WSFS_STALE_NS of the last lookup that asked for one (threads of several
 * processes may be told ESTALE at once), and is released once twice that
 * old (node_pins_expire(): by the gathering thread, gb_main(), within a
 * second, where it runs; and by any close or FORGET), or with the node.
 */
static void ws_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	uint64_t seq0 = seq_now(fs), gen, id = 0;
	struct stat st;
	char *path = NULL;
	size_t len;
	int r, tries = 0;

	wb_wait(fs);
	first_request(fs);
	/* A name missing from a directory whose names are all known (a name
	 * too long for any directory is agentd's ENAMETOOLONG). */
	if (strlen(name) <= NAME_MAX &&
	    node_known_has(fs->nodes, parent, name, strlen(name),
			   watch_ttl_ns(fs)) == 0) {
		node_unlink_since(fs->nodes, NODE_ANY, parent, name, strlen(name));
		r = -ENOENT;
		goto out;
	}
again:
	/* An answer from before a change of names through the mount (a
	 * rename over this name, say, or of a directory above it) must not
	 * undo that change in the node table: ask again, by the path the
	 * table gives now (node_names_gen()); a third time, take it. */
	gen = ++tries < 3 ? node_names_gen(fs->nodes, parent) : NODE_ANY;
	free(path);
	path = NULL;
	r = child_path(fs, parent, name, &path, &len);
	if (r < 0)
		goto out;
	q.path = bin(path, len);
	q.pin = stale_pending(fs, fuse_req_ctx(req)->pid, stale_path(path, len));
	r = rpc(fs, M("Stat"), &q.base, &wsbridge__v1__stat_reply__descriptor, &rep);
	if (r == 0 && !q.pin)
		rep->pin = 0; /* not asked for: not ours to keep or release */
	if (r == 0)
		r = attr_to_stat(rep->attr, &st);
	if (r == 0) {
		r = node_lookup(fs->nodes, gen, parent, name, strlen(name), st.st_ino, st_ident(&st),
				st.st_mode, (uint32_t)st.st_nlink, &id);
		if (r == 0 && rep->pin && S_ISREG(st.st_mode)) {
			/* Not kept when the node has one already. */
			uint64_t spare = node_pin_set(fs->nodes, id, st.st_ino, st_ident(&st),
						      rep->pin);

			rep->pin = 0;
			if (spare)
				release_handle(fs, spare);
			else /* gb_main() lets it go once old */
				gb_kick(fs, node_pins_due(fs->nodes));
		}
		if (r == -ESTALE) {
			reply_err(req, -ENOENT); /* the parent went */
			goto done;
		}
	} else if (r == -ENOENT && node_unlink_since(fs->nodes, gen, parent, name,
						      strlen(name)) == -EAGAIN) {
		r = -EAGAIN;
	}
	if (rep && rep->pin) {
		release_handle(fs, rep->pin); /* not kept */
		rep->pin = 0;
	}
	if (r == -EAGAIN) {
		free_reply(rep);
		rep = NULL;
		node_names_wait(fs->nodes, parent, NAMES_WAIT_MS);
		goto again;
	}
	if ((r == -ENOTCONN || (r == -EIO && atomic_load(&fs->conn_down))) &&
	    lookup_keep(req, fs, parent, name))
		goto done;
	/* Not from an answer that may predate an own create of the name: it
	 * would then be answered ENOENT here without asking. */
	if (r == -ENOENT && gen != NODE_ANY && node_names_still(fs->nodes, parent, gen))
		node_known_del(fs->nodes, parent, name, strlen(name));
out:
	if (r == 0) {
		reply_node(req, fs, id, &st, seq0, false);
	} else if (r == -ENOENT) {
		struct ttl t;
		bool kept = false;

		/*
		 * A negative dentry no node stands for: one that lasts
		 * longer than entry_timeout because the watch vouches for it
		 * must go when the watch does (wsfs_invalidate_all). Noted
		 * before ttl_for(): an invalidation after that check finds
		 * it in the set.
		 */
		if (fs->cfg.negative_timeout < 0 && fs->cfg.watch_timeout > fs->cfg.entry_timeout &&
		    atomic_load(&fs->watch_live) && seq_now(fs) == seq0)
			kept = wsfs_neg_add(fs, parent, name, strlen(name)) == 0;
		t = ttl_for(fs, seq0, NULL);
		if (t.negative > fs->cfg.entry_timeout && fs->cfg.negative_timeout < 0 && !kept)
			t.negative = fs->cfg.entry_timeout; /* the set is full */
		if (t.negative > 0) {
			struct fuse_entry_param e;

			memset(&e, 0, sizeof(e));
			e.entry_timeout = t.negative;
			fuse_reply_entry(req, &e);
		} else {
			fuse_reply_err(req, ENOENT);
		}
	} else {
		reply_err(req, r);
	}
done:
	if (rep && rep->pin)
		release_handle(fs, rep->pin); /* not kept */
	free(path);
	free_reply(rep);
}

static void ws_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct wsfs *fs = FS(req);

	node_forget(fs->nodes, ino, nlookup);
	fuse_reply_none(req);
	kept_release(fs, false);
}

static void ws_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct wsfs *fs = FS(req);

	for (size_t i = 0; i < count; i++)
		node_forget(fs->nodes, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
	kept_release(fs, false);
}

/*
 * Attributes of node @ino: through an open file when it has one (fstat: right
 * for an unlinked or replaced open file), else by path, lstat. A path that
 * now names another kind of file is ESTALE, so that the VFS looks the name
 * up again (it retries once with LOOKUP_REVAL).
 */
static int node_stat(struct wsfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, struct stat *st)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct node_fh *link;
	struct node_info info;
	char *path = NULL;
	size_t len;
	bool broken = false;
	int r;

	if (fi && fi->fh)
		return file_stat(fs, file_of(fi), st);
	link = node_fh_get(fs->nodes, ino);
	if (link) {
		struct wsfs_file *f = (struct wsfs_file *)link;

		r = file_stat(fs, f, st);
		file_put(fs, f);
		if (r != -EIO)
			return r;
		/* broken: the path, if it still holds the file */
		broken = true;
	}
	{
		/* A file this mount's rename replaced: its kept handle. */
		Wsbridge__V1__SetAttrRequest k = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
		Wsbridge__V1__AttrReply *krep = NULL;

		k.handle = node_kept(fs->nodes, ino);
		if (k.handle) {
			r = rpc(fs, M("SetAttr"), &k.base, &wsbridge__v1__attr_reply__descriptor,
				&krep);
			if (r == 0)
				r = attr_to_stat(krep->attr, st);
			free_reply(krep);
			return r == -EBADF ? -ESTALE : r;
		}
	}
	for (unsigned tries = 0;; tries++) {
		r = node_info(fs->nodes, ino, &info);
		if (r < 0)
			return r;
		r = path_of(fs, ino, &path, &len);
		if (r < 0)
			return r;
		q.path = bin(path, len);
		r = rpc(fs, M("Stat"), &q.base, &wsbridge__v1__stat_reply__descriptor, &rep);
		if (r == 0)
			r = attr_to_stat(rep->attr, st);
		/* A hard link removed in the pod: try the file's other names. */
		if (r != -ENOENT || tries >= 8 || node_drop_first_name(fs->nodes, ino) < 0)
			break;
		free(path);
		path = NULL;
		free_reply(rep);
		rep = NULL;
	}
	if (r == 0) {
		if (ino == NODE_ROOT_ID) {
			if (!S_ISDIR(st->st_mode))
				r = -EIO; /* agentd serves a directory or nothing */
			else if (info.ino != st->st_ino)
				node_set_ino(fs->nodes, ino, st->st_ino, st->st_mode);
		} else if (info.mode != (st->st_mode & S_IFMT)) {
			/* Another kind of file: the kernel would mark its inode
			 * bad; ESTALE makes the VFS look the name up again. */
			r = -ESTALE;
		} else if (broken && !same_file(&info, st)) {
			/* The node's open file was lost (agentd restarted and
			 * the name holds another file): fstat(2) of its
			 * descriptor (a GETATTR without a handle, like stat(2))
			 * must not get that file's attributes. */
			r = -ESTALE;
		}
		/* Another file of the same kind (renamed over it in the pod):
		 * stat(2) of the name gets what the name holds now; the next
		 * lookup gives the name a new node. */
	}
	free(path);
	free_reply(rep);
	return r;
}

/*
 * What own_attr() compares besides mgen: inval_seq + agen. Both only grow,
 * so the sum stays equal exactly while neither moves.
 */
static uint64_t own_seq(struct wsfs *fs)
{
	return atomic_load(&fs->inval_seq) + atomic_load(&fs->agen);
}

/*
 * Keep @st, the reply of an own write or setattr of @ino that began at
 * generation @gen0 and ended at @gen (mutated()) with own_seq() @seq0 at its
 * start, for own_attr(). Only a regular file with one link (inotify reports
 * a change under one name only: ttl_for()), and only when no other own
 * change ran meanwhile (@gen == @gen0 + 1): two replies of one inode may be
 * handled in another order than agentd ran the calls. Otherwise, or with
 * @st NULL, forgets what was kept.
 */
static void own_keep(struct wsfs *fs, fuse_ino_t ino, const struct stat *st, uint64_t gen0,
		     uint64_t gen, uint64_t seq0)
{
	struct node_info info;

	/* The node's own file, not one a handle opened by name after the pod
	 * renamed another over it (ws_open). */
	if (st && S_ISREG(st->st_mode) && st->st_nlink == 1 && gen == gen0 + 1 &&
	    node_info(fs->nodes, ino, &info) == 0 && same_file(&info, st))
		node_own_set(fs->nodes, ino, st, gen, seq0, wsfs_now_ns());
	else
		node_own_set(fs->nodes, ino, NULL, 0, 0, 0);
}

/*
 * The attributes of @ino as this mount's own last write or setattr left
 * them (own_keep), when nothing can have changed them since: no other own
 * change (mgen), no event at all (inval_seq) while the watch is live, no
 * read in agentd (agen: atime), and younger than attr_timeout. The kernel
 * drops a file's cached mtime and size after every write (fs/fuse/file.c
 * fuse_write_update_attr) and asks before every chown (fs/fuse/dir.c
 * fuse_setattr, without handle_killpriv): after untar's write, utimensat
 * and fchown, or a compiler's write and stat, one call saved per file.
 */
static bool own_attr(struct wsfs *fs, fuse_ino_t ino, struct stat *st)
{
	/* Some changes send no event (a write through a hard link outside
	 * the workspace, a read in the pod): such a file's attributes last
	 * attr_timeout at most (ttl_for), and so do these, and the reply. */
	int64_t ttl = (int64_t)(fs->cfg.attr_timeout * 1e9);

	if (watch_ttl_ns(fs) <= 0 || ttl <= 0 || !atomic_load(&fs->watch_live))
		return false;
	return node_own_get(fs->nodes, ino, atomic_load(&fs->mgen), own_seq(fs),
			    wsfs_now_ns() - ttl, st);
}

/* Around a call that may read file data in agentd (own_attr, agen). */
static void read_mark(struct wsfs *fs)
{
	atomic_fetch_add(&fs->agen, 1);
}

/*
 * The attributes agentd last reported for @ino (node_attr_*: with an Open
 * or a Read, which may have set atime, or with the last page of a listing
 * of a directory, dir_load()), while the watch is live and they
 * are at most watch_timeout old, as ttl_for() lets the kernel keep them:
 * the kernel asks GETATTR after every read it sent (fs/fuse/file.c
 * fuse_invalidate_atime), so without these a `git commit` after `git add`
 * costs one Stat per file.
 */
static bool attr_kept(struct wsfs *fs, fuse_ino_t ino, struct stat *st)
{
	if (watch_ttl_ns(fs) <= 0 || !atomic_load(&fs->watch_live))
		return false;
	return node_attr_get_gen(fs->nodes, ino, wsfs_now_ns() - watch_ttl_ns(fs),
				 atomic_load(&fs->mgen), st);
}

/* Keep @a (may be NULL), reported by a call on @ino that began at @at_ns
 * under node_attr_ver() @ver, for attr_kept(). */
static void attr_keep(struct wsfs *fs, fuse_ino_t ino, uint64_t ver, int64_t at_ns,
		      const Wsbridge__V1__Attr *a)
{
	struct stat st;

	if (a && attr_to_stat(a, &st) == 0)
		node_attr_put(fs->nodes, ino, ver, &st, at_ns);
}

/*
 * Keep @a for @ino after a change of this mount's own that dropped what was
 * kept (a version taken before the call would not match): only when no
 * event at all came since the call began (inval_seq still @seq0) and no
 * other own change ended meanwhile (mgen @mgen0 + 1: the call's own bump;
 * each change bumps mgen before its wsfs_self_end()), and with the version
 * taken first, so that a drop after these checks still drops it.
 */
static void attr_keep_new(struct wsfs *fs, fuse_ino_t ino, uint64_t seq0, uint64_t mgen0,
			  int64_t at_ns, const Wsbridge__V1__Attr *a)
{
	uint64_t ver = node_attr_ver(fs->nodes, ino);

	if (seq_now(fs) == seq0 && atomic_load(&fs->mgen) == mgen0 + 1)
		attr_keep(fs, ino, ver, at_ns, a);
}

/*
 * Whether attributes @st may go to the kernel for node @ino: of the node's
 * own kind of file. The kernel marks an inode whose type changes bad for
 * good (fs/fuse/dir.c fuse_do_getattr, inode_wrong_type(): every later call
 * on it fails with EIO, on the root until the next mount). A name that now
 * holds another kind of file is ESTALE before this (node_stat(), ws_setattr()
 * by path), and a handle's file keeps its kind, so only a broken or hostile
 * agentd gets here. Returns 0 or -EIO (logged once per process). Any FUSE
 * thread.
 */
static int attr_fits(struct wsfs *fs, fuse_ino_t ino, const struct stat *st)
{
	static atomic_bool warned;
	struct node_info info;

	if (node_info(fs->nodes, ino, &info) < 0 || info.mode == (st->st_mode & S_IFMT))
		return 0;
	if (!atomic_exchange(&warned, true))
		wsb_warn("agentd reported another kind of file (mode %#o, was %#o) for server "
			 "inode %" PRIu64 ": answering EIO (logged once)",
			 (unsigned)st->st_mode, (unsigned)info.mode, (uint64_t)st->st_ino);
	return -EIO;
}

static void isize_cover(struct wsfs *fs, fuse_ino_t ino, struct wsfs_file *f, off_t size);

/*
 * Outage attributes. While agentd is away (C1), a GETATTR fails with
 * ENOTCONN; a process polling a descriptor with fstat(2) then gives up
 * the file (tail -f: "no files remaining"), though the file is fine and
 * nothing changed that the mount could know of, and with
 * default_permissions every path walk fails (the kernel asks each
 * directory's attributes for its permission check). So the attributes the
 * kernel was last told of a regular file the mount holds open, or of a
 * directory (node_told_set() at every entry and attribute reply, and at
 * an O_TRUNC open; a write through the mount or a store of pages grows
 * the size as the kernel does, node_told_grow(); a fallocate or
 * copy_file_range into the file, or a mode the kernel must ask again,
 * drops them)
 * answer a GETATTR of it that failed so, with no caching (attr_timeout 0:
 * it asks again each time, and agentd's answer once it is back): the file
 * shows as it was. A read, a listing begun anew or anything else still
 * fails.
 */
static void reply_attr(struct wsfs *fs, fuse_req_t req, fuse_ino_t ino, const struct stat *st,
		       double ttl)
{
	node_told_set(fs->nodes, ino, st);
	fuse_reply_attr(req, st, ttl);
}

/*
 * Answer GETATTR of @ino (asked at @t0_ns) with @st. When a watch
 * invalidation of the inode crosses the reply, the kernel drops the
 * reply's attributes (fs/fuse/inode.c fuse_change_attributes(): the
 * inode's attr_version moved past the request's) while stat(2) still
 * returns them (fuse_do_getattr() fills them in from the reply): its
 * i_size stays an older one, a read(2) stops there, and a mmap(2) of the
 * size stat(2) gave dies of SIGBUS past it (filemap_fault()), as when the
 * pod writes or replaces a file that a host process opens. So for a
 * regular file the mount has open (@fi's, else any of the node's) and has
 * never written, truncated or allocated (node_noted(): the kernel set its
 * i_size itself then, perhaps past what agentd keeps, and a store makes
 * the kernel drop this reply too, so a smaller size would never reach it:
 * after a write-behind that failed ENOSPC the mount read bytes the pod did
 * not have), with
 * an invalidation noted (node_note()) at or after @t0_ns -
 * WSFS_CROSS_NS (the kernel may have sent the request a while before wsfs
 * read it), or a size above the least the kernel may hold
 * (node_ksize_told(): anything else that moved attr_version, a LOOKUP's
 * reply, a store, a short READ, drops a reply too), i_size is made to
 * cover @st's size before the reply
 * (isize_cover(): one Read; a store only ever grows i_size), and once
 * more after it for one noted while the reply was on its way. For answers
 * from agentd (a Stat, or Open's reply); an own change's attributes are
 * replied as they are. FUSE worker thread.
 */
static void getattr_reply(struct wsfs *fs, fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi, const struct stat *st, double ttl, int64_t t0_ns)
{
	struct wsfs_file *f = NULL;
	int64_t t1 = wsfs_now_ns(), at;
	bool wrote = false, grew = false;

	if (S_ISREG(st->st_mode))
		grew = node_ksize_told(fs->nodes, ino, st->st_size) < st->st_size;
	if (S_ISREG(st->st_mode) && st->st_size > 0 && fs->se) {
		/* A reference: RELEASE may free @fi's file once it has the reply. */
		if (fi && fi->fh) {
			f = file_of(fi);
			node_fh_ref(fs->nodes, &f->link);
		} else {
			f = (struct wsfs_file *)node_fh_get(fs->nodes, ino);
		}
	}
	at = f ? node_noted(fs->nodes, ino, &wrote) : 0;
	if (f && wrote) {
		file_put(fs, f);
		f = NULL;
		at = 0;
	}
	if (f && (grew || (at && at >= t0_ns - WSFS_CROSS_NS)))
		isize_cover(fs, ino, f, st->st_size);
	reply_attr(fs, req, ino, st, ttl);
	if (f) {
		int64_t at2 = node_noted(fs->nodes, ino, NULL);

		if (at2 > at && at2 >= t1)
			isize_cover(fs, ino, f, st->st_size);
		file_put(fs, f);
	}
}

/* Whether the mount holds a file open on node @ino (node_info()). */
static bool node_held(struct wsfs *fs, fuse_ino_t ino)
{
	struct node_info info;

	return node_info(fs->nodes, ino, &info) == 0 && info.open_files > 0;
}

/* Whether node @ino has a name in the table (node_info().attached). */
static bool node_attached(struct wsfs *fs, fuse_ino_t ino)
{
	struct node_info info;

	return node_info(fs->nodes, ino, &info) == 0 && info.attached;
}

static void ws_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	uint64_t seq0 = seq_now(fs);
	int64_t t0 = wsfs_now_ns();
	struct stat st;
	int r;

	/* Not sab_drain() first: what a SETATTR kept behind gave is own_attr(),
	 * and what gathered writes of the file did is gb_attr(). */
	wb_wait_sent(fs);
	first_request(fs);
	if (own_attr(fs, ino, &st) && gb_attr(fs, ino, &st, false) &&
	    attr_fits(fs, ino, &st) == 0) {
		reply_attr(fs, req, ino, &st, fs->cfg.attr_timeout);
		return;
	}
	if (atomic_load(&fs->gb_n) > 0) {
		wb_wait_writes(fs);
		if (own_attr(fs, ino, &st) && attr_fits(fs, ino, &st) == 0) {
			reply_attr(fs, req, ino, &st, fs->cfg.attr_timeout);
			return;
		}
	}
	sab_drain(fs);
	if (attr_kept(fs, ino, &st) && attr_fits(fs, ino, &st) == 0) {
		getattr_reply(fs, req, ino, fi, &st, fs->cfg.attr_timeout, t0);
		return;
	}
	if (node_gone_get(fs->nodes, ino, &st)) {
		reply_attr(fs, req, ino, &st, fs->cfg.attr_timeout);
		return;
	}
	r = node_stat(fs, ino, fi, &st);
	if (r == 0)
		r = attr_fits(fs, ino, &st);
	if (r == -ENOENT && !fi && ino != NODE_ROOT_ID && node_attached(fs, ino)) {
		/*
		 * The pod removed (or moved) the name and its event is still on
		 * its way: the kernel's dentry still says it is there, and what
		 * it does next by that dentry would be wrong (rm -rf's lstat
		 * gave ENOENT, its unlink(2) then EISDIR of the cached
		 * directory). ESTALE makes the VFS look the path up again
		 * (vfs_statx(), do_faccessat()... retry once with LOOKUP_REVAL):
		 * the name is gone then, or found where it went.
		 */
		r = -ESTALE;
	} else if (r == -ENOENT && !fi && node_held(fs, ino)) {
		/* An open descriptor's file lost (agentd restarted, the pod
		 * moved it): its own error, as the C1 test of a replaced
		 * file shows it, not that of a name. */
		r = -ESTALE;
	} else if (r == -ESTALE && !fi && !node_attached(fs, ino) && !node_held(fs, ino)) {
		/* No name left, nor an open file (fstat(2) of a directory the
		 * pod removed, which the kernel asks without one): ENOENT, as
		 * its listing ends; ESTALE, path_of()'s, would reach the
		 * caller, which has no path to look up again. */
		r = -ENOENT;
	}
	if ((r == -ENOTCONN || (r == -EIO && atomic_load(&fs->conn_down))) &&
	    node_told_get(fs->nodes, ino, &st)) {
		int64_t k = node_ksize(fs->nodes, ino);

		/* A store may have grown the kernel's i_size past it. */
		if (k > st.st_size)
			st.st_size = k;
		fuse_reply_attr(req, &st, 0);
		return;
	}
	if (r < 0) {
		reply_err(req, r);
		return;
	}
	getattr_reply(fs, req, ino, fi, &st, ttl_for(fs, seq0, &st).attr, t0);
}

/*
 * access(2). wsfs checks no permissions itself (agentd's own checks decide
 * every open and change, as the pod's user), so F_OK, R_OK and W_OK succeed
 * for a name that exists. X_OK follows the kernel's rule for exec on FUSE
 * (fs/fuse/dir.c fuse_permission): a non-directory needs some execute bit,
 * which is what access(2) gives root on a local file system.
 */
static void ws_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct wsfs *fs = FS(req);
	struct node_info info;
	struct stat st;
	int r;

	/* A directory is always searchable here (below), and a node never
	 * changes its kind: no call, so chdir(2) into a directory the
	 * kernel knows works while agentd is away (it failed ENOTCONN). */
	if (!(mask & X_OK) ||
	    (node_info(fs->nodes, ino, &info) == 0 && S_ISDIR(info.mode))) {
		fuse_reply_err(req, 0);
		return;
	}
	wb_wait(fs);
	r = node_stat(fs, ino, NULL, &st);
	/* agentd away: the mode the kernel was told last, as getattr. */
	if ((r == -ENOTCONN || (r == -EIO && atomic_load(&fs->conn_down))) &&
	    node_told_get(fs->nodes, ino, &st))
		r = 0;
	if (r < 0)
		reply_err(req, r);
	else
		fuse_reply_err(req, S_ISDIR(st.st_mode) || (st.st_mode & 0111) ? 0 : EACCES);
}

/* ---- setattr-behind ----
 *
 * tar -p and cp -a set a file's times, owner and mode after writing it,
 * one call each (utimensat, fchown, fchmod: three SETATTRs, each a round
 * trip), and then close it. A SETATTR that cannot fail in
 * agentd is replied to at once with the attributes it gives, and kept on
 * the open file merged with the ones after it; the merged change goes to
 * agentd before any other request (wb_wait()), and sab_hold_ns() after
 * the first change kept at the latest (gb_main(); nothing is kept unless
 * the gathering thread runs): with the file's last
 * gathered write if it has one ("Write gathering", gb_send(): one round
 * trip for both), else as one SetAttr; so FLUSH
 * (close(2)) returns only once it is in the pod (close-to-open) and
 * reports its error, as fsync does (a write does not fail for it).
 * "Cannot fail" (chmod(2), chown(2), utimensat(2): EPERM unless the
 * caller owns the file): a regular file with one link that this mount
 * created through a handle still open for writing (no FLUSH or RELEASE
 * of it yet: a change after close(2) returned goes at once) and still
 * owned by the user that created it, agentd's; attributes
 * this mount knows as its own last call left them with nothing since
 * (own_attr()); a chown that changes neither owner nor group; times given
 * outright (UTIME_NOW is the pod's clock's); no set-user-ID or
 * set-group-ID bit before or after (a chown clears them, so the order of
 * a chown and a chmod would matter). The kernel is told the new mode,
 * owner and times at once and the host's clock as ctime, which the
 * SetAttr's reply replaces (the kernel's copy is dropped then).
 * GETATTR answers from those attributes (own_attr()) without sending.
 */

struct sab_pick {
	uint32_t uid;        /* the file's owner now */
	struct wsfs_file *f; /* out, referenced; NULL: none */
};

/* node_fh_each(): the first file of the node that this mount created
 * (owned by agentd's user: still @arg's uid) and holds open for writing,
 * into @arg, with a reference (the table's lock is held, so its count is
 * this callback's to raise: node_fh_ref()). */
static void sab_pick(struct node_fh *h, void *arg)
{
	struct wsfs_file *f = (struct wsfs_file *)h;
	struct sab_pick *p = arg;

	if (p->f || !f->created || f->owner != p->uid ||
	    f->access == WSBRIDGE__V1__ACCESS__RDONLY)
		return;
	h->refs++;
	p->f = f;
}

/* A time the wire's nanoseconds hold (setattr-behind keeps no more). */
static bool sab_time_fits(const struct timespec *ts)
{
	return ts->tv_sec > -9000000000LL && ts->tv_sec < 9000000000LL;
}

/*
 * How long the first change kept behind waits before the gathering thread
 * sends it (with those kept after it), ns: ten times gather_ns (50 ms by
 * default). Long enough that tar -p's chown, chmod and utimes of a file
 * and its close, a few microseconds apart but for preemption on a busy
 * host, go as one; short enough that a file the host keeps open shows its
 * mode in the pod within moments, and a change the pod makes later is
 * not undone by the host's earlier one.
 */
static int64_t sab_hold_ns(const struct wsfs *fs)
{
	return 10 * fs->cfg.gather_ns;
}

/*
 * Keep the SETATTR of @to_set from @attr for node @ino behind, if it cannot
 * fail (above): then *@st is what the kernel is to be told, *@taken0 the
 * count of changes sab_drain() had taken then (for sab_told()), and true
 * is returned; false: send it now. The caller has waited for the writes
 * sent before it (wb_wait_sent()); gathered ones of the file are sent
 * before it (gb_send()). Any FUSE request thread.
 */
static bool sab_defer(struct wsfs *fs, fuse_ino_t ino, const struct stat *attr, int to_set,
		      struct stat *st, uint64_t *taken0)
{
	const int can = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
			FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME;
	uint64_t oseq0 = own_seq(fs), gen0 = atomic_load(&fs->mgen);
	struct sab_pick pick = { 0 };
	struct wsfs_file *f;
	mode_t mode;
	bool put = false, first = false;
	struct timespec now;

	/* Only while the gathering thread runs: it sends what is kept
	 * within gather_ns (gb_main()), not only at close. */
	if (!fs->cfg.setattr_behind || !fs->gb_started || !to_set || (to_set & ~can) ||
	    ((to_set & FUSE_SET_ATTR_ATIME) && !sab_time_fits(&attr->st_atim)) ||
	    ((to_set & FUSE_SET_ATTR_MTIME) && !sab_time_fits(&attr->st_mtim)) ||
	    !own_attr(fs, ino, st) || !gb_attr(fs, ino, st, to_set & FUSE_SET_ATTR_MTIME) ||
	    !S_ISREG(st->st_mode) || st->st_nlink != 1)
		return false;
	mode = to_set & FUSE_SET_ATTR_MODE ? attr->st_mode & 07777 : st->st_mode & 07777;
	if (((st->st_mode | mode) & (S_ISUID | S_ISGID)) ||
	    ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != st->st_uid) ||
	    ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != st->st_gid))
		return false;
	pick.uid = (uint32_t)st->st_uid;
	node_fh_each(fs->nodes, ino, sab_pick, &pick);
	f = pick.f;
	if (!f)
		return false;

	pthread_mutex_lock(&fs->sab_lock);
	if (f->closing) {
		/* A change after close(2) (install(1)'s chmod by name) must not
		 * wait for a request that may never come: sent at once. */
		pthread_mutex_unlock(&fs->sab_lock);
		file_put(fs, f);
		return false;
	}
	*taken0 = fs->sab_taken;
	if (to_set & FUSE_SET_ATTR_MODE) {
		f->sab_valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE;
		f->sab_mode = mode;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		f->sab_valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__UID;
		f->sab_uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		f->sab_valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__GID;
		f->sab_gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_ATIME) {
		f->sab_atime = true;
		f->sab_atime_ns = wsb_ns_of_ts(&attr->st_atim);
	}
	if (to_set & FUSE_SET_ATTR_MTIME) {
		f->sab_mtime = true;
		f->sab_mtime_ns = wsb_ns_of_ts(&attr->st_mtim);
	}
	f->sab_id = ino;
	f->sab_gseq = atomic_load(&fs->gb_seq);
	if (f->sab_listed || f->sab_sending) {
		put = true; /* the list's reference is there already */
	} else {
		/* The time before the count (gb_main() reads both without
		 * sab_lock); sab_n rises only here, under sab_lock. */
		first = atomic_load(&fs->sab_n) == 0;
		if (first)
			atomic_store(&fs->sab_born_ns, wsfs_now_ns());
		atomic_fetch_add(&fs->sab_n, 1);
	}
	if (!f->sab_listed) {
		f->sab_listed = true;
		TAILQ_INSERT_TAIL(&fs->sab_list, f, sab_entry);
	}
	pthread_mutex_unlock(&fs->sab_lock);
	if (put)
		file_put(fs, f);
	if (first)
		gb_kick(fs, atomic_load(&fs->sab_born_ns) + sab_hold_ns(fs));
	if (to_set & FUSE_SET_ATTR_MODE) {
		bool on = mode_exec(S_IFREG | mode);

		node_fh_each(fs->nodes, ino, exec_set_fn, &on);
	}

	st->st_mode = (st->st_mode & S_IFMT) | mode;
	if (to_set & FUSE_SET_ATTR_ATIME)
		st->st_atim = attr->st_atim;
	if (to_set & FUSE_SET_ATTR_MTIME)
		st->st_mtim = attr->st_mtim;
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_ctim = now;
	/* What GETATTR answers until the SetAttr's reply replaces it. */
	own_keep(fs, ino, st, gen0, mutated(fs), oseq0);
	if (to_set & FUSE_SET_ATTR_MTIME)
		gb_fold(fs, ino);
	return true;
}

/* A SETATTR kept behind, taken to send (sab_take()). */
struct sab_out {
	Wsbridge__V1__SetAttrRequest q;
	Wsbridge__V1__TimeSpec at, mt; /* q.atime and q.mtime point here */
	struct wsfs_file *f;           /* the file it was kept on (its reference) */
	fuse_ino_t id;                 /* the node */
	uint64_t gen0, oseq0;          /* mgen and own_seq() when taken */
};

/*
 * Take @f's change kept behind (listed, not being sent) into *@o to send
 * it: @f is sab_sending until sab_untake(). gen0 and oseq0 (own_keep())
 * are read now, under sab_lock, so that a change kept behind after it
 * makes own_keep() forget the reply, which lacks that change. Under
 * sab_lock.
 */
static void sab_take(struct wsfs *fs, struct wsfs_file *f, struct sab_out *o)
{
	static const Wsbridge__V1__SetAttrRequest q0 = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	static const Wsbridge__V1__TimeSpec t0 = WSBRIDGE__V1__TIME_SPEC__INIT;

	TAILQ_REMOVE(&fs->sab_list, f, sab_entry);
	f->sab_listed = false;
	f->sab_sending = true;
	o->q = q0;
	o->at = o->mt = t0;
	o->f = f;
	o->q.valid = f->sab_valid;
	o->q.mode = f->sab_mode;
	o->q.uid = f->sab_uid;
	o->q.gid = f->sab_gid;
	if (f->sab_atime) {
		o->at.how_case = WSBRIDGE__V1__TIME_SPEC__HOW_NS;
		o->at.ns = f->sab_atime_ns;
		o->q.atime = &o->at;
	}
	if (f->sab_mtime) {
		o->mt.how_case = WSBRIDGE__V1__TIME_SPEC__HOW_NS;
		o->mt.ns = f->sab_mtime_ns;
		o->q.mtime = &o->mt;
	}
	o->id = f->sab_id;
	f->sab_valid = 0;
	f->sab_atime = f->sab_mtime = false;
	fs->sab_taken++;
	o->gen0 = atomic_load(&fs->mgen);
	o->oseq0 = own_seq(fs);
}

/* @o was sent (or failed): its file is no longer being sent, and leaves
 * the count unless kept behind again meanwhile. Takes sab_lock. */
static void sab_untake(struct wsfs *fs, struct sab_out *o)
{
	struct wsfs_file *f = o->f;
	bool put;

	pthread_mutex_lock(&fs->sab_lock);
	f->sab_sending = false;
	put = !f->sab_listed; /* else kept behind again meanwhile */
	if (put)
		atomic_fetch_sub(&fs->sab_n, 1);
	pthread_cond_broadcast(&fs->sab_cond);
	pthread_mutex_unlock(&fs->sab_lock);
	if (put)
		file_put(fs, f);
}

/* How change @o went (@r: 0 or -errno): a failure goes to every descriptor
 * of the file; the kernel drops the attributes sab_defer() told it. */
static void sab_result(struct wsfs *fs, const struct sab_out *o, int r)
{
	if (r < 0) {
		int e = errno_out(r, false);

		sab_error_set(&o->f->link, &e);
		node_fh_each(fs->nodes, o->id, sab_error_set, &e);
		wsb_warn("a setattr (mode, owner or times), replied to before agentd answered, "
			 "failed: %s; each descriptor's next fsync or close reports it",
			 strerror(e));
	}
	/* The kernel keeps what sab_defer() told it (the host's ctime; all of
	 * it after a failure) for the attribute timeout: it asks again. */
	if (fs->se)
		(void)fuse_lowlevel_notify_inval_inode(fs->se, o->id, -1, 0);
}

/* Send change @o as a SetAttr of its own. */
static void sab_send(struct wsfs *fs, struct sab_out *o)
{
	Wsbridge__V1__AttrReply *rep = NULL;
	struct hslot s = { o->f, &o->q.handle };
	uint64_t gen;
	char *path = NULL;
	size_t len = 0;
	struct stat st;
	int r;

	if (path_of(fs, o->id, &path, &len) == 0)
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
	r = file_rpc(fs, &s, 1, M("SetAttr"), &o->q.base, &wsbridge__v1__attr_reply__descriptor,
		     &rep);
	gen = mutated(fs);
	if (path)
		self_end_attr(fs, path, len, r, rep ? rep->attr : NULL);
	if (r == 0)
		r = attr_to_stat(rep->attr, &st);
	if (r == 0 && !S_ISREG(st.st_mode))
		r = -EIO; /* a handle's file keeps its kind: a broken agentd */
	own_keep(fs, o->id, r == 0 ? &st : NULL, o->gen0, gen, o->oseq0);
	sab_result(fs, o, r);
	free(path);
	free_reply(rep);
}

/* Take the change kept behind for node @id after run number @seq began,
 * if one waits that nobody is sending, into *@o; NULL if none. Takes
 * sab_lock. */
static struct sab_out *sab_take_node(struct wsfs *fs, fuse_ino_t id, uint64_t seq,
				     struct sab_out *o)
{
	struct wsfs_file *f;

	pthread_mutex_lock(&fs->sab_lock);
	TAILQ_FOREACH(f, &fs->sab_list, sab_entry)
		if (!f->sab_sending && f->sab_id == id && f->sab_gseq > seq)
			break;
	if (f)
		sab_take(fs, f, o);
	pthread_mutex_unlock(&fs->sab_lock);
	return f ? o : NULL;
}

/*
 * Send every SETATTR kept behind (sab_defer()) and wait for those other
 * threads are sending: on return, agentd has each one that was replied
 * to before this call. Any thread; returns at once with none.
 */
static void sab_drain(struct wsfs *fs)
{
	uint64_t flushed;

	if (atomic_load(&fs->sab_n) == 0)
		return;
	/* Gathered writes made before a change go first (one may carry it:
	 * gb_send()): a write after utimensat(2) would set mtime anew. */
	flushed = gb_flush(fs);
	pthread_mutex_lock(&fs->sab_lock);
	while (atomic_load(&fs->sab_n) > 0) {
		struct sab_out o;
		struct wsfs_file *f;

		/* The first one waiting that nobody is sending. */
		TAILQ_FOREACH(f, &fs->sab_list, sab_entry)
			if (!f->sab_sending)
				break;
		if (!f) {
			pthread_cond_wait(&fs->sab_cond, &fs->sab_lock);
			continue;
		}
		if (f->sab_gseq > flushed) {
			/* Kept since the flush above, after runs begun since. */
			pthread_mutex_unlock(&fs->sab_lock);
			flushed = gb_flush(fs);
			pthread_mutex_lock(&fs->sab_lock);
			continue;
		}
		sab_take(fs, f, &o);
		pthread_mutex_unlock(&fs->sab_lock);
		sab_send(fs, &o);
		sab_untake(fs, &o);
		pthread_mutex_lock(&fs->sab_lock);
	}
	pthread_mutex_unlock(&fs->sab_lock);
}

/*
 * After the reply to a SETATTR that sab_defer() kept behind when
 * sab_drain() had taken @taken0 changes: if it has taken more since, the
 * change may have reached agentd, and the kernel's attributes been dropped
 * (sab_send()), before the kernel got that reply, which it then keeps:
 * drop them again. Any FUSE request thread.
 */
static void sab_told(struct wsfs *fs, fuse_ino_t ino, uint64_t taken0)
{
	bool moved;

	pthread_mutex_lock(&fs->sab_lock);
	moved = fs->sab_taken != taken0;
	pthread_mutex_unlock(&fs->sab_lock);
	if (moved && fs->se)
		(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
}

/*
 * A FLUSH or RELEASE of @f came: nothing more is kept behind on it (a
 * change made after close(2) returned would wait for a later request, or
 * be lost with @f). Then the caller sends what is (wb_wait()).
 */
static void sab_closing(struct wsfs *fs, struct wsfs_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&fs->sab_lock);
	f->closing = true;
	pthread_mutex_unlock(&fs->sab_lock);
}

/* ---- setattr ---- */

/*
 * A SetAttr time: UTIME_NOW, or @ts in nanoseconds, and exactly where they
 * cannot hold it (before 1677, after 2262: proto/wsbridge.proto "Times"; the
 * file system in the pod then keeps what it can, timestamp_truncate() in
 * fs/inode.c).
 */
static void set_time(Wsbridge__V1__TimeSpec *t, bool now, const struct timespec *ts)
{
	if (now) {
		t->how_case = WSBRIDGE__V1__TIME_SPEC__HOW_NOW;
		t->now = true;
	} else {
		t->how_case = WSBRIDGE__V1__TIME_SPEC__HOW_NS;
		wsb_time_to_wire(ts, &t->ns, &t->s, &t->nsec);
	}
}

/* Whether wire path @path (@len bytes) holds node @info's file now, as
 * agentd says (one Stat; false if that fails). Any thread. */
static bool path_holds_node(struct wsfs *fs, const char *path, size_t len,
			    const struct node_info *info)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct stat st;
	bool same;

	q.path = bin(path, len);
	same = rpc(fs, M("Stat"), &q.base, &wsbridge__v1__stat_reply__descriptor, &rep) == 0 &&
	       attr_to_stat(rep->attr, &st) == 0 && same_file(info, &st);
	free_reply(rep);
	return same;
}

/*
 * After this mount's own change of a symlink through node @except (@st: its
 * attributes after the call; link, unlink, chown -h, touch -h): the link's
 * other names, when it has several (hard links), have nodes of their own (a
 * symlink's node is its name's, node_lookup()), whose nlink, owner and
 * times the kernel keeps for up to watch_timeout, and the watch reports no
 * own change (wsfs_self_begin()). Drops what the mount and the kernel keep
 * of them. Nothing for other kinds of file, whose names share one node.
 * FUSE worker thread (the invalidation takes no lock the kernel holds for
 * the request: fs/fuse/inode.c fuse_reverse_inval_inode() with a negative
 * offset).
 */
static void symlink_names_stale(struct wsfs *fs, const struct stat *st, uint64_t except)
{
	uint64_t ids[64];
	size_t n;

	if (!S_ISLNK(st->st_mode))
		return;
	n = node_ids_by_ino(fs->nodes, st->st_ino, st_ident(st), ids, 64);
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == except)
			continue;
		node_attr_drop(fs->nodes, ids[i]);
		if (fs->se)
			(void)fuse_lowlevel_notify_inval_inode(fs->se, ids[i], -1, 0);
	}
}

/*
 * The open file of node @p ino (@p info its node_info()) a call the kernel
 * names no handle for goes through (fchmod, fsetxattr): one the node holds
 * open, unless it is an open that raced the pod's replacing of the name
 * (it holds the new file: ws_open(), replaced). *@p ret: a reference
 * (file_put() it), or NULL: go by the path. Returns 0, or -ESTALE for an
 * unlinked node with no open file. Any worker thread.
 */
static int node_own_file(struct wsfs *fs, fuse_ino_t ino, const struct node_info *info,
			 struct wsfs_file **ret)
{
	struct wsfs_file *f = (struct wsfs_file *)node_fh_get(fs->nodes, ino);

	if (f && info->attached &&
	    !(f->ino == info->ino && node_same_ident(f->ident, info->ident))) {
		file_put(fs, f);
		f = NULL;
	}
	*ret = f;
	return !f && !info->attached ? -ESTALE : 0;
}

static void ws_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__SetAttrRequest q = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	Wsbridge__V1__TimeSpec at = WSBRIDGE__V1__TIME_SPEC__INIT;
	Wsbridge__V1__TimeSpec mt = WSBRIDGE__V1__TIME_SPEC__INIT;
	Wsbridge__V1__AttrReply *rep = NULL;
	struct wsfs_file *f = NULL;
	struct node_info info;
	uint64_t seq0 = seq_now(fs), oseq0 = own_seq(fs), gen0 = atomic_load(&fs->mgen), gen;
	uint64_t taken0;
	struct stat st;
	char *path = NULL;
	size_t len;
	bool kill;
	int r;

	/*
	 * A chown(2) comes with a mode only when the kernel computed one to
	 * clear the set-user-ID and set-group-ID bits itself (fs/fuse/dir.c
	 * fuse_setattr, without handle_killpriv; chown(2) never sets a mode
	 * otherwise), and Linux 6.18 computes it without the sticky bit
	 * (libfuse's passthrough_ll loses it too). agentd's chown in the pod
	 * clears those bits by the pod kernel's own rules (chown(2): for a
	 * non-directory, set-user-ID always, set-group-ID with group execute)
	 * and keeps the rest: that mode is not sent.
	 */
	if ((to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) && (to_set & FUSE_SET_ATTR_MODE))
		to_set &= ~FUSE_SET_ATTR_MODE;
	/*
	 * FATTR_KILL_SUIDGID (FUSE_HANDLE_KILLPRIV_V2: fs.c "the kernel's
	 * requests as read"; libfuse 3.14 passes the bit on, under the name
	 * FUSE_SET_ATTR_KILL_SUID): with a size, agentd clears the set-ID
	 * bits after truncating; a chown's needs nothing, as above. A SETATTR
	 * that sets nothing is the kernel's own request to clear them (fs/
	 * fuse/dir.c fuse_setattr() drops ATTR_KILL_SUID and ATTR_KILL_SGID
	 * and leaves them to the server): __remove_privs() for a writer
	 * without CAP_FSETID before fallocate(2), copy_file_range(2) or a
	 * write, and chown(2) to -1, -1 (utimensat(2) with both times
	 * UTIME_OMIT returns before the file system).
	 */
	kill = (to_set & FATTR_KILL_SUIDGID) && (to_set & FUSE_SET_ATTR_SIZE);
	to_set &= ~FATTR_KILL_SUIDGID;
	if (to_set == 0)
		kill = true;
	/* Gathered writes of the file stay: the SETATTR goes after them
	 * (sab_defer(), gb_send()); any other request sends them first. */
	wb_wait_sent(fs);
	if (sab_defer(fs, ino, attr, to_set, &st, &taken0)) {
		reply_attr(fs, req, ino, &st, fs->cfg.attr_timeout);
		sab_told(fs, ino, taken0);
		return;
	}
	if (atomic_load(&fs->gb_n) > 0) {
		/* A chmod after a write: the write's reply gives the mtime,
		 * then the change may wait for close. */
		wb_wait_writes(fs);
		if (sab_defer(fs, ino, attr, to_set, &st, &taken0)) {
			reply_attr(fs, req, ino, &st, fs->cfg.attr_timeout);
			sab_told(fs, ino, taken0);
			return;
		}
	}
	sab_drain(fs);
	/* Those were own changes before this one, not beside it (own_keep()). */
	oseq0 = own_seq(fs);
	gen0 = atomic_load(&fs->mgen);
	if (to_set & FUSE_SET_ATTR_MODE) {
		q.valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE;
		q.mode = attr->st_mode & 07777;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		q.valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__UID;
		q.uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		q.valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__GID;
		q.gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (attr->st_size < 0) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		q.valid |= WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__SIZE;
		q.size = (uint64_t)attr->st_size;
		node_note(fs->nodes, ino, 0, true); /* getattr_reply() */
	}
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
		set_time(&at, to_set & FUSE_SET_ATTR_ATIME_NOW, &attr->st_atim);
		q.atime = &at;
	}
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
		set_time(&mt, to_set & FUSE_SET_ATTR_MTIME_NOW, &attr->st_mtim);
		q.mtime = &mt;
	}
	q.kill_suidgid = kill;

	r = node_info(fs->nodes, ino, &info);
	if (r < 0)
		goto out;
	if (fi && fi->fh) {
		f = file_of(fi);
		node_fh_ref(fs->nodes, &f->link);
	} else if (!info.attached || !(q.valid & WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__SIZE)) {
		/*
		 * fchmod/fchown/futimens, and chmod/chown/utimensat by path:
		 * the kernel names no handle (only ftruncate does) and does
		 * not say which. An open file of the node is the node's file
		 * for sure, where the path may hold another one by now: the
		 * pod renamed or replaced it before its event came, or in the
		 * same inotify read as the mount's create (agentd then reports
		 * only the new name). So the call goes to the file the kernel
		 * resolved the name to, as stat(2) shows it meanwhile, never
		 * to one the process did not open. Unlinked, only that way. A
		 * size goes by the path while the node is named: a handle may
		 * be read-only (ftruncate(2) EINVAL where truncate(2) works).
		 */
		r = node_own_file(fs, ino, &info, &f);
		if (r < 0)
			goto out;
	}
	if (f) {
		struct hslot s = { f, &q.handle,
				   (q.valid & WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__SIZE) != 0 };

		if (path_of(fs, ino, &path, &len) == 0)
			wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
		/* A truncate frees blocks: a long call. */
		if (s.write)
			r = file_rpc_long(fs, &s, 1, M("SetAttr"), &q.base,
					  &wsbridge__v1__attr_reply__descriptor, &rep);
		else
			r = file_rpc(fs, &s, 1, M("SetAttr"), &q.base,
				     &wsbridge__v1__attr_reply__descriptor, &rep);
		if ((r == -EIO || r == -EBADF || r == -EACCES) && !(fi && fi->fh) && info.attached &&
		    path && path_holds_node(fs, path, len, &info)) {
			/* The handle failed (agentd lost it and could not
			 * open the file again, or it is broken): by the name,
			 * as for a node with no open file, but only while the
			 * name holds the node's file (a broken handle is one
			 * whose name held another): never a file the process
			 * did not open. */
			self_end_attr(fs, path, len, r, NULL);
			free(path);
			path = NULL;
			free_reply(rep);
			rep = NULL;
			q.handle = 0;
			file_put(fs, f);
			f = NULL;
		}
	}
	if (!f) {
		r = path_of(fs, ino, &path, &len);
		if (r < 0)
			goto out;
		q.path = bin(path, len);
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
		if (q.valid & WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__SIZE)
			r = rpc_long(fs, M("SetAttr"), &q.base,
				     &wsbridge__v1__attr_reply__descriptor, &rep);
		else
			r = rpc(fs, M("SetAttr"), &q.base, &wsbridge__v1__attr_reply__descriptor,
				&rep);
	}
	if (r == 0 && q.kill_suidgid && rep->attr && wsb_suidgid_kill_bits(rep->attr->mode)) {
		/* An agentd from before kill_suidgid left them: a call of
		 * its own, on the same handle or path. */
		Wsbridge__V1__SetAttrRequest k = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
		Wsbridge__V1__AttrReply *krep = NULL;

		k.path = q.path;
		k.handle = q.handle;
		k.valid = WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE;
		k.mode = rep->attr->mode & 07777 & ~wsb_suidgid_kill_bits(rep->attr->mode);
		if (rpc(fs, M("SetAttr"), &k.base, &wsbridge__v1__attr_reply__descriptor, &krep) == 0 &&
		    krep->attr) {
			free_reply(rep);
			rep = krep;
		} else {
			free_reply(krep);
		}
	}
	gen = mutated(fs);
	if (to_set & FUSE_SET_ATTR_SIZE)
		store_barrier(fs); /* "Chunk reads": before the kernel truncates */
	if (r == 0 && (to_set & FUSE_SET_ATTR_SIZE))
		node_ksize_lower(fs->nodes, ino, attr->st_size); /* the kernel's i_size */
	if (path)
		self_end_attr(fs, path, len, r, rep ? rep->attr : NULL);
	if (r == 0)
		r = attr_to_stat(rep->attr, &st);
	if (r == 0 && info.mode && info.mode != (st.st_mode & S_IFMT)) {
		/* By path: the name holds another kind of file now (the pod
		 * replaced it; the change was made to that one), and ESTALE
		 * makes the VFS look the name up and try again, as node_stat()
		 * does. Through a handle: a file cannot change its kind. */
		r = f ? attr_fits(fs, ino, &st) : -ESTALE;
	}
	/* fchown(2) after utimensat(2) (tar, cp -a): the kernel asks GETATTR
	 * first (fs/fuse/dir.c fuse_setattr, to kill suid bits itself). */
	own_keep(fs, ino, r == 0 ? &st : NULL, gen0, gen, oseq0);
	if (r == 0 && (q.valid & WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__MODE))
		exec_changed(fs, ino, st.st_mode);
	if (r == 0 && st.st_nlink > 1)
		symlink_names_stale(fs, &st, ino);
	if (r == 0 && S_ISREG(st.st_mode)) {
		/* The kernel truncated its own pages; what it keeps matches. */
		if (q.valid & WSBRIDGE__V1__SET_ATTR_REQUEST__VALID__SIZE) {
			struct node_seen s = seen_of(&st);

			node_seen_set(fs->nodes, ino, &s);
		}
	}
out:
	if (f)
		file_put(fs, f);
	if (r < 0)
		reply_err(req, r);
	else
		reply_attr(fs, req, ino, &st, ttl_for(fs, seq0, &st).attr);
	free(path);
	free_reply(rep);
}

/* ---- symlinks, nodes, directories ---- */

static void ws_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__PathRequest q = WSBRIDGE__V1__PATH_REQUEST__INIT;
	Wsbridge__V1__ReadlinkReply *rep = NULL;
	char *path = NULL, *target = NULL;
	size_t len;
	int r;

	wb_wait(fs);
	r = path_of(fs, ino, &path, &len);
	if (r < 0)
		goto out;
	q.path = bin(path, len);
	r = rpc(fs, M("Readlink"), &q.base, &wsbridge__v1__readlink_reply__descriptor, &rep);
	if (r < 0)
		goto out;
	if (rep->target.len == 0 || rep->target.len >= PATH_MAX ||
	    memchr(rep->target.data, '\0', rep->target.len)) {
		r = -EIO;
		goto out;
	}
	target = malloc(rep->target.len + 1);
	if (!target) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(target, rep->target.data, rep->target.len);
	target[rep->target.len] = '\0';
	if (fs->cfg.transform_symlinks) {
		/* What the host's kernel follows must stay in the mount: a
		 * link the pod made must not lead to a host file. */
		const char *slash = memrchr(path, '/', len);
		char *inside = NULL;

		r = node_link_inside(path, slash ? (size_t)(slash - path) : 0, target, &inside);
		if (inside) {
			free(target);
			target = inside;
		}
	}
out:
	if (r < 0)
		reply_err(req, r);
	else
		fuse_reply_readlink(req, target);
	free(target);
	free(path);
	free_reply(rep);
}

/*
 * Make @name in @parent with @method (Mknod, Mkdir or Symlink), whose request
 * @q (its other fields set by the caller) has its path at @qpath, and reply
 * with the new entry (@dir: an empty directory, whose names are all known).
 * @self: what the pod's watch will report of it (wsfs_self_begin()); @type:
 * the file type it makes (S_IFMT bits). FUSE worker thread.
 */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, const char *method,
		      const ProtobufCMessage *q, ProtobufCBinaryData *qpath, unsigned self,
		      mode_t type, bool dir)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__AttrReply *rep = NULL;
	uint64_t seq0 = seq_now(fs);
	char *path = NULL;
	size_t len;
	int r;

	wb_wait(fs);
	r = child_path(fs, parent, name, &path, &len);
	if (r == 0) {
		*qpath = bin(path, len);
		wsfs_self_begin(fs, path, len, self);
		r = rpc(fs, method, q, &wsbridge__v1__attr_reply__descriptor, &rep);
		self_end_attr(fs, path, len, r, rep ? rep->attr : NULL);
		known_update(fs, parent, name, r, true);
	}
	if (r < 0)
		reply_err(req, r);
	else
		reply_created(req, fs, parent, name, rep, seq0, type, dir);
	free(path);
	free_reply(rep);
}

static void ws_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	Wsbridge__V1__MknodRequest q = WSBRIDGE__V1__MKNOD_REQUEST__INIT;

	(void)rdev; /* device nodes are refused by agentd (EPERM) */
	q.mode = mode;
	/* A type of 0 makes a regular file (mknod(2)). */
	make_node(req, parent, name, M("Mknod"), &q.base, &q.path,
		  WSFS_SELF_CREATED | WSFS_SELF_CHANGED, mode & S_IFMT ? mode & S_IFMT : S_IFREG,
		  false);
}

static void ws_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	Wsbridge__V1__MkdirRequest q = WSBRIDGE__V1__MKDIR_REQUEST__INIT;

	q.mode = mode & 07777;
	make_node(req, parent, name, M("Mkdir"), &q.base, &q.path, WSFS_SELF_CREATED, S_IFDIR,
		  true);
}

static void ws_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	Wsbridge__V1__SymlinkRequest q = WSBRIDGE__V1__SYMLINK_REQUEST__INIT;

	q.target = bin(link, strlen(link));
	make_node(req, parent, name, M("Symlink"), &q.base, &q.path,
		  WSFS_SELF_CREATED | WSFS_SELF_CHANGED, S_IFLNK, false);
}

/* ---- unlink-behind ----
 *
 * rm -rf waits for one Unlink round trip per entry (sshfs for one SFTP
 * remove). An UNLINK that cannot fail is replied to before agentd has
 * done it; its thread then sends it, as a write written behind is sent: it
 * takes a write-behind slot (wb_begin_ex()), so every later request waits
 * for it (wb_wait()) but another UNLINK sent behind, which waits only for
 * the writes and SETATTRs sent behind before it. rm -rf's rmdir of the
 * directory, a listing, a lookup or a create of the name, a rename of a
 * directory above it come after it in agentd, and `rm -rf DIR` returns
 * once all of DIR is gone in the pod.
 *
 * unlink(2) fails (its man page) for the name (ENOENT, ENOTDIR, EISDIR:
 * the kernel checked those against its dentry before it sent the UNLINK,
 * fs/namei.c may_delete()), for permission (EACCES: no write or search
 * permission on the directory, no search permission above it; EPERM: a
 * sticky directory and another's file, an append-only or immutable
 * directory; EROFS), for the file (EPERM: itself immutable or
 * append-only; EBUSY: mounted over) and for the disk (EIO). Permission is
 * agentd's (its credentials, its mount of the workspace): an Unlink or
 * Rmdir through this mount that succeeded in the same directory (rmdir(2)
 * needs the same of it) proves it for the next ones (rm_ok), and for
 * those in a directory in it that has its mode, owner and group (the
 * same permission for agentd, an ACL aside: rm -rf of a tree of small
 * directories), while the directory keeps the mode, owner and group the
 * kernel was told (fresh: node_told_fresh()), the watch reported no
 * change of it (node_noted()) nor of any directory's attributes nor a
 * rename in the pod (rm_gen: the directories above it) since before that
 * call, and the connection is the same (conn_gen: agentd may have
 * restarted with other credentials);
 * a sticky directory is never proven (it depends on each file's owner),
 * nor is one while the watch is not live. The file must not be open
 * through this mount (an fstat(2) of it sees nlink drop at once). What is
 * left: a file or directory flagged immutable or append-only in the pod
 * (chattr(1), which needs CAP_LINUX_IMMUTABLE there and sends no inotify
 * event), a file mounted over in the pod, an I/O error, a change the pod
 * made in the round trip or before the watch told of it, agentd lost in
 * it. Then unlink(2) returned 0 but the name stays: wsfs logs it, forgets
 * every proof, never proves that directory again (rm_bad: a second rm of
 * the file reports the error) and forgets what it knew of the directory's
 * names, so the next lookup finds the name again (the kernel asks:
 * fs/fuse/dir.c fuse_unlink() left its dentry expired), and rm -rf's rmdir
 * fails ENOTEMPTY. ENOENT is success when the path still names the
 * directory the kernel meant (the pod removed the name first). Until the
 * Unlink lands (one round trip; more on a loaded host) the pod still has
 * the file under its name: what the pod writes into it in that time (an
 * O_TRUNC open of the name) goes with it, as the later change.
 */

/* The state a proof of directory @dir is made against (struct wsfs_rm_ok),
 * taken before the call that proves it. Any thread. */
static struct wsfs_rm_ok rm_ok_state(struct wsfs *fs, uint64_t dir)
{
	return (struct wsfs_rm_ok){
		.dir = dir,
		.conn_gen = atomic_load(&fs->conn_gen),
		.rm_gen = atomic_load(&fs->rm_gen),
		.noted = node_noted(fs->nodes, dir, NULL),
	};
}

/* Whether an Unlink in directory @dir, whose attributes the kernel was
 * told are @st, is proven to succeed (above). Any thread. */
static bool rm_ok_has(struct wsfs *fs, uint64_t dir, const struct stat *st)
{
	struct wsfs_rm_ok now = rm_ok_state(fs, dir);
	bool ok = false;

	pthread_mutex_lock(&fs->wb_lock);
	for (unsigned i = 0; i < WSFS_RM_OK_MAX && !ok; i++) {
		const struct wsfs_rm_ok *o = &fs->rm_ok[i];

		ok = o->dir == dir && o->conn_gen == now.conn_gen && o->rm_gen == now.rm_gen &&
		     o->noted == now.noted && o->mode == st->st_mode && o->uid == st->st_uid &&
		     o->gid == st->st_gid;
	}
	pthread_mutex_unlock(&fs->wb_lock);
	return ok;
}

/* Whether an Unlink sent behind failed in directory @dir (rm_bad). */
static bool rm_bad_has(struct wsfs *fs, uint64_t dir)
{
	bool bad = false;

	pthread_mutex_lock(&fs->wb_lock);
	for (unsigned i = 0; i < WSFS_RM_OK_MAX && !bad; i++)
		bad = fs->rm_bad[i] == dir;
	pthread_mutex_unlock(&fs->wb_lock);
	return bad;
}

/* An Unlink or Rmdir in a directory succeeded, begun in state @o
 * (rm_ok_state()): remember the directory proven, unless the kernel has
 * no fresh attributes of it or it is sticky. Any thread. */
static void rm_ok_add(struct wsfs *fs, struct wsfs_rm_ok o)
{
	struct stat st;
	unsigned slot;

	if (!fs->cfg.unlink_behind || !node_told_fresh(fs->nodes, o.dir, &st) ||
	    !S_ISDIR(st.st_mode) || (st.st_mode & S_ISVTX))
		return;
	o.mode = st.st_mode;
	o.uid = st.st_uid;
	o.gid = st.st_gid;
	if (rm_bad_has(fs, o.dir))
		return;
	pthread_mutex_lock(&fs->wb_lock);
	for (slot = 0; slot < WSFS_RM_OK_MAX && fs->rm_ok[slot].dir != o.dir; slot++)
		;
	if (slot == WSFS_RM_OK_MAX)
		slot = fs->rm_ok_next++ % WSFS_RM_OK_MAX;
	fs->rm_ok[slot] = o;
	pthread_mutex_unlock(&fs->wb_lock);
}

/* An Unlink sent behind failed in directory @dir: forget every proven
 * directory, and never prove @dir again. */
static void rm_ok_failed(struct wsfs *fs, uint64_t dir)
{
	pthread_mutex_lock(&fs->wb_lock);
	memset(fs->rm_ok, 0, sizeof(fs->rm_ok));
	fs->rm_bad[fs->rm_bad_next++ % WSFS_RM_OK_MAX] = dir;
	pthread_mutex_unlock(&fs->wb_lock);
}

/* Whether the UNLINK of @name in @parent cannot fail (above). Any FUSE
 * request thread. */
static bool unlink_behind_ok(struct wsfs *fs, fuse_ino_t parent, const char *name)
{
	struct node_info ni;
	struct stat st;
	uint64_t id;

	if (!fs->cfg.unlink_behind || atomic_load(&fs->conn_down) ||
	    !atomic_load(&fs->watch_live))
		return false;
	id = node_child(fs->nodes, parent, name, strlen(name));
	if (!id || node_info(fs->nodes, id, &ni) < 0 || !(ni.mode & S_IFMT) ||
	    S_ISDIR(ni.mode) || ni.open_files)
		return false;
	if (!node_told_get(fs->nodes, parent, &st) || !S_ISDIR(st.st_mode) ||
	    (st.st_mode & S_ISVTX))
		return false;
	if (rm_ok_has(fs, parent, &st))
		return true;
	/* A directory with the mode, owner and group of the proven one it
	 * is in grants agentd the same (an ACL aside): rm -rf of a tree of
	 * small directories (node_modules) sends all but the first unlink
	 * of the tree behind. */
	return node_info(fs->nodes, parent, &ni) == 0 && ni.parent &&
	       node_told_fresh(fs->nodes, parent, &st) && !rm_bad_has(fs, parent) &&
	       rm_ok_has(fs, ni.parent, &st);
}

/* What an Unlink's reply @rep (may be NULL) of @name in @parent, begun at
 * @at0 with seq_now() @seq0 and mgen @mgen0, tells the mount, once the
 * name is unbound (node @id, 0 if none): another name may keep the file
 * (git's objects: link, then unlink of the temporary name); the kernel
 * dropped its attributes (nlink) and asks next (fs/fuse/dir.c
 * fuse_unlink). */
static void unlinked(struct wsfs *fs, uint64_t id, uint64_t seq0, uint64_t mgen0, int64_t at0,
		     const Wsbridge__V1__AttrReply *rep)
{
	struct stat st;

	if (!id || !rep || !rep->attr)
		return;
	attr_keep_new(fs, id, seq0, mgen0, at0, rep->attr);
	if (attr_to_stat(rep->attr, &st) == 0 && st.st_nlink > 0)
		symlink_names_stale(fs, &st, 0);
}

/* Most calls remove_rpc() makes. */
#define REMOVE_TRIES 4

/*
 * The Rmdir (@dir) or Unlink of @name in @parent, by the path *@path
 * (*@len bytes; owned by the caller, may be replaced), which the node
 * table gave at node_names_gen(, 0) @ngen: when agentd says ENOENT after a
 * rename of a directory through the mount began or ended (one on its way
 * may have moved the path: node_names_still()), again by the path the
 * table gives once no such rename is in flight (NAMES_WAIT_MS at most: a
 * rename may wait for an unlink sent behind), if it changed;
 * REMOVE_TRIES calls at most (as ws_open() does). Returns 0 or -errno, and
 * in *@ret_rep the reply (NULL on error). Any FUSE request thread.
 */
static int remove_rpc(struct wsfs *fs, fuse_ino_t parent, const char *name, bool dir,
		      uint64_t ngen, char **path, size_t *len, Wsbridge__V1__AttrReply **ret_rep)
{
	Wsbridge__V1__PathRequest q = WSBRIDGE__V1__PATH_REQUEST__INIT;
	char *again;
	size_t again_len;
	int r;

	for (unsigned tries = 1;; tries++) {
		q.path = bin(*path, *len);
		wsfs_self_begin(fs, *path, *len, WSFS_SELF_DELETED);
		if (dir)
			r = rpc(fs, M("Rmdir"), &q.base, &wsbridge__v1__attr_reply__descriptor,
				ret_rep);
		else
			r = rpc_long(fs, M("Unlink"), &q.base,
				     &wsbridge__v1__attr_reply__descriptor, ret_rep); /* a large file */
		wsfs_self_end(fs, *path, *len, r == 0, NULL);
		if (r != -ENOENT || tries == REMOVE_TRIES || node_names_still(fs->nodes, 0, ngen))
			return r;
		node_names_wait(fs->nodes, 0, NAMES_WAIT_MS);
		ngen = node_names_gen(fs->nodes, 0);
		if (child_path(fs, parent, name, &again, &again_len) < 0)
			return r;
		if (again_len == *len && memcmp(again, *path, *len) == 0) {
			free(again);
			return r;
		}
		free_reply(*ret_rep);
		*ret_rep = NULL;
		free(*path);
		*path = again;
		*len = again_len;
	}
}

/*
 * UNLINK of @name in @parent sent behind (above): once a write-behind slot
 * is taken, replied to, then sent. Returns false, having replied nothing,
 * when it may fail after all (then it goes as any other). Any FUSE request
 * thread, which it holds until agentd answered.
 */
static bool unlink_behind(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__AttrReply *rep = NULL;
	uint64_t seq0 = seq_now(fs), mgen0 = atomic_load(&fs->mgen), id, wseq, ngen;
	int64_t at0 = wsfs_now_ns();
	char *path = NULL;
	size_t len;
	int r;

	/* From now on a request that comes waits for it, a rename of a
	 * directory above too, so the path stays true, but for a rename
	 * already on its way: agentd's ENOENT is then checked. */
	wseq = wb_begin_ex(fs, 0, 0, 0, true);
	ngen = node_names_gen(fs->nodes, 0);
	if (!unlink_behind_ok(fs, parent, name) || child_path(fs, parent, name, &path, &len) < 0) {
		wb_end(fs, wseq);
		return false;
	}
	known_update(fs, parent, name, 0, false);
	id = node_unlink(fs->nodes, parent, name, strlen(name));
	fuse_reply_err(req, 0);
	wsb_debug("Unlink '%.*s': answered, sent behind", (int)len, path);
	r = remove_rpc(fs, parent, name, false, ngen, &path, &len, &rep);
	if (r == -ENOENT)
		r = 0; /* the pod removed it first (remove_rpc() followed renames) */
	if (r == 0) {
		unlinked(fs, id, seq0, mgen0, at0, rep);
	} else {
		/* Lost on the way (EIO: the deadline), agentd may have done it. */
		bool lost = r == -ENOTCONN || r == -EIO || r == -ETIMEDOUT;

		wsb_warn("unlink of '%.*s' failed after the mount had answered it: %s; %s",
			 (int)len, path, strerror(-r),
			 lost ? "the name may still be there" : "the name is still there");
		rm_ok_failed(fs, parent);
		known_update(fs, parent, name, r, false);
	}
	wb_end(fs, wseq);
	free_reply(rep);
	free(path);
	return true;
}

/* Unlink (@dir false) or Rmdir (@dir true) of @name in @parent. */
static void do_remove(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__AttrReply *rep = NULL;
	uint64_t seq0 = seq_now(fs), mgen0 = atomic_load(&fs->mgen), id, ngen;
	int64_t at0 = wsfs_now_ns();
	struct wsfs_rm_ok proof;
	char *path = NULL;
	size_t len;
	int r;

	if (!dir && unlink_behind_ok(fs, parent, name)) {
		/* wb_wait() but for the unlinks sent behind */
		gb_flush(fs);
		wb_wait_sent_ex(fs, true);
		sab_drain(fs);
		if (unlink_behind(req, parent, name))
			return;
	}
	wb_wait(fs);
	proof = rm_ok_state(fs, parent);
	ngen = node_names_gen(fs->nodes, 0);
	r = child_path(fs, parent, name, &path, &len);
	if (r == 0) {
		r = remove_rpc(fs, parent, name, dir, ngen, &path, &len, &rep);
		known_update(fs, parent, name, r, false);
	}
	if (r == 0) {
		id = node_unlink(fs->nodes, parent, name, strlen(name));
		/* A directory a process still has as its cwd (or open): the
		 * kernel asks for its attributes (the rmdir dropped its ctime),
		 * and there is no path to ask agentd by (an older agentd sends
		 * none: ESTALE then). */
		if (id && dir && rep && rep->attr) {
			struct stat st;

			if (attr_to_stat(rep->attr, &st) == 0)
				node_gone_set(fs->nodes, id, &st);
		}
		if (!dir)
			unlinked(fs, id, seq0, mgen0, at0, rep);
		rm_ok_add(fs, proof);
	}
	fuse_reply_err(req, r < 0 ? errno_out(r, false) : 0);
	free(path);
	free_reply(rep);
}

static void ws_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	do_remove(req, parent, name, false);
}

static void ws_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	do_remove(req, parent, name, true);
}

static void ws_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__RenameRequest q = WSBRIDGE__V1__RENAME_REQUEST__INIT;
	Wsbridge__V1__RenameReply *rep = NULL;
	char *from = NULL, *to = NULL;
	size_t from_len, to_len;
	uint64_t victim = 0;
	int r;

	wb_wait(fs);
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
	    (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	r = child_path(fs, parent, name, &from, &from_len);
	if (r == 0)
		r = child_path(fs, newparent, newname, &to, &to_len);
	if (r == 0) {
		q.from = bin(from, from_len);
		q.to = bin(to, to_len);
		q.noreplace = flags & RENAME_NOREPLACE;
		q.exchange = flags & RENAME_EXCHANGE;
		/* A file this rename replaces stays openable through its node
		 * for as long as the kernel holds it (node_keep()). */
		if (!q.exchange && !q.noreplace)
			victim = node_child(fs->nodes, newparent, newname, strlen(newname));
		q.keep_replaced = victim != 0;
		{
			unsigned both = WSFS_SELF_MOVED_FROM | WSFS_SELF_MOVED_TO;

			wsfs_self_begin(fs, from, from_len,
					q.exchange ? both : WSFS_SELF_MOVED_FROM);
			wsfs_self_begin(fs, to, to_len, q.exchange ? both : WSFS_SELF_MOVED_TO);
			wsfs_self_moved(fs, from, from_len, to, to_len, q.exchange);
		}
		r = rpc(fs, M("Rename"), &q.base, &wsbridge__v1__rename_reply__descriptor, &rep);
		wsfs_self_end(fs, from, from_len, r == 0, NULL);
		wsfs_self_end(fs, to, to_len, r == 0, NULL);
		/* An exchange leaves both names in place. */
		if (r < 0 || !q.exchange) {
			known_update(fs, parent, name, r, false);
			known_update(fs, newparent, newname, r, true);
		} else {
			mutated(fs);
		}
	}
	if (r == 0 && rep->replaced) {
		struct stat st;

		/* Before node_rename() detaches it: an OPEN of the node finds
		 * either its name (which holds the new file now: the OPEN
		 * turns to the kept handle) or the handle, never neither (an
		 * O_PATH descriptor's /proc/self/fd link got ESTALE, which
		 * the VFS cannot cure by looking up again). Not kept when the
		 * node went meanwhile (the kernel held it no more) or is not
		 * the file agentd kept (the pod replaced it just before). */
		if (attr_to_stat(rep->replaced_attr, &st) < 0 ||
		    node_keep(fs->nodes, victim, st.st_ino, st_ident(&st), rep->replaced) < 0)
			release_handle(fs, rep->replaced);
	}
	if (r == 0 && node_rename(fs->nodes, parent, name, strlen(name), newparent, newname,
				  strlen(newname), flags & RENAME_EXCHANGE) < 0) {
		/* Keep the table honest: forget both names; lookups rebind. */
		node_unlink(fs->nodes, parent, name, strlen(name));
		node_unlink(fs->nodes, newparent, newname, strlen(newname));
	}
	/* A replaced directory that a process still has as its cwd: the
	 * kernel asks for its attributes, by a node with no path now (as
	 * do_remove()'s rmdir; an older agentd sends none: ESTALE then). */
	if (r == 0 && !rep->replaced && victim && rep->replaced_attr) {
		struct stat st;

		if (attr_to_stat(rep->replaced_attr, &st) == 0)
			node_gone_set(fs->nodes, victim, &st);
	}
	if (r == 0 && rep->replaced) {
		/* A replaced file with another name (a hard link) is opened
		 * and asked for by that name, which may come to hold another
		 * file: the handle would serve the old one. */
		uint64_t h = node_unkeep_named(fs->nodes, victim);

		if (h)
			release_handle(fs, h);
	}
	fuse_reply_err(req, r < 0 ? errno_out(r, true) : 0);
	free_reply(rep);
	free(from);
	free(to);
}

static void ws_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__LinkRequest q = WSBRIDGE__V1__LINK_REQUEST__INIT;
	Wsbridge__V1__AttrReply *rep = NULL;
	uint64_t seq0 = seq_now(fs);
	char *from = NULL, *to = NULL;
	size_t from_len, to_len;
	int r;

	wb_wait(fs);
	r = path_of(fs, ino, &from, &from_len);
	if (r == -ESTALE)
		r = -ENOENT; /* an unlinked file cannot get a name back */
	if (r == 0)
		r = child_path(fs, newparent, newname, &to, &to_len);
	if (r == 0) {
		q.from = bin(from, from_len);
		q.to = bin(to, to_len);
		wsfs_self_begin(fs, from, from_len, WSFS_SELF_CHANGED);
		wsfs_self_begin(fs, to, to_len, WSFS_SELF_CREATED | WSFS_SELF_CHANGED);
		r = rpc(fs, M("Link"), &q.base, &wsbridge__v1__attr_reply__descriptor, &rep);
		self_end_attr(fs, from, from_len, r, rep ? rep->attr : NULL);
		self_end_attr(fs, to, to_len, r, rep ? rep->attr : NULL);
		known_update(fs, newparent, newname, r, true);
	}
	if (r < 0) {
		fuse_reply_err(req, errno_out(r, true));
	} else {
		struct node_info info;
		struct stat st;

		/* Before the reply, whose node is not in the table yet. */
		if (attr_to_stat(rep->attr, &st) == 0)
			symlink_names_stale(fs, &st, 0);
		/* The linked file's type, if known (a hard link is never a
		 * directory: reply_created() with 0). */
		if (node_info(fs->nodes, ino, &info) < 0 || S_ISDIR(info.mode))
			info.mode = 0;
		reply_created(req, fs, newparent, newname, rep, seq0, info.mode & S_IFMT, false);
	}
	free(from);
	free(to);
	free_reply(rep);
}

/* ---- files ---- */

static Wsbridge__V1__Access access_of(int flags)
{
	switch (flags & O_ACCMODE) {
	case O_WRONLY:
		return WSBRIDGE__V1__ACCESS__WRONLY;
	case O_RDWR:
		return WSBRIDGE__V1__ACCESS__RDWR;
	default:
		return WSBRIDGE__V1__ACCESS__RDONLY;
	}
}

/*
 * Register the file agentd opened (@rep) on node @id and fill @fi. Sets
 * keep_cache when the contents are what this mount saw last; @replaced: the
 * name holds another file than the kernel's inode (ws_open), whose pages
 * are not this file's. Returns 0 or -errno (the handle is released then).
 */
static int file_opened(struct wsfs *fs, uint64_t id, int flags, Wsbridge__V1__OpenReply *rep,
		       const struct stat *st, bool replaced, struct fuse_file_info *fi)
{
	struct wsfs_file *f;
	struct node_info info;
	struct node_seen now = seen_of(st);

	f = file_new(fs, rep->handle, st, access_of(flags), flags & O_APPEND);
	if (!f) {
		release_handle(fs, rep->handle);
		return -ENOMEM;
	}
	if (node_fh_add(fs->nodes, id, &f->link) < 0) {
		f->link.refs = 0;
		file_destroy(fs, f);
		return -ESTALE;
	}
	if (f->access != WSBRIDGE__V1__ACCESS__RDONLY || (flags & O_TRUNC))
		store_barrier(fs); /* "Chunk reads": listed now (O_TRUNC: truncated) */
	/*
	 * ws_flush does nothing (no writeback cache, no lock support), so a
	 * read-only open skips the FLUSH round trip at close (FOPEN_NOFLUSH,
	 * fuse_common.h noflush). A writable one keeps it: the kernel's
	 * fuse_flush writes dirty pages of shared mmap writes back first.
	 */
	if (access_of(flags) == WSBRIDGE__V1__ACCESS__RDONLY)
		fi->noflush = 1;
	/*
	 * O_WRONLY|O_APPEND (>>, logs): each write(2) must reach agentd as one
	 * WRITE, which agentd appends with one write(2) (atomic, open(2)),
	 * whatever the pod appends meanwhile. Through the page cache the
	 * kernel splits a write at a page boundary when the page is not cached
	 * whole (fuse_perform_write stops at a page it cannot mark up to date),
	 * so an append of 15 bytes could land as 6 + 9 with a pod line between.
	 * FOPEN_DIRECT_IO sends each write(2) of one buffer of up to 1 MiB -
	 * 4 KiB as one request (256 pages of the buffer at most), and ws_write
	 * forgets what this mount saw. Only where the kernel then writes back
	 * and drops the pages the write covers (direct_append: Linux >= 6.6);
	 * before, another descriptor's mapping kept the old last page, whose
	 * writeback would put zeros over the append. Not for O_RDWR|O_APPEND:
	 * the kernel refuses a MAP_SHARED mmap of a direct-I/O file (ENODEV)
	 * unless FUSE_DIRECT_IO_ALLOW_MMAP is negotiated, which libfuse 3.14
	 * cannot; a write-only descriptor cannot be mapped anyway (EACCES,
	 * mmap(2)). Nor for a setuid or setgid file: a direct write leaves
	 * clearing those bits to the server (FUSE_WRITE_KILL_SUIDGID, which
	 * libfuse 3.14 does not pass on), agentd writes with CAP_FSETID, and
	 * through the page cache the kernel clears them itself (SETATTR).
	 */
	if ((flags & O_ACCMODE) == O_WRONLY && (flags & O_APPEND) && fs->direct_append &&
	    !(st->st_mode & (S_ISUID | S_ISGID)))
		fi->direct_io = 1;
	if (replaced) {
		/* The pages and node_seen are the kernel inode's, not this file's. */
		fi->direct_io = 1;
		fi->keep_cache = 0;
	} else if (node_info(fs->nodes, id, &info) == 0 && info.seen.valid &&
		   info.seen.ino == now.ino && node_same_ident(info.seen.ident, now.ident) &&
		   info.seen.size == now.size &&
		   info.seen.mtime_ns == now.mtime_ns) {
		fi->keep_cache = 1;
		node_seen_set(fs->nodes, id, &now);
	} else {
		node_seen_set(fs->nodes, id, S_ISREG(st->st_mode) ? &now : NULL);
	}
	f->direct_io = fi->direct_io;
	fi->fh = (uint64_t)(uintptr_t)f;
	return 0;
}

/* FNV-1a of @len bytes at @path for stale_told(); never 0 (NULL: 0). */
static uint64_t stale_path(const char *path, size_t len)
{
	uint64_t x;

	if (!path)
		return 0;
	x = wsb_fnv1a(path, len, WSB_FNV1A_INIT);
	return x ? x : 1;
}

/*
 * An OPEN that fails with ESTALE makes the VFS repeat the open(2) once, with
 * a fresh lookup of every name (do_filp_open() with LOOKUP_REVAL, which
 * fuse_dentry_revalidate() turns into LOOKUPs). stale_told() records that
 * thread @tid (fuse_req_ctx()->pid) was told so because the name it opened
 * holds another file now, or none (stale_gone()), and the hash of the
 * path it opened (stale_path(); 0 for a node that lost its name);
 * stale_retry(), called once at the start of every OPEN (with its path's
 * hash) and CREATE (0), says whether this one is that retry (within
 * WSFS_STALE_NS, of the same path where both are known) and forgets the
 * record either way: a retry that ends in a LOOKUP's ENOENT sends no
 * OPEN to take it, and the thread's next open of another name must not
 * count as one (one after a node that lost its name still does, within
 * WSFS_STALE_NS: it opens a replaced file on the old inode, or fails
 * ENOENT, rather than go round once more). The oldest of WSFS_STALE_MAX
 * threads is forgotten first. tid 0 (an opener outside the mount's pid
 * namespace) is never recorded: its OPENs count as retries. Any thread.
 */
static void stale_told(struct wsfs *fs, pid_t tid, uint64_t path)
{
	int64_t now = wsfs_now_ns();
	size_t k, use = 0;

	if (tid == 0)
		return;
	pthread_mutex_lock(&fs->stale_lock);
	for (k = 0; k < WSFS_STALE_MAX; k++) {
		if (fs->stale[k].tid == tid) {
			use = k;
			break;
		}
		if (fs->stale[k].at_ns < fs->stale[use].at_ns)
			use = k;
	}
	fs->stale[use].tid = tid;
	fs->stale[use].at_ns = now;
	fs->stale[use].path = path;
	pthread_mutex_unlock(&fs->stale_lock);
}

static bool stale_retry(struct wsfs *fs, pid_t tid, uint64_t path)
{
	int64_t now = wsfs_now_ns();
	bool r = false;

	if (tid == 0)
		return true;
	pthread_mutex_lock(&fs->stale_lock);
	for (size_t k = 0; k < WSFS_STALE_MAX; k++) {
		if (fs->stale[k].tid == tid) {
			r = now - fs->stale[k].at_ns < WSFS_STALE_NS &&
			    (!path || !fs->stale[k].path || path == fs->stale[k].path);
			fs->stale[k].tid = 0;
			fs->stale[k].at_ns = 0;
			fs->stale[k].path = 0;
			break;
		}
	}
	pthread_mutex_unlock(&fs->stale_lock);
	return r;
}

/*
 * Whether thread @tid was told ESTALE (stale_told()) for the path of hash
 * @path (or for a node that had lost its name) within WSFS_STALE_NS, so
 * that its next LOOKUP of that path is the VFS's repeat of the open:
 * stale_retry() without forgetting. Any thread.
 */
static bool stale_pending(struct wsfs *fs, pid_t tid, uint64_t path)
{
	int64_t now = wsfs_now_ns();
	bool r = false;

	if (tid == 0 || !path)
		return false;
	pthread_mutex_lock(&fs->stale_lock);
	for (size_t k = 0; k < WSFS_STALE_MAX; k++) {
		if (fs->stale[k].tid == tid) {
			/* A record without a path (the node had lost its name
			 * when its OPEN came) is of this repeat too. */
			r = now - fs->stale[k].at_ns < WSFS_STALE_NS &&
			    (!fs->stale[k].path || path == fs->stale[k].path);
			break;
		}
	}
	pthread_mutex_unlock(&fs->stale_lock);
	return r;
}

/*
 * The answer to an OPEN whose name the pod removed (or replaced, and the
 * node lost its name) since the kernel looked it up: ESTALE, which makes the
 * VFS look the name up again and open once more (stale_told() marks the
 * thread); on that retry (@retry) the name went again (a pod that removes
 * and writes a file in a loop), and the open fails with ENOENT, as one that
 * came just after the removal would: ESTALE is no answer open(2) gives on a
 * local disk. With O_CREAT in @flags, ESTALE again: a retry whose lookup
 * finds no name creates it. @path: stale_path() of the name opened, 0 for
 * a node without one. FUSE worker thread.
 */
static int stale_gone(struct wsfs *fs, fuse_req_t req, bool retry, int flags, uint64_t path)
{
	if (retry && !(flags & O_CREAT))
		return -ENOENT;
	if (!retry)
		stale_told(fs, fuse_req_ctx(req)->pid, path);
	return -ESTALE;
}

/*
 * Make the kernel's i_size of @ino at least @size bytes, the size of the file
 * that @f has just opened: stores the file's last byte, read through @f,
 * into the inode's page cache (FUSE_NOTIFY_STORE extends i_size to cover
 * what it stores: fs/fuse/dev.c fuse_notify_store(); a store of no bytes
 * leaves it). For an open that gave the kernel's inode another file (the
 * "replaced" open of ws_open()): the GETATTR that follows is answered with
 * the new size, but the kernel drops the reply's attributes when an
 * invalidation of the inode (a watch event of the name) crossed it
 * (fs/fuse/inode.c fuse_change_attributes(), attr_version), and fstat(2)
 * still shows the reply: a mmap(2) of that size then died of SIGBUS past
 * the old i_size (filemap_fault()). A stored byte in a page not yet read
 * leaves the page not uptodate (read again when needed); the page is
 * dropped just before, should a reader of the old file have brought it
 * back since ws_open() dropped them all (a reader faulting it in within
 * those microseconds would see one byte of the new file). Best effort: a
 * failed Read or store leaves i_size as it was; nothing for a file @f
 * cannot read (O_WRONLY: no mmap(2) of it reads). A store raises the
 * node's lower bound of i_size (node_ksize_covered()). Costs one Read; FUSE
 * worker thread.
 */
static void isize_cover(struct wsfs *fs, fuse_ino_t ino, struct wsfs_file *f, off_t size)
{
	Wsbridge__V1__ReadRequest q = WSBRIDGE__V1__READ_REQUEST__INIT;
	Wsbridge__V1__ReadReply *rep = NULL;
	struct hslot s = { f, &q.handle };
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(1);
	int r;

	if (size <= 0 || f->access == WSBRIDGE__V1__ACCESS__WRONLY)
		return;
	q.offset = (uint64_t)size - 1;
	q.size = 1;
	read_mark(fs); /* agentd's read may set atime */
	r = file_rpc(fs, &s, 1, M("Read"), &q.base, &wsbridge__v1__read_reply__descriptor, &rep);
	if (r == 0 && rep->data.len == 1) {
		bv.buf[0].mem = rep->data.data;
		(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, size - 1, 1);
		if (fuse_lowlevel_notify_store(fs->se, ino, size - 1, &bv, 0) == 0)
			node_ksize_covered(fs->nodes, ino, size);
	}
	read_mark(fs);
	free_reply(rep);
}

/* node_fh_find() match: an open file of the file @arg (a node_info) is. */
static bool fh_is_file(const struct node_fh *link, void *arg)
{
	const struct wsfs_file *f = (const struct wsfs_file *)link;
	const struct node_info *info = arg;

	return f->ino == info->ino && node_same_ident(f->ident, info->ident);
}

/* node_fh_find() match: an open file of another file than @arg's. */
static bool fh_not_file(const struct node_fh *link, void *arg)
{
	return !fh_is_file(link, arg);
}

/*
 * The retry of an OPEN (ws_open()) found the name replaced again: open the
 * inode's own file (@info's), when a descriptor of the mount has it open or
 * it is kept, as a local file system opens the inode its lookup found; else
 * the file the inode's latest descriptor has (one opened "replaced" on it
 * before). The kernel's inode is shared by every open of it: the name's
 * new file opened on it ("replaced") must give it that file's size
 * (isize_cover()), and a reader of the old file through the same inode then
 * read past that file's end, its cached pages padded with zeros to the new
 * size; each file more on one inode is one more size its readers disagree
 * on. With none (no descriptor open, nothing kept, or
 * agentd could not open it again), nothing reads through the inode, and
 * the new file is opened on it. @q: the request sent (its path and
 * access), *@rep its reply; on a reopen both are replaced (the first
 * reply's handle released) and *@st is the file's. Returns true when it
 * reopened, false when *@rep is untouched; then *@lost says whether the
 * inode's own file is open here but was lost (file_reopen(): agentd
 * restarted and the name holds another file, or none), so that this open
 * (of /proc/PID/fd/N, which looks nothing up) must fail rather than open
 * what the name holds now. Not with O_TRUNC (@q->truncate), which the
 * first open applied to the new file. FUSE worker thread.
 */
static bool open_own(struct wsfs *fs, fuse_ino_t ino, const struct node_info *info,
		     Wsbridge__V1__OpenRequest *q, Wsbridge__V1__OpenReply **rep, struct stat *st,
		     bool *lost)
{
	Wsbridge__V1__OpenRequest again;
	Wsbridge__V1__OpenReply *own_rep = NULL;
	struct node_fh *link;
	struct stat own_st;
	uint64_t own = 0;

	*lost = false;
	if (q->truncate)
		return false;
	/* The own file's descriptor, the kept one, another's descriptor. */
	for (int k = 0; k < 3 && !own; k++) {
		if (k == 1) {
			own = node_kept(fs->nodes, ino);
			continue;
		}
		link = k == 0 ? node_fh_find(fs->nodes, ino, fh_is_file, (void *)info)
			      : node_fh_get(fs->nodes, ino);
		if (link) {
			if (file_handle((struct wsfs_file *)link, &own) < 0) {
				own = 0;
				*lost = *lost || k == 0;
			}
			file_put(fs, (struct wsfs_file *)link);
		}
	}
	if (!own)
		return false;
	*lost = false;
	again = *q;
	again.reopen = own;
	again.path = bin("\0", 1);
	again.read_ahead = 0;
	if (open_rpc(fs, &again, &own_rep) < 0 || attr_to_stat(own_rep->attr, &own_st) < 0) {
		if (own_rep)
			release_handle(fs, own_rep->handle);
		free_reply(own_rep);
		return false; /* agentd lost it (EBADF): the new file, then */
	}
	release_handle(fs, (*rep)->handle);
	free_reply(*rep);
	*rep = own_rep;
	*q = again;
	*st = own_st;
	return true;
}

static void ws_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	uint64_t seq0, mgen0, aver0;
	int64_t at0;
	struct node_info info;
	struct stat st;
	bool detached = false, replaced = false;
	char *path = NULL;
	size_t len = 0;
	uint64_t ngen;
	int r, tries = 0;
	/* The VFS's repeat of an open this thread was told ESTALE for. */
	bool retry = false, asked = false;
	pthread_mutex_t *ol = &fs->open_locks[ino % WSFS_OPEN_LOCKS];
	uint64_t spath = 0; /* stale_path() of the name opened */
	/* The file the VFS's repeat looked up (ws_lookup()): the node's pin,
	 * which every repeat of an open of it within WSFS_STALE_NS uses (the
	 * table keeps it: node_pin_get()). */
	uint64_t pin = 0;
	struct node_fh *other;
	bool kill = req_kill_suidgid; /* before a wait: this thread's request */

	wb_wait(fs);
	/* Opens of one inode one at a time (open_own()): a retry that finds no
	 * descriptor of the inode's own file must not cross an open that is
	 * about to make one, or the inode gets two files' sizes. */
	pthread_mutex_lock(ol);
again:
	ngen = node_names_gen(fs->nodes, 0);
	r = node_info(fs->nodes, ino, &info);
	if (r == 0) {
		r = path_of(fs, ino, &path, &len);
		/* No path (no name left, or none above it): an open
		 * descriptor, the kept handle or the pin opens the file. */
		detached = r == -ESTALE;
	}
	if (!asked) {
		asked = true;
		spath = stale_path(r == 0 ? path : NULL, len);
		retry = stale_retry(fs, fuse_req_ctx(req)->pid, spath);
		if (retry)
			pin = node_pin_get(fs->nodes, ino, WSFS_STALE_NS);
		if (pin && (r == 0 || detached) && !(fi->flags & O_TRUNC) &&
		    (other = node_fh_find(fs->nodes, ino, fh_not_file, &info))) {
			/* Another file is open on this inode already (an open
			 * whose repeat lost found no descriptor of its own file:
			 * open_own()): its readers go by that file's size, and
			 * the pinned file would be one more. As without a pin,
			 * then: by name, where open_own() picks the inode's
			 * file, or (no name left) that descriptor's file. Not
			 * with O_TRUNC, which open_own() does not reopen: the
			 * name's newer file would be truncated instead. */
			file_put(fs, (struct wsfs_file *)other);
			pin = 0; /* the node's still */
		}
	}
	if (detached) {
		/*
		 * Every name of the file is gone, but the kernel still had it:
		 * open(2) of /proc/PID/fd/N, or an open that looked the name
		 * up just before a rename over it (ESTALE would make the VFS
		 * look up once more, which a writer renaming in a loop can
		 * defeat twice). An open file of the node, or the handle kept
		 * when this mount's rename replaced it (node_keep()), opens
		 * the same file again, as on a local file system.
		 */
		struct node_fh *link = pin ? NULL : node_fh_get(fs->nodes, ino);

		if (pin) {
			q.reopen = pin; /* the name went since the lookup found it */
			r = 0;
		} else if (link) {
			r = file_handle((struct wsfs_file *)link, &q.reopen);
			file_put(fs, (struct wsfs_file *)link);
		} else {
			q.reopen = node_kept(fs->nodes, ino);
			/* unlinked, or replaced in the pod */
			r = q.reopen ? 0 : stale_gone(fs, req, retry, fi->flags, 0);
		}
	}
	if (r == 0 && !detached && pin)
		q.reopen = pin; /* the file found by name just now, whatever it holds now */
	if (r < 0)
		goto out;
	/* With reopen, agentd uses no path; one that names nothing (a NUL
	 * byte is EINVAL) keeps an agentd without reopen from opening the
	 * root. */
	q.path = q.reopen ? bin("\0", 1) : bin(path, len);
	q.access = access_of(fi->flags);
	q.truncate = fi->flags & O_TRUNC;
	q.kill_suidgid = q.truncate && kill;
	q.append = fi->flags & O_APPEND;
	q.nofollow = true;
	/* Reading a file whose contents this mount has not seen: bring the
	 * first bytes along (most files are read whole, at once). */
	if (q.access == WSBRIDGE__V1__ACCESS__RDONLY && !info.seen.valid &&
	    atomic_load(&fs->watch_live))
		q.read_ahead = OPEN_READ_AHEAD;
	seq0 = seq_now(fs);
	mgen0 = atomic_load(&fs->mgen);
	aver0 = node_attr_ver(fs->nodes, ino);
	at0 = wsfs_now_ns();
	if (q.truncate && path)
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
	read_mark(fs); /* Open may read (atime) */
	r = open_rpc(fs, &q, &rep);
	read_mark(fs);
	if (q.truncate)
		mutated(fs);
	if (q.truncate && path)
		self_end_attr(fs, path, len, r, rep ? rep->attr : NULL);
	if ((r == -EBADF || r == -EINVAL) && pin && q.reopen == pin && !q.truncate && !detached) {
		/* agentd no longer has it (or cannot open it so): by name. */
		if (node_pin_drop(fs->nodes, ino, pin))
			release_handle(fs, pin);
		pin = 0;
		q.reopen = 0;
		free(path);
		path = NULL;
		len = 0;
		free_reply(rep);
		rep = NULL;
		goto again;
	}
	if (r == -ENOENT && !q.reopen && ++tries < 3 && !node_names_still(fs->nodes, 0, ngen)) {
		/* The path was the node's before an own rename (of a
		 * directory above it) that crossed the Open: by the path the
		 * table gives now. */
		free(path);
		path = NULL;
		len = 0;
		free_reply(rep);
		rep = NULL;
		node_names_wait(fs->nodes, 0, NAMES_WAIT_MS);
		goto again;
	}
	if (r == -ENOENT && !q.reopen) {
		r = stale_gone(fs, req, retry, fi->flags, spath); /* removed in the pod */
	} else if (q.reopen && retry && (r == -EBADF || r == -EINVAL)) {
		/* The VFS's retry, on a node without a name whose last
		 * descriptor was closed meanwhile (its handle released): gone,
		 * as stale_gone() says, not ESTALE, which would reach open(2). */
		r = stale_gone(fs, req, retry, fi->flags, 0);
	} else if (r == -ENOENT || r == -ELOOP || (r == -ENXIO && !q.reopen) ||
		   (q.reopen && (r == -EBADF || r == -EINVAL))) {
		/* The name was replaced by a symlink in the pod, or by a FIFO
		 * or socket that agentd's non-blocking open could not open for
		 * writing (ENXIO), or agentd lost the handle to reopen, or
		 * cannot: ESTALE makes the VFS look it up again (and open a
		 * FIFO itself, blocking as on a local disk). */
		r = -ESTALE;
	}
	if (r < 0)
		goto out;
	r = attr_to_stat(rep->attr, &st);
	if (r == 0 && info.ino && !same_file(&info, &st) && !q.reopen && !q.truncate &&
	    (q.reopen = node_kept(fs->nodes, ino)) != 0) {
		/* This mount's rename replaced the name while this open was on
		 * its way: the kernel opened the old file, which it now keeps
		 * (an open after this one must not get an older file). */
		release_handle(fs, rep->handle);
		free_reply(rep);
		rep = NULL;
		q.path = bin("\0", 1);
		r = open_rpc(fs, &q, &rep);
		if (r == -EBADF || r == -EINVAL)
			r = -ESTALE;
		if (r < 0)
			goto out;
		r = attr_to_stat(rep->attr, &st);
	}
	if (r == 0 && info.ino && info.mode != (st.st_mode & S_IFMT)) {
		r = -ESTALE; /* another kind of file under this name now */
	} else if (r == 0 && info.ino && !same_file(&info, &st)) {
		/*
		 * The name was replaced (a rename over it in the pod) after the
		 * kernel looked it up: open(2) must get the file the name holds
		 * now, as on a local file system, but the kernel's inode is the
		 * old file's (its st_ino, size and pages). ESTALE, the first
		 * time: the VFS looks the names up again and opens the new
		 * file's own inode, page cache and mmap(2) included. A writer
		 * renaming in a loop can beat that retry too; then the retry
		 * opens the file on the old inode, bypassing its pages
		 * (FOPEN_DIRECT_IO, set by file_opened()) rather than fail or
		 * serve clamped or stale bytes (a MAP_SHARED mmap(2) of it
		 * fails with ENODEV). Not with O_TRUNC, which agentd has
		 * applied to the new file already: a second one on the retry
		 * could wipe what the pod wrote in between, and a caller that
		 * does not retry (overlayfs, fanotify, nfsd open by dentry)
		 * would fail with the file truncated.
		 */
		if (!retry && !q.truncate) {
			release_handle(fs, rep->handle);
			stale_told(fs, fuse_req_ctx(req)->pid, spath);
			r = -ESTALE;
			goto out;
		}
		bool lost;

		replaced = !open_own(fs, ino, &info, &q, &rep, &st, &lost) ||
			   !same_file(&info, &st);
		if (lost) {
			release_handle(fs, rep->handle);
			r = -EIO;
			goto out;
		}
	}
	if (r == 0)
		r = file_opened(fs, ino, fi->flags, rep, &st, replaced, fi);
	else
		release_handle(fs, rep->handle);
	if (r == 0 && !replaced)
		attr_keep(fs, ino, aver0, at0, rep->attr); /* after Open's read */
	/* The kernel keeps its mode across an O_TRUNC open (fs/fuse/file.c
	 * fuse_finish_open()): it asks anew (attributes only). */
	if (r == 0 && q.kill_suidgid &&
	    (rep->suidgid_killed || kill_left(fs, file_of(fi), ino, st.st_mode)) && fs->se)
		(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
	if (r == 0 && q.truncate) {
		node_ksize_lower(fs->nodes, ino, 0); /* the kernel's i_size (atomic_o_trunc) */
		node_told_set(fs->nodes, ino, &st); /* the kernel's size now: 0 */
	}
	if (r == 0 && replaced && fs->se) {
		/*
		 * The kernel's inode is the old file's, which the pod has just
		 * replaced (the name was looked up for this very open): it
		 * takes the opened file's attributes and pages, or fstat(2)
		 * would give the old size for the new bytes, and a mmap(2) of
		 * that size die of SIGBUS past the new file's end. Its next
		 * GETATTR is answered through this open file (node_stat()),
		 * and its i_size made to cover the file (isize_cover()).
		 */
		node_attr_drop(fs->nodes, ino);
		store_barrier(fs); /* "Chunk reads": older chunks go */
		(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
		isize_cover(fs, ino, file_of(fi), st.st_size);
	}
	/*
	 * Not the contents this mount saw last (or none seen): the pages go
	 * (no keep_cache), and so must the kernel's attributes, before the
	 * reply: a read stops at the kernel's i_size, which may be an older
	 * file's (the pod rewrote it a moment ago and its event is still on
	 * its way), and the new bytes would come cut to the old size ("v00"
	 * of "v000"). The kernel's next read or stat then asks (GETATTR,
	 * answered from Open's reply while the watch is live: attr_keep()
	 * above). The reply to OPEN has no attributes of its own (FUSE
	 * protocol, fuse_open_out). Without the watch that GETATTR is a call,
	 * paid only for a file the mount knows changed (the kernel's own
	 * attributes expire within attr_timeout then anyway).
	 */
	if (r == 0 && !replaced && !fi->keep_cache && S_ISREG(st.st_mode) && fs->se) {
		struct node_seen now = seen_of(&st);
		bool changed = info.seen.valid &&
			       (info.seen.ino != now.ino ||
				!node_same_ident(info.seen.ident, now.ident) ||
				info.seen.size != now.size ||
				info.seen.mtime_ns != now.mtime_ns);

		if (changed || (atomic_load(&fs->watch_live) && watch_ttl_ns(fs) > 0)) {
			if (changed)
				store_barrier(fs); /* "Chunk reads": the kernel drops the pages */
			(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
		}
	}
	if (r == 0 && !fi->keep_cache && (rep->data.len || rep->data_eof)) {
		struct wsfs_file *f = file_of(fi);

		/* Not yet shared: no lock needed. */
		f->ra = rep->data.len ? malloc(rep->data.len) : NULL;
		if (f->ra || !rep->data.len) {
			if (rep->data.len)
				memcpy(f->ra, rep->data.data, rep->data.len);
			f->ra_len = rep->data.len;
			f->ra_have = true;
			f->ra_eof = rep->data_eof;
			f->ra_seq = seq0;
			f->ra_mgen = mgen0;
			f->ra_at_ns = wsfs_now_ns();
			f->ra_size = st.st_size;
			f->ra_mtime_ns = wsb_ns_of_ts(&st.st_mtim);
		}
	}
out:
	pthread_mutex_unlock(ol);
	if (r < 0) {
		reply_err(req, r);
	} else if (fuse_reply_open(req, fi) == -ENOENT) {
		/* open(2) was interrupted: nobody will release this. */
		file_put(fs, file_of(fi));
	}
	free(path);
	free_reply(rep);
}

static void ws_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	struct fuse_entry_param e;
	uint64_t seq0 = seq_now(fs), gen0, oseq0;
	uint64_t id = 0;
	char *path = NULL;
	size_t len;
	int r;

	/* An O_CREAT open ws_open told ESTALE may come back as a CREATE. */
	(void)stale_retry(fs, fuse_req_ctx(req)->pid, 0);
	wb_wait(fs);
	gen0 = atomic_load(&fs->mgen);
	oseq0 = own_seq(fs);
	memset(&e, 0, sizeof(e));
	r = child_path(fs, parent, name, &path, &len);
	if (r < 0)
		goto out;
	q.path = bin(path, len);
	q.access = access_of(fi->flags);
	q.create = true;
	q.exclusive = fi->flags & O_EXCL;
	q.truncate = fi->flags & O_TRUNC;
	q.kill_suidgid = q.truncate && req_kill_suidgid;
	q.append = fi->flags & O_APPEND;
	q.nofollow = true;
	q.mode = mode & 07777;
	wsfs_self_begin(fs, path, len, WSFS_SELF_CREATED | WSFS_SELF_CHANGED);
	r = open_rpc(fs, &q, &rep);
	if (r == 0 && rep->existed)
		wsfs_self_existed(fs, path, len);
	self_end_attr(fs, path, len, r, rep ? rep->attr : NULL);
	known_update(fs, parent, name, r, true);
	if (r == -ELOOP && !(fi->flags & O_NOFOLLOW))
		r = -ESTALE; /* a symlink appeared in the pod: let the VFS follow it */
	if (r < 0)
		goto out;
	r = attr_to_stat(rep->attr, &e.attr);
	if (r == 0)
		r = node_lookup(fs->nodes, NODE_OWN, parent, name, strlen(name), e.attr.st_ino,
				st_ident(&e.attr), e.attr.st_mode, (uint32_t)e.attr.st_nlink, &id);
	if (r == -ESTALE)
		/* The pod renamed the directory (or one above it) after the
		 * file was made or opened there: the table lost its name, but
		 * the call is done and open(2) must not fail (after O_EXCL a
		 * lock file nobody owns would stay; O_TRUNC has emptied the
		 * file). Its node has no name; the kernel's dentry under the
		 * directory it holds is right. */
		r = node_new_detached(fs->nodes, e.attr.st_ino, st_ident(&e.attr), e.attr.st_mode,
				      &id);
	if (r < 0) {
		release_handle(fs, rep->handle);
		if (r == -ESTALE)
			r = -ENOENT;
		goto out;
	}
	r = file_opened(fs, id, fi->flags, rep, &e.attr, false, fi);
	if (r < 0) {
		node_forget(fs->nodes, id, 1);
		goto out;
	}
	/* An O_TRUNC create of a file that was there; the reply carries
	 * the mode. */
	if (q.kill_suidgid && rep->existed && kill_left(fs, file_of(fi), id, e.attr.st_mode))
		e.attr.st_mode &= ~(mode_t)wsb_suidgid_kill_bits(e.attr.st_mode);
	/* A file made now: what GETATTR answers, and a SETATTR kept behind
	 * (sab_defer()) starts from, until its first write is sent. Only the
	 * create's own bump of mgen (known_update()) between. */
	if (!rep->existed)
		own_keep(fs, id, &e.attr, gen0, atomic_load(&fs->mgen), oseq0);
	file_of(fi)->created = !rep->existed;
	file_of(fi)->owner = (uint32_t)e.attr.st_uid;
	(void)node_ksize_told(fs->nodes, id, e.attr.st_size);
	node_told_set(fs->nodes, id, &e.attr);
	{
		struct ttl t = ttl_for(fs, seq0, &e.attr);

		e.ino = id;
		e.attr_timeout = t.attr;
		e.entry_timeout = t.entry;
	}
out:
	if (r < 0) {
		reply_err(req, r);
	} else if (fuse_reply_create(req, &e, fi) == -ENOENT) {
		file_put(fs, file_of(fi));
		node_forget(fs->nodes, id, 1);
	}
	free(path);
	free_reply(rep);
}

/*
 * Answer READ (@size bytes at @off) from the bytes Open brought along, when
 * they cover it (or hold the whole file) and nothing was written through
 * this mount (mgen) nor invalidated by the watch (inval_seq) since the Open
 * (and the watch is live, so that inval_seq would have moved; and at most
 * watch_timeout ago, for a change nobody reports):
 * the read then returns what it would have at open time (close-to-open).
 * The bytes are dropped once read to their end, or when stale. Returns
 * true when it replied.
 */
static bool read_from_open(struct wsfs *fs, struct wsfs_file *f, fuse_req_t req, fuse_ino_t ino,
			   size_t size, off_t off)
{
	char *buf = NULL, *own = NULL;
	bool hit = false, drop = false;
	size_t n = 0;

	pthread_mutex_lock(&f->lock);
	if (!f->ra_have)
		goto out;
	if (f->ra_seq != seq_now(fs) || f->ra_mgen != atomic_load(&fs->mgen) ||
	    !atomic_load(&fs->watch_live) ||
	    !still_young(fs, f->ra_at_ns)) {
		drop = true;
		goto out;
	}
	if ((uint64_t)off + size <= f->ra_len)
		n = size;
	else if (f->ra_eof)
		n = (uint64_t)off < f->ra_len ? f->ra_len - (size_t)off : 0;
	else
		goto out; /* beyond what Open read: ask agentd */
	if (n < size && node_ksize(fs->nodes, ino) > off + (off_t)n) {
		/* The file grew since Open read it (the pod wrote the file it
		 * found empty, say) and the kernel was told so: an end here
		 * would cut i_size under a mmap(2) of that size (SIGBUS). */
		drop = true;
		goto out;
	}
	hit = true;
	drop = (uint64_t)off + n >= f->ra_len;
	if (!n) {
		/* nothing to copy */
	} else if (drop) {
		own = f->ra; /* read to its end: the reply takes the buffer */
		buf = own + off;
		f->ra = NULL;
	} else if ((own = malloc(n))) {
		memcpy(own, f->ra + off, n);
		buf = own;
	} else {
		hit = false; /* no memory: ask agentd */
	}
out:
	if (drop) {
		free(f->ra);
		f->ra = NULL;
		f->ra_len = 0;
		f->ra_have = f->ra_eof = false;
	}
	pthread_mutex_unlock(&f->lock);
	/* Not under f->lock, nor touching @f: once the kernel has the reply
	 * to its last request on the file, RELEASE may free @f at once. */
	if (hit && n < size)
		node_ksize_lower(fs->nodes, ino, off + (off_t)n);
	if (hit)
		fuse_reply_buf(req, buf, n);
	free(own);
	return hit;
}

/*
 * Chunk reads. The kernel asks a small READ (4 KiB) for a read(2) that
 * does not follow the one before (fs/fuse readahead: "standalone, small
 * random read: read as is"), and each costs a round trip to agentd, while
 * reads near it are likely (a database page, a pack index, an object
 * file's sections). So such a READ asks agentd for the aligned chunk of
 * cfg.read_chunk_kb around it, replies its own bytes, and has the rest
 * stored into the kernel's page cache (FUSE_NOTIFY_STORE, fs/fuse/dev.c
 * fuse_notify_store()) off the request threads (wsfs_store_later(): a
 * store waits for the page locks of READs in flight). A read of those
 * bytes then never leaves the kernel, as JuiceFS's and gcsfuse's block
 * reads save their round trips in a cache of their own.
 *
 * A stored page must hold what the file holds, as a page the kernel read
 * itself does, and so may be stored only while no change can have crossed
 * the Read: (1) the pod's: the watch must be live, and no invalidation
 * came since the Read began (inval_seq), checked again after the store,
 * which drops the chunk's pages when one came meanwhile (the watch's own
 * invalidation may have run before the store); (2) this mount's: a
 * write(2) changes the pages before its WRITE comes here, so no handle on
 * the file may be open for writing, through any of its names
 * (file_writable()), and nothing changed through the mount since the Read
 * began (mgen). Whatever changes or drops the file's pages without those
 * (an open for writing once its handle is listed, an O_TRUNC open, a
 * truncate once its SetAttr has run, an open that finds the file changed
 * or replaced) bumps store_gen and takes store_lock for writing for a
 * moment (store_barrier()) before it replies: a store in progress
 * (store_lock held for reading) ends first, and later ones see the
 * handle, mgen or store_gen moved. A store waits for the page locks of
 * READs in flight, each bounded by its RPC deadline, so that wait is
 * bounded by the same plus WSFS_STORE_GRACE_MS; it can outlast that only
 * when the READ it waits for has no worker to serve it, every one waiting
 * here: then the open goes ahead, and the store, seeing store_gen moved
 * once done, drops what it stored (a reader could see the old bytes until
 * then). A store never covers the READ's own bytes (their page is locked
 * until the reply is in) and stops at what agentd returned (a store past
 * the kernel's i_size would move it).
 */

static void writable_fn(struct node_fh *n, void *arg)
{
	if (((struct wsfs_file *)n)->access != WSBRIDGE__V1__ACCESS__RDONLY)
		*(bool *)arg = true;
}

/* Whether the server file @sino (identity @sident) has a handle open for
 * writing through any of its names ("Chunk reads"); true also when it has
 * more names than are looked at. */
static bool file_writable(struct wsfs *fs, uint64_t sino, uint64_t sident)
{
	uint64_t ids[8];
	size_t n = node_ids_by_ino(fs->nodes, sino, sident, ids, 8);
	bool any = n == 8;

	for (size_t i = 0; i < n && !any; i++)
		node_fh_each(fs->nodes, ids[i], writable_fn, &any);
	return any;
}

/* Let a chunk being stored finish before a change of the file's pages
 * ("Chunk reads"). Any request thread, no lock held. */
static void store_barrier(struct wsfs *fs)
{
	if (!fs->cfg.read_chunk_kb)
		return;
	atomic_fetch_add(&fs->store_gen, 1);
	readers_drain(fs, &fs->store_lock);
}

/*
 * Whether READ @size bytes at @off through @f is to fetch its chunk
 * ("Chunk reads"): then *@coff, the chunk's offset (its size is
 * cfg.read_chunk_kb KiB, <= CHUNK_MAX). Not for a READ that crosses a
 * chunk's end. Notes where the READ ends, for the next. FUSE worker
 * thread.
 */
static bool chunk_read(struct wsfs *fs, struct wsfs_file *f, uint64_t off, size_t size,
		       uint64_t *coff)
{
	uint64_t chunk = (uint64_t)fs->cfg.read_chunk_kb * 1024;
	bool follows;

	pthread_mutex_lock(&f->lock);
	follows = off == f->read_end;
	f->read_end = off + size;
	pthread_mutex_unlock(&f->lock);
	if (!chunk || !size || size >= chunk || follows || f->direct_io || off % 4096 ||
	    size % 4096 || off % chunk + size > chunk || !atomic_load(&fs->watch_live) ||
	    watch_ttl_ns(fs) <= 0 || !fs->se || file_writable(fs, f->ino, f->ident))
		return false;
	*coff = off - off % chunk;
	return true;
}

/*
 * Answer READ (@size bytes at @off of @ino, through @f) from a chunk of
 * the same file still waiting to be stored, when one holds it and is still
 * good to store (a READ at QD1 may come before the chunk of the READ
 * before it is in the page cache). True when it replied. FUSE worker
 * thread.
 */
static bool read_from_store(struct wsfs *fs, fuse_req_t req, fuse_ino_t ino,
			    const struct wsfs_file *f, uint64_t off, size_t size)
{
	char *buf = NULL;
	size_t n = 0;

	pthread_mutex_lock(&fs->nq_lock);
	for (const struct wsfs_store *s = fs->sq_head; s; s = s->next) {
		if (s->nodeid != ino || s->sino != f->ino || s->sident != f->ident ||
		    off < s->off || off + size > s->off + s->len ||
		    s->seq != seq_now(fs) || s->mgen != atomic_load(&fs->mgen) ||
		    s->sgen != atomic_load(&fs->store_gen))
			continue;
		buf = malloc(size);
		if (buf) {
			memcpy(buf, s->data + (off - s->off), size);
			n = size;
		}
		break;
	}
	pthread_mutex_unlock(&fs->nq_lock);
	if (!buf)
		return false;
	fuse_reply_buf(req, buf, n);
	free(buf);
	return true;
}

void wsfs_store_free(struct wsfs_store *s)
{
	if (!s)
		return;
	free_reply(s->owner);
	free(s);
}

/* Whether nothing that would make @s stale has happened ("Chunk reads"). */
static bool store_good(struct wsfs *fs, const struct wsfs_store *s)
{
	return seq_now(fs) == s->seq && atomic_load(&fs->mgen) == s->mgen &&
	       atomic_load(&fs->store_gen) == s->sgen && atomic_load(&fs->watch_live);
}

/* Store @len bytes of @data at @off into @ino's pages; 0 or -errno. */
static int store_range(struct wsfs *fs, fuse_ino_t ino, uint64_t off, const uint8_t *data,
		       size_t len)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);

	int r;

	if (!len)
		return 0;
	bv.buf[0].mem = (void *)data;
	r = fuse_lowlevel_notify_store(fs->se, ino, (off_t)off, &bv, 0);
	if (r == 0) {
		/* fuse_notify_store() extends i_size to cover the bytes. */
		node_ksize_covered(fs->nodes, ino, (int64_t)(off + len));
		node_told_grow(fs->nodes, ino, (int64_t)(off + len));
	}
	return r;
}

void wsfs_store_pages(struct wsfs *fs, struct wsfs_store *s)
{
	uint64_t end = s->off + s->len, skip_end = s->skip_off + s->skip_len;
	bool stored = false;
	int r = 0;

	pthread_rwlock_rdlock(&fs->store_lock);
	if (!fs->se || !store_good(fs, s) || file_writable(fs, s->sino, s->sident))
		goto out;
	/* The bytes before the READ's own (replied already), and after. */
	if (s->skip_off > s->off) {
		r = store_range(fs, s->nodeid, s->off, s->data,
				(size_t)((s->skip_off < end ? s->skip_off : end) - s->off));
		stored = true;
	}
	if (r == 0 && skip_end < end && store_good(fs, s)) {
		r = store_range(fs, s->nodeid, skip_end, s->data + (skip_end - s->off),
				(size_t)(end - skip_end));
		stored = true;
	}
	if (r < 0 && r != -ENOENT)
		wsb_debug("notify_store(%llu): %s", (unsigned long long)s->nodeid, strerror(-r));
	/* A change that came while storing: its invalidation may have run
	 * before the store. */
	if (stored && !store_good(fs, s))
		(void)fuse_lowlevel_notify_inval_inode(fs->se, s->nodeid, (off_t)s->off,
						       (off_t)s->len);
out:
	pthread_rwlock_unlock(&fs->store_lock);
	wsfs_store_free(s);
}

static void ws_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	struct wsfs_file *f = file_of(fi);
	Wsbridge__V1__ReadRequest q = WSBRIDGE__V1__READ_REQUEST__INIT;
	Wsbridge__V1__ReadReply *rep = NULL;
	struct hslot s = { f, &q.handle };
	char *buf = NULL;
	size_t got = 0;
	uint64_t aver0;
	int64_t at0;
	int r;

	wb_wait(fs);
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (f && read_from_open(fs, f, req, ino, size, off))
		return;
	aver0 = node_attr_ver(fs->nodes, ino);
	at0 = wsfs_now_ns();
	read_mark(fs); /* agentd's read may set atime */
	if (size <= CHUNK_MAX) {
		/* The common case: one RPC, replied from its buffer. */
		uint64_t coff = (uint64_t)off, seq0 = 0, mgen0 = 0, sgen0 = 0, sino = 0, sident = 0;
		size_t clen = size, skip, n;
		bool chunk = f && chunk_read(fs, f, (uint64_t)off, size, &coff);

		if (chunk && read_from_store(fs, req, ino, f, (uint64_t)off, size))
			return;
		if (chunk) {
			/* Not @f's after the reply: RELEASE may free it then. */
			sino = f->ino;
			sident = f->ident;
			clen = (size_t)fs->cfg.read_chunk_kb * 1024;
			seq0 = seq_now(fs);
			mgen0 = atomic_load(&fs->mgen);
			sgen0 = atomic_load(&fs->store_gen);
		}
		q.offset = coff;
		q.size = (uint32_t)clen;
		r = file_rpc(fs, &s, 1, M("Read"), &q.base, &wsbridge__v1__read_reply__descriptor,
			     &rep);
		read_mark(fs);
		if (r == 0 && rep->data.len > clen) {
			/* More than asked: pages past the chunk would go to
			 * the kernel (fuse_notify_store() grows i_size). */
			wsb_warn("agentd's Read reply has %zu bytes, %zu asked for: EIO",
				 rep->data.len, clen);
			r = -EIO;
		}
		if (r < 0) {
			reply_err(req, r);
			free_reply(rep);
			return;
		}
		/* Before the reply: the kernel's GETATTR follows it. */
		attr_keep(fs, ino, aver0, at0, rep->attr);
		skip = (size_t)((uint64_t)off - coff);
		n = rep->data.len > skip ? rep->data.len - skip : 0;
		if (n < size) /* the kernel cuts i_size there */
			node_ksize_lower(fs->nodes, ino, off + (off_t)n);
		fuse_reply_buf(req, (const char *)rep->data.data + skip, n < size ? n : size);
		if (chunk && rep->data.len > size) {
			struct wsfs_store *st = calloc(1, sizeof(*st));

			if (st) {
				*st = (struct wsfs_store){ .nodeid = ino, .off = coff,
							   .len = rep->data.len,
							   .skip_off = (uint64_t)off,
							   .skip_len = size, .seq = seq0,
							   .mgen = mgen0, .sgen = sgen0,
							   .sino = sino, .sident = sident,
							   .data = rep->data.data,
							   .owner = rep };
				wsfs_store_later(fs, st);
				rep = NULL;
			}
		}
		free_reply(rep);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = 0;
	while (got < size) {
		size_t want = size - got < CHUNK_MAX ? size - got : CHUNK_MAX;
		size_t n;

		q.offset = (uint64_t)off + got;
		q.size = (uint32_t)want;
		rep = NULL;
		r = file_rpc(fs, &s, 1, M("Read"), &q.base, &wsbridge__v1__read_reply__descriptor,
			     &rep);
		if (r < 0)
			break;
		n = rep->data.len < want ? rep->data.len : want;
		memcpy(buf + got, rep->data.data, n);
		got += n;
		if (n < want || got == size)
			attr_keep(fs, ino, aver0, at0, rep->attr); /* after the last */
		free_reply(rep);
		rep = NULL;
		if (n < want)
			break;
	}
	read_mark(fs);
	if (r < 0 && got == 0) {
		reply_err(req, r);
	} else {
		if (got < size)
			node_ksize_lower(fs->nodes, ino, off + (off_t)got);
		fuse_reply_buf(req, buf, got);
	}
	free_reply(rep);
	free(buf);
}

/*
 * A handle of @f's file without O_APPEND (opened once: from @f's own handle,
 * OpenRequest.reopen, which opens the same inode whether it has a name or
 * not; else, as from an agentd that has no reopen, by path, checked to be
 * the same server inode), for the kernel's writeback of mmap'ed pages
 * (FUSE_WRITE_CACHE, fi->writepage), which may pick any writable open file
 * of the inode: such a write has an offset and must not go to the end.
 * @failed: a handle agentd no longer knows, to be replaced. Returns 0 with
 * *ret, or -errno (-EIO when the file has no name or another inode).
 */
static int file_pos_handle(struct wsfs *fs, struct wsfs_file *f, uint64_t failed, uint64_t *ret)
{
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	char *path = NULL;
	size_t len;
	int r = 0;

	pthread_mutex_lock(&f->lock);
	if (f->sh_pos && f->sh_pos != failed)
		goto out;
	f->sh_pos = 0;
	if (!f->broken && f->gen == atomic_load(&fs->conn_gen)) {
		/* An unlinked file's mapped pages went nowhere (EIO) before. */
		q.reopen = f->sh;
		q.path = bin("\0", 1); /* ws_open(): names nothing */
		q.access = WSBRIDGE__V1__ACCESS__WRONLY;
		if (open_rpc(fs, &q, &rep) == 0) {
			f->sh_pos = rep->handle;
			goto out;
		}
		free_reply(rep);
		rep = NULL;
		q = (Wsbridge__V1__OpenRequest)WSBRIDGE__V1__OPEN_REQUEST__INIT;
	}
	r = path_of(fs, f->link.nodeid, &path, &len);
	if (r < 0) {
		r = -EIO;
		goto out;
	}
	q.path = bin(path, len);
	q.access = WSBRIDGE__V1__ACCESS__WRONLY;
	q.nofollow = true;
	r = open_rpc(fs, &q, &rep);
	if (r == -ENOENT || r == -ELOOP)
		r = -EIO;
	if (r == 0 && (!rep->attr || rep->attr->ino != f->ino ||
		       !node_same_ident(wsfs_attr_ident(rep->attr), f->ident))) {
		release_handle(fs, rep->handle);
		r = -EIO;
	}
	if (r == 0)
		f->sh_pos = rep->handle;
out:
	if (r == 0)
		*ret = f->sh_pos;
	pthread_mutex_unlock(&f->lock);
	free(path);
	free_reply(rep);
	return r;
}

/* One Write at an offset through file_pos_handle(); after EBADF up to twice
 * more, as file_rpc_ex() (file_park() may give the handle back twice). */
static int write_pos(struct wsfs *fs, struct wsfs_file *f, Wsbridge__V1__WriteRequest *q,
		     Wsbridge__V1__WriteReply **rep)
{
	uint64_t failed = 0;
	int r;

	for (int attempt = 0; attempt < 3; attempt++) {
		r = file_pos_handle(fs, f, failed, &q->handle);
		if (r < 0)
			return r;
		r = rpc(fs, M("Write"), &q->base, &wsbridge__v1__write_reply__descriptor, rep);
		if (r != -EBADF)
			return r;
		failed = q->handle;
	}
	return r;
}

/*
 * Send bytes [@off, @off + @size) of @buf, written through open file @f of
 * node @ino, to agentd: Write RPCs of up to CHUNK_MAX bytes each, with
 * @timeout_ms each. @behind: the kernel was told already (write-behind or
 * gathered): a failure goes to every handle of the file (wb_error()) and
 * its pages are dropped, and a short write is carried on. @writepage: the
 * kernel's writeback of a mapping (fi->writepage). @kill: a writer without
 * CAP_FSETID wrote some of it (FUSE_WRITE_KILL_SUIDGID): agentd clears the
 * set-ID bits first, and the kernel's attributes go when it did. Keeps what the replies
 * say (own_keep(), node_seen_*). @after: a SETATTR kept behind (taken,
 * counted in sab_n) for agentd to make after the last Write, or NULL; then
 * *@after_r is 0 or -errno if agentd made it or tried, 1 if not (the
 * caller sends it). Returns 0 or -errno; *@done: bytes agentd wrote. Any
 * FUSE request thread, or gb_main(); the caller has ordered it against
 * other writes (wb_begin() or wb_wait()).
 */
static int write_out(struct wsfs *fs, struct wsfs_file *f, fuse_ino_t ino, const char *buf,
		     size_t size, uint64_t off, bool behind, bool writepage, bool kill,
		     uint64_t timeout_ms, Wsbridge__V1__SetAttrRequest *after, int *after_r,
		     size_t *done_out)
{
	Wsbridge__V1__WriteRequest q = WSBRIDGE__V1__WRITE_REQUEST__INIT;
	struct hslot s = { f, &q.handle, true };
	uint64_t oseq0 = own_seq(fs), gen0 = atomic_load(&fs->mgen), gen;
	/* A SETATTR kept behind since the caller's drain (an mmap writeback
	 * holds no lock against one): this reply would lack it. One kept
	 * after gen0 moves mgen itself. @after counts until it is done. */
	unsigned sab0 = atomic_load(&fs->sab_n);
	bool after_done = false, keep, killed = false;
	size_t done = 0;
	struct stat st;
	bool have_st = false;
	char *path = NULL;
	size_t len = 0;
	int r = 0;

	if (after)
		*after_r = 1;
	/* Detached (unlinked) files have no path and no echo to expect. */
	if (path_of(fs, ino, &path, &len) == 0)
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
	while (done < size) {
		Wsbridge__V1__WriteReply *rep = NULL;
		size_t want = size - done < CHUNK_MAX ? size - done : CHUNK_MAX;
		size_t n;

		q.offset = off + done;
		q.data = bin(buf + done, want);
		q.kill_suidgid = kill;
		q.setattr_after = done + want == size ? after : NULL;
		if (writepage && f->append)
			r = write_pos(fs, f, &q, &rep);
		else
			r = file_rpc_ex(fs, &s, 1, M("Write"), &q.base,
					&wsbridge__v1__write_reply__descriptor, &rep, timeout_ms);
		if (r < 0)
			break;
		n = rep->written < want ? rep->written : want;
		done += n;
		killed = killed || rep->suidgid_killed;
		have_st = attr_to_stat(rep->attr, &st) == 0;
		/* A Write reply carries no identity (Attr.btime_ns,
		 * .generation): the handle's file's, so that the own record
		 * tells this file from another the pod puts on its inode
		 * number (watch.c self_attr). */
		if (have_st)
			st.st_dev = (dev_t)node_ident_fill(st_ident(&st), f->ident);
		if (q.setattr_after && rep->setattr_done) {
			int e = 0;

			if (rep->setattr_errno && rep->setattr_errno[0]) {
				e = wsb_errno_from_name(rep->setattr_errno);
				if (e == 0)
					e = EIO;
			}
			after_done = true;
			*after_r = -e;
		}
		free_reply(rep);
		/* Short: the caller learns the errno by writing the rest; a
		 * write-behind does that itself. */
		if (n < want && (!behind || n == 0))
			break;
	}
	if (behind && r == 0 && done < size)
		r = -EIO; /* agentd wrote nothing and gave no errno */
	gen = mutated(fs);
	if (path) {
		wsfs_self_end(fs, path, len, done > 0, have_st && done == size ? &st : NULL);
		free(path);
	}
	/* A change carried and failed may have been made in part: the reply,
	 * the fstat after the write, would lack that part. */
	keep = r == 0 && have_st && done == size &&
	       (after_done ? *after_r == 0 && sab0 == 1 : sab0 == 0);
	if (kill && have_st && done > 0 && kill_left(fs, f, ino, st.st_mode))
		killed = true, keep = false;
	/* The pod's kernel clears the bits itself for an agentd without
	 * CAP_FSETID (not root; gVisor), and its event is an echo of this
	 * write (the reply's attributes): the mode the kernel holds goes. */
	if (have_st && !killed) {
		struct stat told;

		killed = node_told_get(fs->nodes, ino, &told) && (told.st_mode & ~st.st_mode & 06000);
	}
	/* The kernel keeps its mode across a write (fs/fuse/file.c): it asks
	 * anew (attributes only, no page lock: safe inside a WRITE); what it
	 * was told goes with them (its GETATTR tells it again), or every
	 * later write would find the old bits there. */
	if (killed && fs->se) {
		(void)fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
		node_told_drop(fs->nodes, ino);
	}
	own_keep(fs, ino, keep ? &st : NULL, gen0, gen, oseq0);
	if ((f->direct_io && !writepage) || (behind && r < 0)) {
		/* Not through the kernel's pages (O_APPEND, file_opened()), or
		 * pages agentd lacks: the next open must not keep them. */
		node_seen_set(fs->nodes, ino, NULL);
	} else if (have_st && S_ISREG(st.st_mode)) {
		/* Our own write: the kernel's pages hold it (write-through).
		 * Writes in flight together may be answered in any order: the
		 * latest (mtime, size) is the file's. */
		struct node_seen now = seen_of(&st);

		if (behind)
			node_seen_advance(fs->nodes, ino, &now);
		else
			node_seen_set(fs->nodes, ino, &now);
	}
	if (behind && r < 0) {
		int e = errno_out(r, false);

		/* Every handle open on the file reports it, as every
		 * descriptor does after a failed writeback (errseq). */
		wb_error_set(&f->link, &e);
		node_fh_each(fs->nodes, ino, wb_error_set, &e);
		/* The kernel's pages hold bytes agentd has not got:
		 * descriptors open now must read what it has. */
		wsfs_inval_pages_later(fs, ino);
		wsb_warn("a write of %zu bytes at %ju, replied to before agentd answered, "
			 "failed: %s; each descriptor's next write, fsync or close reports it",
			 size, (uintmax_t)off, strerror(e));
	}
	*done_out = done;
	return r;
}

/* ---- write gathering ----
 *
 * tar, cp, compilers and editors write a small file in a few write(2)s of
 * 4-10 KiB (tar: one per 10 KiB record the file's bytes cross), each a
 * WRITE and, sent as it came, a round trip. A WRITE that write-behind
 * would take (above) and that is smaller than WSFS_GATHER_MAX is instead
 * copied into its handle's run when it goes on where the run ends (and
 * no other handle began a run of the file since), or starts a run if it
 * goes on where the handle's last write ended or is the handle's first,
 * and is replied to at once. A run goes to agentd as
 * one write behind (one Write RPC of its bytes) when:
 * - any request that waits for the writes before it (wb_wait_writes():
 *   all but a written-behind WRITE, a SETATTR kept behind and a GETATTR
 *   answered from the mount's own attributes) comes: FLUSH, so close(2);
 *   fsync; a SETATTR sent at once; a READ the kernel's pages lack;
 *   another open; any change of names; that request's thread sends it,
 *   and the request goes on once agentd has it;
 * - a WRITE of the same handle does not go on where the run ends, or
 *   would take it past WSFS_GATHER_MAX, or comes after another handle
 *   began a run of the file (the run is sent behind by that WRITE's
 *   thread, which starts the next run);
 * - it has waited cfg.gather_ns (-o gather_ms, default 5 ms; gb_main(): a
 *   writer that stops without closing, such as a log, reaches the pod
 *   within that);
 * - near WSFS_GATHER_TOTAL_MAX bytes allocated for runs in the mount
 *   (each takes 16 KiB at least), writes go as they come.
 * Runs of one file take their write-behind slots (wb_begin()) in the
 * order they began, and each holds only bytes written before the next
 * one began, so that where two handles wrote the same bytes the later
 * write wins in the pod, as it did on the host. A SETATTR kept behind that
 * sets mtime (utimensat(2), as tar -p and cp -a do after writing a file)
 * does not send the file's runs, nor do the GETATTRs and SETATTRs kept
 * behind after it (they tell the kernel the size the runs make: gb_attr();
 * any other mtime is agentd's to give); the file's last run carries the
 * change (WriteRequest.setattr_after). A run that fails is reported as a
 * failed write-behind (wb_error()). Every other process on the host reads
 * the bytes from the kernel's pages at once; the pod sees them by
 * close(2), fsync(2) or cfg.gather_ns later (README "Consistency").
 */

/* A run of gathered writes: bytes [off, off + len) of buf. */
struct wsfs_gather {
	TAILQ_ENTRY(wsfs_gather) entry; /* fs->gb_list, oldest first */
	struct wsfs_file *f;      /* referenced (node_fh_ref()) */
	fuse_ino_t id;            /* the nodeid the writes came for */
	uint64_t off;             /* file offset of buf[0], bytes */
	size_t len, cap;          /* bytes in buf, bytes allocated */
	char *buf;
	uint64_t seq;     /* fs->gb_seq when it began */
	int64_t born_ns;  /* wsfs_now_ns() when it began */
	bool sending;     /* a thread took it to send: no more bytes join it */
	bool begun;       /* ... and holds its write-behind slot */
	bool folded;      /* a change kept behind sets mtime after it (gb_fold()) */
	bool told;        /* the kernel was told the size it makes (gb_attr()) */
	bool kill;        /* a write in it asked to clear set-ID bits */
};

/* Whether run @g may take its write-behind slot now: every older run of
 * its file has taken one. Under gb_lock. */
static bool gb_ready(struct wsfs *fs, const struct wsfs_gather *g)
{
	const struct wsfs_gather *o;

	TAILQ_FOREACH(o, &fs->gb_list, entry) {
		if (o == g)
			return true;
		if (o->f->ino == g->f->ino && !o->begun)
			return false;
	}
	return true;
}

/* Whether run @g is the only one of its file listed. Under gb_lock. */
static bool gb_solo(struct wsfs *fs, const struct wsfs_gather *g)
{
	const struct wsfs_gather *o;

	TAILQ_FOREACH(o, &fs->gb_list, entry)
		if (o != g && o->f->ino == g->f->ino)
			return false;
	return true;
}

/*
 * Make *@st, the attributes of node @id as agentd last gave them, what
 * they are with its gathered runs written: the size they extend it to.
 * Their mtime is agentd's to give (the pod's clock), so only when it does
 * not matter: @mtime_set (the caller sets one) or every run is folded
 * (gb_fold(): a change kept behind sets one after them). False: not so,
 * or a run of it is being sent (its reply is what to wait for); the
 * caller sends them. Any FUSE request thread; takes gb_lock.
 */
static bool gb_attr(struct wsfs *fs, fuse_ino_t id, struct stat *st, bool mtime_set)
{
	struct wsfs_gather *g;
	off_t size = st->st_size;
	bool ok = true;

	if (atomic_load(&fs->gb_n) == 0)
		return true;
	pthread_mutex_lock(&fs->gb_lock);
	TAILQ_FOREACH(g, &fs->gb_list, entry) {
		if (g->id != id)
			continue;
		if (g->sending || (!g->folded && !mtime_set)) {
			ok = false;
			break;
		}
		if (g->off + g->len > (uint64_t)size)
			size = (off_t)(g->off + g->len);
	}
	if (ok) {
		TAILQ_FOREACH(g, &fs->gb_list, entry)
			if (g->id == id)
				g->told = true;
		st->st_size = size;
	}
	pthread_mutex_unlock(&fs->gb_lock);
	return ok;
}

/* A change kept behind for node @id sets its mtime after the node's
 * gathered runs (gb_attr()). Takes gb_lock. */
static void gb_fold(struct wsfs *fs, fuse_ino_t id)
{
	struct wsfs_gather *g;

	if (atomic_load(&fs->gb_n) == 0)
		return;
	pthread_mutex_lock(&fs->gb_lock);
	TAILQ_FOREACH(g, &fs->gb_list, entry)
		if (g->id == id)
			g->folded = true;
	pthread_mutex_unlock(&fs->gb_lock);
}

/* Whether run @g is the newest of its file: a write may join it only
 * then, so that every byte of a run was written before any byte of a
 * newer one of the file. Under gb_lock. */
static bool gb_newest(const struct wsfs_gather *g)
{
	const struct wsfs_gather *o = g;

	while ((o = TAILQ_NEXT(o, entry)))
		if (o->f->ino == g->f->ino)
			return false;
	return true;
}

/*
 * The oldest run begun before number @upto that nobody is sending and that
 * may be sent now (gb_ready()), or NULL; *@wait: some such run is being
 * sent, or waits for an older one of its file. Under gb_lock.
 */
static struct wsfs_gather *gb_pick(struct wsfs *fs, uint64_t upto, bool *wait)
{
	struct wsfs_gather *g;

	*wait = false;
	TAILQ_FOREACH(g, &fs->gb_list, entry) {
		if (g->seq >= upto)
			break;
		if (!g->sending && gb_ready(fs, g))
			return g;
		*wait = true;
	}
	return NULL;
}

/* Take run @g to send it: no more bytes join it. Under gb_lock. */
static void gb_take(struct wsfs_gather *g)
{
	g->sending = true;
	if (g->f->g == g)
		g->f->g = NULL;
}

/*
 * Send run @g (gb_take()n) behind: take a write-behind slot (wb_begin(): in
 * order with writes in flight that overlap it), reply @size to @req if not
 * NULL (a WRITE that closed the run waits for the slot as one sent behind
 * does), send it, unlist and free it. Call without gb_lock. Any thread.
 */
static void gb_send(struct wsfs *fs, struct wsfs_gather *g, fuse_req_t req, size_t size)
{
	struct sab_out so, *after = NULL;
	int after_r = 1;
	uint64_t wseq;
	size_t done;
	bool solo;

	wseq = wb_begin(fs, g->f->ino, g->off, g->off + g->len);
	pthread_mutex_lock(&fs->gb_lock);
	g->begun = true;
	solo = gb_solo(fs, g);
	if (fs->gb_waiters)
		pthread_cond_broadcast(&fs->gb_cond);
	pthread_mutex_unlock(&fs->gb_lock);
	if (req)
		fuse_reply_write(req, size);
	/* A SETATTR kept behind on the file after this run began came after
	 * every byte of its runs (a WRITE after one sends it first:
	 * sab_drain()), and no other write of the file is in flight (its
	 * SETATTR waited for those): the file's last run carries it, one
	 * round trip for both. */
	if (solo && atomic_load(&fs->sab_n) > 0)
		after = sab_take_node(fs, g->id, g->seq, &so);
	(void)write_out(fs, g->f, g->id, g->buf, g->len, g->off, true, false, g->kill,
			wb_timeout_ms(fs), after ? &after->q : NULL, &after_r, &done);
	wb_end(fs, wseq);
	if (after) {
		if (after_r <= 0)
			sab_result(fs, after, after_r);
		else
			sab_send(fs, after); /* agentd did not: an older one */
		sab_untake(fs, after);
	} else if (g->told && fs->se) {
		/* The kernel holds the size gb_attr() gave, with the mtime
		 * before the run, for the attribute timeout: it asks again
		 * (attributes only, no page lock: safe here, as
		 * sab_result()'s). */
		(void)fuse_lowlevel_notify_inval_inode(fs->se, g->id, -1, 0);
	}

	pthread_mutex_lock(&fs->gb_lock);
	TAILQ_REMOVE(&fs->gb_list, g, entry);
	fs->gb_bytes -= g->cap;
	atomic_fetch_sub(&fs->gb_n, 1);
	if (fs->gb_waiters)
		pthread_cond_broadcast(&fs->gb_cond);
	pthread_mutex_unlock(&fs->gb_lock);
	file_put(fs, g->f);
	free(g->buf);
	free(g);
}

/*
 * Send every run gathered before this call and wait for those other
 * threads are sending: on return agentd has (or failed) every gathered
 * write replied to before it. Returns the number of the first run it did
 * not wait for (every run numbered below is done). Any thread (gb_main()
 * too, through sab_drain(), sending no run itself then); returns at once
 * with none.
 */
static uint64_t gb_flush(struct wsfs *fs)
{
	/* Read before the count: a run begun after it is not waited for. */
	uint64_t upto = atomic_load(&fs->gb_seq);

	if (atomic_load(&fs->gb_n) == 0)
		return upto;
	pthread_mutex_lock(&fs->gb_lock);
	upto = atomic_load(&fs->gb_seq);
	for (;;) {
		bool wait;
		struct wsfs_gather *g = gb_pick(fs, upto, &wait);

		if (g) {
			gb_take(g);
			pthread_mutex_unlock(&fs->gb_lock);
			gb_send(fs, g, NULL, 0);
			pthread_mutex_lock(&fs->gb_lock);
		} else if (wait) {
			fs->gb_waiters++;
			pthread_cond_wait(&fs->gb_cond, &fs->gb_lock);
			fs->gb_waiters--;
		} else {
			break;
		}
	}
	pthread_mutex_unlock(&fs->gb_lock);
	return upto;
}

/*
 * How long after the newest run began gb_main() keeps looking for runs
 * every cfg.gather_ns rather than wait for gb_add() to wake it,
 * nanoseconds. Most runs are sent by the close that ends them, well
 * before they are due: a wake-up per run (and two more as another
 * thread's send took its slot and ended) was three context switches per
 * small file written, a good part of what `tar -x` of small files costs
 * on two busy cores; a look every 5 ms while files are written costs few.
 */
#define GB_WATCH_NS (50 * 1000 * 1000)

/*
 * The thread that sends runs that waited cfg.gather_ns
 * (wsfs_gather_start()) and handles queued for release that waited
 * rel_ns() ("Releases"); it ends at gb_stop (wsfs_send_behind(), which
 * sends what is left). It sleeps until the oldest run it may send is due
 * (a younger run is due later, and a run another thread takes is that
 * thread's to send); with none, it looks again cfg.gather_ns later while
 * runs came in the last GB_WATCH_NS (a run born meanwhile is due no
 * sooner than that), and otherwise waits to be woken by gb_add() or
 * release_handle() (when what they queue is due before gb_wake_ns). Only
 * a run that waits for an older one of its file to take its slot makes
 * it wait for the sends of others (gb_cond).
 */
static void *gb_main(void *arg)
{
	struct wsfs *fs = arg;

	pthread_mutex_lock(&fs->gb_lock);
	while (!fs->gb_stop) {
		bool wait, held = false;
		struct wsfs_gather *g = gb_pick(fs, UINT64_MAX, &wait), *o;
		int64_t now = wsfs_now_ns(), wake = INT64_MAX, sab_due;
		int64_t pins_due = node_pins_due(fs->nodes);
		struct timespec until;

		if (fs->rel_n && now - fs->rel_born_ns >= rel_ns(fs)) {
			pthread_mutex_unlock(&fs->gb_lock);
			(void)release_flush(fs);
			pthread_mutex_lock(&fs->gb_lock);
			continue;
		}
		if (g && now - g->born_ns >= fs->cfg.gather_ns) {
			gb_take(g);
			pthread_mutex_unlock(&fs->gb_lock);
			gb_send(fs, g, NULL, 0);
			pthread_mutex_lock(&fs->gb_lock);
			continue;
		}
		/* Changes kept behind go within sab_hold_ns() too, so that a
		 * file the host keeps open (a log) does not hold its chmod from
		 * the pod, nor send it over a change the pod made later. */
		sab_due = atomic_load(&fs->sab_n) > 0
				  ? atomic_load(&fs->sab_born_ns) + sab_hold_ns(fs)
				  : INT64_MAX;
		if (now >= sab_due) {
			pthread_mutex_unlock(&fs->gb_lock);
			sab_drain(fs);
			pthread_mutex_lock(&fs->gb_lock);
			continue;
		}
		/* Old pins go on an idle mount too (no close nor FORGET to
		 * release them): each holds its file, maybe unlinked, open in
		 * agentd. */
		if (now >= pins_due) {
			pthread_mutex_unlock(&fs->gb_lock);
			pins_release(fs);
			pthread_mutex_lock(&fs->gb_lock);
			continue;
		}
		if (!g && wait) {
			TAILQ_FOREACH(o, &fs->gb_list, entry) {
				if (!o->sending) {
					held = true;
					break;
				}
			}
		}
		if (held && !fs->rel_n) {
			/* Woken as the older run takes its slot; release_handle()
			 * does not wake this wait, so it looks again within
			 * rel_ns() for a handle queued meanwhile. */
			until = wsb_deadline_ns(CLOCK_MONOTONIC, rel_ns(fs));
			fs->gb_waiters++;
			pthread_cond_timedwait(&fs->gb_cond, &fs->gb_lock, &until);
			fs->gb_waiters--;
			continue;
		}
		if (g)
			wake = g->born_ns + fs->cfg.gather_ns;
		else if (held || now - fs->gb_last_ns < GB_WATCH_NS)
			wake = now + fs->cfg.gather_ns;
		if (fs->rel_n && fs->rel_born_ns + rel_ns(fs) < wake)
			wake = fs->rel_born_ns + rel_ns(fs);
		if (sab_due < wake)
			wake = sab_due;
		if (pins_due < wake)
			wake = pins_due;
		fs->gb_wake_ns = wake;
		if (wake == INT64_MAX) {
			pthread_cond_wait(&fs->gb_main_cond, &fs->gb_lock);
		} else {
			until = wsb_deadline_ns(CLOCK_MONOTONIC, wake - now);
			pthread_cond_timedwait(&fs->gb_main_cond, &fs->gb_lock, &until);
		}
		fs->gb_wake_ns = 0; /* awake: it looks at everything next */
	}
	pthread_mutex_unlock(&fs->gb_lock);
	return NULL;
}

int wsfs_gather_start(struct wsfs *fs)
{
	int r;

	if (fs->cfg.write_behind == 0 || fs->cfg.gather_ns <= 0)
		return 0;
	r = pthread_create(&fs->gb_thread, NULL, gb_main, fs);
	fs->gb_started = r == 0;
	return -r;
}

void wsfs_send_behind(struct wsfs *fs)
{
	/* The mount is gone: a long call (a Release of the gathering thread,
	 * say) that agentd has not answered must not hold the exit for an
	 * hour; what the session holds, agentd frees when it ends. */
	if (fs->client)
		wsc_cut_long(fs->client);
	pthread_mutex_lock(&fs->gb_lock);
	fs->gb_stop = true;
	pthread_cond_broadcast(&fs->gb_cond);
	pthread_cond_broadcast(&fs->gb_main_cond);
	pthread_mutex_unlock(&fs->gb_lock);
	if (fs->gb_started)
		pthread_join(fs->gb_thread, NULL);
	fs->gb_started = false;
	if (fs->client) {
		gb_flush(fs);
		sab_drain(fs);
		(void)release_flush(fs);
	}
}

/*
 * Gather a WRITE of @size bytes of @buf at @off through open file @f of node
 * @id (one write-behind may take: the caller checked), if it is small and
 * goes on where @f's run ends, or @may_start one (it goes on where @f's last
 * write ended, or is its first). True: gathered, reply to it; then *@full
 * is a run this WRITE closed, for the caller to gb_send() (which replies
 * once it has a slot), or NULL. False: the caller sends it as it would
 * have, after gb_flush() (@f's run, if any, goes first). Any FUSE request
 * thread.
 */
static bool gb_add(struct wsfs *fs, struct wsfs_file *f, fuse_ino_t id, const char *buf,
		   size_t size, uint64_t off, bool may_start, bool kill, struct wsfs_gather **full)
{
	struct wsfs_gather *g;
	bool kick;

	*full = NULL;
	if (size == 0 || size >= WSFS_GATHER_MAX || !fs->gb_started)
		return false;
	pthread_mutex_lock(&fs->gb_lock);
	g = f->g;
	if (fs->gb_stop || fs->gb_bytes + WSFS_GATHER_MAX > WSFS_GATHER_TOTAL_MAX ||
	    (g ? g->off + g->len != off : !may_start))
		goto no;
	if (g && g->len + size <= WSFS_GATHER_MAX && gb_newest(g)) {
		if (g->len + size > g->cap) {
			size_t cap = g->cap * 2;
			char *nb;

			while (cap < g->len + size)
				cap *= 2;
			if (cap > WSFS_GATHER_MAX)
				cap = WSFS_GATHER_MAX;
			nb = realloc(g->buf, cap);
			if (!nb)
				goto no;
			g->buf = nb;
			fs->gb_bytes += cap - g->cap;
			g->cap = cap;
		}
		memcpy(g->buf + g->len, buf, size);
		g->len += size;
		g->folded = false;
		g->kill = g->kill || kill;
		pthread_mutex_unlock(&fs->gb_lock);
		return true;
	}
	/* @g is full, or another handle began a run of the file since: it
	 * goes now, unless an older run of the file has to go first (the
	 * caller's gb_flush() sends both in order). */
	if (g && !gb_ready(fs, g))
		goto no;
	g = calloc(1, sizeof(*g));
	if (!g)
		goto no;
	g->cap = size < 16384 ? 16384 : size;
	g->buf = malloc(g->cap);
	if (!g->buf) {
		free(g);
		goto no;
	}
	memcpy(g->buf, buf, size);
	g->len = size;
	g->off = off;
	g->kill = kill;
	g->id = id;
	g->f = f;
	node_fh_ref(fs->nodes, &f->link);
	g->seq = atomic_fetch_add(&fs->gb_seq, 1);
	g->born_ns = wsfs_now_ns();
	fs->gb_last_ns = g->born_ns;
	if (f->g) {
		*full = f->g;
		gb_take(*full);
	}
	f->g = g;
	TAILQ_INSERT_TAIL(&fs->gb_list, g, entry);
	fs->gb_bytes += g->cap;
	atomic_fetch_add(&fs->gb_n, 1);
	kick = g->born_ns + fs->cfg.gather_ns < fs->gb_wake_ns;
	pthread_mutex_unlock(&fs->gb_lock);
	if (kick)
		pthread_cond_signal(&fs->gb_main_cond);
	return true;
no:
	pthread_mutex_unlock(&fs->gb_lock);
	return false;
}

static void ws_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	struct wsfs_file *f = file_of(fi);
	/* Write-behind (above): libfuse keeps @buf until this returns. */
	bool behind = fs->cfg.write_behind > 0 && !fi->writepage && !f->append && !f->direct_io;
	bool kill = req_kill_suidgid && !fi->writepage;
	bool sequential, first;
	uint32_t timeout_ms = fs->cfg.rpc_timeout_ms;
	uint64_t wseq = 0;
	size_t done = 0;
	int r;

	if (off < 0 || (uint64_t)off > UINT64_MAX - size) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* A SETATTR kept behind goes first (with the gathered writes before
	 * it): a write after utimensat(2) sets mtime anew, and one after chmod
	 * u+s clears the bit. */
	sab_drain(fs);
	if (!fi->writepage) {
		int e = wb_error(f, WB_WRITE);

		if (e) {
			fuse_reply_err(req, e);
			return;
		}
	}
	/* Only a write that goes on where the handle's last one ended goes
	 * behind: a file written in one write(2) and closed would gain
	 * nothing, and its close would wait for the write on one more thread
	 * hand-off. A small one is gathered instead (above), the first too:
	 * the close's thread sends it. */
	pthread_mutex_lock(&f->lock);
	first = !f->wrote;
	sequential = f->wrote && f->write_end == (uint64_t)off;
	f->wrote = true;
	f->write_end = (uint64_t)off + size;
	pthread_mutex_unlock(&f->lock);
	if (first)
		node_note(fs->nodes, ino, 0, true); /* getattr_reply() */
	if (behind) {
		struct wsfs_gather *full;

		if (gb_add(fs, f, ino, buf, size, (uint64_t)off, sequential || first, kill, &full)) {
			/* The reply says it is written: the kernel's i_size
			 * covers it then. */
			node_told_grow(fs->nodes, ino, off + (off_t)size);
			if (full)
				gb_send(fs, full, req, size);
			else
				fuse_reply_write(req, size);
			return;
		}
		/* This handle's run, if any, goes before this write. */
		gb_flush(fs);
	}
	behind = behind && sequential;
	if (behind) {
		wseq = wb_begin(fs, f->ino, (uint64_t)off, (uint64_t)off + size);
		timeout_ms = wb_timeout_ms(fs);
		node_told_grow(fs->nodes, ino, off + (off_t)size);
		fuse_reply_write(req, size);
		req = NULL;
	} else {
		wb_wait(fs);
	}
	r = write_out(fs, f, ino, buf, size, (uint64_t)off, behind, fi->writepage, kill,
		      timeout_ms, NULL, NULL, &done);
	if (behind) {
		wb_end(fs, wseq);
	} else if (r < 0 && done == 0) {
		reply_err(req, r);
	} else {
		node_told_grow(fs->nodes, ino, off + (off_t)done);
		fuse_reply_write(req, done);
	}
}

static void ws_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	struct wsfs_file *f = file_of(fi);

	/* Nothing is buffered here once the writes in flight have ended;
	 * close(2) reports the first that failed. */
	(void)ino;
	sab_closing(fs, f);
	wb_wait(fs);
	if (f)
		file_park(fs, f); /* "Releases": nothing left writing the file */
	fuse_reply_err(req, f ? wb_error(f, WB_FLUSH) : 0);
}

static void ws_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	struct wsfs_file *f = file_of(fi);

	char *path = NULL;
	size_t len = 0;

	sab_closing(fs, f);
	wb_wait(fs); /* before the Close, and before @f goes */
	fuse_reply_err(req, 0);
	if (!f)
		return;
	/* Closing a writable handle is an IN_CLOSE_WRITE (CHANGED) echo. */
	if (f->access != WSBRIDGE__V1__ACCESS__RDONLY && path_of(fs, ino, &path, &len) == 0)
		wsfs_self_begin(fs, path, len, WSFS_SELF_CHANGED);
	file_put(fs, f);
	if (path) {
		wsfs_self_end(fs, path, len, true, NULL);
		free(path);
	}
}

static void ws_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__FsyncRequest q = WSBRIDGE__V1__FSYNC_REQUEST__INIT;
	struct hslot s = { file_of(fi), &q.handle };
	int r, e;

	(void)ino;
	wb_wait(fs);
	q.datasync = datasync != 0;
	r = file_rpc_long(fs, &s, 1, M("Fsync"), &q.base, &wsbridge__v1__empty__descriptor, NULL);
	e = s.f ? wb_error(s.f, WB_FSYNC) : 0;
	fuse_reply_err(req, e ? e : r < 0 ? errno_out(r, false) : 0);
}

/* ---- directories ---- */

static void dir_clear(struct wsfs_dir *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->ents[i].name);
	d->n = 0;
	d->have = false;
}

/* dir_clear(), and give back the array too. */
static void dir_free(struct wsfs_dir *d)
{
	dir_clear(d);
	free(d->ents);
	d->ents = NULL;
	d->cap = 0;
}

static int dirent_cmp(const void *pa, const void *pb)
{
	const struct wsfs_dirent *a = pa, *b = pb;
	int c;

	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);
	if (c)
		return c;
	return a->len < b->len ? -1 : a->len > b->len;
}

/*
 * Put @d's entries in hash order (node_dir_hash(), then the name's bytes),
 * keep one entry of a name listed twice (moved between two ReadDir pages;
 * either one's attributes were the name's during the listing), and give
 * each its offset (node_dir_offs()). Returns 0 or -ENOMEM.
 */
static int dir_sort(struct wsfs *fs, struct wsfs_dir *d)
{
	uint64_t *offs;
	size_t k = 0;

	if (d->n == 0)
		return 0; /* ents may be NULL, which qsort(3) does not take */
	for (size_t i = 0; i < d->n; i++)
		d->ents[i].off = node_dir_hash(fs->nodes, d->ents[i].name, d->ents[i].len);
	qsort(d->ents, d->n, sizeof(*d->ents), dirent_cmp);
	for (size_t i = 0; i < d->n; i++) {
		if (k > 0 && dirent_cmp(&d->ents[k - 1], &d->ents[i]) == 0) {
			free(d->ents[k - 1].name);
			d->ents[k - 1] = d->ents[i];
			continue;
		}
		d->ents[k++] = d->ents[i];
	}
	d->n = k;
	offs = malloc(k * sizeof(*offs));
	if (!offs)
		return -ENOMEM;
	for (size_t i = 0; i < k; i++)
		offs[i] = d->ents[i].off;
	node_dir_offs(offs, k);
	for (size_t i = 0; i < k; i++)
		d->ents[i].off = offs[i];
	free(offs);
	return 0;
}

/* The index of @d's first entry whose offset is above @off. */
static size_t dir_find(const struct wsfs_dir *d, uint64_t off)
{
	size_t lo = 0, hi = d->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->ents[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- prefetched listings ---- */

/* A whole directory listing that a ReadDir of an ancestor brought along. */
struct wsfs_pf {
	char *path; /* as path_of() gives it */
	size_t len;
	uint64_t seq;  /* inval_seq when fetched */
	uint64_t mgen; /* mgen when fetched */
	int64_t at_ns; /* CLOCK_MONOTONIC, ns: when the call that fetched it began */
	struct wsfs_dirent *ents;
	size_t n;
	bool has_st;     /* st holds the directory's own attributes */
	struct stat st;  /* DirListing.attr: after it was listed */
};

static void dirents_free(struct wsfs_dirent *ents, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

static void pf_free(struct wsfs_pf *p)
{
	if (p) {
		free(p->path);
		dirents_free(p->ents, p->n);
		free(p);
	}
}

/*
 * Keep listing @p (the table owns it from now on), fetched by a call begun
 * at @at_ns (CLOCK_MONOTONIC, ns: its age counts from then, as the
 * caches' do) at inval_seq @seq and mgen @mgen, in place of an older
 * listing of the same path, else of the oldest kept one; and then the
 * oldest others go while all hold over WSFS_PF_ENTS entries.
 */
static void pf_keep(struct wsfs *fs, struct wsfs_pf *p, uint64_t seq, uint64_t mgen,
		    int64_t at_ns)
{
	size_t slot;

	p->seq = seq;
	p->mgen = mgen;
	p->at_ns = at_ns;
	pthread_mutex_lock(&fs->pf_lock);
	slot = fs->pf_next;
	for (size_t k = 0; k < WSFS_PF_DIRS; k++) {
		struct wsfs_pf *o = fs->pf[k];

		if (o && o->len == p->len && memcmp(o->path, p->path, p->len) == 0) {
			slot = k;
			break;
		}
	}
	if (slot == fs->pf_next)
		fs->pf_next = (fs->pf_next + 1) % WSFS_PF_DIRS;
	if (fs->pf[slot])
		fs->pf_ents -= fs->pf[slot]->n;
	pf_free(fs->pf[slot]);
	fs->pf[slot] = p;
	fs->pf_ents += p->n;
	for (size_t i = 0, k = fs->pf_next; fs->pf_ents > WSFS_PF_ENTS && i < WSFS_PF_DIRS;
	     i++, k = (k + 1) % WSFS_PF_DIRS) {
		if (k != slot && fs->pf[k]) {
			fs->pf_ents -= fs->pf[k]->n;
			pf_free(fs->pf[k]);
			fs->pf[k] = NULL;
		}
	}
	pthread_mutex_unlock(&fs->pf_lock);
}

/*
 * Append the usable entries of @des (names valid as node.h has them, with
 * attributes) to @ents (*@n of *@cap used), stamped with @seq; *@all says
 * whether every entry was. Returns 0, -EIO (too many entries) or -ENOMEM.
 */
static int dirents_add(struct wsfs_dirent **ents, size_t *n, size_t *cap,
		       Wsbridge__V1__DirEntry **des, size_t n_des, uint64_t seq, bool *all)
{
	*all = true;
	if (n_des > READDIR_PAGE * 4)
		return -EIO;
	if (*cap < *n + n_des) {
		size_t ncap = *n + n_des;
		struct wsfs_dirent *a = realloc(*ents, ncap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		*ents = a;
		*cap = ncap;
	}
	for (size_t i = 0; i < n_des; i++) {
		Wsbridge__V1__DirEntry *de = des[i];
		struct wsfs_dirent *e = &(*ents)[*n];

		/* Names with '/' or NUL, ".", "..": skipped (node.h); so are
		 * entries that vanished between readdir and lstat. */
		if (!de || !node_name_ok((const char *)de->name.data, de->name.len) ||
		    attr_to_stat(de->attr, &e->st) < 0) {
			*all = false;
			continue;
		}
		e->name = malloc(de->name.len + 1);
		if (!e->name)
			return -ENOMEM;
		memcpy(e->name, de->name.data, de->name.len);
		e->name[de->name.len] = '\0';
		e->len = de->name.len;
		e->seq = seq;
		(*n)++;
	}
	return 0;
}

/*
 * Keep the prefetched listings of @rep for the opendir that may follow;
 * fetched by a call begun at @at_ns at inval_seq @seq and mgen @mgen
 * (pf_keep()), which asked for @max entries of them (ReadDirRequest
 * prefetch). Replaces an older listing of the same path, else the oldest
 * kept one. A reply with more than asked keeps none.
 */
static void pf_put_all(struct wsfs *fs, const Wsbridge__V1__ReadDirReply *rep, size_t max,
		       uint64_t seq, uint64_t mgen, int64_t at_ns)
{
	size_t total = 0;

	/* At most the server's cap per reply (several replies' worth stay:
	 * WSFS_PF_DIRS listings, the oldest replaced first). */
	if (rep->n_subdirs > 512)
		return;
	for (size_t i = 0; i < rep->n_subdirs; i++)
		total += rep->subdirs[i] ? rep->subdirs[i]->n_entries : 0;
	if (total > max) {
		wsb_warn("agentd's ReadDir reply brings %zu entries of subdirectories, %zu asked "
			 "for: none kept", total, max);
		return;
	}
	for (size_t i = 0; i < rep->n_subdirs; i++) {
		const Wsbridge__V1__DirListing *dl = rep->subdirs[i];
		struct wsfs_pf *p;
		size_t cap = 0;
		bool all;

		if (!dl || dl->path.len == 0 || memchr(dl->path.data, '\0', dl->path.len))
			continue;
		p = calloc(1, sizeof(*p));
		if (!p || !(p->path = malloc(dl->path.len + 1)) ||
		    dirents_add(&p->ents, &p->n, &cap, dl->entries, dl->n_entries, seq, &all) < 0) {
			pf_free(p);
			return;
		}
		if (!all) {
			/* Not the whole listing: list it when asked. */
			pf_free(p);
			continue;
		}
		memcpy(p->path, dl->path.data, dl->path.len);
		p->path[dl->path.len] = '\0';
		p->len = dl->path.len;
		p->has_st = dl->attr && attr_to_stat(dl->attr, &p->st) == 0 &&
			    S_ISDIR(p->st.st_mode);
		pf_keep(fs, p, seq, mgen, at_ns);
	}
}

/*
 * Keep a copy of @d, the whole listing of @path (@len bytes) that this
 * mount has just fetched with calls begun at @at_ns and later, at inval_seq
 * @seq and mgen @mgen, for the next opendir of it (pf_take()'s rules):
 * rm(1) and fts(3) open a directory, read a page of it, and open it again
 * to read it all, and the kernel's cache of the listing is whole only once
 * a reader reached its end. Out of memory keeps nothing. For listings of at
 * most READDIR_PAGE entries (about 200 bytes each), as ReadDir's
 * prefetched ones.
 */
static void pf_put_listing(struct wsfs *fs, const char *path, size_t len,
			   const struct wsfs_dir *d, uint64_t seq, uint64_t mgen, int64_t at_ns)
{
	struct wsfs_pf *p = calloc(1, sizeof(*p));

	if (!p || !(p->path = malloc(len + 1)) ||
	    (d->n && !(p->ents = calloc(d->n, sizeof(*p->ents))))) {
		pf_free(p);
		return;
	}
	for (; p->n < d->n; p->n++) {
		const struct wsfs_dirent *e = &d->ents[p->n];

		p->ents[p->n] = *e;
		p->ents[p->n].name = malloc(e->len + 1);
		if (!p->ents[p->n].name) {
			pf_free(p);
			return;
		}
		memcpy(p->ents[p->n].name, e->name, e->len + 1);
	}
	memcpy(p->path, path, len);
	p->path[len] = '\0';
	p->len = len;
	pf_keep(fs, p, seq, mgen, at_ns);
}

/*
 * Take the prefetched listing of @path, if one is kept and nothing was
 * invalidated (the watch reports the pod's changes) nor changed through
 * this mount (mgen) since it was fetched: it is still the directory's
 * listing. Returns it (pf_free() it) or NULL.
 */
static struct wsfs_pf *pf_take(struct wsfs *fs, const char *path, size_t len)
{
	struct wsfs_pf *p = NULL;

	pthread_mutex_lock(&fs->pf_lock);
	for (size_t k = 0; k < WSFS_PF_DIRS; k++) {
		struct wsfs_pf *o = fs->pf[k];

		if (o && o->len == len && memcmp(o->path, path, len) == 0) {
			fs->pf[k] = NULL;
			fs->pf_ents -= o->n;
			p = o;
			break;
		}
	}
	pthread_mutex_unlock(&fs->pf_lock);
	/* Also no older than the caches' watch_timeout: a change nobody
	 * reported (a writer inotify cannot see) shows in bounded time. */
	if (p && (p->seq != seq_now(fs) || p->mgen != atomic_load(&fs->mgen) ||
		  !atomic_load(&fs->watch_live) ||
		  !still_young(fs, p->at_ns))) {
		pf_free(p);
		p = NULL;
	}
	return p;
}

/*
 * @ino's listing in @d is whole and was fetched at inval_seq @seq and mgen
 * @mgen: its names are known in full (node.h node_known_*), unless
 * something was invalidated or changed through this mount since.
 */
static void known_from_listing(struct wsfs *fs, fuse_ino_t ino, const struct wsfs_dir *d,
			       uint64_t seq, uint64_t mgen)
{
	if (fs->cfg.watch_timeout <= 0 || !atomic_load(&fs->watch_live) ||
	    node_known_begin(fs->nodes, ino, &fs->inval_seq, seq) < 0)
		return;
	for (size_t i = 0; i < d->n; i++)
		node_known_add(fs->nodes, ino, d->ents[i].name, d->ents[i].len);
	/* An own change since the listing was fetched may be missing from it;
	 * one from now on updates the set (known_update: mgen, then add). */
	if (atomic_load(&fs->mgen) != mgen)
		node_known_drop(fs->nodes, ino);
}

/*
 * List directory @ino whole into @d (what it held is dropped), sorted by
 * offset (dir_sort()): the offsets that stay valid while the pod changes
 * the directory order the names, so the whole listing is read before its
 * first entry is served, as sshfs does. Memory: the names and their
 * struct stat, about 200 bytes an entry. Returns 0 or -errno (-ENOENT for
 * a removed directory, as getdents(2) on one; -EFBIG past the
 * max_dir_entries option).
 */
static int dir_load(struct wsfs *fs, fuse_ino_t ino, struct wsfs_dir *d)
{
	Wsbridge__V1__ReadDirRequest q = WSBRIDGE__V1__READ_DIR_REQUEST__INIT;
	uint64_t seq0 = seq_now(fs), mgen0 = atomic_load(&fs->mgen);
	/* A prefetched listing is taken only while mgen has not moved (no own
	 * change ended since it was fetched): this one stands for it too. */
	uint64_t ngen0 = node_names_gen(fs->nodes, ino);
	bool live = fs->cfg.watch_timeout > 0 && atomic_load(&fs->watch_live);
	bool usable = true, eof = false;
	size_t max = fs->cfg.max_dir_entries ? fs->cfg.max_dir_entries : WSFS_MAX_DIR_ENTRIES_DEFAULT;
	/* Entries agentd sent, kept or not, and a cookie to find a cycle by
	 * (Brent's: the cookie saved at every power of two pages). */
	size_t received = 0, pages = 0, power = 1;
	int64_t saved = INT64_MIN;
	struct wsfs_pf *p;
	int64_t cookie = 0, at0 = 0, at_first = 0;
	char *path = NULL;
	size_t len;
	bool fetched = false, self = false;
	struct stat self_st;
	int r;

	dir_clear(d);
	d->aver = node_attr_ver(fs->nodes, ino);
	d->clock = node_attr_clock(fs->nodes);
	r = path_of(fs, ino, &path, &len);
	if (r == -ESTALE)
		r = -ENOENT; /* a removed directory */
	if (r < 0)
		return r;
	p = pf_take(fs, path, len);
	if (p) {
		/* Listed along with an ancestor: no round trip. */
		dirents_free(d->ents, d->n);
		d->ents = p->ents;
		d->n = d->cap = p->n;
		p->ents = NULL;
		p->n = 0;
		seq0 = p->seq;
		mgen0 = p->mgen;
		/* Its own attributes, as prefetched with it (nothing was
		 * reported or changed since, or pf_take() would not give it). */
		self = p->has_st;
		if (self) {
			self_st = p->st;
			at0 = p->at_ns;
		}
		pf_free(p);
		eof = true;
	} else {
		fetched = true;
	}
	q.path = bin(path, len);
	q.max_entries = READDIR_PAGE;
	while (!eof) {
		Wsbridge__V1__ReadDirReply *rep = NULL;
		bool all;

		q.offset = cookie;
		/* Bring the subdirectories' listings along, for find, ls -R
		 * and include searches: usable only while the watch reports
		 * changes. */
		q.prefetch = cookie == 0 && live ? READDIR_PREFETCH : 0;
		/* Not while this mount changes files (rm -rf, tar -x): an own
		 * change since the last prefetch would have its listings
		 * dropped unused (pf_take()), each an lstat per entry in
		 * agentd. */
		if (q.prefetch && atomic_exchange(&fs->pf_mgen, mgen0) != mgen0)
			q.prefetch = 0;
		at0 = wsfs_now_ns();
		if (cookie == 0)
			at_first = at0;
		r = rpc(fs, M("ReadDir"), &q.base, &wsbridge__v1__read_dir_reply__descriptor, &rep);
		if (r < 0)
			break;
		/* The directory's own attributes after this page (an agentd
		 * before ReadDirReply.attr sends none). */
		self = rep->attr && attr_to_stat(rep->attr, &self_st) == 0 &&
		       S_ISDIR(self_st.st_mode);
		r = dirents_add(&d->ents, &d->n, &d->cap, rep->entries, rep->n_entries, seq0, &all);
		usable = usable && all;
		if (r == 0 && live && cookie == 0 && q.prefetch)
			pf_put_all(fs, rep, q.prefetch, seq0, mgen0, at0);
		received += rep->n_entries;
		if (rep->n_entries == 0 || rep->eof) {
			eof = true;
		} else {
			int64_t next = rep->entries[rep->n_entries - 1]->next_offset;

			/* A cookie that does not move would list forever, and
			 * so would cookies that come round again (a broken or
			 * hostile server: each page is cheap, no deadline
			 * ends the loop, and the kernel cannot interrupt it). */
			eof = next == cookie;
			if (!eof && next == saved) {
				wsb_warn("listing of '%s': agentd's directory offsets come round "
					 "again; the listing fails", path[0] ? path : ".");
				r = -EIO;
			}
			if (++pages == power) {
				saved = next;
				power *= 2;
				pages = 0;
			}
			cookie = next;
		}
		free_reply(rep);
		if (r < 0 || d->n > max || received > max)
			break;
	}
	if (r == 0 && (d->n > max || received > max)) {
		wsb_warn("listing of '%s' stopped past %zu entries, the most wsfs holds of one "
			 "directory (-o max_dir_entries)", path[0] ? path : ".", max);
		r = -EFBIG;
	}
	if (r == 0 && fetched && usable && live && d->n <= READDIR_PAGE)
		pf_put_listing(fs, path, len, d, seq0, mgen0, at_first);
	/* For the GETATTR that follows a listing: the kernel drops the
	 * directory's atime after every READDIR it sent (fs/fuse/readdir.c
	 * fuse_readdir_uncached(), fuse_invalidate_atime()) and fts(3) (rm
	 * -rf, find, du) fstat(2)s each directory it opened: one Stat per
	 * directory. Kept under the version taken before the listing (an
	 * event since drops it) and for as long as mgen stays what it was
	 * before the listing: the mount's own changes in the directory send
	 * no event that drops it (watch.c self_match()), and they, or a
	 * chmod of it, would leave its mtime, ctime, nlink or mode stale.
	 * A listing prefetched with an ancestor's brings them too. */
	if (r == 0 && self)
		node_attr_put_gen(fs->nodes, ino, d->aver, &self_st, at0, mgen0);
	free(path);
	if (r == 0)
		r = dir_sort(fs, d);
	if (r < 0) {
		dir_clear(d);
		return r;
	}
	d->have = true;
	d->ngen = ngen0;
	if (usable)
		known_from_listing(fs, ino, d, seq0, mgen0);
	return 0;
}

static void ws_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs_dir *d = calloc(1, sizeof(*d));

	(void)ino;
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&d->lock, NULL);
	fi->fh = (uint64_t)(uintptr_t)d;
	/*
	 * The kernel keeps the listing in the directory's page cache
	 * (FOPEN_CACHE_DIR, Linux 4.20) and drops it when the directory
	 * changes through this mount (its iversion), when its mtime differs
	 * at the next listing, and on notify_inval_inode. Across opens it
	 * keeps it (FOPEN_KEEP_CACHE) only while the watch stream reports
	 * the pod's changes; without it, each opendir lists afresh.
	 */
	fi->cache_readdir = 1;
	fi->keep_cache = atomic_load(&FS(req)->watch_live) && FS(req)->cfg.watch_timeout > 0;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		pthread_mutex_destroy(&d->lock);
		free(d->ents);
		free(d);
	}
}

/*
 * READDIR and READDIRPLUS (@plus) of @ino from offset @off, up to @size
 * bytes. Offsets: "." ends at 1, ".." at 2, an entry at its name's hash
 * (node_dir_hash(), node_dir_offs()); so @off means the same in any
 * listing of the directory, which the kernel relies on when it resumes a
 * reader at the offset of the last entry it gave from its cache
 * (FOPEN_CACHE_DIR) after that cache was dropped (fuse_readdir_cached: the
 * stream goes on uncached, maybe on a handle that never listed), and which
 * telldir(3)/seekdir(3) need. Replies -errno: ENOENT for a directory
 * removed while open, EFBIG (dir_load), or agentd's.
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct wsfs *fs = FS(req);
	struct wsfs_dir *d = (struct wsfs_dir *)(uintptr_t)fi->fh;
	uint64_t *ids = NULL, pos = (uint64_t)off;
	struct node_info info;
	size_t n_ids = 0, used = 0, i;
	bool known, same;
	char *buf;
	int r = 0;

	wb_wait(fs);
	if (off < 0 || !d) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (size > CHUNK_MAX)
		size = CHUNK_MAX;
	buf = malloc(size ? size : 1);
	/* At most one entry per 32 bytes (FUSE_NAME_OFFSET + padding). */
	ids = plus ? malloc((size / 32 + 1) * sizeof(*ids)) : NULL;
	if (!buf || (plus && !ids)) {
		free(buf);
		free(ids);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	known = node_info(fs->nodes, ino, &info) == 0;
	if (!known)
		memset(&info, 0, sizeof(info));
	pthread_mutex_lock(&d->lock);
	same = pos != 0 && node_attr_ver(fs->nodes, ino) == d->aver;
	if (known && !info.attached) {
		/* Removed (here or in the pod) while open: as getdents(2). */
		r = -ENOENT;
	} else if (same && d->have && pos >= d->start && pos <= d->end) {
		/* The reader goes on with this listing. */
	} else if (same && d->at_end && pos == d->end) {
		/* Past the end again, nothing changed: nothing more. */
	} else {
		/* Offset 0 (opendir, rewinddir), a change since, or not in
		 * this handle's last reply: a fresh listing (a removed
		 * directory fails ENOENT there, as getdents(2)). A reader
		 * part-way through the listing the handle holds when agentd
		 * went away (the watch's loss moves node_attr_ver()) goes on
		 * with it, as getdents(2) may give the names as of
		 * opendir(3), rather than fail half-way. */
		bool hold = pos != 0 && d->have && pos >= d->start && pos <= d->end;
		struct wsfs_dir held = { .ents = d->ents, .n = d->n, .cap = d->cap, .aver = d->aver,
					 .ngen = d->ngen, .clock = d->clock, .start = d->start,
					 .end = d->end };

		if (hold) {
			d->ents = NULL;
			d->n = d->cap = 0;
			d->have = false;
		}
		d->at_end = false;
		r = dir_load(fs, ino, d);
		if (hold && (r == -ENOTCONN || (r == -EIO && atomic_load(&fs->conn_down)))) {
			dir_free(d);
			d->ents = held.ents;
			d->n = held.n;
			d->cap = held.cap;
			d->have = true;
			d->aver = held.aver;
			d->ngen = held.ngen;
			d->clock = held.clock;
			d->end = held.end;
			r = 0;
		} else if (hold) {
			dirents_free(held.ents, held.n);
		}
	}
	d->start = pos;
	i = pos < NODE_DIR_OFF_MIN ? 0 : dir_find(d, pos);
	while (r == 0) {
		struct fuse_entry_param e;
		struct stat dot;
		const char *name;
		const struct stat *st;
		uint64_t seq = 0, next;
		size_t need;

		if (pos < 2) {
			memset(&dot, 0, sizeof(dot));
			dot.st_mode = S_IFDIR;
			/* d_ino 0 may be skipped by readdir(3): never give it. */
			dot.st_ino = pos == 0 ? info.ino : info.parent_ino;
			if (!dot.st_ino)
				dot.st_ino = info.ino ? info.ino : ino;
			name = pos == 0 ? "." : "..";
			st = &dot;
			next = pos + 1;
		} else if (i < d->n) {
			name = d->ents[i].name;
			st = &d->ents[i].st;
			seq = d->ents[i].seq;
			next = d->ents[i].off;
		} else {
			break;
		}
		if (!plus) {
			need = fuse_add_direntry(req, buf + used, size - used, name, st, (off_t)next);
			if (need > size - used)
				break;
		} else {
			memset(&e, 0, sizeof(e));
			e.attr = *st;
			need = fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0);
			if (need > size - used)
				break;
			if (pos >= 2) {
				/* Counts as a lookup (FUSE protocol: readdirplus). */
				struct ttl t = ttl_for(fs, seq, st);
				uint64_t id;

				/* An entry from before an own rename in the
				 * directory goes without its node (the kernel
				 * looks it up when it needs it), and so does one
				 * whose node's attributes went since the listing
				 * was fetched (the pod changed the file, agentd
				 * went away): the kernel would take its older
				 * size over the one it holds (fs/fuse/inode.c
				 * fuse_change_attributes() cuts i_size and the
				 * pages; tail -f says "file truncated"). */
				uint64_t cid = node_child(fs->nodes, ino, name, strlen(name));

				if ((!cid || node_attr_ver(fs->nodes, cid) <= d->clock) &&
				    node_lookup(fs->nodes, d->ngen, ino, name, strlen(name), st->st_ino,
						st_ident(st), st->st_mode, (uint32_t)st->st_nlink,
						&id) == 0) {
					e.ino = id;
					e.attr_timeout = t.attr;
					e.entry_timeout = t.entry;
					ids[n_ids++] = id;
					if (S_ISREG(st->st_mode))
						(void)node_ksize_told(fs->nodes, id, st->st_size);
					node_told_set(fs->nodes, id, st);
				}
			}
			fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
					       (off_t)next);
		}
		used += need;
		if (pos >= 2)
			i++;
		pos = next;
	}
	if (r == 0) {
		d->end = pos;
		if (pos >= 2 && i >= d->n) {
			/* The end. The kernel may still come back inside this
			 * reply (what the reader's buffer could not take);
			 * once it asks past it, give the memory back. */
			if (used == 0)
				dir_free(d);
			d->at_end = true;
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (r == -ESTALE)
		/* The directory lost its name (removed in the pod) before the
		 * listing was fetched: ENOENT, as a listing the removal cut
		 * short ends; ESTALE would reach getdents64(2). */
		r = -ENOENT;
	if (r < 0) {
		reply_err(req, r);
	} else if (fuse_reply_buf(req, buf, used) == -ENOENT) {
		/* Not delivered: those lookups never reached the kernel. */
		for (size_t k = 0; k < n_ids; k++)
			node_forget(fs->nodes, ids[k], 1);
	}
	free(buf);
	free(ids);
}

static void ws_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void ws_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void ws_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfs_dir *d = (struct wsfs_dir *)(uintptr_t)fi->fh;

	(void)ino;
	if (d) {
		dir_free(d);
		pthread_mutex_destroy(&d->lock);
		free(d);
	}
	fuse_reply_err(req, 0);
}

/* fsync of a directory: agentd has no directory handles open, so open one. */
static void ws_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__OpenRequest q = WSBRIDGE__V1__OPEN_REQUEST__INIT;
	Wsbridge__V1__FsyncRequest fq = WSBRIDGE__V1__FSYNC_REQUEST__INIT;
	Wsbridge__V1__OpenReply *rep = NULL;
	char *path = NULL;
	size_t len;
	int r;

	wb_wait(fs);
	(void)fi;
	r = path_of(fs, ino, &path, &len);
	if (r == -ESTALE)
		r = 0; /* a removed directory: nothing left to sync */
	else if (r == 0) {
		q.path = bin(path, len);
		q.access = WSBRIDGE__V1__ACCESS__RDONLY;
		q.directory = true;
		q.nofollow = true;
		r = open_rpc(fs, &q, &rep);
		if (r == 0) {
			fq.handle = rep->handle;
			fq.datasync = datasync != 0;
			r = rpc_long(fs, M("Fsync"), &fq.base, &wsbridge__v1__empty__descriptor, NULL);
			release_handle(fs, rep->handle);
		}
	}
	fuse_reply_err(req, r < 0 ? errno_out(r, false) : 0);
	free(path);
	free_reply(rep);
}

static void ws_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__PathRequest q = WSBRIDGE__V1__PATH_REQUEST__INIT;
	Wsbridge__V1__StatFsReply *rep = NULL;
	struct statvfs sv;
	char *path = NULL;
	size_t len = 0;
	int r;

	wb_wait(fs);
	if (path_of(fs, ino, &path, &len) < 0) {
		path = NULL;
		len = 0;
	}
	q.path = bin(path ? path : "", len);
	r = rpc(fs, M("StatFs"), &q.base, &wsbridge__v1__stat_fs_reply__descriptor, &rep);
	if (r < 0) {
		reply_err(req, r);
	} else {
		memset(&sv, 0, sizeof(sv));
		sv.f_bsize = rep->bsize;
		sv.f_frsize = rep->frsize ? rep->frsize : rep->bsize;
		sv.f_blocks = rep->blocks;
		sv.f_bfree = rep->bfree;
		sv.f_bavail = rep->bavail;
		sv.f_files = rep->files;
		sv.f_ffree = rep->ffree;
		sv.f_favail = rep->ffree;
		sv.f_namemax = rep->namemax ? rep->namemax : 255;
		fuse_reply_statfs(req, &sv);
	}
	free(path);
	free_reply(rep);
}

/* ---- xattrs ---- */

/*
 * security.* and system.* attributes (SELinux labels, file capabilities,
 * POSIX ACLs) describe the pod's security, which means nothing on the host
 * (wsfs does no permission checks of its own), and asking agentd for them
 * would cost an RPC per file for `ls -l` (it reads security.selinux and
 * system.posix_acl_access) and per write(2) (the kernel reads
 * security.capability to drop privileges, fs/attr.c). They are answered
 * here: EOPNOTSUPP, which ls also caches per filesystem. user.* and trusted.*
 * go to agentd.
 */
static bool xattr_local(const char *name)
{
	return strncmp(name, "security.", 9) == 0 || strncmp(name, "system.", 7) == 0;
}

/*
 * Call xattr method @p method with request @p q, whose path and handle
 * fields are @p qpath and @p qhandle, on node @p ino; reply in *@p
 * ret_reply as rpc() gives it. FUSE's xattr requests name the nodeid only,
 * for fsetxattr(2) on a descriptor as for setxattr(2) by name, so the call
 * goes as ws_setattr()'s fchmod does: through an open file of the node
 * when there is one (it is the node's file for sure, where the name may
 * hold another by now: the pod renamed one over it, or none: unlinked),
 * else by the path; a handle that fails EIO or EBADF (lost, and not
 * reopened) gives way to the path while the name still holds the node.
 * The path goes with the handle (an agentd from before handles on xattr
 * calls uses it); with no name left, a path with a NUL, which such an
 * agentd refuses (EINVAL) rather than acting on another file. Returns 0
 * or -errno (-ESTALE: unlinked, no open file). Any worker thread.
 */
static int xattr_rpc(struct wsfs *fs, fuse_ino_t ino, const char *method, ProtobufCMessage *q,
		     ProtobufCBinaryData *qpath, uint64_t *qhandle,
		     const ProtobufCMessageDescriptor *desc, void *ret_reply)
{
	struct wsfs_file *f;
	struct node_info info;
	char *path = NULL;
	size_t len = 0;
	int r;

	r = node_info(fs->nodes, ino, &info);
	if (r == 0)
		r = node_own_file(fs, ino, &info, &f);
	if (r < 0)
		return r;
	if (info.attached) {
		r = path_of(fs, ino, &path, &len);
		if (r < 0 && !f)
			return r;
	}
	if (f) {
		struct hslot s = { f, qhandle, false };

		*qpath = path ? bin(path, len) : bin("", 1); /* "": a NUL */
		r = file_rpc(fs, &s, 1, method, q, desc, ret_reply);
		file_put(fs, f);
		if (!((r == -EIO || r == -EBADF) && path && path_holds_node(fs, path, len, &info)))
			goto out;
		*qhandle = 0;
	}
	*qpath = bin(path, len);
	r = rpc(fs, method, q, desc, ret_reply);
out:
	free(path);
	return r;
}

static void ws_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__SetXattrRequest q = WSBRIDGE__V1__SET_XATTR_REQUEST__INIT;
	int r;

	wb_wait(fs);
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (xattr_local(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	q.name = bin(name, strlen(name));
	q.value = bin(value, size);
	q.create = flags & XATTR_CREATE;
	q.replace = flags & XATTR_REPLACE;
	r = xattr_rpc(fs, ino, M("SetXattr"), &q.base, &q.path, &q.handle,
		      &wsbridge__v1__empty__descriptor, NULL);
	mutated(fs);
	node_attr_drop(fs->nodes, ino); /* ctime */
	fuse_reply_err(req, r < 0 ? errno_out(r, false) : 0);
}

static void ws_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__GetXattrRequest q = WSBRIDGE__V1__GET_XATTR_REQUEST__INIT;
	Wsbridge__V1__GetXattrReply *rep = NULL;
	int r;

	/* The kernel asks for security.capability before every write(2)
	 * (file_remove_privs): a local answer, which waits for nothing. */
	if (xattr_local(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	wb_wait(fs);
	q.name = bin(name, strlen(name));
	r = xattr_rpc(fs, ino, M("GetXattr"), &q.base, &q.path, &q.handle,
		      &wsbridge__v1__get_xattr_reply__descriptor, &rep);
	if (r == 0 && rep->value.len > XATTR_MAX)
		r = -E2BIG;
	if (r < 0)
		reply_err(req, r);
	else if (size == 0)
		fuse_reply_xattr(req, rep->value.len);
	else if (rep->value.len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, (const char *)rep->value.data, rep->value.len);
	free_reply(rep);
}

/* A name from ListXattr that listxattr(2) shows: valid, and not local. */
static bool xattr_name_listed(const ProtobufCBinaryData *nm)
{
	char name[256];

	if (nm->len == 0 || nm->len > 255 || memchr(nm->data, '\0', nm->len))
		return false;
	memcpy(name, nm->data, nm->len);
	name[nm->len] = '\0';
	return !xattr_local(name);
}

static void ws_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__ListXattrRequest q = WSBRIDGE__V1__LIST_XATTR_REQUEST__INIT;
	Wsbridge__V1__ListXattrReply *rep = NULL;
	char *buf = NULL;
	size_t total = 0;
	int r;

	wb_wait(fs);
	r = xattr_rpc(fs, ino, M("ListXattr"), &q.base, &q.path, &q.handle,
		      &wsbridge__v1__list_xattr_reply__descriptor, &rep);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < rep->n_names; i++) {
		const ProtobufCBinaryData *nm = &rep->names[i];

		if (!xattr_name_listed(nm))
			continue;
		total += nm->len + 1;
	}
	if (total > XATTR_MAX) {
		r = -E2BIG;
		goto out;
	}
	if (size == 0)
		goto out;
	if (total > size) {
		r = -ERANGE;
		goto out;
	}
	buf = malloc(total ? total : 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	total = 0;
	for (size_t i = 0; i < rep->n_names; i++) {
		const ProtobufCBinaryData *nm = &rep->names[i];

		if (!xattr_name_listed(nm))
			continue;
		memcpy(buf + total, nm->data, nm->len);
		total += nm->len;
		buf[total++] = '\0';
	}
out:
	if (r < 0)
		reply_err(req, r);
	else if (size == 0)
		fuse_reply_xattr(req, total);
	else
		fuse_reply_buf(req, buf, total);
	free(buf);
	free_reply(rep);
}

static void ws_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__RemoveXattrRequest q = WSBRIDGE__V1__REMOVE_XATTR_REQUEST__INIT;
	int r;

	wb_wait(fs);
	if (xattr_local(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	q.name = bin(name, strlen(name));
	r = xattr_rpc(fs, ino, M("RemoveXattr"), &q.base, &q.path, &q.handle,
		      &wsbridge__v1__empty__descriptor, NULL);
	mutated(fs);
	node_attr_drop(fs->nodes, ino); /* ctime */
	fuse_reply_err(req, r < 0 ? errno_out(r, false) : 0);
}

/* ---- fallocate, lseek, copy_file_range ---- */

static void ws_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__FallocateRequest q = WSBRIDGE__V1__FALLOCATE_REQUEST__INIT;
	struct hslot s = { file_of(fi), &q.handle, true };
	int r;

	wb_wait(fs);
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (offset < 0 || length <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	q.offset = (uint64_t)offset;
	q.length = (uint64_t)length;
	q.keep_size = mode & FALLOC_FL_KEEP_SIZE;
	q.punch_hole = mode & FALLOC_FL_PUNCH_HOLE;
	q.zero_range = mode & FALLOC_FL_ZERO_RANGE;
	node_note(fs->nodes, ino, 0, true); /* getattr_reply() */
	node_told_drop(fs->nodes, ino); /* the kernel's own i_size */
	r = file_rpc_long(fs, &s, 1, M("Fallocate"), &q.base, &wsbridge__v1__empty__descriptor,
			  NULL);
	mutated(fs);
	node_seen_set(fs->nodes, ino, NULL);
	fuse_reply_err(req, r < 0 ? errno_out(r, false) : 0);
}

static void ws_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__LseekRequest q = WSBRIDGE__V1__LSEEK_REQUEST__INIT;
	Wsbridge__V1__LseekReply *rep = NULL;
	struct hslot s = { file_of(fi), &q.handle };
	int r;

	wb_wait(fs);
	(void)ino;
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL); /* SEEK_SET/CUR/END are the kernel's */
		return;
	}
	if (off < 0) {
		/* As ext4, xfs and tmpfs (lseek(2): "ENXIO ... beyond the end
		 * of the file"; iomap_seek_data() takes a negative one so). */
		fuse_reply_err(req, ENXIO);
		return;
	}
	q.offset = (uint64_t)off;
	q.whence = whence == SEEK_DATA ? WSBRIDGE__V1__WHENCE__SEEK_DATA
				       : WSBRIDGE__V1__WHENCE__SEEK_HOLE;
	r = file_rpc(fs, &s, 1, M("Lseek"), &q.base, &wsbridge__v1__lseek_reply__descriptor, &rep);
	if (r == 0 && rep->offset > INT64_MAX)
		r = -EIO;
	if (r < 0)
		reply_err(req, r);
	else
		fuse_reply_lseek(req, (off_t)rep->offset);
	free_reply(rep);
}

static void ws_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			       struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			       struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct wsfs *fs = FS(req);
	Wsbridge__V1__CopyFileRangeRequest q = WSBRIDGE__V1__COPY_FILE_RANGE_REQUEST__INIT;
	Wsbridge__V1__CopyFileRangeReply *rep = NULL;
	struct hslot s[2] = { { file_of(fi_in), &q.handle_in, false },
			      { file_of(fi_out), &q.handle_out, true } };
	int r;

	wb_wait(fs);
	(void)ino_in;
	if (flags != 0 || off_in < 0 || off_out < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	q.offset_in = (uint64_t)off_in;
	q.offset_out = (uint64_t)off_out;
	q.length = len;
	node_note(fs->nodes, ino_out, 0, true); /* getattr_reply() */
	node_told_drop(fs->nodes, ino_out); /* the kernel's own i_size */
	r = file_rpc_long(fs, s, 2, M("CopyFileRange"), &q.base,
			  &wsbridge__v1__copy_file_range_reply__descriptor, &rep);
	mutated(fs);
	node_seen_set(fs->nodes, ino_out, NULL);
	if (r == -ENOSYS || r == -EOPNOTSUPP) {
		/* agentd without CopyFileRange: ENOSYS makes the kernel copy
		 * through read/write from now on (fuse_lowlevel.h). */
		fuse_reply_err(req, ENOSYS);
	} else if (r < 0) {
		fuse_reply_err(req, errno_out(r, true));
	} else {
		fuse_reply_write(req, rep->copied < len ? rep->copied : len);
	}
	free_reply(rep);
}

/*
 * Own changes of names, counted in flight in their directory from before
 * their call to agentd until after the node table holds them
 * (node_names_begin()), so that a LOOKUP answered meanwhile does not undo
 * them. fs is taken before the operation: its reply frees req.
 */
#define NAMES_CHANGE(op, dir, params, args)                                      \
	static void op##_names params                                            \
	{                                                                        \
		struct wsfs *fs = FS(req);                                       \
                                                                                 \
		node_names_begin(fs->nodes, dir, false);                         \
		op args;                                                         \
		node_names_end(fs->nodes, dir, false);                           \
	}

NAMES_CHANGE(ws_mknod, parent,
	     (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev),
	     (req, parent, name, mode, rdev))
NAMES_CHANGE(ws_mkdir, parent, (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode),
	     (req, parent, name, mode))
NAMES_CHANGE(ws_unlink, parent, (fuse_req_t req, fuse_ino_t parent, const char *name),
	     (req, parent, name))
NAMES_CHANGE(ws_rmdir, parent, (fuse_req_t req, fuse_ino_t parent, const char *name),
	     (req, parent, name))
NAMES_CHANGE(ws_symlink, parent,
	     (fuse_req_t req, const char *link, fuse_ino_t parent, const char *name),
	     (req, link, parent, name))
NAMES_CHANGE(ws_link, newparent,
	     (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname),
	     (req, ino, newparent, newname))
NAMES_CHANGE(ws_create, parent,
	     (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	      struct fuse_file_info *fi),
	     (req, parent, name, mode, fi))

/* A rename changes names in both directories, and when it moves a
 * directory (or a name the table does not hold), the paths below it. */
static void ws_rename_names(fuse_req_t req, fuse_ino_t parent, const char *name,
			    fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct wsfs *fs = FS(req);
	uint64_t src = node_child(fs->nodes, parent, name, strlen(name));
	uint64_t dst = node_child(fs->nodes, newparent, newname, strlen(newname));
	struct node_info info;
	bool move = !src || node_info(fs->nodes, src, &info) < 0 || S_ISDIR(info.mode) ||
		    ((flags & RENAME_EXCHANGE) && dst &&
		     (node_info(fs->nodes, dst, &info) < 0 || S_ISDIR(info.mode)));

	node_names_begin(fs->nodes, parent, move);
	if (newparent != parent)
		node_names_begin(fs->nodes, newparent, false);
	ws_rename(req, parent, name, newparent, newname, flags);
	if (newparent != parent)
		node_names_end(fs->nodes, newparent, false);
	node_names_end(fs->nodes, parent, move);
}

const struct fuse_lowlevel_ops wsfs_ll_ops = {
	.init = ws_init,
	.lookup = ws_lookup,
	.forget = ws_forget,
	.forget_multi = ws_forget_multi,
	.getattr = ws_getattr,
	.setattr = ws_setattr,
	.access = ws_access,
	.readlink = ws_readlink,
	.mknod = ws_mknod_names,
	.mkdir = ws_mkdir_names,
	.unlink = ws_unlink_names,
	.rmdir = ws_rmdir_names,
	.symlink = ws_symlink_names,
	.rename = ws_rename_names,
	.link = ws_link_names,
	.open = ws_open,
	.create = ws_create_names,
	.read = ws_read,
	.write = ws_write,
	.flush = ws_flush,
	.release = ws_release,
	.fsync = ws_fsync,
	.opendir = ws_opendir,
	.readdir = ws_readdir,
	.readdirplus = ws_readdirplus,
	.releasedir = ws_releasedir,
	.fsyncdir = ws_fsyncdir,
	.statfs = ws_statfs,
	.setxattr = ws_setxattr,
	.getxattr = ws_getxattr,
	.listxattr = ws_listxattr,
	.removexattr = ws_removexattr,
	.fallocate = ws_fallocate,
	.lseek = ws_lseek,
	.copy_file_range = ws_copy_file_range,
};

/* ---- setup ---- */

int wsfs_new(const struct wsfs_config *cfg, struct wsc *c, struct wsfs **ret)
{
	struct wsfs *fs = calloc(1, sizeof(*fs));
	pthread_rwlockattr_t rwa;
	int r;

	if (!fs)
		return -ENOMEM;
	r = node_table_new(&fs->nodes);
	if (r < 0) {
		free(fs);
		return r;
	}
	fs->cfg = *cfg;
	fs->client = c;
	atomic_init(&fs->conn_gen, 1);
	atomic_init(&fs->conn_down, false);
	atomic_init(&fs->auth_refused, false);
	atomic_init(&fs->inval_seq, 0);
	atomic_init(&fs->mgen, 0);
	atomic_init(&fs->pf_mgen, 0);
	atomic_init(&fs->watch_live, false);
	atomic_init(&fs->pod_names_ns, INT64_MIN / 2);
	atomic_init(&fs->expire_only, false);
	pthread_mutex_init(&fs->mon_lock, NULL);
	pthread_mutex_init(&fs->ping_lock, NULL);
	wsb_cond_init_mono(&fs->ping_cond);
	pthread_mutex_init(&fs->self_lock, NULL);
	pthread_mutex_init(&fs->neg_lock, NULL);
	pthread_mutex_init(&fs->stale_lock, NULL);
	for (size_t k = 0; k < WSFS_OPEN_LOCKS; k++)
		pthread_mutex_init(&fs->open_locks[k], NULL);
	pthread_mutex_init(&fs->pf_lock, NULL);
	pthread_mutex_init(&fs->wb_lock, NULL);
	pthread_cond_init(&fs->wb_cond, NULL);
	pthread_mutex_init(&fs->sab_lock, NULL);
	pthread_cond_init(&fs->sab_cond, NULL);
	TAILQ_INIT(&fs->sab_list);
	pthread_mutex_init(&fs->gb_lock, NULL);
	wsb_cond_init_mono(&fs->gb_cond);
	wsb_cond_init_mono(&fs->gb_main_cond);
	fs->gb_wake_ns = INT64_MAX;
	atomic_init(&fs->rel_single, false);
	pthread_mutex_init(&fs->rel_send_lock, NULL);
	atomic_init(&fs->gb_n, 0);
	TAILQ_INIT(&fs->gb_list);
	atomic_init(&fs->gb_seq, 1);
	pthread_mutex_init(&fs->nq_lock, NULL);
	pthread_cond_init(&fs->nq_cond, NULL);
	fs->sq_tail = &fs->sq_head;
	pthread_rwlock_init(&fs->store_lock, NULL);
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs->put_lock, &rwa);
	pthread_rwlockattr_destroy(&rwa);
	atomic_init(&fs->store_gen, 0);
	atomic_init(&fs->wb_n, 0);
	atomic_init(&fs->sab_n, 0);
	atomic_init(&fs->sab_born_ns, 0);
	fs->wb_seq = 1;
	if (fs->cfg.write_behind > WSFS_WRITE_BEHIND_MAX)
		fs->cfg.write_behind = WSFS_WRITE_BEHIND_MAX;
	/* watch.c waits with CLOCK_MONOTONIC deadlines. */
	wsb_cond_init_mono(&fs->self_cond);
	wsb_cond_init_mono(&fs->mon_cond);
	*ret = fs;
	return 0;
}

void wsfs_free(struct wsfs *fs)
{
	struct wsfs_file *f, *next;
	struct timespec until;

	if (!fs)
		return;
	/* wsfs_monitor_stop() has stopped it, unless it never ran. */
	until = wsb_deadline(CLOCK_REALTIME, fs->cfg.rpc_timeout_ms + 1000);
	if (wsfs_ping_stop(fs, &until) < 0)
		return; /* still in a call: leave it all to exit(3) */
	/* SETATTRs kept behind on files the unmount left open (no FLUSH
	 * came), before the locks and tables they use go. The session is
	 * gone: no kernel to tell. */
	fs->se = NULL;
	wsfs_send_behind(fs);
	for (size_t k = 0; k < WSFS_PF_DIRS; k++)
		pf_free(fs->pf[k]);
	pthread_mutex_destroy(&fs->pf_lock);
	pthread_mutex_destroy(&fs->wb_lock);
	pthread_cond_destroy(&fs->wb_cond);
	pthread_mutex_destroy(&fs->sab_lock);
	pthread_cond_destroy(&fs->sab_cond);
	pthread_mutex_destroy(&fs->gb_lock);
	pthread_cond_destroy(&fs->gb_cond);
	pthread_cond_destroy(&fs->gb_main_cond);
	pthread_mutex_destroy(&fs->rel_send_lock);
	pthread_mutex_destroy(&fs->nq_lock);
	pthread_cond_destroy(&fs->nq_cond);
	while (fs->sq_head) { /* the thread never ran (or never will) */
		struct wsfs_store *s = fs->sq_head;

		fs->sq_head = s->next;
		wsfs_store_free(s);
	}
	pthread_rwlock_destroy(&fs->store_lock);
	pthread_rwlock_destroy(&fs->put_lock);
	wsfs_self_free(fs);
	pthread_mutex_destroy(&fs->self_lock);
	wsfs_neg_free(fs);
	pthread_mutex_destroy(&fs->neg_lock);
	pthread_mutex_destroy(&fs->stale_lock);
	for (size_t k = 0; k < WSFS_OPEN_LOCKS; k++)
		pthread_mutex_destroy(&fs->open_locks[k]);
	pthread_cond_destroy(&fs->self_cond);
	if (!fs->client) {
		node_table_free(fs->nodes);
		pthread_mutex_destroy(&fs->mon_lock);
		pthread_cond_destroy(&fs->mon_cond);
		pthread_mutex_destroy(&fs->ping_lock);
		pthread_cond_destroy(&fs->ping_cond);
		free(fs);
		return;
	}
	/* Handles queued while agentd was unreachable, and files still open
	 * (the session ended under them): give agentd its handles back. */
	wsfs_release_pending(fs);
	kept_release(fs, true);
	pthread_mutex_lock(&files_lock);
	f = fs_files;
	fs_files = NULL;
	pthread_mutex_unlock(&files_lock);
	for (; f; f = next) {
		next = f->next;
		release_handle(fs, f->sh);
		release_handle(fs, f->sh_pos);
		pthread_mutex_destroy(&f->lock);
		free(f);
	}
	free(fs->pending);
	node_table_free(fs->nodes);
	pthread_mutex_destroy(&fs->mon_lock);
	pthread_cond_destroy(&fs->mon_cond);
	pthread_mutex_destroy(&fs->ping_lock);
	pthread_cond_destroy(&fs->ping_cond);
	free(fs);
}

int wsfs_probe(struct wsfs *fs, char *msg, size_t size)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct wsc_status st;
	struct stat sb;
	int r;

	q.path = bin("", 0);
	q.follow = true;
	r = wsc_unary_ex(fs->client, M("Stat"), &q.base, &wsbridge__v1__stat_reply__descriptor,
			 (ProtobufCMessage **)&rep, fs->cfg.rpc_timeout_ms, &st);
	if (r < 0) {
		snprintf(msg, size, "%s (%s): %s", strerror(-r), wsb_status_name(st.code), st.msg);
		return r;
	}
	r = attr_to_stat(rep->attr, &sb);
	if (r == 0 && !S_ISDIR(sb.st_mode))
		r = -ENOTDIR;
	if (r == -ENOTDIR)
		snprintf(msg, size, "the workspace root is not a directory");
	else if (r < 0)
		snprintf(msg, size, "agentd's attributes of the workspace root are not usable "
				    "(inode 0, an owner of -1 or an unknown file type)");
	else
		node_set_ino(fs->nodes, NODE_ROOT_ID, sb.st_ino, sb.st_mode);
	free_reply(rep);
	return r;
}
