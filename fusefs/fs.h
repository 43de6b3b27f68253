/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs, the FUSE client of agentd's wsbridge.v1.Workspace service: the
 * filesystem state shared by the FUSE request handlers (fs.c) and the
 * connection monitor / watch-stream thread (watch.c), and their entry points.
 * wsfs.c (main) parses options, connects, mounts and runs the session.
 *
 * Threads: libfuse's worker threads run the fuse_lowlevel_ops (fs.c); one
 * monitor thread (watch.c) reads the Watch stream, sends the kernel cache
 * invalidations (never from a request thread: libfuse
 * doc/README.notifications, "deadlock") and re-runs an --exec transport.
 */
#ifndef WSFS_FS_H
#define WSFS_FS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#include "client.h"
#include "node.h"
#include "wsbridge.pb-c.h"

/** The identity (node_ident()) that agentd's attributes @p a give their
 * file, beyond its inode number. Pure. */
static inline uint64_t wsfs_attr_ident(const Wsbridge__V1__Attr *a)
{
	return node_ident(a->btime_ns, a->generation);
}

/** While agentd is unreachable, how often the monitor asks again, ms. */
#define WSFS_PROBE_MS 250

/** Deadline of a call that may run long in the pod alone (fs.c "Long
 * calls"), ms; it ends sooner when agentd stops answering. */
#define WSFS_LONG_CALL_MS (3600u * 1000u)

/** Default of wsfs_config.max_dir_entries (-o max_dir_entries): a larger
 * listing fails with EFBIG rather than let agentd's replies take all memory. */
#define WSFS_MAX_DIR_ENTRIES_DEFAULT 1048576u

/** Default of wsfs_config.write_behind (-o write_behind): WRITEs in flight. */
#define WSFS_WRITE_BEHIND_DEFAULT 4u
/** Largest wsfs_config.write_behind. */
#define WSFS_WRITE_BEHIND_MAX 64u
/** Directories fs.c's unlink-behind remembers as proven (struct wsfs rm_ok). */
#define WSFS_RM_OK_MAX 16u
/** Largest run of small sequential writes gathered into one Write RPC
 * (fs.c "Write gathering"), bytes; a WRITE this size or larger is not
 * gathered. */
#define WSFS_GATHER_MAX ((size_t)256 * 1024)
/** Bytes allocated for gathered writes across the mount at most; near it
 * writes go as they come. */
#define WSFS_GATHER_TOTAL_MAX ((size_t)64 * 1024 * 1024)
/** Default of wsfs_config.gather_ns (-o gather_ms), milliseconds. */
#define WSFS_GATHER_MS_DEFAULT 5u
/** Largest -o gather_ms, milliseconds (10 minutes). */
#define WSFS_GATHER_MS_MAX 600000u
/** Most handles one Release carries (fs.c "Releases"). */
#define WSFS_RELEASE_BATCH 64
/** How long a handle whose file was closed waits to be released with
 * others at most, nanoseconds (less with a shorter -o gather_ms). */
#define WSFS_RELEASE_NS (5 * 1000 * 1000LL)
/** Most nodes waiting for wsfs_inval_pages_later()'s thread. */
#define WSFS_NQ_MAX 64
/** Default of wsfs_config.read_chunk_kb (-o read_chunk_kb), KiB: the
 * kernel's own readahead window (VM_READAHEAD_PAGES, 128 KiB). */
#define WSFS_READ_CHUNK_KB_DEFAULT 128u
/** Bytes of chunks waiting for wsfs_store_later()'s thread at most; past
 * it a chunk's other bytes are dropped. */
#define WSFS_STORE_MAX ((size_t)16 * 1024 * 1024)
/** How much longer than rpc_timeout an open for writing waits for a chunk
 * being stored at most, ms (fs.c "Chunk reads"): the store may wait for a
 * READ that needs a free worker. */
#define WSFS_STORE_GRACE_MS 2000u
/** Threads remembered as told ESTALE by an OPEN (fs.c stale_*): past
 * that many at once, the oldest one's retry is told ESTALE again. */
#define WSFS_STALE_MAX 64
/** How long such a thread's retry is looked for, nanoseconds. */
#define WSFS_STALE_NS 1000000000LL

/** Locks that serialise OPENs of one nodeid (struct wsfs open_locks); two
 * nodeids share one in 256. */
#define WSFS_OPEN_LOCKS 256

/** How long before a GETATTR came a watch invalidation of its inode may
 * still cross the reply (fs.c getattr_reply()), nanoseconds. */
