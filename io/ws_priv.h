/* SPDX-License-Identifier: MIT */
/*
 * Private to io/: WebSocket (RFC 6455) pieces, wired into the server by
 * io/http.c.  SHA-1 (io/sha1.c) and base64 (io/base64.c) for the
 * handshake, the HTTP/1.1 request parser and response writer
 * (io/ws_handshake.c), the UTF-8 checker, frame decoder and frame header
 * writer (io/ws.c, whose opening comment is the design).
 */
#ifndef AORTA_IO_WS_PRIV_H
#define AORTA_IO_WS_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ------------------------------------------------------------------ */
/* SHA-1 (FIPS 180-4; RFC 3174).  Only for the handshake's accept key. */

#define IO_SHA1_LEN 20

struct io_sha1 {
	uint32_t h[5];
	uint64_t bytes; /* message length so far */
	uint8_t blk[64]; /* the partial block */
};

/* Start a digest. */
void io_sha1_init(struct io_sha1 *s);
/* Add n bytes. */
void io_sha1_update(struct io_sha1 *s, const void *data, size_t n);
/* Finish: the 20-byte digest (s must be initialised again to reuse). */
void io_sha1_final(struct io_sha1 *s, uint8_t out[IO_SHA1_LEN]);
/* One-shot digest of n bytes. */
void io_sha1(const void *data, size_t n, uint8_t out[IO_SHA1_LEN]);

/* ------------------------------------------------------------------ */
/* base64 (RFC 4648 section 4: the standard alphabet, padded). */

/* Characters io_base64_encode() writes for n bytes (without the NUL). */
#define IO_BASE64_LEN(n) (((n) + 2) / 3 * 4)
/* Encode n bytes into dst (IO_BASE64_LEN(n) + 1 bytes: NUL-terminated);
 * returns the length written without the NUL. */
size_t io_base64_encode(const void *src, size_t n, char *dst);
/* Decode n characters, strictly: length a multiple of 4, padding only at
 * the end, unused bits zero, no whitespace.  Returns the bytes written,
 * -EINVAL for a malformed input or -ENOSPC if over cap. */
ssize_t io_base64_decode(const char *src, size_t n, uint8_t *dst, size_t cap);

/* ------------------------------------------------------------------ */
/* UTF-8 (RFC 3629: no overlongs, no surrogates, nothing over U+10FFFF),
 * checked incrementally: a code point may be split across calls. */

struct io_utf8 {
	uint8_t need; /* continuation bytes still expected */
	uint8_t lo, hi; /* the range of the next continuation byte */
};

/* Start (or restart) a check. */
static inline void io_utf8_init(struct io_utf8 *u)
{
	u->need = 0;
	u->lo = 0x80;
	u->hi = 0xbf;
}

/* Check n more bytes: false at the first invalid byte. */
bool io_utf8_feed(struct io_utf8 *u, const uint8_t *p, size_t n);
/* True if the bytes so far end on a code point boundary. */
static inline bool io_utf8_complete(const struct io_utf8 *u)
{
	return u->need == 0;
}

/* ------------------------------------------------------------------ */
/* The handshake (RFC 6455 section 4.2) and plain HTTP GET requests. */

#define IO_WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define IO_WS_KEY_LEN 24 /* base64 of 16 bytes */
#define IO_WS_ACCEPT_LEN 28 /* base64 of a SHA-1 */
#define IO_HTTP_MAX_REQUEST 8192 /* default bound on a request's head */

/* What io_http_parse() found. */
enum io_http_kind {
	IO_HTTP_NONE, /* nothing yet, or an error */
	IO_HTTP_UPGRADE, /* a valid WebSocket upgrade */
	IO_HTTP_GET, /* a plain GET (no Upgrade: websocket), or a HEAD */
};

