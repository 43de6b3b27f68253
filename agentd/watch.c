/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The change watcher (watch.h): an inotify(7) instance over every directory
 * of the workspace, its directory tree, event translation (pairing of moves,
 * coalescing of changes) and delivery to subscribers from a shared queue.
 *
 * Threads: all of it runs on the loop thread of the watcher's libuv loop
 * (uv_poll on the inotify fd, a uv_idle for the incremental tree walk, uv
 * timers for move pairing and deferred work); no locks.
 *
 * Structure. A "session" is one inotify instance with its directory tree; it
 * exists while there are subscribers and is replaced after IN_Q_OVERFLOW.
 * Events produced while reading the kernel queue (and by walks of new
 * directories) are staged; the stage is committed to the shared queue (the
 * "log") once no IN_MOVED_FROM waits for its IN_MOVED_TO. Each subscriber
 * has a cursor into the log; events behind every cursor are freed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "watch.h"
#include "wsb.h"

/* Events every directory is watched for (inotify(7)). IN_DONT_FOLLOW is
 * added for absolute paths; a /proc/self/fd/N magic link must be followed
 * (it is the O_NOFOLLOW-opened directory itself). */
#define WATCH_MASK                                                                        \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_ATTRIB |     \
	 IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

/* Bytes read from the inotify fd at once, and reads per wakeup at most
 * (the poll is level-triggered: the rest comes on the next iteration). */
#define READ_BUF_BYTES (64 * 1024)
#define READS_PER_WAKEUP 16

/* Estimated bytes of one event in a WatchBatch besides its paths. */
#define EVENT_OVERHEAD 16

/* Directories that could not be watched (EMFILE, ENOMEM, EACCES...) are
 * tried again after RETRY_FIRST_MS, then at twice the last period, at most
 * RETRY_MAX_MS (NFS's acregmax, like wsfs's watch_timeout). */
#define RETRY_FIRST_MS 1000u
#define RETRY_MAX_MS 60000u

/* ---- types ---- */

/* One directory of the tree. */
struct wnode {
	struct wnode *parent;   /* NULL: the root, or detached (pending move) */
	char *name;             /* name in parent ("" for the root) */
	size_t name_len;
	int wd;                 /* inotify watch descriptor, -1 if none */
	struct wnode *first_child, *next_sib, *prev_sib;
	struct wnode *wd_next;  /* chain in the wd table */
	struct wnode *pn_next;  /* chain in the (parent, name) table */
	bool pn_hashed;
	struct wnode *scan_next, *scan_prev; /* walk queue */
	bool in_scan;
	bool scan_emit;         /* report what the walk finds as CREATED */
	struct wnode *fail_next, *fail_prev; /* failed list */
	bool failed;            /* it exists but could not be watched or listed
				 * (watch_failed): retried by the retry timer */
	bool listed;            /* a walk listed it whole */
	uint64_t serial;        /* unique in the process, never 0 (struct walked) */
};

/* An IN_MOVED_FROM waiting for its IN_MOVED_TO. */
struct pending_move {
	uint32_t cookie;
	size_t stage_idx;       /* the staged DELETED event that becomes MOVED */
	struct wnode *node;     /* the moved directory, detached; or NULL */
};

/*
 * A directory pushed out of its place by a rename onto its name: either
 * the rename replaced it (it is gone: IN_IGNORED follows) or it was a
 * RENAME_EXCHANGE, whose second half (IN_MOVED_FROM of this very name)
 * follows at once. Kept until the pair timer fires.
 */
struct displaced {
	struct wnode *parent;   /* where it was; NULL once that node is freed */
	struct wnode *node;     /* detached */
};

/*
 * A name a walk reported as CREATED (scan_emit). A name made in a new
 * directory after its watch was added and before its walk listed it is in
 * both: its IN_CREATE is still queued. Until the inotify fd is next read
 * dry, such an IN_CREATE is not reported again (a name cannot be created
 * twice without a removal, which forgets it here): a client takes one own
 * create for one CREATED.
 */
struct walked {
	uint64_t dir;           /* the directory's wnode serial; 0: a free slot */
	bool dead;              /* forgotten (a removal came): a tombstone */
	size_t len;
	char *name;
};

/* One inotify instance and the tree it watches. */
struct wsession {
	struct watcher *w;
	uv_poll_t poll;
	int fd;
	bool use_proc;          /* watch via /proc/self/fd/N, else absolute paths */
	bool ready;             /* the walk from the root is done */
	bool root_gone;
	struct wnode *root;
	struct wnode **wd_tab;
	size_t wd_cap, wd_count;
	struct wnode **pn_tab;
	size_t pn_cap, pn_count;
	struct wnode *scan_head, *scan_tail;
	unsigned watches;
	bool partial;           /* a directory could not be watched (set_partial) */
	bool limited;           /* ... because of the watch limit: no way back */
	struct wnode *fail_head; /* nodes with failed set */
	unsigned nfailed;
	bool failed_since_retry; /* watch_failed since the retry timer last fired */
	bool quiet;             /* a whole retry period passed without a failure */
	uint64_t retry_ms;      /* the retry timer's next period */
	uint64_t whole_at;      /* uv_now() when the stream was last made whole */
	struct pending_move *pend;
	size_t npend, pend_cap;
	struct displaced *disp;
	size_t ndisp, disp_cap;
	struct walked *walked;  /* open addressing, walked_cap a power of 2 */
	size_t walked_cap, walked_used; /* used: slots taken, tombstones too */
};

struct watch_sub {
	struct watcher *w;
	const struct watch_sub_ops *ops;
	void *arg;
	struct watch_sub *next, *prev;
	uint64_t cursor;        /* sequence number of the next event to deliver */
	bool ready;             /* READY was queued; reads the log */
	bool need_ready, need_overflow;
	bool busy;              /* a batch is out, waiting for watch_sub_done */
	bool acks;              /* watch_sub_acks(): barriers wait for acked */
	/* Syncs: a batch delivered at cursor c carries c + sync_bias (>= 1,
	 * never 0). A reset (ack_reset()) raises sync_bias so that every sync
	 * after it exceeds those before and sets ack_floor to the first:
	 * an acknowledgement below it is of a batch from before the reset. */
	uint64_t sync_bias;
	uint64_t ack_floor;
	uint64_t acked;         /* the last sync watch_sub_ack() took; 0 none since a reset */
	uint64_t sync_sent;     /* the last sync delivered */
};

struct watcher {
	uv_loop_t *loop;
	int root_fd;
	char *root_path;
	struct watch_config cfg;
	struct wsession *s;
	struct watch_sub *subs;
	unsigned nsubs;

	/* the shared queue: events [head, len) have sequence numbers base.. */
	struct watch_event *log;
	size_t log_head, log_len, log_cap;
	uint64_t log_base;

	/* events of the current read batch, not yet in the log */
	struct watch_event *stage;
	size_t stage_len, stage_cap;
	size_t *cset;           /* coalescing set: stage index + 1, 0 = empty */
	size_t cset_cap, cset_count;
	bool stage_overflow;    /* an OVERFLOW is staged */
	bool lost;              /* an event was lost (ENOMEM): stage OVERFLOW */

	uv_timer_t pair_timer, kick, retry, read_delay, bar_timer;
	uv_idle_t idle;
	struct watch_barrier *barriers; /* watch_barrier(), newest first */
	bool pair_armed;
	char *rbuf;

	bool shut;
	bool free_pending;
	int closing;            /* handles whose close callback is still due */
	bool warned_watches, warned_queue, warned_failed;
	uint64_t resyncs, sub_overflows, limit_hits;
};

/* A caller waiting for the events read so far to reach every subscriber
 * (watch_barrier()). */
struct watch_barrier {
	struct watcher *w;
	struct watch_barrier *next, *prev;
	uint64_t target;       /* log sequence each ready subscriber must pass */
	bool await_commit;     /* the stage held events: target set at commit */
	bool arming;           /* watch_barrier() runs: not called back yet */
	bool firing;           /* off the list, to be called (barriers_check()) */
	bool cancelled;        /* watch_barrier_cancel() while firing: skip it */
	uint64_t deadline_ms;  /* uv_now() */
	watch_barrier_fn done;
	void *arg;
};

static void session_stop(struct watcher *w);
static int session_start(struct watcher *w);
static void barriers_check(struct watcher *w, bool all);
static void on_bar_timer(uv_timer_t *t);
static void flush(struct watcher *w);
static void pump_all(struct watcher *w);
static void on_idle(uv_idle_t *h);
static void on_pair_timer(uv_timer_t *t);

/* ---- small helpers ---- */

