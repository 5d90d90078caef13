# SPDX-License-Identifier: MIT
#
# aorta: a Kbuild-style Makefile for a userspace runtime.
#
# Each layer directory has a Kbuild file that lists its objects
# (obj-y += foo.o) and the libraries they need (libs-y += -lfoo); this
# Makefile walks them in dependency order, compiles every object once, and
# links libaorta.a and libaorta.so.  Run `make help` for the targets.

VERSION		:= 0.1.0
SOVERSION	:= 0

# ---------------------------------------------------------------------------
# Options (Kbuild names where Kbuild has one)

V		?= 0
W		?=
C		?= 0
DEBUG		?= 0
LOCK_STATS	?= 1
SANITIZE	?=
PREFIX		?= /usr/local
DESTDIR		?=

ifeq ($(V),1)
  quiet		:=
  Q		:=
else
  quiet		:= quiet_
  Q		:= @
  MAKEFLAGS	+= --no-print-directory
endif

hostarch := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/i.86/x86/' \
		-e 's/aarch64/arm64/')
ARCH ?= $(hostarch)
# An architecture without its own folder builds with the generic fallback.
SRCARCH := $(if $(wildcard arch/$(ARCH)/Kbuild),$(ARCH),generic)

ifeq ($(ARCH),arm64)
ifneq ($(hostarch),arm64)
CROSS_COMPILE ?= aarch64-linux-gnu-
endif
endif

ifeq ($(origin CC),default)
CC := $(CROSS_COMPILE)gcc
endif
ifeq ($(origin AR),default)
AR := $(CROSS_COMPILE)ar
endif
CHECK	?= sparse
INSTALL	?= install

# Variants get their own output folder so their objects never mix.
ifeq ($(origin O),undefined)
ifneq ($(SANITIZE),)
O := build-$(SANITIZE)
else ifeq ($(DEBUG),1)
O := build-debug
else ifneq ($(SRCARCH),$(hostarch))
O := build-$(SRCARCH)
else
O := build
endif
endif
out := $(if $(O),$(patsubst %/,%,$(O))/,)

# Kbuild files may say obj-$(CONFIG_URING) += x.o: y when a program using
# liburing compiles and links for the target (not, say, with a
# cross-compiler that has no liburing for its architecture; the io layer
# then runs on epoll alone).
CONFIG_URING ?= $(shell printf '\043include <liburing.h>\nint main(void)\
		  { return io_uring_queue_init(1, 0, 0); }\n' | \
		  $(CC) -x c - -o /dev/null -luring >/dev/null 2>&1 && echo y)

# cluster/ (libaorta-cluster) is built on cnats when nats.h is there and a
# program links with -lnats; otherwise its functions return -ENOSYS and its
# tests say they were skipped.
CONFIG_NATS ?= $(shell printf '\043include <nats/nats.h>\nint main(void)\
		 { return nats_Open(-1) != NATS_OK; }\n' | \
		 $(CC) -x c - -o /dev/null -lnats >/dev/null 2>&1 && echo y)

# ---------------------------------------------------------------------------
# Walk the Kbuild files.  Order matters only for readability: dependencies
# point down (io -> core -> sync -> arch).

kbuild-dirs := arch arch/$(SRCARCH) sync core io

lib-objs :=
lib-libs :=
define walk_kbuild
obj-y :=
libs-y :=
include $(1)/Kbuild
lib-objs += $$(addprefix $(out)$(1)/,$$(obj-y))
lib-libs += $$(libs-y)
endef
$(foreach d,$(kbuild-dirs),$(eval $(call walk_kbuild,$(d))))
lib-libs := $(sort $(lib-libs)) -pthread

# cluster/ is a library of its own (libaorta-cluster), on top of libaorta:
# libaorta keeps its dependencies.
obj-y :=
libs-y :=
include cluster/Kbuild
cluster-objs := $(addprefix $(out)cluster/,$(obj-y))
cluster-libs := $(sort $(libs-y))

# ---------------------------------------------------------------------------
# Flags

include-dirs := $(out)include/generated arch/include arch/$(SRCARCH)/include \
		sync/include core/include io/include cluster/include

KBUILD_CFLAGS := -std=gnu11 -g -pthread -fPIC -fvisibility=hidden \
		 -D_GNU_SOURCE -Wall -Wextra -Werror \
		 -fno-strict-aliasing $(addprefix -I,$(include-dirs))

ifeq ($(DEBUG),1)
KBUILD_CFLAGS += -O1 -fno-omit-frame-pointer
else
KBUILD_CFLAGS += -O2
endif

ifneq ($(W),)
KBUILD_CFLAGS += -Wshadow -Wmissing-prototypes -Wstrict-prototypes \
		 -Wpointer-arith -Wundef -Wformat=2 -Wcast-qual \
		 -Wmissing-declarations -Wwrite-strings -Wvla
endif

# cc-option: the flag if $(CC) takes it (Kbuild's helper of that name).
cc-option = $(shell $(CC) -Werror $(1) -c -x c /dev/null -o /dev/null \
	      >/dev/null 2>&1 && echo $(1))

