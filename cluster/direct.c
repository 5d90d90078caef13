// SPDX-License-Identifier: MIT
/*
 * The node's own reader (cfg.direct): the user's subscriptions are read on
 * a second NATS connection by a thread of the node's, not by cnats.
 *
 * Why.  Through cnats a message wakes three threads on this side: cnats'
 * reader, cnats' delivery thread (they hand over through a condition
 * variable) and the strand's worker.  Here one thread reads the socket,
 * copies the payload into a pooled buffer and, when nobody has the strand,
 * takes its turn and runs the handler itself (ao_strand_submit_hold(), as
 * the io ring does); a busy strand gets the item queued as before.  On two
 * CPUs shared with nats-server and other nodes each wake-up is tens of
 * microseconds, and a message between two nodes crosses this path twice
 * per round trip.
 *
 * What it speaks.  The NATS client protocol's subscriber half: INFO,
 * CONNECT (verbose off, no headers), PING/PONG, SUB, UNSUB, MSG.  Plain
 * TCP only; the server is the one cnats is connected to at the time
 * (natsConnection_GetConnectedUrl()), so the two connections follow each
 * other over a server list.  Publishes, requests, replies, heartbeats and
 * the directory stay on cnats.
 *
 * Connection.  Lost (EOF, error, a write past its deadline), it is dialled
 * again every DIRECT_RETRY_MS, at once when cnats reconnects, and every
 * subscription in the table is sent again.  Messages published while it is
 * down are lost, as they are for cnats' subscriptions.
 *
 * Locks.  wlock orders everything written to the socket (SUB, UNSUB, PONG)
 * with the table and the connection's state; tlock guards the table, which
 * the reader looks up per message.  Order: wlock, then tlock.  Only the
 * reader thread closes the socket, after taking it out under wlock.
 *
 * Ordering.  A SUB travels on this connection, a later publish of the
 * same node on cnats': nats-server reads the two connections apart, so
 * the publish could overtake the SUB and its answer find no subscriber
 * (a join forwarded to a room's owner, whose first snapshot carries the
 * joined record).  cnats keeps that order, both on one connection, so
 * this must too: each SUB is followed by a PING, and a publish or
 * request waits (ao__direct_settle(), up to DIRECT_SETTLE_MS) until the
 * PONG of the newest SUB is in.  One round trip, only for the first
 * publish after a subscribe.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <aorta/sync/futex.h>
#include "cluster_priv.h"

#define DIRECT_BUCKETS 256u
/* Received bytes are parsed in place: a message larger than this is
 * skipped (and counted), whatever the pool's buffers hold. */
#define DIRECT_RBUF (256u * 1024u)
/* The start of a protocol line that is kept and looked at, and the most
 * a MSG line may take (a longer one is an error). */
#define DIRECT_LINE_MAX 4096u
/* A longer line other than MSG (INFO) is read to its CRLF, only its start
 * kept; one longer than this is an error. */
#define DIRECT_LONG_LINE_MAX (1024u * 1024u)
/* Wait between dials while the server is not there. */
#define DIRECT_RETRY_MS 100u
/* A publish after a subscribe waits at most this long for the server to
 * have it (then goes anyway: the server is slow or the connection is
 * being dialled again, when the order cannot hold either). */
#define DIRECT_SETTLE_MS 10u
/* A blocked write gives up after this long (then the connection is
 * dropped and dialled again), as cnats' write deadline. */
#define DIRECT_WRITE_MS 200u

struct node_direct {
	struct ao_node *node;
	pthread_t thread;
	bool thread_ok;
	struct ao_spinlock wlock; /* fd, up, next_sid, socket writes */
	int fd; /* -1: none; closed by the reader only */
	bool up; /* handshake done, the table subscribed */
	bool stop; /* atomic */
	bool kick; /* atomic: dial now */
	uint32_t next_sid;
	uint32_t pings; /* under wlock: PINGs sent after a SUB */
	uint32_t want; /* atomic: the PING after the newest SUB */
	uint32_t pongs; /* atomic, a futex: PINGs answered (or given up) */
	struct ao_spinlock tlock; /* the table */
	struct ao_sub *table[DIRECT_BUCKETS];
	char *rbuf;
	size_t rpos, rlen;
	size_t skip; /* bytes of an oversized message still to drop */
	size_t drop; /* > 0: the length so far of a long line being dropped */
	bool refused; /* the reader: said so since the last connection */
};

/* The reader whose thread this is, if any. */
static __thread struct node_direct *reading;

