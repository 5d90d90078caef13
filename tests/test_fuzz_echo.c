// SPDX-License-Identifier: MIT
/*
 * ao-echo's command-line fuzz target in the normal build: its seed corpus
 * replayed through tests/fuzz/fuzz_echo.c (ao-echo's echo_parse_args()
 * linked from tools/echo/, its checks turned into CMocka assertions),
 * sanitizers included.  A runner of its own: it links ao-echo, where
 * tests/test_fuzz_regress.c links ao-load.
 */
#include <stdint.h>
#include "../tools/echo/echo.h"
#include "fuzz/fuzz.h"
#include "helpers.h"

/* The fuzz targets' checks fail as CMocka assertions here. */
void fuzz_check_failed(const char *file, int line, const char *cond)
{
	_assert_true(0, cond, file, line);
}

/* Parse a command line given as NUL-separated arguments (the fuzz input's
 * form); returns the exit status the parser asked for, -1 for none. */
static int parse(const char *args, size_t len)
{
	return fuzz_echo_status((const uint8_t *)args, len);
}

#define PARSE(lit) parse(lit, sizeof(lit) - 1)

static void test_corpus_echo(void **state)
{
	(void)state;
	t_replay_corpus("echo", fuzz_echo);
}

/* The harness tells the three outcomes apart: accepted, usage, help. */
static void test_outcomes(void **state)
{
	(void)state;
	assert_int_equal(PARSE("--port=7\0--workers=2\0-f\0len16"), -1);
	assert_int_equal(PARSE("--max-packet=1k\0--stats=1s"), -1);
	assert_int_equal(PARSE("--version"), EXIT_OK);
	assert_int_equal(PARSE("--workers=-1"), EXIT_USAGE);
	/* Accepted, max_packet cut to what a 2-byte prefix can say (the
	 * harness checks the cut). */
	assert_int_equal(PARSE("--framing=len16\0--max-packet=1m"), -1);
	assert_int_equal(PARSE("--idle-timeout=500us"), EXIT_USAGE);
	assert_int_equal(PARSE("--address=localhost"), EXIT_USAGE);
	assert_int_equal(PARSE("--no-such-option"), EXIT_USAGE);
	assert_int_equal(PARSE("extra"), EXIT_USAGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corpus_echo),
		cmocka_unit_test(test_outcomes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
