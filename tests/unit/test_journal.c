/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/journal.c: offsets from 0, growth up to the limit,
 * eviction of the oldest bytes (start moves, the rest stays byte-exact
 * across the wrap), an append larger than the ring, peek/copy at the edges,
 * and the arrival marks (seq_at, run_end, bounded mark list). Cross-checked
 * against a flat model of everything ever appended.
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

#include "journal.h"

/* Byte i of the model stream. */
static uint8_t model(uint64_t i)
{
	return (uint8_t)(i * 131 + (i >> 8) * 7 + 3);
}

/* Append @p len model bytes starting at the journal's end. */
static void append_model(struct journal *j, size_t len, uint64_t seq)
{
	uint8_t *buf = malloc(len ? len : 1);
	uint64_t end = journal_end(j);
	size_t i;

	assert_non_null(buf);
	for (i = 0; i < len; i++)
		buf[i] = model(end + i);
	assert_int_equal(journal_append(j, buf, len, seq), 0);
	free(buf);
}

/* Everything kept equals the model; offsets outside give nothing. */
static void check_model(const struct journal *j)
{
	uint64_t s = journal_start(j), e = journal_end(j), off;
	uint8_t *buf = malloc(e - s + 1);
	const uint8_t *p;
	size_t n, got;

	assert_non_null(buf);
	assert_true(e - s <= journal_max(j));
	got = journal_copy(j, s, buf, e - s + 1);
	assert_int_equal(got, e - s);
	for (off = s; off < e; off++)
		assert_int_equal(buf[off - s], model(off));
	/* peek walks the same bytes in at most two pieces per wrap */
	for (off = s; off < e; off += n) {
		n = journal_peek(j, off, &p);
		assert_true(n > 0);
		assert_memory_equal(p, buf + (off - s), n);
	}
	assert_int_equal(journal_peek(j, e, &p), 0);
	if (s > 0)
		assert_int_equal(journal_peek(j, s - 1, &p), 0);
	free(buf);
}

static void test_empty(void **state)
{
	struct journal j;
	const uint8_t *p;
	char c;

	journal_init(&j, 100);
	assert_int_equal(journal_start(&j), 0);
	assert_int_equal(journal_end(&j), 0);
	assert_int_equal(journal_peek(&j, 0, &p), 0);
	assert_int_equal(journal_copy(&j, 0, &c, 1), 0);
	assert_int_equal(journal_seq_at(&j, 0), 0);
	assert_int_equal(journal_append(&j, "", 0, 1), 0);
	assert_int_equal(journal_end(&j), 0);
	journal_done(&j);
	journal_done(&j);
}

static void test_fill_and_wrap(void **state)
{
	static const size_t steps[] = { 1, 7, 100, 999, 4096, 5000, 10000 };
	size_t i, k;

	for (k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		struct journal j;
		uint64_t total = 0;

		journal_init(&j, 10000);
		for (i = 0; i < 60; i++) {
			size_t n = steps[k] + (i % 3);

			append_model(&j, n, i + 1);
			total += n;
			assert_int_equal(journal_end(&j), total);
			assert_int_equal(journal_start(&j), total > 10000 ? total - 10000 : 0);
			check_model(&j);
		}
		journal_done(&j);
	}
}

static void test_append_larger_than_ring(void **state)
{
	struct journal j;

	journal_init(&j, 4096);
	append_model(&j, 100, 1);
	append_model(&j, 10000, 2);
	assert_int_equal(journal_end(&j), 10100);
	assert_int_equal(journal_start(&j), 10100 - 4096);
	check_model(&j);
	/* the only mark left that matters is seq 2, covering the start */
	assert_int_equal(journal_seq_at(&j, journal_start(&j)), 2);
	append_model(&j, 3, 3);
	check_model(&j);
	assert_int_equal(journal_seq_at(&j, 10100), 3);
	journal_done(&j);
}

/* journal_forget(): nothing kept, nothing allocated, offsets unchanged;
 * appends go on from the same end. */
