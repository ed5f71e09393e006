use super::*;

#[test]
fn open_server_answers_loopback_hosts_and_origins_only() {
    use axum::http::{HeaderMap, HeaderValue};
    let open = Auth::new(&[], vec![7; 32]).allowing_hosts(&["Stead.Internal".into()]);
    let check = |host: Option<&str>, origin: Option<&str>| {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert("host", HeaderValue::from_str(host).unwrap());
        }
        if let Some(origin) = origin {
            headers.insert("origin", HeaderValue::from_str(origin).unwrap());
        }
        open.check_request_origin(&headers).map_err(|e| e.code)
    };
    for host in [
        "127.0.0.1:8787",
        "127.9.9.9",
        "localhost",
        "LOCALHOST:80",
        "app.localhost:1",
        "[::1]:8787",
        "[::1]",
        "stead.internal:8787",
    ] {
        assert_eq!(check(Some(host), None), Ok(()), "{host}");
    }
    for host in [
        "evil.example:8787",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "10.0.0.1",
        "[::2]:8787",
        "user@127.0.0.1",
        "127.0.0.1:notaport",
        "",
    ] {
        assert_eq!(
            check(Some(host), None),
            Err(ErrorCode::HostNotAllowed),
            "{host}"
        );
    }
    assert_eq!(check(None, None), Ok(()));
    assert_eq!(
        check(Some("127.0.0.1:8787"), Some("http://127.0.0.1:8787")),
        Ok(())
    );
    assert_eq!(
        check(Some("127.0.0.1:8787"), Some("https://stead.internal")),
        Ok(())
    );
    for origin in [
        "https://evil.example",
        "null",
        "file://",
        "http://10.0.0.1:8787",
    ] {
        assert_eq!(
            check(Some("127.0.0.1:8787"), Some(origin)),
            Err(ErrorCode::OriginNotAllowed),
            "{origin}"
        );
    }
    // With API keys the credentials decide; neither header is checked.
    let keyed = Auth::new(&["first-key-0123456789".into()], vec![7; 32]);
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("evil.example"));
    headers.insert("origin", HeaderValue::from_static("https://evil.example"));
    assert!(keyed.check_request_origin(&headers).is_ok());
}

#[test]
fn session_tokens_carry_their_generation_and_expire() {
    let auth = Auth::new(&[], vec![7; 32]).with_token_ttl(Some(std::time::Duration::from_secs(60)));
    let id = Uuid::now_v7();
    let (token, expires) = auth.session_token(id, 3);
    let expires = expires.unwrap().timestamp();
    let claim = auth.session_claim(&token).unwrap();
    assert_eq!(
        claim,
        TokenClaim {
            session: id,
            generation: 3,
            expires
        }
    );
    assert_eq!(
        auth.authenticate_at(Some(&token), expires - 1),
        Ok(Principal::Session(id))
    );
    assert_eq!(
        auth.authenticate_at(Some(&token), expires)
            .unwrap_err()
            .code,
        ErrorCode::TokenExpired
    );
    // The generation and the expiry are signed: changing either breaks the token.
    let parts: Vec<&str> = token.split('.').collect();
    let other_generation = format!("{}.4.{}.{}", parts[0], parts[2], parts[3]);
    let later = format!("{}.3.{}.{}", parts[0], expires + 3600, parts[3]);
    let never = format!("{}.3.0.{}", parts[0], parts[3]);
    for forged in [other_generation, later, never] {
        assert_eq!(auth.session_claim(&forged), None, "{forged}");
        assert_eq!(
            auth.authenticate_at(Some(&forged), expires - 1)
                .unwrap_err()
                .code,
            ErrorCode::InvalidCredentials
        );
    }
    // A ticket opens the WebSocket only: it is no session token, and a token no ticket.
    let (ticket, _) = auth.ticket(id, 3, std::time::Duration::from_secs(60));
    let now = chrono::Utc::now().timestamp();
    assert_eq!(auth.ticket_claim(&ticket, now).map(|c| c.session), Some(id));
    assert_eq!(auth.session_claim(&ticket), None);
    assert_eq!(auth.ticket_claim(&token, now), None);
    assert_eq!(auth.ticket_claim(&ticket, now + 61), None, "expired");
    // The old `{id}.{signature}` shape is no token.
    let old = format!("{}.{}", parts[0], parts[3]);
    assert_eq!(auth.session_claim(&old), None);
}

#[test]
fn keys_tokens_and_scopes() {
    let hashed = format!("sha256:{}", hex(&Sha256::digest(b"second-key-0123456789")));
    let auth = Auth::new(&["first-key-0123456789".into(), hashed], vec![7; 32]);
    assert!(!auth.is_open());
    assert!(matches!(
        auth.identify("first-key-0123456789"),
        Some(Principal::ApiKey(_))
    ));
    assert!(matches!(
        auth.identify("second-key-0123456789"),
        Some(Principal::ApiKey(_))
    ));
    assert_eq!(auth.identify("first-key-012345678"), None);

    let a = Uuid::now_v7();
    let b = Uuid::now_v7();
    let (token, expires) = auth.session_token(a, 0);
    assert_eq!(expires, None);
    assert_eq!(auth.identify(&token), Some(Principal::Session(a)));
    // Another session's id with this signature, or a tampered signature, is refused.
    let forged = format!("{}.{}", b.simple(), token.split_once('.').unwrap().1);
    assert_eq!(auth.identify(&forged), None);
    let mut tampered = token.clone();
    tampered.pop();
    tampered.push('0');
    assert!(auth.identify(&tampered).is_none() || tampered == token);
    // Tokens from another secret do not verify.
    let other = Auth::new(&[], vec![8; 32]);
    assert_eq!(other.identify(&token), None);

    let session = Principal::Session(a);
    assert!(session.may_access(a) && !session.may_access(b));
    assert!(session.require_operator().is_err());
    assert_eq!(
        auth.authenticate(None).unwrap_err().code,
        "missing_credentials"
    );
    assert_eq!(other.authenticate(None).unwrap(), Principal::Local);
    // An open server ignores API keys (OpenAI SDKs always send one)…
    assert_eq!(
        other.authenticate(Some("sk-anything")).unwrap(),
        Principal::Local
    );
    // …but not a session token that does not verify.
    assert_eq!(
        other.authenticate(Some(&forged)).unwrap_err().code,
        "invalid_credentials"
    );
    // A server with keys refuses an unknown one.
    assert_eq!(
        auth.authenticate(Some("nope")).unwrap_err().code,
        "invalid_credentials"
    );
}
