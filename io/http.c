// SPDX-License-Identifier: MIT
/*
 * HTTP requests and WebSocket connections of the server (AO_FRAME_WS, or a
 * byte framing with AO_SERVER_HTTP).  The frames, the handshake and the
 * rules of RFC 6455 are io/ws.c and io/ws_handshake.c; this file wires them
 * into the connection's receive path, its deadlines, its drain and its send
 * queue.
 *
 * Phases of a connection (struct io_wsc, ring thread only):
 *
 *	SNIFF	(AO_SERVER_HTTP) the first bytes say whether it is an HTTP
 *		request (a method and a space, as io_http_sniff() reads them;
 *		GET or not, so that every method is answered) or the framing;
 *		they
 *		are kept in the head buffer until they tell.  Framed: on_open,
 *		then the kept bytes and the rest go to the byte framer.
 *	HEAD	the request head is gathered (at most ws.header_max bytes, by
 *		ws.header_timeout_ms) and parsed.  An upgrade gets its 101 and
 *		becomes WS (on_open now, not at accept); a plain GET or HEAD
 *		becomes HTTP (on_http, or a 404); anything else an error answer
 *		(io_http_write_error()), then a graceful close.
 *	WS	frames: io_ws_decode() unmasks in place in the receive buffer;
 *		data chunks are appended to one pool buffer per message, which
 *		goes to on_packet when its last fragment came, exactly as a
 *		framed packet does (strand, backlog, ring handlers).  A ping
 *		is answered with a pong at once; a close frame, or an error
 *		(1002, 1007, 1009), stops the input and closes gracefully.
 *	HTTP	waiting for ao_http_reply(): nothing more is read.  A drain
 *		the answer did not start (the peer's FIN: a client may
 *		half-close after its request; ao_server_stop()) waits for
 *		it, within its deadline (io_wsc_drain()).
 *
 * Close frames: a graceful close of a WebSocket (the peer's close, an
 * error, ao_conn_close(), a failed on_packet, ao_server_stop(), no pong)
 * queues its close frame when the drain finds the connection's packets
 * run (io_wsc_drain() from io_conn_check_drained()), so it goes after
 * everything the handlers sent, and the FIN after it, within linger_ms.
 * It is queued with io_conn_send_ws_close(), which in the same hold of
 * the send queue's lock refuses every later send with -EPIPE: a send from
 * another thread (a kept handle) either gets in before the close frame or
 * is refused, never after it (RFC 6455 section 5.5.1: no data frame after
 * a close frame).  A hard close (a reset, no memory, idle_timeout_ms)
 * sends none.
 *
 * Deadlines go on the connection's one timer (io_conn_timer()): the head's
 * until the request is complete; then, for a WebSocket, a ping when it was
 * silent for ws.ping_ms, and a close (AO_CLOSE_WS_PONG) when nothing came
 * back for ws.pong_timeout_ms after it.  Any input answers a ping.
 *
 * Frame once, send to many (io_ws_frame(), from any thread): a server
 * frame depends only on the payload, its opcode and its length, so the
 * header is written once into the buffer's headroom (the server's pool
 * has IO_WS_HDR_MAX bytes of it) and every send of that buffer, to one
 * connection or a thousand, sends header and payload as one span by
 * reference.  buf->frame says what is there: 0 nothing, FRAME_BUSY one
 * sender writing it, else FRAME_DONE with the opcode and length it was
 * written for.  The first sender claims it with a CAS and publishes with a
 * release store; the others, seeing the same description with an acquire
 * load, share it (or wait out the few nanoseconds of a writer).  A buffer
 * with too little headroom, or one framed already for another opcode or
 * length (sent by a server with another AO_WS_TEXT, or changed while a
 * send of it may still be queued), gets its header inline in the send
 * queue's node instead: never rewritten under a pending send.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/compiler.h>
#include <aorta/arch/processor.h>
#include <aorta/io/conn.h>
#include "io_priv.h"
#include "ws_priv.h"

enum wsc_phase {
	WSC_SNIFF,
	WSC_HEAD,
	WSC_WS,
	WSC_HTTP,
	WSC_FRAMED,
};

struct io_wsc {
	enum wsc_phase phase;
	/* SNIFF, HEAD: the bytes so far; HTTP: the request (req.path points
	 * into it while on_http may run); FRAMED: kept bytes not yet fed to
	 * the framer, from head_off. */
	uint8_t *head;
	uint32_t head_len, head_cap, head_off;
	uint64_t head_deadline;
	struct io_http_req req;
	/* WS. */
	struct io_ws_dec dec;
	struct ao_buf *msg; /* the message being reassembled */
	uint32_t pend; /* unmasked payload at the start of held input */
	bool pend_fin; /* ... which ends its message */
	bool pend_on;
	bool close_sent; /* the close frame is queued */
	bool close_echo; /* answer the peer's close: code, or empty */
	uint16_t close_code; /* 0: by the close reason */
	uint64_t ping_ns; /* when the last ping went out; 0: none */
	/* HTTP. */
	struct ao_conn *conn;
	uint32_t answered; /* atomic: ao_http_reply() was called */
	uint32_t replied; /* atomic: ... and its answer is queued */
	struct ao_work http_work;
};

