/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The wsbridge.v1.Workspace service (proto/wsbridge.proto): decodes each
 * request, checks its sizes, calls fsops.h and encodes the reply or the
 * failure (gRPC status from the errno, message naming the path, errno name
 * in the trailer; see agentd/rpc.h).
 *
 * Limits (proto/wsbridge.proto): Read size and Write/Upload chunk data at
 * most FSOPS_CHUNK_MAX (1 MiB) -> INVALID_ARGUMENT; Download sends chunks of
 * at most 1 MiB; ReadDir pages of at most FSOPS_READDIR_MAX entries; xattr
 * values at most 64 KiB; open handles at most agentd.max_handles ->
 * RESOURCE_EXHAUSTED "too many open handles (limit N)". A path that leaves
 * the root -> PERMISSION_DENIED "'PATH' escapes the workspace root" (EXDEV).
 *
 * CopyFileRange copies at most FSOPS_COPY_MAX (1 GiB) per call; a longer
 * length gets a short count and the client continues from there.
 *
 * Threads: every method but Watch is RPC_ON_CQ: handlers and the
 * Upload/Download callbacks run on completion-queue threads, several at
 * once; the only shared state there is the handle table, which fsops locks.
 * Watch is RPC_ON_LOOP: it and the watcher (watch.c) live on the loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

#include "agentd.h"
#include "fsops.h"
#include "session.h"
#include "watch.h"
#include "wsb.h"
#include "wsbridge.pb-c.h"

/* Longest piece of a path quoted in an error message, bytes. */
#define ESC_MAX 256

/* ---- helpers ---- */

/* st_dev of the workspace root, set once by svc_workspace_register(). */
static dev_t ws_root_dev;
static bool ws_root_dev_known;

/*
 * The inode number a client sees for @st: st_ino on the workspace root's
 * file system; on another one mounted inside the workspace (a volume, a
 * tmpfs), st_ino with its top 16 bits XORed with a nonzero hash of st_dev.
 * A mount shows one st_dev for every file, and two file systems hand out
 * the same numbers: tar(1) would take two files with nlink > 1 of one
 * number for hard links of each other (and archive one's contents for
 * both), find(1) and du(1) a mounted directory whose number its parent's
 * file system also gives an ancestor for a loop. Any thread (reads what
 * registration set).
 */
static uint64_t attr_ino(const struct stat *st)
{
	uint64_t h;

	if (!ws_root_dev_known || st->st_dev == ws_root_dev)
		return (uint64_t)st->st_ino;
	h = wsb_fnv1a(&st->st_dev, sizeof(st->st_dev), WSB_FNV1A_INIT);
	h = (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff;
	return (uint64_t)st->st_ino ^ ((h ? h : 1) << 48);
}

static void attr_from_stat(Wsbridge__V1__Attr *a, const struct stat *st)
{
	wsbridge__v1__attr__init(a);
	a->ino = attr_ino(st);
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->rdev = st->st_rdev;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->blksize = (uint32_t)st->st_blksize;
	wsb_time_to_wire(&st->st_atim, &a->atime_ns, &a->atime_s, &a->atime_nsec);
	wsb_time_to_wire(&st->st_mtim, &a->mtime_ns, &a->mtime_s, &a->mtime_nsec);
	wsb_time_to_wire(&st->st_ctim, &a->ctime_ns, &a->ctime_s, &a->ctime_nsec);
}

/* Is this wire path the root itself ("", ".", "/", "//")? */
static bool path_is_root(const ProtobufCBinaryData *p)
{
	size_t i = 0;

	while (i < p->len && p->data[i] == '/')
		i++;
	return i == p->len || (i + 1 == p->len && p->data[i] == '.');
}

/*
 * End @p call for a failure @p err (positive or negative errno) of operation
 * @p op on wire path @p p. An escape reads "'../x' escapes the workspace
 * root" (PERMISSION_DENIED, errno EXDEV).
 */
static void fail_path(struct rpc_call *call, int err, const char *op,
		      const ProtobufCBinaryData *p)
{
	char *esc = wsb_escape(p->data, p->len, ESC_MAX);
	const char *q = esc ? esc : "?";

	if (err < 0)
		err = -err;
	if (err == EXDEV)
		rpc_finish(call, WSB_PERMISSION_DENIED, EXDEV, "'%s' escapes the workspace root", q);
	else if (err == EBUSY && path_is_root(p))
		rpc_finish(call, WSB_INVALID_ARGUMENT, EBUSY,
			   "%s '%s': not possible on the workspace root itself", op, q);
	else
		rpc_fail_errno(call, err, "%s '%s'", op, q);
	free(esc);
}

/* The same for an operation on two paths (rename, link). */
static void fail_paths(struct rpc_call *call, int err, const char *op,
		       const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
	char *ea = wsb_escape(a->data, a->len, ESC_MAX);
	char *eb = wsb_escape(b->data, b->len, ESC_MAX);
	const char *qa = ea ? ea : "?", *qb = eb ? eb : "?";

	if (err < 0)
		err = -err;
	if (err == EXDEV)
		rpc_finish(call, WSB_PERMISSION_DENIED, EXDEV,
			   "'%s' or '%s' escapes the workspace root", qa, qb);
	else if (err == EBUSY && (path_is_root(a) || path_is_root(b)))
		rpc_finish(call, WSB_INVALID_ARGUMENT, EBUSY,
			   "%s '%s' to '%s': not possible on the workspace root itself", op, qa,
			   qb);
	else
		rpc_fail_errno(call, err, "%s '%s' to '%s'", op, qa, qb);
	free(ea);
	free(eb);
}

static void fail_handle(struct rpc_call *call, int err, const char *op, uint64_t id)
{
	if (err < 0)
		err = -err;
	if (err == EBADF)
		rpc_fail_errno(call, err, "%s: handle %llu is not open (or not open for this)", op,
			       (unsigned long long)id);
	else
		rpc_fail_errno(call, err, "%s on handle %llu", op, (unsigned long long)id);
}

static void reply_empty(struct rpc_call *call)
{
	Wsbridge__V1__Empty e = WSBRIDGE__V1__EMPTY__INIT;

	rpc_reply(call, &e.base);
}

/* Put what names the file, @id, into @a (Attr.btime_ns, Attr.generation). */
static void attr_set_ident(Wsbridge__V1__Attr *a, const struct fsops_ident *id)
{
	a->btime_ns = id->btime_ns;
	a->generation = id->generation;
}

/* Reply an AttrReply of @st and @id (may be NULL: unknown). */
static void reply_attr(struct rpc_call *call, const struct stat *st, const struct fsops_ident *id)
{
	Wsbridge__V1__AttrReply rep = WSBRIDGE__V1__ATTR_REPLY__INIT;
	Wsbridge__V1__Attr a;

	attr_from_stat(&a, st);
	if (id)
		attr_set_ident(&a, id);
	rep.attr = &a;
	rpc_reply(call, &rep.base);
}

static struct agentd *AD(void *data)
{
	return data;
}

static int session_hold(struct rpc_call *call, struct agentd *ad, const char *what,
			uint64_t *ret_key);
static void session_done(struct agentd *ad, uint64_t key);

/* ---- unary methods ---- */

static void do_stat(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__StatRequest *q = (const void *)req;
	Wsbridge__V1__StatReply rep = WSBRIDGE__V1__STAT_REPLY__INIT;
	Wsbridge__V1__Attr a;
	struct fsops_ident id;
	struct stat st;
	uint64_t owner;
	int r;

	if (q->pin && !q->follow) {
		if (session_hold(call, AD(data), "stat", &owner) < 0)
			return;
		r = fsops_pin(&AD(data)->root, AD(data)->handles, owner, q->path.data, q->path.len,
			      &rep.pin, &st, &id);
		session_done(AD(data), owner);
	} else {
		r = fsops_stat(&AD(data)->root, q->path.data, q->path.len, q->follow, &st, &id);
	}
	if (r < 0)
		return fail_path(call, r, "stat", &q->path);
	attr_from_stat(&a, &st);
	attr_set_ident(&a, &id);
	rep.attr = &a;
	rpc_reply(call, &rep.base);
}

/** Most entries ReadDir's prefetch lists, and most subdirectories. */
#define PREFETCH_MAX_ENTRIES 4096u
#define PREFETCH_MAX_DIRS 512u
/** Largest subdirectory prefetched, entries: a larger one is listed when
 * asked for (each entry costs an lstat, wasted on a directory skipped). */
#define PREFETCH_DIR_MAX 1024u
/** Time a prefetch may take, ns: on a slow file system (gVisor's gofer, a
 * network disk) the reply must not wait, nor risk the client's deadline. */
#define PREFETCH_TIME_NS (50 * 1000 * 1000LL)

/* One directory's listing and the messages that point into it. */
struct listing {
	char *path; /* relative to the root; NULL for the requested directory */
	size_t len;
	struct fsops_dirent *ents;
	size_t n;
	Wsbridge__V1__DirEntry *de, **dep;
	Wsbridge__V1__Attr *attrs;
	Wsbridge__V1__DirListing msg;
	struct fsops_dirent self; /* the directory's own attributes after it */
	Wsbridge__V1__Attr self_attr;
};

static void listing_free(struct listing *l)
{
	free(l->path);
	free(l->de);
	free(l->dep);
	free(l->attrs);
	fsops_dirents_free(l->ents, l->n);
}

/* Fill l->de/dep/attrs from l->ents (borrowing the names). 0 or -ENOMEM. */
static int listing_msgs(struct listing *l)
{
	if (l->n == 0)
		return 0;
	l->de = calloc(l->n, sizeof(*l->de));
	l->dep = calloc(l->n, sizeof(*l->dep));
	l->attrs = calloc(l->n, sizeof(*l->attrs));
	if (!l->de || !l->dep || !l->attrs)
		return -ENOMEM;
	for (size_t i = 0; i < l->n; i++) {
		wsbridge__v1__dir_entry__init(&l->de[i]);
		l->de[i].name.data = (uint8_t *)l->ents[i].name;
		l->de[i].name.len = l->ents[i].name_len;
		l->de[i].next_offset = l->ents[i].next_offset;
		if (l->ents[i].has_attr) {
			attr_from_stat(&l->attrs[i], &l->ents[i].st);
			attr_set_ident(&l->attrs[i], &l->ents[i].ident);
			l->de[i].attr = &l->attrs[i];
		}
		l->dep[i] = &l->de[i];
	}
	return 0;
}

/* "@p/@name", or @name when @p is the root (""). Malloc'd, or NULL. */
static char *child_of(const char *p, size_t plen, const char *name, size_t nlen, size_t *ret_len)
{
	size_t len = plen + (plen ? 1 : 0) + nlen;
	char *s = malloc(len + 1);

	if (!s)
		return NULL;
	if (plen) {
		memcpy(s, p, plen);
		s[plen] = '/';
	}
	memcpy(s + len - nlen, name, nlen);
	s[len] = '\0';
	*ret_len = len;
	return s;
}

/*
 * ReadDir's prefetch: list the subdirectories of @top (the whole listing
 * of @top_path) breadth first, each whole (a directory larger than
 * PREFETCH_DIR_MAX or than what is left is skipped), while the entries add
 * up to at most @budget and for at most PREFETCH_TIME_NS.
 * Appends to *@out (*@n_out of them); a directory that cannot be listed
 * (removed meanwhile, no permission) is skipped. 0 or -ENOMEM.
 */
static int prefetch(const struct resolve_root *root, const struct listing *top,
		    const void *top_path, size_t top_len, unsigned budget,
		    struct listing **out, size_t *n_out)
{
	struct listing *ls = NULL;
	size_t n = 0, cap = 0;
	struct timespec t0, now;
	size_t tried = 0; /* entries read, kept or not */
	bool late = false;
	int r = 0;

	if (budget > PREFETCH_MAX_ENTRIES)
		budget = PREFETCH_MAX_ENTRIES;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* Walk top's entries, then each listed directory's, in order (ci
	 * -1 is top). What is read of ls[ci] is read before ls may move. */
	for (ptrdiff_t ci = -1; ci < (ptrdiff_t)n; ci++) {
		const struct fsops_dirent *ents = ci < 0 ? top->ents : ls[ci].ents;
		size_t cnt = ci < 0 ? top->n : ls[ci].n;
		const char *cpath = ci < 0 ? top_path : ls[ci].path;
		size_t clen = ci < 0 ? top_len : ls[ci].len;

		for (size_t i = 0; i < cnt && budget > 0 && n < PREFETCH_MAX_DIRS; i++) {
			const struct fsops_dirent *e = &ents[i];
			struct listing l = { 0 };
			bool eof = false;

			if (!e->has_attr || !S_ISDIR(e->st.st_mode))
				continue;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) * 1000000000LL + (now.tv_nsec - t0.tv_nsec) >
			    PREFETCH_TIME_NS) {
				late = true;
				break;
			}
			if (tried >= 2 * PREFETCH_MAX_ENTRIES) {
				late = true; /* too much read for nothing */
				break;
			}
			l.path = child_of(cpath, clen, e->name, e->name_len, &l.len);
			if (!l.path) {
				r = -ENOMEM;
				break;
			}
			/* Whole, or not at all: a directory larger than what is
			 * left is skipped, as is one that cannot be listed, and
			 * one that is no longer the directory the entry's lstat
			 * saw (the pod put a symlink, or another directory, in
			 * its place since; the identity, birth time and file
			 * handle, tells one on a reused inode number): its
			 * listing would go out under a name that does not lead
			 * to it. */
			if (fsops_readdir(root, l.path, l.len, O_NOFOLLOW, 0,
					  budget < PREFETCH_DIR_MAX ? budget : PREFETCH_DIR_MAX,
					  &l.ents, &l.n, &eof, &l.self) < 0) {
				listing_free(&l);
				continue;
			}
			tried += l.n;
			if (!eof || !l.self.has_attr || l.self.st.st_ino != e->st.st_ino ||
			    l.self.st.st_dev != e->st.st_dev ||
			    l.self.ident.btime_ns != e->ident.btime_ns ||
			    l.self.ident.generation != e->ident.generation) {
				listing_free(&l);
				continue;
			}
			if (n == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct listing *a = realloc(ls, ncap * sizeof(*a));

				if (!a) {
					listing_free(&l);
					r = -ENOMEM;
					break;
				}
				ls = a;
				cap = ncap;
			}
			budget -= (unsigned)l.n;
			ls[n++] = l;
		}
		if (r < 0 || late || budget == 0 || n >= PREFETCH_MAX_DIRS)
			break;
	}
	*out = ls;
	*n_out = n;
	return r;
}

