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

#endif /* AORTA_CLUSTER_PRIV_H */
