/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs's monitor thread: reads agentd's Watch stream and turns its events
 * into kernel cache invalidations (fuse_lowlevel_notify_inval_entry /
 * _inval_inode), re-subscribes after the stream ends, probes agentd while it
 * is unreachable (calls fail at once meanwhile, fs.c rpc()), and for an
 * --exec transport runs the command again (wsc_reconnect) when calls fail
 * with UNAVAILABLE. The only thread that sends notifications: libfuse's
 * doc/README.notifications forbids them on a request thread (deadlock).
 *
 * Until agentd implements Watch (UNIMPLEMENTED), nothing is pushed and the
 * kernel caches expire by their timeouts; the subscription is retried every
 * minute.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fs.h"
#include "wsbridge.pb-c.h"
#include "wsb.h"

/** Wait between Watch subscriptions after one ended, milliseconds. */
#define WATCH_RETRY_MS 1000
/** Wait before asking again after Watch was UNIMPLEMENTED, milliseconds. */
#define WATCH_UNIMPLEMENTED_RETRY_MS 60000
/** Shortest interval between two reconnects of an --exec transport, ms. */
#define RECONNECT_MIN_MS 1000

/*
 * Make the kernel look (parent, name) up again. Where the kernel can (FUSE
 * 7.38, FUSE_CAP_EXPIRE_ONLY) the dentry is only expired, not unhashed: an
 * open file's /proc/PID/fd link then does not read "(deleted)" while its name
 * still exists, and a dentry that is still right stays with its nodeid.
 */
static void inval_entry(struct wsfs *fs, uint64_t parent, const char *name, size_t len)
{
	char buf[NODE_NAME_MAX + 1];
	int r = -ENOSYS;

	/* libfuse sends len + 1 bytes: the name must end with a NUL. */
	if (len > NODE_NAME_MAX)
		return;
	atomic_fetch_add(&fs->inval_seq, 1);
	memcpy(buf, name, len);
	buf[len] = '\0';
	if (atomic_load(&fs->expire_only))
		r = fuse_lowlevel_notify_expire_entry(fs->se, parent, buf, len,
						      FUSE_LL_EXPIRE_ONLY);
	if (r == -ENOSYS)
		r = fuse_lowlevel_notify_inval_entry(fs->se, parent, buf, len);

	if (r < 0 && r != -ENOENT)
		wsb_debug("notify_inval_entry(%llu): %s", (unsigned long long)parent, strerror(-r));
}

/* @off < 0: attributes only; else attributes and the page cache from @off (0 = all). */
static void inval_inode(struct wsfs *fs, uint64_t id, off_t off)
{
	int r;

	atomic_fetch_add(&fs->inval_seq, 1);
	node_attr_drop(fs->nodes, id);
	node_note(fs->nodes, id, wsfs_now_ns(), false); /* fs.c getattr_reply() */
	r = fuse_lowlevel_notify_inval_inode(fs->se, id, off, 0);

	if (r < 0 && r != -ENOENT)
		wsb_debug("notify_inval_inode(%llu): %s", (unsigned long long)id, strerror(-r));
}

/* One name given a watch-long negative dentry (wsfs_neg_add). */
struct wsfs_neg {
	uint64_t parent;
	int64_t at_ns;
	size_t len;
	char name[NAME_MAX + 1];
};

int wsfs_neg_add(struct wsfs *fs, uint64_t parent, const char *name, size_t len)
{
	int64_t ttl = (int64_t)(fs->cfg.watch_timeout * 1e9), now;
	int r = 0;

	if (len > NAME_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&fs->neg_lock);
	if (!fs->neg) {
		fs->neg = malloc(WSFS_NEG_MAX * sizeof(*fs->neg));
		fs->neg_head = fs->n_neg = 0;
	}
	if (!fs->neg) {
		r = -ENOMEM;
		goto out;
	}
	/* A ring in the order of wsfs_now_ns() under the lock: the kernel
	 * has expired the ones at the head that are older than the
	 * timeout (plus a second for the reply's way to it). */
	now = wsfs_now_ns();
	while (fs->n_neg && now - fs->neg[fs->neg_head].at_ns > ttl + 1000000000LL) {
		fs->neg_head = (fs->neg_head + 1) % WSFS_NEG_MAX;
		fs->n_neg--;
	}
	if (fs->n_neg == WSFS_NEG_MAX) {
		r = -ENOSPC;
	} else {
		struct wsfs_neg *e = &fs->neg[(fs->neg_head + fs->n_neg++) % WSFS_NEG_MAX];

		e->parent = parent;
		e->at_ns = now;
		e->len = len;
		memcpy(e->name, name, len);
		e->name[len] = '\0';
	}
out:
	pthread_mutex_unlock(&fs->neg_lock);
	return r;
}

void wsfs_neg_free(struct wsfs *fs)
{
	free(fs->neg);
	fs->neg = NULL;
	fs->neg_head = fs->n_neg = 0;
}

/* Drop the negative dentries wsfs_neg_add() recorded, all of them (this is
 * rare); monitor thread. */
static void neg_invalidate(struct wsfs *fs)
{
	struct wsfs_neg *set;
	size_t head, n;

	pthread_mutex_lock(&fs->neg_lock);
	set = fs->neg;
	head = fs->neg_head;
	n = fs->n_neg;
	fs->neg = NULL;
	fs->neg_head = fs->n_neg = 0;
	pthread_mutex_unlock(&fs->neg_lock);
	for (size_t i = 0; i < n; i++) {
		const struct wsfs_neg *e = &set[(head + i) % WSFS_NEG_MAX];

		inval_entry(fs, e->parent, e->name, e->len);
	}
	free(set);
}

void wsfs_invalidate_all(struct wsfs *fs)
{
	struct node_ref *refs;
	size_t n;

	atomic_fetch_add(&fs->inval_seq, 1);
	atomic_fetch_add(&fs->rm_gen, 1);
	/* Name events may have been lost: the table's names may be wrong. */
	atomic_store(&fs->pod_names_ns, wsfs_now_ns());
	node_known_drop_all(fs->nodes);
	node_attr_drop_all(fs->nodes);
	neg_invalidate(fs);
	if (node_snapshot(fs->nodes, &refs, &n) < 0) {
		inval_inode(fs, NODE_ROOT_ID, 0);
		return;
	}
	/*
	 * Attributes, not pages: the kernel drops a file's pages itself once
	 * a read(2) (which asks for the attributes again, FUSE_AUTO_INVAL_DATA)
	 * or an open(2) (keep_cache, file_opened()) finds its size or mtime
	 * changed. Dropping them here unmapped the pages of every program run
	 * from the mount while agentd was gone, and the next instruction
	 * fetch failed with SIGBUS; a shared mapping's dirty pages were
	 * written back into the outage and lost.
	 */
	for (size_t i = 0; i < n; i++) {
		node_seen_set(fs->nodes, refs[i].nodeid, NULL);
		inval_inode(fs, refs[i].nodeid, -1);
	}
	for (size_t i = 0; i < n; i++)
		if (refs[i].name)
			inval_entry(fs, refs[i].parent, refs[i].name, refs[i].name_len);
	node_snapshot_free(refs, n);
}

/* Contents or attributes of @path changed; @attr, its lstat (may be NULL). */
static void ev_changed(struct wsfs *fs, const ProtobufCBinaryData *path,
		       const Wsbridge__V1__Attr *attr)
{
	uint64_t parent, id = 0, ids[64];
	const char *name;
	size_t len, n = 0;
	bool root;

	/* Even for a file this mount has no node for: its attributes may sit
	 * in a prefetched listing (fs.c), valid only while inval_seq stays. */
	atomic_fetch_add(&fs->inval_seq, 1);
	/* A directory's mode or owner: agentd's permission below it. */
	if (!attr || S_ISDIR(attr->mode))
		atomic_fetch_add(&fs->rm_gen, 1);
	root = node_resolve(fs->nodes, (const char *)path->data, path->len, &parent, &id, &name,
			    &len) < 0;
	/*
	 * What fs.c and the kernel keep of the file, under whatever name the
	 * table has for it (the pod may have renamed it or a directory
	 * above, and the table follows only the mount's own renames): every
	 * node of the inode agentd reported. Without one (past a batch's
	 * first 1024 CHANGED, or gone): the path's node and its inode's,
	 * unless the pod changed names lately (the path may name another
	 * file than the table says) or the table does not know the path:
	 * then every node's kept attributes.
	 */
	if (attr) {
		/* (A file with more names than this is kept attr_timeout.) */
		n = node_ids_by_ino(fs->nodes, attr->ino, wsfs_attr_ident(attr), ids, 64);
		node_attr_drop_ino(fs->nodes, attr->ino);
	} else if (wsfs_now_ns() - atomic_load(&fs->pod_names_ns) <=
			   (int64_t)(fs->cfg.watch_timeout * 1e9) ||
		   !node_attr_drop_path(fs->nodes, (const char *)path->data, path->len)) {
		node_attr_drop_all(fs->nodes);
	}
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == id)
			continue; /* below */
		node_seen_set(fs->nodes, ids[i], NULL);
		inval_inode(fs, ids[i], 0);
	}
	if (root) {
		/* The root itself (or a path we cannot name). */
		inval_inode(fs, NODE_ROOT_ID, 0);
		return;
	}
	if (id) {
		node_seen_set(fs->nodes, id, NULL);
		inval_inode(fs, id, 0);
	}
}

/* The attributes of server inode @ino of identity @ident (0 unknown),
 * changed (not its contents, as far as anyone knows): drop what the mount
 * and the kernel keep of them. */
