// SPDX-License-Identifier: MIT
/*
 * WebSocket and plain HTTP in the server, on both backends (and with ring
 * handlers where the handler path differs): the upgrade and echo,
 * fragments with a ping between them, ping/pong, the close handshake,
 * each protocol error's close code (and that only that connection
 * closed), the header deadline and size bound, plain GETs through on_http
 * (answered in the handler or from another thread) and the 404 without
 * it, len16 and HTTP sniffed on one port, the server's pings, and frame
 * once, send to many: one buffer broadcast to 1, 10 and 1000 WebSocket
 * connections writes one header and takes no other pool buffer; no data
 * frame after the server's close frame, whatever closes the connection
 * while another thread sends.
 * Loopback only, ephemeral ports, bounded by a watchdog.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/server.h>
#include "helpers.h"

/* ---- what the handlers saw ---- */

static uint32_t t_closes[AO_CLOSE_NR];
static uint32_t t_opens, t_errors, t_https, t_heads;
static struct ao_conn *t_conns[1100];
static uint32_t t_nconns;
static struct ao_conn *t_http_conn;
static uint32_t t_slots;

static void reset_counters(void)
{
	memset(t_closes, 0, sizeof(t_closes));
	__atomic_store_n(&t_opens, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_errors, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_https, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_heads, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_nconns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_slots, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t_http_conn, NULL, __ATOMIC_RELAXED);
}

static uint32_t closes(enum ao_close_reason why)
{
	return __atomic_load_n(&t_closes[why], __ATOMIC_ACQUIRE);
}

static void h_open(struct ao_conn *c, void *arg)
{
	(void)arg;
	if (ao_conn_proto(c) == AO_CONN_HTTP)
		__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t_opens, 1, __ATOMIC_RELEASE);
}

/* Keeps a handle on every connection (the broadcast tests). */
static void h_open_keep(struct ao_conn *c, void *arg)
{
	/* on_open of different connections may run at once. */
	uint32_t i = __atomic_fetch_add(&t_slots, 1, __ATOMIC_RELAXED);

	(void)arg;
	t_conns[i] = ao_conn_get(c);
	/* Release: the slot before the count; the reader's acquire load of
	 * the final count pairs with every increment (a release sequence). */
	__atomic_fetch_add(&t_nconns, 1, __ATOMIC_RELEASE);
}

static void h_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	(void)c;
	(void)arg;
	__atomic_fetch_add(&t_closes[why], 1, __ATOMIC_RELEASE);
}

static int h_echo(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	if (pkt->len == 4 && !memcmp(pkt->data, "fail", 4))
		return -EPROTO;
	return ao_conn_send_packet(c, pkt);
}

static void h_http(struct ao_conn *c, const struct ao_http_request *req,
		   void *arg)
{
	char body[300];
	int n;

	(void)arg;
	__atomic_fetch_add(&t_https, 1, __ATOMIC_RELEASE);
	if (req->head)
		__atomic_fetch_add(&t_heads, 1, __ATOMIC_RELEASE);
	if (ao_conn_proto(c) != AO_CONN_HTTP)
		__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	if (req->path_len == 6 && !memcmp(req->path, "/later", 6)) {
		/* Answered from the test's thread. */
		__atomic_store_n(&t_http_conn, ao_conn_get(c),
				 __ATOMIC_RELEASE);
		return;
	}
	n = snprintf(body, sizeof(body), "path %.*s", (int)req->path_len,
		     req->path);
	if (ao_http_reply(c, 200, "text/plain", body, (size_t)n))
		__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	/* Once only. */
	if (ao_http_reply(c, 200, "text/plain", "x", 1) != -EINVAL)
		__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
}

/* ---- server set-up ---- */

struct mode {
	enum ao_io_backend be;
	unsigned int flags;
};

static bool uring_ok;
static struct mode m_uring = { AO_IO_URING, 0 };
static struct mode m_uring_ring = { AO_IO_URING, AO_SERVER_RING_HANDLERS };
static struct mode m_epoll = { AO_IO_EPOLL, 0 };
static struct mode m_epoll_ring = { AO_IO_EPOLL, AO_SERVER_RING_HANDLERS };

#define BOTH(fn)                                 \
	cmocka_unit_test_prestate(fn, &m_uring), \
		cmocka_unit_test_prestate(fn, &m_epoll)
#define ALL_MODES(fn)                                         \
	cmocka_unit_test_prestate(fn, &m_uring),              \
		cmocka_unit_test_prestate(fn, &m_uring_ring), \
		cmocka_unit_test_prestate(fn, &m_epoll),      \
		cmocka_unit_test_prestate(fn, &m_epoll_ring)

static const char *const t_protocols[] = { "aorta.v1", "chat", NULL };

static void base_config(void **state, struct ao_server_config *cfg)
{
	const struct mode *m = *state;

	if (m->be == AO_IO_URING && !uring_ok) {
		print_message("io_uring unavailable: skip\n");
		skip();
	}
	memset(cfg, 0, sizeof(*cfg));
	cfg->backend = m->be;
	cfg->framing.kind = AO_FRAME_WS;
	cfg->framing.max_packet = 4096;
	cfg->pool_buffers = 1024;
	cfg->drain_timeout_ms = 2000;
	cfg->flags = AO_SERVER_QUIET | m->flags;
	cfg->ws.protocols = t_protocols;
	cfg->handlers.on_open = h_open;
	cfg->handlers.on_packet = h_echo;
	cfg->handlers.on_close = h_close;
	cfg->handlers.on_http = h_http;
}

static struct ao_server *start(struct ao_server_config *cfg)
{
	struct ao_server *srv;

