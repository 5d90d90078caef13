// SPDX-License-Identifier: MIT
/*
 * chat: one chat room; every message goes to every member.
 *
 * Each message is a packet with a 2-byte length prefix (len16 framing).
 * The server writes "[id] text" into one buffer from its pool and sends
 * that same buffer to every member: each send takes a reference of its own
 * and drops it when its bytes are on the wire, and the buffer goes back to
 * the pool after the last one.  One copy of the message, however many
 * members.
 *
 *	chat [ADDRESS [PORT]]		(default 127.0.0.1, an ephemeral port)
 *
 * The member list is guarded by a three-phase lock (ao_spinlock).  The
 * sends happen outside it: the broadcast takes a reference on each member
 * under the lock, then sends and drops the references with the lock
 * released, so one slow member never holds up the room's lock.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/server.h>
#include <aorta/sync/spinlock.h>

#define MAX_MEMBERS 256

struct room {
	struct ao_spinlock lock;
	struct ao_conn *member[MAX_MEMBERS]; /* each holds a reference */
	unsigned int n;
	struct ao_server *srv;
};

static struct room room = { .lock = AO_SPINLOCK_INIT };

/* Send one buffer to every member. */
static void broadcast(struct room *r, struct ao_buf *msg)
{
	struct ao_conn *to[MAX_MEMBERS];
	unsigned int n = 0;

	scoped_guard(ao_spinlock, &r->lock)
	{
		for (n = 0; n < r->n; n++)
			to[n] = ao_conn_get(r->member[n]);
	}
	for (unsigned int i = 0; i < n; i++) {
		/* Each send takes its own reference on msg.  A member that
		 * left meanwhile refuses it (-ENOTCONN, or -EPIPE once a
		 * WebSocket's close frame is queued): that is fine. */
		ao_conn_send_packet(to[i], msg);
		ao_conn_put(to[i]);
	}
}

/* A message from the server's pool: prefix + text. */
static void say(struct room *r, const char *prefix, const void *text,
		uint32_t len)
{
	struct ao_buf *msg = ao_buf_get(ao_server_pool(r->srv));
	size_t pl = strlen(prefix);

	if (!msg)
		return; /* pool exhausted: drop this one message */
	if (pl + len > msg->cap)
		len = msg->cap - (uint32_t)pl;
	memcpy(msg->data, prefix, pl);
	memcpy((char *)msg->data + pl, text, len);
	msg->len = (uint32_t)pl + len;
	broadcast(r, msg);
	ao_buf_put(msg); /* ours; the sends hold their own */
}

/* Who says it: "[3] " for a message, "* 3 joined" for news (what). */
static const char *tag(char *buf, size_t size, struct ao_conn *c,
		       const char *what)
{
	unsigned long long id = ao_conn_id(c);

	if (what)
		snprintf(buf, size, "* %llu %s", id, what);
	else
		snprintf(buf, size, "[%llu] ", id);
	return buf;
}

static void on_open(struct ao_conn *c, void *arg)
{
	struct room *r = arg;
	bool joined = false;
	char t[32];

	scoped_guard(ao_spinlock, &r->lock)
	{
		if (r->n < MAX_MEMBERS) {
			r->member[r->n++] = ao_conn_get(c);
			joined = true;
		}
	}
	if (!joined) {
		ao_conn_close(c); /* the room is full */
		return;
	}
	say(r, tag(t, sizeof(t), c, "joined"), "", 0);
}

static int on_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	char t[32];

	say(arg, tag(t, sizeof(t), c, NULL), pkt->data, pkt->len);
	return 0;
}

static void on_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	struct room *r = arg;
	struct ao_conn *gone = NULL;
	char t[32];

	(void)why;
	scoped_guard(ao_spinlock, &r->lock)
	{
		for (unsigned int i = 0; i < r->n; i++) {
			if (r->member[i] == c) {
				gone = c;
				r->member[i] = r->member[--r->n];
				break;
			}
		}
	}
	if (!gone)
		return; /* never joined (the room was full) */
	ao_conn_put(gone);
	say(r, tag(t, sizeof(t), c, "left"), "", 0);
}

int main(int argc, char **argv)
{
	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
	sigset_t stop;
	int err, sig;

	cfg.address = argc > 1 ? argv[1] : "127.0.0.1";
	cfg.port = argc > 2 ? (uint16_t)atoi(argv[2]) : 0;
	cfg.framing.kind = AO_FRAME_LEN16;
	cfg.framing.max_packet = 1024;
	cfg.flags = AO_SERVER_QUIET;
	cfg.handlers.on_open = on_open;
	cfg.handlers.on_packet = on_packet;
	cfg.handlers.on_close = on_close;
	cfg.handlers.arg = &room;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	err = ao_server_create(&cfg, &room.srv);
	if (!err)
		err = ao_server_start(room.srv);
	if (err) {
		fprintf(stderr, "chat: %s\n", strerror(-err));
		ao_server_destroy(room.srv);
		return 1;
	}
	printf("port=%u\n", ao_server_port(room.srv));
	fflush(stdout);
	sigwait(&stop, &sig);

	/* Stopping closes every connection; on_close drops the room's
	 * references, so destroy finds none left. */
	err = ao_server_stop(room.srv);
	if (ao_server_destroy(room.srv) || err)
		return 1;
	return 0;
}
