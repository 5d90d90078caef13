/* SPDX-License-Identifier: MIT */
/*
 * ao-echo's options and entry points, for its main() (main.c) and for the
 * fuzz target that checks its command line (tests/fuzz/fuzz_echo.c).
 */
#ifndef AO_ECHO_H
#define AO_ECHO_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/core/exec.h>
#include <aorta/io/server.h>
#include "../common/cli.h"
#include "../common/echo_proto.h"

#define NS 1000000000ull
#define MS 1000000ull
#define MAX_WORKERS 1024u
#define MAX_RINGS 64u
#define MAX_CONNS 1000000u

enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1, /* start failed, stop timed out, leak */
	EXIT_USAGE = CLI_EXIT_USAGE,
};

enum mode { MODE_WORKER, MODE_RING };

struct echo_opts {
	const char *address;
	uint16_t port;
	unsigned int workers; /* 0: ao_cpu_count() */
	unsigned int rings;
	enum ao_io_backend backend;
	enum framing framing;
	bool ws; /* --framing=ws: a WebSocket server (framing unused) */
	enum mode mode;
	enum ao_exec_kind discipline;
	uint32_t max_packet;
	uint32_t max_conns;
	uint64_t idle_ns;
	uint32_t buffers;
	uint64_t drain_ns;
	uint64_t stats_ns; /* 0: no periodic line */
	bool no_assist; /* worker mode without AO_SERVER_RING_ASSIST */
	bool json;
	bool quiet;
};

/* The command line into *o, or a usage error (through cli.h). */
void echo_parse_args(int argc, char **argv, struct echo_opts *o);
/* The whole program: its exit status. */
int echo_main(int argc, char **argv);

#endif /* AO_ECHO_H */
