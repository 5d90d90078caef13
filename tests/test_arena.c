// SPDX-License-Identifier: MIT
/*
 * The arena server (tools/arena/room.c) in this process, its ticks on a
 * test clock (each tick() advances one period and waits for the rooms),
 * against blocking loopback clients that speak the protocol byte by byte:
 *
 *  - bad and out-of-order messages (input before hello or join, hello
 *    twice, an unknown or a server type, a wrong length, a chat line too
 *    long, a frame over 256 bytes, a seq going back, a flood) each close
 *    their own connection only, counted under their reason, while a
 *    player in the room keeps getting every snapshot;
 *  - joins, inputs, chats and leaves take effect at the next tick and
 *    not before; the snapshot carries the positions the movement rules
 *    give; a disconnect between ticks leaves the room consistent;
 *  - a member that stops reading is skipped while its previous snapshot
 *    is queued, then closed as a slow consumer, and the reader next to
 *    it misses nothing;
 *  - a member that acks is closed once its acks fall more than the stall
 *    bound behind, whatever its buffers; a bad ack is malformed;
 *  - a spectator gets the room's snapshots and chat lines, is in none of
 *    them, and leave ends it;
 *  - a tick builds one snapshot buffer for all its members
 *    (--copy-broadcast: one per member), every member gets the same
 *    bytes, and the pool is whole at the end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <aorta/core/timer.h>
#include "../tools/arena/room.h"
#include "helpers.h"

static struct arena *arena;
static uint16_t port;
static bool worker_mode; /* handlers on the strands, not the ring */
static uint64_t hello_ns = ARENA_NEVER, idle_ns = ARENA_NEVER;
static uint32_t max_players = 100;

static void start(uint32_t room_size, bool copy, uint64_t stall_ns, int sndbuf)
{
	struct arena_opts o = { 0 };

	o.room_size = room_size;
	o.max_players = max_players;
	o.buffers = 512;
	o.stall_ns = stall_ns;
	o.hello_ns = hello_ns;
	o.idle_ns = idle_ns;
	o.drain_ns = 2000000000ull;
	o.sndbuf = sndbuf;
	o.copy_broadcast = copy;
	o.ring_handlers = !worker_mode;
	o.test_clock = true;
	o.quiet = true;
	o.workers = 2;
	assert_int_equal(arena_start(&o, &arena), 0);
	port = ao_server_port(arena_server(arena));
}

static void stop(void)
{
	struct arena_stats st;

	assert_int_equal(arena_stop(arena), 0);
	arena_stats(arena, &st);
	assert_true(st.consistent);
	assert_int_equal(st.in_rooms, 0);
	assert_int_equal(st.players, 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(arena_server(arena))),
			 0);
	assert_int_equal(arena_destroy(arena), 0);
	arena = NULL;
}

static struct arena_stats stats(void)
{
	struct arena_stats st;

	arena_stats(arena, &st);
	return st;
}

static uint32_t stalled_id; /* the player that does not read, or 0 */

/* Has every member that reads got what it was sent?  (Between ticks the
 * rooms' strands are idle: their member lists hold still.) */
static bool readers_drained(void)
{
	bool drained = true;

	ao_spin_lock(&arena->lobby);
	for (uint32_t i = 0; i < arena->nrooms && drained; i++) {
		struct room *r = arena->rooms[i];

		for (uint32_t k = 0; k < r->nmembers; k++)
			if (r->members[k]->id != stalled_id &&
			    ao_conn_send_queued(r->members[k]->conn))
				drained = false;
		for (uint32_t k = 0; k < r->nwatchers; k++)
			if (ao_conn_send_queued(r->watchers[k]->conn))
				drained = false;
	}
	ao_spin_unlock(&arena->lobby);
	return drained;
}

/* One period: the rooms' due ticks run, and we wait for them.  First,
 * what the members that read were sent is off the server's send queues:
 * the ring may take a send's completion after the peer already has the
 * bytes, and a tick that found a member's last snapshot still queued
 * would skip it (in a real run the ticks are 50 ms apart). */
static void tick(void)
{
	WAIT_UNTIL(readers_drained(), 5000);
	assert_int_equal(ao_timers_advance(arena_timers(arena),
					   arena_period_ns(arena)),
			 0);
	assert_int_equal(ao_exec_drain(arena_exec(arena)), 0);
}

/* ---- a client ---- */

