//! `ToSql`/`FromSql` for std's types: bool, integers, floats, strings, bytes, `Option`, references.

use bytes::{BufMut, BytesMut};
use postgres_protocol::types as wire;

use super::{Format, FromSql, IsNull, ToSql, Type};

fn err(e: Box<dyn std::error::Error + Sync + Send>) -> String {
    e.to_string()
}

impl ToSql for bool {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::BOOL
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::bool_to_sql(*self, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for bool {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::BOOL && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<bool, String> {
        wire::bool_from_sql(raw).map_err(err)
    }
}

/// Integers: sent as their own type or a wider one; read from their own type or a narrower one.
macro_rules! integer {
    ($t:ty, $own:expr, [$($wider:expr),*], [$($narrower:expr),*]) => {
        impl ToSql for $t {
            fn accepts(&self, ty: Type) -> bool {
                ty == $own $(|| ty == $wider)*
            }
            fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
                match ty {
                    Type::INT2 => out.put_i16(*self as i16),
                    Type::INT4 => out.put_i32(*self as i32),
                    _ => out.put_i64(*self as i64),
                }
                Ok(IsNull::No)
            }
        }

        impl FromSql<'_> for $t {
            fn accepts(ty: Type, format: Format) -> bool {
                format == Format::Binary && (ty == $own $(|| ty == $narrower)*)
            }
            fn from_sql(ty: Type, raw: &[u8]) -> Result<$t, String> {
                Ok(match ty {
                    Type::INT2 => wire::int2_from_sql(raw).map_err(err)? as $t,
                    Type::INT4 => wire::int4_from_sql(raw).map_err(err)? as $t,
                    _ => wire::int8_from_sql(raw).map_err(err)? as $t,
                })
            }
        }
    };
}

integer!(i16, Type::INT2, [Type::INT4, Type::INT8], []);
integer!(i32, Type::INT4, [Type::INT8], [Type::INT2]);
integer!(i64, Type::INT8, [], [Type::INT2, Type::INT4]);

impl ToSql for u32 {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::OID
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::oid_to_sql(*self, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for u32 {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::OID && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<u32, String> {
        wire::oid_from_sql(raw).map_err(err)
    }
}

impl ToSql for f32 {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::FLOAT4 || ty == Type::FLOAT8
    }
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        match ty {
            Type::FLOAT4 => wire::float4_to_sql(*self, out),
            _ => wire::float8_to_sql(f64::from(*self), out),
        }
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for f32 {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::FLOAT4 && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<f32, String> {
        wire::float4_from_sql(raw).map_err(err)
    }
}

impl ToSql for f64 {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::FLOAT8
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::float8_to_sql(*self, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for f64 {
    fn accepts(ty: Type, format: Format) -> bool {
        (ty == Type::FLOAT8 || ty == Type::FLOAT4) && format == Format::Binary
    }
    fn from_sql(ty: Type, raw: &[u8]) -> Result<f64, String> {
        match ty {
            Type::FLOAT4 => wire::float4_from_sql(raw).map(f64::from).map_err(err),
            _ => wire::float8_from_sql(raw).map_err(err),
        }
    }
}

/// Text goes in the text format for any type: the server parses it as that type.
impl ToSql for str {
    fn accepts(&self, _: Type) -> bool {
        true
    }
    fn format(&self, ty: Type) -> Format {
        if ty.is_text() {
            Format::Binary
        } else {
            Format::Text
        }
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        if self.contains('\0') {
            return Err("text cannot hold a NUL character".into());
        }
        out.put_slice(self.as_bytes());
        Ok(IsNull::No)
    }
}

impl<'a> FromSql<'a> for &'a str {
    fn accepts(ty: Type, format: Format) -> bool {
        format == Format::Text || ty.is_text()
    }
    fn from_sql(_: Type, raw: &'a [u8]) -> Result<&'a str, String> {
        wire::text_from_sql(raw).map_err(err)
    }
}

impl ToSql for String {
    fn accepts(&self, ty: Type) -> bool {
        self.as_str().accepts(ty)
    }
    fn format(&self, ty: Type) -> Format {
        self.as_str().format(ty)
    }
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        self.as_str().to_sql(ty, out)
    }
}

impl FromSql<'_> for String {
    fn accepts(ty: Type, format: Format) -> bool {
        <&str as FromSql>::accepts(ty, format)
    }
    fn from_sql(ty: Type, raw: &[u8]) -> Result<String, String> {
        <&str>::from_sql(ty, raw).map(str::to_owned)
    }
}

impl ToSql for [u8] {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::BYTEA
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::bytea_to_sql(self, out);
        Ok(IsNull::No)
    }
}

impl<'a> FromSql<'a> for &'a [u8] {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::BYTEA && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &'a [u8]) -> Result<&'a [u8], String> {
        Ok(wire::bytea_from_sql(raw))
    }
}