#define FRAME_DONE 0x1ull
#define FRAME_BUSY 0x2ull

static inline void wsc_stat(struct ao_conn *c, uint64_t *field)
{
	/* Senders on any thread: an atomic add (the ring's own counters are
	 * plain stores by the ring, IO_STAT_ADD). */
	__atomic_fetch_add(field, 1, __ATOMIC_RELAXED);
	(void)c;
}

/* ---- sending ---- */

int io_ws_frame(struct ao_conn *c, struct ao_buf *buf, uint8_t hdr[10],
		uint32_t *pre)
{
	struct io_ring *r = c->ring;
	uint8_t op = c->srv->ws_op;
	uint32_t len = buf->len;
	unsigned int hl = io_ws_hdr_len(len);
	uint64_t want = FRAME_DONE | (uint64_t)hl << 4 | (uint64_t)op << 8 |
			(uint64_t)len << 32;
	uint64_t s;

	*pre = 0;
	if (buf->headroom >= hl) {
		/* Acquire: pairs with the release store below, by whichever
		 * sender wrote the header. */
		s = __atomic_load_n(&buf->frame, __ATOMIC_ACQUIRE);
		for (;;) {
			if (s == want) {
				wsc_stat(c, &r->st.ws_frames_shared);
				*pre = hl;
				return 0;
			}
			if (s == FRAME_BUSY) {
				cpu_relax();
				s = __atomic_load_n(&buf->frame,
						    __ATOMIC_ACQUIRE);
				continue;
			}
			if (s != 0)
				break; /* framed otherwise: inline */
			if (__atomic_compare_exchange_n(
				    &buf->frame, &s, FRAME_BUSY, false,
				    __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
				io_ws_frame_in_headroom(buf->data,
							buf->headroom, op, len);
				/* Release: the header bytes before the
				 * description; pairs with the acquire loads
				 * above. */
				__atomic_store_n(&buf->frame, want,
						 __ATOMIC_RELEASE);
				wsc_stat(c, &r->st.ws_frames_written);
				*pre = hl;
				return 0;
			}
		}
	}
	wsc_stat(c, &r->st.ws_inline_headers);
	return (int)io_ws_write_hdr(hdr, op, true, len);
}

/* Send n bytes of bytes (a control frame, an HTTP head) in pool buffers,
 * raw.  0 or a negative errno. */
static int send_bytes(struct ao_conn *c, const void *bytes, size_t n)
{
	const uint8_t *p = bytes;

	while (n) {
		struct ao_buf *b = ao_buf_get(c->srv->pool);
		size_t k;
		int err;

		if (!b)
			return -ENOMEM;
		k = n < b->cap ? n : b->cap;
		memcpy(b->data, p, k);
		b->len = (uint32_t)k;
		err = ao_conn_send(c, b);
		ao_buf_put(b);
		if (err)
			return err;
		p += k;
		n -= k;
	}
	return 0;
}

/* n bytes (a close frame) in one buffer, as the connection's last: every
 * send after it is refused with -EPIPE (io_conn_send_ws_close()). */
static int send_last(struct ao_conn *c, const void *bytes, size_t n)
{
	struct ao_buf *b = ao_buf_get(c->srv->pool);
	int err;

	if (!b)
		return -ENOMEM;
	if (b->cap < n) {
		ao_buf_put(b);
		return -ENOBUFS;
	}
	memcpy(b->data, bytes, n);
	b->len = (uint32_t)n;
	err = io_conn_send_ws_close(c, b);
	ao_buf_put(b);
	return err;
}

/* A control frame; a close frame goes out as the connection's last. */
static int send_ctl(struct ao_conn *c, uint8_t op, const uint8_t *payload,
		    size_t n)
{
	uint8_t f[2 + IO_WS_CTL_MAX];
	unsigned int hl = io_ws_write_hdr(f, op, true, n);

	if (n)
		memcpy(f + hl, payload, n);
	if (op == IO_WS_OP_CLOSE)
		return send_last(c, f, hl + n);
	return send_bytes(c, f, hl + n);
}

bool io_wsc_drain(struct ao_conn *c)
{
	struct io_wsc *w = c->ws;
	uint8_t pl[2];
	size_t n = 2;
	uint16_t code = w->close_code;

	if (w->phase == WSC_HTTP) {
		/* A drain we did not ask for (the peer's FIN behind its
		 * request: a client may half-close once it has sent it;
		 * ao_server_stop()) waits for the answer, within the
		 * drain's deadline.  SEQ_CST: pairs with http_reply(). */
		return c->reason != AO_CLOSE_HTTP_DONE &&
		       !__atomic_load_n(&w->replied, __ATOMIC_SEQ_CST);
	}
	if (w->phase != WSC_WS || w->close_sent)
		return false;
	w->close_sent = true;
	if (w->close_echo && !code) {
		n = 0; /* the peer's close had no code */
	} else if (!code) {
		switch (c->reason) {
		case AO_CLOSE_SHUTDOWN:
		case AO_CLOSE_WS_PONG:
			code = IO_WS_CLOSE_GOING_AWAY;
			break;
		case AO_CLOSE_PROTOCOL:
			code = 1008; /* policy violation: on_packet refused */
			break;
		case AO_CLOSE_TOO_LONG:
			code = IO_WS_CLOSE_TOO_BIG;
			break;
		default:
			code = IO_WS_CLOSE_NORMAL;
		}
	}
	pl[0] = (uint8_t)(code >> 8);
	pl[1] = (uint8_t)code;
	return send_ctl(c, IO_WS_OP_CLOSE, pl, n) == 0;
}

enum ao_close_reason io_wsc_local_reason(const struct ao_conn *c)
{
	return c->ws->phase == WSC_HTTP ? AO_CLOSE_HTTP_DONE : AO_CLOSE_LOCAL;
}

/* ---- state ---- */

bool io_wsc_active(const struct ao_conn *c)
{
	const struct io_wsc *w = c->ws;

	return w->phase != WSC_FRAMED || w->head_off < w->head_len;
}

int io_wsc_new(struct ao_conn *c)
{
	struct ao_server *srv = c->srv;
	struct io_wsc *w = calloc(1, sizeof(*w));
	uint64_t idle = srv->cfg.idle_timeout_ms * 1000000ull;
	uint64_t at;

	if (!w)
		return -ENOMEM;
	w->phase = srv->ws_only ? WSC_HEAD : WSC_SNIFF;
	w->head_cap = srv->cfg.ws.header_max;
	w->req.protocol = -1;
	w->conn = c;
	w->head_deadline = c->last_rx_ns + srv->head_ns;
	c->ws = w;
	at = w->head_deadline;
	if (idle && c->last_rx_ns + idle < at)
		at = c->last_rx_ns + idle;
	ao_timer_arm_at(&c->timer, at);
	return 0;
}

void io_wsc_free(struct ao_conn *c)
{
	struct io_wsc *w = c->ws;

	if (!w)
		return;
	if (w->msg)
		ao_buf_put(w->msg);
	free(w->head);
	free(w);
	c->ws = NULL;
}

/* ---- deadlines ---- */

static void http_error(struct ao_conn *c, int status, enum ao_close_reason why)
{
	char buf[256];
	int n = io_http_write_error(buf, sizeof(buf), status);

	IO_STAT_ADD(c->ring, http_errors, 1);
	if (n > 0 && send_bytes(c, buf, (size_t)n) < 0) {
		io_conn_close_hard(c, AO_CLOSE_NOMEM);
		return;
	}
	io_conn_close_input(c, why);
}

uint64_t io_wsc_timer(struct ao_conn *c, uint64_t now)
{
	struct io_wsc *w = c->ws;
	struct ao_server *srv = c->srv;

	switch (w->phase) {
	case WSC_SNIFF:
	case WSC_HEAD:
		if (now < w->head_deadline)
			return w->head_deadline;
		http_error(c, 408, AO_CLOSE_HTTP_TIMEOUT);
		return UINT64_MAX;
	case WSC_WS:
		break;
	default:
		return UINT64_MAX;
	}
	if (w->ping_ns && c->last_rx_ns <= w->ping_ns) {
		/* A ping is out and nothing came since. */
		if (now - w->ping_ns >= srv->pong_ns) {
			io_conn_close_input(c, AO_CLOSE_WS_PONG);
			return UINT64_MAX;
		}
		return w->ping_ns + srv->pong_ns;
	}
	if (!io_conn_rx_wanted(c))
		return now + srv->ping_ns; /* our silence, not the peer's */
	if (now - c->last_rx_ns < srv->ping_ns)
		return c->last_rx_ns + srv->ping_ns;
	if (send_ctl(c, IO_WS_OP_PING, NULL, 0) < 0)
		return now + srv->ping_ns / 8; /* no buffer: soon again */
	IO_STAT_ADD(c->ring, ws_pings, 1);
	w->ping_ns = now;
	return now + srv->pong_ns;
}

/* ---- plain HTTP ---- */

static int http_reply(struct ao_conn *c, int status, const char *type,
		      const void *body, size_t len)
{
	char head[512];
	int n;
	int err;

	if (status == 204 || status == 304) {
		/* No content, so no Content-Length: RFC 9110 section 8.6
		 * forbids it in a 204, and in a 304 it would have to be the
		 * length of the 200's body, which we do not know. */
		n = snprintf(head, sizeof(head),
			     "HTTP/1.1 %d %s\r\nConnection: close\r\n\r\n",
			     status, io_http_reason(status));
	} else {
		n = snprintf(head, sizeof(head),
			     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
			     "Content-Length: %zu\r\n"
			     "Connection: close\r\n\r\n",
			     status, io_http_reason(status), type, len);
	}
	if (n < 0 || (size_t)n >= sizeof(head))
		return -EINVAL;
	err = send_bytes(c, head, (size_t)n);
	/* A HEAD gets the head of the GET's answer, its Content-Length
	 * included, and no body (RFC 9110 section 9.3.2).  The request is
	 * the ring's, read after the acquire of proto in ao_http_reply(). */
	if (!err && len && !c->ws->req.head)
		err = send_bytes(c, body, len);
	if (err == -ENOTCONN)
		err = -EPIPE;
	/* SEQ_CST: the answer queued before the load of rx_paused
	 * (StoreLoad); pairs with a graceful close's store of it and the
	 * load of replied in io_wsc_drain(), so either the drain sees the
	 * answer or this sees the drain and has it look again. */
	__atomic_store_n(&c->ws->replied, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->rx_paused, __ATOMIC_SEQ_CST))
		io_conn_post(c, MB_RESUME);
	/* The answer, or as much of it as went, then the FIN. */
	ao_conn_close(c);
	return err;
}

