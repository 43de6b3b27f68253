/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Conventions shared by every wsbridge binary: how an errno crosses the wire
 * (its name in the "wsbridge-errno" trailer, plus a gRPC status code derived
 * from it), gRPC status names, and the logger.
 *
 * Nothing here includes a grpc header; status codes are the numeric values of
 * the gRPC status codes (grpc/status.h, doc/statuscodes.md), which are part of
 * the wire protocol and never change.
 *
 * Thread safety: every function here may be called from any thread.
 */
#ifndef WSB_H
#define WSB_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <protobuf-c/protobuf-c.h>

/** gRPC status codes (doc/statuscodes.md in grpc/grpc). */
enum wsb_status {
	WSB_OK = 0,
	WSB_CANCELLED = 1,
	WSB_UNKNOWN = 2,
	WSB_INVALID_ARGUMENT = 3,
	WSB_DEADLINE_EXCEEDED = 4,
	WSB_NOT_FOUND = 5,
	WSB_ALREADY_EXISTS = 6,
	WSB_PERMISSION_DENIED = 7,
	WSB_RESOURCE_EXHAUSTED = 8,
	WSB_FAILED_PRECONDITION = 9,
	WSB_ABORTED = 10,
	WSB_OUT_OF_RANGE = 11,
	WSB_UNIMPLEMENTED = 12,
	WSB_INTERNAL = 13,
	WSB_UNAVAILABLE = 14,
	WSB_DATA_LOSS = 15,
	WSB_UNAUTHENTICATED = 16,
};

/** Name of the trailing-metadata key that carries the errno name. */
#define WSB_ERRNO_TRAILER "wsbridge-errno"

/** Name of the request-metadata key that names the caller's session
 * (docs/protocol.md "Sessions"). */
#define WSB_SESSION_MD "wsbridge-session"
/** Longest session id, bytes. */
#define WSB_SESSION_ID_MAX 64u

/**
 * Name of a gRPC status code ("NOT_FOUND"), or "UNKNOWN_STATUS" for a value
 * outside 0..16. Returns a static string.
 */
const char *wsb_status_name(int code);

/**
 * POSIX name of a positive errno value ("ENOENT"), or NULL if the value is not
 * in the table (every errno Linux's errno(3) lists is). Returns a static string.
 */
const char *wsb_errno_name(int err);

/**
 * Positive errno for a POSIX errno name, as carried in the trailer. Returns 0
 * for NULL, an empty string or a name not in the table.
 */
int wsb_errno_from_name(const char *name);

/**
 * gRPC status code that stands for a failure with positive errno @p err, per
 * docs/protocol.md: ENOENT/ENOTDIR -> NOT_FOUND, EEXIST/ENOTEMPTY ->
 * ALREADY_EXISTS/FAILED_PRECONDITION, EACCES/EPERM/EXDEV/EROFS ->
 * PERMISSION_DENIED, ENOSPC/EMFILE/ENFILE/EDQUOT/EFBIG -> RESOURCE_EXHAUSTED,
 * EINVAL/ENAMETOOLONG/ELOOP -> INVALID_ARGUMENT, ... ; anything else UNKNOWN.
 * 0 maps to OK.
 */
int wsb_status_from_errno(int err);

/**
 * Best positive errno for a status code that came without a trailer (for
 * example from gRPC itself): UNAVAILABLE -> ENOTCONN, DEADLINE_EXCEEDED ->
 * ETIMEDOUT, NOT_FOUND -> ENOENT, PERMISSION_DENIED -> EACCES,
 * UNAUTHENTICATED -> EACCES, UNIMPLEMENTED -> ENOSYS, RESOURCE_EXHAUSTED ->
 * ENOSPC... anything else EIO. OK maps to 0.
 */
int wsb_errno_from_status(int code);

/** Log levels, as syslog(3) numbers them. */
enum wsb_log_level {
	WSB_LOG_ERR = 3,
	WSB_LOG_WARNING = 4,
	WSB_LOG_NOTICE = 5,
	WSB_LOG_INFO = 6,
	WSB_LOG_DEBUG = 7,
};

/**
 * Set the program name printed before each line and the most verbose level
 * that is printed (default WSB_LOG_NOTICE). Call once at start-up, before
 * other threads exist.
 */
