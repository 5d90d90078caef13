// SPDX-License-Identifier: MIT
/*
 * ao-bots' verifier (tools/bots/bot.c) against servers that lie: each
 * test plays a bot through a stream of server messages built with the
 * shared codec, a correct one first (no failure, the latency measured),
 * then the same stream with one thing wrong, which must be caught and
 * counted under its own name: a position off by one unit, a tick going
 * back, an applied seq going back or never sent, a snapshot of another
 * room or before joining, the bot missing from its room, a duplicate
 * player, a member count that does not match, chat lines skipped,
 * repeated or changed, an own line or input never coming back, and a
 * player in two rooms at once.  Every stream is also fed one byte at a
 * time, which must change nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tools/bots/bots.h"
#include "helpers.h"

#define MS 1000000ull

static struct bot_meas meas;
static struct bots_ctx ctx;
static uint64_t cross_slots[1024];
static const struct bot_env env = { .meas = &meas, .ctx = &ctx };

static struct bot *bot_new(uint32_t id)
{
	struct bot *b = calloc(1, sizeof(*b));

	assert_non_null(b);
	b->id = id;
	b->env = &env;
	bot_start(b, 0);
	return b;
}

static void bot_free(struct bot *b)
{
	free(b->part);
	free(b);
}

static void reset(void)
{
	memset(&meas, 0, sizeof(meas));
	meas.on = true;
	hist_init(&meas.latency);
	hist_init(&meas.jitter);
	hist_init(&meas.rtt);
	memset(&ctx, 0, sizeof(ctx));
	memset(cross_slots, 0, sizeof(cross_slots));
	ctx.o.chat_ns = 0;
	ctx.o.ping_ns = 0;
	ctx.o.check_cross = true;
	ctx.cross = cross_slots;
	ctx.cross_mask = 1023;
}

static uint64_t fails(void)
{
	uint64_t n = 0;

	for (int i = 0; i < F_NR; i++)
		n += meas.fail[i];
	return n;
}

/* The only failure is f, n times. */
static void assert_only(enum bot_fail f, uint64_t n)
{
	assert_int_equal(meas.fail[f], n);
	assert_int_equal(fails(), n);
}

/* Deliver a payload as a frame, whole or a byte at a time. */
static bool bytewise;

static void deliver(struct bot *b, const uint8_t *payload, size_t len,
		    uint64_t now)
{
	uint8_t frame[AP_HDR + 16384];

	ap_frame_hdr(frame, len);
	memcpy(frame + AP_HDR, payload, len);
	if (!bytewise) {
		bot_on_data(b, frame, AP_HDR + len, now);
		return;
	}
	for (size_t i = 0; i < AP_HDR + len; i++)
		bot_on_data(b, frame + i, 1, now);
}

static void welcome(struct bot *b, uint32_t player)
{
	uint8_t p[64];

	deliver(b, p, ap_enc_welcome(p, player, 20, 50, 100, 100, 8), 0);
	assert_int_equal(b->state, B_JOINING);
}

static void joined(struct bot *b, uint32_t room, uint16_t members,
		   uint32_t tick, uint16_t x, uint16_t y, uint32_t chat_seq)
{
	uint8_t p[64];

	deliver(b, p, ap_enc_joined(p, room, members, tick, x, y, chat_seq), 0);
}

/* A snapshot of n entries. */
static void snapshot(struct bot *b, uint32_t tick, uint32_t room,
		     const struct ap_entry *e, unsigned int n, uint64_t now)
{
	uint8_t p[16384];

	ap_enc_snap_hdr(p, tick, room, (uint16_t)n);
	for (unsigned int i = 0; i < n; i++)
		ap_snap_put(p, i, &e[i]);
	deliver(b, p, ap_snapshot_len(n), now);
}

static void chat_line(struct bot *b, uint32_t room, uint32_t tick, uint32_t seq,
		      uint32_t from, const char *text, size_t len)
{
	uint8_t p[512];

	deliver(b, p, ap_enc_chat_line(p, room, tick, seq, from, text, len), 0);
}

/*
 * The script: player 7 joins room 3 at tick 100 at (50, 50) with one
 * other member (player 9); sends east (3) at 10 ms, south (5) at 20 ms;
 * snapshots at 100 (nothing applied), 101 (the first), 102 (both).  The
 * world is 100 x 100, speed 8: (58, 50), then (58, 58).
 */
