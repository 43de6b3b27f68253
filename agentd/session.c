/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Client sessions (session.h). A short list under one mutex: a registry
 * holds one session per client process (wsfs mount), and SESSION_MAX
 * bounds the walk.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "wsb.h"

struct session {
	struct session *next;
	uint64_t key;
	unsigned holds;          /* calls and streams of it now */
	uint64_t idle_since_ns;  /* when holds last fell to 0 */
	size_t len;
	char id[WSB_SESSION_ID_MAX];
};

struct sessions {
	pthread_mutex_t lock;
	uint64_t grace_ns;
	uint64_t next_key;       /* under lock */
	unsigned count;          /* under lock */
	struct session *head;    /* under lock */
	struct session *evicted; /* pushed out, for sessions_reap(); under lock */
};

int sessions_new(uint64_t grace_ns, struct sessions **ret)
{
	struct sessions *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->grace_ns = grace_ns;
	s->next_key = 1;
	*ret = s;
	return 0;
}

void sessions_free(struct sessions *s)
{
	struct session *e, *n;

	if (!s)
		return;
	for (e = s->head; e; e = n) {
		n = e->next;
		free(e);
	}
	for (e = s->evicted; e; e = n) {
		n = e->next;
		free(e);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* The session of @id, or NULL. Lock held. */
static struct session *find(struct sessions *s, const void *id, size_t len)
{
	struct session *e;

	for (e = s->head; e; e = e->next) {
		if (e->len == len && memcmp(e->id, id, len) == 0)
			break;
	}
	return e;
}

/* Move the session idle longest to the evicted list; false when every one
 * is held. Lock held. */
static bool evict_one(struct sessions *s)
{
	struct session **pp, **oldest = NULL, *e;

	for (pp = &s->head; (e = *pp); pp = &e->next) {
		if (e->holds == 0 && (!oldest || e->idle_since_ns < (*oldest)->idle_since_ns))
			oldest = pp;
	}
	if (!oldest)
		return false;
	e = *oldest;
	*oldest = e->next;
	s->count--;
	e->next = s->evicted;
	s->evicted = e;
	return true;
}

int sessions_hold(struct sessions *s, const void *id, size_t len, uint64_t *ret_key)
{
	struct session *e;

	if (!wsb_session_id_valid(id, len))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	e = find(s, id, len);
	if (!e) {
		if ((s->count >= SESSION_MAX && !evict_one(s)) || !(e = calloc(1, sizeof(*e)))) {
			bool full = s->count >= SESSION_MAX;

			pthread_mutex_unlock(&s->lock);
			return full ? -EMFILE : -ENOMEM;
		}
		e->key = s->next_key++;
		e->len = len;
		memcpy(e->id, id, len);
		e->next = s->head;
		s->head = e;
		s->count++;
	}
	e->holds++;
	*ret_key = e->key;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void sessions_touch(struct sessions *s, const void *id, size_t len, uint64_t now_ns)
{
	struct session *e;

	if (!wsb_session_id_valid(id, len))
		return;
	pthread_mutex_lock(&s->lock);
	e = find(s, id, len);
	if (e && e->holds == 0 && now_ns > e->idle_since_ns)
		e->idle_since_ns = now_ns;
	pthread_mutex_unlock(&s->lock);
}

void sessions_drop(struct sessions *s, uint64_t key, uint64_t now_ns)
{
	pthread_mutex_lock(&s->lock);
	for (struct session *e = s->head; e; e = e->next) {
		if (e->key != key)
			continue;
		if (e->holds && --e->holds == 0)
			e->idle_since_ns = now_ns;
		break;
	}
	pthread_mutex_unlock(&s->lock);
}

unsigned sessions_reap(struct sessions *s, uint64_t now_ns, sessions_end_fn end, void *arg)
{
	struct session *ended = NULL, **pp, *e;
	unsigned n = 0;

	pthread_mutex_lock(&s->lock);
	ended = s->evicted;
	s->evicted = NULL;
	for (pp = &s->head; (e = *pp);) {
		if (e->holds == 0 && now_ns - e->idle_since_ns >= s->grace_ns &&
		    now_ns >= e->idle_since_ns) {
			*pp = e->next;
			s->count--;
			e->next = ended;
			ended = e;
			continue;
		}
		pp = &e->next;
	}
	pthread_mutex_unlock(&s->lock);
	for (; ended; ended = e) {
		e = ended->next;
		if (end)
			end(ended->key, ended->id, ended->len, arg);
		free(ended);
		n++;
	}
	return n;
}

unsigned sessions_count(struct sessions *s)
{
	unsigned n;

	pthread_mutex_lock(&s->lock);
	n = s->count;
	pthread_mutex_unlock(&s->lock);
	return n;
}
