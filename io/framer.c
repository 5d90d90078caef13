// SPDX-License-Identifier: MIT
/*
 * The framer: a small state machine between the receive path and the
 * packet handlers.
 *
 * State is the prefix gathered so far (hdr_have of hdr_len bytes) and the
 * packet being stitched (cur, still lacking need bytes).  A feed walks the
 * input once: prefix bytes go to hdr[], payload bytes are copied into cur,
 * and a complete packet is passed to emit().  When the allocator fails, the
 * complete prefix stays in hdr[] (hdr_have == hdr_len, cur == NULL) and the
 * next feed retries the allocation before taking any byte, so a caller can
 * stop, wait for buffers and resume with whatever it had not fed.
 */
#include <errno.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/framer.h>

int ao_framing_resolve(struct ao_framing *fr)
{
	if (!fr)
		return -EINVAL;
	if (fr->kind != AO_FRAME_RAW && fr->kind != AO_FRAME_LEN16 &&
	    fr->kind != AO_FRAME_LEN32 && fr->kind != AO_FRAME_WS)
		return -EINVAL;
	if (fr->order != AO_ORDER_NETWORK && fr->order != AO_ORDER_LITTLE)
		return -EINVAL;
	if (fr->flags & ~AO_FRAME_ALLOW_EMPTY)
		return -EINVAL;
	if (fr->max_packet == 0)
		fr->max_packet = AO_FRAME_DEFAULT_MAX;
	if (fr->max_packet > AO_FRAME_LIMIT)
		return -EINVAL;
	/* A 2-byte prefix cannot say more than 65535. */
	if (fr->kind == AO_FRAME_LEN16 && fr->max_packet > 0xffffu)
		fr->max_packet = 0xffffu;
	return 0;
}

int ao_framer_init(struct ao_framer *f, const struct ao_framing *fr,
		   ao_framer_alloc_fn alloc, ao_framer_emit_fn emit, void *arg)
{
	struct ao_framing c;
	int err;

	if (!f || !fr || !alloc || !emit)
		return -EINVAL;
	c = *fr;
	err = ao_framing_resolve(&c);
	if (err)
		return err;
	if (c.kind == AO_FRAME_WS)
		return -EINVAL; /* frames are the server's (io/http.c) */
	memset(f, 0, sizeof(*f));
	f->cfg = c;
	f->alloc = alloc;
	f->emit = emit;
	f->arg = arg;
	f->hdr_len = (uint8_t)c.kind;
	return 0;
}

static uint32_t decode_len(const struct ao_framer *f)
{
	const uint8_t *h = f->hdr;

	if (f->hdr_len == 2)
		return f->cfg.order == AO_ORDER_NETWORK ?
			       (uint32_t)h[0] << 8 | h[1] :
			       (uint32_t)h[1] << 8 | h[0];
	if (f->cfg.order == AO_ORDER_NETWORK)
		return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 |
		       (uint32_t)h[2] << 8 | h[3];
	return (uint32_t)h[3] << 24 | (uint32_t)h[2] << 16 |
	       (uint32_t)h[1] << 8 | h[0];
}

int ao_framing_header(const struct ao_framing *fr, size_t len, uint8_t out[4])
{
	bool net = fr->order == AO_ORDER_NETWORK;

	switch (fr->kind) {
	case AO_FRAME_RAW:
		return 0;
	case AO_FRAME_LEN16:
		if (len > 0xffffu)
			return -EMSGSIZE;
		out[net ? 0 : 1] = (uint8_t)(len >> 8);
		out[net ? 1 : 0] = (uint8_t)len;
		return 2;
	case AO_FRAME_LEN32:
		if (len > 0xffffffffu)
			return -EMSGSIZE;
		for (int i = 0; i < 4; i++)
			out[net ? 3 - i : i] = (uint8_t)(len >> (8 * i));
		return 4;
	case AO_FRAME_WS: /* a frame header, written by the server */
		break;
	}
	return -EINVAL;
}

/* Emit cur and clear it; the reference passes to emit(). */
static int emit_cur(struct ao_framer *f)
{
	struct ao_buf *pkt = f->cur;

	f->cur = NULL;
	f->packets++;
	return f->emit(f->arg, pkt);
}

/* Raw framing: copy into as many buffers as it takes, each holding at most
 * max_packet bytes. */
static int feed_raw(struct ao_framer *f, const uint8_t *p, size_t len,
		    size_t *consumed)
{
	size_t off = 0;

	while (off < len) {
		struct ao_buf *b = f->alloc(f->arg);
		size_t n;
		int err;

		if (!b) {
			*consumed = off;
			return -ENOBUFS;
		}
		/* At most one buffer, and never over max_packet: a pool may
		 * have larger buffers than the packets it is configured for. */
		n = b->cap < f->cfg.max_packet ? b->cap : f->cfg.max_packet;
		if (len - off < n)
			n = len - off;
		memcpy(b->data, p + off, n);
		b->len = (uint32_t)n;
		off += n;
		f->cur = b;
		err = emit_cur(f);
		if (err < 0) {
			*consumed = off;
			return err;
		}
	}
	*consumed = off;
	return 0;
}

int ao_framer_feed(struct ao_framer *f, const void *data, size_t len,
		   size_t *consumed)
{
	const uint8_t *p = data;
	size_t off = 0;
	int err;

	*consumed = 0;
	if (f->hdr_len == 0)
		return feed_raw(f, p, len, consumed);
	for (;;) {
		if (!f->cur) {
			uint32_t plen;

			/* Gather the prefix. */
			while (f->hdr_have < f->hdr_len && off < len)
				f->hdr[f->hdr_have++] = p[off++];
			if (f->hdr_have < f->hdr_len)
				break;
			plen = decode_len(f);
			if (plen > f->cfg.max_packet) {
				*consumed = off;
				return -EMSGSIZE;
			}
			if (plen == 0 &&
			    !(f->cfg.flags & AO_FRAME_ALLOW_EMPTY)) {
				*consumed = off;
				return -EBADMSG;
			}
			/* The prefix stays in hdr[] until a buffer is had. */
			f->cur = f->alloc(f->arg);
			if (!f->cur) {
				*consumed = off;
				return -ENOBUFS;
			}
			if (plen > f->cur->cap) {
				ao_buf_put(f->cur);
				f->cur = NULL;
				*consumed = off;
				return -EMSGSIZE;
			}
			f->hdr_have = 0;
			f->need = plen;
		}
		if (f->need) {
			size_t n = len - off < f->need ? len - off : f->need;

			if (n == 0)
				break;
			memcpy((uint8_t *)f->cur->data + f->cur->len, p + off,
			       n);
			f->cur->len += (uint32_t)n;
			f->need -= (uint32_t)n;
			off += n;
			if (f->need)
				break;
		}
		err = emit_cur(f);
		if (err < 0) {
			*consumed = off;
			return err;
		}
		if (off == len)
			break;
	}
	*consumed = off;
	return 0;
}

bool ao_framer_partial(const struct ao_framer *f)
{
	return f->cur != NULL || f->hdr_have != 0;
}

void ao_framer_reset(struct ao_framer *f)
{
	if (f->cur)
		ao_buf_put(f->cur);
	f->cur = NULL;
	f->need = 0;
	f->hdr_have = 0;
}
