use super::*;
use crate::statement::Statement;

/// Prepares `sql` under a new name and keeps it: the names of the statements given up for it.
fn add(cache: &mut Cache, sql: &str) -> Vec<String> {
    let stmt = Statement::new(cache.next_name(), sql, Vec::new(), Arc::from([]));
    cache.insert(stmt).iter().map(|s| s.name().to_owned()).collect()
}

fn unnamed(sql: &str) -> Statement {
    Statement::new(String::new(), sql, Vec::new(), Arc::from([]))
}

/// Inserts each text in turn (statements `t1`, `t2`, …), using the `busy` ones
/// after each insert; then compares the texts still held, and the names of the
/// statements given up in order, with what is expected.
fn check(capacity: usize, texts: &[&str], busy: &[&str], expect_kept: &[&str], expect_gone: &[&str]) {
    let mut cache = Cache::new(capacity, "t");
    let mut gone = Vec::new();
    for text in texts {
        gone.extend(add(&mut cache, text));
        for used in busy {
            cache.get(used);
        }
    }
    let mut kept: Vec<&str> = texts.iter().copied().filter(|t| cache.get(t).is_some()).collect();
    kept.dedup();
    let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
    assert_eq!((kept, gone), (expect_kept.to_vec(), expect_gone.to_vec()));
}

#[test]
fn the_count_bound_gives_up_the_least_recently_used() {
    check(2, &["a", "b", "c"], &[], &["b", "c"], &["t1"]);
    check(2, &["a", "b", "c"], &["a"], &["a", "c"], &["t2"]);
    check(1, &["a", "a"], &[], &["a"], &["t1"]);
}

#[test]
fn the_byte_bound_gives_up_as_many_as_it_takes() {
    let half = "x".repeat(MAX_BYTES / 2);
    let third_a = format!("a{}", "x".repeat(MAX_BYTES / 3));
    let third_b = format!("b{}", "x".repeat(MAX_BYTES / 3));
    let mut cache = Cache::new(DEFAULT_CAPACITY, "t");
    assert!(add(&mut cache, &third_a).is_empty());
    assert!(add(&mut cache, &third_b).is_empty());
    assert!(add(&mut cache, "small").is_empty());
    assert_eq!(add(&mut cache, &half), ["t1"], "a third gives way to a half");
    assert!(cache.bytes <= MAX_BYTES);
    let whole = "y".repeat(MAX_BYTES);
    assert_eq!(add(&mut cache, &whole).len(), 3, "a text of the whole bound leaves room for nothing else");
    assert_eq!((cache.len(), cache.bytes), (1, MAX_BYTES));
}

#[test]
fn a_text_over_the_byte_bound_is_never_kept() {
    let huge = "z".repeat(MAX_BYTES + 1);
    let mut cache = Cache::new(DEFAULT_CAPACITY, "t");
    assert!(!cache.prepares(&huge));
    assert!(add(&mut cache, "small").is_empty());
    assert_eq!(cache.insert(unnamed(&huge)).len(), 1, "handed straight back");
    assert_eq!(cache.len(), 1);
}

#[test]
fn with_capacity_zero_it_prepares_nothing_and_keeps_descriptions() {
    let mut cache = Cache::new(0, "t");
    assert!(!cache.prepares("select 1"));
    for i in 0..DEFAULT_CAPACITY + 10 {
        let sql = format!("select {i}");
        cache.insert(unnamed(&sql));
    }
    assert_eq!(cache.len(), DEFAULT_CAPACITY);
}

#[test]
fn clear_and_remove_keep_the_byte_count() {
    let mut cache = Cache::new(4, "t");
    add(&mut cache, "abc");
    add(&mut cache, "de");
    assert_eq!(cache.bytes, 5);
    cache.remove("abc");
    assert_eq!(cache.bytes, 2);
    let stmt = cache.get("de").unwrap();
    assert!(cache.holds(&stmt));
    assert_eq!(cache.clear().len(), 1);
    assert_eq!((cache.len(), cache.bytes), (0, 0));
    assert!(!cache.holds(&stmt));
}
