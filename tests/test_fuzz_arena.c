// SPDX-License-Identifier: MIT
/*
 * The arena fuzz target's checks in the normal build
 * (tests/fuzz/fuzz_arena.c, linked with its checks turned into CMocka
 * assertions): the committed seed corpus, and every input a fuzzer
 * found a bug with, replayed against the codec and ao-bots' stream parser
 * as make check builds them, sanitizers included.
 */
#include <stdint.h>
#include "fuzz/fuzz.h"
#include "helpers.h"

/* The fuzz targets' checks fail as CMocka assertions here. */
void fuzz_check_failed(const char *file, int line, const char *cond)
{
	_assert_true(0, cond, file, line);
}

static void test_corpus_arena(void **state)
{
	(void)state;
	t_replay_corpus("arena", fuzz_arena);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corpus_arena),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