enum fault {
	OK,
	BAD_POSITION,
	TICK_BACK,
	SEQ_BACK,
	SEQ_UNKNOWN,
	OTHER_ROOM,
	SELF_MISSING,
	DUPLICATE,
	COUNT,
};

static void play(enum fault fault)
{
	struct bot *b = bot_new(1);
	struct ap_entry e[3] = {
		{ .player = 7, .x = 50, .y = 50, .seq = 0 },
		{ .player = 9, .x = 1, .y = 1, .seq = 0 },
	};

	welcome(b, 7);
	joined(b, 3, 2, 100, 50, 50, 0);
	assert_int_equal(b->state, B_ROOM);
	assert_true(bot_send_input(b, 3, 10 * MS));
	assert_true(bot_send_input(b, 5, 20 * MS));
	snapshot(b, 100, 3, e, fault == COUNT ? 1 : 2, 40 * MS);
	e[0].x = 58;
	e[0].seq = 1;
	if (fault == BAD_POSITION)
		e[0].x = 59;
	if (fault == SEQ_UNKNOWN)
		e[0].seq = 5;
	snapshot(b, fault == TICK_BACK ? 100 : 101, 3, e, 2, 90 * MS);
	/* A server that misplaced the bot goes on from where it put it. */
	e[0].x = fault == BAD_POSITION ? 59 : 58;
	e[0].y = 58;
	e[0].seq = fault == SEQ_BACK ? 0 : 2;
	if (fault == SEQ_UNKNOWN)
		e[0].seq = 6;
	e[2] = e[1];
	snapshot(b, 102, fault == OTHER_ROOM ? 4 : 3,
		 fault == SELF_MISSING ? e + 1 : e,
		 fault == DUPLICATE    ? 3 :
		 fault == SELF_MISSING ? 1 :
					 2,
		 140 * MS);

	switch (fault) {
	case OK:
		assert_int_equal(fails(), 0);
		assert_int_equal(meas.stat[S_SNAPS], 3);
		assert_int_equal(meas.stat[S_SNAPS_EXPECTED], 3);
		assert_int_equal(meas.stat[S_SNAP_GAPS], 0);
		assert_int_equal(meas.stat[S_INPUTS_SEEN], 2);
		/* 90 - 10 and 140 - 20 ms, within the histogram's 1%. */
		assert_int_equal(meas.latency.total, 2);
		assert_in_range(meas.latency.min, 79 * MS, 81 * MS);
		assert_in_range(meas.latency.max, 119 * MS, 121 * MS);
		assert_int_equal(b->applied_seq, 2);
		assert_int_equal(b->x, 58);
		assert_int_equal(b->y, 58);
		/* Nothing overdue, even long after. */
		bot_check_overdue(b, 100000 * MS);
		assert_int_equal(fails(), 0);
		break;
	case BAD_POSITION:
		/* One failure: the bot takes the server's word after it. */
		assert_only(F_POSITION, 1);
		break;
	case TICK_BACK:
		assert_only(F_TICK_ORDER, 1);
		break;
	case SEQ_BACK:
		assert_only(F_SEQ_BACK, 1);
		break;
	case SEQ_UNKNOWN:
		/* 5: never sent; then 6, not sent either. */
		assert_only(F_SEQ_UNKNOWN, 2);
		break;
	case OTHER_ROOM:
		assert_only(F_WRONG_ROOM, 1);
		break;
	case SELF_MISSING:
		assert_only(F_SELF_MISSING, 1);
		break;
	case DUPLICATE:
		assert_only(F_BAD_SNAPSHOT, 1);
		break;
	case COUNT:
		assert_only(F_COUNT, 1);
		break;
	}
	bot_free(b);
}

static void test_snapshots(void **state)
{
	(void)state;
	for (int bw = 0; bw < 2; bw++) {
		bytewise = bw;
		for (int f = OK; f <= COUNT; f++) {
			reset();
			play((enum fault)f);
		}
	}
	bytewise = false;
}

