// SPDX-License-Identifier: MIT
/*
 * ao-misbehave: clients that misbehave on purpose, to test an echo server
 * (ao-echo) under faults.  One mode per run, loopback only, bounded by
 * --duration and --count:
 *
 *   truncate   send whole frames, then half a frame, then FIN (shutdown):
 *              the server sees its peer close inside a packet;
 *   reset      the same in bulk, ending with SO_LINGER 0 (a reset) on a
 *              whole batch of connections at once;
 *   flood      open --connections at once (more than the server's maximum)
 *              and hold them; then every connection the server kept must
 *              echo a frame, the rest must have been closed by it;
 *   slowloris  trickle one frame a byte every --interval;
 *   noread     send --bytes and never read a reply (all at once, or
 *              --chunk bytes every --interval: receives that small pin
 *              a pool buffer each in the server's send queue);
 *   churn      --connections clients at a time, over and over: each
 *              connection sends a stream of its own (random frames from a
 *              seed no other connection has), checks that what comes back
 *              is exactly its own bytes in order, and disconnects at a
 *              random point, often mid-stream (FIN or reset), then the
 *              slot reconnects with a new stream.
 *
 * Every byte that comes back is compared with what this connection sent,
 * at its offset; a byte that differs, or one that was never sent, is a
 * wrong byte (a reply sent to the wrong client, a reused buffer).  The run
 * is one epoll loop on one thread with nonblocking sockets.
 *
 * Exit status: 0 ok; 1 a check failed (wrong bytes, a timeout, or with
 * --strict a connection the server closed before its echo was complete);
 * 2 usage; 3 no connection could be made at all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <aorta/config.h>
#include "../common/cli.h"
#include "../common/echo_proto.h"
#include "../common/parse.h"

#define NS 1000000000ull
#define MS 1000000ull
#define TICK_NS (10 * MS) /* timers, timeouts and phases are checked */
#define MAX_CONNECTING 128u /* connects in flight at once */
#define MAX_CONNS 200000u
#define MAX_LOG 8 /* wrong-byte reports, then only a count */
#define NOREAD_BLOCK (64u << 10) /* noread's repeated block of frames */
#define NONE SIZE_MAX

enum {
	EXIT_OK = 0,
	EXIT_CHECK = 1,
	EXIT_USAGE = CLI_EXIT_USAGE,
	EXIT_CONNECT = 3,
};

enum mode { M_TRUNCATE, M_RESET, M_FLOOD, M_SLOWLORIS, M_NOREAD, M_CHURN };

static const char *const mode_names[] = {
	[M_TRUNCATE] = "truncate",   [M_RESET] = "reset",   [M_FLOOD] = "flood",
	[M_SLOWLORIS] = "slowloris", [M_NOREAD] = "noread", [M_CHURN] = "churn",
};

struct opts {
	struct sockaddr_storage sa;
	socklen_t salen;
	const char *addr;
	uint16_t port;
	enum mode mode;
	enum framing framing;
	uint32_t conns; /* at once */
	uint64_t count; /* connections in all; 0: until --duration */
	uint64_t duration_ns;
	uint64_t interval_ns; /* slowloris; noread when paced */
	bool paced; /* noread: --chunk bytes every --interval */
	uint64_t hold_ns; /* flood */
	uint64_t timeout_ns; /* no progress for this long: a failure */
	size_t size; /* largest payload of a frame */
	uint32_t frames; /* whole frames per connection (at most, churn) */
	uint64_t bytes; /* noread: bytes to send per connection */
	size_t chunk; /* the largest send(); 0: no limit (churn: random) */
	uint64_t seed;
	bool json;
	bool quiet;
	bool strict;
};

enum cstate {
	C_FREE, /* no connection in this slot */
	C_CONNECTING, /* nonblocking connect in flight */
	C_RUN, /* sending and reading */
	C_WAIT, /* reset: waiting for the rest of the batch; flood: held */
	C_SHUT, /* truncate: FIN sent, reading until the server's EOF */
};

