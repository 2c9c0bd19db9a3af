//! Every listed type through a parameter and back from a column, NULL included,
//! and the calendar types against the server's own text.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use neverblock_pg::types::{Date, Timestamp, ToSql, Uuid};
use neverblock_pg::{Connection, Error, Row};

use crate::support::{admin, run};

/// Sends `value` as a `$1::ty` parameter and reads it back.
fn echo<T>(conn: &mut Connection, ty: &str, value: T) -> T
where
    T: ToSql + for<'a> neverblock_pg::types::FromSql<'a>,
{
    let row = conn.query_one(&format!("select $1::{ty}"), &[&value]).unwrap();
    row.try_get::<T>(0).unwrap_or_else(|e| panic!("{ty}: {e}"))
}

#[test]
fn every_type_round_trips_and_null_reads_as_none() {
    run(|| {
        let mut conn = admin();
        assert!(echo(&mut conn, "bool", true));
        assert_eq!(echo(&mut conn, "int2", i16::MIN), i16::MIN);
        assert_eq!(echo(&mut conn, "int4", i32::MAX), i32::MAX);
        assert_eq!(echo(&mut conn, "int8", -1i64 << 60), -1i64 << 60);
        assert_eq!(echo(&mut conn, "float4", 0.1f32), 0.1);
        assert_eq!(echo(&mut conn, "float8", 1e300f64), 1e300);
        assert_eq!(echo(&mut conn, "text", "ünïcode ✓".to_string()), "ünïcode ✓");
        assert_eq!(echo(&mut conn, "varchar", "v".to_string()), "v");
        assert_eq!(echo(&mut conn, "bytea", vec![0u8, 1, 254, 255]), [0, 1, 254, 255]);
        let day = Date::from_ymd(1969, 7, 20).unwrap();
        assert_eq!(echo(&mut conn, "date", day), day);
        let at = Timestamp::new(day, 20, 17, 40, 123_456).unwrap();
        assert_eq!(echo(&mut conn, "timestamp", at), at);
        let instant = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(echo(&mut conn, "timestamptz", instant), instant);
        let id: Uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".parse().unwrap();
        assert_eq!(echo(&mut conn, "uuid", id), id);
        assert_eq!(
            echo(&mut conn, "numeric", "12345678901234567890.000001".to_string()),
            "12345678901234567890.000001"
        );
        assert_eq!(echo(&mut conn, "json", r#"{"a": [1, 2]}"#.to_string()), r#"{"a": [1, 2]}"#);
        assert_eq!(echo(&mut conn, "jsonb", r#"{"b":1,   "a":2}"#.to_string()), r#"{"a": 2, "b": 1}"#);

        // Each type's NULL, read as `None` of the type that reads its values.
        fn null<T: for<'a> neverblock_pg::types::FromSql<'a>>(row: &Row) -> Result<bool, Error> {
            row.try_get::<Option<T>>(0).map(|value| value.is_none())
        }
        type ReadsNull = fn(&Row) -> Result<bool, Error>;
        let readers: [(&str, ReadsNull); 16] = [
            ("bool", null::<bool>),
            ("int2", null::<i16>),
            ("int4", null::<i32>),
            ("int8", null::<i64>),
            ("float4", null::<f32>),
            ("float8", null::<f64>),
            ("numeric", null::<String>),
            ("text", null::<String>),
            ("varchar", null::<String>),
            ("bytea", null::<Vec<u8>>),
            ("date", null::<Date>),
            ("timestamp", null::<Timestamp>),
            ("timestamptz", null::<SystemTime>),
            ("uuid", null::<Uuid>),
            ("json", null::<String>),
            ("jsonb", null::<String>),
        ];
        for (ty, read) in readers {
            let row = conn.query_one(&format!("select null::{ty}"), &[]).unwrap();
            assert!(matches!(read(&row), Ok(true)), "{ty}: {:?}", read(&row));
            let err = row.try_get::<i64>(0).unwrap_err();
            assert!(matches!(err, Error::Column(_)), "{ty}: {err}");
        }
        assert_eq!(echo(&mut conn, "int4", None::<i32>), None);
        assert_eq!(echo(&mut conn, "timestamptz", None::<SystemTime>), None);
        assert_eq!(echo(&mut conn, "uuid", Some(id)), Some(id));
    });
}

#[test]
fn dates_and_timestamps_print_as_the_server_prints_them() {
    run(|| {
        let mut conn = admin();
        for text in
            ["2024-02-29", "1999-12-31", "0001-01-01", "0044-03-15 BC", "5874897-12-31", "infinity", "-infinity"]
        {
            let row = conn.query_one("select $1::date, $1::date::text", &[&text]).unwrap();
            assert_eq!(row.get::<Date>(0).to_string(), row.get::<String>(1), "{text}");
        }
        for text in
            ["2000-01-01 00:00:00", "1970-01-01 00:00:00.000001", "1899-12-31 23:59:59.5", "2262-04-11 23:47:16.854775"]
        {
            let row = conn.query_one("select $1::timestamp, $1::timestamp::text", &[&text]).unwrap();
            assert_eq!(row.get::<Timestamp>(0).to_string(), row.get::<String>(1), "{text}");
        }
        let row = conn.query_one("select now(), extract(epoch from now())::float8", &[]).unwrap();
        let (now, epoch): (SystemTime, f64) = (row.get(0), row.get(1));
        let ours = now.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((ours - epoch).abs() < 1e-5, "{ours} vs {epoch}");
        let row = conn.query_one("select gen_random_uuid() as id", &[]).unwrap();
        let id: Uuid = row.get("id");
        let text: String = conn.query_one("select $1::uuid::text", &[&id]).unwrap().get(0);
        assert_eq!(id.to_string(), text);
    });
}

#[test]
fn numbers_and_text_cross_as_the_types_allow() {
    run(|| {
        let mut conn = admin();
        let row = conn.query_one("select $1::numeric + 1, $2::int8, 3::int2", &[&"1.5", &7i32]).unwrap();
        assert_eq!(row.get::<String>(0), "2.5", "numeric in and out as text");
        assert_eq!(row.get::<i64>(1), 7, "an i32 widened to int8");
        assert_eq!(row.get::<i64>(2), 3, "an int2 read as i64");
        let err = row.try_get::<String>(1).unwrap_err();
        assert!(err.to_string().contains("cannot be read as"), "an int8 is not text: {err}");
        assert!(row.try_get::<i16>(1).is_err(), "never narrowed");
    });
}
