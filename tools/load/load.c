// SPDX-License-Identifier: MIT
/*
 * ao-load: a load generator for echo servers (ao-echo, and the baselines
 * in tools/bench/baseline/).
 *
 * Closed loop (the default): every connection keeps --pipeline requests in
 * flight and sends the next as soon as one is answered; latency runs from
 * the send.  Open loop (--rate): requests are due on a fixed schedule, the
 * total rate spread evenly over the connections, and latency runs from the
 * intended send time, so a server that stalls is charged for every request
 * it delayed, not just the one it sat on (the coordinated-omission
 * correction of wrk2).  A connection sends its due requests as soon as it
 * has room (at most --pipeline in flight).
 *
 * Every echoed byte is compared with what was sent, in order; a frame with
 * any wrong byte is a mismatch.  The connections are spread over --threads
 * workers, each running its share in one engine loop (epoll or io_uring).
 * The connections are opened first (evenly over --ramp), then the load runs
 * on all of them for --duration or until --requests are answered; at the
 * end the requests still in flight get --timeout to come back.
 *
 * With --ws each connection upgrades to WebSocket first (while the
 * connections are opened), then sends each request as one masked binary
 * frame; the server's frames are decoded and their payloads compared,
 * pings answered with a pong, a close frame is a connection error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/config.h>
#include "load.h"

#define NS 1000000000ull
#define CHECK_NS (100 * 1000000ull) /* timeouts, the stop flag */
#define MAX_LOG 8 /* connection messages per run, then a count */

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define BUMP(x, n) STORE(x, (x) + (n))

static volatile sig_atomic_t got_signal;
static int log_count; /* atomic */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s --port=PORT [options]\n"
		"Load an echo server and measure its latency.\n"
		"\n"
		"Target:\n"
		"  -a, --address=ADDR    server address: IPv4 or IPv6, as 127.0.0.1, ::1\n"
		"                        or [::1] (default 127.0.0.1)\n"
		"  -p, --port=PORT       server port (required)\n"
		"  -f, --framing=F       raw, len16 or len32 (2/4-byte length header in\n"
		"                        network byte order; default raw): as the server\n"
		"      --ws              WebSocket: an HTTP upgrade, then each request\n"
		"                        one masked binary message (ao-echo --framing=ws)\n"
		"      --ws-path=PATH    the upgrade's request target (default /)\n"
		"Load:\n"
		"  -c, --connections=N   connections (default 64)\n"
		"  -P, --pipeline=P      requests in flight per connection (default 1)\n"
		"  -R, --rate=R          open loop: R requests/s in total, latency from\n"
		"                        each request's intended send time (default:\n"
		"                        closed loop)\n"
		"  -s, --size=B          payload bytes per request (default 128; k = 1024)\n"
		"  -d, --duration=T      run for T (default 10s; ms, s, m, h)\n"
		"  -n, --requests=N      stop after N requests (k, M, G = 1000s); with\n"
		"                        --duration, whichever comes first\n"
		"      --ramp=T          open the connections evenly over T, before\n"
		"                        the load starts on all of them (default 0)\n"
		"      --timeout=T       connect timeout, request timeout, final drain\n"
		"                        (default 5s)\n"
		"Engine:\n"
		"  -e, --engine=E        epoll or uring (default epoll)\n"
		"  -t, --threads=N       worker threads (default 1)\n"
		"Output:\n"
		"      --json            the result as one JSON object on stdout\n"
		"      --hist=FILE       the latency distribution as CSV (see\n"
		"                        tools/plot/)\n"
		"      --progress=WHEN   a line a second: auto (on a terminal), always,\n"
		"                        never\n"
		"  -q, --quiet           --progress=never\n"
		"  -h, --help            this help\n"
		"  -V, --version         the version\n"
		"\n"
		"Exit status: 0 ok; 1 errors or mismatches during the run; 2 usage;\n"
		"3 could not connect.\n",
		prog);
}

enum {
	OPT_RAMP = 256,
	OPT_TIMEOUT,
	OPT_WS,
	OPT_WS_PATH,
};

static const struct option long_opts[] = {
	{ "address", required_argument, NULL, 'a' },
	{ "addr", required_argument, NULL, 'a' }, /* the old name */
	{ "port", required_argument, NULL, 'p' },
	{ "framing", required_argument, NULL, 'f' },
	{ "connections", required_argument, NULL, 'c' },
	{ "pipeline", required_argument, NULL, 'P' },
	{ "rate", required_argument, NULL, 'R' },
	{ "size", required_argument, NULL, 's' },
	{ "duration", required_argument, NULL, 'd' },
	{ "requests", required_argument, NULL, 'n' },
	{ "ramp", required_argument, NULL, OPT_RAMP },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "ws", no_argument, NULL, OPT_WS },
	{ "ws-path", required_argument, NULL, OPT_WS_PATH },
	{ "engine", required_argument, NULL, 'e' },
	{ "threads", required_argument, NULL, 't' },
	{ "json", no_argument, NULL, CLI_OPT_JSON },
	{ "hist", required_argument, NULL, CLI_OPT_HIST },
	{ "progress", required_argument, NULL, CLI_OPT_PROGRESS },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