struct mconn {
	int fd;
	enum cstate st;
	uint32_t slot;
	uint64_t stream; /* unique over the run: the seed of its bytes */
	uint8_t *buf; /* what this connection sends, repeated if total > len */
	size_t len;
	size_t total; /* bytes it sends in all */
	size_t send_to; /* sends stop here (the cut point) */
	size_t wait_rx; /* done once this much came back (NONE: at send_to) */
	size_t tx, rx; /* bytes sent; bytes echoed and checked */
	bool rst; /* close with a reset */
	bool bad; /* a wrong byte came back */
	bool reading; /* polls for input (noread does not) */
	bool pollout;
	uint64_t t_last; /* last progress (ns) */
	uint64_t t_next; /* slowloris: next byte due */
};

struct stats {
	uint64_t opened; /* connections established */
	uint64_t connect_errors;
	uint64_t completed; /* ended as planned, by this side */
	uint64_t cut; /* of those: disconnected mid-stream */
	uint64_t server_closed; /* the server closed (EOF or reset) */
	uint64_t lost; /* closed by the server before the echo was done */
	uint64_t served; /* flood: kept and echoed */
	uint64_t still_open; /* slowloris, noread: open at the end */
	uint64_t timeouts;
	uint64_t wrong_conns; /* connections that got a wrong byte */
	uint64_t wrong_bytes;
	uint64_t tx_bytes, rx_bytes;
};

static struct opts o;
static struct stats st;
static struct mconn *conns;
static int epfd;
static uint64_t next_stream;
static uint64_t started; /* connections started (attempts) */
static uint32_t connecting;
static uint32_t active; /* slots not C_FREE */
static bool stopping; /* no new connections */
static unsigned int logged;
static volatile sig_atomic_t got_signal;

/* splitmix64: one step of a generator with a 64-bit state. */
static uint64_t mix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rng_state;

/* A number in [lo, hi] from the run's generator. */
static uint64_t rnd(uint64_t lo, uint64_t hi)
{
	return lo + mix64(&rng_state) % (hi - lo + 1);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s --port=PORT --mode=MODE [options]\n"
		"Misbehaving clients for an echo server (loopback only).\n"
		"\n"
		"Modes:\n"
		"  truncate   whole frames, then half a frame and a FIN\n"
		"  reset      whole frames and half a frame, then a reset\n"
		"             (SO_LINGER 0) of the whole batch at once\n"
		"  flood      open --connections at once and hold them; those the\n"
		"             server keeps must echo, the rest be closed by it\n"
		"  slowloris  one frame, a byte every --interval\n"
		"  noread     send --bytes, never read the echo (with --interval:\n"
		"             --chunk bytes per interval)\n"
		"  churn      --connections clients at a time, reconnecting: each\n"
		"             sends its own random stream, checks the echo is its\n"
		"             own bytes in order, disconnects at a random point\n"
		"\n"
		"Options:\n"
		"  -a, --address=ADDR    server address (default 127.0.0.1; loopback only)\n"
		"  -p, --port=PORT       server port (required)\n"
		"  -m, --mode=MODE       one of the modes above (required)\n"
		"  -f, --framing=F       raw, len16 or len32 (default raw), as ao-load\n"
		"  -c, --connections=N   connections at once (default 100)\n"
		"      --count=N         connections in all (truncate, reset, churn;\n"
		"                        default: --connections, churn: until\n"
		"                        --duration)\n"
		"  -d, --duration=T      bound of the run (default 10s; ms, s, m, h)\n"
		"  -s, --size=B          largest payload of a frame (default 512)\n"
		"      --frames=N        whole frames per connection (default 4;\n"
		"                        churn: at most, default 16)\n"
		"  -i, --interval=T      slowloris: between bytes (default 1s);\n"
		"                        noread: send --chunk bytes (default 64)\n"
		"                        this often instead of all at once\n"
		"      --hold=T          flood: hold the connections (default 1s)\n"
		"      --bytes=B         noread: bytes per connection (default 64M)\n"
		"      --timeout=T       a connection that should progress and does\n"
		"                        not for T fails the run (default 10s)\n"
		"      --chunk=B         the largest send() (default: no limit;\n"
		"                        churn: random pieces up to 4k)\n"
		"      --seed=N          seed of the random choices (default 1)\n"
		"      --strict          fail when the server closes a connection\n"
		"                        before its echo is complete\n"
		"      --json            the result as one JSON object on stdout\n"
		"  -q, --quiet           no wrong-byte reports on stderr\n"
		"  -h, --help            this help\n"
		"  -V, --version         the version\n"
		"\n"
		"Exit status: 0 ok; 1 a check failed (wrong bytes, a timeout, with\n"
		"--strict a server close); 2 usage; 3 could not connect at all.\n",
		prog);
}

