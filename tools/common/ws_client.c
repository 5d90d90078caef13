// SPDX-License-Identifier: MIT
/*
 * The client side of WebSocket for the load tools: see ws_client.h.
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <aorta/clock.h>
#include "ws_client.h"

/* ------------------------------------------------------------------ */
/* base64, for the keys */

size_t wsc_base64(const void *src, size_t n, char *dst)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "abcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = src;
	size_t i, o = 0;
	uint32_t v;

	for (i = 0; i + 3 <= n; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		dst[o++] = tab[v >> 18];
		dst[o++] = tab[(v >> 12) & 63];
		dst[o++] = tab[(v >> 6) & 63];
		dst[o++] = tab[v & 63];
	}
	if (n - i == 1) {
		v = (uint32_t)p[i] << 16;
		dst[o++] = tab[v >> 18];
		dst[o++] = tab[(v >> 12) & 63];
		dst[o++] = '=';
		dst[o++] = '=';
	} else if (n - i == 2) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		dst[o++] = tab[v >> 18];
		dst[o++] = tab[(v >> 12) & 63];
		dst[o++] = tab[(v >> 6) & 63];
		dst[o++] = '=';
	}
	dst[o] = '\0';
	return o;
}

/* ------------------------------------------------------------------ */
/* Randomness for keys and masks (not a secret: see ws_client.h) */

uint64_t wsc_rand(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

uint64_t wsc_seed(uint64_t salt)
{
	/* splitmix64's finaliser spreads close clocks and salts apart. */
	uint64_t z = ao_now_ns() + salt * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 0x2545f4914f6cdd1dull;
}

void wsc_key(uint64_t *rng, char key[WSC_KEY_LEN + 1])
{
	uint64_t r[2] = { wsc_rand(rng), wsc_rand(rng) };

	wsc_base64(r, sizeof(r), key);
}

int wsc_accept(const char *key, char out[WSC_ACCEPT_LEN + 1])
{
	return ao_ws_accept_key(key, strnlen(key, WSC_KEY_LEN + 1), out);
}

/* ------------------------------------------------------------------ */
/* The handshake */

int wsc_request(char *buf, size_t cap, const char *host, const char *path,
		const char *key, const char *protocol)
{
	int n;

	n = snprintf(buf, cap,
		     "GET %s HTTP/1.1\r\n"
		     "Host: %s\r\n"
		     "Upgrade: websocket\r\n"
		     "Connection: Upgrade\r\n"
		     "Sec-WebSocket-Key: %s\r\n"
		     "Sec-WebSocket-Version: 13\r\n"
		     "%s%s%s"
		     "\r\n",
		     path && *path ? path : "/", host, key,
		     protocol ? "Sec-WebSocket-Protocol: " : "",
		     protocol ? protocol : "", protocol ? "\r\n" : "");
	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	return n;
}

/* The end of the head (after its blank line) in buf, or 0. */
static size_t head_end(const char *buf, size_t len)
{
	size_t i;

	for (i = 3; i < len; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\r' &&
		    buf[i - 2] == '\n' && buf[i - 3] == '\r')
			return i + 1;
	return 0;
}

/* Whether the comma-separated list v (n bytes) holds token tok. */
static bool has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok), i = 0, s, e;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && !strncasecmp(v + s, tok, tl))
			return true;
	}
	return false;
}

int wsc_response(const char *buf, size_t len, const char *key,
		 const char *protocol, int *status)
{
	char accept[WSC_ACCEPT_LEN + 1];
	bool upgrade = false, connection = false, acc = false;
	size_t end, i, eol, colon, vs, ve;
	int code;

	*status = 0;
	end = head_end(buf, len < WSC_RESPONSE_MAX ? len : WSC_RESPONSE_MAX);
	if (!end)
		return len >= WSC_RESPONSE_MAX ? -EMSGSIZE : 0;
	/* "HTTP/1.1 101 ..." */
	if (end < 12 || memcmp(buf, "HTTP/1.1 ", 9) || !isdigit(buf[9]) ||
	    !isdigit(buf[10]) || !isdigit(buf[11]))
		return -EPROTO;
	code = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	*status = code;
	if (code != 101)
		return -EPROTO;
	if (wsc_accept(key, accept))
		return -EINVAL;
	for (i = 0; i < end && buf[i] != '\n'; i++)
		;
	for (i++; i < end - 2; i = eol + 1) {
		for (eol = i; eol < end && buf[eol] != '\n'; eol++)
			;
		for (colon = i; colon < eol && buf[colon] != ':'; colon++)
			;
		if (colon == eol)
			return -EPROTO;
		for (vs = colon + 1;
		     vs < eol && (buf[vs] == ' ' || buf[vs] == '\t'); vs++)
			;
		ve = eol;
		while (ve > vs && (buf[ve - 1] == '\r' || buf[ve - 1] == ' ' ||
				   buf[ve - 1] == '\t'))
			ve--;
#define IS(name)                          \
	(colon - i == sizeof(name) - 1 && \
	 !strncasecmp(buf + i, name, colon - i))
		if (IS("Upgrade")) {
			upgrade = ve - vs == 9 &&
				  !strncasecmp(buf + vs, "websocket", 9);
		} else if (IS("Connection")) {
			connection = has_token(buf + vs, ve - vs, "upgrade");
		} else if (IS("Sec-WebSocket-Accept")) {
			acc = ve - vs == WSC_ACCEPT_LEN &&
			      !memcmp(buf + vs, accept, WSC_ACCEPT_LEN);
		} else if (IS("Sec-WebSocket-Protocol")) {
			if (!protocol || ve - vs != strlen(protocol) ||
			    memcmp(buf + vs, protocol, ve - vs))
				return -EPROTO;
		} else if (IS("Sec-WebSocket-Extensions")) {
			return -EPROTO; /* none was offered */
		}
#undef IS
	}
	if (!upgrade || !connection || !acc)
		return -EPROTO;
	return (int)end;
}