void wsb_log_init(const char *progname, int level);

/**
 * Have glibc's malloc keep message-sized buffers (up to 4 MiB) in the heap
 * for reuse: mallopt(3) M_MMAP_THRESHOLD 4 MiB and M_TRIM_THRESHOLD 16 MiB
 * (setting either also turns glibc's dynamic threshold off). With the
 * defaults (128 KiB, raised as mmap'ed chunks are freed; a heap trimmed
 * back once 128 KiB lie free at its top) each message of up to 1 MiB (a
 * Read, a Write, exec output) is flattened and unpacked into memory fresh
 * from mmap(2) or just given back by a trim, whose pages fault in and are
 * zeroed again every time: it halved `wsctl exec` stdout throughput, and
 * was about half of agentd's CPU in a sequential write through wsfs. And
 * M_ARENA_MAX 1: every thread allocates from the main arena (small blocks
 * still come from each thread's tcache, without the lock). With glibc's
 * default of 8 arenas per core, each of wsfs's worker threads (and gRPC's
 * pollers, which allocate the receive buffers) got an arena of its own and
 * touched its own few MiB of fresh pages: 27,000 page faults in wsfs's
 * first 512 MiB read; a cold sequential read through a new mount went from
 * about 500 to 850 MB/s, a 512 MiB write + fsync from about 320 to 380,
 * metadata calls unchanged (bench/README.md). Costs up to 16 MiB of
 * retained heap. Call once from main(), before any other thread starts;
 * overrides GLIBC_TUNABLES' thresholds and arena_max.
 */
void wsb_malloc_tune(void);

/** CLOCK_MONOTONIC now, in nanoseconds (clock_gettime(2)). Any thread. */
int64_t wsb_mono_ns(void);

/**
 * The time on @p clock @p ms milliseconds from now, as the absolute
 * deadlines of pthread_cond_timedwait(3) (CLOCK_MONOTONIC for a condition
 * variable made by wsb_cond_init_mono()) and
 * pthread_timedjoin_np(3) (CLOCK_REALTIME) take them. tv_nsec is in
 * [0, 10^9) (they fail with EINVAL otherwise). Any thread.
 */
struct timespec wsb_deadline(clockid_t clock, unsigned ms);

/** wsb_deadline() @p ns nanoseconds (>= 0) from now. Any thread. */
struct timespec wsb_deadline_ns(clockid_t clock, int64_t ns);

/**
 * @p ts as nanoseconds (tv_sec * 10^9 + tv_nsec), saturated to INT64_MIN or
 * INT64_MAX where it does not fit: an int64 of nanoseconds spans 1677-09-21
 * to 2262-04-11, and times outside come from files (ext4 keeps years up to
 * 2446, touch -d sets them) and from any peer. @p ts->tv_nsec may lie
 * outside [0, 10^9). Pure; any thread.
 */
int64_t wsb_ns_of_ts(const struct timespec *ts);

/**
 * The timespec of @p ns nanoseconds, rounded toward minus infinity, so that
 * tv_nsec is in [0, 10^9) for negative @p ns too (as utimensat(2) wants).
 * Exact for every int64 value. Pure; any thread.
 */
struct timespec wsb_ts_of_ns(int64_t ns);

/**
 * The wire's three fields for time @p ts (proto/wsbridge.proto "Times"):
 * *@p ns as wsb_ns_of_ts() gives it, and where that saturates, the time
 * exactly in *@p s (seconds since the epoch) and *@p nsec (0 to 10^9 - 1),
 * else 0 and 0. @p ts->tv_nsec may lie outside [0, 10^9). Pure; any thread.
 */
void wsb_time_to_wire(const struct timespec *ts, int64_t *ns, int64_t *s, uint32_t *nsec);

/**
 * The time that the wire's fields @p ns, @p s and @p nsec carry
 * (proto/wsbridge.proto "Times"): (@p s, @p nsec) unless both are 0, else
 * wsb_ts_of_ns(@p ns). A peer's @p nsec of 10^9 or more is not a time: the
 * pair is ignored (a server refuses it first, wsb_time_wire_ok()). Pure;
 * any thread.
 */
struct timespec wsb_time_of_wire(int64_t ns, int64_t s, uint32_t nsec);

