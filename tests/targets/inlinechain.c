/* inlinechain: a hot loop inlined into its caller, for the read-time names
 * test (tests/integration/test_names.py).
 *
 *   inlinechain [--timeout S]
 *
 * One thread, "hot-0", burns CPU forever in
 *   inline_thread_main -> inline_outer -> inline_mid -> inline_leaf
 * where inline_mid and inline_leaf are always_inline: built with -O2 they
 * have no frame of their own, only DWARF says they are there (gdb's
 * backtrace shows them as frames, eu-addr2line -i and addr2line -i as
 * inlined calls).  Once the thread is named it prints, flushing stdout:
 *   pid P
 *   hot T
 *   ready
 * and exits on SIGTERM or SIGINT, or after S seconds (default 120).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "number.h"

#define INLINED __attribute__((always_inline)) static inline
#if defined(__clang__)
#define FRAME __attribute__((noinline))
#else
#define FRAME __attribute__((noinline, noclone))
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static pid_t hot_tid;
static volatile uint64_t sink;

/* Some 20 ms of work a call, so that the thread is nearly always caught in
 * the loop, that is inside both inlined calls. */
INLINED uint64_t inline_leaf(uint64_t x)
{
	for (int i = 0; i < 4 * 1000 * 1000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		x ^= x >> 29;
		__asm__ volatile("" : "+r"(x));   /* keep the loop a loop */
	}
	return x;
}

INLINED uint64_t inline_mid(uint64_t x)
{
	uint64_t r = inline_leaf(x + 3);
	return r ^ (r >> 7);
}

FRAME static uint64_t inline_outer(uint64_t x)
{
	uint64_t r = inline_mid(x);
	return r ^ (r >> 11);
}

FRAME static void *inline_thread_main(void *arg)
{
	uint64_t x = (uint64_t)(intptr_t)arg;

	pthread_setname_np(pthread_self(), "hot-0");
	pthread_mutex_lock(&lock);
	hot_tid = gettid();
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	for (;;) {
		x = inline_outer(x);
		sink = x;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int timeout = 120;
	sigset_t sigs;
	pthread_t t;
	int r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
			timeout = target_number("inlinechain", argv[++i], 1, 86400, "--timeout");
		} else {
			fputs("usage: inlinechain [--timeout SECONDS]\n", stderr);
			return 2;
		}
	}
	/* Only sigtimedwait below takes SIGTERM and SIGINT. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	r = pthread_create(&t, NULL, inline_thread_main, (void *)(intptr_t)1);
	if (r != 0) {
		fprintf(stderr, "inlinechain: pthread_create: %s\n", strerror(r));
		return 1;
	}
	pthread_mutex_lock(&lock);
	while (hot_tid == 0)
		pthread_cond_wait(&changed, &lock);
	pthread_mutex_unlock(&lock);
	printf("pid %d\nhot %d\nready\n", (int)getpid(), (int)hot_tid);
	fflush(stdout);

	struct timespec ts = { timeout, 0 };
	while (sigtimedwait(&sigs, NULL, &ts) < 0 && errno == EINTR)
		;
	return 0;
}
