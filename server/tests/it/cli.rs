//! The `cardpool` binary as an operator runs it.

use std::process::Command;

fn cardpool() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cardpool"));
    for var in
        ["CARDPOOL_STRIPE_SECRET_KEY", "CARDPOOL_STRIPE_WEBHOOK_SECRET", "CARDPOOL_STRIPE_LOCAL", "CARDPOOL_CONFIG"]
    {
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
