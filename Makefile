# cpumond — per-thread CPU usage monitor.  See README.md.
#
#   make            build build/cpumond and build/stackdump
#   make deps       apt-get install what building and running needs (Debian 12)
#   make test-deps  deps, and what the tests need too (servers not started)
#   make run        deps, build, try the daemon on config/cpumond.conf with
#                   its database in $(B)/run/
#   make check      test-deps, build, run every test (SANITIZE=1: ASan+UBSan)
#   make bench      test-deps, build, measure the sampling cost (bench/README.md)
#   make fuzz       test-deps, build and run the libFuzzer targets (tests/fuzz/)
#   make check-faults  test-deps, build, run the fault suite (tests/faults/)
#   make install    copy files under $(DESTDIR)$(PREFIX)

PREFIX     ?= /usr/local
SBINDIR    ?= $(PREFIX)/sbin
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
# systemd reads units, sysusers.d and tmpfiles.d under /usr/local/lib too.
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d

VERSION    := 0.1.0
B          ?= build

CC         ?= cc
PKGS       := libproc2 libunwind-ptrace inih sqlite3 liblzma zlib libzstd libsystemd
WARN       := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
              -Wpointer-arith -Wcast-qual -Wformat=2
CFLAGS     ?= -O2 -g
CFLAGS     += -std=gnu11 $(WARN)
CPPFLAGS   += -D_GNU_SOURCE -DCPUMOND_VERSION='"$(VERSION)"' -I. \
              $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# elfutils' libdw and libdebuginfod name frames at read time (tail, report,
# stackdump: stackdump/symbolize.c), which dlopen them: their headers only,
# never linked, so that the daemon, the same binary, never maps them.
DLOPEN_PKGS := libdw libdebuginfod
CPPFLAGS   += $(shell pkg-config --cflags $(DLOPEN_PKGS) 2>/dev/null)
# libiberty (the demangler of binutils and gdb) has no pkg-config file.
LDLIBS     += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -liberty -lm
ifeq ($(WERROR),1)
CFLAGS     += -Werror
endif
ifeq ($(SANITIZE),1)
B          := build-sanitize
CFLAGS     += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS    += -fsanitize=address,undefined
endif

