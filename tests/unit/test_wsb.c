/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of the wire conventions in proto/wsb.c: errno names, the
 * errno <-> gRPC status mapping, the codec and the escaping of names.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "devagent.pb-c.h"
#include "wsb.h"
#include "wsbridge.pb-c.h"

/* A message cut into pieces of the sizes in @sizes (repeated; 0 = an empty
 * piece), for wsb_pieces. */
struct cut {
	const uint8_t *buf;
	size_t len, at, k;
	const size_t *sizes;
	size_t nsizes;
	size_t calls;
};

static int cut_next(void *arg, const uint8_t **ptr, size_t *len)
{
	struct cut *c = arg;
	size_t n = c->sizes[c->k++ % c->nsizes];

	if (c->at >= c->len)
		return 0;
	c->calls++;
	if (n > c->len - c->at)
		n = c->len - c->at;
	*ptr = c->buf + c->at;
	*len = n;
	c->at += n;
	return 1;
}

static const size_t odd_sizes[] = { 1, 0, 7, 4096, 3, 65536, 2, 1000 };

/* realloc() as wsb.c calls it (the test links with -Wl,--wrap=realloc):
 * wsb_unpack_pieces() gathers the fields it does not copy on their own in
 * a realloc'd buffer, so the largest size asked tells which way a field
 * went. */
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
static size_t realloc_max;

void *__wrap_realloc(void *p, size_t n)
{
	if (n > realloc_max)
		realloc_max = n;
	return __real_realloc(p, n);
}

static const size_t whole_piece[] = { SIZE_MAX };

/* A reader @c of @len bytes at @buf in pieces of @sizes (odd_sizes when
 * NULL) through @cut, claiming @total bytes. */
static void read_cut_ex(struct wsb_pieces *c, struct cut *cut, const uint8_t *buf, size_t len,
			size_t total, const size_t *sizes, size_t nsizes)
{
	if (!sizes) {
		sizes = odd_sizes;
		nsizes = sizeof(odd_sizes) / sizeof(odd_sizes[0]);
	}
	*cut = (struct cut){ buf, len, 0, 0, sizes, nsizes, 0 };
	wsb_pieces_init(c, cut_next, cut, total);
}

static void read_cut(struct wsb_pieces *c, struct cut *cut, const uint8_t *buf, size_t len)
{
	read_cut_ex(c, cut, buf, len, len, NULL, 0);
}

/* wsb_unpack_pieces() of @len bytes at @buf cut by odd_sizes, claiming
 * @total bytes. */
static int unpack_cut(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		      size_t total, ProtobufCMessage **m)
{
	struct wsb_pieces c;
	struct cut cut;

	read_cut_ex(&c, &cut, buf, len, total, NULL, 0);
	return wsb_unpack_pieces(desc, &c, m);
}

/* wsb_unpack_pieces() of @len bytes at @buf in one piece. */
static int unpack_whole(const ProtobufCMessageDescriptor *desc, const void *buf, size_t len,
			ProtobufCMessage **m)
{
	struct wsb_pieces c;
	struct cut cut;

	read_cut_ex(&c, &cut, buf, len, len, whole_piece, 1);
	return wsb_unpack_pieces(desc, &c, m);
}

static void test_errno_names_round_trip(void **state)
{
	static const int errs[] = {EPERM, ENOENT, EIO, EACCES, EEXIST, EXDEV, ENOTDIR, EISDIR,
				   EINVAL, ENOSPC, EROFS, ENAMETOOLONG, ENOTEMPTY, ELOOP,
				   ENODATA, ETIMEDOUT, ENOTCONN, EOPNOTSUPP, ENOSYS};

	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		const char *n = wsb_errno_name(errs[i]);
		assert_non_null(n);
		assert_int_equal(wsb_errno_from_name(n), errs[i]);
	}
	assert_string_equal(wsb_errno_name(ENOENT), "ENOENT");
	assert_string_equal(wsb_errno_name(EXDEV), "EXDEV");
	assert_null(wsb_errno_name(0));
	assert_null(wsb_errno_name(-2));
	assert_null(wsb_errno_name(100000));
	assert_int_equal(wsb_errno_from_name("ENOPE"), 0);
	assert_int_equal(wsb_errno_from_name(""), 0);
	assert_int_equal(wsb_errno_from_name(NULL), 0);
}

