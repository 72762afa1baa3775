/* top's loop: the latest cycle from the database, the terminal, the keys
 * (top.h).  The view itself is top_view.c's. */
#include "cpumond/top.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/clock.h"
#include "cpumond/log.h"
#include "cpumond/store.h"
#include "stackdump/demangle.h"

/* The view is drawn again at least this often, for the cycle's age. */
#define TOP_AGE_MS 1000

/* ---- the latest cycle ---- */

struct reading {
	struct top_cycle *c;
	size_t cap;
};

/* The name people read for SYMBOL, as stored (demangled), or NULL for ""
 * (or out of memory). */
static char *function_name(const char *symbol)
{
	char *readable;

	if (!symbol[0])
		return NULL;
	readable = demangle_name(symbol);
	return readable ? readable : strdup(symbol);
}

/* Copies row U into the reading's cycle; -ENOMEM stops the walk. */
static int add_thread(const struct store_usage *u, void *arg)
{
	struct reading *r = arg;
	struct top_thread *t;

	if (r->c->nthreads == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct top_thread *more = reallocarray(r->c->threads, cap, sizeof *more);

		if (!more)
			return -ENOMEM;
		r->c->threads = more;
		r->cap = cap;
	}
	t = &r->c->threads[r->c->nthreads];
	*t = (struct top_thread){
		.pid = u->pid, .tid = u->tid, .usage = u->usage, .run_delay = u->run_delay,
		.threshold = u->threshold, .state = u->state, .episode = u->episode,
		.watch = strdup(u->watch), .comm = strdup(u->comm), .thread = strdup(u->thread),
		.frame = function_name(u->last_symbol),
	};
	/* Counted before the check, so that top_cycle_free frees it. */
	r->c->nthreads++;
	if (!t->watch || !t->comm || !t->thread || (u->last_symbol[0] && !t->frame))
		return -ENOMEM;
	return 0;
}

/* The latest cycle into *OUT, replacing what it held.  Returns 0, or a
 * negative errno (store_error says why; -ENOMEM too) with *OUT kept. */
static int read_latest(struct store *st, struct top_cycle *out)
{
	struct top_cycle c = { 0 };
	struct reading r = { .c = &c };
	struct store_cycle sc;
	int e = store_latest_cycle(st, &sc, add_thread, &r);

	if (e != 0) {
		top_cycle_free(&c);
		return e < 0 ? e : -ENOMEM;
	}
	c.id = sc.id;
	c.time_us = sc.time_us;
	c.interval_ms = sc.interval_ms;
	top_cycle_free(out);
	*out = c;
	return 0;
}

/* Says why read_latest failed with E. */
static void say_read_error(struct store *st, int e)
{
	log_msg(LOG_ERR, "%s", e == -ENOMEM ? "out of memory" : store_error(st));
}

/* ---- the terminal ---- */

static volatile sig_atomic_t quit_signal, resized, suspended;

static void on_quit(int sig)
{
	quit_signal = sig;
}

static void on_winch(int sig)
{
	(void)sig;
	resized = 1;
}

static void on_tstp(int sig)
{
	(void)sig;
	suspended = 1;
}

struct term {
	struct termios saved;   /* stdin's modes before raw mode */
	bool keys;              /* stdin is a terminal: keys are read from it */
	bool raw;               /* in raw mode and on the alternate screen */
	int rows, cols;
};

/* The alternate screen (the shell's screen comes back at the end), no
 * cursor, no wrap of a line that is too long: a name never scrolls the
 * screen. */
#define SCREEN_ENTER "\033[?1049h\033[?25l\033[?7l"
#define SCREEN_LEAVE "\033[?7h\033[?25h\033[?1049l"

static void write_all(const char *s, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		s += n;
		len -= (size_t)n;
	}
}

/* Raw mode: keys one at a time, not echoed; signals from the keyboard
 * (Ctrl-C, Ctrl-Z) stay signals.  OPOST stays too: "\n" moves to the next
 * line's start. */
