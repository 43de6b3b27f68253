/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The wire conventions every binary shares: errno names and gRPC status codes
 * (docs/protocol.md), message packing, and the stderr logger. Any thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wsb.h"

static const char *const status_names[] = {
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
};

const char *wsb_status_name(int code)
{
	if (code < 0 || code >= (int)(sizeof(status_names) / sizeof(status_names[0])))
		return "UNKNOWN_STATUS";
	return status_names[code];
}

/* glibc's strerrorname_np(3) (glibc >= 2.32) is the errno name table. */
#define WSB_ERRNO_MAX 4096

const char *wsb_errno_name(int err)
{
	if (err <= 0 || err >= WSB_ERRNO_MAX)
		return NULL;
	return strerrorname_np(err);
}

int wsb_errno_from_name(const char *name)
{
	if (!name || !*name)
		return 0;
	for (int e = 1; e < 256; e++) {
		const char *n = strerrorname_np(e);
		if (n && strcmp(n, name) == 0)
			return e;
	}
	return 0;
}

int wsb_status_from_errno(int err)
{
	switch (err) {
	case 0:
		return WSB_OK;
	case ENOENT:
	case ENOTDIR:
	case ENXIO:
	case ESRCH:
		return WSB_NOT_FOUND;
	case EEXIST:
		return WSB_ALREADY_EXISTS;
	case EACCES:
	case EPERM:
	case EXDEV:
	case EROFS:
		return WSB_PERMISSION_DENIED;
	case ENOSPC:
	case EDQUOT:
	case EMFILE:
	case ENFILE:
	case EFBIG:
	case ENOMEM:
	case EAGAIN:
	case EMLINK:
		return WSB_RESOURCE_EXHAUSTED;
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case EBADMSG:
	case E2BIG:
		return WSB_INVALID_ARGUMENT;
	case ENOTEMPTY:
	case EISDIR:
	case EBUSY:
	case ETXTBSY:
	case EBADF:
	case ENODATA:
	case ERANGE:
		return WSB_FAILED_PRECONDITION;
	case EOVERFLOW:
		return WSB_OUT_OF_RANGE;
	case ENOSYS:
	case EOPNOTSUPP:
		return WSB_UNIMPLEMENTED;
	case ETIMEDOUT:
		return WSB_DEADLINE_EXCEEDED;
	case ECANCELED:
	case EINTR:
		return WSB_CANCELLED;
	case ENOTCONN:
	case ECONNREFUSED:
	case ECONNRESET:
	case EPIPE:
		return WSB_UNAVAILABLE;
	case EIO:
		return WSB_DATA_LOSS;
	default:
		return WSB_UNKNOWN;
	}
}

int wsb_errno_from_status(int code)
{
	switch (code) {
	case WSB_OK:
		return 0;
	case WSB_CANCELLED:
		return ECANCELED;
	case WSB_INVALID_ARGUMENT:
		return EINVAL;
	case WSB_DEADLINE_EXCEEDED:
		return ETIMEDOUT;
	case WSB_NOT_FOUND:
		return ENOENT;
	case WSB_ALREADY_EXISTS:
		return EEXIST;
	case WSB_PERMISSION_DENIED:
	case WSB_UNAUTHENTICATED:
		return EACCES;
	case WSB_RESOURCE_EXHAUSTED:
		return ENOSPC;
	case WSB_FAILED_PRECONDITION:
		return EPERM;
	case WSB_OUT_OF_RANGE:
		return EOVERFLOW;
	case WSB_UNIMPLEMENTED:
		return ENOSYS;
	case WSB_UNAVAILABLE:
		return ENOTCONN;
	default:
		return EIO;
	}
}

/* ---- codec ---- */

int wsb_pack(const ProtobufCMessage *msg, uint8_t **ret_buf, size_t *ret_len)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = malloc(n ? n : 1);

	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(msg, buf);
	*ret_buf = buf;
	*ret_len = n;
	return 0;
}

/* ---- logging ---- */

static const char *log_prog = "wsbridge";
static int log_level = WSB_LOG_NOTICE;

static const char *const level_names[] = {
	[WSB_LOG_ERR] = "error", [WSB_LOG_WARNING] = "warning", [WSB_LOG_NOTICE] = "notice",
	[WSB_LOG_INFO] = "info", [WSB_LOG_DEBUG] = "debug",
};

