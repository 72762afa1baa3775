/* json: the pieces of JSON output shared by the readers (tail, report). */
#ifndef CPUMOND_JSON_H
#define CPUMOND_JSON_H

#include <stdint.h>
#include <stdio.h>

#include "stackdump/stackdump.h"

/* Writes S as a JSON string, quotes included.  Names come from the watched
 * processes and are bytes, not text: a byte that is not part of valid UTF-8
 * is written as the code point of the same number (\u00ff for 0xff), so the
 * output stays valid JSON and valid UTF-8 whatever S holds.  NULL is
 * written as "". */
void json_put_string(const char *s, FILE *out);

/* The same, but NULL and "" (not known, or none) as null. */
void json_put_string_or_null(const char *s, FILE *out);

/* Writes T_US (microseconds since the epoch) as an RFC 3339 local time with
 * microseconds, unquoted: 2026-11-29T13:04:05.123456+00:00.  A time that
 * cannot be converted is written as @T_US. */
void json_put_time(int64_t t_us, FILE *out);

/* Writes the keys of frame F's source that every JSON frame ends with:
 * ',"file":F,"line":N,"inlined":B', the file and line null when unknown
 * (names looked up at read time give them; the daemon never does). */
void json_put_frame_source(const struct stackdump_frame *f, FILE *out);

/* The integer at top-level key KEY of OBJ, the text of a JSON object (an
 * event's details, valid JSON as the store hands it over; anything else
 * finds nothing, never reads past its NUL).  Keys inside nested values
 * are not matched; KEY is compared byte for byte, unescaped.  Returns 0
 * and sets *VALUE, or -ENOENT when there is no such key or its value is
 * not an integer. */
int json_object_int(const char *obj, const char *key, long long *value);

#endif
