/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * A received gRPC byte buffer decoded in place: its slices read as
 * wsb_pieces (wsb.h), so a message is not flattened into one buffer first
 * (grpc_byte_buffer_reader_readall(), a copy of all of it) before
 * protobuf-c copies its bytes fields again. For the two files that hold
 * gRPC calls, fusefs/client.c and agentd/rpc_server.c; header-only, because
 * libwsproto (wsb.c) links no gRPC.
 *
 * The functions take a grpc_byte_buffer the caller owns and keeps alive
 * while they run; they do not free it. Any thread (one per buffer).
 */
#ifndef WSB_GRPC_H
#define WSB_GRPC_H

#include <errno.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "wsb.h"

/* wsb_pieces' next: the next slice of reader @arg, in place. */
static inline int wsb_grpc_piece(void *arg, const uint8_t **ptr, size_t *len)
{
	grpc_slice *s;

	if (!grpc_byte_buffer_reader_peek(arg, &s))
		return 0;
	*ptr = GRPC_SLICE_START_PTR(*s);
	*len = GRPC_SLICE_LENGTH(*s);
	return 1;
}

/**
 * Start reading all of @p bb's bytes with @p c, through reader @p r (which
 * the caller destroys with grpc_byte_buffer_reader_destroy() after a 0
 * return). Returns 0, or -EBADMSG when gRPC cannot read @p bb.
 */
static inline int wsb_grpc_pieces(grpc_byte_buffer *bb, grpc_byte_buffer_reader *r,
				  struct wsb_pieces *c)
{
	/* A received message comes inflated (gRPC's message decompression
	 * filter), and the 1.51 reader reads a buffer as it is: its length is
	 * what the reader gives. */
	if (!grpc_byte_buffer_reader_init(r, bb))
		return -EBADMSG;
	wsb_pieces_init(c, wsb_grpc_piece, r, grpc_byte_buffer_length(bb));
	return 0;
}

/**
 * Decode the @p len bytes at byte @p at of @p bb (SIZE_MAX: all from @p at
 * on) as a message of @p desc, with wsb_unpack_pieces(). Returns 0 with
 * *@p ret (the caller's), -EBADMSG (also when @p bb has fewer bytes),
 * -E2BIG (WSB_UNPACK_FIELDS_MAX) or -ENOMEM.
 */
static inline int wsb_grpc_unpack(grpc_byte_buffer *bb, size_t at, size_t len,
				  const ProtobufCMessageDescriptor *desc, ProtobufCMessage **ret)
{
	grpc_byte_buffer_reader r;
	struct wsb_pieces c;
	int rc;

	if (wsb_grpc_pieces(bb, &r, &c) < 0)
		return -EBADMSG;
	rc = wsb_pieces_skip(&c, at);
	if (rc == 0 && len != SIZE_MAX && wsb_pieces_limit(&c, len) == SIZE_MAX)
		rc = -EBADMSG;
	if (rc == 0)
		rc = wsb_unpack_pieces(desc, &c, ret);
	grpc_byte_buffer_reader_destroy(&r);
	return rc;
}

#endif /* WSB_GRPC_H */
