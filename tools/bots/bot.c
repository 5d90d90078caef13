// SPDX-License-Identifier: MIT
/*
 * One bot: the player's side of the arena protocol, and the verifier.
 *
 * A bot knows its spawn point (joined) and every input it sent, so it
 * knows where the server must put it after the input with seq s (the
 * world's rules, tools/common/arena_proto.c): each snapshot's entry for
 * the bot is checked against that, and the seq it names must be one the
 * bot sent, never going back.  Ticks only go up on a connection, across
 * rooms too.  A room's chat lines are numbered: a member sees every
 * number from the one joined gave, once, in order; and its own lines come
 * back intact.  Everything it gets must come from the room it joined
 * (the one it is leaving may still talk until the next joined).
 *
 * No I/O here: bytes come in through bot_on_data() and go out through
 * bot_queue() into the bot's send queue; bots.c (or a test) moves them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bots.h"

#define MAX_LOG 10 /* failure messages per run, then a count */

static const char *const fail_names[F_NR] = {
	[F_CONNECT] = "connect",	   [F_CLOSED] = "closed",
	[F_PROTOCOL] = "protocol",	   [F_SNAP_OUTSIDE] = "outside_room",
	[F_WRONG_ROOM] = "wrong_room",	   [F_TICK_ORDER] = "tick_order",
	[F_BAD_SNAPSHOT] = "bad_snapshot", [F_SELF_MISSING] = "self_missing",
	[F_SEQ_BACK] = "seq_back",	   [F_SEQ_UNKNOWN] = "seq_unknown",
	[F_POSITION] = "position",	   [F_INPUT_LOST] = "input_lost",
	[F_COUNT] = "member_count",	   [F_CHAT_GAP] = "chat_gap",
	[F_CHAT_DUP] = "chat_dup",	   [F_CHAT_LOST] = "chat_lost",
	[F_CHAT_TEXT] = "chat_text",	   [F_ROOM_CROSS] = "room_cross",
	[F_STALL_OPEN] = "stall_open",
};

static int log_count; /* atomic */

const char *bot_fail_name(enum bot_fail f)
{
	return f < F_NR ? fail_names[f] : "?";
}

void bot_fail(struct bot *b, enum bot_fail f, const char *fmt, ...)
{
	struct bot_meas *m = b->env->meas;
	int n = __atomic_fetch_add(&log_count, 1, __ATOMIC_RELAXED);
	char buf[200];
	va_list ap;

	BOT_BUMP(m->fail[f], 1);
	if (n >= MAX_LOG) {
		if (n == MAX_LOG)
			fprintf(stderr,
				"ao-bots: further failures not shown (see "
				"the counts)\n");
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ao-bots: bot %u (player %u): %s: %s\n", b->id,
		b->player, fail_names[f], buf);
}

uint32_t bot_rnd(struct bot *b)
{
	uint32_t x = b->rng;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	b->rng = x;
	return x;
}

/* Uniform in [mean / 2, 3 mean / 2). */
static uint64_t around(struct bot *b, uint64_t mean)
{
	return mean / 2 +
	       (uint64_t)(((unsigned __int128)mean * bot_rnd(b)) >> 32);
}

void bot_reset(struct bot *b)
{
	b->state = B_IDLE;
	b->stalled = false;
	/* A WebSocket's queue already holds the upgrade request, and may
	 * still see its send complete: bots.c empties it at connect. */
	if (!b->ws)
		b->tx_sent = b->tx_end = 0;
	b->part_len = b->part_need = 0;
	b->part_hdr_len = 0;
	b->player = 0;
	b->in_room = false;
	b->have_tick = false;
	b->first_snap = false;
	b->applied_seq = 0;
	b->next_seq = 1;
	b->pend_head = b->pend_tail = 0;
	b->chat_head = b->chat_tail = 0;
	b->t_input = b->t_chat = b->t_ping = b->t_churn = b->t_join = 0;
	b->t_stall = 0;
	b->ack_at = 0;
	if (!b->rng)
		b->rng = 0x9e3779b9u ^ (b->id * 2654435761u) ^
			 b->env->ctx->o.seed;
}

