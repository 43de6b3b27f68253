/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * wsfs's nodeid table (node.h): chained hash tables under one mutex, of
 * nodes by nodeid, of nodes by server inode (for hard links), and of names
 * (struct link: parent nodeid + name bytes). The name table's hash is
 * SipHash-2-4 with a random key, since names come from the workspace, which
 * an untrusted agent controls (hash flooding).
 *
 * Runs on whichever thread calls: FUSE worker threads and the watch thread.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "node.h"
#include "wsb.h"

struct node;

/* One name of a node: (parent, name). A directory has at most one. */
struct link {
	struct node *node;
	struct node *parent;
	char *name; /* NUL-terminated */
	size_t len;
	uint64_t hash;
	struct link *name_next; /* by_name chain */
	struct link *next;      /* the node's names, most recently confirmed first */
};

struct node {
	uint64_t id;
	uint64_t nlookup;
	unsigned refs;       /* links naming it as parent + registered open files */
	struct link *links;  /* NULL for the root and for detached nodes */
	unsigned n_links;
	uint64_t ino;
	uint64_t ident; /* node_ident(), 0 unknown: node_same_ident() */
	int64_t inval_ns; /* node_note() */
	bool wrote;       /* node_note() */
	bool told_stale;  /* node_note() invalidated since node_told_set() */
	int64_t ksize;    /* node_ksize_told()'s bound, bytes, when ksize_known */
	bool ksize_known;
	uint32_t mode; /* S_IFMT bits */
	bool in_ino;   /* in by_ino: a named non-directory */
	struct node_seen seen;
	struct node_own *own;  /* node_own_set(), or NULL */
	struct node_attr *attr; /* node_attr_put(), or NULL */
	struct stat *gone;      /* node_gone_set(): a removed directory's, or NULL */
	struct stat *told;      /* node_told_set(), or NULL */
	uint64_t aver;         /* t->attr_clock at the last attr_drop() */
	struct node_fh *files; /* open files, most recent first */
	unsigned n_files;
	bool known;            /* a directory whose names are all in t->known */
	int64_t known_since;   /* CLOCK_MONOTONIC ns when that began */
	struct kname *knames;  /* those names (dnext list) */
	/* agentd's handle of the file, kept when a rename through this mount
	 * replaced its last name (node_keep()); 0 = none. */
	uint64_t kept;
	/* agentd's handle of the file a LOOKUP found, pinned for the OPENs
	 * that follow (node_pin_set()); 0 = none; pin_ns when it was set. */
	uint64_t pin;
	int64_t pin_ns;
	/* As a directory: own changes of its names made (ngen) and in flight
	 * (nbusy); node_names_gen(). */
	uint64_t ngen;
	unsigned nbusy;
	/* CLOCK_MONOTONIC ns of the last node_lookup() that gave it (a reply
	 * of agentd's named it, or an own change made it). */
	int64_t bound_ns;
	struct node *id_next;
	struct node *ino_next;
	uint64_t ino_h; /* ino_hash() of ino, while in_ino */
};

/* Attributes of an own write (node_own_set). */
struct node_own {
	struct stat st;
	uint64_t gen, seq;
	int64_t at_ns;
};

/* Attributes agentd reported for a node (node_attr_*). */
struct node_attr {
	struct stat st;
	uint64_t ver;  /* attr_ver() when they were asked for */
	int64_t at_ns; /* CLOCK_MONOTONIC, when they were asked for */
	uint64_t gen;  /* the generation they hold for, or NODE_ATTR_ANY_GEN */
};

/* A name of a directory whose listing is known in full (node_known_*). */
struct kname {
	uint64_t hash;
	struct node *dir;
	struct kname *hnext;        /* t->known chain */
	struct kname *dnext, *dprev; /* dir->knames list */
	size_t len;
	char name[];
};

struct node_table {
	pthread_mutex_t lock;
	struct node **by_id;
	size_t id_cap; /* power of two */
	size_t count;
	struct node **by_ino;
	size_t ino_cap; /* power of two */
	size_t n_ino;
	struct link **by_name;
	size_t name_cap; /* power of two */
	size_t n_named;
	struct kname **known;
	size_t known_cap; /* power of two */
	size_t n_known;   /* names, in all known directories */
	uint64_t attr_clock; /* bumped by every attr_drop() and node_attr_drop_all() */
	uint64_t attr_all;   /* attr_clock at the last node_attr_drop_all() */
	uint64_t next_id;
	/* Own renames of directories made and in flight: they change the
	 * paths of everything below (node_names_gen()). */
	uint64_t move_gen;
	unsigned move_busy;
	pthread_cond_t names_cond; /* a change in flight ended (CLOCK_MONOTONIC) */
	uint64_t k0, k1; /* SipHash key */
	struct node *root;
	/* Kept handles of nodes freed since the last node_kept_drain(). */
	uint64_t *kept_freed;
	size_t cap_kept_freed;
	/* The counts and the time below are written under lock and read
	 * without it too: the last close and FORGET (node_kept_drain()) and
	 * the gathering thread's every turn (node_pins_due()) ask, and most
	 * often there is nothing, which needs no lock. */
	atomic_size_t n_kept_freed;
	/* Nodes with a pin, and when node_pins_expire() may walk next
	 * (CLOCK_MONOTONIC ns). */
	atomic_size_t n_pins;
	_Atomic int64_t pins_walk_ns;
};

