/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/session.c: a session lives while held and for its
 * grace after the last hold is dropped, then sessions_reap() ends it once
 * (the callback gets its key and id); a new hold of the same id later is a
 * new session with a new key; malformed ids and the SESSION_MAX'th + 1
 * session are refused. Times are given, not read: no test sleeps.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "session.h"
#include "wsb.h"

#define S(lit) lit, sizeof(lit) - 1
#define SEC 1000000000ULL

struct ended {
	unsigned n;
	uint64_t key[8];
	char id[8][WSB_SESSION_ID_MAX + 1];
};

static void on_end(uint64_t key, const char *id, size_t len, void *arg)
{
	struct ended *e = arg;

	assert_true(e->n < 8);
	e->key[e->n] = key;
	memcpy(e->id[e->n], id, len);
	e->id[e->n][len] = '\0';
	e->n++;
}

static void test_grace(void **state)
{
	struct sessions *s;
	struct ended e = {0};
	uint64_t a, a2, b, again;

	(void)state;
	assert_int_equal(sessions_new(10 * SEC, &s), 0);
	assert_int_equal(sessions_hold(s, S("mount-a"), &a), 0);
	assert_int_equal(sessions_hold(s, S("mount-a"), &a2), 0); /* a stream and a call */
	assert_int_equal(a, a2);
	assert_int_equal(sessions_hold(s, S("mount-b"), &b), 0);
	assert_int_not_equal(a, 0);
	assert_int_not_equal(b, 0);
	assert_int_not_equal(a, b);
	assert_int_equal(sessions_count(s), 2);

	/* Held: never ended, however late. */
	assert_int_equal(sessions_reap(s, 1000 * SEC, on_end, &e), 0);
	sessions_drop(s, a, 100 * SEC);
	assert_int_equal(sessions_reap(s, 1000 * SEC, on_end, &e), 0); /* one hold left */
	sessions_drop(s, a, 200 * SEC);
	sessions_drop(s, b, 205 * SEC);
	/* Within the grace of the last drop: kept. */
	assert_int_equal(sessions_reap(s, 209 * SEC, on_end, &e), 0);
	assert_int_equal(e.n, 0);
	/* a's grace is over, b's is not. */
	assert_int_equal(sessions_reap(s, 210 * SEC, on_end, &e), 1);
	assert_int_equal(e.n, 1);
	assert_int_equal(e.key[0], a);
	assert_string_equal(e.id[0], "mount-a");
	assert_int_equal(sessions_count(s), 1);
	/* Ended once only. */
	assert_int_equal(sessions_reap(s, 212 * SEC, on_end, &e), 0);

	/* b held again within its grace: the grace starts over at its drop. */
	assert_int_equal(sessions_hold(s, S("mount-b"), &again), 0);
	assert_int_equal(again, b);
	sessions_drop(s, b, 213 * SEC);
	assert_int_equal(sessions_reap(s, 222 * SEC, on_end, &e), 0);
	assert_int_equal(sessions_reap(s, 223 * SEC, on_end, &e), 1);
	assert_int_equal(e.key[1], b);
	assert_int_equal(sessions_count(s), 0);

	/* The same id after its end is a new session: a new key, so handles
	 * entered under the old one can never be taken for it. */
	assert_int_equal(sessions_hold(s, S("mount-a"), &again), 0);
	assert_int_not_equal(again, a);
	assert_int_not_equal(again, b);

	/* Drops of an unknown key, and one drop too many, change nothing. */
	sessions_drop(s, 12345, 300 * SEC);
	sessions_drop(s, again, 300 * SEC);
	sessions_drop(s, again, 305 * SEC); /* must not restart the grace */
	assert_int_equal(sessions_reap(s, 310 * SEC, on_end, &e), 1);
	/* A clock behind the drop (not monotonic) ends nothing. */
	assert_int_equal(sessions_hold(s, S("x"), &a), 0);
	sessions_drop(s, a, 400 * SEC);
	assert_int_equal(sessions_reap(s, 399 * SEC, on_end, &e), 0);
	sessions_free(s);
}

static void test_zero_grace(void **state)
{
	struct sessions *s;
	uint64_t a;

	(void)state;
	assert_int_equal(sessions_new(0, &s), 0);
	assert_int_equal(sessions_hold(s, S("z"), &a), 0);
	assert_int_equal(sessions_reap(s, 5 * SEC, NULL, NULL), 0);
	sessions_drop(s, a, 5 * SEC);
	assert_int_equal(sessions_reap(s, 5 * SEC, NULL, NULL), 1);
	sessions_free(s);
}

