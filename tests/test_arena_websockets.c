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
#include <stdlib.h>
#include "helpers.h"

#define SCRIPT "tests/arena_websockets.py"

static char arena_path[4096];
static bool have_arena;

/* Sanitizers slow the server down: more slack on the timed bounds. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLACK "3"
#else
#define SLACK "0.5"
#endif

/* Skipped, as the script says, without python3-websockets (it exits 77). */
static void scenario(const char *name)
{
	if (!have_arena)
		skip();
	setenv("ARENA_WEBSOCKETS_ONLY", name, 1);
	setenv("ARENA_CONFORMANCE_SLACK", SLACK, 1);
	t_run_script(120, SCRIPT, "'%s'", arena_path);
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

/* --allow-origin: listed origins (any case) and none upgrade, others
 * get 403; plain HTTP is not checked. */
static void test_origin(void **state)
{
	(void)state;
	scenario("origin");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_play),   cmocka_unit_test(test_spectator),
		cmocka_unit_test(test_errors), cmocka_unit_test(test_http),
		cmocka_unit_test(test_origin),
	};

	have_arena =
		t_tool_path("arena/ao-arena", arena_path, sizeof(arena_path));
	if (!have_arena)
		print_message("AO_TOOLS_DIR unset or without ao-arena: "
			      "skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