static void test_status_from_errno(void **state)
{
	assert_int_equal(wsb_status_from_errno(0), WSB_OK);
	assert_int_equal(wsb_status_from_errno(ENOENT), WSB_NOT_FOUND);
	assert_int_equal(wsb_status_from_errno(EEXIST), WSB_ALREADY_EXISTS);
	assert_int_equal(wsb_status_from_errno(EXDEV), WSB_PERMISSION_DENIED);
	assert_int_equal(wsb_status_from_errno(EACCES), WSB_PERMISSION_DENIED);
	assert_int_equal(wsb_status_from_errno(EPERM), WSB_PERMISSION_DENIED);
	assert_int_equal(wsb_status_from_errno(ENOSPC), WSB_RESOURCE_EXHAUSTED);
	assert_int_equal(wsb_status_from_errno(EINVAL), WSB_INVALID_ARGUMENT);
	assert_int_equal(wsb_status_from_errno(ENOTEMPTY), WSB_FAILED_PRECONDITION);
	assert_int_equal(wsb_status_from_errno(EISDIR), WSB_FAILED_PRECONDITION);
	assert_int_equal(wsb_status_from_errno(ENOSYS), WSB_UNIMPLEMENTED);
	assert_int_equal(wsb_status_from_errno(ETIMEDOUT), WSB_DEADLINE_EXCEEDED);
	assert_int_equal(wsb_status_from_errno(EHWPOISON), WSB_UNKNOWN);
}

static void test_errno_from_status(void **state)
{
	assert_int_equal(wsb_errno_from_status(WSB_OK), 0);
	assert_int_equal(wsb_errno_from_status(WSB_UNAVAILABLE), ENOTCONN);
	assert_int_equal(wsb_errno_from_status(WSB_DEADLINE_EXCEEDED), ETIMEDOUT);
	assert_int_equal(wsb_errno_from_status(WSB_NOT_FOUND), ENOENT);
	assert_int_equal(wsb_errno_from_status(WSB_UNAUTHENTICATED), EACCES);
	assert_int_equal(wsb_errno_from_status(WSB_UNIMPLEMENTED), ENOSYS);
	assert_int_equal(wsb_errno_from_status(WSB_INTERNAL), EIO);
	assert_int_equal(wsb_errno_from_status(99), EIO);
	/* Every errno a client most often sees survives the status mapping. */
	assert_int_equal(wsb_errno_from_status(wsb_status_from_errno(ENOENT)), ENOENT);
	assert_int_equal(wsb_errno_from_status(wsb_status_from_errno(EEXIST)), EEXIST);
}

static void test_status_names(void **state)
{
	assert_string_equal(wsb_status_name(WSB_OK), "OK");
	assert_string_equal(wsb_status_name(WSB_NOT_FOUND), "NOT_FOUND");
	assert_string_equal(wsb_status_name(WSB_UNAUTHENTICATED), "UNAUTHENTICATED");
	assert_string_equal(wsb_status_name(17), "UNKNOWN_STATUS");
	assert_string_equal(wsb_status_name(-1), "UNKNOWN_STATUS");
}

static void test_codec_round_trip_bytes(void **state)
{
	uint8_t name[] = {'a', 0xff, 0x00, '\n', 'b'}; /* not UTF-8, embedded NUL */
	Wsbridge__V1__StatRequest req = WSBRIDGE__V1__STAT_REQUEST__INIT;
	Wsbridge__V1__StatRequest *out;
	ProtobufCMessage *m;
	uint8_t *buf;
	size_t len;

	req.path.data = name;
	req.path.len = sizeof(name);
	req.follow = true;
	assert_int_equal(wsb_pack(&req.base, &buf, &len), 0);
	assert_int_equal(len, 2 + sizeof(name) + 2);
	assert_int_equal(unpack_whole(&wsbridge__v1__stat_request__descriptor, buf, len, &m), 0);
	out = (Wsbridge__V1__StatRequest *)m;
	assert_int_equal(out->path.len, sizeof(name));
	assert_memory_equal(out->path.data, name, sizeof(name));
	assert_true(out->follow);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
}

