/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Client sessions: which open handles belong to which client, so that a
 * client that vanished (killed with SIGKILL, its host gone) does not keep
 * files open in agentd until agentd exits.
 *
 * A client names its session in the "wsbridge-session" metadata of every call
 * (docs/protocol.md "Sessions"; wsfs sends one id for its whole life). A
 * session is held while a call that makes handles of it runs or a stream of
 * it (its Watch) is open, and every other call of it starts its grace anew
 * (sessions_touch()); once nothing has held or touched it for the grace
 * period (agentd --session-grace), sessions_reap() ends it and agentd
 * releases the handles opened under it. A client that comes back within the
 * grace (a dropped connection, reconnected) finds its handles as it left
 * them.
 *
 * Each session gets an owner key: a nonzero 64-bit number never given to
 * another session in the registry's life. Handles carry the key of the
 * session they were opened under (fsops.h); a key is only ever entered
 * while its session is held, and a session ends only while nothing holds
 * it, so no handle can be entered for a session already ended.
 *
 * Thread safety: every function may be called from any thread concurrently.
 */
#ifndef AGENTD_SESSION_H
#define AGENTD_SESSION_H

#include <stddef.h>
#include <stdint.h>

/** Default agentd --session-grace, seconds. */
#define SESSION_GRACE_DEFAULT_S 60u
/** Shortest agentd --session-grace, seconds: more than a reconnect takes. */
#define SESSION_GRACE_MIN_S 5u
/** Most sessions known at once. A new one past this ends the one that has
 * been idle (not held) longest, at the next sessions_reap(); when every one
 * is held, it is refused. */
#define SESSION_MAX 1024u

struct sessions;

/**
 * Create an empty registry whose sessions end @p grace_ns nanoseconds after
 * the last hold on them is dropped (0: the first sessions_reap() after).
 * Returns 0 and sets *ret, or -ENOMEM.
 */
int sessions_new(uint64_t grace_ns, struct sessions **ret);

/** Free the registry and forget its sessions (no callback). NULL: no-op. */
void sessions_free(struct sessions *s);

/**
 * Hold session @p id (@p len bytes, checked with wsb_session_id_valid()),
 * making it if it is new, for a call or stream of it: the session cannot
 * end until sessions_drop(). Stores its owner key in *ret_key.
 *
 * @return 0; -EINVAL for an id that is not valid; -EMFILE when SESSION_MAX
 *         sessions exist, all of them held, and none is this one.
 */
int sessions_hold(struct sessions *s, const void *id, size_t len, uint64_t *ret_key);

/**
 * A call of session @p id (@p len bytes) arrived at monotonic time
 * @p now_ns: if the session exists and nothing holds it, its grace starts
 * anew. Makes no session. Any thread.
 */
void sessions_touch(struct sessions *s, const void *id, size_t len, uint64_t now_ns);

/**
 * Drop a hold sessions_hold() gave on the session of owner key @p key, at
 * monotonic time @p now_ns (CLOCK_MONOTONIC nanoseconds): the grace starts
 * then once nothing else holds it. An unknown key is ignored.
 */
void sessions_drop(struct sessions *s, uint64_t key, uint64_t now_ns);

/** Called by sessions_reap() for each session it ended, with its owner key
 * and id (@p len bytes, valid during the call only). */
typedef void (*sessions_end_fn)(uint64_t key, const char *id, size_t len, void *arg);

/**
 * End every session that nothing has held or touched for the grace period at
 * monotonic time @p now_ns, and every one sessions_hold() pushed out: forget
 * it and call @p end for it (outside the registry's lock: @p end may take
 * other locks, such as the handle table's). Returns the number of sessions
 * ended.
 */
unsigned sessions_reap(struct sessions *s, uint64_t now_ns, sessions_end_fn end, void *arg);

/** Number of sessions known now (held or in their grace). */
unsigned sessions_count(struct sessions *s);

#endif /* AGENTD_SESSION_H */
