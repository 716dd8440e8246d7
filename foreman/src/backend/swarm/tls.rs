//! `swarm.tls`: the CA and the client certificate and key read from their
//! PEM files into a TLS client configuration, every problem named by its
//! key and file (a missing file, one that holds no PEM of the right kind,
//! a key that does not belong to the certificate).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Larger than any PEM certificate chain or key.
const MAX_PEM: u64 = 1 << 20;

/// The files of `swarm.tls`, resolved against the config's directory.
pub(crate) struct Files {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn read(key: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM + 1).read_to_end(&mut bytes))
        .map_err(|e| {
            anyhow::anyhow!(
                "`swarm.tls.{key}`: cannot read `{}`: {e}; set it to a PEM file",
                path.display()
            )
        })?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_PEM,
        "`swarm.tls.{key}`: `{}` is larger than 1 MiB: not a PEM file",
        path.display()
    );
    Ok(bytes)
}

fn certs(key: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow::anyhow!(
                "`swarm.tls.{key}`: `{}` is not valid PEM: {e}",
                path.display()
            )
        })?;
    anyhow::ensure!(
        !certs.is_empty(),
        "`swarm.tls.{key}`: `{}` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
        path.display()
    );
    Ok(certs)
}

/// The TLS client configuration: trusts only `files.ca`, presents
/// `files.cert` with `files.key`.
pub(crate) fn client_config(files: &Files) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs("ca", &files.ca)? {
        roots.add(c).map_err(|e| {
            anyhow::anyhow!(
                "`swarm.tls.ca`: `{}` is not a usable CA certificate: {e}",
                files.ca.display()
            )
        })?;
    }
    let chain = certs("cert", &files.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&read("key", &files.key)?).map_err(|e| {
        anyhow::anyhow!(
            "`swarm.tls.key`: `{}` holds no PEM private key ({e})",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            anyhow::anyhow!(
                "`swarm.tls.cert` `{}` and `swarm.tls.key` `{}` do not make a client certificate: {e}",
                files.cert.display(),
                files.key.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Files {
        Files {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    /// A CA and a client certificate it signed, as PEM files in `dir`.
    fn write_good(dir: &Path) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = p.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .signed_by(&key, &rcgen::Issuer::new(p, ca_key))
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn good_files_make_a_client_config() {
        let d = tempfile::tempdir().unwrap();
        write_good(d.path());
        client_config(&files(d.path())).unwrap();
    }

    /// Each problem names its key and its file.
    #[test]
    fn bad_files_are_named_by_key_and_path() {
        let d = tempfile::tempdir().unwrap();
        let f = files(d.path());
        let err = |f: &Files| format!("{:#}", client_config(f).unwrap_err());
        // Missing.
        let e = err(&f);
        assert!(e.contains("`swarm.tls.ca`") && e.contains("ca.pem"), "{e}");
        // Not PEM.
        write_good(d.path());
        std::fs::write(&f.cert, "hello").unwrap();
        let e = err(&f);
        assert!(
            e.contains("`swarm.tls.cert`") && e.contains("cert.pem"),
            "{e}"
        );
        // A certificate where the key should be.
        write_good(d.path());
        std::fs::copy(&f.cert, &f.key).unwrap();
        let e = err(&f);
        assert!(
            e.contains("`swarm.tls.key`") && e.contains("key.pem"),
            "{e}"
        );
        // The key of another certificate.
        write_good(d.path());
        let other = tempfile::tempdir().unwrap();
        write_good(other.path());
        std::fs::copy(other.path().join("key.pem"), &f.key).unwrap();
        let e = err(&f);
        assert!(
            e.contains("`swarm.tls.cert`") && e.contains("`swarm.tls.key`"),
            "{e}"
        );
    }
}
