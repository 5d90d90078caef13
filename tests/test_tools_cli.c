// SPDX-License-Identifier: MIT
/*
 * The tools' command lines as a user meets them, each tool a child
 * process (from $AO_TOOLS_DIR, which make check sets):
 *
 *  - one spelling for one meaning: across the --help of ao-echo, ao-load,
 *    ao-misbehave, ao-arena and ao-bots, a short letter always stands for
 *    the same long name, and a long name has the same letter (or none)
 *    everywhere;
 *  - a server whose port is taken says which address and port;
 *  - ao-bots against a closed port says why once, and prints no summary.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "helpers.h"

static const char *tools_dir;

/* A memfd's whole contents, NUL-terminated (the caller frees it). */
static char *slurp(int fd)
{
	off_t n = lseek(fd, 0, SEEK_END);
	char *s = malloc((size_t)n + 1);

	assert_non_null(s);
	assert_int_equal(pread(fd, s, (size_t)n, 0), n);
	s[n] = '\0';
	close(fd);
	return s;
}

/*
 * Run ao-<tool> with args (NULL-terminated), at most 30 s: its exit
 * status (-1 if killed), its stdout and stderr in *out and *err.
 */
static int run(const char *tool, const char *const *args, char **out,
	       char **err)
{
	char path[512];
	char *argv[32]; /* copies: execv() takes char *const[] */
	int fo = memfd_create("out", 0), fe = memfd_create("err", 0);
	int i = 0, status;
	pid_t pid;

	assert_true(fo >= 0 && fe >= 0);
	snprintf(path, sizeof(path), "%s/%s/ao-%s", tools_dir, tool, tool);
	argv[i++] = strdup(path);
	while (*args && i < 31)
		argv[i++] = strdup(*args++);
	argv[i] = NULL;
	for (int k = 0; k < i; k++)
		assert_non_null(argv[k]);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(fo, 1);
		dup2(fe, 2);
		alarm(30);
		execv(path, argv);
		_exit(127);
	}
	while (i--)
		free(argv[i]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*out = slurp(fo);
	*err = slurp(fe);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define MAX_NAMES 256

struct spelling {
	char name[40];
	char letter; /* 0: long only */
	const char *tool; /* where it was seen first */
};

static struct spelling names[MAX_NAMES];
static unsigned int nnames;

/* Record --name (with letter, or 0) of tool; fail on a second spelling. */
static void seen(const char *tool, char letter, const char *name, size_t len)
{
	unsigned int i;

	assert_true(len > 0 && len < sizeof(names[0].name));
	for (i = 0; i < nnames; i++) {
		struct spelling *s = &names[i];

		if (strlen(s->name) == len && !memcmp(s->name, name, len)) {
			if (s->letter != letter)
				fail_msg("--%s is -%c in %s and -%c in %s",
					 s->name, s->letter ? s->letter : '-',
					 s->tool, letter ? letter : '-', tool);
			return;
		}
		if (letter && s->letter == letter)
			fail_msg("-%c is --%s in %s and --%.*s in %s", letter,
				 s->name, s->tool, (int)len, name, tool);
	}
	assert_true(nnames < MAX_NAMES);
	memcpy(names[nnames].name, name, len);
	names[nnames].name[len] = '\0';
	names[nnames].letter = letter;
	names[nnames].tool = tool;
	nnames++;
}

/* The option lines of a --help: "  -x, --name..." or "      --name...". */
static void read_help(const char *tool, const char *help)
{
	const char *l = help;

	for (; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
		char letter = 0;
		const char *n;

		if (!strncmp(l, "  -", 3) && l[3] != '-' &&
		    !strncmp(l + 4, ", --", 4)) {
			letter = l[3];
			n = l + 8;
		} else if (!strncmp(l, "      --", 8)) {
			n = l + 8;
		} else {
			continue;
		}
		seen(tool, letter, n, strcspn(n, "= \n"));
	}
}

static void need_tools(void)
{
	if (!tools_dir)
		skip();
}

static void test_one_spelling(void **state)
{
	static const char *const tools[] = { "echo", "load", "misbehave",
					     "arena", "bots" };
	const char *args[] = { "--help", NULL };
	char *out, *err;

	(void)state;
	need_tools();
	nnames = 0;
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		assert_int_equal(run(tools[i], args, &out, &err), 0);
		read_help(tools[i], out);
		free(out);
		free(err);
	}
	/* The address is one of them, the same everywhere. */
	for (size_t i = 0; i < nnames; i++)
		if (!strcmp(names[i].name, "address"))
			assert_int_equal(names[i].letter, 'a');
}