enum {
	OPT_FRAMES = 256,
	OPT_HOLD,
	OPT_BYTES,
	OPT_TIMEOUT,
	OPT_SEED,
	OPT_CHUNK,
	OPT_STRICT,
	OPT_JSON,
};

static const struct option long_opts[] = {
	{ "address", required_argument, NULL, 'a' },
	{ "addr", required_argument, NULL, 'a' }, /* the old name */
	{ "port", required_argument, NULL, 'p' },
	{ "mode", required_argument, NULL, 'm' },
	{ "framing", required_argument, NULL, 'f' },
	{ "connections", required_argument, NULL, 'c' },
	{ "count", required_argument, NULL, 'n' },
	{ "duration", required_argument, NULL, 'd' },
	{ "size", required_argument, NULL, 's' },
	{ "frames", required_argument, NULL, OPT_FRAMES },
	{ "interval", required_argument, NULL, 'i' },
	{ "hold", required_argument, NULL, OPT_HOLD },
	{ "bytes", required_argument, NULL, OPT_BYTES },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "chunk", required_argument, NULL, OPT_CHUNK },
	{ "strict", no_argument, NULL, OPT_STRICT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Loopback only: 127.0.0.0/8 or ::1. */
static void set_addr(const char *s)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&o.sa;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&o.sa;

	if (parse_addr(s, o.port, &o.sa, &o.salen))
		bad_usage("--address: '%s' is not an IPv4 or IPv6 address", s);
	if (o.sa.ss_family == AF_INET ?
		    (ntohl(sin->sin_addr.s_addr) >> 24) != 127 :
		    !IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr))
		bad_usage("--address: %s is not a loopback address", s);
}

static void parse_args(int argc, char **argv)
{
	bool have_port = false, have_mode = false, have_count = false;
	bool have_frames = false;
	unsigned int i;
	int c;

	o.addr = "127.0.0.1";
	o.framing = FRAMING_RAW;
	o.conns = 100;
	o.duration_ns = 10 * NS;
	o.interval_ns = NS;
	o.hold_ns = NS;
	o.timeout_ns = 10 * NS;
	o.size = 512;
	o.frames = 4;
	o.bytes = 64ull << 20;
	o.seed = 1;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:m:f:c:d:s:i:qhV", long_opts,
				NULL)) != -1) {
		switch (c) {
		case 'a':
			o.addr = optarg;
			break;
		case 'p':
			o.port = (uint16_t)need_count("port", optarg, 1, 65535);
			have_port = true;
			break;
		case 'm':
			for (i = 0;
			     i < sizeof(mode_names) / sizeof(*mode_names); i++)
				if (!strcmp(optarg, mode_names[i]))
					break;
			if (i == sizeof(mode_names) / sizeof(*mode_names))
				bad_usage(
					"--mode: '%s' is not truncate, reset, flood, slowloris, noread or churn",
					optarg);
			o.mode = (enum mode)i;
			have_mode = true;
			break;
		case 'f':
			if (framing_parse(optarg, &o.framing))
				bad_usage(
					"--framing: '%s' is not raw, len16 or len32",
					optarg);
			break;
		case 'c':
			o.conns = (uint32_t)need_count("connections", optarg, 1,
						       MAX_CONNS);
			break;
		case 'n':
			o.count =
				need_count("count", optarg, 1, UINT64_MAX >> 8);
			have_count = true;
			break;
		case 'd':
			o.duration_ns = need_duration("duration", optarg, MS);
			break;
		case 's':
			o.size = (size_t)need_size("size", optarg, 1,
						   PAYLOAD_MAX);
			break;
		case OPT_FRAMES:
			o.frames = (uint32_t)need_count("frames", optarg, 1,
							1u << 20);
			have_frames = true;
			break;
		case 'i':
			o.interval_ns = need_duration("interval", optarg, MS);
			o.paced = true;
			break;
		case OPT_HOLD:
			o.hold_ns = need_duration("hold", optarg, 0);
			break;
		case OPT_BYTES:
			o.bytes = need_size("bytes", optarg, 1, 1ull << 40);
			break;
		case OPT_TIMEOUT:
			o.timeout_ns = need_duration("timeout", optarg, MS);
			break;
		case OPT_CHUNK:
			o.chunk = (size_t)need_size("chunk", optarg, 1,
						    PAYLOAD_MAX);
			break;
		case OPT_SEED:
			o.seed = need_count("seed", optarg, 0, UINT64_MAX >> 8);
			break;
		case OPT_STRICT:
			o.strict = true;
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		default: /* -h, -V, errors */
			cli_option(c, argv, usage);
		}
	}
	cli_no_operands(argc, argv);
	if (!have_port)
		bad_usage("--port is required");
	if (!have_mode)
		bad_usage("--mode is required");
	if (o.size > framing_max_payload(o.framing))
		bad_usage(
			"--size: %zu bytes do not fit %s framing (at most %zu)",
			o.size, framing_name(o.framing),
			framing_max_payload(o.framing));
	if (o.mode == M_TRUNCATE && o.framing == FRAMING_RAW && o.size < 2)
		bad_usage("--size: truncate needs at least 2 bytes");
	if (!have_count && (o.mode == M_TRUNCATE || o.mode == M_RESET))
		o.count = o.conns;
	if (o.mode == M_FLOOD || o.mode == M_SLOWLORIS || o.mode == M_NOREAD)
		o.count = o.conns; /* one round */
	if (o.paced && o.mode == M_NOREAD && !o.chunk)
		o.chunk = 64;
	if (!have_frames && o.mode == M_CHURN)
		o.frames = 16;
	set_addr(o.addr);
}

