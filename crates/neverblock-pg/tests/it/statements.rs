//! The prepared-statement cache: a query text is prepared once per connection.

use crate::support::{admin, run, unique};

fn prepared_on_server(conn: &mut neverblock_pg::Connection, text: &str) -> i64 {
    conn.query_one("select count(*) from pg_prepared_statements where statement = $1", &[&text]).unwrap().get(0)
}

#[test]
fn a_query_text_is_prepared_once_per_connection() {
    run(|| {
        let mut conn = admin();
        let text =
            format!("select $1::int4 + {}", 1000 + unique("n").split('_').nth(1).unwrap().parse::<i32>().unwrap());
        for i in 0..3i32 {
            conn.query_one(&text, &[&i]).unwrap();
        }
        assert_eq!(prepared_on_server(&mut conn, &text), 1, "three runs, one statement");
        let mut other = admin();
        assert_eq!(prepared_on_server(&mut other, &text), 0, "the cache is per connection");
        other.query_one(&text, &[&1i32]).unwrap();
        assert_eq!(prepared_on_server(&mut other, &text), 1);
    });
}

#[test]
fn the_cache_closes_what_it_evicts() {
    run(|| {
        let mut conn = admin();
        for i in 0..300 {
            conn.query(&format!("select {i}"), &[]).unwrap();
        }
        let total: i64 = conn.query_one("select count(*) from pg_prepared_statements", &[]).unwrap().get(0);
        assert!(total <= 257, "{total} statements prepared on the server");
        assert!(total >= 200, "the recent ones stay: {total}");
    });
}

#[test]
fn a_statement_whose_table_changed_shape_is_prepared_again() {
    run(|| {
        let mut conn = admin();
        let table = unique("reshaped");
        conn.batch_execute(&format!("create temp table {table} (a int4); insert into {table} values (1)")).unwrap();
        let select = format!("select * from {table}");
        assert_eq!(conn.query_one(&select, &[]).unwrap().len(), 1);
        conn.batch_execute(&format!("alter table {table} add column b int4")).unwrap();
        let first = conn.query_one(&select, &[]);
        if let Err(e) = &first {
            assert_eq!(e.code(), Some("0A000"), "the stale plan: {e}");
        }
        assert_eq!(conn.query_one(&select, &[]).unwrap().len(), 2, "prepared again with the new shape");
    });
}
