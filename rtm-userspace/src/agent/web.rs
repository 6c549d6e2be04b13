//! The endpoint's TLS and basic auth, from a web config file in the Prometheus
//! exporters' format (exporter-toolkit's `--web.config.file`):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: agent.crt          # PEM: the certificate, then its chain
//!   key_file: agent.key           # PEM: its private key (PKCS#8, PKCS#1 or SEC1)
//!   client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, VerifyClientCertIfGiven
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12            # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...        # bcrypt hashes (htpasswd -nbB)
//! ```
//!
//! Relative paths are taken from the web config file's directory. Every key may be left
//! out; unknown keys are refused by name. Basic auth guards every path but `/healthz`
//! and `/readyz`, which tell nothing but "ok" (so a kubelet's probes need no password).
//!
//! This file reads the file and describes what guards the endpoint; `tls` builds the
//! TLS server config and [`BasicAuth`] (in `auth`) checks passwords.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::Deserialize;
use tokio_rustls::rustls::ServerConfig;

use crate::session::input;

mod auth;
mod tls;

use auth::MAX_COST;
pub use auth::{BasicAuth, Verdict};
pub use tls::ClientAuth;
use tls::{TlsFile, tls_config};

/// The web config file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: HashMap<String, String>,
}

/// The endpoint's security, loaded and checked.
pub struct Web {
    /// The file it came from.
    pub source: PathBuf,
    /// TLS, when the file has a `tls_server_config`.
    pub tls: Option<Arc<ServerConfig>>,
    /// How clients' certificates are taken (TLS only).
    pub client_auth: ClientAuth,
    /// Basic auth, when the file names users.
    pub auth: Option<Arc<BasicAuth>>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("source", &self.source)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("users", &self.auth.as_ref().map_or(0, |a| a.users.len()))
            .finish()
    }
}

impl Web {
    /// Reads and checks `path`: Err names the key that is wrong (`tls_server_config.
    /// cert_file: cannot read /x: No such file or directory`).
    pub fn load(path: &Path) -> Result<Web, String> {
        let text = input::read_text(path, input::MAX_CONFIG_BYTES)
            .map_err(|e| format!("cannot read it: {e}"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut web = Web::parse(&text, base)?;
        web.source = path.to_owned();
        Ok(web)
    }

    /// Checks the text of a web config file; relative paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Web, String> {
        // An empty file (or one of comments) is an empty config, as for the exporters.
        let file: File = if text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#') || l == "---"
        }) {
            File::default()
        } else {
            serde_norway::from_str(text).map_err(|e| e.to_string())?
        };
        let mut users = HashMap::new();
        for (user, hash) in file.basic_auth_users {
            let field = format!("basic_auth_users.{}", crate::format::text::escape(&user));
            if user.is_empty() || user.contains(':') {
                return Err(format!("{field}: a user name is not empty and has no ':'"));
            }
            let parts: bcrypt::HashParts = hash.parse().map_err(|e| {
                format!(
                    "{field}: not a bcrypt hash ({e}); make one with `htpasswd -nbB USER PASSWORD`"
                )
            })?;
            if !hash.starts_with("$2") {
                return Err(format!("{field}: not a bcrypt hash ($2a$, $2b$ or $2y$)"));
            }
            if parts.get_cost() > MAX_COST {
                return Err(format!(
                    "{field}: cost {} is too slow to check (at most {MAX_COST}; 10 is usual)",
                    parts.get_cost()
                ));
            }
            users.insert(user, hash);
        }
        let auth = (!users.is_empty()).then(|| Arc::new(BasicAuth::new(users)));
        let (tls, client_auth) = match file.tls_server_config {
            Some(t) => {
                let (c, a) = tls_config(&t, base)?;
                (Some(c), a)
            }
            None => (None, ClientAuth::NoClientCert),
        };
        Ok(Web {
            source: PathBuf::new(),
            tls,
            client_auth,
            auth,
        })
    }

    /// Whether a client must prove who it is (a password or a verified certificate).
    pub fn authenticates(&self) -> bool {
        self.auth.is_some()
            || (self.tls.is_some() && self.client_auth == ClientAuth::RequireAndVerify)
    }

    /// `https` or `http`.
    pub fn scheme(web: Option<&Web>) -> &'static str {
        if web.is_some_and(|w| w.tls.is_some()) {
            "https"
        } else {
            "http"
        }
    }

    /// What guards the endpoint, for the log: `TLS, basic auth (1 user)`.
    pub fn describe(web: Option<&Web>) -> String {
        let Some(w) = web else {
            return "no TLS, no auth".into();
        };
        let mut parts = Vec::new();
        match (&w.tls, w.client_auth) {
            (None, _) => parts.push("no TLS".to_owned()),
            (Some(_), ClientAuth::NoClientCert) => parts.push("TLS".into()),
            (Some(_), ClientAuth::VerifyIfGiven) => {
                parts.push("TLS, client certificates verified when given".into())
            }
            (Some(_), ClientAuth::RequireAndVerify) => {
                parts.push("TLS, client certificate required".into())
            }
        }
        match &w.auth {
            Some(a) => parts.push(format!(
                "basic auth ({} user{})",
                a.users.len(),
                if a.users.len() == 1 { "" } else { "s" }
            )),
            None => parts.push("no basic auth".into()),
        }
        parts.join(", ")
    }
}

