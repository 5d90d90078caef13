// SPDX-License-Identifier: MIT
/*
 * The arena server: players, rooms and their ticks, on aorta's public
 * API only (<aorta/...>).
 *
 * Data flow.  The server cuts each connection's bytes into packets
 * (len16, little-endian) and runs on_packet, on the ring thread
 * (AO_SERVER_RING_HANDLERS, the default) or on the connection's strand.
 * The handler decodes the message and checks it against the player's
 * state as the client sees it (struct player): hello and ping are
 * answered at once; join picks a room under the lobby lock; input, chat,
 * leave and a disconnect become events in the room's inbox (a vector
 * under a spinlock), or wait on the player for its leave to be applied.
 * Nothing else of the room is touched there.
 *
 * Closes.  A protocol error, or the hello or idle deadline (a timer per
 * player on a worker), sends its error message and closes gracefully,
 * so the message arrives before the FIN, and is the last thing sent:
 * every send to a player takes its send lock and checks that it is not
 * closed yet (player_send()); a stalled member is closed abortively.
 * Whoever decides first closes, once (close_player()).
 *
 * Each room has one strand and one periodic timer on it, so everything
 * the room owns (its members, their positions, its chat numbers) is used
 * by one thread at a time without a lock.  A tick:
 *
 *   1. notes which members still have something queued (ao_conn_send_
 *      queued(): their previous snapshot is not out yet);
 *   2. takes the inbox and applies its events in order: joins add a
 *      member at a spawn point, inputs move (ap_move(), the rules the
 *      bots predict with), chats are kept, leaves and disconnects remove;
 *   3. sends joined to the new members (with the final member count);
 *   4. sends each chat line as one buffer, with ao_conn_send_packet() to
 *      every member and to those who left in this tick (so a player's
 *      own line sent before its leave still reaches it);
 *   5. builds ONE snapshot buffer and sends that same buffer to every
 *      member (each send takes a reference: no copy per member), except
 *      to the members of step 1, which skip this one (snap_skipped; the
 *      next one they get is the newest, and the room never waits); a
 *      member skipped for --stall-timeout is closed as a slow consumer;
 *   6. hands the leavers that asked to join another room meanwhile to
 *      that room (only now: nothing of this room can reach them after
 *      the other room's joined), and frees the players that are gone.
 *
 * Tick numbers are the server's: tick t of any room is due t periods
 * after the start (plus the room's phase: rooms' ticks are spread over
 * the period so that they do not all wake at once).  A player moving to
 * a room whose tick number is not above the last one it was in waits a
 * tick (joins_deferred), so a player never sees a tick twice.
 *
 * Lock order: a player's lock, then the lobby lock, then a room's inbox
 * lock; a player's send lock is taken last, around a send only.  A
 * player is freed by the room that applies its disconnect, or by the
 * handler when it was in no room.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/io/conn.h>
#include <aorta/io/server.h>
#include <aorta/sync/spinlock.h>
#include "room.h"
#include "cluster.h"

#define NS 1000000000ull

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)
#define SUB(x, n) __atomic_fetch_sub(&(x), (n), __ATOMIC_RELAXED)

static const char *const close_names[AC_NR] = {
	[AC_BAD_TYPE] = "bad_type",
	[AC_MALFORMED] = "malformed",
	[AC_ORDER] = "order",
	[AC_CHAT_LONG] = "chat_long",
	[AC_FLOOD] = "flood",
	[AC_SERVER_FULL] = "server_full",
	[AC_HELLO_TIMEOUT] = "hello_timeout",
	[AC_IDLE] = "idle",
	[AC_SLOW] = "slow",
	[AC_NOBUF] = "nobuf",
};

const char *arena_close_name(enum arena_close why)
{
	return why < AC_NR ? close_names[why] : "?";
}

/* ------------------------------------------------------------------ */
/* Buffers and sends */

/* A buffer holding one payload; NULL if the pool is empty. */
static struct ao_buf *payload_buf(struct arena *a, const uint8_t *p, size_t len)
{
	struct ao_buf *b = ao_buf_get(a->pool);

	if (!b)
		return NULL;
	memcpy(b->data, p, len);
	b->len = (uint32_t)len;
	return b;
}

/*
 * Everything the arena sends to a player's connection goes through
 * player_send() (or player_reply()), under p->send_lock: once the arena
 * has closed p with an error, that error is the last thing sent.  The
 * server's graceful close (ao_conn_close()) takes sends until its queue
 * is empty, so without this a tick, a chat line or a cluster forward
 * running on another thread at the moment of the close went out after
 * the error.  The lock is a leaf (only the connection's own send lock is
 * taken inside it), so a sender may hold any other lock of the arena.
 */
int player_send(struct player *p, struct ao_buf *buf)
{
	int err = -EPIPE;

	ao_spin_lock(&p->send_lock);
	if (!p->quiet)
		err = ao_conn_send_packet(p->conn, buf);
	ao_spin_unlock(&p->send_lock);
	return err;
}

/* Send one payload to p (a reply, or a message of its own). */
int player_reply(struct player *p, const uint8_t *msg, size_t len)
{
	struct ao_buf *b = payload_buf(p->a, msg, len);
	int r;

	if (!b)
		return -ENOBUFS;
	r = player_send(p, b);
	ao_buf_put(b);
	return r;
}

/*
 * Close p's connection for the arena's reason why, once per connection
 * (whoever decides first: a handler, a room, the deadline timer): the
 * error frame of code first (0: none), then a graceful close, which
 * delivers it before the FIN; from the error on nothing more is sent to
 * p (quiet, see player_send()).  A slow consumer is closed abortively
 * (RST): it is not reading, and must learn at once.  Counted under why
 * when this call closed it.
 */
static void close_player(struct player *p, enum arena_close why, int code)
{
	struct arena *a = p->a;
	uint8_t msg[AP_LEN_ERROR];
	struct ao_buf *b = NULL;
	int err;

	if (__atomic_exchange_n(&p->closing, 1, __ATOMIC_RELAXED))
		return;
	if (code && why != AC_SLOW && why != AC_NOBUF) {
		ap_enc_error(msg, (uint8_t)code);
		b = payload_buf(a, msg, sizeof(msg));
	}
	/* The error and quiet in one hold of the lock: a send either got
	 * in before the error or is refused. */
	ao_spin_lock(&p->send_lock);
	if (b)
		ao_conn_send_packet(p->conn, b);
	p->quiet = true;
	ao_spin_unlock(&p->send_lock);
	if (b)
		ao_buf_put(b);
	if (why == AC_SLOW || why == AC_NOBUF)
		err = ao_conn_close_slow(p->conn);
	else
		err = ao_conn_close(p->conn);
	if (!err)
		ADD(a->st.closes[why], 1);
}

