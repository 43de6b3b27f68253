/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs's nodeid table: the FUSE nodeids this mount handed to the kernel, each
 * standing for one file of the workspace known by one or more names (parent
 * nodeid, name bytes), from which the node's wire path is built by walking
 * up to the root.
 *
 * Model (FUSE protocol, libfuse fuse_lowlevel.h "lookup count"):
 * - A node is added or found by node_lookup(), which counts one kernel lookup
 *   (nlookup). node_forget() takes lookups back; a node is freed when its
 *   lookup count is 0, no child names it as parent, and no open file (struct
 *   node_fh) refers to it. The root (NODE_ROOT_ID) is never freed.
 * - A name maps to the node of the server file it held when last looked up.
 *   A lookup that finds the name bound to a node with another server inode or
 *   file type removes that name from it and binds the name anew, so the
 *   kernel sees a new nodeid for a replaced file.
 * - Hard links share a node (so the kernel shares one inode, page cache and
 *   nlink): a lookup of a non-directory, non-symlink whose nlink is above 1
 *   joins the node that already has a name for the same server inode.
 *   Paths use the node's most recently confirmed name. A hard-linked
 *   symlink gets a node per name: what its target means depends on the
 *   name's directory.
 * - Detached nodes (every name unlinked, renamed over or replaced) have no
 *   path; ops on them must go through an open file's server handle
 *   (node_fh_get()) or the handle kept for them (node_keep()).
 * - Names are byte strings of 1..NODE_NAME_MAX bytes without '/' or NUL and
 *   not "." or ".."; they are stored exactly (no normalisation).
 *
 * Nodeids are this table's own (a counter from 2), never reused.
 *
 * Thread safety: every function takes the table's mutex; any thread may call
 * any function. Nothing here blocks on I/O.
 */
#ifndef WSFS_NODE_H
#define WSFS_NODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/** Nodeid of the root directory (FUSE_ROOT_ID). */
#define NODE_ROOT_ID 1

/** Longest name accepted, bytes (FUSE_NAME_MAX in the kernel's fuse_i.h). */
#define NODE_NAME_MAX 1024

/** Deepest path built, components; deeper is -ELOOP (cannot happen normally). */
#define NODE_DEPTH_MAX 4096

struct node_table;

/**
 * Link an open file (fs.c's struct wsfs_file) to its node. Embedded in the
 * open file; all fields are the table's (protected by its mutex).
 */
struct node_fh {
	struct node_fh *prev, *next; /**< the node's list of open files */
	uint64_t nodeid;
	unsigned refs; /**< 1 for the kernel's open, +1 per node_fh_get() */
};

/**
 * What this mount last saw of a file's contents, for FOPEN_KEEP_CACHE: the
 * kernel's page cache may be kept at open only when (ino, size, mtime) still
 * match (libfuse fuse_common.h, keep_cache).
 */
struct node_seen {
	bool valid;
	uint64_t ino;
	uint64_t ident;    /**< node_ident(), 0 unknown (node_same_ident()) */
	uint64_t size;     /**< bytes */
	int64_t mtime_ns;  /**< ns since the epoch */
};

/** A copy of one node's state (node_info()). */
struct node_info {
	uint64_t ino;     /**< server inode number; 0 = not known yet */
	uint64_t ident;   /**< node_ident(); 0 = unknown (node_same_ident()) */
	uint64_t parent_ino; /**< the parent's server inode; the root's own for the root, 0 if detached */
	uint64_t parent;  /**< the nodeid of that parent; 0 for the root and if detached */
	uint32_t mode;    /**< file type bits (S_IFMT) as last seen */
	uint64_t nlookup; /**< kernel lookups outstanding */
	bool attached;    /**< has a path (the root always has) */
	unsigned names;   /**< names (hard links) known; 0 when detached or the root */
	unsigned open_files;
	struct node_seen seen;
	/** CLOCK_MONOTONIC ns of the last node_lookup() that gave it, or
	 * node_rename() that moved it: when a reply of agentd's (or an own
	 * change) last said a name is it. */
	int64_t bound_ns;
};

/** One (parent, name) binding, as node_snapshot() returns it. */
struct node_ref {
	uint64_t nodeid;
	uint64_t parent; /**< 0 for the root */
	char *name;      /**< NUL-terminated copy; NULL for the root */
	size_t name_len; /**< bytes */
};

/**
 * Create a table holding only the root (nodeid NODE_ROOT_ID, lookup count 1,
 * server inode unknown). Returns 0 and sets *ret, or -ENOMEM.
 */
int node_table_new(struct node_table **ret);

/** Free the table and every node. No other call may run. NULL is a no-op. */
void node_table_free(struct node_table *t);