int ao_http_reply(struct ao_conn *c, int status, const char *content_type,
		  const void *body, size_t len)
{
	/* A final answer only: a 1xx is not one (the 101 of an upgrade is
	 * the library's own); 204 and 304 have no content. */
	if (!c || status < 200 || status > 599 || (len && !body))
		return -EINVAL;
	if ((status == 204 || status == 304) && len)
		return -EINVAL;
	if (!content_type)
		content_type = "application/octet-stream";
	if (strpbrk(content_type, "\r\n") || strlen(content_type) > 200)
		return -EINVAL;
	/* Acquire: pairs with the release store of the request's phase. */
	if (__atomic_load_n(&c->proto, __ATOMIC_ACQUIRE) != AO_CONN_HTTP)
		return -EINVAL;
	if (__atomic_exchange_n(&c->ws->answered, 1, __ATOMIC_RELAXED))
		return -EINVAL;
	if (__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE))
		return -EPIPE;
	return http_reply(c, status, content_type, body, len);
}

/* on_http, on the strand (or the ring with ring handlers). */
static void http_run(struct ao_work *wk)
{
	struct io_wsc *w = container_of(wk, struct io_wsc, http_work);
	struct ao_conn *c = w->conn;
	const struct ao_server_handlers *h = &c->srv->cfg.handlers;
	struct ao_http_request req = {
		.path = w->req.path,
		.path_len = w->req.path_len,
		.head = w->req.head,
	};

	h->on_http(c, &req, h->arg);
	ao_conn_put(c);
}