# gcc warns that TSan does not model atomic_thread_fence.  Our fences only
# order atomic accesses, which TSan checks on their own, so the warning is
# noise (clang's TSan does not warn and has no such option).
san-cflags-thread	:= -fsanitize=thread $(call cc-option,-Wno-tsan)
san-cflags-address	:= -fsanitize=address -fno-omit-frame-pointer
san-cflags-undefined	:= -fsanitize=undefined -fno-sanitize-recover=all
# make fuzz's build (clang): libFuzzer's coverage, ASan and UBSan.
san-cflags-fuzzer	:= -fsanitize=fuzzer-no-link,address,undefined \
			   -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifneq ($(SANITIZE),)
ifeq ($(san-cflags-$(SANITIZE)),)
$(error SANITIZE must be thread, address or undefined)
endif
KBUILD_CFLAGS += $(san-cflags-$(SANITIZE)) -O1
KBUILD_LDFLAGS += $(san-cflags-$(SANITIZE))
endif

c_flags = $(KBUILD_CFLAGS) $(CPPFLAGS) $(CFLAGS) $(EXTRA_CFLAGS) $(ccflags-y) \
	  -MMD -MP -MF $(@:.o=.d)
ld_flags = -pthread $(KBUILD_LDFLAGS) $(LDFLAGS)

# Anything that changes the command line rebuilds every object.
flags-sig := $(CC) $(CONFIG_URING) $(CONFIG_NATS) $(KBUILD_CFLAGS) $(CPPFLAGS) $(CFLAGS) \
	     $(EXTRA_CFLAGS) $(ld_flags)
flags-file := $(out).aorta-flags

# ---------------------------------------------------------------------------
# Kbuild-style command echo: quiet_cmd_X is printed, cmd_X is run.

echo-cmd = $(if $($(quiet)cmd_$(1)),echo '  $($(quiet)cmd_$(1))';)
cmd = @set -e; mkdir -p $(dir $@); $(echo-cmd) $(cmd_$(1))

quiet_cmd_cc_o_c = CC      $@
      cmd_cc_o_c = $(if $(filter 1 2,$(C)),$(CHECK) $(c_flags) \
		   -D__CHECKER__ $(CHECKFLAGS) $<;) \
		   $(CC) $(c_flags) -c -o $@ $<

quiet_cmd_ar = AR      $@
      cmd_ar = rm -f $@; $(AR) rcs $@ $(filter %.o,$^)

quiet_cmd_ld_so = LD      $@
      cmd_ld_so = $(CC) -shared -Wl,-soname,libaorta.so.$(SOVERSION) \
		  -Wl,--version-script=$(out)libaorta.map $(ld_flags) \
		  -o $@ $(filter %.o,$^) $(lib-libs)

quiet_cmd_ld_prog = LD      $@
      cmd_ld_prog = $(CC) $(ld_flags) -o $@ $(filter %.o %.a,$^) \
		    $(prog-libs) $(lib-libs)

quiet_cmd_gen = GEN     $@
quiet_cmd_ln = LN      $@
      cmd_ln = ln -sf $(notdir $<) $@

CHECKFLAGS := -Wsparse-error -Wno-non-pointer-null -Wno-decl

# ---------------------------------------------------------------------------
# The library

lib-a	:= $(out)libaorta.a
lib-so	:= $(out)libaorta.so.$(VERSION)
lib-so-links := $(out)libaorta.so.$(SOVERSION) $(out)libaorta.so
cluster-a := $(out)libaorta-cluster.a
cluster-so := $(out)libaorta-cluster.so.$(VERSION)
cluster-so-links := $(out)libaorta-cluster.so.$(SOVERSION) \
		    $(out)libaorta-cluster.so
config-h := $(out)include/generated/aorta/config.h

PHONY := all
all: $(lib-a) $(lib-so) $(lib-so-links) $(cluster-a) $(cluster-so) \
     $(cluster-so-links)

$(flags-file): FORCE
	@mkdir -p $(dir $@)
	@echo '$(flags-sig)' | cmp -s - $@ || echo '$(flags-sig)' > $@

# The build configuration the headers see: one ABI for the library and
# every program that includes it.
define AO_CONFIG_TEXT
/* Generated by the aorta Makefile: do not edit. */
#ifndef AORTA_CONFIG_H
#define AORTA_CONFIG_H
#define AO_CONFIG_DEBUG $(if $(filter 1,$(DEBUG)),1,0)
#define AO_CONFIG_LOCK_STATS $(if $(filter 0,$(LOCK_STATS)),0,1)
#define AO_CONFIG_URING $(if $(filter y,$(CONFIG_URING)),1,0)
#define AO_VERSION "$(VERSION)"
#endif
endef
export AO_CONFIG_TEXT
$(config-h): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' "$$AO_CONFIG_TEXT" > $@.tmp; \
	 if cmp -s $@.tmp $@; then rm -f $@.tmp; \
	 else mv $@.tmp $@; echo '  GEN     $@'; fi

$(out)libaorta.map: Makefile
	@mkdir -p $(dir $@)
	@echo '  GEN     $@'
	@printf 'AORTA_$(SOVERSION) {\n\tglobal: ao_*;\n\tlocal: *;\n};\n' > $@

$(out)%.o: %.c $(flags-file) | $(config-h)
	$(call cmd,cc_o_c)

$(lib-a): $(lib-objs)
	$(call cmd,ar)

$(lib-so): $(lib-objs) $(out)libaorta.map
	$(call cmd,ld_so)

$(out)libaorta.so.$(SOVERSION): $(lib-so)
	$(call cmd,ln)
$(out)libaorta.so: $(out)libaorta.so.$(SOVERSION)
	$(call cmd,ln)

