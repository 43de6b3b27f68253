/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of wsfs's nodeid table (fusefs/node.c): lookup counting and
 * forget as the FUSE protocol has them, path building, rename (plain,
 * over an existing name, RENAME_EXCHANGE), unlink of open files, name
 * validation, replaced files getting new nodeids, hard links sharing a node,
 * the watch-path resolver,
 * and a table large enough to make the hash tables grow.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "node.h"
#include "wsb.h"

#define REG S_IFREG
#define DIR_ S_IFDIR

static int setup(void **state)
{
	struct node_table *t;

	if (node_table_new(&t) < 0)
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	node_table_free(*state);
	return 0;
}

static uint64_t add(struct node_table *t, uint64_t parent, const char *name, uint64_t ino,
		    uint32_t mode)
{
	uint64_t id = 0;

	assert_int_equal(node_lookup(t, NODE_OWN, parent, name, strlen(name), ino, 0, mode, 1, &id), 0);
	assert_true(id > NODE_ROOT_ID);
	return id;
}

static uint64_t add_links(struct node_table *t, uint64_t parent, const char *name, uint64_t ino,
			  uint32_t nlink)
{
	uint64_t id = 0;

	assert_int_equal(node_lookup(t, NODE_OWN, parent, name, strlen(name), ino, 0, REG, nlink, &id), 0);
	return id;
}

static void assert_path(struct node_table *t, uint64_t id, const char *want)
{
	char *p = NULL;
	size_t len = 0;

	assert_int_equal(node_path(t, id, &p, &len), 0);
	assert_string_equal(p, want);
	assert_int_equal(len, strlen(want));
	free(p);
}

static void test_root(void **state)
{
	struct node_table *t = *state;
	struct node_info info;

	assert_path(t, NODE_ROOT_ID, "");
	assert_int_equal(node_count(t), 1);
	assert_int_equal(node_info(t, NODE_ROOT_ID, &info), 0);
	assert_true(info.attached);
	assert_int_equal(info.ino, 0);
	assert_int_equal(node_set_ino(t, NODE_ROOT_ID, 77, S_IFDIR | 0755), 0);
	assert_int_equal(node_info(t, NODE_ROOT_ID, &info), 0);
	assert_int_equal(info.ino, 77);
	assert_int_equal(info.mode, S_IFDIR);
	/* The root is never freed. */
	node_forget(t, NODE_ROOT_ID, 100);
	assert_int_equal(node_count(t), 1);
	assert_int_equal(node_info(t, 12345, &info), -ESTALE);
}

static void test_lookup_counts_and_forget(void **state)
{
	struct node_table *t = *state;
	struct node_info info;
	uint64_t a, a2, b;

	a = add(t, NODE_ROOT_ID, "a", 10, DIR_);
	a2 = add(t, NODE_ROOT_ID, "a", 10, DIR_ | 0755);
	assert_int_equal(a, a2); /* same name, same file: same nodeid */
	assert_int_equal(node_info(t, a, &info), 0);
	assert_int_equal(info.nlookup, 2);
	b = add(t, a, "b", 11, REG);
	assert_path(t, b, "a/b");
	assert_int_equal(node_count(t), 3);

	/* a's lookups gone, but its child still names it. */
	assert_int_equal(node_forget(t, a, 2), 0);
	assert_int_equal(node_count(t), 3);
	assert_path(t, b, "a/b");
	/* Forgetting b frees b and then a. */
	assert_int_equal(node_forget(t, b, 5), 0); /* clamped */
	assert_int_equal(node_count(t), 1);
	assert_int_equal(node_path(t, b, &(char *){ NULL }, NULL), -ESTALE);
	/* Unknown ids are ignored. */
	assert_int_equal(node_forget(t, 999999, 1), 0);
	/* Nodeids are never reused. */
	assert_true(add(t, NODE_ROOT_ID, "a", 10, DIR_) > b);
}

static void test_names(void **state)
{
	struct node_table *t = *state;
	uint64_t id;
	char big[NODE_NAME_MAX + 2];
	const char bin[] = { 'x', (char)0xff, 'y' };

	assert_false(node_name_ok("", 0));
	assert_false(node_name_ok(".", 1));
	assert_false(node_name_ok("..", 2));
	assert_false(node_name_ok("a/b", 3));
	assert_false(node_name_ok("a\0b", 3));
	assert_true(node_name_ok("...", 3));
	assert_true(node_name_ok(".git", 4));
	memset(big, 'n', sizeof(big));
	assert_true(node_name_ok(big, NODE_NAME_MAX));
	assert_false(node_name_ok(big, NODE_NAME_MAX + 1));
	assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, "a/b", 3, 1, 0, REG, 1, &id), -EINVAL);
	assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, "..", 2, 1, 0, REG, 1, &id), -EINVAL);
	assert_int_equal(node_lookup(t, NODE_OWN, 4242, "x", 1, 1, 0, REG, 1, &id), -ESTALE);

	/* Bytes are kept exactly: no normalisation, no case folding. */
	assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, bin, sizeof(bin), 5, 0, REG, 1, &id), 0);
	{
		char *p = NULL;
		size_t len = 0;

		assert_int_equal(node_path(t, id, &p, &len), 0);
		assert_int_equal(len, 3);
		assert_memory_equal(p, bin, 3);
		free(p);
	}
	assert_true(add(t, NODE_ROOT_ID, "A", 6, REG) != add(t, NODE_ROOT_ID, "a", 7, REG));
	{
		char *p = NULL;

		assert_int_equal(node_child_path(t, id, "kid", 3, &p, NULL), 0);
		assert_memory_equal(p, "x\xffy/kid", 7);
		free(p);
		assert_int_equal(node_child_path(t, NODE_ROOT_ID, "kid", 3, &p, NULL), 0);
		assert_string_equal(p, "kid");
		free(p);
		assert_int_equal(node_child_path(t, NODE_ROOT_ID, "k/d", 3, &p, NULL), -EINVAL);
	}
}

static void test_replaced_file_gets_new_node(void **state)
{
	struct node_table *t = *state;
	struct node_info info;
	uint64_t f1, f2, f3;

	f1 = add(t, NODE_ROOT_ID, "f", 100, REG);
	f2 = add(t, NODE_ROOT_ID, "f", 101, REG); /* replaced in the pod */
	assert_true(f2 != f1);
	assert_int_equal(node_info(t, f1, &info), 0);
	assert_false(info.attached); /* kept for the kernel's lookups */
	assert_int_equal(node_path(t, f1, &(char *){ NULL }, NULL), -ESTALE);
	assert_path(t, f2, "f");
	/* Same inode number but another type: also new. */
	f3 = add(t, NODE_ROOT_ID, "f", 101, DIR_);
	assert_true(f3 != f2);
	node_forget(t, f1, 1);
	node_forget(t, f2, 1);
	assert_int_equal(node_info(t, f1, &info), -ESTALE);
	assert_int_equal(node_count(t), 2);
}

/* A server that gives one inode number to many files (nlink 2, another
 * identity each): each gets a node and its name, but the table finds at most
 * NODE_INO_CHAIN_MAX (64) of them by number, so a lookup walks no more. */