/*
 * Send buf to a member: the same buffer (a reference), or a copy with
 * --copy-broadcast (what a server without refcounted buffers does).  A
 * copy the pool cannot give: a snapshot is skipped for that member
 * (false), but a chat line must not be lost, so the member is closed as a
 * slow consumer (counted: nobuf) rather than miss it.
 */
static bool send_shared(struct arena *a, struct player *m, struct ao_buf *buf,
			bool reliable)
{
	struct ao_buf *copy;

	if (m->ghost) /* its node gets the room's copy (cluster.c) */
		return true;
	if (!a->o.copy_broadcast) {
		player_send(m, buf);
		return true;
	}
	copy = ao_buf_get(a->pool);
	if (!copy) {
		if (reliable)
			close_player(m, AC_NOBUF, 0);
		return false;
	}
	memcpy(copy->data, buf->data, buf->len);
	copy->len = buf->len;
	player_send(m, copy);
	ao_buf_put(copy);
	return true;
}

/* ------------------------------------------------------------------ */
/* Players */

void player_free(struct player *p)
{
	struct arena *a = p->a;

	/*
	 * The deadline timer re-arms itself from its callback.  Release:
	 * pairs with the acquire load in deadline_fn(); a run that started
	 * before the store may still re-arm, and the first cancel waits for
	 * it; the second cancels that arm (or waits for a run that saw the
	 * store and does not re-arm).
	 */
	__atomic_store_n(&p->timer_dead, 1, __ATOMIC_RELEASE);
	ao_timer_cancel_sync(&p->timer);
	ao_timer_cancel_sync(&p->timer);
	free(p->deferred.ev);
	if (p->ghost)
		cluster_ghost_free(p);
	else
		ao_conn_put(p->conn);
	free(p);
	SUB(a->st.players, 1);
}

int inbox_push(struct inbox *in, const struct event *e)
{
	if (in->n == in->cap) {
		uint32_t cap = in->cap ? 2 * in->cap : 64;
		struct event *ev = realloc(in->ev, cap * sizeof(*ev));

		if (!ev)
			return -ENOMEM;
		in->ev = ev;
		in->cap = cap;
	}
	in->ev[in->n++] = *e;
	return 0;
}

int room_push(struct room *r, const struct event *e)
{
	int err;

	ao_spin_lock(&r->lock);
	err = inbox_push(&r->in, e);
	ao_spin_unlock(&r->lock);
	/* Inputs and chat only: the hop's latency is theirs, and a
	 * disconnect is pushed under its player's lock, which a forward at
	 * once (freeing the player) must not race. */
	if (!err && r->cl && (e->kind == EV_INPUT || e->kind == EV_CHAT))
		cluster_pushed(r);
	return err;
}

/* ------------------------------------------------------------------ */
/* Rooms */

static void room_tick(struct ao_timer *t, const struct ao_timer_event *ev);

/* Arm a room's tick.  Rooms' phases are spread over the period (golden
 * ratio steps of the room number). */
int room_arm(struct room *r)
{
	struct arena *a = r->a;
	uint32_t phase = (r->id - 1) * 2654435769u;
	uint64_t now = ao_timers_now(a->timers), first, k;

	k = (now - a->base) / a->period + 1;
	first = a->base + k * a->period +
		(uint64_t)(((unsigned __int128)a->period * phase) >> 32);
	return ao_timer_arm_periodic(&r->tick, first, a->period,
				     a->o.precise ? AO_TIMER_PRECISE : 0);
}

/* A room's arrays (NULL ones too), then the room. */
static void room_free_bare(struct room *r)
{
	free(r->watchers);
	free(r->members);
	free(r->joiners);
	free(r->leavers);
	free(r->gone);
	free(r);
}

/* A new room (under the lobby lock), its tick armed; id 0: the next
 * number.  cluster.c gives its own number and cl, and arms it itself
 * once cl is ready; its rooms are spare ones first (room_spare()). */
struct room *room_new(struct arena *a, uint32_t id, struct croom *cl)
{
	uint32_t idx = a->nrooms;
	struct room *r;

	if (a->nrooms == a->cap_rooms) {
		uint32_t cap = a->cap_rooms ? 2 * a->cap_rooms : 16;
		struct room **rooms = realloc(a->rooms, cap * sizeof(*rooms));

		if (!rooms)
			return NULL;
		a->rooms = rooms;
		a->cap_rooms = cap;
	}
	if (cl && a->spare) {
		r = a->spare;
		a->spare = r->spare_next;
		a->nspare--;
		r->id = id;
		r->cl = cl;
		a->rooms[a->nrooms++] = r;
		ADD(a->st.rooms, 1);
		return r;
	}
	r = calloc(1, sizeof(*r));
	if (r)
		r->members = calloc(a->o.room_size, sizeof(*r->members));
	if (r && r->members) {
		/* Members and spectators: room_size of each at most. */
		r->watchers = calloc(a->o.room_size, sizeof(*r->watchers));
		r->joiners = calloc(2 * a->o.room_size, sizeof(*r->joiners));
		r->leavers = calloc(2 * a->o.room_size, sizeof(*r->leavers));
		r->gone = calloc(2 * a->o.room_size, sizeof(*r->gone));
	}
	if (!r || !r->members || !r->watchers || !r->joiners || !r->leavers ||
	    !r->gone) {
		if (r)
			room_free_bare(r);
		return NULL;
	}
	r->a = a;
	r->id = id ? id : idx + 1;
	ao_spin_init(&r->lock);
	ao_strand_init(&r->strand, a->exec);
	ao_timer_init_strand(&r->tick, &r->strand, room_tick);
	r->cl = cl;
	if (!cl && room_arm(r)) {
		room_free_bare(r);
		return NULL;
	}
	a->rooms[a->nrooms++] = r;
	ADD(a->st.rooms, 1);
	return r;
}

/* Admit a player to room `want` (or any): the room, or NULL with *err
 * (AP_ERR_NO_ROOM, AP_ERR_ROOM_FULL, or AP_ERR_SERVER_FULL when no room
 * could be made). */
static struct room *lobby_pick(struct arena *a, uint32_t want, int *err)
{
	struct room *r = NULL;
	uint32_t i;

	ao_spin_lock(&a->lobby);
	if (a->cl) {
		r = cluster_pick(a, want, err);
		goto out;
	}
	if (want != AP_ROOM_ANY) {
		if (want == 0 || want > a->nrooms) {
			*err = AP_ERR_NO_ROOM;
			goto out;
		}
		r = a->rooms[want - 1];
		if (r->reserved >= a->o.room_size) {
			*err = AP_ERR_ROOM_FULL;
			r = NULL;
			goto out;
		}
	} else {
		for (i = 0; i < a->nrooms && !r; i++)
			if (a->rooms[i]->reserved < a->o.room_size)
				r = a->rooms[i];
		if (!r && !a->stopping)
			r = room_new(a, 0, NULL);
		if (!r) {
			*err = AP_ERR_SERVER_FULL;
			goto out;
		}
	}
	r->reserved++;
out:
	ao_spin_unlock(&a->lobby);
	return r;
}

