// SPDX-License-Identifier: MIT
/*
 * Fuzz target: ao-load's two parsers of outside input, linked from
 * tools/load/ with libaotools (a usage error's exit turned into a longjmp
 * back here through cli_exit_hook).
 *
 * Byte 0 even: the reply verifier, conn_on_data().  One connection with
 * the framing, payload size, pipeline depth and request count the next
 * bytes give runs against a simulated echo server: what conn_unsent()
 * offers is "sent" in random pieces, the server echoes the stream back in
 * random chunks, with bytes flipped at the offsets the input lists, and
 * optionally one reply too many.  Checked: every request completes, in
 * order; the mismatch count is exactly the number of requests with a
 * flipped byte; no byte is compared against the wrong request (a clean
 * echo has no mismatch); more bytes back than were sent is a protocol
 * error that kills the connection; rx never passes tx.
 *
 * Byte 0 odd: the command line, load_parse_args(), with the NUL-separated
 * arguments that follow.  A rejected command line must exit with status 2
 * (usage) or 0 (--help, --version); an accepted one must give options
 * within the ranges --help states.
 */
#include <getopt.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include "../../tools/load/load.h"
#include "fuzz.h"

static jmp_buf fuzz_load_jmp;
static int fuzz_load_status;

static __attribute__((noreturn)) void fuzz_load_exit(int status)
{
	fuzz_load_status = status;
	longjmp(fuzz_load_jmp, 1);
}

#define LOAD_MAX_FLIPS 8

static int fuzz_load_reply(const uint8_t *data, size_t size)
{
	static struct load_ctx ctx;
	static struct worker w;
	struct conn c = { .fd = -1 };
	struct eng_conn *flush[1];
	struct fuzz_rng rng;
	uint64_t flips[LOAD_MAX_FLIPS], requests, total, sent = 0, echoed = 0;
	uint64_t bad = 0, now = 1000;
	uint8_t *stream, extra;
	size_t nflips = 0, guard = 0;
	int i;

	if (size < 8)
		return 0;
	memset(&ctx, 0, sizeof(ctx));
	memset(&w, 0, sizeof(w));
	ctx.o.framing = (enum framing)(data[1] % 3);
	ctx.o.size = 1 + ((size_t)data[2] | (size_t)(data[3] & 7) << 8);
	ctx.o.pipeline = 1 + data[4] % 8;
	requests = 1 + data[5] % 40;
	extra = data[6];
	fuzz_rng_seed(&rng, data[7]);
	data += 8;
	size -= 8;

	w.ctx = &ctx;
	w.nconns = 1;
	w.conns = &c;
	w.flush = flush;
	w.alive = 1;
	w.quota = requests;
	w.frame_len = framing_hdr_len(ctx.o.framing) + ctx.o.size;
	w.tx_len = w.frame_len; /* not --ws: sent as echoed */
	total = requests * w.frame_len;
	w.pattern = malloc(pattern_len(ctx.o.size));
	c.ring = malloc((size_t)ctx.o.pipeline * w.frame_len);
	c.echo = c.ring;
	c.t_start = calloc(ctx.o.pipeline, sizeof(*c.t_start));
	stream = malloc(total + 1);
	FUZZ_CHECK(w.pattern && c.ring && c.t_start && stream);
	pattern_fill(w.pattern, pattern_len(ctx.o.size), 7);
	hist_init(&w.hist);

	/* The flips: 4-byte stream offsets from the input. */
	while (size >= 4 && nflips < LOAD_MAX_FLIPS) {
		uint64_t off = fuzz_take(&data, &size, 4);
		bool dup = false;

		/* Twice at one offset would flip the byte back. */
		for (size_t k = 0; k < nflips; k++)
			dup = dup || flips[k] == off;
		if (off < total && !dup)
			flips[nflips++] = off;
	}
	/* Requests with at least one flipped byte. */
	for (uint64_t r = 0; r < requests; r++) {
		for (size_t k = 0; k < nflips; k++) {
			if (flips[k] / w.frame_len == r) {
				bad++;
				break;
			}
		}
	}

	conn_fill(&w, &c, now);
	while (echoed < total) {
		struct iovec iov[2];
		int n = conn_unsent(&w, &c, iov);
		uint64_t room;

		FUZZ_CHECK(++guard < 100000);
		c.dirty = false;
		w.nflush = 0;
		/* Send a random part of what is unsent: the server gets it. */
		for (i = 0; i < n; i++) {
			size_t len = iov[i].iov_len;

			if (fuzz_rng_below(&rng, 3) == 0)
				len = fuzz_rng_below(&rng, (uint32_t)len + 1);
			FUZZ_CHECK(sent + len <= total);
			memcpy(stream + sent, iov[i].iov_base, len);
			conn_on_sent(&w, &c, len);
			sent += len;
			if (len < iov[i].iov_len)
				break;
		}
		/* Echo a random chunk of what the server has. */
		room = sent - echoed;
		if (room) {
			size_t len = 1 + fuzz_rng_below(&rng, (uint32_t)room);
			uint8_t *echo = malloc(len);

			FUZZ_CHECK(echo);
			memcpy(echo, stream + echoed, len);
			for (size_t k = 0; k < nflips; k++)
				if (flips[k] >= echoed &&
				    flips[k] < echoed + len)
					echo[flips[k] - echoed] ^= 0x20;
			now += 1 + fuzz_rng_below(&rng, 1000);
			conn_on_data(&w, &c, echo, len, now);
			free(echo);
			echoed += len;
			FUZZ_CHECK(!c.dead && c.rx == echoed && c.rx <= c.tx);
		}
	}
	/* Every request was sent once and came back once. */
	FUZZ_CHECK(sent == total && c.tx == total && c.rx == total);
	FUZZ_CHECK(c.n_queued == requests && w.issued == requests);
	FUZZ_CHECK(w.st.completed == requests && w.hist.total == requests);
	FUZZ_CHECK(w.st.mismatches == bad);
	FUZZ_CHECK(conn_inflight(&w, &c) == 0);
	/* One reply too many: a protocol error. */
	if (extra & 1) {
		uint8_t more[4] = { 0 };

		conn_on_data(&w, &c, more, 1 + extra % 4, now);
		FUZZ_CHECK(c.dead && w.alive == 0 && w.st.conn_errors == 1);
		FUZZ_CHECK(c.rx == total && w.st.completed == requests);
	}
	free(stream);
	free(c.t_start);
	free(c.ring);
	free(w.pattern);
	return 0;
}

