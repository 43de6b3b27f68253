/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Process runner on the libuv loop. Knows nothing of gRPC: the services
 * (svc_exec.c) translate requests into an exec_spec and events into messages.
 *
 * A process is spawned with uv_spawn(3) and UV_PROCESS_DETACHED, so it calls
 * setsid(2) and leads its own process group (pgid == pid). Every signal agentd
 * sends goes to the whole group (kill(-pgid, sig), kill(2)), so children a
 * command starts in the background die with it.
 *
 * Life of a process: exec_spawn() starts it; the consumer's output callback
 * receives stdout and stderr in chunks, each with its byte offset within its
 * stream; the consumer can pause and resume reading (backpressure: a paused
 * pipe fills and the writer blocks). When the process has exited and both
 * output pipes have reached EOF (or were closed by exec_kill() or after the
 * kill grace), the exited callback runs once; after it returns the process
 * object is freed and must not be used. Output is never lost between the
 * exit and EOF: the exit is reported only after the last byte.
 *
 * Timeout (wall clock): SIGTERM to the group, then SIGKILL after
 * EXEC_KILL_GRACE_MS, then, EXEC_KILL_GRACE_MS later, the pipes are closed
 * even if something outside the group still holds them open.
 *
 * Also here, because they are unit-tested with the runner: a head-and-tail
 * output capture (exec_capture) and a UTF-8 sanitizer for proto3 strings.
 *
 * Thread safety: everything here runs on the loop thread of the table's
 * loop, except exec_utf8_sanitize() and the exec_capture functions, which
 * touch only their arguments and may run on any thread.
 */
#ifndef AGENTD_EXEC_H
#define AGENTD_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "resolve.h"

struct exec_table;
struct exec_process;

/** Default limit on processes alive at once (exec_table_new). */
#define EXEC_MAX_PROCESSES_DEFAULT 256
/** Time between SIGTERM and SIGKILL after a timeout, milliseconds. */
#define EXEC_KILL_GRACE_MS 2000
/** Largest chunk an output callback receives, bytes. */
#define EXEC_READ_CHUNK ((size_t)64 * 1024)

/** Output streams of a process. */
enum exec_stream {
	EXEC_STDOUT = 0, /**< stdout, or stdout and stderr when combined */
	EXEC_STDERR = 1,
};
#define EXEC_NSTREAMS 2

/** How a process ended, as wait(2) reports it plus what agentd did to it. */
struct exec_exit {
	int code;         /**< exit status (0..255) when signal == 0 */
	int signal;       /**< terminating signal number, 0 if it exited */
	bool core_dumped; /**< WCOREDUMP(status) */
	bool timed_out;   /**< the timeout fired (SIGTERM, maybe SIGKILL sent) */
	bool killed;      /**< exec_kill() was called */
};

/** What to run. All strings are NUL-terminated C strings, borrowed. */
struct exec_spec {
	/**
	 * argv mode: NULL-terminated array, at least argv[0]; argv[0] is looked
	 * up in PATH as execvp(3) does. NULL in shell mode.
	 */
	const char *const *argv;
	/**
	 * Shell mode: the script, run as `/bin/sh -c SCRIPT sh ARGS...`; NULL in
	 * argv mode.
	 */
	const char *shell;
	/** Shell mode: positional parameters $1..., NULL-terminated, or NULL. */
	const char *const *args;
	/**
	 * "KEY=VALUE" entries added to agentd's environment; an entry replaces
	 * one with the same KEY, and a later entry wins. NULL-terminated, or NULL.
	 */
	const char *const *env;
	/**
	 * Working directory: an O_PATH|O_DIRECTORY fd (from exec_cwd_open()),
	 * borrowed, or -1 for agentd's own cwd. It reaches the child as
	 * "/proc/self/fd/N" and needs /proc.
	 */
	int cwd_fd;
	/**
	 * Bytes written to stdin, then stdin is closed (EOF); copied. With
	 * stdin_len 0 stdin is /dev/null (EOF at once).
	 */
	const void *stdin_data;
	size_t stdin_len;
	/**
	 * true: stdout and stderr share one pipe (as `2>&1`), reported as
	 * EXEC_STDOUT with one offset sequence.
	 */
	bool combine_output;
	/** Wall-clock timeout, milliseconds; 0 = none. */
	uint64_t timeout_ms;
};

/**
 * Callbacks of one process, run on the loop thread from libuv callbacks
 * (never from inside an exec_* call).
 */
struct exec_ops {
	/**
	 * @p len (1..EXEC_READ_CHUNK) bytes of stream @p stream, at byte offset
	 * @p offset of that stream (offsets are contiguous per stream). @p data
	 * is valid only during the call. May call exec_pause(), exec_resume() and
	 * exec_kill().
	 */
	void (*output)(struct exec_process *p, enum exec_stream stream, uint64_t offset,
		       const void *data, size_t len, void *arg);
	/**
	 * The process ended and its output is complete. Runs exactly once, for
	 * every process exec_spawn() returned. @p p is freed when it returns.
	 */
	void (*exited)(struct exec_process *p, const struct exec_exit *ex, void *arg);
};