impl ToSql for Vec<u8> {
    fn accepts(&self, ty: Type) -> bool {
        self.as_slice().accepts(ty)
    }
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        self.as_slice().to_sql(ty, out)
    }
}

impl FromSql<'_> for Vec<u8> {
    fn accepts(ty: Type, format: Format) -> bool {
        <&[u8] as FromSql>::accepts(ty, format)
    }
    fn from_sql(ty: Type, raw: &[u8]) -> Result<Vec<u8>, String> {
        <&[u8]>::from_sql(ty, raw).map(<[u8]>::to_vec)
    }
}

/// `None` is NULL, for a parameter of any type `T` accepts.
impl<T: ToSql> ToSql for Option<T> {
    fn accepts(&self, ty: Type) -> bool {
        match self {
            Some(v) => v.accepts(ty),
            None => true,
        }
    }
    fn format(&self, ty: Type) -> Format {
        self.as_ref().map_or(Format::Binary, |v| v.format(ty))
    }
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        match self {
            Some(v) => v.to_sql(ty, out),
            None => Ok(IsNull::Yes),
        }
    }
    fn rust_type(&self) -> &'static str {
        self.as_ref().map_or(std::any::type_name::<Self>(), |v| v.rust_type())
    }
}

impl<'a, T: FromSql<'a>> FromSql<'a> for Option<T> {
    fn accepts(ty: Type, format: Format) -> bool {
        T::accepts(ty, format)
    }
    fn from_sql(ty: Type, raw: &'a [u8]) -> Result<Option<T>, String> {
        T::from_sql(ty, raw).map(Some)
    }
    fn from_null(_: Type) -> Result<Option<T>, String> {
        Ok(None)
    }
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn accepts(&self, ty: Type) -> bool {
        (**self).accepts(ty)
    }
    fn format(&self, ty: Type) -> Format {
        (**self).format(ty)
    }
    fn to_sql(&self, ty: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        (**self).to_sql(ty, out)
    }
    fn rust_type(&self) -> &'static str {
        (**self).rust_type()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T>(value: T, ty: Type) -> T
    where
        T: ToSql + for<'a> FromSql<'a>,
    {
        assert!(value.accepts(ty));
        let mut out = BytesMut::new();
        assert_eq!(value.to_sql(ty, &mut out), Ok(IsNull::No));
        T::from_sql(ty, &out).unwrap()
    }

    #[test]
    fn values_survive_their_own_binary_format() {
        assert!(round_trip(true, Type::BOOL));
        assert_eq!(round_trip(-7i16, Type::INT2), -7);
        assert_eq!(round_trip(i32::MIN, Type::INT4), i32::MIN);
        assert_eq!(round_trip(i64::MAX, Type::INT8), i64::MAX);
        assert_eq!(round_trip(1.5f32, Type::FLOAT4), 1.5);
        assert_eq!(round_trip(f64::MIN_POSITIVE, Type::FLOAT8), f64::MIN_POSITIVE);
        assert_eq!(round_trip(String::from("héllo"), Type::TEXT), "héllo");
        assert_eq!(round_trip(vec![0u8, 255], Type::BYTEA), [0, 255]);
        assert_eq!(round_trip(Some(3i32), Type::INT4), Some(3));
    }

    #[test]
    fn integers_widen_but_never_narrow() {
        let mut out = BytesMut::new();
        7i16.to_sql(Type::INT8, &mut out).unwrap();
        assert_eq!(i64::from_sql(Type::INT8, &out), Ok(7));
        assert!(!i64::MAX.accepts(Type::INT4));
        assert!(!<i16 as FromSql>::accepts(Type::INT4, Format::Binary));
    }

    #[test]
    fn a_null_reads_only_into_an_option() {
        assert_eq!(Option::<i32>::from_null(Type::INT4), Ok(None));
        assert!(i32::from_null(Type::INT4).unwrap_err().contains("Option"));
    }

    #[test]
    fn text_with_a_nul_is_refused() {
        assert!("a\0b".to_sql(Type::TEXT, &mut BytesMut::new()).is_err());
    }
}
