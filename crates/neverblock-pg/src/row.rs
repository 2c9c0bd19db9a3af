//! Result rows: typed columns ([`Row`]) from the extended protocol, text ones
//! ([`SimpleRow`]) from simple queries. A row keeps its message's bytes and reads
//! columns from them in place.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::DataRowBody;

use crate::types::{Format, FromSql, Type};
use crate::Error;

/// The one row of `rows`; [`Error::RowCount`] for none or several.
pub(crate) fn exactly_one(mut rows: Vec<Row>) -> Result<Row, Error> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(Error::RowCount(n)),
    }
}

/// A result column: its name, type, and the format its values arrive in.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let stmt = conn.prepare("select 1::int8 as n").unwrap();
/// assert_eq!(stmt.columns()[0].name(), "n");
/// assert_eq!(stmt.columns()[0].type_(), neverblock_pg::types::Type::INT8);
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    name: String,
    ty: Type,
    format: Format,
}

impl Column {
    /// A column of type `ty`, in binary format if this crate reads `ty` in binary.
    pub(crate) fn new(name: &str, ty: Type) -> Column {
        let format = if ty.binary_result() { Format::Binary } else { Format::Text };
        Column { name: name.to_owned(), ty, format }
    }

    /// A column as a portal's `RowDescription` gives it: its values come in `format`.
    pub(crate) fn with_format(name: &str, ty: Type, format: Format) -> Column {
        Column { name: name.to_owned(), ty, format }
    }

    /// The column's name (its label in the query).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.columns()[1].name(), "x");
    /// # });
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's type.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.columns()[0].type_(), neverblock_pg::types::Type::INT4);
    /// # });
    /// ```
    pub fn type_(&self) -> Type {
        self.ty
    }

    /// The format its values are asked for in: binary for the types in
    /// [`types`](crate::types)' table, text for the rest.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.columns()[0].format(), neverblock_pg::types::Format::Binary);
    /// # });
    /// ```
    pub fn format(&self) -> Format {
        self.format
    }
}

/// Picks a column by position (`0`) or by name (`"id"`).
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
/// assert_eq!(row.get::<i32>(0), row.get::<i32>("one"));
/// # });
/// ```
pub trait ColumnIndex: sealed::Sealed {
    /// The column's position, if it exists.
    #[doc(hidden)]
    fn position(&self, names: &mut dyn Iterator<Item = &str>) -> Option<usize>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for usize {}
    impl Sealed for &str {}
}

impl ColumnIndex for usize {
    fn position(&self, names: &mut dyn Iterator<Item = &str>) -> Option<usize> {
        (*self < names.count()).then_some(*self)
    }
}

impl ColumnIndex for &str {
    fn position(&self, names: &mut dyn Iterator<Item = &str>) -> Option<usize> {
        names.enumerate().find(|(_, n)| n == self).map(|(i, _)| i)
    }
}

/// The byte ranges of a data row's values (`None`: NULL).
fn value_ranges(body: &DataRowBody) -> Result<Vec<Option<Range<usize>>>, Error> {
    body.ranges().collect().map_err(|e| Error::protocol(format!("malformed data row: {e}")))
}

/// One row of a query's result.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let row = conn.query_one("select 42::int4 as answer, null::text as nothing", &[]).unwrap();
/// assert_eq!(row.get::<i32>(0), 42);
/// assert_eq!(row.get::<i64>("answer"), 42, "an int4 reads as an i64 too");
/// assert_eq!(row.get::<Option<String>>("nothing"), None);
/// assert!(row.try_get::<String>("nothing").is_err(), "NULL needs an Option");
/// # });
/// ```
pub struct Row {
    columns: Arc<[Column]>,
    body: DataRowBody,
    ranges: Vec<Option<Range<usize>>>,
}

impl Row {
    pub(crate) fn new(columns: Arc<[Column]>, body: DataRowBody) -> Result<Row, Error> {
        let ranges = value_ranges(&body)?;
        if ranges.len() != columns.len() {
            return Err(Error::protocol(format!("a row of {} values for {} columns", ranges.len(), columns.len())));
        }
        Ok(Row { columns, body, ranges })
    }

