// SPDX-License-Identifier: MIT
/*
 * A node on the bus (aorta/cluster/node.h), on cnats.
 *
 * Threads.  cnats runs its own: a reader per connection, a flusher (unless
 * send_asap), one delivery thread shared by every subscription
 * (UseGlobalMessageDelivery: order per subscription is kept), a reconnect
 * thread while reconnecting.  None of them runs aorta code: the message
 * callback copies the payload into a pooled buffer and submits a work item
 * to the subscription's strand; the reply callback hands the reply to the
 * request's strand; the connection callbacks flip a flag and queue one
 * work item on the node's strand.  Everything the user sees runs there.
 * With cfg.direct the user's subscriptions are read by a thread of the
 * node's own instead (direct.c), which may run a free strand's turn.
 *
 * Lifetimes.  A subscription is freed when three kinds of holder are gone:
 * the user (ao_sub_close), cnats (its on-complete callback, which comes
 * after the last message callback, whether the subscription was closed by
 * us or by the connection) and each delivery queued on a strand.  A
 * request is held by its setup and by whoever completes it: the reply
 * callback, its timer, a disconnect or the stop, whichever takes it out of
 * the table first (under the node lock); the others find it gone.
 *
 * Heartbeats.  Every heartbeat_ms the node publishes {name, epoch, load,
 * send time} on ao.hb.<name> and reads everybody's on ao.hb.*, its own
 * included (NATS echoes by default).  A peer silent for dead_ms is
 * declared dead, but only while this node can show its own heartbeats come
 * back: after a stall of its own, or while the bus is down, silence proves
 * nothing about the others.  The send time of the newest own heartbeat
 * that came back is what ao_node_self_fresh() measures, so heartbeats
 * queued during a stall do not make a stale node look fresh.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include "cluster_priv.h"

#define HB_PREFIX "ao.hb."
#define HB_MAGIC "aohb1"
/* A blocked socket write (send_asap, or the flusher) gives up after this
 * long and the connection is treated as broken (then reconnected). */
#define NODE_WRITE_DEADLINE_MS 200
/* ao_node_destroy() waits this long for cnats and the strands to let go. */
#define NODE_DRAIN_MS 5000

/* One message on its way to a strand; subject and reply follow. */
struct delivery {
	struct ao_work work;
	struct ao_sub *sub;
	struct ao_buf *buf;
	char *reply; /* NULL or inside text */
	char text[];
};

struct ao_req {
	struct ao_work work; /* the completion, on s */
	struct ao_timer timer; /* the timeout, on s */
	struct ao_node *node;
	struct ao_req *next; /* table link */
	uint64_t id;
	struct ao_strand *s;
	ao_reply_fn fn;
	void *arg;
	int refs; /* atomic: setup, completion */
	int err;
	struct ao_buf *buf;
	char subject[AO_SUBJECT_MAX];
};

/* A peer or bus event for a strand other than the node's. */
struct node_event {
	struct ao_node *node;
	struct ao_peer peer;
	bool up;
	bool bus;
};

uint64_t ao__cluster_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ao__nats_errno(natsStatus s)
{
	switch (s) {
	case NATS_OK:
		return 0;
	case NATS_TIMEOUT:
		return -ETIMEDOUT;
	case NATS_NOT_FOUND:
		return -ENOENT;
	case NATS_INVALID_ARG:
	case NATS_INVALID_SUBJECT:
	case NATS_INVALID_QUEUE_NAME:
		return -EINVAL;
	case NATS_NO_MEMORY:
		return -ENOMEM;
	case NATS_INSUFFICIENT_BUFFER:
		return -ENOBUFS;
	case NATS_CONNECTION_CLOSED:
	case NATS_CONNECTION_DISCONNECTED:
	case NATS_NO_SERVER:
	case NATS_STALE_CONNECTION:
	case NATS_DRAINING:
		return -ENOTCONN;
	case NATS_MAX_PAYLOAD:
		return -EMSGSIZE;
	case NATS_NO_RESPONDERS:
		return -EHOSTUNREACH;
	default:
		return -EIO;
	}
}