static void http_request(struct ao_conn *c)
{
	struct io_wsc *w = c->ws;
	const struct ao_server_handlers *h = &c->srv->cfg.handlers;

	IO_STAT_ADD(c->ring, http_requests, 1);
	w->phase = WSC_HTTP;
	/* Release: the phase and the request before the protocol; pairs
	 * with the acquire load in ao_http_reply(). */
	__atomic_store_n(&c->proto, AO_CONN_HTTP, __ATOMIC_RELEASE);
	/* Nothing more is read: stop receiving as for backpressure. */
	c->bp_paused = true;
	c->ring->be->rx_update(c->ring, c);
	if (!h->on_http) {
		static const char msg[] = "not found\n";

		__atomic_store_n(&w->answered, 1, __ATOMIC_RELAXED);
		if (http_reply(c, 404, "text/plain", msg, sizeof(msg) - 1) ==
		    -ENOMEM)
			io_conn_close_hard(c, AO_CLOSE_NOMEM);
		return;
	}
	ao_conn_get(c);
	ao_work_init(&w->http_work, http_run);
	if (c->srv->ring_handlers || io_ring_submit(c, &w->http_work) < 0)
		http_run(&w->http_work);
}

/* ---- receiving ---- */

static struct ao_buf *msg_buf(struct ao_conn *c)
{
	struct io_wsc *w = c->ws;

