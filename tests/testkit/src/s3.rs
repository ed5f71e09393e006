//! A real S3-compatible server for the artifact store's S3 tests: moto's server (`moto[server]`
//! from PyPI, which `scripts/test.sh` installs and names in `MOTO_SERVER`), started on a free
//! loopback port with one bucket. It takes any access key; requests are signed as for AWS.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; killed when dropped.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub bucket: String,
}

impl S3Server {
    /// Starts the server and creates `bucket` in it.
    pub async fn start(bucket: &str) -> S3Server {
        let binary = std::env::var("MOTO_SERVER").expect(
            "MOTO_SERVER must name moto's server (`pip install 'moto[server]'`; scripts/test.sh does)",
        );
        let port = crate::stead::free_port();
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: bucket.to_string(),
        };
        // Creating the bucket (moto takes it unsigned) is also the readiness check.
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::Client::new();
        loop {
            let created = client
                .put(format!("{}/{bucket}", server.endpoint))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if created {
                return server;
            }
            assert!(Instant::now() < deadline, "moto's server did not start");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `[artifacts] store` table naming this server, its keys in the variables
    /// `S3_TEST_KEY` and `S3_TEST_SECRET` (see [`S3Server::ENV`]).
    pub fn store_toml(&self, prefix: &str) -> String {
        format!(
            "{{ kind = \"s3\", bucket = \"{}\", endpoint = \"{}\", prefix = \"{prefix}\", \
             access_key_env = \"S3_TEST_KEY\", secret_key_env = \"S3_TEST_SECRET\" }}",
            self.bucket, self.endpoint
        )
    }

    /// The environment [`S3Server::store_toml`] reads its keys from (any key works on moto).
    pub const ENV: [(&'static str, &'static str); 2] =
        [("S3_TEST_KEY", "testing"), ("S3_TEST_SECRET", "testing")];
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
