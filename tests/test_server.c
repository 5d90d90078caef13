// SPDX-License-Identifier: MIT
/*
 * The server, on both backends (every test runs once on io_uring, when the
 * kernel has it, and once on epoll): echo through handler, worker and send
 * path; per-session order under load; packets split at every byte boundary
 * and coalesced; each bad input; max connections; a slow reader;
 * backpressure; stop with packets in flight; handles kept past close; idle
 * timeout; several rings; IPv6, dual stack and the peer's address.
 * After every test the pool's in-use count is 0.
 * Loopback only, ephemeral ports, bounded by a watchdog.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/io/server.h>
#include <aorta/core/timer.h>
#include "helpers.h"

/* ---- what the handlers saw ---- */

static uint32_t t_closes[AO_CLOSE_NR];
static uint32_t t_opens;
static uint32_t t_errors; /* order violations seen by handlers */
static uint32_t t_stall; /* handlers wait while this is set */
static uint32_t t_handler_sleep_us;
static struct ao_conn *t_kept; /* a handle kept past close */

static void reset_counters(void)
{
	memset(t_closes, 0, sizeof(t_closes));
	t_opens = 0;
	t_errors = 0;
	t_stall = 0;
	__atomic_store_n(&t_handler_sleep_us, 0, __ATOMIC_RELAXED);
	t_kept = NULL;
}

static uint32_t closes(enum ao_close_reason why)
{
	return __atomic_load_n(&t_closes[why], __ATOMIC_ACQUIRE);
}

static void h_open(struct ao_conn *c, void *arg)
{
	(void)arg;
	(void)c;
	__atomic_fetch_add(&t_opens, 1, __ATOMIC_RELEASE);
}

static void h_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	(void)arg;
	free(ao_conn_user(c));
	ao_conn_set_user(c, NULL);
	assert_false(ao_conn_is_open(c));
	__atomic_fetch_add(&t_closes[why], 1, __ATOMIC_RELEASE);
}

/* Echo each packet; a packet starting with 0xff is "garbage". */
static int h_echo(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	while (__atomic_load_n(&t_stall, __ATOMIC_ACQUIRE))
		t_sleep_ns(200000);
	uint32_t us = __atomic_load_n(&t_handler_sleep_us, __ATOMIC_RELAXED);

	if (us)
		t_sleep_ns(us * 1000ull);
	if (pkt->len && ((uint8_t *)pkt->data)[0] == 0xff)
		return -EPROTO;
	ao_conn_send_packet(c, pkt);
	return 0;
}

/* Echo, and check the per-session sequence number (first 4 bytes). */
static int h_seq(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	uint32_t *expect = ao_conn_user(c);
	uint32_t seq;

	(void)arg;
	while (__atomic_load_n(&t_stall, __ATOMIC_ACQUIRE))
		t_sleep_ns(200000);
	if (!expect) {
		expect = calloc(1, sizeof(*expect));
		ao_conn_set_user(c, expect);
	}
	memcpy(&seq, pkt->data, 4);
	if (pkt->len < 4 || seq != *expect)
		__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	*expect = seq + 1;
	ao_conn_send_packet(c, pkt);
	return 0;
}

/* ---- server set-up ---- */

static void base_config(struct ao_server_config *cfg, enum ao_io_backend be)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->backend = be;
	cfg->framing.kind = AO_FRAME_LEN16;
	cfg->framing.max_packet = 4096;
	cfg->pool_buffers = 1024;
	cfg->drain_timeout_ms = 2000;
	cfg->flags = AO_SERVER_QUIET;
	cfg->handlers.on_open = h_open;
	cfg->handlers.on_packet = h_echo;
	cfg->handlers.on_close = h_close;
}

static struct ao_server *start(struct ao_server_config *cfg)
{
	struct ao_server *srv;

	reset_counters();
	assert_int_equal(ao_server_create(cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	assert_int_equal(ao_server_backend(srv), cfg->backend);
	assert_true(ao_server_port(srv) != 0);
	return srv;
}

static void finish(struct ao_server *srv)
{
	assert_int_equal(ao_server_stop(srv), 0);
	/* Every buffer is back: receive rings, send queues, packets. */
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
}

static void get_stats(struct ao_server *srv, struct ao_io_stats *st)
{
	assert_int_equal(ao_server_stats(srv, -1, st), 0);
}

/* Poll cond every ms for up to ms_max milliseconds. */
/* ---- a blocking test client ---- */

static size_t pkt_encode(uint8_t *out, const void *p, uint16_t n)
{
	out[0] = (uint8_t)(n >> 8);
	out[1] = (uint8_t)n;
	memcpy(out + 2, p, n);
	return (size_t)n + 2;
}

static void cl_send_pkt(int fd, const void *p, uint16_t n)
{
	uint8_t b[4100];

	t_cl_write(fd, b, pkt_encode(b, p, n));
}

/* One packet's payload into p (max bytes); its length, or -1. */
static int cl_recv_pkt(int fd, void *p, size_t max)
{
	uint8_t h[2];
	size_t n;

	if (t_cl_read(fd, h, 2))
		return -1;
	n = (size_t)h[0] << 8 | h[1];
	if (n > max || t_cl_read(fd, p, n))
		return -1;
	return (int)n;
}

/* True if the server closes fd within ms (data before the EOF ignored). */
static bool cl_closed_within(int fd, int ms)
{
	uint64_t end = t_now_ns() + (uint64_t)ms * 1000000ull;
	uint8_t b[4096];

	while (t_now_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return true;
	}
	return false;
}

/* What a writer thread sends. */
struct writer {
	int fd;
	const uint8_t *p;
	size_t n;
	bool shut; /* then shutdown(SHUT_WR) */
	int err; /* errno of a failed send (the main thread asserts) */
	uint32_t done; /* set when it has sent all it will */
};

static void echo_once(int fd, const char *msg)
{
	char got[64];
	int n;

	cl_send_pkt(fd, msg, (uint16_t)strlen(msg));
	n = cl_recv_pkt(fd, got, sizeof(got));
	assert_int_equal(n, (int)strlen(msg));
	assert_memory_equal(got, msg, (size_t)n);
}

static enum ao_io_backend backend_of(void **state)
{
	enum ao_io_backend be = *(enum ao_io_backend *)*state;

	return be;
}

static bool uring_ok;
static enum ao_io_backend be_uring = AO_IO_URING;
static enum ao_io_backend be_epoll = AO_IO_EPOLL;

/* Skip io_uring tests where the kernel refuses it. */
#define BACKEND_OR_SKIP(state)                                         \
	({                                                             \
		enum ao_io_backend __b = backend_of(state);            \
		if (__b == AO_IO_URING && !uring_ok) {                 \
			print_message("io_uring unavailable: skip\n"); \
			skip();                                        \
		}                                                      \
		__b;                                                   \
	})

/* ---- echo ---- */

static void test_echo(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "echo");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 20; i++)
		echo_once(fd, "hello, aorta");
	WAIT_UNTIL(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE) == 1, 2000);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	get_stats(srv, &st);
	assert_int_equal(st.accepted, 1);
	assert_int_equal(st.open, 0);
	assert_int_equal(st.packets_in, 20);
	assert_int_equal(st.packets_out, 20);
	assert_int_equal(st.bytes_in, 20 * 14);
	assert_int_equal(st.bytes_out, 20 * 14);
	assert_int_equal(st.closes[AO_CLOSE_EOF], 1);
	finish(srv);
	t_watchdog_disarm();
}

/* Raw framing: every receive is a packet, echoed as it came. */
static void test_echo_raw(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char buf[16];
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.framing.kind = AO_FRAME_RAW;
	t_watchdog_arm(30, "echo raw");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 20; i++) {
		t_cl_write(fd, "ping!", 5);
		assert_int_equal(t_cl_read(fd, buf, 5), 0);
		assert_memory_equal(buf, "ping!", 5);
	}
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- order under load ---- */

