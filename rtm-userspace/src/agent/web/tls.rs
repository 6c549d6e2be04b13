//! TLS for the endpoint: the `tls_server_config` section of the web config file, its
//! certificate, key and client CA read from PEM files and checked into a server config.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::Deserialize;
use tokio_rustls::rustls::{
    self, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

use crate::session::input;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
}

/// Whether and how clients present certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// None asked for.
    NoClientCert,
    /// Verified against the client CA when given; a client without one is let in.
    VerifyIfGiven,
    /// Every client presents one the client CA signed (mutual TLS).
    RequireAndVerify,
}

fn read(field: &str, path: &Path) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    input::Bounded::open(path, input::MAX_CONFIG_BYTES)
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut out))
        .map_err(|e| format!("{field}: cannot read {}: {e}", path.display()))?;
    Ok(out)
}

fn certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{field}: {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{field}: {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

pub(super) fn tls_config(
    t: &TlsFile,
    base: &Path,
) -> Result<(Arc<ServerConfig>, ClientAuth), String> {
    let field = |k: &str| format!("tls_server_config.{k}");
    let path = |k: &str, p: &Option<PathBuf>| -> Result<PathBuf, String> {
        match p {
            Some(p) if !p.as_os_str().is_empty() => Ok(base.join(p)),
            _ => Err(format!(
                "{}: missing: TLS needs a certificate and its key",
                field(k)
            )),
        }
    };
    let cert_path = path("cert_file", &t.cert_file)?;
    let key_path = path("key_file", &t.key_file)?;
    let chain = certs(&field("cert_file"), &cert_path)?;
    let key_pem = read(&field("key_file"), &key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "{}: {}: no PEM private key in it ({e})",
            field("key_file"),
            key_path.display()
        )
    })?;
    let client_auth = match t.client_auth_type.as_deref().unwrap_or("NoClientCert") {
        "NoClientCert" | "" => ClientAuth::NoClientCert,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(format!(
                "{}: {:?} takes certificates it does not verify: use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file",
                field("client_auth_type"),
                t.client_auth_type.as_deref().unwrap_or_default()
            ));
        }
        other => {
            return Err(format!(
                "{}: {:?} is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert",
                field("client_auth_type"),
                other
            ));
        }
    };
    let versions: &[&'static rustls::SupportedProtocolVersion] =
        match t.min_version.as_deref().unwrap_or("TLS12") {
            "TLS12" => &[&rustls::version::TLS13, &rustls::version::TLS12],
            "TLS13" => &[&rustls::version::TLS13],
            other => {
                return Err(format!(
                    "{}: {other:?} is not TLS12 or TLS13 (TLS 1.0 and 1.1 are not offered)",
                    field("min_version")
                ));
            }
        };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("{}: {e}", field("min_version")))?;
    let builder = match (client_auth, &t.client_ca_file) {
        (ClientAuth::NoClientCert, Some(p)) if !p.as_os_str().is_empty() => {
            return Err(format!(
                "{}: given, but client_auth_type is NoClientCert: set VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                field("client_ca_file")
            ));
        }
        (ClientAuth::NoClientCert, _) => builder.with_no_client_auth(),
        (mode, ca) => {
            let ca = path("client_ca_file", ca).map_err(|_| {
                format!(
                    "{}: missing: client_auth_type {} verifies clients against it",
                    field("client_ca_file"),
                    t.client_auth_type.as_deref().unwrap_or_default()
                )
            })?;
            let mut roots = RootCertStore::empty();
            for c in certs(&field("client_ca_file"), &ca)? {
                roots
                    .add(c)
                    .map_err(|e| format!("{}: {}: {e}", field("client_ca_file"), ca.display()))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let v = if mode == ClientAuth::VerifyIfGiven {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(
                v.build()
                    .map_err(|e| format!("{}: {e}", field("client_ca_file")))?,
            )
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "{}: {} does not go with {}: {e}",
            field("key_file"),
            key_path.display(),
            cert_path.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), client_auth))
}