static int cl_connect_rcvbuf(int rcvbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void cl_send(int fd, const uint8_t *p, size_t n)
{
	uint8_t f[AP_HDR + 512];

	ap_frame_hdr(f, n);
	memcpy(f + AP_HDR, p, n);
	t_cl_write(fd, f, AP_HDR + n);
}

/* The next payload within ms: its length, or -1 (timeout or EOF). */
static int cl_recv(int fd, uint8_t *p, size_t max, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t h[AP_HDR];
	size_t n;

	if (poll(&pfd, 1, ms) <= 0)
		return -1;
	if (t_cl_read(fd, h, AP_HDR))
		return -1;
	n = ap_get16(h);
	assert_true(n <= max);
	if (t_cl_read(fd, p, n))
		return -1;
	return (int)n;
}

static uint8_t rbuf[65536];

/* The next message, which must be of this type. */
static struct ap_msg expect(int fd, uint8_t type)
{
	struct ap_msg m;
	int n = cl_recv(fd, rbuf, sizeof(rbuf), 5000);

	if (n <= 0)
		fail_msg("no message 0x%02x on fd %d (ticks %llu, skipped "
			 "%llu)",
			 type, fd, (unsigned long long)stats().ticks,
			 (unsigned long long)stats().snaps_skipped);
	assert_int_equal(ap_decode(rbuf, (size_t)n, &m), 0);
	if (m.type != type)
		fail_msg("got message 0x%02x, expected 0x%02x", m.type, type);
	return m;
}

/* Nothing more within ms. */
static void expect_none(int fd, int ms)
{
	int n = cl_recv(fd, rbuf, sizeof(rbuf), ms);

	if (n > 0)
		fail_msg("unexpected message 0x%02x", rbuf[0]);
}

/* Every message the server has handled from fd so far is handled: a ping
 * answered comes after them (nothing else may be pending on fd). */
static void sync_with(int fd)
{
	static uint64_t stamp = 1000;
	uint8_t p[AP_LEN_PING];
	struct ap_msg m;

	cl_send(fd, p, ap_enc_ping(p, ++stamp));
	m = expect(fd, AP_PONG);
	assert_int_equal(m.ping.stamp, stamp);
}

static uint32_t hello(int fd)
{
	uint8_t p[64];
	struct ap_msg m;

	cl_send(fd, p, ap_enc_hello(p, "test", 4));
	m = expect(fd, AP_WELCOME);
	assert_int_equal(m.welcome.tick_hz, 20);
	return m.welcome.player;
}

static void join(int fd)
{
	uint8_t p[AP_LEN_JOIN];

	cl_send(fd, p, ap_enc_join(p, AP_ROOM_ANY));
	sync_with(fd);
}

/* A player that said hello and asked to join any room. */
static int player(uint32_t *id)
{
	int fd = t_cl_connect(port);

	*id = hello(fd);
	join(fd);
	return fd;
}

/* Two players in one room after one tick, each past its joined and
 * first snapshot. */
static void two_joined(int *c1, uint32_t *id1, int *c2, uint32_t *id2)
{
	*c1 = player(id1);
	*c2 = player(id2);
	tick();
	for (int i = 0; i < 2; i++) {
		expect(i ? *c2 : *c1, AP_JOINED);
		expect(i ? *c2 : *c1, AP_SNAPSHOT);
	}
}

/* Tick until fd's snapshot has n players (a disconnect is applied at the
 * tick after the server saw it); ticks must follow each other. */
static struct ap_msg tick_until_count(int fd, unsigned int n, uint32_t *t)
{
	struct ap_msg s;

	for (int k = 0; k < 200; k++) {
		tick();
		s = expect(fd, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, ++*t);
		if (s.snap.count == n)
			return s;
	}
	fail_msg("the room never came down to %u players", n);
	return s;
}

/* The error message with this code (0: none), then the EOF. */
static void expect_closed(int fd, int code)
{
	int n = cl_recv(fd, rbuf, sizeof(rbuf), 5000);

	if (code) {
		struct ap_msg m;

		if (n <= 0)
			fail_msg("no error %d (%s) before the close", code,
				 ap_err_name((unsigned int)code));
		assert_int_equal(ap_decode(rbuf, (size_t)n, &m), 0);
		assert_int_equal(m.type, AP_ERROR);
		assert_int_equal(m.error.code, code);
		n = cl_recv(fd, rbuf, sizeof(rbuf), 5000);
	}
	assert_int_equal(n, -1);
	close(fd);
}

static int find(const struct ap_msg *s, uint32_t id, struct ap_entry *e)
{
	for (unsigned int i = 0; i < s->snap.count; i++) {
		ap_snap_entry(s, i, e);
		if (e->player == id)
			return (int)i;
	}
	return -1;
}

/* ---- tests ---- */

static void bad_clients(void)
{
	uint8_t p[300];
	struct ap_msg s;
	struct arena_stats st;
	struct ao_io_stats io;
	uint32_t good_id, id;
	int good, fd, tick_no;

	start(50, false, 0, 0);
	good = player(&good_id);
	tick();
	expect(good, AP_JOINED);
	s = expect(good, AP_SNAPSHOT);
	tick_no = (int)s.snap.tick;

	/* Input before hello. */
	fd = t_cl_connect(port);
	cl_send(fd, p, ap_enc_input(p, 1, 1));
	expect_closed(fd, AP_ERR_ORDER);
	/* Input before join. */
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_input(p, 1, 1));
	expect_closed(fd, AP_ERR_ORDER);
	/* Hello twice. */
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_hello(p, "again", 5));
	expect_closed(fd, AP_ERR_ORDER);
	/* An unknown type, and a server type. */
	fd = t_cl_connect(port);
	hello(fd);
	p[0] = 0x7f;
	cl_send(fd, p, 1);
	expect_closed(fd, AP_ERR_BAD_TYPE);
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_pong(p, 1));
	expect_closed(fd, AP_ERR_BAD_TYPE);
	/* An input one byte short. */
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_input(p, 1, 1) - 1);
	expect_closed(fd, AP_ERR_MALFORMED);
	/* In a room: a chat line of 201 bytes; a seq going back. */
	fd = player(&id);
	memset(p + 1, 'x', 201);
	p[0] = AP_CHAT;
	cl_send(fd, p, 202);
	expect_closed(fd, AP_ERR_CHAT_LONG);
	fd = player(&id);
	cl_send(fd, p, ap_enc_input(p, 5, 1));
	cl_send(fd, p, ap_enc_input(p, 5, 1));
	expect_closed(fd, AP_ERR_MALFORMED);
	/* More inputs than one tick takes. */
	fd = player(&id);
	for (uint32_t k = 1; k <= AP_PENDING_MAX + 1; k++)
		cl_send(fd, p, ap_enc_input(p, k, 1));
	expect_closed(fd, AP_ERR_FLOOD);
	/* Hello of version 2, a name with a 0 byte; an input seq lower
	 * than the last. */
	fd = t_cl_connect(port);
	ap_enc_hello(p, "v2", 2);
	p[1] = 2;
	cl_send(fd, p, 5);
	expect_closed(fd, AP_ERR_MALFORMED);
	fd = t_cl_connect(port);
	cl_send(fd, p, ap_enc_hello(p, "a\0b", 3));
	expect_closed(fd, AP_ERR_MALFORMED);
	fd = player(&id);
	cl_send(fd, p, ap_enc_input(p, 9, 1));
	cl_send(fd, p, ap_enc_input(p, 8, 1));
	expect_closed(fd, AP_ERR_MALFORMED);
	/* A frame over 256 bytes: the server's framer closes it. */
	fd = t_cl_connect(port);
	hello(fd);
	memset(p, 0, sizeof(p));
	p[0] = AP_CHAT;
	cl_send(fd, p, 257);
	expect_closed(fd, 0);

	st = stats();
	assert_int_equal(st.closes[AC_ORDER], 3);
	assert_int_equal(st.closes[AC_BAD_TYPE], 2);
	assert_int_equal(st.closes[AC_MALFORMED], 5);
	assert_int_equal(st.closes[AC_CHAT_LONG], 1);
	assert_int_equal(st.closes[AC_FLOOD], 1);
	WAIT_UNTIL(ao_server_stats(arena_server(arena), -1, &io) == 0 &&
			   io.closes[AO_CLOSE_LOCAL] == 12 &&
			   io.closes[AO_CLOSE_TOO_LONG] == 1,
		   5000);

	/* The good player saw every tick, and the room is whole. */
	for (int k = 1; k <= 3; k++) {
		tick();
		s = expect(good, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, tick_no + k);
	}
	expect_none(good, 20);
	sync_with(good);
	WAIT_UNTIL(stats().players == 1, 5000);
	st = stats();
	assert_int_equal(st.in_rooms, 1);
	assert_true(st.consistent);
	close(good);
	stop();
}

