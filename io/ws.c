// SPDX-License-Identifier: MIT
/*
 * WebSocket frames (RFC 6455 section 5), the server's side.
 *
 * What the RFC demands of a server, and how this file does it:
 *  - Every client frame is masked with a 4-byte key; an unmasked one fails
 *    the connection (1002).  The decoder unmasks the payload in place, in
 *    the buffer the bytes were received into, so a message that arrives
 *    whole in one pool buffer needs no copy at all.
 *  - Server frames are never masked.  With no extension negotiated a
 *    server frame depends only on its payload, so one frame is the same
 *    bytes for every recipient: "frame once, send to many" (below).
 *  - RSV1-3 are zero unless an extension defines them, and only opcodes
 *    0-2 and 8-10 exist: anything else is 1002.
 *  - Control frames (close, ping, pong) carry at most 125 bytes, are
 *    never fragmented (1002 otherwise), and may come between the fragments
 *    of a message.  The decoder gathers them in its own 125 bytes, so a
 *    control frame split over receives comes out whole and the message it
 *    interrupted goes on.
 *  - A fragmented message is a TEXT or BINARY frame without FIN, then
 *    CONTINUATION frames up to one with FIN.  A continuation with no
 *    message open, or a new TEXT/BINARY frame inside one, is 1002.
 *  - A message (its fragments together) over max_message is 1009; this is
 *    seen at the frame header that would cross the bound, before any of
 *    its payload is read.
 *  - A TEXT message is UTF-8 (1007 otherwise).  It is checked as its bytes
 *    arrive, a code point split across frames or receives included, so a
 *    bad byte fails the connection at once rather than at the end.
 *  - The 64-bit length has its top bit clear (1002 otherwise).  The RFC
 *    asks the sender for the shortest length encoding but does not ask the
 *    receiver to check it, and we do not: a 10-byte header for 5 bytes is
 *    accepted.
 *  - A close frame has no payload (reported as 1005, "no status") or a
 *    2-byte code and a UTF-8 reason.  Valid codes are 1000-1003,
 *    1007-1011 and 3000-4999; 1004-1006 and 1015 are reserved for
 *    reporting and never sent, and everything else (below 1000,
 *    1012-2999, 5000 and up) is 1002 as well.  A bad reason is 1007.  After
 *    a close the decoder reads nothing more (section 5.5.1).
 *
 * The decoder hands out events one at a time: DATA chunks of a message
 * (pointers into the caller's buffer, already unmasked, fin on the last
 * one), and PING, PONG and CLOSE with their payload.  Reassembly is the
 * caller's: the io layer appends chunks into one pool buffer per open
 * message (or, when one chunk is a whole message, takes the receive
 * buffer as it is), so the decoder never allocates and its state is one
 * small struct per connection.
 *
 * Frame once, send to many: io_ws_frame_in_headroom() writes the 2, 4 or
 * 10-byte header just before the payload, so that header and payload are
 * one span that N connections can send by reference.  The pool reserves
 * headroom before each buffer's data for it (the server's own pool:
 * IO_WS_HDR_MAX bytes), and each buffer says whether (and for which
 * opcode and length) its header has been written, so that a broadcast
 * frames it once, before the first send takes a reference: see
 * io_ws_frame() in io/http.c, which wires all of this into the server.
 * A buffer without headroom gets its header inline in the send queue's
 * node (hdr[10] in io/sendq.h), one per recipient.
 *
 * What we decline:
 *  - permessage-deflate (RFC 7692), by not answering the offer: its zlib
 *    state costs about 256 KiB per connection at zlib's defaults, each
 *    client's compressed bytes differ (so a broadcast is no longer one
 *    frame for all), and game snapshots are small binary deltas that
 *    compress poorly.  With no extension, RSV bits stay errors.
 *  - Checking that lengths are minimally encoded (not required, above).
 */
