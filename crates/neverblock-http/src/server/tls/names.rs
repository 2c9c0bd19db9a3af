//! TLS protocol versions and cipher suites by the names Apache's mod_ssl logs (`SSL_PROTOCOL`)
//! and OpenSSL gives them (`SSL_CIPHER`), so access logs read as an Apache or nginx log would.

use rustls::{CipherSuite, ProtocolVersion};

/// `TLSv1.2`, `TLSv1.3`.
pub(super) fn protocol(version: ProtocolVersion) -> &'static str {
    match version {
        ProtocolVersion::TLSv1_3 => "TLSv1.3",
        ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "unknown",
    }
}

/// OpenSSL's name of `suite` (one of those the server offers).
pub(super) fn cipher(suite: CipherSuite) -> &'static str {
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_the_server_offers_has_its_openssl_name() {
        for suite in super::super::INTERMEDIATE_SUITES {
            assert_ne!(cipher(suite), "unknown", "{suite:?}");
        }
        assert_eq!(protocol(ProtocolVersion::TLSv1_3), "TLSv1.3");
    }
}