static void test_one_ino_many_files(void **state)
{
	struct node_table *t = *state;
	uint64_t ids[1000], id, first = 0, last = 0;
	char name[16];

	for (unsigned i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "f%u", i);
		id = 0;
		assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, name, strlen(name), 7,
					     node_ident(i + 1, 0), REG, 2, &id),
				 0);
		assert_true(id > NODE_ROOT_ID);
		if (!first)
			first = id;
		last = id;
	}
	assert_int_equal(node_count(t), 501);
	assert_path(t, first, "f0");
	assert_path(t, last, "f499");
	assert_int_equal(node_ids_by_ino(t, 7, node_ident(1, 0), ids, 1000), 1);
	assert_int_equal(node_ids_by_ino(t, 7, node_ident(500, 0), ids, 1000), 0);
	/* The same file again under a second name: found by number. */
	id = 0;
	assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, "again", 5, 7, node_ident(1, 0),
				     REG, 2, &id),
			 0);
	assert_int_equal(id, first);
}

static void test_rename(void **state)
{
	struct node_table *t = *state;
	uint64_t d1, d2, x, y, sub;
	struct node_info info;

	d1 = add(t, NODE_ROOT_ID, "d1", 1, DIR_);
	d2 = add(t, NODE_ROOT_ID, "d2", 2, DIR_);
	x = add(t, d1, "x", 3, REG);
	sub = add(t, d1, "sub", 4, DIR_);
	y = add(t, sub, "y", 5, REG);

	/* Plain move across directories. */
	assert_int_equal(node_rename(t, d1, "x", 1, d2, "x2", 2, false), 0);
	assert_path(t, x, "d2/x2");
	/* A directory move carries its subtree. */
	assert_int_equal(node_rename(t, d1, "sub", 3, d2, "sub", 3, false), 0);
	assert_path(t, y, "d2/sub/y");
	/* Into itself: refused. */
	assert_int_equal(node_rename(t, d2, "sub", 3, sub, "loop", 4, false), -EINVAL);

	/* Over an existing name (mv x.lock x): the old target is detached. */
	{
		uint64_t a = add(t, NODE_ROOT_ID, "x", 20, REG);
		uint64_t lock = add(t, NODE_ROOT_ID, "x.lock", 21, REG);

		assert_int_equal(node_rename(t, NODE_ROOT_ID, "x.lock", 6, NODE_ROOT_ID, "x", 1,
					     false),
				 0);
		assert_path(t, lock, "x");
		assert_int_equal(node_info(t, a, &info), 0);
		assert_false(info.attached);
		/* A lookup of x now finds the moved node. */
		assert_int_equal(add(t, NODE_ROOT_ID, "x", 21, REG), lock);
	}

	/* RENAME_EXCHANGE swaps the names. */
	{
		uint64_t p = add(t, NODE_ROOT_ID, "p", 30, REG);
		uint64_t q = add(t, NODE_ROOT_ID, "q", 31, DIR_);

		assert_int_equal(node_rename(t, NODE_ROOT_ID, "p", 1, NODE_ROOT_ID, "q", 1, true), 0);
		assert_path(t, p, "q");
		assert_path(t, q, "p");
	}

	/* Names the table never saw: nothing to move, no error. */
	assert_int_equal(node_rename(t, NODE_ROOT_ID, "nope", 4, NODE_ROOT_ID, "nope2", 5, false), 0);
	/* The unknown source replaced a known target: the target is detached. */
	{
		uint64_t k = add(t, NODE_ROOT_ID, "known", 40, REG);

		assert_int_equal(node_rename(t, NODE_ROOT_ID, "unknown", 7, NODE_ROOT_ID, "known", 5,
					     false),
				 0);
		assert_int_equal(node_info(t, k, &info), 0);
		assert_false(info.attached);
	}
	assert_int_equal(node_rename(t, 777777, "a", 1, NODE_ROOT_ID, "b", 1, false), -ESTALE);
}

/* A file renamed over keeps agentd's handle while the kernel holds its
 * node; the handle is handed back for release when the node goes. */
static void test_kept(void **state)
{
	struct node_table *t = *state;
	uint64_t x, lock, d, h, y, ids[8];
	struct node_fh fh;

	x = add(t, NODE_ROOT_ID, "x", 2, REG);
	lock = add(t, NODE_ROOT_ID, "x.lock", 3, REG);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), x);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "nope", 4), 0);
	assert_int_equal(node_child(t, 999999, "x", 1), 0);
	/* mv x.lock x through the mount: x gets the handle while still
	 * named, then the rename detaches it. */
	assert_int_equal(node_keep(t, x, 99, 0, 77), -ESTALE); /* another inode */
	assert_int_equal(node_keep(t, x, 2, 0, 0), -EINVAL);
	assert_int_equal(node_keep(t, x, 2, 0, 77), 0);
	assert_int_equal(node_keep(t, x, 2, 0, 78), -ESTALE); /* keeps one */
	assert_int_equal(node_kept(t, x), 77);
	assert_int_equal(node_rename(t, NODE_ROOT_ID, "x.lock", 6, NODE_ROOT_ID, "x", 1, false), 0);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), lock);
	assert_int_equal(node_unkeep_named(t, x), 0); /* detached: keeps it */
	assert_int_equal(node_kept(t, x), 77);
	assert_int_equal(node_kept(t, lock), 0);
	/* Nothing to release while the node lives, then its handle. */
	assert_int_equal(node_kept_drain(t, ids, 8, false), 0);
	assert_int_equal(node_fh_add(t, x, &fh), 0);
	assert_int_equal(node_forget(t, x, 1), 0);
	assert_int_equal(node_kept_drain(t, ids, 8, false), 0); /* open still */
	assert_true(node_fh_put(t, &fh));
	assert_int_equal(node_kept_drain(t, ids, 8, false), 1);
	assert_int_equal(ids[0], 77);
	assert_int_equal(node_kept_drain(t, ids, 8, false), 0);
	assert_int_equal(node_kept(t, x), 0);

	/* A replaced file with another name (hard link): the rename leaves
	 * it bound, and the handle is taken back. */
	{
		uint64_t a = add_links(t, NODE_ROOT_ID, "ha", 20, 2), b, z;

		b = add_links(t, NODE_ROOT_ID, "hb", 20, 2);
		assert_int_equal(a, b);
		z = add(t, NODE_ROOT_ID, "hz", 21, REG);
		assert_int_equal(node_keep(t, a, 20, 0, 85), 0);
		assert_int_equal(node_rename(t, NODE_ROOT_ID, "hz", 2, NODE_ROOT_ID, "ha", 2, false), 0);
		assert_int_equal(node_child(t, NODE_ROOT_ID, "ha", 2), z);
		assert_int_equal(node_child(t, NODE_ROOT_ID, "hb", 2), a);
		assert_int_equal(node_unkeep_named(t, a), 85);
		assert_int_equal(node_kept(t, a), 0);
		assert_int_equal(node_unkeep_named(t, a), 0);
	}

	/* Directories keep none; unmount takes every live node's. */
	d = add(t, NODE_ROOT_ID, "d", 4, DIR_);
	assert_int_equal(node_unlink(t, NODE_ROOT_ID, "d", 1), d);
	assert_int_equal(node_keep(t, d, 4, 0, 80), -ESTALE);
	h = add(t, NODE_ROOT_ID, "h", 5, REG);
	y = add(t, NODE_ROOT_ID, "y", 6, REG);
	assert_int_equal(node_rename(t, NODE_ROOT_ID, "y", 1, NODE_ROOT_ID, "h", 1, false), 0);
	assert_int_equal(node_keep(t, h, 5, 0, 81), 0);
	assert_int_equal(node_kept_drain(t, ids, 8, true), 1);
	assert_int_equal(ids[0], 81);
	assert_int_equal(node_kept(t, h), 0);
	(void)y;

	/* Two detached nodes of one file (a LOOKUP raced the rename): the
	 * handle goes to one when the victim named is not one of them, and
	 * serves both. */
	{
		uint64_t a = add(t, NODE_ROOT_ID, "z", 9, REG), b, other;

		assert_int_equal(node_unlink(t, NODE_ROOT_ID, "z", 1), a);
		b = add(t, NODE_ROOT_ID, "z", 9, REG);
		assert_true(b != a);
		assert_int_equal(node_unlink(t, NODE_ROOT_ID, "z", 1), b);
		other = add(t, NODE_ROOT_ID, "o", 10, REG);
		assert_int_equal(node_keep(t, other, 9, 0, 90), 0); /* attached: by inode */
		assert_int_equal(node_kept(t, a), 90);
		assert_int_equal(node_kept(t, b), 90);
		assert_int_equal(node_kept(t, other), 0);
		assert_int_equal(node_keep(t, 999999, 9, 0, 91), 0); /* the other one */
		assert_int_equal(node_keep(t, 999999, 9, 0, 92), -ESTALE); /* both keep one */
		assert_int_equal(node_kept_drain(t, ids, 8, true), 2);
	}
}