static void do_readdir(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__ReadDirRequest *q = (const void *)req;
	Wsbridge__V1__ReadDirReply rep = WSBRIDGE__V1__READ_DIR_REPLY__INIT;
	Wsbridge__V1__DirListing **subp = NULL;
	struct listing top = { 0 }, *sub = NULL;
	struct fsops_dirent self;
	Wsbridge__V1__Attr a;
	size_t n_sub = 0, n_send = 0;
	bool eof;
	int r;

	r = fsops_readdir(&AD(data)->root, q->path.data, q->path.len, 0, q->offset,
			  q->max_entries, &top.ents, &top.n, &eof, &self);
	if (r < 0)
		return fail_path(call, r, "readdir", &q->path);
	if (self.has_attr) {
		attr_from_stat(&a, &self.st);
		attr_set_ident(&a, &self.ident);
		rep.attr = &a;
	}
	if (q->prefetch && q->offset == 0 && eof &&
	    prefetch(&AD(data)->root, &top, q->path.data, q->path.len, q->prefetch, &sub,
		     &n_sub) < 0) {
		/* Out of memory: the reply goes without the prefetch. */
		for (size_t i = 0; i < n_sub; i++)
			listing_free(&sub[i]);
		free(sub);
		sub = NULL;
		n_sub = 0;
	}
	r = listing_msgs(&top);
	if (r < 0) {
		rpc_fail_errno(call, -r, "readdir");
		goto out;
	}
	for (n_send = 0; n_send < n_sub; n_send++) {
		struct listing *l = &sub[n_send];

		if (listing_msgs(l) < 0)
			break; /* out of memory: send the listings ready so far */
		wsbridge__v1__dir_listing__init(&l->msg);
		l->msg.path.data = (uint8_t *)l->path;
		l->msg.path.len = l->len;
		l->msg.n_entries = l->n;
		l->msg.entries = l->dep;
		if (l->self.has_attr) {
			attr_from_stat(&l->self_attr, &l->self.st);
			attr_set_ident(&l->self_attr, &l->self.ident);
			l->msg.attr = &l->self_attr;
		}
	}
	if (n_send && !(subp = calloc(n_send, sizeof(*subp))))
		n_send = 0;
	for (size_t i = 0; i < n_send; i++)
		subp[i] = &sub[i].msg;
	rep.n_entries = top.n;
	rep.entries = top.dep;
	rep.eof = eof;
	rep.n_subdirs = n_send;
	rep.subdirs = subp;
	rpc_reply(call, &rep.base);
out:
	free(subp);
	for (size_t i = 0; i < n_sub; i++)
		listing_free(&sub[i]);
	free(sub);
	listing_free(&top);
}

/* ---- sessions (session.h) ---- */

/*
 * Hold the session that @p call names in its "wsbridge-session" metadata:
 * its owner key in *ret_key, 0 when the call names none. Returns 0, or ends
 * the call (INVALID_ARGUMENT for a malformed id, RESOURCE_EXHAUSTED past
 * SESSION_MAX) and returns -1. Drop the hold with session_done(). Any thread.
 */
static int session_hold(struct rpc_call *call, struct agentd *ad, const char *what,
			uint64_t *ret_key)
{
	const uint8_t *id;
	size_t len;
	int r;

	*ret_key = 0;
	if (!ad->sessions || !rpc_metadata(call, WSB_SESSION_MD, &id, &len))
		return 0;
	r = sessions_hold(ad->sessions, id, len, ret_key);
	if (r == 0)
		return 0;
	if (r == -EINVAL)
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "%s: metadata '%s' must be 1 to %u ASCII letters, digits, '-' or '_'",
			   what, WSB_SESSION_MD, WSB_SESSION_ID_MAX);
	else if (r == -EMFILE) /* every client's limit: ENFILE, as for handles */
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENFILE,
			   "%s: too many client sessions (limit %u)", what, SESSION_MAX);
	else
		rpc_fail_errno(call, -r, "%s", what);
	return -1;
}