static void test_codec_empty_and_garbage(void **state)
{
	Wsbridge__V1__Empty e = WSBRIDGE__V1__EMPTY__INIT;
	static const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}; /* huge length */
	ProtobufCMessage *m = (void *)0x1;
	uint8_t *buf;
	size_t len;

	assert_int_equal(wsb_pack(&e.base, &buf, &len), 0);
	assert_non_null(buf);
	assert_int_equal(len, 0);
	free(buf);
	/* An empty buffer is a valid message with all fields at defaults. */
	assert_int_equal(unpack_whole(&create_file_request__descriptor, NULL, 0, &m), 0);
	assert_int_equal(((CreateFileRequest *)m)->n_files, 0);
	protobuf_c_message_free_unpacked(m, NULL);
	m = (void *)0x1;
	assert_int_equal(unpack_whole(&create_file_request__descriptor, garbage, sizeof(garbage), &m),
			 -EBADMSG);
	assert_ptr_equal(m, (void *)0x1); /* untouched on failure */
}

static void test_escape(void **state)
{
	char *s = wsb_escape("a\x01/\xff\\", 5, 100);

	assert_string_equal(s, "a\\x01/\\xff\\\\");
	free(s);
	s = wsb_escape("abcdef", 6, 3);
	assert_string_equal(s, "abc...");
	free(s);
	s = wsb_escape("", 0, 3);
	assert_string_equal(s, "");
	free(s);
}

/* Times to and from int64 nanoseconds: exact inside the range, saturated
 * outside (a file dated 2300, a peer's INT64_MIN), never undefined. */
static void test_addr_check(void **state)
{
	static const char *const good[] = {
		"127.0.0.1:9000", "localhost:1", "[::1]:65535", ":9000", "0.0.0.0:9000",
		"unix:/tmp/s", "unix:///tmp/s", "unix-abstract:x", "dns:///h:1", "ipv4:1.2.3.4:5",
	};
	static const char *const bad[] = {
		"", "garbage", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
		"127.0.0.1:99999", "127.0.0.1:9x", "127.0.0.1:-1", "h:123456789012345678901",
		"[::1]", "[::1]9000", "[]:1", "unix:", "unix-abstract:",
	};
	const char *why;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (wsb_addr_check(good[i], &why) != 0)
			fail_msg("'%s' refused: %s", good[i], why);
		assert_null(why);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (wsb_addr_check(bad[i], &why) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_non_null(why);
	}
	assert_int_equal(wsb_addr_check(NULL, &why), -EINVAL);
}