/* node_link_inside: which targets stay, and what the others become. */
static void test_link_inside(void **state)
{
	static const struct {
		const char *dir, *target, *want; /* want NULL: stays */
	} cases[] = {
		{ "", "a", NULL },
		{ "", "a/b/../c", "a/c" },   /* a ".." after a name: by words */
		{ "a/b", "../x", NULL },
		{ "a/b", "../../x/y", NULL },
		{ "a/b", "./../x", NULL },
		{ "a/b", "../../../etc/passwd", "../../etc/passwd" },
		{ "", "../x", "x" },
		{ "", "..", "." },
		{ "a", "/etc/passwd", "../etc/passwd" },
		{ "", "/", "." },
		{ "a/b", "/", "../.." },
		{ "a/b", "/usr//bin/./python3", "../../usr/bin/python3" },
		{ "", "lnk/..", "." },       /* lnk may lead to the root */
		{ "d", "lnk/../../..", ".." },
	};
	char *got;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(node_link_inside(cases[i].dir, strlen(cases[i].dir),
						  cases[i].target, &got), 0);
		if (!cases[i].want) {
			if (got)
				fail_msg("%s in '%s': changed to %s", cases[i].target, cases[i].dir,
					 got);
			continue;
		}
		if (!got || strcmp(got, cases[i].want))
			fail_msg("%s in '%s': %s, want %s", cases[i].target, cases[i].dir,
				 got ? got : "(kept)", cases[i].want);
		free(got);
	}
}

static void test_unlink_and_open_files(void **state)
{
	struct node_table *t = *state;
	struct node_fh fh1, fh2, *got;
	struct node_info info;
	uint64_t f;

	f = add(t, NODE_ROOT_ID, "open", 50, REG);
	assert_int_equal(node_fh_add(t, f, &fh1), 0);
	assert_int_equal(node_fh_add(t, f, &fh2), 0);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_int_equal(info.open_files, 2);

	/* rm of an open file: no path, node alive, handle reachable. */
	assert_int_equal(node_unlink(t, NODE_ROOT_ID, "open", 4), f);
	assert_int_equal(node_unlink(t, NODE_ROOT_ID, "open", 4), 0);
	node_forget(t, f, 1);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_false(info.attached);
	got = node_fh_get(t, f);
	assert_ptr_equal(got, &fh2); /* most recent first */
	assert_false(node_fh_put(t, got));
	/* Close both: the last put frees the node. */
	assert_true(node_fh_put(t, &fh2));
	assert_int_equal(node_info(t, f, &info), 0);
	node_fh_ref(t, &fh1);
	assert_false(node_fh_put(t, &fh1));
	assert_true(node_fh_put(t, &fh1));
	assert_int_equal(node_info(t, f, &info), -ESTALE);
	assert_null(node_fh_get(t, NODE_ROOT_ID));
	assert_int_equal(node_fh_add(t, 999999, &fh1), -ESTALE);
	assert_int_equal(node_count(t), 1);
}

/* What the kernel was told of a file, kept while the mount holds it open
 * and has not written it (fs.c "Outage attributes"). */
static void test_told(void **state)
{
	struct node_table *t = *state;
	struct stat st = { .st_mode = S_IFREG | 0644, .st_size = 10 }, got;
	struct node_fh fh;
	uint64_t f = add(t, NODE_ROOT_ID, "log", 60, REG);

	struct stat dst = { .st_mode = S_IFDIR | 0755, .st_nlink = 2 };
	uint64_t d = add(t, NODE_ROOT_ID, "dir", 61, S_IFDIR);

	node_told_set(t, f, &st); /* not open: not kept */
	assert_int_equal(node_fh_add(t, f, &fh), 0);
	assert_false(node_told_get(t, f, &got));
	node_told_set(t, f, &st);
	st.st_size = 20;
	node_told_set(t, f, &st); /* the last one counts */
	assert_true(node_told_get(t, f, &got));
	assert_int_equal(got.st_size, 20);
	node_told_set(t, f, &dst); /* not a directory's on a file's node */
	assert_true(node_told_get(t, f, &got));
	assert_int_equal(got.st_mode, S_IFREG | 0644);
	node_told_grow(t, f, 15); /* a write within: the size stays */
	assert_true(node_told_get(t, f, &got));
	assert_int_equal(got.st_size, 20);
	node_told_grow(t, f, 4096); /* past the end: the kernel's i_size grew */
	assert_true(node_told_get(t, f, &got));
	assert_int_equal(got.st_size, 4096);
	(void)node_fh_put(t, &fh); /* closed: not answered for */
	assert_false(node_told_get(t, f, &got));
	assert_int_equal(node_fh_add(t, f, &fh), 0);
	assert_true(node_told_get(t, f, &got));
	node_told_drop(t, f); /* an O_TRUNC open: the kernel's own size */
	assert_false(node_told_get(t, f, &got));
	(void)node_fh_put(t, &fh);
	/* a directory's, open or not */
	node_told_set(t, d, &dst);
	assert_true(node_told_get(t, d, &got));
	assert_int_equal(got.st_nlink, 2);
	node_told_set(t, d, &st); /* not a file's on a directory's node */
	assert_true(node_told_get(t, d, &got));
	assert_int_equal(got.st_mode, S_IFDIR | 0755);
	assert_false(node_told_get(t, 999999, &got));
	/* fresh: no invalidation by the watch since they were told */
	assert_true(node_told_fresh(t, d, &got));
	node_note(t, d, 0, true); /* a write: no invalidation */
	assert_true(node_told_fresh(t, d, &got));
	node_note(t, d, 12345, false); /* the watch had the kernel drop them */
	assert_false(node_told_fresh(t, d, &got));
	assert_true(node_told_get(t, d, &got)); /* still what the kernel had */
	dst.st_mode = S_IFDIR | 01777;
	node_told_set(t, d, &dst); /* told again: the pod's mode */
	assert_true(node_told_fresh(t, d, &got));
	assert_int_equal(got.st_mode, S_IFDIR | 01777);
	assert_false(node_told_fresh(t, 999999, &got));
}

/* A node made without a name (a create whose directory lost its name):
 * reached by its id and open files only; freed by its forget and close. */
