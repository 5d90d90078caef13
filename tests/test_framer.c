// SPDX-License-Identifier: MIT
/*
 * The framer: 2- and 4-byte prefixes in both byte orders, packets split at
 * every byte boundary, coalesced, fed a byte at a time; over-long and zero
 * lengths; empty packets when allowed; resuming after the allocator fails;
 * raw framing; every buffer back in the pool after each test.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/framer.h>
#include "helpers.h"

#define MAXPKT 300
#define NPKT 40

struct sink {
	struct ao_bufpool *pool;
	struct ao_buf *got[4 * NPKT + 16];
	unsigned int n;
	int fail_after; /* emit fails once n reaches this (-1: never) */
};

static struct ao_buf *sink_alloc(void *arg)
{
	struct sink *s = arg;

	return ao_buf_get(s->pool);
}

static int sink_emit(void *arg, struct ao_buf *pkt)
{
	struct sink *s = arg;

	assert_true(s->n < ARRAY_SIZE(s->got));
	s->got[s->n++] = pkt;
	if (s->fail_after >= 0 && (int)s->n >= s->fail_after)
		return -ECANCELED;
	return 0;
}

static void sink_clear(struct sink *s)
{
	for (unsigned int i = 0; i < s->n; i++)
		ao_buf_put(s->got[i]);
	s->n = 0;
}

static struct ao_bufpool *make_pool(uint32_t count, size_t size)
{
	struct ao_bufpool_params p = { .buf_size = size, .count = count };
	struct ao_bufpool *pool;

	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	return pool;
}

static void free_pool(struct ao_bufpool *pool)
{
	assert_int_equal(ao_bufpool_in_use(pool), 0);
	assert_int_equal(ao_bufpool_destroy(pool), 0);
}

/* A stream of NPKT packets of lengths 1..MAXPKT (packet i filled with i). */
struct stream {
	uint8_t bytes[NPKT * (MAXPKT + 4)];
	size_t len;
	uint32_t plen[NPKT];
};

static void make_stream(struct stream *st, const struct ao_framing *fr,
			unsigned int seed)
{
	st->len = 0;
	for (int i = 0; i < NPKT; i++) {
		uint8_t h[4];
		int hl;

		st->plen[i] =
			1 + (uint32_t)((seed * 7919u + (unsigned)i * 131u) %
				       MAXPKT);
		if (i == 3)
			st->plen[i] = MAXPKT; /* the maximum itself is fine */
		hl = ao_framing_header(fr, st->plen[i], h);
		assert_true(hl == 2 || hl == 4);
		memcpy(st->bytes + st->len, h, (size_t)hl);
		st->len += (size_t)hl;
		memset(st->bytes + st->len, i & 0xff, st->plen[i]);
		st->len += st->plen[i];
	}
}

static void check_sink(struct sink *s, const struct stream *st)
{
	assert_int_equal(s->n, NPKT);
	for (int i = 0; i < NPKT; i++) {
		const uint8_t *d = s->got[i]->data;

		assert_int_equal(s->got[i]->len, st->plen[i]);
		for (uint32_t k = 0; k < st->plen[i]; k++)
			assert_int_equal(d[k], i & 0xff);
	}
	sink_clear(s);
}

static void feed_all(struct ao_framer *f, const uint8_t *p, size_t len)
{
	size_t used;

	assert_int_equal(ao_framer_feed(f, p, len, &used), 0);
	assert_int_equal(used, len);
}

static void run_splits(enum ao_frame_kind kind, enum ao_byte_order order)
{
	struct ao_framing fr = { .kind = kind,
				 .order = order,
				 .max_packet = MAXPKT };
	static struct stream st;
	struct sink s = { .fail_after = -1 };
	struct ao_framer f;

	s.pool = make_pool(2 * NPKT + 8, 512);
	make_stream(&st, &fr, (unsigned)kind * 3 + (unsigned)order);
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);

	/* Coalesced: the whole stream in one feed. */
	feed_all(&f, st.bytes, st.len);
	assert_false(ao_framer_partial(&f));
	check_sink(&s, &st);

	/* Split in two at every byte boundary. */
	for (size_t k = 0; k <= st.len; k++) {
		feed_all(&f, st.bytes, k);
		feed_all(&f, st.bytes + k, st.len - k);
		assert_false(ao_framer_partial(&f));
		check_sink(&s, &st);
	}

	/* A byte at a time. */
	for (size_t k = 0; k < st.len; k++)
		feed_all(&f, st.bytes + k, 1);
	check_sink(&s, &st);

	/* Irregular chunks, including empty feeds. */
	for (size_t off = 0, c = 0; off < st.len; c++) {
		size_t n = (c * 37) % 97;

		if (n > st.len - off)
			n = st.len - off;
		feed_all(&f, st.bytes + off, n);
		off += n;
	}
	check_sink(&s, &st);
	assert_int_equal(f.packets, (st.len + 4) * NPKT);
	free_pool(s.pool);
}