#define WSFS_CROSS_NS 200000000LL

/** wsfs settings (wsfs.c fills them from -o options). */
struct wsfs_config {
	/** Kernel dentry cache timeout without a live watch stream, seconds. */
	double entry_timeout;
	/** Kernel attribute cache timeout without a live watch stream, seconds. */
	double attr_timeout;
	/** Negative dentry timeout, seconds; < 0 = automatic (0 without a live
	 * watch stream, watch_timeout with one). */
	double negative_timeout;
	/** Entry and attribute timeout while the watch stream is live, seconds;
	 * 0 = never longer than entry_timeout/attr_timeout. */
	double watch_timeout;
	/** Deadline of every RPC, milliseconds (> 0). */
	uint32_t rpc_timeout_ms;
	/** The transport is a command (wsc_options.exec_cmd): on UNAVAILABLE,
	 * run it again with wsc_reconnect(). */
	bool exec_transport;
	/** Do not subscribe to the Watch stream. */
	bool no_watch;
	/** Readlink gives targets that stay inside the mount
	 * (node_link_inside(); -o transform_symlinks). */
	bool transform_symlinks;
	/** Kernel readahead for the mount, KiB; 0 = the kernel's default. */
	unsigned read_ahead_kb;
	/** A small READ that does not go on where the handle's last one
	 * ended asks agentd for the aligned chunk of this many KiB around it
	 * (fs.c "Chunk reads"), 4..1024, a multiple of 4; 0 = only what the
	 * kernel asked. */
	unsigned read_chunk_kb;
	/** Most entries of one directory a listing holds (about 200 bytes
	 * each, names aside); past it READDIR fails with EFBIG. 0 = the default. */
	unsigned max_dir_entries;
	/** Most WRITEs (of at most 1 MiB each) replied to the kernel before
	 * agentd answered them (fs.c "Write-behind"), 0..WSFS_WRITE_BEHIND_MAX;
	 * 0 = every write(2) waits for agentd. Each holds one FUSE worker
	 * thread while it runs. */
	unsigned write_behind;
	/** Reply at once to a SETATTR of a file this mount created and holds
	 * open for writing, and send it merged with the next ones before any
	 * other request and within 10 * gather_ns (fs.c "Setattr-behind"; -o
	 * setattr_behind=0 turns it off; so does gather_ns 0 or write_behind
	 * 0, which leave the gathering thread unstarted). */
	bool setattr_behind;
	/** Reply at once to an UNLINK that cannot fail and send it behind,
	 * in a write-behind slot (fs.c "Unlink-behind"; -o unlink_behind=0
	 * turns it off; so does write_behind 0). */
	bool unlink_behind;
	/** How long gathered writes wait for more before they are sent anyway
	 * (fs.c "Write gathering"; -o gather_ms), nanoseconds; 0 = writes are
	 * not gathered. */
	int64_t gather_ns;
	/** The mount point, absolute and canonical (for /proc/self/mountinfo);
	 * borrowed, outlives the wsfs; NULL = unknown. */
	const char *mountpoint;
};

/*
 * Own changes (watch.c): the kinds of Watch event one of this mount's own
 * operations causes on a path. An event of a kind recorded for its path
 * while the operation runs or within WSFS_SELF_WINDOW_NS after it ended is
 * taken for that operation's own echo and does not invalidate what the
 * kernel got in the operation's reply; a CHANGED event is skipped only when
 * a Stat of the path still gives the attributes the last own reply gave
 * (else it may be the pod's change). A pod-side change of the same kind
 * racing an own one within the window is thus noticed by attributes
 * (CHANGED) or bounded by the kernel's attribute/entry timeouts.
 */
enum wsfs_self_kind {
	WSFS_SELF_CHANGED = 1u << 0,    /**< contents or attributes */
	WSFS_SELF_CREATED = 1u << 1,    /**< the name appeared */
	WSFS_SELF_DELETED = 1u << 2,    /**< the name went away */
	WSFS_SELF_MOVED_FROM = 1u << 3, /**< renamed away from this name */
	WSFS_SELF_MOVED_TO = 1u << 4,   /**< renamed to this name */
};

/** Own replies remembered per path before the last one (an event may show
 * the file between two own operations). */
