// SPDX-License-Identifier: MIT
/*
 * ao-bots: a swarm of players for ao-arena, that plays it, verifies it
 * and measures it.
 *
 * --players bots are spread over --threads threads; each thread runs its
 * bots in one loop of the shared client engines (epoll or io_uring, the
 * ones ao-load runs on: tools/common/engine.h).  The bots connect evenly
 * over --ramp; each says hello, joins any room, then sends an input every
 * 1/--rate seconds (default: one per tick), a chat line every --chat on
 * average and a ping every --ping.  A thread keeps its bots' timers in a
 * binary heap keyed by each bot's next timer.
 *
 * Every snapshot and chat line is checked by the bot that gets it
 * (bot.c); any failure makes the exit status 1.  Measured: the time from
 * sending input k to the first snapshot that shows seq >= k (the
 * input-to-visible latency), snapshots missed (gaps in the tick numbers
 * a bot should have seen) and their inter-arrival jitter, ping round
 * trips, messages and bytes per second.
 *
 * --churn: bots leave their room and join another, or hang up and
 * connect again, every --churn on average.  --stall=N: N bots stop
 * reading once in a room (after --stall-after); at the end of the run
 * they read again, and must find the server closed them.
 *
 * --ws: each bot upgrades its connection to WebSocket before its hello
 * (the request goes out first, the hello once the 101 is checked), then
 * sends each message as one masked binary frame and takes one message
 * per binary message it gets: the same bots, checks and measures over
 * the other transport.
 *
 * After --duration the bots stop sending and get --drain to see their
 * last inputs and chat lines come back; what has not by then is lost.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include <aorta/config.h>
#include "../common/parse.h"
#include "../common/cli.h"
#include "bots.h"

#define NS 1000000000ull
#define MS 1000000ull
#define CHECK_NS (100 * MS) /* overdue checks, the stop flag */
#define MAX_PLAYERS 1000000u
#define MAX_THREADS 256u
#define CROSS_SLOTS (1u << 20)
#define NO_HEAP UINT32_MAX
/* The receive buffer of a bot that stops reading: a client's kernel
 * buffers are bounded (Linux grows an unread loopback socket's to
 * tcp_rmem's maximum, 32 MiB here, which hides the stall from any
 * server for minutes). */
#define STALL_RCVBUF (16 * 1024)

enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1, /* verification failures or errors */
	EXIT_USAGE = CLI_EXIT_USAGE,
	EXIT_CONNECT = 3, /* not one bot could connect */
};

struct bots_worker {
	union { /* the engine's state */
		struct eng eng;
		struct {
			ENG_MEMBERS
		};
	};
	struct bots_ctx *ctx;
	unsigned int tid;
	uint32_t nbots;
	struct bot *bots;
	struct bot **heap; /* by wake, earliest first */
	uint32_t nheap;
	struct bot **zombies; /* killed, fd not yet closed */
	uint32_t nzombies;
	uint8_t *rxbufs; /* uring: BOT_RXBUF per bot */
	uint64_t t_stop, t_end, last_check;
	bool stopping; /* past t_stop */
	struct bot_meas m;
	struct bot_env env; /* every bot of this worker points here */
	int connect_err; /* errno of the first failed connect, or 0 */
};

static pthread_barrier_t barrier;

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s --port=PORT [options]\n"
		"Play ao-arena with a swarm of bots; verify and measure what they see.\n"
		"\n"
		"Target:\n"
		"  -a, --address=ADDR    server address (default 127.0.0.1; IPv4 or IPv6,\n"
		"                        ::1 or [::1])\n"
		"  -p, --port=PORT       server port (required, or --servers)\n"
		"      --servers=LIST    HOST:PORT,HOST:PORT,...: the nodes of an\n"
		"                        arena cluster; bot i connects to node i mod n,\n"
		"                        a bot whose node closes it connects to the\n"
		"                        next, room_lost is answered by a join\n"
		"Bots:\n"
		"      --players=N       bots, one connection each (default 100)\n"
		"  -R, --rate=R          inputs per second per bot (default 0: the\n"
		"                        server's tick rate)\n"
		"      --jitter          each input at a random time from half a\n"
		"                        period to one and a half after the last\n"
		"      --chat=T          mean time between a bot's chat lines (default\n"
		"                        5s; 0: no chat)\n"
		"      --ping=T          time between a bot's pings (default 1s; 0: none)\n"
		"  -d, --duration=T      play and measure for T (default 10s; ms, s, m, h)\n"
		"      --ramp=T          connect the bots evenly over T (default 1s)\n"
		"      --warmup=T        after the ramp, play T unmeasured (default 0)\n"
		"      --drain=T         after the run, wait up to T for the last inputs\n"
		"                        and chat lines to come back (default 2s)\n"
		"      --timeout=T       connect timeout (default 5s)\n"
		"      --churn=T         bots leave and rejoin, or hang up and connect\n"
		"                        again, every T on average (default 0: never)\n"
		"      --stall=N         N bots stop reading once in a room; at the end\n"
		"                        they must find themselves closed (default 0;\n"
		"                        their SO_RCVBUF is 16 KiB)\n"
		"      --stall-after=T   how long after joining they stop (default 1s)\n"
		"      --seed=N          the bots' random seed (default 1)\n"
		"      --ws              WebSocket: an HTTP upgrade, then one arena\n"
		"                        message per binary message\n"
		"      --ws-path=PATH    the upgrade's request target (default /)\n"
		"Engine:\n"
		"  -e, --engine=E        epoll or uring (default epoll)\n"
		"  -t, --threads=N       threads (default 1)\n"
		"Output:\n"
		"      --json            the result as one JSON object on stdout\n"
		"      --hist=FILE       the input-to-visible latency distribution as\n"
		"                        CSV (see tools/plot/)\n"
		"      --progress=WHEN   a line a second: auto (on a terminal), always,\n"
		"                        never\n"
		"  -q, --quiet           --progress=never\n"
		"  -h, --help            this help\n"
		"  -V, --version         the version\n"
		"\n"
		"Exit status: 0 ok; 1 verification failures or errors; 2 usage;\n"
		"3 could not connect.\n",
		prog);
}

enum {
	OPT_CHAT = 256,
	OPT_PING,
	OPT_RAMP,
	OPT_WARMUP,
	OPT_DRAIN,
	OPT_TIMEOUT,
	OPT_CHURN,
	OPT_STALL,
	OPT_STALL_AFTER,
	OPT_SEED,
	OPT_WS,
	OPT_WS_PATH,
	OPT_SERVERS,
	OPT_JITTER,
};

