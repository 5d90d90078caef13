// SPDX-License-Identifier: MIT
/*
 * The arena protocol's codec and movement rules (tools/common/
 * arena_proto.c), shared by ao-arena and ao-bots: every message encodes
 * and decodes back to the same fields at the sizes PROTOCOL.md gives;
 * wrong lengths, unknown types, bad fields and empty or long chat text
 * are refused with the right code; the movement rules are the documented
 * ones (speed per axis, clamped to the arena) and a client replaying its
 * inputs lands exactly where they say.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tools/common/arena_proto.h"
#include "helpers.h"

static uint8_t buf[64 * 1024];

static void test_client_messages(void **state)
{
	struct ap_msg m;
	size_t n;

	(void)state;
	n = ap_enc_hello(buf, "bot-7", 5);
	assert_int_equal(n, 8);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_HELLO);
	assert_int_equal(m.hello.version, AP_VERSION);
	assert_int_equal(m.hello.name_len, 5);
	assert_memory_equal(m.hello.name, "bot-7", 5);
	assert_true(ap_is_client_type(m.type));

	n = ap_enc_join(buf, AP_ROOM_ANY);
	assert_int_equal(n, 5);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_JOIN);
	assert_int_equal(m.join.room, AP_ROOM_ANY);

	n = ap_enc_input(buf, 0x01020304, 8);
	assert_int_equal(n, 6);
	/* Little-endian on the wire. */
	assert_int_equal(buf[1], 0x04);
	assert_int_equal(buf[4], 0x01);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.input.seq, 0x01020304);
	assert_int_equal(m.input.dir, 8);

	n = ap_enc_chat(buf, "hello room", 10);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_CHAT);
	assert_int_equal(m.chat.len, 10);
	assert_memory_equal(m.chat.text, "hello room", 10);

	n = ap_enc_ping(buf, 0x1122334455667788ull);
	assert_int_equal(n, 9);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.ping.stamp, 0x1122334455667788ull);

	n = ap_enc_leave(buf);
	assert_int_equal(n, 1);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_LEAVE);

	n = ap_enc_ack(buf, 0x0a0b0c0d);
	assert_int_equal(n, AP_LEN_ACK);
	assert_int_equal(buf[0], 0x07);
	assert_int_equal(buf[1], 0x0d);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_ACK);
	assert_int_equal(m.ack.tick, 0x0a0b0c0d);
	assert_true(ap_is_client_type(m.type));
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);
	assert_int_equal(ap_decode(buf, n + 1, &m), AP_ERR_MALFORMED);

	n = ap_enc_watch(buf, 3);
	assert_int_equal(n, AP_LEN_WATCH);
	assert_int_equal(buf[0], 0x08);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_WATCH);
	assert_int_equal(m.watch.room, 3);
	assert_true(ap_is_client_type(m.type));
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);
	buf[0] = 0x09;
	assert_false(ap_is_client_type(buf[0]));
}

static void test_server_messages(void **state)
{
	struct ap_entry e, in[3] = {
		{ .player = 1, .x = 0, .y = 4095, .seq = 0 },
		{ .player = 70000, .x = 17, .y = 33, .seq = 0xfffffffe },
		{ .player = 3, .x = 4095, .y = 0, .seq = 9 },
	};
	struct ap_msg m;
	size_t n;

	(void)state;
	n = ap_enc_welcome(buf, 42, 20, 50, 4096, 4096, 8);
	assert_int_equal(n, AP_LEN_WELCOME);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.welcome.player, 42);
	assert_int_equal(m.welcome.tick_hz, 20);
	assert_int_equal(m.welcome.room_size, 50);
	assert_int_equal(m.welcome.width, 4096);
	assert_int_equal(m.welcome.height, 4096);
	assert_int_equal(m.welcome.speed, 8);

	n = ap_enc_joined(buf, 5, 49, 1234567, 100, 200, 77);
	assert_int_equal(n, AP_LEN_JOINED);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.joined.room, 5);
	assert_int_equal(m.joined.members, 49);
	assert_int_equal(m.joined.tick, 1234567);
	assert_int_equal(m.joined.x, 100);
	assert_int_equal(m.joined.y, 200);
	assert_int_equal(m.joined.chat_seq, 77);

	n = ap_enc_snap_hdr(buf, 99, 5, 3);
	for (unsigned int i = 0; i < 3; i++)
		ap_snap_put(buf, i, &in[i]);
	n = ap_snapshot_len(3);
	assert_int_equal(n, 11 + 36);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.snap.tick, 99);
	assert_int_equal(m.snap.room, 5);
	assert_int_equal(m.snap.count, 3);
	for (unsigned int i = 0; i < 3; i++) {
		ap_snap_entry(&m, i, &e);
		assert_memory_equal(&e, &in[i], sizeof(e));
	}
	/* An empty room's snapshot is valid. */
	n = ap_enc_snap_hdr(buf, 100, 5, 0);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.snap.count, 0);

	n = ap_enc_chat_line(buf, 5, 99, 12, 42, "gg", 2);
	assert_int_equal(n, 19);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.line.room, 5);
	assert_int_equal(m.line.tick, 99);
	assert_int_equal(m.line.chat_seq, 12);
	assert_int_equal(m.line.from, 42);
	assert_int_equal(m.line.len, 2);
	assert_memory_equal(m.line.text, "gg", 2);

	n = ap_enc_pong(buf, 5);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.type, AP_PONG);
	assert_int_equal(m.ping.stamp, 5);
	assert_false(ap_is_client_type(m.type));

	n = ap_enc_error(buf, AP_ERR_FLOOD);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	assert_int_equal(m.error.code, AP_ERR_FLOOD);
	assert_string_equal(ap_err_name(AP_ERR_FLOOD), "flood");
	assert_string_equal(ap_err_name(AP_ERR_HELLO_TIMEOUT), "hello_timeout");
	assert_string_equal(ap_err_name(AP_ERR_IDLE), "idle");
	assert_string_equal(ap_err_name(AP_ERR_NR), "?");
	assert_string_equal(ap_err_name(200), "?");
}