void svc_session_touch(struct rpc_call *call, void *arg)
{
	struct agentd *ad = arg;
	const uint8_t *id;
	size_t len;

	if (ad->sessions && rpc_metadata(call, WSB_SESSION_MD, &id, &len))
		sessions_touch(ad->sessions, id, len, (uint64_t)wsb_mono_ns());
}

/* Drop session_hold()'s hold (key 0: none). Any thread. */
static void session_done(struct agentd *ad, uint64_t key)
{
	if (key)
		sessions_drop(ad->sessions, key, (uint64_t)wsb_mono_ns());
}

/*
 * Whether an Open's read-ahead of @p read_ahead bytes of the file @p st
 * fits the reply budget (rpc_reply_room()): an Open's reply cannot be
 * refused (its handle would be lost), but its data is optional
 * (OpenRequest.read_ahead: empty data, not data_eof, means read it), so
 * past the budget the handle goes alone. Small files always fit.
 */
static bool ahead_has_room(const struct rpc_call *call, uint32_t read_ahead, const struct stat *st)
{
	uint64_t want = read_ahead < FSOPS_CHUNK_MAX - 1 ? read_ahead : FSOPS_CHUNK_MAX - 1;

	if ((uint64_t)st->st_size < want)
		want = (uint64_t)st->st_size;
	return want <= RPC_REPLY_SMALL || rpc_reply_room(call) >= want + RPC_REPLY_SMALL;
}

static void open_call(struct rpc_call *call, const Wsbridge__V1__OpenRequest *q,
		      struct agentd *ad, uint64_t owner)
{
	Wsbridge__V1__OpenReply rep = WSBRIDGE__V1__OPEN_REPLY__INIT;
	Wsbridge__V1__Attr a;
	uint8_t *buf = NULL;
	struct fsops_ident ident = { 0 };
	struct stat st, after;
	uint64_t id;
	bool created = false;
	int flags, r;

	switch (q->access) {
	case WSBRIDGE__V1__ACCESS__RDONLY:
		flags = O_RDONLY;
		break;
	case WSBRIDGE__V1__ACCESS__WRONLY:
		flags = O_WRONLY;
		break;
	case WSBRIDGE__V1__ACCESS__RDWR:
		flags = O_RDWR;
		break;
	default:
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "open: unknown access mode %d",
			   (int)q->access);
		return;
	}
	if (q->create)
		flags |= O_CREAT;
	if (q->exclusive)
		flags |= O_EXCL;
	if (q->truncate)
		flags |= O_TRUNC;
	if (q->append)
		flags |= O_APPEND;
	if (q->nofollow)
		flags |= O_NOFOLLOW;
	if (q->directory)
		flags |= O_DIRECTORY;
	if (q->reopen && (flags & (O_CREAT | O_EXCL | O_DIRECTORY))) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "open: reopen of handle %llu with create, exclusive or directory",
			   (unsigned long long)q->reopen);
		return;
	}
	if (q->reopen)
		r = fsops_reopen(ad->handles, owner, q->reopen, flags & ~O_NOFOLLOW, &id, &st);
	else
		r = fsops_open(&ad->root, ad->handles, owner, q->path.data, q->path.len, flags,
			       q->mode & 07777, &id, &st, &ident, &created);
	/* The handle table (and agentd's descriptors) serve every process of
	 * every client: to a process on the host that is the system-wide
	 * limit, ENFILE (open(2)), not its own EMFILE, which would send it
	 * looking for descriptors it leaked. */
	if (r == -EMFILE && fsops_handles_count(ad->handles) >= fsops_handles_limit(ad->handles)) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENFILE,
			   "too many open handles (limit %u, agentd --max-handles)",
			   fsops_handles_limit(ad->handles));
		return;
	}
	/* handle_reserve()'s rule (fsops.c), odd limits included. */
	if (r == -EMFILE && owner == 0 &&
	    fsops_handles_unowned(ad->handles) >= fsops_handles_limit(ad->handles) / 2) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENFILE,
			   "too many open handles of no session (half of agentd --max-handles "
			   "%u; calls that name a session have the other half: docs/protocol.md "
			   "\"Sessions\")",
			   fsops_handles_limit(ad->handles));
		return;
	}
	if (r == -EMFILE || r == -ENFILE) {
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, ENFILE,
			   "agentd is out of file descriptors (%s)", strerror(-r));
		return;
	}
	if (r < 0 && q->reopen)
		return fail_handle(call, r, "reopen", q->reopen);
	if (r < 0)
		return fail_path(call, r, "open", &q->path);
	if (q->reopen)
		fsops_fident(&ad->root, ad->handles, id, &ident);
	/* After O_TRUNC: open(2) by the host's process would have cleared
	 * them (proto OpenRequest.kill_suidgid); not for a file it created,
	 * which nothing truncated (the kernel flags every O_TRUNC create). A
	 * failure leaves the open standing, as the truncation it follows. */
	if (q->kill_suidgid && q->truncate && !created && S_ISREG(st.st_mode)) {
		int k = fsops_kill_suidgid(ad->handles, id);

		if (k > 0 && fsops_fstat(ad->handles, id, &st) == 0)
			rep.suidgid_killed = true;
		else if (k < 0)
			wsb_debug("open: clearing set-ID bits after O_TRUNC: %s", strerror(-k));
	}
	attr_from_stat(&a, &st);
	attr_set_ident(&a, &ident);
	rep.handle = id;
	rep.attr = &a;
	rep.existed = q->create && !created;
	if (q->read_ahead && q->access != WSBRIDGE__V1__ACCESS__WRONLY && S_ISREG(st.st_mode) &&
	    ahead_has_room(call, q->read_ahead, &st)) {
		size_t want = q->read_ahead < FSOPS_CHUNK_MAX - 1 ? q->read_ahead : FSOPS_CHUNK_MAX - 1;
		ssize_t n;

		if ((uint64_t)st.st_size < want)
			want = (size_t)st.st_size;
		/* One byte more than wanted: fewer back means the end of the
		 * file (also for one that grew or shrank since the fstat). */
		buf = malloc(want + 1);
		n = buf ? fsops_read(ad->handles, id, 0, buf, want + 1) : -ENOMEM;
		if (n >= 0) {
			rep.data_eof = (size_t)n <= want;
			rep.data.data = buf;
			rep.data.len = (size_t)n <= want ? (size_t)n : want;
		}
		/* The attributes after the read: it may have set atime
		 * (mount(8) relatime), and a client answers a stat from
		 * them (wsfs: the kernel asks after every read). Only the
		 * atime, though: a write in between keeps the attributes
		 * that match the data. */
		if (n >= 0 && fsops_fstat(ad->handles, id, &after) == 0 &&
		    after.st_ino == st.st_ino && after.st_size == st.st_size &&
		    after.st_mtim.tv_sec == st.st_mtim.tv_sec &&
		    after.st_mtim.tv_nsec == st.st_mtim.tv_nsec &&
		    after.st_ctim.tv_sec == st.st_ctim.tv_sec &&
		    after.st_ctim.tv_nsec == st.st_ctim.tv_nsec) {
			attr_from_stat(&a, &after);
			attr_set_ident(&a, &ident);
		}
	}
	rpc_reply(call, &rep.base);
	free(buf);
}

static void do_open(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	struct agentd *ad = AD(data);
	uint64_t owner;

	if (session_hold(call, ad, "open", &owner) < 0)
		return;
	open_call(call, (const void *)req, ad, owner);
	session_done(ad, owner);
}

static void do_read(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__ReadRequest *q = (const void *)req;
	Wsbridge__V1__ReadReply rep = WSBRIDGE__V1__READ_REPLY__INIT;
	Wsbridge__V1__Attr a;
	struct stat st;
	uint8_t *buf;
	ssize_t n;

	if (q->size > FSOPS_CHUNK_MAX) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "read size %u bytes exceeds the limit of %zu bytes", q->size,
			   FSOPS_CHUNK_MAX);
		return;
	}
	buf = malloc(q->size ? q->size : 1);
	if (!buf) {
		rpc_fail_errno(call, ENOMEM, "read");
		return;
	}
	n = fsops_read(AD(data)->handles, q->handle, q->offset, buf, q->size);
	if (n < 0) {
		fail_handle(call, (int)n, "read", q->handle);
	} else {
		rep.data.data = buf;
		rep.data.len = (size_t)n;
		/* After the read, which may have set atime (as Open's). */
		if (fsops_fstat(AD(data)->handles, q->handle, &st) == 0) {
			attr_from_stat(&a, &st);
			rep.attr = &a;
		}
		rpc_reply(call, &rep.base);
	}
	free(buf);
}

static struct timespec timespec_from_proto(const Wsbridge__V1__TimeSpec *t);