/** Number of nodes in the table, the root included. */
size_t node_count(struct node_table *t);

/**
 * True when @p len bytes at @p name are a valid single name: 1..NODE_NAME_MAX
 * bytes, no '/' or NUL, not "." or "..".
 */
bool node_name_ok(const char *name, size_t len);

/** Smallest directory offset node_dir_hash() gives: 1 and 2 follow "."
 * and "..". */
#define NODE_DIR_OFF_MIN 3
/** Largest: 32-bit programs' off_t (ext4 gives them 32-bit hash offsets
 * too; FUSE cannot tell who asks, so all get those). */
#define NODE_DIR_OFF_MAX ((uint64_t)INT32_MAX)

/**
 * Where the entry @p name (@p len bytes) goes in any directory listing:
 * SipHash-2-4 of the name under the table's random key, in
 * [NODE_DIR_OFF_MIN, NODE_DIR_OFF_MAX]. A name keeps its hash for the
 * table's life, whichever listing it comes in, as with ext4's hash offsets;
 * node_dir_offs() turns a listing's hashes into its offsets (FUSE dirent
 * off, what telldir(3) returns and a READDIR resumes at). So a reader
 * resumed at an offset after the pod changed the directory still gets every
 * name that was there throughout, once (readdir(3): a name added or removed
 * meanwhile may or may not be returned). Any thread; no lock.
 */
uint64_t node_dir_hash(const struct node_table *t, const char *name, size_t len);

/**
 * Turn the ascending hashes @p offs[0..@p n) of one listing (node_dir_hash(),
 * names of equal hash in byte order) into its offsets, in place: each
 * becomes the larger of its hash and the previous offset + 1, so no two
 * entries share one (a shared offset would make a reader resumed there
 * skip or repeat the names after it). A name's offset then equals its hash
 * unless names of nearby hashes precede it (about n^2 / 2^31 per listing,
 * 20,000 names: one in ten listings has such a pair); it moves only when
 * one of those comes or goes, and a reader resumed at the offset such a
 * name had then skips it (ext4 would repeat names instead). The last offsets may pass NODE_DIR_OFF_MAX
 * (which only a 32-bit program minds). Pure; any thread.
 */
void node_dir_offs(uint64_t *offs, size_t n);

/**
 * The kernel learnt the name @p name (@p len bytes) in directory @p parent,
 * which is the server file with inode @p ino, identity @p ident
 * (node_ident(); 0 unknown: node_same_ident()), type @p mode (S_IFMT bits; permission bits
 * are ignored) and link count @p nlink: find the node bound
 * to that name, or bind the name (to the node of another name of the same
 * file when @p nlink > 1, else to a new node), and count one lookup (a FUSE
 * lookup/create/mkdir/link/... reply, or a READDIRPLUS entry). A name bound
 * to a node with another server inode, identity or type is taken from that
 * node first (a freed inode number comes back with the next file made).
 *
 * @param since  NODE_OWN for a name this mount made (create, mkdir, link,
 *               ...: moves the names generation), NODE_ANY for one that
 *               needs no check, or the node_names_gen() read before agentd
 *               was asked (LOOKUP, a listing for READDIRPLUS): see there.
 * @param ret_id the nodeid to give the kernel
 * @return 0; -EAGAIN (with @p since a generation: the name holds another
 *         file in the table, and names changed since or a change is in
 *         flight; nothing changed: ask again); -ESTALE when @p parent is
 *         not in the table or is detached; -EINVAL for a bad name
 *         (node_name_ok()); -ENOMEM.
 */
int node_lookup(struct node_table *t, uint64_t since, uint64_t parent, const char *name,
		size_t len, uint64_t ino, uint64_t ident, uint32_t mode, uint32_t nlink,
		uint64_t *ret_id);

/**
 * A node without a name for the server file with inode @p ino, identity
 * @p ident and type @p mode, looked up once: for a file this mount has just
 * made (or opened, O_CREAT) in a directory that lost its name in the table
 * meanwhile (the pod renamed it), whose create must still succeed, as on a
 * local disk, and give the kernel a nodeid. It is reached through its open files only, as
 * a node whose last name went. @p ret_id: the nodeid. Returns 0 or -ENOMEM.
 * Any thread.
 */
int node_new_detached(struct node_table *t, uint64_t ino, uint64_t ident, uint32_t mode,
		      uint64_t *ret_id);

/* One half of node_ident(): @p x hashed to 32 bits, 0 only for 0. */
static inline uint32_t node_ident_half(uint64_t x)
{
	uint32_t h;

	if (!x)
		return 0;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL; /* splitmix64's finaliser */
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	h = (uint32_t)(x ^ (x >> 32));
	return h ? h : 1;
}