static void ev_attr_only(struct wsfs *fs, uint64_t ino, uint64_t ident)
{
	uint64_t ids[64];
	size_t n = node_ids_by_ino(fs->nodes, ino, ident, ids, 64);

	node_attr_drop_ino(fs->nodes, ino);
	for (size_t i = 0; i < n && i < 64; i++)
		inval_inode(fs, ids[i], -1);
}

/* @path appeared or went away (created, deleted, one end of a move). */
static void ev_name(struct wsfs *fs, const ProtobufCBinaryData *path)
{
	uint64_t parent, id;
	const char *name;
	size_t len;

	/* Even for a path this mount has no node for: prefetched listings and
	 * Open's bytes (fs.c) of it are only valid while inval_seq stays. */
	atomic_fetch_add(&fs->inval_seq, 1);
	atomic_store(&fs->pod_names_ns, wsfs_now_ns());
	if (node_resolve(fs->nodes, (const char *)path->data, path->len, &parent, &id, &name,
			 &len) < 0)
		return;
	/*
	 * The sets go after inval_seq moved (above: a listing fetched before
	 * cannot begin one again, node_known_begin()) and before the kernel's
	 * entry: a LOOKUP that comes after the invalidation must not be
	 * answered "missing" from the set (it was, for 60 s of negative
	 * dentry, when the pod created a name in a directory the mount had
	 * just listed). One answered from it before holds the directory's
	 * lock in the kernel until its reply is in, which the invalidation
	 * waits for (fuse_reverse_inval_entry()), so that goes too.
	 */
	if (parent)
		node_known_drop(fs->nodes, parent);
	if (id)
		node_known_drop(fs->nodes, id); /* a directory moved or removed */
	if (parent) {
		inval_entry(fs, parent, name, len);
		inval_inode(fs, parent, 0); /* mtime, nlink and cached listing */
	}
	if (id) {
		node_seen_set(fs->nodes, id, NULL);
		inval_inode(fs, id, 0);
	}
}

/*
 * Which file a node stands for, after the pod's change of names (not the
 * mount's own: those are applied by the request that made them). wsfs
 * reaches a file by the path of its node, so a node whose name the pod
 * took away or gave to another file would reach whatever the path holds
 * now: a shell's cwd that the pod removed and made anew listed and took
 * files in the new directory, and fchmod(2) of an open file the pod
 * replaced by rename(2) changed the new one. So the node follows the
 * pod's rename (node_rename(): a cwd inside keeps working, as on a local
 * disk), and a node whose name now holds another file, or none, is taken
 * from the name (node_unlink(): then calls through an open descriptor go
 * through its handle, and others fail ESTALE, fs.c node_stat()).
 */

/* The node at wire path @path (0: none) and its state; its parent's node
 * (0: not known) and last component in any case. */
static uint64_t node_at(struct wsfs *fs, const ProtobufCBinaryData *path, uint64_t *ret_parent,
			const char **ret_name, size_t *ret_len, struct node_info *ret_info)
{
	uint64_t id = 0;

	*ret_parent = 0;
	if (node_resolve(fs->nodes, (const char *)path->data, path->len, ret_parent, &id, ret_name,
			 ret_len) < 0) {
		*ret_parent = 0;
		return 0;
	}
	if (!id || !*ret_parent || node_info(fs->nodes, id, ret_info) < 0)
		return 0;
	return id;
}

/* Whether @a (agentd's attributes of a path) are of node @info's file: its
 * server inode, and identity as far as both are known. */
static bool attr_is(const struct node_info *info, const Wsbridge__V1__Attr *a)
{
	return info->ino == a->ino && node_same_ident(info->ident, wsfs_attr_ident(a));
}

/*
 * Whether a node stands for its file beyond its name: a directory the
 * kernel keeps (a cwd, an open directory) or a file open on the mount. The
 * name of any other is looked up again after the pod's change (ev_name()
 * dropped the kernel's entry), and node_lookup() takes it from a node of
 * another inode then; detaching such a node early only makes an open(2)
 * racing a pod that renames over the name in a loop fail ESTALE twice.
 */
static bool node_held(const struct node_info *info)
{
	return info->mode == S_IFDIR ? info->nlookup > 0 : info->open_files > 0;
}

/* Take @path's name from its node (detached if that was its last name). */
static void name_gone(struct wsfs *fs, uint64_t parent, const char *name, size_t len)
{
	node_unlink(fs->nodes, parent, name, len);
}

/** How long after the pod's change its event reaches wsfs at most, as far
 * as ev_gone() counts on it, ns: agentd reads inotify 2 ms after it has
 * something and sends at once (docs/protocol.md "Watch"). */
#define WSFS_EVENT_LATENCY_NS (200 * 1000000LL)

/** Most Stats ev_gone() and ev_moved() make per batch (each one RPC on the
 * watch thread). */
#define WSFS_GONE_CHECKS_MAX 32

/*
 * Whether @path holds node @info's file now (attr_is()), as agentd says:
 * one Stat on this thread, counted in *@checks (at most
 * WSFS_GONE_CHECKS_MAX per batch: an rm -rf or a mass rename in the pod of
 * a tree just listed must not hold up the stream). Returns 1 yes, 0 no
 * (another file, or none: ENOENT, ENOTDIR), -1 not known (the link is
 * down, the batch's checks are spent, or the call failed otherwise: then
 * no more this batch).
 */
static int path_holds(struct wsfs *fs, const ProtobufCBinaryData *path,
		      const struct node_info *info, unsigned *checks)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct wsc_status st;
	int r;

	if (atomic_load(&fs->conn_down) || *checks >= WSFS_GONE_CHECKS_MAX)
		return -1;
	++*checks;
	q.path = *path;
	r = wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/Stat", &q.base,
			 &wsbridge__v1__stat_reply__descriptor, (ProtobufCMessage **)&rep,
			 fs->cfg.rpc_timeout_ms, &st);
	if (r == -ENOENT || r == -ENOTDIR) {
		r = 0;
	} else if (r == 0 && rep->attr) {
		r = attr_is(info, rep->attr);
	} else {
		/* No more this batch: a hung agentd would hold the stream
		 * for a timeout per check. */
		*checks = WSFS_GONE_CHECKS_MAX;
		r = -1;
	}
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	return r;
}

/*
 * Whether agentd said within WSFS_EVENT_LATENCY_NS before the batch that
 * arrived at @batch_ns that the node's name is it: then the binding may be
 * newer than the event (the mount's own create or rename of the name, or
 * a lookup, after the pod's change; an own change's echo that agentd
 * folded with others is not always told from the pod's), and the event is
 * no ground to take the name from it.
 */
static bool bound_lately(const struct node_info *info, int64_t batch_ns)
{
	return info->bound_ns >= batch_ns - WSFS_EVENT_LATENCY_NS;
}

/*
 * Whether @path is still bound as it was when node_at() gave @id (0: no
 * node) and @was: path_holds() takes a round trip, during which a request
 * thread may bind the name anew (a lookup, an own create or rename), and
 * what the check found is then no ground to move or take that binding.
 */
static bool bound_same(struct wsfs *fs, const ProtobufCBinaryData *path, uint64_t id,
		       const struct node_info *was)
{
	struct node_info now;
	const char *name;
	uint64_t parent;
	size_t len;

	return node_at(fs, path, &parent, &name, &len, &now) == id &&
	       (!id || now.bound_ns == was->bound_ns);
}

/*
 * bound_same() for the new name of a MOVED whose node @mi is about to
 * follow, or that name bound meanwhile to a node of @mi's very file (a
 * LOOKUP or readdirplus of the new name after the event's ev_name()): the
 * node replaces it, as when that lookup came before the batch.
 */
static bool dest_same(struct wsfs *fs, const ProtobufCBinaryData *path, uint64_t id,
		      const struct node_info *was, const struct node_info *mi)
{
	struct node_info now;
	const char *name;
	uint64_t parent;
	size_t len;

	if (bound_same(fs, path, id, was))
		return true;
	return node_at(fs, path, &parent, &name, &len, &now) && now.mode == mi->mode &&
	       now.ino == mi->ino && node_same_ident(now.ident, mi->ident);
}

/*
 * The pod removed @path, in the batch that arrived at @batch_ns
 * (CLOCK_MONOTONIC): take the name from its node, if held (node_held()).
 * Unless agentd said the name is that node within WSFS_EVENT_LATENCY_NS
 * before the batch (the mount may have looked the name up, or made it,
 * since the pod's removal): then agentd is asked what the path holds now
 * (path_holds(): one Stat, on this thread, counted in *@checks), and the
 * name stays if it is the same inode, or if that is not known. (An inode
 * number the removal freed and a new file took at once passes for the
 * same: that is the case the time bound is for.)
 */
static void ev_gone(struct wsfs *fs, const ProtobufCBinaryData *path, int64_t batch_ns,
		    unsigned *checks)
{
	struct node_info info;
	const char *name;
	uint64_t parent, id;
	size_t len;

	id = node_at(fs, path, &parent, &name, &len, &info);
	if (!id || !node_held(&info))
		return;
	if (!bound_lately(&info, batch_ns) || !info.ino ||
	    (path_holds(fs, path, &info, checks) == 0 && bound_same(fs, path, id, &info)))
		name_gone(fs, parent, name, len);
}