static void test_bad_ids(void **state)
{
	struct sessions *s;
	char long_id[WSB_SESSION_ID_MAX + 1];
	uint64_t k;

	(void)state;
	assert_int_equal(sessions_new(SEC, &s), 0);
	memset(long_id, 'a', sizeof(long_id));
	assert_int_equal(sessions_hold(s, long_id, sizeof(long_id), &k), -EINVAL);
	assert_int_equal(sessions_hold(s, long_id, sizeof(long_id) - 1, &k), 0);
	assert_int_equal(sessions_hold(s, "", 0, &k), -EINVAL);
	assert_int_equal(sessions_hold(s, S("a b"), &k), -EINVAL);
	assert_int_equal(sessions_hold(s, S("a/b"), &k), -EINVAL);
	assert_int_equal(sessions_hold(s, "a\0b", 3, &k), -EINVAL);
	assert_int_equal(sessions_hold(s, S("caf\xc3\xa9"), &k), -EINVAL);
	assert_int_equal(sessions_hold(s, S("Az09-_"), &k), 0);
	assert_int_equal(sessions_count(s), 2);
	sessions_free(s);
}

static void test_limit(void **state)
{
	struct sessions *s;
	struct ended e = {0};
	char id[32];
	uint64_t k, first, second;

	(void)state;
	assert_int_equal(sessions_new(100 * SEC, &s), 0);
	for (unsigned i = 0; i < SESSION_MAX; i++) {
		snprintf(id, sizeof(id), "s%u", i);
		assert_int_equal(sessions_hold(s, id, strlen(id), &k), 0);
		if (i == 0)
			first = k;
		if (i == 1)
			second = k;
	}
	/* Every one held: a new one is refused. */
	assert_int_equal(sessions_hold(s, S("one-more"), &k), -EMFILE);
	/* A known one still holds. */
	assert_int_equal(sessions_hold(s, S("s0"), &k), 0);
	assert_int_equal(k, first);
	/* Two idle, well within their grace: a new one pushes out the one
	 * idle longest, which the next reap ends; the other stays. */
	sessions_drop(s, first, 10 * SEC);
	sessions_drop(s, first, 10 * SEC);
	sessions_drop(s, second, 5 * SEC);
	assert_int_equal(sessions_hold(s, S("one-more"), &k), 0);
	assert_int_equal(sessions_count(s), SESSION_MAX);
	assert_int_equal(sessions_reap(s, 11 * SEC, on_end, &e), 1);
	assert_int_equal(e.key[0], second);
	assert_string_equal(e.id[0], "s1");
	assert_int_equal(sessions_hold(s, S("two-more"), &k), 0); /* pushes out s0 */
	assert_int_equal(sessions_hold(s, S("three-more"), &k), -EMFILE);
	assert_int_equal(sessions_reap(s, 12 * SEC, on_end, &e), 1);
	assert_int_equal(e.key[1], first);
	sessions_free(s);
}

static void test_touch(void **state)
{
	struct sessions *s;
	struct ended e = {0};
	uint64_t a;

	(void)state;
	assert_int_equal(sessions_new(10 * SEC, &s), 0);
	sessions_touch(s, S("unknown"), 1 * SEC); /* makes none */
	assert_int_equal(sessions_count(s), 0);
	assert_int_equal(sessions_hold(s, S("t"), &a), 0);
	sessions_touch(s, S("t"), 50 * SEC); /* held: nothing to restart */
	sessions_drop(s, a, 20 * SEC);
	sessions_touch(s, S("t"), 25 * SEC); /* a call: the grace starts again */
	sessions_touch(s, S("t"), 24 * SEC); /* never back in time */
	sessions_touch(s, S("t x"), 90 * SEC); /* malformed: ignored */
	assert_int_equal(sessions_reap(s, 34 * SEC, on_end, &e), 0);
	assert_int_equal(sessions_reap(s, 35 * SEC, on_end, &e), 1);
	assert_int_equal(e.key[0], a);
	sessions_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grace),
		cmocka_unit_test(test_zero_grace),
		cmocka_unit_test(test_bad_ids),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_touch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
