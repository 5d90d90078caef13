// SPDX-License-Identifier: MIT
/* What the tools' command lines share: see cli.h. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <aorta/config.h>
#include "parse.h"
#include "cli.h"

#define CLI_NS 1000000000ull
#define CLI_MS 1000000ull

const char *prog = "ao-tool";
void (*cli_exit_hook)(int status);

static void __attribute__((noreturn)) cli_exit(int status)
{
	if (cli_exit_hook)
		cli_exit_hook(status);
	exit(status);
}

void cli_set_prog(const char *name, const char *argv0)
{
	prog = name;
	if (argv0 && strrchr(argv0, '/'))
		prog = strrchr(argv0, '/') + 1;
	else if (argv0 && argv0[0])
		prog = argv0;
}

void bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", prog);
	cli_exit(CLI_EXIT_USAGE);
}

void cli_option(int c, char *const *argv, void (*print_usage)(FILE *f))
{
	switch (c) {
	case 'h':
		print_usage(stdout);
		cli_exit(0);
	case 'V':
		printf("%s %s\n", prog, AO_VERSION);
		cli_exit(0);
	case ':':
		bad_usage("option '%s' needs a value", argv[optind - 1]);
	default:
		if (optopt)
			bad_usage("unknown option '-%c'", optopt);
		bad_usage("unknown option '%s'", argv[optind - 1]);
	}
}

void cli_no_operands(int argc, char *const *argv)
{
	if (optind < argc)
		bad_usage("unexpected argument '%s'", argv[optind]);
}

/* parse(s) within [min, max], or a usage error: "is not a <what> in". */
static uint64_t need_in(int (*parse)(const char *s, uint64_t min, uint64_t max,
				     uint64_t *out),
			const char *what, const char *name, const char *s,
			uint64_t min, uint64_t max)
{
	uint64_t v;

	if (parse(s, min, max, &v))
		bad_usage("--%s: '%s' is not a %s in %llu..%llu", name, s, what,
			  (unsigned long long)min, (unsigned long long)max);
	return v;
}

uint64_t need_count(const char *name, const char *s, uint64_t min, uint64_t max)
{
	return need_in(parse_count, "number", name, s, min, max);
}

uint64_t need_size(const char *name, const char *s, uint64_t min, uint64_t max)
{
	return need_in(parse_size, "size", name, s, min, max);
}

uint64_t need_duration(const char *name, const char *s, uint64_t min)
{
	uint64_t v;

	if (parse_duration(s, min, 1000000 * CLI_NS, &v))
		bad_usage(
			"--%s: '%s' is not a duration (like 10, 2.5s, 500ms, 1m)",
			name, s);
	return v;
}

const char *need_ws_path(const char *s)
{
	/* It goes into the request line as it is. */
	if (s[0] != '/' || strpbrk(s, " \r\n") || strlen(s) > 256)
		bad_usage("--ws-path: '%s' is not a path of at most 256 bytes",
			  s);
	return s;
}

/* ns in the largest unit that says it exactly (s, ms or us). */
static const char *fmt_duration(char *buf, size_t cap, uint64_t ns)
{
	if (ns && ns % CLI_NS == 0)
		snprintf(buf, cap, "%llus", (unsigned long long)(ns / CLI_NS));
	else if (ns % CLI_MS == 0)
		snprintf(buf, cap, "%llums", (unsigned long long)(ns / CLI_MS));
	else
		snprintf(buf, cap, "%lluus", (unsigned long long)(ns / 1000));
	return buf;
}

uint64_t need_duration_in(const char *name, const char *s, uint64_t min,
			  uint64_t max)
{
	char lo[32], hi[32];
	uint64_t v;

	if (parse_duration(s, min, max, &v))
		bad_usage("--%s: '%s' is not a duration in %s..%s "
			  "(like 10, 2.5s, 500ms, 20us, 1m)",
			  name, s, fmt_duration(lo, sizeof(lo), min),
			  fmt_duration(hi, sizeof(hi), max));
	return v;
}

bool need_engine_uring(const char *s)
{
	if (!strcmp(s, "epoll"))
		return false;
	if (!strcmp(s, "uring") || !strcmp(s, "io_uring"))
		return true;
	bad_usage("--engine: '%s' is not epoll or uring", s);
}

int need_progress(const char *s)
{
	if (!strcmp(s, "auto"))
		return -1;
	if (!strcmp(s, "always"))
		return 1;
	if (!strcmp(s, "never"))
		return 0;
	bad_usage("--progress: '%s' is not auto, always or never", s);
}

bool cli_report_option(int c, const char *arg, bool *json,
		       const char **hist_path, int *progress)
{
	switch (c) {
	case CLI_OPT_JSON:
		*json = true;
		return true;
	case CLI_OPT_HIST:
		*hist_path = arg;
		return true;
	case CLI_OPT_PROGRESS:
		*progress = need_progress(arg);
		return true;
	case 'q':
		*progress = 0;
		return true;
	}
	return false;
}

bool cli_progress(int progress, bool json)
{
	return progress > 0 || (progress < 0 && !json && isatty(1));
}

void need_addr(const char *s, uint16_t port, struct sockaddr_storage *sa,
	       socklen_t *len)
{
	if (parse_addr(s, port, sa, len))
		bad_usage(
			"--address: '%s' is not an IPv4 or IPv6 address (like "
			"127.0.0.1, ::1 or [::1])",
			s);
}

void need_uring(int r)
{
	if (r == -ENOSYS)
		bad_usage("--engine=uring: this build has no io_uring "
			  "engine (no liburing when it was built)");
	if (r) {
		fprintf(stderr,
			"%s: --engine=uring: io_uring is not available "
			"here: %s\n",
			prog, strerror(-r));
		cli_exit(1);
	}
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * CLI_NS + (uint64_t)ts.tv_nsec;
}

int cli_signalfd(const int *sigs)
{
	sigset_t set;
	int i, sfd;

	for (i = 0; sigs[i]; i++)
		signal(sigs[i], SIG_DFL);
	sigemptyset(&set);
	for (i = 0; sigs[i]; i++)
		sigaddset(&set, sigs[i]);
	if (sigprocmask(SIG_BLOCK, &set, NULL) ||
	    (sfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0) {
		fprintf(stderr, "%s: signalfd: %s\n", prog, strerror(errno));
		return -1;
	}
	signal(SIGPIPE, SIG_IGN);
	return sfd;
}

void cli_catch_signals(void (*handler)(int sig))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = handler;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}