bool bot_queue_ws(struct bot *b, enum wsc_opcode op, const uint8_t *payload,
		  size_t len)
{
	uint64_t room = BOT_TX - (b->tx_end - b->tx_sent);
	uint8_t hdr[WSC_HDR_MAX];
	const uint8_t *m;
	size_t hl = wsc_hdr_len(len), i;

	if (hl + len > room)
		return false;
	/* The header, then the payload masked on its way into the queue. */
	wsc_put_hdr(hdr, op, len, (uint32_t)wsc_rand(&b->ws->rng));
	m = hdr + hl - 4;
	for (i = 0; i < hl; i++)
		b->tx[(b->tx_end + i) & (BOT_TX - 1)] = hdr[i];
	for (i = 0; i < len; i++)
		b->tx[(b->tx_end + hl + i) & (BOT_TX - 1)] = payload[i] ^
							     m[i & 3];
	b->tx_end += hl + len;
	if (b->env->mark_dirty)
		b->env->mark_dirty(b);
	return true;
}

void bot_lost_room(struct bot *b, uint64_t now)
{
	struct bot_meas *meas = b->env->meas;

	BOT_BUMP(meas->stat[S_FAILOVER_LOST],
		 (b->pend_tail - b->pend_head) + (b->chat_tail - b->chat_head));
	b->pend_head = b->pend_tail;
	b->chat_head = b->chat_tail;
	b->in_room = false;
	b->state = B_LOBBY;
	b->t_input = b->t_chat = b->t_churn = 0;
	if (!b->out_since)
		b->out_since = now;
}

bool bot_queue(struct bot *b, const uint8_t *payload, size_t len)
{
	uint64_t room = BOT_TX - (b->tx_end - b->tx_sent);
	uint8_t hdr[AP_HDR];
	size_t i;

	if (b->ws) {
		if (!bot_queue_ws(b, WSC_BINARY, payload, len))
			return false;
		if (b->env->meas->on)
			BOT_BUMP(b->env->meas->stat[S_MSGS_OUT], 1);
		return true;
	}
	if (AP_HDR + len > room)
		return false;
	ap_frame_hdr(hdr, len);
	for (i = 0; i < AP_HDR; i++)
		b->tx[(b->tx_end + i) & (BOT_TX - 1)] = hdr[i];
	b->tx_end += AP_HDR;
	for (i = 0; i < len; i++)
		b->tx[(b->tx_end + i) & (BOT_TX - 1)] = payload[i];
	b->tx_end += len;
	if (b->env->meas->on)
		BOT_BUMP(b->env->meas->stat[S_MSGS_OUT], 1);
	if (b->env->mark_dirty)
		b->env->mark_dirty(b);
	return true;
}

void bot_start(struct bot *b, uint64_t now)
{
	uint8_t p[64];
	char name[AP_NAME_MAX + 1];
	int n;

	(void)now;
	bot_reset(b);
	n = snprintf(name, sizeof(name), "bot-%u", b->id);
	bot_queue(b, p, ap_enc_hello(p, name, (size_t)n));
	b->state = B_HELLO;
	BOT_BUMP(b->env->meas->stat[S_CONNECTS], 1);
}

void bot_join(struct bot *b, uint64_t now)
{
	uint8_t p[AP_LEN_JOIN];

	(void)now;
	if (bot_queue(b, p, ap_enc_join(p, AP_ROOM_ANY)))
		b->state = B_JOINING;
}

void bot_leave(struct bot *b, uint64_t now)
{
	uint8_t p[AP_LEN_LEAVE];

	(void)now;
	if (b->state != B_ROOM || !bot_queue(b, p, ap_enc_leave(p)))
		return;
	b->state = B_LEAVING;
	b->t_input = b->t_chat = b->t_churn = 0;
	BOT_BUMP(b->env->meas->stat[S_LEAVES], 1);
}