static bool stopping(struct node_direct *d)
{
	/* Acquire: pairs with the release in ao__direct_stop(). */
	return __atomic_load_n(&d->stop, __ATOMIC_ACQUIRE);
}

/* Write all of p, or -errno (a timeout is -EAGAIN). */
static int dwrite(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Under wlock: write to the live connection; a failed write drops it
 * (the reader sees EOF, dials again and resubscribes everything). */
static void dsend(struct node_direct *d, const char *p, size_t n)
{
	if (!d->up || d->fd < 0)
		return;
	if (dwrite(d->fd, p, n))
		shutdown(d->fd, SHUT_RDWR);
}

static void set_timeout(int fd, int opt, uint32_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/*
 * Read one line of the handshake into line (NUL-terminated, no CRLF).
 * A line longer than line is read to its CRLF and only its start kept:
 * a cluster's INFO lists every server's connect_urls and can exceed any
 * fixed buffer, and the start is all that is looked at ("INFO " and
 * tls_required, which nats-server writes before the urls).  Byte by byte,
 * so that nothing after the line is taken from the socket; up to
 * DIRECT_LONG_LINE_MAX, so that a broken peer cannot keep us reading.
 */
static int read_line(int fd, char *line, size_t cap)
{
	size_t n = 0, total = 0;
	char c, prev = '\0';

	for (;;) {
		ssize_t r = recv(fd, &c, 1, 0);

		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		total++;
		if (n + 1 < cap)
			line[n++] = c;
		if (prev == '\r' && c == '\n') {
			/* The CRLF is bytes total - 2 and total - 1. */
			if (n > total - 2)
				n = total - 2;
			line[n] = '\0';
			return 0;
		}
		if (total >= DIRECT_LONG_LINE_MAX)
			return -EPROTO;
		prev = c;
	}
}

/*
 * Split "nats://[user:pass@]host:port" (the scheme optional, the host
 * maybe in brackets).  Returns 0 or -EPROTONOSUPPORT (tls://, ws://).
 */
static int parse_url(char *url, char **user, char **pass, char **host,
		     const char **port)
{
	char *p = url, *at, *colon;

	*user = *pass = NULL;
	if (strstr(p, "://")) {
		if (strncasecmp(p, "nats://", 7))
			return -EPROTONOSUPPORT;
		p += 7;
	}
	at = strrchr(p, '@');
	if (at) {
		*at = '\0';
		*user = p;
		colon = strchr(p, ':');
		if (colon) {
			*colon = '\0';
			*pass = colon + 1;
		}
		p = at + 1;
	}
	*port = "4222";
	if (*p == '[') {
		*host = ++p;
		p = strchr(p, ']');
		if (!p)
			return -EINVAL;
		*p++ = '\0';
		if (*p == ':')
			*port = p + 1;
	} else {
		*host = p;
		colon = strrchr(p, ':');
		if (colon) {
			*colon = '\0';
			*port = colon + 1;
		}
	}
	return **host && **port ? 0 : -EINVAL;
}

/* A JSON string without escapes, or NULL (then it is not sent). */
static bool json_plain(const char *s)
{
	for (; s && *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			return false;
	return true;
}

/*
 * Connect to the server cnats is on and shake hands: INFO in, CONNECT and
 * PING out, PONG in.  The socket is d->fd from its creation (so that
 * ao__direct_stop() can cut a dial short); returns 0 or -errno.
 */
static int dial(struct node_direct *d)
{
	struct ao_node *node = d->node;
	const struct ao_node_config *c = &node->cfg;
	char url[256], line[DIRECT_LINE_MAX], *user, *pass, *host;
	const char *port;
	struct addrinfo hints = { 0 }, *ai = NULL;
	int fd = -1, err, one = 1, len;

	if (natsConnection_GetConnectedUrl(node->nc, url, sizeof(url)) !=
		    NATS_OK ||
	    !url[0])
		return -ENOTCONN;
	err = parse_url(url, &user, &pass, &host, &port);
	if (err)
		return err;
	if (!json_plain(user) || !json_plain(pass))
		return -EINVAL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, port, &hints, &ai) || !ai)
		return -EHOSTUNREACH;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	ao_spin_lock(&d->wlock);
	if (stopping(d)) {
		ao_spin_unlock(&d->wlock);
		close(fd);
		err = -ECANCELED;
		goto out;
	}
	d->fd = fd;
	ao_spin_unlock(&d->wlock);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* The connect and the handshake are bounded by connect_ms. */
	set_timeout(fd, SO_SNDTIMEO, c->connect_ms);
	set_timeout(fd, SO_RCVTIMEO, c->connect_ms);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		err = errno == EINPROGRESS ? -ETIMEDOUT : -errno;
		goto out;
	}
	err = read_line(fd, line, sizeof(line));
	if (err)
		goto out;
	if (strncmp(line, "INFO ", 5)) {
		err = -EPROTO;
		goto out;
	}
	if (strstr(line, "\"tls_required\":true")) {
		err = -EPROTONOSUPPORT;
		goto out;
	}
	len = snprintf(line, sizeof(line),
		       "CONNECT {\"verbose\":false,\"pedantic\":false,"
		       "\"tls_required\":false,\"name\":\"%s/direct\","
		       "\"lang\":\"C\",\"version\":\"aorta\",\"protocol\":1,"
		       "\"echo\":true,\"headers\":false%s%s%s%s%s%s}\r\n"
		       "PING\r\n",
		       node->name, user ? ",\"user\":\"" : "", user ? user : "",
		       user ? "\"" : "", pass ? ",\"pass\":\"" : "",
		       pass ? pass : "", pass ? "\"" : "");
	if (len < 0 || (size_t)len >= sizeof(line)) {
		err = -EINVAL;
		goto out;
	}
	err = dwrite(fd, line, (size_t)len);
	if (err)
		goto out;
	for (;;) {
		err = read_line(fd, line, sizeof(line));
		if (err)
			goto out;
		if (!strcmp(line, "PONG"))
			break;
		if (!strncmp(line, "-ERR", 4)) {
			/* Once until a connection is made: dials come every
			 * DIRECT_RETRY_MS. */
			if (!d->refused)
				fprintf(stderr,
					"aorta: node %s: the bus refused the "
					"reader's connection: %s\n",
					node->name, line);
			d->refused = true;
			err = -EACCES;
			goto out;
		}
		if (!strcmp(line, "PING")) {
			err = dwrite(fd, "PONG\r\n", 6);
			if (err)
				goto out;
		}
	}
	/* From here reads block until data, EOF or ao__direct_stop()'s
	 * shutdown; writes give up after DIRECT_WRITE_MS. */
	set_timeout(fd, SO_RCVTIMEO, 0);
	set_timeout(fd, SO_SNDTIMEO, DIRECT_WRITE_MS);
	d->refused = false;
	err = 0;
out:
	freeaddrinfo(ai);
	return err;
}