static void test_new_detached(void **state)
{
	struct node_table *t = *state;
	struct node_fh fh;
	struct node_info info;
	uint64_t f, ids[4];
	char *path;
	size_t len;

	add(t, NODE_ROOT_ID, "named", 70, REG);
	assert_int_equal(node_new_detached(t, 70, 0, REG | 0644, &f), 0);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_false(info.attached);
	assert_int_equal(info.nlookup, 1);
	assert_int_equal(info.mode, REG);
	assert_int_equal(info.names, 0);
	assert_int_equal(node_path(t, f, &path, &len), -ESTALE);
	/* Not found by inode: never merged with a name of the same file. */
	assert_int_equal(node_ids_by_ino(t, 70, 0, ids, 4), 1);
	assert_true(ids[0] != f);
	assert_int_equal(node_fh_add(t, f, &fh), 0);
	node_forget(t, f, 1);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_true(node_fh_put(t, &fh));
	assert_int_equal(node_info(t, f, &info), -ESTALE);
	assert_int_equal(node_count(t), 2);
}

/* The lower bound of the kernel's i_size (node_ksize_told() and kin): the
 * first reply sets it, a smaller one lowers it, a larger one does not
 * raise it (the kernel may drop that reply) until a store covers it. */
static void test_ksize(void **state)
{
	struct node_table *t = *state;
	uint64_t f = add(t, NODE_ROOT_ID, "k", 71, REG);

	assert_int_equal(node_ksize(t, f), -1);
	assert_int_equal(node_ksize_told(t, f, 0), 0); /* LOOKUP of it, empty */
	assert_int_equal(node_ksize_told(t, f, 16000), 0); /* may be dropped */
	node_ksize_covered(t, f, 16000);                   /* a store */
	assert_int_equal(node_ksize(t, f), 16000);
	assert_int_equal(node_ksize_told(t, f, 16000), 16000);
	node_ksize_covered(t, f, 100); /* never lowers */
	assert_int_equal(node_ksize(t, f), 16000);
	node_ksize_lower(t, f, 12288); /* a short READ */
	assert_int_equal(node_ksize(t, f), 12288);
	node_ksize_lower(t, f, 20000); /* never raises */
	assert_int_equal(node_ksize(t, f), 12288);
	assert_int_equal(node_ksize_told(t, f, 3000), 3000); /* shrunk */
	/* An unknown node: nothing kept, nothing known. */
	node_ksize_covered(t, 999999, 5);
	node_ksize_lower(t, 999999, 5);
	assert_int_equal(node_ksize_told(t, 999999, 5), -1);
	assert_int_equal(node_ksize(t, 999999), -1);
}

static void test_pins(void **state)
{
	struct node_table *t = *state;
	uint64_t f = add(t, NODE_ROOT_ID, "p", 81, REG);
	uint64_t g = add(t, NODE_ROOT_ID, "q", 82, REG);
	uint64_t d = add(t, NODE_ROOT_ID, "dp", 83, DIR_);
	const int64_t sec = 1000000000LL;
	uint64_t ids[8];
	int64_t due;

	/* Only on the regular file node of that very file; one each: the
	 * one there stays (an open may be using it). No pin: never due. */
	assert_int_equal(node_pins_due(t), INT64_MAX);
	assert_int_equal(node_pin_set(t, f, 99, 0, 500), 500);
	assert_int_equal(node_pin_set(t, d, 83, 0, 501), 501);
	assert_int_equal(node_pin_get(t, d, sec), 0);
	assert_int_equal(node_pin_set(t, f, 81, 0, 502), 0);
	assert_true(node_pins_due(t) <= wsb_mono_ns()); /* never walked: at once */
	assert_int_equal(node_pin_set(t, f, 81, 0, 503), 503);
	/* Every repeat within the age uses it; it stays the table's. */
	assert_int_equal(node_pin_get(t, f, sec), 502);
	assert_int_equal(node_pin_get(t, f, sec), 502);
	assert_int_equal(node_pin_get(t, f, 0), 0); /* too old to use */
	assert_int_equal(node_pin_get(t, f, sec), 502);
	/* Dropped only while it is still that one. */
	assert_false(node_pin_drop(t, f, 503));
	assert_true(node_pin_drop(t, f, 502));
	assert_false(node_pin_drop(t, f, 502));
	assert_int_equal(node_pin_get(t, f, sec), 0);
	/* Old pins come out, each once, young ones stay. */
	assert_int_equal(node_pin_set(t, f, 81, 0, 504), 0);
	usleep(600000);
	assert_int_equal(node_pin_set(t, g, 82, 0, 505), 0);
	assert_int_equal(node_pins_expire(t, sec / 2, ids, 8), 1);
	assert_int_equal(ids[0], 504);
	assert_int_equal(node_pin_get(t, f, sec), 0);
	assert_int_equal(node_pin_get(t, g, sec), 505);
	/* A walk at most every max_age / 2 (here 5 s): not again at once,
	 * and due then. */
	usleep(300000);
	assert_int_equal(node_pins_expire(t, 10 * sec, ids, 8), 0);
	due = node_pins_due(t);
	assert_true(due > wsb_mono_ns() + 4 * sec && due <= wsb_mono_ns() + 5 * sec);
	assert_int_equal(node_pins_expire(t, 0, ids, 8), 0);
	assert_int_equal(node_pin_get(t, g, sec), 505);
	/* A forgotten node's pin goes with it; then none is due. */
	node_forget(t, g, 1);
	assert_int_equal(node_kept_drain(t, ids, 8, false), 1);
	assert_int_equal(ids[0], 505);
	assert_int_equal(node_pins_due(t), INT64_MAX);
}

static void test_hard_links(void **state)
{
	struct node_table *t = *state;
	struct node_info info;
	uint64_t d, f, g, h, lone;

	d = add(t, NODE_ROOT_ID, "d", 1, DIR_);
	f = add_links(t, NODE_ROOT_ID, "f", 60, 1);
	/* ln f d/g: the lookup of g (nlink 2) joins f's node. */
	g = add_links(t, d, "g", 60, 2);
	assert_int_equal(g, f);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_int_equal(info.names, 2);
	assert_int_equal(info.nlookup, 2);
	assert_path(t, f, "d/g"); /* the most recently confirmed name */
	assert_int_equal(add_links(t, NODE_ROOT_ID, "f", 60, 2), f);
	assert_path(t, f, "f");

	/* The first name vanished in the pod: fall back to the other. */
	assert_int_equal(node_drop_first_name(t, f), 0);
	assert_path(t, f, "d/g");

	/* A hard-linked symlink: a node per name, each with its own path
	 * (its target is followed from the name's directory). */
	{
		uint64_t s1 = 0, s2 = 0;

		assert_int_equal(node_lookup(t, NODE_OWN, d, "s", 1, 70, 0, S_IFLNK, 2, &s1), 0);
		assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, "s2", 2, 70, 0, S_IFLNK, 2, &s2), 0);
		assert_true(s1 != s2);
		assert_path(t, s1, "d/s");
		assert_path(t, s2, "s2");
	}
	assert_int_equal(node_drop_first_name(t, f), -ENOENT); /* the last name stays */
	assert_int_equal(add_links(t, NODE_ROOT_ID, "f", 60, 2), f);

	/* rm f: the node keeps its other name. */
	assert_int_equal(node_unlink(t, NODE_ROOT_ID, "f", 1), f);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_true(info.attached);
	assert_path(t, f, "d/g");
	/* Renaming one link over another of the same file does nothing. */
	h = add_links(t, d, "h", 60, 2);
	assert_int_equal(h, f);
	assert_int_equal(node_rename(t, d, "g", 1, d, "h", 1, false), 0);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_int_equal(info.names, 2);

	/* nlink 1 under another name with the same inode number: not merged
	 * (a renamed-away or reused inode), and detached nodes never join. */
	lone = add_links(t, NODE_ROOT_ID, "lone", 60, 1);
	assert_true(lone != f);
	node_unlink(t, d, "g", 1);
	node_unlink(t, d, "h", 1);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_false(info.attached);
	assert_true(add_links(t, NODE_ROOT_ID, "again", 60, 2) != f);
	/* Directories are never merged. */
	assert_true(add(t, NODE_ROOT_ID, "dd", 1, DIR_) != d);
	assert_path(t, d, "d");
}