bool bot_send_input(struct bot *b, uint8_t dir, uint64_t now)
{
	struct bot_meas *m = b->env->meas;
	uint8_t p[AP_LEN_INPUT];
	struct bot_input *in;

	if (b->state != B_ROOM)
		return false;
	if (b->pend_tail - b->pend_head == BOT_PENDING ||
	    !bot_queue(b, p, ap_enc_input(p, b->next_seq, dir))) {
		BOT_BUMP(m->stat[S_INPUTS_BLOCKED], 1);
		return false;
	}
	in = &b->pend[b->pend_tail++ & (BOT_PENDING - 1)];
	in->seq = b->next_seq++;
	in->dir = dir;
	in->t_sent = now;
	BOT_BUMP(m->stat[S_INPUTS], 1);
	return true;
}

/* Our chat line number k: its text, 12..120 bytes, from (id, k). */
size_t bot_chat_text(const struct bot *b, uint32_t k, char *out)
{
	size_t n = (size_t)snprintf(out, AP_CHAT_MAX + 1, "bot %u line %u ",
				    b->id, k);
	size_t len = 12 + (b->id * 31 + k * 17) % 109;

	while (n < len) {
		out[n] = (char)('a' + (n + k) % 26);
		n++;
	}
	return n;
}

bool bot_send_chat(struct bot *b, uint64_t now)
{
	char text[AP_CHAT_MAX + 1];
	uint8_t p[1 + AP_CHAT_MAX];
	struct bot_chat *c;
	size_t n;

	if (b->state != B_ROOM || b->chat_tail - b->chat_head == BOT_CHATS)
		return false;
	n = bot_chat_text(b, b->chat_k, text);
	if (!bot_queue(b, p, ap_enc_chat(p, text, n)))
		return false;
	c = &b->chats[b->chat_tail++ & (BOT_CHATS - 1)];
	c->k = b->chat_k++;
	c->t_sent = now;
	BOT_BUMP(b->env->meas->stat[S_CHATS], 1);
	return true;
}

/* ---- what the server says ---- */

static void on_welcome(struct bot *b, const struct ap_msg *m, uint64_t now)
{
	const struct bots_opts *o = &b->env->ctx->o;

	if (b->state != B_HELLO) {
		bot_fail(b, F_PROTOCOL, "welcome out of turn");
		return;
	}
	b->player = m->welcome.player;
	b->world.width = m->welcome.width;
	b->world.height = m->welcome.height;
	b->world.speed = m->welcome.speed;
	b->room_size = m->welcome.room_size;
	b->period_ns = 1000000000ull / m->welcome.tick_hz;
	b->state = B_LOBBY;
	BOT_BUMP(b->env->meas->stat[S_WELCOMES], 1);
	if (o->ping_ns)
		b->t_ping = now + around(b, o->ping_ns);
	bot_join(b, now);
}

/* Own chat lines sent in a room we left must have come back there. */
static void chats_lost(struct bot *b, const char *why)
{
	while (b->chat_head != b->chat_tail) {
		bot_fail(b, F_CHAT_LOST, "own chat line %u never came back%s",
			 b->chats[b->chat_head & (BOT_CHATS - 1)].k, why);
		b->chat_head++;
	}
}