/**
 * What names one server file beyond its inode number, which a file system
 * gives to the next file it makes once freed (ext4 at once): its birth time
 * @p btime_ns (Attr.btime_ns) hashed into the high 32 bits and its
 * generation @p generation (Attr.generation) into the low 32, each half 0
 * when unknown (agentd's file system keeps none, or the reply carries
 * none: wsbridge.proto). The generation tells apart files born within one
 * tick of the kernel's file clock, which share a birth time. Pure.
 */
static inline uint64_t node_ident(int64_t btime_ns, uint64_t generation)
{
	return (uint64_t)node_ident_half((uint64_t)btime_ns) << 32 | node_ident_half(generation);
}

/**
 * Whether identities @p a and @p b (node_ident()) may be one file's: each
 * half equal, or unknown on either side. (server inode, identity) names one
 * file where an inode number alone is reused. Pure.
 */
static inline bool node_same_ident(uint64_t a, uint64_t b)
{
	uint32_t ah = (uint32_t)(a >> 32), bh = (uint32_t)(b >> 32);
	uint32_t al = (uint32_t)a, bl = (uint32_t)b;

	return (!ah || !bh || ah == bh) && (!al || !bl || al == bl);
}

/** Identity @p a with the halves it does not know taken from @p b. Pure. */
static inline uint64_t node_ident_fill(uint64_t a, uint64_t b)
{
	if (!(a >> 32))
		a |= b & 0xffffffff00000000ULL;
	if (!(uint32_t)a)
		a |= b & 0xffffffffULL;
	return a;
}

/** node_lookup()'s @p since for a change of this mount's own. */
#define NODE_OWN 0
/** node_lookup()'s @p since for a name learnt without a check. */
#define NODE_ANY UINT64_MAX

/**
 * The names generation of directory @p dir (a nodeid; 0: of renames of
 * directories alone): a number moved, under the table's lock, by every
 * change of names this mount makes in @p dir (node_rename(),
 * node_unlink(), node_lookup() with NODE_OWN, node_names_begin/end()),
 * whether or not the table knew the names, and by every own rename of a
 * directory anywhere (it changes the paths below it). A LOOKUP reads it
 * before it asks agentd about a name and gives it to node_lookup() or
 * node_unlink_since(), which refuse (-EAGAIN) to apply an answer that
 * disagrees with the table once it moved or while an own change in @p dir
 * (or a directory rename) is in flight: agentd's answer may be from before
 * a rename, unlink or create through the mount, and applying it would bind
 * the name to the file it held before (the VFS sends LOOKUP to revalidate
 * a dentry without the directory's lock, so one can cross a RENAME of the
 * same name). Per directory, so that writers elsewhere cost a lookup
 * nothing. Never NODE_OWN or NODE_ANY.
 */
uint64_t node_names_gen(struct node_table *t, uint64_t dir);

/**
 * An own change of names in directory @p dir (a RENAME, UNLINK, CREATE,
 * ...; @p move: a rename of a directory, or of a name the table does not
 * hold) is about to be asked of agentd: move @p dir's generation (and the
 * moves') and count the change in flight until node_names_end() with the
 * same arguments, which moves them again. Call end after the table holds
 * the change (or the change failed). Any thread.
 */
void node_names_begin(struct node_table *t, uint64_t dir, bool move);
void node_names_end(struct node_table *t, uint64_t dir, bool move);

/**
 * Wait until no own change in @p dir (0: none but directory renames) and
 * no rename of a directory is in flight, at most @p ms milliseconds: an
 * answer refused while one was is asked again after it (its thread may be
 * descheduled between agentd's answer and the table's update). Any thread
 * but one inside such a change.
 */
void node_names_wait(struct node_table *t, uint64_t dir, unsigned ms);

/** True when an answer about a name in @p dir (0: a path, checked against
 * directory renames alone) asked for at generation @p since is still
 * current: nothing moved and no own change there is in flight. */
bool node_names_still(struct node_table *t, uint64_t dir, uint64_t since);

/**
 * FUSE forget: take back @p nlookup lookups of @p id (clamped at the count
 * held), freeing the node when nothing else holds it. Unknown ids are
 * ignored. Returns the lookups still held after the call.
 */
uint64_t node_forget(struct node_table *t, uint64_t id, uint64_t nlookup);

/**
 * The wire path of @p id: names joined with '/', relative to the root ("" for
 * the root), in a malloc'd NUL-terminated buffer *ret (caller frees) of
 * *ret_len bytes (may be NULL).
 *
 * @return 0; -ESTALE for an unknown or detached node; -ELOOP deeper than
 *         NODE_DEPTH_MAX; -ENOMEM.
 */