/*
 * @q's change as fsops_setattr() takes it, into *@sa. Returns 0, or
 * -EINVAL with *@why set (what is wrong, a phrase) when valid names a bit
 * agentd does not know, or (@no_size) SIZE, or when a time's nsec is 10^9
 * or more (proto/wsbridge.proto TimeSpec).
 */
static int setattr_from_proto(const Wsbridge__V1__SetAttrRequest *q, bool no_size,
			      struct fsops_setattr *sa, const char **why)
{
	uint32_t known = FSOPS_SET_MODE | FSOPS_SET_UID | FSOPS_SET_GID;

	if (!no_size)
		known |= FSOPS_SET_SIZE;
	if (q->valid & ~known) {
		*why = no_size && (q->valid & FSOPS_SET_SIZE) ? "a size in valid"
							      : "unknown bits in valid";
		return -EINVAL;
	}
	if ((q->atime && !wsb_time_wire_ok(q->atime->nsec)) ||
	    (q->mtime && !wsb_time_wire_ok(q->mtime->nsec))) {
		*why = "a time whose nsec is 10^9 or more";
		return -EINVAL;
	}
	*sa = (struct fsops_setattr){
		.valid = q->valid,
		.mode = q->mode & 07777,
		.uid = q->uid,
		.gid = q->gid,
		.size = q->size,
		.atime = timespec_from_proto(q->atime),
		.mtime = timespec_from_proto(q->mtime),
	};
	return 0;
}

static void do_write(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__WriteRequest *q = (const void *)req;
	Wsbridge__V1__WriteReply rep = WSBRIDGE__V1__WRITE_REPLY__INIT;
	struct agentd *ad = AD(data);
	Wsbridge__V1__Attr a;
	struct fsops_setattr sa;
	const char *why = NULL;
	char msg[128];
	struct stat st;
	ssize_t n;

	if (q->data.len > FSOPS_CHUNK_MAX) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "write of %zu bytes exceeds the limit of %zu bytes", q->data.len,
			   FSOPS_CHUNK_MAX);
		return;
	}
	if (q->setattr_after && setattr_from_proto(q->setattr_after, true, &sa, &why) < 0) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "write: setattr_after has %s (valid %#x); nothing written", why,
			   q->setattr_after->valid);
		return;
	}
	/* Before the write, as the kernel does (file_remove_privs()); a
	 * failure (agentd owns neither file nor CAP_FOWNER) leaves the write
	 * to be made, as only the bits are at stake. */
	if (q->kill_suidgid && q->data.len > 0) {
		int k = fsops_kill_suidgid(ad->handles, q->handle);

		if (k == -EBADF)
			return fail_handle(call, k, "write", q->handle);
		if (k < 0)
			wsb_debug("write: clearing set-ID bits: %s", strerror(-k));
		rep.suidgid_killed = k > 0;
	}
	n = fsops_write(ad->handles, q->handle, q->offset, q->data.data, q->data.len, &st);
	if (n < 0)
		return fail_handle(call, (int)n, "write", q->handle);
	if (q->setattr_after && (size_t)n == q->data.len) {
		struct stat st2;
		int r = fsops_setattr(&ad->root, ad->handles, NULL, 0, q->handle, &sa, &st2);

		rep.setattr_done = true;
		if (r == 0) {
			st = st2;
		} else {
			/* As SetAttr's own failure (fail_handle()) says it. */
			snprintf(msg, sizeof(msg), "setattr on handle %llu: %s",
				 (unsigned long long)q->handle, strerror(-r));
			rep.setattr_errno = (char *)(wsb_errno_name(-r) ? wsb_errno_name(-r) : "EIO");
			rep.setattr_message = msg;
		}
	}
	attr_from_stat(&a, &st);
	rep.written = (uint32_t)n;
	rep.attr = &a;
	rpc_reply(call, &rep.base);
}

static void do_fsync(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__FsyncRequest *q = (const void *)req;
	int r = fsops_fsync(AD(data)->handles, q->handle, q->datasync);

	if (r < 0)
		return fail_handle(call, r, q->datasync ? "fdatasync" : "fsync", q->handle);
	reply_empty(call);
}

/*
 * Release: q->handle alone fails as any call on an unknown handle does
 * (FAILED_PRECONDITION, EBADF). With `more`, a client that batches the
 * handles its closes left (wsfs fs.c "Releases"): each is released as
 * if alone, and one agentd does not know (a session reaped, a batch
 * sent twice after a reconnect) fails neither the others nor the call.
 */
static void do_release(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__HandleRequest *q = (const void *)req;
	Wsbridge__V1__ReleaseReply rep = WSBRIDGE__V1__RELEASE_REPLY__INIT;
	struct agentd *ad = AD(data);
	unsigned unknown = 0;
	int r = fsops_release(ad->handles, q->handle);

	if (r < 0 && q->n_more == 0)
		return fail_handle(call, r, "release", q->handle);
	unknown += r < 0;
	for (size_t i = 0; i < q->n_more; i++)
		unknown += fsops_release(ad->handles, q->more[i]) < 0;
	if (unknown)
		wsb_debug("Release of %zu handles: %u were not open", q->n_more + 1, unknown);
	rep.released = (uint32_t)(q->n_more + 1);
	rpc_reply(call, &rep.base);
}

/* A proto TimeSpec as utimensat(2) wants it: unset -> UTIME_OMIT. */
static struct timespec timespec_from_proto(const Wsbridge__V1__TimeSpec *t)
{
	struct timespec ts = { 0, UTIME_OMIT };

	if (!t)
		return ts;
	if (t->how_case == WSBRIDGE__V1__TIME_SPEC__HOW_NOW) {
		if (t->now)
			ts.tv_nsec = UTIME_NOW;
	} else if (t->how_case == WSBRIDGE__V1__TIME_SPEC__HOW_NS) {
		ts = wsb_time_of_wire(t->ns, t->s, t->nsec);
	}
	return ts;
}

static void do_setattr(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__SetAttrRequest *q = (const void *)req;
	struct agentd *ad = AD(data);
	struct fsops_setattr sa;
	const char *why;
	struct stat st;
	int r;

	if (setattr_from_proto(q, false, &sa, &why) < 0) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "setattr: %s (valid %#x)", why,
			   q->valid);
		return;
	}
	sa.kill_suidgid = q->kill_suidgid;
	r = fsops_setattr(&ad->root, ad->handles, q->path.data, q->path.len, q->handle, &sa, &st);
	if (r < 0) {
		if (q->handle)
			return fail_handle(call, r, "setattr", q->handle);
		return fail_path(call, r, "setattr", &q->path);
	}
	reply_attr(call, &st, NULL);
}

static void do_mkdir(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__MkdirRequest *q = (const void *)req;
	struct fsops_ident id = { 0 };
	struct stat st;
	int r;

	r = fsops_mkdir(&AD(data)->root, q->path.data, q->path.len, q->mode & 07777, &st, &id);
	if (r < 0)
		return fail_path(call, r, "mkdir", &q->path);
	reply_attr(call, &st, &id);
}

static void do_mknod(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__MknodRequest *q = (const void *)req;
	mode_t type = q->mode & S_IFMT;
	struct fsops_ident id = { 0 };
	struct stat st;
	int r;

	if (type == S_IFCHR || type == S_IFBLK) {
		char *esc = wsb_escape(q->path.data, q->path.len, ESC_MAX);

		rpc_finish(call, WSB_PERMISSION_DENIED, EPERM,
			   "mknod '%s': device nodes are not allowed in the workspace",
			   esc ? esc : "?");
		free(esc);
		return;
	}
	r = fsops_mknod(&AD(data)->root, q->path.data, q->path.len, q->mode, &st, &id);
	if (r < 0)
		return fail_path(call, r, "mknod", &q->path);
	reply_attr(call, &st, &id);
}

static void do_unlink(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__PathRequest *q = (const void *)req;
	Wsbridge__V1__AttrReply rep = WSBRIDGE__V1__ATTR_REPLY__INIT;
	struct stat st;
	int r = fsops_unlink(&AD(data)->root, q->path.data, q->path.len, &st);

	if (r < 0)
		return fail_path(call, r, "unlink", &q->path);
	if (r > 0)
		return reply_attr(call, &st, NULL); /* other names keep the file */
	rpc_reply(call, &rep.base);
}

static void do_rmdir(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__PathRequest *q = (const void *)req;
	Wsbridge__V1__AttrReply rep = WSBRIDGE__V1__ATTR_REPLY__INIT;
	struct stat st;
	int r = fsops_rmdir(&AD(data)->root, q->path.data, q->path.len, &st);

	if (r < 0)
		return fail_path(call, r, "rmdir", &q->path);
	if (r > 0)
		return reply_attr(call, &st, NULL);
	rpc_reply(call, &rep.base);
}