static void on_joined(struct bot *b, const struct ap_msg *m, uint64_t now)
{
	const struct bots_opts *o = &b->env->ctx->o;
	uint64_t period;

	if (b->state != B_JOINING) {
		bot_fail(b, F_PROTOCOL, "joined out of turn");
		return;
	}
	if (b->in_room)
		chats_lost(b, " before the leave");
	if (b->have_tick && m->joined.tick <= b->last_tick)
		bot_fail(b, F_TICK_ORDER,
			 "joined room %u at tick %u, after tick %u",
			 m->joined.room, m->joined.tick, b->last_tick);
	if (!m->joined.members || m->joined.members > b->room_size)
		bot_fail(b, F_COUNT, "joined a room of %u members (size %u)",
			 m->joined.members, b->room_size);
	/* Inputs of the room we left were applied there; a snapshot may
	 * not have shown them.  A stay's snapshots count its own inputs:
	 * seq 0 until the first is applied. */
	b->pend_head = b->pend_tail;
	b->applied_seq = 0;
	b->room = m->joined.room;
	b->in_room = true;
	b->join_tick = m->joined.tick;
	b->join_members = m->joined.members;
	b->first_snap = true;
	b->chat_next = m->joined.chat_seq;
	b->x = m->joined.x;
	b->y = m->joined.y;
	b->state = B_ROOM;
	BOT_BUMP(b->env->meas->stat[S_JOINS], 1);
	if (b->out_since) {
		hist_record(&b->env->meas->outage, now - b->out_since);
		b->out_since = 0;
	}

	period = o->rate ? 1000000000ull / o->rate : b->period_ns;
	b->t_input = now + 1 + (uint64_t)bot_rnd(b) % period;
	b->t_chat = o->chat_ns ? now + around(b, o->chat_ns) : 0;
	/* A bot that stops reading stays where it stalls. */
	b->t_churn = o->churn_ns && !b->stall ? now + around(b, o->churn_ns) :
						0;
	if (b->stall && !b->stalled)
		b->t_stall = now + o->stall_after_ns;
}

/* The shared check: a player in two rooms' snapshots of one tick.  A
 * slot per player id (low bits) holds (tick, room, id high bits) of the
 * latest snapshot that named it; every value stored came from a real
 * snapshot, so a mismatch is a real one. */
static void cross_check(struct bot *b, const struct ap_msg *m)
{
	const struct bots_ctx *ctx = b->env->ctx;
	unsigned int i;

	for (i = 0; i < m->snap.count; i++) {
		struct ap_entry e;
		uint64_t *slot, old, v;

		ap_snap_entry(m, i, &e);
		slot = &ctx->cross[e.player & ctx->cross_mask];
		v = (uint64_t)(m->snap.tick & 0xffffff) << 40 |
		    (uint64_t)(m->snap.room & 0xffff) << 24 |
		    ((e.player >> 20) & 0xffffff);
		old = __atomic_load_n(slot, __ATOMIC_RELAXED);
		if ((old & 0xffffff) == (v & 0xffffff) &&
		    old >> 40 == v >> 40 && old != v)
			bot_fail(b, F_ROOM_CROSS,
				 "player %u in room %u and room %u at tick %u",
				 e.player, (unsigned int)(old >> 24 & 0xffff),
				 m->snap.room, m->snap.tick);
		else if (old >> 40 < v >> 40 ||
			 (old & 0xffffff) != (v & 0xffffff))
			__atomic_store_n(slot, v, __ATOMIC_RELAXED);
	}
}

/* Our entry: the seq applied, and where the inputs up to it put us. */
static void check_self(struct bot *b, const struct ap_entry *e, uint64_t now)
{
	struct bot_meas *m = b->env->meas;
	uint32_t seq = e->seq;

	if (seq < b->applied_seq) {
		bot_fail(b, F_SEQ_BACK, "applied seq %u after %u", seq,
			 b->applied_seq);
		return;
	}
	if (seq > b->applied_seq) {
		uint32_t last = b->applied_seq;

		while (b->pend_head != b->pend_tail) {
			struct bot_input *in =
				&b->pend[b->pend_head & (BOT_PENDING - 1)];

			if (in->seq > seq)
				break;
			ap_move(&b->world, &b->x, &b->y, in->dir);
			/* Measured: the bots that read, the window. */
			if (!b->stall && m->on)
				hist_record(&m->latency, now - in->t_sent);
			BOT_BUMP(m->stat[S_INPUTS_SEEN], 1);
			last = in->seq;
			b->pend_head++;
		}
		b->applied_seq = seq;
		if (last != seq) {
			bot_fail(b, F_SEQ_UNKNOWN,
				 "applied seq %u, which was not sent", seq);
			b->x = e->x;
			b->y = e->y;
			return;
		}
	}
	if (e->x != b->x || e->y != b->y) {
		bot_fail(b, F_POSITION,
			 "at (%u, %u) after input %u, predicted (%u, %u)", e->x,
			 e->y, seq, b->x, b->y);
		b->x = e->x; /* one failure per divergence */
		b->y = e->y;
	}
}