int node_path(struct node_table *t, uint64_t id, char **ret, size_t *ret_len);

/**
 * A symlink target that keeps whoever follows it inside the workspace
 * (wsfs -o transform_symlinks). @p dir (@p dir_len bytes) is the wire path
 * of the link's directory ("" for the root, no leading or trailing '/'),
 * @p target the link's target (NUL-terminated). A relative target whose
 * ".." components all come first, no more of them than @p dir has
 * components, stays as it is (*@p ret = NULL): it cannot climb above the
 * root even through other links on the way, each kept inside in turn.
 * Any other (absolute, or a ".." later or one too many) is resolved by its
 * words as if the workspace root were "/" (".." at the root stays there)
 * and given as that path relative to @p dir ("../" once per component of
 * @p dir, then the path), which has no ".." after the climb to the root:
 * *@p ret, malloc'd, NUL-terminated. A ".." after a component that is
 * itself a link then means that component's parent, not its target's: the
 * price of never leaving. Returns 0, -ENAMETOOLONG (PATH_MAX) or -ENOMEM.
 * No lock; any thread.
 */
int node_link_inside(const char *dir, size_t dir_len, const char *target, char **ret);

/** The nodeid name @p name (@p len bytes) of @p parent is bound to; 0 if none. */
uint64_t node_child(struct node_table *t, uint64_t parent, const char *name, size_t len);

/**
 * Give the non-directory @p id, of server inode @p ino, the agentd handle
 * @p handle (nonzero) of its file, kept open when a rename through the
 * mount replaced its name (RenameRequest.keep_replaced): the kernel may
 * still open the node (open(2) that looked the name up just before;
 * /proc/PID/fd/N of an O_PATH descriptor), and the handle opens the same
 * file again, as a local file system would. Called before node_rename()
 * detaches the node, so that no open finds it without a name and without
 * the handle; a node a LOOKUP bound again meanwhile keeps it too. The
 * table owns the handle from then on: when the node is freed it goes to
 * node_kept_drain(). When @p id is no such node (a LOOKUP racing the
 * rename detached another node of @p ino), the first detached node of
 * @p ino without one gets it (a walk of the table). @p ident: the file's
 * identity (node_ident(), 0 unknown): a node of another identity is another
 * file with the same inode number (node_same_ident()). Returns 0; -ESTALE
 * when there is none (the caller releases @p handle); -EINVAL for
 * handle 0.
 */
int node_keep(struct node_table *t, uint64_t id, uint64_t ino, uint64_t ident, uint64_t handle);

/**
 * The handle node_keep() gave node @p id, or, for a detached node without
 * one, another detached node of the same inode (a walk of the table); 0 if
 * none. Borrowed: the table may release it at any time (agentd then says
 * EBADF).
 */
uint64_t node_kept(struct node_table *t, uint64_t id);

/**
 * When node @p id is bound to a name (a hard link of a file a rename
 * replaced; node_keep() runs before node_rename() detaches the node), take
 * its kept handle back: the name may come to hold another file, and opens
 * and GETATTRs of the node go by name. Returns the handle, which the
 * caller releases with agentd, or 0 (none, or the node is detached).
 */
uint64_t node_unkeep_named(struct node_table *t, uint64_t id);

/**
 * Pin @p handle (nonzero: agentd's StatReply.pin) on the regular file node
 * @p id of server inode @p ino and identity @p ident, for the OPENs that
 * follow the LOOKUP that found it (fs.c ws_lookup()): the table owns it
 * from then on (node_pin_get(); freed with the node: node_kept_drain();
 * or once old: node_pins_expire()).
 * Apart from node_keep()'s handle, which GETATTR and opens of a nameless
 * node use. A node keeps one pin: with one already (of the same file), it
 * stays, its age starting again, so that an open in flight with it does
 * not lose it. Returns 0 when @p handle was pinned, else @p handle, which
 * the caller is to release with agentd.
 */
uint64_t node_pin_set(struct node_table *t, uint64_t id, uint64_t ino, uint64_t ident,
		      uint64_t handle);

/**
 * Node @p id's pin when it is younger than @p max_age_ns (0: none), for
 * the caller to use; it stays the table's (every repeat of an open of the
 * node within that age may use it) until node_pins_expire() at a greater
 * age, so a call with it finds it released only when the call took that
 * much longer, or agentd lost it (EBADF: node_pin_drop()).
 */
uint64_t node_pin_get(struct node_table *t, uint64_t id, int64_t max_age_ns);

/**
 * Take node @p id's pin out if it is still @p handle: true when it was,
 * and the caller is to release it with agentd.
 */
