/* SPDX-License-Identifier: MIT */
/*
 * ao-bots: a swarm of players for ao-arena.  Each bot is one connection
 * that says hello, joins a room, sends inputs at a fixed rate, chats now
 * and then and pings; it predicts its own position from its own inputs,
 * so every snapshot it gets is checked, not just counted.
 *
 * bot.c is the player and its verifier (no I/O: it reads frames and
 * queues bytes); bots.c runs the bots on the shared client engines
 * (tools/common/engine.h), one loop per thread, and reports.
 */
#ifndef AO_BOTS_H
#define AO_BOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "../common/arena_proto.h"
#include "../common/engine.h"
#include "../common/hist.h"
#include "../common/ws_client.h"

/* What the verifier catches; each one is a failure (exit status 1). */
enum bot_fail {
	F_CONNECT, /* could not connect */
	F_CLOSED, /* the server closed a bot that was not stalled */
	F_PROTOCOL, /* an undecodable frame, a message out of turn, an error */
	F_SNAP_OUTSIDE, /* a snapshot or chat while in no room */
	F_WRONG_ROOM, /* a snapshot or chat line of another room */
	F_TICK_ORDER, /* a snapshot tick not above the previous one */
	F_BAD_SNAPSHOT, /* duplicate or zero ids, over the room size */
	F_SELF_MISSING, /* a snapshot of our room without us */
	F_SEQ_BACK, /* our last applied seq went back */
	F_SEQ_UNKNOWN, /* an applied seq we never sent */
	F_POSITION, /* our position differs from the prediction */
	F_INPUT_LOST, /* an input not visible after INPUT_LOST_NS */
	F_COUNT, /* joined's member count differs from its tick's snapshot */
	F_CHAT_GAP, /* a room chat line missed */
	F_CHAT_DUP, /* a room chat line twice, or going back */
	F_CHAT_LOST, /* our own chat line never came back */
	F_CHAT_TEXT, /* our own chat line came back changed */
	F_ROOM_CROSS, /* a player in two rooms' snapshots of one tick */
	F_STALL_OPEN, /* a bot that stopped reading was never closed */
	F_NR
};

const char *bot_fail_name(enum bot_fail f);

/* Counters (one set per thread, read with relaxed atomics). */
enum bot_stat {
	S_CONNECTS, /* connections made */
	S_WELCOMES,
	S_JOINS, /* joined messages */
	S_LEAVES, /* leaves sent */
	S_RECONNECTS, /* churn: connections closed and made again */
	S_SNAPS, /* snapshots received */
	S_SNAPS_EXPECTED, /* ticks a bot was in its room for */
	S_SNAP_GAPS, /* snapshots missed (expected - received) */
	S_INPUTS, /* inputs sent */
	S_INPUTS_SEEN, /* inputs seen applied */
	S_INPUTS_BLOCKED, /* not sent: no room in the send queue */
	S_CHATS, /* chat lines sent */
	S_CHAT_LINES, /* chat lines received */
	S_PINGS,
	S_PONGS,
	S_MSGS_IN, /* messages received */
	S_MSGS_OUT,
	S_BYTES_IN,
	S_BYTES_OUT,
	S_ERRORS_RX, /* error messages from the server */
	S_STALLED, /* bots that stopped reading */
	S_STALL_CLOSED, /* ... and were closed by the server */
	S_ROOM_LOST, /* --servers: room_lost answered by a join */
	S_ROOM_FULL, /* --servers: room_full (a place another node's census
		      * showed, taken meanwhile) answered by a join */
	S_FAILOVERS, /* --servers: closed by a node: connected to the next */
	S_FAILOVER_LOST, /* inputs and chat lines lost with a room (counted,
			  * not failures) */
	S_NR
};

/* What a thread measures.  The rates and distributions (snapshots,
 * latency, jitter, round trips, messages, bytes) cover the measured
 * window only (on: from --ramp + --warmup to the end of --duration); the
 * session counts and the failures the whole run. */
struct bot_meas {
	bool on; /* in the measured window (the thread's view) */
	uint64_t stat[S_NR];
	uint64_t fail[F_NR];
	struct hist latency; /* input sent -> first snapshot showing it */
	struct hist jitter; /* |snapshot inter-arrival - ticks x period| */
	struct hist rtt; /* ping -> pong */
	struct hist outage; /* --servers: room lost -> joined again */
};

