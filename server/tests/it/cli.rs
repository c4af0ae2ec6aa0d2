//! The `cardpool` binary as an operator runs it.

use std::process::Command;

fn cardpool() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cardpool"));
    for var in [
        "CARDPOOL_STRIPE_SECRET_KEY",
        "CARDPOOL_STRIPE_WEBHOOK_SECRET",
        "CARDPOOL_STRIPE_LOCAL",
        "CARDPOOL_CONFIG",
        "CARDPOOL_NATS_URL",
        "CARDPOOL_LOG_FORMAT",
    ] {
        command.env_remove(var);
    }
    command
}

#[test]
fn serve_without_stripe_keys_refuses_outside_demo_mode() {
    let dir = std::env::temp_dir().join(format!("cardpool-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/cli.db?mode=rwc", dir.display());
    let output =
        cardpool().current_dir(&dir).args(["serve", "--addr", "127.0.0.1:0", "--database-url", &url]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no Stripe keys configured"), "{stderr}");
    assert!(stderr.contains("CARDPOOL_STRIPE_SECRET_KEY"), "{stderr}");

    // A key without its webhook secret is refused too, and the key is not printed.
    let output = cardpool()
        .current_dir(&dir)
        .env("CARDPOOL_STRIPE_SECRET_KEY", "sk_live_do_not_print_me")
        .args(["serve", "--addr", "127.0.0.1:0", "--database-url", &url])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let all = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(all.contains("no webhook signing secret"), "{all}");
    assert!(!all.contains("do_not_print_me"), "{all}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A cluster (`nats_url` set) needs PostgreSQL and Stripe keys: SQLite and the in-process local
/// Stripe are refused with what to do instead. Logs are JSON lines when asked.
#[test]
fn a_cluster_replica_refuses_sqlite_and_the_in_process_stripe() {
    let dir = std::env::temp_dir().join(format!("cardpool-cli-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = format!("sqlite://{}/cli.db?mode=rwc", dir.display());
    let output = cardpool()
        .current_dir(&dir)
        .env("CARDPOOL_NATS_URL", "nats://127.0.0.1:4222")
        .args(["--log-format", "json", "serve", "--demo", "--addr", "127.0.0.1:0", "--database-url", &sqlite])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("replicas need one PostgreSQL"), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let first: serde_json::Value =
        serde_json::from_str(stdout.lines().next().unwrap_or_default()).expect("a JSON log line");
    assert_eq!(first["fields"]["message"], "starting", "{stdout}");

    let postgres = "postgres://postgres@127.0.0.1:5432/cardpool_cli_never_created";
    let output = cardpool()
        .current_dir(&dir)
        .env("CARDPOOL_NATS_URL", "nats://127.0.0.1:4222")
        .args(["serve", "--demo", "--addr", "127.0.0.1:0", "--database-url", postgres])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot use the in-process local Stripe") && stderr.contains("stripe-local"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The three settings `cardpool stripe-local --env-file` writes, once it has.
fn settings_written(env_file: &std::path::Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let settings = std::fs::read_to_string(env_file).unwrap_or_default();
        if settings.lines().count() >= 3 {
            return settings;
        }
        assert!(std::time::Instant::now() < deadline, "no settings written");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `cardpool stripe-local` runs the test-mode Stripe on its own and writes the settings the
/// replicas need; it answers as Stripe does.
#[test]
fn stripe_local_runs_on_its_own_and_says_how_to_reach_it() {
    let dir = std::env::temp_dir().join(format!("cardpool-cli-stripe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let env_file = dir.join("stripe.env");
    let mut child = cardpool()
        .args(["stripe-local", "--addr", "127.0.0.1:0", "--cardpool-url", "http://127.0.0.1:9"])
        .arg("--env-file")
        .arg(&env_file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let settings = settings_written(&env_file);
    let value =
        |key: &str| settings.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap_or_default().to_owned();
    assert!(value("CARDPOOL_STRIPE_SECRET_KEY").starts_with("sk_test_"), "{settings}");
    assert!(value("CARDPOOL_STRIPE_WEBHOOK_SECRET").starts_with("whsec_"), "{settings}");
    let base = value("CARDPOOL_STRIPE_API_BASE");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777,
        0o600,
        "secrets are not world-readable"
    );
    // Stripe's API wants the key: without it, 401 as from Stripe.
    let addr = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read, Write};
    write!(stream, "GET /v1/accounts/acct_x HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// Behind a published port (a container listening on 0.0.0.0), `--public-url` is the address
/// the replicas are given and the one checkout pages are linked at; anything but an http(s) URL
/// is refused.
#[test]
fn stripe_local_names_its_public_url_when_it_listens_elsewhere() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("stripe.env");
    let public = format!("http://localhost:{port}");
    let mut child = cardpool()
        .args(["stripe-local", "--addr", &format!("127.0.0.1:{port}"), "--cardpool-url", "http://127.0.0.1:9"])
        .args(["--public-url", &format!("{public}/")])
        .arg("--env-file")
        .arg(&env_file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let settings = settings_written(&env_file);
    assert!(settings.contains(&format!("CARDPOOL_STRIPE_API_BASE={public}/\n")), "{settings}");
    let key = settings.lines().find_map(|l| l.strip_prefix("CARDPOOL_STRIPE_SECRET_KEY=")).unwrap().to_owned();
    let body = "success_url=http%3A%2F%2Fx%2Fok&line_items[0][price_data][unit_amount]=500&line_items[0][quantity]=1";
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    use std::io::{Read, Write};
    write!(
        stream,
        "POST /v1/checkout/sessions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("\"url\":\"{public}/checkout/cs_")), "checkout links the public URL: {answer}");
    child.kill().unwrap();
    child.wait().unwrap();

    let refused = cardpool()
        .args(["stripe-local", "--addr", "127.0.0.1:0", "--cardpool-url", "http://127.0.0.1:9"])
        .args(["--public-url", "localhost:12111"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--public-url must be an http"), "{refused:?}");
}