/* Format "SUB subject [queue] sid\r\n" into out (cap at least
 * 2 * AO_SUBJECT_MAX + 32). */
static size_t sub_line(char *out, size_t cap, const struct ao_sub *sub)
{
	int n;

	if (sub->queue)
		n = snprintf(out, cap, "SUB %s %s %u\r\n", sub->subject,
			     sub->queue, sub->sid);
	else
		n = snprintf(out, cap, "SUB %s %u\r\n", sub->subject, sub->sid);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Under wlock, after SUBs were sent: a PING whose PONG tells they are in. */
static void sub_ping(struct node_direct *d)
{
	if (!d->up)
		return;
	dsend(d, "PING\r\n", 6);
	/* Release: pairs with the acquire in ao__direct_settle(). */
	__atomic_store_n(&d->want, ++d->pings, __ATOMIC_RELEASE);
}

/* The reader: n more PINGs answered (or, the connection gone, given up:
 * nobody waits for a PONG that will not come). */
static void pongs_set(struct node_direct *d, uint32_t v)
{
	/* Release: pairs with the acquire in ao__direct_settle(). */
	__atomic_store_n(&d->pongs, v, __ATOMIC_RELEASE);
	ao_futex_wake(&d->pongs, INT_MAX);
}

/* The handshake is done: subscribe the whole table and go live. */
static void go_live(struct node_direct *d)
{
	size_t cap = 4096, n = 0, i;
	char *buf = malloc(cap);
	struct ao_sub *sub;

	ao_spin_lock(&d->wlock);
	ao_spin_lock(&d->tlock);
	for (i = 0; buf && i < DIRECT_BUCKETS; i++) {
		for (sub = d->table[i]; sub && buf; sub = sub->dnext) {
			if (cap - n < 2 * AO_SUBJECT_MAX + 32) {
				char *nb = realloc(buf, cap * 2);

				if (!nb) {
					free(buf);
					buf = NULL;
					break;
				}
				buf = nb;
				cap *= 2;
			}
			n += sub_line(buf + n, cap - n, sub);
		}
	}
	ao_spin_unlock(&d->tlock);
	d->up = true;
	if (!buf) {
		shutdown(d->fd, SHUT_RDWR); /* no memory: dial again */
	} else if (n) {
		dsend(d, buf, n);
		sub_ping(d);
	}
	ao_spin_unlock(&d->wlock);
	free(buf);
}

/* Take the socket out and close it (the reader only). */
static void hang_up(struct node_direct *d)
{
	int fd;

	ao_spin_lock(&d->wlock);
	fd = d->fd;
	d->fd = -1;
	d->up = false;
	pongs_set(d, d->pings);
	ao_spin_unlock(&d->wlock);
	if (fd >= 0)
		close(fd);
	d->rpos = d->rlen = d->skip = d->drop = 0;
}

static void deliver(struct node_direct *d, uint32_t sid, const char *subject,
		    size_t slen, const char *reply, size_t rlen,
		    const char *data, size_t len)
{
	struct ao_sub *sub;

	ao_spin_lock(&d->tlock);
	for (sub = d->table[sid % DIRECT_BUCKETS]; sub; sub = sub->dnext)
		if (sub->sid == sid)
			break;
	/* The table's hold keeps sub alive until we take our own. */
	if (sub)
		__atomic_add_fetch(&sub->refs, 1, __ATOMIC_RELAXED);
	ao_spin_unlock(&d->tlock);
	if (!sub) { /* closed meanwhile */
		node_count(d->node, in_dropped, 1);
		return;
	}
	ao__sub_deliver(sub, subject, slen, reply, rlen, data, len, true);
	ao__sub_put(sub);
}

/* Split the arguments of a MSG line: subject sid [reply] size. */
static int msg_args(char *p, char *end, char **tok, size_t *tlen)
{
	int n = 0;

	while (p < end) {
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p == end)
			break;
		if (n == 4)
			return -EPROTO;
		tok[n] = p;
		while (p < end && *p != ' ' && *p != '\t')
			p++;
		tlen[n] = (size_t)(p - tok[n]);
		n++;
	}
	return n == 3 || n == 4 ? n : -EPROTO;
}

