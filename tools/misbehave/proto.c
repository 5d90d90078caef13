// SPDX-License-Identifier: MIT
/*
 * ao-misbehave frames its streams and parses its option values exactly as
 * ao-load does: the same code, compiled into this program too (the
 * Makefile links the .c files of tools/<name>/ only, nothing else).
 */
#include "../load/proto.c"