#define WSFS_SELF_PREV 3
/** How long after an own operation its echo is expected, nanoseconds. */
#define WSFS_SELF_WINDOW_NS 1000000000LL
/** Hash buckets of the own-change table. */
#define WSFS_SELF_BUCKETS 1024
/** Most own-change records kept; beyond it changes are not recorded
 * (their echoes then invalidate, as without the table). */
#define WSFS_SELF_MAX 8192
/** Most names given a negative dentry longer than entry_timeout kept for
 * wsfs_invalidate_all() (wsfs_neg_add()); past it, a missing name is
 * cached for entry_timeout only. */
#define WSFS_NEG_MAX 4096
/** Longest the monitor waits for an own change in flight to end before it
 * compares attributes for a CHANGED event, milliseconds. */
#define WSFS_SELF_WAIT_MS 500

struct wsfs_self;
struct wsfs_pf;

/** Most directory listings ReadDir prefetched and kept for a later opendir. */
#define WSFS_PF_DIRS 1024
/** Most entries those listings hold in all (the oldest go first): 16 whole
 * ReadDir pages at least, some 13 MB at 200 bytes an entry. */
#define WSFS_PF_ENTS ((size_t)64 * 1024)

/** The mounted filesystem. Fields are shared by fs.c and watch.c. */
struct wsfs {
	struct wsfs_config cfg;
	struct wsc *client;        /**< borrowed; outlives the wsfs */
	struct node_table *nodes;
	struct fuse_session *se;   /**< set before the session loop starts */

	/** Connection generation: bumped when a transport failure ends
	 * (agentd may have restarted: handles must be checked) or when
	 * agentd forgot a handle. */
	atomic_uint_fast64_t conn_gen;
	/** A transport failure was seen and no call has succeeded since. */
	atomic_bool conn_down;
	/** The monitor's probe found agentd refusing the mount's token
	 * (logged once until a probe passes again). */
	atomic_bool auth_refused;
	/** wsfs_now_ns() of the first transport failure of this down
	 * period, 0 while agentd answers (wsfs_conn_failed()). */
	atomic_int_fast64_t down_ns;
	/** Bumped by the monitor thread before it sends invalidations; a reply
	 * computed across a bump gets the short (no-watch) timeouts. */
	atomic_uint_fast64_t inval_seq;
	/** Bumped by the watch thread for a change the pod made to a
	 * directory's attributes (or to attributes it did not send) and for a
	 * rename in the pod: a permission agentd had on a directory or
	 * anywhere above it may be gone, so unlink-behind's proofs made
	 * before it no longer hold (fs.c rm_ok). */
	atomic_uint_fast64_t rm_gen;
	/** Bumped after every change this mount makes (fs.c mutated()): names,
	 * attributes, contents. A listing (prefetched) or bytes (Open's
	 * read_ahead) fetched across a bump may be stale: the watch does not
	 * report the mount's own changes (echoes are suppressed). */
	atomic_uint_fast64_t mgen;
	/** Held (read) by fs.c file_put() from before a writable file leaves
	 * its node until its handles are released or queued; (write) for a
	 * moment by each chmod that gives a file an execute bit
	 * (exec_changed()), after it marked the node's files and before it
	 * sends the release queue: a file that left the node before the marks
	 * is in the queue by then (waiting rpc_timeout + WSFS_STORE_GRACE_MS
	 * at most). Prefers writers (a stream of closes cannot hold a chmod
	 * back). */
	pthread_rwlock_t put_lock;
	/** Bumped before and after every call that may read a file's data in
	 * agentd (Read, Open), which may set its atime: attributes an own
	 * write or setattr replied (fs.c own_attr) are used only while it
	 * stays. */
	atomic_uint_fast64_t agen;
	/** The watch stream is subscribed (READY seen) and running, and agentd
	 * watches every directory (no partial READY or OVERFLOW): what the
	 * mount keeps may be trusted for watch_timeout. */
	atomic_bool watch_live;
	/** wsfs_now_ns() of the last name event the pod caused (created,
	 * deleted, moved: not an echo); the node table's names may be wrong
	 * since (watch.c ev_changed). */
	atomic_int_fast64_t pod_names_ns;
	/** The kernel can expire a dentry without unhashing it (FUSE 7.38). */
	atomic_bool expire_only;
	/** O_WRONLY|O_APPEND opens use FOPEN_DIRECT_IO (kernel FUSE >= 7.39,
	 * file_opened()); set by init, read-only after. */
	bool direct_append;
	/** The unique of INIT when the kernel offered FUSE_HANDLE_KILLPRIV_V2,
	 * until its reply took the flag; 0 otherwise (fs.c io_read()). */
	atomic_uint_fast64_t init_unique;

