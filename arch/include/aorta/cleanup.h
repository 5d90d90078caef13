/* SPDX-License-Identifier: MIT */
/*
 * Scope-based lock guards in the style of the kernel's <linux/cleanup.h>, on
 * __attribute__((cleanup)): a function cannot return with a guarded lock
 * held, whatever path it takes out.
 *
 *	AO_DEFINE_GUARD(name, type, lock-expr, unlock-expr)
 *		a guard class; _T is the guarded pointer in both expressions
 *	AO_DEFINE_GUARD_COND(name, ext, trylock-expr)
 *		a conditional variant name##ext for a trylock
 *	guard(name)(ptr);
 *		hold until the enclosing scope ends
 *	scoped_guard(name, ptr) { ... }
 *		hold for the next statement only
 *	scoped_cond_guard(name##ext, ptr) { ... }
 *		run the statement only if the trylock succeeded
 *
 * The rules are the kernel's: cleanups run in reverse order of definition,
 * and a function that uses guards should not also unwind with goto past
 * them.  Define AO_NO_SHORT_GUARDS to get only the ao_-prefixed names.
 */
#ifndef AORTA_CLEANUP_H
#define AORTA_CLEANUP_H

#define __AO_PASTE2(a, b) a##b
#define __AO_PASTE(a, b) __AO_PASTE2(a, b)

#define AO_DEFINE_GUARD(name, type, lock, unlock)           \
	typedef type ao_guard_##name##_t;                   \
	static inline void ao_guard_##name##_exit(type *_p) \
	{                                                   \
		type _T = *_p;                              \
		if (_T) {                                   \
			unlock;                             \
		}                                           \
	}                                                   \
	static inline type ao_guard_##name##_enter(type _T) \
	{                                                   \
		lock;                                       \
		return _T;                                  \
	}

#define AO_DEFINE_GUARD_COND(name, ext, trylock)                        \
	typedef ao_guard_##name##_t ao_guard_##name##ext##_t;           \
	static inline void ao_guard_##name##ext##_exit(                 \
		ao_guard_##name##_t *_p)                                \
	{                                                               \
		ao_guard_##name##_exit(_p);                             \
	}                                                               \
	static inline ao_guard_##name##_t ao_guard_##name##ext##_enter( \
		ao_guard_##name##_t _T)                                 \
	{                                                               \
		return (trylock) ? _T : NULL;                           \
	}

#define __ao_guard_var(name, id)                        \
	ao_guard_##name##_t __AO_PASTE(__ao_guard_, id) \
		__attribute__((cleanup(ao_guard_##name##_exit), unused))

#define __ao_guard(name, id) __ao_guard_var(name, id) = ao_guard_##name##_enter
#define ao_guard(name) __ao_guard(name, __COUNTER__)

/* A for loop that runs its body once with the guard in scope. */
#define __ao_scoped_guard(name, id, ...)                                      \
	for (__ao_guard_var(name, id) = ao_guard_##name##_enter(__VA_ARGS__), \
				  *__AO_PASTE(__ao_done_, id) = NULL;         \
	     __AO_PASTE(__ao_guard_, id) && !__AO_PASTE(__ao_done_, id);      \
	     __AO_PASTE(__ao_done_, id) = (void *)1)
#define ao_scoped_guard(name, ...) \
	__ao_scoped_guard(name, __COUNTER__, __VA_ARGS__)
#define ao_scoped_cond_guard(name, ...) \
	__ao_scoped_guard(name, __COUNTER__, __VA_ARGS__)

#ifndef AO_NO_SHORT_GUARDS
#ifndef guard
#define guard(name) ao_guard(name)
#endif
#ifndef scoped_guard
#define scoped_guard(name, ...) ao_scoped_guard(name, __VA_ARGS__)
#endif
#ifndef scoped_cond_guard
#define scoped_cond_guard(name, ...) ao_scoped_cond_guard(name, __VA_ARGS__)
#endif
#endif

#endif /* AORTA_CLEANUP_H */