/* The same with the handlers on the connections' strands. */
static void test_bad_clients(void **state)
{
	(void)state;
	t_watchdog_arm(120, "arena bad clients");
	bad_clients();
	worker_mode = true;
	bad_clients();
	worker_mode = false;
	t_watchdog_disarm();
}

/* A hello past --max-players: server_full, then the close. */
static void test_server_full(void **state)
{
	uint8_t p[64];
	uint32_t id;
	int a, b;

	(void)state;
	t_watchdog_arm(60, "arena server full");
	max_players = 1;
	start(50, false, 0, 0);
	a = player(&id);
	b = t_cl_connect(port);
	cl_send(b, p, ap_enc_hello(p, "two", 3));
	expect_closed(b, AP_ERR_SERVER_FULL);
	assert_int_equal(stats().closes[AC_SERVER_FULL], 1);
	sync_with(a);
	close(a);
	stop();
	max_players = 100;
	t_watchdog_disarm();
}

static void tick_boundaries(void);

static void test_tick_boundaries(void **state)
{
	(void)state;
	tick_boundaries();
}

/* The same with the handlers on the connections' strands. */
static void test_tick_boundaries_worker(void **state)
{
	(void)state;
	worker_mode = true;
	tick_boundaries();
	worker_mode = false;
}

static void tick_boundaries(void)
{
	struct ap_world w = AP_WORLD_DEFAULT;
	uint8_t p[256];
	struct ap_msg m, s, j1, j2;
	struct ap_entry e;
	uint32_t id1, id2, t;
	uint16_t x, y;
	int c1, c2, n;

	t_watchdog_arm(60, "arena tick boundaries");
	start(50, false, 0, 0);
	c1 = player(&id1);
	/* Nothing before the tick. */
	expect_none(c1, 30);
	tick();
	j1 = expect(c1, AP_JOINED);
	assert_int_equal(j1.joined.room, 1);
	assert_int_equal(j1.joined.members, 1);
	assert_int_equal(j1.joined.chat_seq, 0);
	s = expect(c1, AP_SNAPSHOT);
	t = j1.joined.tick;
	assert_int_equal(s.snap.tick, t);
	assert_int_equal(s.snap.count, 1);
	assert_int_equal(find(&s, id1, &e), 0);
	assert_int_equal(e.x, j1.joined.x);
	assert_int_equal(e.y, j1.joined.y);
	assert_int_equal(e.seq, 0);

	/* A second player: both see it at the next tick, not before. */
	c2 = player(&id2);
	expect_none(c1, 30);
	tick();
	j2 = expect(c2, AP_JOINED);
	assert_int_equal(j2.joined.room, 1);
	assert_int_equal(j2.joined.members, 2);
	assert_int_equal(j2.joined.tick, t + 1);
	s = expect(c1, AP_SNAPSHOT);
	assert_int_equal(s.snap.count, 2);
	assert_true(find(&s, id2, &e) >= 0);
	s = expect(c2, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, t + 1);
	assert_int_equal(s.snap.count, 2);

	/* Three inputs: applied together at the next tick, by the rules. */
	cl_send(c1, p, ap_enc_input(p, 1, 3));
	cl_send(c1, p, ap_enc_input(p, 2, 3));
	cl_send(c1, p, ap_enc_input(p, 7, 5));
	sync_with(c1);
	x = j1.joined.x;
	y = j1.joined.y;
	ap_move(&w, &x, &y, 3);
	ap_move(&w, &x, &y, 3);
	ap_move(&w, &x, &y, 5);
	tick();
	s = expect(c1, AP_SNAPSHOT);
	assert_true(find(&s, id1, &e) >= 0);
	assert_int_equal(e.seq, 7);
	assert_int_equal(e.x, x);
	assert_int_equal(e.y, y);
	expect(c2, AP_SNAPSHOT);

	/* A chat line, numbered 0, to both, before the tick's snapshot. */
	cl_send(c2, p, ap_enc_chat(p, "hello", 5));
	sync_with(c2);
	tick();
	for (int k = 0; k < 2; k++) {
		int fd = k ? c2 : c1;

		m = expect(fd, AP_CHAT_LINE);
		assert_int_equal(m.line.chat_seq, 0);
		assert_int_equal(m.line.from, id2);
		assert_int_equal(m.line.tick, t + 3);
		assert_int_equal(m.line.len, 5);
		assert_memory_equal(m.line.text, "hello", 5);
		expect(fd, AP_SNAPSHOT);
	}

	/* A leave: out of the next tick's snapshot, nothing more to it. */
	cl_send(c2, p, ap_enc_leave(p));
	sync_with(c2);
	tick();
	s = expect(c1, AP_SNAPSHOT);
	assert_int_equal(s.snap.count, 1);
	expect_none(c2, 30);
	assert_int_equal(stats().in_rooms, 1);
	/* It joins again: at a later tick, after chat line 0. */
	join(c2);
	tick();
	m = expect(c2, AP_JOINED);
	assert_true(m.joined.tick > t + 4);
	assert_int_equal(m.joined.chat_seq, 1);
	assert_int_equal(m.joined.members, 2);
	s = expect(c2, AP_SNAPSHOT);
	assert_true(find(&s, id2, &e) >= 0);
	assert_int_equal(e.x, m.joined.x); /* a new spawn point */
	expect(c1, AP_SNAPSHOT);

	/* A disconnect between ticks: gone at a tick, consistent. */
	close(c1);
	t = m.joined.tick;
	s = tick_until_count(c2, 1, &t);
	assert_int_equal(find(&s, id1, &e), -1);
	assert_int_equal(stats().players, 1);
	assert_int_equal(stats().in_rooms, 1);
	assert_true(stats().consistent);
	n = (int)stats().joins;
	assert_int_equal(n, 3);
	assert_int_equal(stats().leaves, 1);
	close(c2);
	stop();
	t_watchdog_disarm();
}

/* A member that stops reading: skipped, then closed; its neighbour
 * misses nothing. */