	/* Long calls and their pinger thread (fs.c "Long calls"); protected
	 * by ping_lock. */
	pthread_mutex_t ping_lock;
	pthread_cond_t ping_cond;
	pthread_t ping_thread;
	unsigned long_calls; /**< running now */
	bool ping_started, ping_stop;
	bool ping_idle; /**< the pinger waits for a long call to begin */

	/* Monitor thread (watch.c); protected by mon_lock. */
	pthread_mutex_t mon_lock;
	pthread_cond_t mon_cond;
	pthread_t monitor;
	bool monitor_started;
	bool stopping;
	bool want_reconnect;
	struct wsc_stream *watch; /**< the running Watch call, for cancel */
	/** agentd handles whose Release could not reach agentd; retried by the
	 * monitor when it answers again (wsfs_release_pending). */
	uint64_t *pending;
	size_t n_pending, cap_pending;


	/* Listings that ReadDir prefetched (fs.c, pf_*): a ring, oldest
	 * replaced first; protected by pf_lock. */
	pthread_mutex_t pf_lock;
	struct wsfs_pf *pf[WSFS_PF_DIRS];
	size_t pf_next;
	size_t pf_ents; /**< entries of pf[] in all, at most WSFS_PF_ENTS */
	/** mgen at the last ReadDir that asked for a prefetch (fs.c dir_load). */
	_Atomic uint64_t pf_mgen;

	/* Writes replied to the kernel before agentd answered them (fs.c
	 * wb_*); protected by wb_lock (a leaf lock). */
	pthread_mutex_t wb_lock;
	pthread_cond_t wb_cond;
	/** How many there are; read without wb_lock as a hint. */
	atomic_uint wb_n;
	/** Sequence number of the next one (from 1). */
	uint64_t wb_seq;
	/** The writes in flight, of server inode ino, bytes [off, end),
	 * and the unlinks sent behind (unlink true; ino, off, end 0);
	 * seq 0 = a free slot. */
	struct wsfs_wb {
		uint64_t seq, ino, off, end;
		bool unlink;
	} wb[WSFS_WRITE_BEHIND_MAX];
	/** Directories in which an Unlink through the mount succeeded (fs.c
	 * "Unlink-behind"): the nodeid, conn_gen and rm_gen before the call,
	 * the watch's last invalidation of it before the call (node_noted(),
	 * ns), its mode, owner and group then; dir 0 = a free entry.
	 * Protected by wb_lock. */
	struct wsfs_rm_ok {
		uint64_t dir, conn_gen, rm_gen;
		int64_t noted;
		uint32_t mode, uid, gid;
	} rm_ok[WSFS_RM_OK_MAX];
	/** The entry of rm_ok the next directory takes (round robin). */
	unsigned rm_ok_next;
	/** Directories in which an Unlink sent behind failed: never proven
	 * again (the file that failed is still there, and a second rm of it
	 * must report the error); round robin, 0 = free. Under wb_lock. */
	uint64_t rm_bad[WSFS_RM_OK_MAX];
	unsigned rm_bad_next;

	/* Files with a SETATTR replied to before agentd had it (fs.c sab_*):
	 * a FIFO of the ones waiting, protected by sab_lock (a leaf lock). */
	pthread_mutex_t sab_lock;
	pthread_cond_t sab_cond;
	/** Files waiting or being sent; read without sab_lock as a hint. */
	atomic_uint sab_n;
	/** wsfs_now_ns() when sab_n last rose from 0: the gathering thread
	 * sends what is kept behind 10 * gather_ns after it (fs.c
	 * sab_hold_ns()). */
	atomic_int_fast64_t sab_born_ns;
	TAILQ_HEAD(wsfs_sab_list, wsfs_file) sab_list;
	/** Changes sab_drain() has taken to send, ever. */
	uint64_t sab_taken;