static bool valid_name(const char *name)
{
	size_t n = 0;

	if (!name)
		return false;
	for (; name[n]; n++) {
		char c = name[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return n > 0 && n < AO_NODE_NAME_MAX;
}

static bool valid_subject(const char *subject)
{
	size_t n;

	if (!subject)
		return false;
	n = strlen(subject);
	return n > 0 && n < AO_SUBJECT_MAX && !strpbrk(subject, " \t\r\n");
}

/* ---------------------------------------------------------------------
 * Subscriptions
 */

/*
 * cnats 3.4's reader can still lock a subscription it looked up before an
 * unsubscribe removed it, after its last callback came (fixed in cnats
 * 3.6): destroyed at once, it aborted in natsConn_processMsg().  So a
 * subscription is destroyed once it has been closed GRAVE_NS, or with
 * the node once its connection is closed.
 */
#define GRAVE_NS (2000ull * 1000000ull)

struct node_grave {
	struct node_grave *next;
	natsSubscription *ns;
	uint64_t at;
};

static void graves_reap(struct ao_node *node, bool all)
{
	struct node_grave *keep = NULL, *dead = NULL, *g, *n;
	uint64_t now = ao__cluster_now();

	ao_spin_lock(&node->lock);
	for (g = node->graves; g; g = n) {
		n = g->next;
		if (all || now - g->at >= GRAVE_NS) {
			g->next = dead;
			dead = g;
		} else {
			g->next = keep;
			keep = g;
		}
	}
	node->graves = keep;
	ao_spin_unlock(&node->lock);
	for (g = dead; g; g = n) {
		n = g->next;
		natsSubscription_Destroy(g->ns);
		free(g);
	}
}

static void sub_bury(struct ao_node *node, natsSubscription *ns)
{
	struct node_grave *g = malloc(sizeof(*g));

	if (!g) { /* no memory: at once, as cnats would have it */
		natsSubscription_Destroy(ns);
		return;
	}
	g->ns = ns;
	g->at = ao__cluster_now();
	ao_spin_lock(&node->lock);
	g->next = node->graves;
	node->graves = g;
	ao_spin_unlock(&node->lock);
	graves_reap(node, false);
}

static void sub_put(struct ao_sub *sub)
{
	struct ao_node *node = sub->node;

	if (__atomic_sub_fetch(&sub->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (sub->ns)
		sub_bury(node, sub->ns);
	free(sub->subject);
	free(sub);
	/* Release: ao_node_destroy() reads 0 and frees the node. */
	__atomic_sub_fetch(&node->live_subs, 1, __ATOMIC_RELEASE);
}

static void delivery_run(struct ao_work *w)
{
	struct delivery *d = container_of(w, struct delivery, work);
	struct ao_sub *sub = d->sub;
	struct ao_node *node = sub->node;

	if (__atomic_load_n(&sub->closed, __ATOMIC_ACQUIRE)) {
		node_count(node, in_dropped, 1);
	} else {
		struct ao_msg msg = {
			.subject = d->text,
			.reply = d->reply,
			.buf = d->buf,
			.data = d->buf->data,
			.len = d->buf->len,
		};

		if (!sub->internal) {
			node_count(node, msgs_in, 1);
			node_count(node, bytes_in, d->buf->len);
		}
		sub->fn(&msg, sub->arg);
	}
	ao_buf_put(d->buf);
	free(d);
	sub_put(sub);
}

void ao__sub_put(struct ao_sub *sub)
{
	sub_put(sub);
}

/*
 * Copy a message into a pooled buffer and queue it on the subscription's
 * strand.  From cnats' delivery thread (hold false) or the node's own
 * reader (hold true: it runs the strand's turn itself when nobody else
 * has it, as the io ring does, saving a worker's wake-up).
 */
void ao__sub_deliver(struct ao_sub *sub, const char *subject, size_t slen,
		     const char *reply, size_t rlen, const void *data,
		     size_t len, bool hold)
{
	struct ao_node *node = sub->node;
	struct delivery *d = NULL;
	struct ao_buf *buf = NULL;
	int err;

	if (__atomic_load_n(&sub->closed, __ATOMIC_ACQUIRE))
		goto drop;
	buf = ao_buf_get(node->cfg.pool);
	if (!buf || len > buf->cap)
		goto drop;
	d = malloc(sizeof(*d) + slen + 1 + (rlen ? rlen + 1 : 0));
	if (!d)
		goto drop;
	memcpy(buf->data, data, len);
	buf->len = (uint32_t)len;
	memcpy(d->text, subject, slen);
	d->text[slen] = '\0';
	d->reply = NULL;
	if (rlen) {
		d->reply = d->text + slen + 1;
		memcpy(d->reply, reply, rlen);
		d->reply[rlen] = '\0';
	}
	d->sub = sub;
	d->buf = buf;
	ao_work_init(&d->work, delivery_run);
	__atomic_add_fetch(&sub->refs, 1, __ATOMIC_RELAXED);
	/* Blocks while a bounded executor is full: back-pressure on the
	 * reading thread, then cnats' pending limit or the socket's. */
	err = hold ? ao_strand_submit_hold(sub->strand, &d->work) :
		     ao_strand_submit(sub->strand, &d->work);
	if (err == 1)
		ao_strand_run_held(sub->strand,
				   __atomic_load_n(&sub->strand->batch,
						   __ATOMIC_RELAXED));
	if (err >= 0)
		return;
	sub_put(sub);
drop:
	node_count(node, in_dropped, 1);
	ao_buf_put(buf);
	free(d);
}

/* cnats' delivery thread: copy and hand over, nothing else. */
static void on_nats_msg(natsConnection *nc, natsSubscription *ns, natsMsg *m,
			void *closure)
{
	const char *reply = natsMsg_GetReply(m);
	const char *subject = natsMsg_GetSubject(m);
	int len = natsMsg_GetDataLength(m);

	(void)nc;
	(void)ns;
	if (len < 0) {
		node_count(((struct ao_sub *)closure)->node, in_dropped, 1);
	} else {
		ao__sub_deliver(closure, subject, strlen(subject), reply,
				reply ? strlen(reply) : 0, natsMsg_GetData(m),
				(size_t)len, false);
	}
	natsMsg_Destroy(m);
}

/* cnats: the last message callback of this subscription has returned. */
static void on_sub_complete(void *closure)
{
	sub_put(closure);
}

static int sub_open(struct ao_node *node, const char *subject,
		    const char *queue, struct ao_strand *s, ao_msg_fn fn,
		    void *arg, bool internal, struct ao_sub **out)
{
	struct ao_sub *sub;
	natsStatus ns;
	int err;

	sub = calloc(1, sizeof(*sub));
	if (!sub)
		return -ENOMEM;
	sub->node = node;
	sub->fn = fn;
	sub->arg = arg;
	sub->internal = internal;
	if (!s) {
		uint32_t i =
			__atomic_fetch_add(&node->sub_rr, 1, __ATOMIC_RELAXED);

		s = &node->sub_strands[i % NODE_SUB_STRANDS];
	}
	sub->strand = s;
	sub->refs = 2; /* the user's and cnats' (or the reader's table) */
	__atomic_add_fetch(&node->live_subs, 1, __ATOMIC_RELAXED);
	if (node->direct && !internal) {
		err = ao__direct_sub(node, sub, subject, queue);
		if (err) {
			__atomic_sub_fetch(&node->live_subs, 1,
					   __ATOMIC_RELAXED);
			free(sub->subject);
			free(sub);
			return err;
		}
		*out = sub;
		return 0;
	}
	if (queue && queue[0])
		ns = natsConnection_QueueSubscribe(&sub->ns, node->nc, subject,
						   queue, on_nats_msg, sub);
	else
		ns = natsConnection_Subscribe(&sub->ns, node->nc, subject,
					      on_nats_msg, sub);
	if (ns != NATS_OK) {
		__atomic_sub_fetch(&node->live_subs, 1, __ATOMIC_RELAXED);
		free(sub);
		return ao__nats_errno(ns);
	}
	ns = natsSubscription_SetOnCompleteCB(sub->ns, on_sub_complete, sub);
	if (ns != NATS_OK) {
		/* Closed already (the connection went): no callback will
		 * come, so cnats' hold ends here. */
		__atomic_sub_fetch(&sub->refs, 1, __ATOMIC_RELAXED);
	}
	*out = sub;
	return 0;
}

int ao_node_subscribe(struct ao_node *node, const char *subject,
		      const char *queue, struct ao_strand *s, ao_msg_fn handler,
		      void *arg, struct ao_sub **out)
{
	int err;

	if (!node || !valid_subject(subject) || !handler || !out)
		return -EINVAL;
	*out = NULL;
	if (!node->started ||
	    __atomic_load_n(&node->stopping, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	err = sub_open(node, subject, queue, s, handler, arg, false, out);
	if (!err)
		__atomic_add_fetch(&node->open_subs, 1, __ATOMIC_RELAXED);
	return err;
}

static void sub_close(struct ao_sub *sub)
{
	__atomic_store_n(&sub->closed, true, __ATOMIC_RELEASE);
	if (!sub->ns) {
		ao__direct_unsub(sub->node, sub);
	} else {
		/* Fails harmlessly when the connection closed it already. */
		natsSubscription_Unsubscribe(sub->ns);
	}
	sub_put(sub);
}

int ao_sub_close(struct ao_sub *sub)
{
	struct ao_node *node;

	if (!sub)
		return -EINVAL;
	node = sub->node;
	sub_close(sub);
	__atomic_sub_fetch(&node->open_subs, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---------------------------------------------------------------------
 * Publishing
 */

static int pub(struct ao_node *node, const char *subject, const char *reply,
	       const void *data, size_t len)
{
	natsStatus ns;
	int err;

	if (!node || !valid_subject(subject) || (len && !data) ||
	    len > INT32_MAX)
		return -EINVAL;
	if (!node->started ||
	    __atomic_load_n(&node->stopping, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (node->direct)
		ao__direct_settle(node);
	if (reply)
		ns = natsConnection_PublishRequest(node->nc, subject, reply,
						   data, (int)len);
	else
		ns = natsConnection_Publish(node->nc, subject, data, (int)len);
	err = ao__nats_errno(ns);
	if (err) {
		node_count(node, pub_dropped, 1);
		return err;
	}
	node_count(node, msgs_out, 1);
	node_count(node, bytes_out, len);
	return 0;
}

/* A heartbeat: counted in hb_sent, not in msgs_out. */
static int pub_hb(struct ao_node *node, const char *subject, const void *data,
		  size_t len)
{
	natsStatus ns;

	ns = natsConnection_Publish(node->nc, subject, data, (int)len);
	if (ns != NATS_OK)
		return ao__nats_errno(ns);
	node_count(node, hb_sent, 1);
	return 0;
}

int ao_node_publish(struct ao_node *node, const char *subject, const void *data,
		    size_t len)
{
	return pub(node, subject, NULL, data, len);
}

int ao_node_publish_buf(struct ao_node *node, const char *subject,
			const struct ao_buf *buf)
{
	if (!buf)
		return -EINVAL;
	return pub(node, subject, NULL, buf->data, buf->len);
}

int ao_node_respond(struct ao_node *node, const struct ao_msg *msg,
		    const void *data, size_t len)
{
	if (!msg || !msg->reply)
		return -EINVAL;
	return pub(node, msg->reply, NULL, data, len);
}

/* ---------------------------------------------------------------------
 * Requests
 */

static void req_free(struct ao_req *r)
{
	/* Its timer may still be armed if it was completed by another
	 * path before the setup armed it: make sure it is idle. */
	ao_timer_cancel_sync(&r->timer);
	ao_buf_put(r->buf);
	free(r);
}

static void req_put(struct ao_req *r)
{
	if (!__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL))
		req_free(r);
}

/* Take r out of the table: true if the caller is the one to complete it. */
static bool req_claim(struct ao_node *node, struct ao_req *r)
{
	struct ao_req **pp;
	bool found = false;

	ao_spin_lock(&node->lock);
	for (pp = &node->reqs[r->id % NODE_REQ_BUCKETS]; *pp;
	     pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			found = true;
			break;
		}
	}
	ao_spin_unlock(&node->lock);
	return found;
}

static struct ao_req *req_claim_id(struct ao_node *node, uint64_t id)
{
	struct ao_req **pp, *r = NULL;

	ao_spin_lock(&node->lock);
	for (pp = &node->reqs[id % NODE_REQ_BUCKETS]; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			r = *pp;
			*pp = r->next;
			break;
		}
	}
	ao_spin_unlock(&node->lock);
	return r;
}

static void req_count(struct ao_node *node, int err)
{
	switch (err) {
	case 0:
		node_count(node, replies, 1);
		break;
	case -ETIMEDOUT:
		node_count(node, timeouts, 1);
		break;
	case -EHOSTUNREACH:
		node_count(node, no_responders, 1);
		break;
	default:
		node_count(node, req_failed, 1);
		break;
	}
}

static void req_call(struct ao_req *r)
{
	struct ao_msg msg;

	req_count(r->node, r->err);
	if (r->err) {
		r->fn(r->err, NULL, r->arg);
		return;
	}
	msg = (struct ao_msg){
		.subject = r->subject,
		.reply = NULL,
		.buf = r->buf,
		.data = r->buf->data,
		.len = r->buf->len,
	};
	node_count(r->node, msgs_in, 1);
	node_count(r->node, bytes_in, r->buf->len);
	r->fn(0, &msg, r->arg);
}

/* On r->s: whoever claimed r completes it here. */
static void req_done(struct ao_work *w)
{
	struct ao_req *r = container_of(w, struct ao_req, work);

	/* On the timer's strand, so it is not running: a fired one that
	 * waits on the strand is dropped. */
	ao_timer_cancel(&r->timer);
	req_call(r);
	req_put(r);
}

/* Complete a claimed request with err (and r->buf) on its strand. */
static void req_post(struct ao_req *r, int err)
{
	r->err = err;
	ao_work_init(&r->work, req_done);
	if (ao_strand_submit(r->s, &r->work) < 0) {
		/* The executor is shutting down: nobody will run it. */
		req_count(r->node, -ECANCELED);
		req_put(r);
	}
}

static void req_timeout(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct ao_req *r = container_of(t, struct ao_req, timer);

	(void)ev;
	/* Completed in an item of its own, not here: the timer service
	 * touches the timer after its callback returns, and req_done() may
	 * free it. */
	if (req_claim(r->node, r))
		req_post(r, -ETIMEDOUT);
}

/* Fail every pending request with err (a disconnect, the stop). */
static void req_fail_all(struct ao_node *node, int err)
{
	struct ao_req *list = NULL, *r;
	unsigned int i;

	ao_spin_lock(&node->lock);
	for (i = 0; i < NODE_REQ_BUCKETS; i++) {
		while ((r = node->reqs[i])) {
			node->reqs[i] = r->next;
			r->next = list;
			list = r;
		}
	}
	ao_spin_unlock(&node->lock);
	while ((r = list)) {
		list = r->next;
		req_post(r, err);
	}
}

/* cnats: a reply (or a no-responders status) on this node's inbox. */
static void on_nats_reply(natsConnection *nc, natsSubscription *ns, natsMsg *m,
			  void *closure)
{
	struct ao_node *node = closure;
	const char *subject = natsMsg_GetSubject(m);
	const char *dot = strrchr(subject, '.');
	struct ao_req *r = NULL;
	int len = natsMsg_GetDataLength(m);
	int err = 0;

	(void)nc;
	(void)ns;
	if (dot)
		r = req_claim_id(node, strtoull(dot + 1, NULL, 10));
	if (!r) {
		node_count(node, in_dropped, 1); /* late: timed out */
		natsMsg_Destroy(m);
		return;
	}
	if (natsMsg_IsNoResponders(m)) {
		err = -EHOSTUNREACH;
	} else {
		r->buf = ao_buf_get(node->cfg.pool);
		if (!r->buf || len < 0 || (uint32_t)len > r->buf->cap) {
			err = r->buf ? -EMSGSIZE : -ENOBUFS;
			ao_buf_put(r->buf);
			r->buf = NULL;
		} else {
			memcpy(r->buf->data, natsMsg_GetData(m), (size_t)len);
			r->buf->len = (uint32_t)len;
			snprintf(r->subject, sizeof(r->subject), "%s", subject);
		}
	}
	natsMsg_Destroy(m);
	req_post(r, err);
}

int ao_node_request(struct ao_node *node, const char *subject, const void *data,
		    size_t len, uint32_t timeout_ms, struct ao_strand *s,
		    ao_reply_fn reply, void *arg)
{
	char inbox[sizeof(node->inbox) + 24];
	struct ao_req *r, **pp;
	int err;

	if (!node || !valid_subject(subject) || !reply || (len && !data))
		return -EINVAL;
	if (!node->started ||
	    __atomic_load_n(&node->stopping, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (!__atomic_load_n(&node->connected, __ATOMIC_ACQUIRE)) {
		node_count(node, req_failed, 1);
		return -ENOTCONN;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->node = node;
	r->s = s ? s : &node->strand;
	r->fn = reply;
	r->arg = arg;
	r->refs = 2; /* this setup, and the completion */
	r->id = __atomic_add_fetch(&node->next_req, 1, __ATOMIC_RELAXED);
	err = ao_timer_init_strand(&r->timer, r->s, req_timeout);
	if (err) {
		free(r);
		return err;
	}
	snprintf(inbox, sizeof(inbox), "%s.%" PRIu64, node->inbox, r->id);
	ao_spin_lock(&node->lock);
	pp = &node->reqs[r->id % NODE_REQ_BUCKETS];
	r->next = *pp;
	*pp = r;
	ao_spin_unlock(&node->lock);
	node_count(node, requests, 1);
	ao_timer_arm(&r->timer, (uint64_t)timeout_ms * 1000000ull);
	err = pub(node, subject, inbox, data, len);
	if (err && req_claim(node, r)) {
		/* Not sent, and nobody else completed it: the caller hears
		 * the error from the return value alone. */
		ao_timer_cancel_sync(&r->timer);
		node_count(node, req_failed, 1);
		free(r);
		return err;
	}
	req_put(r);
	return 0;
}

/* ---------------------------------------------------------------------
 * Peers and heartbeats
 */

static void event_run(void *arg)
{
	struct node_event *e = arg;
	struct ao_node *node = e->node;

	if (e->bus) {
		if (node->cfg.on_bus)
			node->cfg.on_bus(node, e->up, node->cfg.arg);
	} else if (node->cfg.on_peer) {
		node->cfg.on_peer(node, &e->peer, e->up, node->cfg.arg);
	}
	free(e);
}

/* On the node's strand: tell the user, on the strand they chose. */
static void emit(struct ao_node *node, const struct ao_peer *peer, bool up,
		 bool bus)
{
	struct node_event *e;

	if (bus ? !node->cfg.on_bus : !node->cfg.on_peer)
		return;
	if (node->ev == &node->strand) {
		if (bus)
			node->cfg.on_bus(node, up, node->cfg.arg);
		else
			node->cfg.on_peer(node, peer, up, node->cfg.arg);
		return;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->node = node;
	if (peer)
		e->peer = *peer;
	e->up = up;
	e->bus = bus;
	if (ao_strand_call(node->ev, event_run, e) < 0)
		free(e);
}

static void hb_in(struct ao_msg *msg, void *arg)
{
	struct ao_node *node = arg;
	char text[160], name[AO_NODE_NAME_MAX];
	uint64_t epoch, load, sent, now = ao__cluster_now();
	struct ao_peer old, fresh;
	bool restarted = false, added = false;
	size_t i;

	node_count(node, hb_in, 1);
	if (msg->len >= sizeof(text))
		return;
	memcpy(text, msg->data, msg->len);
	text[msg->len] = '\0';
	if (sscanf(text, HB_MAGIC " %63s %" SCNu64 " %" SCNu64 " %" SCNu64,
		   name, &epoch, &load, &sent) != 4)
		return;
	if (!strcmp(name, node->name)) {
		uint64_t seen;

		if (epoch != node->epoch)
			return; /* a node of the same name: not ours */
		seen = __atomic_load_n(&node->self_seen, __ATOMIC_RELAXED);
		while (sent > seen &&
		       !__atomic_compare_exchange_n(
			       &node->self_seen, &seen, sent, false,
			       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		return;
	}
	ao_spin_lock(&node->lock);
	for (i = 0; i < node->npeers; i++)
		if (!strcmp(node->peers[i].p.name, name))
			break;
	if (i == node->npeers) {
		if (node->npeers == node->peers_cap) {
			size_t cap = node->peers_cap ? node->peers_cap * 2 : 16;
			struct node_peer *p;

			p = realloc(node->peers, cap * sizeof(*p));
			if (!p) {
				ao_spin_unlock(&node->lock);
				return;
			}
			node->peers = p;
			node->peers_cap = cap;
		}
		memset(&node->peers[i], 0, sizeof(node->peers[i]));
		snprintf(node->peers[i].p.name, AO_NODE_NAME_MAX, "%s", name);
		node->peers[i].p.epoch = epoch;
		node->npeers++;
		added = true;
	} else if (node->peers[i].p.epoch != epoch) {
		old = node->peers[i].p;
		node->peers[i].p.epoch = epoch;
		restarted = true;
	}
	node->peers[i].p.load = load;
	node->peers[i].p.last_seen_ns = now;
	fresh = node->peers[i].p;
	ao_spin_unlock(&node->lock);
	if (restarted) {
		node_count(node, peers_down, 1);
		emit(node, &old, false, false);
	}
	if (added || restarted) {
		node_count(node, peers_up, 1);
		emit(node, &fresh, true, false);
	}
}

static void hb_tick(struct ao_timer *t, const struct ao_timer_event *ev)
{
	struct ao_node *node = container_of(t, struct ao_node, hb_timer);
	uint64_t now = ao__cluster_now();
	uint64_t dead_ns = (uint64_t)node->cfg.dead_ms * 1000000ull;
	char text[160], subject[sizeof(HB_PREFIX) + AO_NODE_NAME_MAX];
	struct ao_peer gone[16];
	size_t i, n;
	int len;

	(void)ev;
	if (__atomic_load_n(&node->connected, __ATOMIC_ACQUIRE)) {
		len = snprintf(text, sizeof(text),
			       HB_MAGIC " %s %" PRIu64 " %" PRIu64 " %" PRIu64,
			       node->name, node->epoch,
			       __atomic_load_n(&node->load, __ATOMIC_RELAXED),
			       now);
		snprintf(subject, sizeof(subject), HB_PREFIX "%s", node->name);
		pub_hb(node, subject, text, (size_t)len);
	}
	if (!ao_node_self_fresh(node, node->cfg.dead_ms))
		return;
	do {
		n = 0;
		ao_spin_lock(&node->lock);
		for (i = 0; i < node->npeers && n < 16;) {
			if (now - node->peers[i].p.last_seen_ns > dead_ns &&
			    node->peers[i].p.last_seen_ns < now) {
				gone[n++] = node->peers[i].p;
				node->peers[i] = node->peers[--node->npeers];
			} else {
				i++;
			}
		}
		ao_spin_unlock(&node->lock);
		for (i = 0; i < n; i++) {
			node_count(node, peers_down, 1);
			emit(node, &gone[i], false, false);
		}
	} while (n == 16);
}

/* On the node's strand: report the bus state if it changed. */
static void bus_run(struct ao_work *w)
{
	struct ao_node *node = container_of(w, struct ao_node, bus_work);
	bool up;

	__atomic_store_n(&node->bus_queued, false, __ATOMIC_RELEASE);
	up = __atomic_load_n(&node->connected, __ATOMIC_ACQUIRE);
	if (up == node->bus_reported)
		return;
	node->bus_reported = up;
	emit(node, NULL, up, true);
}

static void bus_changed(struct ao_node *node, bool up)
{
	/* Release: pairs with the acquire loads of the publish and request
	 * paths and of bus_run(). */
	__atomic_store_n(&node->connected, up, __ATOMIC_RELEASE);
	if (!__atomic_exchange_n(&node->bus_queued, true, __ATOMIC_ACQ_REL)) {
		ao_work_init(&node->bus_work, bus_run);
		if (ao_strand_submit(&node->strand, &node->bus_work) < 0)
			__atomic_store_n(&node->bus_queued, false,
					 __ATOMIC_RELEASE);
	}
}

static void on_disconnected(natsConnection *nc, void *closure)
{
	struct ao_node *node = closure;

	(void)nc;
	node_count(node, disconnects, 1);
	bus_changed(node, false);
	/* Replies to pending requests may be lost with the connection:
	 * fail them now rather than at their timeouts. */
	req_fail_all(node, __atomic_load_n(&node->stopping, __ATOMIC_ACQUIRE) ?
				   -ECANCELED :
				   -ENOTCONN);
}

/* cnats: an asynchronous error.  A slow consumer (a subscription past
 * cnats' pending limit, 65,536 messages) has lost messages: counted. */
static void on_error(natsConnection *nc, natsSubscription *ns, natsStatus s,
		     void *closure)
{
	struct ao_node *node = closure;

	(void)nc;
	(void)ns;
	if (s == NATS_SLOW_CONSUMER)
		node_count(node, in_dropped, 1);
}

/* cnats: the connection is closed; its last callback (they come in order
 * on cnats' callback thread), so after it nothing of cnats touches the
 * node. */
static void on_closed(natsConnection *nc, void *closure)
{
	struct ao_node *node = closure;

	(void)nc;
	/* Release: pairs with the acquire in node_drained(). */
	__atomic_store_n(&node->closed, true, __ATOMIC_RELEASE);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
	struct ao_node *node = closure;

	(void)nc;
	node_count(node, reconnects, 1);
	bus_changed(node, true);
	if (node->direct)
		ao__direct_kick(node);
}

/* ---------------------------------------------------------------------
 * The node
 */

int ao_node_create(const struct ao_node_config *cfg, struct ao_node **out)
{
	struct ao_node *node;
	struct timespec ts;
	unsigned int i;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg || !cfg->url || !cfg->exec || !cfg->pool ||
	    !valid_name(cfg->name) || !ao_timers_of(cfg->exec))
		return -EINVAL;
	node = calloc(1, sizeof(*node));
	if (!node)
		return -ENOMEM;
	node->url = strdup(cfg->url);
	if (!node->url) {
		free(node);
		return -ENOMEM;
	}
	snprintf(node->name, sizeof(node->name), "%s", cfg->name);
	node->cfg = *cfg;
	node->cfg.url = node->url;
	node->cfg.name = node->name;
#define DEF(f, d)                          \
	do {                               \
		if (!node->cfg.f)          \
			node->cfg.f = (d); \
	} while (0)
	DEF(heartbeat_ms, AO_NODE_DEFAULT_HEARTBEAT_MS);
	DEF(dead_ms, AO_NODE_DEFAULT_DEAD_MS);
	DEF(ping_ms, AO_NODE_DEFAULT_PING_MS);
	DEF(pings_out, AO_NODE_DEFAULT_PINGS_OUT);
	DEF(reconnect_ms, AO_NODE_DEFAULT_RECONNECT_MS);
	DEF(connect_ms, AO_NODE_DEFAULT_CONNECT_MS);
	DEF(pub_buffer, AO_NODE_DEFAULT_PUB_BUFFER);
#undef DEF
	clock_gettime(CLOCK_REALTIME, &ts);
	node->epoch =
		(uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	ao_strand_init(&node->strand, cfg->exec);
	for (i = 0; i < NODE_SUB_STRANDS; i++)
		ao_strand_init(&node->sub_strands[i], cfg->exec);
	node->ev = cfg->strand ? cfg->strand : &node->strand;
	ao_spin_init(&node->lock);
	ao_timer_init_strand(&node->hb_timer, &node->strand, hb_tick);
	*out = node;
	return 0;
}

static natsStatus node_options(struct ao_node *node)
{
	const struct ao_node_config *c = &node->cfg;
	natsOptions *o;
	natsStatus s;

	s = natsOptions_Create(&o);
	if (s != NATS_OK)
		return s;
	node->opts = o;
	/* A comma-separated list of urls is a server list to cnats. */
	s = natsOptions_SetURL(o, c->url);
	if (s == NATS_OK)
		s = natsOptions_SetName(o, c->name);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, c->connect_ms);
	/* cnats pings every 2 minutes by default: a hung server would go
	 * unnoticed that long. */
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(o, c->ping_ms);
	if (s == NATS_OK)
		s = natsOptions_SetMaxPingsOut(o, (int)c->pings_out);
	if (s == NATS_OK)
		s = natsOptions_SetAllowReconnect(o, true);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(o, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(o, c->reconnect_ms);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectJitter(o, c->reconnect_ms / 4, 0);
	/* While reconnecting, publishes wait in this buffer; past it they
	 * fail (NATS_INSUFFICIENT_BUFFER: -ENOBUFS, counted). */
	if (s == NATS_OK)
		s = natsOptions_SetReconnectBufSize(o, (int)c->pub_buffer);
	if (s == NATS_OK)
		s = natsOptions_SetWriteDeadline(o, NODE_WRITE_DEADLINE_MS);
	if (s == NATS_OK)
		s = natsOptions_SetSendAsap(o, c->send_asap);
	/* One delivery thread for every subscription, not one each. */
	if (s == NATS_OK)
		s = natsOptions_UseGlobalMessageDelivery(o, true);
	if (s == NATS_OK)
		s = natsOptions_SetDisconnectedCB(o, on_disconnected, node);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(o, on_reconnected, node);
	if (s == NATS_OK)
		s = natsOptions_SetClosedCB(o, on_closed, node);
	if (s == NATS_OK)
		s = natsOptions_SetErrorHandler(o, on_error, node);
	return s;
}

int ao_node_start(struct ao_node *node)
{
	char subject[AO_SUBJECT_MAX];
	natsInbox *inbox = NULL;
	natsStatus s;
	uint64_t period;
	int err;

	if (!node)
		return -EINVAL;
	if (node->started || node->nc)
		return -EALREADY;
	s = node_options(node);
	if (s == NATS_OK)
		s = natsConnection_Connect(&node->nc, node->opts);
	if (s != NATS_OK) {
		err = s == NATS_NO_SERVER || s == NATS_TIMEOUT ?
			      -ECONNREFUSED :
			      ao__nats_errno(s);
		goto fail;
	}
	__atomic_store_n(&node->connected, true, __ATOMIC_RELEASE);
	node->bus_reported = true;
	s = natsConnection_JetStream(&node->js, node->nc, NULL);
	if (s == NATS_OK)
		s = natsInbox_Create(&inbox);
	if (s == NATS_OK) {
		snprintf(node->inbox, sizeof(node->inbox), "%s", inbox);
		natsInbox_Destroy(inbox);
		snprintf(subject, sizeof(subject), "%s.*", node->inbox);
		s = natsConnection_Subscribe(&node->reply_sub, node->nc,
					     subject, on_nats_reply, node);
	}
	if (s != NATS_OK) {
		err = ao__nats_errno(s);
		goto fail;
	}
	node->started = true;
	err = sub_open(node, HB_PREFIX "*", NULL, &node->strand, hb_in, node,
		       true, &node->hb_sub);
	if (err)
		goto fail;
	if (node->cfg.direct) {
		err = ao__direct_start(node);
		if (err)
			goto fail;
	}
	period = (uint64_t)node->cfg.heartbeat_ms * 1000000ull;
	err = ao_timer_arm_periodic(&node->hb_timer,
				    ao_timers_now(ao_timers_of(node->cfg.exec)),
				    period, 0);
	if (err)
		goto fail;
	return 0;
fail:
	ao_node_stop(node);
	node->started = false;
	return err;
}

int ao_node_stop(struct ao_node *node)
{
	if (!node)
		return -EINVAL;
	if (__atomic_exchange_n(&node->stopping, true, __ATOMIC_ACQ_REL))
		return 0;
	ao_timer_cancel_sync(&node->hb_timer);
	if (node->hb_sub) {
		sub_close(node->hb_sub);
		node->hb_sub = NULL;
	}
	if (node->direct)
		ao__direct_stop(node);
	if (node->nc)
		natsConnection_Close(node->nc);
	__atomic_store_n(&node->connected, false, __ATOMIC_RELEASE);
	req_fail_all(node, -ECANCELED);
	return 0;
}

/* Wait (bounded) until cnats and the strands have let go of the node. */
static bool node_drained(struct ao_node *node)
{
	uint64_t end = ao__cluster_now() + NODE_DRAIN_MS * 1000000ull;
	struct timespec ms = { 0, 1000000 };
	unsigned int i;

	for (;;) {
		bool idle =
			!__atomic_load_n(&node->live_subs, __ATOMIC_ACQUIRE) &&
			(!node->nc ||
			 __atomic_load_n(&node->closed, __ATOMIC_ACQUIRE)) &&
			ao_strand_idle(&node->strand);

		for (i = 0; idle && i < NODE_SUB_STRANDS; i++)
			idle = ao_strand_idle(&node->sub_strands[i]);
		if (idle)
			return true;
		if (ao__cluster_now() > end)
			return false;
		nanosleep(&ms, NULL);
	}
}

int ao_node_destroy(struct ao_node *node)
{
	unsigned int i;

	if (!node)
		return 0;
	if (__atomic_load_n(&node->open_subs, __ATOMIC_ACQUIRE))
		return -EBUSY;
	ao_node_stop(node);
	if (node->reply_sub) {
		natsSubscription_Unsubscribe(node->reply_sub);
		natsSubscription_Destroy(node->reply_sub);
		node->reply_sub = NULL;
	}
	if (node->direct)
		ao__direct_free(node);
	if (!node_drained(node))
		return -EBUSY;
	graves_reap(node, true);
	if (node->kv_exec) {
		ao_exec_destroy(node->kv_exec);
		node->kv_exec = NULL;
	}
	jsCtx_Destroy(node->js);
	natsConnection_Destroy(node->nc);
	natsOptions_Destroy(node->opts);
	ao_strand_destroy(&node->strand);
	for (i = 0; i < NODE_SUB_STRANDS; i++)
		ao_strand_destroy(&node->sub_strands[i]);
	free(node->peers);
	free(node->url);
	free(node);
	return 0;
}

int ao__node_kv_exec(struct ao_node *node)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex = NULL;
	int err = 0;

	ao_spin_lock(&node->lock);
	if (node->kv_exec) {
		ao_spin_unlock(&node->lock);
		return 0;
	}
	ao_spin_unlock(&node->lock);
	cfg.workers = 1;
	cfg.name = "ao-kv";
	err = ao_exec_create(&cfg, &ex);
	if (err)
		return err;
	ao_spin_lock(&node->lock);
	if (!node->kv_exec) {
		node->kv_exec = ex;
		ex = NULL;
	}
	ao_spin_unlock(&node->lock);
	if (ex)
		ao_exec_destroy(ex);
	return 0;
}

const char *ao_node_name(const struct ao_node *node)
{
	return node->name;
}

uint64_t ao_node_epoch(const struct ao_node *node)
{
	return node->epoch;
}

void ao_node_set_load(struct ao_node *node, uint64_t load)
{
	__atomic_store_n(&node->load, load, __ATOMIC_RELAXED);
}

size_t ao_node_peers(struct ao_node *node, struct ao_peer *out, size_t max)
{
	size_t i, n;

	ao_spin_lock(&node->lock);
	n = node->npeers;
	for (i = 0; i < n && i < max; i++)
		out[i] = node->peers[i].p;
	ao_spin_unlock(&node->lock);
	return n;
}

int ao_node_peer(struct ao_node *node, const char *name, struct ao_peer *out)
{
	int err = -ENOENT;
	size_t i;

	if (!node || !name)
		return -EINVAL;
	ao_spin_lock(&node->lock);
	for (i = 0; i < node->npeers; i++) {
		if (!strcmp(node->peers[i].p.name, name)) {
			if (out)
				*out = node->peers[i].p;
			err = 0;
			break;
		}
	}
	ao_spin_unlock(&node->lock);
	return err;
}

bool ao_node_self_fresh(struct ao_node *node, uint32_t within_ms)
{
	uint64_t seen = __atomic_load_n(&node->self_seen, __ATOMIC_RELAXED);
	uint64_t now = ao__cluster_now();

	return seen && now - seen < (uint64_t)within_ms * 1000000ull;
}

bool ao_node_connected(struct ao_node *node)
{
	return __atomic_load_n(&node->connected, __ATOMIC_ACQUIRE);
}

void ao_node_stats(struct ao_node *node, struct ao_node_stats *st)
{
	uint64_t *dst = (uint64_t *)st;
	const uint64_t *src = (const uint64_t *)&node->st;
	size_t i;

	/* Every counter but peers and connected is a uint64_t, up to
	 * peers_down; copy them one by one, atomically. */
	for (i = 0; i < offsetof(struct ao_node_stats, peers) / 8; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	st->kv_ops = __atomic_load_n(&node->st.kv_ops, __ATOMIC_RELAXED);
	st->kv_conflicts =
		__atomic_load_n(&node->st.kv_conflicts, __ATOMIC_RELAXED);
	st->kv_errors = __atomic_load_n(&node->st.kv_errors, __ATOMIC_RELAXED);
	ao_spin_lock(&node->lock);
	st->peers = (uint32_t)node->npeers;
	ao_spin_unlock(&node->lock);
	st->connected = ao_node_connected(node);
}
