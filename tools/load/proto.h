/* SPDX-License-Identifier: MIT */
/*
 * The pure parts of ao-load: the framing on the wire, the request payload,
 * and the parsing of option values (server addresses included: ao-echo,
 * ao-misbehave and the other tools parse theirs here too).  No I/O, so
 * tests can include proto.c.
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
#ifndef AO_LOAD_PROTO_H
#define AO_LOAD_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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

/*
 * Option values.  Each returns 0, or -1 for a malformed or out-of-range
 * value (out untouched).
 *  parse_count: decimal, optional k/M/G suffix (x1000), within [min, max];
 *  parse_size: decimal, optional k/K/m/M suffix (x1024), within [min, max];
 *  parse_duration: decimal seconds, fraction allowed, optional suffix
 *  ms, s, m or h; result in ns, within [min_ns, max_ns].
 */
int parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int parse_duration(const char *s, uint64_t min_ns, uint64_t max_ns,
		   uint64_t *out);
/*
 *  parse_addr: a numeric address, with port, into *sa (a struct
 *  sockaddr_storage) and its size into *len: an IPv4 dotted quad
 *  ("127.0.0.1") or an IPv6 address, bare or in brackets ("::1", "[::1]",
 *  "fe80::1%eth0").  getaddrinfo() with AI_NUMERICHOST: never a name
 *  lookup, and none of inet_aton()'s shorthands ("1.2.3").
 */
int parse_addr(const char *s, uint16_t port, struct sockaddr_storage *sa,
	       socklen_t *len);

#endif /* AO_LOAD_PROTO_H */
