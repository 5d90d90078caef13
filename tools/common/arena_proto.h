/* SPDX-License-Identifier: MIT */
/*
 * The arena protocol's codec and the world's movement rules, shared by
 * the server (ao-arena) and the player swarm (ao-bots): see
 * tools/arena/PROTOCOL.md.  Pure code: no I/O, no allocation.
 *
 * A frame is a 2-byte little-endian length, then the payload: the type
 * byte and the fields.  The ap_enc_*() functions write a payload (no
 * length) into out and return its size; ap_frame_hdr() writes the length.
 * ap_decode() reads one payload.
 */
#ifndef AO_TOOLS_ARENA_PROTO_H
#define AO_TOOLS_ARENA_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AP_VERSION 1
#define AP_HDR 2 /* the length before each payload */
#define AP_NAME_MAX 32
#define AP_CHAT_MAX 200
#define AP_CLIENT_MAX 256 /* the largest client payload a server takes */
#define AP_ROOM_ANY 0xffffffffu
#define AP_ROOM_SIZE_MAX 1024u /* a snapshot then fits 16 KiB */
#define AP_PENDING_MAX 64 /* inputs + chats of a player per tick */

/* Message types. */
enum ap_type {
	AP_HELLO = 0x01,
	AP_JOIN = 0x02,
	AP_INPUT = 0x03,
	AP_CHAT = 0x04,
	AP_PING = 0x05,
	AP_LEAVE = 0x06,
	AP_ACK = 0x07,
	AP_WATCH = 0x08,
	AP_WELCOME = 0x81,
	AP_JOINED = 0x82,
	AP_SNAPSHOT = 0x83,
	AP_CHAT_LINE = 0x84,
	AP_PONG = 0x85,
	AP_ERROR = 0x86,
};

/* Error codes (the error message, and the server's close reasons). */
enum ap_err {
	AP_ERR_NONE = 0,
	AP_ERR_BAD_TYPE = 1,
	AP_ERR_MALFORMED = 2,
	AP_ERR_ORDER = 3,
	AP_ERR_CHAT_LONG = 4,
	AP_ERR_FLOOD = 5,
	AP_ERR_ROOM_FULL = 6,
	AP_ERR_NO_ROOM = 7,
	AP_ERR_SERVER_FULL = 8,
	AP_ERR_HELLO_TIMEOUT = 9,
	AP_ERR_IDLE = 10,
	AP_ERR_ROOM_LOST = 11, /* a cluster's room lost with its owner node */
	AP_ERR_NR
};

/* "bad_type", "malformed", ... ("none" for 0, "?" out of range). */
const char *ap_err_name(unsigned int code);

/* Payload sizes (fixed ones, and the fixed part of the others). */
#define AP_LEN_JOIN 5
#define AP_LEN_INPUT 6
#define AP_LEN_PING 9
#define AP_LEN_LEAVE 1
#define AP_LEN_ACK 5
#define AP_LEN_WATCH 5
#define AP_LEN_WELCOME 15
#define AP_LEN_JOINED 19
#define AP_LEN_SNAP_HDR 11
#define AP_LEN_SNAP_ENTRY 12
#define AP_LEN_CHAT_LINE_HDR 17
#define AP_LEN_PONG 9
#define AP_LEN_ERROR 2

/* The largest payload of a snapshot of n players. */
static inline size_t ap_snapshot_len(unsigned int n)
{
	return AP_LEN_SNAP_HDR + (size_t)n * AP_LEN_SNAP_ENTRY;
}

/* One snapshot entry. */
struct ap_entry {
	uint32_t player;
	uint16_t x, y;
	uint32_t seq;
};

/* A decoded message.  Text and entries point into the payload. */
struct ap_msg {
	uint8_t type;
	union {
		struct {
			uint8_t version;
			uint8_t name_len;
			const uint8_t *name;
		} hello;
		struct {
			uint32_t room;
		} join;
		struct {
			uint32_t seq;
			uint8_t dir;
		} input;
		struct {
			uint16_t len;
			const uint8_t *text;
		} chat; /* client -> server */
		struct {
			uint64_t stamp;
		} ping; /* ping and pong */
		struct {
			uint32_t tick;
		} ack;
		struct {
			uint32_t room;
		} watch;
		struct {
			uint32_t player;
			uint16_t tick_hz, room_size, width, height, speed;
		} welcome;
		struct {
			uint32_t room, tick, chat_seq;
			uint16_t members, x, y;
		} joined;
		struct {
			uint32_t tick, room;
			uint16_t count;
			const uint8_t *entries; /* ap_snap_entry() */
		} snap;
		struct {
			uint32_t room, tick, chat_seq, from;
			uint16_t len;
			const uint8_t *text;
		} line; /* server -> client chat */
		struct {
			uint8_t code;
		} error;
	};
};