static void test_len16_network(void **state)
{
	(void)state;
	run_splits(AO_FRAME_LEN16, AO_ORDER_NETWORK);
}

static void test_len16_little(void **state)
{
	(void)state;
	run_splits(AO_FRAME_LEN16, AO_ORDER_LITTLE);
}

static void test_len32_network(void **state)
{
	(void)state;
	run_splits(AO_FRAME_LEN32, AO_ORDER_NETWORK);
}

static void test_len32_little(void **state)
{
	(void)state;
	run_splits(AO_FRAME_LEN32, AO_ORDER_LITTLE);
}

static void test_header_encoding(void **state)
{
	struct ao_framing fr = { .kind = AO_FRAME_LEN16 };
	uint8_t h[4];

	(void)state;
	assert_int_equal(ao_framing_header(&fr, 0x1234, h), 2);
	assert_int_equal(h[0], 0x12);
	assert_int_equal(h[1], 0x34);
	assert_int_equal(ao_framing_header(&fr, 0x10000, h), -EMSGSIZE);
	fr.order = AO_ORDER_LITTLE;
	assert_int_equal(ao_framing_header(&fr, 0x1234, h), 2);
	assert_int_equal(h[0], 0x34);
	fr.kind = AO_FRAME_LEN32;
	assert_int_equal(ao_framing_header(&fr, 0x01020304, h), 4);
	assert_memory_equal(h, "\x04\x03\x02\x01", 4);
	fr.order = AO_ORDER_NETWORK;
	assert_int_equal(ao_framing_header(&fr, 0x01020304, h), 4);
	assert_memory_equal(h, "\x01\x02\x03\x04", 4);
	fr.kind = AO_FRAME_RAW;
	assert_int_equal(ao_framing_header(&fr, 5, h), 0);

	/* Defaults and bad descriptions. */
	fr = (struct ao_framing){ .kind = AO_FRAME_LEN32 };
	assert_int_equal(ao_framing_resolve(&fr), 0);
	assert_int_equal(fr.max_packet, AO_FRAME_DEFAULT_MAX);
	fr = (struct ao_framing){ .kind = AO_FRAME_LEN16 };
	assert_int_equal(ao_framing_resolve(&fr), 0);
	assert_int_equal(fr.max_packet, 0xffff);
	fr = (struct ao_framing){ .kind = 3 };
	assert_int_equal(ao_framing_resolve(&fr), -EINVAL);
	fr = (struct ao_framing){ .kind = AO_FRAME_LEN16, .order = 2 };
	assert_int_equal(ao_framing_resolve(&fr), -EINVAL);
	fr = (struct ao_framing){ .kind = AO_FRAME_LEN16, .flags = 0x80 };
	assert_int_equal(ao_framing_resolve(&fr), -EINVAL);
}

static void test_bad_lengths(void **state)
{
	struct ao_framing fr = { .kind = AO_FRAME_LEN16, .max_packet = 100 };
	struct sink s = { .fail_after = -1 };
	struct ao_framer f;
	size_t used;

	(void)state;
	s.pool = make_pool(8, 128);
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);
	/* One good packet, then a length of 101. */
	assert_int_equal(ao_framer_feed(&f,
					"\x00\x01"
					"x\x00\x65"
					"yyyy",
					9, &used),
			 -EMSGSIZE);
	assert_int_equal(used, 5);
	assert_int_equal(s.n, 1);
	sink_clear(&s);
	ao_framer_reset(&f);

	/* Zero length: an error by default... */
	assert_int_equal(ao_framer_feed(&f, "\x00\x00", 2, &used), -EBADMSG);
	ao_framer_reset(&f);
	assert_int_equal(s.n, 0);

	/* ...an empty packet when allowed. */
	fr.flags = AO_FRAME_ALLOW_EMPTY;
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);
	feed_all(&f, (const uint8_t *)"\x00\x00\x00\x01z\x00\x00", 7);
	assert_int_equal(s.n, 3);
	assert_int_equal(s.got[0]->len, 0);
	assert_int_equal(s.got[1]->len, 1);
	assert_int_equal(s.got[2]->len, 0);
	sink_clear(&s);

	/* A partial packet is reported, and reset returns its buffer. */
	feed_all(&f,
		 (const uint8_t *)"\x00\x05"
				  "ab",
		 4);
	assert_true(ao_framer_partial(&f));
	assert_int_equal(ao_bufpool_in_use(s.pool), 1);
	ao_framer_reset(&f);
	assert_false(ao_framer_partial(&f));
	feed_all(&f, (const uint8_t *)"\x00", 1);
	assert_true(ao_framer_partial(&f));
	ao_framer_reset(&f);
	free_pool(s.pool);
}

