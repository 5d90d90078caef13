/* SPDX-License-Identifier: MIT */
/*
 * ao-arena across nodes (--nats URL --node NAME): the hooks room.c calls
 * and what arena.c starts, stops and reports.  cluster.c says how it
 * works.  Built only when nats.h is present (ARENA_CLUSTER); without it
 * the hooks are never called (a->cl stays NULL).
 */
#ifndef AO_ARENA_CLUSTER_H
#define AO_ARENA_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

struct arena;
struct room;
struct player;
struct ao_buf;

struct cluster_opts {
	const char *url; /* NATS url */
	const char *node; /* this node's name */
	uint32_t fence_ms; /* stop ticking when the own heartbeat is older;
			    * 0: 700 ms */
	bool cnats_reader; /* subscriptions read by cnats' threads, not
			    * by the node's own reader */
};

struct cluster_stats {
	uint64_t msgs_in, bytes_in, msgs_out, bytes_out;
	uint64_t pub_dropped, in_dropped;
	uint64_t requests, timeouts, no_responders;
	uint64_t disconnects, reconnects;
	uint64_t peers, peers_down;
	uint64_t rooms_owned, proxies;
	uint64_t forwarded; /* players' joins forwarded to other owners */
	uint64_t ghosts; /* joins of other nodes' players applied here */
	uint64_t stale; /* bus messages for a room given away: dropped */
	uint64_t room_lost; /* room_lost errors sent */
	uint64_t takeovers; /* rooms won from a dead node */
	uint64_t evicted; /* rooms found given away after a stall */
	uint64_t fenced_ticks; /* ticks not run: no fresh own heartbeat */
	uint64_t rooms_lost; /* lost rooms still held: draining what their
			      * players send, or not given up yet */
	uint64_t reclaimed; /* lost rooms given up, kept as spare rooms */
	uint64_t rooms_spare; /* spare rooms now, for the next ones made */
	uint64_t snaps_out; /* snapshot messages published: one per room
			     * with other nodes' players and tick */
	uint64_t snaps_in; /* snapshot messages received: one per room of
			    * another node with players here and tick */
	uint64_t kv_ops, kv_conflicts, kv_errors;
	bool connected;
};

/* Join the cluster: node, directory, cluster-wide tick numbers and
 * player ids.  Before any player joins.  0 or a negative errno. */
int cluster_start(struct arena *a, const struct cluster_opts *o);
/* Leave the bus (after arena_stop's ticks stopped); frees the others'
 * players kept here. */
void cluster_stop(struct arena *a);
void cluster_destroy(struct arena *a);
void cluster_stats(struct arena *a, struct cluster_stats *st);

/* Hooks of room.c (a->cl set). */
/* A join's room under the lobby lock: own, another node's (a proxy), or
 * NULL with *err. */
struct room *cluster_pick(struct arena *a, uint32_t want, int *err);
/* At a room's tick, first: true when the cluster ran it (a proxy, a lost
 * room, or no tick: fenced). */
bool cluster_tick(struct room *r, uint32_t tick, uint64_t now);
/* An input or chat line pushed to a proxy's inbox (any room with r->cl). */
void cluster_pushed(struct room *r);
/* The owner's tick: what goes to the other nodes' players. */
void cluster_joined(struct room *r, struct player *p, const uint8_t *msg,
		    size_t len);
void cluster_chat(struct room *r, struct ao_buf *line);
void cluster_snap(struct room *r, struct ao_buf *snap);
void cluster_left(struct room *r, struct player *p);
void cluster_tick_end(struct room *r, uint32_t tick);
/* May a hello get a player id now: not while this node cannot show that
 * its index is still its own (fenced until a re-read, or stood still). */
bool cluster_may_hello(struct arena *a);
/* A ghost (another node's player) freed. */
void cluster_ghost_free(struct player *p);
/* arena_stop: remove the other nodes' players from the rooms. */
void cluster_drop_ghosts(struct arena *a);

#endif /* AO_ARENA_CLUSTER_H */
