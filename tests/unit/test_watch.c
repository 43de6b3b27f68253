/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/watch.c on a real libuv loop and real inotify, on a
 * mkdtemp tree, without gRPC: a collecting subscriber stands in for the
 * Watch call (it acknowledges each batch on a later loop iteration, as
 * rpc_send's completion does).
 *
 * Covered: READY first; create/modify/delete/rename of files and
 * directories; a nested new directory whose entries were made before its
 * watch existed; a renamed directory reporting changes under its new name;
 * RENAME_EXCHANGE of two directories; a directory renamed over an empty one;
 * moves out of and into the root;
 * coalescing of changes; symlinks never followed; a slow subscriber skipped
 * ahead with OVERFLOW (tiny queue bound); the kernel queue overflowing
 * (rebuild, OVERFLOW); the watch limit; stop at the last unsubscribe;
 * shutdown ending every subscriber.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "watch.h"

struct ev {
	enum watch_kind kind;
	char *path;
	char *from;
	bool is_dir;
	bool changed;
};

struct collector {
	struct watch_sub *sub;
	struct ev *evs;
	size_t n, cap;
	size_t batches;
	size_t max_batch;   /* most events in one batch */
	bool manual;        /* do not acknowledge batches (a stalled client) */
	uint64_t sync;      /* the last batch's sync (watch_sub_acks()) */
	size_t syncs_empty; /* batches of only a sync */
	bool out;           /* a batch is unacknowledged */
	bool ended;
	int end_err;
	uv_timer_t ack;
};

struct fixture {
	uv_loop_t loop;
	char root_path[64];
	char out_path[64]; /* a directory outside the root */
	struct resolve_root root;
	struct watcher *w;
	struct collector c;
	uv_timer_t tick;
};

static const char *kind_name(enum watch_kind k)
{
	static const char *const n[] = {"CHANGED", "CREATED", "DELETED",
					"MOVED",   "OVERFLOW", "READY"};

	return (unsigned)k < 6 ? n[k] : "?";
}

/* ---- the collecting subscriber ---- */

static void on_ack(uv_timer_t *t)
{
	struct collector *c = t->data;

	if (c->out && !c->manual && c->sub) {
		c->out = false;
		watch_sub_done(c->sub);
	}
}

static int col_deliver(struct watch_sub *sub, const struct watch_event *e, size_t n,
		       uint64_t sync, void *arg)
{
	struct collector *c = arg;

	assert_ptr_equal(sub, c->sub);
	assert_false(c->out); /* one batch at a time */
	assert_true(n >= 1 || sync);
	if (sync) {
		assert_true(sync > c->sync);
		c->sync = sync;
		c->syncs_empty += n == 0;
	}
	for (size_t i = 0; i < n; i++) {
		struct ev *x;

		if (c->n == c->cap) {
			c->cap = c->cap ? c->cap * 2 : 64;
			c->evs = realloc(c->evs, c->cap * sizeof(*c->evs));
			assert_non_null(c->evs);
		}
		x = &c->evs[c->n++];
		x->kind = e[i].kind;
		assert_non_null(e[i].path);
		assert_int_equal(strlen(e[i].path), e[i].path_len);
		x->path = strdup(e[i].path);
		x->from = e[i].from ? strdup(e[i].from) : NULL;
		x->is_dir = e[i].is_dir;
		x->changed = e[i].changed;
		if (e[i].kind == WATCH_MOVED)
			assert_non_null(e[i].from);
	}
	c->batches++;
	if (n > c->max_batch)
		c->max_batch = n;
	c->out = true;
	uv_timer_start(&c->ack, on_ack, 0, 0);
	return 0;
}

static void col_end(struct watch_sub *sub, int err, void *arg)
{
	struct collector *c = arg;

	c->ended = true;
	c->end_err = err;
	c->sub = NULL;
}

static const struct watch_sub_ops col_ops = {col_deliver, col_end};

static void col_clear(struct collector *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->evs[i].path);
		free(c->evs[i].from);
	}
	c->n = 0;
}

static void col_dump(const struct collector *c)
{
	for (size_t i = 0; i < c->n; i++)
		print_message("  %s%s '%s'%s%s%s\n", kind_name(c->evs[i].kind),
			      c->evs[i].is_dir ? "(dir)" : "", c->evs[i].path,
			      c->evs[i].from ? " from '" : "", c->evs[i].from ? c->evs[i].from : "",
			      c->evs[i].from ? "'" : "");
}

/* Index of the first event of @p kind on @p path (and @p from if not NULL)
 * at or after @p start, or -1. */
static long col_find(const struct collector *c, size_t start, enum watch_kind kind,
		     const char *path, const char *from)
{
	for (size_t i = start; i < c->n; i++) {
		const struct ev *x = &c->evs[i];

		if (x->kind != kind || (path && strcmp(x->path, path) != 0))
			continue;
		if (from && (!x->from || strcmp(x->from, from) != 0))
			continue;
		return (long)i;
	}
	return -1;
}

static size_t col_count(const struct collector *c, enum watch_kind kind, const char *path)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++)
		if (c->evs[i].kind == kind && (!path || strcmp(c->evs[i].path, path) == 0))
			k++;
	return k;
}

/* ---- loop helpers ---- */

static void on_tick(uv_timer_t *t)
{
}

static uint64_t now_ms(struct fixture *f)
{
	uv_update_time(&f->loop);
	return uv_now(&f->loop);
}

/* Run the loop for @p ms milliseconds. */
static void run_for(struct fixture *f, unsigned ms)
{
	uint64_t end = now_ms(f) + ms;

	while (now_ms(f) < end)
		uv_run(&f->loop, UV_RUN_ONCE);
}

/* Run the loop until an event of @p kind on @p path arrives (then a little
 * more, so that what follows it in the same batch arrives too). */
static long wait_for(struct fixture *f, enum watch_kind kind, const char *path, const char *from)
{
	uint64_t end = now_ms(f) + 5000;
	long i;

	while ((i = col_find(&f->c, 0, kind, path, from)) < 0 && now_ms(f) < end)
		uv_run(&f->loop, UV_RUN_ONCE);
	if (i < 0) {
		print_message("no %s '%s' among:\n", kind_name(kind), path ? path : "*");
		col_dump(&f->c);
		fail();
	}
	run_for(f, 30);
	return i;
}

#define expect(f, kind, path) wait_for((f), (kind), (path), NULL)

/* ---- tree helpers ---- */

static void pathf(struct fixture *f, char *buf, size_t size, const char *rel)
{
	snprintf(buf, size, "%s/%s", f->root_path, rel);
}

