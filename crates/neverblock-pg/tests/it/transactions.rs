//! Transactions: commit, rollback, drop (rolls back), a failed one never commits.

use neverblock_pg::{Error, TransactionStatus};

use crate::support::{admin, run, unique};

fn count(conn: &mut neverblock_pg::Connection, table: &str) -> i64 {
    conn.query_one(&format!("select count(*) from {table}"), &[]).unwrap().get(0)
}

#[test]
fn commit_makes_changes_visible_and_rollback_or_drop_undoes_them() {
    run(|| {
        let (mut a, mut b) = (admin(), admin());
        let table = unique("tx");
        a.batch_execute(&format!("create table {table} (n int4)")).unwrap();
        let insert = format!("insert into {table} values (1)");

        let mut tx = a.transaction().unwrap();
        tx.execute(&insert, &[]).unwrap();
        assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
        assert_eq!(count(&mut b, &table), 0, "not visible before commit");
        tx.commit().unwrap();
        assert_eq!(count(&mut b, &table), 1);

        let mut tx = a.transaction().unwrap();
        tx.execute(&insert, &[]).unwrap();
        tx.rollback().unwrap();
        assert_eq!(count(&mut a, &table), 1);

        {
            let mut tx = a.transaction().unwrap();
            tx.execute(&insert, &[]).unwrap();
        }
        assert_eq!(count(&mut a, &table), 1, "dropped uncommitted: rolled back");
        assert_eq!(a.transaction_status(), TransactionStatus::Idle);
        assert_eq!(count(&mut b, &table), 1);
        a.batch_execute(&format!("drop table {table}")).unwrap();
    });
}

#[test]
fn a_dropped_transaction_releases_its_locks_without_another_call() {
    run(|| {
        let (mut a, mut b) = (admin(), admin());
        let table = unique("locked");
        a.batch_execute(&format!("create table {table} (n int4); insert into {table} values (1)")).unwrap();
        {
            let mut tx = a.transaction().unwrap();
            tx.execute(&format!("update {table} set n = 2"), &[]).unwrap();
        }
        // The ROLLBACK went out when the transaction dropped: b's update does not wait for a's next call.
        b.batch_execute("set lock_timeout = '20s'").unwrap();
        assert_eq!(b.execute(&format!("update {table} set n = 3"), &[]).unwrap(), 1);
        assert_eq!(a.query_one(&format!("select n from {table}"), &[]).unwrap().get::<i32>(0), 3);
        a.batch_execute(&format!("drop table {table}")).unwrap();
    });
}

#[test]
fn a_failed_transaction_is_rolled_back_not_committed() {
    run(|| {
        let mut conn = admin();
        let table = unique("failed");
        conn.batch_execute(&format!("create temp table {table} (n int4)")).unwrap();
        let mut tx = conn.transaction().unwrap();
        tx.execute(&format!("insert into {table} values (1)"), &[]).unwrap();
        assert_eq!(tx.query("select 1/0", &[]).unwrap_err().code(), Some("22012"));
        assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
        assert_eq!(tx.query("select 1", &[]).unwrap_err().code(), Some("25P02"), "aborted transaction");
        assert!(matches!(tx.transaction(), Err(Error::Usage(_))), "no nested transactions");
        assert!(matches!(tx.commit(), Err(Error::Usage(_))));
        assert_eq!(count(&mut conn, &table), 0);
    });
}