	if (!w->msg)
		w->msg = ao_buf_get(c->srv->pool);
	return w->msg;
}

/* Append n payload bytes to the open message; at fin, hand it on.
 * 0, -ENOBUFS (no buffer: nothing taken), or the emit's error. */
static int msg_add(struct ao_conn *c, const uint8_t *p, size_t n, bool fin)
{
	struct io_wsc *w = c->ws;
	struct ao_buf *m = msg_buf(c);

	if (!m)
		return -ENOBUFS;
	/* The decoder bounds a message at max_packet, which the pool's
	 * buffers hold. */
	memcpy((uint8_t *)m->data + m->len, p, n);
	m->len += (uint32_t)n;
	if (!fin)
		return 0;
	w->msg = NULL;
	return io_conn_emit(c, m);
}

static int ws_fail(struct ao_conn *c, uint16_t code)
{
	c->ws->close_code = code;
	io_conn_close_input(c, code == IO_WS_CLOSE_TOO_BIG ? AO_CLOSE_TOO_LONG :
							     AO_CLOSE_WS_ERROR);
	return -ECANCELED;
}

static int ws_frames(struct ao_conn *c, uint8_t *p, size_t len, size_t *usedp)
{
	struct io_wsc *w = c->ws;
	size_t off = 0;
	int err;

	*usedp = 0;
	if (w->pend_on) {
		/* Payload unmasked already, kept for want of a buffer. */
		size_t n = w->pend < len ? w->pend : len;
		bool fin = w->pend_fin && n == w->pend;

		err = msg_add(c, p, n, fin);
		if (err)
			return err;
		w->pend -= (uint32_t)n;
		off = n;
		if (!w->pend)
			w->pend_on = false;
	}
	while (off < len && c->state == CONN_OPEN && !c->rx_stop) {
		struct io_ws_event ev;
		size_t used;
		int ret = io_ws_decode(&w->dec, p + off, len - off, &used, &ev);

		if (ret < 0)
			return ws_fail(c, w->dec.close_code);
		off += used;
		if (ret == 0)
			continue;
		IO_STAT_ADD(c->ring, ws_frames_in, 1);
		switch (ev.kind) {
		case IO_WS_EV_DATA:
			err = msg_add(c, ev.data, ev.len, ev.fin);
			if (err == -ENOBUFS) {
				/* The chunk ends what was used: hold it,
				 * unmasked, with the rest. */
				w->pend = (uint32_t)ev.len;
				w->pend_fin = ev.fin;
				w->pend_on = true;
				*usedp = off - ev.len;
				return err;
			}
			if (err)
				return err;
			break;
		case IO_WS_EV_PING:
			/* No pool buffer for it: the pong is skipped (the
			 * peer pings again) rather than the connection. */
			if (send_ctl(c, IO_WS_OP_PONG, ev.data, ev.len) == 0)
				IO_STAT_ADD(c->ring, ws_pongs, 1);
			break;
		case IO_WS_EV_PONG:
			w->ping_ns = 0;
			break;
		case IO_WS_EV_CLOSE:
			w->close_echo = true;
			w->close_code =
				ev.code == IO_WS_CLOSE_NO_STATUS ? 0 : ev.code;
			io_conn_close_input(c, AO_CLOSE_WS_CLOSE);
			return -ECANCELED;
		}
	}
	*usedp = len;
	return 0;
}