static const struct option long_opts[] = {
	{ "address", required_argument, NULL, 'a' },
	{ "addr", required_argument, NULL, 'a' }, /* the old name */
	{ "port", required_argument, NULL, 'p' },
	{ "players", required_argument, NULL, 'n' },
	{ "rate", required_argument, NULL, 'R' },
	{ "jitter", no_argument, NULL, OPT_JITTER },
	{ "chat", required_argument, NULL, OPT_CHAT },
	{ "ping", required_argument, NULL, OPT_PING },
	{ "duration", required_argument, NULL, 'd' },
	{ "ramp", required_argument, NULL, OPT_RAMP },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "drain", required_argument, NULL, OPT_DRAIN },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "churn", required_argument, NULL, OPT_CHURN },
	{ "stall", required_argument, NULL, OPT_STALL },
	{ "stall-after", required_argument, NULL, OPT_STALL_AFTER },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "ws", no_argument, NULL, OPT_WS },
	{ "ws-path", required_argument, NULL, OPT_WS_PATH },
	{ "servers", required_argument, NULL, OPT_SERVERS },
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

/* --servers: HOST:PORT,... (an IPv6 host in brackets). */
static void parse_servers(struct bots_ctx *ctx, const char *list)
{
	char *dup = strdup(list), *tok, *save = NULL;
	uint32_t n = 1;

	for (const char *q = list; *q; q++)
		n += *q == ',';
	ctx->servers = calloc(n, sizeof(*ctx->servers));
	ctx->server_lens = calloc(n, sizeof(*ctx->server_lens));
	if (!dup || !ctx->servers || !ctx->server_lens)
		bad_usage("--servers: out of memory");
	n = 0;
	for (tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');
		uint16_t port;

		if (!colon)
			bad_usage("--servers: '%s' is not HOST:PORT", tok);
		*colon = 0;
		port = (uint16_t)need_count("servers", colon + 1, 1, 65535);
		if (tok[0] == '[' && colon[-1] == ']') {
			colon[-1] = 0;
			tok++;
		}
		need_addr(tok, port, &ctx->servers[n], &ctx->server_lens[n]);
		n++;
	}
	if (!n)
		bad_usage("--servers: no server");
	ctx->o.nservers = n;
	ctx->sa = ctx->servers[0];
	ctx->salen = ctx->server_lens[0];
	free(dup);
}

static void parse_args(int argc, char **argv, struct bots_ctx *ctx)
{
	struct bots_opts *o = &ctx->o;
	bool have_port = false;
	const char *servers = NULL;
	int c;

	o->addr = "127.0.0.1";
	o->players = 100;
	o->threads = 1;
	o->chat_ns = 5 * NS;
	o->ping_ns = NS;
	o->duration_ns = 10 * NS;
	o->ramp_ns = NS;
	o->drain_ns = 2 * NS;
	o->timeout_ns = 5 * NS;
	o->stall_after_ns = NS;
	o->seed = 1;
	o->engine = ENG_EPOLL;
	o->progress = -1;
	o->check_cross = true;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:R:d:e:t:qhV", long_opts,
				NULL)) != -1) {
		switch (c) {
		case 'a':
			o->addr = optarg;
			break;
		case 'p':
			o->port =
				(uint16_t)need_count("port", optarg, 1, 65535);
			have_port = true;
			break;
		case OPT_SERVERS:
			servers = optarg;
			have_port = true;
			break;
		case 'n':
			o->players = (uint32_t)need_count("players", optarg, 1,
							  MAX_PLAYERS);
			break;
		case 'R':
			o->rate = need_count("rate", optarg, 0, 1000);
			break;
		case OPT_CHAT:
			o->chat_ns = need_duration("chat", optarg, 0);
			if (o->chat_ns && o->chat_ns < 10 * MS)
				bad_usage("--chat: '%s' is below 10ms", optarg);
			break;
		case OPT_PING:
			o->ping_ns = need_duration("ping", optarg, 0);
			if (o->ping_ns && o->ping_ns < 10 * MS)
				bad_usage("--ping: '%s' is below 10ms", optarg);
			break;
		case 'd':
			o->duration_ns = need_duration("duration", optarg, MS);
			break;
		case OPT_RAMP:
			o->ramp_ns = need_duration("ramp", optarg, 0);
			break;
		case OPT_WARMUP:
			o->warmup_ns = need_duration("warmup", optarg, 0);
			break;
		case OPT_DRAIN:
			o->drain_ns = need_duration("drain", optarg, 0);
			break;
		case OPT_TIMEOUT:
			o->timeout_ns = need_duration("timeout", optarg, MS);
			break;
		case OPT_CHURN:
			o->churn_ns = need_duration("churn", optarg, 0);
			if (o->churn_ns && o->churn_ns < 10 * MS)
				bad_usage("--churn: '%s' is below 10ms",
					  optarg);
			break;
		case OPT_STALL:
			o->stall = (uint32_t)need_count("stall", optarg, 0,
							MAX_PLAYERS);
			break;
		case OPT_STALL_AFTER:
			o->stall_after_ns =
				need_duration("stall-after", optarg, 0);
			break;
		case OPT_WS:
			o->ws = true;
			break;
		case OPT_WS_PATH:
			o->ws_path = need_ws_path(optarg);
			break;
		case OPT_SEED:
			o->seed = (uint32_t)need_count("seed", optarg, 0,
						       UINT32_MAX);
			break;
		case OPT_JITTER:
			o->jitter = true;
			break;
		case 'e':
			o->engine = need_engine_uring(optarg) ? ENG_URING :
								ENG_EPOLL;
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
	if (o->stall > o->players)
		bad_usage("--stall: %u bots of %u", o->stall, o->players);
	if (o->threads > o->players)
		o->threads = o->players;
	if (o->engine == ENG_URING)
		need_uring(eng_uring_probe());
	if (servers) {
		parse_servers(ctx, servers);
		return;
	}
	need_addr(o->addr, o->port, &ctx->sa, &ctx->salen);
}

/* ------------------------------------------------------------------ */
/* What bot.c needs from us (the worker's struct bot_env) */

static void bots_mark_dirty(struct bot *b)
{
	if (b->connected && !b->dead)
		eng_mark_dirty(&b->w->eng, &b->ec);
}

/* ------------------------------------------------------------------ */
/* Timers: a heap of bots by their next timer */

static uint64_t bot_wake(const struct bot *b)
{
	const uint64_t t[] = { b->t_connect, b->t_input, b->t_chat, b->t_ping,
			       b->t_churn,   b->t_join,	 b->t_stall };
	uint64_t w = 0;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i] && (!w || t[i] < w))
			w = t[i];
	return w;
}

static void heap_put(struct bots_worker *w, uint32_t i, struct bot *b)
{
	w->heap[i] = b;
	b->heap_idx = i;
}