/* ---- hashing ---- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
	do {                                                                   \
		v0 += v1;                                                      \
		v1 = ROTL(v1, 13);                                             \
		v1 ^= v0;                                                      \
		v0 = ROTL(v0, 32);                                             \
		v2 += v3;                                                      \
		v3 = ROTL(v3, 16);                                             \
		v3 ^= v2;                                                      \
		v0 += v3;                                                      \
		v3 = ROTL(v3, 21);                                             \
		v3 ^= v0;                                                      \
		v2 += v1;                                                      \
		v1 = ROTL(v1, 17);                                             \
		v1 ^= v2;                                                      \
		v2 = ROTL(v2, 32);                                             \
	} while (0)

/* SipHash-2-4 (Aumasson, Bernstein 2012) of the 8-byte @p parent followed by @p len bytes. */
static uint64_t name_hash(const struct node_table *t, uint64_t parent, const char *s, size_t len)
{
	uint64_t v0 = 0x736f6d6570736575ULL ^ t->k0, v1 = 0x646f72616e646f6dULL ^ t->k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ t->k0, v3 = 0x7465646279746573ULL ^ t->k1;
	const unsigned char *p = (const unsigned char *)s;
	size_t total = len + 8, i;
	uint64_t m, b;

	m = parent;
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&m, p + i, 8);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	b = (uint64_t)total << 56;
	for (size_t j = 0; i + j < len; j++)
		b |= (uint64_t)p[i + j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- hash tables (table lock held) ---- */

/*
 * Grow a chained table of @cap buckets to twice the size; @next_off is the
 * offset of the chain pointer in an element and @key gives an element's
 * bucket hash. On ENOMEM the table stays as it is (longer chains).
 */
static void grow(void ***tab, size_t *cap, size_t next_off, uint64_t (*key)(const void *))
{
	size_t ncap = *cap * 2;
	void **a = calloc(ncap, sizeof(*a));

	if (!a)
		return;
	for (size_t i = 0; i < *cap; i++) {
		void *e = (*tab)[i], *next;

		for (; e; e = next) {
			size_t h = key(e) & (ncap - 1);

			next = *(void **)((char *)e + next_off);
			*(void **)((char *)e + next_off) = a[h];
			a[h] = e;
		}
	}
	free(*tab);
	*tab = a;
	*cap = ncap;
}

static uint64_t id_key(const void *e)
{
	return mix64(((const struct node *)e)->id);
}

static uint64_t ino_key(const void *e)
{
	return ((const struct node *)e)->ino_h;
}

/* The by_ino hash of server inode number @ino, keyed with the table's
 * secret (a cheap mix, not the name hash's SipHash; agentd never sees a
 * bucket): agentd chooses the numbers, and mix64() alone is a bijection
 * anyone can invert, to fill one bucket. */
static uint64_t ino_hash(const struct node_table *t, uint64_t ino)
{
	return mix64(ino ^ t->k0);
}

/* Nodes of one server inode number that by_ino holds at most: more than a
 * reused number ever has at once (files gone whose nodes the kernel still
 * holds). An agentd that gives one number to thousands of files would make
 * every lookup walk them all under the table's lock; the ones past this are
 * not found by number (a second name of such a file gets a node of its
 * own). */
#define NODE_INO_CHAIN_MAX 64

static uint64_t name_key(const void *e)
{
	return ((const struct link *)e)->hash;
}

static struct node *by_id(struct node_table *t, uint64_t id)
{
	struct node *n = t->by_id[mix64(id) & (t->id_cap - 1)];

	while (n && n->id != id)
		n = n->id_next;
	return n;
}

/* ---- attributes agentd reported (node_attr_*) ---- */

/* What a kept attribute of @n must have been asked for under: it changes
 * with every drop of @n's and every node_attr_drop_all(). */
static uint64_t attr_ver(const struct node_table *t, const struct node *n)
{
	return n->aver > t->attr_all ? n->aver : t->attr_all;
}

/* Forget @n's kept attributes, and make a put asked for before now fail. */
static void attr_drop(struct node_table *t, struct node *n)
{
	n->aver = ++t->attr_clock;
	free(n->attr);
	n->attr = NULL;
}

static void id_insert(struct node_table *t, struct node *n)
{
	size_t h;

	if (t->count >= t->id_cap)
		grow((void ***)&t->by_id, &t->id_cap, offsetof(struct node, id_next), id_key);
	h = mix64(n->id) & (t->id_cap - 1);
	n->id_next = t->by_id[h];
	t->by_id[h] = n;
	t->count++;
}

static void id_remove(struct node_table *t, struct node *n)
{
	struct node **pp = &t->by_id[mix64(n->id) & (t->id_cap - 1)];

	while (*pp && *pp != n)
		pp = &(*pp)->id_next;
	if (*pp) {
		*pp = n->id_next;
		t->count--;
	}
}

static void ino_insert(struct node_table *t, struct node *n)
{
	unsigned same = 0;
	size_t h;

	if (n->in_ino || S_ISDIR(n->mode) || n->ino == 0)
		return;
	if (t->n_ino >= t->ino_cap)
		grow((void ***)&t->by_ino, &t->ino_cap, offsetof(struct node, ino_next), ino_key);
	n->ino_h = ino_hash(t, n->ino);
	h = n->ino_h & (t->ino_cap - 1);
	for (struct node *m = t->by_ino[h]; m; m = m->ino_next)
		if (m->ino == n->ino && ++same >= NODE_INO_CHAIN_MAX)
			return;
	n->ino_next = t->by_ino[h];
	t->by_ino[h] = n;
	t->n_ino++;
	n->in_ino = true;
}

static void ino_remove(struct node_table *t, struct node *n)
{
	struct node **pp;

	if (!n->in_ino)
		return;
	pp = &t->by_ino[n->ino_h & (t->ino_cap - 1)];
	while (*pp && *pp != n)
		pp = &(*pp)->ino_next;
	if (*pp) {
		*pp = n->ino_next;
		t->n_ino--;
	}
	n->in_ino = false;
}

/* A named non-directory node with server inode @ino, identity @ident and type
 * @mode. */
static struct node *by_ino(struct node_table *t, uint64_t ino, uint64_t ident, uint32_t mode)
{
	struct node *n = t->by_ino[ino_hash(t, ino) & (t->ino_cap - 1)];

	while (n && !(n->ino == ino && n->mode == mode && node_same_ident(n->ident, ident)))
		n = n->ino_next;
	return n;
}

static struct link *link_find(struct node_table *t, uint64_t parent, const char *name, size_t len)
{
	uint64_t h = name_hash(t, parent, name, len);
	struct link *l = t->by_name[h & (t->name_cap - 1)];

	while (l && !(l->hash == h && l->parent->id == parent && l->len == len &&
		      memcmp(l->name, name, len) == 0))
		l = l->name_next;
	return l;
}

static void name_insert(struct node_table *t, struct link *l)
{
	size_t h;

	if (t->n_named >= t->name_cap)
		grow((void ***)&t->by_name, &t->name_cap, offsetof(struct link, name_next),
		     name_key);
	h = l->hash & (t->name_cap - 1);
	l->name_next = t->by_name[h];
	t->by_name[h] = l;
	t->n_named++;
}

static void name_remove(struct node_table *t, struct link *l)
{
	struct link **pp = &t->by_name[l->hash & (t->name_cap - 1)];

	while (*pp && *pp != l)
		pp = &(*pp)->name_next;
	if (*pp) {
		*pp = l->name_next;
		l->name_next = NULL;
		t->n_named--;
	}
}

/* ---- names and node life (table lock held) ---- */

static bool attached(const struct node_table *t, const struct node *n)
{
	return n == t->root || n->links != NULL;
}

/* Make @l its node's first (preferred) name. */
static void link_to_front(struct link *l)
{
	struct node *n = l->node;
	struct link **pp = &n->links;

	while (*pp && *pp != l)
		pp = &(*pp)->next;
	if (!*pp || pp == &n->links)
		return;
	*pp = l->next;
	l->next = n->links;
	n->links = l;
}

/*
 * Give @n the name @name (a malloc'd NUL-terminated copy of @len bytes,
 * owned from now on) in @p, as its first name, using the link @l
 * (allocated by the caller).
 */
static void link_add(struct node_table *t, struct link *l, struct node *n, struct node *p,
		     char *name, size_t len)
{
	l->node = n;
	l->parent = p;
	l->name = name;
	l->len = len;
	l->hash = name_hash(t, p->id, name, len);
	l->next = n->links;
	n->links = l;
	n->n_links++;
	p->refs++;
	name_insert(t, l);
	ino_insert(t, n);
}

/*
 * Remove the name @l. Frees nothing but @l: the caller runs maybe_free()
 * on the node and the parent when it is done.
 */
static void link_remove(struct node_table *t, struct link *l)
{
	struct node *n = l->node;
	struct link **pp = &n->links;

	while (*pp && *pp != l)
		pp = &(*pp)->next;
	if (*pp)
		*pp = l->next;
	n->n_links--;
	l->parent->refs--;
	name_remove(t, l);
	if (!n->links)
		ino_remove(t, n); /* detached: never merged with a new name */
	free(l->name);
	free(l);
}

/* Move the name @l to @name (owned from now on) in @p. */
static void link_move(struct node_table *t, struct link *l, struct node *p, char *name, size_t len)
{
	name_remove(t, l);
	l->parent->refs--;
	free(l->name);
	l->parent = p;
	l->name = name;
	l->len = len;
	l->hash = name_hash(t, p->id, name, len);
	p->refs++;
	name_insert(t, l);
	link_to_front(l);
}

/* ---- known directory listings (table lock held) ---- */

static uint64_t kname_key(const void *e)
{
	return ((const struct kname *)e)->hash;
}

static struct kname *kname_find(struct node_table *t, struct node *dir, const char *name,
				size_t len)
{
	uint64_t h = name_hash(t, dir->id, name, len);
	struct kname *k = t->known[h & (t->known_cap - 1)];

	for (; k; k = k->hnext)
		if (k->hash == h && k->dir == dir && k->len == len && memcmp(k->name, name, len) == 0)
			return k;
	return NULL;
}

static void kname_remove(struct node_table *t, struct kname *k)
{
	struct kname **pp = &t->known[k->hash & (t->known_cap - 1)];

	while (*pp != k)
		pp = &(*pp)->hnext;
	*pp = k->hnext;
	if (k->dprev)
		k->dprev->dnext = k->dnext;
	else
		k->dir->knames = k->dnext;
	if (k->dnext)
		k->dnext->dprev = k->dprev;
	t->n_known--;
	free(k);
}

static void known_drop(struct node_table *t, struct node *dir)
{
	while (dir->knames)
		kname_remove(t, dir->knames);
	dir->known = false;
}

/* Add @name to @dir's set; drops the set on ENOMEM or past NODE_KNOWN_MAX. */
static void kname_add(struct node_table *t, struct node *dir, const char *name, size_t len)
{
	struct kname *k;

	if (kname_find(t, dir, name, len))
		return;
	if (t->n_known >= NODE_KNOWN_MAX || !(k = malloc(sizeof(*k) + len))) {
		known_drop(t, dir);
		return;
	}
	if (t->n_known >= t->known_cap)
		grow((void ***)&t->known, &t->known_cap, offsetof(struct kname, hnext), kname_key);
	k->hash = name_hash(t, dir->id, name, len);
	k->dir = dir;
	k->len = len;
	memcpy(k->name, name, len);
	k->hnext = t->known[k->hash & (t->known_cap - 1)];
	t->known[k->hash & (t->known_cap - 1)] = k;
	k->dprev = NULL;
	k->dnext = dir->knames;
	if (dir->knames)
		dir->knames->dprev = k;
	dir->knames = k;
	t->n_known++;
}

/* @n is being freed: its kept handle goes to the drain list (lost if
 * that cannot grow: agentd then holds it until it exits). */
static void kept_free_one(struct node_table *t, uint64_t *h)
{
	if (!*h)
		return;
	if (t->n_kept_freed == t->cap_kept_freed) {
		size_t cap = t->cap_kept_freed ? t->cap_kept_freed * 2 : 16;
		uint64_t *a = realloc(t->kept_freed, cap * sizeof(*a));

		if (!a)
			return;
		t->kept_freed = a;
		t->cap_kept_freed = cap;
	}
	t->kept_freed[t->n_kept_freed++] = *h;
	*h = 0;
}

/* ... and so does its pin (node_pin_set()). */
static void kept_free(struct node_table *t, struct node *n)
{
	kept_free_one(t, &n->kept);
	if (n->pin)
		t->n_pins--;
	kept_free_one(t, &n->pin);
}

/* Free @n, and then its parents, while nothing holds them. */
static void maybe_free(struct node_table *t, struct node *n)
{
	while (n && n != t->root && n->nlookup == 0 && n->refs == 0) {
		struct node *next = NULL;

		while (n->links) {
			struct node *p = n->links->parent;

			link_remove(t, n->links);
			if (!next)
				next = p;
			else if (p != next)
				maybe_free(t, p); /* another hard link's directory */
		}
		known_drop(t, n);
		ino_remove(t, n);
		id_remove(t, n);
		free(n->own);
		free(n->attr);
		free(n->gone);
		free(n->told);
		kept_free(t, n);
		free(n);
		n = next;
	}
}

/* Remove the name @l and free what nothing holds any more. */
static void unname(struct node_table *t, struct link *l)
{
	struct node *n = l->node, *p = l->parent;

	p->refs++; /* p outlives n's release */
	attr_drop(t, n); /* its nlink, ctime */
	link_remove(t, l);
	maybe_free(t, n);
	p->refs--;
	maybe_free(t, p);
}

static char *name_dup(const char *name, size_t len)
{
	char *s = malloc(len + 1);

	if (s) {
		memcpy(s, name, len);
		s[len] = '\0';
	}
	return s;
}

/* ---- public ---- */

bool node_name_ok(const char *name, size_t len)
{
	if (!name || len == 0 || len > NODE_NAME_MAX)
		return false;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return false;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return false;
	return true;
}

int node_table_new(struct node_table **ret)
{
	struct node_table *t = calloc(1, sizeof(*t));
	uint64_t key[2];

	if (!t)
		return -ENOMEM;
	t->id_cap = 64;
	t->ino_cap = 64;
	t->name_cap = 64;
	t->known_cap = 64;
	t->known = calloc(t->known_cap, sizeof(*t->known));
	t->by_id = calloc(t->id_cap, sizeof(*t->by_id));
	t->by_ino = calloc(t->ino_cap, sizeof(*t->by_ino));
	t->by_name = calloc(t->name_cap, sizeof(*t->by_name));
	t->root = calloc(1, sizeof(*t->root));
	if (!t->by_id || !t->by_ino || !t->by_name || !t->root || !t->known) {
		free(t->known);
		free(t->by_id);
		free(t->by_ino);
		free(t->by_name);
		free(t->root);
		free(t);
		return -ENOMEM;
	}
	if (getrandom(key, sizeof(key), GRND_NONBLOCK) != (ssize_t)sizeof(key)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		key[0] = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32));
		key[1] = mix64(key[0] ^ (uint64_t)(uintptr_t)t ^ (uint64_t)ts.tv_sec);
	}
	t->k0 = key[0];
	t->k1 = key[1];
	pthread_mutex_init(&t->lock, NULL);
	wsb_cond_init_mono(&t->names_cond);
	t->root->id = NODE_ROOT_ID;
	t->root->nlookup = 1;
	t->root->mode = S_IFDIR;
	id_insert(t, t->root);
	t->next_id = NODE_ROOT_ID + 1;
	t->move_gen = 1;
	*ret = t;
	return 0;
}

