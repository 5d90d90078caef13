/* SPDX-License-Identifier: MIT */
/*
 * The framer: cuts a TCP byte stream into packets.
 *
 *	AO_FRAME_RAW	every receive is a packet (split at the buffer size);
 *	AO_FRAME_LEN16	a 2-byte length prefix, then that many bytes;
 *	AO_FRAME_LEN32	a 4-byte length prefix, then that many bytes;
 *	AO_FRAME_WS	WebSocket (RFC 6455), for the server only (the byte
 *			framer below does not take it): see aorta/io/server.h.
 *
 * The prefix counts the payload only (not itself), in network byte order
 * unless AO_ORDER_LITTLE.  A packet split over several feeds, or several
 * packets in one feed, come out the same: one packet per buffer, payload
 * only, in stream order.  A split packet is stitched into one buffer from
 * the allocator, so a handler never sees a fragment.
 *
 * A zero length prefix is an error (-EBADMSG) unless AO_FRAME_ALLOW_EMPTY,
 * in which case it is an empty packet (a buffer with len 0), e.g. a
 * keep-alive.  A length over max_packet is -EMSGSIZE.
 *
 * The framer does no I/O and takes no locks: one framer per connection,
 * fed by one thread at a time.
 */
#ifndef AORTA_IO_FRAMER_H
#define AORTA_IO_FRAMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_buf;

/* How packets are delimited. */
enum ao_frame_kind {
	AO_FRAME_RAW = 0, /* no framing: each receive is a packet */
	AO_FRAME_LEN16 = 2, /* 2-byte length prefix */
	AO_FRAME_LEN32 = 4, /* 4-byte length prefix */
	AO_FRAME_WS = 8, /* WebSocket (RFC 6455): each connection starts with
			  * an HTTP/1.1 upgrade (or a plain GET, see on_http) */
};

/* Byte order of the length prefix. */
enum ao_byte_order {
	AO_ORDER_NETWORK = 0, /* big-endian (the default) */
	AO_ORDER_LITTLE = 1, /* little-endian */
};

/* Flags for struct ao_framing. */
#define AO_FRAME_ALLOW_EMPTY 0x1u /* a zero length is an empty packet */

/* Default and largest max_packet. */
#define AO_FRAME_DEFAULT_MAX (64u * 1024u)
#define AO_FRAME_LIMIT (1u << 30)

struct ao_framing {
	enum ao_frame_kind kind; /* raw, 2- or 4-byte prefix */
	enum ao_byte_order order; /* of the prefix; 0: network order */
	uint32_t max_packet; /* payload bytes; 0: AO_FRAME_DEFAULT_MAX */
	unsigned int flags; /* AO_FRAME_* */
};

/* Get an empty buffer (len 0, one reference) for a packet, or NULL. */
typedef struct ao_buf *(*ao_framer_alloc_fn)(void *arg);
/* Take a finished packet (the reference passes to the callee); a negative
 * return stops the feed and is returned by ao_framer_feed(). */
typedef int (*ao_framer_emit_fn)(void *arg, struct ao_buf *pkt);

struct ao_framer {
	struct ao_framing cfg; /* resolved (max_packet set) */
	ao_framer_alloc_fn alloc;
	ao_framer_emit_fn emit;
	void *arg;
	struct ao_buf *cur; /* packet being stitched, or NULL */
	uint32_t need; /* payload bytes cur still lacks */
	uint8_t hdr_len; /* 0, 2 or 4 */
	uint8_t hdr_have; /* prefix bytes gathered so far */
	uint8_t hdr[4];
	uint64_t packets; /* emitted so far */
};

/* Check a framing description and fill in defaults; 0 or -EINVAL. */
AO_API int ao_framing_resolve(struct ao_framing *fr);
/* Initialise a framer; 0 or -EINVAL for a bad framing. */
AO_API int ao_framer_init(struct ao_framer *f, const struct ao_framing *fr,
			  ao_framer_alloc_fn alloc, ao_framer_emit_fn emit,
			  void *arg);
/*
 * Feed len bytes.  *consumed is set to how many were taken.  Returns 0
 * (all consumed), -EMSGSIZE (length over max), -EBADMSG (zero length, not
 * allowed), -ENOBUFS (the allocator failed: feed the rest, possibly
 * nothing, again later and it resumes where it stopped) or the emit
 * callback's negative return.  After -EMSGSIZE/-EBADMSG the stream is
 * lost: reset or drop the framer.
 */
AO_API int ao_framer_feed(struct ao_framer *f, const void *data, size_t len,
			  size_t *consumed);
/* True if the framer is inside a packet (prefix or payload pending). */
AO_API bool ao_framer_partial(const struct ao_framer *f);
/* Drop any partial packet (its buffer is put) and start afresh. */
AO_API void ao_framer_reset(struct ao_framer *f);
/* Write the prefix for a len-byte payload into out[4]; returns the prefix
 * size (0 for raw), or -EMSGSIZE if len does not fit the prefix. */
AO_API int ao_framing_header(const struct ao_framing *fr, size_t len,
			     uint8_t out[4]);

#endif /* AORTA_IO_FRAMER_H */