/*
 * The pod renamed @from to @path (@a: the file's attributes then, or
 * NULL), in the batch that arrived at @batch_ns: the node of @from
 * follows, unless it is known, or may be, another file (the mount looked
 * @from up again, or made it, since: bound lately; an inode number alone
 * does not tell, the file system gives a freed one to the next file);
 * else a held node at @path that is known to be another file is taken
 * from it. A held node bound lately (a cwd entered, a file opened just
 * before the pod's rename) is checked with agentd (path_holds(), counted
 * in *@checks): it follows if @from no longer holds its file and @a is
 * that file (without @a, as for a directory: if @path holds it), and
 * leaves @path if @path no longer holds it; without that, a cwd entered
 * just before the pod renamed it lost its name, and calls on a descriptor
 * opened just before the pod replaced its file reached the new file by the
 * name.
 */
static void ev_moved(struct wsfs *fs, const ProtobufCBinaryData *from,
		     const ProtobufCBinaryData *path, const Wsbridge__V1__Attr *a,
		     int64_t batch_ns, unsigned *checks)
{
	struct node_info mi, vi;
	uint64_t mparent = 0, vparent = 0, m, v;
	const char *mname = NULL, *vname = NULL;
	size_t mlen = 0, vlen = 0;
	unsigned checks0 = *checks;

	m = node_at(fs, from, &mparent, &mname, &mlen, &mi);
	v = node_at(fs, path, &vparent, &vname, &vlen, &vi);
	/* (v == m: two names of one file; rename(2) leaves both.) A node of
	 * the same directory at @path (the mount looked the new name up
	 * before the event came) gives way to the one that holds a cwd. */
	if (m && (!a || attr_is(&mi, a)) && v != m &&
	    (!bound_lately(&mi, batch_ns) ||
	     (node_held(&mi) && path_holds(fs, from, &mi, checks) == 0 &&
	      (a || path_holds(fs, path, &mi, checks) == 1) && bound_same(fs, from, m, &mi) &&
	      dest_same(fs, path, v, &vi, &mi)))) {
		/* It replaces the node at @path, as a rename through the
		 * mount does; into a directory the table does not know, it
		 * cannot be followed. */
		if (!vparent || node_rename(fs->nodes, mparent, mname, mlen, vparent, vname, vlen,
					    false) < 0)
			name_gone(fs, mparent, mname, mlen);
		return;
	}
	if (v && a && vi.ino && !attr_is(&vi, a) && node_held(&vi) &&
	    (!bound_lately(&vi, batch_ns) || path_holds(fs, path, &vi, checks) == 0) &&
	    (*checks == checks0 || bound_same(fs, path, v, &vi))) /* after a Stat: as it was */
		name_gone(fs, vparent, vname, vlen);
}

static void self_forget(struct wsfs *fs, const ProtobufCBinaryData *path);

/*
 * @ev and @next are the two halves of the pod's renameat2(RENAME_EXCHANGE)
 * of two names the mount holds nodes for (inotify reports an exchange as
 * MOVED a->b then MOVED b->a): then swap the nodes' names and return true.
 * Such a pair is also what "mv a b; mv b a" leaves in one batch, so agentd
 * is asked (one Stat) whether b now holds a's inode. False: not an
 * exchange, each event is applied as a rename of its own.
 */
static bool ev_exchanged(struct wsfs *fs, const Wsbridge__V1__WatchEvent *ev,
			 const Wsbridge__V1__WatchEvent *next)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct node_info mi, vi;
	uint64_t mparent, vparent, m, v;
	const char *mname, *vname;
	size_t mlen, vlen;
	struct wsc_status st;
	bool swapped = false;

	if (!next || next->kind != WSBRIDGE__V1__WATCH_EVENT__KIND__MOVED ||
	    next->from.len != ev->path.len || next->path.len != ev->from.len ||
	    memcmp(next->from.data, ev->path.data, ev->path.len) != 0 ||
	    memcmp(next->path.data, ev->from.data, ev->from.len) != 0)
		return false;
	m = node_at(fs, &ev->from, &mparent, &mname, &mlen, &mi);
	v = node_at(fs, &ev->path, &vparent, &vname, &vlen, &vi);
	if (!m || !v || m == v || !mi.ino || !vi.ino || mi.ino == vi.ino ||
	    atomic_load(&fs->conn_down))
		return false;
	q.path = ev->path;
	if (wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/Stat", &q.base,
			 &wsbridge__v1__stat_reply__descriptor, (ProtobufCMessage **)&rep,
			 fs->cfg.rpc_timeout_ms, &st) == 0 &&
	    rep->attr && attr_is(&mi, rep->attr)) {
		self_forget(fs, &ev->from);
		self_forget(fs, &ev->path);
		ev_name(fs, &ev->from);
		ev_name(fs, &ev->path);
		if (node_rename(fs->nodes, mparent, mname, mlen, vparent, vname, vlen, true) < 0) {
			name_gone(fs, mparent, mname, mlen);
			name_gone(fs, vparent, vname, vlen);
		}
		swapped = true;
	}
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	return swapped;
}

/* The pod made @path (@a: its attributes then, or NULL), in the batch
 * that arrived at @batch_ns: a held node bound to it, not lately, that is
 * known to be another file is taken from it. */
static void ev_created(struct wsfs *fs, const ProtobufCBinaryData *path,
		       const Wsbridge__V1__Attr *a, int64_t batch_ns)
{
	struct node_info info;
	const char *name;
	uint64_t parent;
	size_t len;

	if (a && node_at(fs, path, &parent, &name, &len, &info) && info.ino && !attr_is(&info, a) &&
	    node_held(&info) && !bound_lately(&info, batch_ns))
		name_gone(fs, parent, name, len);
}

/** Most new names per batch that are stat'ed for hard links (each one RPC). */
#define LINK_CHECKS_MAX 32

/*
 * A non-directory with attributes @a appeared: if it is another name of a
 * file this mount knows (a hard link made in the pod), that file's nlink
 * changed but inotify reports only the new name, so drop the attributes of
 * every node of that inode.
 */
static void ev_linked(struct wsfs *fs, const Wsbridge__V1__Attr *a)
{
	if (a->nlink <= 1 || (a->mode & S_IFMT) == S_IFDIR)
		return;
	ev_attr_only(fs, a->ino, wsfs_attr_ident(a));
}

/*
 * A non-directory appeared at @path and its event came without attributes
 * (past agentd's first 1024 per batch): ev_linked() with its lstat. Costs
 * one Stat; the monitor thread is not a FUSE request thread.
 */
static void check_link(struct wsfs *fs, const ProtobufCBinaryData *path)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatReply *rep = NULL;
	struct wsc_status st;

	if (atomic_load(&fs->conn_down))
		return;
	q.path = *path;
	if (wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/Stat", &q.base,
			 &wsbridge__v1__stat_reply__descriptor, (ProtobufCMessage **)&rep,
			 fs->cfg.rpc_timeout_ms, &st) < 0)
		return;
	if (rep->attr)
		ev_linked(fs, rep->attr);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/*
 * A non-directory got the name @ev->path (created, linked, or moved there):
 * if it is another name of a file this mount knows, drop that file's
 * attributes (ev_linked), from the event's attributes, else from a Stat for
 * the batch's first LINK_CHECKS_MAX such names, else for every node once.
 */
static void links_unknown(struct wsfs *fs);
static void new_name(struct wsfs *fs, const Wsbridge__V1__WatchEvent *ev, unsigned *link_checks)
{
	if (ev->is_dir)
		return;
	if (ev->attr) {
		ev_linked(fs, ev->attr);
	} else if (*link_checks < LINK_CHECKS_MAX) {
		(*link_checks)++;
		check_link(fs, &ev->path);
	} else if (*link_checks == LINK_CHECKS_MAX) {
		(*link_checks)++;
		links_unknown(fs);
	}
}

/*
 * More new names in one batch than check_link() may ask about: any known
 * file may have gained a link, so drop every node's attributes (kept and
 * the kernel's). Costs one notification per node, no call.
 */
static void links_unknown(struct wsfs *fs)
{
	struct node_ref *refs;
	size_t n;

	node_attr_drop_all(fs->nodes);
	if (node_snapshot(fs->nodes, &refs, &n) < 0) {
		wsfs_invalidate_all(fs);
		return;
	}
	for (size_t i = 0; i < n; i++)
		inval_inode(fs, refs[i].nodeid, -1);
	node_snapshot_free(refs, n);
}

/* ---- own changes ---- */


/* Attributes compared to tell an own change's echo from the pod's change
 * (self_attr_same()). */
struct self_attr {
	uint64_t ino, size, nlink;
	int64_t mtime_ns, ctime_ns;
	uint32_t mode, uid, gid;
	/* node_ident() (Attr.btime_ns, Attr.generation), 0 unknown: a file
	 * the pod made at the name on the inode number an own one had, within
	 * one timestamp tick and of the same size, is another file. Not every
	 * reply carries it (Write, SetAttr), so it is compared where both
	 * know it (node_same_ident()). */
	uint64_t ident;
};

struct wsfs_self {
	struct wsfs_self *next;
	uint64_t hash;
	unsigned kinds;       /* enum wsfs_self_kind bits recorded */
	unsigned inflight;    /* operations begun and not ended */
	uint64_t gen;         /* bumped by each wsfs_self_begin() */
	int64_t until_ns;     /* CLOCK_MONOTONIC end of the window */
	bool has_attr;
	struct self_attr attr; /* of the last own reply that had attributes */
	/* The replies before it, newest first (attr's history, cleared with
	 * has_attr): an event whose lstat caught the file between two own
	 * operations (a write, then a chmod) shows one of these. */
	unsigned n_prev;
	struct self_attr prev[WSFS_SELF_PREV];
	/* The non-directory an own create or link put at the name, as the
	 * own replies on it left it, newest first; kept across a later own
	 * removal: an event that finds it so is an own echo, however late.
	 * (All of it, not the inode alone: a file the pod makes at the name
	 * after an own unlink may get the same inode number back.) */
	unsigned n_made;
	struct self_attr made[WSFS_SELF_PREV + 1];
	/* The CREATED of the own create or link that began made has not come
	 * yet: one own create, one CREATED, so a later one that looks the
	 * same is another's (an inode number reused within a timestamp
	 * tick, or the pod linking the file back). */
	bool made_await;
	/* self_hash() of the name the own rename from this name (or the
	 * exchange with it) went to, 0 none: a MOVED event is its echo only
	 * if it goes there (wsfs_self_moved()). */
	uint64_t moved_to;
	size_t len;
	char path[];
};