static void test_seen(void **state)
{
	struct node_table *t = *state;
	struct node_seen s = { .valid = true, .ino = 9, .size = 3, .mtime_ns = 123 };
	struct node_info info;
	uint64_t f = add(t, NODE_ROOT_ID, "s", 9, REG);

	node_seen_set(t, f, &s);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_true(info.seen.valid);
	assert_int_equal(info.seen.mtime_ns, 123);
	node_seen_set(t, f, NULL);
	assert_int_equal(node_info(t, f, &info), 0);
	assert_false(info.seen.valid);
}

static void test_own(void **state)
{
	struct node_table *t = *state;
	struct stat st = { .st_ino = 9, .st_size = 4096, .st_mode = S_IFREG | 0644 }, got;
	uint64_t f = add(t, NODE_ROOT_ID, "w", 9, REG);

	assert_false(node_own_get(t, f, 1, 1, 0, &got)); /* nothing kept */
	node_own_set(t, f, &st, 5, 7, 1000);
	memset(&got, 0, sizeof(got));
	assert_true(node_own_get(t, f, 5, 7, 1000, &got));
	assert_int_equal(got.st_size, 4096);
	assert_int_equal(got.st_mode, S_IFREG | 0644);
	/* Another own change, any event, or too old: not to be used. */
	assert_false(node_own_get(t, f, 6, 7, 0, &got));
	assert_false(node_own_get(t, f, 5, 8, 0, &got));
	assert_false(node_own_get(t, f, 5, 7, 1001, &got));
	/* A newer write replaces them; NULL forgets them. */
	st.st_size = 8192;
	node_own_set(t, f, &st, 6, 7, 2000);
	assert_false(node_own_get(t, f, 5, 7, 0, &got));
	assert_true(node_own_get(t, f, 6, 7, 0, &got));
	assert_int_equal(got.st_size, 8192);
	node_own_set(t, f, NULL, 0, 0, 0);
	assert_false(node_own_get(t, f, 6, 7, 0, &got));
	/* Freed with its node (ASan/LSan would tell otherwise). */
	node_own_set(t, f, &st, 1, 1, 1);
	assert_int_equal(node_forget(t, f, 1), 0);
	assert_false(node_own_get(t, f, 1, 1, 0, &got));
}

/* node_attr_*: what a read reported, until anything may have changed it. */
static void test_attr(void **state)
{
	struct node_table *t = *state;
	struct stat st = { .st_ino = 70, .st_size = 10, .st_nlink = 1, .st_mode = S_IFREG | 0644 };
	struct stat got;
	uint64_t d, f, g, v;

	d = add(t, NODE_ROOT_ID, "d", 1, DIR_);
	f = add(t, d, "f", 70, REG);
	g = add(t, d, "g", 71, REG);
	assert_int_equal(node_attr_ver(t, 12345), UINT64_MAX); /* unknown id */
	assert_false(node_attr_get(t, f, 0, &got));

	v = node_attr_ver(t, f);
	node_attr_put(t, f, v, &st, 1000);
	memset(&got, 0, sizeof(got));
	assert_true(node_attr_get(t, f, 1000, &got));
	assert_int_equal(got.st_size, 10);
	assert_int_equal(got.st_ino, 70);
	assert_false(node_attr_get(t, f, 1001, &got)); /* too old */
	assert_false(node_attr_get(t, g, 0, &got));    /* another node's */

	/* A drop between the ver and the put (a change raced the read). */
	v = node_attr_ver(t, g);
	node_attr_drop(t, g);
	st.st_ino = 71;
	node_attr_put(t, g, v, &st, 1000);
	assert_false(node_attr_get(t, g, 0, &got));
	/* Put under the new version: kept; it does not touch f's. */
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_true(node_attr_get(t, g, 0, &got));
	assert_true(node_attr_get(t, f, 0, &got));

	/* Refused: another inode than the node's, a hard-linked file, not
	 * a regular file. */
	node_attr_drop(t, g);
	st.st_ino = 99;
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_false(node_attr_get(t, g, 0, &got));
	st.st_ino = 71;
	st.st_nlink = 2;
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_false(node_attr_get(t, g, 0, &got));
	st.st_nlink = 1;
	st.st_mode = S_IFLNK | 0777;
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_false(node_attr_get(t, g, 0, &got));
	st.st_mode = S_IFREG | 0644;
	/* Refused too: another file on the node's inode number (one reused),
	 * told by the identity in st_dev where both sides know it. */
	{
		struct stat hs = st;
		uint64_t h;

		assert_int_equal(node_lookup(t, NODE_OWN, d, "hh", 2, 73, 0x500000006ull, REG, 1, &h),
				 0);
		hs.st_ino = 73;
		hs.st_dev = (dev_t)0x500000007ull;
		node_attr_put(t, h, node_attr_ver(t, h), &hs, 1000);
		assert_false(node_attr_get(t, h, 0, &got));
		hs.st_dev = (dev_t)0x500000006ull;
		node_attr_put(t, h, node_attr_ver(t, h), &hs, 1000);
		assert_true(node_attr_get(t, h, 0, &got));
		node_attr_drop(t, h);
		hs.st_dev = 0; /* an agentd that sends no identity */
		node_attr_put(t, h, node_attr_ver(t, h), &hs, 1000);
		assert_true(node_attr_get(t, h, 0, &got));
	}

	/* The watch's invalidation (node_seen_set NULL) drops them; a seen
	 * set by an own open does not. */
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	node_seen_set(t, g, &(struct node_seen){ .valid = true, .ino = 71 });
	assert_true(node_attr_get(t, g, 0, &got));
	node_seen_set(t, g, NULL);
	assert_false(node_attr_get(t, g, 0, &got));

	/* An own change named by path (wsfs_self_begin). */
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_false(node_attr_drop_path(t, "d/other", 7)); /* no such node: nothing */
	assert_true(node_attr_get(t, g, 0, &got));
	assert_true(node_attr_drop_path(t, "d/g", 3));
	assert_false(node_attr_get(t, g, 0, &got));

	/* Losing or moving a name: nlink and ctime changed. */
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_int_equal(node_rename(t, d, "g", 1, d, "g2", 2, false), 0);
	assert_false(node_attr_get(t, g, 0, &got));
	node_attr_put(t, g, node_attr_ver(t, g), &st, 1000);
	assert_true(node_attr_get(t, g, 0, &got));
	assert_int_equal(node_rename(t, d, "f", 1, d, "g2", 2, false), 0); /* over g */
	assert_false(node_attr_get(t, g, 0, &got));
	assert_false(node_attr_get(t, f, 0, &got));

	/* A detached node keeps nothing (its nlink is 0). */
	st.st_ino = 70;
	node_attr_put(t, f, node_attr_ver(t, f), &st, 1000);
	assert_true(node_attr_get(t, f, 0, &got));
	assert_int_equal(node_unlink(t, d, "g2", 2), f);
	assert_false(node_attr_get(t, f, 0, &got));

	/* Two nodes of one file (a name the pod gave it that the table did
	 * not follow, nlink 1: not merged): a drop by either's path, or by
	 * the inode, drops both. */
	{
		uint64_t a = add(t, d, "a", 75, REG), b = add(t, d, "b", 75, REG);

		assert_true(a != b);
		st.st_ino = 75;
		node_attr_put(t, a, node_attr_ver(t, a), &st, 1000);
		node_attr_put(t, b, node_attr_ver(t, b), &st, 1000);
		node_attr_drop_path(t, "d/b", 3);
		assert_false(node_attr_get(t, a, 0, &got));
		assert_false(node_attr_get(t, b, 0, &got));
		node_attr_put(t, a, node_attr_ver(t, a), &st, 1000);
		assert_true(node_attr_get(t, a, 0, &got));
		node_attr_drop_ino(t, 75);
		assert_false(node_attr_get(t, a, 0, &got));
		node_attr_drop_ino(t, 12345); /* none: nothing */
	}

	/* drop_all: every node's, and a put asked for before it. */
	f = add(t, d, "h", 72, REG);
	st.st_ino = 72;
	node_attr_put(t, f, node_attr_ver(t, f), &st, 1000);
	v = node_attr_ver(t, f);
	node_attr_drop_all(t);
	assert_false(node_attr_get(t, f, 0, &got));
	node_attr_put(t, f, v, &st, 1000);
	assert_false(node_attr_get(t, f, 0, &got));
	node_attr_put(t, f, node_attr_ver(t, f), &st, 1000);
	assert_true(node_attr_get(t, f, 0, &got));
	/* Freed with its node (ASan/LSan would tell otherwise). */
	assert_int_equal(node_forget(t, f, 1), 0);
	assert_false(node_attr_get(t, f, 0, &got));

	/* A directory's (nlink 2 and more) are kept with a generation only,
	 * and only while the caller's is that one. */
	{
		struct stat ds = { .st_ino = 1, .st_nlink = 3, .st_mode = S_IFDIR | 0755 };

		node_attr_put_gen(t, d, node_attr_ver(t, d), &ds, 1000, 7);
		assert_true(node_attr_get_gen(t, d, 0, 7, &got));
		assert_int_equal(got.st_nlink, 3);
		assert_false(node_attr_get_gen(t, d, 0, 8, &got));
		assert_false(node_attr_get(t, d, 0, &got));
		node_attr_drop(t, d);
		node_attr_put(t, d, node_attr_ver(t, d), &ds, 1000);
		assert_false(node_attr_get_gen(t, d, 0, 8, &got));
		assert_false(node_attr_get(t, d, 0, &got));
		/* a symlink's never */
		f = add(t, d, "sl", 76, S_IFLNK);
		ds.st_ino = 76;
		ds.st_nlink = 1;
		ds.st_mode = S_IFLNK | 0777;
		node_attr_put(t, f, node_attr_ver(t, f), &ds, 1000);
		assert_false(node_attr_get(t, f, 0, &got));
	}
}

