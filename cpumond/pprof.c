/* pprof: a profile in pprof's format (profile.proto), built in memory and
 * encoded by hand; see pprof.h.  The tables are interned through search
 * trees (tsearch(3)): each entry is allocated on its own so that the tree
 * can point at it, and an array in id order lists them for the encoding. */
#include "cpumond/pprof.h"

#include <errno.h>
#include <search.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* profile.proto's field numbers. */
enum {
	PROFILE_SAMPLE_TYPE = 1, PROFILE_SAMPLE = 2, PROFILE_MAPPING = 3, PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5, PROFILE_STRING_TABLE = 6, PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10, PROFILE_PERIOD_TYPE = 11, PROFILE_PERIOD = 12,
};
enum { VALUE_TYPE_TYPE = 1, VALUE_TYPE_UNIT = 2 };
enum { SAMPLE_LOCATION_ID = 1, SAMPLE_VALUE = 2, SAMPLE_LABEL = 3 };
enum { LABEL_KEY = 1, LABEL_STR = 2, LABEL_NUM = 3 };
enum {
	MAPPING_ID = 1, MAPPING_MEMORY_START = 2, MAPPING_MEMORY_LIMIT = 3, MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5, MAPPING_BUILD_ID = 6, MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8, MAPPING_HAS_LINE_NUMBERS = 9,
};
enum { LOCATION_ID = 1, LOCATION_MAPPING_ID = 2, LOCATION_ADDRESS = 3, LOCATION_LINE = 4 };
enum { LINE_FUNCTION_ID = 1, LINE_LINE = 2 };
enum {
	FUNCTION_ID = 1, FUNCTION_NAME = 2, FUNCTION_SYSTEM_NAME = 3, FUNCTION_FILENAME = 4,
	FUNCTION_START_LINE = 5,
};

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

/* ---- The wire format ---- */

void pprof_buf_free(struct pprof_buf *b)
{
	free(b->data);
	*b = (struct pprof_buf){ 0 };
}

static void put_raw(struct pprof_buf *b, const void *data, size_t n)
{
	if (b->oom)
		return;
	if (n > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 64;
		uint8_t *d;

		while (cap - b->len < n)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d) {
			b->oom = true;
			return;
		}
		b->data = d;
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
}

void pprof_put_varint(struct pprof_buf *b, uint64_t v)
{
	uint8_t bytes[10];
	size_t n = 0;

	while (v >= 0x80) {
		bytes[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	bytes[n++] = (uint8_t)v;
	put_raw(b, bytes, n);
}

static void put_key(struct pprof_buf *b, uint32_t field, unsigned wire)
{
	pprof_put_varint(b, (uint64_t)field << 3 | wire);
}

void pprof_put_uint(struct pprof_buf *b, uint32_t field, uint64_t v)
{
	if (v == 0)
		return;
	put_key(b, field, WIRE_VARINT);
	pprof_put_varint(b, v);
}

void pprof_put_bytes(struct pprof_buf *b, uint32_t field, const void *data, size_t len)
{
	put_key(b, field, WIRE_LEN);
	pprof_put_varint(b, len);
	put_raw(b, data, len);
}

/* A message encoded into M, as field FIELD of B. */
static void put_message(struct pprof_buf *b, uint32_t field, const struct pprof_buf *m)
{
	if (m->oom)
		b->oom = true;
	pprof_put_bytes(b, field, m->data, m->len);
}

void pprof_put_packed(struct pprof_buf *b, uint32_t field, const uint64_t *v, size_t n)
{
	size_t len = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		uint64_t x = v[i];

		do {
			len++;
			x >>= 7;
		} while (x);
	}
	put_key(b, field, WIRE_LEN);
	pprof_put_varint(b, len);
	for (size_t i = 0; i < n; i++)
		pprof_put_varint(b, v[i]);
}

/* ---- The tables ---- */

struct str_entry {
	char *s;
	int64_t index;
};

/* A mapping, function or location: its key first, as words that
 * cmp_words compares, then its id and what does not tell it apart. */
struct mapping_entry {
	uint64_t filename, build_id, start, limit, offset;   /* the key */
	uint64_t id;
	bool has_functions, has_filenames, has_line_numbers;
	bool located;            /* a location is in it */
	uint64_t max_address;    /* the highest of their addresses */
};

struct function_entry {
	uint64_t name, system_name, filename, start_line;   /* the key */
	uint64_t id;
};

struct location_entry {
	uint64_t mapping, address, function, line;   /* the key */
	uint64_t id;
};

/* An array of entries in id order, with the tree that finds them. */
struct table {
	void **items;
	size_t n, cap;
	void *root;
};

struct pprof {
	struct table strings, mappings, functions, locations;
	uint64_t *sample_types;  /* (type, unit) index pairs, as varints */
	size_t nsample_types;
	size_t nsamples;
	struct pprof_buf samples;/* each Sample encoded as field 2 already */
	struct pprof_buf scratch, label_scratch;
	int64_t time_ns, duration_ns, period;
	int64_t period_type, period_unit;
};

/* Finds KEY in T (ordered by CMP), or adds a copy of its SIZE bytes with
 * *ID set to the next id (1 ..) first.  Returns the entry, or NULL when
 * out of memory. */
static void *intern(struct table *t, const void *key, size_t size, uint64_t *id,
                    int (*cmp)(const void *, const void *))
{
	void **found = tfind(key, &t->root, cmp);
	void *copy;

	if (found)
		return *found;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		void **items = reallocarray(t->items, cap, sizeof *items);

		if (!items)
			return NULL;
		t->items = items;
		t->cap = cap;
	}
	*id = t->n + 1;
	copy = malloc(size);
	if (!copy)
		return NULL;
	memcpy(copy, key, size);
	if (!tsearch(copy, &t->root, cmp)) {
		free(copy);
		return NULL;
	}
	t->items[t->n++] = copy;
	return copy;
}