bool node_pin_drop(struct node_table *t, uint64_t id, uint64_t handle);

/**
 * Take up to @p max pins (node_pin_set()) at least @p max_age_ns old into
 * @p ids, for the caller to release with agentd: past that age no repeat
 * of an open uses it (node_pin_get()), and it would only hold the file,
 * perhaps unlinked, in agentd. Walks the table at most once per
 * @p max_age_ns / 2, and only while some node has a pin, so callers may
 * call it often. Returns how many. Any thread.
 */
size_t node_pins_expire(struct node_table *t, int64_t max_age_ns, uint64_t *ids, size_t max);

/**
 * When node_pins_expire() walks the table next (CLOCK_MONOTONIC ns, maybe
 * past), or INT64_MAX while no node has a pin: a thread that sleeps until
 * then (fs.c gb_main()) releases the pins of an idle mount in bounded time.
 * Any thread.
 */
int64_t node_pins_due(struct node_table *t);

/**
 * Take up to @p max kept (and pinned) handles whose nodes were freed into
 * @p ids (all nodes' when @p all: at unmount); the caller releases them
 * with agentd. Returns how many.
 */
size_t node_kept_drain(struct node_table *t, uint64_t *ids, size_t max, bool all);

/**
 * The wire path of name @p name (@p len bytes) in directory @p parent, as
 * node_path() gives it; -EINVAL for a bad name.
 */
int node_child_path(struct node_table *t, uint64_t parent, const char *name, size_t len,
		    char **ret, size_t *ret_len);

/**
 * The name @p name in @p parent was removed (unlink, rmdir, or a lookup
 * found it gone): take it from the node bound to it, if any (which is
 * detached when that was its last name). Returns that node's id, or 0.
 * Moves the names generation (node_names_gen()).
 */
uint64_t node_unlink(struct node_table *t, uint64_t parent, const char *name, size_t len);

/**
 * A LOOKUP found @p name in @p parent gone, by an answer asked for at names
 * generation @p since (node_names_gen(), or NODE_ANY: no check): take the
 * name from its node as node_unlink() does, unless the generation moved
 * since or an own change is in flight, bound or not (-EAGAIN: nothing
 * changed, ask again: the name may have been made, or its directory
 * renamed, since). Does not move the generation. Returns 0 or -EAGAIN.
 */
int node_unlink_since(struct node_table *t, uint64_t since, uint64_t parent, const char *name,
		      size_t len);

/**
 * The path of @p id (its first name) no longer exists on the server: drop
 * that name if the node has another one, so that node_path() gives the
 * next. Returns 0, or -ENOENT when the node has one name or none.
 */
int node_drop_first_name(struct node_table *t, uint64_t id);

/**
 * A successful rename(2) of @p oldname in @p oldparent to @p newname in
 * @p newparent: the old name becomes the new one; the name the new one was
 * is removed from its node, or, with @p exchange (RENAME_EXCHANGE), becomes
 * the old name. Unknown names are fine (nothing to move); two names of one
 * file stay as they are (rename(2) does nothing then).
 *
 * @return 0; -ESTALE when a parent is unknown or detached; -EINVAL for a bad
 *         name or a move of a directory into itself; -ENOMEM.
 */
int node_rename(struct node_table *t, uint64_t oldparent, const char *oldname, size_t oldlen,
		uint64_t newparent, const char *newname, size_t newlen, bool exchange);

/**
 * Copy node @p id's state to *ret. Returns 0 or -ESTALE for an unknown id.
 */
int node_info(struct node_table *t, uint64_t id, struct node_info *ret);

/**
 * Up to @p max ids of the named non-directory nodes with server inode
 * @p ino and identity @p ident (node_same_ident()) into @p ids (the
 * caller's array). Returns how many. Any thread.
 */
size_t node_ids_by_ino(struct node_table *t, uint64_t ino, uint64_t ident, uint64_t *ids,
		       size_t max);

/**
 * Set the server inode number and type of @p id (the root's, learnt from its
 * first Stat). Returns 0 or -ESTALE.
 */
int node_set_ino(struct node_table *t, uint64_t id, uint64_t ino, uint32_t mode);

/*
 * Directories whose names this mount knows in full, so that a LOOKUP of a
 * missing name is answered without a round trip (untar, git and compilers
 * look up each name before creating it). A directory's set is begun empty
 * (node_known_begin(): the directory was just made by this mount), then
 * kept up to date by this mount's own creates, links, removes and renames
 * (node_known_add/del). Whatever else may change the directory (a change in
 * the pod, a failed operation, a lost watch stream) drops the set
 * (node_known_drop/_drop_all), as does freeing the directory's node. Names
 * are bytes, as in node_lookup().
 */

