/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The process table: commands agentd runs, owned by agentd rather than by the
 * call that started them. Knows nothing of gRPC: the services (svc_exec.c)
 * translate requests into an exec_spec and events into messages.
 *
 * A process. exec_spawn() forks and execs a command in its own session and
 * process group (setsid(2): pgid == pid) and, where the kernel lets agentd
 * create cgroups (cgroup v2, a writable subtree), in its own cgroup, which
 * the child joins before exec, so that even a descendant that left the group
 * (setsid) is found. Every signal agentd sends reaches the whole tree: the
 * group (kill(-pgid)) and every member of the cgroup (cgroup.procs; SIGKILL
 * through cgroup.kill). A process gets an id that is never reused while the
 * table lives, and optionally a tag unique among the kept processes.
 *
 * Output. stdout and stderr (or, in PTY mode, the terminal) are read into a
 * journal per stream (journal.h): a bounded ring addressed by byte offset.
 * Consumers are watchers (exec_watch_new()), each with its own cursor per
 * stream, which pull events: output chunks in arrival order, "lost" when
 * their cursor fell out of the ring, and the exit once the output is
 * complete. A lossless watcher (the call that started the command) never
 * loses bytes: reading the pipes pauses while it lags more than a high-water
 * mark, so a command writing faster than its client reads blocks in write(2)
 * as with a pipe. Other watchers never slow the command down; they learn what
 * they missed instead.
 *
 * Life. A process is RUNNING until it was reaped and its output pipes reached
 * EOF (or were closed after a kill); then EXITED with an exec_exit, which is
 * kept for exec_config.exit_keep_ms (and while watchers hold it), at most
 * exec_config.max_kept exited processes (oldest dropped first); their
 * journals hold at most EXEC_KEPT_BYTES_MAX (past it the oldest output that
 * no watcher reads is dropped, journal_forget(), the exit status kept).
 *
 * Timeouts. Wall clock (timeout_ms) and idle (no output for idle_timeout_ms):
 * SIGTERM to the tree, SIGKILL grace_ms later, and grace_ms after that the
 * output pipes are closed even if something outside the tree still holds
 * them.
 *
 * Reaping. The table reaps its children on SIGCHLD (uv_signal). Any other
 * child of agentd that exits (an orphan re-parented to agentd when it is
 * PID 1 or a child subreaper) is reaped too, except a pid a libuv
 * uv_process_t owns (libuv reaps those itself with waitpid(pid)): the reaper
 * peeks with waitid(P_ALL, WNOHANG | WNOWAIT) and waits only for pids that
 * are not libuv's (wait(2), waitid(2)).
 *
 * Also here, because they are unit-tested with the runner: a head-and-tail
 * output capture (exec_capture) and a UTF-8 sanitizer for proto3 strings.
 *
 * Thread safety: everything here runs on the loop thread of the table's
 * loop, except exec_utf8_sanitize() and the exec_capture functions, which
 * touch only their arguments and may run on any thread. Callbacks run from
 * libuv callbacks on that thread, never from inside an exec_* call.
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
struct exec_watch;

/**
 * Longest argument or environment string a command may get, bytes with its
 * terminating NUL: Linux's MAX_ARG_STRLEN (32 pages of 4 KiB; execve(2)
 * "Limits on size of arguments and environment").
 */
#define EXEC_ARG_STRLEN_MAX ((size_t)32 * 4096)

/** Default limit on processes running at once. */
#define EXEC_MAX_PROCESSES_DEFAULT 256
/** Default journal size per stream, bytes. */
#define EXEC_JOURNAL_DEFAULT ((size_t)4 * 1024 * 1024)
/** Smallest and largest journal per stream, bytes. */
#define EXEC_JOURNAL_MIN ((size_t)4096)
#define EXEC_JOURNAL_MAX ((size_t)1024 * 1024 * 1024)
/** Default time an exit status is kept, milliseconds (10 minutes). */
#define EXEC_EXIT_KEEP_DEFAULT_MS ((uint64_t)600 * 1000)
/** Default number of exited processes kept at most. */
#define EXEC_MAX_KEPT_DEFAULT 1024
/**
 * Journal memory of exited processes kept at most, bytes: beyond it the
 * oldest exits are dropped early (their output, and their status, go).
 */
