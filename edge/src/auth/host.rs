//! Host names of `Host` headers and origins, and which of them are loopback.

/// The host name of a `Host` header value or an origin's authority, lower-cased and without
/// port or IPv6 brackets; `None` when it is not shaped like one.
pub(super) fn host_name(authority: &str) -> Option<String> {
    let authority = authority.trim().trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '@', ' ']) {
        return None;
    }
    let name = if let Some(rest) = authority.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        name
    } else {
        match authority.rsplit_once(':') {
            Some((name, port)) if is_port(port) && !name.contains(':') => name,
            Some(_) => return None,
            None => authority,
        }
    };
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// `localhost`, `*.localhost` (RFC 6761 reserves them for loopback), `127.0.0.0/8` and `::1`.
pub(super) fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