	/* Small sequential writes replied to and gathered, not yet sent (fs.c
	 * gb_*): a list, oldest first, protected by gb_lock (taken before
	 * wb_lock, never while a node table lock is held). */
	pthread_mutex_t gb_lock;
	/** A run took its slot or was sent, or gb_stop was set: broadcast
	 * only while gb_waiters is not 0. */
	pthread_cond_t gb_cond;
	/** A run was added while gb_main() idled, or gb_stop was set
	 * (CLOCK_MONOTONIC: gb_main() waits with deadlines). */
	pthread_cond_t gb_main_cond;
	unsigned gb_waiters; /**< threads waiting on gb_cond */
	int64_t gb_last_ns;  /**< wsfs_now_ns() when the newest run began */
	/** Runs listed (gathering or being sent); read without gb_lock as a hint. */
	atomic_uint gb_n;
	TAILQ_HEAD(wsfs_gb_list, wsfs_gather) gb_list;
	/** Number of the next run (from 1); written under gb_lock. */
	atomic_uint_fast64_t gb_seq;
	size_t gb_bytes;  /**< bytes allocated for the listed runs */
	bool gb_started;  /**< gb_thread runs */
	/** When gb_main() wakes by itself (wsfs_now_ns()), INT64_MAX when
	 * it waits to be woken: one that queues something due sooner wakes it. */
	int64_t gb_wake_ns;
	/* Handles to release together (fs.c "Releases"), under gb_lock. */
	uint64_t rel_q[WSFS_RELEASE_BATCH];
	size_t rel_n;
	int64_t rel_born_ns; /**< wsfs_now_ns() when rel_q[0] came */
	/** agentd ignored HandleRequest.more (one from before it): release
	 * one handle per call. */
	atomic_bool rel_single;
	/** Held while a batch taken from rel_q is sent: release_flush()
	 * returns only once every handle queued before it is released. */
	pthread_mutex_t rel_send_lock;
	bool gb_stop;     /**< wsfs_send_behind(): gather no more, the thread ends */
	pthread_t gb_thread;

	/* Nodes whose pages are to be dropped off the request threads
	 * (watch.c wsfs_inval_pages_later); protected by nq_lock. */
	pthread_mutex_t nq_lock;
	pthread_cond_t nq_cond;
	uint64_t nq[WSFS_NQ_MAX]; /**< nodeids, nq_n of them */
	unsigned nq_n;
	bool nq_started, nq_stop;
	pthread_t nq_thread;
	/** Chunks for the same thread to store (wsfs_store_later), oldest
	 * first, and their bytes; protected by nq_lock. */
	struct wsfs_store *sq_head, **sq_tail;
	size_t sq_bytes;
	/** Held (read) while a chunk is stored, (write) for a moment by each
	 * open for writing or with O_TRUNC and each truncate (fs.c "Chunk
	 * reads"). */
	pthread_rwlock_t store_lock;
	/** Bumped by those, and by an open that finds the file changed or
	 * replaced (fs.c "Chunk reads"). */
	atomic_uint_fast64_t store_gen;

	/* Own changes (watch.c wsfs_self_*); protected by self_lock. */
	pthread_mutex_t self_lock;
	pthread_cond_t self_cond; /**< an own change ended (CLOCK_MONOTONIC waits) */
	unsigned self_waiters;
	struct wsfs_self *self_tab[WSFS_SELF_BUCKETS];
	size_t n_self;

	/* Names answered missing with a watch-long timeout (watch.c
	 * wsfs_neg_add); protected by neg_lock. */
	pthread_mutex_t neg_lock;
	struct wsfs_neg *neg; /**< ring of WSFS_NEG_MAX slots once allocated */
	size_t neg_head, n_neg;

	/* ws_open() of nodeid N holds open_locks[N % WSFS_OPEN_LOCKS]
	 * (fs.c open_own()); taken with no other lock held. */
	pthread_mutex_t open_locks[WSFS_OPEN_LOCKS];

	/* Threads an OPEN told ESTALE, whose open(2) the VFS repeats once
	 * (fs.c stale_*); protected by stale_lock (a leaf lock). */
	pthread_mutex_t stale_lock;
	struct wsfs_stale {
		pid_t tid;     /**< 0: a free slot */
		int64_t at_ns; /**< wsfs_now_ns() when told */
		uint64_t path; /**< hash of the path opened; 0: not known */
	} stale[WSFS_STALE_MAX];
};

/** Most handles kept for a later Release (the rest are agentd's to leak). */
#define WSFS_PENDING_MAX 65536

/** CLOCK_MONOTONIC now, nanoseconds (watch.c). Any thread. */
int64_t wsfs_now_ns(void);

/** The FUSE low-level operations (fs.c). userdata is the struct wsfs. */
extern const struct fuse_lowlevel_ops wsfs_ll_ops;

/**
 * Create the filesystem state for client @p c (borrowed; may be NULL and set
 * in ->client before the first request or probe) with settings @p cfg
 * (copied). Starts no thread. Returns 0 and sets *ret, or -ENOMEM.
 */