/* A loopback port something listens on (*fd), or a closed one (fd < 0). */
static uint16_t loopback_port(int *fd, bool listening)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(s >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (listening)
		assert_int_equal(listen(s, 1), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	if (!listening) {
		close(s);
		s = -1;
	}
	*fd = s;
	return ntohs(sa.sin_port);
}

static void test_port_in_use(void **state)
{
	static const char *const servers[] = { "echo", "arena" };
	char port_arg[32], want[64], *out, *err;
	int fd;
	uint16_t port = loopback_port(&fd, true);

	(void)state;
	need_tools();
	snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
	snprintf(want, sizeof(want), "127.0.0.1 port %u", port);
	for (size_t i = 0; i < ARRAY_SIZE(servers); i++) {
		const char *args[] = { port_arg, "-q", NULL };

		assert_int_equal(run(servers[i], args, &out, &err), 1);
		if (!strstr(err, want))
			fail_msg("ao-%s does not say '%s': %s", servers[i],
				 want, err);
		free(out);
		free(err);
	}
	close(fd);
}

static void test_bots_closed_port(void **state)
{
	char port_arg[32], want[64], *out, *err;
	int fd;
	uint16_t port = loopback_port(&fd, false);
	const char *args[] = { port_arg,	   "--players=5", "--ramp=0",
			       "--duration=200ms", "--drain=0",	  NULL };
	const char *p;

	(void)state;
	need_tools();
	snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
	snprintf(want, sizeof(want), "cannot connect to 127.0.0.1 port %u",
		 port);
	assert_int_equal(run("bots", args, &out, &err), 3);
	p = strstr(err, want);
	if (!p)
		fail_msg("ao-bots does not say '%s': %s", want, err);
	/* Once, and the only line; nothing on stdout. */
	assert_null(strstr(p + 1, "cannot connect"));
	assert_int_equal(strchr(err, '\n') - err + 1, (long)strlen(err));
	assert_string_equal(out, "");
	free(out);
	free(err);
}

/* --allow-origin takes one origin a time, at most 16 times. */
static void test_arena_bad_origin(void **state)
{
	static const char *const bad[] = { "", "http://a, http://b",
					   "http://a b" };
	const char *args[20];
	char *out, *err;

	(void)state;
	need_tools();
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char arg[64];

		snprintf(arg, sizeof(arg), "--allow-origin=%s", bad[i]);
		args[0] = arg;
		args[1] = NULL;
		assert_int_equal(run("arena", args, &out, &err), 2);
		if (!strstr(err, "is not one origin"))
			fail_msg("ao-arena %s: %s", arg, err);
		free(out);
		free(err);
	}
	for (int i = 0; i < 17; i++)
		args[i] = "--allow-origin=http://a";
	args[17] = NULL;
	assert_int_equal(run("arena", args, &out, &err), 2);
	if (!strstr(err, "more than 16"))
		fail_msg("ao-arena with 17 origins: %s", err);
	free(out);
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_spelling),
		cmocka_unit_test(test_port_in_use),
		cmocka_unit_test(test_bots_closed_port),
		cmocka_unit_test(test_arena_bad_origin),
	};

	tools_dir = getenv("AO_TOOLS_DIR");
	if (!tools_dir || !*tools_dir) {
		print_message("AO_TOOLS_DIR unset: skipping (make check sets "
			      "it)\n");
		tools_dir = NULL;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
