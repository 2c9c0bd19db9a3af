//! SQL types and their Rust counterparts: [`ToSql`] sends a value as a parameter,
//! [`FromSql`] reads one from a row; the binary formats come from `postgres-protocol`.
//!
//! | SQL | Rust |
//! |---|---|
//! | `bool` | `bool` |
//! | `int2`, `int4`, `int8` | `i16`, `i32`, `i64` (a column reads into any wider integer too) |
//! | `float4`, `float8` | `f32`, `f64` |
//! | `numeric` | `String` (its text; send a `&str`) |
//! | `text`, `varchar`, `char(n)`, `name` | `String`, `&str` |
//! | `bytea` | `Vec<u8>`, `&[u8]` |
//! | `date` | [`Date`] |
//! | `timestamp` | [`Timestamp`] |
//! | `timestamptz` | [`std::time::SystemTime`] |
//! | `uuid` | [`Uuid`] |
//! | `json`, `jsonb` | `String` (its text) |
//! | `NULL` | `Option<T>` |
//!
//! A `&str` parameter may be sent for a parameter of any type: it goes in text
//! format and the server parses it. A column of a type this table does not
//! list arrives in text format and reads as a `String`.

mod primitive;
mod time;
mod uuid;

use std::fmt;

use bytes::BytesMut;

pub use self::time::{Date, Timestamp};
pub use self::uuid::{ParseUuidError, Uuid};

/// A PostgreSQL type, by its OID.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::Type;
///
/// assert_eq!(Type::INT4.oid(), 23);
/// assert_eq!(Type::from_oid(1184).to_string(), "timestamptz");
/// assert_eq!(Type::from_oid(1186).to_string(), "oid 1186");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Type(u32);

macro_rules! types {
    ($($name:ident = $oid:literal, $sql:literal, $binary:literal;)*) => {
        impl Type {
            $(#[doc = concat!("`", $sql, "`")] pub const $name: Type = Type($oid);)*

            /// The SQL name, for the types this crate knows.
            ///
            /// # Examples
            ///
            /// ```
            /// assert_eq!(neverblock_pg::types::Type::JSONB.name(), Some("jsonb"));
            /// ```
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($oid => Some($sql),)*
                    _ => None,
                }
            }

            /// Whether a column of this type is asked for in binary format (else text).
            pub(crate) fn binary_result(self) -> bool {
                match self.0 {
                    $($oid => $binary,)*
                    _ => false,
                }
            }
        }
    };
}

types! {
    BOOL = 16, "bool", true;
    BYTEA = 17, "bytea", true;
    CHAR = 18, "\"char\"", false;
    NAME = 19, "name", true;
    INT8 = 20, "int8", true;
    INT2 = 21, "int2", true;
    INT4 = 23, "int4", true;
    TEXT = 25, "text", true;
    OID = 26, "oid", true;
    JSON = 114, "json", false;
    FLOAT4 = 700, "float4", true;
    FLOAT8 = 701, "float8", true;
    UNKNOWN = 705, "unknown", true;
    BPCHAR = 1042, "bpchar", true;
    VARCHAR = 1043, "varchar", true;
    DATE = 1082, "date", true;
    TIMESTAMP = 1114, "timestamp", true;
    TIMESTAMPTZ = 1184, "timestamptz", true;
    NUMERIC = 1700, "numeric", false;
    UUID = 2950, "uuid", true;
    JSONB = 3802, "jsonb", false;
}

impl Type {
    /// The type with this OID.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::types::Type::from_oid(16), neverblock_pg::types::Type::BOOL);
    /// ```
    pub fn from_oid(oid: u32) -> Type {
        Type(oid)
    }

    /// The OID.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::types::Type::TEXT.oid(), 25);
    /// ```
    pub fn oid(self) -> u32 {
        self.0
    }

    /// Whether values of this type are text on the wire in both formats.
    pub(crate) fn is_text(self) -> bool {
        matches!(self, Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "oid {}", self.0),
        }
    }
}

impl fmt::Debug for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Type({self})")
    }
}

/// How a value is written on the wire.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::{Format, ToSql, Type};
/// assert_eq!("1.5".format(Type::NUMERIC), Format::Text);
/// assert_eq!(1.5f64.format(Type::FLOAT8), Format::Binary);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The type's text form (what `psql` shows).
    Text,
    /// The type's binary form.
    Binary,
}

impl Format {
    pub(crate) fn code(self) -> i16 {
        match self {
            Format::Text => 0,
            Format::Binary => 1,
        }
    }
}

/// Whether [`ToSql::to_sql`] wrote a value or a NULL.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::{IsNull, ToSql, Type};
/// let mut out = bytes::BytesMut::new();
/// assert_eq!(None::<i32>.to_sql(Type::INT4, &mut out), Ok(IsNull::Yes));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsNull {
    /// NULL: nothing was written.
    Yes,
    /// A value was written.
    No,
}

/// A Rust value that can be sent as a query parameter.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::{ToSql, Type};
///
/// assert!(7i32.accepts(Type::INT4));
/// assert!(7i32.accepts(Type::INT8), "widened");
/// assert!(!7i64.accepts(Type::INT4), "never narrowed");
/// assert!("anything".accepts(Type::INT4), "text the server parses");
/// ```
pub trait ToSql {
    /// Whether this value can be sent as a parameter of type `ty`.
    fn accepts(&self, ty: Type) -> bool;

    /// The format [`to_sql`](ToSql::to_sql) writes for `ty`.
    fn format(&self, _ty: Type) -> Format {
        Format::Binary
    }

    /// Appends the value in `ty`'s [`format`](ToSql::format) to `out`.
    ///
    /// # Errors
    ///
    /// A message when this value cannot be sent as `ty` (out of range, …).
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String>;

    /// The Rust type, for error messages.
    fn rust_type(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// A Rust type a column's value can be read as. `'a` borrows from the row, so
/// `&str` and `&[u8]` read without copying.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::{FromSql, Format, Type};
///
/// assert!(i64::accepts(Type::INT4, Format::Binary), "widened");
/// assert!(String::accepts(Type::NUMERIC, Format::Text));
/// assert_eq!(i32::from_sql(Type::INT4, &[0, 0, 1, 0]), Ok(256));
/// ```
pub trait FromSql<'a>: Sized {
    /// Whether a `ty` column in `format` can be read as `Self`.
    fn accepts(ty: Type, format: Format) -> bool;

    /// Reads a non-NULL value of type `ty` (in the format `accepts` agreed to).
    ///
    /// # Errors
    ///
    /// A message when the bytes are not a valid value.
    fn from_sql(ty: Type, raw: &'a [u8]) -> Result<Self, String>;

    /// Reads a NULL: an error, except for `Option`.
    ///
    /// # Errors
    ///
    /// Unless `Self` can hold a NULL.
    fn from_null(ty: Type) -> Result<Self, String> {
        Err(format!("the {ty} value is NULL; read it as an Option<{}>", std::any::type_name::<Self>()))
    }
}
