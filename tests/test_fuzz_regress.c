// SPDX-License-Identifier: MIT
/*
 * The fuzz targets' checks in the normal build: every input a fuzzer
 * found a bug with, and the committed seed corpus, replayed through the
 * same harnesses (tests/fuzz/fuzz_{framer,proto,load}.c, linked with
 * their checks turned into CMocka assertions) against the library and the
 * tools as make check builds them, sanitizers included.  ao-echo's
 * command line and the arena have runners of their own
 * (tests/test_fuzz_echo.c, test_fuzz_arena.c).
 */
#include <stdint.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/framer.h>
#include "fuzz/fuzz.h"
#include "helpers.h"

/* The fuzz targets' checks fail as CMocka assertions here. */
void fuzz_check_failed(const char *file, int line, const char *cond)
{
	_assert_true(0, cond, file, line);
}

/*
 * fuzz_framer: raw framing cut packets at the buffer size only, so a pool
 * with buffers larger than max_packet gave packets over max_packet (a
 * 64-byte buffer, max_packet 5, 7 bytes fed: one packet of 7).  Fixed in
 * io/framer.c: raw packets hold at most max_packet bytes.
 */
static const uint8_t crash_framer_raw_max[] = {
	0x00, 0xb6, 0x05, 0x00, 0x00, 0x00, 0xb5,
	0x00, 0x00, 0x94, 0x94, 0x94, 0x94,
};

/*
 * fuzz_load: two flips at one offset cancel out; the harness expected a
 * mismatch for the request (a harness bug, kept so the fix stays).
 */
static const uint8_t crash_load_double_flip[] = {
	0x00, 0x22, 0xff, 0xff, 0x41, 0xff, 0xc1, 0x5b, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x22,
};

static void test_framer_crashes(void **state)
{
	(void)state;
	fuzz_framer(crash_framer_raw_max, sizeof(crash_framer_raw_max));
}

struct raw_sink {
	struct ao_bufpool *pool;
	uint32_t n;
	uint32_t lens[8];
};

static struct ao_buf *raw_alloc(void *arg)
{
	struct raw_sink *s = arg;

	return ao_buf_get(s->pool);
}

static int raw_emit(void *arg, struct ao_buf *pkt)
{
	struct raw_sink *s = arg;

	assert_true(s->n < ARRAY_SIZE(s->lens));
	s->lens[s->n++] = pkt->len;
	ao_buf_put(pkt);
	return 0;
}

/* The same bug without the harness: 13 bytes, max_packet 5, 64-byte
 * buffers: packets of 5, 5 and 3 (it was one of 13). */
static void test_framer_raw_max_packet(void **state)
{
	struct ao_bufpool_params p = { .buf_size = 64, .count = 4 };
	struct ao_framing fr = { .kind = AO_FRAME_RAW, .max_packet = 5 };
	static const uint8_t data[13] = "abcdefghijkl";
	struct raw_sink s = { 0 };
	struct ao_framer f;
	size_t used;

	(void)state;
	assert_int_equal(ao_bufpool_create(&s.pool, &p), 0);
	assert_int_equal(ao_framer_init(&f, &fr, raw_alloc, raw_emit, &s), 0);
	assert_int_equal(ao_framer_feed(&f, data, sizeof(data), &used), 0);
	assert_int_equal(used, sizeof(data));
	assert_int_equal(s.n, 3);
	assert_int_equal(s.lens[0], 5);
	assert_int_equal(s.lens[1], 5);
	assert_int_equal(s.lens[2], 3);
	assert_int_equal(ao_bufpool_in_use(s.pool), 0);
	assert_int_equal(ao_bufpool_destroy(s.pool), 0);
}

static void test_load_crashes(void **state)
{
	(void)state;
	fuzz_load(crash_load_double_flip, sizeof(crash_load_double_flip));
}

static void test_corpus_framer(void **state)
{
	(void)state;
	t_replay_corpus("framer", fuzz_framer);
}

static void test_corpus_proto(void **state)
{
	(void)state;
	t_replay_corpus("proto", fuzz_proto);
}

static void test_corpus_load(void **state)
{
	(void)state;
	t_replay_corpus("load", fuzz_load);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framer_crashes),
		cmocka_unit_test(test_framer_raw_max_packet),
		cmocka_unit_test(test_load_crashes),
		cmocka_unit_test(test_corpus_framer),
		cmocka_unit_test(test_corpus_proto),
		cmocka_unit_test(test_corpus_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