static void test_resolve(void **state)
{
	struct node_table *t = *state;
	uint64_t a, b, parent, id;
	const char *name;
	size_t len;

	a = add(t, NODE_ROOT_ID, "a", 1, DIR_);
	b = add(t, a, "b", 2, REG);

	assert_int_equal(node_resolve(t, "a/b", 3, &parent, &id, &name, &len), 0);
	assert_int_equal(parent, a);
	assert_int_equal(id, b);
	assert_int_equal(len, 1);
	assert_memory_equal(name, "b", 1);
	/* Leading '/', "." and doubled '/' are skipped. */
	assert_int_equal(node_resolve(t, "/./a//b/", 8, &parent, &id, &name, &len), 0);
	assert_int_equal(id, b);
	/* Unknown last name: the parent is still known (negative dentry). */
	assert_int_equal(node_resolve(t, "a/new", 5, &parent, &id, &name, &len), 0);
	assert_int_equal(parent, a);
	assert_int_equal(id, 0);
	assert_memory_equal(name, "new", 3);
	/* Unknown parent. */
	assert_int_equal(node_resolve(t, "zz/b", 4, &parent, &id, &name, &len), 0);
	assert_int_equal(parent, 0);
	assert_int_equal(id, 0);
	/* The root and ".." are not names. */
	assert_int_equal(node_resolve(t, "", 0, &parent, &id, &name, &len), -EINVAL);
	assert_int_equal(node_resolve(t, "/", 1, &parent, &id, &name, &len), -EINVAL);
	assert_int_equal(node_resolve(t, "a/../b", 6, &parent, &id, &name, &len), -EINVAL);
	assert_int_equal(node_resolve(t, "a/..", 4, &parent, &id, &name, &len), -EINVAL);
}

static void test_snapshot(void **state)
{
	struct node_table *t = *state;
	struct node_ref *refs;
	size_t n, named = 0;
	uint64_t a = add(t, NODE_ROOT_ID, "a", 1, DIR_);

	add(t, a, "b", 2, REG);
	add(t, NODE_ROOT_ID, "c", 3, REG);
	node_unlink(t, NODE_ROOT_ID, "c", 1); /* held by its lookup, detached */
	assert_int_equal(node_snapshot(t, &refs, &n), 0);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		if (refs[i].name) {
			named++;
			assert_true(refs[i].parent != 0);
			assert_int_equal(strlen(refs[i].name), refs[i].name_len);
		}
	}
	assert_int_equal(named, 2);
	node_snapshot_free(refs, n);
}

static int cmp_u64(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return a < b ? -1 : a > b;
}

/* Directory hashes: one name, one hash, whatever the table holds; in
 * [NODE_DIR_OFF_MIN, NODE_DIR_OFF_MAX]; 20,000 names, nearly all distinct.
 * Offsets: a listing's hashes made strictly increasing, each as small as
 * it can be. */
static void test_dir_off(void **state)
{
	struct node_table *t = *state;
	enum { N = 20000 };
	uint64_t *offs = malloc(N * sizeof(*offs)), a = node_dir_hash(t, "a", 1);
	uint64_t l1[] = { 5, 5, 6, 9, 9, 9, 20 }, w1[] = { 5, 6, 7, 9, 10, 11, 20 };
	uint64_t l2[] = { 3, 4, 4 }, w2[] = { 3, 4, 5 };
	char name[32];
	size_t dup = 0;

	assert_non_null(offs);
	add(t, NODE_ROOT_ID, "a", 1, REG);
	assert_int_equal(node_dir_hash(t, "a", 1), a);
	assert_true(node_dir_hash(t, "b", 1) != a);
	assert_true(node_dir_hash(t, "a\0", 2) != a); /* bytes, not a C string */
	for (int i = 0; i < N; i++) {
		int len = snprintf(name, sizeof(name), "entry_%06d", i);

		offs[i] = node_dir_hash(t, name, (size_t)len);
		assert_true(offs[i] >= NODE_DIR_OFF_MIN && offs[i] <= NODE_DIR_OFF_MAX);
	}
	qsort(offs, N, sizeof(*offs), cmp_u64);
	for (int i = 1; i < N; i++)
		dup += offs[i] == offs[i - 1];
	/* 31 bits: about N^2 / 2^32 = 0.09 pairs expected */
	assert_true(dup <= 3);
	node_dir_offs(offs, N);
	for (int i = 1; i < N; i++)
		assert_true(offs[i] > offs[i - 1]);
	node_dir_offs(l1, 7);
	assert_memory_equal(l1, w1, sizeof(w1));
	node_dir_offs(l2, 3);
	assert_memory_equal(l2, w2, sizeof(w2));
	node_dir_offs(l2, 0); /* nothing to do */
	free(offs);
}