/** Most names kept in all sets together; past it sets are dropped. */
#define NODE_KNOWN_MAX ((size_t)1 << 20)

/**
 * Begin an empty set for directory @p dir, replacing any, unless @p *seq
 * moved on from @p seq0 (read under the table lock: a caller that bumps
 * @p *seq before node_known_drop() cannot lose a drop to this).
 * @return 0, -EAGAIN (@p *seq moved), -ESTALE (no such node, or not a
 *         directory), -ENOSPC (at NODE_KNOWN_MAX names).
 */
int node_known_begin(struct node_table *t, uint64_t dir, const atomic_uint_fast64_t *seq,
		     uint64_t seq0);

/** Add @p name to @p dir's set, if it has one (ENOMEM or NODE_KNOWN_MAX drop the set). */
void node_known_add(struct node_table *t, uint64_t dir, const char *name, size_t len);

/** Remove @p name from @p dir's set, if it has one. */
void node_known_del(struct node_table *t, uint64_t dir, const char *name, size_t len);

/** Forget @p dir's set: its names are no longer known in full. */
void node_known_drop(struct node_table *t, uint64_t dir);

/** Forget every set. */
void node_known_drop_all(struct node_table *t);

/**
 * @p max_age_ns: a set begun longer ago than this (CLOCK_MONOTONIC) is
 * dropped first, so that a change nobody reported is seen in bounded time
 * (0: no limit).
 * @return 1 when @p name is in @p dir's set, 0 when @p dir has a set without
 *         it (the name does not exist, as far as this mount knows), -1 when
 *         @p dir has no set.
 */
int node_known_has(struct node_table *t, uint64_t dir, const char *name, size_t len,
		   int64_t max_age_ns);

/** Replace what this mount last saw of @p id's contents (@p s may be NULL: forget). */
void node_seen_set(struct node_table *t, uint64_t id, const struct node_seen *s);

/**
 * node_seen_set(@p t, @p id, @p s) when what @p id has is valid, of the
 * same inode and not later than @p s (mtime_ns first, then size): for the
 * replies to writes in flight together, which may come in any order. A
 * record that was forgotten (a failed write, the pod's change) stays so.
 * Any thread; takes the table's lock.
 */
void node_seen_advance(struct node_table *t, uint64_t id, const struct node_seen *s);

/**
 * Keep @p st, the attributes agentd replied to this mount's own write to
 * @p id, tagged with the caller's generations (@p gen: fs.h mgen just after
 * that write; @p seq: inval_seq before it was sent) and @p now_ns
 * (CLOCK_MONOTONIC). @p st NULL forgets them. The table copies @p st. Any
 * thread. Out of memory just keeps nothing (the kernel then asks agentd).
 */
void node_own_set(struct node_table *t, uint64_t id, const struct stat *st, uint64_t gen,
		  uint64_t seq, int64_t now_ns);

/**
 * The attributes node_own_set() kept for @p id into *@p ret, if they were
 * kept with exactly @p gen and @p seq and at or after @p min_ns. Returns
 * true then, else false. Any thread.
 */
bool node_own_get(struct node_table *t, uint64_t id, uint64_t gen, uint64_t seq, int64_t min_ns,
		  struct stat *ret);

/**
 * Attributes agentd reported for a file or directory (node_attr_*): what
 * answers the kernel's GETATTR after a read or a listing, which drops the
 * atime it had cached (fs/fuse/file.c, fs/fuse/readdir.c
 * fuse_invalidate_atime) and so asks after every file it read and every
 * directory it listed. A caller takes node_attr_ver() before the call that reports them
 * and node_attr_put()s what it reported; the put keeps nothing when
 * anything dropped the node's attributes meanwhile. They are dropped by
 * node_seen_set(NULL) (the watch's invalidations), node_attr_drop() and
 * _drop_path() (an own change), the loss or move of any of the node's
 * names (node_unlink(), node_rename()) and node_attr_drop_all(). Any
 * thread; each call takes the table's lock.
 */

/**
 * Note about node @p id's file, for fs.c getattr_reply(): that the watch had
 * the kernel drop its attributes at @p inval_ns (CLOCK_MONOTONIC ns; 0:
 * not now), and with @p wrote that the mount wrote, truncated or allocated
 * it (the kernel then sets its i_size itself). node_noted() gives back the
 * last invalidation (0: none, or an unknown id) and in *@p ret_wrote (may
 * be NULL) whether the mount ever wrote it. Any thread.
 */
void node_note(struct node_table *t, uint64_t id, int64_t inval_ns, bool wrote);
int64_t node_noted(struct node_table *t, uint64_t id, bool *ret_wrote);