/*
 * Decode one payload of n bytes: 0, or the ap_err code of what is wrong
 * with it: AP_ERR_BAD_TYPE (unknown type), AP_ERR_MALFORMED (wrong
 * length or a field out of range), AP_ERR_CHAT_LONG (chat text empty or
 * over AP_CHAT_MAX).  Types of both directions are decoded.
 */
int ap_decode(const uint8_t *p, size_t n, struct ap_msg *m);
/* True for the types a client sends. */
static inline bool ap_is_client_type(uint8_t type)
{
	return type >= AP_HELLO && type <= AP_WATCH;
}
/* Entry i (< m->snap.count) of a decoded snapshot. */
void ap_snap_entry(const struct ap_msg *m, unsigned int i, struct ap_entry *e);

/* Encoders: the payload's size.  out must have room for it (the
 * AP_LEN_* sizes; chat: AP_LEN_CHAT_LINE_HDR + AP_CHAT_MAX at most). */
size_t ap_enc_hello(uint8_t *out, const void *name, size_t name_len);
size_t ap_enc_join(uint8_t *out, uint32_t room);
size_t ap_enc_input(uint8_t *out, uint32_t seq, uint8_t dir);
size_t ap_enc_chat(uint8_t *out, const void *text, size_t len);
size_t ap_enc_ping(uint8_t *out, uint64_t stamp);
size_t ap_enc_leave(uint8_t *out);
size_t ap_enc_ack(uint8_t *out, uint32_t tick);
size_t ap_enc_watch(uint8_t *out, uint32_t room);
size_t ap_enc_welcome(uint8_t *out, uint32_t player, uint16_t tick_hz,
		      uint16_t room_size, uint16_t width, uint16_t height,
		      uint16_t speed);
size_t ap_enc_joined(uint8_t *out, uint32_t room, uint16_t members,
		     uint32_t tick, uint16_t x, uint16_t y, uint32_t chat_seq);
/* The snapshot header (ap_snap_put() writes entry i after it). */
size_t ap_enc_snap_hdr(uint8_t *out, uint32_t tick, uint32_t room,
		       uint16_t count);
void ap_snap_put(uint8_t *out, unsigned int i, const struct ap_entry *e);
size_t ap_enc_chat_line(uint8_t *out, uint32_t room, uint32_t tick,
			uint32_t chat_seq, uint32_t from, const void *text,
			size_t len);
size_t ap_enc_pong(uint8_t *out, uint64_t stamp);
size_t ap_enc_error(uint8_t *out, uint8_t code);

/* The 2-byte length of a payload of len bytes (len <= 0xffff). */
static inline void ap_frame_hdr(uint8_t *out, size_t len)
{
	out[0] = (uint8_t)len;
	out[1] = (uint8_t)(len >> 8);
}

/* ---- the world ---- */

#define AP_DIR_NR 9 /* 0 stay, 1 north, then clockwise to 8 north-west */

struct ap_world {
	uint16_t width, height; /* positions are 0..width-1, 0..height-1 */
	uint16_t speed; /* units per input along each axis it moves */
};

#define AP_WORLD_DEFAULT                                  \
	{                                                 \
		.width = 4096, .height = 4096, .speed = 8 \
	}

/* Apply one input of direction dir (< AP_DIR_NR) to a position. */
void ap_move(const struct ap_world *w, uint16_t *x, uint16_t *y, uint8_t dir);
/* The spawn point of a player joining a room (any deterministic point in
 * the world; the server tells the client in joined). */
void ap_spawn(const struct ap_world *w, uint32_t player, uint32_t room,
	      uint16_t *x, uint16_t *y);

/* Little-endian loads and stores. */
static inline void ap_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void ap_put32(uint8_t *p, uint32_t v)
{
	ap_put16(p, (uint16_t)v);
	ap_put16(p + 2, (uint16_t)(v >> 16));
}

static inline void ap_put64(uint8_t *p, uint64_t v)
{
	ap_put32(p, (uint32_t)v);
	ap_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t ap_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t ap_get32(const uint8_t *p)
{
	return ap_get16(p) | (uint32_t)ap_get16(p + 2) << 16;
}

static inline uint64_t ap_get64(const uint8_t *p)
{
	return ap_get32(p) | (uint64_t)ap_get32(p + 4) << 32;
}

#endif /* AO_TOOLS_ARENA_PROTO_H */