void lobby_release(struct arena *a, struct room *r)
{
	ao_spin_lock(&a->lobby);
	r->reserved--;
	ao_spin_unlock(&a->lobby);
}

/*
 * cluster.c gives up a lost room that nothing refers to any more (under
 * the lobby lock, on the room's strand, its tick cancelled, its inbox
 * empty, none of its places reserved): out of the table, emptied, and
 * onto the spare list, which room_new() takes from before it allocates.
 * Its memory is not freed while the arena runs, because of its strand:
 * a subscription the room had on it is closed, and no handler of it runs
 * any more, but the bus's reader may still be handing the strand a
 * message of it (dropped there unread), and nothing tells when it has
 * let go.  A strand that stays a strand takes that safely, whichever
 * room it serves by then.  So the rooms held are bounded by the most
 * there were at once, not by how many were ever lost.
 */
void room_spare(struct room *r)
{
	struct arena *a = r->a;
	uint32_t i;

	for (i = 0; i < a->nrooms; i++) {
		if (a->rooms[i] == r) {
			a->rooms[i] = a->rooms[--a->nrooms];
			break;
		}
	}
	/* As room_new() made it, but for its arrays, strand and timer. */
	free(r->in.ev);
	r->in.ev = NULL;
	r->in.n = r->in.cap = 0;
	/* Chat lines an own room kept for want of a buffer. */
	while (r->nchats)
		ao_buf_put(r->chats[--r->nchats].buf);
	r->nmembers = r->nwatchers = 0;
	r->njoiners = r->nleavers = r->ngone = 0;
	r->reserved = r->wreserved = r->count = 0;
	r->chat_seq = 0;
	r->cl = NULL;
	r->id = 0;
	r->spare_next = a->spare;
	a->spare = r;
	a->nspare++;
}

/* Admit a spectator to room `want` (or any: the first room), as
 * lobby_pick() does a player; no room is made for a spectator. */
static struct room *lobby_watch(struct arena *a, uint32_t want, int *err)
{
	struct room *r = NULL;

	ao_spin_lock(&a->lobby);
	if (want == AP_ROOM_ANY)
		want = 1;
	/* Across nodes (--nats) there are no spectators yet. */
	if (a->cl || want == 0 || want > a->nrooms) {
		*err = AP_ERR_NO_ROOM;
	} else if (a->rooms[want - 1]->wreserved >= a->o.room_size) {
		*err = AP_ERR_ROOM_FULL;
	} else {
		r = a->rooms[want - 1];
		r->wreserved++;
	}
	ao_spin_unlock(&a->lobby);
	return r;
}

static void member_add(struct room *r, struct player *p)
{
	struct arena *a = r->a;

	p->member_of = r;
	p->slot = r->nmembers;
	r->members[r->nmembers++] = p;
	ap_spawn(&a->world, p->id, r->id, &p->x, &p->y);
	/* joined tells where the stay starts, whatever the inputs applied
	 * in this tick after the join; the seq starts again at 0. */
	p->spawn_x = p->x;
	p->spawn_y = p->y;
	p->applied_seq = 0;
	p->stalled = false;
	p->stall_since = 0;
	r->joiners[r->njoiners++] = p;
	ADD(a->st.in_rooms, 1);
	ADD(a->st.joins, 1);
}

void member_remove(struct room *r, struct player *p)
{
	struct player *last = r->members[--r->nmembers];
	uint32_t i;

	r->members[p->slot] = last;
	last->slot = p->slot;
	p->member_of = NULL;
	/* A member that joined in this very tick gets no joined. */
	for (i = 0; i < r->njoiners; i++) {
		if (r->joiners[i] == p) {
			r->joiners[i] = r->joiners[--r->njoiners];
			break;
		}
	}
	lobby_release(r->a, r);
	SUB(r->a->st.in_rooms, 1);
}

/* A spectator: in no snapshot, but it gets them, and the chat lines. */
static void watcher_add(struct room *r, struct player *p)
{
	p->watch_of = r;
	p->slot = r->nwatchers;
	r->watchers[r->nwatchers++] = p;
	p->stalled = false;
	p->stall_since = 0;
	r->joiners[r->njoiners++] = p;
	ADD(r->a->st.spectators, 1);
	ADD(r->a->st.watches, 1);
}

static void watcher_remove(struct room *r, struct player *p)
{
	struct player *last = r->watchers[--r->nwatchers];
	uint32_t i;

	r->watchers[p->slot] = last;
	last->slot = p->slot;
	p->watch_of = NULL;
	for (i = 0; i < r->njoiners; i++) {
		if (r->joiners[i] == p) {
			r->joiners[i] = r->joiners[--r->njoiners];
			break;
		}
	}
	ao_spin_lock(&r->a->lobby);
	r->wreserved--;
	ao_spin_unlock(&r->a->lobby);
	SUB(r->a->st.spectators, 1);
}

/* Step 2: apply the events; false if one must wait for the next tick
 * (the rest of them are put back in front of the inbox). */
static void apply_events(struct room *r, uint32_t tick, bool final)
{
	struct arena *a = r->a;
	struct inbox *w = &r->work;
	uint32_t i, inputs = 0;

	ao_spin_lock(&r->lock);
	*w = r->in;
	r->in.ev = NULL;
	r->in.n = r->in.cap = 0;
	ao_spin_unlock(&r->lock);

	for (i = 0; i < w->n; i++) {
		struct event *e = &w->ev[i];
		struct player *p = e->p;

		switch (e->kind) {
		case EV_JOIN:
			if (!final && p->has_tick && p->last_tick >= tick)
				goto defer;
			member_add(r, p);
			break;
		case EV_WATCH:
			if (!final && p->has_tick && p->last_tick >= tick)
				goto defer;
			watcher_add(r, p);
			break;
		case EV_INPUT:
			SUB(p->pending, 1);
			if (p->member_of != r)
				break;
			ap_move(&a->world, &p->x, &p->y, e->dir);
			p->applied_seq = e->seq;
			inputs++;
			break;
		case EV_CHAT:
			SUB(p->pending, 1);
			if (p->member_of != r || final) {
				ao_buf_put(e->buf);
				break;
			}
			if (r->nchats == r->cap_chats) {
				uint32_t cap = r->cap_chats ? 2 * r->cap_chats :
							      16;
				struct event *c =
					realloc(r->chats, cap * sizeof(*c));

				if (!c) {
					ao_buf_put(e->buf);
					break;
				}
				r->chats = c;
				r->cap_chats = cap;
			}
			/* The sender's id, not the player: a line that
			 * waits for a buffer (send_chats()) outlives a
			 * sender freed at the end of this tick. */
			r->chats[r->nchats] = *e;
			r->chats[r->nchats++].seq = p->id;
			break;
		case EV_LEAVE:
			if (p->member_of == r) {
				member_remove(r, p);
				ADD(a->st.leaves, 1);
			}
			if (p->watch_of == r)
				watcher_remove(r, p);
			r->leavers[r->nleavers++] = p;
			break;
		case EV_GONE:
			if (p->member_of == r)
				member_remove(r, p);
			if (p->watch_of == r)
				watcher_remove(r, p);
			r->gone[r->ngone++] = p;
			break;
		}
	}
	w->n = 0;
	goto out;
defer:
	/* Put events i.. back in front of what came meanwhile. */
	ADD(a->st.joins_deferred, 1);
	ao_spin_lock(&r->lock);
	for (uint32_t k = 0; k < r->in.n; k++)
		if (inbox_push(w, &r->in.ev[k]))
			abort(); /* cannot grow the inbox back */
	memmove(w->ev, w->ev + i, (w->n - i) * sizeof(*w->ev));
	w->n -= i;
	free(r->in.ev);
	r->in = *w;
	ao_spin_unlock(&r->lock);
	w->ev = NULL;
	w->n = w->cap = 0;
out:
	free(w->ev);
	w->ev = NULL;
	w->cap = 0;
	ADD(a->st.inputs, inputs);
	__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
}

