// SPDX-License-Identifier: MIT
/*
 * The server's fast paths, on both backends, with handlers on the workers
 * and on the ring (AO_SERVER_RING_HANDLERS):
 *  - raw framing with max_packet under the pool's buffer size: no packet
 *    handed to on_packet is longer than max_packet, and the stream comes
 *    back whole and in order;
 *  - several sends queued per packet (the connection's inline send-queue
 *    node and allocated ones together), with and without a length prefix
 *    (one iovec: a plain send; two or more: sendmsg), in order;
 *  - after each test the pool's in-use count is 0.
 * Loopback only, ephemeral ports, watchdog; no timing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/server.h>
#include "helpers.h"

struct mode {
	enum ao_io_backend be;
	bool ring; /* AO_SERVER_RING_HANDLERS */
	const char *name;
};

static struct mode m_uring_worker = { AO_IO_URING, false, "uring" };
static struct mode m_uring_ring = { AO_IO_URING, true, "uring ring" };
static struct mode m_epoll_worker = { AO_IO_EPOLL, false, "epoll" };
static struct mode m_epoll_ring = { AO_IO_EPOLL, true, "epoll ring" };
static bool uring_ok;

static uint32_t t_errors, t_packets, t_longest, t_closes;
static uint32_t t_max_packet; /* on_packet checks pkt->len against it */
static uint32_t t_copies; /* sends per packet */

static uint32_t ld(uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void bump(uint32_t *p)
{
	__atomic_fetch_add(p, 1, __ATOMIC_RELEASE);
}

static int h_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	uint32_t old = ld(&t_longest);

	(void)arg;
	bump(&t_packets);
	if (pkt->len > t_max_packet)
		bump(&t_errors);
	while (pkt->len > old &&
	       !__atomic_compare_exchange_n(&t_longest, &old, pkt->len, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	for (uint32_t i = 0; i < t_copies; i++)
		if (ao_conn_send_packet(c, pkt))
			bump(&t_errors);
	return 0;
}

static void h_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	(void)c;
	(void)arg;
	if (why != AO_CLOSE_EOF)
		bump(&t_errors);
	bump(&t_closes);
}

static const struct mode *mode_of(void **state)
{
	const struct mode *m = *state;

	if (m->be == AO_IO_URING && !uring_ok)
		skip();
	return m;
}

static struct ao_server *start(const struct mode *m, enum ao_frame_kind kind,
			       uint32_t max_packet, uint32_t copies)
{
	struct ao_server_config cfg;
	struct ao_server *srv;

	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = m->be;
	cfg.framing.kind = kind;
	cfg.framing.max_packet = max_packet;
	cfg.pool_buffers = 512;
	cfg.drain_timeout_ms = 2000;
	cfg.flags = AO_SERVER_QUIET | (m->ring ? AO_SERVER_RING_HANDLERS : 0);
	cfg.handlers.on_packet = h_packet;
	cfg.handlers.on_close = h_close;
	t_errors = t_packets = t_longest = t_closes = 0;
	t_max_packet = max_packet;
	t_copies = copies;
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	assert_int_equal(ao_server_backend(srv), m->be);
	return srv;
}

static void finish(struct ao_server *srv)
{
	for (int i = 0; i < 5000 && ld(&t_closes) < 1; i++)
		t_sleep_ns(1000000);
	assert_int_equal(ld(&t_closes), 1);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ld(&t_errors), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
}

/*
 * Raw framing, max_packet 100 with 2048-byte pool buffers: writes of up to
 * 1900 bytes must reach on_packet in pieces of at most 100 bytes (a
 * receive may not fill the whole buffer), and come back whole.
 */
static void test_raw_max_packet(void **state)
{
	const struct mode *m = mode_of(state);
	uint8_t out[1900], in[1900];
	struct ao_server *srv;
	size_t total = 0;
	int fd;

	t_watchdog_arm(30, "raw max_packet");
	srv = start(m, AO_FRAME_RAW, 100, 1);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 40; i++) {
		size_t n = 1000 + (size_t)i * 23;

		for (size_t j = 0; j < n; j++)
			out[j] = (uint8_t)(i * 7 + j);
		t_cl_write(fd, out, n);
		assert_int_equal(t_cl_read(fd, in, n), 0);
		assert_memory_equal(in, out, n);
		total += n;
	}
	close(fd);
	finish(srv);
	assert_true(ld(&t_longest) <= 100);
	assert_true(ld(&t_packets) >= total / 100);
	t_watchdog_disarm();
}

/* Each packet is sent back three times: the queue holds several nodes at
 * once (inline and allocated), and with a prefix each takes two iovecs. */
static void copies(void **state, enum ao_frame_kind kind)
{
	const struct mode *m = mode_of(state);
	size_t h = kind == AO_FRAME_LEN16 ? 2 : 0;
	uint8_t out[2 + 600], in[3 * (2 + 600)];
	struct ao_server *srv;
	int fd;

	t_watchdog_arm(30, "copies");
	srv = start(m, kind, 4096, 3);
	fd = t_cl_connect(ao_server_port(srv));
	for (int i = 0; i < 200; i++) {
		uint32_t n = 1 + (uint32_t)(i * 31) % 600;

		if (h) {
			out[0] = (uint8_t)(n >> 8);
			out[1] = (uint8_t)n;
		}
		for (uint32_t j = 0; j < n; j++)
			out[h + j] = (uint8_t)(i + j * 3);
		t_cl_write(fd, out, h + n);
		if (!h) {
			/* Raw: a write may come in as several packets, each
			 * sent three times; check the bytes only. */
			assert_int_equal(t_cl_read(fd, in, 3 * n), 0);
			continue;
		}
		assert_int_equal(t_cl_read(fd, in, 3 * (h + n)), 0);
		for (int k = 0; k < 3; k++)
			assert_memory_equal(in + (size_t)k * (h + n), out,
					    h + n);
	}
	close(fd);
	finish(srv);
	assert_true(ld(&t_packets) >= 200);
	t_watchdog_disarm();
}

static void test_copies_len16(void **state)
{
	copies(state, AO_FRAME_LEN16);
}

static void test_copies_raw(void **state)
{
	copies(state, AO_FRAME_RAW);
}

#define ALL_MODES(fn)                                           \
	cmocka_unit_test_prestate(fn, &m_uring_worker),         \
		cmocka_unit_test_prestate(fn, &m_uring_ring),   \
		cmocka_unit_test_prestate(fn, &m_epoll_worker), \
		cmocka_unit_test_prestate(fn, &m_epoll_ring)

int main(void)
{
	const struct CMUnitTest tests[] = {
		ALL_MODES(test_raw_max_packet),
		ALL_MODES(test_copies_len16),
		ALL_MODES(test_copies_raw),
	};
	struct ao_server_config cfg;
	struct ao_server *srv;

	/* io_uring usable here? */
	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = AO_IO_URING;
	cfg.flags = AO_SERVER_QUIET;
	cfg.pool_buffers = 64;
	if (ao_server_create(&cfg, &srv) == 0) {
		uring_ok = ao_server_start(srv) == 0;
		ao_server_destroy(srv);
	}
	if (!uring_ok)
		fprintf(stderr, "io_uring unusable: its cases are skipped\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