# Every .c of the four source folders except the two programs' mains goes
# into one archive; the programs and each unit test link against it.
LIB_SRC    := $(filter-out cpumond/main.c stackdump/main.c, \
                $(wildcard config/*.c cpumond/*.c procfs/*.c stackdump/*.c))
LIB_OBJ    := $(LIB_SRC:%.c=$(B)/obj/%.o)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
TARGET_SRC := $(wildcard tests/targets/*.c)
TARGET_BIN := $(TARGET_SRC:tests/targets/%.c=$(B)/tests/%)
# The Go target, when go is installed (golang-go is a test dependency).
ifneq ($(shell command -v go 2>/dev/null),)
TARGET_BIN += $(B)/tests/gospin
endif

# What building and running needs (make deps), and what the tests, the
# fault suite, the fuzzers and the benchmarks need besides (make test-deps).
# README.md lists both; tests/integration/test_docs.py checks that it does.
DEB_DEPS      := gcc make pkg-config libproc2-dev libunwind-dev libinih-dev \
                 libsqlite3-dev liblzma-dev zlib1g-dev libzstd-dev libsystemd-dev libiberty-dev \
                 libdw-dev libdebuginfod-dev
DEB_TEST_DEPS := libcmocka-dev sqlite3 python3 strace clang libclang-rt-14-dev \
                 prometheus prometheus-node-exporter logrotate elfutils gdb g++ \
                 xz-utils sysstat procps util-linux valgrind groff-base mandoc golang-go \
                 debuginfod iproute2 dwz python3.11 python3.11-dev nodejs openjdk-17-jdk-headless \
                 tmux chromium

all: $(B)/cpumond $(B)/stackdump

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(B)/libcpumond.a: $(LIB_OBJ)
	$(AR) rcs $@ $^

$(B)/cpumond: $(B)/obj/cpumond/main.o $(B)/libcpumond.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/stackdump: $(B)/obj/stackdump/main.o $(B)/libcpumond.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/test_%: $(B)/obj/tests/unit/test_%.o $(B)/libcpumond.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# The targets are what the integration tests watch and unwind: keep their
# frames honest (no inlining of the hot chain) and their names in .symtab.
$(B)/tests/%: tests/targets/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -fno-omit-frame-pointer -pthread $(WARN) -o $@ $< -lm

# A default go build, as a Go program's packager makes it: its unwind tables
# are only in a compressed .debug_frame.  go's build cache, module path and
# configuration (go env, telemetry) are under $(B)/go, so that it builds on
# a fresh machine, as root without a HOME too, writes nothing elsewhere and
# reads no user's settings.
$(B)/tests/gospin: tests/targets/gospin.go
	@mkdir -p $(dir $@)
	GOCACHE=$(abspath $(B))/go/cache GOPATH=$(abspath $(B))/go/path \
	  XDG_CONFIG_HOME=$(abspath $(B))/go/config GOFLAGS= go build -o $@ $<

$(B)/bench/%: bench/%.c $(B)/libcpumond.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench/kit/: the stop benchmark's target and ptrace floor, programs of
# their own without cpumond's code; frames kept for the tools that unwind
# pausemeter.
KIT_CFLAGS := -std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls \
              -pthread $(WARN) $(filter -Werror,$(CFLAGS))
$(B)/bench/unwindbench: KIT_LIBS = $(shell pkg-config --libs libunwind-ptrace 2>/dev/null)
$(B)/bench/%: bench/kit/%.c bench/kit/benchutil.h
	@mkdir -p $(dir $@)
	$(CC) $(KIT_CFLAGS) -o $@ $< $(KIT_LIBS)

bench: test-deps
	$(MAKE) $(B)/cpumond $(B)/bench/sampler_bench $(B)/bench/cpuwatch $(B)/bench/gate_bench \
	  $(B)/bench/churn_bench $(B)/bench/stop_bench $(B)/bench/pausemeter $(B)/bench/unwindbench \
	  $(B)/bench/pystop_bench $(B)/bench/history_bench $(B)/bench/perf_bench $(B)/bench/stall_bench \
	  $(B)/tests/hotchain $(B)/tests/churn \
	  $(B)/tests/twochains
	B=$(B) bench/run.sh

# libFuzzer targets: tests/fuzz/fuzz_NAME.c with its seeds and regression
# inputs in tests/fuzz/corpus/NAME/.  make fuzz runs each for FUZZ_SECONDS;
# what it finds goes to build-fuzz/corpus-NAME, not into the repository.
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS  := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(LIB_SRC) $(wildcard */*.h)
	@mkdir -p $(dir $@)
	clang -std=gnu11 $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ $< $(LIB_SRC) $(LDLIBS)

fuzz: test-deps
	$(MAKE) $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
	  name=$${f#build-fuzz/fuzz_}; corpus=tests/fuzz/corpus/$$name; \
	  scratch=build-fuzz/corpus-$$name; mkdir -p $$scratch; \
	  echo "== $$f ($(FUZZ_SECONDS) s, seeds $$corpus)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$scratch $$corpus || exit 1; \
	done

# apt_install PACKAGES: apt-get install those of PACKAGES that are missing.
define apt_install
@missing=; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	[ -n "$$missing" ] || exit 0; \
	echo "installing:$$missing"; \
	if [ "$$(id -u)" -ne 0 ]; then echo "run 'make $@' as root, or: apt-get install$$missing" >&2; exit 1; fi; \
	$(2) \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing
endef

# Shell text for apt_install: no service starts during the install.  Debian's
# maintainer scripts ask /usr/sbin/policy-rc.d before they start a service
# (invoke-rc.d, deb-systemd-invoke), and exit status 101 refuses.  Ours is
# there only during the install; an administrator's own is kept aside and
# put back afterwards, also when the install fails or is interrupted, and
# after a run that was killed.  The tests start their own servers.
no_service_starts = rc=/usr/sbin/policy-rc.d; kept=$$rc.cpumond-kept; \
	mark='\# written by cpumond make test-deps for the install; removed after it'; \
	there() { [ -e "$$1" ] || [ -L "$$1" ]; }; \
	restore() { if ! there $$rc || grep -qsxF "$$mark" $$rc; then \
	  rm -f $$rc; if there $$kept; then mv $$kept $$rc; fi; fi; }; \
	restore; \
	if there $$kept; then echo "$$kept is in the way: put it back to $$rc or remove it" >&2; exit 1; fi; \
	if there $$rc; then mv $$rc $$kept; fi; \
	trap restore EXIT; trap 'exit 130' INT TERM HUP; \
	printf '\#!/bin/sh\n%s\nexit 101\n' "$$mark" >$$rc && chmod 0755 $$rc || exit 1;

deps:
	$(call apt_install,$(DEB_DEPS))

test-deps: deps
	$(call apt_install,$(DEB_TEST_DEPS),$(no_service_starts))

# A try-out: the example configuration, with the database under $(B)/run
# instead of its /var/lib/cpumond, nothing else written.
run: deps
	$(MAKE) all
	@echo "make run: the database is $(B)/run/cpumond.db; follow the log from a second terminal in $(CURDIR) with"
	@echo "    $(B)/cpumond tail -f -d $(B)/run/cpumond.db"
	$(B)/cpumond -c config/cpumond.conf -d $(B)/run/cpumond.db

check: test-deps
	$(MAKE) all $(UNIT_BIN) $(TARGET_BIN)
	B=$(B) tests/run-all.sh $(UNIT_BIN)

# The fault suite (tests/faults/): kills, full disks, hostile input, soak.
check-faults: test-deps
	$(MAKE) all $(TARGET_BIN)
	SUITE=faults B=$(B) tests/run-all.sh

# Copies files only: no systemctl, no systemd-sysusers (README.md, "Run it
# as a service", gives the commands).  The checked-in unit runs
# /usr/local/sbin/cpumond; the installed one gets SBINDIR and SYSCONFDIR.
# An existing configuration is never overwritten.
install: all
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(SYSCONFDIR)/cpumond \
	  $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 0755 $(B)/cpumond $(DESTDIR)$(SBINDIR)/cpumond
	install -m 0755 $(B)/stackdump $(DESTDIR)$(BINDIR)/stackdump
	install -m 0644 man/cpumond.8 $(DESTDIR)$(MANDIR)/man8/cpumond.8
	install -m 0644 man/stackdump.1 $(DESTDIR)$(MANDIR)/man1/stackdump.1
	install -m 0644 man/cpumond.conf.5 $(DESTDIR)$(MANDIR)/man5/cpumond.conf.5
	test -e $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf || \
	  install -m 0644 config/cpumond.conf $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf
	sed -e 's|/usr/local/sbin/cpumond|$(SBINDIR)/cpumond|g' \
	    -e 's|/etc/cpumond/cpumond.conf|$(SYSCONFDIR)/cpumond/cpumond.conf|g' \
	  systemd/cpumond.service >$(DESTDIR)$(UNITDIR)/cpumond.service.tmp
	chmod 0644 $(DESTDIR)$(UNITDIR)/cpumond.service.tmp
	mv -f $(DESTDIR)$(UNITDIR)/cpumond.service.tmp $(DESTDIR)$(UNITDIR)/cpumond.service
	install -m 0644 systemd/cpumond.sysusers $(DESTDIR)$(SYSUSERSDIR)/cpumond.conf
	install -m 0644 systemd/cpumond.tmpfiles $(DESTDIR)$(TMPFILESDIR)/cpumond.conf

# Removes what install copied.  The configuration goes only when it is still
# the example; the log database (/var/lib/cpumond) and the user stay.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/cpumond $(DESTDIR)$(BINDIR)/stackdump \
	  $(DESTDIR)$(MANDIR)/man8/cpumond.8 $(DESTDIR)$(MANDIR)/man1/stackdump.1 \
	  $(DESTDIR)$(MANDIR)/man5/cpumond.conf.5 $(DESTDIR)$(UNITDIR)/cpumond.service \
	  $(DESTDIR)$(SYSUSERSDIR)/cpumond.conf $(DESTDIR)$(TMPFILESDIR)/cpumond.conf
	if cmp -s config/cpumond.conf $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf; then \
	  rm -f $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf; \
	  rmdir $(DESTDIR)$(SYSCONFDIR)/cpumond 2>/dev/null || true; \
	elif [ -e $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf ]; then \
	  echo "kept $(DESTDIR)$(SYSCONFDIR)/cpumond/cpumond.conf: it was changed"; \
	fi

.PHONY: uninstall

clean:
	rm -rf build build-sanitize build-fuzz

.PHONY: all bench fuzz deps test-deps run check check-faults install clean
.SECONDARY:
-include $(shell find $(B) -name '*.d' 2>/dev/null)