/* The server's side of the handshake. */
struct io_http_cfg {
	const char *const *protocols; /* subprotocols, preferred first */
	unsigned int n_protocols;
	size_t max_request; /* bound on the head; 0: IO_HTTP_MAX_REQUEST */
	const char *const *origins; /* Origin values an upgrade may have,
				     * NULL-terminated; NULL: any */
};

/* One request: zero it before the first io_http_parse() call. */
struct io_http_req {
	/* Out, once complete. */
	enum io_http_kind kind;
	int status; /* on error: the HTTP status to answer */
	const char *path; /* request target's path (origin-form), in the
			   * buffer */
	size_t path_len;
	char key[IO_WS_KEY_LEN + 1]; /* Sec-WebSocket-Key (UPGRADE) */
	int protocol; /* index into cfg->protocols, or -1 */
	bool http10; /* the request said HTTP/1.0 (plain GET only) */
	bool head; /* a HEAD (kind GET): the answer without its body */
	/* Private: how far the end-of-head search got; where the request
	 * line starts (after empty lines). */
	size_t scanned, start;
};

/*
 * Parse the request head at the start of buf (len bytes: everything
 * received so far; call again with more).  Returns 0 when the head is not
 * complete yet, the head's length (bytes consumed) when it is, with
 * req->kind UPGRADE or GET; or a negative errno with req->status the HTTP
 * status to answer: 400 (malformed, or an upgrade missing what RFC 6455
 * requires), 403 (an upgrade from an Origin not in cfg->origins), 405
 * (neither GET nor HEAD), 413 (the head is over cfg->max_request), 426
 * (an unsupported Sec-WebSocket-Version: answer with
 * io_http_write_error(), which names version 13).
 */
int io_http_parse(const struct io_http_cfg *cfg, const uint8_t *buf, size_t len,
		  struct io_http_req *req);
/* Bytes io_http_sniff() needs at most: a method of 7 letters, a space. */
#define IO_HTTP_SNIFF_MAX 8

/* Whether the first len bytes of a stream can be the start of an HTTP
 * request line (to tell HTTP from other framings on one port): 1 yes,
 * 0 no, -EAGAIN if len is too short to tell. */
int io_http_sniff(const uint8_t *buf, size_t len);

/* The Sec-WebSocket-Accept for a key (IO_WS_ACCEPT_LEN chars + NUL). */
void io_ws_accept(const char *key, size_t key_len,
		  char out[IO_WS_ACCEPT_LEN + 1]);
/* The 101 answer to an UPGRADE request; returns its length, or -ENOSPC if
 * it does not fit in cap bytes. */
int io_ws_write_accept(char *dst, size_t cap, const struct io_http_cfg *cfg,
		       const struct io_http_req *req);
/* An error answer (Connection: close, no body; 405 lists Allow: GET,
 * HEAD, 426 Sec-WebSocket-Version: 13); returns its length or -ENOSPC. */
int io_http_write_error(char *dst, size_t cap, int status);
/* The reason phrase of a status ("Bad Request"); "Error" if unknown. */
const char *io_http_reason(int status);

/* ------------------------------------------------------------------ */
/* Frames (RFC 6455 section 5). */

#define IO_WS_OP_CONT 0x0
#define IO_WS_OP_TEXT 0x1
#define IO_WS_OP_BINARY 0x2
#define IO_WS_OP_CLOSE 0x8
#define IO_WS_OP_PING 0x9
#define IO_WS_OP_PONG 0xa

#define IO_WS_CTL_MAX 125 /* control frame payload bound */
#define IO_WS_HDR_MAX 10 /* a server frame's longest header */

/* Close codes (section 7.4.1). */
#define IO_WS_CLOSE_NORMAL 1000
#define IO_WS_CLOSE_GOING_AWAY 1001
#define IO_WS_CLOSE_PROTOCOL 1002
#define IO_WS_CLOSE_NO_STATUS 1005 /* reported, never sent */
#define IO_WS_CLOSE_BAD_DATA 1007
#define IO_WS_CLOSE_TOO_BIG 1009