# libaorta-cluster: its own archive, and a shared library that needs
# libaorta.so and libnats.  A program links the archive before libaorta's
# (cluster-prog-libs, added after a program's own objects and archives).
$(out)libaorta-cluster.map: Makefile
	@mkdir -p $(dir $@)
	@echo '  GEN     $@'
	@printf 'AORTA_CLUSTER_$(SOVERSION) {\n\tglobal: ao_*;\n\tlocal: *;\n};\n' > $@

quiet_cmd_ld_cluster_so = LD      $@
      cmd_ld_cluster_so = $(CC) -shared \
		  -Wl,-soname,libaorta-cluster.so.$(SOVERSION) \
		  -Wl,--version-script=$(out)libaorta-cluster.map $(ld_flags) \
		  -o $@ $(filter %.o,$^) -L$(or $(out),.) -laorta \
		  $(cluster-libs) $(lib-libs)

$(cluster-a): $(cluster-objs)
	$(call cmd,ar)

$(cluster-so): $(cluster-objs) $(out)libaorta-cluster.map $(lib-so-links)
	$(call cmd,ld_cluster_so)

$(out)libaorta-cluster.so.$(SOVERSION): $(cluster-so)
	$(call cmd,ln)
$(out)libaorta-cluster.so: $(out)libaorta-cluster.so.$(SOVERSION)
	$(call cmd,ln)

cluster-prog-libs := $(cluster-a) $(lib-a) $(cluster-libs)

# ---------------------------------------------------------------------------
# Tests: every tests/test_*.c is one CMocka runner; tests/helpers.c is
# linked into each, and test-links-<runner> (below, with the tools) into
# the runners that test a tool's code.

test-srcs	:= $(sort $(wildcard tests/test_*.c))
test-bins	:= $(patsubst %.c,$(out)%,$(test-srcs))
test-helpers	:= $(out)tests/helpers.o

$(test-bins): prog-libs = -lcmocka -lm
# The cluster's runners (tests/test_cluster*.c) link libaorta-cluster.
cluster-test-bins := $(filter $(out)tests/test_cluster%,$(test-bins))
$(cluster-test-bins): $(cluster-a)
$(cluster-test-bins): prog-libs += $(cluster-prog-libs)

PHONY += tests check check-run installcheck
tests: $(test-bins)

# The ABI, README, man and install checks first, so that the run ends
# with the CMocka runners' summaries.
# deps runs to completion before anything is compiled, even with -j.
check: deps
	$(Q)$(MAKE) check-run

# CHECK_TOOLS=0: the library's own runners only, for a build variant
# that changes the library alone (DEBUG=1, LOCK_STATS=0 in .ci/run): the
# runners that drive the tools and examples skip, saying so, and the ABI,
# README, man and install checks do not run again.
CHECK_TOOLS ?= 1
check-full := $(if $(SANITIZE),,$(filter 1,$(CHECK_TOOLS)))

# The symbols test reads libaorta.so, which the tests do not link.
ifneq ($(check-full),)
check-run: $(lib-so-links) $(cluster-so-links)
endif

# The runners that drive the tools (ao-echo, ao-load) find them through
# AO_TOOLS_DIR; they are built with the same flags (and sanitizer).
check-run: $(test-bins) $(if $(filter 1,$(CHECK_TOOLS)),$(tool-bins))
ifneq ($(check-full),)
	$(Q)sh tests/symbols-test.sh "$(out)"
	$(Q)sh tests/readme-test.sh
	$(Q)$(MAKE) mancheck
	$(Q)$(MAKE) installcheck
endif
	$(Q)AO_TOOLS_DIR="$(if $(filter 1,$(CHECK_TOOLS)),$(abspath $(out)tools))" \
		AO_EXAMPLES_DIR="$(if $(filter 1,$(CHECK_TOOLS)),$(abspath $(out)examples))" \
		sh tests/run-tests.sh $(test-bins)

installcheck: all
	$(Q)AO_TOOLS="$(man-tools)" AO_MAN="$(man-pages:man/%=%)" \
		sh tests/install-test.sh "$(MAKE)" "$(out)"

# The manual pages: lint, a page per public function and per tool (the
# tools are listed below, where tool-bins is defined).
PHONY += mancheck
mancheck: $(lib-so) $(cluster-so-links)
	$(Q)sh tests/man-test.sh "$(out)" "$(SRCARCH)" "$(man-tools)"

# ---------------------------------------------------------------------------
# Benchmarks and tools.
#  - tools/bench/<name>.c is one benchmark, linked with the shared helpers
#    (bench.c, and child.c: tools run as child processes) and the
#    baselines the benchmarks compare against (tools/bench/baseline/*.c);
#  - tools/bench/baseline/<name>_server.c is a stand-alone baseline program;
#  - tools/<name>/ (echo, load, ...) builds the program ao-<name> from all of
#    its .c files; a tool whose code a test or a fuzz target links keeps
#    its main() alone in main.c, and the others link the rest.

