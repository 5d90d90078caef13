// SPDX-License-Identifier: MIT
/*
 * ao-arena across nodes: several ao-arena processes ("nodes") share the
 * rooms over a NATS bus (libaorta-cluster, <aorta/cluster/node.h>), with
 * a directory in JetStream KV that only compare-and-set writes.
 *
 * Who owns what.  Every room has one owner node, which alone ticks it.
 * The directory bucket AO_ARENA holds:
 *
 *   t0            the cluster's start, CLOCK_REALTIME ns (create-if-absent
 *                 by the first node): tick t of every room of every node
 *                 is due t periods after it, so tick numbers are the
 *                 same everywhere and a player moving between rooms of
 *                 different nodes never sees a tick twice or going back.
 *   node.<k>      "<name> <boot epoch>": the first free k in 1..255 is this
 *                 node's index (create-if-absent); with none free, the
 *                 first whose node is not live (update at the revision
 *                 read, after listening to the heartbeats: see
 *                 reuse_index()); a node that finds its own taken on a
 *                 re-read stops.  Player ids are
 *                 k << 24 | a counter, room ids a node makes are
 *                 k << 16 | a counter: unique across the cluster without
 *                 asking anybody at a join.  t0 and node.<k> are written
 *                 back by their nodes after a nats-server restart (the
 *                 bucket is in memory storage), room.<id> by the owners.
 *   room.<id>     "<owner> <owner's boot epoch> <room epoch>": written by
 *                 the owner at creation (create-if-absent) and by a node
 *                 taking it over from a dead owner (update at the
 *                 revision read: exactly one winner), with the room epoch
 *                 one higher.
 *
 * Subjects (the bus):
 *
 *   ao.hb.*            heartbeats (the cluster layer: the peer table, its
 *                      load is this node's players in its own rooms);
 *   ao.census          every 200 ms each node's own rooms: id, epoch,
 *                      seats taken; every node keeps the others' census
 *                      as its cache of the directory (a join never waits
 *                      for the bus to find its room);
 *   ao.node.<n>.in     a gateway's messages for the rooms n owns: per room
 *                      and per tick of the gateway ONE message with every
 *                      join, input, chat, leave and disconnect its players
 *                      sent meanwhile, in order (header: room, epoch), and
 *                      what comes between that tick and the owner's at
 *                      once (cluster_pushed());
 *   ao.node.<n>.create request: "make room <id>" (a new room placed on the
 *                      least loaded live node); no-responders at once when
 *                      n is gone;
 *   ao.room.<id>.<epoch>.out
 *                      the owner's tick, published only while the room has
 *                      members on other nodes: first a control message
 *                      (joined and refusals of other nodes' players, the
 *                      chat lines in their order, who left), then the
 *                      snapshot itself, byte for byte the one the owner's
 *                      own members get, so a gateway sends the buffer it
 *                      received to its members by reference: one bus
 *                      message per room, tick and subscribed node.  The
 *                      epoch in the subject means that a gateway never
 *                      hears two owners of one room.
 *
 * Gateway mode.  A player plays on the connection it has, whatever node
 * owns its room.  On its node the room is a proxy: a struct room whose
 * inbox takes the player's events exactly as a local room's (so the
 * protocol's order rules hold unchanged, room.c) and whose tick sends
 * them on instead of applying them.  On the owner, the player is a ghost:
 * a struct player without a connection, in the room as any member, whose
 * events the owner applies at its tick as local ones (so prediction and
 * chat order hold through a remote room: chat lines go through the owner,
 * which numbers them once for every node).
 *
 * Failures.
 *  - A node dies (kill -9): the cluster layer declares it dead after
 *    dead_ms (600 ms) without heartbeats, a create request to it fails at
 *    once (no-responders).  Every live node then tries, for each room the
 *    dead node had in its census, to update room.<id> at the revision it
 *    read (if it still names the dead node): one wins and re-creates the
 *    room empty, epoch + 1.  Players in it on other nodes get the error
 *    room_lost (11) and may join again; the dead node's own players see
 *    their connection close and reconnect elsewhere (ao-bots does).
 *  - A node stalls (SIGSTOP): before each tick of an own room the node
 *    checks that a heartbeat of its own came back within fence_ms
 *    (ao_node_self_fresh()) and that the room's previous tick ran less
 *    than fence_ms ago (after a stall, a heartbeat sent since may come
 *    back before the first tick runs); if not, it ticks no room (counted)
 *    until it has re-read room.<id> of each room it owns; a room the
 *    directory gives to another node (or another epoch) is lost: its
 *    players get room_lost, others' players are dropped.  A message
 *    for a room whose epoch is not the one this node owns is dropped
 *    and counted (stale).
 *  - The bus is down (nats-server restarted): own rooms keep ticking
 *    (no other node can take them over meanwhile: nobody can write the
 *    directory); proxies are lost at once (room_lost: a clear error, not
 *    a queue), joins of rooms of other nodes are refused with room_lost;
 *    publishes fail at once past the cluster layer's bounded buffer.  When
 *    the bus is back the node re-creates its keys (the bucket is in memory
 *    storage: it did not survive) from what it owns.
 *
 * A lost room (any of the above) ticks on to drain what its players
 * still send.  Idle for two seconds and out of reach of every player and
 * bus message, it is given up (lost_reclaim()): its croom is freed and
 * its struct room goes to a spare list that the next room made here
 * takes from (room_spare() says why not to free()).  So the rooms a
 * node holds are bounded by the most it had at once, not by how many
 * failovers it saw.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <aorta/cluster/kv.h>
#include <aorta/cluster/node.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include "cluster.h"
#include "room.h"

#define NS 1000000000ull
#define MS 1000000ull
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)
#define SUB(x, n) __atomic_fetch_sub(&(x), (n), __ATOMIC_RELAXED)

#define BUCKET "AO_ARENA"
#define CENSUS_MS 200
#define CREATE_TIMEOUT_MS 500
#define BUS_BUF 8192u /* a bus message at most (split above) */
#define BUS_BUFS 4096u
#define GHOST_BUCKETS 4096u
/* A proxy forwards its players' messages this long before the owner's
 * tick (the bus's hop, with room to spare). */
#define LEAD_NS (3 * MS)
/* A lost room ticks on to drain what its players still push; once its
 * inbox stayed empty for this many ticks it is given up as soon as
 * nothing can reach it (lost_reclaim()), and meanwhile ticks once a
 * second. */
#define DEAD_IDLE_TICKS 40
#define DEAD_PERIOD_NS NS

/* Bus message kinds (first byte; a snapshot starts with AP_SNAPSHOT). */
#define M_IN 0xc1 /* gateway -> owner: u32 room, u32 epoch, records */
#define M_CTL 0xc0 /* owner -> gateways: u32 room, u32 epoch, u32 tick */
#define M_CENSUS 0xce

/* Records: in M_IN  'J' pid last_tick has_tick, 'I' pid seq dir,
 * 'C' pid len text, 'L' pid, 'G' pid;
 * in M_CTL 'J' pid joined(19), 'E' pid code, 'C' len16 chat line,
 * 'L' pid, 'X' pid (its ghost dropped: its node was declared dead). */

struct vec {
	uint8_t *p;
	size_t n, cap;
};

struct pvec {
	struct player **p;
	uint32_t n, cap;
};

struct croom {
	struct cluster *c;
	struct room *r;
	uint32_t id, epoch;
	bool proxy;
	char owner[AO_NODE_NAME_MAX];
	uint64_t owner_epoch;
	int ready; /* atomic: a proxy's owner has the room */
	uint32_t owner_off; /* atomic: a proxy's owner's tick offset (ns) */
	int kick; /* atomic: a proxy's forward is queued on its strand */
	/* A proxy's: the tick whose control message set its members'
	 * stalled flags (before its lines and joined were sent). */
	uint32_t stall_tick;
	bool stall_set;
	int lost; /* atomic: the room is gone here (room_lost) */
	bool dead; /* its lost players were told (its strand) */
	uint32_t idle_drains; /* ticks since a dead room's inbox held any */
	int creating; /* atomic: a proxy's create request is out (its
		       * answer, on_created(), runs on the room's strand) */
	uint32_t ghosts_live; /* atomic: ghosts made for it, not freed */
	struct ao_work reclaim; /* lost_reclaim(), on the room's strand */
	struct ao_sub *sub; /* a proxy's out subject */
	uint32_t census_fill; /* seats taken, as the last census told */
	uint32_t since_census; /* picked here since (any room: a share) */
	/* A proxy's players, on its strand: joins sent, and leaves sent. */
	struct pvec joining, leaving;
	/* The owner's: records for the next control message. */
	struct ao_spinlock lock;
	struct vec pend; /* from the in handler (refusals), under lock */
	struct vec out; /* the room's strand */
	struct ao_buf *snap;
	bool ghosts; /* this tick had members of other nodes */
	uint32_t ghost_gen; /* the bus generation its ghosts belong to */
	uint32_t dead_gen; /* the deaths its ghosts were checked against */
	uint64_t last_tick_ns; /* when its previous tick ran (its strand) */
};

struct centry {
	uint32_t id, epoch, fill;
	uint32_t offset; /* its ticks' offset in the period (ns) */
	char owner[AO_NODE_NAME_MAX];
};

struct gnode {
	uint32_t pid;
	struct player *p;
	struct gnode *next;
};

struct cl_count {
	uint64_t forwarded, ghosts, stale, room_lost, takeovers, evicted;
	uint64_t fenced_ticks;
	uint64_t reclaimed; /* lost rooms given up (lost_reclaim()) */
	uint64_t snaps_out; /* snapshots published (one per room and tick) */
	uint64_t snaps_in; /* snapshots received (one per proxy and tick) */
};

struct cluster {
	struct arena *a;
	struct cluster_opts o;
	struct ao_node *node;
	struct ao_bufpool *pool;
	struct ao_kv *dir;
	struct ao_strand strand;
	struct ao_timer census;
	struct ao_sub *sub_in, *sub_census, *sub_create;
	char name[AO_NODE_NAME_MAX];
	uint64_t epoch;
	uint32_t idx;
	uint32_t next_room; /* atomic */
	int rooms_spent; /* atomic: said that the room ids ran out */
	uint32_t nnodes; /* live nodes, this one too (under a->lobby) */
	/* Nodes that did not answer a create (no-responders, timeout): no
	 * new room goes to them for a while (under a->lobby). */
	struct {
		char name[AO_NODE_NAME_MAX];
		uint64_t until;
	} suspect[8];
	/* Under a->lobby. */
	struct croom **rooms;
	uint32_t nrooms, cap_rooms;
	struct centry *cen;
	uint32_t ncen, cap_cen;
	/* Ghosts. */
	struct ao_spinlock glock;
	struct gnode *ghosts[GHOST_BUCKETS];
	/* Fencing. */
	int fenced; /* atomic */
	uint32_t reread; /* the strand's: answers awaited */
	uint32_t bus_gen; /* atomic: one more at each loss of the bus */
	/* Dead nodes' indexes: their players' ghosts leave the rooms. */
	char idx_name[256][AO_NODE_NAME_MAX]; /* under a->lobby */
	uint8_t dead_idx[256]; /* atomic flags */
	uint32_t dead_gen; /* atomic: one more at each death */
	pthread_t restorer;
	bool restoring;
	char t0_val[AO_NODE_NAME_MAX + 48]; /* the directory's t0, as read */
	int idx_lost; /* atomic: said that another node took its index */
	struct cl_count n;
	char *subject_in;
};

