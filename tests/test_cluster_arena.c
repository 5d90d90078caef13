// SPDX-License-Identifier: MIT
/*
 * ao-arena across nodes, black-box: tests/cluster_arena.py starts a
 * nats-server (JetStream, a scratch store) and ao-arena nodes of
 * $AO_TOOLS_DIR on free loopback ports and plays them with the client of
 * tests/arena_conformance.py.  One CMocka test per scenario, each its own
 * bounded run of /usr/bin/python3.  Skipped, saying so, without
 * nats-server or without the tools.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "helpers.h"

#define SCRIPT "tests/cluster_arena.py"

static char arena_path[4096];
static bool have_arena, have_nats;

/* The script too skips (exit 77), saying why, when it misses a tool. */
static void scenario(const char *name)
{
	if (!have_arena || !have_nats)
		skip();
	setenv("ARENA_CLUSTER_ONLY", name, 1);
	t_run_script(120, SCRIPT, "'%s'", arena_path);
}

/* A player on one node plays a room owned by another: prediction, ticks,
 * chat once and in one order on both nodes. */
static void test_cross_node(void **state)
{
	(void)state;
	scenario("cross_node");
}

/* kill -9 of the owner: room_lost within 2 s, and a join again. */
static void test_kill_owner(void **state)
{
	(void)state;
	scenario("kill_owner");
}

/* SIGSTOP of the owner: taken over; the stalled node stops ticking and
 * gives the room up; never two owners. */
static void test_stop_owner(void **state)
{
	(void)state;
	scenario("stop_owner");
}

/* SIGSTOP of a player's gateway: declared dead, its player dropped by the
 * owner; resumed, the player gets room_lost and joins again. */
static void test_stop_gateway(void **state)
{
	(void)state;
	scenario("stop_gateway");
}

/* nats-server restarted: local rooms tick on, remote ones fail fast. */
static void test_bus_restart(void **state)
{
	(void)state;
	scenario("bus_restart");
}

/* A bus message for a room at an epoch not owned: dropped and counted. */
static void test_stale(void **state)
{
	(void)state;
	scenario("stale");
}

/* Every index taken once: a new node takes the index of one that is gone,
 * and makes rooms above those the old holder left in the directory. */
static void test_index_reuse(void **state)
{
	(void)state;
	scenario("index_reuse");
}

/* A gateway with no room of its own, its index taken while it was
 * stopped: resumed, it gives out no id and stops. */
static void test_stall_index(void **state)
{
	(void)state;
	scenario("stall_index");
}

/* Owners killed in turn under a gateway's player: the rooms lost there
 * are given up, and a room made later takes one of them. */
static void test_reclaim(void **state)
{
	(void)state;
	scenario("reclaim");
}

/* A join the owner refuses, sent again the moment room_full comes (with
 * busy loops beside the nodes): room_full every time, never order. */
static void test_refused_rejoin(void **state)
{
	(void)state;
	scenario("refused_rejoin");
}

/* Players of a gateway in another node's room: an error that closes is
 * the last message (chat lines forwarded meanwhile); a close removes the
 * player once on both nodes. */
static void test_remote_close(void **state)
{
	(void)state;
	scenario("remote_close");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cross_node),
		cmocka_unit_test(test_kill_owner),
		cmocka_unit_test(test_stop_owner),
		cmocka_unit_test(test_stop_gateway),
		cmocka_unit_test(test_bus_restart),
		cmocka_unit_test(test_stale),
		cmocka_unit_test(test_index_reuse),
		cmocka_unit_test(test_stall_index),
		cmocka_unit_test(test_reclaim),
		cmocka_unit_test(test_refused_rejoin),
		cmocka_unit_test(test_remote_close),
	};

	have_arena =
		t_tool_path("arena/ao-arena", arena_path, sizeof(arena_path));
	have_nats = !system("command -v nats-server >/dev/null 2>&1") ||
		    access("/usr/sbin/nats-server", X_OK) == 0;
	if (!have_arena)
		print_message("SKIP: AO_TOOLS_DIR unset or without ao-arena\n");
	else if (!have_nats)
		print_message("SKIP: nats-server is not installed\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