#define LOAD_MAX_ARGS 24

/* No local changes after the setjmp (so none can be clobbered). */
static void fuzz_load_parse(int argc, char **argv)
{
	static struct load_ctx ctx;
	const struct load_opts *o = &ctx.o;

	memset(&ctx, 0, sizeof(ctx));
	optind = 0; /* glibc: start afresh */
	fuzz_load_status = -1;
	cli_exit_hook = fuzz_load_exit;
	if (setjmp(fuzz_load_jmp)) {
		cli_exit_hook = NULL;
		/* EXIT_ERRORS: --engine=uring where io_uring is refused. */
		FUZZ_CHECK(fuzz_load_status == EXIT_USAGE ||
			   fuzz_load_status == EXIT_OK ||
			   fuzz_load_status == EXIT_ERRORS);
		return;
	}
	load_parse_args(argc, argv, &ctx);
	cli_exit_hook = NULL;
	FUZZ_CHECK(o->port >= 1);
	FUZZ_CHECK(o->conns >= 1 && o->conns <= MAX_CONNS);
	FUZZ_CHECK(o->pipeline >= 1 && o->pipeline <= MAX_PIPELINE);
	FUZZ_CHECK(o->threads >= 1 && o->threads <= o->conns);
	FUZZ_CHECK(o->size >= 1 && o->size <= framing_max_payload(o->framing));
	FUZZ_CHECK(o->duration_ns || o->requests);
	FUZZ_CHECK(o->timeout_ns >= 1000000);
	FUZZ_CHECK(o->engine == ENGINE_EPOLL || o->engine == ENGINE_URING);
	FUZZ_CHECK(ctx.salen == sizeof(struct sockaddr_in) ||
		   ctx.salen == sizeof(struct sockaddr_in6));
}

static int fuzz_load_args(const uint8_t *data, size_t size)
{
	static char arg0[] = "ao-load";
	char *buf, *argv[LOAD_MAX_ARGS + 2];
	int argc = fuzz_argv(data, size, arg0, argv, LOAD_MAX_ARGS, &buf);

	fuzz_load_parse(argc, argv);
	free(buf);
	return 0;
}

int fuzz_load(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (data[0] & 1)
		return fuzz_load_args(data + 1, size - 1);
	return fuzz_load_reply(data, size);
}