	reset_counters();
	assert_int_equal(ao_server_create(cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	return srv;
}

static void finish(struct ao_server *srv)
{
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	assert_int_equal(__atomic_load_n(&t_errors, __ATOMIC_RELAXED), 0);
}

static struct ao_io_stats stats(struct ao_server *srv)
{
	struct ao_io_stats st;

	assert_int_equal(ao_server_stats(srv, -1, &st), 0);
	return st;
}

/* ---- a blocking WebSocket client ---- */

static void cl_puts(int fd, const char *s)
{
	t_cl_write(fd, s, strlen(s));
}

/* Read the response head (up to the blank line) into buf; its length. */
static size_t cl_read_head(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		assert_int_equal(t_cl_read(fd, buf + n, 1), 0);
		n++;
		if (n >= 4 && !memcmp(buf + n - 4, "\r\n\r\n", 4))
			break;
	}
	buf[n] = '\0';
	return n;
}

/* Connect and upgrade (offering protocols, may be NULL); asserts 101. */
static int ws_connect(uint16_t port, const char *protocols)
{
	char req[512], resp[1024];
	int fd = t_cl_connect(port), n;

	n = snprintf(req, sizeof(req),
		     "GET /play HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "Upgrade: websocket\r\nConnection: Upgrade\r\n"
		     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		     "Sec-WebSocket-Version: 13\r\n"
		     "Sec-WebSocket-Extensions: permessage-deflate\r\n"
		     "%s%s%s\r\n",
		     protocols ? "Sec-WebSocket-Protocol: " : "",
		     protocols ? protocols : "", protocols ? "\r\n" : "");
	t_cl_write(fd, req, (size_t)n);
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 101 "));
	/* RFC 6455 section 1.3's example key and answer. */
	assert_non_null(strstr(resp, "Sec-WebSocket-Accept: "
				     "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
	/* permessage-deflate declined. */
	assert_null(strstr(resp, "Extensions"));
	if (protocols && strstr(protocols, "chat"))
		assert_non_null(strstr(resp, "Sec-WebSocket-Protocol: "));
	return fd;
}

/* Send a frame: b0 is FIN|RSV|opcode as on the wire; masked unless
 * !mask. */
static void ws_send_raw(int fd, uint8_t b0, bool mask, const void *p, size_t n)
{
	static const uint8_t key[4] = { 0x37, 0xfa, 0x21, 0x3d };
	uint8_t *f = malloc(n + 14);
	size_t h = 0;

	assert_non_null(f);
	f[h++] = b0;
	if (n < 126) {
		f[h++] = (uint8_t)((mask ? 0x80 : 0) | n);
	} else if (n <= 0xffff) {
		f[h++] = (uint8_t)((mask ? 0x80 : 0) | 126);
		f[h++] = (uint8_t)(n >> 8);
		f[h++] = (uint8_t)n;
	} else {
		f[h++] = (uint8_t)((mask ? 0x80 : 0) | 127);
		for (int i = 7; i >= 0; i--)
			f[h++] = (uint8_t)((uint64_t)n >> (8 * i));
	}
	if (mask) {
		memcpy(f + h, key, 4);
		h += 4;
	}
	for (size_t i = 0; i < n; i++)
		f[h + i] = ((const uint8_t *)p)[i] ^ (mask ? key[i % 4] : 0);
	t_cl_write(fd, f, h + n);
	free(f);
}

static void ws_send(int fd, uint8_t op, const void *p, size_t n)
{
	ws_send_raw(fd, (uint8_t)(0x80 | op), true, p, n);
}

/* One frame: its first byte in *b0, payload into p (max); the length or
 * -1 (EOF, error). */
static int ws_recv(int fd, uint8_t *b0, void *p, size_t max)
{
	uint8_t h[8];
	uint64_t n;

	if (t_cl_read(fd, h, 2))
		return -1;
	*b0 = h[0];
	assert_false(h[1] & 0x80); /* server frames are never masked */
	n = h[1] & 0x7f;
	if (n == 126) {
		if (t_cl_read(fd, h, 2))
			return -1;
		n = (uint64_t)h[0] << 8 | h[1];
	} else if (n == 127) {
		if (t_cl_read(fd, h, 8))
			return -1;
		n = 0;
		for (int i = 0; i < 8; i++)
			n = n << 8 | h[i];
	}
	assert_true(n <= max);
	if (n && t_cl_read(fd, p, (size_t)n))
		return -1;
	return (int)n;
}

static void ws_echo_once(int fd, const void *msg, size_t n)
{
	static uint8_t got[70000];
	uint8_t b0;

	ws_send(fd, 0x2, msg, n);
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), (int)n);
	assert_int_equal(b0, 0x82);
	assert_memory_equal(got, msg, n);
}

/* True if the peer closed fd within ms (bytes before the EOF ignored). */
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

/* The server's close frame (skipping other frames): its code (1005 for
 * none), then the TCP close. */
static int ws_expect_close(int fd)
{
	uint8_t b0, p[128];
	int n, code;

	for (;;) {
		n = ws_recv(fd, &b0, p, sizeof(p));
		assert_true(n >= 0);
		if ((b0 & 0x0f) == 0x8)
			break;
	}
	assert_int_equal(b0, 0x88);
	code = n >= 2 ? p[0] << 8 | p[1] : 1005;
	assert_true(cl_closed_within(fd, 5000));
	return code;
}

/* ---- upgrade and echo ---- */

static void test_upgrade_echo(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats st;
	static uint8_t big[4096];
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "ws echo");
	srv = start(&cfg);
	fd = ws_connect(ao_server_port(srv), "chat, aorta.v1");
	WAIT_UNTIL(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE) == 1, 2000);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	ws_echo_once(fd, "hello, aorta", 12);
	ws_echo_once(fd, "", 0);
	ws_echo_once(fd, big, 125);
	ws_echo_once(fd, big, 126);
	ws_echo_once(fd, big, 4096);
	/* Text messages arrive as packets too (sent back as binary). */
	{
		uint8_t b0, got[16];

		ws_send(fd, 0x1, "h\xc3\xa9llo", 6);
		assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 6);
		assert_memory_equal(got, "h\xc3\xa9llo", 6);
	}
	st = stats(srv);
	assert_int_equal(st.ws_upgrades, 1);
	assert_int_equal(st.packets_in, 6);
	/* A normal close handshake from the client. */
	ws_send(fd, 0x8,
		"\x03\xe8"
		"bye",
		5);
	assert_int_equal(ws_expect_close(fd), 1000);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_WS_CLOSE) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* Which subprotocol: the server's preference among the client's. */
static void test_subprotocol(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[1024];
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "ws subprotocol");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		    "Connection: Upgrade\r\n"
		    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		    "Sec-WebSocket-Version: 13\r\n"
		    "Sec-WebSocket-Protocol: chat, aorta.v1\r\n\r\n");
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "Sec-WebSocket-Protocol: aorta.v1\r\n"));
	close(fd);
	/* A wrong version: 426 naming 13, and the connection closes. */
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		    "Connection: Upgrade\r\n"
		    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		    "Sec-WebSocket-Version: 8\r\n\r\n");
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 426 "));
	assert_non_null(strstr(resp, "Sec-WebSocket-Version: 13"));
	assert_true(cl_closed_within(fd, 5000));
	close(fd);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	/* The refused one got no on_open, so no on_close either. */
	assert_int_equal(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE), 1);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- fragments, control frames between them ---- */

static void test_fragments(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t b0, got[64];
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "ws fragments");
	srv = start(&cfg);
	fd = ws_connect(ao_server_port(srv), NULL);
	ws_send_raw(fd, 0x02, true, "frag", 4); /* binary, no FIN */
	ws_send_raw(fd, 0x89, true, "pi", 2); /* a ping between */
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 2);
	assert_int_equal(b0, 0x8a);
	assert_memory_equal(got, "pi", 2);
	ws_send_raw(fd, 0x00, true, "ment", 4);
	ws_send_raw(fd, 0x00, true, "", 0);
	ws_send_raw(fd, 0x80, true, "s!", 2);
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 10);
	assert_int_equal(b0, 0x82);
	assert_memory_equal(got, "fragments!", 10);
	/* A text code point split across fragments. */
	ws_send_raw(fd, 0x01, true, "\xe2\x82", 2);
	ws_send_raw(fd, 0x80, true, "\xac", 1);
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 3);
	assert_memory_equal(got, "\xe2\x82\xac", 3);
	/* One byte at a time: header, mask and payload split everywhere. */
	{
		static const uint8_t f[] = { 0x82, 0x83,    1,	     2,	     3,
					     4,	   'a' ^ 1, 'b' ^ 2, 'c' ^ 3 };

		for (size_t i = 0; i < sizeof(f); i++) {
			t_cl_write(fd, f + i, 1);
			t_sleep_ns(200000);
		}
		assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 3);
		assert_memory_equal(got, "abc", 3);
	}
	assert_int_equal(stats(srv).packets_in, 3);
	close(fd);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- protocol errors: the close code, and only that connection ---- */

