/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Bounded output ring with byte offsets and arrival marks (see journal.h).
 * Pure memory code, no system calls; runs on whichever thread owns the
 * journal (agentd's loop thread).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"

void journal_init(struct journal *j, size_t max)
{
	memset(j, 0, sizeof(*j));
	j->max = max ? max : 1;
}

void journal_done(struct journal *j)
{
	free(j->buf);
	free(j->marks);
	j->buf = NULL;
	j->marks = NULL;
	j->cap = j->len = j->head = 0;
	j->mcap = j->mlen = j->mhead = 0;
}

void journal_forget(struct journal *j)
{
	j->start += j->len;
	journal_done(j);
}

/* Mark i (0 = oldest) of the mark ring. */
static const struct journal_mark *mark(const struct journal *j, size_t i)
{
	return &j->marks[(j->mhead + i) % j->mcap];
}

/* Drop marks that no kept byte needs: mark i is useless once mark i + 1
 * starts at or before journal_start() (it covers the oldest byte too). */
static void marks_prune(struct journal *j)
{
	while (j->mlen >= 2 && mark(j, 1)->offset <= j->start) {
		j->mhead = (j->mhead + 1) % j->mcap;
		j->mlen--;
	}
}

static void marks_add(struct journal *j, uint64_t offset, uint64_t seq)
{
	struct journal_mark *m;
	size_t ncap, i;

	if (j->mlen && mark(j, j->mlen - 1)->seq == seq)
		return;
	if (j->mlen == j->mcap) {
		if (j->mcap < JOURNAL_MAX_MARKS) {
			ncap = j->mcap ? 2 * j->mcap : 16;
			if (ncap > JOURNAL_MAX_MARKS)
				ncap = JOURNAL_MAX_MARKS;
			m = malloc(ncap * sizeof(*m));
			if (m) {
				for (i = 0; i < j->mlen; i++)
					m[i] = *mark(j, i);
				free(j->marks);
				j->marks = m;
				j->mcap = ncap;
				j->mhead = 0;
			}
		}
		if (j->mlen == j->mcap) {
			if (!j->mcap)
				return; /* no memory for any mark: order degrades */
			/* Full: the oldest mark goes. */
			j->mhead = (j->mhead + 1) % j->mcap;
			j->mlen--;
		}
	}
	j->marks[(j->mhead + j->mlen) % j->mcap] = (struct journal_mark){ offset, seq };
	j->mlen++;
}

/* Grow the ring to hold @p need bytes (capped at max). 0 or -ENOMEM. */
static int grow(struct journal *j, size_t need)
{
	size_t ncap = j->cap ? j->cap : JOURNAL_MIN_ALLOC, first;
	uint8_t *nb;

	while (ncap < need && ncap < j->max)
		ncap = ncap > j->max / 2 ? j->max : ncap * 2;
	if (ncap > j->max)
		ncap = j->max;
	if (ncap <= j->cap)
		return 0;
	nb = malloc(ncap);
	if (!nb)
		return -ENOMEM;
	/* Linearise: the oldest byte goes to index 0. */
	first = j->cap - j->head < j->len ? j->cap - j->head : j->len;
	if (j->len) {
		memcpy(nb, j->buf + j->head, first);
		memcpy(nb + first, j->buf, j->len - first);
	}
	free(j->buf);
	j->buf = nb;
	j->cap = ncap;
	j->head = 0;
	return 0;
}

int journal_append(struct journal *j, const void *data, size_t len, uint64_t seq)
{
	const uint8_t *d = data;
	uint64_t end = journal_end(j);
	size_t need, drop, at, n;
	int r = 0;

	if (!len)
		return 0;
	marks_add(j, end, seq);
	need = j->len + len;
	if (need > j->cap && j->cap < j->max && grow(j, need) < 0) {
		/* Keep what the buffer we have can hold. */
		r = -ENOMEM;
		j->max = j->cap ? j->cap : 1;
	}
	if (!j->cap) {
		/* Nothing to keep it in: the bytes are written and lost. */
		j->start = end + len;
		j->len = 0;
		marks_prune(j);
		return r;
	}
	if (len >= j->cap) {
		/* Only the last cap bytes survive. */
		memcpy(j->buf, d + len - j->cap, j->cap);
		j->head = 0;
		j->len = j->cap;
		j->start = end + len - j->cap;
		marks_prune(j);
		return r;
	}
	if (need > j->cap) {
		drop = need - j->cap;
		j->head = (j->head + drop) % j->cap;
		j->len -= drop;
		j->start += drop;
	}
	at = (j->head + j->len) % j->cap;
	n = j->cap - at < len ? j->cap - at : len;
	memcpy(j->buf + at, d, n);
	memcpy(j->buf, d + n, len - n);
	j->len += len;
	marks_prune(j);
	return r;
}

size_t journal_peek(const struct journal *j, uint64_t off, const uint8_t **ptr)
{
	size_t rel, at, n;

	if (off < j->start || off >= journal_end(j))
		return 0;
	rel = (size_t)(off - j->start);
	at = (j->head + rel) % j->cap;
	n = j->len - rel;
	if (n > j->cap - at)
		n = j->cap - at;
	*ptr = j->buf + at;
	return n;
}

size_t journal_copy(const struct journal *j, uint64_t off, void *out, size_t max)
{
	uint8_t *o = out;
	const uint8_t *p;
	size_t got = 0, n;

	while (got < max && (n = journal_peek(j, off, &p)) > 0) {
		if (n > max - got)
			n = max - got;
		memcpy(o + got, p, n);
		got += n;
		off += n;
	}
	return got;
}

/* Index of the first mark with offset > @p off (mlen if none). */
static size_t mark_after(const struct journal *j, uint64_t off)
{
	size_t lo = 0, hi = j->mlen, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (mark(j, mid)->offset <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t journal_seq_at(const struct journal *j, uint64_t off)
{
	size_t i = mark_after(j, off);

	return i ? mark(j, i - 1)->seq : 0;
}

uint64_t journal_run_end(const struct journal *j, uint64_t off, uint64_t seq_limit)
{
	size_t lo = mark_after(j, off), hi = j->mlen, mid;

	/* seq is non-decreasing along the marks: binary search. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (mark(j, mid)->seq <= seq_limit)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < j->mlen ? mark(j, lo)->offset : journal_end(j);
}