/* Decoder flags. */
#define IO_WS_DEC_CLIENT 0x1u /* we are the client: frames unmasked */

/* Decoder events. */
enum io_ws_ev_kind {
	IO_WS_EV_DATA, /* a chunk of a message's payload */
	IO_WS_EV_PING,
	IO_WS_EV_PONG,
	IO_WS_EV_CLOSE,
};

struct io_ws_event {
	enum io_ws_ev_kind kind;
	/* DATA: unmasked payload inside the caller's buffer; PING, PONG:
	 * the payload, CLOSE: the reason, in the decoder (valid until the
	 * next io_ws_decode() call). */
	const uint8_t *data;
	size_t len;
	uint8_t opcode; /* DATA: the message's (TEXT or BINARY) */
	bool fin; /* DATA: the message is complete with this chunk */
	uint16_t code; /* CLOSE: the code, or 1005 if the frame had none */
};

/* A streaming decoder of one connection's received frames. */
struct io_ws_dec {
	/* Configuration. */
	uint64_t max_message; /* bound on a (reassembled) message */
	unsigned int flags; /* IO_WS_DEC_* */
	/* State. */
	uint16_t close_code; /* after an error: the code to close with */
	uint8_t state;
	uint8_t hdr_have, hdr_need;
	uint8_t hdr[14];
	uint8_t opcode; /* the frame's */
	bool fin; /* the frame's FIN bit */
	uint8_t msg_op; /* TEXT/BINARY while a message is open, else 0 */
	uint8_t mask[4];
	uint8_t mask_pos; /* offset into mask of the next payload byte */
	uint64_t left; /* payload bytes of the frame not yet taken */
	uint64_t msg_len; /* bytes of the open message so far */
	struct io_utf8 utf8;
	uint8_t ctl_len;
	uint8_t ctl[IO_WS_CTL_MAX];
};

/* Set up a decoder: max_message 0 means 16 MiB. */
void io_ws_dec_init(struct io_ws_dec *d, uint64_t max_message,
		    unsigned int flags);
/*
 * Decode from buf (len bytes, writable: payload is unmasked in place).
 * Returns 1 with *ev filled, 0 when every byte was taken without an
 * event, or -EPROTO with d->close_code the close code (1002, 1007 or
 * 1009) after which the connection is failed.  *used is the bytes taken
 * either way; call again with the rest.  After a CLOSE event the decoder
 * takes and ignores everything (section 5.5.1: no data after a close).
 */
int io_ws_decode(struct io_ws_dec *d, uint8_t *buf, size_t len, size_t *used,
		 struct io_ws_event *ev);
/* Whether a close code may appear in a close frame (section 7.4). */
bool io_ws_close_code_valid(unsigned int code);

/* A server frame's header length for a payload of len bytes: 2, 4 or 10. */
static inline unsigned int io_ws_hdr_len(uint64_t len)
{
	return len < 126 ? 2 : len <= 0xffff ? 4 : 10;
}

/* Write an unmasked frame header (FIN if fin, the opcode, len) at dst
 * (io_ws_hdr_len(len) bytes); returns its length. */
unsigned int io_ws_write_hdr(uint8_t *dst, uint8_t opcode, bool fin,
			     uint64_t len);
/*
 * Frame once, send to many: write the header so that it ends exactly at
 * payload, in the headroom bytes before it.  Returns the header's start
 * (send from there, header and payload in one contiguous span), or NULL if
 * headroom is too small.
 */
uint8_t *io_ws_frame_in_headroom(uint8_t *payload, size_t headroom,
				 uint8_t opcode, uint64_t len);
/* A close frame's payload: the code and up to 123 bytes of reason (cut at
 * a code point boundary); returns its length. */
size_t io_ws_close_payload(uint8_t *dst, uint16_t code, const char *reason);

#endif /* AORTA_IO_WS_PRIV_H */