int64_t wsfs_now_ns(void)
{
	return wsb_mono_ns();
}

/* FNV-1a. */
static uint64_t self_hash(const char *p, size_t len)
{
	return wsb_fnv1a(p, len, WSB_FNV1A_INIT);
}

static bool self_live(const struct wsfs_self *e, int64_t now)
{
	return e->inflight > 0 || now < e->until_ns;
}

/* Find @path's record (self_lock held), dropping dead ones in its chain. */
static struct wsfs_self *self_find(struct wsfs *fs, const char *path, size_t len, uint64_t h,
				   int64_t now)
{
	struct wsfs_self **pp = &fs->self_tab[h % WSFS_SELF_BUCKETS], *e, *found = NULL;

	while ((e = *pp)) {
		if (e->hash == h && e->len == len && memcmp(e->path, path, len) == 0) {
			found = e;
		} else if (!self_live(e, now)) {
			*pp = e->next;
			free(e);
			fs->n_self--;
			continue;
		}
		pp = &e->next;
	}
	return found;
}

/* self_find() of an event's @path (self_lock held). */
static struct wsfs_self *self_of(struct wsfs *fs, const ProtobufCBinaryData *path, int64_t now)
{
	const char *p = (const char *)path->data;

	return self_find(fs, p, path->len, self_hash(p, path->len), now);
}

/* Drop every dead record (self_lock held). */
static void self_sweep(struct wsfs *fs, int64_t now)
{
	for (size_t b = 0; b < WSFS_SELF_BUCKETS; b++) {
		struct wsfs_self **pp = &fs->self_tab[b], *e;

		while ((e = *pp)) {
			if (!self_live(e, now)) {
				*pp = e->next;
				free(e);
				fs->n_self--;
			} else {
				pp = &e->next;
			}
		}
	}
}

void wsfs_self_begin(struct wsfs *fs, const char *path, size_t len, unsigned kinds)
{
	uint64_t h = self_hash(path, len);
	int64_t now = wsfs_now_ns();
	struct wsfs_self *e;

	/* What fs.c keeps of the file's attributes ends with the change
	 * (node_attr_*), here and at its end: a reply that raced with it. */
	node_attr_drop_path(fs->nodes, path, len);
	pthread_mutex_lock(&fs->self_lock);
	e = self_find(fs, path, len, h, now);
	if (e && !self_live(e, now)) {
		/* A new period: what was recorded before is over. */
		e->kinds = 0;
		e->has_attr = false;
		e->n_prev = 0;
		e->n_made = 0;
		e->moved_to = 0;
	}
	if (!e) {
		if (fs->n_self >= WSFS_SELF_MAX)
			self_sweep(fs, now);
		if (fs->n_self >= WSFS_SELF_MAX)
			goto out;
		e = calloc(1, sizeof(*e) + len);
		if (!e)
			goto out;
		memcpy(e->path, path, len);
		e->len = len;
		e->hash = h;
		e->next = fs->self_tab[h % WSFS_SELF_BUCKETS];
		fs->self_tab[h % WSFS_SELF_BUCKETS] = e;
		fs->n_self++;
	}
	/*
	 * A name's events alternate between appearing and going away: an own
	 * removal means a later CREATED is not an echo of an earlier own
	 * create (the pod made the name again), and the other way round. An
	 * echo of the earlier operation still on its way then invalidates,
	 * which is only a wasted lookup.
	 */
	if (kinds & (WSFS_SELF_DELETED | WSFS_SELF_MOVED_FROM)) {
		e->kinds &= ~(unsigned)(WSFS_SELF_CREATED | WSFS_SELF_MOVED_TO | WSFS_SELF_CHANGED);
		e->has_attr = false;
		e->n_prev = 0;
		e->moved_to = 0; /* wsfs_self_moved() says where */
	}
	if (kinds & (WSFS_SELF_CREATED | WSFS_SELF_MOVED_TO)) {
		e->kinds &= ~(unsigned)(WSFS_SELF_DELETED | WSFS_SELF_MOVED_FROM);
		/* Another file may come to the name (a rename has no reply
		 * attributes to say which); its CREATED (or MOVED) is due,
		 * and may come before this operation's reply. */
		e->n_made = 0;
		e->made_await = true;
	}
	e->kinds |= kinds;
	e->inflight++;
	e->gen++;
out:
	pthread_mutex_unlock(&fs->self_lock);
}

/* Set @from's record's moved_to to @to's hash (self_lock held). */
static void self_moved_to(struct wsfs *fs, const char *from, size_t from_len, const char *to,
			  size_t to_len, int64_t now)
{
	struct wsfs_self *e = self_find(fs, from, from_len, self_hash(from, from_len), now);

	if (e)
		e->moved_to = self_hash(to, to_len);
}

void wsfs_self_moved(struct wsfs *fs, const char *from, size_t from_len, const char *to,
		     size_t to_len, bool exchange)
{
	int64_t now = wsfs_now_ns();

	pthread_mutex_lock(&fs->self_lock);
	self_moved_to(fs, from, from_len, to, to_len, now);
	if (exchange)
		self_moved_to(fs, to, to_len, from, from_len, now);
	pthread_mutex_unlock(&fs->self_lock);
}

/* Whether @a and @b are one state of one file. */
static bool self_attr_same(const struct self_attr *a, const struct self_attr *b)
{
	return a->ino == b->ino && a->size == b->size && a->nlink == b->nlink &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->mode == b->mode &&
	       a->uid == b->uid && a->gid == b->gid && node_same_ident(a->ident, b->ident);
}

/* @st as fs.c's attr_to_stat() left it: st_dev holds the identity. */
static void self_attr_of(const struct stat *st, struct self_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ident = (uint64_t)st->st_dev;
	a->ino = st->st_ino;
	a->size = (uint64_t)st->st_size;
	a->nlink = st->st_nlink;
	a->mtime_ns = wsb_ns_of_ts(&st->st_mtim);
	a->ctime_ns = wsb_ns_of_ts(&st->st_ctim);
	a->mode = st->st_mode;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
}

void wsfs_self_end(struct wsfs *fs, const char *path, size_t len, bool ok,
		   const struct stat *st)
{
	uint64_t h = self_hash(path, len);
	int64_t now = wsfs_now_ns();
	struct wsfs_self *e;

	node_attr_drop_path(fs->nodes, path, len);
	pthread_mutex_lock(&fs->self_lock);
	e = self_find(fs, path, len, h, now);
	if (e && e->inflight > 0) {
		e->inflight--;
		if (!ok) {
			e->kinds = 0;
			e->has_attr = false;
			e->n_prev = 0;
			e->n_made = 0;
		} else if (st) {
			struct self_attr a;
			bool same_made;

			self_attr_of(st, &a);
			/* A reply without the identity (Write, SetAttr) is of
			 * the file the path's last state was, if the inode is
			 * its: the halves it lacks come from there, so that its
			 * echo is not matched by another file on that inode
			 * number (node_same_ident() takes unknown for any). */
			if (e->has_attr && e->attr.ino == a.ino)
				a.ident = node_ident_fill(a.ident, e->attr.ident);
			else if (e->n_made > 0 && e->made[0].ino == a.ino)
				a.ident = node_ident_fill(a.ident, e->made[0].ident);
			if (e->has_attr) {
				memmove(&e->prev[1], &e->prev[0],
					(WSFS_SELF_PREV - 1) * sizeof(e->prev[0]));
				e->prev[0] = e->attr;
				if (e->n_prev < WSFS_SELF_PREV)
					e->n_prev++;
			}
			e->attr = a;
			e->has_attr = true;
			same_made = e->n_made > 0 && e->made[0].ino == a.ino &&
				    node_same_ident(e->made[0].ident, a.ident);
			if (!S_ISDIR(st->st_mode) &&
			    ((e->kinds & (WSFS_SELF_CREATED | WSFS_SELF_MOVED_TO)) || same_made)) {
				if (e->n_made > 0 && !same_made)
					e->n_made = 0;
				memmove(&e->made[1], &e->made[0],
					WSFS_SELF_PREV * sizeof(e->made[0]));
				e->made[0] = e->attr;
				if (e->n_made < WSFS_SELF_PREV + 1)
					e->n_made++;
			}
		}
		if (ok)
			e->until_ns = now + WSFS_SELF_WINDOW_NS;
		if (e->inflight == 0 && fs->self_waiters)
			pthread_cond_broadcast(&fs->self_cond);
	}
	pthread_mutex_unlock(&fs->self_lock);
}

void wsfs_self_existed(struct wsfs *fs, const char *path, size_t len)
{
	struct wsfs_self *e;

	pthread_mutex_lock(&fs->self_lock);
	e = self_find(fs, path, len, self_hash(path, len), wsfs_now_ns());
	if (e) {
		e->kinds &= ~(unsigned)WSFS_SELF_CREATED;
		e->n_made = 0;
		e->made_await = false;
	}
	pthread_mutex_unlock(&fs->self_lock);
}