#include <errno.h>
#include <string.h>
#include "ws_priv.h"

#define WS_DEFAULT_MAX_MESSAGE (16u << 20)

enum {
	WS_ST_HDR,
	WS_ST_PAYLOAD,
	WS_ST_CLOSED, /* a close frame came: the rest is ignored */
	WS_ST_FAILED, /* an error: close_code says why */
};

bool io_utf8_feed(struct io_utf8 *u, const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = p[i++];

		if (u->need) {
			if (c < u->lo || c > u->hi)
				return false;
			u->need--;
			u->lo = 0x80;
			u->hi = 0xbf;
			continue;
		}
		if (c < 0x80) {
			/* ASCII runs, the common case, a word at a time. */
			while (i + 8 <= n) {
				uint64_t w;

				memcpy(&w, p + i, 8);
				if (w & 0x8080808080808080ull)
					break;
				i += 8;
			}
			continue;
		}
		/* Lead bytes: the range of the first continuation byte
		 * excludes overlongs (E0, F0), surrogates (ED) and code
		 * points past U+10FFFF (F4); C0, C1 and F5-FF never occur. */
		if (c >= 0xc2 && c <= 0xdf) {
			u->need = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			u->need = 2;
			if (c == 0xe0)
				u->lo = 0xa0;
			else if (c == 0xed)
				u->hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			u->need = 3;
			if (c == 0xf0)
				u->lo = 0x90;
			else if (c == 0xf4)
				u->hi = 0x8f;
		} else {
			return false;
		}
	}
	return true;
}

bool io_ws_close_code_valid(unsigned int code)
{
	return (code >= 1000 && code <= 1003) ||
	       (code >= 1007 && code <= 1011) || (code >= 3000 && code <= 4999);
}

void io_ws_dec_init(struct io_ws_dec *d, uint64_t max_message,
		    unsigned int flags)
{
	memset(d, 0, sizeof(*d));
	d->max_message = max_message ? max_message : WS_DEFAULT_MAX_MESSAGE;
	d->flags = flags;
	d->state = WS_ST_HDR;
	d->hdr_need = 2;
	io_utf8_init(&d->utf8);
}

static int ws_fail(struct io_ws_dec *d, uint16_t code)
{
	d->state = WS_ST_FAILED;
	d->close_code = code;
	return -EPROTO;
}

/* The first two header bytes: everything but the length's extension and
 * the mask can be judged from them.  0 or a close code. */
static uint16_t ws_check_start(struct io_ws_dec *d)
{
	uint8_t b0 = d->hdr[0], b1 = d->hdr[1], op = b0 & 0x0f;
	bool masked = b1 & 0x80;
	unsigned int len7 = b1 & 0x7f;

	if (b0 & 0x70)
		return IO_WS_CLOSE_PROTOCOL;
	if (op > IO_WS_OP_BINARY && (op < IO_WS_OP_CLOSE || op > IO_WS_OP_PONG))
		return IO_WS_CLOSE_PROTOCOL;
	if (masked == !!(d->flags & IO_WS_DEC_CLIENT))
		return IO_WS_CLOSE_PROTOCOL;
	d->opcode = op;
	d->fin = b0 & 0x80;
	if (op & 0x8) {
		if (!d->fin || len7 > IO_WS_CTL_MAX)
			return IO_WS_CLOSE_PROTOCOL;
	} else if ((op == IO_WS_OP_CONT) != (d->msg_op != 0)) {
		/* A continuation with no message open, or a new message
		 * inside one. */
		return IO_WS_CLOSE_PROTOCOL;
	}
	d->hdr_need = (uint8_t)(2 +
				(len7 == 126 ? 2 :
				 len7 == 127 ? 8 :
					       0) +
				(masked ? 4 : 0));
	return 0;
}

