//! Server errors as values (SQLSTATE, message, detail, hint, position, …), and
//! queries of the wrong shape refused before anything runs.

use neverblock_pg::Error;

use crate::support::{admin, run, unique};

#[test]
fn server_errors_carry_their_fields_and_the_connection_goes_on() {
    run(|| {
        let mut conn = admin();
        let table = unique("errs");
        conn.batch_execute(&format!("create temp table {table} (id int4 constraint {table}_pk primary key)")).unwrap();
        conn.execute(&format!("insert into {table} values (1)"), &[]).unwrap();

        let err = conn.execute(&format!("insert into {table} values ($1)"), &[&1i32]).unwrap_err();
        let db = err.as_db().expect("a server error");
        assert_eq!((db.severity.as_str(), db.code.as_str()), ("ERROR", "23505"));
        assert_eq!(db.detail.as_deref(), Some("Key (id)=(1) already exists."));
        assert_eq!(db.constraint.as_deref(), Some(format!("{table}_pk").as_str()));
        assert_eq!(db.table.as_deref(), Some(table.as_str()));

        let err = conn.query("select * from no_such_table", &[]).unwrap_err();
        assert_eq!((err.code(), err.as_db().unwrap().position), (Some("42P01"), Some(15)));

        let err = conn.query("selec 1", &[]).unwrap_err();
        assert_eq!(err.code(), Some("42601"), "syntax error, from preparing");

        let err = conn
            .batch_execute("do $$ begin raise exception 'boom' using detail = 'the detail', hint = 'the hint', errcode = 'P0001'; end $$")
            .unwrap_err();
        let db = err.as_db().unwrap();
        assert_eq!(
            (db.message.as_str(), db.detail.as_deref(), db.hint.as_deref()),
            ("boom", Some("the detail"), Some("the hint"))
        );
        assert!(db.where_.as_deref().unwrap_or_default().contains("PL/pgSQL"), "{db:?}");
        assert!(err.to_string().contains("P0001") && err.to_string().contains("the hint"), "{err}");

        assert_eq!(conn.query("select 1/0", &[]).unwrap_err().code(), Some("22012"));
        assert!(!conn.is_broken());
        assert_eq!(conn.query_one("select 2::int4", &[]).unwrap().get::<i32>(0), 2, "usable after errors");
    });
}

#[test]
fn a_query_of_the_wrong_shape_is_refused_and_nothing_runs() {
    run(|| {
        let mut conn = admin();
        let table = unique("shape");
        conn.batch_execute(&format!("create temp table {table} (n int4)")).unwrap();
        let insert = format!("insert into {table} values ($1)");

        let err = conn.execute(&insert, &[]).unwrap_err();
        assert!(matches!(&err, Error::Param(m) if m.contains("takes 1 parameter, 0 given")), "{err}");
        let err = conn.execute(&insert, &[&1i32, &2i32]).unwrap_err();
        assert!(matches!(&err, Error::Param(m) if m.contains("2 given")), "{err}");
        let err = conn.execute(&insert, &[&1i64]).unwrap_err();
        assert!(
            matches!(&err, Error::Param(m) if m.contains("$1") && m.contains("i64") && m.contains("int4")),
            "{err}"
        );
        let err = conn.execute(&insert, &[&vec![1u8]]).unwrap_err();
        assert!(matches!(err, Error::Param(_)), "{err}");
        let err = conn.execute(&insert, &[&"not a number"]).unwrap_err();
        assert_eq!(err.code(), Some("22P02"), "text the server cannot parse: {err}");

        let n: i64 = conn.query_one(&format!("select count(*) from {table}"), &[]).unwrap().get(0);
        assert_eq!(n, 0, "no insert ran");
        assert_eq!(conn.execute(&insert, &[&5i32]).unwrap(), 1);
        assert!(matches!(conn.query_one("select 1 where false", &[]), Err(Error::RowCount(0))));
        assert!(matches!(conn.query_opt("select generate_series(1, 2)", &[]), Err(Error::RowCount(2))));
    });
}

#[test]
fn a_nul_byte_in_simple_sql_is_refused_and_leaves_nothing_behind_for_the_next_query() {
    run(|| {
        let mut conn = admin();
        for _ in 0..2 {
            let err = conn.batch_execute("select 1\0").unwrap_err();
            assert!(matches!(err, Error::Param(_)), "{err}");
            let err = conn.simple_query("select '\0'").unwrap_err();
            assert!(matches!(err, Error::Param(_)), "{err}");
        }
        assert_eq!(conn.query_one("select 2::int4", &[]).unwrap().get::<i32>(0), 2, "the session goes on");
        let mut tx = conn.transaction().unwrap();
        assert!(matches!(tx.batch_execute("select 3\0"), Err(Error::Param(_))));
        assert_eq!(tx.query_one("select 4::int4", &[]).unwrap().get::<i32>(0), 4);
        tx.commit().unwrap();
        assert!(!conn.is_broken());
    });
}