static int parse_num(const char *p, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!n || n > 19)
		return -EPROTO;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EPROTO;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	if (v > max)
		return -EPROTO;
	*out = v;
	return 0;
}

/* A line other than MSG, or the start of a long one (llen of it). */
static void control_line(struct node_direct *d, const char *line, size_t llen)
{
	if (llen == 4 && !strncasecmp(line, "PING", 4)) {
		ao_spin_lock(&d->wlock);
		dsend(d, "PONG\r\n", 6);
		ao_spin_unlock(&d->wlock);
	} else if (llen >= 4 && !strncasecmp(line, "-ERR", 4)) {
		/* The server closes after most errors: the EOF makes us
		 * dial again.  Its start, as of a long line. */
		fprintf(stderr, "aorta: node %s: the bus: %.*s\n",
			d->node->name,
			(int)(llen < DIRECT_LINE_MAX ? llen : DIRECT_LINE_MAX),
			line);
	}
	if (llen == 4 && !strncasecmp(line, "PONG", 4))
		pongs_set(d, __atomic_load_n(&d->pongs, __ATOMIC_RELAXED) + 1);
	/* +OK, INFO: nothing to do. */
}

/*
 * Drop what is in rbuf of a long line whose start was handled, up to its
 * CRLF; 0 or -EPROTO past DIRECT_LONG_LINE_MAX.  A final CR is left in
 * rbuf: its LF may be in the next read.
 */
static int drop_line(struct node_direct *d)
{
	char *line = d->rbuf + d->rpos;
	size_t avail = d->rlen - d->rpos, k;
	char *nl = memmem(line, avail, "\r\n", 2);

	if (nl) {
		d->rpos += (size_t)(nl - line) + 2;
		d->drop = 0;
		return 0;
	}
	k = line[avail - 1] == '\r' ? avail - 1 : avail;
	d->rpos += k;
	d->drop += k;
	return d->drop > DIRECT_LONG_LINE_MAX ? -EPROTO : 0;
}