struct bad {
	const char *what;
	uint8_t b0;
	bool mask;
	const char *p;
	size_t n;
	int code;
	enum ao_close_reason why;
};

static void test_protocol_errors(void **state)
{
	static char big[5000];
	const struct bad bad[] = {
		{ "unmasked", 0x82, false, "x", 1, 1002, AO_CLOSE_WS_ERROR },
		{ "rsv1", 0xc2, true, "x", 1, 1002, AO_CLOSE_WS_ERROR },
		{ "rsv3", 0x92, true, "x", 1, 1002, AO_CLOSE_WS_ERROR },
		{ "opcode 3", 0x83, true, "x", 1, 1002, AO_CLOSE_WS_ERROR },
		{ "opcode 11", 0x8b, true, "x", 1, 1002, AO_CLOSE_WS_ERROR },
		{ "continuation first", 0x80, true, "x", 1, 1002,
		  AO_CLOSE_WS_ERROR },
		{ "fragmented ping", 0x09, true, "x", 1, 1002,
		  AO_CLOSE_WS_ERROR },
		{ "long ping", 0x89, true, big, 126, 1002, AO_CLOSE_WS_ERROR },
		{ "bad utf-8", 0x81, true, "\xc3\x28", 2, 1007,
		  AO_CLOSE_WS_ERROR },
		{ "surrogate", 0x81, true, "\xed\xa0\x80", 3, 1007,
		  AO_CLOSE_WS_ERROR },
		{ "too big", 0x82, true, big, 4097, 1009, AO_CLOSE_TOO_LONG },
		{ "close code 999", 0x88, true, "\x03\xe7", 2, 1002,
		  AO_CLOSE_WS_ERROR },
		{ "close code 1005", 0x88, true, "\x03\xed", 2, 1002,
		  AO_CLOSE_WS_ERROR },
		{ "close 1 byte", 0x88, true, "\x03", 1, 1002,
		  AO_CLOSE_WS_ERROR },
		{ "close bad reason", 0x88, true, "\x03\xe8\xff", 3, 1007,
		  AO_CLOSE_WS_ERROR },
		{ "on_packet fails", 0x82, true, "fail", 4, 1008,
		  AO_CLOSE_PROTOCOL },
		{ "close no code", 0x88, true, "", 0, 1005, AO_CLOSE_WS_CLOSE },
		{ "close 4000", 0x88, true, "\x0f\xa0", 2, 4000,
		  AO_CLOSE_WS_CLOSE },
	};
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint32_t want[AO_CLOSE_NR] = { 0 };
	int good;

	base_config(state, &cfg);
	t_watchdog_arm(60, "ws protocol errors");
	srv = start(&cfg);
	good = ws_connect(ao_server_port(srv), NULL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = ws_connect(ao_server_port(srv), NULL);

		print_message("%s\n", bad[i].what);
		ws_echo_once(fd, "ok", 2);
		ws_send_raw(fd, bad[i].b0, bad[i].mask, bad[i].p, bad[i].n);
		assert_int_equal(ws_expect_close(fd), bad[i].code);
		close(fd);
		want[bad[i].why]++;
		WAIT_UNTIL(closes(bad[i].why) == want[bad[i].why], 5000);
		/* The other connection is untouched. */
		ws_echo_once(good, bad[i].what, strlen(bad[i].what));
	}
	close(good);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* A ping, a pong the server did not ask for (ignored), a ping with 125
 * bytes. */
static void test_ping_pong(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t b0, got[128];
	char p[125];
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "ws ping");
	srv = start(&cfg);
	fd = ws_connect(ao_server_port(srv), NULL);
	memset(p, 'p', sizeof(p));
	ws_send(fd, 0xa, "unasked", 7);
	ws_send(fd, 0x9, p, sizeof(p));
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 125);
	assert_int_equal(b0, 0x8a);
	assert_memory_equal(got, p, 125);
	ws_send(fd, 0x9, "", 0);
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 0);
	assert_int_equal(b0, 0x8a);
	ws_echo_once(fd, "after", 5);
	assert_int_equal(stats(srv).ws_pongs, 2);
	close(fd);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* The server pings a silent connection; one that answers stays, one
 * that does not is closed (1001). */
static void test_server_ping(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t b0, got[16];
	int live, dead;

	base_config(state, &cfg);
	cfg.ws.ping_ms = 100;
	cfg.ws.pong_timeout_ms = 300;
	t_watchdog_arm(30, "ws server ping");
	srv = start(&cfg);
	live = ws_connect(ao_server_port(srv), NULL);
	dead = ws_connect(ao_server_port(srv), NULL);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ws_recv(live, &b0, got, sizeof(got)), 0);
		assert_int_equal(b0, 0x89);
		ws_send(live, 0xa, "", 0);
	}
	assert_int_equal(ws_expect_close(dead), 1001);
	close(dead);
	WAIT_UNTIL(closes(AO_CLOSE_WS_PONG) == 1, 5000);
	ws_echo_once(live, "alive", 5);
	assert_true(stats(srv).ws_pings >= 4);
	close(live);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ao_conn_close() and ao_server_stop() send their close frames (1000,
 * 1001) after what was sent before. */
static int h_echo_close(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	ao_conn_send_packet(c, pkt);
	if (pkt->len == 3 && !memcmp(pkt->data, "bye", 3))
		ao_conn_close(c);
	return 0;
}

static void test_local_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	uint8_t b0, got[16];
	int fd, fd2;

	base_config(state, &cfg);
	cfg.handlers.on_packet = h_echo_close;
	t_watchdog_arm(30, "ws local close");
	srv = start(&cfg);
	fd = ws_connect(ao_server_port(srv), NULL);
	fd2 = ws_connect(ao_server_port(srv), NULL);
	ws_send(fd, 0x2, "bye", 3);
	assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 3);
	assert_int_equal(ws_expect_close(fd), 1000);
	WAIT_UNTIL(closes(AO_CLOSE_LOCAL) == 1, 5000);
	ws_echo_once(fd2, "x", 1);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ws_expect_close(fd2), 1001);
	close(fd);
	close(fd2);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- the request head: deadline, size, errors ---- */

static void test_header_deadline(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[512];
	int fd, good;

	base_config(state, &cfg);
	cfg.ws.header_timeout_ms = 200;
	t_watchdog_arm(30, "ws header deadline");
	srv = start(&cfg);
	good = ws_connect(ao_server_port(srv), NULL);
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET / HTTP/1.1\r\nHost: slow");
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 408 "));
	assert_true(cl_closed_within(fd, 5000));
	close(fd);
	WAIT_UNTIL(stats(srv).closes[AO_CLOSE_HTTP_TIMEOUT] == 1, 5000);
	/* A connection that says nothing at all, too. */
	fd = t_cl_connect(ao_server_port(srv));
	assert_true(cl_closed_within(fd, 5000));
	close(fd);
	ws_echo_once(good, "still", 5);
	close(good);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* req on a new connection is answered with status, then closed within
 * ms. */
static void expect_refused(struct ao_server *srv, const char *req,
			   const char *status, int ms)
{
	char resp[1024], want[32];
	int fd = t_cl_connect(ao_server_port(srv));

	snprintf(want, sizeof(want), "HTTP/1.1 %s ", status);
	cl_puts(fd, req);
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, want));
	assert_true(cl_closed_within(fd, ms));
	close(fd);
}