/* Fill p with n bytes of the stream seeded by seed. */
static void fill_random(uint8_t *p, size_t n, uint64_t *seed)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!(i & 7))
			v = mix64(seed);
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* Append one frame of a size-byte random payload at p; its length. */
static size_t put_frame(uint8_t *p, size_t size, uint64_t *seed)
{
	size_t h = framing_hdr_len(o.framing);

	if (o.framing == FRAMING_LEN16) {
		p[0] = (uint8_t)(size >> 8);
		p[1] = (uint8_t)size;
	} else if (o.framing == FRAMING_LEN32) {
		p[0] = (uint8_t)(size >> 24);
		p[1] = (uint8_t)(size >> 16);
		p[2] = (uint8_t)(size >> 8);
		p[3] = (uint8_t)size;
	}
	fill_random(p + h, size, seed);
	return h + size;
}

/*
 * What connection c sends and when it is done, per mode.  buf holds
 * frames of random payloads from the connection's own seed: a byte of
 * another connection's stream matches one of ours only by chance (1 in
 * 256 per byte), so a misdelivered reply is caught at its first bytes.
 */
static int plan(struct mconn *c)
{
	size_t h = framing_hdr_len(o.framing), cap, n = 0, sz;
	uint64_t id = c->stream;
	uint64_t seed = o.seed * 0x100000001b3ull ^ mix64(&id);
	uint32_t i, frames = o.frames;

	switch (o.mode) {
	case M_SLOWLORIS:
	case M_FLOOD:
		frames = 1;
		break;
	case M_NOREAD:
		frames = (uint32_t)(NOREAD_BLOCK / (h + o.size)) + 1;
		break;
	case M_CHURN:
		frames = (uint32_t)rnd(1, o.frames);
		break;
	default:
		break;
	}
	cap = (size_t)(frames + 1) * (h + o.size);
	c->buf = malloc(cap);
	if (!c->buf)
		return -ENOMEM;
	for (i = 0; i < frames; i++) {
		sz = o.mode == M_CHURN ? (size_t)rnd(1, o.size) : o.size;
		n += put_frame(c->buf + n, sz, &seed);
	}
	c->len = n;
	c->total = n;
	c->send_to = n;
	c->wait_rx = n;
	c->reading = true;
	c->rst = false;
	switch (o.mode) {
	case M_TRUNCATE:
	case M_RESET:
		/* Then half a frame: the header and half the payload. */
		sz = o.size / 2;
		put_frame(c->buf + n, o.size, &seed);
		c->len = c->total = c->send_to = n + h + sz;
		/* Raw framing echoes the half frame too. */
		if (o.framing == FRAMING_RAW)
			c->wait_rx = c->len;
		c->rst = o.mode == M_RESET;
		break;
	case M_FLOOD:
		c->send_to = 0; /* after the hold */
		break;
	case M_SLOWLORIS:
		c->send_to = 0; /* a byte per interval */
		c->wait_rx = NONE;
		break;
	case M_NOREAD:
		c->total = (size_t)o.bytes;
		c->send_to = o.paced ? 0 : c->total;
		c->wait_rx = NONE;
		c->reading = false;
		break;
	case M_CHURN:
		/* Half of them leave mid-stream, at any byte. */
		if (rnd(0, 1)) {
			c->send_to = (size_t)rnd(0, n);
			c->wait_rx = NONE;
		}
		c->rst = rnd(0, 3) == 0;
		break;
	}
	return 0;
}