static void test_slow_member(void **state)
{
	uint32_t id1, id2, t0, k;
	struct ap_msg s;
	struct arena_stats st;
	struct ao_io_stats io;
	int reader, stalled;
	bool skipped = false;

	(void)state;
	t_watchdog_arm(120, "arena slow member");
	/* 5 ticks of stall close it; small kernel buffers on both sides. */
	start(50, false, 5 * 50000000ull, 4096);
	reader = player(&id1);
	stalled = cl_connect_rcvbuf(4096);
	id2 = hello(stalled);
	stalled_id = id2;
	join(stalled);
	tick();
	expect(reader, AP_JOINED);
	s = expect(reader, AP_SNAPSHOT);
	t0 = s.snap.tick;
	(void)id2;
	for (k = 1; k < 20000; k++) {
		tick();
		s = expect(reader, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, t0 + k);
		st = stats();
		if (st.snaps_skipped)
			skipped = true;
		if (st.closes[AC_SLOW])
			break;
	}
	assert_true(skipped);
	assert_int_equal(st.closes[AC_SLOW], 1);
	/* Skipped for the 5 ticks of its bound and the first, at least
	 * (its kernel may make room once or twice, by collapsing its
	 * receive queue, and the count starts again). */
	assert_true(st.snaps_skipped >= 6);
	WAIT_UNTIL(ao_server_stats(arena_server(arena), -1, &io) == 0 &&
			   io.closes[AO_CLOSE_SLOW] == 1,
		   5000);
	/* The stalled one learns at once: a reset, not a FIN behind its
	 * backlog. */
	for (;;) {
		struct pollfd pfd = { .fd = stalled, .events = POLLIN };
		ssize_t n;

		assert_int_equal(poll(&pfd, 1, 5000), 1);
		n = read(stalled, rbuf, sizeof(rbuf));
		if (n > 0)
			continue;
		assert_int_equal(n, -1);
		assert_int_equal(errno, ECONNRESET);
		break;
	}
	/* The reader is soon alone, and still gets every tick. */
	t0 += k;
	tick_until_count(reader, 1, &t0);
	assert_int_equal(stats().players, 1);
	close(stalled);
	close(reader);
	stalled_id = 0;
	stop();
	t_watchdog_disarm();
}

static void send_ack(int fd, uint32_t tick_no)
{
	uint8_t p[AP_LEN_ACK];

	cl_send(fd, p, ap_enc_ack(p, tick_no));
}

/* A member that acks, then reads on without acking: closed (a reset) at
 * the first tick more than the stall bound after its last ack, though it
 * reads everything; its neighbour misses nothing.  Bad acks. */
static void test_ack_member(void **state)
{
	uint32_t id1, id2, t, last_ack;
	struct ap_msg s;
	struct arena_stats st;
	uint8_t p[AP_LEN_ACK];
	int reader, acker, fd, k;

	(void)state;
	t_watchdog_arm(120, "arena ack member");
	/* 5 ticks of stall: the 6th tick after the last ack closes. */
	start(50, false, 5 * 50000000ull, 0);
	reader = player(&id1);
	acker = player(&id2);
	tick();
	expect(reader, AP_JOINED);
	expect(acker, AP_JOINED);
	s = expect(reader, AP_SNAPSHOT);
	t = s.snap.tick;
	s = expect(acker, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, t);
	/* The same tick twice is fine. */
	send_ack(acker, t);
	send_ack(acker, t);
	for (k = 0; k < 10; k++) {
		tick();
		s = expect(reader, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, ++t);
		s = expect(acker, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, t);
		send_ack(acker, t);
		sync_with(acker);
	}
	last_ack = t;
	assert_int_equal(stats().acks, 12);
	/* It reads on and acks no more: 5 more snapshots, then the reset. */
	for (k = 1; k <= 6; k++) {
		tick();
		s = expect(reader, AP_SNAPSHOT);
		assert_int_equal(s.snap.tick, ++t);
		if (k <= 5) {
			s = expect(acker, AP_SNAPSHOT);
			assert_int_equal(s.snap.tick, t);
		}
	}
	assert_int_equal(t, last_ack + 6);
	st = stats();
	assert_int_equal(st.ack_slow, 1);
	assert_int_equal(st.closes[AC_SLOW], 1);
	for (;;) {
		struct pollfd pfd = { .fd = acker, .events = POLLIN };
		ssize_t n;

		assert_int_equal(poll(&pfd, 1, 5000), 1);
		n = read(acker, rbuf, sizeof(rbuf));
		if (n > 0)
			continue;
		assert_int_equal(n, -1);
		assert_int_equal(errno, ECONNRESET);
		break;
	}
	close(acker);
	tick_until_count(reader, 1, &t);

	/* Bad acks: before any snapshot; a tick not sent yet; going back. */
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_ack(p, 0));
	expect_closed(fd, AP_ERR_MALFORMED);
	fd = t_cl_connect(port);
	hello(fd);
	join(fd);
	tick();
	s = expect(reader, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, ++t);
	expect(fd, AP_JOINED);
	expect(fd, AP_SNAPSHOT);
	send_ack(fd, t + 1);
	expect_closed(fd, AP_ERR_MALFORMED);
	fd = player(&id2);
	tick();
	s = expect(reader, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, ++t);
	expect(fd, AP_JOINED);
	expect(fd, AP_SNAPSHOT);
	send_ack(fd, t);
	send_ack(fd, t - 1);
	expect_closed(fd, AP_ERR_MALFORMED);
	st = stats();
	assert_int_equal(st.closes[AC_MALFORMED], 3);
	assert_int_equal(st.ack_slow, 1);
	tick_until_count(reader, 1, &t);
	close(reader);
	stop();
	t_watchdog_disarm();
}

/* A spectator: joined without a position, the room's snapshots (without
 * it) and chat lines; no input; leave ends it; counted apart. */