/* Step 4: one buffer per chat line, to the members and the leavers.  A
 * line the pool has no buffer for waits for the next tick, with the ones
 * after it (chat lines are never dropped, and keep their order). */
static void send_chats(struct room *r, uint32_t tick)
{
	struct arena *a = r->a;
	uint8_t p[AP_LEN_CHAT_LINE_HDR + AP_CHAT_MAX];
	uint32_t i, k;

	for (i = 0; i < r->nchats; i++) {
		struct event *e = &r->chats[i];
		const uint8_t *text = (const uint8_t *)e->buf->data + 1;
		size_t n = ap_enc_chat_line(p, r->id, tick, r->chat_seq, e->seq,
					    text, e->buf->len - 1);
		struct ao_buf *b = payload_buf(a, p, n);

		if (!b) {
			ADD(a->st.chats_deferred, r->nchats - i);
			break;
		}
		r->chat_seq++;
		for (k = 0; k < r->nmembers; k++)
			send_shared(a, r->members[k], b, true);
		for (k = 0; k < r->nwatchers; k++)
			send_shared(a, r->watchers[k], b, true);
		for (k = 0; k < r->nleavers; k++)
			send_shared(a, r->leavers[k], b, true);
		if (r->cl)
			cluster_chat(r, b);
		ao_buf_put(b);
		ao_buf_put(e->buf);
		ADD(a->st.chat_lines, 1);
	}
	if (i < r->nchats) /* (r->chats may be NULL when there were none) */
		memmove(r->chats, r->chats + i,
			(r->nchats - i) * sizeof(*r->chats));
	r->nchats -= i;
}

/*
 * A member that acks is held to it: it is closed as a slow reader once
 * the newest tick it acked (or the first of its stay, if later) is more
 * than --stall-timeout behind this tick, whatever its socket buffers
 * hold.  Tick numbers are the server's clock, so this needs no time.
 */
static bool ack_behind(const struct arena *a, const struct player *m,
		       uint32_t tick)
{
	uint32_t ref;

	/* Acquire: pairs with the release in on_ack(). */
	if (!__atomic_load_n(&m->acking, __ATOMIC_ACQUIRE))
		return false;
	ref = LOAD(m->acked_tick);
	if ((int32_t)(m->stay_tick - ref) > 0)
		ref = m->stay_tick;
	if ((int32_t)(tick - ref) <= 0)
		return false;
	return (uint64_t)(tick - ref) * a->period > a->o.stall_ns;
}

struct snap_count {
	uint32_t sent, skipped, nobuf;
};

/* Snapshot b of this tick to one member or spectator, unless it is still
 * busy with the last one (skipped), or stalled past its bound (closed). */
static void snap_to(struct room *r, struct player *m, struct ao_buf *b,
		    uint32_t tick, uint64_t now, struct snap_count *n)
{
	struct arena *a = r->a;

	m->last_tick = tick;
	m->has_tick = true;
	if (m->ghost) /* its node gets the room's copy (cluster.c) */
		return;
	if (ack_behind(a, m, tick)) {
		ADD(a->st.ack_slow, 1);
		close_player(m, AC_SLOW, 0);
		return;
	}
	if (!m->stalled) {
		m->stall_since = 0;
		/* Before the send: the client cannot ack it sooner.
		 * Release: pairs with the acquire in on_ack(). */
		__atomic_store_n(&m->sent_tick, tick, __ATOMIC_RELEASE);
		__atomic_store_n(&m->sent_any, 1, __ATOMIC_RELEASE);
		if (send_shared(a, m, b, false))
			n->sent++;
		else
			n->nobuf++;
		return;
	}
	n->skipped++;
	if (!m->stall_since)
		m->stall_since = now;
	else if (now - m->stall_since >= a->o.stall_ns)
		close_player(m, AC_SLOW, 0);
}

/* Step 5: one snapshot for every member and spectator that is not still
 * busy. */
static void send_snapshot(struct room *r, uint32_t tick, uint64_t now)
{
	struct arena *a = r->a;
	struct snap_count n = { 0 };
	struct ao_buf *b;
	uint32_t i;

	if (!r->nmembers && !r->nwatchers)
		return;
	b = ao_buf_get(a->pool);
	if (!b) {
		ADD(a->st.snap_nobuf, 1);
		for (i = 0; i < r->nmembers; i++) {
			r->members[i]->last_tick = tick;
			r->members[i]->has_tick = true;
		}
		for (i = 0; i < r->nwatchers; i++) {
			r->watchers[i]->last_tick = tick;
			r->watchers[i]->has_tick = true;
		}
		return;
	}
	ap_enc_snap_hdr(b->data, tick, r->id, (uint16_t)r->nmembers);
	for (i = 0; i < r->nmembers; i++) {
		struct player *m = r->members[i];
		struct ap_entry e = { .player = m->id,
				      .x = m->x,
				      .y = m->y,
				      .seq = m->applied_seq };

		ap_snap_put(b->data, i, &e);
	}
	b->len = (uint32_t)ap_snapshot_len(r->nmembers);
	for (i = 0; i < r->nmembers; i++)
		snap_to(r, r->members[i], b, tick, now, &n);
	for (i = 0; i < r->nwatchers; i++)
		snap_to(r, r->watchers[i], b, tick, now, &n);
	if (r->cl)
		cluster_snap(r, b);
	ao_buf_put(b);
	ADD(a->st.snap_bufs, a->o.copy_broadcast ? n.sent : 1);
	ADD(a->st.snaps_sent, n.sent);
	ADD(a->st.snaps_skipped, n.skipped);
	ADD(a->st.snap_nobuf, n.nobuf);
}

