// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the framer (io/framer.c) on buffers from a real pool.
 *
 * Input: a 6-byte header, then the stream.
 *	byte 0	  framing kind (raw, len16, len32), byte order, ALLOW_EMPTY,
 *		  whether the allocator and the emit callback may fail
 *	byte 1	  the pool's buffer size (8 .. 70000 bytes)
 *	bytes 2-3 max_packet (0: the default, 1: AO_FRAME_LIMIT, else as is)
 *	bytes 4-5 seed of the choices below
 * The stream is fed in chunks of random sizes (0 included), so packets are
 * stitched across feeds; the allocator may fail (-ENOBUFS: the rest is fed
 * again, possibly nothing, as framer.h allows) and emit may refuse a
 * packet (the rest is fed again too).  Checked against a reference parse
 * of the same stream:
 *  - packets come out in order, each equal to its payload in the stream,
 *    none over max_packet nor the buffer size, none empty unless allowed;
 *  - -EMSGSIZE and -EBADMSG come only for a prefix over the limit or a zero
 *    prefix not allowed, with *consumed just past that prefix; nothing
 *    else fails but the injected failures;
 *  - raw framing: the packets' concatenation is the stream, each at most
 *    one buffer and never crossing a feed;
 *  - everything fed is consumed, ao_framer_partial() is true exactly when
 *    the stream ends inside a packet, and after ao_framer_reset() every
 *    buffer is back in its pool.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/framer.h>
#include "fuzz.h"

#define FRAMER_HDR 6
#define FRAMER_POOL_BUFS 8u

static const size_t framer_sizes[] = { 8, 16, 64, 300, 4096, 70000 };
static struct ao_bufpool *framer_pools[ARRAY_SIZE(framer_sizes)];

struct framer_run {
	struct ao_framer f;
	struct ao_bufpool *pool;
	size_t cap; /* the pool's buffer size */
	struct fuzz_rng rng;
	bool may_fail;
	bool alloc_failed; /* the last allocation failed */
	/* The stream, and the reference parser's position in it. */
	const uint8_t *s;
	size_t len;
	size_t ref; /* stream offset of the next packet (with its prefix) */
	size_t fed_end; /* end of the current feed (raw framing) */
	size_t packets;
};

/* The reference parse of the prefix at ref; false if it is incomplete. */
static bool framer_ref_len(const struct framer_run *r, uint32_t *plen)
{
	const uint8_t *h = r->s + r->ref;
	unsigned int hl = r->f.cfg.kind;
	bool net = r->f.cfg.order == AO_ORDER_NETWORK;
	uint32_t v = 0;

	if (r->len - r->ref < hl)
		return false;
	for (unsigned int i = 0; i < hl; i++)
		v |= (uint32_t)h[net ? hl - 1 - i : i] << (8 * i);
	*plen = v;
	return true;
}

static struct ao_buf *framer_alloc(void *arg)
{
	struct framer_run *r = arg;

	/* Never twice in a row, so that every feed makes progress. */
	if (r->may_fail && !r->alloc_failed &&
	    fuzz_rng_below(&r->rng, 8) == 0) {
		r->alloc_failed = true;
		return NULL;
	}
	r->alloc_failed = false;
	return ao_buf_get(r->pool);
}

static int framer_emit(void *arg, struct ao_buf *pkt)
{
	struct framer_run *r = arg;
	const struct ao_framing *c = &r->f.cfg;
	uint32_t plen;

	FUZZ_CHECK(pkt && pkt->pool == r->pool && pkt->refs == 1);
	FUZZ_CHECK(pkt->len <= pkt->cap && pkt->len <= c->max_packet);
	if (c->kind == AO_FRAME_RAW) {
		FUZZ_CHECK(pkt->len > 0 && r->ref + pkt->len <= r->fed_end);
		/* Full packets, except at the end of a feed. */
		FUZZ_CHECK(pkt->len == (pkt->cap < c->max_packet ?
						pkt->cap :
						c->max_packet) ||
			   r->ref + pkt->len == r->fed_end);
		FUZZ_CHECK(!memcmp(pkt->data, r->s + r->ref, pkt->len));
		r->ref += pkt->len;
	} else {
		FUZZ_CHECK(framer_ref_len(r, &plen));
		FUZZ_CHECK(plen == pkt->len);
		FUZZ_CHECK(plen || (c->flags & AO_FRAME_ALLOW_EMPTY));
		FUZZ_CHECK(r->ref + c->kind + plen <= r->len);
		FUZZ_CHECK(!memcmp(pkt->data, r->s + r->ref + c->kind, plen));
		r->ref += c->kind + plen;
	}
	r->packets++;
	ao_buf_put(pkt);
	if (r->may_fail && fuzz_rng_below(&r->rng, 16) == 0)
		return -ECANCELED;
	return 0;
}