static void do_rename(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__RenameRequest *q = (const void *)req;
	Wsbridge__V1__RenameReply rep = WSBRIDGE__V1__RENAME_REPLY__INIT;
	unsigned flags = (q->noreplace ? RENAME_NOREPLACE : 0) | (q->exchange ? RENAME_EXCHANGE : 0);
	struct agentd *ad = AD(data);
	Wsbridge__V1__Attr a;
	uint64_t owner = 0;
	struct stat st;
	int r;

	if (q->keep_replaced && session_hold(call, ad, "rename", &owner) < 0)
		return;
	r = fsops_rename_keep(&ad->root, q->keep_replaced ? ad->handles : NULL, owner,
			      q->from.data, q->from.len, q->to.data, q->to.len, flags,
			      &rep.replaced, &st);
	session_done(ad, owner);
	if (r < 0)
		return fail_paths(call, r, "rename", &q->from, &q->to);
	/* The kept file's, or a replaced directory's (r 1; an older client
	 * reads the field only with a handle). */
	if (rep.replaced || r > 0) {
		attr_from_stat(&a, &st);
		if (rep.replaced) {
			struct fsops_ident id;

			fsops_fident(&ad->root, ad->handles, rep.replaced, &id);
			attr_set_ident(&a, &id);
		}
		rep.replaced_attr = &a;
	}
	rpc_reply(call, &rep.base);
}

static void do_link(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__LinkRequest *q = (const void *)req;
	struct fsops_ident id = { 0 };
	struct stat st;
	int r;

	r = fsops_link(&AD(data)->root, q->from.data, q->from.len, q->to.data, q->to.len, &st,
		       &id);
	if (r < 0)
		return fail_paths(call, r, "link", &q->from, &q->to);
	reply_attr(call, &st, &id);
}

static void do_symlink(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__SymlinkRequest *q = (const void *)req;
	struct fsops_ident id = { 0 };
	struct stat st;
	int r;

	r = fsops_symlink(&AD(data)->root, q->target.data, q->target.len, q->path.data, q->path.len,
			  &st, &id);
	if (r < 0)
		return fail_path(call, r, "symlink", &q->path);
	reply_attr(call, &st, &id);
}

static void do_readlink(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__PathRequest *q = (const void *)req;
	Wsbridge__V1__ReadlinkReply rep = WSBRIDGE__V1__READLINK_REPLY__INIT;
	char *t;
	size_t n;
	int r;

	r = fsops_readlink(&AD(data)->root, q->path.data, q->path.len, &t, &n);
	if (r < 0)
		return fail_path(call, r, "readlink", &q->path);
	rep.target.data = (uint8_t *)t;
	rep.target.len = n;
	rpc_reply(call, &rep.base);
	free(t);
}

static void do_statfs(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__PathRequest *q = (const void *)req;
	Wsbridge__V1__StatFsReply rep = WSBRIDGE__V1__STAT_FS_REPLY__INIT;
	struct statvfs v;
	int r;

	r = fsops_statfs(&AD(data)->root, q->path.data, q->path.len, &v);
	if (r < 0)
		return fail_path(call, r, "statfs", &q->path);
	rep.bsize = (uint32_t)v.f_bsize;
	rep.frsize = (uint32_t)v.f_frsize;
	rep.blocks = v.f_blocks;
	rep.bfree = v.f_bfree;
	rep.bavail = v.f_bavail;
	rep.files = v.f_files;
	rep.ffree = v.f_ffree;
	rep.namemax = (uint32_t)v.f_namemax;
	rpc_reply(call, &rep.base);
}

/* "getxattr 'user.x' of PATH" (or "on handle N") for the failure
 * messages of the xattr calls. */
static void fail_xattr(struct rpc_call *call, int err, const char *op,
		       const ProtobufCBinaryData *name, const ProtobufCBinaryData *path,
		       uint64_t handle)
{
	char *en = wsb_escape(name->data, name->len, ESC_MAX);
	char what[ESC_MAX * 4 + 32];

	snprintf(what, sizeof(what), "%s '%s'%s", op, en ? en : "?", handle ? "" : " of");
	free(en);
	if (handle)
		fail_handle(call, err, what, handle);
	else
		fail_path(call, err, what, path);
}

static void do_getxattr(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__GetXattrRequest *q = (const void *)req;
	Wsbridge__V1__GetXattrReply rep = WSBRIDGE__V1__GET_XATTR_REPLY__INIT;
	void *v;
	size_t n;
	int r;

	r = fsops_getxattr(&AD(data)->root, AD(data)->handles, q->path.data, q->path.len, q->handle,
			   q->name.data, q->name.len, &v, &n);
	if (r < 0)
		return fail_xattr(call, r, "getxattr", &q->name, &q->path, q->handle);
	rep.value.data = v;
	rep.value.len = n;
	rpc_reply(call, &rep.base);
	free(v);
}

static void do_setxattr(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__SetXattrRequest *q = (const void *)req;
	int flags = (q->create ? XATTR_CREATE : 0) | (q->replace ? XATTR_REPLACE : 0);
	int r;

	if (q->value.len > FSOPS_XATTR_MAX) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, E2BIG,
			   "setxattr: a value of %zu bytes exceeds the limit of %zu bytes",
			   q->value.len, FSOPS_XATTR_MAX);
		return;
	}
	r = fsops_setxattr(&AD(data)->root, AD(data)->handles, q->path.data, q->path.len, q->handle,
			   q->name.data, q->name.len, q->value.data, q->value.len, flags);
	if (r < 0)
		return fail_xattr(call, r, "setxattr", &q->name, &q->path, q->handle);
	reply_empty(call);
}

static void do_listxattr(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__ListXattrRequest *q = (const void *)req;
	Wsbridge__V1__ListXattrReply rep = WSBRIDGE__V1__LIST_XATTR_REPLY__INIT;
	ProtobufCBinaryData *names = NULL;
	size_t n, count = 0;
	char *buf;
	int r;

	r = fsops_listxattr(&AD(data)->root, AD(data)->handles, q->path.data, q->path.len, q->handle,
			    &buf, &n);
	if (r < 0 && q->handle)
		return fail_handle(call, r, "listxattr", q->handle);
	if (r < 0)
		return fail_path(call, r, "listxattr", &q->path);
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			count++;
	if (count) {
		names = calloc(count, sizeof(*names));
		if (!names) {
			rpc_fail_errno(call, ENOMEM, "listxattr");
			free(buf);
			return;
		}
	}
	for (size_t i = 0, k = 0; i < n && k < count; k++) {
		size_t l = strnlen(buf + i, n - i);

		names[k].data = (uint8_t *)buf + i;
		names[k].len = l;
		i += l + 1;
	}
	rep.n_names = count;
	rep.names = names;
	rpc_reply(call, &rep.base);
	free(names);
	free(buf);
}

static void do_removexattr(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__RemoveXattrRequest *q = (const void *)req;
	int r;

	r = fsops_removexattr(&AD(data)->root, AD(data)->handles, q->path.data, q->path.len,
			      q->handle, q->name.data, q->name.len);
	if (r < 0)
		return fail_xattr(call, r, "removexattr", &q->name, &q->path, q->handle);
	reply_empty(call);
}

static void do_fallocate(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__FallocateRequest *q = (const void *)req;
	int fl = (q->keep_size ? FALLOC_FL_KEEP_SIZE : 0) |
		 (q->punch_hole ? FALLOC_FL_PUNCH_HOLE : 0) |
		 (q->zero_range ? FALLOC_FL_ZERO_RANGE : 0);
	int r;

	r = fsops_fallocate(AD(data)->handles, q->handle, fl, q->offset, q->length);
	if (r < 0)
		return fail_handle(call, r, "fallocate", q->handle);
	reply_empty(call);
}

static void do_lseek(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__LseekRequest *q = (const void *)req;
	Wsbridge__V1__LseekReply rep = WSBRIDGE__V1__LSEEK_REPLY__INIT;
	uint64_t off;
	int whence, r;

	if (q->whence == WSBRIDGE__V1__WHENCE__SEEK_DATA) {
		whence = SEEK_DATA;
	} else if (q->whence == WSBRIDGE__V1__WHENCE__SEEK_HOLE) {
		whence = SEEK_HOLE;
	} else {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "lseek: unknown whence %d",
			   (int)q->whence);
		return;
	}
	r = fsops_lseek(AD(data)->handles, q->handle, q->offset, whence, &off);
	if (r < 0)
		return fail_handle(call, r, "lseek", q->handle);
	rep.offset = off;
	rpc_reply(call, &rep.base);
}

static void do_copy_file_range(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__CopyFileRangeRequest *q = (const void *)req;
	Wsbridge__V1__CopyFileRangeReply rep = WSBRIDGE__V1__COPY_FILE_RANGE_REPLY__INIT;
	uint64_t copied = 0;
	int r;

	r = fsops_copy_file_range(AD(data)->handles, q->handle_in, q->offset_in, q->handle_out,
				  q->offset_out, q->length, &copied);
	if (r == -EBADF) {
		rpc_fail_errno(call, EBADF,
			       "copy_file_range from handle %llu to handle %llu: a handle is not "
			       "open, or the input is not open for reading, or the output not for "
			       "writing (or with append)",
			       (unsigned long long)q->handle_in, (unsigned long long)q->handle_out);
		return;
	}
	if (r < 0) {
		rpc_fail_errno(call, -r,
			       "copy_file_range of %llu bytes from handle %llu at %llu to handle "
			       "%llu at %llu",
			       (unsigned long long)q->length, (unsigned long long)q->handle_in,
			       (unsigned long long)q->offset_in, (unsigned long long)q->handle_out,
			       (unsigned long long)q->offset_out);
		return;
	}
	rep.copied = copied;
	rpc_reply(call, &rep.base);
}

