// SPDX-License-Identifier: MIT
/*
 * Fuzz target: ao-echo's command line, parse_args() compiled in from
 * tools/echo/echo.c with the option helpers it calls (tools/common/cli.c,
 * serve.c) (main renamed, exit() turned into a longjmp back here), fed
 * the NUL-separated arguments of the input.  A rejected command
 * line must exit with status 2 (usage) or 0 (--help, --version); an
 * accepted one must give options within the ranges --help states.  The
 * values themselves go through tools/load/proto.c (fuzz_proto checks it
 * against a reference); the packets ao-echo reads go through the framer
 * (fuzz_framer).
 */
#include <setjmp.h>
#include <stdlib.h>
#include "fuzz.h"

static jmp_buf fuzz_echo_jmp;
static int fuzz_echo_status;

static __attribute__((noreturn)) void fuzz_echo_exit(int status)
{
	fuzz_echo_status = status;
	longjmp(fuzz_echo_jmp, 1);
}

int ao_echo_main(int argc, char **argv);
#define main ao_echo_main
#define exit(status) fuzz_echo_exit(status)
#include "../../tools/echo/echo.c"
#include "../../tools/common/cli.c"
#include "../../tools/common/serve.c"
#undef exit
#undef main
#ifndef AO_FUZZ_HAVE_PROTO
#define AO_FUZZ_HAVE_PROTO
#include "../../tools/load/proto.c"
#endif

#define ECHO_MAX_ARGS 24

/* No local changes after the setjmp (so none can be clobbered). */
static void fuzz_echo_parse(int argc, char **argv)
{
	static struct echo_opts o;
	struct in_addr a;

	memset(&o, 0, sizeof(o));
	optind = 0; /* glibc: start afresh */
	fuzz_echo_status = -1;
	if (setjmp(fuzz_echo_jmp)) {
		FUZZ_CHECK(fuzz_echo_status == EXIT_USAGE ||
			   fuzz_echo_status == EXIT_OK);
		return;
	}
	parse_args(argc, argv, &o);
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

static int fuzz_echo(const uint8_t *data, size_t size)
{
	static char arg0[] = "ao-echo";
	char *buf, *argv[ECHO_MAX_ARGS + 2];
	int argc = fuzz_argv(data, size, arg0, argv, ECHO_MAX_ARGS, &buf);

	fuzz_echo_parse(argc, argv);
	free(buf);
	return 0;
}

#ifndef AO_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_echo(data, size);
}
#endif