#define EXEC_KEPT_BYTES_MAX ((size_t)256 * 1024 * 1024)
/** Default time between SIGTERM and SIGKILL, milliseconds. */
#define EXEC_KILL_GRACE_MS 2000
/** Largest chunk read from a pipe at once, bytes. */
#define EXEC_READ_CHUNK ((size_t)64 * 1024)
/** Largest exec_write_stdin() chunk, bytes (wsbridge.proto StdinRequest). */
#define EXEC_STDIN_CHUNK_MAX ((size_t)1024 * 1024)
/** Most stdin bytes queued (written but not yet taken by the pipe), bytes. */
#define EXEC_STDIN_QUEUE_MAX ((size_t)8 * 1024 * 1024)
/** Longest tag, bytes. */
#define EXEC_TAG_MAX 128
/** Default PTY size. */
#define EXEC_PTY_ROWS 24
#define EXEC_PTY_COLS 80

/** Output streams of a process. */
enum exec_stream {
	EXEC_STDOUT = 0, /**< stdout; also stderr when combined, the terminal in PTY mode */
	EXEC_STDERR = 1,
};
#define EXEC_NSTREAMS 2

/** Why agentd ended a process; the values are wsbridge.proto's KilledBy. */
enum exec_killed_by {
	EXEC_NOT_KILLED = 0,   /**< it exited, or a signal came from elsewhere */
	EXEC_KILLED_TIMEOUT = 1,
	EXEC_KILLED_IDLE = 2,
	EXEC_KILLED_SIGNAL_CALL = 3,
	EXEC_KILLED_DETACHED = 4,
	EXEC_KILLED_SHUTDOWN = 5,
};

/** How a process ended, as wait(2) reports it plus what agentd did to it. */
struct exec_exit {
	int code;         /**< exit status (0..255) when signal == 0 */
	int signal;       /**< terminating signal number, 0 if it exited */
	bool core_dumped; /**< WCOREDUMP(status) */
	bool timed_out;   /**< a wall-clock or idle timeout fired */
	enum exec_killed_by killed_by;
};

/** Table settings; 0 in a field means its default. */
struct exec_config {
	unsigned max_running;  /**< processes running at once */
	size_t journal_bytes;  /**< journal per stream, EXEC_JOURNAL_MIN..MAX */
	uint64_t exit_keep_ms; /**< how long an exit is kept; UINT64_MAX: 0 ms */
	unsigned max_kept;     /**< exited processes kept at most */
	/**
	 * Put each command in its own cgroup v2 when the kernel allows it,
	 * under <agentd's cgroup>/wsbridge-agentd.<pid>/cmd-<id>; falls back to
	 * the process group alone (logged once at info) when it does not.
	 */
	bool cgroups;
	/**
	 * Soft RLIMIT_NOFILE a command starts with (getrlimit(2)), or 0 to
	 * leave agentd's own: agentd raises its own to the hard limit, and
	 * gives commands back the one it was started with (as systemd does:
	 * select(2) and programs that close every descriptor up to the limit
	 * expect 1024).
	 */
	unsigned long child_nofile;
};