bench-srcs	:= $(filter-out tools/bench/bench.c tools/bench/child.c, \
		   $(sort $(wildcard tools/bench/*.c)))
bench-bins	:= $(patsubst %.c,$(out)%,$(bench-srcs))
baseline-progs	:= $(patsubst %.c,$(out)%, \
		   $(wildcard tools/bench/baseline/*_server.c))
bench-common	:= $(out)tools/bench/bench.o $(out)tools/bench/child.o \
		   $(patsubst %.c,$(out)%.o,$(filter-out %_server.c, \
		   $(wildcard tools/bench/baseline/*.c)))

$(bench-bins): prog-libs = -lm
$(out)tools/bench/busbench: $(cluster-a)
$(out)tools/bench/busbench: prog-libs += $(cluster-prog-libs)
# busbench's baseline, cnats alone: where cluster/ is built on cnats.
$(out)tools/bench/busbench.o: ccflags-y += \
	$(if $(filter y,$(CONFIG_NATS)),-DAO_HAVE_NATS)
$(bench-bins): $(out)tools/bench/%: $(out)tools/bench/%.o $(bench-common) \
	       $(lib-a)
	$(call cmd,ld_prog)

$(baseline-progs): prog-libs = -lm
$(baseline-progs): %: %.o
	$(call cmd,ld_prog)

#  - tools/common/ is not a program: its .c files (the command line, the
#    option values and signals, the servers' reports, the client engines,
#    the histogram, the echo and arena protocols) make the archive
#    libaotools.a that every tool links, so that tools share code without
#    copying it.  It uses libaorta and nothing of another tools/ folder:
#    tools/<name> -> libaotools -> libaorta.

tool-dirs	:= $(filter-out bench plot common, $(notdir $(patsubst %/,%, \
		   $(sort $(dir $(wildcard tools/*/*.c))))))
