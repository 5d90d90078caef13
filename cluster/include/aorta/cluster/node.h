/* SPDX-License-Identifier: MIT */
/*
 * A node on the bus: one aorta process connected to NATS, with a name and
 * a boot epoch, heartbeats that give it a table of live peers, and
 * subscriptions, publishes and requests whose handlers run on strands.
 *
 *	struct ao_node_config cfg = AO_NODE_CONFIG_INIT;
 *	cfg.url = "nats://127.0.0.1:4222";
 *	cfg.name = "n1";
 *	cfg.exec = ex;		(has a timer service: core/timer.h)
 *	cfg.pool = pool;	(messages arrive in its buffers)
 *	ao_node_create(&cfg, &node);
 *	ao_node_start(node);	(blocks until connected: setup code only)
 *	ao_node_subscribe(node, "ao.room.7.in", NULL, &room->strand,
 *			  on_input, room, &room->sub);
 *	ao_node_publish(node, "ao.room.7.out", snap, len);
 *	...
 *	ao_node_stop(node);
 *	ao_node_destroy(node);
 *
 * cnats' threads (reader, flusher, delivery) never run aorta code: each
 * message is copied into a pooled buffer and handed to a strand.  Every
 * handler and callback of this header runs on a strand of cfg->exec
 * (with cfg->direct, a subscription's strand may take its turn on the
 * node's own reader thread instead of a worker).
 * Functions return 0 or a negative errno.
 */
#ifndef AORTA_CLUSTER_NODE_H
#define AORTA_CLUSTER_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_buf;
struct ao_bufpool;
struct ao_exec;
struct ao_strand;
struct ao_node;
struct ao_sub;

/* Longest node name, with its NUL; names are [A-Za-z0-9_-]+. */
#define AO_NODE_NAME_MAX 64u
/* Longest subject, with its NUL. */
#define AO_SUBJECT_MAX 256u

/* Defaults of the config fields left 0. */
#define AO_NODE_DEFAULT_HEARTBEAT_MS 100u
#define AO_NODE_DEFAULT_DEAD_MS 600u
#define AO_NODE_DEFAULT_PING_MS 500u
#define AO_NODE_DEFAULT_PINGS_OUT 2u
#define AO_NODE_DEFAULT_RECONNECT_MS 250u
#define AO_NODE_DEFAULT_CONNECT_MS 2000u
#define AO_NODE_DEFAULT_PUB_BUFFER (1u << 20)

/* A live peer, as its heartbeats tell (a copy). */
struct ao_peer {
	char name[AO_NODE_NAME_MAX];
	uint64_t epoch; /* its boot epoch (a new one after a restart) */
	uint64_t load; /* what it last passed to ao_node_set_load() */
	uint64_t last_seen_ns; /* CLOCK_MONOTONIC of its last heartbeat */
};

/* A message handed to a handler; everything in it is lent for the call. */
struct ao_msg {
	const char *subject;
	const char *reply; /* where to respond, or NULL */
	struct ao_buf *buf; /* the payload: ao_buf_ref() it to keep it */
	const void *data; /* buf->data */
	size_t len; /* buf->len */
};

/* A subscription's handler: on the subscription's strand, in order. */
typedef void (*ao_msg_fn)(struct ao_msg *msg, void *arg);
/* A request's completion: err 0 and the reply, or err < 0 and NULL. */
typedef void (*ao_reply_fn)(int err, struct ao_msg *reply, void *arg);
/* A peer came up (up) or was declared dead (!up). */
typedef void (*ao_peer_fn)(struct ao_node *node, const struct ao_peer *peer,
			   bool up, void *arg);
/* The connection to the bus was (re)established or lost. */
typedef void (*ao_bus_fn)(struct ao_node *node, bool connected, void *arg);

