// SPDX-License-Identifier: MIT
/* The arena protocol's codec and movement rules: see arena_proto.h. */
#include <string.h>
#include "arena_proto.h"

static const char *const err_names[AP_ERR_NR] = {
	[AP_ERR_NONE] = "none",
	[AP_ERR_BAD_TYPE] = "bad_type",
	[AP_ERR_MALFORMED] = "malformed",
	[AP_ERR_ORDER] = "order",
	[AP_ERR_CHAT_LONG] = "chat_long",
	[AP_ERR_FLOOD] = "flood",
	[AP_ERR_ROOM_FULL] = "room_full",
	[AP_ERR_NO_ROOM] = "no_room",
	[AP_ERR_SERVER_FULL] = "server_full",
	[AP_ERR_HELLO_TIMEOUT] = "hello_timeout",
	[AP_ERR_IDLE] = "idle",
	[AP_ERR_ROOM_LOST] = "room_lost",
};

const char *ap_err_name(unsigned int code)
{
	return code < AP_ERR_NR ? err_names[code] : "?";
}

static int dec_text(const uint8_t *p, size_t n, uint16_t *len,
		    const uint8_t **text)
{
	if (n == 0 || n > AP_CHAT_MAX)
		return AP_ERR_CHAT_LONG;
	*len = (uint16_t)n;
	*text = p;
	return 0;
}

int ap_decode(const uint8_t *p, size_t n, struct ap_msg *m)
{
	memset(m, 0, sizeof(*m));
	if (!n)
		return AP_ERR_MALFORMED;
	m->type = p[0];
	switch (p[0]) {
	case AP_HELLO:
		if (n < 4 || p[2] == 0 || p[2] > AP_NAME_MAX ||
		    n != 3u + p[2] || p[1] != AP_VERSION ||
		    memchr(p + 3, 0, p[2]))
			return AP_ERR_MALFORMED;
		m->hello.version = p[1];
		m->hello.name_len = p[2];
		m->hello.name = p + 3;
		return 0;
	case AP_JOIN:
		if (n != AP_LEN_JOIN)
			return AP_ERR_MALFORMED;
		m->join.room = ap_get32(p + 1);
		return 0;
	case AP_INPUT:
		if (n != AP_LEN_INPUT || p[5] >= AP_DIR_NR)
			return AP_ERR_MALFORMED;
		m->input.seq = ap_get32(p + 1);
		m->input.dir = p[5];
		return 0;
	case AP_CHAT:
		return dec_text(p + 1, n - 1, &m->chat.len, &m->chat.text);
	case AP_PING:
	case AP_PONG:
		if (n != AP_LEN_PING)
			return AP_ERR_MALFORMED;
		m->ping.stamp = ap_get64(p + 1);
		return 0;
	case AP_LEAVE:
		return n == AP_LEN_LEAVE ? 0 : AP_ERR_MALFORMED;
	case AP_ACK:
		if (n != AP_LEN_ACK)
			return AP_ERR_MALFORMED;
		m->ack.tick = ap_get32(p + 1);
		return 0;
	case AP_WATCH:
		if (n != AP_LEN_WATCH)
			return AP_ERR_MALFORMED;
		m->watch.room = ap_get32(p + 1);
		return 0;
	case AP_WELCOME:
		if (n != AP_LEN_WELCOME)
			return AP_ERR_MALFORMED;
		m->welcome.player = ap_get32(p + 1);
		m->welcome.tick_hz = ap_get16(p + 5);
		m->welcome.room_size = ap_get16(p + 7);
		m->welcome.width = ap_get16(p + 9);
		m->welcome.height = ap_get16(p + 11);
		m->welcome.speed = ap_get16(p + 13);
		if (!m->welcome.player || !m->welcome.tick_hz ||
		    !m->welcome.room_size || !m->welcome.width ||
		    !m->welcome.height)
			return AP_ERR_MALFORMED;
		return 0;
	case AP_JOINED:
		if (n != AP_LEN_JOINED)
			return AP_ERR_MALFORMED;
		m->joined.room = ap_get32(p + 1);
		m->joined.members = ap_get16(p + 5);
		m->joined.tick = ap_get32(p + 7);
		m->joined.x = ap_get16(p + 11);
		m->joined.y = ap_get16(p + 13);
		m->joined.chat_seq = ap_get32(p + 15);
		return 0;
	case AP_SNAPSHOT:
		if (n < AP_LEN_SNAP_HDR)
			return AP_ERR_MALFORMED;
		m->snap.tick = ap_get32(p + 1);
		m->snap.room = ap_get32(p + 5);
		m->snap.count = ap_get16(p + 9);
		if (n != ap_snapshot_len(m->snap.count))
			return AP_ERR_MALFORMED;
		m->snap.entries = p + AP_LEN_SNAP_HDR;
		return 0;
	case AP_CHAT_LINE:
		if (n < AP_LEN_CHAT_LINE_HDR)
			return AP_ERR_MALFORMED;
		m->line.room = ap_get32(p + 1);
		m->line.tick = ap_get32(p + 5);
		m->line.chat_seq = ap_get32(p + 9);
		m->line.from = ap_get32(p + 13);
		return dec_text(p + AP_LEN_CHAT_LINE_HDR,
				n - AP_LEN_CHAT_LINE_HDR, &m->line.len,
				&m->line.text);
	case AP_ERROR:
		if (n != AP_LEN_ERROR)
			return AP_ERR_MALFORMED;
		m->error.code = p[1];
		return 0;
	default:
		return AP_ERR_BAD_TYPE;
	}
}