static void ep_set(struct mconn *c, bool out)
{
	struct epoll_event ev = {
		.events = (c->reading ? EPOLLIN : 0) | (out ? EPOLLOUT : 0) |
			  EPOLLRDHUP,
		.data.u32 = c->slot,
	};

	if (out == c->pollout)
		return;
	c->pollout = out;
	epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_free(struct mconn *c)
{
	if (c->st == C_CONNECTING)
		connecting--;
	if (c->fd >= 0) {
		if (c->rst) {
			struct linger l = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		}
		close(c->fd);
	}
	free(c->buf);
	c->buf = NULL;
	c->fd = -1;
	c->st = C_FREE;
	active--;
}

/* This side ends the connection as planned. */
static void conn_done(struct mconn *c)
{
	st.completed++;
	if (c->wait_rx == NONE && c->send_to < c->total)
		st.cut++;
	conn_free(c);
}

/* The server closed it (EOF, reset or another socket error). */
static void conn_server_closed(struct mconn *c)
{
	st.server_closed++;
	if (c->st == C_SHUT) {
		/* truncate: the EOF we waited for, after the whole echo */
		st.server_closed--;
		if (c->rx < c->wait_rx)
			st.lost++;
		conn_done(c);
		return;
	}
	if ((o.mode != M_SLOWLORIS && o.mode != M_NOREAD &&
	     o.mode != M_FLOOD) ||
	    (o.mode == M_FLOOD && c->send_to))
		st.lost++;
	conn_free(c);
}

static void conn_start(uint32_t slot)
{
	struct mconn *c = &conns[slot];
	int fd, one = 1;

	started++;
	memset(c, 0, sizeof(*c));
	c->slot = slot;
	c->stream = next_stream++;
	c->fd = -1;
	active++;
	if (plan(c)) {
		fprintf(stderr, "%s: out of memory\n", prog);
		exit(EXIT_CHECK);
	}
	fd = socket(o.sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0) {
		st.connect_errors++;
		conn_free(c);
		return;
	}
	c->fd = fd;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (o.mode == M_NOREAD) {
		/* A small window: the echo backs up into the server soon. */
		int rcv = 4096;

		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	}
	c->st = C_CONNECTING;
	connecting++;
	c->t_last = now_ns();
	if (connect(fd, (struct sockaddr *)&o.sa, o.salen) &&
	    errno != EINPROGRESS) {
		st.connect_errors++;
		conn_free(c);
		return;
	}
	{
		struct epoll_event ev = { .events = EPOLLOUT | EPOLLRDHUP |
						    (c->reading ? EPOLLIN : 0),
					  .data.u32 = slot };

		c->pollout = true;
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev)) {
			st.connect_errors++;
			conn_free(c);
		}
	}
}

static void report_wrong(struct mconn *c, size_t off, uint8_t want, uint8_t got,
			 bool unsent)
{
	if (!c->bad)
		st.wrong_conns++;
	c->bad = true;
	if (o.quiet || logged >= MAX_LOG)
		return;
	logged++;
	if (unsent)
		fprintf(stderr,
			"%s: stream %llu: byte %zu came back but was never sent (0x%02x)\n",
			prog, (unsigned long long)c->stream, off, got);
	else
		fprintf(stderr,
			"%s: stream %llu: byte %zu is 0x%02x, sent 0x%02x\n",
			prog, (unsigned long long)c->stream, off, got, want);
}

