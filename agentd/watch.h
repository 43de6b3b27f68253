/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Change watcher of the workspace tree, for wsbridge.v1.Workspace/Watch
 * (proto/wsbridge.proto): tells subscribers which paths under the root
 * changed, so that a client (wsfs) can drop what it cached. Knows nothing of
 * gRPC: a subscriber is a pair of callbacks (svc_workspace.c adapts them to
 * rpc_send/rpc_finish).
 *
 * Mechanism: one inotify(7) instance watching every directory under the root,
 * read on the libuv loop (uv_poll on the inotify fd; read_delay_ms after it
 * becomes readable, so that a burst is read at once). Started at the first
 * subscriber, stopped (fd closed, every watch dropped) when the last one
 * leaves: no kernel watches and no CPU while nobody listens.
 *  - The tree is walked at start, a bounded number of directories per loop
 *    iteration (uv_idle), so a large tree never stalls the loop; READY is
 *    sent once the walk is done. Directories are opened component by
 *    component from the root fd with O_NOFOLLOW, so a symlink is never
 *    followed, and watched through /proc/self/fd/N of that fd (or, where
 *    /proc is missing, through the absolute path root_path/REL with
 *    IN_DONT_FOLLOW).
 *  - A directory that appears (IN_CREATE or IN_MOVED_TO of a directory) is
 *    watched and walked; what the walk finds is reported as CREATED, since
 *    entries made before its watch existed produce no inotify event. An
 *    entry made just after the watch may so be reported CREATED twice.
 *  - Directories are kept as a tree of (parent, name) links: a directory
 *    rename relinks one node, and paths are built when an event is reported.
 *  - IN_MOVED_FROM/IN_MOVED_TO are paired by cookie into one MOVED; the
 *    pairing waits at most watch_config.pair_ms for the second half, after
 *    which an unpaired FROM is DELETED (moved out of the root) and an
 *    unpaired TO is CREATED (moved in).
 *  - IN_MODIFY, IN_ATTRIB and IN_CLOSE_WRITE are CHANGED; a CHANGED is
 *    dropped when the same batch of events read from the kernel already
 *    names that path as CHANGED, CREATED or the target of a MOVED (the
 *    client re-reads after the whole batch has happened anyway).
 *  - IN_Q_OVERFLOW (fs.inotify.max_queued_events): every subscriber gets
 *    OVERFLOW, the inotify instance is rebuilt and the tree walked again, and
 *    every subscriber gets OVERFLOW once more when that walk is done (changes
 *    made during the walk may have been missed).
 *  - ENOSPC from inotify_add_watch (fs.inotify.max_user_watches, or
 *    watch_config.max_watches): OVERFLOW, and a warning logged once; the
 *    directories that could not be watched stay unwatched, their changes are
 *    not reported (the client must rely on its attribute timeouts there),
 *    and the stream stays partial until a rebuild.
 *  - Any other failure to watch or list a directory that exists and that
 *    agentd can search (EMFILE, ENOMEM, EACCES on a 0711 one, EIO):
 *    OVERFLOW and partial as for the limit, and the directory is tried
 *    again 1 s later, then at doubling periods up to 60 s, and at once when
 *    its attributes change (a chmod). Once every such directory is watched
 *    (or gone), no failure came for a whole period, and no limit was hit,
 *    one more OVERFLOW, without partial, says so.
 *  - A directory renamed (or whose parent was renamed) after its creation
 *    was read but before its walk opened it is walked under the new name
 *    when the rename's events arrive. One whose walk opened a directory
 *    that had replaced it at its name (renamed away, another made there)
 *    ends up with that one's watch and name; the renamed one is walked
 *    anew. If that renamed one is then moved into the new one before the
 *    events are read, the tree as agentd saw it would loop: the instance
 *    is rebuilt instead, as after IN_Q_OVERFLOW.
 *
 * Delivery: events go to one shared queue; each subscriber reads it at its
 * own pace, at most one batch (watch_config.batch_bytes) in flight; it asks
 * for the next with watch_sub_done(). A subscriber that falls more than
 * watch_config.max_queue events behind gets OVERFLOW and skips to the
 * present instead of holding memory without bound.
 *
 * Limits (inotify(7)): only changes made through this kernel's (or gVisor's
 * sentry's) VFS are seen: under gVisor, changes made inside the sandbox are
 * reported, changes made by the host to a shared directory are not (both
 * checked with runsc 20221219, ptrace platform); the same
 * holds for network file systems (NFS, 9p) changed by another machine.
 * Mount points inside the root are watched like directories, but changes
 * made under another mount of the same file system are reported only for
 * the directories watched here. Hard links: a change through one name is
 * reported for that name only.
 *
 * Thread safety: everything here runs on the loop thread of the watcher's
 * loop; no locks.
 */
#ifndef AGENTD_WATCH_H
#define AGENTD_WATCH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "resolve.h"

