// SPDX-License-Identifier: MIT
/* What the two servers share: see serve.h. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include "parse.h"
#include "cli.h"
#include "serve.h"

#define SERVE_NS 1000000000ull
#define SERVE_MS 1000000ull

const char *need_address(const char *s)
{
	struct sockaddr_storage ss;
	socklen_t sslen;

	if (parse_addr(s, 0, &ss, &sslen))
		bad_usage("--address: '%s' is not an IPv4 or IPv6 address", s);
	return s;
}

enum ao_io_backend need_backend(const char *s)
{
	if (!strcmp(s, "uring") || !strcmp(s, "io_uring"))
		return AO_IO_URING;
	if (!strcmp(s, "epoll"))
		return AO_IO_EPOLL;
	if (!strcmp(s, "auto"))
		return AO_IO_AUTO;
	bad_usage("--backend: '%s' is not uring, epoll or auto", s);
}

uint64_t need_stats(const char *s)
{
	uint64_t ns = need_duration_in("stats", s, 0, 1000000 * SERVE_NS);

	if (ns && ns < 10 * SERVE_MS)
		bad_usage("--stats: '%s' is below 10ms", s);
	return ns;
}

/* JSON keys of the close reasons, in enum ao_close_reason order. */
static const char *const close_keys[AO_CLOSE_NR] = {
	[AO_CLOSE_EOF] = "eof",
	[AO_CLOSE_RESET] = "reset",
	[AO_CLOSE_TRUNCATED] = "truncated",
	[AO_CLOSE_TOO_LONG] = "too_long",
	[AO_CLOSE_EMPTY] = "empty",
	[AO_CLOSE_PROTOCOL] = "protocol",
	[AO_CLOSE_SLOW] = "slow",
	[AO_CLOSE_IDLE] = "idle",
	[AO_CLOSE_LOCAL] = "local",
	[AO_CLOSE_SHUTDOWN] = "shutdown",
	[AO_CLOSE_NOMEM] = "nomem",
	[AO_CLOSE_WS_CLOSE] = "ws_close",
	[AO_CLOSE_WS_ERROR] = "ws_error",
	[AO_CLOSE_WS_PONG] = "ws_pong",
	[AO_CLOSE_HTTP_BAD] = "http_bad",
	[AO_CLOSE_HTTP_TIMEOUT] = "http_timeout",
	[AO_CLOSE_HTTP_DONE] = "http_done",
};

/* Every reason has its key: a new one must be named here too. */
_Static_assert(AO_CLOSE_HTTP_DONE + 1 == AO_CLOSE_NR,
	       "close_keys[] is missing a reason");

void print_closes_json(const struct ao_io_stats *io)
{
	for (int i = 0; i < AO_CLOSE_NR; i++)
		printf("%s\"%s\":%llu", i ? "," : "", close_keys[i],
		       (unsigned long long)io->closes[i]);
}

void print_closes_text(const struct ao_io_stats *io)
{
	bool any = false;

	for (int i = 0; i < AO_CLOSE_NR; i++) {
		if (!io->closes[i])
			continue;
		printf("%s%s %llu", any ? ", " : "", ao_close_reason_name(i),
		       (unsigned long long)io->closes[i]);
		any = true;
	}
	printf("%s\n", any ? "" : "none");
}

int serve_wait_signal(int sfd, uint64_t *next, uint64_t period,
		      void (*stats)(void *arg), void *arg)
{
	struct signalfd_siginfo si;

	for (;;) {
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		int timeout = -1, r;
		uint64_t now = now_ns();

		if (*next) {
			if (now >= *next) {
				stats(arg);
				*next += period;
				if (*next <= now)
					*next = now + period;
				continue;
			}
			timeout =
				(int)((*next - now + SERVE_MS - 1) / SERVE_MS);
		}
		r = poll(&pfd, 1, timeout);
		if (r < 0 && errno != EINTR) {
			fprintf(stderr, "%s: poll: %s\n", prog,
				strerror(errno));
			return -1;
		}
		if (r <= 0)
			continue;
		if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
			continue;
		return (int)si.ssi_signo;
	}
}