enum bot_state {
	B_IDLE, /* not connected (before its connect, between churns) */
	B_HELLO, /* hello sent */
	B_LOBBY, /* welcome received, in no room */
	B_JOINING, /* join sent */
	B_ROOM, /* joined */
	B_LEAVING, /* leave sent, the old room may still talk */
	B_DONE, /* finished */
};

#define BOT_TX 2048 /* send queue bytes (a power of two) */
#define BOT_PENDING 256 /* inputs in flight (a power of two) */
#define BOT_CHATS 16 /* own chat lines in flight (a power of two) */
#define BOT_ACK_NS 250000000ull /* an ack per 250 ms of snapshots read */
#define BOT_RXBUF 4096 /* the uring engine's receive buffer */
#define INPUT_LOST_NS (5 * 1000000000ull)
#define CHAT_LOST_NS (5 * 1000000000ull)

struct bot_input {
	uint32_t seq;
	uint8_t dir;
	uint64_t t_sent;
};

struct bot_chat {
	uint32_t k; /* the bot's own chat number */
	uint64_t t_sent;
};

struct bots_worker;
struct bot;
struct bots_ctx;

/* A bot's WebSocket (--ws): one arena message per binary message, the
 * len16 frame's payload without its length. */
struct bot_ws {
	struct wsc_dec dec;
	uint64_t rng; /* the masks */
	bool upgraded; /* the 101 came: arena messages from here */
	char key[WSC_KEY_LEN + 1];
	char head[WSC_RESPONSE_MAX]; /* the answer's head so far */
	size_t head_len;
	uint8_t *msg; /* a message split over receives */
	size_t msg_len, msg_cap;
};

/* What a bot needs from whoever runs it (bots.c, or a test). */
struct bot_env {
	struct bot_meas *meas; /* the bot's thread's measurements */
	const struct bots_ctx *ctx; /* the options, the shared checks */
	/* The bot has bytes to send (NULL: nothing to do). */
	void (*mark_dirty)(struct bot *b);
};

struct bot {
	union { /* the engine's part: fd, dead, dirty, ... */
		struct eng_conn ec;
		struct {
			ENG_CONN_MEMBERS
		};
	};
	const struct bot_env *env; /* set before bot_start() */
	struct bots_worker *w; /* bots.c's */
	uint32_t id; /* 0..players-1 */
	enum bot_state state;
	bool stall; /* this bot stops reading (--stall) */
	bool stalled; /* ... and has */
	bool connected; /* fd open */
	struct bot_ws *ws; /* --ws, else NULL */
	uint32_t heap_idx; /* in its worker's timer heap */
	uint64_t wake; /* its next timer */

	/* Send queue: bytes [tx_sent, tx_end) of the stream wait. */
	uint8_t tx[BOT_TX];
	uint64_t tx_sent, tx_end;
	/* A frame split over receives. */
	uint8_t *part;
	uint32_t part_cap, part_len, part_need; /* need: 0 = header */
	uint8_t part_hdr[AP_HDR];
	uint8_t part_hdr_len;

	/* The server's world. */
	uint32_t player; /* our id (0 before welcome) */
	struct ap_world world;
	uint16_t room_size;
	uint64_t period_ns; /* one tick */

	/* The room whose messages we take: the joined one, until the next
	 * joined (a leave does not end it: its last messages may come). */
	uint32_t room;
	bool in_room; /* a room's messages may come */
	uint32_t join_tick, join_members;
	bool first_snap; /* the next snapshot is the first in this room */
	uint32_t last_tick; /* across rooms: ticks only go up */
	bool have_tick;
	uint32_t room_last_tick; /* the last snapshot tick in this room */
	uint64_t last_arrival;
	uint32_t chat_next; /* the room's next chat line number */

	/* Inputs: position after applied_seq, and those not yet applied. */
	uint16_t x, y;
	uint32_t applied_seq, next_seq; /* seq 1 is the first input */
	struct bot_input pend[BOT_PENDING];
	uint32_t pend_head, pend_tail; /* [head, tail) in flight */

	/* Own chat lines not yet back. */
	struct bot_chat chats[BOT_CHATS];
	uint32_t chat_head, chat_tail, chat_k;