/* Write @p n bytes of @p data to a new temporary file; its path in @p path. */
static void token_file(char path[32], const void *data, size_t n)
{
	int fd;

	strcpy(path, "/tmp/test_wsb.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

static int token_of(const void *data, size_t n, char **ret)
{
	char path[32];
	int r;

	token_file(path, data, n);
	*ret = NULL;
	r = wsb_token_read(path, ret);
	unlink(path);
	return r;
}

static void test_token_read(void **state)
{
	static const struct {
		const char *data;
		size_t n;
		const char *token; /* NULL: -EINVAL */
	} cases[] = {
		{ "abc123\n", 7, "abc123" },
		{ "abc123 \t\r\n\n", 11, "abc123" },
		{ "a.b-c_d~e+f/g=", 14, "a.b-c_d~e+f/g=" },
		{ "", 0, NULL },
		{ " \n", 2, NULL },
		{ "\0secret", 7, NULL },   /* strdup() made it "" */
		{ "sec\0ret", 7, NULL },   /* and this "sec" */
		{ "two words", 9, NULL },
		{ "two\nlines", 9, NULL },
		{ " lead", 5, NULL },
		{ "caf\xc3\xa9", 5, NULL },
		{ "bell\a", 5, NULL },
		{ "del\x7f", 4, NULL },
	};
	char big[WSB_TOKEN_FILE_MAX + 1], *t;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = token_of(cases[i].data, cases[i].n, &t);

		if (cases[i].token) {
			assert_int_equal(r, 0);
			assert_string_equal(t, cases[i].token);
			free(t);
		} else {
			assert_int_equal(r, -EINVAL);
			assert_null(t);
		}
	}
	memset(big, 'x', sizeof(big));
	assert_int_equal(token_of(big, WSB_TOKEN_FILE_MAX, &t), 0);
	assert_int_equal(strlen(t), WSB_TOKEN_FILE_MAX);
	free(t);
	assert_int_equal(token_of(big, WSB_TOKEN_FILE_MAX + 1, &t), -EFBIG);
	assert_int_equal(wsb_token_read("/nonexistent/token", &t), -ENOENT);
}

static void test_session_id(void **state)
{
	char id[WSB_SESSION_ID_MAX + 1];

	(void)state;
	memset(id, 'Z', sizeof(id));
	assert_true(wsb_session_id_valid("0123456789abcdef0123456789abcdef", 32));
	assert_true(wsb_session_id_valid("a-B_9", 5));
	assert_true(wsb_session_id_valid(id, WSB_SESSION_ID_MAX));
	assert_false(wsb_session_id_valid(id, WSB_SESSION_ID_MAX + 1));
	assert_false(wsb_session_id_valid("", 0));
	assert_false(wsb_session_id_valid("a b", 3));
	assert_false(wsb_session_id_valid("a.b", 3));
	assert_false(wsb_session_id_valid("a\0", 2));
	assert_false(wsb_session_id_valid("\xff", 1));
}

static void test_time_ns(void **state)
{
	struct timespec ts;

	(void)state;
	ts = (struct timespec){ 1612325106, 123456789 };
	assert_int_equal(wsb_ns_of_ts(&ts), 1612325106123456789LL);
	ts = (struct timespec){ -1, 999999999 }; /* 1969-12-31 23:59:59.999999999 */
	assert_int_equal(wsb_ns_of_ts(&ts), -1);
	ts = (struct timespec){ 9223372036, 854775807 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);
	ts = (struct timespec){ 9223372036, 854775808 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);
	ts = (struct timespec){ 10413792000, 0 }; /* 2300-01-01 */
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);
	ts = (struct timespec){ -9223372037, 145224192 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN);
	ts = (struct timespec){ -9223372037, 145224193 }; /* fits: exact */
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN + 1);
	ts = (struct timespec){ -9223372037, 999999999 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN + 854775807);
	ts = (struct timespec){ -9223372037, 145224191 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN);
	ts = (struct timespec){ 0, -1 }; /* not normalized */
	assert_int_equal(wsb_ns_of_ts(&ts), -1);
	ts = (struct timespec){ 1, 2500000000 };
	assert_int_equal(wsb_ns_of_ts(&ts), 3500000000);
	ts = (struct timespec){ INT64_MAX, 1000000000 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);
	ts = (struct timespec){ INT64_MIN, -1 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN);
	ts = (struct timespec){ INT64_MIN, 0 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN);
	ts = (struct timespec){ INT64_MAX, 999999999 };
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);

	ts = wsb_ts_of_ns(-1);
	assert_int_equal(ts.tv_sec, -1);
	assert_int_equal(ts.tv_nsec, 999999999);
	ts = wsb_ts_of_ns(INT64_MIN);
	assert_int_equal(ts.tv_sec, -9223372037);
	assert_int_equal(ts.tv_nsec, 145224192);
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MIN);
	ts = wsb_ts_of_ns(INT64_MAX);
	assert_int_equal(ts.tv_sec, 9223372036);
	assert_int_equal(ts.tv_nsec, 854775807);
	assert_int_equal(wsb_ns_of_ts(&ts), INT64_MAX);
}

/* The wire's three fields of a time (proto/wsbridge.proto "Times"): the
 * pair only where the nanoseconds saturate, and every time comes back
 * exact through an Attr packed and unpacked; a peer with no pair, or a bad
 * one, gives the nanoseconds. */
