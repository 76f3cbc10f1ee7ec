//! TLS of the gateways: a self-signed CA and node certificate for `up` and tests (rcgen),
//! or PEM files named by the topology, turned into a rustls server config (HTTP/2 and HTTP/1.1).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// PEM-encoded CA, certificate chain and private key of a gateway.
#[derive(Clone)]
pub struct TlsMaterial {
    /// The CA that clients and other nodes trust.
    pub ca_pem: String,
    /// The gateway's certificate.
    pub cert_pem: String,
    /// The gateway's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsMaterial(..)")
    }
}

impl TlsMaterial {
    /// A new CA and one certificate it signs for every name or IP address in `hosts`.
    pub fn generate(hosts: &[String]) -> anyhow::Result<Self> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "geofaas local CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let mut params =
            CertificateParams::new(hosts.to_vec()).context("certificate host names")?;
        params
            .distinguished_name
            .push(DnType::CommonName, "geofaas gateway");
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Reads the PEM files; `ca` defaults to the certificate itself.
    pub fn load(cert: &Path, key: &Path, ca: Option<&Path>) -> anyhow::Result<Self> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
        };
        let cert_pem = read(cert)?;
        Ok(Self {
            ca_pem: ca
                .map(read)
                .transpose()?
                .unwrap_or_else(|| cert_pem.clone()),
            key_pem: read(key)?,
            cert_pem,
        })
    }

    /// Writes `ca.pem`, `node.pem` and `node-key.pem` (mode 0600) into `dir`.
    pub fn write_to(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join("ca.pem"), &self.ca_pem)?;
        std::fs::write(dir.join("node.pem"), &self.cert_pem)?;
        let key_path = dir.join("node-key.pem");
        std::fs::write(&key_path, &self.key_pem)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(())
    }

    /// A rustls server config offering HTTP/2 and HTTP/1.1.
    pub fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let certs: Vec<CertificateDer<'static>> =
            rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .context("certificate PEM")?;
        anyhow::ensure!(
            !certs.is_empty(),
            "the certificate file holds no certificate"
        );
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .context("private key PEM")?
            .context("the key file holds no private key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("certificate and key do not match")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