static void test_forget(void **state)
{
	struct journal j;
	const uint8_t *p;

	journal_init(&j, 4096);
	append_model(&j, 5000, 1);
	assert_int_equal(journal_start(&j), 5000 - 4096);
	journal_forget(&j);
	assert_int_equal(journal_start(&j), 5000);
	assert_int_equal(journal_end(&j), 5000);
	assert_int_equal(journal_allocated(&j), 0);
	assert_int_equal(journal_peek(&j, 4999, &p), 0);
	assert_int_equal(journal_seq_at(&j, 4999), 0);
	append_model(&j, 10, 2);
	assert_int_equal(journal_start(&j), 5000);
	assert_int_equal(journal_end(&j), 5010);
	check_model(&j);
	journal_forget(&j);
	journal_forget(&j);
	assert_int_equal(journal_end(&j), 5010);
	journal_done(&j);
}

static void test_limit_one_byte(void **state)
{
	struct journal j;

	journal_init(&j, 1);
	append_model(&j, 5, 1);
	assert_int_equal(journal_start(&j), 4);
	check_model(&j);
	append_model(&j, 1, 2);
	assert_int_equal(journal_start(&j), 5);
	check_model(&j);
	journal_done(&j);
}

static void test_marks(void **state)
{
	struct journal a, b;

	/* stdout "AA" (seq 1), stderr "e" (2), stdout "BBB" (3), stderr "ff" (4) */
	journal_init(&a, 1000);
	journal_init(&b, 1000);
	assert_int_equal(journal_append(&a, "AA", 2, 1), 0);
	assert_int_equal(journal_append(&b, "e", 1, 2), 0);
	assert_int_equal(journal_append(&a, "BBB", 3, 3), 0);
	assert_int_equal(journal_append(&b, "ff", 2, 4), 0);
	assert_int_equal(journal_seq_at(&a, 0), 1);
	assert_int_equal(journal_seq_at(&a, 1), 1);
	assert_int_equal(journal_seq_at(&a, 2), 3);
	assert_int_equal(journal_seq_at(&a, 4), 3);
	assert_int_equal(journal_seq_at(&b, 0), 2);
	assert_int_equal(journal_seq_at(&b, 2), 4);
	/* stdout from 0 may run until a byte newer than stderr's next (seq 2) */
	assert_int_equal(journal_run_end(&a, 0, 2), 2);
	assert_int_equal(journal_run_end(&a, 2, 4), 5);
	assert_int_equal(journal_run_end(&b, 0, 3), 1);
	assert_int_equal(journal_run_end(&b, 1, 100), 3);
	/* the same seq twice adds no mark: one run */
	assert_int_equal(journal_append(&a, "C", 1, 3), 0);
	assert_int_equal(journal_run_end(&a, 2, 3), 6);
	journal_done(&a);
	journal_done(&b);
}

static void test_marks_bounded(void **state)
{
	struct journal j;
	uint64_t i, n = JOURNAL_MAX_MARKS * 3;

	journal_init(&j, 1 << 20);
	for (i = 0; i < n; i++)
		assert_int_equal(journal_append(&j, "x", 1, i + 1), 0);
	assert_true(j.mlen <= JOURNAL_MAX_MARKS);
	/* the newest marks are exact; older bytes count as seq 0 */
	assert_int_equal(journal_seq_at(&j, n - 1), n);
	assert_int_equal(journal_seq_at(&j, n - JOURNAL_MAX_MARKS), n - JOURNAL_MAX_MARKS + 1);
	assert_int_equal(journal_seq_at(&j, 0), 0);
	assert_int_equal(journal_run_end(&j, n - 2, n - 1), n - 1);
	journal_done(&j);
}

static void test_marks_pruned_with_bytes(void **state)
{
	struct journal j;
	uint64_t i;

	journal_init(&j, 64);
	for (i = 0; i < 1000; i++)
		append_model(&j, 8, i + 1);
	/* 64 bytes kept: about 8 marks, never thousands */
	assert_true(j.mlen <= 10);
	assert_int_equal(journal_seq_at(&j, journal_start(&j)), 1000 - 64 / 8 + 1);
	check_model(&j);
	journal_done(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_fill_and_wrap),
		cmocka_unit_test(test_append_larger_than_ring),
		cmocka_unit_test(test_limit_one_byte),
		cmocka_unit_test(test_marks),
		cmocka_unit_test(test_marks_bounded),
		cmocka_unit_test(test_marks_pruned_with_bytes),
		cmocka_unit_test(test_forget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