struct order_client {
	uint16_t port;
	int sessions;
	long packets;
	int bad;
};

static void *order_client(void *arg)
{
	struct order_client *oc = arg;
	int *fds = calloc((size_t)oc->sessions, sizeof(int));
	uint8_t *out = malloc(64 * 1024);
	long chunk = 256;

	for (int s = 0; s < oc->sessions; s++)
		fds[s] = t_cl_connect(oc->port);
	/* Write in chunks across sessions, then read back each chunk. */
	for (long base = 0; base < oc->packets; base += chunk) {
		long end = base + chunk < oc->packets ? base + chunk :
							oc->packets;

		for (int s = 0; s < oc->sessions; s++) {
			size_t n = 0;

			for (long i = base; i < end; i++) {
				uint8_t p[8];
				uint32_t seq = (uint32_t)i, id = (uint32_t)s;

				memcpy(p, &seq, 4);
				memcpy(p + 4, &id, 4);
				n += pkt_encode(out + n, p, 8);
			}
			t_cl_write(fds[s], out, n);
		}
		for (int s = 0; s < oc->sessions; s++) {
			for (long i = base; i < end; i++) {
				uint8_t p[8];
				uint32_t seq, id;

				if (cl_recv_pkt(fds[s], p, sizeof(p)) != 8) {
					oc->bad++;
					goto out;
				}
				memcpy(&seq, p, 4);
				memcpy(&id, p + 4, 4);
				if (seq != (uint32_t)i || id != (uint32_t)s)
					oc->bad++;
			}
		}
	}
out:
	for (int s = 0; s < oc->sessions; s++)
		close(fds[s]);
	free(fds);
	free(out);
	return NULL;
}

static void test_order(void **state)
{
	struct order_client oc[4];
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	long packets = t_scaled(1000, 50);

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_packet = h_seq;
	t_watchdog_arm(120, "order under load");
	srv = start(&cfg);
	for (int i = 0; i < 4; i++)
		oc[i] = (struct order_client){ .port = ao_server_port(srv),
					       .sessions = 25,
					       .packets = packets };
	uint64_t t0 = t_now_ns();

	t_run_threads(4, order_client, oc, sizeof(oc[0]));
	print_message(
		"order: %s: 100 sessions x %ld packets echoed in %llu ms\n",
		ao_io_backend_name(cfg.backend), packets,
		(unsigned long long)((t_now_ns() - t0) / 1000000));
	for (int i = 0; i < 4; i++)
		assert_int_equal(oc[i].bad, 0);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 100, 10000);
	assert_int_equal(__atomic_load_n(&t_errors, __ATOMIC_RELAXED), 0);
	get_stats(srv, &st);
	assert_int_equal(st.accepted, 100);
	assert_int_equal(st.packets_in, 100 * packets);
	assert_int_equal(st.packets_out, 100 * packets);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- split and coalesced ---- */

static void test_split_coalesced(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t stream[128];
	size_t len = 0;
	const char *msgs[] = { "a", "split me", "", "0123456789abcdef" };
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.framing.flags = AO_FRAME_ALLOW_EMPTY;
	t_watchdog_arm(60, "split and coalesced");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	for (size_t i = 0; i < ARRAY_SIZE(msgs); i++)
		len += pkt_encode(stream + len, msgs[i],
				  (uint16_t)strlen(msgs[i]));
	/* Split at every byte boundary (with a pause so the two halves
	 * arrive as two receives), and k == len: all coalesced. */
	for (size_t k = 1; k <= len; k++) {
		t_cl_write(fd, stream, k);
		t_sleep_ns(300000);
		if (k < len)
			t_cl_write(fd, stream + k, len - k);
		for (size_t i = 0; i < ARRAY_SIZE(msgs); i++) {
			char got[64];
			int n = cl_recv_pkt(fd, got, sizeof(got));

			assert_int_equal(n, (int)strlen(msgs[i]));
			assert_memory_equal(got, msgs[i], (size_t)n);
		}
	}
	/* A byte at a time. */
	for (size_t k = 0; k < len; k++) {
		t_cl_write(fd, stream + k, 1);
		t_sleep_ns(50000);
	}
	for (size_t i = 0; i < ARRAY_SIZE(msgs); i++) {
		char got[64];

		assert_int_equal(cl_recv_pkt(fd, got, sizeof(got)),
				 (int)strlen(msgs[i]));
	}
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- bad input: each closes that connection only, counted ---- */

static void bad_input(void **state, const void *bytes, size_t n, int how,
		      enum ao_close_reason want)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int good, bad;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, ao_close_reason_name(want));
	srv = start(&cfg);
	good = t_cl_connect(ao_server_port(srv));
	echo_once(good, "before");
	bad = t_cl_connect(ao_server_port(srv));
	if (n)
		t_cl_write(bad, bytes, n);
	if (how == 1) {
		shutdown(bad, SHUT_WR); /* half-close */
	} else if (how == 2) {
		struct linger l = { .l_onoff = 1, .l_linger = 0 };

		t_sleep_ns(20000000);
		setsockopt(bad, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		close(bad); /* reset */
		bad = -1;
	} else if (how == 3) {
		close(bad); /* EOF after what was written */
		bad = -1;
	}
	WAIT_UNTIL(closes(want) == 1, 5000);
	if (bad >= 0) {
		assert_true(cl_closed_within(bad, 5000));
		close(bad);
	}
	/* The other session is untouched. */
	echo_once(good, "after");
	get_stats(srv, &st);
	assert_int_equal(st.closes[want], 1);
	assert_int_equal(st.open, 1);
	close(good);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == (want == AO_CLOSE_EOF ? 2 : 1),
		   5000);
	finish(srv);
	t_watchdog_disarm();
}

static void test_bad_too_long(void **state)
{
	/* 0x1001 = 4097 > max_packet 4096 */
	bad_input(state, "\x10\x01zzzz", 6, 0, AO_CLOSE_TOO_LONG);
}

static void test_bad_zero_length(void **state)
{
	bad_input(state,
		  "\x00\x01"
		  "a\x00\x00",
		  5, 0, AO_CLOSE_EMPTY);
}

static void test_bad_garbage(void **state)
{
	/* A well-framed packet the handler rejects. */
	bad_input(state, "\x00\x03\xff\xfe\xfd", 5, 0, AO_CLOSE_PROTOCOL);
}

static void test_bad_random_bytes(void **state)
{
	/* Noise: its first two bytes read as a huge length. */
	bad_input(state, "\xde\xad\xbe\xef\x01\x02\x03", 7, 0,
		  AO_CLOSE_TOO_LONG);
}

static void test_bad_partial_then_eof(void **state)
{
	bad_input(state,
		  "\x00\x10"
		  "abc",
		  5, 3, AO_CLOSE_TRUNCATED);
}

static void test_bad_reset(void **state)
{
	bad_input(state,
		  "\x00\x02"
		  "ab",
		  4, 2, AO_CLOSE_RESET);
}

/* A half-close: the reply to what came before it still arrives, then the
 * server closes (reason EOF). */
static void test_half_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char got[16];
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "half-close");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	/* The reply comes after the FIN. */
	__atomic_store_n(&t_handler_sleep_us, 20000, __ATOMIC_RELAXED);
	cl_send_pkt(fd, "last", 4);
	shutdown(fd, SHUT_WR);
	assert_int_equal(cl_recv_pkt(fd, got, sizeof(got)), 4);
	assert_memory_equal(got, "last", 4);
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- limits ---- */