static void mkdir_at(struct fixture *f, const char *rel)
{
	char p[512];

	pathf(f, p, sizeof(p), rel);
	assert_int_equal(mkdir(p, 0755), 0);
}

static void write_at(struct fixture *f, const char *rel, const char *data)
{
	char p[512];
	int fd;

	pathf(f, p, sizeof(p), rel);
	fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

static void rename_at(struct fixture *f, const char *a, const char *b)
{
	char p[512], q[512];

	pathf(f, p, sizeof(p), a);
	pathf(f, q, sizeof(q), b);
	assert_int_equal(rename(p, q), 0);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}

static void rm_rf(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- fixture ---- */

/* @p cfg may be NULL; a read_delay_ms of 0 means WATCH_READ_AT_ONCE here
 * (tests step the loop one turn at a time). */
static int setup_cfg(void **state, const struct watch_config *cfg_in)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct watch_config c = {0}, *cfg = &c;

	if (cfg_in)
		c = *cfg_in;
	if (!c.read_delay_ms)
		c.read_delay_ms = WATCH_READ_AT_ONCE;

	assert_non_null(f);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	strcpy(f->root_path, "/tmp/wsb-watch-XXXXXX");
	assert_non_null(mkdtemp(f->root_path));
	strcpy(f->out_path, "/tmp/wsb-watch-out-XXXXXX");
	assert_non_null(mkdtemp(f->out_path));
	assert_int_equal(resolve_root_open(f->root_path, &f->root), 0);
	assert_int_equal(watch_new(&f->loop, &f->root, f->root_path, cfg, &f->w), 0);
	uv_timer_init(&f->loop, &f->c.ack);
	f->c.ack.data = &f->c;
	uv_timer_init(&f->loop, &f->tick);
	uv_timer_start(&f->tick, on_tick, 5, 5); /* UV_RUN_ONCE returns at least this often */
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_cfg(state, NULL);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	watch_free(f->w);
	uv_close((uv_handle_t *)&f->c.ack, NULL);
	uv_close((uv_handle_t *)&f->tick, NULL);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle closed */
	close(f->root.fd);
	col_clear(&f->c);
	free(f->c.evs);
	rm_rf(f->root_path);
	rm_rf(f->out_path);
	free(f);
	return 0;
}

/* Subscribe and wait for READY, which must be the very first event. */
static void subscribe_ready(struct fixture *f)
{
	assert_int_equal(watch_subscribe(f->w, &col_ops, &f->c, &f->c.sub), 0);
	assert_int_equal(expect(f, WATCH_READY, ""), 0);
	col_clear(&f->c);
}

/* ---- tests ---- */

static void test_ready_first(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	mkdir_at(f, "a");
	mkdir_at(f, "a/b");
	write_at(f, "a/b/file", "x");
	watch_get_stats(f->w, &st);
	assert_false(st.running); /* lazy: nothing before the first subscriber */
	subscribe_ready(f);
	watch_get_stats(f->w, &st);
	assert_true(st.running);
	assert_true(st.ready);
	assert_int_equal(st.watches, 3); /* root, a, a/b */
	assert_int_equal(st.subscribers, 1);
	/* a second subscriber gets its own READY at once */
	{
		struct collector c2 = {0};

		uv_timer_init(&f->loop, &c2.ack);
		c2.ack.data = &c2;
		assert_int_equal(watch_subscribe(f->w, &col_ops, &c2, &c2.sub), 0);
		run_for(f, 30);
		assert_int_equal(c2.n, 1);
		assert_int_equal(c2.evs[0].kind, WATCH_READY);
		watch_unsubscribe(c2.sub);
		uv_close((uv_handle_t *)&c2.ack, NULL);
		run_for(f, 10);
		col_clear(&c2);
		free(c2.evs);
	}
	assert_int_equal(f->c.n, 0); /* nothing happened */
}

static void test_file_lifecycle(void **state)
{
	struct fixture *f = *state;
	char p[512];
	long i;

	subscribe_ready(f);
	write_at(f, "f", "hello");
	i = expect(f, WATCH_CREATED, "f");
	assert_false(f->c.evs[i].is_dir);
	col_clear(&f->c);

	write_at(f, "f", " world");
	expect(f, WATCH_CHANGED, "f");
	col_clear(&f->c);

	pathf(f, p, sizeof(p), "f");
	assert_int_equal(chmod(p, 0600), 0);
	expect(f, WATCH_CHANGED, "f");
	col_clear(&f->c);

	rename_at(f, "f", "g");
	i = expect(f, WATCH_MOVED, "g");
	assert_string_equal(f->c.evs[i].from, "f");
	assert_false(f->c.evs[i].is_dir);
	assert_int_equal(col_count(&f->c, WATCH_DELETED, NULL), 0);
	col_clear(&f->c);

	pathf(f, p, sizeof(p), "g");
	assert_int_equal(unlink(p), 0);
	expect(f, WATCH_DELETED, "g");
}

static void test_dir_lifecycle(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512];
	long i;

	subscribe_ready(f);
	mkdir_at(f, "d");
	i = expect(f, WATCH_CREATED, "d");
	assert_true(f->c.evs[i].is_dir);
	col_clear(&f->c);

	write_at(f, "d/x", "1");
	expect(f, WATCH_CREATED, "d/x");
	col_clear(&f->c);

	rename_at(f, "d", "e");
	i = expect(f, WATCH_MOVED, "e");
	assert_string_equal(f->c.evs[i].from, "d");
	assert_true(f->c.evs[i].is_dir);
	col_clear(&f->c);

	pathf(f, p, sizeof(p), "e/x");
	assert_int_equal(unlink(p), 0);
	expect(f, WATCH_DELETED, "e/x");
	pathf(f, p, sizeof(p), "e");
	assert_int_equal(rmdir(p), 0);
	i = expect(f, WATCH_DELETED, "e");
	assert_true(f->c.evs[i].is_dir);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 1); /* only the root is left */
}

static void test_nested_new_dir(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	subscribe_ready(f);
	/* all made before the loop runs: n1's entries exist before any watch
	 * on n1 can, so only the walk of n1 can find them */
	mkdir_at(f, "n1");
	mkdir_at(f, "n1/n2");
	mkdir_at(f, "n1/n2/n3");
	write_at(f, "n1/n2/n3/file", "x");
	write_at(f, "n1/top", "x");
	expect(f, WATCH_CREATED, "n1");
	expect(f, WATCH_CREATED, "n1/n2");
	expect(f, WATCH_CREATED, "n1/n2/n3");
	expect(f, WATCH_CREATED, "n1/n2/n3/file");
	expect(f, WATCH_CREATED, "n1/top");
	assert_true(f->c.evs[col_find(&f->c, 0, WATCH_CREATED, "n1/n2", NULL)].is_dir);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 4);
	col_clear(&f->c);
	/* and the deepest one is watched now */
	write_at(f, "n1/n2/n3/file", "more");
	expect(f, WATCH_CHANGED, "n1/n2/n3/file");
}

