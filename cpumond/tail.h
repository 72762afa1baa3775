/* tail: prints and follows the overload log.  Reads the database only. */
#ifndef CPUMOND_TAIL_H
#define CPUMOND_TAIL_H

#include <stdbool.h>
#include <stdio.h>

#include "cpumond/store.h"
#include "stackdump/symbolize.h"

struct tail_options {
	const char *database;    /* path of the log database */
	int lines;               /* last N events first (default 10; 0: none) */
	bool follow;             /* -f: then print new events as they commit */
	bool json;               /* --json: one JSON object per line (eventfmt_json) */
	struct symbolize *names; /* names, lines and inlined calls looked up
	                            at read time; NULL: as stored */
};

/* Runs `cpumond tail`.  Returns 0, or a negative errno after printing the
 * reason on stderr (database missing or unreadable).  With follow it returns
 * 0 when *STOP becomes non-zero (checked at least every 250 ms). */
int tail_run(const struct tail_options *opt, volatile const int *stop);

/* One event in human form: a header line (local time, comm[pid], thread and
 * tid, usage against threshold, samples over threshold, stop time) and the
 * stack indented beneath.  Names are escaped: no control byte reaches OUT. */
void tail_format_human(const struct store_event *ev, FILE *out);

#endif
