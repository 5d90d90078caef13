// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the HTTP upgrade request parser and the answers
 * (io/ws_handshake.c).
 *
 * Input: a 2-byte header, then the bytes a client sent.
 *	byte 0	  bits 0-1: max_request 0 (the default), 64, 256 or 1024;
 *		  bit 2: the server offers no subprotocols
 *	byte 1	  seed of the feeding steps
 * The bytes are parsed whole, then fed in growing prefixes of random steps
 * on one request (as a server would as bytes arrive).  Checked:
 *  - the first non-zero answer of the prefixes is the whole parse's, with
 *    the same kind, status and protocol; a fresh parse of a prefix
 *    agrees with the one that kept its scan position;
 *  - a complete head is at most max_request bytes and ends in CRLF CRLF;
 *    its path is inside the input and starts with '/';
 *  - an upgrade's key is the base64 of 16 bytes, its protocol one the
 *    server offers, and its 101 answer has the key's accept value;
 *  - an error's status is one of 400, 405, 413, 426, 505 and its answer
 *    is written.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include "../../io/ws_priv.h"
#include "fuzz.h"

#define WSU_HDR 2

static const char *const wsu_protos[] = { "arena.v2", "arena.v1", "chat" };

static void wsu_check(const struct io_http_cfg *cfg, const uint8_t *buf,
		      size_t len, const struct io_http_req *req, int ret)
{
	size_t max = cfg->max_request ? cfg->max_request : IO_HTTP_MAX_REQUEST;
	char out[512], acc[IO_WS_ACCEPT_LEN + 1];
	uint8_t key[32];

	if (ret == 0) {
		FUZZ_CHECK(len < max);
		return;
	}
	if (ret < 0) {
		FUZZ_CHECK(req->kind == IO_HTTP_NONE);
		FUZZ_CHECK(req->status == 400 || req->status == 405 ||
			   req->status == 413 || req->status == 426 ||
			   req->status == 505);
		FUZZ_CHECK(ret == (req->status == 413 ? -EMSGSIZE : -EPROTO));
		FUZZ_CHECK(io_http_write_error(out, sizeof(out), req->status) >
			   0);
		return;
	}
	FUZZ_CHECK((size_t)ret <= len && (size_t)ret <= max && ret >= 4);
	FUZZ_CHECK(!memcmp(buf + ret - 4, "\r\n\r\n", 4));
	FUZZ_CHECK(req->kind == IO_HTTP_UPGRADE || req->kind == IO_HTTP_GET);
	FUZZ_CHECK((const uint8_t *)req->path > buf &&
		   (const uint8_t *)req->path + req->path_len <= buf + ret);
	FUZZ_CHECK(req->path_len > 0 && req->path[0] == '/');
	if (req->kind == IO_HTTP_GET) {
		FUZZ_CHECK(req->protocol == -1);
		return;
	}
	FUZZ_CHECK(!req->http10);
	FUZZ_CHECK(strlen(req->key) == IO_WS_KEY_LEN);
	FUZZ_CHECK(io_base64_decode(req->key, IO_WS_KEY_LEN, key,
				    sizeof(key)) == 16);
	FUZZ_CHECK(req->protocol >= -1 &&
		   req->protocol < (int)cfg->n_protocols);
	FUZZ_CHECK(io_ws_write_accept(out, sizeof(out), cfg, req) > 0);
	io_ws_accept(req->key, IO_WS_KEY_LEN, acc);
	FUZZ_CHECK(strstr(out, acc));
	if (req->protocol >= 0)
		FUZZ_CHECK(strstr(out, cfg->protocols[req->protocol]));
}

int fuzz_ws_upgrade(const uint8_t *data, size_t size)
{
	static const size_t maxes[] = { 0, 64, 256, 1024 };
	struct io_http_cfg cfg = { .protocols = wsu_protos, .n_protocols = 3 };
	struct io_http_req whole, inc, fresh;
	struct fuzz_rng rng;
	size_t len = 0;
	int ret, r = 0;

	if (size < WSU_HDR)
		return 0;
	cfg.max_request = maxes[data[0] & 3];
	if (data[0] & 4)
		cfg.n_protocols = 0;
	fuzz_rng_seed(&rng, data[1]);
	data += WSU_HDR;
	size -= WSU_HDR;

	memset(&whole, 0, sizeof(whole));
	ret = io_http_parse(&cfg, data, size, &whole);
	wsu_check(&cfg, data, size, &whole, ret);

	memset(&inc, 0, sizeof(inc));
	while (len < size) {
		len += 1 + fuzz_rng_below(&rng, 64);
		if (len > size)
			len = size;
		r = io_http_parse(&cfg, data, len, &inc);
		memset(&fresh, 0, sizeof(fresh));
		FUZZ_CHECK(io_http_parse(&cfg, data, len, &fresh) == r);
		FUZZ_CHECK(fresh.kind == inc.kind &&
			   fresh.status == inc.status);
		wsu_check(&cfg, data, len, &inc, r);
		if (r)
			break;
	}
	FUZZ_CHECK(r == ret);
	FUZZ_CHECK(inc.kind == whole.kind && inc.status == whole.status);
	FUZZ_CHECK(ret <= 0 || inc.protocol == whole.protocol);
	(void)io_http_sniff(data, size);
	return 0;
}