static void heap_up(struct bots_worker *w, uint32_t i)
{
	struct bot *b = w->heap[i];

	while (i) {
		uint32_t p = (i - 1) / 2;

		if (w->heap[p]->wake <= b->wake)
			break;
		heap_put(w, i, w->heap[p]);
		i = p;
	}
	heap_put(w, i, b);
}

static void heap_down(struct bots_worker *w, uint32_t i)
{
	struct bot *b = w->heap[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m = i;
		uint64_t mw = b->wake;

		if (l < w->nheap && w->heap[l]->wake < mw) {
			m = l;
			mw = w->heap[l]->wake;
		}
		if (l + 1 < w->nheap && w->heap[l + 1]->wake < mw)
			m = l + 1;
		if (m == i)
			break;
		heap_put(w, i, w->heap[m]);
		i = m;
	}
	heap_put(w, i, b);
}

/* After a bot's timers changed: put it where its next one says. */
static void heap_fix(struct bots_worker *w, struct bot *b)
{
	uint64_t wake = bot_wake(b);

	if (b->heap_idx == NO_HEAP) {
		if (!wake)
			return;
		b->wake = wake;
		w->heap[w->nheap] = b;
		b->heap_idx = w->nheap++;
		heap_up(w, b->heap_idx);
		return;
	}
	if (!wake) {
		uint32_t i = b->heap_idx;
		struct bot *last = w->heap[--w->nheap];

		b->heap_idx = NO_HEAP;
		if (last != b) {
			heap_put(w, i, last);
			heap_down(w, i);
			heap_up(w, last->heap_idx);
		}
		return;
	}
	b->wake = wake;
	heap_up(w, b->heap_idx);
	heap_down(w, b->heap_idx);
}

/* ------------------------------------------------------------------ */
/* Connections */

static struct bots_worker *to_worker(struct eng *e)
{
	return container_of(e, struct bots_worker, eng);
}

static struct bot *to_bot(struct eng_conn *c)
{
	return container_of(c, struct bot, ec);
}

/* ------------------------------------------------------------------ */
/* WebSocket (--ws): the transport under bot.c's messages */

/* The upgrade request into the emptied send queue; bot_start() waits
 * for the answer (a client sends nothing more before it). */
static void bot_ws_request(struct bots_worker *w, struct bot *b)
{
	const struct bots_opts *o = &w->ctx->o;
	struct bot_ws *ws = b->ws;
	char req[512], host[80];
	int n, i;

	wsc_dec_init(&ws->dec, 0);
	ws->upgraded = false;
	ws->head_len = ws->msg_len = 0;
	wsc_key(&ws->rng, ws->key);
	snprintf(host, sizeof(host), strchr(o->addr, ':') ? "[%s]:%u" : "%s:%u",
		 o->addr, o->port);
	n = wsc_request(req, sizeof(req), host, o->ws_path, ws->key, NULL);
	b->tx_sent = b->tx_end = 0;
	for (i = 0; i < n; i++)
		b->tx[i] = (uint8_t)req[i];
	b->tx_end = n > 0 ? (uint64_t)n : 0;
	bots_mark_dirty(b);
}

struct bot_ws_feed {
	struct bot *b;
	uint64_t now;
};

static int bot_ws_data(void *arg, const uint8_t *p, size_t n, bool first,
		       bool fin, int64_t msg_len)
{
	struct bot_ws_feed *f = arg;
	struct bot_ws *ws = f->b->ws;

	(void)msg_len;
	if (first && fin) { /* the usual case: no copy */
		bot_on_frame(f->b, p, n, f->now);
		return 0;
	}
	if (first)
		ws->msg_len = 0;
	if (ws->msg_len + n > ws->msg_cap) {
		size_t cap = (ws->msg_len + n) * 2;
		uint8_t *np = realloc(ws->msg, cap);

		if (!np)
			return -ENOMEM;
		ws->msg = np;
		ws->msg_cap = cap;
	}
	memcpy(ws->msg + ws->msg_len, p, n);
	ws->msg_len += n;
	if (fin)
		bot_on_frame(f->b, ws->msg, ws->msg_len, f->now);
	return 0;
}

static int bot_ws_ctl(void *arg, enum wsc_opcode op, const uint8_t *p, size_t n,
		      unsigned int code)
{
	struct bot_ws_feed *f = arg;

	(void)code;
	if (op == WSC_CLOSE)
		return -EPIPE;
	if (op == WSC_PING)
		bot_queue_ws(f->b, WSC_PONG, p, n);
	return 0;
}

static const struct wsc_dec_ops bot_ws_ops = { bot_ws_data, bot_ws_ctl };

static void bots_on_error(struct eng *e, struct eng_conn *c, int err);
static void bot_hangup(struct bots_worker *w, struct bot *b,
		       uint64_t reconnect);

/* Bytes of a WebSocket: the 101's head first, then frames. */
static void bot_ws_on_data(struct bots_worker *w, struct bot *b,
			   const uint8_t *p, size_t n, uint64_t now)
{
	struct bot_ws_feed f = { b, now };
	struct bot_ws *ws = b->ws;
	int r, st;

	if (!ws->upgraded) {
		size_t take = sizeof(ws->head) - ws->head_len;

		take = take < n ? take : n;
		memcpy(ws->head + ws->head_len, p, take);
		ws->head_len += take;
		r = wsc_response(ws->head, ws->head_len, ws->key, NULL, &st);
		if (!r)
			return;
		if (r < 0) {
			bot_fail(b, F_PROTOCOL,
				 "the WebSocket upgrade failed (%s, HTTP "
				 "status %d)",
				 strerror(-r), st);
			bot_hangup(w, b, 0);
			return;
		}
		/* What followed the head in this read is frames. */
		p += (size_t)r - (ws->head_len - take);
		n = ws->head_len - (size_t)r;
		ws->upgraded = true;
		bot_start(b, now);
	}
	r = wsc_feed(&ws->dec, p, n, &bot_ws_ops, &f);
	if (!r || !b->connected)
		return;
	if (r == -EPIPE) {
		bots_on_error(&w->eng, &b->ec, 0); /* a close frame */
		return;
	}
	bot_fail(b, F_PROTOCOL, "a bad WebSocket frame (%s, close code %u)",
		 strerror(-r), ws->dec.err_code);
	bot_hangup(w, b, 0);
}