static void test_malformed(void **state)
{
	uint8_t name[40];
	struct ap_msg m;
	size_t n;

	(void)state;
	assert_int_equal(ap_decode(buf, 0, &m), AP_ERR_MALFORMED);
	buf[0] = 0x7f;
	assert_int_equal(ap_decode(buf, 1, &m), AP_ERR_BAD_TYPE);
	buf[0] = 0;
	assert_int_equal(ap_decode(buf, 1, &m), AP_ERR_BAD_TYPE);
	buf[0] = 0xff;
	assert_int_equal(ap_decode(buf, 9, &m), AP_ERR_BAD_TYPE);

	/* Every fixed-size message refuses one byte more or less. */
	n = ap_enc_join(buf, 1);
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);
	assert_int_equal(ap_decode(buf, n + 1, &m), AP_ERR_MALFORMED);
	n = ap_enc_input(buf, 1, 0);
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);
	assert_int_equal(ap_decode(buf, n + 1, &m), AP_ERR_MALFORMED);
	n = ap_enc_ping(buf, 1);
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);
	n = ap_enc_leave(buf);
	assert_int_equal(ap_decode(buf, n + 1, &m), AP_ERR_MALFORMED);
	n = ap_enc_joined(buf, 1, 1, 1, 1, 1, 1);
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);

	/* A direction past north-west. */
	n = ap_enc_input(buf, 1, AP_DIR_NR);
	assert_int_equal(ap_decode(buf, n, &m), AP_ERR_MALFORMED);

	/* Hello: version, name length 1..32 matching the frame, no NUL. */
	memset(name, 'a', sizeof(name));
	n = ap_enc_hello(buf, name, 32);
	assert_int_equal(ap_decode(buf, n, &m), 0);
	buf[2] = 33;
	assert_int_equal(ap_decode(buf, 36, &m), AP_ERR_MALFORMED);
	n = ap_enc_hello(buf, name, 3);
	assert_int_equal(ap_decode(buf, n + 1, &m), AP_ERR_MALFORMED);
	buf[1] = 2;
	assert_int_equal(ap_decode(buf, n, &m), AP_ERR_MALFORMED);
	n = ap_enc_hello(buf, "a\0b", 3);
	assert_int_equal(ap_decode(buf, n, &m), AP_ERR_MALFORMED);
	buf[0] = AP_HELLO;
	buf[1] = AP_VERSION;
	buf[2] = 0;
	assert_int_equal(ap_decode(buf, 3, &m), AP_ERR_MALFORMED);

	/* Chat: 1..200 bytes. */
	memset(buf + 1, 'x', 250);
	buf[0] = AP_CHAT;
	assert_int_equal(ap_decode(buf, 1, &m), AP_ERR_CHAT_LONG);
	assert_int_equal(ap_decode(buf, 1 + AP_CHAT_MAX, &m), 0);
	assert_int_equal(ap_decode(buf, 2 + AP_CHAT_MAX, &m), AP_ERR_CHAT_LONG);

	/* A snapshot whose count does not match its length. */
	n = ap_enc_snap_hdr(buf, 1, 1, 2);
	assert_int_equal(ap_decode(buf, ap_snapshot_len(2), &m), 0);
	assert_int_equal(ap_decode(buf, ap_snapshot_len(2) - 1, &m),
			 AP_ERR_MALFORMED);
	assert_int_equal(ap_decode(buf, ap_snapshot_len(3), &m),
			 AP_ERR_MALFORMED);
	assert_int_equal(ap_decode(buf, n - 1, &m), AP_ERR_MALFORMED);

	/* A welcome with player 0 or a zero tick rate. */
	n = ap_enc_welcome(buf, 0, 20, 50, 10, 10, 1);
	assert_int_equal(ap_decode(buf, n, &m), AP_ERR_MALFORMED);
	n = ap_enc_welcome(buf, 1, 0, 50, 10, 10, 1);
	assert_int_equal(ap_decode(buf, n, &m), AP_ERR_MALFORMED);
}