/// The one-line warning for an endpoint that any peer reaching `listen` could read, or
/// whose passwords cross the network in the clear; None on loopback or when guarded.
pub fn exposure_warning(listen: SocketAddr, web: Option<&Web>) -> Option<String> {
    if listen.ip().is_loopback() {
        return None;
    }
    let what = match web {
        None => {
            "without TLS or basic auth: anyone who reaches it reads process, executable and lock names"
        }
        Some(w) if !w.authenticates() => {
            "without basic auth or a required client certificate: anyone who reaches it reads process, executable and lock names"
        }
        Some(w) if w.tls.is_none() => {
            "with basic auth but without TLS: passwords and metrics cross the network in the clear"
        }
        Some(_) => return None,
    };
    Some(format!(
        "rtm-trace agent: warning: serving on {listen}, beyond loopback, {what} (web_config_file: docs/agent.md)"
    ))
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::{auth::MAX_CHECKS, *};

    fn parse(text: &str) -> Result<Web, String> {
        Web::parse(text, Path::new("/nonexistent-dir"))
    }

    fn basic(user: &str, pass: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
        .into_bytes()
    }

    #[test]
    fn an_empty_file_is_an_empty_config() {
        for text in ["", "# nothing\n", "---\n"] {
            let w = parse(text).unwrap();
            assert!(w.tls.is_none() && w.auth.is_none(), "{text:?}");
            assert!(!w.authenticates());
        }
        let w = parse("basic_auth_users: {}\n").unwrap();
        assert!(w.auth.is_none());
    }

    #[test]
    fn bad_files_are_refused_with_the_key_named() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        for (text, says) in [
            ("bogus: 1\n", "unknown field `bogus`"),
            ("tls_server_config:\n  cert: x\n", "unknown field `cert`"),
            (
                "basic_auth_users:\n  alice: plain-text\n",
                "basic_auth_users.alice: not a bcrypt hash",
            ),
            (
                "basic_auth_users:\n  alice: \"$2y$10$tooshort\"\n",
                "basic_auth_users.alice",
            ),
            (
                &format!("basic_auth_users:\n  \"a:b\": \"{hash}\"\n"),
                "has no ':'",
            ),
            (
                &format!(
                    "basic_auth_users:\n  alice: \"{}\"\n",
                    hash.replacen("$04$", "$20$", 1)
                ),
                "cost 20",
            ),
            (
                "tls_server_config:\n  key_file: k.pem\n",
                "tls_server_config.cert_file: missing",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n",
                "tls_server_config.key_file: missing",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n",
                "tls_server_config.cert_file: cannot read /nonexistent-dir/c.pem",
            ),
            (
                "basic_auth_users: [a, b]\n",
                "basic_auth_users: invalid type",
            ),
            ("tls_server_config: {cert_file: x\n", "at line"),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    /// A certificate and key made by the openssl command (none is kept in the repo).
    fn make_cert(dir: &Path) -> Option<(PathBuf, PathBuf)> {
        let (crt, key) = (dir.join("c.pem"), dir.join("k.pem"));
        let ok = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some((crt, key))
    }

    #[test]
    fn tls_settings_are_checked_against_each_other() {
        let dir = std::env::temp_dir().join(format!("rtm-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let Some((crt, key)) = make_cert(&dir) else {
            let msg = "tls_settings...: NOT RUN: the openssl command is missing";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("{msg}");
            return;
        };
        let p = |text: &str| Web::parse(text, &dir);
        let tls = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n";
        let w = p(tls).unwrap();
        assert!(w.tls.is_some() && !w.authenticates());
        assert_eq!(Web::scheme(Some(&w)), "https");
        let w = p(&format!(
            "{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
            crt.display()
        ))
        .unwrap();
        assert_eq!(w.client_auth, ClientAuth::RequireAndVerify);
        assert!(w.authenticates());
        for (extra, says) in [
            (
                "  client_auth_type: RequireAndVerifyClientCert\n",
                "client_ca_file: missing",
            ),
            (
                "  client_auth_type: RequireAnyClientCert\n",
                "does not verify",
            ),
            (
                "  client_auth_type: Sometimes\n",
                "client_auth_type: \"Sometimes\" is not one of",
            ),
            (
                "  client_ca_file: c.pem\n",
                "client_auth_type is NoClientCert",
            ),
            ("  min_version: TLS10\n", "min_version"),
        ] {
            let e = p(&format!("{tls}{extra}")).expect_err(extra);
            assert!(e.contains(says), "{extra}: {e}");
        }
        // The key of another certificate; a key file given as the certificate.
        let other = dir.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let (_, key2) = make_cert(&other).unwrap();
        let e = p(&format!(
            "tls_server_config:\n  cert_file: c.pem\n  key_file: {}\n",
            key2.display()
        ))
        .expect_err("mismatched key");
        assert!(
            e.contains("tls_server_config.key_file") && e.contains("does not go with"),
            "{e}"
        );
        let e = p(&format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: k.pem\n",
            key.display()
        ))
        .expect_err("a key as the certificate");
        assert!(
            e.contains("tls_server_config.cert_file") && e.contains("no PEM certificate"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn basic_auth_checks_the_hash_and_remembers_what_passed() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let w = parse(&format!("basic_auth_users:\n  prometheus: \"{hash}\"\n")).unwrap();
        assert!(w.authenticates());
        let a = w.auth.unwrap();
        let good = basic("prometheus", "s3cret");
        assert_eq!(a.quick(None), Some(Verdict::Fail));
        assert_eq!(a.quick(Some(b"Bearer abc")), Some(Verdict::Fail));
        assert_eq!(a.quick(Some(b"Basic !!!")), Some(Verdict::Fail));
        assert_eq!(a.quick(Some(&good)), None, "not checked yet");
        assert_eq!(a.slow(Some(&basic("prometheus", "wrong"))), Verdict::Fail);
        assert_eq!(a.slow(Some(&basic("nobody", "s3cret"))), Verdict::Fail);
        assert_eq!(
            a.quick(Some(&basic("prometheus", "wrong"))),
            None,
            "failures are not remembered"
        );
        assert_eq!(a.slow(Some(&good)), Verdict::Pass);
        assert_eq!(a.quick(Some(&good)), Some(Verdict::Pass));
        // Case of the scheme does not matter; of the password it does.
        let lower = String::from_utf8(good.clone())
            .unwrap()
            .replacen("Basic", "basic", 1);
        assert_eq!(a.quick(Some(lower.as_bytes())), Some(Verdict::Pass));
        assert_eq!(a.slow(Some(&basic("prometheus", "S3cret"))), Verdict::Fail);
        // A password with a colon in it.
        let hash = bcrypt::hash("a:b", 4).unwrap();
        let w = parse(&format!("basic_auth_users:\n  u: \"{hash}\"\n")).unwrap();
        assert_eq!(
            w.auth.unwrap().slow(Some(&basic("u", "a:b"))),
            Verdict::Pass
        );
    }

    #[tokio::test]
    async fn checks_under_way_are_bounded() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let w = parse(&format!("basic_auth_users:\n  u: \"{hash}\"\n")).unwrap();
        let a = w.auth.unwrap();
        // Every place taken (by checks whose clients may have gone): busy, not queued.
        let held: Vec<_> = (0..MAX_CHECKS)
            .map(|_| a.checks.clone().try_acquire_owned().unwrap())
            .collect();
        assert_eq!(a.check(Some(basic("u", "pw"))).await, Verdict::Busy);
        assert_eq!(a.check(None).await, Verdict::Fail, "no check needed");
        drop(held);
        assert_eq!(a.check(Some(basic("u", "pw"))).await, Verdict::Pass);
        // Remembered: no place needed any more.
        let held: Vec<_> = (0..MAX_CHECKS)
            .map(|_| a.checks.clone().try_acquire_owned().unwrap())
            .collect();
        assert_eq!(a.check(Some(basic("u", "pw"))).await, Verdict::Pass);
        drop(held);
    }

    #[test]
    fn beyond_loopback_without_tls_and_auth_is_warned_about() {
        let lo: SocketAddr = "127.0.0.1:7470".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7470".parse().unwrap();
        let all: SocketAddr = "0.0.0.0:7470".parse().unwrap();
        assert_eq!(exposure_warning(lo, None), None);
        assert_eq!(exposure_warning(lo6, None), None);
        let w = exposure_warning(all, None).unwrap();
        assert!(
            w.contains("warning") && w.contains("without TLS or basic auth"),
            "{w}"
        );
        assert!(!w.contains('\n'));
        let hash = bcrypt::hash("pw", 4).unwrap();
        let auth_only = parse(&format!("basic_auth_users:\n  u: \"{hash}\"\n")).unwrap();
        let w = exposure_warning(all, Some(&auth_only)).unwrap();
        assert!(w.contains("in the clear"), "{w}");
        assert_eq!(
            Web::describe(Some(&auth_only)),
            "no TLS, basic auth (1 user)"
        );
        assert_eq!(Web::describe(None), "no TLS, no auth");
    }
}