void node_table_free(struct node_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->name_cap; i++) {
		struct link *l = t->by_name[i], *next;

		for (; l; l = next) {
			next = l->name_next;
			free(l->name);
			free(l);
		}
	}
	for (size_t i = 0; i < t->known_cap; i++) {
		struct kname *k = t->known[i], *next;

		for (; k; k = next) {
			next = k->hnext;
			free(k);
		}
	}
	for (size_t i = 0; i < t->id_cap; i++) {
		struct node *n = t->by_id[i], *next;

		for (; n; n = next) {
			next = n->id_next;
			free(n->own);
			free(n->attr);
			free(n->gone);
			free(n->told);
			free(n);
		}
	}
	free(t->kept_freed);
	free(t->known);
	free(t->by_id);
	free(t->by_ino);
	free(t->by_name);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->names_cond);
	free(t);
}

uint64_t node_dir_hash(const struct node_table *t, const char *name, size_t len)
{
	/* Parent UINT64_MAX, no nodeid's: apart from the name table's hashes. */
	uint64_t h = name_hash(t, UINT64_MAX, name, len) >> 33; /* 31 bits */

	return h < NODE_DIR_OFF_MIN ? NODE_DIR_OFF_MIN : h;
}

void node_dir_offs(uint64_t *offs, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (offs[i] <= offs[i - 1])
			offs[i] = offs[i - 1] + 1;
}

size_t node_count(struct node_table *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->count;
	pthread_mutex_unlock(&t->lock);
	return n;
}