	/* Timers (ns; 0: off). */
	uint64_t t_connect, t_input, t_chat, t_ping, t_churn, t_join, t_stall;
	uint64_t ping_sent;
	uint64_t ack_at; /* when the last ack went out (0: none yet) */
	uint32_t server; /* --servers: which one it connects to */
	uint64_t out_since; /* --servers: its room was lost then (0: no) */
	uint32_t rng;
	uint8_t dir; /* the direction it walks in, */
	uint8_t dir_left; /* for this many more inputs */
};

/* The options every bot follows. */
struct bots_opts {
	const char *addr;
	uint16_t port;
	uint32_t players;
	uint32_t threads;
	uint64_t rate; /* inputs per second per bot; 0: the tick rate */
	bool jitter; /* each input at a random time in its period */
	uint64_t chat_ns; /* mean interval between a bot's chat lines */
	uint64_t ping_ns;
	uint64_t duration_ns; /* measured, after ramp + warmup */
	uint64_t ramp_ns;
	uint64_t warmup_ns; /* played, not measured */
	uint64_t drain_ns; /* after the run: inputs and chats come back */
	uint64_t timeout_ns; /* connect */
	uint64_t churn_ns; /* mean time in a room before leaving; 0: none */
	uint32_t stall; /* bots that stop reading */
	uint64_t stall_after_ns;
	uint32_t seed;
	enum eng_kind engine;
	bool json;
	int progress; /* -1 auto, 0 never, 1 always */
	const char *hist_path;
	bool check_cross; /* the shared two-rooms check (a sample) */
	bool ws; /* WebSocket instead of len16 */
	const char *ws_path; /* the upgrade's request target */
	uint32_t nservers; /* --servers: nodes of a cluster (0: --port) */
};

/* The bots' shared state. */
struct bots_ctx {
	struct bots_opts o;
	struct sockaddr_storage sa;
	socklen_t salen;
	struct sockaddr_storage *servers; /* --servers */
	socklen_t *server_lens;
	uint64_t t0; /* the start */
	uint64_t t_measure; /* the measured window starts */
	uint64_t t_stop; /* ... and ends: no more inputs and chats */
	uint64_t t_end; /* the drain ends */
	int stop; /* atomic: interrupted */
	unsigned int done; /* atomic: threads finished */
	/* Players seen in rooms: (tick, room) per player id slot. */
	uint64_t *cross;
	uint32_t cross_mask;
	struct bots_worker *workers;
};

/* ---- bot.c: the player and its verifier ---- */

/* Reset a bot's protocol state for a new connection. */
void bot_reset(struct bot *b);
/* Bytes received: cut frames, handle each. */
void bot_on_data(struct bot *b, const uint8_t *p, size_t n, uint64_t now);
/* One decoded frame's payload. */
void bot_on_frame(struct bot *b, const uint8_t *p, size_t n, uint64_t now);
/* Queue a payload (the length goes first, or with --ws as one masked
 * binary frame); false if the queue is full. */
bool bot_queue(struct bot *b, const uint8_t *payload, size_t len);
/* Queue one masked WebSocket frame of op; false if the queue is full. */
bool bot_queue_ws(struct bot *b, enum wsc_opcode op, const uint8_t *payload,
		  size_t len);
/* The connection is made: say hello. */
void bot_start(struct bot *b, uint64_t now);
/* Send one input (in a room); false if it could not be queued. */
bool bot_send_input(struct bot *b, uint8_t dir, uint64_t now);
/* Send one chat line of ours. */
bool bot_send_chat(struct bot *b, uint64_t now);
/* Leave the room. */
void bot_leave(struct bot *b, uint64_t now);
/* Join any room. */
void bot_join(struct bot *b, uint64_t now);
/* --servers: the room is gone (room_lost, or the node closed us): what
 * was in flight is counted lost, the outage clock starts. */
void bot_lost_room(struct bot *b, uint64_t now);
/* Checks that need time: inputs and chat lines overdue by now. */
void bot_check_overdue(struct bot *b, uint64_t now);
/* Our chat line number k: its text (12..120 bytes) into out; its size. */
size_t bot_chat_text(const struct bot *b, uint32_t k, char *out);
/* The bot's own random numbers (xorshift32 on b->rng). */
uint32_t bot_rnd(struct bot *b);
/* Count a failure (and log the first few). */
void bot_fail(struct bot *b, enum bot_fail f, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A relaxed counter bump (one writer per counter). */
#define BOT_BUMP(x, n)                                                        \
	__atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + (n), \
			 __ATOMIC_RELAXED)
#define BOT_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

#endif /* AO_BOTS_H */