static void test_spectator(void **state)
{
	uint32_t id1, id2, t;
	struct ap_msg s, j;
	struct ap_entry e;
	uint8_t p[64];
	int pl, w, fd;

	(void)state;
	start(2, false, 0, 0);
	pl = player(&id1);
	tick();
	expect(pl, AP_JOINED);
	s = expect(pl, AP_SNAPSHOT);
	t = s.snap.tick;
	w = t_cl_connect(port);
	id2 = hello(w);
	cl_send(w, p, ap_enc_watch(p, s.snap.room));
	sync_with(w);
	cl_send(pl, p, ap_enc_chat(p, "hi", 2));
	sync_with(pl);
	tick();
	j = expect(w, AP_JOINED);
	assert_int_equal(j.joined.room, s.snap.room);
	assert_int_equal(j.joined.members, 1);
	assert_int_equal(j.joined.tick, t + 1);
	assert_int_equal(j.joined.x, 0xffff);
	assert_int_equal(j.joined.y, 0xffff);
	expect(w, AP_CHAT_LINE);
	s = expect(w, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, t + 1);
	assert_int_equal(s.snap.count, 1);
	assert_true(find(&s, id1, &e) >= 0);
	assert_true(find(&s, id2, &e) < 0);
	expect(pl, AP_CHAT_LINE);
	expect(pl, AP_SNAPSHOT);
	assert_int_equal(stats().spectators, 1);
	assert_int_equal(stats().watches, 1);
	assert_int_equal(stats().in_rooms, 1);
	/* A room of 2 takes 2 spectators, not 3. */
	fd = t_cl_connect(port);
	hello(fd);
	cl_send(fd, p, ap_enc_watch(p, s.snap.room));
	sync_with(fd);
	{
		int fd3 = t_cl_connect(port);
		struct ap_msg m;

		hello(fd3);
		cl_send(fd3, p, ap_enc_watch(p, s.snap.room));
		m = expect(fd3, AP_ERROR);
		assert_int_equal(m.error.code, AP_ERR_ROOM_FULL);
		/* ... and no room 9. */
		cl_send(fd3, p, ap_enc_leave(p));
		cl_send(fd3, p, ap_enc_watch(p, 9));
		m = expect(fd3, AP_ERROR);
		assert_int_equal(m.error.code, AP_ERR_NO_ROOM);
		close(fd3);
	}
	/* fd watches from this tick on; then an input is order.  (Sent
	 * before the tick, the order error and the tick's joined raced.) */
	tick();
	expect(pl, AP_SNAPSHOT);
	expect(w, AP_SNAPSHOT);
	expect(fd, AP_JOINED);
	expect(fd, AP_SNAPSHOT);
	cl_send(fd, p, ap_enc_input(p, 1, 1));
	expect_closed(fd, AP_ERR_ORDER);
	/* leave ends it: nothing after the tick that applies it. */
	cl_send(w, p, ap_enc_leave(p));
	sync_with(w);
	tick();
	expect(pl, AP_SNAPSHOT);
	tick();
	expect(pl, AP_SNAPSHOT);
	expect_none(w, 100);
	assert_int_equal(stats().spectators, 0);
	close(w);
	close(pl);
	stop();
}

/* One buffer per tick for the whole room; every member the same bytes. */
static void broadcast(bool copy)
{
	enum { N = 5, TICKS = 10 };
	uint8_t first[N][1024];
	struct arena_stats st;
	uint32_t id;
	int fd[N], len[N];

	start(50, copy, 0, 0);
	for (int i = 0; i < N; i++)
		fd[i] = player(&id);
	tick();
	for (int i = 0; i < N; i++) {
		expect(fd[i], AP_JOINED);
		expect(fd[i], AP_SNAPSHOT);
	}
	st = stats();
	assert_int_equal(st.snap_bufs, copy ? N : 1);
	for (int t = 0; t < TICKS; t++) {
		tick();
		for (int i = 0; i < N; i++) {
			len[i] = cl_recv(fd[i], first[i], sizeof(first[i]),
					 5000);
			if (len[i] <= 0)
				fail_msg("copy %d tick %d player %d: %d; %s",
					 copy, t, i, len[i],
					 stats().snaps_skipped ? "skipped" :
								 "");
			assert_int_equal(first[i][0], AP_SNAPSHOT);
			assert_int_equal(len[i], len[0]);
			assert_memory_equal(first[i], first[0], (size_t)len[0]);
		}
	}
	st = stats();
	assert_int_equal(st.snaps_sent, (uint64_t)N * (TICKS + 1));
	assert_int_equal(st.snap_bufs, copy ? (uint64_t)N * (TICKS + 1) :
					      (uint64_t)TICKS + 1);
	for (int i = 0; i < N; i++)
		close(fd[i]);
	stop();
}

static void test_broadcast_shared(void **state)
{
	(void)state;
	t_watchdog_arm(60, "arena broadcast");
	broadcast(false);
	broadcast(true);
	t_watchdog_disarm();
}

/* Take every free buffer of the arena's pool but keep: how many. */
static uint32_t hog(struct ao_buf **held, uint32_t max, uint32_t keep)
{
	uint32_t n = 0;
	struct ao_buf *b;

	while (n < max && (b = ao_buf_get(arena->pool)))
		held[n++] = b;
	while (keep-- && n)
		ao_buf_put(held[--n]);
	return n;
}

/*
 * An empty pool: a chat line waits for the next tick (never lost, in
 * order); with --copy-broadcast, a member whose copy of a line cannot be
 * made is closed (nobuf), not left without it.
 */
static void test_pool_empty(void **state)
{
	static struct ao_buf *held[4096];
	uint32_t id1, id2, n;
	struct ap_msg m;
	uint8_t p[64];
	int c1, c2;

	(void)state;
	t_watchdog_arm(60, "arena empty pool");
	start(50, false, 0, 0);
	two_joined(&c1, &id1, &c2, &id2);
	cl_send(c1, p, ap_enc_chat(p, "one", 3));
	sync_with(c1);
	WAIT_UNTIL(readers_drained(), 5000); /* the pong's buffer is back */
	n = hog(held, 4096, 0);
	tick();
	expect_none(c1, 30);
	expect_none(c2, 30);
	assert_int_equal(stats().chats_deferred, 1);
	assert_int_equal(stats().snap_nobuf, 1);
	while (n)
		ao_buf_put(held[--n]);
	tick();
	for (int i = 0; i < 2; i++) {
		m = expect(i ? c2 : c1, AP_CHAT_LINE);
		assert_int_equal(m.line.chat_seq, 0);
		assert_int_equal(m.line.from, id1);
		expect(i ? c2 : c1, AP_SNAPSHOT);
	}
	close(c1);
	close(c2);
	stop();

	/* A copy per member: one buffer for the line, none for the copies:
	 * each member is closed rather than left without the line. */
	start(50, true, 0, 0);
	two_joined(&c1, &id1, &c2, &id2);
	cl_send(c1, p, ap_enc_chat(p, "two", 3));
	sync_with(c1);
	WAIT_UNTIL(readers_drained(), 5000);
	n = hog(held, 4096, 1);
	tick();
	expect_closed(c1, 0);
	expect_closed(c2, 0);
	assert_int_equal(stats().closes[AC_NOBUF], 2);
	while (n)
		ao_buf_put(held[--n]);
	stop();
	t_watchdog_disarm();
}

