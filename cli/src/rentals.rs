//! `rent`, `ls`, `show`, `ssh`, `stop`, `bid`: a rental's life from a terminal.
//!
//! `rent` fills in the web's booking form (`BookingForm`) and lets the domain's own parser
//! check it, so a bad bid or window is refused here with the message the page would show,
//! before anything is sent. `ssh` runs the renter's OpenSSH client with the way in the API
//! gives (`RentalDetail::ssh`): Cardpool's gateway, user `r<id>`.

use crate::{
    Ctx,
    args::{Kind as KindArg, List, Rent, Ssh, Stop},
    failure::{Failure, Kind, Outcome},
    market, table,
};
use cardpool_domain::{
    money,
    offers::{OfferQuery, RentalKind},
    rentals::{BookingForm, ChangeBidRequest, Rental, RentalDetail, RentalState},
};
use reqwest::Method;
use std::time::{Duration, Instant};

/// What a rental runs when neither `--command` nor `--image` is given: nothing but itself,
/// so the renter can ssh in.
const IDLE_COMMAND: &str = "sleep infinity";

pub async fn rent(ctx: &mut Ctx<'_, '_>, rent: &Rent) -> Outcome {
    let kind = match (rent.kind, &rent.bid, rent.start.is_some() || rent.hours.is_some()) {
        (_, Some(_), true) => return Err(Failure::invalid("a rental is spot (--bid) or reserved (--start), not both")),
        (KindArg::OnDemand | KindArg::Spot, Some(_), false) => RentalKind::Spot,
        (KindArg::OnDemand | KindArg::Reserved, None, true) => RentalKind::Reserved,
        (kind, _, _) => kind.domain(),
    };
    let gpu_model = rent.offer.gpu_model(ctx).await?;
    let ssh_public_key = match &rent.ssh_key {
        Some(path) => public_key(path)?,
        None => String::new(),
    };
    let command = match (&rent.command, &rent.image) {
        (None, None) => IDLE_COMMAND.to_owned(),
        (command, _) => command.clone().unwrap_or_default(),
    };
    let form = BookingForm {
        host_id: rent.offer.host,
        gpu_model,
        kind: kind.as_str().to_owned(),
        gpu_count: rent.gpus.to_string(),
        command,
        image: rent.image.clone().unwrap_or_default(),
        env: rent.env.join("\n"),
        ssh_public_key,
        bid: rent.bid.clone().unwrap_or_default(),
        starts_at: rent.start.clone().unwrap_or_default(),
        hours: rent.hours.clone().unwrap_or_default(),
        stop_when_idle: rent.stop_when_idle.then(|| "on".to_owned()),
        max_cost: rent.max_cost.clone().unwrap_or_default(),
        max_hours: rent.max_hours.clone().unwrap_or_default(),
    };
    let request = form.parse()?;
    let booked: Rental = ctx.call(Method::POST, "/rentals", &request).await?;
    let rental =
        if rent.wait { wait_for(ctx, booked.id, Duration::from_secs(rent.wait_secs), false).await? } else { booked };
    if ctx.json {
        return ctx.print_json(&rental);
    }
    let price = table::dollars(rental.price_micros);
    writeln!(
        ctx.console.out,
        "Rental {} is {}: {}x {} on {} at {price}/GPU-hour.",
        rental.id,
        rental.state.as_str(),
        rental.gpu_count,
        rental.gpu_model,
        rental.host_label
    )?;
    writeln!(
        ctx.console.out,
        "  watch:  cardpool-cli show {id}\n  ssh:    cardpool-cli ssh {id}\n  stop:   cardpool-cli stop {id}",
        id = rental.id
    )?;
    Ok(())
}

/// The one GPU model `host` offers, or a clear refusal.
impl crate::args::OfferChoice {
    /// The model asked for, or the host's only one.
    pub(crate) async fn gpu_model(&self, ctx: &mut Ctx<'_, '_>) -> Outcome<String> {
        if let Some(model) = &self.gpu_model {
            return Ok(model.clone());
        }
        let host = self.host;
        let query = OfferQuery { host_id: Some(host), per_page: Some(100), ..OfferQuery::default() };
        let mut models: Vec<String> =
            market::search(ctx, &query).await?.offers.into_iter().map(|o| o.gpu_model).collect();
        models.dedup();
        match models.len() {
            1 => Ok(models.remove(0)),
            0 => Err(Failure::new(
                Kind::NotFound,
                format!("host {host} has no offers now (offline, not listed or every GPU taken)"),
            )),
            _ => Err(Failure::invalid(format!(
                "host {host} offers several models; choose one with --gpu-model: {}",
                models.join(", ")
            ))),
        }
    }
}