/* node_names_gen() of directory @p (NULL: the moves alone). Lock held. */
static uint64_t names_gen(struct node_table *t, const struct node *p)
{
	return (p ? p->ngen : 0) + t->move_gen;
}

uint64_t node_names_gen(struct node_table *t, uint64_t dir)
{
	uint64_t g;

	pthread_mutex_lock(&t->lock);
	g = names_gen(t, dir ? by_id(t, dir) : NULL);
	pthread_mutex_unlock(&t->lock);
	return g;
}

/* begin (@d 1) or end (@d -1) an own change in @dir. */
static void names_fence(struct node_table *t, uint64_t dir, bool move, int d)
{
	struct node *p;

	pthread_mutex_lock(&t->lock);
	p = by_id(t, dir);
	if (p) {
		p->ngen++;
		if (d > 0)
			p->nbusy++;
		else if (p->nbusy)
			p->nbusy--;
	}
	if (move) {
		t->move_gen++;
		if (d > 0)
			t->move_busy++;
		else if (t->move_busy)
			t->move_busy--;
	}
	if (d < 0)
		pthread_cond_broadcast(&t->names_cond);
	pthread_mutex_unlock(&t->lock);
}

void node_names_wait(struct node_table *t, uint64_t dir, unsigned ms)
{
	struct timespec until = wsb_deadline(CLOCK_MONOTONIC, ms);
	struct node *p;

	pthread_mutex_lock(&t->lock);
	while (((p = dir ? by_id(t, dir) : NULL) && p->nbusy) || t->move_busy) {
		if (pthread_cond_timedwait(&t->names_cond, &t->lock, &until) != 0)
			break;
	}
	pthread_mutex_unlock(&t->lock);
}

void node_names_begin(struct node_table *t, uint64_t dir, bool move)
{
	names_fence(t, dir, move, 1);
}

void node_names_end(struct node_table *t, uint64_t dir, bool move)
{
	names_fence(t, dir, move, -1);
}

/* May an answer about a name in directory @p (NULL: the moves alone),
 * asked for at @since, change what the table holds? Lock held. */
static bool names_still(struct node_table *t, const struct node *p, uint64_t since)
{
	return since == NODE_ANY || (since == names_gen(t, p) && !(p && p->nbusy) &&
				     !t->move_busy);
}

