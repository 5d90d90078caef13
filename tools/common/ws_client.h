/* SPDX-License-Identifier: MIT */
/*
 * The client side of WebSocket (RFC 6455) for the load tools (ao-load
 * --ws, ao-bots --ws, ao-misbehave --ws): the upgrade request and the
 * check of its 101 answer, masked frames to send, and an incremental
 * decoder of the server's frames; and the whole handshake on a connected
 * socket, for tools that open their connections before their load runs.
 *
 * The accept key is the library's (ao_ws_accept_key(): the tools use the
 * public API only); the base64 encoder is this file's own, for the keys
 * (the library has none in its public API).
 *
 * The mask of each frame comes from a xorshift generator: RFC 6455 wants
 * it unpredictable to protect proxies from cache poisoning by scripts in
 * a browser; a load generator talking to its own server on loopback
 * needs only a different mask per frame, so that the server's unmasking
 * is exercised as with a real client.
 */
#ifndef AO_TOOLS_WS_CLIENT_H
#define AO_TOOLS_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/io/server.h>

#define WSC_KEY_LEN AO_WS_KEY_LEN /* base64 of 16 random bytes */
#define WSC_ACCEPT_LEN AO_WS_ACCEPT_LEN /* base64 of a SHA-1 */
#define WSC_CTL_MAX 125 /* a control frame's payload, at most */
#define WSC_HDR_MAX 14 /* a client frame's header, at most */
#define WSC_RESPONSE_MAX 4096 /* the bound on the 101 answer's head */

enum wsc_opcode {
	WSC_CONT = 0x0,
	WSC_TEXT = 0x1,
	WSC_BINARY = 0x2,
	WSC_CLOSE = 0x8,
	WSC_PING = 0x9,
	WSC_PONG = 0xa,
};

/* base64 (RFC 4648, padded) of n bytes into dst ((n + 2) / 3 * 4 + 1
 * bytes, NUL-terminated); the length without the NUL. */
size_t wsc_base64(const void *src, size_t n, char *dst);

/* A xorshift64 step: the next pseudo-random value (*state never 0). */
uint64_t wsc_rand(uint64_t *state);
/* A seed for wsc_rand() from the clock and a salt (never 0). */
uint64_t wsc_seed(uint64_t salt);

/* A fresh Sec-WebSocket-Key: 16 random bytes in base64 (NUL-terminated). */
void wsc_key(uint64_t *rng, char key[WSC_KEY_LEN + 1]);
/* The Sec-WebSocket-Accept the server must answer for key (a NUL-ended
 * string): 0, or -EINVAL if key is not a WebSocket key. */
int wsc_accept(const char *key, char out[WSC_ACCEPT_LEN + 1]);

/*
 * The upgrade request for path on host, offering protocol (NULL: none)
 * into buf: its length, or -ENOSPC if over cap.
 */
int wsc_request(char *buf, size_t cap, const char *host, const char *path,
		const char *key, const char *protocol);
/*
 * Check the server's answer, the len bytes received so far: 0 while its
 * head is incomplete; the head's length once it is a valid 101 for key
 * (the bytes after it are frames); -EPROTO if it is not (another status:
 * *status says which, or 0 when the status line is malformed; a missing
 * or wrong Upgrade, Connection or Sec-WebSocket-Accept; a subprotocol
 * that was not offered), -EMSGSIZE if the head is over WSC_RESPONSE_MAX,
 * -EINVAL if key is not a WebSocket key (no accept key to check).
 */
int wsc_response(const char *buf, size_t len, const char *key,
		 const char *protocol, int *status);

/*
 * The handshake on fd, a connected socket (blocking or not), within
 * timeout_ns: send the request (a fresh key from rng), read exactly the
 * answer's head and check it.  The bytes after the head (frames the
 * server sent at once) stay in the socket.  0, or a negative errno:
 * -EPROTO (a bad answer: *status, when not NULL, is its HTTP status or
 * 0), -ETIMEDOUT, -ECONNRESET (closed before the answer), -EMSGSIZE, or
 * a send/recv/poll error.
 */
int wsc_handshake_fd(int fd, const char *host, const char *path,
		     const char *protocol, uint64_t *rng, uint64_t timeout_ns,
		     int *status);

/* The header of a client frame of an n-byte payload: 6, 8 or 14 bytes. */
size_t wsc_hdr_len(size_t n);
/* Write that header (final, opcode op, mask) into dst: its length.  The
 * caller masks the payload: byte i ^ dst[len - 4 + i % 4]. */
size_t wsc_put_hdr(uint8_t *dst, enum wsc_opcode op, size_t n, uint32_t mask);
/*
 * One final, masked frame of opcode with payload p (n bytes; p may be
 * NULL when n is 0) into dst (wsc_hdr_len(n) + n bytes): its length.
 * The payload is copied masked with mask; dst and p must not overlap.
 */
size_t wsc_frame(uint8_t *dst, enum wsc_opcode op, const void *p, size_t n,
		 uint32_t mask);
/* The same with the header written into dst and the payload masked in
 * place at dst + wsc_hdr_len(n). */
size_t wsc_frame_inplace(uint8_t *dst, enum wsc_opcode op, size_t n,
			 uint32_t mask);

/*
 * What the decoder hands its user.  on_data: payload bytes of a data
 * message, in order, any segmentation (first: they start the message;
 * fin: they end it; msg_len: the message's length when it is one frame,
 * else -1).  on_ctl: a whole control frame (ping, pong, close; for close
 * code is the status, 1005 if none).  Either returns 0, or a negative
 * errno that stops wsc_feed(), which returns it.
 */
struct wsc_dec_ops {
	int (*on_data)(void *arg, const uint8_t *p, size_t n, bool first,
		       bool fin, int64_t msg_len);
	int (*on_ctl)(void *arg, enum wsc_opcode op, const uint8_t *p, size_t n,
		      unsigned int code);
};

/* The decoder's state: zero it, or wsc_dec_init(). */
struct wsc_dec {
	uint8_t hdr[14]; /* the frame header being read */
	uint8_t hlen; /* its bytes so far */
	uint8_t op; /* the current frame's opcode */
	bool fin;
	bool in_msg; /* a fragmented data message is open */
	bool msg_first; /* the next data bytes start a message */
	bool closed; /* a close frame was decoded: nothing after it */
	uint64_t left; /* payload bytes of the current frame still to come */
	uint64_t max_payload; /* data frame bound; 0: none */
	uint8_t ctl[WSC_CTL_MAX];
	uint8_t clen;
	unsigned int err_code; /* the close code a decode error calls for */
};

void wsc_dec_init(struct wsc_dec *d, uint64_t max_payload);
/*
 * Decode n bytes of the server's stream: 0, or a negative errno: -EPROTO
 * for a frame RFC 6455 forbids from a server (masked, reserved bits, an
 * unknown opcode, a control frame over 125 bytes or fragmented, a
 * continuation without a message, a message inside a message, data after
 * close; d->err_code says 1002), -EMSGSIZE for a data frame over
 * max_payload (1009), or what a callback returned.
 */
int wsc_feed(struct wsc_dec *d, const uint8_t *p, size_t n,
	     const struct wsc_dec_ops *ops, void *arg);

/* A close frame with code (0: no code) into dst (8 bytes): its length. */
size_t wsc_close_frame(uint8_t *dst, unsigned int code, uint32_t mask);

#endif /* AO_TOOLS_WS_CLIENT_H */
