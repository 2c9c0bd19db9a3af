//! SCRAM's channel binding data, `tls-server-end-point` (RFC 5929 §4.1): the hash of the server's
//! certificate, with the hash function of the certificate's signature algorithm — SHA-256 for
//! MD5 and SHA-1 — as PostgreSQL computes it on its side.

use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};
use x509_cert::der::Decode;
use x509_cert::spki::ObjectIdentifier;

#[derive(Clone, Copy)]
enum Hash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// Signature algorithms by OID, and the hash each binds with. RSASSA-PSS (its hash is in its
/// parameters) and EdDSA (no separate hash) are not here: such a certificate cannot be bound.
const ALGORITHMS: [(ObjectIdentifier, Hash); 12] = [
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.4"), Hash::Sha256), // md5WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.5"), Hash::Sha256), // sha1WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.14"), Hash::Sha224), // sha224WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11"), Hash::Sha256), // sha256WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12"), Hash::Sha384), // sha384WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13"), Hash::Sha512), // sha512WithRSAEncryption
    (ObjectIdentifier::new_unwrap("1.2.840.10045.4.1"), Hash::Sha256),    // ecdsa-with-SHA1
    (ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.1"), Hash::Sha224),  // ecdsa-with-SHA224
    (ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2"), Hash::Sha256),  // ecdsa-with-SHA256
    (ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3"), Hash::Sha384),  // ecdsa-with-SHA384
    (ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4"), Hash::Sha512),  // ecdsa-with-SHA512
    (ObjectIdentifier::new_unwrap("1.2.840.10040.4.3"), Hash::Sha256),    // dsa-with-sha1
];

/// The `tls-server-end-point` data of the certificate `der`; `None` when it cannot be parsed or
/// its signature algorithm names no hash this table knows.
pub(super) fn tls_server_end_point(der: &[u8]) -> Option<Vec<u8>> {
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let (_, hash) = ALGORITHMS.iter().find(|(oid, _)| *oid == cert.signature_algorithm.oid)?;
    Some(match hash {
        Hash::Sha224 => Sha224::digest(der).to_vec(),
        Hash::Sha256 => Sha256::digest(der).to_vec(),
        Hash::Sha384 => Sha384::digest(der).to_vec(),
        Hash::Sha512 => Sha512::digest(der).to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(algorithm: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(algorithm).unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_hash_follows_the_certificate_signature_algorithm() {
        let p256 = certificate(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(tls_server_end_point(&p256), Some(Sha256::digest(&p256).to_vec()));
        let p384 = certificate(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(tls_server_end_point(&p384), Some(Sha384::digest(&p384).to_vec()));
    }

    #[test]
    fn a_certificate_without_a_separate_hash_cannot_be_bound() {
        assert_eq!(tls_server_end_point(&certificate(&rcgen::PKCS_ED25519)), None);
        assert_eq!(tls_server_end_point(b"not a certificate"), None);
    }
}
