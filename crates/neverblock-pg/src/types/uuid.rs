//! `uuid`: sixteen bytes, written in the usual hyphenated hex.

use std::fmt;
use std::str::FromStr;

use bytes::BytesMut;
use postgres_protocol::types as wire;

use super::{Format, FromSql, IsNull, ToSql, Type};

/// A `uuid`.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::Uuid;
///
/// let id: Uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".parse().unwrap();
/// assert_eq!(id.as_bytes()[0], 0xa0);
/// assert_eq!(id.to_string(), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
/// assert!("a0eebc99".parse::<Uuid>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid([u8; 16]);

impl Uuid {
    /// The UUID with these bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let id = neverblock_pg::types::Uuid::from_bytes([0; 16]);
    /// assert_eq!(id.to_string(), "00000000-0000-0000-0000-000000000000");
    /// ```
    pub fn from_bytes(bytes: [u8; 16]) -> Uuid {
        Uuid(bytes)
    }

    /// Its bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::types::Uuid::from_bytes([7; 16]).as_bytes(), &[7; 16]);
    /// ```
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Why a string is not a UUID.
///
/// # Examples
///
/// ```
/// let err = "xyz".parse::<neverblock_pg::types::Uuid>().unwrap_err();
/// assert!(err.to_string().contains("xyz"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseUuidError(String);

impl fmt::Display for ParseUuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a UUID (32 hex digits, hyphens optional)", self.0)
    }
}

impl std::error::Error for ParseUuidError {}

impl FromStr for Uuid {
    type Err = ParseUuidError;
    /// 32 hex digits, with or without hyphens.
    fn from_str(s: &str) -> Result<Uuid, ParseUuidError> {
        let digits: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
        let fail = || ParseUuidError(s.to_owned());
        if digits.len() != 32 {
            return Err(fail());
        }
        let mut bytes = [0u8; 16];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks(2)) {
            let hex = std::str::from_utf8(pair).map_err(|_| fail())?;
            *byte = u8::from_str_radix(hex, 16).map_err(|_| fail())?;
        }
        Ok(Uuid(bytes))
    }
}

impl ToSql for Uuid {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::UUID
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::uuid_to_sql(self.0, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for Uuid {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::UUID && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<Uuid, String> {
        wire::uuid_from_sql(raw).map(Uuid).map_err(|e| e.to_string())
    }
}
