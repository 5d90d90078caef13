// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the WebSocket frame decoder (io/ws.c).
 *
 * Input: a 3-byte header, then the stream of frames.
 *	byte 0	  bit 0: decode as a client (frames unmasked);
 *		  bits 1-2: max_message 0 (16 MiB), 16, 200 or 4096 bytes
 *	bytes 1-2 seed of the chunk sizes
 * The stream is decoded twice, whole and in chunks of random sizes (0
 * included), each on its own copy (payload is unmasked in place).  Checked:
 *  - both give the same messages, control frames and failure (close code);
 *  - every DATA chunk lies inside the bytes just fed, every message is at
 *    most max_message bytes, every text message and close reason is UTF-8
 *    (by a reference decoder written differently from io_utf8_feed()),
 *    control payloads are at most 125 bytes, close codes are valid or
 *    1005 with no reason;
 *  - a failure is 1002, 1007 or 1009 and sticks; after a close nothing is
 *    decoded.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include "../../io/ws_priv.h"
#include "fuzz.h"

#define WSF_HDR 3

struct wsf_ev {
	uint8_t kind, opcode;
	uint16_t code;
	size_t off, len;
};

struct wsf_log {
	struct wsf_ev *ev;
	size_t n, cap;
	uint8_t *data; /* the events' payloads, one after another */
	size_t dlen, dcap;
	uint8_t *msg; /* the open message */
	size_t mlen;
	int err;
};

/* UTF-8 by code points: the reference for io_utf8_feed(). */
static bool wsf_utf8_ref(const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint32_t c = p[i], min;
		size_t k, j;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			k = 1;
			c &= 0x1f;
			min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2;
			c &= 0x0f;
			min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3;
			c &= 0x07;
			min = 0x10000;
		} else {
			return false;
		}
		if (n - i - 1 < k)
			return false;
		for (j = 1; j <= k; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			c = c << 6 | (p[i + j] & 0x3f);
		}
		if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

static void wsf_record(struct wsf_log *lg, const struct io_ws_event *ev,
		       uint64_t max)
{
	size_t len = ev->len;

	if (ev->kind == IO_WS_EV_DATA) {
		/* Reassembled apart: controls may come in between. */
		FUZZ_CHECK(ev->opcode == IO_WS_OP_TEXT ||
			   ev->opcode == IO_WS_OP_BINARY);
		if (ev->len)
			memcpy(lg->msg + lg->mlen, ev->data, ev->len);
		lg->mlen += ev->len;
		FUZZ_CHECK(lg->mlen <= max);
		if (!ev->fin)
			return;
		len = lg->mlen;
		lg->mlen = 0;
		if (ev->opcode == IO_WS_OP_TEXT)
			FUZZ_CHECK(wsf_utf8_ref(lg->msg, len));
	} else {
		FUZZ_CHECK(ev->len <= IO_WS_CTL_MAX);
	}
	if (ev->kind == IO_WS_EV_CLOSE) {
		FUZZ_CHECK(io_ws_close_code_valid(ev->code) ||
			   (ev->code == IO_WS_CLOSE_NO_STATUS && !ev->len));
		FUZZ_CHECK(wsf_utf8_ref(ev->data, ev->len));
	}
	FUZZ_CHECK(lg->n < lg->cap && lg->dlen + len <= lg->dcap);
	if (len)
		memcpy(lg->data + lg->dlen,
		       ev->kind == IO_WS_EV_DATA ? lg->msg : ev->data, len);
	lg->ev[lg->n++] = (struct wsf_ev){
		.kind = (uint8_t)ev->kind,
		.opcode = ev->opcode,
		.code = ev->code,
		.off = lg->dlen,
		.len = len,
	};
	lg->dlen += len;
}

