// SPDX-License-Identifier: MIT
/*
 * WebSocket conformance, black box: tests/ws_conformance.py, a client
 * written from RFC 6455 in Python's standard library, plays the Autobahn
 * testsuite's categories against the ao-echo of $AO_TOOLS_DIR started with
 * --framing=ws (make check sets it; without it every test is skipped).
 * One CMocka test per category, each its own run of /usr/bin/python3,
 * bounded in time; the script starts ao-echo itself on a free loopback
 * port, checks each failing case's close code, and that a second
 * connection on the same server is untouched.
 */
#include <signal.h>
#include <stdlib.h>
#include "helpers.h"

#define SCRIPT "tests/ws_conformance.py"

static char echo_path[4096];
static bool have_echo;

static void category(void **state)
{
	if (!have_echo)
		skip();
	setenv("WS_CONFORMANCE_ONLY", *state, 1);
	t_run_script(120, SCRIPT, "'%s'", echo_path);
}

static char c_framing[] = "framing", c_pingpong[] = "pingpong",
	    c_reserved[] = "reserved", c_opcodes[] = "opcodes",
	    c_fragmentation[] = "fragmentation", c_utf8[] = "utf8",
	    c_close[] = "close", c_limits[] = "limits",
	    c_handshake[] = "handshake";

int main(void)
{
	const struct CMUnitTest tests[] = {
		{ "framing", category, NULL, NULL, c_framing },
		{ "pingpong", category, NULL, NULL, c_pingpong },
		{ "reserved", category, NULL, NULL, c_reserved },
		{ "opcodes", category, NULL, NULL, c_opcodes },
		{ "fragmentation", category, NULL, NULL, c_fragmentation },
		{ "utf8", category, NULL, NULL, c_utf8 },
		{ "close", category, NULL, NULL, c_close },
		{ "limits", category, NULL, NULL, c_limits },
		{ "handshake", category, NULL, NULL, c_handshake },
	};

	have_echo = t_tool_path("echo/ao-echo", echo_path, sizeof(echo_path));
	if (!have_echo)
		print_message("AO_TOOLS_DIR unset or without ao-echo: "
			      "skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("ws_conformance", tests, NULL, NULL);
}