    /// The columns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.columns().len(), 2);
    /// # });
    /// ```
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// How many columns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.len(), 2);
    /// # });
    /// ```
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Whether the row has no columns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert!(!row.is_empty());
    /// # });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Column `index` (a position or a name) as a `T`.
    ///
    /// # Panics
    ///
    /// When [`try_get`](Row::try_get) returns an error: no such column, a type
    /// `T` cannot be read from, or a NULL into a non-`Option`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert_eq!(row.get::<&str>("x"), "x");
    /// # });
    /// ```
    #[track_caller]
    pub fn get<'a, T: FromSql<'a>>(&'a self, index: impl ColumnIndex + fmt::Debug) -> T {
        self.try_get(index).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Column `index` (a position or a name) as a `T`.
    ///
    /// # Errors
    ///
    /// [`Error::Column`]: no such column, a column type `T` cannot be read
    /// from, a NULL into a non-`Option`, or an invalid value.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let row = conn.query_one("select 1::int4 as one, 'x'::text as x", &[]).unwrap();
    /// assert!(row.try_get::<i32>("x").is_err(), "text is not an int4");
    /// # });
    /// ```
    pub fn try_get<'a, T: FromSql<'a>>(&'a self, index: impl ColumnIndex + fmt::Debug) -> Result<T, Error> {
        let i = index
            .position(&mut self.columns.iter().map(Column::name))
            .ok_or_else(|| Error::Column(format!("no column {index:?} in a row of {} columns", self.len())))?;
        let column = &self.columns[i];
        let fail = |m: String| Error::Column(format!("column {:?} ({}): {m}", column.name, column.ty));
        if !T::accepts(column.ty, column.format) {
            return Err(fail(format!("cannot be read as {}", std::any::type_name::<T>())));
        }
        match &self.ranges[i] {
            Some(range) => T::from_sql(column.ty, &self.body.buffer()[range.clone()]).map_err(fail),
            None => T::from_null(column.ty).map_err(fail),
        }
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Row").field("columns", &self.columns).finish_non_exhaustive()
    }
}

/// One row of a simple query's result: every value as text.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let rows = conn.simple_query("select 1 as one, null as nothing").unwrap();
/// assert_eq!(rows[0].get(0), Some("1"));
/// assert_eq!(rows[0].get(1), None);
/// assert_eq!(rows[0].column_names()[0], "one");
/// # });
/// ```
pub struct SimpleRow {
    names: Arc<[String]>,
    body: DataRowBody,
    ranges: Vec<Option<Range<usize>>>,
}

impl SimpleRow {
    pub(crate) fn new(names: Arc<[String]>, body: DataRowBody) -> Result<SimpleRow, Error> {
        let ranges = value_ranges(&body)?;
        Ok(SimpleRow { names, body, ranges })
    }

    /// The columns' names.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let rows = conn.simple_query("select 1 as a").unwrap();
    /// assert_eq!(rows[0].column_names(), ["a"]);
    /// # });
    /// ```
    pub fn column_names(&self) -> &[String] {
        &self.names
    }

    /// Value `index` as text; `None` for NULL or no such column.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let rows = conn.simple_query("select 1, null").unwrap();
    /// assert_eq!((rows[0].get(0), rows[0].get(1), rows[0].get(2)), (Some("1"), None, None));
    /// # });
    /// ```
    pub fn get(&self, index: usize) -> Option<&str> {
        let range = self.ranges.get(index)?.clone()?;
        std::str::from_utf8(&self.body.buffer()[range]).ok()
    }
}

impl fmt::Debug for SimpleRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: Vec<_> = (0..self.ranges.len()).map(|i| self.get(i)).collect();
        f.debug_struct("SimpleRow").field("names", &self.names).field("values", &values).finish()
    }
}