struct ao_node_config {
	const char *url; /* NATS url(s), comma separated (required) */
	const char *name; /* this node's name (required) */
	struct ao_exec *exec; /* handlers run on its strands; it must have
			       * a timer service (required) */
	struct ao_bufpool *pool; /* payloads arrive in its buffers; a
				  * message larger than one is dropped and
				  * counted (required) */
	uint32_t heartbeat_ms; /* heartbeat period; 0: default */
	uint32_t dead_ms; /* a peer silent this long is dead; 0: default */
	uint32_t ping_ms; /* NATS ping interval; 0: default */
	uint32_t pings_out; /* unanswered pings before the connection is
			     * dropped; 0: default */
	uint32_t reconnect_ms; /* wait between reconnect tries; 0: default */
	uint32_t connect_ms; /* ao_node_start()'s connect timeout; 0: def. */
	uint32_t pub_buffer; /* bytes of publishes that may wait for the
			      * socket or a reconnect; past it publishes fail
			      * with -ENOBUFS; 0: default */
	bool send_asap; /* write each publish at once (cnats SendAsap)
			 * instead of the flusher, which batches for up to
			 * a millisecond */
	bool direct; /* read subscriptions on a second connection, on a
		      * thread of the node's own that runs a free strand's
		      * turn itself (two wake-ups fewer per message) */
	struct ao_strand *strand; /* where on_peer/on_bus run; NULL: the
				   * node's own */
	ao_peer_fn on_peer; /* optional */
	ao_bus_fn on_bus; /* optional */
	void *arg; /* for on_peer and on_bus */
};

#define AO_NODE_CONFIG_INIT                                                    \
	{                                                                      \
		.url = NULL, .name = NULL, .exec = NULL, .pool = NULL,         \
		.heartbeat_ms = 0, .dead_ms = 0, .ping_ms = 0, .pings_out = 0, \
		.reconnect_ms = 0, .connect_ms = 0, .pub_buffer = 0,           \
		.send_asap = false, .direct = false, .strand = NULL,           \
		.on_peer = NULL, .on_bus = NULL, .arg = NULL,                  \
	}

/* Counters since create (a racy snapshot). */
struct ao_node_stats {
	uint64_t msgs_in; /* messages handed to handlers and replies (the
			   * heartbeats are counted apart) */
	uint64_t bytes_in;
	uint64_t msgs_out; /* publishes, responses and requests sent */
	uint64_t bytes_out;
	uint64_t pub_dropped; /* publishes refused: -ENOBUFS, -ENOTCONN */
	uint64_t in_dropped; /* arrivals dropped: too large, no buffer,
			      * subscription closed, late replies; cnats'
			      * slow-consumer reports (once per report) */
	uint64_t requests; /* requests sent */
	uint64_t replies; /* of those, answered */
	uint64_t timeouts; /* of those, -ETIMEDOUT */
	uint64_t no_responders; /* of those, -EHOSTUNREACH */
	uint64_t req_failed; /* of those, -ENOTCONN or -ECANCELED */
	uint64_t disconnects; /* connection lost */
	uint64_t reconnects; /* connection back */
	uint64_t direct_connects; /* connections the own reader made
				   * (cfg.direct): 1, then one a loss */
	uint64_t direct_unsettled; /* publishes that went before the
				    * server confirmed the newest
				    * subscription (it took over 10 ms) */
	uint64_t hb_sent; /* heartbeats published */
	uint64_t hb_in; /* heartbeats received (own ones included) */
	uint64_t peers_up; /* peers seen coming up */
	uint64_t peers_down; /* peers declared dead */
	uint32_t peers; /* live peers now */
	bool connected; /* the bus is up now */
	uint64_t kv_ops; /* KV operations completed (aorta/cluster/kv.h) */
	uint64_t kv_conflicts; /* of those, -EEXIST or -ESTALE */
	uint64_t kv_errors; /* of those, other errors */
};

/* Create a node (not connected yet).  -EINVAL (a required field missing,
 * a bad name), -ENOMEM, -ENOSYS (built without cnats). */
AO_API int ao_node_create(const struct ao_node_config *cfg,
			  struct ao_node **out);
/* Connect, subscribe to heartbeats and start sending them.  Blocks up to
 * connect_ms: setup code only, never a ring thread or a tick.  Later
 * losses of the bus are retried for ever.  -ECONNREFUSED, -EALREADY. */