/* A work item that holds a strand until released. */
struct blocker {
	struct ao_work w;
	int hold; /* atomic */
	int running; /* atomic */
};

static void blocker_run(struct ao_work *w)
{
	struct blocker *b = container_of(w, struct blocker, w);

	__atomic_store_n(&b->running, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&b->hold, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static uint32_t inbox_len(struct room *r)
{
	uint32_t n;

	ao_spin_lock(&r->lock);
	n = r->in.n;
	ao_spin_unlock(&r->lock);
	return n;
}

/*
 * A player moving to a room whose tick runs late: room 2 (phase 0.62 of
 * the period) is held while room 1's tick k applies the player's leave
 * and hands it to room 2, whose late tick k - 1 then finds the join; the
 * player was in room 1's tick k - 1, so the join waits for room 2's tick
 * k, and the player's ticks never repeat.
 */
static void test_join_deferred(void **state)
{
	struct blocker blk = { .hold = 1 };
	struct ap_msg m, s;
	struct room *r2;
	uint32_t id, k;
	uint8_t p[16];
	int a, b, c;

	(void)state;
	t_watchdog_arm(60, "arena join deferred");
	start(2, false, 0, 0);
	a = player(&id);
	b = player(&id);
	c = player(&id); /* room 2 */
	tick();
	tick();
	m = expect(a, AP_JOINED);
	assert_int_equal(m.joined.room, 1);
	expect(a, AP_SNAPSHOT);
	s = expect(a, AP_SNAPSHOT);
	k = s.snap.tick + 1; /* room 1's next */
	expect(b, AP_JOINED);
	expect(b, AP_SNAPSHOT);
	expect(b, AP_SNAPSHOT);
	m = expect(c, AP_JOINED);
	assert_int_equal(m.joined.room, 2);
	expect(c, AP_SNAPSHOT);

	/* a leaves for room 2 before room 1's tick k. */
	cl_send(a, p, ap_enc_leave(p));
	cl_send(a, p, ap_enc_join(p, 2));
	sync_with(a);
	WAIT_UNTIL(readers_drained(), 5000);
	ao_spin_lock(&arena->lobby);
	r2 = arena->rooms[1];
	ao_spin_unlock(&arena->lobby);
	ao_work_init(&blk.w, blocker_run);
	assert_int_equal(ao_strand_submit(&r2->strand, &blk.w), 0);
	WAIT_UNTIL(__atomic_load_n(&blk.running, __ATOMIC_ACQUIRE), 5000);
	/* Room 2's tick k - 1 is due, then room 1's tick k. */
	assert_int_equal(ao_timers_advance(arena_timers(arena),
					   arena_period_ns(arena)),
			 0);
	s = expect(b, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, k);
	assert_int_equal(s.snap.count, 1);
	WAIT_UNTIL(inbox_len(r2) == 1, 5000); /* a's join */
	__atomic_store_n(&blk.hold, 0, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(arena_exec(arena)), 0);
	s = expect(c, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, k - 1);
	assert_int_equal(s.snap.count, 1);
	assert_int_equal(stats().joins_deferred, 1);
	expect_none(a, 30);
	/* Room 2's tick k takes a in. */
	tick();
	m = expect(a, AP_JOINED);
	assert_int_equal(m.joined.room, 2);
	assert_int_equal(m.joined.tick, k);
	s = expect(a, AP_SNAPSHOT);
	assert_int_equal(s.snap.tick, k);
	assert_int_equal(s.snap.count, 2);
	close(a);
	close(b);
	close(c);
	stop();
	t_watchdog_disarm();
}

/*
 * A chat line that waits for a buffer outlives its sender: the sender
 * closed in the tick that kept its line, and was freed at that tick's
 * end; the line goes out at the next tick all the same, from its id.
 */
static void test_deferred_chat_sender_gone(void **state)
{
	static struct ao_buf *held[4096];
	uint32_t id1, id2, n;
	struct ap_msg m;
	uint8_t p[64];
	int c1, c2;

	(void)state;
	t_watchdog_arm(60, "arena deferred chat, sender gone");
	start(50, false, 0, 0);
	two_joined(&c1, &id1, &c2, &id2);
	cl_send(c1, p, ap_enc_chat(p, "bye", 3));
	sync_with(c1);
	close(c1);
	/* Its line and its disconnect wait for the tick. */
	WAIT_UNTIL(inbox_len(arena->rooms[0]) == 2, 5000);
	WAIT_UNTIL(readers_drained(), 5000);
	n = hog(held, 4096, 0);
	tick();
	expect_none(c2, 30);
	assert_int_equal(stats().chats_deferred, 1);
	assert_int_equal(stats().players, 1); /* c1's player is freed */
	while (n)
		ao_buf_put(held[--n]);
	tick();
	m = expect(c2, AP_CHAT_LINE);
	assert_int_equal(m.line.from, id1);
	assert_int_equal(m.line.len, 3);
	expect(c2, AP_SNAPSHOT);
	close(c2);
	stop();
	t_watchdog_disarm();
}

/* Rooms fill up: the 4th player of rooms of 3 opens room 2. */
static void test_rooms_fill(void **state)
{
	struct ap_msg m;
	uint32_t id;
	int fd[7];

	(void)state;
	t_watchdog_arm(60, "arena rooms");
	start(3, false, 0, 0);
	for (int i = 0; i < 7; i++)
		fd[i] = player(&id);
	/* Rooms 2 and 3 tick later in the period than room 1. */
	tick();
	tick();
	for (int i = 0; i < 7; i++) {
		m = expect(fd[i], AP_JOINED);
		assert_int_equal(m.joined.room, 1 + i / 3);
		m = expect(fd[i], AP_SNAPSHOT);
		assert_int_equal(m.snap.count, i < 6 ? 3 : 1);
	}
	assert_int_equal(stats().rooms, 3);
	/* A numbered room that is full, or that does not exist: an error,
	 * and the connection stays. */
	{
		uint8_t p[16];
		int c = t_cl_connect(port);

		hello(c);
		cl_send(c, p, ap_enc_join(p, 1));
		m = expect(c, AP_ERROR);
		assert_int_equal(m.error.code, AP_ERR_ROOM_FULL);
		cl_send(c, p, ap_enc_join(p, 9));
		m = expect(c, AP_ERROR);
		assert_int_equal(m.error.code, AP_ERR_NO_ROOM);
		cl_send(c, p, ap_enc_join(p, 3));
		sync_with(c);
		tick();
		m = expect(c, AP_JOINED);
		assert_int_equal(m.joined.room, 3);
		assert_int_equal(m.joined.members, 2);
		close(c);
	}
	for (int i = 0; i < 7; i++)
		close(fd[i]);
	stop();
	t_watchdog_disarm();
}

/* ---- what a pipelining client sends ---- */

/* What a connection got, message by message. */
struct seen {
	struct ap_msg joined; /* the last one */
	int njoined, nchats, nerrors, last_error;
	bool have_entry;
	struct ap_entry entry; /* the player's, in the last snapshot */
	uint32_t id;
	bool eof;
};

static void seen_one(struct seen *v, const uint8_t *p, int n)
{
	struct ap_msg m;

	assert_int_equal(ap_decode(p, (size_t)n, &m), 0);
	switch (m.type) {
	case AP_JOINED:
		v->joined = m;
		v->njoined++;
		break;
	case AP_CHAT_LINE:
		v->nchats++;
		break;
	case AP_ERROR:
		v->nerrors++;
		v->last_error = m.error.code;
		break;
	case AP_SNAPSHOT:
		v->have_entry = find(&m, v->id, &v->entry) >= 0;
		break;
	}
}

/* Everything that came (the server's queues are empty after a tick). */
static void seen_drain(int fd, struct seen *v)
{
	int n;

	while ((n = cl_recv(fd, rbuf, sizeof(rbuf), 20)) > 0)
		seen_one(v, rbuf, n);
}

/* A ping; what comes before its pong is recorded. */
static void seen_sync(int fd, struct seen *v)
{
	uint8_t p[AP_LEN_PING];
	int n;

	cl_send(fd, p, ap_enc_ping(p, 77));
	for (;;) {
		n = cl_recv(fd, rbuf, sizeof(rbuf), 5000);
		assert_true(n > 0);
		if (rbuf[0] == AP_PONG)
			return;
		seen_one(v, rbuf, n);
	}
}

/* Frames of messages, one after the other in buf; the new length. */
static size_t put(uint8_t *buf, size_t at, const uint8_t *p, size_t n)
{
	ap_frame_hdr(buf + at, n);
	memcpy(buf + at + AP_HDR, p, n);
	return at + AP_HDR + n;
}

/*
 * A player in room 1 sends, in one stream: leave, join, input 1, chat,
 * leave, join, input 2.  Whatever the segmentation (all in one write, or
 * cut at any byte with a tick in between), the state follows the order:
 * no error, the chat line comes back once, and the player ends at its
 * last spawn point moved by input 2.
 */
static void rejoin_split(void)
{
	struct ap_world w = AP_WORLD_DEFAULT;
	uint8_t seq[128], p[16];
	size_t len = 0, k;
	struct seen v;
	uint32_t id;
	uint16_t x, y;
	int fd, t;

	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	len = put(seq, len, p, ap_enc_input(p, 1, 3));
	len = put(seq, len, p, ap_enc_chat(p, "hi", 2));
	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	len = put(seq, len, p, ap_enc_input(p, 2, 5));
	start(50, false, 0, 0);
	for (k = 0; k < len; k++) {
		fd = player(&id);
		tick();
		expect(fd, AP_JOINED);
		expect(fd, AP_SNAPSHOT);
		memset(&v, 0, sizeof(v));
		v.id = id;
		if (k) {
			t_cl_write(fd, seq, k);
			tick();
		}
		t_cl_write(fd, seq + k, len - k);
		seen_sync(fd, &v);
		for (t = 0; t < 4; t++) {
			tick();
			seen_drain(fd, &v);
		}
		if (v.nerrors)
			fail_msg("cut at %zu: error %s", k,
				 ap_err_name((unsigned int)v.last_error));
		assert_int_equal(v.nchats, 1);
		assert_true(v.njoined >= 1);
		assert_true(v.have_entry);
		x = v.joined.joined.x;
		y = v.joined.joined.y;
		ap_move(&w, &x, &y, 5);
		assert_int_equal(v.entry.seq, 2);
		assert_int_equal(v.entry.x, x);
		assert_int_equal(v.entry.y, y);
		close(fd);
	}
	assert_int_equal(stats().closes[AC_ORDER], 0);
	stop();
}

static void test_rejoin_pipelined(void **state)
{
	(void)state;
	t_watchdog_arm(120, "arena pipelined rejoin");
	rejoin_split();
	worker_mode = true;
	rejoin_split();
	worker_mode = false;
	t_watchdog_disarm();
}

/*
 * A refused numbered join followed, in the same write, by what a client
 * sends once in a room: the refusal comes, those are dropped and
 * counted, the connection stays, and its next join works.  The same for
 * a join refused after a leave the server had not applied yet.
 */
static void test_refused_pipelined(void **state)
{
	struct ap_world w = AP_WORLD_DEFAULT;
	uint8_t seq[128], p[16];
	struct seen v = { 0 };
	uint16_t x, y;
	size_t len = 0;
	uint32_t id;
	int fd, t;

	(void)state;
	t_watchdog_arm(60, "arena refused pipelined");
	start(50, false, 0, 0);
	fd = t_cl_connect(port);
	id = hello(fd);
	v.id = id;
	len = put(seq, len, p, ap_enc_join(p, 9));
	len = put(seq, len, p, ap_enc_input(p, 1, 3));
	len = put(seq, len, p, ap_enc_chat(p, "lost", 4));
	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	len = put(seq, len, p, ap_enc_input(p, 2, 3));
	t_cl_write(fd, seq, len);
	seen_sync(fd, &v);
	assert_int_equal(v.nerrors, 1);
	assert_int_equal(v.last_error, AP_ERR_NO_ROOM);
	tick();
	seen_drain(fd, &v);
	assert_int_equal(v.njoined, 1);
	assert_int_equal(v.nchats, 0);
	x = v.joined.joined.x;
	y = v.joined.joined.y;
	ap_move(&w, &x, &y, 3);
	assert_true(v.have_entry);
	assert_int_equal(v.entry.seq, 2);
	assert_int_equal(v.entry.x, x);
	assert_int_equal(v.entry.y, y);
	assert_int_equal(stats().refused_drops, 3);

	/* In room 1: leave, join room 7 (refused once the leave is
	 * applied), an input and a leave (dropped), join any (room 1
	 * again). */
	len = 0;
	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, 7));
	len = put(seq, len, p, ap_enc_input(p, 3, 1));
	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	len = put(seq, len, p, ap_enc_input(p, 4, 7));
	t_cl_write(fd, seq, len);
	memset(&v, 0, sizeof(v));
	v.id = id;
	seen_sync(fd, &v);
	for (t = 0; t < 3; t++) {
		tick();
		seen_drain(fd, &v);
	}
	assert_int_equal(v.nerrors, 1);
	assert_int_equal(v.last_error, AP_ERR_NO_ROOM);
	assert_int_equal(v.njoined, 1);
	x = v.joined.joined.x;
	y = v.joined.joined.y;
	ap_move(&w, &x, &y, 7);
	assert_true(v.have_entry);
	assert_int_equal(v.entry.seq, 4);
	assert_int_equal(v.entry.x, x);
	assert_int_equal(v.entry.y, y);
	assert_int_equal(stats().refused_drops, 5);
	assert_int_equal(stats().closes[AC_ORDER], 0);
	close(fd);
	stop();
	t_watchdog_disarm();
}