static void test_time_wire(void **state)
{
	static const struct {
		struct timespec ts;
		bool pair;
	} c[] = {
		{ { 1612325106, 123456789 }, false },
		{ { -1, 500000000 }, false },			/* 1969-12-31 23:59:59.5 */
		{ { 0, 0 }, false },				/* the epoch */
		{ { 9223372036, 854775806 }, false },		/* INT64_MAX - 1 ns */
		{ { 9223372036, 854775808 }, true },		/* 1 ns past */
		{ { 10413792000, 123456789 }, true },		/* 2300-01-01 */
		{ { 15032385535, 999999999 }, true },		/* ext4's last, 2446 */
		{ { -9223372037, 145224193 }, false },		/* INT64_MIN + 1 ns */
		{ { -9223372037, 145224191 }, true },		/* 1 ns before INT64_MIN */
		{ { -11676096000, 250000000 }, true },		/* 1600-01-01 00:00:00.25 */
		{ { INT64_MAX, 999999999 }, true },
		{ { INT64_MIN, 0 }, true },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		Wsbridge__V1__Attr a = WSBRIDGE__V1__ATTR__INIT, *b;
		uint8_t buf[128];
		struct timespec got;
		size_t n;

		wsb_time_to_wire(&c[i].ts, &a.mtime_ns, &a.mtime_s, &a.mtime_nsec);
		assert_int_equal(a.mtime_ns, wsb_ns_of_ts(&c[i].ts));
		assert_int_equal(a.mtime_s != 0 || a.mtime_nsec != 0, c[i].pair);
		n = wsbridge__v1__attr__pack(&a, buf);
		b = wsbridge__v1__attr__unpack(NULL, n, buf);
		assert_non_null(b);
		got = wsb_time_of_wire(b->mtime_ns, b->mtime_s, b->mtime_nsec);
		assert_int_equal(got.tv_sec, c[i].ts.tv_sec);
		assert_int_equal(got.tv_nsec, c[i].ts.tv_nsec);
		wsbridge__v1__attr__free_unpacked(b, NULL);
	}
	/* Not normalized: 2300-01-01 as 10413791999 s + 1.5 s. */
	{
		struct timespec ts = { 10413791999, 1500000000 };
		int64_t ns, s;
		uint32_t nsec;

		wsb_time_to_wire(&ts, &ns, &s, &nsec);
		assert_int_equal(ns, INT64_MAX);
		assert_int_equal(s, 10413792000);
		assert_int_equal(nsec, 500000000);
	}
	/* An older peer's nanoseconds alone; a bad pair is no time. */
	assert_int_equal(wsb_time_of_wire(INT64_MAX, 0, 0).tv_sec, 9223372036);
	assert_int_equal(wsb_time_of_wire(INT64_MAX, 0, 0).tv_nsec, 854775807);
	assert_int_equal(wsb_time_of_wire(5, 10413792000, 1000000000).tv_nsec, 5);
	assert_int_equal(wsb_time_of_wire(5, 10413792000, 1000000000).tv_sec, 0);
	assert_true(wsb_time_wire_ok(999999999));
	assert_false(wsb_time_wire_ok(1000000000));
}

/* wsb_deadline: @ms from now on the clock given, tv_nsec normalized (a
 * deadline with tv_nsec >= 10^9 makes pthread_cond_timedwait EINVAL). */
static int64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return wsb_ns_of_ts(&ts);
}

static void test_deadline(void **state)
{
	static const clockid_t clocks[] = {CLOCK_MONOTONIC, CLOCK_REALTIME};
	static const unsigned ms[] = {0, 1, 999, 1000, 1999, 86400000};
	(void)state;
	for (size_t c = 0; c < 2; c++) {
		for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
			int64_t before = clock_ns(clocks[c]), after, at;
			struct timespec d = wsb_deadline(clocks[c], ms[i]);

			after = clock_ns(clocks[c]);
			at = wsb_ns_of_ts(&d);
			assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000);
			assert_true(at >= before + (int64_t)ms[i] * 1000000);
			assert_true(at <= after + (int64_t)ms[i] * 1000000);
		}
	}
}

/* wsb_wire_* and wsb_pieces_field(): what protobuf-c packs reads back
 * field by field, and what wsb_wire_* writes protobuf-c unpacks; malformed
 * input is -EBADMSG, never a read past the end. */