/* The emit callback's error stops the feed where it was. */
static void test_emit_error(void **state)
{
	struct ao_framing fr = { .kind = AO_FRAME_LEN16, .max_packet = 100 };
	struct sink s = { .fail_after = 2 };
	struct ao_framer f;
	size_t used;

	(void)state;
	s.pool = make_pool(8, 128);
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);
	assert_int_equal(ao_framer_feed(&f,
					"\x00\x01"
					"a\x00\x01"
					"b\x00\x01"
					"c",
					9, &used),
			 -ECANCELED);
	assert_int_equal(used, 6);
	s.fail_after = -1;
	feed_all(&f,
		 (const uint8_t *)"\x00\x01"
				  "c",
		 3);
	assert_int_equal(s.n, 3);
	assert_memory_equal(s.got[2]->data, "c", 1);
	sink_clear(&s);
	free_pool(s.pool);
}

/* The allocator fails: the feed stops, and resumes where it stopped once
 * buffers are back. */
static void test_enobufs_resume(void **state)
{
	struct ao_framing fr = { .kind = AO_FRAME_LEN32, .max_packet = MAXPKT };
	static struct stream st;
	struct sink s = { .fail_after = -1 };
	struct ao_framer f;
	struct ao_buf *kept[NPKT];
	unsigned int nkept = 0;
	size_t off = 0;
	int stalls = 0;

	(void)state;
	s.pool = make_pool(3, 512);
	make_stream(&st, &fr, 5);
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);
	while (off < st.len || ao_framer_partial(&f)) {
		size_t used;
		int err =
			ao_framer_feed(&f, st.bytes + off, st.len - off, &used);

		off += used;
		if (err == 0)
			break;
		assert_int_equal(err, -ENOBUFS);
		stalls++;
		/* Check and release what came out so far. */
		for (unsigned int i = 0; i < s.n; i++) {
			assert_int_equal(s.got[i]->len, st.plen[nkept]);
			assert_int_equal(((uint8_t *)s.got[i]->data)[0],
					 nkept & 0xff);
			kept[nkept++] = s.got[i];
		}
		s.n = 0;
		for (unsigned int i = 0; i < nkept; i++)
			if (kept[i]) {
				ao_buf_put(kept[i]);
				kept[i] = NULL;
			}
	}
	assert_true(stalls > 0);
	for (unsigned int i = 0; i < s.n; i++)
		assert_int_equal(s.got[i]->len, st.plen[nkept + i]);
	assert_int_equal(nkept + s.n, NPKT);
	sink_clear(&s);
	free_pool(s.pool);
}

/* Raw framing: a feed is one packet, split at the buffer size. */
static void test_raw(void **state)
{
	struct ao_framing fr = { .kind = AO_FRAME_RAW };
	struct sink s = { .fail_after = -1 };
	struct ao_framer f;
	uint8_t data[300];

	(void)state;
	for (unsigned int i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	s.pool = make_pool(8, 128);
	assert_int_equal(ao_framer_init(&f, &fr, sink_alloc, sink_emit, &s), 0);
	feed_all(&f, data, 5);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.got[0]->len, 5);
	sink_clear(&s);
	feed_all(&f, data, sizeof(data));
	assert_true(s.n >= 3);
	for (unsigned int i = 0, off = 0; i < s.n; i++) {
		assert_memory_equal(s.got[i]->data, data + off, s.got[i]->len);
		off += s.got[i]->len;
		if (i == s.n - 1)
			assert_int_equal(off, sizeof(data));
	}
	assert_false(ao_framer_partial(&f));
	sink_clear(&s);
	free_pool(s.pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_encoding),
		cmocka_unit_test(test_len16_network),
		cmocka_unit_test(test_len16_little),
		cmocka_unit_test(test_len32_network),
		cmocka_unit_test(test_len32_little),
		cmocka_unit_test(test_bad_lengths),
		cmocka_unit_test(test_emit_error),
		cmocka_unit_test(test_enobufs_resume),
		cmocka_unit_test(test_raw),
	};

	return cmocka_run_group_tests_name("framer", tests, NULL, NULL);
}