static void no_free(void *node)
{
	(void)node;
}

static void table_free(struct table *t, void (*free_item)(void *))
{
	tdestroy(t->root, no_free);
	for (size_t i = 0; i < t->n; i++)
		free_item(t->items[i]);
	free(t->items);
}

static void free_string(void *item)
{
	free(((struct str_entry *)item)->s);
	free(item);
}

static int cmp_string(const void *a, const void *b)
{
	return strcmp(((const struct str_entry *)a)->s, ((const struct str_entry *)b)->s);
}

/* Orders the first N words of A and B. */
static int cmp_words(const void *a, const void *b, size_t n)
{
	const uint64_t *x = a, *y = b;

	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

static int cmp_mapping(const void *a, const void *b)
{
	return cmp_words(a, b, offsetof(struct mapping_entry, id) / sizeof(uint64_t));
}

static int cmp_function(const void *a, const void *b)
{
	return cmp_words(a, b, offsetof(struct function_entry, id) / sizeof(uint64_t));
}

static int cmp_location(const void *a, const void *b)
{
	return cmp_words(a, b, offsetof(struct location_entry, id) / sizeof(uint64_t));
}

int pprof_new(struct pprof **out)
{
	struct pprof *p = calloc(1, sizeof *p);
	int64_t empty;

	*out = p;
	if (!p)
		return -ENOMEM;
	if (pprof_string(p, "", &empty) < 0) {
		pprof_free(p);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

void pprof_free(struct pprof *p)
{
	if (!p)
		return;
	table_free(&p->strings, free_string);
	table_free(&p->mappings, free);
	table_free(&p->functions, free);
	table_free(&p->locations, free);
	free(p->sample_types);
	pprof_buf_free(&p->samples);
	pprof_buf_free(&p->scratch);
	pprof_buf_free(&p->label_scratch);
	free(p);
}

int pprof_string(struct pprof *p, const char *s, int64_t *index)
{
	struct str_entry key = { .s = (char *)(uintptr_t)(s ? s : "") }, *e, **found;
	uint64_t id;
	char *copy;

	found = tfind(&key, &p->strings.root, cmp_string);
	if (found) {
		*index = (*found)->index;
		return 0;
	}
	copy = strdup(key.s);
	if (!copy)
		return -ENOMEM;
	key.s = copy;
	key.index = (int64_t)p->strings.n;
	e = intern(&p->strings, &key, sizeof key, &id, cmp_string);
	if (!e) {
		free(copy);
		return -ENOMEM;
	}
	*index = e->index;
	return 0;
}

int pprof_sample_type(struct pprof *p, const char *type, const char *unit)
{
	int64_t t, u;
	uint64_t *v;

	if (p->nsamples || p->nsample_types == PPROF_MAX_SAMPLE_TYPES)
		return -EINVAL;
	if (pprof_string(p, type, &t) < 0 || pprof_string(p, unit, &u) < 0)
		return -ENOMEM;
	v = reallocarray(p->sample_types, 2 * (p->nsample_types + 1), sizeof *v);
	if (!v)
		return -ENOMEM;
	p->sample_types = v;
	v[2 * p->nsample_types] = (uint64_t)t;
	v[2 * p->nsample_types + 1] = (uint64_t)u;
	p->nsample_types++;
	return 0;
}

void pprof_set_time(struct pprof *p, int64_t time_ns, int64_t duration_ns)
{
	p->time_ns = time_ns;
	p->duration_ns = duration_ns;
}

int pprof_set_period(struct pprof *p, const char *period_type, const char *period_unit,
                     int64_t period)
{
	if (pprof_string(p, period_type, &p->period_type) < 0 ||
	    pprof_string(p, period_unit, &p->period_unit) < 0)
		return -ENOMEM;
	p->period = period;
	return 0;
}

int pprof_mapping(struct pprof *p, const struct pprof_mapping *m, uint64_t *id)
{
	struct mapping_entry key = {
		.start = m->memory_start, .limit = m->memory_limit, .offset = m->file_offset,
		.has_functions = m->has_functions, .has_filenames = m->has_filenames,
		.has_line_numbers = m->has_line_numbers,
	}, *e;
	int64_t file, build_id;

	if (pprof_string(p, m->filename, &file) < 0 || pprof_string(p, m->build_id, &build_id) < 0)
		return -ENOMEM;
	key.filename = (uint64_t)file;
	key.build_id = (uint64_t)build_id;
	if (!(e = intern(&p->mappings, &key, sizeof key, &key.id, cmp_mapping)))
		return -ENOMEM;
	e->has_functions |= m->has_functions;
	e->has_filenames |= m->has_filenames;
	e->has_line_numbers |= m->has_line_numbers;
	*id = e->id;
	return 0;
}

int pprof_function(struct pprof *p, const struct pprof_function *f, uint64_t *id)
{
	struct function_entry key = { .start_line = (uint64_t)f->start_line }, *e;
	int64_t name, system_name, file;

	if (pprof_string(p, f->name, &name) < 0 ||
	    pprof_string(p, f->system_name, &system_name) < 0 ||
	    pprof_string(p, f->filename, &file) < 0)
		return -ENOMEM;
	key.name = (uint64_t)name;
	key.system_name = (uint64_t)system_name;
	key.filename = (uint64_t)file;
	if (!(e = intern(&p->functions, &key, sizeof key, &key.id, cmp_function)))
		return -ENOMEM;
	*id = e->id;
	return 0;
}

int pprof_location(struct pprof *p, uint64_t mapping_id, uint64_t address,
                   uint64_t function_id, int64_t line, uint64_t *id)
{
	struct location_entry key = {
		.mapping = mapping_id, .address = address, .function = function_id,
		.line = (uint64_t)line,
	}, *e = intern(&p->locations, &key, sizeof key, &key.id, cmp_location);
	struct mapping_entry *m;

	if (!e)
		return -ENOMEM;
	if (mapping_id && mapping_id <= p->mappings.n) {
		m = p->mappings.items[mapping_id - 1];
		if (!m->located || address > m->max_address)
			m->max_address = address;
		m->located = true;
	}
	*id = e->id;
	return 0;
}

int pprof_sample(struct pprof *p, const uint64_t *locs, size_t nlocs, const int64_t *values,
                 const struct pprof_label *labels, size_t nlabels)
{
	struct pprof_buf *s = &p->scratch, *label = &p->label_scratch;
	uint64_t v[PPROF_MAX_SAMPLE_TYPES];

	s->len = 0;
	pprof_put_packed(s, SAMPLE_LOCATION_ID, locs, nlocs);
	/* int64 values as their two's complement, packed. */
	for (size_t i = 0; i < p->nsample_types; i++)
		v[i] = (uint64_t)values[i];
	pprof_put_packed(s, SAMPLE_VALUE, v, p->nsample_types);
	for (size_t i = 0; i < nlabels; i++) {
		int64_t key, str = 0;

		if (pprof_string(p, labels[i].key, &key) < 0 ||
		    (labels[i].str && pprof_string(p, labels[i].str, &str) < 0))
			return -ENOMEM;
		label->len = 0;
		pprof_put_uint(label, LABEL_KEY, (uint64_t)key);
		pprof_put_uint(label, LABEL_STR, (uint64_t)str);
		if (!labels[i].str)
			pprof_put_uint(label, LABEL_NUM, (uint64_t)labels[i].num);
		put_message(s, SAMPLE_LABEL, label);
	}
	put_message(&p->samples, PROFILE_SAMPLE, s);
	if (p->samples.oom)
		return -ENOMEM;
	p->nsamples++;
	return 0;
}

/* ---- The encoding ---- */

static void put_value_type(struct pprof_buf *out, struct pprof_buf *m, uint32_t field,
                           uint64_t type, uint64_t unit)
{
	m->len = 0;
	pprof_put_uint(m, VALUE_TYPE_TYPE, type);
	pprof_put_uint(m, VALUE_TYPE_UNIT, unit);
	put_message(out, field, m);
}

static void put_mapping(struct pprof_buf *out, struct pprof_buf *m, const struct mapping_entry *e)
{
	m->len = 0;
	pprof_put_uint(m, MAPPING_ID, e->id);
	pprof_put_uint(m, MAPPING_MEMORY_START, e->start);
	pprof_put_uint(m, MAPPING_MEMORY_LIMIT,
	               e->limit || !e->located ? e->limit : e->max_address + 1);
	pprof_put_uint(m, MAPPING_FILE_OFFSET, e->offset);
	pprof_put_uint(m, MAPPING_FILENAME, e->filename);
	pprof_put_uint(m, MAPPING_BUILD_ID, e->build_id);
	pprof_put_uint(m, MAPPING_HAS_FUNCTIONS, e->has_functions);
	pprof_put_uint(m, MAPPING_HAS_FILENAMES, e->has_filenames);
	pprof_put_uint(m, MAPPING_HAS_LINE_NUMBERS, e->has_line_numbers);
	put_message(out, PROFILE_MAPPING, m);
}

static void put_location(struct pprof_buf *out, struct pprof_buf *m, struct pprof_buf *line,
                         const struct location_entry *e)
{
	m->len = 0;
	pprof_put_uint(m, LOCATION_ID, e->id);
	pprof_put_uint(m, LOCATION_MAPPING_ID, e->mapping);
	pprof_put_uint(m, LOCATION_ADDRESS, e->address);
	if (e->function) {
		line->len = 0;
		pprof_put_uint(line, LINE_FUNCTION_ID, e->function);
		pprof_put_uint(line, LINE_LINE, e->line);
		put_message(m, LOCATION_LINE, line);
	}
	put_message(out, PROFILE_LOCATION, m);
}

static void put_function(struct pprof_buf *out, struct pprof_buf *m,
                         const struct function_entry *e)
{
	m->len = 0;
	pprof_put_uint(m, FUNCTION_ID, e->id);
	pprof_put_uint(m, FUNCTION_NAME, e->name);
	pprof_put_uint(m, FUNCTION_SYSTEM_NAME, e->system_name);
	pprof_put_uint(m, FUNCTION_FILENAME, e->filename);
	pprof_put_uint(m, FUNCTION_START_LINE, e->start_line);
	put_message(out, PROFILE_FUNCTION, m);
}

int pprof_encode(const struct pprof *p, struct pprof_buf *out)
{
	struct pprof_buf m = { 0 }, line = { 0 };
	bool oom;

	out->len = 0;
	out->oom = false;
	for (size_t i = 0; i < p->nsample_types; i++)
		put_value_type(out, &m, PROFILE_SAMPLE_TYPE, p->sample_types[2 * i],
		               p->sample_types[2 * i + 1]);
	if (p->samples.oom)
		out->oom = true;
	put_raw(out, p->samples.data, p->samples.len);
	for (size_t i = 0; i < p->mappings.n; i++)
		put_mapping(out, &m, p->mappings.items[i]);
	for (size_t i = 0; i < p->locations.n; i++)
		put_location(out, &m, &line, p->locations.items[i]);
	for (size_t i = 0; i < p->functions.n; i++)
		put_function(out, &m, p->functions.items[i]);
	for (size_t i = 0; i < p->strings.n; i++) {
		const char *s = ((const struct str_entry *)p->strings.items[i])->s;

		pprof_put_bytes(out, PROFILE_STRING_TABLE, s, strlen(s));
	}
	pprof_put_uint(out, PROFILE_TIME_NANOS, (uint64_t)p->time_ns);
	pprof_put_uint(out, PROFILE_DURATION_NANOS, (uint64_t)p->duration_ns);
	if (p->period_type || p->period_unit)
		put_value_type(out, &m, PROFILE_PERIOD_TYPE, (uint64_t)p->period_type,
		               (uint64_t)p->period_unit);
	pprof_put_uint(out, PROFILE_PERIOD, (uint64_t)p->period);
	oom = out->oom || m.oom || line.oom;
	pprof_buf_free(&m);
	pprof_buf_free(&line);
	if (oom) {
		pprof_buf_free(out);
		return -ENOMEM;
	}
	return 0;
}

int pprof_gzip(const void *in, size_t len, struct pprof_buf *out)
{
	z_stream z = { 0 };
	int rc;

	pprof_buf_free(out);
	if (len > UINT32_MAX)
		return -ENOMEM;   /* more than one deflate call takes */
	/* 15 + 16: a 32 KiB window with a gzip header and trailer, which
	 * zlib writes with no name and a time of 0: the same bytes for the
	 * same profile. */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	out->cap = deflateBound(&z, (uLong)len);
	out->data = malloc(out->cap);
	if (!out->data) {
		deflateEnd(&z);
		pprof_buf_free(out);
		return -ENOMEM;
	}
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)len;
	z.next_out = out->data;
	z.avail_out = (uInt)out->cap;
	/* deflateBound leaves room for all of it: one call finishes. */
	rc = deflate(&z, Z_FINISH);
	out->len = out->cap - z.avail_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		pprof_buf_free(out);
		return -ENOMEM;
	}
	return 0;
}
