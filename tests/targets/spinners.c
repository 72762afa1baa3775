/* spinners: K threads that spin and a few that wait, for the starved and
 * process events.
 *
 *   spinners [--spin K] [--timeout S]
 *
 * Threads "spin-0" .. "spin-K-1" (default K = 4) loop in
 *   spin_leaf <- spin_loop <- spin_main
 * and never sleep: each wants a whole core, so with K above the CPUs each
 * gets a share of one and waits for the rest.  Three threads wait for
 * ever, each in an ordinary idle wait: "idle-cond" on a condition
 * variable, "idle-pipe" in read(2) of a pipe nobody writes, "idle-epoll"
 * in epoll_wait(2) on that pipe; the main thread sleeps in sigwait.
 * Prints "pid P", "hot T" per spinner, "idle T" per waiting thread (the
 * main thread's too) and "ready"; exits on SIGTERM or after S seconds
 * (default 120).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__clang__)
#define CHAIN __attribute__((noinline))
#else
#define CHAIN __attribute__((noinline, noclone))
#endif

#define MAX_SPIN 64

static volatile uint64_t sink;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started = PTHREAD_COND_INITIALIZER, never = PTHREAD_COND_INITIALIZER;
static int pipefd[2];
static pid_t tids[MAX_SPIN + 3];
static int ntids;

/* Each thread says its tid once it runs under its name. */
static void announce(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&lock);
	tids[ntids++] = (pid_t)syscall(SYS_gettid);
	pthread_cond_signal(&started);
	pthread_mutex_unlock(&lock);
}

CHAIN static uint64_t spin_leaf(uint64_t x)
{
	for (int i = 0; i < 100000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

CHAIN static void spin_loop(void)
{
	uint64_t x = 1;

	for (;;)
		sink = x = spin_leaf(x);
}

CHAIN static void *spin_main(void *arg)
{
	char name[16];

	snprintf(name, sizeof name, "spin-%d", (int)(intptr_t)arg);
	announce(name);
	spin_loop();
	return NULL;
}

static void *idle_cond(void *arg)
{
	(void)arg;
	announce("idle-cond");
	pthread_mutex_lock(&lock);
	for (;;)
		pthread_cond_wait(&never, &lock);
	return NULL;
}

static void *idle_pipe(void *arg)
{
	char c;
	(void)arg;
	announce("idle-pipe");
	while (read(pipefd[0], &c, 1) != 0)
		;
	return NULL;
}

static void *idle_epoll(void *arg)
{
	struct epoll_event ev = { .events = EPOLLIN }, out;
	int ep = epoll_create1(0);
	(void)arg;
	announce("idle-epoll");
	epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &ev);
	for (;;)
		epoll_wait(ep, &out, 1, -1);
	return NULL;
}

int main(int argc, char **argv)
{
	void *(*const idle[])(void *) = { idle_cond, idle_pipe, idle_epoll };
	int spin = 4, timeout = 120, sig;
	sigset_t set;
	pthread_t t;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--spin") == 0)
			spin = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeout") == 0)
			timeout = atoi(argv[i + 1]);
	}
	if (spin < 1 || spin > MAX_SPIN || pipe(pipefd) < 0)
		return 2;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	printf("pid %d\n", (int)getpid());
	/* The waiting ones first, each announced before any spinner starts:
	 * the first three tids are theirs. */
	for (int i = 0; i < 3; i++)
		pthread_create(&t, NULL, idle[i], NULL);
	pthread_mutex_lock(&lock);
	while (ntids < 3)
		pthread_cond_wait(&started, &lock);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < spin; i++)
		pthread_create(&t, NULL, spin_main, (void *)(intptr_t)i);
	pthread_mutex_lock(&lock);
	while (ntids < spin + 3)
		pthread_cond_wait(&started, &lock);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < ntids; i++)
		printf("%s %d\n", i < 3 ? "idle" : "hot", (int)tids[i]);
	printf("idle %d\nready\n", (int)getpid());
	fflush(stdout);
	alarm((unsigned)timeout);
	sigwait(&set, &sig);
	return 0;
}
