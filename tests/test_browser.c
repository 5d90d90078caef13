// SPDX-License-Identifier: MIT
/*
 * The arena's viewer in a real browser: tests/browser_test.py starts
 * ao-arena (of $AO_TOOLS_DIR, which make check sets) on a free loopback
 * port, ao-bots against it and Debian's Chromium headless, driven over
 * the DevTools pipe; the page must receive 100 snapshots with no tick
 * gap and no JavaScript error, and its screenshot (saved next to the
 * test binaries as browser-viewer.png) must not be blank.  Without
 * Chromium the test is skipped, and says so.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "helpers.h"

#define PYTHON "/usr/bin/python3"
#define SCRIPT "tests/browser_test.py"
#define CHROMIUM "/usr/bin/chromium"
#define SKIPPED 77 /* the script's status when Chromium is not there */

static char tools[4096];
static bool have_tools;

static void test_viewer_in_chromium(void **state)
{
	char cmd[16384], line[1024];
	FILE *f;
	int st;

	(void)state;
	if (!have_tools)
		skip();
	if (access(CHROMIUM, X_OK) != 0) {
		print_message("SKIP: browser test: no " CHROMIUM
			      " (apt-get install chromium, or make deps "
			      "WITH_CHROMIUM=1)\n");
		skip();
	}
	assert_true(access(PYTHON, X_OK) == 0);
	assert_true(access(SCRIPT, R_OK) == 0);
	snprintf(cmd, sizeof(cmd),
		 "timeout -k 5 150 " PYTHON " " SCRIPT " '%s/arena/ao-arena' "
		 "'%s/bots/ao-bots' '%s/../tests/browser-viewer.png' 2>&1",
		 tools, tools, tools);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		print_message("%s", line);
	st = pclose(f);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == SKIPPED) /* it said why, SKIP: ... */
		skip();
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_viewer_in_chromium),
	};
	const char *dir = getenv("AO_TOOLS_DIR");
	char path[4200];

	if (dir && *dir && strlen(dir) < sizeof(tools)) {
		snprintf(tools, sizeof(tools), "%s", dir);
		snprintf(path, sizeof(path), "%s/arena/ao-arena", tools);
		have_tools = access(path, X_OK) == 0;
		snprintf(path, sizeof(path), "%s/bots/ao-bots", tools);
		have_tools = have_tools && access(path, X_OK) == 0;
	}
	if (!have_tools)
		print_message("AO_TOOLS_DIR unset or without ao-arena and "
			      "ao-bots: skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