/**
 * The bits of file mode @p mode that a write, truncate or open(O_TRUNC)
 * by a process without CAP_FSETID clears: S_ISUID, and S_ISGID where
 * S_IXGRP is set (S_ISGID alone marks mandatory locking); none for a file
 * that is not regular. Rule: Linux fs/attr.c setattr_should_drop_suidgid()
 * and fs/inode.c file_remove_privs(). Pure; any thread.
 */
static inline unsigned wsb_suidgid_kill_bits(unsigned mode)
{
	unsigned kill = mode & 04000u;

	if ((mode & 0170000u) != 0100000u) /* S_IFMT, S_IFREG */
		return 0;
	if ((mode & 02010u) == 02010u) /* S_ISGID | S_IXGRP */
		kill |= 02000u;
	return kill;
}

/** Whether a peer's @p nsec can be a time's nanoseconds (below 10^9). */
static inline bool wsb_time_wire_ok(uint32_t nsec)
{
	return nsec < 1000000000;
}

/**
 * pthread_cond_init(3) of @p cond with CLOCK_MONOTONIC for its timed waits
 * (pthread_condattr_setclock(3)), so that their absolute deadlines are
 * wsb_mono_ns() values and a change of the wall clock does not move them.
 * Destroy with pthread_cond_destroy(). Any thread.
 */
void wsb_cond_init_mono(pthread_cond_t *cond);

/**
 * Check a server address as agentd --listen, wsctl -a and wsfs take it:
 * "unix:PATH" or "unix-abstract:NAME" with something after the colon, or
 * "HOST:PORT" / "[V6]:PORT" (an empty HOST is every interface, to gRPC)
 * with a port of 1 to 65535 in decimal (gRPC would take 99999 as 34463,
 * its low 16 bits, and no port at all as 443). Other gRPC target forms ("dns:///host:port", "ipv4:...")
 * are left to gRPC. Returns 0, or -EINVAL with *@p why set to a static
 * string that says what is wrong. Any thread.
 */
int wsb_addr_check(const char *addr, const char **why);

/**
 * Is @p id (@p len bytes) a session id as the "wsbridge-session" metadata
 * carries it: 1 to WSB_SESSION_ID_MAX bytes of ASCII letters, digits, '-'
 * and '_' (docs/protocol.md "Sessions")? Any thread.
 */
bool wsb_session_id_valid(const void *id, size_t len);

/** Largest token file wsb_token_read() takes, bytes. */
#define WSB_TOKEN_FILE_MAX 4096

/**
 * Read the bearer token in @p file: its bytes less trailing newlines,
 * carriage returns, spaces and tabs; it must be 1 or more bytes of
 * printable ASCII without spaces (RFC 6750's b64token is a subset; gRPC
 * sends it in the "authorization" header as is). On 0, *@p ret_token is a
 * NUL-terminated copy the caller frees. Returns -errno of open(2)/read(2),
 * -EFBIG past WSB_TOKEN_FILE_MAX bytes, -EINVAL for an empty token or one
 * with any other byte (a NUL would cut it short, a newline make two),
 * -ENOMEM. Any thread.
 */
int wsb_token_read(const char *file, char **ret_token);

/**
 * Parse a level name ("error", "warning", "notice", "info", "debug").
 * Returns the level, or -EINVAL for an unknown name.
 */
int wsb_log_level_parse(const char *name);

/** True when @p level would be printed. */
bool wsb_log_enabled(int level);

/**
 * Print one line to stderr (never stdout: in --stdio mode stdout is the
 * transport): "PROG: LEVEL: message\n", written with a single write(2) so
 * lines from different threads never interleave. Keeps errno unchanged.
 */
void wsb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wsb_logv(int level, const char *fmt, va_list ap);

#define wsb_err(...) wsb_log(WSB_LOG_ERR, __VA_ARGS__)
#define wsb_warn(...) wsb_log(WSB_LOG_WARNING, __VA_ARGS__)
#define wsb_notice(...) wsb_log(WSB_LOG_NOTICE, __VA_ARGS__)
#define wsb_info(...) wsb_log(WSB_LOG_INFO, __VA_ARGS__)
#define wsb_debug(...)                                                         \
	do {                                                                   \
		if (wsb_log_enabled(WSB_LOG_DEBUG))                            \
			wsb_log(WSB_LOG_DEBUG, __VA_ARGS__);                   \
	} while (0)