void wsfs_self_free(struct wsfs *fs)
{
	for (size_t b = 0; b < WSFS_SELF_BUCKETS; b++) {
		struct wsfs_self *e = fs->self_tab[b], *next;

		for (; e; e = next) {
			next = e->next;
			free(e);
		}
		fs->self_tab[b] = NULL;
	}
	fs->n_self = 0;
}

/*
 * Is an event of @kind on @path the echo of an own operation? With @attr,
 * also copies the record's attributes (*has_attr tells whether it has any);
 * with @wait, first waits (at most WSFS_SELF_WAIT_MS) until no own
 * operation on @path is in flight, so that they are its reply's.
 */
static bool self_match_wait(struct wsfs *fs, const ProtobufCBinaryData *path, unsigned kind,
			    struct self_attr *attr, bool *has_attr, bool wait, uint64_t *gen)
{
	const char *p = (const char *)path->data;
	size_t len = path->len;
	uint64_t h = self_hash(p, len);
	int64_t now = wsfs_now_ns();
	struct timespec until = wsb_deadline(CLOCK_MONOTONIC, WSFS_SELF_WAIT_MS);
	struct wsfs_self *e;
	bool hit = false;

	/* agentd's paths are relative, without "./" or extra '/'; own
	 * records use node_path()'s form, the same. */
	pthread_mutex_lock(&fs->self_lock);
	e = self_find(fs, p, len, h, now);
	while (wait && e && e->inflight > 0 && (e->kinds & kind)) {
		int r;

		fs->self_waiters++;
		r = pthread_cond_timedwait(&fs->self_cond, &fs->self_lock, &until);
		fs->self_waiters--;
		now = wsfs_now_ns();
		e = self_find(fs, p, len, h, now);
		if (r == ETIMEDOUT) {
			e = NULL; /* unsure */
			break;
		}
	}
	if (e && self_live(e, now) && (e->kinds & kind)) {
		hit = true;
		if (attr) {
			*attr = e->attr;
			*has_attr = e->has_attr;
		}
		if (gen)
			*gen = e->gen;
	}
	pthread_mutex_unlock(&fs->self_lock);
	return hit;
}

/*
 * An event on @path that was not an own echo: whatever comes next there
 * within the window may be the pod's too, so stop taking events for echoes.
 */
static void self_forget(struct wsfs *fs, const ProtobufCBinaryData *path)
{
	struct wsfs_self *e;

	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, path, wsfs_now_ns());
	if (e) {
		e->kinds = 0;
		e->has_attr = false;
		e->n_prev = 0;
		e->n_made = 0;
		e->moved_to = 0;
	}
	pthread_mutex_unlock(&fs->self_lock);
}

static void self_attr_of_pb(const Wsbridge__V1__Attr *a, struct self_attr *ret);

/*
 * Is @a what an own reply before the last one said of @path (prev), in a
 * record that still takes CHANGED events as echoes? The caller has waited
 * for own operations in flight (self_match_wait).
 */
static bool self_was(struct wsfs *fs, const ProtobufCBinaryData *path, const struct self_attr *a)
{
	int64_t now = wsfs_now_ns();
	struct wsfs_self *e;
	bool hit = false;

	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, path, now);
	if (e && self_live(e, now) && (e->kinds & WSFS_SELF_CHANGED) && e->has_attr)
		for (unsigned i = 0; i < e->n_prev && !hit; i++)
			/* Only a state the clock put before the last one: within
			 * one timestamp tick the pod can make it again. */
			hit = e->prev[i].ctime_ns < e->attr.ctime_ns &&
			      self_attr_same(&e->prev[i], a);
	pthread_mutex_unlock(&fs->self_lock);
	return hit;
}

/*
 * Is @g the file @m with one link less and no other change but its ctime:
 * the file as an own unlink of one of its names left it, caught by an
 * lstat of that name before the kernel dropped it (vfs_unlink lowers the
 * link count and sets ctime first; a lookup without locks still finds the
 * name)?
 */
static bool self_unlinking(const struct self_attr *m, const struct self_attr *g)
{
	return g->ino == m->ino && g->size == m->size && g->mtime_ns == m->mtime_ns &&
	       g->mode == m->mode && g->uid == m->uid && g->gid == m->gid && m->nlink > 0 &&
	       g->nlink == m->nlink - 1 && g->ctime_ns >= m->ctime_ns &&
	       node_same_ident(g->ident, m->ident);
}

/*
 * Did agentd's lstat for an event on @path find @a, the file an own
 * operation put there as one of the own replies on it left it (made), or
 * as the own removal of the name since left it (self_unlinking)? Then the
 * event is an own echo, even after an own removal of the name began
 * (which clears WSFS_SELF_CREATED and the CHANGED records): any later
 * change sends an event of its own.
 */
static bool self_made(struct wsfs *fs, const ProtobufCBinaryData *path,
		      const Wsbridge__V1__Attr *a, bool created)
{
	int64_t now = wsfs_now_ns();
	struct self_attr got;
	struct wsfs_self *e;
	bool hit;

	self_attr_of_pb(a, &got);
	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, path, now);
	hit = false;
	if (e && self_live(e, now) && (!created || e->made_await))
		for (unsigned i = 0; i < e->n_made && !hit; i++)
			/* An older state only if the clock put it before the
			 * newest (as in self_was()). */
			hit = (i == 0 || e->made[i].ctime_ns < e->made[0].ctime_ns) &&
			      self_attr_same(&e->made[i], &got);
	/* git's temporary object: its CREATED, lstat'ed while the own
	 * unlink after the link ran (the name still there, nlink 1). */
	if (!hit && e && self_live(e, now) && (!created || e->made_await) &&
	    (e->kinds & WSFS_SELF_DELETED) && e->n_made > 0)
		hit = self_unlinking(&e->made[0], &got);
	if (hit && created)
		e->made_await = false;
	pthread_mutex_unlock(&fs->self_lock);
	return hit;
}

/* The CREATED of the own create or link that made @path's file came. */
static void self_made_seen(struct wsfs *fs, const ProtobufCBinaryData *path)
{
	struct wsfs_self *e;

	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, path, wsfs_now_ns());
	if (e)
		e->made_await = false;
	pthread_mutex_unlock(&fs->self_lock);
}

/* The server inode of the file an own operation put at @path (made), into
 * *ino; false when there is none. */
static bool self_made_ino(struct wsfs *fs, const ProtobufCBinaryData *path, uint64_t *ino)
{
	int64_t now = wsfs_now_ns();
	struct wsfs_self *e;
	bool hit;

	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, path, now);
	hit = e && self_live(e, now) && e->n_made > 0;
	if (hit)
		*ino = e->made[0].ino;
	pthread_mutex_unlock(&fs->self_lock);
	return hit;
}

/* self_match_wait() without waiting. */
static bool self_match(struct wsfs *fs, const ProtobufCBinaryData *path, unsigned kind,
		       struct self_attr *attr, bool *has_attr)
{
	return self_match_wait(fs, path, kind, attr, has_attr, false, NULL);
}

/* Is a MOVED event from @from to @to the echo of one own rename (or
 * exchange) between those two names (wsfs_self_moved())? */
static bool self_moved_match(struct wsfs *fs, const ProtobufCBinaryData *from,
			     const ProtobufCBinaryData *to)
{
	int64_t now = wsfs_now_ns();
	struct wsfs_self *e;
	bool hit;

	pthread_mutex_lock(&fs->self_lock);
	e = self_of(fs, from, now);
	hit = e && self_live(e, now) && (e->kinds & WSFS_SELF_MOVED_FROM) &&
	      e->moved_to == self_hash((const char *)to->data, to->len);
	pthread_mutex_unlock(&fs->self_lock);
	return hit && self_match(fs, to, WSFS_SELF_MOVED_TO, NULL, NULL);
}

static void self_attr_of_pb(const Wsbridge__V1__Attr *a, struct self_attr *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->ident = wsfs_attr_ident(a);
	ret->ino = a->ino;
	ret->size = a->size;
	ret->nlink = a->nlink;
	ret->mtime_ns = a->mtime_ns;
	ret->ctime_ns = a->ctime_ns;
	ret->mode = a->mode;
	ret->uid = a->uid;
	ret->gid = a->gid;
}

/*
 * A CHANGED event on @path, which an own operation changed lately: is the
 * file still as that operation's reply left it? Answered from the event's
 * attributes (agentd's lstat when it sent the event) when they match, else
 * by one Stat, on this (the monitor) thread. False when unsure (then
 * invalidate).
 */
static bool self_changed_only(struct wsfs *fs, const ProtobufCBinaryData *path,
			      const Wsbridge__V1__Attr *ev_attr)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	struct self_attr want, now;
	uint64_t gen, gen2;
	bool has = false, same = false;

	/* Taken after the change that sent the event: if it is what the own
	 * reply said, any change before it is in that reply, and any after
	 * it sends an event of its own. Otherwise an own operation may have
	 * ended since: ask. */
	if (ev_attr) {
		if (!self_match_wait(fs, path, WSFS_SELF_CHANGED, &want, &has, true, &gen) ||
		    !has)
			return false;
		self_attr_of_pb(ev_attr, &now);
		if (self_attr_same(&now, &want))
			return true;
		/* The state between two own operations (a write, then a
		 * chmod): the later one's own event follows. */
		if (self_was(fs, path, &now))
			return true;
	}

	/* An own operation that began during the Stat may have been seen half
	 * done (agentd's SetAttr is several syscalls): ask again, once. */
	for (unsigned tries = 0; tries < 2 && !same; tries++) {
		Wsbridge__V1__StatReply *rep = NULL;
		struct wsc_status st;

		if (!self_match_wait(fs, path, WSFS_SELF_CHANGED, &want, &has, true, &gen) ||
		    !has || atomic_load(&fs->conn_down))
			return false;
		q.path = *path;
		if (wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/Stat", &q.base,
				 &wsbridge__v1__stat_reply__descriptor, (ProtobufCMessage **)&rep,
				 fs->cfg.rpc_timeout_ms, &st) < 0)
			return false;
		if (rep->attr) {
			self_attr_of_pb(rep->attr, &now);
			same = self_attr_same(&now, &want);
		}
		protobuf_c_message_free_unpacked(&rep->base, NULL);
		if (same || !self_match_wait(fs, path, WSFS_SELF_CHANGED, &want, &has, true,
					     &gen2) || !has)
			break;
		/* An own operation ended while the Stat ran: the server then
		 * matches its reply, which the kernel has. */
		same = self_attr_same(&now, &want);
		if (gen2 == gen)
			break; /* no own operation since: not (only) ours */
	}
	return same;
}

