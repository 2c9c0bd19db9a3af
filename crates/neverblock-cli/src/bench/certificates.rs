//! Self-signed certificates for the HTTPS benchmark, made at run time by the `openssl` command
//! (rcgen, which the tests use, cannot make RSA keys with the `ring` backend): one per key type,
//! for `localhost` and 127.0.0.1, each server of a run given the same files.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// The key types measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyType {
    /// ECDSA over P-256 (secp256r1), signing with SHA-256.
    EcdsaP256,
    /// RSA with a 2048-bit modulus (RSA-PSS signatures under TLS 1.3).
    Rsa2048,
}

impl KeyType {
    /// How a row names it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::Rsa2048 => "rsa-2048",
        }
    }

    /// `openssl req`'s arguments for a new key of this type.
    fn new_key_args(self) -> &'static [&'static str] {
        match self {
            KeyType::EcdsaP256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            KeyType::Rsa2048 => &["-newkey", "rsa:2048"],
        }
    }
}

/// A certificate and its private key, PEM files.
#[derive(Debug)]
pub(crate) struct CertFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Makes a self-signed certificate with a new key of type `key` under `dir`, valid for a month
/// for `DNS:localhost` and `IP:127.0.0.1`.
///
/// # Errors
///
/// When `openssl` is not installed (the message says to install it) or fails.
pub(crate) fn self_signed(dir: &Path, key: KeyType) -> anyhow::Result<CertFiles> {
    let files =
        CertFiles { cert: dir.join(format!("{}.crt", key.label())), key: dir.join(format!("{}.key", key.label())) };
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-subj", "/CN=localhost"])
        .args(key.new_key_args())
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&files.key)
        .arg("-out")
        .arg(&files.cert)
        .output();
    let out = match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "the HTTPS benchmark makes its certificates with the `openssl` command, which is not installed \
             (apt-get install openssl)"
        ),
        other => other.context("run openssl")?,
    };
    anyhow::ensure!(
        out.status.success(),
        "openssl could not make a {} certificate: {}",
        key.label(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(files)
}
