/* pprof: the hand-written protobuf encoding of profile.proto, byte for
 * byte -- varints, keys, strings, packed fields, a whole empty profile and
 * a profile with one sample -- the interning of its tables, and the gzip
 * wrapper (inflated back). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <cmocka.h>

#include "cpumond/pprof.h"

/* B holds exactly the N bytes of WANT. */
static void expect_bytes(const struct pprof_buf *b, const uint8_t *want, size_t n)
{
	assert_false(b->oom);
	if (b->len != n) {
		for (size_t i = 0; i < b->len; i++)
			fprintf(stderr, "%02x%s", b->data[i], i + 1 < b->len ? " " : "\n");
	}
	assert_int_equal(b->len, n);
	if (n)
		assert_memory_equal(b->data, want, n);
}

#define EXPECT(b, ...)                                                  \
	do {                                                            \
		static const uint8_t want_[] = { __VA_ARGS__ };         \
		expect_bytes((b), want_, sizeof want_);                 \
	} while (0)

static void varint_of(uint64_t v, struct pprof_buf *b)
{
	b->len = 0;
	pprof_put_varint(b, v);
}

static void test_varint(void **state)
{
	struct pprof_buf b = { 0 };
	(void)state;

	varint_of(0, &b);
	EXPECT(&b, 0x00);
	varint_of(1, &b);
	EXPECT(&b, 0x01);
	varint_of(127, &b);
	EXPECT(&b, 0x7f);
	varint_of(128, &b);
	EXPECT(&b, 0x80, 0x01);
	varint_of(300, &b);
	EXPECT(&b, 0xac, 0x02);
	varint_of(50000000, &b);
	EXPECT(&b, 0x80, 0xe1, 0xeb, 0x17);
	varint_of(UINT64_MAX, &b);
	EXPECT(&b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01);
	pprof_buf_free(&b);
}

static void test_fields(void **state)
{
	struct pprof_buf b = { 0 };
	const uint64_t packed[] = { 1, 300 };
	(void)state;

	/* A 0 is left out, as proto3 does. */
	pprof_put_uint(&b, 1, 0);
	assert_int_equal(b.len, 0);
	pprof_put_uint(&b, 2, 150);
	EXPECT(&b, 0x10, 0x96, 0x01);
	/* Field 16 needs a two-byte key. */
	b.len = 0;
	pprof_put_uint(&b, 16, 1);
	EXPECT(&b, 0x80, 0x01, 0x01);
	/* An int64 -1 is ten bytes of two's complement. */
	b.len = 0;
	pprof_put_uint(&b, 2, (uint64_t)(int64_t)-1);
	EXPECT(&b, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01);
	/* Strings, the empty one too. */
	b.len = 0;
	pprof_put_bytes(&b, 6, "", 0);
	pprof_put_bytes(&b, 6, "ab", 2);
	EXPECT(&b, 0x32, 0x00, 0x32, 0x02, 'a', 'b');
	/* Packed varints: one key, the length of all, the values. */
	b.len = 0;
	pprof_put_packed(&b, 1, packed, 2);
	pprof_put_packed(&b, 2, packed, 0);
	EXPECT(&b, 0x0a, 0x03, 0x01, 0xac, 0x02);
	pprof_buf_free(&b);
}

static struct pprof *new_profile(void)
{
	struct pprof *p;

	assert_int_equal(pprof_new(&p), 0);
	assert_non_null(p);
	return p;
}