/* What handle_event() carries from one event to the next. */
struct watch_state {
	/* check_link() and ev_gone() calls in the batch */
	unsigned link_checks, gone_checks;
	/* CLOCK_MONOTONIC ns when the batch arrived */
	int64_t batch_ns;
	/* The event after the one handled (NULL: none), and whether that
	 * handled it too (a RENAME_EXCHANGE's second half). */
	const Wsbridge__V1__WatchEvent *next;
	bool skip_next;
	/* The path of the batch's last CHANGED event found to be an own echo
	 * (a run of CHANGED events on it is checked once), or NULL. */
	const ProtobufCBinaryData *last_ok;
	/* The last READY or OVERFLOW said that agentd could not watch every
	 * directory, or was walking the tree anew (the caller then keeps
	 * watch_live false). */
	bool partial;
	/* READY said that agentd flags the changes it folds into a CREATED
	 * or MOVED (WatchEvent.changed); an older agentd may fold one into
	 * any of them. */
	bool flags_changed;
};

/*
 * Is @a a state of @path that own operations left (the last reply's, one
 * before it, or one of the file an own create or link made)? Of a
 * directory (@is_dir): its inode, mode and owner as the last own reply
 * (mkdir, setattr) left them, and its times as well, or moved on together
 * (mtime == ctime, later than the reply's): the mount's own entries made
 * in it since change those, and a name the pod makes there sends an event
 * of its own; the pod's utimensat(2) leaves mtime and ctime apart (one
 * with UTIME_NOW for both passes). Waits for own operations on @path in
 * flight first (self_match_wait). False without @a.
 */
static bool self_state(struct wsfs *fs, const ProtobufCBinaryData *path,
		       const Wsbridge__V1__Attr *a, bool is_dir)
{
	unsigned kinds = is_dir ? WSFS_SELF_CHANGED | WSFS_SELF_CREATED : WSFS_SELF_CHANGED;
	struct self_attr want, got;
	bool has = false;

	if (!a)
		return false;
	self_attr_of_pb(a, &got);
	if (self_match_wait(fs, path, kinds, &want, &has, true, NULL) && has) {
		if (is_dir)
			return want.ino == got.ino && want.mode == got.mode && want.uid == got.uid &&
			       want.gid == got.gid && node_same_ident(want.ident, got.ident) &&
			       ((got.mtime_ns == want.mtime_ns && got.ctime_ns == want.ctime_ns) ||
				(got.mtime_ns == got.ctime_ns && got.ctime_ns >= want.ctime_ns));
		if (self_attr_same(&want, &got))
			return true;
	}
	return !is_dir && (self_was(fs, path, &got) || self_made(fs, path, a, false));
}

/*
 * The echo of an own create or rename on @ev's path that says a change of
 * the path came after it (WatchEvent.changed): unless the file is as own
 * operations left it, drop what the mount and the kernel keep of it, as for
 * a CHANGED event (its names stay).
 */
static void ev_folded(struct wsfs *fs, const Wsbridge__V1__WatchEvent *ev,
		      const struct watch_state *ws)
{
	if (!ws->flags_changed) {
		/* An older agentd folds without saying so; a rename's reply
		 * has no attributes to compare: what is kept of the file
		 * goes (AUTO_INVAL_DATA drops its pages if the attributes
		 * fetched again say so). */
		if (ev->kind == WSBRIDGE__V1__WATCH_EVENT__KIND__MOVED && ev->attr && !ev->is_dir)
			ev_attr_only(fs, ev->attr->ino, wsfs_attr_ident(ev->attr));
		return;
	}
	if (!ev->changed || ev->gone)
		return; /* gone since: what comes to the name sends its own event */
	if (self_state(fs, &ev->path, ev->attr, ev->is_dir))
		return;
	if (!ev->attr && !ev->is_dir) {
		Wsbridge__V1__Attr a = WSBRIDGE__V1__ATTR__INIT;

		/* Past a batch's first 1024: the file an own operation put
		 * there, if any (as for CHANGED). */
		if (self_made_ino(fs, &ev->path, &a.ino)) {
			ev_changed(fs, &ev->path, &a);
			return;
		}
	}
	ev_changed(fs, &ev->path, ev->attr);
}

/* Returns true for READY. */
static bool handle_event(struct wsfs *fs, const Wsbridge__V1__WatchEvent *ev,
			 struct watch_state *ws)
{
	if (wsb_log_enabled(WSB_LOG_DEBUG)) {
		char *p = wsb_escape(ev->path.data, ev->path.len, 200);

		wsb_debug("watch: kind %d '%s'%s", (int)ev->kind, p ? p : "?",
			  ev->is_dir ? " (dir)" : "");
		free(p);
	}
	switch (ev->kind) {
	case WSBRIDGE__V1__WATCH_EVENT__KIND__READY:
		ws->partial = ev->partial;
		ws->flags_changed = ev->changed;
		return true;
	case WSBRIDGE__V1__WATCH_EVENT__KIND__OVERFLOW:
		wsb_info("watch: events were lost; dropping every cached entry");
		if (ev->partial && !ws->partial)
			wsb_notice("watch: agentd cannot watch every directory now (its inotify "
				   "watch limit, an error, or a rescan: see its log); caches expire by "
				   "entry_timeout/attr_timeout until it can");
		ws->partial = ev->partial;
		/* Before the invalidation: no reply computed after it may get
		 * the long timeouts (fs.c ttl_for). */
		if (ev->partial)
			atomic_store(&fs->watch_live, false);
		wsfs_invalidate_all(fs);
		break;
	case WSBRIDGE__V1__WATCH_EVENT__KIND__CHANGED:
		if (ws->last_ok && ws->last_ok->len == ev->path.len &&
		    memcmp(ws->last_ok->data, ev->path.data, ev->path.len) == 0)
			break; /* the same echo again, just checked */
		if (self_changed_only(fs, &ev->path, ev->attr)) {
			ws->last_ok = &ev->path;
			break;
		}
		/* Gone, after an own removal: the change (most likely this
		 * mount's own write, then unlink) was to a name this mount
		 * removed itself; another name of the same file keeps its
		 * caches until they time out, as for any pod-side change
		 * racing an own one (fs.h). */
		if (ev->gone &&
		    self_match_wait(fs, &ev->path, WSFS_SELF_DELETED | WSFS_SELF_MOVED_FROM, NULL,
				    NULL, true, NULL))
			break;
		/* As an own create or link left it, caught after an own
		 * unlink began (git's temporary object after its link). */
		if (ev->attr && !ev->is_dir && self_made(fs, &ev->path, ev->attr, false))
			break;
		/* Without attributes (past a batch's first 1024): the file
		 * is the one an own operation put there, if any; what this
		 * mount keeps of that inode goes, not of every file. */
		if (!ev->attr && !ev->gone && !ev->is_dir) {
			Wsbridge__V1__Attr a = WSBRIDGE__V1__ATTR__INIT;

			if (self_made_ino(fs, &ev->path, &a.ino)) {
				ev_changed(fs, &ev->path, &a);
				break;
			}
		}
		/* Each CHANGED is checked by attributes: nothing to forget. */
		ev_changed(fs, &ev->path, ev->attr);
		break;
	case WSBRIDGE__V1__WATCH_EVENT__KIND__CREATED:
		/* Own create/mkdir/link/...: the kernel has the reply's
		 * entry and updated the parent itself (fs/fuse/dir.c
		 * fuse_dir_changed). */
		if (self_match(fs, &ev->path, WSFS_SELF_CREATED, NULL, NULL)) {
			self_made_seen(fs, &ev->path);
			/* The pod's write right after the own create. */
			ev_folded(fs, ev, ws);
			break;
		}
		/* The file an own create or link made, found there when
		 * agentd sent the event; an own unlink has begun since (which
		 * clears WSFS_SELF_CREATED). */
		if (ev->attr && !ev->is_dir && self_made(fs, &ev->path, ev->attr, true))
			break;
		/*
		 * Gone when agentd sent it, and removed by an own operation
		 * since this mount's last own create there (git's temporary
		 * object: create, link, unlink, all before agentd read the
		 * first event): the name is absent, as that removal's reply
		 * left it here, whoever made it in between; a name made
		 * after agentd's lstat sends a CREATED of its own. Without
		 * this the late echo dropped what the mount knew of the
		 * directory's names (ev_name).
		 */
		if (ev->gone && !ev->is_dir &&
		    self_match_wait(fs, &ev->path, WSFS_SELF_DELETED | WSFS_SELF_MOVED_FROM, NULL,
				    NULL, true, NULL)) {
			self_made_seen(fs, &ev->path);
			break;
		}
		self_forget(fs, &ev->path);
		ev_name(fs, &ev->path);
		ev_created(fs, &ev->path, ev->attr, ws->batch_ns);
		new_name(fs, ev, &ws->link_checks);
		break;
	case WSBRIDGE__V1__WATCH_EVENT__KIND__DELETED:
		if (self_match(fs, &ev->path, WSFS_SELF_DELETED, NULL, NULL))
			break;
		self_forget(fs, &ev->path);
		ev_name(fs, &ev->path);
		ev_gone(fs, &ev->path, ws->batch_ns, &ws->gone_checks);
		break;
	case WSBRIDGE__V1__WATCH_EVENT__KIND__MOVED:
		if (self_moved_match(fs, &ev->from, &ev->path)) {
			/* The pod's append right after the own rename. */
			ev_folded(fs, ev, ws);
			break;
		}
		if (ev_exchanged(fs, ev, ws->next)) {
			ws->skip_next = true;
			break;
		}
		self_forget(fs, &ev->from);
		self_forget(fs, &ev->path);
		atomic_fetch_add(&fs->rm_gen, 1); /* fs.c rm_ok: new parents */
		/* The kernel's entries first: ev_moved() changes what the
		 * paths resolve to. */
		ev_name(fs, &ev->from);
		ev_name(fs, &ev->path);
		ev_moved(fs, &ev->from, &ev->path, ev->attr, ws->batch_ns, &ws->gone_checks);
		/* A link made and moved before agentd reported it. */
		new_name(fs, ev, &ws->link_checks);
		break;
	default:
		break; /* a kind from a newer agentd */
	}
	return false;
}