/**
 * Create a table that owns the processes of @p loop (borrowed) and allows
 * @p max_processes of them at once (0: EXEC_MAX_PROCESSES_DEFAULT). Returns 0
 * and sets *ret_table, or -ENOMEM. Loop thread.
 */
int exec_table_new(uv_loop_t *loop, unsigned max_processes, struct exec_table **ret_table);

/**
 * Free the table. Processes still alive are killed (exec_kill()); their exited
 * callbacks still run, and the table memory goes with the last of them, so
 * keep running the loop until it has no handles. NULL is a no-op. Loop thread.
 */
void exec_table_free(struct exec_table *t);

/** Number of processes alive (spawned, not yet freed). Loop thread. */
unsigned exec_table_count(const struct exec_table *t);

/** The table's limit on processes alive at once. Any thread. */
unsigned exec_table_max(const struct exec_table *t);

/** exec_kill() every process of the table. Loop thread. */
void exec_table_kill_all(struct exec_table *t);

/**
 * Open the working directory @p path (@p len bytes, a wire path relative to
 * the root, see resolve.h) for exec_spec.cwd_fd. Returns the fd (O_PATH,
 * O_CLOEXEC; the caller closes it after exec_spawn()) or -errno: -EXDEV when
 * it escapes the root, -ENOENT, -ENOTDIR, -EINVAL (NUL byte), -ENAMETOOLONG.
 * Any thread.
 */
int exec_cwd_open(const struct resolve_root *root, const void *path, size_t len);

/**
 * Start a process. On success returns 0 and sets *ret_process; @p ops->exited
 * will run exactly once, with @p arg. On failure returns -errno and no process
 * exists and no callback runs: -EAGAIN when the table is full, -EINVAL for a
 * bad spec (neither or both of argv and shell, an env entry without '='),
 * -ENOENT (no such program), -EACCES (not executable), -ENOTDIR, -E2BIG,
 * -ENOMEM, or what fork(2)/execvp(3)/chdir(2) reported (libuv reports exec
 * failures synchronously). Loop thread.
 */
int exec_spawn(struct exec_table *t, const struct exec_spec *spec, const struct exec_ops *ops,
	       void *arg, struct exec_process **ret_process);

/** The process id, which is also its process group id. Loop thread. */
int exec_pid(const struct exec_process *p);

/**
 * Stop reading the output pipes (uv_read_stop) until exec_resume(). Once a
 * pipe is full the process blocks in write(2). Idempotent. Loop thread.
 */
void exec_pause(struct exec_process *p);

/** Resume reading after exec_pause(). Idempotent. Loop thread. */
void exec_resume(struct exec_process *p);

/**
 * Cancel: SIGKILL the whole process group, close stdin and the output pipes at
 * once (even while paused; no more output callbacks run), stop the timeout.
 * The exited callback follows once the process is reaped, with ex->killed.
 * Idempotent. Loop thread.
 */
void exec_kill(struct exec_process *p);

/**
 * Bounded capture of a stream: keeps the first and the last max/2 bytes and
 * counts what falls in between. Used for ExecuteCommands transcripts.
 */
struct exec_capture {
	uint8_t *buf;   /**< head (half bytes) then the tail ring (half bytes) */
	size_t half;    /**< bytes kept at each end */
	size_t head_len;
	size_t tail_len;   /**< bytes in the tail ring, <= half */
	size_t tail_pos;   /**< ring index where the next byte goes */
	uint64_t total;    /**< bytes added so far */
};

/**
 * Prepare @p c to keep at most @p max bytes (rounded down to even, >= 2).
 * Returns 0 or -ENOMEM. Release with exec_capture_done().
 */
int exec_capture_init(struct exec_capture *c, size_t max);

/** Add @p len bytes. Never fails. */
void exec_capture_add(struct exec_capture *c, const void *data, size_t len);

/**
 * Bytes omitted between head and tail: total - head - tail (0 when all was
 * kept).
 */
uint64_t exec_capture_omitted(const struct exec_capture *c);

/**
 * Copy the kept bytes into @p out (room for exec_capture_kept() bytes): the
 * head, then the tail in order. Returns the head length, so the caller can put
 * a marker at that point when exec_capture_omitted() is non-zero.
 */
size_t exec_capture_copy(const struct exec_capture *c, uint8_t *out);

/** Number of bytes exec_capture_copy() writes. */
size_t exec_capture_kept(const struct exec_capture *c);

/** Free the buffer. Safe on a zeroed or already released capture. */
void exec_capture_done(struct exec_capture *c);

/**
 * Copy @p len bytes of @p in to @p out as valid UTF-8: every ill-formed
 * sequence is replaced by U+FFFD (EF BF BD), one per maximal subpart, as the
 * Unicode Standard §3.9 ("U+FFFD Substitution of Maximal Subparts") and
 * Python's decode(errors="replace") do; well-formed input is copied
 * unchanged. With @p replace_nul a NUL byte is replaced by U+FFFD as well
 * (protobuf-c carries a string field as a NUL-terminated char *). @p out
 * needs room for 3 * @p len bytes; it is not NUL-terminated. Returns the
 * number of bytes written. Any thread.
 */
size_t exec_utf8_sanitize(const void *in, size_t len, char *out, bool replace_nul);

#endif /* AGENTD_EXEC_H */