static void bot_connect(struct bots_worker *w, struct bot *b, uint64_t now)
{
	struct bots_ctx *ctx = w->ctx;
	uint32_t k = ctx->o.nservers ? b->server % ctx->o.nservers : 0;
	int err = eng_connect_rcvbuf(
		(struct sockaddr *)(ctx->o.nservers ? &ctx->servers[k] :
						      &ctx->sa),
		ctx->o.nservers ? ctx->server_lens[k] : ctx->salen,
		ctx->o.timeout_ns, b->stall ? STALL_RCVBUF : 0, &b->fd);

	if (!err && eng_add(&w->eng, &b->ec))
		err = errno;
	if (err) {
		if (b->fd >= 0)
			close(b->fd);
		b->fd = -1;
		/* Counted here, told once at the end (every bot would say
		 * the same).  Across nodes, a node gone is a failover. */
		if (ctx->o.nservers)
			BOT_BUMP(w->m.stat[S_FAILOVERS], 1);
		else
			BOT_BUMP(w->m.fail[F_CONNECT], 1);
		if (!w->connect_err)
			w->connect_err = err;
		/* Try again in a second, while the run lasts (across
		 * nodes: the next one, at once). */
		if (ctx->o.nservers) {
			b->server++;
			if (now + 50 * MS < w->t_stop)
				b->t_connect = now + 50 * MS;
		} else if (now + NS < w->t_stop) {
			b->t_connect = now + NS;
		}
		return;
	}
	b->connected = true;
	if (b->ws)
		bot_ws_request(w, b);
	else
		bot_start(b, now);
}

/* End the bot's connection; it connects again at reconnect (0: never). */
static void bot_hangup(struct bots_worker *w, struct bot *b, uint64_t reconnect)
{
	if (!b->connected)
		return;
	eng_conn_kill(&w->eng, &b->ec);
	b->connected = false;
	b->state = reconnect ? B_IDLE : B_DONE;
	b->t_input = b->t_chat = b->t_ping = b->t_churn = b->t_join = 0;
	b->t_stall = 0;
	b->t_connect = reconnect;
	w->zombies[w->nzombies++] = b;
	heap_fix(w, b);
}

/* A killed bot's fd closes once the engine has nothing in flight on it;
 * its reconnect waits for that. */
static void reap_zombies(struct bots_worker *w)
{
	uint32_t i = 0;

	while (i < w->nzombies) {
		struct bot *b = w->zombies[i];

		if (eng_conn_busy(&b->ec)) {
			i++;
			continue;
		}
		close(b->fd);
		b->fd = -1;
		w->zombies[i] = w->zombies[--w->nzombies];
	}
}

static bool bot_is_zombie(const struct bots_worker *w, const struct bot *b)
{
	for (uint32_t i = 0; i < w->nzombies; i++)
		if (w->zombies[i] == b)
			return true;
	return false;
}

static uint8_t next_dir(struct bot *b)
{
	/* Walk a direction for a while: bots reach the walls. */
	if (!b->dir_left) {
		b->dir = (uint8_t)(bot_rnd(b) % AP_DIR_NR);
		b->dir_left = (uint8_t)(10 + bot_rnd(b) % 90);
	}
	b->dir_left--;
	return b->dir;
}

static void bot_timers(struct bots_worker *w, struct bot *b, uint64_t now)
{
	const struct bots_opts *o = &w->ctx->o;
	bool live = now < w->t_stop;

	if (b->t_connect && now >= b->t_connect) {
		b->t_connect = 0;
		if (live && !bot_is_zombie(w, b))
			bot_connect(w, b, now);
		else if (live)
			b->t_connect = now + MS;
	}
	if (b->t_input && now >= b->t_input) {
		uint64_t period = o->rate ? NS / o->rate : b->period_ns;

		b->t_input = 0;
		if (live && b->state == B_ROOM) {
			bot_send_input(b, next_dir(b), now);
			/* Fixed rate, but never a burst to catch up.  With
			 * --jitter, anywhere from half a period to one and a
			 * half (the same rate on average): the wait for the
			 * server's tick then varies from input to input, and
			 * the latency's percentiles stand on every input,
			 * not on one fixed phase a bot. */
			b->t_input = now + period;
			if (o->jitter)
				b->t_input += (uint64_t)bot_rnd(b) % period -
					      period / 2;
		}
	}
	if (b->t_chat && now >= b->t_chat) {
		b->t_chat = 0;
		if (live && b->state == B_ROOM) {
			bot_send_chat(b, now);
			b->t_chat = now + o->chat_ns / 2 +
				    (uint64_t)(((unsigned __int128)o->chat_ns *
						bot_rnd(b)) >>
					       32);
		}
	}
	if (b->t_ping && now >= b->t_ping) {
		uint8_t p[AP_LEN_PING];

		b->t_ping = 0;
		if (live && b->connected) {
			if (bot_queue(b, p, ap_enc_ping(p, now))) {
				b->ping_sent = now;
				BOT_BUMP(w->m.stat[S_PINGS], 1);
			}
			b->t_ping = now + o->ping_ns;
		}
	}
	if (b->t_churn && now >= b->t_churn) {
		b->t_churn = 0;
		if (live && b->state == B_ROOM) {
			uint64_t pause = 20 * MS + bot_rnd(b) % (200 * MS);

			if (bot_rnd(b) % 2) {
				bot_leave(b, now);
				b->t_join = now + pause;
			} else {
				BOT_BUMP(w->m.stat[S_RECONNECTS], 1);
				bot_hangup(w, b, now + pause);
				return;
			}
		}
	}
	if (b->t_join && now >= b->t_join) {
		b->t_join = 0;
		if (live && b->state == B_LEAVING)
			bot_join(b, now);
	}
	if (b->t_stall && now >= b->t_stall) {
		b->t_stall = 0;
		if (b->connected && !b->stalled) {
			b->stalled = true;
			eng_conn_rx(&w->eng, &b->ec, false);
			BOT_BUMP(w->m.stat[S_STALLED], 1);
		}
	}
}

/* ------------------------------------------------------------------ */
/* The engine's callbacks */

static void bots_on_data(struct eng *e, struct eng_conn *c, const uint8_t *p,
			 size_t n, uint64_t now)
{
	struct bots_worker *w = to_worker(e);
	struct bot *b = to_bot(c);

	if (w->m.on)
		BOT_BUMP(w->m.stat[S_BYTES_IN], n);
	if (b->ws)
		bot_ws_on_data(w, b, p, n, now);
	else
		bot_on_data(b, p, n, now);
	heap_fix(w, b);
}

static void bots_on_sent(struct eng *e, struct eng_conn *c, size_t n)
{
	struct bot *b = to_bot(c);

	b->tx_sent += n;
	if (to_worker(e)->m.on)
		BOT_BUMP(to_worker(e)->m.stat[S_BYTES_OUT], n);
}