tool-bins	:= $(foreach t,$(tool-dirs),$(out)tools/$(t)/ao-$(t))
tools-lib-objs	:= $(patsubst %.c,$(out)%.o,$(wildcard tools/common/*.c))
tools-lib	:= $(out)tools/common/libaotools.a

$(tools-lib): $(tools-lib-objs)
	$(call cmd,ar)

define tool_rule
$(out)tools/$(1)/ao-$(1): prog-libs = -lm
$(out)tools/$(1)/ao-$(1): $(patsubst %.c,$(out)%.o,$(wildcard tools/$(1)/*.c)) \
			  $(tools-lib) $(lib-a)
	$$(call cmd,ld_prog)
endef
$(foreach t,$(tool-dirs),$(eval $(call tool_rule,$(t))))
# ao-arena links libaorta-cluster (--nats; without cnats its calls say
# -ENOSYS and ao-arena says it has no cluster), and so does what links
# room.o.
$(out)tools/arena/ao-arena $(out)tests/test_arena: $(cluster-a)
$(out)tools/arena/ao-arena $(out)tests/test_arena: \
	prog-libs += $(cluster-prog-libs)

# ao-arena serves the files of tools/arena/viewer/ over HTTP, embedded at
# build time as byte arrays (tools/arena/embed.sh: od and awk, no xxd), so
# that it needs no folder at run time.
arena-viewer	:= $(sort $(wildcard tools/arena/viewer/*))
$(out)tools/arena/viewer_files.c: tools/arena/embed.sh $(arena-viewer) \
				  $(wildcard tools/arena/viewer)
	$(Q)mkdir -p $(dir $@)
	$(Q)sh tools/arena/embed.sh tools/arena/viewer \
		$(abspath tools/arena/arena.h) > $@.tmp && mv $@.tmp $@
$(out)tools/arena/viewer_files.o: $(out)tools/arena/viewer_files.c \
				  $(flags-file) | $(config-h)
	$(call cmd,cc_o_c)
$(out)tools/arena/ao-arena: $(out)tools/arena/viewer_files.o

# $(call tool-objs,name): a tool's objects but its main.o.
tool-objs = $(patsubst %.c,$(out)%.o,$(filter-out tools/$(1)/main.c, \
	    $(wildcard tools/$(1)/*.c)))

# What the runners that test a tool's code link (libaotools before
# libaorta: static archives resolve in order).
test-links-test_load		:= $(call tool-objs,load) $(tools-lib)
test-links-test_load_hist	:= $(tools-lib)
test-links-test_arena		:= $(addprefix $(out)tools/arena/, room.o \
				   web.o metrics.o viewer_files.o cluster.o) \
				   $(tools-lib)
test-links-test_arena_proto	:= $(tools-lib)
test-links-test_tools		:= $(out)tools/bench/child.o
test-links-test_bots		:= $(out)tools/bots/bot.o $(tools-lib)
test-links-test_fuzz_regress	:= $(addprefix $(out)tests/fuzz/fuzz_, \
				   framer.o load.o proto.o) \
				   $(call tool-objs,load) $(tools-lib)
test-links-test_fuzz_echo	:= $(out)tests/fuzz/fuzz_echo.o \
				   $(call tool-objs,echo) $(tools-lib)
test-links-test_ws		:= $(out)tests/fuzz/fuzz_ws_frame.o \
				   $(out)tests/fuzz/fuzz_ws_upgrade.o
test-links-test_ws_client	:= $(out)tests/fuzz/fuzz_ws_client.o \
				   $(tools-lib)
test-links-test_fuzz_arena	:= $(out)tests/fuzz/fuzz_arena.o \
				   $(out)tools/bots/bot.o $(tools-lib)

define test_rule
$(out)tests/$(1): $(out)tests/$(1).o $(test-helpers) $(test-links-$(1)) \
		  $(lib-a)
	$$(call cmd,ld_prog)
endef
$(foreach t,$(notdir $(test-bins)),$(eval $(call test_rule,$(t))))

PHONY += tools
tools: $(tool-bins)
man-tools := $(notdir $(tool-bins))

# check-run's own rule comes before tool-bins is defined, where it read as
# empty: the tools it runs are its prerequisites from here.
check-run: $(tool-bins)

# ---------------------------------------------------------------------------
# Examples: each examples/<name>.c is a complete program, built into
# $(out)examples/<name> (tests/test_examples.c runs each for a moment).

example-srcs	:= $(sort $(wildcard examples/*.c))
example-bins	:= $(patsubst %.c,$(out)%,$(example-srcs))

$(example-bins): $(out)examples/%: $(out)examples/%.o $(lib-a)
	$(call cmd,ld_prog)

PHONY += examples
examples: $(example-bins)
check-run: $(example-bins)

PHONY += bench demo
# echobench drives ao-echo and ao-load: the tools come with the benchmarks.
bench: $(bench-bins) $(baseline-progs) $(tool-bins)

# The demos build only the two programs they run, in parallel (one job
# per CPU unless make was given -j), after deps.
demo-jobs = $(if $(filter -j%,$(MAKEFLAGS)),, \
	    -j$(shell nproc 2>/dev/null || echo 2))

# The demo: ao-echo under ao-load for DEMO_TIME, then the latency plot.
DEMO_TIME ?= 10s
PHONY += plot
demo: deps
	$(Q)$(MAKE) $(demo-jobs) $(out)tools/echo/ao-echo \
		$(out)tools/load/ao-load
	$(Q)sh tools/demo.sh "$(abspath $(out)tools)" "$(DEMO_TIME)"

# The plot of the last demo's latency CSV (needs gnuplot).
plot:
	$(Q)sh tools/plot/plot-latency.sh "$(out)demo-latency.csv"

# The game demo: ao-arena under ao-bots (DEMO_GAME_PLAYERS bots for
# DEMO_GAME_TIME), every snapshot verified, then the latency plot.
DEMO_GAME_TIME ?= 10s
DEMO_GAME_PLAYERS ?= 500
PHONY += demo-game
demo-game: deps
	$(Q)$(MAKE) $(demo-jobs) $(out)tools/arena/ao-arena \
		$(out)tools/bots/ao-bots
	$(Q)sh tools/demo-game.sh "$(abspath $(out)tools)" \
		"$(DEMO_GAME_TIME)" "$(DEMO_GAME_PLAYERS)"

# The cluster demo: nats-server, three ao-arena nodes, DEMO_CLUSTER_PLAYERS
# ao-bots over them for DEMO_CLUSTER_TIME, one node killed half-way.
DEMO_CLUSTER_TIME ?= 20s
DEMO_CLUSTER_PLAYERS ?= 600
PHONY += demo-cluster
demo-cluster: deps
	$(Q)$(MAKE) $(demo-jobs) $(out)tools/arena/ao-arena \
		$(out)tools/bots/ao-bots
	$(Q)sh tools/demo-cluster.sh "$(abspath $(out)tools)" \
		"$(DEMO_CLUSTER_TIME)" "$(DEMO_CLUSTER_PLAYERS)"

# ---------------------------------------------------------------------------
# Reliability: fuzzing (clang's libFuzzer), the soak run, the model check.

# The libFuzzer targets: tests/fuzz/fuzz_<name>.c, the objects it tests
# (fuzz-links-<name>), and entry.c compiled for it as its
# LLVMFuzzerTestOneInput.  make fuzz builds them with clang in their own
# folder, $(out)fuzz/ (SANITIZE=fuzzer), and runs each (tests/fuzz/run.sh);
# make check replays their corpora (tests/test_fuzz_*.c).
FUZZ_TIME ?= 60
SOAK_TIME ?= 600
FUZZ_CC ?= clang
fuzz-names	:= framer proto load echo arena ws_frame ws_upgrade ws_client
fuzz-bins	:= $(patsubst %,$(out)tests/fuzz/fuzz_%,$(fuzz-names))
fuzz-links-proto := $(tools-lib)
fuzz-links-load	:= $(call tool-objs,load) $(tools-lib)
fuzz-links-echo	:= $(call tool-objs,echo) $(tools-lib)
fuzz-links-arena := $(out)tools/bots/bot.o $(tools-lib)
fuzz-links-ws_client := $(tools-lib)

$(out)tests/fuzz/entry-%.o: ccflags-y = -DFUZZ_TARGET=fuzz_$*
$(out)tests/fuzz/entry-%.o: tests/fuzz/entry.c $(flags-file) | $(config-h)
	$(call cmd,cc_o_c)

define fuzz_rule
$(out)tests/fuzz/fuzz_$(1): prog-libs = -fsanitize=fuzzer -lm
$(out)tests/fuzz/fuzz_$(1): $(out)tests/fuzz/fuzz_$(1).o \
			    $(out)tests/fuzz/entry-$(1).o \
			    $(fuzz-links-$(1)) $(lib-a)
	$$(call cmd,ld_prog)
endef
$(foreach f,$(fuzz-names),$(eval $(call fuzz_rule,$(f))))

PHONY += fuzz fuzz-bins soak verify
fuzz-bins: $(fuzz-bins)

fuzz:
	$(Q)command -v $(FUZZ_CC) >/dev/null 2>&1 || \
		{ echo "fuzz: $(FUZZ_CC) is missing: sudo apt-get install" \
		  "clang" >&2; exit 1; }
	$(Q)$(MAKE) O=$(out)fuzz CC=$(FUZZ_CC) SANITIZE=fuzzer fuzz-bins
	$(Q)sh tests/fuzz/run.sh "$(abspath $(out)fuzz)" "$(FUZZ_TIME)"

soak: deps
	$(Q)$(MAKE) tools
	$(Q)sh tests/soak/soak.sh "$(abspath $(out)tools)" "$(SOAK_TIME)"

verify:
	$(Q)sh tests/model/verify.sh "$(abspath $(out))"

# ---------------------------------------------------------------------------
# Dependencies: install the Debian packages that are missing, and only those.

DEPS_PKGS := liburing-dev libcmocka-dev pkg-config mandoc python3 \
	     python3-websockets prometheus
# test_metrics makes a comma-decimal locale from its sources (else skips).
DEPS_PKGS += locales
# cluster/: the NATS C client and the server its tests start.
DEPS_PKGS += libnats-dev nats-server
ifneq ($(filter 1 2,$(C)),)
DEPS_PKGS += sparse
endif
# Chromium (for the browser test, which make check skips without it) is
# large: installed only when asked, make deps WITH_CHROMIUM=1.
ifeq ($(WITH_CHROMIUM),1)
DEPS_PKGS += chromium
endif
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# $(call install-missing,packages): apt-get install those not installed.
install-missing = if ! command -v dpkg-query >/dev/null 2>&1; then \
		echo '  DEPS    not Debian: install $(1) yourself'; \
		exit 0; fi; \
	missing=; for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | \
			grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "  DEPS    installing$$missing"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
			-y -qq $$missing >/dev/null; \
	fi

PHONY += deps
deps:
	$(Q)$(call install-missing,$(DEPS_PKGS))

# ---------------------------------------------------------------------------
# Install

# GNU-style directories; each may be set on the command line
# (libdir=/usr/lib/x86_64-linux-gnu, say).
bindir ?= $(PREFIX)/bin
includedir ?= $(PREFIX)/include
libdir ?= $(PREFIX)/lib
pcdir ?= $(libdir)/pkgconfig
mandir ?= $(PREFIX)/share/man

# What install puts where, listed once so that uninstall removes exactly
# that: headers as root:aorta/path.h, the tools, the manual pages.
hdr-roots := arch/include arch/$(SRCARCH)/include sync/include \
	     core/include io/include cluster/include
hdr-pairs := $(foreach r,$(hdr-roots),$(foreach h,$(sort $(wildcard \
	     $(r)/aorta/*.h $(r)/aorta/*/*.h)),$(r):$(h:$(r)/%=%))) \
	     $(out)include/generated:aorta/config.h