/* ---- Upload: client stream ---- */

/** Uploads open at once at most: each holds two descriptors (its directory
 * and its temp file) until it commits or ends, and a client opening
 * thousands without ever committing ran agentd out of descriptors; gRPC
 * C-core then stops accepting connections for good (its listener gives up
 * at an accept(2) failing EMFILE). */
#define UPLOADS_MAX 64u

/* Uploads between do_upload() and upload_end(). Any thread. */
static atomic_uint n_uploads;

struct upload_call {
	struct agentd *ad;
	struct fsops_upload *u;
	ProtobufCBinaryData path; /* copy of the header's path, for messages */
	bool commit;              /* the client sent its commit chunk */
};

/*
 * Remove the temp file now: before the status reaches the client, so that a
 * client that sees a failure never sees the temp file either.
 */
static void upload_drop(struct upload_call *uc)
{
	fsops_upload_abort(uc->u);
	uc->u = NULL;
}

static void upload_end(struct upload_call *uc)
{
	atomic_fetch_sub(&n_uploads, 1);
	fsops_upload_abort(uc->u); /* no-op once committed (u == NULL) */
	free(uc->path.data);
	free(uc);
}

static void upload_chunk(struct rpc_call *call, ProtobufCMessage *msg, int err, void *arg);

/* Handle one chunk; 0 to ask for the next, or -1 once the call was ended. */
static int upload_take(struct rpc_call *call, struct upload_call *uc,
		       const Wsbridge__V1__UploadChunk *c)
{
	int r;

	if (!uc->u) {
		const Wsbridge__V1__UploadHeader *h = c->header;
		struct fsops_upload_opts o;

		if (!h) {
			rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
				   "upload: the first chunk must carry the header");
			return -1;
		}
		uc->path.data = malloc(h->path.len ? h->path.len : 1);
		if (!uc->path.data) {
			rpc_fail_errno(call, ENOMEM, "upload");
			return -1;
		}
		if (h->path.len)
			memcpy(uc->path.data, h->path.data, h->path.len);
		uc->path.len = h->path.len;
		o = (struct fsops_upload_opts){
			.mode = h->mode & 07777,
			.mode_set = h->mode_set,
			.mkdirs = h->mkdirs,
			.exclusive = h->exclusive,
			.size_hint = h->size_hint,
			.keep_mode = h->keep_mode,
			.follow = h->follow,
		};
		r = fsops_upload_begin(&uc->ad->root, h->path.data, h->path.len, &o, &uc->u);
		if (r < 0) {
			fail_path(call, r, "upload", &uc->path);
			return -1;
		}
	} else if (uc->commit) {
		upload_drop(uc);
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "upload: a chunk came after the commit chunk");
		return -1;
	} else if (c->header) {
		upload_drop(uc);
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "upload: only the first chunk may carry a header");
		return -1;
	}
	if (c->data.len > FSOPS_CHUNK_MAX) {
		upload_drop(uc);
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "upload: a chunk of %zu bytes exceeds the limit of %zu bytes",
			   c->data.len, FSOPS_CHUNK_MAX);
		return -1;
	}
	r = fsops_upload_write(uc->u, c->data.data, c->data.len);
	if (r == 0 && c->hole)
		r = fsops_upload_hole(uc->u, c->hole);
	if (r < 0) {
		upload_drop(uc);
		fail_path(call, r, "upload", &uc->path);
		return -1;
	}
	uc->commit = c->commit;
	return 0;
}

static void upload_finish(struct rpc_call *call, struct upload_call *uc)
{
	Wsbridge__V1__UploadReply rep = WSBRIDGE__V1__UPLOAD_REPLY__INIT;
	Wsbridge__V1__Attr a;
	struct stat st;
	uint64_t size;
	int r;

	if (!uc->u) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "upload: the stream ended before the header");
		return;
	}
	/*
	 * gRPC C-core reports a client's cancel (RST_STREAM) to RECV_MESSAGE
	 * just like a half-close: a NULL message. Only the commit chunk tells
	 * a complete upload from a cut one.
	 */
	if (!uc->commit) {
		upload_drop(uc);
		rpc_finish(call, WSB_ABORTED, ECANCELED,
			   "upload: the stream ended without its commit chunk (cancelled or cut); "
			   "nothing was written");
		return;
	}
	r = fsops_upload_sync(uc->u);
	if (r < 0) {
		upload_drop(uc);
		return fail_path(call, r, "upload", &uc->path);
	}
	if (rpc_cancelled(call)) {
		upload_drop(uc);
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "upload cancelled");
		return;
	}
	size = fsops_upload_size(uc->u);
	r = fsops_upload_commit(uc->u, &st);
	uc->u = NULL; /* commit freed it, in every case */
	if (r < 0)
		return fail_path(call, r, "upload", &uc->path);
	attr_from_stat(&a, &st);
	rep.size = size;
	rep.attr = &a;
	rpc_reply(call, &rep.base);
}

static void upload_chunk(struct rpc_call *call, ProtobufCMessage *msg, int err, void *arg)
{
	struct upload_call *uc = arg;
	int r;

	if (!msg) {
		if (err != 0)
			upload_drop(uc);
		if (err == 0)
			upload_finish(call, uc);
		else if (err == -EBADMSG)
			rpc_finish(call, WSB_INVALID_ARGUMENT, EBADMSG,
				   "upload: a chunk is not a valid UploadChunk");
		else
			rpc_finish(call, WSB_CANCELLED, ECANCELED, "upload cancelled");
		upload_end(uc);
		return;
	}
	r = upload_take(call, uc, (const Wsbridge__V1__UploadChunk *)msg);
	protobuf_c_message_free_unpacked(msg, NULL);
	if (r < 0) {
		upload_end(uc);
		return;
	}
	r = rpc_recv(call, upload_chunk, uc);
	if (r < 0) {
		upload_drop(uc);
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "upload cancelled");
		upload_end(uc);
	}
}

static void do_upload(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	struct upload_call *uc;

	if (atomic_fetch_add(&n_uploads, 1) >= UPLOADS_MAX) {
		atomic_fetch_sub(&n_uploads, 1);
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EAGAIN,
			   "%u uploads are open already (the limit): retry once one ended",
			   UPLOADS_MAX);
		return;
	}
	uc = calloc(1, sizeof(*uc));
	if (!uc) {
		atomic_fetch_sub(&n_uploads, 1);
		rpc_fail_errno(call, ENOMEM, "upload");
		return;
	}
	uc->ad = AD(data);
	if (rpc_recv(call, upload_chunk, uc) < 0) {
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "upload cancelled");
		upload_end(uc);
	}
}

/* ---- Download: server stream ---- */

/** Downloads streaming at once at most: each holds a FSOPS_CHUNK_MAX
 * (1 MiB) buffer, and a client opening thousands would take agentd's
 * memory (400 took it from 11 to 833 MB). */
#define DOWNLOADS_MAX 64u

/** A Download chunk's data past the reply budget, bytes: with its attr
 * and framing within RPC_REPLY_SMALL, so never refused. */
#define DOWNLOAD_CHUNK_SMALL ((size_t)RPC_REPLY_SMALL / 2)

/* Downloads between do_download() and download_end(). Any thread. */
static atomic_uint n_downloads;

struct download_call {
	struct fsops_download *d;
	uint8_t *buf;          /* FSOPS_CHUNK_MAX bytes */
	struct stat st;        /* sent with the first chunk */
	bool first;
	ProtobufCBinaryData path;
};

static void download_end(struct download_call *dc)
{
	atomic_fetch_sub(&n_downloads, 1);
	fsops_download_free(dc->d);
	free(dc->buf);
	free(dc->path.data);
	free(dc);
}

static void download_sent(struct rpc_call *call, bool ok, void *arg);

/* Send the next chunk, or end the call. */
static void download_step(struct rpc_call *call, struct download_call *dc)
{
	Wsbridge__V1__DownloadChunk c = WSBRIDGE__V1__DOWNLOAD_CHUNK__INIT;
	Wsbridge__V1__Attr a;
	size_t max = rpc_reply_room(call);
	uint64_t hole;
	ssize_t n;
	int r;

	/* A chunk no larger than the reply budget has room for, and at
	 * least one small enough never to be refused (its data, the attr
	 * and the framing within RPC_REPLY_SMALL): past the budget a
	 * download slows down instead of failing, and one whose client
	 * does not read holds no more than that. */
	if (max > FSOPS_CHUNK_MAX)
		max = FSOPS_CHUNK_MAX;
	if (max < DOWNLOAD_CHUNK_SMALL)
		max = DOWNLOAD_CHUNK_SMALL;
	n = fsops_download_next(dc->d, dc->buf, max, &hole);
	if (n < 0) {
		fail_path(call, (int)n, "download", &dc->path);
		download_end(dc);
		return;
	}
	if (n == 0 && hole == 0 && !dc->first) {
		rpc_finish(call, WSB_OK, 0, NULL);
		download_end(dc);
		return;
	}
	if (dc->first) {
		attr_from_stat(&a, &dc->st);
		c.attr = &a;
		dc->first = false;
	}
	c.data.data = dc->buf;
	c.data.len = (size_t)n;
	c.hole = hole;
	r = rpc_send(call, &c.base, download_sent, dc);
	if (r < 0) {
		rpc_finish_send_error(call, r, "download");
		download_end(dc);
	}
}