/* Wait until fd is ready for events, or the deadline: 0 or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	uint64_t now;
	int r;

	for (;;) {
		now = ao_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int wsc_handshake_fd(int fd, const char *host, const char *path,
		     const char *protocol, uint64_t *rng, uint64_t timeout_ns,
		     int *status)
{
	uint64_t deadline = ao_now_ns() + timeout_ns;
	char key[WSC_KEY_LEN + 1], req[512], resp[WSC_RESPONSE_MAX];
	size_t off = 0, got = 0;
	int len, r, st = 0;
	ssize_t n;

	wsc_key(rng, key);
	len = wsc_request(req, sizeof(req), host, path, key, protocol);
	if (len < 0)
		return len;
	while (off < (size_t)len) {
		n = send(fd, req + off, (size_t)len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		r = wait_fd(fd, POLLOUT, deadline);
		if (r)
			return r;
	}
	/*
	 * Peek at what arrived, and take only the head: frames that follow
	 * it in the same segment stay for the program's own reads.
	 */
	for (;;) {
		n = recv(fd, resp, sizeof(resp), MSG_PEEK | MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0 && (size_t)n > got) {
			got = (size_t)n;
			r = wsc_response(resp, got, key, protocol, &st);
			if (status)
				*status = st;
			if (r > 0)
				return recv(fd, resp, (size_t)r, 0) == r ? 0 :
									   -EIO;
			if (r < 0)
				return r;
		}
		/* A partial head stays readable: poll() would not wait. */
		if (got) {
			if (ao_now_ns() >= deadline)
				return -ETIMEDOUT;
			poll(NULL, 0, 1);
			continue;
		}
		r = wait_fd(fd, POLLIN, deadline);
		if (r)
			return r;
	}
}

/* ------------------------------------------------------------------ */
/* Frames to send */

size_t wsc_hdr_len(size_t n)
{
	return n < 126 ? 6 : n <= 0xffff ? 8 : 14;
}