int wsfs_new(const struct wsfs_config *cfg, struct wsc *c, struct wsfs **ret);

/**
 * Make session @p se (mounted: fuse_session_mount()) read and write
 * /dev/fuse through fs.c's hooks (fuse_session_custom_io(), libfuse 3.14),
 * which negotiate FUSE_HANDLE_KILLPRIV_V2 and pass the requests' set-ID
 * flags on (fs.c "the kernel's requests as read"). @p se's userdata must
 * be @p fs. Returns 0, or -errno (-ENOMEM) with @p se left as it was. Call
 * before the session loop.
 */
int wsfs_io_attach(struct wsfs *fs, struct fuse_session *se);

/** Free @p fs (the monitor must be stopped). NULL is a no-op. */
void wsfs_free(struct wsfs *fs);

/**
 * Stat the workspace root once, to check that agentd answers and to learn
 * the root's server inode. On failure writes a message to @p msg (@p size
 * bytes) and returns -errno. Any thread; before the session loop.
 */
int wsfs_probe(struct wsfs *fs, char *msg, size_t size);

/**
 * A call saw a transport failure (gRPC UNAVAILABLE or DEADLINE_EXCEEDED
 * without agentd's errno trailer): mark the connection down (calls then fail
 * at once with ENOTCONN until the monitor's probe succeeds), cancel the watch
 * stream, and for an --exec transport ask the monitor to run the command
 * again: on UNAVAILABLE (it ended), and on DEADLINE_EXCEEDED once nothing
 * has answered for twice rpc_timeout (a `kubectl exec` whose link hangs
 * never ends by itself; its agentd --stdio, if only slow, serves this mount
 * alone). Any thread; never blocks on the network.
 */
void wsfs_conn_failed(struct wsfs *fs, int code);

/** A call succeeded: end a "down" period, bumping conn_gen. Any thread. */
void wsfs_conn_ok(struct wsfs *fs);

/**
 * Send the Releases queued while agentd was unreachable (fs->pending); any
 * that fail the same way are queued again. Monitor thread, without mon_lock.
 */
void wsfs_release_pending(struct wsfs *fs);

/**
 * Start the thread that sends gathered writes that waited cfg.gather_ns
 * (fs.c "Write gathering"); wsfs_send_behind() stops it. Without it (or with
 * cfg.write_behind or cfg.gather_ns 0) writes are not gathered. Once, after any fork, from
 * the thread that mounts. Returns 0 or -errno of pthread_create(3).
 */
int wsfs_gather_start(struct wsfs *fs);

/**
 * Stop gathering writes and send, each with its RPC deadline, every write
 * gathered and every SETATTR kept behind on files the unmount left open
 * (no FLUSH came): their write(2)s and chmod(2)s returned. Once no request
 * thread is left (the session loop returned), before wsfs_monitor_stop()
 * (a failure may queue wsfs_inval_pages_later()); wsfs_free() does it too.
 * Long calls then wait rpc_timeout at most (wsc_cut_long()). Again later:
 * nothing.
 */
void wsfs_send_behind(struct wsfs *fs);

/**
 * Stop the pinger thread of long calls (fs.c "Long calls"), if it runs, and
 * join it by @p until (CLOCK_REALTIME, as pthread_timedjoin_np(3) takes).
 * Once no request thread is left. Returns 0, or -ETIMEDOUT when it is still
 * in a call to agentd (bounded by rpc_timeout): then @p fs must not be
 * freed. Again later: 0.
 */
int wsfs_ping_stop(struct wsfs *fs, const struct timespec *until);

/**
 * Start the monitor thread (watch.c): the Watch stream (unless
 * cfg.no_watch) and reconnects. Returns 0 or -errno of pthread_create.
 */
int wsfs_monitor_start(struct wsfs *fs);

/**
 * Have the kernel drop node @p nodeid's attributes and every page it holds
 * of the file (fuse_lowlevel_notify_inval_inode, offset 0, length 0: to the
 * end), soon, on a thread of watch.c's own: libfuse's
 * doc/README.notifications forbids notifications on a request thread (a
 * page lock the kernel holds may wait for a WRITE that thread would
 * serve). For pages agentd does not have (a write replied to early that
 * then failed). At most WSFS_NQ_MAX nodes wait; more are dropped with a
 * warning (their next open drops the pages anyway). Any thread.
 */
void wsfs_inval_pages_later(struct wsfs *fs, uint64_t nodeid);