/**
 * Escape @p len bytes of @p s for a log line or an error message: printable
 * ASCII as is, anything else as \xNN, cut at @p max input bytes with "..."
 * appended. Returns a malloc'd NUL-terminated string the caller frees, or NULL
 * on ENOMEM.
 */
char *wsb_escape(const void *s, size_t len, size_t max);

/**
 * Serialise @p msg into a new malloc'd buffer: *ret_buf (owned by the caller,
 * free()) and *ret_len bytes. An empty message gives a non-NULL buffer of
 * length 0. Returns 0 or -ENOMEM.
 */
int wsb_pack(const ProtobufCMessage *msg, uint8_t **ret_buf, size_t *ret_len);

/* ---- protobuf wire format ---- */

/** Wire types of the protobuf encoding (protobuf.dev/programming-guides/encoding). */
enum wsb_wire_type {
	WSB_WIRE_VARINT = 0,
	WSB_WIRE_I64 = 1,
	WSB_WIRE_LEN = 2,
	WSB_WIRE_I32 = 5,
};

/** One field read by wsb_pieces_field(). */
struct wsb_wire_field {
	uint32_t number;    /**< field number, >= 1 */
	unsigned type;      /**< enum wsb_wire_type */
	uint64_t value;     /**< VARINT, I64 and I32 fields: the value */
	size_t len;         /**< LEN fields: the number of their bytes */
};

/**
 * Write the key and length of LEN field @p number with @p len bytes to
 * come, at @p out (room for WSB_WIRE_LEN_HEAD_MAX bytes). Returns the
 * bytes written. Any thread.
 */
size_t wsb_wire_len_head(uint8_t *out, uint32_t number, size_t len);

/**
 * Write VARINT field @p number with @p value at @p out (room for
 * WSB_WIRE_VARINT_MAX bytes). Negative int32 values take 10 bytes, as
 * protobuf encodes them. Returns the bytes written. Any thread.
 */
size_t wsb_wire_varint_field(uint8_t *out, uint32_t number, uint64_t value);

/** Most bytes wsb_wire_len_head() writes: a 5-byte key, a 10-byte length. */
#define WSB_WIRE_LEN_HEAD_MAX 15
/** Most bytes wsb_wire_varint_field() writes. */
#define WSB_WIRE_VARINT_MAX 15

/* ---- messages that arrived in pieces ---- */

/**
 * A forward-only reader of a serialised message that arrived in pieces
 * (the slices of a gRPC byte buffer: gRPC reads a 1 MiB message in dozens),
 * so that it can be decoded without first being flattened into one buffer
 * (grpc_byte_buffer_reader_readall(), a copy of the whole message).
 * @next gives the pieces in order: it returns 1 and sets *@p ptr and
 * *@p len (which may be 0), or 0 when there are no more. The pieces must
 * stay valid while the reader is used. Fill with wsb_pieces_init().
 */
struct wsb_pieces {
	int (*next)(void *arg, const uint8_t **ptr, size_t *len);
	void *arg;
	const uint8_t *ptr; /**< the unread rest of the current piece */
	size_t len;         /**< its bytes */
	size_t left;        /**< bytes left in the range being read */
	size_t pos;         /**< bytes read (or skipped) since init */
};

/**
 * Start reading @p total bytes from the pieces @p next gives (@p arg is
 * passed to it). Reading past them, or pieces that end before @p total
 * bytes, fail -EBADMSG. Any thread; a reader is used by one at a time.
 */
void wsb_pieces_init(struct wsb_pieces *c, int (*next)(void *arg, const uint8_t **ptr, size_t *len),
		     void *arg, size_t total);

/**
 * Read the next field of the range: its key and, for VARINT, I64 and I32
 * fields, its value. A LEN field's bytes are not read: f->len is their
 * number, and the reader stands at them, for wsb_pieces_copy(),
 * wsb_pieces_skip() or wsb_unpack_pieces() (after wsb_pieces_limit()).
 * Returns 1, 0 at the end of the range, or -EBADMSG for a malformed or
 * truncated field, a length past the range, field number 0 or a group
 * (wire types 3 and 4).
 */