/*
 * One cheap bounded call (Stat of the root) to see whether agentd answers;
 * ends or starts a "down" period accordingly. Returns 0 when agentd answered
 * (even with an error), else -errno.
 */
static int probe(struct wsfs *fs)
{
	Wsbridge__V1__StatRequest q = WSBRIDGE__V1__STAT_REQUEST__INIT;
	struct wsc_status st;
	int r;

	r = wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/Stat", &q.base,
			 &wsbridge__v1__stat_reply__descriptor, NULL, fs->cfg.rpc_timeout_ms, &st);
	if (r == 0 || st.has_errno) {
		atomic_store(&fs->auth_refused, false);
		wsfs_conn_ok(fs);
		return 0;
	}
	if (st.code == WSB_UNAUTHENTICATED) {
		/* agentd answers, with another token than at the mount (it
		 * was started again with another --token-file): calls fail
		 * EACCES, not ENOTCONN for good as if it were away. */
		if (!atomic_exchange(&fs->auth_refused, true))
			wsb_err("agentd answers but refuses this mount's bearer token "
				"(UNAUTHENTICATED: %s): calls fail with EACCES until agentd has "
				"the mount's token again, or remount with its new one",
				st.msg);
		wsfs_conn_ok(fs);
		return r;
	}
	if (st.code == WSB_UNAVAILABLE || st.code == WSB_DEADLINE_EXCEEDED)
		wsfs_conn_failed(fs, st.code);
	else
		wsb_debug("probe: %s (%s): %s", strerror(-r), wsb_status_name(st.code), st.msg);
	return r;
}

/*
 * Tell agentd that the batches of Watch call @stream up to the one that
 * carried @sync are applied (WatchSync): the kernel's entries and
 * attributes they drop are gone, so a command whose exit waited for this
 * (docs/protocol.md "Exec") has its changes visible on the mount. A
 * failure is only logged: agentd waits 100 ms at most. Watch thread.
 */
static void ack_batch(struct wsfs *fs, uint64_t stream, uint64_t sync)
{
	Wsbridge__V1__WatchSyncRequest q = WSBRIDGE__V1__WATCH_SYNC_REQUEST__INIT;
	struct wsc_status st;
	int r;

	q.stream = stream;
	q.sync = sync;
	r = wsc_unary_ex(fs->client, "/wsbridge.v1.Workspace/WatchSync", &q.base,
			 &wsbridge__v1__empty__descriptor, NULL, fs->cfg.rpc_timeout_ms, &st);
	if (r < 0)
		wsb_debug("WatchSync: %s", strerror(-r));
}

/*
 * Subscribe and apply events until the stream ends. Returns -ENOSYS when
 * agentd has no Watch, else the stream's end (0 or -errno). With -o no_watch
 * the stream asks for no events (WatchRequest.no_events) and only holds the
 * mount's session (docs/protocol.md "Sessions"); an agentd whose READY does
 * not say that it honours that is left at once: -EPROTONOSUPPORT.
 */
static int run_watch(struct wsfs *fs)
{
	Wsbridge__V1__WatchRequest q = WSBRIDGE__V1__WATCH_REQUEST__INIT;
	struct wsc_stream *s = NULL;
	struct wsc_status st = {0};
	struct watch_state ws = {0};
	bool live = false, stop;
	int r;

	q.no_events = fs->cfg.no_watch;
	/* A command's exit then waits until its changes are applied here
	 * (ack_batch()). */
	q.acks = !fs->cfg.no_watch;
	/*
	 * The stream cannot be cancelled until wsc_stream_open() returns, and
	 * that waits (no deadline: the stream lives on) for a connection,
	 * which an agentd in its SIGTERM drain accepts without answering.
	 * Check with a bounded call first that agentd answers.
	 */
	r = probe(fs);
	if (r < 0)
		return r;
	/* This thread waits on the stream for good: it must not be the one
	 * that polls for the FUSE threads' calls (client.h idle_poller). */
	r = wsc_stream_open_ex(fs->client, "/wsbridge.v1.Workspace/Watch", &q.base, 0,
			       WSC_STREAM_NO_POLL, &s, &st);
	if (r < 0)
		goto out;
	pthread_mutex_lock(&fs->mon_lock);
	if (fs->stopping) {
		pthread_mutex_unlock(&fs->mon_lock);
		wsc_stream_free(s);
		return 0;
	}
	fs->watch = s;
	pthread_mutex_unlock(&fs->mon_lock);

	for (;;) {
		Wsbridge__V1__WatchBatch *b = NULL;
		uint64_t sync, stream;
		bool ready = false;

		r = wsc_stream_recv(s, &wsbridge__v1__watch_batch__descriptor,
				    (ProtobufCMessage **)&b, &st);
		if (r <= 0)
			break;
		if (fs->cfg.no_watch) {
			/* The first batch is READY; from an agentd that honours
			 * no_events it says so, and nothing follows. */
			bool quiet = b->n_events == 1 && b->events[0] &&
				     b->events[0]->kind == WSBRIDGE__V1__WATCH_EVENT__KIND__READY &&
				     b->events[0]->no_events;

			protobuf_c_message_free_unpacked(&b->base, NULL);
			wsfs_conn_ok(fs);
			if (quiet)
				continue;
			/* An agentd without it watches the whole tree for
			 * nothing: give the stream up (it has no sessions
			 * either). */
			wsb_notice("agentd streams events though -o no_watch asked for none (an "
				   "older agentd): closing the stream");
			r = -EPROTONOSUPPORT; /* wsc_stream_free() cancels it */
			break;
		}
		/* inval_entry()/inval_inode() bump inval_seq before each
		 * notification (replies computed across it get short
		 * timeouts, fs.c ttl_for); a batch of own echoes only
		 * sends none and bumps nothing. */
		ws.link_checks = 0;
		ws.gone_checks = 0;
		ws.last_ok = NULL;
		ws.batch_ns = wsb_mono_ns();
		ws.skip_next = false;
		for (size_t i = 0; i < b->n_events; i++) {
			const Wsbridge__V1__WatchEvent *ev = b->events[i];

			if (!ev)
				continue;
			if (ws.skip_next) {
				ws.skip_next = false;
				continue;
			}
			ws.next = i + 1 < b->n_events ? b->events[i + 1] : NULL;
			if (ev->kind != WSBRIDGE__V1__WATCH_EVENT__KIND__CHANGED)
				ws.last_ok = NULL;
			if (handle_event(fs, ev, &ws))
				ready = true;
		}
		sync = b->sync;
		stream = b->stream;
		protobuf_c_message_free_unpacked(&b->base, NULL);
		if (ready && !live) {
			/* Whatever changed before the subscription is unknown. */
			wsfs_invalidate_all(fs);
			live = true;
			atomic_store(&fs->watch_live, !ws.partial);
			wsfs_conn_ok(fs);
			if (ws.partial)
				wsb_notice("watch stream live, but agentd cannot watch every "
					   "directory (its inotify watch limit or an error: see its "
					   "log); caches expire by entry_timeout/attr_timeout");
			else
				wsb_info("watch stream live: kernel caches last up to %g s",
					 fs->cfg.watch_timeout);
		} else if (live) {
			/* After an OVERFLOW: partial or whole again. */
			atomic_store(&fs->watch_live, !ws.partial);
		}
		if (sync)
			ack_batch(fs, stream, sync); /* applied, READY's drop included */
	}

	pthread_mutex_lock(&fs->mon_lock);
	fs->watch = NULL;
	stop = fs->stopping;
	pthread_mutex_unlock(&fs->mon_lock);
	if (live) {
		atomic_store(&fs->watch_live, false);
		/* Events may have been lost; not when wsfs stops: no worker
		 * answers a READ now, and the page locks of one the kernel
		 * sent would hold this thread. */
		if (!stop)
			wsfs_invalidate_all(fs);
		wsb_notice("watch stream ended (%s); caches expire by timeouts until it is back",
			   r == 0 ? "OK" : wsb_status_name(st.code));
	}
	wsc_stream_free(s);
out:
	if (r < 0 && !st.has_errno && st.code == WSB_UNIMPLEMENTED)
		return -ENOSYS;
	if (r < 0 && !st.has_errno &&
	    (st.code == WSB_UNAVAILABLE || st.code == WSB_DEADLINE_EXCEEDED))
		wsfs_conn_failed(fs, st.code);
	return r;
}

