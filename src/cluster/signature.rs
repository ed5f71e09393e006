//! The node signature on forwarded requests (docs/cluster.md, "Forwarding"): HMAC-SHA256 with
//! the cluster secret over the sending node, the node it is for, the time, a nonce, the
//! method, the path with its query and the SHA-256 of the body. A signature verifies only on
//! the node it names, within [`WINDOW_SECS`] of its time, once (its nonce is remembered for
//! the window), and only with the body it was made for (the edge hashes the body it read
//! against [`stead_http::cluster::BODY_HASH_HEADER`]).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, Method, Uri};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
pub use stead_http::cluster::NODE_HEADER;
use stead_http::cluster::{Origin, BODY_HASH_HEADER};

pub const TIME_HEADER: &str = "x-stead-node-time";
pub const NONCE_HEADER: &str = "x-stead-node-nonce";
pub const SIGNATURE_HEADER: &str = "x-stead-node-signature";
/// How old (or how far ahead) a node signature may be.
pub const WINDOW_SECS: u64 = 60;

/// Signs this node's forwards and checks other nodes' signatures.
pub struct Signer {
    secret: std::sync::Arc<Vec<u8>>,
    node: String,
    /// Nonces of verified signatures, with their times: each verifies once.
    seen: Mutex<HashMap<String, i64>>,
}

/// What a signature covers.
struct Signed<'a> {
    from: &'a str,
    to: &'a str,
    time: i64,
    nonce: &'a str,
    method: &'a Method,
    path: &'a str,
    body_sha256: &'a str,
}

impl Signer {
    pub fn new(secret: std::sync::Arc<Vec<u8>>, node: String) -> Self {
        Signer {
            secret,
            node,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self, signed: &Signed<'_>) -> Hmac<Sha256> {
        #[allow(clippy::expect_used)]
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        let Signed {
            from,
            to,
            time,
            nonce,
            method,
            path,
            body_sha256,
        } = signed;
        mac.update(
            format!("stead-node-2\n{from}\n{to}\n{time}\n{nonce}\n{method}\n{path}\n{body_sha256}")
                .as_bytes(),
        );
        mac
    }

    /// The headers that sign a request for node `to`: `method` on `url` with `body`.
    pub fn sign(
        &self,
        to: &str,
        method: &Method,
        url: &url::Url,
        body: &[u8],
    ) -> Vec<(&'static str, String)> {
        let time = chrono::Utc::now().timestamp();
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        };
        let body_sha256 = body_hash(body);
        let signature = hex(&self
            .mac(&Signed {
                from: &self.node,
                to,
                time,
                nonce: &nonce,
                method,
                path: &path,
                body_sha256: &body_sha256,
            })
            .finalize()
            .into_bytes());
        vec![
            (NODE_HEADER, self.node.clone()),
            (TIME_HEADER, time.to_string()),
            (NONCE_HEADER, nonce),
            (BODY_HASH_HEADER, body_sha256),
            (SIGNATURE_HEADER, signature),
        ]
    }

    /// Where a request came to this node from: a client (no node header), another node (a
    /// signature that verifies, for this node, fresh and not seen before — its body still to
    /// be checked against its hash), or a forgery.
    pub fn origin(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Origin {
        let Some(from) = header(headers, NODE_HEADER) else {
            return Origin::Client;
        };
        let verified = (|| {
            let time: i64 = header(headers, TIME_HEADER)?.parse().ok()?;
            let now = chrono::Utc::now().timestamp();
            if now.abs_diff(time) > WINDOW_SECS {
                return None;
            }
            let nonce = header(headers, NONCE_HEADER)?;
            let given = unhex(header(headers, SIGNATURE_HEADER)?)?;
            let signed = Signed {
                from,
                to: &self.node,
                time,
                nonce,
                method,
                path: uri.path_and_query().map_or("/", |p| p.as_str()),
                body_sha256: header(headers, BODY_HASH_HEADER)?,
            };
            self.mac(&signed).verify_slice(&given).ok()?;
            self.first_use(nonce, now).then_some(())
        })();
        match verified {
            Some(()) => Origin::Node,
            None => Origin::Forged,
        }
    }

    /// Records `nonce`; false when it was seen within the window (a replay). Entries older
    /// than the window are dropped as new ones come (only verified signatures, which need the
    /// cluster secret, add entries).
    fn first_use(&self, nonce: &str, now: i64) -> bool {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() > 1024 {
            seen.retain(|_, at| now.abs_diff(*at) <= 2 * WINDOW_SECS);
        }
        seen.insert(nonce.to_string(), now).is_none()
    }
}

/// The lowercase hex SHA-256 of a body, as [`BODY_HASH_HEADER`] carries it.
pub fn body_hash(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(signer: &Signer, to: &str, method: &Method, url: &str, body: &[u8]) -> HeaderMap {
        let url = url::Url::parse(url).unwrap();
        let mut headers = HeaderMap::new();
        for (name, value) in signer.sign(to, method, &url, body) {
            headers.insert(name, value.parse().unwrap());
        }
        headers
    }

    /// The signature covers the target node, the body's hash and a nonce;
    /// it verifies once.
    #[test]
    fn a_signature_verifies_once_for_its_node_path_and_body() {
        let secret = std::sync::Arc::new(b"cluster secret".to_vec());
        let a = Signer::new(secret.clone(), "node-a".into());
        let b = Signer::new(secret.clone(), "node-b".into());
        let c = Signer::new(secret, "node-c".into());
        let uri: Uri = "/v1/sessions/x/messages?wait=true".parse().unwrap();
        let url = "http://b/v1/sessions/x/messages?wait=true";
        let post = Method::POST;

        let headers = signed(&a, "node-b", &post, url, b"{\"text\":\"hi\"}");
        assert_eq!(
            headers[BODY_HASH_HEADER].to_str().unwrap(),
            body_hash(b"{\"text\":\"hi\"}")
        );
        assert_eq!(
            c.origin(&post, &uri, &headers),
            Origin::Forged,
            "another node"
        );
        assert_eq!(b.origin(&post, &uri, &headers), Origin::Node);
        assert_eq!(b.origin(&post, &uri, &headers), Origin::Forged, "a replay");

        // Another body's hash, another method or path: refused.
        let mut other = signed(&a, "node-b", &post, url, b"{}");
        other.insert(BODY_HASH_HEADER, body_hash(b"{\"x\":1}").parse().unwrap());
        assert_eq!(b.origin(&post, &uri, &other), Origin::Forged);
        let other = signed(&a, "node-b", &post, url, b"{}");
        assert_eq!(b.origin(&Method::DELETE, &uri, &other), Origin::Forged);
        let other = signed(&a, "node-b", &post, url, b"{}");
        let elsewhere: Uri = "/v1/sessions/y/messages?wait=true".parse().unwrap();
        assert_eq!(b.origin(&post, &elsewhere, &other), Origin::Forged);

        // Too old: refused; no node header: a client.
        let mut old = signed(&a, "node-b", &post, url, b"{}");
        old.insert(
            TIME_HEADER,
            (chrono::Utc::now().timestamp() - 2 * WINDOW_SECS as i64)
                .to_string()
                .parse()
                .unwrap(),
        );
        assert_eq!(b.origin(&post, &uri, &old), Origin::Forged);
        assert_eq!(b.origin(&post, &uri, &HeaderMap::new()), Origin::Client);
    }
}
