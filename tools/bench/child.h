/* SPDX-License-Identifier: MIT */
/*
 * A tool run as a child process, for the benchmarks that drive ao-echo,
 * ao-load, ao-arena and ao-bots and for the tests that run them: start it
 * (pinned, dying with us), read its stdout line by line with a deadline
 * (its "port=N" line, its JSON lines), keep its stderr, stop and reap it
 * within a bound, and read its CPU time from /proc.  Needs only libc.
 */
#ifndef AORTA_BENCH_CHILD_H
#define AORTA_BENCH_CHILD_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#define CHILD_OUT_MAX 65536 /* stdout kept (see child_out()) */
#define CHILD_LINE_MAX 32768 /* a longer line is cut */
#define CHILD_ERR_MAX 16384 /* stderr read back by child_stderr() */

struct child {
	pid_t pid;
	int slot; /* in the list child_guard_signals() kills; -1: none */
	int out; /* read end of its stdout; -1 at its end */
	int err; /* memfd holding its stderr; -1: inherited */
	bool reaped;
	int status; /* from wait4(), once reaped */
	struct rusage ru; /* its CPU and the rest, once reaped */
	size_t len; /* bytes in buf */
	size_t pos; /* start of the next unread line in buf */
	char buf[CHILD_OUT_MAX]; /* its stdout, NUL-terminated */
	char line[CHILD_LINE_MAX]; /* the line child_line() read */
	char errbuf[CHILD_ERR_MAX];
};

struct child_opts {
	const cpu_set_t *cpus; /* pin it there; NULL: not pinned */
	bool keep_stderr; /* stderr into a memfd; else inherited */
	unsigned int alarm_s; /* SIGALRM kills it after this; 0: never */
};

/* An argv built from formatted strings: child_arg(&a, "--port=%u", p). */
struct child_args {
	char *v[48];
	int n;
	size_t used;
	char store[4096];
};

void child_arg(struct child_args *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Monotonic seconds: the clock of every deadline below. */
double child_now_s(void);

/*
 * Start argv[0] with its stdout on a pipe and its stdin on /dev/null.
 * It gets SIGKILL when we die, and so do the running children when
 * child_guard_signals()'s signals arrive.  0 or -errno.
 */
int child_spawn(struct child *c, char *const argv[],
		const struct child_opts *o);
/* On SIGINT, SIGTERM and SIGHUP, SIGKILL the running children before
 * dying; SIGPIPE is ignored. */
void child_guard_signals(void);

/*
 * The next line of its stdout into c->line, without the newline: 1, 0 at
 * the end of its stdout, -ETIMEDOUT when none came before end.
 */
int child_line(struct child *c, double end);
/* The first line, "port=N": 0 and *port; -ETIMEDOUT; -EPIPE when its
 * stdout ended first; -EPROTO for another line (in c->line). */
int child_port(struct child *c, double end, unsigned int *port);
/* The next line that is a JSON object holding has (NULL: any): 1, 0 at
 * the end, -ETIMEDOUT. */
int child_next_json(struct child *c, double end, const char *has);
/* Read to the end of its stdout, keeping in out the last JSON object
 * holding has (NULL: any): 1 if one came, 0 if none, -ETIMEDOUT. */
int child_last_json(struct child *c, double end, const char *has, char *out,
		    size_t n);
/* Everything it wrote on stdout up to now, unread lines included; the
 * start is lost only when more than CHILD_OUT_MAX arrived. */
const char *child_out(struct child *c);

/* Reap it within timeout_s: 0, or -ETIMEDOUT (it still runs). */
int child_wait(struct child *c, double timeout_s);
/* Has it exited (reaping it if so)? */
bool child_gone(struct child *c);
/*
 * Read its stdout to the end and reap it, SIGKILL after timeout_s:
 * its exit status, or 128 + the signal that killed it.
 */
int child_finish(struct child *c, double timeout_s);
/* SIGKILL it (if it runs) and reap it. */
void child_kill(struct child *c);
/* child_kill() and close what is left open. */
void child_close(struct child *c);

/* "exit 1", "signal 11", "still running" */
const char *child_status(const struct child *c, char *buf, size_t n);
/* What it wrote on stderr (the first CHILD_ERR_MAX - 1 bytes), "" when
 * not kept. */
const char *child_stderr(struct child *c);
/* The last line it wrote on stderr ("" if none). */
const char *child_stderr_tail(const struct child *c, char *buf, size_t n);

/* user + system clock ticks of a process, all its threads, from
 * /proc/PID/stat (the user part in *user, if not NULL); -1 if gone. */
long long child_cpu_ticks(pid_t pid, long long *user);

/* The number after "key": in a flat JSON object; false if absent. */
bool json_get(const char *json, const char *key, double *v);
/* The same, or dflt if absent. */
double json_or(const char *json, const char *key, double dflt);

#endif /* AORTA_BENCH_CHILD_H */