/* Handle every whole item in rbuf[rpos, rlen); 0 or -EPROTO. */
static int parse(struct node_direct *d)
{
	while (d->rpos < d->rlen) {
		char *line = d->rbuf + d->rpos, *nl, *tok[4];
		size_t avail = d->rlen - d->rpos, llen, tlen[4];
		uint64_t sid, size;
		int n;

		if (d->skip) {
			size_t k = d->skip < avail ? d->skip : avail;

			d->skip -= k;
			d->rpos += k;
			continue;
		}
		if (d->drop) {
			if (drop_line(d))
				return -EPROTO;
			if (d->drop && d->rpos < d->rlen)
				return 0; /* a lone CR: wait for more */
			continue;
		}
		nl = memmem(line, avail, "\r\n", 2);
		if (!nl) {
			if (avail <= DIRECT_LINE_MAX)
				return 0; /* the rest is still coming */
			/* A MSG line is short: this is an error. */
			if (!strncasecmp(line, "MSG ", 4))
				return -EPROTO;
			/*
			 * Another line has no CRLF within DIRECT_LINE_MAX:
			 * an INFO that nats-server sends when the cluster
			 * changes, its connect_urls as long as the cluster
			 * is big.  Its start is all that is looked at (none
			 * of PING, PONG, +OK is long); the rest is dropped
			 * as it comes, so that rbuf need not hold it.
			 */
			control_line(d, line, DIRECT_LINE_MAX);
			d->rpos += DIRECT_LINE_MAX;
			d->drop = DIRECT_LINE_MAX;
			continue;
		}
		llen = (size_t)(nl - line);
		if (llen < 4 || strncasecmp(line, "MSG ", 4)) {
			control_line(d, line, llen);
			d->rpos += llen + 2;
			continue;
		}
		n = msg_args(line + 4, nl, tok, tlen);
		if (n < 0 || tlen[0] >= AO_SUBJECT_MAX ||
		    parse_num(tok[1], tlen[1], UINT32_MAX, &sid) ||
		    parse_num(tok[n - 1], tlen[n - 1], UINT32_MAX, &size))
			return -EPROTO;
		if (llen + 2 + size + 2 > avail) {
			if (llen + 2 + size + 2 <= DIRECT_RBUF)
				return 0; /* the rest is still coming */
			node_count(d->node, in_dropped, 1);
			d->rpos += llen + 2;
			d->skip = size + 2;
			continue;
		}
		if (nl[2 + size] != '\r' || nl[3 + size] != '\n')
			return -EPROTO;
		deliver(d, (uint32_t)sid, tok[0], tlen[0],
			n == 4 ? tok[2] : NULL, n == 4 ? tlen[2] : 0, nl + 2,
			size);
		d->rpos += llen + 2 + size + 2;
	}
	return 0;
}

/* Read and deliver until the connection ends; returns why. */
static int serve(struct node_direct *d)
{
	for (;;) {
		ssize_t r;
		int err = parse(d);

		if (err)
			return err;
		if (d->rpos) {
			memmove(d->rbuf, d->rbuf + d->rpos, d->rlen - d->rpos);
			d->rlen -= d->rpos;
			d->rpos = 0;
		}
		r = recv(d->fd, d->rbuf + d->rlen, DIRECT_RBUF - d->rlen, 0);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (stopping(d))
			return -ECANCELED;
		d->rlen += (size_t)r;
	}
}

/* Wait before dialling again: DIRECT_RETRY_MS, less if kicked. */
static void nap(struct node_direct *d)
{
	struct timespec ms = { 0, 10 * 1000 * 1000 };

	for (unsigned int i = 0; i < DIRECT_RETRY_MS / 10; i++) {
		if (stopping(d) ||
		    __atomic_exchange_n(&d->kick, false, __ATOMIC_ACQ_REL))
			return;
		nanosleep(&ms, NULL);
	}
}

static void *reader(void *arg)
{
	struct node_direct *d = arg;

	reading = d;
	for (;;) {
		/* The first connection was made by ao__direct_start(). */
		if (!d->up) {
			if (dial(d)) {
				hang_up(d);
				if (stopping(d))
					break;
				nap(d);
				continue;
			}
			go_live(d);
			node_count(d->node, direct_connects, 1);
		}
		serve(d);
		hang_up(d);
		if (stopping(d))
			break;
	}
	return NULL;
}