void wsb_log_init(const char *progname, int level)
{
	if (progname)
		log_prog = progname;
	log_level = level;
}

int wsb_token_read(const char *file, char **ret_token)
{
	char buf[WSB_TOKEN_FILE_MAX + 1];
	size_t n = 0;
	ssize_t k;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (n < sizeof(buf)) {
		k = read(fd, buf + n, sizeof(buf) - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			k = -errno;
			close(fd);
			return (int)k;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	if (n > WSB_TOKEN_FILE_MAX)
		return -EFBIG;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
			 buf[n - 1] == '\t'))
		n--;
	if (n == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] <= 0x20 || (unsigned char)buf[i] > 0x7e)
			return -EINVAL;
	*ret_token = strndup(buf, n);
	return *ret_token ? 0 : -ENOMEM;
}

bool wsb_session_id_valid(const void *id, size_t len)
{
	const unsigned char *p = id;

	if (len == 0 || len > WSB_SESSION_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = p[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
			return false;
	}
	return true;
}

int wsb_addr_check(const char *addr, const char **why)
{
	static const char *const schemes[] = { "dns:", "ipv4:", "ipv6:", "vsock:" };
	const char *port, *end;
	unsigned long n;

	*why = NULL;
	if (!addr || !*addr) {
		*why = "empty";
		return -EINVAL;
	}
	if (!strncmp(addr, "unix:", 5) || !strncmp(addr, "unix-abstract:", 14)) {
		if (!addr[addr[4] == '-' ? 14 : 5]) {
			*why = "no socket path after the colon";
			return -EINVAL;
		}
		return 0;
	}
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(addr, schemes[i], strlen(schemes[i])))
			return 0;
	if (addr[0] == '[') {
		end = strstr(addr, "]:");
		if (!end || end == addr + 1) {
			*why = "want [IPV6]:PORT";
			return -EINVAL;
		}
		port = end + 2;
	} else {
		end = strrchr(addr, ':');
		if (!end) {
			*why = "no port (want HOST:PORT)";
			return -EINVAL;
		}
		port = end + 1;
	}
	n = 0;
	for (end = port; *end >= '0' && *end <= '9' && n <= 65535; end++)
		n = n * 10 + (unsigned long)(*end - '0');
	if (end == port || *end || n == 0 || n > 65535) {
		*why = "the port must be a number from 1 to 65535";
		return -EINVAL;
	}
	return 0;
}

int wsb_log_level_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	for (int l = WSB_LOG_ERR; l <= WSB_LOG_DEBUG; l++)
		if (strcmp(name, level_names[l]) == 0)
			return l;
	if (strcmp(name, "err") == 0)
		return WSB_LOG_ERR;
	if (strcmp(name, "warn") == 0)
		return WSB_LOG_WARNING;
	return -EINVAL;
}

bool wsb_log_enabled(int level)
{
	return level <= log_level;
}

void wsb_logv(int level, const char *fmt, va_list ap)
{
	char line[2048];
	int saved = errno;
	int n, m;

	if (!wsb_log_enabled(level))
		return;
	if (level < WSB_LOG_ERR)
		level = WSB_LOG_ERR;
	if (level > WSB_LOG_DEBUG)
		level = WSB_LOG_DEBUG;
	n = snprintf(line, sizeof(line), "%s: %s: ", log_prog, level_names[level]);
	if (n < 0)
		n = 0;
	errno = saved; /* for %m */
	m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	n += m;
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, n);
	errno = saved;
}

void wsb_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wsb_logv(level, fmt, ap);
	va_end(ap);
}

char *wsb_escape(const void *s, size_t len, size_t max)
{
	const unsigned char *p = s;
	size_t n = len < max ? len : max;
	char *out = malloc(n * 4 + 4), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = p[i];
		if (c >= 0x20 && c < 0x7f && c != '\\') {
			*o++ = c;
		} else if (c == '\\') {
			*o++ = '\\';
			*o++ = '\\';
		} else {
			o += sprintf(o, "\\x%02x", c);
		}
	}
	if (len > max) {
		memcpy(o, "...", 3);
		o += 3;
	}
	*o = '\0';
	return out;
}

/* ---- clocks ---- */

int64_t wsb_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct timespec wsb_deadline(clockid_t clock, unsigned ms)
{
	return wsb_deadline_ns(clock, (int64_t)ms * 1000000);
}

