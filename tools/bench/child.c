// SPDX-License-Identifier: MIT
/*
 * A tool run as a child process (see child.h).
 *
 * Every wait is bounded: the lines by the caller's deadline, the reaping
 * by a timeout followed by SIGKILL.  The children never outlive us:
 * PR_SET_PDEATHSIG kills them when we die for any reason, and the signals
 * child_guard_signals() takes kill them first.  Their stderr goes to a
 * memfd, not a pipe, so that a child that writes much there never blocks
 * on a pipe nobody reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "child.h"

#define KILL_TIMEOUT_S 3.0
#define NLIVE 8

/* The running children, for the signal handler; 0: a free slot. */
static volatile pid_t live[NLIVE];

void child_arg(struct child_args *a, const char *fmt, ...)
{
	size_t room = sizeof(a->store) - a->used;
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(a->store + a->used, room, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= room ||
	    a->n + 1 >= (int)(sizeof(a->v) / sizeof(a->v[0]))) {
		fprintf(stderr, "%s: argument list too long\n",
			program_invocation_short_name);
		abort();
	}
	a->v[a->n++] = a->store + a->used;
	a->v[a->n] = NULL;
	a->used += (size_t)k + 1;
}

double child_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000l };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void on_fatal(int sig)
{
	for (int i = 0; i < NLIVE; i++)
		if (live[i] > 0)
			kill(live[i], SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

void child_guard_signals(void)
{
	static const int fatal[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void unlist(struct child *c)
{
	if (c->slot >= 0)
		live[c->slot] = 0;
	c->slot = -1;
}

int child_spawn(struct child *c, char *const argv[], const struct child_opts *o)
{
	static const struct child_opts none = { 0 };
	pid_t self = getpid();
	sigset_t all, old;
	int p[2], e;

	if (!o)
		o = &none;
	memset(c, 0, sizeof(*c));
	c->pid = -1;
	c->slot = -1;
	c->out = c->err = -1;
	if (o->keep_stderr) {
		c->err = memfd_create("child-stderr", MFD_CLOEXEC);
		if (c->err < 0)
			return -errno;
	}
	if (pipe2(p, O_CLOEXEC)) {
		e = -errno;
		goto fail;
	}
	/* No handler of ours may run in the child, and no signal may come
	 * between the fork and the pid being in live[]. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	c->pid = fork();
	if (c->pid == 0) {
		static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
		int nul = open("/dev/null", O_RDONLY);

		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(127); /* the parent died already */
		if (nul > STDIN_FILENO) {
			dup2(nul, STDIN_FILENO);
			close(nul);
		}
		dup2(p[1], STDOUT_FILENO);
		if (c->err >= 0)
			dup2(c->err, STDERR_FILENO);
		if (o->cpus &&
		    sched_setaffinity(0, sizeof(*o->cpus), o->cpus)) {
			dprintf(STDERR_FILENO, "%s: pinning %s: %s\n",
				program_invocation_short_name, argv[0],
				strerror(errno));
			_exit(126);
		}
		if (o->alarm_s)
			alarm(o->alarm_s); /* it survives the exec */
		sigprocmask(SIG_SETMASK, &old, NULL);
		execv(argv[0], argv);
		dprintf(STDERR_FILENO, "%s: cannot run %s: %s\n",
			program_invocation_short_name, argv[0],
			strerror(errno));
		_exit(127);
	}
	e = -errno;
	for (int i = 0; c->pid > 0 && i < NLIVE; i++) {
		if (!live[i]) {
			live[i] = c->pid;
			c->slot = i;
			break;
		}
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[1]);
	if (c->pid < 0) {
		close(p[0]);
		goto fail;
	}
	c->out = p[0];
	return 0;
fail:
	if (c->err >= 0)
		close(c->err);
	c->err = -1;
	c->pid = -1;
	return e;
}

/*
 * Read what its stdout has, waiting until end at the most: 1 (read, or
 * nothing yet), 0 at its end, -ETIMEDOUT.  With the buffer full, what
 * comes is dropped: the start is kept.
 */
static int fill(struct child *c, double end)
{
	struct pollfd pfd = { .fd = c->out, .events = POLLIN };
	double left = end - child_now_s();
	char scratch[4096];
	ssize_t k;
	int r;

	if (c->out < 0)
		return 0;
	if (left <= 0)
		return -ETIMEDOUT;
	r = poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
	if (r <= 0)
		return 1; /* EINTR, or the deadline check next time */
	if (c->len + 1 >= sizeof(c->buf)) {
		k = read(c->out, scratch, sizeof(scratch));
	} else {
		k = read(c->out, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
		if (k > 0) {
			c->len += (size_t)k;
			c->buf[c->len] = '\0';
		}
	}
	if (k < 0 && (errno == EINTR || errno == EAGAIN))
		return 1;
	if (k <= 0) {
		close(c->out);
		c->out = -1;
		return 0;
	}
	return 1;
}

/* Move n bytes at the read position to c->line, and skip past them. */
static void take(struct child *c, size_t n, size_t skip)
{
	size_t m = n < sizeof(c->line) - 1 ? n : sizeof(c->line) - 1;

	memcpy(c->line, c->buf + c->pos, m);
	c->line[m] = '\0';
	c->pos += skip;
}

int child_line(struct child *c, double end)
{
	for (;;) {
		char *start = c->buf + c->pos;
		char *nl = memchr(start, '\n', c->len - c->pos);
		int r;

		if (nl) {
			take(c, (size_t)(nl - start), (size_t)(nl - start) + 1);
			return 1;
		}
		if (c->out < 0) {
			if (c->pos == c->len)
				return 0;
			/* A last line without a newline. */
			take(c, c->len - c->pos, c->len - c->pos);
			return 1;
		}
		if (c->len + 1 >= sizeof(c->buf)) {
			if (!c->pos) {
				/* One line fills the buffer: cut it. */
				take(c, c->len, c->len);
				return 1;
			}
			/* Make room: the lines read go. */
			c->len -= c->pos;
			memmove(c->buf, c->buf + c->pos, c->len);
			c->buf[c->len] = '\0';
			c->pos = 0;
		}
		r = fill(c, end);
		if (r < 0)
			return r;
	}
}

int child_port(struct child *c, double end, unsigned int *port)
{
	int r = child_line(c, end);

	if (r < 0)
		return r;
	if (!r)
		return -EPIPE;
	if (sscanf(c->line, "port=%u", port) == 1 && *port)
		return 0;
	return -EPROTO;
}

int child_next_json(struct child *c, double end, const char *has)
{
	int r;

	while ((r = child_line(c, end)) == 1)
		if (c->line[0] == '{' && (!has || strstr(c->line, has)))
			return 1;
	return r;
}

int child_last_json(struct child *c, double end, const char *has, char *out,
		    size_t n)
{
	int r, found = 0;

	if (n)
		out[0] = '\0';
	while ((r = child_next_json(c, end, has)) == 1) {
		snprintf(out, n, "%s", c->line);
		found = 1;
	}
	return r < 0 ? r : found;
}

const char *child_out(struct child *c)
{
	return c->buf;
}

int child_wait(struct child *c, double timeout_s)
{
	double end = child_now_s() + timeout_s;

	if (c->pid <= 0)
		return 0; /* never started */
	while (!c->reaped) {
		pid_t r = wait4(c->pid, &c->status, WNOHANG, &c->ru);

		if (r == c->pid) {
			c->reaped = true;
			break;
		}
		if (r < 0 && errno != EINTR) {
			/* Not ours any more: treat it as gone. */
			c->reaped = true;
			c->status = 0x7f00; /* "exit 127" */
			break;
		}
		if (child_now_s() > end)
			return -ETIMEDOUT;
		nap_ms(2);
	}
	unlist(c);
	return 0;
}

bool child_gone(struct child *c)
{
	return !child_wait(c, 0);
}

void child_kill(struct child *c)
{
	if (c->pid <= 0 || c->reaped)
		return;
	kill(c->pid, SIGKILL);
	if (child_wait(c, KILL_TIMEOUT_S))
		fprintf(stderr, "%s: pid %d survives SIGKILL\n",
			program_invocation_short_name, (int)c->pid);
}

int child_finish(struct child *c, double timeout_s)
{
	double end = child_now_s() + timeout_s, left;

	while (c->out >= 0 && fill(c, end) > 0)
		;
	left = end - child_now_s();
	if (child_wait(c, left > 0 ? left : 0))
		child_kill(c);
	if (c->out >= 0)
		close(c->out);
	c->out = -1;
	if (!c->reaped || !(WIFEXITED(c->status) || WIFSIGNALED(c->status)))
		return -1;
	return WIFEXITED(c->status) ? WEXITSTATUS(c->status) :
				      128 + WTERMSIG(c->status);
}

void child_close(struct child *c)
{
	child_kill(c);
	if (c->out >= 0)
		close(c->out);
	if (c->err >= 0)
		close(c->err);
	c->out = c->err = -1;
}

const char *child_status(const struct child *c, char *buf, size_t n)
{
	if (!c->reaped)
		snprintf(buf, n, "still running");
	else if (WIFEXITED(c->status))
		snprintf(buf, n, "exit %d", WEXITSTATUS(c->status));
	else if (WIFSIGNALED(c->status))
		snprintf(buf, n, "signal %d", WTERMSIG(c->status));
	else
		snprintf(buf, n, "status %#x", c->status);
	return buf;
}

const char *child_stderr(struct child *c)
{
	ssize_t k = -1;

	if (c->err >= 0)
		k = pread(c->err, c->errbuf, sizeof(c->errbuf) - 1, 0);
	c->errbuf[k > 0 ? k : 0] = '\0';
	return c->errbuf;
}

const char *child_stderr_tail(const struct child *c, char *buf, size_t n)
{
	off_t size;
	ssize_t k;
	char *p;

	buf[0] = '\0';
	if (c->err < 0)
		return buf;
	size = lseek(c->err, 0, SEEK_END);
	if (size <= 0)
		return buf;
	k = pread(c->err, buf, n - 1,
		  size > (off_t)(n - 1) ? size - (off_t)(n - 1) : 0);
	if (k <= 0) {
		buf[0] = '\0';
		return buf;
	}
	buf[k] = '\0';
	while (k > 0 && (buf[k - 1] == '\n' || buf[k - 1] == '\r'))
		buf[--k] = '\0';
	p = strrchr(buf, '\n');
	if (p)
		memmove(buf, p + 1, strlen(p + 1) + 1);
	return buf;
}

long long child_cpu_ticks(pid_t pid, long long *user)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: the
	 * fields after it start after the last ')'.  Then field 3 (state)
	 * ... 13 (cmajflt), 14 utime, 15 stime. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 1,
			 " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu "
			 "%llu",
			 &ut, &st) != 2)
		return -1;
	if (user)
		*user = (long long)ut;
	return (long long)(ut + st);
}

bool json_get(const char *json, const char *key, double *v)
{
	char pat[96];
	const char *p;
	char *end;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (!p)
		return false;
	p += strlen(pat);
	*v = strtod(p, &end);
	return end != p;
}

double json_or(const char *json, const char *key, double dflt)
{
	double v;

	return json_get(json, key, &v) ? v : dflt;
}
