// SPDX-License-Identifier: MIT
/*
 * epoll_echo_server: the baseline the echo benchmarks compare ao-echo
 * against, a plain single-threaded epoll echo server.
 *
 * Level-triggered epoll; per connection one buffer: read, echo what can be
 * echoed, keep the rest.  With --framing=len16 or len32 the stream is
 * frames of a 2- or 4-byte length prefix (the payload's length, network
 * byte order) and a payload, as with ao-echo: whole frames are echoed,
 * prefix and all; a zero length or one over --max-packet closes the
 * connection.  With raw framing every byte read is echoed.  While a
 * connection's echo does not fit the socket, the server stops reading it.
 *
 * Prints "port=N" on stdout once listening (--port=0: an ephemeral port),
 * and on SIGINT or SIGTERM a line of counters on stderr, then exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_MIN (16 * 1024)
#define MAX_EVENTS 256
#define LISTEN_TAG UINT64_MAX
#define SIGNAL_TAG (UINT64_MAX - 1)

enum framing { RAW, LEN16, LEN32 };

struct conn {
	int fd;
	uint8_t *buf;
	size_t cap;
	size_t len; /* bytes read, not yet echoed */
	size_t out; /* of those, the first out are due for echo */
	size_t sent; /* of the due bytes, sent so far */
	bool pollout;
};

static const char *prog = "epoll_echo_server";
static enum framing framing = RAW;
static size_t hdr_len;
static uint32_t max_packet = 64 * 1024;
static int epfd;
static unsigned long long n_accepted, n_closed, n_bad, n_bytes, n_frames;

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [options]\n"
		"A plain single-threaded epoll echo server (a benchmark baseline).\n"
		"\n"
		"  -a, --addr=ADDR        listen address (default 127.0.0.1)\n"
		"  -p, --port=PORT        listen port (default 0: an ephemeral port)\n"
		"  -f, --framing=F        raw, len16 or len32 (default raw)\n"
		"  -m, --max-packet=B     largest payload of a frame (default 65536)\n"
		"  -h, --help             this help\n"
		"\n"
		"Prints port=N on stdout once listening; SIGINT or SIGTERM stops it\n"
		"(exit 0).  Exit status 2 for a bad option, 1 for other errors.\n",
		prog);
}

static void __attribute__((noreturn))
bad_usage(const char *what, const char *val)
{
	fprintf(stderr, "%s: %s '%s'\nTry '%s --help'.\n", prog, what, val,
		prog);
	exit(2);
}

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
	exit(1);
}

static unsigned long parse_ul(const char *s, unsigned long max,
			      const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > max)
		bad_usage(what, s);
	return v;
}

static void conn_close(struct conn *c)
{
	close(c->fd); /* leaves the epoll set with it */
	free(c->buf);
	free(c);
	n_closed++;
}

static int conn_events(struct conn *c, bool out)
{
	struct epoll_event ev = { .events = out ? EPOLLOUT : EPOLLIN,
				  .data.ptr = c };

	c->pollout = out;
	return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* How many of the buffered bytes are whole frames; -1 for a bad frame. */
static long frames_ready(struct conn *c, size_t *need)
{
	size_t off = 0, plen;
	const uint8_t *p;

	*need = 0;
	if (framing == RAW)
		return (long)c->len;
	while (c->len - off >= hdr_len) {
		p = c->buf + off;
		plen = framing == LEN16 ?
			       (size_t)p[0] << 8 | p[1] :
			       (size_t)p[0] << 24 | (size_t)p[1] << 16 |
				       (size_t)p[2] << 8 | p[3];
		if (!plen || plen > max_packet)
			return -1;
		if (c->len - off < hdr_len + plen) {
			*need = hdr_len + plen;
			break;
		}
		off += hdr_len + plen;
		n_frames++;
	}
	return (long)off;
}

/* Send the due bytes; 1 when all are out, 0 when the socket is full,
 * -1 on error. */
static int conn_send(struct conn *c)
{
	ssize_t r;

	while (c->sent < c->out) {
		r = send(c->fd, c->buf + c->sent, c->out - c->sent,
			 MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -1;
		}
		c->sent += (size_t)r;
		n_bytes += (size_t)r;
	}
	/* Keep the partial frame at the front. */
	memmove(c->buf, c->buf + c->out, c->len - c->out);
	c->len -= c->out;
	c->out = c->sent = 0;
	return 1;
}

static void conn_readable(struct conn *c)
{
	size_t need;
	ssize_t r;
	long ready;
	int s;

	r = read(c->fd, c->buf + c->len, c->cap - c->len);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		conn_close(c);
		return;
	}
	c->len += (size_t)r;
	ready = frames_ready(c, &need);
	if (ready < 0) {
		n_bad++;
		conn_close(c);
		return;
	}
	if (need > c->cap) {
		uint8_t *nb = realloc(c->buf, need);

		if (!nb) {
			conn_close(c);
			return;
		}
		c->buf = nb;
		c->cap = need;
	}
	if (!ready)
		return;
	c->out = (size_t)ready;
	s = conn_send(c);
	if (s < 0)
		conn_close(c);
	else if (s == 0 && conn_events(c, true))
		conn_close(c);
}

