// SPDX-License-Identifier: MIT
/*
 * Fuzz target: ao-echo's command line, echo_parse_args() linked from
 * tools/echo/ with libaotools (a usage error's exit turned into a longjmp
 * back here through cli_exit_hook), fed the NUL-separated arguments of
 * the input.  A rejected command
 * line must exit with status 2 (usage) or 0 (--help, --version); an
 * accepted one must give options within the ranges --help states.  The
 * values themselves go through tools/common/parse.c (fuzz_proto checks it
 * against a reference); the packets ao-echo reads go through the framer
 * (fuzz_framer).
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/framer.h>
#include "../../tools/echo/echo.h"
#include "fuzz.h"

static jmp_buf fuzz_echo_jmp;
static int fuzz_echo_exit_status;

static __attribute__((noreturn)) void fuzz_echo_exit(int status)
{
	fuzz_echo_exit_status = status;
	longjmp(fuzz_echo_jmp, 1);
}

#define ECHO_MAX_ARGS 24

/* No local changes after the setjmp (so none can be clobbered). */
static void fuzz_echo_parse(int argc, char **argv)
{
	static struct echo_opts o;
	struct in_addr a;

	memset(&o, 0, sizeof(o));
	optind = 0; /* glibc: start afresh */
	fuzz_echo_exit_status = -1;
	cli_exit_hook = fuzz_echo_exit;
	if (setjmp(fuzz_echo_jmp)) {
		cli_exit_hook = NULL;
		FUZZ_CHECK(fuzz_echo_exit_status == EXIT_USAGE ||
			   fuzz_echo_exit_status == EXIT_OK);
		return;
	}
	echo_parse_args(argc, argv, &o);
	cli_exit_hook = NULL;
	FUZZ_CHECK(inet_pton(AF_INET, o.address, &a) == 1);
	FUZZ_CHECK(o.workers <= MAX_WORKERS);
	FUZZ_CHECK(o.rings >= 1 && o.rings <= MAX_RINGS);
	FUZZ_CHECK(o.max_packet >= 1 && o.max_packet <= AO_FRAME_LIMIT);
	FUZZ_CHECK(o.framing != FRAMING_LEN16 || o.max_packet <= 0xffff);
	FUZZ_CHECK(o.max_conns >= 1 && o.max_conns <= MAX_CONNS);
	FUZZ_CHECK(o.buffers >= 2 && o.buffers <= AO_BUFPOOL_MAX_COUNT);
	FUZZ_CHECK(o.idle_ns == 0 || o.idle_ns >= MS);
	FUZZ_CHECK(o.drain_ns >= MS);
	FUZZ_CHECK(o.stats_ns == 0 || o.stats_ns >= 10 * MS);
}

int fuzz_echo_status(const uint8_t *data, size_t size)
{
	static char arg0[] = "ao-echo";
	char *buf, *argv[ECHO_MAX_ARGS + 2];
	int argc = fuzz_argv(data, size, arg0, argv, ECHO_MAX_ARGS, &buf);

	fuzz_echo_parse(argc, argv);
	free(buf);
	return fuzz_echo_exit_status;
}

int fuzz_echo(const uint8_t *data, size_t size)
{
	fuzz_echo_status(data, size);
	return 0;
}
