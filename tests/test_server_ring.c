// SPDX-License-Identifier: MIT
/*
 * The server with AO_SERVER_RING_HANDLERS, on both backends: handlers run
 * on the ring thread (never on a worker), in order per connection; echo in
 * every framing; per-session order under load; a greeting sent from
 * on_open; a failing on_packet; ao_conn_close() from a handler; a send
 * from another thread on a kept handle; a slow reader; stop with
 * connections open; several rings; the config flag.  After every test the
 * pool's in-use count is 0.  Loopback only, ephemeral ports, watchdog.
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/io/server.h>
#include "helpers.h"

/* ---- what the handlers saw ---- */

struct sess {
	uint32_t state; /* 1 after on_open */
	uint32_t expect; /* next sequence number (h_seq) */
};

static uint32_t t_closes[AO_CLOSE_NR];
static uint32_t t_opens;
static uint32_t t_errors; /* wrong thread, order or state */
static uint32_t t_packets;
static struct ao_conn *t_kept; /* a handle kept by on_open */
static struct ao_server *t_srv;
static uint32_t t_big; /* h_big: reply size */

static void reset_counters(void)
{
	memset(t_closes, 0, sizeof(t_closes));
	t_opens = 0;
	t_errors = 0;
	t_packets = 0;
	t_kept = NULL;
	t_big = 0;
}

static uint32_t ld(uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void bump(uint32_t *p)
{
	__atomic_fetch_add(p, 1, __ATOMIC_RELEASE);
}

/* A ring handler runs on the ring thread "ao-ioN", outside any executor. */
static void check_thread(struct ao_conn *c)
{
	char name[16] = "";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (strncmp(name, "ao-io", 5) || !isdigit((unsigned char)name[5]) ||
	    (unsigned int)atoi(name + 5) != ao_conn_ring(c) ||
	    ao_exec_current() != NULL)
		bump(&t_errors);
}

static void h_open(struct ao_conn *c, void *arg)
{
	struct sess *s = calloc(1, sizeof(*s));

	(void)arg;
	check_thread(c);
	if (!s) {
		bump(&t_errors);
		return;
	}
	s->state = 1;
	ao_conn_set_user(c, s);
	bump(&t_opens);
}

static void h_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	struct sess *s = ao_conn_user(c);

	(void)arg;
	check_thread(c);
	if (!s || s->state != 1 || ao_conn_is_open(c))
		bump(&t_errors);
	free(s);
	ao_conn_set_user(c, NULL);
	bump(&t_closes[why]);
}

/* Echo; a packet starting with 0xff is refused (-EPROTO). */
static int h_echo(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct sess *s = ao_conn_user(c);

	(void)arg;
	check_thread(c);
	if (!s || s->state != 1)
		bump(&t_errors);
	bump(&t_packets);
	if (pkt->len && ((uint8_t *)pkt->data)[0] == 0xff)
		return -EPROTO;
	if (ao_conn_send_packet(c, pkt))
		bump(&t_errors);
	return 0;
}

/* Echo, and check the per-session sequence number (first 4 bytes). */
static int h_seq(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct sess *s = ao_conn_user(c);
	uint32_t seq;

	(void)arg;
	if (!s || pkt->len < 4) {
		bump(&t_errors);
		return 0;
	}
	memcpy(&seq, pkt->data, 4);
	if (seq != s->expect)
		bump(&t_errors);
	s->expect = seq + 1;
	ao_conn_send_packet(c, pkt);
	return 0;
}

/* ---- server set-up ---- */

static void base_config(struct ao_server_config *cfg, enum ao_io_backend be,
			enum ao_frame_kind kind)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->backend = be;
	cfg->framing.kind = kind;
	cfg->framing.max_packet = 4096;
	cfg->pool_buffers = 1024;
	cfg->drain_timeout_ms = 2000;
	cfg->flags = AO_SERVER_QUIET | AO_SERVER_RING_HANDLERS;
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
	t_srv = srv;
	return srv;
}