/* What `cpumond report --pprof` writes for an empty window. */
static void test_empty_profile(void **state)
{
	struct pprof *p = new_profile();
	struct pprof_buf b = { 0 };
	(void)state;

	assert_int_equal(pprof_sample_type(p, "samples", "count"), 0);
	assert_int_equal(pprof_sample_type(p, "cpu", "nanoseconds"), 0);
	assert_int_equal(pprof_set_period(p, "cpu", "nanoseconds", 50000000), 0);
	assert_int_equal(pprof_encode(p, &b), 0);
	EXPECT(&b,
	       /* sample_type {type 1 unit 2}, {type 3 unit 4} */
	       0x0a, 0x04, 0x08, 0x01, 0x10, 0x02,
	       0x0a, 0x04, 0x08, 0x03, 0x10, 0x04,
	       /* string_table: "", samples, count, cpu, nanoseconds */
	       0x32, 0x00,
	       0x32, 0x07, 's', 'a', 'm', 'p', 'l', 'e', 's',
	       0x32, 0x05, 'c', 'o', 'u', 'n', 't',
	       0x32, 0x03, 'c', 'p', 'u',
	       0x32, 0x0b, 'n', 'a', 'n', 'o', 's', 'e', 'c', 'o', 'n', 'd', 's',
	       /* period_type {type 3 unit 4}, period 50 ms */
	       0x5a, 0x04, 0x08, 0x03, 0x10, 0x04,
	       0x60, 0x80, 0xe1, 0xeb, 0x17);
	pprof_buf_free(&b);
	pprof_free(p);
}

static void test_one_sample(void **state)
{
	struct pprof *p = new_profile();
	struct pprof_buf b = { 0 };
	const struct pprof_mapping m = { .filename = "/bin/a", .build_id = "ab12",
	                                 .has_functions = true };
	const struct pprof_function f = { .name = "f", .system_name = "f", .start_line = 2 };
	const struct pprof_label labels[] = { { "tid", NULL, 7 }, { "thread", "t", 0 } };
	const int64_t value = 5;
	uint64_t mid, fid, lid, again;
	(void)state;

	assert_int_equal(pprof_sample_type(p, "samples", "count"), 0);
	assert_int_equal(pprof_mapping(p, &m, &mid), 0);
	assert_int_equal(pprof_function(p, &f, &fid), 0);
	assert_int_equal(pprof_location(p, mid, 0x10, fid, 3, &lid), 0);
	assert_int_equal(mid, 1);
	assert_int_equal(fid, 1);
	assert_int_equal(lid, 1);
	/* Interned: the same one again is the same id. */
	assert_int_equal(pprof_function(p, &f, &again), 0);
	assert_int_equal(again, fid);
	assert_int_equal(pprof_location(p, mid, 0x10, fid, 3, &again), 0);
	assert_int_equal(again, lid);
	assert_int_equal(pprof_sample(p, &lid, 1, &value, labels, 2), 0);
	/* No sample type once there are samples. */
	assert_int_equal(pprof_sample_type(p, "cpu", "nanoseconds"), -EINVAL);
	pprof_set_time(p, 1000, 2000);
	assert_int_equal(pprof_encode(p, &b), 0);
	EXPECT(&b,
	       /* sample_type {type 1 unit 2} */
	       0x0a, 0x04, 0x08, 0x01, 0x10, 0x02,
	       /* sample {location_id [1], value [5], label {key 6 num 7},
	        * label {key 7 str 8}} */
	       0x12, 0x12, 0x0a, 0x01, 0x01, 0x12, 0x01, 0x05,
	       0x1a, 0x04, 0x08, 0x06, 0x18, 0x07,
	       0x1a, 0x04, 0x08, 0x07, 0x10, 0x08,
	       /* mapping {id 1, memory_limit 0x11 (one past its highest
	        * location), filename 3, build_id 4, has_functions} */
	       0x1a, 0x0a, 0x08, 0x01, 0x18, 0x11, 0x28, 0x03, 0x30, 0x04, 0x38, 0x01,
	       /* location {id 1, mapping_id 1, address 0x10,
	        * line {function_id 1, line 3}} */
	       0x22, 0x0c, 0x08, 0x01, 0x10, 0x01, 0x18, 0x10, 0x22, 0x04, 0x08, 0x01, 0x10, 0x03,
	       /* function {id 1, name 5, system_name 5, start_line 2} */
	       0x2a, 0x08, 0x08, 0x01, 0x10, 0x05, 0x18, 0x05, 0x28, 0x02,
	       /* string_table */
	       0x32, 0x00,
	       0x32, 0x07, 's', 'a', 'm', 'p', 'l', 'e', 's',
	       0x32, 0x05, 'c', 'o', 'u', 'n', 't',
	       0x32, 0x06, '/', 'b', 'i', 'n', '/', 'a',
	       0x32, 0x04, 'a', 'b', '1', '2',
	       0x32, 0x01, 'f',
	       0x32, 0x03, 't', 'i', 'd',
	       0x32, 0x06, 't', 'h', 'r', 'e', 'a', 'd',
	       0x32, 0x01, 't',
	       /* time_nanos 1000, duration_nanos 2000 */
	       0x48, 0xe8, 0x07, 0x50, 0xd0, 0x0f);
	pprof_buf_free(&b);
	pprof_free(p);
}

