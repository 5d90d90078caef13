// SPDX-License-Identifier: MIT
/*
 * The HTTP/1.1 side of WebSocket: the upgrade request (RFC 6455 section
 * 4.2.1) and plain GET requests on the same port, and the answers.
 *
 * io_http_parse() is given everything received so far.  It looks for the
 * end of the head (CRLF CRLF) only in the bytes it has not searched yet
 * (req->scanned), so a client sending a byte at a time costs a linear
 * amount of work, and bounds the head at cfg->max_request (413); a bare LF
 * on the way is a 400 at once, as the end would never come.  Empty lines
 * (CRLF) before the request line are skipped, and count in the bound.
 * Once the head is complete it is parsed once, strictly: CRLF line ends,
 * no folded lines, no control characters, no body (a GET with
 * Content-Length other than 0 or with Transfer-Encoding is refused, so
 * that no bytes of a body are ever read as frames).  The target is
 * origin-form or absolute-form (http_target()).
 *
 * Plain requests are GET and HEAD (RFC 9110 section 9.1: a HEAD is
 * answered as its GET would be, without the body; a HEAD with Upgrade is a
 * plain one).  An upgrade needs GET, HTTP/1.1 (or a later 1.x), Host,
 * Upgrade with the token "websocket", Connection with the token "upgrade"
 * (both lists, case-insensitive, possibly over several header lines), one
 * Sec-WebSocket-Key that is the base64 of 16 bytes, and
 * Sec-WebSocket-Version 13 (426 naming 13 for another version, 400 when
 * missing), and, when the server lists origins, an Origin among them or
 * none (403 otherwise: origin_allowed()).  The subprotocol is the first
 * of the server's list, in the server's order of preference, that the
 * client offered; none offered or none in common leaves it unset (the
 * caller decides whether to refuse).  Sec-WebSocket-Extensions is
 * ignored: permessage-deflate is declined by not answering it (see
 * io/ws.c).  A GET without Upgrade: websocket is a plain request, for
 * /metrics and static files; other methods get 405.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <aorta/io/server.h>
#include "ws_priv.h"

/* RFC 9110 tchar. */
static bool is_tchar(uint8_t c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c);
}

static uint8_t lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

static bool eq_nocase(const uint8_t *p, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!s[i] || lower(p[i]) != lower((uint8_t)s[i]))
			return false;
	return s[n] == '\0';
}

static bool is_ows(uint8_t c)
{
	return c == ' ' || c == '\t';
}

/*
 * The next element of a comma-separated list from *i, trimmed, in
 * [*s, *e); empty elements are skipped (RFC 9110 section 5.6.1).  False
 * at the end of the list.
 */
static bool list_next(const uint8_t *p, size_t n, size_t *i, size_t *s,
		      size_t *e)
{
	while (*i < n) {
		*s = *i;
		while (*i < n && p[*i] != ',')
			(*i)++;
		*e = (*i)++;
		while (*s < *e && is_ows(p[*s]))
			(*s)++;
		while (*e > *s && is_ows(p[*e - 1]))
			(*e)--;
		if (*e > *s)
			return true;
	}
	return false;
}

/* Whether the list has this token (case-insensitive). */
static bool list_has(const uint8_t *p, size_t n, const char *token)
{
	size_t i = 0, s, e;

	while (list_next(p, n, &i, &s, &e))
		if (eq_nocase(p + s, e - s, token))
			return true;
	return false;
}

struct proto_pick {
	const struct io_http_cfg *cfg;
	int best;
};

/* The offered subprotocols: keep the server's most preferred one. */
static void list_pick(const uint8_t *p, size_t n, struct proto_pick *pp)
{
	size_t i = 0, s, e;
	unsigned int k;

	/* Subprotocol names are case-sensitive (section 4.1). */
	while (list_next(p, n, &i, &s, &e)) {
		for (k = 0; k < pp->cfg->n_protocols; k++) {
			const char *name = pp->cfg->protocols[k];

			if ((int)k < pp->best && strlen(name) == e - s &&
			    !memcmp(name, p + s, e - s))
				pp->best = (int)k;
		}
	}
}

static int http_fail(struct io_http_req *req, int status)
{
	req->kind = IO_HTTP_NONE;
	req->status = status;
	return status == 413 ? -EMSGSIZE : -EPROTO;
}

/* What the header lines said. */
struct http_head {
	unsigned int hosts, keys, versions, origins;
	bool up_ws, conn_up, body;
	const uint8_t *key, *version, *origin;
	size_t key_len, version_len, origin_len;
	struct proto_pick pick;
};