/** Kinds of event; the values are those of proto WatchEvent.Kind. */
enum watch_kind {
	WATCH_CHANGED = 0,  /**< path's contents or attributes changed */
	WATCH_CREATED = 1,  /**< path appeared */
	WATCH_DELETED = 2,  /**< path went away */
	WATCH_MOVED = 3,    /**< from was renamed to path */
	WATCH_OVERFLOW = 4, /**< events were lost: drop every cached entry */
	WATCH_READY = 5,    /**< the first event: watching has started */
};

/** One event. Strings are NUL-terminated; lengths are bytes without it. */
struct watch_event {
	enum watch_kind kind;
	bool is_dir;
	const char *path; /**< wire path relative to the root, no leading '/'; "" = root */
	size_t path_len;
	const char *from; /**< MOVED only (else NULL): the old path */
	size_t from_len;
	/** CREATED, MOVED: a CHANGED of path came after it in the same batch
	 * and was folded into it, or (CREATED) a walk of a new directory found
	 * path, which may have changed before the walk (proto
	 * WatchEvent.changed). */
	bool changed;
};

/** Tunables; 0 in any field means its default. */
struct watch_config {
	size_t max_queue;     /**< events one subscriber may lag (default 10000) */
	size_t batch_bytes;   /**< one batch's path bytes + 16 per event (default 64 KiB) */
	unsigned max_watches; /**< directories watched at most (default: the kernel's limit) */
	unsigned pair_ms;     /**< wait for IN_MOVED_TO, milliseconds (default 10) */
	unsigned walk_dirs;   /**< directories walked per loop iteration (default 64) */
	/** Wait this long after the inotify fd becomes readable before reading
	 * it, milliseconds (default 2): the events of one file's create, write
	 * and close then come in one read and one batch. WATCH_READ_AT_ONCE:
	 * no wait (tests that step the loop one turn at a time). */
	unsigned read_delay_ms;
};

#define WATCH_MAX_QUEUE_DEFAULT 10000u
#define WATCH_BATCH_BYTES_DEFAULT ((size_t)64 * 1024)
#define WATCH_PAIR_MS_DEFAULT 10u
#define WATCH_WALK_DIRS_DEFAULT 64u
#define WATCH_READ_DELAY_MS_DEFAULT 2u
#define WATCH_READ_AT_ONCE UINT_MAX

struct watcher;
struct watch_sub;

/** A subscriber's callbacks; both run on the loop thread. */
struct watch_sub_ops {
	/**
	 * Take @p n events @p ev (borrowed: valid only during the call); @p n
	 * is 0 only with @p sync. @p sync: 0, or (a subscriber that
	 * acknowledges: watch_sub_acks()) the value to give watch_sub_ack()
	 * once this batch and every one before it are applied.
	 * Return 0 when accepted; then no further batch comes until
	 * watch_sub_done(@p sub). Return -errno when the subscriber is dead (for
	 * example its call is gone): the watcher then frees @p sub without
	 * calling end; the subscriber must not use @p sub afterwards. Must not
	 * call watch_unsubscribe() or watch_subscribe().
	 */
	int (*deliver)(struct watch_sub *sub, const struct watch_event *ev, size_t n, uint64_t sync,
		       void *arg);
	/**
	 * The subscription ended on the watcher's side: @p err is 0 for
	 * watch_shutdown(), or -errno when watching failed for good (-EMFILE:
	 * out of inotify instances when rebuilding after an overflow). @p sub
	 * is freed right after; must not call back into the watcher.
	 */
	void (*end)(struct watch_sub *sub, int err, void *arg);
};

/**
 * Create a watcher of the tree under @p root (borrowed: root->fd must stay
 * open until watch_free). @p root_path is the root's absolute path, used
 * only where /proc/self/fd is missing (copied; may be NULL: then such a
 * system gets no watches, only READY). @p cfg may be NULL (defaults); it is
 * copied. Nothing is watched until the first watch_subscribe(). Returns 0
 * and *ret_w (free with watch_free), or -ENOMEM, -EINVAL (@p loop NULL).
 * Loop thread.
 */
int watch_new(uv_loop_t *loop, const struct resolve_root *root, const char *root_path,
	      const struct watch_config *cfg, struct watcher **ret_w);

/**
 * Add a subscriber with callbacks @p ops (borrowed, must outlive the
 * subscription) and @p arg. Its first event is READY, delivered on a later
 * loop iteration, once the tree walk is done. Starts watching if this is the
 * first subscriber. Returns 0 and *ret_sub, or -ESHUTDOWN after
 * watch_shutdown(), -EMFILE (fs.inotify.max_user_instances reached, or out
 * of fds), -ENOMEM. Loop thread.
 */
int watch_subscribe(struct watcher *w, const struct watch_sub_ops *ops, void *arg,
		    struct watch_sub **ret_sub);