/*
 * Inputs that reach the server in the tick of the join: joined still
 * says the spawn point (ap_spawn()), the snapshot the moved position.
 * After a leave and a join with no input since, the seq is 0 again.
 */
static void test_joined_is_spawn(void **state)
{
	struct ap_world w = AP_WORLD_DEFAULT;
	uint8_t seq[64], p[16];
	struct ap_msg m, s;
	struct ap_entry e;
	uint16_t x, y;
	size_t len = 0;
	uint32_t id;
	int fd;

	(void)state;
	t_watchdog_arm(60, "arena joined spawn");
	start(50, false, 0, 0);
	fd = t_cl_connect(port);
	id = hello(fd);
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	len = put(seq, len, p, ap_enc_input(p, 1, 3));
	len = put(seq, len, p, ap_enc_input(p, 2, 4));
	t_cl_write(fd, seq, len);
	sync_with(fd);
	tick();
	m = expect(fd, AP_JOINED);
	ap_spawn(&w, id, m.joined.room, &x, &y);
	assert_int_equal(m.joined.x, x);
	assert_int_equal(m.joined.y, y);
	ap_move(&w, &x, &y, 3);
	ap_move(&w, &x, &y, 4);
	s = expect(fd, AP_SNAPSHOT);
	assert_true(find(&s, id, &e) >= 0);
	assert_int_equal(e.x, x);
	assert_int_equal(e.y, y);
	assert_int_equal(e.seq, 2);
	/* A new stay: seq 0 until its first input is applied. */
	len = 0;
	len = put(seq, len, p, ap_enc_leave(p));
	len = put(seq, len, p, ap_enc_join(p, AP_ROOM_ANY));
	t_cl_write(fd, seq, len);
	sync_with(fd);
	tick();
	tick();
	m = expect(fd, AP_JOINED);
	s = expect(fd, AP_SNAPSHOT);
	assert_true(find(&s, id, &e) >= 0);
	assert_int_equal(e.seq, 0);
	assert_int_equal(e.x, m.joined.x);
	close(fd);
	stop();
	t_watchdog_disarm();
}

