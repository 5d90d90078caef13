// SPDX-License-Identifier: MIT
/*
 * The server with AO_SERVER_RING_ASSIST, on both backends: the ring runs
 * a connection's strand turn itself when nobody runs the strand, within a
 * budget, and the workers get the rest.
 *  - order and one-at-a-time: pipelined clients whose handlers sometimes
 *    take long enough (over the budget, over the slow bound) that their
 *    turns move from the ring to the workers mid-stream; every packet is
 *    handled in order, never two of one connection at once, on_open
 *    first and on_close last, and both the ring and the workers ran some;
 *  - a handler that blocks stalls the other connections once, not once
 *    per packet: its connection's later turns go to the workers;
 *  - the flag is ignored with AO_SERVER_RING_HANDLERS (handlers stay on
 *    the ring, strands unused).
 * After every test the pool's in-use count is 0.  Loopback only,
 * ephemeral ports, watchdog.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/io/server.h>
#include "helpers.h"

struct sess {
	uint32_t state; /* 1 after on_open, 2 after on_close */
	uint32_t expect; /* next sequence number */
	uint32_t inside; /* handlers running now: at most 1 */
};

static uint32_t t_errors, t_opens, t_closes, t_on_ring, t_on_worker;
static uint32_t t_packets;

static uint32_t ld(uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void bump(uint32_t *p)
{
	__atomic_fetch_add(p, 1, __ATOMIC_RELEASE);
}

static void reset_counters(void)
{
	t_errors = t_opens = t_closes = t_on_ring = t_on_worker = 0;
	t_packets = 0;
}

/* Where a handler runs: the ring ("ao-ioN", no executor) or a worker. */
static void where(void)
{
	char name[16] = "";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (!strncmp(name, "ao-io", 5) && ao_exec_current() == NULL)
		bump(&t_on_ring);
	else if (ao_exec_current() != NULL)
		bump(&t_on_worker);
	else
		bump(&t_errors);
}

static void enter(struct sess *s)
{
	if (__atomic_fetch_add(&s->inside, 1, __ATOMIC_ACQ_REL) != 0)
		bump(&t_errors);
}

static void leave(struct sess *s)
{
	__atomic_fetch_sub(&s->inside, 1, __ATOMIC_ACQ_REL);
}

static void h_open(struct ao_conn *c, void *arg)
{
	struct sess *s = calloc(1, sizeof(*s));

	(void)arg;
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
	if (!s || s->state != 1 || ao_conn_is_open(c) || why != AO_CLOSE_EOF)
		bump(&t_errors);
	if (s) {
		enter(s);
		s->state = 2;
		leave(s);
	}
	free(s);
	ao_conn_set_user(c, NULL);
	bump(&t_closes);
}

/*
 * Echo, checking the sequence number (first 4 bytes) and the strand.
 * Byte 4 asks for a delay: 1 = 20 us of CPU (many of them go over the
 * ring's budget), 2 = 1.5 ms (over the slow bound: the connection's turns
 * go to the workers from then on).
 */
static int h_seq(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct sess *s = ao_conn_user(c);
	const uint8_t *d = pkt->data;
	uint32_t seq;

	(void)arg;
	if (!s || s->state != 1 || pkt->len < 5) {
		bump(&t_errors);
		return 0;
	}
	enter(s);
	where();
	if (ao_strand_current() == NULL)
		bump(&t_errors);
	memcpy(&seq, d, 4);
	if (seq != s->expect)
		bump(&t_errors);
	s->expect = seq + 1;
	if (d[4] == 1)
		t_spin_ns(20000);
	else if (d[4] == 2)
		t_spin_ns(1500000);
	leave(s);
	bump(&t_packets);
	if (ao_conn_send_packet(c, pkt))
		bump(&t_errors);
	return 0;
}

static void base_config(struct ao_server_config *cfg, enum ao_io_backend be)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->backend = be;
	cfg->framing.kind = AO_FRAME_LEN16;
	cfg->framing.max_packet = 4096;
	cfg->pool_buffers = 2048;
	cfg->drain_timeout_ms = 5000;
	cfg->flags = AO_SERVER_QUIET | AO_SERVER_RING_ASSIST;
	cfg->handlers.on_open = h_open;
	cfg->handlers.on_packet = h_seq;
	cfg->handlers.on_close = h_close;
}

static struct ao_server *start(struct ao_server_config *cfg)
{
	struct ao_server *srv;