bool node_names_still(struct node_table *t, uint64_t dir, uint64_t since)
{
	bool r;

	pthread_mutex_lock(&t->lock);
	r = names_still(t, dir ? by_id(t, dir) : NULL, since);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int node_lookup(struct node_table *t, uint64_t since, uint64_t parent, const char *name,
		size_t len, uint64_t ino, uint64_t ident, uint32_t mode, uint32_t nlink,
		uint64_t *ret_id)
{
	struct node *p, *n = NULL, *fresh = NULL;
	struct link *l, *nl = NULL;
	char *copy = NULL;
	int r = 0;

	if (!node_name_ok(name, len))
		return -EINVAL;
	mode &= S_IFMT;
	pthread_mutex_lock(&t->lock);
	p = by_id(t, parent);
	if (!p || !attached(t, p)) {
		r = -ESTALE;
		goto out;
	}
	if (since == NODE_OWN)
		p->ngen++;
	l = link_find(t, parent, name, len);
	if (l && l->node->ino == ino && l->node->mode == mode &&
	    node_same_ident(l->node->ident, ident)) {
		/* The name still holds the same file. */
		n = l->node;
		n->ident = node_ident_fill(n->ident, ident);
		link_to_front(l);
		goto found;
	}
	if (l && since != NODE_OWN && !names_still(t, p, since)) {
		/* The name holds another file than the answer says, and the
		 * answer may be from before an own change of names. */
		r = -EAGAIN;
		goto out;
	}
	copy = name_dup(name, len);
	nl = calloc(1, sizeof(*nl));
	fresh = calloc(1, sizeof(*fresh));
	if (!copy || !nl || !fresh) {
		r = -ENOMEM;
		goto out;
	}
	p->refs++; /* pinned while names move */
	if (l)
		unname(t, l); /* the name now holds another file */
	/* Another name of the same file (a hard link): the same node, so the
	 * kernel shares one inode, its page cache and its nlink. Only for a
	 * file with several links, and never with a detached node, so that a
	 * reused inode number does not join an unrelated file. Never for a
	 * symlink: the kernel follows its target from the directory of the
	 * name it walked, which must be the node's path (-o
	 * transform_symlinks computes the target from it). */
	if (!S_ISDIR(mode) && !S_ISLNK(mode) && nlink > 1 && ino)
		n = by_ino(t, ino, ident, mode);
	if (!n) {
		n = fresh;
		fresh = NULL;
		n->id = t->next_id++;
		n->ino = ino;
		n->ident = ident;
		n->mode = mode;
		id_insert(t, n);
	}
	link_add(t, nl, n, p, copy, len);
	nl = NULL;
	copy = NULL;
	p->refs--;
found:
	n->nlookup++;
	n->bound_ns = wsb_mono_ns();
	*ret_id = n->id;
out:
	pthread_mutex_unlock(&t->lock);
	free(copy);
	free(nl);
	free(fresh);
	return r;
}

int node_new_detached(struct node_table *t, uint64_t ino, uint64_t ident, uint32_t mode,
		      uint64_t *ret_id)
{
	struct node *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	pthread_mutex_lock(&t->lock);
	n->id = t->next_id++;
	n->ino = ino;
	n->ident = ident;
	n->mode = mode & S_IFMT;
	id_insert(t, n); /* not by_ino: never merged with a name (link_remove()) */
	n->nlookup = 1;
	n->bound_ns = wsb_mono_ns();
	*ret_id = n->id;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

uint64_t node_forget(struct node_table *t, uint64_t id, uint64_t nlookup)
{
	struct node *n;
	uint64_t left = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		if (n == t->root) {
			/* The kernel never forgets the root (FUSE protocol). */
			left = n->nlookup;
		} else {
			n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
			left = n->nlookup;
			maybe_free(t, n);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return left;
}

/* Build the path of @n (by first names), plus "/name" when @name is not NULL. */
static int build_path(struct node_table *t, struct node *n, const char *name, size_t name_len,
		      char **ret, size_t *ret_len)
{
	size_t len = 0, depth = 0, pos;
	struct node *m;
	char *buf;

	for (m = n; m != t->root; m = m->links->parent) {
		if (!m->links)
			return -ESTALE;
		if (++depth > NODE_DEPTH_MAX)
			return -ELOOP;
		len += m->links->len + (len || name ? 1 : 0);
	}
	if (name)
		len += name_len;
	buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	pos = len;
	buf[pos] = '\0';
	if (name) {
		pos -= name_len;
		memcpy(buf + pos, name, name_len);
		if (pos)
			buf[--pos] = '/';
	}
	for (m = n; m != t->root; m = m->links->parent) {
		pos -= m->links->len;
		memcpy(buf + pos, m->links->name, m->links->len);
		if (pos)
			buf[--pos] = '/';
	}
	*ret = buf;
	if (ret_len)
		*ret_len = len;
	return 0;
}

int node_path(struct node_table *t, uint64_t id, char **ret, size_t *ret_len)
{
	struct node *n;
	int r;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	r = n ? build_path(t, n, NULL, 0, ret, ret_len) : -ESTALE;
	pthread_mutex_unlock(&t->lock);
	return r;
}

int node_link_inside(const char *dir, size_t dir_len, const char *target, char **ret)
{
	size_t depth = 0, ups = 0, n = 0, cap, len;
	const char *p, *c, *e;
	bool lead = true, safe = target[0] != '/';
	char *out;

	*ret = NULL;
	for (p = dir; p < dir + dir_len; p = e + 1) {
		e = memchr(p, '/', (size_t)(dir + dir_len - p));
		if (!e)
			e = dir + dir_len;
		depth += e > p;
	}
	for (c = target; *c && safe; c = *e ? e + 1 : e) {
		e = strchrnul(c, '/');
		len = (size_t)(e - c);
		if (len == 2 && c[0] == '.' && c[1] == '.') {
			safe = lead && ++ups <= depth;
		} else if (len && !(len == 1 && c[0] == '.')) {
			lead = false;
		}
	}
	if (safe)
		return 0;
	/* Resolve by words into out: the root's path of the target. */
	cap = dir_len + strlen(target) + 2;
	out = malloc(cap);
	if (!out)
		return -ENOMEM;
	if (target[0] != '/' && dir_len) {
		memcpy(out, dir, dir_len);
		n = dir_len;
	}
	for (c = target; *c; c = *e ? e + 1 : e) {
		e = strchrnul(c, '/');
		len = (size_t)(e - c);
		if (!len || (len == 1 && c[0] == '.'))
			continue;
		if (len == 2 && c[0] == '.' && c[1] == '.') {
			while (n && out[n - 1] != '/')
				n--;
			if (n)
				n--; /* the '/' before the last component */
			continue;
		}
		if (n)
			out[n++] = '/';
		memcpy(out + n, c, len);
		n += len;
	}
	/* From dir: up to the root, then down. */
	len = 3 * depth + n + 2;
	if (len > PATH_MAX) {
		free(out);
		return -ENAMETOOLONG;
	}
	*ret = malloc(len);
	if (!*ret) {
		free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < depth; i++)
		memcpy(*ret + 3 * i, "../", 3);
	len = 3 * depth;
	if (n) {
		memcpy(*ret + len, out, n);
		len += n;
	} else if (depth) {
		len--; /* "../..", no trailing '/' */
	} else {
		(*ret)[len++] = '.';
	}
	(*ret)[len] = '\0';
	free(out);
	return 0;
}

/* The nodeid (parent, name) is bound to, or 0; with @unbind, the name
 * is removed too (node_unlink()). */
static uint64_t child_of(struct node_table *t, uint64_t parent, const char *name, size_t len,
			 bool unbind)
{
	struct link *l;
	uint64_t id = 0;

	if (!node_name_ok(name, len))
		return 0;
	pthread_mutex_lock(&t->lock);
	l = link_find(t, parent, name, len);
	if (l) {
		id = l->node->id;
		if (unbind)
			unname(t, l);
	}
	pthread_mutex_unlock(&t->lock);
	return id;
}

uint64_t node_child(struct node_table *t, uint64_t parent, const char *name, size_t len)
{
	return child_of(t, parent, name, len, false);
}

/* The first detached non-directory of server inode @ino that keeps a
 * handle (@kept) or keeps none; a walk of the whole table. Lock held. */
static struct node *detached_of_ino(struct node_table *t, uint64_t ino, uint64_t ident,
				    bool kept)
{
	for (size_t i = 0; i < t->id_cap; i++)
		for (struct node *m = t->by_id[i]; m; m = m->id_next)
			if (m != t->root && !m->links && !S_ISDIR(m->mode) && m->ino == ino &&
			    node_same_ident(m->ident, ident) && (m->kept != 0) == kept)
				return m;
	return NULL;
}

int node_keep(struct node_table *t, uint64_t id, uint64_t ino, uint64_t ident, uint64_t handle)
{
	struct node *n;
	int r = -ESTALE;

	if (!handle)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (!(n && n != t->root && !S_ISDIR(n->mode) && n->ino == ino &&
	      node_same_ident(n->ident, ident) && !n->kept)) {
		/* A LOOKUP that raced the rename (the kernel's revalidation
		 * takes no directory lock) saw the new file under the name and
		 * detached the node the kernel holds: find it by its inode. */
		n = detached_of_ino(t, ino, ident, false);
	}
	if (n) {
		n->kept = handle;
		r = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

uint64_t node_kept(struct node_table *t, uint64_t id)
{
	struct node *n;
	uint64_t h = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n)
		h = n->kept;
	if (n && !h && n != t->root && !n->links && n->ino) {
		/* A LOOKUP answered before the rename but applied after it
		 * made a second detached node of the replaced file: that one
		 * keeps it. */
		struct node *m = detached_of_ino(t, n->ino, n->ident, true);

		h = m ? m->kept : 0;
	}
	pthread_mutex_unlock(&t->lock);
	return h;
}

uint64_t node_unkeep_named(struct node_table *t, uint64_t id)
{
	struct node *n;
	uint64_t h = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->links && n->kept) {
		h = n->kept;
		n->kept = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return h;
}

uint64_t node_pin_set(struct node_table *t, uint64_t id, uint64_t ino, uint64_t ident,
		      uint64_t handle)
{
	struct node *n;
	uint64_t spare = handle;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n != t->root && S_ISREG(n->mode) && n->ino == ino &&
	    node_same_ident(n->ident, ident)) {
		if (!n->pin) {
			n->pin = handle;
			t->n_pins++;
			spare = 0;
		}
		n->pin_ns = wsb_mono_ns();
	}
	pthread_mutex_unlock(&t->lock);
	return spare;
}

uint64_t node_pin_get(struct node_table *t, uint64_t id, int64_t max_age_ns)
{
	struct node *n;
	uint64_t h = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->pin && wsb_mono_ns() - n->pin_ns < max_age_ns)
		h = n->pin;
	pthread_mutex_unlock(&t->lock);
	return h;
}

bool node_pin_drop(struct node_table *t, uint64_t id, uint64_t handle)
{
	struct node *n;
	bool r = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && handle && n->pin == handle) {
		n->pin = 0;
		t->n_pins--;
		r = true;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

size_t node_pins_expire(struct node_table *t, int64_t max_age_ns, uint64_t *ids, size_t max)
{
	int64_t now = wsb_mono_ns();
	size_t n = 0;

	if (atomic_load_explicit(&t->n_pins, memory_order_relaxed) == 0 ||
	    now < atomic_load_explicit(&t->pins_walk_ns, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&t->lock);
	if (t->n_pins && now >= t->pins_walk_ns) {
		t->pins_walk_ns = now + max_age_ns / 2;
		for (size_t i = 0; i < t->id_cap && n < max; i++) {
			for (struct node *m = t->by_id[i]; m && n < max; m = m->id_next) {
				if (m->pin && now - m->pin_ns >= max_age_ns) {
					ids[n++] = m->pin;
					m->pin = 0;
					t->n_pins--;
				}
			}
		}
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

int64_t node_pins_due(struct node_table *t)
{
	/* A pin set after the load kicks the thread that asks (fs.c). */
	if (atomic_load_explicit(&t->n_pins, memory_order_relaxed) == 0)
		return INT64_MAX;
	return atomic_load_explicit(&t->pins_walk_ns, memory_order_relaxed);
}

size_t node_kept_drain(struct node_table *t, uint64_t *ids, size_t max, bool all)
{
	size_t n = 0;

	/* This thread's own frees are seen; another's, racing, waits for
	 * that thread's call or the next, as it did without the check. */
	if (!all && atomic_load_explicit(&t->n_kept_freed, memory_order_relaxed) == 0)
		return 0;
	pthread_mutex_lock(&t->lock);
	if (all) {
		for (size_t i = 0; i < t->id_cap && n < max; i++) {
			for (struct node *m = t->by_id[i]; m && n < max; m = m->id_next) {
				if (m->kept) {
					ids[n++] = m->kept;
					m->kept = 0;
				}
				if (m->pin && n < max) {
					ids[n++] = m->pin;
					m->pin = 0;
					t->n_pins--;
				}
			}
		}
	}
	while (n < max && t->n_kept_freed)
		ids[n++] = t->kept_freed[--t->n_kept_freed];
	pthread_mutex_unlock(&t->lock);
	return n;
}

int node_child_path(struct node_table *t, uint64_t parent, const char *name, size_t len,
		    char **ret, size_t *ret_len)
{
	struct node *n;
	int r;

	if (!node_name_ok(name, len))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	n = by_id(t, parent);
	r = n ? build_path(t, n, name, len, ret, ret_len) : -ESTALE;
	pthread_mutex_unlock(&t->lock);
	return r;
}

uint64_t node_unlink(struct node_table *t, uint64_t parent, const char *name, size_t len)
{
	struct node *p;

	pthread_mutex_lock(&t->lock);
	p = by_id(t, parent);
	if (p)
		p->ngen++;
	pthread_mutex_unlock(&t->lock);
	return child_of(t, parent, name, len, true);
}

int node_unlink_since(struct node_table *t, uint64_t since, uint64_t parent, const char *name,
		      size_t len)
{
	struct link *l;
	int r = 0;

	if (!node_name_ok(name, len))
		return 0;
	pthread_mutex_lock(&t->lock);
	l = link_find(t, parent, name, len);
	if (!names_still(t, by_id(t, parent), since))
		r = -EAGAIN;
	else if (l)
		unname(t, l);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int node_drop_first_name(struct node_table *t, uint64_t id)
{
	struct node *n;
	int r = -ENOENT;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->n_links > 1) {
		unname(t, n->links);
		r = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* True when @anc is @n or one of its ancestors (by first names). */
static bool is_ancestor(struct node_table *t, struct node *anc, struct node *n)
{
	for (size_t depth = 0; depth <= NODE_DEPTH_MAX; depth++) {
		if (n == anc)
			return true;
		if (n == t->root || !n->links)
			return false;
		n = n->links->parent;
	}
	return false;
}

int node_rename(struct node_table *t, uint64_t oldparent, const char *oldname, size_t oldlen,
		uint64_t newparent, const char *newname, size_t newlen, bool exchange)
{
	struct node *op, *np;
	struct link *src, *dst;
	char *s_name = NULL, *d_name = NULL;
	int r = 0;

	if (!node_name_ok(oldname, oldlen) || !node_name_ok(newname, newlen))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	op = by_id(t, oldparent);
	np = by_id(t, newparent);
	if (op)
		op->ngen++;
	if (np)
		np->ngen++;
	src = op ? link_find(t, oldparent, oldname, oldlen) : NULL;
	dst = np ? link_find(t, newparent, newname, newlen) : NULL;
	if (!src || S_ISDIR(src->node->mode) || (exchange && dst && S_ISDIR(dst->node->mode)))
		t->move_gen++; /* the paths below a directory change */
	if (!op || !np || !attached(t, op) || !attached(t, np)) {
		r = -ESTALE;
		goto out;
	}
	src = link_find(t, oldparent, oldname, oldlen);
	dst = link_find(t, newparent, newname, newlen);
	if (src == dst)
		goto out; /* the same name, or both unknown */
	if (src && dst && src->node == dst->node)
		goto out; /* two links of one file: rename(2) does nothing */
	if (src) {
		attr_drop(t, src->node); /* ctime */
		src->node->bound_ns = wsb_mono_ns(); /* a change gave it the name */
	}
	if (dst) {
		attr_drop(t, dst->node);
		if (exchange)
			dst->node->bound_ns = wsb_mono_ns();
	}
	if ((src && is_ancestor(t, src->node, np)) ||
	    (exchange && dst && is_ancestor(t, dst->node, op))) {
		r = -EINVAL;
		goto out;
	}
	if (src) {
		s_name = name_dup(newname, newlen);
		if (!s_name) {
			r = -ENOMEM;
			goto out;
		}
	}
	if (exchange && dst) {
		d_name = name_dup(oldname, oldlen);
		if (!d_name) {
			free(s_name);
			r = -ENOMEM;
			goto out;
		}
	}
	/* Both parents stay while names move. */
	op->refs++;
	np->refs++;
	if (dst && !exchange) {
		unname(t, dst);
		dst = NULL;
	}
	if (src)
		link_move(t, src, np, s_name, newlen);
	if (dst)
		link_move(t, dst, op, d_name, oldlen);
	op->refs--;
	np->refs--;
	maybe_free(t, op);
	if (np != op)
		maybe_free(t, np);
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

int node_info(struct node_table *t, uint64_t id, struct node_info *ret)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (!n) {
		r = -ESTALE;
	} else {
		ret->ino = n->ino;
		ret->ident = n->ident;
		ret->parent_ino = n == t->root ? n->ino : n->links ? n->links->parent->ino : 0;
		ret->parent = n != t->root && n->links ? n->links->parent->id : 0;
		ret->mode = n->mode;
		ret->nlookup = n->nlookup;
		ret->attached = attached(t, n);
		ret->names = n->n_links;
		ret->open_files = n->n_files;
		ret->seen = n->seen;
		ret->bound_ns = n->bound_ns;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

size_t node_ids_by_ino(struct node_table *t, uint64_t ino, uint64_t ident, uint64_t *ids,
		       size_t max)
{
	struct node *n;
	size_t k = 0;

	pthread_mutex_lock(&t->lock);
	for (n = t->by_ino[ino_hash(t, ino) & (t->ino_cap - 1)]; n && k < max; n = n->ino_next)
		if (n->ino == ino && node_same_ident(n->ident, ident))
			ids[k++] = n->id;
	pthread_mutex_unlock(&t->lock);
	return k;
}

int node_set_ino(struct node_table *t, uint64_t id, uint64_t ino, uint32_t mode)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		ino_remove(t, n);
		n->ino = ino;
		n->mode = mode & S_IFMT;
		if (n->links)
			ino_insert(t, n);
	} else {
		r = -ESTALE;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

void node_seen_set(struct node_table *t, uint64_t id, const struct node_seen *s)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		if (s) {
			n->seen = *s;
		} else {
			memset(&n->seen, 0, sizeof(n->seen));
			attr_drop(t, n);
		}
	}
	pthread_mutex_unlock(&t->lock);
}

void node_seen_advance(struct node_table *t, uint64_t id, const struct node_seen *s)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->seen.valid && n->seen.ino == s->ino && node_same_ident(n->seen.ident, s->ident) &&
	    (n->seen.mtime_ns < s->mtime_ns ||
	     (n->seen.mtime_ns == s->mtime_ns && n->seen.size <= s->size)))
		n->seen = *s;
	pthread_mutex_unlock(&t->lock);
}

void node_note(struct node_table *t, uint64_t id, int64_t inval_ns, bool wrote)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && inval_ns) {
		n->inval_ns = inval_ns;
		n->told_stale = true;
	}
	if (n && wrote)
		n->wrote = true;
	pthread_mutex_unlock(&t->lock);
}

enum ksize_op { KSIZE_GET, KSIZE_TOLD, KSIZE_COVERED, KSIZE_LOWER };

/* The bound of node @id after @op with @size (node.h, "The kernel's i_size");
 * -1 when none is known or @id is unknown. */
static int64_t ksize_op(struct node_table *t, uint64_t id, enum ksize_op op, int64_t size)
{
	struct node *n;
	int64_t k = -1;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		bool known = n->ksize_known;

		if ((op == KSIZE_TOLD && (!known || size < n->ksize)) ||
		    (op == KSIZE_COVERED && (!known || size > n->ksize)) ||
		    (op == KSIZE_LOWER && known && size < n->ksize)) {
			n->ksize = size;
			n->ksize_known = true;
		}
		if (n->ksize_known)
			k = n->ksize;
	}
	pthread_mutex_unlock(&t->lock);
	return k;
}

int64_t node_ksize_told(struct node_table *t, uint64_t id, int64_t size)
{
	return ksize_op(t, id, KSIZE_TOLD, size);
}

void node_ksize_covered(struct node_table *t, uint64_t id, int64_t size)
{
	(void)ksize_op(t, id, KSIZE_COVERED, size);
}

int64_t node_ksize(struct node_table *t, uint64_t id)
{
	return ksize_op(t, id, KSIZE_GET, 0);
}

void node_ksize_lower(struct node_table *t, uint64_t id, int64_t size)
{
	(void)ksize_op(t, id, KSIZE_LOWER, size);
}

int64_t node_noted(struct node_table *t, uint64_t id, bool *ret_wrote)
{
	struct node *n;
	int64_t at = 0;
	bool w = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		at = n->inval_ns;
		w = n->wrote;
	}
	pthread_mutex_unlock(&t->lock);
	if (ret_wrote)
		*ret_wrote = w;
	return at;
}

uint64_t node_attr_clock(struct node_table *t)
{
	uint64_t c;

	pthread_mutex_lock(&t->lock);
	c = t->attr_clock;
	pthread_mutex_unlock(&t->lock);
	return c;
}

uint64_t node_attr_ver(struct node_table *t, uint64_t id)
{
	struct node *n;
	uint64_t v = UINT64_MAX;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n)
		v = attr_ver(t, n);
	pthread_mutex_unlock(&t->lock);
	return v;
}

void node_attr_put_gen(struct node_table *t, uint64_t id, uint64_t ver, const struct stat *st,
		       int64_t at_ns, uint64_t gen)
{
	struct node *n;

	/* inotify reports a change under one name only (inotify(7)): the
	 * other names of a hard-linked file would leave these stale. A
	 * directory's change by the mount itself sends no event that drops
	 * them (fs.c attr_kept()): only with a generation. */
	if (S_ISDIR(st->st_mode) ? gen == NODE_ATTR_ANY_GEN
				 : !S_ISREG(st->st_mode) || st->st_nlink != 1)
		return;
	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && attr_ver(t, n) == ver && attached(t, n) && n->ino == st->st_ino &&
	    node_same_ident(n->ident, (uint64_t)st->st_dev)) {
		if (!n->attr)
			n->attr = malloc(sizeof(*n->attr));
		if (n->attr) {
			n->attr->st = *st;
			n->attr->ver = ver;
			n->attr->at_ns = at_ns;
			n->attr->gen = gen;
		}
	}
	pthread_mutex_unlock(&t->lock);
}