/*
 * Check echoed bytes against what this connection sent at their offsets;
 * false at a wrong one (the rest of the stream means nothing then).
 */
static bool check_rx(struct mconn *c, const uint8_t *p, size_t n)
{
	size_t i, off;
	uint8_t want;

	for (i = 0; i < n; i++) {
		off = c->rx + i;
		if (off >= c->tx) {
			st.wrong_bytes += n - i;
			report_wrong(c, off, 0, p[i], true);
			break;
		}
		want = c->buf[off % c->len];
		if (p[i] != want) {
			st.wrong_bytes++;
			report_wrong(c, off, want, p[i], false);
		}
	}
	c->rx += n;
	st.rx_bytes += n;
	return !c->bad;
}

/* Send what is due; false if the connection went away. */
static bool conn_send(struct mconn *c, uint64_t now)
{
	size_t limit = c->send_to, n, off;
	ssize_t r;

	if (limit > c->total)
		limit = c->total;
	while (c->tx < limit) {
		off = c->tx % c->len;
		n = limit - c->tx;
		if (n > c->len - off)
			n = c->len - off;
		/* Churn sends in random pieces: every split point occurs. */
		if (o.mode == M_CHURN && n > 1)
			n = (size_t)rnd(1, n < 4096 ? n : 4096);
		if (o.chunk && n > o.chunk)
			n = o.chunk;
		r = send(c->fd, c->buf + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			conn_server_closed(c);
			return false;
		}
		c->tx += (size_t)r;
		st.tx_bytes += (size_t)r;
		c->t_last = now;
	}
	ep_set(c, c->tx < limit);
	return true;
}

/* The connection's next step after progress; false if it is gone. */
static bool conn_step(struct mconn *c, uint64_t now)
{
	if (c->st != C_RUN)
		return true;
	if (!conn_send(c, now))
		return false;
	if (c->tx < c->send_to && c->tx < c->total)
		return true;
	if (c->wait_rx == NONE) {
		if (o.mode == M_CHURN) {
			conn_done(c);
			return false;
		}
		return true; /* slowloris, noread: until the server acts */
	}
	if (c->rx < c->wait_rx)
		return true;
	switch (o.mode) {
	case M_TRUNCATE:
		/* FIN inside a frame; then the server's EOF ends it. */
		shutdown(c->fd, SHUT_WR);
		c->st = C_SHUT;
		c->t_last = now;
		return true;
	case M_RESET:
		c->st = C_WAIT; /* the batch resets together */
		return true;
	case M_FLOOD:
		st.served++;
		c->st = C_WAIT;
		return true;
	default:
		conn_done(c);
		return false;
	}
}

static void on_event(struct mconn *c, uint32_t ev, uint64_t now)
{
	static uint8_t rbuf[256 * 1024];
	int err = 0;
	socklen_t elen = sizeof(err);
	ssize_t r;

	if (c->st == C_FREE)
		return;
	if (c->st == C_CONNECTING) {
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen);
		if (err || (ev & EPOLLERR)) {
			st.connect_errors++;
			conn_free(c);
			return;
		}
		connecting--;
		st.opened++;
		c->st = C_RUN;
		c->t_last = now;
		c->t_next = now;
		ep_set(c, false);
		if (!conn_step(c, now))
			return;
	}
	if ((ev & EPOLLIN) && c->reading) {
		for (;;) {
			r = recv(c->fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);
			if (r > 0) {
				c->t_last = now;
				if (check_rx(c, rbuf, (size_t)r))
					continue;
				conn_free(c);
				return;
			}
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			conn_server_closed(c);
			return;
		}
	} else if (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
		conn_server_closed(c);
		return;
	}
	if (ev & (EPOLLERR | EPOLLHUP)) {
		conn_server_closed(c);
		return;
	}
	conn_step(c, now);
}

static uint64_t batch_end; /* reset: the batch is started up to here */

static bool may_start(uint64_t now, uint64_t deadline)
{
	if (stopping || now >= deadline || got_signal)
		return false;
	if (o.count && started >= o.count)
		return false;
	if (o.mode == M_RESET) {
		/* A new batch once the last one is gone, all of it. */
		if (!active && started >= batch_end)
			batch_end = started + o.conns;
		if (started >= batch_end)
			return false;
	}
	return connecting < MAX_CONNECTING;
}