/* The handshake's side of the server's configuration. */
static struct io_http_cfg http_cfg(const struct ao_server *srv)
{
	return (struct io_http_cfg){
		.protocols = srv->cfg.ws.protocols,
		.n_protocols = srv->n_protocols,
		.max_request = srv->cfg.ws.header_max,
		.origins = srv->cfg.ws.origins,
	};
}

static void ws_upgrade(struct ao_conn *c)
{
	struct io_wsc *w = c->ws;
	struct ao_server *srv = c->srv;
	struct io_http_cfg hc = http_cfg(srv);
	char out[512];
	int n = io_ws_write_accept(out, sizeof(out), &hc, &w->req);

	if (n < 0 || send_bytes(c, out, (size_t)n) < 0) {
		io_conn_close_hard(c, AO_CLOSE_NOMEM);
		return;
	}
	IO_STAT_ADD(c->ring, ws_upgrades, 1);
	free(w->head);
	w->head = NULL;
	w->head_len = w->head_off = 0;
	io_ws_dec_init(&w->dec, srv->cfg.framing.max_packet, 0);
	w->phase = WSC_WS;
	/* Release: pairs with the acquire load in conn_send(). */
	__atomic_store_n(&c->proto, AO_CONN_WS, __ATOMIC_RELEASE);
	io_conn_open_handlers(c);
	/* From the head's deadline to the ping's. */
	io_conn_timer(c);
}