	reset_counters();
	assert_int_equal(ao_server_create(cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	assert_int_equal(ao_server_backend(srv), cfg->backend);
	return srv;
}

static void finish(struct ao_server *srv)
{
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ld(&t_closes), ld(&t_opens));
	assert_int_equal(ld(&t_errors), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
}

/* ---- the client ---- */

static void cl_send_pkt(int fd, const uint8_t *p, uint16_t n)
{
	uint8_t buf[2 + 256];

	buf[0] = (uint8_t)(n >> 8);
	buf[1] = (uint8_t)n;
	memcpy(buf + 2, p, n);
	t_cl_write(fd, buf, 2u + n);
}

static int cl_recv_pkt(int fd, uint8_t *p, size_t max)
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

struct order_arg {
	uint16_t port;
	int id;
	int packets;
	int bad;
};

/* Up to 32 packets in flight; client 0 asks for a slow handler now and
 * then, the others for short delays in bursts. */
static void *order_client(void *arg)
{
	struct order_arg *a = arg;
	int fd = t_cl_connect(a->port);
	uint8_t buf[64];
	int sent = 0, got = 0;

	while (got < a->packets) {
		while (sent < a->packets && sent - got < 32) {
			uint32_t seq = (uint32_t)sent++;

			memset(buf, 0x5a, sizeof(buf));
			memcpy(buf, &seq, 4);
			buf[4] = 0;
			if (a->id == 0 && seq % 100 == 50)
				buf[4] = 2;
			else if ((seq / 64) % 2 == 1)
				buf[4] = 1;
			cl_send_pkt(fd, buf, 40);
		}
		uint32_t seq;
		int n = cl_recv_pkt(fd, buf, sizeof(buf));

		if (n < 0) {
			a->bad++;
			break;
		}
		memcpy(&seq, buf, 4);
		if (n != 40 || seq != (uint32_t)got)
			a->bad++;
		got++;
	}
	close(fd);
	return NULL;
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

static void test_order(void **state)
{
	struct ao_server_config cfg;
	struct ao_io_stats st;
	struct ao_server *srv;
	struct order_arg args[16];
	int nc = (int)t_scaled(16, 4), np = (int)t_scaled(2000, 300);

	base_config(&cfg, backend_of(state));
	t_watchdog_arm(120, "assist order");
	srv = start(&cfg);
	for (int i = 0; i < nc; i++)
		args[i] = (struct order_arg){ .port = ao_server_port(srv),
					      .id = i,
					      .packets = np };
	t_run_threads(nc, order_client, args, sizeof(args[0]));
	for (int i = 0; i < nc; i++)
		assert_int_equal(args[i].bad, 0);
	WAIT_UNTIL(ld(&t_closes) == (uint32_t)nc, 10000);
	assert_int_equal(ld(&t_packets), (uint32_t)(nc * np));
	/* Both paths ran: the ring's turns, and what it handed over (over
	 * the budget, and client 0 after its first slow handler). */
	assert_true(ld(&t_on_ring) > 0);
	assert_true(ld(&t_on_worker) > 0);
	/* The ring counts what it ran: every packet handler seen on it,
	 * and some of the connections' on_open / on_close items. */
	assert_int_equal(ao_server_stats(srv, -1, &st), 0);
	assert_true(st.assisted > 0);
	assert_true(st.assisted >= ld(&t_on_ring));
	assert_true(st.assisted <= ld(&t_on_ring) + 2 * (uint64_t)nc);
	finish(srv);
	t_watchdog_disarm();
}

/*
 * A handler that blocks: each of connection A's packets blocks its
 * handler.  The first may run on the ring, where it sleeps 50 ms (well
 * over the slow bound) and holds the ring up once; after it, A's turns
 * go to the workers.  So at most one of A's handlers runs on the ring,
 * and each one on a worker blocks until B, pinging meanwhile, has been
 * answered BLOCK_PINGS times: B is served while A blocks.  That is a
 * count, not a time: if B could not get through (A's turns still on the
 * ring, or B behind A), the wait runs out after 10 s and the test fails.
 */
#define BLOCK_PINGS 3

static uint32_t t_a_ring, t_a_worker, t_a_stuck, t_b_pings;

static bool on_ring(void)
{
	char name[16] = "";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	return !strncmp(name, "ao-io", 5) && ao_exec_current() == NULL;
}

static void block_a(void)
{
	uint32_t b0 = ld(&t_b_pings);
	uint64_t end = t_now_ns() + 10000000000ull;

	if (on_ring()) {
		bump(&t_a_ring);
		t_sleep_ns(50000000);
		return;
	}
	bump(&t_a_worker);
	while (ld(&t_b_pings) < b0 + BLOCK_PINGS) {
		if (t_now_ns() > end) {
			bump(&t_a_stuck);
			return;
		}
		t_sleep_ns(1000000);
	}
}

static int h_block(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	const uint8_t *d = pkt->data;

	(void)arg;
	if (pkt->len >= 1 && d[0] == 'A')
		block_a();
	else
		bump(&t_b_pings);
	bump(&t_packets);
	if (ao_conn_send_packet(c, pkt))
		bump(&t_errors);
	return 0;
}

struct blocker {
	uint16_t port;
	int n;
	int bad;
	uint32_t done; /* all n answered (or failed) */
};

/* No assert here (off the main thread): a bad answer is counted. */
static void *blocker_fn(void *arg)
{
	struct blocker *b = arg;
	int fd = t_cl_connect(b->port);
	uint8_t buf[8] = "A";

	for (int i = 0; i < b->n; i++) {
		cl_send_pkt(fd, buf, 1);
		if (cl_recv_pkt(fd, buf, sizeof(buf)) != 1 || buf[0] != 'A')
			b->bad++;
	}
	close(fd);
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_blocking_handler(void **state)
{
	struct ao_server_config cfg;
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex;
	struct ao_server *srv;
	struct blocker a;
	pthread_t th;
	int fd, pings = 0;
	uint8_t buf[8];

	base_config(&cfg, backend_of(state));
	cfg.handlers.on_open = NULL;
	cfg.handlers.on_close = NULL;
	cfg.handlers.on_packet = h_block;
	ec.workers = 2;
	assert_int_equal(ao_exec_create(&ec, &ex), 0);
	cfg.exec = ex;
	t_watchdog_arm(120, "assist, blocking handler");
	/* Before the server's threads exist (which orders it for TSan). */
	t_a_ring = t_a_worker = t_a_stuck = t_b_pings = 0;
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	a = (struct blocker){ .port = ao_server_port(srv), .n = 8 };
	assert_int_equal(pthread_create(&th, NULL, blocker_fn, &a), 0);
	/* B pings until A's 8 packets are answered. */
	while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE)) {
		cl_send_pkt(fd, (const uint8_t *)"B", 1);
		assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 1);
		assert_int_equal(buf[0], 'B');
		pings++;
		t_sleep_ns(1000000);
	}
	pthread_join(th, NULL);
	close(fd);
	assert_int_equal(a.bad, 0);
	/* A held the ring up once at most; B got through while A blocked. */
	assert_int_equal(ld(&t_a_ring) + ld(&t_a_worker), 8);
	assert_true(ld(&t_a_ring) <= 1);
	assert_int_equal(ld(&t_a_stuck), 0);
	assert_true(pings >= 7 * BLOCK_PINGS);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ld(&t_errors), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
}

/* With AO_SERVER_RING_HANDLERS the flag changes nothing: every handler
 * on the ring, outside any strand. */
static int h_ring(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	where();
	if (ao_strand_current() != NULL)
		bump(&t_errors);
	bump(&t_packets);
	if (ao_conn_send_packet(c, pkt))
		bump(&t_errors);
	return 0;
}

static void test_ring_handlers_win(void **state)
{
	struct ao_server_config cfg;
	struct ao_io_stats st;
	struct ao_server *srv;
	uint8_t buf[16];
	int fd;

	base_config(&cfg, backend_of(state));
	cfg.flags |= AO_SERVER_RING_HANDLERS;
	cfg.handlers.on_open = NULL;
	cfg.handlers.on_close = NULL;
	cfg.handlers.on_packet = h_ring;
	t_watchdog_arm(30, "assist with ring handlers");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 50; i++) {
		cl_send_pkt(fd, (const uint8_t *)"ping!", 5);
		assert_int_equal(cl_recv_pkt(fd, buf, sizeof(buf)), 5);
	}
	close(fd);
	WAIT_UNTIL(ld(&t_packets) == 50, 5000);
	assert_int_equal(ld(&t_on_ring), 50);
	assert_int_equal(ld(&t_on_worker), 0);
	/* Handlers on the ring are not strand turns it took over. */
	assert_int_equal(ao_server_stats(srv, -1, &st), 0);
	assert_int_equal(st.assisted, 0);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ld(&t_errors), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	t_watchdog_disarm();
}

#define BOTH(fn)                                  \
	cmocka_unit_test_prestate(fn, &be_uring), \
		cmocka_unit_test_prestate(fn, &be_epoll)

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_order),
		BOTH(test_blocking_handler),
		BOTH(test_ring_handlers_win),
	};
	struct ao_server_config cfg;
	struct ao_server *srv;

	/* Is io_uring usable here?  Otherwise its half is skipped. */
	base_config(&cfg, AO_IO_URING);
	if (ao_server_create(&cfg, &srv) == 0) {
		uring_ok = ao_server_start(srv) == 0;
		ao_server_destroy(srv);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