/* A burst of inputs past the bound: flood, counted once, in both modes
 * (the handlers go on with the rest of the burst after the close). */
static void flood_once(void)
{
	uint8_t seq[100 * (AP_HDR + AP_LEN_INPUT)], p[16];
	size_t len = 0;
	uint32_t id;
	int fd;

	start(50, false, 0, 0);
	fd = player(&id);
	for (uint32_t k = 1; k <= 100; k++)
		len = put(seq, len, p, ap_enc_input(p, k, 1));
	t_cl_write(fd, seq, len);
	expect_closed(fd, AP_ERR_FLOOD);
	tick();
	tick();
	assert_int_equal(stats().closes[AC_FLOOD], 1);
	stop();
}

static void test_flood_counted_once(void **state)
{
	(void)state;
	t_watchdog_arm(60, "arena flood once");
	flood_once();
	worker_mode = true;
	flood_once();
	worker_mode = false;
	t_watchdog_disarm();
}

/* No hello within the hello deadline; no message for the idle one: each
 * its error, then the close; a player that pings stays. */
static void test_deadlines(void **state)
{
	uint8_t p[16];
	uint32_t id;
	int silent, idle, busy;

	(void)state;
	t_watchdog_arm(60, "arena deadlines");
	hello_ns = 200000000ull; /* 4 ticks */
	idle_ns = 500000000ull; /* 10 ticks */
	start(50, false, 0, 0);
	silent = t_cl_connect(port);
	idle = t_cl_connect(port);
	hello(idle);
	busy = t_cl_connect(port);
	hello(busy);
	/* Half a hello: the deadline holds all the same. */
	t_cl_write(silent, "\x05\x00\x01", 3);
	WAIT_UNTIL(stats().players == 3, 5000);
	for (int k = 0; k < 5; k++)
		tick();
	expect_closed(silent, AP_ERR_HELLO_TIMEOUT);
	for (int k = 0; k < 8; k++) {
		tick();
		cl_send(busy, p, ap_enc_ping(p, 1));
		expect(busy, AP_PONG);
	}
	expect_closed(idle, AP_ERR_IDLE);
	assert_int_equal(stats().closes[AC_HELLO_TIMEOUT], 1);
	assert_int_equal(stats().closes[AC_IDLE], 1);
	(void)id;
	close(busy);
	stop();
	hello_ns = idle_ns = ARENA_NEVER;
	t_watchdog_disarm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_clients),
		cmocka_unit_test(test_server_full),
		cmocka_unit_test(test_tick_boundaries),
		cmocka_unit_test(test_tick_boundaries_worker),
		cmocka_unit_test(test_slow_member),
		cmocka_unit_test(test_ack_member),
		cmocka_unit_test(test_spectator),
		cmocka_unit_test(test_broadcast_shared),
		cmocka_unit_test(test_rooms_fill),
		cmocka_unit_test(test_join_deferred),
		cmocka_unit_test(test_pool_empty),
		cmocka_unit_test(test_deferred_chat_sender_gone),
		cmocka_unit_test(test_rejoin_pipelined),
		cmocka_unit_test(test_refused_pipelined),
		cmocka_unit_test(test_joined_is_spawn),
		cmocka_unit_test(test_flood_counted_once),
		cmocka_unit_test(test_deadlines),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
