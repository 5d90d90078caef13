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
#include <unistd.h>
#include "helpers.h"

#define SCRIPT "tests/browser_test.py"
#define CHROMIUM "/usr/bin/chromium"

static char arena[4096], bots[4096], png[4200];
static bool have_tools;

static void test_viewer_in_chromium(void **state)
{
	(void)state;
	if (!have_tools)
		skip();
	if (access(CHROMIUM, X_OK) != 0) {
		print_message("SKIP: browser test: no " CHROMIUM
			      " (apt-get install chromium, or make deps "
			      "WITH_CHROMIUM=1)\n");
		skip();
	}
	/* The script exits 77 (skipped), saying why, if Chromium is not
	 * there after all. */
	t_run_script(150, SCRIPT, "'%s' '%s' '%s'", arena, bots, png);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_viewer_in_chromium),
	};

	have_tools = t_tool_path("arena/ao-arena", arena, sizeof(arena)) &&
		     t_tool_path("bots/ao-bots", bots, sizeof(bots));
	if (have_tools) /* the screenshot: next to the test binaries */
		snprintf(png, sizeof(png), "%s/../tests/browser-viewer.png",
			 getenv("AO_TOOLS_DIR"));
	else
		print_message("AO_TOOLS_DIR unset or without ao-arena and "
			      "ao-bots: skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