void load_parse_args(int argc, char **argv, struct load_ctx *ctx)
{
	struct load_opts *o = &ctx->o;
	bool have_port = false, have_duration = false;
	int c;

	o->addr = "127.0.0.1";
	o->conns = 64;
	o->pipeline = 1;
	o->threads = 1;
	o->duration_ns = 10 * NS;
	o->timeout_ns = 5 * NS;
	o->size = 128;
	o->framing = FRAMING_RAW;
	o->engine = ENGINE_EPOLL;
	o->progress = -1;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:f:c:P:R:s:d:n:e:t:qhV",
				long_opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			o->addr = optarg;
			break;
		case 'p':
			o->port =
				(uint16_t)need_count("port", optarg, 1, 65535);
			have_port = true;
			break;
		case 'f':
			if (!strcmp(optarg, "ws"))
				o->ws = true;
			else if (framing_parse(optarg, &o->framing))
				bad_usage(
					"--framing: '%s' is not raw, len16 or len32",
					optarg);
			break;
		case 'c':
			o->conns = (uint32_t)need_count("connections", optarg,
							1, MAX_CONNS);
			break;
		case 'P':
			o->pipeline = (uint32_t)need_count("pipeline", optarg,
							   1, MAX_PIPELINE);
			break;
		case 'R':
			o->rate = need_count("rate", optarg, 1, 1000000000ull);
			break;
		case 's':
			o->size = (size_t)need_size("size", optarg, 1,
						    PAYLOAD_MAX);
			break;
		case 'd':
			o->duration_ns =
				need_duration("duration", optarg, 1000000);
			have_duration = true;
			break;
		case 'n':
			o->requests = need_count("requests", optarg, 1,
						 UINT64_MAX >> 8);
			break;
		case OPT_RAMP:
			o->ramp_ns = need_duration("ramp", optarg, 0);
			break;
		case OPT_TIMEOUT:
			o->timeout_ns =
				need_duration("timeout", optarg, 1000000);
			break;
		case OPT_WS:
			o->ws = true;
			break;
		case OPT_WS_PATH:
			o->ws_path = need_ws_path(optarg);
			break;
		case 'e':
			o->engine = need_engine_uring(optarg) ? ENGINE_URING :
								ENGINE_EPOLL;
			break;
		case 't':
			o->threads = (uint32_t)need_count("threads", optarg, 1,
							  MAX_THREADS);
			break;
		default: /* the report options; -h, -V, errors */
			if (!cli_report_option(c, optarg, &o->json,
					       &o->hist_path, &o->progress))
				cli_option(c, argv, usage);
		}
	}
	cli_no_operands(argc, argv);
	if (!have_port)
		bad_usage("--port is required");
	if (o->requests && !have_duration)
		o->duration_ns = 0;
	if (o->ws && o->framing != FRAMING_RAW)
		bad_usage("--ws: the framing is WebSocket's, not %s",
			  framing_name(o->framing));
	if (o->size > framing_max_payload(o->framing))
		bad_usage(
			"--size: %zu bytes do not fit %s framing (at most %zu)",
			o->size, framing_name(o->framing),
			framing_max_payload(o->framing));
	if (o->threads > o->conns)
		o->threads = o->conns;
	if (o->engine == ENGINE_URING)
		need_uring(engine_uring_probe());

	need_addr(o->addr, o->port, &ctx->sa, &ctx->salen);
}

/* ------------------------------------------------------------------ */
/* Messages */

void worker_error(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
}