static void download_sent(struct rpc_call *call, bool ok, void *arg)
{
	struct download_call *dc = arg;

	if (!ok) {
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "download cancelled");
		download_end(dc);
		return;
	}
	download_step(call, dc);
}

static void do_download(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__DownloadRequest *q = (const void *)req;
	struct download_call *dc;
	int r;

	if (atomic_fetch_add(&n_downloads, 1) >= DOWNLOADS_MAX) {
		atomic_fetch_sub(&n_downloads, 1);
		rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EAGAIN,
			   "%u downloads are streaming already (the limit): retry once one ended",
			   DOWNLOADS_MAX);
		return;
	}
	dc = calloc(1, sizeof(*dc));
	if (!dc || !(dc->buf = malloc(FSOPS_CHUNK_MAX)) ||
	    !(dc->path.data = malloc(q->path.len ? q->path.len : 1))) {
		rpc_fail_errno(call, ENOMEM, "download");
		atomic_fetch_sub(&n_downloads, 1);
		if (dc) {
			free(dc->buf);
			free(dc);
		}
		return;
	}
	if (q->path.len)
		memcpy(dc->path.data, q->path.data, q->path.len);
	dc->path.len = q->path.len;
	dc->first = true;
	r = fsops_download_begin(&AD(data)->root, q->path.data, q->path.len, q->offset, q->length,
				 &dc->st, &dc->d);
	if (r == -EINVAL) {
		char *esc = wsb_escape(q->path.data, q->path.len, ESC_MAX);

		rpc_finish(call, WSB_FAILED_PRECONDITION, EINVAL,
			   "download '%s': not a regular file", esc ? esc : "?");
		free(esc);
	} else if (r < 0) {
		fail_path(call, r, "download", &q->path);
	}
	if (r < 0) {
		download_end(dc);
		return;
	}
	download_step(call, dc);
}

/* ---- Watch: server stream on the loop thread ---- */

/* The watcher behind every Watch call; created by svc_workspace_register. */
static struct watcher *ws_watcher;

#define KIND_IS(w, p) ((int)(w) == (int)WSBRIDGE__V1__WATCH_EVENT__KIND__##p)
_Static_assert(KIND_IS(WATCH_CHANGED, CHANGED) && KIND_IS(WATCH_CREATED, CREATED) &&
		       KIND_IS(WATCH_DELETED, DELETED) && KIND_IS(WATCH_MOVED, MOVED) &&
		       KIND_IS(WATCH_OVERFLOW, OVERFLOW) && KIND_IS(WATCH_READY, READY),
	       "enum watch_kind must match proto WatchEvent.Kind");

/* CHANGED events, and CREATED or MOVED of non-directories (or with
 * changed), per WatchBatch that carry the path's attributes; past that a
 * client asks with Stat (WatchEvent.attr). */
#define WATCH_ATTRS_MAX 1024

struct watch_call {
	struct rpc_call *call;
	struct agentd *ad;
	const struct resolve_root *root;
	struct watch_sub *sub;     /* NULL for a no_events call */
	uint64_t session;          /* owner key held (session_hold), or 0 */
	uint64_t id;               /* WatchBatch.stream: WatchSync finds it */
	struct watch_call *next;   /* quiet_calls or sub_calls; loop thread */
	struct rpc_room_wait room; /* the next batch waits for room (watch_sent) */
};

/* The open no_events Watch calls (loop thread only): svc_workspace_shutdown()
 * ends them. */
static struct watch_call *quiet_calls;
/* svc_workspace_shutdown() ran: no new no_events call (loop thread). */
static bool quiet_stopped;
/* The open Watch calls with events (loop thread only), for WatchSync. */
static struct watch_call *sub_calls;

/* Free @p wc, whose call has ended, dropping its session hold. Loop thread. */
static void wc_free(struct watch_call *wc)
{
	struct watch_call **pp = wc->sub ? &sub_calls : &quiet_calls;

	while (*pp && *pp != wc)
		pp = &(*pp)->next;
	if (*pp)
		*pp = wc->next;
	rpc_room_cancel(&wc->room);
	session_done(wc->ad, wc->session);
	free(wc);
}

/* The open Watch call with events of id @p id, or NULL. Loop thread. */
static struct watch_call *wc_find(uint64_t id)
{
	struct watch_call *wc = sub_calls;

	while (wc && wc->id != id)
		wc = wc->next;
	return wc;
}

static void watch_sent(struct rpc_call *call, bool ok, void *arg);

/* watch_sub_ops.deliver: one WatchBatch per batch, one send at a time;
 * @p sync goes with the call's id (WatchBatch.sync, stream). */
static int watch_deliver(struct watch_sub *sub, const struct watch_event *ev, size_t n,
			 uint64_t sync, void *arg)
{
	struct watch_call *wc = arg;
	Wsbridge__V1__WatchBatch b = WSBRIDGE__V1__WATCH_BATCH__INIT;
	/* calloc(0) may give NULL: a batch of only a sync has no events. */
	Wsbridge__V1__WatchEvent *e = calloc(n ? n : 1, sizeof(*e));
	Wsbridge__V1__WatchEvent **ep = calloc(n ? n : 1, sizeof(*ep));
	size_t n_attr = 0;
	Wsbridge__V1__Attr *a = calloc(n == 0 ? 1 : n < WATCH_ATTRS_MAX ? n : WATCH_ATTRS_MAX,
				       sizeof(*a));
	struct watch_stats ws;
	int r;

	watch_get_stats(ws_watcher, &ws);
	if (!e || !ep || !a) {
		free(e);
		free(ep);
		free(a);
		rpc_fail_errno(wc->call, ENOMEM, "watch");
		wc_free(wc);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		wsbridge__v1__watch_event__init(&e[i]);
		e[i].kind = (Wsbridge__V1__WatchEvent__Kind)ev[i].kind;
		e[i].path.data = (uint8_t *)ev[i].path;
		e[i].path.len = ev[i].path_len;
		if (ev[i].from) {
			e[i].from.data = (uint8_t *)ev[i].from;
			e[i].from.len = ev[i].from_len;
		}
		e[i].is_dir = ev[i].is_dir;
		/* On READY: this agentd says when it folded a change. */
		e[i].changed = ev[i].changed || ev[i].kind == WATCH_READY;
		if (ev[i].kind == WATCH_READY || ev[i].kind == WATCH_OVERFLOW)
			e[i].partial = ws.partial;
		if ((ev[i].kind == WATCH_CHANGED ||
		     ((ev[i].kind == WATCH_CREATED || ev[i].kind == WATCH_MOVED) &&
		      (!ev[i].is_dir || ev[i].changed))) &&
		    n_attr < WATCH_ATTRS_MAX) {
			struct fsops_ident id;
			struct stat st;
			int sr = fsops_stat(wc->root, ev[i].path, ev[i].path_len, false, &st,
					    &id);

			if (sr == 0) {
				attr_from_stat(&a[n_attr], &st);
				attr_set_ident(&a[n_attr], &id);
				e[i].attr = &a[n_attr++];
			} else if (sr == -ENOENT || sr == -ENOTDIR) {
				e[i].gone = true;
			}
		}
		ep[i] = &e[i];
	}
	b.n_events = n;
	b.events = ep;
	if (sync) {
		b.sync = sync;
		b.stream = wc->id;
	}
	r = rpc_send(wc->call, &b.base, watch_sent, wc);
	free(e);
	free(ep);
	free(a);
	if (r < 0) {
		rpc_finish(wc->call, WSB_CANCELLED, ECANCELED, "watch cancelled");
		wc_free(wc);
		return r;
	}
	return 0;
}

/* The room a Watch stream's next batch waits for: the largest batch and
 * its framing. */
#define WATCH_ROOM (WATCH_BATCH_BYTES_DEFAULT + RPC_REPLY_SMALL)

/* rpc_room_wait()'s ready: room for the next batch. */
static void watch_room(struct rpc_room_wait *w, void *arg)
{
	struct watch_call *wc = arg;

	(void)w;
	watch_sub_done(wc->sub); /* may deliver, and may free wc on failure */
}

static void watch_sent(struct rpc_call *call, bool ok, void *arg)
{
	struct watch_call *wc = arg;

	if (!ok) {
		watch_unsubscribe(wc->sub);
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "watch cancelled");
		wc_free(wc);
		return;
	}
	/* The next batch waits while the reply budget has no room for it:
	 * streams whose clients do not read hold no more than their last
	 * batch each, and no new one goes past --max-reply-bytes. Meanwhile
	 * the changes queue, and a stream that falls behind gets OVERFLOW,
	 * as a slow reader does. */
	if (rpc_reply_room(call) < WATCH_ROOM) {
		rpc_room_wait(call, &wc->room, WATCH_ROOM, watch_room, wc);
		return;
	}
	watch_sub_done(wc->sub); /* may deliver, and may free wc on failure */
}

