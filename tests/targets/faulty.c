/* faulty: a target for the fault suite (tests/faults/).
 *
 *   faulty [--hot K] [--life-ms MIN:MAX] [--total N] [--idle M]
 *          [--comm NAME] [--thread-name NAME] [--timeout S] [ARG...]
 *
 * Keeps K hot threads (default 1) burning CPU in
 *   faulty_thread_main -> faulty_root -> faulty_leaf
 * each for a random MIN..MAX ms (default 0:0: forever), after which it exits
 * and a new one takes its place, until N hot threads (default 0: no limit)
 * have finished their burn: a thread left stopped never finishes, and the
 * process then never prints "done".  M idle threads (default 0)
 * block in pthread_cond_wait.
 *
 * --comm renames the process (prctl PR_SET_NAME: its /proc/PID/comm, which
 * may then hold spaces, parentheses, newlines and escape sequences);
 * --thread-name names every hot thread (pthread_setname_np).  Both are cut
 * at 15 bytes by the kernel.  Extra ARGs are ignored: they are there to
 * give the process an odd cmdline (bytes that are not UTF-8).
 *
 * Prints, flushing stdout: "pid P", one "hot T" per first hot thread, one
 * "idle T" per idle thread, "ready"; then "done N" and exit 0 once N hot
 * threads finished (with --total); exits 0 on SIGTERM/SIGINT or after S
 * seconds (default 120).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "number.h"

#if defined(__clang__)
#define CHAIN __attribute__((noinline))
#else
#define CHAIN __attribute__((noinline, noclone))
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int life_min, life_max, total, finished, started, nhot = 1;
static const char *thread_name;
static volatile uint64_t sink;

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* About a millisecond of work per call. */
CHAIN static uint64_t faulty_leaf(uint64_t x)
{
	for (int i = 0; i < 200 * 1000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		x ^= x >> 29;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

CHAIN static uint64_t faulty_root(uint64_t x)
{
	uint64_t r = faulty_leaf(x + 1);
	return r ^ (r >> 11);
}

static int pick_life(unsigned *seed)
{
	if (life_max <= 0)
		return 0;
	return life_min + (int)(rand_r(seed) % (unsigned)(life_max - life_min + 1));
}

struct hot_arg {
	int life_ms;
	pid_t tid;
	int ready;
};

CHAIN static void *faulty_thread_main(void *p)
{
	struct hot_arg *a = p;
	int life = a->life_ms;
	uint64_t x = (uint64_t)gettid(), until;

	if (thread_name)
		pthread_setname_np(pthread_self(), thread_name);
	pthread_mutex_lock(&lock);
	a->tid = gettid();
	a->ready = 1;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	until = mono_ms() + (uint64_t)life;
	do {
		x = faulty_root(x);
		sink = x;
	} while (life == 0 || mono_ms() < until);
	pthread_mutex_lock(&lock);
	finished++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	free(a);
	return NULL;
}

static void start_hot(pid_t *tid_out)
{
	static unsigned seed = 12345;
	struct hot_arg *a = calloc(1, sizeof *a);
	pthread_attr_t attr;
	pthread_t t;
	int r;

	if (!a)
		abort();
	pthread_mutex_lock(&lock);
	a->life_ms = pick_life(&seed);
	started++;
	pthread_mutex_unlock(&lock);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, faulty_thread_main, a);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		fprintf(stderr, "faulty: pthread_create: %s\n", strerror(r));
		exit(1);
	}
	if (tid_out) {
		pthread_mutex_lock(&lock);
		while (!a->ready)
			pthread_cond_wait(&changed, &lock);
		*tid_out = a->tid;
		pthread_mutex_unlock(&lock);
	}
}

static void *idle_main(void *arg)
{
	pid_t *tid = arg;

	pthread_mutex_lock(&lock);
	*tid = gettid();
	pthread_cond_broadcast(&changed);
	for (;;)
		pthread_cond_wait(&changed, &lock);
	return NULL;
}

/* A whole number in LO..HI for option WHAT, or exit 2. */
static int number(const char *s, int lo, int hi, const char *what)
{
	return target_number("faulty", s, lo, hi, what);
}

int main(int argc, char **argv)
{
	int timeout = 120, nidle = 0;
	const char *comm = NULL;
	pid_t first[64], idle[64];
	sigset_t sigs;

	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(o, "--hot") == 0 && v)
			nhot = number(v, 0, 64, o);
		else if (strcmp(o, "--idle") == 0 && v)
			nidle = number(v, 0, 64, o);
		else if (strcmp(o, "--total") == 0 && v)
			total = number(v, 0, 100000000, o);
		else if (strcmp(o, "--timeout") == 0 && v)
			timeout = number(v, 1, 86400, o);
		else if (strcmp(o, "--comm") == 0 && v)
			comm = v;
		else if (strcmp(o, "--thread-name") == 0 && v)
			thread_name = v;
		else if (strcmp(o, "--life-ms") == 0 && v) {
			if (sscanf(v, "%d:%d", &life_min, &life_max) != 2 || life_min < 0 ||
			    life_max < life_min) {
				fprintf(stderr, "faulty: --life-ms wants MIN:MAX, not \"%s\"\n", v);
				return 2;
			}
		} else if (o[0] == '-' && o[1] == '-') {
			fprintf(stderr, "usage: faulty [--hot K] [--life-ms MIN:MAX] [--total N] "
			        "[--idle M] [--comm NAME] [--thread-name NAME] [--timeout S] [ARG...]\n");
			return 2;
		} else {
			continue;        /* a free argument: ignored */
		}
		i++;
	}
	if (comm)
		prctl(PR_SET_NAME, comm, 0, 0, 0);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	for (int i = 0; i < nidle; i++) {
		pthread_t t;

		idle[i] = 0;
		if (pthread_create(&t, NULL, idle_main, &idle[i]) != 0)
			return 1;
		pthread_mutex_lock(&lock);
		while (!idle[i])
			pthread_cond_wait(&changed, &lock);
		pthread_mutex_unlock(&lock);
	}
	for (int i = 0; i < nhot; i++)
		start_hot(&first[i]);
	printf("pid %d\n", (int)getpid());
	for (int i = 0; i < nhot; i++)
		printf("hot %d\n", (int)first[i]);
	for (int i = 0; i < nidle; i++)
		printf("idle %d\n", (int)idle[i]);
	printf("ready\n");
	fflush(stdout);

	/* Replace each hot thread that ends, until TOTAL have ended. */
	uint64_t deadline = mono_ms() + (uint64_t)timeout * 1000;
	for (;;) {
		struct timespec zero = { 0, 0 };
		int sig, need;

		sig = sigtimedwait(&sigs, NULL, &zero);
		if (sig == SIGTERM || sig == SIGINT)
			return 0;
		if (mono_ms() >= deadline)
			return 0;
		pthread_mutex_lock(&lock);
		if (total && finished >= total) {
			pthread_mutex_unlock(&lock);
			printf("done %d\n", finished);
			fflush(stdout);
			return 0;
		}
		need = nhot - (started - finished);
		if (total && started + need > total)
			need = total - started;
		if (need <= 0) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&changed, &lock, &ts);
			pthread_mutex_unlock(&lock);
			continue;
		}
		pthread_mutex_unlock(&lock);
		while (need-- > 0)
			start_hot(NULL);
	}
}