/* Every TICK_NS: timers, timeouts, batch phases, new connections. */
static void tick(uint64_t now, uint64_t deadline, uint64_t *hold_end)
{
	uint32_t i, waiting = 0, running = 0;

	for (i = 0; i < o.conns; i++) {
		struct mconn *c = &conns[i];

		if (c->st == C_FREE)
			continue;
		if (c->st == C_WAIT)
			waiting++;
		else
			running++;
		if ((o.mode == M_SLOWLORIS ||
		     (o.mode == M_NOREAD && o.paced)) &&
		    c->st == C_RUN && now >= c->t_next &&
		    c->send_to < c->total) {
			c->send_to += o.mode == M_SLOWLORIS ? 1 : o.chunk;
			c->t_next += o.interval_ns;
			if (!conn_step(c, now))
				continue;
		}
		/* Slowloris and noread may stall: the server chooses; a
		 * flood's connections wait for the others and the hold. */
		if (o.mode == M_SLOWLORIS || o.mode == M_NOREAD ||
		    c->st == C_WAIT ||
		    (o.mode == M_FLOOD && c->st == C_RUN && !c->send_to))
			continue;
		if (now - c->t_last > o.timeout_ns) {
			st.timeouts++;
			if (!o.quiet)
				fprintf(stderr,
					"%s: stream %llu: no progress for %.1f s (sent %zu, echoed %zu)\n",
					prog, (unsigned long long)c->stream,
					(double)o.timeout_ns / NS, c->tx,
					c->rx);
			conn_free(c);
		}
	}
	/* reset: once the whole batch waits, reset it at once. */
	if (o.mode == M_RESET && waiting && !running &&
	    (started >= batch_end || (o.count && started >= o.count) ||
	     stopping || now >= deadline)) {
		for (i = 0; i < o.conns; i++)
			if (conns[i].st == C_WAIT)
				conn_done(&conns[i]);
	}
	/* flood: all up, then the hold, then each kept one echoes a frame. */
	if (o.mode == M_FLOOD && started >= o.count && !connecting) {
		if (!*hold_end) {
			*hold_end = now + o.hold_ns;
		} else if (*hold_end != UINT64_MAX && now >= *hold_end) {
			*hold_end = UINT64_MAX;
			for (i = 0; i < o.conns; i++) {
				struct mconn *c = &conns[i];

				if (c->st != C_RUN)
					continue;
				c->send_to = c->len;
				c->t_last = now;
				conn_step(c, now);
			}
		} else if (*hold_end == UINT64_MAX && !running) {
			for (i = 0; i < o.conns; i++)
				if (conns[i].st == C_WAIT)
					conn_done(&conns[i]);
		}
	}
	for (i = 0; i < o.conns && may_start(now, deadline); i++) {
		if (conns[i].st != C_FREE)
			continue;
		conn_start(i);
	}
}

static void on_signal(int sig)
{
	(void)sig;
	got_signal = 1;
}