static void test_wire(void **state)
{
	Wsbridge__V1__OpReply rep = WSBRIDGE__V1__OP_REPLY__INIT, *back;
	uint8_t buf[256], *w = buf;
	struct wsb_wire_field f;
	struct wsb_pieces c;
	struct cut cut;
	ProtobufCMessage *m;
	char name[6];
	size_t n;

	(void)state;
	rep.code = -3; /* negative int32: ten bytes */
	rep.errno_name = (char *)"ENOENT";
	rep.reply.data = (uint8_t *)"xyz";
	rep.reply.len = 3;
	n = protobuf_c_message_pack(&rep.base, buf);
	read_cut(&c, &cut, buf, n);
	assert_int_equal(wsb_pieces_field(&c, &f), 1);
	assert_int_equal(f.number, 1);
	assert_int_equal(f.type, WSB_WIRE_VARINT);
	assert_int_equal((int32_t)f.value, -3);
	assert_int_equal(wsb_pieces_field(&c, &f), 1);
	assert_int_equal(f.number, 2);
	assert_int_equal(f.type, WSB_WIRE_LEN);
	assert_int_equal(f.len, 6);
	assert_int_equal(wsb_pieces_copy(&c, name, 6), 0);
	assert_memory_equal(name, "ENOENT", 6);
	assert_int_equal(wsb_pieces_field(&c, &f), 1);
	assert_int_equal(f.number, 4);
	assert_int_equal(f.len, 3);
	assert_int_equal(wsb_pieces_skip(&c, 3), 0);
	assert_int_equal(wsb_pieces_field(&c, &f), 0);

	/* Written by hand, read by protobuf-c. */
	w += wsb_wire_varint_field(w, 1, (uint64_t)(int64_t)-3);
	w += wsb_wire_len_head(w, 3, 2);
	memcpy(w, "hi", 2);
	w += 2;
	w += wsb_wire_len_head(w, 4, 300);
	assert_int_equal(unpack_whole(&wsbridge__v1__op_reply__descriptor, buf, (size_t)(w - buf), &m),
			 -EBADMSG); /* 300 bytes promised, none there */
	w -= 3; /* drop that head (a 2-byte length) */
	w += wsb_wire_len_head(w, 4, 1);
	*w++ = 'r';
	assert_int_equal(unpack_whole(&wsbridge__v1__op_reply__descriptor, buf, (size_t)(w - buf), &m),
			 0);
	back = (Wsbridge__V1__OpReply *)m;
	assert_int_equal(back->code, -3);
	assert_string_equal(back->message, "hi");
	assert_int_equal(back->reply.len, 1);
	protobuf_c_message_free_unpacked(m, NULL);

	/* Malformed: a truncated varint, a length past the end, a group,
	 * field number 0, an 11-byte varint, a truncated fixed64. */
	{
		static const struct {
			const char *b;
			size_t n;
		} bad[] = {
			{ "\x08\x80", 2 },
			{ "\x12\x05" "ab", 4 },
			{ "\x0b", 1 },
			{ "\x02\x00", 2 },
			{ "\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12 },
			{ "\x09\x01\x02", 3 },
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			read_cut(&c, &cut, (const uint8_t *)bad[i].b, bad[i].n);
			assert_int_equal(wsb_pieces_field(&c, &f), -EBADMSG);
		}
	}
}

static uint8_t *pattern(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed + i / 251);
	return p;
}

/* Decode ReadReplies @a then @b as one (protobuf merges concatenated
 * messages): its data is @want_len bytes of @want, its attr @a's (ino 77). */
static void check_merged(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
			 const uint8_t *want, size_t want_len)
{
	uint8_t *two = malloc(alen + blen);
	Wsbridge__V1__ReadReply *rb;
	ProtobufCMessage *m;

	assert_non_null(two);
	memcpy(two, a, alen);
	memcpy(two + alen, b, blen);
	assert_int_equal(unpack_cut(&wsbridge__v1__read_reply__descriptor, two, alen + blen,
				    alen + blen, &m), 0);
	rb = (Wsbridge__V1__ReadReply *)m;
	assert_int_equal(rb->data.len, want_len);
	assert_memory_equal(rb->data.data, want, want_len);
	assert_non_null(rb->attr);
	assert_int_equal(rb->attr->ino, 77);
	protobuf_c_message_free_unpacked(m, NULL);
	free(two);
}

/* A message of more than WSB_UNPACK_FIELDS_MAX fields is refused before
 * protobuf-c allocates an element for each (CreateFiles of 30,000,000
 * empty names took 2.2 GB); one of exactly that many decodes. */
static void test_unpack_fields_max(void **state)
{
	size_t n = WSB_UNPACK_FIELDS_MAX + 1;
	uint8_t *b = malloc(2 * n);
	ProtobufCMessage *m = NULL;

	(void)state;
	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		b[2 * i] = 1 << 3 | 2; /* files = 1, LEN */
		b[2 * i + 1] = 0;
	}
	assert_int_equal(unpack_cut(&create_file_request__descriptor, b, 2 * n, 2 * n, &m), -E2BIG);
	assert_null(m);
	assert_int_equal(unpack_cut(&create_file_request__descriptor, b, 2 * (n - 1), 2 * (n - 1), &m),
			 0);
	assert_int_equal(((CreateFileRequest *)m)->n_files, n - 1);
	protobuf_c_message_free_unpacked(m, NULL);
	free(b);
}

/* wsb_unpack_pieces() decodes what protobuf-c does, from pieces of any
 * size, with the large bytes field in a block of its own and the last
 * occurrence of a field winning. */
