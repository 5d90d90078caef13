// SPDX-License-Identifier: MIT
/*
 * The arena's black-box conformance test: tests/arena_conformance.py, a
 * client written from tools/arena/PROTOCOL.md in Python's standard
 * library, plays against the ao-arena of $AO_TOOLS_DIR (make check sets
 * it; without it every test is skipped).  One CMocka test per scenario
 * of the script, each its own run of /usr/bin/python3, bounded in time;
 * the script starts ao-arena itself on a free loopback port.
 */
#include <signal.h>
#include <stdlib.h>
#include "helpers.h"

#define SCRIPT "tests/arena_conformance.py"

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
	if (!have_arena)
		skip();
	setenv("ARENA_CONFORMANCE_ONLY", name, 1);
	setenv("ARENA_CONFORMANCE_SLACK", SLACK, 1);
	t_run_script(120, SCRIPT, "'%s'", arena_path);
}

/* Ticks, exact prediction, chat lines once, the same snapshot bytes. */
static void test_normal_play(void **state)
{
	(void)state;
	scenario("normal_play");
}

/* Each bad input: its error message, then the close; others untouched. */
static void test_bad_inputs(void **state)
{
	(void)state;
	scenario("bad_inputs");
}

/* Pipelined rejoins however cut, refused joins followed by inputs. */
static void test_pipelined(void **state)
{
	(void)state;
	scenario("pipelined");
}

/* A slow reader: closed within the bound, and learns of it at once. */
static void test_slow_reader(void **state)
{
	(void)state;
	scenario("slow_reader");
}

/* A reader that acks, with a big buffer, then stops: closed by its acks. */
static void test_ack_reader(void **state)
{
	(void)state;
	scenario("ack_reader");
}

/* A spectator: the room's snapshots and chat, bounded, no inputs. */
static void test_spectator(void **state)
{
	(void)state;
	scenario("spectator");
}

/* The hello and idle deadlines. */
static void test_deadlines(void **state)
{
	(void)state;
	scenario("deadlines");
}

/* An error that closes is the last message, whatever the room sends
 * meanwhile (a member whose close waits for its queue). */
static void test_error_last(void **state)
{
	(void)state;
	scenario("error_last");
}

/* Each way a client ends its connection (mid-frame, a half-close after
 * a leave, at once, a WebSocket close frame): its player leaves once. */
static void test_client_closes(void **state)
{
	(void)state;
	scenario("client_closes");
}

/* The server's stop: a FIN (WebSocket: close 1001) for every client. */
static void test_server_stop(void **state)
{
	(void)state;
	scenario("server_stop");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normal_play),
		cmocka_unit_test(test_bad_inputs),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_slow_reader),
		cmocka_unit_test(test_ack_reader),
		cmocka_unit_test(test_spectator),
		cmocka_unit_test(test_deadlines),
		cmocka_unit_test(test_error_last),
		cmocka_unit_test(test_client_closes),
		cmocka_unit_test(test_server_stop),
	};

	have_arena =
		t_tool_path("arena/ao-arena", arena_path, sizeof(arena_path));
	if (!have_arena)
		print_message("AO_TOOLS_DIR unset or without ao-arena: "
			      "skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