/* A message dropped: its chat buffer and its place in pending go. */
static void drop_event(struct arena *a, struct event *e)
{
	if (e->kind == EV_INPUT || e->kind == EV_CHAT)
		SUB(e->p->pending, 1);
	if (e->kind == EV_CHAT)
		ao_buf_put(e->buf);
	if (e->kind != EV_JOIN && e->kind != EV_WATCH && !e->p->closed)
		ADD(a->st.refused_drops, 1);
}

/*
 * A leave of p is applied: what p sent after it goes on, in order (under
 * p's lock).  A join picks its room: the messages after it go to that
 * room, up to and with the next leave, which leaves the rest deferred
 * again (P_LEAVING in the new room).  A refused join: its error is sent
 * and the inputs, chats and leave after it, up to the next join, are
 * dropped.
 */
void run_deferred(struct arena *a, struct player *p)
{
	struct inbox *d = &p->deferred;
	struct room *next = NULL;
	uint32_t i = 0;

	p->state = P_LOBBY;
	p->room = NULL;
	while (i < d->n) {
		struct event *e = &d->ev[i++];

		if (e->kind == EV_JOIN || e->kind == EV_WATCH) {
			int code = 0;

			next = p->closed ? NULL :
			       e->kind == EV_WATCH ?
					   lobby_watch(a, e->seq, &code) :
					   lobby_pick(a, e->seq, &code);
			if (code) {
				uint8_t msg[AP_LEN_ERROR];

				ap_enc_error(msg, (uint8_t)code);
				player_reply(p, msg, sizeof(msg));
			}
			if (!next)
				continue;
			p->state = P_ROOM;
			p->room = next;
			if (room_push(next, e))
				abort(); /* see room_push() */
			continue;
		}
		if (!next) {
			drop_event(a, e);
			continue;
		}
		if (room_push(next, e))
			abort(); /* see room_push() */
		if (e->kind == EV_LEAVE) {
			p->state = P_LEAVING;
			break;
		}
	}
	if (i < d->n) /* (d->ev is NULL when nothing ever waited) */
		memmove(d->ev, d->ev + i, (d->n - i) * sizeof(*d->ev));
	d->n -= i;
}

/* Step 6: leavers go on to what they sent next; the gone are freed. */
static void hand_over(struct room *r)
{
	struct arena *a = r->a;
	uint32_t i;

	for (i = 0; i < r->nleavers; i++) {
		struct player *p = r->leavers[i];

		if (p->ghost) { /* its stay is over: its node is told */
			cluster_left(r, p);
			player_free(p);
			continue;
		}
		ao_spin_lock(&p->lock);
		run_deferred(a, p);
		ao_spin_unlock(&p->lock);
	}
	r->nleavers = 0;
	for (i = 0; i < r->ngone; i++)
		player_free(r->gone[i]);
	r->ngone = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static void room_tick(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct room *r = container_of(t, struct room, tick);
	struct arena *a = r->a;
	uint32_t tick = (uint32_t)((ev->deadline - a->base) / a->period);
	uint64_t t0 = now_ns();
	uint8_t msg[AP_LEN_JOINED];
	uint32_t i;

	if (r->cl && cluster_tick(r, tick, ev->now))
		return;
	/* 1: who is still busy with what it was sent. */
	for (i = 0; i < r->nmembers; i++)
		r->members[i]->stalled =
			!r->members[i]->ghost &&
			ao_conn_send_queued(r->members[i]->conn) > 0;
	for (i = 0; i < r->nwatchers; i++)
		r->watchers[i]->stalled =
			ao_conn_send_queued(r->watchers[i]->conn) > 0;
	apply_events(r, tick, false);
	/* 3: joined, once the member count of this tick is known. */
	for (i = 0; i < r->njoiners; i++) {
		struct player *p = r->joiners[i];

		bool watch = p->watch_of == r;

		p->stay_tick = tick;
		/* Closed by the arena meanwhile: no joined after its error
		 * (player_send() makes it exact; its close event removes
		 * it). */
		if (!p->ghost && LOAD(p->closing))
			continue;
		/* A spectator has no position: 0xffff, 0xffff. */
		ap_enc_joined(msg, r->id, (uint16_t)r->nmembers, tick,
			      watch ? 0xffff : p->spawn_x,
			      watch ? 0xffff : p->spawn_y, r->chat_seq);
		if (p->ghost)
			cluster_joined(r, p, msg, sizeof(msg));
		else
			player_reply(p, msg, sizeof(msg));
	}
	r->njoiners = 0;
	send_chats(r, tick);
	send_snapshot(r, tick, ev->now);
	hand_over(r);
	if (r->cl)
		cluster_tick_end(r, tick);

	ADD(a->st.ticks, 1);
	ADD(a->st.ticks_skipped, ev->skipped);
	ao_spin_lock(&a->hist_lock);
	hist_record(&a->late, ev->late_ns > 0 ? (uint64_t)ev->late_ns : 0);
	hist_record(&a->work, now_ns() - t0);
	ao_spin_unlock(&a->hist_lock);
}

/* ------------------------------------------------------------------ */
/* The handlers */

/* A protocol error: its frame, then the close (the handler goes on). */
static int reject(struct player *p, int code)
{
	static const enum arena_close why[AP_ERR_NR] = {
		[AP_ERR_BAD_TYPE] = AC_BAD_TYPE,
		[AP_ERR_MALFORMED] = AC_MALFORMED,
		[AP_ERR_ORDER] = AC_ORDER,
		[AP_ERR_CHAT_LONG] = AC_CHAT_LONG,
		[AP_ERR_FLOOD] = AC_FLOOD,
		[AP_ERR_SERVER_FULL] = AC_SERVER_FULL,
		[AP_ERR_HELLO_TIMEOUT] = AC_HELLO_TIMEOUT,
		[AP_ERR_IDLE] = AC_IDLE,
	};

	close_player(p, why[code], code);
	return 0;
}

/*
 * The hello deadline, then the idle one: a one-shot timer on a worker.
 * A message only stamps last_msg_ns; the timer, when it fires early for
 * that reason, is armed again for the deadline the stamp gives (so the
 * timers are not touched per message).
 */
static void deadline_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct player *p = container_of(t, struct player, timer);
	struct arena *a = p->a;
	uint64_t due;
	int code;

	/* Acquire: pairs with the release store in player_free(). */
	if (__atomic_load_n(&p->timer_dead, __ATOMIC_ACQUIRE) ||
	    LOAD(p->closing))
		return;
	if (!LOAD(p->hello)) {
		code = AP_ERR_HELLO_TIMEOUT;
		due = p->opened_ns + a->o.hello_ns;
	} else if (a->o.idle_ns != ARENA_NEVER) {
		code = AP_ERR_IDLE;
		due = LOAD(p->last_msg_ns) + a->o.idle_ns;
	} else {
		return;
	}
	if (ev->now >= due)
		reject(p, code);
	else
		ao_timer_arm_at(&p->timer, due);
}