AO_API int ao_node_start(struct ao_node *node);
/* Stop heartbeats and close the connection (abruptly: peers see the
 * heartbeats stop); pending requests complete with -ECANCELED.  Blocks
 * until cnats has let go; never call it from a strand of the node. */
AO_API int ao_node_stop(struct ao_node *node);
/* Free a node whose subscriptions are closed (stopping it first); waits
 * up to 5 s for cnats and the node's strands to let go: never call it
 * from a strand of the node.  -EBUSY (subscriptions open, or a wait that
 * ran out: the node is not freed). */
AO_API int ao_node_destroy(struct ao_node *node);

/* The node's name. */
AO_API const char *ao_node_name(const struct ao_node *node);
/* Its boot epoch: CLOCK_REALTIME ns at create, unique per start. */
AO_API uint64_t ao_node_epoch(const struct ao_node *node);
/* The load carried in the next heartbeats (rooms, players: the caller's). */
AO_API void ao_node_set_load(struct ao_node *node, uint64_t load);
/* Copy up to max live peers (this node not included) into out; returns how
 * many are live (possibly more than max). */
AO_API size_t ao_node_peers(struct ao_node *node, struct ao_peer *out,
			    size_t max);
/* One live peer by name: 0, or -ENOENT. */
AO_API int ao_node_peer(struct ao_node *node, const char *name,
			struct ao_peer *out);
/* True if a heartbeat this node sent within the last within_ms came back
 * from the bus: it can show it is connected and not stalled.  A node
 * that cannot must stop acting as an owner (fencing). */
AO_API bool ao_node_self_fresh(struct ao_node *node, uint32_t within_ms);
/* True while connected to the bus (a snapshot). */
AO_API bool ao_node_connected(struct ao_node *node);
/* Counters. */
AO_API void ao_node_stats(struct ao_node *node, struct ao_node_stats *st);

/* Subscribe to subject (wildcards allowed), in queue group queue or NULL.
 * Messages run handler(msg, arg) on strand s (NULL: a strand of the
 * subscription's own on the node's executor), one at a time, in the order
 * the bus delivered them.  -EINVAL, -ENOTCONN (never started), -ENOMEM. */
AO_API int ao_node_subscribe(struct ao_node *node, const char *subject,
			     const char *queue, struct ao_strand *s,
			     ao_msg_fn handler, void *arg, struct ao_sub **out);
/* Unsubscribe and free; messages already queued are dropped (counted).
 * Called on the subscription's strand, no handler of it runs after it
 * returns; from another thread one may still be running. */
AO_API int ao_sub_close(struct ao_sub *sub);

/* Publish a copy of data; never waits for the network.  -ENOBUFS when
 * pub_buffer bytes are waiting already (the bus is down or slow: counted
 * in pub_dropped), -ENOTCONN (stopped), -EINVAL (bad subject). */
AO_API int ao_node_publish(struct ao_node *node, const char *subject,
			   const void *data, size_t len);
/* The same with a pooled buffer's len bytes (still the caller's). */
AO_API int ao_node_publish_buf(struct ao_node *node, const char *subject,
			       const struct ao_buf *buf);
/* Send a request; reply runs exactly once on strand s (NULL: the node's
 * strand) with 0 and the reply, -ETIMEDOUT after timeout_ms (aorta's
 * timers), -EHOSTUNREACH as soon as the bus says nobody subscribes,
 * -ENOTCONN when the connection drops meanwhile, -ECANCELED at stop.
 * Returns 0, or a negative errno and reply is not called: -ENOTCONN (the
 * bus is down now), -ENOBUFS, -EINVAL, -ENOMEM. */
AO_API int ao_node_request(struct ao_node *node, const char *subject,
			   const void *data, size_t len, uint32_t timeout_ms,
			   struct ao_strand *s, ao_reply_fn reply, void *arg);
/* Answer a request message: publish data to msg->reply.  -EINVAL when the
 * message has no reply subject; otherwise as ao_node_publish(). */
AO_API int ao_node_respond(struct ao_node *node, const struct ao_msg *msg,
			   const void *data, size_t len);

#endif /* AORTA_CLUSTER_NODE_H */