static void on_snapshot(struct bot *b, const struct ap_msg *m, uint64_t now)
{
	struct bot_meas *meas = b->env->meas;
	uint32_t bits[128], tick = m->snap.tick;
	struct ap_entry e, self;
	bool found = false;
	unsigned int i, j;

	if (!b->in_room) {
		bot_fail(b, F_SNAP_OUTSIDE, "snapshot of room %u, tick %u",
			 m->snap.room, tick);
		return;
	}
	if (m->snap.room != b->room) {
		bot_fail(b, F_WRONG_ROOM, "snapshot of room %u in room %u",
			 m->snap.room, b->room);
		return;
	}
	if (!b->stall && meas->on)
		BOT_BUMP(meas->stat[S_SNAPS], 1);
	if ((b->have_tick && tick <= b->last_tick) || tick < b->join_tick) {
		bot_fail(b, F_TICK_ORDER, "tick %u after tick %u (joined %u)",
			 tick, b->have_tick ? b->last_tick : 0, b->join_tick);
		return;
	}
	if (m->snap.count > b->room_size)
		bot_fail(b, F_BAD_SNAPSHOT, "%u players in a room of %u",
			 m->snap.count, b->room_size);
	/* Duplicates: a 4096-bit filter, a scan only on a hit. */
	memset(bits, 0, sizeof(bits));
	for (i = 0; i < m->snap.count; i++) {
		uint32_t h;

		ap_snap_entry(m, i, &e);
		if (!e.player) {
			bot_fail(b, F_BAD_SNAPSHOT, "player id 0 at tick %u",
				 tick);
			continue;
		}
		h = (e.player * 2654435761u) >> 20;
		if (bits[h >> 5] & 1u << (h & 31)) {
			for (j = 0; j < i; j++) {
				struct ap_entry d;

				ap_snap_entry(m, j, &d);
				if (d.player == e.player)
					bot_fail(b, F_BAD_SNAPSHOT,
						 "player %u twice at tick %u",
						 e.player, tick);
			}
		}
		bits[h >> 5] |= 1u << (h & 31);
		if (e.player == b->player) {
			self = e;
			found = true;
		}
	}
	if (found)
		check_self(b, &self, now);
	else
		bot_fail(b, F_SELF_MISSING, "not in room %u's tick %u", b->room,
			 tick);

	/* Delivery, gaps and jitter, of the bots that read, in the window. */
	if (b->stall || !meas->on) {
		b->first_snap = false;
	} else if (b->first_snap) {
		BOT_BUMP(meas->stat[S_SNAPS_EXPECTED], tick - b->join_tick + 1);
		BOT_BUMP(meas->stat[S_SNAP_GAPS], tick - b->join_tick);
		if (tick == b->join_tick && m->snap.count != b->join_members)
			bot_fail(b, F_COUNT,
				 "joined said %u members, tick %u has %u",
				 b->join_members, tick, m->snap.count);
		b->first_snap = false;
	} else {
		uint64_t dt = now - b->last_arrival;
		uint64_t ideal =
			(uint64_t)(tick - b->room_last_tick) * b->period_ns;

		BOT_BUMP(meas->stat[S_SNAPS_EXPECTED],
			 tick - b->room_last_tick);
		BOT_BUMP(meas->stat[S_SNAP_GAPS], tick - b->room_last_tick - 1);
		hist_record(&meas->jitter,
			    dt > ideal ? dt - ideal : ideal - dt);
	}
	b->room_last_tick = tick;
	b->last_tick = tick;
	b->have_tick = true;
	b->last_arrival = now;
	/* The server holds a bot that acks to its acks (PROTOCOL.md). */
	if (!b->ack_at || now - b->ack_at >= BOT_ACK_NS) {
		uint8_t p[AP_LEN_ACK];

		if (bot_queue(b, p, ap_enc_ack(p, tick)))
			b->ack_at = now ? now : 1;
	}
	if (b->env->ctx->o.check_cross && b->id % 8 == 0)
		cross_check(b, m);
}

