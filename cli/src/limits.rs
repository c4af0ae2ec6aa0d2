//! `limits`, `cap`, `notifications` and `webhooks`: the budget the server enforces, what it
//! told you, and where else it tells it.
//!
//! `limits` with no flag shows the account's limits and spending; each flag changes only its
//! own limit (`none` removes it). `cap` sets one live rental's maximum cost or duration.

use crate::{
    Ctx,
    args::{Cap, Limits, Notifications, Webhooks},
    failure::{Failure, Outcome},
    table,
};
use cardpool_domain::{
    FieldErrors,
    limits::{RentalLimits, SpendLimits, SpendStatus, parse_optional_dollars, parse_optional_hours},
    notifications::{NewWebhook, NotificationPage, Webhook, WebhookDelivery},
    rentals::Rental,
};
use reqwest::Method;

/// A flag's new value: unchanged (flag absent), removed (`none`) or set.
fn change(
    raw: Option<&str>,
    current: Option<i64>,
    field: &str,
    read: fn(&str, &str, &mut FieldErrors) -> Option<i64>,
) -> Outcome<Option<i64>> {
    match raw.map(str::trim) {
        None => Ok(current),
        Some(none) if none.eq_ignore_ascii_case("none") => Ok(None),
        Some(value) => {
            let mut fields = FieldErrors::new();
            match read(value, field, &mut fields) {
                Some(v) if fields.is_empty() => Ok(Some(v)),
                _ => Err(Failure::invalid(format!(
                    "--{field}: {}",
                    fields.into_values().next().unwrap_or_else(|| "give a value or `none`".into())
                ))),
            }
        }
    }
}

fn limit(micros: Option<i64>) -> String {
    micros.map_or_else(|| "none".to_owned(), table::dollars)
}

pub async fn limits(ctx: &mut Ctx<'_, '_>, args: &Limits) -> Outcome {
    let mut status: SpendStatus = ctx.get("/limits").await?;
    if args.daily.is_some() || args.monthly.is_some() {
        let limits = SpendLimits {
            daily_limit_micros: change(
                args.daily.as_deref(),
                status.limits.daily_limit_micros,
                "daily",
                parse_optional_dollars,
            )?,
            monthly_limit_micros: change(
                args.monthly.as_deref(),
                status.limits.monthly_limit_micros,
                "monthly",
                parse_optional_dollars,
            )?,
        };
        status = ctx.call(Method::PUT, "/limits", &limits).await?;
    }
    if ctx.json {
        return ctx.print_json(&status);
    }
    let out = &mut *ctx.console.out;
    for (label, spent, of, resets) in [
        ("Today:     ", status.spent_today_micros, status.limits.daily_limit_micros, status.day_resets_at),
        ("This month:", status.spent_this_month_micros, status.limits.monthly_limit_micros, status.month_resets_at),
    ] {
        writeln!(out, "{label} {} spent of {} (resets {})", table::dollars(spent), limit(of), table::time(resets))?;
    }
    Ok(())
}

pub async fn cap(ctx: &mut Ctx<'_, '_>, args: &Cap) -> Outcome {
    let path = format!("/rentals/{}", args.rental);
    let detail: cardpool_domain::rentals::RentalDetail = ctx.get(&path).await?;
    let current = detail.rental.limits;
    let limits = RentalLimits {
        max_cost_micros: change(args.max_cost.as_deref(), current.max_cost_micros, "max-cost", parse_optional_dollars)?,
        max_duration_secs: change(
            args.max_hours.as_deref(),
            current.max_duration_secs,
            "max-hours",
            parse_optional_hours,
        )?,
    };
    let rental: Rental = ctx.call(Method::PUT, &format!("{path}/limits"), &limits).await?;
    if ctx.json {
        return ctx.print_json(&rental);
    }
    let hours =
        rental.limits.max_duration_secs.map_or_else(|| "none".to_owned(), |s| format!("{:.2} h", s as f64 / 3600.0));
    writeln!(
        ctx.console.out,
        "Rental {} ({}): max cost {}, max duration {}; {} billed so far.",
        rental.id,
        rental.state.as_str(),
        limit(rental.limits.max_cost_micros),
        hours,
        table::dollars(rental.charged_micros)
    )?;
    Ok(())
}

pub async fn notifications(ctx: &mut Ctx<'_, '_>, args: &Notifications) -> Outcome {
    let page: NotificationPage = ctx.get("/notifications").await?;
    if args.read
        && let Some(newest) = page.items.first()
    {
        let _: serde_json::Value =
            ctx.call(Method::POST, "/notifications/read", &serde_json::json!({ "up_to": newest.id })).await?;
    }
    if ctx.json {
        return ctx.print_json(&page);
    }
    let out = &mut *ctx.console.out;
    writeln!(out, "{} unread.", page.unread)?;
    for n in &page.items {
        let mark = if n.read { ' ' } else { '•' };
        writeln!(out, "{mark} {}  {}  {}", table::time(n.created_at), n.title, n.body)?;
    }
    Ok(())
}

pub async fn webhooks(ctx: &mut Ctx<'_, '_>, command: &Webhooks) -> Outcome {
    match command {
        Webhooks::List => {
            let hooks: Vec<Webhook> = ctx.get("/webhooks").await?;
            if ctx.json {
                return ctx.print_json(&hooks);
            }
            if hooks.is_empty() {
                writeln!(ctx.console.out, "No webhooks. Add one: cardpool-cli webhooks add https://...")?;
            }
            for hook in &hooks {
                writeln!(ctx.console.out, "{:>4}  {}  (since {})", hook.id, hook.url, table::time(hook.created_at))?;
            }
        }
        Webhooks::Add { endpoint } => {
            let hook: Webhook = ctx.call(Method::POST, "/webhooks", &NewWebhook { url: endpoint.clone() }).await?;
            if ctx.json {
                return ctx.print_json(&hook);
            }
            writeln!(
                ctx.console.out,
                "Webhook {} added for {}.\nSigning secret (shown only now): {}",
                hook.id,
                hook.url,
                hook.secret.unwrap_or_default()
            )?;
        }
        Webhooks::Remove { webhook } => {
            ctx.api.send(&mut *ctx.console.err, Method::DELETE, &format!("/webhooks/{webhook}"), None).await?;
            if !ctx.json {
                writeln!(ctx.console.out, "Webhook {webhook} deleted.")?;
            }
        }
        Webhooks::Test { webhook } => {
            let delivery: WebhookDelivery =
                ctx.call(Method::POST, &format!("/webhooks/{webhook}/test"), &serde_json::json!({})).await?;
            if ctx.json {
                return ctx.print_json(&delivery);
            }
            writeln!(
                ctx.console.out,
                "Test event queued (delivery {}); see: cardpool-cli webhooks log {webhook}",
                delivery.id
            )?;
        }
        Webhooks::Log { webhook } => {
            let log: Vec<WebhookDelivery> = ctx.get(&format!("/webhooks/{webhook}/deliveries")).await?;
            if ctx.json {
                return ctx.print_json(&log);
            }
            for d in &log {
                let answer = match (d.last_status, &d.last_error) {
                    (Some(status), _) => format!("HTTP {status}"),
                    (None, Some(error)) => error.clone(),
                    (None, None) => "-".to_owned(),
                };
                writeln!(
                    ctx.console.out,
                    "{:>6}  {:<24} {:<9} {} attempt(s)  {answer}  {}",
                    d.id,
                    d.event.as_str(),
                    d.state.as_str(),
                    d.attempts,
                    table::time(d.created_at)
                )?;
            }
        }
    }
    Ok(())
}