static void test_renamed_dir_reports_new_path(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	mkdir_at(f, "d1");
	mkdir_at(f, "d1/sub");
	mkdir_at(f, "other");
	subscribe_ready(f);
	rename_at(f, "d1", "other/d2");
	expect(f, WATCH_MOVED, "other/d2");
	assert_string_equal(f->c.evs[col_find(&f->c, 0, WATCH_MOVED, NULL, NULL)].from, "d1");
	col_clear(&f->c);
	write_at(f, "other/d2/sub/x", "1");
	expect(f, WATCH_CREATED, "other/d2/sub/x");
	assert_int_equal(col_find(&f->c, 0, WATCH_CREATED, "d1/sub/x", NULL), -1);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 4); /* root, other, d2, sub: relinked, not re-added */
}

/* A directory renamed after agentd read its creation but before its walk
 * opened it: watched under the new name, and what is in it reported. */
static void test_dir_renamed_before_its_walk(void **state)
{
	struct fixture *f = *state;

	subscribe_ready(f);
	mkdir_at(f, "t");
	/* One loop turn reads IN_CREATE and queues t's walk; a turn runs idle
	 * callbacks (the walk) before polling, so the walk comes next turn. */
	uv_run(&f->loop, UV_RUN_ONCE);
	rename_at(f, "t", "u");
	write_at(f, "u/early", "1");
	expect(f, WATCH_MOVED, "u");
	expect(f, WATCH_CREATED, "u/early");
	col_clear(&f->c);
	write_at(f, "u/late", "1");
	expect(f, WATCH_CREATED, "u/late");
}

/* A directory made in a parent that is renamed after agentd read the
 * creation but before the new directory's walk: the walk finds the old
 * path gone, and the parent's rename walks it again under the new one. */
static void test_parent_renamed_before_subdir_walk(void **state)
{
	struct fixture *f = *state;

	mkdir_at(f, "p");
	subscribe_ready(f);
	mkdir_at(f, "p/c");
	uv_run(&f->loop, UV_RUN_ONCE); /* reads IN_CREATE of c; its walk is next */
	rename_at(f, "p", "q");
	expect(f, WATCH_MOVED, "q");
	col_clear(&f->c);
	write_at(f, "q/c/late", "1");
	expect(f, WATCH_CREATED, "q/c/late");
}

/* Open the directory at @p rel, run one loop turn, and rename it away and
 * make a new one at its name: the walk of the first opens the second. */
static void replace_before_walk(struct fixture *f)
{
	mkdir_at(f, "a");
	uv_run(&f->loop, UV_RUN_ONCE); /* reads IN_CREATE of a; its walk is next */
	rename_at(f, "a", "b");
	mkdir_at(f, "a");
	/* The walk of node "a" watches the new a; then the events of the
	 * rename (node "a" becomes "b", with the new a's watch) and of the
	 * mkdir are read. */
	uv_run(&f->loop, UV_RUN_ONCE);
}

/* A directory renamed away and another made at its name before its walk:
 * both are watched under their own names in the end. */
static void test_dir_replaced_before_its_walk(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	subscribe_ready(f);
	replace_before_walk(f);
	expect(f, WATCH_MOVED, "b");
	run_for(f, 50);
	col_clear(&f->c);
	write_at(f, "b/late", "1");
	write_at(f, "a/late2", "1");
	expect(f, WATCH_CREATED, "b/late");
	expect(f, WATCH_CREATED, "a/late2");
	assert_int_equal(col_find(&f->c, 0, WATCH_CREATED, "a/late", NULL), -1);
	assert_int_equal(col_find(&f->c, 0, WATCH_CREATED, "b/late2", NULL), -1);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 3); /* root, a, b */
	assert_false(st.partial);
}

/* As above, and the new directory removed before its own walk: the node
 * that watched it (now named b) sees IN_IGNORED, and what is at b is
 * walked as new. */
static void test_dir_replaced_and_removed_before_its_walk(void **state)
{
	struct fixture *f = *state;
	char p[512];

	subscribe_ready(f);
	replace_before_walk(f);
	pathf(f, p, sizeof(p), "a");
	assert_int_equal(rmdir(p), 0);
	expect(f, WATCH_DELETED, "a");
	run_for(f, 50);
	col_clear(&f->c);
	write_at(f, "b/late", "1");
	expect(f, WATCH_CREATED, "b/late");
}

/*
 * mv a b; mkdir a; then mv b a/x after the walk of node "a" opened the new
 * a but before the events of all three are read: node "a" holds the new
 * a's watch, so the rename names node "a" as b's destination while b's
 * node is node "a" itself (renamed to "b"). Attaching it would make a
 * cycle (agentd's loop then spun forever); the tree is rebuilt instead.
 */
static struct fixture *rot_f;

static void rot_prepare(uv_prepare_t *h)
{
	rename_at(rot_f, "b", "a/x");
	write_at(rot_f, "a/f", "1");
	uv_prepare_stop(h);
}

static void test_renamed_into_replacement_before_walk(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	uv_prepare_t prep;

	subscribe_ready(f);
	mkdir_at(f, "a");
	uv_run(&f->loop, UV_RUN_ONCE); /* reads IN_CREATE of a; its walk is next */
	rename_at(f, "a", "b");
	mkdir_at(f, "a");
	rot_f = f;
	uv_prepare_init(&f->loop, &prep);
	uv_prepare_start(&prep, rot_prepare); /* after the idle walk, before the poll */
	uv_run(&f->loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&prep, NULL);
	expect(f, WATCH_OVERFLOW, "");
	watch_get_stats(f->w, &st);
	assert_int_equal(st.resyncs, 1);
	col_clear(&f->c);
	write_at(f, "a/x/late", "1");
	write_at(f, "a/late2", "1");
	expect(f, WATCH_CREATED, "a/x/late");
	expect(f, WATCH_CREATED, "a/late2");
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 3); /* root, a, a/x */
}

/* The stale node (P/y, holding the new x's watch) is found by the walk of
 * the new x after it moved to R/z, while P was renamed to P2 (its events
 * unread): P/y is not there, but y must still be walked under P2. */
