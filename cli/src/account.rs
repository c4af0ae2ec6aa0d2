//! `login`, `logout`, `whoami`: the CLI's own personal API token.
//!
//! `login` signs in once with email and password (a session, as the browser does), makes a
//! token named after this machine, ends the session and saves only the token; the password
//! is never stored. `--token-stdin` saves a token made on the web instead. `logout` revokes
//! the token on the server, so a copied credentials file stops working too.

use crate::{
    Ctx,
    args::Login,
    credentials::{self, Credentials},
    failure::{Failure, Kind, Outcome},
};
use cardpool_domain::account::{ApiToken, CreateApiTokenRequest, CreatedApiToken, Me, SignInRequest};
use reqwest::Method;
use std::io::{BufRead, IsTerminal, Read};

pub async fn login(ctx: &mut Ctx<'_, '_>, login: &Login) -> Outcome {
    let (token, token_id, me) = if login.token_stdin {
        let token = read_line(ctx, None)?;
        if token.is_empty() {
            return Err(Failure::invalid("no token on stdin"));
        }
        let api = crate::Api::new(ctx.api.base(), Some(token.clone()), ctx.api.explains())?;
        ctx.api = api;
        let me: Me = ctx.get("/me").await?;
        let id = token_id(ctx, &token).await?;
        (token, id, me)
    } else {
        let email = match &login.email {
            Some(email) => email.clone(),
            None => read_line(ctx, Some("Email: "))?,
        };
        let password = if login.password_stdin {
            read_line(ctx, None)?
        } else if ctx.console.terminal && std::io::stdin().is_terminal() {
            rpassword::prompt_password("Password: ")?
        } else {
            return Err(Failure::invalid("no terminal to ask for the password on: pass --password-stdin"));
        };
        let me: Me = ctx.call(Method::POST, "/auth/sign-in", &SignInRequest { email, password }).await?;
        let name = login.name.clone().unwrap_or_else(default_token_name);
        let created: CreatedApiToken = ctx.call(Method::POST, "/tokens", &CreateApiTokenRequest { name }).await?;
        // The token is all the CLI keeps: the session it was made with ends now.
        ctx.api.send(&mut *ctx.console.err, Method::POST, "/auth/sign-out", None).await?;
        (created.secret, Some(created.token.id), me)
    };
    let saved = Credentials { url: ctx.api.base().to_owned(), token, token_id, email: Some(me.email.clone()) };
    let path = credentials::save(&ctx.config_dir, &saved)?;
    if ctx.json {
        return ctx.print_json(&me);
    }
    writeln!(ctx.console.out, "Logged in to {} as {}; token saved in {}", saved.url, me.email, path.display())?;
    Ok(())
}

pub async fn logout(ctx: &mut Ctx<'_, '_>, saved: Option<&Credentials>) -> Outcome {
    let id = match saved.and_then(|s| s.token_id) {
        Some(id) => Some(id),
        None => match saved {
            Some(saved) => token_id(ctx, &saved.token.clone()).await.unwrap_or(None),
            None => None,
        },
    };
    let revoked = match id {
        Some(id) => match ctx.api.send(&mut *ctx.console.err, Method::DELETE, &format!("/tokens/{id}"), None).await {
            Ok(_) => true,
            // Already revoked (on the web, or by an earlier logout): forgetting it is enough.
            Err(failure) if matches!(failure.kind, Kind::SignIn | Kind::NotFound) => false,
            Err(failure) => return Err(failure),
        },
        None => false,
    };
    let forgotten = credentials::remove(&ctx.config_dir)?;
    if ctx.json {
        return ctx.print_json(&serde_json::json!({"revoked": revoked, "forgotten": forgotten}));
    }
    let line = match (revoked, forgotten) {
        (true, _) => "Logged out: the token is revoked and forgotten.",
        (false, true) => "Logged out: the saved token was no longer valid; forgotten.",
        (false, false) => "Not logged in here (a token from CARDPOOL_TOKEN is revoked on the web).",
    };
    writeln!(ctx.console.out, "{line}")?;
    Ok(())
}

pub async fn whoami(ctx: &mut Ctx<'_, '_>) -> Outcome {
    let me: Me = ctx.get("/me").await?;
    if ctx.json {
        return ctx.print_json(&me);
    }
    let roles: Vec<&str> = [("renter", me.roles.renter), ("provider", me.roles.provider), ("admin", me.roles.admin)]
        .into_iter()
        .filter_map(|(name, has)| has.then_some(name))
        .collect();
    writeln!(ctx.console.out, "{} ({}) on {}", me.email, roles.join(", "), ctx.api.base())?;
    Ok(())
}

/// The server's id of `secret`: the token whose shown prefix starts it.
async fn token_id(ctx: &mut Ctx<'_, '_>, secret: &str) -> Outcome<Option<i64>> {
    let tokens: Vec<ApiToken> = ctx.get("/tokens").await?;
    Ok(tokens.into_iter().filter(|t| secret.starts_with(&t.prefix)).max_by_key(|t| t.prefix.len()).map(|t| t.id))
}

/// One line of input, trimmed; `prompt` is shown first, on stderr.
fn read_line(ctx: &mut Ctx<'_, '_>, prompt: Option<&str>) -> Outcome<String> {
    if let Some(prompt) = prompt {
        write!(ctx.console.err, "{prompt}")?;
        ctx.console.err.flush()?;
    }
    let mut line = String::new();
    // Bounded: a line longer than any email, password or token is refused.
    let read = (&mut *ctx.console.input).take(4097).read_line(&mut line)?;
    if read > 4096 {
        return Err(Failure::invalid("that line is longer than 4096 bytes"));
    }
    Ok(line.trim().to_owned())
}

fn default_token_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok());
    match host {
        Some(host) => format!("cardpool-cli on {host}"),
        None => "cardpool-cli".into(),
    }
}
