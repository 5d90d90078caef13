// SPDX-License-Identifier: MIT
/*
 * embed: the embedding README.md shows (its excerpt is on_packet() and
 * main()): a server with three handlers and a state per connection.
 * Packets have a 2-byte length prefix (len16 framing); each comes back as
 * it came, and a closing connection says how many it sent.  It prints
 * port=N once it listens on 127.0.0.1 and stops cleanly on SIGINT or
 * SIGTERM.  tcp_service.c is the same idea with more words.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <aorta/io/server.h>

struct session {
	unsigned long packets;
};

static void on_open(struct ao_conn *c, void *arg)
{
	(void)arg;
	ao_conn_set_user(c, calloc(1, sizeof(struct session)));
}

static void on_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	struct session *s = ao_conn_user(c);

	(void)arg;
	fprintf(stderr, "connection %llu: %lu packets, %s\n",
		(unsigned long long)ao_conn_id(c), s ? s->packets : 0,
		ao_close_reason_name(why));
	free(s);
}

/* On the connection's strand: its packets in order, one at a time. */
static int on_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	struct session *s = ao_conn_user(c);

	(void)arg;
	if (!s)
		return -ENOMEM; /* closes this connection, and only it */
	s->packets++;
	ao_conn_send_packet(c, pkt); /* echo: the send takes a reference */
	return 0;
}

int main(void)
{
	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
	struct ao_server *srv;
	sigset_t stop;
	int err, sig;

	cfg.framing.kind = AO_FRAME_LEN16;
	cfg.handlers.on_open = on_open;
	cfg.handlers.on_packet = on_packet;
	cfg.handlers.on_close = on_close;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL); /* before any thread starts */

	if (ao_server_create(&cfg, &srv))
		return 1;
	err = ao_server_start(srv);
	if (!err) {
		printf("port=%u\n", ao_server_port(srv));
		fflush(stdout);
		sigwait(&stop, &sig);
		err = ao_server_stop(srv); /* answer what is in flight, close */
	}
	return ao_server_destroy(srv) || err ? 1 : 0;
}