void conn_log(struct worker *w, struct conn *c, const char *fmt, ...)
{
	int n = __atomic_fetch_add(&log_count, 1, __ATOMIC_RELAXED);
	char buf[200];
	va_list ap;

	(void)w;
	if (n >= MAX_LOG) {
		if (n == MAX_LOG)
			fprintf(stderr,
				"%s: further connection messages not shown\n",
				prog);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: connection %u: %s\n", prog, c->id, buf);
}

/* ------------------------------------------------------------------ */
/* Requests */

uint32_t conn_inflight(const struct worker *w, const struct conn *c)
{
	return (uint32_t)(c->n_queued - c->rx / w->frame_len);
}

static void conn_mark_dirty(struct worker *w, struct conn *c)
{
	eng_mark_dirty(&w->eng, &c->ec);
}

static void conn_queue(struct worker *w, struct conn *c, uint64_t t_start,
		       uint64_t now)
{
	const struct load_opts *o = &w->ctx->o;
	uint32_t slot = (uint32_t)(c->n_queued % o->pipeline);

	if (conn_inflight(w, c) == 0)
		c->last_progress = now;
	frame_build(c->echo + (size_t)slot * w->frame_len, o->framing, o->size,
		    (uint64_t)c->id << 40 | c->n_queued, t_start, w->pattern);
	if (c->ws)
		wsc_frame(c->ring + (size_t)slot * w->tx_len, WSC_BINARY,
			  c->echo + (size_t)slot * w->frame_len, o->size,
			  (uint32_t)wsc_rand(&w->rng));
	c->t_start[slot] = t_start;
	c->n_queued++;
	conn_mark_dirty(w, c);
}

/* Open loop: the intended send time of request g of the whole schedule. */
static uint64_t intended_ns(const struct load_ctx *ctx, uint64_t g)
{
	return ctx->t0 + (uint64_t)((unsigned __int128)g * NS / ctx->o.rate);
}

/* The global schedule number of this connection's request k. */
static uint64_t conn_sched(const struct load_ctx *ctx, const struct conn *c,
			   uint64_t k)
{
	return k * ctx->o.conns + c->id;
}

void conn_fill(struct worker *w, struct conn *c, uint64_t now)
{
	const struct load_ctx *ctx = w->ctx;
	uint32_t p = ctx->o.pipeline;

	if (c->dead)
		return;
	if (ctx->o.rate) {
		/* Once stopping, what is still due stays unsent (counted). */
		while (!w->stopping && c->n_queued < c->n_due &&
		       conn_inflight(w, c) < p)
			conn_queue(w, c,
				   intended_ns(ctx,
					       conn_sched(ctx, c, c->n_queued)),
				   now);
		return;
	}
	while (!w->stopping && w->issued < w->quota &&
	       conn_inflight(w, c) < p) {
		conn_queue(w, c, now, now);
		w->issued++;
	}
}

void conn_on_data(struct worker *w, struct conn *c, const uint8_t *p, size_t n,
		  uint64_t now)
{
	const struct load_opts *o = &w->ctx->o;
	size_t f = w->frame_len, off, chunk;
	uint64_t slot, lat, sent;

	if (c->dead)
		return;
	/* A WebSocket server echoes a message once it has all of it. */
	sent = c->ws ? c->tx / w->tx_len * w->frame_len : c->tx;
	if (c->rx + n > sent) {
		conn_log(w, c, "protocol error: %llu bytes more than were sent",
			 (unsigned long long)(c->rx + n - sent));
		conn_fail(w, c, -1);
		return;
	}
	BUMP(w->st.rx_bytes, n);
	c->last_progress = now;
	while (n) {
		off = (size_t)(c->rx % f);
		slot = (c->rx / f) % o->pipeline;
		chunk = f - off < n ? f - off : n;
		if (memcmp(c->echo + slot * f + off, p, chunk))
			c->bad = true;
		c->rx += chunk;
		p += chunk;
		n -= chunk;
		if (off + chunk < f)
			break;
		lat = now > c->t_start[slot] ? now - c->t_start[slot] : 0;
		hist_record(&w->hist, lat);
		BUMP(w->st.completed, 1);
		if (c->bad) {
			BUMP(w->st.mismatches, 1);
			if (LOAD(w->st.mismatches) <= 3)
				conn_log(w, c, "echo of request %llu differs",
					 (unsigned long long)(c->rx / f - 1));
			c->bad = false;
		}
	}
	conn_fill(w, c, now);
}

void conn_on_sent(struct worker *w, struct conn *c, size_t n)
{
	BUMP(w->st.tx_bytes, n);
	if (c->ws && c->ws->ctl_inflight) {
		c->ws->ctl_off += (uint8_t)n;
		c->ws->ctl_inflight = false;
		if (c->ws->ctl_off == c->ws->ctl_len)
			c->ws->ctl_off = c->ws->ctl_len = 0;
		/* The engines ask unsent() again after a send: the frames
		 * queued behind it follow (not a mark_dirty: this runs
		 * inside the flush, whose list holds each connection once). */
		return;
	}
	c->tx += n;
}

int conn_unsent(struct worker *w, struct conn *c, struct iovec *iov)
{
	size_t rs = (size_t)w->ctx->o.pipeline * w->tx_len;
	uint64_t end = c->n_queued * w->tx_len;
	size_t pos = (size_t)(c->tx % rs), len = (size_t)(end - c->tx);

	/* A pong or close goes out between two frames, never inside one. */
	if (c->ws && c->ws->ctl_len && !(c->tx % w->tx_len)) {
		c->ws->ctl_inflight = true;
		iov[0].iov_base = c->ws->ctl + c->ws->ctl_off;
		iov[0].iov_len = c->ws->ctl_len - c->ws->ctl_off;
		return 1;
	}
	if (!len)
		return 0;
	iov[0].iov_base = c->ring + pos;
	if (pos + len <= rs) {
		iov[0].iov_len = len;
		return 1;
	}
	iov[0].iov_len = rs - pos;
	iov[1].iov_base = c->ring;
	iov[1].iov_len = len - (rs - pos);
	return 2;
}

/* ------------------------------------------------------------------ */
/* WebSocket (--ws) */

struct ws_feed {
	struct worker *w;
	struct conn *c;
	uint64_t now;
};

static int ws_on_data(void *arg, const uint8_t *p, size_t n, bool first,
		      bool fin, int64_t msg_len)
{
	struct ws_feed *f = arg;

	(void)first, (void)fin, (void)msg_len;
	if (n)
		conn_on_data(f->w, f->c, p, n, f->now);
	return f->c->dead ? -ECONNABORTED : 0;
}

static int ws_on_ctl(void *arg, enum wsc_opcode op, const uint8_t *p, size_t n,
		     unsigned int code)
{
	struct ws_feed *f = arg;
	struct load_ws *ws = f->c->ws;

	if (op == WSC_CLOSE) {
		conn_log(f->w, f->c, "closed by the server (close code %u)",
			 code);
		return -EPIPE;
	}
	/* A ping gets its pong, unless a control frame is still going out
	 * (RFC 6455 5.5.3: answering the latest ping is enough). */
	if (op == WSC_PING && !ws->ctl_len) {
		ws->ctl_len =
			(uint8_t)wsc_frame(ws->ctl, WSC_PONG, p, n,
					   (uint32_t)wsc_rand(&f->w->rng));
		ws->ctl_off = 0;
		eng_mark_dirty(&f->w->eng, &f->c->ec);
	}
	return 0;
}

static const struct wsc_dec_ops ws_ops = { ws_on_data, ws_on_ctl };

void conn_on_ws_data(struct worker *w, struct conn *c, const uint8_t *p,
		     size_t n, uint64_t now)
{
	struct ws_feed f = { w, c, now };
	int r;

	if (c->dead)
		return;
	r = wsc_feed(&c->ws->dec, p, n, &ws_ops, &f);
	if (!r || c->dead)
		return;
	if (r != -EPIPE)
		conn_log(w, c, "bad frame from the server (%s, close code %u)",
			 strerror(-r), c->ws->dec.err_code);
	conn_fail(w, c, r == -EPIPE ? 0 : -1);
}

static const char *fail_reason(int err)
{
	if (err == 0)
		return "closed by the server";
	if (err < 0)
		return "protocol error";
	return strerror(err);
}

void conn_fail(struct worker *w, struct conn *c, int err)
{
	uint32_t lost;

	if (c->dead)
		return;
	lost = conn_inflight(w, c);
	c->dead = true;
	w->alive--;
	if (err != ETIMEDOUT) {
		BUMP(w->st.conn_errors, 1);
		if (err >= 0)
			conn_log(w, c, "%s (requests in flight lost: %u)",
				 fail_reason(err), lost);
	}
	/* Wakes any operation in flight; the engine closes the fd later. */
	shutdown(c->fd, SHUT_RDWR);
	if (w->on_dead)
		w->on_dead(&w->eng, &c->ec);
}

static void check_timeouts(struct worker *w, uint64_t now, bool all)
{
	uint32_t i, n;

	for (i = 0; i < w->nconns; i++) {
		struct conn *c = &w->conns[i];

		if (c->dead)
			continue;
		n = conn_inflight(w, c);
		if (!n)
			continue;
		if (all || now - c->last_progress > w->ctx->o.timeout_ns) {
			BUMP(w->st.timeouts, n);
			if (!all)
				conn_log(
					w, c,
					"no answer for %.1f s (requests in flight: %u)",
					(double)(now - c->last_progress) / 1e9,
					n);
			conn_fail(w, c, ETIMEDOUT);
		}
	}
}

static bool worker_idle(struct worker *w)
{
	uint32_t i;

	for (i = 0; i < w->nconns; i++) {
		struct conn *c = &w->conns[i];

		if (!c->dead && conn_inflight(w, c))
			return false;
	}
	return true;
}

uint64_t worker_tick(struct worker *w, uint64_t now)
{
	struct load_ctx *ctx = w->ctx;
	uint64_t wait = CHECK_NS, t;

	/*
	 * Open loop: every request due by now (and before the end) is
	 * scheduled before the stop is looked at, so a late tick neither
	 * loses requests nor adds any: what could not be sent is unsent.
	 */
	while (ctx->o.rate && !w->stopping && w->sched_j < w->quota) {
		struct conn *c = &w->conns[w->sched_j % w->nconns];
		uint64_t k = w->sched_j / w->nconns;

		t = intended_ns(ctx, conn_sched(ctx, c, k));
		if (t >= ctx->deadline)
			break;
		if (t > now) {
			if (t - now < wait)
				wait = t - now;
			break;
		}
		if (!c->dead) {
			c->n_due++;
			conn_fill(w, c, now);
		}
		w->sched_j++;
	}
	if (!w->stopping &&
	    (__atomic_load_n(&ctx->stop, __ATOMIC_ACQUIRE) ||
	     now >= ctx->deadline ||
	     (ctx->o.rate ? w->sched_j : w->issued) >= w->quota)) {
		w->stopping = true;
		w->drain_deadline = now + ctx->o.timeout_ns;
	}
	if (!w->stopping && ctx->deadline - now < wait)
		wait = ctx->deadline - now;
	if (now - w->last_check >= CHECK_NS || w->stopping) {
		if (now - w->last_check >= CHECK_NS) {
			w->last_check = now;
			check_timeouts(w, now, false);
		}
		if (w->stopping && now >= w->drain_deadline)
			check_timeouts(w, now, true);
		if (!w->alive || (w->stopping && worker_idle(w))) {
			w->t_end = now;
			return 0;
		}
	}
	if (w->stopping && w->drain_deadline - now < wait)
		wait = w->drain_deadline - now + 1;
	return wait ? wait : 1;
}

/* ------------------------------------------------------------------ */
/* Connections and workers */

static pthread_barrier_t barrier;
static int run_aborted; /* written by main before the barrier */

static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / NS),
			       .tv_nsec = (long)(t % NS) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static int conn_connect(struct worker *w, struct conn *c)
{
	struct load_ctx *ctx = w->ctx;
	char host[80];
	int err, st = 0;

	err = eng_connect((struct sockaddr *)&ctx->sa, ctx->salen,
			  ctx->o.timeout_ns, &c->fd);
	if (err || !ctx->o.ws)
		return err;
	snprintf(host, sizeof(host),
		 strchr(ctx->o.addr, ':') ? "[%s]:%u" : "%s:%u", ctx->o.addr,
		 ctx->o.port);
	err = wsc_handshake_fd(c->fd, host, ctx->o.ws_path, NULL, &w->rng,
			       ctx->o.timeout_ns, &st);
	if (err == -EPROTO)
		fprintf(stderr,
			"%s: connection %u: the server refused the "
			"WebSocket upgrade (HTTP status %d)\n",
			prog, c->id, st);
	return err == -EPROTO ? ECONNREFUSED : -err;
}