static void test_interning(void **state)
{
	struct pprof *p = new_profile();
	struct pprof_mapping m = { .filename = "/lib/x.so", .build_id = "cd" };
	const struct pprof_function f = { .name = "g" }, other = { .name = "g", .filename = "g.c" };
	int64_t a, b;
	uint64_t id1, id2;
	(void)state;

	assert_int_equal(pprof_string(p, NULL, &a), 0);
	assert_int_equal(a, 0);
	assert_int_equal(pprof_string(p, "x", &a), 0);
	assert_int_equal(pprof_string(p, "y", &b), 0);
	assert_int_equal(a, 1);
	assert_int_equal(b, 2);
	assert_int_equal(pprof_string(p, "x", &b), 0);
	assert_int_equal(b, 1);
	/* A function differs by any of its fields. */
	assert_int_equal(pprof_function(p, &f, &id1), 0);
	assert_int_equal(pprof_function(p, &other, &id2), 0);
	assert_int_not_equal(id1, id2);
	/* A mapping's flags add up; a location differs by its line. */
	assert_int_equal(pprof_mapping(p, &m, &id1), 0);
	m.has_functions = true;
	assert_int_equal(pprof_mapping(p, &m, &id2), 0);
	assert_int_equal(id1, id2);
	assert_int_equal(pprof_location(p, id1, 0, 1, 3, &id1), 0);
	assert_int_equal(pprof_location(p, 1, 0, 1, 4, &id2), 0);
	assert_int_equal(id1, 1);
	assert_int_equal(id2, 2);
	pprof_free(p);
	pprof_free(NULL);
}

static void test_gzip(void **state)
{
	static const char text[] = "profile bytes profile bytes profile bytes";
	struct pprof_buf gz = { 0 };
	char back[128];
	z_stream z = { 0 };
	(void)state;

	assert_int_equal(pprof_gzip(text, sizeof text, &gz), 0);
	/* RFC 1952: magic 1f 8b, deflate (8), no flags, time 0. */
	assert_true(gz.len > 10);
	assert_memory_equal(gz.data, "\x1f\x8b\x08\x00\x00\x00\x00\x00", 8);
	assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = gz.data;
	z.avail_in = (uInt)gz.len;
	z.next_out = (Bytef *)back;
	z.avail_out = sizeof back;
	assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
	assert_int_equal(z.total_out, sizeof text);
	assert_memory_equal(back, text, sizeof text);
	inflateEnd(&z);
	/* Nothing gzips too. */
	assert_int_equal(pprof_gzip("", 0, &gz), 0);
	assert_true(gz.len >= 20);
	pprof_buf_free(&gz);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varint),
		cmocka_unit_test(test_fields),
		cmocka_unit_test(test_empty_profile),
		cmocka_unit_test(test_one_sample),
		cmocka_unit_test(test_interning),
		cmocka_unit_test(test_gzip),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("pprof", tests, NULL, NULL);
}
