/* SQL run on a database file through a connection of the test's own,
 * beside the store's: what a test checks in the file itself.  Included by
 * test_store.c, test_store_history.c and test_report_run.c.  Include after
 * <cmocka.h>. */
#ifndef CPUMOND_TEST_SQL_FIXTURE_H
#define CPUMOND_TEST_SQL_FIXTURE_H

#include <sqlite3.h>
#include <stdint.h>

/* One integer from SQL, read-only. */
static inline int64_t q_int(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int64_t v;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	assert_int_equal(sqlite3_finalize(s), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	return v;
}

/* Runs SQL, which may hold several statements, read-write. */
static inline void q_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

#endif
