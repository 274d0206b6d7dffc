//! Test certificates made with rcgen: a CA, server certificates and client certificates it signs.

use std::fmt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::HarnessError;
use crate::fsutil::{write_file, write_private_file};

fn cert_err(what: &str, e: rcgen::Error) -> HarnessError {
    HarnessError::Certificate(format!("{what}: {e}"))
}

/// A certificate authority made for one test run (ECDSA P-256, self-signed).
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    cert_pem: String,
}

impl TestCa {
    /// Makes a new CA whose subject common name is `common_name`.
    pub fn new(common_name: &str) -> Result<Self, HarnessError> {
        let key = KeyPair::generate().map_err(|e| cert_err("generating the CA key", e))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(|e| cert_err("self-signing the CA", e))?;
        let cert_pem = cert.pem();
        Ok(TestCa {
            cert,
            key,
            cert_pem,
        })
    }

    /// The CA certificate in PEM, for clients and servers to trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a server certificate for `names` (DNS names or IP addresses, e.g. `localhost`,
    /// `127.0.0.1`), with the server-auth extended key usage.
    pub fn issue_server_cert(&self, names: &[&str]) -> Result<IssuedCert, HarnessError> {
        self.sign(server_params(names)?, "server")
    }

    /// As [`TestCa::issue_server_cert`], valid for the next `days` days only (rcgen's default
    /// runs to the year 4096, which an Erlang server cannot set an expiry timer for: ejabberd's
    /// certificate manager crashes on it).
    pub fn issue_server_cert_for_days(
        &self,
        names: &[&str],
        days: u64,
    ) -> Result<IssuedCert, HarnessError> {
        let mut params = server_params(names)?;
        let today = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() / 86_400)
            .unwrap_or(0);
        let (y, m, d) = civil_from_days(today + days);
        params.not_after = rcgen::date_time_ymd(y, m, d);
        self.sign(params, "server")
    }

    /// Issues a client certificate with subject common name `common_name`, with the
    /// client-auth extended key usage (for mutual TLS).
    pub fn issue_client_cert(&self, common_name: &str) -> Result<IssuedCert, HarnessError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        self.sign(params, "client")
    }

    fn sign(&self, params: CertificateParams, what: &str) -> Result<IssuedCert, HarnessError> {
        let key =
            KeyPair::generate().map_err(|e| cert_err(&format!("generating the {what} key"), e))?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(|e| cert_err(&format!("signing the {what} certificate"), e))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa")
            .field("cert_pem", &self.cert_pem)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A certificate and its private key, both PEM (the key is PKCS#8).
#[derive(Clone)]
pub struct IssuedCert {
    cert_pem: String,
    key_pem: String,
}

impl IssuedCert {
    /// Wraps a certificate and key given as PEM.
    pub fn from_pem(cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        IssuedCert {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
        }
    }

    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Writes `<stem>.crt` and `<stem>.key` (mode 0600) into `dir`; returns both paths.
    pub fn write_to(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf), HarnessError> {
        let cert_path = dir.join(format!("{stem}.crt"));
        let key_path = dir.join(format!("{stem}.key"));
        write_file(&cert_path, self.cert_pem.as_bytes())?;
        write_private_file(&key_path, self.key_pem.as_bytes())?;
        Ok((cert_path, key_path))
    }
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The proleptic Gregorian date of `days` days after 1970-01-01.
fn civil_from_days(days: u64) -> (i32, u8, u8) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m as u8, d as u8)
}

/// A server certificate's parameters for `names`, with the server-auth extended key usage.
fn server_params(names: &[&str]) -> Result<CertificateParams, HarnessError> {
    let sans: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params =
        CertificateParams::new(sans).map_err(|e| cert_err("building the server certificate", e))?;
    let cn = names.first().copied().unwrap_or("server");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    Ok(params)
}
