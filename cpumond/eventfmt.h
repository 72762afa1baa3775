/* eventfmt: an event as other programs get it, in one place.
 *
 * The JSON object of `cpumond tail --json` and of the event log, the fields
 * of the event's journal entry, and the summary of its key stack that the
 * daemon's event line and the journal's MESSAGE share.  Pure: it formats
 * what it is given and reads nothing.
 *
 * The JSON object, one a line, keys in this order (cpumond(8), under tail,
 * says what each means; tests/unit/test_eventfmt.c pins the bytes):
 *   id, time, kind, host, watch, pid, nspid, comm, exe, cgroup, unit, tid,
 *   thread, usage, threshold,
 *   consecutive, run_delay, freeze_us, stack_hash, truncated, error,
 *   samples, capture, freeze_max_us, episode_end, details,
 *   stacks: [{stack_hash, count, key}],
 *   stack: [{ip, module, build_id, offset, func_offset, symbol, name,
 *            symbol_offset, file, line, inlined}]
 * The journal fields: MESSAGE, PRIORITY, CPUMOND_WATCH, CPUMOND_PID,
 * CPUMOND_TID, CPUMOND_COMM, CPUMOND_THREAD, CPUMOND_USAGE,
 * CPUMOND_STACK_HASH, CPUMOND_TOP_FRAME, CPUMOND_NSPID, CPUMOND_CGROUP,
 * CPUMOND_UNIT, CPUMOND_KIND, CPUMOND_CAPTURE.
 */
#ifndef CPUMOND_EVENTFMT_H
#define CPUMOND_EVENTFMT_H

#include <stddef.h>
#include <stdio.h>

#include "cpumond/store.h"
#include "stackdump/stackdump.h"

/* Writes EV as one line of JSON, newline included.  Always valid JSON and
 * UTF-8, whatever bytes the names hold (see json_put_string).  A frame's
 * symbol is its linkage name, its name the demangled one (the same for C);
 * both are null without a symbol. */
void eventfmt_json(const struct store_event *ev, FILE *out);

/* The event's kind: "hot" for an event that has none recorded. */
const char *eventfmt_kind(const struct store_event *ev);

/* What made EV an event, as the daemon's event line, the journal's
 * MESSAGE and tail say it, into BUF (LEN bytes, cut to fit):
 *   hot      "at 987‰ > 800‰"
 *   starved  "starved: wants 1000‰, got 480‰ (threshold 800‰)", wants being
 *            its details' demand, or else usage + run_delay
 *   process  "process: 1870‰ > 300‰ in 4 threads, this one 480‰", from its
 *            details' process_usage and threads (the usage alone without)
 *   other    "KIND: 480‰, threshold 800‰" (a kind of a later cpumond) */
void eventfmt_what(const struct store_event *ev, char *buf, size_t len);

/* The event's reason for a missing or partial stack, "" when none: its
 * error, or else its stack's (an event straight from stackdump has only
 * that one). */
const char *eventfmt_error(const struct store_event *ev);

/* "hot_leaf <- hot_mid <- hot_root <- ...": the three innermost functions
 * of SK, and the innermost one that has a name when none of those has one
 * (a stripped library on top): "libx.so@0x1200 <- libx.so@0x1400 <-
 * libx.so@0x1900 <- ... <- main (#5)".  Functions are spelled as
 * stackdump_function_name does.  Written to BUF, cut to fit in LEN (>= 1)
 * bytes with its NUL; "" for a stack without frames. */
void eventfmt_stack_summary(const struct stackdump_stack *sk, char *buf, size_t len);

/* Fields of a journal entry. */
#define EVENTFMT_JOURNAL_FIELDS 15

/* The journal entry of EV, each field a string "KEY=value" in FIELDS:
 * MESSAGE ("nginx[4242] thread worker-3/4250 at 987‰ > 800‰: ", the middle
 * part eventfmt_what's, and SUMMARY,
 * the key stack as eventfmt_stack_summary wrote it, or "no stack" when EV
 * has no frames), PRIORITY=4, and the CPUMOND_* fields; CPUMOND_TOP_FRAME
 * is the innermost function (stackdump_function_name), so that it has one
 * value for every sample of a function, and with CPUMOND_STACK_HASH ""
 * without a stack; CPUMOND_NSPID, CPUMOND_CGROUP and CPUMOND_UNIT are ""
 * when unknown (or no unit), CPUMOND_KIND the event's kind (eventfmt_kind),
 * CPUMOND_CAPTURE "" when no sample was taken.  The values are the bytes of the names, unescaped: the
 * journal keeps bytes.  Returns 0, or -ENOMEM with FIELDS all NULL; free
 * with eventfmt_journal_free. */
int eventfmt_journal(const struct store_event *ev, const char *summary,
                     char *fields[EVENTFMT_JOURNAL_FIELDS]);
void eventfmt_journal_free(char *fields[EVENTFMT_JOURNAL_FIELDS]);

#endif