static int worker_setup(struct worker *w, uint64_t ramp_t0)
{
	const struct load_opts *o = &w->ctx->o;
	size_t rxlen = 0;
	uint32_t i;

	if (o->engine == ENGINE_URING) {
		rxlen = (size_t)o->pipeline * w->tx_len;
		rxlen = rxlen < 4096 ? 4096 : rxlen > 65536 ? 65536 : rxlen;
	}
	w->pattern = malloc(pattern_len(o->size));
	w->conns = calloc(w->nconns, sizeof(*w->conns));
	w->flush = calloc(w->nconns, sizeof(*w->flush));
	if (!w->pattern || !w->conns || !w->flush)
		return ENOMEM;
	pattern_fill(w->pattern, pattern_len(o->size), w->tid + 1);
	w->rng = wsc_seed(w->tid + 1);
	for (i = 0; i < w->nconns; i++) {
		struct conn *c = &w->conns[i];

		c->fd = -1;
		c->idx = i;
		c->id = i * o->threads + w->tid;
		c->ring = malloc((size_t)o->pipeline * w->tx_len);
		c->echo = c->ring;
		if (o->ws) {
			c->echo = malloc((size_t)o->pipeline * w->frame_len);
			c->ws = malloc(sizeof(*c->ws));
			if (!c->echo || !c->ws)
				return ENOMEM;
			memset(c->ws, 0, sizeof(*c->ws));
			wsc_dec_init(&c->ws->dec, 0);
		}
		c->t_start = calloc(o->pipeline, sizeof(*c->t_start));
		if (rxlen)
			c->rxbuf = malloc(rxlen);
		if (!c->ring || !c->t_start || (rxlen && !c->rxbuf))
			return ENOMEM;
	}
	for (i = 0; i < w->nconns; i++) {
		struct conn *c = &w->conns[i];
		int err;

		if (o->ramp_ns)
			sleep_until(ramp_t0 +
				    (uint64_t)((unsigned __int128)c->id *
					       o->ramp_ns / o->conns));
		if (__atomic_load_n(&w->ctx->stop, __ATOMIC_ACQUIRE))
			return EINTR;
		err = conn_connect(w, c);
		if (err)
			return err;
		w->connected++;
	}
	w->alive = w->nconns;
	return 0;
}