/* The whole header is in: the length and the mask.  0 or a close code. */
static uint16_t ws_check_hdr(struct io_ws_dec *d)
{
	unsigned int len7 = d->hdr[1] & 0x7f, at = 2, i;
	uint64_t len = len7;

	if (len7 == 126) {
		len = (uint64_t)d->hdr[2] << 8 | d->hdr[3];
		at = 4;
	} else if (len7 == 127) {
		if (d->hdr[2] & 0x80)
			return IO_WS_CLOSE_PROTOCOL;
		for (len = 0, i = 0; i < 8; i++)
			len = len << 8 | d->hdr[2 + i];
		at = 10;
	}
	if (d->hdr[1] & 0x80)
		memcpy(d->mask, d->hdr + at, 4);
	else
		memset(d->mask, 0, 4);
	d->mask_pos = 0;
	d->left = len;
	d->ctl_len = 0;
	if (d->opcode & 0x8)
		return 0;
	if (d->opcode != IO_WS_OP_CONT) {
		d->msg_op = d->opcode;
		d->msg_len = 0;
		io_utf8_init(&d->utf8);
	}
	if (len > d->max_message - d->msg_len)
		return IO_WS_CLOSE_TOO_BIG;
	d->msg_len += len;
	return 0;
}

static void ws_unmask(struct io_ws_dec *d, uint8_t *dst, const uint8_t *src,
		      size_t n)
{
	size_t i = 0;
	unsigned int m = d->mask_pos;

	/* Eight bytes at a time: the key repeats every four, so a word of
	 * it, rotated to where the frame is, applies to any eight in a row
	 * (memcpy: no alignment assumed; dst may be src). */
	if (n >= 16) {
		uint8_t k[8];
		uint64_t key, w;

		for (unsigned int j = 0; j < 8; j++)
			k[j] = d->mask[(m + j) & 3];
		memcpy(&key, k, 8);
		for (; i + 8 <= n; i += 8) {
			memcpy(&w, src + i, 8);
			w ^= key;
			memcpy(dst + i, &w, 8);
		}
	}
	for (; i < n; i++)
		dst[i] = src[i] ^ d->mask[(m + i) & 3];
	d->mask_pos = (uint8_t)((m + n) & 3);
}

/* A whole control frame is in d->ctl: its event, or a close code. */
static uint16_t ws_control(struct io_ws_dec *d, struct io_ws_event *ev)
{
	struct io_utf8 u;

	memset(ev, 0, sizeof(*ev));
	ev->data = d->ctl;
	ev->len = d->ctl_len;
	ev->fin = true;
	ev->opcode = d->opcode;
	if (d->opcode == IO_WS_OP_PING) {
		ev->kind = IO_WS_EV_PING;
		return 0;
	}
	if (d->opcode == IO_WS_OP_PONG) {
		ev->kind = IO_WS_EV_PONG;
		return 0;
	}
	ev->kind = IO_WS_EV_CLOSE;
	if (d->ctl_len == 0) {
		ev->code = IO_WS_CLOSE_NO_STATUS;
	} else {
		if (d->ctl_len < 2)
			return IO_WS_CLOSE_PROTOCOL;
		ev->code = (uint16_t)(d->ctl[0] << 8 | d->ctl[1]);
		if (!io_ws_close_code_valid(ev->code))
			return IO_WS_CLOSE_PROTOCOL;
		ev->data = d->ctl + 2;
		ev->len = d->ctl_len - 2u;
		io_utf8_init(&u);
		if (!io_utf8_feed(&u, ev->data, ev->len) ||
		    !io_utf8_complete(&u))
			return IO_WS_CLOSE_BAD_DATA;
	}
	d->state = WS_ST_CLOSED;
	return 0;
}

int io_ws_decode(struct io_ws_dec *d, uint8_t *buf, size_t len, size_t *used,
		 struct io_ws_event *ev)
{
	size_t i = 0, n;
	uint16_t code;