/* Decoding any bytes never reads out of bounds (ASan checks) and
 * anything accepted re-encodes to the same bytes. */
static void test_random_bytes(void **state)
{
	uint32_t seed = 12345;
	uint8_t *p = malloc(300), out[300];
	struct ap_msg m;

	(void)state;
	assert_non_null(p);
	for (int round = 0; round < 200000; round++) {
		size_t n = 1 + (seed >> 8) % 40, i, k = 0;

		for (i = 0; i < n; i++) {
			seed = seed * 1103515245 + 12345;
			p[i] = (uint8_t)(seed >> 16);
		}
		p[0] = (uint8_t)(round % 8 == 0 ? p[0] : 0x80 + round % 8);
		if (round % 3 == 0)
			p[0] = (uint8_t)(1 + round % 6);
		if (ap_decode(p, n, &m))
			continue;
		switch (m.type) {
		case AP_INPUT:
			k = ap_enc_input(out, m.input.seq, m.input.dir);
			break;
		case AP_JOIN:
			k = ap_enc_join(out, m.join.room);
			break;
		case AP_JOINED:
			k = ap_enc_joined(out, m.joined.room, m.joined.members,
					  m.joined.tick, m.joined.x, m.joined.y,
					  m.joined.chat_seq);
			break;
		case AP_CHAT:
			k = ap_enc_chat(out, m.chat.text, m.chat.len);
			break;
		default:
			continue;
		}
		assert_int_equal(k, n);
		assert_memory_equal(out, p, n);
	}
	free(p);
}

static void test_movement(void **state)
{
	struct ap_world w = { .width = 100, .height = 50, .speed = 8 };
	static const int dx[9] = { 0, 0, 1, 1, 1, 0, -1, -1, -1 };
	static const int dy[9] = { 0, -1, -1, 0, 1, 1, 1, 0, -1 };
	uint16_t x, y;

	(void)state;
	/* Each direction moves speed along its axes. */
	for (uint8_t d = 0; d < AP_DIR_NR; d++) {
		x = 50;
		y = 25;
		ap_move(&w, &x, &y, d);
		assert_int_equal(x, 50 + dx[d] * 8);
		assert_int_equal(y, 25 + dy[d] * 8);
	}
	/* Clamped to [0, size - 1] on each axis. */
	x = 3;
	y = 45;
	ap_move(&w, &x, &y, 6); /* south-west */
	assert_int_equal(x, 0);
	assert_int_equal(y, 49);
	x = 95;
	y = 2;
	ap_move(&w, &x, &y, 2); /* north-east */
	assert_int_equal(x, 99);
	assert_int_equal(y, 0);
	/* At the edge, moving outwards stays; inwards moves. */
	ap_move(&w, &x, &y, 2);
	assert_int_equal(x, 99);
	assert_int_equal(y, 0);
	ap_move(&w, &x, &y, 6);
	assert_int_equal(x, 91);
	assert_int_equal(y, 8);
	/* A bad direction changes nothing. */
	ap_move(&w, &x, &y, AP_DIR_NR);
	assert_int_equal(x, 91);
	assert_int_equal(y, 8);
}

/* A client predicting from its inputs, against an independent model
 * written from PROTOCOL.md's formula. */
static void test_prediction(void **state)
{
	struct ap_world w = AP_WORLD_DEFAULT;
	uint16_t x, y;
	int32_t mx, my;
	uint32_t seed = 7;

	(void)state;
	ap_spawn(&w, 1234, 7, &x, &y);
	assert_true(x < w.width && y < w.height);
	mx = x;
	my = y;
	for (int i = 0; i < 100000; i++) {
		static const int dx[9] = { 0, 0, 1, 1, 1, 0, -1, -1, -1 };
		static const int dy[9] = { 0, -1, -1, 0, 1, 1, 1, 0, -1 };
		uint8_t d;

		seed = seed * 1103515245 + 12345;
		/* Drift towards a corner for a while to hit the walls. */
		d = (uint8_t)((seed >> 16) % 9);
		if ((i / 5000) % 2)
			d = (uint8_t)(2 + (i / 10000) % 4 * 2);
		ap_move(&w, &x, &y, d);
		mx += dx[d] * w.speed;
		my += dy[d] * w.speed;
		mx = mx < 0 ? 0 : mx > w.width - 1 ? w.width - 1 : mx;
		my = my < 0 ? 0 : my > w.height - 1 ? w.height - 1 : my;
		assert_int_equal(x, mx);
		assert_int_equal(y, my);
	}
	/* Spawns are deterministic and in the world. */
	{
		uint16_t x2, y2;

		ap_spawn(&w, 1234, 7, &x, &y);
		ap_spawn(&w, 1234, 7, &x2, &y2);
		assert_int_equal(x, x2);
		assert_int_equal(y, y2);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_messages),
		cmocka_unit_test(test_server_messages),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_movement),
		cmocka_unit_test(test_prediction),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