/**
 * Bytes agentd returned around a small READ (fs.c "Chunk reads"), for the
 * kernel's page cache: [off, off + len) of node @p nodeid's file, minus
 * the READ's own [skip_off, skip_off + skip_len), replied already.
 */
struct wsfs_store {
	struct wsfs_store *next; /**< wsfs.sq_head's list */
	uint64_t nodeid;
	uint64_t off;            /**< file offset of data[0], bytes */
	size_t len;              /**< bytes at data */
	uint64_t skip_off, skip_len;
	uint64_t seq, mgen, sgen; /**< inval_seq, mgen, store_gen before the Read */
	uint64_t sino, sident;   /**< the server file the Read read (wsfs_file ino, ident) */
	const uint8_t *data;     /**< within owner */
	void *owner;             /**< the ReadReply holding data; freed with this */
};

/**
 * Have @p s stored into the kernel's page cache soon (wsfs_store_pages()),
 * on wsfs_inval_pages_later()'s thread (libfuse doc/README.notifications:
 * never on a request thread; a store waits for the page locks of READs in
 * flight). Takes @p s (malloc(3)ed) and its owner: frees them at once when
 * WSFS_STORE_MAX bytes wait already, or the thread cannot start. Any thread.
 */
void wsfs_store_later(struct wsfs *fs, struct wsfs_store *s);

/**
 * Store @p s into the kernel's page cache (fuse_lowlevel_notify_store)
 * when the file can have changed neither in the pod nor through this mount
 * since its Read began, and free it. wsfs_store_later()'s thread only.
 */
void wsfs_store_pages(struct wsfs *fs, struct wsfs_store *s);

/** Free @p s and its owner without storing it. Any thread. */
void wsfs_store_free(struct wsfs_store *s);

/**
 * Stop the monitor thread and wsfs_inval_pages_later()'s, and join them,
 * waiting at most @p ms milliseconds in all (the monitor may be in a call
 * to agentd, each bounded by rpc_timeout). Returns 0, or -ETIMEDOUT when
 * one is still running: then @p fs and its client must not be freed (exit
 * the process instead). Call after the session loop, before
 * fuse_session_destroy().
 */
int wsfs_monitor_stop(struct wsfs *fs, unsigned ms);

/**
 * Drop every kernel dentry and attribute cache entry this mount knows
 * (notify_inval_entry, and inval_inode of the attributes only, for each
 * node), and the negative dentries wsfs_neg_add() recorded; a file's pages
 * go when the kernel finds its size or mtime changed (FUSE_AUTO_INVAL_DATA
 * at a read, keep_cache at an open). Monitor thread only: it must never run
 * on a FUSE request thread (deadlock rule above).
 */
void wsfs_invalidate_all(struct wsfs *fs);

/**
 * An own operation that causes Watch events of @p kinds (enum
 * wsfs_self_kind bits) on wire path @p path (@p len bytes) is about to be
 * sent to agentd. Pair with wsfs_self_end() (same path) when its reply
 * arrived or it failed. Drops the attributes kept for the file @p path
 * names (node_attr_drop_path()), as wsfs_self_end() does again. Any
 * thread; takes the node table's lock and self_lock, one after the other
 * (never nested); never blocks on I/O. Out of memory or over WSFS_SELF_MAX records nothing (echoes then
 * invalidate as before).
 */
void wsfs_self_begin(struct wsfs *fs, const char *path, size_t len, unsigned kinds);

/**
 * After wsfs_self_begin() of a rename's two names (WSFS_SELF_MOVED_FROM on
 * @p from, WSFS_SELF_MOVED_TO on @p to; both on each for RENAME_EXCHANGE,
 * @p exchange): a MOVED event is this rename's echo only if it goes from
 * @p from to @p to (or, for an exchange, the other way), not from one own
 * rename's source to another's target: the pod's `mv a c` right after the
 * mount exchanged a and x and renamed nb to c was taken for an echo, and
 * the kernel kept its entry of a for watch_timeout. Paths as
 * wsfs_self_begin()'s. Any thread; takes self_lock.
 */
void wsfs_self_moved(struct wsfs *fs, const char *from, size_t from_len, const char *to,
		     size_t to_len, bool exchange);