/** What to run. Strings are NUL-terminated and borrowed for the call. */
struct exec_spec {
	/**
	 * argv mode: NULL-terminated array, at least argv[0]; argv[0] is looked
	 * up in PATH (the command's PATH) as execvp(3) does. NULL in shell mode.
	 */
	const char *const *argv;
	/** Shell mode: run as `/bin/sh -c SHELL sh ARGS...`; NULL in argv mode. */
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
	 * borrowed, or -1 for agentd's own cwd. The child fchdir(2)s to it.
	 */
	int cwd_fd;
	/** The cwd as the caller named it, for exec_info (copied); may be NULL. */
	const void *cwd_name;
	size_t cwd_len;
	/** Tag, unique among kept processes, or NULL/"" for none; copied. */
	const char *tag;
	/** Bytes written to stdin first (copied). */
	const void *stdin_data;
	size_t stdin_len;
	/**
	 * Keep stdin open after stdin_data for exec_write_stdin(); otherwise it
	 * is closed after stdin_data (EOF; with no data at all, stdin is
	 * /dev/null). In PTY mode "closed" means the terminal's EOF character
	 * (VEOF, normally ^D) is written.
	 */
	bool stdin_open;
	/**
	 * stdout and stderr share one pipe (as `2>&1`), reported as EXEC_STDOUT
	 * with one offset sequence.
	 */
	bool combine_output;
	/**
	 * Run on a pseudo-terminal (pty(7)): the slave is the command's stdin,
	 * stdout, stderr and controlling terminal; its output is EXEC_STDOUT.
	 */
	bool pty;
	unsigned rows, cols; /**< PTY size; 0 = EXEC_PTY_ROWS x EXEC_PTY_COLS */
	const char *term;    /**< TERM in PTY mode; NULL/"" = xterm-256color */
	uint64_t timeout_ms;      /**< wall clock; 0 = none */
	uint64_t idle_timeout_ms; /**< no output for this long; 0 = none */
	uint64_t grace_ms;        /**< SIGTERM -> SIGKILL; 0 = EXEC_KILL_GRACE_MS */
	/**
	 * Pipe mode: once the command itself was reaped, how long its output
	 * pipes may stay open, held by processes it left running (`server &`),
	 * before it is released (exec_output_held()): its timeouts stop and
	 * those processes run on, their output read into the journal (no
	 * lossless watcher), until they close it or are killed (exec_kill(),
	 * agentd's shutdown); it counts as running until then. 0 = no limit:
	 * the exit waits for the output's EOF, as ssh(1)'s does.
	 */
	uint64_t linger_ms;
	size_t journal_bytes;     /**< per stream; 0 = the table's */
};

/** State of a process. */
enum exec_state { EXEC_RUNNING = 0, EXEC_EXITED = 1 };

/** What exec_get_info() reports; pointers are borrowed from the process. */
struct exec_info {
	uint64_t id;
	int pid;
	const char *tag;            /**< "" when none */
	const char *const *argv;    /**< as run (shell mode: /bin/sh -c S sh A...) */
	size_t argc;
	const void *cwd;            /**< as given in exec_spec.cwd_name */
	size_t cwd_len;
	int64_t start_ns, end_ns;   /**< CLOCK_REALTIME, ns; end 0 while running */
	enum exec_state state;
	struct exec_exit exit;      /**< when EXITED */
	uint64_t bytes[EXEC_NSTREAMS]; /**< bytes written to each stream so far */
	bool pty;
};

/**
 * Create a table on @p loop (borrowed) with settings @p cfg (NULL: all
 * defaults). Starts the SIGCHLD reaper. Returns 0 and sets *ret_table, or
 * -ENOMEM, -EINVAL (a journal size out of range), or what uv_signal_init
 * reported. Loop thread.
 */
int exec_table_new(uv_loop_t *loop, const struct exec_config *cfg, struct exec_table **ret_table);

/**
 * Free the table: running processes are killed (EXEC_KILLED_SHUTDOWN) and
 * every process is dropped; the memory goes with the last of them (keep
 * running the loop until it has no handles). A watcher or exec_ref() still
 * held keeps its process, and so the table, until it is freed. NULL is a
 * no-op. Loop thread.
 */
void exec_table_free(struct exec_table *t);

/** Processes running (spawned, not yet EXITED). Loop thread. */
unsigned exec_table_running(const struct exec_table *t);

/** Processes kept: running and exited. Loop thread. */
unsigned exec_table_count(const struct exec_table *t);

/** The limit on processes running at once. Loop thread. */
unsigned exec_table_max(const struct exec_table *t);

/** The journal size per stream, bytes. Loop thread. */
size_t exec_table_journal_bytes(const struct exec_table *t);

/** exec_kill(p, @p why) every running process. Loop thread. */
void exec_table_kill_all(struct exec_table *t, enum exec_killed_by why);

/**
 * End every running process as a timeout does: SIGTERM to its tree now,
 * SIGKILL after its grace (exec_spec.grace_ms, EXEC_KILL_GRACE_MS by
 * default) if it still runs; its exit says @p why. Loop thread; the loop
 * must run on for the KILL and the reaping (exec_table_running() falls to
 * 0).
 */
void exec_table_terminate_all(struct exec_table *t, enum exec_killed_by why);