/* Gather and parse the request head; then the frames after it. */
static int ws_head(struct ao_conn *c, uint8_t *p, size_t len, size_t *usedp)
{
	struct io_wsc *w = c->ws;
	struct ao_server *srv = c->srv;
	struct io_http_cfg hc = http_cfg(srv);
	uint32_t old = w->head_len;
	size_t n = w->head_cap - w->head_len, k;
	int ret;

	*usedp = len;
	if (!w->head) {
		w->head = malloc(w->head_cap);
		if (!w->head) {
			io_conn_close_hard(c, AO_CLOSE_NOMEM);
			return -ECANCELED;
		}
	}
	if (n > len)
		n = len;
	memcpy(w->head + w->head_len, p, n);
	w->head_len += (uint32_t)n;
	ret = io_http_parse(&hc, w->head, w->head_len, &w->req);
	if (ret == 0)
		return 0;
	if (ret < 0) {
		http_error(c, w->req.status ? w->req.status : 400,
			   AO_CLOSE_HTTP_BAD);
		return -ECANCELED;
	}
	if (w->req.kind == IO_HTTP_GET) {
		http_request(c);
		return -ECANCELED; /* the rest is not read */
	}
	ws_upgrade(c);
	if (c->state != CONN_OPEN)
		return -ECANCELED;
	/* Frames right behind the head, in the same receive. */
	k = (size_t)ret - old;
	if (k >= len)
		return 0;
	ret = ws_frames(c, p + k, len - k, usedp);
	*usedp += k;
	return ret;
}

/* Framed after all (SNIFF said so): the kept bytes, then the input. */
static int framed(struct ao_conn *c, uint8_t *p, size_t len, size_t *usedp)
{
	struct io_wsc *w = c->ws;
	size_t used;
	int err;

	*usedp = 0;
	if (w->head_off < w->head_len) {
		err = ao_framer_feed(&c->framer, w->head + w->head_off,
				     w->head_len - w->head_off, &used);
		w->head_off += (uint32_t)used;
		if (err)
			return err; /* -ENOBUFS: all of p is held */
		free(w->head); /* the framer has them all */
		w->head = NULL;
		w->head_len = w->head_off = 0;
	}
	if (!len)
		return 0;
	err = ao_framer_feed(&c->framer, p, len, usedp);
	return err;
}

int io_wsc_feed(struct ao_conn *c, uint8_t *p, size_t len, size_t *usedp)
{
	struct io_wsc *w = c->ws;
	size_t t = 0;
	int r;

	switch (w->phase) {
	case WSC_WS:
		return ws_frames(c, p, len, usedp);
	case WSC_HEAD:
		return ws_head(c, p, len, usedp);
	case WSC_FRAMED:
		return framed(c, p, len, usedp);
	case WSC_HTTP:
		*usedp = len;
		return 0;
	case WSC_SNIFF:
		break;
	}
	if (!w->head_len) {
		r = io_http_sniff(p, len);
	} else {
		/* A few bytes kept: add up to 8 more and look again. */
		t = IO_HTTP_SNIFF_MAX - w->head_len < len ?
			    IO_HTTP_SNIFF_MAX - w->head_len :
			    len;
		memcpy(w->head + w->head_len, p, t);
		w->head_len += (uint32_t)t;
		r = io_http_sniff(w->head, w->head_len);
	}
	if (r == -EAGAIN) {
		if (!w->head) {
			w->head = malloc(w->head_cap > 16 ? w->head_cap : 16);
			if (!w->head) {
				io_conn_close_hard(c, AO_CLOSE_NOMEM);
				return -ECANCELED;
			}
		}
		memcpy(w->head + w->head_len, p + t, len - t);
		w->head_len += (uint32_t)(len - t);
		*usedp = len;
		return 0;
	}
	if (r == 1) {
		w->phase = WSC_HEAD;
		r = ws_head(c, p + t, len - t, usedp);
		*usedp += t;
		return r;
	}
	w->phase = WSC_FRAMED;
	io_conn_open_handlers(c);
	io_conn_timer(c); /* no head deadline now */
	r = framed(c, p + t, len - t, usedp);
	if (r == -ENOBUFS && !*usedp && w->head_off < w->head_len)
		t = 0; /* the kept bytes first: all of p is held */
	*usedp += t;
	return r;
}

enum ao_conn_proto ao_conn_proto(const struct ao_conn *c)
{
	return (enum ao_conn_proto)__atomic_load_n(&c->proto, __ATOMIC_ACQUIRE);
}