static void finish(struct ao_server *srv)
{
	assert_int_equal(ao_server_stop(srv), 0);
	/* Every on_open got its on_close. */
	uint32_t n = 0;

	for (int i = 0; i < AO_CLOSE_NR; i++)
		n += ld(&t_closes[i]);
	assert_int_equal(n, ld(&t_opens));
	assert_int_equal(ld(&t_errors), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	t_srv = NULL;
}

/* ---- a blocking test client ---- */

/* One packet in the given framing (the prefix in network order). */
static size_t pkt_encode(uint8_t *out, enum ao_frame_kind kind, const void *p,
			 uint32_t n)
{
	size_t h = 0;

	if (kind == AO_FRAME_LEN16) {
		out[0] = (uint8_t)(n >> 8);
		out[1] = (uint8_t)n;
		h = 2;
	} else if (kind == AO_FRAME_LEN32) {
		out[0] = (uint8_t)(n >> 24);
		out[1] = (uint8_t)(n >> 16);
		out[2] = (uint8_t)(n >> 8);
		out[3] = (uint8_t)n;
		h = 4;
	}
	memcpy(out + h, p, n);
	return h + n;
}

static void cl_send_pkt(int fd, const void *p, uint16_t n)
{
	uint8_t buf[2 + 65536];

	t_cl_write(fd, buf, pkt_encode(buf, AO_FRAME_LEN16, p, n));
}

/* One len16 packet; its length, or -1. */
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

/* True if the server closed fd (EOF or reset) within ms. */
static bool cl_closed_within(int fd, int ms)
{
	uint8_t b[256];

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, ms);
		ssize_t n;

		if (r <= 0)
			return false;
		n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (n <= 0)
			return n == 0 || errno != EAGAIN;
	}
}

static enum ao_io_backend be_uring = AO_IO_URING;
static enum ao_io_backend be_epoll = AO_IO_EPOLL;
static bool uring_ok;

static enum ao_io_backend backend_of(void **state)
{
	enum ao_io_backend be = *(enum ao_io_backend *)*state;

	if (be == AO_IO_URING && !uring_ok)
		skip();
	return be;
}

/* ---- tests ---- */

/* Echo in one framing: the bytes come back whole and in order. */
static void echo_framing(void **state, enum ao_frame_kind kind)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	uint8_t out[4 + 1000], in[4 + 1000], msg[1000];
	int n = 200, fd;

	base_config(&cfg, backend_of(state), kind);
	t_watchdog_arm(30, "ring echo");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < n; i++) {
		uint32_t len = 1 + (uint32_t)(i * 37) % 1000;
		size_t w;

		for (uint32_t j = 0; j < len; j++)
			msg[j] = (uint8_t)(i + j);
		msg[0] = (uint8_t)(i % 200); /* never 0xff */
		w = pkt_encode(out, kind, msg, len);
		t_cl_write(fd, out, w);
		/* All of it back before the next (raw: a receive is a
		 * packet, so each write is one or more of them). */
		assert_int_equal(t_cl_read(fd, in, w), 0);
		assert_memory_equal(in, out, w);
	}
	close(fd);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == 1, 5000);
	assert_int_equal(ao_server_stats(srv, -1, &st), 0);
	assert_true(st.packets_in >= (uint64_t)n);
	assert_int_equal(st.packets_out, st.packets_in);
	assert_int_equal(st.accepted, 1);
	finish(srv);
	t_watchdog_disarm();
}

static void test_echo_raw(void **state)
{
	echo_framing(state, AO_FRAME_RAW);
}

static void test_echo_len16(void **state)
{
	echo_framing(state, AO_FRAME_LEN16);
}

static void test_echo_len32(void **state)
{
	echo_framing(state, AO_FRAME_LEN32);
}

/* Pipelined clients: every session's packets in order, none lost. */
struct order_arg {
	uint16_t port;
	int packets;
	int bad;
};

static void *order_client(void *arg)
{
	struct order_arg *a = arg;
	int fd = t_cl_connect(a->port);
	uint8_t buf[64];
	int sent = 0, got = 0;

	while (got < a->packets) {
		/* Up to 16 in flight. */
		while (sent < a->packets && sent - got < 16) {
			uint32_t seq = (uint32_t)sent++;

			memset(buf, 0x5a, sizeof(buf));
			memcpy(buf, &seq, 4);
			cl_send_pkt(fd, buf, 32);
		}
		uint32_t seq;
		int n = cl_recv_pkt(fd, buf, sizeof(buf));

		memcpy(&seq, buf, 4);
		if (n != 32 || seq != (uint32_t)got)
			a->bad++;
		if (n < 0)
			break;
		got++;
	}
	close(fd);
	return NULL;
}