static void test_stale_node_under_renamed_parent(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	mkdir_at(f, "P");
	mkdir_at(f, "R");
	subscribe_ready(f);
	mkdir_at(f, "P/x");
	uv_run(&f->loop, UV_RUN_ONCE); /* reads IN_CREATE P/x: node o queued */
	rename_at(f, "P/x", "P/y");
	mkdir_at(f, "P/x");
	uv_run(&f->loop, UV_RUN_ONCE); /* walk o opens the new x; o -> y; n at x queued */
	rename_at(f, "P/x", "R/z");
	uv_run(&f->loop, UV_RUN_ONCE); /* walk n at P/x: ENOENT; then n -> R/z, requeued */
	rename_at(f, "P", "P2");
	uv_run(&f->loop, UV_RUN_ONCE); /* walk n at R/z: o stale, P/y ENOENT */
	run_for(f, 100);
	col_clear(&f->c);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 5); /* root, P2, R, R/z, P2/y */
	write_at(f, "R/z/late", "1");
	write_at(f, "P2/y/late", "1");
	expect(f, WATCH_CREATED, "R/z/late");
	expect(f, WATCH_CREATED, "P2/y/late");
}

static void test_exchange_dirs(void **state)
{
	struct fixture *f = *state;
	char p[512], q[512];

	mkdir_at(f, "a");
	mkdir_at(f, "a/in_a");
	mkdir_at(f, "b");
	mkdir_at(f, "b/in_b");
	subscribe_ready(f);
	pathf(f, p, sizeof(p), "a");
	pathf(f, q, sizeof(q), "b");
	if (renameat2(AT_FDCWD, p, AT_FDCWD, q, RENAME_EXCHANGE) < 0)
		skip();
	expect(f, WATCH_MOVED, "b");
	expect(f, WATCH_MOVED, "a");
	col_clear(&f->c);
	/* in_b now lives under a, in_a under b */
	write_at(f, "a/in_b/x", "1");
	write_at(f, "b/in_a/y", "1");
	expect(f, WATCH_CREATED, "a/in_b/x");
	expect(f, WATCH_CREATED, "b/in_a/y");
}

static void test_rename_over_empty_dir(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	mkdir_at(f, "x");
	mkdir_at(f, "x/inner");
	mkdir_at(f, "y");
	subscribe_ready(f);
	rename_at(f, "x", "y"); /* replaces the empty y */
	expect(f, WATCH_MOVED, "y");
	run_for(f, 50); /* past the pair timer: the old y is dropped */
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 3); /* root, y (was x), y/inner */
	col_clear(&f->c);
	write_at(f, "y/inner/f", "1");
	expect(f, WATCH_CREATED, "y/inner/f");
}

