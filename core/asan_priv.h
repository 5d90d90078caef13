/* SPDX-License-Identifier: MIT */
/*
 * AO_ASAN: 1 when built with AddressSanitizer (gcc or clang), else 0, for
 * the allocators that tell it about their own memory (core/bufpool.c,
 * core/call.c).
 */
#ifndef AORTA_CORE_ASAN_PRIV_H
#define AORTA_CORE_ASAN_PRIV_H

#if defined(__SANITIZE_ADDRESS__)
#define AO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AO_ASAN 1
#endif
#endif
#ifndef AO_ASAN
#define AO_ASAN 0
#endif

#endif /* AORTA_CORE_ASAN_PRIV_H */
