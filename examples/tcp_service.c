// SPDX-License-Identifier: MIT
/*
 * tcp_service: the smallest embedding of the aorta server.
 *
 * A TCP service that answers every packet with the same bytes in upper
 * case.  It shows what a program needs and nothing more: a configuration,
 * three handlers, start, wait for a signal, stop, destroy.
 *
 *	tcp_service [ADDRESS [PORT]]	(default 127.0.0.1, an ephemeral port)
 *	$ ./tcp_service :: 7000 &	(:: = IPv6 and IPv4 clients)
 *	$ echo hello | nc -q1 localhost 7000
 *	HELLO
 *
 * It prints port=N once it listens, and stops cleanly on SIGINT or
 * SIGTERM.  Build it against an installed aorta with
 *
 *	cc tcp_service.c $(pkg-config --cflags --libs aorta)
 *
 * The handlers run on each connection's strand, on the server's executor:
 * one connection's handlers in order and one at a time, connections in
 * parallel.  A handler gets a borrowed connection and a borrowed packet:
 * whatever it keeps past the call, it takes a reference on.
 */
#include <ctype.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/server.h>

/* A connection arrived: say who it is (either address family). */
static void on_open(struct ao_conn *c, void *arg)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";

	(void)arg;
	if (!ao_conn_peer_addr(c, (struct sockaddr *)&peer, &len))
		getnameinfo((struct sockaddr *)&peer, len, host, sizeof(host),
			    port, sizeof(port),
			    NI_NUMERICHOST | NI_NUMERICSERV);
	fprintf(stderr, "connection %llu from %s port %s\n",
		(unsigned long long)ao_conn_id(c), host, port);
}

/*
 * One packet.  With the default (raw) framing a packet is whatever one
 * receive brought in.  The packet is ours for the call, so we may change
 * its bytes before sending it back; the send takes its own reference and
 * returns the buffer to the pool once the bytes are on the wire.
 */
static int on_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	unsigned char *p = pkt->data;

	(void)arg;
	for (uint32_t i = 0; i < pkt->len; i++)
		p[i] = (unsigned char)toupper(p[i]);
	/* A refused send (the peer is gone, or reads too slowly) closes the
	 * connection by itself: nothing to undo here. */
	ao_conn_send_packet(c, pkt);
	return 0;
}

static void on_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	(void)arg;
	fprintf(stderr, "connection %llu closed: %s\n",
		(unsigned long long)ao_conn_id(c), ao_close_reason_name(why));
}

int main(int argc, char **argv)
{
	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
	struct ao_server *srv;
	sigset_t stop;
	int err, sig;

	cfg.address = argc > 1 ? argv[1] : "127.0.0.1";
	cfg.port = argc > 2 ? (uint16_t)atoi(argv[2]) : 0;
	cfg.flags = AO_SERVER_QUIET;
	cfg.handlers.on_open = on_open;
	cfg.handlers.on_packet = on_packet;
	cfg.handlers.on_close = on_close;

	/* Block the stop signals before any thread starts, so that every
	 * thread inherits the mask and sigwait() below receives them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	err = ao_server_create(&cfg, &srv);
	if (err) {
		fprintf(stderr, "tcp_service: %s: %s\n", cfg.address,
			strerror(-err));
		return 1;
	}
	err = ao_server_start(srv);
	if (err) {
		fprintf(stderr, "tcp_service: cannot listen: %s\n",
			strerror(-err));
		ao_server_destroy(srv);
		return 1;
	}
	printf("port=%u\n", ao_server_port(srv));
	fflush(stdout);

	sigwait(&stop, &sig);

	/* Answer what is in flight (up to the drain timeout), close every
	 * connection, then free everything the server made. */
	err = ao_server_stop(srv);
	if (ao_server_destroy(srv) || err)
		return 1;
	return 0;
}