bool node_attr_get_gen(struct node_table *t, uint64_t id, int64_t min_ns, uint64_t gen,
		       struct stat *ret)
{
	struct node *n;
	bool ok = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->attr && n->attr->ver == attr_ver(t, n) && n->attr->at_ns >= min_ns &&
	    (n->attr->gen == NODE_ATTR_ANY_GEN || n->attr->gen == gen)) {
		*ret = n->attr->st;
		ok = true;
	}
	pthread_mutex_unlock(&t->lock);
	return ok;
}

void node_attr_drop(struct node_table *t, uint64_t id)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n)
		attr_drop(t, n);
	pthread_mutex_unlock(&t->lock);
}

/* Drop what is kept for every node of server inode @ino (t->lock held). */
static void attr_drop_ino(struct node_table *t, uint64_t ino)
{
	for (struct node *n = t->by_ino[ino_hash(t, ino) & (t->ino_cap - 1)]; n; n = n->ino_next)
		if (n->ino == ino)
			attr_drop(t, n);
}

void node_attr_drop_ino(struct node_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	attr_drop_ino(t, ino);
	pthread_mutex_unlock(&t->lock);
}

bool node_attr_drop_path(struct node_table *t, const char *path, size_t len)
{
	uint64_t parent, id;
	const char *name;
	size_t name_len;
	struct node *n;

	if (node_resolve(t, path, len, &parent, &id, &name, &name_len) < 0 || !id)
		return false;
	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		attr_drop(t, n);
		/* Other nodes of the file: one made for a name the pod gave
		 * it (a rename the table has not followed). */
		if (n->ino)
			attr_drop_ino(t, n->ino);
	}
	pthread_mutex_unlock(&t->lock);
	return true;
}