static int bots_unsent(struct eng *e, struct eng_conn *c, struct iovec *iov)
{
	struct bot *b = to_bot(c);
	size_t pos = (size_t)(b->tx_sent & (BOT_TX - 1));
	size_t len = (size_t)(b->tx_end - b->tx_sent);

	(void)e;
	if (!len)
		return 0;
	iov[0].iov_base = b->tx + pos;
	if (pos + len <= BOT_TX) {
		iov[0].iov_len = len;
		return 1;
	}
	iov[0].iov_len = BOT_TX - pos;
	iov[1].iov_base = b->tx;
	iov[1].iov_len = len - (BOT_TX - pos);
	return 2;
}

static void bots_on_error(struct eng *e, struct eng_conn *c, int err)
{
	struct bots_worker *w = to_worker(e);
	struct bot *b = to_bot(c);

	if (b->stalled) {
		BOT_BUMP(w->m.stat[S_STALL_CLOSED], 1);
	} else if (w->ctx->o.nservers && now_ns() < w->t_stop) {
		/* Its node died: the next one, as a player would. */
		uint64_t now = now_ns();

		BOT_BUMP(w->m.stat[S_FAILOVERS], 1);
		if (b->state == B_ROOM || b->state == B_JOINING ||
		    b->state == B_LEAVING)
			bot_lost_room(b, now);
		b->server++;
		bot_hangup(w, b, now + 20 * MS);
		return;
	} else {
		bot_fail(b, F_CLOSED, "%s",
			 err ? strerror(err) : "closed by the server");
	}
	bot_hangup(w, b, 0);
}

/* The end of the run: what has not come back is lost; stalled bots must
 * have been closed. */
static void finish(struct bots_worker *w, uint64_t now)
{
	for (uint32_t i = 0; i < w->nbots; i++) {
		struct bot *b = &w->bots[i];

		if (!b->connected)
			continue;
		if (b->stalled) {
			bot_fail(b, F_STALL_OPEN,
				 "stopped reading and was never closed");
		} else {
			bot_check_overdue(b, now + INPUT_LOST_NS);
		}
		bot_hangup(w, b, 0);
	}
}

static uint64_t bots_tick(struct eng *e, uint64_t now)
{
	struct bots_worker *w = to_worker(e);
	uint64_t wait = CHECK_NS;
	uint32_t i;

	if (__atomic_load_n(&w->ctx->stop, __ATOMIC_ACQUIRE) &&
	    w->t_stop > now) {
		w->t_stop = now;
		w->t_end = now + w->ctx->o.drain_ns;
	}
	w->m.on = now >= w->ctx->t_measure && now < w->t_stop;
	if (!w->stopping && now >= w->t_stop) {
		/* Stalled bots read again: they must reach the close. */
		w->stopping = true;
		for (i = 0; i < w->nbots; i++)
			if (w->bots[i].stalled && w->bots[i].connected)
				eng_conn_rx(&w->eng, &w->bots[i].ec, true);
	}
	while (w->nheap && w->heap[0]->wake <= now) {
		struct bot *b = w->heap[0];

		bot_timers(w, b, now);
		heap_fix(w, b);
	}
	if (now - w->last_check >= CHECK_NS) {
		w->last_check = now;
		for (i = 0; i < w->nbots; i++)
			if (w->bots[i].connected)
				bot_check_overdue(&w->bots[i], now);
	}
	if (w->nzombies)
		reap_zombies(w);
	if (now >= w->t_end) {
		finish(w, now);
		if (w->nzombies)
			reap_zombies(w);
		if (!w->nzombies)
			return 0;
		return MS; /* operations in flight end first */
	}
	if (w->nheap && w->heap[0]->wake - now < wait)
		wait = w->heap[0]->wake - now;
	if (w->t_end - now < wait)
		wait = w->t_end - now;
	if (w->nzombies && wait > MS)
		wait = MS;
	return wait ? wait : 1;
}

static const struct eng_ops bots_ops = {
	.on_data = bots_on_data,
	.on_sent = bots_on_sent,
	.unsent = bots_unsent,
	.on_error = bots_on_error,
	.tick = bots_tick,
};

/* ------------------------------------------------------------------ */
/* Threads */

static int worker_setup(struct bots_worker *w)
{
	const struct bots_opts *o = &w->ctx->o;
	uint32_t i;

	w->bots = calloc(w->nbots, sizeof(*w->bots));
	w->heap = calloc(w->nbots, sizeof(*w->heap));
	w->zombies = calloc(w->nbots, sizeof(*w->zombies));
	if (o->engine == ENG_URING)
		w->rxbufs = malloc((size_t)w->nbots * BOT_RXBUF);
	if (!w->bots || !w->heap || !w->zombies ||
	    (o->engine == ENG_URING && !w->rxbufs)) {
		eng_error(&w->eng, "out of memory");
		return -1;
	}
	hist_init(&w->m.latency);
	hist_init(&w->m.jitter);
	hist_init(&w->m.rtt);
	hist_init(&w->m.outage);
	w->env.meas = &w->m;
	w->env.ctx = w->ctx;
	w->env.mark_dirty = bots_mark_dirty;
	w->ops = &bots_ops;
	w->rxlen = BOT_RXBUF;
	for (i = 0; i < w->nbots; i++) {
		struct bot *b = &w->bots[i];

		b->w = w;
		b->env = &w->env;
		b->fd = -1;
		b->id = i * o->threads + w->tid;
		b->heap_idx = NO_HEAP;
		/* The --stall bots spread evenly over the ids (and so over
		 * the rooms, which fill in connect order). */
		b->stall = (uint64_t)(b->id + 1) * o->stall / o->players !=
			   (uint64_t)b->id * o->stall / o->players;
		if (w->rxbufs)
			b->rxbuf = w->rxbufs + (size_t)i * BOT_RXBUF;
		if (o->ws) {
			b->ws = calloc(1, sizeof(*b->ws));
			if (!b->ws) {
				eng_error(&w->eng, "out of memory");
				return -1;
			}
			b->ws->rng = wsc_seed(b->id + 1);
		}
		bot_reset(b);
	}
	return eng_setup(&w->eng, o->engine, w->nbots);
}

static void worker_free(struct bots_worker *w)
{
	uint32_t i;

	eng_free(&w->eng);
	for (i = 0; w->bots && i < w->nbots; i++) {
		if (w->bots[i].fd >= 0)
			close(w->bots[i].fd);
		free(w->bots[i].part);
		if (w->bots[i].ws)
			free(w->bots[i].ws->msg);
		free(w->bots[i].ws);
	}
	free(w->bots);
	free(w->heap);
	free(w->zombies);
	free(w->rxbufs);
	free(w->flush);
}

static int setup_failed; /* written before the barrier */