static void term_enter(struct term *t)
{
	if (t->keys) {
		struct termios raw = t->saved;

		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	write_all(SCREEN_ENTER, strlen(SCREEN_ENTER));
	t->raw = true;
}

/* Gives the terminal back as it was: every way out goes through here. */
static void term_leave(struct term *t)
{
	if (!t->raw)
		return;
	write_all(SCREEN_LEAVE, strlen(SCREEN_LEAVE));
	if (t->keys)
		tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
	t->raw = false;
}

static void term_size(struct term *t)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
		t->rows = ws.ws_row;
		t->cols = ws.ws_col;
	} else {
		t->rows = 24;
		t->cols = 80;
	}
}

/* SIGINT, SIGTERM and SIGHUP end the view (the terminal restored), SIGWINCH
 * redraws it at the new size, SIGTSTP (Ctrl-Z) gives the terminal back
 * before the stop.  No SA_RESTART: a signal cuts the wait for a key
 * short. */
static void set_signals(void (*quit)(int), void (*winch)(int), void (*tstp)(int))
{
	struct sigaction sa = { .sa_handler = quit };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = winch;
	sigaction(SIGWINCH, &sa, NULL);
	sa.sa_handler = tstp;
	sigaction(SIGTSTP, &sa, NULL);
}

/* Ctrl-Z: the terminal as it was, stopped, and raw again on SIGCONT. */
static void suspend(struct term *t)
{
	term_leave(t);
	signal(SIGTSTP, SIG_DFL);
	raise(SIGTSTP);
	/* Here again after SIGCONT. */
	set_signals(on_quit, on_winch, on_tstp);
	term_enter(t);
	term_size(t);
}

/* ---- the view ---- */

struct top_state {
	struct top_screen screen;
	struct top_cycle cycle;
	const char *database;
	struct store *st;       /* NULL while the database is waited for */
	char why[512];          /* why it is waited for: the screen's note */
	int rows;               /* -n N; 0: as many as fit */
	char *watch;            /* the filter, a copy: the cycle it came from goes */
};

/* Takes key K; false for q. */
static bool take_key(struct top_state *s, char k)
{
	const char *next;

	switch (k) {
	case 'q':
		return false;
	case 'u':
		s->screen.by = TOP_BY_USAGE;
		break;
	case 'd':
		s->screen.by = TOP_BY_RUN_DELAY;
		break;
	case 'w':
		next = top_next_watch(s->cycle.threads, s->cycle.nthreads, s->watch);
		free(s->watch);
		/* Out of memory: all watches. */
		s->watch = next ? strdup(next) : NULL;
		s->screen.watch = s->watch;
		break;
	}
	return true;
}

/* Draws the screen in one write, from its top left corner down, each line
 * erasing what was left of the last screen's.  Returns 0 or -ENOMEM. */
static int draw(struct top_state *s, const struct term *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	if (!out)
		return -ENOMEM;
	s->screen.width = t->cols;
	/* The header and the column heads take two rows. */
	s->screen.rows = t->rows > 3 ? t->rows - 2 : 1;
	if (s->rows > 0 && s->rows < s->screen.rows)
		s->screen.rows = s->rows;
	s->screen.now_us = clock_real_us();
	fputs("\033[H", out);
	top_format(&s->screen, out);
	if (fclose(out) != 0) {
		free(buf);
		return -ENOMEM;
	}
	/* The last line's newline would scroll a full screen up a row. */
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	write_all(buf, len);
	write_all("\033[J", 3);
	free(buf);
	return 0;
}

/* Reads the keys waiting on stdin; false when one was q. */
static bool read_keys(struct top_state *s)
{
	char keys[64];
	ssize_t n = read(STDIN_FILENO, keys, sizeof keys);

	for (ssize_t i = 0; i < n; i++)
		if (!take_key(s, keys[i]))
			return false;
	return true;
}

/* Opens the database when it is not open; true when it is.  One that does
 * not exist or has no schema yet is waited for: the screen says why. */