static void test_outside_and_gaps(void **state)
{
	struct ap_entry e = { .player = 7, .x = 50, .y = 50 };
	struct bot *b;

	(void)state;
	reset();
	b = bot_new(2);
	welcome(b, 7);
	/* A snapshot before joined. */
	snapshot(b, 99, 3, &e, 1, 0);
	assert_only(F_SNAP_OUTSIDE, 1);
	reset();
	joined(b, 3, 1, 100, 50, 50, 0);
	/* Ticks 100 and 104: three missed, counted, not failures. */
	snapshot(b, 100, 3, &e, 1, 0);
	snapshot(b, 104, 3, &e, 1, 200 * MS);
	assert_int_equal(fails(), 0);
	assert_int_equal(meas.stat[S_SNAPS], 2);
	assert_int_equal(meas.stat[S_SNAPS_EXPECTED], 5);
	assert_int_equal(meas.stat[S_SNAP_GAPS], 3);
	/* Arrived 200 ms apart for 4 ticks of 50 ms: no jitter. */
	assert_int_equal(meas.jitter.total, 1);
	assert_int_equal(meas.jitter.max, 0);
	/* A tick before the join took effect. */
	reset();
	b->state = B_JOINING;
	joined(b, 5, 1, 110, 50, 50, 0);
	snapshot(b, 109, 5, &e, 1, 0);
	assert_only(F_TICK_ORDER, 1);
	/* Joined at a tick not above the last one seen. */
	reset();
	b->state = B_JOINING;
	joined(b, 6, 1, 104, 50, 50, 0);
	assert_only(F_TICK_ORDER, 1);
	bot_free(b);
}

static void test_chat(void **state)
{
	char text[AP_CHAT_MAX + 1];
	struct bot *b;
	size_t n;

	(void)state;
	reset();
	b = bot_new(3);
	welcome(b, 7);
	joined(b, 3, 2, 100, 50, 50, 40);
	/* Others' lines 40, 41; ours (line 0 of this bot) as 42. */
	chat_line(b, 3, 100, 40, 9, "hi", 2);
	chat_line(b, 3, 100, 41, 9, "there", 5);
	assert_true(bot_send_chat(b, 0));
	n = bot_chat_text(b, 0, text);
	chat_line(b, 3, 101, 42, 7, text, n);
	assert_int_equal(fails(), 0);
	assert_int_equal(meas.stat[S_CHAT_LINES], 3);
	assert_int_equal(b->chat_head, b->chat_tail);

	/* 44 after 42: one missed. */
	chat_line(b, 3, 102, 44, 9, "x", 1);
	assert_only(F_CHAT_GAP, 1);
	/* 44 again. */
	reset();
	chat_line(b, 3, 102, 44, 9, "x", 1);
	assert_only(F_CHAT_DUP, 1);
	/* Another room's line. */
	reset();
	chat_line(b, 4, 102, 45, 9, "x", 1);
	assert_only(F_WRONG_ROOM, 1);
	/* Our own line, changed. */
	reset();
	assert_true(bot_send_chat(b, 0));
	n = bot_chat_text(b, 1, text);
	text[3] ^= 1;
	chat_line(b, 3, 103, 45, 7, text, n);
	assert_only(F_CHAT_TEXT, 1);
	/* Our own line, never back. */
	reset();
	assert_true(bot_send_chat(b, 1000 * MS));
	bot_check_overdue(b, 1000 * MS + CHAT_LOST_NS - 1);
	assert_int_equal(fails(), 0);
	bot_check_overdue(b, 1000 * MS + CHAT_LOST_NS);
	assert_only(F_CHAT_LOST, 1);
	/* A line of ours we never sent. */
	reset();
	chat_line(b, 3, 104, 46, 7, "hello", 5);
	assert_only(F_CHAT_TEXT, 1);
	bot_free(b);
}

static void test_leave_and_rejoin(void **state)
{
	struct ap_entry e = { .player = 7, .x = 50, .y = 50 };
	char text[AP_CHAT_MAX + 1];
	struct bot *b;
	size_t n;

	(void)state;
	reset();
	b = bot_new(4);
	welcome(b, 7);
	joined(b, 3, 1, 100, 50, 50, 0);
	snapshot(b, 100, 3, &e, 1, 0);
	/* An input and a chat line, then leave: the old room may still
	 * talk (its snapshot, our line) until joined. */
	assert_true(bot_send_input(b, 3, 0));
	assert_true(bot_send_chat(b, 0));
	bot_leave(b, 0);
	assert_int_equal(b->state, B_LEAVING);
	assert_false(bot_send_input(b, 3, 0));
	snapshot(b, 101, 3, &e, 1, 50 * MS);
	n = bot_chat_text(b, 0, text);
	chat_line(b, 3, 101, 0, 7, text, n);
	/* Inputs sent in the room we left are not overdue outside it. */
	bot_check_overdue(b, 100000 * MS);
	bot_join(b, 0);
	joined(b, 8, 3, 103, 10, 20, 5);
	assert_int_equal(fails(), 0);
	/* The input applied in room 3 shows as seq 1 from now on. */
	e.x = 10;
	e.y = 20;
	e.seq = 1;
	snapshot(b, 103, 8, &e, 1, 200 * MS);
	assert_int_equal(meas.fail[F_COUNT], 1); /* joined said 3 */
	reset();
	snapshot(b, 104, 8, &e, 1, 250 * MS);
	assert_int_equal(fails(), 0);
	/* Room 3 talking after we joined room 8. */
	snapshot(b, 105, 3, &e, 1, 300 * MS);
	assert_only(F_WRONG_ROOM, 1);
	/* An own chat line not back before the next joined is lost. */
	reset();
	assert_true(bot_send_chat(b, 0));
	bot_leave(b, 0);
	bot_join(b, 0);
	joined(b, 9, 1, 110, 10, 20, 0);
	assert_only(F_CHAT_LOST, 1);
	bot_free(b);
}