static void *worker_main(void *arg)
{
	struct bots_worker *w = arg;
	struct bots_ctx *ctx = w->ctx;
	uint32_t i;

	if (worker_setup(w))
		__atomic_store_n(&setup_failed, 1, __ATOMIC_RELAXED);
	pthread_barrier_wait(&barrier);
	pthread_barrier_wait(&barrier); /* main has set t0 */
	if (__atomic_load_n(&setup_failed, __ATOMIC_RELAXED))
		return NULL;
	w->t_stop = ctx->t_stop;
	w->t_end = ctx->t_end;
	w->last_check = ctx->t0;
	for (i = 0; i < w->nbots; i++) {
		struct bot *b = &w->bots[i];

		b->server = b->id;
		b->t_connect = ctx->t0 + 1 +
			       (uint64_t)((unsigned __int128)b->id *
					  ctx->o.ramp_ns / ctx->o.players);
		heap_fix(w, b);
	}
	if (eng_run(&w->eng) && !w->err[0])
		eng_error(&w->eng, "engine failed");
	__atomic_fetch_add(&ctx->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Results */

static void collect(struct bots_ctx *ctx, struct bot_meas *t)
{
	unsigned int i, k;

	memset(t->stat, 0, sizeof(t->stat));
	memset(t->fail, 0, sizeof(t->fail));
	hist_init(&t->latency);
	hist_init(&t->jitter);
	hist_init(&t->rtt);
	hist_init(&t->outage);
	for (i = 0; i < ctx->o.threads; i++) {
		struct bot_meas *m = &ctx->workers[i].m;

		for (k = 0; k < S_NR; k++)
			t->stat[k] += BOT_LOAD(m->stat[k]);
		for (k = 0; k < F_NR; k++)
			t->fail[k] += BOT_LOAD(m->fail[k]);
		hist_merge(&t->latency, &m->latency);
		hist_merge(&t->jitter, &m->jitter);
		hist_merge(&t->rtt, &m->rtt);
		hist_merge(&t->outage, &m->outage);
	}
}

static uint64_t failures(const struct bot_meas *t)
{
	uint64_t n = 0;

	for (int k = 0; k < F_NR; k++)
		n += t->fail[k];
	return n;
}

static double share(const struct bot_meas *t)
{
	return t->stat[S_SNAPS_EXPECTED] ?
		       (double)t->stat[S_SNAPS] /
			       (double)t->stat[S_SNAPS_EXPECTED] :
		       0.0;
}

static void progress_line(struct bots_ctx *ctx, uint64_t now,
			  struct bot_meas *last, uint64_t *last_t)
{
	struct bot_meas *t = malloc(sizeof(*t));
	double dt = (double)(now - *last_t) / 1e9;

	if (!t)
		return;
	collect(ctx, t);
	printf("%7.1fs  connects %llu  joins %llu  snaps/s %.0f  "
	       "inputs/s %.0f  latency p99 %.1f ms  delivered %.4f  "
	       "failures %llu\n",
	       (double)(now - ctx->t0) / 1e9,
	       (unsigned long long)t->stat[S_CONNECTS],
	       (unsigned long long)t->stat[S_JOINS],
	       (double)(t->stat[S_SNAPS] - last->stat[S_SNAPS]) / dt,
	       (double)(t->stat[S_INPUTS] - last->stat[S_INPUTS]) / dt,
	       (double)hist_percentile(&t->latency, 99.0) / 1e6, share(t),
	       (unsigned long long)failures(t));
	fflush(stdout);
	memcpy(last->stat, t->stat, sizeof(t->stat));
	*last_t = now;
	free(t);
}

static const double pcts[] = { 50, 90, 99, 99.9 };
static const char *const pct_names[] = { "p50", "p90", "p99", "p99.9" };
#define NPCT (sizeof(pcts) / sizeof(pcts[0]))

static const char *engine_name(enum eng_kind k)
{
	return k == ENG_URING ? "uring" : "epoll";
}

static void print_text(const struct bots_ctx *ctx, const struct bot_meas *t,
		       double secs, const char *status)
{
	const struct bots_opts *o = &ctx->o;
	bool any = false;
	unsigned int i;

	printf("%s: %s port %u, %u players, %s engine, %u thread%s, "
	       "%.2f s measured\n",
	       prog, o->addr, o->port, o->players, engine_name(o->engine),
	       o->threads, o->threads == 1 ? "" : "s", secs);
	printf("  sessions    %llu connects, %llu joins, %llu leaves, %llu "
	       "reconnects\n",
	       (unsigned long long)t->stat[S_CONNECTS],
	       (unsigned long long)t->stat[S_JOINS],
	       (unsigned long long)t->stat[S_LEAVES],
	       (unsigned long long)t->stat[S_RECONNECTS]);
	printf("  snapshots   %llu of %llu expected (%.4f delivered), %llu "
	       "missed, %.0f/s\n",
	       (unsigned long long)t->stat[S_SNAPS],
	       (unsigned long long)t->stat[S_SNAPS_EXPECTED], share(t),
	       (unsigned long long)t->stat[S_SNAP_GAPS],
	       (double)t->stat[S_SNAPS] / secs);
	printf("  inputs      %llu sent, %llu seen applied, %llu not sent "
	       "(queue full)\n",
	       (unsigned long long)t->stat[S_INPUTS],
	       (unsigned long long)t->stat[S_INPUTS_SEEN],
	       (unsigned long long)t->stat[S_INPUTS_BLOCKED]);
	printf("  latency     input to visible: ");
	for (i = 0; i < NPCT; i++)
		printf("%s %.2f  ", pct_names[i],
		       (double)hist_percentile(&t->latency, pcts[i]) / 1e6);
	printf("max %.2f ms\n", (double)t->latency.max / 1e6);
	printf("  jitter      p50 %.2f  p99 %.2f  max %.2f ms; ping rtt p50 "
	       "%.3f  p99 %.3f ms\n",
	       (double)hist_percentile(&t->jitter, 50) / 1e6,
	       (double)hist_percentile(&t->jitter, 99) / 1e6,
	       (double)t->jitter.max / 1e6,
	       (double)hist_percentile(&t->rtt, 50) / 1e6,
	       (double)hist_percentile(&t->rtt, 99) / 1e6);
	printf("  chat        %llu lines sent, %llu received\n",
	       (unsigned long long)t->stat[S_CHATS],
	       (unsigned long long)t->stat[S_CHAT_LINES]);
	printf("  traffic     %.0f msgs/s in, %.0f out; %.2f MB/s in, %.2f "
	       "out\n",
	       (double)t->stat[S_MSGS_IN] / secs,
	       (double)t->stat[S_MSGS_OUT] / secs,
	       (double)t->stat[S_BYTES_IN] / secs / 1e6,
	       (double)t->stat[S_BYTES_OUT] / secs / 1e6);
	if (o->stall)
		printf("  stalled     %llu stopped reading, %llu closed by the "
		       "server\n",
		       (unsigned long long)t->stat[S_STALLED],
		       (unsigned long long)t->stat[S_STALL_CLOSED]);
	if (o->nservers)
		printf("  failover    %u nodes; %llu closed by a node and "
		       "reconnected, %llu room_lost and %llu room_full "
		       "answered by a join, %llu "
		       "inputs and chat lines lost with a room; out of a room "
		       "%llu times: p50 %.1f  p99 %.1f  max %.1f ms\n",
		       o->nservers, (unsigned long long)t->stat[S_FAILOVERS],
		       (unsigned long long)t->stat[S_ROOM_LOST],
		       (unsigned long long)t->stat[S_ROOM_FULL],
		       (unsigned long long)t->stat[S_FAILOVER_LOST],
		       (unsigned long long)t->outage.total,
		       (double)hist_percentile(&t->outage, 50) / 1e6,
		       (double)hist_percentile(&t->outage, 99) / 1e6,
		       (double)(t->outage.total ? t->outage.max : 0) / 1e6);
	printf("  failures    %llu", (unsigned long long)failures(t));
	for (i = 0; i < F_NR; i++) {
		if (!t->fail[i])
			continue;
		printf("%s%s %llu", any ? ", " : " (", bot_fail_name(i),
		       (unsigned long long)t->fail[i]);
		any = true;
	}
	printf("%s\n", any ? ")" : "");
	printf("  status      %s\n", status);
}

static void print_json(const struct bots_ctx *ctx, const struct bot_meas *t,
		       double secs, const char *status)
{
	const struct bots_opts *o = &ctx->o;
	unsigned int i;

	printf("{\"tool\":\"ao-bots\",\"version\":\"%s\",\"addr\":\"%s\","
	       "\"port\":%u,\"players\":%u,\"threads\":%u,\"engine\":\"%s\","
	       "\"seconds\":%.6f,\"warmup_s\":%.3f,\"churn_s\":%.3f,"
	       "\"stall\":%u,\"ws\":%s,",
	       AO_VERSION, o->addr, o->port, o->players, o->threads,
	       engine_name(o->engine), secs, (double)o->warmup_ns / 1e9,
	       (double)o->churn_ns / 1e9, o->stall, o->ws ? "true" : "false");
	printf("\"connects\":%llu,\"welcomes\":%llu,\"joins\":%llu,"
	       "\"leaves\":%llu,\"reconnects\":%llu,\"snapshots\":%llu,"
	       "\"snapshots_expected\":%llu,\"delivered\":%.6f,"
	       "\"snap_gaps\":%llu,\"snapshots_per_s\":%.1f,\"inputs\":%llu,"
	       "\"inputs_seen\":%llu,\"inputs_blocked\":%llu,\"chats\":%llu,"
	       "\"chat_lines\":%llu,\"pings\":%llu,\"pongs\":%llu,",
	       (unsigned long long)t->stat[S_CONNECTS],
	       (unsigned long long)t->stat[S_WELCOMES],
	       (unsigned long long)t->stat[S_JOINS],
	       (unsigned long long)t->stat[S_LEAVES],
	       (unsigned long long)t->stat[S_RECONNECTS],
	       (unsigned long long)t->stat[S_SNAPS],
	       (unsigned long long)t->stat[S_SNAPS_EXPECTED], share(t),
	       (unsigned long long)t->stat[S_SNAP_GAPS],
	       (double)t->stat[S_SNAPS] / secs,
	       (unsigned long long)t->stat[S_INPUTS],
	       (unsigned long long)t->stat[S_INPUTS_SEEN],
	       (unsigned long long)t->stat[S_INPUTS_BLOCKED],
	       (unsigned long long)t->stat[S_CHATS],
	       (unsigned long long)t->stat[S_CHAT_LINES],
	       (unsigned long long)t->stat[S_PINGS],
	       (unsigned long long)t->stat[S_PONGS]);
	for (i = 0; i < NPCT; i++)
		printf("\"latency_%s_ns\":%llu,", pct_names[i],
		       (unsigned long long)hist_percentile(&t->latency,
							   pcts[i]));
	printf("\"latency_max_ns\":%llu,\"latency_mean_ns\":%.1f,"
	       "\"jitter_p50_ns\":%llu,\"jitter_p99_ns\":%llu,"
	       "\"jitter_max_ns\":%llu,\"rtt_p50_ns\":%llu,"
	       "\"rtt_p99_ns\":%llu,",
	       (unsigned long long)t->latency.max, hist_mean(&t->latency),
	       (unsigned long long)hist_percentile(&t->jitter, 50),
	       (unsigned long long)hist_percentile(&t->jitter, 99),
	       (unsigned long long)t->jitter.max,
	       (unsigned long long)hist_percentile(&t->rtt, 50),
	       (unsigned long long)hist_percentile(&t->rtt, 99));
	printf("\"msgs_in_per_s\":%.1f,\"msgs_out_per_s\":%.1f,"
	       "\"bytes_in_per_s\":%.1f,\"bytes_out_per_s\":%.1f,"
	       "\"errors_rx\":%llu,\"stalled\":%llu,\"stall_closed\":%llu,"
	       "\"failover\":{\"nodes\":%u,\"reconnects\":%llu,"
	       "\"room_lost\":%llu,\"room_full\":%llu,"
	       "\"lost_in_flight\":%llu,\"outages\":%llu,"
	       "\"outage_p50_ns\":%llu,\"outage_p99_ns\":%llu,"
	       "\"outage_max_ns\":%llu},"
	       "\"failures\":%llu,\"fail\":{",
	       (double)t->stat[S_MSGS_IN] / secs,
	       (double)t->stat[S_MSGS_OUT] / secs,
	       (double)t->stat[S_BYTES_IN] / secs,
	       (double)t->stat[S_BYTES_OUT] / secs,
	       (unsigned long long)t->stat[S_ERRORS_RX],
	       (unsigned long long)t->stat[S_STALLED],
	       (unsigned long long)t->stat[S_STALL_CLOSED], o->nservers,
	       (unsigned long long)t->stat[S_FAILOVERS],
	       (unsigned long long)t->stat[S_ROOM_LOST],
	       (unsigned long long)t->stat[S_ROOM_FULL],
	       (unsigned long long)t->stat[S_FAILOVER_LOST],
	       (unsigned long long)t->outage.total,
	       (unsigned long long)hist_percentile(&t->outage, 50),
	       (unsigned long long)hist_percentile(&t->outage, 99),
	       (unsigned long long)(t->outage.total ? t->outage.max : 0),
	       (unsigned long long)failures(t));
	for (i = 0; i < F_NR; i++)
		printf("%s\"%s\":%llu", i ? "," : "", bot_fail_name(i),
		       (unsigned long long)t->fail[i]);
	printf("},\"status\":\"%s\"}\n", status);
}

int main(int argc, char **argv)
{
	static const int sigs[] = { SIGINT, SIGTERM, 0 };
	static struct bots_ctx ctx;
	struct bot_meas *t, *last;
	struct signalfd_siginfo si;
	pthread_t *tids;
	uint64_t now, next_line, last_t, t_end;
	const char *status = "ok";
	int sfd, err, connect_err = 0, rc = EXIT_OK;
	bool progress, interrupted = false;
	uint32_t i;
	double secs;

	cli_set_prog("ao-bots", argv[0]);
	parse_args(argc, argv, &ctx);
	progress = cli_progress(ctx.o.progress, ctx.o.json);
	ao_clock_calibrate();

	/* Signals wait for the signalfd, in every thread (see ao-echo). */
	sfd = cli_signalfd(sigs);
	if (sfd < 0)
		return EXIT_FAILED;

	ctx.cross_mask = CROSS_SLOTS - 1;
	ctx.cross = calloc(CROSS_SLOTS, sizeof(*ctx.cross));
	ctx.workers = calloc(ctx.o.threads, sizeof(*ctx.workers));
	tids = calloc(ctx.o.threads, sizeof(*tids));
	t = malloc(sizeof(*t));
	last = calloc(1, sizeof(*last));
	if (!ctx.cross || !ctx.workers || !tids || !t || !last) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return EXIT_FAILED;
	}
	pthread_barrier_init(&barrier, NULL, ctx.o.threads + 1);
	for (i = 0; i < ctx.o.threads; i++) {
		struct bots_worker *w = &ctx.workers[i];

		w->ctx = &ctx;
		w->tid = i;
		w->nbots = ctx.o.players / ctx.o.threads +
			   (i < ctx.o.players % ctx.o.threads);
		err = pthread_create(&tids[i], NULL, worker_main, w);
		if (err) {
			fprintf(stderr, "%s: cannot start thread: %s\n", prog,
				strerror(err));
			return EXIT_FAILED;
		}
	}
	pthread_barrier_wait(&barrier); /* the threads are set up */
	ctx.t0 = ao_now_ns();
	ctx.t_measure = ctx.t0 + ctx.o.ramp_ns + ctx.o.warmup_ns;
	ctx.t_stop = ctx.t_measure + ctx.o.duration_ns;
	ctx.t_end = ctx.t_stop + ctx.o.drain_ns;
	pthread_barrier_wait(&barrier);
	if (setup_failed) {
		for (i = 0; i < ctx.o.threads; i++) {
			pthread_join(tids[i], NULL);
			if (ctx.workers[i].err[0] && rc == EXIT_OK) {
				fprintf(stderr, "%s: thread %u: %s\n", prog, i,
					ctx.workers[i].err);
				rc = EXIT_FAILED;
			}
		}
		return EXIT_FAILED;
	}

	next_line = ctx.t0 + NS;
	last_t = ctx.t0;
	while (__atomic_load_n(&ctx.done, __ATOMIC_ACQUIRE) < ctx.o.threads) {
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		int timeout = 100;

		now = ao_now_ns();
		if (progress && next_line > now &&
		    (next_line - now) / MS < (uint64_t)timeout)
			timeout = (int)((next_line - now) / MS) + 1;
		if (poll(&pfd, 1, timeout) > 0 &&
		    read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			if (interrupted) {
				fprintf(stderr, "%s: interrupted twice\n",
					prog);
				_exit(EXIT_FAILED);
			}
			/* The threads stop sending and drain. */
			interrupted = true;
			__atomic_store_n(&ctx.stop, 1, __ATOMIC_RELEASE);
		}
		now = ao_now_ns();
		if (progress && now >= next_line) {
			progress_line(&ctx, now, last, &last_t);
			next_line += NS;
		}
	}
	for (i = 0; i < ctx.o.threads; i++)
		pthread_join(tids[i], NULL);
	t_end = ao_now_ns();
	for (i = 0; i < ctx.o.threads; i++) {
		if (ctx.workers[i].err[0]) {
			fprintf(stderr, "%s: thread %u: %s\n", prog, i,
				ctx.workers[i].err);
			rc = EXIT_FAILED;
			status = "engine error";
		}
	}
	collect(&ctx, t);
	/* Rates over the measured window (an interrupt may cut it). */
	if (t_end > ctx.t_stop)
		t_end = ctx.t_stop;
	secs = t_end > ctx.t_measure ? (double)(t_end - ctx.t_measure) / 1e9 :
				       0;
	if (secs <= 0)
		secs = 1e-9;
	if (failures(t)) {
		rc = EXIT_FAILED;
		status = "verification failed";
	}
	for (i = 0; i < ctx.o.threads && !connect_err; i++)
		connect_err = ctx.workers[i].connect_err;
	if (connect_err && !t->stat[S_CONNECTS]) {
		/* Not one bot got in: the reason, and no summary of zeros. */
		fprintf(stderr, "%s: cannot connect to %s port %u: %s\n", prog,
			ctx.o.addr, ctx.o.port, strerror(connect_err));
		if (ctx.o.json)
			printf("{\"tool\":\"ao-bots\",\"version\":\"%s\","
			       "\"addr\":\"%s\",\"port\":%u,\"status\":"
			       "\"could not connect\",\"error\":\"%s\","
			       "\"connects\":0,\"failures\":%llu}\n",
			       AO_VERSION, ctx.o.addr, ctx.o.port,
			       strerror(connect_err),
			       (unsigned long long)t->fail[F_CONNECT]);
		rc = EXIT_CONNECT;
		goto out;
	}
	if (connect_err)
		fprintf(stderr, "%s: %llu connects failed; the first: %s\n",
			prog, (unsigned long long)t->fail[F_CONNECT],
			strerror(connect_err));
	if (interrupted && rc == EXIT_OK)
		status = "interrupted";
	if (ctx.o.json)
		print_json(&ctx, t, secs, status);
	else
		print_text(&ctx, t, secs, status);
	if (ctx.o.hist_path &&
	    hist_write_file(&t->latency, ctx.o.hist_path, prog))
		rc = EXIT_FAILED;
out:
	for (i = 0; i < ctx.o.threads; i++)
		worker_free(&ctx.workers[i]);
	pthread_barrier_destroy(&barrier);
	close(sfd);
	free(ctx.cross);
	free(ctx.workers);
	free(tids);
	free(t);
	free(last);
	return rc;
}
