/* SPDX-License-Identifier: MIT */
/*
 * What the tools' command lines share (ao-echo, ao-load, ao-misbehave,
 * ao-arena, ao-bots): the program's name in messages, the usage error,
 * option values that must parse (through parse.h) or the
 * program stops with status 2, the clock, and how signals are taken
 * (read from a signalfd, or caught by a handler).
 *
 * Each tool names itself first thing in main():
 * cli_set_prog("ao-echo", argv[0]).
 *
 * A usage error prints "<prog>: <message>" and "Try '<prog> --help'." on
 * stderr and exits with CLI_EXIT_USAGE.  Every exit of this file goes
 * through cli_exit_hook when it is set: the fuzz targets and tests that
 * call a tool's argument parser set it to a function that jumps back to
 * them.
 */
#ifndef AO_TOOLS_CLI_H
#define AO_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#define CLI_EXIT_USAGE 2 /* every tool's EXIT_USAGE */

/* The program's name in messages (cli_set_prog()). */
extern const char *prog;
/* Called instead of exit() when set; it must not return. */
extern void (*cli_exit_hook)(int status);

/* prog = argv0 without its folders, when there is one, else name. */
void cli_set_prog(const char *name, const char *argv0);

void bad_usage(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));
/*
 * What getopt_long() (opterr = 0, optstring starting with ':') returned
 * that every tool takes the same way: 'h' (--help: print_usage(stdout),
 * exit 0), 'V' (--version: "<prog> <version>" on stdout, exit 0), ':' (a
 * value is missing: usage error), anything else (an unknown option:
 * usage error).
 */
void cli_option(int c, char *const *argv, void (*print_usage)(FILE *f))
	__attribute__((noreturn));
/* After the options (optind): a usage error if any argument is left. */
void cli_no_operands(int argc, char *const *argv);

/*
 * The value of option --name (s), or a usage error that names the range:
 *  need_count: parse_count() within [min, max];
 *  need_size: parse_size() within [min, max];
 *  need_duration: parse_duration() within [min, 1000000 s] (ns);
 *  need_duration_in: parse_duration() within [min, max] (ns), the range
 *  in the message in ms and s.
 */
uint64_t need_count(const char *name, const char *s, uint64_t min,
		    uint64_t max);
uint64_t need_size(const char *name, const char *s, uint64_t min, uint64_t max);
uint64_t need_duration(const char *name, const char *s, uint64_t min);
uint64_t need_duration_in(const char *name, const char *s, uint64_t min,
			  uint64_t max);
/* --ws-path: an HTTP request target, "/..." of at most 256 bytes. */
const char *need_ws_path(const char *s);
/* --engine=epoll or uring (io_uring): false or true. */
bool need_engine_uring(const char *s);
/* --progress=auto, always or never: -1, 1 or 0. */
int need_progress(const char *s);
/* Whether to print progress lines: --progress (need_progress()), or with
 * auto when the result is not JSON and stdout is a terminal. */
bool cli_progress(int progress, bool json);
/* The clients' report options: --json, --hist=FILE, --progress=WHEN and
 * -q, under these long-option codes.  True if c was one of them. */
enum { CLI_OPT_JSON = 1024, CLI_OPT_HIST, CLI_OPT_PROGRESS };
bool cli_report_option(int c, const char *arg, bool *json,
		       const char **hist_path, int *progress);
/*
 * --address and --port of a client into *sa and *len (parse_addr()), or a
 * usage error.
 */
void need_addr(const char *s, uint16_t port, struct sockaddr_storage *sa,
	       socklen_t *len);
/*
 * --engine=uring, given what eng_uring_probe() says (r): nothing if 0; a
 * usage error without io_uring in the build (-ENOSYS); else a message
 * and exit 1 (the runtime failure of ao-load and ao-bots).
 */
void need_uring(int r);

/* CLOCK_MONOTONIC in ns. */
uint64_t now_ns(void);

/*
 * Block the signals of sigs (a list ending with 0) in this thread and
 * every thread it starts, after restoring their default action (a shell
 * starts a background job with SIGINT ignored, and an ignored signal
 * never reaches a signalfd), and ignore SIGPIPE.  Returns a signalfd that
 * reads them, or -1 after a message.  Call it before any thread exists.
 */
int cli_signalfd(const int *sigs);
/* SIGINT and SIGTERM to handler (a plain sigaction), SIGPIPE ignored. */
void cli_catch_signals(void (*handler)(int sig));

#endif /* AO_TOOLS_CLI_H */