static void print_result(double secs)
{
	if (o.json) {
		printf("{\"tool\":\"ao-misbehave\",\"version\":\"%s\","
		       "\"mode\":\"%s\",\"framing\":\"%s\",\"port\":%u,"
		       "\"connections\":%u,\"started\":%llu,\"opened\":%llu,"
		       "\"connect_errors\":%llu,\"completed\":%llu,"
		       "\"cut\":%llu,\"server_closed\":%llu,\"lost\":%llu,"
		       "\"served\":%llu,\"still_open\":%llu,"
		       "\"timeouts\":%llu,\"wrong_conns\":%llu,"
		       "\"wrong_bytes\":%llu,\"tx_bytes\":%llu,"
		       "\"rx_bytes\":%llu,\"seconds\":%.3f}\n",
		       AO_VERSION, mode_names[o.mode], framing_name(o.framing),
		       o.port, o.conns, (unsigned long long)started,
		       (unsigned long long)st.opened,
		       (unsigned long long)st.connect_errors,
		       (unsigned long long)st.completed,
		       (unsigned long long)st.cut,
		       (unsigned long long)st.server_closed,
		       (unsigned long long)st.lost,
		       (unsigned long long)st.served,
		       (unsigned long long)st.still_open,
		       (unsigned long long)st.timeouts,
		       (unsigned long long)st.wrong_conns,
		       (unsigned long long)st.wrong_bytes,
		       (unsigned long long)st.tx_bytes,
		       (unsigned long long)st.rx_bytes, secs);
		return;
	}
	printf("%s: %s, %s framing, port %u, %u at once, %.2f s\n", prog,
	       mode_names[o.mode], framing_name(o.framing), o.port, o.conns,
	       secs);
	printf("  connections  %llu started, %llu opened, %llu connect errors\n",
	       (unsigned long long)started, (unsigned long long)st.opened,
	       (unsigned long long)st.connect_errors);
	printf("  ended        %llu as planned (%llu mid-stream)\n",
	       (unsigned long long)st.completed, (unsigned long long)st.cut);
	printf("  by server    %llu (%llu before the echo was complete)\n",
	       (unsigned long long)st.server_closed,
	       (unsigned long long)st.lost);
	if (o.mode == M_FLOOD)
		printf("  served       %llu\n", (unsigned long long)st.served);
	if (o.mode == M_SLOWLORIS || o.mode == M_NOREAD)
		printf("  still open   %llu\n",
		       (unsigned long long)st.still_open);
	printf("  bytes        %llu sent, %llu echoed and checked\n",
	       (unsigned long long)st.tx_bytes,
	       (unsigned long long)st.rx_bytes);
	printf("  wrong bytes  %llu in %llu connections; timeouts %llu\n",
	       (unsigned long long)st.wrong_bytes,
	       (unsigned long long)st.wrong_conns,
	       (unsigned long long)st.timeouts);
}

int main(int argc, char **argv)
{
	struct epoll_event evs[256];
	struct rlimit rl;
	uint64_t t0, now, deadline, next_tick, hold_end = 0, end_by;
	int n, i, rc = EXIT_OK;
	uint32_t s;

	cli_set_prog("ao-misbehave", argv[0]);
	parse_args(argc, argv);
	rng_state = o.seed;
	next_stream = o.seed << 32;

	/* A flood needs a descriptor per connection: raise the soft limit. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max &&
	    rl.rlim_cur < (rlim_t)o.conns + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	cli_catch_signals(on_signal);

	conns = calloc(o.conns, sizeof(*conns));
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!conns || epfd < 0) {
		fprintf(stderr, "%s: cannot set up: %s\n", prog,
			strerror(errno));
		return EXIT_CHECK;
	}
	for (s = 0; s < o.conns; s++)
		conns[s].fd = -1;
	t0 = now_ns();
	deadline = t0 + o.duration_ns;
	end_by = UINT64_MAX;
	next_tick = t0;
	for (;;) {
		now = now_ns();
		if (now >= next_tick) {
			tick(now, deadline, &hold_end);
			next_tick = now + TICK_NS;
		}
		if ((now >= deadline || got_signal) && !stopping) {
			stopping = true;
			/*
			 * Connections that cannot end by themselves end now;
			 * the others get --timeout to finish their plan.
			 */
			end_by = now + o.timeout_ns;
			for (s = 0; s < o.conns; s++) {
				struct mconn *c = &conns[s];

				if (c->st == C_FREE)
					continue;
				if (o.mode == M_SLOWLORIS ||
				    o.mode == M_NOREAD) {
					if (c->st != C_CONNECTING)
						st.still_open++;
					conn_free(c);
				}
			}
		}
		if (!active && (stopping || (o.count && started >= o.count)))
			break;
		if (now >= end_by) {
			for (s = 0; s < o.conns; s++)
				if (conns[s].st != C_FREE)
					conn_free(&conns[s]);
			break;
		}
		n = epoll_wait(epfd, evs, 256, (int)(TICK_NS / MS));
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "%s: epoll_wait: %s\n", prog,
				strerror(errno));
			return EXIT_CHECK;
		}
		now = now_ns();
		for (i = 0; i < n; i++)
			on_event(&conns[evs[i].data.u32], evs[i].events, now);
	}
	print_result((double)(now_ns() - t0) / NS);
	if (st.wrong_conns || st.timeouts || (o.strict && st.lost))
		rc = EXIT_CHECK;
	else if (!st.opened && started)
		rc = EXIT_CONNECT;
	free(conns);
	close(epfd);
	return rc;
}