static void test_header_limit(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char req[1024], resp[512];
	int fd;

	base_config(state, &cfg);
	cfg.ws.header_max = 256;
	t_watchdog_arm(30, "ws header limit");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	memset(req, 'a', sizeof(req));
	memcpy(req, "GET / HTTP/1.1\r\nX-Long: ", 24);
	t_cl_write(fd, req, sizeof(req));
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 413 "));
	assert_true(cl_closed_within(fd, 5000));
	close(fd);
	/* Not a GET: 405. */
	expect_refused(srv, "POST / HTTP/1.1\r\nHost: x\r\n\r\n", "405", 5000);
	/* Lines ended by LF alone (a hand-made client): 400 at once, not
	 * 408 at the deadline. */
	expect_refused(srv, "GET / HTTP/1.1\nHost: x\n\n", "400", 2000);
	WAIT_UNTIL(stats(srv).closes[AO_CLOSE_HTTP_BAD] == 3, 5000);
	assert_int_equal(stats(srv).http_errors, 3);
	finish(srv);
	t_watchdog_disarm();
}

/*
 * Cross-site WebSocket hijacking: with ws.origins set, a page of another
 * site (its browser says so in Origin) gets 403 and the close; a listed
 * Origin, or none (not a browser), gets its WebSocket.
 */
static void test_origin(void **state)
{
	static const char *const origins[] = { "http://127.0.0.1:8080", NULL };
	static const char up[] =
		"GET /play HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		"Upgrade: websocket\r\nConnection: Upgrade\r\n"
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		"Sec-WebSocket-Version: 13\r\n";
	struct ao_server_config cfg;
	struct ao_server *srv;
	char req[512], resp[512];
	int fd;

	base_config(state, &cfg);
	cfg.ws.origins = origins;
	t_watchdog_arm(30, "ws origin");
	srv = start(&cfg);
	snprintf(req, sizeof(req), "%sOrigin: http://evil.example\r\n\r\n", up);
	expect_refused(srv, req, "403", 5000);
	/* No Origin: a program, not a page. */
	fd = ws_connect(ao_server_port(srv), NULL);
	ws_echo_once(fd, "no origin", 9);
	close(fd);
	fd = t_cl_connect(ao_server_port(srv));
	snprintf(req, sizeof(req), "%sOrigin: http://127.0.0.1:8080\r\n\r\n",
		 up);
	cl_puts(fd, req);
	cl_read_head(fd, resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 101 "));
	ws_echo_once(fd, "listed", 6);
	close(fd);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	assert_int_equal(stats(srv).ws_upgrades, 2);
	assert_int_equal(stats(srv).closes[AO_CLOSE_HTTP_BAD], 1);
	assert_int_equal(stats(srv).http_errors, 1);
	assert_int_equal(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE), 2);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- plain GETs ---- */

/* Everything up to the server's FIN (at most cap - 1 bytes). */
static size_t cl_read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);

		if (r > 0)
			n += (size_t)r;
		else if (r < 0 && errno == EINTR)
			continue; /* a signal */
		else
			break;
	}
	return n;
}

/* Read fd's whole answer, check that it holds head (if any) and body,
 * and close fd. */
static void read_answer(int fd, const char *head, const char *body)
{
	char resp[1024];
	size_t n = cl_read_all(fd, resp, sizeof(resp));

	resp[n] = '\0';
	if (head)
		assert_non_null(strstr(resp, head));
	assert_non_null(strstr(resp, body));
	close(fd);
}

/* The connection on_http kept for a later answer (a reference of ours). */
static struct ao_conn *kept_http_conn(void)
{
	struct ao_conn *c;

	WAIT_UNTIL((c = __atomic_load_n(&t_http_conn, __ATOMIC_ACQUIRE)) !=
			   NULL,
		   5000);
	return c;
}

static void http_get(uint16_t port, const char *path, char *resp, size_t cap)
{
	char req[256];
	size_t n = 0;
	int fd = t_cl_connect(port), k;

	k = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n",
		     path);
	t_cl_write(fd, req, (size_t)k);
	n = cl_read_all(fd, resp, cap);
	resp[n] = '\0';
	close(fd);
}

