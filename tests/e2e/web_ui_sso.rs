//! The web UI's sign-in in a real browser against a real OpenID Connect provider: npm
//! `oidc-provider` 8.x (`tests/fixtures/oidc-provider/provider.mjs`: a public client with PKCE,
//! JWT access tokens for `urn:stead:api` signed with the test RSA key). `web-ui/e2e/signin.mjs`
//! drives Debian's Chromium: "Sign in" → the provider's login and consent pages → back to the
//! web UI, which exchanges the code and calls the API with the access token; the person (who
//! maps to project `team-a` as a member) creates a session there. Screenshots go to
//! `{target}/tmp/web-ui-screenshots/` beside the other browser tests'.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::{free_port, Stead};
use stead_testkit::upstream::{Reply, Upstream};

const ADMIN: &str = "installation-admin-key-0123456789";

/// The provider's process, stopped when dropped.
struct Provider(Child);

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn provider(port: u16, redirect_uri: &str) -> Provider {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oidc-provider");
    assert!(
        root.join("node_modules/oidc-provider").is_dir(),
        "needs `npm ci` in tests/fixtures/oidc-provider (scripts/test.sh runs it)"
    );
    let mut child = Command::new("node")
        .current_dir(&root)
        .arg("provider.mjs")
        .arg(port.to_string())
        .arg(redirect_uri)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.contains("issuer"),
        "the provider did not start: {line}"
    );
    // It goes on printing (its notices): keep reading, or its writes fail and it stops.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Provider(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_to_the_web_ui_with_the_identity_provider() {
    let port = free_port();
    let up = Upstream::start(vec![], Reply::text("Hello.")).await;
    let config = up.config(
        "default",
        r#"model = "m""#,
        &format!(
            "[server]\napi_keys = [\"{ADMIN}\"]\n\n\
             [server.oidc]\nissuer = \"http://127.0.0.1:{port}\"\naudience = \"urn:stead:api\"\n\
             client_id = \"stead-web\"\n\
             map = [{{ claim = \"groups\", value = \"team-a\", project = \"team-a\", role = \"member\" }}]\n\n\
             [[agents]]\nname = \"ops\"\nroute = \"default\"\nsystem_prompt = \"You run operations.\"\n"
        ),
    );
    let mut server = Stead::start(&config, None);
    server.api_key = Some(ADMIN.into());
    let _provider = provider(port, &format!("{}/", server.base));
    let (status, _) = server
        .call("POST", "/v1/projects", Some(json!({"name": "team-a"})))
        .await;
    assert_eq!(status, 201);
    // Before signing in, the page may ask where to sign in (a public endpoint).
    let (status, sign_in) = server.call_as("GET", "/v1/auth/oidc", None, None).await;
    assert_eq!(
        (status, sign_in["client_id"].as_str()),
        (200, Some("stead-web"))
    );

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    let shots = ["35-provider-login", "36-signed-in"];
    external::browser(
        "signin.mjs",
        &[&server.base, &out.to_string_lossy()],
        &[],
        &out,
        &shots,
    )
    .await;
    // The session the person created is in their project, made by them.
    let (_, trail) = server
        .call("GET", "/v1/audit?action=POST%20/v1/sessions", None)
        .await;
    let (_, project) = server.call("GET", "/v1/projects/team-a", None).await;
    let made = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["actor"] == "user:alice")
        .cloned()
        .unwrap_or_else(|| panic!("{trail}"));
    assert_eq!(made["project_id"], project["id"]);
    server.signal(libc::SIGTERM);
}