static void test_move_out_and_in(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512], q[512];
	long i;

	mkdir_at(f, "leaving");
	mkdir_at(f, "leaving/deep");
	subscribe_ready(f);
	pathf(f, p, sizeof(p), "leaving");
	snprintf(q, sizeof(q), "%s/left", f->out_path);
	assert_int_equal(rename(p, q), 0);
	i = expect(f, WATCH_DELETED, "leaving");
	assert_true(f->c.evs[i].is_dir);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 1);
	col_clear(&f->c);

	/* changes out there are not ours */
	snprintf(q, sizeof(q), "%s/left/deep/z", f->out_path);
	close(open(q, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	run_for(f, 50);
	assert_int_equal(f->c.n, 0);

	/* moving it back in: CREATED for it and, from its walk, its contents */
	snprintf(q, sizeof(q), "%s/left", f->out_path);
	pathf(f, p, sizeof(p), "back");
	assert_int_equal(rename(q, p), 0);
	expect(f, WATCH_CREATED, "back");
	expect(f, WATCH_CREATED, "back/deep");
	expect(f, WATCH_CREATED, "back/deep/z");
	col_clear(&f->c);
	write_at(f, "back/deep/z", "now watched");
	expect(f, WATCH_CHANGED, "back/deep/z");
}

static void test_coalescing(void **state)
{
	struct fixture *f = *state;
	char p[512], q[512];
	int a, b;

	write_at(f, "f", "");
	write_at(f, "g", "");
	subscribe_ready(f);
	pathf(f, p, sizeof(p), "f");
	pathf(f, q, sizeof(q), "g");
	a = open(p, O_WRONLY | O_CLOEXEC);
	b = open(q, O_WRONLY | O_CLOEXEC);
	assert_true(a >= 0 && b >= 0);
	/* interleaved, so the kernel cannot merge them; all before one read */
	for (int i = 0; i < 100; i++) {
		assert_int_equal(write(a, "x", 1), 1);
		assert_int_equal(write(b, "y", 1), 1);
	}
	close(a);
	close(b);
	expect(f, WATCH_CHANGED, "f");
	expect(f, WATCH_CHANGED, "g");
	run_for(f, 50);
	if (col_count(&f->c, WATCH_CHANGED, "f") != 1 || col_count(&f->c, WATCH_CHANGED, "g") != 1)
		col_dump(&f->c);
	assert_int_equal(col_count(&f->c, WATCH_CHANGED, "f"), 1);
	assert_int_equal(col_count(&f->c, WATCH_CHANGED, "g"), 1);
	assert_false(f->c.evs[0].changed); /* only CREATED and MOVED say so */
	col_clear(&f->c);

	/* a new file written right away: CREATED covers the writes, and
	 * says that a change followed (a client's own create echo is then
	 * not all) */
	pathf(f, p, sizeof(p), "h");
	a = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	for (int i = 0; i < 10; i++)
		assert_int_equal(write(a, "z", 1), 1);
	close(a);
	expect(f, WATCH_CREATED, "h");
	run_for(f, 30);
	assert_int_equal(col_count(&f->c, WATCH_CHANGED, "h"), 0);
	assert_int_equal(f->c.n, 1);
	assert_true(f->c.evs[0].changed);
	col_clear(&f->c);

	/* a rename alone: MOVED, nothing folded; then one written to */
	pathf(f, p, sizeof(p), "h");
	pathf(f, q, sizeof(q), "i");
	assert_int_equal(rename(p, q), 0);
	expect(f, WATCH_MOVED, "i");
	run_for(f, 30);
	assert_int_equal(f->c.n, 1);
	assert_false(f->c.evs[0].changed);
	col_clear(&f->c);
	pathf(f, p, sizeof(p), "j");
	assert_int_equal(rename(q, p), 0);
	assert_int_equal(chmod(p, 0600), 0);
	expect(f, WATCH_MOVED, "j");
	run_for(f, 30);
	assert_int_equal(f->c.n, 1);
	assert_true(f->c.evs[0].changed);
}

/* agentd's own read delay (watch_config.read_delay_ms default). */
static int setup_read_delay(void **state)
{
	struct watch_config cfg = {.read_delay_ms = 2};

	return setup_cfg(state, &cfg);
}

/* Makes NEW_NAMES directories d<i>, each with a file f in it at once
 * (as git makes objects/XX/tmp_obj_*), 30 us apart. */
#define NEW_NAMES 200

static void *make_burst(void *arg)
{
	struct fixture *f = arg;
	char p[512];

	for (int i = 0; i < NEW_NAMES; i++) {
		snprintf(p, sizeof(p), "%s/d%d", f->root_path, i);
		assert_int_equal(mkdir(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/d%d/f", f->root_path, i);
		close(open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
		usleep(30);
	}
	return NULL;
}

/*
 * A name made in a new directory after agentd added its watch and before
 * its walk listed it is in the walk and in a queued IN_CREATE: it is
 * reported once (a client takes one own create for one CREATED).
 */
static void test_new_dir_names_once(void **state)
{
	struct fixture *f = *state;
	char last[64];
	size_t twice = 0, missing = 0;
	pthread_t t;

	subscribe_ready(f);
	assert_int_equal(pthread_create(&t, NULL, make_burst, f), 0);
	run_for(f, 50);
	assert_int_equal(pthread_join(t, NULL), 0);
	snprintf(last, sizeof(last), "d%d/f", NEW_NAMES - 1);
	expect(f, WATCH_CREATED, last);
	run_for(f, 100);
	for (int i = 0; i < NEW_NAMES; i++) {
		char p[64];
		size_t k;

		snprintf(p, sizeof(p), "d%d/f", i);
		k = col_count(&f->c, WATCH_CREATED, p);
		twice += k > 1;
		missing += k == 0;
		snprintf(p, sizeof(p), "d%d", i);
		k = col_count(&f->c, WATCH_CREATED, p);
		twice += k > 1;
		missing += k == 0;
	}
	if (twice || missing)
		print_message("%zu of %d names reported twice, %zu never\n", twice, 2 * NEW_NAMES,
			      missing);
	assert_int_equal(missing, 0);
	assert_int_equal(twice, 0);
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 0);
}

static void test_symlink_not_followed(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512], q[512];

	snprintf(q, sizeof(q), "%s/sub", f->out_path);
	assert_int_equal(mkdir(q, 0755), 0);
	pathf(f, p, sizeof(p), "ln");
	assert_int_equal(symlink(f->out_path, p), 0);
	subscribe_ready(f);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 1);
	snprintf(q, sizeof(q), "%s/sub/x", f->out_path);
	close(open(q, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	run_for(f, 50);
	assert_int_equal(f->c.n, 0);
}

static void test_batches_bounded(void **state)
{
	struct fixture *f = *state;
	char name[64];

	char p[512];
	size_t len = 0;

	subscribe_ready(f);
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "file-with-a-longish-name-%05d", i);
		len = strlen(name);
		pathf(f, p, sizeof(p), name);
		close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	}
	expect(f, WATCH_CREATED, "file-with-a-longish-name-02999");
	assert_int_equal(col_count(&f->c, WATCH_CREATED, NULL), 3000);
	assert_int_equal(col_count(&f->c, WATCH_CHANGED, NULL), 0); /* coalesced */
	/* 3000 * (30 + 16) bytes do not fit one 64 KiB batch */
	assert_true(f->c.batches >= 3);
	assert_true(f->c.max_batch * (len + 16) <= WATCH_BATCH_BYTES_DEFAULT);
}

static int setup_tiny_queue(void **state)
{
	struct watch_config cfg = {.max_queue = 5};

	return setup_cfg(state, &cfg);
}

static void test_slow_subscriber_overflow(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char name[32];

	subscribe_ready(f);
	f->c.manual = true; /* stalls: the next batch stays unacknowledged */
	write_at(f, "first", "x");
	expect(f, WATCH_CREATED, "first");
	assert_true(f->c.out);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		write_at(f, name, "x");
	}
	run_for(f, 50);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.sub_overflows, 1);
	assert_true(st.queued <= 5); /* dropped, not grown */
	col_clear(&f->c);
	/* the client catches up: OVERFLOW first, then the present */
	f->c.manual = false;
	uv_timer_start(&f->c.ack, on_ack, 0, 0);
	expect(f, WATCH_OVERFLOW, "");
	assert_int_equal(f->c.evs[0].kind, WATCH_OVERFLOW);
	assert_int_equal(col_count(&f->c, WATCH_CREATED, NULL), 0);
	col_clear(&f->c);
	write_at(f, "after", "x");
	expect(f, WATCH_CREATED, "after");
}

static void test_kernel_queue_overflow(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	long maxq = 0;
	char name[32], p[512];
	FILE *fp = fopen("/proc/sys/fs/inotify/max_queued_events", "r");

	if (fp) {
		if (fscanf(fp, "%ld", &maxq) != 1)
			maxq = 0;
		fclose(fp);
	}
	if (maxq <= 0 || maxq > 70000)
		skip(); /* too many files to make */
	mkdir_at(f, "many");
	subscribe_ready(f);
	/* 2 events per file (IN_CREATE, IN_CLOSE_WRITE), none read meanwhile */
	for (long i = 0; i < maxq / 2 + 200; i++) {
		snprintf(name, sizeof(name), "many/%ld", i);
		pathf(f, p, sizeof(p), name);
		close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	}
	expect(f, WATCH_OVERFLOW, "");
	run_for(f, 200);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.resyncs, 1);
	assert_true(st.ready);
	assert_int_equal(st.watches, 2);
	/* the second OVERFLOW: the rebuilt watch is complete */
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 2);
	col_clear(&f->c);
	write_at(f, "many/7", "x");
	expect(f, WATCH_CHANGED, "many/7");
}

static int setup_two_watches(void **state)
{
	struct watch_config cfg = {.max_watches = 2};

	return setup_cfg(state, &cfg);
}

static void test_watch_limit(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	mkdir_at(f, "a");
	subscribe_ready(f);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 2);
	assert_int_equal(st.limit_hits, 0);
	assert_false(st.partial);
	mkdir_at(f, "b");
	expect(f, WATCH_CREATED, "b");
	expect(f, WATCH_OVERFLOW, "");
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 2);
	assert_int_equal(st.limit_hits, 1);
	assert_true(st.partial); /* "b" is not watched */
	/* Clients know already: no more OVERFLOW (each drops their caches). */
	col_clear(&f->c);
	mkdir_at(f, "c");
	rename_at(f, "b", "b2");
	expect(f, WATCH_CREATED, "c");
	expect(f, WATCH_MOVED, "b2");
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 0);
}