/* A prefixed stream stopped with err at stream offset at: was it right? */
static void framer_check_error(struct framer_run *r, int err, size_t at)
{
	const struct ao_framing *c = &r->f.cfg;
	uint32_t plen;

	FUZZ_CHECK(c->kind != AO_FRAME_RAW);
	FUZZ_CHECK(framer_ref_len(r, &plen));
	FUZZ_CHECK(at == r->ref + c->kind);
	if (err == -EBADMSG) {
		FUZZ_CHECK(plen == 0 && !(c->flags & AO_FRAME_ALLOW_EMPTY));
	} else {
		/* Over max_packet, or over the buffer it would go in. */
		FUZZ_CHECK(err == -EMSGSIZE);
		FUZZ_CHECK(plen > c->max_packet || plen > r->cap);
	}
}

int fuzz_framer(const uint8_t *data, size_t size)
{
	struct framer_run r = { 0 };
	struct ao_framing fr = { 0 };
	uint8_t mode, szi;
	uint32_t maxp;
	size_t off = 0;
	int err;

	if (size < FRAMER_HDR)
		return 0;
	mode = data[0];
	szi = (uint8_t)(data[1] % ARRAY_SIZE(framer_sizes));
	maxp = (uint32_t)data[2] | (uint32_t)data[3] << 8;
	fuzz_rng_seed(&r.rng, (uint64_t)data[4] | (uint64_t)data[5] << 8);
	data += FRAMER_HDR;
	size -= FRAMER_HDR;

	fr.kind = (mode & 3) == 1 ? AO_FRAME_LEN16 :
		  (mode & 3) == 2 ? AO_FRAME_LEN32 :
				    AO_FRAME_RAW;
	fr.order = (mode & 4) ? AO_ORDER_LITTLE : AO_ORDER_NETWORK;
	fr.flags = (mode & 8) ? AO_FRAME_ALLOW_EMPTY : 0;
	fr.max_packet = maxp == 1 ? AO_FRAME_LIMIT : maxp;
	r.may_fail = mode & 16;

	if (!framer_pools[szi]) {
		struct ao_bufpool_params p = { .buf_size = framer_sizes[szi],
					       .count = FRAMER_POOL_BUFS,
					       .shards = 1 };

		FUZZ_CHECK(ao_bufpool_create(&framer_pools[szi], &p) == 0);
	}
	r.pool = framer_pools[szi];
	r.cap = framer_sizes[szi];
	r.s = data;
	r.len = size;
	FUZZ_CHECK(ao_framer_init(&r.f, &fr, framer_alloc, framer_emit, &r) ==
		   0);
	FUZZ_CHECK(r.f.cfg.max_packet >= 1 &&
		   r.f.cfg.max_packet <= AO_FRAME_LIMIT);

	while (off < size) {
		size_t n = fuzz_rng_below(&r.rng, 4) == 0 ?
				   size - off :
				   fuzz_rng_below(&r.rng, 70);
		size_t used;

		if (n > size - off)
			n = size - off;
		r.fed_end = off + n;
		do {
			used = (size_t)-1;
			err = ao_framer_feed(&r.f, data + off, r.fed_end - off,
					     &used);
			FUZZ_CHECK(used <= r.fed_end - off);
			off += used;
			/* Injected failures: feed the rest again. */
		} while ((err == -ENOBUFS && r.alloc_failed) ||
			 (err == -ECANCELED && r.may_fail));
		if (err) {
			framer_check_error(&r, err, off);
			goto out;
		}
		FUZZ_CHECK(off == r.fed_end);
		if (fr.kind == AO_FRAME_RAW)
			FUZZ_CHECK(r.ref == off);
	}
	/* The stream ends inside a packet exactly when the reference says
	 * bytes are left over after the last whole packet. */
	FUZZ_CHECK(ao_framer_partial(&r.f) == (r.ref < size));
	FUZZ_CHECK(r.f.packets == r.packets);
out:
	ao_framer_reset(&r.f);
	FUZZ_CHECK(!ao_framer_partial(&r.f));
	FUZZ_CHECK(ao_bufpool_in_use(r.pool) == 0);
	return 0;
}