static void on_open(struct ao_conn *c, void *arg)
{
	struct arena *a = arg;
	struct player *p = calloc(1, sizeof(*p));
	uint64_t n;

	if (!p) {
		ao_conn_close(c);
		return;
	}
	p->a = a;
	p->conn = ao_conn_get(c);
	ao_spin_init(&p->lock);
	ao_spin_init(&p->send_lock);
	p->state = P_NEW;
	p->opened_ns = ao_timers_now(a->timers);
	ao_timer_init(&p->timer, a->timers, deadline_fn);
	if (a->o.hello_ns != ARENA_NEVER)
		ao_timer_arm_at(&p->timer, p->opened_ns + a->o.hello_ns);
	ao_conn_set_user(c, p);
	n = ADD(a->st.players, 1) + 1;
	/* The peak: only ever raised. */
	for (uint64_t peak = LOAD(a->st.players_peak); n > peak;)
		if (__atomic_compare_exchange_n(&a->st.players_peak, &peak, n,
						true, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			break;
}

/* Bounds what waits on a player for its leave (inputs and chats are
 * bounded by pending too). */
#define DEFERRED_MAX (2 * AP_PENDING_MAX)

static int on_join(struct player *p, uint32_t want, bool watch)
{
	struct event e = { .p = p,
			   .kind = watch ? EV_WATCH : EV_JOIN,
			   .seq = want };
	uint8_t msg[AP_LEN_ERROR];
	struct room *r = NULL;
	int err = 0;

	ao_spin_lock(&p->lock);
	if (p->in && p->state != P_LOBBY) {
		err = AP_ERR_ORDER;
	} else if (p->state == P_LEAVING) {
		/* Joins once the leave is applied (hand_over()). */
		if (p->deferred.n >= DEFERRED_MAX)
			err = AP_ERR_FLOOD;
		else if (inbox_push(&p->deferred, &e))
			abort(); /* see room_push() */
		p->in = true;
	} else {
		r = watch ? lobby_watch(p->a, want, &err) :
			    lobby_pick(p->a, want, &err);
		if (r) {
			p->state = P_ROOM;
			p->room = r;
			if (room_push(r, &e))
				abort(); /* see room_push() */
		}
		/* Refused: in all the same, as the client thinks, until
		 * its next leave; what it sends meanwhile is dropped. */
		p->in = true;
	}
	if (err != AP_ERR_ORDER && err != AP_ERR_FLOOD)
		p->watching = watch;
	ao_spin_unlock(&p->lock);
	if (err == AP_ERR_ORDER || err == AP_ERR_FLOOD)
		return reject(p, err);
	if (err) {
		ap_enc_error(msg, (uint8_t)err);
		player_reply(p, msg, sizeof(msg));
	}
	return 0;
}

/* Input, chat, leave: an event for the player's room, deferred, or
 * dropped (see struct player).  Takes the chat's buffer reference. */
static int to_room(struct player *p, struct event *e)
{
	bool counted = e->kind != EV_LEAVE;
	int err = 0;

	ao_spin_lock(&p->lock);
	if (!p->in || (counted && p->watching)) {
		err = AP_ERR_ORDER;
	} else if (counted && LOAD(p->pending) >= AP_PENDING_MAX) {
		err = AP_ERR_FLOOD;
	} else if (p->state == P_LOBBY) {
		if (e->kind == EV_CHAT)
			ao_buf_put(e->buf);
		ADD(p->a->st.refused_drops, 1);
	} else if (p->state == P_LEAVING && p->deferred.n >= DEFERRED_MAX) {
		err = AP_ERR_FLOOD;
	} else {
		if (counted)
			ADD(p->pending, 1);
		if (p->state == P_LEAVING) {
			if (inbox_push(&p->deferred, e))
				abort(); /* see room_push() */
		} else {
			if (room_push(p->room, e))
				abort(); /* see room_push() */
			if (e->kind == EV_LEAVE)
				p->state = P_LEAVING;
		}
	}
	if (!err && e->kind == EV_LEAVE)
		p->in = false;
	ao_spin_unlock(&p->lock);
	if (!err)
		return 0;
	if (e->kind == EV_CHAT)
		ao_buf_put(e->buf);
	return reject(p, err);
}

/*
 * An ack: the newest snapshot tick the client has read.  It may repeat
 * the last one, never go back, never name a tick not sent to it yet.
 * From the first one on, the rooms hold the connection to its acks
 * (ack_behind()).  The handler runs once at a time per connection.
 */
static int on_ack(struct player *p, uint32_t tick)
{
	uint32_t sent;

	/* Acquire: pairs with the release in send_snapshot(). */
	if (!__atomic_load_n(&p->sent_any, __ATOMIC_ACQUIRE))
		return reject(p, AP_ERR_MALFORMED);
	sent = __atomic_load_n(&p->sent_tick, __ATOMIC_ACQUIRE);
	if ((int32_t)(tick - sent) > 0)
		return reject(p, AP_ERR_MALFORMED);
	if (LOAD(p->acking) && (int32_t)(tick - LOAD(p->acked_tick)) < 0)
		return reject(p, AP_ERR_MALFORMED);
	__atomic_store_n(&p->acked_tick, tick, __ATOMIC_RELAXED);
	/* Release: pairs with the acquire in ack_behind(). */
	__atomic_store_n(&p->acking, 1, __ATOMIC_RELEASE);
	ADD(p->a->st.acks, 1);
	return 0;
}

static int on_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct arena *a = arg;
	struct player *p = ao_conn_user(c);
	uint8_t msg[AP_LEN_WELCOME];
	struct event e = { .p = p };
	struct ap_msg m;
	int r;

	if (!p)
		return -1;
	/* After the arena's close: nothing more is taken, nor counted. */
	if (LOAD(p->closing))
		return 0;
	__atomic_store_n(&p->last_msg_ns, ao_timers_now(a->timers),
			 __ATOMIC_RELAXED);
	r = ap_decode(pkt->data, pkt->len, &m);
	if (!r && !ap_is_client_type(m.type))
		r = AP_ERR_BAD_TYPE;
	if (r)
		return reject(p, r);
	if (!p->hello && m.type != AP_HELLO)
		return reject(p, AP_ERR_ORDER);
	switch (m.type) {
	case AP_HELLO:
		if (p->hello)
			return reject(p, AP_ERR_ORDER);
		if (LOAD(a->st.players) > a->o.max_players)
			return reject(p, AP_ERR_SERVER_FULL);
		/* Its ids may be another node's until it has read the
		 * directory again: go to another node. */
		if (a->cl && !cluster_may_hello(a))
			return reject(p, AP_ERR_SERVER_FULL);
		/* Wraps inside the node's range: never another node's id
		 * (one still in use after id_span more hellos is not
		 * looked for). */
		p->id = a->id_base | (ADD(a->next_id, 1) % a->id_span + 1);
		__atomic_store_n(&p->hello, true, __ATOMIC_RELAXED);
		ao_spin_lock(&p->lock);
		p->state = P_LOBBY;
		ao_spin_unlock(&p->lock);
		/* From now on the idle deadline (the timer re-arms). */
		if (a->o.idle_ns != ARENA_NEVER && a->o.hello_ns == ARENA_NEVER)
			ao_timer_arm_at(&p->timer,
					LOAD(p->last_msg_ns) + a->o.idle_ns);
		ap_enc_welcome(msg, p->id, (uint16_t)a->o.tick_hz,
			       (uint16_t)a->o.room_size, a->world.width,
			       a->world.height, a->world.speed);
		player_reply(p, msg, AP_LEN_WELCOME);
		return 0;
	case AP_PING:
		ap_enc_pong(msg, m.ping.stamp);
		player_reply(p, msg, AP_LEN_PONG);
		return 0;
	case AP_JOIN:
		return on_join(p, m.join.room, false);
	case AP_WATCH:
		return on_join(p, m.watch.room, true);
	case AP_INPUT:
		if (m.input.seq <= p->last_seq)
			return reject(p, AP_ERR_MALFORMED);
		p->last_seq = m.input.seq;
		e.kind = EV_INPUT;
		e.seq = m.input.seq;
		e.dir = m.input.dir;
		return to_room(p, &e);
	case AP_CHAT:
		e.kind = EV_CHAT;
		e.buf = ao_buf_ref(pkt);
		return to_room(p, &e);
	case AP_LEAVE:
		e.kind = EV_LEAVE;
		return to_room(p, &e);
	case AP_ACK:
		return on_ack(p, m.ack.tick);
	}
	return reject(p, AP_ERR_BAD_TYPE);
}

static void on_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	struct player *p = ao_conn_user(c);
	struct event e = { .p = p, .kind = EV_GONE };
	bool in_room;

	(void)arg;
	if (!p)
		return;
	/* The server's own bound on the send queue: a slow consumer too. */
	if (why == AO_CLOSE_SLOW &&
	    !__atomic_exchange_n(&p->closing, 1, __ATOMIC_RELAXED))
		ADD(p->a->st.closes[AC_SLOW], 1);
	ao_spin_lock(&p->lock);
	p->closed = true;
	in_room = p->state == P_ROOM || p->state == P_LEAVING;
	if (in_room && room_push(p->room, &e))
		abort(); /* see room_push() */
	ao_spin_unlock(&p->lock);
	if (!in_room)
		player_free(p);
}