static void test_order(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct order_arg args[16];
	int nc = (int)t_scaled(16, 4), np = (int)t_scaled(500, 50);

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.handlers.on_packet = h_seq;
	t_watchdog_arm(60, "ring order");
	srv = start(&cfg);
	for (int i = 0; i < nc; i++)
		args[i] = (struct order_arg){ .port = ao_server_port(srv),
					      .packets = np };
	t_run_threads(nc, order_client, args, sizeof(args[0]));
	for (int i = 0; i < nc; i++)
		assert_int_equal(args[i].bad, 0);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == (uint32_t)nc, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* on_open sends a greeting: it arrives before any echo. */
static void h_greet(struct ao_conn *c, void *arg)
{
	struct ao_buf *b = ao_buf_get(ao_server_pool(ao_conn_server(c)));

	h_open(c, arg);
	if (!b) {
		bump(&t_errors);
		return;
	}
	memcpy(b->data, "hello", 5);
	b->len = 5;
	if (ao_conn_send_packet(c, b))
		bump(&t_errors);
	ao_buf_put(b);
}

static void test_greeting(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char buf[16];
	int fd;

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.handlers.on_open = h_greet;
	t_watchdog_arm(30, "ring greeting");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	cl_send_pkt(fd, "ping", 4);
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "ping", 4);
	close(fd);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* A failing on_packet closes with AO_CLOSE_PROTOCOL; earlier replies are
 * delivered or the close is seen, and the server goes on serving. */
static void test_protocol_error(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t bad = 0xff;
	char buf[16];
	int fd;

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	t_watchdog_arm(30, "ring protocol error");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_send_pkt(fd, "ok", 2);
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 2);
	cl_send_pkt(fd, &bad, 1);
	assert_true(cl_closed_within(fd, 5000));
	close(fd);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_PROTOCOL]) == 1, 5000);
	/* Another connection is served as before. */
	fd = t_cl_connect(ao_server_port(srv));
	cl_send_pkt(fd, "again", 5);
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 5);
	close(fd);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* Reply, then ao_conn_close() from the handler: the reply, then a FIN. */
static int h_reply_close(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	h_echo(c, pkt, arg);
	if (ao_conn_close(c))
		bump(&t_errors);
	return 0;
}

static void test_local_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char buf[16];
	int fd;

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.handlers.on_packet = h_reply_close;
	t_watchdog_arm(30, "ring local close");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_send_pkt(fd, "bye", 3);
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "bye", 3);
	assert_true(cl_closed_within(fd, 5000));
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_LOCAL]) == 1, 5000);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* on_open keeps a handle; the test thread sends on it (the mailbox path)
 * while it is open, and gets -ENOTCONN once it closed. */
static void h_keep(struct ao_conn *c, void *arg)
{
	h_open(c, arg);
	__atomic_store_n(&t_kept, ao_conn_get(c), __ATOMIC_RELEASE);
}

static void test_send_other_thread(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_conn *c;
	struct ao_buf *b;
	char buf[16];
	int fd;

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.handlers.on_open = h_keep;
	t_watchdog_arm(30, "ring send from another thread");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	WAIT_UNTIL(__atomic_load_n(&t_kept, __ATOMIC_ACQUIRE) != NULL, 5000);
	c = __atomic_load_n(&t_kept, __ATOMIC_ACQUIRE);
	b = ao_buf_get(ao_server_pool(srv));
	assert_non_null(b);
	memcpy(b->data, "push", 4);
	b->len = 4;
	assert_int_equal(ao_conn_send_packet(c, b), 0);
	assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "push", 4);
	close(fd);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == 1, 5000);
	assert_false(ao_conn_is_open(c));
	assert_int_equal(ao_conn_send_packet(c, b), -ENOTCONN);
	ao_buf_put(b);
	ao_conn_put(c);
	finish(srv);
	t_watchdog_disarm();
}

/* Each packet is answered with t_big bytes; a client that never reads
 * passes sendq_max and is closed as a slow consumer. */
static int h_big(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct ao_buf *b = ao_buf_get(ao_server_pool(ao_conn_server(c)));

	(void)pkt;
	(void)arg;
	if (!b)
		return 0;
	b->len = __atomic_load_n(&t_big, __ATOMIC_RELAXED);
	memset(b->data, 0x42, b->len);
	ao_conn_send_packet(c, b);
	ao_buf_put(b);
	return 0;
}