static struct rlimit nofile_saved;
static bool nofile_changed;

/* teardown, and RLIMIT_NOFILE back as it was (a failed assertion skips the
 * test's own restore). */
static int teardown_nofile(void **state)
{
	if (nofile_changed)
		setrlimit(RLIMIT_NOFILE, &nofile_saved);
	nofile_changed = false;
	return teardown(state);
}

/* Make every new descriptor fail with EMFILE (undone by teardown_nofile). */
static void nofile_exhaust(void)
{
	struct rlimit low;
	int lowest = dup(0);

	/* The lowest free descriptor becomes the limit (getrlimit(2):
	 * RLIMIT_NOFILE bounds the number, not the count). */
	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &nofile_saved), 0);
	low = nofile_saved;
	low.rlim_cur = (rlim_t)lowest;
	nofile_changed = true;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
}

static void nofile_restore(void)
{
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &nofile_saved), 0);
	nofile_changed = false;
}

/* A directory the watcher cannot open (EMFILE here; EACCES for a non-root
 * agentd) is reported like the watch limit: OVERFLOW, and partial. */
static void test_unwatchable_dir(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	subscribe_ready(f);
	watch_get_stats(f->w, &st);
	assert_false(st.partial);
	nofile_exhaust(); /* no descriptor can be made from here on */
	mkdir_at(f, "x");
	expect(f, WATCH_CREATED, "x");
	expect(f, WATCH_OVERFLOW, "");
	nofile_restore();
	watch_get_stats(f->w, &st);
	assert_true(st.partial);
	assert_int_equal(st.limit_hits, 0); /* not the watch limit */
	/* The retry timer (1 s) walks x again; the stream is whole again,
	 * which one more OVERFLOW says. */
	col_clear(&f->c);
	write_at(f, "x/unseen", "1"); /* made while x was unwatched */
	expect(f, WATCH_OVERFLOW, "");
	watch_get_stats(f->w, &st);
	assert_false(st.partial);
	assert_int_equal(st.watches, 2);
	assert_int_equal(col_find(&f->c, 0, WATCH_CREATED, "x/unseen", NULL), -1);
	col_clear(&f->c);
	write_at(f, "x/seen", "1");
	expect(f, WATCH_CREATED, "x/seen");
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 0);
}

static int setup_three_watches(void **state)
{
	struct watch_config cfg = {.max_watches = 3};

	return setup_cfg(state, &cfg);
}

/* Once the watch limit was hit, a failed directory watched on retry does
 * not end partial: what the limit left out is still unwatched. */
static void test_limit_stays_partial(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512];

	mkdir_at(f, "a");
	subscribe_ready(f); /* root, a */
	nofile_exhaust();
	mkdir_at(f, "b"); /* EMFILE: failed, retried in 1 s */
	expect(f, WATCH_OVERFLOW, "");
	nofile_restore();
	mkdir_at(f, "c"); /* the third watch */
	mkdir_at(f, "d"); /* past the limit */
	expect(f, WATCH_CREATED, "d");
	pathf(f, p, sizeof(p), "c");
	assert_int_equal(rmdir(p), 0); /* room for b */
	expect(f, WATCH_DELETED, "c");
	watch_get_stats(f->w, &st);
	assert_int_equal(st.limit_hits, 1);
	col_clear(&f->c);
	run_for(f, 1300); /* past the first retry */
	watch_get_stats(f->w, &st);
	assert_int_equal(st.watches, 3); /* root, a, b */
	assert_true(st.partial);          /* d is not */
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 0);
}

/* While EMFILE lasts, directories that fail and go away keep the stream
 * partial: one OVERFLOW, not one per directory (each drops every client's
 * caches); whole again once a retry period passes without failures. */
static void test_emfile_churn(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512];
	uint64_t end;

	subscribe_ready(f);
	nofile_exhaust();
	pathf(f, p, sizeof(p), "tmp");
	for (int i = 0; i < 20; i++) {
		assert_int_equal(mkdir(p, 0755), 0);
		run_for(f, 5);
		assert_int_equal(rmdir(p), 0);
		run_for(f, 5);
	}
	nofile_restore();
	run_for(f, 20);
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 1);
	watch_get_stats(f->w, &st);
	assert_true(st.partial);
	/* Whole once a retry period passes without a failure: 3 s after the
	 * first failure here, 7 s if the churn outlasted the first period. */
	col_clear(&f->c);
	end = now_ms(f) + 10000;
	while (st.partial && now_ms(f) < end) {
		run_for(f, 100);
		watch_get_stats(f->w, &st);
	}
	assert_false(st.partial);
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 1);
}

/* main() moved this process into a mount namespace of its own (root only):
 * a bind mount made there stays there. The watcher's root fd must be
 * opened after that, or lookups from it do not see the mount. */
static bool own_mount_ns;

/* The same directory at two names (a bind mount): each walk finds the
 * other's watch; neither may walk the other again (they alternated
 * forever and READY never came). */
static void test_bind_mount_twice(void **state)
{
	struct fixture *f = *state;
	char a[512], b[512];
	uint64_t t0;

	if (!own_mount_ns)
		skip(); /* not root: no mount namespace of our own */
	mkdir_at(f, "a");
	mkdir_at(f, "a/sub");
	mkdir_at(f, "b");
	pathf(f, a, sizeof(a), "a");
	pathf(f, b, sizeof(b), "b");
	assert_int_equal(mount(a, b, NULL, MS_BIND, NULL), 0);
	t0 = now_ms(f);
	assert_int_equal(watch_subscribe(f->w, &col_ops, &f->c, &f->c.sub), 0);
	expect(f, WATCH_READY, "");
	assert_true(now_ms(f) - t0 < 2000);
	col_clear(&f->c);
	run_for(f, 200);
	assert_int_equal(f->c.n, 0); /* no walk emitting CREATED over and over */
	assert_int_equal(umount2(b, MNT_DETACH), 0);
}

/* With read_delay_ms, a file's create, write and close come as one batch
 * even when the loop runs between them. */
static int setup_slow_read(void **state)
{
	struct watch_config cfg = {.read_delay_ms = 200};

	return setup_cfg(state, &cfg);
}