/**
 * The batch last delivered to @p sub is done with (sent): deliver the next
 * one, if any, now. May call @p sub's deliver, which may end the
 * subscription (deliver returning < 0): do not use @p sub after this call
 * unless you know deliver succeeded. Loop thread.
 */
void watch_sub_done(struct watch_sub *sub);

/**
 * Make @p sub one that acknowledges the batches it applied (a client that
 * caches: wsfs, WatchRequest.acks): watch_barrier() then waits for its
 * watch_sub_ack() instead of the batch's send, and batches delivered while
 * a barrier waits carry a sync value (a batch of no events if none is
 * due). Loop thread.
 */
void watch_sub_acks(struct watch_sub *sub);

/**
 * @p sub applied the batches up to the one delivered with @p sync (the
 * client's WatchSync). Returns 0 (also for a value older than one acked
 * before, or than the last OVERFLOW's, which is then still due: nothing
 * changes), or -EINVAL for a value past any delivered.
 * Loop thread.
 */
int watch_sub_ack(struct watch_sub *sub, uint64_t sync);

/**
 * Remove subscriber @p sub and free it (its callbacks are not called). When
 * it was the last one, watching stops on a later loop iteration. NULL is a
 * no-op. Loop thread.
 */
void watch_unsubscribe(struct watch_sub *sub);

/**
 * End every subscription (end callback with err 0: svc_workspace.c ends
 * each Watch call with status OK), close the inotify fd and every libuv
 * handle of the watcher. Later subscribes fail with -ESHUTDOWN. Call when
 * agentd begins to stop, so that Watch streams do not hold up the drain.
 * Idempotent; NULL is a no-op. Loop thread.
 */
void watch_shutdown(struct watcher *w);

/**
 * Shut down (if not yet done) and free @p w. The memory goes once the loop
 * has run the close callbacks of the handles (at once if it already has).
 * NULL is a no-op. Loop thread.
 */
void watch_free(struct watcher *w);

/** Counters, for tests and debugging. */
struct watch_stats {
	bool running;         /**< an inotify instance exists */
	bool ready;           /**< its tree walk is done */
	unsigned watches;     /**< directories with an inotify watch */
	unsigned subscribers;
	size_t queued;        /**< events held in the shared queue */
	uint64_t resyncs;     /**< rebuilds after IN_Q_OVERFLOW */
	uint64_t sub_overflows; /**< subscribers skipped ahead with OVERFLOW */
	uint64_t limit_hits;  /**< watches not added: ENOSPC or max_watches */
	bool partial;         /**< the running instance left a directory that
			       *   exists unwatched (the limit, EMFILE, EACCES...
			       *   since it started, and not watched on a retry
			       *   since), or is still walking the tree: some
			       *   changes go unreported */
};

/** watch_barrier()'s callback. */
typedef void (*watch_barrier_fn)(void *arg);

struct watch_barrier;

/**
 * Have the changes made in the tree so far reach the subscribers before
 * the caller goes on: for a command's exit status, which must not overtake
 * the command's changes to a client that caches what the stream does not
 * yet report (wsfs answers a lookup of a name it knows to be missing
 * without asking). Reads what the kernel has queued at once (no
 * read_delay_ms), then calls @p done(@p arg) once, on a later callback of
 * the loop, when every subscriber that has had READY has been handed, and
 * has finished (watch_sub_done(); one that acknowledges: acknowledged,
 * watch_sub_ack()), every event read so far and any OVERFLOW due (during
 * a rebuild's walk, the OVERFLOW that ends it); or when @p timeout_ms
 * (milliseconds) passed first (a slow or stalled subscriber delays nobody
 * longer), or the watcher shuts down. A subscriber that leaves is waited
 * for no longer (checked on the next turn of the loop). Returns 0 when
 * there is nothing to wait for (@p w NULL or not watching, no subscriber
 * with READY yet, or all of them have it already: @p done is not
 * called), 1 with *@p ret (for watch_barrier_cancel()) when @p done will
 * be called, -ENOMEM (wait for nothing). Loop thread.
 */
int watch_barrier(struct watcher *w, unsigned timeout_ms, watch_barrier_fn done, void *arg,
		  struct watch_barrier **ret);

/** Forget barrier @p b before its callback ran (its caller is gone); the
 * callback is not called. NULL is a no-op. Loop thread. */
void watch_barrier_cancel(struct watch_barrier *b);

/** Fill *ret with @p w's counters. Loop thread. */
void watch_get_stats(const struct watcher *w, struct watch_stats *ret);

/**
 * The watcher that svc_workspace_register() created for the Watch method
 * (it lives in svc_workspace.c), or NULL before registration. For main.c:
 * watch_shutdown() it when agentd starts to stop, watch_free() it after the
 * loop has ended.
 */
struct watcher *svc_workspace_watcher(void);

#endif /* AGENTD_WATCH_H */