static void conn_writable(struct conn *c)
{
	int s = conn_send(c);

	if (s < 0) {
		conn_close(c);
		return;
	}
	if (s == 0)
		return;
	if (conn_events(c, false)) {
		conn_close(c);
		return;
	}
	/* Frames may have arrived whole while we waited. */
	if (c->len)
		conn_readable(c);
}

static void accept_all(int lfd)
{
	struct epoll_event ev;
	struct conn *c;
	int fd, one = 1;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				fprintf(stderr, "%s: accept: %s\n", prog,
					strerror(errno));
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		if (c)
			c->buf = malloc(BUF_MIN);
		if (!c || !c->buf) {
			free(c);
			close(fd);
			continue;
		}
		c->fd = fd;
		c->cap = BUF_MIN;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev)) {
			free(c->buf);
			free(c);
			close(fd);
			continue;
		}
		n_accepted++;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "port", required_argument, NULL, 'p' },
		{ "framing", required_argument, NULL, 'f' },
		{ "max-packet", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *addr = "127.0.0.1";
	struct epoll_event evs[MAX_EVENTS], ev;
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	socklen_t slen;
	unsigned long port = 0;
	sigset_t mask;
	int lfd, sfd, one = 1, n, i, c;
	bool stop = false;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:f:m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = parse_ul(optarg, 65535, "--port: bad port");
			break;
		case 'f':
			if (!strcmp(optarg, "raw"))
				framing = RAW;
			else if (!strcmp(optarg, "len16"))
				framing = LEN16;
			else if (!strcmp(optarg, "len32"))
				framing = LEN32;
			else
				bad_usage("--framing: not raw, len16 or len32:",
					  optarg);
			break;
		case 'm':
			max_packet = (uint32_t)parse_ul(
				optarg, 1u << 30, "--max-packet: bad size");
			if (!max_packet)
				bad_usage("--max-packet: bad size", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			bad_usage("option needs a value:", argv[optind - 1]);
		default:
			bad_usage("unknown option", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad_usage("unexpected argument", argv[optind]);
	hdr_len = framing == LEN16 ? 2 : framing == LEN32 ? 4 : 0;
	if (framing == LEN16 && max_packet > 65535)
		max_packet = 65535;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, addr, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		slen = sizeof(*sin);
	} else if (inet_pton(AF_INET6, addr, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		slen = sizeof(*sin6);
	} else {
		bad_usage("--addr: not an IPv4 or IPv6 address:", addr);
	}

	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		     0);
	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, slen))
		die("bind");
	if (listen(lfd, SOMAXCONN))
		die("listen");
	slen = sizeof(ss);
	if (getsockname(lfd, (struct sockaddr *)&ss, &slen))
		die("getsockname");

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &mask, NULL))
		die("sigprocmask");
	sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || epfd < 0)
		die("signalfd/epoll_create1");
	ev.events = EPOLLIN;
	ev.data.u64 = LISTEN_TAG;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev))
		die("epoll_ctl");
	ev.data.u64 = SIGNAL_TAG;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev))
		die("epoll_ctl");

	printf("port=%u\n", ntohs(ss.ss_family == AF_INET ? sin->sin_port :
							    sin6->sin6_port));
	fflush(stdout);

	while (!stop) {
		n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			if (evs[i].data.u64 == LISTEN_TAG) {
				accept_all(lfd);
			} else if (evs[i].data.u64 == SIGNAL_TAG) {
				stop = true;
			} else {
				struct conn *cn = evs[i].data.ptr;

				if (cn->pollout)
					conn_writable(cn);
				else
					conn_readable(cn);
			}
		}
	}
	fprintf(stderr,
		"%s: stopped: %llu connections accepted, %llu closed, "
		"%llu bad frames, %llu frames, %llu bytes echoed\n",
		prog, n_accepted, n_closed, n_bad, n_frames, n_bytes);
	return 0;
}