static void test_input_lost(void **state)
{
	struct ap_entry e = { .player = 7, .x = 50, .y = 50 };
	struct bot *b;

	(void)state;
	reset();
	b = bot_new(5);
	welcome(b, 7);
	joined(b, 3, 1, 100, 50, 50, 0);
	assert_true(bot_send_input(b, 1, 1000 * MS));
	/* A server that never applies it. */
	snapshot(b, 100, 3, &e, 1, 1050 * MS);
	snapshot(b, 101, 3, &e, 1, 1100 * MS);
	bot_check_overdue(b, 1000 * MS + INPUT_LOST_NS - 1);
	assert_int_equal(fails(), 0);
	bot_check_overdue(b, 1000 * MS + INPUT_LOST_NS);
	assert_only(F_INPUT_LOST, 1);
	bot_free(b);
}

static void test_room_cross(void **state)
{
	struct ap_entry a[2] = { { .player = 7, .x = 50, .y = 50 },
				 { .player = 11, .x = 1, .y = 1 } };
	struct ap_entry c[2] = { { .player = 9, .x = 50, .y = 50 },
				 { .player = 11, .x = 1, .y = 1 } };
	struct bot *b1, *b2;

	(void)state;
	reset();
	/* Ids divisible by 8 do the shared check. */
	b1 = bot_new(8);
	b2 = bot_new(16);
	welcome(b1, 7);
	welcome(b2, 9);
	joined(b1, 3, 2, 100, 50, 50, 0);
	joined(b2, 4, 2, 100, 50, 50, 0);
	snapshot(b1, 100, 3, a, 2, 0);
	snapshot(b2, 100, 4, c, 2, 0);
	/* Player 11 in rooms 3 and 4 at tick 100. */
	assert_only(F_ROOM_CROSS, 1);
	/* At different ticks it may move. */
	reset();
	ctx.cross = cross_slots;
	snapshot(b1, 101, 3, a, 2, 0);
	snapshot(b2, 102, 4, c, 2, 0);
	assert_int_equal(fails(), 0);
	bot_free(b1);
	bot_free(b2);
}

static void test_protocol(void **state)
{
	uint8_t p[64], frame[4] = { 0, 0, 0, 0 };
	struct bot *b;

	(void)state;
	reset();
	b = bot_new(6);
	/* joined before welcome; an unknown type; a zero-length frame; an
	 * error from the server; a client message. */
	deliver(b, p, ap_enc_joined(p, 1, 1, 1, 1, 1, 1), 0);
	assert_only(F_PROTOCOL, 1);
	p[0] = 0x99;
	deliver(b, p, 1, 0);
	bot_on_data(b, frame, 2, 0);
	deliver(b, p, ap_enc_error(p, AP_ERR_FLOOD), 0);
	deliver(b, p, ap_enc_leave(p), 0);
	assert_only(F_PROTOCOL, 5);
	assert_int_equal(meas.stat[S_ERRORS_RX], 1);
	/* The stream is still in step: a welcome is taken. */
	welcome(b, 3);
	assert_int_equal(b->player, 3);
	bot_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshots),
		cmocka_unit_test(test_outside_and_gaps),
		cmocka_unit_test(test_chat),
		cmocka_unit_test(test_leave_and_rejoin),
		cmocka_unit_test(test_input_lost),
		cmocka_unit_test(test_room_cross),
		cmocka_unit_test(test_protocol),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
