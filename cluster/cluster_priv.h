/* SPDX-License-Identifier: MIT */
/*
 * What node.c and kv.c share: the node, its counters, and the errno a
 * cnats status stands for.
 */
#ifndef AORTA_CLUSTER_PRIV_H
#define AORTA_CLUSTER_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <nats/nats.h>
#include <aorta/cluster/kv.h>
#include <aorta/cluster/node.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/sync/spinlock.h>

/* Strands the node lends to subscriptions opened without one (hashed). */
#define NODE_SUB_STRANDS 8u
/* Buckets of the table of pending requests. */
#define NODE_REQ_BUCKETS 256u

struct ao_req;
struct node_direct;

struct ao_sub {
	struct ao_node *node;
	natsSubscription *ns; /* NULL when read by the node's own reader */
	struct ao_strand *strand;
	ao_msg_fn fn;
	void *arg;
	int refs; /* atomic: user, cnats or the reader's table, queued
		   * deliveries */
	bool closed; /* atomic */
	bool internal; /* the heartbeats: not in msgs_in/bytes_in */
	uint32_t sid; /* the reader's subscription id */
	struct ao_sub *dnext; /* the reader's table */
	char *subject, *queue; /* the reader's, for resubscribing */
};

struct node_peer {
	struct ao_peer p;
};

struct ao_node {
	char name[AO_NODE_NAME_MAX];
	char *url;
	struct ao_node_config cfg; /* defaults resolved; url, name ours */
	uint64_t epoch;
	struct ao_strand strand; /* heartbeats, peers, bus events */
	struct ao_strand sub_strands[NODE_SUB_STRANDS];
	struct ao_strand *ev; /* where on_peer/on_bus run */
	natsOptions *opts;
	natsConnection *nc;
	jsCtx *js;
	struct ao_sub *hb_sub;
	natsSubscription *reply_sub;
	char inbox[64]; /* this node's reply prefix, "_INBOX.<nuid>" */
	struct ao_timer hb_timer;
	bool started; /* ao_node_start() succeeded */
	bool stopping; /* atomic: ao_node_stop() began */
	bool connected; /* atomic: the bus is up */
	bool closed; /* atomic: cnats' last callback has come */
	bool bus_queued; /* atomic: bus_work is queued */
	bool bus_reported; /* node strand: what on_bus was told last */
	struct ao_work bus_work;
	struct ao_spinlock lock; /* peers, reqs, kv_exec */
	struct node_peer *peers; /* live peers, unordered */
	size_t npeers, peers_cap;
	struct ao_req *reqs[NODE_REQ_BUCKETS];
	uint64_t next_req; /* atomic */
	uint64_t load; /* atomic */
	uint64_t self_seen; /* atomic: send time of the newest own
			     * heartbeat that came back (monotonic ns) */
	uint64_t hb_seq; /* node strand */
	uint32_t sub_rr; /* atomic: next lent strand */
	int open_subs; /* atomic: subscriptions not closed by the user */
	int live_subs; /* atomic: subscription structs not freed */
	struct node_grave *graves; /* under lock: cnats subs to destroy */
	struct ao_exec *kv_exec; /* the thread KV calls block on */
	struct node_direct *direct; /* the own reader (cfg.direct) */
	struct ao_node_stats st; /* counters: atomic adds */
};

#define node_count(node, field, n) \
	__atomic_fetch_add(&(node)->st.field, (n), __ATOMIC_RELAXED)

/* CLOCK_MONOTONIC in ns. */
uint64_t ao__cluster_now(void);
/* The negative errno for a cnats status (0 for NATS_OK). */
int ao__nats_errno(natsStatus s);
/* Create the node's KV thread if it has none: 0, -ENOMEM. */
int ao__node_kv_exec(struct ao_node *node);
/* Copy a message and queue it on sub's strand (hold: run the turn here
 * when nobody has it); drops are counted. */
void ao__sub_deliver(struct ao_sub *sub, const char *subject, size_t slen,
		     const char *reply, size_t rlen, const void *data,
		     size_t len, bool hold);
/* Drop a hold on sub (the last frees it). */
void ao__sub_put(struct ao_sub *sub);

/* The node's own reader (direct.c): a second connection on which the
 * user's subscriptions are read by a thread of the node's. */
int ao__direct_start(struct ao_node *node);
/* Make it give up its connection and stop (not wait). */
void ao__direct_stop(struct ao_node *node);
/* Wait for its thread and free it. */
void ao__direct_free(struct ao_node *node);
/* Try to reconnect now (cnats is back). */
void ao__direct_kick(struct ao_node *node);
/* Add sub to the table and subscribe: 0 or -errno. */
int ao__direct_sub(struct ao_node *node, struct ao_sub *sub,
		   const char *subject, const char *queue);
/* Before a publish or request: wait (bounded) until the server has the
 * newest subscription, as cnats' one connection would order them. */
void ao__direct_settle(struct ao_node *node);
/* Take sub out of the table and unsubscribe; drops the table's hold. */
void ao__direct_unsub(struct ao_node *node, struct ao_sub *sub);

#endif /* AORTA_CLUSTER_PRIV_H */
