/* hotchain: a target with a known hot call chain, for the stackdump and
 * daemon tests.
 *
 *   hotchain --threads N --hot K [--timeout S]
 *
 * Starts N threads; K of them burn CPU forever in
 *   hot_thread_main -> hot_root -> hot_mid -> hot_leaf
 * and the others block in pthread_cond_wait.  The threads are named
 * "hot-<i>" and "idle-<i>".  Once all are named it prints, flushing stdout:
 *   pid P
 *   hot T        (one line per hot thread id)
 *   idle T       (one line per idle thread id)
 *   ready
 * and exits on SIGTERM or SIGINT, or after S seconds (default 120).
 *
 * Built with -O2: every function of the chain is noinline (and noclone, so
 * its symbol keeps its name) and uses its callee's result after the call, so
 * that the compiler can neither inline it nor turn the call into a jump.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "number.h"

#if defined(__clang__)
#define CHAIN __attribute__((noinline))
#else
#define CHAIN __attribute__((noinline, noclone))
#endif

#define MAX_THREADS 20000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int nready, nhot = 1;
static pid_t tids[MAX_THREADS];
static volatile uint64_t sink;

/* Some 20 ms of work per call: the thread is almost always caught here,
 * below the three callers, and at one of a dozen instructions. */
CHAIN static uint64_t hot_leaf(uint64_t x)
{
	for (int i = 0; i < 4 * 1000 * 1000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		x ^= x >> 29;
		x += (uint64_t)i << 3;
		x ^= x << 17;
		__asm__ volatile("" : "+r"(x));   /* keep the loop a loop */
	}
	return x;
}

CHAIN static uint64_t hot_mid(uint64_t x)
{
	uint64_t r = hot_leaf(x);
	return r ^ (r >> 7);
}

CHAIN static uint64_t hot_root(uint64_t x)
{
	uint64_t r = hot_mid(x + 1);
	return r ^ (r >> 11);
}

/* Names the calling thread, then announces it to main. */
static void ready(int i, const char *kind, int n)
{
	char name[16];

	snprintf(name, sizeof(name), "%s-%d", kind, n);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&lock);
	tids[i] = gettid();
	nready++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

CHAIN static void *hot_thread_main(void *arg)
{
	int i = (int)(intptr_t)arg;
	uint64_t x = (uint64_t)i;

	ready(i, "hot", i);
	for (;;) {
		x = hot_root(x);
		sink = x;
	}
	return NULL;
}

static void *idle_thread_main(void *arg)
{
	int i = (int)(intptr_t)arg;

	ready(i, "idle", i - nhot);
	pthread_mutex_lock(&lock);
	for (;;)
		pthread_cond_wait(&changed, &lock);   /* until the process exits */
	return NULL;
}

/* A whole number in LO..HI for option WHAT, or exit 2. */
static int number(const char *s, int lo, int hi, const char *what)
{
	return target_number("hotchain", s, lo, hi, what);
}

static void usage(FILE *f)
{
	fputs("usage: hotchain --threads N --hot K [--timeout SECONDS]\n", f);
}

int main(int argc, char **argv)
{
	int nthreads = 1, timeout = 120;
	sigset_t sigs;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			usage(stderr);
			return 2;
		}
		if (strcmp(argv[i], "--threads") == 0)
			nthreads = number(argv[++i], 1, MAX_THREADS, "--threads");
		else if (strcmp(argv[i], "--hot") == 0)
			nhot = number(argv[++i], 0, MAX_THREADS, "--hot");
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = number(argv[++i], 1, 86400, "--timeout");
		else {
			usage(stderr);
			return 2;
		}
	}
	if (nhot > nthreads) {
		fprintf(stderr, "hotchain: --hot %d is more than --threads %d\n", nhot, nthreads);
		return 2;
	}

	/* Every thread inherits the blocked mask: only sigtimedwait below
	 * takes SIGTERM and SIGINT. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	/* 64 KiB stacks: 20,000 threads then fit in 1.3 GiB of address space,
	 * and the chains here are a few frames deep. */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		int r = pthread_create(&t, &attr, i < nhot ? hot_thread_main : idle_thread_main,
		                       (void *)(intptr_t)i);

		if (r != 0) {
			fprintf(stderr, "hotchain: pthread_create: %s\n", strerror(r));
			return 1;
		}
	}

	pthread_mutex_lock(&lock);
	while (nready < nthreads)
		pthread_cond_wait(&changed, &lock);
	pthread_mutex_unlock(&lock);
	printf("pid %d\n", (int)getpid());
	for (int i = 0; i < nthreads; i++)
		printf("%s %d\n", i < nhot ? "hot" : "idle", (int)tids[i]);
	printf("ready\n");
	fflush(stdout);

	struct timespec ts = { timeout, 0 };
	while (sigtimedwait(&sigs, NULL, &ts) < 0 && errno == EINTR)
		;
	return 0;
}