static void test_read_delay_one_batch(void **state)
{
	struct fixture *f = *state;
	char p[512];
	size_t b0;
	int fd;

	subscribe_ready(f);
	b0 = f->c.batches;
	pathf(f, p, sizeof(p), "f");
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	run_for(f, 50); /* the fd is readable; the read waits */
	assert_int_equal(f->c.batches, b0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	expect(f, WATCH_CREATED, "f");
	assert_int_equal(f->c.batches, b0 + 1);
}

static void on_barrier(void *arg)
{
	(*(int *)arg)++;
}

/* Acknowledge the collector's batch by hand (manual mode). */
static void ack(struct fixture *f)
{
	assert_true(f->c.out);
	f->c.out = false;
	watch_sub_done(f->c.sub);
}

/*
 * watch_barrier(), with a 200 ms read delay: the call reads the kernel's
 * queue at once; the callback comes when the subscriber has finished the
 * batch with the change, not before; not at all with nothing to wait for
 * (0) or once cancelled; at the time limit when the subscriber never
 * finishes; at shutdown.
 */
static void test_barrier(void **state)
{
	struct fixture *f = *state;
	struct watch_barrier *b = NULL;
	int hits = 0;

	subscribe_ready(f);
	assert_int_equal(watch_barrier(f->w, 1000, on_barrier, &hits, &b), 0);
	assert_null(b);
	f->c.manual = true;
	write_at(f, "made", "x");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	assert_non_null(b);
	assert_true(col_find(&f->c, 0, WATCH_CREATED, "made", NULL) >= 0); /* read in the call */
	run_for(f, 50);
	assert_int_equal(hits, 0);
	ack(f);
	assert_int_equal(hits, 1);

	/* A subscriber that never finishes: the time limit. */
	write_at(f, "late", "x");
	assert_int_equal(watch_barrier(f->w, 100, on_barrier, &hits, &b), 1);
	run_for(f, 40);
	assert_int_equal(hits, 1);
	run_for(f, 150);
	assert_int_equal(hits, 2);
	ack(f);

	/* Cancelled: never called. */
	write_at(f, "gone", "x");
	assert_int_equal(watch_barrier(f->w, 100, on_barrier, &hits, &b), 1);
	watch_barrier_cancel(b);
	run_for(f, 200);
	assert_int_equal(hits, 2);
	ack(f);

	/* Shutdown calls it. */
	write_at(f, "last", "x");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	watch_shutdown(f->w);
	assert_int_equal(hits, 3);
	assert_true(f->c.ended);
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 0);
}

/*
 * watch_barrier() with a subscriber that acknowledges (watch_sub_acks()):
 * the batch's send is not enough, its watch_sub_ack() is; a change already
 * delivered before the barrier gets a batch of only a sync; a sync never
 * sent is refused; the time limit still holds; a subscriber that leaves
 * holds nothing.
 */
static void test_barrier_acks(void **state)
{
	struct fixture *f = *state;
	struct watch_barrier *b = NULL;
	int hits = 0;

	subscribe_ready(f);
	watch_sub_acks(f->c.sub);
	/* No change at all: nothing to wait for. */
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 0);
	/* A change delivered (and sent) before the barrier: a batch of only
	 * a sync, since the client was not asked to acknowledge it. */
	write_at(f, "early", "x");
	run_for(f, 400);
	assert_true(col_find(&f->c, 0, WATCH_CREATED, "early", NULL) >= 0);
	assert_int_equal(f->c.sync, 0);
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	run_for(f, 20);
	assert_true(f->c.sync > 0);
	assert_int_equal(f->c.syncs_empty, 1);
	assert_int_equal(hits, 0); /* sent and done with, not acknowledged */
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync + 1), -EINVAL);
	assert_int_equal(hits, 0);
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0);
	assert_int_equal(hits, 1);

	/* A change: its batch carries the sync. */
	write_at(f, "made", "x");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	run_for(f, 20);
	assert_true(col_find(&f->c, 0, WATCH_CREATED, "made", NULL) >= 0);
	assert_int_equal(f->c.syncs_empty, 1);
	assert_int_equal(hits, 1);
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0);
	assert_int_equal(hits, 2);
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0); /* again: nothing */
	assert_int_equal(hits, 2);

	/* Never acknowledged: the time limit. */
	write_at(f, "late", "x");
	assert_int_equal(watch_barrier(f->w, 100, on_barrier, &hits, &b), 1);
	run_for(f, 40);
	assert_int_equal(hits, 2);
	run_for(f, 150);
	assert_int_equal(hits, 3);

	/* Not acknowledged, and the subscriber leaves: nobody to wait for. */
	write_at(f, "left", "x");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	run_for(f, 20);
	assert_int_equal(hits, 3);
	watch_unsubscribe(f->c.sub);
	f->c.sub = NULL;
	run_for(f, 20);
	assert_int_equal(hits, 4);
}

/*
 * A barrier while the first walk goes on (no subscriber has READY yet)
 * has nothing to wait for: READY comes after every change made so far.
 */
static void test_barrier_first_walk(void **state)
{
	struct fixture *f = *state;
	struct watch_barrier *b = NULL;
	int hits = 0;

	write_at(f, "old", "x");
	assert_int_equal(watch_subscribe(f->w, &col_ops, &f->c, &f->c.sub), 0);
	assert_int_equal(f->c.n, 0); /* walking */
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 0);
	assert_null(b);
	assert_int_equal(expect(f, WATCH_READY, ""), 0);
}

/*
 * An acknowledgement of a batch sent before the subscriber overflowed
 * (it arrives after the reset) does not stand for the OVERFLOW's: a
 * barrier waits for that one.
 */
static void test_barrier_ack_after_overflow(void **state)
{
	struct fixture *f = *state;
	struct watch_barrier *b = NULL;
	struct watch_stats st;
	uint64_t before;
	char name[32];
	int hits = 0;

	subscribe_ready(f);
	watch_sub_acks(f->c.sub);
	f->c.manual = true;
	write_at(f, "a", "x");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	run_for(f, 20);
	assert_true(col_find(&f->c, 0, WATCH_CREATED, "a", NULL) >= 0);
	before = f->c.sync;
	assert_true(before > 0);
	for (int i = 0; i < 20; i++) { /* more than max_queue while it is out */
		snprintf(name, sizeof(name), "f%02d", i);
		write_at(f, name, "x");
	}
	run_for(f, 50);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.sub_overflows, 1);
	col_clear(&f->c);
	ack(f); /* the send finished: the OVERFLOW goes, with a sync */
	assert_int_equal(f->c.n, 1);
	assert_int_equal(f->c.evs[0].kind, WATCH_OVERFLOW);
	assert_true(f->c.sync > before);
	assert_int_equal(watch_sub_ack(f->c.sub, before), 0); /* late, stale */
	assert_int_equal(hits, 0);
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0);
	assert_int_equal(hits, 1);
}

