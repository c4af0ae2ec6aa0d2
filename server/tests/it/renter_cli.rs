//! `cardpool-cli` as a renter uses it, against a real server with a real sandboxed agent and
//! the SSH gateway: login, offers, rent, ls, show, ssh, logs, stop, wallet, top-up, logout,
//! `--json`, `--explain`, and the exit codes scripts rely on. The CLI runs in-process through
//! `cardpool_cli::run`, exactly what its `main` does, with its terminal captured.

use crate::{
    common::{H100, PASSWORD, TestApp},
    ssh::keygen,
};
use cardpool_server::{config::Config, workers};
use cardpool_service::{Settings, testing::Backend};
use serde_json::Value;
use std::{path::Path, time::Duration};

/// One run of the CLI: its exit code and what it printed.
struct Ran {
    code: u8,
    out: String,
    err: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\nstdout: {}\nstderr: {}", self.code, self.out, self.err)
    }
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("--json printed JSON ({e}): {self}"))
    }
}

/// Runs `cardpool-cli --url <app> --config-dir <config> args...` with `stdin` as its input.
async fn cli(app: &TestApp, config: &Path, args: &[&str], stdin: &str) -> Ran {
    let (mut out, mut err, mut input) = (Vec::new(), Vec::new(), std::io::Cursor::new(stdin.as_bytes().to_vec()));
    let mut console = cardpool_cli::Console { out: &mut out, err: &mut err, input: &mut input, terminal: false };
    let config = config.to_string_lossy().into_owned();
    let argv = ["cardpool-cli", "--url", &app.base, "--config-dir", &config].into_iter().chain(args.iter().copied());
    let code = tokio::time::timeout(Duration::from_secs(90), cardpool_cli::run(argv, &mut console))
        .await
        .unwrap_or_else(|_| panic!("cardpool-cli {args:?} in time"));
    Ran { code, out: String::from_utf8_lossy(&out).into_owned(), err: String::from_utf8_lossy(&err).into_owned() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renter_goes_from_login_to_ssh_to_stop_in_a_terminal() {
    let run = from_login_to_stop(Backend::Sqlite);
    tokio::time::timeout(cardpool_service::testing::TEST_LIMIT, run).await.expect("the test hung");
}

async fn from_login_to_stop(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 10, ..Config::default() };
    let app = TestApp::spawn_configured(backend, Settings::default(), config).await;
    workers::spawn(&app.services, Duration::from_secs(10), Duration::ZERO, Duration::from_secs(1));
    let scratch = tempfile::tempdir().unwrap();
    let (host, _agent) = app.agent_host(2, scratch.path().join("rentals")).await;
    let host_id = host.state.host_id.to_string();
    let key = keygen(scratch.path(), "laptop").await;
    let known_hosts = scratch.path().join("known_hosts");
    let me = scratch.path().join("me");
    app.funded_renter("renter@example.com", 20).await;

    // Before logging in, every command says so with its own exit code.
    let ran = cli(&app, &me, &["ls"], "").await;
    assert_eq!(ran.code, 3, "{ran}");
    assert!(ran.err.contains("not logged in"), "{ran}");
    let wrong = cli(&app, &me, &["login", "--email", "renter@example.com", "--password-stdin"], "not it\n").await;
    assert_eq!(wrong.code, 3, "a wrong password: {wrong}");
    assert!(!me.join("credentials.json").exists(), "nothing saved for a failed login");

    let login =
        cli(&app, &me, &["login", "--email", "renter@example.com", "--password-stdin"], &format!("{PASSWORD}\n")).await;
    assert_eq!(login.code, 0, "{login}");
    assert!(login.out.contains("Logged in to") && login.out.contains("renter@example.com"), "{login}");
    let saved = std::fs::read_to_string(me.join("credentials.json")).unwrap();
    assert!(!saved.contains(PASSWORD), "the password is never stored");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(me.join("credentials.json")).unwrap().permissions().mode() & 0o777, 0o600);
    let whoami = cli(&app, &me, &["whoami", "--json"], "").await;
    assert_eq!(whoami.code, 0, "{whoami}");
    assert_eq!(whoami.json()["email"], "renter@example.com");

    // The market, as a table and as the API's JSON, with the web's filters.
    let offers = cli(&app, &me, &["offers", "--min-gpus", "2"], "").await;
    assert_eq!(offers.code, 0, "{offers}");
    assert!(offers.out.contains("H100") && offers.out.contains("$3.60"), "{offers}");
    let offers = cli(&app, &me, &["offers", "--json", "--host", &host_id], "").await;
    assert_eq!(offers.json()["offers"][0]["gpu_model"], H100, "{offers}");
    let none = cli(&app, &me, &["offers", "--json", "--min-gpus", "3"], "").await;
    assert_eq!(none.json()["offers"].as_array().map(Vec::len), Some(0), "{none}");

    // Bad input is refused before anything is sent; a rental nobody can pay for is a 7.
    let bad = cli(&app, &me, &["rent", "--host", &host_id, "--bid", "a lot"], "").await;
    assert_eq!(bad.code, 8, "{bad}");
    let usage = cli(&app, &me, &["rent", "--gpus", "two"], "").await;
    assert_eq!(usage.code, 2, "{usage}");

    // Rent one GPU with the laptop's key, wait for it to run.
    let public = key.with_extension("pub").to_string_lossy().into_owned();
    let command = "echo hello-from-the-cli; exec sleep infinity";
    let rent = cli(
        &app,
        &me,
        &["rent", "--host", &host_id, "--ssh-key", &public, "--command", command, "--wait", "--json"],
        "",
    )
    .await;
    assert_eq!(rent.code, 0, "{rent}");
    let rental = rent.json();
    assert_eq!(rental["state"], "running", "{rent}");
    assert!(rent.err.contains("running"), "the wait shows each state: {rent}");
    let id = rental["id"].as_i64().unwrap().to_string();

    let ls = cli(&app, &me, &["ls"], "").await;
    assert!(ls.code == 0 && ls.out.contains("running") && ls.out.lines().any(|l| l.starts_with(&id)), "{ls}");
    let show = cli(&app, &me, &["show", &id], "").await;
    assert_eq!(show.code, 0, "{show}");
    assert!(show.out.contains(&format!("ssh -p {} r{id}@127.0.0.1", app.ssh_port)), "{show}");
    assert!(show.out.contains(command), "{show}");

    // In over SSH through the gateway: the command runs inside the rental's sandbox.
    let options = ["BatchMode=yes", "IdentitiesOnly=yes", "StrictHostKeyChecking=accept-new", "LogLevel=ERROR"];
    let known = format!("UserKnownHostsFile={}", known_hosts.display());
    let key_path = key.to_string_lossy().into_owned();
    let mut args = vec!["ssh", &id, "-i", &key_path];
    for option in options.iter().copied().chain([known.as_str()]) {
        args.extend(["-o", option]);
    }
    args.extend(["--", "echo", "\"$(hostname):$((6 * 7))\""]);
    let ssh = cli(&app, &me, &args, "").await;
    assert_eq!(ssh.code, 0, "{ssh}");
    assert!(ssh.out.contains(&format!("rental-{id}:42")), "{ssh}");
    let printed = cli(&app, &me, &["ssh", &id, "--print"], "").await;
    assert_eq!(printed.out.trim(), format!("ssh -p {} -- r{id}@127.0.0.1", app.ssh_port), "{printed}");

    let logs = cli(&app, &me, &["logs", &id], "").await;
    assert!(logs.code == 0 && logs.out.contains("hello-from-the-cli"), "{logs}");

    // --explain shows each request as curl, the token as a variable, never its value.
    let explained = cli(&app, &me, &["--explain", "ls"], "").await;
    let token = serde_json::from_str::<Value>(&saved).unwrap()["token"].as_str().unwrap().to_owned();
    assert!(explained.err.contains(&format!("curl -X GET '{}/api/v1/rentals'", app.base)), "{explained}");
    assert!(explained.err.contains("$CARDPOOL_TOKEN") && !explained.err.contains(&token), "{explained}");

    // The cost advisor for a job on the same offer (a reliable job: no spot).
    let advice =
        cli(&app, &me, &["advise", "--host", &host_id, "--gpus", "1", "--hours", "8", "--deadline", "12"], "").await;
    assert_eq!(advice.code, 0, "{advice}");
    assert!(advice.out.contains("all on-demand $28.80") && advice.out.contains("no spot"), "{advice}");
    let late = cli(&app, &me, &["advise", "--host", &host_id, "--hours", "8", "--deadline", "4"], "").await;
    assert_eq!(late.code, 8, "{late}");

    // Caps on the running rental, and the account's spend limits, from the terminal.
    let cap = cli(&app, &me, &["cap", &id, "--max-cost", "100", "--max-hours", "5"], "").await;
    assert_eq!(cap.code, 0, "{cap}");
    assert!(cap.out.contains("max cost $100.00, max duration 5.00 h"), "{cap}");
    let limits = cli(&app, &me, &["limits", "--daily", "50"], "").await;
    assert_eq!(limits.code, 0, "{limits}");
    assert!(limits.out.contains("of $50.00") && limits.out.contains("of none"), "{limits}");
    let limits = cli(&app, &me, &["limits", "--monthly", "300", "--json"], "").await;
    assert_eq!(
        limits.json()["limits"],
        serde_json::json!({"daily_limit_micros": 50_000_000, "monthly_limit_micros": 300_000_000})
    );
    let bad = cli(&app, &me, &["limits", "--daily", "lots"], "").await;
    assert_eq!(bad.code, 8, "{bad}");
    let cleared = cli(&app, &me, &["limits", "--daily", "none", "--monthly", "none", "--json"], "").await;
    assert_eq!(cleared.json()["limits"], serde_json::json!({"daily_limit_micros": null, "monthly_limit_micros": null}));
    // Webhooks from the terminal: this test server allows no local receiver, so the add is
    // refused with the API's message (exit 8); one made through the API is listed, tested
    // and removed.
    let refused = cli(&app, &me, &["webhooks", "add", "http://127.0.0.1:9/hook"], "").await;
    assert_eq!(refused.code, 8, "{refused}");
    assert!(refused.err.contains("https://"), "{refused}");
    let added = cli(&app, &me, &["webhooks", "add", "https://hooks.example.com/cardpool", "--json"], "").await;
    assert_eq!(added.code, 0, "{added}");
    assert!(added.json()["secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "{added}");
    let hook = added.json()["id"].as_i64().unwrap().to_string();
    let listed = cli(&app, &me, &["webhooks", "ls"], "").await;
    assert!(listed.out.contains("https://hooks.example.com/cardpool") && !listed.out.contains("whsec_"), "{listed}");
    let test = cli(&app, &me, &["webhooks", "test", &hook], "").await;
    assert!(test.code == 0 && test.out.contains("Test event queued"), "{test}");
    let log = cli(&app, &me, &["webhooks", "log", &hook], "").await;
    assert!(log.code == 0 && log.out.contains("test"), "{log}");
    let removed = cli(&app, &me, &["webhooks", "rm", &hook], "").await;
    assert!(removed.code == 0 && removed.out.contains("deleted"), "{removed}");
    let gone = cli(&app, &me, &["webhooks", "test", &hook], "").await;
    assert_eq!(gone.code, 5, "{gone}");
    let told = cli(&app, &me, &["notifications", "--json"], "").await;
    assert!(
        told.json()["items"].as_array().is_some_and(|n| n.iter().any(|n| n["event"] == "rental.state_changed")),
        "{told}"
    );

    // Stop it: settled, and ssh says there is nothing to get into.
    let stop = cli(&app, &me, &["stop", &id, "--wait"], "").await;
    assert_eq!(stop.code, 0, "{stop}");
    assert!(stop.out.contains(&format!("Rental {id} is ")) && stop.out.contains("charged $"), "{stop}");
    let again = cli(&app, &me, &["stop", &id], "").await;
    assert_eq!(again.code, 6, "stopping an ended rental is a conflict: {again}");
    let ssh = cli(&app, &me, &["ssh", &id], "").await;
    assert_eq!(ssh.code, 6, "{ssh}");
    let missing = cli(&app, &me, &["show", "999999"], "").await;
    assert_eq!(missing.code, 5, "{missing}");
    let missing = cli(&app, &me, &["--json", "show", "999999"], "").await;
    let body: Value = serde_json::from_str(missing.err.trim()).unwrap_or_else(|e| panic!("{e}: {missing}"));
    assert_eq!(body["error"], "not_found", "{missing}");

    // The wallet shows what the rental cost; a top-up gives a Checkout URL to pay at.
    let wallet = cli(&app, &me, &["wallet", "--json"], "").await;
    let balance = wallet.json()["balance_micros"].as_i64().unwrap();
    assert!(balance < 20_000_000 && balance > 0, "{wallet}");
    let top_up = cli(&app, &me, &["top-up", "25"], "").await;
    assert_eq!(top_up.code, 0, "{top_up}");
    assert!(top_up.out.contains("of $25.00") && top_up.out.contains("checkout"), "{top_up}");

    // A poor renter on the same machine, with their own config: top up first (exit 7).
    let poor = scratch.path().join("poor");
    app.funded_renter("poor@example.com", 1).await;
    let login = cli(&app, &poor, &["login", "--email", "poor@example.com", "--password-stdin"], PASSWORD).await;
    assert_eq!(login.code, 0, "{login}");
    let broke = cli(&app, &poor, &["rent", "--host", &host_id], "").await;
    assert_eq!(broke.code, 7, "{broke}");
    assert!(broke.err.contains("short by $2.60"), "the API's own message: {broke}");

    // Logging out revokes the token on the server: a copy of it no longer works.
    let logout = cli(&app, &me, &["logout"], "").await;
    assert_eq!(logout.code, 0, "{logout}");
    assert!(!me.join("credentials.json").exists());
    let copied = cli(&app, &me, &["--token", &token, "whoami"], "").await;
    assert_eq!(copied.code, 3, "a revoked token: {copied}");
}