static void test_http_get(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_conn *c;
	char resp[1024];
	pthread_t th;

	base_config(state, &cfg);
	t_watchdog_arm(30, "http get");
	srv = start(&cfg);
	http_get(ao_server_port(srv), "/index.html", resp, sizeof(resp));
	if (!strstr(resp, "HTTP/1.1 200 OK\r\n")) {
		struct ao_io_stats st = stats(srv);

		print_message("got: [%s] errors %u https %u\n", resp, t_errors,
			      t_https);
		for (int i = 0; i < AO_CLOSE_NR; i++)
			if (st.closes[i])
				print_message("closes %s %llu\n",
					      ao_close_reason_name(i),
					      (unsigned long long)st.closes[i]);
	}
	assert_non_null(strstr(resp, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(resp, "Content-Length: 16\r\n"));
	assert_non_null(strstr(resp, "Content-Type: text/plain\r\n"));
	assert_non_null(strstr(resp, "\r\n\r\npath /index.html"));
	/* Answered later, from another thread. */
	{
		int fd = t_cl_connect(ao_server_port(srv));

		cl_puts(fd, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
		c = kept_http_conn();
		(void)th;
		assert_int_equal(ao_http_reply(c, 503, "text/plain", "busy", 4),
				 0);
		assert_int_equal(ao_http_reply(c, 200, "text/plain", "x", 1),
				 -EINVAL);
		read_answer(fd, "HTTP/1.1 503 ", "\r\n\r\nbusy");
		WAIT_UNTIL(!ao_conn_is_open(c), 5000);
		ao_conn_put(c);
	}
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	assert_int_equal(stats(srv).http_requests, 2);
	assert_int_equal(stats(srv).closes[AO_CLOSE_HTTP_DONE], 2);
	/* Plain HTTP connections get neither on_open nor on_close. */
	assert_int_equal(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE), 0);
	for (int i = 0; i < AO_CLOSE_NR; i++)
		assert_int_equal(closes(i), 0);
	finish(srv);
	t_watchdog_disarm();
}

static void test_http_404(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[1024];

	base_config(state, &cfg);
	cfg.handlers.on_http = NULL;
	t_watchdog_arm(30, "http 404");
	srv = start(&cfg);
	http_get(ao_server_port(srv), "/x", resp, sizeof(resp));
	assert_non_null(strstr(resp, "HTTP/1.1 404 "));
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* The whole answer to GET path, which on_http keeps: status must be
 * refused as given, then the reply made with status ok and body. */
static void reply_later(struct ao_server *srv, const char *path, int ok,
			const char *body, char *resp, size_t cap)
{
	char req[128];
	struct ao_conn *c;
	size_t n;
	int fd = t_cl_connect(ao_server_port(srv));

	__atomic_store_n(&t_http_conn, NULL, __ATOMIC_RELAXED);
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	cl_puts(fd, req);
	c = kept_http_conn();
	assert_int_equal(ao_http_reply(c, ok, "text/plain", body,
				       body ? strlen(body) : 0),
			 0);
	n = cl_read_all(fd, resp, cap);
	resp[n] = '\0';
	close(fd);
	WAIT_UNTIL(!ao_conn_is_open(c), 5000);
	ao_conn_put(c);
}

/*
 * RFC 9110: an answer is final (2xx to 5xx; a 1xx is not one, and the 101
 * of an upgrade is the library's own); a 204 has no content and no
 * Content-Length, and a 304 no content (its Content-Length would have to
 * be the 200's).
 */
static void test_http_status(void **state)
{
	static const int refused[] = { 0, 99, 100, 101, 103, 199, 600, 999 };
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_conn *c;
	char resp[1024];
	size_t i;
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "http status");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
	c = kept_http_conn();
	for (i = 0; i < ARRAY_SIZE(refused); i++)
		assert_int_equal(ao_http_reply(c, refused[i], "text/plain", "x",
					       1),
				 -EINVAL);
	/* No content in a 204 or a 304. */
	assert_int_equal(ao_http_reply(c, 204, "text/plain", "x", 1), -EINVAL);
	assert_int_equal(ao_http_reply(c, 304, NULL, "x", 1), -EINVAL);
	/* None of those answered: this one does. */
	assert_int_equal(ao_http_reply(c, 599, "text/plain", "last", 4), 0);
	read_answer(fd, "HTTP/1.1 599 ", "\r\n\r\nlast");
	WAIT_UNTIL(!ao_conn_is_open(c), 5000);
	ao_conn_put(c);
	reply_later(srv, "/later", 204, NULL, resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 204 No Content\r\n"));
	assert_null(strstr(resp, "Content-Length"));
	/* Nothing after the head. */
	assert_non_null(strstr(resp, "\r\n\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	reply_later(srv, "/later", 304, "", resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 304 Not Modified\r\n"));
	assert_null(strstr(resp, "Content-Length"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	reply_later(srv, "/later", 200, "", resp, sizeof(resp));
	assert_non_null(strstr(resp, "\r\nContent-Length: 0\r\n"));
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* The whole answer to raw request req. */
static void http_raw(uint16_t port, const char *req, char *resp, size_t cap)
{
	size_t n;
	int fd = t_cl_connect(port);

	cl_puts(fd, req);
	n = cl_read_all(fd, resp, cap);
	resp[n] = '\0';
	close(fd);
}

/*
 * HEAD (RFC 9110 section 9.3.2): on_http sees it (req->head) and answers
 * as for GET; the client gets the same status line and headers, the
 * Content-Length of the body included, and no body.  The same for the
 * library's own 404 (no on_http) and its errors.
 */
static void test_http_head(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[1024];

	base_config(state, &cfg);
	t_watchdog_arm(30, "http head");
	srv = start(&cfg);
	http_raw(ao_server_port(srv),
		 "HEAD /index.html HTTP/1.1\r\nHost: x\r\n\r\n", resp,
		 sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 200 OK\r\n"));
	/* "path /index.html", as a GET gets it. */
	assert_non_null(strstr(resp, "\r\nContent-Length: 16\r\n"));
	assert_non_null(strstr(resp, "\r\nContent-Type: text/plain\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	assert_int_equal(__atomic_load_n(&t_heads, __ATOMIC_ACQUIRE), 1);
	/* The GET's answer, for comparison, and GETs are not HEADs. */
	http_get(ao_server_port(srv), "/index.html", resp, sizeof(resp));
	assert_non_null(strstr(resp, "\r\n\r\npath /index.html"));
	assert_int_equal(__atomic_load_n(&t_heads, __ATOMIC_ACQUIRE), 1);
	/* HTTP/1.0, and with the headers of an upgrade: still plain. */
	http_raw(ao_server_port(srv), "HEAD /a HTTP/1.0\r\n\r\n", resp,
		 sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(resp, "\r\nContent-Length: 7\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	http_raw(ao_server_port(srv),
		 "HEAD /play HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		 "Connection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		 "Sec-WebSocket-Version: 13\r\n\r\n",
		 resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(resp, "\r\nContent-Length: 10\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	/* An error answer has no body either way. */
	http_raw(ao_server_port(srv), "HEAD / HTTP/1.1\r\n\r\n", resp,
		 sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 400 "));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	/* 405 names HEAD among the methods allowed. */
	http_raw(ao_server_port(srv), "POST / HTTP/1.1\r\nHost: x\r\n\r\n",
		 resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 405 "));
	assert_non_null(strstr(resp, "\r\nAllow: GET, HEAD\r\n"));
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	assert_int_equal(stats(srv).http_requests, 4);
	assert_int_equal(__atomic_load_n(&t_heads, __ATOMIC_ACQUIRE), 3);
	finish(srv);
	/* The library's own 404: its Content-Length, no body. */
	base_config(state, &cfg);
	cfg.handlers.on_http = NULL;
	srv = start(&cfg);
	http_raw(ao_server_port(srv), "HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n",
		 resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 404 "));
	assert_non_null(strstr(resp, "\r\nContent-Length: 10\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/*
 * What clients we did not write send: the absolute-form of a target (RFC
 * 9112 section 3.2.2: a server MUST accept it), seen by on_http as its
 * path; empty lines before the request line (section 2.2), in pieces.
 */
static void test_http_target_forms(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[1024];
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "http target forms");
	srv = start(&cfg);
	http_raw(ao_server_port(srv),
		 "GET http://example.com:80/abs?q=1 HTTP/1.1\r\nHost: x\r\n"
		 "\r\n",
		 resp, sizeof(resp));
	assert_true(starts(resp, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(resp, "\r\n\r\npath /abs?q=1"));
	http_raw(ao_server_port(srv),
		 "GET http://example.com HTTP/1.1\r\nHost: x\r\n\r\n", resp,
		 sizeof(resp));
	assert_non_null(strstr(resp, "\r\n\r\npath /"));
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "\r");
	t_sleep_ns(20000000);
	cl_puts(fd, "\n\r\n");
	t_sleep_ns(20000000);
	cl_puts(fd, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
	read_answer(fd, "HTTP/1.1 200 OK\r\n", "\r\n\r\npath /after");
	/* A bare LF is still a 400 at once. */
	expect_refused(srv, "\r\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "400",
		       2000);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	assert_int_equal(stats(srv).http_requests, 3);
	finish(srv);
	t_watchdog_disarm();
}

static int t_late_ret;

static void *late_reply(void *arg)
{
	t_sleep_ns(200 * 1000000ull);
	t_late_ret = ao_http_reply(arg, 200, "text/plain", "bye", 3);
	ao_conn_put(arg);
	return NULL;
}

/*
 * A client that half-closes after its request (shutdown(SHUT_WR), as
 * `nc -N` does) still reads the answer: its FIN is not the end of the
 * connection while the answer is due, even one given later from another
 * thread.
 */
static void test_http_half_close(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_conn *c;
	pthread_t th;
	int fd;

	base_config(state, &cfg);
	t_watchdog_arm(30, "http half close");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET /later HTTP/1.0\r\n\r\n");
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	c = kept_http_conn();
	/* Time for the FIN to reach the server before the answer does. */
	t_sleep_ns(200 * 1000000ull);
	assert_int_equal(ao_http_reply(c, 200, "text/plain", "late", 4), 0);
	read_answer(fd, "HTTP/1.1 200 OK\r\n", "\r\n\r\nlate");
	WAIT_UNTIL(!ao_conn_is_open(c), 5000);
	ao_conn_put(c);
	/* Answered at once, in on_http. */
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	read_answer(fd, NULL, "\r\n\r\npath /now");
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	/* ao_server_stop() waits for an answer due, too. */
	__atomic_store_n(&t_http_conn, NULL, __ATOMIC_RELAXED);
	fd = t_cl_connect(ao_server_port(srv));
	cl_puts(fd, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
	c = kept_http_conn();
	t_late_ret = 1;
	assert_int_equal(pthread_create(&th, NULL, late_reply, c), 0);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(t_late_ret, 0);
	read_answer(fd, NULL, "\r\n\r\nbye");
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	assert_int_equal(__atomic_load_n(&t_errors, __ATOMIC_RELAXED), 0);
	t_watchdog_disarm();
}

/* ---- len16 and HTTP on one port ---- */

static void test_sniff_len16(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	char resp[1024];
	uint8_t got[16];
	int fd, ws;

	base_config(state, &cfg);
	cfg.framing.kind = AO_FRAME_LEN16;
	cfg.framing.max_packet = 0x4141;
	cfg.flags |= AO_SERVER_HTTP;
	/* "AA" (a method's first letters) would be a valid length. */
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	cfg.framing.max_packet = 4096;
	t_watchdog_arm(30, "sniff len16");
	srv = start(&cfg);
	fd = t_cl_connect(ao_server_port(srv));
	ws = ws_connect(ao_server_port(srv), NULL);
	/* len16, its prefix split from the payload: 1 byte, then 4. */
	t_cl_write(fd, "\x00", 1);
	t_sleep_ns(20000000);
	t_cl_write(fd,
		   "\x03"
		   "abc",
		   4);
	assert_int_equal(t_cl_read(fd, got, 5), 0);
	assert_memory_equal(got,
			    "\x00\x03"
			    "abc",
			    5);
	ws_echo_once(ws, "ws too", 6);
	http_get(ao_server_port(srv), "/metrics", resp, sizeof(resp));
	assert_non_null(strstr(resp, "path /metrics"));
	/* Another method is HTTP too, split after its first letter: it gets
	 * its 405, not a bare close as a len16 length. */
	{
		int hf = t_cl_connect(ao_server_port(srv));

		cl_puts(hf, "P");
		t_sleep_ns(20000000);
		cl_puts(hf, "OST / HTTP/1.1\r\nHost: x\r\n\r\n");
		cl_read_head(hf, resp, sizeof(resp));
		assert_non_null(strstr(resp, "HTTP/1.1 405 "));
		assert_true(cl_closed_within(hf, 5000));
		close(hf);
	}
	WAIT_UNTIL(__atomic_load_n(&t_opens, __ATOMIC_ACQUIRE) == 2, 5000);
	close(fd);
	close(ws);
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- frame once, send to many ---- */

static void broadcast(void **state, uint32_t n, bool mixed)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats a, b;
	struct ao_buf *buf;
	uint32_t in_use;
	int *fds = calloc(n, sizeof(int));
	uint32_t nws = mixed ? n / 2 : n;

	assert_non_null(fds);
	base_config(state, &cfg);
	cfg.handlers.on_open = h_open_keep;
	cfg.max_conns = 2000;
	if (mixed) {
		cfg.framing.kind = AO_FRAME_LEN16;
		cfg.flags |= AO_SERVER_HTTP;
	}
	srv = start(&cfg);
	for (uint32_t i = 0; i < n; i++) {
		if (i < nws) {
			fds[i] = ws_connect(ao_server_port(srv), NULL);
		} else {
			fds[i] = t_cl_connect(ao_server_port(srv));
			t_cl_write(fds[i], "\x00\x01!", 3); /* say who */
		}
	}
	WAIT_UNTIL(__atomic_load_n(&t_nconns, __ATOMIC_ACQUIRE) == n, 20000);
	a = stats(srv);
	in_use = ao_bufpool_in_use(ao_server_pool(srv));
	buf = ao_buf_get(ao_server_pool(srv));
	assert_non_null(buf);
	memcpy(buf->data, "the same bytes for everyone", 27);
	buf->len = 27;
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(ao_conn_send_packet(t_conns[i], buf), 0);
	/* No pool buffer per recipient: only the one broadcast. */
	assert_true(ao_bufpool_in_use(ao_server_pool(srv)) <= in_use + 1);
	ao_buf_put(buf);
	b = stats(srv);
	print_message(
		"n=%u: headers written %llu, shared %llu, inline %llu\n", n,
		(unsigned long long)(b.ws_frames_written - a.ws_frames_written),
		(unsigned long long)(b.ws_frames_shared - a.ws_frames_shared),
		(unsigned long long)(b.ws_inline_headers -
				     a.ws_inline_headers));
	assert_int_equal(b.ws_frames_written - a.ws_frames_written, 1);
	assert_int_equal(b.ws_frames_shared - a.ws_frames_shared, nws - 1);
	assert_int_equal(b.ws_inline_headers - a.ws_inline_headers, 0);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t got[32], b0;

		if (i < nws) {
			assert_int_equal(ws_recv(fds[i], &b0, got, 32), 27);
			assert_int_equal(b0, 0x82);
			assert_memory_equal(got, "the same bytes for everyone",
					    27);
		} else {
			/* The echo of its own packet and the broadcast, in
			 * either order: a worker sends the echo, and the
			 * broadcast from this thread may overtake it. */
			uint8_t all[3 + 2 + 27];
			bool echo_first;

			assert_int_equal(t_cl_read(fds[i], all, sizeof(all)),
					 0);
			echo_first = all[1] == 0x01;
			assert_memory_equal(all + (echo_first ? 0 : 29),
					    "\x00\x01!", 3);
			assert_memory_equal(
				all + (echo_first ? 3 : 0),
				"\x00\x1bthe same bytes for everyone", 29);
		}
	}
	/* A buffer with no headroom: the header goes inline per send. */
	{
		struct ao_bufpool *pool;
		struct ao_bufpool_params p = { .buf_size = 64, .count = 8 };

		assert_int_equal(ao_bufpool_create(&pool, &p), 0);
		buf = ao_buf_get(pool);
		memcpy(buf->data, "own pool", 8);
		buf->len = 8;
		a = stats(srv);
		for (uint32_t i = 0; i < nws; i++)
			assert_int_equal(ao_conn_send_packet(t_conns[i], buf),
					 0);
		b = stats(srv);
		assert_int_equal(b.ws_inline_headers - a.ws_inline_headers,
				 nws);
		assert_int_equal(b.ws_frames_written - a.ws_frames_written, 0);
		ao_buf_put(buf);
		for (uint32_t i = 0; i < nws; i++) {
			uint8_t got[32], b0;

			assert_int_equal(ws_recv(fds[i], &b0, got, 32), 8);
			assert_memory_equal(got, "own pool", 8);
		}
		for (uint32_t i = 0; i < n; i++)
			close(fds[i]);
		WAIT_UNTIL(stats(srv).open == 0, 20000);
		for (uint32_t i = 0; i < n; i++)
			ao_conn_put(t_conns[i]);
		free(fds);
		/* After the rings are gone: they put its last buffers. */
		finish(srv);
		assert_int_equal(ao_bufpool_destroy(pool), 0);
	}
}

static void test_broadcast_1(void **state)
{
	t_watchdog_arm(60, "ws broadcast 1");
	broadcast(state, 1, false);
	t_watchdog_disarm();
}

static void test_broadcast_10(void **state)
{
	t_watchdog_arm(60, "ws broadcast 10");
	broadcast(state, 10, false);
	broadcast(state, 10, true);
	t_watchdog_disarm();
}

static void test_broadcast_1000(void **state)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2200 && rl.rlim_max >= 2200) {
		rl.rlim_cur = 2200;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < 2200) {
		print_message("RLIMIT_NOFILE too low: skip\n");
		skip();
	}
	t_watchdog_arm(240, "ws broadcast 1000");
	broadcast(state, 1000, false);
	t_watchdog_disarm();
}

/* Several threads send one buffer at once: one header, the others
 * share it (TSan checks the hand-over). */
struct racer {
	struct ao_buf *buf;
	uint32_t from, to;
};

static void *race_send(void *arg)
{
	struct racer *r = arg;

	for (uint32_t i = r->from; i < r->to; i++)
		if (ao_conn_send_packet(t_conns[i], r->buf))
			__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void test_broadcast_threads(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct ao_io_stats a, b;
	struct racer rc[4];
	enum { N = 8 };
	int fds[N];

	base_config(state, &cfg);
	cfg.handlers.on_open = h_open_keep;
	t_watchdog_arm(60, "ws broadcast threads");
	srv = start(&cfg);
	for (int i = 0; i < N; i++)
		fds[i] = ws_connect(ao_server_port(srv), NULL);
	WAIT_UNTIL(__atomic_load_n(&t_nconns, __ATOMIC_ACQUIRE) == N, 5000);
	for (int round = 0; round < 50; round++) {
		struct ao_buf *buf = ao_buf_get(ao_server_pool(srv));

		assert_non_null(buf);
		buf->len = (uint32_t)(round * 3);
		memset(buf->data, 'a' + round % 26, buf->len);
		a = stats(srv);
		for (int t = 0; t < 4; t++)
			rc[t] = (struct racer){ buf, (uint32_t)t * 2,
						(uint32_t)t * 2 + 2 };
		t_run_threads(4, race_send, rc, sizeof(rc[0]));
		b = stats(srv);
		ao_buf_put(buf);
		assert_int_equal(b.ws_frames_written - a.ws_frames_written, 1);
		assert_int_equal(b.ws_frames_shared - a.ws_frames_shared,
				 N - 1);
		for (int i = 0; i < N; i++) {
			uint8_t got[160], b0;

			assert_int_equal(ws_recv(fds[i], &b0, got, 160),
					 round * 3);
			if (round)
				assert_int_equal(got[round * 3 - 1],
						 'a' + round % 26);
		}
	}
	for (int i = 0; i < N; i++) {
		close(fds[i]);
		ao_conn_put(t_conns[i]);
	}
	WAIT_UNTIL(stats(srv).open == 0, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- no data frame after the close frame ---- */

/*
 * RFC 6455 section 5.5.1: after sending a close frame, an endpoint sends
 * no more data frames.  A thread sends without a pause on a kept handle
 * while the connection closes (ao_conn_close(), the peer's close, a
 * protocol error, the stop), and the client reads every frame up to the
 * EOF: each send that returned 0 must arrive, all of them before the close
 * frame, nothing after it, and the first refused send says -EPIPE.
 * With a slow reader and a sender that keeps 64 KiB queued, the close
 * frame is not held back to the linger deadline (and a reset).
 */
enum close_by { BY_LOCAL, BY_PEER, BY_ERROR, BY_STOP };

struct close_case {
	enum close_by by;
	long runs;
	size_t queue; /* the sender keeps at most this much queued */
	bool slow; /* the client sleeps 20 us before each frame */
};

struct close_sender {
	struct ao_conn *c;
	struct ao_buf *buf;
	size_t queue;
	uint32_t sent; /* sends that returned 0 */
	int err; /* the first refusal */
};

static void *close_sender_main(void *arg)
{
	struct close_sender *s = arg;
	int err;

	for (;;) {
		/* Under sendq_max: never closed as a slow consumer. */
		if (ao_conn_send_queued(s->c) > s->queue) {
			sched_yield();
			continue;
		}
		err = ao_conn_send_packet(s->c, s->buf);
		if (err)
			break;
		s->sent++;
	}
	s->err = err;
	return NULL;
}

/* ao_server_stop() waits for the drain, which waits for the client. */
static void *close_stopper_main(void *arg)
{
	return (void *)(intptr_t)ao_server_stop(arg);
}

struct close_count {
	uint32_t runs, late, lost, not_epipe;
};

/* One connection: send, close while sending, read to the EOF. */
static void close_once(struct ao_server *srv, const struct close_case *cs,
		       uint32_t i, struct close_count *cc)
{
	enum close_by by = cs->by;
	static const int want_code[] = { 1000, 1000, 1002, 1001 };
	struct close_sender s = { 0 };
	pthread_t ts, tstop;
	uint32_t before = 0, after = 0;
	uint8_t b0, got[256];
	int fd, n, code = -1;

	fd = ws_connect(ao_server_port(srv), NULL);
	WAIT_UNTIL(__atomic_load_n(&t_nconns, __ATOMIC_ACQUIRE) == i + 1, 5000);
	s.c = t_conns[i];
	s.queue = cs->queue;
	s.buf = ao_buf_get(ao_server_pool(srv));
	assert_non_null(s.buf);
	s.buf->len = 100;
	memset(s.buf->data, 'd', 100);
	assert_int_equal(pthread_create(&ts, NULL, close_sender_main, &s), 0);
	/* The sender is under way. */
	while (before < 20) {
		assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 100);
		assert_int_equal(b0, 0x82);
		before++;
	}
	switch (by) {
	case BY_LOCAL:
		assert_int_equal(ao_conn_close(s.c), 0);
		break;
	case BY_PEER:
		ws_send(fd, 0x8, "\x03\xe8", 2);
		break;
	case BY_ERROR:
		ws_send_raw(fd, 0x82, false, "unmasked", 8);
		break;
	case BY_STOP:
		assert_int_equal(pthread_create(&tstop, NULL,
						close_stopper_main, srv),
				 0);
		break;
	}
	for (;;) {
		if (cs->slow)
			t_sleep_ns(20000);
		n = ws_recv(fd, &b0, got, sizeof(got));
		if (n < 0)
			break;
		if (b0 == 0x88) {
			code = n >= 2 ? got[0] << 8 | got[1] : 1005;
			continue;
		}
		assert_int_equal(b0, 0x82);
		assert_int_equal(n, 100);
		if (code < 0) {
			before++;
		} else {
			after++;
			break; /* a data frame after the close: enough */
		}
	}
	close(fd); /* after a late frame: a reset, which ends the sender */
	pthread_join(ts, NULL);
	ao_buf_put(s.buf);
	ao_conn_put(s.c);
	if (by == BY_STOP) {
		void *ret;

		pthread_join(tstop, &ret);
		assert_int_equal((intptr_t)ret, 0);
	}
	assert_int_equal(code, want_code[by]);
	cc->runs++;
	if (after)
		cc->late++;
	else if (before != s.sent)
		cc->lost++;
	if (s.err != -EPIPE)
		cc->not_epipe++;
}

static void close_order(void **state, const struct close_case *cs)
{
	struct ao_server_config cfg;
	struct ao_server *srv = NULL;
	struct close_count cc = { 0 };
	enum close_by by = cs->by;
	long runs = cs->runs;

	base_config(state, &cfg);
	cfg.handlers.on_open = h_open_keep;
	/* The socket takes little at a time: the send queue is rarely empty
	 * when the close frame is queued. */
	cfg.sock_sndbuf = 4096;
	if (runs > 1000)
		runs = 1000; /* t_conns[] */
	t_watchdog_arm(120, "ws close order");
	for (long r = 0; r < runs; r++) {
		if (!srv)
			srv = start(&cfg);
		close_once(srv, cs, by == BY_STOP ? 0 : (uint32_t)r, &cc);
		if (by == BY_STOP) {
			/* Stopped by close_once(): finish() without the
			 * stop. */
			assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)),
					 0);
			assert_int_equal(ao_server_destroy(srv), 0);
			assert_int_equal(__atomic_load_n(&t_errors,
							 __ATOMIC_RELAXED),
					 0);
			srv = NULL;
		}
	}
	if (srv) {
		WAIT_UNTIL(stats(srv).open == 0, 5000);
		finish(srv);
	}
	if (cc.late || cc.lost || cc.not_epipe)
		print_message("%u runs: %u with a data frame after the close, "
			      "%u with a frame lost, %u without -EPIPE\n",
			      cc.runs, cc.late, cc.lost, cc.not_epipe);
	assert_int_equal(cc.late, 0);
	assert_int_equal(cc.lost, 0);
	assert_int_equal(cc.not_epipe, 0);
	t_watchdog_disarm();
}

static void test_close_order_local(void **state)
{
	struct close_case cs = { BY_LOCAL, t_scaled(200, 20), 8192, false };

	close_order(state, &cs);
}

static void test_close_order_peer(void **state)
{
	struct close_case cs = { BY_PEER, t_scaled(200, 20), 8192, false };

	close_order(state, &cs);
}

static void test_close_order_error(void **state)
{
	struct close_case cs = { BY_ERROR, t_scaled(200, 20), 8192, false };

	close_order(state, &cs);
}

static void test_close_order_stop(void **state)
{
	struct close_case cs = { BY_STOP, t_scaled(30, 5), 8192, false };

	close_order(state, &cs);
}

/* The queue never empties: the close frame still goes, behind it. */
static void test_close_order_busy(void **state)
{
	struct close_case cs = { BY_LOCAL, 5, 65536, true };

	close_order(state, &cs);
}

/* ---- out of pool buffers: messages wait, none is lost ---- */

static uint32_t t_stall;

static int h_stall_echo(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	while (__atomic_load_n(&t_stall, __ATOMIC_ACQUIRE))
		t_sleep_ns(1000000);
	return h_echo(c, pkt, arg);
}

struct writer {
	int fd;
	uint32_t n;
};

/* Each message in two fragments, with the mask and payload split over
 * the pool's starvation wherever it falls. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;

	for (uint32_t i = 0; i < w->n; i++) {
		uint8_t p[100];

		memset(p, (int)i, sizeof(p));
		memcpy(p, &i, 4);
		ws_send_raw(w->fd, 0x02, true, p, 60);
		ws_send_raw(w->fd, 0x80, true, p + 60, 40);
	}
	return NULL;
}

static void test_pool_exhausted(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;
	struct writer w;
	pthread_t t;
	int fd;

	base_config(state, &cfg);
	cfg.pool_buffers = 24;
	cfg.ring_buffers = 8;
	cfg.handlers.on_packet = h_stall_echo;
	t_watchdog_arm(60, "ws pool exhausted");
	srv = start(&cfg);
	fd = ws_connect(ao_server_port(srv), NULL);
	__atomic_store_n(&t_stall, 1, __ATOMIC_RELEASE);
	w = (struct writer){ .fd = fd, .n = 200 };
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	WAIT_UNTIL(stats(srv).enobufs > 0, 10000);
	t_sleep_ns(20000000);
	__atomic_store_n(&t_stall, 0, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < w.n; i++) {
		uint8_t got[100], want[100], b0;

		memset(want, (int)i, sizeof(want));
		memcpy(want, &i, 4);
		assert_int_equal(ws_recv(fd, &b0, got, sizeof(got)), 100);
		assert_memory_equal(got, want, 100);
	}
	pthread_join(t, NULL);
	close(fd);
	WAIT_UNTIL(closes(AO_CLOSE_EOF) == 1, 5000);
	finish(srv);
	t_watchdog_disarm();
}

/* ---- configuration ---- */

static void test_config(void **state)
{
	struct ao_server_config cfg;
	struct ao_server *srv;

	base_config(state, &cfg);
	cfg.ws.flags = 0x80;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	base_config(state, &cfg);
	cfg.ws.header_max = 10;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	base_config(state, &cfg);
	cfg.framing.kind = AO_FRAME_LEN16;
	cfg.framing.order = AO_ORDER_LITTLE;
	cfg.framing.max_packet = 0x4141;
	cfg.flags |= AO_SERVER_HTTP;
	assert_int_equal(ao_server_create(&cfg, &srv), -EINVAL);
	cfg.framing.max_packet = 0x4140;
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
	/* The byte framer does not take the WebSocket framing. */
	{
		struct ao_framing fr = { .kind = AO_FRAME_WS };
		struct ao_framer f;
		uint8_t h[4];

		assert_int_equal(ao_framing_resolve(&fr), 0);
		assert_int_equal(ao_framing_header(&fr, 3, h), -EINVAL);
		assert_int_equal(ao_framer_init(&f, &fr, NULL, NULL, NULL),
				 -EINVAL);
	}
	assert_string_equal(ao_close_reason_name(AO_CLOSE_WS_CLOSE),
			    "websocket close");
	assert_string_equal(ao_close_reason_name(AO_CLOSE_HTTP_DONE),
			    "http answered");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate(test_config, &m_epoll),
		ALL_MODES(test_upgrade_echo),
		BOTH(test_subprotocol),
		ALL_MODES(test_fragments),
		BOTH(test_protocol_errors),
		BOTH(test_ping_pong),
		BOTH(test_server_ping),
		ALL_MODES(test_local_close),
		BOTH(test_header_deadline),
		BOTH(test_header_limit),
		BOTH(test_origin),
		ALL_MODES(test_http_get),
		BOTH(test_http_404),
		ALL_MODES(test_http_status),
		ALL_MODES(test_http_head),
		BOTH(test_http_target_forms),
		ALL_MODES(test_http_half_close),
		ALL_MODES(test_sniff_len16),
		BOTH(test_broadcast_1),
		BOTH(test_broadcast_10),
		BOTH(test_broadcast_1000),
		BOTH(test_broadcast_threads),
		BOTH(test_pool_exhausted),
		BOTH(test_close_order_local),
		BOTH(test_close_order_peer),
		BOTH(test_close_order_error),
		BOTH(test_close_order_stop),
		BOTH(test_close_order_busy),
	};
	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
	struct ao_server *srv;

	cfg.backend = AO_IO_URING;
	cfg.flags = AO_SERVER_QUIET;
	if (ao_server_create(&cfg, &srv) == 0) {
		uring_ok = ao_server_start(srv) == 0;
		ao_server_destroy(srv);
	}
	if (!uring_ok)
		fprintf(stderr, "test_ws_server: io_uring unusable\n");
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	return cmocka_run_group_tests_name("ws_server", tests, NULL, NULL);
}