/* ------------------------------------------------------------------ */
/* Life cycle */

struct ao_server *arena_server(const struct arena *a)
{
	return a->srv;
}

struct ao_exec *arena_exec(const struct arena *a)
{
	return a->exec;
}

struct ao_timers *arena_timers(const struct arena *a)
{
	return a->timers;
}

uint64_t arena_period_ns(const struct arena *a)
{
	return a->period;
}

void arena_stats(struct arena *a, struct arena_stats *st)
{
	uint64_t in_rooms = 0;
	struct hist *h = malloc(sizeof(*h));
	uint32_t i;

	for (i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
		((uint64_t *)st)[i] = LOAD(((uint64_t *)&a->st)[i]);
	ao_spin_lock(&a->lobby);
	for (i = 0; i < a->nrooms; i++)
		in_rooms +=
			__atomic_load_n(&a->rooms[i]->count, __ATOMIC_RELAXED);
	ao_spin_unlock(&a->lobby);
	st->consistent = in_rooms == st->in_rooms;
	if (!h)
		return;
	ao_spin_lock(&a->hist_lock);
	memcpy(h, &a->late, sizeof(*h));
	ao_spin_unlock(&a->hist_lock);
	st->late_p50_ns = hist_percentile(h, 50);
	st->late_p99_ns = hist_percentile(h, 99);
	st->late_max_ns = h->total ? h->max : 0;
	ao_spin_lock(&a->hist_lock);
	memcpy(h, &a->work, sizeof(*h));
	ao_spin_unlock(&a->hist_lock);
	st->work_p50_ns = hist_percentile(h, 50);
	st->work_p99_ns = hist_percentile(h, 99);
	st->work_max_ns = h->total ? h->max : 0;
	free(h);
}

void arena_reset_ticks(struct arena *a)
{
	ao_spin_lock(&a->hist_lock);
	hist_init(&a->late);
	hist_init(&a->work);
	ao_spin_unlock(&a->hist_lock);
}

void arena_late_hist(struct arena *a, struct hist *h)
{
	ao_spin_lock(&a->hist_lock);
	memcpy(h, &a->late, sizeof(*h));
	ao_spin_unlock(&a->hist_lock);
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "ao-arena: %s: %s\n", what, strerror(-err));
	return err;
}

static const char *const ws_protocols[] = { ARENA_WS_PROTOCOL, NULL };