/*
 * Whether an upgrade may come from its Origin (RFC 6455 section 10.2):
 * a browser sends the origin of the page that opens the WebSocket, so a
 * server on the player's machine or LAN can refuse the pages of other
 * sites.  A request without Origin is not a browser's and is allowed;
 * more than one is not a browser's either (RFC 6454 section 7.3) and is
 * refused.  Origins are compared whole, ASCII case-insensitively (scheme
 * and host are case-insensitive).
 */
static bool origin_allowed(const struct io_http_cfg *cfg,
			   const struct http_head *h)
{
	const char *const *o;

	if (!cfg->origins || !h->origins)
		return true;
	if (h->origins > 1)
		return false;
	for (o = cfg->origins; *o; o++)
		if (eq_nocase(h->origin, h->origin_len, *o))
			return true;
	return false;
}

static void http_header(struct http_head *h, const uint8_t *name, size_t nlen,
			const uint8_t *v, size_t vlen)
{
	if (eq_nocase(name, nlen, "host")) {
		h->hosts++;
	} else if (eq_nocase(name, nlen, "upgrade")) {
		if (list_has(v, vlen, "websocket"))
			h->up_ws = true;
	} else if (eq_nocase(name, nlen, "connection")) {
		if (list_has(v, vlen, "upgrade"))
			h->conn_up = true;
	} else if (eq_nocase(name, nlen, "sec-websocket-key")) {
		h->keys++;
		h->key = v;
		h->key_len = vlen;
	} else if (eq_nocase(name, nlen, "sec-websocket-version")) {
		h->versions++;
		h->version = v;
		h->version_len = vlen;
	} else if (eq_nocase(name, nlen, "origin")) {
		h->origins++;
		h->origin = v;
		h->origin_len = vlen;
	} else if (eq_nocase(name, nlen, "sec-websocket-protocol")) {
		list_pick(v, vlen, &h->pick);
	} else if (eq_nocase(name, nlen, "content-length")) {
		if (vlen != 1 || v[0] != '0')
			h->body = true;
	} else if (eq_nocase(name, nlen, "transfer-encoding")) {
		h->body = true;
	}
}