/**
 * The own operation wsfs_self_begin() announced on @p path (@p len bytes)
 * ended: @p ok, it changed the file (its echoes are expected for
 * WSFS_SELF_WINDOW_NS more); @p st, the file's attributes in its reply as
 * fs.c's attr_to_stat() gives them (st_dev holds the identity), or NULL
 * (none in the reply). A failed operation (!@p ok) clears what @p path
 * has recorded, so that nothing it did not cause is taken for an echo (a
 * pod-side create that made an own O_EXCL create fail, say). Any thread.
 */
void wsfs_self_end(struct wsfs *fs, const char *path, size_t len, bool ok,
		   const struct stat *st);

/**
 * The own create wsfs_self_begin() announced on @p path (@p len bytes) with
 * WSFS_SELF_CREATED opened a file that was there already (OpenReply.existed):
 * no CREATED event of it comes, and it made no file there, so neither is
 * expected. Call before that operation's wsfs_self_end(). Any thread.
 */
void wsfs_self_existed(struct wsfs *fs, const char *path, size_t len);

/** Free the own-change table of @p fs (no other call may run). */
void wsfs_self_free(struct wsfs *fs);

/**
 * Remember that the kernel was told name @p name (@p len bytes, copied) of
 * directory node @p parent is missing for longer than entry_timeout (a
 * LOOKUP reply with nodeid 0 and entry_valid is a negative dentry: FUSE
 * protocol), because the watch vouches for it: wsfs_invalidate_all() drops
 * such dentries, which no node stands for, when the stream that vouched
 * for them ends. Entries older than watch_timeout (the kernel has dropped
 * them) are forgotten as new ones come. Returns 0; -ENAMETOOLONG over
 * NAME_MAX bytes, -ENOSPC with WSFS_NEG_MAX younger entries, -ENOMEM:
 * then the caller gives at most entry_timeout. Any thread; takes neg_lock
 * (a leaf lock).
 */
int wsfs_neg_add(struct wsfs *fs, uint64_t parent, const char *name, size_t len);

/** Free what wsfs_neg_add() kept (no other call may run). */
void wsfs_neg_free(struct wsfs *fs);

/**
 * Abort this process's FUSE connection: write its abort file in the FUSE
 * control filesystem (Documentation/filesystems/fuse.rst, "Control
 * filesystem"), which ends every request pending or in flight with
 * ECONNABORTED and fails later ones with ENOTCONN. For an exit that
 * cannot wait any longer: a thread held in the kernel on a page lock of a
 * READ nobody will answer (fuse_notify_store(), fuse_notify_inval_inode())
 * then returns. Call it after fuse_session_unmount(): libfuse skips the
 * unmount of an aborted connection (its fuse_kern_unmount() takes POLLERR
 * on /dev/fuse for "already unmounted"). Returns 0 (also when the
 * connection had already ended: the kernel accepts the write then too),
 * -ENOENT if wsfs_conn_open() found no abort file, or -errno of write(2).
 * Any thread; async-signal-safe; errno is kept.
 */
int wsfs_conn_abort(void);

/**
 * Open the abort file of the connection mounted at fs->cfg.mountpoint
 * (found in /proc/self/mountinfo: type fuse.wsfs or fuse on top there; the
 * control filesystem names a connection by its superblock's dev_t, MAJ <<
 * 20 | MIN in decimal, fs/fuse/control.c fuse_ctl_add_conn(); the file
 * belongs to the mounting user, mode 0200) for wsfs_conn_abort(), and
 * install handlers of SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (and a
 * sanitizer's death callback, in such a build) that call it before the
 * handler that was there acts. Call once, right after
 * fuse_session_mount(), before any thread starts. Returns 0 or -errno
 * (-ENOENT: no such mount, or no /sys/fs/fuse/connections, which a
 * container may lack); then it logs at info level and nothing is
 * installed. Main thread.
 */
int wsfs_conn_open(struct wsfs *fs);

/**
 * What is mounted on top at @p mnt (an absolute path without symlinks), from
 * /proc/self/mountinfo (proc(5): the mount point in field 5, with spaces,
 * tabs, newlines and backslashes as octal escapes; after " - " the file
 * system type and the source): its "MAJ:MIN" into @p dev, its type
 * ("fuse.wsfs") into @p type and its source into @p src, each cut to its
 * size and NUL-terminated; any of them may be NULL. Returns 0, -ENOENT when
 * nothing is mounted there, or -errno of fopen(3). Any thread.
 */
int wsfs_mount_at(const char *mnt, char *dev, size_t dev_size, char *type, size_t type_size,
		  char *src, size_t src_size);

#endif /* WSFS_FS_H */