static bool before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

enum { WAKE_RECONNECT = 1, WAKE_DOWN = 2 };

/* Wait (mon_lock held) until @until, a stop, or an event in @wake. */
static void wait_until(struct wsfs *fs, const struct timespec *until, int wake)
{
	while (!fs->stopping && !((wake & WAKE_RECONNECT) && fs->want_reconnect) &&
	       !((wake & WAKE_DOWN) && atomic_load(&fs->conn_down))) {
		if (pthread_cond_timedwait(&fs->mon_cond, &fs->mon_lock, until) == ETIMEDOUT)
			break;
	}
}

static void *monitor_main(void *arg)
{
	struct wsfs *fs = arg;
	bool watch_ok = true, said_unimplemented = false;
	/* conn_gen when agentd streamed events to a no_events Watch (0: never):
	 * not asked again until a reconnect (maybe a newer agentd). */
	uint64_t no_quiet_gen = 0;
	struct timespec next_reconnect = { 0, 0 }, next_watch = { 0, 0 }, next_probe = { 0, 0 };

	pthread_mutex_lock(&fs->mon_lock);
	while (!fs->stopping) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (fs->want_reconnect) {
			int r;

			if (before(&now, &next_reconnect)) {
				wait_until(fs, &next_reconnect, 0);
				continue;
			}
			fs->want_reconnect = false;
			pthread_mutex_unlock(&fs->mon_lock);
			r = wsc_reconnect(fs->client);
			if (r == 0) {
				/* A new agentd process: it knows none of our handles. */
				atomic_fetch_add(&fs->conn_gen, 1);
				wsb_notice("transport command started again");
			} else {
				wsb_warn("cannot start the transport command again: %s",
					 strerror(-r));
			}
			pthread_mutex_lock(&fs->mon_lock);
			next_reconnect = wsb_deadline(CLOCK_MONOTONIC, RECONNECT_MIN_MS);
			next_probe = now; /* at once */
			continue;
		}
		if (atomic_load(&fs->conn_down)) {
			if (before(&now, &next_probe)) {
				wait_until(fs, &next_probe, WAKE_RECONNECT);
				continue;
			}
			pthread_mutex_unlock(&fs->mon_lock);
			(void)probe(fs);
			pthread_mutex_lock(&fs->mon_lock);
			next_probe = wsb_deadline(CLOCK_MONOTONIC, WSFS_PROBE_MS);
			continue;
		}
		if (fs->n_pending) {
			pthread_mutex_unlock(&fs->mon_lock);
			wsfs_release_pending(fs);
			pthread_mutex_lock(&fs->mon_lock);
			continue;
		}
		if (!watch_ok && !before(&now, &next_watch)) {
			if (no_quiet_gen && no_quiet_gen == atomic_load(&fs->conn_gen))
				next_watch = wsb_deadline(CLOCK_MONOTONIC, WATCH_RETRY_MS); /* look again later */
			else
				watch_ok = true;
		}
		if (watch_ok) {
			int r;

			pthread_mutex_unlock(&fs->mon_lock);
			r = run_watch(fs);
			pthread_mutex_lock(&fs->mon_lock);
			if (r == -EPROTONOSUPPORT) {
				watch_ok = false;
				no_quiet_gen = atomic_load(&fs->conn_gen);
				next_watch = wsb_deadline(CLOCK_MONOTONIC, WATCH_RETRY_MS);
				continue;
			}
			if (r == -ENOSYS) {
				if (!said_unimplemented && !fs->cfg.no_watch)
					wsb_notice("agentd has no Watch: kernel caches expire by "
						   "their timeouts");
				said_unimplemented = true;
				watch_ok = false;
				next_watch = wsb_deadline(CLOCK_MONOTONIC, WATCH_UNIMPLEMENTED_RETRY_MS);
				continue;
			}
			if (!fs->stopping) {
				struct timespec t = wsb_deadline(CLOCK_MONOTONIC, WATCH_RETRY_MS);

				wait_until(fs, &t, WAKE_RECONNECT | WAKE_DOWN);
			}
			continue;
		}
		wait_until(fs, &next_watch, WAKE_RECONNECT | WAKE_DOWN);
	}
	pthread_mutex_unlock(&fs->mon_lock);
	return NULL;
}

/*
 * wsfs_inval_pages_later()'s thread: drops the queued nodes' pages, and
 * stores the queued chunks (wsfs_store_later) when no node waits; once
 * stopping, frees the chunks left unstored.
 */
static void *nq_main(void *arg)
{
	struct wsfs *fs = arg;

	pthread_mutex_lock(&fs->nq_lock);
	for (;;) {
		struct wsfs_store *s;
		uint64_t id;
		bool stop;

		while (!fs->nq_n && !fs->sq_head && !fs->nq_stop)
			pthread_cond_wait(&fs->nq_cond, &fs->nq_lock);
		if (fs->nq_n) {
			id = fs->nq[--fs->nq_n];
			pthread_mutex_unlock(&fs->nq_lock);
			inval_inode(fs, id, 0);
			pthread_mutex_lock(&fs->nq_lock);
			continue;
		}
		s = fs->sq_head;
		if (!s)
			break;
		fs->sq_head = s->next;
		if (!fs->sq_head)
			fs->sq_tail = &fs->sq_head;
		fs->sq_bytes -= s->len;
		stop = fs->nq_stop;
		pthread_mutex_unlock(&fs->nq_lock);
		if (stop)
			wsfs_store_free(s);
		else
			wsfs_store_pages(fs, s);
		pthread_mutex_lock(&fs->nq_lock);
	}
	pthread_mutex_unlock(&fs->nq_lock);
	return NULL;
}

/* Start nq_main() unless it runs or the mount is stopping; under nq_lock.
 * Returns 0 or the errno of pthread_create(3). */
static int nq_start(struct wsfs *fs)
{
	int r = 0;

	if (!fs->nq_started && !fs->nq_stop) {
		r = pthread_create(&fs->nq_thread, NULL, nq_main, fs);
		fs->nq_started = r == 0;
	}
	return r;
}

void wsfs_store_later(struct wsfs *fs, struct wsfs_store *s)
{
	bool queued = false;

	s->next = NULL;
	pthread_mutex_lock(&fs->nq_lock);
	if (fs->sq_bytes + s->len <= WSFS_STORE_MAX && nq_start(fs) == 0 && fs->nq_started) {
		*fs->sq_tail = s;
		fs->sq_tail = &s->next;
		fs->sq_bytes += s->len;
		queued = true;
		pthread_cond_signal(&fs->nq_cond);
	}
	pthread_mutex_unlock(&fs->nq_lock);
	if (!queued)
		wsfs_store_free(s);
}

void wsfs_inval_pages_later(struct wsfs *fs, uint64_t nodeid)
{
	bool queued = false;
	int r = 0;

	pthread_mutex_lock(&fs->nq_lock);
	for (unsigned i = 0; i < fs->nq_n && !queued; i++)
		queued = fs->nq[i] == nodeid;
	r = nq_start(fs);
	if (!queued && fs->nq_started && fs->nq_n < WSFS_NQ_MAX) {
		fs->nq[fs->nq_n++] = nodeid;
		queued = true;
		pthread_cond_signal(&fs->nq_cond);
	}
	pthread_mutex_unlock(&fs->nq_lock);
	if (!queued)
		wsb_warn("cannot drop the cached pages of node %llu%s%s: the next open drops them",
			 (unsigned long long)nodeid, r ? ": " : "", r ? strerror(r) : "");
}

int wsfs_monitor_start(struct wsfs *fs)
{
	int r = pthread_create(&fs->monitor, NULL, monitor_main, fs);

	if (r)
		return -r;
	fs->monitor_started = true;
	return 0;
}

int wsfs_monitor_stop(struct wsfs *fs, unsigned ms)
{
	/* pthread_timedjoin_np() takes a CLOCK_REALTIME deadline. */
	struct timespec until = wsb_deadline(CLOCK_REALTIME, ms);
	int r;

	r = wsfs_ping_stop(fs, &until);
	if (r < 0) {
		wsb_warn("the pinger thread is still in a call to agentd after %u ms", ms);
		return r;
	}
	/* The request threads, the only ones that queue, have ended. */
	pthread_mutex_lock(&fs->nq_lock);
	fs->nq_stop = true;
	pthread_cond_signal(&fs->nq_cond);
	pthread_mutex_unlock(&fs->nq_lock);
	if (fs->nq_started) {
		/* Its notification may wait for a page lock that a writer
		 * holds until the kernel gets its WRITE answered (or the
		 * unmount fails it). */
		if (pthread_timedjoin_np(fs->nq_thread, NULL, &until) == ETIMEDOUT) {
			wsb_warn("the page invalidation thread is still in the kernel after %u ms",
				 ms);
			return -ETIMEDOUT;
		}
		fs->nq_started = false;
	}

	if (!fs->monitor_started)
		return 0;
	pthread_mutex_lock(&fs->mon_lock);
	fs->stopping = true;
	if (fs->watch)
		wsc_stream_cancel(fs->watch);
	pthread_cond_broadcast(&fs->mon_cond);
	pthread_mutex_unlock(&fs->mon_lock);
	r = pthread_timedjoin_np(fs->monitor, NULL, &until);
	if (r == ETIMEDOUT) {
		wsb_warn("the monitor thread is still in a call to agentd after %u ms", ms);
		return -ETIMEDOUT;
	}
	fs->monitor_started = false;
	return 0;
}
