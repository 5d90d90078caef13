/* SPDX-License-Identifier: MIT */
/*
 * What the two servers share (ao-echo, ao-arena): three options, the close
 * reasons in their reports, and the main thread's wait for signals
 * between statistics lines.
 */
#ifndef AO_TOOLS_SERVE_H
#define AO_TOOLS_SERVE_H

#include <stdint.h>
#include <aorta/io/server.h>

/*
 * The values of --address (the bind address), --backend and --stats (the
 * period of the statistics lines in ns: 0, or 10 ms to 1000000 s), or a
 * usage error.
 */
const char *need_address(const char *s);
enum ao_io_backend need_backend(const char *s);
uint64_t need_stats(const char *s);

/* The close reasons as JSON members, "eof":N,"reset":N,... (all of them,
 * in enum ao_close_reason order; no braces). */
void print_closes_json(const struct ao_io_stats *io);
/* Those that happened, "eof 3, reset 1", or "none"; then a newline. */
void print_closes_text(const struct ao_io_stats *io);

/*
 * Wait for a signal on sfd (cli_signalfd()) and return its number.
 * Meanwhile, when *next (CLOCK_MONOTONIC ns, 0: never) comes, call
 * stats(arg) and move *next on by period (to period from now if that is
 * already past).  -1 if poll() fails, after a message.
 */
int serve_wait_signal(int sfd, uint64_t *next, uint64_t period,
		      void (*stats)(void *arg), void *arg);

#endif /* AO_TOOLS_SERVE_H */