static int setup_slow_walk(void **state)
{
	struct watch_config cfg = {.walk_dirs = 1};

	return setup_cfg(state, &cfg);
}

/*
 * A rebuild (the tree could not be trusted: the trigger of
 * test_renamed_into_replacement_before_walk) with a barrier waiting on a
 * subscriber that acknowledges: acknowledging what came before the end of
 * the rebuild's walk, the OVERFLOW at its start included, does not meet
 * it; acknowledging the OVERFLOW that ends the walk does.
 */
static void test_barrier_rebuild(void **state)
{
	struct fixture *f = *state;
	struct watch_barrier *b = NULL;
	struct watch_stats st;
	uv_prepare_t prep;
	char name[32];
	int hits = 0, overflows = 0, turns = 0;

	for (int i = 0; i < 40; i++) { /* a walk of many loop turns */
		snprintf(name, sizeof(name), "d%02d", i);
		mkdir_at(f, name);
	}
	subscribe_ready(f);
	watch_sub_acks(f->c.sub);
	mkdir_at(f, "a");
	uv_run(&f->loop, UV_RUN_ONCE);
	rename_at(f, "a", "b");
	mkdir_at(f, "a");
	rot_f = f;
	uv_prepare_init(&f->loop, &prep);
	uv_prepare_start(&prep, rot_prepare);
	uv_run(&f->loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&prep, NULL);
	watch_get_stats(f->w, &st);
	assert_int_equal(st.resyncs, 1);
	assert_false(st.ready); /* walking */
	write_at(f, "d00/x", "1");
	assert_int_equal(watch_barrier(f->w, 5000, on_barrier, &hits, &b), 1);
	for (;;) {
		uv_run(&f->loop, UV_RUN_ONCE);
		watch_get_stats(f->w, &st);
		if (st.ready)
			break;
		turns++;
		overflows = col_count(&f->c, WATCH_OVERFLOW, NULL);
		if (f->c.sync)
			assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0);
		assert_int_equal(hits, 0);
	}
	assert_true(turns >= 10);
	assert_int_equal(overflows, 1); /* at the rebuild's start, acknowledged */
	run_for(f, 20);
	/* the OVERFLOW at the walk's end */
	assert_int_equal(col_count(&f->c, WATCH_OVERFLOW, NULL), 2);
	assert_int_equal(hits, 0);
	assert_int_equal(watch_sub_ack(f->c.sub, f->c.sync), 0);
	assert_int_equal(hits, 1);
}

/* mkdir x; mkdir b; mv x b (over the unwalked b); mv b OUT/b, all before
 * agentd reads them, while EMFILE lasts for x's walk. The MOVED_FROM of b
 * takes the displaced (replaced) b node, so node x stays at "b": its walk
 * fails (EMFILE), then finds nothing there. A failed node found gone must
 * not keep the stream partial. */
static void test_failed_node_gone(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;
	char p[512], q[512];
	uint64_t end;

	subscribe_ready(f);
	mkdir_at(f, "x");
	mkdir_at(f, "b");
	rename_at(f, "x", "b");
	pathf(f, p, sizeof(p), "b");
	snprintf(q, sizeof(q), "%s/b", f->out_path);
	assert_int_equal(rename(p, q), 0);
	nofile_exhaust();
	run_for(f, 100);
	nofile_restore();
	watch_get_stats(f->w, &st);
	assert_true(st.partial);
	/* the retry at 1 s finds it gone; whole after a quiet period (2 s) */
	end = now_ms(f) + 6000;
	while (st.partial && now_ms(f) < end) {
		run_for(f, 100);
		watch_get_stats(f->w, &st);
	}
	assert_false(st.partial);
}

static void test_stop_and_restart(void **state)
{
	struct fixture *f = *state;
	struct watch_stats st;

	subscribe_ready(f);
	watch_unsubscribe(f->c.sub);
	f->c.sub = NULL;
	f->c.out = false;
	run_for(f, 20);
	watch_get_stats(f->w, &st);
	assert_false(st.running);
	assert_int_equal(st.watches, 0);
	assert_int_equal(st.subscribers, 0);
	write_at(f, "unseen", "x");
	subscribe_ready(f);
	write_at(f, "seen", "x");
	expect(f, WATCH_CREATED, "seen");
	assert_int_equal(col_find(&f->c, 0, WATCH_CREATED, "unseen", NULL), -1);
}

static void test_shutdown(void **state)
{
	struct fixture *f = *state;
	struct watch_sub *s2;

	subscribe_ready(f);
	watch_shutdown(f->w);
	assert_true(f->c.ended);
	assert_int_equal(f->c.end_err, 0);
	assert_int_equal(watch_subscribe(f->w, &col_ops, &f->c, &s2), -ESHUTDOWN);
	watch_shutdown(f->w); /* idempotent */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ready_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nested_new_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_renamed_dir_reports_new_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_renamed_before_its_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent_renamed_before_subdir_walk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_replaced_before_its_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_replaced_and_removed_before_its_walk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_renamed_into_replacement_before_walk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_stale_node_under_renamed_parent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_exchange_dirs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename_over_empty_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_move_out_and_in, setup, teardown),
		cmocka_unit_test_setup_teardown(test_coalescing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_dir_names_once, setup_read_delay, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batches_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_subscriber_overflow, setup_tiny_queue,
						teardown),
		cmocka_unit_test_setup_teardown(test_kernel_queue_overflow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch_limit, setup_two_watches, teardown),
		cmocka_unit_test_setup_teardown(test_unwatchable_dir, setup, teardown_nofile),
		cmocka_unit_test_setup_teardown(test_limit_stays_partial, setup_three_watches,
						teardown_nofile),
		cmocka_unit_test_setup_teardown(test_emfile_churn, setup, teardown_nofile),
		cmocka_unit_test_setup_teardown(test_bind_mount_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_delay_one_batch, setup_slow_read, teardown),
		cmocka_unit_test_setup_teardown(test_barrier, setup_slow_read, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_acks, setup_slow_read, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_first_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_rebuild, setup_slow_walk, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_ack_after_overflow, setup_tiny_queue,
						teardown),
		cmocka_unit_test_setup_teardown(test_failed_node_gone, setup, teardown_nofile),
		cmocka_unit_test_setup_teardown(test_stop_and_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown, setup, teardown),
	};

	own_mount_ns = unshare(CLONE_NEWNS) == 0 &&
		       mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