struct timespec wsb_deadline_ns(clockid_t clock, int64_t ns)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	ts.tv_sec += ns / 1000000000;
	ts.tv_nsec += ns % 1000000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_nsec -= 1000000000;
		ts.tv_sec++;
	}
	return ts;
}

int64_t wsb_ns_of_ts(const struct timespec *ts)
{
	/* Normalized first (nsec in [0, 10^9)), and for a negative second
	 * counted from the next one up, so that every time that fits does:
	 * INT64_MIN is -9223372037 s + 145224192 ns. */
	int64_t sec = (int64_t)ts->tv_sec, nsec = (int64_t)ts->tv_nsec, ns;

	if (nsec < 0 || nsec >= 1000000000) {
		int64_t carry = nsec / 1000000000 - (nsec % 1000000000 < 0);

		if (__builtin_add_overflow(sec, carry, &sec))
			return carry < 0 ? INT64_MIN : INT64_MAX;
		nsec -= carry * 1000000000;
	}
	if (sec < 0 && nsec > 0) {
		sec++;
		nsec -= 1000000000;
	}
	if (__builtin_mul_overflow(sec, (int64_t)1000000000, &ns) ||
	    __builtin_add_overflow(ns, nsec, &ns))
		return sec < 0 ? INT64_MIN : INT64_MAX;
	return ns;
}

struct timespec wsb_ts_of_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	if (ts.tv_nsec < 0) {
		ts.tv_nsec += 1000000000;
		ts.tv_sec--;
	}
	return ts;
}

void wsb_time_to_wire(const struct timespec *ts, int64_t *ns, int64_t *s, uint32_t *nsec)
{
	int64_t sec = (int64_t)ts->tv_sec, n = (int64_t)ts->tv_nsec;

	*ns = wsb_ns_of_ts(ts);
	*s = 0;
	*nsec = 0;
	if (*ns != INT64_MIN && *ns != INT64_MAX)
		return;
	if (n < 0 || n >= 1000000000) {
		int64_t carry = n / 1000000000 - (n % 1000000000 < 0);

		if (__builtin_add_overflow(sec, carry, &sec)) {
			*s = carry < 0 ? INT64_MIN : INT64_MAX;
			return;
		}
		n -= carry * 1000000000;
	}
	*s = sec;
	*nsec = (uint32_t)n;
}

struct timespec wsb_time_of_wire(int64_t ns, int64_t s, uint32_t nsec)
{
	if ((s || nsec) && nsec < 1000000000)
		return (struct timespec){ .tv_sec = (time_t)s, .tv_nsec = (long)nsec };
	return wsb_ts_of_ns(ns);
}

void wsb_malloc_tune(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 4 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 16 << 20);
	(void)mallopt(M_ARENA_MAX, 1);
}

void wsb_cond_init_mono(pthread_cond_t *cond)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

/* ---- protobuf wire format ---- */

static size_t wire_put_varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

size_t wsb_wire_len_head(uint8_t *out, uint32_t number, size_t len)
{
	size_t n = wire_put_varint(out, (uint64_t)number << 3 | WSB_WIRE_LEN);

	return n + wire_put_varint(out + n, len);
}

size_t wsb_wire_varint_field(uint8_t *out, uint32_t number, uint64_t value)
{
	size_t n = wire_put_varint(out, (uint64_t)number << 3 | WSB_WIRE_VARINT);

	return n + wire_put_varint(out + n, value);
}

/* ---- messages that arrived in pieces ---- */

void wsb_pieces_init(struct wsb_pieces *c, int (*next)(void *arg, const uint8_t **ptr, size_t *len),
		     void *arg, size_t total)
{
	*c = (struct wsb_pieces){ .next = next, .arg = arg, .left = total };
}

/* Make the current piece non-empty. 0, or -EBADMSG when the pieces ended. */
static int pieces_fill(struct wsb_pieces *c)
{
	while (c->len == 0) {
		if (c->next(c->arg, &c->ptr, &c->len) <= 0) {
			c->len = 0;
			return -EBADMSG;
		}
	}
	return 0;
}

int wsb_pieces_copy(struct wsb_pieces *c, void *dst, size_t n)
{
	uint8_t *d = dst;

	if (n > c->left)
		return -EBADMSG;
	while (n) {
		size_t k;

		if (pieces_fill(c) < 0)
			return -EBADMSG;
		k = n < c->len ? n : c->len;
		if (d) {
			memcpy(d, c->ptr, k);
			d += k;
		}
		c->ptr += k;
		c->len -= k;
		c->left -= k;
		c->pos += k;
		n -= k;
	}
	return 0;
}

