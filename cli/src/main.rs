//! `cardpool-cli`: [`cardpool_cli::run`] on this process's terminal.

use std::{io::IsTerminal, process::ExitCode};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let mut input = std::io::stdin().lock();
    let terminal = std::io::stdin().is_terminal() || std::io::stdout().is_terminal();
    let mut console = cardpool_cli::Console { out: &mut out, err: &mut err, input: &mut input, terminal };
    ExitCode::from(cardpool_cli::run(std::env::args_os(), &mut console).await)
}