/* watch_sub_ops.end: agentd stops (err 0) or watching failed for good. */
static void watch_end(struct watch_sub *sub, int err, void *arg)
{
	struct watch_call *wc = arg;

	if (err == 0)
		rpc_finish(wc->call, WSB_OK, 0, NULL);
	else
		rpc_fail_errno(wc->call, -err, "watch");
	wc_free(wc);
}

static void watch_cancel(struct rpc_call *call, void *arg)
{
	struct watch_call *wc = arg;

	if (wc->sub)
		watch_unsubscribe(wc->sub);
	rpc_finish(call, WSB_CANCELLED, ECANCELED, "watch cancelled");
	wc_free(wc);
}

static const struct watch_sub_ops watch_ops = {
	.deliver = watch_deliver,
	.end = watch_end,
};

/* rpc_send() callback of a no_events call's READY: it then waits. */
static void quiet_sent(struct rpc_call *call, bool ok, void *arg)
{
	struct watch_call *wc = arg;

	if (!ok) {
		rpc_finish(call, WSB_CANCELLED, ECANCELED, "watch cancelled");
		wc_free(wc);
	}
}

/* A no_events Watch: READY, then nothing (it only holds its session). */
static void watch_quiet(struct watch_call *wc)
{
	Wsbridge__V1__WatchBatch b = WSBRIDGE__V1__WATCH_BATCH__INIT;
	Wsbridge__V1__WatchEvent e = WSBRIDGE__V1__WATCH_EVENT__INIT, *ep = &e;

	if (quiet_stopped) { /* shutting down: nothing would end it */
		rpc_finish(wc->call, WSB_UNAVAILABLE, ESHUTDOWN, "watch: agentd is shutting down");
		wc_free(wc);
		return;
	}
	e.kind = WSBRIDGE__V1__WATCH_EVENT__KIND__READY;
	e.no_events = true;
	b.n_events = 1;
	b.events = &ep;
	wc->next = quiet_calls;
	quiet_calls = wc;
	if (rpc_send(wc->call, &b.base, quiet_sent, wc) < 0) {
		rpc_finish(wc->call, WSB_CANCELLED, ECANCELED, "watch cancelled");
		wc_free(wc);
		return;
	}
	rpc_on_cancel(wc->call, watch_cancel, wc);
}

void svc_workspace_shutdown(void)
{
	quiet_stopped = true;
	while (quiet_calls) {
		struct watch_call *wc = quiet_calls;

		rpc_finish(wc->call, WSB_OK, 0, NULL);
		wc_free(wc); /* unlinks it */
	}
}

static void do_watch(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__WatchRequest *q = (const void *)req;
	struct watch_call *wc = calloc(1, sizeof(*wc));
	int r;

	if (!wc) {
		rpc_fail_errno(call, ENOMEM, "watch");
		return;
	}
	wc->call = call;
	wc->ad = AD(data);
	wc->root = &AD(data)->root;
	if (session_hold(call, wc->ad, "watch", &wc->session) < 0) {
		free(wc);
		return;
	}
	if (q->no_events) {
		watch_quiet(wc);
		return;
	}
	r = ws_watcher ? watch_subscribe(ws_watcher, &watch_ops, wc, &wc->sub) : -ESHUTDOWN;
	if (r < 0) {
		wc->sub = NULL;
		wc_free(wc);
		if (r == -ESHUTDOWN)
			rpc_finish(call, WSB_UNAVAILABLE, ESHUTDOWN, "watch: agentd is shutting down");
		else if (r == -EMFILE)
			rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EMFILE,
				   "watch: cannot create an inotify instance (limit "
				   "fs.inotify.max_user_instances, or the open file limit)");
		else
			rpc_fail_errno(call, -r, "watch");
		return;
	}
	/* Random, so that one client cannot acknowledge another's stream
	 * (and release exits before that client applied their changes). */
	do {
		if (getrandom(&wc->id, sizeof(wc->id), 0) != sizeof(wc->id))
			wc->id = (uint64_t)(uintptr_t)wc ^ (uint64_t)wsb_mono_ns();
	} while (wc->id == 0 || wc_find(wc->id));
	wc->next = sub_calls;
	sub_calls = wc;
	if (q->acks)
		watch_sub_acks(wc->sub);
	/* The first batch goes out on a later loop iteration, after this. */
	rpc_on_cancel(call, watch_cancel, wc);
}

/* WatchSync: the client of Watch call q->stream applied its batches up to
 * the one with q->sync (watch_sub_ack()). Loop thread. */
static void do_watch_sync(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const Wsbridge__V1__WatchSyncRequest *q = (const void *)req;
	struct watch_call *wc = wc_find(q->stream);

	(void)data;
	if (!wc) {
		rpc_finish(call, WSB_NOT_FOUND, 0, "watch sync: no Watch call of that stream id is open");
		return;
	}
	if (watch_sub_ack(wc->sub, q->sync) < 0) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "watch sync: that sync value was never sent on the stream");
		return;
	}
	reply_empty(call);
}

struct watcher *svc_workspace_watcher(void)
{
	return ws_watcher;
}

/* ---- registration ---- */

#define WS(name, kind, desc, fn)                                                         \
	{                                                                                \
		"/wsbridge.v1.Workspace/" name, kind, RPC_ON_CQ, &wsbridge__v1__##desc##__descriptor, \
			false, fn, NULL                                                  \
	}
/* A pure read: its large replies may be refused past --max-reply-bytes. */
#define WS_READ(name, kind, desc, fn)                                                    \
	{                                                                                \
		"/wsbridge.v1.Workspace/" name, kind, RPC_ON_CQ, &wsbridge__v1__##desc##__descriptor, \
			false, fn, NULL, true                                            \
	}

static struct rpc_method ws_methods[] = {
	WS("Stat", RPC_UNARY, stat_request, do_stat),
	WS_READ("ReadDir", RPC_UNARY, read_dir_request, do_readdir),
	WS("Open", RPC_UNARY, open_request, do_open),
	WS_READ("Read", RPC_UNARY, read_request, do_read),
	WS("Write", RPC_UNARY, write_request, do_write),
	WS("Fsync", RPC_UNARY, fsync_request, do_fsync),
	WS("Release", RPC_UNARY, handle_request, do_release),
	WS("SetAttr", RPC_UNARY, set_attr_request, do_setattr),
	WS("Mkdir", RPC_UNARY, mkdir_request, do_mkdir),
	WS("Mknod", RPC_UNARY, mknod_request, do_mknod),
	WS("Unlink", RPC_UNARY, path_request, do_unlink),
	WS("Rmdir", RPC_UNARY, path_request, do_rmdir),
	WS("Rename", RPC_UNARY, rename_request, do_rename),
	WS("Link", RPC_UNARY, link_request, do_link),
	WS("Symlink", RPC_UNARY, symlink_request, do_symlink),
	WS("Readlink", RPC_UNARY, path_request, do_readlink),
	WS("StatFs", RPC_UNARY, path_request, do_statfs),
	WS("GetXattr", RPC_UNARY, get_xattr_request, do_getxattr),
	WS("SetXattr", RPC_UNARY, set_xattr_request, do_setxattr),
	WS("ListXattr", RPC_UNARY, list_xattr_request, do_listxattr),
	WS("RemoveXattr", RPC_UNARY, remove_xattr_request, do_removexattr),
	WS("Fallocate", RPC_UNARY, fallocate_request, do_fallocate),
	WS("Lseek", RPC_UNARY, lseek_request, do_lseek),
	WS("Upload", RPC_CLIENT_STREAM, upload_chunk, do_upload),
	/* Not WS_READ: its chunks fit the budget (download_step()). */
	WS("Download", RPC_SERVER_STREAM, download_request, do_download),
	WS("CopyFileRange", RPC_UNARY, copy_file_range_request, do_copy_file_range),
	{"/wsbridge.v1.Workspace/Watch", RPC_SERVER_STREAM, RPC_ON_LOOP,
	 &wsbridge__v1__watch_request__descriptor, false, do_watch, NULL},
	{"/wsbridge.v1.Workspace/WatchSync", RPC_UNARY, RPC_ON_LOOP,
	 &wsbridge__v1__watch_sync_request__descriptor, false, do_watch_sync, NULL},
	/* The unary methods above as messages of one stream (rpc.h RPC_OPS). */
	{"/wsbridge.v1.Workspace/Ops", RPC_OPS, RPC_ON_CQ, NULL, false, NULL, NULL},
};

int svc_workspace_register(struct rpc_server *s, struct agentd *ad)
{
	struct stat rst;

	if (!ws_root_dev_known && fstat(ad->root.fd, &rst) == 0) {
		ws_root_dev = rst.st_dev;
		ws_root_dev_known = true;
	}
	if (!ws_watcher && ad->loop) {
		/* cheap: nothing is watched before the first Watch call */
		struct watch_config cfg = { .max_watches = ad->max_watches };
		int r = watch_new(ad->loop, &ad->root, ad->root_path, &cfg, &ws_watcher);

		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < sizeof(ws_methods) / sizeof(ws_methods[0]); i++) {
		int r;

		ws_methods[i].data = ad;
		r = rpc_server_register(s, &ws_methods[i]);
		if (r < 0)
			return r;
	}
	return 0;
}
