/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The output journal of one stream of one command: a bounded ring of the
 * most recent bytes, addressed by byte offset within the stream (the offset
 * of the first byte the command ever wrote is 0). Once more than the limit
 * was written, the oldest bytes fall out: journal_start() moves up and a
 * reader asking for an older offset learns how many bytes it lost.
 *
 * Each append carries a sequence number (the caller's arrival order across
 * several journals); the journal keeps a bounded list of "marks" (offset
 * where an append began, its sequence number), so that a reader of two
 * journals (stdout and stderr) can deliver their bytes in the order they
 * arrived (journal_seq_at(), journal_run_end()). Marks beyond
 * JOURNAL_MAX_MARKS are dropped oldest first; bytes older than the oldest
 * mark then count as older than any marked byte.
 *
 * The buffer grows on demand (doubling, from JOURNAL_MIN_ALLOC) up to the
 * limit, so a quiet command costs little.
 *
 * Thread safety: none; a journal is used by one thread (agentd's loop).
 * Units: offsets and sizes in bytes.
 */
#ifndef AGENTD_JOURNAL_H
#define AGENTD_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

/** Most marks kept per journal. */
#define JOURNAL_MAX_MARKS 4096
/** First allocation of the ring, bytes (or the limit if smaller). */
#define JOURNAL_MIN_ALLOC ((size_t)4096)

struct journal_mark {
	uint64_t offset; /**< stream offset where an append began */
	uint64_t seq;    /**< its sequence number */
};

/** A journal; treat the fields as private. */
struct journal {
	uint8_t *buf;        /**< ring of cap bytes, or NULL */
	size_t cap;          /**< bytes allocated */
	size_t max;          /**< limit on bytes kept */
	size_t head;         /**< ring index of the byte at offset start */
	size_t len;          /**< bytes kept */
	uint64_t start;      /**< offset of the oldest byte kept */
	struct journal_mark *marks; /**< ring of mcap marks, in offset order */
	size_t mcap, mhead, mlen;
};

/**
 * Prepare an empty journal that keeps at most @p max bytes (>= 1). Allocates
 * nothing. Never fails.
 */
void journal_init(struct journal *j, size_t max);

/** Free the buffers. Safe on a zeroed or already released journal. */
void journal_done(struct journal *j);

/**
 * Drop every byte kept and free the buffers, keeping the offsets:
 * journal_end() stays, journal_start() moves up to it, so a reader of an
 * older offset learns how many bytes it lost. Appending goes on after it.
 */
void journal_forget(struct journal *j);

/**
 * Append @p len bytes, which get offsets journal_end() .. + len - 1, with
 * sequence number @p seq (non-decreasing across calls; an append with the
 * same seq as the previous one adds no mark). When the limit is exceeded,
 * the oldest bytes are dropped. Returns 0, or -ENOMEM when the ring could not
 * grow: the journal then keeps what fits in the buffer it has (with no buffer
 * at all the bytes are counted as written and lost), so offsets stay right.
 */
int journal_append(struct journal *j, const void *data, size_t len, uint64_t seq);

/** Offset of the oldest byte kept (== journal_end() when none is). */
static inline uint64_t journal_start(const struct journal *j)
{
	return j->start;
}

/** Offset after the newest byte: the number of bytes ever appended. */
static inline uint64_t journal_end(const struct journal *j)
{
	return j->start + j->len;
}

/** Bytes of memory the ring holds now (<= the limit). */
static inline size_t journal_allocated(const struct journal *j)
{
	return j->cap;
}

/** The limit given to journal_init(). */
static inline size_t journal_max(const struct journal *j)
{
	return j->max;
}

/**
 * Contiguous bytes at offset @p off: sets *@p ptr into the ring and returns
 * how many bytes follow there without wrapping (<= end - off), or 0 when
 * @p off is not in [journal_start(), journal_end()). The pointer is valid
 * until the next journal_append() or journal_done().
 */
size_t journal_peek(const struct journal *j, uint64_t off, const uint8_t **ptr);

/**
 * Copy up to @p max bytes from offset @p off into @p out, across the wrap.
 * Returns the number copied (0 if @p off is not kept).
 */
size_t journal_copy(const struct journal *j, uint64_t off, void *out, size_t max);

/**
 * Sequence number of the append that wrote the byte at @p off: that of the
 * last mark at or before @p off, or 0 when no mark is (older than every
 * mark kept, or nothing marked).
 */
uint64_t journal_seq_at(const struct journal *j, uint64_t off);

/**
 * End of the run of bytes from @p off that arrived no later than
 * @p seq_limit: the offset of the first mark after @p off whose seq exceeds
 * @p seq_limit, or journal_end() when there is none. Always > @p off when
 * @p off < journal_end().
 */
uint64_t journal_run_end(const struct journal *j, uint64_t off, uint64_t seq_limit);

#endif /* AGENTD_JOURNAL_H */
