// SPDX-License-Identifier: MIT
/*
 * ao-echo reads its option values (counts, sizes, durations, framing
 * names) exactly as ao-load does: the same parser, compiled in from
 * tools/load/proto.c (pure code, no I/O) rather than copied.
 */
#include "../load/proto.c"