/* Decode s (n bytes, modified) in chunks; rng NULL: whole. */
static void wsf_run(struct wsf_log *lg, uint8_t *s, size_t n, uint64_t max,
		    unsigned int flags, struct fuzz_rng *rng)
{
	struct io_ws_dec d;
	struct io_ws_event ev;
	bool closed = false;
	size_t off = 0, c, at, used;
	int r;

	io_ws_dec_init(&d, max, flags);
	while (off < n || (off == 0 && n == 0)) {
		c = rng ? fuzz_rng_below(rng, 80) : n;
		if (c > n - off)
			c = n - off;
		at = off;
		do {
			r = io_ws_decode(&d, s + at, off + c - at, &used, &ev);
			FUZZ_CHECK(used <= off + c - at);
			if (r < 0) {
				FUZZ_CHECK(r == -EPROTO);
				FUZZ_CHECK(d.close_code == 1002 ||
					   d.close_code == 1007 ||
					   d.close_code == 1009);
				FUZZ_CHECK(!closed);
				lg->err = d.close_code;
				FUZZ_CHECK(io_ws_decode(&d, s, n, &used, &ev) ==
					   -EPROTO);
				return;
			}
			if (r == 0) {
				FUZZ_CHECK(used == off + c - at);
				break;
			}
			FUZZ_CHECK(r == 1 && !closed);
			if (ev.kind == IO_WS_EV_DATA)
				FUZZ_CHECK(ev.data >= s + at &&
					   ev.data + ev.len <= s + at + used);
			if (ev.kind == IO_WS_EV_CLOSE)
				closed = true;
			at += used;
			wsf_record(lg, &ev, max);
		} while (at < off + c);
		off += c;
		if (n == 0)
			break;
	}
}

int fuzz_ws_frame(const uint8_t *data, size_t size)
{
	static const uint64_t maxes[] = { 0, 16, 200, 4096 };
	struct wsf_log a = { 0 }, b = { 0 };
	struct fuzz_rng rng;
	unsigned int flags;
	uint64_t max;
	uint8_t *s1, *s2;
	size_t i;

	if (size < WSF_HDR)
		return 0;
	flags = data[0] & 1 ? IO_WS_DEC_CLIENT : 0;
	max = maxes[(data[0] >> 1) & 3];
	fuzz_rng_seed(&rng, (uint64_t)data[1] | (uint64_t)data[2] << 8);
	data += WSF_HDR;
	size -= WSF_HDR;

	s1 = malloc(size + 1);
	s2 = malloc(size + 1);
	a.cap = b.cap = size / 2 + 1;
	a.ev = calloc(a.cap, sizeof(*a.ev));
	b.ev = calloc(b.cap, sizeof(*b.ev));
	a.dcap = b.dcap = size;
	a.data = malloc(size + 1);
	b.data = malloc(size + 1);
	a.msg = malloc(size + 1);
	b.msg = malloc(size + 1);
	FUZZ_CHECK(s1 && s2 && a.ev && b.ev && a.data && b.data && a.msg &&
		   b.msg);
	if (size) {
		memcpy(s1, data, size);
		memcpy(s2, data, size);
	}
	wsf_run(&a, s1, size, max ? max : (16u << 20), flags, NULL);
	wsf_run(&b, s2, size, max ? max : (16u << 20), flags, &rng);
	FUZZ_CHECK(a.err == b.err && a.n == b.n);
	for (i = 0; i < a.n; i++) {
		FUZZ_CHECK(a.ev[i].kind == b.ev[i].kind &&
			   a.ev[i].opcode == b.ev[i].opcode &&
			   a.ev[i].code == b.ev[i].code &&
			   a.ev[i].len == b.ev[i].len);
		FUZZ_CHECK(!a.ev[i].len ||
			   !memcmp(a.data + a.ev[i].off, b.data + b.ev[i].off,
				   a.ev[i].len));
	}
	free(s1);
	free(s2);
	free(a.ev);
	free(b.ev);
	free(a.data);
	free(b.data);
	free(a.msg);
	free(b.msg);
	return 0;
}
