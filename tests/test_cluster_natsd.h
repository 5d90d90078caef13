/* SPDX-License-Identifier: MIT */
/*
 * A nats-server for the cluster's runners: started by the test on a free
 * loopback port with JetStream and a scratch store (mktemp), waited for
 * until it listens, stopped (or killed, or paused) by the test, its store
 * removed at the end.  Included by tests/test_cluster*.c.
 */
#ifndef TEST_CLUSTER_NATSD_H
#define TEST_CLUSTER_NATSD_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#define NATSD_PATHS "/usr/sbin/nats-server", "/usr/bin/nats-server"

struct natsd {
	pid_t pid;
	uint16_t port;
	char dir[64];
	char url[64];
	const char *bin;
};

/* Servers running now, so that a test that fails half-way (CMocka jumps
 * out of it) does not leave one behind: natsd_reap_all() at the end. */
#define NATSD_MAX 8
static pid_t natsd_pids[NATSD_MAX];

static inline void natsd_track(pid_t pid, bool on)
{
	int i;

	for (i = 0; i < NATSD_MAX; i++) {
		if (on && !natsd_pids[i]) {
			natsd_pids[i] = pid;
			return;
		}
		if (!on && natsd_pids[i] == pid) {
			natsd_pids[i] = 0;
			return;
		}
	}
}

/* Kill every server still running (its store is left in /tmp). */
static inline void natsd_reap_all(void)
{
	int i, st;

	for (i = 0; i < NATSD_MAX; i++) {
		if (natsd_pids[i] > 0) {
			kill(natsd_pids[i], SIGCONT);
			kill(natsd_pids[i], SIGKILL);
			waitpid(natsd_pids[i], &st, 0);
			natsd_pids[i] = 0;
		}
	}
}

static inline const char *natsd_binary(void)
{
	static const char *const paths[] = { NATSD_PATHS };
	const char *env = getenv("AO_NATS_SERVER");
	size_t i;

	if (env && access(env, X_OK) == 0)
		return env;
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* A loopback port nobody listens on now. */
static inline uint16_t natsd_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	uint16_t port = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static inline bool natsd_listening(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool ok;

	if (fd < 0)
		return false;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

static inline void natsd_msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Start (or restart, same port and store) the server; 0 or -errno. */
static inline int natsd_run(struct natsd *d)
{
	char port[16];
	int i, fd;

	snprintf(port, sizeof(port), "%u", d->port);
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		/* Dies with the runner, even one the watchdog aborts (the
		 * runner forks from its main thread, which lives to the
		 * end). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			if (!getenv("AO_NATS_VERBOSE")) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
		}
		execl(d->bin, d->bin, "-a", "127.0.0.1", "-p", port, "-js",
		      "-sd", d->dir, (char *)NULL);
		_exit(127);
	}
	natsd_track(d->pid, true);
	/* Bounded: 10 s for the server to listen. */
	for (i = 0; i < 1000; i++) {
		int st;

		if (natsd_listening(d->port))
			return 0;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			natsd_track(d->pid, false);
			d->pid = 0;
			return -ECHILD;
		}
		natsd_msleep(10);
	}
	return -ETIMEDOUT;
}

static inline int natsd_start(struct natsd *d)
{
	memset(d, 0, sizeof(*d));
	d->bin = natsd_binary();
	if (!d->bin)
		return -ENOENT;
	snprintf(d->dir, sizeof(d->dir), "/tmp/ao-natsd.XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	d->port = natsd_free_port();
	snprintf(d->url, sizeof(d->url), "nats://127.0.0.1:%u", d->port);
	return natsd_run(d);
}

/* Send sig and reap (SIGKILL after 5 s); the store stays. */
static inline void natsd_kill(struct natsd *d, int sig)
{
	int i, st;

	if (d->pid <= 0)
		return;
	natsd_track(d->pid, false);
	kill(d->pid, sig);
	for (i = 0; i < 500; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return;
		}
		natsd_msleep(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
}

/* Stop the server and remove its store. */
static inline void natsd_stop(struct natsd *d)
{
	char cmd[128];

	natsd_kill(d, SIGTERM);
	if (d->dir[0] && strncmp(d->dir, "/tmp/ao-natsd.", 14) == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "natsd: could not remove %s\n", d->dir);
	}
	d->dir[0] = '\0';
}

#endif /* TEST_CLUSTER_NATSD_H */