/* ------------------------------------------------------------------ */
/* Little helpers */

static int vec_put(struct vec *v, const void *p, size_t n)
{
	if (v->n + n > v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 256;
		uint8_t *q;

		while (cap < v->n + n)
			cap *= 2;
		q = realloc(v->p, cap);
		if (!q)
			return -ENOMEM;
		v->p = q;
		v->cap = cap;
	}
	memcpy(v->p + v->n, p, n);
	v->n += n;
	return 0;
}

static void put8(struct vec *v, uint8_t x)
{
	vec_put(v, &x, 1);
}

static void put32(struct vec *v, uint32_t x)
{
	uint8_t b[4] = { (uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16),
			 (uint8_t)(x >> 24) };

	vec_put(v, b, 4);
}

static void put16(struct vec *v, uint16_t x)
{
	uint8_t b[2] = { (uint8_t)x, (uint8_t)(x >> 8) };

	vec_put(v, b, 2);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int pvec_add(struct pvec *v, struct player *p)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? 2 * v->cap : 16;
		struct player **q = realloc(v->p, cap * sizeof(*q));

		if (!q)
			return -ENOMEM;
		v->p = q;
		v->cap = cap;
	}
	v->p[v->n++] = p;
	return 0;
}

static bool pvec_del(struct pvec *v, struct player *p)
{
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->p[i] == p) {
			v->p[i] = v->p[--v->n];
			return true;
		}
	}
	return false;
}

static struct player *pvec_find(struct pvec *v, uint32_t pid)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->p[i]->id == pid)
			return v->p[i];
	return NULL;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static void send_error(struct player *p, int code)
{
	uint8_t msg[AP_LEN_ERROR];

	ap_enc_error(msg, (uint8_t)code);
	player_reply(p, msg, sizeof(msg));
}

/* ------------------------------------------------------------------ */
/* The room table (under a->lobby) */

static struct croom *find_room(struct cluster *c, uint32_t id)
{
	for (uint32_t i = 0; i < c->nrooms; i++)
		if (c->rooms[i]->id == id)
			return c->rooms[i];
	return NULL;
}

static void unlist_room(struct cluster *c, struct croom *cr)
{
	for (uint32_t i = 0; i < c->nrooms; i++) {
		if (c->rooms[i] == cr) {
			c->rooms[i] = c->rooms[--c->nrooms];
			return;
		}
	}
}

static struct centry *find_cen(struct cluster *c, uint32_t id)
{
	for (uint32_t i = 0; i < c->ncen; i++)
		if (c->cen[i].id == id)
			return &c->cen[i];
	return NULL;
}

/* A room here (own or proxy), under the lobby lock. */
static struct croom *add_room(struct cluster *c, uint32_t id, uint32_t epoch,
			      const char *owner, bool proxy)
{
	struct arena *a = c->a;
	struct croom *cr = calloc(1, sizeof(*cr));
	struct room *r;

	if (!cr)
		return NULL;
	if (c->nrooms == c->cap_rooms) {
		uint32_t cap = c->cap_rooms ? 2 * c->cap_rooms : 16;
		struct croom **q = realloc(c->rooms, cap * sizeof(*q));

		if (!q) {
			free(cr);
			return NULL;
		}
		c->rooms = q;
		c->cap_rooms = cap;
	}
	cr->c = c;
	cr->id = id;
	cr->epoch = epoch;
	cr->proxy = proxy;
	cr->ready = !proxy;
	snprintf(cr->owner, sizeof(cr->owner), "%s", owner);
	ao_spin_init(&cr->lock);
	cr->ghost_gen = LOAD(c->bus_gen);
	cr->dead_gen = LOAD(c->dead_gen);
	r = room_new(a, id, cr);
	if (!r) {
		free(cr);
		return NULL;
	}
	cr->r = r;
	if (proxy) /* not an own room: not counted as one */
		SUB(a->st.rooms, 1);
	c->rooms[c->nrooms++] = cr;
	/* Armed once all of it is set: the tick reads it.  A proxy is
	 * armed by its caller, in its owner's phase when known. */
	if (!proxy)
		room_arm(r);
	return cr;
}

static void croom_free(struct croom *cr)
{
	if (cr->snap)
		ao_buf_put(cr->snap);
	free(cr->out.p);
	free(cr->pend.p);
	free(cr->joining.p);
	free(cr->leaving.p);
	free(cr);
}

/* An own room's ticks: their offset in the period. */
static uint32_t room_offset(struct room *r)
{
	struct arena *a = r->a;

	return (uint32_t)((ao_timer_expires(&r->tick) - a->base) % a->period);
}

/*
 * A proxy ticks (forwards) LEAD_NS before its owner's room does, so that
 * an input waits for one tick of the owner, not for one of the proxy and
 * then one of the owner.  On the proxy's strand, or before it ticks.
 */
static void align_proxy(struct croom *cr, uint32_t owner_offset)
{
	struct room *r = cr->r;
	struct arena *a = r->a;
	uint64_t now = ao_timers_now(a->timers), k, off;

	__atomic_store_n(&cr->owner_off, owner_offset, __ATOMIC_RELAXED);
	off = (owner_offset + a->period - LEAD_NS % a->period) % a->period;
	k = (now - a->base) / a->period + 1;
	ao_timer_cancel(&r->tick);
	ao_timer_arm_periodic(&r->tick, a->base + k * a->period + off,
			      a->period, 0);
}

static void dir_value(struct cluster *c, uint32_t repoch, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s %" PRIu64 " %u", c->name, c->epoch, repoch);
}

static void on_kv_done(int err, const struct ao_kv_entry *e, void *arg)
{
	(void)e;
	(void)arg;
	(void)err;
}

/* Write room.<id> for an own room at epoch (create-if-absent). */
static void dir_claim(struct cluster *c, uint32_t id, uint32_t epoch)
{
	char key[32], val[AO_NODE_NAME_MAX + 48];

	snprintf(key, sizeof(key), "room.%u", id);
	dir_value(c, epoch, val, sizeof(val));
	ao_kv_create(c->dir, key, val, strlen(val), &c->strand, on_kv_done,
		     NULL);
}

/* ------------------------------------------------------------------ */
/* Picking a room (a join, on the handler's thread, under a->lobby) */

static uint64_t own_load(struct cluster *c)
{
	uint64_t load = 0;

	for (uint32_t i = 0; i < c->nrooms; i++)
		if (!c->rooms[i]->proxy)
			load += c->rooms[i]->r->reserved;
	return load;
}

static bool suspect(struct cluster *c, const char *name, uint64_t now)
{
	for (unsigned int i = 0; i < 8; i++)
		if (c->suspect[i].until > now &&
		    !strcmp(c->suspect[i].name, name))
			return true;
	return false;
}

