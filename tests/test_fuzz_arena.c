// SPDX-License-Identifier: MIT
/*
 * The arena fuzz target's checks in the normal build
 * (tests/fuzz/fuzz_arena.c, compiled in with its checks turned into
 * CMocka assertions): the committed seed corpus, and every input a fuzzer
 * found a bug with, replayed against the codec and ao-bots' stream parser
 * as make check builds them, sanitizers included.  A runner of its own:
 * ao-bots' verifier shares names with ao-load, which
 * tests/test_fuzz_regress.c compiles in.
 */
#include <stdint.h>
#include "helpers.h"

#define FUZZ_CHECK(cond) assert_true(cond)
#define AO_FUZZ_NO_ENTRY
#include "fuzz/fuzz_arena.c"

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