void ap_snap_entry(const struct ap_msg *m, unsigned int i, struct ap_entry *e)
{
	const uint8_t *p = m->snap.entries + (size_t)i * AP_LEN_SNAP_ENTRY;

	e->player = ap_get32(p);
	e->x = ap_get16(p + 4);
	e->y = ap_get16(p + 6);
	e->seq = ap_get32(p + 8);
}

size_t ap_enc_hello(uint8_t *out, const void *name, size_t name_len)
{
	if (name_len > AP_NAME_MAX)
		name_len = AP_NAME_MAX;
	out[0] = AP_HELLO;
	out[1] = AP_VERSION;
	out[2] = (uint8_t)name_len;
	memcpy(out + 3, name, name_len);
	return 3 + name_len;
}

size_t ap_enc_join(uint8_t *out, uint32_t room)
{
	out[0] = AP_JOIN;
	ap_put32(out + 1, room);
	return AP_LEN_JOIN;
}

size_t ap_enc_input(uint8_t *out, uint32_t seq, uint8_t dir)
{
	out[0] = AP_INPUT;
	ap_put32(out + 1, seq);
	out[5] = dir;
	return AP_LEN_INPUT;
}

size_t ap_enc_chat(uint8_t *out, const void *text, size_t len)
{
	out[0] = AP_CHAT;
	memcpy(out + 1, text, len);
	return 1 + len;
}

size_t ap_enc_ping(uint8_t *out, uint64_t stamp)
{
	out[0] = AP_PING;
	ap_put64(out + 1, stamp);
	return AP_LEN_PING;
}

size_t ap_enc_leave(uint8_t *out)
{
	out[0] = AP_LEAVE;
	return AP_LEN_LEAVE;
}

size_t ap_enc_ack(uint8_t *out, uint32_t tick)
{
	out[0] = AP_ACK;
	ap_put32(out + 1, tick);
	return AP_LEN_ACK;
}

size_t ap_enc_watch(uint8_t *out, uint32_t room)
{
	out[0] = AP_WATCH;
	ap_put32(out + 1, room);
	return AP_LEN_WATCH;
}

