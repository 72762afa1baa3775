/* pprof: a profile in pprof's format, built in memory and encoded by hand.
 *
 * The format is profile.proto of github.com/google/pprof (package
 * perftools.profiles), the one go tool pprof, Grafana Pyroscope, Parca and
 * Polar Signals read: a Profile message whose samples point to locations,
 * each location to its mapping (the module) and, through its line, to a
 * function; every string is an index into one string table whose entry 0
 * is "".  On disk the message is gzipped (pprof_gzip).
 *
 * Only what cpumond writes is encoded: protobuf varints (wire type 0) and
 * length-delimited fields (wire type 2: strings, messages and packed
 * repeated integers), fields in field-number order, values that are 0 left
 * out as proto3 leaves them out (string_table[0] is written all the same:
 * a repeated field's elements always are).  The Go runtime writes its
 * profiles the same way (runtime/pprof/protobuf.go).
 *
 * Strings, mappings, functions and locations are interned: the same one
 * given twice gets the same index or id, so the caller may give every
 * frame as it comes.  Ids count from 1 in the order first given.  Pure: no
 * I/O, no clock.  Functions that can fail return 0 or -ENOMEM; after a
 * failure the profile only needs pprof_free.
 */
#ifndef CPUMOND_PPROF_H
#define CPUMOND_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- The wire format ---- */

/* A growing byte buffer.  An append that cannot grow it sets oom and
 * drops the bytes; check oom once at the end. */
struct pprof_buf {
	uint8_t *data;
	size_t len, cap;
	bool oom;
};

void pprof_buf_free(struct pprof_buf *b);

/* V as a base-128 varint: 7 bits a byte, the lowest first, the top bit set
 * on every byte but the last (1 to 10 bytes). */
void pprof_put_varint(struct pprof_buf *b, uint64_t v);

/* Field FIELD as a varint (wire type 0), left out when V is 0.  An int64
 * is given as its two's complement (a negative one takes 10 bytes). */
void pprof_put_uint(struct pprof_buf *b, uint32_t field, uint64_t v);

/* Field FIELD as LEN bytes of DATA (wire type 2), written even when LEN is
 * 0: a string, or a message encoded into its own buffer. */
void pprof_put_bytes(struct pprof_buf *b, uint32_t field, const void *data, size_t len);

/* Field FIELD as the N varints of V packed into one length-delimited
 * field, left out when N is 0. */
void pprof_put_packed(struct pprof_buf *b, uint32_t field, const uint64_t *v, size_t n);

/* ---- A profile ---- */

struct pprof;

/* Returns 0 and a new profile in *OUT (its string table holding ""), or
 * -ENOMEM. */
int pprof_new(struct pprof **out);

/* Frees P and everything it holds; P may be NULL. */
void pprof_free(struct pprof *p);

/* The index of S (NULL is "") in P's string table, added when new.  S is
 * copied as it is: give valid UTF-8 (protobuf strings are).  Returns 0 and
 * *INDEX, or -ENOMEM. */
int pprof_string(struct pprof *p, const char *s, int64_t *index);

#define PPROF_MAX_SAMPLE_TYPES 8

/* Adds a sample type (ValueType: TYPE, UNIT; "samples", "count").  Every
 * sample has one value per sample type, in the order they were added.
 * Returns 0, -EINVAL when a sample was added already or there are
 * PPROF_MAX_SAMPLE_TYPES, or -ENOMEM. */
int pprof_sample_type(struct pprof *p, const char *type, const char *unit);

/* The profile's time and duration (ns since the epoch; ns; 0: left out). */
void pprof_set_time(struct pprof *p, int64_t time_ns, int64_t duration_ns);

/* The period between two samples: PERIOD of PERIOD_TYPE / PERIOD_UNIT
 * ("cpu", "nanoseconds").  Returns 0 or -ENOMEM. */
int pprof_set_period(struct pprof *p, const char *period_type, const char *period_unit,
                     int64_t period);

/* A mapping: the module a location's address belongs to. */
struct pprof_mapping {
	uint64_t memory_start;   /* address range; memory_limit 0: one past */
	uint64_t memory_limit;   /* the highest address of its locations */
	uint64_t file_offset;
	const char *filename;    /* the module's path; NULL: "" */
	const char *build_id;    /* NULL: "" */
	bool has_functions;      /* what its locations' lines say: a reader */
	bool has_filenames;      /* symbolizes a mapping again only when */
	bool has_line_numbers;   /* none of these is set */
};

/* The id of mapping M, the same for the same filename, build-id and range
 * (its has_* flags are those of the first one given, or-ed with the later
 * ones').  Returns 0 and *ID, or -ENOMEM. */
int pprof_mapping(struct pprof *p, const struct pprof_mapping *m, uint64_t *id);

/* A function. */
struct pprof_function {
	const char *name;        /* readable (demangled); NULL: "" */
	const char *system_name; /* as the system knows it (the linkage name) */
	const char *filename;    /* its source file */
	int64_t start_line;      /* 0: unknown */
};

/* The id of function F, the same for the same four fields.  Returns 0 and
 * *ID, or -ENOMEM. */
int pprof_function(struct pprof *p, const struct pprof_function *f, uint64_t *id);

/* The id of the location at ADDRESS of mapping MAPPING_ID (0: none) with
 * one line, LINE (0: unknown) of function FUNCTION_ID (0: no line), the
 * same for the same four.  Returns 0 and *ID, or -ENOMEM. */
int pprof_location(struct pprof *p, uint64_t mapping_id, uint64_t address,
                   uint64_t function_id, int64_t line, uint64_t *id);

/* A sample's label: KEY with a string or a number. */
struct pprof_label {
	const char *key;
	const char *str;         /* NULL: a number, NUM */
	int64_t num;
};

/* Adds a sample: its NLOCS locations, the innermost first, its values
 * (one per sample type) and its NLABELS labels.  Returns 0 or -ENOMEM. */
int pprof_sample(struct pprof *p, const uint64_t *locs, size_t nlocs, const int64_t *values,
                 const struct pprof_label *labels, size_t nlabels);

/* P encoded as one Profile message (not gzipped) into *OUT (emptied
 * first).  Returns 0, or -ENOMEM with OUT empty. */
int pprof_encode(const struct pprof *p, struct pprof_buf *out);

/* LEN bytes of IN gzipped (RFC 1952, zlib's deflate; no file name, time
 * 0: the same bytes for the same input) into *OUT (emptied first).
 * Returns 0, or -ENOMEM with OUT empty (also for more than 4 GiB). */
int pprof_gzip(const void *in, size_t len, struct pprof_buf *out);

#endif
