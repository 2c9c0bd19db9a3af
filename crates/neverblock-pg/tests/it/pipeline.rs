//! Pipelines: many queries sent at once, results in order, a failure kept to its own query.

use crate::support::{admin, run};

#[test]
fn pipelined_queries_answer_in_order_and_a_failure_stays_in_its_place() {
    run(|| {
        let mut conn = admin();
        let mut batch = conn.pipeline();
        for i in 0..50i32 {
            batch.query("select $1::int4 * 2", &[&i]).unwrap();
            if i == 25 {
                batch.query("select 1/$1::int4", &[&0i32]).unwrap();
            }
        }
        assert_eq!(batch.len(), 51);
        let results = batch.run().unwrap();
        let mut doubled = Vec::new();
        for (i, result) in results.iter().enumerate() {
            match result {
                Ok(rows) => doubled.push(rows[0].get::<i32>(0)),
                Err(e) => assert_eq!((i, e.code()), (26, Some("22012"))),
            }
        }
        assert_eq!(doubled, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(conn.query_one("select 'after'::text", &[]).unwrap().get::<&str>(0), "after");
    });
}

#[test]
fn a_pipeline_refuses_a_query_of_the_wrong_shape_before_sending() {
    run(|| {
        let mut conn = admin();
        let mut batch = conn.pipeline();
        batch.query("select $1::int4", &[&1i32]).unwrap();
        assert!(batch.query("select $1::int4", &[]).is_err());
        assert_eq!(batch.len(), 1);
        let results = batch.run().unwrap();
        assert_eq!(results.len(), 1);
    });
}