/**
 * Kept processes in id order: the first with @p prev NULL, then the one
 * after @p prev. NULL at the end. Loop thread.
 */
struct exec_process *exec_table_next(const struct exec_table *t, const struct exec_process *prev);

/** The kept process with id @p id, or NULL. Loop thread. */
struct exec_process *exec_find(const struct exec_table *t, uint64_t id);

/** The kept process tagged @p tag, or NULL. Loop thread. */
struct exec_process *exec_find_tag(const struct exec_table *t, const char *tag);

/**
 * Open the working directory @p path (@p len bytes, a wire path relative to
 * the root, see resolve.h) for exec_spec.cwd_fd. Returns the fd (O_PATH,
 * O_CLOEXEC; the caller closes it after exec_spawn()) or -errno: -EXDEV when
 * it escapes the root, -ENOENT, -ENOTDIR, -EINVAL (NUL byte), -ENAMETOOLONG.
 * Any thread.
 */
int exec_cwd_open(const struct resolve_root *root, const void *path, size_t len);

/**
 * Check a tag: 1..EXEC_TAG_MAX bytes of printable ASCII other than space,
 * not all digits (a number names a process by id). Returns 0 or -EINVAL.
 * Any thread.
 */
int exec_tag_check(const char *tag);

/**
 * Start a process. On success returns 0 and sets *ret_process, which stays
 * valid while the table keeps the process (until it is dropped after its
 * exit; hold a watcher or exec_ref() to keep it longer). On failure returns
 * -errno and no process exists: -EAGAIN (max_running reached), -EEXIST (tag
 * in use), -EINVAL (neither or both of argv and shell, an env entry without
 * '=', a bad tag, rows/cols > 65535), -ENOENT (no such program), -EACCES
 * (not executable), -ENOTDIR, -E2BIG, -ENOMEM, or what fork(2), execvp(3),
 * fchdir(2), openpty (posix_openpt(3)) reported; exec failures are reported
 * synchronously through a close-on-exec pipe. Loop thread.
 */
int exec_spawn(struct exec_table *t, const struct exec_spec *spec, struct exec_process **ret_process);

/** Take / drop a reference that keeps @p p's memory alive. Loop thread. */
void exec_ref(struct exec_process *p);
void exec_unref(struct exec_process *p);

/** The process's id (never reused in this table). */
uint64_t exec_id(const struct exec_process *p);
/** The OS pid, which is also its process group id. */
int exec_pid(const struct exec_process *p);
/** The tag, "" when none. */
const char *exec_tag(const struct exec_process *p);
/** True once EXITED. */
bool exec_exited(const struct exec_process *p);
/**
 * True when @p p was released (exec_spec.linger_ms): the command itself
 * ended that long ago and processes it left running still hold its output;
 * sets *@p ret_exit to the command's own exit status (code or signal;
 * killed_by and timed_out as known then). Watchers are woken once when it
 * is (their exec_watch_next() gives EXEC_EV_NONE). False before, and once
 * EXITED. Loop thread.
 */
bool exec_output_held(const struct exec_process *p, struct exec_exit *ret_exit);
/** Bytes of stdin queued and not yet written to the command. Loop thread. */
size_t exec_stdin_queued(const struct exec_process *p);
/** Fill @p info (pointers borrowed from @p p). Loop thread. */
void exec_get_info(const struct exec_process *p, struct exec_info *info);

/**
 * Send signal @p sig (1.._NSIG-1) to the whole tree: the process group and,
 * with a cgroup, every member of it (SIGKILL through cgroup.kill). A process
 * that then dies of a signal reports EXEC_KILLED_SIGNAL_CALL (unless a
 * timeout or kill came first). Returns 0, -EINVAL (bad signal), -ESRCH
 * (already exited). Loop thread.
 */
int exec_signal(struct exec_process *p, int sig);

/**
 * Set the PTY size (TIOCSWINSZ on the master; the kernel sends SIGWINCH to
 * the terminal's foreground process group, tty_ioctl(4)). Returns 0,
 * -ENOTTY (not a PTY process), -ESRCH (exited), -EINVAL (0 or > 65535).
 * Loop thread.
 */
int exec_resize(struct exec_process *p, unsigned rows, unsigned cols);