static void on_created(int err, struct ao_msg *m, void *arg)
{
	struct croom *cr = arg;
	struct cluster *c = cr->c;
	unsigned int i, old = 0;

	/* On the room's strand, as lost_reclaim(): it finds this done. */
	__atomic_store_n(&cr->creating, 0, __ATOMIC_RELEASE);
	if (!err && m->len >= 1 && ((const uint8_t *)m->data)[0] == 0) {
		if (m->len >= 5)
			align_proxy(cr, get32((const uint8_t *)m->data + 1));
		__atomic_store_n(&cr->ready, 1, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
	if (err != -EHOSTUNREACH && err != -ETIMEDOUT)
		return;
	ao_spin_lock(&c->a->lobby);
	for (i = 1; i < 8; i++)
		if (c->suspect[i].until < c->suspect[old].until)
			old = i;
	snprintf(c->suspect[old].name, sizeof(c->suspect[old].name), "%s",
		 cr->owner);
	c->suspect[old].until = real_ns() + 2 * NS;
	ao_spin_unlock(&c->a->lobby);
}

static void on_out(struct ao_msg *m, void *arg);

static int proxy_subscribe(struct cluster *c, struct croom *cr)
{
	char subj[64];

	snprintf(subj, sizeof(subj), "ao.room.%u.%u.out", cr->id, cr->epoch);
	return ao_node_subscribe(c->node, subj, NULL, &cr->r->strand, on_out,
				 cr, &cr->sub);
}

/* A new room: here, or on the least loaded live node (a proxy whose
 * owner is asked to make it). */
static struct room *new_room(struct cluster *c, int *err)
{
	struct ao_peer peers[64];
	size_t n = ao_node_peers(c->node, peers, 64), i, best = SIZE_MAX;
	uint64_t load = own_load(c);
	uint32_t n_room = ADD(c->next_room, 1) + 1;
	uint32_t id = c->idx << 16 | n_room;
	struct croom *cr;
	uint8_t req[4];

	/* 16 bits of a room id are the node's counter: past them the id
	 * would be another node's.  An id is never reused either (a room
	 * lost here may run on elsewhere under it): the node makes no more
	 * rooms. */
	if (n_room > 0xffff) {
		SUB(c->next_room, 1);
		if (!__atomic_exchange_n(&c->rooms_spent, 1, __ATOMIC_RELAXED))
			fprintf(stderr,
				"ao-arena: node %s made 65,535 rooms, all its "
				"room ids: it makes no more (joins find "
				"rooms with a place, or server_full)\n",
				c->name);
		*err = AP_ERR_SERVER_FULL;
		return NULL;
	}
	if (n > 64)
		n = 64;
	for (i = 0; i < n; i++) {
		if (peers[i].load < load &&
		    !suspect(c, peers[i].name, real_ns())) {
			load = peers[i].load;
			best = i;
		}
	}
	if (best == SIZE_MAX || !ao_node_connected(c->node)) {
		cr = add_room(c, id, 1, c->name, false);
		if (!cr) {
			*err = AP_ERR_SERVER_FULL;
			return NULL;
		}
		dir_claim(c, cr->id, cr->epoch);
		cr->r->reserved++;
		return cr->r;
	}
	cr = add_room(c, id, 1, peers[best].name, true);
	if (!cr) {
		*err = AP_ERR_SERVER_FULL;
		return NULL;
	}
	cr->owner_epoch = peers[best].epoch;
	cr->census_fill = 0;
	room_arm(cr->r);
	req[0] = (uint8_t)id;
	req[1] = (uint8_t)(id >> 8);
	req[2] = (uint8_t)(id >> 16);
	req[3] = (uint8_t)(id >> 24);
	if (proxy_subscribe(c, cr)) {
		__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
	} else {
		char subj[AO_SUBJECT_MAX];

		snprintf(subj, sizeof(subj), "ao.node.%s.create", cr->owner);
		__atomic_store_n(&cr->creating, 1, __ATOMIC_RELEASE);
		if (ao_node_request(c->node, subj, req, 4, CREATE_TIMEOUT_MS,
				    &cr->r->strand, on_created, cr)) {
			__atomic_store_n(&cr->creating, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
		}
	}
	cr->r->reserved++;
	return cr->r;
}

/* A proxy for another node's room the census told of. */
static struct croom *proxy_for(struct cluster *c, struct centry *e)
{
	struct croom *cr;

	if (!ao_node_connected(c->node))
		return NULL;
	cr = add_room(c, e->id, e->epoch, e->owner, true);
	if (!cr)
		return NULL;
	cr->census_fill = e->fill;
	/* Before its tick is armed: the tick reads it. */
	cr->ready = 1;
	align_proxy(cr, e->offset);
	if (proxy_subscribe(c, cr)) {
		unlist_room(c, cr);
		__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
		return NULL;
	}
	return cr;
}

/*
 * Whether a join of any room may take a place in cr.  Between two
 * censuses each of the n live nodes takes at most its share of the
 * places the last census showed free, so that together they never
 * overfill a room whose owner has not told them yet (a join the owner
 * refuses is room_full to the player).
 */
static bool has_share(struct cluster *c, struct croom *cr, uint32_t size)
{
	uint32_t fill = cr->census_fill, n = c->nnodes ? c->nnodes : 1;

	if (cr->r->reserved >= size || fill >= size)
		return false;
	return cr->since_census < (size - fill) / n;
}

struct room *cluster_pick(struct arena *a, uint32_t want, int *err)
{
	struct cluster *c = a->cl;
	uint32_t size = a->o.room_size, i, best = UINT32_MAX;
	struct croom *cr;
	struct centry *e;

	if (want != AP_ROOM_ANY) {
		cr = find_room(c, want);
		if (!cr || LOAD(cr->lost)) {
			e = find_cen(c, want);
			cr = e ? proxy_for(c, e) : NULL;
			if (!cr) {
				*err = e ? AP_ERR_ROOM_LOST : AP_ERR_NO_ROOM;
				return NULL;
			}
		}
		if (cr->r->reserved >= size) {
			*err = AP_ERR_ROOM_FULL;
			return NULL;
		}
		if (cr->proxy)
			ADD(c->n.forwarded, 1);
		cr->r->reserved++;
		return cr->r;
	}
	if (a->stopping) {
		*err = AP_ERR_SERVER_FULL;
		return NULL;
	}
	/* The room with the lowest number that has a free place, as far as
	 * this node knows: its own, and the others' census (kept a place
	 * short of full: the census is a little late). */
	for (i = 0; i < c->nrooms; i++) {
		cr = c->rooms[i];
		if (LOAD(cr->lost) || cr->id >= best)
			continue;
		if (has_share(c, cr, size))
			best = cr->id;
	}
	for (i = 0; i < c->ncen; i++) {
		e = &c->cen[i];
		if (e->id < best && e->fill < size &&
		    (size - e->fill) / (c->nnodes ? c->nnodes : 1) > 0 &&
		    !find_room(c, e->id) && ao_node_connected(c->node))
			best = e->id;
	}
	if (best != UINT32_MAX) {
		cr = find_room(c, best);
		if (!cr)
			cr = proxy_for(c, find_cen(c, best));
		if (cr) {
			if (cr->proxy)
				ADD(c->n.forwarded, 1);
			cr->r->reserved++;
			cr->since_census++;
			return cr->r;
		}
	}
	return new_room(c, err);
}

/* ------------------------------------------------------------------ */
/* Ghosts: other nodes' players in own rooms */

static struct gnode **ghost_slot(struct cluster *c, uint32_t pid)
{
	struct gnode **g = &c->ghosts[(pid * 2654435761u) % GHOST_BUCKETS];

	while (*g && (*g)->pid != pid)
		g = &(*g)->next;
	return g;
}

/* Take pid's ghost out of the map (its stay is ending): NULL if none. */
static struct player *ghost_take(struct cluster *c, uint32_t pid)
{
	struct player *p = NULL;
	struct gnode **g, *n;

	ao_spin_lock(&c->glock);
	g = ghost_slot(c, pid);
	n = *g;
	if (n) {
		*g = n->next;
		p = n->p;
	}
	ao_spin_unlock(&c->glock);
	free(n);
	return p;
}

/*
 * Take p itself out of the map: true if it was there, and then the
 * caller frees it.  False when another took it first: ghost_push() at
 * its leave or disconnect, ghost_join() ending its stay (its player
 * joined elsewhere), each of which pushes that event to p's room, whose
 * tick frees it.  So a ghost is freed once, and never while one of them may
 * still push it.
 */
static bool ghost_own(struct cluster *c, struct player *p)
{
	struct gnode **g, *n = NULL;

	ao_spin_lock(&c->glock);
	g = ghost_slot(c, p->id);
	if (*g && (*g)->p == p) {
		n = *g;
		*g = n->next;
	}
	ao_spin_unlock(&c->glock);
	free(n);
	return n != NULL;
}

void cluster_ghost_free(struct player *p)
{
	struct croom *cr = p->room->cl; /* a ghost's room, for good */

	ghost_own(p->a->cl, p);
	/* Release: pairs with the acquire in lost_reclaim(). */
	__atomic_fetch_sub(&cr->ghosts_live, 1, __ATOMIC_RELEASE);
}

static void ghost_timer(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)t;
	(void)ev;
}

/* A ghost taken out of the map (ghost_own(), ghost_take()) leaves its
 * room after the events already pushed for it (ghost_push()), which
 * still read it. */
static void ghost_gone(struct room *r, struct player *p)
{
	struct event e = { .kind = EV_GONE, .p = p };

	room_push(r, &e);
}

/* A join of another node's player: a ghost, in the room's inbox. */
static void ghost_join(struct cluster *c, struct croom *cr, uint32_t pid,
		       uint32_t last_tick, bool has_tick)
{
	struct arena *a = c->a;
	struct event e = { .kind = EV_JOIN };
	struct player *p;
	struct gnode *n;
	bool full;

	/* A stay that was not over (a message lost): end it first. */
	p = ghost_take(c, pid);
	if (p)
		ghost_gone(p->room, p);
	ao_spin_lock(&a->lobby);
	full = cr->r->reserved >= a->o.room_size;
	if (!full)
		cr->r->reserved++;
	ao_spin_unlock(&a->lobby);
	p = full ? NULL : calloc(1, sizeof(*p));
	n = p ? malloc(sizeof(*n)) : NULL;
	if (!n) {
		free(p);
		if (!full)
			lobby_release(a, cr->r);
		ao_spin_lock(&cr->lock);
		put8(&cr->pend, 'E');
		put32(&cr->pend, pid);
		put8(&cr->pend, AP_ERR_ROOM_FULL);
		ao_spin_unlock(&cr->lock);
		return;
	}
	p->a = a;
	p->ghost = true;
	p->id = pid;
	p->hello = true;
	p->in = true;
	p->state = P_ROOM;
	p->room = cr->r;
	p->last_tick = last_tick;
	p->has_tick = has_tick;
	ao_spin_init(&p->lock);
	ao_timer_init(&p->timer, a->timers, ghost_timer);
	ADD(a->st.players, 1);
	ADD(c->n.ghosts, 1);
	ADD(cr->ghosts_live, 1);
	n->pid = pid;
	n->p = p;
	ao_spin_lock(&c->glock);
	n->next = c->ghosts[(pid * 2654435761u) % GHOST_BUCKETS];
	c->ghosts[(pid * 2654435761u) % GHOST_BUCKETS] = n;
	ao_spin_unlock(&c->glock);
	e.p = p;
	room_push(cr->r, &e);
}

/*
 * An event of pid's ghost to its room, if the ghost is in the map and in
 * cr's room.  Under the map's lock from the look-up to the push: whoever
 * takes a ghost out of the map (ghost_own(), ghost_take()) does so
 * either before (and nothing is pushed) or after the event is in the
 * inbox, and then pushes the ghost's EV_GONE behind it, so the room
 * frees the ghost after every event that names it.  After its leave or
 * disconnect, nothing more of the stay goes to the room (the ghost is
 * out of the map).
 */
static void ghost_push(struct cluster *c, struct croom *cr, uint32_t pid,
		       uint8_t kind, struct event *e)
{
	struct gnode **g, *n = NULL;
	struct player *p;

	ao_spin_lock(&c->glock);
	g = ghost_slot(c, pid);
	p = *g ? (*g)->p : NULL;
	if (!p || p->room != cr->r || (kind == 'C' && !e->buf)) {
		ao_spin_unlock(&c->glock);
		/* (A chat line the pool had no buffer for is lost: the
		 * pool counts it.) */
		if (e->buf)
			ao_buf_put(e->buf);
		if (!p)
			ADD(c->a->st.refused_drops, 1);
		return;
	}
	if (kind == 'L' || kind == 'G') {
		n = *g;
		*g = n->next;
	}
	if (kind == 'I' || kind == 'C')
		ADD(p->pending, 1);
	e->p = p;
	room_push(cr->r, e);
	ao_spin_unlock(&c->glock);
	free(n);
}

/* ao.node.<me>.in: a gateway's batch for one of the rooms owned here. */
static void on_in(struct ao_msg *m, void *arg)
{
	struct cluster *c = arg;
	const uint8_t *d = m->data, *end = d + m->len;
	struct croom *cr;
	uint32_t id, epoch;

	if (m->len < 9 || d[0] != M_IN)
		return;
	id = get32(d + 1);
	epoch = get32(d + 5);
	ao_spin_lock(&c->a->lobby);
	cr = find_room(c, id);
	if (cr && (cr->proxy || cr->epoch != epoch || LOAD(cr->lost)))
		cr = NULL;
	ao_spin_unlock(&c->a->lobby);
	if (!cr) {
		ADD(c->n.stale, 1);
		return;
	}
	for (d += 9; d + 5 <= end;) {
		uint8_t kind = d[0];
		uint32_t pid = get32(d + 1);
		struct event e = { 0 };

		d += 5;
		switch (kind) {
		case 'J':
			if (d + 5 > end)
				return;
			ghost_join(c, cr, pid, get32(d), d[4]);
			d += 5;
			continue;
		case 'I':
			if (d + 5 > end)
				return;
			e.kind = EV_INPUT;
			e.seq = get32(d);
			e.dir = d[4];
			d += 5;
			break;
		case 'C':
			if (d + 1 > end || d + 1 + d[0] > end)
				return;
			e.kind = EV_CHAT;
			e.buf = ao_buf_get(c->a->pool);
			if (e.buf) {
				((uint8_t *)e.buf->data)[0] = AP_CHAT;
				memcpy((uint8_t *)e.buf->data + 1, d + 1, d[0]);
				e.buf->len = 1u + d[0];
			}
			d += 1 + d[0];
			break;
		case 'L':
			e.kind = EV_LEAVE;
			break;
		case 'G':
			e.kind = EV_GONE;
			break;
		default:
			return;
		}
		ghost_push(c, cr, pid, kind, &e);
	}
}

/* ------------------------------------------------------------------ */
/* The owner's tick */

void cluster_joined(struct room *r, struct player *p, const uint8_t *msg,
		    size_t len)
{
	struct croom *cr = r->cl;

	put8(&cr->out, 'J');
	put32(&cr->out, p->id);
	vec_put(&cr->out, msg, len);
	cr->ghosts = true;
}

void cluster_chat(struct room *r, struct ao_buf *line)
{
	struct croom *cr = r->cl;

	put8(&cr->out, 'C');
	put16(&cr->out, (uint16_t)line->len);
	vec_put(&cr->out, line->data, line->len);
}

void cluster_snap(struct room *r, struct ao_buf *snap)
{
	struct croom *cr = r->cl;

	for (uint32_t i = 0; i < r->nmembers; i++)
		if (r->members[i]->ghost)
			cr->ghosts = true;
	if (cr->ghosts)
		cr->snap = ao_buf_ref(snap);
}

void cluster_left(struct room *r, struct player *p)
{
	struct croom *cr = r->cl;

	put8(&cr->out, 'L');
	put32(&cr->out, p->id);
	cr->ghosts = true;
}

static int publish_split(struct cluster *c, const char *subj, uint8_t *hdr,
			 size_t hlen, const uint8_t *rec, size_t n);

void cluster_tick_end(struct room *r, uint32_t tick)
{
	struct croom *cr = r->cl;
	struct cluster *c = cr->c;
	uint8_t hdr[13];
	char subj[64];

	if (cr->proxy)
		return;
	ao_spin_lock(&cr->lock);
	if (cr->pend.n) {
		vec_put(&cr->out, cr->pend.p, cr->pend.n);
		cr->pend.n = 0;
	}
	ao_spin_unlock(&cr->lock);
	snprintf(subj, sizeof(subj), "ao.room.%u.%u.out", cr->id, cr->epoch);
	/* Chat lines only matter to other nodes when it has their players. */
	if (cr->out.n && (cr->ghosts || cr->out.p[0] != 'C')) {
		hdr[0] = M_CTL;
		memcpy(hdr + 1, &cr->id, 4);
		memcpy(hdr + 5, &cr->epoch, 4);
		memcpy(hdr + 9, &tick, 4);
		publish_split(c, subj, hdr, 13, cr->out.p, cr->out.n);
	}
	cr->out.n = 0;
	if (cr->snap) {
		if (!ao_node_publish_buf(c->node, subj, cr->snap))
			ADD(c->n.snaps_out, 1);
		ao_buf_put(cr->snap);
		cr->snap = NULL;
	}
	cr->ghosts = false;
}

/* ------------------------------------------------------------------ */
/* The gateway's side: a proxy room */

static void proxy_member_add(struct room *r, struct player *p)
{
	/* As a joiner of an own room: its joined, just sent, does not hold
	 * back the snapshot of the same tick. */
	p->stalled = false;
	p->member_of = r;
	p->slot = r->nmembers;
	r->members[r->nmembers++] = p;
	ADD(r->a->st.in_rooms, 1);
	__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
}

/* p's stay in a lost room ends: room_lost, as a refused join (what the
 * client sends until its next join is dropped), then what it sent after
 * a leave goes on.  reserved: a non-member still holds its place. */
static void lose_player(struct room *r, struct player *p, bool left,
			bool reserved)
{
	struct cluster *c = r->a->cl;

	if (p->member_of == r) {
		member_remove(r, p);
		__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
	} else if (reserved) {
		lobby_release(r->a, r);
	}
	ao_spin_lock(&p->lock);
	if (left) {
		/* Its leave was not confirmed: told too (its own chat lines
		 * may have been lost) unless it asked to join meanwhile (the
		 * answer to that join comes next: an error now would be
		 * taken for it). */
		if (!LOAD(p->closing) && !p->deferred.n) {
			send_error(p, AP_ERR_ROOM_LOST);
			ADD(c->n.room_lost, 1);
		}
		run_deferred(r->a, p);
	} else if (p->room == r && p->state == P_ROOM) {
		p->state = P_LOBBY;
		p->room = NULL;
		if (!LOAD(p->closing))
			send_error(p, AP_ERR_ROOM_LOST);
		ADD(c->n.room_lost, 1);
	}
	ao_spin_unlock(&p->lock);
}

/* A lost room (proxy or own) at its tick: everyone in it told, the inbox
 * drained with the same rule, every tick from now on.  False when there
 * was nothing to do. */
static bool drain_lost(struct croom *cr)
{
	struct room *r = cr->r;
	struct arena *a = r->a;
	struct inbox w;
	uint32_t i;

	ao_spin_lock(&r->lock);
	w = r->in;
	r->in.ev = NULL;
	r->in.n = r->in.cap = 0;
	ao_spin_unlock(&r->lock);
	if (cr->dead && !w.n) {
		free(w.ev);
		return false;
	}
	if (!cr->dead) {
		cr->dead = true;
		if (cr->sub) {
			ao_sub_close(cr->sub);
			cr->sub = NULL;
		}
		ao_spin_lock(&a->lobby);
		unlist_room(cr->c, cr);
		ao_spin_unlock(&a->lobby);
		if (!cr->proxy)
			SUB(a->st.rooms, 1);
		while (r->nmembers) {
			struct player *p = r->members[r->nmembers - 1];

			if (p->ghost) {
				member_remove(r, p);
				/* Freed at the next drain, after the events
				 * that may still name it, if this drain takes
				 * it out of the map; else its leave or
				 * disconnect is here or on its way, and frees
				 * it. */
				if (ghost_own(cr->c, p))
					ghost_gone(r, p);
			} else {
				/* A member may have sent its leave: in leaving
				 * too, and its place goes back once. */
				lose_player(r, p, pvec_del(&cr->leaving, p),
					    false);
			}
		}
		for (i = 0; i < cr->joining.n; i++)
			lose_player(r, cr->joining.p[i], false, true);
		cr->joining.n = 0;
		for (i = 0; i < cr->leaving.n; i++)
			lose_player(r, cr->leaving.p[i], true, true);
		cr->leaving.n = 0;
		__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
	}
	for (i = 0; i < w.n; i++) {
		struct event *e = &w.ev[i];
		struct player *p = e->p;

		switch (e->kind) {
		case EV_JOIN:
			if (p->ghost) {
				lobby_release(a, r);
				/* Events of it may follow, here or next. */
				if (ghost_own(cr->c, p))
					ghost_gone(r, p);
			} else {
				lose_player(r, p, false, true);
			}
			break;
		case EV_INPUT:
		case EV_CHAT:
			SUB(p->pending, 1);
			if (e->buf)
				ao_buf_put(e->buf);
			ADD(a->st.refused_drops, 1);
			break;
		case EV_LEAVE:
			if (p->ghost)
				player_free(p);
			else
				lose_player(r, p, true, false);
			break;
		case EV_GONE:
			if (p->member_of == r)
				member_remove(r, p);
			player_free(p);
			break;
		}
	}
	free(w.ev);
	__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
	return true;
}

/*
 * A lost room, its inbox empty for DEAD_IDLE_TICKS ticks, its tick
 * cancelled: given up (room_spare(), and its croom freed) if nothing can
 * reach it any more, else its tick resumes once a second.  On its
 * strand, after whatever was queued there before (proxy_kick(), which
 * reads cr).  Nothing can once:
 *  - it is out of the cluster's table (its first drain): no join picks
 *    it, no bus message is taken for it (on_in() looks it up, and
 *    on_out()'s subscription was closed on this strand: no handler of it
 *    runs after that);
 *  - none of its places is reserved (under the lobby lock): a player of
 *    this node that picked it holds one from the pick until this strand
 *    is done with it; it pushes to the room only under its own lock,
 *    which the drains take after dropping its place (lose_player()), so
 *    all its pushes are in the inbox by then; and one that still points
 *    at the room after that (its leave was queued) lets go of it when
 *    that leave is drained;
 *  - its inbox is empty, under its lock: nothing pushed is left;
 *  - no ghost made for it is alive: ghost_join() may take an old ghost
 *    of this room out of the map, and push its end here, at any time
 *    (ghost_own());
 *  - no create request is out: its answer runs here, with cr.
 * The lobby lock also orders it with arena_stop(), which keeps every
 * room still in the table (arena_destroy() frees them).
 */
static void lost_reclaim(struct ao_work *w)
{
	struct croom *cr = container_of(w, struct croom, reclaim);
	struct room *r = cr->r;
	struct cluster *c = cr->c;
	struct arena *a = r->a;
	bool busy;

	ao_spin_lock(&a->lobby);
	if (a->stopping) {
		ao_spin_unlock(&a->lobby);
		return;
	}
	ao_spin_lock(&r->lock);
	busy = r->in.n > 0;
	ao_spin_unlock(&r->lock);
	busy |= r->reserved > 0;
	busy |= __atomic_load_n(&cr->ghosts_live, __ATOMIC_ACQUIRE) > 0;
	busy |= __atomic_load_n(&cr->creating, __ATOMIC_ACQUIRE) != 0;
	if (busy) {
		/* Under the lobby lock: arena_stop() cancels it after. */
		ao_timer_arm_periodic(&r->tick,
				      ao_timers_now(a->timers) + DEAD_PERIOD_NS,
				      DEAD_PERIOD_NS, 0);
		ao_spin_unlock(&a->lobby);
		return;
	}
	/* From its strand: not running, and whatever armed it since (a
	 * create's answer aligns a proxy's tick) is undone. */
	ao_timer_cancel(&r->tick);
	room_spare(r);
	ao_spin_unlock(&a->lobby);
	croom_free(cr);
	ADD(c->n.reclaimed, 1);
}

static void rec_pid(struct vec *v, uint8_t kind, uint32_t pid)
{
	put8(v, kind);
	put32(v, pid);
}

/* A proxy's tick: what its players sent goes to the owner, one message. */
static void proxy_tick(struct croom *cr)
{
	struct room *r = cr->r;
	struct cluster *c = cr->c;
	struct vec v = { 0 };
	struct inbox w;
	uint8_t hdr[9];
	char subj[AO_SUBJECT_MAX];
	bool listed;
	uint32_t i;
	int err;

	if (!__atomic_load_n(&cr->ready, __ATOMIC_ACQUIRE))
		return; /* the owner is making it: the events wait */
	ao_spin_lock(&r->lock);
	w = r->in;
	r->in.ev = NULL;
	r->in.n = r->in.cap = 0;
	ao_spin_unlock(&r->lock);
	if (!w.n)
		return;
	for (i = 0; i < w.n; i++) {
		struct event *e = &w.ev[i];
		struct player *p = e->p;

		switch (e->kind) {
		case EV_JOIN:
			pvec_add(&cr->joining, p);
			rec_pid(&v, 'J', p->id);
			put32(&v, p->last_tick);
			put8(&v, p->has_tick);
			break;
		case EV_INPUT:
			SUB(p->pending, 1);
			rec_pid(&v, 'I', p->id);
			put32(&v, e->seq);
			put8(&v, e->dir);
			break;
		case EV_CHAT:
			SUB(p->pending, 1);
			rec_pid(&v, 'C', p->id);
			put8(&v, (uint8_t)(e->buf->len - 1));
			vec_put(&v, (uint8_t *)e->buf->data + 1,
				e->buf->len - 1);
			ao_buf_put(e->buf);
			break;
		case EV_LEAVE:
			rec_pid(&v, 'L', p->id);
			if (pvec_del(&cr->joining, p) || p->member_of == r)
				pvec_add(&cr->leaving, p);
			else /* refused meanwhile: nothing to wait for */
				lose_player(r, p, true, false);
			break;
		case EV_GONE:
			rec_pid(&v, 'G', p->id);
			listed = pvec_del(&cr->joining, p);
			listed |= pvec_del(&cr->leaving, p);
			if (p->member_of == r)
				member_remove(r, p);
			else if (listed)
				lobby_release(r->a, r);
			__atomic_store_n(&r->count, r->nmembers,
					 __ATOMIC_RELAXED);
			player_free(p);
			break;
		}
	}
	free(w.ev);
	hdr[0] = M_IN;
	memcpy(hdr + 1, &cr->id, 4);
	memcpy(hdr + 5, &cr->epoch, 4);
	snprintf(subj, sizeof(subj), "ao.node.%s.in", cr->owner);
	err = publish_split(c, subj, hdr, 9, v.p, v.n);
	free(v.p);
	/* Lost on the way (the bus is down or full): never silently. */
	if (err)
		__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
}

/* A forward out of turn, on the proxy's strand (cluster_pushed()). */
static void proxy_kick(void *arg)
{
	struct croom *cr = arg;

	/* Cleared before the inbox is taken: an event pushed after that
	 * queues another kick.  Acquire/release: pairs with the exchange in
	 * cluster_pushed(). */
	__atomic_store_n(&cr->kick, 0, __ATOMIC_RELEASE);
	if (LOAD(cr->lost) || cr->dead)
		return; /* its tick drains it */
	proxy_tick(cr);
}

/*
 * An event in a proxy's inbox (room_push()).  The proxy forwards at its
 * tick, LEAD_NS before the owner's; an event that comes after that tick
 * and before the owner's would wait a whole period there and one more at
 * the owner, so it goes at once (a kick on the room's strand, one at a
 * time: events pushed meanwhile go with it).  The rest still go in one
 * message per tick.
 */
void cluster_pushed(struct room *r)
{
	struct croom *cr = r->cl;
	struct arena *a = r->a;
	uint64_t pos, until;

	if (!cr->proxy || !__atomic_load_n(&cr->ready, __ATOMIC_ACQUIRE))
		return;
	pos = (ao_timers_now(a->timers) - a->base) % a->period;
	until = (LOAD(cr->owner_off) + a->period - pos) % a->period;
	if (until > LEAD_NS)
		return;
	if (__atomic_exchange_n(&cr->kick, 1, __ATOMIC_ACQ_REL))
		return;
	if (ao_strand_try_call(&r->strand, proxy_kick, cr))
		__atomic_store_n(&cr->kick, 0, __ATOMIC_RELEASE);
}

/*
 * The owner dropped pid's ghost: this node was declared dead (it was
 * stopped, or cut from the bus) and is back.  Its player must not stay a
 * member the owner does not know (its inputs would be dropped there, and
 * the snapshots would not name it): room_lost, as for a lost room.
 */
static void proxy_dropped(struct croom *cr, uint32_t pid)
{
	struct room *r = cr->r;
	struct player *p = NULL;
	bool joining = false, leaving = false;
	uint32_t i;

	for (i = 0; i < r->nmembers && !p; i++)
		if (r->members[i]->id == pid)
			p = r->members[i];
	if (!p && (p = pvec_find(&cr->joining, pid)))
		joining = true;
	if (!p)
		p = pvec_find(&cr->leaving, pid);
	if (!p)
		return;
	/* A member may have sent its leave: in leaving too. */
	leaving = pvec_del(&cr->leaving, p);
	if (joining)
		pvec_del(&cr->joining, p);
	/* A member leaves the room in lose_player(); a non-member gives up
	 * its place.  An unconfirmed leave: room_lost, then what it sent
	 * after the leave goes on. */
	lose_player(r, p, leaving, p->member_of != r);
}

/* The owner's control message, on the proxy's strand. */
static void proxy_ctl(struct croom *cr, const uint8_t *d, size_t len)
{
	struct room *r = cr->r;
	struct arena *a = r->a;
	const uint8_t *end = d + len, *p0 = d;
	struct pvec left = { 0 };
	bool in_leaving;
	uint32_t i;

	/* Joined and refusals first, who left next (chat lines go to them
	 * too), then the lines. */
	for (d = p0; d + 1 <= end;) {
		uint8_t kind = d[0];
		struct player *p;

		if (kind == 'C') {
			if (d + 3 > end)
				break;
			d += 3 + (d[1] | d[2] << 8);
			continue;
		}
		if (d + 5 > end)
			break;
		if (kind == 'X') {
			proxy_dropped(cr, get32(d + 1));
			d += 5;
			continue;
		}
		/* A leave may have gone after the join: either list. */
		p = pvec_find(kind == 'L' ? &cr->leaving : &cr->joining,
			      get32(d + 1));
		in_leaving = kind == 'L' && p;
		if (!p) {
			p = pvec_find(kind == 'L' ? &cr->joining : &cr->leaving,
				      get32(d + 1));
			in_leaving = kind != 'L' && p;
		}
		if (kind == 'J' && d + 5 + AP_LEN_JOINED <= end) {
			if (p && p->member_of != r) {
				if (!in_leaving)
					pvec_del(&cr->joining, p);
				proxy_member_add(r, p);
				p->last_tick = get32(d + 5 + 7);
				p->stay_tick = p->last_tick;
				p->has_tick = true;
				player_reply(p, d + 5, AP_LEN_JOINED);
			}
			d += 5 + AP_LEN_JOINED;
		} else if (kind == 'E' && d + 6 <= end) {
			if (p && p->member_of != r) {
				pvec_del(in_leaving ? &cr->leaving :
						      &cr->joining,
					 p);
				lobby_release(a, r);
				/* Refused: its leave, if sent, ends nothing.
				 * In the lobby before the error goes out: a
				 * client may join again as soon as it reads
				 * it (under the lock, which its join takes). */
				ao_spin_lock(&p->lock);
				if (!in_leaving && p->room == r &&
				    p->state == P_ROOM) {
					p->state = P_LOBBY;
					p->room = NULL;
				}
				send_error(p, d[5]);
				if (in_leaving)
					run_deferred(a, p);
				ao_spin_unlock(&p->lock);
			}
			d += 6;
		} else if (kind == 'L') {
			if (p) {
				pvec_del(&cr->leaving, p);
				pvec_del(&cr->joining, p);
				if (p->member_of == r)
					member_remove(r, p);
				else
					lobby_release(a, r);
				__atomic_store_n(&r->count, r->nmembers,
						 __ATOMIC_RELAXED);
				pvec_add(&left, p);
			}
			d += 5;
		} else {
			break;
		}
	}
	for (d = p0; d + 3 <= end;) {
		size_t n;

		if (d[0] != 'C') {
			d += d[0] == 'J' ? 5 + AP_LEN_JOINED :
			     d[0] == 'E' ? 6 :
					   5;
			continue;
		}
		n = d[1] | d[2] << 8;
		if (d + 3 + n > end)
			break;
		{
			struct ao_buf *b = ao_buf_get(a->pool);

			if (b) {
				memcpy(b->data, d + 3, n);
				b->len = (uint32_t)n;
				for (i = 0; i < r->nmembers; i++)
					player_send(r->members[i], b);
				for (i = 0; i < left.n; i++)
					player_send(left.p[i], b);
				ao_buf_put(b);
				ADD(a->st.chat_lines, 1);
			}
		}
		d += 3 + n;
	}
	for (i = 0; i < left.n; i++) {
		ao_spin_lock(&left.p[i]->lock);
		run_deferred(a, left.p[i]);
		ao_spin_unlock(&left.p[i]->lock);
	}
	free(left.p);
}

/* ao.room.<id>.<epoch>.out on the proxy's strand. */
static void on_out(struct ao_msg *m, void *arg)
{
	struct croom *cr = arg;
	struct room *r = cr->r;
	struct arena *a = r->a;
	const uint8_t *d = m->data;
	uint32_t i, sent = 0, tick;
	bool ctl;

	if (cr->dead || LOAD(cr->lost) || !m->len)
		return;
	if (d[0] == M_CTL && m->len >= 13) {
		if (get32(d + 1) != cr->id || get32(d + 5) != cr->epoch) {
			ADD(cr->c->n.stale, 1);
			return;
		}
		/* Who is still busy, before this tick's lines and joined go
		 * out (room_tick()'s step 1): they must not hold back the
		 * snapshot that follows. */
		for (i = 0; i < r->nmembers; i++)
			r->members[i]->stalled =
				ao_conn_send_queued(r->members[i]->conn) > 0;
		cr->stall_tick = get32(d + 9);
		cr->stall_set = true;
		proxy_ctl(cr, d + 13, m->len - 13);
		return;
	}
	if (d[0] != AP_SNAPSHOT || m->len < AP_LEN_SNAP_HDR)
		return;
	tick = get32(d + 1);
	ADD(cr->c->n.snaps_in, 1);
	ctl = cr->stall_set && cr->stall_tick == tick;
	cr->stall_set = false;
	/* The same buffer to every member here: by reference. */
	for (i = 0; i < r->nmembers; i++) {
		struct player *p = r->members[i];

		p->last_tick = tick;
		if (ctl ? p->stalled : ao_conn_send_queued(p->conn) > 0) {
			ADD(a->st.snaps_skipped, 1);
			continue;
		}
		/* As send_snapshot() does: release, pairs with the acquire
		 * in on_ack(). */
		__atomic_store_n(&p->sent_tick, tick, __ATOMIC_RELEASE);
		__atomic_store_n(&p->sent_any, 1, __ATOMIC_RELEASE);
		player_send(p, m->buf);
		sent++;
	}
	ADD(a->st.snaps_sent, sent);
}

/* ------------------------------------------------------------------ */
/* Fencing: an owner that cannot show it is alive stops */

/* Does a directory value (len bytes) say s? */
static bool says(const void *value, size_t len, const char *s)
{
	return len == strlen(s) && !memcmp(value, s, len);
}

/* node.<idx> names another node: one that took the index while this one
 * stood still or was cut off.  Its ids are that node's now: this one must
 * go (its players reconnect elsewhere, as after a crash). */
static void index_lost(struct cluster *c)
{
	if (__atomic_exchange_n(&c->idx_lost, 1, __ATOMIC_RELAXED))
		return;
	fprintf(stderr,
		"ao-arena: node %s: its index %u was taken by another node "
		"meanwhile; player and room ids would collide: stopping\n",
		c->name, c->idx);
	kill(getpid(), SIGTERM);
}

static void on_reread_idx(int err, const struct ao_kv_entry *e, void *arg)
{
	struct cluster *c = arg;
	char mine[AO_NODE_NAME_MAX + 48];

	dir_value(c, 0, mine, sizeof(mine));
	if (!err && !says(e->value, e->len, mine))
		index_lost(c);
	if (!--c->reread)
		__atomic_store_n(&c->fenced, 0, __ATOMIC_RELEASE);
}

/* An own room's key to read again: its id and epoch, not the room,
 * which may be lost and given up before the answer comes. */
struct reread {
	struct cluster *c;
	uint32_t id, epoch;
};

static void on_reread(int err, const struct ao_kv_entry *e, void *arg)
{
	struct reread *rr = arg;
	struct cluster *c = rr->c;
	struct arena *a = c->a;
	char mine[AO_NODE_NAME_MAX + 48];
	struct croom *cr = NULL;
	bool here = false;

	dir_value(c, rr->epoch, mine, sizeof(mine));
	ao_spin_lock(&a->lobby);
	for (uint32_t i = 0; i < c->nrooms && !cr; i++)
		if (c->rooms[i]->id == rr->id && !c->rooms[i]->proxy &&
		    c->rooms[i]->epoch == rr->epoch)
			cr = c->rooms[i];
	if (cr && !err && !says(e->value, e->len, mine)) {
		/* Counted once, whether the census found it first. */
		if (!__atomic_exchange_n(&cr->lost, 1, __ATOMIC_ACQ_REL))
			ADD(c->n.evicted, 1);
	}
	here = cr && !LOAD(cr->lost);
	ao_spin_unlock(&a->lobby);
	if (here && err == -ENOENT)
		dir_claim(c, rr->id, rr->epoch);
	free(rr);
	if (!--c->reread)
		__atomic_store_n(&c->fenced, 0, __ATOMIC_RELEASE);
}

static void reread_all(void *arg);

/* Stop ticking own rooms and handing out ids until the directory has
 * been read again (reread_all()). */
static void fence(struct cluster *c)
{
	int zero = 0;

	/* Acquire/release on fenced: pairs with the stores of the re-read's
	 * end, so the lost flags it set are seen by the next tick. */
	if (__atomic_compare_exchange_n(&c->fenced, &zero, 1, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		ao_strand_call(&c->strand, reread_all, c);
}

/* Connected, and its own heartbeats came back before but none within
 * fence_ms: it stood still, and its index and rooms may be another
 * node's by now.  (Cut off from the bus altogether, nobody can take
 * them: that is not this.) */
static bool stood_still(struct cluster *c)
{
	return ao_node_connected(c->node) &&
	       ao_node_self_fresh(c->node, UINT32_MAX) &&
	       !ao_node_self_fresh(c->node, c->o.fence_ms);
}

bool cluster_may_hello(struct arena *a)
{
	struct cluster *c = a->cl;

	return !__atomic_load_n(&c->fenced, __ATOMIC_ACQUIRE) &&
	       !LOAD(c->idx_lost) && !stood_still(c);
}

static void reread_all(void *arg)
{
	struct cluster *c = arg;
	struct arena *a = c->a;
	struct reread *own;
	uint32_t n = 0, i;
	char key[32];

	ao_spin_lock(&a->lobby);
	own = calloc(c->nrooms + 1, sizeof(*own));
	for (i = 0; own && i < c->nrooms; i++) {
		if (!c->rooms[i]->proxy) {
			own[n].id = c->rooms[i]->id;
			own[n++].epoch = c->rooms[i]->epoch;
		}
	}
	ao_spin_unlock(&a->lobby);
	c->reread = 1;
	snprintf(key, sizeof(key), "node.%u", c->idx);
	if (!ao_kv_get(c->dir, key, &c->strand, on_reread_idx, c))
		c->reread++;
	for (i = 0; i < n; i++) {
		struct reread *rr = malloc(sizeof(*rr));

		if (!rr)
			break;
		*rr = own[i];
		rr->c = c;
		snprintf(key, sizeof(key), "room.%u", rr->id);
		if (!ao_kv_get(c->dir, key, &c->strand, on_reread, rr))
			c->reread++;
		else
			free(rr);
	}
	free(own);
	if (!--c->reread)
		__atomic_store_n(&c->fenced, 0, __ATOMIC_RELEASE);
}

bool cluster_tick(struct room *r, uint32_t tick, uint64_t now)
{
	struct croom *cr = r->cl;
	struct cluster *c = cr->c;
	uint64_t prev = cr->last_tick_ns;
	bool stalled;

	(void)tick;
	/* A tick that comes fence_ms or more after the previous one: this
	 * process (or its room) stood still long enough for the others to
	 * declare it dead and take the room.  A heartbeat sent after the
	 * stall may already have come back, so the heartbeat alone cannot
	 * tell: fence on the gap too. */
	cr->last_tick_ns = now;
	stalled = prev && now - prev >= (uint64_t)c->o.fence_ms * 1000000;
	if (LOAD(cr->lost) || cr->dead) {
		if (drain_lost(cr)) {
			cr->idle_drains = 0;
		} else if (++cr->idle_drains >= DEAD_IDLE_TICKS) {
			/* Its own callback: not re-armed after it returns,
			 * and lost_reclaim() runs after it on the strand.
			 * (An arm from here holds: core/timer.c settles a
			 * callback's own arm.) */
			ao_timer_cancel(&r->tick);
			ao_work_init(&cr->reclaim, lost_reclaim);
			if (ao_strand_submit(&r->strand, &cr->reclaim))
				ao_timer_arm_periodic(&r->tick,
						      now + DEAD_PERIOD_NS,
						      DEAD_PERIOD_NS, 0);
		}
		return true;
	}
	if (cr->proxy) {
		proxy_tick(cr);
		return true;
	}
	/* The bus lost meanwhile, or a node died: the others' (or its)
	 * players here are gone. */
	if (cr->ghost_gen != LOAD(c->bus_gen) ||
	    cr->dead_gen != __atomic_load_n(&c->dead_gen, __ATOMIC_ACQUIRE)) {
		bool all = cr->ghost_gen != LOAD(c->bus_gen);

		cr->ghost_gen = LOAD(c->bus_gen);
		cr->dead_gen = LOAD(c->dead_gen);
		for (uint32_t i = r->nmembers; i-- > 0;) {
			struct player *p = r->members[i];

			/* (One another took is ending its stay already:
			 * its leave or disconnect comes, ghost_own().) */
			if (p->ghost &&
			    (all || LOAD(c->dead_idx[p->id >> 24 & 255])) &&
			    ghost_own(c, p)) {
				/* Its node may be back (a stall): told.  Out
				 * of the room at this tick's events. */
				rec_pid(&cr->out, 'X', p->id);
				ghost_gone(r, p);
			}
		}
	}
	/* The bus down: nobody can take it over meanwhile, unless this
	 * node stood still first (cnats may drop the connection as stale
	 * when the process resumes, before the first tick). */
	if (!stalled && !ao_node_connected(c->node))
		return false;
	if (!LOAD(c->fenced) && !stalled &&
	    ao_node_self_fresh(c->node, c->o.fence_ms))
		return false;
	ADD(c->n.fenced_ticks, 1);
	fence(c);
	return true;
}

/* ------------------------------------------------------------------ */
/* Publishing, census, peers, creation */

static int publish_split(struct cluster *c, const char *subj, uint8_t *hdr,
			 size_t hlen, const uint8_t *rec, size_t n)
{
	uint8_t *buf = malloc(BUS_BUF);
	size_t off = 0;
	int err = 0, e;

	if (!buf)
		return -ENOMEM;
	/* Records are cut at record boundaries: a chunk holds whole ones. */
	while (off < n || !n) {
		size_t take = 0;

		while (off + take < n) {
			const uint8_t *q = rec + off + take;
			size_t l;

			switch (q[0]) {
			case 'J':
				l = hdr[0] == M_IN ? 10 : 5 + AP_LEN_JOINED;
				break;
			case 'I':
				l = 10;
				break;
			case 'C':
				l = hdr[0] == M_IN ? 6u + q[5] :
						     3u + (q[1] | q[2] << 8);
				break;
			case 'E':
				l = 6;
				break;
			default:
				l = 5;
			}
			if (hlen + take + l > BUS_BUF)
				break;
			take += l;
		}
		memcpy(buf, hdr, hlen);
		memcpy(buf + hlen, rec + off, take);
		e = ao_node_publish(c->node, subj, buf, hlen + take);
		if (e)
			err = e;
		off += take;
		if (!n || !take)
			break;
	}
	free(buf);
	return err;
}

static void census_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct cluster *c = container_of(t, struct cluster, census);
	struct arena *a = c->a;
	struct vec v = { 0 };
	uint64_t load = 0;
	uint8_t nl = (uint8_t)strlen(c->name);
	uint32_t nnodes;

	(void)ev;
	/* Not fenced yet, but its heartbeat is stale (it was stopped): its
	 * rooms may be another node's by now; it claims none until the
	 * directory has been read again.  Fenced from here too, not only
	 * at an own room's tick: a node with no room of its own re-reads
	 * its index, and hands out no player id meanwhile. */
	if (stood_still(c))
		fence(c);
	if (LOAD(c->fenced) || !ao_node_self_fresh(c->node, c->o.fence_ms))
		return;
	nnodes = (uint32_t)ao_node_peers(c->node, NULL, 0) + 1;
	put8(&v, M_CENSUS);
	put8(&v, (uint8_t)c->idx);
	put8(&v, nl);
	vec_put(&v, c->name, nl);
	ao_spin_lock(&a->lobby);
	for (uint32_t i = 0; i < c->nrooms; i++) {
		struct croom *cr = c->rooms[i];

		if (cr->proxy || LOAD(cr->lost))
			continue;
		put32(&v, cr->id);
		put32(&v, cr->epoch);
		put32(&v, cr->r->reserved);
		put32(&v, room_offset(cr->r));
		load += cr->r->reserved;
		cr->census_fill = cr->r->reserved;
		cr->since_census = 0;
	}
	c->nnodes = nnodes;
	ao_spin_unlock(&a->lobby);
	ao_node_set_load(c->node, load);
	if (v.n <= BUS_BUF)
		ao_node_publish(c->node, "ao.census", v.p, v.n);
	free(v.p);
}

static void on_census(struct ao_msg *m, void *arg)
{
	struct cluster *c = arg;
	struct arena *a = c->a;
	const uint8_t *d = m->data;
	char owner[AO_NODE_NAME_MAX];
	struct ao_peer peer;
	size_t nl, n, i, k;
	uint8_t idx;

	if (m->len < 3 || d[0] != M_CENSUS || 3 + (size_t)d[2] > m->len ||
	    d[2] >= AO_NODE_NAME_MAX)
		return;
	idx = d[1];
	nl = d[2];
	memcpy(owner, d + 3, nl);
	owner[nl] = 0;
	if (!strcmp(owner, c->name) || ao_node_peer(c->node, owner, &peer))
		return;
	n = (m->len - 3 - nl) / 16;
	d += 3 + nl;
	ao_spin_lock(&a->lobby);
	snprintf(c->idx_name[idx], sizeof(c->idx_name[idx]), "%s", owner);
	__atomic_store_n(&c->dead_idx[idx], 0, __ATOMIC_RELAXED);
	for (i = 0; i < c->ncen;) /* the owner's entries, replaced */
		if (!strcmp(c->cen[i].owner, owner))
			c->cen[i] = c->cen[--c->ncen];
		else
			i++;
	for (k = 0; k < n; k++, d += 16) {
		struct centry *e;
		struct croom *cr;

		if (c->ncen == c->cap_cen) {
			uint32_t cap = c->cap_cen ? 2 * c->cap_cen : 64;
			struct centry *q = realloc(c->cen, cap * sizeof(*q));

			if (!q)
				break;
			c->cen = q;
			c->cap_cen = cap;
		}
		e = &c->cen[c->ncen++];
		e->id = get32(d);
		e->epoch = get32(d + 4);
		e->fill = get32(d + 8);
		e->offset = get32(d + 12);
		memcpy(e->owner, owner, nl + 1);
		cr = find_room(c, e->id);
		if (cr && cr->proxy && !strcmp(cr->owner, owner) &&
		    cr->epoch == e->epoch) {
			uint32_t in = LOAD(cr->r->count);

			/* The census counts the joins the owner had when it
			 * sent it; joins from here not yet answered may not
			 * be among them: they stay counted against this
			 * node's share, or every node would take its share
			 * again over the joins still on the way, and the
			 * owner would refuse the excess (room_full). */
			cr->census_fill = e->fill;
			cr->since_census =
				cr->r->reserved > in ? cr->r->reserved - in : 0;
		} else if (cr && (cr->epoch < e->epoch ||
				  (cr->proxy && cr->epoch != e->epoch))) {
			/* An own room found given away (after a stall, the
			 * new owner's census may come before the first
			 * tick's fence): evicted, as by the re-read.  The
			 * exchange counts it once; release as the other
			 * stores of lost. */
			if (cr->proxy)
				__atomic_store_n(&cr->lost, 1,
						 __ATOMIC_RELEASE);
			else if (!__atomic_exchange_n(&cr->lost, 1,
						      __ATOMIC_ACQ_REL))
				ADD(c->n.evicted, 1);
		}
	}
	ao_spin_unlock(&a->lobby);
}

struct takeover {
	struct cluster *c;
	uint32_t id;
	uint32_t repoch;
	char dead[AO_NODE_NAME_MAX];
	uint64_t dead_epoch;
};

static void on_taken(int err, const struct ao_kv_entry *e, void *arg)
{
	struct takeover *t = arg;
	struct cluster *c = t->c;
	struct arena *a = c->a;
	struct croom *cr;

	(void)e;
	if (!err) {
		ao_spin_lock(&a->lobby);
		cr = find_room(c, t->id);
		if (cr)
			__atomic_store_n(&cr->lost, 1, __ATOMIC_RELEASE);
		if (cr)
			unlist_room(c, cr);
		if (!a->stopping)
			add_room(c, t->id, t->repoch, c->name, false);
		ao_spin_unlock(&a->lobby);
		ADD(c->n.takeovers, 1);
	}
	free(t);
}

static void on_dead_entry(int err, const struct ao_kv_entry *e, void *arg)
{
	struct takeover *t = arg;
	struct cluster *c = t->c;
	char owner[AO_NODE_NAME_MAX], val[AO_NODE_NAME_MAX + 48];
	uint64_t oepoch;
	unsigned int repoch;
	char key[32];

	if (err || e->len >= sizeof(val))
		goto out;
	memcpy(val, e->value, e->len);
	val[e->len] = 0;
	if (sscanf(val, "%63s %" SCNu64 " %u", owner, &oepoch, &repoch) != 3 ||
	    strcmp(owner, t->dead))
		goto out;
	t->repoch = repoch + 1;
	dir_value(c, t->repoch, val, sizeof(val));
	snprintf(key, sizeof(key), "room.%u", t->id);
	if (!ao_kv_update(c->dir, key, val, strlen(val), e->revision,
			  &c->strand, on_taken, t))
		return;
out:
	free(t);
}

static void on_peer(struct ao_node *node, const struct ao_peer *peer, bool up,
		    void *arg)
{
	struct cluster *c = arg;
	struct arena *a = c->a;
	uint32_t *ids = NULL, n = 0, i;
	char key[32];

	(void)node;
	if (up)
		return;
	ao_spin_lock(&a->lobby);
	ids = calloc(c->ncen + 1, sizeof(*ids));
	for (i = 0; i < c->ncen;) {
		if (strcmp(c->cen[i].owner, peer->name)) {
			i++;
			continue;
		}
		if (ids)
			ids[n++] = c->cen[i].id;
		c->cen[i] = c->cen[--c->ncen];
	}
	for (i = 0; i < c->nrooms; i++)
		if (c->rooms[i]->proxy &&
		    !strcmp(c->rooms[i]->owner, peer->name))
			__atomic_store_n(&c->rooms[i]->lost, 1,
					 __ATOMIC_RELEASE);
	/* Its players in rooms here: gone with it (at the rooms' ticks). */
	for (i = 1; i < 256; i++)
		if (!strcmp(c->idx_name[i], peer->name))
			__atomic_store_n(&c->dead_idx[i], 1, __ATOMIC_RELAXED);
	ao_spin_unlock(&a->lobby);
	/* Release: pairs with the acquire in cluster_tick(): the flags
	 * above are seen with the new generation. */
	__atomic_fetch_add(&c->dead_gen, 1, __ATOMIC_RELEASE);
	/* Its rooms: every live node tries, the directory picks one. */
	for (i = 0; i < n; i++) {
		struct takeover *t = calloc(1, sizeof(*t));

		if (!t)
			break;
		t->c = c;
		t->id = ids[i];
		snprintf(t->dead, sizeof(t->dead), "%s", peer->name);
		t->dead_epoch = peer->epoch;
		snprintf(key, sizeof(key), "room.%u", ids[i]);
		if (ao_kv_get(c->dir, key, &c->strand, on_dead_entry, t))
			free(t);
	}
	free(ids);
}

static int kv_claim_sync(struct cluster *c, const char *key, const char *val);

/* key holds val in the directory again, or why not: 0, -EEXIST when it
 * holds something else, another negative errno when it cannot tell. */
static int reclaim(struct cluster *c, const char *key, const char *val)
{
	char got[AO_NODE_NAME_MAX + 48];
	size_t len = 0;
	int err = kv_claim_sync(c, key, val);

	if (err != -EEXIST)
		return err;
	err = ao_kv_get_sync(c->dir, key, got, sizeof(got) - 1, &len, NULL);
	if (err)
		return err;
	return says(got, len, val) ? 0 : -EEXIST;
}

static void *restore_fn(void *arg)
{
	struct cluster *c = arg;
	struct ao_kv *kv = NULL;
	char key[32], val[AO_NODE_NAME_MAX + 48];

	/* The bucket was in memory storage: make it again (blocks: this
	 * thread's only job). */
	if (!ao_kv_open(c->node, BUCKET, true, &kv))
		ao_kv_close(kv);
	/* And what it held that is not a room's: the cluster's tick origin
	 * and this node's index, or a node starting now would take them
	 * (its ticks numbered from another origin, its ids this node's). */
	if (c->t0_val[0] && reclaim(c, "t0", c->t0_val) == -EEXIST)
		fprintf(stderr,
			"ao-arena: node %s: the directory's t0 was made "
			"again while the bus was down: ticks of nodes "
			"started since are numbered from another origin\n",
			c->name);
	snprintf(key, sizeof(key), "node.%u", c->idx);
	dir_value(c, 0, val, sizeof(val));
	if (reclaim(c, key, val) == -EEXIST)
		index_lost(c);
	__atomic_store_n(&c->fenced, 1, __ATOMIC_RELEASE);
	ao_strand_call(&c->strand, reread_all, c);
	return NULL;
}

static void on_bus(struct ao_node *node, bool connected, void *arg)
{
	struct cluster *c = arg;
	struct arena *a = c->a;

	(void)node;
	if (!connected) {
		ADD(c->bus_gen, 1);
		ao_spin_lock(&a->lobby);
		for (uint32_t i = 0; i < c->nrooms; i++)
			if (c->rooms[i]->proxy)
				__atomic_store_n(&c->rooms[i]->lost, 1,
						 __ATOMIC_RELEASE);
		c->ncen = 0;
		ao_spin_unlock(&a->lobby);
		return;
	}
	if (c->restoring) {
		pthread_join(c->restorer, NULL);
		c->restoring = false;
	}
	if (!pthread_create(&c->restorer, NULL, restore_fn, c))
		c->restoring = true;
}

/* ao.node.<me>.create: make room <id> here (a new room placed here). */
static void on_create(struct ao_msg *m, void *arg)
{
	struct cluster *c = arg;
	struct arena *a = c->a;
	uint8_t ok = 1, ans[5] = { 1 };
	struct croom *cr;
	uint32_t id, off;

	if (m->len == 4) {
		id = get32(m->data);
		ao_spin_lock(&a->lobby);
		cr = find_room(c, id);
		if (!cr && !a->stopping)
			cr = add_room(c, id, 1, c->name, false);
		ok = !cr || cr->proxy;
		ao_spin_unlock(&a->lobby);
		if (!ok) {
			dir_claim(c, cr->id, cr->epoch);
			off = room_offset(cr->r);
			memcpy(ans + 1, &off, 4);
		}
	}
	ans[0] = ok; /* 0: made (then its ticks' offset) */
	ao_node_respond(c->node, m, ans, sizeof(ans));
}

/* ------------------------------------------------------------------ */
/* Start, stop, statistics */

static int kv_claim_sync(struct cluster *c, const char *key, const char *val)
{
	return ao_kv_create_sync(c->dir, key, val, strlen(val), NULL);
}

/* Is the node that wrote value (dir_value()) live now? */
static bool holder_live(const struct ao_peer *peers, size_t n,
			const char *value)
{
	char name[AO_NODE_NAME_MAX];
	uint64_t epoch;
	size_t i;

	if (sscanf(value, "%63s %" SCNu64, name, &epoch) != 2)
		return true; /* not ours to judge */
	for (i = 0; i < n; i++)
		if (!strcmp(peers[i].name, name) && peers[i].epoch == epoch)
			return true;
	return false;
}

/* The highest room counter of index k in the directory: a room an old
 * holder of k made lives on where it was taken over, under its id. */
static uint32_t rooms_made(struct cluster *c, uint32_t k)
{
	char **keys = NULL;
	uint32_t top = 0, id;
	size_t n = 0, i;

	if (ao_kv_keys_sync(c->dir, &keys, &n))
		return 0xffff; /* cannot tell: make no room */
	for (i = 0; i < n; i++) {
		if (strncmp(keys[i], "room.", 5))
			continue;
		id = (uint32_t)strtoul(keys[i] + 5, NULL, 10);
		if (id >> 16 == k && (id & 0xffff) > top)
			top = id & 0xffff;
	}
	free(keys);
	return top;
}

/*
 * Every index was taken once: take one whose node is gone, updating
 * node.<k> at the revision read (one winner).  First listen to the
 * heartbeats for twice the time in which the others declare a silent
 * node dead (and drop its players' ghosts, whose ids the new holder
 * will hand out again).  The new holder's room counter starts above
 * the old one's rooms still in the directory.
 */
static int reuse_index(struct cluster *c, const char *val)
{
	struct ao_peer *peers = calloc(256, sizeof(*peers));
	char key[32], got[AO_NODE_NAME_MAX + 48];
	uint64_t rev;
	size_t n, len;
	uint32_t k;
	int err = -ENOSPC;

	if (!peers)
		return -ENOMEM;
	usleep((2 * AO_NODE_DEFAULT_DEAD_MS + 200) * 1000);
	n = ao_node_peers(c->node, peers, 256);
	if (n > 256)
		n = 256;
	for (k = 1; k < 256; k++) {
		snprintf(key, sizeof(key), "node.%u", k);
		if (ao_kv_get_sync(c->dir, key, got, sizeof(got) - 1, &len,
				   &rev)) {
			if (!kv_claim_sync(c, key, val))
				break; /* deleted meanwhile: free */
			continue;
		}
		got[len] = 0;
		if (holder_live(peers, n, got))
			continue;
		if (!ao_kv_update_sync(c->dir, key, val, strlen(val), rev,
				       NULL))
			break;
	}
	free(peers);
	if (k < 256) {
		c->idx = k;
		c->next_room = rooms_made(c, k);
		err = 0;
	}
	return err;
}

int cluster_start(struct arena *a, const struct cluster_opts *o)
{
	struct ao_node_config nc = AO_NODE_CONFIG_INIT;
	struct ao_bufpool_params pp = { 0 };
	struct cluster *c = calloc(1, sizeof(*c));
	char key[32], val[AO_NODE_NAME_MAX + 48], subj[AO_SUBJECT_MAX];
	uint64_t t0 = 0, now_r, now_m;
	size_t len;
	int err;

	if (!c)
		return -ENOMEM;
	c->a = a;
	c->o = *o;
	if (!c->o.fence_ms)
		c->o.fence_ms = 700;
	snprintf(c->name, sizeof(c->name), "%s", o->node);
	ao_spin_init(&c->glock);
	ao_strand_init(&c->strand, a->exec);
	ao_timer_init_strand(&c->census, &c->strand, census_fn);
	pp.buf_size = BUS_BUF;
	pp.count = BUS_BUFS;
	err = ao_bufpool_create(&c->pool, &pp);
	if (err)
		goto fail;
	nc.url = o->url;
	nc.name = o->node;
	nc.exec = a->exec;
	nc.pool = c->pool;
	nc.send_asap = true;
	nc.direct = !o->cnats_reader;
	nc.strand = &c->strand;
	nc.on_peer = on_peer;
	nc.on_bus = on_bus;
	nc.arg = c;
	err = ao_node_create(&nc, &c->node);
	if (err == -ENOSYS) {
		fprintf(stderr, "ao-arena: --nats: built without NATS (nats.h "
				"was absent): no cluster\n");
		goto fail;
	}
	if (err)
		goto fail;
	err = ao_node_start(c->node);
	if (err) {
		fprintf(stderr, "ao-arena: --nats %s: %s\n", o->url,
			strerror(-err));
		goto fail;
	}
	c->epoch = ao_node_epoch(c->node);
	err = ao_kv_open(c->node, BUCKET, true, &c->dir);
	if (err) {
		fprintf(stderr, "ao-arena: the directory (KV %s): %s\n", BUCKET,
			strerror(-err));
		goto fail;
	}
	/* The cluster's tick origin. */
	snprintf(val, sizeof(val), "%" PRIu64, real_ns());
	kv_claim_sync(c, "t0", val);
	err = ao_kv_get_sync(c->dir, "t0", val, sizeof(val) - 1, &len, NULL);
	if (err)
		goto fail;
	val[len] = 0;
	snprintf(c->t0_val, sizeof(c->t0_val), "%s", val);
	t0 = strtoull(val, NULL, 10);
	now_r = real_ns();
	now_m = ao_timers_now(a->timers);
	if (t0 && t0 <= now_r && now_r - t0 < now_m)
		a->base = now_m - (now_r - t0);
	/* The node's index: the first free node.<k>. */
	dir_value(c, 0, val, sizeof(val));
	for (c->idx = 1; c->idx < 256; c->idx++) {
		snprintf(key, sizeof(key), "node.%u", c->idx);
		if (!kv_claim_sync(c, key, val))
			break;
	}
	if (c->idx == 256) {
		err = reuse_index(c, val);
		if (err == -ENOSPC)
			fprintf(stderr,
				"ao-arena: the directory (KV %s) has no "
				"node index to take: 255 nodes are live\n",
				BUCKET);
		if (err)
			goto fail;
	}
	a->id_base = c->idx << 24;
	a->id_span = (1u << 24) - 1;
	snprintf(subj, sizeof(subj), "ao.node.%s.in", c->name);
	err = ao_node_subscribe(c->node, subj, NULL, &c->strand, on_in, c,
				&c->sub_in);
	if (!err) {
		snprintf(subj, sizeof(subj), "ao.node.%s.create", c->name);
		err = ao_node_subscribe(c->node, subj, NULL, &c->strand,
					on_create, c, &c->sub_create);
	}
	if (!err)
		err = ao_node_subscribe(c->node, "ao.census", NULL, &c->strand,
					on_census, c, &c->sub_census);
	if (err)
		goto fail;
	ao_timer_arm_periodic(&c->census, ao_timers_now(a->timers) + MS,
			      CENSUS_MS * MS, 0);
	a->cl = c;
	if (!a->o.quiet)
		fprintf(stderr,
			"ao-arena: node %s (index %u) on %s; tick 0 at the "
			"cluster's t0\n",
			c->name, c->idx, o->url);
	return 0;
fail:
	if (c->dir)
		ao_kv_close(c->dir);
	if (c->node) {
		ao_node_stop(c->node);
		ao_node_destroy(c->node);
	}
	if (c->pool)
		ao_bufpool_destroy(c->pool);
	free(c);
	return err ? err : -EIO;
}

void cluster_stop(struct arena *a)
{
	struct cluster *c = a->cl;

	if (!c)
		return;
	ao_timer_cancel_sync(&c->census);
	if (c->sub_in)
		ao_sub_close(c->sub_in);
	if (c->sub_create)
		ao_sub_close(c->sub_create);
	if (c->sub_census)
		ao_sub_close(c->sub_census);
	c->sub_in = c->sub_create = c->sub_census = NULL;
	ao_spin_lock(&a->lobby);
	for (uint32_t i = 0; i < c->nrooms; i++) {
		struct croom *cr = c->rooms[i];

		if (cr->sub)
			ao_sub_close(cr->sub);
		cr->sub = NULL;
	}
	ao_spin_unlock(&a->lobby);
	ao_exec_drain(a->exec);
	if (c->restoring)
		pthread_join(c->restorer, NULL);
	c->restoring = false;
	ao_kv_close(c->dir);
	c->dir = NULL;
	ao_node_stop(c->node);
}

void cluster_drop_ghosts(struct arena *a)
{
	struct cluster *c = a->cl;

	for (uint32_t i = 0; i < a->nrooms; i++) {
		struct room *r = a->rooms[i];
		struct croom *cr = r->cl;

		for (uint32_t k = r->nmembers; k-- > 0;) {
			struct player *p = r->members[k];

			if (p->ghost) {
				member_remove(r, p);
				player_free(p);
			}
		}
		__atomic_store_n(&r->count, r->nmembers, __ATOMIC_RELAXED);
		/* (a proxy's players were freed by their disconnects) */
		if (cr)
			cr->leaving.n = cr->joining.n = 0;
	}
	for (uint32_t b = 0; b < GHOST_BUCKETS; b++) {
		while (c->ghosts[b]) {
			struct gnode *n = c->ghosts[b];

			c->ghosts[b] = n->next;
			free(n);
		}
	}
}

void cluster_destroy(struct arena *a)
{
	struct cluster *c = a->cl;

	if (!c)
		return;
	ao_node_destroy(c->node);
	for (uint32_t i = 0; i < a->nrooms; i++) {
		if (a->rooms[i]->cl)
			croom_free(a->rooms[i]->cl);
		a->rooms[i]->cl = NULL;
	}
	free(c->rooms);
	free(c->cen);
	ao_strand_destroy(&c->strand);
	ao_bufpool_destroy(c->pool);
	free(c);
	a->cl = NULL;
}

void cluster_stats(struct arena *a, struct cluster_stats *st)
{
	struct cluster *c = a->cl;
	struct ao_node_stats ns;

	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	ao_node_stats(c->node, &ns);
	st->msgs_in = ns.msgs_in;
	st->bytes_in = ns.bytes_in;
	st->msgs_out = ns.msgs_out;
	st->bytes_out = ns.bytes_out;
	st->pub_dropped = ns.pub_dropped;
	st->in_dropped = ns.in_dropped;
	st->requests = ns.requests;
	st->timeouts = ns.timeouts;
	st->no_responders = ns.no_responders;
	st->disconnects = ns.disconnects;
	st->reconnects = ns.reconnects;
	st->peers = ns.peers;
	st->peers_down = ns.peers_down;
	st->kv_ops = ns.kv_ops;
	st->kv_conflicts = ns.kv_conflicts;
	st->kv_errors = ns.kv_errors;
	st->connected = ns.connected;
	ao_spin_lock(&a->lobby);
	for (uint32_t i = 0; i < c->nrooms; i++) {
		if (c->rooms[i]->proxy)
			st->proxies++;
		else
			st->rooms_owned++;
	}
	for (uint32_t i = 0; i < a->nrooms; i++)
		if (a->rooms[i]->cl && LOAD(a->rooms[i]->cl->lost))
			st->rooms_lost++;
	st->rooms_spare = a->nspare;
	ao_spin_unlock(&a->lobby);
	st->forwarded = LOAD(c->n.forwarded);
	st->ghosts = LOAD(c->n.ghosts);
	st->stale = LOAD(c->n.stale);
	st->room_lost = LOAD(c->n.room_lost);
	st->takeovers = LOAD(c->n.takeovers);
	st->evicted = LOAD(c->n.evicted);
	st->fenced_ticks = LOAD(c->n.fenced_ticks);
	st->reclaimed = LOAD(c->n.reclaimed);
	st->snaps_out = LOAD(c->n.snaps_out);
	st->snaps_in = LOAD(c->n.snaps_in);
}