static void on_chat_line(struct bot *b, const struct ap_msg *m)
{
	char text[AP_CHAT_MAX + 1];
	uint32_t seq = m->line.chat_seq;
	struct bot_chat *c;
	size_t n;

	if (!b->in_room) {
		bot_fail(b, F_SNAP_OUTSIDE, "chat line of room %u",
			 m->line.room);
		return;
	}
	if (m->line.room != b->room) {
		bot_fail(b, F_WRONG_ROOM, "chat line of room %u in room %u",
			 m->line.room, b->room);
		return;
	}
	BOT_BUMP(b->env->meas->stat[S_CHAT_LINES], 1);
	if (seq != b->chat_next) {
		if (seq > b->chat_next)
			bot_fail(b, F_CHAT_GAP,
				 "room %u chat line %u, expected %u (%u "
				 "missed)",
				 b->room, seq, b->chat_next,
				 seq - b->chat_next);
		else
			bot_fail(b, F_CHAT_DUP,
				 "room %u chat line %u again (expected %u)",
				 b->room, seq, b->chat_next);
	}
	if (seq >= b->chat_next)
		b->chat_next = seq + 1;
	if (m->line.from != b->player)
		return;
	if (b->chat_head == b->chat_tail) {
		bot_fail(b, F_CHAT_TEXT, "a chat line of ours we did not send");
		return;
	}
	c = &b->chats[b->chat_head++ & (BOT_CHATS - 1)];
	n = bot_chat_text(b, c->k, text);
	if (n != m->line.len || memcmp(text, m->line.text, n))
		bot_fail(b, F_CHAT_TEXT, "own chat line %u came back changed",
			 c->k);
}

void bot_on_frame(struct bot *b, const uint8_t *p, size_t n, uint64_t now)
{
	struct bot_meas *meas = b->env->meas;
	struct ap_msg m;
	int r;

	if (meas->on)
		BOT_BUMP(meas->stat[S_MSGS_IN], 1);
	r = ap_decode(p, n, &m);
	if (r) {
		bot_fail(b, F_PROTOCOL, "a frame of type 0x%02x, %zu bytes: %s",
			 n ? p[0] : 0, n, ap_err_name((unsigned int)r));
		return;
	}
	switch (m.type) {
	case AP_WELCOME:
		on_welcome(b, &m, now);
		break;
	case AP_JOINED:
		on_joined(b, &m, now);
		break;
	case AP_SNAPSHOT:
		on_snapshot(b, &m, now);
		break;
	case AP_CHAT_LINE:
		on_chat_line(b, &m);
		break;
	case AP_PONG:
		/* Pings go out a second apart: the stamp is the send time
		 * of the last one or of an earlier one. */
		if (m.ping.stamp && m.ping.stamp <= b->ping_sent &&
		    now >= m.ping.stamp) {
			if (!b->stall && meas->on)
				hist_record(&meas->rtt, now - m.ping.stamp);
			BOT_BUMP(meas->stat[S_PONGS], 1);
		} else {
			bot_fail(b, F_PROTOCOL, "pong of a ping not sent");
		}
		break;
	case AP_ERROR:
		BOT_BUMP(meas->stat[S_ERRORS_RX], 1);
		/* Across nodes: a room lost with its node (or a room found
		 * full a moment after another node's census said it had a
		 * place) is answered by joining again. */
		/* A room lost after our leave: what it owed us is lost. */
		if (b->env->ctx->o.nservers &&
		    m.error.code == AP_ERR_ROOM_LOST && b->state == B_LEAVING) {
			BOT_BUMP(meas->stat[S_ROOM_LOST], 1);
			BOT_BUMP(meas->stat[S_FAILOVER_LOST],
				 b->chat_tail - b->chat_head);
			b->chat_head = b->chat_tail;
			b->in_room = false;
			break;
		}
		if (b->env->ctx->o.nservers &&
		    (m.error.code == AP_ERR_ROOM_LOST ||
		     m.error.code == AP_ERR_ROOM_FULL) &&
		    (b->state == B_ROOM || b->state == B_JOINING)) {
			uint64_t out = b->out_since;
			bool full = m.error.code == AP_ERR_ROOM_FULL;

			BOT_BUMP(meas->stat[full ? S_ROOM_FULL : S_ROOM_LOST],
				 1);
			bot_lost_room(b, now);
			/* A full room is no outage. */
			if (full)
				b->out_since = out;
			bot_join(b, now);
			break;
		}
		bot_fail(b, F_PROTOCOL, "the server says %s",
			 ap_err_name(m.error.code));
		break;
	default:
		bot_fail(b, F_PROTOCOL, "a client message (type 0x%02x)",
			 m.type);
		break;
	}
}