size_t wsc_put_hdr(uint8_t *dst, enum wsc_opcode op, size_t n, uint32_t mask)
{
	size_t h = 2, i;

	dst[0] = 0x80 | (uint8_t)op;
	if (n < 126) {
		dst[1] = 0x80 | (uint8_t)n;
	} else if (n <= 0xffff) {
		dst[1] = 0x80 | 126;
		dst[2] = (uint8_t)(n >> 8);
		dst[3] = (uint8_t)n;
		h = 4;
	} else {
		dst[1] = 0x80 | 127;
		for (i = 0; i < 8; i++)
			dst[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
		h = 10;
	}
	dst[h] = (uint8_t)(mask >> 24);
	dst[h + 1] = (uint8_t)(mask >> 16);
	dst[h + 2] = (uint8_t)(mask >> 8);
	dst[h + 3] = (uint8_t)mask;
	return h + 4;
}

size_t wsc_frame_inplace(uint8_t *dst, enum wsc_opcode op, size_t n,
			 uint32_t mask)
{
	size_t h = wsc_put_hdr(dst, op, n, mask), i;
	const uint8_t *m = dst + h - 4;
	uint8_t *q = dst + h;

	for (i = 0; i < n; i++)
		q[i] ^= m[i & 3];
	return h + n;
}

size_t wsc_frame(uint8_t *dst, enum wsc_opcode op, const void *p, size_t n,
		 uint32_t mask)
{
	size_t h = wsc_hdr_len(n);

	if (n)
		memcpy(dst + h, p, n);
	return wsc_frame_inplace(dst, op, n, mask);
}

size_t wsc_close_frame(uint8_t *dst, unsigned int code, uint32_t mask)
{
	uint8_t c[2] = { (uint8_t)(code >> 8), (uint8_t)code };

	return wsc_frame(dst, WSC_CLOSE, c, code ? 2 : 0, mask);
}

/* ------------------------------------------------------------------ */
/* The server's frames */

void wsc_dec_init(struct wsc_dec *d, uint64_t max_payload)
{
	memset(d, 0, sizeof(*d));
	d->msg_first = true;
	d->max_payload = max_payload;
}

static int dec_fail(struct wsc_dec *d, unsigned int code, int err)
{
	d->err_code = code;
	return err;
}

/* The header is complete: check it and start its payload. */
static int dec_start(struct wsc_dec *d)
{
	uint8_t b0 = d->hdr[0], b1 = d->hdr[1];
	uint64_t len = b1 & 0x7f;
	unsigned int i;

	if (b0 & 0x70)
		return dec_fail(d, 1002, -EPROTO); /* reserved bits */
	if (b1 & 0x80)
		return dec_fail(d, 1002, -EPROTO); /* a masked server frame */
	d->op = b0 & 0x0f;
	d->fin = b0 & 0x80;
	if (len == 126) {
		len = (uint64_t)d->hdr[2] << 8 | d->hdr[3];
	} else if (len == 127) {
		for (len = 0, i = 0; i < 8; i++)
			len = len << 8 | d->hdr[2 + i];
		if (len >> 63)
			return dec_fail(d, 1002, -EPROTO);
	}
	d->left = len;
	switch (d->op) {
	case WSC_CLOSE:
	case WSC_PING:
	case WSC_PONG:
		if (!d->fin || len > WSC_CTL_MAX)
			return dec_fail(d, 1002, -EPROTO);
		d->clen = 0;
		return 0;
	case WSC_TEXT:
	case WSC_BINARY:
		if (d->in_msg)
			return dec_fail(d, 1002, -EPROTO);
		d->msg_first = true;
		d->in_msg = !d->fin;
		break;
	case WSC_CONT:
		if (!d->in_msg)
			return dec_fail(d, 1002, -EPROTO);
		d->in_msg = !d->fin;
		break;
	default:
		return dec_fail(d, 1002, -EPROTO);
	}
	if (d->max_payload && len > d->max_payload)
		return dec_fail(d, 1009, -EMSGSIZE);
	return 0;
}

/* The header's length once its first two bytes are in. */
static unsigned int hdr_need(const struct wsc_dec *d)
{
	unsigned int l = d->hdr[1] & 0x7f;

	return 2 +
	       (l == 126 ? 2 :
		l == 127 ? 8 :
			   0) +
	       (d->hdr[1] & 0x80 ? 4 : 0);
}

static int dec_ctl_done(struct wsc_dec *d, const struct wsc_dec_ops *ops,
			void *arg)
{
	unsigned int code = 1005;

	if (d->op == WSC_CLOSE) {
		if (d->clen == 1)
			return dec_fail(d, 1002, -EPROTO);
		if (d->clen >= 2)
			code = (unsigned int)d->ctl[0] << 8 | d->ctl[1];
		d->closed = true;
	}
	return ops->on_ctl ? ops->on_ctl(arg, d->op, d->ctl, d->clen, code) : 0;
}

int wsc_feed(struct wsc_dec *d, const uint8_t *p, size_t n,
	     const struct wsc_dec_ops *ops, void *arg)
{
	size_t take;
	bool ctl, data_end;
	int r;

	while (n) {
		if (d->closed)
			return dec_fail(d, 1002, -EPROTO);
		/* The header, byte by byte until its length is known. */
		if (d->hlen < 2 || d->hlen < hdr_need(d)) {
			d->hdr[d->hlen++] = *p++;
			n--;
			if (d->hlen < 2 || d->hlen < hdr_need(d))
				continue;
			r = dec_start(d);
			if (r)
				return r;
			if (d->left)
				continue;
		}
		ctl = d->op & 0x8;
		take = d->left < n ? (size_t)d->left : n;
		if (ctl) {
			memcpy(d->ctl + d->clen, p, take);
			d->clen += (uint8_t)take;
		}
		d->left -= take;
		p += take;
		n -= take;
		if (d->left)
			goto more;
		/* The frame is complete. */
		d->hlen = 0;
		if (ctl) {
			r = dec_ctl_done(d, ops, arg);
			if (r)
				return r;
			continue;
		}
		data_end = d->fin;
		r = ops->on_data ? ops->on_data(arg, p - take, take,
						d->msg_first, data_end,
						d->msg_first && d->fin ?
							(int64_t)take :
							-1) :
				   0;
		d->msg_first = data_end;
		if (r)
			return r;
		continue;
more:
		if (!ctl && take) {
			/* Part of a data frame: hand it on now. */
			int64_t ml = d->msg_first && d->fin ?
					     (int64_t)(d->left + take) :
					     -1;

			r = ops->on_data ?
				    ops->on_data(arg, p - take, take,
						 d->msg_first, false, ml) :
				    0;
			d->msg_first = false;
			if (r)
				return r;
		}
	}
	return 0;
}