static char *memdup0(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static void event_free(struct watch_event *e)
{
	free((char *)e->path);
	free((char *)e->from);
	e->path = e->from = NULL;
}

static void kick(struct watcher *w);

/* Read one number from a /proc/sys file, for the warnings; -1 if unknown. */
static long read_sysctl(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/* ---- the directory tree: tables ---- */

static size_t wd_bucket(const struct wsession *s, int wd)
{
	return ((size_t)(unsigned)wd * 0x9e3779b1u) & (s->wd_cap - 1);
}

static size_t pn_bucket(const struct wsession *s, const struct wnode *parent, const char *name,
			size_t len)
{
	uint64_t h = wsb_fnv1a(&parent, sizeof(parent), WSB_FNV1A_INIT);

	return (size_t)wsb_fnv1a(name, len, h) & (s->pn_cap - 1);
}

/* Double a table when it is full; on ENOMEM keep the longer chains. */
static void wd_grow(struct wsession *s)
{
	size_t ncap = s->wd_cap * 2, oc = s->wd_cap;
	struct wnode **nt, **ot = s->wd_tab;

	if (s->wd_count < s->wd_cap || !(nt = calloc(ncap, sizeof(*nt))))
		return;
	s->wd_tab = nt;
	s->wd_cap = ncap;
	for (size_t i = 0; i < oc; i++) {
		for (struct wnode *n = ot[i], *nx; n; n = nx) {
			size_t b = wd_bucket(s, n->wd);

			nx = n->wd_next;
			n->wd_next = nt[b];
			nt[b] = n;
		}
	}
	free(ot);
}

static void pn_grow(struct wsession *s)
{
	size_t ncap = s->pn_cap * 2, oc = s->pn_cap;
	struct wnode **nt, **ot = s->pn_tab;

	if (s->pn_count < s->pn_cap || !(nt = calloc(ncap, sizeof(*nt))))
		return;
	s->pn_tab = nt;
	s->pn_cap = ncap;
	for (size_t i = 0; i < oc; i++) {
		for (struct wnode *n = ot[i], *nx; n; n = nx) {
			size_t b = pn_bucket(s, n->parent, n->name, n->name_len);

			nx = n->pn_next;
			n->pn_next = nt[b];
			nt[b] = n;
		}
	}
	free(ot);
}

static struct wnode *wd_lookup(const struct wsession *s, int wd)
{
	struct wnode *n;

	if (wd < 0)
		return NULL;
	for (n = s->wd_tab[wd_bucket(s, wd)]; n; n = n->wd_next)
		if (n->wd == wd)
			return n;
	return NULL;
}

static void wd_unhash(struct wsession *s, struct wnode *n)
{
	struct wnode **pp = &s->wd_tab[wd_bucket(s, n->wd)];

	while (*pp && *pp != n)
		pp = &(*pp)->wd_next;
	if (*pp) {
		*pp = n->wd_next;
		s->wd_count--;
	}
	n->wd_next = NULL;
}

static struct wnode *pn_lookup(const struct wsession *s, const struct wnode *parent,
			       const char *name, size_t len)
{
	struct wnode *n;

	for (n = s->pn_tab[pn_bucket(s, parent, name, len)]; n; n = n->pn_next)
		if (n->parent == parent && n->name_len == len && memcmp(n->name, name, len) == 0)
			return n;
	return NULL;
}

static void pn_unhash(struct wsession *s, struct wnode *n)
{
	struct wnode **pp;

	if (!n->pn_hashed)
		return;
	pp = &s->pn_tab[pn_bucket(s, n->parent, n->name, n->name_len)];
	while (*pp && *pp != n)
		pp = &(*pp)->pn_next;
	if (*pp) {
		*pp = n->pn_next;
		s->pn_count--;
	}
	n->pn_next = NULL;
	n->pn_hashed = false;
}

/* ---- the directory tree: nodes ---- */

static void scan_enqueue(struct wsession *s, struct wnode *n, bool emit)
{
	if (n->in_scan) {
		n->scan_emit |= emit;
		return;
	}
	n->in_scan = true;
	n->scan_emit = emit;
	n->scan_next = NULL;
	n->scan_prev = s->scan_tail;
	if (s->scan_tail)
		s->scan_tail->scan_next = n;
	else
		s->scan_head = n;
	s->scan_tail = n;
	uv_idle_start(&s->w->idle, on_idle); /* no-op when active */
}

static void scan_dequeue(struct wsession *s, struct wnode *n)
{
	if (!n->in_scan)
		return;
	if (n->scan_prev)
		n->scan_prev->scan_next = n->scan_next;
	else
		s->scan_head = n->scan_next;
	if (n->scan_next)
		n->scan_next->scan_prev = n->scan_prev;
	else
		s->scan_tail = n->scan_prev;
	n->scan_next = n->scan_prev = NULL;
	n->in_scan = false;
}

static void on_retry(uv_timer_t *t);

/* Put @p n on the failed list; the retry timer walks it again. */
static void fail_add(struct wsession *s, struct wnode *n)
{
	struct watcher *w = s->w;

	if (n->failed)
		return;
	n->failed = true;
	n->fail_prev = NULL;
	n->fail_next = s->fail_head;
	if (s->fail_head)
		s->fail_head->fail_prev = n;
	s->fail_head = n;
	s->nfailed++;
	if (!uv_is_active((uv_handle_t *)&w->retry)) {
		/* back to the first period once the stream stayed whole for
		 * the longest one: a new episode, not a failure coming back */
		if (uv_now(w->loop) - s->whole_at >= RETRY_MAX_MS)
			s->retry_ms = RETRY_FIRST_MS;
		uv_timer_start(&w->retry, on_retry, s->retry_ms, 0);
	}
}

/* Take @p n off the failed list (it was watched and listed, is gone from
 * the tree, or is out of agentd's reach). The retry timer keeps running:
 * on_retry decides when the stream is whole again. */
static void fail_remove(struct wsession *s, struct wnode *n)
{
	if (!n->failed)
		return;
	if (n->fail_prev)
		n->fail_prev->fail_next = n->fail_next;
	else
		s->fail_head = n->fail_next;
	if (n->fail_next)
		n->fail_next->fail_prev = n->fail_prev;
	n->fail_next = n->fail_prev = NULL;
	n->failed = false;
	s->nfailed--;
}

/* Unlink @p n from its parent; it keeps its subtree. */
static void node_detach(struct wsession *s, struct wnode *n)
{
	struct wnode *p = n->parent;

	pn_unhash(s, n);
	if (!p)
		return;
	if (n->prev_sib)
		n->prev_sib->next_sib = n->next_sib;
	else
		p->first_child = n->next_sib;
	if (n->next_sib)
		n->next_sib->prev_sib = n->prev_sib;
	n->next_sib = n->prev_sib = NULL;
	n->parent = NULL;
}

/* Free one childless, detached node; with @p rm drop its kernel watch. */
static void node_free_one(struct wsession *s, struct wnode *n, bool rm)
{
	if (n->wd >= 0) {
		wd_unhash(s, n);
		if (rm)
			(void)inotify_rm_watch(s->fd, n->wd); /* EINVAL if already gone */
		s->watches--;
	}
	scan_dequeue(s, n);
	fail_remove(s, n);
	for (size_t i = 0; i < s->npend; i++)
		if (s->pend[i].node == n)
			s->pend[i].node = NULL;
	for (size_t i = 0; i < s->ndisp; i++) {
		if (s->disp[i].node == n)
			s->disp[i--] = s->disp[--s->ndisp];
		else if (s->disp[i].parent == n)
			s->disp[i].parent = NULL;
	}
	free(n->name);
	free(n);
}

/*
 * Remove @p n and everything below it from the tree, iteratively (a tree
 * may be deeper than any recursion should go).
 */
static void node_free_tree(struct wsession *s, struct wnode *n, bool rm)
{
	struct wnode *cur = n;

	node_detach(s, n);
	for (;;) {
		struct wnode *p;

		while (cur->first_child)
			cur = cur->first_child;
		p = cur == n ? NULL : cur->parent;
		if (p) {
			pn_unhash(s, cur);
			p->first_child = cur->next_sib;
			if (cur->next_sib)
				cur->next_sib->prev_sib = NULL;
		}
		node_free_one(s, cur, rm);
		if (!p)
			return;
		cur = p;
	}
}

/* Detach @p n, child of @p parent, and keep it as displaced. */
static void node_displace(struct wsession *s, struct wnode *n, struct wnode *parent)
{
	node_detach(s, n);
	if (s->ndisp == s->disp_cap) {
		size_t ncap = s->disp_cap ? s->disp_cap * 2 : 4;
		struct displaced *nd = realloc(s->disp, ncap * sizeof(*nd));

		if (!nd) {
			node_free_tree(s, n, true);
			return;
		}
		s->disp = nd;
		s->disp_cap = ncap;
	}
	s->disp[s->ndisp++] = (struct displaced){parent, n};
}

/* Take the displaced directory that was child @p name of @p parent. */
static struct wnode *disp_take(struct wsession *s, const struct wnode *parent, const char *name,
			       size_t len)
{
	for (size_t i = 0; i < s->ndisp; i++) {
		struct wnode *n = s->disp[i].node;

		if (s->disp[i].parent == parent && n->name_len == len &&
		    memcmp(n->name, name, len) == 0) {
			s->disp[i] = s->disp[--s->ndisp];
			return n;
		}
	}
	return NULL;
}

/* Drop every displaced directory (with @p rm, their kernel watches too). */
static void disp_free_all(struct wsession *s, bool rm)
{
	while (s->ndisp)
		node_free_tree(s, s->disp[s->ndisp - 1].node, rm); /* removes the entry */
}

/*
 * Make @p n (detached) the child @p name of @p parent. A different child of
 * that name (a directory replaced by a rename, or the other half of a
 * RENAME_EXCHANGE) is displaced. Returns 0 or -ENOMEM.
 */
static int node_attach(struct wsession *s, struct wnode *n, struct wnode *parent,
		       const char *name, size_t len)
{
	struct wnode *old = pn_lookup(s, parent, name, len);
	char *nm;

	if (old == n)
		return 0;
	if (old)
		node_displace(s, old, parent);
	if (n->name_len != len || memcmp(n->name, name, len) != 0) {
		nm = memdup0(name, len);
		if (!nm)
			return -ENOMEM;
		free(n->name);
		n->name = nm;
		n->name_len = len;
	}
	n->parent = parent;
	n->prev_sib = NULL;
	n->next_sib = parent->first_child;
	if (parent->first_child)
		parent->first_child->prev_sib = n;
	parent->first_child = n;
	pn_grow(s);
	{
		size_t b = pn_bucket(s, parent, name, len);

		n->pn_next = s->pn_tab[b];
		s->pn_tab[b] = n;
		n->pn_hashed = true;
		s->pn_count++;
	}
	return 0;
}

/* Shared by every watcher's loop thread; a uint64_t does not wrap. */
static atomic_uint_fast64_t node_serial;

static struct wnode *node_new(const char *name, size_t len)
{
	struct wnode *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->name = memdup0(name, len);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->name_len = len;
	n->wd = -1;
	n->serial = atomic_fetch_add(&node_serial, 1) + 1;
	return n;
}

/* A new child directory @p name of @p parent, queued for a walk. */
static struct wnode *node_add_child(struct wsession *s, struct wnode *parent, const char *name,
				    size_t len, bool emit)
{
	struct wnode *n = node_new(name, len);

	if (!n)
		return NULL;
	if (node_attach(s, n, parent, name, len) < 0) {
		node_free_one(s, n, false);
		return NULL;
	}
	scan_enqueue(s, n, emit);
	return n;
}

/* Number of components from the root to @p n, or -1 if detached. */
static long node_depth(const struct wsession *s, const struct wnode *n)
{
	long d = 0;

	for (; n != s->root; n = n->parent) {
		if (!n->parent)
			return -1;
		d++;
	}
	return d;
}

/*
 * Path of entry @p name (may be NULL: the node itself) of directory @p n,
 * relative to the root, in a new string. NULL when @p n is detached (a
 * pending move) or on ENOMEM.
 */
static char *node_path(const struct wsession *s, const struct wnode *n, const char *name,
		       size_t name_len, size_t *ret_len)
{
	size_t len = 0, pos;
	const struct wnode *c;
	char *p;

	if (node_depth(s, n) < 0)
		return NULL;
	for (c = n; c != s->root; c = c->parent)
		len += c->name_len + 1;
	if (name)
		len += name_len;
	else if (len)
		len--; /* no trailing '/' */
	p = malloc(len + 1);
	if (!p)
		return NULL;
	p[len] = '\0';
	pos = len;
	if (name) {
		pos -= name_len;
		memcpy(p + pos, name, name_len);
	}
	for (c = n; c != s->root; c = c->parent) {
		if (pos < len)
			p[--pos] = '/';
		pos -= c->name_len;
		memcpy(p + pos, c->name, c->name_len);
	}
	*ret_len = len;
	return p;
}

/* ---- names a walk reported (struct walked) ---- */

static size_t walked_slot(const struct wsession *s, uint64_t dir, const char *name, size_t len)
{
	return (size_t)wsb_fnv1a(name, len, wsb_fnv1a(&dir, sizeof(dir), WSB_FNV1A_INIT)) &
	       (s->walked_cap - 1);
}

static struct walked *walked_find(struct wsession *s, const struct wnode *n, const char *name,
				  size_t len)
{
	if (!s->walked_cap)
		return NULL;
	for (size_t i = walked_slot(s, n->serial, name, len); s->walked[i].dir;
	     i = (i + 1) & (s->walked_cap - 1)) {
		struct walked *e = &s->walked[i];

		if (!e->dead && e->dir == n->serial && e->len == len && memcmp(e->name, name, len) == 0)
			return e;
	}
	return NULL;
}

/* Forget every name (the inotify fd was read dry). */
static void walked_clear(struct wsession *s)
{
	for (size_t i = 0; i < s->walked_cap; i++)
		free(s->walked[i].name);
	free(s->walked);
	s->walked = NULL;
	s->walked_cap = s->walked_used = 0;
}

/* Remember that a walk of @p n reported @p name. Out of memory: not
 * remembered (the IN_CREATE, if one is queued, then reports it again). */
static void walked_add(struct wsession *s, const struct wnode *n, const char *name, size_t len)
{
	struct walked *e;
	size_t i;

	if ((s->walked_used + 1) * 2 > s->walked_cap) {
		size_t ncap = s->walked_cap ? s->walked_cap * 2 : 64;
		struct walked *nt = calloc(ncap, sizeof(*nt)), *ot = s->walked;
		size_t oc = s->walked_cap;

		if (!nt)
			return;
		s->walked = nt;
		s->walked_cap = ncap;
		s->walked_used = 0;
		for (size_t k = 0; k < oc; k++) {
			if (!ot[k].dir)
				continue;
			if (ot[k].dead) {
				free(ot[k].name);
				continue;
			}
			for (i = walked_slot(s, ot[k].dir, ot[k].name, ot[k].len); nt[i].dir;
			     i = (i + 1) & (ncap - 1))
				;
			nt[i] = ot[k];
			s->walked_used++;
		}
		free(ot);
	}
	if (walked_find(s, n, name, len))
		return;
	for (i = walked_slot(s, n->serial, name, len); s->walked[i].dir;
	     i = (i + 1) & (s->walked_cap - 1))
		;
	e = &s->walked[i];
	e->name = memdup0(name, len);
	if (!e->name)
		return;
	e->dir = n->serial;
	e->dead = false;
	e->len = len;
	s->walked_used++;
}

/* Is @p name of @p n one a walk reported? Forgets it (a later IN_CREATE
 * follows a removal). */
static bool walked_take(struct wsession *s, const struct wnode *n, const char *name, size_t len)
{
	struct walked *e = walked_find(s, n, name, len);

	if (!e)
		return false;
	e->dead = true; /* the slot stays taken: probe chains go through it */
	return true;
}

/* ---- staging and coalescing ---- */

static size_t cset_slot(const struct watcher *w, const char *p, size_t len)
{
	return (size_t)wsb_fnv1a(p, len, WSB_FNV1A_INIT) & (w->cset_cap - 1);
}

static void cset_put(struct watcher *w, size_t idx)
{
	const struct watch_event *e = &w->stage[idx];
	size_t i;

	if (w->cset_count * 2 >= w->cset_cap) {
		size_t ncap = w->cset_cap ? w->cset_cap * 2 : 256;
		size_t *nt = calloc(ncap, sizeof(*nt)), *ot = w->cset, oc = w->cset_cap;

		if (!nt)
			return; /* no coalescing for this one: harmless */
		w->cset = nt;
		w->cset_cap = ncap;
		w->cset_count = 0;
		for (size_t k = 0; k < oc; k++)
			if (ot[k])
				cset_put(w, ot[k] - 1);
		free(ot);
	}
	for (i = cset_slot(w, e->path, e->path_len); w->cset[i]; i = (i + 1) & (w->cset_cap - 1)) {
		const struct watch_event *o = &w->stage[w->cset[i] - 1];

		if (o->path_len == e->path_len && memcmp(o->path, e->path, e->path_len) == 0)
			return;
	}
	w->cset[i] = idx + 1;
	w->cset_count++;
}

/* The staged event that names @p p as CHANGED, CREATED or a MOVED target,
 * or NULL. */
static struct watch_event *cset_find(struct watcher *w, const char *p, size_t len)
{
	if (!w->cset_cap)
		return NULL;
	for (size_t i = cset_slot(w, p, len); w->cset[i]; i = (i + 1) & (w->cset_cap - 1)) {
		struct watch_event *o = &w->stage[w->cset[i] - 1];

		if (o->path_len == len && memcmp(o->path, p, len) == 0)
			return o;
	}
	return NULL;
}

static void stage_clear(struct watcher *w)
{
	for (size_t i = 0; i < w->stage_len; i++)
		event_free(&w->stage[i]);
	w->stage_len = 0;
	if (w->cset)
		memset(w->cset, 0, w->cset_cap * sizeof(*w->cset));
	w->cset_count = 0;
	w->stage_overflow = false;
}

/*
 * Stage an event; takes ownership of @p path and @p from (NULL path: the
 * path could not be built; nothing is staged). Returns the stage index, or
 * -1 (not staged: coalesced away, or ENOMEM, which is remembered as a lost
 * event).
 */
static long stage_add(struct watcher *w, enum watch_kind kind, bool is_dir, char *path,
		      size_t path_len, char *from, size_t from_len)
{
	struct watch_event *e;

	if (kind == WATCH_OVERFLOW && w->stage_overflow)
		return -1;
	if (kind != WATCH_OVERFLOW && !path) {
		free(from);
		return -1;
	}
	if (kind == WATCH_CHANGED) {
		struct watch_event *o = cset_find(w, path, path_len);

		if (o) {
			/* One event per path and batch; a CREATED or MOVED
			 * says a change followed it (watch_event.changed). */
			if (o->kind != WATCH_CHANGED)
				o->changed = true;
			free(path);
			return -1;
		}
	}
	if (w->stage_len == w->stage_cap) {
		size_t ncap = w->stage_cap ? w->stage_cap * 2 : 64;
		struct watch_event *ns = realloc(w->stage, ncap * sizeof(*ns));

		if (!ns) {
			free(path);
			free(from);
			w->lost = true;
			return -1;
		}
		w->stage = ns;
		w->stage_cap = ncap;
	}
	e = &w->stage[w->stage_len];
	e->kind = kind;
	e->is_dir = is_dir;
	e->path = path ? path : memdup0("", 0);
	e->path_len = path ? path_len : 0;
	e->from = from;
	e->from_len = from ? from_len : 0;
	e->changed = false;
	if (!e->path) {
		free(from);
		w->lost = true;
		return -1;
	}
	if (kind == WATCH_OVERFLOW)
		w->stage_overflow = true;
	if (kind == WATCH_CHANGED || kind == WATCH_CREATED || kind == WATCH_MOVED)
		cset_put(w, w->stage_len);
	return (long)w->stage_len++;
}

/* Stage an event for entry @p name of directory @p n. */
static long stage_entry(struct watcher *w, enum watch_kind kind, const struct wnode *n,
			const char *name, size_t len, bool is_dir)
{
	size_t pl = 0;
	char *p = node_path(w->s, n, name, len, &pl);

	return stage_add(w, kind, is_dir, p, pl, NULL, 0);
}

/* ---- the log and delivery ---- */

static uint64_t log_end(const struct watcher *w)
{
	return w->log_base + (w->log_len - w->log_head);
}

/* Free events every ready subscriber has passed. */
static void log_trim(struct watcher *w)
{
	uint64_t min = log_end(w);
	size_t drop;

	for (struct watch_sub *u = w->subs; u; u = u->next)
		if (u->ready && u->cursor < min)
			min = u->cursor;
	drop = (size_t)(min - w->log_base);
	for (size_t i = 0; i < drop; i++)
		event_free(&w->log[w->log_head + i]);
	w->log_head += drop;
	w->log_base = min;
	if (w->log_head == w->log_len) {
		w->log_head = w->log_len = 0;
	} else if (w->log_head > 1024 && w->log_head * 2 > w->log_len) {
		memmove(w->log, w->log + w->log_head, (w->log_len - w->log_head) * sizeof(*w->log));
		w->log_len -= w->log_head;
		w->log_head = 0;
	}
}

/*
 * @p u's cursor was just moved to the log's end for an OVERFLOW: a barrier
 * now waits for the OVERFLOW's acknowledgement, and one of a batch sent
 * before (still on its way) must not stand for it.
 */
static void ack_reset(struct watch_sub *u)
{
	if (u->cursor + u->sync_bias <= u->sync_sent)
		u->sync_bias = u->sync_sent + 1 - u->cursor;
	u->ack_floor = u->cursor + u->sync_bias;
	u->acked = 0;
}

static void sub_overflow(struct watcher *w, struct watch_sub *u)
{
	u->cursor = log_end(w);
	u->need_overflow = true;
	ack_reset(u);
}

/*
 * Move the stage into the log (unless the walk is still going: subscribers
 * get READY or OVERFLOW at its end, so earlier events mean nothing to them),
 * skip laggards ahead, free what nobody needs.
 */
static void commit_stage(struct watcher *w)
{
	struct wsession *s = w->s;
	size_t n;

	if (w->lost) {
		w->lost = false;
		stage_add(w, WATCH_OVERFLOW, false, NULL, 0, NULL, 0);
	}
	n = w->stage_len;
	if (!s || !s->ready || n == 0) {
		stage_clear(w);
		return;
	}
	if (w->log_len + n > w->log_cap) {
		size_t ncap = w->log_cap ? w->log_cap : 256;
		struct watch_event *nl;

		while (ncap < w->log_len + n)
			ncap *= 2;
		nl = realloc(w->log, ncap * sizeof(*nl));
		if (!nl) {
			stage_clear(w);
			for (struct watch_sub *u = w->subs; u; u = u->next)
				if (u->ready)
					sub_overflow(w, u);
			log_trim(w);
			return;
		}
		w->log = nl;
		w->log_cap = ncap;
	}
	memcpy(w->log + w->log_len, w->stage, n * sizeof(*w->stage));
	w->log_len += n;
	w->stage_len = 0; /* the log owns the strings now */
	stage_clear(w);
	for (struct watch_sub *u = w->subs; u; u = u->next) {
		if (u->ready && log_end(w) - u->cursor > w->cfg.max_queue) {
			sub_overflow(w, u);
			w->sub_overflows++;
		}
	}
	log_trim(w);
}

/* Commit the stage (commit_stage()); barriers that waited for it now wait
 * for what it added. */
static void commit(struct watcher *w)
{
	commit_stage(w);
	for (struct watch_barrier *b = w->barriers; b; b = b->next) {
		if (b->await_commit) {
			b->await_commit = false;
			b->target = log_end(w);
		}
	}
}

static void sub_free(struct watch_sub *u)
{
	struct watcher *w = u->w;

	if (u->prev)
		u->prev->next = u->next;
	else
		w->subs = u->next;
	if (u->next)
		u->next->prev = u->prev;
	w->nsubs--;
	free(u);
	log_trim(w);
	/* Barriers it held may be met now: check on the next turn of the
	 * loop (a callback here could run inside a walk of the lists). */
	if (w->barriers && !w->shut)
		uv_timer_start(&w->bar_timer, on_bar_timer, 0, 0);
	if (!w->subs)
		kick(w); /* stop watching, from a callback of its own */
}

/* Whether @p u (one that acknowledges) acknowledged @p b's events and
 * anything due since its last reset. */
static bool ack_met(const struct watch_sub *u, const struct watch_barrier *b)
{
	return u->acked >= u->ack_floor && u->acked >= b->target + u->sync_bias;
}

/* Whether @p u acknowledges and a barrier waits for more than it acked:
 * what it is delivered now carries a sync. */
static bool sync_due(const struct watch_sub *u)
{
	if (!u->acks)
		return false;
	for (const struct watch_barrier *b = u->w->barriers; b; b = b->next)
		if (b->await_commit || !ack_met(u, b))
			return true;
	return false;
}

/*
 * Deliver the next batch to @p u if it can take one. Returns false when the
 * subscriber died in the attempt (and was freed).
 */
static bool pump(struct watch_sub *u)
{
	struct watcher *w = u->w;
	struct watch_event one = {0};
	const struct watch_event *ev;
	size_t n = 0;
	int r;

	uint64_t sync = 0;

	if (u->busy)
		return true;
	if (u->need_ready || u->need_overflow) {
		one.kind = u->need_ready ? WATCH_READY : WATCH_OVERFLOW;
		one.path = "";
		if (u->need_ready)
			u->need_ready = false;
		else
			u->need_overflow = false;
		ev = &one;
		n = 1;
	} else if (u->ready && w->s && w->s->ready && u->cursor < log_end(w)) {
		size_t idx = w->log_head + (size_t)(u->cursor - w->log_base), bytes = 0;

		ev = &w->log[idx];
		while (idx + n < w->log_len) {
			const struct watch_event *e = &w->log[idx + n];
			size_t sz = e->path_len + e->from_len + EVENT_OVERHEAD;

			if (n && bytes + sz > w->cfg.batch_bytes)
				break;
			bytes += sz;
			n++;
		}
		u->cursor += n;
	} else if (u->ready && sync_due(u) && u->sync_sent < u->cursor + u->sync_bias) {
		ev = NULL; /* only the sync: the events went before a barrier came */
	} else {
		return true;
	}
	if (sync_due(u))
		u->sync_sent = sync = u->cursor + u->sync_bias;
	u->busy = true;
	r = u->ops->deliver(u, ev, n, sync, u->arg);
	if (r < 0) {
		sub_free(u);
		return false;
	}
	if (n && ev != &one)
		log_trim(w);
	return true;
}

static void pump_all(struct watcher *w)
{
	for (struct watch_sub *u = w->subs, *nx; u; u = nx) {
		nx = u->next;
		pump(u);
	}
}

static void maybe_whole(struct watcher *w);

/*
 * End of a loop callback's work: stage OVERFLOW if the stream is whole again
 * (maybe_whole); commit the stage when no move waits for its second half
 * (else, and while displaced directories wait for theirs, the pair timer
 * runs); deliver.
 */
static void flush(struct watcher *w)
{
	struct wsession *s = w->s;

	maybe_whole(w);
	if (s && (s->npend || s->ndisp) && !w->pair_armed) {
		uv_timer_start(&w->pair_timer, on_pair_timer, w->cfg.pair_ms, 0);
		w->pair_armed = true;
	}
	if (!s || !s->npend)
		commit(w);
	pump_all(w);
	barriers_check(w, false);
}

/* ---- watching directories ---- */

/*
 * A directory that exists is left unwatched: its changes go unreported, so
 * the session is partial (READY and OVERFLOW say so, and clients keep to
 * short cache timeouts) until every such directory is watched (maybe_whole;
 * never after the watch limit was hit) or a rebuild. The OVERFLOW goes out
 * when it becomes so: clients that know already would only drop their
 * caches.
 */
static void set_partial(struct watcher *w)
{
	if (w->s && !w->s->partial) {
		w->s->partial = true;
		stage_add(w, WATCH_OVERFLOW, false, NULL, 0, NULL, 0);
	}
}

/*
 * Every directory is watched again: the failed ones were retried with
 * success (or went away), no failure came for a whole retry period
 * (s->quiet: while EMFILE lasts, directories that fail and go away must not
 * flip the stream to whole and back, each flip an OVERFLOW that drops every
 * client's caches), and no limit was hit. OVERFLOW, now without partial,
 * lets clients drop what they cached while the stream was partial and go
 * back to long timeouts.
 */
static void maybe_whole(struct watcher *w)
{
	struct wsession *s = w->s;

	if (!s || !s->partial || !s->quiet || s->limited || s->nfailed || s->scan_head ||
	    !s->ready)
		return;
	s->partial = false;
	s->quiet = false;
	s->whole_at = uv_now(w->loop);
	stage_add(w, WATCH_OVERFLOW, false, NULL, 0, NULL, 0);
	if (w->warned_failed) {
		w->warned_failed = false; /* warn again at the next failure */
		wsb_info("watch: every directory is watched again");
	}
}

/* Directory @p n could not be watched or listed (@p err: errno):
 * set_partial(); retry it later (fail_add); warn once, naming it. */
static void watch_failed(struct watcher *w, struct wnode *n, int err)
{
	set_partial(w);
	if (w->s) {
		w->s->failed_since_retry = true;
		w->s->quiet = false;
		fail_add(w->s, n);
	}
	if (!w->warned_failed && w->s) {
		size_t pl = 0;
		char *p = node_path(w->s, n, NULL, 0, &pl);
		char *esc = p ? wsb_escape(p, pl, 200) : NULL;

		w->warned_failed = true;
		wsb_warn("watch: cannot watch directory '%s' (%s): changes in it are not "
			 "reported until it can be watched (retried every minute at most); "
			 "clients fall back to short cache timeouts",
			 esc ? esc : "?", strerror(err));
		free(esc);
		free(p);
	}
}

/* The watch limit was reached: set_partial(); warn once. */
static void watch_limit_hit(struct watcher *w, int err)
{
	w->limit_hits++;
	set_partial(w);
	if (w->s)
		w->s->limited = true;
	if (!w->warned_watches) {
		w->warned_watches = true;
		if (err == ENOSPC) {
			long v = read_sysctl("/proc/sys/fs/inotify/max_user_watches");

			wsb_warn("watch: the inotify watch limit is reached "
				 "(fs.inotify.max_user_watches = %ld, shared by every process of "
				 "this user): changes in directories beyond it are not reported. "
				 "Raise it on the node, e.g. sysctl -w "
				 "fs.inotify.max_user_watches=524288",
				 v);
		} else {
			wsb_warn("watch: the limit of %u watched directories is reached: changes "
				 "in directories beyond it are not reported",
				 w->cfg.max_watches);
		}
	}
}

/* openat(@p dirfd, ".") with @p flags; without O_NOATIME where it is
 * refused (EPERM: agentd owns not the directory and has no CAP_FOWNER,
 * open(2)). Returns the fd or -errno. */
static int open_dot(int dirfd, int flags)
{
	int fd = openat(dirfd, ".", flags | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 && (flags & O_NOATIME) && (errno == EPERM || errno == EINVAL))
		fd = openat(dirfd, ".", (flags & ~O_NOATIME) | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/*
 * Open directory node @p n with @p flags, component by component from the
 * root fd, never following a symlink. Returns the fd or -errno.
 */
static int node_open(const struct wsession *s, const struct wnode *n, int flags)
{
	long depth = node_depth(s, n);
	const struct wnode **chain;
	int fd, nfd;

	if (depth < 0)
		return -ENOENT;
	if (depth == 0)
		return open_dot(s->w->root_fd, flags);
	chain = malloc((size_t)depth * sizeof(*chain));
	if (!chain)
		return -ENOMEM;
	for (long i = depth - 1; i >= 0; i--, n = n->parent)
		chain[i] = n;
	fd = s->w->root_fd;
	/*
	 * Every component, the last one too, with O_PATH | O_NOFOLLOW: gVisor
	 * (runsc 20221219) follows a final symlink on openat(O_RDONLY |
	 * O_DIRECTORY | O_NOFOLLOW), which could lead outside the root
	 * (docs/gvisor.md). The last one is then reopened as "." of itself.
	 */
	for (long i = 0; i < depth; i++) {
		nfd = openat(fd, chain[i]->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0)
			nfd = -errno;
		if (fd != s->w->root_fd)
			close(fd);
		if (nfd < 0) {
			free(chain);
			return nfd;
		}
		fd = nfd;
	}
	free(chain);
	if (flags & O_PATH)
		return fd;
	nfd = open_dot(fd, flags);
	close(fd);
	return nfd;
}

/*
 * Add the inotify watch of node @p n whose directory is open as @p fd.
 * Returns the wd, or -errno (-ENOSPC at the limit).
 */
static int add_watch(struct wsession *s, struct wnode *n, int fd)
{
	struct watcher *w = s->w;
	char p[64];
	int wd;

	if (w->cfg.max_watches && s->watches >= w->cfg.max_watches)
		return -EDQUOT; /* our own limit; reported like ENOSPC */
	if (s->use_proc) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		wd = inotify_add_watch(s->fd, p, WATCH_MASK);
		if (wd >= 0 || errno != ENOENT || !w->root_path)
			return wd >= 0 ? wd : -errno;
		s->use_proc = false; /* no /proc after all */
	}
	if (!w->root_path)
		return -ENOENT;
	{
		size_t rl = strlen(w->root_path), pl = 0;
		char *rel = node_path(s, n, NULL, 0, &pl), *abs;

		if (!rel)
			return -ENOMEM;
		abs = malloc(rl + pl + 2);
		if (!abs) {
			free(rel);
			return -ENOMEM;
		}
		memcpy(abs, w->root_path, rl);
		abs[rl] = '/';
		memcpy(abs + rl + 1, rel, pl + 1);
		wd = inotify_add_watch(s->fd, abs, WATCH_MASK | IN_DONT_FOLLOW);
		if (wd < 0)
			wd = -errno;
		free(abs);
		free(rel);
	}
	return wd;
}

static bool dirent_is_dir(int dfd, const struct dirent *de)
{
	struct stat st;

	if (de->d_type != DT_UNKNOWN)
		return de->d_type == DT_DIR;
	return fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/*
 * Watch directory @p n and list it: subdirectories become nodes queued for
 * their own walk; with n->scan_emit every entry is staged as CREATED.
 */
/*
 * Can agentd search directory @p n (look names up in it)? A directory it
 * can neither read nor search (lost+found, mode 0700 root's, under a
 * non-root agentd) hides nothing from agentd's clients when unwatched:
 * every call on a path below it fails with EACCES. Resolving "." inside it
 * needs search permission (path_resolution(7)).
 */
static bool node_searchable(const struct wsession *s, const struct wnode *n)
{
	int fd = node_open(s, n, O_PATH);
	struct stat st;
	bool ok;

	if (fd < 0)
		return false;
	ok = fstatat(fd, ".", &st, 0) == 0;
	close(fd);
	return ok;
}

/* Is the directory at node @p o's path the one open as @p fd? (Not when
 * nothing is there: a rename of a parent, its events unread, may have
 * moved what is there; a walk that finds nothing costs little.) */
static bool same_dir(const struct wsession *s, const struct wnode *o, int fd)
{
	struct stat a, b;
	int ofd = node_open(s, o, O_PATH);
	bool same;

	if (ofd < 0)
		return false;
	same = fstat(ofd, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
	close(ofd);
	return same;
}

static void scan_dir(struct wsession *s, struct wnode *n)
{
	struct watcher *w = s->w;
	bool emit = n->scan_emit;
	struct dirent *de;
	DIR *d;
	int fd, wd;

	scan_dequeue(s, n);
	/* Not an access of the directory: with relatime, the walk of one the
	 * mount or the pod had just made moved its atime past its mtime, as
	 * no read on a local disk would have. */
	fd = node_open(s, n, O_RDONLY | O_NONBLOCK | O_NOATIME);
	if (fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP ||
	    (fd == -EACCES && !node_searchable(s, n))) {
		/* Gone or moved already: its parent reports that, and a rename
		 * of it or of a parent walks it again (requeue_unwatched). (A
		 * node can also be left at a name where nothing is, with no
		 * event to come: it must not keep the stream partial.) Or
		 * nothing in it is reachable by agentd: nothing to miss. */
		fail_remove(s, n);
		return;
	}
	if (fd < 0) {
		watch_failed(w, n, -fd); /* EMFILE, EACCES, ...: it is there, unwatched */
		return;
	}
	if (n->wd < 0) {
		wd = add_watch(s, n, fd);
		if (wd == -ENOSPC || wd == -EDQUOT) {
			watch_limit_hit(w, -wd);
			fail_remove(s, n); /* partial for good: no use retrying */
			close(fd);
			return;
		}
		if (wd < 0) {
			if (wd != -ENOENT && wd != -ENOTDIR && wd != -ELOOP &&
			    !(wd == -EACCES && !node_searchable(s, n)))
				watch_failed(w, n, -wd);
			else
				fail_remove(s, n); /* gone, or unreachable: as above */
			close(fd);
			return;
		}
		{
			struct wnode *o = wd_lookup(s, wd);

			/* The same inode under another node: the directory moved
			 * and the events saying so are still queued, or o's walk
			 * opened it after a rename had put it at o's name (a
			 * directory renamed away and another made at its name
			 * before o's walk). o is stale; its watches are shared
			 * with this subtree. A different directory at o's name
			 * now is walked as new (not this one again: a bind
			 * mount shows it at both names, and each walk would
			 * undo the other's). */
			if (o && o != n) {
				struct wnode *op = o->parent;
				char *oname = NULL;
				size_t olen = o->name_len;

				for (struct wnode *a = n->parent; a; a = a->parent) {
					if (a == o) {
						close(fd);
						return; /* a bind mount looping back: never */
					}
				}
				if (op && !same_dir(s, o, fd))
					oname = memdup0(o->name, olen);
				else
					op = NULL;
				node_free_tree(s, o, false);
				if (op && (!oname || !node_add_child(s, op, oname, olen, true)))
					w->lost = true;
				free(oname);
			}
		}
		n->wd = wd;
		wd_grow(s);
		{
			size_t b = wd_bucket(s, wd);

			n->wd_next = s->wd_tab[b];
			s->wd_tab[b] = n;
			s->wd_count++;
		}
		s->watches++;
	}
	d = fdopendir(fd);
	if (!d) {
		watch_failed(w, n, errno); /* watched, but its entries unknown */
		close(fd);
		return;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno && errno != ENOENT) {
				watch_failed(w, n, errno);
			} else {
				n->listed = !errno;
				fail_remove(s, n); /* listed, or removed meanwhile */
			}
			break;
		}
		size_t len = strlen(de->d_name);
		bool is_dir;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		is_dir = dirent_is_dir(dirfd(d), de);
		if (emit) {
			long idx = stage_entry(w, WATCH_CREATED, n, de->d_name, len, is_dir);

			/* What happened to it before the watch began is
			 * unknown: it may have changed since it was made. */
			if (idx >= 0)
				w->stage[idx].changed = true;
			walked_add(s, n, de->d_name, len);
		}
		if (is_dir) {
			struct wnode *c = pn_lookup(s, n, de->d_name, len);

			if (!c)
				c = node_add_child(s, n, de->d_name, len, emit);
			else if (c->wd < 0)
				scan_enqueue(s, c, emit);
			if (!c)
				w->lost = true;
		}
	}
	closedir(d);
}

/*
 * Walk every directory of @p n's subtree (@p n too) that has no watch or
 * was never listed whole, as new: a walk that found it gone because it or a
 * parent had just been renamed (the rename's events not yet read) left it
 * so, and @p n was just renamed. Iterative, like node_free_tree().
 */
static void requeue_unwatched(struct wsession *s, struct wnode *n)
{
	struct wnode *c = n;

	for (;;) {
		if (c->wd < 0 || !c->listed)
			scan_enqueue(s, c, true);
		if (c->first_child) {
			c = c->first_child;
			continue;
		}
		while (c != n && !c->next_sib)
			c = c->parent;
		if (c == n)
			return;
		c = c->next_sib;
	}
}

static void on_ready(struct watcher *w)
{
	w->s->ready = true;
	for (struct watch_sub *u = w->subs; u; u = u->next) {
		u->cursor = log_end(w);
		if (u->ready) {
			u->need_overflow = true; /* after a rebuild */
			ack_reset(u);            /* as sub_overflow() */
		} else {
			u->ready = true;
			u->need_ready = true;
		}
	}
	log_trim(w);
}

static void on_idle(uv_idle_t *h)
{
	struct watcher *w = h->data;
	struct wsession *s = w->s;

	if (!s) {
		uv_idle_stop(h);
		return;
	}
	for (unsigned i = 0; i < w->cfg.walk_dirs && s->scan_head; i++)
		scan_dir(s, s->scan_head);
	if (!s->scan_head) {
		uv_idle_stop(h);
		if (!s->ready)
			on_ready(w);
	}
	flush(w);
}

/* ---- inotify events ---- */

static struct pending_move *pend_find(struct wsession *s, uint32_t cookie)
{
	for (size_t i = 0; i < s->npend; i++)
		if (s->pend[i].cookie == cookie)
			return &s->pend[i];
	return NULL;
}

static void pend_remove(struct wsession *s, struct pending_move *p)
{
	*p = s->pend[--s->npend];
}

/* An unpaired IN_MOVED_FROM: it stays DELETED; a directory leaves the tree. */
static void pend_expire_all(struct wsession *s)
{
	while (s->npend) {
		struct wnode *n = s->pend[s->npend - 1].node;

		s->npend--;
		if (n)
			node_free_tree(s, n, true);
	}
}

static void on_moved_from(struct wsession *s, struct wnode *dir, const char *name, size_t len,
			  bool is_dir, uint32_t cookie)
{
	struct watcher *w = s->w;
	struct wnode *c = NULL;
	long idx = stage_entry(w, WATCH_DELETED, dir, name, len, is_dir);

	if (is_dir) {
		/* the displaced one first: the second half of an exchange */
		c = disp_take(s, dir, name, len);
		if (!c)
			c = pn_lookup(s, dir, name, len);
	}
	if (idx < 0 || cookie == 0) {
		if (c)
			node_free_tree(s, c, true);
		return;
	}
	if (s->npend == s->pend_cap) {
		size_t ncap = s->pend_cap ? s->pend_cap * 2 : 8;
		struct pending_move *np = realloc(s->pend, ncap * sizeof(*np));

		if (!np) {
			if (c)
				node_free_tree(s, c, true);
			return;
		}
		s->pend = np;
		s->pend_cap = ncap;
	}
	if (c)
		node_detach(s, c);
	s->pend[s->npend++] = (struct pending_move){cookie, (size_t)idx, c};
}

/*
 * The second half of a rename into @p dir. Returns false when the tree is
 * inconsistent: the moved directory's node is @p dir or one of its parents,
 * which happens only after a walk gave a node the watch of another
 * directory (one renamed onto its name before the walk opened it, and the
 * events saying so not yet read). Attaching it would make a cycle; the
 * caller rebuilds instead.
 */
static bool on_moved_to(struct wsession *s, struct wnode *dir, const char *name, size_t len,
			bool is_dir, uint32_t cookie)
{
	struct watcher *w = s->w;
	struct pending_move *p = cookie ? pend_find(s, cookie) : NULL;
	struct watch_event *e;
	size_t pl = 0;
	char *path;

	if (!p) {
		stage_entry(w, WATCH_CREATED, dir, name, len, is_dir);
		if (is_dir && !node_add_child(s, dir, name, len, true))
			w->lost = true;
		return true;
	}
	for (const struct wnode *a = dir; p->node && a; a = a->parent)
		if (a == p->node)
			return false;
	path = node_path(s, dir, name, len, &pl);
	e = &w->stage[p->stage_idx];
	if (path) {
		/* the staged DELETED of the old name becomes MOVED old -> new */
		e->kind = WATCH_MOVED;
		e->from = e->path;
		e->from_len = e->path_len;
		e->path = path;
		e->path_len = pl;
		cset_put(w, p->stage_idx);
	}
	if (p->node) {
		struct wnode *n = p->node;

		p->node = NULL;
		if (node_attach(s, n, dir, name, len) < 0) {
			node_free_tree(s, n, true);
			w->lost = true;
		} else {
			/* Moved before its walk (or a walk below it) could
			 * open it: walk those under the new name, reporting
			 * what is in them. */
			requeue_unwatched(s, n);
		}
	} else if (is_dir && !pn_lookup(s, dir, name, len)) {
		/* its node was lost (a stale duplicate): walk it anew */
		if (!node_add_child(s, dir, name, len, true))
			w->lost = true;
	}
	pend_remove(s, p);
	return true;
}

/*
 * The kernel's event queue overflowed (@p why NULL), or the tree cannot be
 * trusted (@p why says why): tell everyone now, rebuild the instance, walk
 * again (on_ready then sends OVERFLOW once more).
 */
static void resync(struct watcher *w, const char *why)
{
	int r;

	w->resyncs++;
	if (why) {
		wsb_info("watch: %s; rescanning the workspace", why);
	} else if (!w->warned_queue) {
		w->warned_queue = true;
		wsb_warn("watch: the inotify event queue overflowed "
			 "(fs.inotify.max_queued_events = %ld); rescanning the workspace. If this "
			 "recurs, raise it on the node, e.g. sysctl -w "
			 "fs.inotify.max_queued_events=65536",
			 read_sysctl("/proc/sys/fs/inotify/max_queued_events"));
	}
	session_stop(w);
	for (struct watch_sub *u = w->subs; u; u = u->next)
		if (u->ready)
			sub_overflow(w, u);
	log_trim(w);
	r = session_start(w);
	if (r < 0) {
		wsb_err("watch: cannot restart watching: %s", strerror(-r));
		while (w->subs) {
			struct watch_sub *u = w->subs;

			u->ops->end(u, r, u->arg);
			sub_free(u);
		}
	}
}

/* Returns false when the session was replaced (stop processing its buffer). */
static bool handle_event(struct wsession *s, const struct inotify_event *ev)
{
	struct watcher *w = s->w;
	bool is_dir = ev->mask & IN_ISDIR;
	struct wnode *n;
	size_t len;

	if (ev->mask & IN_Q_OVERFLOW) {
		resync(w, NULL);
		return false;
	}
	n = wd_lookup(s, ev->wd);
	if (!n)
		return true; /* a watch already dropped */
	if (ev->mask & (IN_IGNORED | IN_UNMOUNT)) {
		if (n == s->root) {
			if (!s->root_gone) {
				s->root_gone = true;
				wsb_warn("watch: the workspace root was removed or unmounted");
				stage_add(w, WATCH_OVERFLOW, false, NULL, 0, NULL, 0);
			}
			return true;
		}
		if (ev->mask & IN_IGNORED) {
			struct wnode *p = n->parent;
			char *name = p ? memdup0(n->name, n->name_len) : NULL;
			size_t nl = n->name_len;

			wd_unhash(s, n);
			n->wd = -1;
			s->watches--;
			node_free_tree(s, n, true);
			/*
			 * Its directory is gone (IN_DELETE_SELF: the parent's
			 * IN_DELETE, which comes next, finds nothing to free) or
			 * unmounted. But the node may have watched a directory
			 * that had been renamed away, with another put at its
			 * name, before its walk: so what is at its name now is
			 * walked as new. A removed directory's IN_DELETE is
			 * almost always read in the same batch and drops this
			 * node before its walk; else the walk finds ENOENT.
			 */
			if (p && (!name || !node_add_child(s, p, name, nl, true)))
				w->lost = true;
			free(name);
		}
		return true;
	}
	len = ev->len ? strnlen(ev->name, ev->len) : 0;
	if (len == 0) {
		/* About the directory itself: its parent reports the same with a
		 * name, except for the root. */
		if (n == s->root && (ev->mask & IN_ATTRIB))
			stage_add(w, WATCH_CHANGED, true, memdup0("", 0), 0, NULL, 0);
		return true;
	}
	if ((ev->mask & IN_CREATE) && walked_take(s, n, ev->name, len)) {
		/* Reported by the walk already (struct walked); a directory
		 * has its node from it. */
	} else if (ev->mask & IN_CREATE) {
		stage_entry(w, WATCH_CREATED, n, ev->name, len, is_dir);
		if (is_dir && !node_add_child(s, n, ev->name, len, true))
			w->lost = true;
	} else if (ev->mask & IN_DELETE) {
		walked_take(s, n, ev->name, len);
		stage_entry(w, WATCH_DELETED, n, ev->name, len, is_dir);
		if (is_dir) {
			struct wnode *c = pn_lookup(s, n, ev->name, len);

			if (c)
				node_free_tree(s, c, true);
		}
	} else if (ev->mask & IN_MOVED_FROM) {
		walked_take(s, n, ev->name, len);
		on_moved_from(s, n, ev->name, len, is_dir, ev->cookie);
	} else if (ev->mask & IN_MOVED_TO) {
		walked_take(s, n, ev->name, len);
		if (!on_moved_to(s, n, ev->name, len, is_dir, ev->cookie)) {
			resync(w, "a directory was renamed into itself as agentd saw the tree "
				  "(a rename raced with its walk)");
			return false;
		}
	} else if (ev->mask & (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE)) {
		stage_entry(w, WATCH_CHANGED, n, ev->name, len, is_dir);
		if (is_dir && (ev->mask & IN_ATTRIB)) {
			/* a chmod may have made a failed directory readable */
			struct wnode *c = pn_lookup(s, n, ev->name, len);

			if (c && c->failed)
				scan_enqueue(s, c, false);
		}
	}
	return true;
}

static void read_events(struct wsession *s);
static void on_read_delay(uv_timer_t *t);

/*
 * The inotify fd is readable. Wait watch_config.read_delay_ms before reading
 * it (the poll stopped meanwhile): one file written through agentd makes
 * three events (IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE) a few hundred
 * microseconds apart, and reading each at once woke the loop thread, and
 * sent a batch, three times per file.
 */
static void on_inotify(uv_poll_t *h, int status, int events)
{
	struct wsession *s = h->data;
	struct watcher *w = s->w;

	(void)events;
	if (status < 0) {
		wsb_warn("watch: polling the inotify fd failed: %s", uv_strerror(status));
		resync(w, "polling the inotify fd failed");
		flush(w);
		return;
	}
	if (w->cfg.read_delay_ms == WATCH_READ_AT_ONCE) {
		read_events(s);
		return;
	}
	uv_poll_stop(&s->poll);
	uv_timer_start(&w->read_delay, on_read_delay, w->cfg.read_delay_ms, 0);
}

static void on_read_delay(uv_timer_t *t)
{
	struct watcher *w = t->data;

	if (w->s) {
		uv_poll_start(&w->s->poll, UV_READABLE, on_inotify);
		read_events(w->s);
	}
}

/* Read and handle the events the kernel has queued (a bounded amount: the
 * poll is level-triggered), then commit and deliver them. */
static void read_events(struct wsession *s)
{
	struct watcher *w = s->w;

	for (int k = 0; k < READS_PER_WAKEUP; k++) {
		ssize_t n = read(s->fd, w->rbuf, READ_BUF_BYTES);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			walked_clear(s); /* read dry: no IN_CREATE a walk saw is left */
		if (n <= 0)
			break; /* EAGAIN: drained */
		while (off + sizeof(struct inotify_event) <= (size_t)n) {
			const struct inotify_event *ev = (const void *)(w->rbuf + off);
			size_t sz = sizeof(*ev) + ev->len;

			if (sz > (size_t)n - off)
				break; /* never happens: the kernel writes whole events */
			off += sz;
			if (!handle_event(s, ev)) {
				flush(w);
				return;
			}
		}
	}
	flush(w);
}

static void on_pair_timer(uv_timer_t *t)
{
	struct watcher *w = t->data;

	w->pair_armed = false;
	if (w->s) {
		pend_expire_all(w->s);
		disp_free_all(w->s, true); /* no exchange's second half came */
	}
	flush(w);
}

/*
 * The retry timer: walk the failed directories again, then wait twice as
 * long (at most RETRY_MAX_MS) before the next try. Once a whole period has
 * passed without a failure and none is left, the stream may be whole again
 * (maybe_whole) and the timer stops; the next failure starts it with the
 * period reached, so a failure that keeps coming back flips the stream at
 * most once per period.
 */
static void on_retry(uv_timer_t *t)
{
	struct watcher *w = t->data;
	struct wsession *s = w->s;

	if (!s)
		return;
	if (!s->fail_head && !s->failed_since_retry) {
		s->quiet = true;
		flush(w); /* maybe_whole */
		return;
	}
	s->failed_since_retry = false;
	for (struct wnode *n = s->fail_head; n; n = n->fail_next)
		scan_enqueue(s, n, false); /* clients are on short timeouts */
	s->retry_ms = s->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : s->retry_ms * 2;
	uv_timer_start(&w->retry, on_retry, s->retry_ms, 0);
}

/* ---- sessions ---- */

static void session_closed(uv_handle_t *h)
{
	struct wsession *s = h->data;
	struct watcher *w = s->w;

	free(s);
	if (--w->closing == 0 && w->free_pending)
		watch_free(w);
}

static void session_stop(struct watcher *w)
{
	struct wsession *s = w->s;

	if (!s)
		return;
	w->s = NULL;
	while (s->npend) {
		struct wnode *n = s->pend[--s->npend].node;

		if (n)
			node_free_tree(s, n, false);
	}
	disp_free_all(s, false);
	node_free_tree(s, s->root, false);
	free(s->pend);
	free(s->disp);
	free(s->wd_tab);
	free(s->pn_tab);
	walked_clear(s);
	stage_clear(w);
	w->lost = false;
	uv_idle_stop(&w->idle);
	uv_timer_stop(&w->pair_timer);
	w->pair_armed = false;
	uv_timer_stop(&w->retry);
	uv_timer_stop(&w->read_delay);
	/* uv_close stops polling (epoll_ctl DEL) at once; then the fd may go. */
	uv_close((uv_handle_t *)&s->poll, session_closed);
	w->closing++;
	close(s->fd);
}

static int session_start(struct watcher *w)
{
	struct wsession *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->w = w;
	s->retry_ms = RETRY_FIRST_MS;
	s->wd_cap = s->pn_cap = 64;
	s->wd_tab = calloc(s->wd_cap, sizeof(*s->wd_tab));
	s->pn_tab = calloc(s->pn_cap, sizeof(*s->pn_tab));
	s->root = node_new("", 0);
	if (!s->wd_tab || !s->pn_tab || !s->root) {
		r = -ENOMEM;
		goto fail;
	}
	s->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (s->fd < 0) {
		r = -errno;
		if (r == -EMFILE)
			wsb_warn("watch: cannot create an inotify instance: the limit "
				 "fs.inotify.max_user_instances (%ld) or the fd limit is reached",
				 read_sysctl("/proc/sys/fs/inotify/max_user_instances"));
		goto fail;
	}
	s->use_proc = access("/proc/self/fd", X_OK) == 0 || !w->root_path;
	r = uv_poll_init(w->loop, &s->poll, s->fd);
	if (r < 0) {
		close(s->fd);
		goto fail;
	}
	s->poll.data = s;
	uv_poll_start(&s->poll, UV_READABLE, on_inotify);
	w->s = s;
	scan_enqueue(s, s->root, false);
	return 0;
fail:
	if (s->root)
		node_free_one(s, s->root, false);
	free(s->wd_tab);
	free(s->pn_tab);
	free(s);
	return r;
}

/* ---- deferred work ---- */

static void on_kick(uv_timer_t *t)
{
	struct watcher *w = t->data;

	if (!w->subs && w->s)
		session_stop(w);
	pump_all(w);
}

static void kick(struct watcher *w)
{
	if (!w->shut)
		uv_timer_start(&w->kick, on_kick, 0, 0);
}

/* ---- public API ---- */

static void handle_closed(uv_handle_t *h)
{
	struct watcher *w = h->data;

	if (--w->closing == 0 && w->free_pending)
		watch_free(w);
}

int watch_new(uv_loop_t *loop, const struct resolve_root *root, const char *root_path,
	      const struct watch_config *cfg, struct watcher **ret_w)
{
	struct watcher *w;

	if (!loop || !root)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->rbuf = malloc(READ_BUF_BYTES);
	w->root_path = root_path ? strdup(root_path) : NULL;
	if (!w->rbuf || (root_path && !w->root_path)) {
		free(w->rbuf);
		free(w->root_path);
		free(w);
		return -ENOMEM;
	}
	w->loop = loop;
	w->root_fd = root->fd;
	if (cfg)
		w->cfg = *cfg;
	if (!w->cfg.max_queue)
		w->cfg.max_queue = WATCH_MAX_QUEUE_DEFAULT;
	if (!w->cfg.batch_bytes)
		w->cfg.batch_bytes = WATCH_BATCH_BYTES_DEFAULT;
	if (!w->cfg.pair_ms)
		w->cfg.pair_ms = WATCH_PAIR_MS_DEFAULT;
	if (!w->cfg.walk_dirs)
		w->cfg.walk_dirs = WATCH_WALK_DIRS_DEFAULT;
	if (!w->cfg.read_delay_ms)
		w->cfg.read_delay_ms = WATCH_READ_DELAY_MS_DEFAULT;
	uv_timer_init(loop, &w->pair_timer);
	uv_timer_init(loop, &w->kick);
	uv_timer_init(loop, &w->retry);
	uv_timer_init(loop, &w->read_delay);
	uv_timer_init(loop, &w->bar_timer);
	uv_idle_init(loop, &w->idle);
	w->pair_timer.data = w->kick.data = w->retry.data = w->read_delay.data = w->idle.data = w;
	w->bar_timer.data = w;
	*ret_w = w;
	return 0;
}

int watch_subscribe(struct watcher *w, const struct watch_sub_ops *ops, void *arg,
		    struct watch_sub **ret_sub)
{
	struct watch_sub *u;
	int r;

	if (w->shut)
		return -ESHUTDOWN;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	if (!w->s) {
		r = session_start(w);
		if (r < 0) {
			free(u);
			return r;
		}
	}
	u->w = w;
	u->ops = ops;
	u->arg = arg;
	u->sync_bias = 1; /* a sync is never 0 (WatchBatch.sync) */
	u->acked = u->sync_bias; /* as if of position 0: nothing is before it */
	u->next = w->subs;
	if (w->subs)
		w->subs->prev = u;
	w->subs = u;
	w->nsubs++;
	if (w->s->ready) {
		u->ready = true;
		u->need_ready = true;
		u->cursor = log_end(w);
	}
	kick(w);
	*ret_sub = u;
	return 0;
}

void watch_sub_done(struct watch_sub *u)
{
	struct watcher *w = u->w;

	u->busy = false;
	pump(u); /* may free u */
	barriers_check(w, false);
}

/* ---- barriers ---- */

/* Whether every subscriber that reads the log has finished @b's events. */
static bool barrier_met(const struct watcher *w, const struct watch_barrier *b)
{
	if (b->await_commit)
		return false;
	if (!w->s)
		return true; /* not watching */
	for (const struct watch_sub *u = w->subs; u; u = u->next) {
		if (!u->ready)
			continue; /* it gets READY later, after every change so far */
		if (!w->s->ready)
			return false; /* a rebuild's walk: OVERFLOW follows it (or the time limit) */
		if (u->need_overflow || (u->acks ? !ack_met(u, b) :
						   u->cursor < b->target || u->busy))
			return false;
	}
	return true;
}

static void barrier_unlink(struct watch_barrier *b)
{
	struct watcher *w = b->w;

	if (b->prev)
		b->prev->next = b->next;
	else
		w->barriers = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->next = b->prev = NULL;
}

static void on_bar_timer(uv_timer_t *t)
{
	barriers_check(t->data, false);
}

/*
 * Call back the barriers that are met, past their deadline, or (@all)
 * every one. They are taken off the list first and called last: a
 * callback may add or cancel barriers, and call into the watcher.
 */
static void barriers_check(struct watcher *w, bool all)
{
	struct watch_barrier *fire = NULL, **tail = &fire;
	uint64_t now = uv_now(w->loop), next = UINT64_MAX;

	for (struct watch_barrier *b = w->barriers, *nx; b; b = nx) {
		nx = b->next;
		if (b->arming && !all)
			continue;
		if (all || now >= b->deadline_ms || barrier_met(w, b)) {
			barrier_unlink(b);
			b->firing = true;
			*tail = b;
			tail = &b->next;
		} else if (b->deadline_ms < next) {
			next = b->deadline_ms;
		}
	}
	if (!w->shut) {
		if (next != UINT64_MAX)
			uv_timer_start(&w->bar_timer, on_bar_timer, next - now, 0);
		else
			uv_timer_stop(&w->bar_timer);
	}
	while (fire) {
		/* Read now: an earlier callback may have cancelled it. */
		struct watch_barrier *b = fire;
		watch_barrier_fn done = b->cancelled ? NULL : b->done;
		void *arg = b->arg;

		fire = b->next;
		free(b);
		if (done)
			done(arg);
	}
}

int watch_barrier(struct watcher *w, unsigned timeout_ms, watch_barrier_fn done, void *arg,
		  struct watch_barrier **ret)
{
	struct watch_barrier *b;

	*ret = NULL;
	if (!w || w->shut || !w->s || !w->subs)
		return 0;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->w = w;
	b->await_commit = true; /* what the read below commits (commit()) */
	b->arming = true;
	b->done = done;
	b->arg = arg;
	b->next = w->barriers;
	if (w->barriers)
		w->barriers->prev = b;
	w->barriers = b;
	/* What the kernel has queued, now: read, commit, deliver, the batch
	 * to a subscriber that acknowledges with a sync (sync_due()). */
	read_events(w->s);
	if (!w->s) {
		/* The read ended the session (a failure: resync, and an
		 * OVERFLOW to every subscriber). */
		barrier_unlink(b);
		free(b);
		return 0;
	}
	if (b->await_commit && !w->stage_len) {
		b->await_commit = false;
		b->target = log_end(w);
	} /* else a move waits for its pair: set at that commit */
	/* One that acknowledges and has nothing out gets a sync now, of no
	 * events if it was handed them before. */
	pump_all(w);
	b->arming = false;
	if (barrier_met(w, b)) {
		barrier_unlink(b);
		free(b);
		return 0;
	}
	uv_update_time(w->loop);
	b->deadline_ms = uv_now(w->loop) + timeout_ms;
	if (!uv_is_active((uv_handle_t *)&w->bar_timer) ||
	    uv_timer_get_due_in(&w->bar_timer) > timeout_ms)
		uv_timer_start(&w->bar_timer, on_bar_timer, timeout_ms, 0);
	*ret = b;
	return 1;
}

void watch_sub_acks(struct watch_sub *u)
{
	u->acks = true;
}

int watch_sub_ack(struct watch_sub *u, uint64_t sync)
{
	if (sync > u->sync_sent)
		return -EINVAL;
	if (sync < u->ack_floor)
		return 0; /* a batch's from before the reset: the OVERFLOW's is due */
	if (sync > u->acked) {
		u->acked = sync;
		barriers_check(u->w, false);
	}
	return 0;
}

void watch_barrier_cancel(struct watch_barrier *b)
{
	if (!b)
		return;
	if (b->firing) {
		b->cancelled = true; /* barriers_check() frees it */
		return;
	}
	barrier_unlink(b);
	free(b);
}

void watch_unsubscribe(struct watch_sub *u)
{
	if (u)
		sub_free(u);
}

void watch_shutdown(struct watcher *w)
{
	if (!w || w->shut)
		return;
	w->shut = true;
	barriers_check(w, true);
	while (w->subs) {
		struct watch_sub *u = w->subs;

		u->ops->end(u, 0, u->arg);
		sub_free(u);
	}
	session_stop(w);
	for (size_t i = w->log_head; i < w->log_len; i++)
		event_free(&w->log[i]);
	w->log_head = w->log_len = 0;
	uv_close((uv_handle_t *)&w->pair_timer, handle_closed);
	uv_close((uv_handle_t *)&w->kick, handle_closed);
	uv_close((uv_handle_t *)&w->retry, handle_closed);
	uv_close((uv_handle_t *)&w->read_delay, handle_closed);
	uv_close((uv_handle_t *)&w->idle, handle_closed);
	uv_close((uv_handle_t *)&w->bar_timer, handle_closed);
	w->closing += 6;
}

void watch_free(struct watcher *w)
{
	if (!w)
		return;
	watch_shutdown(w);
	if (w->closing) {
		w->free_pending = true;
		return;
	}
	stage_clear(w);
	free(w->stage);
	free(w->cset);
	free(w->log);
	free(w->rbuf);
	free(w->root_path);
	free(w);
}

void watch_get_stats(const struct watcher *w, struct watch_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->running = w->s != NULL;
	ret->ready = w->s && w->s->ready;
	ret->watches = w->s ? w->s->watches : 0;
	ret->subscribers = w->nsubs;
	ret->queued = w->log_len - w->log_head;
	ret->resyncs = w->resyncs;
	ret->sub_overflows = w->sub_overflows;
	ret->limit_hits = w->limit_hits;
	/* While a rebuild walks the tree, events are not reported either. */
	ret->partial = w->s && (w->s->partial || !w->s->ready);
}