void node_attr_drop_all(struct node_table *t)
{
	pthread_mutex_lock(&t->lock);
	t->attr_all = ++t->attr_clock;
	pthread_mutex_unlock(&t->lock);
}

void node_own_set(struct node_table *t, uint64_t id, const struct stat *st, uint64_t gen,
		  uint64_t seq, int64_t now_ns)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && st) {
		if (!n->own)
			n->own = malloc(sizeof(*n->own));
		if (n->own) {
			n->own->st = *st;
			n->own->gen = gen;
			n->own->seq = seq;
			n->own->at_ns = now_ns;
		}
	} else if (n) {
		free(n->own);
		n->own = NULL;
	}
	pthread_mutex_unlock(&t->lock);
}

void node_gone_set(struct node_table *t, uint64_t id, const struct stat *st)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && !n->links && n != t->root && S_ISDIR(st->st_mode) && n->mode == S_IFDIR &&
	    (!n->ino || n->ino == (uint64_t)st->st_ino)) {
		if (!n->gone)
			n->gone = malloc(sizeof(*n->gone));
		if (n->gone)
			*n->gone = *st;
	}
	pthread_mutex_unlock(&t->lock);
}

void node_told_set(struct node_table *t, uint64_t id, const struct stat *st)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && ((S_ISREG(st->st_mode) && (n->mode & S_IFMT) == S_IFREG &&
		   (n->told || n->n_files)) ||
		  (S_ISDIR(st->st_mode) && (n->mode & S_IFMT) == S_IFDIR))) {
		if (!n->told)
			n->told = malloc(sizeof(*n->told));
		if (n->told) {
			*n->told = *st;
			n->told_stale = false;
		}
	}
	pthread_mutex_unlock(&t->lock);
}

void node_told_grow(struct node_table *t, uint64_t id, int64_t end)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->told && S_ISREG(n->told->st_mode) && n->told->st_size < end)
		n->told->st_size = end;
	pthread_mutex_unlock(&t->lock);
}

void node_told_drop(struct node_table *t, uint64_t id)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		free(n->told);
		n->told = NULL;
	}
	pthread_mutex_unlock(&t->lock);
}

/* node_told_get(), and with @fresh only while no node_note() of an
 * invalidation came since the node_told_set(). */
static bool told_get(struct node_table *t, uint64_t id, bool fresh, struct stat *ret)
{
	struct node *n;
	bool have = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->told && (n->n_files || S_ISDIR(n->told->st_mode)) &&
	    !(fresh && n->told_stale)) {
		*ret = *n->told;
		have = true;
	}
	pthread_mutex_unlock(&t->lock);
	return have;
}

bool node_told_get(struct node_table *t, uint64_t id, struct stat *ret)
{
	return told_get(t, id, false, ret);
}

bool node_told_fresh(struct node_table *t, uint64_t id, struct stat *ret)
{
	return told_get(t, id, true, ret);
}

bool node_gone_get(struct node_table *t, uint64_t id, struct stat *ret)
{
	struct node *n;
	bool have = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->gone && !n->links) {
		*ret = *n->gone;
		have = true;
	}
	pthread_mutex_unlock(&t->lock);
	return have;
}

