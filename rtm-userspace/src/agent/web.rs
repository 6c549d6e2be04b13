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

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use base64::Engine as _;

use crate::session::input;
use serde::Deserialize;
use tokio_rustls::rustls::{
    self, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

/// The web config file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: HashMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
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
            let field = format!("basic_auth_users.{}", crate::output::text::escape(&user));
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

/// Most bcrypt cost taken: 2^16 rounds is ~4 s a check.
const MAX_COST: u32 = 16;

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

fn tls_config(t: &TlsFile, base: &Path) -> Result<(Arc<ServerConfig>, ClientAuth), String> {
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

/// Basic auth against bcrypt hashes. A bcrypt check costs tens of milliseconds by
/// design, so each user and password that passed is remembered (as a keyed hash, never
/// the password), at most CACHE_ENTRIES of them: a scraper every 15 s pays it once.
/// Checks run off the endpoint's thread (two at once on its blocking threads), at most
/// MAX_CHECKS running or waiting, counted until each ends even when its client has gone:
/// a stream of wrong passwords neither stalls `/healthz` nor queues work without bound
/// (past it, 503 until a check ends).
pub struct BasicAuth {
    users: HashMap<String, String>,
    key: ring::hmac::Key,
    passed: Mutex<Passed>,
    checks: Arc<tokio::sync::Semaphore>,
}

/// Most bcrypt checks running or waiting at once.
pub const MAX_CHECKS: usize = 8;

/// Most users and passwords remembered as passed.
pub const CACHE_ENTRIES: usize = 64;

#[derive(Default)]
struct Passed {
    set: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl Passed {
    fn insert(&mut self, k: [u8; 32]) {
        if !self.set.insert(k) {
            return;
        }
        self.order.push_back(k);
        while self.order.len() > CACHE_ENTRIES {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// What an `Authorization` header came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let in.
    Pass,
    /// Refused: 401.
    Fail,
    /// Too many checks under way: 503.
    Busy,
}

impl BasicAuth {
    fn new(users: HashMap<String, String>) -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system's random source");
        Self {
            users,
            key,
            passed: Mutex::new(Passed::default()),
            checks: Arc::new(tokio::sync::Semaphore::new(MAX_CHECKS)),
        }
    }

    fn tag(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_le_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password);
        let mut out = [0; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    /// Splits `Basic base64(user:password)`; None when it is not that.
    fn credentials(header: Option<&[u8]>) -> Option<(String, Vec<u8>)> {
        let h = std::str::from_utf8(header?).ok()?.trim();
        let (scheme, b64) = h.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .ok()?;
        let colon = raw.iter().position(|&b| b == b':')?;
        let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
        Some((user, raw[colon + 1..].to_vec()))
    }

    /// Checks an `Authorization` header at once when it can be (absent, malformed, or a
    /// user and password that passed before); None when a bcrypt check is needed.
    pub fn quick(&self, header: Option<&[u8]>) -> Option<Verdict> {
        let Some((user, password)) = Self::credentials(header) else {
            return Some(Verdict::Fail);
        };
        let tag = self.tag(&user, &password);
        let passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        passed.set.contains(&tag).then_some(Verdict::Pass)
    }

    /// The full check (bcrypt; slow by design): to run off the endpoint's thread.
    pub fn slow(&self, header: Option<&[u8]>) -> Verdict {
        let Some((user, password)) = Self::credentials(header) else {
            return Verdict::Fail;
        };
        let ok = match self.users.get(&user) {
            Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
            None => {
                // As long as for a known user: the time does not tell who exists.
                if let Some(hash) = self.users.values().next() {
                    let _ = bcrypt::verify(b"\0not a password", hash);
                }
                false
            }
        };
        if !ok {
            return Verdict::Fail;
        }
        let tag = self.tag(&user, &password);
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tag);
        Verdict::Pass
    }

    /// Checks a header: the quick way, else bcrypt on the runtime's blocking threads.
    pub async fn check(self: &Arc<Self>, header: Option<Vec<u8>>) -> Verdict {
        if let Some(v) = self.quick(header.as_deref()) {
            return v;
        }
        let Ok(permit) = self.checks.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let v = me.slow(header.as_deref());
            drop(permit);
            v
        })
        .await
        .unwrap_or(Verdict::Fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_cache_of_passed_checks_is_bounded() {
        let mut p = Passed::default();
        for i in 0..(CACHE_ENTRIES as u8 + 10) {
            p.insert([i; 32]);
            p.insert([i; 32]);
        }
        assert_eq!(p.set.len(), CACHE_ENTRIES);
        assert_eq!(p.order.len(), CACHE_ENTRIES);
        assert!(!p.set.contains(&[0; 32]), "the oldest went first");
        assert!(p.set.contains(&[CACHE_ENTRIES as u8 + 9; 32]));
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