/* Enough nodes to grow both hash tables many times, then free them all. */
static void test_many(void **state)
{
	struct node_table *t = *state;
	enum { N = 20000 };
	static uint64_t ids[N];
	uint64_t dir = add(t, NODE_ROOT_ID, "big", 1, DIR_);
	char name[32];

	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "file_%05d", i);
		ids[i] = add(t, dir, name, 1000 + (uint64_t)i, REG);
	}
	assert_int_equal(node_count(t), N + 2);
	for (int i = 0; i < N; i += 997) {
		char want[48];

		snprintf(want, sizeof(want), "big/file_%05d", i);
		assert_path(t, ids[i], want);
		snprintf(name, sizeof(name), "file_%05d", i);
		assert_int_equal(add(t, dir, name, 1000 + (uint64_t)i, REG), ids[i]);
		node_forget(t, ids[i], 1);
	}
	for (int i = 0; i < N; i++)
		node_forget(t, ids[i], 1);
	assert_int_equal(node_count(t), 2);
	node_forget(t, dir, 1);
	assert_int_equal(node_count(t), 1);
}

/* Directories whose names are known in full (node_known_*). */
static void test_known(void **state)
{
	struct node_table *t = *state;
	atomic_uint_fast64_t seq;
	uint64_t d, e, f;
	char name[32];

	atomic_init(&seq, 7);
	d = add(t, NODE_ROOT_ID, "d", 10, DIR_);
	f = add(t, NODE_ROOT_ID, "f", 11, REG);
	/* No set yet: unknown; adds and removes are no-ops. */
	assert_int_equal(node_known_has(t, d, "x", 1, 0), -1);
	node_known_add(t, d, "x", 1);
	assert_int_equal(node_known_has(t, d, "x", 1, 0), -1);
	/* Only directories, only while the sequence has not moved. */
	assert_int_equal(node_known_begin(t, f, &seq, 7), -ESTALE);
	assert_int_equal(node_known_begin(t, 999, &seq, 7), -ESTALE);
	assert_int_equal(node_known_begin(t, d, &seq, 6), -EAGAIN);
	assert_int_equal(node_known_has(t, d, "x", 1, 0), -1);
	assert_int_equal(node_known_begin(t, d, &seq, 7), 0);
	/* An empty set: every name is missing. */
	assert_int_equal(node_known_has(t, d, "x", 1, 0), 0);
	node_known_add(t, d, "x", 1);
	node_known_add(t, d, "x", 1); /* twice is once */
	node_known_add(t, d, "y\nz", 3);
	assert_int_equal(node_known_has(t, d, "x", 1, 0), 1);
	assert_int_equal(node_known_has(t, d, "y\nz", 3, 0), 1);
	assert_int_equal(node_known_has(t, d, "y", 1, 0), 0);
	/* Names are bytes: a prefix or another directory's name differs. */
	assert_int_equal(node_known_has(t, NODE_ROOT_ID, "x", 1, 0), -1);
	node_known_del(t, d, "x", 1);
	assert_int_equal(node_known_has(t, d, "x", 1, 0), 0);
	assert_int_equal(node_known_has(t, d, "y\nz", 3, 0), 1);
	/* Two sets side by side, then one dropped. */
	e = add(t, d, "e", 12, DIR_);
	assert_int_equal(node_known_begin(t, e, &seq, 7), 0);
	node_known_add(t, e, "x", 1);
	assert_int_equal(node_known_has(t, e, "x", 1, 0), 1);
	node_known_drop(t, d);
	assert_int_equal(node_known_has(t, d, "y\nz", 3, 0), -1);
	assert_int_equal(node_known_has(t, e, "x", 1, 0), 1);
	/* Begin again: empty, whatever was there before. */
	assert_int_equal(node_known_begin(t, d, &seq, 7), 0);
	assert_int_equal(node_known_has(t, d, "y\nz", 3, 0), 0);
	/* Many names make the table grow; all stay findable. */
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		node_known_add(t, d, name, strlen(name));
	}
	for (int i = 0; i < 5000; i += 7) {
		snprintf(name, sizeof(name), "n%d", i);
		assert_int_equal(node_known_has(t, d, name, strlen(name), 0), 1);
	}
	assert_int_equal(node_known_has(t, d, "n5000", 5, 0), 0);
	node_known_drop_all(t);
	assert_int_equal(node_known_has(t, d, "n1", 2, 0), -1);
	assert_int_equal(node_known_has(t, e, "x", 1, 0), -1);
	/* A freed directory takes its set with it (teardown frees the rest). */
	assert_int_equal(node_known_begin(t, e, &seq, 7), 0);
	node_known_add(t, e, "x", 1);
	node_forget(t, e, 1);
	assert_int_equal(node_known_has(t, e, "x", 1, 0), -1);
	/* A set older than the age limit is dropped at the lookup. */
	assert_int_equal(node_known_begin(t, d, &seq, 7), 0);
	node_known_add(t, d, "a", 1);
	assert_int_equal(node_known_has(t, d, "a", 1, 60LL * 1000000000), 1);
	{
		struct timespec ts = { 0, 3 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	assert_int_equal(node_known_has(t, d, "b", 1, 1000 * 1000), -1);
	assert_int_equal(node_known_has(t, d, "a", 1, 0), -1);
	assert_int_equal(node_known_begin(t, d, &seq, 7), 0);
	node_known_add(t, d, "left", 4); /* freed by node_table_free() */
	(void)f;
}

/* A LOOKUP's answer asked for before a change of names through the mount
 * (rename over the name, unlink, create) cannot undo that change. */
/*
 * (server inode, identity) names a file: a name looked up again with its
 * inode number but another birth time or generation (the file system gave
 * the freed number to the file the pod renamed over it) is another node, so
 * the kernel gives it another inode; what either side does not know (0)
 * matches.
 */
static void test_ident(void **state)
{
	struct node_table *t = *state;
	struct node_info info;
	uint64_t a, b, c, d, ids[4];
	const uint64_t i1 = node_ident(1000, 11), i2 = node_ident(1000, 22);

	/* Halves: birth high, generation low; 0 only when unknown. */
	assert_int_equal(node_ident(0, 0), 0);
	assert_int_equal(node_ident(1000, 0) & 0xffffffffu, 0);
	assert_int_not_equal(node_ident(1000, 0), 0);
	assert_int_equal(node_ident(0, 11) >> 32, 0);
	assert_int_not_equal(node_ident(0, 11), 0);
	assert_true(node_same_ident(i1, node_ident(1000, 0)));
	assert_true(node_same_ident(i1, node_ident(0, 11)));
	assert_false(node_same_ident(i1, i2)); /* one tick, two files */
	assert_false(node_same_ident(i1, node_ident(2000, 11)));
	assert_false(node_same_ident(node_ident(1000, 0), node_ident(2000, 11)));
	assert_true(node_same_ident(node_ident(1000, 0), node_ident(0, 22)));
	assert_int_equal(node_ident_fill(node_ident(1000, 0), node_ident(0, 11)), i1);
	assert_int_equal(node_ident_fill(i1, i2), i1);

	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "h", 1, 77, i1, REG, 1, &a), 0);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "h", 1, 77, i1, REG, 1, &b), 0);
	assert_int_equal(b, a);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "h", 1, 77, 0, REG, 1, &b), 0);
	assert_int_equal(b, a); /* a reply without an identity */
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "h", 1, 77, i2, REG, 1, &b), 0);
	assert_int_not_equal(b, a); /* same birth, another generation */
	assert_int_equal(node_info(t, b, &info), 0);
	assert_int_equal(info.ino, 77);
	assert_int_equal(info.ident, i2);
	assert_true(info.attached);
	assert_int_equal(node_info(t, a, &info), 0);
	assert_false(info.attached); /* the name went to the new file */
	assert_int_equal(node_ids_by_ino(t, 77, i2, ids, 4), 1);
	assert_int_equal(ids[0], b);
	assert_int_equal(node_ids_by_ino(t, 77, i1, ids, 4), 0);
	assert_int_equal(node_ids_by_ino(t, 77, 0, ids, 4), 1);
	/* A handle kept for the file i1 goes to its own node, not to the one
	 * of that number the name holds now. */
	assert_int_equal(node_keep(t, b, 77, i1, 500), 0);
	assert_int_equal(node_kept(t, a), 500);
	assert_int_equal(node_kept(t, b), 0);
	assert_int_equal(node_keep(t, b, 77, i2, 501), 0);
	assert_int_equal(node_kept(t, b), 501);
	/* A node made without an identity, or half of one, takes what it is
	 * told next. */
	assert_int_equal(node_lookup(t, NODE_OWN, NODE_ROOT_ID, "m", 1, 88, 0, REG, 1, &c), 0);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "m", 1, 88, node_ident(3000, 0),
				     REG, 1, &d),
			 0);
	assert_int_equal(d, c);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "m", 1, 88, node_ident(0, 33), REG,
				     1, &d),
			 0);
	assert_int_equal(d, c);
	assert_int_equal(node_info(t, c, &info), 0);
	assert_int_equal(info.ident, node_ident(3000, 33));
	/* Hard links join one node only with the same identity. */
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "l1", 2, 99, node_ident(5000, 5),
				     REG, 2, &c),
			 0);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "l2", 2, 99, node_ident(5000, 5),
				     REG, 2, &d),
			 0);
	assert_int_equal(d, c);
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "l3", 2, 99, node_ident(5000, 6),
				     REG, 2, &d),
			 0);
	assert_int_not_equal(d, c);
}