bool node_own_get(struct node_table *t, uint64_t id, uint64_t gen, uint64_t seq, int64_t min_ns,
		  struct stat *ret)
{
	struct node *n;
	bool ok = false;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->own && n->own->gen == gen && n->own->seq == seq && n->own->at_ns >= min_ns) {
		*ret = n->own->st;
		ok = true;
	}
	pthread_mutex_unlock(&t->lock);
	return ok;
}

int node_fh_add(struct node_table *t, uint64_t id, struct node_fh *f)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n) {
		f->nodeid = id;
		f->refs = 1;
		f->prev = NULL;
		f->next = n->files;
		if (n->files)
			n->files->prev = f;
		n->files = f;
		n->n_files++;
		n->refs++;
	} else {
		r = -ESTALE;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

struct node_fh *node_fh_get(struct node_table *t, uint64_t id)
{
	struct node *n;
	struct node_fh *f = NULL;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	if (n && n->files) {
		f = n->files;
		f->refs++;
	}
	pthread_mutex_unlock(&t->lock);
	return f;
}

struct node_fh *node_fh_find(struct node_table *t, uint64_t id,
			     bool (*match)(const struct node_fh *f, void *arg), void *arg)
{
	struct node *n;
	struct node_fh *f;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	for (f = n ? n->files : NULL; f && !match(f, arg); f = f->next)
		;
	if (f)
		f->refs++;
	pthread_mutex_unlock(&t->lock);
	return f;
}

size_t node_fh_each(struct node_table *t, uint64_t id, void (*fn)(struct node_fh *f, void *arg),
		    void *arg)
{
	struct node *n;
	size_t k = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, id);
	for (struct node_fh *f = n ? n->files : NULL; f; f = f->next, k++)
		fn(f, arg);
	pthread_mutex_unlock(&t->lock);
	return k;
}

void node_fh_ref(struct node_table *t, struct node_fh *f)
{
	pthread_mutex_lock(&t->lock);
	f->refs++;
	pthread_mutex_unlock(&t->lock);
}

bool node_fh_put(struct node_table *t, struct node_fh *f)
{
	struct node *n;
	bool last;

	pthread_mutex_lock(&t->lock);
	last = --f->refs == 0;
	if (last) {
		n = by_id(t, f->nodeid);
		if (n) {
			if (f->prev)
				f->prev->next = f->next;
			else
				n->files = f->next;
			if (f->next)
				f->next->prev = f->prev;
			f->prev = f->next = NULL;
			n->n_files--;
			n->refs--;
			maybe_free(t, n);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return last;
}

int node_resolve(struct node_table *t, const char *path, size_t len, uint64_t *ret_parent,
		 uint64_t *ret_id, const char **ret_name, size_t *ret_name_len)
{
	const char *last = NULL;
	size_t last_len = 0, i;
	struct node *cur;

	/* Find the last component first. */
	for (i = 0; i < len;) {
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (j > i && !(j - i == 1 && path[i] == '.')) {
			last = path + i;
			last_len = j - i;
		}
		i = j + 1;
	}
	if (!last || !node_name_ok(last, last_len))
		return -EINVAL;

	pthread_mutex_lock(&t->lock);
	cur = t->root;
	for (i = 0; cur && i < len;) {
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (path + i == last)
			break;
		if (j > i && !(j - i == 1 && path[i] == '.')) {
			struct link *l;

			if (!node_name_ok(path + i, j - i)) {
				pthread_mutex_unlock(&t->lock);
				return -EINVAL;
			}
			l = link_find(t, cur->id, path + i, j - i);
			cur = l ? l->node : NULL;
		}
		i = j + 1;
	}
	if (cur) {
		struct link *l = link_find(t, cur->id, last, last_len);

		*ret_parent = cur->id;
		*ret_id = l ? l->node->id : 0;
	} else {
		*ret_parent = 0;
		*ret_id = 0;
	}
	pthread_mutex_unlock(&t->lock);
	*ret_name = last;
	*ret_name_len = last_len;
	return 0;
}

int node_snapshot(struct node_table *t, struct node_ref **ret, size_t *ret_n)
{
	struct node_ref *a;
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	a = calloc(t->count + t->n_named + 1, sizeof(*a));
	if (!a) {
		pthread_mutex_unlock(&t->lock);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->id_cap; i++) {
		for (struct node *m = t->by_id[i]; m; m = m->id_next) {
			if (!m->links) {
				a[n++].nodeid = m->id;
				continue;
			}
			for (struct link *l = m->links; l; l = l->next) {
				struct node_ref *r = &a[n];

				r->nodeid = m->id;
				r->name = name_dup(l->name, l->len);
				if (!r->name) {
					pthread_mutex_unlock(&t->lock);
					node_snapshot_free(a, n);
					return -ENOMEM;
				}
				r->parent = l->parent->id;
				r->name_len = l->len;
				n++;
			}
		}
	}
	pthread_mutex_unlock(&t->lock);
	*ret = a;
	*ret_n = n;
	return 0;
}

void node_snapshot_free(struct node_ref *refs, size_t n)
{
	for (size_t i = 0; refs && i < n; i++)
		free(refs[i].name);
	free(refs);
}

int node_known_begin(struct node_table *t, uint64_t dir, const atomic_uint_fast64_t *seq,
		     uint64_t seq0)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, dir);
	if (atomic_load(seq) != seq0)
		r = -EAGAIN;
	else if (!n || !S_ISDIR(n->mode))
		r = -ESTALE;
	else if (t->n_known >= NODE_KNOWN_MAX)
		r = -ENOSPC;
	if (r == 0) {
		known_drop(t, n);
		n->known = true;
		n->known_since = wsb_mono_ns();
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

void node_known_add(struct node_table *t, uint64_t dir, const char *name, size_t len)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, dir);
	if (n && n->known)
		kname_add(t, n, name, len);
	pthread_mutex_unlock(&t->lock);
}

void node_known_del(struct node_table *t, uint64_t dir, const char *name, size_t len)
{
	struct node *n;
	struct kname *k;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, dir);
	if (n && n->known && (k = kname_find(t, n, name, len)))
		kname_remove(t, k);
	pthread_mutex_unlock(&t->lock);
}

void node_known_drop(struct node_table *t, uint64_t dir)
{
	struct node *n;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, dir);
	if (n)
		known_drop(t, n);
	pthread_mutex_unlock(&t->lock);
}

void node_known_drop_all(struct node_table *t)
{
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->known_cap; i++) {
		struct kname *k = t->known[i], *next;

		for (; k; k = next) {
			next = k->hnext;
			k->dir->knames = NULL;
			free(k);
		}
		t->known[i] = NULL;
	}
	t->n_known = 0;
	for (size_t i = 0; i < t->id_cap; i++)
		for (struct node *n = t->by_id[i]; n; n = n->id_next)
			n->known = false;
	pthread_mutex_unlock(&t->lock);
}

int node_known_has(struct node_table *t, uint64_t dir, const char *name, size_t len,
		   int64_t max_age_ns)
{
	int64_t now = wsb_mono_ns();
	struct node *n;
	int r = -1;

	pthread_mutex_lock(&t->lock);
	n = by_id(t, dir);
	if (n && n->known && max_age_ns > 0 && now - n->known_since > max_age_ns)
		known_drop(t, n); /* too old to trust */
	if (n && n->known)
		r = kname_find(t, n, name, len) ? 1 : 0;
	pthread_mutex_unlock(&t->lock);
	return r;
}