static bool is_alpha(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * The path of the request target [t0, t1) in [*ps, *pe): the target in
 * origin-form ("/path?query"); in absolute-form
 * ("http://host:port/path?query", which a server MUST accept, RFC 9112
 * section 3.2.2) what follows the authority, the scheme and the authority
 * being ignored as Host is.  An absolute-form without a path is "/" (RFC
 * 9110 section 4.2.3): the last '/' of "://".
 * 0 or 400 (asterisk-form, no host, userinfo, a query with no path).
 */
static int http_target(const uint8_t *p, size_t t0, size_t t1, size_t *ps,
		       size_t *pe)
{
	size_t i = t0, a;

	*pe = t1;
	if (p[t0] == '/') {
		*ps = t0;
		return 0;
	}
	/* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
	if (!is_alpha(p[i]))
		return 400;
	while (i < t1 && (is_alpha(p[i]) || (p[i] >= '0' && p[i] <= '9') ||
			  p[i] == '+' || p[i] == '-' || p[i] == '.'))
		i++;
	if (t1 - i < 3 || memcmp(p + i, "://", 3))
		return 400;
	a = i + 3;
	for (i = a; i < t1 && p[i] != '/' && p[i] != '?' && p[i] != '#'; i++)
		/* RFC 9110 section 4.2.4: userinfo is an error. */
		if (p[i] == '@')
			return 400;
	if (i == a)
		return 400;
	if (i == t1) {
		*ps = a - 1;
		*pe = a;
		return 0;
	}
	/* "http://host?q" would need a '/' that is not in the buffer. */
	if (p[i] != '/')
		return 400;
	*ps = i;
	return 0;
}

/* The request line: method SP target SP version.  0 or an HTTP status. */
static int http_request_line(const uint8_t *p, size_t n,
			     struct io_http_req *req)
{
	size_t i = 0, m, t0, t1, ps, pe;
	int st;

	while (i < n && is_tchar(p[i]))
		i++;
	m = i;
	if (m == 0 || i >= n || p[i] != ' ')
		return 400;
	t0 = ++i;
	while (i < n && p[i] > 0x20 && p[i] < 0x7f)
		i++;
	t1 = i;
	if (t1 == t0 || i >= n || p[i] != ' ')
		return 400;
	i++;
	/* HTTP/1.x; a version is two digits (RFC 9112 section 2.3). */
	if (n - i != 8 || memcmp(p + i, "HTTP/", 5) || p[i + 6] != '.' ||
	    p[i + 5] < '0' || p[i + 5] > '9' || p[i + 7] < '0' ||
	    p[i + 7] > '9')
		return 400;
	if (p[i + 5] != '1')
		return 505;
	req->http10 = p[i + 7] == '0';
	/* GET and HEAD, which a general-purpose server must both support
	 * (RFC 9110 section 9.1). */
	req->head = m == 4 && !memcmp(p, "HEAD", 4);
	if (!req->head && (m != 3 || memcmp(p, "GET", 3)))
		return 405;
	st = http_target(p, t0, t1, &ps, &pe);
	if (st)
		return st;
	req->path = (const char *)p + ps;
	req->path_len = pe - ps;
	return 0;
}

/*
 * The end of the head (just past CRLF CRLF) in *end, or 0 if not found
 * yet; -EPROTO at a bare LF before it (a client ending its lines in LF
 * alone would otherwise wait for the deadline: it never sends CRLF CRLF).
 * Only the first max bytes are looked at: past them is 413.
 */
static int http_find_end(const uint8_t *buf, size_t len, size_t max,
			 struct io_http_req *req, size_t *end)
{
	size_t i;

	*end = 0;
	for (i = req->scanned; i < len && i < max; i++) {
		if (i == req->start && buf[i] == '\r') {
			/* An empty line before the request line, which a
			 * server SHOULD ignore (RFC 9112 section 2.2): a
			 * client may end its previous body with CRLF. */
			if (i + 1 == len)
				break; /* its LF is yet to come */
			if (buf[i + 1] != '\n')
				return -EPROTO;
			req->start = ++i + 1;
			continue;
		}
		if (buf[i] != '\n')
			continue;
		if (!i || buf[i - 1] != '\r')
			return -EPROTO;
		if (i >= req->start + 3 && buf[i - 3] == '\r' &&
		    buf[i - 2] == '\n') {
			*end = i + 1;
			return 0;
		}
	}
	req->scanned = i;
	return 0;
}

int io_http_parse(const struct io_http_cfg *cfg, const uint8_t *buf, size_t len,
		  struct io_http_req *req)
{
	size_t max = cfg->max_request ? cfg->max_request : IO_HTTP_MAX_REQUEST;
	struct http_head h = { .pick = { .cfg = cfg, .best = -1 } };
	size_t end, i, ls, le;
	uint8_t dec[18];
	int st;

	req->kind = IO_HTTP_NONE;
	req->protocol = -1;
	if (http_find_end(buf, len, max, req, &end))
		return http_fail(req, 400);
	if (!end)
		return len >= max ? http_fail(req, 413) : 0;
	if (end > max)
		return http_fail(req, 413);
	h.pick.best = (int)cfg->n_protocols;

	/* Lines: [ls, le) without the CRLF; the head ends in an empty one. */
	for (i = 0; i < end; i++)
		if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
			return http_fail(req, 400);
	le = req->start;
	while (buf[le] != '\r')
		le++;
	if (buf[le + 1] != '\n')
		return http_fail(req, 400);
	st = http_request_line(buf + req->start, le - req->start, req);
	if (st)
		return http_fail(req, st);
	for (ls = le + 2; ls < end - 2; ls = le + 2) {
		size_t c, vs, ve;

		for (le = ls; buf[le] != '\r'; le++)
			;
		/* A bare CR, a folded line, a control character, a name
		 * that is not a token, or no colon. */
		if (buf[le + 1] != '\n')
			return http_fail(req, 400);
		for (c = ls; c < le && is_tchar(buf[c]); c++)
			;
		if (c == ls || c == le || buf[c] != ':')
			return http_fail(req, 400);
		for (vs = c + 1; vs < le; vs++)
			if (buf[vs] < 0x20 && buf[vs] != '\t')
				return http_fail(req, 400);
		for (vs = c + 1; vs < le && is_ows(buf[vs]); vs++)
			;
		for (ve = le; ve > vs && is_ows(buf[ve - 1]); ve--)
			;
		if (memchr(buf + ls, 0x7f, le - ls))
			return http_fail(req, 400);
		http_header(&h, buf + ls, c - ls, buf + vs, ve - vs);
	}
	if (h.body || h.hosts > 1 || (!req->http10 && !h.hosts))
		return http_fail(req, 400);
	/* A HEAD is answered as its GET would be, but with no body: not
	 * with a 101, which the upgrade's GET would get (a server may
	 * ignore Upgrade, RFC 9110 section 7.8). */
	if (!h.up_ws || req->head) {
		req->kind = IO_HTTP_GET;
		return (int)end;
	}
	if (req->http10 || !h.conn_up || h.keys != 1 || h.versions > 1)
		return http_fail(req, 400);
	if (h.versions == 0)
		return http_fail(req, 400);
	if (h.version_len != 2 || memcmp(h.version, "13", 2))
		return http_fail(req, 426);
	if (h.key_len != IO_WS_KEY_LEN ||
	    io_base64_decode((const char *)h.key, h.key_len, dec,
			     sizeof(dec)) != 16)
		return http_fail(req, 400);
	if (!origin_allowed(cfg, &h))
		return http_fail(req, 403);
	memcpy(req->key, h.key, IO_WS_KEY_LEN);
	req->key[IO_WS_KEY_LEN] = '\0';
	if (h.pick.best < (int)cfg->n_protocols)
		req->protocol = h.pick.best;
	req->kind = IO_HTTP_UPGRADE;
	return (int)end;
}

/*
 * A request line starts with its method, a token of upper-case letters
 * (GET, POST, OPTIONS...), then a space.  Any such start is taken as HTTP,
 * not only GET's, so that every method gets its answer (405) rather than
 * a bare close; the other methods' names are at most 7 letters.
 */
int io_http_sniff(const uint8_t *buf, size_t len)
{
	size_t i;

	for (i = 0; i < len && i < IO_HTTP_SNIFF_MAX; i++) {
		if (buf[i] == ' ')
			return i ? 1 : 0;
		if (buf[i] < 'A' || buf[i] > 'Z')
			return 0;
	}
	return i < IO_HTTP_SNIFF_MAX ? -EAGAIN : 0;
}

void io_ws_accept(const char *key, size_t key_len,
		  char out[IO_WS_ACCEPT_LEN + 1])
{
	static const char guid[] = IO_WS_GUID;
	uint8_t d[IO_SHA1_LEN];
	struct io_sha1 s;

	io_sha1_init(&s);
	io_sha1_update(&s, key, key_len);
	io_sha1_update(&s, guid, sizeof(guid) - 1);
	io_sha1_final(&s, d);
	io_base64_encode(d, sizeof(d), out);
}

/* The public face of io_ws_accept(), for clients and other servers: the
 * same check of the key as io_http_parse() makes of a request's. */
AO_BUILD_BUG_ON(AO_WS_KEY_LEN != IO_WS_KEY_LEN);
AO_BUILD_BUG_ON(AO_WS_ACCEPT_LEN != IO_WS_ACCEPT_LEN);

int ao_ws_accept_key(const char *key, size_t len,
		     char out[AO_WS_ACCEPT_LEN + 1])
{
	uint8_t dec[18];

	if (!key || !out || len != IO_WS_KEY_LEN ||
	    io_base64_decode(key, len, dec, sizeof(dec)) != 16)
		return -EINVAL;
	io_ws_accept(key, len, out);
	return 0;
}

/* snprintf's result as ours: the length, or -ENOSPC if truncated. */
static int fit(int n, size_t cap)
{
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

int io_ws_write_accept(char *dst, size_t cap, const struct io_http_cfg *cfg,
		       const struct io_http_req *req)
{
	char acc[IO_WS_ACCEPT_LEN + 1];
	const char *proto = NULL;

	if (req->kind != IO_HTTP_UPGRADE)
		return -EINVAL;
	if (req->protocol >= 0 &&
	    (unsigned int)req->protocol < cfg->n_protocols)
		proto = cfg->protocols[req->protocol];
	io_ws_accept(req->key, strlen(req->key), acc);
	return fit(snprintf(dst, cap,
			    "HTTP/1.1 101 Switching Protocols\r\n"
			    "Upgrade: websocket\r\n"
			    "Connection: Upgrade\r\n"
			    "Sec-WebSocket-Accept: %s\r\n"
			    "%s%s%s"
			    "\r\n",
			    acc, proto ? "Sec-WebSocket-Protocol: " : "",
			    proto ? proto : "", proto ? "\r\n" : ""),
		   cap);
}

const char *io_http_reason(int status)
{
	switch (status) {
	case 101:
		return "Switching Protocols";
	case 200:
		return "OK";
	case 204:
		return "No Content";
	case 304:
		return "Not Modified";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 426:
		return "Upgrade Required";
	case 500:
		return "Internal Server Error";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}

int io_http_write_error(char *dst, size_t cap, int status)
{
	const char *extra = status == 405 ? "Allow: GET, HEAD\r\n" :
			    status == 426 ? "Sec-WebSocket-Version: 13\r\n"
					    "Upgrade: websocket\r\n" :
					    "";

	if (status < 100 || status > 599)
		return -EINVAL;
	/* Upgrade is hop-by-hop: its sender lists it in Connection (RFC
	 * 9110 section 7.8), so that a proxy does not forward it. */
	return fit(snprintf(dst, cap,
			    "HTTP/1.1 %d %s\r\n"
			    "%s"
			    "Content-Length: 0\r\n"
			    "Connection: %sclose\r\n"
			    "\r\n",
			    status, io_http_reason(status), extra,
			    status == 426 ? "Upgrade, " : ""),
		   cap);
}