/*
 * The kernel's i_size of a node's file, bounded from below (bytes), for
 * fs.c getattr_reply() and read_from_open(): the kernel takes the
 * attributes of a reply only when nothing changed the inode's attributes
 * while it was on its way (fs/fuse/inode.c fuse_change_attributes(),
 * attr_version), so the size of any reply may be dropped, while a reply
 * that creates the kernel's inode is always taken, a store extends i_size
 * (fuse_notify_store()) and a short READ cuts it (fuse_short_read()).
 * Each call takes the table's lock; any thread.
 */

/**
 * Note that an entry or attribute reply gives node @p id's file @p size
 * bytes: the bound becomes @p size when there was none (the reply makes
 * the kernel's inode) or when @p size is smaller (the kernel may take it).
 * Returns the bound now; -1 for an unknown @p id.
 */
int64_t node_ksize_told(struct node_table *t, uint64_t id, int64_t size);

/** Note a short READ that ended at @p size bytes: the bound is at most that. */
void node_ksize_lower(struct node_table *t, uint64_t id, int64_t size);

/** Note a store that extended i_size to @p size bytes: the bound is at least that. */
void node_ksize_covered(struct node_table *t, uint64_t id, int64_t size);

/** The bound for node @p id; -1 if none. */
int64_t node_ksize(struct node_table *t, uint64_t id);

/** The version a put for @p id must match; UINT64_MAX for an unknown id. */
uint64_t node_attr_ver(struct node_table *t, uint64_t id);

/** The clock node_attr_ver() reads: a node's version above the clock
 * taken at some moment means its attributes were dropped since (a change
 * reported or made, node_attr_drop_all()). Any thread. */
uint64_t node_attr_clock(struct node_table *t);

/**
 * Keep @p st (copied) for @p id, asked for at @p at_ns (CLOCK_MONOTONIC ns)
 * under version @p ver, if that is still the node's version, the node is
 * named (or the root) and has server inode st->st_ino and identity
 * st->st_dev (node_ident(), as fs.c's attr_to_stat() leaves it there; 0
 * unknown: node_same_ident()), and @p st is a
 * regular file with one link (inotify(7) reports a change under one name
 * only) or, with @p gen, a directory. With @p gen other than
 * NODE_ATTR_ANY_GEN they hold only while the caller's generation (fs.c:
 * mgen, the count of the mount's own changes, which send no event that
 * would drop a directory's) is @p gen. Out of memory keeps nothing.
 */
void node_attr_put_gen(struct node_table *t, uint64_t id, uint64_t ver, const struct stat *st,
		       int64_t at_ns, uint64_t gen);

/** node_attr_put_gen()'s @p gen for attributes that hold whatever the
 * caller's generation. */
#define NODE_ATTR_ANY_GEN UINT64_MAX

/**
 * What node_attr_put_gen() kept for @p id into *@p ret, if asked for at or
 * after @p min_ns, not dropped since, and kept for generation @p gen or
 * NODE_ATTR_ANY_GEN. Returns true then, else false.
 */
bool node_attr_get_gen(struct node_table *t, uint64_t id, int64_t min_ns, uint64_t gen,
		       struct stat *ret);

/** node_attr_put_gen() for any generation. */
static inline void node_attr_put(struct node_table *t, uint64_t id, uint64_t ver,
				 const struct stat *st, int64_t at_ns)
{
	node_attr_put_gen(t, id, ver, st, at_ns, NODE_ATTR_ANY_GEN);
}

/** node_attr_get_gen() of what was kept for any generation. */
static inline bool node_attr_get(struct node_table *t, uint64_t id, int64_t min_ns,
				 struct stat *ret)
{
	return node_attr_get_gen(t, id, min_ns, NODE_ATTR_ANY_GEN, ret);
}

/**
 * Keep @p st (copied): the attributes of directory @p id as its removal left
 * them (nlink 0; agentd's Rmdir reply), for as long as the node lives: a
 * process whose cwd it is still stats it (getcwd(3) and ls(1) do), as on a
 * local file system, and nothing can name it again. Only for a detached
 * directory node of that server inode; out of memory keeps nothing. Any
 * thread.
 */
void node_gone_set(struct node_table *t, uint64_t id, const struct stat *st);

/** What node_gone_set() kept for @p id into *@p ret. Returns true then,
 * false when nothing was kept (or the node is named again). Any thread. */
bool node_gone_get(struct node_table *t, uint64_t id, struct stat *ret);

/**
 * Note that the kernel was told @p st (copied) as node @p id's attributes
 * (an entry or attribute reply), for node_told_get(): kept for a directory,
 * and for a regular file from the first note made while a file is
 * registered on it. Out of memory keeps nothing. Any thread.
 */