int wsb_pieces_field(struct wsb_pieces *c, struct wsb_wire_field *f);

/** Copy the next @p n bytes to @p dst, or skip them when @p dst is NULL.
 * Returns 0 or -EBADMSG (fewer than @p n left). */
int wsb_pieces_copy(struct wsb_pieces *c, void *dst, size_t n);

/** Skip the next @p n bytes: wsb_pieces_copy(c, NULL, n). */
int wsb_pieces_skip(struct wsb_pieces *c, size_t n);

/**
 * Read the next @p n bytes (a string field's), keeping at most @p size of
 * them at @p dst (not NUL-terminated) and skipping the rest; *@p kept is
 * the number kept. Returns 0 or -EBADMSG.
 */
int wsb_pieces_copy_cut(struct wsb_pieces *c, size_t n, void *dst, size_t size, size_t *kept);

/**
 * Narrow the range to its next @p n bytes (a LEN field's, to decode it as
 * a message: a reader is forward-only, so the bytes after them are not
 * read then). Returns the bytes the range had after them, or SIZE_MAX when
 * fewer than @p n bytes are left.
 */
size_t wsb_pieces_limit(struct wsb_pieces *c, size_t n);

/** LEN fields of at least this many bytes are copied straight from the
 * pieces by wsb_unpack_pieces() (smaller ones are not worth a block). */
#define WSB_UNPACK_DIRECT_MIN ((size_t)4096)

/**
 * Most fields a message wsb_unpack_pieces() decodes may have at its top
 * level: protobuf-c allocates each element of a repeated field apart, so a
 * 60 MB request of 30,000,000 empty strings took 2.2 GB to decode.
 * ReadDir's 4096 entries and a CreateFiles of thousands of files are far
 * below it.
 */
#define WSB_UNPACK_FIELDS_MAX ((size_t)1 << 20)

/**
 * Decode the rest of @p c's range as a message of @p desc, as
 * protobuf_c_message_unpack() would the same bytes in one buffer, with one
 * copy of the bytes: a
 * singular `bytes` field of at least WSB_UNPACK_DIRECT_MIN bytes (a Read's
 * data, a Write's) goes from the pieces into a block of its own, which
 * becomes the field's data (malloc'd, so protobuf_c_message_free_unpacked()
 * with the default allocator frees it); every other field is gathered into
 * a buffer that protobuf-c unpacks. When a field appears more than once the
 * last wins, as protobuf's rule is. Returns 0 with *@p ret_msg (the
 * caller's, protobuf_c_message_free_unpacked()), -EBADMSG (the bytes do not
 * decode; *@p ret_msg untouched), -E2BIG (more than WSB_UNPACK_FIELDS_MAX
 * fields at the top level) or -ENOMEM. On success the range is read
 * to its end; on failure the reader is left anywhere in it. Required
 * (proto2) and oneof fields are always gathered. Unlike protobuf-c it takes
 * keys and lengths in up to 10 bytes, and unknown fields come back
 * re-encoded in their shortest form (the same values). Any thread.
 */
int wsb_unpack_pieces(const ProtobufCMessageDescriptor *desc, struct wsb_pieces *c,
		      ProtobufCMessage **ret_msg);

/** FNV-1a's 64-bit offset basis: wsb_fnv1a()'s @p h for a fresh hash. */
#define WSB_FNV1A_INIT 0xcbf29ce484222325ULL

/**
 * 64-bit FNV-1a of @p n bytes at @p p, continuing from @p h
 * (WSB_FNV1A_INIT to start; a previous result to chain). Not for
 * anything an adversary may choose to collide. Pure; any thread.
 */
static inline uint64_t wsb_fnv1a(const void *p, size_t n, uint64_t h)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

/**
 * The length of the well-formed UTF-8 sequence at @p s (@p n >= 1 bytes
 * available), per Unicode Table 3-7 (no overlong form, no surrogate,
 * nothing past U+10FFFF): 1 for an ASCII byte, 2 to 4 for a complete
 * sequence; else 0, with *@p bad the length of its maximal subpart (>= 1),
 * the bytes one U+FFFD replaces. Any thread.
 */
size_t wsb_utf8_seq(const uint8_t *s, size_t n, size_t *bad);

#endif /* WSB_H */