int wsb_pieces_skip(struct wsb_pieces *c, size_t n)
{
	return wsb_pieces_copy(c, NULL, n);
}

int wsb_pieces_copy_cut(struct wsb_pieces *c, size_t n, void *dst, size_t size, size_t *kept)
{
	*kept = n < size ? n : size;
	if (wsb_pieces_copy(c, dst, *kept) < 0)
		return -EBADMSG;
	return wsb_pieces_skip(c, n - *kept);
}

size_t wsb_pieces_limit(struct wsb_pieces *c, size_t n)
{
	size_t saved;

	if (n > c->left)
		return SIZE_MAX;
	saved = c->left - n;
	c->left = n;
	return saved;
}

/* A varint: at most 10 bytes (protobuf.dev/programming-guides/encoding). */
static int pieces_varint(struct wsb_pieces *c, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < 10; i++) {
		uint8_t b;

		if (wsb_pieces_copy(c, &b, 1) < 0)
			return -EBADMSG;
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*ret = v;
			return 0;
		}
	}
	return -EBADMSG;
}

int wsb_pieces_field(struct wsb_pieces *c, struct wsb_wire_field *f)
{
	uint8_t b[8];
	uint64_t key, v;

	if (c->left == 0)
		return 0;
	if (pieces_varint(c, &key) < 0 || key >> 3 == 0 || key >> 3 > 0x1fffffff)
		return -EBADMSG;
	*f = (struct wsb_wire_field){ .number = (uint32_t)(key >> 3), .type = (unsigned)(key & 7) };
	switch (f->type) {
	case WSB_WIRE_VARINT:
		return pieces_varint(c, &f->value) < 0 ? -EBADMSG : 1;
	case WSB_WIRE_I64:
	case WSB_WIRE_I32: {
		size_t n = f->type == WSB_WIRE_I64 ? 8 : 4;

		if (wsb_pieces_copy(c, b, n) < 0)
			return -EBADMSG;
		for (size_t i = 0; i < n; i++)
			f->value |= (uint64_t)b[i] << (8 * i);
		return 1;
	}
	case WSB_WIRE_LEN:
		if (pieces_varint(c, &v) < 0 || v > c->left)
			return -EBADMSG;
		f->len = (size_t)v;
		return 1;
	default:
		return -EBADMSG;
	}
}

/* A growing buffer of the fields wsb_unpack_pieces() gives protobuf-c. */
struct gather {
	uint8_t *buf;
	size_t len, cap;
};

/* Room for @n more bytes at g->buf + g->len. 0 or -ENOMEM. */
static int gather_room(struct gather *g, size_t n)
{
	size_t cap = g->cap && g->cap <= SIZE_MAX / 2 ? 2 * g->cap : 256;
	uint8_t *b;

	if (n <= g->cap - g->len)
		return 0;
	if (n > SIZE_MAX - g->len)
		return -ENOMEM;
	/* Doubling for small fields; a large one (a nested message with a
	 * Write's or exec output's bytes) gets just its room, not twice. */
	if (cap - g->len < n || cap < g->len)
		cap = g->len + n;
	b = realloc(g->buf, cap);
	if (!b)
		return -ENOMEM;
	g->buf = b;
	g->cap = cap;
	return 0;
}

/* Field @f (its key and value; a LEN field's bytes from @c) onto @g. */
static int gather_field(struct gather *g, struct wsb_pieces *c, const struct wsb_wire_field *f)
{
	uint64_t key = (uint64_t)f->number << 3 | f->type;
	int r = gather_room(g, 2 * 10 + 8 + (f->type == WSB_WIRE_LEN ? f->len : 0));

	if (r < 0)
		return r;
	g->len += wire_put_varint(g->buf + g->len, key);
	switch (f->type) {
	case WSB_WIRE_VARINT:
		g->len += wire_put_varint(g->buf + g->len, f->value);
		return 0;
	case WSB_WIRE_I64:
	case WSB_WIRE_I32:
		for (unsigned i = 0; i < (f->type == WSB_WIRE_I64 ? 8u : 4u); i++)
			g->buf[g->len++] = (uint8_t)(f->value >> (8 * i));
		return 0;
	default: /* WSB_WIRE_LEN (wsb_pieces_field() gives no other) */
		g->len += wire_put_varint(g->buf + g->len, f->len);
		if (wsb_pieces_copy(c, g->buf + g->len, f->len) < 0)
			return -EBADMSG;
		g->len += f->len;
		return 0;
	}
}

