//! The accessors of every type that wraps a received head (the client's `Response` and
//! `ResponseStream`, the server's `Request` and `Exchange`): written once, given to each.

/// Gives `$ty` the methods `header`, `header_bytes`, `headers` and `version`, reading the head
/// that `$head` (an expression of `$this` giving `Option<&Head>`) finds and the version that
/// `$version` (of type `$vty`) gives. `$example_ty` names the type from outside the crate, for the
/// examples.
macro_rules! head_accessors {
    ($ty:ty, $example_ty:literal, |$this:ident| head: $head:expr, version: $vty:ty = $version:expr) => {
        impl $ty {
            /// The value of the first field of the head called `name` (any case), if it is text:
            /// a request's for the server, a response's for the client.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("fn content_type<'m>(message: &'m ", $example_ty, ") -> &'m str {")]
            ///     message.header("content-type").unwrap_or("application/octet-stream")
            /// }
            /// # let _ = content_type;
            /// ```
            pub fn header(&self, name: &str) -> Option<&str> {
                self.header_bytes(name).and_then(|value| std::str::from_utf8(value).ok())
            }

            /// The value of the first field of the head called `name` (any case), as received.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("fn has_token(message: &", $example_ty, ") -> bool {")]
            ///     message.header_bytes("x-token") == Some(b"secret")
            /// }
            /// # let _ = has_token;
            /// ```
            pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
                let $this = self;
                $head.and_then(|head| head.get(name))
            }

            /// Every field of the head, in the order received: names as received, values without
            /// surrounding blanks (a folded value's line breaks replaced by spaces).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("fn cookies(message: &", $example_ty, ") -> usize {")]
            ///     message.headers().filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie")).count()
            /// }
            /// # let _ = cookies;
            /// ```
            pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
                let $this = self;
                $head.into_iter().flat_map(crate::wire::head::Head::fields)
            }

            /// The HTTP version of the message.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("fn describe(message: &", $example_ty, ") -> String {")]
            ///     format!("{:?}", message.version())
            /// }
            /// # let _ = describe;
            /// ```
            pub fn version(&self) -> $vty {
                let $this = self;
                $version
            }
        }
    };
}

pub(crate) use head_accessors;
