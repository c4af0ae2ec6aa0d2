//! SSH through Cardpool, end to end with Debian's OpenSSH client (SQLite and PostgreSQL): a
//! renter's key opens a shell and commands inside the rental's sandbox over the agent's own
//! connection, files go in and out with scp (SFTP and legacy) and sftp, a port inside the
//! rental is forwarded, and strangers, removed keys and ended rentals are refused.

use crate::common::TestApp;
use cardpool_server::{config::Config, workers};
use cardpool_service::{Settings, backend_tests, testing::Backend};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

/// The rental's workload: a web server on its own loopback, serving its workspace.
const WORKLOAD: &str = "echo serving; exec python3 -m http.server 8888 --bind 127.0.0.1 --directory /workspace";

/// A fresh Ed25519 key pair made by `ssh-keygen`; returns the private key's path.
pub(crate) async fn keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let made = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path)
        .output()
        .await
        .expect("ssh-keygen (Debian: openssh-client) is installed");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    path
}

pub(crate) fn public(key: &Path) -> String {
    std::fs::read_to_string(key.with_extension("pub")).unwrap().trim().to_owned()
}

/// The OpenSSH client, as a renter runs it, with the gateway's port.
pub(crate) struct Client {
    pub(crate) port: u16,
    pub(crate) known_hosts: PathBuf,
}

impl Client {
    fn options(&self, key: &Path) -> Vec<String> {
        let mut args: Vec<String> = ["-i"].map(String::from).to_vec();
        args.push(key.to_string_lossy().into_owned());
        for option in [
            "IdentitiesOnly=yes".to_owned(),
            "BatchMode=yes".into(),
            "StrictHostKeyChecking=accept-new".into(),
            format!("UserKnownHostsFile={}", self.known_hosts.display()),
            "ConnectTimeout=10".into(),
            "LogLevel=ERROR".into(),
        ] {
            args.push("-o".into());
            args.push(option);
        }
        args
    }

    pub(crate) async fn ssh(&self, key: &Path, user: &str, extra: &[&str], command: &str) -> Output {
        let mut ssh = tokio::process::Command::new("ssh");
        ssh.args(self.options(key)).arg("-p").arg(self.port.to_string()).args(extra);
        ssh.arg(format!("{user}@127.0.0.1")).arg(command).stdin(std::process::Stdio::null());
        tokio::time::timeout(Duration::from_secs(60), ssh.output()).await.expect("ssh in time").unwrap()
    }

    /// `scp`, SFTP-based unless `legacy` (`-O`: the scp protocol over exec).
    pub(crate) async fn scp(&self, key: &Path, from: &str, to: &str, legacy: bool) -> Output {
        let mut scp = tokio::process::Command::new("scp");
        scp.args(self.options(key)).arg("-P").arg(self.port.to_string());
        if legacy {
            scp.arg("-O");
        }
        tokio::time::timeout(Duration::from_secs(60), scp.arg(from).arg(to).output())
            .await
            .expect("scp in time")
            .unwrap()
    }
}

