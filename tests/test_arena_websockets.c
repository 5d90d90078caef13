// SPDX-License-Identifier: MIT
/*
 * ao-arena over WebSocket and HTTP: tests/arena_websockets.py, where
 * python3-websockets (a strict client nobody here wrote) plays the arena
 * and promtool checks /metrics, against the ao-arena of $AO_TOOLS_DIR
 * (make check sets it; without it every test is skipped).  One CMocka test
 * per scenario, each its own run of /usr/bin/python3, bounded in time;
 * skipped, saying so, when the websockets module is absent (the script
 * exits 77); the script says when promtool is absent and skips that check.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "helpers.h"

#define PYTHON "/usr/bin/python3"
#define SCRIPT "tests/arena_websockets.py"

static char arena_path[4096];
static bool have_arena;

/* Sanitizers slow the server down: more slack on the timed bounds. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK "3"
#else
#define SLACK "0.5"
#endif

static void scenario(const char *name)
{
	char cmd[8192], line[512];
	FILE *f;
	int st;

	if (!have_arena)
		skip();
	assert_true(access(PYTHON, X_OK) == 0);
	assert_true(access(SCRIPT, R_OK) == 0);
	snprintf(cmd, sizeof(cmd),
		 "ARENA_WEBSOCKETS_ONLY=%s ARENA_CONFORMANCE_SLACK=%s "
		 "timeout -k 5 120 " PYTHON " " SCRIPT " '%s' 2>&1",
		 name, SLACK, arena_path);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		print_message("%s", line);
	st = pclose(f);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		skip(); /* no python3-websockets: the script said so */
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Players over WebSocket beside one over len16: exact prediction, chat,
 * acks, leave; the same snapshot bytes over both framings. */
static void test_play(void **state)
{
	(void)state;
	scenario("play");
}

/* A spectator over WebSocket. */
static void test_spectator(void **state)
{
	(void)state;
	scenario("spectator");
}

/* Two messages in one, a text message, one too big: their close codes. */
static void test_errors(void **state)
{
	(void)state;
	scenario("errors");
}

/* GET /metrics (promtool check metrics), /, a missing path. */
static void test_http(void **state)
{
	(void)state;
	scenario("http");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_play),
		cmocka_unit_test(test_spectator),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_http),
	};
	const char *dir = getenv("AO_TOOLS_DIR");

	if (dir && *dir) {
		snprintf(arena_path, sizeof(arena_path), "%s/arena/ao-arena",
			 dir);
		have_arena = access(arena_path, X_OK) == 0;
	}
	if (!have_arena)
		print_message("AO_TOOLS_DIR unset or without ao-arena: "
			      "skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
