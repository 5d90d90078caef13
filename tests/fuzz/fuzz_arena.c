// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the arena protocol's parsers of outside input, linked from
 * tools/common/arena_proto.c and tools/bots/bot.c.
 *
 * Byte 0 even: ap_decode() of the rest as one payload (the server decodes
 * every client frame so): it reads nothing out of bounds, and a payload it
 * accepts encodes back to the same bytes with the ap_enc_*() functions.
 *
 * Byte 0 odd: ao-bots' stream parser and verifier, bot_on_data(), after a
 * welcome and a joined, fed the rest in chunks of random sizes (the seed
 * is byte 1): it must not crash, and it must hand the verifier exactly
 * the frames a parse of the whole stream finds (zero-length frames are
 * refused, a frame cut by the end of the input is not one).
 */
#include <stdlib.h>
#include <string.h>
#include "../../tools/bots/bots.h"
#include "fuzz.h"

static struct bot_meas fuzz_arena_meas;
static struct bots_ctx fuzz_arena_ctx;
static const struct bot_env fuzz_arena_env = {
	.meas = &fuzz_arena_meas,
	.ctx = &fuzz_arena_ctx,
};

/* Encode m again; the payload's size. */
static size_t fuzz_arena_encode(const struct ap_msg *m, uint8_t *out)
{
	size_t n = 0;

	switch (m->type) {
	case AP_HELLO:
		return ap_enc_hello(out, m->hello.name, m->hello.name_len);
	case AP_JOIN:
		return ap_enc_join(out, m->join.room);
	case AP_INPUT:
		return ap_enc_input(out, m->input.seq, m->input.dir);
	case AP_CHAT:
		return ap_enc_chat(out, m->chat.text, m->chat.len);
	case AP_PING:
		return ap_enc_ping(out, m->ping.stamp);
	case AP_PONG:
		return ap_enc_pong(out, m->ping.stamp);
	case AP_LEAVE:
		return ap_enc_leave(out);
	case AP_ACK:
		return ap_enc_ack(out, m->ack.tick);
	case AP_WATCH:
		return ap_enc_watch(out, m->watch.room);
	case AP_WELCOME:
		return ap_enc_welcome(out, m->welcome.player,
				      m->welcome.tick_hz, m->welcome.room_size,
				      m->welcome.width, m->welcome.height,
				      m->welcome.speed);
	case AP_JOINED:
		return ap_enc_joined(out, m->joined.room, m->joined.members,
				     m->joined.tick, m->joined.x, m->joined.y,
				     m->joined.chat_seq);
	case AP_SNAPSHOT:
		n = ap_enc_snap_hdr(out, m->snap.tick, m->snap.room,
				    m->snap.count);
		for (unsigned int i = 0; i < m->snap.count; i++) {
			struct ap_entry e;

			ap_snap_entry(m, i, &e);
			ap_snap_put(out, i, &e);
		}
		return ap_snapshot_len(m->snap.count);
	case AP_CHAT_LINE:
		return ap_enc_chat_line(out, m->line.room, m->line.tick,
					m->line.chat_seq, m->line.from,
					m->line.text, m->line.len);
	case AP_ERROR:
		return ap_enc_error(out, m->error.code);
	}
	return n;
}

static int fuzz_arena_decode(const uint8_t *data, size_t size)
{
	static uint8_t out[70000];
	struct ap_msg m;

	if (ap_decode(data, size, &m))
		return 0;
	FUZZ_CHECK(fuzz_arena_encode(&m, out) == size);
	FUZZ_CHECK(!memcmp(out, data, size));
	return 0;
}

/* Frames of a whole stream (what the chunked parse must find). */
static uint64_t fuzz_arena_frames(const uint8_t *p, size_t n)
{
	uint64_t frames = 0;

	while (n >= AP_HDR) {
		size_t len = ap_get16(p);

		if (n < AP_HDR + len)
			break;
		frames += len > 0;
		p += AP_HDR + len;
		n -= AP_HDR + len;
	}
	return frames;
}

static int fuzz_arena_stream(const uint8_t *data, size_t size)
{
	struct bot *b = calloc(1, sizeof(*b));
	uint8_t p[64];
	struct fuzz_rng rng;
	uint64_t before;
	size_t n;

	FUZZ_CHECK(b);
	memset(&fuzz_arena_meas, 0, sizeof(fuzz_arena_meas));
	fuzz_arena_meas.on = true;
	hist_init(&fuzz_arena_meas.latency);
	hist_init(&fuzz_arena_meas.jitter);
	hist_init(&fuzz_arena_meas.rtt);
	memset(&fuzz_arena_ctx, 0, sizeof(fuzz_arena_ctx));
	fuzz_rng_seed(&rng, size ? data[0] : 0);
	if (size) {
		data++;
		size--;
	}
	/* A bot in room 1 at tick 10, so that snapshots get checked. */
	b->env = &fuzz_arena_env;
	bot_start(b, 0);
	n = ap_enc_welcome(p, 7, 20, 50, 100, 100, 8);
	bot_on_frame(b, p, n, 0);
	n = ap_enc_joined(p, 1, 1, 10, 50, 50, 0);
	bot_on_frame(b, p, n, 0);
	FUZZ_CHECK(b->state == B_ROOM);
	bot_send_input(b, 3, 0);
	before = fuzz_arena_meas.stat[S_MSGS_IN];
	for (size_t off = 0; off < size;) {
		size_t k = 1 + fuzz_rng_below(&rng, 64);

		if (k > size - off)
			k = size - off;
		bot_on_data(b, data + off, k, 1000000);
		off += k;
	}
	FUZZ_CHECK(fuzz_arena_meas.stat[S_MSGS_IN] - before ==
		   fuzz_arena_frames(data, size));
	free(b->part);
	free(b);
	return 0;
}

int fuzz_arena(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (data[0] % 2 == 0)
		return fuzz_arena_decode(data + 1, size - 1);
	return fuzz_arena_stream(data + 1, size - 1);
}