static void worker_free(struct worker *w)
{
	uint32_t i;

	engine_uring_free(w);
	for (i = 0; w->conns && i < w->nconns; i++) {
		if (w->conns[i].fd >= 0)
			close(w->conns[i].fd);
		if (w->conns[i].echo != w->conns[i].ring)
			free(w->conns[i].echo);
		free(w->conns[i].ring);
		free(w->conns[i].ws);
		free(w->conns[i].t_start);
		free(w->conns[i].rxbuf);
	}
	free(w->conns);
	free(w->flush);
	free(w->pattern);
}

struct worker_arg {
	struct worker *w;
	uint64_t ramp_t0;
};

static void *worker_main(void *arg)
{
	struct worker_arg *a = arg;
	struct worker *w = a->w;
	struct load_ctx *ctx = w->ctx;
	uint32_t i;
	int r;

	w->connect_err = worker_setup(w, a->ramp_t0);
	if (!w->connect_err && ctx->o.engine == ENGINE_URING &&
	    engine_uring_setup(w))
		w->connect_err = -1; /* w->err says why */
	__atomic_fetch_add(&ctx->ready, 1, __ATOMIC_RELEASE);
	pthread_barrier_wait(&barrier); /* main decided: run or abort */
	if (!run_aborted) {
		w->last_check = ctx->t0;
		if (ctx->o.engine == ENGINE_URING)
			r = engine_uring_run(w);
		else
			r = engine_epoll_run(w);
		if (r && !w->err[0])
			worker_error(w, "engine failed");
		if (!w->t_end)
			w->t_end = ao_now_ns();
		for (i = 0; ctx->o.rate && i < w->nconns; i++)
			w->st.unsent +=
				w->conns[i].n_due - w->conns[i].n_queued;
	}
	__atomic_fetch_add(&ctx->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Results */

struct totals {
	struct wstats st;
	struct hist hist;
};

static void collect(struct load_ctx *ctx, struct totals *t)
{
	unsigned int i;

	memset(&t->st, 0, sizeof(t->st));
	hist_init(&t->hist);
	for (i = 0; i < ctx->o.threads; i++) {
		struct wstats *s = &ctx->workers[i].st;

		t->st.completed += LOAD(s->completed);
		t->st.mismatches += LOAD(s->mismatches);
		t->st.conn_errors += LOAD(s->conn_errors);
		t->st.timeouts += LOAD(s->timeouts);
		t->st.tx_bytes += LOAD(s->tx_bytes);
		t->st.rx_bytes += LOAD(s->rx_bytes);
		t->st.unsent += LOAD(s->unsent);
		hist_merge(&t->hist, &ctx->workers[i].hist);
	}
}

static uint64_t errors_of(const struct wstats *s)
{
	return s->conn_errors + s->timeouts;
}

/* The first worker that failed to set up its engine says why. */
static void report_setup_error(const struct load_ctx *ctx)
{
	unsigned int i;

	for (i = 0; i < ctx->o.threads; i++) {
		if (ctx->workers[i].err[0]) {
			fprintf(stderr, "%s: thread %u: %s\n", prog, i,
				ctx->workers[i].err);
			return;
		}
	}
}

static void on_signal(int sig)
{
	got_signal = sig;
}

static void progress_line(struct load_ctx *ctx, uint64_t now,
			  uint64_t *last_done, uint64_t *last_t)
{
	struct totals *t = malloc(sizeof(*t));

	if (!t)
		return;
	collect(ctx, t);
	printf("%7.1fs %11.0f req/s  p99 %9.1f us  errors %llu\n",
	       (double)(now - ctx->t0) / 1e9,
	       (double)(t->st.completed - *last_done) * 1e9 /
		       (double)(now - *last_t),
	       (double)hist_percentile(&t->hist, 99.0) / 1e3,
	       (unsigned long long)(errors_of(&t->st) + t->st.mismatches));
	fflush(stdout);
	*last_done = t->st.completed;
	*last_t = now;
	free(t);
}

static const double pcts[] = { 50, 90, 99, 99.9 };
static const char *const pct_names[] = { "p50", "p90", "p99", "p99.9" };
#define NPCT (sizeof(pcts) / sizeof(pcts[0]))

static void print_text(const struct load_ctx *ctx, const struct totals *t,
		       double secs)
{
	const struct load_opts *o = &ctx->o;
	unsigned int i;

	printf("%s: %s port %u, %u connections x %u in flight, ", prog, o->addr,
	       o->port, o->conns, o->pipeline);
	if (o->rate)
		printf("open loop at %llu req/s", (unsigned long long)o->rate);
	else
		printf("closed loop");
	printf(", %zu-byte payload, %s framing, %s engine, %u thread%s\n",
	       o->size, o->ws ? "ws" : framing_name(o->framing),
	       o->engine == ENGINE_URING ? "uring" : "epoll", o->threads,
	       o->threads == 1 ? "" : "s");
	printf("  requests    %llu in %.2f s\n",
	       (unsigned long long)t->st.completed, secs);
	printf("  errors      %llu (mismatches %llu, connection errors %llu, "
	       "timeouts %llu)\n",
	       (unsigned long long)(errors_of(&t->st) + t->st.mismatches),
	       (unsigned long long)t->st.mismatches,
	       (unsigned long long)t->st.conn_errors,
	       (unsigned long long)t->st.timeouts);
	printf("  requests/s  %.0f\n", (double)t->st.completed / secs);
	if (o->rate)
		printf("  unsent      %llu (due, but the connections were full)\n",
		       (unsigned long long)t->st.unsent);
	printf("  MB/s        %.2f sent, %.2f received\n",
	       (double)t->st.tx_bytes / secs / 1e6,
	       (double)t->st.rx_bytes / secs / 1e6);
	printf("  latency     ");
	for (i = 0; i < NPCT; i++)
		printf("%s %.1f  ", pct_names[i],
		       (double)hist_percentile(&t->hist, pcts[i]) / 1e3);
	printf("max %.1f  mean %.1f us\n", (double)t->hist.max / 1e3,
	       hist_mean(&t->hist) / 1e3);
}

static void print_json(const struct load_ctx *ctx, const struct totals *t,
		       double secs, bool interrupted)
{
	const struct load_opts *o = &ctx->o;
	unsigned int i;

	printf("{\"tool\":\"ao-load\",\"version\":\"%s\",\"addr\":\"%s\","
	       "\"port\":%u,\"engine\":\"%s\",\"framing\":\"%s\","
	       "\"size\":%zu,\"connections\":%u,\"pipeline\":%u,"
	       "\"threads\":%u,\"mode\":\"%s\",\"rate\":%llu,",
	       AO_VERSION, o->addr, o->port,
	       o->engine == ENGINE_URING ? "uring" : "epoll",
	       o->ws ? "ws" : framing_name(o->framing), o->size, o->conns,
	       o->pipeline, o->threads, o->rate ? "open" : "closed",
	       (unsigned long long)o->rate);
	printf("\"requests\":%llu,\"errors\":%llu,\"mismatches\":%llu,"
	       "\"conn_errors\":%llu,\"timeouts\":%llu,\"interrupted\":%s,"
	       "\"seconds\":%.6f,\"requests_per_sec\":%.1f,"
	       "\"tx_bytes\":%llu,\"rx_bytes\":%llu,\"mb_per_sec\":%.3f,"
	       "\"unsent\":%llu,",
	       (unsigned long long)t->st.completed,
	       (unsigned long long)(errors_of(&t->st) + t->st.mismatches),
	       (unsigned long long)t->st.mismatches,
	       (unsigned long long)t->st.conn_errors,
	       (unsigned long long)t->st.timeouts,
	       interrupted ? "true" : "false", secs,
	       (double)t->st.completed / secs,
	       (unsigned long long)t->st.tx_bytes,
	       (unsigned long long)t->st.rx_bytes,
	       (double)t->st.rx_bytes / secs / 1e6,
	       (unsigned long long)t->st.unsent);
	for (i = 0; i < NPCT; i++)
		printf("\"%s_ns\":%llu,", pct_names[i],
		       (unsigned long long)hist_percentile(&t->hist, pcts[i]));
	printf("\"max_ns\":%llu,\"min_ns\":%llu,\"mean_ns\":%.1f}\n",
	       (unsigned long long)t->hist.max,
	       (unsigned long long)(t->hist.total ? t->hist.min : 0),
	       hist_mean(&t->hist));
}

int load_main(int argc, char **argv)
{
	static struct load_ctx ctx;
	struct worker_arg *args;
	sigset_t block, old;
	pthread_t *tids;
	struct totals *t;
	uint64_t now, deadline, next_line, last_done = 0, last_t, t_end;
	uint32_t i, connected = 0;
	int err = 0, rc = EXIT_OK;
	bool progress, interrupted = false;
	double secs;

	cli_set_prog("ao-load", argv[0]);
	load_parse_args(argc, argv, &ctx);
	progress = cli_progress(ctx.o.progress, ctx.o.json);
	ao_clock_calibrate();

	cli_catch_signals(on_signal);

	ctx.workers = calloc(ctx.o.threads, sizeof(*ctx.workers));
	tids = calloc(ctx.o.threads, sizeof(*tids));
	args = calloc(ctx.o.threads, sizeof(*args));
	t = malloc(sizeof(*t));
	if (!ctx.workers || !tids || !args || !t) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return EXIT_ERRORS;
	}
	pthread_barrier_init(&barrier, NULL, ctx.o.threads + 1);
	/* Signals go to this thread only. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	now = ao_now_ns();
	for (i = 0; i < ctx.o.threads; i++) {
		struct worker *w = &ctx.workers[i];

		w->ctx = &ctx;
		w->tid = i;
		w->nconns = ctx.o.conns / ctx.o.threads +
			    (i < ctx.o.conns % ctx.o.threads);
		w->frame_len = framing_hdr_len(ctx.o.framing) + ctx.o.size;
		w->tx_len = ctx.o.ws ? wsc_hdr_len(ctx.o.size) + ctx.o.size :
				       w->frame_len;
		w->quota = UINT64_MAX;
		if (ctx.o.requests)
			w->quota = ctx.o.requests / ctx.o.threads +
				   (i < ctx.o.requests % ctx.o.threads);
		hist_init(&w->hist);
		args[i].w = w;
		args[i].ramp_t0 = now;
		err = pthread_create(&tids[i], NULL, worker_main, &args[i]);
		if (err) {
			fprintf(stderr, "%s: cannot start thread: %s\n", prog,
				strerror(err));
			exit(EXIT_ERRORS);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	/* Wait for the connections, watching for a signal meanwhile. */
	while (__atomic_load_n(&ctx.ready, __ATOMIC_ACQUIRE) < ctx.o.threads) {
		if (got_signal)
			__atomic_store_n(&ctx.stop, 1, __ATOMIC_RELEASE);
		sleep_until(ao_now_ns() + 20000000);
	}
	for (i = 0; i < ctx.o.threads; i++) {
		connected += ctx.workers[i].connected;
		if (ctx.workers[i].connect_err && !err)
			err = ctx.workers[i].connect_err;
	}
	if (err || got_signal) {
		run_aborted = 1;
		if (err == -1)
			report_setup_error(&ctx);
		else if (err == ENOMEM)
			fprintf(stderr, "%s: out of memory\n", prog);
		else if (err && err != EINTR)
			fprintf(stderr,
				"%s: cannot connect to %s port %u: %s (%u of %u connections up)\n",
				prog, ctx.o.addr, ctx.o.port, strerror(err),
				connected, ctx.o.conns);
		else
			fprintf(stderr, "%s: interrupted while connecting\n",
				prog);
		rc = err > 0 && err != ENOMEM && err != EINTR ? EXIT_CONNECT :
								EXIT_ERRORS;
	}
	ctx.t0 = ao_now_ns();
	ctx.deadline = ctx.o.duration_ns ? ctx.t0 + ctx.o.duration_ns :
					   UINT64_MAX;
	pthread_barrier_wait(&barrier);
	now = ctx.t0;
	if (run_aborted) {
		for (i = 0; i < ctx.o.threads; i++)
			pthread_join(tids[i], NULL);
		goto out;
	}

	deadline = ctx.deadline;
	next_line = ctx.t0 + NS;
	last_t = ctx.t0;
	while (__atomic_load_n(&ctx.done, __ATOMIC_ACQUIRE) < ctx.o.threads) {
		uint64_t until;

		now = ao_now_ns();
		until = now + CHECK_NS;
		if (progress && next_line < until)
			until = next_line;
		if (deadline < until)
			until = deadline;
		sleep_until(until);
		now = ao_now_ns();
		if (got_signal && !interrupted) {
			interrupted = true;
			/* A second signal ends the program. */
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
		}
		if (interrupted || now >= deadline)
			__atomic_store_n(&ctx.stop, 1, __ATOMIC_RELEASE);
		if (progress && now >= next_line) {
			progress_line(&ctx, now, &last_done, &last_t);
			next_line += NS;
		}
	}
	t_end = ctx.t0;
	for (i = 0; i < ctx.o.threads; i++) {
		pthread_join(tids[i], NULL);
		if (ctx.workers[i].t_end > t_end)
			t_end = ctx.workers[i].t_end;
	}
	for (i = 0; i < ctx.o.threads; i++) {
		if (ctx.workers[i].err[0]) {
			fprintf(stderr, "%s: thread %u: %s\n", prog, i,
				ctx.workers[i].err);
			rc = EXIT_ERRORS;
		}
	}
	collect(&ctx, t);
	secs = (double)(t_end - ctx.t0) / 1e9;
	if (secs <= 0)
		secs = 1e-9;
	if (ctx.o.json)
		print_json(&ctx, t, secs, interrupted);
	else
		print_text(&ctx, t, secs);
	if (interrupted && !ctx.o.json)
		printf("  (interrupted)\n");
	if (ctx.o.hist_path && hist_write_file(&t->hist, ctx.o.hist_path, prog))
		rc = EXIT_ERRORS;
	if (errors_of(&t->st) || t->st.mismatches)
		rc = EXIT_ERRORS;
out:
	for (i = 0; i < ctx.o.threads; i++)
		worker_free(&ctx.workers[i]);
	pthread_barrier_destroy(&barrier);
	free(t);
	free(args);
	free(tids);
	free(ctx.workers);
	return rc;
}
