/* SPDX-License-Identifier: MIT */
/*
 * ao-arena's server state: rooms, players and their events, private to
 * room.c and to the tests that look inside it (tests/test_arena.c).
 * room.c says what each field means to the ticks and the handlers.
 */
#ifndef AO_ARENA_ROOM_H
#define AO_ARENA_ROOM_H

#include <aorta/core/bufpool.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/io/conn.h>
#include <aorta/sync/spinlock.h>
#include "arena.h"

enum ev_kind { EV_JOIN, EV_INPUT, EV_CHAT, EV_LEAVE, EV_GONE, EV_WATCH };

struct player;

struct event {
	struct player *p;
	uint8_t kind;
	uint8_t dir;
	uint32_t seq; /* input: its seq; join: the room asked for; a chat
		       * line kept by a tick: its sender's id */
	struct ao_buf *buf; /* chat: the packet (a reference) */
};

struct inbox {
	struct event *ev;
	uint32_t n, cap;
};

struct room {
	struct arena *a;
	uint32_t id; /* 1, 2, ... */
	struct ao_strand strand;
	struct ao_timer tick;
	struct ao_spinlock lock; /* the inbox */
	struct inbox in;
	uint32_t reserved; /* lobby lock: players admitted, not yet out */
	uint32_t wreserved; /* lobby lock: spectators admitted */
	uint32_t count; /* members (written by the strand, read racily) */
	/* The strand's. */
	struct inbox work;
	struct player **members;
	uint32_t nmembers;
	struct player **watchers; /* spectators: snapshots and chat */
	uint32_t nwatchers;
	struct player **joiners, **leavers, **gone;
	uint32_t njoiners, nleavers, ngone;
	struct event *chats;
	uint32_t nchats, cap_chats;
	uint32_t chat_seq;
	struct croom *cl; /* across nodes (cluster.c); NULL otherwise */
	struct room *spare_next; /* on a->spare (room_spare()) */
};

enum pstate { P_NEW, P_LOBBY, P_ROOM, P_LEAVING };

/*
 * A player's state is the server's view (state: where its room has got
 * to) next to the client's (in: a join sent and no leave since, as the
 * client sees it whatever the server has applied).  Messages are checked
 * against the client's view, so that their order alone decides, not the
 * TCP segmentation nor the ticks:
 *
 *   in   state      join       input, chat, leave
 *   no   LOBBY      picked     order
 *   no   LEAVING    deferred   order
 *   yes  ROOM       order      to the room's inbox
 *   yes  LEAVING    order      deferred (after a join deferred)
 *   yes  LOBBY      picked     dropped (its join was refused)
 *
 * A watch is a join as a spectator (watching): the same, but for input
 * and chat, which are order while watching.
 *
 * Deferred messages wait on the player until its leave is applied
 * (hand_over()), then go to the next room in order, or are dropped if
 * that join is refused.
 */
struct player {
	struct arena *a;
	struct ao_conn *conn; /* a reference, put when freed */
	struct ao_spinlock lock;
	/* Under lock. */
	enum pstate state;
	struct room *room; /* P_ROOM: joined or joining; P_LEAVING: left */
	bool in; /* the client's view: a join sent, no leave since */
	bool watching; /* the client's view: the stay of in is a watch */
	bool closed;
	struct inbox deferred; /* P_LEAVING: what comes after the leave */
	/* Every send to conn (player_send()); a leaf lock. */
	struct ao_spinlock send_lock;
	bool quiet; /* under send_lock: closed by the arena (its error
		     * sent): nothing more is sent */
	/* The handler's. */
	bool hello; /* hello taken (atomic: the deadline timer reads it) */
	uint32_t id;
	uint32_t last_seq; /* the last input seq taken */
	uint32_t pending; /* atomic: inputs and chats not applied yet */
	int closing; /* atomic: the arena decided to close it (once) */
	/* The hello and idle deadlines: a timer on a worker. */
	struct ao_timer timer;
	uint64_t opened_ns;
	uint64_t last_msg_ns; /* atomic: the last complete message */
	int timer_dead; /* atomic: being freed, do not re-arm */
	/* The rooms' (one room's strand at a time). */
	struct room *member_of;
	struct room *watch_of; /* a spectator of this room */
	uint32_t slot; /* in members, or in watchers */
	uint16_t x, y;
	uint16_t spawn_x, spawn_y; /* where this stay started (joined) */
	uint32_t applied_seq;
	uint32_t last_tick;
	bool has_tick;
	bool stalled;
	uint64_t stall_since;
	bool ghost; /* another node's player, in a room owned here (no
		     * connection: cluster.c forwards what it gets) */
	uint32_t stay_tick; /* joined.tick of this stay */
	/* The acks (see on_ack()): the newest snapshot tick sent, written
	 * by the rooms and read by the handler; the newest tick acked,
	 * written by the handler and read by the rooms. */
	uint32_t sent_tick;
	int sent_any; /* atomic */
	uint32_t acked_tick;
	int acking; /* atomic: an ack came, the connection is held to it */
};

struct arena {
	struct arena_opts o;
	struct ao_exec *exec;
	struct ao_timers *timers;
	struct ao_bufpool *pool;
	struct ao_server *srv;
	struct ap_world world;
	uint64_t period;
	uint64_t base; /* tick t of a room is due at base + t period + phase */
	size_t buf_size;

	struct ao_spinlock lobby; /* the rooms and their reserved counts */
	struct room **rooms;
	uint32_t nrooms, cap_rooms;
	struct room *spare; /* rooms given up, for room_new() to take */
	uint32_t nspare;
	bool stopping; /* no room is made any more */

	uint32_t next_id; /* atomic: hellos so far */
	/* Player ids are id_base | 1..id_span: a node's own range. */
	uint32_t id_base, id_span;
	struct ao_spinlock hist_lock;
	struct hist late, work;
	struct arena_stats st; /* counters: relaxed atomics */
	struct cluster *cl; /* --nats: cluster.c; NULL otherwise */
};

/* For cluster.c (room.c's, the same as in a room's own tick). */
struct room *room_new(struct arena *a, uint32_t id, struct croom *cl);
int room_arm(struct room *r);
int room_push(struct room *r, const struct event *e);
int player_send(struct player *p, struct ao_buf *buf);
int player_reply(struct player *p, const uint8_t *msg, size_t len);
void player_free(struct player *p);
void member_remove(struct room *r, struct player *p);
void lobby_release(struct arena *a, struct room *r);
void room_spare(struct room *r);
void run_deferred(struct arena *a, struct player *p);
int inbox_push(struct inbox *in, const struct event *e);

#endif /* AO_ARENA_ROOM_H */
