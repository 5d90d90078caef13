/* SPDX-License-Identifier: MIT */
/*
 * The echo stream the tools speak: the framing on the wire (ao-echo's
 * --framing, ao-load's requests, ao-misbehave's streams) and ao-load's
 * request payload.  No I/O.
 *
 * A request is a frame: with len16 or len32 framing a 2- or 4-byte header
 * holding the payload length (network byte order, the header excluded),
 * then the payload; with raw framing the payload alone.  The server echoes
 * each frame whole.  The payload starts with the request's sequence number
 * and its intended send time (ns), both 64-bit big-endian (cut short if
 * the payload is shorter than 16 bytes), then filler that depends on the
 * sequence number, so a frame echoed out of order or shifted never
 * compares equal.
 */
#ifndef AO_TOOLS_ECHO_PROTO_H
#define AO_TOOLS_ECHO_PROTO_H

#include <stddef.h>
#include <stdint.h>

enum framing { FRAMING_RAW, FRAMING_LEN16, FRAMING_LEN32 };

#define PAYLOAD_HDR 16 /* sequence number + timestamp */
#define PATTERN_SPAN 256 /* filler is pattern + (seq % PATTERN_SPAN) */
#define PAYLOAD_MAX (64u << 20) /* ao-load's own limit for len32 / raw */

/* "raw", "len16", "len32"; 0, or -1 for anything else. */
int framing_parse(const char *s, enum framing *f);
const char *framing_name(enum framing f);
size_t framing_hdr_len(enum framing f);
/* The largest payload the framing can describe. */
size_t framing_max_payload(enum framing f);

/* The filler pattern: pattern_len(size) bytes, filled by pattern_fill. */
size_t pattern_len(size_t size);
void pattern_fill(uint8_t *pattern, size_t len, uint32_t salt);

/* Write one frame of a size-byte payload (framing_hdr_len + size bytes). */
void frame_build(uint8_t *buf, enum framing f, size_t size, uint64_t seq,
		 uint64_t ts_ns, const uint8_t *pattern);
/* Read the sequence number back from a frame (what fits of it). */
uint64_t frame_seq(const uint8_t *buf, enum framing f, size_t size);

#endif /* AO_TOOLS_ECHO_PROTO_H */