size_t ap_enc_welcome(uint8_t *out, uint32_t player, uint16_t tick_hz,
		      uint16_t room_size, uint16_t width, uint16_t height,
		      uint16_t speed)
{
	out[0] = AP_WELCOME;
	ap_put32(out + 1, player);
	ap_put16(out + 5, tick_hz);
	ap_put16(out + 7, room_size);
	ap_put16(out + 9, width);
	ap_put16(out + 11, height);
	ap_put16(out + 13, speed);
	return AP_LEN_WELCOME;
}

size_t ap_enc_joined(uint8_t *out, uint32_t room, uint16_t members,
		     uint32_t tick, uint16_t x, uint16_t y, uint32_t chat_seq)
{
	out[0] = AP_JOINED;
	ap_put32(out + 1, room);
	ap_put16(out + 5, members);
	ap_put32(out + 7, tick);
	ap_put16(out + 11, x);
	ap_put16(out + 13, y);
	ap_put32(out + 15, chat_seq);
	return AP_LEN_JOINED;
}

size_t ap_enc_snap_hdr(uint8_t *out, uint32_t tick, uint32_t room,
		       uint16_t count)
{
	out[0] = AP_SNAPSHOT;
	ap_put32(out + 1, tick);
	ap_put32(out + 5, room);
	ap_put16(out + 9, count);
	return AP_LEN_SNAP_HDR;
}

void ap_snap_put(uint8_t *out, unsigned int i, const struct ap_entry *e)
{
	uint8_t *p = out + AP_LEN_SNAP_HDR + (size_t)i * AP_LEN_SNAP_ENTRY;

	ap_put32(p, e->player);
	ap_put16(p + 4, e->x);
	ap_put16(p + 6, e->y);
	ap_put32(p + 8, e->seq);
}

size_t ap_enc_chat_line(uint8_t *out, uint32_t room, uint32_t tick,
			uint32_t chat_seq, uint32_t from, const void *text,
			size_t len)
{
	out[0] = AP_CHAT_LINE;
	ap_put32(out + 1, room);
	ap_put32(out + 5, tick);
	ap_put32(out + 9, chat_seq);
	ap_put32(out + 13, from);
	memcpy(out + AP_LEN_CHAT_LINE_HDR, text, len);
	return AP_LEN_CHAT_LINE_HDR + len;
}

size_t ap_enc_pong(uint8_t *out, uint64_t stamp)
{
	out[0] = AP_PONG;
	ap_put64(out + 1, stamp);
	return AP_LEN_PONG;
}

size_t ap_enc_error(uint8_t *out, uint8_t code)
{
	out[0] = AP_ERROR;
	out[1] = code;
	return AP_LEN_ERROR;
}

/* ---- the world ---- */

static const int8_t dir_dx[AP_DIR_NR] = { 0, 0, 1, 1, 1, 0, -1, -1, -1 };
static const int8_t dir_dy[AP_DIR_NR] = { 0, -1, -1, 0, 1, 1, 1, 0, -1 };

static uint16_t clamp_axis(int32_t v, uint16_t size)
{
	if (v < 0)
		return 0;
	if (v > (int32_t)size - 1)
		return (uint16_t)(size - 1);
	return (uint16_t)v;
}

void ap_move(const struct ap_world *w, uint16_t *x, uint16_t *y, uint8_t dir)
{
	if (dir >= AP_DIR_NR)
		return;
	*x = clamp_axis((int32_t)*x + dir_dx[dir] * (int32_t)w->speed,
			w->width);
	*y = clamp_axis((int32_t)*y + dir_dy[dir] * (int32_t)w->speed,
			w->height);
}

void ap_spawn(const struct ap_world *w, uint32_t player, uint32_t room,
	      uint16_t *x, uint16_t *y)
{
	uint64_t h = ((uint64_t)player << 32 | room) * 0x9e3779b97f4a7c15ull;

	h ^= h >> 29;
	*x = (uint16_t)((h & 0xffffffffu) % w->width);
	*y = (uint16_t)((h >> 32) % w->height);
}
