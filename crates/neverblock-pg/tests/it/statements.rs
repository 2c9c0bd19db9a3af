//! The prepared-statement cache: a query text is prepared once per connection,
//! the cache is bounded by count and by bytes of text, and it can be turned off.

use neverblock_pg::Pool;

use crate::support::{admin, config, postgres, prepared_statements, run, unique};

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

/// A text of about `kib` KiB that selects `n`.
fn long_select(n: i32, kib: usize) -> String {
    format!("select {n}::int4 as n -- {}", "x".repeat(kib * 1024))
}

#[test]
fn the_byte_bound_closes_long_texts_however_few() {
    run(|| {
        let mut conn = admin();
        for n in 0..12 {
            assert_eq!(conn.query_one(&long_select(n, 200), &[]).unwrap().get::<i32>(0), n);
        }
        // 1 MiB holds five texts of 200 KiB; the count query is prepared too.
        let total = prepared_statements(&mut conn);
        assert!((2..=6).contains(&total), "{total} statements prepared on the server");
        // Closes queued in front of a simple query: its reply skips their CloseComplete.
        for n in 12..20 {
            conn.prepare(&long_select(n, 200)).unwrap();
        }
        conn.batch_execute("select 1").unwrap();
        assert!(prepared_statements(&mut conn) <= 6);
    });
}

#[test]
fn a_text_longer_than_the_byte_bound_runs_unnamed_and_is_never_kept() {
    run(|| {
        let mut conn = admin();
        let before = prepared_statements(&mut conn);
        let huge = long_select(7, 1100);
        for _ in 0..2 {
            assert_eq!(conn.query_one(&huge, &[]).unwrap().get::<i32>(0), 7);
        }
        assert_eq!(prepared_statements(&mut conn), before);
    });
}

#[test]
fn a_pipeline_runs_statements_the_cache_gave_up_while_it_was_queued() {
    run(|| {
        let mut conn = admin();
        let mut batch = conn.pipeline();
        for n in 0..8 {
            batch.query(&long_select(n, 300), &[]).unwrap();
        }
        let results = batch.run().unwrap();
        let got: Vec<i32> = results.iter().map(|r| r.as_ref().unwrap()[0].get(0)).collect();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        assert!(prepared_statements(&mut conn) <= 4, "what was given up is closed after the batch");
    });
}

/// The server over TCP, by URL, with the statement cache off.
fn uncached_url() -> String {
    format!("{}?statement_cache_capacity=0", postgres().url())
}

#[test]
fn with_the_cache_off_nothing_stays_prepared_and_everything_still_runs() {
    run(|| {
        let mut conn = neverblock_pg::connect(&uncached_url()).unwrap();
        let table = unique("uncached");
        conn.batch_execute(&format!("create temp table {table} (id int4 primary key, name text)")).unwrap();
        let insert = format!("insert into {table} values ($1, $2)");
        for _ in 0..2 {
            let mut tx = conn.transaction().unwrap();
            tx.execute(&insert, &[&1i32, &"one"]).unwrap();
            tx.execute(&insert, &[&2i32, &"two"]).unwrap();
            tx.rollback().unwrap();
        }
        let mut tx = conn.transaction().unwrap();
        tx.execute(&insert, &[&1i32, &"one"]).unwrap();
        tx.commit().unwrap();
        assert_eq!(conn.execute(&insert, &[&1i32, &"again"]).unwrap_err().code(), Some("23505"));
        assert_eq!(conn.query("selec 1", &[]).unwrap_err().code(), Some("42601"));
        assert_eq!(conn.query("select 1/$1::int4", &[&0i32]).unwrap_err().code(), Some("22012"));
        assert!(matches!(conn.query("select $1::int4", &[]), Err(neverblock_pg::Error::Param(_))));
        let select = format!("select name from {table} where id = $1");
        assert_eq!(conn.query_one(&select, &[&1i32]).unwrap().get::<&str>(0), "one");
        assert_eq!(conn.prepare(&select).unwrap().params(), [neverblock_pg::types::Type::INT4]);
        let mut batch = conn.pipeline();
        for i in 0..5i32 {
            batch.query("select $1::int4 * 3", &[&i]).unwrap();
        }
        let tripled: Vec<i32> = batch.run().unwrap().iter().map(|r| r.as_ref().unwrap()[0].get(0)).collect();
        assert_eq!(tripled, [0, 3, 6, 9, 12]);
        assert_eq!(prepared_statements(&mut conn), 0, "no named statement on the server");
    });
}

#[test]
fn with_the_cache_off_rows_are_read_with_the_portals_description() {
    run(|| {
        let mut conn = neverblock_pg::connect(&uncached_url()).unwrap();
        let table = unique("reshaped_unnamed");
        conn.batch_execute(&format!("create temp table {table} (a int4, c int4); insert into {table} values (1, 3)"))
            .unwrap();
        let select = format!("select * from {table}");
        assert_eq!(conn.query_one(&select, &[]).unwrap().get::<i32>(0), 1);
        conn.batch_execute(&format!("alter table {table} alter column a type int8")).unwrap();
        let row = conn.query_one(&select, &[]).unwrap();
        assert_eq!((row.columns()[0].type_(), row.get::<i64>(0)), (neverblock_pg::types::Type::INT8, 1), "at once");
        conn.batch_execute(&format!("alter table {table} add column b text default 'b'")).unwrap();
        let first = conn.query_one(&select, &[]);
        let err = first.expect_err("two result formats were bound for three columns");
        assert_eq!(err.code(), Some("08P01"), "{err}");
        let row = conn.query_one(&select, &[]).unwrap();
        assert_eq!((row.get::<i64>(0), row.get::<i32>(1), row.get::<&str>(2)), (1, 3, "b"), "described again");

        // The column is now one this crate reads in text: the first run gets it in the binary
        // format bound for the old type, and the next run asks for the new type's own format.
        let one = format!("select a from {table}");
        conn.query_one(&one, &[]).unwrap();
        conn.batch_execute(&format!(
            "alter table {table} rename column a to z; alter table {table} add column a numeric default 2.5"
        ))
        .unwrap();
        conn.query_one(&one, &[]).unwrap();
        let row = conn.query_one(&one, &[]).unwrap();
        assert_eq!(row.get::<String>(0), "2.5", "numeric in text, as the crate reads it");
    });
}

#[test]
fn shared_connections_keep_one_bounded_cache_or_none() {
    run(|| {
        let capped = Pool::builder(config().statement_cache_capacity(8)).max_size(1).shared(1).build();
        for n in 0..40 {
            capped.query_one(&format!("select {n}::int4"), &[]).unwrap();
        }
        let total: i64 = capped.query_one("select count(*) from pg_prepared_statements", &[]).unwrap().get(0);
        assert!((2..=9).contains(&total), "{total} statements prepared on the shared connection");

        let off = Pool::builder(config().statement_cache_capacity(0)).max_size(1).shared(1).build();
        let fibers: Vec<_> = (0..100i32)
            .map(|i| {
                let off = off.clone();
                neverblock::spawn(move || off.query_one("select $1::int4 + 1", &[&i]).map(|r| r.get::<i32>(0)))
            })
            .collect();
        let got: Vec<i32> = fibers.into_iter().map(|f| f.join().unwrap().unwrap()).collect();
        assert_eq!(got, (1..101).collect::<Vec<_>>());
        assert_eq!(off.query("select 1/0", &[]).unwrap_err().code(), Some("22012"));
        let total: i64 = off.query_one("select count(*) from pg_prepared_statements", &[]).unwrap().get(0);
        assert_eq!(total, 0, "no named statement on the shared connection");
    });
}
