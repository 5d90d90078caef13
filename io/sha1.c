// SPDX-License-Identifier: MIT
/*
 * SHA-1 (FIPS 180-4, RFC 3174), for the WebSocket handshake only: the
 * accept key is base64(SHA-1(key + GUID)).  SHA-1 is broken for collision
 * resistance, which the handshake does not rely on: it only shows the
 * server read the key.  A short portable implementation rather than
 * OpenSSL or nettle, so that the library's dependencies do not grow for
 * one digest per connection; tests/test_ws.c checks it against RFC 3174's
 * test cases (the million-'a' one included).
 */
#include <string.h>
#include "ws_priv.h"

static inline uint32_t rol32(uint32_t x, unsigned int n)
{
	return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
	uint32_t w[80], a, b, c, d, e, f, k, t;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (; i < 80; i++)
		w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	a = h[0];
	b = h[1];
	c = h[2];
	d = h[3];
	e = h[4];
	for (i = 0; i < 80; i++) {
		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		t = rol32(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol32(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

void io_sha1_init(struct io_sha1 *s)
{
	s->h[0] = 0x67452301;
	s->h[1] = 0xefcdab89;
	s->h[2] = 0x98badcfe;
	s->h[3] = 0x10325476;
	s->h[4] = 0xc3d2e1f0;
	s->bytes = 0;
}

void io_sha1_update(struct io_sha1 *s, const void *data, size_t n)
{
	const uint8_t *p = data;
	size_t have = s->bytes % 64;

	s->bytes += n;
	if (have) {
		size_t take = 64 - have < n ? 64 - have : n;

		memcpy(s->blk + have, p, take);
		p += take;
		n -= take;
		if (have + take < 64)
			return;
		sha1_block(s->h, s->blk);
	}
	for (; n >= 64; p += 64, n -= 64)
		sha1_block(s->h, p);
	memcpy(s->blk, p, n);
}

void io_sha1_final(struct io_sha1 *s, uint8_t out[IO_SHA1_LEN])
{
	uint64_t bits = s->bytes * 8;
	size_t have = s->bytes % 64;
	int i;

	s->blk[have++] = 0x80;
	if (have > 56) {
		memset(s->blk + have, 0, 64 - have);
		sha1_block(s->h, s->blk);
		have = 0;
	}
	memset(s->blk + have, 0, 56 - have);
	for (i = 0; i < 8; i++)
		s->blk[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	sha1_block(s->h, s->blk);
	for (i = 0; i < 20; i++)
		out[i] = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

void io_sha1(const void *data, size_t n, uint8_t out[IO_SHA1_LEN])
{
	struct io_sha1 s;

	io_sha1_init(&s);
	io_sha1_update(&s, data, n);
	io_sha1_final(&s, out);
}