static void test_slow_reader(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t ping[8] = { 0 };
	int fd;

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.handlers.on_packet = h_big;
	cfg.sendq_max = 64 * 1024;
	cfg.sock_sndbuf = 4096;
	t_watchdog_arm(60, "ring slow reader");
	srv = start(&cfg);
	__atomic_store_n(&t_big, 4000, __ATOMIC_RELAXED);
	fd = t_cl_connect(ao_server_port(srv));
	{
		int small = 4096;

		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	}
	for (int i = 0; i < 2000 && !ld(&t_closes[AO_CLOSE_SLOW]); i++) {
		uint8_t out[2 + sizeof(ping)];

		pkt_encode(out, AO_FRAME_LEN16, ping, sizeof(ping));
		if (send(fd, out, sizeof(out), MSG_NOSIGNAL) < 0)
			break;
		if (i % 50 == 49)
			t_sleep_ns(1000000);
	}
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_SLOW]) == 1, 10000);
	close(fd);
	finish(srv);
	t_watchdog_disarm();
}

/* Stop with connections open: each closes as AO_CLOSE_SHUTDOWN. */
static void test_stop_open(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char buf[16];
	int fds[8];

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	t_watchdog_arm(30, "ring stop");
	srv = start(&cfg);
	for (int i = 0; i < 8; i++) {
		fds[i] = t_cl_connect(ao_server_port(srv));
		cl_send_pkt(fds[i], "x", 1);
		assert_int_equal(cl_recv_pkt(fds[i], buf, sizeof(buf)), 1);
	}
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ld(&t_closes[AO_CLOSE_SHUTDOWN]), 8);
	for (int i = 0; i < 8; i++) {
		assert_true(cl_closed_within(fds[i], 5000));
		close(fds[i]);
	}
	finish(srv);
	t_watchdog_disarm();
}

/* Several rings: each handler on its own connection's ring thread. */
static void test_rings(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	char buf[16];
	int fds[16];

	base_config(&cfg, backend_of(state), AO_FRAME_LEN16);
	cfg.rings = 2;
	t_watchdog_arm(30, "ring several rings");
	srv = start(&cfg);
	assert_int_equal(ao_server_rings(srv), 2);
	for (int i = 0; i < 16; i++)
		fds[i] = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 16; i++) {
		cl_send_pkt(fds[i], "ring", 4);
		assert_int_equal(cl_recv_pkt(fds[i], buf, sizeof(buf)), 4);
	}
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	WAIT_UNTIL(ld(&t_closes[AO_CLOSE_EOF]) == 16, 5000);
	assert_int_equal(ao_server_stats(srv, -1, &st), 0);
	assert_int_equal(st.accepted, 16);
	assert_int_equal(st.packets_in, 16);
	finish(srv);
	t_watchdog_disarm();
}

static void test_config(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;

	(void)state;
	base_config(&cfg, AO_IO_EPOLL, AO_FRAME_RAW);
	cfg.flags |= 0x100u;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	cfg.flags = AO_SERVER_RING_HANDLERS | AO_SERVER_QUIET;
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_non_null(ao_server_exec(srv));
	assert_int_equal(ao_server_destroy(srv), 0);
}

#define BOTH(fn)                                  \
	cmocka_unit_test_prestate(fn, &be_uring), \
		cmocka_unit_test_prestate(fn, &be_epoll)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config),
		BOTH(test_echo_raw),
		BOTH(test_echo_len16),
		BOTH(test_echo_len32),
		BOTH(test_order),
		BOTH(test_greeting),
		BOTH(test_protocol_error),
		BOTH(test_local_close),
		BOTH(test_send_other_thread),
		BOTH(test_slow_reader),
		BOTH(test_stop_open),
		BOTH(test_rings),
	};
	struct ao_server_config cfg;
	struct ao_server *srv;

	/* Is io_uring usable here?  Otherwise its half is skipped. */
	base_config(&cfg, AO_IO_URING, AO_FRAME_RAW);
	if (ao_server_create(&cfg, &srv) == 0) {
		uring_ok = ao_server_start(srv) == 0;
		ao_server_destroy(srv);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
