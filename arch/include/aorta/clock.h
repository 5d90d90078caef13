/* SPDX-License-Identifier: MIT */
/*
 * Time: the architecture's cycle counter (ao_cycles(), cpu_relax() and the
 * barriers come from <aorta/arch/processor.h>) and its conversion to
 * nanoseconds, calibrated once against CLOCK_MONOTONIC.
 */
#ifndef AORTA_CLOCK_H
#define AORTA_CLOCK_H

#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/arch/processor.h>

/* Calibrate now (otherwise done on first use, ~1 ms); returns 0. */
AO_API int ao_clock_calibrate(void);
/* Convert cycle-counter ticks to nanoseconds. */
AO_API uint64_t ao_cycles_to_ns(uint64_t cycles);
/* Convert nanoseconds to cycle-counter ticks. */
AO_API uint64_t ao_ns_to_cycles(uint64_t ns);
/* Cycle-counter ticks per second, as calibrated. */
AO_API uint64_t ao_cycles_per_sec(void);
/* Measured cost of one cpu_relax(), in nanoseconds times 16. */
AO_API uint32_t ao_relax_ns16(void);
/* CLOCK_MONOTONIC in nanoseconds. */
AO_API uint64_t ao_now_ns(void);
/* The architecture this library was built for ("x86", "arm64", ...). */
AO_API const char *ao_arch_name(void);

#endif /* AORTA_CLOCK_H */