int ao__direct_start(struct ao_node *node)
{
	struct node_direct *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return -ENOMEM;
	d->rbuf = malloc(DIRECT_RBUF);
	if (!d->rbuf) {
		free(d);
		return -ENOMEM;
	}
	d->node = node;
	d->fd = -1;
	ao_spin_init(&d->wlock);
	ao_spin_init(&d->tlock);
	node->direct = d;
	err = dial(d);
	if (err) {
		hang_up(d);
		goto fail;
	}
	go_live(d);
	node_count(node, direct_connects, 1);
	err = -pthread_create(&d->thread, NULL, reader, d);
	if (err) {
		hang_up(d);
		goto fail;
	}
	d->thread_ok = true;
	return 0;
fail:
	node->direct = NULL;
	free(d->rbuf);
	free(d);
	return err;
}

void ao__direct_stop(struct ao_node *node)
{
	struct node_direct *d = node->direct;

	/* Release: pairs with the acquire in stopping(). */
	__atomic_store_n(&d->stop, true, __ATOMIC_RELEASE);
	ao_spin_lock(&d->wlock);
	if (d->fd >= 0)
		shutdown(d->fd, SHUT_RDWR);
	ao_spin_unlock(&d->wlock);
}

void ao__direct_free(struct ao_node *node)
{
	struct node_direct *d = node->direct;

	ao__direct_stop(node);
	if (d->thread_ok)
		pthread_join(d->thread, NULL);
	node->direct = NULL;
	free(d->rbuf);
	free(d);
}

void ao__direct_kick(struct ao_node *node)
{
	/* Release: pairs with the exchange in nap(). */
	__atomic_store_n(&node->direct->kick, true, __ATOMIC_RELEASE);
}

int ao__direct_sub(struct ao_node *node, struct ao_sub *sub,
		   const char *subject, const char *queue)
{
	struct node_direct *d = node->direct;
	size_t sl = strlen(subject) + 1, ql = queue ? strlen(queue) + 1 : 0;
	char line[2 * AO_SUBJECT_MAX + 32];
	size_t n;

	if (ql > AO_SUBJECT_MAX)
		return -EINVAL;
	sub->subject = malloc(sl + ql);
	if (!sub->subject)
		return -ENOMEM;
	memcpy(sub->subject, subject, sl);
	sub->queue = NULL;
	if (ql > 1) {
		sub->queue = sub->subject + sl;
		memcpy(sub->queue, queue, ql);
	}
	ao_spin_lock(&d->wlock);
	if (!++d->next_sid)
		++d->next_sid;
	sub->sid = d->next_sid;
	ao_spin_lock(&d->tlock);
	sub->dnext = d->table[sub->sid % DIRECT_BUCKETS];
	d->table[sub->sid % DIRECT_BUCKETS] = sub;
	ao_spin_unlock(&d->tlock);
	/* Down: sent with the rest when the connection is back. */
	n = sub_line(line, sizeof(line), sub);
	if (n) {
		dsend(d, line, n);
		sub_ping(d);
	}
	ao_spin_unlock(&d->wlock);
	return 0;
}

void ao__direct_settle(struct ao_node *node)
{
	struct node_direct *d = node->direct;
	uint32_t want = __atomic_load_n(&d->want, __ATOMIC_ACQUIRE), p;
	uint64_t end;

	if ((int32_t)(__atomic_load_n(&d->pongs, __ATOMIC_ACQUIRE) - want) >= 0)
		return;
	/* A handler the reader runs cannot wait for what it reads. */
	if (reading == d)
		return;
	end = ao__cluster_now() + DIRECT_SETTLE_MS * 1000000ull;
	while ((int32_t)((p = __atomic_load_n(&d->pongs, __ATOMIC_ACQUIRE)) -
			 want) < 0) {
		uint64_t now = ao__cluster_now();

		if (now >= end) {
			node_count(node, direct_unsettled, 1);
			return;
		}
		ao_futex_wait(&d->pongs, p, (int64_t)(end - now));
	}
}

void ao__direct_unsub(struct ao_node *node, struct ao_sub *sub)
{
	struct node_direct *d = node->direct;
	struct ao_sub **pp;
	char line[32];
	int n;

	ao_spin_lock(&d->wlock);
	ao_spin_lock(&d->tlock);
	for (pp = &d->table[sub->sid % DIRECT_BUCKETS]; *pp;
	     pp = &(*pp)->dnext) {
		if (*pp == sub) {
			*pp = sub->dnext;
			break;
		}
	}
	ao_spin_unlock(&d->tlock);
	n = snprintf(line, sizeof(line), "UNSUB %u\r\n", sub->sid);
	dsend(d, line, (size_t)n);
	ao_spin_unlock(&d->wlock);
	ao__sub_put(sub); /* the table's hold */
}