hdr-installed := $(foreach p,$(hdr-pairs),$(lastword $(subst :, ,$(p))))
lib-installed := libaorta.a libaorta.so.$(VERSION) \
		 libaorta.so.$(SOVERSION) libaorta.so \
		 libaorta-cluster.a libaorta-cluster.so.$(VERSION) \
		 libaorta-cluster.so.$(SOVERSION) libaorta-cluster.so
man-pages := $(sort $(wildcard man/man[1-9]/*.[1-9]))

# aorta.pc says where install puts things, so it is rewritten whenever
# PREFIX or a directory changes (and only then), not just once per build.
# A directory under PREFIX is written relative to ${prefix} (or $(2)).
pc-rel = $(patsubst $(PREFIX)/%,$${$(or $(2),prefix)}/%,$(1))
define AO_PC_TEXT
prefix=$(PREFIX)
exec_prefix=$${prefix}
libdir=$(call pc-rel,$(libdir),exec_prefix)
includedir=$(call pc-rel,$(includedir))

Name: aorta
Description: game-server runtime: adaptive locks, executors, buffer pool, io_uring front end
Version: $(VERSION)
Cflags: -I$${includedir} -pthread
Libs: -L$${libdir} -laorta
Libs.private: $(lib-libs)
endef
export AO_PC_TEXT
$(out)aorta.pc: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' "$$AO_PC_TEXT" > $@.tmp; \
	 if cmp -s $@.tmp $@; then rm -f $@.tmp; \
	 else mv $@.tmp $@; echo '  GEN     $@'; fi

# aorta-cluster.pc: the bus layer, on aorta.
define AO_CLUSTER_PC_TEXT
prefix=$(PREFIX)
exec_prefix=$${prefix}
libdir=$(call pc-rel,$(libdir),exec_prefix)
includedir=$(call pc-rel,$(includedir))

Name: aorta-cluster
Description: aorta's bus layer: nodes, peers, messages on strands, a KV directory over NATS
Version: $(VERSION)
Requires: aorta = $(VERSION)
Cflags: -I$${includedir}
Libs: -L$${libdir} -laorta-cluster
Libs.private: $(cluster-libs)
endef
export AO_CLUSTER_PC_TEXT
$(out)aorta-cluster.pc: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' "$$AO_CLUSTER_PC_TEXT" > $@.tmp; \
	 if cmp -s $@.tmp $@; then rm -f $@.tmp; \
	 else mv $@.tmp $@; echo '  GEN     $@'; fi

PHONY += install uninstall
install: all $(tool-bins) $(out)aorta.pc $(out)aorta-cluster.pc
	@echo '  INSTALL $(DESTDIR)$(PREFIX)'
	$(Q)$(INSTALL) -d $(DESTDIR)$(includedir) $(DESTDIR)$(libdir) \
		$(DESTDIR)$(pcdir) $(DESTDIR)$(bindir)
	$(Q)for p in $(hdr-pairs); do \
		$(INSTALL) -D -m 644 $${p%%:*}/$${p#*:} \
			$(DESTDIR)$(includedir)/$${p#*:}; \
	done
	$(Q)$(INSTALL) -m 644 $(lib-a) $(DESTDIR)$(libdir)/
	$(Q)$(INSTALL) -m 755 $(lib-so) $(DESTDIR)$(libdir)/
	$(Q)ln -sf libaorta.so.$(VERSION) \
		$(DESTDIR)$(libdir)/libaorta.so.$(SOVERSION)
	$(Q)ln -sf libaorta.so.$(SOVERSION) $(DESTDIR)$(libdir)/libaorta.so
	$(Q)$(INSTALL) -m 644 $(cluster-a) $(DESTDIR)$(libdir)/
	$(Q)$(INSTALL) -m 755 $(cluster-so) $(DESTDIR)$(libdir)/
	$(Q)ln -sf libaorta-cluster.so.$(VERSION) \
		$(DESTDIR)$(libdir)/libaorta-cluster.so.$(SOVERSION)
	$(Q)ln -sf libaorta-cluster.so.$(SOVERSION) \
		$(DESTDIR)$(libdir)/libaorta-cluster.so
	$(Q)$(INSTALL) -m 644 $(out)aorta.pc $(out)aorta-cluster.pc \
		$(DESTDIR)$(pcdir)/
	$(Q)$(INSTALL) -m 755 $(tool-bins) $(DESTDIR)$(bindir)/
	$(Q)for m in $(man-pages); do \
		$(INSTALL) -D -m 644 $$m $(DESTDIR)$(mandir)/$${m#man/}; \
	done

# Exactly what install put there (and the aorta/ header folders, once
# empty); nothing else in those folders is touched.
uninstall:
	@echo '  UNINST  $(DESTDIR)$(PREFIX)'
	$(Q)rm -f $(addprefix $(DESTDIR)$(includedir)/,$(hdr-installed)) \
		$(addprefix $(DESTDIR)$(libdir)/,$(lib-installed)) \
		$(DESTDIR)$(pcdir)/aorta.pc $(DESTDIR)$(pcdir)/aorta-cluster.pc \
		$(addprefix $(DESTDIR)$(bindir)/,$(notdir $(tool-bins))) \
		$(addprefix $(DESTDIR)$(mandir)/,$(man-pages:man/%=%))
	$(Q)if [ -d $(DESTDIR)$(includedir)/aorta ]; then \
		find $(DESTDIR)$(includedir)/aorta -depth -type d -empty \
			-delete; fi

# ---------------------------------------------------------------------------
# Debian packages (debian/): libaorta0, libaorta-dev, libaorta-cluster0,
# libaorta-cluster-dev, aorta-tools.  The tree (tracked and new files, not
# ignored ones) is copied to
# $(out)deb/aorta-$(VERSION)/ and dpkg-buildpackage runs there, so the
# source tree gets nothing; the packages land in $(out)deb/.
# debcheck installs them into a scratch root (DEB_INSTALL=system: into
# the system with apt-get, then purges them) and uses them.

DEB_PKGS := dpkg-dev debhelper liburing-dev libcmocka-dev pkg-config \
	    libnats-dev
deb-dir := $(out)deb
deb-src := $(deb-dir)/aorta-$(VERSION)
DEB_INSTALL ?= root

quiet_cmd_deb = DPKG    $(deb-src)
      cmd_deb = rm -rf $(deb-dir); mkdir -p $(deb-src); \
		{ git ls-files -co --exclude-standard 2>/dev/null || \
		  find . \( -name .git -o -name 'build*' \) -prune -o \
			-type f -print; } | \
		while read f; do [ -f "$$f" ] && echo "$$f"; done | \
		tar -cf - -T - | tar -xf - -C $(deb-src); \
		cd $(deb-src) && dpkg-buildpackage -us -uc -b \
			$(if $(V:0=),,>../build.log 2>&1 || \
			{ tail -n 40 ../build.log; exit 1; })

PHONY += deb debcheck
deb:
	$(Q)$(call install-missing,$(DEB_PKGS))
	$(call cmd,deb)
	$(Q)ls $(deb-dir)/*.deb | sed 's/^/  DEB     /'

debcheck: deb
	$(Q)sh tests/deb-test.sh "$(deb-dir)" "$(DEB_INSTALL)"

# ---------------------------------------------------------------------------
# Housekeeping

PHONY += clean distclean format format-check help
clean:
	@echo '  CLEAN   $(if $(out),$(out),.)'
	$(Q)find $(if $(out),$(out),.) \( -name '*.o' -o -name '*.d' \) \
		-not -path './.git/*' -delete 2>/dev/null || true
	$(Q)rm -f $(lib-a) $(lib-so) $(lib-so-links) $(out)libaorta.map \
		$(cluster-a) $(cluster-so) $(cluster-so-links) \
		$(out)libaorta-cluster.map $(out)aorta-cluster.pc \
		$(out)aorta.pc $(flags-file) $(test-bins) $(bench-bins) \
		$(baseline-progs) $(tool-bins) $(tools-lib) $(example-bins) \
		$(out)tests/*.log $(out)tests/install-smoke* \
		$(out)tools/arena/viewer_files.c
	$(Q)rm -rf $(out)include/generated $(out)tests/install-root* $(deb-dir) \
		$(out)fuzz

distclean: clean
	$(Q)rm -rf build build-*

c-files = $(shell git ls-files '*.c' '*.h' 2>/dev/null || \
	    find arch sync core io cluster tests tools -name '*.[ch]')

format:
	$(Q)clang-format -i $(c-files)

format-check:
	$(Q)clang-format --dry-run -Werror $(c-files)

help:
	@echo 'Targets:'
	@echo '  all (default)   - libaorta.a and libaorta.so, and the bus layer'
	@echo '                    libaorta-cluster.a and .so (cnats; stubs'
	@echo '                    returning -ENOSYS without nats.h)'
	@echo '  check           - build and run every CMocka test, then the'
	@echo '                    install test (installs missing packages)'
	@echo '  tests           - build the tests without running them'
	@echo '  installcheck    - install into a scratch root and build a'
	@echo '                    program against it with pkg-config'
	@echo '  mancheck        - lint man/ and check every public function'
	@echo '                    and tool has a page'
	@echo '  bench           - build the benchmarks in tools/bench (and'
	@echo '                    the tools echobench runs)'
	@echo '  tools           - build the programs in tools/<name>/ (ao-<name>)'
	@echo '  examples        - build the programs in examples/'
	@echo '  demo            - the quick-start demo: ao-echo under ao-load'
	@echo '                    for DEMO_TIME (10s), then the latency plot'
	@echo '  plot            - render the last demo latency CSV (gnuplot)'
	@echo '  demo-game       - ao-arena under ao-bots (DEMO_GAME_PLAYERS=500'
	@echo '                    bots for DEMO_GAME_TIME=10s), verified, and'
	@echo '                    the input-to-visible latency plot; it'
	@echo '                    prints the viewer URL to open meanwhile'
	@echo '  demo-cluster    - nats-server, three ao-arena nodes, 600 ao-bots'
	@echo '                    over them for 20s, one node killed at 10s'
	@echo '  fuzz            - libFuzzer (clang) over the parsers for'
	@echo '                    FUZZ_TIME seconds (60)'
	@echo '  soak            - ao-echo and ao-arena under load, churn and'
	@echo '                    misbehaving clients'
	@echo '                    for SOAK_TIME seconds (600)'
	@echo '  verify          - model-check the lock and event count (spin)'
	@echo '  deps            - apt-get install the packages that are missing'
	@echo '                    (WITH_CHROMIUM=1: also chromium, for the'
	@echo '                    browser test, which check skips without it)'
	@echo '  install         - install headers, libraries, aorta.pc, the'
	@echo '                    tools and the manual pages (PREFIX=$(PREFIX)'
	@echo '                    DESTDIR=; bindir= libdir= includedir='
	@echo '                    mandir= pcdir= override one folder)'
	@echo '  uninstall       - remove what install put there'
	@echo '  deb             - Debian packages libaorta0, libaorta-dev,'
	@echo '                    libaorta-cluster0, libaorta-cluster-dev and'
	@echo '                    aorta-tools in $(deb-dir)/ (dpkg-buildpackage)'
	@echo '  debcheck        - build them, install them into a scratch root'
	@echo '                    (DEB_INSTALL=system: apt-get, then purge),'
	@echo '                    build and run a program with pkg-config'
	@echo '  format          - clang-format every C file in place'
	@echo '  format-check    - fail if a C file is not in the project style'
	@echo '  clean           - remove build outputs of this variant'
	@echo '  distclean       - also remove every build-* folder'
	@echo ''
	@echo 'Options:'
	@echo '  V=1             - print every command'
	@echo '  O=dir           - put every output in dir (the source tree'
	@echo '                    stays clean)'
	@echo '  W=1             - extra warnings'
	@echo '  C=1             - run sparse ($(CHECK)) over each compiled file'
	@echo '  ARCH=arch       - target architecture (default: $(hostarch);'
	@echo '                    one without a folder in arch/ uses generic)'
	@echo '  CROSS_COMPILE=  - toolchain prefix (arm64 defaults to'
	@echo '                    aarch64-linux-gnu- on other hosts)'
	@echo '  DEBUG=1         - debug build: lock misuse aborts (build-debug/)'
	@echo '  LOCK_STATS=0    - compile lock statistics out'
	@echo '  SANITIZE=x      - thread, address or undefined (build-x/)'
	@echo '  CHECK_TOOLS=0   - check runs the library'"'"'s own tests only'
	@echo '  PREFIX=, DESTDIR= - where install puts things'

PHONY += FORCE
FORCE:

.PHONY: $(PHONY)
.DELETE_ON_ERROR:

-include $(lib-objs:.o=.d) $(cluster-objs:.o=.d) $(test-bins:=.d) \
	 $(test-helpers:.o=.d) \
	 $(bench-bins:=.d) $(bench-common:.o=.d) $(baseline-progs:=.d) \
	 $(example-bins:=.d) $(out)tests/fuzz/*.d \
	 $(foreach t,$(tool-dirs),$(patsubst %.c,$(out)%.d, \
	 $(wildcard tools/$(t)/*.c))) $(tools-lib-objs:.o=.d)