/* Cut the stream into frames; a frame split over receives is gathered
 * in b->part (grown as needed). */
void bot_on_data(struct bot *b, const uint8_t *p, size_t n, uint64_t now)
{
	while (n) {
		size_t take;

		if (!b->part_need && !b->part_hdr_len && n >= AP_HDR) {
			size_t len = ap_get16(p);

			if (n >= AP_HDR + len && len) {
				bot_on_frame(b, p + AP_HDR, len, now);
				p += AP_HDR + len;
				n -= AP_HDR + len;
				continue;
			}
		}
		if (!b->part_need) {
			b->part_hdr[b->part_hdr_len++] = *p++;
			n--;
			if (b->part_hdr_len < AP_HDR)
				continue;
			b->part_hdr_len = 0;
			b->part_need = ap_get16(b->part_hdr);
			b->part_len = 0;
			if (!b->part_need) {
				bot_fail(b, F_PROTOCOL, "a zero-length frame");
				continue;
			}
			if (b->part_need > b->part_cap) {
				uint8_t *np = realloc(b->part, b->part_need);

				if (!np) {
					bot_fail(b, F_PROTOCOL,
						 "no memory for a %u-byte "
						 "frame",
						 b->part_need);
					b->part_need = 0;
					return;
				}
				b->part = np;
				b->part_cap = b->part_need;
			}
			continue;
		}
		take = b->part_need - b->part_len;
		if (take > n)
			take = n;
		memcpy(b->part + b->part_len, p, take);
		b->part_len += (uint32_t)take;
		p += take;
		n -= take;
		if (b->part_len == b->part_need) {
			b->part_need = 0;
			bot_on_frame(b, b->part, b->part_len, now);
		}
	}
}

void bot_check_overdue(struct bot *b, uint64_t now)
{
	if (b->stall)
		return;
	/* Inputs sent before a leave may never show (the leave can take
	 * the player out before the next snapshot): checked in the room. */
	while (b->state == B_ROOM && b->pend_head != b->pend_tail) {
		struct bot_input *in =
			&b->pend[b->pend_head & (BOT_PENDING - 1)];

		if (now - in->t_sent < INPUT_LOST_NS)
			break;
		bot_fail(b, F_INPUT_LOST, "input %u not seen applied in %.1f s",
			 in->seq, (double)(now - in->t_sent) / 1e9);
		b->pend_head++;
	}
	while (b->chat_head != b->chat_tail) {
		struct bot_chat *c = &b->chats[b->chat_head & (BOT_CHATS - 1)];

		if (now - c->t_sent < CHAT_LOST_NS)
			break;
		bot_fail(b, F_CHAT_LOST, "own chat line %u not back in %.1f s",
			 c->k, (double)(now - c->t_sent) / 1e9);
		b->chat_head++;
	}
}
