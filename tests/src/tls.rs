//! Certificates for the agent's TLS tests, made at test time by the openssl command
//! (no key is kept in the repository), and a web config file that uses them.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// A CA for servers, a certificate it signed for `localhost` and 127.0.0.1, a CA for
/// clients, a client certificate it signed, and a client certificate another CA signed.
pub struct Certs {
    /// The servers' CA certificate (what a scraper trusts).
    pub ca: PathBuf,
    /// The agent's certificate and key.
    pub server_crt: PathBuf,
    pub server_key: PathBuf,
    /// The clients' CA (the agent's `client_ca_file`).
    pub client_ca: PathBuf,
    /// A client certificate and key the clients' CA signed.
    pub client_crt: PathBuf,
    pub client_key: PathBuf,
    /// A client certificate and key signed by a CA the agent does not know.
    pub stranger_crt: PathBuf,
    pub stranger_key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl (apt-get install openssl): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A P-256 key and a self-signed CA certificate: NAME.key, NAME.crt.
fn ca(dir: &Path, name: &str) {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
        dir,
    );
}

/// A P-256 key and a certificate `ca` signed: NAME.key, NAME.crt.
fn leaf(dir: &Path, name: &str, ca: &str, ext: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
        dir,
    );
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ],
        dir,
    );
}

impl Certs {
    /// Makes them all in `dir`.
    pub fn make(dir: &Path) -> Certs {
        ca(dir, "server-ca");
        ca(dir, "client-ca");
        ca(dir, "stranger-ca");
        leaf(
            dir,
            "agent",
            "server-ca",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        );
        let client = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
                      extendedKeyUsage=clientAuth\n";
        leaf(dir, "prometheus", "client-ca", client);
        leaf(dir, "stranger", "stranger-ca", client);
        Certs {
            ca: dir.join("server-ca.crt"),
            server_crt: dir.join("agent.crt"),
            server_key: dir.join("agent.key"),
            client_ca: dir.join("client-ca.crt"),
            client_crt: dir.join("prometheus.crt"),
            client_key: dir.join("prometheus.key"),
            stranger_crt: dir.join("stranger.crt"),
            stranger_key: dir.join("stranger.key"),
        }
    }

    /// The `tls_server_config` of a web config file, with `client_auth` (a
    /// client_auth_type, or None for none asked).
    pub fn tls_server_config(&self, client_auth: Option<&str>) -> String {
        let mut s = format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            self.server_crt.display(),
            self.server_key.display()
        );
        if let Some(a) = client_auth {
            s += &format!(
                "  client_auth_type: {a}\n  client_ca_file: {}\n",
                self.client_ca.display()
            );
        }
        s
    }
}
