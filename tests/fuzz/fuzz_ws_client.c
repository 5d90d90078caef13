// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the tools' decoder of a server's WebSocket frames
 * (tools/common/ws_client.c).
 *
 * Input: byte 0 seeds the cuts, byte 1 is the data frame bound (0: none),
 * the rest is the server's stream.  It is decoded twice, whole and in
 * random pieces, and both must agree: the same return value and close
 * code, the same data bytes with the same message starts and ends, the
 * same control frames.  A one-frame message is at most the bound, a
 * control frame at most 125 bytes, and nothing is read outside the
 * input (ASan).
 */
#include <errno.h>
#include "../../tools/common/ws_client.h"
#include "fuzz.h"

#define WSCF_LOG 4096

/* A log of the events: the bytes and markers, compared at the end. */
struct wscf_log {
	uint8_t b[WSCF_LOG];
	size_t n;
	bool full;
	uint64_t max;
};

static void wscf_put(struct wscf_log *l, const uint8_t *p, size_t n)
{
	if (l->n + n > WSCF_LOG) {
		l->full = true;
		return;
	}
	memcpy(l->b + l->n, p, n);
	l->n += n;
}

static int wscf_data(void *arg, const uint8_t *p, size_t n, bool first,
		     bool fin, int64_t msg_len)
{
	struct wscf_log *l = arg;

	FUZZ_CHECK(msg_len < 0 || (uint64_t)msg_len >= n);
	FUZZ_CHECK(msg_len < 0 || !l->max || (uint64_t)msg_len <= l->max);
	/* Markers where a message starts and ends: the cuts may split the
	 * bytes anywhere else. */
	if (first)
		wscf_put(l, (const uint8_t *)"S", 1);
	wscf_put(l, p, n);
	if (fin)
		wscf_put(l, (const uint8_t *)"E", 1);
	return 0;
}

static int wscf_ctl(void *arg, enum wsc_opcode op, const uint8_t *p, size_t n,
		    unsigned int code)
{
	struct wscf_log *l = arg;
	uint8_t h[4] = { 'C', (uint8_t)op, (uint8_t)(code >> 8),
			 (uint8_t)code };

	FUZZ_CHECK(n <= WSC_CTL_MAX);
	wscf_put(l, h, sizeof(h));
	wscf_put(l, p, n);
	return 0;
}

static const struct wsc_dec_ops wscf_ops = { wscf_data, wscf_ctl };

int fuzz_ws_client(const uint8_t *data, size_t size)
{
	struct wscf_log *a, *b;
	struct wsc_dec da, db;
	struct fuzz_rng rng;
	uint64_t max;
	size_t off, cut;
	int ra, rb = 0;

	if (size < 2)
		return 0;
	fuzz_rng_seed(&rng, data[0]);
	max = data[1];
	data += 2;
	size -= 2;
	a = calloc(1, sizeof(*a));
	b = calloc(1, sizeof(*b));
	FUZZ_CHECK(a && b);
	a->max = b->max = max;
	wsc_dec_init(&da, max);
	wsc_dec_init(&db, max);
	ra = wsc_feed(&da, data, size, &wscf_ops, a);
	FUZZ_CHECK(ra == 0 || ra == -EPROTO || ra == -EMSGSIZE);
	for (off = 0; off < size && !rb; off += cut) {
		cut = 1 + fuzz_rng_below(&rng, 40);
		if (cut > size - off)
			cut = size - off;
		rb = wsc_feed(&db, data + off, cut, &wscf_ops, b);
	}
	FUZZ_CHECK(ra == rb);
	FUZZ_CHECK(da.err_code == db.err_code);
	FUZZ_CHECK(a->full == b->full);
	if (!a->full) {
		FUZZ_CHECK(a->n == b->n);
		FUZZ_CHECK(!memcmp(a->b, b->b, a->n));
	}
	free(a);
	free(b);
	return 0;
}