/// An OpenSSH public key from `path`, refusing a private key.
fn public_key(path: &std::path::Path) -> Outcome<String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::invalid(format!("reading {}: {e}", path.display())))?;
    if text.contains("PRIVATE KEY") {
        return Err(Failure::invalid(format!("{} is a private key: give its .pub file", path.display())));
    }
    Ok(text.trim().to_owned())
}

/// Polls the rental until it runs (or, with `until_settled`, until it is over), showing each
/// new state on stderr; a rental that ends while waiting to run is a failure.
async fn wait_for(ctx: &mut Ctx<'_, '_>, id: i64, within: Duration, until_settled: bool) -> Outcome<Rental> {
    let deadline = Instant::now() + within;
    let mut shown = None;
    loop {
        let detail: RentalDetail = ctx.get(&format!("/rentals/{id}")).await?;
        let rental = detail.rental;
        if shown != Some(rental.state) {
            writeln!(ctx.console.err, "rental {id}: {}", rental.state.as_str())?;
            shown = Some(rental.state);
        }
        let done = if until_settled { rental.state.is_terminal() } else { rental.state == RentalState::Running };
        if done {
            return Ok(rental);
        }
        if !until_settled && rental.state.is_terminal() {
            let why = detail.events.last().map(|e| e.reason.clone()).unwrap_or_default();
            return Err(Failure::new(
                Kind::Conflict,
                format!("rental {id} is {} before running: {why}", rental.state.as_str()),
            ));
        }
        if Instant::now() >= deadline {
            return Err(Failure::new(
                Kind::Unavailable,
                format!("rental {id} is still {} after {} s", rental.state.as_str(), within.as_secs()),
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn list(ctx: &mut Ctx<'_, '_>, list: &List) -> Outcome {
    let mut rentals: Vec<Rental> = ctx.get("/rentals").await?;
    if list.live {
        rentals.retain(Rental::is_live);
    }
    if ctx.json {
        return ctx.print_json(&rentals);
    }
    if rentals.is_empty() {
        writeln!(ctx.console.out, "No rentals yet: find GPUs with `cardpool-cli offers`.")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = rentals
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.state.as_str().to_owned(),
                r.kind.as_str().to_owned(),
                format!("{}x {}", r.gpu_count, r.gpu_model),
                r.host_label.clone(),
                table::dollars(r.price_micros),
                table::dollars(r.accrued_micros.max(r.charged_micros)),
                table::time(r.starts_at),
            ]
        })
        .collect();
    let headers = ["ID", "STATE", "KIND", "GPUS", "HOST", "PRICE/GPU-H", "COST", "STARTS"];
    table::print(ctx.console.out, &headers, &rows)?;
    Ok(())
}

pub async fn show(ctx: &mut Ctx<'_, '_>, id: i64) -> Outcome {
    let detail: RentalDetail = ctx.get(&format!("/rentals/{id}")).await?;
    if ctx.json {
        return ctx.print_json(&detail);
    }
    let r = &detail.rental;
    let out = &mut *ctx.console.out;
    writeln!(out, "Rental {}: {} ({})", r.id, r.state.label(), r.kind.as_str())?;
    writeln!(out, "  GPUs:     {}x {} (devices {:?}) on {}", r.gpu_count, r.gpu_model, r.gpu_indexes, r.host_label)?;
    let bid = r.bid_micros.map(|b| format!(", bid {}", table::dollars(b))).unwrap_or_default();
    writeln!(out, "  Price:    {}/GPU-hour{bid}", table::dollars(r.price_micros))?;
    writeln!(
        out,
        "  So far:   {} for {} run",
        table::dollars(r.accrued_micros.max(r.charged_micros)),
        table::duration(r.accrued_seconds.max(r.billed_seconds))
    )?;
    let ends = r.ends_at.map(|t| format!(", ends {}", table::time(t))).unwrap_or_default();
    writeln!(out, "  Window:   starts {}{ends}", table::time(r.starts_at))?;
    if let Some(command) = &r.workload.command {
        writeln!(out, "  Command:  {command}")?;
    }
    if let Some(image) = &r.workload.image {
        writeln!(out, "  Image:    {image}")?;
    }
    if let Some(notice) = &r.notice {
        writeln!(out, "  Notice:   {notice}")?;
    }
    if let Some(ssh) = detail.ssh.as_ref().filter(|_| r.is_live()) {
        writeln!(out, "  SSH:      {} (host key {})", ssh.command, ssh.host_key_fingerprint)?;
    }
    writeln!(out, "Timeline:")?;
    for event in &detail.events {
        writeln!(out, "  {}  {:<12}  {}", table::time(event.at), event.state.as_str(), event.reason)?;
    }
    Ok(())
}

pub async fn ssh(ctx: &mut Ctx<'_, '_>, ssh: &Ssh) -> Outcome {
    let detail: RentalDetail = ctx.get(&format!("/rentals/{}", ssh.rental)).await?;
    if !detail.rental.is_live() {
        return Err(Failure::new(
            Kind::Conflict,
            format!("rental {} is {}: nothing to ssh into", ssh.rental, detail.rental.state.as_str()),
        ));
    }
    let access = detail
        .ssh
        .ok_or_else(|| Failure::new(Kind::Unavailable, "this server runs no SSH gateway (ask its operator)"))?;
    let mut args: Vec<String> = vec!["-p".into(), access.port.to_string()];
    if let Some(identity) = &ssh.identity {
        args.extend(["-i".into(), identity.display().to_string()]);
    }
    for option in &ssh.options {
        args.extend(["-o".into(), option.clone()]);
    }
    for forward in &ssh.forwards {
        args.extend(["-L".into(), forward.clone()]);
    }
    // `--` before the destination: OpenSSH then reads every word after it as the remote
    // command (which it joins with spaces for the rental's shell), never as its own options.
    args.push("--".into());
    args.push(format!("{}@{}", access.user, access.host));
    args.extend(ssh.command.iter().cloned());
    if ssh.print || ctx.json {
        let line = std::iter::once("ssh".to_owned()).chain(args.iter().map(|a| shell_word(a))).collect::<Vec<_>>();
        if ctx.json {
            return ctx.print_json(&serde_json::json!({"argv": std::iter::once("ssh".to_owned()).chain(args).collect::<Vec<_>>(), "host_key_fingerprint": access.host_key_fingerprint}));
        }
        writeln!(ctx.console.out, "{}", line.join(" "))?;
        return Ok(());
    }
    writeln!(
        ctx.console.err,
        "Connecting to {}@{}:{} (gateway host key {})",
        access.user, access.host, access.port, access.host_key_fingerprint
    )?;
    let mut command = tokio::process::Command::new("ssh");
    command.args(&args).kill_on_drop(true);
    let status = if ctx.console.terminal {
        command.status().await
    } else {
        // No terminal of ours to lend (the tests): the output comes back through the console.
        command.stdin(std::process::Stdio::null());
        command.output().await.and_then(|output| {
            ctx.console.out.write_all(&output.stdout)?;
            ctx.console.err.write_all(&output.stderr)?;
            Ok(output.status)
        })
    }
    .map_err(|e| Failure::other(format!("running ssh (is OpenSSH's client installed?): {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Failure::other(format!("ssh exited with status {code}"))),
        None => Err(Failure::other("ssh was killed by a signal")),
    }
}

/// `raw` quoted for a POSIX shell only where it needs to be.
fn shell_word(raw: &str) -> String {
    let plain = !raw.is_empty() && raw.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@=,+".contains(c));
    if plain { raw.to_owned() } else { format!("'{}'", raw.replace('\'', r"'\''")) }
}

pub async fn stop(ctx: &mut Ctx<'_, '_>, stop: &Stop) -> Outcome {
    let stopped: Rental =
        ctx.call(Method::POST, &format!("/rentals/{}/stop", stop.rental), &serde_json::json!({})).await?;
    let rental = if stop.wait { wait_for(ctx, stopped.id, Duration::from_secs(120), true).await? } else { stopped };
    if ctx.json {
        return ctx.print_json(&rental);
    }
    writeln!(
        ctx.console.out,
        "Rental {} is {}; charged {} for {}.",
        rental.id,
        rental.state.as_str(),
        table::dollars(rental.charged_micros.max(rental.accrued_micros)),
        table::duration(rental.billed_seconds.max(rental.accrued_seconds))
    )?;
    Ok(())
}

pub async fn bid(ctx: &mut Ctx<'_, '_>, id: i64, bid: &str) -> Outcome {
    let bid_micros = money::parse_dollars(bid).map_err(|e| Failure::invalid(format!("bid: {e}")))?;
    let rental: Rental = ctx.call(Method::PUT, &format!("/rentals/{id}/bid"), &ChangeBidRequest { bid_micros }).await?;
    if ctx.json {
        return ctx.print_json(&rental);
    }
    writeln!(
        ctx.console.out,
        "Rental {} now bids {}/GPU-hour (clearing price {}).",
        rental.id,
        table::dollars(rental.bid_micros.unwrap_or(bid_micros)),
        table::dollars(rental.price_micros)
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_commands_paste_into_a_shell() {
        assert_eq!(shell_word("r42@127.0.0.1"), "r42@127.0.0.1");
        assert_eq!(shell_word("echo it's"), r"'echo it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn private_keys_are_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("id");
        std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n").unwrap();
        assert_eq!(public_key(&private).unwrap_err().kind, Kind::Invalid);
        let public = dir.path().join("id.pub");
        std::fs::write(&public, "ssh-ed25519 AAAA me@laptop\n").unwrap();
        assert_eq!(public_key(&public).unwrap(), "ssh-ed25519 AAAA me@laptop");
    }
}
