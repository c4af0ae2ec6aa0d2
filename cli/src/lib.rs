//! `cardpool-cli`: what renters live in when they are not in the browser.
//!
//! A thin client of the JSON API (`/api/v1`): every request and answer is one of
//! `cardpool_domain`'s types, the same the server serialises, so a field renamed on one side
//! fails to compile on the other instead of drifting. Commands print tables and sentences for
//! people, or the API's JSON with `--json`; `--explain` shows each HTTP request as `curl`;
//! failures exit with a documented code per kind ([`failure::EXIT_CODES`]).
//!
//! [`run`] is the whole program with its terminal passed in ([`Console`]), so the tests drive
//! it exactly as `main` does, against a real server.

mod account;
pub mod api;
pub mod args;
pub mod credentials;
pub mod failure;
mod limits;
mod logs;
mod market;
mod rentals;
mod table;
mod wallet;

use api::Api;
use args::{Cli, Command};
use clap::Parser;
use failure::{Failure, Kind, Outcome};
use std::{
    ffi::OsString,
    io::{BufRead, Write},
    path::PathBuf,
};

/// The server when neither `--url` nor a saved login names one.
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000";

/// The program's terminal: where it writes and what it reads.
pub struct Console<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub input: &'a mut dyn BufRead,
    /// Whether child processes (`ssh`) may use the process's own terminal; when false their
    /// output is copied into `out` and `err` instead.
    pub terminal: bool,
}

/// What every command has: the parsed flags, the terminal and the API.
pub(crate) struct Ctx<'a, 'c> {
    pub console: &'c mut Console<'a>,
    pub api: Api,
    pub json: bool,
    pub config_dir: PathBuf,
}

impl Ctx<'_, '_> {
    /// Prints `value` as pretty JSON (the `--json` output of every command).
    pub fn print_json(&mut self, value: &impl serde::Serialize) -> Outcome {
        let text = serde_json::to_string_pretty(value).map_err(|e| Failure::other(e.to_string()))?;
        writeln!(self.console.out, "{text}")?;
        Ok(())
    }

    pub async fn get<T: serde::de::DeserializeOwned>(&mut self, path: &str) -> Outcome<T> {
        self.api.get(&mut *self.console.err, path).await
    }

    pub async fn call<T: serde::de::DeserializeOwned>(
        &mut self,
        method: reqwest::Method,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Outcome<T> {
        let body = serde_json::to_value(body).map_err(|e| Failure::other(e.to_string()))?;
        self.api.call(&mut *self.console.err, method, path, Some(&body)).await
    }
}

/// Runs the command line `args` (the program's name first) and returns the exit code.
pub async fn run(args: impl IntoIterator<Item = impl Into<OsString> + Clone>, console: &mut Console<'_>) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = write!(if err.use_stderr() { &mut *console.err } else { &mut *console.out }, "{}", err.render());
            return if err.use_stderr() { 2 } else { 0 };
        }
    };
    let json = cli.json;
    match dispatch(cli, console).await {
        Ok(()) => 0,
        Err(failure) => {
            if json {
                let body =
                    serde_json::json!({"error": failure.code(), "message": failure.message, "fields": failure.fields});
                let _ = writeln!(console.err, "{body}");
            } else {
                let _ = writeln!(console.err, "error: {failure}");
            }
            failure.exit_code()
        }
    }
}

async fn dispatch(cli: Cli, console: &mut Console<'_>) -> Outcome {
    let config_dir = credentials::config_dir(cli.config_dir.as_deref())?;
    let saved = match cli.token {
        Some(_) => None,
        None => credentials::load(&config_dir)?,
    };
    let url = cli.url.clone().or_else(|| saved.as_ref().map(|s| s.url.clone())).unwrap_or_else(|| DEFAULT_URL.into());
    let token = cli.token.clone().or_else(|| saved.as_ref().map(|s| s.token.clone()));
    let command = match cli.command {
        Command::Login(login) => {
            // Logging in (again) starts without the old token.
            let api = Api::new(&url, None, cli.explain)?;
            return account::login(&mut Ctx { console, api, json: cli.json, config_dir }, &login).await;
        }
        command => command,
    };
    if token.is_none() {
        return Err(Failure::new(Kind::SignIn, format!("not logged in to {url}")));
    }
    let api = Api::new(&url, token, cli.explain)?;
    let mut ctx = Ctx { console, api, json: cli.json, config_dir };
    match command {
        Command::Login(_) => Ok(()),
        Command::Logout => account::logout(&mut ctx, saved.as_ref()).await,
        Command::Whoami => account::whoami(&mut ctx).await,
        Command::Offers(query) => market::offers(&mut ctx, &query).await,
        Command::Rent(rent) => rentals::rent(&mut ctx, &rent).await,
        Command::List(list) => rentals::list(&mut ctx, &list).await,
        Command::Show { rental } => rentals::show(&mut ctx, rental).await,
        Command::Ssh(ssh) => rentals::ssh(&mut ctx, &ssh).await,
        Command::Logs(logs) => logs::logs(&mut ctx, &logs).await,
        Command::Stop(stop) => rentals::stop(&mut ctx, &stop).await,
        Command::Bid { rental, bid } => rentals::bid(&mut ctx, rental, &bid).await,
        Command::Wallet => wallet::wallet(&mut ctx).await,
        Command::TopUp { amount } => wallet::top_up(&mut ctx, &amount).await,
        Command::Limits(limits) => limits::limits(&mut ctx, &limits).await,
        Command::Cap(cap) => limits::cap(&mut ctx, &cap).await,
        Command::Notifications(list) => limits::notifications(&mut ctx, &list).await,
        Command::Advise(job) => market::advise(&mut ctx, &job).await,
        Command::Webhooks(command) => limits::webhooks(&mut ctx, &command).await,
    }
}