/* Most singular bytes fields of one message wsb_unpack_pieces() copies on
 * their own; a message with more has the others gathered. */
#define DIRECT_MAX 4

int wsb_unpack_pieces(const ProtobufCMessageDescriptor *desc, struct wsb_pieces *c,
		      ProtobufCMessage **ret_msg)
{
	static const uint8_t empty[1];
	struct {
		const ProtobufCFieldDescriptor *fd;
		uint8_t *data;
		size_t len;
	} direct[DIRECT_MAX] = { { 0 } };
	struct gather g = { 0 };
	struct wsb_wire_field f;
	ProtobufCMessage *m = NULL;
	size_t nfields = 0;
	int r;

	while ((r = wsb_pieces_field(c, &f)) > 0) {
		if (++nfields > WSB_UNPACK_FIELDS_MAX) {
			r = -E2BIG;
			break;
		}
		const ProtobufCFieldDescriptor *fd =
			protobuf_c_message_descriptor_get_field(desc, f.number);
		size_t i, free_slot = DIRECT_MAX;

		for (i = 0; fd && i < DIRECT_MAX; i++) {
			if (direct[i].fd == fd)
				break;
			if (!direct[i].fd && free_slot == DIRECT_MAX)
				free_slot = i;
		}
		if (fd && i < DIRECT_MAX) {
			/* Seen on its own before: this one comes later and wins. */
			free(direct[i].data);
			direct[i].fd = NULL;
			direct[i].data = NULL;
			free_slot = i;
		}
		if (f.type == WSB_WIRE_LEN && f.len >= WSB_UNPACK_DIRECT_MIN && fd &&
		    fd->type == PROTOBUF_C_TYPE_BYTES && fd->label != PROTOBUF_C_LABEL_REPEATED &&
		    fd->label != PROTOBUF_C_LABEL_REQUIRED && /* protobuf-c checks those */
		    !(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && free_slot < DIRECT_MAX) {
			uint8_t *data = malloc(f.len);

			if (!data) {
				r = -ENOMEM;
				break;
			}
			if (wsb_pieces_copy(c, data, f.len) < 0) {
				free(data);
				r = -EBADMSG;
				break;
			}
			direct[free_slot].fd = fd;
			direct[free_slot].data = data;
			direct[free_slot].len = f.len;
			continue;
		}
		r = gather_field(&g, c, &f);
		if (r < 0)
			break;
	}
	if (r == 0) {
		m = protobuf_c_message_unpack(desc, NULL, g.len, g.buf ? g.buf : empty);
		r = m ? 0 : -EBADMSG;
	}
	free(g.buf);
	for (size_t i = 0; i < DIRECT_MAX; i++) {
		ProtobufCBinaryData *bd;

		if (!direct[i].fd)
			continue;
		if (!m) {
			free(direct[i].data);
			continue;
		}
		/* Replaces a value gathered from before it (the later wins). */
		bd = (ProtobufCBinaryData *)((char *)m + direct[i].fd->offset);
		if (!direct[i].fd->default_value ||
		    ((const ProtobufCBinaryData *)direct[i].fd->default_value)->data != bd->data)
			free(bd->data);
		bd->data = direct[i].data;
		bd->len = direct[i].len;
		if (direct[i].fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
		    direct[i].fd->quantifier_offset)
			*(protobuf_c_boolean *)((char *)m + direct[i].fd->quantifier_offset) = 1;
	}
	if (r < 0)
		return r;
	*ret_msg = m;
	return 0;
}

/*
 * Length of the well-formed prefix of the sequence at s (n bytes available)
 * per Unicode Table 3-7: returns the sequence length if it is complete and
 * well-formed, else 0 and sets *bad to the length of its maximal subpart
 * (>= 1), which is replaced by one U+FFFD.
 */
size_t wsb_utf8_seq(const uint8_t *s, size_t n, size_t *bad)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* <= U+10FFFF */
	} else {
		*bad = 1; /* 80..C1, F5..FF never start a sequence */
		return 0;
	}
	for (i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}