static void test_unpack_pieces(void **state)
{
	Wsbridge__V1__ReadReply rr = WSBRIDGE__V1__READ_REPLY__INIT, *rb;
	Wsbridge__V1__WriteRequest wq = WSBRIDGE__V1__WRITE_REQUEST__INIT, *wb;
	Wsbridge__V1__SetAttrRequest sa = WSBRIDGE__V1__SET_ATTR_REQUEST__INIT;
	Wsbridge__V1__Attr a = WSBRIDGE__V1__ATTR__INIT;
	uint8_t *big = pattern(300000, 1), *other = pattern(70000, 2), *buf, *buf2;
	size_t len, len2;
	ProtobufCMessage *m;

	(void)state;
	/* A Read's reply: data, then attr. */
	a.ino = 77;
	a.size = 300000;
	a.mtime_ns = -5;
	rr.data.data = big;
	rr.data.len = 300000;
	rr.attr = &a;
	assert_int_equal(wsb_pack(&rr.base, &buf, &len), 0);
	realloc_max = 0;
	assert_int_equal(unpack_cut(&wsbridge__v1__read_reply__descriptor, buf, len, len, &m), 0);
	assert_in_range(realloc_max, 1, 1023); /* the attr only: data went on its own */
	rb = (Wsbridge__V1__ReadReply *)m;
	assert_int_equal(rb->data.len, 300000);
	assert_memory_equal(rb->data.data, big, 300000);
	assert_non_null(rb->attr);
	assert_int_equal(rb->attr->ino, 77);
	assert_int_equal(rb->attr->size, 300000);
	assert_int_equal(rb->attr->mtime_ns, -5);
	protobuf_c_message_free_unpacked(m, NULL); /* the block too (ASan) */

	/* One piece of all of it, and a claimed length past the pieces. */
	assert_int_equal(unpack_whole(&wsbridge__v1__read_reply__descriptor, buf, len, &m), 0);
	assert_int_equal(((Wsbridge__V1__ReadReply *)m)->data.len, 300000);
	protobuf_c_message_free_unpacked(m, NULL);
	m = (void *)0x1;
	assert_int_equal(unpack_cut(&wsbridge__v1__read_reply__descriptor, buf, len, len + 1, &m),
			 -EBADMSG);
	/* Cut inside the data, and inside the attr. */
	assert_int_equal(unpack_cut(&wsbridge__v1__read_reply__descriptor, buf, 1000, 1000, &m),
			 -EBADMSG);
	assert_int_equal(unpack_cut(&wsbridge__v1__read_reply__descriptor, buf, len - 1, len - 1, &m),
			 -EBADMSG);
	assert_ptr_equal(m, (void *)0x1);

	/* Concatenated messages merge, the later bytes field winning: big
	 * then big, big then small, small then big. */
	rr.attr = NULL;
	rr.data.data = other;
	rr.data.len = 70000;
	assert_int_equal(wsb_pack(&rr.base, &buf2, &len2), 0);
	check_merged(buf, len, buf2, len2, other, 70000);
	free(buf2);
	rr.data.data = (uint8_t *)"tiny";
	rr.data.len = 4;
	assert_int_equal(wsb_pack(&rr.base, &buf2, &len2), 0);
	check_merged(buf, len, buf2, len2, (const uint8_t *)"tiny", 4);
	check_merged(buf2, len2, buf, len, big, 300000);
	free(buf2);
	free(buf);

	/* A Write: scalars, then data, then a message. */
	wq.handle = 9;
	wq.offset = 1ull << 40;
	wq.data.data = big;
	wq.data.len = 4096; /* WSB_UNPACK_DIRECT_MIN: copied on its own */
	sa.valid = 1;
	sa.mode = 0755;
	wq.setattr_after = &sa;
	assert_int_equal(wsb_pack(&wq.base, &buf, &len), 0);
	realloc_max = 0;
	assert_int_equal(unpack_cut(&wsbridge__v1__write_request__descriptor, buf, len, len, &m), 0);
	assert_in_range(realloc_max, 1, 1023);
	wb = (Wsbridge__V1__WriteRequest *)m;
	assert_int_equal(wb->handle, 9);
	assert_int_equal(wb->offset, 1ull << 40);
	assert_int_equal(wb->data.len, 4096);
	assert_memory_equal(wb->data.data, big, 4096);
	assert_non_null(wb->setattr_after);
	assert_int_equal(wb->setattr_after->mode, 0755);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
	/* One byte less: gathered, and decoded the same. */
	wq.data.len = WSB_UNPACK_DIRECT_MIN - 1;
	assert_int_equal(wsb_pack(&wq.base, &buf, &len), 0);
	realloc_max = 0;
	assert_int_equal(unpack_cut(&wsbridge__v1__write_request__descriptor, buf, len, len, &m), 0);
	assert_true(realloc_max >= WSB_UNPACK_DIRECT_MIN - 1);
	wb = (Wsbridge__V1__WriteRequest *)m;
	assert_int_equal(wb->data.len, WSB_UNPACK_DIRECT_MIN - 1);
	assert_memory_equal(wb->data.data, big, WSB_UNPACK_DIRECT_MIN - 1);
	assert_int_equal(wb->setattr_after->mode, 0755);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);

	/* Nothing: an empty message. A group: -EBADMSG. */
	assert_int_equal(unpack_cut(&wsbridge__v1__write_request__descriptor, NULL, 0, 0, &m), 0);
	assert_int_equal(((Wsbridge__V1__WriteRequest *)m)->data.len, 0);
	protobuf_c_message_free_unpacked(m, NULL);
	assert_int_equal(unpack_cut(&wsbridge__v1__write_request__descriptor,
				    (const uint8_t *)"\x0b\x0c", 2, 2, &m), -EBADMSG);
	free(big);
	free(other);
}