/**
 * Kill now: SIGKILL the tree, close stdin and the output pipes at once (even
 * while paused; no more output is read), stop the timeouts. The exit follows
 * once the process is reaped, with killed_by @p why (unless a reason was set
 * before). No-op once EXITED. Loop thread.
 */
void exec_kill(struct exec_process *p, enum exec_killed_by why);

/**
 * Callback of exec_write_stdin(): @p err is 0 when the bytes went into the
 * pipe (or terminal), -EPIPE when stdin was closed first (the command closed
 * it or exited; some bytes may have been written), -ECANCELED when the table
 * went away.
 */
typedef void (*exec_written_fn)(int err, void *arg);

/**
 * Queue @p len (<= EXEC_STDIN_CHUNK_MAX) bytes of @p data (copied) for the
 * command's stdin and, with @p eof, close it after them (PTY: write VEOF).
 * On 0, @p done runs exactly once, when they were written (an eof-only
 * request completes once stdin is closed). Returns 0, -E2BIG (chunk too
 * large), -ENOBUFS (EXEC_STDIN_QUEUE_MAX queued), -EPIPE (stdin already
 * closed: EOF sent, never opened with stdin_open, or the process exited),
 * -ENOMEM. Loop thread.
 */
int exec_write_stdin(struct exec_process *p, const void *data, size_t len, bool eof,
		     exec_written_fn done, void *arg);

/* ---- watchers ---- */

/** exec_watch_new() flags. */
enum {
	EXEC_WATCH_LOSSLESS = 1,  /**< pause the command rather than lose bytes */
	EXEC_WATCH_EXIT_ONLY = 2, /**< no output events, only the exit */
};

enum exec_event_kind {
	EXEC_EV_NONE = 0, /**< nothing now */
	EXEC_EV_OUTPUT,   /**< len bytes of stream at offset, at data */
	EXEC_EV_LOST,     /**< bytes [offset, offset + len) of stream are gone */
	EXEC_EV_EXITED,   /**< the process ended and all its output was delivered */
};

/** One event from exec_watch_next(). */
struct exec_event {
	enum exec_event_kind kind;
	enum exec_stream stream;
	uint64_t offset;
	size_t len;
	const uint8_t *data; /**< EXEC_EV_OUTPUT: valid until control returns to the loop */
	struct exec_exit exit; /**< EXEC_EV_EXITED */
};

/**
 * Called when exec_watch_next() has something after it last returned
 * EXEC_EV_NONE. May call any exec_* function, and free its own watcher (no
 * other one).
 */
typedef void (*exec_ready_fn)(struct exec_watch *w, void *arg);

/**
 * Watch @p p from byte offsets @p from[EXEC_STDOUT], @p from[EXEC_STDERR]
 * (NULL: from 0). Holds a reference on @p p. After creation call
 * exec_watch_next() until it returns EXEC_EV_NONE; @p ready runs when more
 * is available. Returns 0, -ERANGE when an offset is beyond what the stream
 * has written, -ENOMEM. Loop thread.
 */
int exec_watch_new(struct exec_process *p, const uint64_t *from, unsigned flags,
		   exec_ready_fn ready, void *arg, struct exec_watch **ret);

/**
 * Next event, output chunks at most @p max (>= 1) bytes: output in arrival
 * order across the two streams (at the granularity of reads), EXEC_EV_LOST
 * before output that follows a gap, EXEC_EV_EXITED once after all output,
 * then EXEC_EV_NONE for good. Returns @p ev->kind. Loop thread.
 */
enum exec_event_kind exec_watch_next(struct exec_watch *w, size_t max, struct exec_event *ev);

/**
 * Whether exec_watch_next() would return output (or a gap before output)
 * now, rather than the exit or nothing: a sender that waits for room
 * before output (svc_exec.c) need not wait for a small event. Loop thread.
 */
bool exec_watch_has_output(const struct exec_watch *w);

/** The watcher's process. */
struct exec_process *exec_watch_process(const struct exec_watch *w);

/** Free the watcher (and its reference). NULL is a no-op. Loop thread. */
void exec_watch_free(struct exec_watch *w);

/* ---- ExecuteCommands helpers ---- */

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
