//! Certificates a test swarm's engines are served with (`--tlsverify`,
//! scripts/swarm.sh `TLS_DIR`) and the foreman reaches them with
//! (`swarm.tls`), made by the test itself with rcgen: no openssl CLI to
//! depend on, and each certificate says in code what it is for (a CA, a
//! server certificate per node for its address, a client certificate).
//! Also a client of another CA, which the engines must refuse.

use std::net::IpAddr;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

/// A CA: its certificate (PEM) and what signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let pem = p.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(p, key))
}

/// A leaf certificate signed by `issuer`: (cert PEM, key PEM).
fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    name: &str,
    ip: Option<IpAddr>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.subject_alt_names = ip.into_iter().map(SanType::IpAddress).collect();
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Writes into `dir`: `ca.pem`; `nN-cert.pem`/`nN-key.pem` for nodes
/// 1..=`nodes` at `<pfx>.1N`; `client-cert.pem`/`client-key.pem`; and
/// `other-ca.pem`, `other-cert.pem`/`other-key.pem` (a client of a CA the
/// engines do not trust).
pub(crate) fn make(dir: &Path, pfx: &str, nodes: u32) {
    let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    let (ca_pem, issuer) = ca("saheeli test swarm CA");
    w("ca.pem", &ca_pem);
    for n in 1..=nodes {
        let ip: IpAddr = format!("{pfx}.1{n}").parse().unwrap();
        let (cert, key) = leaf(
            &issuer,
            &format!("node{n}"),
            Some(ip),
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        w(&format!("n{n}-cert.pem"), &cert);
        w(&format!("n{n}-key.pem"), &key);
    }
    let (cert, key) = leaf(
        &issuer,
        "saheeli foreman",
        None,
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    w("client-cert.pem", &cert);
    w("client-key.pem", &key);
    let (other_pem, other) = ca("another CA");
    w("other-ca.pem", &other_pem);
    let (cert, key) = leaf(
        &other,
        "a stranger",
        None,
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    w("other-cert.pem", &cert);
    w("other-key.pem", &key);
}