static bool open_store(struct top_state *s, int *e)
{
	*e = 0;
	if (s->st)
		return true;
	*e = store_open(s->database, false, &s->st, s->why, sizeof s->why);
	if (*e == -ENOENT || *e == -EAGAIN) {
		s->screen.note = s->why;
		*e = 0;
	} else if (*e == 0) {
		s->screen.note = NULL;
	}
	return s->st != NULL;
}

/* The live view until q or a signal.  Returns 0 or a negative errno,
 * said. */
static int live(struct top_state *s)
{
	struct term t = { 0 };
	int64_t next_poll = 0, drawn = 0, shown_id = -1;
	int e = 0;

	t.keys = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t.saved) == 0;
	set_signals(on_quit, on_winch, on_tstp);
	term_enter(&t);
	term_size(&t);
	s->screen.keys = true;
	s->screen.eol = "\033[K\n";
	while (!quit_signal) {
		struct pollfd pfd = { .fd = t.keys ? STDIN_FILENO : -1, .events = POLLIN };
		bool redraw = false;
		int64_t now = (int64_t)clock_mono_ms();

		if (suspended) {
			suspended = 0;
			suspend(&t);
			redraw = true;
		}
		if (resized) {
			resized = 0;
			term_size(&t);
			redraw = true;
		}
		if (now >= next_poll) {
			/* A writer's checkpoint may hold the file for a moment:
			 * the next poll reads it. */
			if (open_store(s, &e))
				e = read_latest(s->st, &s->cycle);
			if (e < 0 && e != -EBUSY) {
				term_leave(&t);
				if (s->st)
					say_read_error(s->st, e);
				else
					log_msg(LOG_ERR, "%s", s->why);
				break;
			}
			e = 0;
			next_poll = now + TOP_POLL_MS;
			redraw |= s->cycle.id != shown_id;
		}
		if (redraw || now - drawn >= TOP_AGE_MS) {
			if ((e = draw(s, &t)) < 0) {
				term_leave(&t);
				log_msg(LOG_ERR, "out of memory");
				break;
			}
			shown_id = s->cycle.id;
			drawn = now;
		}
		if (poll(&pfd, 1, (int)(next_poll - now > 0 ? next_poll - now : 0)) > 0) {
			if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL))
				t.keys = false;         /* no more keys: signals only */
			else if (!read_keys(s))
				break;
			drawn = 0;              /* a key: draw at once */
		}
	}
	term_leave(&t);
	set_signals(SIG_DFL, SIG_DFL, SIG_DFL);
	return e;
}

/* One table of plain lines on stdout.  Returns 0 or a negative errno,
 * said. */
static int once(struct top_state *s)
{
	int e = store_open(s->database, false, &s->st, s->why, sizeof s->why);

	if (e < 0) {
		log_msg(LOG_ERR, "%s", s->why);
		return e;
	}
	if ((e = read_latest(s->st, &s->cycle)) < 0) {
		say_read_error(s->st, e);
		return e;
	}
	s->screen.rows = s->rows;
	s->screen.now_us = clock_real_us();
	top_format(&s->screen, stdout);
	errno = 0;
	if (fflush(stdout) == EOF || ferror(stdout)) {
		e = errno ? errno : EIO;
		log_errno(LOG_ERR, e, "cannot write the output");
		return -e;
	}
	return 0;
}

int top_run(const struct top_options *opt)
{
	struct top_state s = {
		.screen = { .eol = "\n" },
		.rows = opt->rows,
		.database = opt->database,
	};
	bool plain = opt->once || !isatty(STDOUT_FILENO);
	int e;

	tzset();
	if (opt->watch && !(s.watch = strdup(opt->watch))) {
		log_msg(LOG_ERR, "out of memory");
		return -ENOMEM;
	}
	s.screen.watch = s.watch;
	s.screen.cycle = &s.cycle;
	e = plain ? once(&s) : live(&s);
	store_close(s.st);
	top_cycle_free(&s.cycle);
	free(s.watch);
	return e;
}