pub(crate) fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn a_renter_gets_into_the_rental_over_ssh(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 10, ..Config::default() };
    let app = TestApp::spawn_configured(backend, Settings::default(), config).await;
    workers::spawn(&app.services, Duration::from_secs(10), Duration::ZERO, Duration::from_secs(1));
    let scratch = std::env::temp_dir().join(format!("cardpool-ssh-{}-{backend:?}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let (host, _agent) = app.agent_host(1, scratch.join("rentals")).await;
    let (booked, account, stranger) =
        (keygen(&scratch, "booked").await, keygen(&scratch, "account").await, keygen(&scratch, "stranger").await);
    let client = Client { port: app.ssh_port, known_hosts: scratch.join("known_hosts") };

    // The renter puts a key on their account, and books with another.
    let renter = app.funded_renter("renter@example.com", 20).await;
    let res =
        renter.post(app.url("/api/v1/ssh-keys")).json(&json!({"public_key": public(&account)})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let added: Value = res.json().await.unwrap();
    assert_eq!(added["name"], "account", "named after the key's comment");
    let printed = tokio::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(account.with_extension("pub"))
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&printed.stdout).contains(added["fingerprint"].as_str().unwrap()),
        "ssh-keygen's fingerprint"
    );
    let twice =
        renter.post(app.url("/api/v1/ssh-keys")).json(&json!({"public_key": public(&account)})).send().await.unwrap();
    assert_eq!(twice.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let private = std::fs::read_to_string(&account).unwrap();
    let wrong = renter.post(app.url("/api/v1/ssh-keys")).json(&json!({"public_key": private})).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNPROCESSABLE_ENTITY, "a private key is refused, not stored");

    let workload = json!({"command": WORKLOAD, "ssh_public_key": public(&booked)});
    let id = app.book_h100(&renter, host.state.host_id, workload).await;
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    let detail = app.get_json(&renter, &format!("/api/v1/rentals/{id}")).await;
    let access = &detail["ssh"];
    assert_eq!(access["command"], format!("ssh -p {} r{id}@127.0.0.1", app.ssh_port), "{detail}");
    let user = format!("r{id}");

    // A command, with its output, its errors and its exit status, inside the sandbox.
    let ran = client
        .ssh(&booked, &user, &[], "echo \"hello from $(hostname) as $(id -u)\"; echo \"gpus=$CUDA_VISIBLE_DEVICES\"; pwd; echo oops >&2; exit 7")
        .await;
    let out = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(ran.status.code(), Some(7), "{}", text(&ran));
    assert!(out.contains(&format!("hello from rental-{id} as 1000")), "{}", text(&ran));
    assert!(out.contains("gpus=GPU-") && out.contains("/workspace"), "{}", text(&ran));
    assert!(String::from_utf8_lossy(&ran.stderr).contains("oops"), "{}", text(&ran));
    // The host key the client learnt is the one the rental page shows.
    let learnt = tokio::process::Command::new("ssh-keygen").arg("-lf").arg(&client.known_hosts).output().await.unwrap();
    assert!(
        String::from_utf8_lossy(&learnt.stdout).contains(access["host_key_fingerprint"].as_str().unwrap()),
        "{learnt:?}"
    );

    // The account key opens it too; a terminal has the size the client asked for.
    let tty = client.ssh(&account, &user, &["-tt"], "stty size; test -t 0 && echo on-a-terminal").await;
    let out = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success() && out.contains("24 80") && out.contains("on-a-terminal"), "{}", text(&tty));

    // An interactive login shell on a terminal: what is typed runs, its exit ends the session.
    let mut login = tokio::process::Command::new("ssh");
    login.args(client.options(&account)).arg("-p").arg(app.ssh_port.to_string()).arg("-tt");
    login.arg(format!("{user}@127.0.0.1")).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut login = login.stderr(std::process::Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut typing = login.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut typing, b"echo \"answer=$((6 * 7)) in $PWD\"; exit 3\n").await.unwrap();
    let session = tokio::time::timeout(Duration::from_secs(30), login.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(session.status.code(), Some(3), "{}", text(&session));
    assert!(String::from_utf8_lossy(&session.stdout).contains("answer=42 in /workspace"), "{}", text(&session));
    drop(typing);

    // Files in and out: 3 MiB (three times the relay's window) with scp over SFTP, legacy scp
    // and sftp; the bytes come back identical.
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let local = scratch.join("data.bin");
    std::fs::write(&local, &data).unwrap();
    let remote = |path: &str| format!("{user}@127.0.0.1:{path}");
    let put = client.scp(&booked, &local.to_string_lossy(), &remote("/workspace/data.bin"), false).await;
    assert!(put.status.success(), "{}", text(&put));
    let back = scratch.join("back.bin");
    let got = client.scp(&booked, &remote("/workspace/data.bin"), &back.to_string_lossy(), true).await;
    assert!(got.status.success(), "{}", text(&got));
    assert!(std::fs::read(&back).unwrap() == data, "the file came back changed");
    let batch = scratch.join("batch");
    std::fs::write(
        &batch,
        format!(
            "put {} /workspace/via-sftp.bin\nls -l /workspace\nget /workspace/via-sftp.bin {}\n",
            local.display(),
            scratch.join("sftp.bin").display()
        ),
    )
    .unwrap();
    let mut sftp = tokio::process::Command::new("sftp");
    sftp.args(client.options(&booked))
        .arg("-P")
        .arg(app.ssh_port.to_string())
        .arg("-b")
        .arg(&batch)
        .arg(format!("{user}@127.0.0.1"));
    let listed = tokio::time::timeout(Duration::from_secs(60), sftp.output()).await.unwrap().unwrap();
    assert!(
        listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains("via-sftp.bin"),
        "{}",
        text(&listed)
    );
    assert!(std::fs::read(scratch.join("sftp.bin")).unwrap() == data);

    // A port inside the rental, forwarded: its web server answers with the uploaded file. The
    // same forward to the server's own port finds nothing: the rental's localhost is its own.
    let forwarded = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server_port = app.base.rsplit(':').next().unwrap().to_owned();
    let mut tunnel = tokio::process::Command::new("ssh");
    tunnel.args(client.options(&booked)).arg("-p").arg(app.ssh_port.to_string()).arg("-N");
    tunnel.arg("-L").arg(format!("{forwarded}:localhost:8888"));
    tunnel.arg("-L").arg(format!("{}:localhost:{server_port}", forwarded + 1));
    let mut tunnel = tunnel.arg(format!("{user}@127.0.0.1")).kill_on_drop(true).spawn().unwrap();
    let http = reqwest::Client::new();
    let served = crate::common::eventually(Duration::from_secs(15), "the forwarded port answering", async || {
        http.get(format!("http://127.0.0.1:{forwarded}/data.bin")).send().await.ok()?.bytes().await.ok()
    })
    .await;
    assert!(served.as_ref() == data.as_slice(), "the forwarded download differs");
    let host_port = http.get(format!("http://127.0.0.1:{}/healthz", forwarded + 1)).send().await;
    assert!(host_port.is_err(), "a forward reached the host's loopback: {host_port:?}");
    tunnel.kill().await.unwrap();

    // Refused: a stranger's key, the right key for another rental, a removed account key.
    let denied = |output: &Output| {
        output.status.code() == Some(255) && String::from_utf8_lossy(&output.stderr).contains("Permission denied")
    };
    assert!(denied(&client.ssh(&stranger, &user, &[], "true").await));
    assert!(denied(&client.ssh(&booked, &format!("r{}", id + 1000), &[], "true").await));
    assert!(denied(&client.ssh(&booked, "root", &[], "true").await));
    let key_id = added["id"].as_i64().unwrap();
    let res = renter.delete(app.url(&format!("/api/v1/ssh-keys/{key_id}"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert!(denied(&client.ssh(&account, &user, &[], "true").await), "a removed key still opens the rental");

    // A session open when the rental ends is closed; the rental can't be entered any more.
    let mut held = tokio::process::Command::new("ssh");
    held.args(client.options(&booked)).arg("-p").arg(app.ssh_port.to_string());
    held.arg(format!("{user}@127.0.0.1")).arg("sleep 600").stdin(std::process::Stdio::null());
    let held = held.kill_on_drop(true).spawn().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let res = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(20)).await;
    let ended = tokio::time::timeout(Duration::from_secs(20), held.wait_with_output()).await;
    assert!(ended.is_ok(), "the session outlived its rental");
    assert!(denied(&client.ssh(&booked, &user, &[], "true").await));
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Every key an address tries counts against the budget sign-in gives it: past it, even the
/// right key waits.
#[tokio::test]
async fn ssh_logins_are_throttled_per_source_address() {
    let mut settings = Settings::default();
    // Shared with the sign-ins the test makes over HTTP from the same address.
    settings.sign_in_limits.per_ip.max = 8;
    let app = TestApp::spawn_configured(Backend::Sqlite, settings, Config::default()).await;
    let scratch = std::env::temp_dir().join(format!("cardpool-ssh-throttle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let (host, _agent) = app.agent_host(1, scratch.join("rentals")).await;
    let key = keygen(&scratch, "key").await;
    let renter = app.funded_renter("renter@example.com", 20).await;
    let workload = json!({"command": "exec sleep 600", "ssh_public_key": public(&key)});
    let id = app.book_h100(&renter, host.state.host_id, workload).await;
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    let client = Client { port: app.ssh_port, known_hosts: scratch.join("known_hosts") };
    let user = format!("r{id}");
    let first = client.ssh(&key, &user, &[], "true").await;
    assert!(first.status.success(), "{}", text(&first));
    let mut logins = 1;
    loop {
        let ran = client.ssh(&key, &user, &[], "true").await;
        if !ran.status.success() {
            assert_eq!(ran.status.code(), Some(255), "{}", text(&ran));
            break;
        }
        logins += 1;
        assert!(logins <= 8, "{logins} logins from one address were never throttled");
    }
    let again = client.ssh(&key, &user, &[], "true").await;
    assert_eq!(again.status.code(), Some(255), "the right key waits too: {}", text(&again));
    let _ = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir_all(&scratch);
}

backend_tests!(a_renter_gets_into_the_rental_over_ssh);