int arena_start(const struct arena_opts *o, struct arena **out)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct ao_server_config sc = AO_SERVER_CONFIG_INIT;
	struct ao_bufpool_params pp = { 0 };
	struct ap_world world = AP_WORLD_DEFAULT;
	struct arena *a = calloc(1, sizeof(*a));
	int err;

	if (!a)
		return -ENOMEM;
	a->o = *o;
	if (!a->o.tick_hz)
		a->o.tick_hz = 20;
	if (!a->o.room_size)
		a->o.room_size = 50;
	if (!a->o.max_players)
		a->o.max_players = 10000;
	if (!a->o.stall_ns)
		a->o.stall_ns = 2 * NS;
	if (!a->o.hello_ns)
		a->o.hello_ns = 5 * NS;
	if (!a->o.idle_ns)
		a->o.idle_ns = 30 * NS;
	if (!a->o.buffers) /* a copy per member needs many more */
		a->o.buffers =
			(a->o.copy_broadcast ? 16 : 4) * a->o.max_players +
			1024;
	if (a->o.buffers > AO_BUFPOOL_MAX_COUNT)
		a->o.buffers = AO_BUFPOOL_MAX_COUNT;
	a->world = world;
	/* A period the timers keep exactly (a multiple of their unit). */
	a->period =
		NS / a->o.tick_hz / AO_TIMER_PERIOD_UNIT * AO_TIMER_PERIOD_UNIT;
	a->buf_size = ap_snapshot_len(a->o.room_size);
	if (a->buf_size < AP_CLIENT_MAX)
		a->buf_size = AP_CLIENT_MAX;
	ao_spin_init(&a->lobby);
	ao_spin_init(&a->hist_lock);
	hist_init(&a->late);
	hist_init(&a->work);

	ec.kind = AO_EXEC_STEAL;
	ec.workers = a->o.workers;
	ec.spin_ns = a->o.spin_ns;
	ec.name = "ao-w";
	err = ao_exec_create(&ec, &a->exec);
	if (err)
		return fail("cannot create the executor", err);
	tc.exec = a->exec;
	tc.test_clock = a->o.test_clock;
	tc.test_start_ns = NS;
	err = ao_timers_create(&tc, &a->timers);
	if (err)
		return fail("cannot create the timers", err);
	a->base = ao_timers_now(a->timers);
	a->id_span = UINT32_MAX;
	pp.buf_size = a->buf_size;
	pp.count = a->o.buffers;
	/* Room for a WebSocket frame's header before each payload: a
	 * snapshot goes to WebSocket members framed once, by reference. */
	pp.headroom = 16;
	err = ao_bufpool_create(&a->pool, &pp);
	if (err)
		return fail("cannot create the buffer pool", err);

	sc.address = a->o.address;
	sc.port = a->o.port;
	sc.rings = a->o.rings;
	sc.backend = a->o.backend;
	sc.exec = a->exec;
	sc.pool = a->pool;
	sc.framing.kind = AO_FRAME_LEN16;
	sc.framing.order = AO_ORDER_LITTLE;
	sc.framing.max_packet = AP_CLIENT_MAX;
	sc.max_conns = a->o.max_players + 64;
	/* What one connection may have queued (PROTOCOL.md says 4 MiB): one
	 * snapshot at most (the next is skipped meanwhile), replies, and the
	 * chat lines, which are never dropped: past it, closed as slow. */
	sc.sendq_max = 4u << 20;
	sc.drain_timeout_ms =
		a->o.drain_ns ? (uint32_t)(a->o.drain_ns / 1000000) : 0;
	sc.sock_sndbuf = a->o.sndbuf;
	sc.flags = AO_SERVER_QUIET;
	if (a->o.ring_handlers)
		sc.flags |= AO_SERVER_RING_HANDLERS;
	sc.handlers.on_open = on_open;
	sc.handlers.on_packet = on_packet;
	sc.handlers.on_close = on_close;
	sc.handlers.on_http = arena_on_http;
	sc.handlers.arg = a;
	/* WebSocket and HTTP on the same port: a len16 frame of at most
	 * 256 bytes never starts with a method's two upper-case letters
	 * (0x4141 or more as a length). */
	sc.flags |= AO_SERVER_HTTP;
	sc.ws.protocols = ws_protocols;
	sc.ws.origins = a->o.origins;
	/* A connection that has sent nothing yet is neither a player nor
	 * a request: the io closes it at the hello deadline, without an
	 * error message (it may be an HTTP client).  Never: io's 5 s. */
	if (a->o.hello_ns != ARENA_NEVER && !a->o.test_clock)
		sc.ws.header_timeout_ms =
			(uint32_t)((a->o.hello_ns + 999999) / 1000000);
	err = ao_server_create(&sc, &a->srv);
	if (err)
		return fail("cannot create the server", err);
	*out = a;
	return a->o.defer_listen ? 0 : arena_listen(a);
}

int arena_listen(struct arena *a)
{
	int err = ao_server_start(a->srv);

	if (err)
		fprintf(stderr, "ao-arena: cannot listen on %s port %u: %s\n",
			a->o.address ? a->o.address : "127.0.0.1", a->o.port,
			strerror(-err));
	return err;
}

struct stopper {
	struct ao_server *srv;
	int err;
	int done; /* atomic */
};

static void *stop_server(void *arg)
{
	struct stopper *st = arg;

	st->err = ao_server_stop(st->srv);
	__atomic_store_n(&st->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* With the ticks stopped, the rooms' strands are idle: apply what the
 * handlers queue from here on this thread (every event, joins and
 * disconnects alike: no player is left in a room). */
static void apply_all(struct arena *a)
{
	uint32_t i, n;

	ao_spin_lock(&a->lobby);
	n = a->nrooms;
	ao_spin_unlock(&a->lobby);
	for (i = 0; i < n; i++) {
		struct room *r = a->rooms[i];

		apply_events(r, UINT32_MAX, true);
		r->njoiners = 0;
		hand_over(r);
	}
}

int arena_stop(struct arena *a)
{
	struct stopper st = { .srv = a->srv };
	pthread_t tid;
	uint32_t i;

	/*
	 * The ticks stop first.  The server's stop closes every connection
	 * and waits for each to be freed, which takes its player's
	 * reference, given back when its disconnect is applied: this thread
	 * applies them meanwhile (the server stops on another one).
	 */
	ao_spin_lock(&a->lobby);
	a->stopping = true;
	ao_spin_unlock(&a->lobby);
	for (i = 0; i < a->nrooms; i++)
		ao_timer_cancel_sync(&a->rooms[i]->tick);
	ao_exec_drain(a->exec);
	if (pthread_create(&tid, NULL, stop_server, &st)) {
		st.err = -EAGAIN;
		return st.err;
	}
	while (!__atomic_load_n(&st.done, __ATOMIC_ACQUIRE)) {
		struct timespec ts = { .tv_nsec = 1000000 };

		apply_all(a);
		nanosleep(&ts, NULL);
	}
	pthread_join(tid, NULL);
	apply_all(a);
	if (a->cl)
		cluster_drop_ghosts(a);
	/* Chat lines a tick could not send for want of a buffer. */
	for (i = 0; i < a->nrooms; i++) {
		struct room *r = a->rooms[i];

		while (r->nchats)
			ao_buf_put(r->chats[--r->nchats].buf);
	}
	return st.err;
}

static void room_free(struct room *r)
{
	ao_strand_destroy(&r->strand);
	free(r->in.ev);
	free(r->chats);
	room_free_bare(r);
}

int arena_destroy(struct arena *a)
{
	int err = 0;
	uint32_t i;

	if (a->srv) {
		err = ao_server_destroy(a->srv);
		if (err)
			return err;
	}
	if (a->timers)
		ao_timers_destroy(a->timers, NULL);
	if (a->exec)
		ao_exec_destroy(a->exec);
	for (i = 0; i < a->nrooms; i++)
		room_free(a->rooms[i]);
	while (a->spare) {
		struct room *r = a->spare;

		a->spare = r->spare_next;
		room_free(r);
	}
	free(a->rooms);
	if (a->pool && ao_bufpool_destroy(a->pool))
		err = -EBUSY;
	free(a);
	return err;
}