void node_told_set(struct node_table *t, uint64_t id, const struct stat *st);

/** A write through the mount, or a store of pages, ended at byte @p end
 * of node @p id's file: the kernel's i_size is at least that (fs/fuse/
 * file.c fuse_write_update_attr(), fuse_notify_store()), and so is what
 * node_told_get() gives. */
void node_told_grow(struct node_table *t, uint64_t id, int64_t end);

/** Forget what node_told_set() kept for @p id: the kernel set the size
 * itself in a way node_told_grow() does not follow (a fallocate(2), a
 * copy_file_range(2) into it), or it will ask again. */
void node_told_drop(struct node_table *t, uint64_t id);

/**
 * What node_told_set() kept for @p id into *@p ret: a directory's, or a
 * regular file's while a file is open on the node. Returns true then, else
 * false. Any thread.
 */
bool node_told_get(struct node_table *t, uint64_t id, struct stat *ret);

/**
 * node_told_get(), but false also when the watch had the kernel drop the
 * attributes (node_note() with an invalidation time) since node_told_set()
 * kept them: then they may be older than the pod's change. Any thread.
 */
bool node_told_fresh(struct node_table *t, uint64_t id, struct stat *ret);

/** Drop what is kept for @p id (a no-op for an unknown id). */
void node_attr_drop(struct node_table *t, uint64_t id);

/** Drop what is kept for the node wire path @p path (@p len bytes) names, as
 * node_resolve() finds it, and for every other node of its server inode.
 * Returns true when the path named a node, false (nothing done) when not. */
bool node_attr_drop_path(struct node_table *t, const char *path, size_t len);

/** Drop what is kept for every node of server inode @p ino: the watch names
 * a file by the path the pod gave it, which the table may not follow (a
 * rename of the file or of a directory above it, in the pod). */
void node_attr_drop_ino(struct node_table *t, uint64_t ino);

/** Drop what is kept for every node. */
void node_attr_drop_all(struct node_table *t);

/**
 * Register the open file @p f on node @p id with one reference (the open);
 * the node is held until the last node_fh_put(). Returns 0 or -ESTALE.
 */
int node_fh_add(struct node_table *t, uint64_t id, struct node_fh *f);

/**
 * One open file of @p id, with a reference taken (node_fh_put() it), or NULL
 * when the node has none. The most recently opened one is returned.
 */
struct node_fh *node_fh_get(struct node_table *t, uint64_t id);

/**
 * The most recently opened file of node @p id for which @p match(f, @p arg)
 * is true, with a reference taken (node_fh_put() it), or NULL. @p match runs
 * with the table's lock held (it must not lock or block).
 */
struct node_fh *node_fh_find(struct node_table *t, uint64_t id,
			     bool (*match)(const struct node_fh *f, void *arg), void *arg);

/**
 * Call @p fn(f, @p arg) for each open file f of node @p id, with the
 * table's lock held (so @p fn must not lock or block). Returns how many.
 */
size_t node_fh_each(struct node_table *t, uint64_t id, void (*fn)(struct node_fh *f, void *arg),
		    void *arg);

/** Take one more reference on @p f (which must hold one). */
void node_fh_ref(struct node_table *t, struct node_fh *f);

/**
 * Drop a reference to @p f. When it was the last, @p f leaves its node's list
 * (the node may be freed) and true is returned: the caller then owns @p f
 * alone and releases it.
 */
bool node_fh_put(struct node_table *t, struct node_fh *f);

/**
 * Resolve wire path @p path (@p len bytes; empty, "." and extra '/'
 * components are skipped) through the bindings this table knows, for the
 * watch stream. *ret_id is the node bound to the whole path (0 if none);
 * *ret_parent the node of its parent directory (0 if that is not known
 * either); *ret_name and *ret_name_len: the last component, inside @p path.
 * Returns 0; -EINVAL when the path names the root or holds a bad component.
 */
int node_resolve(struct node_table *t, const char *path, size_t len, uint64_t *ret_parent,
		 uint64_t *ret_id, const char **ret_name, size_t *ret_name_len);

/**
 * Every name of every node, and every node without a name (detached, and
 * the root) with parent 0 and no name: a malloc'd array *ret of *ret_n
 * entries (caller frees with node_snapshot_free()).
 * Returns 0 or -ENOMEM.
 */
int node_snapshot(struct node_table *t, struct node_ref **ret, size_t *ret_n);

/** Free what node_snapshot() returned. */
void node_snapshot_free(struct node_ref *refs, size_t n);

#endif /* WSFS_NODE_H */