static void test_max_conns(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fds[5];

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.max_conns = 3;
	t_watchdog_arm(30, "max connections");
	srv = start(&cfg);
	for (int i = 0; i < 3; i++) {
		fds[i] = t_cl_connect(ao_server_port(srv));
		echo_once(fds[i], "in");
	}
	for (int i = 3; i < 5; i++) {
		fds[i] = t_cl_connect(ao_server_port(srv));
		assert_true(cl_closed_within(fds[i], 5000));
	}
	get_stats(srv, &st);
	assert_int_equal(st.accepted, 3);
	assert_int_equal(st.rejected, 2);
	assert_int_equal(st.open, 3);
	/* A slot frees up: a new connection gets in. */
	close(fds[0]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	fds[0] = t_cl_connect(ao_server_port(srv));
	echo_once(fds[0], "in again");
	for (int i = 0; i < 5; i++)
		close(fds[i]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 4, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* Each request gets a 3000-byte reply; the client never reads. */
static int h_big_reply(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct ao_buf *b = ao_buf_get(ao_server_pool(ao_conn_server(c)));

	(void)arg;
	(void)pkt;
	if (!b)
		return 0;
	memset(b->data, 'x', 3000);
	b->len = 3000;
	ao_conn_send_packet(c, b);
	ao_buf_put(b);
	return 0;
}

static void test_slow_reader(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	int fd, small = 4096, good;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_packet = h_big_reply;
	cfg.sendq_max = 64 * 1024;
	cfg.sock_sndbuf = small;
	t_watchdog_arm(30, "slow reader");
	srv = start(&cfg);
	good = t_cl_connect(ao_server_port(srv));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	{
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port =
						  htons(ao_server_port(srv)) };

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		assert_int_equal(
			connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	/* Requests until the server gives up on us (a write may fail once
	 * it has closed). */
	for (int i = 0; i < 2000 && !closes(AO_CLOSE_SLOW); i++) {
		uint8_t b[8];

		if (send(fd, b, pkt_encode(b, "req", 3), MSG_NOSIGNAL) < 0)
			break;
		if (i % 50 == 49)
			t_sleep_ns(1000000);
	}
	WAIT_UNTIL(closes(AO_CLOSE_SLOW) == 1, 5000);
	close(fd);
	/* Others are fine; on_packet's replies still work for them. */
	{
		char got[3100];

		cl_send_pkt(good, "q", 1);
		assert_int_equal(cl_recv_pkt(good, got, sizeof(got)), 3000);
	}
	close(good);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* A stalled handler: the client's writes block, and once it resumes
 * every packet is handled, in order. */
static void test_backpressure(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd, small = 4096;
	uint32_t sent = 0;
	uint64_t blocked_since = 0;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_packet = h_seq;
	cfg.session_backlog = 8;
	cfg.sock_rcvbuf = small;
	t_watchdog_arm(60, "backpressure");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	__atomic_store_n(&t_stall, 1, __ATOMIC_RELEASE);
	/* Write until the socket stays full for 300 ms.  A packet only
	 * partly written waits in b[pend..n) until the handler resumes. */
	uint8_t b[70];
	size_t n = 0, pend = 0;

	for (;;) {
		ssize_t w;

		if (pend == n) {
			uint8_t p[64];

			memset(p, 0, sizeof(p));
			memcpy(p, &sent, 4);
			n = pkt_encode(b, p, sizeof(p));
			pend = 0;
		}
		w = send(fd, b + pend, n - pend, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0) {
			pend += (size_t)w;
			if (pend == n)
				sent++;
			blocked_since = 0;
			assert_true(sent < 1000000);
			continue;
		}
		assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
		if (!blocked_since) {
			blocked_since = t_now_ns();
		} else if (t_now_ns() - blocked_since > 300000000ull) {
			/* Full for 300 ms, and the server says it paused
			 * (its ring may have been held up, not reading);
			 * after 20 s blocked the asserts below tell. */
			get_stats(srv, &st);
			if (st.pauses >= 1 ||
			    t_now_ns() - blocked_since > 20000000000ull)
				break;
		}
		t_sleep_ns(1000000);
	}
	get_stats(srv, &st);
	assert_true(st.pauses >= 1);
	/* Far fewer than sent reached the handler's queue. */
	assert_true(st.packets_in < sent);
	__atomic_store_n(&t_stall, 0, __ATOMIC_RELEASE);
	if (pend < n) {
		t_cl_write(fd, b + pend, n - pend);
		sent++;
	}
	for (uint32_t i = 0; i < sent; i++) {
		uint8_t p[64];
		uint32_t seq;

		assert_int_equal(cl_recv_pkt(fd, p, sizeof(p)), 64);
		memcpy(&seq, p, 4);
		assert_int_equal(seq, i);
	}
	assert_int_equal(__atomic_load_n(&t_errors, __ATOMIC_RELAXED), 0);
	get_stats(srv, &st);
	assert_int_equal(st.packets_in, sent);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

static void test_idle_timeout(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.idle_timeout_ms = 100;
	t_watchdog_arm(30, "idle timeout");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "then silence");
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(closes(AO_CLOSE_IDLE) == 1, 5000);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* The executor's timer service runs a test clock: the connections'
 * deadlines follow it, not CLOCK_MONOTONIC (a silent client is closed
 * only once the test clock has passed the idle timeout). */
static void test_idle_timeout_test_clock(void **state)
{
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct ao_server_config cfg;
	struct ao_timers *ts;
	struct ao_server *srv;
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	tc.exec = ex;
	tc.test_clock = true;
	tc.test_start_ns = 1000000000ull;
	assert_int_equal(ao_timers_create(&tc, &ts), 0);
	cfg.exec = ex;
	cfg.idle_timeout_ms = 50;
	t_watchdog_arm(30, "idle timeout, test clock");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "then silence");
	/* Real time passes, test time does not: still open. */
	t_sleep_ns(200000000);
	assert_int_equal(closes(AO_CLOSE_IDLE), 0);
	assert_int_equal(ao_timers_advance(ts, 40000000), 0);
	t_sleep_ns(20000000);
	assert_int_equal(closes(AO_CLOSE_IDLE), 0);
	assert_int_equal(ao_timers_advance(ts, 20000000), 0);
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(closes(AO_CLOSE_IDLE) == 1, 5000);
	close(fd);
	finish(srv);
	assert_int_equal(ao_timers_destroy(ts, NULL), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
}

/* ---- closing: what was sent before a close arrives first ---- */

/* A mode: the backend (first: see backend_of()) and the server's flags. */
struct mode {
	enum ao_io_backend be;
	unsigned int flags;
};

static struct mode m_uring_worker = { AO_IO_URING, 0 };
static struct mode m_uring_ring = { AO_IO_URING, AO_SERVER_RING_HANDLERS };
static struct mode m_uring_assist = { AO_IO_URING, AO_SERVER_RING_ASSIST };
static struct mode m_epoll_worker = { AO_IO_EPOLL, 0 };
static struct mode m_epoll_ring = { AO_IO_EPOLL, AO_SERVER_RING_HANDLERS };
static struct mode m_epoll_assist = { AO_IO_EPOLL, AO_SERVER_RING_ASSIST };

#define ALL_MODES(fn)                                           \
	cmocka_unit_test_prestate(fn, &m_uring_worker),         \
		cmocka_unit_test_prestate(fn, &m_uring_ring),   \
		cmocka_unit_test_prestate(fn, &m_uring_assist), \
		cmocka_unit_test_prestate(fn, &m_epoll_worker), \
		cmocka_unit_test_prestate(fn, &m_epoll_ring),   \
		cmocka_unit_test_prestate(fn, &m_epoll_assist)

static void mode_config(void **state, struct ao_server_config *cfg)
{
	base_config(cfg, BACKEND_OR_SKIP(state));
	cfg->flags |= ((struct mode *)*state)->flags;
}

/* Packets "go" answers with: several sizes, a socket buffer's worth many
 * times over.  Payload: the packet's number, then bytes made from it. */
#define BURST_PKTS 400u
static const uint16_t burst_sizes[] = { 4, 37, 600, 4000, 2048, 4096, 5 };

static uint16_t burst_len(uint32_t i)
{
	return burst_sizes[i % ARRAY_SIZE(burst_sizes)];
}

static uint8_t burst_byte(uint32_t i, uint32_t k)
{
	return (uint8_t)(i * 31u + k * 7u);
}

/* How the burst handler ends: 0 ao_conn_close(), 1 a failed on_packet,
 * 2 ao_conn_close_slow() (with no burst), 3 sends until one is refused
 * (sendq_max: closed as a slow consumer). */
static uint32_t t_burst_end;

/* "go": the burst, then the close; anything else is ignored. */
static int h_burst(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct ao_bufpool *pool = ao_server_pool(ao_conn_server(c));
	uint32_t end = __atomic_load_n(&t_burst_end, __ATOMIC_RELAXED);

	(void)arg;
	if (pkt->len != 2 || memcmp(pkt->data, "go", 2))
		return 0;
	for (uint32_t i = 0; end != 2 && i < 8 * BURST_PKTS; i++) {
		struct ao_buf *b = ao_buf_get(pool);
		uint16_t n = burst_len(i);
		int err;

		assert_non_null(b);
		memcpy(b->data, &i, 4);
		for (uint32_t k = 4; k < n; k++)
			((uint8_t *)b->data)[k] = burst_byte(i, k);
		b->len = n;
		err = ao_conn_send_packet(c, b);
		ao_buf_put(b);
		if (end == 3 && err == -ENOBUFS)
			return 0;
		assert_int_equal(err, 0);
		if (end != 3 && i + 1 == BURST_PKTS)
			break;
	}
	assert_int_not_equal(end, 3); /* the bound was never reached */
	if (end == 1)
		return -EPROTO;
	if (end == 2)
		assert_int_equal(ao_conn_close_slow(c), 0);
	else
		assert_int_equal(ao_conn_close(c), 0);
	return 0;
}

/* A client socket with a small receive buffer (the burst is many times
 * its size), connected to port. */
static int small_client(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 16384;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/*
 * The handler sends the burst then closes (ao_conn_close(), or a failed
 * on_packet); the client, which keeps sending while it reads (as a game
 * client's inputs do, arriving after the close), reads every packet,
 * whole and in order, then EOF: not a reset, not an early end.
 */
static void close_flush(void **state, uint32_t end, enum ao_close_reason why)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	static uint8_t p[4096];
	int fd;

	mode_config(state, &cfg);
	cfg.handlers.on_packet = h_burst;
	/* Big enough that much of the burst is still in the kernel when
	 * the close comes, small enough that the burst is thrice it. */
	cfg.sock_sndbuf = 131072;
	cfg.linger_ms = 20000; /* a bound only: the client reads */
	__atomic_store_n(&t_burst_end, end, __ATOMIC_RELAXED);
	t_watchdog_arm(60, "close flushes");
	srv = start(&cfg);
	fd = small_client(ao_server_port(srv));
	cl_send_pkt(fd, "go", 2);
	/* Reading late, the socket buffers are full when the close comes,
	 * and stay so while the last of the burst goes out. */
	t_sleep_ns(100000000);
	for (uint32_t i = 0; i < BURST_PKTS; i++) {
		uint32_t seq;
		int n = cl_recv_pkt(fd, p, sizeof(p));

		if (n != burst_len(i))
			fail_msg("packet %u of %u: got %d bytes (%s)", i,
				 BURST_PKTS, n, strerror(errno));
		memcpy(&seq, p, 4);
		assert_int_equal(seq, i);
		for (uint32_t k = 4; k < (uint32_t)n; k++)
			assert_int_equal(p[k], burst_byte(i, k));
		{
			uint8_t b[8];

			/* Input after the close: dropped, and no reset. */
			send(fd, b, pkt_encode(b, "in", 2),
			     MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		/* A slow reader: the server's socket buffer stays full. */
		if (i % 8 == 7)
			t_sleep_ns(1000000);
	}
	assert_int_equal(recv(fd, p, 1, 0), 0); /* EOF */
	WAIT_UNTIL(closes(why) == 1, 5000);
	close(fd);
	finish(srv);
	__atomic_store_n(&t_burst_end, 0, __ATOMIC_RELAXED);
	t_watchdog_disarm();
}

static void test_close_flushes(void **state)
{
	close_flush(state, 0, AO_CLOSE_LOCAL);
}

static void test_protocol_close_flushes(void **state)
{
	close_flush(state, 1, AO_CLOSE_PROTOCOL);
}

/* Read until the end; the error it ends with (0: EOF).  Data first. */
static int read_to_end(int fd)
{
	static uint8_t b[65536];

	for (;;) {
		ssize_t n = recv(fd, b, sizeof(b), 0);

		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		return n == 0 ? 0 : errno;
	}
}

/* The peer's read ends in a reset, and the server counted one abort. */
static void expect_reset(struct ao_server *srv, int fd)
{
	struct ao_io_stats st;
	int e = read_to_end(fd);

	get_stats(srv, &st);
	if (e != ECONNRESET)
		fail_msg("end %d aborted %lu slow %lu", e,
			 (unsigned long)st.aborted,
			 (unsigned long)st.closes[AO_CLOSE_SLOW]);
	assert_int_equal(st.aborted, 1);
}

/* A peer that never reads: the close waits linger_ms for the burst to
 * go, then resets the connection (nothing is left queued in the kernel
 * for it, and it learns at once). */
static void test_close_linger_abort(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint64_t t0;
	int fd;

	mode_config(state, &cfg);
	cfg.handlers.on_packet = h_burst;
	cfg.sock_sndbuf = 16384;
	cfg.linger_ms = 100;
	t_watchdog_arm(60, "linger runs out");
	srv = start(&cfg);
	fd = small_client(ao_server_port(srv));
	t0 = t_now_ns();
	cl_send_pkt(fd, "go", 2);
	WAIT_UNTIL(closes(AO_CLOSE_LOCAL) == 1, 20000);
	/* Not a timed assertion: a bound that only a hang passes. */
	assert_true(t_now_ns() - t0 < 20000000000ull);
	expect_reset(srv, fd);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* ao_conn_close_slow(): a reset at once, whatever was queued. */
static void test_close_slow_resets(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	int fd;

	mode_config(state, &cfg);
	cfg.handlers.on_packet = h_burst;
	__atomic_store_n(&t_burst_end, 2, __ATOMIC_RELAXED);
	t_watchdog_arm(60, "close slow resets");
	srv = start(&cfg);
	fd = small_client(ao_server_port(srv));
	cl_send_pkt(fd, "go", 2);
	WAIT_UNTIL(closes(AO_CLOSE_SLOW) == 1, 5000);
	expect_reset(srv, fd);
	close(fd);
	finish(srv);
	__atomic_store_n(&t_burst_end, 0, __ATOMIC_RELAXED);
	t_watchdog_disarm();
}

/* A reader that stalls past sendq_max: closed as a slow consumer with a
 * reset, which it sees once it reads again, after what had arrived; not
 * an EOF behind the bytes still queued. */
static void test_slow_reader_resets(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd;

	mode_config(state, &cfg);
	cfg.handlers.on_packet = h_burst;
	cfg.sendq_max = 64 * 1024;
	cfg.sock_sndbuf = 4096;
	__atomic_store_n(&t_burst_end, 3, __ATOMIC_RELAXED);
	t_watchdog_arm(60, "slow reader resets");
	srv = start(&cfg);
	fd = small_client(ao_server_port(srv));
	cl_send_pkt(fd, "go", 2);
	WAIT_UNTIL(closes(AO_CLOSE_SLOW) == 1, 5000);
	assert_int_equal(read_to_end(fd), ECONNRESET);
	get_stats(srv, &st);
	assert_int_equal(st.aborted, 1);
	close(fd);
	finish(srv);
	__atomic_store_n(&t_burst_end, 0, __ATOMIC_RELAXED);
	t_watchdog_disarm();
}

/* ---- stop, handles, rings ---- */

/* Write w->p a packet (10 bytes) at a time, 1 ms apart, until the
 * server closes. */
static void *late_writer(void *arg)
{
	struct writer *w = arg;

	for (size_t off = 0; off < w->n; off += 10) {
		if (send(w->fd, w->p + off, 10, MSG_NOSIGNAL) < 0)
			break;
		t_sleep_ns(1000000);
	}
	return NULL;
}

/* Stop while handlers are busy: every packet the server received is
 * handled and its reply flushed before the connection closes. */
static void test_stop_in_flight(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd, got = 0;
	char buf[16];

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "stop with packets in flight");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	__atomic_store_n(&t_handler_sleep_us, 2000, __ATOMIC_RELAXED);
	for (int i = 0; i < 50; i++)
		cl_send_pkt(fd, "inflight", 8);
	WAIT_UNTIL(({
			   get_stats(srv, &st);
			   st.packets_in >= 5;
		   }),
		   5000);
	/* More arrives while the server stops: left unread. */
	{
		static uint8_t more[50 * 10];
		struct writer w = { .fd = fd, .p = more, .n = 0 };
		pthread_t t;

		for (int i = 0; i < 50; i++)
			w.n += pkt_encode(more + w.n, "latecome", 8);
		assert_int_equal(pthread_create(&t, NULL, late_writer, &w), 0);
		assert_int_equal(ao_server_stop(srv), 0);
		pthread_join(t, NULL);
	}
	get_stats(srv, &st);
	assert_int_equal(st.packets_out, st.packets_in);
	assert_int_equal(st.closes[AO_CLOSE_SHUTDOWN], 1);
	assert_int_equal(closes(AO_CLOSE_SHUTDOWN), 1);
	while (cl_recv_pkt(fd, buf, sizeof(buf)) == 8)
		got++;
	assert_int_equal(got, (int)st.packets_in);
	/* A clean end (FIN), not a reset, though the server left some of
	 * what we sent unread. */
	assert_int_equal(recv(fd, buf, 1, 0), 0);
	close(fd);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	t_watchdog_disarm();
}

/* A handler still stuck when the drain time is up: stop says so, and
 * destroy waits for it to finish, after which everything is back. */
static void test_stop_timeout(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	uint64_t t0;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.drain_timeout_ms = 200;
	t_watchdog_arm(30, "stop timeout");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	__atomic_store_n(&t_stall, 1, __ATOMIC_RELEASE);
	cl_send_pkt(fd, "stuck", 5);
	WAIT_UNTIL(({
			   get_stats(srv, &st);
			   st.packets_in == 1;
		   }),
		   5000);
	t0 = t_now_ns();
	assert_int_equal(ao_server_stop(srv), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 < 5000000000ull);
	assert_int_equal(closes(AO_CLOSE_SHUTDOWN), 0); /* still stuck */
	__atomic_store_n(&t_stall, 0, __ATOMIC_RELEASE);
	/* The pool is the server's: its destroy fails if a buffer is out. */
	assert_int_equal(ao_server_destroy(srv), 0);
	assert_int_equal(closes(AO_CLOSE_SHUTDOWN), 1);
	close(fd);
	t_watchdog_disarm();
}

static void h_keep_open(struct ao_conn *c, void *arg)
{
	(void)arg;
	t_kept = ao_conn_get(c);
	__atomic_fetch_add(&t_opens, 1, __ATOMIC_RELEASE);
}

/* A handle kept after close is safe, and sends on it fail. */
static void test_send_after_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_buf *b;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_open = h_keep_open;
	t_watchdog_arm(30, "send after close");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "x");
	WAIT_UNTIL(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE) == 1, 2000);
	assert_true(ao_conn_is_open(t_kept));
	/* A send from this (non-worker) thread works while open. */
	b = ao_buf_get(ao_server_pool(srv));
	memcpy(b->data, "push", 4);
	b->len = 4;
	assert_int_equal(ao_conn_send_packet(t_kept, b), 0);
	{
		char got[8];

		assert_int_equal(cl_recv_pkt(fd, got, sizeof(got)), 4);
	}
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	assert_false(ao_conn_is_open(t_kept));
	assert_int_equal(ao_conn_send(t_kept, b), -ENOTCONN);
	assert_int_equal(ao_conn_send_packet(t_kept, b), -ENOTCONN);
	assert_int_equal(ao_conn_close(t_kept), -ENOTCONN);
	assert_true(ao_conn_id(t_kept) >= 1);
	ao_buf_put(b);
	ao_conn_put(t_kept);
	finish(srv);
	t_watchdog_disarm();
}

/* ao_conn_close() from a handler: queued replies go out first. */
static int h_reply_then_close(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	ao_conn_send_packet(c, pkt);
	assert_int_equal(ao_conn_close(c), 0);
	return 0;
}

static void test_local_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char got[8];
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_packet = h_reply_then_close;
	t_watchdog_arm(30, "local close");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_send_pkt(fd, "bye", 3);
	assert_int_equal(cl_recv_pkt(fd, got, sizeof(got)), 3);
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(closes(AO_CLOSE_LOCAL) == 1, 5000);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* ao_conn_close_slow() from a handler: closed at once, counted as a slow
 * consumer, whatever is queued dropped; others are untouched. */
static int h_close_slow(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	if (pkt->len == 4 && !memcmp(pkt->data, "slow", 4)) {
		assert_int_equal(ao_conn_close_slow(c), 0);
		return 0;
	}
	ao_conn_send_packet(c, pkt);
	return 0;
}

static void test_close_slow(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd, good;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_packet = h_close_slow;
	t_watchdog_arm(30, "close slow");
	srv = start(&cfg);
	good = t_cl_connect(ao_server_port(srv));
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "hi");
	cl_send_pkt(fd, "slow", 4);
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(closes(AO_CLOSE_SLOW) == 1, 5000);
	get_stats(srv, &st);
	assert_int_equal(st.closes[AO_CLOSE_SLOW], 1);
	echo_once(good, "still here");
	close(fd);
	close(good);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

static void test_rings(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st, r0, r1;
	int fds[16];

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.rings = 2;
	t_watchdog_arm(30, "two rings");
	srv = start(&cfg);
	assert_int_equal(ao_server_rings(srv), 2);
	for (int i = 0; i < 16; i++) {
		fds[i] = t_cl_connect(ao_server_port(srv));
		echo_once(fds[i], "ring");
	}
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 16, 5000);
	get_stats(srv, &st);
	assert_int_equal(ao_server_stats(srv, 0, &r0), 0);
	assert_int_equal(ao_server_stats(srv, 1, &r1), 0);
	assert_int_equal(ao_server_stats(srv, 2, &r1), -EINVAL);
	assert_int_equal(ao_server_stats(srv, 1, &r1), 0);
	assert_int_equal(st.accepted, 16);
	assert_int_equal(r0.accepted + r1.accepted, 16);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- running out of buffers, and out of descriptors ---- */

/* Send w->p in pieces of 1000 bytes.  No assert here (off the main
 * thread, CMocka would exit): a failed send is left in w->err. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	size_t off = 0;

	while (off < w->n) {
		size_t n = w->n - off < 1000 ? w->n - off : 1000;
		ssize_t r = send(w->fd, w->p + off, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			w->err = r < 0 ? errno : EIO;
			break;
		}
		off += (size_t)r;
	}
	if (!w->err && w->shut && shutdown(w->fd, SHUT_WR))
		w->err = errno;
	/* Pairs with the main thread's acquire load. */
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A tiny pool and stalled handlers: receives find no buffer (ENOBUFS on
 * the buffer ring, or the framer's allocator fails), which is counted and
 * waited out; once the handlers go on, every byte arrives, in order.
 *
 * With an idle timeout, the client sends everything and its FIN while
 * the handlers are stalled (it all fits in the sockets' buffers), and
 * the handlers stay stalled for several idle timeouts: no idle close,
 * since the server is not reading.  After that the peer has nothing
 * more to say, so the server must see its FIN right behind the data,
 * not wait on a client thread that the scheduler may hold back for
 * longer than the timeout.
 */
static void pool_exhausted(void **state, enum ao_frame_kind kind,
			   uint32_t ring_buffers, uint32_t idle_ms)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	size_t total = kind == AO_FRAME_RAW ? 120000 : 200 * 102;
	uint8_t *out = malloc(total), *in = malloc(total);
	struct writer w;
	pthread_t t;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.framing.kind = kind;
	cfg.pool_buffers = 24;
	cfg.ring_buffers = ring_buffers;
	cfg.idle_timeout_ms = idle_ms;
	t_watchdog_arm(60, "pool exhausted");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	if (kind == AO_FRAME_RAW) {
		for (size_t i = 0; i < total; i++)
			out[i] = (uint8_t)(i * 7 % 251);
	} else {
		for (uint32_t i = 0, off = 0; i < 200; i++) {
			uint8_t p[100];

			memset(p, (int)i, sizeof(p));
			memcpy(p, &i, 4);
			off += (uint32_t)pkt_encode(out + off, p, sizeof(p));
		}
	}
	__atomic_store_n(&t_stall, 1, __ATOMIC_RELEASE);
	w = (struct writer){ .fd = fd, .p = out, .n = total };
	w.shut = idle_ms != 0;
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	WAIT_UNTIL(({
			   get_stats(srv, &st);
			   st.enobufs > 0;
		   }),
		   10000);
	if (idle_ms)
		WAIT_UNTIL(__atomic_load_n(&w.done, __ATOMIC_ACQUIRE), 10000);
	/* With an idle timeout, stay stalled for several of them: the
	 * server is not reading, so the peer is not idle. */
	t_sleep_ns(idle_ms ? idle_ms * 5000000ull : 20000000);
	assert_int_equal(closes(AO_CLOSE_IDLE), 0);
	__atomic_store_n(&t_stall, 0, __ATOMIC_RELEASE);
	assert_int_equal(t_cl_read(fd, in, total), 0);
	assert_memory_equal(in, out, total);
	pthread_join(t, NULL);
	assert_int_equal(w.err, 0);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	assert_int_equal(closes(AO_CLOSE_IDLE), 0);
	finish(srv);
	free(out);
	free(in);
	t_watchdog_disarm();
}

static void test_pool_exhausted_raw(void **state)
{
	pool_exhausted(state, AO_FRAME_RAW, 8, 0);
}

static void test_pool_exhausted_framed(void **state)
{
	pool_exhausted(state, AO_FRAME_LEN16, 8, 0);
}

/* A connection the server stopped reading (no buffers) is not idle. */
static void test_pool_exhausted_not_idle(void **state)
{
	pool_exhausted(state, AO_FRAME_LEN16, 8, 100);
}

/* A buffer ring bigger than the pool: the ring must leave the framer
 * buffers to stitch packets into. */
static void test_ring_bigger_than_pool(void **state)
{
	pool_exhausted(state, AO_FRAME_LEN16, 64, 0);
}

static int highest_fd(void)
{
	int hi = 0;

	for (int fd = 0; fd < 4096; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			hi = fd;
	return hi;
}

/* Out of descriptors: connections beyond are accepted and closed with the
 * spare descriptor, and the ring backs off instead of spinning. */
static void test_emfile(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	struct rlimit old, low;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fds[6], hi, nfill = 0, fill[4096];
	int connected = 0, echoed = 0, refused = 0, started;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "EMFILE");
	reset_counters();
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	for (int i = 0; i < 6; i++)
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* Fill the holes below the highest descriptor, then leave room for
	 * what start opens (listener, eventfd, spare, ring or epoll fd) and
	 * two accepts.  Before start: io_uring reads the limit when it
	 * prepares the accept. */
	hi = highest_fd();
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		assert_true(fd >= 0);
		fill[nfill++] = fd;
		if (fd > hi)
			break;
	}
	hi = highest_fd();
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)hi + 1 + 4 + 2;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	/* No asserts until the limit is back: a failure must not leave the
	 * rest of the runner without descriptors. */
	started = ao_server_start(srv);
	sa.sin_port = htons(ao_server_port(srv));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	for (int i = 0; i < 6 && !started; i++)
		connected += connect(fds[i], (struct sockaddr *)&sa,
				     sizeof(sa)) == 0;
	for (int i = 0; i < 2 && !started; i++) {
		char got[8];

		cl_send_pkt(fds[i], "in", 2);
		echoed += cl_recv_pkt(fds[i], got, sizeof(got)) == 2;
	}
	for (int i = 2; i < 6 && !started; i++)
		refused += cl_closed_within(fds[i], 5000);
	/* No spinning: one error per 10 ms back-off at most. */
	t_sleep_ns(200000000);
	get_stats(srv, &st);
	setrlimit(RLIMIT_NOFILE, &old);
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	for (int i = 2; i < 6; i++)
		close(fds[i]);
	assert_int_equal(started, 0);
	assert_int_equal(connected, 6);
	assert_int_equal(echoed, 2);
	assert_int_equal(refused, 4);
	assert_true(st.accept_errors >= 1);
	assert_true(st.accept_errors < 100);
	assert_int_equal(st.rejected, 4);
	assert_int_equal(st.accepted, 2);
	/* The limit is gone: accepting works again (after the back-off). */
	fds[2] = t_cl_connect(ao_server_port(srv));
	echo_once(fds[2], "back");
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 3, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* Stop, then start again: a new port, the same server. */
static void test_restart(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "restart");
	srv = start(&cfg);
	for (int round = 0; round < 3; round++) {
		if (round)
			assert_int_equal(ao_server_start(srv), 0);
		fd = t_cl_connect(ao_server_port(srv));
		echo_once(fd, "again");
		close(fd);
		WAIT_UNTIL(closes(AO_CLOSE_EOF) == (uint32_t)round + 1, 5000);
		assert_int_equal(ao_server_stop(srv), 0);
		assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	}
	get_stats(srv, &st);
	assert_int_equal(st.accepted, 3);
	assert_int_equal(ao_server_destroy(srv), 0);
	t_watchdog_disarm();
}

/* Broadcast: one packet, one buffer, sent to every session. */
#define BC_N 5
static struct ao_conn *bc_conns[BC_N];
static uint32_t bc_n;

static void h_bc_open(struct ao_conn *c, void *arg)
{
	uint32_t i = __atomic_load_n(&bc_n, __ATOMIC_RELAXED);

	(void)arg;
	bc_conns[i] = ao_conn_get(c);
	/* Release: bc_conns[i] is visible to whoever reads bc_n. */
	__atomic_store_n(&bc_n, i + 1, __ATOMIC_RELEASE);
}

static int h_bc_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	uint32_t n = __atomic_load_n(&bc_n, __ATOMIC_ACQUIRE);

	(void)arg;
	(void)c;
	for (uint32_t i = 0; i < n; i++)
		if (ao_conn_send_packet(bc_conns[i], pkt) < 0)
			__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	return 0;
}

static void test_broadcast(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	int fds[BC_N];

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_open = h_bc_open;
	cfg.handlers.on_packet = h_bc_packet;
	t_watchdog_arm(30, "broadcast");
	__atomic_store_n(&bc_n, 0, __ATOMIC_RELAXED);
	srv = start(&cfg);
	/* on_open runs on the strands, in any order: connect one by one. */
	for (uint32_t i = 0; i < BC_N; i++) {
		fds[i] = t_cl_connect(ao_server_port(srv));
		WAIT_UNTIL(__atomic_load_n(&bc_n, __ATOMIC_ACQUIRE) == i + 1,
			   5000);
	}
	for (int round = 0; round < 10; round++) {
		char msg[32], got[32];

		snprintf(msg, sizeof(msg), "news %d", round);
		cl_send_pkt(fds[round % BC_N], msg, (uint16_t)strlen(msg));
		for (int i = 0; i < BC_N; i++) {
			assert_int_equal(cl_recv_pkt(fds[i], got, sizeof(got)),
					 (int)strlen(msg));
			assert_memory_equal(got, msg, strlen(msg));
		}
	}
	get_stats(srv, &st);
	assert_int_equal(st.packets_in, 10);
	WAIT_UNTIL(({
			   get_stats(srv, &st);
			   st.packets_out == 10 * BC_N;
		   }),
		   5000);
	assert_int_equal(__atomic_load_n(&t_errors, __ATOMIC_RELAXED), 0);
	for (int i = 0; i < BC_N; i++)
		close(fds[i]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == BC_N, 5000);
	for (int i = 0; i < BC_N; i++)
		ao_conn_put(bc_conns[i]);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- backend selection ---- */

static void test_backend_env(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	int fd;

	(void)state;
	base_config(&cfg, AO_IO_AUTO);
	t_watchdog_arm(30, "forced epoll");
	setenv("AO_IO_BACKEND", "epoll", 1);
	reset_counters();
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	unsetenv("AO_IO_BACKEND");
	assert_int_equal(ao_server_backend(srv), AO_IO_EPOLL);
	assert_string_equal(ao_io_backend_name(ao_server_backend(srv)),
			    "epoll");
	assert_int_equal(ao_server_ring_flags(srv), 0);
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "epoll");
	close(fd);
	finish(srv);
	/* AUTO without the variable: io_uring where the kernel has it. */
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	assert_int_equal(ao_server_backend(srv),
			 uring_ok ? AO_IO_URING : AO_IO_EPOLL);
	finish(srv);
	t_watchdog_disarm();
}

static void test_config_errors(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_bufpool *pool;
	struct ao_bufpool_params p = { .buf_size = 1024, .count = 8 };

	(void)state;
	base_config(&cfg, AO_IO_EPOLL);
	cfg.address = "not an address";
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	base_config(&cfg, AO_IO_EPOLL);
	cfg.ring_buffers = 100; /* not a power of two */
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	base_config(&cfg, AO_IO_EPOLL);
	cfg.framing.kind = 3;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	/* The caller's pool must hold a maximal packet. */
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	base_config(&cfg, AO_IO_EPOLL);
	cfg.pool = pool;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	assert_int_equal(ao_bufpool_destroy(pool), 0);
	assert_string_equal(ao_close_reason_name(AO_CLOSE_SLOW),
			    "slow consumer");
}

/* ---- addresses: IPv6, dual stack, the peer ---- */

#define MAX_PEERS 4
static struct sockaddr_storage t_peer[MAX_PEERS];
static socklen_t t_peer_len[MAX_PEERS];
static struct sockaddr_in t_peer4[MAX_PEERS];
static uint32_t t_npeers;

/* on_open: record both views of the peer's address. */
static void h_open_peer(struct ao_conn *c, void *arg)
{
	uint32_t i = __atomic_load_n(&t_npeers, __ATOMIC_RELAXED);

	(void)arg;
	if (i < MAX_PEERS) {
		t_peer_len[i] = sizeof(t_peer[i]);
		if (ao_conn_peer_addr(c, (struct sockaddr *)&t_peer[i],
				      &t_peer_len[i]))
			t_peer_len[i] = 0;
		ao_conn_peer(c, &t_peer4[i]);
	}
	h_open(c, arg);
	__atomic_store_n(&t_npeers, i + 1, __ATOMIC_RELEASE);
}

/* The client side's own port, as the server must see it. */
static uint16_t local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	return ntohs(ss.ss_family == AF_INET6 ?
			     ((struct sockaddr_in6 *)&ss)->sin6_port :
			     ((struct sockaddr_in *)&ss)->sin_port);
}

/* Connect to addr, echo once, wait for on_open; the peer's index. */
static uint32_t connect_peer(struct ao_server *srv, const char *addr, int *fd)
{
	uint32_t n = __atomic_load_n(&t_npeers, __ATOMIC_ACQUIRE);

	*fd = t_cl_connect_to(addr, ao_server_port(srv));
	echo_once(*fd, "hello, address");
	WAIT_UNTIL(__atomic_load_n(&t_npeers, __ATOMIC_ACQUIRE) == n + 1, 2000);
	return n;
}

static void start_peers(struct ao_server_config *cfg, void **state,
			const char *address)
{
	base_config(cfg, BACKEND_OR_SKIP(state));
	cfg->address = address;
	cfg->handlers.on_open = h_open_peer;
	t_npeers = 0;
	memset(t_peer, 0, sizeof(t_peer));
	memset(t_peer4, 0xa5, sizeof(t_peer4)); /* must be overwritten */
}

/* An IPv4 listener: ao_conn_peer() and ao_conn_peer_addr() agree. */
static void test_peer_ipv4(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct sockaddr_in *sin = (struct sockaddr_in *)&t_peer[0];
	uint32_t i;
	int fd;

	start_peers(&cfg, state, "127.0.0.1");
	t_watchdog_arm(30, "peer ipv4");
	srv = start(&cfg);
	i = connect_peer(srv, "127.0.0.1", &fd);
	assert_int_equal(t_peer_len[i], sizeof(struct sockaddr_in));
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(ntohs(sin->sin_port), local_port(fd));
	assert_int_equal(t_peer4[i].sin_family, AF_INET);
	assert_int_equal(t_peer4[i].sin_addr.s_addr, sin->sin_addr.s_addr);
	assert_int_equal(t_peer4[i].sin_port, sin->sin_port);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* An IPv6 listener on ::1: IPv6 peers; ao_conn_peer() says AF_UNSPEC. */
static void test_ipv6(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&t_peer[0];
	struct ao_io_stats st;
	int fd[2];
	uint32_t i;

	if (!t_ipv6_ok())
		skip();
	start_peers(&cfg, state, "::1");
	t_watchdog_arm(30, "ipv6");
	srv = start(&cfg);
	i = connect_peer(srv, "::1", &fd[0]);
	assert_int_equal(t_peer_len[i], sizeof(struct sockaddr_in6));
	assert_int_equal(s6->sin6_family, AF_INET6);
	assert_true(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
	assert_int_equal(ntohs(s6->sin6_port), local_port(fd[0]));
	assert_int_equal(t_peer4[i].sin_family, AF_UNSPEC);
	assert_int_equal(t_peer4[i].sin_port, 0);
	assert_int_equal(t_peer4[i].sin_addr.s_addr, 0);
	/* A second connection on the same listener. */
	i = connect_peer(srv, "::1", &fd[1]);
	assert_int_equal(i, 1);
	for (int k = 0; k < 10; k++)
		echo_once(fd[k & 1], "ipv6 packet");
	close(fd[0]);
	close(fd[1]);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 2, 5000);
	get_stats(srv, &st);
	assert_int_equal(st.accepted, 2);
	assert_int_equal(st.packets_in, 12);
	finish(srv);
	t_watchdog_disarm();
}

/* "::" is dual stack: IPv4 clients too, seen as IPv4-mapped addresses. */
static void test_dual_stack(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&t_peer[0];
	static const uint8_t mapped_lo[16] = {
		[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1
	};
	int fd4, fd6;
	uint32_t i;

	if (!t_ipv6_ok())
		skip();
	start_peers(&cfg, state, "[::]");
	t_watchdog_arm(30, "dual stack");
	srv = start(&cfg);
	i = connect_peer(srv, "127.0.0.1", &fd4);
	assert_int_equal(t_peer_len[i], sizeof(struct sockaddr_in6));
	assert_int_equal(s6->sin6_family, AF_INET6);
	assert_memory_equal(&s6->sin6_addr, mapped_lo, 16);
	assert_int_equal(ntohs(s6->sin6_port), local_port(fd4));
	/* The IPv4 view unmaps it. */
	assert_int_equal(t_peer4[i].sin_family, AF_INET);
	assert_int_equal(ntohl(t_peer4[i].sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(ntohs(t_peer4[i].sin_port), local_port(fd4));
	i = connect_peer(srv, "::1", &fd6);
	s6 = (struct sockaddr_in6 *)&t_peer[i];
	assert_true(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
	assert_int_equal(t_peer4[i].sin_family, AF_UNSPEC);
	close(fd4);
	close(fd6);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 2, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ao_conn_peer_addr() follows getpeername(2): a short buffer gets what
 * fits and the full length; NULLs are -EINVAL. */
static struct sockaddr_in6 t_short;
static socklen_t t_short_len;
static int t_null_rc;

static void h_open_short(struct ao_conn *c, void *arg)
{
	t_short_len = 4;
	memset(&t_short, 0xa5, sizeof(t_short));
	if (ao_conn_peer_addr(c, (struct sockaddr *)&t_short, &t_short_len))
		t_short_len = 0;
	t_null_rc = ao_conn_peer_addr(c, NULL, &t_short_len);
	h_open(c, arg);
}

static void test_peer_addr_short(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	const uint8_t *b = (const uint8_t *)&t_short;
	int fd;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	cfg.handlers.on_open = h_open_short;
	t_watchdog_arm(30, "peer addr short");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	echo_once(fd, "x");
	WAIT_UNTIL(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE) == 1, 2000);
	assert_int_equal(t_short_len, sizeof(struct sockaddr_in));
	assert_int_equal(t_short.sin6_family, AF_INET);
	assert_int_equal(ntohs(t_short.sin6_port), local_port(fd));
	assert_int_equal(b[4], 0xa5); /* nothing past the 4 bytes asked */
	assert_int_equal(t_null_rc, -EINVAL);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* Addresses that are not numeric IPv4 or IPv6 ones are -EINVAL at
 * create (no name lookups); good ones create. */
static void test_address_parse(void **state)
{
	static const char *const bad[] = {
		"not an address", "",		"localhost",   "1.2.3",
		"256.1.1.1",	  "127.0.0.1 ", "[127.0.0.1]", "[::1",
		"::1]",		  "::g",	"1.2.3.4.5",
	};
	static const char *const good[] = {
		"127.0.0.1", "0.0.0.0", "::1",
		"[::1]",     "::",	"::ffff:127.0.0.1",
	};
	struct ao_server_config cfg;
	struct ao_server *srv;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		base_config(&cfg, AO_IO_EPOLL);
		cfg.address = bad[i];
		if (ao_server_create(&cfg, &srv) != -EINVAL)
			fail_msg("address '%s' was not refused", bad[i]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		base_config(&cfg, AO_IO_EPOLL);
		cfg.address = good[i];
		if (ao_server_create(&cfg, &srv))
			fail_msg("address '%s' was refused", good[i]);
		assert_int_equal(ao_server_destroy(srv), 0);
	}
}

/* The caller's executor and pool, shared by two servers. */
static void test_shared_exec_pool(void **state)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_bufpool_params p = { .buf_size = 4096, .count = 1024 };
	struct ao_server_config cfg;
	struct ao_server *a, *b;
	struct ao_bufpool *pool;
	struct ao_exec *ex;
	int fa, fb;

	base_config(&cfg, BACKEND_OR_SKIP(state));
	t_watchdog_arm(30, "shared executor and pool");
	ec.workers = 2;
	assert_int_equal(ao_exec_create(&ec, &ex), 0);
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	cfg.exec = ex;
	cfg.pool = pool;
	cfg.ring_buffers = 64;
	a = start(&cfg);
	assert_int_equal(ao_server_create(&cfg, &b), 0);
	assert_int_equal(ao_server_start(b), 0);
	fa = t_cl_connect(ao_server_port(a));
	fb = t_cl_connect(ao_server_port(b));
	echo_once(fa, "a");
	echo_once(fb, "b");
	close(fa);
	close(fb);
	assert_int_equal(ao_server_stop(a), 0);
	assert_int_equal(ao_server_destroy(a), 0);
	assert_int_equal(ao_server_destroy(b), 0);
	assert_int_equal(ao_bufpool_in_use(pool), 0);
	assert_int_equal(ao_bufpool_destroy(pool), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
}

#define BOTH(fn)                                  \
	cmocka_unit_test_prestate(fn, &be_uring), \
		cmocka_unit_test_prestate(fn, &be_epoll)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_backend_env),
		cmocka_unit_test(test_address_parse),
		BOTH(test_echo),
		BOTH(test_peer_ipv4),
		BOTH(test_peer_addr_short),
		BOTH(test_ipv6),
		BOTH(test_dual_stack),
		BOTH(test_echo_raw),
		BOTH(test_split_coalesced),
		BOTH(test_bad_too_long),
		BOTH(test_bad_zero_length),
		BOTH(test_bad_garbage),
		BOTH(test_bad_random_bytes),
		BOTH(test_bad_partial_then_eof),
		BOTH(test_bad_reset),
		BOTH(test_half_close),
		BOTH(test_max_conns),
		BOTH(test_slow_reader),
		BOTH(test_backpressure),
		BOTH(test_idle_timeout),
		BOTH(test_idle_timeout_test_clock),
		BOTH(test_pool_exhausted_not_idle),
		BOTH(test_stop_in_flight),
		BOTH(test_stop_timeout),
		BOTH(test_send_after_close),
		BOTH(test_local_close),
		BOTH(test_close_slow),
		BOTH(test_rings),
		BOTH(test_restart),
		BOTH(test_broadcast),
		BOTH(test_shared_exec_pool),
		BOTH(test_pool_exhausted_raw),
		BOTH(test_pool_exhausted_framed),
		BOTH(test_ring_bigger_than_pool),
		BOTH(test_emfile),
		BOTH(test_order),
		ALL_MODES(test_close_flushes),
		ALL_MODES(test_protocol_close_flushes),
		ALL_MODES(test_close_linger_abort),
		ALL_MODES(test_close_slow_resets),
		ALL_MODES(test_slow_reader_resets),
	};
	struct ao_server_config cfg;
	struct ao_server *srv;

	/* Is io_uring usable here?  (Not under a seccomp profile, say.) */
	base_config(&cfg, AO_IO_URING);
	if (ao_server_create(&cfg, &srv) == 0) {
		uring_ok = ao_server_start(srv) == 0;
		ao_server_destroy(srv);
	}
	if (!uring_ok)
		fprintf(stderr, "test_server: io_uring unusable, epoll only\n");
	/* T_FILTER=test_echo runs only the tests matching that pattern. */
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	return cmocka_run_group_tests_name("server", tests, NULL, NULL);
}