	*used = 0;
	if (d->state == WS_ST_FAILED)
		return -EPROTO;
	if (d->state == WS_ST_CLOSED) {
		*used = len;
		return 0;
	}
	for (;;) {
		if (d->state == WS_ST_HDR) {
			while (d->hdr_have < d->hdr_need && i < len)
				d->hdr[d->hdr_have++] = buf[i++];
			*used = i;
			if (d->hdr_have < d->hdr_need)
				return 0;
			if (d->hdr_have == 2) {
				code = ws_check_start(d);
				if (code)
					return ws_fail(d, code);
				if (d->hdr_need > 2)
					continue;
			}
			code = ws_check_hdr(d);
			if (code)
				return ws_fail(d, code);
			d->hdr_have = 0;
			d->hdr_need = 2;
			d->state = WS_ST_PAYLOAD;
		}

		n = len - i < d->left ? len - i : (size_t)d->left;
		if (d->opcode & 0x8) {
			ws_unmask(d, d->ctl + d->ctl_len, buf + i, n);
			d->ctl_len = (uint8_t)(d->ctl_len + n);
			d->left -= n;
			*used = i += n;
			if (d->left)
				return 0;
			d->state = WS_ST_HDR;
			code = ws_control(d, ev);
			return code ? ws_fail(d, code) : 1;
		}

		uint8_t *p = buf + i;
		bool msg_done;

		ws_unmask(d, p, p, n);
		if (d->msg_op == IO_WS_OP_TEXT && !io_utf8_feed(&d->utf8, p, n))
			return ws_fail(d, IO_WS_CLOSE_BAD_DATA);
		d->left -= n;
		*used = i += n;
		msg_done = !d->left && d->fin;
		if (!d->left)
			d->state = WS_ST_HDR;
		if (msg_done && d->msg_op == IO_WS_OP_TEXT &&
		    !io_utf8_complete(&d->utf8))
			return ws_fail(d, IO_WS_CLOSE_BAD_DATA);
		if (n || msg_done) {
			memset(ev, 0, sizeof(*ev));
			ev->kind = IO_WS_EV_DATA;
			ev->data = p;
			ev->len = n;
			ev->opcode = d->msg_op;
			ev->fin = msg_done;
			if (msg_done)
				d->msg_op = 0;
			return 1;
		}
		if (d->left)
			return 0; /* out of input */
		/* An empty fragment that does not end the message. */
	}
}

unsigned int io_ws_write_hdr(uint8_t *dst, uint8_t opcode, bool fin,
			     uint64_t len)
{
	unsigned int i;

	dst[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
	if (len < 126) {
		dst[1] = (uint8_t)len;
		return 2;
	}
	if (len <= 0xffff) {
		dst[1] = 126;
		dst[2] = (uint8_t)(len >> 8);
		dst[3] = (uint8_t)len;
		return 4;
	}
	dst[1] = 127;
	for (i = 0; i < 8; i++)
		dst[2 + i] = (uint8_t)(len >> (56 - 8 * i));
	return 10;
}

uint8_t *io_ws_frame_in_headroom(uint8_t *payload, size_t headroom,
				 uint8_t opcode, uint64_t len)
{
	unsigned int hl = io_ws_hdr_len(len);

	if (headroom < hl)
		return NULL;
	io_ws_write_hdr(payload - hl, opcode, true, len);
	return payload - hl;
}

size_t io_ws_close_payload(uint8_t *dst, uint16_t code, const char *reason)
{
	size_t n = reason ? strlen(reason) : 0;

	dst[0] = (uint8_t)(code >> 8);
	dst[1] = (uint8_t)code;
	if (n > IO_WS_CTL_MAX - 2) {
		n = IO_WS_CTL_MAX - 2;
		/* Back to a code point boundary. */
		while (n && ((uint8_t)reason[n] & 0xc0) == 0x80)
			n--;
	}
	if (n)
		memcpy(dst + 2, reason, n);
	return n + 2;
}