/* A wrapper read field by field over pieces, its inner message narrowed
 * to and decoded in place (client.c op_unpack, rpc_server.c ops_recv). */
static void test_pieces_fields(void **state)
{
	Wsbridge__V1__OpReply op = WSBRIDGE__V1__OP_REPLY__INIT;
	Wsbridge__V1__ReadReply rr = WSBRIDGE__V1__READ_REPLY__INIT;
	uint8_t *data = pattern(100000, 3), *inner, *buf;
	size_t inner_len, len, kept, at = 0, n = 0;
	struct wsb_wire_field f;
	struct wsb_pieces c;
	struct cut cut;
	ProtobufCMessage *m;
	char msg[8];
	int r;

	(void)state;
	rr.data.data = data;
	rr.data.len = 100000;
	assert_int_equal(wsb_pack(&rr.base, &inner, &inner_len), 0);
	op.code = 0;
	op.message = (char *)"a long status message";
	op.reply.data = inner;
	op.reply.len = inner_len;
	assert_int_equal(wsb_pack(&op.base, &buf, &len), 0);

	read_cut(&c, &cut, buf, len);
	while ((r = wsb_pieces_field(&c, &f)) > 0) {
		assert_int_equal(f.type, WSB_WIRE_LEN);
		if (f.number == 3) {
			assert_int_equal(f.len, strlen(op.message));
			assert_int_equal(wsb_pieces_copy_cut(&c, f.len, msg, sizeof(msg), &kept), 0);
			assert_int_equal(kept, sizeof(msg));
			assert_memory_equal(msg, "a long s", sizeof(msg));
		} else {
			assert_int_equal(f.number, 4);
			at = c.pos;
			n = f.len;
			assert_int_equal(wsb_pieces_skip(&c, f.len), 0);
		}
	}
	assert_int_equal(r, 0);
	assert_int_equal(c.pos, len);
	assert_int_equal(n, inner_len);
	assert_int_equal(at, len - inner_len);
	/* Past the range. */
	assert_int_equal(wsb_pieces_skip(&c, 1), -EBADMSG);

	/* The second pass: the reply decoded from where the first found it,
	 * in a range narrowed to it. */
	read_cut(&c, &cut, buf, len);
	assert_int_equal(wsb_pieces_skip(&c, at), 0);
	assert_int_equal(wsb_pieces_limit(&c, n + 1), SIZE_MAX); /* wider than what is left */
	assert_int_equal(wsb_pieces_limit(&c, n), 0);
	assert_int_equal(wsb_unpack_pieces(&wsbridge__v1__read_reply__descriptor, &c, &m), 0);
	assert_int_equal(c.left, 0);
	assert_int_equal(((Wsbridge__V1__ReadReply *)m)->data.len, 100000);
	assert_memory_equal(((Wsbridge__V1__ReadReply *)m)->data.data, data, 100000);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
	free(inner);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_errno_names_round_trip),
		cmocka_unit_test(test_status_from_errno),
		cmocka_unit_test(test_errno_from_status),
		cmocka_unit_test(test_status_names),
		cmocka_unit_test(test_codec_round_trip_bytes),
		cmocka_unit_test(test_codec_empty_and_garbage),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_addr_check),
		cmocka_unit_test(test_session_id),
		cmocka_unit_test(test_token_read),
		cmocka_unit_test(test_time_ns),
		cmocka_unit_test(test_time_wire),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_wire),
		cmocka_unit_test(test_unpack_pieces),
		cmocka_unit_test(test_unpack_fields_max),
		cmocka_unit_test(test_pieces_fields),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