static void test_names_gen(void **state)
{
	struct node_table *t = *state;
	uint64_t g0, g1, x, xnew, id;

	g0 = node_names_gen(t, NODE_ROOT_ID);
	assert_int_not_equal(g0, NODE_OWN);
	assert_int_not_equal(g0, NODE_ANY);
	/* A lookup binds a name and does not move the generation. */
	assert_int_equal(node_lookup(t, g0, NODE_ROOT_ID, "x", 1, 10, 0, REG, 1, &x), 0);
	assert_int_equal(node_names_gen(t, NODE_ROOT_ID), g0);
	/* mv x.new x through the mount, while a LOOKUP of x is out. */
	xnew = add(t, NODE_ROOT_ID, "x.new", 11, REG); /* own create: moves it */
	g1 = node_names_gen(t, NODE_ROOT_ID);
	assert_true(g1 > g0);
	assert_int_equal(node_rename(t, NODE_ROOT_ID, "x.new", 5, NODE_ROOT_ID, "x", 1, false), 0);
	assert_true(node_names_gen(t, NODE_ROOT_ID) > g1);
	/* The answer from before the rename (x is inode 10) is refused... */
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "x", 1, 10, 0, REG, 1, &id), -EAGAIN);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), xnew);
	/* ...one that agrees with the table is counted; so is one without a
	 * check, which takes the name (a third try). */
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "x", 1, 11, 0, REG, 1, &id), 0);
	assert_int_equal(id, xnew);
	assert_int_equal(node_forget(t, id, 1), 1);
	/* A stale ENOENT (from before the create) keeps the created name. */
	assert_int_equal(node_unlink_since(t, g0, NODE_ROOT_ID, "x", 1), -EAGAIN);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), xnew);
	assert_int_equal(node_unlink_since(t, node_names_gen(t, NODE_ROOT_ID), NODE_ROOT_ID, "x", 1), 0);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), 0);
	/* Unbound, but the answer is old: it may predate a create. */
	assert_int_equal(node_unlink_since(t, g0, NODE_ROOT_ID, "x", 1), -EAGAIN);
	/* node_unlink() moves it even for a name the table does not hold. */
	g1 = node_names_gen(t, NODE_ROOT_ID);
	assert_int_equal(node_unlink(t, NODE_ROOT_ID, "nope", 4), 0);
	assert_true(node_names_gen(t, NODE_ROOT_ID) > g1);
	/* NODE_ANY binds whatever the generation. */
	assert_int_equal(node_lookup(t, NODE_ANY, NODE_ROOT_ID, "x", 1, 10, 0, REG, 1, &id), 0);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), id);
	assert_int_not_equal(id, x); /* the renamed-over node stays detached */
	assert_int_equal(node_unlink_since(t, NODE_ANY, NODE_ROOT_ID, "x", 1), 0);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "x", 1), 0);

	/* An own change in flight: a conflicting answer is refused even at
	 * the current generation, until the change ended and moved it. */
	add(t, NODE_ROOT_ID, "y", 20, REG);
	node_names_begin(t, NODE_ROOT_ID, false);
	g1 = node_names_gen(t, NODE_ROOT_ID);
	assert_false(node_names_still(t, NODE_ROOT_ID, g1));
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "y", 1, 21, 0, REG, 1, &id), -EAGAIN);
	assert_int_equal(node_unlink_since(t, g1, NODE_ROOT_ID, "y", 1), -EAGAIN);
	/* One that agrees, or binds a name the table does not hold, is taken. */
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "y", 1, 20, 0, REG, 1, &id), 0);
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "z", 1, 30, 0, REG, 1, &id), 0);
	node_names_end(t, NODE_ROOT_ID, false);
	assert_true(node_names_gen(t, NODE_ROOT_ID) > g1);
	g1 = node_names_gen(t, NODE_ROOT_ID);
	assert_true(node_names_still(t, NODE_ROOT_ID, g1));
	assert_int_equal(node_lookup(t, g1, NODE_ROOT_ID, "y", 1, 21, 0, REG, 1, &id), 0);
	assert_int_equal(node_unlink_since(t, g1, NODE_ROOT_ID, "z", 1), 0);
	assert_int_equal(node_child(t, NODE_ROOT_ID, "z", 1), 0);

	/* Changes in another directory leave this one's answers alone... */
	{
		uint64_t d = add(t, NODE_ROOT_ID, "d", 40, S_IFDIR), e = add(t, NODE_ROOT_ID, "e", 41, S_IFDIR);

		g1 = node_names_gen(t, NODE_ROOT_ID);
		add(t, d, "f", 42, REG);
		assert_int_not_equal(node_unlink(t, d, "f", 1), 0);
		node_names_begin(t, d, false);
		assert_true(node_names_still(t, NODE_ROOT_ID, g1));
		node_names_end(t, d, false);
		assert_int_equal(node_names_gen(t, NODE_ROOT_ID), g1);
		/* ...a rename of a file between two of them too; one of a
		 * directory moves every path below it: every directory's. */
		add(t, d, "g", 43, REG);
		assert_int_equal(node_rename(t, d, "g", 1, e, "g", 1, false), 0);
		assert_int_equal(node_names_gen(t, NODE_ROOT_ID), g1);
		g1 = node_names_gen(t, 0);
		assert_int_equal(node_rename(t, NODE_ROOT_ID, "e", 1, d, "e", 1, false), 0);
		assert_false(node_names_still(t, 0, g1));
		assert_true(node_names_gen(t, e) > g1);
		g1 = node_names_gen(t, 0);
		node_names_begin(t, d, true);
		assert_false(node_names_still(t, 0, g1)); /* moved, and in flight */
		node_names_end(t, d, true);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup_counts_and_forget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replaced_file_gets_new_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_one_ino_many_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kept, setup, teardown),
		cmocka_unit_test(test_link_inside),
		cmocka_unit_test_setup_teardown(test_unlink_and_open_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_detached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ksize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hard_links, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resolve, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_known, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_gen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ident, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
